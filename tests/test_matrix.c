/* Recorded matrices (include/dualrev/matrix.h): ad_mat_record, ad_mat_wrap,
 * ad_mat_vec_rr / _rd / _d, and the generic ad_mat_make / ad_mat_vec.
 *
 * Oracles, none of them the code under test:
 *   - the same products unrolled into scalar ad_mul / ad_add loops, and
 *     ad_matvec_rr / ad_matvec: values and gradients to 1e-12 relative (of
 *     the largest entry, for sums that cancel);
 *   - closed forms: for f = sum_k w_k . (M x_k), df/dM(j, l) = sum_k w_kj
 *     x_kl and df/dx_kl = sum_j w_kj M(j, l);
 *   - eighth-order central differences (check.h) of the same functions
 *     written on plain doubles;
 *   - the tape: exact record counts from ad_tape_stats_get (a recorded
 *     m x n matrix is a header and m n output slots; a product a header and
 *     m) and the block area's size (docs/tape.md);
 *   - the API's own identities: ad_jvp / ad_vjp against the Jacobian,
 *     <w, J v> = <J^T w, v>, ad_linearize against ad_jacobian, ad_sparse_jacobian
 *     against the dense Jacobian with both sparse stores.
 * Errors: NULL arguments, handles of another recording (AD_EFOREIGN; one
 * case is not detectable, and what it does is pinned: see
 * test_handle_from_another_recording), calls outside a recording,
 * allocation failure at every point, the tape limit.  Threads: products on
 * four threads at once. */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "workers.h"
#include "../lib/drivers/testing.h"

/* Checks inside objectives: a failed cmocka assertion there would jump
 * out of the recording and leave the thread's tapes busy for the tests
 * that follow, so objectives count failures instead, and every test's
 * teardown checks the count (from any thread). */
static atomic_int objective_failures, objective_failure_line;

#define EXPECT(cond)                                                        \
    do {                                                                    \
        if (!(cond) && atomic_fetch_add(&objective_failures, 1) == 0)       \
            atomic_store(&objective_failure_line, __LINE__);                \
    } while (0)

static int setup(void **state)
{
    (void)state;
    atomic_store(&objective_failures, 0);
    return 0;
}

/* Also disarms the hooks a failed test may have left armed. */
static int teardown(void **state)
{
    (void)state;
    ad_test_fail_alloc_after(-1);
    ad_test_sparse_force_hash(0);
    ad_set_tape_limit(0);
    if (atomic_load(&objective_failures)) {
        print_error("%d checks failed inside objectives, the first at line %d\n",
                    atomic_load(&objective_failures), atomic_load(&objective_failure_line));
        return -1;
    }
    return 0;
}

static size_t last_records(void)
{
    ad_tape_stats st;
    assert_int_equal(ad_tape_stats_get(&st), AD_OK);
    return st.records;
}

/* Bytes of block data the thread's last top-level recording used. */
static size_t last_block_bytes(void)
{
    ad_tape_stats st;
    assert_int_equal(ad_tape_stats_get(&st), AD_OK);
    return st.block_bytes;
}

/* Records of one n-ary primitive over k > 0 arguments, some active. */
static size_t nary_records(size_t k)
{
    size_t slots = (k + 1) / 2;
    return slots + (slots > 1);
}

static size_t pad16(size_t bytes)
{
    return (bytes + 15) / 16 * 16;
}

/* The headers of lib/rules/matrix.c's blocks hold 5 and 6 pointer-sized fields:
 * 64 and 88 bytes on LP64 (docs/tape.md), 44 and 60 on ILP32 (i386); the
 * product's 36 bytes of other fields are padded to a pointer's size. */
#define MATRIX_HEADER (24 + 5 * sizeof(size_t))
#define PRODUCT_HEADER ((36 + 7 * sizeof(size_t) - 1) / sizeof(size_t) * sizeof(size_t))

/* docs/tape.md, "Recorded matrices": block bytes of a recorded m x n
 * matrix and of one product with it. */
static size_t matrix_block_bytes(size_t m, size_t n)
{
    return pad16(MATRIX_HEADER + 20 * m * n);
}

static size_t product_block_bytes(size_t m, size_t n, int x_active)
{
    return pad16(PRODUCT_HEADER + 8 * (n + m) + (x_active ? 4 * n : 0));
}

/* got[k] against want[k], to rtol relative of the largest |want|. */
static void check_vec(const double *got, const double *want, size_t count, double rtol,
                      const char *file, int line)
{
    double scale = 0.0;
    for (size_t k = 0; k < count; k++)
        scale = fmax(scale, fabs(want[k]));
    for (size_t k = 0; k < count; k++)
        check_near(got[k], want[k], rtol, rtol * scale + 1e-300, "vector entry", file, line);
}
#define assert_vec_near(got, want, count, rtol) \
    check_vec((got), (want), (count), (rtol), __FILE__, __LINE__)

/* y = A x unrolled into scalar records: the oracle of every product. */
static void unrolled_mv(size_t m, size_t n, const ad_real *A, const ad_real *x, ad_real *y)
{
    for (size_t j = 0; j < m; j++) {
        ad_real s = ad_const(0.0);
        for (size_t l = 0; l < n; l++)
            s = ad_add(s, ad_mul(A[j * n + l], x[l]));
        y[j] = s;
    }
}

static void plain_mv(size_t m, size_t n, const double *A, const double *x, double *y)
{
    for (size_t j = 0; j < m; j++) {
        double s = 0.0;
        for (size_t l = 0; l < n; l++)
            s += A[j * n + l] * x[l];
        y[j] = s;
    }
}

/* Whether (j, l) lies outside `shape` (a structural zero). */
static int outside(int shape, size_t j, size_t l)
{
    return (shape == AD__LOWER && l > j) || (shape == AD__UPPER && l < j);
}

/* ======================================================================
 * 1. y = M x against the unrolled product and ad_matvec_rr
 * ====================================================================== */

/* The matrix entries, by k % 4: an input; computed from an input
 * (sin(z_k) z_k); a constant; the input of x entry k % n (one ID for a
 * matrix entry and a vector entry, or for several matrix entries).
 * Entries outside `shape` are constant zeros.  x, when active, is: an
 * input; exp of an input; an input; a constant -- by l % 4. */
enum impl { I_MAT, I_MATVEC_RR, I_UNROLLED, IMPLS };

typedef struct prod_case {
    size_t m, n;
    int shape;        /* where the constant zeros are: AD__FULL (none), LOWER, UPPER */
    int x_active;     /* x an ad_real from the inputs (else constants) */
    int rr_const;     /* constant x as an ad_real array (ad_mat_vec_rr), else a double
                         array (ad_mat_vec_rd) */
    enum impl impl;
    const double *c;  /* constants: mn matrix entries, then n vector entries */
    const double *w;  /* weights of y, m of them */
    ad_status got;    /* ad_mat_record's status */
    int got_shape;    /* and the shape it found */
    uint32_t got_id;
} prod_case;

static int entry_const(const prod_case *p, size_t k)
{
    return outside(p->shape, k / p->n, k % p->n) || k % 4 == 2 || (k % 4 == 3 && p->n == 0);
}

static ad_real entry_ad(const prod_case *p, const ad_real *z, size_t k)
{
    size_t mn = p->m * p->n;
    if (outside(p->shape, k / p->n, k % p->n))
        return ad_const(0.0);
    switch (k % 4) {
    case 0: return z[k];
    case 1: return ad_mul(ad_sin(z[k]), z[k]);
    case 2: return ad_const(p->c[k]);
    default: return z[mn + k % p->n];
    }
}

static double entry_d(const prod_case *p, const double *z, size_t k)
{
    size_t mn = p->m * p->n;
    if (outside(p->shape, k / p->n, k % p->n))
        return 0.0;
    switch (k % 4) {
    case 0: return z[k];
    case 1: return sin(z[k]) * z[k];
    case 2: return p->c[k];
    default: return z[mn + k % p->n];
    }
}

static ad_real vec_ad(const prod_case *p, const ad_real *z, size_t l)
{
    size_t mn = p->m * p->n;
    switch (l % 4) {
    case 1: return ad_exp(z[mn + l]);
    case 3: return ad_const(p->c[mn + l]);
    default: return z[mn + l];
    }
}

static double vec_d(const prod_case *p, const double *z, size_t l)
{
    size_t mn = p->m * p->n;
    if (!p->x_active)
        return p->c[mn + l];
    switch (l % 4) {
    case 1: return exp(z[mn + l]);
    case 3: return p->c[mn + l];
    default: return z[mn + l];
    }
}

/* f(y) = sum_j w_j y_j + 1/2 sum_j y_j^2, the same scalar code for every
 * implementation of y. */
static ad_real loss_ad(size_t m, const ad_real *y, const double *w)
{
    ad_real s = ad_const(0.0);
    for (size_t j = 0; j < m; j++)
        s = ad_add(s, ad_mul(y[j], ad_add(ad_mul(y[j], 0.5), w[j])));
    return s;
}

static double loss_d(size_t m, const double *y, const double *w)
{
    double s = 0.0;
    for (size_t j = 0; j < m; j++)
        s += y[j] * (y[j] * 0.5 + w[j]);
    return s;
}

/* y = M x by the case's implementation. */
static void prod_outputs(prod_case *p, const ad_real *z, ad_real *y)
{
    size_t m = p->m, n = p->n, mn = m * n;
    ad_real *A = xmalloc(mn * sizeof *A), *x = xmalloc(n * sizeof *x);
    double *xd = xmalloc(n * sizeof *xd);
    for (size_t k = 0; k < mn; k++)
        A[k] = entry_ad(p, z, k);
    for (size_t l = 0; l < n; l++) {
        xd[l] = p->c[mn + l];
        x[l] = p->x_active ? vec_ad(p, z, l) : ad_const(xd[l]);
    }
    switch (p->impl) {
    case I_MAT: {
        ad_mat M;
        p->got = ad_mat_record(m, n, A, &M);
        p->got_shape = M.shape;
        p->got_id = M.id;
        if (p->x_active || p->rr_const)  /* rr_const: an ad_real x of constants */
            ad_mat_vec_rr(&M, x, y);
        else
            ad_mat_vec_rd(&M, xd, y);
        break;
    }
    case I_MATVEC_RR: ad_matvec_rr(m, n, A, x, y); break;
    default: unrolled_mv(m, n, A, x, y); break;
    }
    free(A), free(x), free(xd);
}

static ad_real prod_objective(const ad_real *z, size_t nz, void *ctx)
{
    prod_case *p = ctx;
    ad_real *y = xmalloc(p->m * sizeof *y);
    (void)nz;
    prod_outputs(p, z, y);
    ad_real f = loss_ad(p->m, y, p->w);
    free(y);
    return f;
}

/* y itself, as a vector function. */
static void prod_f(const ad_real *z, size_t nz, ad_real *y, size_t m, void *ctx)
{
    (void)nz, (void)m;
    prod_outputs(ctx, z, y);
}

static double prod_d(const prod_case *p, const double *z)
{
    size_t m = p->m, n = p->n, mn = m * n;
    double *A = xmalloc(mn * sizeof *A), *x = xmalloc(n * sizeof *x), *y = xmalloc(m * sizeof *y);
    for (size_t k = 0; k < mn; k++)
        A[k] = entry_d(p, z, k);
    for (size_t l = 0; l < n; l++)
        x[l] = vec_d(p, z, l);
    plain_mv(m, n, A, x, y);
    double f = loss_d(m, y, p->w);
    free(A), free(x), free(y);
    return f;
}

typedef struct fd_point {
    const prod_case *p;
    double *z;
    size_t i;
} fd_point;

static double prod_coordinate(double t, const void *ctx)
{
    const fd_point *c = ctx;
    double saved = c->z[c->i];
    c->z[c->i] = t;
    double f = prod_d(c->p, c->z);
    c->z[c->i] = saved;
    return f;
}

typedef struct shape_dims {
    size_t m, n;
} shape_dims;

static const shape_dims dims[] = {
    {3, 3}, {5, 2}, {2, 6}, {1, 1}, {4, 1}, {1, 4}, {7, 7}, {6, 4}, {3, 5},
    {0, 3}, {3, 0}, {0, 0},
};
#define NDIMS (sizeof dims / sizeof dims[0])

/* The shape ad_mat_record must find for a case: LOWER when both hold
 * (diagonal, one column, empty), as matrix.c decides. */
static int expected_shape(const prod_case *p)
{
    int lower = 1, upper = 1;
    for (size_t k = 0; k < p->m * p->n; k++) {
        size_t j = k / p->n, l = k % p->n;
        int zero = entry_const(p, k) && (outside(p->shape, j, l) || p->c[k] == 0.0);
        if (l > j && !zero)
            lower = 0;
        if (l < j && !zero)
            upper = 0;
    }
    return lower ? AD__LOWER : upper ? AD__UPPER : AD__FULL;
}

