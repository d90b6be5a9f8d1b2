/* Checkpointed loops: ad_checkpointed_loop (docs/api.md, "Checkpointed
 * loops"), binomial ("revolve") checkpointing of a time loop recorded as
 * one block that every driver sweeps through.
 *
 * Problems:
 *   LV    Lotka-Volterra, RK4: state (u, v), params (a, b, c, d); the step
 *         size depends on k (h (1 + (k mod 3) / 4)), so that a replay of
 *         the wrong step shows.
 *   HEAT  a 1-D heat equation with a cubic reaction and a time-varying
 *         source, explicit Euler, n = 100 (and 1000) states, params D (the
 *         diffusion number) and A (the source's amplitude).
 *   NEST  nested checkpointing: each outer step runs an inner
 *         ad_checkpointed_loop of RK4 sub-steps of LV.
 *   ODD   steps whose outputs are inputs, params, constants or each other,
 *         and loops whose arguments repeat.
 * Each objective is the final state against data, sum (y_N - d)^2, plus a
 * term in the params; each vector function is x -> y_N.  x holds state0,
 * params, or both (the others are constants); np = 0 passes params NULL.
 * Steps 0, 1, 2, 7, 13, 97 (and 20000); snapshots 1, 2, steps - 1,
 * steps, more than steps, and 0 (dualrev's choice).
 *
 * Oracles:
 *   - the same objective with the loop written out (the same step function
 *     called in a for loop) and recorded plainly: every driver (ad_gradient,
 *     ad_vjp, ad_jvp, ad_jacobian with n > m and n <= m, ad_linearize with
 *     ad_linear_vjp and ad_linear_jvp applied repeatedly, ad_hvp,
 *     ad_hessian, ad_sparse_jacobian, ad_sparse_hessian) against it, to
 *     RTOL relative to the largest entry; f(x) and y_N bit for bit; the
 *     same call again, and a repeated reverse sweep, bit for bit;
 *   - eighth-order central differences (check.h) of the objective on
 *     doubles, for the gradients of LV, HEAT and NEST, and of the plain
 *     gradient for a Hessian of LV; closed forms for a 20000-step scalar
 *     loop, for the Hessian at a fixed point and for a loop's sparse
 *     Hessian;
 *   - the number of step evaluations against the fewest advances of
 *     binomial checkpointing, computed here by a dynamic program,
 *     F(l, s) = min_{1 <= m < l} m + F(l - m, s - 1) + F(m, s), F(1, s) = 0,
 *     F(l, 0) = inf: F(l, S) + l + 1 per gradient (docs/api.md, "Cost"),
 *     and the counts of later reverse sweeps, forward sweeps and ad_hvp;
 *   - errors met while the loop is recorded or while a sweep replays its
 *     steps: allocation failure at every point, foreign values (through
 *     ctx, or as arguments), non-finite values under AD_CHECK_FINITE
 *     (inside a step only, in y_N, in a sweep only), the tape limit, the
 *     nesting depth: a status with NaN outputs, never AD_OK with NaN, and
 *     the thread fine afterwards;
 *   - outside a recording, all arguments constant, stateN = state0,
 *     AD_EINVAL, ad_release from a step (AD_EBUSY), tape statistics
 *     (snapshot_bytes, step_bytes, block_bytes), threads.
 *
 * What holds bit for bit against the loop written out: f(x), y_N, and
 * (not asserted) the tangents of ad_jvp and ad_linear_jvp and the
 * cotangents of state0; the params' cotangents are summed in another
 * order (per step, then over the steps), a few ulps off.
 * DUALREV_TEST_VERBOSE=1 prints the largest differences found, by driver,
 * and how many comparisons were bitwise equal. */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "workers.h"
#include "../lib/drivers/testing.h"

#define MAXN 1000
#define MAXP 4
#define MAXX (MAXN + MAXP)
#define RTOL 1e-13   /* checkpointed against plain, relative to the largest entry */
#define FD_RTOL 1e-7 /* against finite differences */
#define PI 3.14159265358979323846

static double *dalloc(size_t n)
{
    return xmalloc(n * sizeof(double));
}

/* ======================================================================
 * 1. The problems
 * ====================================================================== */

enum kind { LV, HEAT, NEST, ODD };
enum { ACT_STATE = 1, ACT_PARAMS = 2, ACT_BOTH = 3 };

/* Faults a step can be made to commit (trap_step). */
enum trap {
    TRAP_NONE,
    TRAP_USE,      /* uses a value of the recording around the loop, from ctx */
    TRAP_RETURN,   /* writes that value to next[1] */
    TRAP_EXP,      /* adds 1/exp(1000 + ...) = 0 at step trap_k: Inf inside, finite out */
    TRAP_SWALLOW,  /* fmax(next, log(negative)) at step trap_k: NaN inside, finite out */
    TRAP_NAN_OUT,  /* next[0] = log(negative) at step trap_k: NaN out */
    TRAP_KEEP      /* keeps next[0] and uses it in step k + 1: fine written out */
};

typedef struct prob {
    enum kind kind;
    ad_step_fn step;
    size_t n, np, steps, snaps;
    int act;      /* what x holds: ACT_STATE, ACT_PARAMS or both */
    int dup;      /* ODD: state0[1] and params[1] are state0[0]'s value */
    int loop;     /* 1: ad_checkpointed_loop; 0: the loop written out */
    double h;
    double s0[MAXN], p[MAXP], data[MAXN], shape[MAXN];
    long evals;   /* step evaluations */
    ad_status st; /* the first status of an ad_checkpointed_loop call in f */
    /* NEST */
    struct prob *inner;
    size_t sub, sub_snaps;
    int inner_loop;
    /* trap_step */
    enum trap trap;
    size_t trap_k;
    long use_after; /* TRAP_USE, TRAP_RETURN: only once evals > use_after */
    ad_real smuggled;
} prob;

static void note_status(prob *P, ad_status s)
{
    if (P->st == AD_OK)
        P->st = s;
}

/* ---- Lotka-Volterra, RK4 ---- */

static double lv_h(const prob *P, size_t k)
{
    return P->h * (1.0 + 0.25 * (double)(k % 3));
}

static void lv_rhs(const ad_real *y, const ad_real *p, ad_real *f)
{
    f[0] = ad_mul(y[0], ad_sub(p[0], ad_mul(p[1], y[1])));
    f[1] = ad_mul(y[1], ad_sub(ad_mul(p[2], y[0]), p[3]));
}

static void lv_step(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *params,
                    size_t np, void *ctx)
{
    prob *P = ctx;
    ad_real p[4], k1[2], k2[2], k3[2], k4[2], y[2];
    double h = lv_h(P, k);
    (void)n;
    P->evals++;
    for (int i = 0; i < 4; i++)
        p[i] = np ? params[i] : ad_const(P->p[i]);
    lv_rhs(s, p, k1);
    for (int i = 0; i < 2; i++)
        y[i] = ad_add(s[i], ad_mul(0.5 * h, k1[i]));
    lv_rhs(y, p, k2);
    for (int i = 0; i < 2; i++)
        y[i] = ad_add(s[i], ad_mul(0.5 * h, k2[i]));
    lv_rhs(y, p, k3);
    for (int i = 0; i < 2; i++)
        y[i] = ad_add(s[i], ad_mul(h, k3[i]));
    lv_rhs(y, p, k4);
    for (int i = 0; i < 2; i++) {
        ad_real sum = ad_add(ad_add(k1[i], ad_mul(2.0, k2[i])), ad_add(ad_mul(2.0, k3[i]), k4[i]));
        next[i] = ad_add(s[i], ad_mul(h / 6.0, sum));
    }
}

/* ---- the heat equation, explicit Euler ---- */

static void heat_step(size_t k, const ad_real *u, ad_real *next, size_t n, const ad_real *params,
                      size_t np, void *ctx)
{
    prob *P = ctx;
    P->evals++;
    ad_real D = np ? params[0] : ad_const(P->p[0]);
    ad_real A = np ? params[1] : ad_const(P->p[1]);
    ad_real src = ad_mul(A, P->h * (1.0 + 0.5 * sin(0.3 * (double)k)));
    for (size_t i = 0; i < n; i++) {
        ad_real lap = ad_mul(-2.0, u[i]);
        if (i > 0)
            lap = ad_add(lap, u[i - 1]);
        if (i + 1 < n)
            lap = ad_add(lap, u[i + 1]);
        ad_real r = ad_mul(0.5 * P->h, ad_mul(u[i], ad_mul(u[i], u[i])));
        next[i] = ad_sub(ad_add(ad_add(u[i], ad_mul(D, lap)), ad_mul(src, P->shape[i])), r);
    }
}

/* ---- outputs that are inputs, params, constants or each other ---- */

static ad_real sine_objective(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_sin(x[0]);
}

static void odd_step(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *params,
                     size_t np, void *ctx)
{
    prob *P = ctx;
    (void)n;
    P->evals++;
    ad_real p0 = np ? params[0] : ad_const(P->p[0]), p1 = np ? params[1] : ad_const(P->p[1]);
    next[0] = ad_add(ad_mul(s[0], ad_add(1.0, ad_mul(0.1, ad_sin(p0)))),
                     ad_mul(0.05, ad_mul(ad_sin(s[2]), s[3])));
    next[1] = k % 2 ? next[0] : s[1];      /* another output, or an input */
    next[2] = k % 4 == 1 ? p1 : s[2];      /* a param, or an input */
    next[3] = k % 3 ? s[0] : ad_const(2.0); /* an input, or a constant */
    /* a nested entry point on the step's values: a constant to the loop */
    double z = s[3].v, fz, dz;
    if (ad_gradient(sine_objective, NULL, 1, &z, &fz, &dz) != AD_OK)
        dz = NAN;
    next[0] = ad_add(next[0], ad_mul(0.01 * dz, s[3]));
}

/* ---- the loop written out ---- */

static void plain_loop(ad_step_fn step, void *ctx, size_t steps, size_t n, const ad_real *s0,
                       size_t np, const ad_real *p, ad_real *sN)
{
    ad_real buf[2][MAXN];
    memcpy(buf[0], s0, n * sizeof *s0);
    for (size_t k = 0; k < steps; k++)
        step(k, buf[k & 1], buf[(k + 1) & 1], n, p, np, ctx);
    memcpy(sN, buf[steps & 1], n * sizeof *sN);
}

/* ---- nested checkpointing: an outer step is an inner loop of LV ---- */

static void nest_step(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *params,
                      size_t np, void *ctx)
{
    prob *P = ctx;
    ad_real mid[2];
    P->evals++;
    if (P->inner_loop)
        note_status(P, ad_checkpointed_loop(lv_step, P->inner, P->sub, P->sub_snaps, n, s, np,
                                            params, mid));
    else
        plain_loop(lv_step, P->inner, P->sub, n, s, np, params, mid);
    double c = 1.0 + 0.001 * (double)(k % 5);
    for (size_t i = 0; i < n; i++)
        next[i] = ad_mul(mid[i], c);
}

/* ---- LV with a fault ---- */

static void trap_step(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *params,
                      size_t np, void *ctx)
{
    prob *P = ctx;
    lv_step(k, s, next, n, params, np, ctx);
    switch (P->trap) {
    case TRAP_USE:
        if (P->evals > P->use_after)
            next[0] = ad_add(next[0], ad_mul(1e-3, ad_mul(P->smuggled, s[0])));
        break;
    case TRAP_RETURN:
        if (P->evals > P->use_after)
            next[1] = P->smuggled;
        break;
    case TRAP_EXP:
        if (k == P->trap_k)
            next[0] = ad_add(next[0], ad_div(1.0, ad_exp(ad_add(1000.0, ad_mul(1e-3, s[0])))));
        break;
    case TRAP_SWALLOW:
        if (k == P->trap_k)
            next[0] = ad_fmax(next[0], ad_log(ad_sub(ad_mul(1e-3, s[0]), 1.0)));
        break;
    case TRAP_NAN_OUT:
        if (k == P->trap_k)
            next[0] = ad_log(ad_sub(ad_mul(1e-3, s[0]), 1.0));
        break;
    case TRAP_KEEP:
        if (k > 0)
            next[1] = ad_add(next[1], ad_mul(1e-3, P->smuggled));
        P->smuggled = next[0];
        break;
    default: break;
    }
}

/* ---- objectives ---- */

static size_t n_in(const prob *P)
{
    return (P->act & ACT_STATE ? P->n : 0) + (P->act & ACT_PARAMS ? P->np : 0);
}

static void base_x(const prob *P, double *x)
{
    size_t j = 0;
    if (P->act & ACT_STATE)
        for (size_t i = 0; i < P->n; i++)
            x[j++] = P->s0[i];
    if (P->act & ACT_PARAMS)
        for (size_t i = 0; i < P->np; i++)
            x[j++] = P->p[i];
}

static void unpack(const prob *P, const ad_real *x, ad_real *s0, ad_real *p)
{
    size_t j = 0;
    for (size_t i = 0; i < P->n; i++)
        s0[i] = P->act & ACT_STATE ? x[j++] : ad_const(P->s0[i]);
    for (size_t i = 0; i < P->np; i++)
        p[i] = P->act & ACT_PARAMS ? x[j++] : ad_const(P->p[i]);
    if (P->dup) {  /* the same argument twice, and as a state and a param */
        s0[1] = s0[0];
        if (P->np)
            p[1] = s0[0];
    }
}

static void propagate(prob *P, const ad_real *s0, const ad_real *p, ad_real *sN)
{
    const ad_real *pp = P->np ? p : NULL;
    if (P->loop)
        note_status(P, ad_checkpointed_loop(P->step, P, P->steps, P->snaps, P->n, s0, P->np, pp,
                                            sN));
    else
        plain_loop(P->step, P, P->steps, P->n, s0, P->np, pp, sN);
}

static ad_real param_term(const prob *P, const ad_real *p)
{
    if (!P->np)
        return ad_const(0.0);
    if (P->kind == HEAT || P->kind == ODD)
        return ad_add(ad_mul(0.5, ad_mul(p[0], p[0])), ad_mul(0.1, ad_mul(p[1], p[0])));
    return ad_mul(0.1, ad_add(ad_mul(p[0], p[1]), ad_mul(p[2], ad_sin(p[3]))));
}

