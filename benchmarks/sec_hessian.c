/* Section 6: second order.  ad_hvp and ad_hessian against ad_gradient on
 * the same objective, in the same run: a dense one,
 *   f(x) = logsumexp(A x) + |x|^2 / 2,   A a fixed n x n matrix,
 * written with scalar operations and again with the primitives ad_matvec,
 * ad_logsumexp and ad_sqnorm, and a sparse one, Rosenbrock's function in
 * scalar operations.  The target: one HVP <= 4 gradients.
 *
 * Before timing, each row checks that ad_hvp's value and gradient equal
 * ad_gradient's, that its H v equals the analytic one, that ad_hessian is
 * symmetric and that its columns equal ad_hvp along the unit vectors (all of
 * them, or evenly spaced ones on the large dense tapes); a row that does not
 * says FAIL and is not timed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "report.h"

#define TARGET 4.0         /* the issue's: one HVP <= 4 gradients */
#define AGREE_TOL 1e-12    /* ad_hvp's value and gradient against ad_gradient's */
#define MATRIX_TOL 1e-10   /* H v, H's symmetry and columns, relative to the largest entry */
#define ALL_COLUMNS 1e8    /* check every column while n x records stays below this */
#define SOME_COLUMNS 16    /* else this many, evenly spaced, first and last included */
#define HESS_BUDGET_NS 3e9 /* above this per measurement, time single Hessians */

#define TSV_HEADER                                                                          \
    "objective\tn\trecords\tcolumns_checked\tgrad_ns\tgrad_min_ns\tgrad_max_ns\thvp_ns\t"   \
    "hvp_min_ns\thvp_max_ns\thess_ns\thess_min_ns\thess_max_ns\thess_batches\thess_iters\t" \
    "hess_per_column_ns\thvp_over_grad\thess_over_grad\thess_over_n_grad\tmax_deviation\t"  \
    "target\tcheck"

#define COUNT(a) (sizeof (a) / sizeof *(a))

/* An objective's size and constants; ctx of every function below. */
typedef struct problem {
    size_t n;
    const double *A;  /* the dense objective's n x n matrix, row-major */
    ad_real *z;       /* A x, n of them: scratch for the objectives */
} problem;

/* ---- the objectives ---- */

/* logsumexp(A x) + |x|^2 / 2, scalar operations only: each z_j = row_j . x
 * as a loop of ad_mul and ad_add, logsumexp shifted by the largest z (a
 * constant: its derivative cancels). */
static ad_real dense_scalar(const ad_real *x, size_t n, void *ctx)
{
    const problem *p = ctx;
    ad_real *z = p->z;
    double hi = -INFINITY;
    for (size_t j = 0; j < n; j++) {
        const double *row = p->A + j * n;
        ad_real acc = ad_mul(row[0], x[0]);
        for (size_t i = 1; i < n; i++)
            acc = ad_add(acc, ad_mul(row[i], x[i]));
        z[j] = acc;
        hi = fmax(hi, ad_value(acc));
    }
    ad_real s = ad_exp(ad_sub(z[0], hi));
    for (size_t j = 1; j < n; j++)
        s = ad_add(s, ad_exp(ad_sub(z[j], hi)));
    ad_real q = ad_mul(x[0], x[0]);
    for (size_t i = 1; i < n; i++)
        q = ad_add(q, ad_mul(x[i], x[i]));
    return ad_add(ad_add(hi, ad_log(s)), ad_mul(0.5, q));
}

/* The same function with the array primitives. */
static ad_real dense_prim(const ad_real *x, size_t n, void *ctx)
{
    const problem *p = ctx;
    ad_matvec(n, n, p->A, x, p->z);
    return ad_add(ad_logsumexp(n, p->z), ad_mul(0.5, ad_sqnorm(n, x)));
}

/* sum_i 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2, i < n - 1 */
static ad_real rosenbrock(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    ad_real acc = ad_const(0.0);
    for (size_t i = 0; i + 1 < n; i++) {
        ad_real t = ad_sub(x[i + 1], ad_mul(x[i], x[i]));
        ad_real u = ad_sub(1.0, x[i]);
        ad_real term = ad_add(ad_mul(100.0, ad_mul(t, t)), ad_mul(u, u));
        acc = i ? ad_add(acc, term) : term;
    }
    return acc;
}

/* ---- the analytic H v ---- */

/* H = A^T (diag p - p p^T) A + I with p = softmax(A x):
 * H v = A^T (p .* (u - p.u)) + v, u = A v. */
