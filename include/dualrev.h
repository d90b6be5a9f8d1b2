/* dualrev: reverse-mode automatic differentiation for C11.
 *
 * Write the objective with ad_real in place of double and the ad_* operations
 * in place of the arithmetic operators and <math.h>; call ad_gradient().
 * Every ad_real is a dual number: its value and the ID of the tape record that
 * produced it (0 for a constant).  See README.md and docs/ for the design. */
#ifndef DUALREV_H
#define DUALREV_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dualrev/record.h"

#ifdef __cplusplus
#error "dualrev.h is a C11 header"
#endif

/* A differentiable scalar.  Pass and return it by value; read it with
 * ad_value().  Treat the fields as read-only.  An ad_real made while an
 * objective is being recorded belongs to that recording and means nothing
 * after ad_gradient() returns. */
typedef struct ad_real {
    double v;     /* primal value */
    uint32_t id;  /* record ID; 0 = constant */
} ad_real;

typedef enum ad_status {
    AD_OK = 0,
    AD_EINVAL,    /* a NULL pointer or an argument out of its domain */
    AD_ENOMEM,    /* memory for the tape or the cotangents ran out */
    AD_ERANGE,    /* the recording outgrew the record ID range or the tape limit */
    AD_ENESTING,  /* ad_gradient nested deeper than AD_MAX_NESTING */
    AD_EFOREIGN,  /* the objective returned a value from another recording */
    AD_EBUSY      /* the call is not allowed while a recording is active */
} ad_status;

/* How deeply ad_gradient calls may nest inside objectives on one thread. */
#define AD_MAX_NESTING 16

typedef ad_real (*ad_objective)(const ad_real *x, size_t n, void *ctx);

/* Value and gradient of f at x (length n).
 *
 * Records f once on the calling thread's tape, then applies every record once
 * from the highest ID down.  n may be 0 (x and grad may then be NULL).  On any
 * error *fx and grad[0..n) are set to NaN, so that no stale or partial result
 * looks valid.  May be called from inside an objective being recorded: the
 * inner call uses its own tape, and the outer objective may use the returned
 * numbers as constants.  Thread-safe: each thread has its own tapes. */
AD_API ad_status ad_gradient(ad_objective f, void *ctx, size_t n, const double *x,
                             double *fx, double *grad);

AD_API const char *ad_strerror(ad_status s);

static inline ad_real ad_const(double c)
{
    ad_real r = {c, 0};
    return r;
}

static inline double ad_value(ad_real x)
{
    return x.v;
}

/* ---- vector-valued functions ("You Only Linearize Once") ----
 *
 * f reads x[0..n) and writes y[0..m).  One recording of f at x is its
 * linearisation: a forward sweep over it gives J v, a reverse sweep w^T J.
 * An output f does not write is NaN.  n or m may be 0: the results are then
 * empty (J v and w^T J of an empty map are zero vectors), and the pointers
 * for empty arrays may be NULL.  On error every output array is set to NaN
 * (a CSR to empty) and AD_EINVAL, AD_ENOMEM, AD_ERANGE, AD_ENESTING or
 * AD_EFOREIGN is returned. */
typedef void (*ad_function)(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx);

/* y = f(x) and jv = J v: one recording, one forward sweep. */
AD_API ad_status ad_jvp(ad_function f, void *ctx, size_t n, const double *x, const double *v,
                        size_t m, double *y, double *jv);

/* y = f(x) and wj = J^T w: one recording, one reverse sweep. */
AD_API ad_status ad_vjp(ad_function f, void *ctx, size_t n, const double *x,
                        size_t m, const double *w, double *y, double *wj);

/* y = f(x) and the m x n Jacobian, row-major: one recording, then n forward
 * or m reverse sweeps, whichever is fewer. */
AD_API ad_status ad_jacobian(ad_function f, void *ctx, size_t n, const double *x,
                             size_t m, double *y, double *jac);

/* A recorded linear map: f is run once by ad_linearize; ad_linear_jvp and
 * ad_linear_vjp apply J and J^T to any number of vectors without running f
 * again and without allocating.  One handle is used by one thread at a time;
 * ctx is not kept. */
typedef struct ad_linear ad_linear;
AD_API ad_status ad_linearize(ad_function f, void *ctx, size_t n, const double *x,
                              size_t m, double *y, ad_linear **out);
AD_API ad_status ad_linear_jvp(ad_linear *L, const double *v, double *jv);
AD_API ad_status ad_linear_vjp(ad_linear *L, const double *w, double *wj);
AD_API void ad_linear_free(ad_linear *L);

/* Compressed sparse rows: row i holds col[row_ptr[i] .. row_ptr[i+1]) and
 * the matching val, columns ascending.  Free with ad_csr_free. */
typedef struct ad_csr {
    size_t rows, cols, nnz;
    size_t *row_ptr;
    size_t *col;
    double *val;
} ad_csr;

/* y = f(x) and its Jacobian as CSR, with the structure found on the tape:
 * an entry for every input a row reaches, even where the value is 0.  Each
 * row is resolved by staging (paper, section 6), in time proportional to the
 * records it reaches. */
AD_API ad_status ad_sparse_jacobian(ad_function f, void *ctx, size_t n, const double *x,
                                    size_t m, double *y, ad_csr *J);
AD_API void ad_csr_free(ad_csr *J);

/* Cap the number of records one recording on this thread may hold
 * (0 restores the default: the whole ID range, about 4.29e9).  Past the cap
 * ad_gradient returns AD_ERANGE.  Returns the previous cap. */
AD_API size_t ad_set_tape_limit(size_t max_records);

/* What the calling thread's outermost tape holds and has reserved, as of its
 * last recording.  Memory is kept between calls so that it stays warm. */
typedef struct ad_tape_stats {
    size_t inputs;         /* inputs of the last recording */
    size_t records;        /* records of the last recording */
    size_t record_bytes;   /* bytes per record (and 12 per argument) */
    size_t tape_bytes;     /* bytes reserved for records */
    size_t adjoint_bytes;  /* bytes reserved for cotangents */
} ad_tape_stats;

AD_API ad_status ad_tape_stats_get(ad_tape_stats *out);

/* Print the records of this thread's last top-level recording (at most
 * max_records of them): ID, argument IDs and partials.  For looking at small
 * tapes; AD_EINVAL if there is no complete recording, AD_EBUSY inside one. */
AD_API ad_status ad_tape_dump(FILE *out, size_t max_records);

/* Give the calling thread's tape memory back to the system.  AD_EBUSY while
 * a recording is active on this thread.  Memory is otherwise kept until the
 * thread exits. */
AD_API ad_status ad_release(void);

#include "dualrev/ops.h"
#include "dualrev/nary.h"
#include "dualrev/generic.h"

#endif