static ad_real objective(const ad_real *x, size_t nx, void *ctx)
{
    prob *P = ctx;
    ad_real s0[MAXN], p[MAXP], sN[MAXN];
    (void)nx;
    unpack(P, x, s0, p);
    propagate(P, s0, p, sN);
    ad_real J = param_term(P, p);
    for (size_t i = 0; i < P->n; i++) {
        ad_real d = ad_sub(sN[i], P->data[i]);
        J = ad_add(J, ad_mul(d, d));
    }
    return J;
}

static void final_state(const ad_real *x, size_t nx, ad_real *y, size_t m, void *ctx)
{
    prob *P = ctx;
    ad_real s0[MAXN], p[MAXP];
    (void)nx, (void)m;
    unpack(P, x, s0, p);
    propagate(P, s0, p, y);
}

/* The objective on doubles (outside any recording), the loop written out. */
static double value_at(prob *P, const double *x)
{
    ad_real xr[MAXX];
    int loop = P->loop, inner_loop = P->inner_loop;
    for (size_t i = 0; i < n_in(P); i++)
        xr[i] = ad_const(x[i]);
    P->loop = P->inner_loop = 0;
    double v = objective(xr, n_in(P), P).v;
    P->loop = loop;
    P->inner_loop = inner_loop;
    return v;
}

/* ---- construction ---- */

static prob *prob_blank(void)
{
    prob *P = xmalloc(sizeof *P);
    memset(P, 0, sizeof *P);
    P->loop = 1;
    return P;
}

static prob *lv_new(size_t steps, size_t snaps, size_t np, int act)
{
    prob *P = prob_blank();
    P->kind = LV;
    P->step = lv_step;
    P->n = 2;
    P->np = np;
    P->steps = steps;
    P->snaps = snaps;
    P->act = act;
    P->h = 0.02;
    P->s0[0] = 1.0, P->s0[1] = 0.7;
    P->p[0] = 1.5, P->p[1] = 1.0, P->p[2] = 1.0, P->p[3] = 3.0;
    P->data[0] = 1.2, P->data[1] = 0.6;
    return P;
}

static prob *heat_new(size_t n, size_t steps, size_t snaps, size_t np, int act)
{
    prob *P = prob_blank();
    P->kind = HEAT;
    P->step = heat_step;
    P->n = n;
    P->np = np;
    P->steps = steps;
    P->snaps = snaps;
    P->act = act;
    P->h = 0.01;
    P->p[0] = 0.22, P->p[1] = 2.0;
    for (size_t i = 0; i < n; i++) {
        double xi = (double)(i + 1) / (double)(n + 1);
        P->shape[i] = sin(PI * xi);
        P->s0[i] = 0.8 * P->shape[i] + 0.2 * sin(5.0 * PI * xi);
        P->data[i] = 0.5 * P->shape[i] + 0.1 * xi;
    }
    return P;
}

static prob *odd_new(size_t steps, size_t snaps, size_t np, int act, int dup)
{
    prob *P = prob_blank();
    P->kind = ODD;
    P->step = odd_step;
    P->n = 4;
    P->np = np;
    P->steps = steps;
    P->snaps = snaps;
    P->act = act;
    P->dup = dup;
    P->s0[0] = 0.9, P->s0[1] = -0.4, P->s0[2] = 0.3, P->s0[3] = 1.1;
    P->p[0] = 0.7, P->p[1] = -1.3;
    P->data[0] = 1.0, P->data[1] = 0.5, P->data[2] = -0.2, P->data[3] = 0.4;
    return P;
}

/* NEST: outer steps, each `sub` RK4 sub-steps of LV; the outer and the
 * inner loops checkpointed or written out as outer_loop, inner_loop say. */
static prob *nest_new(size_t steps, size_t snaps, size_t sub, size_t sub_snaps, size_t np, int act)
{
    prob *P = lv_new(steps, snaps, np, act);
    P->kind = NEST;
    P->step = nest_step;
    P->inner = lv_new(sub, sub_snaps, np, act);
    P->inner->h = 0.01;
    P->sub = sub;
    P->sub_snaps = sub_snaps;
    P->inner_loop = 1;
    return P;
}

static void prob_free(prob *P)
{
    if (P && P->inner)
        free(P->inner);
    free(P);
}

/* ======================================================================
 * 2. Comparisons
 * ====================================================================== */

enum what { W_FX, W_Y, W_GRAD, W_VJP, W_JVP, W_JAC, W_LVJP, W_LJVP, W_HVP_G, W_HVP, W_HESS_G,
            W_HESS, W_SPARSE, W_SPARSE_HESS, W_REPEAT, W_KINDS };
static const char *const what_name[W_KINDS] = {
    "f(x)", "y_N", "gradient", "vjp", "jvp", "jacobian", "linear_vjp", "linear_jvp",
    "hvp grad", "hvp H v", "hessian grad", "hessian H", "sparse jacobian", "sparse hessian",
    "same call again"};

static struct {
    double worst;  /* largest error / largest |entry| */
    long vectors, bitwise;
} tally[W_KINDS];

/* got against want (n entries): every |got_i - want_i| <= rtol max_j
 * |want_j|; NaN nowhere.  Tallies how close it was. */
static void check_vec(enum what w, const double *got, const double *want, size_t n, double rtol,
                      const char *file, int line)
{
    double scale = 0.0, worst = 0.0;
    int bitwise = 1;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - want[i]);
        if (!same_double(got[i], want[i]))
            bitwise = 0;
        if (scale > 0.0)
            worst = fmax(worst, err / scale);
        if (!(err <= rtol * scale) || isnan(got[i]) != isnan(want[i])) {
            print_error("%s[%zu] = %.17g, expected %.17g (error %.3g, %.3g of the largest "
                        "entry %.3g; rtol %.3g)\n",
                        what_name[w], i, got[i], want[i], err, scale > 0 ? err / scale : err,
                        scale, rtol);
            _fail(file, line);
        }
    }
    tally[w].worst = fmax(tally[w].worst, worst);
    tally[w].vectors++;
    tally[w].bitwise += bitwise;
}

/* Identical doubles, entry by entry. */
static void check_bits(enum what w, const double *got, const double *want, size_t n,
                       const char *file, int line)
{
    for (size_t i = 0; i < n; i++)
        if (!same_double(got[i], want[i])) {
            print_error("%s[%zu] = %.17g, expected exactly %.17g\n", what_name[w], i, got[i],
                        want[i]);
            _fail(file, line);
        }
    tally[w].vectors++;
    tally[w].bitwise++;
}

#define assert_vec(w, got, want, n) check_vec((w), (got), (want), (n), RTOL, __FILE__, __LINE__)
#define assert_bits(w, got, want, n) check_bits((w), (got), (want), (n), __FILE__, __LINE__)

static void assert_status_at(ad_status got, ad_status want, const char *what, const char *file,
                             int line)
{
    if (got == want)
        return;
    print_error("%s returned %d (%s), expected %d (%s)\n", what, (int)got, ad_strerror(got),
                (int)want, ad_strerror(want));
    _fail(file, line);
}
#define assert_status(got, want) assert_status_at((got), (want), #got, __FILE__, __LINE__)

static void assert_all_nan_vec(const double *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_nan(v[i]);
}

/* ======================================================================
 * 3. Every driver, checkpointed against written out
 * ====================================================================== */

enum { DO_JAC = 1, DO_HVP = 2, DO_HESS = 4, DO_LIN = 8, DO_FIRST = DO_JAC | DO_LIN,
       DO_ALL = 15 };

/* Sets P up for one run: checkpointed or not. */
static prob *use(prob *P, int loop)
{
    P->loop = loop;
    P->st = AD_OK;
    if (P->inner)
        P->inner_loop = loop;
    return P;
}

/* Every driver on P at its base point, checkpointed (l = 1) against the
 * loop written out (l = 0): ad_gradient, ad_vjp and ad_jvp always; with
 * DO_JAC ad_jacobian (by rows when n > m, by columns else); with DO_LIN
 * ad_linearize, then ad_linear_vjp, ad_linear_vjp (another w),
 * ad_linear_jvp, ad_linear_vjp (the first w again: bit for bit the first
 * result), ad_linear_jvp, and a zero ad_linear_vjp (no step evaluated);
 * with DO_HVP ad_hvp; with DO_HESS ad_hessian.  Directions from seed. */
static void compare_drivers(prob *P, unsigned which, uint64_t seed)
{
    size_t nx = n_in(P), n = P->n;
    double *x = dalloc(nx), *v = dalloc(nx), *w = dalloc(n), *w2 = dalloc(n);
    double *g[2], *a[2], *b[2], *c[2], *y[2], fx[2];
    for (int l = 0; l < 2; l++) {
        g[l] = dalloc(nx);
        a[l] = dalloc(nx > n ? nx : n);
        b[l] = dalloc(nx > n ? nx : n);
        c[l] = dalloc(nx * (nx > n ? nx : n));
        y[l] = dalloc(n);
    }
    base_x(P, x);
    fill_uniform(&seed, v, nx, -1.0, 1.0);
    fill_uniform(&seed, w, n, -1.0, 1.0);
    fill_uniform(&seed, w2, n, -1.0, 1.0);

    /* l = 1 checkpointed, l = 0 the oracle */
    for (int l = 1; l >= 0; l--) {
        assert_status(ad_gradient(objective, use(P, l), nx, x, &fx[l], g[l]), AD_OK);
        assert_status(P->st, AD_OK);
    }
    assert_bits(W_FX, &fx[1], &fx[0], 1);
    assert_vec(W_GRAD, g[1], g[0], nx);

    for (int l = 1; l >= 0; l--) {
        assert_status(ad_vjp(final_state, use(P, l), nx, x, n, w, y[l], a[l]), AD_OK);
        assert_status(P->st, AD_OK);
    }
    assert_bits(W_Y, y[1], y[0], n);
    assert_vec(W_VJP, a[1], a[0], nx);

    for (int l = 1; l >= 0; l--) {
        assert_status(ad_jvp(final_state, use(P, l), nx, x, v, n, y[l], a[l]), AD_OK);
        assert_status(P->st, AD_OK);
    }
    assert_bits(W_Y, y[1], y[0], n);
    assert_vec(W_JVP, a[1], a[0], n);

    if (which & DO_JAC) {
        for (int l = 1; l >= 0; l--) {
            assert_status(ad_jacobian(final_state, use(P, l), nx, x, n, y[l], c[l]), AD_OK);
            assert_status(P->st, AD_OK);
        }
        assert_bits(W_Y, y[1], y[0], n);
        assert_vec(W_JAC, c[1], c[0], n * nx);
    }

    if (which & DO_LIN) {
        ad_linear *L[2];
        for (int l = 1; l >= 0; l--) {
            assert_status(ad_linearize(final_state, use(P, l), nx, x, n, y[l], &L[l]), AD_OK);
            assert_status(P->st, AD_OK);
        }
        assert_bits(W_Y, y[1], y[0], n);
        /* vjp, vjp, jvp, vjp again (the same numbers as the first), jvp
         * again, a zero vjp */
        double *first = dalloc(nx);
        for (int round = 0; round < 5; round++) {
            const double *ww = round == 1 ? w2 : w;
            if (round == 2 || round == 4) {
                for (int l = 1; l >= 0; l--)
                    assert_status(ad_linear_jvp(L[l], v, b[l]), AD_OK);
                assert_vec(W_LJVP, b[1], b[0], n);
                continue;
            }
            for (int l = 1; l >= 0; l--)
                assert_status(ad_linear_vjp(L[l], ww, a[l]), AD_OK);
            assert_vec(W_LVJP, a[1], a[0], nx);
            if (round == 0)
                memcpy(first, a[1], nx * sizeof *first);
            if (round == 3)
                assert_bits(W_REPEAT, a[1], first, nx);
        }
        double *zero = dalloc(n);
        fill(zero, n, 0.0);
        fill(a[1], nx, 7.0);
        assert_status(ad_linear_vjp(L[1], zero, a[1]), AD_OK);
        for (size_t i = 0; i < nx; i++)
            assert_same(a[1][i], 0.0);
        free(zero);
        free(first);
        ad_linear_free(L[0]);
        ad_linear_free(L[1]);
    }

    if (which & DO_HVP) {
        for (int l = 1; l >= 0; l--) {
            assert_status(ad_hvp(objective, use(P, l), nx, x, v, &fx[l], g[l], a[l]), AD_OK);
            assert_status(P->st, AD_OK);
        }
        assert_bits(W_FX, &fx[1], &fx[0], 1);
        assert_vec(W_HVP_G, g[1], g[0], nx);
        assert_vec(W_HVP, a[1], a[0], nx);
    }

    if (which & DO_HESS) {
        for (int l = 1; l >= 0; l--) {
            assert_status(ad_hessian(objective, use(P, l), nx, x, &fx[l], g[l], c[l]), AD_OK);
            assert_status(P->st, AD_OK);
        }
        assert_bits(W_FX, &fx[1], &fx[0], 1);
        assert_vec(W_HESS_G, g[1], g[0], nx);
        assert_vec(W_HESS, c[1], c[0], nx * nx);
    }

    use(P, 1);
    free(x), free(v), free(w), free(w2);
    for (int l = 0; l < 2; l++)
        free(g[l]), free(a[l]), free(b[l]), free(c[l]), free(y[l]);
}

/* The snapshot counts to try for `steps` steps: 1, 2, steps - 1, steps,
 * more than steps, and 0 (dualrev's choice). */
static size_t snapshot_choices(size_t steps, size_t *out)
{
    size_t cand[6] = {1, 2, steps ? steps - 1 : 0, steps, steps + 3, 0}, k = 0;
    for (int i = 0; i < 6; i++) {
        int dup = 0;
        for (size_t j = 0; j < k; j++)
            dup |= out[j] == cand[i];
        if (!dup)
            out[k++] = cand[i];
    }
    return k;
}

static const size_t step_counts[] = {0, 1, 2, 7, 13, 97};
#define STEP_COUNTS (sizeof step_counts / sizeof *step_counts)

static void test_lv_drivers(void **state)
{
    (void)state;
    static const struct {
        size_t np;
        int act;
    } forms[] = {{4, ACT_BOTH}, {4, ACT_STATE}, {4, ACT_PARAMS}, {0, ACT_STATE}};
    uint64_t seed = 11;
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++)
        for (size_t i = 0; i < STEP_COUNTS; i++) {
            size_t snaps[6], ns = snapshot_choices(step_counts[i], snaps);
            for (size_t s = 0; s < ns; s++) {
                prob *P = lv_new(step_counts[i], snaps[s], forms[f].np, forms[f].act);
                /* 97 steps over one snapshot: 4656 advances a lane */
                int slow = step_counts[i] == 97 && snaps[s] == 1;
                compare_drivers(P, slow ? DO_FIRST | DO_HVP : DO_ALL, seed++);
                prob_free(P);
            }
        }
}

