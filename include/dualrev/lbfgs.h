/* dualrev/lbfgs.h: liblbfgs's callbacks for an ad_objective.
 *
 *   #include <lbfgs.h>
 *   #include <dualrev/lbfgs.h>
 *
 *   ad_lbfgs b = ad_lbfgs_of(f, ctx);
 *   int ret;
 *   ad_status s = ad_lbfgs_minimize(n, x, &fx, &b, &param, &ret);
 *
 * or lbfgs() itself with ad_lbfgs_evaluate and ad_lbfgs_progress, then
 * b.status.  Header only: the library itself does not depend on liblbfgs.
 * Each evaluation is one ad_gradient.  liblbfgs gives the evaluation no
 * way to stop the run: after a failure it answers NaN without recording,
 * and ad_lbfgs_progress cancels the run at the next iteration's report
 * (LBFGSERR_CANCELED).  lbfgs's own code does not always show the failure
 * (a NaN first gradient gives LBFGS_ALREADY_MINIMIZED): the status does.
 *
 * Replay (off by default): with b.replay set to 1, f is recorded as a
 * program (ad_program_record) at the first point and every evaluation is a
 * replay of it, ad_program_evaluate: the same numbers as ad_gradient, bit
 * for bit, without calling f.  Where a guard the program kept (ad_lt, ...)
 * comes out the other way, f is recorded again at that point; a function
 * a program cannot keep (AD_ENOTSUP) is evaluated by ad_gradient.  Branches
 * on ad_value() are not seen by a replay (docs/api.md, "Recorded
 * programs"), nor are changes to what f reads through ctx.  The program is
 * b.program: ad_lbfgs_minimize frees it (and sets it to NULL) when lbfgs()
 * returns; a caller of lbfgs() itself frees it with
 * ad_program_free(b.program). */
#ifndef DUALREV_LBFGS_H
#define DUALREV_LBFGS_H

#include <math.h>

#include <dualrev.h>
#include <lbfgs.h>

AD__EXTERN_C_BEGIN

typedef struct ad_lbfgs {
    ad_objective f;
    void *ctx;
    ad_status status;           /* AD_OK, or the first failing evaluation's status */
    unsigned long evaluations;  /* gradients taken */
    int replay;                 /* 1: replay a program of f (above); 0, the default: ad_gradient */
    ad_program *program;        /* the program, while replaying; NULL otherwise */
} ad_lbfgs;

/* replay 0 and no program: set b.replay = 1 afterwards to replay. */
static inline ad_lbfgs ad_lbfgs_of(ad_objective f, void *ctx)
{
    ad_lbfgs b = {f, ctx, AD_OK, 0, 0, NULL};
    return b;
}

/* liblbfgs's lbfgs_evaluate_t: f(x), and its gradient into g; instance is
 * an ad_lbfgs.  lbfgsfloatval_t must be double (LBFGS_FLOAT 64, Debian's). */
static inline lbfgsfloatval_t ad_lbfgs_evaluate(void *instance, const lbfgsfloatval_t *x,
                                                lbfgsfloatval_t *g, const int n,
                                                const lbfgsfloatval_t step)
{
    ad_lbfgs *b = (ad_lbfgs *)instance;
    double fx;
    (void)step;
    if (b->status != AD_OK || n < 0) {
        for (int i = 0; i < n; i++)
            g[i] = NAN;
        return NAN;
    }
    ad_status s = b->replay
                      ? ad_program_evaluate(&b->program, b->f, b->ctx, (size_t)n, x, &fx, g)
                      : ad_gradient(b->f, b->ctx, (size_t)n, x, &fx, g);
    b->evaluations++;
    if (s != AD_OK)
        b->status = s;  /* fx and g are NaN */
    return fx;
}

/* liblbfgs's lbfgs_progress_t: cancels the run once an evaluation failed. */
static inline int ad_lbfgs_progress(void *instance, const lbfgsfloatval_t *x,
                                    const lbfgsfloatval_t *g, const lbfgsfloatval_t fx,
                                    const lbfgsfloatval_t xnorm, const lbfgsfloatval_t gnorm,
                                    const lbfgsfloatval_t step, int n, int k, int ls)
{
    (void)x, (void)g, (void)fx, (void)xnorm, (void)gnorm, (void)step, (void)n, (void)k, (void)ls;
    return ((const ad_lbfgs *)instance)->status != AD_OK;
}

/* lbfgs() on f from x (n values; the minimiser on return) with b's
 * callbacks; *fx the value there, *ret (if not NULL) lbfgs's code.
 * Returns AD_OK, or the first failing evaluation's status.  With b->replay,
 * the run records its own program at its first point (one left in
 * b->program is freed first) and frees it at the end. */
static inline ad_status ad_lbfgs_minimize(int n, lbfgsfloatval_t *x, lbfgsfloatval_t *fx,
                                          ad_lbfgs *b, lbfgs_parameter_t *param, int *ret)
{
    ad_program_free(b->program);
    b->program = NULL;
    int r = lbfgs(n, x, fx, ad_lbfgs_evaluate, ad_lbfgs_progress, b, param);
    ad_program_free(b->program);
    b->program = NULL;
    if (ret)
        *ret = r;
    return b->status;
}

AD__EXTERN_C_END

#endif