static void dense_hv(const problem *p, const double *x, const double *v, double *hv)
{
    size_t n = p->n;
    double *z = malloc(3 * n * sizeof *z), *u = z + n, *w = u + n;
    if (!z) {
        fprintf(stderr, "out of memory for the analytic H v, n=%zu\n", n);
        exit(1);
    }
    double hi = -INFINITY, s = 0.0, pu = 0.0;
    for (size_t j = 0; j < n; j++) {
        z[j] = u[j] = 0.0;
        for (size_t i = 0; i < n; i++) {
            z[j] += p->A[j * n + i] * x[i];
            u[j] += p->A[j * n + i] * v[i];
        }
        hi = fmax(hi, z[j]);
    }
    for (size_t j = 0; j < n; j++)
        s += z[j] = exp(z[j] - hi);
    for (size_t j = 0; j < n; j++)
        pu += (z[j] /= s) * u[j];
    for (size_t j = 0; j < n; j++)
        w[j] = z[j] * (u[j] - pu);
    for (size_t i = 0; i < n; i++)
        hv[i] = v[i];
    for (size_t j = 0; j < n; j++)
        for (size_t i = 0; i < n; i++)
            hv[i] += p->A[j * n + i] * w[j];
    free(z);
}

/* Term i adds 1200 x_i^2 - 400 x_{i+1} + 2 at (i, i), -400 x_i at (i, i+1)
 * and (i+1, i), and 200 at (i+1, i+1). */
static void rosenbrock_hv(const problem *p, const double *x, const double *v, double *hv)
{
    size_t n = p->n;
    for (size_t i = 0; i < n; i++)
        hv[i] = 0.0;
    for (size_t i = 0; i + 1 < n; i++) {
        hv[i] += (1200.0 * x[i] * x[i] - 400.0 * x[i + 1] + 2.0) * v[i] - 400.0 * x[i] * v[i + 1];
        hv[i + 1] += -400.0 * x[i] * v[i] + 200.0 * v[i + 1];
    }
}

/* ---- the list ---- */

typedef struct hobj {
    const char *name;
    ad_objective f;
    int dense;  /* needs A, and --max-n counts its n x n elements */
    void (*hv)(const problem *p, const double *x, const double *v, double *hv);
} hobj;

static const hobj objs[] = {
    {"lse(Ax) scalar", dense_scalar, 1, dense_hv},
    {"lse(Ax) prims", dense_prim, 1, dense_hv},
    {"rosenbrock", rosenbrock, 0, rosenbrock_hv},
};

static const size_t sizes[] = {10, 100, 1000};

/* ---- one row: one objective at one size ---- */

typedef struct hess_row {
    const hobj *o;
    size_t n, records, columns;  /* records: one gradient's; columns: of H checked */
    double err;                  /* the largest deviation the checks found */
    bench_time grad, hvp, hess;
    const char *check;
} hess_row;

typedef struct job {
    const hobj *o;
    problem *p;
    const double *x, *v;
    double *g, *hv, *hess;
    double fx;
    int failed;  /* a timed call did not return AD_OK */
} job;

static void run_grad(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t i = 0; i < iters; i++)
        if (ad_gradient(j->o->f, j->p, j->p->n, j->x, &j->fx, j->g) != AD_OK)
            j->failed = 1;
}

static void run_hvp(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t i = 0; i < iters; i++)
        if (ad_hvp(j->o->f, j->p, j->p->n, j->x, j->v, &j->fx, j->g, j->hv) != AD_OK)
            j->failed = 1;
}

static void run_hess(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t i = 0; i < iters; i++)
        if (ad_hessian(j->o->f, j->p, j->p->n, j->x, &j->fx, j->g, j->hess) != AD_OK)
            j->failed = 1;
}

static int agree(double a, double b)
{
    return check_close(a, b, AGREE_TOL);
}

static double max_abs(const double *v, size_t count)
{
    double m = 0.0;
    for (size_t i = 0; i < count; i++)
        m = fmax(m, fabs(v[i]));
    return m;
}

/* |a - b| relative to scale (at least 1); NaN when either is NaN. */
static double deviation(double a, double b, double scale)
{
    return fabs(a - b) / fmax(scale, 1.0);
}

#define FAIL(r, what, ...)                                                   \
    do {                                                                     \
        fprintf(stderr, "%s n=%zu: ", (r)->o->name, (r)->n);                 \
        fprintf(stderr, __VA_ARGS__);                                        \
        fputc('\n', stderr);                                                 \
        return "FAIL: " what;                                                \
    } while (0)

