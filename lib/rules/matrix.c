/* dualrev: recorded matrices and their products (include/dualrev/matrix.h).
 *
 * Two block kinds.  A matrix block copies the m x n entries of an ad_real
 * matrix to m n consecutive IDs (its outputs) and keeps their values.  A
 * product block y = M x keeps x (values, and IDs when x is active) and
 * takes M's entries as a run of arguments, so it stores O(n), not O(m n);
 * its sweeps work in place on the cotangent or tangent array, row by row,
 * over the entries inside M's shape only.  A norm block s = |M x|^2 is a
 * product with one output: it keeps y = M x beside x, and its rules are the
 * product's with ybar = 2 sbar y. */
#include <math.h>
#include <string.h>

#include "block.h"
#include "check.h"
#include "mat_block.h"
#include "pair.h"
#include "seeded.h"
#include "status.h"

#define NONE SIZE_MAX

/* A recorded matrix's block (mat_block.h): then double values[rows * cols],
 * row-major, the same by columns; uint32_t ids[rows * cols].  Products'
 * and maps' blocks start the same way (matrix_mul.c, matrix_map.c). */
typedef ad_matrix_block matrix;

typedef struct product {
    ad_block base;
    size_t mat;      /* offset of the matrix block */
    size_t prev;     /* the product with the same matrix before this one, or NONE */
    int waiting;     /* ybar below waits for the matrix block (prod_reverse); read with prev */
    size_t rows, cols;
    uint32_t entry0; /* the matrix's first entry ID (= base.run) */
    int shape;
    int x_active;
    int norm;        /* one output, |M x|^2 */
    /* then: double x[cols], ybar[rows], y[rows] if norm; uint32_t ids[cols] if x_active */
} product;

static const double *mat_values(const matrix *A)
{
    return ad_mat_block_values(A);
}

/* The values column by column, for computing products (columns_product),
 * or NULL where the block keeps none (a derived block's). */
static const double *mat_columns(const matrix *A)
{
    return A->derived ? NULL : mat_values(A) + A->rows * A->cols;
}

static const double *prod_x(const product *p)
{
    return (const double *)(const void *)(p + 1);
}

static double *prod_ybar(const product *p)
{
    return (double *)(void *)(p + 1) + p->cols;
}

/* A norm block's y = M x. */
static const double *prod_y(const product *p)
{
    return prod_ybar(p) + p->rows;
}

/* Row j's ybar from the outputs' cotangents out[0..): for a norm, 2 sbar y_j
 * as the square norm's record would add it to y_j's cotangent (from 0). */
static inline double row_ybar(const product *p, const double *out, size_t stride, size_t j)
{
    return p->norm ? 0.0 + out[0] * (2.0 * prod_y(p)[j]) : out[j * stride];
}

static const double *prod_a(const ad_tape *t, const product *p)
{
    return mat_values((const matrix *)ad_block_at(t, p->mat));
}

#define row_range ad__mat_row_range

/* ---- the matrix block: its entries' cotangents pass to A's IDs ---- */

static void mat_vjp(ad_tape *t, ad_block *b, const double *ybar, double *xbar)
{
    (void)t;
    memcpy(xbar, ybar, (size_t)b->nout * sizeof *xbar);
}

static void mat_jvp(ad_tape *t, ad_block *b, const double *xdot, double *ydot)
{
    (void)t;
    memcpy(ydot, xdot, (size_t)b->nout * sizeof *ydot);
}

/* The entries' cotangents and their tangents pass to A's IDs. */
static void mat_second(ad_tape *t, ad_block *b, uint32_t hid, const double *tan,
                       double *adj, double *adjd, size_t L, size_t lane, int first)
{
    (void)t;
    (void)tan;
    const uint32_t *ids = ad_block_ids(b);
    for (uint32_t k = 0; k < b->nout; k++) {
        size_t e = (size_t)hid + 1 + k;
        if (first)
            adj[ids[k]] += adj[e];
        adjd[(size_t)ids[k] * L + lane] += adjd[e * L + lane];
    }
}

/* Short rows and columns (a 10 x 10 factor, say) spend more in the set-up
 * of the compiler's vectorised loops than in them: these go by pairs of
 * doubles written out (pair.h), then one more.  Each element gets the same
 * operations in the same order as one at a time.
 *
 * y[0..len) += c[0..len) s */
static inline void axpy_short(double *restrict y, const double *restrict c, double s, size_t len)
{
    size_t j = 0;
#ifdef AD_PAIRS
    ad_pair_u sv = {s, s};
    for (; j + 2 <= len; j += 2)
        *(ad_pair_u *)(y + j) += *(const ad_pair_u *)(c + j) * sv;
    if (j < len)
        y[j] += c[j] * s;
#else
    for (; j < len; j++)
        y[j] += c[j] * s;
#endif
}

