/* dualrev: nested derivatives, ad_gradient_r and ad_jvp_r.
 *
 * Inside a recording, the inner function is recorded one nesting level
 * down as a program (program.h), and the program with its sweep is
 * replayed onto the enclosing recording (sweeps/replay.c): the results are
 * that recording's values, and whatever differentiates it differentiates
 * through them, to any depth.  Outside one, or from constants alone, they
 * are ad_gradient's and ad_jvp's numbers, as constants. */
#include <math.h>

#include "recording.h"
#include "replay.h"
#include "status.h"
#include "tape.h"

/* An inner call's failure fails the enclosing recording too, so that its
 * driver reports it rather than a derivative without this part. */
static ad_status fail(ad_status s, ad_real *a, size_t na, ad_real *b, size_t nb)
{
    ad_fill_nan_reals(a, na);
    ad_fill_nan_reals(b, nb);
    return ad_fail_recording(s);
}

/* Room for k doubles (at least one), or NULL. */
static double *doubles(size_t k)
{
    return k <= SIZE_MAX / sizeof(double) ? ad_alloc((k ? k : 1) * sizeof(double)) : NULL;
}

/* The values of x and then v (n each, v may be NULL) in one array. */
static double *values_of(size_t n, const ad_real *x, const ad_real *v)
{
    size_t k = v ? 2 * n : n;
    if (v && n > SIZE_MAX / 2)
        return NULL;
    double *d = doubles(k);
    for (size_t i = 0; d && i < n; i++) {
        d[i] = x[i].v;
        if (v)
            d[n + i] = v[i].v;
    }
    return d;
}

static void constants(size_t n, const double *d, ad_real *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = ad_const(d[i]);
}

/* Whether x (and v) hold a value of the active recording t, refusing
 * another recording's: 0 with *s set if one is foreign. */
static int any_mine(ad_tape *t, size_t n, const ad_real *x, const ad_real *v, ad_status *s)
{
    if (!t || !(ad_any_active(n, x) || (v && ad_any_active(n, v))))
        return 0;
    if (!ad_reals_mine(t, n, x) || (v && !ad_reals_mine(t, n, v)))
        *s = AD_EFOREIGN;
    return 1;
}

ad_status ad_gradient_r(ad_objective f, void *ctx, size_t n, const ad_real *x, ad_real *fx,
                        ad_real *grad)
{
    if (!f || !fx || (n && (!x || !grad)))
        return fail(AD_EINVAL, fx, fx ? 1 : 0, grad, grad ? n : 0);
    ad_status s = AD_OK;
    ad_tape *outer = ad_recording();
    int nested = any_mine(outer, n, x, NULL, &s);
    double *d = s == AD_OK ? values_of(n, x, NULL) : NULL;
    if (s == AD_OK && !d)
        s = AD_ENOMEM;
    if (s == AD_OK && nested) {
        ad_tape *t = ad_thread_tape();
        s = ad_record_objective(t, f, ctx, n, d, AD_RECORD_PROGRAM);
        if (s == AD_OK)
            s = ad_replay_gradient(t, n, x, fx, grad);
    } else if (s == AD_OK) {
        double v, *g = doubles(n);
        s = g ? ad_gradient(f, ctx, n, d, &v, g) : AD_ENOMEM;
        if (s == AD_OK) {
            *fx = ad_const(v);
            constants(n, g, grad);
        }
        ad_free(g);
    }
    ad_free(d);
    return s == AD_OK ? AD_OK : fail(s, fx, 1, grad, n);
}

ad_status ad_jvp_r(ad_function f, void *ctx, size_t n, const ad_real *x, const ad_real *v,
                   size_t m, ad_real *y, ad_real *jv)
{
    if (!f || (n && (!x || !v)) || (m && (!y || !jv)))
        return fail(AD_EINVAL, y, y ? m : 0, jv, jv ? m : 0);
    ad_status s = AD_OK;
    ad_tape *outer = ad_recording();
    int nested = any_mine(outer, n, x, v, &s);
    double *d = s == AD_OK ? values_of(n, x, v) : NULL;
    if (s == AD_OK && !d)
        s = AD_ENOMEM;
    if (s == AD_OK && nested) {
        ad_tape *t = ad_thread_tape();
        s = ad_record(t, f, ctx, n, d, m, AD_RECORD_PROGRAM);
        if (s == AD_OK)
            s = ad_replay_jvp(t, n, x, v, m, y, jv);
    } else if (s == AD_OK) {
        double *r = m <= SIZE_MAX / 2 ? doubles(2 * m) : NULL;
        s = r ? ad_jvp(f, ctx, n, d, d + n, m, r, r + m) : AD_ENOMEM;
        if (s == AD_OK) {
            constants(m, r, y);
            constants(m, r + m, jv);
        }
        ad_free(r);
    }
    ad_free(d);
    return s == AD_OK ? AD_OK : fail(s, y, m, jv, m);
}