static void check_products(int shape, uint64_t *rng)
{
    for (size_t d = 0; d < NDIMS; d++)
        for (int x_active = 0; x_active < 2; x_active++)
            for (int trial = 0; trial < 3; trial++) {
                size_t m = dims[d].m, n = dims[d].n, nz = m * n + n;
                double *c = xmalloc(nz * sizeof *c), *w = xmalloc(m * sizeof *w);
                double *z = xmalloc(nz * sizeof *z), *g[IMPLS], fx[IMPLS];
                fill_uniform(rng, c, nz, -1.0, 1.0);
                fill_uniform(rng, w, m, -1.0, 1.0);
                fill_uniform(rng, z, nz, -1.0, 1.0);
                prod_case p = {m, n, shape, x_active, !x_active && trial == 1, I_MAT, c, w,
                               AD_EINVAL, -1, 0};
                for (int i = 0; i < IMPLS; i++) {
                    g[i] = xmalloc(nz * sizeof *g[i]);
                    p.impl = (enum impl)i;
                    fx[i] = gradient_ok(prod_objective, &p, nz, z, g[i]);
                }
                /* ad_mat_record saw what was asked, and recorded the
                 * matrix exactly when one of its entries is active. */
                assert_int_equal(p.got, AD_OK);
                p.impl = I_MAT;
                assert_int_equal(p.got_shape, expected_shape(&p));
                int any_active = 0;
                for (size_t k = 0; k < m * n; k++)
                    any_active |= !entry_const(&p, k);
                assert_int_equal(p.got_id != 0, any_active);

                double fw = prod_d(&p, z);
                for (int i = 0; i < IMPLS; i++) {
                    assert_near(fx[i], fw, 1e-12, 1e-12 * fabs(fw) + 1e-300);
                    assert_vec_near(g[I_MAT], g[i], nz, 1e-12);
                }
                /* Constant entries (structural zeros among them) and unused
                 * inputs have no gradient: exactly +0. */
                for (size_t k = 0; k < m * n; k++)
                    if (entry_const(&p, k))
                        assert_same(g[I_MAT][k], 0.0);
                if (!x_active)
                    for (size_t l = 0; l < n; l++) {
                        int shared = 0;
                        for (size_t k = 0; k < m * n; k++)
                            shared |= k % 4 == 3 && k % n == l && !outside(shape, k / n, l);
                        if (!shared)
                            assert_same(g[I_MAT][m * n + l], 0.0);
                    }
                /* y as a vector function: J v (forward sweeps) and w^T J
                 * against the unrolled product. */
                if (m && nz) {
                    double *v = xmalloc(nz * sizeof *v), *y = xmalloc(m * sizeof *y);
                    double *jv[2], *wj[2];
                    fill_uniform(rng, v, nz, -1.0, 1.0);
                    for (int i = 0; i < 2; i++) {
                        p.impl = i ? I_UNROLLED : I_MAT;
                        jv[i] = xmalloc(m * sizeof *jv[i]);
                        wj[i] = xmalloc(nz * sizeof *wj[i]);
                        assert_int_equal(ad_jvp(prod_f, &p, nz, z, v, m, y, jv[i]), AD_OK);
                        assert_int_equal(ad_vjp(prod_f, &p, nz, z, m, w, y, wj[i]), AD_OK);
                    }
                    p.impl = I_MAT;
                    assert_vec_near(jv[0], jv[1], m, 1e-12);
                    assert_vec_near(wj[0], wj[1], nz, 1e-12);
                    for (int i = 0; i < 2; i++)
                        free(jv[i]), free(wj[i]);
                    free(v), free(y);
                }
                if (trial == 0)
                    for (size_t i = 0; i < nz; i++) {
                        fd_point fc = {&p, z, i};
                        fd_result fd = fd_derivative(prod_coordinate, &fc, z[i]);
                        assert_near(g[I_MAT][i], fd.d, 1e-7, fd.noise + 1e-9);
                    }
                for (int i = 0; i < IMPLS; i++)
                    free(g[i]);
                free(c), free(w), free(z);
            }
}

static void test_products_against_oracles(void **state)
{
    uint64_t rng = 0x3a7;
    (void)state;
    check_products(AD__FULL, &rng);
}

/* ======================================================================
 * 2. Shapes: structural zeros above or below the diagonal
 * ====================================================================== */

/* The same products with constant zeros above (LOWER) or below (UPPER)
 * the diagonal: ad_mat_record finds the shape, the products skip those
 * entries, and values and gradients agree with the full products. */
static void test_triangular_products(void **state)
{
    uint64_t rng = 0x7a1;
    (void)state;
    check_products(AD__LOWER, &rng);
    check_products(AD__UPPER, &rng);
}

/* Shapes found by ad_mat_record (from IDs and values) and ad_mat_wrap
 * (from values), outside a recording: the shape does not depend on one. */
typedef struct shape_case {
    size_t m, n;
    const char *pattern;  /* row-major: '0' constant 0, '-' constant -0, 'c' constant 1e-300,
                             'a' active (nonzero), 'z' active with value 0, 'x' constant 2 */
    int want_record, want_wrap;
} shape_case;

static const shape_case shape_cases[] = {
    {3, 3, "a00" "aa0" "aaa", AD__LOWER, AD__LOWER},
    {3, 3, "aaa" "0aa" "00a", AD__UPPER, AD__UPPER},
    {3, 3, "aaa" "aaa" "aaa", AD__FULL, AD__FULL},
    {3, 3, "xx0" "xxx" "xxx", AD__FULL, AD__FULL},
    /* An active entry whose value happens to be 0 is no structural zero;
     * the wrapped double matrix has only values, and 0 there is one. */
    {3, 3, "a0z" "aa0" "aaa", AD__FULL, AD__LOWER},
    {3, 3, "aaa" "zaa" "00a", AD__FULL, AD__UPPER},
    /* A tiny constant is no zero either; -0 is one (it compares equal). */
    {3, 3, "a0c" "aa0" "aaa", AD__FULL, AD__FULL},
    {3, 3, "a0-" "aa-" "aaa", AD__LOWER, AD__LOWER},
    /* Diagonal, all zero, one column, 1 x 1, empty: both hold; LOWER wins. */
    {3, 3, "a00" "0a0" "00a", AD__LOWER, AD__LOWER},
    {2, 2, "00" "00", AD__LOWER, AD__LOWER},
    {4, 1, "aaaa", AD__LOWER, AD__LOWER},
    {1, 1, "a", AD__LOWER, AD__LOWER},
    {0, 3, "", AD__LOWER, AD__LOWER},
    {3, 0, "", AD__LOWER, AD__LOWER},
    /* One row: nothing below the diagonal. */
    {1, 4, "aaaa", AD__UPPER, AD__UPPER},
    {1, 4, "a000", AD__LOWER, AD__LOWER},
    /* Tall and wide. */
    {5, 3, "a00" "aa0" "aaa" "aaa" "aaa", AD__LOWER, AD__LOWER},
    {5, 3, "aaa" "0aa" "00a" "000" "000", AD__UPPER, AD__UPPER},
    {5, 3, "aaa" "0aa" "00a" "000" "0a0", AD__FULL, AD__FULL},
    {3, 5, "a0000" "aa000" "aaa00", AD__LOWER, AD__LOWER},
    {3, 5, "aaaaa" "0aaaa" "00aaa", AD__UPPER, AD__UPPER},
    {3, 5, "aaaaa" "0aaaa" "0aaaa", AD__FULL, AD__FULL},
};

static void make_pattern(const shape_case *s, ad_real *A, double *D)
{
    for (size_t k = 0; k < s->m * s->n; k++) {
        switch (s->pattern[k]) {
        case '0': A[k] = ad_const(0.0); break;
        case '-': A[k] = ad_const(-0.0); break;
        case 'c': A[k] = ad_const(1e-300); break;
        case 'x': A[k] = ad_const(2.0); break;
        case 'z': A[k].v = 0.0, A[k].id = 7; break;  /* an ID: outside a recording, only a tag */
        default: A[k].v = 0.5 + (double)k, A[k].id = 7; break;
        }
        D[k] = A[k].v;
    }
}

static void test_shape_detection(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof shape_cases / sizeof shape_cases[0]; i++) {
        const shape_case *s = &shape_cases[i];
        ad_real A[25];
        double D[25];
        ad_mat M, W;
        assert_true(s->m * s->n <= 25 && strlen(s->pattern) == s->m * s->n);
        make_pattern(s, A, D);
        assert_int_equal(ad_mat_record(s->m, s->n, A, &M), AD_OK);
        assert_int_equal(ad_mat_wrap(s->m, s->n, D, &W), AD_OK);
        if (M.shape != s->want_record || W.shape != s->want_wrap) {
            print_error("case %zu (%zu x %zu, %s): shapes %d and %d, expected %d and %d\n", i,
                        s->m, s->n, s->pattern, M.shape, W.shape, s->want_record, s->want_wrap);
            fail();
        }
        assert_int_equal(M.rows, s->m);
        assert_int_equal(M.cols, s->n);
        assert_int_equal(M.id, 0);  /* not in a recording */
        assert_ptr_equal(M.ar, A);
        assert_null(M.a);
        assert_ptr_equal(W.a, D);
        assert_null(W.ar);
        assert_int_equal(W.id, 0);
    }
}

/* Inside a recording the same: an active entry equal to 0 keeps the matrix
 * FULL (the product reads it, and its gradient is there); a constant zero
 * makes it triangular (the product skips it; it has no gradient). */
typedef struct zero_case {
    int active_zero;  /* entry (0, 2) an input of value 0, else a constant 0 */
    int shape;
    double y[3];
} zero_case;

static ad_real zero_objective(const ad_real *z, size_t n, void *ctx)
{
    zero_case *c = ctx;
    ad_real A[9] = {z[0], ad_const(0.0), c->active_zero ? z[6] : ad_const(0.0),
                    z[1], z[2], ad_const(0.0),
                    z[3], z[4], z[5]};
    ad_real y[3];
    ad_mat M;
    (void)n;
    EXPECT(ad_mat_record(3, 3, A, &M) == AD_OK);
    c->shape = M.shape;
    ad_mat_vec_rr(&M, z + 7, y);
    for (int j = 0; j < 3; j++)
        c->y[j] = y[j].v;
    return ad_add(ad_add(y[0], ad_mul(y[1], 2.0)), ad_mul(y[2], 3.0));
}

static void test_active_zero_keeps_full(void **state)
{
    /* z6 = 0: entry (0, 2) when it is active. */
    const double z[10] = {0.5, -1.5, 2.0, 0.25, -0.75, 1.25, 0.0, 3.0, -2.0, 0.5};
    double g[10];
    (void)state;
    for (int active = 0; active < 2; active++) {
        zero_case c = {active, -1, {0, 0, 0}};
        double fx = gradient_ok(zero_objective, &c, 10, z, g);
        assert_int_equal(c.shape, active ? AD__FULL : AD__LOWER);
        const double *x = z + 7;
        double y0 = z[0] * x[0], y1 = z[1] * x[0] + z[2] * x[1];
        double y2 = z[3] * x[0] + z[4] * x[1] + z[5] * x[2];
        assert_near(c.y[0], y0, 1e-15, 0.0);
        assert_near(c.y[1], y1, 1e-15, 0.0);
        assert_near(c.y[2], y2, 1e-15, 0.0);
        assert_near(fx, y0 + 2 * y1 + 3 * y2, 1e-15, 0.0);
        const double want[10] = {x[0], 2 * x[0], 2 * x[1], 3 * x[0], 3 * x[1], 3 * x[2],
                                 active ? x[2] : 0.0,
                                 z[0] + 2 * z[1] + 3 * z[3], 2 * z[2] + 3 * z[4], 3 * z[5]};
        for (int i = 0; i < 10; i++)
            assert_near(g[i], want[i], 1e-15, 0.0);
        /* The active zero's gradient is present (x2 = 0.5), the
         * constant's absent. */
        if (active)
            assert_same(g[6], 0.5);
        else
            assert_same(g[6], 0.0);
    }
}

/* Structural zeros are zeros, as in BLAS trmv (matrix.h): the products
 * skip them, so 0 x Inf there adds nothing, where the full product --
 * ad_matvec_rr, the unrolled loop, ad_matvec_d -- gives the value NaN.
 * With a triangular factor and an infinite vector entry the recorded
 * product is finite where the full one is not.  An active entry that is
 * 0 is no structural zero: 0 x Inf = NaN there.  An unused output is not
 * reached, so its cotangent 0 never meets the Inf in a partial inside the
 * shape either (seeded.h, ad_retry) -- see below. */
typedef struct inf_case {
    int how;  /* 0: recorded LOWER; 1: ad_matvec_rr; 2: unrolled; 3: recorded, (0, 2) active 0 */
    double y[3];
    ad_real yr[3];
} inf_case;

static ad_real inf_objective(const ad_real *z, size_t n, void *ctx)
{
    inf_case *c = ctx;
    ad_real A[9] = {z[0], ad_const(0.0), ad_const(0.0),
                    z[1], z[2], ad_const(0.0),
                    z[3], z[4], z[5]};
    const double xd[3] = {2.0, -1.0, INFINITY};
    ad_real x[3] = {ad_const(2.0), ad_const(-1.0), ad_const(INFINITY)}, y[3];
    ad_mat M;
    (void)n;
    if (c->how == 3)
        A[2] = z[6];
    if (c->how == 0 || c->how == 3) {
        status_unused(ad_mat_record(3, 3, A, &M));
        ad_mat_vec_rd(&M, xd, y);
    } else if (c->how == 1) {
        ad_matvec_rr(3, 3, A, x, y);
    } else {
        unrolled_mv(3, 3, A, x, y);
    }
    for (int j = 0; j < 3; j++) {
        c->y[j] = y[j].v;
        c->yr[j] = y[j];
    }
    return ad_add(y[0], y[1]);  /* y2 = Inf is not part of f */
}

/* (y0, y1) as a vector function. */
static void inf_f(const ad_real *z, size_t n, ad_real *y, size_t m, void *ctx)
{
    inf_case *c = ctx;
    (void)m;
    inf_objective(z, n, ctx);
    y[0] = c->yr[0];
    y[1] = c->yr[1];
}