/* The largest deviation of a[i] from b[i] over count entries (a stride
 * apart in a), relative to scale; NaN if any entry is NaN. *at: where. */
static double worst(const double *a, size_t stride, const double *b, size_t count, double scale,
                    size_t *at)
{
    double w = 0.0;
    *at = 0;
    for (size_t i = 0; i < count; i++) {
        double d = deviation(a[i * stride], b[i], scale);
        if (!(d <= w)) {
            w = d;
            *at = i;
            if (isnan(d))
                break;
        }
    }
    return w;
}

/* The checks, on the results of one ad_gradient (fx, g), one ad_hvp along
 * v (j->fx, j->g, j->hv) and one ad_hessian (fh, gh, j->hess); calls
 * ad_hvp again for the columns.  r->err: the largest deviation found in
 * H v, H's symmetry and its columns, relative to the largest entry. */
static const char *check(hess_row *r, job *j, double fx, const double *g, double fh,
                         const double *gh, double *tmp)
{
    size_t n = r->n, at;
    r->err = NAN;
    if (!agree(fx, j->fx))
        FAIL(r, "HVP's value", "ad_gradient %.17g, ad_hvp %.17g", fx, j->fx);
    for (size_t i = 0; i < n; i++)
        if (!agree(g[i], j->g[i]))
            FAIL(r, "HVP's gradient", "gradient %zu: ad_gradient %.17g, ad_hvp %.17g", i, g[i],
                 j->g[i]);
    if (!agree(fx, fh))
        FAIL(r, "Hessian's value", "ad_gradient %.17g, ad_hessian %.17g", fx, fh);
    for (size_t i = 0; i < n; i++)
        if (!agree(g[i], gh[i]))
            FAIL(r, "Hessian's gradient", "gradient %zu: ad_gradient %.17g, ad_hessian %.17g", i,
                 g[i], gh[i]);
    r->o->hv(j->p, j->x, j->v, tmp);
    double d = worst(j->hv, 1, tmp, n, max_abs(tmp, n), &at);
    if (!(d <= MATRIX_TOL))
        FAIL(r, "H v", "H v %zu: ad_hvp %.17g, analytic %.17g", at, j->hv[at], tmp[at]);
    r->err = d;
    const double *H = j->hess;
    double scale = max_abs(H, n * n);
    for (size_t i = 0; i < n; i++) {
        /* row i against column i */
        d = worst(H + i, n, H + i * n, n, scale, &at);
        if (!(d <= MATRIX_TOL))
            FAIL(r, "not symmetric", "H[%zu][%zu] %.17g, H[%zu][%zu] %.17g", at, i,
                 H[at * n + i], i, at, H[i * n + at]);
        r->err = fmax(r->err, d);
    }
    /* Columns against ad_hvp(e_c), into tmp; j->v and j->hv are kept. */
    r->columns = (double)n * (double)r->records <= ALL_COLUMNS || n <= SOME_COLUMNS
                     ? n : SOME_COLUMNS;
    double *e = malloc(2 * n * sizeof *e), *gc = e + n;
    if (!e) {
        fprintf(stderr, "out of memory for the columns, n=%zu\n", n);
        exit(1);
    }
    const char *bad = "ok";
    for (size_t k = 0; k < r->columns; k++) {
        size_t c = r->columns == n ? k : k * (n - 1) / (r->columns - 1);
        double fc;
        for (size_t i = 0; i < n; i++)
            e[i] = i == c;
        if (ad_hvp(r->o->f, j->p, n, j->x, e, &fc, gc, tmp) != AD_OK) {
            fprintf(stderr, "%s n=%zu: ad_hvp along e_%zu failed\n", r->o->name, n, c);
            bad = "FAIL: ad_hvp along a column failed";
            break;
        }
        d = worst(H + c, n, tmp, n, scale, &at);
        if (!(d <= MATRIX_TOL)) {
            fprintf(stderr, "%s n=%zu: H[%zu][%zu]: ad_hessian %.17g, ad_hvp %.17g\n",
                    r->o->name, n, at, c, H[at * n + c], tmp[at]);
            bad = "FAIL: Hessian column differs from HVP";
            break;
        }
        r->err = fmax(r->err, d);
    }
    free(e);
    return bad;
}

/* Each of k single calls timed: for a Hessian too slow for a batch. */
static bench_time time_single(bench_body body, void *ctx, int k)
{
    double s[64];
    k = k < 1 ? 1 : k > 64 ? 64 : k;
    for (int i = 0; i < k; i++) {
        double t0 = bench_now_ns();
        body(ctx, 1);
        s[i] = bench_now_ns() - t0;
        for (int m = i; m > 0 && s[m - 1] > s[m]; m--) {
            double tmp = s[m];
            s[m] = s[m - 1];
            s[m - 1] = tmp;
        }
    }
    bench_time r = {k % 2 ? s[k / 2] : 0.5 * (s[k / 2 - 1] + s[k / 2]), s[0], s[k - 1], 1};
    return r;
}

