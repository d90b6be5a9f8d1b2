// A Gaussian log-likelihood written with Eigen, fitted by Newton's method
// with dualrev's exact gradient and Hessian (dualrev/eigen.hpp).
//
// Data: n points x_i in R^d.  Parameters: the mean mu and the Cholesky
// factor L of the precision matrix (Sigma^-1 = L L^T), L lower triangular
// with diagonal exp(q) and strict lower part l, theta = [mu, q, l].  The
// negative log-likelihood, up to a constant, is
//     f(theta) = 1/2 sum_i |L^T (x_i - mu)|^2 - n sum_j q_j,
// written as Eigen code over a matrix of ad::real: D = X - 1 mu^T, then
// 1/2 |D L|_F^2.  Its minimum has a closed form (mu = the sample mean,
// Sigma = the sample covariance), which the example checks the fit
// against: it fails (exit 1) unless Newton converges there.
#include <dualrev/eigen.hpp>

#include <Eigen/Cholesky>
#include <Eigen/LU>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

using ad::real;

// theta's layout: mu (d), q (d), l (d(d-1)/2, column by column).
template <class T>
Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> factor(const T *theta, Eigen::Index d)
{
    using std::exp;
    Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> L =
        Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>::Zero(d, d);
    const T *q = theta + d, *l = q + d;
    for (Eigen::Index j = 0; j < d; j++) {
        L(j, j) = exp(q[j]);
        for (Eigen::Index i = j + 1; i < d; i++)
            L(i, j) = *l++;
    }
    return L;
}

// The negative log-likelihood, written once for double and ad::real.
template <class T>
T nll(const Eigen::MatrixXd &X, const T *theta)
{
    using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
    using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
    Eigen::Index n = X.rows(), d = X.cols();
    Eigen::Map<const Vec> mu(theta, d), q(theta + d, d);
    Mat L = factor(theta, d);
    Mat D = X.cast<T>().rowwise() - mu.transpose();
    return 0.5 * (D * L.template triangularView<Eigen::Lower>()).squaredNorm() -
           static_cast<double>(n) * q.sum();
}

}  // namespace

int main()
{
    const Eigen::Index n = 500, d = 3, p = d + d + d * (d - 1) / 2;

    // Data: x = m + C z, z standard normal (Box-Muller on a fixed stream).
    std::uint64_t state = 12345;
    auto uniform = [&state]() {
        state = state * 6364136223846793005u + 1442695040888963407u;
        return (static_cast<double>(state >> 11) + 0.5) * 0x1p-53;
    };
    Eigen::Vector3d m(1.0, -2.0, 0.5);
    Eigen::Matrix3d C;
    C << 1.0, 0.0, 0.0, 0.6, 0.8, 0.0, -0.3, 0.4, 0.5;
    Eigen::MatrixXd X(n, d);
    for (Eigen::Index i = 0; i < n; i++) {
        Eigen::Vector3d z;
        for (Eigen::Index j = 0; j < d; j++)
            z(j) = std::sqrt(-2 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
        X.row(i) = (m + C * z).transpose();
    }

    // Newton's method with the exact Hessian (ad::hessian), damped
    // (Levenberg) where the step would not decrease f.
    std::vector<double> theta(static_cast<std::size_t>(p), 0.0);
    auto f = [&X](const real *t, std::size_t) { return nll(X, t); };
    double lambda = 1e-3, fx = 0.0, gnorm = 0.0;
    int it = 0;
    for (; it < 100; it++) {
        ad::hessian_result h = ad::hessian(f, theta);
        fx = h.value;
        Eigen::Map<const Eigen::VectorXd> g(h.grad.data(), p);
        Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>
            H(h.hess.data(), p, p);
        gnorm = g.norm();
        if (gnorm < 1e-9 * static_cast<double>(n))
            break;
        for (;;) {
            Eigen::MatrixXd Hd = H;
            Hd.diagonal().array() += lambda;
            Eigen::LDLT<Eigen::MatrixXd> ldlt(Hd);
            Eigen::VectorXd step = ldlt.solve(-g);
            std::vector<double> next(theta);
            Eigen::Map<Eigen::VectorXd>(next.data(), p) += step;
            bool descent = ldlt.info() == Eigen::Success && g.dot(step) < 0;
            if (descent && nll(X, next.data()) < fx) {
                theta = next;
                lambda = lambda > 1e-12 ? lambda / 10 : lambda;
                break;
            }
            lambda *= 10;
            if (lambda > 1e12) {
                std::fprintf(stderr, "eigen_gaussian: no step decreases f\n");
                return 1;
            }
        }
    }

    // The closed form: the sample mean and covariance (1/n).
    Eigen::VectorXd mean = X.colwise().mean().transpose();
    Eigen::MatrixXd Dc = X.rowwise() - mean.transpose();
    Eigen::MatrixXd cov = Dc.transpose() * Dc / static_cast<double>(n);
    Eigen::MatrixXd L = factor(theta.data(), d);
    Eigen::MatrixXd fitted_cov = (L * L.transpose()).inverse();
    Eigen::Map<const Eigen::VectorXd> mu(theta.data(), d);
    double err_mu = (mu - mean).cwiseAbs().maxCoeff();
    double err_cov = (fitted_cov - cov).cwiseAbs().maxCoeff();

    std::printf("Newton: %d iterations, f = %.12g, |grad| = %.3g\n", it, fx, gnorm);
    std::printf("mean      fitted % .6f % .6f % .6f\n", mu(0), mu(1), mu(2));
    std::printf("          sample % .6f % .6f % .6f\n", mean(0), mean(1), mean(2));
    std::printf("covariance: largest difference from the sample covariance %.3g\n", err_cov);
    bool ok = it < 100 && err_mu < 1e-8 && err_cov < 1e-8;
    std::printf("%s\n", ok ? "OK: the maximum-likelihood estimate" : "FAIL");
    return ok ? 0 : 1;
}