static void test_structural_zeros_skip_inf(void **state)
{
    const double z[7] = {0.5, -1.5, 2.0, 0.25, -0.75, 1.25, 0.0};
    double g[7], fx;
    (void)state;
    for (int how = 0; how < 4; how++) {
        inf_case c = {.how = how};
        gradient_ok(inf_objective, &c, 7, z, g);
        fx = c.y[0] + c.y[1];
        if (how == 0) {
            assert_same(c.y[0], 1.0);
            assert_same(c.y[1], -3.0 - 2.0);
            assert_same(c.y[2], INFINITY);
            assert_same(fx, -4.0);
            /* Row 2 (y2 = Inf) is not part of f: its entries are not
             * reached, and L(2, 2)'s gradient is 0, not 0 x Inf = NaN
             * (docs/conventions.md, records not reached). */
            const double want[7] = {2.0, 2.0, -1.0, 0.0, 0.0, 0.0, 0.0};
            for (int i = 0; i < 7; i++)
                assert_same(g[i], want[i]);
        } else {
            /* 0 x Inf in rows 0 and 1; L(2, 2) is in y2 only */
            assert_nan(c.y[0]);
            assert_nan(c.y[1]);
            assert_same(g[5], 0.0);
        }
    }
    /* Forward sweeps skip them too: the tangent of y0 and y1 (y = L x,
     * x constant, only L(0, 0), L(1, 0), L(1, 1) in them) is finite. */
    double v[7], jv[2], y[3], J[14];
    inf_case c = {.how = 0};
    fill_uniform(&(uint64_t){0x1f}, v, 7, -1.0, 1.0);
    assert_int_equal(ad_jvp(inf_f, &c, 7, z, v, 2, y, jv), AD_OK);
    assert_same(y[0], 1.0);
    assert_same(y[1], -5.0);
    assert_near(jv[0], 2.0 * v[0], 1e-15, 0.0);
    assert_near(jv[1], 2.0 * v[1] - v[2], 1e-15, 1e-15);
    assert_int_equal(ad_jacobian(inf_f, &c, 7, z, 2, y, J), AD_OK);
    /* Reverse sweeps (n > m): L(2, 2) is reached by neither row, as in the
     * gradient above. */
    const double Jw[14] = {2, 0, 0, 0, 0, 0, 0, 0, 2, -1, 0, 0, 0, 0};
    for (int k = 0; k < 14; k++)
        assert_same(J[k], Jw[k]);

    /* The double forms: a wrapped triangular matrix against ad_matvec_d. */
    const double L[9] = {1, 0, 0, 2, 3, 0, 4, 5, 6}, x[3] = {1.0, 2.0, INFINITY};
    double yfull[3];
    ad_mat W;
    assert_int_equal(ad_mat_wrap(3, 3, L, &W), AD_OK);
    assert_int_equal(W.shape, AD__LOWER);
    ad_mat_vec_d(&W, x, y);
    ad_matvec_d(3, 3, L, x, yfull);
    assert_same(y[0], 1.0);
    assert_same(y[1], 8.0);
    assert_same(y[2], INFINITY);
    assert_nan(yfull[0]);
    assert_nan(yfull[1]);
}

/* A wrapped double matrix with an ad_real vector is ad_matvec over the
 * entries inside its shape: one n-ary record per output whose row reaches
 * an active entry of x, ceil(k/2) slots and a header for k entries. */
typedef struct wrapped_case {
    const double *A;
    size_t m, n;
    int shape;
    int use_matvec;  /* the oracle: ad_matvec on the full matrix */
    int as_ad;       /* the matrix as constant ad_reals, given to ad_mat_record */
} wrapped_case;

static ad_real wrapped_objective(const ad_real *z, size_t nz, void *ctx)
{
    wrapped_case *c = ctx;
    ad_real y[6];
    (void)nz;
    if (c->use_matvec) {
        ad_matvec(c->m, c->n, c->A, z, y);
    } else if (c->as_ad) {  /* nothing active: not recorded, a plain product */
        ad_real A[30];
        ad_mat M;
        for (size_t k = 0; k < c->m * c->n; k++)
            A[k] = ad_const(c->A[k]);
        EXPECT(ad_mat_record(c->m, c->n, A, &M) == AD_OK);
        EXPECT(M.shape == c->shape);
        EXPECT(M.id == 0);
        ad_mat_vec_rr(&M, z, y);
    } else {
        ad_mat W;
        EXPECT(ad_mat_wrap(c->m, c->n, c->A, &W) == AD_OK);
        EXPECT(W.shape == c->shape);
        EXPECT(W.id == 0);
        ad_mat_vec_rr(&W, z, y);
    }
    ad_real s = ad_const(0.0);
    for (size_t j = 0; j < c->m; j++)
        s = ad_add(s, ad_mul(ad_mul(y[j], y[j]), 0.5 + (double)j));
    return s;
}

/* Records of f over a constant matrix of the given shape (see above). */
static size_t wrapped_records(size_t m, size_t n, int shape)
{
    /* The products' n-ary records, then f's 3 per output (the first add,
     * to the constant 0, records nothing); an empty row (UPPER, j >= n) is
     * the constant 0, and its terms of f record nothing. */
    size_t want = 3 * m - 1;
    for (size_t j = 0; j < m; j++) {
        size_t lo = shape == AD__UPPER ? (j < n ? j : n) : 0;
        size_t hi = shape == AD__LOWER ? (j + 1 < n ? j + 1 : n) : n;
        want += hi > lo ? nary_records(hi - lo) : 0;
        if (hi <= lo)
            want -= 3;
    }
    return want;
}

static void test_wrapped_matrices(void **state)
{
    uint64_t rng = 0x9a9;
    (void)state;
    static const struct {
        size_t m, n;
        int shape;
    } cases[] = {{4, 4, AD__LOWER}, {4, 4, AD__UPPER}, {4, 4, AD__FULL}, {6, 3, AD__LOWER},
                 {3, 5, AD__UPPER}, {5, 2, AD__UPPER}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int as_ad = 0; as_ad < 2; as_ad++) {
            size_t m = cases[i].m, n = cases[i].n;
            double A[30], z[6], g[6], gw[6], y[6];
            fill_uniform(&rng, A, m * n, 0.5, 1.5);
            fill_uniform(&rng, z, n, -1.0, 1.0);
            for (size_t k = 0; k < m * n; k++)
                if (outside(cases[i].shape, k / n, k % n))
                    A[k] = 0.0;
            wrapped_case c = {A, m, n, cases[i].shape, 0, as_ad};
            double fx = gradient_ok(wrapped_objective, &c, n, z, g);
            assert_int_equal(last_records(), wrapped_records(m, n, cases[i].shape));
            assert_int_equal(last_block_bytes(), 0);
            c.use_matvec = 1;
            double fw = gradient_ok(wrapped_objective, &c, n, z, gw);
            assert_near(fx, fw, 1e-14, 0.0);
            assert_vec_near(g, gw, n, 1e-14);
            /* Closed form: df/dz_l = sum_j (1 + 2 j) y_j A(j, l). */
            plain_mv(m, n, A, z, y);
            for (size_t l = 0; l < n; l++) {
                double s = 0.0;
                for (size_t j = 0; j < m; j++)
                    s += (1.0 + 2.0 * (double)j) * y[j] * A[j * n + l];
                gw[l] = s;
            }
            assert_vec_near(g, gw, n, 1e-13);
        }
}

/* A recorded product computes its values down the matrix's columns
 * (matrix.c), two columns at a time, in pairs of rows; each value must
 * still be bitwise the row-by-row sum of the double product on the same
 * values, or shared source would give different values recorded and
 * plain.  Sizes cover odd and even rows and columns, a 65 x 65 triangle
 * (the GMM d64 factor), and more columns than rows in a lower triangle
 * (empty columns), for every shape. */
typedef struct bitwise_case {
    size_t m, n;
    int shape;
    const double *D, *x;
    size_t mismatches;
} bitwise_case;

static ad_real bitwise_objective(const ad_real *z, size_t n, void *ctx)
{
    bitwise_case *c = ctx;
    static ad_real A[65 * 65];  /* one thread */
    ad_real y[65];
    double yw[65];
    ad_mat M, W;
    (void)n;
    /* the zeros outside the shape constant, so that they are structural */
    for (size_t k = 0; k < c->m * c->n; k++)
        A[k] = c->D[k] == 0.0 ? ad_const(0.0) : z[k];
    assert_int_equal(ad_mat_make(c->m, c->n, A, &M), AD_OK);
    assert_int_equal(ad_mat_make(c->m, c->n, c->D, &W), AD_OK);
    assert_int_equal(M.shape, c->shape);
    ad_mat_vec(&M, c->x, y);
    ad_mat_vec(&W, c->x, yw);
    for (size_t j = 0; j < c->m; j++)
        c->mismatches += !same_double(y[j].v, yw[j]);
    return ad_sum(c->m, y);
}

static void test_recorded_values_bitwise(void **state)
{
    static const size_t sizes[][2] = {{1, 1}, {2, 2}, {3, 3}, {4, 5}, {5, 4}, {7, 7}, {8, 3},
                                      {3, 8}, {11, 11}, {13, 6}, {6, 13}, {65, 65}, {64, 65}};
    static double D[65 * 65], z[65 * 65], g[65 * 65], x[65];
    uint64_t rng = 0xb17;
    (void)state;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int shape = AD__FULL; shape <= AD__UPPER; shape++) {
            size_t m = sizes[s][0], n = sizes[s][1];
            fill_uniform(&rng, D, m * n, -1.0, 1.0);
            fill_uniform(&rng, x, n, -3.0, 3.0);
            for (size_t j = 0; j < m; j++)
                for (size_t l = 0; l < n; l++)
                    if ((shape == AD__LOWER && l > j) || (shape == AD__UPPER && l < j))
                        D[j * n + l] = 0.0;
            /* a 1 x 1, a single column or row, a diagonal: both shapes
             * hold, and the recording says LOWER */
            int want, lower = 1, upper = 1;
            for (size_t j = 0; j < m; j++)
                for (size_t l = 0; l < n; l++) {
                    lower &= l <= j || D[j * n + l] == 0.0;
                    upper &= l >= j || D[j * n + l] == 0.0;
                }
            want = lower ? AD__LOWER : upper ? AD__UPPER : AD__FULL;
            memcpy(z, D, m * n * sizeof *z);
            bitwise_case c = {m, n, want, D, x, 0};
            double fx;
            assert_int_equal(ad_gradient(bitwise_objective, &c, m * n, z, &fx, g), AD_OK);
            if (c.mismatches) {
                print_error("%zu x %zu, shape %d: %zu values differ from the row sums\n", m, n,
                            want, c.mismatches);
                fail();
            }
        }
}

/* A matrix's cotangents are added up when the sweep reaches it, products
 * four at a time.  So every entry must still be bitwise the sum, latest
 * product first, of ybar_kj x_kl, ybar_kj = 2^512 w_kj (the sweep's seed
 * is 2^512: tape.h, "Scaled seeds"), scaled back by 2^-512: here
 * f = sum_k w_k . (A x_k), with weights per product at normal, small,
 * subnormal and zero scales, over batches of four products and a partial
 * one.  Row 3 is near 2^-950, where terms near 2^-1000 still count; rows 5
 * and 6 get only terms that are subnormal unscaled, which all count; row 4
 * is infinite from the first product on (an infinite partial, not an
 * overflow: the sweep is not run again). */
#define TERMS_K 12

typedef struct terms_case {
    size_t m, n;
    const double *x, *w;  /* K n points; K m weights */
} terms_case;

static ad_real terms_objective(const ad_real *z, size_t nz, void *ctx)
{
    const terms_case *c = ctx;
    ad_real y[8], f = ad_const(0.0);
    ad_mat M;
    (void)nz;
    assert_int_equal(ad_mat_record(c->m, c->n, z, &M), AD_OK);
    for (size_t k = 0; k < TERMS_K; k++) {
        ad_mat_vec(&M, c->x + k * c->n, y);
        f = ad_add(f, ad_dot(c->m, y, c->w + k * c->m));
    }
    return f;
}

static void test_tiny_terms_summed(void **state)
{
    enum { M = 7, N = 6 };
    static const double scale[TERMS_K] = {1.0,    1e-310, 0.0,    1e-300, 4e-320, 1.0,
                                         1e-315, 5e-324, 1e-308, 1e-15,  1e-312, 1e-200};
    double x[TERMS_K * N], w[TERMS_K * M], z[M * N], g[M * N], want[M * N];
    uint64_t rng = 0x71e;
    (void)state;
    fill_uniform(&rng, z, M * N, -1.0, 1.0);
    fill_uniform(&rng, x, TERMS_K * N, -4.0, 4.0);
    for (size_t k = 0; k < TERMS_K; k++) {
        if (k >= 6)
            x[k * N + 2] = 0.0;
        for (size_t j = 0; j < M; j++) {
            double r = rng_next(&rng) % 2 ? 1.0 : -1.0;
            double base = j >= 5 ? 1e-318 : j == 3 ? scale[k] * 1e-286 : scale[k];
            w[k * M + j] = base * r * (1.0 + (double)j / 8.0);
        }
    }
    x[3 * N + 1] = -0.0;
    w[0 * M + 4] = INFINITY;  /* row 4: Inf first, then tiny terms */
    for (size_t e = 0; e < M * N; e++) {
        size_t j = e / N, l = e % N;
        double acc = 0.0;
        for (size_t k = TERMS_K; k-- > 0;)  /* latest product first */
            acc = acc + w[k * M + j] * 0x1p512 * x[k * N + l];
        want[e] = (0.0 + acc) * 0x1p-512;  /* the entry's input slot starts at 0 */
    }
    terms_case c = {M, N, x, w};
    double fx;
    assert_int_equal(ad_gradient(terms_objective, &c, M * N, z, &fx, g), AD_OK);
    size_t subnormal = 0;
    for (size_t e = 0; e < M * N; e++) {
        subnormal += want[e] != 0.0 && fabs(want[e]) < 0x1p-1022;
        if (!same_double(g[e], want[e])) {
            print_error("entry %zu: %a, want %a\n", e, g[e], want[e]);
            fail();
        }
    }
    assert_true(subnormal >= 2 * N - 2);  /* rows 5 and 6: the tiny terms were added */
}

