/* dualrev: recorded matrices, for many products with one ad_real matrix.
 *
 * Included by dualrev.h.  ad_matvec_rr stores a partial per matrix entry in
 * every product: 24 bytes per entry each time.  A recorded matrix is put on
 * the tape once, its entries given consecutive IDs and its values kept
 * beside the tape; a product with it then stores only its vector, and its
 * reverse rule forms the matrix's cotangent (ybar x^T) and the vector's
 * (A^T ybar) from the stored values.  Strictly upper (lower) entries that
 * are all constant zeros are found when the matrix is recorded or wrapped,
 * and every product skips them, so a triangular factor costs what its
 * entries do.  They are structural zeros, as in BLAS trmv: 0 x Inf there
 * adds nothing, where a full product would give NaN.
 *
 * The handle works in shared source too: ad_mat_make on a double matrix
 * wraps it, and ad_mat_vec with double vectors returns doubles. */
#ifndef DUALREV_MATRIX_H
#define DUALREV_MATRIX_H

AD__EXTERN_C_BEGIN

typedef struct ad_mat {
    size_t rows, cols;
    const double *a;     /* a wrapped double matrix, row-major */
    const ad_real *ar;   /* a recorded one: the caller's entries */
    uint32_t id;         /* entry (i, j) has ID id + i * cols + j; 0 if not recorded */
    int shape;           /* AD__FULL, AD__LOWER or AD__UPPER: entries outside are zero */
    size_t at;           /* where its values are kept (internal) */
    uint64_t recording;  /* which recording it belongs to (internal) */
} ad_mat;

#define AD__FULL 0
#define AD__LOWER 1
#define AD__UPPER 2

/* Records the m x n row-major matrix A.  The handle belongs to the current
 * recording, like an ad_real; A must not change while it is in use.
 * Outside a recording (or after the recording failed) it only refers to A.
 * Returns AD_OK, AD_EINVAL (NULL A with m n > 0, or NULL M), AD_ENOMEM or
 * AD_ERANGE; the recording keeps the error and its caller reports it. */
AD_API ad_status ad_mat_record(size_t m, size_t n, const ad_real *A, ad_mat *M);
AD_API ad_status ad_mat_wrap(size_t m, size_t n, const double *A, ad_mat *M);

/* y = M x, one record per output; y must not overlap x (either may be
 * NULL when empty).  x may be constant (a double array);
 * with a wrapped (double) matrix and an ad_real x this is ad_matvec.  A
 * handle from another recording makes the recording fail with
 * AD_EFOREIGN; y is then NaN. */
AD_API void ad_mat_vec_rr(const ad_mat *M, const ad_real *x, ad_real *y);
AD_API void ad_mat_vec_rd(const ad_mat *M, const double *x, ad_real *y);
AD_API void ad__mat_vec_values(const ad_mat *M, const double *x, double *y);

/* *s = |M x|^2 = sum_j (M x)_j^2, one record: M x stays off the tape (the
 * block keeps it, 8 m bytes), where ad_mat_vec and ad_sqnorm take a record
 * per row and one more per two rows.  Value and gradient are bitwise those
 * of that pair of calls.  A Mahalanobis distance |L^-1 (x - mu)|^2, or a
 * least-squares residual, is one.  Errors as for ad_mat_vec; s is then NaN.
 * ad_mat_sqnorm_d is the plain form (shared source). */
AD_API void ad_mat_sqnorm_rr(const ad_mat *M, const ad_real *x, ad_real *s);
AD_API void ad_mat_sqnorm_rd(const ad_mat *M, const double *x, ad_real *s);
AD_API double ad__mat_sqnorm_values(const ad_mat *M, const double *x);

/* Columns [*lo, *hi) of row j inside the shape. */
static inline void ad__mat_row_range(int shape, size_t j, size_t n, size_t *lo, size_t *hi)
{
    *lo = shape == AD__UPPER ? (j < n ? j : n) : 0;
    *hi = shape == AD__LOWER ? (j + 1 < n ? j + 1 : n) : n;
}

/* y[j - j0] = (A x)_j for rows j0 <= j < m over the shape, A row-major
 * with n columns.  Rows go eight at a time, so that their sums run side by
 * side instead of as one chain of dependent adds; each row still adds its
 * terms in column order, so every y is bitwise the one-row-at-a-time sum. */
#define AD__MAT_GROUP ((size_t)8)
static inline void ad__mat_rows_from(size_t j0, size_t m, size_t n, int shape, const double *A,
                                     const double *x, double *y)
{
    size_t j = j0;
    for (; j + AD__MAT_GROUP <= m; j += AD__MAT_GROUP) {
        size_t lo[AD__MAT_GROUP], hi[AD__MAT_GROUP], clo = 0, chi = n;
        for (size_t r = 0; r < AD__MAT_GROUP; r++) {
            ad__mat_row_range(shape, j + r, n, &lo[r], &hi[r]);
            clo = lo[r] > clo ? lo[r] : clo;
            chi = hi[r] < chi ? hi[r] : chi;
        }
        if (clo > chi)
            break;  /* no common stretch: one row at a time below */
        double s[AD__MAT_GROUP];
        for (size_t r = 0; r < AD__MAT_GROUP; r++) {
            s[r] = 0.0;
            for (size_t l = lo[r]; l < clo; l++)
                s[r] += A[(j + r) * n + l] * x[l];
        }
        const double *a = A + j * n;
        for (size_t l = clo; l < chi; l++) {
            double xl = x[l];
            for (size_t r = 0; r < AD__MAT_GROUP; r++)
                s[r] += a[r * n + l] * xl;
        }
        for (size_t r = 0; r < AD__MAT_GROUP; r++) {
            for (size_t l = chi; l < hi[r]; l++)
                s[r] += A[(j + r) * n + l] * x[l];
            y[j + r - j0] = s[r];
        }
    }
    for (; j < m; j++) {
        size_t lo, hi;
        ad__mat_row_range(shape, j, n, &lo, &hi);
        double v = 0.0;
        for (size_t l = lo; l < hi; l++)
            v += A[j * n + l] * x[l];
        y[j - j0] = v;
    }
}

static inline void ad__mat_rows(size_t m, size_t n, int shape, const double *A, const double *x,
                                double *y)
{
    ad__mat_rows_from(0, m, n, shape, A, x, y);
}

/* The plain product, inline like the other double forms: it is the
 * baseline of shared-source code. */
static inline void ad_mat_vec_d(const ad_mat *M, const double *x, double *y)
{
    if (!M || !M->a) {  /* NULL, or a recorded matrix read as plain values */
        ad__mat_vec_values(M, x, y);
        return;
    }
    ad__mat_rows(M->rows, M->cols, M->shape, M->a, x, y);
}

/* Eight rows of y at a time, as ad_mat_vec_d computes them, then their
 * squares in order: bitwise ad_sqnorm of ad_mat_vec's y. */
static inline void ad_mat_sqnorm_d(const ad_mat *M, const double *x, double *s)
{
    if (!M || !M->a) {
        *s = ad__mat_sqnorm_values(M, x);
        return;
    }
    double v = 0.0, y[AD__MAT_GROUP];
    for (size_t j = 0; j < M->rows; j += AD__MAT_GROUP) {
        size_t end = M->rows - j < AD__MAT_GROUP ? M->rows : j + AD__MAT_GROUP;
        ad__mat_rows_from(j, end, M->cols, M->shape, M->a, x, y);
        for (size_t r = 0; r < end - j; r++)
            v += y[r] * y[r];
    }
    *s = v;
}

AD__EXTERN_C_END

#endif
