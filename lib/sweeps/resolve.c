/* dualrev: the reverse sweep.
 *
 * ResolveState of the dual-numbers paper (sections 8 and 9.1) with the
 * defunctionalised backpropagators of 9.2: a record only ever names smaller
 * IDs, so walking IDs downwards applies each record once, after every
 * contribution to its cotangent has arrived (linear factoring).  Products are
 * never skipped when a cotangent is zero: 0 x Inf must stay NaN.
 *
 * The sweep carries L cotangents per ID side by side (adj[id * L + lane]),
 * so L rows of a Jacobian share one pass over the records.  It is written
 * once and inlined with L a constant; L = 1 is the gradient's sweep. */
#include <string.h>

#include "block.h"
#include "check.h"
#include "pair.h"
#include "seeded.h"
#include "sweep.h"
#include "walk.h"

/* p[0..L) += z[0..L) * w, by pairs of lanes where it can (pair.h); adj is
 * 64-byte aligned, so a pair of lanes at p is 16-byte aligned. */
AD_INLINE void axpy(double *p, const double *z, double w, const size_t L)
{
#ifdef AD_PAIRS
    if (L % 2 == 0) {
        for (size_t l = 0; l < L; l += 2) {
            ad_pair zp = {z[l], z[l + 1]};
            *(ad_pair *)(p + l) += zp * (ad_pair){w, w};
        }
        return;
    }
#endif
    for (size_t l = 0; l < L; l++)
        p[l] += z[l] * w;
}

/* adj[r's arguments] += z * partials, for every lane.  The record is read
 * before anything is stored into adj, which could alias its partials. */
AD_INLINE void apply(const ad__record *r, const double *z, double *adj, const size_t L)
{
    const double wa = r->wa, wb = r->wb;
    double *pa = adj + (size_t)r->a * L, *pb = adj + (size_t)r->b * L;
    axpy(pa, z, wa, L);
    axpy(pb, z, wb, L);
}

/* Asks for the records and cotangents the sweep reaches PREFETCH steps
 * later.  A long tape is streamed from memory downwards, and the hardware
 * prefetchers stop at each 4 KiB page boundary.  The addresses below a
 * chunk's start are computed as integers and never dereferenced: a
 * prefetch does not fault.  Sweeps over fewer than FAR records, whose
 * tape the caches still hold, do without (the sweep is compiled both ways). */
#define PREFETCH 256
#define FAR ((uint32_t)1 << 15)

AD_INLINE void prefetch_below(const ad__record *r, const double *g, const size_t L)
{
    AD_PREFETCH((uintptr_t)r - PREFETCH * sizeof *r);
    AD_PREFETCH_W((uintptr_t)g - PREFETCH * L * sizeof *g);
}

/* Records are read before anything is stored into adj (apply), and the
 * cotangents z of a record are copied before its arguments' are written.
 * Every record leaves its own cotangents 0 once read, for the next sweep
 * (ad_reverse, jacobian.c's rows; adj_zero): a header its own (its slots'
 * are never written), a block its outputs' after its rule has read them. */
AD_INLINE void sweep_reverse(ad_tape *t, double *adj, uint32_t top, const size_t L,
                             const int far)
{
    ad_walk w = ad_walk_down_from(t, top);
    for (int kind; (kind = ad_walk_down(&w)) != AD_WALK_END;) {
        double z[AD_LANES];
        if (kind == AD_WALK_RUN) {
            /* the loop keeps no state that a record of another kind would
             * change; the walker has seen that the first record is ordinary */
            const ad__record *r = w.r, *base = w.base;
            double *g = adj + (size_t)w.id * L;
            do {
                --r;
                g -= L;
                if (far)
                    prefetch_below(r, g, L);
                for (size_t l = 0; l < L; l++) {
                    z[l] = g[l];
                    g[l] = 0.0;
                }
                apply(r, z, adj, L);
            } while (r > base && ad_walk_ordinary(r - 1));
            ad_walk_stop(&w, r, (uint32_t)((size_t)(g - adj) / L));
        } else if (kind == AD_WALK_NARY) {
            double *g = adj + (size_t)w.hid * L;
            for (size_t l = 0; l < L; l++) {
                z[l] = g[l];
                g[l] = 0.0;
            }
            /* the slots, downwards as the additions into adj have always been made */
            const ad__record *lo;
            size_t n;
            while (ad_walk_slots(&w, &lo, &n))
                for (const ad__record *q = lo + n; q > lo;)
                    apply(--q, z, adj, L);
        } else {
            /* its outputs' slots above hold its cotangents */
            ad_block_reverse(t, w.hdr, w.hid, adj, L);
            memset(adj + (size_t)w.hid * L, 0, ((size_t)w.hdr->a + 1) * L * sizeof *adj);
        }
    }
}

