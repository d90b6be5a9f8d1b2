/* dualrev: Hessian-vector products and Hessians (ad_hvp, ad_hvps, ad_hessian):
 * one second-order recording, then the second-order sweep
 * (sweeps/second_order.c). */
#include "alloc.h"
#include "recording.h"
#include "second_order.h"
#include "status.h"

ad_status ad_hvp(ad_objective f, void *ctx, size_t n, const double *x, const double *v,
                 double *fx, double *grad, double *hv)
{
    ad_status s = AD_EINVAL;
    ad_tape *t = ad_thread_tape();
    if (f && fx && (!n || (x && v && grad && hv))) {
        s = ad_record_objective(t, f, ctx, n, x, 1);
        if (s == AD_OK)
            s = ad_second_hvp(t, n, v, grad, hv);
    }
    if (s == AD_OK) {
        ad_read_outputs(t, 1, fx);
        return AD_OK;
    }
    ad_fill_nan(fx, 1);
    ad_fill_nan(grad, n);
    ad_fill_nan(hv, n);
    return s;
}

ad_status ad_hvps(ad_objective f, void *ctx, size_t n, const double *x, size_t k,
                  const double *V, double *fx, double *grad, double *HV)
{
    if (!k)
        return AD_OK;
    ad_status s = AD_EINVAL;
    ad_tape *t = ad_thread_tape();
    int sized = ad_size_fits(k, n);
    if (f && fx && sized && (!n || (x && V && grad && HV))) {
        s = ad_record_objective(t, f, ctx, n, x, 1);
        if (s == AD_OK)
            s = ad_second_directions(t, n, k, V, grad, HV);
    }
    if (s == AD_OK) {
        ad_read_outputs(t, 1, fx);
        return AD_OK;
    }
    ad_fill_nan(fx, 1);
    ad_fill_nan(grad, n);
    if (HV && sized)
        ad_fill_nan(HV, k * n);
    return s;
}

ad_status ad_hessian(ad_objective f, void *ctx, size_t n, const double *x, double *fx,
                     double *grad, double *hess)
{
    ad_status s = AD_EINVAL;
    ad_tape *t = ad_thread_tape();
    int sized = ad_size_fits(n, n);
    if (f && fx && sized && (!n || (x && grad && hess))) {
        s = ad_record_objective(t, f, ctx, n, x, 1);
        if (s == AD_OK)
            s = ad_second_columns(t, n, grad, hess);
    }
    if (s == AD_OK) {
        ad_read_outputs(t, 1, fx);
        return AD_OK;
    }
    ad_fill_nan(fx, 1);
    ad_fill_nan(grad, n);
    if (hess && n && sized)
        ad_fill_nan(hess, n * n);
    return s;
}
