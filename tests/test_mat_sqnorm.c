/* ad_mat_sqnorm: |M x|^2 as one record.
 *
 * The oracle is the pair of calls it stands for, ad_mat_vec then
 * ad_sqnorm, whose own derivatives test_matrix.c checks against analytic
 * ones: value and gradient must be bitwise theirs, J v and the Hessian
 * within rounding, the sparse Jacobian's structure the same.  Every shape,
 * x constant and active, and products that share the matrix.  Then the
 * double form (shared source), a wrapped matrix, and the errors. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dualrev.h"
#include "check.h"

#define PTS 3  /* products with one matrix */

/* The headers of lib/rules/matrix.c's blocks hold 5 and 6 pointer-sized fields:
 * 64 and 88 bytes on LP64 (docs/tape.md), 44 and 64 on ILP32 (i386). */
#define MATRIX_HEADER (24 + 5 * sizeof(size_t))
#define PRODUCT_HEADER (40 + 6 * sizeof(size_t))
#define PAD16(bytes) (((bytes) + 15) / 16 * 16)

typedef struct norm_case {
    size_t m, n;
    int shape;
    int x_active;
    int fused;            /* ad_mat_sqnorm, else ad_mat_vec and ad_sqnorm */
    const double *c;      /* PTS n constant points */
} norm_case;

static int outside(int shape, size_t j, size_t l)
{
    return (shape == AD__LOWER && l > j) || (shape == AD__UPPER && l < j);
}

/* Records A, the first m n entries of z, with constant zeros outside the
 * case's shape (A holds the entries: at most 64). */
static void record_matrix(const norm_case *c, const ad_real *z, ad_real *A, ad_mat *M)
{
    for (size_t k = 0; k < c->m * c->n; k++)
        A[k] = outside(c->shape, k / c->n, k % c->n) ? ad_const(0.0) : z[k];
    assert_int_equal(ad_mat_record(c->m, c->n, A, M), AD_OK);
}

/* z = [A (m n), x (PTS n) if active]: f = sum_k (k + 1) |A x_k|^2, with a
 * product that is not a norm beside them so that both kinds share A. */
static ad_real norm_objective(const ad_real *z, size_t nz, void *ctx)
{
    const norm_case *c = ctx;
    size_t m = c->m, n = c->n;
    ad_real A[64], y[8], f = ad_const(0.0);
    ad_mat M;
    (void)nz;
    record_matrix(c, z, A, &M);
    for (size_t k = 0; k < PTS; k++) {
        const ad_real *xr = z + m * n + k * n;
        const double *xd = c->c + k * n;
        ad_real s;
        if (c->fused && c->x_active)
            ad_mat_sqnorm(&M, xr, &s);
        else if (c->fused)
            ad_mat_sqnorm(&M, xd, &s);
        else {
            if (c->x_active)
                ad_mat_vec(&M, xr, y);
            else
                ad_mat_vec(&M, xd, y);
            s = ad_sqnorm(m, y);
        }
        f = ad_add(f, ad_mul((double)(k + 1), s));
    }
    ad_mat_vec(&M, c->c, y);
    return ad_add(f, ad_sum(m, y));
}

static void one_output(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = norm_objective(x, n, ctx);
}

static void check_case(size_t m, size_t n, int shape, int x_active, uint64_t *rng)
{
    size_t nz = m * n + (x_active ? PTS * n : 0);
    double z[64 + PTS * 8], c[PTS * 8], v[64 + PTS * 8];
    double g[2][64 + PTS * 8], hv[2][64 + PTS * 8], jv[2], y[2], fx[2];
    ad_csr S[2];
    fill_uniform(rng, z, nz, -1.5, 1.5);
    fill_uniform(rng, c, PTS * n, -2.0, 2.0);
    fill_uniform(rng, v, nz, -1.0, 1.0);
    for (int fused = 0; fused < 2; fused++) {
        norm_case nc = {m, n, shape, x_active, fused, c};
        assert_int_equal(ad_gradient(norm_objective, &nc, nz, z, &fx[fused], g[fused]), AD_OK);
        double f2, g2[64 + PTS * 8];
        assert_int_equal(ad_hvp(norm_objective, &nc, nz, z, v, &f2, g2, hv[fused]), AD_OK);
        assert_int_equal(ad_jvp(one_output, &nc, nz, z, v, 1, &y[fused], &jv[fused]), AD_OK);
        assert_int_equal(ad_sparse_jacobian(one_output, &nc, nz, z, 1, &y[fused], &S[fused]),
                         AD_OK);
        assert_same(f2, fx[fused]);
        for (size_t i = 0; i < nz; i++)
            assert_same(g2[i], g[fused][i]);
    }
    assert_same(fx[1], fx[0]);
    for (size_t i = 0; i < nz; i++) {
        assert_same(g[1][i], g[0][i]);
        assert_near(hv[1][i], hv[0][i], 1e-13, 1e-13);
    }
    assert_near(jv[1], jv[0], 1e-13, 1e-13);
    assert_int_equal(S[1].nnz, S[0].nnz);
    for (size_t e = 0; e < S[0].nnz; e++) {
        assert_int_equal(S[1].col[e], S[0].col[e]);
        assert_same(S[1].val[e], S[0].val[e]);
    }
    ad_csr_free(&S[0]);
    ad_csr_free(&S[1]);
}

