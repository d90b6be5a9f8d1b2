/* loop-bench: checkpointed time loops (ad_checkpointed_loop) against the
 * loop recorded as written, on two models a user would write:
 *
 *   - Lotka-Volterra, RK4, 2 states and 4 parameters (a, b, c, d), at 10^4,
 *     10^5 and 10^6 steps of dt = 10^-3; the misfit against observations
 *     taken every 100 steps is summed in a third state as the loop runs;
 *   - a 1-D heat equation, explicit Euler, 1000 states, 10^4 steps, with a
 *     diffusion coefficient and a source amplitude as parameters; the
 *     misfit is taken at the end.
 *
 * Both are written once, as a step function (ad_step_fn) of the generic
 * ad_* operations.  "plain" calls it in a for loop inside the objective,
 * so ad_gradient records every step; "checkpointed" hands it to
 * ad_checkpointed_loop with a given number of snapshots (0: the library's
 * default, about sqrt(2 steps)).
 *
 * Each configuration runs in a child process of its own (fork), so that
 * its peak resident memory (VmHWM, and ru_maxrss from wait4) is its own;
 * an idle child gives the baseline every child starts from.  In the child:
 * one gradient to warm up, then --reps gradients timed one by one (the
 * median is reported), step evaluations counted in the step's ctx, and
 * ad_tape_stats after the last one.  The parent keeps nothing large, as a
 * child starts with a copy of its memory.
 *
 * The plain LV loop at 10^6 steps is run only if 10x the tape and
 * cotangents of the 10^5 one fit under --mem-limit-gb (default 4);
 * otherwise its tape is estimated as 10x the 10^5 one's, and said so.
 *
 * Usage: loop-bench [--reps N] [--mem-limit-gb G] [--max-steps N]
 *                   [--gnuplot FILE]
 * --gnuplot FILE also times LV at 10^5 steps over a range of snapshot
 * counts and writes them to FILE for benchmarks/loop.gp.
 *
 * Exit status 1 if a gradient fails or a checkpointed gradient differs from
 * the plain one by more than 1e-10 relative. */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dualrev.h>

#include "isolate.h"
#include "timer.h"

#define MAX_PARAMS 4
#define MAX_REPS 51
#define RTOL_CHECK 1e-10 /* failure threshold for the checkpointed-vs-plain check */

/* ================= the models, as a user writes them ================= */

/* ---- Lotka-Volterra: x' = a x - b x y, y' = c x y - d y ---- */

enum { LV_OBS_EVERY = 100 };
static const double lv_true[MAX_PARAMS] = {1.0, 0.1, 0.075, 1.5};
static const double lv_start[MAX_PARAMS] = {1.1, 0.09, 0.08, 1.4}; /* where the gradient is taken */
static const double lv_x0 = 10.0, lv_y0 = 5.0, lv_dt = 1e-3;

typedef struct lv_model {
    double dt;
    const double *obs;   /* (x, y) after every LV_OBS_EVERY steps */
    unsigned long evals; /* calls of the step */
} lv_model;

static void lv_rhs(const ad_real *p, ad_real x, ad_real y, ad_real *dx, ad_real *dy)
{
    ad_real xy = ad_mul(x, y);
    *dx = ad_sub(ad_mul(p[0], x), ad_mul(p[1], xy));
    *dy = ad_sub(ad_mul(p[2], xy), ad_mul(p[3], y));
}

/* One RK4 step of (x, y); s[2] carries the misfit summed so far. */
static void lv_step(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *p,
                    size_t np, void *ctx)
{
    lv_model *m = ctx;
    double h = m->dt;
    (void)n, (void)np;
    m->evals++;
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
    if ((k + 1) % LV_OBS_EVERY == 0) {
        const double *o = m->obs + 2 * ((k + 1) / LV_OBS_EVERY - 1);
        ad_real ex = ad_sub(next[0], o[0]), ey = ad_sub(next[1], o[1]);
        next[2] = ad_add(s[2], ad_add(ad_mul(ex, ex), ad_mul(ey, ey)));
    }
}