static void measure(const bench_plan *plan, hess_row *r, int *hess_reps)
{
    size_t n = r->n;
    /* x, v, then the gradients of ad_gradient, ad_hvp and ad_hessian, H v,
     * and scratch */
    double *buf = malloc(7 * n * sizeof *buf);
    double *x = buf, *v = x + n, *g0 = v + n, *g1 = g0 + n, *g2 = g1 + n, *hv = g2 + n;
    double *tmp = hv + n;
    double *A = r->o->dense ? malloc(n * n * sizeof *A) : NULL;
    double *H = malloc(n * n * sizeof *H);
    ad_real *z = malloc(n * sizeof *z);
    if (!buf || (r->o->dense && !A) || !H || !z) {
        fprintf(stderr, "out of memory for %s n=%zu\n", r->o->name, n);
        exit(1);
    }
    if (r->o->dense) {
        /* entries of size 1/sqrt(n): A x stays O(1), so softmax is spread */
        bench_fill(A, n * n, 0xD1B54A32D192ED03u, -1.0 / sqrt((double)n), 2.0 / sqrt((double)n));
        bench_fill(x, n, 0x9E3779B97F4A7C15u, -1.0, 2.0);
    } else {
        bench_fill(x, n, 0x9E3779B97F4A7C15u, 0.5, 1.0);
    }
    bench_fill(v, n, 0x8CB92BA72F3D8DD7u, -1.0, 2.0);
    problem p = {n, A, z};
    job j = {r->o, &p, x, v, g1, hv, H, 0.0, 0};

    bench_time none = {NAN, NAN, NAN, 0};
    r->grad = r->hvp = r->hess = none;
    r->records = r->columns = 0;
    r->err = NAN;
    *hess_reps = 0;
    double fx = NAN, fh = NAN, t_hess = 0.0;
    ad_tape_stats ts;
    ad_status s = ad_gradient(r->o->f, &p, n, x, &fx, g0);
    if (s == AD_OK && ad_tape_stats_get(&ts) == AD_OK)
        r->records = ts.records;
    if (s == AD_OK)
        s = ad_hvp(r->o->f, &p, n, x, v, &j.fx, g1, hv);
    if (s == AD_OK) {
        /* timed: it decides how the Hessian is timed below */
        double t0 = bench_now_ns();
        s = ad_hessian(r->o->f, &p, n, x, &fh, g2, H);
        t_hess = bench_now_ns() - t0;
    }
    if (s != AD_OK) {
        fprintf(stderr, "%s n=%zu: %s\n", r->o->name, n, ad_strerror(s));
        r->check = "FAIL: a call failed";
    } else {
        r->check = check(r, &j, fx, g0, fh, g2, tmp);
    }

    if (r->check[0] == 'o') {
        const bench_body body[2] = {run_grad, run_hvp};
        void *const ctx[2] = {&j, &j};
        bench_time t[2];
        bench_measure_side_by_side(plan, 2, body, ctx, t);  /* their ratio is reported */
        r->grad = t[0];
        r->hvp = t[1];
        /* bench_measure makes reps + 3 calls at the least */
        if (t_hess * (plan->reps + 3) <= HESS_BUDGET_NS) {
            r->hess = bench_measure(plan, run_hess, &j);
            *hess_reps = plan->reps;
        } else if (t_hess * 2.0 <= HESS_BUDGET_NS) {
            double k = HESS_BUDGET_NS / t_hess;
            *hess_reps = k > plan->reps ? plan->reps : (int)k;
            r->hess = time_single(run_hess, &j, *hess_reps);
        } else {
            /* one call is all the budget allows: the checked one */
            r->hess = (bench_time){t_hess, t_hess, t_hess, 1};
            *hess_reps = -1;
        }
        if (j.failed)
            r->check = "FAIL: a timed call failed";
    }
    free(buf);
    free(A);
    free(H);
    free(z);
}

/* ---- output ---- */

