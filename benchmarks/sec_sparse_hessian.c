/* Section 7: sparse Hessians.  ad_sparse_hessian (a new structure each
 * call) and ad_sparse_hessian_values (an optimiser's fixed structure)
 * against ad_gradient, side by side, on three CUTEst-style functions
 * written as a user would: extended Rosenbrock (tridiagonal), ARWHEAD
 * (arrowhead) and BDQRTIC (a band of four and the last row), n = 10^3 ..
 * 10^6.  The target: at most 10 gradients, and flat in n.
 *
 * Before timing, each row checks the structure's size against the
 * function's (2n - 1, 2n - 1, 5n - 10 entries) and H v, from the lower
 * triangle used symmetrically, against ad_hvp along a random v, to the
 * rounding bound of a sum of n terms; a row that does not pass says FAIL
 * and is not timed. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "peer.h"
#include "report.h"

#define TARGET 10.0     /* the issue's: one sparse Hessian <= 10 gradients */
#define PEER_BATCH_NS 1e9  /* a peer's new pattern slower than this is timed once */
#define PEER_GIVE_UP_NS 2e9  /* and slower than this ends the peer's rows of the function */
/* H v against ad_hvp, relative to the largest entry: the bound on a sum of
 * n terms added in another order (ARWHEAD's and BDQRTIC's last diagonal
 * entry sums n - 1 of them) */
#define HV_TOL(n) (4.0 * DBL_EPSILON * (double)(n))

#define TSV_HEADER                                                                      \
    "objective\tn\trecords\tnnz\tbytes\tgrad_ns\thess_ns\tvalues_ns\thess_over_grad\t"        \
    "values_over_grad\tpeer_new_ns\tpeer_repeat_ns\ttarget\tcheck"

/* ---- the objectives ---- */

#define BENCH_T ad_real
#define BENCH_NAME(f) f
#include "hessian_objectives.h"
#undef BENCH_T
#undef BENCH_NAME

typedef struct sobj {
    const char *name;
    ad_objective f;
    size_t (*nnz)(size_t n);  /* the structure's size */
} sobj;

static size_t nnz_two(size_t n)
{
    return 2 * n - 1;
}

/* Rows i < n - 1 have min(i, 3) + 1 entries, the last row n. */
static size_t nnz_band(size_t n)
{
    return 4 * (n - 1) - 6 + n;
}

static const sobj objs[] = {
    {"rosenbrock", rosenbrock, nnz_two},
    {"arwhead", arwhead, nnz_two},
    {"bdqrtic", bdqrtic, nnz_band},
};

static const size_t sizes[] = {1000, 10000, 100000, 1000000};

/* ---- one row ---- */

typedef struct job {
    const sobj *o;
    int which;  /* o's index, for the peer */
    size_t n;
    const double *x;
    double *g, fx;
    ad_csr H;  /* the fixed structure, for the values' calls */
    int failed;
} job;

static void run_grad(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t i = 0; i < iters; i++)
        j->failed |= ad_gradient(j->o->f, NULL, j->n, j->x, &j->fx, j->g) != AD_OK;
}

static void run_hess(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t i = 0; i < iters; i++) {
        ad_csr H;
        j->failed |= ad_sparse_hessian(j->o->f, NULL, j->n, j->x, &j->fx, j->g, &H) != AD_OK;
        ad_csr_free(&H);
    }
}

/* ADOL-C: tape, then sparse_hess with a new pattern (repeat 0), or with
 * the last one's (repeat 1). */
static void run_peer_new(void *ctx, size_t iters)
{
    job *j = ctx;
    size_t nnz;
    for (size_t i = 0; i < iters; i++)
        j->failed |= peer_sparse_hessian(j->which, j->n, j->x, 1, &nnz) != 0;
}

static void run_peer_repeat(void *ctx, size_t iters)
{
    job *j = ctx;
    size_t nnz;
    for (size_t i = 0; i < iters; i++)
        j->failed |= peer_sparse_hessian(j->which, j->n, j->x, 0, &nnz) != 0;
}

static void run_values(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t i = 0; i < iters; i++)
        j->failed |=
            ad_sparse_hessian_values(j->o->f, NULL, j->n, j->x, &j->fx, j->g, &j->H) != AD_OK;
}

