/* dualrev: sparse Jacobians by staged resolve (dual-numbers paper, sect. 6).
 *
 * For each output row: a pending set maps record IDs to accumulated
 * cotangents (the paper's Map Int, where calls to the same record merge:
 * linear factoring), and the highest pending ID is expanded next, so each
 * record is applied once per row, after all its contributions arrived.  A
 * row costs time in proportion to the records it reaches, not to the tape.
 * Inputs reached are the row's nonzeros: the structure comes from the tape.
 *
 * Rows go in groups of a few consecutive outputs, one lane each, which
 * share one resolve: neighbouring outputs usually reach much the same
 * records, and each is then expanded once for the group.  A lane mask per
 * ID says which rows reached it, so each row keeps its own structure.
 *
 * Records are appended in program order, so a group reaches mostly a
 * compact window of IDs below its highest output, plus the inputs.  The
 * pending set is therefore in two parts:
 *   - the window, up to WINDOW IDs below the group's highest output, in its
 *     chunk (so that their records are one array): small local arrays,
 *     walked downwards position by position like the dense reverse sweep
 *     to the lowest position reached, each cleared as it is expanded, so
 *     that they are clear for the next group and a group pays only for
 *     the span it uses;
 *   - the store, for the inputs and anything below the window: dense by
 *     default, a value per ID valid where a tag says this group set it (so
 *     nothing is cleared between groups), and the pending IDs in a
 *     two-level bitmap whose highest bit a count of leading zeros finds.
 *     When its arrays (4 + 8 L bytes per ID) cannot be had, a uthash map
 *     takes over, with a max-heap for the order: memory that grows only
 *     with what one group reaches. */
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "pair.h"
#include "testing.h"

/* uthash must not exit() when memory runs out: it reports, and we return
 * AD_ENOMEM.  Its tables come from our allocator. */
static _Thread_local int hash_oom;
#define HASH_NONFATAL_OOM 1
#define uthash_nonfatal_oom(elt) (hash_oom = 1)
#define uthash_malloc(sz) ad_alloc(sz)
#define uthash_free(ptr, sz) ad_free(ptr)
#include <uthash.h>

static _Thread_local int force_hash;

void ad_test_sparse_force_hash(int on)
{
    force_hash = on;
}

/* Rows in a group, one lane each.  Two, because wider groups did worse on
 * BA (ba-bench: 72.8x the plain residuals with 4, 54.0x with 2): rows that
 * share little pay for lanes they do not use, and a mask on every step.
 * A group's lanes fit in a tag's low bits, beside the group's number. */
#define GROUP 2
#define LANE_BITS 2
#define LANE_MASK ((1u << LANE_BITS) - 1)
_Static_assert(GROUP <= LANE_BITS, "a tag holds one bit per lane");

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

typedef struct ids {
    uint32_t *p;
    size_t len, cap;
} ids;

/* IDs below a group's highest output that the window covers. */
#define WINDOW 1024

/* Lanes are 16-bit, not bytes, which could alias anything and make the
 * compiler reload the kernel's state after every store into them.  Between
 * groups every position is clear: no lanes, -0 cotangents. */
typedef struct window {
    uint16_t lanes[WINDOW];        /* the lanes that reached each position */
    double val[WINDOW * GROUP];    /* L cotangents per position */
} window;

/* What the row kernel reads on every step, in a struct of its own that is
 * only ever a local of the kernel, so the compiler can keep it in registers:
 * as fields of the state below, each store into the arrays (which could
 * alias them, for all it knows) would reload them. */
typedef struct hot {
    ad__record *const *chunks; /* the tape's */
    uint32_t first;            /* the tape's first record ID */
    uint32_t n;                /* inputs: IDs 1..n */
    uint32_t epoch;            /* dense: the group's number */
    double *val;               /* dense: L cotangents per ID */
    uint32_t *tag;             /* dense: epoch << LANE_BITS | lanes that reached the ID */
    uint64_t *bits, *summary;  /* dense: pending records: bit id; bit id / 64 */
    size_t pending;            /* dense: bits set */
    uint32_t below;            /* dense: every pending ID is <= below */
    window *win;
    uint32_t wlo, whi;         /* the window's IDs; wlo is UINT32_MAX without one */
    const ad__record *wrec;    /* the window's records: wlo's, then on in one chunk */
    size_t wmin;               /* the lowest position staged (whi - wlo + 1 for none) */
    uintptr_t ahead;           /* just above the top record of the group PREFETCH_AHEAD on */
    int wkept;                 /* block outputs were left uncleared for their rule */
} hot;

/* Columns a group sorts in an array of its own, and by the last order. */
#define SORT_SHORT 32

