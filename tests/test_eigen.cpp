// ad::real as an Eigen scalar (dualrev/eigen.hpp).
//
// Objectives written with Eigen -- vectors, matrices, .dot, matrix-vector
// and matrix-matrix products (the small lazy ones and Eigen's blocked
// kernel), reductions, .array() maps, PartialPivLU and LDLT solves, double
// matrices mixed in -- differentiated by ad::gradient (and ad::hessian),
// each against its closed form computed in plain double, and the solves
// against central differences as well.  Then the bridge to the recorded
// matrices (ad::mat_make, ad::mat_vec, ad::mat_sqnorm), its errors, and
// the constants and limits Eigen asks of a scalar.  Built only where meson
// finds eigen3.
#include <dualrev/eigen.hpp>

#include <Eigen/Cholesky>
#include <Eigen/LU>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
}

namespace {

using ad::real;
using Vec = Eigen::Matrix<real, Eigen::Dynamic, 1>;
using Mat = Eigen::Matrix<real, Eigen::Dynamic, Eigen::Dynamic>;
using RowMat = Eigen::Matrix<real, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Eigen::MatrixXd;
using Eigen::VectorXd;

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// ---- the layout is C's ----

static_assert(sizeof(real) == 16 && alignof(real) == alignof(double));
static_assert(std::is_trivially_copyable_v<real> && std::is_standard_layout_v<real> &&
              std::is_trivially_default_constructible_v<real>);
static_assert(std::is_convertible_v<double, real> && std::is_convertible_v<int, real>);
static_assert(Eigen::NumTraits<real>::IsComplex == 0 && Eigen::NumTraits<real>::IsInteger == 0);
static_assert(std::is_same_v<Eigen::ScalarBinaryOpTraits<real, double>::ReturnType, real>);
static_assert(std::is_same_v<Eigen::ScalarBinaryOpTraits<double, real>::ReturnType, real>);

// ---- helpers ----

std::uint64_t rng_next(std::uint64_t &state)
{
    std::uint64_t z = (state += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

double uniform(std::uint64_t &state, double lo, double hi)
{
    return lo + (hi - lo) * (static_cast<double>(rng_next(state) >> 11) * 0x1p-53);
}

VectorXd random_vector(std::uint64_t &state, Eigen::Index n, double lo, double hi)
{
    VectorXd v(n);
    for (Eigen::Index i = 0; i < n; i++)
        v(i) = uniform(state, lo, hi);
    return v;
}

MatrixXd random_matrix(std::uint64_t &state, Eigen::Index m, Eigen::Index n, double lo, double hi)
{
    MatrixXd a(m, n);
    for (Eigen::Index j = 0; j < n; j++)
        for (Eigen::Index i = 0; i < m; i++)
            a(i, j) = uniform(state, lo, hi);
    return a;
}

// |got - want| <= tol * max(1, |want|), entry by entry; NaN fails.
void check_close(const VectorXd &got, const VectorXd &want, double tol, const char *what,
                 const char *file, int line)
{
    if (got.size() != want.size()) {
        print_error("%s: %td entries, expected %td\n", what, got.size(), want.size());
        _fail(file, line);
    }
    for (Eigen::Index i = 0; i < got.size(); i++) {
        double scale = std::fabs(want(i)) > 1.0 ? std::fabs(want(i)) : 1.0;
        if (!(std::fabs(got(i) - want(i)) <= tol * scale)) {
            print_error("%s[%td]: %.17g, expected %.17g\n", what, i, got(i), want(i));
            _fail(file, line);
        }
    }
}
#define CHECK_CLOSE(got, want, tol, what) check_close((got), (want), (tol), (what), __FILE__, __LINE__)

void check_value(double got, double want, double tol, const char *what, const char *file, int line)
{
    double scale = std::fabs(want) > 1.0 ? std::fabs(want) : 1.0;
    if (!(std::fabs(got - want) <= tol * scale)) {
        print_error("%s: %.17g, expected %.17g\n", what, got, want);
        _fail(file, line);
    }
}
#define CHECK_VALUE(got, want, tol, what) check_value((got), (want), (tol), (what), __FILE__, __LINE__)

// An Eigen-written objective f(const Vec &) through ad::gradient.
struct grad_out {
    double value;
    VectorXd grad;
};

template <class F>
grad_out eigen_gradient(F &&f, const VectorXd &x)
{
    VectorXd g(x.size());
    double fx = ad::gradient(
        [&](const real *p, std::size_t n) {
            Eigen::Map<const Vec> v(p, static_cast<Eigen::Index>(n));
            return real(f(Vec(v)));
        },
        x, g);
    return {fx, g};
}

// f at x in plain double, through the same Eigen source on constants.
template <class F>
double eigen_value(F &&f, const VectorXd &x)
{
    return ad::value(f(Vec(x.cast<real>())));
}

// The central difference of f along each coordinate (step h).
template <class F>
VectorXd central_differences(F &&f, const VectorXd &x, double h)
{
    VectorXd g(x.size());
    for (Eigen::Index i = 0; i < x.size(); i++) {
        VectorXd xp = x, xm = x;
        xp(i) += h;
        xm(i) -= h;
        g(i) = (eigen_value(f, xp) - eigen_value(f, xm)) / (2 * h);
    }
    return g;
}

std::size_t last_records()
{
    return ad::tape_stats().records;
}

// ---- constructing, constants and limits ----

void test_construction(void **)
{
    real a = 2.5, b = 3, c(7L), d = std::size_t{9}, e = 0.5f, z{};
    assert_true(a.v == 2.5 && a.id == 0 && a.tag == 0);
    assert_true(b.v == 3.0 && b.id == 0 && c.v == 7.0 && d.v == 9.0 && e.v == 0.5);
    assert_true(z.v == 0.0 && z.id == 0 && z.tag == 0);
    real f = {1.5, 0, 0};
    assert_true(f.v == 1.5 && f.id == 0);
    a = 4;
    assert_true(a.v == 4.0 && a.id == 0);
    a = -1.25;
    assert_true(a.v == -1.25 && a.id == 0);

    Vec zero = Vec::Zero(4), ones = Vec::Ones(3), k = Vec::Constant(2, 2.5);
    for (Eigen::Index i = 0; i < 4; i++)
        assert_true(zero(i).v == 0.0 && zero(i).id == 0 && zero(i).tag == 0);
    assert_true(ones.sum().v == 3.0 && ones.sum().id == 0);
    assert_true(k(1).v == 2.5);
    Mat I = Mat::Identity(3, 3);
    assert_true(I(1, 1).v == 1.0 && I(0, 1).v == 0.0 && I.trace().v == 3.0);
    Vec lin = Vec::LinSpaced(5, 0.0, 1.0);
    assert_true(lin(4).v == 1.0 && lin(2).v == 0.5);
    Vec empty(0);
    assert_true(empty.sum().v == 0.0 && empty.squaredNorm().v == 0.0 && empty.prod().v == 1.0);
    assert_true(empty.dot(empty).v == 0.0);

    // The limits are double's, as constants.
    assert_true(Eigen::NumTraits<real>::epsilon().v == std::numeric_limits<double>::epsilon());
    assert_true(Eigen::NumTraits<real>::highest().v == std::numeric_limits<double>::max());
    assert_true(Eigen::NumTraits<real>::lowest().v == -std::numeric_limits<double>::max());
    assert_true(std::isnan(Eigen::NumTraits<real>::quiet_NaN().v));
    assert_true(std::numeric_limits<real>::min().v == std::numeric_limits<double>::min());
    assert_true(std::numeric_limits<real>::is_specialized && !std::numeric_limits<real>::is_integer);
    assert_true(Eigen::NumTraits<real>::digits10() == std::numeric_limits<double>::digits10);

    // Classification, allFinite and hasNaN.
    Vec v(3);
    v << 1.0, 2.0, 3.0;
    assert_true(v.allFinite() && !v.hasNaN());
    v(1) = nan;
    assert_true(!v.allFinite() && v.hasNaN());
    v(1) = std::numeric_limits<double>::infinity();
    assert_true(!v.allFinite() && !v.hasNaN() && isinf(v(1)) && !isnan(v(1)) && isfinite(v(0)));
}

// Constants alone record nothing: Eigen expressions of constants are
// constants (the recording holds what p[0] + 1 holds).
void test_constants_record_nothing(void **)
{
    (void)ad::gradient([](const real *p, std::size_t) { return p[0] + 1.0; },
                       std::vector<double>{1.0});
    std::size_t base = last_records();
    double fx = ad::gradient(
        [&](const real *p, std::size_t) {
            Vec c = Vec::Constant(5, 2.0);
            Mat m = Mat::Identity(5, 5) * 3.0;
            real k = (m * c).sum() + c.squaredNorm() + c.array().exp().sum() + c.norm();
            return p[0] + k;
        },
        std::vector<double>{1.0}).value;
    assert_true(last_records() == base);
    CHECK_VALUE(fx, 1.0 + 30.0 + 20.0 + 5 * std::exp(2.0) + std::sqrt(20.0), 1e-14,
                "constant value");
}

// ---- vectors: dot, reductions, maps ----

void test_dot_and_reductions(void **)
{
    std::uint64_t st = 1;
    for (Eigen::Index n : {1, 2, 7, 33}) {
        VectorXd x = random_vector(st, n, 0.2, 2.0), c = random_vector(st, n, -1.0, 1.0);
        auto f = [&](const Vec &v) {
            return v.dot(c.cast<real>()) + v.dot(v) + v.sum() + v.squaredNorm() + v.norm() +
                   v.mean() + c.cast<real>().dot(v);
        };
        grad_out r = eigen_gradient(f, x);
        double nx = x.norm();
        double want_f = 2 * c.dot(x) + 2 * x.squaredNorm() + x.sum() + nx + x.mean();
        VectorXd want_g = 2 * c + 4 * x + VectorXd::Ones(n) * (1.0 + 1.0 / static_cast<double>(n)) +
                          x / nx;
        CHECK_VALUE(r.value, want_f, 1e-13, "dot/reductions value");
        CHECK_CLOSE(r.grad, want_g, 1e-13, "dot/reductions gradient");
    }
    // prod, maxCoeff, minCoeff: the derivative goes to the chosen entry.
    VectorXd x(4);
    x << 1.5, -2.0, 3.0, 0.5;
    grad_out r = eigen_gradient(
        [](const Vec &v) { return v.prod() + v.maxCoeff() + 2.0 * v.minCoeff(); }, x);
    VectorXd want(4);
    double p = x.prod();
    for (Eigen::Index i = 0; i < 4; i++)
        want(i) = p / x(i);
    want(2) += 1.0;
    want(1) += 2.0;
    CHECK_VALUE(r.value, p + 3.0 - 4.0, 1e-15, "prod/max/min value");
    CHECK_CLOSE(r.grad, want, 1e-14, "prod/max/min gradient");
}

void test_array_maps(void **)
{
    std::uint64_t st = 2;
    VectorXd x = random_vector(st, 9, 0.1, 1.5);
    auto f = [](const Vec &v) {
        auto a = v.array();
        return a.exp().sum() + a.tanh().sum() + a.log().sum() + a.square().sum() +
               a.sqrt().sum() + a.sin().sum() + a.cos().sum() + a.abs().sum() + a.pow(2.5).sum() +
               a.inverse().sum() + (a * a * a).sum() + (2.0 * a + 1.0).log1p().sum() +
               a.abs2().sum() + a.cube().sum() + a.logistic().sum();
    };
    grad_out r = eigen_gradient(f, x);
    double want_f = 0;
    VectorXd want(x.size());
    for (Eigen::Index i = 0; i < x.size(); i++) {
        double t = x(i), th = std::tanh(t), s = 1 / (1 + std::exp(-t));
        want_f += std::exp(t) + th + std::log(t) + t * t + std::sqrt(t) + std::sin(t) +
                  std::cos(t) + t + std::pow(t, 2.5) + 1 / t + t * t * t +
                  std::log1p(2 * t + 1) + t * t + t * t * t + s;
        want(i) = std::exp(t) + (1 - th * th) + 1 / t + 2 * t + 0.5 / std::sqrt(t) + std::cos(t) -
                  std::sin(t) + 1 + 2.5 * std::pow(t, 1.5) - 1 / (t * t) + 3 * t * t +
                  2 / (2 * t + 2) + 2 * t + 3 * t * t + s * (1 - s);
    }
    CHECK_VALUE(r.value, want_f, 1e-13, "maps value");
    CHECK_CLOSE(r.grad, want, 1e-12, "maps gradient");

    // A map with a double array, coefficient-wise, without a cast.
    VectorXd w = random_vector(st, 9, -1.0, 1.0);
    grad_out r2 = eigen_gradient(
        [&](const Vec &v) { return (v.array() * w.array()).exp().sum() + (v + w).sum(); }, x);
    VectorXd want2 = (x.array() * w.array()).exp().matrix().cwiseProduct(w) +
                     VectorXd::Ones(x.size());
    CHECK_CLOSE(r2.grad, want2, 1e-13, "mixed map gradient");
}

// ---- products ----

void test_matrix_vector(void **)
{
    std::uint64_t st = 3;
    for (Eigen::Index n : {3, 12, 40}) {
        MatrixXd A = random_matrix(st, n, n, -1.0, 1.0);
        VectorXd x = random_vector(st, n, -1.0, 1.0), b = random_vector(st, n, -1.0, 1.0);
        // 0.5 x^T A x + b^T (A x) through a cast, and A x mixed directly
        auto f = [&](const Vec &v) {
            Vec Av = A.cast<real>() * v;
            return 0.5 * v.dot(Av) + b.cast<real>().dot(Av) + (A * v).sum();
        };
        grad_out r = eigen_gradient(f, x);
        VectorXd want = 0.5 * (A + A.transpose()) * x + A.transpose() * b +
                        A.transpose() * VectorXd::Ones(n);
        CHECK_VALUE(r.value, 0.5 * x.dot(A * x) + b.dot(A * x) + (A * x).sum(), 1e-12, "A x value");
        CHECK_CLOSE(r.grad, want, 1e-12, "A x gradient");

        // The Hessian of the same, through ad::hessian: (A + A^T) / 2.
        auto h = ad::hessian(
            [&](const real *p, std::size_t m) {
                return f(Vec(Eigen::Map<const Vec>(p, static_cast<Eigen::Index>(m))));
            },
            x);
        Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> H(
            h.hess.data(), n, n);
        MatrixXd want_h = 0.5 * (A + A.transpose());
        for (Eigen::Index i = 0; i < n; i++)
            CHECK_CLOSE(VectorXd(H.row(i).transpose()), VectorXd(want_h.row(i).transpose()), 1e-13,
                        "Hessian row");
    }
}

void test_matrix_matrix(void **)
{
    std::uint64_t st = 4;
    // small (lazy, coefficient-based) and large (Eigen's blocked kernel)
    for (Eigen::Index n : {3, 24}) {
        Eigen::Index m = n + 1, k = n + 2;
        MatrixXd X0 = random_matrix(st, m, k, -1.0, 1.0), B = random_matrix(st, k, n, -1.0, 1.0),
                 W = random_matrix(st, m, n, -1.0, 1.0), S = random_matrix(st, m, m, -1.0, 1.0);
        VectorXd x = Eigen::Map<const VectorXd>(X0.data(), m * k);
        // sum(W .* (X B)) + sum(S .* (X X^T)): d/dX = W B^T + (S + S^T) X
        auto f = [&](const Vec &v) {
            Eigen::Map<const Mat> X(v.data(), m, k);
            Mat XB = X * B.cast<real>();
            Mat XXt = X * X.transpose();
            return XB.cwiseProduct(W.cast<real>()).sum() + (S.cast<real>().array() * XXt.array()).sum();
        };
        grad_out r = eigen_gradient(f, x);
        MatrixXd G = W * B.transpose() + (S + S.transpose()) * X0;
        CHECK_VALUE(r.value,
                    (X0 * B).cwiseProduct(W).sum() + (S.array() * (X0 * X0.transpose()).array()).sum(),
                    1e-12, "X B value");
        CHECK_CLOSE(r.grad, Eigen::Map<const VectorXd>(G.data(), m * k), 1e-12, "X B gradient");

        // triangular products: |L y|^2 with L = lower part of X X^T's block
        VectorXd y = random_vector(st, m, -1.0, 1.0);
        auto g = [&](const Vec &v) {
            Eigen::Map<const Mat> X(v.data(), m, k);
            Mat L = X.leftCols(m);
            Vec Ly = L.triangularView<Eigen::Lower>() * y.cast<real>();
            return Ly.squaredNorm();
        };
        grad_out rg = eigen_gradient(g, x);
        MatrixXd L0 = X0.leftCols(m).triangularView<Eigen::Lower>();
        VectorXd Ly = L0 * y;
        MatrixXd GL = MatrixXd::Zero(m, k);
        GL.leftCols(m) = (2 * Ly * y.transpose()).triangularView<Eigen::Lower>();
        CHECK_VALUE(rg.value, Ly.squaredNorm(), 1e-13, "L y value");
        CHECK_CLOSE(rg.grad, Eigen::Map<const VectorXd>(GL.data(), m * k), 1e-13, "L y gradient");
    }
}

// ---- solves ----

// f(p) = c^T A(p)^-1 b, A(p) = A0 + diag(p): df/dp_i = -lambda_i z_i with
// z = A^-1 b, lambda = A^-T c.
void test_lu_solve(void **)
{
    std::uint64_t st = 5;
    for (Eigen::Index n : {4, 40}) {
        MatrixXd A0 = random_matrix(st, n, n, -1.0, 1.0);
        VectorXd b = random_vector(st, n, -1.0, 1.0), c = random_vector(st, n, -1.0, 1.0);
        VectorXd p = random_vector(st, n, 2.0, 3.0);
        auto f = [&](const Vec &q) {
            Mat A = A0.cast<real>();
            A.diagonal() += q;
            Eigen::PartialPivLU<Mat> lu(A);
            Vec z = lu.solve(b.cast<real>());
            return c.cast<real>().dot(z);
        };
        grad_out r = eigen_gradient(f, p);
        MatrixXd A = A0;
        A.diagonal() += p;
        Eigen::PartialPivLU<MatrixXd> lu(A);
        VectorXd z = lu.solve(b), lambda = lu.transpose().solve(c);
        VectorXd want = -lambda.cwiseProduct(z);
        CHECK_VALUE(r.value, c.dot(z), 1e-12, "LU value");
        CHECK_CLOSE(r.grad, want, 1e-11, "LU gradient");
        CHECK_CLOSE(r.grad, central_differences(f, p, 1e-6), 1e-7, "LU central differences");
    }
}

// f(p) = b^T A(p)^-1 b, A(p) = M M^T + diag(exp(p)) (symmetric positive
// definite): df/dp_i = -z_i^2 exp(p_i).  Also the determinant (log|A| has
// gradient diag(A^-1) exp(p)).
void test_ldlt_solve(void **)
{
    std::uint64_t st = 6;
    for (Eigen::Index n : {5, 30}) {
        MatrixXd M = random_matrix(st, n, n, -1.0, 1.0);
        VectorXd b = random_vector(st, n, -1.0, 1.0), p = random_vector(st, n, -0.5, 0.5);
        MatrixXd S = M * M.transpose();
        auto f = [&](const Vec &q) {
            Mat A = S.cast<real>();
            A.diagonal() += q.array().exp().matrix();
            Eigen::LDLT<Mat> ldlt(A);
            Vec z = ldlt.solve(b.cast<real>());
            return b.cast<real>().dot(z) + ldlt.vectorD().array().log().sum();
        };
        grad_out r = eigen_gradient(f, p);
        MatrixXd A = S;
        A.diagonal() += p.array().exp().matrix();
        MatrixXd Ainv = A.inverse();
        VectorXd z = Ainv * b;
        VectorXd want = (-z.array().square() + Ainv.diagonal().array()) * p.array().exp();
        CHECK_VALUE(r.value, b.dot(z) + std::log(A.determinant()), 1e-10, "LDLT value");
        CHECK_CLOSE(r.grad, want, 1e-10, "LDLT gradient");
        CHECK_CLOSE(r.grad, central_differences(f, p, 1e-6), 1e-6, "LDLT central differences");
    }
}

// ---- edge cases ----

void test_edges(void **)
{
    // the norm at 0: sqrt's partial +Inf times 0 (conventions.md): NaN
    grad_out r = eigen_gradient([](const Vec &v) { return v.norm(); }, VectorXd::Zero(3));
    assert_true(r.value == 0.0 && std::isnan(r.grad(0)));
    // squaredNorm at 0 is smooth
    r = eigen_gradient([](const Vec &v) { return v.squaredNorm(); }, VectorXd::Zero(3));
    assert_true(r.value == 0.0 && r.grad.isZero(0.0));
    // a NaN input reaches only what depends on it
    VectorXd x(2);
    x << nan, 1.0;
    r = eigen_gradient([](const Vec &v) { return v(0) * 0.0 + v(1) * v(1); }, x);
    assert_true(std::isnan(r.value) && r.grad(1) == 2.0);
    // one entry, and 0 x 0 products
    r = eigen_gradient([](const Vec &v) { return (v * v.transpose()).trace(); }, VectorXd::Constant(1, 3.0));
    assert_true(r.value == 9.0 && r.grad(0) == 6.0);
    Mat empty(0, 0);
    assert_true((empty * empty).size() == 0 && (empty * Vec(0)).sum().v == 0.0);
    // an Eigen objective that fails: AD_EFOREIGN for a value kept from an
    // earlier recording
    Vec kept;
    (void)eigen_gradient([&](const Vec &v) { kept = v * 2.0; return kept.sum(); }, VectorXd::Ones(2));
    bool thrown = false;
    try {
        (void)eigen_gradient([&](const Vec &v) { return (v + kept).sum(); }, VectorXd::Ones(2));
    } catch (const ad::error &e) {
        thrown = e.status() == AD_EFOREIGN;
    }
    assert_true(thrown);
}

// ---- the bridge to recorded matrices ----

void test_bridge(void **)
{
    std::uint64_t st = 7;
    Eigen::Index m = 6, n = 5;
    MatrixXd A0 = random_matrix(st, m, n, -1.0, 1.0);
    VectorXd x0 = random_vector(st, n, -1.0, 1.0), c = random_vector(st, m, -1.0, 1.0);
    VectorXd xd = random_vector(st, n, -1.0, 1.0);
    // inputs: A (row-major, m n) then x (n)
    VectorXd in(m * n + n);
    Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(in.data(), m,
                                                                                      n) = A0;
    in.tail(n) = x0;
    // f = c^T A x + |A x|^2 + |A xd|^2 (xd constant)
    auto bridge = [&](const Vec &v) {
        RowMat A = Eigen::Map<const RowMat>(v.data(), m, n);
        Vec x = v.tail(n);
        ad::mat M = ad::mat_make(A);
        return c.cast<real>().dot(ad::mat_vec(M, x)) + ad::mat_sqnorm(M, x) +
               ad::mat_sqnorm(M, xd);
    };
    auto plain = [&](const Vec &v) {
        RowMat A = Eigen::Map<const RowMat>(v.data(), m, n);
        Vec x = v.tail(n);
        return c.cast<real>().dot(A * x) + (A * x).squaredNorm() + (A * xd).squaredNorm();
    };
    grad_out rb = eigen_gradient(bridge, in);
    std::size_t recs_bridge = last_records();
    grad_out re = eigen_gradient(plain, in);
    std::size_t recs_eigen = last_records();
    VectorXd Ax = A0 * x0, Axd = A0 * xd;
    MatrixXd GA = c * x0.transpose() + 2 * Ax * x0.transpose() + 2 * Axd * xd.transpose();
    VectorXd want(m * n + n);
    Eigen::Map<Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(want.data(),
                                                                                      m, n) = GA;
    want.tail(n) = A0.transpose() * c + 2 * A0.transpose() * Ax;
    CHECK_VALUE(rb.value, c.dot(Ax) + Ax.squaredNorm() + Axd.squaredNorm(), 1e-13, "bridge value");
    CHECK_CLOSE(rb.grad, want, 1e-13, "bridge gradient");
    CHECK_CLOSE(re.grad, want, 1e-13, "Eigen gradient");
    assert_true(recs_bridge < recs_eigen);

    // A double matrix is wrapped: the product with an ad::real vector.
    grad_out rw = eigen_gradient(
        [&](const Vec &v) {
            Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> Ad = A0;
            ad::mat M = ad::mat_make(Ad);
            return ad::mat_sqnorm(M, v.tail(n)) + ad::mat_vec(M, v.tail(n)).sum();
        },
        in);
    VectorXd want_w = VectorXd::Zero(m * n + n);
    want_w.tail(n) = 2 * A0.transpose() * Ax + A0.transpose() * VectorXd::Ones(m);
    CHECK_CLOSE(rw.grad, want_w, 1e-13, "wrapped gradient");

    // a block of rows is contiguous; a row vector x works as a column
    grad_out rr = eigen_gradient(
        [&](const Vec &v) {
            RowMat A = Eigen::Map<const RowMat>(v.data(), m, n);
            auto top = A.topRows(2);
            ad::mat M = ad::mat_make(top);
            Eigen::Matrix<real, 1, Eigen::Dynamic> xr = v.tail(n).transpose();
            return ad::mat_sqnorm(M, xr);
        },
        in);
    VectorXd y2 = A0.topRows(2) * x0;
    CHECK_VALUE(rr.value, y2.squaredNorm(), 1e-14, "block bridge value");
    CHECK_CLOSE(VectorXd(rr.grad.tail(n)), VectorXd(2 * A0.topRows(2).transpose() * y2), 1e-13,
                "block bridge gradient");

    // errors: the wrong size of x; columns that are not contiguous
    auto status_of = [&](auto &&f) {
        try {
            (void)eigen_gradient(f, in);
        } catch (const ad::error &e) {
            return e.status();
        }
        return AD_OK;
    };
    assert_int_equal(status_of([&](const Vec &v) {
                         RowMat A = Eigen::Map<const RowMat>(v.data(), m, n);
                         ad::mat M = ad::mat_make(A);
                         return ad::mat_sqnorm(M, v.head(n + 1));
                     }),
                     AD_EINVAL);
    assert_int_equal(status_of([&](const Vec &v) {
                         RowMat A = Eigen::Map<const RowMat>(v.data(), m, n);
                         auto left = A.leftCols(2);
                         ad::mat M = ad::mat_make(left);
                         return ad::mat_vec(M, v.head(2)).sum();
                     }),
                     AD_EINVAL);
}

}  // namespace

int main()
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_construction),
        cmocka_unit_test(test_constants_record_nothing),
        cmocka_unit_test(test_dot_and_reductions),
        cmocka_unit_test(test_array_maps),
        cmocka_unit_test(test_matrix_vector),
        cmocka_unit_test(test_matrix_matrix),
        cmocka_unit_test(test_lu_solve),
        cmocka_unit_test(test_ldlt_solve),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_bridge),
    };
    return cmocka_run_group_tests_name("eigen", tests, nullptr, nullptr);
}
