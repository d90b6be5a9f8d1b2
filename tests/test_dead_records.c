/* Every driver gives the same derivative (seeded.h, ad_retry;
 * docs/conventions.md):
 *   - a record that the seeded outputs (inputs) do not reach changes
 *     nothing, even with an infinite partial (0 x Inf would be NaN), in
 *     reverse, forward and second-order sweeps;
 *   - an overflow of the scaled seeds in one part of a sweep does not make
 *     the tiny cotangents of another part underflow;
 *   - a zero derivative is +0;
 *   - a forward sweep through a recorded-matrix product leaves out the
 *     terms of constant entries, as ad_dot does.
 * The oracles are the derivatives in closed form. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "../lib/drivers/testing.h"

static uint64_t sweeps(void)
{
    return ad_test_sweeps();
}

/* ---- records not reached ---- */

/* f = x0^2, and sqrt(x1), unused, at x1 = 0: partial +Inf. */
static ad_real square_and_dead_sqrt(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real unused = ad_sqrt(x[1]);
    (void)unused;
    return ad_mul(x[0], x[0]);
}

static void test_gradient(void **state)
{
    (void)state;
    const double x[2] = {3.0, 0.0};
    double g[2], fx;
    assert_same(gradient_ok(square_and_dead_sqrt, NULL, 2, x, g), 9.0);
    assert_same(g[0], 6.0);
    assert_same(g[1], 0.0);
    /* the same with a finite partial: one sweep, nothing more */
    const double x1[2] = {3.0, 4.0};
    uint64_t before = sweeps();
    assert_int_equal(ad_gradient(square_and_dead_sqrt, NULL, 2, x1, &fx, g), AD_OK);
    assert_int_equal(sweeps() - before, 1);
    assert_same(g[0], 6.0);
    assert_same(g[1], 0.0);
}

/* A NaN through records that are reached stays (docs/conventions.md):
 * 0 sqrt(x1) at x1 = 0 is reached, beside the dead record. */
static ad_real reached_zero_times_sqrt(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real unused = ad_log(x[0]);
    (void)unused;
    return ad_add(ad_mul(x[0], x[0]), ad_mul(0.0, ad_sqrt(x[1])));
}

static void test_reached_nan_stays(void **state)
{
    (void)state;
    const double x[2] = {0.0, 0.0};
    double g[2];
    gradient_ok(reached_zero_times_sqrt, NULL, 2, x, g);
    assert_same(g[0], 0.0);  /* log(0)'s partial, Inf, is not reached */
    assert_nan(g[1]);
}

/* y0 = x0^2, y1 = 2 x1 + x2, and sqrt(x1), unused, at x1 = 0: J at
 * (3, 0, 5) is [[6, 0, 0], [0, 2, 1]].  n > m: ad_jacobian by rows. */
static void rows_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    ad_real unused = ad_sqrt(x[1]);
    (void)unused;
    y[0] = ad_mul(x[0], x[0]);
    y[1] = ad_add(ad_mul(2.0, x[1]), x[2]);
}

static const double rows_x[3] = {3.0, 0.0, 5.0};
static const double rows_J[6] = {6.0, 0.0, 0.0, 0.0, 2.0, 1.0};

static void test_rows(void **state)
{
    (void)state;
    double y[2], J[6], wj[3];
    assert_int_equal(ad_jacobian(rows_f, NULL, 3, rows_x, 2, y, J), AD_OK);
    for (int k = 0; k < 6; k++)
        assert_same(J[k], rows_J[k]);
    const double w[2] = {1.0, 0.5};
    assert_int_equal(ad_vjp(rows_f, NULL, 3, rows_x, 2, w, y, wj), AD_OK);
    assert_same(wj[0], 6.0);
    assert_same(wj[1], 1.0);
    assert_same(wj[2], 0.5);
    /* w = e0: row 0 of J, though y1 reaches the dead record's argument */
    const double e0[2] = {1.0, 0.0};
    assert_int_equal(ad_vjp(rows_f, NULL, 3, rows_x, 2, e0, y, wj), AD_OK);
    for (int i = 0; i < 3; i++)
        assert_same(wj[i], rows_J[i]);
    ad_linear *L;
    assert_int_equal(ad_linearize(rows_f, NULL, 3, rows_x, 2, y, &L), AD_OK);
    assert_int_equal(ad_linear_vjp(L, w, wj), AD_OK);
    assert_same(wj[0], 6.0);
    assert_same(wj[1], 1.0);
    assert_same(wj[2], 0.5);
    ad_linear_free(L);
    /* the sparse resolve, exact already, agrees: no entry where J is 0 */
    ad_csr S;
    assert_int_equal(ad_sparse_jacobian(rows_f, NULL, 3, rows_x, 2, y, &S), AD_OK);
    assert_int_equal(S.row_ptr[1], 1);
    assert_int_equal(S.row_ptr[2], 3);
    assert_same(S.val[0], 6.0);
    assert_same(S.val[1], 2.0);
    assert_same(S.val[2], 1.0);
    ad_csr_free(&S);
}

