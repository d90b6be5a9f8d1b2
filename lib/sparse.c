/* dualrev: sparse Jacobians by staged resolve (dual-numbers paper, sect. 6).
 *
 * For each output row: a pending set maps record IDs to accumulated
 * cotangents (the paper's Map Int, where calls to the same record merge:
 * linear factoring), and the highest pending ID is expanded next, so each
 * record is applied once per row, after all its contributions arrived.  A
 * row costs time in proportion to the records it reaches, not to the tape.
 * Inputs reached are the row's nonzeros: the structure comes from the tape.
 *
 * The pending set is dense by default: a value per ID, valid where a stamp
 * says it was set in this row, so nothing is cleared between rows, and the
 * pending record IDs in a two-level bitmap, whose highest bit is found with
 * a count of leading zeros.  When the dense arrays (12 bytes per ID) cannot
 * be had, a uthash map takes over, with a max-heap for the order: memory
 * that grows only with what one row reaches. */
#include <stdlib.h>
#include <string.h>

#include "block.h"

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

typedef struct pend_entry {
    uint32_t id;
    double val;
    UT_hash_handle hh;
} pend_entry;

/* Entries come from blocks that live for one call: a row drops its map
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

typedef struct row_state {
    const ad_tape *t;
    uint32_t n;
    /* dense mode */
    double *val;
    uint32_t *stamp;
    uint32_t epoch;
    uint64_t *bits, *summary;  /* pending records: bit id; bit id / 64 */
    size_t pending;
    uint32_t below;            /* every pending ID is <= below */
    /* hash mode */
    int hashed;
    pend_entry *map;
    pool_block *blocks;
    size_t used;           /* entries used in blocks (the head) */
    ids heap;              /* pending record IDs, a max-heap */
    ids cols;              /* input IDs reached by the row */
    ad_status status;
} row_state;