static void print_header(const bench_plan *plan)
{
    printf("\n== Second order: ad_hvp and ad_hessian against ad_gradient (median of %d, each "
           ">= %.0f ms) ==\n",
           plan->reps, plan->min_rep_ns / 1e6);
    printf("lse(Ax): logsumexp(A x) + |x|^2/2, A n x n, in scalar operations (scalar) or with "
           "ad_matvec, ad_logsumexp, ad_sqnorm (prims)\n");
    printf("rosenbrock: sum 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2 in scalar operations\n");
    printf("records: one gradient's tape; hess/col = hess / n; target: one HVP <= %.0f "
           "gradients\n",
           TARGET);
    printf("hess run: batches x calls per batch; Nx1: N calls timed one by one (too slow for "
           "batches); checked: one call took over %.1f s,\n"
           "  so the time is that of the call the checks made (the first to touch the sweep's "
           "arrays)\n",
           HESS_BUDGET_NS / 2e9);
    printf("cols: Hessian columns checked against ad_hvp along e_j; err: the largest difference "
           "in H v (against the analytic one), H - H^T\n"
           "  and those columns, relative to the largest entry (FAIL above %.0e)\n",
           MATRIX_TOL);
    printf("%-14s %5s %8s | %9s %9s %9s %9s %8s | %6s %7s %8s | %-6s | %9s %7s | %s\n",
           "objective", "n", "records", "grad", "hvp", "hess", "hess/col", "hess run", "hvp/gr",
           "hess/gr", "h/(n*gr)", "target", "cols", "err", "check");
}

static void print_row(const hess_row *r, int hess_reps)
{
    char t[8][16], runs[24], cols[24], err[16];
    double gr = r->grad.median_ns, hv = r->hvp.median_ns, he = r->hess.median_ns;
    double n = (double)r->n;
    const char *target = isnan(hv / gr) ? "-" : hv <= TARGET * gr ? "MET" : "MISSED";
    if (hess_reps < 0)
        snprintf(runs, sizeof runs, "checked");
    else if (hess_reps)
        snprintf(runs, sizeof runs, "%dx%zu", hess_reps, r->hess.iters);
    else
        snprintf(runs, sizeof runs, "-");
    snprintf(cols, sizeof cols, "%zu/%zu", r->columns, r->n);
    snprintf(err, sizeof err, isnan(r->err) ? "-" : "%.0e", r->err);
    printf("%-14s %5zu %8zu | %9s %9s %9s %9s %8s | %6s %7s %8s | %-6s | %9s %7s | %s\n",
           r->o->name, r->n, r->records, fmt_time(t[0], gr), fmt_time(t[1], hv),
           fmt_time(t[2], he), fmt_time(t[3], he / n), runs, fmt_ratio(t[4], hv, gr),
           fmt_ratio(t[5], he, gr), fmt_ratio(t[6], he, n * gr), target, cols, err, r->check);
}

static void write_row(FILE *f, const hess_row *r, int hess_reps)
{
    double gr = r->grad.median_ns, hv = r->hvp.median_ns, he = r->hess.median_ns;
    double n = (double)r->n;
    fprintf(f, "%s\t%zu\t%zu\t%zu\t", r->o->name, r->n, r->records, r->columns);
    double cells[] = {gr, r->grad.min_ns, r->grad.max_ns, hv, r->hvp.min_ns, r->hvp.max_ns,
                      he, r->hess.min_ns, r->hess.max_ns, (double)(hess_reps < 0 ? 1 : hess_reps),
                      (double)r->hess.iters,
                      he / n, hv / gr, he / gr, he / (n * gr), r->err};
    for (size_t i = 0; i < COUNT(cells); i++)
        tsv_num(f, cells[i], 0);
    fprintf(f, "%s\t%s\n", isnan(hv / gr) ? "-" : hv <= TARGET * gr ? "MET" : "MISSED",
            r->check);
}

int section_hessian(const bench_ctx *b, size_t max_n)
{
    /* 9 rows of three timings: batches of half --min-ms, as for the
     * primitives. */
    bench_plan plan = {b->plan.reps, b->plan.min_rep_ns / 2.0};
    print_header(&plan);
    FILE *f = tsv_open(b, "hessian.tsv", TSV_HEADER);
    int ok = 1;
    for (size_t i = 0; i < COUNT(objs); i++)
        for (size_t k = 0; k < COUNT(sizes); k++) {
            hess_row r = {.o = &objs[i], .n = sizes[k]};
            if ((objs[i].dense ? r.n * r.n : r.n) > max_n)
                continue;
            int hess_reps;
            measure(&plan, &r, &hess_reps);
            print_row(&r, hess_reps);
            fflush(stdout);
            if (f)
                write_row(f, &r, hess_reps);
            ok &= r.check[0] == 'o';
        }
    tsv_close(f);
    return ok;
}