void ad_resolve(ad_tape *t, double *adj, uint32_t top, size_t lanes)
{
    t->sweeps++;
    int far = top - t->first >= FAR;  /* wraps for top < first: no records, no matter */
    if (lanes == 1)
        far ? sweep_reverse(t, adj, top, 1, 1) : sweep_reverse(t, adj, top, 1, 0);
    else if (lanes == 2)
        far ? sweep_reverse(t, adj, top, 2, 1) : sweep_reverse(t, adj, top, 2, 0);
    else
        far ? sweep_reverse(t, adj, top, AD_LANES, 1) : sweep_reverse(t, adj, top, AD_LANES, 0);
}

/* ---- the exact sweep (seeded.h, ad_retry) ----
 *
 * Rare (only for results that are not all finite), so written plainly,
 * one lane, record by record. */

/* adj[id] += z w, and id is reached; nothing for a constant (the sink,
 * whose product with a constant's partial may overflow, raising the flag
 * that ad_seeded reads for the results: seeded.h, AD_SEEDED_OVER). */
static void give(ad_tape *t, double *adj, uint32_t id, double z, double w)
{
    if (!id)
        return;
    adj[id] += z * w;
    ad_reach_mark(t, id);
}

/* A block, as the sparse resolve expands one: its rule runs if one of its
 * outputs was reached, with the others' cotangents 0, and its cotangents
 * go to the arguments that the reached outputs depend on (block.h,
 * ad_block_pullback_reached). */
static void block_reached(ad_tape *t, const ad__record *r, uint32_t hid, double *adj)
{
    ad_block *b = ad_block_of(t, r);
    unsigned char *outs = ad_block_flags(t), *args = outs + b->nout;
    double *ybar = ad_block_ybar(t);
    int any = 0, all = b->kind->collective;  /* run, reached or not: collective.h */
    for (uint32_t j = 0; j < b->nout; j++) {
        outs[j] = (unsigned char)(all || ad_reached(ad_reach_bits(t), hid + 1 + j));
        ybar[j] = outs[j] ? adj[hid + 1 + j] : 0.0;
        any |= outs[j];
    }
    if (!any && !all)
        return;
    const double *xbar = ad_block_pullback_reached(t, b, ybar);
    const uint32_t *ids = ad_block_ids(b);
    size_t nx = (size_t)b->nargs + b->run_len;
    for (size_t k = 0; k < nx; k++)
        if (args[k])
            give(t, adj, ad_block_arg(b, ids, k), xbar[k], 1.0);
}

/* The arguments of a two-argument record r reached with cotangent z. */
static void give_both(ad_tape *t, double *adj, const ad__record *r, double z)
{
    const ad__record c = *r;  /* read before adj is written (pair.h) */
    give(t, adj, c.a, z, c.wa);
    give(t, adj, c.b, z, c.wb);
}

void ad_resolve_reached(ad_tape *t, double *adj, uint32_t top)
{
    t->sweeps++;
    ad_walk w = ad_walk_down_from(t, top);
    for (int kind; (kind = ad_walk_down(&w)) != AD_WALK_END;) {
        if (kind == AD_WALK_RUN) {
            uint32_t id = w.id - 1;
            double z = adj[id];
            ad_walk_stop(&w, w.r - 1, id);
            if (ad_reached(ad_reach_bits(t), id)) {
                adj[id] = 0.0;
                give_both(t, adj, w.r, z);
            }
        } else if (kind == AD_WALK_NARY) {
            double z = adj[w.hid];
            if (!ad_reached(ad_reach_bits(t), w.hid))
                continue;
            adj[w.hid] = 0.0;
            for (uint32_t k = 1; k <= w.hdr->a; k++)
                give_both(t, adj, ad_tape_record(t, w.hid - k), z);
        } else {
            block_reached(t, w.hdr, w.hid, adj);
            memset(adj + w.hid, 0, ((size_t)w.hdr->a + 1) * sizeof *adj);
        }
    }
}

