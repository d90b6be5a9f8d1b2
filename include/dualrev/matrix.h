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
AD_NODISCARD
AD_API ad_status ad_mat_record(size_t m, size_t n, const ad_real *A, ad_mat *M);
AD_NODISCARD
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

/* ---- matrix-matrix products and element-wise maps ----
 *
 * Each takes recorded or wrapped handles and makes a new handle C, whose
 * entries are one block's outputs: consecutive IDs, read as ad_real in
 * out[], m x n row-major, which the caller owns (it must outlive C's use and
 * not change).  C is a recorded matrix as ad_mat_record makes one: ad_mat_vec,
 * ad_mat_sqnorm, ad_mat_mul and ad_mat_map take it, and out[] goes on into
 * scalar code.  Where no operand is on the tape (wrapped matrices, constant
 * entries, no recording) nothing is recorded: out[] holds constants.  The
 * _d forms compute the same values on doubles (shared source): out[] is
 * double and C wraps it.  Each returns AD_OK, AD_EINVAL (NULL handle or
 * out with entries, sizes that do not match), AD_EFOREIGN (an operand or
 * bias of another recording), AD_ENOMEM, AD_ERANGE; on error out[] is NaN,
 * C a constant NaN handle, and the recording keeps the error, which its
 * driver reports.  In a recorded program (ad_program_record) an active
 * result is refused with AD_ENOTSUP, as ad_mat_vec's is. */

/* C = A B + bias 1^T: A m x k, B k x n, bias m entries (NULL: none), C
 * m x n.  Entry (i, j) is (sum_l A(i, l) B(l, j), added from 0 in l order)
 * + bias[i]: bitwise what the scalar loop computes.  Both operands are
 * taken as full (a triangle's zeros are multiplied).  _rr: an ad_real
 * bias (may be constant), _rd: a double one. */
AD_NODISCARD
AD_API ad_status ad_mat_mul_rr(const ad_mat *A, const ad_mat *B, const ad_real *bias,
                               ad_real *out, ad_mat *C);
AD_NODISCARD
AD_API ad_status ad_mat_mul_rd(const ad_mat *A, const ad_mat *B, const double *bias,
                               ad_real *out, ad_mat *C);
AD_NODISCARD
AD_API ad_status ad_mat_mul_d(const ad_mat *A, const ad_mat *B, const double *bias,
                              double *out, ad_mat *C);

/* The library's functions for ad_mat_map.  RELU is fmax(x, 0) with fmax's
 * conventions (partial 1/2 at 0, 0 at NaN); LOGISTIC is 1 / (1 + e^-x)
 * (computed without overflow); SQUARE is x * x.  The others are the
 * elementary operations of the same name, with their values and partials
 * (docs/conventions.md). */
typedef enum ad_map_op {
    AD_MAP_TANH, AD_MAP_EXP, AD_MAP_LOG, AD_MAP_SQRT, AD_MAP_SIN, AD_MAP_COS,
    AD_MAP_LOGISTIC, AD_MAP_RELU, AD_MAP_SQUARE, AD_MAP_COUNT
} ad_map_op;

/* C = op(A) entry by entry: one block whose outputs each have one partial
 * (a multiply-add per entry in the reverse sweep).  AD_EINVAL also for an
 * op outside ad_map_op. */
AD_NODISCARD
AD_API ad_status ad_mat_map_r(ad_map_op op, const ad_mat *A, ad_real *out, ad_mat *C);
AD_NODISCARD
AD_API ad_status ad_mat_map_d(ad_map_op op, const ad_mat *A, double *out, ad_mat *C);

/* A user's scalar function f with its first and second derivatives, for
 * ad_mat_map_fn.  They are called while the map is recorded, never in a
 * sweep: fn and ctx need to live only during the call.  d2f may be NULL:
 * second-order drivers (ad_hvp, ad_hessian, ad_sparse_hessian) then return
 * AD_ENOTSUP. */
typedef struct ad_map_fn {
    double (*f)(double x, void *ctx);
    double (*df)(double x, void *ctx);
    double (*d2f)(double x, void *ctx);
} ad_map_fn;

AD_NODISCARD
AD_API ad_status ad_mat_map_fn_r(const ad_map_fn *fn, void *ctx, const ad_mat *A,
                                 ad_real *out, ad_mat *C);
AD_NODISCARD
AD_API ad_status ad_mat_map_fn_d(const ad_map_fn *fn, void *ctx, const ad_mat *A,
                                 double *out, ad_mat *C);

AD__EXTERN_C_END

#endif
