/* dualrev: ad_gradient, the wrapper around one recording.
 *
 * Interleave (inputs take IDs 1..n), run the objective on the thread's tape
 * for this nesting depth, seed the output's cotangent, resolve, and rebuild
 * the gradient from the inputs' cotangent slots (paper, section 8). */
#include <math.h>
#include <string.h>

#include "tape.h"

static ad_status fail(ad_status s, size_t n, double *fx, double *grad)
{
    if (fx)
        *fx = NAN;
    if (grad)
        for (size_t i = 0; i < n; i++)
            grad[i] = NAN;
    return s;
}

/* Runs f with t as the thread's active tape; the caller's tape, if any, is
 * left exactly as it was. */
static ad_real record(ad_thread *th, ad_tape *t, ad_objective f, void *ctx, size_t n)
{
    ad__cursor *outer = ad__active;
    ad__active = &t->cursor;
    th->depth++;
    ad_real y = f(t->inputs, n, ctx);
    th->depth--;
    ad__active = outer;
    return y;
}

static ad_status backward(ad_tape *t, ad_real y, size_t n, double *grad)
{
    uint32_t top = ad_tape_top(t);
    if (y.id > top)
        return AD_EFOREIGN;
    /* Records above y.id cannot reach it; they are skipped.  A constant
     * output seeds slot 0, the sink, and leaves the gradient zero. */
    uint32_t hi = y.id > n ? y.id : (uint32_t)n;
    ad_status s = ad_tape_reserve_adjoints(t, hi);
    if (s != AD_OK)
        return s;
    memset(t->adj, 0, ((size_t)hi + 1) * sizeof *t->adj);
    t->adj[y.id] = 1.0;
    ad_resolve(t, t->adj, y.id);
    if (n)
        memcpy(grad, t->adj + 1, n * sizeof *grad);
    return AD_OK;
}

ad_status ad_gradient(ad_objective f, void *ctx, size_t n, const double *x,
                      double *fx, double *grad)
{
    if (!f || !fx || (n && (!x || !grad)))
        return fail(AD_EINVAL, n, fx, grad);
    ad_thread *th = ad_thread_self();
    if (th->depth == AD_MAX_NESTING)
        return fail(AD_ENESTING, n, fx, grad);
    ad_tape *t = &th->tapes[th->depth];
    ad_status s = ad_tape_begin(t, n, th->limit);
    if (s != AD_OK)
        return fail(s, n, fx, grad);
    for (size_t i = 0; i < n; i++)
        t->inputs[i].v = x[i];
    ad_real y = record(th, t, f, ctx, n);
    s = t->status;
    if (s == AD_OK)
        s = backward(t, y, n, grad);
    if (s != AD_OK)
        return fail(s, n, fx, grad);
    *fx = y.v;
    return AD_OK;
}