/* y[0..len) += c0[0..len) s0, then += c1[0..len) s1 */
static inline void axpy2_short(double *restrict y, const double *restrict c0,
                               const double *restrict c1, double s0, double s1, size_t len)
{
    size_t j = 0;
#ifdef AD_PAIRS
    ad_pair_u v0 = {s0, s0}, v1 = {s1, s1};
    for (; j + 2 <= len; j += 2)
        *(ad_pair_u *)(y + j) = *(ad_pair_u *)(y + j) + *(const ad_pair_u *)(c0 + j) * v0 +
                                *(const ad_pair_u *)(c1 + j) * v1;
#endif
    for (; j < len; j++)
        y[j] = y[j] + c0[j] * s0 + c1[j] * s1;
}

/* row[l] += yb[0] x[0][l], then yb[1] x[1][l], ... for four products,
 * l in [lo, hi). */
static inline void add4_short(double *restrict row, const double *const *x, const double *yb,
                              size_t lo, size_t hi)
{
    size_t l = lo;
#ifdef AD_PAIRS
    ad_pair_u y0 = {yb[0], yb[0]}, y1 = {yb[1], yb[1]}, y2 = {yb[2], yb[2]}, y3 = {yb[3], yb[3]};
    for (; l + 2 <= hi; l += 2)
        *(ad_pair_u *)(row + l) = *(ad_pair_u *)(row + l) +
                                  *(const ad_pair_u *)(x[0] + l) * y0 +
                                  *(const ad_pair_u *)(x[1] + l) * y1 +
                                  *(const ad_pair_u *)(x[2] + l) * y2 +
                                  *(const ad_pair_u *)(x[3] + l) * y3;
#endif
    for (; l < hi; l++)
        row[l] = row[l] + yb[0] * x[0][l] + yb[1] * x[1][l] + yb[2] * x[2][l] + yb[3] * x[3][l];
}

/* abar += ybar x^T of products p[0..np), in that order: each entry adds
 * their terms one after another, as np passes would, but is loaded and
 * stored once. */
#define PRODUCTS 4

static void add_outer(const matrix *B, double *abar, const product *const *p, size_t np)
{
    size_t n = B->cols, lo, hi;
    const double *x[PRODUCTS];
    double yb[PRODUCTS];
    for (size_t k = 0; k < np; k++)
        x[k] = prod_x(p[k]);
    for (size_t j = 0; j < B->rows; j++) {
        double *row = abar + j * n;
        row_range(B->shape, j, n, &lo, &hi);
        for (size_t k = 0; k < np; k++)
            yb[k] = prod_ybar(p[k])[j];
        if (np == PRODUCTS) {
            add4_short(row, x, yb, lo, hi);
            continue;
        }
        for (size_t k = 0; k < np && lo < hi; k++)
            axpy_short(row + lo, x[k] + lo, yb[k], hi - lo);
    }
}

/* The products' waiting parts (prod_reverse), latest first, as they
 * would have been added in place; then the entries' cotangents pass to
 * A's IDs. */
void ad_mat_flush(ad_tape *t, const matrix *B, uint32_t hid, double *adj, size_t L,
                  size_t lane)
{
    double *abar = adj + (size_t)(hid + 1) * L + lane;
    for (size_t at = B->last; L == 1 && at != NONE;) {
        const product *p[PRODUCTS];
        size_t np = 0;
        while (np < PRODUCTS && at != NONE) {
            product *q = (product *)ad_block_at(t, at);
            at = q->prev;
            if (q->waiting) {  /* else above this sweep's top: not reached */
                q->waiting = 0;
                p[np++] = q;
            }
        }
        add_outer(B, abar, p, np);
    }
}

static void mat_reverse(ad_tape *t, ad_block *b, uint32_t hid, double *adj, size_t L,
                        size_t lane)
{
    const matrix *B = (const matrix *)b;
    double *abar = adj + (size_t)(hid + 1) * L + lane;
    ad_mat_flush(t, B, hid, adj, L, lane);
    const uint32_t *ids = ad_block_ids(b);
    for (uint32_t k = 0; k < b->nout; k++)
        adj[(size_t)ids[k] * L + lane] += abar[(size_t)k * L];
}

/* Entry k is A's entry k. */
static void mat_reach(const ad_block *b, const unsigned char *outs, unsigned char *args)
{
    memcpy(args, outs, b->nout);
}

/* Entry o is A's entry o. */
static void mat_partials(ad_tape *t, ad_block *b, uint32_t o,
                         void (*each)(void *cx, size_t arg, double d), void *cx)
{
    (void)t;
    (void)b;
    each(cx, o, 1.0);
}

