/* dualrev: the forward (tangent) sweep, J v.
 *
 * The recording is the linearisation of f at x ("You Only Linearize Once"):
 * run forward over the stored partials it gives J v, run backward (resolve.c)
 * its transpose.  A slot of an n-ary run is swept like any record, giving
 * that slot's share of the tangent; the header adds up the shares below it.
 * Like the reverse sweep it carries L tangents per ID side by side. */
#include <string.h>

#include "block.h"
#include "check.h"
#include "pair.h"
#include "seeded.h"
#include "sweep.h"
#include "walk.h"

/* out[0..L) = wa ta + wb tb, by pairs of lanes where it can (pair.h): the
 * compiler cannot see that out, a later ID's, never overlaps ta or tb,
 * and would otherwise go a lane at a time.  tan is 64-byte aligned, so a
 * pair of lanes is 16-byte aligned. */
AD_INLINE void combine(double *out, double wa, const double *ta, double wb, const double *tb,
                       const size_t L)
{
#ifdef AD_PAIRS
    if (L % 2 == 0) {
        ad_pair va = {wa, wa}, vb = {wb, wb};
        for (size_t l = 0; l < L; l += 2)
            *(ad_pair *)(out + l) = va * *(const ad_pair *)(ta + l) + vb * *(const ad_pair *)(tb + l);
        return;
    }
#endif
    for (size_t l = 0; l < L; l++)
        out[l] = wa * ta[l] + wb * tb[l];
}

AD_INLINE void sweep_forward(ad_tape *t, double *tan, uint32_t top, const size_t L)
{
    ad_walk w = ad_walk_up_from(t, top);
    for (int kind; (kind = ad_walk_up(&w)) != AD_WALK_END;) {
        if (kind == AD_WALK_RUN) {
            const ad__record *r = w.r, *end = w.end;
            double *out = tan + (size_t)w.id * L;
            do {
                /* The sink's tangent is 0 and its partial, with respect to
                 * a constant, may be anything: 0 x Inf must not make NaN. */
                double wa = r->a ? r->wa : 0.0, wb = r->b ? r->wb : 0.0;
                const double *ta = tan + (size_t)r->a * L, *tb = tan + (size_t)r->b * L;
                combine(out, wa, ta, wb, tb, L);
                r++;
                out += L;
            } while (r < end && ad_walk_ordinary(r));
            ad_walk_stop_up(&w, r, (uint32_t)((size_t)(out - tan) / L));
        } else if (kind == AD_WALK_NARY) {
            double *out = tan + (size_t)w.hid * L;
            for (size_t l = 0; l < L; l++)
                out[l] = 0.0;
            for (uint32_t k = 1; k <= w.hdr->a; k++)
                for (size_t l = 0; l < L; l++)
                    out[l] += tan[(size_t)(w.hid - k) * L + l];
        } else {
            ad_block_forward(t, w.hdr, w.hid, tan, L);  /* sets its outputs' tangents */
        }
    }
}

void ad_tangent(ad_tape *t, double *tan, uint32_t top, size_t lanes)
{
    if (lanes == 1)
        sweep_forward(t, tan, top, 1);
    else if (lanes == 2)
        sweep_forward(t, tan, top, 2);
    else if (lanes == AD_LANES)
        sweep_forward(t, tan, top, AD_LANES);
    else
        sweep_forward(t, tan, top, AD_SECOND_LANES);
}

/* Whether one of a block's arguments is reached. */
static int block_reached(ad_tape *t, ad_block *b)
{
    if (b->kind->collective)  /* run, reached or not: collective.h */
        return 1;
    const uint32_t *ids = ad_block_ids(b);
    for (uint32_t k = 0; k < b->nargs; k++)
        if (!ad_tangent_zero(t, ids[k]))
            return 1;
    for (uint32_t k = 0; k < b->run_len; k++)
        if (!ad_tangent_zero(t, b->run + k))
            return 1;
    return 0;
}

/* The exact sweep (seeded.h, ad_retry): rare, so plain, one lane.  While
 * the marks' reach is set, a block's forward rule skips the terms of
 * arguments not reached (matrix.c). */