static int ids_grow(ids *v)
{
    {
        size_t cap = v->cap ? 2 * v->cap : 64;
        uint32_t *p = ad_alloc(cap * sizeof *p);
        if (!p)
            return 0;
        if (v->len)
            memcpy(p, v->p, v->len * sizeof *p);
        ad_free(v->p);
        v->p = p;
        v->cap = cap;
    }
    return 1;
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

/* ---- the dense store's order: a two-level bitmap of pending IDs ---- */

static inline void bits_set(row_state *rs, uint32_t id)
{
    rs->bits[id >> 6] |= (uint64_t)1 << (id & 63);
    rs->summary[id >> 12] |= (uint64_t)1 << ((id >> 6) & 63);
    rs->pending++;
}

/* Bits 0..k of a word (k < 64). */
static inline uint64_t up_to(unsigned k)
{
    return k == 63 ? ~(uint64_t)0 : ((uint64_t)1 << (k + 1)) - 1;
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
static uint32_t bits_pop(row_state *rs)
{
    size_t w = rs->below >> 6;
    uint64_t word = rs->bits[w] & up_to(rs->below & 63);
    if (!word) {
        size_t s = w >> 6;
        uint64_t sw = rs->summary[s] & (((uint64_t)1 << (w & 63)) - 1);
        while (!sw)
            sw = rs->summary[--s];
        w = (s << 6) + top_bit(sw);
        word = rs->bits[w];
    }
    uint32_t id = (uint32_t)((w << 6) + top_bit(word));
    rs->bits[w] = word & ~((uint64_t)1 << (id & 63));
    if (!rs->bits[w])
        rs->summary[w >> 6] &= ~((uint64_t)1 << (w & 63));
    rs->pending--;
    rs->below = id - 1;
    return id;
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
    hash_oom = 0;
    HASH_ADD(hh, rs->map, id, sizeof(uint32_t), e);
    return hash_oom ? NULL : e;
}

/* The cotangent slot of id in this row, and whether it is new.  The row
 * functions below are inlined with `hashed` a constant, one copy per store. */
AD_INLINE double *slot(row_state *rs, uint32_t id, int *fresh, const int hashed)
{
    if (!hashed) {
        *fresh = rs->stamp[id] != rs->epoch;
        rs->stamp[id] = rs->epoch;
        return &rs->val[id];
    }
    pend_entry *e;
    HASH_FIND(hh, rs->map, &id, sizeof(uint32_t), e);
    *fresh = !e;
    if (!e && !(e = hash_new(rs, id)))
        return NULL;
    return &e->val;
}

/* Stage a call of record (or input) id with cotangent c. */
AD_INLINE void stage(row_state *rs, uint32_t id, double c, const int hashed)
{
    if (!id)  /* a constant */
        return;
    int fresh;
    double *v = slot(rs, id, &fresh, hashed);
    if (!v) {
        rs->status = AD_ENOMEM;
        return;
    }
    if (!fresh) {
        *v += c;
        return;
    }
    *v = c;
    if (id <= rs->n) {
        if (!ids_push(&rs->cols, id))
            rs->status = AD_ENOMEM;
    } else if (!hashed) {
        bits_set(rs, id);
    } else if (ids_push(&rs->heap, id)) {
        heap_up(rs->heap.p, rs->heap.len - 1);
    } else {
        rs->status = AD_ENOMEM;
    }
}

/* The row's cotangent slot of id, or NULL where the row has not reached
 * it (slot() without making one). */
AD_INLINE double *reached(row_state *rs, uint32_t id, const int hashed)
{
    if (!hashed)
        return rs->stamp[id] == rs->epoch ? &rs->val[id] : NULL;
    pend_entry *e;
    HASH_FIND(hh, rs->map, &id, sizeof(uint32_t), e);
    return e ? &e->val : NULL;
}

/* A block's outputs sit above its header, so when the header comes up
 * every output's cotangent is complete.  Each argument is staged, even
 * with a zero cotangent: the structure of a rule is every output on every
 * argument, unless its kind says which arguments the reached outputs
 * depend on. */
AD_INLINE void expand_block(row_state *rs, const ad__record *r, uint32_t id, const int hashed)
{
    const ad_block *b = ad_block_of(rs->t, r);
    double *ybar = ad_block_ybar(rs->t);
    unsigned char *outs = ad_block_flags(rs->t), *args = outs + b->nout;
    for (uint32_t j = 0; j < b->nout; j++) {
        const double *v = reached(rs, id + 1 + j, hashed);
        ybar[j] = v ? *v : 0.0;
        outs[j] = v != NULL;
    }
    const double *xbar = ad_block_pullback(rs->t, b, ybar);
    const uint32_t *ids = ad_block_ids(b);
    size_t nx = (size_t)b->nargs + b->run_len;
    memset(args, !b->kind->reach, nx);
    if (b->kind->reach)
        b->kind->reach(b, outs, args);
    for (uint32_t k = 0; k < b->nargs; k++)
        if (args[k])
            stage(rs, ids[k], xbar[k], hashed);
    for (uint32_t k = 0; k < b->run_len; k++)
        if (args[b->nargs + k])
            stage(rs, b->run + k, xbar[b->nargs + k], hashed);
}

AD_INLINE void expand(row_state *rs, uint32_t id, double z, const int hashed)
{
    const ad__record *r = ad_tape_record(rs->t, id);
    if (AD__LIKELY(r->b < AD__ID_END)) {
        stage(rs, r->a, z * r->wa, hashed);
        stage(rs, r->b, z * r->wb, hashed);
    } else if (r->b == AD__NARY) {
        for (uint32_t k = 1; k <= r->a; k++) {
            const ad__record *s = ad_tape_record(rs->t, id - k);
            stage(rs, s->a, z * s->wa, hashed);
            stage(rs, s->b, z * s->wb, hashed);
        }
    } else if (r->b == AD__OUT) {
        stage(rs, id - r->a, 0.0, hashed);  /* the block's header */
    } else {
        expand_block(rs, r, id, hashed);
    }
}

static int by_id(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Rows are usually short: insertion sort, qsort for long ones. */
static void sort_ids(ids *v)
{
    if (v->len > 32) {
        qsort(v->p, v->len, sizeof *v->p, by_id);
        return;
    }
    for (size_t i = 1; i < v->len; i++) {
        uint32_t x = v->p[i];
        size_t j = i;
        for (; j && v->p[j - 1] > x; j--)
            v->p[j] = v->p[j - 1];
        v->p[j] = x;
    }
}

static void start_row(row_state *rs)
{
    rs->heap.len = rs->cols.len = 0;
    if (!rs->hashed) {
        rs->epoch++;
        return;
    }
    HASH_CLEAR(hh, rs->map);
    /* Keep the newest block for the next row; free the others. */
    while (rs->blocks && rs->blocks->next) {
        pool_block *b = rs->blocks->next;
        rs->blocks->next = b->next;
        ad_free(b);
    }
    rs->used = 0;
}

AD_INLINE void resolve_row_in(row_state *rs, uint32_t out, const int hashed)
{
    start_row(rs);
    rs->below = out;
    stage(rs, out, 1.0, hashed);
    while ((hashed ? rs->heap.len : rs->pending) && rs->status == AD_OK) {
        uint32_t id = hashed ? heap_pop(&rs->heap) : bits_pop(rs);
        int fresh;
        double z = *slot(rs, id, &fresh, hashed);  /* pending, so present */
        expand(rs, id, z, hashed);
    }
    sort_ids(&rs->cols);
}

/* Resolves row `out` (an output's ID); leaves its input IDs, sorted, in
 * rs->cols with their values findable through slot(). */
static void resolve_row(row_state *rs, uint32_t out)
{
    if (rs->hashed)
        resolve_row_in(rs, out, 1);
    else
        resolve_row_in(rs, out, 0);
}

/* ---- the CSR being built ---- */

static int csr_room(ad_csr *J, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 1;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    size_t *col = ad_alloc(c * sizeof *col);
    double *val = ad_alloc(c * sizeof *val);
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
    *cap = c;
    return 1;
}

static ad_status append_row(row_state *rs, ad_csr *J, size_t *cap)
{
    if (!csr_room(J, cap, J->nnz + rs->cols.len))
        return AD_ENOMEM;
    for (size_t k = 0; k < rs->cols.len; k++) {
        uint32_t id = rs->cols.p[k];
        int fresh;
        J->col[J->nnz] = id - 1;
        J->val[J->nnz] = *slot(rs, id, &fresh, rs->hashed);
        J->nnz++;
    }
    return AD_OK;
}

/* Dense arrays if they can be had (stamps zeroed whenever they are new or
 * the epoch wraps), else the hash map. */
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

static void choose_store(row_state *rs, ad_tape *t, uint32_t hi, size_t rows)
{
    uint32_t *old = t->stamp;
    int dense = !force_hash && ad_tape_reserve_adjoints(t, hi) == AD_OK &&
                ad_reserve((void **)&t->stamp, &t->stamp_cap, (size_t)hi + 1, sizeof *t->stamp) == AD_OK;
    /* Each row takes the next epoch; new stamps, or epochs that would wrap
     * within this call, start again from zero.  New stamps are zeroed at
     * once, even if what follows fails: a later call trusts them. */
    if (t->stamp && (t->stamp != old || t->epoch >= UINT32_MAX - rows)) {
        memset(t->stamp, 0, t->stamp_cap * sizeof *t->stamp);
        t->epoch = 0;
    }
    if (!dense || !reserve_bits(&t->bits, &t->bits_cap, ((size_t)hi >> 6) + 1) ||
        !reserve_bits(&t->summary, &t->summary_cap, ((size_t)hi >> 12) + 1)) {
        rs->hashed = 1;
        return;
    }
    rs->val = t->adj;
    rs->stamp = t->stamp;
    rs->epoch = t->epoch;
    rs->bits = t->bits;
    rs->summary = t->summary;
}

static void finish_store(row_state *rs, ad_tape *t)
{
    if (!rs->hashed)
        t->epoch = rs->epoch;
    while (rs->pending)  /* a row cut short by an error */
        bits_pop(rs);
    HASH_CLEAR(hh, rs->map);
    while (rs->blocks) {
        pool_block *b = rs->blocks;
        rs->blocks = b->next;
        ad_free(b);
    }
    ad_free(rs->heap.p);
    ad_free(rs->cols.p);
}

static ad_status build(ad_tape *t, size_t n, size_t m, ad_csr *J)
{
    row_state rs;
    memset(&rs, 0, sizeof rs);
    rs.t = t;
    rs.n = (uint32_t)n;
    rs.status = AD_OK;
    choose_store(&rs, t, ad_outputs_top(t, m), m);
    size_t cap = 0;
    J->rows = m;
    J->cols = n;
    J->row_ptr = ad_alloc((m + 1) * sizeof *J->row_ptr);
    ad_status s = J->row_ptr ? AD_OK : AD_ENOMEM;
    for (size_t j = 0; j < m && s == AD_OK; j++) {
        J->row_ptr[j] = J->nnz;
        resolve_row(&rs, t->outputs[j].id);
        s = rs.status != AD_OK ? rs.status : append_row(&rs, J, &cap);
    }
    if (s == AD_OK)
        J->row_ptr[m] = J->nnz;
    finish_store(&rs, t);
    return s;
}

void ad_csr_free(ad_csr *J)
{
    if (!J)
        return;
    ad_free(J->row_ptr);
    ad_free(J->col);
    ad_free(J->val);
    memset(J, 0, sizeof *J);
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
