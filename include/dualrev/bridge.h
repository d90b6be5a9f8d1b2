/* dualrev/bridge.h: what the optimiser bridges (dualrev/lbfgs.h, gsl.h,
 * nlopt.h, ipopt.h) share: the progress hook.  Each bridge includes it.
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
 * the optimiser it reports on. */
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

AD__EXTERN_C_END

#endif