/* y0 = x0 sqrt(x1), y1 = x0 + x1 at (3, 0): J = [[0, Inf], [1, 1]].  n <= m:
 * ad_jacobian by columns, where sqrt(x1) does not depend on x0: its
 * tangent along e0 is 0, and 0 x Inf must not reach J[0][0]. */
static void cols_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = ad_mul(x[0], ad_sqrt(x[1]));
    y[1] = ad_add(x[0], x[1]);
}

static void check_cols_J(const double *J)
{
    assert_same(J[0], 0.0);
    assert_same(J[1], INFINITY);
    assert_same(J[2], 1.0);
    assert_same(J[3], 1.0);
}

static void test_columns(void **state)
{
    (void)state;
    const double x[2] = {3.0, 0.0};
    double y[2], J[4], jv[2], wj[2];
    assert_int_equal(ad_jacobian(cols_f, NULL, 2, x, 2, y, J), AD_OK);
    check_cols_J(J);
    /* the rows, by reverse sweeps, give the same */
    for (int j = 0; j < 2; j++) {
        const double w[2] = {j == 0, j == 1};
        assert_int_equal(ad_vjp(cols_f, NULL, 2, x, 2, w, y, wj), AD_OK);
        assert_same(wj[0], J[2 * j]);
        assert_same(wj[1], J[2 * j + 1]);
    }
    /* v = e0: column 0 */
    const double e0[2] = {1.0, 0.0};
    assert_int_equal(ad_jvp(cols_f, NULL, 2, x, e0, 2, y, jv), AD_OK);
    assert_same(jv[0], 0.0);
    assert_same(jv[1], 1.0);
    ad_linear *L;
    assert_int_equal(ad_linearize(cols_f, NULL, 2, x, 2, y, &L), AD_OK);
    assert_int_equal(ad_linear_jvp(L, e0, jv), AD_OK);
    assert_same(jv[0], 0.0);
    assert_same(jv[1], 1.0);
    ad_linear_free(L);
    ad_csr S;
    assert_int_equal(ad_sparse_jacobian(cols_f, NULL, 2, x, 2, y, &S), AD_OK);
    assert_int_equal(S.nnz, 4);
    for (size_t k = 0; k < 4; k++)
        assert_same(S.val[k], J[2 * (k / 2) + S.col[k]]);
    ad_csr_free(&S);
}

/* Second order: f = tanh(x0), and pow(x1, x0) unused at x1 = 0, x0 = 0.5:
 * d/da a^b = +Inf at a = 0, and its second partial -Inf.  H = diag(tanh''(x0),
 * 0), tanh'' = -2 tanh sech^2. */
static ad_real tanh_and_dead_pow(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real unused = ad_pow(x[1], x[0]);
    (void)unused;
    return ad_tanh(x[0]);
}