static void test_heat_drivers(void **state)
{
    (void)state;
    uint64_t seed = 23;
    for (size_t i = 0; i < STEP_COUNTS; i++) {
        size_t steps = step_counts[i], snaps[6], ns = snapshot_choices(steps, snaps);
        for (size_t s = 0; s < ns; s++) {
            /* To keep the time down (under the sanitizers): Jacobians and
             * Hessians of 100 or 102 inputs (25 or 26 groups of four
             * sweeps) for two short loops only; for 97 steps, only the
             * gradient, vjp and jvp but with dualrev's snapshots (97 steps
             * over one snapshot take 4656 advances a sweep) */
            int big = (steps == 7 && snaps[s] == 2) || (steps == 2 && snaps[s] == 1);
            int long_loop = steps == 97;
            if ((snaps[s] > steps && steps > 2) || (snaps[s] + 1 == steps && steps > 7))
                continue;  /* as snapshots = steps, or close; LV has them */
            unsigned params = long_loop ? (snaps[s] ? 0 : DO_LIN | DO_HVP) : DO_ALL;
            unsigned both = big ? DO_ALL : long_loop ? (snaps[s] ? 0 : DO_LIN) : DO_LIN | DO_HVP;
            unsigned states = big && steps == 2 ? DO_ALL : long_loop ? 0 : DO_LIN;
            prob *P = heat_new(100, steps, snaps[s], 2, ACT_PARAMS);  /* n < m */
            compare_drivers(P, params, seed++);
            prob_free(P);
            if (long_loop && snaps[s] == 1)
                continue;
            P = heat_new(100, steps, snaps[s], 2, ACT_BOTH);
            compare_drivers(P, both, seed++);
            prob_free(P);
            P = heat_new(100, steps, snaps[s], 0, ACT_STATE);  /* np = 0 */
            compare_drivers(P, states, seed++);
            prob_free(P);
        }
    }
    /* n = 1000, a few steps */
    size_t snaps[] = {1, 2, 0};
    for (size_t s = 0; s < 3; s++) {
        prob *P = heat_new(1000, 4, snaps[s], 2, ACT_BOTH);
        compare_drivers(P, DO_LIN | DO_HVP, seed++);
        prob_free(P);
    }
}

/* ======================================================================
 * 4. Finite differences
 * ====================================================================== */

typedef struct fd_ctx {
    prob *P;
    double *x;
    size_t i;
} fd_ctx;

static double fd_f(double xi, const void *ctx)
{
    const fd_ctx *c = ctx;
    double keep = c->x[c->i];
    c->x[c->i] = xi;
    double v = value_at(c->P, c->x);
    c->x[c->i] = keep;
    return v;
}

/* The checkpointed gradient against the stencil, every component, to
 * FD_RTOL of the largest one plus the stencil's rounding bound. */
static void check_gradient_fd(prob *P)
{
    size_t nx = n_in(P);
    double *x = dalloc(nx), *g = dalloc(nx), fx, scale = 0.0;
    base_x(P, x);
    assert_status(ad_gradient(objective, use(P, 1), nx, x, &fx, g), AD_OK);
    assert_status(P->st, AD_OK);
    assert_same(fx, value_at(P, x));
    for (size_t i = 0; i < nx; i++)
        scale = fmax(scale, fabs(g[i]));
    for (size_t i = 0; i < nx; i++) {
        fd_ctx c = {P, x, i};
        fd_result r = fd_derivative(fd_f, &c, x[i]);
        assert_near(g[i], r.d, 0.0, FD_RTOL * scale + r.noise);
    }
    free(x), free(g);
}

static void test_gradient_fd(void **state)
{
    (void)state;
    static const size_t lv_steps[] = {1, 2, 13, 97};
    for (size_t i = 0; i < 4; i++) {
        prob *P = lv_new(lv_steps[i], lv_steps[i] > 2 ? 3 : 1, 4, ACT_BOTH);
        check_gradient_fd(P);
        prob_free(P);
    }
    prob *P = heat_new(100, 13, 0, 2, ACT_BOTH);
    check_gradient_fd(P);
    prob_free(P);
    P = heat_new(100, 97, 2, 2, ACT_PARAMS);
    check_gradient_fd(P);
    prob_free(P);
    P = nest_new(7, 2, 5, 2, 4, ACT_BOTH);
    check_gradient_fd(P);
    prob_free(P);
}

/* f(a) alone, the other inputs constant: ad_hessian's one-lane form. */
static ad_real one_objective(const ad_real *x, size_t nx, void *ctx)
{
    prob *P = ctx;
    ad_real all[6];
    (void)nx;
    for (int i = 0; i < 6; i++)
        all[i] = ad_const(i < 2 ? P->s0[i] : P->p[i - 2]);
    all[2] = x[0];
    return objective(all, 6, P);
}

static void test_one_input(void **state)
{
    (void)state;
    prob *P = lv_new(13, 2, 4, ACT_BOTH);
    double a = P->p[0], fx[2], g[2], H[2], v = 1.0, hv[2];
    for (int l = 1; l >= 0; l--) {
        assert_status(ad_hessian(one_objective, use(P, l), 1, &a, &fx[l], &g[l], &H[l]), AD_OK);
        assert_status(ad_hvp(one_objective, use(P, l), 1, &a, &v, &fx[l], &g[l], &hv[l]), AD_OK);
    }
    assert_bits(W_FX, &fx[1], &fx[0], 1);
    assert_vec(W_HESS, &H[1], &H[0], 1);
    assert_vec(W_HVP, &hv[1], &hv[0], 1);
    assert_near(H[1], hv[1], 1e-15, 0.0);
    prob_free(P);
}

/* The Hessian of LV through the loop against the stencil on the plain
 * gradient, column by column (step 2^-10: |x| < 16). */
static void test_hessian_fd(void **state)
{
    static const double cst[4] = {4.0 / 5, -1.0 / 5, 4.0 / 105, -1.0 / 280};
    prob *P = lv_new(13, 3, 4, ACT_BOTH);
    size_t nx = n_in(P);
    double x[6], xp[6], g[6], gu[6], gd[6], H[36], fx;
    (void)state;
    base_x(P, x);
    assert_status(ad_hessian(objective, use(P, 1), nx, x, &fx, g, H), AD_OK);
    for (size_t j = 0; j < nx; j++) {
        double h = 0x1p-10, fd[6] = {0}, gmax[6] = {0};
        memcpy(xp, x, sizeof x);
        for (int k = 1; k <= 4; k++) {
            xp[j] = x[j] + k * h;
            gradient_ok(objective, use(P, 0), nx, xp, gu);
            xp[j] = x[j] - k * h;
            gradient_ok(objective, use(P, 0), nx, xp, gd);
            for (size_t i = 0; i < nx; i++) {
                fd[i] += cst[k - 1] * (gu[i] - gd[i]);
                gmax[i] = fmax(gmax[i], fmax(fabs(gu[i]), fabs(gd[i])));
            }
        }
        for (size_t i = 0; i < nx; i++)
            assert_near(H[i * nx + j], fd[i] / h, FD_RTOL, 1e-9 + 2e-14 * gmax[i] / h);
    }
    prob_free(P);
}

/* ad_sparse_hessian through the loop (use(P, 1)) against the stencil on
 * the plain gradient of the loop written out, column by column: every
 * entry of the lower triangle, those outside the structure 0 to the
 * stencil's accuracy; and the entries against ad_hessian's (dense). */
static void check_sparse_hessian_fd(prob *P)
{
    static const double cst[4] = {4.0 / 5, -1.0 / 5, 4.0 / 105, -1.0 / 280};
    size_t nx = n_in(P);
    double *x = dalloc(nx), *xp = dalloc(nx), *g = dalloc(nx), *gu = dalloc(nx), *gd = dalloc(nx);
    double *D = dalloc(nx * nx), *fd = dalloc(nx), *gmax = dalloc(nx), fx;
    ad_csr H;
    base_x(P, x);
    assert_status(ad_sparse_hessian(objective, use(P, 1), nx, x, &fx, g, &H), AD_OK);
    assert_csr_valid(&H, nx, nx);
    assert_status(ad_hessian(objective, use(P, 1), nx, x, &fx, g, D), AD_OK);
    for (size_t j = 0; j < nx; j++) {
        double h = 0x1p-10;
        fill(fd, nx, 0.0);
        fill(gmax, nx, 0.0);
        memcpy(xp, x, nx * sizeof *x);
        for (int k = 1; k <= 4; k++) {
            xp[j] = x[j] + k * h;
            gradient_ok(objective, use(P, 0), nx, xp, gu);
            xp[j] = x[j] - k * h;
            gradient_ok(objective, use(P, 0), nx, xp, gd);
            for (size_t i = 0; i < nx; i++) {
                fd[i] += cst[k - 1] * (gu[i] - gd[i]);
                gmax[i] = fmax(gmax[i], fmax(fabs(gu[i]), fabs(gd[i])));
            }
        }
        for (size_t i = j; i < nx; i++) {  /* row i, column j of the lower triangle */
            double v = 0.0;
            for (size_t e = H.row_ptr[i]; e < H.row_ptr[i + 1]; e++)
                if (H.col[e] == j)
                    v = H.val[e];
            assert_near(v, fd[i] / h, FD_RTOL, 1e-9 + 2e-14 * gmax[i] / h);
            assert_near(v, D[i * nx + j], 1e-12, 1e-13);
        }
    }
    ad_csr_free(&H);
    use(P, 1);
    free(x), free(xp), free(g), free(gu), free(gd), free(D), free(fd), free(gmax);
}

static void test_sparse_hessian_fd(void **state)
{
    (void)state;
    prob *P = lv_new(13, 3, 4, ACT_BOTH);  /* dense: every pair */
    check_sparse_hessian_fd(P);
    prob_free(P);
    P = heat_new(12, 9, 2, 2, ACT_BOTH);  /* sparse: neighbours */
    check_sparse_hessian_fd(P);
    prob_free(P);
    P = nest_new(5, 2, 4, 2, 4, ACT_BOTH);  /* a loop inside each step */
    check_sparse_hessian_fd(P);
    prob_free(P);
}

/* ======================================================================
 * 5. Step evaluations: the binomial optimum, independently
 * ====================================================================== */

#define LMAX 100
#define SMAX 100
#define INF (UINT64_MAX / 4)
static uint64_t F[LMAX + 1][SMAX + 1];

/* F(l, s): the fewest advances that reverse l steps holding the first
 * state in one of s snapshots. */
static void dp_init(void)
{
    for (size_t s = 0; s <= SMAX; s++)
        F[0][s] = F[1][s] = 0;
    for (size_t l = 2; l <= LMAX; l++) {
        F[l][0] = INF;
        for (size_t s = 1; s <= SMAX; s++) {
            uint64_t best = INF;
            for (size_t m = 1; m < l; m++) {
                uint64_t c = m + F[l - m][s - 1] + F[m][s];
                if (c < best)
                    best = c;
            }
            F[l][s] = best;
        }
    }
}

static size_t snaps_used(size_t steps, size_t snapshots)
{
    size_t S = snapshots;
    if (!S) /* the least S with (S + 1)(S + 2)/2 >= steps */
        for (S = 1; (S + 1) * (S + 2) / 2 < steps; S++)
            ;
    return S < steps ? S : steps;
}

static uint64_t binom(uint64_t a, uint64_t b)
{
    uint64_t r = 1;
    for (uint64_t i = 1; i <= b; i++)
        r = r * (a - b + i) / i;
    return r;
}

static void test_revolve_counts(void **state)
{
    (void)state;
    dp_init();
    /* The closed form of docs/api.md agrees with the program. */
    for (uint64_t l = 2; l <= LMAX; l++)
        for (uint64_t s = 1; s <= 10; s++) {
            uint64_t r = 0;
            while (binom(s + r, s) < l)
                r++;
            assert_int_equal(r * l - binom(s + r, s + 1), F[l][s]);
        }
    for (size_t l = 0; l <= 60; l++) {
        size_t choices[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, l + 2};
        for (size_t c = 0; c < sizeof choices / sizeof *choices; c++) {
            prob *P = lv_new(l, choices[c], 4, ACT_BOTH);
            double x[6], g[6], fx;
            size_t S = snaps_used(l, choices[c]);
            base_x(P, x);
            gradient_ok(objective, P, 6, x, g);
            assert_status(P->st, AD_OK);
            long want = l ? (long)(F[l][S] + l + 1) : 0;
            if (P->evals != want) {
                print_error("steps %zu, snapshots %zu (S = %zu): %ld evaluations, expected %ld\n",
                            l, choices[c], S, P->evals, want);
                fail();
            }
            /* the same through ad_vjp */
            double w[2] = {0.5, -1.0}, y[2];
            if (c % 3 == 0) {
                P->evals = 0;
                assert_status(ad_vjp(final_state, P, 6, x, 2, w, y, g), AD_OK);
                assert_int_equal(P->evals, want);
            }
            /* ad_hvp (one lane): the recording's l, the tangents' l, and the
             * second-order schedule, F(l, S) advances and l steps */
            if (c < 4 && l) {
                double v[6] = {1, -1, 0.5, 0, 0.25, 0}, hv[6];
                P->evals = 0;
                assert_status(ad_hvp(objective, P, 6, x, v, &fx, g, hv), AD_OK);
                assert_int_equal(P->evals, (long)(F[l][S] + 3 * l));
            }
            prob_free(P);
        }
    }
    /* long loops: 97 steps */
    size_t more[] = {1, 2, 3, 5, 8, 13, 96, 97, 0};
    for (size_t c = 0; c < sizeof more / sizeof *more; c++) {
        prob *P = heat_new(10, 97, more[c], 2, ACT_BOTH);
        double x[12], g[12];
        size_t S = snaps_used(97, more[c]);
        base_x(P, x);
        gradient_ok(objective, P, 12, x, g);
        assert_int_equal(P->evals, (long)(F[97][S] + 97 + 1));
        prob_free(P);
    }
}

/* Later reverse sweeps over one recording: the first one after the
 * recording starts from the descent it left (F(l, S) - l + 1 advances and l
 * taped steps), the later ones repeat it (l - 1 more); forward sweeps take
 * l.  All give the same numbers. */
