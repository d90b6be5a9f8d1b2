/* dualrev/nlopt.h: NLopt's objective and constraints from an ad_objective
 * (scalar), a sum of terms (scalar, ad_gradient_sum) or an ad_function
 * (vector), with exact gradients and Jacobians.
 *
 *   #include <nlopt.h>
 *   #include <dualrev/nlopt.h>
 *
 *   ad_nlopt obj, con;
 *   ad_nlopt_init(&obj, opt, f, NULL, ctx, n, 0);          f: ad_objective
 *   ad_nlopt_init(&con, opt, NULL, g, ctx, n, m);          g: ad_function, m outputs
 *   (or ad_nlopt_init_sum(&obj, opt, term, ctx, nterms, n, threads): a sum)
 *   nlopt_set_min_objective(opt, ad_nlopt_scalar, &obj);
 *   nlopt_add_inequality_mconstraint(opt, m, ad_nlopt_vector, &con, tol);
 *   ... nlopt_optimize(opt, x, &fx) ...
 *   if (obj.status != AD_OK || con.status != AD_OK) ...
 *   ad_nlopt_free(&obj), ad_nlopt_free(&con);
 *
 * Header only: the library itself does not depend on NLopt.  A call with
 * gradients is one ad_gradient (scalar) or ad_jacobian (vector); a call
 * without (grad NULL, derivative-free algorithms and some line searches)
 * evaluates f on constants and records nothing.  A failing evaluation
 * stops the optimiser with nlopt_force_stop (NLOPT_FORCED_STOP); its
 * status stays in the bridge.
 *
 * Replay (off by default): set b.replay = 1 after ad_nlopt_init, and the
 * function is recorded as a program (ad_program_record or
 * ad_program_record_function) at the first point NLopt asks about; every
 * call is then a replay of it, which gives the numbers of ad_gradient or
 * ad_jacobian (and the values) bit for bit without calling f or g: a
 * scalar function through ad_program_evaluate, a vector one through
 * ad_program_jacobian and ad_program_value.  Where a guard the program
 * kept (ad_lt, ...) comes out the other way, the function is recorded
 * again at that point; one a program cannot keep (AD_ENOTSUP) is
 * evaluated as without replay.  Branches on ad_value() are not seen by a
 * replay (docs/api.md, "Recorded programs"), nor are changes to what the
 * function reads through ctx: to start again from it,
 * ad_program_free(b.program) and set it to NULL.  With replay, a
 * value-only call fails too where its replay does (AD_ENOMEM, or the
 * recording's errors at the first point).  ad_nlopt_free frees the
 * program.  A sum is not kept as a program: with a term, replay has no
 * effect.
 *
 * Sums: a bridge made by ad_nlopt_init_sum is a scalar one (ad_nlopt_scalar)
 * whose every call is one ad_gradient_sum on `threads` threads (the same
 * bits for every thread count); the library has no value-only sum, so a
 * call without grad takes the gradient too and drops it.  b.evaluator
 * (dualrev/bridge.h), zero after ad_nlopt_init_sum, may be set to
 * ad_mpi_sum_evaluator(&comm) (dualrev/mpi.h): each call is then one
 * ad_mpi_gradient_sum on comm, ad_gradient_sum's bits on every rank, and
 * ranks that run the same deterministic algorithm with the same options
 * and x stay in lockstep (not with a time limit, nlopt_set_maxtime, nor
 * a stochastic algorithm seeded differently on each rank).
 *
 * Progress: NLopt has no iteration callback.  b.progress (dualrev/bridge.h),
 * if set, is called after each successful evaluation of b's function
 * (set it on the objective's bridge): `iteration` and `evaluations` count
 * the evaluations, gnorm is NaN for a call without grad.  A nonzero return
 * stops NLopt (nlopt_force_stop: NLOPT_FORCED_STOP) and sets b.stopped;
 * NLopt may still evaluate a few times before it returns, and the hook is
 * not called again while b.stopped is set (each evaluation stops NLopt
 * again: clear it to run the bridge again).  A vector bridge gives f = NaN
 * and gnorm = NaN. */
#ifndef DUALREV_NLOPT_H
#define DUALREV_NLOPT_H

#include <math.h>
#include <stdlib.h>

#include <dualrev.h>
#include <dualrev/bridge.h>
#include <nlopt.h>

AD__EXTERN_C_BEGIN

