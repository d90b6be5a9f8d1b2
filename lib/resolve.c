/* dualrev: the reverse sweep.
 *
 * ResolveState of the dual-numbers paper (sections 8 and 9.1) with the
 * defunctionalised backpropagators of 9.2: a record only ever names smaller
 * IDs, so walking IDs downwards applies each record once, after every
 * contribution to its cotangent has arrived (linear factoring).  Products are
 * never skipped when a cotangent is zero: 0 x Inf must stay NaN. */
#include "tape.h"

/* Applies cotangent z to the `m` slots below r: part of an n-ary run. */
static const ad__record *apply_run(const ad__record *r, size_t m, double z, double *adj)
{
    while (m--) {
        --r;
        adj[r->a] += z * r->wa;
        adj[r->b] += z * r->wb;
    }
    return r;
}

void ad_resolve(const ad_tape *t, double *adj, uint32_t top)
{
    if (top < t->first)
        return;
    size_t k = top - t->first;          /* position of record `top` */
    size_t c = k >> AD_CHUNK_BITS;
    size_t left = (k & (AD_CHUNK - 1)) + 1;
    double *g = adj + top;
    size_t run = 0;                     /* slots left in an n-ary record's run */
    double z_run = 0.0;                 /* that record's cotangent */
    for (;;) {
        const ad__record *r = t->chunks[c] + left;
        while (left) {
            if (run) {                  /* a run may continue in the chunk below */
                size_t m = run < left ? run : left;
                r = apply_run(r, m, z_run, adj);
                run -= m;
                left -= m;
                g -= m;
                continue;
            }
            --r;
            --left;
            double z = *g--;
            if (AD__UNLIKELY(r->b >= AD__ID_END)) {
                run = r->a;
                z_run = z;
                continue;
            }
            adj[r->a] += z * r->wa;
            adj[r->b] += z * r->wb;
        }
        if (c-- == 0)
            break;
        left = AD_CHUNK;
    }
}
