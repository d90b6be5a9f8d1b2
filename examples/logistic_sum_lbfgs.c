/* logistic_sum_lbfgs: an L2-regularised logistic regression fitted by
 * liblbfgs with the objective given as a sum of terms (dualrev/lbfgs.h,
 * ad_lbfgs_of_sum): one term per block of rows, the regulariser a term of
 * its own, each gradient one ad_gradient_sum on the library's threads.
 * A progress hook (ad_progress) prints each iteration, and stops the run
 * early with --stop-at K.
 *
 * The fit is made twice, on 1 thread and on --threads T (default 0: every
 * core); the library promises the same bits for every thread count, so the
 * two runs must take the same iterates: the program fails if they differ,
 * or if the optimum is not the one-tape objective's (examples/
 * logistic_objective.h through ad_gradient) to 1e-6.
 *
 * Usage: logistic_sum_lbfgs [--rows N] [--threads T] [--stop-at K] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dualrev.h>
#include <dualrev/lbfgs.h>
#include <lbfgs.h>

#define T ad_real
#define NAME(id) id##_ad
#include "logistic_objective.h"

_Static_assert(_Generic((lbfgsfloatval_t)0, double: 1, default: 0),
               "liblbfgs must be built with LBFGS_FLOAT == 64");

enum { FEATURES = 20, PARAMS = FEATURES + 1, ROWS_PER_TERM = 64 };
#define LAMBDA 1e-3

static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static double next_unit(uint64_t *state)
{
    return (double)(next_u64(state) >> 11) * 0x1.0p-53;
}

/* Rows from a hidden weight vector, a tenth of the labels flipped. */
static void make_data(struct logistic_data *d, double *x, double *y)
{
    uint64_t state = UINT64_C(20240607);
    double w[PARAMS];
    for (size_t j = 0; j < PARAMS; j++)
        w[j] = 2.0 * next_unit(&state) - 1.0;
    for (size_t i = 0; i < d->samples; i++) {
        double z = w[FEATURES];
        for (size_t j = 0; j < FEATURES; j++) {
            x[i * FEATURES + j] = 2.0 * next_unit(&state) - 1.0;
            z += w[j] * x[i * FEATURES + j];
        }
        y[i] = (z >= 0.0) == (next_unit(&state) >= 0.1) ? 1.0 : -1.0;
    }
}

/* Term t < nblocks: the mean loss's share of rows [64 t, 64 t + 64);
 * term nblocks: the regulariser.  The sum is logistic_objective_ad's
 * function; dualrev calls the terms from several threads at once, and they
 * only read the data. */
static size_t nblocks(const struct logistic_data *d)
{
    return (d->samples + ROWS_PER_TERM - 1) / ROWS_PER_TERM;
}

static ad_real term(size_t t, const ad_real *w, size_t n, void *ctx)
{
    const struct logistic_data *d = ctx;
    (void)n;
    if (t == nblocks(d)) {
        ad_real norm2 = ad_const(0.0);
        for (size_t j = 0; j < d->features; j++)
            norm2 = ad_add(norm2, ad_mul(w[j], w[j]));
        return ad_mul(norm2, 0.5 * d->lambda);
    }
    ad_real loss = ad_const(0.0);
    size_t end = (t + 1) * ROWS_PER_TERM < d->samples ? (t + 1) * ROWS_PER_TERM : d->samples;
    for (size_t i = t * ROWS_PER_TERM; i < end; i++) {
        ad_real margin = ad_mul(logistic_score_ad(w, d, i), d->y[i]);
        loss = ad_add(loss, logistic_softplus_ad(ad_neg(margin)));
    }
    return ad_div(loss, (double)d->samples);
}

/* The progress hook: a line per iteration; stops at iteration *stop_at
 * (0: never). */
typedef struct report {
    long stop_at;
    int quiet;
} report;

static int progress(const ad_progress *p, void *ctx)
{
    const report *r = ctx;
    if (!r->quiet)
        printf("%4ld  %18.15f  %10.3e  %6lu\n", p->iteration, p->f, p->gnorm, p->evaluations);
    return r->stop_at && p->iteration >= r->stop_at;
}

