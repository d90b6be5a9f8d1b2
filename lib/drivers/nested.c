/* dualrev: nested derivatives, ad_gradient_r and ad_jvp_r.
 *
 * Inside a recording, the inner function is recorded one nesting level
 * down as a program (program.h), and the program with its sweep is
 * replayed onto the enclosing recording (sweeps/replay.c): the results are
 * that recording's values, and whatever differentiates it differentiates
 * through them, to any depth.  Outside one, or from constants alone, they
 * are ad_gradient's and ad_jvp's numbers, as constants. */
#include <math.h>

#include "listing.h"
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

/* What a call works on: on the stack for small functions, which then
 * allocate nothing (optimisers call these very often on few inputs). */
#define SMALL 64

typedef struct room {
    void *p;
    union {
        double d[SMALL];
        ad_real r[SMALL / 2];
    } small;
} room;

/* Room for count elements of `size` bytes (at most 16), or NULL. */
static void *room_get(room *r, size_t count, size_t size)
{
    if (count > SIZE_MAX / size)
        return r->p = NULL;
    r->p = count * size <= sizeof r->small ? (void *)&r->small : ad_alloc(count * size);
    return r->p;
}

static void room_free(room *r)
{
    if (r->p != (void *)&r->small)
        ad_free(r->p);
}

static void values(size_t n, const ad_real *x, double *d)
{
    for (size_t i = 0; i < n; i++)
        d[i] = x[i].v;
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
    else if (ad_listing_of(t))
        *s = AD_ENOTSUP;  /* the replay sets values no kept operation would make */
    return 1;
}

/* Copies of x (and v, after it): f may write where they lie (through its
 * ctx), and the replay starts from what they held when the call began. */
static ad_real *copies(room *r, size_t n, const ad_real *x, const ad_real *v)
{
    ad_real *c = room_get(r, v ? 2 * n : n, sizeof(ad_real));  /* 2 n: n reals fit in memory */
    for (size_t i = 0; c && i < n; i++) {
        c[i] = x[i];
        if (v)
            c[n + i] = v[i];
    }
    return c;
}

ad_status ad_gradient_r(ad_objective f, void *ctx, size_t n, const ad_real *x, ad_real *fx,
                        ad_real *grad)
{
    if (!f || !fx || (n && (!x || !grad)))
        return fail(AD_EINVAL, fx, fx ? 1 : 0, grad, grad ? n : 0);
    ad_status s = AD_OK;
    int nested = any_mine(ad_recording(), n, x, NULL, &s);
    if (s != AD_OK)
        return fail(s, fx, 1, grad, n);
    room r, rx;
    double *d = n <= SIZE_MAX / 2 ? room_get(&r, nested ? n : 2 * n + 1, sizeof(double)) : NULL;
    ad_real *xs = d && nested ? copies(&rx, n, x, NULL) : NULL;
    if (!d || (nested && !xs)) {
        if (d)
            room_free(&r);
        return fail(AD_ENOMEM, fx, 1, grad, n);
    }
    values(n, x, d);
    if (nested) {
        ad_tape *t = ad_thread_tape();
        s = ad_record_objective(t, f, ctx, n, d, AD_RECORD_PROGRAM);
        if (s == AD_OK)
            s = ad_replay_gradient(t, n, xs, fx, grad);
        room_free(&rx);
    } else {
        double *g = d + n;
        s = ad_gradient(f, ctx, n, d, g + n, g);
        if (s == AD_OK) {
            *fx = ad_const(g[n]);
            constants(n, g, grad);
        }
    }
    room_free(&r);
    return s == AD_OK ? AD_OK : fail(s, fx, 1, grad, n);
}

ad_status ad_jvp_r(ad_function f, void *ctx, size_t n, const ad_real *x, const ad_real *v,
                   size_t m, ad_real *y, ad_real *jv)
{
    if (!f || (n && (!x || !v)) || (m && (!y || !jv)))
        return fail(AD_EINVAL, y, y ? m : 0, jv, jv ? m : 0);
    ad_status s = AD_OK;
    int nested = any_mine(ad_recording(), n, x, v, &s);
    if (s != AD_OK)
        return fail(s, y, m, jv, m);
    room r, rx;
    int fits = n <= SIZE_MAX / 4 && m <= SIZE_MAX / 4;
    double *d = fits ? room_get(&r, nested ? 2 * n : 2 * n + 2 * m, sizeof(double)) : NULL;
    ad_real *xs = d && nested ? copies(&rx, n, x, v) : NULL;
    if (!d || (nested && !xs)) {
        if (d)
            room_free(&r);
        return fail(AD_ENOMEM, y, m, jv, m);
    }
    values(n, x, d);
    values(n, v, d + n);
    if (nested) {
        ad_tape *t = ad_thread_tape();
        s = ad_record(t, f, ctx, n, d, m, AD_RECORD_PROGRAM);
        if (s == AD_OK)
            s = ad_replay_jvp(t, n, xs, xs + n, m, y, jv);
        room_free(&rx);
    } else {
        double *o = d + 2 * n;
        s = ad_jvp(f, ctx, n, d, d + n, m, o, o + m);
        if (s == AD_OK) {
            constants(m, o, y);
            constants(m, o + m, jv);
        }
    }
    room_free(&r);
    return s == AD_OK ? AD_OK : fail(s, y, m, jv, m);
}
