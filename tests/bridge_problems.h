/* Problems for the optimiser bridges' tests (test_bridge_*.c): extended
 * Rosenbrock, Hock-Schittkowski 71, and a check of a callback's gradient
 * against central differences of the same objective on constants; for the
 * bridges' replay option, the same problems counting their calls, with
 * guards (ad_lt, ...) that flip during a solve, and with a nested
 * gradient that a program cannot keep. */
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

/* ---- for replay: counted calls, guards, a function programs cannot keep ----
 *
 * Each function below counts its calls in a bridge_calls passed as ctx
 * (NULL: no count): f for objectives and scalar constraints, g for vector
 * functions.  With replay, a bridge calls them only to record. */
typedef struct bridge_calls {
    unsigned long f, g;
} bridge_calls;

static inline void count_f(void *ctx)
{
    if (ctx)
        ((bridge_calls *)ctx)->f++;
}

static inline void count_g(void *ctx)
{
    if (ctx)
        ((bridge_calls *)ctx)->g++;
}

static inline ad_real counted_rosenbrock(const ad_real *x, size_t n, void *ctx)
{
    count_f(ctx);
    return rosenbrock(x, n, NULL);
}

/* Rosenbrock plus the Huber penalty of each x_i - 1 (r^2 / 2 within 1,
 * |r| - 1/2 beyond: once differentiable), its two pieces chosen by a
 * guard.  Minimum 0 at x = 1; from x_i = -1.2 the guard of x_i starts on
 * the linear piece and ends on the quadratic one, so a program recorded at
 * the start fails it (AD_EBRANCH) on the way and is recorded again. */
static inline ad_real huber_rosenbrock(const ad_real *x, size_t n, void *ctx)
{
    count_f(ctx);
    ad_real s = rosenbrock(x, n, NULL);
    for (size_t i = 0; i < n; i++) {
        ad_real r = ad_sub(x[i], 1.0), a = ad_fabs(r);
        s = ad_add(s, ad_le(a, 1.0) ? ad_mul(0.5, ad_mul(r, r)) : ad_sub(a, 0.5));
    }
    return s;
}

/* HS71's functions counted, and with guards: where x1 < 4.9 (it starts at
 * 5 and ends at 4.743) the products are taken in another order, the same
 * function to rounding, so that the guard flips during a solve. */
static inline ad_real counted_hs71_objective(const ad_real *x, size_t n, void *ctx)
{
    count_f(ctx);
    return hs71_objective(x, n, NULL);
}

static inline ad_real guarded_hs71_objective(const ad_real *x, size_t n, void *ctx)
{
    (void)n;
    count_f(ctx);
    ad_real sum = ad_add(ad_add(x[0], x[1]), x[2]);
    if (ad_lt(x[1], 4.9))
        return ad_add(ad_mul(x[0], ad_mul(x[3], sum)), x[2]);
    return ad_add(ad_mul(ad_mul(x[0], x[3]), sum), x[2]);
}

static inline void counted_hs71_inequality(const ad_real *x, size_t n, ad_real *y, size_t m,
                                           void *ctx)
{
    count_g(ctx);
    hs71_inequality(x, n, y, m, NULL);
}

static inline void guarded_hs71_inequality(const ad_real *x, size_t n, ad_real *y, size_t m,
                                           void *ctx)
{
    (void)n, (void)m;
    count_g(ctx);
    if (ad_lt(x[1], 4.9))
        y[0] = ad_sub(25.0, ad_mul(ad_mul(ad_mul(x[0], x[1]), x[2]), x[3]));
    else
        y[0] = ad_sub(25.0, ad_mul(ad_mul(x[0], x[1]), ad_mul(x[2], x[3])));
}

static inline ad_real counted_hs71_equality(const ad_real *x, size_t n, void *ctx)
{
    count_f(ctx);
    return hs71_equality(x, n, NULL);
}

/* x^2 as a nested gradient: d/dv (u u v) at u = v = x, which is u u to
 * the bit (its value, its derivatives and its second derivatives are
 * those of x x).  A program cannot keep a nested derivative of active
 * values (ad_gradient_r: AD_ENOTSUP), so a bridge replaying a function
 * that calls it evaluates that function as without replay. */
static inline ad_real square_times(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(ad_mul(x[0], x[0]), x[1]);
}

static inline ad_real nested_square(ad_real x)
{
    ad_real uv[2] = {x, x}, fx, g[2];
    ad_gradient_r(square_times, NULL, 2, uv, &fx, g);
    return g[1];
}

/* Rosenbrock with its first (1 - x_0)^2 through nested_square. */
static inline ad_real nested_rosenbrock(const ad_real *x, size_t n, void *ctx)
{
    count_f(ctx);
    ad_real b = ad_sub(1.0, x[0]);
    return ad_add(ad_sub(rosenbrock(x, n, NULL), ad_mul(b, b)), nested_square(b));
}

/* HS71's inequality plus nested_square(x0) - x0 x0 (0, to the bit): a
 * vector function a program cannot keep. */
static inline void nested_hs71_inequality(const ad_real *x, size_t n, ad_real *y, size_t m,
                                          void *ctx)
{
    count_g(ctx);
    hs71_inequality(x, n, y, m, NULL);
    y[0] = ad_add(y[0], ad_sub(nested_square(x[0]), ad_mul(x[0], x[0])));
}

#endif
