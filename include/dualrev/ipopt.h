/* dualrev/ipopt.h: an Ipopt problem (its C interface, IpStdCInterface.h)
 * from an objective f and constraints g, with exact derivatives:
 *
 *   minimise f(x)  subject to  g_l <= g(x) <= g_u,  x_l <= x <= x_u.
 *
 *   #include <dualrev/ipopt.h>
 *
 *   ad_ipopt b;
 *   ad_status s = ad_ipopt_init(&b, f, g, ctx, n, m, x_l, x_u, g_l, g_u, x0);
 *   AddIpoptNumOption(b.problem, "tol", 1e-9);        Ipopt's options, as they are
 *   enum ApplicationReturnStatus app;
 *   s = ad_ipopt_solve(&b, x, &obj, gx, mult_g, mult_x_l, mult_x_u, &app);
 *   ad_ipopt_free(&b);
 *
 * Header only: the library itself does not depend on Ipopt.  The
 * structures of the constraint Jacobian (ad_sparse_jacobian) and of the
 * Hessian of the Lagrangian sigma f + lambda^T g (ad_sparse_hessian, with
 * sigma and every lambda 1) are fixed at x0, and every later call is
 * checked against them: a point where f or g branches so as to reach
 * another entry stops the solve with AD_ESTRUCTURE (ad_select_lt keeps both
 * branches and so a structure that does not move).  The gradient is one
 * ad_gradient, the Jacobian one ad_sparse_jacobian, the Hessian one
 * ad_sparse_hessian_values; Ipopt's value-only calls evaluate f and g on
 * constants and record nothing.  A failing evaluation returns false to
 * Ipopt and stops the solve at the next iteration's callback
 * (User_Requested_Stop); its status is ad_ipopt_solve's result.
 *
 * Replay (off by default): set b.replay = 1 after ad_ipopt_init, and each
 * solve records programs of f (ad_program_record) and of g
 * (ad_program_record_function) at the first point Ipopt evaluates them,
 * and of the Lagrangian with its weights as inputs, L(x, sigma, lambda) =
 * sigma f(x) + lambda^T g(x) over n + 1 + m inputs, at its first Hessian;
 * every callback is then a replay: f and its gradient by
 * ad_program_evaluate, g and its Jacobian by ad_program_value and
 * ad_program_sparse_jacobian, the Hessian by
 * ad_program_sparse_hessian_values of L at (x, obj_factor, lambda) --
 * Ipopt's weights of that call, never the recording's -- whose x block
 * (the first n rows of its lower triangle) goes into the structure fixed
 * at x0.  f and g are not called again, and the numbers are, bit for bit,
 * those of the calls without replay (the Hessian's too).  Where a guard a
 * program kept (ad_lt, ...) comes out the other way, that function is
 * recorded again at the point, and for L its Hessian's structure taken
 * again (ad_program_sparse_hessian); a point whose Jacobian or Hessian
 * then reaches an entry outside the structures fixed at x0 stops the solve
 * with AD_ESTRUCTURE, as without replay.  A function a program cannot keep
 * (AD_ENOTSUP) is evaluated as without replay.  Branches on ad_value() are
 * not seen by a replay (docs/api.md, "Recorded programs"): write them with
 * guards (or ad_select_lt).  The programs are freed when the next solve
 * starts and by ad_ipopt_free.  A value-only call fails too where its
 * replay does.  Replay pays where f and g do much besides their
 * operations; for straight-line code a replay costs more than calling
 * them (examples/ipopt_pendulum.c --replay).
 *
 * Sums: ad_ipopt_init_sum takes the objective as a sum of terms
 * (ad_term, as ad_gradient_sum takes it, on `threads` threads): its value
 * and gradient are one ad_gradient_sum each (the library has no
 * value-only sum: Ipopt's value-only call takes the gradient too and
 * drops it).  There is no sparse Hessian of a sum: the bridge sets
 * "hessian_approximation" to "limited-memory" (Ipopt's L-BFGS), and a
 * solve told otherwise stops with AD_ENOTSUP at Ipopt's first Hessian.
 * Replay keeps g's program; the sum itself is not kept as a program.
 * b.evaluator (dualrev/bridge.h), zero after ad_ipopt_init_sum, may be set
 * to ad_mpi_sum_evaluator(&comm) (dualrev/mpi.h): each evaluation is then
 * one ad_mpi_gradient_sum on comm, ad_gradient_sum's bits on every rank;
 * ranks that solve the same problem with the same options stay in
 * lockstep (not with a time limit, max_cpu_time or max_wall_time, whose
 * stop may come at another iteration on each rank).
 *
 * Without an exact Hessian: where ad_sparse_hessian of the Lagrangian
 * returns AD_ENOTSUP at x0 (an external function whose rule has no hvp, a
 * checkpointed loop where the library cannot take its sparse Hessian),
 * ad_ipopt_init does the same as for a sum: b.hessian is 0 and Ipopt
 * approximates it ("limited-memory"); set back to "exact", the solve
 * stops with AD_ENOTSUP.  b.hessian is 1 where the exact Hessian is
 * there.
 *
 * Progress: b.progress (dualrev/bridge.h), if set, is called from Ipopt's
 * intermediate callback at each iteration (0: the start point) with the
 * objective and Ipopt's inf_pr and inf_du (gnorm and x are not given: the
 * C interface of Ipopt 3.11 has no current iterate); a nonzero return
 * stops the solve (User_Requested_Stop) and sets b.stopped, the status
 * staying AD_OK. */
