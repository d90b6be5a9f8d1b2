/* Timing on a noisy shared machine: warm up, size each batch to last long
 * enough for the clock and the scheduler, repeat, and keep the median, which
 * one descheduled batch cannot move. */
#define _POSIX_C_SOURCE 199309L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "timer.h"

#define MAX_REPS 101

double bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double time_batch(bench_body body, void *ctx, size_t iters)
{
    double t0 = bench_now_ns();
    body(ctx, iters);
    return bench_now_ns() - t0;
}

/* Iterations per batch: grown until one batch lasts min_rep_ns.  The batches
 * run while growing are a second warm-up, after the single call that first
 * touches the tape's memory. */
static size_t calibrate(const bench_plan *plan, bench_body body, void *ctx)
{
    size_t iters = 1;
    for (;;) {
        double t = time_batch(body, ctx, iters);
        if (t >= plan->min_rep_ns)
            return iters;
        /* Aim 20% past the target, but grow at most 10x per step so that one
         * fast outlier cannot make the next batch huge. */
        double grow = t > 0.0 ? 1.2 * plan->min_rep_ns / t : 10.0;
        if (grow > 10.0)
            grow = 10.0;
        size_t next = (size_t)((double)iters * grow);
        iters = next > iters ? next : iters + 1;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static bench_time summary(double *samples, int reps, size_t iters)
{
    qsort(samples, (size_t)reps, sizeof *samples, cmp_double);
    bench_time r = {0.0, samples[0], samples[reps - 1], iters};
    r.median_ns = reps % 2 ? samples[reps / 2]
                           : 0.5 * (samples[reps / 2 - 1] + samples[reps / 2]);
    return r;
}

static int clamp_reps(const bench_plan *plan)
{
    return plan->reps < 1 ? 1 : plan->reps > MAX_REPS ? MAX_REPS : plan->reps;
}

bench_time bench_measure(const bench_plan *plan, bench_body body, void *ctx)
{
    bench_time r;
    bench_measure_side_by_side(plan, 1, &body, &ctx, &r);
    return r;
}

/* Batch i of every operation runs before batch i + 1 of any: a machine
 * that slows down for a while slows them all, not one, and their ratios
 * hold. */
void bench_measure_side_by_side(const bench_plan *plan, size_t count, const bench_body *body,
                                void *const *ctx, bench_time *out)
{
    double samples[BENCH_MAX_SIDE][MAX_REPS];
    size_t iters[BENCH_MAX_SIDE];
    int reps = clamp_reps(plan);
    if (count > BENCH_MAX_SIDE) {
        fprintf(stderr, "bench_measure_side_by_side: more than %d operations\n", BENCH_MAX_SIDE);
        exit(2);
    }
    for (size_t k = 0; k < count; k++) {
        body[k](ctx[k], 1);
        iters[k] = calibrate(plan, body[k], ctx[k]);
    }
    for (int i = 0; i < reps; i++)
        for (size_t k = 0; k < count; k++)
            samples[k][i] = time_batch(body[k], ctx[k], iters[k]) / (double)iters[k];
    for (size_t k = 0; k < count; k++)
        out[k] = summary(samples[k], reps, iters[k]);
}

const char *fmt_time(char buf[16], double ns)
{
    static const char *const units[] = {"ns", "us", "ms", "s"};
    if (isnan(ns))
        return "-";
    int u = 0;
    while (ns >= 1000.0 && u < 3) {
        ns /= 1000.0;
        u++;
    }
    /* Three significant digits. */
    snprintf(buf, 16, ns < 10.0 ? "%.2f %s" : ns < 100.0 ? "%.1f %s" : "%.0f %s", ns, units[u]);
    return buf;
}
