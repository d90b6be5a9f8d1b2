/* dualrev internal: the staged resolve of a sparse Jacobian's rows
 * (sparse_rows.c), for its driver (drivers/sparse.c), which records,
 * chooses the store and builds J.  Included by sparse_rows.c alone, so
 * that the sweep can inline them with constant lane counts and store:
 *   sparse_cell.h    one ID's cotangents, a lane per row of the group
 *   sparse_pending.h the store of pending IDs: dense, or a uthash map
 *   sparse_window.h  the window of IDs just below a group's outputs */
#ifndef DUALREV_SPARSE_ROWS_H
#define DUALREV_SPARSE_ROWS_H

#include "csr.h"
#include "tape.h"

/* Rows in a group, one lane each.  Two, because wider groups did worse on
 * BA: rows that share little pay for lanes they do not use, and a mask on
 * every step.  A group's lanes fit in a dense tag's low bits, beside the
 * group's number (its epoch). */
#define GROUP 2
#define LANE_BITS 2
_Static_assert(GROUP <= LANE_BITS, "a tag holds one bit per lane");

/* The lanes of a call's groups: a lone row needs no second lane. */
static inline size_t ad_sparse_lanes(size_t m)
{
    return m == 1 ? 1 : GROUP;
}

/* The dense store's arrays for one call, which sparse.c keeps per tape;
 * tag NULL for the hashed store.  sparse_pending.h says what they hold. */
typedef struct ad_sparse_dense {
    double *val;              /* L cotangents per ID (the tape's adjoints) */
    uint32_t *tag;            /* per ID: epoch << LANE_BITS | lanes */
    uint64_t *bits, *summary; /* zero, and left zero */
    uint32_t epoch;           /* the last group's number; the call's last on return */
} ad_sparse_dense;

/* Rows 0..J->rows of the tape's outputs into o, columns the n inputs, with
 * the dense store d (hashed if d->tag is NULL or the dense store's own
 * room cannot be had).  It starts J (ad_csr_start, room for `want`
 * entries) once its own arrays are had; J->row_ptr[rows] is left to the
 * caller. */
AD_HIDDEN ad_status ad_sparse_rows(ad_tape *t, ad_sparse_dense *d, size_t n, ad_csr_out *o,
                                   size_t want);

#endif
