/* The AD tool dualrev is compared with: ADOL-C (peer_adolc.cpp) when the
 * build found it, else a stub (peer_none.c) that reports it absent.
 *
 * All functions return 0 on success and -1 on failure, and work on one tape
 * at a time: peer_prepare() sets it up for a program and size, and the two
 * timed calls then run on it. */
#ifndef BENCH_PEER_H
#define BENCH_PEER_H

#include <stddef.h>

#include "programs.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "ADOL-C 2.7.2", say; NULL when no peer was built. */
const char *peer_name(void);

/* Record program p of size n at x once and size the peer's buffers to the
 * tape it gave (records_hint, dualrev's record count, bounds the first
 * recording's buffers), so that every later tape stays in memory. */
int peer_prepare(bench_prog p, size_t n, const double *x, size_t inputs, size_t records_hint);

/* Everything one gradient costs: record the tape at x, then the gradient. */
int peer_tape_gradient(bench_prog p, size_t n, const double *x, size_t inputs, double *fx,
                       double *grad);

/* The gradient alone, at x, on the tape recorded last. */
int peer_gradient(const double *x, size_t inputs, double *grad);

/* Sparse Hessians (sec_sparse_hessian.c): function `which` (0 Rosenbrock,
 * 1 ARWHEAD, 2 BDQRTIC: hessian_objectives.h) of n inputs, taped at x, then
 * its Hessian's triangle, *nnz entries: with the sparsity pattern and
 * colouring found anew (new_pattern), or those of the last call. */
int peer_sparse_hessian(int which, size_t n, const double *x, int new_pattern, size_t *nnz);

#ifdef __cplusplus
}
#endif

#endif
