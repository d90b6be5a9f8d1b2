/* dualrev: the forward (tangent) sweep, J v.
 *
 * The recording is the linearisation of f at x ("You Only Linearize Once"):
 * run forward over the stored partials it gives J v, run backward (resolve.c)
 * its transpose.  A slot of an n-ary run is swept like any record, giving
 * that slot's share of the tangent; the header adds up the shares below it.
 * Like the reverse sweep it carries L tangents per ID side by side. */
#include <string.h>

#include "block.h"

AD_INLINE void sweep(const ad_tape *t, double *tan, uint32_t top, const size_t L)
{
    uint32_t id = t->first;
    for (size_t c = 0; id <= top; c++) {
        const ad__record *r = t->chunks[c];
        const ad__record *end = r + AD_CHUNK;
        for (; r < end && id <= top; r++, id++) {
            double *out = tan + (size_t)id * L;
            if (AD__UNLIKELY(r->b >= AD__ID_END)) {
                if (r->b == AD__NARY) {
                    for (size_t l = 0; l < L; l++)
                        out[l] = 0.0;
                    for (uint32_t k = 1; k <= r->a; k++)
                        for (size_t l = 0; l < L; l++)
                            out[l] += tan[(size_t)(id - k) * L + l];
                } else if (r->b == AD__BLOCK) {
                    ad_block_forward(t, r, id, tan, L);  /* sets its outputs' tangents */
                }
                continue;
            }
            /* The sink's tangent is 0 and its partial, with respect to a
             * constant, may be anything: 0 x Inf must not make NaN here. */
            double wa = r->a ? r->wa : 0.0, wb = r->b ? r->wb : 0.0;
            const double *ta = tan + (size_t)r->a * L, *tb = tan + (size_t)r->b * L;
            for (size_t l = 0; l < L; l++)
                out[l] = wa * ta[l] + wb * tb[l];
        }
    }
}

void ad_tangent(const ad_tape *t, double *tan, uint32_t top, size_t lanes)
{
    if (lanes == 1)
        sweep(t, tan, top, 1);
    else if (lanes == 2)
        sweep(t, tan, top, 2);
    else
        sweep(t, tan, top, AD_LANES);
}

ad_status ad_forward(ad_tape *t, size_t m, const double *v, double *jv)
{
    if (t->no_jvp)
        return AD_ENOTSUP;
    uint32_t hi = ad_outputs_top(t, m);
    ad_status s = ad_tape_borrow_adjoints(t, (size_t)hi + 1);  /* for the tangents */
    if (s != AD_OK)
        return s;
    size_t n = t->first - 1;
    t->adj[0] = 0.0;
    for (double scale = ad_seed_scale(t);; scale = 1.0) {  /* tape.h, "Scaled seeds" */
        ad_watch watch = ad_watch_begin(scale);
        for (size_t i = 0; i < n; i++)
            t->adj[i + 1] = v[i] * scale;
        ad_tangent(t, t->adj, hi, 1);
        for (size_t j = 0; j < m; j++)
            jv[j] = t->adj[t->outputs[j].id];
        int finite = ad_unscale(jv, 1, jv, 1, m, scale);
        if (!ad_watch_again(&watch, finite))
            return finite || !t->checks ? AD_OK : ad_check_forward(t, v, hi);
    }
}