/* One pass of ad_reverse (seeded.h, ad_pass). */
static double reverse_pass(ad_tape *t, const ad_retry *r, void *ctx)
{
    const ad_seeds *c = ctx;
    int exact = r->exact || c->flags;
    /* Outputs that share an ID add up; a constant output seeds slot 0,
     * the sink, and reaches nothing.  An exact pass starts from the
     * outputs of nonzero weight, so that w = e_j gives row j of J, or
     * from those flagged. */
    for (size_t j = 0; j < c->m; j++) {
        double wj0 = c->in ? c->in[j] : 1.0;
        t->adj[t->outputs[j].id] += wj0 * r->scale;
        if (exact && (c->flags ? c->flags[j] : wj0 != 0.0))
            ad_reach_mark(t, t->outputs[j].id);
    }
    if (exact)
        ad_resolve_reached(t, t->adj, c->hi);
    else
        ad_resolve(t, t->adj, c->hi, 1);  /* records above every output are skipped */
    double sum = ad_results(r, c->out, 1, t->adj + 1, 1, c->n);
    if (exact) {
        for (size_t i = 0; c->flags && i < c->n; i++)
            c->flags[c->m + i] = (unsigned char)ad_reached(ad_reach_bits(t), (uint32_t)(i + 1));
        ad_reach_clear(t, c->hi);
    }
    memset(t->adj, 0, (c->n + 1) * sizeof *t->adj);  /* the sink and the inputs */
    return sum;
}

/* ad_reverse, and ad_reverse_in with can_exact 0 and its flags. */
AD_INLINE ad_status reverse(ad_tape *t, size_t m, const double *w, double *wj, int can_exact,
                           unsigned char *flags)
{
    uint32_t hi = ad_outputs_top(t, m);
    ad_status s = ad_tape_reserve_adjoints(t, hi);
    if (s == AD_OK && flags)
        s = ad_reach_reserve(t, hi);
    if ((s = ad_agree_sweep(t, s)) != AD_OK)
        return s;
    /* The sweep leaves the records' cotangents 0, so only what no sweep
     * has cleared since the array last served another use is cleared. */
    size_t need = (size_t)hi + 1, n = t->first - 1;
    if (t->adj_zero < need) {
        memset(t->adj + t->adj_zero, 0, (need - t->adj_zero) * sizeof *t->adj);
        t->adj_zero = need;
    }
    ad_seeds c = {m, n, w, wj, hi, flags};
    double sum;
    int how = can_exact ? AD_SEEDED_EXACT | AD_SEEDED_OVER : flags ? AD_SEEDED_OVER : 0;
    s = ad_seeded(t, hi, how, reverse_pass, &c, &sum);  /* seeded.h, "Scaled seeds" */
    /* AD_CHECK_FINITE: which cotangent overflowed.  A NaN of a pass with
     * no exact form is the caller's exact pass to settle. */
    if ((s == AD_OK || s == AD_EOVERFLOW) && t->checks && !(t->traits & AD_COLLECTIVE_TAPE) &&
        sum - sum != 0.0 &&
        (can_exact || flags || sum == sum)) {
        ad_status c = ad_check_reverse(t, m, w, hi);
        return c != AD_OK ? c : s;
    }
    return s;
}

ad_status ad_reverse(ad_tape *t, size_t m, const double *w, double *wj)
{
    return reverse(t, m, w, wj, 1, NULL);
}

ad_status ad_reverse_in(ad_tape *t, size_t m, const double *w, double *wj, unsigned char *exact)
{
    return reverse(t, m, w, wj, 0, exact);
}
