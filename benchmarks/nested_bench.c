/* nested-bench: a gradient of a nested gradient against the Hessian-vector
 * product it equals.  For each h, the outer gradient of g(x) = sum_i w_i
 * [grad h(x)]_i, with the inner gradient taken by ad_gradient_r, is H w;
 * ad_hvp(h, w) computes the same by forward over reverse.  The target:
 * the nested form at most 1.5 times ad_hvp's time.  Each h is written as
 * a user writes it; the two results are checked against each other. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dualrev.h"
#include "timer.h"

#define NMAX 1000

static double lcg(unsigned long *s)
{
    *s = *s * 6364136223846793005UL + 1442695040888963407UL;
    return (double)(*s >> 11) / 9007199254740992.0;
}

/* ---- the functions h ---- */

/* kmeans-like (GradBench's kmeans): the squared distance of each point to
 * its nearest centroid, summed; the centroids are x. */
#define KM_K 10
#define KM_D 8
#define KM_P 1000
static double km_points[KM_P][KM_D];

static ad_real kmeans(const ad_real *c, size_t n, void *ctx)
{
    ad_real total = AD_CONST(ad_real, 0.0);
    (void)n;
    (void)ctx;
    for (int i = 0; i < KM_P; i++) {
        ad_real best = AD_CONST(ad_real, INFINITY);
        for (int k = 0; k < KM_K; k++) {
            ad_real dist = AD_CONST(ad_real, 0.0);
            for (int j = 0; j < KM_D; j++) {
                ad_real t = ad_sub(km_points[i][j], c[k * KM_D + j]);
                dist = ad_add(dist, ad_mul(t, t));
            }
            best = ad_fmin(best, dist);
        }
        total = ad_add(total, best);
    }
    return total;
}

/* Extended Rosenbrock. */
static ad_real rosenbrock(const ad_real *x, size_t n, void *ctx)
{
    ad_real acc = AD_CONST(ad_real, 0.0);
    (void)ctx;
    for (size_t i = 0; i + 1 < n; i++) {
        ad_real t = ad_sub(x[i + 1], ad_mul(x[i], x[i]));
        ad_real u = ad_sub(1.0, x[i]);
        acc = ad_add(acc, ad_add(ad_mul(100.0, ad_mul(t, t)), ad_mul(u, u)));
    }
    return acc;
}

/* Transcendental: every term has curved partials. */
static ad_real waves(const ad_real *x, size_t n, void *ctx)
{
    ad_real acc = AD_CONST(ad_real, 0.0);
    (void)ctx;
    for (size_t i = 0; i + 1 < n; i++) {
        ad_real s = ad_mul(ad_sin(x[i]), ad_exp(ad_mul(0.5, x[i + 1])));
        acc = ad_add(acc, ad_div(s, ad_add(1.0, ad_mul(x[i], x[i]))));
        acc = ad_add(acc, ad_log(ad_cosh(x[i + 1])));
    }
    return acc;
}

/* A mixture's log-likelihood (GMM-like): for each of 100 points, the
 * log-sum-exp over 10 components of -(p - x_k)^2 / 2, x the means. */
#define MX_K 10
#define MX_P 100
static double mx_points[MX_P];

static ad_real mixture(const ad_real *x, size_t n, void *ctx)
{
    ad_real acc = AD_CONST(ad_real, 0.0), e[MX_K];
    (void)n;
    (void)ctx;
    for (int i = 0; i < MX_P; i++) {
        for (int k = 0; k < MX_K; k++) {
            ad_real d = ad_sub(mx_points[i], x[k]);
            e[k] = ad_mul(-0.5, ad_mul(d, d));
        }
        acc = ad_add(acc, ad_logsumexp(MX_K, e));
    }
    return acc;
}

typedef struct problem {
    const char *name;
    ad_objective h;
    size_t n;
} problem;

/* ---- the jobs ---- */

typedef struct job {
    const problem *p;
    const double *x, *w;
    double fx, g[NMAX], hv[NMAX];
} job;

/* g(x) = sum_i w_i [grad h(x)]_i, the inner gradient nested. */
static ad_real weighted_gradient(const ad_real *x, size_t n, void *ctx)
{
    const job *j = ctx;
    static _Thread_local ad_real grad[NMAX];
    ad_real fx;
    if (ad_gradient_r(j->p->h, NULL, n, x, &fx, grad) != AD_OK)
        return AD_CONST(ad_real, NAN);
    return ad_dot_rd(n, grad, j->w);
}

/* The other design, for comparison: the inner gradient as one block (an
 * external function) whose rules are drivers: its primal ad_gradient, its
 * reverse rule x_bar = f_bar grad + H g_bar from ad_hvp.  Its rules call h
 * when the enclosing recording is swept, after g returned, so h's ctx
 * must live until then; and it has no second-order rule (that would need
 * h's third derivatives). */
static void block_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    const problem *p = ctx;
    (void)m;
    if (ad_gradient(p->h, NULL, n, x, &y[0], y + 1) != AD_OK)
        exit(1);
}

