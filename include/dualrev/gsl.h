/* dualrev/gsl.h: GSL's multimin function (gsl_multimin_function_fdf) from an
 * ad_objective.
 *
 *   #include <gsl/gsl_multimin.h>
 *   #include <dualrev/gsl.h>
 *
 *   ad_gsl b;
 *   gsl_multimin_function_fdf F;
 *   if (ad_gsl_init(&b, f, ctx, n) != AD_OK) ...
 *   ad_gsl_fill(&F, &b);
 *   gsl_multimin_fdfminimizer_set(s, &F, x0, step, tol);  ... iterate ...
 *   if (b.status != AD_OK) ...   the first failing evaluation's status
 *   ad_gsl_free(&b);
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
 * frees the program. */
#ifndef DUALREV_GSL_H
#define DUALREV_GSL_H

#include <stdlib.h>

#include <dualrev.h>
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
} ad_gsl;

/* AD_ENOMEM (b then holds nothing to free) or AD_OK. */
static inline ad_status ad_gsl_init(ad_gsl *b, ad_objective f, void *ctx, size_t n)
{
    size_t k = n ? n : 1;
    b->f = f;
    b->ctx = ctx;
    b->n = n;
    b->status = AD_OK;
    b->replay = 0;
    b->program = NULL;
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
        ad_status s = b->replay ? ad_program_evaluate(&b->program, b->f, b->ctx, b->n, b->x,
                                                      &fx, b->g)
                                : ad_gradient(b->f, b->ctx, b->n, b->x, &fx, b->g);
        if (s != AD_OK)
            b->status = s;  /* fx and g are NaN */
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

AD__EXTERN_C_END

#endif