static const ad_block_kind matrix_kind = {
    .name = "matrix", .vjp = mat_vjp, .jvp = mat_jvp, .reverse = mat_reverse, .second = mat_second,
    .reach = mat_reach, .partials = mat_partials};

/* ---- the product block ---- */

/* Over the arguments in order: x (if active), then the matrix entries. */
static void prod_vjp(ad_tape *t, ad_block *b, const double *ybar, double *xbar)
{
    const product *p = (const product *)b;
    const double *A = prod_a(t, p), *x = prod_x(p);
    size_t n = p->cols, lo, hi;
    double *abar = xbar + (p->x_active ? n : 0);
    for (size_t j = 0; j < p->rows; j++) {
        double yb = row_ybar(p, ybar, 1, j);
        row_range(p->shape, j, n, &lo, &hi);
        for (size_t l = lo; l < hi; l++)
            abar[j * n + l] = yb * x[l];
        if (p->x_active)
            for (size_t l = lo; l < hi; l++)
                xbar[l] += yb * A[j * n + l];
    }
}

/* In a one-lane sweep the matrix's part, ybar x^T, waits: ybar is kept
 * here, and the matrix block, which every product sits above, adds up its
 * products' parts when the sweep reaches it, with its cotangents in cache
 * (matrix_reverse).  Added in place per product, a matrix used by many
 * products between others would stream its cotangents from memory each
 * time.  x's part cannot wait: x may be computed after the matrix.  Every
 * one-lane sweep that reaches a product goes on down to its matrix (the
 * walker ends at the first record), so what waits is always taken by the
 * same sweep. */
static void prod_reverse(ad_tape *t, ad_block *b, uint32_t hid, double *adj, size_t L,
                         size_t lane)
{
    const product *p = (const product *)b;
    const double *A = prod_a(t, p), *x = prod_x(p);
    size_t n = p->cols, lo, hi;
    double *xbar = ad_block_work(t);
    int later = L == 1;
    if (later) {
        product *kept = (product *)(void *)b;  /* the block area is not const */
        double *ybar = prod_ybar(p);
        for (size_t j = 0; j < p->rows; j++)
            ybar[j] = row_ybar(p, adj + hid + 1, 1, j);
        kept->waiting = 1;
        if (!p->x_active)
            return;  /* nothing else to do now */
    }
    if (p->x_active)
        memset(xbar, 0, n * sizeof *xbar);
    for (size_t j = 0; j < p->rows; j++) {
        double yb = row_ybar(p, adj + (size_t)(hid + 1) * L + lane, L, j);
        double *abar = adj + ((size_t)p->entry0 + j * n) * L + lane;
        row_range(p->shape, j, n, &lo, &hi);
        if (!later)
            for (size_t l = lo; l < hi; l++)
                abar[l * L] += yb * x[l];
        if (p->x_active)
            for (size_t l = lo; l < hi; l++)
                xbar[l] += yb * A[j * n + l];
    }
    if (p->x_active) {
        const uint32_t *ids = ad_block_ids(b);
        for (size_t l = 0; l < n; l++)
            adj[(size_t)ids[l] * L + lane] += xbar[l];
    }
}

/* x's tangents into xdot (zeros where x is constant). */
static void gather_xdot(const product *p, const double *tan, size_t L, size_t lane, double *xdot)
{
    const uint32_t *ids = ad_block_ids(&p->base);
    for (size_t l = 0; l < p->cols; l++)
        xdot[l] = ids[l] ? tan[(size_t)ids[l] * L + lane] : 0.0;
}

/* The tangent of y_j: A_j's tangents times x, and A_j times x's.  Plain
 * products first; only a NaN, rare, can come from a partial (an entry of
 * x or of A) against a tangent that is zero by structure -- a constant
 * entry's, a constant x's, or in an exact sweep one not reached
 * (ad_tangent_zero) -- and then the row is taken again without those
 * terms, as the scalar sweep leaves out the sink's. */
