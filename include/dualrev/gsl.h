/* dualrev/gsl.h: GSL's multimin function (gsl_multimin_function_fdf) from an
 * ad_objective, or from a sum of terms (ad_gradient_sum).
 *
 *   #include <gsl/gsl_multimin.h>
 *   #include <dualrev/gsl.h>
 *
 *   ad_gsl b;
 *   gsl_multimin_function_fdf F;
 *   if (ad_gsl_init(&b, f, ctx, n) != AD_OK) ...
 *   (or ad_gsl_init_sum(&b, term, ctx, nterms, n, threads): f = sum of term(i, x))
 *   ad_gsl_fill(&F, &b);
 *   gsl_multimin_fdfminimizer_set(s, &F, x0, step, tol);  ... iterate ...
 *   if (b.status != AD_OK) ...   the first failing evaluation's status
 *   ad_gsl_free(&b);
 *
 * or the bridge's own loop, which reports progress:
 *
 *   s = ad_gsl_minimize(&b, gsl_multimin_fdfminimizer_vector_bfgs2, x, 0.01, 0.1,
 *                       1e-9, 1000, &fx, &code);
 *
 * Header only: the library itself does not depend on GSL.  df and fdf are
 * one ad_gradient each; f, the line searches' value-only call, evaluates
 * the objective on constants and records nothing.  GSL's callbacks cannot
 * report an error: after a failure they answer NaN (and a NaN gradient),
 * which stops the minimiser's progress; b.status says why.
 *
 * Replay (off by default): set b.replay = 1 after ad_gsl_init, and f is
 * recorded as a program (ad_program_record) at the first point the
 * minimiser asks about; every callback is then a replay of it
 * (ad_program_evaluate: ad_program_gradient for df and fdf,
 * ad_program_value for f), which gives ad_gradient's numbers (and f's
 * value) bit for bit without calling f.  Where a guard the program kept
 * (ad_lt, ...) comes out the other way, f is recorded again at that point;
 * a function a program cannot keep (AD_ENOTSUP) is evaluated as without
 * replay.  Branches on ad_value() are not seen by a replay (docs/api.md,
 * "Recorded programs"), nor are changes to what f reads through ctx: to
 * start again from f, ad_program_free(b.program) and set it to NULL.  With
 * replay, the value-only callback fails too where its replay does
 * (AD_ENOMEM, or the recording's errors at the first point).  ad_gsl_free
 * frees the program.  A sum is not kept as a program: with a term, replay
 * has no effect.
 *
 * Sums: with ad_gsl_init_sum, df and fdf are one ad_gradient_sum on
 * `threads` threads (the same bits for every thread count), and so is f:
 * the library has no value-only sum, so the value-only callback takes the
 * gradient too and drops it (a sum's f costs what its fdf does).
 * b.evaluator (dualrev/bridge.h), zero after ad_gsl_init_sum, may be set
 * to ad_mpi_sum_evaluator(&comm) (dualrev/mpi.h): each evaluation is then
 * one ad_mpi_gradient_sum on comm, ad_gradient_sum's bits on every rank,
 * and every rank running the same ad_gsl_minimize (same arguments) stays
 * in lockstep with the others.
 *
 * Progress: ad_gsl_minimize drives GSL's iteration itself and calls
 * b.progress (dualrev/bridge.h), if set, after each iteration with its
 * count, f, |g| and x; a nonzero return ends the loop and sets b.stopped.
 * GSL's error handler is GSL's: ad_gsl_minimize calls only functions that
 * return their errors (gsl_set_error_handler_off() keeps GSL from
 * aborting on the allocations'). */
#ifndef DUALREV_GSL_H
#define DUALREV_GSL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <dualrev.h>
#include <dualrev/bridge.h>
#include <gsl/gsl_blas.h>
#include <gsl/gsl_multimin.h>
#include <gsl/gsl_nan.h>

AD__EXTERN_C_BEGIN

typedef struct ad_gsl {
    ad_objective f;
    void *ctx;
    size_t n;
    ad_status status;  /* AD_OK, or the first failing evaluation's status */
    double *x, *g;     /* x and the gradient, contiguous (a gsl_vector may have a stride) */
    ad_real *xr;       /* x as constants, for value-only calls */
    int replay;        /* 1: replay a program of f (above); 0, ad_gsl_init's: ad_gradient */
    ad_program *program; /* the program, once recorded; freed by ad_gsl_free */
    ad_term term;      /* a sum of nterms terms in place of f (ad_gsl_init_sum) */
    size_t nterms;
    unsigned threads;  /* ad_gradient_sum's threads */
    ad_sum_evaluator evaluator; /* the sum's evaluations: zero (the default), ad_gradient_sum;
                                   ad_mpi_sum_evaluator, over MPI ranks (above) */
    ad_progress_fn progress; /* NULL, or called by ad_gsl_minimize at each iteration */
    void *progress_ctx;
    int stopped;       /* 1: ad_gsl_minimize's last loop was stopped by progress */
    long iterations;   /* ad_gsl_minimize's iterations, last run */
    unsigned long evaluations; /* callbacks that evaluated the objective */
} ad_gsl;

