/* gmm-eigen-bench: ADBench GMM (gmm_1k_d10_K25 by default) written with
 * Eigen (gmm_eigen.cpp, dualrev/eigen.hpp) against the C natural version
 * (gmm/gmm_objective.h's scalar source, gmm_gradient(GMM_SCALAR)), in one
 * run, side by side:
 *   - the objective in plain double: the C scalar source, the Eigen source;
 *   - the gradient: C natural (one ad_gradient), Eigen's scalar loops
 *     (ad::gradient of the Eigen source), and the Eigen source with the
 *     bridge to recorded matrices (ad::mat_make, ad::mat_sqnorm);
 * each gradient over the C plain objective, and the Eigen ones over the C
 * natural gradient.  Every gradient is checked against ADBench's reference
 * first (exit 1 on a failure).
 *
 * usage: gmm-eigen-bench [--reps N] [--min-ms MS] [DIR [NAME]]
 *   DIR holds NAME.txt and NAME_manual.txt (default: tests/data/adbench,
 *   gmm_1k_d10_K25). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gmm.h"
#include "timer.h"

/* gmm_eigen.cpp */
double gmm_eigen_objective(const gmm_problem *p, const double *params);
ad_status gmm_eigen_gradient(const gmm_problem *p, int bridge, const double *params, double *fx,
                             double *grad);

#define RTOL_F 1e-12
#define RTOL_GRAD 1e-9

typedef struct bench {
    gmm_problem p;
    gmm_reference ref;
    gmm_work w;
    double *x, *grad;
    size_t inputs;
    ad_status status;  /* the first failure in a timed body */
} bench;

static volatile double sink;

static void body_plain_c(void *ctx, size_t iters)
{
    bench *b = ctx;
    gmm_eval e = {&b->p, &b->w, GMM_SCALAR, 0, b->p.n, 1};
    for (size_t k = 0; k < iters; k++) {
        bench_clobber(b->x);
        sink = gmm_objective(&e, b->x);
    }
}

static void body_plain_eigen(void *ctx, size_t iters)
{
    bench *b = ctx;
    for (size_t k = 0; k < iters; k++) {
        bench_clobber(b->x);
        sink = gmm_eigen_objective(&b->p, b->x);
    }
}

static void note(bench *b, ad_status s)
{
    if (s != AD_OK && b->status == AD_OK)
        b->status = s;
}

static void body_grad_c(void *ctx, size_t iters)
{
    bench *b = ctx;
    double fx;
    for (size_t k = 0; k < iters; k++) {
        note(b, gmm_gradient(GMM_SCALAR, &b->p, &b->w, 0, b->x, &fx, b->grad, NULL));
        bench_clobber(b->grad);
    }
}

static void body_grad_eigen(void *ctx, size_t iters)
{
    bench *b = ctx;
    double fx;
    for (size_t k = 0; k < iters; k++) {
        note(b, gmm_eigen_gradient(&b->p, 0, b->x, &fx, b->grad));
        bench_clobber(b->grad);
    }
}

static void body_grad_bridge(void *ctx, size_t iters)
{
    bench *b = ctx;
    double fx;
    for (size_t k = 0; k < iters; k++) {
        note(b, gmm_eigen_gradient(&b->p, 1, b->x, &fx, b->grad));
        bench_clobber(b->grad);
    }
}

/* Against the reference: 0 if it passes. */
static int check(const char *who, const bench *b, ad_status s, double fx, size_t *records)
{
    ad_tape_stats st;
    if (s == AD_OK)
        s = ad_tape_stats_get(&st);
    if (s != AD_OK) {
        printf("  %-22s FAIL: %s\n", who, ad_strerror(s));
        return 1;
    }
    double ef = fabs(fx - b->ref.objective) / fabs(b->ref.objective), eg = 0.0;
    for (size_t e = 0; e < b->ref.count; e++) {
        double err = fabs(b->grad[b->ref.index[e]] - b->ref.grad[e]) / fabs(b->ref.grad[e]);
        eg = err > eg || err != err ? err : eg;
    }
    int ok = ef <= RTOL_F && eg <= RTOL_GRAD;
    *records = st.records;
    printf("  %-22s %s (objective %.1e, gradient %.1e); %zu records of %zu B\n", who,
           ok ? "PASS" : "FAIL", ef, eg, st.records, st.record_bytes);
    return !ok;
}

static void row(const char *what, bench_time t, double plain_ns, double grad_c_ns)
{
    char med[24], lo[24], hi[24];
    printf("  %-34s %10s %10s %10s  %7.2f", what, fmt_time(med, t.median_ns),
           fmt_time(lo, t.min_ns), fmt_time(hi, t.max_ns), t.median_ns / plain_ns);
    if (grad_c_ns > 0)
        printf("  %7.2f", t.median_ns / grad_c_ns);
    printf("\n");
}

