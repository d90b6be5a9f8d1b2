/* dualrev internal: the store of the staged resolve's pending set, for
 * the IDs below a group's window (sparse_window.h) and the inputs.  It maps
 * each ID the group reached to its cell (sparse_cell.h), and gives the
 * pending record IDs highest first, each once: the paper's Map Int.
 *
 * Two stores, behind one set of functions that sparse_rows.c inlines with
 * `hashed` constant, one copy of the kernel each:
 *   - dense (the default): a cell per ID and a tag per ID, epoch <<
 *     LANE_BITS | lanes, valid where its epoch is the group's number, so
 *     nothing is cleared between groups; the pending records in a
 *     two-level bitmap (a bit per ID, a bit per 64-ID word), whose highest
 *     bit a count of leading zeros finds.  Its arrays are kept per tape
 *     (sparse.c), 4 + 8 L bytes per ID and the bitmap.
 *   - hashed: a uthash map of entries with a max-heap for the order, when
 *     the dense arrays cannot be had: memory that grows only with what one
 *     group reaches, so a very large tape still gets its Jacobian.
 *
 * Static functions: this header belongs to sparse_rows.c alone. */
#ifndef DUALREV_SPARSE_PENDING_H
#define DUALREV_SPARSE_PENDING_H

#include <stdint.h>

#include "sparse_cell.h"

/* uthash must not exit() when memory runs out: it reports, and we return
 * AD_ENOMEM.  Its tables come from our allocator. */
static _Thread_local int hash_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(elt) (hash_oom = 1)
#define uthash_malloc(sz) ad_alloc(sz)
#define uthash_free(ptr, sz) ad_free(ptr)
#include <uthash.h>

#define LANE_MASK ((1u << LANE_BITS) - 1)

typedef struct ids {
    uint32_t *p;
    size_t len, cap;
} ids;

static int ids_grow(ids *v)
{
    return ad_grow((void **)&v->p, &v->cap, v->len + 1, sizeof *v->p, v->len) == AD_OK;
}

AD_INLINE int ids_push(ids *v, uint32_t id)
{
    if (v->len == v->cap && !ids_grow(v))
        return 0;
    v->p[v->len++] = id;
    return 1;
}

/* ---- the dense store ---- */

/* As the kernel keeps it: a part of its local state, in registers. */
typedef struct dense {
    uint32_t epoch;            /* the group's number */
    double *val;               /* L cotangents per ID */
    uint32_t *tag;             /* epoch << LANE_BITS | lanes that reached the ID */
    uint64_t *bits, *summary;  /* pending records: bit id; bit id / 64 */
    size_t pending;            /* bits set */
    uint32_t below;            /* every pending ID is <= below */
} dense;

AD_INLINE void bits_set(dense *d, uint32_t id)
{
    d->bits[id >> 6] |= (uint64_t)1 << (id & 63);
    d->summary[id >> 12] |= (uint64_t)1 << ((id >> 6) & 63);
    d->pending++;
}

/* Bits 0..k of a word (k < 64). */
static inline uint64_t up_to(unsigned k)
{
    return ~(uint64_t)0 >> (63 - k);
}

static inline unsigned top_bit(uint64_t w)
{
#if defined(__GNUC__) || defined(__clang__)
    return 63u - (unsigned)__builtin_clzll(w);
#else
    unsigned k = 63;
    while (!(w >> k))
        k--;
    return k;
#endif
}

/* Takes the highest pending ID.  A gap in the tape costs one summary word
 * per 4096 IDs. */
AD_INLINE uint32_t bits_pop(dense *d)
{
    size_t w = d->below >> 6;
    uint64_t word = d->bits[w] & up_to(d->below & 63);
    if (AD__UNLIKELY(!word)) {
        size_t s = w >> 6;
        uint64_t sw = d->summary[s] & (((uint64_t)1 << (w & 63)) - 1);
        while (!sw)
            sw = d->summary[--s];
        w = (s << 6) + top_bit(sw);
        word = d->bits[w];
    }
    uint32_t id = (uint32_t)((w << 6) + top_bit(word));
    word &= ~((uint64_t)1 << (id & 63));
    d->bits[w] = word;
    if (!word)
        d->summary[w >> 6] &= ~((uint64_t)1 << (w & 63));
    d->pending--;
    d->below = id - 1;
    return id;
}

/* ---- the hashed store ---- */

typedef struct pend_entry {
    uint32_t id, lanes;
    double val[GROUP];
    UT_hash_handle hh;
} pend_entry;

/* Entries come from blocks that live for one call: a group drops its map
 * wholesale, and entries never move (uthash links them by address). */
#define POOL_BLOCK 4096
typedef struct pool_block {
    struct pool_block *next;
    pend_entry e[POOL_BLOCK];
} pool_block;

typedef struct hash_store {
    pend_entry *map;
    pool_block *blocks;
    size_t used;               /* entries used in blocks (the head) */
    ids heap;                  /* pending record IDs, a max-heap */
} hash_store;