/* The double product on a recorded (ad_real) handle reads the entries'
 * values; the wrapped one skips structural zeros. */
static void test_double_product_forms(void **state)
{
    uint64_t rng = 0xd0b;
    (void)state;
    for (size_t d = 0; d < NDIMS; d++) {
        size_t m = dims[d].m, n = dims[d].n;
        double D[49], x[7], y[7], yw[7];
        ad_real A[49];
        ad_mat M, W;
        fill_uniform(&rng, D, m * n, -1.0, 1.0);
        fill_uniform(&rng, x, n, -1.0, 1.0);
        for (size_t k = 0; k < m * n; k++) {
            A[k].v = D[k];
            A[k].id = (uint32_t)k + 1;  /* a stale ID: only a tag here */
        }
        plain_mv(m, n, D, x, yw);
        assert_int_equal(ad_mat_record(m, n, A, &M), AD_OK);
        assert_int_equal(ad_mat_wrap(m, n, D, &W), AD_OK);
        ad_mat_vec_d(&M, x, y);
        for (size_t j = 0; j < m; j++)
            assert_same(y[j], yw[j]);
        ad_mat_vec_d(&W, x, y);
        for (size_t j = 0; j < m; j++)
            assert_same(y[j], yw[j]);
        ad_mat_vec(&W, x, y);  /* the generic name: double y, double product */
        for (size_t j = 0; j < m; j++)
            assert_same(y[j], yw[j]);
    }
}

/* ======================================================================
 * 3. Many products with one matrix: the tape
 * ====================================================================== */

/* f = sum_k w_k . (M x_k) over K vectors.  Inputs: M's m n entries, then
 * the K n entries of the x_k (used when x is active; else the x_k are the
 * double array c).  The products' outputs are summed by one ad_dot with
 * the constant weights. */
#define K_VEC 100

typedef struct many_case {
    size_t m, n;
    int shape;
    int x_active;
    int use_rr;  /* ad_matvec_rr instead of a recorded matrix */
    const double *c, *w;  /* K n vector entries; K m weights */
} many_case;

static ad_real many_objective(const ad_real *z, size_t nz, void *ctx)
{
    many_case *c = ctx;
    size_t m = c->m, n = c->n, mn = m * n;
    ad_real *A = xmalloc(mn * sizeof *A), *x = xmalloc(n * sizeof *x);
    ad_real *Y = xmalloc(K_VEC * m * sizeof *Y);
    ad_mat M;
    (void)nz;
    for (size_t k = 0; k < mn; k++)
        A[k] = outside(c->shape, k / n, k % n) ? ad_const(0.0) : z[k];
    if (!c->use_rr) {
        EXPECT(ad_mat_record(m, n, A, &M) == AD_OK);
        EXPECT(M.shape == c->shape);
    }
    for (size_t k = 0; k < K_VEC; k++) {
        const ad_real *xk = z + mn + k * n;
        const double *ck = c->c + k * n;
        if (!c->x_active)
            for (size_t l = 0; l < n; l++)
                x[l] = ad_const(ck[l]);
        if (c->use_rr)
            ad_matvec_rr(m, n, A, c->x_active ? xk : x, Y + k * m);
        else if (c->x_active)
            ad_mat_vec_rr(&M, xk, Y + k * m);
        else
            ad_mat_vec_rd(&M, ck, Y + k * m);
    }
    ad_real f = ad_dot(K_VEC * m, Y, c->w);
    free(A), free(x), free(Y);
    return f;
}

static void check_many(size_t m, size_t n, int shape, int x_active, uint64_t *rng)
{
    size_t mn = m * n, nz = mn + K_VEC * n;
    double *z = xmalloc(nz * sizeof *z), *g = xmalloc(nz * sizeof *g);
    double *grr = xmalloc(nz * sizeof *grr), *gw = xmalloc(nz * sizeof *gw);
    double *c = xmalloc(K_VEC * n * sizeof *c), *w = xmalloc(K_VEC * m * sizeof *w);
    fill_uniform(rng, z, nz, -1.0, 1.0);
    fill_uniform(rng, c, K_VEC * n, -1.0, 1.0);
    fill_uniform(rng, w, K_VEC * m, -1.0, 1.0);
    many_case mc = {m, n, shape, x_active, 0, c, w};

    double fx = gradient_ok(many_objective, &mc, nz, z, g);
    size_t rec_mat = last_records(), bytes_mat = last_block_bytes();
    mc.use_rr = 1;
    double frr = gradient_ok(many_objective, &mc, nz, z, grr);
    size_t rec_rr = last_records();

    /* Closed form, and the ad_matvec_rr gradient. */
    const double *X = x_active ? z + mn : c;
    double fw = 0.0;
    memset(gw, 0, nz * sizeof *gw);
    for (size_t k = 0; k < K_VEC; k++)
        for (size_t j = 0; j < m; j++)
            for (size_t l = 0; l < n; l++) {
                if (outside(shape, j, l))
                    continue;
                double wkj = w[k * m + j], a = z[j * n + l], xl = X[k * n + l];
                fw += wkj * a * xl;
                gw[j * n + l] += wkj * xl;
                if (x_active)
                    gw[mn + k * n + l] += wkj * a;
            }
    assert_near(fx, fw, 1e-12, 1e-12);
    assert_near(frr, fw, 1e-12, 1e-12);
    assert_vec_near(g, gw, nz, 1e-12);
    assert_vec_near(g, grr, nz, 1e-12);
    for (size_t k = 0; k < mn; k++)
        if (outside(shape, k / n, k % n))
            assert_same(g[k], 0.0);

    /* The tape: the matrix once (a header and mn output slots), each
     * product a header and m outputs, then the dot; against a record of
     * n pairs and a header per output with ad_matvec_rr. */
    size_t dot = nary_records(K_VEC * m);
    assert_int_equal(rec_mat, 1 + mn + K_VEC * (1 + m) + dot);
    assert_int_equal(rec_rr, K_VEC * m * (n + (n > 1)) + dot);
    assert_true(3 * (rec_mat - dot) < rec_rr - dot);
    assert_int_equal(bytes_mat,
                     matrix_block_bytes(m, n) + K_VEC * product_block_bytes(m, n, x_active));
    assert_int_equal(last_block_bytes(), 0);  /* the ad_matvec_rr recording has no block */
    free(z), free(g), free(grr), free(gw), free(c), free(w);
}

static void test_many_products(void **state)
{
    uint64_t rng = 0x3a11;
    (void)state;
    for (int x_active = 0; x_active < 2; x_active++) {
        check_many(6, 5, AD__FULL, x_active, &rng);
        check_many(5, 5, AD__LOWER, x_active, &rng);
        check_many(5, 5, AD__UPPER, x_active, &rng);
        check_many(8, 3, AD__FULL, x_active, &rng);
        check_many(3, 8, AD__FULL, x_active, &rng);
    }
}

/* A matrix of more entries than a chunk holds (65 536 records): its
 * output slots continue in the next chunk, and the block area is copied
 * as it grows under the products.  f = w1 . (M x) + w2 . (M c) with x
 * active and c constant: df/dM = w1 x^T + w2 c^T, df/dx = M^T w1. */
#define BIG 260

typedef struct big_ctx {
    const double *c, *w1, *w2;
} big_ctx;

static ad_real big_objective(const ad_real *z, size_t nz, void *ctx)
{
    const big_ctx *b = ctx;
    ad_real *y = xmalloc(2 * BIG * sizeof *y);
    ad_mat M;
    (void)nz;
    EXPECT(ad_mat_record(BIG, BIG, z, &M) == AD_OK);
    ad_mat_vec_rr(&M, z + BIG * BIG, y);
    ad_mat_vec_rd(&M, b->c, y + BIG);
    ad_real f = ad_add(ad_dot(BIG, y, b->w1), ad_dot(BIG, y + BIG, b->w2));
    free(y);
    return f;
}

static void test_matrix_longer_than_a_chunk(void **state)
{
    size_t nz = BIG * BIG + BIG;
    double *z = xmalloc(nz * sizeof *z), *g = xmalloc(nz * sizeof *g);
    double c[BIG], w1[BIG], w2[BIG];
    uint64_t rng = 0xb16;
    big_ctx b = {c, w1, w2};
    (void)state;
    fill_uniform(&rng, z, nz, -1.0, 1.0);
    fill_uniform(&rng, c, BIG, -1.0, 1.0);
    fill_uniform(&rng, w1, BIG, -1.0, 1.0);
    fill_uniform(&rng, w2, BIG, -1.0, 1.0);
    double fx = gradient_ok(big_objective, &b, nz, z, g);
    const double *A = z, *x = z + BIG * BIG;
    double fw = 0.0, scale = 0.0;
    for (size_t j = 0; j < BIG; j++)
        for (size_t l = 0; l < BIG; l++) {
            fw += w1[j] * A[j * BIG + l] * x[l] + w2[j] * A[j * BIG + l] * c[l];
            scale += fabs(w1[j] * A[j * BIG + l] * x[l]) + fabs(w2[j] * A[j * BIG + l] * c[l]);
        }
    assert_near(fx, fw, 0.0, 1e-14 * scale);
    for (size_t j = 0; j < BIG; j++)
        for (size_t l = 0; l < BIG; l++)
            assert_near(g[j * BIG + l], w1[j] * x[l] + w2[j] * c[l], 1e-15, 1e-16);
    for (size_t l = 0; l < BIG; l++) {
        double s = 0.0, sc = 0.0;
        for (size_t j = 0; j < BIG; j++) {
            s += A[j * BIG + l] * w1[j];
            sc += fabs(A[j * BIG + l] * w1[j]);
        }
        assert_near(g[BIG * BIG + l], s, 0.0, 1e-14 * sc);
    }
    assert_int_equal(last_records(), 1 + BIG * BIG + 2 * (1 + BIG) + 2 * nary_records(BIG) + 1);
    assert_int_equal(last_block_bytes(), matrix_block_bytes(BIG, BIG) +
                                             product_block_bytes(BIG, BIG, 1) +
                                             product_block_bytes(BIG, BIG, 0));
    free(z), free(g);
}

/* Record counts for single products of every shape: entries and vector
 * straight from the inputs, f = ad_sum(m, y). */
typedef struct count_case {
    size_t m, n;
    int x_active;  /* 0: ad_mat_vec_rd; 1: ad_mat_vec_rr, x the inputs; 2: _rr, x constant */
} count_case;

static ad_real count_objective(const ad_real *z, size_t nz, void *ctx)
{
    count_case *c = ctx;
    ad_real y[8];
    ad_mat M;
    (void)nz;
    EXPECT(ad_mat_record(c->m, c->n, z, &M) == AD_OK);
    if (c->x_active == 1) {
        ad_mat_vec_rr(&M, z + c->m * c->n, y);
    } else if (c->x_active == 2) {  /* an ad_real x of constants: stored as values only */
        ad_real x[8];
        for (int l = 0; l < 8; l++)
            x[l] = ad_const(l + 1.0);
        ad_mat_vec_rr(&M, x, y);
    } else {
        ad_mat_vec_rd(&M, (const double[8]){1, 2, 3, 4, 5, 6, 7, 8}, y);
    }
    return ad_sum(c->m, y);
}

static void test_record_counts(void **state)
{
    double z[80], g[80];
    (void)state;
    for (size_t i = 0; i < 80; i++)
        z[i] = 0.01 * (double)i - 0.3;
    for (size_t d = 0; d < NDIMS; d++)
        for (int x_active = 0; x_active < 3; x_active++) {
            count_case c = {dims[d].m, dims[d].n, x_active};
            size_t m = c.m, n = c.n, mn = m * n;
            if (m > 8 || n > 8)
                continue;
            gradient_ok(count_objective, &c, mn + n, z, g);
            size_t want = 0, bytes = 0;
            if (mn) {  /* the matrix, the product, ad_sum over its outputs */
                want = 1 + mn + 1 + m + nary_records(m);
                bytes = matrix_block_bytes(m, n) + product_block_bytes(m, n, x_active == 1);
            }  /* else nothing is active: y = 0, constants */
            assert_int_equal(last_records(), want);
            assert_int_equal(last_block_bytes(), bytes);
            for (size_t j = 0; j < m; j++)
                for (size_t l = 0; l < n; l++)
                    assert_same(g[j * n + l], x_active == 1 ? z[mn + l] : (double)(l + 1));
        }
}

/* ======================================================================
 * 4. Products of products, one matrix in both forms, several matrices
 * ====================================================================== */

/* Inputs z (30): A = z[0..16) as 4 x 4 (some entries sin z_k, some
 * constants); B = z[16..24) as 4 x 2, with B(0, 1) a constant 0 (LOWER);
 * x = z[24..28); u = z[28..30).
 *   y1 = A x;  y2 = A y1 = A (A x);  y3 = A c (c constant);  y4 = B u;
 *   C = [y1_0 y2_1; y4_3 1/2], recorded: its entries are products' outputs;
 *   y5 = C (y3_0, y3_1);
 *   f = w . y2 + y3 . y4 + |y5|^2 + y1_2.
 * As a vector function: (y2, y5, y4), 10 outputs.  With `small`, z is
 * itself computed from 3 inputs p: z_k = sin(p_(k mod 3) (1 + k / 10)). */