static double row_tangent(const ad_tape *t, const product *p, const double *A, const double *tan,
                          size_t L, size_t lane, size_t j, const double *xdot)
{
    const double *x = prod_x(p), *adot = tan + ((size_t)p->entry0 + j * p->cols) * L + lane;
    size_t n = p->cols, lo, hi;
    double s = 0.0;
    row_range(p->shape, j, n, &lo, &hi);
    for (size_t l = lo; l < hi; l++)
        s += adot[l * L] * x[l];
    if (p->x_active)
        for (size_t l = lo; l < hi; l++)
            s += A[j * n + l] * xdot[l];
    if (AD__LIKELY(s == s))
        return s;
    /* a recorded matrix's entries stand for A's IDs; a derived one's are
     * its own outputs */
    const matrix *B = (const matrix *)ad_block_at(t, p->mat);
    const uint32_t *eid = B->derived ? NULL : ad_block_ids(&B->base) + j * n;
    const uint32_t *xid = p->x_active ? ad_block_ids(&p->base) : NULL;
    s = 0.0;
    for (size_t l = lo; l < hi; l++)
        if (!ad_tangent_zero(t, eid ? eid[l] : p->entry0 + (uint32_t)(j * n + l)))
            s += adot[l * L] * x[l];
    for (size_t l = lo; xid && l < hi; l++)
        if (!ad_tangent_zero(t, xid[l]))
            s += A[j * n + l] * xdot[l];
    return s;
}

static void prod_forward(ad_tape *t, ad_block *b, uint32_t hid, double *tan, size_t L,
                         size_t lane)
{
    const product *p = (const product *)b;
    const double *A = prod_a(t, p);
    double *xdot = ad_block_work(t), sdot = 0.0;
    if (p->x_active)
        gather_xdot(p, tan, L, lane, xdot);
    for (size_t j = 0; j < p->rows; j++) {
        double yd = row_tangent(t, p, A, tan, L, lane, j, xdot);
        if (p->norm)
            sdot += 2.0 * prod_y(p)[j] * yd;
        else
            tan[(size_t)(hid + 1 + j) * L + lane] = yd;
    }
    if (p->norm)
        tan[(size_t)(hid + 1) * L + lane] = sdot;
}

/* y = A x is bilinear: Abar += ybar x^T, xbar += A^T ybar, and their
 * tangents add the tangents of x and of A: ybar' x^T + ybar x'^T,
 * A^T ybar' + A'^T ybar.  For a norm, ybar = 2 sbar y, whose tangent is
 * 2 sbar' y + 2 sbar y'. */
static void prod_second(ad_tape *t, ad_block *b, uint32_t hid, const double *tan,
                        double *adj, double *adjd, size_t L, size_t lane, int first)
{
    const product *p = (const product *)b;
    const double *A = prod_a(t, p), *x = prod_x(p);
    const uint32_t *ids = p->x_active ? ad_block_ids(b) : NULL;
    size_t n = p->cols, lo, hi;
    /* the work array holds 3 n (product_work) */
    double *xbar = ad_block_work(t), *xbard = ad_block_work(t) + n, *xdot = ad_block_work(t) + 2 * n;
    if (ids) {
        memset(ad_block_work(t), 0, 2 * n * sizeof *xbar);
        gather_xdot(p, tan, L, lane, xdot);
    }
    size_t out = (size_t)hid + 1;
    for (size_t j = 0; j < p->rows; j++) {
        size_t e = (size_t)p->entry0 + j * n;
        double yb, ybd;
        if (p->norm) {
            double y = prod_y(p)[j], yd = row_tangent(t, p, A, tan, L, lane, j, xdot);
            yb = row_ybar(p, adj + out, 1, j);
            ybd = adjd[out * L + lane] * (2.0 * y) + adj[out] * (2.0 * yd);
        } else {
            yb = adj[out + j];
            ybd = adjd[(out + j) * L + lane];
        }
        row_range(p->shape, j, n, &lo, &hi);
        for (size_t l = lo; l < hi; l++) {
            double xd = ids && ids[l] ? xdot[l] : 0.0;
            if (first)
                adj[e + l] += yb * x[l];
            adjd[(e + l) * L + lane] += ybd * x[l] + yb * xd;
        }
        for (size_t l = lo; ids && l < hi; l++) {
            xbar[l] += A[j * n + l] * yb;
            xbard[l] += A[j * n + l] * ybd + tan[(e + l) * L + lane] * yb;
        }
    }
    for (size_t l = 0; ids && l < n; l++) {
        if (first)
            adj[ids[l]] += xbar[l];
        adjd[(size_t)ids[l] * L + lane] += xbard[l];
    }
}

/* Output j depends on row j's entries inside the shape, and on x there. */
static void prod_reach(const ad_block *b, const unsigned char *outs, unsigned char *args)
{
    const product *p = (const product *)b;
    size_t n = p->cols, lo, hi;
    unsigned char *entries = args + (p->x_active ? n : 0);
    for (size_t j = 0; j < p->rows; j++) {
        if (!outs[p->norm ? 0 : j])
            continue;
        row_range(p->shape, j, n, &lo, &hi);
        for (size_t l = lo; l < hi; l++) {
            entries[j * n + l] = 1;
            if (p->x_active)
                args[l] = 1;
        }
    }
}