static inline ad_status ad__gsl_alloc(ad_gsl *b, size_t n)
{
    size_t k = n ? n : 1;
    b->n = n;
    b->status = AD_OK;
    b->x = (double *)malloc(2 * k * sizeof *b->x);
    b->g = b->x ? b->x + k : NULL;
    b->xr = (ad_real *)malloc(k * sizeof *b->xr);
    if (!b->x || !b->xr) {
        free(b->x);
        free(b->xr);
        b->x = b->g = NULL;
        b->xr = NULL;
        return AD_ENOMEM;
    }
    return AD_OK;
}

/* AD_EINVAL (f NULL), AD_ENOMEM (b then holds nothing to free) or AD_OK. */
AD_NODISCARD static inline ad_status ad_gsl_init(ad_gsl *b, ad_objective f, void *ctx, size_t n)
{
    memset(b, 0, sizeof *b);
    b->f = f;
    b->ctx = ctx;
    return f ? ad__gsl_alloc(b, n) : AD_EINVAL;
}

/* f(x) = sum over i < nterms of term(i, x, n, ctx) (ad_gradient_sum on
 * `threads` threads, 0: every core).  AD_EINVAL (term NULL), AD_ENOMEM (b
 * then holds nothing to free) or AD_OK. */
AD_NODISCARD static inline ad_status ad_gsl_init_sum(ad_gsl *b, ad_term term, void *ctx,
                                                     size_t nterms, size_t n, unsigned threads)
{
    memset(b, 0, sizeof *b);
    b->term = term;
    b->ctx = ctx;
    b->nterms = nterms;
    b->threads = threads;
    return term ? ad__gsl_alloc(b, n) : AD_EINVAL;
}

/* b->x's value into *fx and gradient into b->g, by the sum, the program or
 * ad_gradient; the status kept on failure (fx and g then NaN). */
static inline void ad__gsl_gradient(ad_gsl *b, double *fx)
{
    ad_status s;
    if (b->term)
        s = ad_sum_evaluator_gradient(&b->evaluator, b->term, b->ctx, b->nterms, b->n, b->x, fx,
                                      b->g, b->threads);
    else if (b->replay)
        s = ad_program_evaluate(&b->program, b->f, b->ctx, b->n, b->x, fx, b->g);
    else
        s = ad_gradient(b->f, b->ctx, b->n, b->x, fx, b->g);
    b->evaluations++;
    if (s != AD_OK)
        b->status = s;
}

static inline void ad_gsl_free(ad_gsl *b)
{
    free(b->x);
    free(b->xr);
    ad_program_free(b->program);
    b->x = b->g = NULL;
    b->xr = NULL;
    b->program = NULL;
}

/* The multimin callbacks; params is an ad_gsl. */
static inline double ad_gsl_f(const gsl_vector *x, void *params)
{
    ad_gsl *b = (ad_gsl *)params;
    if (b->status != AD_OK)
        return GSL_NAN;
    if (b->term) {  /* no value-only sum: through the gradient */
        double fx;
        for (size_t i = 0; i < b->n; i++)
            b->x[i] = gsl_vector_get(x, i);
        ad__gsl_gradient(b, &fx);
        return fx;
    }
    b->evaluations++;
    if (b->replay) {
        double fx;
        for (size_t i = 0; i < b->n; i++)
            b->x[i] = gsl_vector_get(x, i);
        ad_status s = ad_program_evaluate(&b->program, b->f, b->ctx, b->n, b->x, &fx, NULL);
        if (s != AD_OK)
            b->status = s;  /* fx is NaN */
        return fx;
    }
    for (size_t i = 0; i < b->n; i++)
        b->xr[i] = ad_const(gsl_vector_get(x, i));
    return ad_value(b->f(b->xr, b->n, b->ctx));
}

