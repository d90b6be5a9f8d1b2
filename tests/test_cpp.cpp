// dualrev.hpp against the C API.
//
// Every operator and elementary function, in every mix of ad::real, double
// and int, is differentiated through the C++ interface and through the C
// API's generic names (test_cpp_c.c, compiled as C) at the same points: the
// values, the gradients and the tape's records must be the same bits.  Then
// the drivers against the C drivers, an exception for every status the C++
// interface can meet, the callable's own exceptions, and objectives written
// once as templates for double and ad::real.
#include <dualrev.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

extern "C" {
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
}

#include "ops_list.h"
#include "test_cpp_c.h"

namespace {

using ad::real;

constexpr double inf = std::numeric_limits<double>::infinity();
constexpr double nan = std::numeric_limits<double>::quiet_NaN();

// ---- helpers ----

// SplitMix64, as tests/check.h (which is C only): fixed seeds, the same
// points on every run.
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

std::uint64_t bits(double v)
{
    std::uint64_t b;
    std::memcpy(&b, &v, sizeof b);
    return b;
}

// The same bits: NaN only as the same NaN.
void check_bits(double got, double want, const char *what, const char *op, double a, double b,
                const char *file, int line)
{
    if (bits(got) == bits(want))
        return;
    print_error("%s %s at (%.17g, %.17g): C++ %.17g (0x%016llx), C API %.17g (0x%016llx)\n", op,
                what, a, b, got, static_cast<unsigned long long>(bits(got)), want,
                static_cast<unsigned long long>(bits(want)));
    _fail(file, line);
}

#define assert_bits(got, want, what, op, a, b) \
    check_bits((got), (want), (what), (op), (a), (b), __FILE__, __LINE__)

// The records of the last top-level recording, as bytes.
struct tape {
    std::vector<ad__record> rec;
};

tape snapshot(const char *file, int line)
{
    tape t;
    t.rec.resize(4096);
    std::size_t count = cpp_c_tape(t.rec.data(), t.rec.size());
    if (count == static_cast<std::size_t>(-1) || count > t.rec.size()) {
        print_error("no complete recording to read, or more than %zu records\n", t.rec.size());
        _fail(file, line);
    }
    t.rec.resize(count);
    return t;
}

void check_same_tape(const tape &cpp, const tape &c, const char *op, double a, double b,
                     const char *file, int line)
{
    if (cpp.rec.size() == c.rec.size() &&
        (c.rec.empty() ||
         std::memcmp(cpp.rec.data(), c.rec.data(), c.rec.size() * sizeof(ad__record)) == 0))
        return;
    print_error("%s at (%.17g, %.17g): C++ recorded %zu records, C %zu, not the same bytes\n", op,
                a, b, cpp.rec.size(), c.rec.size());
    for (std::size_t k = 0; k < cpp.rec.size() && k < c.rec.size(); k++)
        if (std::memcmp(&cpp.rec[k], &c.rec[k], sizeof(ad__record)) != 0) {
            print_error("  first difference at record %zu: C++ {%u, %.17g, %u, %.17g}, "
                        "C {%u, %.17g, %u, %.17g}\n",
                        k, cpp.rec[k].a, cpp.rec[k].wa, cpp.rec[k].b, cpp.rec[k].wb, c.rec[k].a,
                        c.rec[k].wa, c.rec[k].b, c.rec[k].wb);
            break;
        }
    _fail(file, line);
}

#define SNAPSHOT() snapshot(__FILE__, __LINE__)
#define assert_same_tape(cpp, c, op, a, b) check_same_tape((cpp), (c), (op), (a), (b), __FILE__, __LINE__)

// The C API's gradient of a C objective, called from C++: ad_objective as
// the C side made it.
struct c_result {
    double fx;
    std::vector<double> grad;
    tape t;
};

c_result c_gradient(ad_objective f, void *ctx, const std::vector<double> &x, const char *file,
                    int line)
{
    c_result r{0.0, std::vector<double>(x.size()), {}};
    ad_status s = ad_gradient(f, ctx, x.size(), x.data(), &r.fx, r.grad.data());
    if (s != AD_OK) {
        print_error("ad_gradient returned %d (%s)\n", static_cast<int>(s), ad_strerror(s));
        _fail(file, line);
    }
    r.t = snapshot(file, line);
    return r;
}

#define C_GRADIENT(f, ctx, x) c_gradient((f), (ctx), (x), __FILE__, __LINE__)

// The C++ gradient and the C API's at x: value, gradient and records.
template <class F>
void check_against_c(F &&f, ad_objective cf, void *ctx, const std::vector<double> &x,
                     const char *op, const char *file, int line)
{
    c_result c = c_gradient(cf, ctx, x, file, line);
    ad::gradient_result r = ad::gradient(f, x);
    tape t = snapshot(file, line);
    double a = x.empty() ? 0.0 : x[0], b = x.size() > 1 ? x[1] : 0.0;
    check_bits(r.value, c.fx, "value", op, a, b, file, line);
    for (std::size_t i = 0; i < x.size(); i++)
        check_bits(r.grad[i], c.grad[i], "gradient", op, a, b, file, line);
    check_same_tape(t, c.t, op, a, b, file, line);
}

// The callable last: a lambda's captures are not parenthesised.
#define CHECK_AGAINST_C(cf, ctx, x, op, ...) \
    check_against_c((__VA_ARGS__), (cf), (ctx), (x), (op), __FILE__, __LINE__)

// Points: special values, then op's region, then a wide one.
const double specials[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -3.0, 1e-300, 1e300, inf, -inf, nan};
constexpr std::size_t n_specials = sizeof specials / sizeof *specials;
constexpr int POINTS = 200;

std::vector<double> draw(std::uint64_t &rng, double lo, double hi)
{
    std::vector<double> p(specials, specials + n_specials);
    for (int i = 0; i < POINTS; i++)
        p.push_back(uniform(rng, lo, hi));
    for (int i = 0; i < POINTS; i++)
        p.push_back(uniform(rng, -25.0, 25.0));
    return p;
}

// An ad::error with status `want` from body(); its what() begins with
// ad_strerror(want).
template <class Body>
void expect_error_at(ad_status want, Body &&body, const char *file, int line)
{
    int got = -1;
    std::string what;
    try {
        body();
    } catch (const ad::error &e) {
        got = static_cast<int>(e.status());
        what = e.what();
    }
    if (got == -1) {
        print_error("no ad::error thrown; expected status %d (%s)\n", static_cast<int>(want),
                    ad_strerror(want));
        _fail(file, line);
    }
    if (got != static_cast<int>(want) || what.rfind(ad_strerror(want), 0) != 0) {
        print_error("ad::error with status %d, \"%s\"; expected status %d, \"%s...\"\n", got,
                    what.c_str(), static_cast<int>(want), ad_strerror(want));
        _fail(file, line);
    }
}

#define expect_error(want, ...) expect_error_at((want), [&] { __VA_ARGS__; }, __FILE__, __LINE__)

void check_all_nan(const std::vector<double> &v, const char *file, int line)
{
    for (double e : v)
        if (!std::isnan(e)) {
            print_error("an output is %.17g, expected NaN after the error\n", e);
            _fail(file, line);
        }
}

#define assert_all_nan(v) check_all_nan((v), __FILE__, __LINE__)

// The library is usable and no recording is left active.
void check_library_ok(const char *file, int line)
{
    std::vector<double> x = {1.5, -2.0};
    ad::gradient_result r =
        ad::gradient([](const real *v, std::size_t) { return v[0] * v[0] + 3.0 * v[1]; }, x);
    if (r.value != -3.75 || r.grad[0] != 3.0 || r.grad[1] != 3.0 || ad_release() != AD_OK) {
        print_error("the library is not back to normal: f = %g, grad = (%g, %g)\n", r.value,
                    r.grad[0], r.grad[1]);
        _fail(file, line);
    }
}

#define assert_library_ok() check_library_ok(__FILE__, __LINE__)

}  // namespace