#ifndef DUALREV_IPOPT_H
#define DUALREV_IPOPT_H

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dualrev.h>
#include <dualrev/bridge.h>
#include <IpStdCInterface.h>

AD__EXTERN_C_BEGIN

typedef struct ad_ipopt {
    IpoptProblem problem;  /* for Ipopt's options (AddIpopt*Option) */
    ad_objective f;
    ad_function g;         /* NULL when m is 0 */
    void *ctx;
    size_t n, m;
    ad_status status;      /* AD_OK, or the first failing evaluation's status */
    ad_csr jac, hess;      /* the structures fixed at x0 */
    double sigma;          /* the Lagrangian's weights, in eval_h */
    const double *lambda;
    ad_real *xr, *yr;      /* x and g(x) as constants: value-only calls, the Lagrangian */
    double *work;          /* n + m + 1 numbers, then xw's */
    double eval_seconds;   /* wall time spent in the callbacks, over the last solve */
    long iterations;       /* Ipopt's iteration count, over the last solve */
    int replay;            /* 1: replay programs (above); 0, ad_ipopt_init's: record each call */
    ad_program *fprog, *gprog, *lprog; /* f, g and the Lagrangian's programs, once recorded */
    ad_csr lhess;          /* lprog's Hessian over (x, sigma, lambda): its structure, its values */
    double *xw;            /* x, sigma, lambda: lprog's inputs (n + 1 + m numbers) */
    int unkept;            /* 1: g, 2: the Lagrangian cannot be kept; evaluated without replay */
    ad_term term;          /* a sum of nterms terms in place of f (ad_ipopt_init_sum) */
    size_t nterms;
    unsigned threads;      /* ad_gradient_sum's threads */
    ad_sum_evaluator evaluator; /* the sum's evaluations: zero (the default), ad_gradient_sum;
                                   ad_mpi_sum_evaluator, over MPI ranks (above) */
    int hessian;           /* 1: exact Hessians (hess); 0: Ipopt's limited-memory approximation */
    ad_progress_fn progress; /* NULL, or called at each iteration (above) */
    void *progress_ctx;
    int stopped;           /* 1: progress stopped the last solve */
    unsigned long evaluations; /* objective evaluations (value or gradient), last solve */
} ad_ipopt;