/* ---- heat: u_t = D u_xx + A g(x) on (0, 1), u = 0 at both ends ---- */

enum { HEAT_N = 1000 };
static const double heat_true[2] = {1.0, 50.0};
static const double heat_start[2] = {0.8, 60.0};

typedef struct heat_model {
    double dt, dx;
    const double *shape; /* g at the grid points */
    const double *data;  /* u at the end, to fit */
    unsigned long evals;
} heat_model;

static void heat_step(size_t k, const ad_real *u, ad_real *next, size_t n, const ad_real *p,
                      size_t np, void *ctx)
{
    heat_model *m = ctx;
    (void)k, (void)np;
    m->evals++;
    ad_real diff = ad_mul(p[0], m->dt / (m->dx * m->dx));
    ad_real src = ad_mul(p[1], m->dt);
    for (size_t i = 0; i < n; i++) {
        ad_real left = i > 0 ? u[i - 1] : ad_const(0.0);
        ad_real right = i + 1 < n ? u[i + 1] : ad_const(0.0);
        ad_real lap = ad_add(ad_sub(left, ad_mul(2.0, u[i])), right);
        next[i] = ad_add(u[i], ad_add(ad_mul(diff, lap), ad_mul(src, m->shape[i])));
    }
}

/* ================= the objectives ================= */

typedef struct problem {
    int kind;             /* 0: LV, 1: heat */
    size_t steps, snaps;  /* snaps: for the checkpointed objective; 0 = default */
    size_t n, np;         /* states, params */
    ad_step_fn step;
    void *model;          /* lv_model or heat_model: the step's ctx */
    unsigned long *evals; /* its counter */
    double *x0;           /* n initial states */
    double *scratch;      /* for the data */
} problem;

/* The misfit from the final state: LV carries it in its third state. */
static ad_real misfit(const problem *pb, const ad_real *u)
{
    if (pb->kind == 0)
        return u[2];
    const heat_model *m = pb->model;
    ad_real loss = ad_const(0.0);
    for (size_t i = 0; i < pb->n; i++) {
        ad_real e = ad_sub(u[i], m->data[i]);
        loss = ad_add(loss, ad_mul(e, e));
    }
    return loss;
}

/* The loop written out from x0 with params p (recorded if a recording is
 * active): the final state, in an array of 2n the caller frees; NULL if
 * out of memory. */
static ad_real *run_steps(const problem *pb, const ad_real *p, size_t np)
{
    size_t n = pb->n;
    ad_real *base = malloc(2 * n * sizeof *base);
    if (!base)
        return NULL;
    ad_real *u = base, *v = base + n;
    for (size_t i = 0; i < n; i++)
        u[i] = ad_const(pb->x0[i]);
    for (size_t k = 0; k < pb->steps; k++) {
        pb->step(k, u, v, n, p, np, pb->model);
        ad_real *t = u;
        u = v;
        v = t;
    }
    if (u != base)
        memcpy(base, u, n * sizeof *u);
    return base;
}

/* The loop written out: every step is recorded. */
static ad_real objective_plain(const ad_real *p, size_t np, void *ctx)
{
    const problem *pb = ctx;
    ad_real *u = run_steps(pb, p, np);
    if (!u)
        return ad_const(NAN);
    ad_real loss = misfit(pb, u);
    free(u);
    return loss;
}

/* The same loop as one checkpointed block. */
static ad_real objective_checkpointed(const ad_real *p, size_t np, void *ctx)
{
    const problem *pb = ctx;
    ad_real *u = malloc(2 * pb->n * sizeof *u), *uN = u + pb->n;
    if (!u)
        return ad_const(NAN);
    for (size_t i = 0; i < pb->n; i++)
        u[i] = ad_const(pb->x0[i]);
    if (ad_checkpointed_loop(pb->step, pb->model, pb->steps, pb->snaps, pb->n, u, np, p, uN) !=
        AD_OK) {  /* the recording keeps the error; ad_gradient returns it */
        free(u);
        return ad_const(NAN);
    }
    ad_real loss = misfit(pb, uN);
    free(u);
    return loss;
}

