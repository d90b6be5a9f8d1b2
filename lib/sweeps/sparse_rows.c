/* dualrev: the staged resolve of a sparse Jacobian's rows (dual-numbers
 * paper, sect. 6; docs/jacobians.md).
 *
 * Rows go in groups of GROUP consecutive outputs, one lane each, which
 * share one resolve: neighbouring outputs usually reach much the same
 * records, and each is then expanded once for the group.  A group stages
 * its outputs, then expands its pending set from the highest ID down, so
 * each record is applied once, after all its contributions arrived: first
 * the window (sparse_window.h), position by position, then the store
 * (sparse_pending.h).  The inputs it reached are its rows' columns, which
 * are sorted and written into the CSR.
 *
 * The kernel is written once, its functions inlined with the lane count L
 * and `hashed` (the store) constant: rows() picks one of four copies. */
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "seeded.h"
#include "sparse_pending.h"
#include "sparse_window.h"

/* What the row kernel reads on every step, in a struct of its own that is
 * only ever a local of the kernel, so the compiler can keep it in registers:
 * as fields of the state below, each store into the arrays (which could
 * alias them, for all it knows) would reload them. */
typedef struct hot {
    records rec;
    uint32_t n;                /* inputs: IDs 1..n */
    dense d;                   /* the dense store (unused when hashed) */
    window_at w;
} hot;

/* Columns a group sorts in an array of its own, and by the last order. */
#define SORT_SHORT 32

typedef struct row_state {
    ad_tape *t;                /* swept, and its fault written (ad_seeded) */
    hot h;                     /* between runs of groups (rows_in) */
    int hashed;
    hash_store hs;
    ids cols;                  /* input IDs reached by the group */
    const uint32_t *sorted;    /* cols in ascending order: cols, or short_sorted */
    uint32_t short_sorted[SORT_SHORT];
    unsigned char order[SORT_SHORT]; /* the last short sort's: cols[order[0]], ... ascend */
    size_t order_len;          /* its length (0 for none) */
    cell *found;               /* hashed store: the columns' cells, looked up once (append_rows) */
    size_t found_cap;
    double scale;              /* the group's seed (seeded.h, "Scaled seeds") */
    ad_status status;
} row_state;

/* ---- staging and expanding ---- */

/* Where the group reached id: its cotangents and lanes (v NULL if none). */
AD_INLINE cell reached(row_state *rs, const hot *h, uint32_t id, const size_t L, const int hashed)
{
    if (id >= h->w.wlo)
        return window_cell(&h->w, id, L);
    return store_cell(&rs->hs, &h->d, id, L, hashed);
}

/* Stage a call of record (or input) id with cotangents z * w, from lanes
 * M.  A failure is kept in rs->status: the walk goes on, and the group
 * reports it at its end. */
AD_INLINE void stage(row_state *rs, hot *h, uint32_t id, const double *z, double w, unsigned M,
                     const size_t L, const int hashed)
{
    if (id >= h->w.wlo) {
        window_stage(&h->w, id - h->w.wlo, z, w, M, L);
        return;
    }
    if (!id)  /* a constant */
        return;
    int fresh;
    uint32_t *lanes;
    double *v = find_cell(&rs->hs, &h->d, id, &fresh, &lanes, L, hashed);
    if (!v) {
        rs->status = AD_ENOMEM;
        return;
    }
    lanes_add(v, z, w, M, L);
    *lanes |= M;
    if (!fresh)
        return;
    if (id <= h->n) {
        if (!hashed)  /* room for every input (use_dense) */
            rs->cols.p[rs->cols.len++] = id;
        else if (!ids_push(&rs->cols, id))
            rs->status = AD_ENOMEM;
    } else if (!store_pend(&rs->hs, &h->d, id, hashed)) {
        rs->status = AD_ENOMEM;
    }
}

/* A block's outputs sit above its header, so when the header comes up
 * every output's cotangents are complete.  Its rule takes one lane at a
 * time.  Each argument reached is staged, even with a zero cotangent: the
 * structure of a rule is every output on every argument, unless its kind
 * says which arguments the reached outputs depend on (block.h,
 * ad_block_pullback_reached). */