static inline void ad_gsl_fdf(const gsl_vector *x, void *params, double *f, gsl_vector *g)
{
    ad_gsl *b = (ad_gsl *)params;
    double fx = GSL_NAN;
    if (b->status == AD_OK) {
        for (size_t i = 0; i < b->n; i++)
            b->x[i] = gsl_vector_get(x, i);
        ad__gsl_gradient(b, &fx);  /* fx and g NaN on failure */
    }
    for (size_t i = 0; i < b->n; i++)
        gsl_vector_set(g, i, b->status == AD_OK ? b->g[i] : GSL_NAN);
    if (f)
        *f = fx;
}

static inline void ad_gsl_df(const gsl_vector *x, void *params, gsl_vector *g)
{
    ad_gsl_fdf(x, params, NULL, g);
}

/* F's n, f, df, fdf and params for b. */
static inline void ad_gsl_fill(gsl_multimin_function_fdf *F, ad_gsl *b)
{
    F->n = b->n;
    F->f = ad_gsl_f;
    F->df = ad_gsl_df;
    F->fdf = ad_gsl_fdf;
    F->params = b;
}

/* Minimises from x (n values; the last iterate on return, *fx the value
 * there) with GSL's minimiser T (gsl_multimin_fdfminimizer_vector_bfgs2,
 * _conjugate_fr, ...) set up with step and tol, iterating until
 * gsl_multimin_test_gradient(g, epsabs) succeeds, T stops making progress,
 * max_iterations pass, or the progress hook stops it (b->stopped).  *code
 * (if not NULL): GSL_SUCCESS (converged), GSL_CONTINUE (the iteration
 * limit, or stopped by the hook), or what set or iterate returned
 * (GSL_ENOPROG, ...).  Returns AD_OK (whatever *code), or the first failing
 * evaluation's status (the loop then ends at once); AD_EINVAL (b, T, x or
 * fx NULL, n = 0, or a bridge without f or term), AD_ENOMEM (GSL's allocations).
 * b->iterations counts the iterations; one bridge may run it many
 * times. */
AD_NODISCARD static inline ad_status ad_gsl_minimize(ad_gsl *b,
                                                     const gsl_multimin_fdfminimizer_type *T,
                                                     double *x, double step, double tol,
                                                     double epsabs, long max_iterations,
                                                     double *fx, int *code)
{
    if (code)
        *code = GSL_EINVAL;
    if (!b || !T || !x || !fx || (!b->f && !b->term) || !b->x || !b->n)
        return AD_EINVAL;
    b->stopped = 0;
    b->iterations = 0;
    if (b->status != AD_OK)
        return b->status;
    size_t n = b->n;
    gsl_multimin_function_fdf F;
    gsl_vector *v = gsl_vector_alloc(n);
    gsl_multimin_fdfminimizer *s = gsl_multimin_fdfminimizer_alloc(T, n);
    if (!v || !s) {
        if (v)
            gsl_vector_free(v);
        if (s)
            gsl_multimin_fdfminimizer_free(s);
        return AD_ENOMEM;
    }
    ad_gsl_fill(&F, b);
    for (size_t i = 0; i < n; i++)
        gsl_vector_set(v, i, x[i]);
    int r = gsl_multimin_fdfminimizer_set(s, &F, v, step, tol);
    if (r == GSL_SUCCESS)
        r = gsl_multimin_test_gradient(s->gradient, epsabs);  /* GSL_CONTINUE: go on */
    while (r == GSL_CONTINUE && b->status == AD_OK && b->iterations < max_iterations) {
        int e = gsl_multimin_fdfminimizer_iterate(s);
        if (b->status != AD_OK)
            break;
        if (e != GSL_SUCCESS) {
            r = e;  /* GSL_ENOPROG, ... */
            break;
        }
        b->iterations++;
        if (b->progress) {
            ad_progress p;
            for (size_t i = 0; i < n; i++)  /* contiguous, as s->x may not be */
                b->x[i] = gsl_vector_get(s->x, i);
            p.iteration = b->iterations;
            p.f = s->f;
            p.gnorm = gsl_blas_dnrm2(s->gradient);
            p.inf_pr = p.inf_du = NAN;
            p.x = b->x;
            p.n = n;
            p.evaluations = b->evaluations;
            if (b->progress(&p, b->progress_ctx)) {
                b->stopped = 1;
                break;  /* r is GSL_CONTINUE */
            }
        }
        r = gsl_multimin_test_gradient(s->gradient, epsabs);
    }
    for (size_t i = 0; i < n; i++)
        x[i] = gsl_vector_get(s->x, i);
    *fx = s->f;
    if (code)
        *code = r;
    gsl_multimin_fdfminimizer_free(s);
    gsl_vector_free(v);
    return b->status;
}

AD__EXTERN_C_END

#endif