// ---- the operations, as user code writes them ----
//
// In a namespace of their own, by unqualified names with std's brought in:
// ad::real's overloads are found by argument-dependent lookup, double's in
// std.  Each is a template, instantiated for double too.
namespace user {

template <class T>
T cpp_neg(T x)
{
    return -x;
}

#define NAMED_UNARY(op)    \
    template <class T>     \
    T cpp_##op(T x)        \
    {                      \
        using std::op;     \
        return op(x);      \
    }
NAMED_UNARY(sqrt)
NAMED_UNARY(cbrt)
NAMED_UNARY(exp)
NAMED_UNARY(expm1)
NAMED_UNARY(log)
NAMED_UNARY(log1p)
NAMED_UNARY(log2)
NAMED_UNARY(log10)
NAMED_UNARY(sin)
NAMED_UNARY(cos)
NAMED_UNARY(tan)
NAMED_UNARY(asin)
NAMED_UNARY(acos)
NAMED_UNARY(atan)
NAMED_UNARY(sinh)
NAMED_UNARY(cosh)
NAMED_UNARY(tanh)
NAMED_UNARY(asinh)
NAMED_UNARY(acosh)
NAMED_UNARY(atanh)
NAMED_UNARY(fabs)
NAMED_UNARY(abs)
NAMED_UNARY(erf)
NAMED_UNARY(erfc)
NAMED_UNARY(lgamma)
NAMED_UNARY(tgamma)
#undef NAMED_UNARY

#define OPERATOR_BINARY(name, op)                                     \
    template <class A, class B>                                       \
    auto cpp_##name(A a, B b)                                         \
    {                                                                 \
        return a op b;                                                \
    }                                                                 \
    template <class A, class B>                                       \
    A cpp_##name##_assign(A a, B b)                                   \
    {                                                                 \
        a op## = b;                                                   \
        return a;                                                     \
    }
OPERATOR_BINARY(add, +)
OPERATOR_BINARY(sub, -)
OPERATOR_BINARY(mul, *)
OPERATOR_BINARY(div, /)
#undef OPERATOR_BINARY

#define NAMED_BINARY(op)                      \
    template <class A, class B>               \
    auto cpp_##op(A a, B b)                   \
    {                                         \
        using std::op;                        \
        return op(a, b);                      \
    }                                         \
    /* no compound form: the table's slot */  \
    template <class A, class B>               \
    A cpp_##op##_assign(A a, B b)             \
    {                                         \
        using std::op;                        \
        return op(a, b);                      \
    }
NAMED_BINARY(pow)
NAMED_BINARY(atan2)
NAMED_BINARY(hypot)
NAMED_BINARY(fmin)
NAMED_BINARY(fmax)
#undef NAMED_BINARY

// cpp_c_mixed (test_cpp_c.c) with the operators, in the same order.
template <class T>
T mixed(const T *x)
{
    using std::abs, std::atan2, std::cos, std::exp, std::fmax, std::fmin, std::hypot,
        std::log1p, std::pow, std::sin, std::sqrt;
    T a = x[0], b = x[1];
    float f = 0.5f;
    int k = 3;
    T s = (a + b) + (a + 1.0);
    s += 2 - b;
    s += a * f * (b / k);
    s += 1.0 / a;
    s -= -b;
    s = +s;
    s += pow(a, 2) * exp(-(b * b));
    s *= atan2(a, b + 3);
    s /= hypot(a, 2.0);
    s -= fmin(sin(a), cos(b));
    s += fmax(0, log1p(a * a));
    return s + sqrt(abs(b) + 1);
}

// cpp_c_primitives with ad::'s array functions.
real primitives(const real *x)
{
    static const double c[6] = {0.5, -1.25, 2.0, 0.75, -0.5, 1.5};
    static const double A[6] = {1.0, 2.0, -1.0, 0.5, 0.25, -3.0};
    real y[3], z[3], t[4], s, q;
    ad::mat M, W;
    s = ad::sum(5, x) + ad::dot(4, x, x + 4);
    s += ad::dot(4, x, x);
    s += ad::dot(6, x + 2, c);
    s += ad::dot(6, c, x + 3);
    s += ad::sqnorm(7, x + 1) * ad::prod(3, x + 6);
    s += ad::logsumexp(5, x + 4);
    ad::matvec(2, 3, A, x + 2, y);
    s += y[0] * y[1];
    ad::matvec(2, 3, x + 6, x, z);
    s += z[0] - z[1];
    for (int i = 0; i < 3; i++)
        t[i] = x[i + 8];
    ad::axpy(3, -0.75, x, t);
    s += ad::sum(3, t);
    ad::mat_make(2, 2, x + 8, &M);
    ad::mat_make(2, 3, A, &W);
    ad::mat_vec(&M, x + 1, z);
    s += z[0] * z[1];
    ad::mat_vec(&M, c, z);
    s += z[0] + z[1];
    ad::mat_sqnorm(&M, x + 3, &q);
    s += q;
    ad::mat_sqnorm(&M, c + 2, &q);
    s += q;
    ad::mat_vec(&W, x + 5, z);
    return s + z[0] * z[1];
}

// cpp_c_vector, n = 4, m = 3.
void vector_fn(const real *x, std::size_t, real *y, std::size_t)
{
    using std::atan2, std::exp, std::pow, std::sin;
    y[0] = x[0] * sin(x[1]) + x[2];
    y[1] = exp(x[3] - x[0]) / (1 + x[1] * x[1]);
    y[2] = pow(x[2], 2) * x[3] - atan2(x[0], x[3]);
}

// tests/template_objective.h, the C test's one-source objective, compiled
// here with the generic names as dualrev.hpp's operators and functions, as
// C++ code that shares a source with C does (benchmarks/gmm_hpp.cpp).
#define ad_add(a, b) ((a) + (b))
#define ad_sub(a, b) ((a) - (b))
#define ad_mul(a, b) ((a) * (b))
#define ad_div(a, b) ((a) / (b))
#define ad_pow(a, b) pow((a), (b))
#define ad_atan2(a, b) atan2((a), (b))
#define ad_hypot(a, b) hypot((a), (b))
#define ad_fmax(a, b) fmax((a), (b))
#define ad_sin(x) sin(x)
#define ad_cos(x) cos(x)
#define ad_exp(x) exp(x)
#define ad_sqrt(x) sqrt(x)
#define ad_tanh(x) tanh(x)
#define ad_log1p(x) log1p(x)
#define ad_value(x) ad::value(x)
#define ad_sum(n, x) ad::sum((n), (x))
#define AD_CONST(T, c) ad::constant<T>(c)
using std::atan2, std::cos, std::exp, std::fmax, std::hypot, std::log1p, std::pow, std::sin,
    std::sqrt, std::tanh;
#define REAL real
#define NAME template_ad
#include "template_objective.h"
#undef REAL
#undef NAME
#define REAL double
#define NAME template_d
#include "template_objective.h"
#undef REAL
#undef NAME
#undef ad_add
#undef ad_sub
#undef ad_mul
#undef ad_div
#undef ad_pow
#undef ad_atan2
#undef ad_hypot
#undef ad_fmax
#undef ad_sin
#undef ad_cos
#undef ad_exp
#undef ad_sqrt
#undef ad_tanh
#undef ad_log1p
#undef ad_value
#undef ad_sum
#undef AD_CONST

// A C++ template objective: the extended Rosenbrock function, damped past
// 10 by a branch on the value.
template <class T>
T rosenbrock(const std::vector<T> &x)
{
    using std::log1p;
    T s{};
    for (std::size_t i = 0; i + 1 < x.size(); i++) {
        T a = x[i + 1] - x[i] * x[i], b = 1 - x[i];
        s += 100 * a * a + b * b;
    }
    if (s > 10)
        s = 10 + log1p(s - 10);
    return s;
}

}  // namespace user

