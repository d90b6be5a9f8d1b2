/* The benchmark programs: which there are, their inputs, and the figures the
 * dual-numbers paper reports for them.
 *
 * Every program takes the ad_objective shape (x, inputs, ctx), with ctx
 * pointing at the program's size n as a size_t:
 *   scalar mult   x*y                                      2 inputs
 *   dot           x . y, x and y of length n               2n inputs
 *   sum-mat-vec   sum of A v, A m x m, v of length m,      m*m + m inputs
 *                 n = m*m (so that work grows linearly in n, as in the paper)
 *   rotate        sum of the components of rotate_vec_by_quat(v, q)
 *                                                          3 + 4 inputs
 *   t_bad         x_k = x_{k-1} * x_{k-1}, k = 1..n        1 input
 *   gmm Q(mu-x)   sum over n points of Q (mu - x_i), Q lower triangular
 *                 64 x 64: GMM's inner loop (objectives.h)  2144 inputs
 *   dot, sum-mat-vec "(ad_dot)": the same two programs written with
 *                 dualrev's array primitives (one n-ary record per ad_dot);
 *                 ADOL-C, which has no such primitive, runs its scalar form
 *
 * Read by C and by the C++ peer; the part that needs dualrev.h is C only. */
#ifndef BENCH_PROGRAMS_H
#define BENCH_PROGRAMS_H

#include <math.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bench_prog {
    PROG_SCALAR_MULT,
    PROG_DOT,
    PROG_SUM_MAT_VEC,
    PROG_DOT_ARRAY,
    PROG_SUM_MAT_VEC_ARRAY,
    PROG_ROTATE,
    PROG_T_BAD,
    PROG_GMM_QX,
    PROG_COUNT
} bench_prog;

/* The matrix side m of sum-mat-vec of size n: the largest m with m*m <= n. */
static inline size_t prog_side(size_t n)
{
    size_t m = (size_t)sqrt((double)n);
    while (m * m > n)  /* sqrt is correctly rounded; these only guard it */
        m--;
    while ((m + 1) * (m + 1) <= n)
        m++;
    return m;
}

/* gmm Q(mu-x): the dimension, and component j of the made-up point i, in
 * [0.5, 1.5) (no division: it is in the timed loop). */
#define PROG_QX_D 64

static inline double prog_qx_point(size_t i, size_t j)
{
    return 0.5 + 0.015625 * (double)((i + 3 * j) & 63);
}

const char *prog_name(bench_prog p);
size_t prog_inputs(bench_prog p, size_t n);

/* Deterministic inputs in [0.5, 1.5), except t_bad's x_0 = 1, which keeps
 * every x_k finite (x_k = 1) while the gradient is 2^n. */
void prog_fill_inputs(bench_prog p, double *x, size_t inputs);

/* Table 1 of the paper (Haskell, microseconds per gradient; the sizes are
 * not stated there): "TH" is the paper's implementation, "ad" Kmett's ad 4.5.
 * Negative when the table has no figure (t_bad). */
double prog_paper_th_us(bench_prog p);
double prog_paper_ad_us(bench_prog p);

typedef double (*prog_plain_fn)(const double *x, size_t inputs, void *ctx);

/* The program's source compiled for double. */
prog_plain_fn prog_plain(bench_prog p);

#ifdef __cplusplus
}
#else

#include "dualrev.h"

/* The same source compiled for ad_real. */
ad_objective prog_objective(bench_prog p);

#endif

#endif
