/* dualrev: ad_gradient, a scalar objective recorded as a function with one
 * output, then one reverse sweep seeded with 1 (paper, sections 8 and 9). */
#include "recording.h"
#include "status.h"
#include "sweep.h"
#include "tape.h"

ad_status ad_gradient(ad_objective f, void *ctx, size_t n, const double *x,
                      double *fx, double *grad)
{
    ad_status s = AD_EINVAL;
    ad_tape *t = ad_thread_tape();
    if (!f || !fx || (n && (!x || !grad)))
        goto fail;
    s = ad_record_objective(t, f, ctx, n, x, 0);
    if (s == AD_OK)
        s = ad_reverse(t, 1, NULL, grad);
    if (s != AD_OK)
        goto fail;
    ad_read_outputs(t, 1, fx);
    return AD_OK;
fail:
    ad_fill_nan(fx, 1);
    ad_fill_nan(grad, n);
    return s;
}