static void test_repeated_sweeps(void **state)
{
    (void)state;
    dp_init();
    size_t ls[] = {1, 2, 3, 7, 13, 30, 60}, ss[] = {1, 2, 3, 5, 0};
    for (size_t i = 0; i < sizeof ls / sizeof *ls; i++)
        for (size_t j = 0; j < sizeof ss / sizeof *ss; j++) {
            size_t l = ls[i], S = snaps_used(l, ss[j]);
            long t = (long)F[l][S];
            prob *P = lv_new(l, ss[j], 4, ACT_BOTH);
            double x[6], y[2], w[2] = {0.25, 1.5}, v[6] = {1, 0, 0, 0.5, 0, 0};
            double r1[6], r2[6], r3[6], jv[2], jv2[2];
            ad_linear *L;
            base_x(P, x);
            assert_status(ad_linearize(final_state, P, 6, x, 2, y, &L), AD_OK);
            assert_int_equal(P->evals, (long)l);
            P->evals = 0;
            assert_status(ad_linear_vjp(L, w, r1), AD_OK);
            assert_int_equal(P->evals, t + 1);
            P->evals = 0;
            assert_status(ad_linear_vjp(L, w, r2), AD_OK);
            assert_int_equal(P->evals, t + (long)l);
            P->evals = 0;
            assert_status(ad_linear_jvp(L, v, jv), AD_OK);
            assert_int_equal(P->evals, (long)l);
            P->evals = 0;
            assert_status(ad_linear_vjp(L, w, r3), AD_OK);
            assert_int_equal(P->evals, t + (long)l);
            assert_status(ad_linear_jvp(L, v, jv2), AD_OK);
            assert_bits(W_REPEAT, r2, r1, 6);
            assert_bits(W_REPEAT, r3, r1, 6);
            assert_bits(W_REPEAT, jv2, jv, 2);
            ad_linear_free(L);
            /* a forward sweep first leaves the descent in place */
            assert_status(ad_linearize(final_state, P, 6, x, 2, y, &L), AD_OK);
            assert_status(ad_linear_jvp(L, v, jv2), AD_OK);
            assert_bits(W_REPEAT, jv2, jv, 2);
            P->evals = 0;
            assert_status(ad_linear_vjp(L, w, r2), AD_OK);
            assert_int_equal(P->evals, t + 1);
            assert_bits(W_REPEAT, r2, r1, 6);
            ad_linear_free(L);

            /* ad_jacobian by rows: two lanes, the second a later sweep;
             * its rows are ad_vjp's */
            double J[12], e[2][2] = {{1, 0}, {0, 1}}, row[6];
            P->evals = 0;
            assert_status(ad_jacobian(final_state, P, 6, x, 2, y, J), AD_OK);
            assert_int_equal(P->evals, (long)l + (t + 1) + (t + (long)l));
            for (int r = 0; r < 2; r++) {
                assert_status(ad_vjp(final_state, P, 6, x, 2, e[r], y, row), AD_OK);
                assert_vec(W_JAC, J + 6 * r, row, 6);
            }
            prob_free(P);
        }
}

/* ======================================================================
 * 6. Nested checkpointing
 * ====================================================================== */

static void test_nested(void **state)
{
    (void)state;
    static const size_t shapes[][4] = {
        /* steps, snapshots, sub-steps, inner snapshots */
        {7, 2, 5, 2}, {13, 0, 4, 1}, {1, 1, 1, 1}, {3, 3, 6, 0}, {5, 1, 3, 5}};
    uint64_t seed = 5;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int act = 1; act <= 3; act++) {
            prob *P = nest_new(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], 4, act);
            compare_drivers(P, DO_ALL, seed++);
            /* mixed: checkpointed outside, written out inside, and the reverse */
            size_t nx = n_in(P);
            double x[6], g[2][6], fx[2], H[2][36];
            base_x(P, x);
            assert_status(ad_hessian(objective, use(P, 0), nx, x, &fx[0], g[0], H[0]), AD_OK);
            for (int mix = 0; mix < 2; mix++) {
                P->loop = mix, P->inner_loop = !mix, P->st = AD_OK;
                assert_status(ad_hessian(objective, P, nx, x, &fx[1], g[1], H[1]), AD_OK);
                assert_status(P->st, AD_OK);
                assert_bits(W_FX, &fx[1], &fx[0], 1);
                assert_vec(W_HESS_G, g[1], g[0], nx);
                assert_vec(W_HESS, H[1], H[0], nx * nx);
            }
            prob_free(P);
        }
    prob *P = nest_new(6, 2, 4, 2, 0, ACT_STATE);  /* np = 0 at both levels */
    compare_drivers(P, DO_ALL, seed++);
    prob_free(P);
}

/* Loops nested `levels` deep, one step each but the outermost's three:
 * y = 1.5^(levels - 1) sin(x) per step.  Each level takes a nesting level
 * more; past AD_MAX_NESTING, AD_ENESTING. */
typedef struct deep {
    int level, levels;
    ad_status st;
} deep;

static deep deeps[24];

static void deep_step(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *params,
                      size_t np, void *ctx)
{
    deep *d = ctx;
    (void)k, (void)params, (void)np;
    if (d->level + 1 < d->levels) {
        ad_real mid[1];
        ad_status st = ad_checkpointed_loop(deep_step, d + 1, 1, 1, n, s, 0, NULL, mid);
        if (d->st == AD_OK)
            d->st = st;
        next[0] = ad_mul(mid[0], 1.5);
    } else {
        next[0] = ad_sin(s[0]);
    }
}

static ad_real deep_objective(const ad_real *x, size_t n, void *ctx)
{
    ad_real y[1];
    (void)ctx;
    if (ad_checkpointed_loop(deep_step, &deeps[0], 3, 2, n, x, 0, NULL, y) != AD_OK)
        deeps[0].st = deeps[0].st ? deeps[0].st : AD_EINVAL;
    return y[0];
}

static void test_nesting_depth(void **state)
{
    (void)state;
    int failed_from = 0;
    for (int levels = 1; levels <= 20; levels++) {
        for (int i = 0; i < 24; i++)
            deeps[i] = (deep){i, levels, AD_OK};
        double x = 0.4, fx, g;
        ad_status st = ad_gradient(deep_objective, NULL, 1, &x, &fx, &g);
        if (st == AD_OK) {
            assert_int_equal(failed_from, 0);
            double v = x, d = 1.0;
            for (int k = 0; k < 3; k++) {
                double y = sin(v), dy = cos(v);
                for (int i = 1; i < levels; i++)
                    y *= 1.5, dy *= 1.5;
                d *= dy;
                v = y;
            }
            assert_same(fx, v);
            assert_near(g, d, 1e-13, 0.0);
        } else {
            assert_status(st, AD_ENESTING);
            assert_nan(fx);
            assert_nan(g);
            if (!failed_from)
                failed_from = levels;
        }
    }
    if (getenv("DUALREV_TEST_VERBOSE"))
        fprintf(stderr, "# nesting: AD_ENESTING from %d levels\n", failed_from);
    assert_true(failed_from > 8 && failed_from <= AD_MAX_NESTING + 1);
    /* and the thread is fine afterwards */
    prob *P = lv_new(7, 2, 4, ACT_BOTH);
    compare_drivers(P, DO_FIRST, 3);
    prob_free(P);
}

/* ======================================================================
 * 7. Errors in a replay reach the caller
 * ====================================================================== */

enum alloc_api { A_GRADIENT, A_HVP, A_HESSIAN, A_JACOBIAN, A_JVP, A_SPARSE, A_LINEARIZE,
                 A_LINEAR_VJP, A_LINEAR_JVP, A_NESTED, A_NESTED_HESSIAN, A_CHECKED,
                 A_SPARSE_HESSIAN, A_APIS };

/* One call, NaN-prefilled outputs; results in out[0..] (fx first if any). */
static ad_status alloc_call(int api, prob *P, ad_linear *L, const double *x, double *out)
{
    size_t nx = n_in(P), n = P->n;
    double v[6] = {0.3, -0.2, 1.0, 0.1, 0.5, -0.7}, w[2] = {0.8, -0.4};
    ad_linear *M = NULL;
    ad_status st;
    switch (api) {
    case A_GRADIENT:
    case A_NESTED: return ad_gradient(objective, P, nx, x, out, out + 1);
    case A_CHECKED: {
        unsigned old = ad_set_checks(AD_CHECK_FINITE);
        st = ad_gradient(objective, P, nx, x, out, out + 1);
        ad_set_checks(old);
        return st;
    }
    case A_HVP: return ad_hvp(objective, P, nx, x, v, out, out + 1, out + 1 + nx);
    case A_HESSIAN:
    case A_NESTED_HESSIAN: return ad_hessian(objective, P, nx, x, out, out + 1, out + 1 + nx);
    case A_SPARSE: {
        ad_csr C;
        st = ad_sparse_jacobian(final_state, P, nx, x, n, out, &C);
        if (st == AD_OK) {
            assert_int_equal(C.nnz, n * nx);
            memcpy(out + n, C.val, n * nx * sizeof *out);
            ad_csr_free(&C);
        } else {
            assert_csr_empty(&C);
        }
        return st;
    }
    case A_SPARSE_HESSIAN: {  /* LV with its params: every pair interacts, nx (nx + 1) / 2 values */
        ad_csr C;
        st = ad_sparse_hessian(objective, P, nx, x, out, out + 1, &C);
        if (st == AD_OK) {
            assert_int_equal(C.nnz, nx * (nx + 1) / 2);
            memcpy(out + 1 + nx, C.val, C.nnz * sizeof *out);
            ad_csr_free(&C);
        } else {
            assert_csr_empty(&C);
            fill(out + 1 + nx, nx * (nx + 1) / 2, NAN);
        }
        return st;
    }
    case A_JACOBIAN: return ad_jacobian(final_state, P, nx, x, n, out, out + n);
    case A_JVP: return ad_jvp(final_state, P, nx, x, v, n, out, out + n);
    case A_LINEAR_VJP: return ad_linear_vjp(L, w, out);
    case A_LINEAR_JVP: return ad_linear_jvp(L, v, out);
    default:
        st = ad_linearize(final_state, P, nx, x, n, out, &M);
        if (st != AD_OK) {
            assert_null(M);
            return st;
        }
        ad_test_fail_alloc_after(-1);
        st = ad_linear_vjp(M, w, out + n);
        ad_linear_free(M);
        return st;
    }
}

static size_t alloc_outputs(int api, const prob *P)
{
    size_t nx = n_in(P), n = P->n;
    switch (api) {
    case A_GRADIENT:
    case A_NESTED:
    case A_CHECKED: return 1 + nx;
    case A_HVP: return 1 + 2 * nx;
    case A_HESSIAN:
    case A_NESTED_HESSIAN: return 1 + nx + nx * nx;
    case A_SPARSE: return n;  /* and the values, not NaN-filled on failure */
    case A_SPARSE_HESSIAN: return 1 + nx + nx * (nx + 1) / 2;
    case A_JACOBIAN: return n + n * nx;
    case A_JVP: return 2 * n;
    case A_LINEAR_VJP: return nx;
    case A_LINEAR_JVP: return n;
    default: return n + nx;
    }
}

static void test_alloc_failure(void **state)
{
    (void)state;
    for (int api = 0; api < A_APIS; api++)
        for (int fresh = 0; fresh < (api == A_NESTED_HESSIAN ? 1 : 2); fresh++) {
            /* the nested Hessian is small: it allocates in every replay */
            prob *P = api == A_NESTED           ? nest_new(5, 2, 4, 2, 4, ACT_BOTH)
                      : api == A_NESTED_HESSIAN ? nest_new(3, 1, 2, 1, 4, ACT_STATE)
                                                : lv_new(13, 3, 4, ACT_BOTH);
            double x[6], want[128], got[128];
            size_t nout = alloc_outputs(api, P);
            ad_linear *L = NULL;
            base_x(P, x);
            if (api == A_LINEAR_VJP || api == A_LINEAR_JVP) {
                double y[2];
                assert_status(ad_linearize(final_state, P, 6, x, 2, y, &L), AD_OK);
            }
            assert_status(alloc_call(api, use(P, 1), L, x, want), AD_OK);
            int successes = 0, failures = 0;
            for (long i = 0; successes < 3; i++) {
                if (fresh)
                    assert_status(ad_release(), AD_OK);
                fill(got, nout, 7.0);
                use(P, 1);
                ad_test_fail_alloc_after(i);
                ad_status st = alloc_call(api, P, L, x, got);
                ad_test_fail_alloc_after(-1);
                if (st == AD_OK) {
                    successes++;
                    assert_bits(W_REPEAT, got, want, api == A_SPARSE ? nout * 7 : nout);
                    continue;
                }
                failures++;
                assert_alloc_failure(i, st, successes);
                assert_all_nan_vec(got, api == A_LINEARIZE ? P->n : nout);
                /* the next call succeeds, with the right numbers */
                fill(got, nout, 7.0);
                assert_status(alloc_call(api, use(P, 1), L, x, got), AD_OK);
                assert_bits(W_REPEAT, got, want, api == A_SPARSE ? nout * 7 : nout);
                assert_true(i < 2000);
            }
            assert_true(failures > 0);
            if (getenv("DUALREV_TEST_VERBOSE"))
                fprintf(stderr, "# api %d fresh %d: %d allocation failure points\n", api, fresh,
                        failures);
            ad_linear_free(L);
            prob_free(P);
        }
}

/* A value of the recording around the loop, taken through ctx: used in an
 * operation or written to next, in every evaluation or only in the
 * sweep's replays; AD_EFOREIGN from every driver, NaN outputs. */
static ad_real trap_objective(const ad_real *x, size_t nx, void *ctx)
{
    prob *P = ctx;
    P->smuggled = ad_mul(x[0], 2.0);
    return objective(x, nx, ctx);
}

static void trap_function(const ad_real *x, size_t nx, ad_real *y, size_t m, void *ctx)
{
    prob *P = ctx;
    P->smuggled = ad_mul(x[0], 2.0);
    final_state(x, nx, y, m, ctx);
}

static prob *trap_new(enum trap trap, long use_after)
{
    prob *P = lv_new(13, 3, 4, ACT_BOTH);
    P->step = trap_step;
    P->trap = trap;
    P->use_after = use_after;
    P->trap_k = 5;
    return P;
}