#define CH_N 30
#define CH_M 10
#define CH_P 3

typedef struct chain_ctx {
    int unrolled;  /* the oracle: every product as scalar records */
    int small;     /* 3 inputs p, z computed from them */
    int pick;      /* the objective: f (-1), or output `pick` of (y2, y5, y4) */
    int shape_b, shape_c;
    ad_status got;  /* the first error of ad_mat_record */
} chain_ctx;

static chain_ctx chain_make(int unrolled, int small, int pick)
{
    chain_ctx c = {.unrolled = unrolled, .small = small, .pick = pick, .shape_b = -1, .shape_c = -1,
                   .got = AD_OK};
    return c;
}

static void keep_status(ad_status *kept, ad_status s)
{
    if (*kept == AD_OK)
        *kept = s;
}

static const double ch_c[4] = {0.5, -1.0, 1.5, 2.0};
static const double ch_w[4] = {1.0, -0.5, 0.25, 2.0};

static void mv_rr(const chain_ctx *c, const ad_mat *M, size_t m, size_t n, const ad_real *A,
                  const ad_real *x, ad_real *y)
{
    if (c->unrolled)
        unrolled_mv(m, n, A, x, y);
    else
        ad_mat_vec_rr(M, x, y);
}

static void mv_rd(const chain_ctx *c, const ad_mat *M, size_t m, size_t n, const ad_real *A,
                  const double *x, ad_real *y)
{
    if (c->unrolled) {
        ad_real xc[8];
        for (size_t l = 0; l < n; l++)
            xc[l] = ad_const(x[l]);
        unrolled_mv(m, n, A, xc, y);
    } else {
        ad_mat_vec_rd(M, x, y);
    }
}

static ad_real chain_ad(chain_ctx *c, const ad_real *in, ad_real *out)
{
    ad_real zz[CH_N], A[16], B[8], C[4], y1[4], y2[4], y3[4], y4[4], y5[2];
    ad_mat MA, MB, MC;
    const ad_real *z = in;
    if (c->small) {
        for (int k = 0; k < CH_N; k++)
            zz[k] = ad_sin(ad_mul(in[k % 3], 1.0 + 0.1 * k));
        z = zz;
    }
    for (int k = 0; k < 16; k++)
        A[k] = k % 5 == 4 ? ad_const(0.25 * k) : k % 2 ? ad_sin(z[k]) : z[k];
    for (int k = 0; k < 8; k++)
        B[k] = k == 1 ? ad_const(0.0) : z[16 + k];
    if (!c->unrolled) {
        keep_status(&c->got, ad_mat_record(4, 4, A, &MA));
        keep_status(&c->got, ad_mat_record(4, 2, B, &MB));
        c->shape_b = MB.shape;
    }
    mv_rr(c, &MA, 4, 4, A, z + 24, y1);
    mv_rr(c, &MA, 4, 4, A, y1, y2);
    mv_rd(c, &MA, 4, 4, A, ch_c, y3);
    mv_rr(c, &MB, 4, 2, B, z + 28, y4);
    C[0] = y1[0], C[1] = y2[1], C[2] = y4[3], C[3] = ad_const(0.5);
    if (!c->unrolled) {
        keep_status(&c->got, ad_mat_record(2, 2, C, &MC));
        c->shape_c = MC.shape;
    }
    mv_rr(c, &MC, 2, 2, C, y3, y5);
    if (out) {
        memcpy(out, y2, sizeof y2);
        memcpy(out + 4, y5, sizeof y5);
        memcpy(out + 6, y4, sizeof y4);
    }
    ad_real f = ad_add(ad_add(ad_dot(4, y2, ch_w), ad_dot(4, y3, y4)),
                       ad_add(ad_sqnorm(2, y5), y1[2]));
    return f;
}

static double chain_d(const chain_ctx *c, const double *in, double *out)
{
    double zz[CH_N], A[16], B[8], C[4], y1[4], y2[4], y3[4], y4[4], y5[2];
    const double *z = in;
    if (c->small) {
        for (int k = 0; k < CH_N; k++)
            zz[k] = sin(in[k % 3] * (1.0 + 0.1 * k));
        z = zz;
    }
    for (int k = 0; k < 16; k++)
        A[k] = k % 5 == 4 ? 0.25 * k : k % 2 ? sin(z[k]) : z[k];
    for (int k = 0; k < 8; k++)
        B[k] = k == 1 ? 0.0 : z[16 + k];
    plain_mv(4, 4, A, z + 24, y1);
    plain_mv(4, 4, A, y1, y2);
    plain_mv(4, 4, A, ch_c, y3);
    plain_mv(4, 2, B, z + 28, y4);
    C[0] = y1[0], C[1] = y2[1], C[2] = y4[3], C[3] = 0.5;
    plain_mv(2, 2, C, y3, y5);
    if (out) {
        memcpy(out, y2, sizeof y2);
        memcpy(out + 4, y5, sizeof y5);
        memcpy(out + 6, y4, sizeof y4);
    }
    double f = 0.0, d = 0.0;
    for (int j = 0; j < 4; j++) {
        f += y2[j] * ch_w[j];
        d += y3[j] * y4[j];
    }
    return f + d + (y5[0] * y5[0] + y5[1] * y5[1]) + y1[2];
}

static ad_real chain_objective(const ad_real *z, size_t n, void *ctx)
{
    chain_ctx *c = ctx;
    ad_real out[CH_M];
    (void)n;
    ad_real f = chain_ad(c, z, out);
    return c->pick < 0 ? f : out[c->pick];
}

static double chain_pick_d(const chain_ctx *c, const double *z)
{
    double out[CH_M];
    double f = chain_d(c, z, out);
    return c->pick < 0 ? f : out[c->pick];
}

typedef struct chain_point {
    const chain_ctx *c;
    double *z;
    size_t i;
} chain_point;

static double chain_coordinate(double t, const void *ctx)
{
    const chain_point *p = ctx;
    double saved = p->z[p->i];
    p->z[p->i] = t;
    double f = chain_pick_d(p->c, p->z);
    p->z[p->i] = saved;
    return f;
}

static void test_compositions(void **state)
{
    static const int picks[] = {-1, 1, 0, 4, 9};  /* f; outputs of y2, y5, y4 */
    uint64_t rng = 0xc4a1;
    (void)state;
    for (int small = 0; small < 2; small++)
        for (size_t pk = 0; pk < sizeof picks / sizeof picks[0]; pk++)
            for (int trial = 0; trial < 3; trial++) {
                size_t n = small ? CH_P : CH_N;
                double z[CH_N], g[CH_N], gu[CH_N];
                chain_ctx c = chain_make(0, small, picks[pk]), u = c;
                u.unrolled = 1;
                fill_uniform(&rng, z, n, -1.0, 1.0);
                double fx = gradient_ok(chain_objective, &c, n, z, g);
                double fu = gradient_ok(chain_objective, &u, n, z, gu);
                assert_int_equal(c.got, AD_OK);
                assert_int_equal(c.shape_b, AD__LOWER);
                assert_int_equal(c.shape_c, AD__FULL);
                double fw = chain_pick_d(&c, z);
                assert_near(fx, fw, 1e-13, 1e-14);
                assert_near(fu, fw, 1e-13, 1e-14);
                assert_vec_near(g, gu, n, 1e-12);
                if (trial == 0)
                    for (size_t i = 0; i < n; i++) {
                        chain_point p = {&c, z, i};
                        fd_result fd = fd_derivative(chain_coordinate, &p, z[i]);
                        assert_near(g[i], fd.d, 1e-7, fd.noise + 1e-9);
                    }
            }
}

/* A matrix recorded and not used, and one recorded twice from the same
 * entries: nothing changes but the tape. */
static ad_real twice_objective(const ad_real *z, size_t n, void *ctx)
{
    ad_mat M1, M2, unused;
    ad_real y1[2], y2[2];
    (void)n, (void)ctx;
    EXPECT(ad_mat_record(2, 2, z, &unused) == AD_OK);
    EXPECT(ad_mat_record(2, 2, z, &M1) == AD_OK);
    EXPECT(ad_mat_record(2, 2, z, &M2) == AD_OK);
    EXPECT(M2.id == M1.id + 5 && M1.id == unused.id + 5);
    ad_mat_vec_rr(&M1, z + 4, y1);
    ad_mat_vec_rr(&M2, z + 4, y2);
    return ad_add(ad_mul(y1[0], y2[1]), y1[1]);
}

static void test_matrix_recorded_twice(void **state)
{
    const double z[6] = {0.5, -1.0, 2.0, 0.25, 3.0, -2.0};
    double g[6];
    (void)state;
    double y0 = 0.5 * 3.0 - 1.0 * -2.0, y1 = 2.0 * 3.0 + 0.25 * -2.0;
    assert_same(gradient_ok(twice_objective, NULL, 6, z, g), y0 * y1 + y1);
    /* d/dA: y1 x^T e0 e0... : f = y0 y1 + y1 */
    const double want[6] = {3.0 * y1, -2.0 * y1, 3.0 * (y0 + 1.0), -2.0 * (y0 + 1.0),
                            0.5 * y1 + 2.0 * (y0 + 1.0), -1.0 * y1 + 0.25 * (y0 + 1.0)};
    for (int i = 0; i < 6; i++)
        assert_near(g[i], want[i], 1e-15, 0.0);
    assert_int_equal(last_records(), 3 * 5 + 2 * 3 + 2);
}

/* ======================================================================
 * 5. Jacobians
 * ====================================================================== */

typedef struct chain_fn {
    chain_ctx c;
    size_t m;  /* outputs kept: the first m of (y2, y5, y4) */
} chain_fn;

static void chain_f(const ad_real *z, size_t n, ad_real *y, size_t m, void *ctx)
{
    chain_fn *cf = ctx;
    ad_real out[CH_M];
    (void)n;
    chain_ad(&cf->c, z, out);
    for (size_t j = 0; j < m; j++)
        y[j] = out[j];
}

typedef struct chain_entry {
    const chain_ctx *c;
    double *z;
    size_t i, j;
} chain_entry;

static double chain_output(double t, const void *ctx)
{
    const chain_entry *e = ctx;
    double out[CH_M], saved = e->z[e->i];
    e->z[e->i] = t;
    chain_d(e->c, e->z, out);
    e->z[e->i] = saved;
    return out[e->j];
}

static double dot_n(const double *a, const double *b, size_t n, double *scale)
{
    double s = 0.0;
    *scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        s += a[i] * b[i];
        *scale += fabs(a[i] * b[i]);
    }
    return s;
}

/* got = J v, or J^T v, to 1e-13 of the magnitude of the terms. */
static void check_product(const double *got, const double *J, size_t m, size_t n, const double *v,
                          int transposed, const char *file, int line)
{
    for (size_t r = 0; r < (transposed ? n : m); r++) {
        double want = 0.0, scale = 0.0;
        for (size_t k = 0; k < (transposed ? m : n); k++) {
            double t = transposed ? v[k] * J[k * n + r] : J[r * n + k] * v[k];
            want += t;
            scale += fabs(t);
        }
        check_near(got[r], want, 0.0, 1e-13 * scale + 1e-300, "product", file, line);
    }
}
#define assert_jv(got, J, m, n, v) check_product((got), (J), (m), (n), (v), 0, __FILE__, __LINE__)
#define assert_wj(got, J, m, n, w) check_product((got), (J), (m), (n), (w), 1, __FILE__, __LINE__)

/* The columns each row of a sparse Jacobian lists, as flags. */
static void sparse_flags(const ad_csr *S, size_t n, size_t j, char *flags)
{
    memset(flags, 0, n);
    for (size_t k = S->row_ptr[j]; k < S->row_ptr[j + 1]; k++)
        flags[S->col[k]] = 1;
}

/* ad_sparse_jacobian of f (the recorded matrices) against the dense
 * Jacobian J and the structure of the unrolled oracle u: every nonzero of
 * J is listed, with the dense value, and every column listed is one the
 * oracle's function reaches.  The oracle may list more: its 0 x x records
 * reach x through entries that products skip as structural zeros
 * (test_sparse_structure checks the exact structure where the oracle
 * skips them too). */
static size_t check_sparse(ad_function f, void *ctx, void *uctx, size_t n, const double *z,
                           size_t m, const double *y, const double *J, int hashed)
{
    ad_csr S, U;
    double *y2 = xmalloc(m * sizeof *y2);
    char *got = xmalloc(n), *want = xmalloc(n), *reach = xmalloc(n);
    ad_test_sparse_force_hash(hashed);
    ad_status st = ad_sparse_jacobian(f, ctx, n, z, m, y2, &S);
    ad_status su = ad_sparse_jacobian(f, uctx, n, z, m, y2, &U);
    ad_test_sparse_force_hash(0);
    assert_int_equal(st, AD_OK);
    assert_int_equal(su, AD_OK);
    assert_csr_valid(&S, m, n);
    assert_csr_valid(&U, m, n);
    memset(reach, 0, n);
    for (size_t j = 0; j < m; j++)
        for (size_t k = U.row_ptr[j]; k < U.row_ptr[j + 1]; k++)
            reach[U.col[k]] = 1;
    for (size_t j = 0; j < m; j++) {
        assert_near(y2[j], y[j], 1e-14, 1e-300);
        sparse_flags(&S, n, j, got);
        sparse_flags(&U, n, j, want);
        double scale = 0.0;
        for (size_t i = 0; i < n; i++)
            scale = fmax(scale, fabs(J[j * n + i]));
        for (size_t k = S.row_ptr[j]; k < S.row_ptr[j + 1]; k++)
            assert_near(S.val[k], J[j * n + S.col[k]], 1e-12, 1e-13 * scale + 1e-300);
        for (size_t i = 0; i < n; i++) {
            if (got[i] && !reach[i]) {
                print_error("row %zu, column %zu (%s store): listed %d, by the oracle %d, "
                            "reached by the function %d\n",
                            j, i, hashed ? "hashed" : "dense", got[i], want[i], reach[i]);
                fail();
            }
            if (J[j * n + i] != 0.0)
                assert_true(got[i]);
        }
    }
    size_t nnz = S.nnz;
    ad_csr_free(&S);
    ad_csr_free(&U);
    free(y2), free(got), free(want), free(reach);
    return nnz;
}