AD_INLINE void expand_block(row_state *rs, hot *h, const ad__record *r, uint32_t id, unsigned M,
                            const size_t L, const int hashed)
{
    ad_block *b = ad_block_of(rs->t, r);
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
        const double *xbar = ad_block_pullback_reached(rs->t, b, ybar);
        double e[GROUP] = {0};
        for (size_t k = 0; k < nx; k++) {
            if (!args[k])
                continue;
            e[l] = xbar[k];
            stage(rs, h, ad_block_arg(b, ids, k), e, 1.0,
                  1u << l, L, hashed);
        }
    }
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
            const ad__record *s = record_at(&h->rec, id - k);
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
    const ad__record *r = h->w.wrec + k;
    double z[GROUP];
    for (size_t l = 0; l < L; l++)
        z[l] = h->w.win->val[k * L + l];
    if (AD__LIKELY(r->b < AD__ID_END)) {
        /* read before the clear, which could alias the record (pair.h) */
        const ad__record c = *r;
        window_clear(&h->w, k, L);
        stage(rs, h, c.a, z, c.wa, M, L, hashed);
        stage(rs, h, c.b, z, c.wb, M, L, hashed);
        return;
    }
    if (r->b != AD__OUT)
        window_clear(&h->w, k, L);
    else
        h->w.wkept = 1;
    expand(rs, h, h->w.wlo + (uint32_t)k, r, z, M, L, hashed);
}

/* ---- a group's columns, sorted ---- */

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

/* ---- a group ---- */

/* Resolves the L rows of outputs out[0..L) together, lane b for out[b];
 * leaves the input IDs the group reached, sorted, in rs->sorted, with their
 * cells findable through reached(). */
