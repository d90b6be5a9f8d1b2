/* ad_sparse_hessian: structure and values.
 *
 * Oracles: the dense ad_hessian of the same function (values, and at random
 * points its nonzero pattern, which the structure must equal where no
 * entry cancels); structures known from the function's form (tridiagonal,
 * arrowhead, banded, blocks); analytic second derivatives where the value
 * is 0 at the point but the interaction is there. */
#include <string.h>

#include "check.h"
#include "../lib/drivers/testing.h"

/* A junk CSR, as a caller's uninitialised one: a failed call empties it. */
static void junk(ad_csr *H)
{
    memset(H, 0xa5, sizeof *H);
}

/* H (lower triangle) at (r, c), c <= r: the entry, or 0 and *there = 0. */
static double entry(const ad_csr *H, size_t r, size_t c, int *there)
{
    for (size_t k = H->row_ptr[r]; k < H->row_ptr[r + 1]; k++)
        if (H->col[k] == c) {
            *there = 1;
            return H->val[k];
        }
    *there = 0;
    return 0.0;
}

/* The sparse Hessian of f at x against the dense one: a well-formed lower
 * triangle, the same value and gradient, every entry to 1e-13 of the
 * largest, every nonzero of the dense one in the structure.  want (n x n,
 * lower triangle read) is the structure it must have exactly; NULL: the
 * dense nonzero pattern (the point is random, nothing cancels).  Returns
 * the number of entries. */
static size_t check_hessian(ad_objective f, void *ctx, size_t n, const double *x,
                            const unsigned char *want)
{
    double fx, fd, *g = xmalloc((n ? n : 1) * sizeof *g), *gd = xmalloc((n ? n : 1) * sizeof *gd);
    double *hd = xmalloc((n ? n * n : 1) * sizeof *hd);
    ad_csr H;
    junk(&H);
    assert_int_equal(ad_sparse_hessian(f, ctx, n, x, &fx, g, &H), AD_OK);
    assert_csr_valid(&H, n, n);
    assert_int_equal(ad_hessian(f, ctx, n, x, &fd, gd, hd), AD_OK);
    assert_same(fx, fd);
    double scale = 0.0, gscale = 0.0;
    for (size_t k = 0; k < n * n; k++)
        scale = fmax(scale, fabs(hd[k]));
    for (size_t i = 0; i < n; i++)
        gscale = fmax(gscale, fabs(gd[i]));
    for (size_t i = 0; i < n; i++)
        assert_near(g[i], gd[i], 1e-14, 1e-14 * gscale);
    for (size_t r = 0; r < n; r++)
        for (size_t k = H.row_ptr[r]; k < H.row_ptr[r + 1]; k++)
            assert_true(H.col[k] <= r);
    for (size_t r = 0; r < n; r++)
        for (size_t c = 0; c <= r; c++) {
            int there;
            double h = entry(&H, r, c, &there);
            assert_near(h, hd[r * n + c], 1e-13, 1e-13 * scale);
            int should = want ? want[r * n + c] : hd[r * n + c] != 0.0;
            if (there != should)
                fail_msg("entry (%zu, %zu): %s in the structure, dense value %g", r, c,
                         there ? "is" : "not", hd[r * n + c]);
        }
    /* the lower triangle used symmetrically: H v against the dense H v */
    for (size_t i = 0; i < n; i++)
        g[i] = (double)(i % 3) - 1.0 + 0.25 * (double)i;
    for (size_t i = 0; i < n; i++) {
        double want = 0.0, got = 0.0;
        for (size_t k = 0; k < n; k++)
            want += hd[i * n + k] * g[k];
        for (size_t r = 0; r < n; r++)
            for (size_t e = H.row_ptr[r]; e < H.row_ptr[r + 1]; e++) {
                size_t c = H.col[e];
                if (r == i)
                    got += H.val[e] * g[c];
                else if (c == i)
                    got += H.val[e] * g[r];
            }
        assert_near(got, want, 1e-12, 1e-12 * scale * (double)n);
    }
    size_t nnz = H.nnz;
    ad_csr_free(&H);
    free(g), free(gd), free(hd);
    return nnz;
}

static void fill_uniform_x(uint64_t *rng, double *x, size_t n)
{
    fill_uniform(rng, x, n, 0.5, 1.5);
}

/* ---- known structures ---- */

