/* ba-bench: ADBench bundle adjustment (BA) with dualrev.
 *
 * Times, on one ADBench BA input (ba1_n49_m7776_p31843 by default):
 *   - the residuals in plain double,
 *   - ad_sparse_jacobian of the whole residual function (automatic: the
 *     structure is found on the tape),
 *   - the same Jacobian assembled from one ad_jacobian per observation (the
 *     way ADBench's tools are run on BA: the 15-input, 2-output residual of
 *     each observation, the weight rows by hand),
 * and prints each Jacobian's time over the plain residuals' time, the ratio
 * ADBench reports.  Before timing it checks that both Jacobians agree; it
 * exits with status 1 if they do not.
 *
 * Both build the whole CSR, structure and values, on every call, as
 * ADBench's tools do.  The per-observation one writes into arrays allocated
 * once; ad_sparse_jacobian allocates its CSR on each call, and its time
 * includes that and ad_csr_free. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ba.h"
#include "timer.h"

#define DEFAULT_NAME "ba1_n49_m7776_p31843.txt"

typedef struct run {
    ba_problem p;
    double *x, *y;
    ad_csr per_obs;    /* from ba_csr_alloc, reused */
    ad_status status;  /* the first failure in a timed body */
} run;

/* ---- the three timed operations ---- */

static void body_plain(void *ctx, size_t iters)
{
    run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        ba_residuals(&r->p, r->x, r->y);
        bench_clobber(r->y);
    }
}

static void body_sparse(void *ctx, size_t iters)
{
    run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        ad_csr J;
        ad_status s = ad_sparse_jacobian(ba_residuals_ad, &r->p, ba_inputs(&r->p), r->x,
                                         ba_outputs(&r->p), r->y, &J);
        if (s != AD_OK && r->status == AD_OK)
            r->status = s;
        bench_clobber(J.val);
        ad_csr_free(&J);
    }
}

static void body_per_obs(void *ctx, size_t iters)
{
    run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        ad_status s = ba_jacobian_by_observation(&r->p, r->x, r->y, &r->per_obs);
        if (s != AD_OK && r->status == AD_OK)
            r->status = s;
        bench_clobber(r->per_obs.val);
    }
}

/* ---- checking ---- */

/* The two Jacobians: same structure, values within rounding of each other. */
static int same_jacobian(const ad_csr *a, const ad_csr *b)
{
    if (a->rows != b->rows || a->cols != b->cols || a->nnz != b->nnz
        || memcmp(a->row_ptr, b->row_ptr, (a->rows + 1) * sizeof *a->row_ptr)
        || memcmp(a->col, b->col, a->nnz * sizeof *a->col))
        return 0;
    for (size_t e = 0; e < a->nnz; e++)
        if (!(fabs(a->val[e] - b->val[e]) <= 1e-12 * fabs(b->val[e])))
            return 0;
    return 1;
}

static int check(run *r)
{
    ad_csr J;
    ad_status s = ad_sparse_jacobian(ba_residuals_ad, &r->p, ba_inputs(&r->p), r->x,
                                     ba_outputs(&r->p), r->y, &J);
    if (s == AD_OK)
        s = ba_jacobian_by_observation(&r->p, r->x, r->y, &r->per_obs);
    if (s != AD_OK) {
        fprintf(stderr, "ba-bench: %s\n", ad_strerror(s));
        ad_csr_free(&J);
        return -1;
    }
    int same = same_jacobian(&J, &r->per_obs);
    printf("Jacobian %zu x %zu, %zu nonzeros; both ways agree: %s\n", J.rows, J.cols, J.nnz,
           same ? "yes" : "NO");
    ad_csr_free(&J);
    return same ? 0 : -1;
}

/* ---- input ---- */

/* arg: a BA file, or a directory holding DEFAULT_NAME.  Without it, the
 * shared ADBench data next to the repository, then the repository's copy. */
