/* Problems for the optimiser bridges' tests (test_bridge_*.c): extended
 * Rosenbrock, Hock-Schittkowski 71, and a check of a callback's gradient
 * against central differences of the same objective on constants. */
#ifndef DUALREV_TESTS_BRIDGE_PROBLEMS_H
#define DUALREV_TESTS_BRIDGE_PROBLEMS_H

#include "check.h"

/* sum 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2: minimum 0 at x = 1. */
static inline ad_real rosenbrock(const ad_real *x, size_t n, void *ctx)
{
    ad_real s = ad_const(0.0);
    (void)ctx;
    for (size_t i = 0; i + 1 < n; i++) {
        ad_real a = ad_sub(x[i + 1], ad_mul(x[i], x[i])), b = ad_sub(1.0, x[i]);
        s = ad_add(s, ad_add(ad_mul(100.0, ad_mul(a, a)), ad_mul(b, b)));
    }
    return s;
}

/* An objective whose every call fails: a value of another recording. */
static ad_real failing(const ad_real *x, size_t n, void *ctx)
{
    static ad_real kept;
    static int have;
    (void)n, (void)ctx;
    if (!have) {
        kept = x[0];
        have = 1;
        return x[0];
    }
    return ad_add(x[0], kept);
}

/* The value of f at x, on constants: no recording. */
static inline double value_on_constants(ad_objective f, void *ctx, size_t n, const double *x)
{
    ad_real xr[64];
    for (size_t i = 0; i < n; i++)
        xr[i] = ad_const(x[i]);
    return ad_value(f(xr, n, ctx));
}

/* g against central differences of f at x, to 1e-6 relative. */
static inline void check_gradient_fd(ad_objective f, void *ctx, size_t n, const double *x,
                                     const double *g)
{
    double xp[64];
    for (size_t i = 0; i < n; i++)
        xp[i] = x[i];
    for (size_t i = 0; i < n; i++) {
        double h = 1e-6 * fmax(1.0, fabs(x[i]));
        xp[i] = x[i] + h;
        double up = value_on_constants(f, ctx, n, xp);
        xp[i] = x[i] - h;
        double down = value_on_constants(f, ctx, n, xp);
        xp[i] = x[i];
        assert_near(g[i], (up - down) / (2 * h), 1e-6, 1e-6);
    }
}

/* Hock-Schittkowski 71: minimise x0 x3 (x0 + x1 + x2) + x2 subject to
 * x0 x1 x2 x3 >= 25, x0^2 + x1^2 + x2^2 + x3^2 = 40, 1 <= x <= 5, from
 * (1, 5, 5, 1); the optimum is 17.0140173 at (1, 4.743, 3.821, 1.379). */
#define HS71_OPTIMUM 17.0140173
static inline ad_real hs71_objective(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_add(ad_mul(ad_mul(x[0], x[3]), ad_add(ad_add(x[0], x[1]), x[2])), x[2]);
}

/* The constraints as c(x) <= 0 (NLopt's form): 25 - x0 x1 x2 x3, and the
 * equality's residual. */
static inline void hs71_inequality(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = ad_sub(25.0, ad_mul(ad_mul(x[0], x[1]), ad_mul(x[2], x[3])));
}

static inline ad_real hs71_equality(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_sub(ad_add(ad_add(ad_mul(x[0], x[0]), ad_mul(x[1], x[1])),
                         ad_add(ad_mul(x[2], x[2]), ad_mul(x[3], x[3]))),
                  40.0);
}

#endif