typedef struct ad_nlopt {
    nlopt_opt opt;      /* stopped on a failure */
    ad_objective f;     /* a scalar function, or */
    ad_function g;      /* a vector one, of m outputs */
    void *ctx;
    size_t n, m;
    ad_status status;   /* AD_OK, or the first failing evaluation's status */
    ad_real *xr, *yr;   /* x and y as constants, for value-only calls */
    int replay;         /* 1: replay a program of f or g (above); 0, ad_nlopt_init's: record */
    ad_program *program; /* the program, once recorded; freed by ad_nlopt_free */
    int unkept;         /* g could not be kept as a program: evaluated as without replay */
    ad_term term;       /* a scalar sum of nterms terms in place of f (ad_nlopt_init_sum) */
    size_t nterms;
    unsigned threads;   /* ad_gradient_sum's threads */
    ad_sum_evaluator evaluator; /* the sum's evaluations: zero (the default), ad_gradient_sum;
                                   ad_mpi_sum_evaluator, over MPI ranks (above) */
    double *gw;         /* n numbers: a sum's gradient that a value-only call drops */
    ad_progress_fn progress; /* NULL, or called after each evaluation (above) */
    void *progress_ctx;
    int stopped;        /* 1: progress stopped NLopt */
    unsigned long evaluations; /* successful evaluations */
} ad_nlopt;

static inline ad_status ad__nlopt_alloc(ad_nlopt *b)
{
    b->xr = (ad_real *)malloc((b->n + b->m + 1) * sizeof *b->xr);
    b->yr = b->xr ? b->xr + b->n : NULL;
    if (b->term) {
        b->gw = (double *)malloc((b->n + 1) * sizeof *b->gw);
        if (!b->gw) {
            free(b->xr);
            b->xr = b->yr = NULL;
        }
    }
    return b->xr ? AD_OK : AD_ENOMEM;
}

/* One of f and g; m for g (0 for f).  AD_EINVAL (neither, or both),
 * AD_ENOMEM (b then holds nothing to free) or AD_OK. */
AD_NODISCARD static inline ad_status ad_nlopt_init(ad_nlopt *b, nlopt_opt opt, ad_objective f,
                                                   ad_function g, void *ctx, size_t n, size_t m)
{
    memset(b, 0, sizeof *b);
    b->opt = opt;
    b->f = f;
    b->g = g;
    b->ctx = ctx;
    b->n = n;
    b->m = g ? m : 0;
    b->status = AD_OK;
    if (!f == !g)
        return AD_EINVAL;
    return ad__nlopt_alloc(b);
}

/* A scalar function (for ad_nlopt_scalar): the sum over i < nterms of
 * term(i, x, n, ctx), by ad_gradient_sum on `threads` threads (0: every
 * core).  AD_EINVAL (term NULL), AD_ENOMEM (b then holds nothing to free)
 * or AD_OK. */
AD_NODISCARD static inline ad_status ad_nlopt_init_sum(ad_nlopt *b, nlopt_opt opt, ad_term term,
                                                       void *ctx, size_t nterms, size_t n,
                                                       unsigned threads)
{
    memset(b, 0, sizeof *b);
    b->opt = opt;
    b->term = term;
    b->ctx = ctx;
    b->nterms = nterms;
    b->n = n;
    b->threads = threads;
    b->status = AD_OK;
    if (!term)
        return AD_EINVAL;
    return ad__nlopt_alloc(b);
}

static inline void ad_nlopt_free(ad_nlopt *b)
{
    free(b->xr);
    free(b->gw);
    ad_program_free(b->program);
    b->xr = b->yr = NULL;
    b->gw = NULL;
    b->program = NULL;
}

/* After a failure: the status kept, the optimiser stopped. */
static inline void ad__nlopt_fail(ad_nlopt *b, ad_status s)
{
    if (b->status == AD_OK)
        b->status = s;
    nlopt_force_stop(b->opt);
}

/* After a successful evaluation: the count, and the progress hook, which
 * may stop NLopt. */
static inline void ad__nlopt_progress(ad_nlopt *b, const double *x, double fx,
                                      const double *grad)
{
    b->evaluations++;
    if (b->stopped) {  /* NLopt may evaluate a few more times before it stops */
        nlopt_force_stop(b->opt);
        return;
    }
    if (!b->progress)
        return;
    ad_progress p;
    p.iteration = (long)b->evaluations;
    p.f = fx;
    p.gnorm = NAN;
    if (grad) {
        double s = 0.0;
        for (size_t i = 0; i < b->n; i++)
            s += grad[i] * grad[i];
        p.gnorm = sqrt(s);
    }
    p.inf_pr = p.inf_du = NAN;
    p.x = x;
    p.n = b->n;
    p.evaluations = b->evaluations;
    if (b->progress(&p, b->progress_ctx)) {
        b->stopped = 1;
        nlopt_force_stop(b->opt);
    }
}