/* Extended Rosenbrock: tridiagonal. */
static ad_real rosenbrock(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    ad_real s = ad_const(0.0);
    for (size_t i = 0; i + 1 < n; i++) {
        ad_real a = ad_sub(x[i + 1], ad_mul(x[i], x[i]));
        ad_real b = ad_sub(ad_const(1.0), x[i]);
        s = ad_add(s, ad_add(ad_mul(ad_const(100.0), ad_mul(a, a)), ad_mul(b, b)));
    }
    return s;
}

/* ARWHEAD: sum (-4 x_i + 3) + (x_i^2 + x_n^2)^2: arrowhead. */
static ad_real arwhead(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    ad_real s = ad_const(0.0);
    for (size_t i = 0; i + 1 < n; i++) {
        ad_real q = ad_add(ad_mul(x[i], x[i]), ad_mul(x[n - 1], x[n - 1]));
        s = ad_add(s, ad_add(ad_add(ad_mul(-4.0, x[i]), 3.0), ad_mul(q, q)));
    }
    return s;
}

/* BDQRTIC: sum (-4 x_i + 3)^2 + (x_i^2 + 2 x_{i+1}^2 + 3 x_{i+2}^2
 * + 4 x_{i+3}^2 + 5 x_n^2)^2: a band of four and the last row. */
static ad_real bdqrtic(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    ad_real s = ad_const(0.0);
    for (size_t i = 0; i + 4 < n; i++) {
        ad_real l = ad_add(ad_mul(-4.0, x[i]), 3.0), q = ad_mul(5.0, ad_mul(x[n - 1], x[n - 1]));
        for (size_t k = 0; k < 4; k++)
            q = ad_add(q, ad_mul((double)(k + 1), ad_mul(x[i + k], x[i + k])));
        s = ad_add(s, ad_add(ad_mul(l, l), ad_mul(q, q)));
    }
    return s;
}

typedef int (*pattern_fn)(size_t r, size_t c, size_t n);

static int tridiagonal(size_t r, size_t c, size_t n)
{
    (void)n;
    return r - c <= 1;
}

static int arrow(size_t r, size_t c, size_t n)
{
    return r == c || r == n - 1;
}

static int band4(size_t r, size_t c, size_t n)
{
    return r - c <= 3 || r == n - 1;
}

static unsigned char *pattern(size_t n, pattern_fn p)
{
    unsigned char *w = xmalloc(n * n);
    for (size_t r = 0; r < n; r++)
        for (size_t c = 0; c < n; c++)
            w[r * n + c] = c <= r && p(r, c, n);
    return w;
}

static void test_known_structures(void **state)
{
    static const struct {
        ad_objective f;
        pattern_fn p;
        size_t min_n;
    } cases[] = {{rosenbrock, tridiagonal, 2}, {arwhead, arrow, 2}, {bdqrtic, band4, 5}};
    uint64_t rng = 11;
    (void)state;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        for (size_t n = cases[k].min_n; n <= 40; n += 7) {
            double x[40];
            fill_uniform_x(&rng, x, n);
            unsigned char *w = pattern(n, cases[k].p);
            check_hessian(cases[k].f, NULL, n, x, w);
            free(w);
        }
}

/* ---- primitives ---- */

/* Blocks of four: logsumexp, prod, sqnorm, dot with the next block, sum
 * under exp: every block dense, nothing between blocks but the dot's. */
static ad_real blocks(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    ad_real s = ad_const(0.0);
    size_t b = 0;
    for (size_t i = 0; i + 4 <= n; i += 4, b++) {
        const ad_real *u = x + i;
        ad_real t;
        switch (b % 5) {
        case 0: t = ad_logsumexp(4, u); break;
        case 1: t = ad_prod(4, u); break;
        case 2: t = ad_exp(ad_sum(4, u)); break;
        case 3: t = ad_mul(ad_sqnorm(4, u), ad_sqnorm(4, u)); break;
        default: t = ad_sin(ad_dot(4, u, u)); break;
        }
        s = ad_add(s, t);
    }
    return s;
}

/* Dense blocks, but ad_prod's (the second block of five) has no
 * diagonal: the product is linear in each input. */
static int block4(size_t r, size_t c, size_t n)
{
    (void)n;
    return r / 4 == c / 4 && (r != c || r / 4 % 5 != 1);
}

