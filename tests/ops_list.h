/* Every elementary operation of dualrev, as X-macro lists, with the libm
 * function that is its independent reference and the region the
 * finite-difference tests sample from.
 *
 * UNARY_OPS(X):  X(op, reference, lo, hi, keep)
 * BINARY_OPS(X): X(op, reference, alo, ahi, blo, bhi, keep)
 *
 * Points are drawn uniformly from [lo, hi] (a box for binary operations) and
 * kept only where keep() is true: it excludes neighbourhoods of poles, kinks,
 * ties and branch cuts, so that the stencil of check.h never straddles one. */
#ifndef DUALREV_TESTS_OPS_LIST_H
#define DUALREV_TESTS_OPS_LIST_H

#include <math.h>

static inline double ref_neg(double x) { return -x; }
static inline double ref_add(double a, double b) { return a + b; }
static inline double ref_sub(double a, double b) { return a - b; }
static inline double ref_mul(double a, double b) { return a * b; }
static inline double ref_div(double a, double b) { return a / b; }

static inline int keep_any(double x) { (void)x; return 1; }
static inline int keep_off_zero(double x) { return fabs(x) >= 0.1; }

/* Poles of tan at pi/2 + k pi. */
static inline int keep_off_tan_poles(double x)
{
    return fabs(remainder(x - 1.5707963267948966, 3.141592653589793)) >= 0.15;
}

/* Poles of the gamma functions at 0, -1, -2, ... */
static inline int keep_off_gamma_poles(double x)
{
    return x >= 0.15 || fabs(x - nearbyint(x)) >= 0.15;
}

static inline int keep_any2(double a, double b) { (void)a; (void)b; return 1; }
static inline int keep_divisor(double a, double b) { (void)a; return fabs(b) >= 0.5; }
static inline int keep_off_origin(double a, double b) { return hypot(a, b) >= 0.5; }
static inline int keep_off_tie(double a, double b) { return fabs(a - b) >= 0.1; }

/* atan2 jumps by 2 pi across the negative b axis (a = 0, b < 0). */
static inline int keep_atan2(double a, double b)
{
    return keep_off_origin(a, b) && !(b < 0.0 && fabs(a) < 0.1);
}

#define UNARY_OPS(X)                                        \
    X(neg, ref_neg, -10.0, 10.0, keep_any)                  \
    X(sqrt, sqrt, 0.1, 10.0, keep_any)                      \
    X(cbrt, cbrt, -10.0, 10.0, keep_off_zero)               \
    X(exp, exp, -10.0, 10.0, keep_any)                      \
    X(expm1, expm1, -10.0, 10.0, keep_any)                  \
    X(log, log, 0.1, 10.0, keep_any)                        \
    X(log1p, log1p, -0.9, 10.0, keep_any)                   \
    X(log2, log2, 0.1, 10.0, keep_any)                      \
    X(log10, log10, 0.1, 10.0, keep_any)                    \
    X(sin, sin, -10.0, 10.0, keep_any)                      \
    X(cos, cos, -10.0, 10.0, keep_any)                      \
    X(tan, tan, -10.0, 10.0, keep_off_tan_poles)            \
    X(asin, asin, -0.9, 0.9, keep_any)                      \
    X(acos, acos, -0.9, 0.9, keep_any)                      \
    X(atan, atan, -10.0, 10.0, keep_any)                    \
    X(sinh, sinh, -5.0, 5.0, keep_any)                      \
    X(cosh, cosh, -5.0, 5.0, keep_any)                      \
    X(tanh, tanh, -4.0, 4.0, keep_any)                      \
    X(asinh, asinh, -10.0, 10.0, keep_any)                  \
    X(acosh, acosh, 1.1, 10.0, keep_any)                    \
    X(atanh, atanh, -0.9, 0.9, keep_any)                    \
    X(fabs, fabs, -10.0, 10.0, keep_off_zero)               \
    X(erf, erf, -4.0, 4.0, keep_any)                        \
    X(erfc, erfc, -4.0, 4.0, keep_any)                      \
    X(lgamma, lgamma, -4.85, 10.0, keep_off_gamma_poles)    \
    X(tgamma, tgamma, -4.85, 8.0, keep_off_gamma_poles)

#define BINARY_OPS(X)                                                   \
    X(add, ref_add, -10.0, 10.0, -10.0, 10.0, keep_any2)                \
    X(sub, ref_sub, -10.0, 10.0, -10.0, 10.0, keep_any2)                \
    X(mul, ref_mul, -10.0, 10.0, -10.0, 10.0, keep_any2)                \
    X(div, ref_div, -10.0, 10.0, -10.0, 10.0, keep_divisor)             \
    X(pow, pow, 0.1, 4.0, -3.0, 3.0, keep_any2)                         \
    X(atan2, atan2, -5.0, 5.0, -5.0, 5.0, keep_atan2)                   \
    X(hypot, hypot, -10.0, 10.0, -10.0, 10.0, keep_off_origin)          \
    X(fmin, fmin, -10.0, 10.0, -10.0, 10.0, keep_off_tie)               \
    X(fmax, fmax, -10.0, 10.0, -10.0, 10.0, keep_off_tie)

#endif