/* Wall time in seconds (C11's timespec_get), for eval_seconds. */
static inline double ad__ipopt_now(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* sigma f(x) + lambda^T g(x), for the Hessian; ctx is the ad_ipopt. */
static inline ad_real ad__ipopt_lagrangian(const ad_real *x, size_t n, void *ctx)
{
    ad_ipopt *b = (ad_ipopt *)ctx;
    ad_real l = ad_mul(b->sigma, b->f(x, n, b->ctx));
    if (!b->m)
        return l;
    for (size_t j = 0; j < b->m; j++)  /* yr: free while Ipopt asks for a Hessian */
        b->yr[j] = ad_const(NAN);
    b->g(x, n, b->yr, b->m, b->ctx);
    return ad_add(l, ad_dot(b->m, b->yr, b->lambda));
}

/* The Lagrangian with its weights as inputs, for replay: w holds x (n),
 * sigma and lambda (m); ctx is the ad_ipopt.  The same operations as
 * ad__ipopt_lagrangian's, sigma and lambda active. */
static inline ad_real ad__ipopt_lagrangian_w(const ad_real *w, size_t nw, void *ctx)
{
    ad_ipopt *b = (ad_ipopt *)ctx;
    size_t n = b->n;
    (void)nw;
    ad_real l = ad_mul_rr(w[n], b->f(w, n, b->ctx));
    if (!b->m)
        return l;
    for (size_t j = 0; j < b->m; j++)
        b->yr[j] = ad_const(NAN);
    b->g(w, n, b->yr, b->m, b->ctx);
    return ad_add_rr(l, ad_dot_r(b->m, b->yr, w + n + 1));
}

/* The first failure is kept; Ipopt is told with false. */
static inline int ad__ipopt_fail(ad_ipopt *b, ad_status s)
{
    if (b->status == AD_OK)
        b->status = s;
    return 0;
}

static inline Bool ad__ipopt_f(Index n, Number *x, Bool new_x, Number *obj, UserDataPtr data)
{
    ad_ipopt *b = (ad_ipopt *)data;
    (void)new_x;
    if (b->status != AD_OK)
        return 0;
    double t0 = ad__ipopt_now();
    ad_status s = AD_OK;
    b->evaluations++;
    if (b->term) {  /* no value-only sum: through the gradient, into work */
        s = ad_sum_evaluator_gradient(&b->evaluator, b->term, b->ctx, b->nterms, (size_t)n, x,
                                      obj, b->work, b->threads);
    } else if (b->replay) {
        s = ad_program_evaluate(&b->fprog, b->f, b->ctx, (size_t)n, x, obj, NULL);
    } else {
        for (Index i = 0; i < n; i++)
            b->xr[i] = ad_const(x[i]);
        *obj = ad_value(b->f(b->xr, (size_t)n, b->ctx));
    }
    b->eval_seconds += ad__ipopt_now() - t0;
    return s == AD_OK || ad__ipopt_fail(b, s);
}

static inline Bool ad__ipopt_grad_f(Index n, Number *x, Bool new_x, Number *grad,
                                    UserDataPtr data)
{
    ad_ipopt *b = (ad_ipopt *)data;
    double fx;
    (void)new_x;
    if (b->status != AD_OK)
        return 0;
    double t0 = ad__ipopt_now();
    ad_status s;
    b->evaluations++;
    if (b->term)
        s = ad_sum_evaluator_gradient(&b->evaluator, b->term, b->ctx, b->nterms, (size_t)n, x,
                                      &fx, grad, b->threads);
    else if (b->replay)
        s = ad_program_evaluate(&b->fprog, b->f, b->ctx, (size_t)n, x, &fx, grad);
    else
        s = ad_gradient(b->f, b->ctx, (size_t)n, x, &fx, grad);
    b->eval_seconds += ad__ipopt_now() - t0;
    return s == AD_OK || ad__ipopt_fail(b, s);
}

/* With replay, g's values at x (J NULL) or its values and sparse Jacobian
 * from its program: recorded at x first if there is none, and again at x
 * when a guard fails there.  AD_ENOTSUP (unkept bit 1 set) when g cannot
 * be kept. */
AD_NODISCARD static inline ad_status ad__ipopt_g_program(ad_ipopt *b, const double *x, double *y, ad_csr *J)
{
    for (int again = 0;; again = 1) {
        ad_status s = AD_OK;
        if (!b->gprog)
            s = ad_program_record_function(b->g, b->ctx, b->n, b->m, x, &b->gprog);
        if (s == AD_OK)
            s = J ? ad_program_sparse_jacobian(b->gprog, x, y, J)
                  : ad_program_value(b->gprog, x, y);
        if (s == AD_ENOTSUP && !b->gprog)
            b->unkept |= 1;
        if (s != AD_EBRANCH || again)
            return s;
        ad_program_free(b->gprog);  /* a guard flipped: g takes another branch here */
        b->gprog = NULL;
    }
}

static inline Bool ad__ipopt_g(Index n, Number *x, Bool new_x, Index m, Number *gx,
                               UserDataPtr data)
{
    ad_ipopt *b = (ad_ipopt *)data;
    (void)new_x;
    if (b->status != AD_OK)
        return 0;
    double t0 = ad__ipopt_now();
    if (b->replay && !(b->unkept & 1)) {
        ad_status s = ad__ipopt_g_program(b, x, gx, NULL);
        if (s != AD_ENOTSUP || !(b->unkept & 1)) {
            b->eval_seconds += ad__ipopt_now() - t0;
            return s == AD_OK || ad__ipopt_fail(b, s);
        }
    }
    for (Index i = 0; i < n; i++)
        b->xr[i] = ad_const(x[i]);
    for (Index j = 0; j < m; j++)
        b->yr[j] = ad_const(NAN);
    b->g(b->xr, (size_t)n, b->yr, (size_t)m, b->ctx);
    for (Index j = 0; j < m; j++)
        gx[j] = ad_value(b->yr[j]);
    b->eval_seconds += ad__ipopt_now() - t0;
    return 1;
}

/* A fixed structure's entries as Ipopt's (row, column) pairs, 0-based. */
static inline void ad__ipopt_structure(const ad_csr *A, Index *row, Index *col)
{
    for (size_t r = 0; r < A->rows; r++)
        for (size_t k = A->row_ptr[r]; k < A->row_ptr[r + 1]; k++) {
            row[k] = (Index)r;
            col[k] = (Index)A->col[k];
        }
}

/* J's entries written into the fixed structure A (both rows' columns
 * ascending): 0 where the point reaches fewer entries than A's start
 * point did, AD_ESTRUCTURE where it reaches one outside A. */
AD_NODISCARD static inline ad_status ad__ipopt_scatter(const ad_csr *A, const ad_csr *J, Number *values)
{
    for (size_t r = 0; r < A->rows; r++) {
        size_t k = J->row_ptr[r];
        for (size_t e = A->row_ptr[r]; e < A->row_ptr[r + 1]; e++) {
            values[e] = 0.0;
            if (k < J->row_ptr[r + 1] && J->col[k] == A->col[e])
                values[e] = J->val[k++];
        }
        if (k != J->row_ptr[r + 1])
            return AD_ESTRUCTURE;
    }
    return AD_OK;
}

static inline Bool ad__ipopt_jac_g(Index n, Number *x, Bool new_x, Index m, Index nele,
                                   Index *row, Index *col, Number *values, UserDataPtr data)
{
    ad_ipopt *b = (ad_ipopt *)data;
    ad_csr J = {0, 0, 0, NULL, NULL, NULL};
    (void)new_x, (void)nele;
    if (!values) {
        ad__ipopt_structure(&b->jac, row, col);
        return 1;
    }
    if (b->status != AD_OK)
        return 0;
    double t0 = ad__ipopt_now();
    ad_status s = AD_ENOTSUP;
    if (b->replay && !(b->unkept & 1))
        s = ad__ipopt_g_program(b, x, b->work, &J);
    if (s == AD_ENOTSUP && (!b->replay || (b->unkept & 1))) {
        ad_csr_free(&J);
        s = ad_sparse_jacobian(b->g, b->ctx, (size_t)n, x, (size_t)m, b->work, &J);
    }
    if (s == AD_OK)
        s = ad__ipopt_scatter(&b->jac, &J, values);
    ad_csr_free(&J);
    b->eval_seconds += ad__ipopt_now() - t0;
    return s == AD_OK || ad__ipopt_fail(b, s);
}

/* With replay, the Hessian of the Lagrangian at x with Ipopt's weights
 * into values (the structure fixed at x0), from the program of L over
 * (x, sigma, lambda): recorded at the first call and again where a guard
 * fails, its structure (lhess) taken then.  AD_ENOTSUP (unkept bit 2 set)
 * when L cannot be kept; AD_ESTRUCTURE when its x block reaches an entry
 * outside b->hess. */
AD_NODISCARD static inline ad_status ad__ipopt_h_program(ad_ipopt *b, const double *x, double sigma,
                                            const double *lambda, Number *values)
{
    size_t n = b->n, m = b->m;
    double fx;
    memcpy(b->xw, x, n * sizeof *x);
    b->xw[n] = sigma;
    if (m)
        memcpy(b->xw + n + 1, lambda, m * sizeof *lambda);
    ad_status s = AD_EBRANCH;
    if (b->lprog)
        s = ad_program_sparse_hessian_values(b->lprog, b->xw, &fx, b->work, &b->lhess);
    if (s == AD_EBRANCH) {  /* no program yet, or a guard flipped: record here */
        ad_program_free(b->lprog);
        b->lprog = NULL;
        ad_csr_free(&b->lhess);
        s = ad_program_record(ad__ipopt_lagrangian_w, b, n + 1 + m, b->xw, &b->lprog);
        if (s == AD_ENOTSUP)
            b->unkept |= 2;
        if (s == AD_OK)
            s = ad_program_sparse_hessian(b->lprog, b->xw, &fx, b->work, &b->lhess);
    }
    /* the x block: rows 0..n-1 of the lower triangle come first */
    return s == AD_OK ? ad__ipopt_scatter(&b->hess, &b->lhess, values) : s;
}

static inline Bool ad__ipopt_h(Index n, Number *x, Bool new_x, Number obj_factor, Index m,
                               Number *lambda, Bool new_lambda, Index nele, Index *row,
                               Index *col, Number *values, UserDataPtr data)
{
    ad_ipopt *b = (ad_ipopt *)data;
    double fx;
    (void)new_x, (void)m, (void)new_lambda, (void)nele;
    if (!values) {
        ad__ipopt_structure(&b->hess, row, col);
        return 1;
    }
    if (b->status != AD_OK)
        return 0;
    if (!b->hessian)  /* a sum, or no Hessian at x0: Ipopt was told limited-memory */
        return ad__ipopt_fail(b, AD_ENOTSUP);
    double t0 = ad__ipopt_now();
    ad_status s = AD_ENOTSUP;
    if (b->replay && !(b->unkept & 2))
        s = ad__ipopt_h_program(b, x, obj_factor, lambda, values);
    if (s == AD_ENOTSUP && (!b->replay || (b->unkept & 2))) {
        b->sigma = obj_factor;
        b->lambda = lambda;
        ad_csr H = b->hess;  /* the structure fixed at x0, the values straight into Ipopt's */
        H.val = values;
        s = ad_sparse_hessian_values(ad__ipopt_lagrangian, b, (size_t)n, x, &fx, b->work, &H);
    }
    b->eval_seconds += ad__ipopt_now() - t0;
    return s == AD_OK || ad__ipopt_fail(b, s);
}

/* Ipopt's per-iteration callback: stops the solve after a failure. */
static inline Bool ad__ipopt_iteration(Index alg_mod, Index iter, Number obj, Number inf_pr,
                                       Number inf_du, Number mu, Number d_norm,
                                       Number regularization_size, Number alpha_du,
                                       Number alpha_pr, Index ls_trials, UserDataPtr data)
{
    ad_ipopt *b = (ad_ipopt *)data;
    (void)alg_mod, (void)mu, (void)d_norm;
    (void)regularization_size, (void)alpha_du, (void)alpha_pr, (void)ls_trials;
    b->iterations = iter;
    if (b->status != AD_OK)
        return 0;
    if (b->progress) {
        ad_progress p;
        p.iteration = iter;
        p.f = obj;
        p.gnorm = NAN;
        p.inf_pr = inf_pr;
        p.inf_du = inf_du;
        p.x = NULL;
        p.n = b->n;
        p.evaluations = b->evaluations;
        if (b->progress(&p, b->progress_ctx)) {
            b->stopped = 1;
            return 0;
        }
    }
    return 1;
}

/* The replay's programs and the Lagrangian's structure, freed. */
static inline void ad__ipopt_drop_programs(ad_ipopt *b)
{
    ad_program_free(b->fprog);
    ad_program_free(b->gprog);
    ad_program_free(b->lprog);
    b->fprog = b->gprog = b->lprog = NULL;
    ad_csr_free(&b->lhess);
    b->unkept = 0;
}

static inline void ad_ipopt_free(ad_ipopt *b)
{
    if (b->problem)
        FreeIpoptProblem(b->problem);
    ad_csr_free(&b->jac);
    ad_csr_free(&b->hess);
    ad__ipopt_drop_programs(b);
    free(b->xr);
    free(b->work);
    memset(b, 0, sizeof *b);
}

/* The problem for b's f or term, g, ctx, n and m (set), its structures
 * taken at x0; b freed on failure. */
AD_NODISCARD static inline ad_status ad__ipopt_setup(ad_ipopt *b, const double *x_l,
                                                     const double *x_u, const double *g_l,
                                                     const double *g_u, const double *x0)
{
    ad_status s = AD_EINVAL;
    size_t n = b->n, m = b->m;
    b->sigma = 1.0;
    if ((!b->f && !b->term) || (m && !b->g) || !x0 || (n && (!x_l || !x_u)) ||
        (m && (!g_l || !g_u)) || n > INT_MAX || m > INT_MAX)
        goto fail;
    s = AD_ENOMEM;
    b->xr = (ad_real *)malloc((n + m + 1) * sizeof *b->xr);
    b->work = (double *)malloc(2 * (n + m + 1) * sizeof *b->work);
    double *ones = (double *)malloc((m + 1) * sizeof *ones);
    if (!b->xr || !b->work || !ones) {
        free(ones);
        goto fail;
    }
    b->yr = b->xr + n;
    b->xw = b->work + n + m + 1;
    for (size_t j = 0; j < m; j++)
        ones[j] = 1.0;
    b->lambda = ones;
    double fx;
    s = m ? ad_sparse_jacobian(b->g, b->ctx, n, x0, m, b->work, &b->jac) : AD_OK;
    b->hessian = 0;
    if (s == AD_OK && b->f) {
        s = ad_sparse_hessian(ad__ipopt_lagrangian, b, n, x0, &fx, b->work, &b->hess);
        b->hessian = s == AD_OK;
        if (s == AD_ENOTSUP) {  /* no Hessian to be had: Ipopt's approximation */
            ad_csr_free(&b->hess);
            s = AD_OK;
        }
    }
    free(ones);
    b->lambda = NULL;
    if (s == AD_OK && (b->jac.nnz > INT_MAX || b->hess.nnz > INT_MAX))
        s = AD_EINVAL;
    if (s != AD_OK)
        goto fail;
    b->problem = CreateIpoptProblem((Index)n, (Number *)x_l, (Number *)x_u, (Index)m,
                                    (Number *)g_l, (Number *)g_u, (Index)b->jac.nnz,
                                    (Index)b->hess.nnz, 0, ad__ipopt_f, ad__ipopt_g,
                                    ad__ipopt_grad_f, ad__ipopt_jac_g, ad__ipopt_h);
    if (!b->problem || !SetIntermediateCallback(b->problem, ad__ipopt_iteration) ||
        (!b->hessian &&
         !AddIpoptStrOption(b->problem, "hessian_approximation", (char *)"limited-memory"))) {
        s = AD_ENOMEM;
        goto fail;
    }
    return AD_OK;
fail:
    ad_ipopt_free(b);
    return s;
}

/* The problem, its structures taken at x0 (n values, inside the bounds or
 * not).  g NULL with m 0 for no constraints; bounds of +-1e19 or beyond are
 * none (Ipopt's default).  AD_EINVAL (NULL f or bounds, g NULL with m > 0,
 * sizes beyond Ipopt's int), the errors of ad_sparse_jacobian and
 * ad_sparse_hessian at x0 (but AD_ENOTSUP from the Hessian: b.hessian 0,
 * above), AD_ENOMEM (also when Ipopt refuses the problem); b then holds
 * nothing to free. */
AD_NODISCARD static inline ad_status ad_ipopt_init(ad_ipopt *b, ad_objective f, ad_function g,
                                                   void *ctx, size_t n, size_t m,
                                                   const double *x_l, const double *x_u,
                                                   const double *g_l, const double *g_u,
                                                   const double *x0)
{
    memset(b, 0, sizeof *b);
    b->f = f;
    b->g = g;
    b->ctx = ctx;
    b->n = n;
    b->m = m;
    return ad__ipopt_setup(b, x_l, x_u, g_l, g_u, x0);
}

/* The same with the objective the sum over i < nterms of term(i, x, n,
 * ctx), by ad_gradient_sum on `threads` threads (0: every core); g takes
 * the same ctx.  Ipopt's limited-memory Hessian (b.hessian 0, above).
 * AD_EINVAL for a NULL term, otherwise ad_ipopt_init's errors. */
AD_NODISCARD static inline ad_status ad_ipopt_init_sum(ad_ipopt *b, ad_term term, ad_function g,
                                                       void *ctx, size_t nterms, size_t n,
                                                       size_t m, unsigned threads,
                                                       const double *x_l, const double *x_u,
                                                       const double *g_l, const double *g_u,
                                                       const double *x0)
{
    memset(b, 0, sizeof *b);
    b->term = term;
    b->g = g;
    b->ctx = ctx;
    b->nterms = nterms;
    b->n = n;
    b->m = m;
    b->threads = threads;
    return ad__ipopt_setup(b, x_l, x_u, g_l, g_u, x0);
}

/* IpoptSolve from x (n values; the solution on return), its results where
 * the pointers are not NULL, and Ipopt's own status in *app.  Returns
 * AD_OK (also when the progress hook stopped Ipopt: b->stopped), or the
 * status of the first evaluation that failed (Ipopt was then stopped);
 * AD_EINVAL (*app Invalid_Problem_Definition) for a NULL b or x or a
 * bridge whose init failed. */
AD_NODISCARD static inline ad_status ad_ipopt_solve(ad_ipopt *b, double *x, double *obj,
                                                    double *gx, double *mult_g,
                                                    double *mult_x_l, double *mult_x_u,
                                                    enum ApplicationReturnStatus *app)
{
    if (!b || !b->problem || !x) {
        if (app)
            *app = Invalid_Problem_Definition;
        return AD_EINVAL;
    }
    b->status = AD_OK;
    b->eval_seconds = 0.0;
    b->iterations = 0;
    b->stopped = 0;
    b->evaluations = 0;
    ad__ipopt_drop_programs(b);  /* this solve records its own, at its first point */
    enum ApplicationReturnStatus r =
        IpoptSolve(b->problem, x, gx, obj, mult_g, mult_x_l, mult_x_u, b);
    if (app)
        *app = r;
    return b->status;
}

AD__EXTERN_C_END

#endif
