/* dualrev: the forward (tangent) sweep, J v.
 *
 * The recording is the linearisation of f at x ("You Only Linearize Once"):
 * run forward over the stored partials it gives J v, run backward (resolve.c)
 * its transpose.  A slot of an n-ary run is swept like any record, giving
 * that slot's share of the tangent; the header adds up the shares below it. */
#include <string.h>

#include "tape.h"

/* The sink's partial may be anything (the partial with respect to a
 * constant); its tangent is 0, and 0 x Inf must not make NaN here. */
static inline double share(const ad__record *r, const double *tan)
{
    double a = r->a ? r->wa * tan[r->a] : 0.0;
    double b = r->b ? r->wb * tan[r->b] : 0.0;
    return a + b;
}

void ad_tangent(const ad_tape *t, double *tan, uint32_t top)
{
    uint32_t id = t->first;
    for (size_t c = 0; id <= top; c++) {
        const ad__record *r = t->chunks[c];
        const ad__record *end = r + AD_CHUNK;
        for (; r < end && id <= top; r++, id++) {
            if (AD__UNLIKELY(r->b == AD__NARY)) {
                double sum = 0.0;
                for (uint32_t k = 1; k <= r->a; k++)
                    sum += tan[id - k];
                tan[id] = sum;
            } else {
                tan[id] = share(r, tan);
            }
        }
    }
}

ad_status ad_forward(ad_tape *t, size_t m, const double *v, double *jv)
{
    uint32_t hi = ad_outputs_top(t, m);
    ad_status s = ad_tape_reserve_adjoints(t, hi);
    if (s != AD_OK)
        return s;
    size_t n = t->first - 1;
    t->adj[0] = 0.0;
    if (n)
        memcpy(t->adj + 1, v, n * sizeof *v);
    ad_tangent(t, t->adj, hi);
    for (size_t j = 0; j < m; j++)
        jv[j] = t->adj[t->outputs[j].id];
    return AD_OK;
}
