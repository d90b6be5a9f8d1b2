/* dualrev/lbfgs.h: liblbfgs's callbacks for an ad_objective, or for a sum
 * of terms (ad_gradient_sum).
 *
 *   #include <lbfgs.h>
 *   #include <dualrev/lbfgs.h>
 *
 *   ad_lbfgs b = ad_lbfgs_of(f, ctx);
 *   (or ad_lbfgs_of_sum(term, ctx, nterms, threads): f = sum of term(i, x))
 *   int ret;
 *   ad_status s = ad_lbfgs_minimize(n, x, &fx, &b, &param, &ret);
 *
 * or lbfgs() itself with ad_lbfgs_evaluate and ad_lbfgs_progress, then
 * b.status.  Header only: the library itself does not depend on liblbfgs.
 * Each evaluation is one ad_gradient (a sum's, one ad_gradient_sum on
 * `threads` threads: the same bits for every thread count).  liblbfgs gives
 * the evaluation no way to stop the run: after a failure it answers NaN
 * without recording, and ad_lbfgs_progress cancels the run at the next
 * iteration's report (LBFGSERR_CANCELED).  lbfgs's own code does not
 * always show the failure (a NaN first gradient gives
 * LBFGS_ALREADY_MINIMIZED): the status does.
 *
 * Progress: set b.progress (dualrev/bridge.h) and b.progress_ctx, and
 * ad_lbfgs_progress calls it at each iteration with liblbfgs's k, f(x),
 * |g| and x; a nonzero return cancels the run (LBFGSERR_CANCELED) and sets
 * b.stopped, the status staying AD_OK.
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
 * ad_program_free(b.program).  A sum is not kept as a program: with a
 * term, replay has no effect.
 *
 * Sums over MPI ranks: with b.evaluator = ad_mpi_sum_evaluator(&comm)
 * (dualrev/mpi.h; dualrev/bridge.h says what an evaluator is), each
 * evaluation of a sum is one ad_mpi_gradient_sum on comm, which gives
 * every rank ad_gradient_sum's bits.  Every rank of comm makes the same
 * bridge and calls ad_lbfgs_minimize with the same n, x and param: the
 * runs stay in lockstep, and end with the same x, fx, status and code on
 * every rank. */
#ifndef DUALREV_LBFGS_H
#define DUALREV_LBFGS_H

#include <math.h>
#include <string.h>

#include <dualrev.h>
#include <dualrev/bridge.h>
#include <lbfgs.h>

AD__EXTERN_C_BEGIN

typedef struct ad_lbfgs {
    ad_objective f;
    void *ctx;
    ad_status status;           /* AD_OK, or the first failing evaluation's status */
    unsigned long evaluations;  /* gradients taken */
    int replay;                 /* 1: replay a program of f (above); 0, the default: ad_gradient */
    ad_program *program;        /* the program, while replaying; NULL otherwise */
    ad_term term;               /* a sum of nterms terms in place of f (ad_lbfgs_of_sum) */
    size_t nterms;
    unsigned threads;           /* ad_gradient_sum's threads */
    ad_sum_evaluator evaluator; /* the sum's evaluations: zero (the default), ad_gradient_sum;
                                   ad_mpi_sum_evaluator, over MPI ranks (above) */
    ad_progress_fn progress;    /* NULL, or called at each iteration (above) */
    void *progress_ctx;
    int stopped;                /* 1: the last run was stopped by progress */
} ad_lbfgs;

/* replay 0, no program, no progress hook: set b.replay = 1 or b.progress
 * afterwards. */
static inline ad_lbfgs ad_lbfgs_of(ad_objective f, void *ctx)
{
    ad_lbfgs b;
    memset(&b, 0, sizeof b);
    b.f = f;
    b.ctx = ctx;
    b.status = f ? AD_OK : AD_EINVAL;
    return b;
}

/* f(x) = sum over i < nterms of term(i, x, n, ctx), each evaluation one
 * ad_gradient_sum on `threads` threads (0: every core).  A NULL term gives
 * a bridge whose status is AD_EINVAL (ad_lbfgs_minimize returns it). */
static inline ad_lbfgs ad_lbfgs_of_sum(ad_term term, void *ctx, size_t nterms, unsigned threads)
{
    ad_lbfgs b;
    memset(&b, 0, sizeof b);
    b.term = term;
    b.ctx = ctx;
    b.nterms = nterms;
    b.threads = threads;
    b.status = term ? AD_OK : AD_EINVAL;
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
    ad_status s;
    if (b->term)
        s = ad_sum_evaluator_gradient(&b->evaluator, b->term, b->ctx, b->nterms, (size_t)n, x,
                                      &fx, g, b->threads);
    else if (b->replay)
        s = ad_program_evaluate(&b->program, b->f, b->ctx, (size_t)n, x, &fx, g);
    else
        s = ad_gradient(b->f, b->ctx, (size_t)n, x, &fx, g);
    b->evaluations++;
    if (s != AD_OK)
        b->status = s;  /* fx and g are NaN */
    return fx;
}

/* liblbfgs's lbfgs_progress_t: cancels the run once an evaluation failed;
 * otherwise calls the progress hook, if any, and cancels the run (stopped
 * set) when it returns nonzero.  Cancelling returns LBFGSERR_CANCELED,
 * which lbfgs() then returns (it returns a progress callback's nonzero
 * value as it is). */
static inline int ad_lbfgs_progress(void *instance, const lbfgsfloatval_t *x,
                                    const lbfgsfloatval_t *g, const lbfgsfloatval_t fx,
                                    const lbfgsfloatval_t xnorm, const lbfgsfloatval_t gnorm,
                                    const lbfgsfloatval_t step, int n, int k, int ls)
{
    ad_lbfgs *b = (ad_lbfgs *)instance;
    (void)g, (void)xnorm, (void)step, (void)ls;
    if (b->status != AD_OK)
        return LBFGSERR_CANCELED;  /* lbfgs() returns what this returns */
    if (b->progress) {
        ad_progress p;
        p.iteration = k;
        p.f = fx;
        p.gnorm = gnorm;
        p.inf_pr = p.inf_du = NAN;
        p.x = x;
        p.n = n > 0 ? (size_t)n : 0;
        p.evaluations = b->evaluations;
        if (b->progress(&p, b->progress_ctx)) {
            b->stopped = 1;
            return LBFGSERR_CANCELED;
        }
    }
    return 0;
}

/* lbfgs() on f from x (n values; the minimiser on return) with b's
 * callbacks; *fx the value there, *ret (if not NULL) lbfgs's code.
 * Returns AD_OK (also when the progress hook stopped the run: b->stopped),
 * or the first failing evaluation's status.  AD_EINVAL, without running
 * lbfgs (*ret then LBFGSERR_UNKNOWNERROR), for a NULL b, x or fx, n < 0,
 * or a bridge made with a NULL f or term; a bridge that failed in an
 * earlier run returns that status the same way.  With b->replay, the run
 * records its own program at its first point (one left in b->program is
 * freed first) and frees it at the end. */
AD_NODISCARD static inline ad_status ad_lbfgs_minimize(int n, lbfgsfloatval_t *x,
                                                       lbfgsfloatval_t *fx, ad_lbfgs *b,
                                                       lbfgs_parameter_t *param, int *ret)
{
    if (ret)
        *ret = LBFGSERR_UNKNOWNERROR;
    if (!b || !x || !fx || n < 0)
        return AD_EINVAL;
    b->stopped = 0;
    if (b->status != AD_OK)
        return b->status;
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