static void heap_up(uint32_t *h, size_t i)
{
    for (size_t up; i && h[up = (i - 1) / 2] < h[i]; i = up) {
        uint32_t x = h[i];
        h[i] = h[up];
        h[up] = x;
    }
}

static uint32_t heap_pop(ids *heap)
{
    uint32_t *h = heap->p, top = h[0];
    h[0] = h[--heap->len];
    for (size_t i = 0, c; (c = 2 * i + 1) < heap->len; i = c) {
        if (c + 1 < heap->len && h[c + 1] > h[c])
            c++;
        if (h[i] >= h[c])
            break;
        uint32_t x = h[i];
        h[i] = h[c];
        h[c] = x;
    }
    return top;
}

static pend_entry *hash_new(hash_store *hs, uint32_t id)
{
    if (!hs->blocks || hs->used == POOL_BLOCK) {
        pool_block *b = ad_alloc(sizeof *b);
        if (!b)
            return NULL;
        b->next = hs->blocks;
        hs->blocks = b;
        hs->used = 0;
    }
    pend_entry *e = &hs->blocks->e[hs->used++];
    e->id = id;
    e->lanes = 0;
    hash_oom = 0;
    HASH_ADD(hh, hs->map, id, sizeof(uint32_t), e);
    return hash_oom ? NULL : e;
}

/* The map emptied for the next group. */
static void hash_clear(hash_store *hs)
{
    HASH_CLEAR(hh, hs->map);
    /* Keep the newest block for the next group; free the others. */
    while (hs->blocks && hs->blocks->next) {
        pool_block *b = hs->blocks->next;
        hs->blocks->next = b->next;
        ad_free(b);
    }
    hs->used = 0;
}

/* ---- either store: inlined with `hashed` constant ---- */

/* The store emptied for the group that starts. */
AD_INLINE void store_next_group(hash_store *hs, dense *d, const int hashed)
{
    hs->heap.len = 0;
    if (hashed)
        hash_clear(hs);
    else
        d->epoch++;
}

/* The cotangents of id in this group, set up if new (*fresh), and through
 * *lanes where the group's lanes that reached it are kept; NULL without
 * memory.  Dense, the lanes are the tag's low bits. */
AD_INLINE double *find_cell(hash_store *hs, dense *d, uint32_t id, int *fresh, uint32_t **lanes,
                            const size_t L, const int hashed)
{
    double *v;
    if (!hashed) {
        uint32_t *tag = &d->tag[id];
        *fresh = (*tag >> LANE_BITS) != d->epoch;
        if (*fresh)
            *tag = d->epoch << LANE_BITS;
        *lanes = tag;
        v = d->val + (size_t)id * L;
    } else {
        pend_entry *e;
        HASH_FIND(hh, hs->map, &id, sizeof(uint32_t), e);
        *fresh = !e;
        if (!e && !(e = hash_new(hs, id)))
            return NULL;
        *lanes = &e->lanes;
        v = e->val;
    }
    if (*fresh)
        cell_clear(v, L);
    return v;
}

/* Where the group reached id, which the store holds (none if it did not). */
AD_INLINE cell store_cell(hash_store *hs, const dense *d, uint32_t id, const size_t L,
                          const int hashed)
{
    cell none = {NULL, 0};
    if (!hashed)
        return d->tag[id] >> LANE_BITS == d->epoch
                   ? (cell){d->val + (size_t)id * L, d->tag[id] & LANE_MASK}
                   : none;
    pend_entry *e;
    HASH_FIND(hh, hs->map, &id, sizeof(uint32_t), e);
    return e ? (cell){e->val, e->lanes} : none;
}

/* Record id, just reached by the group, to be expanded in its turn; 0
 * without memory. */
AD_INLINE int store_pend(hash_store *hs, dense *d, uint32_t id, const int hashed)
{
    if (!hashed) {
        bits_set(d, id);
        return 1;
    }
    if (!ids_push(&hs->heap, id))
        return 0;
    heap_up(hs->heap.p, hs->heap.len - 1);
    return 1;
}

AD_INLINE int store_has_pending(const hash_store *hs, const dense *d, const int hashed)
{
    return hashed ? hs->heap.len != 0 : d->pending != 0;
}

/* Takes the highest pending record ID. */
AD_INLINE uint32_t store_pop(hash_store *hs, dense *d, const int hashed)
{
    return hashed ? heap_pop(&hs->heap) : bits_pop(d);
}

/* At the end of a call: the bitmap left zero for the next one (a group cut
 * short by an error leaves IDs pending), and the map's memory freed. */
static void store_finish(hash_store *hs, dense *d)
{
    while (d->pending)
        bits_pop(d);
    HASH_CLEAR(hh, hs->map);
    while (hs->blocks) {
        pool_block *b = hs->blocks;
        hs->blocks = b->next;
        ad_free(b);
    }
    ad_free(hs->heap.p);
}

#endif
