/* lv_fit_lbfgs: fit the four parameters of a Lotka-Volterra model to noisy
 * observations with L-BFGS, through a time loop too long to record.
 *
 *   prey      x' = a x - b x y
 *   predator  y' = c x y - d y
 *
 * integrated with RK4 over 100 000 steps; x and y are observed, with noise,
 * every 1 000 steps.  Recording that loop as written takes 54 records
 * (24 bytes each) per step: 130 MB of tape for one gradient.  The loop is
 * handed to ad_checkpointed_loop instead, which keeps the states at a few
 * hundred snapshots and records one step at a time while it sweeps: the
 * loop then needs some kilobytes, for less than twice the time.
 *
 * The program first shows this under a tape budget (100 MB by default,
 * ad_set_tape_limit): the gradient of the loop as written fails with
 * AD_ERANGE, the checkpointed one succeeds.  Then it fits the parameters
 * with liblbfgs (dualrev/lbfgs.h) under that same budget.
 *
 * Usage: lv_fit_lbfgs [--steps N] [--tape-mb M]
 *   --steps N    RK4 steps over the same time span (default 100000)
 *   --tape-mb M  the tape budget in MB (default 100)
 * The test suite runs it with 10 000 steps and a 10 MB budget. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dualrev.h>
#include <dualrev/lbfgs.h>

_Static_assert(_Generic((lbfgsfloatval_t)0, double: 1, default: 0),
               "liblbfgs must be built with LBFGS_FLOAT == 64");

enum { NOBS = 100 };                /* observation times, evenly spread */
#define SPAN 10.0                   /* time span: two predator-prey cycles */
#define NOISE 0.5                   /* standard deviation of the observation noise */
static const double p_true[4] = {1.0, 0.1, 0.075, 1.5};  /* a, b, c, d */
static const double p_guess[4] = {0.8, 0.12, 0.06, 1.8}; /* where the fit starts */
static const double prey0 = 10.0, predators0 = 5.0;       /* known initial populations */

typedef struct lv_problem {
    size_t steps, obs_every;
    double dt;
    double obs[2 * NOBS];  /* (x, y) after every obs_every steps */
} lv_problem;

/* ---- the model, written once for ad_real ---- */

static void lv_rhs(const ad_real *p, ad_real x, ad_real y, ad_real *dx, ad_real *dy)
{
    ad_real xy = ad_mul(x, y);
    *dx = ad_sub(ad_mul(p[0], x), ad_mul(p[1], xy));
    *dy = ad_sub(ad_mul(p[2], xy), ad_mul(p[3], y));
}

/* Step k of the loop (an ad_step_fn): one RK4 step of (x, y).  The misfit
 * rides along as a third state, s[2]: a checkpointed loop returns only its
 * final state, so whatever the objective needs from the way there must be
 * carried in the state. */
static void lv_step(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *p,
                    size_t np, void *ctx)
{
    const lv_problem *lv = ctx;
    double h = lv->dt;
    (void)n, (void)np;
    ad_real k1x, k1y, k2x, k2y, k3x, k3y, k4x, k4y;
    lv_rhs(p, s[0], s[1], &k1x, &k1y);
    lv_rhs(p, ad_add(s[0], ad_mul(h / 2, k1x)), ad_add(s[1], ad_mul(h / 2, k1y)), &k2x, &k2y);
    lv_rhs(p, ad_add(s[0], ad_mul(h / 2, k2x)), ad_add(s[1], ad_mul(h / 2, k2y)), &k3x, &k3y);
    lv_rhs(p, ad_add(s[0], ad_mul(h, k3x)), ad_add(s[1], ad_mul(h, k3y)), &k4x, &k4y);
    next[0] = ad_add(s[0], ad_mul(h / 6, ad_add(ad_add(k1x, ad_mul(2.0, k2x)),
                                                ad_add(ad_mul(2.0, k3x), k4x))));
    next[1] = ad_add(s[1], ad_mul(h / 6, ad_add(ad_add(k1y, ad_mul(2.0, k2y)),
                                                ad_add(ad_mul(2.0, k3y), k4y))));
    next[2] = s[2];
    if ((k + 1) % lv->obs_every == 0) {
        const double *o = &lv->obs[2 * ((k + 1) / lv->obs_every - 1)];
        ad_real ex = ad_sub(next[0], o[0]), ey = ad_sub(next[1], o[1]);
        next[2] = ad_add(s[2], ad_add(ad_mul(ex, ex), ad_mul(ey, ey)));
    }
}

/* ---- two objectives of theta = log(a, b, c, d) ----
 * Optimising the logarithms keeps the rates positive whatever step the
 * line search tries, and puts a (about 1) and c (about 0.08) on one scale. */

static void rates(const ad_real *theta, ad_real *p)
{
    for (int i = 0; i < 4; i++)
        p[i] = ad_exp(theta[i]);
}