/* ================= the problems' data ================= */

/* Runs the steps on constants (outside a recording nothing is recorded)
 * from x0 with params p; the final state into out. */
static void simulate(const problem *pb, const double *p, double *out)
{
    ad_real pr[MAX_PARAMS];
    for (size_t i = 0; i < pb->np; i++)
        pr[i] = ad_const(p[i]);
    ad_real *u = run_steps(pb, pr, pb->np);
    if (!u) {
        fprintf(stderr, "out of memory\n");
        _exit(3);
    }
    for (size_t i = 0; i < pb->n; i++)
        out[i] = u[i].v;
    free(u);
}

/* LV with the true params, observed every LV_OBS_EVERY steps. */
static void lv_setup(problem *pb, size_t steps, lv_model *m)
{
    size_t nobs = steps / LV_OBS_EVERY;
    double *obs = calloc(2 * nobs + 1, sizeof *obs);
    pb->x0 = malloc(3 * sizeof *pb->x0);
    if (!obs || !pb->x0) {
        fprintf(stderr, "out of memory\n");
        _exit(3);
    }
    *m = (lv_model){lv_dt, obs, 0};
    *pb = (problem){0, steps, 0, 3, 4, lv_step, m, &m->evals, pb->x0, obs};
    pb->x0[0] = lv_x0;
    pb->x0[1] = lv_y0;
    pb->x0[2] = 0.0;
    /* the true trajectory, sampled: plain double RK4 of the same field */
    double x = lv_x0, y = lv_y0, h = lv_dt;
    const double *q = lv_true;
    for (size_t k = 0; k < steps; k++) {
        double k1x = q[0] * x - q[1] * x * y, k1y = q[2] * x * y - q[3] * y;
        double x2 = x + h / 2 * k1x, y2 = y + h / 2 * k1y;
        double k2x = q[0] * x2 - q[1] * x2 * y2, k2y = q[2] * x2 * y2 - q[3] * y2;
        double x3 = x + h / 2 * k2x, y3 = y + h / 2 * k2y;
        double k3x = q[0] * x3 - q[1] * x3 * y3, k3y = q[2] * x3 * y3 - q[3] * y3;
        double x4 = x + h * k3x, y4 = y + h * k3y;
        double k4x = q[0] * x4 - q[1] * x4 * y4, k4y = q[2] * x4 * y4 - q[3] * y4;
        x += h / 6 * (k1x + 2 * k2x + 2 * k3x + k4x);
        y += h / 6 * (k1y + 2 * k2y + 2 * k3y + k4y);
        if ((k + 1) % LV_OBS_EVERY == 0) {
            obs[2 * ((k + 1) / LV_OBS_EVERY - 1)] = x;
            obs[2 * ((k + 1) / LV_OBS_EVERY - 1) + 1] = y;
        }
    }
}

static void heat_setup(problem *pb, size_t steps, heat_model *m)
{
    size_t n = HEAT_N;
    double *mem = malloc(3 * n * sizeof *mem);
    if (!mem) {
        fprintf(stderr, "out of memory\n");
        _exit(3);
    }
    double dx = 1.0 / (double)(n + 1);
    /* D dt / dx^2 = 0.25 at the true D: stable (< 0.5) over the params tried */
    *m = (heat_model){0.25 * dx * dx / heat_true[0], dx, mem + n, mem + 2 * n, 0};
    *pb = (problem){1, steps, 0, n, 2, heat_step, m, &m->evals, mem, NULL};
    const double pi = 3.14159265358979323846;
    for (size_t i = 0; i < n; i++) {
        double xi = (double)(i + 1) * dx, g = (xi - 0.3) / 0.1;
        pb->x0[i] = sin(pi * xi) + 0.5 * sin(8 * pi * xi);
        mem[n + i] = exp(-g * g);
    }
    simulate(pb, heat_true, mem + 2 * n);
    m->evals = 0;
}