typedef struct row_state {
    const ad_tape *t;
    hot h;                     /* between runs of groups (rows_in) */
    /* hash mode */
    int hashed;
    pend_entry *map;
    pool_block *blocks;
    size_t used;               /* entries used in blocks (the head) */
    ids heap;                  /* pending record IDs, a max-heap */
    ids cols;                  /* input IDs reached by the group */
    const uint32_t *sorted;    /* cols in ascending order: cols, or short_sorted */
    uint32_t short_sorted[SORT_SHORT];
    unsigned char order[SORT_SHORT]; /* the last short sort's: cols[order[0]], ... ascend */
    size_t order_len;          /* its length (0 for none) */
    struct cell *found;        /* hashed store: their cells, looked up once (append_rows) */
    size_t found_cap;
    double scale;              /* the group's seed (tape.h, "Scaled seeds") */
    ad_status status;
} row_state;

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

/* ---- the dense store's order: a two-level bitmap of pending IDs ---- */

AD_INLINE void bits_set(hot *h, uint32_t id)
{
    h->bits[id >> 6] |= (uint64_t)1 << (id & 63);
    h->summary[id >> 12] |= (uint64_t)1 << ((id >> 6) & 63);
    h->pending++;
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
AD_INLINE uint32_t bits_pop(hot *h)
{
    size_t w = h->below >> 6;
    uint64_t word = h->bits[w] & up_to(h->below & 63);
    if (AD__UNLIKELY(!word)) {
        size_t s = w >> 6;
        uint64_t sw = h->summary[s] & (((uint64_t)1 << (w & 63)) - 1);
        while (!sw)
            sw = h->summary[--s];
        w = (s << 6) + top_bit(sw);
        word = h->bits[w];
    }
    uint32_t id = (uint32_t)((w << 6) + top_bit(word));
    word &= ~((uint64_t)1 << (id & 63));
    h->bits[w] = word;
    if (!word)
        h->summary[w >> 6] &= ~((uint64_t)1 << (w & 63));
    h->pending--;
    h->below = id - 1;
    return id;
}

static pend_entry *hash_new(row_state *rs, uint32_t id)
{
    if (!rs->blocks || rs->used == POOL_BLOCK) {
        pool_block *b = ad_alloc(sizeof *b);
        if (!b)
            return NULL;
        b->next = rs->blocks;
        rs->blocks = b;
        rs->used = 0;
    }
    pend_entry *e = &rs->blocks->e[rs->used++];
    e->id = id;
    e->lanes = 0;
    hash_oom = 0;
    HASH_ADD(hh, rs->map, id, sizeof(uint32_t), e);
    return hash_oom ? NULL : e;
}

/* ---- one ID's cell: L cotangents and the lanes that reached it ----
 *
 * The functions below are inlined with L and `hashed` constants, one copy
 * per lane count and store. */

/* A cell starts at -0 in every lane, the identity of addition (-0 + x is x
 * for every x, -0 and NaN included), so a lane's first contribution is its
 * value exactly, as in a resolve of that row alone: +0 would turn a first
 * -0 into +0. */
AD_INLINE void cell_clear(double *v, const size_t L)
{
#ifdef AD_PAIRS
    if (L == 2) {  /* one store, which the cell's first load can take from */
        *(ad_pair_u *)v = (ad_pair_u){-0.0, -0.0};
        return;
    }
#endif
    for (size_t l = 0; l < L; l++)
        v[l] = -0.0;
}

/* The cotangents of id in this group, set up if new (*fresh), and through
 * *lanes where the group's lanes that reached it are kept; NULL without
 * memory.  Dense, the lanes are the tag's low bits. */
AD_INLINE double *find_cell(row_state *rs, hot *h, uint32_t id, int *fresh, uint32_t **lanes,
                            const size_t L, const int hashed)
{
    double *v;
    if (!hashed) {
        uint32_t *tag = &h->tag[id];
        *fresh = (*tag >> LANE_BITS) != h->epoch;
        if (*fresh)
            *tag = h->epoch << LANE_BITS;
        *lanes = tag;
        v = h->val + (size_t)id * L;
    } else {
        pend_entry *e;
        HASH_FIND(hh, rs->map, &id, sizeof(uint32_t), e);
        *fresh = !e;
        if (!e && !(e = hash_new(rs, id)))
            return NULL;
        *lanes = &e->lanes;
        v = e->val;
    }
    if (*fresh)
        cell_clear(v, L);
    return v;
}

/* Where the group reached id: its cotangents and lanes (v NULL if none). */
typedef struct cell {
    const double *v;
    unsigned lanes;
} cell;

AD_INLINE cell reached(row_state *rs, const hot *h, uint32_t id, const size_t L, const int hashed)
{
    cell none = {NULL, 0};
    if (id >= h->wlo) {
        size_t k = id - h->wlo;
        return id <= h->whi && h->win->lanes[k]
                   ? (cell){h->win->val + k * L, h->win->lanes[k]}
                   : none;
    }
    if (!hashed)
        return h->tag[id] >> LANE_BITS == h->epoch
                   ? (cell){h->val + (size_t)id * L, h->tag[id] & LANE_MASK}
                   : none;
    pend_entry *e;
    HASH_FIND(hh, rs->map, &id, sizeof(uint32_t), e);
    return e ? (cell){e->val, e->lanes} : none;
}

/* v[l] += z[l] * w for the lanes l in M; the other lanes are left alone,
 * so each row gets exactly the operations of a resolve of its own: a lane
 * outside M holds -0 in z, and 0 x Inf would be NaN.  A pair is computed
 * whole and, unless both lanes reached the record (the common case, taken
 * first), the lanes outside M put back: one store, which the next load of
 * the cell can take from (two single stores would make it wait for both to
 * reach the cache). */
AD_INLINE void lanes_add(double *v, const double *z, double w, unsigned M, const size_t L)
{
#ifdef AD_PAIRS
    if (L == 2) {
        static const ad_pair_mask keep[4] = {{0, 0}, {-1, 0}, {0, -1}, {-1, -1}};
        ad_pair_u old = *(ad_pair_u *)v, sum = old + *(const ad_pair_u *)z * (ad_pair_u){w, w};
        if (AD__LIKELY(M == 3))
            *(ad_pair_u *)v = sum;
        else
            *(ad_pair_u *)v = (ad_pair_u)(((ad_pair_mask)sum & keep[M]) |
                                          ((ad_pair_mask)old & ~keep[M]));
        return;
    }
#endif
    for (size_t l = 0; l < L; l++)
        if (M >> l & 1)
            v[l] += z[l] * w;
}

AD_INLINE void window_stage(hot *h, size_t k, const double *z, double w, unsigned M, const size_t L)
{
    h->wmin = k < h->wmin ? k : h->wmin;
    h->win->lanes[k] |= (uint16_t)M;
    lanes_add(h->win->val + k * L, z, w, M, L);
}

AD_INLINE void window_clear(hot *h, size_t k, const size_t L)
{
    h->win->lanes[k] = 0;
    cell_clear(h->win->val + k * L, L);
}

/* Stage a call of record (or input) id with cotangents z * w, from lanes M. */
AD_INLINE void stage(row_state *rs, hot *h, uint32_t id, const double *z, double w, unsigned M,
                     const size_t L, const int hashed)
{
    if (id >= h->wlo) {
        window_stage(h, id - h->wlo, z, w, M, L);
        return;
    }
    if (!id)  /* a constant */
        return;
    int fresh;
    uint32_t *lanes;
    double *v = find_cell(rs, h, id, &fresh, &lanes, L, hashed);
    if (!v) {
        rs->status = AD_ENOMEM;
        return;
    }
    lanes_add(v, z, w, M, L);
    *lanes |= M;
    if (!fresh)
        return;
    if (id <= h->n) {
        if (!hashed)  /* room for every input (choose_store) */
            rs->cols.p[rs->cols.len++] = id;
        else if (!ids_push(&rs->cols, id))
            rs->status = AD_ENOMEM;
    } else if (!hashed) {
        bits_set(h, id);
    } else if (ids_push(&rs->heap, id)) {
        heap_up(rs->heap.p, rs->heap.len - 1);
    } else {
        rs->status = AD_ENOMEM;
    }
}

/* A block's outputs sit above its header, so when the header comes up
 * every output's cotangents are complete.  Its rule takes one lane at a
 * time.  Each argument is staged, even with a zero cotangent: the
 * structure of a rule is every output on every argument, unless its kind
 * says which arguments the reached outputs depend on. */
AD_INLINE void expand_block(row_state *rs, hot *h, const ad__record *r, uint32_t id, unsigned M,
                            const size_t L, const int hashed)
{
    const ad_block *b = ad_block_of(rs->t, r);
    double *ybar = ad_block_ybar(rs->t);
    unsigned char *outs = ad_block_flags(rs->t), *args = outs + b->nout;
    const uint32_t *ids = ad_block_ids(b);
    size_t nx = (size_t)b->nargs + b->run_len;
    for (size_t l = 0; l < L; l++) {
        if (!(M >> l & 1))
            continue;
        for (uint32_t j = 0; j < b->nout; j++) {
            cell c = reached(rs, h, id + 1 + j, L, hashed);
            outs[j] = c.v && (c.lanes >> l & 1);
            ybar[j] = outs[j] ? c.v[l] : 0.0;
        }
        const double *xbar = ad_block_pullback(rs->t, b, ybar);
        memset(args, !b->kind->reach, nx);
        if (b->kind->reach)
            b->kind->reach(b, outs, args);
        double e[GROUP] = {0};
        for (size_t k = 0; k < nx; k++) {
            if (!args[k])
                continue;
            e[l] = xbar[k];
            stage(rs, h, k < b->nargs ? ids[k] : b->run + (uint32_t)(k - b->nargs), e, 1.0,
                  1u << l, L, hashed);
        }
    }
}

AD_INLINE const ad__record *record_at(const hot *h, uint32_t id)
{
    size_t k = id - h->first;
    return &h->chunks[k >> AD_CHUNK_BITS][k & (AD_CHUNK - 1)];
}

/* Expands record id, r, which lanes M reached with cotangents z. */
AD_INLINE void expand(row_state *rs, hot *h, uint32_t id, const ad__record *r, const double *z,
                      unsigned M, const size_t L, const int hashed)
{
    if (AD__LIKELY(r->b < AD__ID_END)) {
        stage(rs, h, r->a, z, r->wa, M, L, hashed);
        stage(rs, h, r->b, z, r->wb, M, L, hashed);
    } else if (r->b == AD__NARY) {
        for (uint32_t k = 1; k <= r->a; k++) {
            const ad__record *s = record_at(h, id - k);
            stage(rs, h, s->a, z, s->wa, M, L, hashed);
            stage(rs, h, s->b, z, s->wb, M, L, hashed);
        }
    } else if (r->b == AD__OUT) {
        stage(rs, h, id - r->a, z, 0.0, M, L, hashed);  /* the block's header */
    } else {
        expand_block(rs, h, r, id, M, L, hashed);
    }
}

/* Expands the record id, r, reached by lanes M with cotangents at v: they
 * are copied first, as staging writes into other cells. */
AD_INLINE void expand_cell(row_state *rs, hot *h, uint32_t id, const ad__record *r,
                           const double *v, unsigned M, const size_t L, const int hashed)
{
    double z[GROUP];
    for (size_t l = 0; l < L; l++)
        z[l] = v[l];
    expand(rs, h, id, r, z, M, L, hashed);
}

/* Expands window position k, reached by lanes M, and clears it: nothing
 * stages into it again, as staging reaches only lower IDs.  A block's
 * output is kept for the block's rule, which reads it when the header
 * comes up, and cleared with the group. */
AD_INLINE void window_expand(row_state *rs, hot *h, size_t k, unsigned M, const size_t L,
                             const int hashed)
{
    const ad__record *r = h->wrec + k;
    double z[GROUP];
    for (size_t l = 0; l < L; l++)
        z[l] = h->win->val[k * L + l];
    if (AD__LIKELY(r->b < AD__ID_END)) {
        /* read before the clear, which could alias the record (pair.h) */
        const ad__record c = *r;
        window_clear(h, k, L);
        stage(rs, h, c.a, z, c.wa, M, L, hashed);
        stage(rs, h, c.b, z, c.wb, M, L, hashed);
        return;
    }
    if (r->b != AD__OUT)
        window_clear(h, k, L);
    else
        h->wkept = 1;
    expand(rs, h, h->wlo + (uint32_t)k, r, z, M, L, hashed);
}

static int by_id(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* The group's columns in ascending order, in rs->sorted.  Groups usually
 * reach a few inputs: insertion sort, qsort for many.  Rows made by the same
 * code reach their inputs in the same order, so the order the last short
 * sort found is tried first: it stands if it sorts these IDs too, which one
 * ascending pass over them checks (the IDs are distinct, each pushed once),
 * and the sort is then not needed. */
static void sort_ids(row_state *rs)
{
    const uint32_t *in = rs->cols.p;
    size_t n = rs->cols.len;
    if (n > SORT_SHORT) {
        qsort(rs->cols.p, n, sizeof *rs->cols.p, by_id);
        rs->sorted = rs->cols.p;
        rs->order_len = 0;
        return;
    }
    uint32_t *key = rs->short_sorted;
    unsigned char *order = rs->order;
    rs->sorted = key;
    if (n == rs->order_len) {
        size_t i = 0;
        for (; i < n; i++) {
            key[i] = in[order[i]];
            if (i && key[i] < key[i - 1])
                break;
        }
        if (i == n)
            return;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t x = in[i];
        size_t j = i;
        for (; j && key[j - 1] > x; j--) {
            key[j] = key[j - 1];
            order[j] = order[j - 1];
        }
        key[j] = x;
        order[j] = (unsigned char)i;
    }
    rs->order_len = n;
}

/* The hashed store's map, emptied for the next group. */
static void clear_map(row_state *rs)
{
    HASH_CLEAR(hh, rs->map);
    /* Keep the newest block for the next group; free the others. */
    while (rs->blocks && rs->blocks->next) {
        pool_block *b = rs->blocks->next;
        rs->blocks->next = b->next;
        ad_free(b);
    }
    rs->used = 0;
}

/* The highest ID among the group's outputs out[0..B). */
static inline uint32_t group_top(const ad_real *out, size_t B)
{
    uint32_t top = 0;
    for (size_t b = 0; b < B; b++)
        top = out[b].id > top ? out[b].id : top;
    return top;
}

/* The window below top, the group's highest output (none when every
 * output is an input or a constant): at most WINDOW IDs, all in top's
 * chunk, so that its records are one array.  Nothing is staged in it yet. */
AD_INLINE void open_window(hot *h, uint32_t top)
{
    h->wlo = UINT32_MAX;
    h->wkept = 0;
    if (top < h->first)
        return;
    size_t k = top - h->first, in_chunk = k & (AD_CHUNK - 1);
    size_t below = in_chunk < WINDOW - 1 ? in_chunk : WINDOW - 1;
    h->whi = top;
    h->wlo = top - (uint32_t)below;
    h->wrec = record_at(h, h->wlo);
    h->wmin = below + 1;
}

/* The tape was written long before and has left the caches, and a group
 * reads its window downwards, one dependent step at a time.  So each step
 * of the walk also asks for the record as far below the top of the group
 * PREFETCH_AHEAD groups on: as many of its records as this group walks
 * (neighbouring rows usually reach about as far), one prefetch a step.  A
 * burst of prefetches before each walk (the last walk's span and 8 more,
 * up to 128 records) made the core wait whenever its line fill buffers were
 * all busy: spread over the walk, 0.90-0.97 of the time on BA in paired
 * runs; with neither, 1.10-1.21 (docs/jacobians.md).  The address is an
 * integer, never read through, so one below a chunk's start is harmless:
 * a prefetch does not fault. */
#define PREFETCH_AHEAD 4

AD_INLINE void prefetch_ahead(const hot *h, size_t k)
{
    AD_PREFETCH(h->ahead - (h->whi - h->wlo + 1 - k) * sizeof(ad__record));
}

/* h->ahead for the group of L outputs from out[from] on, of m: just above
 * its top record, or, when there is none, the end of the window, whose
 * lines the cache has. */
static void aim_ahead(hot *h, const ad_real *out, size_t from, size_t m, size_t L)
{
    uint32_t top = from < m ? group_top(out + from, m - from < L ? m - from : L) : 0;
    h->ahead = top >= h->first ? (uintptr_t)(record_at(h, top) + 1) : (uintptr_t)(h->win + 1);
}

/* Resolves the L rows of outputs out[0..L) together, lane b for out[b];
 * leaves the input IDs the group reached, sorted, in rs->sorted, with their
 * cells findable through reached(). */
AD_INLINE void resolve_group(row_state *rs, hot *hp, const ad_real *out, const size_t L,
                             const int hashed)
{
    hot h = *hp;  /* a copy of the caller's local, which inlining folds away */
    rs->heap.len = rs->cols.len = 0;
    if (hashed)
        clear_map(rs);
    else
        h.epoch++;
    h.below = group_top(out, L);
    open_window(&h, h.below);
    for (size_t b = 0; b < L; b++) {
        double e[GROUP] = {0};
        e[b] = rs->scale;
        stage(rs, &h, out[b].id, e, 1.0, 1u << b, L, hashed);
    }
    /* Staging only ever reaches lower IDs, so the walk down the window
     * ends at the lowest position staged, which it may lower as it goes.
     * A failure to stage into the store is reported at the end: the walk
     * itself cannot fail, and leaves the window clear but for kept block
     * outputs. */
    if (h.wlo != UINT32_MAX)
        for (size_t k = h.whi - h.wlo + 1; k-- > h.wmin;) {
            unsigned M = h.win->lanes[k];
            prefetch_ahead(&h, k);
            if (M)
                window_expand(rs, &h, k, M, L, hashed);
        }
    while ((hashed ? rs->heap.len : h.pending) && rs->status == AD_OK) {
        uint32_t id = hashed ? heap_pop(&rs->heap) : bits_pop(&h);
        int fresh;
        uint32_t *lanes;
        double *v = find_cell(rs, &h, id, &fresh, &lanes, L, hashed);
        expand_cell(rs, &h, id, record_at(&h, id), v, *lanes & LANE_MASK, L, hashed);
    }
    if (h.wkept)  /* the block rules have run */
        for (size_t k = h.wmin; k <= h.whi - h.wlo; k++)
            window_clear(&h, k, L);
    *hp = h;
    sort_ids(rs);
}

/* ---- the CSR being built ----
 *
 * ad_csr_free keeps the arrays of the last Jacobian freed on a thread for
 * the next one built there, as the tape keeps its memory: a Newton or
 * Gauss-Newton loop builds one of much the same size at every step, and
 * fresh memory is paid for page by page when it is first touched. */

typedef struct csr_out {
    ad_csr *J;
    size_t cap;  /* entries room in J->col and J->val */
} csr_out;

static int csr_room(csr_out *o, size_t need);

/* The arrays of the last Jacobian freed on this thread, for the next one
 * built here: rows + 1 and nnz entries. */
static _Thread_local ad_csr spare;

static void spare_free(void)
{
    ad_free(spare.row_ptr);
    ad_free(spare.col);
    ad_free(spare.val);
    memset(&spare, 0, sizeof spare);
}

/* J's row pointers for m rows, and room for `want` entries: the spare
 * arrays where they are large enough, else new ones.  The spare arrays
 * left over are freed. */
static int csr_start(csr_out *o, size_t m, size_t want)
{
    ad_csr *J = o->J, *sp = &spare;
    if (sp->row_ptr && sp->rows >= m) {  /* rows + 1 pointers */
        J->row_ptr = sp->row_ptr;
        sp->row_ptr = NULL;
    }
    if (sp->col && sp->val && sp->nnz >= want) {
        J->col = sp->col;
        J->val = sp->val;
        o->cap = sp->nnz;
        sp->col = NULL;
        sp->val = NULL;
    }
    spare_free();
    if (!J->row_ptr && !(J->row_ptr = ad_alloc((m + 1) * sizeof *J->row_ptr)))
        return 0;
    return csr_room(o, want);
}

/* Moves J's entries to arrays of `cap` entries. */
/* Room for `need` entries in col and val, which grow together (ad_grow);
 * o->cap is the room both have. */
static int csr_room(csr_out *o, size_t need)
{
    ad_csr *J = o->J;
    size_t ccap = o->cap, vcap = o->cap;
    if (need <= o->cap)
        return 1;
    int ok = ad_grow((void **)&J->col, &ccap, need, sizeof *J->col, J->nnz) == AD_OK &&
             ad_grow((void **)&J->val, &vcap, need, sizeof *J->val, J->nnz) == AD_OK;
    o->cap = ccap < vcap ? ccap : vcap;
    return ok;
}

/* col and val cut to the entries J has: not a growth, a copy into arrays
 * of exactly that size, so that a Jacobian kept by the user holds no
 * spare room. */
static int csr_trim(csr_out *o)
{
    ad_csr *J = o->J;
    size_t keep = J->nnz ? J->nnz : 1;
    size_t *col = ad_alloc(keep * sizeof *col);
    double *val = ad_alloc(keep * sizeof *val);
    if (!col || !val) {
        ad_free(col);
        ad_free(val);
        return 0;
    }
    if (J->nnz) {
        memcpy(col, J->col, J->nnz * sizeof *col);
        memcpy(val, J->val, J->nnz * sizeof *val);
    }
    ad_free(J->col);
    ad_free(J->val);
    J->col = col;
    J->val = val;
    o->cap = keep;
    return 1;
}

/* Column k of the group, input id: its cell.  Dense, where its ID says:
 * inputs lie below every window, and each column was staged in this group,
 * so its tag is the group's.  Hashed, looked up once beforehand into
 * rs->found. */
AD_INLINE cell column_cell(const row_state *rs, const double *val, const uint32_t *tag, size_t k,
                           uint32_t id, const size_t L, const int hashed)
{
    return hashed ? rs->found[k] : (cell){val + (size_t)id * L, tag[id] & LANE_MASK};
}

/* The group's L rows, from row j0: each takes the columns its lane
 * reached, scaled back (ad_result), in one pass over the columns that
 * writes both rows (lane 1's start after lane 0's count).  Room is made
 * for exactly those, so that a call sized by the last one does not grow.
 * A later pass of the group (tape.h, ad_retry) reaches the same columns
 * and replaces only the values that are not finite. */
_Static_assert(GROUP == 2, "append_rows writes two rows at a time");

AD_INLINE ad_status append_rows(row_state *rs, const hot *h, csr_out *o, size_t j0, int later,
                                const size_t L, const int hashed)
{
    ad_csr *J = o->J;
    const uint32_t *ids = rs->sorted, *tag = h->tag;
    const double *cells = h->val;
    size_t n = rs->cols.len, count0 = 0, count1 = 0;
    if (hashed) {
        if (ad_reserve((void **)&rs->found, &rs->found_cap, n, sizeof *rs->found) != AD_OK)
            return AD_ENOMEM;
        for (size_t k = 0; k < n; k++)
            rs->found[k] = reached(rs, h, ids[k], GROUP, 1);
    }
    for (size_t k = 0; k < n; k++) {
        unsigned M = column_cell(rs, cells, tag, k, ids[k], L, hashed).lanes;
        count0 += M & 1;
        count1 += M >> 1;
    }
    size_t at0 = J->nnz, at1 = J->nnz + count0;  /* in locals: the stores below could change J */
    if (!csr_room(o, at1 + count1))
        return AD_ENOMEM;
    size_t *col = J->col;
    double *val = J->val, unscale = ad_seed_back(rs->scale);
    J->row_ptr[j0] = at0;
    if (L > 1)
        J->row_ptr[j0 + 1] = at1;
    for (size_t k = 0; k < n; k++) {
        cell c = column_cell(rs, cells, tag, k, ids[k], L, hashed);
        if (c.lanes & 1) {
            col[at0] = ids[k] - 1;
            if (!later || val[at0] - val[at0] != 0.0)
                val[at0] = ad_result(c.v[0], unscale);
            at0++;
        }
        if (c.lanes & 2) {
            col[at1] = ids[k] - 1;
            if (!later || val[at1] - val[at1] != 0.0)
                val[at1] = ad_result(c.v[1], unscale);
            at1++;
        }
    }
    J->nnz = at1;
    return AD_OK;
}

/* The sum of v[0..n): not finite if one is not (tape.h, ad_unscale). */
static double sum_of(const double *v, size_t n)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    return sum;
}

/* Rows j0 .. j1 (a multiple of L apart), L to a group, each group resolved
 * and written; the kernel's state is a local of this loop, not copied in
 * and out for each group.  Each group is seeded scaled, and again unscaled
 * if that overflowed and left a value that is not finite (tape.h,
 * ad_retry; the resolve is exact already): the rows are read again for
 * that only when the flag says so, which is rare. */
AD_INLINE ad_status rows_in(row_state *rs, csr_out *o, size_t j0, size_t j1, const size_t L,
                            const int hashed)
{
    const ad_real *out = rs->t->outputs;
    ad_csr *J = o->J;
    hot h = rs->h;
    ad_status s = AD_OK;
    for (; j0 < j1 && s == AD_OK; j0 += L) {
        aim_ahead(&h, out, j0 + PREFETCH_AHEAD * L, J->rows, L);
        size_t start = J->nnz;
        ad_retry r = ad_retry_begin(rs->t, 0);
        int again;
        do {
            rs->scale = r.scale;
            J->nnz = start;
            resolve_group(rs, &h, out + j0, L, hashed);
            s = rs->status != AD_OK ? rs->status : append_rows(rs, &h, o, j0, r.pass, L, hashed);
            double sum = s != AD_OK ? 0.0 : sum_of(J->val + start, J->nnz - start);
            again = ad_retry_next(&r, NULL, 0, sum);  /* never exact: no marks */
        } while (again && s == AD_OK);
    }
    rs->h = h;
    return s;
}

static ad_status rows(row_state *rs, csr_out *o, size_t j0, size_t j1, size_t L)
{
    if (rs->hashed)
        return L == 1 ? rows_in(rs, o, j0, j1, 1, 1) : rows_in(rs, o, j0, j1, GROUP, 1);
    return L == 1 ? rows_in(rs, o, j0, j1, 1, 0) : rows_in(rs, o, j0, j1, GROUP, 0);
}

/* Room for a zeroed bitmap of `words` words; kept zero between calls. */
static int reserve_bits(uint64_t **bits, size_t *cap, size_t words)
{
    uint64_t *old = *bits;
    if (ad_reserve((void **)bits, cap, words, sizeof **bits) != AD_OK)
        return 0;
    if (*bits != old)
        memset(*bits, 0, *cap * sizeof **bits);
    return 1;
}

/* Dense arrays if they can be had (tags zeroed whenever they are new or
 * the epoch would wrap), else the hash map.  Dense, the columns' list has
 * room for all n inputs, which a group reaches once each at most, so that
 * pushing a column needs no test. */
static void choose_store(row_state *rs, ad_tape *t, uint32_t hi, size_t n, size_t groups,
                         size_t L)
{
    uint32_t *old = t->stamp;
    int dense = !force_hash &&  /* the dense store's cotangents */
                ad_tape_borrow_adjoints(t, ((size_t)hi + 1) * L) == AD_OK &&
                ad_reserve((void **)&t->stamp, &t->stamp_cap, (size_t)hi + 1, sizeof *t->stamp) == AD_OK;
    /* Each group takes the next epoch; new tags, or epochs that would wrap
     * within this call, start again from zero.  New tags are zeroed at
     * once, even if what follows fails: a later call trusts them. */
    if (t->stamp && (t->stamp != old || (size_t)t->epoch + groups >= (UINT32_MAX >> LANE_BITS))) {
        memset(t->stamp, 0, t->stamp_cap * sizeof *t->stamp);
        t->epoch = 0;
    }
    if (!dense || !reserve_bits(&t->bits, &t->bits_cap, ((size_t)hi >> 6) + 1) ||
        !reserve_bits(&t->summary, &t->summary_cap, ((size_t)hi >> 12) + 1) ||
        ad_reserve((void **)&rs->cols.p, &rs->cols.cap, n, sizeof *rs->cols.p) != AD_OK) {
        rs->hashed = 1;
        return;
    }
    rs->h.val = t->adj;
    rs->h.tag = t->stamp;
    rs->h.epoch = t->epoch;
    rs->h.bits = t->bits;
    rs->h.summary = t->summary;
}

static void finish_store(row_state *rs, ad_tape *t)
{
    if (!rs->hashed)
        t->epoch = rs->h.epoch;
    while (rs->h.pending)  /* a group cut short by an error */
        bits_pop(&rs->h);
    HASH_CLEAR(hh, rs->map);
    while (rs->blocks) {
        pool_block *b = rs->blocks;
        rs->blocks = b->next;
        ad_free(b);
    }
    ad_free(rs->heap.p);
    ad_free(rs->cols.p);
    ad_free(rs->found);
    ad_free(rs->h.win);
}

/* Rows go in groups of GROUP consecutive outputs, which share one
 * resolve: neighbouring outputs usually share most of what they reach, and
 * a record is then expanded once for the group, not once per row.  The
 * entries' arrays start at the size of the last call's (a workload usually
 * repeats itself), and end at most a quarter larger than needed. */
static ad_status build(ad_tape *t, size_t n, size_t m, ad_csr *J)
{
    row_state rs;
    memset(&rs, 0, sizeof rs);
    rs.t = t;
    rs.h.chunks = t->chunks;
    rs.h.first = t->first;
    rs.h.n = (uint32_t)n;
    rs.h.wlo = UINT32_MAX;
    rs.status = AD_OK;
    size_t L = m == 1 ? 1 : GROUP;
    choose_store(&rs, t, ad_outputs_top(t, m), n, (m + L - 1) / L, L);
    csr_out o = {J, 0};
    J->rows = m;
    J->cols = n;
    rs.h.win = ad_alloc(sizeof *rs.h.win);
    if (rs.h.win) {  /* clear, in either lane count's layout */
        memset(rs.h.win->lanes, 0, sizeof rs.h.win->lanes);
        for (size_t k = 0; k < WINDOW * GROUP; k++)
            rs.h.win->val[k] = -0.0;
    }
    ad_status s = rs.h.win && csr_start(&o, m, t->sparse_nnz) ? AD_OK : AD_ENOMEM;
    /* A last group of one row takes one lane: every lane of a group is then
     * a row's, and no lane is computed from unset values. */
    size_t full = m / L * L;
    if (s == AD_OK)
        s = rows(&rs, &o, 0, full, L);
    if (s == AD_OK && full < m)
        s = rows(&rs, &o, full, m, 1);
    if (s == AD_OK && o.cap - J->nnz > J->nnz / 4 && !csr_trim(&o))
        s = AD_ENOMEM;
    if (s == AD_OK) {
        J->row_ptr[m] = J->nnz;
        t->sparse_nnz = J->nnz;
    }
    finish_store(&rs, t);
    return s;
}

/* The arrays become the thread's spare ones (freeing those it had); their
 * sizes are the least J says they hold.  They are freed with the thread's
 * tapes (ad_thread_cleanup), or at once if that cannot be arranged. */
void ad_csr_free(ad_csr *J)
{
    if (!J)
        return;
    spare_free();
    spare = *J;
    memset(J, 0, sizeof *J);
    if (ad_thread_cleanup(spare_free) != AD_OK)
        spare_free();
}

ad_status ad_sparse_jacobian(ad_function f, void *ctx, size_t n, const double *x, size_t m,
                             double *y, ad_csr *J)
{
    ad_tape *t = ad_thread_tape();
    ad_status s = AD_EINVAL;
    if (J)
        memset(J, 0, sizeof *J);
    if (!f || (n && !x) || (m && !y) || !J)
        goto fail;
    s = ad_record(t, f, ctx, n, x, m, 0);
    if (s == AD_OK)
        s = build(t, n, m, J);
    if (s != AD_OK)
        goto fail;
    ad_read_outputs(t, m, y);
    return AD_OK;
fail:
    ad_csr_free(J);
    ad_fill_nan(y, m);
    return s;
}