/* Every driver on a trapped P: `want` from each, NaN outputs. */
static void expect_everywhere(prob *P, ad_status want)
{
    double x[6], v[6] = {1, 0.5, 0.25, 0, 0, -1}, w[2] = {1, -1}, fx, g[6], hv[6], y[2], jv[2];
    double J[12], H[36];
    ad_linear *L = NULL;
    base_x(P, x);
    P->evals = 0;
    assert_status(ad_gradient(trap_objective, P, 6, x, &fx, g), want);
    assert_nan(fx);
    assert_all_nan_vec(g, 6);
    P->evals = 0;
    assert_status(ad_vjp(trap_function, P, 6, x, 2, w, y, g), want);
    assert_all_nan_vec(y, 2);
    assert_all_nan_vec(g, 6);
    P->evals = 0;
    assert_status(ad_jvp(trap_function, P, 6, x, v, 2, y, jv), want);
    assert_all_nan_vec(y, 2);
    assert_all_nan_vec(jv, 2);
    P->evals = 0;
    assert_status(ad_jacobian(trap_function, P, 6, x, 2, y, J), want);
    assert_all_nan_vec(J, 12);
    P->evals = 0;
    assert_status(ad_hvp(trap_objective, P, 6, x, v, &fx, g, hv), want);
    assert_nan(fx);
    assert_all_nan_vec(g, 6);
    assert_all_nan_vec(hv, 6);
    P->evals = 0;
    assert_status(ad_hessian(trap_objective, P, 6, x, &fx, g, H), want);
    assert_all_nan_vec(H, 36);
    P->evals = 0;
    ad_status st = ad_linearize(trap_function, P, 6, x, 2, y, &L);
    if (st == AD_OK) {  /* the fault is only in the sweeps */
        assert_status(ad_linear_vjp(L, w, g), want);
        assert_all_nan_vec(g, 6);
        assert_status(ad_linear_jvp(L, v, jv), want);
        assert_all_nan_vec(jv, 2);
        assert_status(ad_linear_vjp(L, w, g), want);
        assert_all_nan_vec(g, 6);
        ad_linear_free(L);
    } else {
        assert_status(st, want);
        assert_null(L);
    }
    ad_csr C;
    P->evals = 0;
    assert_status(ad_sparse_jacobian(trap_function, P, 6, x, 2, y, &C), want);
    assert_csr_empty(&C);
    P->evals = 0;
    assert_status(ad_sparse_hessian(trap_objective, P, 6, x, &fx, g, &C), want);
    assert_nan(fx);
    assert_all_nan_vec(g, 6);
    assert_csr_empty(&C);
}

static void test_foreign(void **state)
{
    (void)state;
    {
        /* a value kept from the step before: a value of the same
         * recording written out, of another one checkpointed */
        prob *P = trap_new(TRAP_KEEP, 0);
        double x[6], fx, g[6];
        base_x(P, x);
        assert_status(ad_gradient(objective, use(P, 0), 6, x, &fx, g), AD_OK);
        P->smuggled = ad_const(0.0);
        use(P, 1);
        P->evals = 0;
        assert_status(ad_gradient(objective, P, 6, x, &fx, g), AD_EFOREIGN);
        assert_all_nan(fx, g, 6);
        assert_status(P->st, AD_OK);  /* the recording went well: the sweep found it */
        P->smuggled = ad_const(0.0);
        double v[6] = {1, 0, 0, 0, 0, 0}, y[2], jv[2];
        assert_status(ad_jvp(final_state, use(P, 1), 6, x, v, 2, y, jv), AD_EFOREIGN);
        assert_all_nan_vec(jv, 2);
        prob_free(P);
    }
    for (enum trap t = TRAP_USE; t <= TRAP_RETURN; t++) {
        prob *P = trap_new(t, 0);  /* every evaluation: the recording */
        expect_everywhere(P, AD_EFOREIGN);
        prob_free(P);
        P = trap_new(t, 13);  /* only once the sweep replays */
        expect_everywhere(P, AD_EFOREIGN);
        prob_free(P);
    }
}

/* Every argument constant, the step using an active value all the same. */
static ad_real const_args_objective(const ad_real *x, size_t nx, void *ctx)
{
    prob *P = ctx;
    ad_real s0[2] = {ad_const(P->s0[0]), ad_const(P->s0[1])}, sN[2];
    ad_real p[4] = {ad_const(P->p[0]), ad_const(P->p[1]), ad_const(P->p[2]), ad_const(P->p[3])};
    (void)nx;
    P->smuggled = ad_mul(x[0], 2.0);
    P->st = ad_checkpointed_loop(P->step, P, P->steps, P->snaps, 2, s0, 4, p, sN);
    return ad_add(x[1], ad_add(sN[0], sN[1]));
}

static void test_foreign_constant_arguments(void **state)
{
    (void)state;
    for (enum trap t = TRAP_USE; t <= TRAP_RETURN; t++) {
        prob *P = trap_new(t, 0);
        double x[6], fx, g[6];
        base_x(P, x);
        assert_status(ad_gradient(const_args_objective, P, 6, x, &fx, g), AD_EFOREIGN);
        assert_status(P->st, AD_EFOREIGN);
        assert_all_nan(fx, g, 6);
        prob_free(P);
    }
}

/* State0 (which = 0) or params (which = 1) from an earlier recording. */
static ad_real stale_value;
static int stale_which;

static ad_real stale_objective(const ad_real *x, size_t nx, void *ctx)
{
    prob *P = ctx;
    ad_real s0[2] = {x[0], x[1]}, p[4] = {x[2], x[3], x[4], x[5]}, sN[2];
    (void)nx;
    if (stale_which % 2)
        p[2] = stale_value;
    else
        s0[1] = stale_value;
    P->st = ad_checkpointed_loop(P->step, P, P->steps, P->snaps, 2, s0, 4, p, sN);
    return ad_add(sN[0], sN[1]);
}

static ad_real save_objective(const ad_real *x, size_t nx, void *ctx)
{
    (void)nx, (void)ctx;
    stale_value = ad_mul(x[0], 3.0);
    return stale_value;
}

static void test_foreign_arguments(void **state)
{
    (void)state;
    prob *P = lv_new(5, 2, 4, ACT_BOTH);
    double x[6], fx, g[6];
    base_x(P, x);
    for (stale_which = 0; stale_which < 4; stale_which++) {
        P->steps = stale_which < 2 ? 5 : 0;  /* steps = 0 copies, but checks too */
        gradient_ok(save_objective, NULL, 6, x, g);
        P->evals = 0;
        assert_status(ad_gradient(stale_objective, P, 6, x, &fx, g), AD_EFOREIGN);
        assert_status(P->st, AD_EFOREIGN);
        assert_int_equal(P->evals, 0);
        assert_all_nan(fx, g, 6);
    }
    prob_free(P);
}

static void test_nonfinite(void **state)
{
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    /* A finite loop under checks: right numbers, AD_OK. */
    prob *P = lv_new(13, 3, 4, ACT_BOTH);
    compare_drivers(P, DO_FIRST | DO_HVP, 77);
    prob_free(P);
    P = heat_new(100, 7, 0, 2, ACT_BOTH);
    compare_drivers(P, DO_LIN, 78);
    prob_free(P);

    /* Inf (exp(1000)) or NaN (log of a negative) inside step 5 only, the
     * step's output finite: the forward pass does not see it, the replays
     * do. */
    for (enum trap t = TRAP_EXP; t <= TRAP_NAN_OUT; t++) {
        P = trap_new(t, 0);
        double x[6], fx, g[6];
        base_x(P, x);
        /* written out: the recording meets it */
        assert_status(ad_gradient(objective, use(P, 0), 6, x, &fx, g), AD_ENONFINITE);
        assert_all_nan(fx, g, 6);
        expect_everywhere(use(P, 1), AD_ENONFINITE);
        ad_fault f;
        assert_status(ad_gradient(objective, use(P, 1), 6, x, &fx, g), AD_ENONFINITE);
        assert_all_nan(fx, g, 6);
        assert_status(ad_last_fault(&f), AD_OK);
        assert_non_null(f.op);
        if (getenv("DUALREV_TEST_VERBOSE"))
            fprintf(stderr, "# trap %d: fault op %s, phase %d, id %u\n", (int)t, f.op,
                    (int)f.phase, (unsigned)f.id);
        /* the thread is fine afterwards */
        P->trap = TRAP_NONE;
        compare_drivers(P, DO_FIRST, 79);
        prob_free(P);
    }
    ad_set_checks(old);
}

/* The step's tape over the tape limit: AD_ERANGE from the sweep. */
static void test_tape_limit(void **state)
{
    (void)state;
    prob *P = lv_new(13, 3, 4, ACT_BOTH);
    double x[6], fx, g[6], want[6], v[6] = {1, 0, 0, 0, 0, 0}, hv[6];
    base_x(P, x);
    gradient_ok(objective, P, 6, x, want);
    size_t old = ad_set_tape_limit(45);
    /* the loop written out does not fit, the checkpointed loop does, but
     * not its steps */
    assert_status(ad_gradient(objective, use(P, 0), 6, x, &fx, g), AD_ERANGE);
    assert_status(ad_gradient(objective, use(P, 1), 6, x, &fx, g), AD_ERANGE);
    assert_all_nan(fx, g, 6);
    assert_status(ad_hvp(objective, use(P, 1), 6, x, v, &fx, g, hv), AD_ERANGE);
    assert_all_nan_vec(hv, 6);
    ad_set_tape_limit(200);
    assert_status(ad_gradient(objective, use(P, 1), 6, x, &fx, g), AD_OK);
    assert_vec(W_GRAD, g, want, 6);
    /* the block itself does not fit: at the recording */
    ad_set_tape_limit(2);
    assert_status(ad_gradient(objective, use(P, 1), 6, x, &fx, g), AD_ERANGE);
    assert_all_nan(fx, g, 6);
    assert_status(P->st, AD_ERANGE);
    ad_set_tape_limit(old);
    prob_free(P);
}

/* ======================================================================
 * 8. Sparse drivers
 * ====================================================================== */

/* y = (y_N, x0 x5, x3): two loop rows over every argument, two others. */
static void sparse_function(const ad_real *x, size_t nx, ad_real *y, size_t m, void *ctx)
{
    prob *P = ctx;
    final_state(x, nx, y, m, ctx);
    if (P->kind == LV && P->act == ACT_BOTH) {
        y[2] = ad_mul(x[0], x[5]);
        y[3] = x[3];
    }
}

static void test_sparse(void **state)
{
    (void)state;
    static const int acts[] = {ACT_BOTH, ACT_STATE, ACT_PARAMS};
    for (int a = 0; a < 3; a++)
        for (size_t steps = 0; steps <= 13; steps += 13) {
            prob *P = lv_new(steps ? 13 : 0, 3, 4, acts[a]);
            size_t nx = n_in(P), m = acts[a] == ACT_BOTH ? 4 : 2;
            double x[6], y[2][4], J[2][24], dense[24];
            ad_csr C;
            base_x(P, x);
            for (int l = 1; l >= 0; l--)
                assert_status(ad_jacobian(sparse_function, use(P, l), nx, x, m, y[l], J[l]),
                              AD_OK);
            assert_vec(W_JAC, J[1], J[0], m * nx);
            assert_status(ad_sparse_jacobian(sparse_function, use(P, 1), nx, x, m, y[1], &C),
                          AD_OK);
            assert_bits(W_Y, y[1], y[0], m);
            assert_csr_valid(&C, m, nx);
            fill(dense, m * nx, 0.0);
            for (size_t r = 0; r < m; r++)
                for (size_t k = C.row_ptr[r]; k < C.row_ptr[r + 1]; k++)
                    dense[r * nx + C.col[k]] = C.val[k];
            assert_vec(W_SPARSE, dense, J[0], m * nx);
            /* the loop's rows: every argument (steps = 0 is a copy: just
             * its own) */
            for (size_t r = 0; r < 2; r++)
                assert_int_equal(C.row_ptr[r + 1] - C.row_ptr[r],
                                 steps ? nx : (acts[a] & ACT_STATE ? 1 : 0));
            ad_csr_free(&C);
            prob_free(P);
        }
    /* HEAT, 100 rows of 102, with either sparse store */
    prob *P = heat_new(100, 7, 0, 2, ACT_BOTH);
    size_t nx = n_in(P);
    double *x = dalloc(nx), *y = dalloc(100), *J = dalloc(100 * nx), *dense = dalloc(100 * nx);
    ad_csr C;
    base_x(P, x);
    assert_status(ad_jacobian(final_state, use(P, 0), nx, x, 100, y, J), AD_OK);
    for (int hash = 0; hash < 2; hash++) {
        ad_test_sparse_force_hash(hash);
        assert_status(ad_sparse_jacobian(final_state, use(P, 1), nx, x, 100, y, &C), AD_OK);
        ad_test_sparse_force_hash(0);
        assert_csr_valid(&C, 100, nx);
        /* the structure of the loop written out: what 7 steps of the
         * stencil reach, where every entry of J is positive, and the
         * params */
        size_t nnz = 0;
        fill(dense, 100 * nx, 0.0);
        for (size_t r = 0; r < 100; r++)
            for (size_t k = C.row_ptr[r]; k < C.row_ptr[r + 1]; k++)
                dense[r * nx + C.col[k]] = C.val[k];
        for (size_t e = 0; e < 100 * nx; e++) {
            nnz += J[e] != 0.0;
            assert_true((J[e] != 0.0) == (dense[e] != 0.0));
        }
        assert_int_equal(C.nnz, nnz);
        assert_true(nnz < 100 * nx / 4);
        assert_vec(W_SPARSE, dense, J, 100 * nx);
        ad_csr_free(&C);
    }
    free(x), free(y), free(J), free(dense);
    prob_free(P);
}

/* ad_sparse_hessian of P's objective through the loop against
 * ad_hessian of the same loop and of the loop written out, and the
 * structure against the written-out sparse one: the same pairs, no more
 * (edge pushing carried through the steps keeps their reach), with the
 * same values to rounding.  Then ad_sparse_hessian_values into it, bit
 * for bit. */