/* ================= one configuration, in a child ================= */

typedef struct config {
    int kind;          /* 0: LV, 1: heat */
    int checkpointed;  /* 0: plain */
    size_t steps, snaps;
    int reps;
    int idle;          /* only set up, no gradient: the baseline */
} config;

typedef struct result {
    int ran;               /* the child reported */
    ad_status status;
    double fx, grad[MAX_PARAMS];
    double median_ns, min_ns, max_ns;
    int reps;
    unsigned long evals;   /* step calls per gradient */
    int evals_steady;      /* the same count in every gradient */
    ad_tape_stats stats;
    long hwm_kb;           /* VmHWM at the end */
    long setup_kb;         /* VmHWM after setting up, before any gradient */
    long maxrss_kb;        /* ru_maxrss from wait4 (filled in by the parent) */
} result;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --reps gradients after a warm-up, into r. */
static void time_gradients(const config *c, problem *pb, const double *start, result *r)
{
    ad_objective f = c->checkpointed ? objective_checkpointed : objective_plain;
    double times[MAX_REPS];
    unsigned long evals = 0;
    r->evals_steady = 1;
    /* rep -1 is the warm-up: it reserves the tapes' memory */
    for (int rep = -1; rep < c->reps; rep++) {
        *pb->evals = 0;
        double t0 = bench_now_ns();
        ad_status s = ad_gradient(f, pb, pb->np, start, &r->fx, r->grad);
        double t = bench_now_ns() - t0;
        if (s != AD_OK) {
            r->status = s;
            return;
        }
        if (rep >= 0)
            times[rep] = t;
        if (rep >= 0 && *pb->evals != evals)
            r->evals_steady = 0;
        evals = *pb->evals;
    }
    r->status = AD_OK;
    r->evals = evals;
    r->reps = c->reps;
    qsort(times, (size_t)c->reps, sizeof *times, cmp_double);
    r->min_ns = times[0];
    r->max_ns = times[c->reps - 1];
    r->median_ns = c->reps % 2 ? times[c->reps / 2]
                               : 0.5 * (times[c->reps / 2 - 1] + times[c->reps / 2]);
    if (ad_tape_stats_get(&r->stats) != AD_OK)
        r->stats = (ad_tape_stats){0};
}

static void run_config(const config *c, result *r)
{
    problem pb;
    lv_model lv;
    heat_model heat;
    const double *start;
    if (c->kind == 0) {
        lv_setup(&pb, c->steps, &lv);
        start = lv_start;
    } else {
        heat_setup(&pb, c->steps, &heat);
        start = heat_start;
    }
    pb.snaps = c->snaps;
    r->setup_kb = bench_proc_kb("/proc/self/status", "VmHWM");
    if (!c->idle)
        time_gradients(c, &pb, start, r);
    else
        r->status = AD_OK;
    r->hwm_kb = bench_proc_kb("/proc/self/status", "VmHWM");
    free(pb.x0);
    free(pb.scratch);
}

typedef struct {
    const config *c;
    result *r;
} child_job;

static void child_run(void *ctx)
{
    child_job *j = ctx;
    run_config(j->c, j->r);
    j->r->ran = 1;
}

/* Runs c in a child; its result, with ran = 0 if it did not report. */
static result run_child(const config *c)
{
    result r;
    memset(&r, 0, sizeof r);
    child_job j = {c, &r};
    bench_part part = {&r, sizeof r};
    long maxrss_kb;
    if (run_isolated_parts(child_run, &j, &part, 1, &maxrss_kb) != 0)
        memset(&r, 0, sizeof r);
    else
        r.maxrss_kb = maxrss_kb;
    return r;
}

/* ================= the revolve count, to check the evaluations ================= */

static uint64_t beta(uint64_t s, uint64_t r)
{
    uint64_t b = 1;
    for (uint64_t j = 1; j <= r; j++) {
        if (b > UINT64_MAX / (s + j))
            return UINT64_MAX;
        b = b * (s + j) / j;
    }
    return b;
}