namespace {

// ---- unary operations ----

struct unary_case {
    const char *name;
    real (*ad)(real);
    double (*plain)(double);
    double lo, hi;
    std::size_t c_index;  // in test_cpp_c.c's table
};

#define UNARY_CASE(op, ref, lo, hi, keep) {#op, user::cpp_##op<real>, user::cpp_##op<double>, lo, hi, 0},
unary_case unary_cases[] = {UNARY_OPS(UNARY_CASE)};
#undef UNARY_CASE
constexpr std::size_t n_unary = sizeof unary_cases / sizeof *unary_cases;

// abs is fabs under its other name.
unary_case abs_case = {"abs", user::cpp_abs<real>, user::cpp_abs<double>, -10.0, 10.0, 0};

const cpp_c_unary *c_unary_named(const char *name)
{
    for (std::size_t i = 0; i < cpp_c_unary_count(); i++)
        if (std::strcmp(cpp_c_unary_at(i)->name, name) == 0)
            return cpp_c_unary_at(i);
    return nullptr;
}

void test_unary(void **state)
{
    const unary_case *op = static_cast<const unary_case *>(*state);
    const cpp_c_unary *c = c_unary_named(std::strcmp(op->name, "abs") == 0 ? "fabs" : op->name);
    assert_non_null(c);
    std::uint64_t rng = 0x5eed0c01;
    for (double x : draw(rng, op->lo, op->hi)) {
        std::vector<double> at = {x};
        CHECK_AGAINST_C(c->f, nullptr, at, op->name,
                        [op](const real *v, std::size_t) { return op->ad(v[0]); });
        // The double instantiation of the same template gives the value.
        double fx = ad::gradient([op](const real *v, std::size_t) { return op->ad(v[0]); }, at).value;
        assert_bits(op->plain(x), fx, "double instantiation", op->name, x, 0.0);
    }
}

// ---- binary operations ----

struct binary_case {
    const char *name;
    real (*rr)(real, real);
    real (*rd)(real, double);
    real (*dr)(double, real);
    real (*ri)(real, int);
    real (*ir)(int, real);
    double (*plain)(double, double);
    // compound assignment (operators only): a op= b
    real (*rr_assign)(real, real);
    real (*rd_assign)(real, double);
    real (*ri_assign)(real, int);
    double alo, ahi, blo, bhi;
};

#define BINARY_CASE(op, ref, alo, ahi, blo, bhi, keep)                                            \
    {#op, user::cpp_##op<real, real>, user::cpp_##op<real, double>, user::cpp_##op<double, real>, \
     user::cpp_##op<real, int>, user::cpp_##op<int, real>, user::cpp_##op<double, double>,     \
     user::cpp_##op##_assign<real, real>, user::cpp_##op##_assign<real, double>,                \
     user::cpp_##op##_assign<real, int>, alo, ahi, blo, bhi},
binary_case binary_cases[] = {BINARY_OPS(BINARY_CASE)};
#undef BINARY_CASE
constexpr std::size_t n_binary = sizeof binary_cases / sizeof *binary_cases;

bool is_operator(const char *name)
{
    return !std::strcmp(name, "add") || !std::strcmp(name, "sub") || !std::strcmp(name, "mul") ||
           !std::strcmp(name, "div");
}

// An int near b, within int's range.
int int_near(double b)
{
    return std::isfinite(b) && std::fabs(b) < 1e6 ? static_cast<int>(std::lround(b)) : -7;
}

void check_binary_at(const binary_case *op, const cpp_c_binary *c, double a, double b)
{
    cpp_c_point p = {a, b, int_near(b)};
    std::string name = op->name, compound = name + "=";
    std::vector<double> ab = {a, b}, xa = {a}, xb = {b};
    CHECK_AGAINST_C(c->rr, &p, ab, (name + " rr").c_str(),
                    [op](const real *v, std::size_t) { return op->rr(v[0], v[1]); });
    CHECK_AGAINST_C(c->rd, &p, xa, (name + " rd").c_str(),
                    [op, &p](const real *v, std::size_t) { return op->rd(v[0], p.b); });
    CHECK_AGAINST_C(c->dr, &p, xb, (name + " dr").c_str(),
                    [op, &p](const real *v, std::size_t) { return op->dr(p.a, v[0]); });
    CHECK_AGAINST_C(c->ri, &p, xa, (name + " with int").c_str(),
                    [op, &p](const real *v, std::size_t) { return op->ri(v[0], p.k); });
    CHECK_AGAINST_C(c->ir, &p, xb, (name + " int with").c_str(),
                    [op, &p](const real *v, std::size_t) { return op->ir(p.k, v[0]); });
    if (is_operator(op->name)) {
        CHECK_AGAINST_C(c->rr, &p, ab, (compound + " rr").c_str(),
                        [op](const real *v, std::size_t) { return op->rr_assign(v[0], v[1]); });
        CHECK_AGAINST_C(c->rd, &p, xa, (compound + " rd").c_str(),
                        [op, &p](const real *v, std::size_t) { return op->rd_assign(v[0], p.b); });
        CHECK_AGAINST_C(c->ri, &p, xa, (compound + " with int").c_str(),
                        [op, &p](const real *v, std::size_t) { return op->ri_assign(v[0], p.k); });
    }
    double fx = ad::gradient([op](const real *v, std::size_t) { return op->rr(v[0], v[1]); }, ab).value;
    // C leaves the sign of fmin(0, -0) and fmax(0, -0) open, and GCC, taking
    // them as commutative, may swap the arguments of either call.
    if (a == 0.0 && b == 0.0 && (!std::strcmp(op->name, "fmin") || !std::strcmp(op->name, "fmax")))
        assert_true(op->plain(a, b) == fx);
    else
        assert_bits(op->plain(a, b), fx, "double instantiation", op->name, a, b);
}

void test_binary(void **state)
{
    const binary_case *op = static_cast<const binary_case *>(*state);
    const cpp_c_binary *c = nullptr;
    for (std::size_t i = 0; i < cpp_c_binary_count(); i++)
        if (!std::strcmp(cpp_c_binary_at(i)->name, op->name))
            c = cpp_c_binary_at(i);
    assert_non_null(c);
    for (double a : specials)
        for (double b : specials)
            check_binary_at(op, c, a, b);
    std::uint64_t rng = 0x5eed0c02;
    for (int i = 0; i < POINTS; i++)
        check_binary_at(op, c, uniform(rng, op->alo, op->ahi), uniform(rng, op->blo, op->bhi));
    for (int i = 0; i < POINTS; i++)
        check_binary_at(op, c, uniform(rng, -25.0, 25.0), uniform(rng, -25.0, 25.0));
}

// ---- comparisons: values, in every mix ----

void check_compare_at(double a, double b)
{
    real ra = ad::constant(a), rb = ad::constant(b);
    ra.id = 7;  // an ID changes nothing: only values are compared
    int k = int_near(b);
    double dk = static_cast<double>(k);
#define CMP(op)                                                       \
    assert_true((ra op rb) == (a op b));                              \
    assert_true((ra op b) == (a op b));                               \
    assert_true((a op rb) == (a op b));                               \
    assert_true((ra op k) == (a op dk));                              \
    assert_true((k op ra) == (dk op a));
    CMP(==)
    CMP(!=)
    CMP(<)
    CMP(<=)
    CMP(>)
    CMP(>=)
#undef CMP
}

void test_comparisons(void **state)
{
    (void)state;
    for (double a : specials)
        for (double b : specials)
            check_compare_at(a, b);
    std::uint64_t rng = 0x5eed0c03;
    for (int i = 0; i < 1000; i++) {
        double a = uniform(rng, -5.0, 5.0);
        check_compare_at(a, i % 3 ? uniform(rng, -5.0, 5.0) : a);  // a third are ties
        check_compare_at(std::round(a), static_cast<double>(int_near(a)));
    }
}

// Unary plus records nothing and changes nothing; value(), constant().
void test_values_and_constants(void **state)
{
    (void)state;
    real c = ad::constant(2.5);
    assert_true(c.v == 2.5 && c.id == 0);
    assert_true(ad::constant<double>(2.5) == 2.5);
    assert_true(ad::value(c) == 2.5 && ad::value(3) == 3.0 && ad::value(-0.5) == -0.5);
    real zero{};
    assert_true(zero.v == 0.0 && zero.id == 0);
    std::vector<double> x = {1.25};
    real in{}, plus{};
    auto r = ad::gradient(
        [&](const real *v, std::size_t) {
            in = v[0];
            plus = +v[0];
            return plus;
        },
        x);
    assert_true(plus.id == in.id && plus.v == in.v);
    assert_true(r.value == 1.25 && r.grad[0] == 1.0);
    assert_int_equal(SNAPSHOT().rec.size(), 0);
    std::ostringstream os;
    os << ad::constant(1.5) << ' ' << x[0];
    assert_string_equal(os.str().c_str(), "1.5 1.25");
}

// ---- longer objectives: operations chained, primitives, one source ----

void test_mixed(void **state)
{
    (void)state;
    std::uint64_t rng = 0x5eed0c04;
    for (int i = 0; i < POINTS; i++) {
        std::vector<double> x = {uniform(rng, -3.0, 3.0), uniform(rng, -3.0, 3.0)};
        CHECK_AGAINST_C(cpp_c_mixed, nullptr, x, "mixed",
                        [](const real *v, std::size_t) { return user::mixed(v); });
        double fx = ad::gradient([](const real *v, std::size_t) { return user::mixed(v); }, x).value;
        assert_bits(user::mixed(x.data()), fx, "double instantiation", "mixed", x[0], x[1]);
    }
}

void test_primitives(void **state)
{
    (void)state;
    std::uint64_t rng = 0x5eed0c05;
    for (int i = 0; i < 50; i++) {
        std::vector<double> x(12);
        for (double &e : x)
            e = uniform(rng, -2.0, 2.0);
        CHECK_AGAINST_C(cpp_c_primitives, nullptr, x, "primitives",
                        [](const real *v, std::size_t) { return user::primitives(v); });
    }
}

// The container forms are the pointer forms.
void test_container_primitives(void **state)
{
    (void)state;
    std::vector<double> x = {0.5, -1.5, 2.0, 0.25};
    auto by_container = [](const std::vector<real> &v) {
        std::array<double, 4> c = {1.0, -2.0, 0.5, 3.0};
        std::vector<real> w(v.rbegin(), v.rend());
        return ad::sum(v) + ad::sqnorm(v) * ad::prod(w) + ad::logsumexp(v) + ad::dot(v, w) +
               ad::dot(v, c) + ad::dot(c, w) + ad::dot(v, v);
    };
    auto by_pointer = [](const real *v, std::size_t n) {
        static const double c[4] = {1.0, -2.0, 0.5, 3.0};
        real w[4] = {v[3], v[2], v[1], v[0]};
        return ad::sum(n, v) + ad::sqnorm(n, v) * ad::prod(n, w) + ad::logsumexp(n, v) +
               ad::dot(n, v, w) + ad::dot(n, v, c) + ad::dot(n, c, w) + ad::dot(n, v, v);
    };
    ad::gradient_result a = ad::gradient(by_container, x);
    tape ta = SNAPSHOT();
    ad::gradient_result b = ad::gradient(by_pointer, x);
    assert_same_tape(ta, SNAPSHOT(), "containers", x[0], x[1]);
    assert_bits(a.value, b.value, "value", "containers", x[0], x[1]);
    for (std::size_t i = 0; i < x.size(); i++)
        assert_bits(a.grad[i], b.grad[i], "gradient", "containers", x[0], x[1]);
    std::array<double, 3> d = {1.0, 2.0, 3.0};
    assert_true(ad::sum(d) == 6.0 && ad::sqnorm(d) == 14.0 && ad::prod(d) == 6.0 &&
                ad::dot(d, d) == 14.0);
    assert_true(ad::sum(3, d.data()) == 6.0);
}

// tests/template_objective.h: one source, compiled as C and as C++, for
// both types.
void test_one_source_c_and_cpp(void **state)
{
    (void)state;
    std::uint64_t rng = 0x5eed0c06;
    for (int i = 0; i < POINTS; i++) {
        std::vector<double> x = {uniform(rng, -2.0, 2.0), uniform(rng, -2.0, 2.0)};
        CHECK_AGAINST_C(cpp_c_template, nullptr, x, "template_objective.h",
                        [](const real *v, std::size_t) { return user::template_ad(v[0], v[1]); });
        assert_bits(user::template_d(x[0], x[1]), cpp_c_template_d(x[0], x[1]), "double",
                    "template_objective.h", x[0], x[1]);
    }
}

// A C++ template for double and ad::real: the same value to the bit, and
// the gradient of the closed form.
void test_template_objective(void **state)
{
    (void)state;
    std::uint64_t rng = 0x5eed0c07;
    for (int i = 0; i < POINTS; i++) {
        std::vector<double> x(5);
        for (double &e : x)
            e = uniform(rng, -1.5, 1.5);
        if (i % 2)
            x[0] = 1.0 + 0.01 * x[0];  // some points below the branch
        ad::gradient_result r =
            ad::gradient([](const auto &v) { return user::rosenbrock(v); }, x);
        double plain = user::rosenbrock(x);
        assert_bits(r.value, plain, "value", "rosenbrock", x[0], x[1]);
        // closed form
        std::vector<double> g(x.size(), 0.0);
        double s = 0.0;
        for (std::size_t k = 0; k + 1 < x.size(); k++) {
            double a = x[k + 1] - x[k] * x[k], b = 1 - x[k];
            s += 100 * a * a + b * b;
            g[k] += -400 * a * x[k] - 2 * b;
            g[k + 1] += 200 * a;
        }
        double scale = s > 10 ? 1.0 / (s - 9) : 1.0, big = 0.0;
        for (double e : g)
            big = std::fmax(big, std::fabs(e * scale));
        for (std::size_t k = 0; k < x.size(); k++)
            assert_true(std::fabs(r.grad[k] - g[k] * scale) <= 1e-12 * big);
    }
}

// ---- the drivers against the C drivers ----

std::vector<double> some_x(std::uint64_t &rng, std::size_t n)
{
    std::vector<double> x(n);
    for (double &e : x)
        e = uniform(rng, 0.25, 2.0);
    return x;
}

void assert_vectors_bits(const std::vector<double> &got, const std::vector<double> &want,
                         const char *what)
{
    assert_int_equal(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); i++)
        assert_bits(got[i], want[i], what, "driver", static_cast<double>(i), 0.0);
}

auto mixed_cpp = [](const real *v, std::size_t) { return user::mixed(v); };

void test_driver_gradient(void **state)
{
    (void)state;
    std::uint64_t rng = 0x5eed0c08;
    std::vector<double> x = some_x(rng, 2), g(2), gc(2);
    double fc;
    assert_int_equal(ad_gradient(cpp_c_mixed, nullptr, 2, x.data(), &fc, gc.data()), AD_OK);
    ad::gradient_result r = ad::gradient(mixed_cpp, x);
    assert_bits(r.value, fc, "value", "gradient", x[0], x[1]);
    assert_vectors_bits(r.grad, gc, "gradient");
    // in place, into a std::array and through a pointer and size
    std::array<double, 2> ga{};
    assert_bits(ad::gradient(mixed_cpp, x, ga), fc, "value", "gradient", x[0], x[1]);
    assert_vectors_bits(std::vector<double>(ga.begin(), ga.end()), gc, "gradient");
    assert_bits(ad::gradient(mixed_cpp, ad::array_view(x.data(), 2), ad::array_ref(g.data(), 2)), fc,
                "value", "gradient", x[0], x[1]);
    assert_vectors_bits(g, gc, "gradient");
    // a plain function, a function pointer, a std::function, a vector-taking callable
    real (*fp)(const real *, std::size_t) = [](const real *v, std::size_t) { return user::mixed(v); };
    assert_bits(ad::gradient(fp, x).value, fc, "value", "function pointer", x[0], x[1]);
    std::function<real(const real *, std::size_t)> sf = mixed_cpp;
    assert_bits(ad::gradient(sf, x).grad[1], gc[1], "gradient", "std::function", x[0], x[1]);
    auto vf = [](const std::vector<real> &v) { return user::mixed(v.data()); };
    assert_bits(ad::gradient(vf, x).grad[0], gc[0], "gradient", "vector callable", x[0], x[1]);
    // n = 0
    ad::gradient_result empty =
        ad::gradient([](const real *, std::size_t) { return ad::constant(4.0); }, std::vector<double>{});
    assert_true(empty.value == 4.0 && empty.grad.empty());
}

void test_driver_second_order(void **state)
{
    (void)state;
    std::uint64_t rng = 0x5eed0c09;
    std::vector<double> x = some_x(rng, 2), v = {0.75, -1.25};
    std::vector<double> gc(2), hvc(2), hc(4);
    double fc;
    assert_int_equal(ad_hvp(cpp_c_mixed, nullptr, 2, x.data(), v.data(), &fc, gc.data(), hvc.data()),
                     AD_OK);
    ad::hvp_result h = ad::hvp(mixed_cpp, x, v);
    assert_bits(h.value, fc, "value", "hvp", x[0], x[1]);
    assert_vectors_bits(h.grad, gc, "gradient");
    assert_vectors_bits(h.hv, hvc, "hv");
    std::vector<double> g(2), hv(2), H(4);
    assert_bits(ad::hvp(mixed_cpp, x, v, g, hv), fc, "value", "hvp", x[0], x[1]);
    assert_vectors_bits(hv, hvc, "hv");
    // three directions at once: v, e_0 and v again; the C API's and H v's bits
    std::vector<double> V = {v[0], v[1], 1.0, 0.0, v[0], v[1]}, HV(6), HVc(6), g3(2);
    assert_int_equal(ad_hvps(cpp_c_mixed, nullptr, 2, x.data(), 3, V.data(), &fc, gc.data(),
                             HVc.data()),
                     AD_OK);
    assert_bits(ad::hvps(mixed_cpp, x, 3, V, g3, HV), fc, "value", "hvps", x[0], x[1]);
    assert_vectors_bits(HV, HVc, "HV");
    assert_vectors_bits(std::vector<double>(HV.begin() + 4, HV.end()), hvc, "HV[2]");

    assert_int_equal(ad_hessian(cpp_c_mixed, nullptr, 2, x.data(), &fc, gc.data(), hc.data()), AD_OK);
    ad::hessian_result hs = ad::hessian(mixed_cpp, x);
    assert_bits(hs.value, fc, "value", "hessian", x[0], x[1]);
    assert_vectors_bits(hs.grad, gc, "gradient");
    assert_vectors_bits(hs.hess, hc, "hessian");
    assert_bits(ad::hessian(mixed_cpp, x, g, H), fc, "value", "hessian", x[0], x[1]);
    assert_vectors_bits(H, hc, "hessian");
}

auto vector_vec = [](const std::vector<real> &x) {
    std::array<real, 3> y;
    user::vector_fn(x.data(), x.size(), y.data(), y.size());
    return y;
};

void test_driver_jacobians(void **state)
{
    (void)state;
    std::uint64_t rng = 0x5eed0c0a;
    const std::size_t n = 4, m = 3;
    std::vector<double> x = some_x(rng, n), v = {1.0, -0.5, 0.25, 2.0}, w = {0.5, 1.5, -1.0};
    std::vector<double> yc(m), jc(m * n), jvc(m), wjc(n);
    assert_int_equal(ad_jacobian(cpp_c_vector, nullptr, n, x.data(), m, yc.data(), jc.data()), AD_OK);
    for (int form = 0; form < 2; form++) {
        ad::jacobian_result J = form ? ad::jacobian(vector_vec, x, m) : ad::jacobian(user::vector_fn, x, m);
        assert_vectors_bits(J.value, yc, "y");
        assert_vectors_bits(J.jac, jc, "jacobian");
        assert_true(J.rows == m && J.cols == n);
        assert_bits(J(2, 3), jc[2 * n + 3], "jacobian (2, 3)", "jacobian", 0.0, 0.0);
    }
    std::vector<double> y(m), jac(m * n), jv(m), wj(n);
    ad::jacobian(user::vector_fn, x, y, jac);
    assert_vectors_bits(jac, jc, "jacobian");

    assert_int_equal(ad_jvp(cpp_c_vector, nullptr, n, x.data(), v.data(), m, yc.data(), jvc.data()),
                     AD_OK);
    ad::jvp_result F = ad::jvp(user::vector_fn, x, v, m);
    assert_vectors_bits(F.value, yc, "y");
    assert_vectors_bits(F.jv, jvc, "jv");
    ad::jvp(vector_vec, x, v, y, jv);
    assert_vectors_bits(jv, jvc, "jv");

    assert_int_equal(ad_vjp(cpp_c_vector, nullptr, n, x.data(), m, w.data(), yc.data(), wjc.data()),
                     AD_OK);
    ad::vjp_result R = ad::vjp(user::vector_fn, x, w);
    assert_vectors_bits(R.value, yc, "y");
    assert_vectors_bits(R.wj, wjc, "wj");
    ad::vjp(vector_vec, x, w, y, wj);
    assert_vectors_bits(wj, wjc, "wj");
}

void test_driver_sparse_and_linear(void **state)
{
    (void)state;
    std::uint64_t rng = 0x5eed0c0b;
    const std::size_t n = 4, m = 3;
    std::vector<double> x = some_x(rng, n), v = {1.0, -0.5, 0.25, 2.0}, w = {0.5, 1.5, -1.0};
    std::vector<double> yc(m), jvc(m), wjc(n);
    ad_csr Jc{};
    assert_int_equal(ad_sparse_jacobian(cpp_c_vector, nullptr, n, x.data(), m, yc.data(), &Jc), AD_OK);
    ad::sparse_jacobian_result S = ad::sparse_jacobian(user::vector_fn, x, m);
    assert_vectors_bits(S.value, yc, "y");
    assert_true(S.jac.rows() == Jc.rows && S.jac.cols() == Jc.cols && S.jac.nnz() == Jc.nnz);
    for (std::size_t i = 0; i <= m; i++)
        assert_true(S.jac.row_ptr()[i] == Jc.row_ptr[i]);
    for (std::size_t k = 0; k < Jc.nnz; k++) {
        assert_true(S.jac.col()[k] == Jc.col[k]);
        assert_bits(S.jac.val()[k], Jc.val[k], "entry", "sparse_jacobian", static_cast<double>(k), 0.0);
    }
    // again into the same csr (its arrays are replaced), and moved
    std::vector<double> y(m);
    ad::sparse_jacobian(vector_vec, x, y, S.jac);
    ad::csr moved = std::move(S.jac);
    assert_true(moved.nnz() == Jc.nnz && S.jac.nnz() == 0 && S.jac.val() == nullptr);
    assert_bits(moved.val()[0], Jc.val[0], "entry", "sparse_jacobian", 0.0, 0.0);
    ad_csr_free(&Jc);

    ad_linear *Lc = nullptr;
    assert_int_equal(ad_linearize(cpp_c_vector, nullptr, n, x.data(), m, yc.data(), &Lc), AD_OK);
    ad::linear L = ad::linearize(user::vector_fn, x, m);
    assert_vectors_bits(L.value(), yc, "y");
    assert_true(L.rows() == m && L.cols() == n);
    for (int rep = 0; rep < 3; rep++) {
        assert_int_equal(ad_linear_jvp(Lc, v.data(), jvc.data()), AD_OK);
        assert_int_equal(ad_linear_vjp(Lc, w.data(), wjc.data()), AD_OK);
        assert_vectors_bits(L.jvp(v), jvc, "jv");
        assert_vectors_bits(L.vjp(w), wjc, "wj");
        // three directions at once: v, 2 v and the same again
        std::vector<double> V(3 * n), W(3 * m), jv3(3 * m), wj3(3 * n);
        for (std::size_t d = 0; d < 3; d++) {
            for (std::size_t i = 0; i < n; i++)
                V[d * n + i] = v[i] * (d == 1 ? 2.0 : 1.0);
            for (std::size_t j = 0; j < m; j++)
                W[d * m + j] = w[j] * (d == 1 ? 2.0 : 1.0);
        }
        assert_int_equal(ad_linear_jvps(Lc, 3, V.data(), jv3.data()), AD_OK);
        assert_int_equal(ad_linear_vjps(Lc, 3, W.data(), wj3.data()), AD_OK);
        assert_vectors_bits(L.jvps(3, V), jv3, "JV");
        assert_vectors_bits(L.vjps(3, W), wj3, "WJ");
        for (std::size_t j = 0; j < m; j++)
            assert_bits(jv3[2 * m + j], jvc[j], "entry", "jvps", 0.0, 0.0);
        v[0] += 1.0;
        w[2] -= 0.5;
    }
    ad::linear L2 = ad::linearize(vector_vec, x, m);
    L = std::move(L2);
    assert_true(L2.get() == nullptr && L.get() != nullptr);
    std::vector<double> wj(n);
    L.vjp(w, wj);
    assert_int_equal(ad_linear_vjp(Lc, w.data(), wjc.data()), AD_OK);
    assert_vectors_bits(wj, wjc, "wj");
    ad_linear_free(Lc);
}

// ---- the C API from C++ ----

// A C-compiled objective, a C++ one through ad_objective, and C++ code
// inside an objective that C drives, on one tape.
void test_c_api_from_cpp(void **state)
{
    (void)state;
    std::vector<double> x = {0.5, 1.5}, g(2), gc(2);
    double fx, fc;
    ad_objective cf = cpp_c_mixed;
    assert_int_equal(ad_gradient(cf, nullptr, 2, x.data(), &fc, gc.data()), AD_OK);
    ad_objective cppf = [](const ad_real *v, size_t, void *) -> ad_real { return user::mixed(v); };
    assert_int_equal(ad_gradient(cppf, nullptr, 2, x.data(), &fx, g.data()), AD_OK);
    assert_bits(fx, fc, "value", "ad_objective from C++", x[0], x[1]);
    assert_vectors_bits(g, gc, "gradient");
    // A C objective called from a C++ objective: its result is ours.
    ad::gradient_result r = ad::gradient(
        [](const real *v, std::size_t n) { return cpp_c_mixed(v, n, nullptr) * 1.0; }, x);
    assert_bits(r.value, fc, "value", "C objective inside C++", x[0], x[1]);
    assert_vectors_bits(r.grad, gc, "gradient");
    // Nested: a C++ driver inside a C-driven objective.
    struct ctx_t {
        double inner;
    } ctx{0.0};
    ad_objective outer = [](const ad_real *v, size_t, void *p) -> ad_real {
        auto *c = static_cast<ctx_t *>(p);
        std::vector<double> at = {ad::value(v[0])};
        try {
            c->inner = ad::gradient([](const real *u, std::size_t) { return u[0] * u[0]; }, at).grad[0];
        } catch (...) {
            c->inner = nan;
        }
        return v[0] * c->inner;
    };
    assert_int_equal(ad_gradient(outer, &ctx, 1, x.data(), &fx, g.data()), AD_OK);
    assert_true(ctx.inner == 1.0 && fx == 0.5 && g[0] == 1.0);
}

// ---- errors: an ad::error for every status ----

void test_error_einval(void **state)
{
    (void)state;
    std::vector<double> x = {1.0, 2.0}, g3(3, 0.0), v1(1, 1.0), h3(3, 0.0), g(2, 0.0), hv(2, 0.0);
    int calls = 0;
    auto f = [&calls](const real *v, std::size_t) {
        calls++;
        return v[0] * v[1];
    };
    expect_error(AD_EINVAL, ad::gradient(f, x, g3));
    assert_all_nan(g3);
    expect_error(AD_EINVAL, ad::hvp(f, x, v1));
    expect_error(AD_EINVAL, ad::hvp(f, x, x, g, h3));
    assert_all_nan(g);
    assert_all_nan(h3);
    expect_error(AD_EINVAL, ad::hessian(f, x, g, h3));
    assert_int_equal(calls, 0);
    real (*null_fn)(const real *, std::size_t) = nullptr;
    expect_error(AD_EINVAL, ad::gradient(null_fn, x));
    std::vector<double> y(3), jac(5);
    expect_error(AD_EINVAL, ad::jacobian(user::vector_fn, std::vector<double>(4, 1.0), y, jac));
    // the function's result has the wrong size
    expect_error(AD_EINVAL, ad::jacobian(vector_vec, std::vector<double>(4, 1.0), 2));
    expect_error(AD_EINVAL, ad::jvp(user::vector_fn, x, v1, 3));
    expect_error(AD_EINVAL, ad::vjp(user::vector_fn, x, v1, y, g));
    ad::linear L = ad::linearize(user::vector_fn, std::vector<double>(4, 1.0), 3);
    expect_error(AD_EINVAL, L.jvp(x));
    expect_error(AD_EINVAL, L.vjp(x));
    // primitives: arrays of different sizes, a NULL matrix, a NULL stream
    expect_error(AD_EINVAL, ad::gradient(
                                [](const std::vector<real> &v) {
                                    std::array<double, 1> c = {1.0};
                                    return ad::dot(v, c);
                                },
                                x));
    ad::mat M;
    expect_error(AD_EINVAL, ad::mat_make(2, 2, static_cast<const double *>(nullptr), &M));
    expect_error(AD_EINVAL, ad::tape_dump(nullptr, 1));
    ad::rule none{};
    expect_error(AD_EINVAL, ad::gradient(
                                [&none](const real *v, std::size_t) {
                                    real out;
                                    ad::external(none, nullptr, 1, v, 1, &out);
                                    return out;
                                },
                                x));
    assert_library_ok();
}

void test_error_enomem(void **state)
{
    (void)state;
    std::vector<double> x = {1.0, 2.0}, g(2, 0.0);
    assert_int_equal(ad_release(), AD_OK);  // the next recording must allocate
    cpp_c_fail_alloc_after(0);
    expect_error(AD_ENOMEM, ad::gradient(mixed_cpp, x, g));
    cpp_c_fail_alloc_after(-1);
    assert_all_nan(g);
    assert_library_ok();
}

void test_error_erange(void **state)
{
    (void)state;
    std::vector<double> x = {1.0, 2.0};
    auto long_one = [](const real *v, std::size_t) {
        real s = v[0];
        for (int k = 0; k < 100; k++)
            s = s * 1.0;
        return s;
    };
    assert_int_equal(ad::set_tape_limit(50), 0);
    expect_error(AD_ERANGE, ad::gradient(long_one, x));
    assert_int_equal(ad::set_tape_limit(0), 50);
    assert_true(ad::gradient(long_one, x).grad[0] == 1.0);
    // a CSR output is emptied, the others are NaN
    std::vector<double> x4(4, 1.0), y(3, 0.0);
    ad::csr J = ad::sparse_jacobian(user::vector_fn, x4, 3).jac;
    ad::set_tape_limit(2);
    expect_error(AD_ERANGE, ad::sparse_jacobian(user::vector_fn, x4, y, J));
    ad::set_tape_limit(0);
    assert_true(J.nnz() == 0 && J.row_ptr() == nullptr);
    assert_all_nan(y);
    assert_library_ok();
}

// Each level calls ad::gradient again, without end: the call past
// AD_MAX_NESTING throws, and every level's driver rethrows it.
struct tower {
    int deepest = 0;
    bool catch_at_bottom = false;
    ad_status caught = AD_OK;
};

double climb(tower &t, int level, double x)
{
    auto f = [&t, level](const real *v, std::size_t) {
        t.deepest = level > t.deepest ? level : t.deepest;
        double below = 0.0;
        if (t.catch_at_bottom) {
            try {
                below = climb(t, level + 1, ad::value(v[0]));
            } catch (const ad::error &e) {
                t.caught = e.status();
            }
        } else {
            below = climb(t, level + 1, ad::value(v[0]));
        }
        return v[0] * v[0] + below;
    };
    return ad::gradient(f, std::vector<double>{x}).value;
}

void test_error_enesting(void **state)
{
    (void)state;
    tower t;
    expect_error(AD_ENESTING, climb(t, 1, 0.5));
    assert_int_equal(t.deepest, AD_MAX_NESTING);
    assert_library_ok();
    tower c;
    c.catch_at_bottom = true;
    assert_true(climb(c, 1, 0.5) == AD_MAX_NESTING * 0.25);  // each level adds x^2
    assert_int_equal(c.caught, AD_ENESTING);
    assert_library_ok();
}

void test_error_eforeign(void **state)
{
    (void)state;
    std::vector<double> x = {1.0};
    real saved{};
    ad::gradient(
        [&saved](const real *v, std::size_t) {
            real s = v[0];
            for (int k = 0; k < 1000; k++)
                s = s * 1.0;
            saved = s;
            return s;
        },
        x);
    expect_error(AD_EFOREIGN, ad::gradient([&saved](const real *, std::size_t) { return saved; }, x));
    assert_library_ok();
}

void test_error_ebusy(void **state)
{
    (void)state;
    std::vector<double> x = {1.0, 2.0};
    expect_error(AD_EBUSY, ad::gradient(
                               [](const real *v, std::size_t) {
                                   ad::release();
                                   return v[0];
                               },
                               x));
    expect_error(AD_EBUSY, ad::gradient(
                               [](const real *v, std::size_t) {
                                   ad::tape_dump(stdout, 1);
                                   return v[0];
                               },
                               x));
    assert_library_ok();
    ad::release();
}

// An external function with a reverse rule only.
void twice_primal(void *, size_t, const double *x, size_t, double *y)
{
    y[0] = 2.0 * x[0];
}

void twice_vjp(void *, size_t, const double *, size_t, const double *, const double *ybar,
               double *xbar)
{
    xbar[0] = 2.0 * ybar[0];
}

const ad::rule twice = {twice_primal, twice_vjp, nullptr, nullptr};

real with_external(const real *x, std::size_t)
{
    real y;
    ad::external(twice, nullptr, 1, x, 1, &y);
    return y * x[1];
}

void with_external_fn(const real *x, std::size_t n, real *y, std::size_t)
{
    y[0] = with_external(x, n);
}

void test_error_enotsup(void **state)
{
    (void)state;
    std::vector<double> x = {1.5, 2.0}, v = {1.0, 0.0};
    ad::gradient_result r = ad::gradient(with_external, x);  // the reverse rule is enough
    assert_true(r.value == 6.0 && r.grad[0] == 4.0 && r.grad[1] == 3.0);
    expect_error(AD_ENOTSUP, ad::hvp(with_external, x, v));
    expect_error(AD_ENOTSUP, ad::hessian(with_external, x));
    expect_error(AD_ENOTSUP, ad::jvp(with_external_fn, x, v, 1));
    ad::linear L = ad::linearize(with_external_fn, x, 1);
    expect_error(AD_ENOTSUP, L.jvp(v));
    assert_true(L.vjp(std::vector<double>{1.0})[0] == 4.0);
    assert_library_ok();
}

void test_error_messages(void **state)
{
    (void)state;
    const ad_status all[] = {AD_EINVAL, AD_ENOMEM, AD_ERANGE, AD_ENESTING,
                             AD_EFOREIGN, AD_EBUSY, AD_ENOTSUP};
    for (ad_status s : all) {
        ad::error e(s);
        assert_int_equal(e.status(), s);
        assert_string_equal(e.what(), ad_strerror(s));
        const std::runtime_error &base = e;
        assert_string_equal(base.what(), ad_strerror(s));
    }
    ad::error d(AD_EINVAL, "more");
    assert_true(std::string(d.what()) == std::string(ad_strerror(AD_EINVAL)) + ": more");
}

// ---- the callable's own exceptions ----

struct user_exception {
    int tag;
};

void test_user_exception(void **state)
{
    (void)state;
    std::vector<double> x = {1.0, 2.0, 3.0, 4.0}, v(4, 1.0), w(3, 1.0);
    int calls = 0;
    auto f = [&calls](const real *p, std::size_t) -> real {
        calls++;
        if (p[0] > 0.0)
            throw user_exception{42};
        return p[0];
    };
    auto fv = [&calls](const real *p, std::size_t, real *y, std::size_t) {
        calls++;
        y[0] = p[0] * p[1];  // written, then thrown past
        throw std::out_of_range("thrown by the function");
    };
    auto expect_user = [&calls](auto &&body) {
        calls = 0;
        bool got = false;
        try {
            body();
        } catch (const user_exception &e) {
            got = e.tag == 42;
        } catch (const std::out_of_range &e) {
            got = std::string(e.what()) == "thrown by the function";
        }
        assert_true(got);
        assert_int_equal(calls, 1);  // not called again once it has thrown
    };
    std::vector<double> g(4, 0.0), hv(4, 0.0), H(16, 0.0);
    expect_user([&] { ad::gradient(f, x); });
    expect_user([&] { ad::gradient(f, x, g); });
    assert_all_nan(g);
    expect_user([&] { ad::hvp(f, x, v, g, hv); });
    assert_all_nan(hv);
    expect_user([&] { ad::hessian(f, x, g, H); });
    assert_all_nan(H);
    std::vector<double> y(3, 0.0), jac(12, 0.0), jv(3, 0.0), wj(4, 0.0);
    expect_user([&] { ad::jacobian(fv, x, y, jac); });
    assert_all_nan(y);
    assert_all_nan(jac);
    expect_user([&] { ad::jvp(fv, x, v, y, jv); });
    assert_all_nan(jv);
    expect_user([&] { ad::vjp(fv, x, w, y, wj); });
    assert_all_nan(wj);
    expect_user([&] { ad::sparse_jacobian(fv, x, 3); });
    ad::csr kept = ad::sparse_jacobian(user::vector_fn, x, 3).jac;
    assert_true(kept.nnz() > 0);
    expect_user([&] { ad::sparse_jacobian(fv, x, y, kept); });
    assert_true(kept.nnz() == 0 && kept.rows() == 0 && kept.val() == nullptr);  // nothing stale
    expect_user([&] { ad::linearize(fv, x, 3); });
    assert_library_ok();

    // Through a nested driver: the inner objective's exception leaves both.
    calls = 0;
    expect_user([&] {
        ad::gradient(
            [&f](const real *p, std::size_t n) {
                std::vector<double> at;
                for (std::size_t i = 0; i < n; i++)
                    at.push_back(ad::value(p[i]));
                return p[0] * ad::gradient(f, at).value;
            },
            x);
    });
    assert_library_ok();
}

// ---- nested derivatives: ad::gradient and ad::jvp over ad::real ----

// Which overload a call picks, braced lists included (in decltype: not
// called).  {} stays the empty array of doubles; a braced list of numbers
// makes no view of either kind (as before); a braced pointer and size picks
// by the pointer's type.
struct nested_obj_t {
    real operator()(const real *v, std::size_t) const { return v[0]; }
};
struct nested_fn_t {
    void operator()(const real *x, std::size_t, real *y, std::size_t) const { y[0] = x[0]; }
};
template <class T>
T &lvalue();  // only in decltype

template <class... A>
using gradient_t = decltype(ad::gradient(lvalue<nested_obj_t>(), lvalue<A>()...));
template <class... A>
using jvp_t = decltype(ad::jvp(lvalue<nested_fn_t>(), lvalue<A>()...));
using dvec = std::vector<double>;
using rvec = std::vector<real>;
static_assert(std::is_same_v<gradient_t<dvec>, ad::gradient_result>);
static_assert(std::is_same_v<gradient_t<rvec>, ad::real_gradient_result>);
static_assert(std::is_same_v<gradient_t<const std::array<real, 2>>, ad::real_gradient_result>);
static_assert(std::is_same_v<gradient_t<dvec, dvec>, double>);
static_assert(std::is_same_v<gradient_t<rvec, rvec>, real>);
static_assert(std::is_same_v<jvp_t<dvec, dvec, std::size_t>, ad::jvp_result>);
static_assert(std::is_same_v<jvp_t<rvec, rvec, std::size_t>, ad::real_jvp_result>);
static_assert(std::is_same_v<jvp_t<rvec, rvec, rvec, rvec>, void>);
static_assert(std::is_same_v<decltype(ad::gradient(lvalue<nested_obj_t>(), {})), ad::gradient_result>);
static_assert(std::is_same_v<decltype(ad::jvp(lvalue<nested_fn_t>(), {}, {}, 0u)), ad::jvp_result>);
static_assert(std::is_same_v<decltype(ad::gradient(lvalue<nested_obj_t>(), {lvalue<const real *>(), 1u})),
                             ad::real_gradient_result>);
static_assert(std::is_same_v<decltype(ad::gradient(lvalue<nested_obj_t>(), {lvalue<const double *>(), 1u})),
                             ad::gradient_result>);

// Calls that pick no overload: a braced list of numbers or of ad::reals
// (no view is made from one), ad::real x with double outputs, ad::real x
// with a double v.
template <class F, class = void>
struct gradient_of_numbers : std::false_type {};
template <class F>
struct gradient_of_numbers<F, std::void_t<decltype(ad::gradient(lvalue<F>(), {1.0, 2.0}))>>
    : std::true_type {};
template <class F, class = void>
struct gradient_of_reals : std::false_type {};
template <class F>
struct gradient_of_reals<F, std::void_t<decltype(ad::gradient(lvalue<F>(), {lvalue<real>(), lvalue<real>()}))>>
    : std::true_type {};
template <class Void, class... A>
struct gradient_takes : std::false_type {};
template <class... A>
struct gradient_takes<std::void_t<gradient_t<A...>>, A...> : std::true_type {};
template <class Void, class... A>
struct jvp_takes : std::false_type {};
template <class... A>
struct jvp_takes<std::void_t<jvp_t<A...>>, A...> : std::true_type {};
static_assert(!gradient_of_numbers<nested_obj_t>::value && !gradient_of_reals<nested_obj_t>::value);
static_assert(gradient_takes<void, rvec, rvec>::value && !gradient_takes<void, rvec, dvec>::value &&
              !gradient_takes<void, dvec, rvec>::value);
static_assert(jvp_takes<void, rvec, rvec, std::size_t>::value &&
              !jvp_takes<void, rvec, dvec, std::size_t>::value &&
              !jvp_takes<void, dvec, rvec, std::size_t>::value &&
              !jvp_takes<void, rvec, rvec, dvec, dvec>::value);

void check_close(double got, double want, double rel, const char *what, const char *file, int line)
{
    if (std::fabs(got - want) <= rel * std::fmax(1.0, std::fabs(want)))
        return;
    print_error("%s: %.17g, expected %.17g\n", what, got, want);
    _fail(file, line);
}

#define assert_close(got, want, what) check_close((got), (want), 1e-13, (what), __FILE__, __LINE__)

std::vector<real> constants_of(const std::vector<double> &x)
{
    std::vector<real> r;
    for (double e : x)
        r.push_back(ad::constant(e));
    return r;
}

// An objective of user::vector_fn's four inputs.
real vector_fn_sum(const real *x, std::size_t n)
{
    real y[3];
    user::vector_fn(x, n, y, 3);
    return y[0] * y[1] + y[2];
}

// Outside a recording, and inside one from constants alone: ad::gradient's
// and ad::jvp's numbers, to the bit, as constants; every form.
void test_nested_as_constants(void **state)
{
    (void)state;
    std::uint64_t rng = 0x5eed0c0c;
    const std::size_t n = 4, m = 3;
    std::vector<double> x = some_x(rng, n), v = {1.0, -0.5, 0.25, 2.0};
    std::vector<real> xr = constants_of(x), vr = constants_of(v);
    ad::gradient_result want = ad::gradient(vector_fn_sum, x);
    ad::jvp_result wantj = ad::jvp(user::vector_fn, x, v, m);
    auto check_gradient = [&](const real &value, const real *grad) {
        assert_true(value.id == 0);
        assert_bits(ad::value(value), want.value, "value", "ad::real gradient", x[0], x[1]);
        for (std::size_t i = 0; i < n; i++) {
            assert_true(grad[i].id == 0);
            assert_bits(ad::value(grad[i]), want.grad[i], "gradient", "ad::real gradient", x[0], x[1]);
        }
    };
    auto check_jvp = [&](const real *y, const real *jv) {
        for (std::size_t j = 0; j < m; j++) {
            assert_true(y[j].id == 0 && jv[j].id == 0);
            assert_bits(ad::value(y[j]), wantj.value[j], "y", "ad::real jvp", x[0], x[1]);
            assert_bits(ad::value(jv[j]), wantj.jv[j], "jv", "ad::real jvp", x[0], x[1]);
        }
    };
    // outside a recording: each form, each kind of callable
    ad::real_gradient_result r = ad::gradient(vector_fn_sum, xr);
    check_gradient(r.value, r.grad.data());
    std::array<real, 4> ga{};
    check_gradient(ad::gradient(vector_fn_sum, xr, ga), ga.data());
    real gp[4];
    check_gradient(ad::gradient([](const std::vector<real> &u) { return vector_fn_sum(u.data(), u.size()); },
                                ad::real_array_view(xr.data(), n), ad::real_array_ref(gp, n)),
                   gp);
    ad::real_jvp_result J = ad::jvp(user::vector_fn, xr, vr, m);
    check_jvp(J.value.data(), J.jv.data());
    std::vector<real> y(m), jv(m);
    ad::jvp(vector_vec, xr, vr, y, jv);
    check_jvp(y.data(), jv.data());
    // inside a recording, from constants: constants, and the enclosing
    // recording records nothing for them
    ad::gradient_result o = ad::gradient(
        [&](const real *u, std::size_t) {
            ad::real_gradient_result in = ad::gradient(vector_fn_sum, xr);
            check_gradient(in.value, in.grad.data());
            ad::real_jvp_result inj = ad::jvp(user::vector_fn, xr, vr, m);
            check_jvp(inj.value.data(), inj.jv.data());
            return u[0] * in.grad[1];
        },
        std::vector<double>{2.0});
    assert_true(o.grad[0] == want.grad[1] && o.value == 2.0 * want.grad[1]);
    assert_int_equal(SNAPSHOT().rec.size(), 1);
    // n = 0, m = 0
    ad::real_gradient_result e =
        ad::gradient([](const real *, std::size_t) { return ad::constant(4.0); }, std::vector<real>{});
    assert_true(ad::value(e.value) == 4.0 && e.grad.empty());
    ad::real_jvp_result ej = ad::jvp(nested_fn_t{}, rvec{}, rvec{}, 0);
    assert_true(ej.value.empty() && ej.jv.empty());
}

// The gradient of (gradient of f) . v is H v: ad::hvp's numbers, to
// rounding; the Jacobian of the gradient is the Hessian, and the tangent of
// the gradient is H v again.
void test_nested_gradient_is_hvp(void **state)
{
    (void)state;
    std::uint64_t rng = 0x5eed0c0d;
    for (int i = 0; i < 20; i++) {
        std::vector<double> x = some_x(rng, 2), v = {uniform(rng, -1.0, 1.0), uniform(rng, -1.0, 1.0)};
        ad::hvp_result h = ad::hvp(mixed_cpp, x, v);
        ad::hessian_result hs = ad::hessian(mixed_cpp, x);
        real inner_value{};
        ad::gradient_result r = ad::gradient(
            [&](const real *u, std::size_t n) {
                real g[2];
                inner_value = ad::gradient(mixed_cpp, ad::real_array_view(u, n), g);
                return g[0] * v[0] + g[1] * v[1];
            },
            x);
        assert_close(ad::value(inner_value), h.value, "f inside");
        assert_close(r.value, h.grad[0] * v[0] + h.grad[1] * v[1], "grad f . v");
        assert_close(r.grad[0], h.hv[0], "H v [0]");
        assert_close(r.grad[1], h.hv[1], "H v [1]");
        // a vector-returning function of the nested gradient: its Jacobian
        // is the Hessian, its tangent H v
        auto grad_of = [](const std::vector<real> &u) { return ad::gradient(mixed_cpp, u).grad; };
        ad::jacobian_result J = ad::jacobian(grad_of, x, 2);
        for (std::size_t k = 0; k < 4; k++)
            assert_close(J.jac[k], hs.hess[k], "Jacobian of the gradient");
        ad::jvp_result t = ad::jvp(grad_of, x, v, 2);
        assert_close(t.jv[0], h.hv[0], "tangent of the gradient [0]");
        assert_close(t.jv[1], h.hv[1], "tangent of the gradient [1]");
    }
    // A closed form: f = x0^2 x1 + exp(x0 x1), grad f . v, at (0.5, -1.5).
    std::vector<double> x = {0.5, -1.5}, v = {2.0, -0.25};
    auto f = [](const std::vector<real> &u) {
        using std::exp;
        return u[0] * u[0] * u[1] + exp(u[0] * u[1]);
    };
    ad::gradient_result r = ad::gradient(
        [&](const std::vector<real> &u) {
            ad::real_gradient_result g = ad::gradient(f, u);
            return g.grad[0] * v[0] + g.grad[1] * v[1];
        },
        x);
    double a = x[0], b = x[1], e = std::exp(a * b);
    double h00 = 2 * b + b * b * e, h01 = 2 * a + e + a * b * e, h11 = a * a * e;
    assert_close(r.grad[0], h00 * v[0] + h01 * v[1], "closed form H v [0]");
    assert_close(r.grad[1], h01 * v[0] + h11 * v[1], "closed form H v [1]");
}

// f(x, y) = x^3 y^2 + sin(x y); the closed forms of its derivatives.
template <class T>
T third_f(const T *u)
{
    using std::sin;
    return u[0] * u[0] * u[0] * u[1] * u[1] + sin(u[0] * u[1]);
}

// d^k/dx^k of x e^(2x) by k nested gradients: e^(2x) 2^(k-1) (2x + k).
real nth_derivative(int k, real x)
{
    if (k == 0)
        return x * exp(2.0 * x);
    return ad::gradient([k](const real *u, std::size_t) { return nth_derivative(k - 1, u[0]); },
                        std::vector<real>{x})
        .grad[0];
}

void test_nested_third_derivative(void **state)
{
    (void)state;
    std::vector<double> x = {0.75, -1.25};
    double a = x[0], b = x[1], s = std::sin(a * b), c = std::cos(a * b);
    // Two levels inside ad::gradient: d/dy of d/dx f (level 2), then its
    // gradient (level 1), then the gradient of that's second entry.
    auto fxy = [](const real *u, std::size_t n) {
        auto fx = [](const real *w, std::size_t m) {
            return ad::gradient([](const real *p, std::size_t) { return third_f(p); },
                                ad::real_array_view(w, m))
                .grad[0];
        };
        return ad::gradient(fx, ad::real_array_view(u, n)).grad[1];
    };
    ad::gradient_result r = ad::gradient(fxy, x);
    assert_close(r.value, 6 * a * a * b + c - a * b * s, "f_xy");
    assert_close(r.grad[0], 12 * a * b - 2 * b * s - a * b * b * c, "f_xxy");
    assert_close(r.grad[1], 6 * a * a - 2 * a * s - a * a * b * c, "f_xyy");
    // One level inside ad::hessian: the Hessian of f_x.
    ad::hessian_result h = ad::hessian(
        [](const real *u, std::size_t n) {
            return ad::gradient([](const real *p, std::size_t) { return third_f(p); },
                                ad::real_array_view(u, n))
                .grad[0];
        },
        x);
    assert_close(h.hess[0], 6 * b * b - b * b * b * c, "f_xxx");
    assert_close(h.hess[1], 12 * a * b - 2 * b * s - a * b * b * c, "f_xxy (hessian)");
    assert_close(h.hess[3], 6 * a * a - 2 * a * s - a * a * b * c, "f_xyy (hessian)");
    // Deeper: up to the 6th derivative of x e^(2x), k - 1 nested levels.
    for (int k = 1; k <= 6; k++) {
        for (double t : {-0.5, 0.0, 0.375}) {
            ad::gradient_result d = ad::gradient(
                [k](const real *u, std::size_t) { return nth_derivative(k - 1, u[0]); },
                std::vector<double>{t});
            double want = std::exp(2 * t) * std::ldexp(1.0, k - 1) * (2 * t + k);
            assert_close(d.grad[0], want, "nth derivative");
        }
    }
}

// F(x) = (x0^2 x1, sin x0 + x1^3); J v inside ad::gradient, with v active
// (v = x) and with v constant.
void nested_F(const real *x, std::size_t, real *y, std::size_t)
{
    using std::sin;
    y[0] = x[0] * x[0] * x[1];
    y[1] = sin(x[0]) + x[1] * x[1] * x[1];
}

void test_nested_jvp(void **state)
{
    (void)state;
    std::vector<double> x = {0.8, -0.6};
    const double w0 = 1.5, w1 = -0.5, c0 = 0.25, c1 = 2.0, a = x[0], b = x[1];
    real y0{};
    // w . J(x) x
    ad::gradient_result r = ad::gradient(
        [&](const real *u, std::size_t n) {
            real y[2], jv[2];
            ad::jvp(nested_F, ad::real_array_view(u, n), ad::real_array_view(u, n), y, jv);
            y0 = y[0];
            return w0 * jv[0] + w1 * jv[1];
        },
        x);
    assert_close(ad::value(y0), a * a * b, "y inside");
    assert_close(r.value, w0 * 3 * a * a * b + w1 * (a * std::cos(a) + 3 * b * b * b), "w . J x");
    assert_close(r.grad[0], 6 * w0 * a * b + w1 * (std::cos(a) - a * std::sin(a)), "d/dx0 w . J x");
    assert_close(r.grad[1], 3 * w0 * a * a + 9 * w1 * b * b, "d/dx1 w . J x");
    // w . J(x) c, c constant; a vector-returning function, the allocating form
    auto Fv = [](const std::vector<real> &u) {
        std::array<real, 2> y;
        nested_F(u.data(), u.size(), y.data(), y.size());
        return y;
    };
    ad::gradient_result rc = ad::gradient(
        [&](const std::vector<real> &u) {
            ad::real_jvp_result t =
                ad::jvp(Fv, u, std::vector<real>{ad::constant(c0), ad::constant(c1)}, 2);
            return w0 * t.jv[0] + w1 * t.jv[1];
        },
        x);
    assert_close(rc.grad[0], w0 * (2 * b * c0 + 2 * a * c1) - w1 * std::sin(a) * c0, "d/dx0 w . J c");
    assert_close(rc.grad[1], w0 * 2 * a * c0 + w1 * 6 * b * c1, "d/dx1 w . J c");
    // the directional derivative of a directional derivative: ad::jvp
    // around ad::jvp, v the same direction (the second derivative along v)
    std::vector<double> d = {c0, c1};
    ad::jvp_result second = ad::jvp(
        [&](const real *u, std::size_t n, real *out, std::size_t m) {
            std::vector<real> dr = constants_of(d);
            std::vector<real> y(m);
            ad::jvp(nested_F, ad::real_array_view(u, n), dr, y, ad::real_array_ref(out, m));
        },
        x, d, 2);
    assert_close(second.jv[0], 2 * b * c0 * c0 + 4 * a * c0 * c1, "d2 F0 along c");
    assert_close(second.jv[1], -std::sin(a) * c0 * c0 + 6 * b * c1 * c1, "d2 F1 along c");
}

// d/dx [x * d/dy (x + y) at y = 1] at x = 1 is 1: x enters the inner
// function through its inputs.  Captured instead, it is another level's
// value: AD_EFOREIGN, not the confused answer 2.
void test_nested_perturbation_confusion(void **state)
{
    (void)state;
    std::vector<double> one = {1.0};
    ad::gradient_result r = ad::gradient(
        [](const real *x, std::size_t) {
            auto plus = [](const real *u, std::size_t) { return u[0] + u[1]; };  // (x, y)
            ad::real_gradient_result g = ad::gradient(plus, std::vector<real>{x[0], ad::constant(1.0)});
            return x[0] * g.grad[1];
        },
        one);
    assert_true(r.value == 1.0 && r.grad[0] == 1.0);
    // y alone as the inner input, x a constant copy: the same 1
    ad::gradient_result rc = ad::gradient(
        [](const real *x, std::size_t) {
            double xv = ad::value(x[0]);
            auto plus = [xv](const real *u, std::size_t) { return xv + u[0]; };
            return x[0] * ad::gradient(plus, std::vector<real>{ad::constant(1.0)}).grad[0];
        },
        one);
    assert_true(rc.grad[0] == 1.0);
    // the outer x captured: refused
    std::vector<double> g(1, 0.0);
    expect_error(AD_EFOREIGN, ad::gradient(
                                  [](const real *x, std::size_t) {
                                      real xc = x[0];
                                      auto plus = [xc](const real *u, std::size_t) { return xc + u[0]; };
                                      std::vector<real> y1 = {x[0] * 0.0 + 1.0};  // active y
                                      return x[0] * ad::gradient(plus, y1).grad[0];
                                  },
                                  one, g));
    assert_all_nan(g);
    assert_library_ok();
}

// Errors: the header's own checks throw before anything runs; a status of
// the C library throws and fails the enclosing recording, whose driver
// throws it even where the inner error was caught; the callable's own
// exception leaves every level.
void test_nested_errors(void **state)
{
    (void)state;
    std::vector<double> x = {1.5, 2.0};
    int calls = 0;
    auto f = [&calls](const real *v, std::size_t) {
        calls++;
        return v[0] * v[1];
    };
    auto fv = [&calls](const real *v, std::size_t, real *y, std::size_t) {
        calls++;
        y[0] = v[0] * v[1];
    };
    // sizes, and a null function pointer: outputs NaN, f not called
    std::vector<real> xr = constants_of(x), g3(3), v1(1), y1(1), jv2(2);
    expect_error(AD_EINVAL, ad::gradient(f, xr, g3));
    for (real e : g3)
        assert_true(std::isnan(ad::value(e)) && e.id == 0);
    expect_error(AD_EINVAL, ad::jvp(fv, xr, v1, 1));
    expect_error(AD_EINVAL, ad::jvp(fv, xr, xr, y1, jv2));
    assert_true(std::isnan(ad::value(y1[0])) && std::isnan(ad::value(jv2[1])));
    real (*null_fn)(const real *, std::size_t) = nullptr;
    expect_error(AD_EINVAL, ad::gradient(null_fn, xr));
    assert_int_equal(calls, 0);
    // inside a recording
    expect_error(AD_EINVAL, ad::gradient(
                                [&](const real *v, std::size_t n) {
                                    std::vector<real> g(1);
                                    ad::gradient(f, ad::real_array_view(v, n), g);
                                    return g[0];
                                },
                                x));
    assert_int_equal(calls, 0);
    // caught there: the enclosing recording goes on
    ad::gradient_result after_size = ad::gradient(
        [&](const real *v, std::size_t n) {
            std::vector<real> g(1);
            try {
                ad::gradient(f, ad::real_array_view(v, n), g);
            } catch (const ad::error &) {
                assert_true(std::isnan(ad::value(g[0])) && g[0].id == 0);
            }
            return v[0] * v[1];
        },
        x);
    assert_true(after_size.value == 3.0 && after_size.grad[0] == 2.0 && after_size.grad[1] == 1.5);
    assert_int_equal(calls, 0);

    // AD_ENOTSUP: an external function inside, with active x
    std::vector<double> gd(2, 0.0);
    auto outer = [](const real *v, std::size_t n) {
        return ad::gradient(with_external, ad::real_array_view(v, n)).grad[0];
    };
    expect_error(AD_ENOTSUP, ad::gradient(outer, x, gd));
    assert_all_nan(gd);
    // caught inside: the outputs are NaN, and the enclosing driver throws
    // the status all the same
    bool caught = false, nan_inside = false;
    expect_error(AD_ENOTSUP, ad::gradient(
                                 [&](const real *v, std::size_t n) {
                                     std::vector<real> g(n, ad::constant(0.0));
                                     try {
                                         ad::gradient(with_external, ad::real_array_view(v, n), g);
                                     } catch (const ad::error &e) {
                                         caught = e.status() == AD_ENOTSUP;
                                     }
                                     nan_inside = std::isnan(ad::value(g[0])) && std::isnan(ad::value(g[1]));
                                     return v[0] + v[1];
                                 },
                                 x));
    assert_true(caught && nan_inside);
    // lgamma of an active value, through ad::jvp
    expect_error(AD_ENOTSUP, ad::gradient(
                                 [](const real *v, std::size_t n) {
                                     auto lg = [](const real *u, std::size_t, real *y, std::size_t) {
                                         y[0] = lgamma(u[0]);
                                     };
                                     return ad::jvp(lg, ad::real_array_view(v, n), ad::real_array_view(v, n), 1)
                                         .jv[0];
                                 },
                                 x));
    // outside a recording, or from constants, the same calls work
    ad::real_gradient_result ok = ad::gradient(with_external, xr);
    assert_true(ad::value(ok.value) == 6.0 && ad::value(ok.grad[0]) == 4.0 && ad::value(ok.grad[1]) == 3.0);
    assert_library_ok();

    // the callable's exception, through both levels: called once
    calls = 0;
    auto thrower = [&calls](const real *v, std::size_t) -> real {
        calls++;
        if (v[0] > 0.0)
            throw user_exception{7};
        return v[0];
    };
    bool got = false;
    try {
        ad::gradient(
            [&](const std::vector<real> &v) {
                return v[0] * ad::gradient(thrower, v).value;
            },
            x);
    } catch (const user_exception &e) {
        got = e.tag == 7;
    }
    assert_true(got);
    assert_int_equal(calls, 1);
    // caught inside: the outputs are NaN constants, the enclosing recording
    // goes on
    ad::gradient_result rest = ad::gradient(
        [&](const real *v, std::size_t n) {
            std::vector<real> g(n);
            real fx = ad::constant(0.0);
            try {
                fx = ad::gradient(thrower, ad::real_array_view(v, n), g);
            } catch (const user_exception &) {
                assert_true(std::isnan(ad::value(g[0])) && g[0].id == 0);
            }
            return v[0] * v[1] + fx;
        },
        x);
    assert_true(rest.value == 3.0 && rest.grad[0] == 2.0 && rest.grad[1] == 1.5);
    assert_library_ok();
}

// Each level takes an ad::real gradient of the next, without end: the
// call past AD_MAX_NESTING fails, and, caught or not, each enclosing
// recording fails with it.
struct real_tower {
    int deepest = 0;
    bool catch_at_bottom = false;
    ad_status caught = AD_OK;
};

real climb_real(real_tower &t, int level, real x)
{
    auto f = [&t, level](const real *v, std::size_t) {
        t.deepest = level > t.deepest ? level : t.deepest;
        if (t.catch_at_bottom) {
            try {
                climb_real(t, level + 1, v[0]);
            } catch (const ad::error &e) {
                t.caught = t.caught == AD_OK ? e.status() : t.caught;
            }
        } else {
            climb_real(t, level + 1, v[0]);
        }
        return v[0];  // no records: each level's program stays empty
    };
    return ad::gradient(f, std::vector<real>{x}).grad[0];
}

void test_nested_enesting(void **state)
{
    (void)state;
    real_tower t;
    expect_error(AD_ENESTING,
                 ad::gradient([&t](const real *v, std::size_t) { return climb_real(t, 2, v[0]); },
                              std::vector<double>{0.5}));
    assert_int_equal(t.deepest, AD_MAX_NESTING);
    real_tower c;
    c.catch_at_bottom = true;
    expect_error(AD_ENESTING,
                 ad::gradient([&c](const real *v, std::size_t) { return climb_real(c, 2, v[0]); },
                              std::vector<double>{0.5}));
    assert_int_equal(c.caught, AD_ENESTING);
    assert_library_ok();
}

// ---- threads: each has its own tapes ----

// Recorded programs: a replay gives ad::gradient's numbers bit for bit;
// the comparison operators are guards (AD_EBRANCH when one flips, the
// program still usable); f is never called by a replay; moves, errors.
void test_program(void **state)
{
    (void)state;
    int calls = 0;
    auto f = [&calls](const real *v, std::size_t n) {
        calls++;
        real s = ad::constant(0.0);
        for (std::size_t i = 0; i < n; i++) {
            real d = v[i] - 0.25 * static_cast<double>(i);
            s += v[i] > 0.0 ? sin(d) * d : exp(d) + 1.0;
            if (d == 0.5)
                s += 1.0;
        }
        return s * s;
    };
    std::vector<double> x = {0.6, 1.0, 1.5};
    ad::program P = ad::record_program(f, x);
    assert_int_equal(calls, 1);
    assert_true(P.inputs() == 3 && P.outputs() == 1 && static_cast<bool>(P));
    std::uint64_t rng = 0x9e0c0d;
    for (int k = 0; k < 200; k++) {
        std::vector<double> y(3), g1(3), g2(3), v = {1.0, -2.0, 0.5}, h1(3), h2(3);
        for (double &t : y)
            t = uniform(rng, 0.1, 2.0);
        double f1 = P.gradient(y, g1), f2 = ad::gradient(f, y, g2);
        assert_memory_equal(&f1, &f2, sizeof f1);
        assert_memory_equal(g1.data(), g2.data(), 3 * sizeof(double));
        assert_true(P.value(y) == f2);
        f1 = P.hvp(y, v, g1, h1);
        f2 = ad::hvp(f, y, v, g2, h2);
        assert_memory_equal(h1.data(), h2.data(), 3 * sizeof(double));
    }
    int before = calls;
    std::vector<double> neg = {-0.6, 1.0, 1.5}, g(3);
    try {
        P.gradient(neg, g);
        fail_msg("no AD_EBRANCH for x[0] < 0");
    } catch (const ad::error &e) {
        assert_int_equal(e.status(), AD_EBRANCH);
    }
    assert_all_nan(g);
    std::vector<double> eq = {0.6, 0.75, 1.5};  // d == 0.5 at i = 1: == flips
    try {
        (void)P.value(eq);
        fail_msg("no AD_EBRANCH for ==");
    } catch (const ad::error &e) {
        assert_int_equal(e.status(), AD_EBRANCH);
    }
    assert_int_equal(calls, before);  // replays never call f
    (void)P.gradient(x, g);
    ad::program Q = std::move(P);
    assert_false(static_cast<bool>(P));
    assert_true(Q.gradient(x).grad == g);
    expect_error(AD_EINVAL, (void)P.gradient(x, g));
    std::vector<double> g2(2);
    expect_error(AD_EINVAL, (void)Q.gradient(x, g2));
    auto vf = [](const real *v, std::size_t, real *out, std::size_t) {
        out[0] = v[0] * v[1];
        out[1] = atan2(v[1], 2.0);
    };
    ad::program J = ad::record_program_function(vf, x, 2);
    auto jr = J.jacobian(x);
    auto jd = ad::jacobian(vf, x, 2);
    assert_true(jr.jac == jd.jac && jr.value == jd.value);
    assert_library_ok();
}

void test_threads(void **state)
{
    (void)state;
    enum { THREADS = 4, CALLS = 200 };
    std::vector<std::vector<double>> points;
    std::vector<ad::gradient_result> want;
    std::uint64_t rng = 0x5eed0c0c;
    for (int i = 0; i < CALLS; i++) {
        points.push_back({uniform(rng, -2.0, 2.0), uniform(rng, -2.0, 2.0)});
        want.push_back(ad::gradient(mixed_cpp, points.back()));
    }
    int wrong[THREADS] = {0};
    std::vector<std::thread> pool;
    for (int t = 0; t < THREADS; t++)
        pool.emplace_back([&, t] {
            for (int i = 0; i < CALLS; i++) {
                ad::gradient_result r = ad::gradient(mixed_cpp, points[static_cast<std::size_t>(i)]);
                const ad::gradient_result &e = want[static_cast<std::size_t>(i)];
                wrong[t] += bits(r.value) != bits(e.value) || bits(r.grad[0]) != bits(e.grad[0]) ||
                            bits(r.grad[1]) != bits(e.grad[1]);
            }
        });
    for (std::thread &th : pool)
        th.join();
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(wrong[t], 0);
}

}  // namespace