void ad_tangent_reached(ad_tape *t, double *tan, uint32_t top)
{
    ad_marks_of(t)->reach = ad_reach_bits(t);
    ad_walk w = ad_walk_up_from(t, top);
    for (int kind; (kind = ad_walk_up(&w)) != AD_WALK_END;) {
        uint32_t id = kind == AD_WALK_RUN ? w.id : w.hid;
        int on = 0;
        if (kind == AD_WALK_RUN) {  /* also a slot of an n-ary run */
            const ad__record *r = w.r;
            int a = !ad_tangent_zero(t, r->a), b = !ad_tangent_zero(t, r->b);
            tan[id] = (a ? r->wa * tan[r->a] : 0.0) + (b ? r->wb * tan[r->b] : 0.0);
            on = a | b;
            ad_walk_stop_up(&w, r + 1, id + 1);
        } else if (kind == AD_WALK_NARY) {
            tan[id] = 0.0;
            for (uint32_t k = 1; k <= w.hdr->a; k++) {
                tan[id] += tan[id - k];
                on |= ad_reached(ad_reach_bits(t), id - k);
            }
        } else if (ad_block_of(t, w.hdr)->kind->jvp_exact) {
            ad_block_forward_reached(t, w.hdr, id, tan);
            continue;
        } else {
            on = block_reached(t, ad_block_of(t, w.hdr));
            if (on)
                ad_block_forward(t, w.hdr, id, tan, 1);
            for (uint32_t j = 0; j <= w.hdr->a; j++) {  /* the header, then its outputs */
                if (!on)
                    tan[id + j] = 0.0;
                else if (j)
                    ad_reach_mark(t, id + j);
            }
            continue;
        }
        if (on)
            ad_reach_mark(t, id);
    }
    ad_marks_of(t)->reach = NULL;
}

/* One pass of ad_forward (seeded.h, ad_pass). */
static double forward_pass(ad_tape *t, const ad_retry *r, void *ctx)
{
    const ad_seeds *c = ctx;
    int exact = r->exact || c->flags;
    /* An exact pass starts from the inputs of nonzero weight, so that
     * v = e_i gives column i of J, or from those flagged. */
    for (size_t i = 0; i < c->n; i++) {
        t->adj[i + 1] = c->in[i] * r->scale;
        if (exact && (c->flags ? c->flags[i] : c->in[i] != 0.0))
            ad_reach_mark(t, (uint32_t)(i + 1));
    }
    if (exact)
        ad_tangent_reached(t, t->adj, c->hi);
    else
        ad_tangent(t, t->adj, c->hi, 1);
    double sum = ad_results_of(r, c->out, 1, t->adj, 1, t->outputs, c->m);
    if (exact) {
        for (size_t j = 0; c->flags && j < c->m; j++) {
            uint32_t id = t->outputs[j].id;
            c->flags[c->n + j] = id && ad_reached(ad_reach_bits(t), id);
        }
        ad_reach_clear(t, c->hi);
    }
    return sum;
}

/* ad_forward, and ad_forward_in with can_exact 0 and its flags. */
AD_INLINE ad_status forward(ad_tape *t, size_t m, const double *v, double *jv, int can_exact,
                           unsigned char *flags)
{
    if (t->traits & AD_BLOCK_NO_JVP)
        return AD_ENOTSUP;
    uint32_t hi = ad_outputs_top(t, m);
    ad_status s = ad_tape_borrow_adjoints(t, (size_t)hi + 1);  /* for the tangents */
    if (s == AD_OK && flags)
        s = ad_reach_reserve(t, hi);
    if ((s = ad_agree_sweep(t, s)) != AD_OK)
        return s;
    t->adj[0] = 0.0;
    ad_seeds c = {m, t->first - 1, v, jv, hi, flags};
    double sum;
    s = ad_seeded(t, hi, can_exact ? AD_SEEDED_EXACT : 0, forward_pass, &c, &sum);  /* seeded.h, "Scaled seeds" */
    /* AD_CHECK_FINITE: which tangent overflowed (as reverse() in resolve.c) */
    if (s == AD_OK && t->checks && !(t->traits & AD_COLLECTIVE_TAPE) && sum - sum != 0.0 && (can_exact || flags || sum == sum))
        return ad_check_forward(t, v, hi);
    return s;
}

ad_status ad_forward(ad_tape *t, size_t m, const double *v, double *jv)
{
    return forward(t, m, v, jv, 1, NULL);
}

ad_status ad_forward_in(ad_tape *t, size_t m, const double *v, double *jv, unsigned char *exact)
{
    return forward(t, m, v, jv, 0, exact);
}