/* t(l, S) + l + 1 (docs/api.md, "Checkpointed loops"): the step calls of
 * one gradient. */
static uint64_t expected_evals(uint64_t l, uint64_t S)
{
    if (S > l)
        S = l;
    uint64_t r = 0;
    while (beta(S, r) < l)
        r++;
    uint64_t t = l <= 1 ? 0 : r * l - (r ? beta(S + 1, r - 1) : 0);
    return t + l + 1;
}

static uint64_t default_snaps(uint64_t l)
{
    uint64_t s = 1;
    while (s < l && beta(s, 2) < l)
        s++;
    return s;
}

/* ================= output ================= */

static const char *fmt_bytes(char buf[16], double b)
{
    if (!(b >= 0))
        snprintf(buf, 16, "-");
    else if (b < 1024)
        snprintf(buf, 16, "%.0f B", b);
    else if (b < 1024.0 * 1024)
        snprintf(buf, 16, "%.1f KiB", b / 1024);
    else if (b < 1024.0 * 1024 * 1024)
        snprintf(buf, 16, "%.1f MiB", b / (1024.0 * 1024));
    else
        snprintf(buf, 16, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    return buf;
}

static double rel_diff(const result *a, const result *b, size_t np)
{
    double d = fabs(a->fx - b->fx) / fmax(fabs(b->fx), 1e-300);
    for (size_t i = 0; i < np; i++)
        d = fmax(d, fabs(a->grad[i] - b->grad[i]) / fmax(fabs(b->grad[i]), 1e-300));
    return d;
}

typedef struct row {
    config c;
    result r;
} row;

static long idle_kb; /* the idle child's peak RSS */

static void print_header(void)
{
    printf("  %-12s %5s %10s %7s %10s %7s %7s %10s %10s %7s %10s %10s %10s %9s\n", "gradient",
           "S", "time/grad", "x plain", "step evals", "/steps", "=expect", "peak RSS",
           "above idle", "x plain", "tape", "snapshots", "step tape", "max rel");
}

/* One line; plain (NULL if not run) for the ratios and the check.
 * Returns 0, or 1 if the check failed. */
static int print_row(const row *w, const row *plain, size_t np)
{
    char b1[16], b2[16], b3[16], b4[16], b5[16], t1[16];
    const result *r = &w->r;
    char snaps[32] = "-";
    if (w->c.checkpointed) {
        size_t S = r->stats.snapshot_bytes / (8 * (w->c.kind == 0 ? 3 : HEAT_N));
        snprintf(snaps, sizeof snaps, "%zu%s", S, w->c.snaps ? "" : "*");
    }
    const char *name = w->c.checkpointed ? "checkpointed" : "plain";
    if (!r->ran || r->status != AD_OK) {
        printf("  %-12s %5s  FAILED: %s\n", name, snaps,
               r->ran ? ad_strerror(r->status) : "the child did not report");
        return 1;
    }
    int bad = 0;
    double above = (double)(r->hwm_kb - idle_kb) * 1024.0;
    char xt[16] = "-", xm[16] = "-", diff[16] = "-";
    if (plain && plain->r.ran && plain->r.status == AD_OK) {
        double plain_above = (double)(plain->r.hwm_kb - idle_kb) * 1024.0;
        snprintf(xt, sizeof xt, "%.2f", r->median_ns / plain->r.median_ns);
        snprintf(xm, sizeof xm, "%.4f", above / plain_above);
        if (w != plain) {
            double d = rel_diff(r, &plain->r, np);
            snprintf(diff, sizeof diff, "%.1e", d);
            bad = !(d <= RTOL_CHECK);
        }
    }
    uint64_t expect = w->c.checkpointed
                          ? expected_evals(w->c.steps, w->c.snaps ? w->c.snaps
                                                                   : default_snaps(w->c.steps))
                          : w->c.steps;
    const char *ok = r->evals == expect && r->evals_steady ? "yes" : "NO";
    printf("  %-12s %5s %10s %7s %10lu %7.2f %7s %10s %10s %7s %10s %10s %10s %9s%s\n", name,
           snaps, fmt_time(t1, r->median_ns), xt, r->evals,
           (double)r->evals / (double)w->c.steps, ok, fmt_bytes(b1, (double)r->hwm_kb * 1024.0),
           fmt_bytes(b2, above), xm, fmt_bytes(b3, (double)r->stats.tape_bytes),
           fmt_bytes(b4, (double)r->stats.snapshot_bytes),
           fmt_bytes(b5, (double)r->stats.step_bytes), diff, bad ? "  MISMATCH" : "");
    if (r->maxrss_kb && labs(r->maxrss_kb - r->hwm_kb) > 1024)
        printf("  %-12s (ru_maxrss %ld kB differs from VmHWM %ld kB)\n", "", r->maxrss_kb,
               r->hwm_kb);
    return bad || r->evals != expect;
}

/* ================= main ================= */

typedef struct options {
    int reps;
    double mem_limit_gb;
    size_t max_steps;
    const char *gnuplot;
} options;

static int parse_args(int argc, char **argv, options *o)
{
    *o = (options){5, 4.0, 1000000, NULL};
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!v)
            return -1;
        errno = 0;
        if (strcmp(a, "--reps") == 0) {
            long n = strtol(v, &end, 10);
            if (n < 1 || n > MAX_REPS)
                return -1;
            o->reps = (int)n;
        } else if (strcmp(a, "--mem-limit-gb") == 0) {
            o->mem_limit_gb = strtod(v, &end);
        } else if (strcmp(a, "--max-steps") == 0) {
            o->max_steps = (size_t)strtoull(v, &end, 10);
        } else if (strcmp(a, "--gnuplot") == 0) {
            o->gnuplot = v;
            end = (char *)(uintptr_t)(v + strlen(v));
        } else {
            return -1;
        }
        if (errno || !end || *end)
            return -1;
    }
    return 0;
}