/* The sum of squares of sparse residuals r_j = x_j x_{j+1} - sin(x_{j+2}),
 * as one ad_sqnorm: rows j .. j+2 interact, a band of two. */
static ad_real residuals(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    ad_real r[64];
    size_t m = n >= 3 ? n - 2 : 0;
    for (size_t j = 0; j < m; j++)
        r[j] = ad_sub(ad_mul(x[j], x[j + 1]), ad_sin(x[j + 2]));
    return ad_sqnorm(m, r);
}

static int band2(size_t r, size_t c, size_t n)
{
    (void)n;
    return r - c <= 2;
}

/* ad_dot of two disjoint halves, squared: every pair of the 2k inputs. */
static ad_real dot_squared(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    ad_real d = ad_dot(n / 2, x, x + n / 2);
    return ad_mul(d, d);
}

static int dense(size_t r, size_t c, size_t n)
{
    (void)r, (void)c, (void)n;
    return 1;
}

/* ad_dot alone: x_i y_i, only the pairs (i, n/2 + i). */
static ad_real dot_alone(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    return ad_dot(n / 2, x, x + n / 2);
}

static int dot_pairs(size_t r, size_t c, size_t n)
{
    return r == c + n / 2;
}

static void test_primitives(void **state)
{
    uint64_t rng = 12;
    (void)state;
    for (size_t n = 4; n <= 40; n += 4) {
        double x[40];
        fill_uniform_x(&rng, x, n);
        unsigned char *w = pattern(n, block4);
        check_hessian(blocks, NULL, n, x, w);
        free(w);
        w = pattern(n, band2);
        check_hessian(residuals, NULL, n, x, w);
        free(w);
        w = pattern(n, dense);
        check_hessian(dot_squared, NULL, n, x, w);
        free(w);
        w = pattern(n, dot_pairs);
        check_hessian(dot_alone, NULL, n, x, w);
        free(w);
    }
}

/* ---- recorded matrices ---- */

/* A recorded 3 x 3 matrix of inputs (full, lower or upper, its other
 * entries constant zeros) times a vector of inputs, then a nonlinear
 * function of the products: sum sin(y) + y0 y2, and |M x|^2 through
 * ad_mat_sqnorm, and a product with a constant vector. */
static ad_real with_matrix(const ad_real *x, size_t n, void *ctx)
{
    const int *shape = ctx;
    ad_real A[9], y[3], s, q;
    ad_mat M;
    const double c[3] = {0.5, -1.5, 2.0};
    (void)n;
    for (int k = 0; k < 9; k++) {
        int r = k / 3, col = k % 3;
        int zero = (*shape == 1 && col > r) || (*shape == 2 && col < r);
        A[k] = zero ? ad_const(0.0) : x[k];
    }
    status_unused(ad_mat_record(3, 3, A, &M));
    ad_mat_vec(&M, x + 9, y);
    s = ad_add(ad_add(ad_sin(y[0]), ad_sin(y[1])), ad_sin(y[2]));
    s = ad_add(s, ad_mul(y[0], y[2]));
    ad_mat_sqnorm(&M, x + 9, &q);
    s = ad_add(s, ad_mul(0.25, ad_mul(q, q)));
    ad_mat_vec(&M, c, y);
    return ad_add(s, ad_exp(ad_mul(0.1, y[1])));
}

static void test_recorded_matrices(void **state)
{
    uint64_t rng = 15;
    (void)state;
    for (int shape = 0; shape < 3; shape++)
        for (int round = 0; round < 5; round++) {
            double x[12];
            fill_uniform(&rng, x, 12, -1.0, 1.0);
            check_hessian(with_matrix, &shape, 12, x, NULL);
        }
}

/* ---- structure where the value is 0 ---- */

/* x0^3 + x1 x2 + pow(x3, 2.5) at x = (0, 0, 0, 0): H = 0, but the
 * structure is (0,0), (2,1), (3,3). */
static ad_real zero_here(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real c = ad_mul(x[0], ad_mul(x[0], x[0]));
    return ad_add(ad_add(c, ad_mul(x[1], x[2])), ad_pow(x[3], 2.5));
}

/* Linear and piecewise linear operations, powers 0 and 1 and of bases 1
 * and 0 (0^x is constant, by convention, where it is finite): no
 * interaction at all. */
