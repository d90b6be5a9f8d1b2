/* ADBench Gaussian mixture model (GMM) for dualrev: loader, reference files
 * and the objective in two versions, shared by tests/test_gmm.c and
 * benchmarks/gmm_bench.c.
 *
 * The objective (ADBench; /work/shared/adbench/README.md, "GMM") is a
 * function of params = [alpha (k), mu (k x d), icf (k x s)], s = d(d+1)/2,
 * k(d+1)(d+2)/2 values in all; the points x, gamma and m are data.  Its
 * definition is in gmm_objective.h, written once for any number type:
 *   GMM_SCALAR      scalar operations only, as ADBench writes it;
 *   GMM_PRIMITIVES  the array primitives (ad_dot, ad_sqnorm, ad_logsumexp,
 *                   ad_sum), arranged for a small tape.
 *
 * The objective splits into a sum over the points plus terms that do not
 * depend on them (the constant, -n lse(alpha) and the Wishart prior), so a
 * gradient can be taken in batches of points, the first batch carrying those
 * global terms: the sum of the batches' gradients is the gradient, and each
 * batch's tape is as small as the batch.
 *
 * The first part of this header is plain C that C++ can include too (the
 * ADOL-C peer, benchmarks/peer_adolc_gmm.cpp, includes the same objective
 * source); the dualrev part is C only. */
#ifndef GMM_H
#define GMM_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gmm_problem {
    size_t d, k, n;  /* dimension, components, points */
    double *alpha;   /* k */
    double *mu;      /* k x d */
    double *icf;     /* k x s: d log-diagonal entries q, then the d(d-1)/2
                        entries l of Q's strict lower triangle, column by
                        column */
    double *x;       /* n x d */
    double gamma;    /* Wishart prior: gamma > 0 */
    int m;           /* and m >= 0 */
} gmm_problem;

/* Loaders fill err (when not NULL) with a message naming the file, the line
 * and what was expected there, and set errno: the one from fopen, EINVAL for
 * a malformed file, ENOMEM.  They return 0, or -1 with the output zeroed;
 * they never exit or print. */
#define GMM_ERR_SIZE 256

/* Reads an ADBench GMM input file: "d k n", alpha, mu, icf, x, "gamma m". */
int gmm_load(const char *path, gmm_problem *p, char err[GMM_ERR_SIZE]);
/* The same from an open stream; name is used in messages. */
int gmm_read(FILE *f, const char *name, gmm_problem *p, char err[GMM_ERR_SIZE]);
void gmm_free(gmm_problem *p);

size_t gmm_inputs(const gmm_problem *p);  /* k (d+1)(d+2)/2 */

/* The parameter vector [alpha, mu, icf] of the problem (gmm_inputs values). */
void gmm_pack(const gmm_problem *p, double *params);

/* A reference result: the contents of an ADBench "manual" file (header
 * "# d k n gamma m = ...", the objective twice, then every gradient entry
 * on a line of its own), or of a subset file made from one by
 * tests/data/adbench/make_gmm_subset.py (the same header and objectives,
 * then "index value" lines, indices ascending). */
typedef struct gmm_reference {
    size_t d, k, n;
    double gamma;
    int m;
    double objective;
    size_t count;   /* gradient entries given: all k(d+1)(d+2)/2, or a subset */
    size_t *index;  /* their positions in the gradient, ascending */
    double *grad;   /* their values */
} gmm_reference;

int gmm_load_reference(const char *path, gmm_reference *ref, char err[GMM_ERR_SIZE]);
int gmm_read_reference(FILE *f, const char *name, gmm_reference *ref, char err[GMM_ERR_SIZE]);
void gmm_reference_free(gmm_reference *ref);

/* Whether a reference belongs to a problem (same d, k, n, gamma, m). */
int gmm_reference_matches(const gmm_reference *ref, const gmm_problem *p);

/* The ADOL-C peer (benchmarks/peer_adolc_gmm.cpp), built into gmm-bench
 * only when ADOL-C was found (GMM_HAVE_ADOLC): the scalar version of the
 * objective with ADOL-C's adouble, taped and differentiated per batch of
 * points as gmm_gradient does.  gmm_adolc_prepare picks the batch whose
 * tape fits budget_bytes, records the first batch once and sizes ADOL-C's
 * buffers to it, so that later tapes stay in memory; it returns 0, or -1 if
 * ADOL-C failed or the tape spilled to files. */
const char *gmm_adolc_name(void);
int gmm_adolc_prepare(const gmm_problem *p, size_t budget_bytes, const double *params,
                      size_t *batch, size_t *tape_bytes);
/* Taping and gradient() of every batch, summed; 0 or -1. */
int gmm_adolc_gradient(const gmm_problem *p, size_t batch, const double *params, double *fx,
                       double *grad);

#ifdef __cplusplus
}
#else

#include "dualrev.h"

typedef enum gmm_version { GMM_SCALAR, GMM_PRIMITIVES } gmm_version;

/* Scratch memory for evaluating a problem, either version, either number
 * type, so that the objective itself never allocates.  One evaluation at a
 * time uses it: one gmm_work per thread. */
typedef struct gmm_work {
    void *scratch;  /* numbers (double or ad_real) */
    double *xe;     /* d + 1: 1, then one point (primitive version) */
    ad_mat *mats;   /* k recorded matrices (primitive version) */
    double *grad;   /* one batch's gradient */
} gmm_work;

/* Returns 0, or -1 (out of memory) with w zeroed. */
int gmm_work_init(gmm_work *w, const gmm_problem *p);
void gmm_work_free(gmm_work *w);

/* One evaluation: the sum over points [i0, i1) (i0 <= i1 <= n), plus the
 * global terms if `global`.  The whole objective is {.., 0, n, 1}. */
typedef struct gmm_eval {
    const gmm_problem *p;
    gmm_work *w;
    gmm_version version;
    size_t i0, i1;
    int global;
} gmm_eval;

/* The objective in plain double (the same source as gmm_objective_ad). */
double gmm_objective(const gmm_eval *e, const double *params);

/* The objective as an ad_objective; ctx is a const gmm_eval *, and n must
 * be gmm_inputs(e->p). */
ad_real gmm_objective_ad(const ad_real *params, size_t n, void *ctx);

/* The whole objective and its gradient, one ad_gradient per batch of
 * `batch` points (0: all points in one), summed.  records, if not NULL,
 * receives the records of all the batches' tapes (ad_tape_stats).  On an
 * error, the status of the first failing batch, and *fx and grad are NaN. */
ad_status gmm_gradient(gmm_version v, const gmm_problem *p, gmm_work *w, size_t batch,
                       const double *params, double *fx, double *grad, size_t *records);

#endif

#endif
