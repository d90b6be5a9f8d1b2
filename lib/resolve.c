/* dualrev: the reverse sweep.
 *
 * ResolveState of the dual-numbers paper (sections 8 and 9.1) with the
 * defunctionalised backpropagators of 9.2: a record only ever names smaller
 * IDs, so walking IDs downwards applies each record once, after every
 * contribution to its cotangent has arrived (linear factoring).  Products are
 * never skipped when a cotangent is zero: 0 x Inf must stay NaN. */
#include "tape.h"

void ad_resolve(const ad_tape *t, double *adj, uint32_t top)
{
    if (top < t->first)
        return;
    size_t k = top - t->first;          /* position of record `top` */
    size_t c = k >> AD_CHUNK_BITS;
    size_t left = (k & (AD_CHUNK - 1)) + 1;
    double *g = adj + top;
    for (;;) {
        const ad__record *r = t->chunks[c] + left;
        while (left--) {
            --r;
            double z = *g--;
            adj[r->a] += z * r->wa;
            adj[r->b] += z * r->wb;
        }
        if (c-- == 0)
            break;
        left = AD_CHUNK;
    }
}
