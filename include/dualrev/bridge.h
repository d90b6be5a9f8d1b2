/* dualrev/bridge.h: what the optimiser bridges (dualrev/lbfgs.h, gsl.h,
 * nlopt.h, ipopt.h) share: the progress hook, and the evaluator of a sum.
 * Each bridge includes it.
 *
 * A bridge's `progress` field (NULL: none), set after its init, is called
 * with an ad_progress once per iteration of the optimiser (liblbfgs's
 * progress callback, Ipopt's intermediate callback, the iteration loop of
 * ad_gsl_minimize) or, for NLopt, which has no iteration callback, once
 * per evaluation of the bridge's function.  A nonzero return stops the
 * optimiser by its own means (LBFGSERR_CANCELED, User_Requested_Stop,
 * NLOPT_FORCED_STOP, the end of ad_gsl_minimize's loop) and sets the
 * bridge's `stopped`; its status stays AD_OK, as nothing failed.  The hook
 * runs on the optimiser's thread, between evaluations; it must not call
 * the optimiser it reports on.
 *
 * A bridge made for a sum of terms (ad_lbfgs_of_sum, ad_gsl_init_sum,
 * ad_nlopt_init_sum, ad_ipopt_init_sum) evaluates it through its
 * `evaluator` field, an ad_sum_evaluator.  Its constructor zeroes it:
 * every evaluation is then ad_gradient_sum in this process.  Set after the
 * constructor, each function of it that is not NULL is called in place of
 * ad_gradient_sum (ad_hvp_sum), with the evaluator's ctx first and then
 * ad_gradient_sum's (ad_hvp_sum's) arguments; it must give their results
 * (fx, grad, hv NaN and a status on failure).  dualrev/mpi.h's
 * ad_mpi_sum_evaluator shares each evaluation out over the ranks of an MPI
 * communicator, every rank running the same optimiser in lockstep. */
#ifndef DUALREV_BRIDGE_H
#define DUALREV_BRIDGE_H

#include <stddef.h>

#include <dualrev.h>

AD__EXTERN_C_BEGIN

typedef struct ad_progress {
    long iteration;     /* the optimiser's iteration count (liblbfgs, GSL: 1 at the
                           first; Ipopt: 0 at the start point); NLopt: evaluations */
    double f;           /* the objective at the iterate */
    double gnorm;       /* |grad f|, 2-norm, at the iterate; NaN where not known
                           (Ipopt; NLopt's value-only evaluations) */
    double inf_pr, inf_du; /* Ipopt's primal and dual infeasibility; NaN elsewhere */
    const double *x;    /* the iterate, n values, valid during the call; NULL
                           where the optimiser does not give it (Ipopt) */
    size_t n;
    unsigned long evaluations; /* the bridge's evaluations so far */
} ad_progress;

/* Return 0 to go on, nonzero to stop the optimiser. */
typedef int (*ad_progress_fn)(const ad_progress *p, void *ctx);

/* How a bridge evaluates its sum (above): zeroed, ad_gradient_sum and
 * ad_hvp_sum; otherwise each non-NULL function in their place.  tctx is
 * the term's ctx, ctx the evaluator's. */
typedef struct ad_sum_evaluator {
    ad_status (*gradient)(void *ctx, ad_term term, void *tctx, size_t nterms, size_t n,
                          const double *x, double *fx, double *grad, unsigned threads);
    ad_status (*hvp)(void *ctx, ad_term term, void *tctx, size_t nterms, size_t n,
                     const double *x, const double *v, double *fx, double *grad, double *hv,
                     unsigned threads);
    void *ctx;          /* the functions' first argument */
} ad_sum_evaluator;

/* ad_gradient_sum's value and gradient through e: e->gradient if e and it
 * are not NULL, else ad_gradient_sum itself. */
AD_NODISCARD static inline ad_status ad_sum_evaluator_gradient(const ad_sum_evaluator *e,
                                                               ad_term term, void *ctx,
                                                               size_t nterms, size_t n,
                                                               const double *x, double *fx,
                                                               double *grad, unsigned threads)
{
    if (e && e->gradient)
        return e->gradient(e->ctx, term, ctx, nterms, n, x, fx, grad, threads);
    return ad_gradient_sum(term, ctx, nterms, n, x, fx, grad, threads);
}

/* The same for ad_hvp_sum: e->hvp if e and it are not NULL. */
AD_NODISCARD static inline ad_status ad_sum_evaluator_hvp(const ad_sum_evaluator *e,
                                                          ad_term term, void *ctx,
                                                          size_t nterms, size_t n,
                                                          const double *x, const double *v,
                                                          double *fx, double *grad, double *hv,
                                                          unsigned threads)
{
    if (e && e->hvp)
        return e->hvp(e->ctx, term, ctx, nterms, n, x, v, fx, grad, hv, threads);
    return ad_hvp_sum(term, ctx, nterms, n, x, v, fx, grad, hv, threads);
}

AD__EXTERN_C_END

#endif
