/* dualrev/nlopt.h: NLopt's objective and constraints from an ad_objective
 * (scalar) or an ad_function (vector), with exact gradients and Jacobians.
 *
 *   #include <nlopt.h>
 *   #include <dualrev/nlopt.h>
 *
 *   ad_nlopt obj, con;
 *   ad_nlopt_init(&obj, opt, f, NULL, ctx, n, 0);          f: ad_objective
 *   ad_nlopt_init(&con, opt, NULL, g, ctx, n, m);          g: ad_function, m outputs
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
 * program. */
#ifndef DUALREV_NLOPT_H
#define DUALREV_NLOPT_H

#include <math.h>
#include <stdlib.h>

#include <dualrev.h>
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
} ad_nlopt;

/* One of f and g; m for g (0 for f).  AD_EINVAL (neither, or both),
 * AD_ENOMEM (b then holds nothing to free) or AD_OK. */
static inline ad_status ad_nlopt_init(ad_nlopt *b, nlopt_opt opt, ad_objective f, ad_function g,
                                      void *ctx, size_t n, size_t m)
{
    b->opt = opt;
    b->f = f;
    b->g = g;
    b->ctx = ctx;
    b->n = n;
    b->m = g ? m : 0;
    b->status = AD_OK;
    b->xr = b->yr = NULL;
    b->replay = 0;
    b->program = NULL;
    b->unkept = 0;
    if (!f == !g)
        return AD_EINVAL;
    b->xr = (ad_real *)malloc((n + b->m + 1) * sizeof *b->xr);
    b->yr = b->xr ? b->xr + n : NULL;
    return b->xr ? AD_OK : AD_ENOMEM;
}

static inline void ad_nlopt_free(ad_nlopt *b)
{
    free(b->xr);
    ad_program_free(b->program);
    b->xr = b->yr = NULL;
    b->program = NULL;
}

/* After a failure: the status kept, the optimiser stopped. */
static inline void ad__nlopt_fail(ad_nlopt *b, ad_status s)
{
    if (b->status == AD_OK)
        b->status = s;
    nlopt_force_stop(b->opt);
}

/* NLopt's nlopt_func, for an objective or one scalar constraint; data is an
 * ad_nlopt made with f. */
static inline double ad_nlopt_scalar(unsigned n, const double *x, double *grad, void *data)
{
    ad_nlopt *b = (ad_nlopt *)data;
    double fx = NAN;
    if (b->status != AD_OK || !b->f || n != b->n) {
        ad__nlopt_fail(b, b->status != AD_OK ? b->status : AD_EINVAL);
        return NAN;
    }
    if (b->replay) {
        ad_status s = ad_program_evaluate(&b->program, b->f, b->ctx, b->n, x, &fx, grad);
        if (s != AD_OK)
            ad__nlopt_fail(b, s);
        return fx;
    }
    if (grad) {
        ad_status s = ad_gradient(b->f, b->ctx, b->n, x, &fx, grad);
        if (s != AD_OK)
            ad__nlopt_fail(b, s);
        return fx;
    }
    for (size_t i = 0; i < b->n; i++)
        b->xr[i] = ad_const(x[i]);
    return ad_value(b->f(b->xr, b->n, b->ctx));
}

/* With replay, g's values (jac NULL) or values and Jacobian at x from its
 * program: recorded at x first if there is none, and again at x when a
 * guard fails there.  AD_ENOTSUP (b->unkept set) when g cannot be kept. */
static inline ad_status ad__nlopt_replay(ad_nlopt *b, const double *x, double *y, double *jac)
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
        if (s == AD_OK)
            return;
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
        return;
    }
    for (size_t i = 0; i < b->n; i++)
        b->xr[i] = ad_const(x[i]);
    for (size_t j = 0; j < b->m; j++)
        b->yr[j] = ad_const(NAN);
    b->g(b->xr, b->n, b->yr, b->m, b->ctx);
    for (size_t j = 0; j < b->m; j++)
        result[j] = ad_value(b->yr[j]);
}

AD__EXTERN_C_END

#endif