static ad_real no_curvature(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real s = ad_add(ad_sub(x[0], ad_neg(x[1])), ad_fabs(x[2]));
    s = ad_add(s, ad_fmax(x[0], x[1]));
    s = ad_add(s, ad_add(ad_pow(x[2], 1.0), ad_pow(x[3], 0.0)));
    return ad_add(ad_add(s, ad_pow(1.0, x[3])), ad_pow(0.0, x[1]));
}

static void test_structure_without_values(void **state)
{
    const double x0[4] = {0.0, 0.0, 0.0, 0.0}, x1[4] = {0.5, -0.25, 2.0, 1.5};
    unsigned char w[16] = {0};
    (void)state;
    w[0 * 4 + 0] = w[2 * 4 + 1] = w[3 * 4 + 3] = 1;
    check_hessian(zero_here, NULL, 4, x0, w);
    check_hessian(zero_here, NULL, 4, x1, w);
    memset(w, 0, sizeof w);
    assert_int_equal(check_hessian(no_curvature, NULL, 4, x1, w), 0);
}

/* ---- conditional expressions ---- */

/* x0 < x1 ? x2 x3 : x4^3 (lt), x0 <= x1 (le), x0 == x1 (eq): the
 * structure of both branches, (3,2) and (4,4), at every point. */
static ad_real selected(const ad_real *x, size_t n, void *ctx)
{
    const int *which = ctx;
    ad_real t = ad_mul(x[2], x[3]), f = ad_mul(x[4], ad_mul(x[4], x[4]));
    (void)n;
    switch (*which) {
    case 0: return ad_select_lt(x[0], x[1], t, f);
    case 1: return ad_select_le(x[0], x[1], t, f);
    default: return ad_select_eq(x[0], x[1], t, f);
    }
}

/* The same as two outputs, for the Jacobian's structure. */
static void selected_vec(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = selected(x, n, ctx);
    y[1] = ad_mul(x[0], x[1]);
}

static void test_select(void **state)
{
    /* lt: true, false; le: true at a tie; eq: true at a tie, false */
    static const struct {
        int which;
        double x0, x1;
        int taken;
    } cases[] = {{0, 1.0, 2.0, 1}, {0, 2.0, 1.0, 0}, {0, 2.0, 2.0, 0}, {1, 2.0, 2.0, 1},
                 {1, 3.0, 2.0, 0}, {2, 2.0, 2.0, 1}, {2, 1.0, 2.0, 0}, {0, NAN, 2.0, 0},
                 {1, 1.0, NAN, 0}};
    unsigned char w[25] = {0};
    (void)state;
    w[3 * 5 + 2] = w[4 * 5 + 4] = 1;
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        int which = cases[k].which, taken = cases[k].taken;
        const double x[5] = {cases[k].x0, cases[k].x1, 1.5, -0.5, 2.0};
        double fx, g[5], y[2];
        assert_int_equal(ad_gradient(selected, &which, 5, x, &fx, g), AD_OK);
        assert_same(fx, taken ? 1.5 * -0.5 : 8.0);
        const double want[5] = {0.0, 0.0, taken ? -0.5 : 0.0, taken ? 1.5 : 0.0,
                                taken ? 0.0 : 12.0};
        for (int i = 0; i < 5; i++)
            assert_same(g[i], want[i]);
        if (x[0] == x[0] && x[1] == x[1])  /* the dense Hessian is NaN-free */
            check_hessian(selected, &which, 5, x, w);
        ad_csr J;
        assert_int_equal(ad_sparse_jacobian(selected_vec, &which, 5, x, 2, y, &J), AD_OK);
        assert_int_equal(J.row_ptr[1], 3);  /* row 0: columns 2, 3, 4, both branches */
        assert_int_equal(J.col[0], 2);
        assert_int_equal(J.col[1], 3);
        assert_int_equal(J.col[2], 4);
        for (size_t e = 0; e < 3; e++)
            assert_same(J.val[e], want[J.col[e]]);
        ad_csr_free(&J);
    }
}

/* ---- values into a fixed structure ---- */

/* A C branch: x0 < x1 ? x2 x3 + x4^3 : x2 x3, or (ctx set) x4^2 alone in
 * the second branch. */
static ad_real branching(const ad_real *x, size_t n, void *ctx)
{
    const int *other = ctx;
    ad_real p = ad_mul(x[2], x[3]);
    (void)n;
    if (x[0].v < x[1].v)
        return ad_add(p, ad_mul(x[4], ad_mul(x[4], x[4])));
    return other && *other ? ad_mul(x[4], x[4]) : p;
}

