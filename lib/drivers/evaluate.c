/* dualrev: a function's value alone.  f runs on constants, so no
 * operation records anything (inside a recording too: constants are
 * nobody's values); what every optimiser's value-only callback needs. */
#include "status.h"
#include "tape.h"

/* Room for the inputs as constants: on the stack for small functions,
 * which optimisers evaluate very often. */
#define SMALL 32

static ad_real *constants(ad_real *small, size_t n, const double *x)
{
    ad_real *c = n <= SMALL ? small : n <= SIZE_MAX / sizeof *c ? ad_alloc(n * sizeof *c) : NULL;
    for (size_t i = 0; c && i < n; i++)
        c[i] = ad_const(x[i]);
    return c;
}

/* An output that is a value of some recording: f used one it was not
 * given (through ctx or a global). */
static int any_active(size_t m, const ad_real *y)
{
    for (size_t j = 0; j < m; j++)
        if (y[j].id)
            return 1;
    return 0;
}

ad_status ad_evaluate_function(ad_function f, void *ctx, size_t n, const double *x, size_t m,
                               double *y)
{
    if (!f || (n && !x) || (m && !y)) {
        ad_fill_nan(y, m);
        return AD_EINVAL;
    }
    ad_real small[SMALL] = {{0}}, *xs = constants(small, n, x);
    ad_real *ys = m <= SIZE_MAX / sizeof *ys ? ad_alloc((m ? m : 1) * sizeof *ys) : NULL;
    ad_status s = xs && ys ? AD_OK : AD_ENOMEM;
    if (s == AD_OK) {
        for (size_t j = 0; j < m; j++)
            ys[j] = ad_const(NAN);  /* an output f leaves unwritten is NaN */
        f(xs, n, ys, m, ctx);
        s = any_active(m, ys) ? AD_EFOREIGN : AD_OK;
        for (size_t j = 0; j < m; j++)
            y[j] = s == AD_OK ? ys[j].v : NAN;
    } else {
        ad_fill_nan(y, m);
    }
    if (xs != small)
        ad_free(xs);
    ad_free(ys);
    return s;
}

ad_status ad_evaluate(ad_objective f, void *ctx, size_t n, const double *x, double *fx)
{
    if (!f || !fx || (n && !x)) {
        ad_fill_nan(fx, 1);
        return AD_EINVAL;
    }
    ad_real small[SMALL] = {{0}}, *xs = constants(small, n, x);
    if (!xs) {
        *fx = NAN;
        return AD_ENOMEM;
    }
    ad_real y = f(xs, n, ctx);
    if (xs != small)
        ad_free(xs);
    *fx = y.id ? NAN : y.v;
    return y.id ? AD_EFOREIGN : AD_OK;
}