static void check_sparse_hessian(prob *P)
{
    size_t nx = n_in(P);
    double *x = dalloc(nx), *g[2], *gs[2], *H[2], fx[2], fs[2], *dense = dalloc(nx * nx);
    ad_csr S[2];
    for (int l = 0; l < 2; l++)
        g[l] = dalloc(nx), gs[l] = dalloc(nx), H[l] = dalloc(nx * nx);
    base_x(P, x);
    for (int l = 1; l >= 0; l--) {
        assert_status(ad_hessian(objective, use(P, l), nx, x, &fx[l], g[l], H[l]), AD_OK);
        assert_status(ad_sparse_hessian(objective, use(P, l), nx, x, &fs[l], gs[l], &S[l]), AD_OK);
        assert_status(P->st, AD_OK);
        assert_csr_valid(&S[l], nx, nx);
    }
    assert_bits(W_FX, &fx[1], &fx[0], 1);
    assert_bits(W_FX, fs, fx, 2);
    assert_vec(W_HESS, H[1], H[0], nx * nx);
    assert_vec(W_HESS_G, g[1], g[0], nx);
    assert_vec(W_HESS_G, gs[1], g[0], nx);
    fill(dense, nx * nx, 0.0);
    for (size_t r = 0; r < nx; r++)
        for (size_t k = S[1].row_ptr[r]; k < S[1].row_ptr[r + 1]; k++)
            dense[r * nx + S[1].col[k]] = dense[S[1].col[k] * nx + r] = S[1].val[k];
    assert_vec(W_SPARSE_HESS, dense, H[1], nx * nx);
    assert_int_equal(S[1].nnz, S[0].nnz);
    for (size_t r = 0; r <= nx; r++)
        assert_int_equal(S[1].row_ptr[r], S[0].row_ptr[r]);
    for (size_t e = 0; e < S[0].nnz; e++)
        assert_int_equal(S[1].col[e], S[0].col[e]);
    assert_vec(W_SPARSE_HESS, S[1].val, S[0].val, S[0].nnz);
    /* into its own structure: the same values */
    double *val = dalloc(S[1].nnz ? S[1].nnz : 1);
    memcpy(val, S[1].val, S[1].nnz * sizeof *val);
    fill(S[1].val, S[1].nnz, 7.0);
    assert_status(ad_sparse_hessian_values(objective, use(P, 1), nx, x, &fs[1], gs[1], &S[1]),
                  AD_OK);
    assert_bits(W_REPEAT, S[1].val, val, S[1].nnz);
    free(val);
    ad_csr_free(&S[0]);
    ad_csr_free(&S[1]);
    use(P, 1);
    free(x), free(dense);
    for (int l = 0; l < 2; l++)
        free(g[l]), free(gs[l]), free(H[l]);
}

static void test_sparse_hessian(void **state)
{
    (void)state;
    static const struct {
        size_t np;
        int act;
    } lv_forms[] = {{4, ACT_BOTH}, {4, ACT_STATE}, {4, ACT_PARAMS}, {0, ACT_STATE}};
    static const size_t steps[] = {1, 2, 7, 13};
    for (size_t f = 0; f < 4; f++)
        for (size_t i = 0; i < 4; i++)
            for (size_t snaps = 0; snaps <= 2; snaps++) {
                prob *P = lv_new(steps[i], snaps, lv_forms[f].np, lv_forms[f].act);
                check_sparse_hessian(P);
                prob_free(P);
            }
    for (int form = 0; form < 5; form++) {
        static const int acts[] = {ACT_BOTH, ACT_STATE, ACT_PARAMS, ACT_BOTH, ACT_STATE};
        prob *P = odd_new(7, 2, form == 4 ? 0 : 2, acts[form], form == 3);
        check_sparse_hessian(P);
        prob_free(P);
    }
    prob *P = nest_new(5, 2, 4, 2, 4, ACT_BOTH);
    check_sparse_hessian(P);
    prob_free(P);
    P = heat_new(10, 7, 2, 2, ACT_BOTH);
    check_sparse_hessian(P);
    prob_free(P);
    /* at LV's fixed point the outputs' cotangents are 0, their curvature not */
    P = lv_new(13, 2, 4, ACT_BOTH);
    P->s0[0] = P->s0[1] = P->data[0] = P->data[1] = 0.0;
    check_sparse_hessian(P);
    prob_free(P);
}

/* The cost of ad_sparse_hessian through a loop: the recording's l
 * evaluations, then one reverse replay from the recording's descent
 * (F(l, S) + 1 evaluations) in which each step is recorded twice (its
 * sparse Jacobian, its weighted edge pushing): l more.  Flat in the
 * state size. */
static void test_sparse_hessian_counts(void **state)
{
    (void)state;
    dp_init();
    static const size_t ls[] = {1, 2, 7, 13, 30};
    for (size_t i = 0; i < 5; i++)
        for (size_t snaps = 1; snaps <= 3; snaps++) {
            size_t l = ls[i], S = snaps_used(l, snaps);
            long t = (long)F[l][S], L = (long)l;
            prob *P = lv_new(l, snaps, 4, ACT_BOTH);
            double x[6], fx, g[6];
            ad_csr H;
            base_x(P, x);
            P->evals = 0;
            assert_status(ad_sparse_hessian(objective, P, 6, x, &fx, g, &H), AD_OK);
            long want = L + (t + 1) + L;
            if (P->evals != want) {
                print_error("steps %zu, snapshots %zu: %ld evaluations, expected %ld\n", l,
                            snaps, P->evals, want);
                fail();
            }
            assert_int_equal(H.nnz, 21);  /* LV with 4 params: every pair interacts */
            ad_csr_free(&H);
            prob_free(P);
        }
}

/* A loop with a Hessian in closed form: state (u, v), param p, N steps
 * of u' = p u, v' = v + u^2 (the steps skip nothing: v's partial in p is
 * there though the step never reads both), so u_N = p^N u0 and
 * v_N = v0 + u0^2 S(p), S(p) = sum_{k<N} p^(2k).  f = v_N + c u_N:
 *   f_u0u0 = 2 S, f_u0p = 2 u0 S' + c N p^(N-1), f_pp = u0^2 S'' +
 *   c N (N-1) u0 p^(N-2), v0's row 0 and not in the structure, as the
 * loop written out has no pair with v0. */
static void square_step(size_t k, const ad_real *s, ad_real *next, size_t n,
                        const ad_real *params, size_t np, void *ctx)
{
    (void)k, (void)n, (void)np, (void)ctx;
    next[0] = ad_mul(params[0], s[0]);
    next[1] = ad_add(s[1], ad_mul(s[0], s[0]));
}

static ad_real square_objective(const ad_real *x, size_t nx, void *ctx)
{
    const size_t *N = ctx;
    ad_real out[2];
    (void)nx;
    status_unused(ad_checkpointed_loop(square_step, NULL, *N, 2, 2, x, 1, x + 2, out));
    return ad_add(out[1], ad_mul(0.75, out[0]));
}

static void test_sparse_hessian_closed_form(void **state)
{
    (void)state;
    static const size_t Ns[] = {1, 2, 5, 9};
    for (size_t t = 0; t < 4; t++) {
        size_t N = Ns[t];
        const double x[3] = {0.6, -0.4, 1.1}, c = 0.75;
        double u0 = x[0], p = x[2], S = 0, S1 = 0, S2 = 0, fx, g[3], Hd[9];
        for (size_t k = 0; k < N; k++) {
            double e = (double)(2 * k);
            S += pow(p, e);
            S1 += k ? e * pow(p, e - 1) : 0.0;
            S2 += k ? e * (e - 1) * pow(p, e - 2) : 0.0;
        }
        double Nd = (double)N;
        double want[9] = {2 * S, 0, 2 * u0 * S1 + c * Nd * pow(p, Nd - 1),
                          0, 0, 0,
                          2 * u0 * S1 + c * Nd * pow(p, Nd - 1), 0,
                          u0 * u0 * S2 + c * Nd * (Nd - 1) * u0 * (N > 1 ? pow(p, Nd - 2) : 0)};
        ad_csr H;
        assert_status(ad_sparse_hessian(square_objective, &N, 3, x, &fx, g, &H), AD_OK);
        assert_csr_valid(&H, 3, 3);
        assert_int_equal(H.nnz, N == 1 ? 2 : 3);  /* (u0,u0), (p,u0), and (p,p) from 2 steps on */
        for (size_t r = 0; r < 3; r++)
            for (size_t k = H.row_ptr[r]; k < H.row_ptr[r + 1]; k++)
                assert_near(H.val[k], want[r * 3 + H.col[k]], 1e-14, 1e-15);
        assert_near(g[1], 1.0, 0.0, 0.0);
        ad_csr_free(&H);
        assert_status(ad_hessian(square_objective, &N, 3, x, &fx, g, Hd), AD_OK);
        for (size_t e = 0; e < 9; e++)
            assert_near(Hd[e], want[e], 1e-14, 1e-15);
    }
    /* steps = 0 records no loop: the objective's own structure */
    size_t N = 0;
    const double x[3] = {0.6, -0.4, 1.1};
    double fx, g[3];
    ad_csr H;
    assert_status(ad_sparse_hessian(square_objective, &N, 3, x, &fx, g, &H), AD_OK);
    assert_int_equal(H.nnz, 0);
    ad_csr_free(&H);
}

/* ======================================================================
 * 9. Outside a recording, constants, aliasing, invalid arguments
 * ====================================================================== */

static void test_outside_recording(void **state)
{
    (void)state;
    prob *P = heat_new(100, 13, 3, 2, ACT_BOTH);
    ad_real s[100], p[2], want[100], got[100];
    for (size_t i = 0; i < 100; i++)
        s[i] = ad_const(P->s0[i]);
    p[0] = ad_const(P->p[0]), p[1] = ad_const(P->p[1]);
    plain_loop(heat_step, P, 13, 100, s, 2, p, want);
    P->evals = 0;
    assert_status(ad_checkpointed_loop(heat_step, P, 13, 3, 100, s, 2, p, got), AD_OK);
    assert_int_equal(P->evals, 13);  /* just the loop */
    for (size_t i = 0; i < 100; i++) {
        assert_same(got[i].v, want[i].v);
        assert_int_equal(got[i].id, 0);
    }
    /* stateN = state0 */
    assert_status(ad_checkpointed_loop(heat_step, P, 13, 0, 100, s, 2, p, s), AD_OK);
    for (size_t i = 0; i < 100; i++)
        assert_same(s[i].v, want[i].v);
    /* steps = 0: a copy; n = 0: nothing, NULL arrays allowed */
    P->evals = 0;
    assert_status(ad_checkpointed_loop(heat_step, P, 0, 3, 100, want, 2, p, got), AD_OK);
    for (size_t i = 0; i < 100; i++)
        assert_same(got[i].v, want[i].v);
    assert_status(ad_checkpointed_loop(heat_step, P, 5, 3, 0, NULL, 0, NULL, NULL), AD_OK);
    assert_int_equal(P->evals, 0);
    prob_free(P);
}

/* Inside a recording with every argument constant: the loop just runs;
 * stateN may be state0. */
static ad_real const_objective(const ad_real *x, size_t nx, void *ctx)
{
    prob *P = ctx;
    ad_real s0[2] = {ad_const(P->s0[0]), ad_const(P->s0[1])}, sN[2];
    ad_real p[4] = {ad_const(P->p[0]), ad_const(P->p[1]), ad_const(P->p[2]), ad_const(P->p[3])};
    (void)nx;
    P->st = ad_checkpointed_loop(P->step, P, P->steps, P->snaps, 2, s0, 4, p, sN);
    if (sN[0].id || sN[1].id)
        P->st = AD_EINVAL;  /* marks a failure: constants expected */
    return ad_add(x[0], ad_mul(sN[0], sN[1]));
}

static ad_real alias_objective(const ad_real *x, size_t nx, void *ctx)
{
    prob *P = ctx;
    ad_real s[2] = {x[0], x[1]}, p[4] = {x[2], x[3], x[4], x[5]};
    (void)nx;
    P->st = ad_checkpointed_loop(P->step, P, P->steps, P->snaps, 2, s, 4, p, s);
    ad_real J = param_term(P, p);
    for (int i = 0; i < 2; i++) {
        ad_real d = ad_sub(s[i], P->data[i]);
        J = ad_add(J, ad_mul(d, d));
    }
    return J;
}

static void test_constants_and_aliasing(void **state)
{
    (void)state;
    prob *P = lv_new(13, 3, 4, ACT_BOTH);
    double x[6], fx, g[6], want[6], fw;
    base_x(P, x);
    P->evals = 0;
    fx = gradient_ok(const_objective, P, 1, x, g);
    assert_status(P->st, AD_OK);
    assert_int_equal(P->evals, 13);
    ad_real s0[2] = {ad_const(1.0), ad_const(0.7)}, sN[2];
    ad_real p[4] = {ad_const(1.5), ad_const(1.0), ad_const(1.0), ad_const(3.0)};
    plain_loop(lv_step, P, 13, 2, s0, 4, p, sN);
    assert_same(fx, x[0] + sN[0].v * sN[1].v);
    assert_same(g[0], 1.0);

    for (size_t steps = 0; steps <= 13; steps += 13) {
        double v[6] = {0.5, -1, 0.25, 1, 0, 2}, hv[6], hw[6];
        P->steps = steps;
        fw = gradient_ok(objective, use(P, 0), 6, x, want);
        fx = gradient_ok(alias_objective, use(P, 1), 6, x, g);
        assert_status(P->st, AD_OK);
        assert_same(fx, fw);
        assert_vec(W_GRAD, g, want, 6);
        assert_status(ad_hvp(objective, use(P, 0), 6, x, v, &fw, want, hw), AD_OK);
        assert_status(ad_hvp(alias_objective, use(P, 1), 6, x, v, &fx, g, hv), AD_OK);
        assert_status(P->st, AD_OK);
        assert_same(fx, fw);
        assert_vec(W_HVP_G, g, want, 6);
        assert_vec(W_HVP, hv, hw, 6);
    }
    /* snapshots past any size: as many as steps */
    P->snaps = SIZE_MAX;
    fx = gradient_ok(objective, use(P, 1), 6, x, g);
    P->snaps = 13;
    fw = gradient_ok(objective, use(P, 1), 6, x, want);
    assert_same(fx, fw);
    assert_bits(W_REPEAT, g, want, 6);
    prob_free(P);
}

typedef struct bad_call {
    int which;
    ad_status st;
} bad_call;

static ad_status bad_loop(int which, ad_real *s0, ad_real *p, ad_real *sN, prob *P)
{
    switch (which) {
    case 0: return ad_checkpointed_loop(NULL, P, 3, 1, 2, s0, 4, p, sN);
    case 1: return ad_checkpointed_loop(lv_step, P, 3, 1, 2, NULL, 4, p, sN);
    case 2: return ad_checkpointed_loop(lv_step, P, 3, 1, 2, s0, 4, p, NULL);
    default: return ad_checkpointed_loop(lv_step, P, 3, 1, 2, s0, 4, NULL, sN);
    }
}