static void test_against_vec_and_sqnorm(void **state)
{
    static const size_t sizes[][2] = {{1, 1}, {2, 3}, {3, 2}, {4, 4}, {5, 3}, {7, 8}};
    uint64_t rng = 0x5c0;
    (void)state;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int shape = AD__FULL; shape <= AD__UPPER; shape++)
            for (int x_active = 0; x_active < 2; x_active++)
                check_case(sizes[s][0], sizes[s][1], shape, x_active, &rng);
}

/* Several outputs, so that ad_jacobian sweeps two or four rows at a time
 * (lanes) and a norm's rule runs in place in each lane: y_k = (k + 1)
 * |A x_(k mod 3)|^2, against the pair of calls. */
static void rows_function(const ad_real *z, size_t nz, ad_real *y, size_t m, void *ctx)
{
    const norm_case *c = ctx;
    size_t mm = c->m, n = c->n;
    ad_real A[64], v[8];
    ad_mat M;
    (void)nz;
    record_matrix(c, z, A, &M);
    for (size_t k = 0; k < m; k++) {
        const ad_real *xr = z + mm * n + (k % PTS) * n;
        ad_real s;
        if (c->fused)
            ad_mat_sqnorm(&M, xr, &s);
        else {
            ad_mat_vec(&M, xr, v);
            s = ad_sqnorm(mm, v);
        }
        y[k] = ad_mul((double)(k + 1), s);
    }
}

static void test_jacobian_lanes(void **state)
{
    double z[64 + PTS * 8], y[2][5], J[2][5 * (64 + PTS * 8)];
    uint64_t rng = 0x5c3;
    (void)state;
    for (size_t outputs = 2; outputs <= 5; outputs += 3)
        for (int shape = AD__FULL; shape <= AD__UPPER; shape++) {
            size_t m = 5, n = 4, nz = m * n + PTS * n;
            fill_uniform(&rng, z, nz, -1.5, 1.5);
            for (int fused = 0; fused < 2; fused++) {
                norm_case nc = {m, n, shape, 1, fused, NULL};
                assert_int_equal(ad_jacobian(rows_function, &nc, nz, z, outputs, y[fused],
                                             J[fused]),
                                 AD_OK);
            }
            /* and both against the analytic rows: with y = A x_k over the
             * shape, d/dA_jl = 2 (k + 1) y_j x_kl, d/dx_kl = 2 (k + 1) (A^T y)_l */
            double want[5 * (64 + PTS * 8)] = {0};
            for (size_t k = 0; k < outputs; k++) {
                const double *xk = z + m * n + (k % PTS) * n;
                double *row = want + k * nz, yj[5];
                for (size_t j = 0; j < m; j++) {
                    yj[j] = 0.0;
                    for (size_t l = 0; l < n; l++)
                        yj[j] += outside(shape, j, l) ? 0.0 : z[j * n + l] * xk[l];
                }
                for (size_t j = 0; j < m; j++)
                    for (size_t l = 0; l < n; l++) {
                        if (outside(shape, j, l))
                            continue;
                        double f = 2.0 * (double)(k + 1) * yj[j];
                        row[j * n + l] += f * xk[l];
                        row[m * n + (k % PTS) * n + l] += f * z[j * n + l];
                    }
            }
            for (size_t k = 0; k < outputs; k++)
                assert_same(y[1][k], y[0][k]);
            for (size_t e = 0; e < outputs * nz; e++) {
                assert_near(J[1][e], J[0][e], 1e-14, 1e-14);
                assert_near(J[0][e], want[e], 1e-12, 1e-12);
            }
        }
}

/* The norm takes a header and one output slot, whatever m; the pair of
 * calls a slot per row, then the square norm's. */
static void test_records(void **state)
{
    double z[64 + PTS * 8], c[PTS * 8], g[64 + PTS * 8], fx;
    uint64_t rng = 0x5c1;
    ad_tape_stats st[2];
    (void)state;
    fill_uniform(&rng, z, 64, -1.0, 1.0);
    fill_uniform(&rng, c, PTS * 8, -1.0, 1.0);
    for (int fused = 0; fused < 2; fused++) {
        norm_case nc = {8, 8, AD__FULL, 0, fused, c};
        assert_int_equal(ad_gradient(norm_objective, &nc, 64, z, &fx, g), AD_OK);
        assert_int_equal(ad_tape_stats_get(&st[fused]), AD_OK);
    }
    /* a header and 8 slots, a header and 4 slots; against a header and 1 */
    assert_int_equal(st[0].records - st[1].records, PTS * (1 + 8 + 1 + 4 - 2));
    /* beside them (docs/tape.md, rounded up to 16): the matrix,
     * 64 + 20 m n; a product with a constant x, 88 + 8 (n + m); a norm
     * keeps y too, 88 + 8 (n + 2 m) */
    size_t mat = PAD16(MATRIX_HEADER + 20 * 64), prod = PAD16(PRODUCT_HEADER + 8 * (8 + 8)),
           norm = PAD16(PRODUCT_HEADER + 8 * 8 + 16 * 8);  /* 1344, 224, 288 on LP64 */
    assert_int_equal(st[0].block_bytes, mat + (PTS + 1) * prod);
    assert_int_equal(st[1].block_bytes, mat + PTS * norm + prod);
}

