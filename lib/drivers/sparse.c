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
 *     the span it uses (sparse_window.h);
 *   - the store, for the inputs and anything below the window: dense by
 *     default, a value per ID valid where a tag says this group set it (so
 *     nothing is cleared between groups), and the pending IDs in a
 *     two-level bitmap whose highest bit a count of leading zeros finds.
 *     When its arrays (4 + 8 L bytes per ID) cannot be had, a uthash map
 *     takes over, with a max-heap for the order: memory that grows only
 *     with what one group reaches (sparse_pending.h).
 *
 * This file records the function, chooses the store and keeps the dense
 * store's arrays per tape; sparse_rows.c resolves the rows, sparse_csr.c
 * holds the CSR's arrays (sparse.h lists the parts). */
#include <string.h>

#include "recording.h"
#include "sparse.h"
#include "sparse_rows.h"
#include "status.h"

static _Thread_local int force_hash;

void ad_test_sparse_force_hash(int on)
{
    force_hash = on;
}

/* What a tape keeps for sparse Jacobians between calls (ad_tape_state):
 * the dense store's tags and bitmap, which stay valid from call to call,
 * and the size of the last result. */
typedef struct sparse_state {
    uint32_t *tag;             /* which row group last reached each ID, and its lanes */
    size_t tag_cap;
    uint32_t epoch;            /* the last row group's number */
    uint64_t *bits, *summary;  /* pending IDs; all zero between calls */
    size_t bits_cap, summary_cap;
    size_t nnz;                /* entries of the last sparse Jacobian */
} sparse_state;

static void state_free(void *state)
{
    sparse_state *st = state;
    ad_free(st->tag);
    ad_free(st->bits);
    ad_free(st->summary);
}

static size_t state_bytes(const void *state)
{
    const sparse_state *st = state;
    return st->tag_cap * sizeof *st->tag + (st->bits_cap + st->summary_cap) * sizeof *st->bits;
}

static const ad_tenant tenant = {sizeof(sparse_state), state_free, state_bytes, NULL};

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

/* The dense store's arrays for IDs 0..hi and `groups` groups of L lanes,
 * if they can be had (tags zeroed whenever they are new or the epoch would
 * wrap); else tag NULL, and the rows take the hash map.  st is NULL when
 * the tape could not give the state. */
static ad_sparse_dense choose_store(sparse_state *st, ad_tape *t, uint32_t hi, size_t groups,
                                    size_t L)
{
    ad_sparse_dense d = {NULL, NULL, NULL, NULL, 0};
    if (!st)
        return d;
    uint32_t *old = st->tag;
    int dense = !force_hash &&  /* the dense store's cotangents */
                ad_tape_borrow_adjoints(t, ((size_t)hi + 1) * L) == AD_OK &&
                ad_reserve((void **)&st->tag, &st->tag_cap, (size_t)hi + 1, sizeof *st->tag) == AD_OK;
    /* Each group takes the next epoch; new tags, or epochs that would wrap
     * within this call, start again from zero.  New tags are zeroed at
     * once, even if what follows fails: a later call trusts them. */
    if (st->tag && (st->tag != old || (size_t)st->epoch + groups >= (UINT32_MAX >> LANE_BITS))) {
        memset(st->tag, 0, st->tag_cap * sizeof *st->tag);
        st->epoch = 0;
    }
    if (!dense || !reserve_bits(&st->bits, &st->bits_cap, ((size_t)hi >> 6) + 1) ||
        !reserve_bits(&st->summary, &st->summary_cap, ((size_t)hi >> 12) + 1))
        return d;
    return (ad_sparse_dense){t->adj, st->tag, st->bits, st->summary, st->epoch};
}

/* J's arrays start at the size of the last call's result, and end at most
 * a quarter larger than needed. */
static ad_status build(ad_tape *t, size_t n, size_t m, ad_csr *J)
{
    sparse_state *st = ad_tape_state(t, &tenant);
    size_t L = ad_sparse_lanes(m);
    ad_sparse_dense d = choose_store(st, t, ad_outputs_top(t, m), (m + L - 1) / L, L);
    ad_csr_out o = {J, 0};
    J->rows = m;
    J->cols = n;
    ad_status s = ad_sparse_rows(t, &d, n, &o, st ? st->nnz : 0);
    if (d.tag)
        st->epoch = d.epoch;
    if (s == AD_OK && o.cap - J->nnz > J->nnz / 4 && !ad_csr_trim(&o))
        s = AD_ENOMEM;
    if (s == AD_OK) {
        J->row_ptr[m] = J->nnz;
        if (st)
            st->nnz = J->nnz;
    }
    return s;
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