/* ---- a product's partials and second partials, for edge pushing ----
 *
 * Arguments: x_l is argument l when x is active, entry (j, l) argument
 * xs + j n + l after them (xs = n, or 0).  y_j = sum_l M_jl x_l over the
 * shape: dy_j/dx_l = M_jl, dy_j/dM_jl = x_l, d2y_j/dM_jl dx_l = 1.  A norm
 * s = sum_j y_j^2: ds/dx_l = 2 sum_j y_j M_jl, ds/dM_jl = 2 y_j x_l, and
 * d2s/dx_l dx_k = 2 sum_j M_jl M_jk, d2s/dM_jl dM_jk = 2 x_l x_k,
 * d2s/dM_jl dx_k = 2 (M_jk x_l + y_j [l = k]). */
static void prod_partials(ad_tape *t, ad_block *b, uint32_t o,
                          void (*each)(void *cx, size_t arg, double d), void *cx)
{
    const product *p = (const product *)b;
    const double *A = prod_a(t, p), *x = prod_x(p);
    size_t n = p->cols, xs = p->x_active ? n : 0, lo, hi;
    if (!p->norm) {
        row_range(p->shape, o, n, &lo, &hi);
        for (size_t l = lo; xs && l < hi; l++)
            each(cx, l, A[o * n + l]);
        for (size_t l = lo; l < hi; l++)
            each(cx, xs + o * n + l, x[l]);
        return;
    }
    const double *y = prod_y(p);
    for (size_t l = 0; xs && l < n; l++) {
        double d = 0.0;
        for (size_t j = 0; j < p->rows; j++) {
            row_range(p->shape, j, n, &lo, &hi);
            if (l >= lo && l < hi)
                d += y[j] * A[j * n + l];
        }
        each(cx, l, 2.0 * d);
    }
    for (size_t j = 0; j < p->rows; j++) {
        row_range(p->shape, j, n, &lo, &hi);
        for (size_t l = lo; l < hi; l++)
            each(cx, xs + j * n + l, 2.0 * y[j] * x[l]);
    }
}

static void prod_curvature(ad_tape *t, ad_block *b, const double *ybar,
                           void (*each2)(void *cx, size_t a, size_t b, double v), void *cx)
{
    const product *p = (const product *)b;
    const double *A = prod_a(t, p), *x = prod_x(p);
    size_t n = p->cols, xs = p->x_active ? n : 0, lo, hi;
    if (!p->norm) {
        for (size_t j = 0; xs && j < p->rows; j++) {
            row_range(p->shape, j, n, &lo, &hi);
            for (size_t l = lo; l < hi; l++)
                each2(cx, l, xs + j * n + l, ybar[j]);
        }
        return;
    }
    double s2 = 2.0 * ybar[0];
    const double *y = prod_y(p);
    for (size_t j = 0; j < p->rows; j++) {
        row_range(p->shape, j, n, &lo, &hi);
        for (size_t l = lo; l < hi; l++) {
            for (size_t k = l; k < hi; k++)
                each2(cx, xs + j * n + l, xs + j * n + k, s2 * x[l] * x[k]);
            for (size_t k = lo; xs && k < hi; k++)
                each2(cx, k, xs + j * n + l, s2 * (A[j * n + k] * x[l] + (k == l ? y[j] : 0.0)));
        }
    }
    for (size_t l = 0; xs && l < n; l++)
        for (size_t k = l; k < n; k++) {
            double d = 0.0;
            for (size_t j = 0; j < p->rows; j++) {
                row_range(p->shape, j, n, &lo, &hi);
                if (l >= lo && k < hi)
                    d += A[j * n + l] * A[j * n + k];
            }
            each2(cx, l, k, s2 * d);
        }
}

static const ad_block_kind product_kind = {
    .name = "matrix-vector product", .vjp = prod_vjp, .reverse = prod_reverse,
    .forward = prod_forward, .second = prod_second, .reach = prod_reach,
    .partials = prod_partials, .curvature = prod_curvature};

/* ---- recording ---- */

/* LOWER if every entry above the diagonal is a constant zero, UPPER if
 * every one below is, else FULL.  zero(k) says whether entry k is one. */
#define SHAPE_OF(m, n, zero)                                       \
    do {                                                           \
        int lower_ = 1, upper_ = 1;                                \
        for (size_t j_ = 0; j_ < (m); j_++)                        \
            for (size_t l_ = 0; l_ < (n); l_++) {                  \
                if (l_ > j_ && !zero(j_ * (n) + l_))               \
                    lower_ = 0;                                    \
                if (l_ < j_ && !zero(j_ * (n) + l_))               \
                    upper_ = 0;                                    \
            }                                                      \
        shape = lower_ ? AD__LOWER : upper_ ? AD__UPPER : AD__FULL; \
    } while (0)

