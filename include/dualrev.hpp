// dualrev.hpp: the C++17 interface to dualrev.
//
// The same runtime and the same tape as the C API: ad::real *is* ad_real, so
// objectives, arrays and ad_objective pass between C and C++ unchanged.  The
// operators and the elementary functions are inline overloads that call the
// C API's own inline functions, so a C++ objective writes the C API's records,
// byte for byte, at the same cost.  The drivers take any callable and throw
// ad::error where the C API returns a status.  See README.md ("C++").
//
// The overloads taking ad_real live in the global namespace, ad_real's own:
// argument-dependent lookup finds them there, so that a template written as
//     using std::exp;  return x * exp(-x);
// compiles for double and for ad::real alike.
#ifndef DUALREV_HPP
#define DUALREV_HPP

#if __cplusplus < 201703L
#error "dualrev.hpp needs C++17 or later (dualrev.h alone needs neither)"
#endif

#include "dualrev.h"

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

// ---- arithmetic ----
//
// Each operator is the C API's function for that mix of types (ad_add_rr,
// ad_add_rd, ad_add_dr, ...), as the C generic names dispatch: the same
// records, and a constant operand costs no record.  Plain operands are
// double: int, float and the rest convert to it as they would in double
// arithmetic (with the same warnings).

#define AD__HPP_BINARY_OP(op, name)                                                       \
    inline ad_real operator op(ad_real a, ad_real b) noexcept { return ad_##name##_rr(a, b); } \
    inline ad_real operator op(ad_real a, double b) noexcept { return ad_##name##_rd(a, b); }  \
    inline ad_real operator op(double a, ad_real b) noexcept { return ad_##name##_dr(a, b); }  \
    inline ad_real &operator op##=(ad_real &a, ad_real b) noexcept                        \
    {                                                                                     \
        a = ad_##name##_rr(a, b);                                                         \
        return a;                                                                         \
    }                                                                                     \
    inline ad_real &operator op##=(ad_real &a, double b) noexcept                         \
    {                                                                                     \
        a = ad_##name##_rd(a, b);                                                         \
        return a;                                                                         \
    }

AD__HPP_BINARY_OP(+, add)
AD__HPP_BINARY_OP(-, sub)
AD__HPP_BINARY_OP(*, mul)
AD__HPP_BINARY_OP(/, div)
#undef AD__HPP_BINARY_OP

inline ad_real operator-(ad_real x) noexcept { return ad_neg_r(x); }
inline ad_real operator+(ad_real x) noexcept { return x; }

// Comparisons compare values: a branch is taken on the value at hand and is
// not differentiated.  They are the C guards (ad_lt, ...), so a recorded
// program (ad::program) sees each branch and a replay where one comes out
// the other way fails with AD_EBRANCH; != is the negation of ==.
#define AD__HPP_GUARD(op, test)                                                              \
    inline bool operator op(ad_real a, ad_real b) noexcept { return test; }                      \
    inline bool operator op(ad_real a, double b) noexcept { return operator op(a, ad_const(b)); } \
    inline bool operator op(double a, ad_real b) noexcept { return operator op(ad_const(a), b); }

AD__HPP_GUARD(<, ad__guarded(AD__CMP_LT, a, b, a.v < b.v) != 0)
AD__HPP_GUARD(<=, ad__guarded(AD__CMP_LE, a, b, a.v <= b.v) != 0)
AD__HPP_GUARD(>, ad__guarded(AD__CMP_GT, a, b, a.v > b.v) != 0)
AD__HPP_GUARD(>=, ad__guarded(AD__CMP_GE, a, b, a.v >= b.v) != 0)
AD__HPP_GUARD(==, ad__guarded(AD__CMP_EQ, a, b, a.v == b.v) != 0)
AD__HPP_GUARD(!=, ad__guarded(AD__CMP_EQ, a, b, a.v == b.v) == 0)
#undef AD__HPP_GUARD

// ---- elementary functions, by their <cmath> names ----

#define AD__HPP_UNARY(name, c) \
    inline ad_real name(ad_real x) noexcept { return ad_##c##_r(x); }

AD__HPP_UNARY(sqrt, sqrt)
AD__HPP_UNARY(cbrt, cbrt)
AD__HPP_UNARY(exp, exp)
AD__HPP_UNARY(expm1, expm1)
AD__HPP_UNARY(log, log)
AD__HPP_UNARY(log1p, log1p)
AD__HPP_UNARY(log2, log2)
AD__HPP_UNARY(log10, log10)
AD__HPP_UNARY(sin, sin)
AD__HPP_UNARY(cos, cos)
AD__HPP_UNARY(tan, tan)
AD__HPP_UNARY(asin, asin)
AD__HPP_UNARY(acos, acos)
AD__HPP_UNARY(atan, atan)
AD__HPP_UNARY(sinh, sinh)
AD__HPP_UNARY(cosh, cosh)
AD__HPP_UNARY(tanh, tanh)
AD__HPP_UNARY(asinh, asinh)
AD__HPP_UNARY(acosh, acosh)
AD__HPP_UNARY(atanh, atanh)
AD__HPP_UNARY(fabs, fabs)
AD__HPP_UNARY(abs, fabs)
AD__HPP_UNARY(erf, erf)
AD__HPP_UNARY(erfc, erfc)
AD__HPP_UNARY(lgamma, lgamma)
AD__HPP_UNARY(tgamma, tgamma)
#undef AD__HPP_UNARY

// pow(x, 2) takes pow(ad_real, double): <cmath>'s overloads and its
// arithmetic-only template do not accept an ad_real, so nothing is ambiguous.
#define AD__HPP_BINARY(name)                                                                  \
    inline ad_real name(ad_real a, ad_real b) noexcept { return ad_##name##_rr(a, b); }       \
    inline ad_real name(ad_real a, double b) noexcept { return ad_##name##_rd(a, b); }        \
    inline ad_real name(double a, ad_real b) noexcept { return ad_##name##_dr(a, b); }

AD__HPP_BINARY(pow)
AD__HPP_BINARY(atan2)
AD__HPP_BINARY(hypot)
AD__HPP_BINARY(fmin)
AD__HPP_BINARY(fmax)
#undef AD__HPP_BINARY

// Classification of the value, for code written once for double and
// ad::real and for Eigen (allFinite, hasNaN).  No record: like a branch on
// ad::value(x), a recorded program does not see it.
inline bool isfinite(ad_real x) noexcept { return std::isfinite(x.v); }
inline bool isinf(ad_real x) noexcept { return std::isinf(x.v); }
inline bool isnan(ad_real x) noexcept { return std::isnan(x.v); }

// Prints the value.  A template on the stream, so that <iosfwd> is enough
// here: its body is compiled where it is used, after the caller's <ostream>.
template <class CharT, class Traits>
std::basic_ostream<CharT, Traits> &operator<<(std::basic_ostream<CharT, Traits> &os, ad_real x)
{
    return os << ad_value(x);
}

// The limits of double, as constants (ID 0): std::numeric_limits<ad::real>
// is what generic code (Eigen's LDLT, NumTraits) asks of a number type.
template <>
struct std::numeric_limits<ad_real> : std::numeric_limits<double> {
    static constexpr ad_real min() noexcept { return std::numeric_limits<double>::min(); }
    static constexpr ad_real max() noexcept { return std::numeric_limits<double>::max(); }
    static constexpr ad_real lowest() noexcept { return std::numeric_limits<double>::lowest(); }
    static constexpr ad_real epsilon() noexcept { return std::numeric_limits<double>::epsilon(); }
    static constexpr ad_real round_error() noexcept
    {
        return std::numeric_limits<double>::round_error();
    }
    static constexpr ad_real infinity() noexcept { return std::numeric_limits<double>::infinity(); }
    static constexpr ad_real quiet_NaN() noexcept { return std::numeric_limits<double>::quiet_NaN(); }
    static constexpr ad_real signaling_NaN() noexcept
    {
        return std::numeric_limits<double>::signaling_NaN();
    }
    static constexpr ad_real denorm_min() noexcept
    {
        return std::numeric_limits<double>::denorm_min();
    }
};

namespace ad {

using real = ::ad_real;
using mat = ::ad_mat;
using rule = ::ad_rule;

// ---- errors ----

// What a driver throws for a status other than AD_OK.  what() is
// ad_strerror(status()), followed, for the C++ interface's own size checks,
// by what did not fit.
class error : public std::runtime_error {
public:
    explicit error(ad_status s) : std::runtime_error(ad_strerror(s)), status_(s) {}
    error(ad_status s, const std::string &detail)
        : std::runtime_error(std::string(ad_strerror(s)) + ": " + detail), status_(s)
    {
    }
    ad_status status() const noexcept { return status_; }

private:
    ad_status status_;
};

// ---- values and constants ----

// The value of an ad::real, or a plain number itself: for code written once
// for both that branches on values.
constexpr double value(double x) noexcept { return x; }
inline double value(real x) noexcept { return ad_value(x); }

// The constant c as a T (double or ad::real), for code written once for
// both: ad::constant<T>(0.5).  T{} is zero for both.
template <class T = real>
constexpr T constant(double c) noexcept
{
    static_assert(std::is_same_v<T, real> || std::is_arithmetic_v<T>,
                  "ad::constant<T>: T is ad::real or an arithmetic type");
    if constexpr (std::is_same_v<T, real>)
        return real{c, 0, 0};
    else
        return static_cast<T>(c);
}

// ---- arrays of doubles for the drivers ----

namespace detail {

template <class C, class P, class = void>
struct has_data_of : std::false_type {};
template <class C, class P>
struct has_data_of<C, P,
                   std::void_t<decltype(std::data(std::declval<C &>())),
                               decltype(std::size(std::declval<C &>()))>>
    : std::is_convertible<decltype(std::data(std::declval<C &>())), P> {};

template <class T>
using remove_cvref_t = std::remove_cv_t<std::remove_reference_t<T>>;

template <class C>
std::size_t size_of(C &c)
{
    return static_cast<std::size_t>(std::size(c));
}

}  // namespace detail

// A read-only array of doubles, not owned: made implicitly from anything
// with std::data() and std::size() giving doubles (std::vector, std::array,
// a C array, Eigen's vectors, ...), or from a pointer and a size.  Not from
// a braced list of numbers, whose array would die before a view kept in a
// variable is used: std::vector<double>{...} says what owns it.
class array_view {
public:
    constexpr array_view() noexcept = default;
    constexpr array_view(const double *p, std::size_t count) noexcept : p_(p), n_(count) {}
    template <class C,
              class = std::enable_if_t<!std::is_same_v<detail::remove_cvref_t<C>, array_view> &&
                                       detail::has_data_of<const C, const double *>::value>>
    array_view(const C &c) noexcept : p_(std::data(c)), n_(detail::size_of(c))
    {
    }

    constexpr const double *data() const noexcept { return p_; }
    constexpr std::size_t size() const noexcept { return n_; }
    constexpr bool empty() const noexcept { return n_ == 0; }
    constexpr const double &operator[](std::size_t i) const noexcept { return p_[i]; }
    constexpr const double *begin() const noexcept { return p_; }
    constexpr const double *end() const noexcept { return p_ + n_; }

private:
    const double *p_ = nullptr;
    std::size_t n_ = 0;
};

// A writable array of doubles, not owned, for the drivers' outputs; made
// like array_view from a container of doubles (or a pointer and a size).
class array_ref {
public:
    constexpr array_ref() noexcept = default;
    constexpr array_ref(double *p, std::size_t count) noexcept : p_(p), n_(count) {}
    template <class C,
              class = std::enable_if_t<!std::is_same_v<detail::remove_cvref_t<C>, array_ref> &&
                                       detail::has_data_of<std::remove_reference_t<C>, double *>::value>>
    array_ref(C &&c) noexcept : p_(std::data(c)), n_(detail::size_of(c))
    {
    }

    constexpr double *data() const noexcept { return p_; }
    constexpr std::size_t size() const noexcept { return n_; }
    constexpr bool empty() const noexcept { return n_ == 0; }
    constexpr double &operator[](std::size_t i) const noexcept { return p_[i]; }
    constexpr double *begin() const noexcept { return p_; }
    constexpr double *end() const noexcept { return p_ + n_; }

private:
    double *p_ = nullptr;
    std::size_t n_ = 0;
};

// The same two for arrays of ad::real, for the drivers' ad::real forms
// (ad::gradient, ad::jvp: nested derivatives): made implicitly from anything
// with std::data() and std::size() giving ad::reals, or from a pointer and a
// size.  real_array_view has no default constructor, so that {} as a
// driver's argument stays the empty array_view of doubles.
class real_array_view {
public:
    constexpr real_array_view(const real *p, std::size_t count) noexcept : p_(p), n_(count) {}
    template <class C,
              class = std::enable_if_t<!std::is_same_v<detail::remove_cvref_t<C>, real_array_view> &&
                                       detail::has_data_of<const C, const real *>::value>>
    real_array_view(const C &c) noexcept : p_(std::data(c)), n_(detail::size_of(c))
    {
    }

    constexpr const real *data() const noexcept { return p_; }
    constexpr std::size_t size() const noexcept { return n_; }
    constexpr bool empty() const noexcept { return n_ == 0; }
    constexpr const real &operator[](std::size_t i) const noexcept { return p_[i]; }
    constexpr const real *begin() const noexcept { return p_; }
    constexpr const real *end() const noexcept { return p_ + n_; }

private:
    const real *p_;
    std::size_t n_;
};

class real_array_ref {
public:
    constexpr real_array_ref() noexcept = default;
    constexpr real_array_ref(real *p, std::size_t count) noexcept : p_(p), n_(count) {}
    template <class C,
              class = std::enable_if_t<!std::is_same_v<detail::remove_cvref_t<C>, real_array_ref> &&
                                       detail::has_data_of<std::remove_reference_t<C>, real *>::value>>
    real_array_ref(C &&c) noexcept : p_(std::data(c)), n_(detail::size_of(c))
    {
    }

    constexpr real *data() const noexcept { return p_; }
    constexpr std::size_t size() const noexcept { return n_; }
    constexpr bool empty() const noexcept { return n_ == 0; }
    constexpr real &operator[](std::size_t i) const noexcept { return p_[i]; }
    constexpr real *begin() const noexcept { return p_; }
    constexpr real *end() const noexcept { return p_ + n_; }

private:
    real *p_ = nullptr;
    std::size_t n_ = 0;
};

// ---- array primitives (dualrev/nary.h): one record per result ----

inline real sum(std::size_t n, const real *x) noexcept { return ad_sum_r(n, x); }
inline double sum(std::size_t n, const double *x) noexcept { return ad_sum_d(n, x); }
inline real sqnorm(std::size_t n, const real *x) noexcept { return ad_sqnorm_r(n, x); }
inline double sqnorm(std::size_t n, const double *x) noexcept { return ad_sqnorm_d(n, x); }
inline real prod(std::size_t n, const real *x) noexcept { return ad_prod_r(n, x); }
inline double prod(std::size_t n, const double *x) noexcept { return ad_prod_d(n, x); }
inline real logsumexp(std::size_t n, const real *x) noexcept { return ad_logsumexp_r(n, x); }
inline double logsumexp(std::size_t n, const double *x) noexcept { return ad_logsumexp_d(n, x); }
// Either array may be the constant one; x with itself is recorded as sqnorm.
inline real dot(std::size_t n, const real *x, const real *y) noexcept { return ad_dot_r(n, x, y); }
inline real dot(std::size_t n, const real *x, const double *y) noexcept { return ad_dot_rd(n, x, y); }
inline real dot(std::size_t n, const double *x, const real *y) noexcept { return ad_dot_dr(n, x, y); }
inline double dot(std::size_t n, const double *x, const double *y) noexcept { return ad_dot_d(n, x, y); }
// y = A x, A m x n row-major.
inline void matvec(std::size_t m, std::size_t n, const double *A, const real *x, real *y) noexcept
{
    ad_matvec_r(m, n, A, x, y);
}
inline void matvec(std::size_t m, std::size_t n, const double *A, const double *x, double *y) noexcept
{
    ad_matvec_d(m, n, A, x, y);
}
inline void matvec(std::size_t m, std::size_t n, const real *A, const real *x, real *y) noexcept
{
    ad_matvec_rr(m, n, A, x, y);
}
// y += a x
inline void axpy(std::size_t n, double a, const real *x, real *y) noexcept { ad_axpy_r(n, a, x, y); }
inline void axpy(std::size_t n, double a, const double *x, double *y) noexcept { ad_axpy_d(n, a, x, y); }

// The reductions over a whole container (std::vector<T>, std::array<T, N>,
// a C array) of ad::real or double.
template <class C>
auto sum(const C &c) noexcept -> decltype(ad::sum(std::size_t{}, std::data(c)))
{
    return ad::sum(detail::size_of(c), std::data(c));
}
template <class C>
auto sqnorm(const C &c) noexcept -> decltype(ad::sqnorm(std::size_t{}, std::data(c)))
{
    return ad::sqnorm(detail::size_of(c), std::data(c));
}
template <class C>
auto prod(const C &c) noexcept -> decltype(ad::prod(std::size_t{}, std::data(c)))
{
    return ad::prod(detail::size_of(c), std::data(c));
}
template <class C>
auto logsumexp(const C &c) noexcept -> decltype(ad::logsumexp(std::size_t{}, std::data(c)))
{
    return ad::logsumexp(detail::size_of(c), std::data(c));
}
// Throws ad::error(AD_EINVAL) if the sizes differ.
template <class C, class D>
auto dot(const C &x, const D &y) -> decltype(ad::dot(std::size_t{}, std::data(x), std::data(y)))
{
    std::size_t n = detail::size_of(x);
    if (detail::size_of(y) != n)
        throw error(AD_EINVAL, "ad::dot: arrays of " + std::to_string(n) + " and " +
                                   std::to_string(detail::size_of(y)) + " elements");
    return ad::dot(n, std::data(x), std::data(y));
}

// ---- recorded matrices (dualrev/matrix.h) ----
//
// mat_make records an ad::real matrix or wraps a double one; errors throw
// (the recording also keeps them, so its driver would report them too).

inline void mat_make(std::size_t m, std::size_t n, const real *A, mat *M)
{
    ad_status s = ad_mat_record(m, n, A, M);
    if (s != AD_OK)
        throw error(s);
}
inline void mat_make(std::size_t m, std::size_t n, const double *A, mat *M)
{
    ad_status s = ad_mat_wrap(m, n, A, M);
    if (s != AD_OK)
        throw error(s);
}
inline void mat_vec(const mat *M, const real *x, real *y) noexcept { ad_mat_vec_rr(M, x, y); }
inline void mat_vec(const mat *M, const double *x, real *y) noexcept { ad_mat_vec_rd(M, x, y); }
inline void mat_vec(const mat *M, const double *x, double *y) noexcept { ad_mat_vec_d(M, x, y); }
inline void mat_sqnorm(const mat *M, const real *x, real *s) noexcept { ad_mat_sqnorm_rr(M, x, s); }
inline void mat_sqnorm(const mat *M, const double *x, real *s) noexcept { ad_mat_sqnorm_rd(M, x, s); }
inline void mat_sqnorm(const mat *M, const double *x, double *s) noexcept { ad_mat_sqnorm_d(M, x, s); }

// ---- functions dualrev cannot see ----

// ad_external, throwing (AD_EINVAL, AD_ENOMEM, AD_ERANGE) where it returns
// a status; ctx must stay valid as ad_external says.
inline void external(const rule &r, void *ctx, std::size_t n, const real *x, std::size_t m,
                     real *y)
{
    ad_status s = ad_external(&r, ctx, n, x, m, y);
    if (s != AD_OK)
        throw error(s);
}

// ---- tape memory ----

inline std::size_t set_tape_limit(std::size_t max_records) noexcept
{
    return ad_set_tape_limit(max_records);
}
inline ad_tape_stats tape_stats()
{
    ad_tape_stats st{};
    ad_status s = ad_tape_stats_get(&st);
    if (s != AD_OK)
        throw error(s);
    return st;
}
// Throws ad::error(AD_EBUSY) inside a recording.
inline void release()
{
    ad_status s = ad_release();
    if (s != AD_OK)
        throw error(s);
}
inline void tape_dump(std::FILE *out, std::size_t max_records)
{
    ad_status s = ad_tape_dump(out, max_records);
    if (s != AD_OK)
        throw error(s);
}
inline const char *version() noexcept { return ad_version(); }

// ---- drivers ----

namespace detail {

template <class>
inline constexpr bool always_false = false;

inline real nan_real() noexcept { return ad_const(std::numeric_limits<double>::quiet_NaN()); }

inline void fill_nan(array_ref a) noexcept
{
    for (double &v : a)
        v = std::numeric_limits<double>::quiet_NaN();
}
inline void fill_nan(real_array_ref a) noexcept
{
    for (real &v : a)
        v = nan_real();
}

// A size the caller got wrong: the outputs are NaN, as after any error.
[[noreturn]] inline void bad_size(const char *what, std::size_t got, std::size_t want)
{
    throw error(AD_EINVAL, std::string(what) + " has " + std::to_string(got) +
                               " elements, expected " + std::to_string(want));
}

// Ref: array_ref, or real_array_ref for the ad::real forms ({} is array_ref).
template <class Ref = array_ref>
void check_size(const char *what, std::size_t got, std::size_t want,
                std::initializer_list<Ref> outputs)
{
    if (got == want)
        return;
    for (Ref o : outputs)
        fill_nan(o);
    bad_size(what, got, want);
}

// n * n, or a size no array has when that overflows.
inline std::size_t square(std::size_t n) noexcept
{
    return n && n > std::numeric_limits<std::size_t>::max() / n
               ? std::numeric_limits<std::size_t>::max()
               : n * n;
}
inline std::size_t product(std::size_t m, std::size_t n) noexcept
{
    return n && m > std::numeric_limits<std::size_t>::max() / n
               ? std::numeric_limits<std::size_t>::max()
               : m * n;
}

// A null function pointer (or member pointer) is AD_EINVAL, as a NULL
// objective is for the C API; other callables cannot be null.
template <class F>
void check_callable(const F &f)
{
    if constexpr (std::is_pointer_v<F> || std::is_member_pointer_v<F>) {
        if (f == nullptr)
            throw error(AD_EINVAL, "the function is a null pointer");
    } else {
        (void)f;
    }
}

// ---- scalar objectives: f(const real *x, size_t n), or f(const std::vector<real> &x)

template <class F>
inline constexpr bool objective_takes_pointer =
    std::is_invocable_v<F &, const real *, std::size_t>;
template <class F>
inline constexpr bool objective_takes_vector =
    std::conjunction_v<std::bool_constant<!objective_takes_pointer<F>>,
                       std::is_invocable<F &, const std::vector<real> &>>;

// An ad::real, or a type that converts to one, but not a plain number:
// ad::real converts from double and int (constants), and an objective that
// returns a double would have no derivative.
template <class R>
inline constexpr bool returns_real =
    std::is_convertible_v<R, real> && !std::is_arithmetic_v<remove_cvref_t<R>>;

template <class F>
constexpr bool is_objective()
{
    if constexpr (objective_takes_pointer<F>)
        return returns_real<std::invoke_result_t<F &, const real *, std::size_t>>;
    else if constexpr (objective_takes_vector<F>)
        return returns_real<std::invoke_result_t<F &, const std::vector<real> &>>;
    else
        return false;
}

// The callable's exception is caught here, never let into the C library,
// whose frames have no unwind tables: the recording goes on with a NaN
// result, the C driver returns, and the driver rethrows it.  A callable
// that has thrown is not called again.
template <class F>
struct objective_call {
    F *f;
    std::exception_ptr thrown;

    static real run(const real *x, std::size_t n, void *ctx) noexcept
    {
        auto *self = static_cast<objective_call *>(ctx);
        if (self->thrown)
            return nan_real();
        try {
            if constexpr (objective_takes_pointer<F>) {
                return std::invoke(*self->f, x, n);
            } else {
                const std::vector<real> v(x, x + n);
                return std::invoke(*self->f, v);
            }
        } catch (...) {
            self->thrown = std::current_exception();
            return nan_real();
        }
    }
};

// ---- vector functions: f(const real *x, size_t n, real *y, size_t m), or
// y = f(const std::vector<real> &x) with y any container of m ad::reals

template <class F>
inline constexpr bool function_takes_pointer =
    std::is_invocable_v<F &, const real *, std::size_t, real *, std::size_t>;
template <class F>
inline constexpr bool function_takes_vector =
    std::conjunction_v<std::bool_constant<!function_takes_pointer<F>>,
                       std::is_invocable<F &, const std::vector<real> &>>;

template <class F>
constexpr bool is_function()
{
    if constexpr (function_takes_pointer<F>) {
        return true;
    } else if constexpr (function_takes_vector<F>) {
        using R = std::invoke_result_t<F &, const std::vector<real> &>;
        return has_data_of<const std::remove_reference_t<R>, const real *>::value;
    } else {
        return false;
    }
}

template <class F>
struct function_call {
    F *f;
    std::exception_ptr thrown;

    static void run(const real *x, std::size_t n, real *y, std::size_t m, void *ctx) noexcept
    {
        auto *self = static_cast<function_call *>(ctx);
        if (self->thrown)
            return;  // y is NaN: the C driver set it so
        try {
            if constexpr (function_takes_pointer<F>) {
                std::invoke(*self->f, x, n, y, m);
            } else {
                const std::vector<real> v(x, x + n);
                const auto &r = std::invoke(*self->f, v);
                std::size_t got = size_of(r);
                if (got != m)
                    bad_size("the result of the function", got, m);
                const real *p = std::data(r);
                for (std::size_t j = 0; j < m; j++)
                    y[j] = p[j];
            }
        } catch (...) {
            self->thrown = std::current_exception();
            for (std::size_t j = 0; j < m; j++)  // not half-written results
                y[j] = nan_real();
        }
    }
};

// The callable's own exception first: it is why the recording failed, if
// it did.  The C driver has finished by then, on NaN results: the outputs
// are made NaN, as the C API leaves them on an error.
template <class Ref = array_ref>
void finish(ad_status s, const std::exception_ptr &thrown, std::initializer_list<Ref> outputs)
{
    if (thrown) {
        for (Ref o : outputs)
            fill_nan(o);
        std::rethrow_exception(thrown);
    }
    if (s != AD_OK)
        throw error(s);
}

#define AD__HPP_OBJECTIVE(F)                                                                     \
    static_assert(detail::is_objective<std::remove_reference_t<F>>(),                           \
                  "ad: the objective must be callable as f(const ad::real *x, std::size_t n) "  \
                  "or as f(const std::vector<ad::real> &x), and return ad::real (not a double)")
#define AD__HPP_FUNCTION(F)                                                                      \
    static_assert(detail::is_function<std::remove_reference_t<F>>(),                            \
                  "ad: the function must be callable as f(const ad::real *x, std::size_t n, "   \
                  "ad::real *y, std::size_t m), or as y = f(const std::vector<ad::real> &x) "   \
                  "with y a container of ad::real")

}  // namespace detail

// The results of the allocating forms.  Row-major matrices, as in the C API.
struct gradient_result {
    double value;
    std::vector<double> grad;  // n
};

struct hvp_result {
    double value;
    std::vector<double> grad;  // n
    std::vector<double> hv;    // n: H v
};

struct hessian_result {
    double value;
    std::vector<double> grad;  // n
    std::vector<double> hess;  // n x n
};

struct jacobian_result {
    std::vector<double> value;  // m: y = f(x)
    std::vector<double> jac;    // m x n
    std::size_t rows, cols;     // m, n
    double operator()(std::size_t i, std::size_t j) const noexcept { return jac[i * cols + j]; }
};

struct jvp_result {
    std::vector<double> value;  // m
    std::vector<double> jv;     // m: J v
};

struct vjp_result {
    std::vector<double> value;  // m
    std::vector<double> wj;     // n: J^T w
};

// Value and gradient of f at x: ad_gradient.  Writes grad (x.size()
// elements) and returns f(x).
template <class F>
double gradient(F &&f, array_view x, array_ref grad)
{
    AD__HPP_OBJECTIVE(F);
    detail::check_size("grad", grad.size(), x.size(), {grad});
    detail::check_callable(f);
    detail::objective_call<std::remove_reference_t<F>> call{&f, nullptr};
    double fx;
    ad_status s = ad_gradient(&call.run, &call, x.size(), x.data(), &fx, grad.data());
    detail::finish(s, call.thrown, {grad});
    return fx;
}

template <class F>
gradient_result gradient(F &&f, array_view x)
{
    gradient_result r{0.0, std::vector<double>(x.size())};
    r.value = ad::gradient(std::forward<F>(f), x, r.grad);
    return r;
}

// The ad::real forms: ad_gradient_r.  Inside a recording (in an objective
// or function that a driver is running) the value and the gradient are
// values of that recording, which differentiates through them: nested
// derivatives, to any depth.  Outside one, or from constants alone,
// ad_gradient's numbers as constants.  f is the same callable as above,
// and x must enter it as its argument: a value of the enclosing recording
// that f captures is AD_EFOREIGN.  A status of the C library also fails
// the enclosing recording (its driver reports it even if this exception is
// caught); the size checks and f's own exceptions do not.
struct real_gradient_result {
    real value;
    std::vector<real> grad;  // n
};

template <class F>
real gradient(F &&f, real_array_view x, real_array_ref grad)
{
    AD__HPP_OBJECTIVE(F);
    detail::check_size("grad", grad.size(), x.size(), {grad});
    detail::check_callable(f);
    detail::objective_call<std::remove_reference_t<F>> call{&f, nullptr};
    real fx{};
    ad_status s = ad_gradient_r(&call.run, &call, x.size(), x.data(), &fx, grad.data());
    detail::finish(s, call.thrown, {grad});
    return fx;
}

template <class F>
real_gradient_result gradient(F &&f, real_array_view x)
{
    real_gradient_result r{real{}, std::vector<real>(x.size())};
    r.value = ad::gradient(std::forward<F>(f), x, r.grad);
    return r;
}

// H v with the value and gradient: ad_hvp.  AD_ENOTSUP if f calls an
// external function whose rule has no hvp.
template <class F>
double hvp(F &&f, array_view x, array_view v, array_ref grad, array_ref hv)
{
    AD__HPP_OBJECTIVE(F);
    detail::check_size("grad", grad.size(), x.size(), {grad, hv});
    detail::check_size("hv", hv.size(), x.size(), {grad, hv});
    detail::check_size("v", v.size(), x.size(), {grad, hv});
    detail::check_callable(f);
    detail::objective_call<std::remove_reference_t<F>> call{&f, nullptr};
    double fx;
    ad_status s = ad_hvp(&call.run, &call, x.size(), x.data(), v.data(), &fx, grad.data(),
                         hv.data());
    detail::finish(s, call.thrown, {grad, hv});
    return fx;
}

template <class F>
hvp_result hvp(F &&f, array_view x, array_view v)
{
    hvp_result r{0.0, std::vector<double>(x.size()), std::vector<double>(x.size())};
    r.value = ad::hvp(std::forward<F>(f), x, v, r.grad, r.hv);
    return r;
}

// k Hessian-vector products from one recording: ad_hvps.  V holds k
// directions of x.size(), HV gets H v_j at j * x.size().
template <class F>
double hvps(F &&f, array_view x, std::size_t k, array_view V, array_ref grad, array_ref HV)
{
    AD__HPP_OBJECTIVE(F);
    std::size_t n = x.size(), kn = n && k > std::numeric_limits<std::size_t>::max() / n
                                       ? std::numeric_limits<std::size_t>::max()
                                       : k * n;
    detail::check_size("grad", grad.size(), n, {grad, HV});
    detail::check_size("HV", HV.size(), kn, {grad, HV});
    detail::check_size("V", V.size(), kn, {grad, HV});
    detail::check_callable(f);
    detail::objective_call<std::remove_reference_t<F>> call{&f, nullptr};
    double fx = 0.0;
    ad_status s = ad_hvps(&call.run, &call, n, x.data(), k, V.data(), &fx, grad.data(), HV.data());
    detail::finish(s, call.thrown, {grad, HV});
    return fx;
}

// The dense Hessian (n x n, row-major) with the value and gradient:
// ad_hessian.  AD_ENOTSUP if f calls an external function whose rule has
// no hvp.
template <class F>
double hessian(F &&f, array_view x, array_ref grad, array_ref hess)
{
    AD__HPP_OBJECTIVE(F);
    detail::check_size("grad", grad.size(), x.size(), {grad, hess});
    detail::check_size("hess", hess.size(), detail::square(x.size()), {grad, hess});
    detail::check_callable(f);
    detail::objective_call<std::remove_reference_t<F>> call{&f, nullptr};
    double fx;
    ad_status s = ad_hessian(&call.run, &call, x.size(), x.data(), &fx, grad.data(), hess.data());
    detail::finish(s, call.thrown, {grad, hess});
    return fx;
}

template <class F>
hessian_result hessian(F &&f, array_view x)
{
    hessian_result r{0.0, std::vector<double>(x.size()),
                     std::vector<double>(detail::square(x.size()))};
    r.value = ad::hessian(std::forward<F>(f), x, r.grad, r.hess);
    return r;
}

// y = f(x) and its m x n Jacobian (m = y.size()): ad_jacobian.
template <class F>
void jacobian(F &&f, array_view x, array_ref y, array_ref jac)
{
    AD__HPP_FUNCTION(F);
    detail::check_size("jac", jac.size(), detail::product(y.size(), x.size()), {y, jac});
    detail::check_callable(f);
    detail::function_call<std::remove_reference_t<F>> call{&f, nullptr};
    ad_status s = ad_jacobian(&call.run, &call, x.size(), x.data(), y.size(), y.data(), jac.data());
    detail::finish(s, call.thrown, {y, jac});
}

template <class F>
jacobian_result jacobian(F &&f, array_view x, std::size_t m)
{
    jacobian_result r{std::vector<double>(m), std::vector<double>(detail::product(m, x.size())),
                      m, x.size()};
    ad::jacobian(std::forward<F>(f), x, r.value, r.jac);
    return r;
}

// y = f(x) and J v (m = y.size()): ad_jvp, one forward sweep.
template <class F>
void jvp(F &&f, array_view x, array_view v, array_ref y, array_ref jv)
{
    AD__HPP_FUNCTION(F);
    detail::check_size("jv", jv.size(), y.size(), {y, jv});
    detail::check_size("v", v.size(), x.size(), {y, jv});
    detail::check_callable(f);
    detail::function_call<std::remove_reference_t<F>> call{&f, nullptr};
    ad_status s = ad_jvp(&call.run, &call, x.size(), x.data(), v.data(), y.size(), y.data(),
                         jv.data());
    detail::finish(s, call.thrown, {y, jv});
}

template <class F>
jvp_result jvp(F &&f, array_view x, array_view v, std::size_t m)
{
    jvp_result r{std::vector<double>(m), std::vector<double>(m)};
    ad::jvp(std::forward<F>(f), x, v, r.value, r.jv);
    return r;
}

// The ad::real forms: ad_jvp_r, as ad::gradient's above; x and v may both
// hold values of the enclosing recording (J v is differentiated in both).
struct real_jvp_result {
    std::vector<real> value;  // m
    std::vector<real> jv;     // m: J v
};

template <class F>
void jvp(F &&f, real_array_view x, real_array_view v, real_array_ref y, real_array_ref jv)
{
    AD__HPP_FUNCTION(F);
    detail::check_size("jv", jv.size(), y.size(), {y, jv});
    detail::check_size("v", v.size(), x.size(), {y, jv});
    detail::check_callable(f);
    detail::function_call<std::remove_reference_t<F>> call{&f, nullptr};
    ad_status s = ad_jvp_r(&call.run, &call, x.size(), x.data(), v.data(), y.size(), y.data(),
                           jv.data());
    detail::finish(s, call.thrown, {y, jv});
}

template <class F>
real_jvp_result jvp(F &&f, real_array_view x, real_array_view v, std::size_t m)
{
    real_jvp_result r{std::vector<real>(m), std::vector<real>(m)};
    ad::jvp(std::forward<F>(f), x, v, r.value, r.jv);
    return r;
}

// y = f(x) and J^T w (m = w.size()): ad_vjp, one reverse sweep.
template <class F>
void vjp(F &&f, array_view x, array_view w, array_ref y, array_ref wj)
{
    AD__HPP_FUNCTION(F);
    detail::check_size("y", y.size(), w.size(), {y, wj});
    detail::check_size("wj", wj.size(), x.size(), {y, wj});
    detail::check_callable(f);
    detail::function_call<std::remove_reference_t<F>> call{&f, nullptr};
    ad_status s = ad_vjp(&call.run, &call, x.size(), x.data(), w.size(), w.data(), y.data(),
                         wj.data());
    detail::finish(s, call.thrown, {y, wj});
}

template <class F>
vjp_result vjp(F &&f, array_view x, array_view w)
{
    vjp_result r{std::vector<double>(w.size()), std::vector<double>(x.size())};
    ad::vjp(std::forward<F>(f), x, w, r.value, r.wj);
    return r;
}

// A sparse Jacobian in compressed sparse rows (ad_csr), owned: freed with
// ad_csr_free when destroyed.  Move-only.
class csr {
public:
    csr() noexcept : j_{} {}
    csr(const csr &) = delete;
    csr &operator=(const csr &) = delete;
    csr(csr &&o) noexcept : j_(o.j_) { o.j_ = ad_csr{}; }
    csr &operator=(csr &&o) noexcept
    {
        if (this != &o) {
            ad_csr_free(&j_);
            j_ = o.j_;
            o.j_ = ad_csr{};
        }
        return *this;
    }
    ~csr() { ad_csr_free(&j_); }

    std::size_t rows() const noexcept { return j_.rows; }
    std::size_t cols() const noexcept { return j_.cols; }
    std::size_t nnz() const noexcept { return j_.nnz; }
    // Row i holds col()[row_ptr()[i] .. row_ptr()[i+1]), columns ascending.
    const std::size_t *row_ptr() const noexcept { return j_.row_ptr; }
    const std::size_t *col() const noexcept { return j_.col; }
    const double *val() const noexcept { return j_.val; }
    const ad_csr &get() const noexcept { return j_; }

private:
    template <class F>
    friend void sparse_jacobian(F &&f, array_view x, array_ref y, csr &jac);

    ad_csr j_;
};

struct sparse_jacobian_result {
    std::vector<double> value;  // m
    csr jac;                    // m x n
};

// y = f(x) and its Jacobian as CSR, the structure found on the tape:
// ad_sparse_jacobian.
template <class F>
void sparse_jacobian(F &&f, array_view x, array_ref y, csr &jac)
{
    AD__HPP_FUNCTION(F);
    detail::check_callable(f);
    // Freed first: the thread keeps the arrays, and this call takes them
    // over.  On an error jac is left empty, as the C API leaves it.
    ad_csr_free(&jac.j_);
    detail::function_call<std::remove_reference_t<F>> call{&f, nullptr};
    ad_status s = ad_sparse_jacobian(&call.run, &call, x.size(), x.data(), y.size(), y.data(),
                                     &jac.j_);
    if (call.thrown)
        ad_csr_free(&jac.j_);
    detail::finish(s, call.thrown, {y});
}

template <class F>
sparse_jacobian_result sparse_jacobian(F &&f, array_view x, std::size_t m)
{
    sparse_jacobian_result r{std::vector<double>(m), csr()};
    ad::sparse_jacobian(std::forward<F>(f), x, r.value, r.jac);
    return r;
}

// f recorded once at x (ad_linearize): apply J and J^T any number of times
// without running f again.  Owns the recording (ad_linear_free when
// destroyed); move-only; one thread at a time.
class linear {
public:
    linear() noexcept = default;
    linear(const linear &) = delete;
    linear &operator=(const linear &) = delete;
    linear(linear &&o) noexcept : L_(o.L_), n_(o.n_), y_(std::move(o.y_)) { o.L_ = nullptr; }
    linear &operator=(linear &&o) noexcept
    {
        if (this != &o) {
            ad_linear_free(L_);
            L_ = o.L_;
            n_ = o.n_;
            y_ = std::move(o.y_);
            o.L_ = nullptr;
        }
        return *this;
    }
    ~linear() { ad_linear_free(L_); }

    std::size_t rows() const noexcept { return y_.size(); }
    std::size_t cols() const noexcept { return n_; }
    // y = f(x), as recorded.
    const std::vector<double> &value() const noexcept { return y_; }

    // jv = J v (AD_ENOTSUP if f called an external function without jvp).
    void jvp(array_view v, array_ref jv)
    {
        detail::check_size("jv", jv.size(), rows(), {jv});
        detail::check_size("v", v.size(), n_, {jv});
        check(ad_linear_jvp(L_, v.data(), jv.data()));
    }
    std::vector<double> jvp(array_view v)
    {
        std::vector<double> jv(rows());
        jvp(v, jv);
        return jv;
    }
    // wj = J^T w
    void vjp(array_view w, array_ref wj)
    {
        detail::check_size("wj", wj.size(), n_, {wj});
        detail::check_size("w", w.size(), rows(), {wj});
        check(ad_linear_vjp(L_, w.data(), wj.data()));
    }
    std::vector<double> vjp(array_view w)
    {
        std::vector<double> wj(n_);
        vjp(w, wj);
        return wj;
    }
    // k directions at once (ad_linear_jvps): V holds k vectors of cols(),
    // JV gets k results of rows(), direction j at j * cols() and j * rows().
    void jvps(std::size_t k, array_view V, array_ref JV)
    {
        detail::check_size("JV", JV.size(), k * rows(), {JV});
        detail::check_size("V", V.size(), k * n_, {JV});
        check(ad_linear_jvps(L_, k, V.data(), JV.data()));
    }
    std::vector<double> jvps(std::size_t k, array_view V)
    {
        std::vector<double> JV(k * rows());
        jvps(k, V, JV);
        return JV;
    }
    // k cotangents at once (ad_linear_vjps): W holds k of rows(), WJ gets k
    // of cols().
    void vjps(std::size_t k, array_view W, array_ref WJ)
    {
        detail::check_size("WJ", WJ.size(), k * n_, {WJ});
        detail::check_size("W", W.size(), k * rows(), {WJ});
        check(ad_linear_vjps(L_, k, W.data(), WJ.data()));
    }
    std::vector<double> vjps(std::size_t k, array_view W)
    {
        std::vector<double> WJ(k * n_);
        vjps(k, W, WJ);
        return WJ;
    }

    ad_linear *get() const noexcept { return L_; }

private:
    template <class F>
    friend linear linearize(F &&f, array_view x, std::size_t m);

    static void check(ad_status s)
    {
        if (s != AD_OK)
            throw error(s);
    }

    ad_linear *L_ = nullptr;
    std::size_t n_ = 0;
    std::vector<double> y_;
};

template <class F>
linear linearize(F &&f, array_view x, std::size_t m)
{
    AD__HPP_FUNCTION(F);
    detail::check_callable(f);
    linear out;
    out.n_ = x.size();
    out.y_.assign(m, 0.0);
    detail::function_call<std::remove_reference_t<F>> call{&f, nullptr};
    ad_status s = ad_linearize(&call.run, &call, x.size(), x.data(), m, out.y_.data(), &out.L_);
    detail::finish(s, call.thrown, {});
    return out;
}

// A recorded program (ad_program_record): f recorded once at x, then its
// values and derivatives at other points from the kept operations, f never
// called again.  Each replay throws ad::error, AD_EBRANCH where a
// comparison f made (<, ==, ... on ad::real; ad_lt, ...) comes out the
// other way: the program stays usable; record again there.  Move-only;
// const replays may run on many threads at once.
class program {
public:
    program() noexcept = default;
    program(const program &) = delete;
    program &operator=(const program &) = delete;
    program(program &&o) noexcept : P_(o.P_), n_(o.n_), m_(o.m_) { o.P_ = nullptr; }
    program &operator=(program &&o) noexcept
    {
        if (this != &o) {
            ad_program_free(P_);
            P_ = o.P_;
            n_ = o.n_;
            m_ = o.m_;
            o.P_ = nullptr;
        }
        return *this;
    }
    ~program() { ad_program_free(P_); }

    std::size_t inputs() const noexcept { return n_; }
    std::size_t outputs() const noexcept { return m_; }
    ad_program *get() const noexcept { return P_; }
    explicit operator bool() const noexcept { return P_ != nullptr; }

    // f(x) (outputs() values: one for a program of an objective).
    void value(array_view x, array_ref y) const
    {
        detail::check_size("y", y.size(), m_, {y});
        check_x(x, {y});
        check(ad_program_value(P_, x.data(), y.data()));
    }
    double value(array_view x) const
    {
        std::vector<double> y(m_);
        value(x, y);
        return m_ ? y[0] : 0.0;
    }
    // f(x) and its gradient: ad_program_gradient.
    double gradient(array_view x, array_ref grad) const
    {
        detail::check_size("grad", grad.size(), n_, {grad});
        check_x(x, {grad});
        double fx;
        check(ad_program_gradient(P_, x.data(), &fx, grad.data()));
        return fx;
    }
    gradient_result gradient(array_view x) const
    {
        gradient_result r{0.0, std::vector<double>(n_)};
        r.value = gradient(x, r.grad);
        return r;
    }
    // f(x), its gradient and H v: ad_program_hvp.
    double hvp(array_view x, array_view v, array_ref grad, array_ref hv) const
    {
        detail::check_size("grad", grad.size(), n_, {grad, hv});
        detail::check_size("hv", hv.size(), n_, {grad, hv});
        detail::check_size("v", v.size(), n_, {grad, hv});
        check_x(x, {grad, hv});
        double fx;
        check(ad_program_hvp(P_, x.data(), v.data(), &fx, grad.data(), hv.data()));
        return fx;
    }
    // y = f(x) and the m x n Jacobian, row-major: ad_program_jacobian.
    jacobian_result jacobian(array_view x) const
    {
        jacobian_result r{std::vector<double>(m_), std::vector<double>(m_ * n_), m_, n_};
        check_x(x, {r.value, r.jac});
        check(ad_program_jacobian(P_, x.data(), r.value.data(), r.jac.data()));
        return r;
    }

private:
    template <class F>
    friend program record_program(F &&f, array_view x);
    template <class F>
    friend program record_program_function(F &&f, array_view x, std::size_t m);

    void check_x(array_view x, std::initializer_list<array_ref> outputs) const
    {
        if (!P_) {
            for (array_ref o : outputs)
                detail::fill_nan(o);
            throw error(AD_EINVAL, "the program is empty");
        }
        detail::check_size("x", x.size(), n_, outputs);
    }
    static void check(ad_status s)
    {
        if (s != AD_OK)
            throw error(s);
    }

    ad_program *P_ = nullptr;
    std::size_t n_ = 0, m_ = 0;
};

// Records the objective f (as ad::gradient takes it) at x as a program.
template <class F>
program record_program(F &&f, array_view x)
{
    AD__HPP_OBJECTIVE(F);
    detail::check_callable(f);
    program out;
    detail::objective_call<std::remove_reference_t<F>> call{&f, nullptr};
    ad_status s = ad_program_record(&call.run, &call, x.size(), x.data(), &out.P_);
    detail::finish(s, call.thrown, {});
    out.n_ = x.size();
    out.m_ = 1;
    return out;
}

// Records the function f of m outputs (as ad::jacobian takes it) at x.
template <class F>
program record_program_function(F &&f, array_view x, std::size_t m)
{
    AD__HPP_FUNCTION(F);
    detail::check_callable(f);
    program out;
    detail::function_call<std::remove_reference_t<F>> call{&f, nullptr};
    ad_status s = ad_program_record_function(&call.run, &call, x.size(), m, x.data(), &out.P_);
    detail::finish(s, call.thrown, {});
    out.n_ = x.size();
    out.m_ = m;
    return out;
}

#undef AD__HPP_OBJECTIVE
#undef AD__HPP_FUNCTION

}  // namespace ad

#endif