static void check_jacobians(int small, size_t m, uint64_t *rng)
{
    size_t n = small ? CH_P : CH_N;
    double z[CH_N], y[CH_M], yu[CH_M], yw[CH_M], J[CH_M * CH_N], Ju[CH_M * CH_N];
    double v[CH_N], w[CH_M], jv[CH_M], wj[CH_N], y2[CH_M];
    chain_fn cf = {chain_make(0, small, -1), m}, uf = cf;
    uf.c.unrolled = 1;
    fill_uniform(rng, z, n, -1.0, 1.0);
    chain_d(&cf.c, z, yw);

    /* Forward sweeps when n <= m, reverse when n > m; the oracle's
     * Jacobian by the same API over scalar records, and by differences. */
    assert_int_equal(ad_jacobian(chain_f, &cf, n, z, m, y, J), AD_OK);
    assert_int_equal(ad_jacobian(chain_f, &uf, n, z, m, yu, Ju), AD_OK);
    assert_int_equal(cf.c.got, AD_OK);
    for (size_t j = 0; j < m; j++) {
        assert_near(y[j], yw[j], 1e-14, 1e-300);
        assert_near(yu[j], yw[j], 1e-14, 1e-300);
        assert_vec_near(J + j * n, Ju + j * n, n, 1e-12);
        for (size_t i = 0; i < n; i++) {
            chain_entry e = {&cf.c, z, i, j};
            fd_result fd = fd_derivative(chain_output, &e, z[i]);
            assert_near(J[j * n + i], fd.d, 1e-7, fd.noise + 1e-9);
        }
    }

    /* J v, J^T w, and <w, J v> = <J^T w, v>. */
    for (int trial = 0; trial < 3; trial++) {
        double sl, sr;
        fill_uniform(rng, v, n, -1.0, 1.0);
        fill_uniform(rng, w, m, -1.0, 1.0);
        assert_int_equal(ad_jvp(chain_f, &cf, n, z, v, m, y2, jv), AD_OK);
        assert_jv(jv, J, m, n, v);
        for (size_t j = 0; j < m; j++)
            assert_same(y2[j], y[j]);
        assert_int_equal(ad_vjp(chain_f, &cf, n, z, m, w, y2, wj), AD_OK);
        assert_wj(wj, J, m, n, w);
        double lhs = dot_n(w, jv, m, &sl), rhs = dot_n(wj, v, n, &sr);
        assert_near(lhs, rhs, 0.0, 1e-13 * (sl + sr));
    }

    /* One linearisation, applied 20 times each way. */
    ad_linear *L = NULL;
    assert_int_equal(ad_linearize(chain_f, &cf, n, z, m, y2, &L), AD_OK);
    for (size_t j = 0; j < m; j++)
        assert_same(y2[j], y[j]);
    for (int round = 0; round < 20; round++) {
        fill_uniform(rng, v, n, -1.0, 1.0);
        fill_uniform(rng, w, m, -1.0, 1.0);
        assert_int_equal(ad_linear_jvp(L, v, jv), AD_OK);
        assert_jv(jv, J, m, n, v);
        assert_int_equal(ad_linear_vjp(L, w, wj), AD_OK);
        assert_wj(wj, J, m, n, w);
        if (round == 10) {  /* other recordings on this thread in between */
            double g[CH_N];
            chain_ctx other = chain_make(0, 0, -1);
            double zo[CH_N];
            fill_uniform(rng, zo, CH_N, -1.0, 1.0);
            gradient_ok(chain_objective, &other, CH_N, zo, g);
        }
    }
    ad_linear_free(L);

    check_sparse(chain_f, &cf, &uf, n, z, m, y, J, 0);
    check_sparse(chain_f, &cf, &uf, n, z, m, y, J, 1);
}

static void test_jacobians(void **state)
{
    uint64_t rng = 0x1ac0;
    (void)state;
    for (int trial = 0; trial < 3; trial++) {
        check_jacobians(1, CH_M, &rng);  /* n = 3 <= m = 10: forward sweeps */
        check_jacobians(1, 2, &rng);     /* n = 3 > m = 2: reverse, two lanes */
        check_jacobians(0, CH_M, &rng);  /* n = 30 > m: reverse */
        check_jacobians(0, 1, &rng);     /* one row, an output below its block's top */
    }
}

/* The sparse structure of y = L x (L 3 x 3 lower, from inputs) and
 * v = N u (N 2 x 2): inputs L (9: the upper ones unused), x (3), N (4),
 * u (2).  Row j of y depends on L(j, 0..j) and x_0..x_j; what
 * ad_sparse_jacobian lists is pinned below. */
typedef struct two_ctx {
    int unrolled;
} two_ctx;

static void two_f(const ad_real *z, size_t n, ad_real *y, size_t m, void *ctx)
{
    two_ctx *c = ctx;
    ad_real L[9];
    ad_mat ML, MN;
    (void)n, (void)m;
    for (int k = 0; k < 9; k++)
        L[k] = k % 3 > k / 3 ? ad_const(0.0) : z[k];
    if (c->unrolled) {  /* over the entries inside the shape only */
        for (int j = 0; j < 3; j++) {
            y[j] = ad_const(0.0);
            for (int l = 0; l <= j; l++)
                y[j] = ad_add(y[j], ad_mul(L[j * 3 + l], z[9 + l]));
        }
        unrolled_mv(2, 2, z + 12, z + 16, y + 3);
        return;
    }
    status_unused(ad_mat_record(3, 3, L, &ML));
    status_unused(ad_mat_record(2, 2, z + 12, &MN));
    ad_mat_vec_rr(&ML, z + 9, y);
    ad_mat_vec_rr(&MN, z + 16, y + 3);
}

static void test_sparse_structure(void **state)
{
    /* The exact structure (the unrolled oracle's, over the entries inside
     * the shape): a product says which arguments each output depends on
     * (its row's entries inside the shape, and x there), so the sparse
     * Jacobian lists exactly those. */
    static const char *const exact[5] = {
        "1........1........", "...11....11.......", "......111111......",
        "............11..11", "..............1111",
    };
    double z[18], y[5], J[5 * 18];
    uint64_t rng = 0x5ec;
    two_ctx c = {0}, u = {1};
    (void)state;
    fill_uniform(&rng, z, 18, 0.5, 1.5);
    assert_int_equal(ad_jacobian(two_f, &c, 18, z, 5, y, J), AD_OK);
    for (int hashed = 0; hashed < 2; hashed++) {
        ad_csr S, U;
        char got[19], want[19];
        ad_test_sparse_force_hash(hashed);
        assert_int_equal(ad_sparse_jacobian(two_f, &c, 18, z, 5, y, &S), AD_OK);
        assert_int_equal(ad_sparse_jacobian(two_f, &u, 18, z, 5, y, &U), AD_OK);
        ad_test_sparse_force_hash(0);
        for (size_t j = 0; j < 5; j++) {
            memset(got, '.', 18);
            memset(want, '.', 18);
            got[18] = want[18] = 0;
            for (size_t k = S.row_ptr[j]; k < S.row_ptr[j + 1]; k++) {
                got[S.col[k]] = '1';
                assert_near(S.val[k], J[j * 18 + S.col[k]], 1e-15, 1e-300);
            }
            for (size_t k = U.row_ptr[j]; k < U.row_ptr[j + 1]; k++)
                want[U.col[k]] = '1';
            assert_string_equal(want, exact[j]);
            assert_string_equal(got, exact[j]);
        }
        assert_int_equal(S.nnz, 2 + 4 + 6 + 4 + 4);
        assert_int_equal(U.nnz, 2 + 4 + 6 + 4 + 4);
        ad_csr_free(&S);
        ad_csr_free(&U);
    }
    check_sparse(two_f, &c, &u, 18, z, 5, y, J, 0);
}

/* ======================================================================
 * 6. One source for double and ad_real
 * ====================================================================== */

/* A (3 x 4, full) and L (3 x 3, constant zeros above the diagonal) from
 * p (5); y = A x, yc = A c (c a double vector), t = L y;
 * f = t . yc + sum y + |t|^2.  With T = double, ad_mat_make wraps and
 * ad_mat_vec is the plain product. */
#define DEFINE_SHARED(T, name)                                                     \
    static T name(const T *p, size_t n, void *ctx)                                 \
    {                                                                              \
        const double *c = ctx;                                                     \
        T A[12], L[9], x[4], y[3], yc[3], t[3];                                    \
        ad_mat M, ML;                                                              \
        (void)n;                                                                   \
        for (int k = 0; k < 12; k++)                                               \
            A[k] = ad_mul(p[k % 5], AD_CONST(T, 0.5 + k));                         \
        for (int k = 0; k < 9; k++)                                                \
            L[k] = k % 3 > k / 3 ? AD_CONST(T, 0.0) : ad_sin(p[(k + 2) % 5]);       \
        for (int l = 0; l < 4; l++)                                                \
            x[l] = ad_exp(ad_mul(p[l + 1], 0.3));                                  \
        if (ad_mat_make(3, 4, A, &M) != AD_OK || ad_mat_make(3, 3, L, &ML) != AD_OK \
            || ML.shape != AD__LOWER || M.shape != AD__FULL)                       \
            return AD_CONST(T, NAN);                                               \
        ad_mat_vec(&M, x, y);                                                      \
        ad_mat_vec(&M, c, yc);                                                     \
        ad_mat_vec(&ML, y, t);                                                     \
        return ad_add(ad_add(ad_dot(3, t, yc), ad_sum(3, y)), ad_sqnorm(3, t));     \
    }

DEFINE_SHARED(double, shared_double)
DEFINE_SHARED(ad_real, shared_ad)

typedef struct shared_point {
    double p[5];
    const double *c;
    size_t i;
} shared_point;

static double shared_coordinate(double t, const void *ctx)
{
    shared_point s = *(const shared_point *)ctx;
    s.p[s.i] = t;
    return shared_double(s.p, 5, (void *)s.c);
}

static void test_shared_source(void **state)
{
    static const double c[4] = {0.75, -1.25, 0.5, 2.0};
    uint64_t rng = 0x5a5e;
    (void)state;
    for (int trial = 0; trial < 10; trial++) {
        double p[5], g[5], fx;
        fill_uniform(&rng, p, 5, -1.0, 1.0);
        fx = gradient_ok(shared_ad, (void *)c, 5, p, g);
        assert_same(fx, shared_double(p, 5, (void *)c));
        /* Outside a recording the ad_real source computes the same. */
        ad_real pc[5];
        for (int i = 0; i < 5; i++)
            pc[i] = ad_const(p[i]);
        ad_real out = shared_ad(pc, 5, (void *)c);
        assert_same(out.v, fx);
        assert_int_equal(out.id, 0);
        for (size_t i = 0; i < 5; i++) {
            shared_point s;
            memcpy(s.p, p, sizeof p);
            s.c = c;
            s.i = i;
            fd_result fd = fd_derivative(shared_coordinate, &s, p[i]);
            assert_near(g[i], fd.d, 1e-7, fd.noise + 1e-9);
        }
    }
}

/* ======================================================================
 * 7. Errors
 * ====================================================================== */

enum null_arg {
    N_RECORD_M, N_RECORD_A, N_WRAP_M, N_WRAP_A, N_VEC_M, N_VEC_X, N_VEC_XD, N_VEC_Y, N_VEC_D_M,
    NULL_ARGS
};

typedef struct null_case {
    enum null_arg which;
    ad_status got;
    double y[2];
} null_case;

/* The bad call, on a 2 x 2 matrix (entries z0..z3) and x = (z4, z5). */
static void null_call(null_case *c, const ad_real *z)
{
    const double D[4] = {1, 2, 3, 4}, xd[2] = {0.5, 0.25};
    ad_real y[2] = {{7.0, 0, 0}, {7.0, 0, 0}};
    double yd[2] = {7.0, 7.0};
    ad_mat M;
    c->got = AD_OK;
    switch (c->which) {
    case N_RECORD_M: c->got = ad_mat_record(2, 2, z, NULL); break;
    case N_RECORD_A: c->got = ad_mat_record(2, 2, NULL, &M); break;
    case N_WRAP_M: c->got = ad_mat_wrap(2, 2, D, NULL); break;
    case N_WRAP_A: c->got = ad_mat_wrap(2, 2, NULL, &M); break;
    case N_VEC_M: ad_mat_vec_rr(NULL, z + 4, y); break;
    case N_VEC_X:
        EXPECT(ad_mat_record(2, 2, z, &M) == AD_OK);
        ad_mat_vec_rr(&M, NULL, y);
        break;
    case N_VEC_XD:
        EXPECT(ad_mat_record(2, 2, z, &M) == AD_OK);
        ad_mat_vec_rd(&M, NULL, y);
        break;
    case N_VEC_Y:
        EXPECT(ad_mat_record(2, 2, z, &M) == AD_OK);
        ad_mat_vec_rr(&M, z + 4, NULL);
        break;
    default:
        ad_mat_vec_d(NULL, xd, yd);
        y[0].v = yd[0], y[1].v = yd[1];
        break;
    }
    c->y[0] = y[0].v;
    c->y[1] = y[1].v;
}