static int shape_r(size_t m, size_t n, const ad_real *A)
{
    int shape;
#define ZERO_R(k) (A[k].id == 0 && A[k].v == 0.0)
    SHAPE_OF(m, n, ZERO_R);
    return shape;
}

static int shape_d(size_t m, size_t n, const double *A)
{
    int shape;
#define ZERO_D(k) (A[k] == 0.0)
    SHAPE_OF(m, n, ZERO_D);
    return shape;
}

/* A new handle for an m x n matrix, or AD_EINVAL (NULL M, or no entries
 * though there are some to have). */
static ad_status new_handle(size_t m, size_t n, const void *entries, ad_mat *M)
{
    if (!M || (m && n && !entries))
        return ad_fail_recording(AD_EINVAL);
    memset(M, 0, sizeof *M);
    M->rows = m;
    M->cols = n;
    return AD_OK;
}

ad_status ad_mat_wrap(size_t m, size_t n, const double *A, ad_mat *M)
{
    ad_status s = new_handle(m, n, A, M);
    if (s != AD_OK)
        return s;
    M->a = A;
    M->shape = shape_d(m, n, A);
    return AD_OK;
}

ad_status ad_mat_record(size_t m, size_t n, const ad_real *A, ad_mat *M)
{
    ad_status s = new_handle(m, n, A, M);
    if (s != AD_OK)
        return s;
    M->ar = A;
    if (!ad_size_fits(m, n))
        return ad_fail_recording(AD_ERANGE);
    size_t mn = m * n;
    M->shape = shape_r(m, n, A);
    ad_tape *t = ad_recording();
    if (!t || !ad_any_active(mn, A))
        return AD_OK;  /* not recorded: products read A */
    if (!ad_reals_mine(t, mn, A))
        return AD_EFOREIGN;
    if (mn >= AD__ID_END)
        return ad_fail_recording(AD_ERANGE);
    size_t size = sizeof(matrix) + mn * (2 * sizeof(double) + sizeof(uint32_t));
    size_t at = ad_block_new(t, size, (uint32_t)mn, (uint32_t)mn, 0);
    if (at == SIZE_MAX)
        return AD_ENOMEM;
    matrix *B = (matrix *)ad_block_at(t, at);
    B->base.kind = &matrix_kind;
    B->base.ids = sizeof(matrix) + 2 * mn * sizeof(double);
    B->rows = m;
    B->cols = n;
    B->magic = AD_MAT_MAGIC;
    B->derived = 0;
    double *v = (double *)(void *)(B + 1), *c = v + mn;
    uint32_t *ids = (uint32_t *)(void *)((char *)B + B->base.ids);
    for (size_t k = 0; k < mn; k++) {
        v[k] = A[k].v;
        c[k % n * m + k / n] = A[k].v;
        ids[k] = A[k].id;
    }
    uint32_t first = ad_block_record(t, at);
    if (!first)
        return t->status;
    B = (matrix *)ad_block_at(t, at);
    B->first = first;
    B->shape = (int16_t)M->shape;
    B->last = NONE;
    M->id = first;
    M->at = at;
    M->recording = t->serial;
    return AD_OK;
}

/* The recorded matrix M refers to, if it belongs to the recording t: a
 * matrix block, or a product's or map's (mat_block.h). */
const matrix *ad_mat_block_of(const ad_tape *t, const ad_mat *M)
{
    if (M->recording != t->serial || M->at > t->blocks_len ||
        t->blocks_len - M->at < sizeof(matrix))
        return NULL;
    const matrix *B = (const matrix *)ad_block_at(t, M->at);
    if (B->magic != AD_MAT_MAGIC || (B->base.kind == &matrix_kind) == B->derived ||
        B->first != M->id || B->rows != M->rows || B->cols != M->cols || B->shape != M->shape)
        return NULL;
    return B;
}

#define matrix_of ad_mat_block_of

/* Entry k of M's values, for the products computed without a record. */
double ad_mat_entry(const ad_mat *M, size_t k)
{
    return M->a ? M->a[k] : M->ar[k].v;
}

#define entry ad_mat_entry

/* Rows [*lo, *hi) of column l inside the shape (ad__mat_row_range turned
 * over); empty (lo >= hi) for a column past a lower triangle's rows. */
static inline void column_range(int shape, size_t l, size_t m, size_t *lo, size_t *hi)
{
    *lo = shape == AD__LOWER ? l : 0;
    *hi = shape == AD__UPPER ? (l + 1 < m ? l + 1 : m) : m;
}

