/* dualrev: ad_gradient, a scalar objective recorded as a function with one
 * output, then one reverse sweep seeded with 1 (paper, sections 8 and 9). */
#include "tape.h"

typedef struct scalar {
    ad_objective f;
    void *ctx;
} scalar;

static void as_function(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const scalar *s = ctx;
    (void)m;
    y[0] = s->f(x, n, s->ctx);
}

ad_status ad_gradient(ad_objective f, void *ctx, size_t n, const double *x,
                      double *fx, double *grad)
{
    ad_status s = AD_EINVAL;
    ad_tape *t = ad_thread_tape();
    if (!f || !fx || (n && (!x || !grad)))
        goto fail;
    scalar call = {f, ctx};
    s = ad_record(t, as_function, &call, n, x, 1);
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