static ad_real null_objective(const ad_real *z, size_t n, void *ctx)
{
    (void)n;
    null_call(ctx, z);
    return ad_add(ad_mul(z[0], z[1]), z[4]);
}

static void test_null_arguments(void **state)
{
    const double z[6] = {0.5, -0.25, 1.5, 2.0, -1.0, 0.75};
    (void)state;
    for (int which = 0; which < NULL_ARGS; which++) {
        null_case c = {(enum null_arg)which, AD_OK, {0, 0}};
        double fx = 0.0, g[6] = {0};
        /* In a recording: the call fails, and so does the recording. */
        assert_int_equal(ad_gradient(null_objective, &c, 6, z, &fx, g), AD_EINVAL);
        assert_all_nan(fx, g, 6);
        if (which <= N_WRAP_A)
            assert_int_equal(c.got, AD_EINVAL);
        if (which == N_VEC_X || which == N_VEC_XD) {  /* y is NaN */
            assert_nan(c.y[0]);
            assert_nan(c.y[1]);
        } else if (which == N_VEC_M || which == N_VEC_D_M) {  /* no M: y untouched */
            assert_same(c.y[0], 7.0);
            assert_same(c.y[1], 7.0);
        }
        /* Outside a recording: the same status, nothing else happens. */
        ad_real zc[6];
        for (int i = 0; i < 6; i++)
            zc[i] = ad_const(z[i]);
        null_call(&c, zc);
        if (which <= N_WRAP_A)
            assert_int_equal(c.got, AD_EINVAL);
        if (which == N_VEC_X || which == N_VEC_XD) {
            assert_nan(c.y[0]);
            assert_nan(c.y[1]);
        }
        /* The thread's next recording is unaffected. */
        chain_ctx ok = chain_make(0, 1, -1);
        double gz[CH_P];
        gradient_ok(chain_objective, &ok, CH_P, z, gz);
    }
}

/* Empty matrices need no arrays: m x 0 and 0 x n with NULL entries; an
 * m x 0 product has no vector and gives zeros; a 0 x n one writes
 * nothing. */
typedef struct empty_ctx {
    ad_status got[4];
    ad_real y[3];
} empty_ctx;

static ad_real empty_objective(const ad_real *z, size_t n, void *ctx)
{
    empty_ctx *c = ctx;
    ad_mat A, B, W;
    ad_real y0[1] = {{7.0, 7, 0}};
    (void)n;
    c->got[0] = ad_mat_record(3, 0, NULL, &A);
    c->got[1] = ad_mat_record(0, 3, NULL, &B);
    c->got[2] = ad_mat_wrap(0, 0, NULL, &W);
    c->got[3] = ad_mat_wrap(2, 0, NULL, &W);
    ad_mat_vec_rr(&A, NULL, c->y);
    ad_mat_vec_rd(&A, NULL, c->y);
    ad_mat_vec_rr(&B, z, y0);
    ad_mat_vec_rd(&B, (const double[3]){1, 2, 3}, y0);
    ad_mat_vec_rr(&W, NULL, c->y + 1);
    EXPECT(y0[0].v == 7.0);
    return ad_add(ad_mul(z[0], c->y[0]), ad_mul(z[1], z[2]));
}

static void test_empty_matrices(void **state)
{
    const double z[3] = {1.0, 2.0, 3.0};
    double g[3];
    empty_ctx c;
    (void)state;
    memset(&c, 0, sizeof c);
    assert_same(gradient_ok(empty_objective, &c, 3, z, g), 6.0);
    for (int i = 0; i < 4; i++)
        assert_int_equal(c.got[i], AD_OK);
    for (int j = 0; j < 3; j++) {
        assert_same(c.y[j].v, 0.0);
        assert_int_equal(c.y[j].id, 0);
    }
    assert_same(g[0], 0.0);
    assert_same(g[1], 3.0);
    assert_same(g[2], 2.0);
    assert_int_equal(last_block_bytes(), 0);
}

/* Outside a recording ad_mat_record returns AD_OK with ID 0 and records
 * nothing; products are plain values (ID 0), even from entries and
 * vectors that carry stale IDs. */
static void test_outside_recording(void **state)
{
    uint64_t rng = 0x0ff;
    (void)state;
    for (size_t d = 0; d < NDIMS; d++) {
        size_t m = dims[d].m, n = dims[d].n;
        ad_real A[49], x[7], y[7];
        double D[49], xd[7], yw[7];
        ad_mat M;
        fill_uniform(&rng, D, m * n, -1.0, 1.0);
        fill_uniform(&rng, xd, n, -1.0, 1.0);
        for (size_t k = 0; k < m * n; k++)
            A[k].v = D[k], A[k].id = (uint32_t)(k + 3);
        for (size_t l = 0; l < n; l++)
            x[l].v = xd[l], x[l].id = (uint32_t)(l + 1);
        plain_mv(m, n, D, xd, yw);
        assert_int_equal(ad_mat_record(m, n, A, &M), AD_OK);
        assert_int_equal(M.id, 0);
        ad_mat_vec_rr(&M, x, y);
        for (size_t j = 0; j < m; j++) {
            assert_same(y[j].v, yw[j]);
            assert_int_equal(y[j].id, 0);
        }
        ad_mat_vec_rd(&M, xd, y);
        for (size_t j = 0; j < m; j++) {
            assert_same(y[j].v, yw[j]);
            assert_int_equal(y[j].id, 0);
        }
    }
    /* Not even AD_ERANGE for a size past the ID range needs a recording. */
    ad_real one = ad_const(1.0);
    ad_mat M;
    assert_int_equal(ad_mat_record(SIZE_MAX / 2 + 1, 3, &one, &M), AD_ERANGE);
}

/* ---- handles of another recording ---- */

/* Call 1 records M (2 x 3 from z0..z5; with `lower1`, its upper entries
 * constant zeros) and keeps the handle; a later call uses it. */
enum stale_use {
    S_NOTHING,       /* no matrix in the later recording */
    S_OTHER_DIMS,    /* a 3 x 2 matrix where M was */
    S_OTHER_PLACE,   /* a 2 x 3 matrix one record later */
    S_SAME_PLACE,    /* a 2 x 3 matrix just where M was: the IDs match */
    S_USES
};

typedef struct stale {
    int saving;
    int lower1;
    enum stale_use use;
    int rd;           /* the product with a double vector */
    ad_mat saved;
    double y[2];
} stale;

static ad_real stale_objective(const ad_real *z, size_t n, void *ctx)
{
    stale *s = ctx;
    ad_real A[6], y[2];
    ad_mat fresh;
    const double xd[3] = {1.0, -2.0, 0.5};
    (void)n;
    memset(&fresh, 0, sizeof fresh);
    if (s->saving) {
        for (int k = 0; k < 6; k++)
            A[k] = s->lower1 && k % 3 > k / 3 ? ad_const(0.0) : z[k];
        EXPECT(ad_mat_record(2, 3, A, &s->saved) == AD_OK);
        fresh = s->saved;
    } else {
        switch (s->use) {
        case S_NOTHING: break;
        case S_OTHER_DIMS: EXPECT(ad_mat_record(3, 2, z, &fresh) == AD_OK); break;
        case S_OTHER_PLACE: {
            ad_real B[6] = {ad_mul(z[0], 2.0), z[1], z[2], z[3], z[4], z[5]};
            EXPECT(ad_mat_record(2, 3, B, &fresh) == AD_OK);
            break;
        }
        default: EXPECT(ad_mat_record(2, 3, z, &fresh) == AD_OK); break;
        }
    }
    (void)fresh;
    if (s->rd)
        ad_mat_vec_rd(&s->saved, xd, y);
    else
        ad_mat_vec_rr(&s->saved, z + 6, y);
    s->y[0] = y[0].v;
    s->y[1] = y[1].v;
    return ad_add(y[0], ad_mul(y[1], 3.0));
}

static void test_handle_from_another_recording(void **state)
{
    const double z1[9] = {0.5, -1.0, 2.0, 0.25, -0.5, 1.5, 1.0, -2.0, 0.5};
    const double z2[9] = {1.5, 2.0, -1.0, 0.75, 0.5, -2.5, 1.0, -2.0, 0.5};
    (void)state;
    for (int rd = 0; rd < 2; rd++)
        for (int use = 0; use < S_USES; use++)
            for (int lower1 = 0; lower1 < 2; lower1++) {
                stale s;
                double fx, g[9];
                memset(&s, 0, sizeof s);
                s.saving = 1;
                s.lower1 = lower1;
                s.rd = rd;
                gradient_ok(stale_objective, &s, 9, z1, g);
                assert_int_equal(s.saved.shape, lower1 ? AD__LOWER : AD__FULL);
                s.saving = 0;
                s.use = (enum stale_use)use;
                ad_status st = ad_gradient(stale_objective, &s, 9, z2, &fx, g);
                /* Detected in every case, the same place included: the
                 * handle names the recording it belongs to, so a matrix
                 * recorded later at its place, with its first ID and size,
                 * is not taken for it. */
                assert_int_equal(st, AD_EFOREIGN);
                assert_all_nan(fx, g, 9);
                assert_nan(s.y[0]);
                assert_nan(s.y[1]);
            }
}

/* A handle of the outer recording used in a nested one, and one of a
 * nested recording used in the outer after the nested call returned. */
typedef struct nest_ctx {
    ad_mat outer, inner;
    ad_status inner_status, outer_use;
    double inner_fx, inner_g[2];
    double y_inner[2];
} nest_ctx;

static ad_real inner_uses_outer(const ad_real *x, size_t n, void *ctx)
{
    nest_ctx *c = ctx;
    ad_real y[2];
    (void)n;
    ad_mat_vec_rr(&c->outer, x, y);
    c->y_inner[0] = y[0].v;
    return ad_add(y[0], y[1]);
}

static ad_real inner_records(const ad_real *x, size_t n, void *ctx)
{
    nest_ctx *c = ctx;
    ad_real y[2];
    ad_real A[4] = {x[0], x[1], x[1], x[0]};
    (void)n;
    EXPECT(ad_mat_record(2, 2, A, &c->inner) == AD_OK);
    ad_mat_vec_rr(&c->inner, x, y);
    return ad_add(y[0], y[1]);
}

static ad_real outer_objective(const ad_real *z, size_t n, void *ctx)
{
    nest_ctx *c = ctx;
    ad_real y[2];
    const double at[2] = {0.5, 2.0};
    (void)n;
    /* The nested recording first: the outer tape has no block yet. */
    double g2[2], f2;
    EXPECT(ad_gradient(inner_records, c, 2, at, &f2, g2) == AD_OK);
    ad_mat_vec_rr(&c->inner, z, y);  /* foreign here */
    c->outer_use = isnan(y[0].v) ? AD_EFOREIGN : AD_OK;
    return ad_add(y[0], y[1]);
}

static ad_real outer_lends(const ad_real *z, size_t n, void *ctx)
{
    nest_ctx *c = ctx;
    ad_real y[2];
    const double at[2] = {0.5, 2.0};
    (void)n;
    EXPECT(ad_mat_record(2, 2, z, &c->outer) == AD_OK);
    c->inner_status = ad_gradient(inner_uses_outer, c, 2, at, &c->inner_fx, c->inner_g);
    ad_mat_vec_rr(&c->outer, z + 4, y);  /* still fine in its own recording */
    return ad_add(y[0], y[1]);
}

static void test_handles_across_nesting(void **state)
{
    const double z[6] = {1.0, 2.0, 3.0, 4.0, 0.5, -1.0};
    double g[6], fx;
    nest_ctx c;
    (void)state;
    memset(&c, 0, sizeof c);
    fx = gradient_ok(outer_lends, &c, 6, z, g);
    assert_int_equal(c.inner_status, AD_EFOREIGN);
    assert_nan(c.inner_fx);
    assert_nan(c.inner_g[0]);
    assert_nan(c.y_inner[0]);
    assert_same(fx, (1.0 * 0.5 + 2.0 * -1.0) + (3.0 * 0.5 + 4.0 * -1.0));
    const double want[6] = {0.5, -1.0, 0.5, -1.0, 4.0, 6.0};
    for (int i = 0; i < 6; i++)
        assert_same(g[i], want[i]);

    memset(&c, 0, sizeof c);
    assert_int_equal(ad_gradient(outer_objective, &c, 2, z, &fx, g), AD_EFOREIGN);
    assert_int_equal(c.outer_use, AD_EFOREIGN);
    assert_all_nan(fx, g, 2);
}

/* ---- the ID range, the tape limit, memory ---- */

/* A size whose m n overflows size_t: AD_ERANGE before A is read, and the
 * recording fails with it. */
static ad_real huge_objective(const ad_real *z, size_t n, void *ctx)
{
    ad_status *got = ctx;
    ad_mat M;
    (void)n;
    *got = ad_mat_record(SIZE_MAX / 2 + 1, 3, z, &M);
    return z[0];
}

static void test_size_overflow(void **state)
{
    double z = 1.0, fx, g;
    ad_status got = AD_OK;
    (void)state;
    assert_int_equal(ad_gradient(huge_objective, &got, 1, &z, &fx, &g), AD_ERANGE);
    assert_int_equal(got, AD_ERANGE);
    assert_all_nan(fx, &g, 1);
}

/* y = M x (M 2 x 3 = z0..z5, x = z6..z8), f = y0 + y1: a matrix block of
 * 7 records, a product of 3, an add.  Under a tape limit below 11 the
 * recording fails with AD_ERANGE; ad_mat_record itself reports it when its
 * own records do not fit, and the product's outputs are NaN when the
 * product's do not. */
typedef struct limited {
    ad_status got;
    double y0;
} limited;