/* NLopt's nlopt_func, for an objective or one scalar constraint; data is an
 * ad_nlopt made with f or a term. */
static inline double ad_nlopt_scalar(unsigned n, const double *x, double *grad, void *data)
{
    ad_nlopt *b = (ad_nlopt *)data;
    double fx = NAN;
    ad_status s = AD_OK;
    if (b->status != AD_OK || (!b->f && !b->term) || n != b->n) {
        ad__nlopt_fail(b, b->status != AD_OK ? b->status : AD_EINVAL);
        return NAN;
    }
    if (b->term) {
        s = ad_sum_evaluator_gradient(&b->evaluator, b->term, b->ctx, b->nterms, b->n, x, &fx,
                                      grad ? grad : b->gw, b->threads);
    } else if (b->replay) {
        s = ad_program_evaluate(&b->program, b->f, b->ctx, b->n, x, &fx, grad);
    } else if (grad) {
        s = ad_gradient(b->f, b->ctx, b->n, x, &fx, grad);
    } else {
        for (size_t i = 0; i < b->n; i++)
            b->xr[i] = ad_const(x[i]);
        fx = ad_value(b->f(b->xr, b->n, b->ctx));
    }
    if (s != AD_OK)
        ad__nlopt_fail(b, s);  /* fx and grad are NaN */
    else
        ad__nlopt_progress(b, x, fx, grad);
    return fx;
}

/* With replay, g's values (jac NULL) or values and Jacobian at x from its
 * program: recorded at x first if there is none, and again at x when a
 * guard fails there.  AD_ENOTSUP (b->unkept set) when g cannot be kept. */
AD_NODISCARD static inline ad_status ad__nlopt_replay(ad_nlopt *b, const double *x, double *y, double *jac)
{
    for (int again = 0;; again = 1) {
        ad_status s = AD_OK;
        if (!b->program)
            s = ad_program_record_function(b->g, b->ctx, b->n, b->m, x, &b->program);
        if (s == AD_OK)
            s = jac ? ad_program_jacobian(b->program, x, y, jac)
                    : ad_program_value(b->program, x, y);
        if (s == AD_ENOTSUP && !b->program)
            b->unkept = 1;
        if (s != AD_EBRANCH || again)
            return s;
        ad_program_free(b->program);  /* a guard flipped: g takes another branch here */
        b->program = NULL;
    }
}

/* NLopt's nlopt_mfunc, for m constraints at once; data is an ad_nlopt made
 * with g.  grad, when asked for, is the m x n Jacobian, row-major. */
static inline void ad_nlopt_vector(unsigned m, double *result, unsigned n, const double *x,
                                   double *grad, void *data)
{
    ad_nlopt *b = (ad_nlopt *)data;
    if (b->status != AD_OK || !b->g || n != b->n || m != b->m) {
        ad__nlopt_fail(b, b->status != AD_OK ? b->status : AD_EINVAL);
        for (unsigned j = 0; j < m; j++)
            result[j] = NAN;
        return;
    }
    if (b->replay && !b->unkept) {
        ad_status s = ad__nlopt_replay(b, x, result, grad);
        if (s == AD_OK) {
            ad__nlopt_progress(b, x, NAN, NULL);
            return;
        }
        if (s != AD_ENOTSUP || !b->unkept) {
            ad__nlopt_fail(b, s);
            for (size_t j = 0; j < b->m; j++)
                result[j] = NAN;
            for (size_t k = 0; grad && k < b->m * b->n; k++)
                grad[k] = NAN;
            return;
        }
    }
    if (grad) {
        ad_status s = ad_jacobian(b->g, b->ctx, b->n, x, b->m, result, grad);
        if (s != AD_OK)
            ad__nlopt_fail(b, s);
        else
            ad__nlopt_progress(b, x, NAN, NULL);
        return;
    }
    for (size_t i = 0; i < b->n; i++)
        b->xr[i] = ad_const(x[i]);
    for (size_t j = 0; j < b->m; j++)
        b->yr[j] = ad_const(NAN);
    b->g(b->xr, b->n, b->yr, b->m, b->ctx);
    for (size_t j = 0; j < b->m; j++)
        result[j] = ad_value(b->yr[j]);
    ad__nlopt_progress(b, x, NAN, NULL);
}

AD__EXTERN_C_END

#endif
