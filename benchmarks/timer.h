/* Timing: the median time per iteration over repeated, calibrated batches. */
#ifndef BENCH_TIMER_H
#define BENCH_TIMER_H

#include <stddef.h>

/* Runs the measured operation iters times. */
typedef void (*bench_body)(void *ctx, size_t iters);

typedef struct bench_plan {
    int reps;           /* batches timed; the median is reported */
    double min_rep_ns;  /* each batch loops until it lasts at least this */
} bench_plan;

typedef struct bench_time {
    double median_ns, min_ns, max_ns;  /* per iteration */
    size_t iters;                      /* per batch */
} bench_time;

bench_time bench_measure(const bench_plan *plan, bench_body body, void *ctx);

/* The same for count operations (at most BENCH_MAX_SIDE) whose times are
 * to be compared: their batches alternate, so that the ratios are measured
 * side by side, under the same load. */
#define BENCH_MAX_SIDE 6
void bench_measure_side_by_side(const bench_plan *plan, size_t count, const bench_body *body,
                                void *const *ctx, bench_time *out);

double bench_now_ns(void);

/* ns as "850 ns", "2.21 us", "13.4 ms" (ASCII, for alignment); "-" when
 * missing (NaN). */
const char *fmt_time(char buf[16], double ns);

/* Makes the compiler assume that memory, p's target included, was read and
 * changed here: a loop that re-evaluates the same function of the same
 * inputs cannot then be folded into one evaluation. */
#if defined(__GNUC__) || defined(__clang__)
#define bench_clobber(p) __asm__ volatile("" : : "r"(p) : "memory")
#else
#define bench_clobber(p) ((void)(p))
#endif

#endif
