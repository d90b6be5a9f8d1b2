/* dualrev: the checked sweeps (ad_set_checks, AD_CHECK_FINITE): a reverse
 * or forward sweep whose results were not all finite, run again plainly
 * and unscaled to find the first contribution that overflows from finite
 * numbers; and the names of a tape's records. */
#include <math.h>
#include <string.h>

#include "block.h"
#include "check.h"
#include "nary_kinds.h"
#include "walk.h"

const char *ad_op_name(const ad_tape *t, uint32_t id)
{
    const ad__record *r = ad_tape_record(t, id);
    if (r->b == AD__NARY)
        return ad_nary_kind_of(r->wa)->name;
    if (r->b == AD__BLOCK)
        return ad_block_of(t, r)->kind->name;
    const ad_info *i = ad_tape_info(t, id);
    return i ? ad_op_label(i->op) : NULL;
}

/* ---- the checked reverse sweep ---- */

typedef struct sweep {
    ad_tape *t;
    double *adj;
    ad_fault f;
    int found;
} sweep;

/* A fault's operation: an external function's block is "external",
 * with or without its jvp rule. */
static const char *fault_op(const ad_tape *t, uint32_t id)
{
    const ad__record *r = ad_tape_record(t, id);
    if (r->b == AD__BLOCK && ad_block_of(t, r)->kind->foreign)
        return ad_block_of(t, r)->kind->name;  /* "external", "checkpointed loop" */
    const char *op = ad_op_name(t, id);
    return op ? op : "?";
}

/* The sweep's first fault: record hid made target's cotangent (tangent)
 * non-finite. */
static void note(sweep *s, uint32_t hid, uint32_t target, ad_phase phase)
{
    const ad_info *i = ad_tape_info(s->t, hid);
    s->f = ad_fault_at(hid, fault_op(s->t, hid), i ? i->label : NULL, phase);
    s->f.target = target;
    s->found = 1;
}

/* The same for one term: `in` (a cotangent, or a tangent) times the
 * partial w of the record's argument `slot`. */
static void note_term(sweep *s, uint32_t hid, uint32_t target, double in, double w, int slot,
                      ad_phase phase)
{
    note(s, hid, target, phase);
    s->f.value = ad_tape_value(s->t, hid);
    s->f.cotangent = in;
    s->f.partial[slot] = w;
}

/* How a checked sweep ends: AD_ENONFINITE, its fault kept, if it found one. */
static ad_status sweep_end(const sweep *s)
{
    if (!s->found)
        return AD_OK;
    ad_fault_keep(&s->f);
    return AD_ENONFINITE;
}

/* adj[to] += z w, noting the first contribution that makes a finite
 * cotangent non-finite from finite numbers. */
static void add(sweep *s, uint32_t hid, uint32_t to, double z, double w, int slot)
{
    if (!to)
        return;
    double before = s->adj[to];
    s->adj[to] += z * w;
    if (!s->found && !isfinite(s->adj[to]) && isfinite(before) && isfinite(z) && isfinite(w))
        note_term(s, hid, to, z, w, slot, AD_PHASE_REVERSE);
}

/* The block's rule, then whether it made an argument's finite cotangent
 * non-finite from finite output cotangents. */
static void apply_block(sweep *s, const ad__record *r, uint32_t hid)
{
    ad_block *b = ad_block_of(s->t, r);
    const uint32_t *ids = ad_block_ids(b);
    size_t nargs = (size_t)b->nargs + b->run_len;
    int out_finite = 1;
    for (uint32_t j = 1; j <= b->nout; j++)
        out_finite &= isfinite(s->adj[hid + j]) != 0;
    double *before = out_finite ? ad_alloc((nargs ? nargs : 1) * sizeof *before) : NULL;
    for (size_t i = 0; before && i < nargs; i++)
        before[i] = s->adj[ad_block_arg(b, ids, i)];
    ad_block_reverse(s->t, r, hid, s->adj, 1);
    for (size_t i = 0; before && i < nargs && !s->found; i++) {
        uint32_t id = ad_block_arg(b, ids, i);
        if (id && isfinite(before[i]) && !isfinite(s->adj[id]))
            note(s, hid, id, AD_PHASE_REVERSE);
    }
    ad_free(before);
}