static void test_second_order(void **state)
{
    (void)state;
    const double x[2] = {0.5, 0.0}, v[2] = {1.0, 1.0};
    double fx, g[2], H[4], hv[2];
    double th = tanh(0.5), sech2 = 1.0 - th * th, h00 = -2.0 * th * sech2;
    assert_int_equal(ad_hessian(tanh_and_dead_pow, NULL, 2, x, &fx, g, H), AD_OK);
    assert_near(g[0], sech2, 1e-15, 0.0);
    assert_same(g[1], 0.0);
    assert_near(H[0], h00, 1e-15, 0.0);
    assert_same(H[1], 0.0);
    assert_same(H[2], 0.0);
    assert_same(H[3], 0.0);
    assert_int_equal(ad_hvp(tanh_and_dead_pow, NULL, 2, x, v, &fx, g, hv), AD_OK);
    assert_near(g[0], sech2, 1e-15, 0.0);
    assert_same(g[1], 0.0);
    assert_near(hv[0], h00, 1e-15, 0.0);
    assert_same(hv[1], 0.0);
}

/* A dead record inside a block's reach: y = M x with M recorded and x
 * constant, (0, 1) active; f uses y0 only.  Row 1's entries are not
 * reached, so x1 = Inf meets no zero cotangent there. */
static ad_real matrix_dead_row(const ad_real *z, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real A[4] = {z[0], z[1], z[2], z[3]}, y[2];
    const double x[2] = {2.0, INFINITY};
    ad_mat M;
    status_unused(ad_mat_record(2, 2, A, &M));
    ad_mat_vec_rd(&M, x, y);
    return ad_mul(y[0], 1.0);
}

static void test_matrix_row_not_reached(void **state)
{
    (void)state;
    const double z[4] = {1.0, 0.5, 3.0, 4.0};
    double g[4];
    gradient_ok(matrix_dead_row, NULL, 4, z, g);
    assert_same(g[0], 2.0);
    assert_same(g[1], INFINITY);
    assert_same(g[2], 0.0);
    assert_same(g[3], 0.0);
}

/* ---- scaled seeds: a tiny cotangent beside an overflowing one ---- */

/* x1 1e300 1e-200 1e-200 + x0 1e160: the gradient is (1e160, 1e-100).  The
 * scaled sweep overflows on x0's term (1e160 2^512) and the unscaled one
 * underflows on x1's (1e-200 1e-200). */
static ad_real tiny_beside_huge(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real tiny = ad_mul(ad_mul(ad_mul(x[1], 1e300), 1e-200), 1e-200);
    return ad_add(tiny, ad_mul(x[0], 1e160));
}

static void tiny_beside_huge_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = tiny_beside_huge(x, n, ctx);
}

#define TINY 1e-100
#define RTOL 1e-15  /* three roundings */

static void test_scaled_rerun_keeps_finite(void **state)
{
    (void)state;
    const double x[2] = {1.0, 1.0}, w[1] = {1.0}, e[2][2] = {{1.0, 0.0}, {0.0, 1.0}};
    double g[2], y[1], J[2], jv[1], fx, H[4], hv[2];
    gradient_ok(tiny_beside_huge, NULL, 2, x, g);
    assert_same(g[0], 1e160);
    assert_near(g[1], TINY, RTOL, 0.0);
    assert_int_equal(ad_vjp(tiny_beside_huge_f, NULL, 2, x, 1, w, y, g), AD_OK);
    assert_same(g[0], 1e160);
    assert_near(g[1], TINY, RTOL, 0.0);
    assert_int_equal(ad_jacobian(tiny_beside_huge_f, NULL, 2, x, 1, y, J), AD_OK);
    assert_same(J[0], 1e160);
    assert_near(J[1], TINY, RTOL, 0.0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ad_jvp(tiny_beside_huge_f, NULL, 2, x, e[i], 1, y, jv), AD_OK);
        assert_near(jv[0], i ? TINY : 1e160, RTOL, 0.0);
    }
    ad_csr S;
    assert_int_equal(ad_sparse_jacobian(tiny_beside_huge_f, NULL, 2, x, 1, y, &S), AD_OK);
    assert_int_equal(S.nnz, 2);
    assert_same(S.val[0], 1e160);
    assert_near(S.val[1], TINY, RTOL, 0.0);
    ad_csr_free(&S);
    assert_int_equal(ad_hessian(tiny_beside_huge, NULL, 2, x, &fx, g, H), AD_OK);
    assert_same(g[0], 1e160);
    assert_near(g[1], TINY, RTOL, 0.0);
    for (int k = 0; k < 4; k++)
        assert_same(H[k], 0.0);
    assert_int_equal(ad_hvp(tiny_beside_huge, NULL, 2, x, e[1], &fx, g, hv), AD_OK);
    assert_same(g[0], 1e160);
    assert_near(g[1], TINY, RTOL, 0.0);
}