/* Fewer timed gradients where one takes seconds. */
static int reps_for(const options *o, size_t steps, int kind)
{
    int big = kind == 0 ? steps >= 1000000 : 0;
    return big && o->reps > 3 ? 3 : o->reps;
}

static const size_t snap_list[] = {0, 10, 100, 1000};
enum { NSNAP = sizeof snap_list / sizeof *snap_list };

typedef struct block {
    row plain, ckpt[NSNAP];
    int plain_run;
} block;

static int run_block(const options *o, int kind, size_t steps, int plain_allowed, block *b,
                     const char *title)
{
    size_t np = kind == 0 ? 4 : 2;
    int bad = 0;
    printf("\n%s\n", title);
    print_header();
    b->plain_run = plain_allowed;
    if (plain_allowed) {
        b->plain.c = (config){kind, 0, steps, 0, reps_for(o, steps, kind), 0};
        b->plain.r = run_child(&b->plain.c);
        bad |= print_row(&b->plain, &b->plain, np);
    } else {
        printf("  %-12s %5s  not run (see above)\n", "plain", "-");
    }
    for (size_t i = 0; i < NSNAP; i++) {
        b->ckpt[i].c = (config){kind, 1, steps, snap_list[i], reps_for(o, steps, kind), 0};
        b->ckpt[i].r = run_child(&b->ckpt[i].c);
        bad |= print_row(&b->ckpt[i], plain_allowed ? &b->plain : NULL, np);
    }
    return bad;
}