int main()
{
    std::vector<std::string> names;
    std::vector<CMUnitTest> tests;
    assert_true(n_unary == cpp_c_unary_count() && n_binary == cpp_c_binary_count());
    names.reserve(n_unary + n_binary + 1);
    for (std::size_t i = 0; i < n_unary; i++) {
        names.push_back(std::string("unary ") + unary_cases[i].name);
        tests.push_back({names.back().c_str(), test_unary, nullptr, nullptr, &unary_cases[i]});
    }
    names.push_back("unary abs");
    tests.push_back({names.back().c_str(), test_unary, nullptr, nullptr, &abs_case});
    for (std::size_t i = 0; i < n_binary; i++) {
        names.push_back(std::string("binary ") + binary_cases[i].name);
        tests.push_back({names.back().c_str(), test_binary, nullptr, nullptr, &binary_cases[i]});
    }
    const CMUnitTest rest[] = {
        cmocka_unit_test(test_comparisons),
        cmocka_unit_test(test_values_and_constants),
        cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_primitives),
        cmocka_unit_test(test_container_primitives),
        cmocka_unit_test(test_one_source_c_and_cpp),
        cmocka_unit_test(test_template_objective),
        cmocka_unit_test(test_driver_gradient),
        cmocka_unit_test(test_driver_second_order),
        cmocka_unit_test(test_driver_jacobians),
        cmocka_unit_test(test_driver_sparse_and_linear),
        cmocka_unit_test(test_c_api_from_cpp),
        cmocka_unit_test(test_error_einval),
        cmocka_unit_test(test_error_enomem),
        cmocka_unit_test(test_error_erange),
        cmocka_unit_test(test_error_enesting),
        cmocka_unit_test(test_error_eforeign),
        cmocka_unit_test(test_error_ebusy),
        cmocka_unit_test(test_error_enotsup),
        cmocka_unit_test(test_error_messages),
        cmocka_unit_test(test_user_exception),
        cmocka_unit_test(test_nested_as_constants),
        cmocka_unit_test(test_nested_gradient_is_hvp),
        cmocka_unit_test(test_nested_third_derivative),
        cmocka_unit_test(test_nested_jvp),
        cmocka_unit_test(test_nested_perturbation_confusion),
        cmocka_unit_test(test_nested_errors),
        cmocka_unit_test(test_nested_enesting),
        cmocka_unit_test(test_program),
        cmocka_unit_test(test_threads),
    };
    tests.insert(tests.end(), std::begin(rest), std::end(rest));
    return _cmocka_run_group_tests("cpp", tests.data(), tests.size(), nullptr, nullptr);
}