static ad_real limited_objective(const ad_real *z, size_t n, void *ctx)
{
    limited *c = ctx;
    ad_real y[2];
    ad_mat M;
    (void)n;
    c->got = ad_mat_record(2, 3, z, &M);
    ad_mat_vec_rr(&M, z + 6, y);
    c->y0 = y[0].v;
    return ad_add(y[0], y[1]);
}

static void test_tape_limit(void **state)
{
    const double z[9] = {0.5, -1.0, 2.0, 0.25, -0.5, 1.5, 1.0, -2.0, 0.5};
    double fx, g[9];
    limited c;
    (void)state;
    gradient_ok(limited_objective, &c, 9, z, g);
    assert_int_equal(last_records(), 11);
    ad_set_tape_limit(11);
    gradient_ok(limited_objective, &c, 9, z, g);
    assert_int_equal(c.got, AD_OK);
    for (size_t limit = 10; limit >= 1; limit--) {
        ad_set_tape_limit(limit);
        ad_status s = ad_gradient(limited_objective, &c, 9, z, &fx, g);
        ad_set_tape_limit(0);
        assert_int_equal(s, AD_ERANGE);
        assert_all_nan(fx, g, 9);
        assert_int_equal(c.got, limit < 7 ? AD_ERANGE : AD_OK);
        if (limit >= 7 && limit < 10)
            assert_nan(c.y0);
    }
    ad_set_tape_limit(0);
    gradient_ok(limited_objective, &c, 9, z, g);
}

/* Every allocation of every entry point, failed in turn (from a released
 * thread, and with memory kept from the call before): AD_ENOMEM, NaN
 * outputs, nothing leaked (the sanitizer build checks), and the call
 * succeeds once enough allocations do. */
enum alloc_api {
    A_GRADIENT, A_JAC_FORWARD, A_JAC_REVERSE, A_SPARSE, A_SPARSE_HASH, A_LINEARIZE, A_APIS
};

static void test_alloc_failure(void **state)
{
    uint64_t rng = 0xa110c;
    double z[CH_N], gw[CH_N], Jw[CH_M * CH_N], yw[CH_M];
    (void)state;
    fill_uniform(&rng, z, CH_N, -1.0, 1.0);
    for (int api = 0; api < A_APIS; api++)
        for (int fresh = 0; fresh < 2; fresh++) {
            int successes = 0;
            int small = api == A_JAC_FORWARD;
            size_t n = small ? CH_P : CH_N;
            chain_fn cf = {chain_make(0, small, -1), CH_M};
            double fw = chain_d(&cf.c, z, yw);
            if (api == A_GRADIENT) {
                chain_ctx c = chain_make(0, 0, -1);
                gradient_ok(chain_objective, &c, CH_N, z, gw);
            } else {
                assert_int_equal(ad_jacobian(chain_f, &cf, n, z, CH_M, yw, Jw), AD_OK);
            }
            assert_int_equal(ad_release(), AD_OK);
            for (long i = 0; successes < 3; i++) {
                chain_ctx c = chain_make(0, 0, -1);
                double fx = 7.0, g[CH_N], y[CH_M], J[CH_M * CH_N];
                ad_csr S;
                ad_linear *L = NULL;
                memset(&S, 0, sizeof S);
                fill_uniform(&rng, y, CH_M, 1.0, 2.0);
                if (fresh)
                    assert_int_equal(ad_release(), AD_OK);
                ad_test_sparse_force_hash(api == A_SPARSE_HASH);
                ad_test_fail_alloc_after(i);
                ad_status st;
                switch (api) {
                case A_GRADIENT: st = ad_gradient(chain_objective, &c, CH_N, z, &fx, g); break;
                case A_JAC_FORWARD:
                case A_JAC_REVERSE: st = ad_jacobian(chain_f, &cf, n, z, CH_M, y, J); break;
                case A_SPARSE:
                case A_SPARSE_HASH: st = ad_sparse_jacobian(chain_f, &cf, n, z, CH_M, y, &S); break;
                default: st = ad_linearize(chain_f, &cf, n, z, CH_M, y, &L); break;
                }
                ad_test_fail_alloc_after(-1);
                ad_test_sparse_force_hash(0);
                if (st == AD_OK) {
                    successes++;
                    switch (api) {
                    case A_GRADIENT:
                        assert_near(fx, fw, 1e-13, 1e-14);
                        assert_vec_near(g, gw, CH_N, 1e-14);
                        break;
                    case A_JAC_FORWARD:
                    case A_JAC_REVERSE: assert_vec_near(J, Jw, CH_M * n, 1e-14); break;
                    case A_SPARSE:
                    case A_SPARSE_HASH:
                        assert_csr_valid(&S, CH_M, n);
                        for (size_t j = 0; j < CH_M; j++)
                            for (size_t k = S.row_ptr[j]; k < S.row_ptr[j + 1]; k++)
                                assert_near(S.val[k], Jw[j * n + S.col[k]], 1e-12, 1e-12);
                        ad_csr_free(&S);
                        break;
                    default: {
                        double w[CH_M], wj[CH_N];
                        fill_uniform(&rng, w, CH_M, -1.0, 1.0);
                        assert_int_equal(ad_linear_vjp(L, w, wj), AD_OK);
                        assert_wj(wj, Jw, CH_M, n, w);
                        ad_linear_free(L);
                        break;
                    }
                    }
                    for (size_t j = 0; api != A_GRADIENT && j < CH_M; j++)
                        assert_near(y[j], yw[j], 1e-14, 1e-300);
                    continue;
                }
                assert_alloc_failure(i, st, successes);
                if (api == A_GRADIENT) {
                    assert_all_nan(fx, g, CH_N);
                } else {
                    for (size_t j = 0; j < CH_M; j++)
                        assert_nan(y[j]);
                }
                if (api == A_SPARSE || api == A_SPARSE_HASH)
                    assert_csr_empty(&S);
                if (api == A_LINEARIZE)
                    assert_null(L);
                assert_true(i < 200);
            }
        }
}

/* Memory that runs out inside the recording, at ad_mat_record's block or
 * at a product's: that call fails (ad_mat_record returns AD_ENOMEM; the
 * product's outputs are NaN) and so does the recording.  M is 1 x cols:
 * 40 columns make the product's work array outgrow the matrix's, 330 its
 * block outgrow the first block area. */
typedef struct starved {
    size_t cols;
    long after;
    int at_product;  /* fail the product's allocations (else the matrix's) */
    ad_status got;
    double y0;
} starved;

static ad_real starved_objective(const ad_real *z, size_t n, void *ctx)
{
    starved *c = ctx;
    ad_real y[1];
    ad_mat M;
    (void)n;
    if (!c->at_product)
        ad_test_fail_alloc_after(c->after);
    c->got = ad_mat_record(1, c->cols, z, &M);
    ad_test_fail_alloc_after(c->at_product ? c->after : -1);
    ad_mat_vec_rr(&M, z + c->cols, y);
    ad_test_fail_alloc_after(-1);
    c->y0 = y[0].v;
    return ad_mul(y[0], 2.0);
}

static void test_alloc_failure_in_recording(void **state)
{
    static const size_t cols[] = {3, 40, 330};
    static double z[660], g[660];
    (void)state;
    for (size_t i = 0; i < 660; i++)
        z[i] = 0.5 + 0.001 * (double)i;
    for (size_t ci = 0; ci < 3; ci++)
        for (int at_product = 0; at_product < 2; at_product++) {
            size_t nc = cols[ci];
            int failures = 0, successes = 0;
            for (long i = 0; successes < 2; i++) {
                starved c = {nc, i, at_product, AD_OK, 0.0};
                double fx;
                assert_int_equal(ad_release(), AD_OK);
                ad_status st = ad_gradient(starved_objective, &c, 2 * nc, z, &fx, g);
                if (st == AD_OK) {
                    successes++;
                    assert_int_equal(c.got, AD_OK);
                    for (size_t l = 0; l < nc; l++) {
                        assert_same(g[l], 2.0 * z[nc + l]);
                        assert_same(g[nc + l], 2.0 * z[l]);
                    }
                    continue;
                }
                failures++;
                assert_alloc_failure(i, st, successes);
                assert_all_nan(fx, g, 2 * nc);
                if (at_product) {
                    assert_int_equal(c.got, AD_OK);
                    assert_nan(c.y0);
                } else {
                    assert_int_equal(c.got, AD_ENOMEM);
                }
                assert_true(i < 100);
            }
            /* The matrix's block area and work array are new on a released
             * thread; so is the product's work array at 40 columns and its
             * block area at 330. */
            if (!at_product || nc > 3)
                assert_true(failures >= 1);
            if (getenv("DUALREV_TEST_VERBOSE"))
                fprintf(stderr, "# 1 x %zu, %s: %d failure points\n", nc,
                        at_product ? "product" : "matrix", failures);
        }
}

/* ======================================================================
 * 8. Threads, and the tape listing
 * ====================================================================== */

#define ROUNDS 100

static void *work(void *arg)
{
    worker *w = arg;
    uint64_t rng = 0x7e00 + (uint64_t)w->index;
    worker_start(w);
    for (int round = 0; round < ROUNDS; round++) {
        double z[CH_N], g[CH_N], gu[CH_N], fx, fu, scale = 0.0;
        int small = round % 2;
        size_t n = small ? CH_P : CH_N;
        chain_ctx c = chain_make(0, small, -1), u = c;
        u.unrolled = 1;
        fill_uniform(&rng, z, n, -1.0, 1.0);
        ad_status s = ad_gradient(chain_objective, &c, n, z, &fx, g);
        ad_status su = ad_gradient(chain_objective, &u, n, z, &fu, gu);
        if (s != AD_OK || su != AD_OK || c.got != AD_OK) {
            worker_report(w, "status", round, (double)s, (double)c.got);
            continue;
        }
        if (!(fabs(fx - fu) <= 1e-13 * fabs(fu) + 1e-14))
            worker_report(w, "f", round, fx, fu);
        for (size_t i = 0; i < n; i++)
            scale = fmax(scale, fabs(gu[i]));
        for (size_t i = 0; i < n; i++)
            if (!(fabs(g[i] - gu[i]) <= 1e-12 * scale))
                worker_report(w, "grad", round, g[i], gu[i]);
        if (round % 10 == 0) {  /* and Jacobians: forward and reverse sweeps */
            chain_fn cf = {chain_make(0, small, -1), CH_M}, uf = cf;
            double J[CH_M * CH_N], Ju[CH_M * CH_N], y[CH_M];
            uf.c.unrolled = 1;
            s = ad_jacobian(chain_f, &cf, n, z, CH_M, y, J);
            su = ad_jacobian(chain_f, &uf, n, z, CH_M, y, Ju);
            if (s != AD_OK || su != AD_OK)
                worker_report(w, "jacobian status", round, (double)s, (double)su);
            scale = 0.0;
            for (size_t k = 0; k < CH_M * n; k++)
                scale = fmax(scale, fabs(Ju[k]));
            for (size_t k = 0; k < CH_M * n; k++)
                if (!(fabs(J[k] - Ju[k]) <= 1e-12 * scale))
                    worker_report(w, "jacobian", round, J[k], Ju[k]);
        }
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    run_workers(work);
}

/* ad_tape_dump lists both block kinds. */
static void test_tape_dump(void **state)
{
    const double z[9] = {0.5, -1.0, 2.0, 0.25, -0.5, 1.5, 1.0, -2.0, 0.5};
    double g[9];
    limited c;
    char buf[4096];
    (void)state;
    gradient_ok(limited_objective, &c, 9, z, g);
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(ad_tape_dump(f, 100), AD_OK);
    rewind(f);
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    buf[len] = 0;
    fclose(f);
    assert_non_null(strstr(buf, "block (matrix): 6 outputs"));
    assert_non_null(strstr(buf, "block (matrix-vector product): 2 outputs"));
    /* every record once, in order of ID: blocks' outputs after their header */
    unsigned first = 0, records = 0, next = 0, id;
    const char *line = buf;
    assert_int_equal(sscanf(line, "inputs: IDs 1..%u; records: %u", &first, &records), 2);
    first++;
    next = first;
    line = strchr(line, '\n') + 1;
    line = strchr(line, '\n') + 1;  /* the column heads */
    for (; *line; line = strchr(line, '\n') + 1) {
        assert_int_equal(sscanf(line, "%u", &id), 1);
        assert_int_equal(id, next);
        next++;
    }
    assert_int_equal(next - first, records);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_products_against_oracles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_triangular_products, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shape_detection, setup, teardown),
        cmocka_unit_test_setup_teardown(test_active_zero_keeps_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_structural_zeros_skip_inf, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wrapped_matrices, setup, teardown),
        cmocka_unit_test_setup_teardown(test_double_product_forms, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recorded_values_bitwise, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tiny_terms_summed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_products, setup, teardown),
        cmocka_unit_test_setup_teardown(test_matrix_longer_than_a_chunk, setup, teardown),
        cmocka_unit_test_setup_teardown(test_record_counts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_compositions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_matrix_recorded_twice, setup, teardown),
        cmocka_unit_test_setup_teardown(test_jacobians, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sparse_structure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_source, setup, teardown),
        cmocka_unit_test_setup_teardown(test_null_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_empty_matrices, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outside_recording, setup, teardown),
        cmocka_unit_test_setup_teardown(test_handle_from_another_recording, setup, teardown),
        cmocka_unit_test_setup_teardown(test_handles_across_nesting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_size_overflow, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tape_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_alloc_failure_in_recording, setup, teardown),
        cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tape_dump, setup, teardown),
    };
    return cmocka_run_group_tests_name("recorded matrices", tests, NULL, NULL);
}