static void write_gnuplot(const options *o, const row *plain)
{
    static const size_t sweep[] = {5, 10, 20, 50, 100, 200, 0, 1000, 2000, 5000, 10000, 100000};
    size_t steps = 100000;
    FILE *f = fopen(o->gnuplot, "w");
    if (!f) {
        fprintf(stderr, "cannot write %s: %s\n", o->gnuplot, strerror(errno));
        return;
    }
    printf("\nLV RK4 10^5 steps over snapshot counts, for %s:\n", o->gnuplot);
    printf("  %7s %10s %7s %10s %10s %8s\n", "S", "time/grad", "x plain", "above idle",
           "snapshots", "evals/l");
    fprintf(f, "# loop-bench: LV RK4, 10^5 steps, checkpointed gradient over snapshot counts\n"
               "# snapshots\ttime_ms\tpeak_rss_mib\tabove_idle_mib\tsnapshot_kib\tevals_per_step"
               "\tis_default\tplain_time_ms\tplain_above_idle_mib\n");
    for (size_t i = 0; i < sizeof sweep / sizeof *sweep; i++) {
        row w;
        w.c = (config){0, 1, steps, sweep[i], o->reps, 0};
        w.r = run_child(&w.c);
        if (!w.r.ran || w.r.status != AD_OK) {
            printf("  %7zu FAILED\n", sweep[i]);
            continue;
        }
        size_t S = w.r.stats.snapshot_bytes / (8 * 3);
        double above = (double)(w.r.hwm_kb - idle_kb) / 1024.0;
        char t1[16], b1[16];
        printf("  %6zu%s %10s %7.2f %10.2f %10s %8.2f\n", S, sweep[i] ? " " : "*",
               fmt_time(t1, w.r.median_ns), w.r.median_ns / plain->r.median_ns, above,
               fmt_bytes(b1, (double)w.r.stats.snapshot_bytes),
               (double)w.r.evals / (double)steps);
        fprintf(f, "%zu\t%.4f\t%.3f\t%.3f\t%.3f\t%.4f\t%d\t%.4f\t%.3f\n", S, w.r.median_ns / 1e6,
                (double)w.r.hwm_kb / 1024.0, above, (double)w.r.stats.snapshot_bytes / 1024.0,
                (double)w.r.evals / (double)steps, sweep[i] == 0, plain->r.median_ns / 1e6,
                (double)(plain->r.hwm_kb - idle_kb) / 1024.0);
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    options o;
    if (parse_args(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: %s [--reps N (1..%d)] [--mem-limit-gb G] [--max-steps N] "
                        "[--gnuplot FILE]\n",
                argv[0], MAX_REPS);
        return 2;
    }
    printf("loop-bench: ad_checkpointed_loop against the loop recorded as written (dualrev %s)\n",
           ad_version());
    printf("memory: %.1f GiB total, %.1f GiB available; plain runs allowed up to %.1f GB\n",
           (double)bench_proc_kb("/proc/meminfo", "MemTotal") / 1048576.0,
           (double)bench_proc_kb("/proc/meminfo", "MemAvailable") / 1048576.0, o.mem_limit_gb);
    printf("time: median of %d gradients after one warm-up (3 for LV at 10^6 steps)\n", o.reps);

    config idle = {0, 0, 1000000, 0, 1, 1};
    result ri = run_child(&idle);
    if (!ri.ran) {
        fprintf(stderr, "the idle child did not report\n");
        return 1;
    }
    idle_kb = ri.hwm_kb;
    printf("idle child (LV 10^6 data set up, no gradient): VmHWM %ld kB, ru_maxrss %ld kB\n",
           ri.hwm_kb, ri.maxrss_kb);
    printf("columns: S = snapshots (* = the default, snapshots = 0); x plain = ratio to the "
           "plain gradient;\n  step evals = step calls per gradient, =expect: equal to "
           "t(l,S)+l+1 (checkpointed) or l (plain);\n  peak RSS = the child's VmHWM; above "
           "idle = peak RSS - idle child's; tape/snapshots/step tape = ad_tape_stats\n  "
           "tape_bytes/snapshot_bytes/step_bytes; max rel = max relative difference of f and "
           "the gradient from plain\n");

    int bad = 0;
    static block lv[3], heat;
    static const size_t lv_steps[3] = {10000, 100000, 1000000};
    static const char *const lv_title[3] = {
        "LV RK4, 10^4 steps (3 states: x, y, summed misfit; 4 params; 100 observations)",
        "LV RK4, 10^5 steps (1000 observations)", "LV RK4, 10^6 steps (10^4 observations)"};
    double est_plain_tape = -1;
    int plain_1e6_run = 0;
    for (int i = 0; i < 3; i++) {
        if (lv_steps[i] > o.max_steps)
            break;
        int allowed = 1;
        if (i == 2) {
            const ad_tape_stats *s = &lv[1].plain.r.stats;
            double need = 10.0 * (double)(s->tape_bytes + s->adjoint_bytes + s->driver_bytes);
            est_plain_tape = 10.0 * (double)s->tape_bytes;
            char b1[16];
            allowed = lv[1].plain.r.ran && need <= o.mem_limit_gb * 1e9 &&
                      need < 0.8 * (double)bench_proc_kb("/proc/meminfo", "MemAvailable") * 1024.0;
            printf("\nplain LV at 10^6 steps would need about %s (10x the 10^5 tape, cotangents and "
                   "work arrays): %s\n",
                   fmt_bytes(b1, need), allowed ? "run" : "NOT run, over the limit");
            plain_1e6_run = allowed;
        }
        bad |= run_block(&o, 0, lv_steps[i], allowed, &lv[i], lv_title[i]);
    }
    bad |= run_block(&o, 1, 10000, 1, &heat,
                     "heat, explicit Euler, 1000 states, 10^4 steps (2 params: D, source amplitude)");

    /* ---- the targets ---- */
    printf("\ntargets (default snapshots):\n");
    if (o.max_steps >= 1000000) {
        const row *c = &lv[2].ckpt[0];
        double plain_tape = plain_1e6_run ? (double)lv[2].plain.r.stats.tape_bytes : est_plain_tape;
        double above = (double)(c->r.hwm_kb - idle_kb) * 1024.0;
        double total = (double)c->r.hwm_kb * 1024.0;
        double own = (double)(c->r.stats.tape_bytes + c->r.stats.snapshot_bytes +
                              c->r.stats.step_bytes);
        char b1[16], b2[16], b3[16], b4[16];
        printf("  memory, LV 10^6: plain tape %s (%s); 1%% = %s\n", fmt_bytes(b1, plain_tape),
               plain_1e6_run ? "measured" : "estimated as 10x the 10^5 tape",
               fmt_bytes(b2, plain_tape / 100));
        printf("    checkpointed peak RSS above idle %s = %.3f%% of it: %s\n", fmt_bytes(b3, above),
               100 * above / plain_tape, above < plain_tape / 100 ? "MET" : "MISSED");
        printf("    (whole-process peak RSS %s = %.3f%%: %s; tape+snapshots+step tape %s = "
               "%.3f%%: %s)\n",
               fmt_bytes(b4, total), 100 * total / plain_tape,
               total < plain_tape / 100 ? "MET" : "MISSED", fmt_bytes(b1, own),
               100 * own / plain_tape, own < plain_tape / 100 ? "MET" : "MISSED");
    }
    for (int i = 0; i < 4; i++) {
        const block *b = i < 3 ? &lv[i] : &heat;
        if (i < 3 && lv_steps[i] > o.max_steps)
            continue;
        if (!b->plain_run || !b->plain.r.ran || !b->ckpt[0].r.ran) {
            printf("  time, %s: no plain gradient to compare with\n",
                   i < 3 ? lv_title[i] : "heat");
            continue;
        }
        double x = b->ckpt[0].r.median_ns / b->plain.r.median_ns;
        printf("  time, %-16s: checkpointed / plain = %.2f (<= 3): %s\n",
               i == 0 ? "LV 10^4" : i == 1 ? "LV 10^5" : i == 2 ? "LV 10^6" : "heat 10^4", x,
               x <= 3.0 ? "MET" : "MISSED");
    }

    if (o.gnuplot) {
        if (lv[1].plain_run && lv[1].plain.r.ran)
            write_gnuplot(&o, &lv[1].plain);
        else
            fprintf(stderr, "--gnuplot needs the plain LV 10^5 gradient\n");
    }
    if (bad)
        printf("\nFAILED: a gradient failed, differed from the plain one, or counted other "
               "step evaluations than expected\n");
    return bad ? 1 : 0;
}