/* ---- the sign of a zero derivative: +0 from every driver ---- */

static ad_real times_minus_zero(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(x[0], -0.0);
}

static void times_minus_zero_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = times_minus_zero(x, n, ctx);
}

static void test_zero_is_plus_zero(void **state)
{
    (void)state;
    const double x[1] = {2.0}, one[1] = {1.0};
    double g[1], y[1], J[1], fx, H[1], hv[1];
    gradient_ok(times_minus_zero, NULL, 1, x, g);
    assert_same(g[0], 0.0);
    assert_int_equal(ad_vjp(times_minus_zero_f, NULL, 1, x, 1, one, y, g), AD_OK);
    assert_same(g[0], 0.0);
    assert_int_equal(ad_jvp(times_minus_zero_f, NULL, 1, x, one, 1, y, g), AD_OK);
    assert_same(g[0], 0.0);
    assert_int_equal(ad_jacobian(times_minus_zero_f, NULL, 1, x, 1, y, J), AD_OK);
    assert_same(J[0], 0.0);
    ad_csr S;
    assert_int_equal(ad_sparse_jacobian(times_minus_zero_f, NULL, 1, x, 1, y, &S), AD_OK);
    assert_int_equal(S.nnz, 1);
    assert_same(S.val[0], 0.0);
    ad_csr_free(&S);
    assert_int_equal(ad_hvp(times_minus_zero, NULL, 1, x, one, &fx, g, hv), AD_OK);
    assert_same(g[0], 0.0);
    assert_same(hv[0], 0.0);
    assert_int_equal(ad_hessian(times_minus_zero, NULL, 1, x, &fx, g, H), AD_OK);
    assert_same(g[0], 0.0);
    assert_same(H[0], 0.0);
}

/* ---- forward sweeps through a recorded-matrix product ---- */

/* y0 = [z0, Inf] . [z1, 1] with the Inf entry and the 1 constants, and
 * y1 = z0 + z1: J = [[z1, z0], [1, 1]].  A constant entry's tangent and a
 * constant x's are 0 by structure, and their terms are left out, as
 * ad_dot leaves such pairs out: J v = (z1 v0 + z0 v1, v0 + v1). */
static void mat_inf_f(const ad_real *z, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m;
    ad_real A[2] = {z[0], ad_const(INFINITY)}, x[2] = {z[1], ad_const(1.0)};
    if (ctx) {
        y[0] = ad_dot(2, A, x);
    } else {
        ad_mat M;
        status_unused(ad_mat_record(1, 2, A, &M));
        ad_mat_vec_rr(&M, x, y);
    }
    y[1] = ad_add(z[0], z[1]);
}

static void test_matrix_forward_constant_entry(void **state)
{
    (void)state;
    const double z[2] = {2.0, 1.0}, v[2] = {1.0, 2.0};
    double y[2], jv[2], J[4];
    int dot = 1;
    for (int k = 0; k < 2; k++) {
        void *ctx = k ? &dot : NULL;
        assert_int_equal(ad_jvp(mat_inf_f, ctx, 2, z, v, 2, y, jv), AD_OK);
        assert_same(y[0], INFINITY);
        assert_same(jv[0], 5.0);
        assert_same(jv[1], 3.0);
        assert_int_equal(ad_jacobian(mat_inf_f, ctx, 2, z, 2, y, J), AD_OK);  /* by columns */
        assert_same(J[0], 1.0);
        assert_same(J[1], 2.0);
        assert_same(J[2], 1.0);
        assert_same(J[3], 1.0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradient),
        cmocka_unit_test(test_reached_nan_stays),
        cmocka_unit_test(test_rows),
        cmocka_unit_test(test_columns),
        cmocka_unit_test(test_second_order),
        cmocka_unit_test(test_matrix_row_not_reached),
        cmocka_unit_test(test_scaled_rerun_keeps_finite),
        cmocka_unit_test(test_zero_is_plus_zero),
        cmocka_unit_test(test_matrix_forward_constant_entry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