/* y[lo..hi) += c[lo..hi) s, nothing when lo >= hi. */
static inline void one_column(double *restrict y, const double *restrict c, double s, size_t lo,
                              size_t hi)
{
    if (lo < hi)
        axpy_short(y + lo, c + lo, s, hi - lo);
}

/* y = A x from A's columns, added column after column, so that each y[j]
 * adds its terms in column order as ad__mat_rows does and comes out
 * bitwise the same; but down contiguous columns, which vectorise. */
static void columns_product(size_t m, size_t n, int shape, const double *restrict cm,
                            const double *restrict x, double *restrict y)
{
    memset(y, 0, m * sizeof *y);
    size_t l = 0;
    /* two columns at a time: rows in both take both terms in one pass,
     * in column order; the rows of one only, that one's */
    for (; l + 2 <= n; l += 2) {
        size_t lo0, hi0, lo1, hi1;
        column_range(shape, l, m, &lo0, &hi0);
        column_range(shape, l + 1, m, &lo1, &hi1);
        size_t clo = lo0 > lo1 ? lo0 : lo1, chi = hi0 < hi1 ? hi0 : hi1;
        const double *c0 = cm + l * m, *c1 = c0 + m;
        if (clo >= chi) {  /* no rows in common */
            one_column(y, c0, x[l], lo0, hi0);
            one_column(y, c1, x[l + 1], lo1, hi1);
            continue;
        }
        one_column(y, c0, x[l], lo0, clo);
        one_column(y, c0, x[l], chi, hi0);
        axpy2_short(y + clo, c0 + clo, c1 + clo, x[l], x[l + 1], chi - clo);
        one_column(y, c1, x[l + 1], lo1, clo);
        one_column(y, c1, x[l + 1], chi, hi1);
    }
    if (l < n) {
        size_t lo, hi;
        column_range(shape, l, m, &lo, &hi);
        one_column(y, cm + l * m, x[l], lo, hi);
    }
}

/* y = M x recorded as one product block, x ad_real (xr) or double (xd);
 * or, with norm, a norm block (y = M x is the block's own, and its one
 * output, s, goes to *y).  Second-order sweeps use 3 n of the work array
 * (prod_second), which the block's own count can fall short of. */
static void record_product(ad_tape *t, const ad_mat *M, const matrix *B, const ad_real *xr,
                           const double *xd, ad_real *y, int norm)
{
    size_t m = M->rows, n = M->cols, mn = m * n, nout = norm ? 1 : m;
    int x_active = xr && ad_any_active(n, xr);
    if (x_active && !ad_reals_mine(t, n, xr)) {
        ad_fill_nan_reals(y, norm ? 1 : m);
        return;
    }
    size_t values = n + m + (norm ? m : 0);
    size_t size = sizeof(product) + values * sizeof(double) + (x_active ? n * sizeof(uint32_t) : 0);
    size_t at = ad_block_new(t, size, (uint32_t)nout, x_active ? (uint32_t)n : 0, (uint32_t)mn);
    if (at != SIZE_MAX && !ad_block_reserve(t, 3 * n))
        at = SIZE_MAX;
    if (at == SIZE_MAX) {
        ad_fill_nan_reals(y, nout);
        return;
    }
    B = matrix_of(t, M);  /* the area may have moved */
    product *p = (product *)ad_block_at(t, at);
    p->base.kind = &product_kind;
    p->base.ids = sizeof(product) + values * sizeof(double);
    p->base.run = M->id;
    p->mat = M->at;
    p->prev = B->last;
    p->waiting = 0;
    ((matrix *)ad_block_at(t, M->at))->last = at;
    p->rows = m;
    p->cols = n;
    p->entry0 = M->id;
    p->shape = M->shape;
    p->x_active = x_active;
    p->norm = norm;
    double *x = (double *)(void *)(p + 1);
    uint32_t *ids = (uint32_t *)(void *)((char *)p + p->base.ids);
    for (size_t l = 0; l < n; l++) {
        x[l] = xr ? xr[l].v : xd[l];
        if (x_active)
            ids[l] = xr[l].id;
    }
    /* A product's values wait in the work array until the outputs have IDs. */
    double *v = norm ? (double *)prod_y(p) : ad_block_work(t);
    if (mat_columns(B))
        columns_product(m, n, M->shape, mat_columns(B), x, v);
    else  /* a derived block's: by rows, bitwise the same */
        ad__mat_rows(m, n, M->shape, mat_values(B), x, v);
    double sq = 0.0;
    for (size_t j = 0; norm && j < m; j++)
        sq += v[j] * v[j];  /* as ad_sqnorm */
    uint32_t first = ad_block_record(t, at);
    if (first && !ad_check_block(t, product_kind.name, n, x, nout,
                                 norm ? &sq : v, first))
        first = 0;
    for (size_t j = 0; j < nout; j++)
        y[j] = first ? ad__made(norm ? sq : v[j], first + (uint32_t)j) : ad_const(NAN);
}