static void test_fixed_structure(void **state)
{
    const double a[5] = {1.0, 2.0, 1.5, -0.5, 2.0}, b[5] = {2.0, 1.0, 0.5, 3.0, -1.0};
    double fx, g[5], fy, gy[5];
    ad_csr H, K;
    int other = 1;
    (void)state;
    /* the structure at a, values at b: the same as the Hessian at b where
     * b reaches them, 0 at (4, 4), which b does not reach */
    assert_int_equal(ad_sparse_hessian(branching, NULL, 5, a, &fx, g, &H), AD_OK);
    assert_int_equal(H.nnz, 2);
    assert_int_equal(ad_sparse_hessian_values(branching, NULL, 5, b, &fx, g, &H), AD_OK);
    assert_int_equal(ad_sparse_hessian(branching, NULL, 5, b, &fy, gy, &K), AD_OK);
    assert_same(fx, fy);
    for (int i = 0; i < 5; i++)
        assert_same(g[i], gy[i]);
    int there;
    assert_same(entry(&H, 3, 2, &there), entry(&K, 3, 2, &there));
    assert_same(entry(&H, 4, 4, &there), 0.0);
    assert_true(there);
    /* back at a: the values ad_sparse_hessian gives there */
    assert_int_equal(ad_sparse_hessian_values(branching, NULL, 5, a, &fx, g, &H), AD_OK);
    assert_same(entry(&H, 4, 4, &there), 6.0 * 2.0);
    /* a pair outside: AD_ESTRUCTURE, every value NaN */
    assert_int_equal(ad_sparse_hessian_values(branching, &other, 5, b, &fx, g, &K),
                     AD_ESTRUCTURE);
    for (size_t k = 0; k < K.nnz; k++)
        assert_nan(K.val[k]);
    assert_nan(fx);
    assert_nan(g[0]);
    ad_csr_free(&K);
    /* not a lower triangle of n rows: AD_EINVAL, H untouched */
    assert_int_equal(ad_sparse_hessian_values(branching, NULL, 4, a, &fx, g, &H), AD_EINVAL);
    assert_nan(fx);
    size_t c = H.col[0];
    H.col[0] = 4;  /* above the diagonal in row 3 */
    assert_int_equal(ad_sparse_hessian_values(branching, NULL, 5, a, &fx, g, &H), AD_EINVAL);
    H.col[0] = c;
    assert_int_equal(ad_sparse_hessian_values(branching, NULL, 5, a, &fx, g, NULL), AD_EINVAL);
    assert_int_equal(ad_sparse_hessian_values(NULL, NULL, 5, a, &fx, g, &H), AD_EINVAL);
    for (size_t k = 0; k < H.nnz; k++)
        assert_nan(H.val[k]);
    assert_int_equal(ad_sparse_hessian_values(branching, NULL, 5, a, &fx, g, &H), AD_OK);
    assert_same(entry(&H, 4, 4, &there), 12.0);
    ad_csr_free(&H);
    assert_int_equal(strcmp(ad_strerror(AD_ESTRUCTURE), "unknown ad_status") != 0, 1);
}

/* ---- random functions over every operation ---- */

typedef struct term {
    size_t i, j;      /* the inputs, i != j */
    int u, v, bin, out;
} term;

typedef struct random_fn {
    term t[24];
    size_t count;
} random_fn;

#define UNARY 24
#define BINARY 7
#define OUTER 4

/* A function of one input, safe on [0.5, 1.5]. */
static ad_real unary(int k, ad_real x)
{
    ad_real h = ad_mul(0.5, x);
    switch (k) {
    case 0: return ad_sin(x);
    case 1: return ad_cos(x);
    case 2: return ad_tan(h);
    case 3: return ad_exp(x);
    case 4: return ad_expm1(x);
    case 5: return ad_log(x);
    case 6: return ad_log1p(x);
    case 7: return ad_log2(x);
    case 8: return ad_log10(x);
    case 9: return ad_sqrt(x);
    case 10: return ad_cbrt(x);
    case 11: return ad_asin(h);
    case 12: return ad_acos(h);
    case 13: return ad_atan(x);
    case 14: return ad_sinh(x);
    case 15: return ad_cosh(x);
    case 16: return ad_tanh(x);
    case 17: return ad_asinh(x);
    case 18: return ad_acosh(ad_add(x, 1.0));
    case 19: return ad_atanh(h);
    case 20: return ad_erf(x);
    case 21: return ad_erfc(x);
    case 22: return ad_lgamma(x);
    default: return ad_tgamma(x);
    }
}