/* The sum of squared residuals, the loop recorded as written. */
static ad_real misfit_plain(const ad_real *theta, size_t n, void *ctx)
{
    const lv_problem *lv = ctx;
    ad_real p[4], s[3] = {ad_const(prey0), ad_const(predators0), ad_const(0.0)}, next[3];
    (void)n;
    rates(theta, p);
    for (size_t k = 0; k < lv->steps; k++) {
        lv_step(k, s, next, 3, p, 4, ctx);
        memcpy(s, next, sizeof s);
    }
    return s[2];
}

/* The same, the loop checkpointed: snapshots = 0 lets dualrev choose
 * (about sqrt(2 steps)).  A failure ends the recording, and ad_gradient
 * returns it, so the status need not be checked here. */
static ad_real misfit_checkpointed(const ad_real *theta, size_t n, void *ctx)
{
    const lv_problem *lv = ctx;
    ad_real p[4], s0[3] = {ad_const(prey0), ad_const(predators0), ad_const(0.0)}, sN[3];
    (void)n;
    rates(theta, p);
    if (ad_checkpointed_loop(lv_step, ctx, lv->steps, 0, 3, s0, 4, p, sN) != AD_OK)
        return ad_const(NAN);  /* the recording keeps the error; ad_gradient returns it */
    return sN[2];
}

/* ---- synthetic observations ---- */

/* SplitMix64 and Box-Muller: the same noise on every platform. */
static double uniform(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return ((double)((z ^ (z >> 31)) >> 11) + 0.5) * 0x1.0p-53;
}