static prob *bad_prob;

static ad_real bad_objective(const ad_real *x, size_t nx, void *ctx)
{
    bad_call *c = ctx;
    ad_real s0[2] = {x[0], x[1]}, p[4] = {x[2], x[3], x[4], x[5]};
    ad_real sN[2] = {ad_const(NAN), ad_const(NAN)};  /* a call without stateN leaves them */
    (void)nx;
    c->st = bad_loop(c->which, s0, p, sN, bad_prob);
    return ad_add(x[0], ad_add(sN[0], sN[1]));
}

static void test_invalid_arguments(void **state)
{
    (void)state;
    bad_prob = lv_new(3, 1, 4, ACT_BOTH);
    ad_real s0[2] = {ad_const(1.0), ad_const(0.7)}, sN[2];
    ad_real p[4] = {ad_const(1.5), ad_const(1.0), ad_const(1.0), ad_const(3.0)};
    double x[6], fx, g[6];
    base_x(bad_prob, x);
    for (int which = 0; which < 4; which++) {
        sN[0] = sN[1] = ad_const(7.0);
        bad_prob->evals = 0;
        assert_status(bad_loop(which, s0, p, sN, bad_prob), AD_EINVAL);
        if (which != 2) {
            assert_nan(sN[0].v);
            assert_nan(sN[1].v);
        }
        bad_call c = {which, AD_OK};
        assert_status(ad_gradient(bad_objective, &c, 6, x, &fx, g), AD_EINVAL);
        assert_status(c.st, AD_EINVAL);
        assert_all_nan(fx, g, 6);
        assert_int_equal(bad_prob->evals, 0);
    }
    prob_free(bad_prob);
}

/* ======================================================================
 * 10. Memory: snapshots and one step's tape
 * ====================================================================== */

static void test_stats(void **state)
{
    (void)state;
    static const size_t snaps[] = {2, 13, 0, 200};
    for (size_t i = 0; i < sizeof snaps / sizeof *snaps; i++) {
        prob *P = heat_new(100, 97, snaps[i], 2, ACT_BOTH);
        size_t nx = n_in(P), S = snaps_used(97, snaps[i]);
        double *x = dalloc(nx), *g = dalloc(nx), *v = dalloc(nx), *hv = dalloc(nx), fx;
        ad_tape_stats st, plain;
        base_x(P, x);
        fill(v, nx, 0.5);
        gradient_ok(objective, use(P, 1), nx, x, g);
        assert_status(ad_tape_stats_get(&st), AD_OK);
        assert_int_equal(st.snapshot_bytes, 8 * S * 100);
        /* docs/api.md: 104 + 8 (3 (n + np) + S n) + 4 (n + np), padded to 16;
         * the header is 60 bytes on i386 */
        size_t head = sizeof(void *) == 8 ? 104 : 60;
        size_t block = head + 8 * (3 * nx + S * 100) + 4 * nx;
        assert_int_equal(st.block_bytes, (block + 15) / 16 * 16);
        assert_true(st.step_bytes > 0);
        gradient_ok(objective, use(P, 0), nx, x, g);
        assert_status(ad_tape_stats_get(&plain), AD_OK);
        assert_int_equal(plain.snapshot_bytes, 0);
        assert_int_equal(plain.step_bytes, 0);
        size_t plain_bytes = plain.records * plain.record_bytes;
        if (getenv("DUALREV_TEST_VERBOSE"))
            fprintf(stderr, "# S %zu: snapshots %zu B, step %zu B, records %zu (plain %zu B)\n", S,
                    st.snapshot_bytes, st.step_bytes, st.records, plain_bytes);
        assert_true(st.step_bytes * 50 < plain_bytes);
        assert_true(st.records * 50 < plain.records);
        /* second order: states and tangents */
        assert_status(ad_hvp(objective, use(P, 1), nx, x, v, &fx, g, hv), AD_OK);
        assert_status(ad_tape_stats_get(&st), AD_OK);
        assert_int_equal(st.snapshot_bytes, 16 * S * 100);
        block = head + 8 * (3 * nx + S * 200) + 4 * nx;
        assert_int_equal(st.block_bytes, (block + 15) / 16 * 16);
        assert_true(st.step_bytes > 0);
        free(x), free(g), free(v), free(hv);
        prob_free(P);
    }
    /* two loops in one recording: the sum (nested: only the outer one's) */
    prob *P = nest_new(13, 4, 5, 2, 4, ACT_BOTH);
    double x[6], g[6];
    ad_tape_stats st;
    base_x(P, x);
    gradient_ok(objective, use(P, 1), 6, x, g);
    assert_status(ad_tape_stats_get(&st), AD_OK);
    assert_int_equal(st.snapshot_bytes, 8 * 4 * 2);
    /* the dump names the block */
    FILE *out = tmpfile();
    char line[256];
    int found = 0;
    assert_non_null(out);
    assert_status(ad_tape_dump(out, 100), AD_OK);
    rewind(out);
    while (fgets(line, sizeof line, out))
        found |= strstr(line, "block (checkpointed loop): 2 outputs, 6 arguments") != NULL;
    fclose(out);
    assert_true(found);
    prob_free(P);
}

/* ======================================================================
 * 11. Odd steps, several loops, loops in nested calls, retried sweeps
 * ====================================================================== */

/* ad_sparse_jacobian of x -> y_N through the loop against the dense
 * Jacobian of the loop written out: a valid CSR whose values are the dense
 * ones, with the loop's rows over every input it reads. */
static void check_sparse_against_dense(prob *P)
{
    size_t nx = n_in(P), n = P->n;
    double *x = dalloc(nx), *y = dalloc(n), *J = dalloc(n * nx), *dense = dalloc(n * nx);
    ad_csr C;
    base_x(P, x);
    assert_status(ad_jacobian(final_state, use(P, 0), nx, x, n, y, J), AD_OK);
    assert_status(ad_sparse_jacobian(final_state, use(P, 1), nx, x, n, y, &C), AD_OK);
    assert_csr_valid(&C, n, nx);
    fill(dense, n * nx, 0.0);
    for (size_t r = 0; r < n; r++)
        for (size_t k = C.row_ptr[r]; k < C.row_ptr[r + 1]; k++)
            dense[r * nx + C.col[k]] = C.val[k];
    assert_vec(W_SPARSE, dense, J, n * nx);
    ad_csr_free(&C);
    free(x), free(y), free(J), free(dense);
}

/* Steps whose outputs are inputs, params, constants or each other, and
 * loops whose arguments repeat (state0[1] = state0[0] = params[1]). */
static void test_odd_steps(void **state)
{
    (void)state;
    uint64_t seed = 101;
    static const size_t steps[] = {0, 1, 2, 7, 13};
    for (size_t i = 0; i < 5; i++) {
        size_t snaps[6], ns = snapshot_choices(steps[i], snaps);
        for (size_t s = 0; s < ns; s++)
            for (int form = 0; form < 5; form++) {
                static const int acts[] = {ACT_BOTH, ACT_STATE, ACT_PARAMS, ACT_BOTH, ACT_STATE};
                prob *P = odd_new(steps[i], snaps[s], form == 4 ? 0 : 2, acts[form], form == 3);
                compare_drivers(P, DO_ALL, seed++);
                check_sparse_against_dense(P);
                prob_free(P);
            }
    }
}

/* Two loops one after the other (the second from the first's states), a
 * plain term across them. */
typedef struct two {
    prob *A, *B;
    int loop;
} two;

static ad_real two_objective(const ad_real *x, size_t nx, void *ctx)
{
    two *T = ctx;
    ad_real s[2] = {x[0], x[1]}, p[4] = {x[2], x[3], x[4], x[5]}, mid[2], out[2];
    (void)nx;
    if (T->loop) {
        note_status(T->A, ad_checkpointed_loop(lv_step, T->A, T->A->steps, T->A->snaps, 2, s, 4,
                                               p, mid));
        note_status(T->A, ad_checkpointed_loop(lv_step, T->B, T->B->steps, T->B->snaps, 2, mid,
                                               4, p, out));
    } else {
        plain_loop(lv_step, T->A, T->A->steps, 2, s, 4, p, mid);
        plain_loop(lv_step, T->B, T->B->steps, 2, mid, 4, p, out);
    }
    ad_real J = ad_mul(mid[0], out[1]);
    for (int i = 0; i < 2; i++) {
        ad_real d = ad_sub(out[i], T->A->data[i]);
        J = ad_add(J, ad_mul(d, d));
    }
    return J;
}

static void test_two_loops(void **state)
{
    (void)state;
    two T = {lv_new(13, 3, 4, ACT_BOTH), lv_new(8, 0, 4, ACT_BOTH), 0};
    T.B->h = 0.03;
    double x[6], v[6] = {0.3, 1, -1, 0.5, 0.2, 0}, fx[2], g[2][6], hv[2][6], H[2][36];
    ad_tape_stats st;
    base_x(T.A, x);
    for (int l = 1; l >= 0; l--) {
        T.loop = l;
        T.A->st = AD_OK;
        assert_status(ad_gradient(two_objective, &T, 6, x, &fx[l], g[l]), AD_OK);
        if (l) {
            assert_status(ad_tape_stats_get(&st), AD_OK);
            assert_int_equal(st.snapshot_bytes, 8 * 2 * (3 + snaps_used(8, 0)));
        }
        assert_status(ad_hvp(two_objective, &T, 6, x, v, &fx[l], g[l], hv[l]), AD_OK);
        assert_status(ad_hessian(two_objective, &T, 6, x, &fx[l], g[l], H[l]), AD_OK);
        assert_status(T.A->st, AD_OK);
    }
    assert_bits(W_FX, &fx[1], &fx[0], 1);
    assert_vec(W_HESS_G, g[1], g[0], 6);
    assert_vec(W_HVP, hv[1], hv[0], 6);
    assert_vec(W_HESS, H[1], H[0], 36);
    prob_free(T.A);
    prob_free(T.B);
}

/* A gradient through a loop computed inside another recording (a nested
 * ad_gradient, and ad_linear_vjp of a handle), as constants there. */
typedef struct inside {
    prob *P;
    ad_linear *L;
    double c[6];
    ad_status st;
} inside;

static ad_real inside_objective(const ad_real *x, size_t nx, void *ctx)
{
    inside *I = ctx;
    double xv[6] = {0}, fx, w[2] = {0.5, -2.0}, wj[6];
    for (size_t i = 0; i < nx; i++)
        xv[i] = x[i].v;
    I->st = ad_gradient(objective, I->P, nx, xv, &fx, I->c);
    ad_status s = ad_linear_vjp(I->L, w, wj);
    if (I->st == AD_OK)
        I->st = s;
    ad_real J = ad_const(0.0);
    for (size_t i = 0; i < nx; i++)
        J = ad_add(J, ad_mul(I->c[i] + wj[i], x[i]));
    return J;
}

static void test_inside_recording(void **state)
{
    (void)state;
    inside I = {lv_new(13, 3, 4, ACT_BOTH), NULL, {0}, AD_EINVAL};
    double x[6], y[2], g[6], want[6], wj[6], w[2] = {0.5, -2.0};
    base_x(I.P, x);
    gradient_ok(objective, I.P, 6, x, want);
    assert_status(ad_linearize(final_state, I.P, 6, x, 2, y, &I.L), AD_OK);
    assert_status(ad_linear_vjp(I.L, w, wj), AD_OK);
    gradient_ok(inside_objective, &I, 6, x, g);
    assert_status(I.st, AD_OK);
    for (int i = 0; i < 6; i++)
        assert_same(g[i], want[i] + wj[i]);
    ad_linear_free(I.L);
    prob_free(I.P);
}

/* A sweep whose results are not all finite runs again (seeded.h, "Scaled
 * seeds"): an unused sqrt(0), infinite partial, makes x6's cotangent NaN
 * until the exact pass. */
static ad_real retry_objective(const ad_real *x, size_t nx, void *ctx)
{
    prob *P = ctx;
    ad_real unused = ad_sqrt(x[6]);
    (void)unused;
    return objective(x, nx - 1, P);
}

static void test_retry_pass(void **state)
{
    (void)state;
    prob *P = lv_new(13, 3, 4, ACT_BOTH);
    double x[7], fx[2], g[2][7];
    base_x(P, x);
    x[6] = 0.0;
    for (int l = 1; l >= 0; l--) {
        assert_status(ad_gradient(retry_objective, use(P, l), 7, x, &fx[l], g[l]), AD_OK);
        assert_status(P->st, AD_OK);
    }
    assert_bits(W_FX, &fx[1], &fx[0], 1);
    assert_vec(W_GRAD, g[1], g[0], 7);
    assert_same(g[1][6], 0.0);
    prob_free(P);
}

/* At LV's fixed point (0, 0) with data 0, the loop's outputs have zero
 * cotangents but not zero second-order ones: the Hessian is 2 M^T M. */
static void test_zero_cotangent(void **state)
{
    (void)state;
    for (size_t snaps = 0; snaps <= 2; snaps++) {
        prob *P = lv_new(13, snaps, 4, ACT_BOTH);
        P->s0[0] = P->s0[1] = P->data[0] = P->data[1] = 0.0;
        compare_drivers(P, DO_ALL, 31 + snaps);
        double x[6], fx, g[6], H[36], J[12], y[2];
        base_x(P, x);
        assert_status(ad_hessian(objective, use(P, 1), 6, x, &fx, g, H), AD_OK);
        assert_status(ad_jacobian(final_state, use(P, 0), 6, x, 2, y, J), AD_OK);
        for (int i = 0; i < 2; i++)  /* the state block: 2 M^T M */
            for (int j = 0; j < 2; j++) {
                double m = 2 * (J[i] * J[j] + J[6 + i] * J[6 + j]);
                if (i == j)
                    assert_true(m > 0.1);
                assert_near(H[i * 6 + j], m, 1e-13, 1e-15);
            }
        prob_free(P);
    }
}

/* A step calling ad_release (which would free the tapes in use): AD_EBUSY
 * in every evaluation. */
static long release_calls, release_ok;

static void releasing_step(size_t k, const ad_real *s, ad_real *next, size_t n,
                           const ad_real *params, size_t np, void *ctx)
{
    release_calls++;
    if (ad_release() != AD_EBUSY)
        release_ok++;
    lv_step(k, s, next, n, params, np, ctx);
}