/* A function of two, the second positive (exp of one of the above). */
static ad_real binary(int k, ad_real a, ad_real b)
{
    switch (k) {
    case 0: return ad_add(a, b);
    case 1: return ad_sub(a, b);
    case 2: return ad_mul(a, b);
    case 3: return ad_div(a, b);
    case 4: return ad_pow(b, a);
    case 5: return ad_atan2(a, b);
    default: return ad_hypot(a, b);
    }
}

static ad_real outer(int k, ad_real t)
{
    switch (k) {
    case 0: return t;
    case 1: return ad_mul(t, t);
    case 2: return ad_sin(t);
    default: return ad_neg(t);
    }
}

static ad_real random_objective(const ad_real *x, size_t n, void *ctx)
{
    const random_fn *r = ctx;
    ad_real s = ad_const(0.0);
    (void)n;
    for (size_t k = 0; k < r->count; k++) {
        const term *t = &r->t[k];
        ad_real a = unary(t->u, x[t->i]), b = ad_exp(unary(t->v, x[t->j]));
        s = ad_add(s, outer(t->out, binary(t->bin, a, b)));
    }
    return s;
}

static void test_random_functions(void **state)
{
    uint64_t rng = 13;
    (void)state;
    for (int round = 0; round < 300; round++) {
        random_fn r;
        size_t n = 2 + rng_next(&rng) % 12;
        r.count = 1 + rng_next(&rng) % 24;
        for (size_t k = 0; k < r.count; k++) {
            term *t = &r.t[k];
            t->i = rng_next(&rng) % n;
            t->j = (t->i + 1 + rng_next(&rng) % (n - 1)) % n;
            t->u = (int)(rng_next(&rng) % UNARY);
            t->v = (int)(rng_next(&rng) % UNARY);
            if (t->v == 5 || t->v == 6)  /* exp(log x), exp(log1p x): linear */
                t->v += 2;
            t->bin = (int)(rng_next(&rng) % BINARY);
            t->out = (int)(rng_next(&rng) % OUTER);
            if (t->bin == 6 && t->out == 1)  /* hypot(a, b)^2 = a^2 + b^2: no (i, j) */
                t->out = 2;
        }
        double x[14];
        fill_uniform_x(&rng, x, n);
        check_hessian(random_objective, &r, n, x, NULL);
    }
}

/* ---- small n, errors, memory ---- */

static ad_real constant(const ad_real *x, size_t n, void *ctx)
{
    (void)x, (void)n, (void)ctx;
    return ad_const(2.5);
}

static ad_real cube(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(x[0], ad_mul(x[0], x[0]));
}

static ad_real identity(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return x[0];
}

static void test_small(void **state)
{
    double fx, g[1];
    const double x[1] = {1.5};
    ad_csr H;
    (void)state;
    junk(&H);
    assert_int_equal(ad_sparse_hessian(constant, NULL, 0, NULL, &fx, NULL, &H), AD_OK);
    assert_csr_valid(&H, 0, 0);
    assert_same(fx, 2.5);
    ad_csr_free(&H);
    assert_int_equal(ad_sparse_hessian(cube, NULL, 1, x, &fx, g, &H), AD_OK);
    assert_csr_valid(&H, 1, 1);
    assert_int_equal(H.nnz, 1);
    assert_same(H.val[0], 6.0 * 1.5);
    assert_same(g[0], 3.0 * 1.5 * 1.5);
    ad_csr_free(&H);
    assert_int_equal(ad_sparse_hessian(identity, NULL, 1, x, &fx, g, &H), AD_OK);
    assert_int_equal(H.nnz, 0);
    assert_same(g[0], 1.0);
    ad_csr_free(&H);
}

static void rule_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    (void)ctx, (void)n, (void)m;
    y[0] = x[0] * x[0];
}

static void rule_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                     const double *ybar, double *xbar)
{
    (void)ctx, (void)n, (void)m, (void)y;
    xbar[0] = 2.0 * x[0] * ybar[0];
}

static const ad_rule square_rule = {rule_primal, rule_vjp, NULL, NULL};

