/* dualrev: reverse-mode automatic differentiation for C11.
 *
 * Write the objective with ad_real in place of double and the ad_* operations
 * in place of the arithmetic operators and <math.h>; call ad_gradient().
 * Every ad_real is a dual number: its value and the ID of the tape record that
 * produced it (0 for a constant).  See README.md and docs/ for the design. */
#ifndef DUALREV_H
#define DUALREV_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Fast-math lets the compiler assume no NaN, Inf or signed zero and reorder
 * sums: the inlined operations then lose the NaN and Inf conventions of
 * docs/conventions.md (log(-1) gets a finite partial, NaN checks fold to
 * false), bitwise agreement with the double source, and the overflow
 * detection of scaled seeds.  Define AD_ALLOW_FAST_MATH to accept that. */
#if (defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)) && \
    !defined(AD_ALLOW_FAST_MATH)
#error "dualrev: -ffast-math / -ffinite-math-only break dualrev's guarantees: NaN and Inf partials (log(-1), sqrt(0), 0*Inf) become wrong or finite, results stop matching the double source bitwise, and scaled-seed overflow goes undetected. Compile code that includes dualrev.h without them, or define AD_ALLOW_FAST_MATH to accept this."
#endif

#include "dualrev/version.h"
#include "dualrev/record.h"

AD__EXTERN_C_BEGIN

/* A differentiable scalar.  Pass and return it by value; read it with
 * ad_value().  Treat the fields as read-only.  An ad_real made while an
 * objective is being recorded belongs to that recording and carries its
 * tag: used in, or returned to, any other recording (a later call, another
 * thread, another nesting level) it fails that one with AD_EFOREIGN. */
typedef struct ad_real {
    double v;      /* primal value */
    uint32_t id;   /* record ID; 0 = constant */
    uint32_t tag;  /* the recording that made it (record.h); 0 for a constant */
#ifdef __cplusplus
    /* C++ only: a number converts to a constant (ID 0, tag 0), as
     * ad_const() makes it, so that ad::real x = 1.0, T(0) in templates and
     * Eigen's Scalar(1) compile; {v, id, tag} still builds one field by
     * field.  The default constructor is the trivial one: `ad_real r;` is
     * uninitialised as in C, `ad_real r{}` is the constant 0.  None of
     * this changes the layout, the size or how it is passed (in two
     * registers: it stays trivially copyable). */
    ad_real() = default;
    constexpr ad_real(double c) noexcept : v(c), id(0), tag(0) {}
    constexpr ad_real(int c) noexcept : v(c), id(0), tag(0) {}
    constexpr ad_real(unsigned c) noexcept : v(c), id(0), tag(0) {}
    constexpr ad_real(long c) noexcept : v(static_cast<double>(c)), id(0), tag(0) {}
    constexpr ad_real(unsigned long c) noexcept : v(static_cast<double>(c)), id(0), tag(0) {}
    constexpr ad_real(long long c) noexcept : v(static_cast<double>(c)), id(0), tag(0) {}
    constexpr ad_real(unsigned long long c) noexcept : v(static_cast<double>(c)), id(0), tag(0) {}
    constexpr ad_real(double value, uint32_t rid, uint32_t rtag) noexcept
        : v(value), id(rid), tag(rtag)
    {
    }
#endif
} ad_real;

/* The tag fills what was padding: an ad_real is two registers, passed and
 * returned in them. */
#ifdef __cplusplus
static_assert(sizeof(ad_real) == 16, "ad_real is 16 bytes");
static_assert(alignof(ad_real) == alignof(double), "ad_real is aligned as a double");
static_assert(__is_trivially_copyable(ad_real), "ad_real is passed in registers");
static_assert(__is_standard_layout(ad_real), "ad_real has C's layout");
static_assert(__is_trivial(ad_real), "ad_real is trivial: `ad_real r;` costs nothing");
static_assert(offsetof(ad_real, id) == 8 && offsetof(ad_real, tag) == 12,
              "ad_real's fields are where C puts them");
#else
_Static_assert(sizeof(ad_real) == 16, "ad_real is 16 bytes");
#endif

static inline uint64_t ad__key(ad_real x)
{
#ifdef AD__KEY_WORD
    uint64_t k;
    memcpy(&k, &x.id, sizeof k);  /* id and tag, adjacent: one register */
    return k;
#else
    return ad__key_of(x.id, x.tag);
#endif
}

/* The value v with the key k (ad__key): k = key0 + ID names a record of the
 * recording whose key0 it is, key0 itself a constant of it. */
static inline ad_real ad__real_of(double v, uint64_t k)
{
    ad_real r;
    r.v = v;
#ifdef AD__KEY_WORD
    memcpy(&r.id, &k, sizeof k);
#else
    r.id = (uint32_t)k;
    r.tag = (uint32_t)(k >> 32);
#endif
    return r;
}