/* H v from the lower triangle, used symmetrically. */
static void lower_times(const ad_csr *H, const double *v, double *hv)
{
    for (size_t i = 0; i < H->rows; i++)
        hv[i] = 0.0;
    for (size_t r = 0; r < H->rows; r++)
        for (size_t k = H->row_ptr[r]; k < H->row_ptr[r + 1]; k++) {
            size_t c = H->col[k];
            hv[r] += H->val[k] * v[c];
            if (c != r)
                hv[c] += H->val[k] * v[r];
        }
}

static const char *check(job *j, const double *v, double *hv, double *want)
{
    double fx;
    size_t n = j->n;
    if (j->H.nnz != j->o->nnz(n)) {
        fprintf(stderr, "%s n=%zu: %zu entries, the function has %zu\n", j->o->name, n,
                j->H.nnz, j->o->nnz(n));
        return "FAIL: structure";
    }
    if (ad_hvp(j->o->f, NULL, n, j->x, v, &fx, j->g, want) != AD_OK)
        return "FAIL: ad_hvp";
    lower_times(&j->H, v, hv);
    double scale = 0.0, worst = 0.0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(hv[i] - want[i]) / fmax(scale, 1.0));
    if (!(worst <= HV_TOL(n))) {
        fprintf(stderr, "%s n=%zu: H v off by %.3g of the largest entry\n", j->o->name, n, worst);
        return "FAIL: H v";
    }
    return "ok";
}

typedef struct srow {
    const sobj *o;
    int which;
    size_t n, records, nnz, peer_nnz;  /* peer_nnz 0: no peer */
    double bytes;  /* all the tape keeps after one call, fresh: records, side, cotangents, sweep */
    bench_time grad, hess, values, peer_new, peer_repeat;
    const char *check;
} srow;

/* *with_peer is cleared when the peer's new pattern took too long to try
 * a larger n. */
static void measure(const bench_plan *plan, int *with_peer, srow *r)
{
    size_t n = r->n;
    double *buf = malloc(5 * n * sizeof *buf);
    if (!buf) {
        fprintf(stderr, "out of memory for %s n=%zu\n", r->o->name, n);
        exit(1);
    }
    double *x = buf, *v = x + n, *g = v + n, *hv = g + n, *want = hv + n;
    bench_fill(x, n, 0x9E3779B97F4A7C15u, 0.5, 1.0);
    bench_fill(v, n, 0x8CB92BA72F3D8DD7u, -1.0, 2.0);
    job j = {r->o, r->which, n, x, g, 0.0, {0, 0, 0, NULL, NULL, NULL}, 0};
    bench_time none = {NAN, NAN, NAN, 0};
    r->grad = r->hess = r->values = r->peer_new = r->peer_repeat = none;
    r->peer_nnz = 0;
    double t_new = NAN;
    if (*with_peer) {
        double t0 = bench_now_ns();
        if (peer_sparse_hessian(r->which, n, x, 1, &r->peer_nnz) != 0)
            r->peer_nnz = 0;
        t_new = bench_now_ns() - t0;
        if (t_new > PEER_GIVE_UP_NS)
            *with_peer = 0;
    }
    int peer_batches = r->peer_nnz && t_new <= PEER_BATCH_NS;
    ad_tape_stats ts;
    ad_status s = ad_release();  /* fresh: the memory below is this call's */
    if (s == AD_OK)
        s = ad_sparse_hessian(r->o->f, NULL, n, x, &j.fx, g, &j.H);
    r->records = s == AD_OK && ad_tape_stats_get(&ts) == AD_OK ? ts.records : 0;
    r->bytes = r->records ? (double)(ts.tape_bytes + ts.side_bytes + ts.adjoint_bytes +
                                     ts.driver_bytes) : NAN;
    r->nnz = j.H.nnz;
    r->check = s != AD_OK ? "FAIL: ad_sparse_hessian" : check(&j, v, hv, want);
    if (r->check[0] == 'o') {
        /* the peer's repeats after its new pattern, which a slow one
         * leaves out of the batches (timed once, above) */
        const bench_body body[5] = {run_grad, run_hess, run_values, run_peer_repeat,
                                    run_peer_new};
        void *const ctx[5] = {&j, &j, &j, &j, &j};
        bench_time t[5];
        bench_measure_side_by_side(plan, r->peer_nnz ? (peer_batches ? 5 : 4) : 3, body, ctx, t);
        r->grad = t[0];
        r->hess = t[1];
        r->values = t[2];
        if (r->peer_nnz) {
            r->peer_repeat = t[3];
            r->peer_new = peer_batches ? t[4] : (bench_time){t_new, t_new, t_new, 1};
        }
        if (j.failed)
            r->check = "FAIL: a timed call failed";
    }
    ad_csr_free(&j.H);
    free(buf);
}