static double gaussian(uint64_t *state)
{
    double u = uniform(state), v = uniform(state);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* The model with the true rates, run on constants (outside a recording
 * the ad_* operations just compute), observed with noise. */
static void observe(lv_problem *lv)
{
    uint64_t seed = UINT64_C(20240611);
    ad_real p[4], s[3] = {ad_const(prey0), ad_const(predators0), ad_const(0.0)}, next[3];
    for (int i = 0; i < 4; i++)
        p[i] = ad_const(p_true[i]);
    memset(lv->obs, 0, sizeof lv->obs);
    for (size_t k = 0; k < lv->steps; k++) {
        lv_step(k, s, next, 3, p, 4, lv);
        memcpy(s, next, sizeof s);
        if ((k + 1) % lv->obs_every == 0) {
            double *o = &lv->obs[2 * ((k + 1) / lv->obs_every - 1)];
            o[0] = ad_value(s[0]) + NOISE * gaussian(&seed);
            o[1] = ad_value(s[1]) + NOISE * gaussian(&seed);
        }
    }
}

/* ---- the tape budget ---- */

static double mb(size_t bytes)
{
    return (double)bytes / 1e6;
}

/* Under the budget: the loop as written cannot be recorded, the
 * checkpointed one can.  Returns the checkpointed gradient's status. */
static ad_status show_budget(lv_problem *lv, double tape_mb)
{
    double theta[4], f, g[4];
    for (int i = 0; i < 4; i++)
        theta[i] = log(p_guess[i]);

    ad_status plain = ad_gradient(misfit_plain, lv, 4, theta, &f, g);
    printf("loop as written : %s%s\n", plain == AD_ERANGE ? "AD_ERANGE: " : "",
           ad_strerror(plain));
    /* The failed recording filled the budget, and the thread keeps tape
     * memory for its next call: give it back, so that the figures below
     * are the checkpointed gradient's own. */
    if (ad_release() != AD_OK)
        return 1;

    ad_status ckpt = ad_gradient(misfit_checkpointed, lv, 4, theta, &f, g);
    printf("checkpointed    : %s\n", ad_strerror(ckpt));
    ad_tape_stats st;
    if (ckpt != AD_OK || ad_tape_stats_get(&st) != AD_OK)
        return 1;
    /* step_bytes is the largest tape one step took (24 bytes a record; an
     * observed step's has a few more): the loop as written records every
     * step on one tape. */
    printf("  loop as written needs : up to %zu steps x %zu bytes = %.1f MB of tape "
           "(budget %.0f MB)\n",
           lv->steps, st.step_bytes, mb(lv->steps * st.step_bytes), tape_mb);
    printf("  checkpointed holds    : %zu records on its tape (%.2f MB reserved, one chunk)\n"
           "                          + snapshots %.4f MB + one step's tape %.4f MB\n",
           st.records, mb(st.tape_bytes), mb(st.snapshot_bytes), mb(st.step_bytes));
    if (plain == AD_OK)
        printf("  (at %zu steps the plain tape fits the budget: try more steps or a smaller "
               "--tape-mb)\n",
               lv->steps);
    return ckpt;
}

/* ---- the fit ---- */

static int iterations;

/* The bridge's progress callback, which stops the run after a failed
 * gradient, with a line per iteration. */
static int progress(void *instance, const lbfgsfloatval_t *x, const lbfgsfloatval_t *g,
                    const lbfgsfloatval_t fx, const lbfgsfloatval_t xnorm,
                    const lbfgsfloatval_t gnorm, const lbfgsfloatval_t step, int n, int k,
                    int ls)
{
    iterations = k;
    printf("%4d  %12.4f  %10.3e   %.4f %.4f %.4f %.4f\n", k, fx, gnorm, exp(x[0]), exp(x[1]),
           exp(x[2]), exp(x[3]));
    return ad_lbfgs_progress(instance, x, g, fx, xnorm, gnorm, step, n, k, ls);
}

static double seconds(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Fits log(a, b, c, d) from the guess; the rates into p.  Returns 0 on
 * success. */
static int fit(lv_problem *lv, double *p)
{
    lbfgsfloatval_t *theta = lbfgs_malloc(4);
    if (!theta)
        return -1;
    for (int i = 0; i < 4; i++)
        theta[i] = log(p_guess[i]);
    lbfgs_parameter_t param;
    lbfgs_parameter_init(&param);
    param.max_iterations = 200;
    /* Stop once an iteration improves the misfit by less than 1e-10
     * (relative): the noise, not |g|, sets how far it can go down. */
    param.past = 1;
    param.delta = 1e-10;
    ad_lbfgs bridge = ad_lbfgs_of(misfit_checkpointed, lv);

    printf("\n%4s  %12s  %10s   %-6s %-6s %-6s %-6s\n", "iter", "misfit", "|g|", "a", "b", "c",
           "d");
    double t0 = seconds();
    lbfgsfloatval_t fx;
    int ret = lbfgs(4, theta, &fx, ad_lbfgs_evaluate, progress, &bridge, &param);
    double t = seconds() - t0;

    printf("\nlbfgs returned %d (%s); %d iterations, %lu gradients, %.2f s (%.1f ms a "
           "gradient)\n",
           ret, ret == LBFGS_SUCCESS ? "converged" : ret == LBFGS_STOP ? "misfit stopped decreasing"
                                                                  : "see lbfgs.h",
           iterations, bridge.evaluations, t, 1e3 * t / (double)bridge.evaluations);
    for (int i = 0; i < 4; i++)
        p[i] = exp(theta[i]);
    lbfgs_free(theta);
    if (bridge.status != AD_OK) {
        fprintf(stderr, "a gradient failed: %s\n", ad_strerror(bridge.status));
        return -1;
    }
    return ret >= 0 ? 0 : -1;  /* LBFGS_SUCCESS, LBFGS_STOP; errors are negative */
}

/* ---- main ---- */

static int parse_args(int argc, char **argv, size_t *steps, double *tape_mb)
{
    *steps = 100000;
    *tape_mb = 100.0;
    for (int i = 1; i + 1 < argc; i += 2) {
        char *end;
        errno = 0;
        if (strcmp(argv[i], "--steps") == 0)
            *steps = (size_t)strtoull(argv[i + 1], &end, 10);
        else if (strcmp(argv[i], "--tape-mb") == 0)
            *tape_mb = strtod(argv[i + 1], &end);
        else
            return -1;
        if (errno || *end || end == argv[i + 1])
            return -1;
    }
    return argc % 2 == 1 && *steps >= NOBS && *steps % NOBS == 0 && *tape_mb > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    size_t steps;
    double tape_mb;
    if (parse_args(argc, argv, &steps, &tape_mb) != 0) {
        fprintf(stderr, "usage: %s [--steps N (a multiple of %d)] [--tape-mb M]\n", argv[0],
                NOBS);
        return 2;
    }
    static lv_problem lv;
    lv.steps = steps;
    lv.obs_every = steps / NOBS;
    lv.dt = SPAN / (double)steps;
    observe(&lv);
    printf("Lotka-Volterra, RK4: %zu steps over t = 0..%g, %d noisy observations of x and y\n",
           steps, SPAN, NOBS);

    /* Every recording from here on, the fit's included, gets at most this
     * many records: 24 bytes each. */
    ad_set_tape_limit((size_t)(tape_mb * 1e6 / 24));
    printf("tape budget %.0f MB = %zu records\n\n", tape_mb, (size_t)(tape_mb * 1e6 / 24));
    if (show_budget(&lv, tape_mb) != AD_OK)
        return EXIT_FAILURE;

    double p[4];
    if (fit(&lv, p) != 0)
        return EXIT_FAILURE;

    /* The noise limits how close the fit can come: a few percent here. */
    static const char *const name[4] = {"a", "b", "c", "d"};
    int close = 1;
    printf("\n%-4s %10s %10s %10s %10s\n", "", "start", "fitted", "true", "error");
    for (int i = 0; i < 4; i++) {
        double err = (p[i] - p_true[i]) / p_true[i];
        printf("%-4s %10.5f %10.5f %10.5f %9.2f%%\n", name[i], p_guess[i], p[i], p_true[i],
               100 * err);
        close &= fabs(err) < 0.05;
    }
    printf("%s\n", close ? "result: fitted within 5% of the true rates"
                         : "result: FAILED, a rate is more than 5% off");
    return close ? EXIT_SUCCESS : EXIT_FAILURE;
}
