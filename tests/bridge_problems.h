/* Problems for the optimiser bridges' tests (test_bridge_*.c): extended
 * Rosenbrock, Hock-Schittkowski 71, and a check of a callback's gradient
 * against central differences of the same objective on constants; for the
 * bridges' replay option, the same problems counting their calls, with
 * guards (ad_lt, ...) that flip during a solve, and with a nested
 * gradient that a program cannot keep; for sums, Rosenbrock as terms and a
 * term that fails; for loops, an ODE fit by RK4 steps, written out and
 * through a checkpointed loop; for progress hooks, a hook that records
 * what it is told and can stop the run. */
#ifndef DUALREV_TESTS_BRIDGE_PROBLEMS_H
#define DUALREV_TESTS_BRIDGE_PROBLEMS_H

#include <dualrev/bridge.h>

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
    if (ad_gradient_r(square_times, NULL, 2, uv, &fx, g) != AD_OK)
        return ad_const(NAN);  /* the enclosing recording fails with the status too */
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

/* ---- sums ---- */

/* Term i of rosenbrock, 0 <= i < n - 1: the same operations as its loop
 * body.  With nterms = n - 1 = 17, ad_gradient_sum's chunks are single
 * terms (docs/api.md: no more than leave 16 chunks after term 0's), added
 * in order to 0 as rosenbrock adds them, and each x_i's gradient takes two
 * chunks' parts, whose sum is the same bits in either order: the sum then
 * gives rosenbrock's value and gradient bit for bit. */
static inline ad_real rosenbrock_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real a = ad_sub(x[i + 1], ad_mul(x[i], x[i])), b = ad_sub(1.0, x[i]);
    return ad_add(ad_mul(100.0, ad_mul(a, a)), ad_mul(b, b));
}

/* The whole of rosenbrock as one term (nterms = 1): bit for bit too. */
static inline ad_real rosenbrock_one_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    (void)i;
    return rosenbrock(x, n, ctx);
}

/* A value of a finished recording, which a term then uses: AD_EFOREIGN.
 * keep_foreign() makes it (once); the terms only read it, from any
 * thread. */
static ad_real foreign_value;

static inline ad_real keep_first(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    foreign_value = x[0];
    return x[0];
}

static inline void keep_foreign(void)
{
    double x = 1.0, fx, g;
    assert_int_equal(ad_gradient(keep_first, NULL, 1, &x, &fx, &g), AD_OK);
}

/* rosenbrock_term, but term *(size_t *)ctx fails (a foreign value). */
static inline ad_real failing_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    ad_real t = rosenbrock_term(i, x, n, NULL);
    return i == *(const size_t *)ctx ? ad_add(t, foreign_value) : t;
}

/* ---- loops: an ODE fit ----
 *
 * y'' = -k y - c y' from y = 1, y' = 0, by RK4 steps of dt, and the misfit
 * sum over steps of (y_j - d_j)^2 to data d made by the same steps at
 * (k, c) = (2, 0.3): the minimum is 0 there, exactly.  The state is
 * (y, y', misfit so far), the parameters (k, c). */
enum { ODE_STEPS = 100 };
#define ODE_DT 0.05
#define ODE_K 2.0
#define ODE_C 0.3

typedef struct ode_fit {
    double data[ODE_STEPS + 1];
    size_t snapshots;  /* the loop's (0: dualrev's choice) */
    bridge_calls calls;
} ode_fit;

static inline void ode_rhs(const ad_real *s, const ad_real *p, ad_real *d)
{
    d[0] = s[1];
    d[1] = ad_neg(ad_add(ad_mul(p[0], s[0]), ad_mul(p[1], s[1])));
}

/* ad_step_fn: one RK4 step of (y, y') and the misfit at its end. */
static inline void ode_step(size_t k, const ad_real *state, ad_real *next, size_t n,
                            const ad_real *params, size_t np, void *ctx)
{
    const ode_fit *o = (const ode_fit *)ctx;
    ad_real k1[2], k2[2], k3[2], k4[2], t[2];
    (void)n, (void)np;
    ode_rhs(state, params, k1);
    for (int i = 0; i < 2; i++)
        t[i] = ad_add(state[i], ad_mul(0.5 * ODE_DT, k1[i]));
    ode_rhs(t, params, k2);
    for (int i = 0; i < 2; i++)
        t[i] = ad_add(state[i], ad_mul(0.5 * ODE_DT, k2[i]));
    ode_rhs(t, params, k3);
    for (int i = 0; i < 2; i++)
        t[i] = ad_add(state[i], ad_mul(ODE_DT, k3[i]));
    ode_rhs(t, params, k4);
    for (int i = 0; i < 2; i++) {
        ad_real inc = ad_add(ad_add(k1[i], ad_mul(2.0, k2[i])), ad_add(ad_mul(2.0, k3[i]), k4[i]));
        next[i] = ad_add(state[i], ad_mul(ODE_DT / 6.0, inc));
    }
    ad_real r = ad_sub(next[0], o->data[k + 1]);
    next[2] = ad_add(state[2], ad_mul(r, r));
}