/* One fit from w = 0 on `threads` threads; 0 on success. */
static int fit(struct logistic_data *d, unsigned threads, report *r, double *w, double *fx,
               int *stopped)
{
    lbfgs_parameter_t param;
    lbfgs_parameter_init(&param);
    param.epsilon = 1e-10;
    param.max_iterations = 500;
    for (size_t j = 0; j < PARAMS; j++)
        w[j] = 0.0;
    ad_lbfgs b = ad_lbfgs_of_sum(term, d, nblocks(d) + 1, threads);
    b.progress = progress;
    b.progress_ctx = r;
    int ret;
    ad_status s = ad_lbfgs_minimize(PARAMS, w, fx, &b, &param, &ret);
    if (s != AD_OK) {
        fprintf(stderr, "the sum's gradient failed: %s\n", ad_strerror(s));
        return -1;
    }
    *stopped = b.stopped;
    printf("lbfgs returned %d%s after %lu gradients (threads = %u)\n", ret,
           b.stopped ? " (stopped by the progress hook)" : "", b.evaluations, threads);
    return ret < 0 && !b.stopped ? -1 : 0;
}

static int parse(int argc, char **argv, size_t *rows, unsigned *threads, long *stop_at)
{
    for (int i = 1; i < argc; i += 2) {
        char *end;
        if (i + 1 >= argc)
            return -1;
        unsigned long v = strtoul(argv[i + 1], &end, 10);
        if (*end || argv[i + 1][0] < '0' || argv[i + 1][0] > '9')
            return -1;
        if (!strcmp(argv[i], "--rows") && v > 0)
            *rows = v;
        else if (!strcmp(argv[i], "--threads") && v <= 64)
            *threads = (unsigned)v;
        else if (!strcmp(argv[i], "--stop-at"))
            *stop_at = (long)v;
        else
            return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    size_t rows = 20000;
    unsigned threads = 0;
    long stop_at = 0;
    if (parse(argc, argv, &rows, &threads, &stop_at) != 0) {
        fprintf(stderr, "usage: %s [--rows N] [--threads T] [--stop-at K]\n", argv[0]);
        return 2;
    }
    double *x = malloc(rows * FEATURES * sizeof *x), *y = malloc(rows * sizeof *y);
    if (!x || !y) {
        fprintf(stderr, "out of memory\n");
        free(x), free(y);
        return 1;
    }
    struct logistic_data d = {.samples = rows, .features = FEATURES, .x = x, .y = y,
                              .lambda = LAMBDA};
    make_data(&d, x, y);
    printf("logistic regression: %zu rows, %d features + bias, as %zu terms + the regulariser\n\n",
           rows, FEATURES, nblocks(&d));

    double w1[PARAMS], wt[PARAMS], f1, ft;
    int stopped1 = 0, stoppedt = 0, status = EXIT_FAILURE;
    const char *done = "converged";
    report r = {stop_at, 0};
    printf("%4s  %18s  %10s  %6s\n", "iter", "f", "|g|", "evals");
    if (fit(&d, threads, &r, wt, &ft, &stoppedt) != 0)
        goto out;
    r.quiet = 1;
    if (fit(&d, 1, &r, w1, &f1, &stopped1) != 0)
        goto out;
    if (memcmp(w1, wt, sizeof w1) != 0 || memcmp(&f1, &ft, sizeof f1) != 0) {
        fprintf(stderr, "the runs on 1 and %u threads differ\n", threads);
        goto out;
    }
    printf("1 thread and %u threads: the same iterates, bit for bit\n", threads);
    if (stoppedt) {
        printf("stopped at iteration %ld, f = %.15f\n", stop_at, ft);
        done = "stopped by the progress hook";
        status = stopped1 ? EXIT_SUCCESS : EXIT_FAILURE;
        goto out;
    }
    /* the optimum against the one-tape objective's gradient there */
    double fx, g[PARAMS], gn = 0.0;
    if (ad_gradient(logistic_objective_ad, &d, PARAMS, wt, &fx, g) != AD_OK) {
        fprintf(stderr, "ad_gradient failed\n");
        goto out;
    }
    for (size_t j = 0; j < PARAMS; j++)
        gn += g[j] * g[j];
    gn = sqrt(gn);
    printf("f = %.15f (one tape: %.15f), |g| (one tape) = %.3e\n", ft, fx, gn);
    if (fabs(fx - ft) > 1e-12 * fabs(fx) || gn > 1e-6) {
        fprintf(stderr, "not the one-tape objective's optimum\n");
        goto out;
    }
    status = EXIT_SUCCESS;
out:
    printf("result: %s\n", status == EXIT_SUCCESS ? done : "FAILED");
    free(x), free(y);
    return status;
}