int main(int argc, char **argv)
{
    bench_plan plan = {7, 20e6};
    const char *dir = GMM_EIGEN_DATA_DIR, *name = "gmm_1k_d10_K25";
    int positional = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            plan.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-ms") && i + 1 < argc)
            plan.min_rep_ns = atof(argv[++i]) * 1e6;
        else if (argv[i][0] != '-' && positional == 0 && ++positional)
            dir = argv[i];
        else if (argv[i][0] != '-' && positional == 1 && ++positional)
            name = argv[i];
        else {
            fprintf(stderr, "usage: %s [--reps N] [--min-ms MS] [DIR [NAME]]\n", argv[0]);
            return 2;
        }
    }
    if (plan.reps < 3 || plan.min_rep_ns <= 0.0) {
        fprintf(stderr, "gmm-eigen-bench: --reps at least 3, --min-ms above 0\n");
        return 2;
    }

    bench b;
    char path[4096], err[GMM_ERR_SIZE];
    memset(&b, 0, sizeof b);
    snprintf(path, sizeof path, "%s/%s.txt", dir, name);
    if (gmm_load(path, &b.p, err)) {
        fprintf(stderr, "gmm-eigen-bench: %s\n", err);
        return 1;
    }
    snprintf(path, sizeof path, "%s/%s_manual.txt", dir, name);
    if (gmm_load_reference(path, &b.ref, err) || !gmm_reference_matches(&b.ref, &b.p)) {
        fprintf(stderr, "gmm-eigen-bench: %s\n", *err ? err : "the reference is for another problem");
        gmm_free(&b.p);
        return 1;
    }
    b.inputs = gmm_inputs(&b.p);
    b.x = malloc(b.inputs * sizeof *b.x);
    b.grad = malloc(b.inputs * sizeof *b.grad);
    int failed = 0;
    if (!b.x || !b.grad || gmm_work_init(&b.w, &b.p)) {
        fprintf(stderr, "gmm-eigen-bench: out of memory\n");
        failed = 1;
        goto out;
    }
    gmm_pack(&b.p, b.x);
    printf("ADBench GMM %s (d %zu, k %zu, n %zu; %zu parameters): Eigen-written against C\n",
           name, b.p.d, b.p.k, b.p.n, b.inputs);

    double fx = 0.0;
    size_t rec_c = 0, rec_e = 0, rec_b = 0;
    ad_status s = gmm_gradient(GMM_SCALAR, &b.p, &b.w, 0, b.x, &fx, b.grad, NULL);
    failed += check("C natural (scalar)", &b, s, fx, &rec_c);
    s = gmm_eigen_gradient(&b.p, 0, b.x, &fx, b.grad);
    failed += check("Eigen", &b, s, fx, &rec_e);
    s = gmm_eigen_gradient(&b.p, 1, b.x, &fx, b.grad);
    failed += check("Eigen + recorded mats", &b, s, fx, &rec_b);
    double fe = gmm_eigen_objective(&b.p, b.x);
    if (!(fabs(fe - b.ref.objective) <= RTOL_F * fabs(b.ref.objective))) {
        printf("  Eigen in double FAIL: %.17g, reference %.17g\n", fe, b.ref.objective);
        failed++;
    }
    if (failed)
        goto out;

    bench_body body[5] = {body_plain_c, body_grad_c, body_grad_eigen, body_grad_bridge,
                          body_plain_eigen};
    void *const ctx[5] = {&b, &b, &b, &b, &b};
    bench_time t[5];
    bench_measure_side_by_side(&plan, 5, body, ctx, t);
    if (b.status != AD_OK) {
        printf("  a timed gradient failed: %s\n", ad_strerror(b.status));
        failed = 1;
        goto out;
    }
    printf("\nmedian of %d batches, each >= %.0f ms, side by side\n", plan.reps,
           plan.min_rep_ns * 1e-6);
    printf("  %-34s %10s %10s %10s  %7s  %7s\n", "", "median", "min", "max", "/ plain", "/ C grad");
    row("plain double, C scalar source", t[0], t[0].median_ns, 0);
    row("plain double, Eigen source", t[4], t[0].median_ns, 0);
    row("gradient, C natural (scalar)", t[1], t[0].median_ns, t[1].median_ns);
    row("gradient, Eigen", t[2], t[0].median_ns, t[1].median_ns);
    row("gradient, Eigen + ad::mat_sqnorm", t[3], t[0].median_ns, t[1].median_ns);
    printf("  records per gradient: C natural %zu, Eigen %zu, Eigen + recorded mats %zu\n", rec_c,
           rec_e, rec_b);
out:
    free(b.x);
    free(b.grad);
    gmm_work_free(&b.w);
    gmm_reference_free(&b.ref);
    gmm_free(&b.p);
    if (failed)
        fprintf(stderr, "gmm-eigen-bench: %d check(s) failed\n", failed);
    return failed ? 1 : 0;
}
