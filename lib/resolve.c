/* dualrev: the reverse sweep.
 *
 * ResolveState of the dual-numbers paper (sections 8 and 9.1) with the
 * defunctionalised backpropagators of 9.2: a record only ever names smaller
 * IDs, so walking IDs downwards applies each record once, after every
 * contribution to its cotangent has arrived (linear factoring).  Products are
 * never skipped when a cotangent is zero: 0 x Inf must stay NaN. */
#include <string.h>

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

ad_status ad_reverse(ad_tape *t, size_t m, const double *w, double *wj)
{
    uint32_t hi = ad_outputs_top(t, m);
    ad_status s = ad_tape_reserve_adjoints(t, hi);
    if (s != AD_OK)
        return s;
    memset(t->adj, 0, ((size_t)hi + 1) * sizeof *t->adj);
    /* Outputs that share an ID add up; a constant output seeds slot 0, the
     * sink, and reaches nothing. */
    for (size_t j = 0; j < m; j++)
        t->adj[t->outputs[j].id] += w ? w[j] : 1.0;
    ad_resolve(t, t->adj, hi);  /* records above every output are skipped */
    size_t n = t->first - 1;
    if (n)
        memcpy(wj, t->adj + 1, n * sizeof *wj);
    return AD_OK;
}