static void block_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                      const double *ybar, double *xbar)
{
    const problem *p = ctx;
    static _Thread_local double fx, g[NMAX], hv[NMAX];
    (void)m;
    (void)y;
    if (ad_hvp(p->h, NULL, n, x, ybar + 1, &fx, g, hv) != AD_OK)
        exit(1);
    for (size_t i = 0; i < n; i++)
        xbar[i] += ybar[0] * g[i] + hv[i];
}

static ad_real weighted_gradient_block(const ad_real *x, size_t n, void *ctx)
{
    const job *j = ctx;
    static _Thread_local ad_real y[NMAX + 1];
    ad_rule rule = {.primal = block_primal, .vjp = block_vjp};
    if (ad_external(&rule, (void *)j->p, n, x, n + 1, y) != AD_OK)
        return AD_CONST(ad_real, NAN);
    return ad_dot_rd(n, y + 1, j->w);
}

static void run_block(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t it = 0; it < iters; it++)
        if (ad_gradient(weighted_gradient_block, j, j->p->n, j->x, &j->fx, j->hv) != AD_OK)
            exit(1);
}

static void run_nested(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t it = 0; it < iters; it++)
        if (ad_gradient(weighted_gradient, j, j->p->n, j->x, &j->fx, j->hv) != AD_OK)
            exit(1);
}

static void run_hvp(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t it = 0; it < iters; it++)
        if (ad_hvp(j->p->h, NULL, j->p->n, j->x, j->w, &j->fx, j->g, j->hv) != AD_OK)
            exit(1);
}

static void run_gradient(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t it = 0; it < iters; it++)
        if (ad_gradient(j->p->h, NULL, j->p->n, j->x, &j->fx, j->g) != AD_OK)
            exit(1);
}

/* Records of the last top-level recording. */
static size_t records(void)
{
    ad_tape_stats st;
    return ad_tape_stats_get(&st) == AD_OK ? st.records : 0;
}

static int measure(const bench_plan *plan, const problem *p, const double *x, const double *w)
{
    job a = {.p = p, .x = x, .w = w}, b = a, c = a, d = a;
    bench_body body[4] = {run_nested, run_hvp, run_gradient, run_block};
    void *ctx[4] = {&a, &b, &c, &d};
    bench_time t[4];
    bench_measure_side_by_side(plan, 4, body, ctx, t);
    run_gradient(&c, 1);
    size_t inner = records();
    run_nested(&a, 1);
    size_t outer = records();
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < p->n; i++)
        scale = fmax(scale, fabs(b.hv[i]));
    for (size_t i = 0; i < p->n; i++)
        worst = fmax(worst, fmax(fabs(a.hv[i] - b.hv[i]), fabs(d.hv[i] - b.hv[i])) / scale);
    char s0[16], s1[16], s2[16], s3[16];
    printf("%-10s n = %4zu: nested %9s, ad_hvp %9s, ad_gradient %9s; nested / ad_hvp %5.2f "
           "(target <= 1.5); block design / ad_hvp %5.2f (%s); ad_hvp / ad_gradient %5.2f; "
           "records: h %zu, enclosing %zu (%.2f per record of h); |difference| / max|Hw| "
           "%.1e\n",
           p->name, p->n, fmt_time(s0, t[0].median_ns), fmt_time(s1, t[1].median_ns),
           fmt_time(s2, t[2].median_ns), t[0].median_ns / t[1].median_ns,
           t[3].median_ns / t[1].median_ns, fmt_time(s3, t[3].median_ns),
           t[1].median_ns / t[2].median_ns, inner, outer, (double)outer / (double)inner, worst);
    return worst <= 1e-12 ? 0 : 1;
}

int main(int argc, char **argv)
{
    bench_plan plan = {11, 20e6};
    if (argc > 1)
        plan.reps = atoi(argv[1]);
    unsigned long seed = 7;
    for (int i = 0; i < KM_P; i++)
        for (int j = 0; j < KM_D; j++)
            km_points[i][j] = lcg(&seed);
    for (int i = 0; i < MX_P; i++)
        mx_points[i] = 4.0 * lcg(&seed) - 2.0;
    static const problem problems[] = {
        {"kmeans", kmeans, KM_K * KM_D},
        {"rosenbrock", rosenbrock, NMAX},
        {"waves", waves, NMAX},
        {"mixture", mixture, MX_K},
    };
    static double x[NMAX], w[NMAX];
    int bad = 0;
    printf("nested-bench: outer ad_gradient of sum_i w_i [grad h]_i (inner ad_gradient_r) "
           "against ad_hvp(h, w); median of %d\n",
           plan.reps);
    for (size_t q = 0; q < sizeof problems / sizeof *problems; q++) {
        for (size_t i = 0; i < problems[q].n; i++) {
            x[i] = 2.0 * lcg(&seed) - 1.0;
            w[i] = 2.0 * lcg(&seed) - 1.0;
        }
        bad |= measure(&plan, &problems[q], x, w);
    }
    return bad;
}
