// ADBench GMM written as an Eigen user writes it (dualrev/eigen.hpp), for
// gmm-eigen-bench (gmm_eigen_bench.c): the objective of gmm/gmm.h with
// Eigen vectors and matrices of ad::real -- the means as a d x K matrix,
// each Q_k a lower triangular matrix, |Q_k (x_i - mu_k)|^2 as a triangular
// product's squaredNorm, log-sum-exp from maxCoeff and .array().exp() --
// and the same with the bridge to recorded matrices: each Q_k recorded
// once (ad::mat_make) and |Q_k (x_i - mu_k)|^2 as ad::mat_sqnorm.  The
// same source in double gives the plain time.
#include <dualrev/eigen.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <new>
#include <vector>

#include "gmm.h"

namespace {

constexpr double gmm_pi = 3.14159265359;  // ADBench's literal, as gmm_objective.h

template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;
template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class T>
T logsumexp(const Vec<T> &v)
{
    using std::log;
    T hi = v.maxCoeff();
    return log((v.array() - hi).exp().sum()) + hi;
}

// -n d/2 log(2 pi) - k C: the terms that are plain numbers.
double constants(const gmm_problem *p)
{
    double d = static_cast<double>(p->d), N = static_cast<double>(p->d + static_cast<std::size_t>(p->m) + 1);
    double lgamma_distrib = 0.25 * d * (d - 1) * std::log(gmm_pi);
    for (std::size_t j = 1; j <= p->d; j++)
        lgamma_distrib += std::lgamma(0.5 * N + 0.5 * (1.0 - static_cast<double>(j)));
    double C = N * d * (std::log(p->gamma) - 0.5 * std::log(2.0)) - lgamma_distrib;
    return -static_cast<double>(p->n * p->d) * 0.5 * std::log(2 * gmm_pi) -
           static_cast<double>(p->k) * C;
}

// bridge: |Q_k (x_i - mu_k)|^2 through recorded matrices (T = ad::real).
template <class T, bool bridge>
T gmm_eigen(const gmm_problem *p, const T *params)
{
    using Eigen::Index;
    Index d = static_cast<Index>(p->d), K = static_cast<Index>(p->k), n = static_cast<Index>(p->n);
    Index s = d * (d + 1) / 2;
    Eigen::Map<const Vec<T>> alpha(params, K);
    Eigen::Map<const Mat<T>> mu(params + K, d, K);           // column k: mu_k
    Eigen::Map<const Mat<T>> icf(params + K + K * d, s, K);  // column k: q_k, then l_k
    Eigen::Map<const Mat<double>> X(p->x, d, n);             // column i: x_i

    // Q_k: diagonal exp(q_k), strict lower part l_k column by column.
    std::vector<RowMat<T>> Q(static_cast<std::size_t>(K));
    Vec<T> sumq(K);
    T frob = T(0);
    for (Index k = 0; k < K; k++) {
        RowMat<T> &q = Q[static_cast<std::size_t>(k)];
        q = RowMat<T>::Zero(d, d);
        q.diagonal() = icf.col(k).head(d).array().exp();
        Index idx = d;
        for (Index c = 0; c < d; c++)
            for (Index r = c + 1; r < d; r++)
                q(r, c) = icf(idx++, k);
        sumq(k) = icf.col(k).head(d).sum();
        frob += q.diagonal().squaredNorm() + icf.col(k).tail(s - d).squaredNorm();
    }
    std::vector<ad::mat> M;
    if constexpr (bridge) {
        for (Index k = 0; k < K; k++)
            M.push_back(ad::mat_make(Q[static_cast<std::size_t>(k)]));
    }

    Vec<T> c = alpha + sumq, t(K);
    T slse = T(0);
    for (Index i = 0; i < n; i++) {
        for (Index k = 0; k < K; k++) {
            T sq;
            if constexpr (bridge)
                sq = ad::mat_sqnorm(M[static_cast<std::size_t>(k)], X.col(i) - mu.col(k));
            else
                sq = (Q[static_cast<std::size_t>(k)].template triangularView<Eigen::Lower>() *
                      (X.col(i) - mu.col(k)))
                         .squaredNorm();
            t(k) = c(k) - 0.5 * sq;
        }
        slse += logsumexp(t);
    }
    T prior = 0.5 * p->gamma * p->gamma * frob - static_cast<double>(p->m) * sumq.sum();
    return constants(p) + slse - static_cast<double>(n) * logsumexp(Vec<T>(alpha)) + prior;
}

}  // namespace

// Declared by gmm_eigen_bench.c.
extern "C" double gmm_eigen_objective(const gmm_problem *p, const double *params);
extern "C" ad_status gmm_eigen_gradient(const gmm_problem *p, int bridge, const double *params,
                                        double *fx, double *grad);

// The plain objective: the same source in double.
extern "C" double gmm_eigen_objective(const gmm_problem *p, const double *params)
{
    try {
        return gmm_eigen<double, false>(p, params);
    } catch (const std::bad_alloc &) {
        return std::numeric_limits<double>::quiet_NaN();
    }
}

// The gradient through ad::gradient, one recording of the whole objective;
// bridge: with the recorded matrices.  Exceptions end here: the caller is C.
extern "C" ad_status gmm_eigen_gradient(const gmm_problem *p, int bridge, const double *params,
                                        double *fx, double *grad)
{
    std::size_t inputs = gmm_inputs(p);
    ad_status st;
    try {
        if (bridge)
            *fx = ad::gradient([p](const ad::real *x, std::size_t) { return gmm_eigen<ad::real, true>(p, x); },
                               ad::array_view(params, inputs), ad::array_ref(grad, inputs));
        else
            *fx = ad::gradient([p](const ad::real *x, std::size_t) { return gmm_eigen<ad::real, false>(p, x); },
                               ad::array_view(params, inputs), ad::array_ref(grad, inputs));
        return AD_OK;
    } catch (const ad::error &e) {
        st = e.status();
    } catch (const std::bad_alloc &) {
        st = AD_ENOMEM;
    }
    *fx = std::numeric_limits<double>::quiet_NaN();
    for (std::size_t j = 0; j < inputs; j++)
        grad[j] = std::numeric_limits<double>::quiet_NaN();
    return st;
}