static void print_row(const srow *r)
{
    char a[16], b[16], c[16], d[16], e[16], f[16], g[16], h[16];
    double ratio = r->hess.median_ns / r->grad.median_ns;
    printf("%-11s %8zu %9zu %9zu %6.1f | %9s %9s %9s | %6s %6s | %-6s | %9s %9s %6s | %s\n",
           r->o->name, r->n, r->records, r->nnz, r->bytes / (double)r->records,
           fmt_time(a, r->grad.median_ns),
           fmt_time(b, r->hess.median_ns), fmt_time(c, r->values.median_ns),
           fmt_ratio(d, r->hess.median_ns, r->grad.median_ns),
           fmt_ratio(e, r->values.median_ns, r->grad.median_ns),
           isnan(ratio) ? "-" : ratio <= TARGET ? "MET" : "MISSED",
           fmt_time(f, r->peer_new.median_ns), fmt_time(g, r->peer_repeat.median_ns),
           fmt_ratio(h, r->hess.median_ns, r->peer_repeat.median_ns), r->check);
    if (r->peer_nnz && r->peer_nnz != r->nnz)
        printf("  (the peer's triangle has %zu entries)\n", r->peer_nnz);
    fflush(stdout);
}

static void write_row(FILE *f, const srow *r)
{
    fprintf(f, "%s\t%zu\t%zu\t%zu\t", r->o->name, r->n, r->records, r->nnz);
    tsv_num(f, r->bytes, 0);
    tsv_num(f, r->grad.median_ns, 0);
    tsv_num(f, r->hess.median_ns, 0);
    tsv_num(f, r->values.median_ns, 0);
    tsv_num(f, r->hess.median_ns / r->grad.median_ns, 0);
    tsv_num(f, r->values.median_ns / r->grad.median_ns, 0);
    tsv_num(f, r->peer_new.median_ns, 0);
    tsv_num(f, r->peer_repeat.median_ns, 0);
    fprintf(f, "%g\t%s\n", TARGET, r->check);
}

int section_sparse_hessian(const bench_ctx *b, size_t max_n)
{
    printf("\n== Sparse Hessians: ad_sparse_hessian and ad_sparse_hessian_values against "
           "ad_gradient (median of %d, side by side) ==\n",
           b->plan.reps);
    printf("hess: a new structure each call (and ad_csr_free); values: into the structure of "
           "an earlier call; target: hess <= %g gradients, flat in n\n",
           TARGET);
    printf("peer: %s taped at every call, then sparse_hess's steps finding the pattern and "
           "colouring (new; over %.0f s: timed once; over %.0f s: no larger n) or reusing "
           "the last call's (repeat); dr/p: hess / repeat\n",
           b->peer ? b->peer : "none", PEER_BATCH_NS / 1e9, PEER_GIVE_UP_NS / 1e9);
    printf("B/rec: bytes the thread keeps after one call from fresh (ad_tape_stats: records, "
           "second partials, cotangents, the sweep's arrays) per record\n");
    printf("%-11s %8s %9s %9s %6s | %9s %9s %9s | %6s %6s | %-6s | %9s %9s %6s | %s\n",
           "objective", "n", "records", "nnz", "B/rec", "grad", "hess", "values", "h/gr", "v/gr",
           "target", "peer new", "repeat", "dr/p", "check");
    FILE *tsv = tsv_open(b, "sparse_hessian.tsv", TSV_HEADER);
    int ok = 1;
    for (size_t k = 0; k < sizeof objs / sizeof *objs; k++) {
        double lo = INFINITY, hi = 0.0;
        int with_peer = b->peer != NULL;
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes && sizes[s] <= max_n; s++) {
            srow r = {.o = &objs[k], .which = (int)k, .n = sizes[s]};
            measure(&b->plan, &with_peer, &r);
            print_row(&r);
            if (tsv)
                write_row(tsv, &r);
            ok &= r.check[0] == 'o';
            double ratio = r.hess.median_ns / r.grad.median_ns;
            lo = fmin(lo, ratio);
            hi = fmax(hi, ratio);
        }
        if (hi > 0.0)
            printf("%-11s hess/grad from %.2f to %.2f over the sizes: max/min = %.2f\n",
                   objs[k].name, lo, hi, hi / lo);
    }
    tsv_close(tsv);
    return ok;
}