static void test_release_in_step(void **state)
{
    (void)state;
    prob *P = lv_new(13, 3, 4, ACT_BOTH);
    double x[6], g[6], want[6], v[6] = {1, 0, 0, 0, 0, 1}, hv[6], fx, y[2], w[2] = {1, 1};
    ad_linear *L;
    base_x(P, x);
    gradient_ok(objective, P, 6, x, want);
    P->step = releasing_step;
    gradient_ok(objective, P, 6, x, g);
    assert_bits(W_REPEAT, g, want, 6);
    assert_status(ad_hvp(objective, P, 6, x, v, &fx, g, hv), AD_OK);
    assert_status(ad_linearize(final_state, P, 6, x, 2, y, &L), AD_OK);
    assert_status(ad_linear_vjp(L, w, g), AD_OK);
    ad_linear_free(L);
    ad_real s0[2] = {ad_const(1.0), ad_const(0.7)}, p[4], sN[2];
    for (int i = 0; i < 4; i++)
        p[i] = ad_const(P->p[i]);
    assert_status(ad_checkpointed_loop(releasing_step, P, 5, 2, 2, s0, 4, p, sN), AD_OK);
    assert_true(release_calls > 100);
    assert_int_equal(release_ok, 0);
    prob_free(P);
}

/* 20000 steps of y' = p y (Euler), dualrev's snapshots: the closed form,
 * and t(l, S) + l + 1 evaluations. */
static void scalar_step(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *params,
                        size_t np, void *ctx)
{
    long *evals = ctx;
    (void)k, (void)n, (void)np;
    ++*evals;
    next[0] = ad_add(s[0], ad_mul(1e-4, ad_mul(params[0], s[0])));
}

static ad_real scalar_objective(const ad_real *x, size_t nx, void *ctx)
{
    ad_real y[1];
    (void)nx;
    if (ad_checkpointed_loop(scalar_step, ctx, 20000, 0, 1, x, 1, x + 1, y) != AD_OK)
        return ad_const(NAN);
    return y[0];
}

static void test_long_loop(void **state)
{
    (void)state;
    long evals = 0;
    double x[2] = {0.75, -0.6}, fx, g[2];
    ad_tape_stats st;
    gradient_ok(scalar_objective, &evals, 2, x, g);
    fx = gradient_ok(scalar_objective, &evals, 2, x, g);
    double q = 1.0 + 1e-4 * x[1], qN = pow(q, 20000);
    assert_near(fx, x[0] * qN, 1e-11, 0.0);
    assert_near(g[0], qN, 1e-11, 0.0);
    assert_near(g[1], x[0] * 20000 * 1e-4 * pow(q, 19999), 1e-11, 0.0);
    uint64_t S = snaps_used(20000, 0), r = 0;
    assert_int_equal(S, 199);
    while (binom(S + r, S) < 20000)
        r++;
    assert_int_equal(evals, 2 * (long)(r * 20000 - binom(S + r, S + 1) + 20000 + 1));
    assert_status(ad_tape_stats_get(&st), AD_OK);
    assert_int_equal(st.snapshot_bytes, 8 * 199);
    assert_true(st.records < 20);
}

/* The reverse sweep overflows (finite values, finite partials): under
 * checks, AD_ENONFINITE from the sweeps that are checked, as written out. */
static void overflow_step(size_t k, const ad_real *s, ad_real *next, size_t n,
                          const ad_real *params, size_t np, void *ctx)
{
    lv_step(k, s, next, n, params, np, ctx);
    next[0] = ad_add(next[0], ad_mul(1e-3, ad_sin(ad_mul(s[0], 1e200))));
}

static void test_overflow_in_sweep(void **state)
{
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    prob *P = lv_new(7, 2, 4, ACT_BOTH);
    double x[6], fx, g[6], v[6] = {1, 1, 0, 0, 0, 0}, w[2] = {1, 1}, y[2], jv[2];
    ad_linear *L;
    P->step = overflow_step;
    base_x(P, x);
    for (int l = 0; l < 2; l++) {
        use(P, l);
        assert_status(ad_gradient(objective, P, 6, x, &fx, g), AD_ENONFINITE);
        assert_all_nan(fx, g, 6);
        assert_status(ad_vjp(final_state, P, 6, x, 2, w, y, g), AD_ENONFINITE);
        assert_all_nan_vec(g, 6);
        assert_status(ad_jvp(final_state, P, 6, x, v, 2, y, jv), AD_ENONFINITE);
        assert_all_nan_vec(jv, 2);
        assert_status(ad_linearize(final_state, P, 6, x, 2, y, &L), AD_OK);
        assert_status(ad_linear_vjp(L, w, g), AD_ENONFINITE);
        assert_all_nan_vec(g, 6);
        assert_status(ad_linear_jvp(L, v, jv), AD_ENONFINITE);
        assert_all_nan_vec(jv, 2);
        ad_linear_free(L);
    }
    /* The sweeps of ad_jacobian, ad_hvp and ad_hessian are not checked,
     * but the steps' own recordings and sweeps in a replay are: what they
     * meet is returned (docs/api.md, "Checkpointed loops", Errors). */
    {
        double J[12], hv[6], H[36];
        P->step = overflow_step;
        assert_status(ad_jacobian(final_state, use(P, 1), 6, x, 2, y, J), AD_ENONFINITE);
        assert_all_nan_vec(J, 12);
        assert_status(ad_hvp(objective, use(P, 1), 6, x, v, &fx, g, hv), AD_ENONFINITE);
        assert_all_nan_vec(hv, 6);
        assert_status(ad_hessian(objective, use(P, 1), 6, x, &fx, g, H), AD_ENONFINITE);
        assert_all_nan_vec(H, 36);
    }
    /* NaN or Inf arguments are no fault, as written out */
    for (int bad = 0; bad < 2; bad++) {
        ad_status st[2];
        double gg[2][6], f2[2];
        P->step = lv_step;
        base_x(P, x);
        x[bad ? 3 : 1] = bad ? INFINITY : NAN;
        for (int l = 0; l < 2; l++)
            st[l] = ad_gradient(objective, use(P, l), 6, x, &f2[l], gg[l]);
        assert_status(st[1], st[0]);
        assert_int_equal(isnan(f2[1]), isnan(f2[0]));
        for (int i = 0; i < 6; i++)
            assert_int_equal(isnan(gg[1][i]), isnan(gg[0][i]));
    }
    prob_free(P);
    ad_set_checks(old);
}

/* Each step's cotangents finite, their sum over the steps (the params')
 * not: under checks, AD_ENONFINITE as written out; without, the same
 * infinity. */
static void big_step(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *params,
                     size_t np, void *ctx)
{
    (void)k, (void)n, (void)np, (void)ctx;
    next[0] = ad_add(s[0], ad_mul(1e8, params[0]));
}

static ad_real big_objective(const ad_real *x, size_t nx, void *ctx)
{
    int *loop = ctx;
    ad_real y[1];
    (void)nx;
    if (*loop)
        status_unused(ad_checkpointed_loop(big_step, NULL, 2, 1, 1, x, 1, x + 1, y));
    else
        plain_loop(big_step, NULL, 2, 1, x, 1, x + 1, y);
    return ad_mul(1e300, ad_sub(y[0], 2e8 + 1.0));
}

static void test_overflow_across_steps(void **state)
{
    (void)state;
    double x[2] = {1.0, 1.0}, fx[2], g[2][2];
    int loop;
    for (loop = 0; loop < 2; loop++)
        assert_status(ad_gradient(big_objective, &loop, 2, x, &fx[loop], g[loop]), AD_OK);
    assert_same(g[1][0], g[0][0]);
    assert_same(g[1][1], g[0][1]);
    assert_true(isinf(g[1][1]));
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    for (loop = 0; loop < 2; loop++) {
        ad_fault f;
        assert_status(ad_gradient(big_objective, &loop, 2, x, &fx[loop], g[loop]), AD_ENONFINITE);
        assert_all_nan(fx[loop], g[loop], 2);
        assert_status(ad_last_fault(&f), AD_OK);
        assert_int_equal(f.phase, AD_PHASE_REVERSE);
        if (getenv("DUALREV_TEST_VERBOSE"))
            fprintf(stderr, "# overflow across steps, loop %d: fault op %s\n", loop, f.op);
    }
    ad_set_checks(old);
}

/* ======================================================================
 * 12. Threads
 * ====================================================================== */

static double thread_want[2][103];

static void *thread_body(void *arg)
{
    worker *w = arg;
    worker_start(w);
    for (int round = 0; round < 4; round++) {
        prob *P = round & 1 ? heat_new(100, 13, 0, 2, ACT_BOTH) : lv_new(13, 3, 4, ACT_BOTH);
        size_t nx = n_in(P);
        double x[102], g[102], fx;
        base_x(P, x);
        if (ad_gradient(objective, P, nx, x, &fx, g) != AD_OK || P->st != AD_OK)
            worker_fail(w, "round %d: gradient failed", round);
        else {
            if (!same_double(fx, thread_want[round & 1][0]))
                worker_report(w, "fx", round, fx, thread_want[round & 1][0]);
            for (size_t i = 0; i < nx; i++)
                if (!same_double(g[i], thread_want[round & 1][1 + i]))
                    worker_report(w, "g", round, g[i], thread_want[round & 1][1 + i]);
        }
        prob_free(P);
    }
    return NULL;
}

typedef struct handle_job {
    ad_linear *L;
    double w[2], out[6];
    ad_status st;
    prob *P;
} handle_job;

static void *apply_handle(void *arg)
{
    handle_job *j = arg;
    j->st = ad_linear_vjp(j->L, j->w, j->out);
    return NULL;
}

static void *make_handle(void *arg)
{
    handle_job *j = arg;
    double x[6], y[2];
    base_x(j->P, x);
    j->st = ad_linearize(final_state, j->P, 6, x, 2, y, &j->L);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        prob *P = k ? heat_new(100, 13, 0, 2, ACT_BOTH) : lv_new(13, 3, 4, ACT_BOTH);
        double x[102];
        base_x(P, x);
        thread_want[k][0] = gradient_ok(objective, P, n_in(P), x, thread_want[k] + 1);
        prob_free(P);
    }
    run_workers(thread_body);
    /* a handle made here, applied on another thread */
    prob *P = lv_new(13, 3, 4, ACT_BOTH);
    double x[6], y[2], want[6];
    handle_job j = {NULL, {0.5, 2.0}, {0}, AD_EINVAL, NULL};
    base_x(P, x);
    assert_status(ad_linearize(final_state, P, 6, x, 2, y, &j.L), AD_OK);
    assert_status(ad_vjp(final_state, P, 6, x, 2, j.w, y, want), AD_OK);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, apply_handle, &j), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_status(j.st, AD_OK);
    assert_bits(W_REPEAT, j.out, want, 6);
    /* after ad_release, which frees the tapes the replays take */
    assert_status(ad_release(), AD_OK);
    apply_handle(&j);
    assert_status(j.st, AD_OK);
    assert_bits(W_REPEAT, j.out, want, 6);
    ad_linear_free(j.L);
    /* made on a thread that has exited */
    j.L = NULL;
    j.P = P;
    assert_int_equal(pthread_create(&t, NULL, make_handle, &j), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_status(j.st, AD_OK);
    apply_handle(&j);
    assert_status(j.st, AD_OK);
    assert_bits(W_REPEAT, j.out, want, 6);
    ad_linear_free(j.L);
    prob_free(P);
}

/* ======================================================================
 * The report
 * ====================================================================== */

static int print_tally(void **state)
{
    (void)state;
    if (!getenv("DUALREV_TEST_VERBOSE"))
        return 0;
    for (int w = 0; w < W_KINDS; w++)
        if (tally[w].vectors)
            fprintf(stderr, "# %-16s %6ld compared, %6ld bitwise, worst %.3g of the largest entry\n",
                    what_name[w], tally[w].vectors, tally[w].bitwise, tally[w].worst);
    return 0;
}

/* After every test, even a failed one: no limit, no checks, no failure
 * injection. */
static int reset(void **state)
{
    (void)state;
    ad_set_tape_limit(0);
    ad_set_checks(0);
    ad_test_fail_alloc_after(-1);
    ad_test_sparse_force_hash(0);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_lv_drivers, reset),
        cmocka_unit_test_teardown(test_heat_drivers, reset),
        cmocka_unit_test_teardown(test_gradient_fd, reset),
        cmocka_unit_test_teardown(test_hessian_fd, reset),
        cmocka_unit_test_teardown(test_sparse_hessian_fd, reset),
        cmocka_unit_test_teardown(test_one_input, reset),
        cmocka_unit_test_teardown(test_revolve_counts, reset),
        cmocka_unit_test_teardown(test_repeated_sweeps, reset),
        cmocka_unit_test_teardown(test_nested, reset),
        cmocka_unit_test_teardown(test_nesting_depth, reset),
        cmocka_unit_test_teardown(test_alloc_failure, reset),
        cmocka_unit_test_teardown(test_foreign, reset),
        cmocka_unit_test_teardown(test_foreign_arguments, reset),
        cmocka_unit_test_teardown(test_foreign_constant_arguments, reset),
        cmocka_unit_test_teardown(test_nonfinite, reset),
        cmocka_unit_test_teardown(test_tape_limit, reset),
        cmocka_unit_test_teardown(test_sparse, reset),
        cmocka_unit_test_teardown(test_sparse_hessian, reset),
        cmocka_unit_test_teardown(test_sparse_hessian_counts, reset),
        cmocka_unit_test_teardown(test_sparse_hessian_closed_form, reset),
        cmocka_unit_test_teardown(test_outside_recording, reset),
        cmocka_unit_test_teardown(test_constants_and_aliasing, reset),
        cmocka_unit_test_teardown(test_invalid_arguments, reset),
        cmocka_unit_test_teardown(test_stats, reset),
        cmocka_unit_test_teardown(test_odd_steps, reset),
        cmocka_unit_test_teardown(test_two_loops, reset),
        cmocka_unit_test_teardown(test_inside_recording, reset),
        cmocka_unit_test_teardown(test_retry_pass, reset),
        cmocka_unit_test_teardown(test_zero_cotangent, reset),
        cmocka_unit_test_teardown(test_release_in_step, reset),
        cmocka_unit_test_teardown(test_long_loop, reset),
        cmocka_unit_test_teardown(test_overflow_in_sweep, reset),
        cmocka_unit_test_teardown(test_overflow_across_steps, reset),
        cmocka_unit_test_teardown(test_threads, reset),
    };
    return cmocka_run_group_tests_name("checkpointed loops", tests, NULL, print_tally);
}
