/* dualrev internal: what every block whose outputs are a matrix's entries
 * shares (matrix.c).  A recorded matrix (ad_mat_record), a matrix-matrix
 * product (matrix_mul.c) and an element-wise map (matrix_map.c) each start
 * with a `matrix`: its m x n outputs, with consecutive IDs from `first`,
 * are the entries of a handle that products (ad_mat_vec, ad_mat_sqnorm,
 * ad_mat_mul) and maps take as a run of arguments, reading the values the
 * block keeps at `vals` (row-major) and, when it keeps them, at `colv` (by
 * columns). */
#ifndef DUALREV_MAT_BLOCK_H
#define DUALREV_MAT_BLOCK_H

#include "block.h"

#define AD_MAT_NONE SIZE_MAX
#define AD_MAT_MAGIC 0xA7  /* a block that starts with a matrix */

typedef struct ad_matrix_block {
    ad_block base;
    size_t rows, cols;
    uint32_t first;   /* ID of entry (0, 0) */
    int16_t shape;
    uint8_t derived;  /* a product's or map's entries (not a copy of an ad_real array) */
    uint8_t magic;    /* AD_MAT_MAGIC */
    size_t last;      /* offset of the latest matrix-vector product with it, or AD_MAT_NONE */
    /* then: double values[rows * cols], row-major; a recorded matrix's by
     * columns too, a derived block's own data (ad_mat_block_tail) */
} ad_matrix_block;

static inline const double *ad_mat_block_values(const ad_matrix_block *B)
{
    return (const double *)(const void *)(B + 1);
}

/* Byte offset of what a derived block keeps after its values. */
static inline size_t ad_mat_block_tail(size_t m, size_t n)
{
    return sizeof(ad_matrix_block) + m * n * sizeof(double);
}

/* The block M refers to, if it belongs to the recording t; else NULL. */
AD_HIDDEN const ad_matrix_block *ad_mat_block_of(const ad_tape *t, const ad_mat *M);

/* Entry k of M's values, for computations without a record (a wrapped
 * matrix, or one not on the tape). */
AD_HIDDEN double ad_mat_entry(const ad_mat *M, size_t k);

/* The matrix-vector products' parts that wait for the block B (one-lane
 * reverse sweeps, matrix.c), added to the cotangents of B's entries
 * (adj + (hid + 1) L + lane, stride L).  A derived block's reverse rule
 * calls it first. */
AD_HIDDEN void ad_mat_flush(ad_tape *t, const ad_matrix_block *B, uint32_t hid, double *adj,
                            size_t L, size_t lane);

/* Fills the head of a derived block (its kind set by the caller). */
static inline void ad_mat_block_init(ad_matrix_block *B, size_t m, size_t n)
{
    B->rows = m;
    B->cols = n;
    B->first = 0;
    B->shape = AD__FULL;
    B->derived = 1;
    B->magic = AD_MAT_MAGIC;
    B->last = AD_MAT_NONE;
}

/* The result handle of a derived block recorded at `at` with its first
 * output `first`: its entries are out[], whose IDs are the outputs'. */
static inline void ad_mat_result(ad_tape *t, size_t at, uint32_t first, size_t m, size_t n,
                                 const ad_real *out, ad_mat *C)
{
    C->rows = m;
    C->cols = n;
    C->a = NULL;
    C->ar = out;
    C->id = first;
    C->shape = AD__FULL;
    C->at = at;
    C->recording = t->serial;
}

/* A handle of constant entries out[] (no record), or after an error (NaN). */
static inline void ad_mat_constant(size_t m, size_t n, const ad_real *out, ad_mat *C)
{
    C->rows = m;
    C->cols = n;
    C->a = NULL;
    C->ar = out;
    C->id = 0;
    C->shape = AD__FULL;
    C->at = 0;
    C->recording = 0;
}

#endif