/* A value that a primitive recorded as `id` (0: a constant) on the active
 * recording. */
static inline ad_real ad__made(double v, uint32_t id)
{
    ad_real r = {v, id, id ? ad__tag(ad__active) : 0};
    return r;
}

typedef enum ad_status {
    AD_OK = 0,
    AD_EINVAL,    /* a NULL pointer or an argument out of its domain */
    AD_ENOMEM,    /* memory for the tape or the cotangents ran out */
    AD_ERANGE,    /* the recording outgrew the record ID range or the tape limit */
    AD_ENESTING,  /* ad_gradient nested deeper than AD_MAX_NESTING */
    AD_EFOREIGN,  /* a value from another recording was used (or returned) */
    AD_EBUSY,     /* the call is not allowed while a recording is active */
    AD_ENOTSUP,   /* a record has no rule for this sweep, or a program or nested call cannot keep it */
    AD_ENONFINITE, /* AD_CHECK_FINITE: a number became Inf or NaN from finite ones (ad_last_fault) */
    AD_ESTRUCTURE, /* x reaches a pair outside the structure fixed by an earlier call */
    AD_EOVERFLOW,  /* a derivative left the double range on its way and made NaN of results */
    AD_EBRANCH,    /* a program's recorded comparison (ad_lt, ...) comes out the other way here */
    AD_ENOTPOSDEF, /* a matrix to factor is not positive definite (dualrev/cholmod.h) */
    AD_ECOMM       /* a communication call failed (dualrev/mpi.h: an MPI call returned an error) */
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
AD_NODISCARD
AD_API ad_status ad_gradient(ad_objective f, void *ctx, size_t n, const double *x,
                             double *fx, double *grad);

AD_API const char *ad_strerror(ad_status s);

/* f(x) alone, no derivative: f run on constants, nothing recorded (inside
 * a recording too).  AD_EINVAL (f or fx NULL, x NULL with n > 0),
 * AD_ENOMEM, AD_EFOREIGN (f returned a value of a recording); *fx is then
 * NaN.  ad_evaluate_function: the same for m outputs. */
AD_NODISCARD
AD_API ad_status ad_evaluate(ad_objective f, void *ctx, size_t n, const double *x, double *fx);

static inline ad_real ad_const(double c)
{
    ad_real r = {c, 0, 0};
    return r;
}

static inline double ad_value(ad_real x)
{
    return x.v;
}

/* ---- nested derivatives ----
 *
 * A gradient (a Jacobian-vector product) taken inside a function that a
 * driver is recording, as values of that recording: the driver
 * differentiates through them (the derivative of a gradient is a Hessian,
 * and so on, to any depth).  f is recorded one nesting level down, and its
 * records and its reverse (forward) sweep are made again on the enclosing
 * recording, one operation at a time.  x (and v) may hold the enclosing
 * recording's values and constants, never another recording's
 * (AD_EFOREIGN); f sees its own inputs, and a value of the enclosing
 * recording that f uses other than through x is AD_EFOREIGN too.  Outside
 * a recording, or from constants alone, the results are ad_gradient's
 * (ad_jvp's) numbers as constants.  AD_ENOTSUP, inside a recording, where
 * f uses an external function, a recorded matrix or a checkpointed loop,
 * or lgamma or tgamma of an active value.  x (and v) are copied before f
 * runs; ctx is used only during the call.  On error the outputs are NaN
 * and the enclosing recording fails with the same status. */
AD_NODISCARD
AD_API ad_status ad_gradient_r(ad_objective f, void *ctx, size_t n, const ad_real *x,
                               ad_real *fx, ad_real *grad);

/* ---- second order ----
 *
 * Forward over reverse: f is recorded once with each operation's second
 * partials (a second-order recording; first-order calls never make them),
 * a forward sweep gives every value's tangent along v, and one reverse
 * sweep carries the cotangents and their tangents.  ad_hvp costs a small
 * constant times ad_gradient; ad_hessian takes the n columns four at a
 * time from one recording.  hess is n x n, row-major, and not symmetrised
 * (it is symmetric to rounding).  On error every output is NaN.
 * AD_ENOTSUP if f calls an external function (ad_external) whose rule has
 * no hvp. */
AD_NODISCARD
AD_API ad_status ad_hvp(ad_objective f, void *ctx, size_t n, const double *x, const double *v,
                        double *fx, double *grad, double *hv);
AD_NODISCARD
AD_API ad_status ad_hessian(ad_objective f, void *ctx, size_t n, const double *x,
                            double *fx, double *grad, double *hess);
/* k Hessian-vector products from one recording: direction j is V + j*n,
 * H v_j goes to HV + j*n; four directions share each sweep.  Each equals
 * ad_hvp's along v_j.  k = 0 does nothing. */
AD_NODISCARD
AD_API ad_status ad_hvps(ad_objective f, void *ctx, size_t n, const double *x, size_t k,
                         const double *V, double *fx, double *grad, double *HV);

/* ---- vector-valued functions ("You Only Linearize Once") ----
 *
 * f reads x[0..n) and writes y[0..m).  One recording of f at x is its
 * linearisation: a forward sweep over it gives J v, a reverse sweep w^T J.
 * An output f does not write is NaN.  n or m may be 0: the results are then
 * empty (J v and w^T J of an empty map are zero vectors), and the pointers
 * for empty arrays may be NULL.  On error every output array is set to NaN
 * (a CSR to empty) and AD_EINVAL, AD_ENOMEM, AD_ERANGE, AD_ENESTING,
 * AD_EFOREIGN or (a forward sweep over an external function without a jvp
 * rule) AD_ENOTSUP is returned. */
typedef void (*ad_function)(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx);

/* y = f(x) and jv = J v: one recording, one forward sweep (AD_ENOTSUP if
 * f calls an external function without a jvp rule). */
AD_NODISCARD
AD_API ad_status ad_jvp(ad_function f, void *ctx, size_t n, const double *x, const double *v,
                        size_t m, double *y, double *jv);
/* y = f(x) alone (ad_evaluate, above). */
AD_NODISCARD
AD_API ad_status ad_evaluate_function(ad_function f, void *ctx, size_t n, const double *x, size_t m,
                                      double *y);

/* ad_jvp inside a recording: y = f(x) and jv = J v as values of the
 * enclosing recording, x and v both differentiable (ad_gradient_r, above,
 * says how and what fails). */
AD_NODISCARD
AD_API ad_status ad_jvp_r(ad_function f, void *ctx, size_t n, const ad_real *x,
                          const ad_real *v, size_t m, ad_real *y, ad_real *jv);

/* y = f(x) and wj = J^T w: one recording, one reverse sweep. */
AD_NODISCARD
AD_API ad_status ad_vjp(ad_function f, void *ctx, size_t n, const double *x,
                        size_t m, const double *w, double *y, double *wj);

/* y = f(x) and the m x n Jacobian, row-major: one recording, then n forward
 * or m reverse sweeps, whichever is fewer. */
AD_NODISCARD
AD_API ad_status ad_jacobian(ad_function f, void *ctx, size_t n, const double *x,
                             size_t m, double *y, double *jac);

/* A recorded linear map: f is run once by ad_linearize; ad_linear_jvp and
 * ad_linear_vjp apply J and J^T to any number of vectors without running f
 * again and without allocating.  One handle is used by one thread at a time;
 * ctx is not kept. */
typedef struct ad_linear ad_linear;
AD_NODISCARD
AD_API ad_status ad_linearize(ad_function f, void *ctx, size_t n, const double *x,
                              size_t m, double *y, ad_linear **out);
AD_NODISCARD
AD_API ad_status ad_linear_jvp(ad_linear *L, const double *v, double *jv);
AD_NODISCARD
AD_API ad_status ad_linear_vjp(ad_linear *L, const double *w, double *wj);
/* k directions at once: V holds k vectors of length n (direction j at
 * V + j*n), JV gets J v_j at JV + j*m; W holds k cotangents of length m
 * (at W + j*m), WJ gets w_j^T J at WJ + j*n.  Several directions share each
 * sweep over the recording; the results equal k single calls.  k = 0 does
 * nothing. */
AD_NODISCARD
AD_API ad_status ad_linear_jvps(ad_linear *L, size_t k, const double *V, double *JV);
AD_NODISCARD
AD_API ad_status ad_linear_vjps(ad_linear *L, size_t k, const double *W, double *WJ);
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
AD_NODISCARD
AD_API ad_status ad_sparse_jacobian(ad_function f, void *ctx, size_t n, const double *x,
                                    size_t m, double *y, ad_csr *J);
/* f(x), its gradient, and the lower triangle (col <= row) of its n x n
 * Hessian as CSR with columns ascending.  The structure is every pair of
 * inputs the recording's nonlinear interactions reach, even where the value
 * is 0 at x.  One second-order recording and one reverse sweep (edge
 * pushing), in time proportional to the records and the interactions;
 * array primitives, recorded matrices, external functions and
 * checkpointed loops with their own rules (the last two as dense blocks:
 * every pair of their active arguments is in the structure).  AD_ENOTSUP
 * on a tape with an external function whose rule has no hvp.  Free H with
 * ad_csr_free. */
AD_NODISCARD
AD_API ad_status ad_sparse_hessian(ad_objective f, void *ctx, size_t n, const double *x,
                                   double *fx, double *grad, ad_csr *H);
/* The same Hessian's values at x written into the structure H already has
 * (from ad_sparse_hessian at another point: an optimiser's fixed
 * structure), H->val[k] for entry k; a pair of it that x does not reach
 * gets 0.  AD_ESTRUCTURE if x reaches a pair outside it (f branches
 * differently here: ad_select_lt keeps both branches); H->val is then NaN. */
AD_NODISCARD
AD_API ad_status ad_sparse_hessian_values(ad_objective f, void *ctx, size_t n, const double *x,
                                          double *fx, double *grad, ad_csr *H);
/* Frees J's arrays and zeroes J.  The arrays are kept, for the calling
 * thread's next ad_sparse_jacobian to take over, until the thread frees
 * another Jacobian, calls ad_release() or exits. */
AD_API void ad_csr_free(ad_csr *J);

/* ---- functions dualrev cannot see: user-supplied derivatives ----
 *
 * An external solver, a library call or a hand-written kernel enters a
 * recording as one record per output.  dualrev runs `primal` on the values
 * of x, keeps copies of x and y, and later calls the rules with them:
 *   vjp:  xbar = J^T ybar   (xbar arrives zeroed; the rule fills it)
 *   jvp:  ydot = J xdot     (optional: without it, forward sweeps -- ad_jvp,
 *                           ad_linear_jvp, forward Jacobian columns -- return
 *                           AD_ENOTSUP, and ad_jacobian uses reverse sweeps)
 *   hvp:  out = (sum_k ybar_k H_k) xdot, H_k the Hessian of y_k at x
 *                           (out arrives zeroed; optional, and only with
 *                           jvp, which the second-order sweeps need for
 *                           the outputs' tangents.  Without it, ad_hvp,
 *                           ad_hvps, ad_hessian, ad_hvp_sum and
 *                           ad_sparse_hessian return AD_ENOTSUP.  Per
 *                           direction of a second-order sweep: one hvp and
 *                           one vjp call, a vjp more on the first; per sparse
 *                           Hessian: n hvp and m + 1 vjp calls, and every
 *                           pair of active arguments in the structure)
 * The rules run on plain doubles; they may use dualrev themselves (nested
 * recordings).  The rule struct is copied.  ctx is kept, not copied: it must
 * stay valid until the recording is last swept -- until ad_gradient, ad_vjp,
 * ad_jacobian, ... return, and for ad_linearize until ad_linear_free.
 * Outside a recording, or when every x is constant or m is 0, only
 * `primal` runs, on copies of x's values; y is constant and the call
 * returns AD_OK.  Returns AD_OK, AD_EINVAL (NULL rule, primal or vjp, hvp
 * without jvp, or NULL non-empty arrays, recording or not), AD_ENOMEM
 * (outside a recording too: the copies) or AD_ERANGE (the tape's limit, or
 * n or m of 2^32 - 256 or more); an error is also kept by the recording, if
 * there is one, whose caller then reports it, and y is NaN.  On the tape:
 * m + 1 slots, and 96 + 12 n + 8 m bytes of block data (docs/tape.md). */
typedef struct ad_rule {
    void (*primal)(void *ctx, size_t n, const double *x, size_t m, double *y);
    void (*vjp)(void *ctx, size_t n, const double *x, size_t m, const double *y,
                const double *ybar, double *xbar);
    void (*jvp)(void *ctx, size_t n, const double *x, size_t m, const double *y,
                const double *xdot, double *ydot);
    void (*hvp)(void *ctx, size_t n, const double *x, size_t m, const double *y,
                const double *ybar, const double *xdot, double *out);
} ad_rule;

AD_NODISCARD
AD_API ad_status ad_external(const ad_rule *rule, void *ctx, size_t n, const ad_real *x,
                             size_t m, ad_real *y);

/* ---- collective recordings: processes that communicate inside f ----
 *
 * For SPMD programs (one per process, all calling the same drivers with
 * the same arguments' sizes) whose f communicates: dualrev/mpi.h builds
 * its differentiable communication and its ad_mpi_gradient on these two;
 * another transport can too.
 *
 * ad_set_collective sets the calling thread's agreement hook (c copied;
 * NULL or c->agree NULL clears it) and returns the one it replaces (agree
 * NULL: none).  While it is set, every driver on the thread calls
 * agree(ctx, local) where a local failure would part the processes: when
 * a recording has begun (before f runs) and has ended, before each sweep
 * (its memory had), and around a checkpointed loop's replays; agree must
 * return the same status on every process (AD_OK only if every local one
 * is), and the driver goes on with it.  A driver that failed on another
 * process so fails on this one with that status, and no process is left
 * waiting in a rule that communicates.  Not while a hook is set: the
 * search of a checkpointed loop's steps for the operation that made a NaN
 * (ad_fault then names the loop).
 *
 * ad_external_collective is ad_external for a function whose outputs may
 * depend on other processes' active values (a receive, a reduction):
 * inside a recording it records whenever `active` is set -- which the
 * caller makes the same on every process that takes part in the
 * exchange -- even if every x is constant or m is 0, and never when it is
 * clear; ctx_bytes bytes of ctx are copied into the record, and the rules
 * get the copy (primal gets ctx itself, during the call), so nothing need
 * outlive the call; ctx_bytes 0 keeps ctx as ad_external does.  Its
 * sweeps run every rule on every process: a recording that holds one is
 * swept once, in full (no second pass for results that are not finite,
 * none restricted to what the seeds reach, no checked sweep).  Sparse
 * Hessians, Jacobians with several sweeps and recorded programs, whose
 * number of sweeps depends on the local structure, are not collective: a
 * recording with such a record gives AD_ENOTSUP there (ad_sparse_hessian)
 * or must not be used so.  Errors as ad_external's. */
typedef struct ad_collective {
    ad_status (*agree)(void *ctx, ad_status local);
    void *ctx;
} ad_collective;

AD_API ad_collective ad_set_collective(const ad_collective *c);
AD_NODISCARD
AD_API ad_status ad_external_collective(const ad_rule *rule, const void *ctx, size_t ctx_bytes,
                                        int active, size_t n, const ad_real *x, size_t m,
                                        ad_real *y);

/* ---- sums, by chunks of terms on several threads ----
 *
 * f(x) = sum over i < nterms of term(i, x).  The terms are recorded in
 * chunks, each chunk on one worker's tape (the inputs, then its terms,
 * summed in order), swept and the tape reused, so memory per worker is one
 * chunk's tape, not the whole sum's; the chunks' results are added in
 * chunk order, so fx and grad are the same bits for every thread count.
 * threads = 0 uses every core the thread may run on; 1 runs on the
 * calling thread alone.  term is called concurrently from several threads
 * (the caller's and the library's own, which are kept between calls): it
 * must be safe to, and it must not keep the values it gets.  A call made while another thread's
 * call has the library's threads runs on its calling thread alone.  Fails
 * with the first failing chunk's status (any term's error, AD_ENOMEM, ...);
 * fx and grad are then NaN. */
typedef ad_real (*ad_term)(size_t i, const ad_real *x, size_t n, void *ctx);

AD_NODISCARD
AD_API ad_status ad_gradient_sum(ad_term term, void *ctx, size_t nterms, size_t n,
                                 const double *x, double *fx, double *grad, unsigned threads);

/* The same for H v (ad_hvp) of the sum: chunks recorded in second-order
 * mode. */
AD_NODISCARD
AD_API ad_status ad_hvp_sum(ad_term term, void *ctx, size_t nterms, size_t n, const double *x,
                            const double *v, double *fx, double *grad, double *hv,
                            unsigned threads);

/* The calling thread's tape budget for one chunk of ad_gradient_sum and
 * ad_hvp_sum, in bytes (0 restores the default, 1 MiB); returns the
 * previous.  A chunk takes as many terms as fill it at the first term's
 * size, and at least enough for 32 n records, but no more than leave 16
 * chunks. */
AD_API size_t ad_set_sum_chunk_bytes(size_t bytes);

/* The building blocks of those sums, for a caller that shares a sum's
 * chunks out itself (dualrev/mpi.h shares them over MPI ranks).
 *
 * ad_sum_plan_make records term 0 at x on the calling thread and cuts the
 * nterms terms into chunks as ad_gradient_sum (second_order 0) or
 * ad_hvp_sum (second_order nonzero) would: chunk 0 is term 0 alone, chunk
 * c > 0 terms 1 + (c - 1) per up to 1 + c per (the last may be shorter).
 * The plan depends on term 0's recording at x and the calling thread's
 * ad_set_sum_chunk_bytes budget only.
 *
 * ad_gradient_sum_chunks runs chunks [c0, c1) of a plan on `threads`
 * threads, as ad_gradient_sum runs them, and stores chunk c's value and
 * gradient at out + (c - c0) (1 + n): out[0] the chunk's sum of terms, then
 * its n partials (ad_hvp_sum_chunks: then its n entries of H v, a stride
 * of 1 + 2 n).  Starting from fx = 0 and grad = 0 and adding every chunk's
 * results in chunk order (fx += f, then grad[j] += g[j]) gives
 * ad_gradient_sum's bits.  On failure: the first failing chunk's status
 * (as ad_gradient_sum), its index in *failed (c1 on success; failed may
 * be NULL), and out all NaN. */
typedef struct ad_sum_plan {
    size_t nterms;   /* the terms of the sum */
    size_t per;      /* terms in each chunk after chunk 0 */
    size_t nchunks;  /* 0 if nterms = 0, else 1 + ceil((nterms - 1) / per) */
} ad_sum_plan;

AD_NODISCARD AD_API ad_status ad_sum_plan_make(ad_term term, void *ctx, size_t nterms, size_t n,
                                              const double *x, int second_order,
                                              ad_sum_plan *plan);
AD_NODISCARD AD_API ad_status ad_gradient_sum_chunks(ad_term term, void *ctx,
                                                    const ad_sum_plan *plan, size_t n,
                                                    const double *x, size_t c0, size_t c1,
                                                    double *out, size_t *failed,
                                                    unsigned threads);
AD_NODISCARD AD_API ad_status ad_hvp_sum_chunks(ad_term term, void *ctx, const ad_sum_plan *plan,
                                               size_t n, const double *x, const double *v,
                                               size_t c0, size_t c1, double *out,
                                               size_t *failed, unsigned threads);

/* ---- checkpointed time loops ----
 *
 * One step of a loop: next = step_k(state; params), n states, np
 * parameters.  Called with ad_real values of the recording that runs it,
 * or with constants; it must not keep them, nor use active values other
 * than state and params (another recording's are refused, AD_EFOREIGN).
 * It may be called many times for the same k (the reverse sweep replays
 * steps from snapshots) and must compute the same thing each time. */
typedef void (*ad_step_fn)(size_t k, const ad_real *state, ad_real *next, size_t n,
                           const ad_real *params, size_t np, void *ctx);

/* Inside a recording: runs `steps` steps from state0 and writes stateN,
 * recording the loop as one block whose memory is `snapshots` states plus
 * one step's tape, whatever `steps` is.  params (np of them) are read by
 * every step and are differentiated too.  snapshots = 0 lets dualrev choose
 * (the fewest for which each step is recomputed at most twice: about
 * sqrt(2 steps)).  The forward pass runs the steps without recording,
 * keeping states where the binomial schedule (revolve) puts them; a
 * reverse sweep replays each step once on a tape of its own from the
 * nearest snapshot, in revolve order.  Every driver sweeps through it
 * (docs/api.md, "Checkpointed loops", for the cost of each).  Outside a
 * recording, or when state0 and params are all constant, it just runs the
 * loop; n = 0 does nothing.  state0 and stateN may be the same array.
 * Returns AD_OK, AD_EINVAL (NULL step or arrays), AD_ENOMEM, AD_ERANGE,
 * AD_EFOREIGN, AD_ENONFINITE (checks on), or what a step's recording
 * met; the recording keeps the error, and stateN is NaN.  ctx
 * must stay valid until the recording is last swept, as for ad_external. */
AD_NODISCARD
AD_API ad_status ad_checkpointed_loop(ad_step_fn step, void *ctx, size_t steps, size_t snapshots,
                                      size_t n, const ad_real *state0, size_t np,
                                      const ad_real *params, ad_real *stateN);

/* ---- recorded programs: record once, replay at new points ----
 *
 * A program keeps the operations f made at one point, with their arguments
 * and constants, and computes values and derivatives at other points from
 * them alone: f is never called again and its ctx never read.  Every operation
 * of the replay is the one f made, on the new values, so a replay at x
 * gives the numbers ad_gradient (ad_hvp, ...) of f gives at x, bit for bit,
 * as long as f would make the same operations there.  Branches f takes on
 * values must be written with the guards ad_lt, ad_le, ad_gt, ad_ge
 * (generic.h): a replay where one comes out the other way returns
 * AD_EBRANCH with NaN results (the program stays usable; record again at
 * that point).  Branches on ad_value() cannot be seen (docs/conventions.md,
 * "Recorded programs").  A program is read, never written, by a replay:
 * any number of threads may replay one at once. */
typedef struct ad_program ad_program;

/* Records f at x as a program; *P is NULL on error.  External functions
 * (ad_external) and checkpointed loops are kept as calls: a replay calls
 * them again, so their rules (steps) run again with the ctx they were
 * given, which must stay valid while P is replayed (one whose inputs are
 * all constants is kept as its constant outputs).  AD_ENOTSUP if f uses
 * what a program cannot keep: a product of dualrev/matrix.h (ad_mat_vec,
 * ad_mat_sqnorm) with an active result, a nested derivative
 * (ad_gradient_r, ad_jvp_r) of active values, or a value that changed
 * without an operation (arithmetic on ad_value() put back into an ad_real
 * by hand).  Otherwise ad_gradient's errors. */
AD_NODISCARD
AD_API ad_status ad_program_record(ad_objective f, void *ctx, size_t n, const double *x,
                                   ad_program **P);
/* The same for a function of m outputs. */
AD_NODISCARD
AD_API ad_status ad_program_record_function(ad_function f, void *ctx, size_t n, size_t m,
                                            const double *x, ad_program **P);
/* The outputs at x (m of them; one for ad_program_record's). */
AD_NODISCARD
AD_API ad_status ad_program_value(ad_program *P, const double *x, double *fx);
/* The drivers at x, as ad_gradient, ad_hvp, ad_jacobian, ad_jvp, ad_vjp,
 * ad_sparse_hessian and ad_sparse_hessian_values take them (the scalar
 * ones AD_EINVAL on a program of m != 1 outputs). */
AD_NODISCARD
AD_API ad_status ad_program_gradient(ad_program *P, const double *x, double *fx, double *grad);
AD_NODISCARD
AD_API ad_status ad_program_hvp(ad_program *P, const double *x, const double *v, double *fx,
                                double *grad, double *hv);
AD_NODISCARD
AD_API ad_status ad_program_jacobian(ad_program *P, const double *x, double *y, double *jac);
AD_NODISCARD
AD_API ad_status ad_program_jvp(ad_program *P, const double *x, const double *v, double *y,
                                double *jv);
AD_NODISCARD
AD_API ad_status ad_program_vjp(ad_program *P, const double *x, const double *w, double *y,
                                double *wj);
AD_NODISCARD
AD_API ad_status ad_program_sparse_jacobian(ad_program *P, const double *x, double *y, ad_csr *J);
AD_NODISCARD
AD_API ad_status ad_program_sparse_hessian(ad_program *P, const double *x, double *fx,
                                           double *grad, ad_csr *H);
AD_NODISCARD
AD_API ad_status ad_program_sparse_hessian_values(ad_program *P, const double *x, double *fx,
                                                  double *grad, ad_csr *H);
AD_API void ad_program_free(ad_program *P);

/* An optimiser's evaluation: f's value at x, and its gradient if grad is
 * not NULL, from the program *P, which is first recorded from f at x if
 * *P is NULL, and recorded again there if a guard fails at x (the old one
 * freed).  A function a program cannot keep (AD_ENOTSUP) is evaluated by
 * ad_gradient each time, *P a marker saying so (the replays refuse it with
 * AD_ENOTSUP).  Free *P with ad_program_free. */
AD_NODISCARD
AD_API ad_status ad_program_evaluate(ad_program **P, ad_objective f, void *ctx, size_t n,
                                     const double *x, double *fx, double *grad);

typedef struct ad_program_stats {
    size_t inputs, outputs;
    size_t operations;  /* kept operations, guards included */
    size_t guards;
    size_t bytes;       /* what the program holds */
    size_t replay_bytes; /* what a replay allocates for its values (besides its tape) */
} ad_program_stats;

AD_NODISCARD
AD_API ad_status ad_program_stats_get(const ad_program *P, ad_program_stats *out);

/* Cap the number of records one recording on this thread may hold
 * (0 restores the default: the whole ID range, about 4.29e9).  Past the cap
 * ad_gradient returns AD_ERANGE.  Returns the previous cap.  A second-order
 * recording (ad_hvp, ad_hessian) may take a few more records than a
 * first-order one of the same function: every n-ary record keeps its
 * header there. */
AD_API size_t ad_set_tape_limit(size_t max_records);

/* What the calling thread's outermost tape holds and has reserved, as of its
 * last recording.  Memory is kept between calls so that it stays warm. */
typedef struct ad_tape_stats {
    size_t inputs;         /* inputs of the last recording */
    size_t records;        /* records of the last recording */
    size_t record_bytes;   /* bytes per record (and 12 per argument) */
    size_t tape_bytes;     /* bytes reserved for records */
    size_t adjoint_bytes;  /* bytes reserved for cotangents */
    size_t block_bytes;    /* bytes the last recording keeps beside its records: the data of
                              recorded matrices, products, external functions and
                              checkpointed loops (their snapshots included) */
    size_t side_bytes;     /* bytes reserved beside the records by second-order and checked
                              recordings (24 per record each) */
    size_t driver_bytes;   /* bytes the drivers keep with the tape between calls: the sweeps'
                              work arrays, the sparse stores, the sparse Hessian's interactions */
    size_t snapshot_bytes; /* bytes of states the last recording's checkpointed loops keep
                              (part of block_bytes) */
    size_t step_bytes;     /* the largest tape (records and side tables) one step of a
                              checkpointed loop has taken when replayed, since that recording */
    size_t used_bytes;     /* bytes the last recording's records use: records x record_bytes
                              (of tape_bytes) */
} ad_tape_stats;

AD_NODISCARD
AD_API ad_status ad_tape_stats_get(ad_tape_stats *out);

/* Print the records of this thread's last top-level recording (at most
 * max_records of them): ID, operation, argument IDs and partials (and
 * values, when it was checked).  For looking at small tapes; AD_EINVAL if
 * there is no complete recording, AD_EBUSY inside one. */
AD_NODISCARD
AD_API ad_status ad_tape_dump(FILE *out, size_t max_records);

/* The same records as a graphviz DOT graph (dot -Tsvg): inputs and records
 * as nodes, an edge from each argument labelled with its partial. */
AD_NODISCARD
AD_API ad_status ad_tape_dot(FILE *out, size_t max_records);

/* ---- checks: where did the NaN come from? ----
 *
 * Off by default, at no cost.  With AD_CHECK_FINITE set, the calling
 * thread's recordings check every record: the first whose value or partial
 * is Inf or NaN although its arguments are finite (log(-1), exp(1000),
 * 0/0, a primitive's or an external function's output), and, in the
 * reverse sweep of ad_gradient and ad_vjp (the forward sweep of ad_jvp),
 * the first cotangent (tangent) that a finite cotangent (tangent) times a
 * finite partial makes Inf or NaN, stops the call
 * with AD_ENONFINITE; ad_last_fault() then says which operation, under which
 * label (ad_where).  AD_CHECK_TRACE keeps each record's operation, value and
 * label for ad_tape_dump and ad_tape_dot without checking.  Checked
 * recordings take the slow path for every record (a few times slower). */
#define AD_CHECK_FINITE 1u
#define AD_CHECK_TRACE 2u

/* Sets the calling thread's checks (AD_CHECK_* or'd, 0 for none) for the
 * recordings it begins from now on; returns the previous flags. */
AD_API unsigned ad_set_checks(unsigned flags);

/* Labels what the calling thread records from now on ("rk4 step",
 * "prior"): faults and DOT pictures name it.  A label set inside a call
 * (an objective, a loop's step, a sum's term) ends when that call returns;
 * a loop's steps, replayed in a sweep, run under the label the loop was
 * recorded under.  Set outside every call, it holds for the thread's calls
 * until it is changed.  The string is not copied: it must outlive the
 * recordings made under it and the last fault that names it.  NULL clears
 * the label. */
AD_API void ad_where(const char *label);

typedef enum ad_phase {
    AD_PHASE_RECORD,  /* the forward pass: f being recorded */
    AD_PHASE_REVERSE, /* a reverse sweep */
    AD_PHASE_TANGENT  /* a forward (tangent) sweep */
} ad_phase;

typedef struct ad_fault {
    const char *op;      /* the operation: "log", "div", "ad_logsumexp", "external", ... */
    const char *label;   /* the label in force when the record was made, or NULL */
    uint32_t id;         /* the record's ID (its result's) */
    ad_phase phase;
    size_t nargs;        /* how many of arg[] are set (0 to 2; an n-ary record's are not) */
    double arg[2];       /* the arguments' values */
    double value;        /* the record's value */
    double partial[2];   /* its local partials (NaN where it has none) */
    double cotangent;    /* AD_PHASE_REVERSE: the record's cotangent; AD_PHASE_TANGENT: the
                            argument's tangent */
    uint32_t target;     /* the ID whose cotangent (tangent) became non-finite */
    int64_t step;        /* the step k of the (innermost) checkpointed loop it arose in, or -1 */
    int64_t term;        /* the term i of ad_gradient_sum or ad_hvp_sum it arose in, or -1 */
} ad_fault;

/* The fault that stopped the calling thread's last call with AD_ENONFINITE:
 * AD_OK and *out filled, or AD_EINVAL (out NULL, or no fault since the
 * thread's last call began).  A fault inside a checkpointed loop names its
 * step and the operation inside it (the step that first made a non-finite
 * state is recorded again, checked); one inside a sum names its term (on
 * any thread; a sweep's fault in a chunk of several terms runs them one at
 * a time again to find it).  The strings are the library's and the user's
 * label: valid while the label is. */
AD_NODISCARD
AD_API ad_status ad_last_fault(ad_fault *out);

/* Give the calling thread's tape memory, and the arrays ad_csr_free kept,
 * back to the system.  AD_EBUSY while a recording is active on this thread.
 * Memory is otherwise kept until the thread exits. */
AD_NODISCARD
AD_API ad_status ad_release(void);

/* The version of the library linked, "MAJOR.MINOR.PATCH"; compare with
 * DUALREV_VERSION_STRING, the headers' version. */
AD_API const char *ad_version(void);

AD__EXTERN_C_END

#include "dualrev/ops.h"
#include "dualrev/nary.h"
#include "dualrev/matrix.h"
/* The generic names are C11 _Generic macros; C++ has overloads instead
 * (dualrev.hpp), and calls the suffixed functions through dualrev.h alone. */
#ifndef __cplusplus
#include "dualrev/generic.h"
#endif

#endif
