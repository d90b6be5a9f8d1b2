/* The benchmark run: its settings, the figures each section produces, and
 * the sections main() calls in turn. */
#ifndef BENCH_BENCH_H
#define BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "programs.h"
#include "timer.h"

typedef struct bench_ctx {
    bench_plan plan;
    const char *out_dir;    /* where the TSV files go; NULL for none */
    const char *peer;       /* the comparison tool's name; NULL if none */
} bench_ctx;

/* One program at one size: its gradient timed with dualrev and the peer,
 * and its plain-double evaluation. */
typedef struct grad_row {
    bench_prog prog;
    size_t n;
    int with_peer;            /* asked for: time the peer on this row */
    size_t inputs, records;   /* records: dualrev's, for one gradient */
    size_t tape_bytes;        /* those records' bytes */
    bench_time plain, dualrev;
    int peer_ok;              /* the peer ran, and its gradient agreed */
    bench_time peer_tape, peer_grad;
    const char *check;        /* "ok", or what failed */
} grad_row;

/* What dualrev's tape held and reserved for one gradient from a cold start. */
typedef struct mem_row {
    bench_prog prog;
    size_t n, inputs, records;
    size_t record_bytes, tape_bytes, adjoint_bytes;
} mem_row;

/* measure.c: fill everything in r past prog, n and with_peer. */
void measure_row(const bench_ctx *b, grad_row *r);

/* check.c: NULL when dualrev's value fx and gradient g at x are right (the
 * plain value; a central difference along a fixed direction; t_bad's 2^n),
 * else what failed. */
const char *check_gradient(bench_prog p, size_t n, const double *x, size_t inputs, double fx,
                           const double *g);

/* check.c: NULL when the peer's gradient h agrees with dualrev's g. */
const char *check_agree(const double *g, const double *h, size_t inputs);

/* check.c: deterministic numbers in [lo, lo + width) (xorshift64 from
 * seed), the inputs of the sections that make their own. */
void bench_fill(double *v, size_t count, uint64_t seed, double lo, double width);

/* check.c: a and b equal (also as infinities), or within rtol of the
 * larger in magnitude. */
int check_close(double a, double b, double rtol);

/* The sections; each prints its table and writes its TSV file. */
void section_programs(const bench_ctx *b, grad_row *rows, size_t count);
void section_tbad(const bench_ctx *b, grad_row *rows, size_t count);
void section_cache(const bench_ctx *b, grad_row *rows, size_t count);
void section_memory(const bench_ctx *b, mem_row *rows, size_t count);
void section_targets(const bench_ctx *b, const grad_row *progs, size_t nprogs,
                     const mem_row *mem, size_t nmem);

/* sec_primitives.c: each array primitive against its unrolled scalar form,
 * at the sizes of at most max_n elements; 1 when every row's check passed. */
int section_primitives(const bench_ctx *b, size_t max_n);

/* sec_hessian.c: ad_hvp and ad_hessian against ad_gradient, n = 10, 100,
 * 1000 (a dense objective's n x n elements at most max_n); 1 when every
 * row's check passed. */
int section_hessian(const bench_ctx *b, size_t max_n);

/* sec_sparse_hessian.c: ad_sparse_hessian and ad_sparse_hessian_values
 * against ad_gradient on three banded functions, n = 10^3 .. 10^6 (at most
 * max_n); 1 when every row's check passed. */
int section_sparse_hessian(const bench_ctx *b, size_t max_n);

#endif