/* The double form: bitwise ad_sqnorm of ad_mat_vec's y, wrapped or
 * recorded; and the ad_real forms with a wrapped matrix, or outside a
 * recording, give the same value. */
static ad_real wrapped_objective(const ad_real *z, size_t nz, void *ctx)
{
    const double *D = ctx;
    ad_mat W;
    ad_real s;
    (void)nz;
    assert_int_equal(ad_mat_wrap(5, 4, D, &W), AD_OK);
    ad_mat_sqnorm(&W, z, &s);
    return s;
}

static void test_double_and_wrapped(void **state)
{
    double D[20], x[4], y[5], s, want, g[4], fx;
    uint64_t rng = 0x5c2;
    ad_mat W, R;
    ad_real A[20], xr[4], sr;
    (void)state;
    fill_uniform(&rng, D, 20, -2.0, 2.0);
    fill_uniform(&rng, x, 4, -2.0, 2.0);
    D[3] = 0.0;
    assert_int_equal(ad_mat_wrap(5, 4, D, &W), AD_OK);
    ad_mat_vec(&W, x, y);
    want = ad_sqnorm(5, y);
    ad_mat_sqnorm(&W, x, &s);
    assert_same(s, want);
    for (size_t k = 0; k < 20; k++)
        A[k] = ad_const(D[k]);
    for (size_t l = 0; l < 4; l++)
        xr[l] = ad_const(x[l]);
    assert_int_equal(ad_mat_record(5, 4, A, &R), AD_OK);  /* no recording: refers to A */
    ad_mat_sqnorm(&R, x, &s);
    assert_same(s, want);
    ad_mat_sqnorm(&R, xr, &sr);
    assert_same(sr.v, want);
    assert_int_equal(sr.id, 0);
    /* wrapped matrix, active x: the gradient 2 D^T D x */
    assert_int_equal(ad_gradient(wrapped_objective, D, 4, x, &fx, g), AD_OK);
    assert_same(fx, want);
    for (size_t l = 0; l < 4; l++) {
        double gl = 0.0;
        for (size_t j = 0; j < 5; j++)
            gl += 2.0 * y[j] * D[j * 4 + l];
        assert_near(g[l], gl, 1e-14, 1e-14);
    }
}

/* NULL arguments fail the recording with AD_EINVAL and give NaN; an empty
 * matrix gives 0. */
static ad_real bad_objective(const ad_real *z, size_t nz, void *ctx)
{
    int which = *(const int *)ctx;
    ad_mat M;
    ad_real s = ad_const(1.0);
    (void)nz;
    assert_int_equal(ad_mat_record(2, 2, z, &M), AD_OK);
    if (which == 0)
        ad_mat_sqnorm_rd(NULL, (const double *)NULL, &s);
    else if (which == 1)
        ad_mat_sqnorm(&M, (const ad_real *)NULL, &s);
    else if (which == 2)
        ad_mat_sqnorm_rr(&M, z, NULL);
    if (which <= 1)
        assert_nan(s.v);
    return ad_add(z[0], s);
}

static ad_real empty_objective(const ad_real *z, size_t nz, void *ctx)
{
    ad_mat M;
    ad_real s;
    (void)nz, (void)ctx;
    assert_int_equal(ad_mat_record(0, 3, z, &M), AD_OK);
    ad_mat_sqnorm(&M, z, &s);
    assert_same(s.v, 0.0);
    assert_int_equal(s.id, 0);
    return ad_add(z[0], s);
}

static void test_errors_and_empty(void **state)
{
    double z[4] = {1.0, 2.0, 3.0, 4.0}, g[4], fx;
    (void)state;
    for (int which = 0; which < 3; which++) {
        assert_int_equal(ad_gradient(bad_objective, &which, 4, z, &fx, g), AD_EINVAL);
        assert_all_nan(fx, g, 4);
    }
    assert_int_equal(ad_gradient(empty_objective, NULL, 3, z, &fx, g), AD_OK);
    assert_same(fx, 1.0);
    assert_same(g[0], 1.0);
    assert_same(g[1], 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_vec_and_sqnorm),
        cmocka_unit_test(test_jacobian_lanes),
        cmocka_unit_test(test_records),
        cmocka_unit_test(test_double_and_wrapped),
        cmocka_unit_test(test_errors_and_empty),
    };
    return cmocka_run_group_tests_name("mat_sqnorm", tests, NULL, NULL);
}