/* Products not recorded: a constant matrix, or no recording. */
static void plain_product(const ad_mat *M, const ad_real *xr, const double *xd, ad_real *y)
{
    size_t m = M->rows, n = M->cols, lo, hi;
    for (size_t j = 0; j < m; j++) {
        row_range(M->shape, j, n, &lo, &hi);
        if (xr && ad_recording() && ad_any_active(hi - lo, xr + lo)) {
            /* constant matrix, active vector: ad_matvec's record */
            ad__slots s = ad__slots_begin();
            double v = 0.0;
            size_t l = lo;
            for (; l + 1 < hi; l += 2) {
                double a = entry(M, j * n + l), b = entry(M, j * n + l + 1);
                v += a * xr[l].v;
                v += b * xr[l + 1].v;
                ad__slots_check(&s, ad__key(xr[l]));
                ad__slots_check(&s, ad__key(xr[l + 1]));
                s = ad__slots_put(s, xr[l].id, a, xr[l + 1].id, b);
            }
            if (l < hi) {
                double a = entry(M, j * n + l);
                v += a * xr[l].v;
                ad__slots_check(&s, ad__key(xr[l]));
                s = ad__slots_put(s, xr[l].id, a, 0, 0.0);
            }
            y[j] = ad__made(v, ad__slots_end(s, AD__NARY_LINEAR, v));
            continue;
        }
        double v = 0.0;
        for (size_t l = lo; l < hi; l++)
            v += entry(M, j * n + l) * (xr ? xr[l].v : xd[l]);
        y[j] = ad_const(v);
    }
}

/* y = M x, or with norm *y = |M x|^2. */
static void product_of(const ad_mat *M, const ad_real *xr, const double *xd, ad_real *y, int norm)
{
    size_t nout = norm ? 1 : M ? M->rows : 0;
    if (!M || (nout && !y) || (M->rows && M->cols && !xr && !xd)) {
        ad_fail_recording(AD_EINVAL);
        ad_fill_nan_reals(y, nout);
        return;
    }
    if (!M->rows) {
        if (norm)
            *y = ad_const(0.0);
        return;
    }
    ad_tape *t = ad_recording();
    if (M->id && t) {
        const matrix *B = matrix_of(t, M);
        if (B)
            record_product(t, M, B, xr, xd, y, norm);
        else {
            ad_fail_recording(AD_EFOREIGN);
            ad_fill_nan_reals(y, nout);
        }
        return;
    }
    if (!norm) {
        plain_product(M, xr, xd, y);
        return;
    }
    ad_real *v = ad_alloc(M->rows * sizeof *v);
    if (!v) {
        ad_fail_recording(AD_ENOMEM);
        *y = ad_const(NAN);
        return;
    }
    plain_product(M, xr, xd, v);
    *y = ad_sqnorm_r(M->rows, v);
    ad_free(v);
}

void ad_mat_vec_rr(const ad_mat *M, const ad_real *x, ad_real *y)
{
    product_of(M, x, NULL, y, 0);
}

void ad_mat_vec_rd(const ad_mat *M, const double *x, ad_real *y)
{
    product_of(M, NULL, x, y, 0);
}

void ad_mat_sqnorm_rr(const ad_mat *M, const ad_real *x, ad_real *s)
{
    product_of(M, x, NULL, s, 1);
}

void ad_mat_sqnorm_rd(const ad_mat *M, const double *x, ad_real *s)
{
    product_of(M, NULL, x, s, 1);
}

/* (M x)_j from M's values, its terms in column order. */
static double row_value(const ad_mat *M, const double *x, size_t j)
{
    size_t n = M->cols, lo, hi;
    double v = 0.0;
    row_range(M->shape, j, n, &lo, &hi);
    for (size_t l = lo; l < hi; l++)
        v += entry(M, j * n + l) * x[l];
    return v;
}

double ad__mat_sqnorm_values(const ad_mat *M, const double *x)
{
    if (!M || (M->rows && M->cols && !x)) {
        ad_fail_recording(AD_EINVAL);
        return NAN;
    }
    double s = 0.0;
    for (size_t j = 0; j < M->rows; j++) {
        double v = row_value(M, x, j);
        s += v * v;
    }
    return s;
}

void ad__mat_vec_values(const ad_mat *M, const double *x, double *y)
{
    if (!M || (M->rows && !y) || (M->rows && M->cols && !x)) {
        ad_fail_recording(AD_EINVAL);
        return;
    }
    for (size_t j = 0; j < M->rows; j++)
        y[j] = row_value(M, x, j);
}
