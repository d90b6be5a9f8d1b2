/* dualrev internal: the one walk over a tape's records, downwards or upwards.
 *
 * A sweep is a loop over the steps the walker yields; the walker hides the
 * chunks and the layout of the records of other kinds (record.h):
 *   AD_WALK_RUN    ordinary records lie ahead in the current chunk.  The
 *                  sweep takes them itself, in a tight loop that stops at
 *                  the first record that is not ordinary (ad_walk_ordinary)
 *                  or at the chunk's end, and tells the walker where it
 *                  stopped (ad_walk_stop).  An upward walk counts the slots
 *                  of an n-ary run as ordinary records: each is a share of
 *                  its header's tangent.
 *   AD_WALK_NARY   an n-ary record: w->hdr, its header, at ID w->hid, over
 *                  the w->hdr->a slots below it.  Downwards the walker then
 *                  skips the slots, unless the sweep takes them first with
 *                  ad_walk_slots; upwards they have gone by already.
 *   AD_WALK_BLOCK  a block record: w->hdr at w->hid, its outputs at IDs
 *                  w->hid + 1 .. w->hid + w->hdr->a, which the walker skips.
 *   AD_WALK_END    nothing more.
 * Every function is inlined: a sweep compiled against it is as tight as one
 * written against the chunks. */
#ifndef DUALREV_WALK_H
#define DUALREV_WALK_H

#include "tape.h"

enum { AD_WALK_END, AD_WALK_RUN, AD_WALK_NARY, AD_WALK_BLOCK };

typedef struct ad_walk {
    const ad_tape *t;
    size_t c;                  /* the chunk of the place */
    const ad__record *base;    /* its first record */
    const ad__record *end;     /* upwards: where the records to walk end in it */
    const ad__record *r;       /* the place: downwards the next record is r - 1, upwards r */
    uint32_t id;               /* the ID of the record at r */
    uint32_t top;              /* upwards: the last ID walked */
    uint32_t slots;            /* downwards: slots of the last n-ary record not yet passed */
    const ad__record *hdr;     /* AD_WALK_NARY, AD_WALK_BLOCK: the header */
    uint32_t hid;              /* and its ID */
} ad_walk;

static inline int ad_walk_ordinary(const ad__record *r)
{
    return AD__LIKELY(r->b < AD__ID_END);
}

/* Puts the place at ID id (first <= id <= top + 1 of the walk; the place
 * above the last record of a full chunk is that chunk's end). */
AD_INLINE void ad_walk_seek(ad_walk *w, uint32_t id)
{
    size_t k = (size_t)(id - w->t->first), c = k >> AD_CHUNK_BITS, i = k & (AD_CHUNK - 1);
    if (c && !i) {  /* the end of the chunk below: chunk c may not be open */
        c--;
        i = AD_CHUNK;
    }
    w->c = c;
    w->base = w->t->chunks[c];
    w->r = w->base + i;
    w->id = id;
}

/* ---- downwards ---- */

/* Puts the place just above record id (first <= id). */
AD_INLINE void ad_walk_above(ad_walk *w, uint32_t id)
{
    size_t k = (size_t)(id - w->t->first);
    w->c = k >> AD_CHUNK_BITS;
    w->base = w->t->chunks[w->c];
    w->r = w->base + (k & (AD_CHUNK - 1)) + 1;
    w->id = id + 1;
}

/* A walk of records top, top - 1, ..., first (none if top < first: the
 * place is then the start of an empty chunk 0). */
AD_INLINE ad_walk ad_walk_down_from(const ad_tape *t, uint32_t top)
{
    ad_walk w = {t, 0, NULL, NULL, NULL, 0, top, 0, NULL, 0};
    if (top >= t->first)
        ad_walk_above(&w, top);
    return w;
}

/* The place as the sweep left it after taking records from a run: at r,
 * whose ID is id. */
AD_INLINE void ad_walk_stop(ad_walk *w, const ad__record *r, uint32_t id)
{
    w->r = r;
    w->id = id;
}

/* The next piece of the slots of the n-ary record just yielded: records
 * lo[0 .. *n), from the highest down; 0 once they are all passed. */
AD_INLINE int ad_walk_slots(ad_walk *w, const ad__record **lo, size_t *n)
{
    if (!w->slots)
        return 0;
    if (w->r == w->base) {
        w->base = w->t->chunks[--w->c];
        w->r = w->base + AD_CHUNK;
    }
    size_t here = (size_t)(w->r - w->base), k = here < w->slots ? here : w->slots;
    w->r -= k;
    w->id -= (uint32_t)k;
    w->slots -= (uint32_t)k;
    *lo = w->r;
    *n = k;
    return 1;
}

AD_INLINE int ad_walk_down(ad_walk *w)
{
    if (AD__UNLIKELY(w->slots)) {
        ad_walk_seek(w, w->id - w->slots);
        w->slots = 0;
    }
    if (w->r == w->base) {
        if (w->c == 0)
            return AD_WALK_END;
        w->base = w->t->chunks[--w->c];
        w->r = w->base + AD_CHUNK;
    }
    const ad__record *r = w->r - 1;
    if (ad_walk_ordinary(r))
        return AD_WALK_RUN;
    if (r->b == AD__OUT)  /* a block's output: the block starts at its header */
        ad_walk_above(w, w->id - 1 - r->a);
    w->r--;
    w->id--;
    w->hdr = w->r;
    w->hid = w->id;
    if (w->hdr->b == AD__NARY) {
        w->slots = w->hdr->a;
        return AD_WALK_NARY;
    }
    return AD_WALK_BLOCK;
}

/* ---- upwards ---- */

/* Where the records to walk end in chunk c. */
AD_INLINE const ad__record *ad_walk_end_of(const ad_walk *w)
{
    size_t last = (size_t)(w->top - w->t->first);
    if (w->c < last >> AD_CHUNK_BITS)
        return w->base + AD_CHUNK;
    return w->base + (last & (AD_CHUNK - 1)) + 1;
}

/* A walk of records first, first + 1, ..., top. */
AD_INLINE ad_walk ad_walk_up_from(const ad_tape *t, uint32_t top)
{
    ad_walk w = {t, 0, NULL, NULL, NULL, t->first, top, 0, NULL, 0};
    if (top >= t->first) {
        w.base = w.r = t->chunks[0];
        w.end = ad_walk_end_of(&w);
    }
    return w;
}

/* The place as the sweep left it after taking records from a run: at r,
 * whose ID is id. */
AD_INLINE void ad_walk_stop_up(ad_walk *w, const ad__record *r, uint32_t id)
{
    w->r = r;
    w->id = id;
}

AD_INLINE int ad_walk_up(ad_walk *w)
{
    if (w->id > w->top || !w->base)
        return AD_WALK_END;
    if (w->r == w->base + AD_CHUNK) {
        w->base = w->r = w->t->chunks[++w->c];
        w->end = ad_walk_end_of(w);
    }
    const ad__record *r = w->r;
    if (ad_walk_ordinary(r))
        return AD_WALK_RUN;
    w->hdr = r;
    w->hid = w->id;
    if (r->b == AD__NARY) {
        w->r++;
        w->id++;
        return AD_WALK_NARY;
    }
    /* a block: past its outputs */
    if (w->id + r->a + 1 > w->top) {
        w->id = w->top + 1;
    } else {
        ad_walk_seek(w, w->id + r->a + 1);
        w->end = ad_walk_end_of(w);
    }
    return AD_WALK_BLOCK;
}

#endif