static ad_real with_external(const ad_real *x, size_t n, void *ctx)
{
    ad_real y;
    (void)n, (void)ctx;
    status_unused(ad_external(&square_rule, NULL, 1, x, 1, &y));
    return y;
}

static void check_failed(ad_status got, ad_status want, double fx, const double *g, size_t n,
                         const ad_csr *H)
{
    assert_int_equal(got, want);  /* callers pass the status of a call made before */
    assert_nan(fx);
    for (size_t i = 0; i < n; i++)
        assert_nan(g[i]);
    assert_csr_empty(H);
}

/* One call, then its outputs checked: a failure with want. */
static void fails(ad_objective f, size_t n, const double *x, int no_grad, ad_status want)
{
    double fx = 0.0, g[4] = {0.0, 0.0, 0.0, 0.0};
    ad_csr H;
    junk(&H);
    ad_status s = ad_sparse_hessian(f, NULL, n, x, &fx, no_grad ? NULL : g, &H);
    check_failed(s, want, fx, g, no_grad ? 0 : n, &H);
}

static void test_errors(void **state)
{
    double fx = 0.0, g[4];
    const double x[4] = {1.0, 2.0, 3.0, 4.0};
    ad_csr H;
    (void)state;
    fails(NULL, 2, x, 0, AD_EINVAL);
    fails(cube, 1, NULL, 0, AD_EINVAL);
    fails(cube, 1, x, 1, AD_EINVAL);
    junk(&H);
    assert_int_equal(ad_sparse_hessian(cube, NULL, 1, x, NULL, g, &H), AD_EINVAL);
    assert_csr_empty(&H);
    assert_nan(g[0]);
    assert_int_equal(ad_sparse_hessian(cube, NULL, 1, x, &fx, g, NULL), AD_EINVAL);
    assert_nan(fx);
    fails(with_external, 1, x, 0, AD_ENOTSUP);
    /* the thread's next call is right */
    check_hessian(rosenbrock, NULL, 4, x, NULL);
}

/* What the thread keeps after a sparse Hessian: the second partials beside
 * the records, the sweep's arrays; nothing after ad_release. */
static void test_memory_statistics(void **state)
{
    double x[1000], fx, g[1000];
    ad_tape_stats st;
    ad_csr H;
    (void)state;
    fill(x, 1000, 1.25);
    assert_int_equal(ad_release(), AD_OK);
    assert_int_equal(ad_sparse_hessian(rosenbrock, NULL, 1000, x, &fx, g, &H), AD_OK);
    ad_csr_free(&H);
    assert_int_equal(ad_tape_stats_get(&st), AD_OK);
    assert_true(st.side_bytes >= st.records * st.record_bytes);
    assert_true(st.side_bytes <= st.tape_bytes);
    /* 16 bytes per waiting interaction, 20 per ID at least */
    assert_true(st.driver_bytes >= 20 * (st.inputs + st.records));
    assert_int_equal(ad_release(), AD_OK);
    assert_int_equal(ad_tape_stats_get(&st), AD_OK);
    assert_int_equal(st.side_bytes, 0);
    assert_int_equal(st.driver_bytes, 0);
}

static void test_allocation_failures(void **state)
{
    double x[12], fx, g[12];
    uint64_t rng = 14;
    int successes = 0;
    (void)state;
    fill_uniform_x(&rng, x, 12);
    assert_int_equal(ad_release(), AD_OK);
    for (long i = 0; i < 400 && !successes; i++) {
        ad_csr H;
        junk(&H);
        ad_test_fail_alloc_after(i);
        ad_status s = ad_sparse_hessian(blocks, NULL, 12, x, &fx, g, &H);
        ad_test_fail_alloc_after(-1);
        if (s == AD_OK) {
            successes = 1;
            ad_csr_free(&H);
            continue;
        }
        check_failed(s, AD_ENOMEM, fx, g, 12, &H);
        assert_int_equal(ad_release(), AD_OK);
    }
    assert_true(successes);
    unsigned char *w = pattern(12, block4);
    check_hessian(blocks, NULL, 12, x, w);
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_structures),
        cmocka_unit_test(test_primitives),
        cmocka_unit_test(test_recorded_matrices),
        cmocka_unit_test(test_structure_without_values),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_fixed_structure),
        cmocka_unit_test(test_random_functions),
        cmocka_unit_test(test_small),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_memory_statistics),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