static int load(const char *arg, ba_problem *p, char *path, size_t size)
{
    const char *dirs[] = {arg, BA_REPO_ROOT "/../shared/adbench/data",
                          BA_REPO_ROOT "/tests/data/adbench"};
    for (size_t i = arg ? 0 : 1; i < (arg ? 1 : 3); i++) {
        snprintf(path, size, "%s/%s", dirs[i], DEFAULT_NAME);
        if (ba_load(path, p) == 0)
            return 0;
    }
    if (!arg)
        return -1;
    snprintf(path, size, "%s", arg);
    return ba_load(path, p);
}

static int setup(run *r, const char *arg)
{
    char path[4096];
    memset(r, 0, sizeof *r);
    if (load(arg, &r->p, path, sizeof path)) {
        fprintf(stderr, "ba-bench: cannot load %s: %s\n", arg ? arg : DEFAULT_NAME,
                strerror(errno));
        return -1;
    }
    printf("ADBench BA: %s\n  %zu cameras, %zu points, %zu observations\n", path, r->p.n_cams,
           r->p.n_pts, r->p.n_obs);
    r->x = malloc(ba_inputs(&r->p) * sizeof *r->x);
    r->y = malloc(ba_outputs(&r->p) * sizeof *r->y);
    if (!r->x || !r->y || ba_csr_alloc(&r->p, &r->per_obs)) {
        fprintf(stderr, "ba-bench: out of memory\n");
        return -1;
    }
    ba_pack(&r->p, r->x);
    return 0;
}

static void teardown(run *r)
{
    ba_csr_release(&r->per_obs);
    free(r->x);
    free(r->y);
    ba_free(&r->p);
}

/* ---- output ---- */

/* ns in a unit that keeps 4 significant digits readable. */
static void print_row(const char *what, bench_time t, double plain_ns, const char *target)
{
    char med[24], lo[24], hi[24];
    printf("%-32s %11s %11s %11s", what, fmt_time(med, t.median_ns), fmt_time(lo, t.min_ns),
           fmt_time(hi, t.max_ns));
    if (target)
        printf("  %6.2fx  (target <= %s)", t.median_ns / plain_ns, target);
    printf("\n");
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--reps N] [--min-ms MS] [PATH]\n"
            "  PATH        a BA data file, or a directory holding " DEFAULT_NAME "\n"
            "              (default: ../shared/adbench/data from the repository root,\n"
            "              then tests/data/adbench)\n"
            "  --reps N    timed batches per measurement, at least 7; the median is reported (11)\n"
            "  --min-ms MS each batch loops until it lasts this long (20)\n",
            argv0);
    exit(2);
}

static const char *parse(int argc, char **argv, bench_plan *plan)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            plan->reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-ms") && i + 1 < argc)
            plan->min_rep_ns = atof(argv[++i]) * 1e6;
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            usage(argv[0]);
    }
    if (plan->reps < 7 || plan->min_rep_ns <= 0.0)
        usage(argv[0]);
    return path;
}

int main(int argc, char **argv)
{
    bench_plan plan = {11, 20e6};
    const char *path = parse(argc, argv, &plan);
    run r;
    if (setup(&r, path) || check(&r)) {
        teardown(&r);
        return 1;
    }
    printf("median of %d batches, each >= %.0f ms, after a warm-up; the three alternate\n\n",
           plan.reps, plan.min_rep_ns * 1e-6);
    printf("%-32s %11s %11s %11s  %s\n", "", "median", "min", "max", "Jacobian / plain");
    /* side by side: batches of the three alternate */
    const bench_body body[3] = {body_plain, body_sparse, body_per_obs};
    void *const ctx[3] = {&r, &r, &r};
    bench_time t[3];
    bench_measure_side_by_side(&plan, 3, body, ctx, t);
    print_row("residuals, plain double", t[0], t[0].median_ns, NULL);
    print_row("ad_sparse_jacobian (automatic)", t[1], t[0].median_ns, "20x");
    print_row("ad_jacobian per observation", t[2], t[0].median_ns, "8x");
    printf("\npublished Jacobian / objective on BA (ADBench): Tapenade ~8.5, Adept ~25, "
           "ADOL-C ~300\n");
    int failed = r.status != AD_OK;
    if (failed)
        fprintf(stderr, "ba-bench: a timed call failed: %s\n", ad_strerror(r.status));
    teardown(&r);
    return failed;
}