ad_status ad_check_reverse(ad_tape *t, size_t m, const double *w, uint32_t top)
{
    if (!(t->checks & AD_CHECK_FINITE))
        return AD_OK;
    sweep s = {t, t->adj, {0}, 0};
    memset(t->adj, 0, ((size_t)top + 1) * sizeof *t->adj);
    for (size_t j = 0; j < m; j++)
        t->adj[t->outputs[j].id] += w ? w[j] : 1.0;
    ad_walk wk = ad_walk_down_from(t, top);
    /* To the end even after a find: a recorded matrix's products leave
     * their parts waiting for the matrix below them (matrix.c). */
    for (int kind; (kind = ad_walk_down(&wk)) != AD_WALK_END;) {
        if (kind == AD_WALK_RUN) {
            const ad__record *r = wk.r - 1;
            uint32_t id = wk.id - 1;
            double z = t->adj[id];
            ad_walk_stop(&wk, r, id);
            add(&s, id, r->a, z, r->wa, 0);
            add(&s, id, r->b, z, r->wb, 1);
        } else if (kind == AD_WALK_NARY) {
            double z = t->adj[wk.hid];
            for (uint32_t i = 1; i <= wk.hdr->a; i++) {
                const ad__record *q = ad_tape_record(t, wk.hid - i);
                add(&s, wk.hid, q->a, z, q->wa, 0);
                add(&s, wk.hid, q->b, z, q->wb, 1);
            }
        } else {
            apply_block(&s, wk.hdr, wk.hid);
        }
    }
    memset(t->adj, 0, ((size_t)top + 1) * sizeof *t->adj);
    t->adj_zero = (size_t)top + 1;
    return sweep_end(&s);
}

/* ---- the checked forward sweep ---- */

unsigned char *ad_slot_marks(const ad_tape *t, uint32_t top)
{
    size_t n = top >= t->first ? (size_t)(top + 1 - t->first) : 0;
    unsigned char *slot = ad_alloc(n ? n : 1);
    if (!slot)
        return NULL;
    memset(slot, 0, n ? n : 1);
    ad_walk w = ad_walk_down_from(t, top);
    for (int kind; (kind = ad_walk_down(&w)) != AD_WALK_END;) {
        if (kind == AD_WALK_RUN) {  /* past the run */
            const ad__record *r = w.r;
            uint32_t id = w.id;
            do {
                r--;
                id--;
            } while (r > w.base && ad_walk_ordinary(r - 1));
            ad_walk_stop(&w, r, id);
        } else if (kind == AD_WALK_NARY) {
            memset(slot + (w.hid - w.hdr->a - t->first), 1, w.hdr->a);
        }
    }
    return slot;
}

/* tan[id] += w tan[from], noting the first term that makes a non-finite
 * tangent from finite numbers. */
static void term(sweep *s, uint32_t id, uint32_t from, double w, int slot)
{
    if (!from)
        return;
    double before = s->adj[id], d = s->adj[from];
    s->adj[id] += w * d;
    if (!s->found && !isfinite(s->adj[id]) && isfinite(before) && isfinite(w) && isfinite(d))
        note_term(s, id, id, d, w, slot, AD_PHASE_TANGENT);
}

static void forward_block(sweep *s, const ad__record *r, uint32_t hid)
{
    ad_block *b = ad_block_of(s->t, r);
    const uint32_t *ids = ad_block_ids(b);
    size_t nargs = (size_t)b->nargs + b->run_len;
    int in_finite = 1;
    for (size_t i = 0; i < nargs; i++)
        in_finite &= isfinite(s->adj[ad_block_arg(b, ids, i)]) != 0;
    ad_block_forward(s->t, r, hid, s->adj, 1);
    for (uint32_t j = 1; j <= b->nout && in_finite && !s->found; j++)
        if (!isfinite(s->adj[hid + j]))
            note(s, hid, hid + j, AD_PHASE_TANGENT);
}

ad_status ad_check_forward(ad_tape *t, const double *v, uint32_t top)
{
    if (!(t->checks & AD_CHECK_FINITE))
        return AD_OK;
    unsigned char *slot = ad_slot_marks(t, top);
    if (!slot)
        return AD_ENOMEM;
    sweep s = {t, t->adj, {0}, 0};
    t->adj[0] = 0.0;
    for (uint32_t i = 1; i < t->first; i++)
        t->adj[i] = v[i - 1];
    ad_walk w = ad_walk_up_from(t, top);
    for (int kind; !s.found && (kind = ad_walk_up(&w)) != AD_WALK_END;) {
        if (kind == AD_WALK_BLOCK) {
            forward_block(&s, w.hdr, w.hid);
        } else if (kind == AD_WALK_RUN) {
            const ad__record *r = w.r;
            uint32_t id = w.id;
            ad_walk_stop_up(&w, r + 1, id + 1);
            if (slot[id - t->first])  /* its header takes it */
                continue;
            t->adj[id] = 0.0;
            term(&s, id, r->a, r->wa, 0);
            term(&s, id, r->b, r->wb, 1);
        } else {
            t->adj[w.hid] = 0.0;
            for (uint32_t k = w.hdr->a; k >= 1 && !s.found; k--) {  /* in the sweeps' order */
                const ad__record *q = ad_tape_record(t, w.hid - k);
                term(&s, w.hid, q->a, q->wa, 0);
                term(&s, w.hid, q->b, q->wb, 1);
            }
        }
    }
    ad_free(slot);
    t->adj_zero = 0;
    return sweep_end(&s);
}