/* The data, from the steps on constants at (ODE_K, ODE_C). */
static inline void ode_fit_init(ode_fit *o, size_t snapshots)
{
    ad_real s[3] = {ad_const(1.0), ad_const(0.0), ad_const(0.0)}, p[2] = {ad_const(ODE_K), ad_const(ODE_C)};
    ad_real next[3];
    memset(o, 0, sizeof *o);
    o->snapshots = snapshots;
    o->data[0] = 1.0;
    for (size_t k = 0; k < ODE_STEPS; k++) {
        ode_step(k, s, next, 3, p, 2, o);  /* data[k + 1] is 0 still: only y is kept */
        o->data[k + 1] = ad_value(next[0]);
        s[0] = next[0], s[1] = next[1];
    }
}

/* The fit with the steps written out on the tape. */
static inline ad_real ode_unrolled(const ad_real *p, size_t n, void *ctx)
{
    ode_fit *o = (ode_fit *)ctx;
    ad_real s[3] = {ad_const(1.0), ad_const(0.0), ad_const(0.0)}, next[3];
    (void)n;
    count_f(&o->calls);
    for (size_t k = 0; k < ODE_STEPS; k++) {
        ode_step(k, s, next, 3, p, 2, o);
        s[0] = next[0], s[1] = next[1], s[2] = next[2];
    }
    return s[2];
}

/* The same through ad_checkpointed_loop. */
static inline ad_real ode_looped(const ad_real *p, size_t n, void *ctx)
{
    ode_fit *o = (ode_fit *)ctx;
    ad_real s[3] = {ad_const(1.0), ad_const(0.0), ad_const(0.0)};
    (void)n;
    count_f(&o->calls);
    if (ad_checkpointed_loop(ode_step, o, ODE_STEPS, o->snapshots, 3, s, 2, p, s) != AD_OK)
        return ad_const(NAN);  /* the recording keeps the status */
    return s[2];
}

/* ---- progress hooks ---- */

enum { HOOK_MAX = 4096 };

/* What a hook was told, and when it stops the run (0: never). */
typedef struct hook_log {
    long calls, stop_at;
    long iteration[HOOK_MAX];
    double f[HOOK_MAX], gnorm[HOOK_MAX], inf_du[HOOK_MAX];
    double x[HOOK_MAX][4];  /* the first 4 of x, where given */
    int have_x[HOOK_MAX];
    unsigned long evaluations[HOOK_MAX];
} hook_log;

static inline int log_progress(const ad_progress *p, void *ctx)
{
    hook_log *h = (hook_log *)ctx;
    if (h->calls < HOOK_MAX) {
        long c = h->calls;
        h->iteration[c] = p->iteration;
        h->f[c] = p->f;
        h->gnorm[c] = p->gnorm;
        h->inf_du[c] = p->inf_du;
        h->have_x[c] = p->x != NULL;
        for (size_t i = 0; p->x && i < p->n && i < 4; i++)
            h->x[c][i] = p->x[i];
        h->evaluations[c] = p->evaluations;
    }
    h->calls++;
    return h->stop_at && h->calls >= h->stop_at;
}

/* A hook's f and |g| at each iteration against f and its gradient there
 * (ad_gradient at the x it was told; n <= 4); the iterations counted from
 * `first` one by one. */
static inline void check_hook_log(const hook_log *h, ad_objective f, void *ctx, size_t n,
                                  long first)
{
    assert_true(h->calls > 0);
    for (long c = 0; c < h->calls && c < HOOK_MAX; c++) {
        assert_int_equal(h->iteration[c], first + c);
        if (c)
            assert_true(h->evaluations[c] >= h->evaluations[c - 1]);
        if (!h->have_x[c])
            continue;
        double fx, g[4], gn = 0.0;
        assert_int_equal(ad_gradient(f, ctx, n, h->x[c], &fx, g), AD_OK);
        for (size_t i = 0; i < n; i++)
            gn += g[i] * g[i];
        assert_near(h->f[c], fx, 1e-12, 1e-300);
        if (!isnan(h->gnorm[c]))
            assert_near(h->gnorm[c], sqrt(gn), 1e-9, 1e-300);
    }
}

#endif