AD_INLINE void resolve_group(row_state *rs, hot *hp, const ad_real *out, const size_t L,
                             const int hashed)
{
    hot h = *hp;  /* a copy of the caller's local, which inlining folds away */
    rs->cols.len = 0;
    store_next_group(&rs->hs, &h.d, hashed);
    h.d.below = group_top(out, L);
    window_open(&h.w, &h.rec, h.d.below);
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
    if (h.w.wlo != UINT32_MAX)
        for (size_t k = h.w.whi - h.w.wlo + 1; k-- > h.w.wmin;) {
            unsigned M = h.w.win->lanes[k];
            window_prefetch(&h.w, k);
            if (M)
                window_expand(rs, &h, k, M, L, hashed);
        }
    while (store_has_pending(&rs->hs, &h.d, hashed) && rs->status == AD_OK) {
        uint32_t id = store_pop(&rs->hs, &h.d, hashed);
        int fresh;
        uint32_t *lanes;
        double *v = find_cell(&rs->hs, &h.d, id, &fresh, &lanes, L, hashed);
        expand_cell(rs, &h, id, record_at(&h.rec, id), v, *lanes & LANE_MASK, L, hashed);
    }
    if (h.w.wkept)  /* the block rules have run */
        for (size_t k = h.w.wmin; k <= h.w.whi - h.w.wlo; k++)
            window_clear(&h.w, k, L);
    *hp = h;
    sort_ids(rs);
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
 * A later pass of the group (seeded.h, ad_retry) reaches the same columns
 * and replaces only the values that are not finite. */
_Static_assert(GROUP == 2, "append_rows writes two rows at a time");

AD_INLINE ad_status append_rows(row_state *rs, const hot *h, ad_csr_out *o, size_t j0, int later,
                                const size_t L, const int hashed)
{
    ad_csr *J = o->J;
    const uint32_t *ids = rs->sorted, *tag = h->d.tag;
    const double *cells = h->d.val;
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
    if (!ad_csr_room(o, at1 + count1))
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

/* ---- runs of groups ---- */

/* The sum of v[0..n): not finite if one is not (seeded.h, ad_unscale). */
static double sum_of(const double *v, size_t n)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += v[i];
    return sum;
}

/* One group of L rows from j0 on, for ad_seeded: resolved with the seed
 * scale r->scale and written from J's entry `start` on (again there on a
 * later pass, which reads only the rows that are not finite). */
typedef struct group {
    row_state *rs;
    hot *h;
    ad_csr_out *o;
    size_t j0, start, L;
    int hashed;
    ad_status s;
} group;

AD_INLINE double group_in(group *g, const ad_retry *r, const size_t L, const int hashed)
{
    row_state *rs = g->rs;
    ad_csr *J = g->o->J;
    rs->scale = r->scale;
    J->nnz = g->start;
    resolve_group(rs, g->h, rs->t->outputs + g->j0, L, hashed);
    g->s = rs->status != AD_OK ? rs->status : append_rows(rs, g->h, g->o, g->j0, r->pass, L, hashed);
    return g->s != AD_OK ? 0.0 : sum_of(J->val + g->start, J->nnz - g->start);
}

/* Inlined into rows_in, whose constants L and hashed it then sees. */
AD_INLINE double group_pass(ad_tape *t, const ad_retry *r, void *ctx)
{
    group *g = ctx;
    (void)t;
    if (g->hashed)
        return g->L == 1 ? group_in(g, r, 1, 1) : group_in(g, r, GROUP, 1);
    return g->L == 1 ? group_in(g, r, 1, 0) : group_in(g, r, GROUP, 0);
}

/* Rows j0 .. j1 (a multiple of L apart), L to a group, each group resolved
 * and written; the kernel's state is a local of this loop, not copied in
 * and out for each group.  Each group is a seeded sweep (seeded.h): seeded
 * scaled, and again unscaled if that overflowed and left a value that is
 * not finite; the resolve is exact already. */
AD_INLINE ad_status rows_in(row_state *rs, ad_csr_out *o, size_t j0, size_t j1, const size_t L,
                            const int hashed)
{
    hot h = rs->h;
    group g = {rs, &h, o, j0, 0, L, hashed, AD_OK};
    for (; g.j0 < j1 && g.s == AD_OK; g.j0 += L) {
        window_aim(&h.w, &h.rec, rs->t->outputs, g.j0 + PREFETCH_AHEAD * L, o->J->rows, L);
        g.start = o->J->nnz;
        /* never exact: no marks, no top; fails only with a block's fault */
        ad_status f = ad_seeded(rs->t, 0, AD_SEEDED_OVER, group_pass, &g, NULL);
        if (g.s == AD_OK)
            g.s = f;
    }
    rs->h = h;
    return g.s;
}

static ad_status rows(row_state *rs, ad_csr_out *o, size_t j0, size_t j1, size_t L)
{
    if (rs->hashed)
        return L == 1 ? rows_in(rs, o, j0, j1, 1, 1) : rows_in(rs, o, j0, j1, GROUP, 1);
    return L == 1 ? rows_in(rs, o, j0, j1, 1, 0) : rows_in(rs, o, j0, j1, GROUP, 0);
}

/* ---- a call ---- */

/* The dense store, if sparse.c had its arrays and the columns' list can
 * have room for all n inputs, which a group reaches once each at most, so
 * that pushing a column needs no test. */
static int use_dense(row_state *rs, const ad_sparse_dense *d, size_t n)
{
    if (!d->tag || ad_reserve((void **)&rs->cols.p, &rs->cols.cap, n, sizeof *rs->cols.p) != AD_OK)
        return 0;
    rs->h.d.val = d->val;
    rs->h.d.tag = d->tag;
    rs->h.d.epoch = d->epoch;
    rs->h.d.bits = d->bits;
    rs->h.d.summary = d->summary;
    return 1;
}

/* J is started after the sweep's own arrays (the columns' list, the
 * window) are allocated, so that the allocator sees the call's requests
 * in the order the sweep was tuned with (benchmarks/README.md, BA). */
ad_status ad_sparse_rows(ad_tape *t, ad_sparse_dense *d, size_t n, ad_csr_out *o, size_t want)
{
    row_state rs;
    memset(&rs, 0, sizeof rs);
    rs.t = t;
    rs.h.rec = (records){t->chunks, t->first};
    rs.h.n = (uint32_t)n;
    rs.h.w.wlo = UINT32_MAX;
    rs.status = AD_OK;
    rs.hashed = !use_dense(&rs, d, n);
    rs.h.w.win = window_new();
    /* A last group of one row takes one lane: every lane of a group is then
     * a row's, and no lane is computed from unset values. */
    size_t m = o->J->rows, L = ad_sparse_lanes(m), full = m / L * L;
    ad_status s = rs.h.w.win && ad_csr_start(o, m, want) ? AD_OK : AD_ENOMEM;
    if (s == AD_OK)
        s = rows(&rs, o, 0, full, L);
    if (s == AD_OK && full < m)
        s = rows(&rs, o, full, m, 1);
    if (!rs.hashed)
        d->epoch = rs.h.d.epoch;
    store_finish(&rs.hs, &rs.h.d);
    ad_free(rs.cols.p);
    ad_free(rs.found);
    ad_free(rs.h.w.win);
    return s;
}
