/* Sweeps seeded scaled (lib/kernel/tape.h, "Scaled seeds"): cotangents and
 * tangents that would underflow stay exact; a sweep that overflows when
 * scaled is run again unscaled, one whose infinities come from infinite
 * partials is not; the caller's overflow flag is left as it was; a user's
 * rules get their arguments unscaled.  Every sweep: ad_gradient, ad_vjp,
 * ad_linear_vjp, ad_jacobian by rows and by columns, ad_jvp,
 * ad_linear_jvp, ad_sparse_jacobian, ad_hvp, ad_hessian.
 *
 * The functions are chains of products by constants, whose derivatives
 * are the products of the constants, known in closed form (and rise(x),
 * below, for forward sweeps):
 *   deep(x)  = 3e-160 (3e-160 (1e300 x)),  deep'  = 9e-20
 *   steep(x) = 1e160 (1e100 x),            steep' = 1e260
 * deep's reverse sweep reaches 3e-160 * 3e-160 = 9e-320, below the
 * smallest normal number (2.2e-308): unscaled, that cotangent is rounded
 * to a multiple of 4.9e-324 and deep' comes out 2.7e-5 off, relatively;
 * scaled by 2^512 it stays normal.  steep's first cotangent, 1e160, is
 * past 2^512 (1.3e154), so it overflows when scaled. */
#include <fenv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../lib/drivers/testing.h"

#define DEEP 9e-20
#define STEEP 1e260
#define RTOL 1e-14  /* three roundings of the constants and of their products */
#define ROUNDED 1e-4  /* rounded through a subnormal: 2.7e-5 at most, relatively */

static ad_real deep(ad_real x)
{
    return ad_mul(3e-160, ad_mul(3e-160, ad_mul(1e300, x)));
}

static ad_real steep(ad_real x)
{
    return ad_mul(1e160, ad_mul(1e100, x));
}

/* Which chain the functions below apply: deep, steep, or deep to x0 and
 * steep to the others (whose overflow sends the whole sweep, deep's part
 * too, round again unscaled). */
enum chain { DEEP_ONLY, STEEP_ONLY, BOTH };

static ad_real apply(enum chain c, size_t i, ad_real x)
{
    return c == DEEP_ONLY || (c == BOTH && i == 0) ? deep(x) : steep(x);
}

/* Its derivative, and the relative error allowed. */
static double slope(enum chain c, size_t i)
{
    return c == DEEP_ONLY || (c == BOTH && i == 0) ? DEEP : STEEP;
}

static double rtol(enum chain c, size_t i)
{
    return c == BOTH && i == 0 ? ROUNDED : RTOL;
}

/* f(x) = sum_i chain(x_i) + x_(n-1) */
static ad_real sum_of(const ad_real *x, size_t n, void *ctx)
{
    enum chain c = *(const enum chain *)ctx;
    ad_real s = x[n - 1];
    for (size_t i = 0; i < n; i++)
        s = ad_add(s, apply(c, i, x[i]));
    return s;
}

static void test_gradient(void **state)
{
    (void)state;
    double x[3] = {1.0, -2.0, 0.5}, g[3];
    for (enum chain c = DEEP_ONLY; c <= BOTH; c++) {
        gradient_ok(sum_of, &c, 3, x, g);
        for (size_t i = 0; i < 3; i++)
            assert_near(g[i], slope(c, i) + (i == 2), rtol(c, i), 0.0);
    }
}

/* y_j = chain(x_j), j < n; y_n = sum of x */
static void rows(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    enum chain c = *(const enum chain *)ctx;
    (void)m;
    ad_real s = ad_const(0.0);
    for (size_t j = 0; j < n; j++) {
        y[j] = apply(c, j, x[j]);
        s = ad_add(s, x[j]);
    }
    y[n] = s;
}

static void test_vjp(void **state)
{
    (void)state;
    enum { N = 3, M = N + 1 };
    double x[N] = {0.5, 2.0, -1.0}, y[M], wj[N];
    double w[M] = {1.0, 2.0, -1.0, 0.0};  /* the sum's row, 0: it would hide deep's */
    for (enum chain c = DEEP_ONLY; c <= BOTH; c++) {
        ad_linear *L;
        assert_int_equal(ad_vjp(rows, &c, N, x, M, w, y, wj), AD_OK);
        for (size_t i = 0; i < N; i++)
            assert_near(wj[i], w[i] * slope(c, i) + w[N], rtol(c, i), 0.0);
        assert_int_equal(ad_linearize(rows, &c, N, x, M, y, &L), AD_OK);
        for (int k = 0; k < 2; k++) {  /* a sweep leaves the handle as it was */
            assert_int_equal(ad_linear_vjp(L, w, wj), AD_OK);
            for (size_t i = 0; i < N; i++)
                assert_near(wj[i], w[i] * slope(c, i) + w[N], rtol(c, i), 0.0);
        }
        ad_linear_free(L);
    }
    /* A weight that overflows when scaled, whatever the function. */
    enum chain c = DEEP_ONLY;
    w[0] = 1e300;
    assert_int_equal(ad_vjp(rows, &c, N, x, M, w, y, wj), AD_OK);
    assert_near(wj[0], 1e300 * DEEP, RTOL, 0.0);
}

/* Rows of J: ad_jacobian takes them when m < n, one (m = 1), two (m = 2)
 * or four at a time (m >= 3), here from the first m outputs of rows(). */
typedef struct first {
    enum chain c;
    ad_real all[8];
} first;

static void first_rows(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    first *f = ctx;
    rows(x, n, f->all, n + 1, &f->c);
    for (size_t j = 0; j < m; j++)
        y[j] = f->all[j];
}

static void test_jacobian_rows(void **state)
{
    (void)state;
    enum { N = 6 };
    double x[N] = {1, 2, 3, 4, 5, 6}, y[N], J[N * N];
    first f;
    for (f.c = DEEP_ONLY; f.c <= BOTH; f.c++)
        for (size_t m = 1; m < N; m++) {
            assert_int_equal(ad_jacobian(first_rows, &f, N, x, m, y, J), AD_OK);
            for (size_t j = 0; j < m; j++)
                for (size_t i = 0; i < N; i++) {
                    double want = j == i ? slope(f.c, j) : 0.0;
                    assert_near(J[j * N + i], want, rtol(f.c, j), 0.0);
                }
        }
}

/* The sparse Jacobian resolves rows in groups of two, each group on its
 * own: a group that overflows is resolved again unscaled, the others not. */
static void test_sparse(void **state)
{
    (void)state;
    enum { N = 7, M = N + 1 };
    double x[N], y[M];
    for (size_t i = 0; i < N; i++)
        x[i] = 0.25 * (double)(i + 1);
    for (enum chain c = DEEP_ONLY; c <= BOTH; c++) {
        ad_csr S;
        assert_int_equal(ad_sparse_jacobian(rows, &c, N, x, M, y, &S), AD_OK);
        check_csr_valid(&S, M, N, __FILE__, __LINE__);
        for (size_t j = 0; j < N; j++) {
            assert_int_equal(S.row_ptr[j + 1] - S.row_ptr[j], 1);
            assert_int_equal(S.col[S.row_ptr[j]], j);
            /* with BOTH, row 0's group holds row 1, which overflows */
            assert_near(S.val[S.row_ptr[j]], slope(c, j), rtol(c, j), 0.0);
        }
        for (size_t k = S.row_ptr[N]; k < S.row_ptr[M]; k++)
            assert_same(S.val[k], 1.0);
        ad_csr_free(&S);
    }
}

/* f(x) = chain(x0^2) + chain(x1^2): H = diag(2 chain'(x0), 2 chain'(x1)) */
static ad_real squares(const ad_real *x, size_t n, void *ctx)
{
    enum chain c = *(const enum chain *)ctx;
    (void)n;
    return ad_add(apply(c, 0, ad_mul(x[0], x[0])), apply(c, 1, ad_mul(x[1], x[1])));
}

static void test_second_order(void **state)
{
    (void)state;
    double x[2] = {1.5, -0.5}, fx, g[2], hv[2], H[4];
    for (enum chain c = DEEP_ONLY; c <= BOTH; c++) {
        for (size_t k = 0; k < 2; k++) {
            double v[2] = {k == 0, k == 1};
            assert_int_equal(ad_hvp(squares, &c, 2, x, v, &fx, g, hv), AD_OK);
            for (size_t i = 0; i < 2; i++) {
                assert_near(g[i], 2 * slope(c, i) * x[i], rtol(c, i), 0.0);
                assert_near(hv[i], i == k ? 2 * slope(c, i) : 0.0, rtol(c, i), 0.0);
            }
        }
        assert_int_equal(ad_hessian(squares, &c, 2, x, &fx, g, H), AD_OK);
        for (size_t i = 0; i < 2; i++) {
            assert_near(g[i], 2 * slope(c, i) * x[i], rtol(c, i), 0.0);
            for (size_t k = 0; k < 2; k++)
                assert_near(H[i * 2 + k], i == k ? 2 * slope(c, i) : 0.0, rtol(c, i), 0.0);
        }
    }
}

/* Forward sweeps: tangents times the partials from the first record up, so
 * the chain that underflows is deep's the other way round:
 * rise(x) = 1e300 (3e-160 (3e-160 x)), whose tangent passes through
 * 9e-320.  y_j = rise(x_j) (or steep(x_j) for odd j, with `steep`). */
static ad_real rise(ad_real x)
{
    return ad_mul(1e300, ad_mul(3e-160, ad_mul(3e-160, x)));
}

static void rising(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    int with_steep = *(const int *)ctx;
    for (size_t j = 0; j < m; j++)
        y[j] = with_steep && j % 2 ? steep(x[j % n]) : rise(x[j % n]);
}

static void test_forward(void **state)
{
    (void)state;
    enum { N = 5, M = 7 };  /* n <= m: ad_jacobian takes columns */
    double x[N] = {1, 2, 3, 4, 5}, v[N] = {1, -1, 2, 0.5, 3}, y[M], jv[M], J[M * N];
    for (int with_steep = 0; with_steep < 2; with_steep++) {
        /* with steep, every sweep is swept again unscaled */
        double tol = with_steep ? ROUNDED : RTOL;
        ad_linear *L;
        assert_int_equal(ad_jvp(rising, &with_steep, N, x, v, M, y, jv), AD_OK);
        for (size_t j = 0; j < M; j++) {
            int s = with_steep && j % 2;
            assert_near(jv[j], (s ? STEEP : DEEP) * v[j % N], s ? RTOL : tol, 0.0);
        }
        assert_int_equal(ad_linearize(rising, &with_steep, N, x, M, y, &L), AD_OK);
        assert_int_equal(ad_linear_jvp(L, v, jv), AD_OK);
        for (size_t j = 0; j < M; j++) {
            int s = with_steep && j % 2;
            assert_near(jv[j], (s ? STEEP : DEEP) * v[j % N], s ? RTOL : tol, 0.0);
        }
        ad_linear_free(L);
        assert_int_equal(ad_jacobian(rising, &with_steep, N, x, M, y, J), AD_OK);
        for (size_t j = 0; j < M; j++)
            for (size_t i = 0; i < N; i++) {
                int s = with_steep && j % 2;
                double want = i == j % N ? (s ? STEEP : DEEP) : 0.0;
                /* a block of four columns holds an odd row's steep one */
                assert_near(J[j * N + i], want, s ? RTOL : tol, 0.0);
            }
    }
}

/* At the threshold: the gradient of c (x0 + x1 + x2) is c, scaled 2^512 c,
 * under the largest double (1.8e308) for c = 1.3e154 and over it for
 * 1.4e154, which is then swept again unscaled.  Under it, the three scaled
 * results' sum overflows: swept again for nothing, with the same results. */
static ad_real times_c(const ad_real *x, size_t n, void *ctx)
{
    (void)n;
    return ad_mul(*(const double *)ctx, ad_add(ad_add(x[0], x[1]), x[2]));
}

static void test_threshold(void **state)
{
    (void)state;
    static const double cs[] = {1.3e154, 1.4e154, -1.3e154, 0x1p511, 0x1p512};
    double x[3] = {1.0, 2.0, 3.0}, g[3];
    for (size_t k = 0; k < sizeof cs / sizeof *cs; k++) {
        double c = cs[k];
        gradient_ok(times_c, &c, 3, x, g);
        for (int i = 0; i < 3; i++)
            assert_same(g[i], c);
    }
}

/* Results that are not finite without an overflow come from infinite
 * partials, and the sweep is not run again: an infinite partial makes
 * +Inf and 0 x Inf a NaN, as unscaled; but a cotangent too small for an
 * unscaled sweep (1e-200 1e-200, which underflows to 0 there, and makes
 * NaN) meets the infinite partial as what it is, and makes +Inf.  The
 * finite results are scaled ones. */
static ad_real infinite(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real s = ad_add(ad_sqrt(x[0]), ad_mul(0.0, ad_sqrt(x[1])));
    s = ad_add(s, ad_mul(1e-200, ad_mul(1e-200, ad_sqrt(x[2]))));
    return ad_add(s, deep(x[3]));
}

static void test_not_finite(void **state)
{
    (void)state;
    double x[4] = {0.0, 0.0, 0.0, 1.0}, g[4];
    gradient_ok(infinite, NULL, 4, x, g);
    assert_true(isinf(g[0]) && g[0] > 0);
    assert_nan(g[1]);
    assert_true(isinf(g[2]) && g[2] > 0);
    assert_near(g[3], DEEP, RTOL, 0.0);
}

/* The sweeps a gradient took on this thread's tape (resolve.c counts them). */
static uint64_t sweeps(void)
{
    return ad_test_sweeps();
}

/* The processor's overflow flag decides a second sweep: set by a scaled
 * cotangent's overflow (steep), not by infinite partials (a value that
 * overflowed in the forward pass: sq(x) squares x 20 times, which at
 * x = 1e20 is +Inf after the fifth).  The caller's flag is left as it was:
 * clear after a scaled overflow swept again without one, set if it was set
 * before. */
static ad_real squarings(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real y = x[0];
    for (int k = 0; k < 20; k++)
        y = ad_mul(y, y);
    return ad_add(y, deep(x[1]));
}

static void test_overflow_flag(void **state)
{
    (void)state;
    double x[3] = {1.0, 1.0, 1.0}, g[3], fx;
    enum chain c = STEEP_ONLY;
    feclearexcept(FE_OVERFLOW);
    uint64_t before = sweeps();
    gradient_ok(sum_of, &c, 3, x, g);
    assert_int_equal(sweeps() - before, 2);
    assert_false(fetestexcept(FE_OVERFLOW));
    c = DEEP_ONLY;
    feraiseexcept(FE_OVERFLOW);
    before = sweeps();
    gradient_ok(sum_of, &c, 3, x, g);
    assert_int_equal(sweeps() - before, 1);
    assert_true(fetestexcept(FE_OVERFLOW));
    assert_near(g[0], DEEP, RTOL, 0.0);
    /* infinite partials: one sweep, whether the flag was set before or
     * not (the results are Inf, not NaN: no exact sweep, seeded.h ad_retry) */
    double y[2] = {1e20, 1.0};
    for (int set = 0; set < 2; set++) {
        if (set)
            feraiseexcept(FE_OVERFLOW);
        else
            feclearexcept(FE_OVERFLOW);
        before = sweeps();
        assert_int_equal(ad_gradient(squarings, NULL, 2, y, &fx, g), AD_OK);
        assert_int_equal(sweeps() - before, 1);
        assert_true(isinf(fx) && isinf(g[0]));
        assert_near(g[1], DEEP, RTOL, 0.0);
    }
    feclearexcept(FE_OVERFLOW);
}

/* The user's rules get the cotangents unscaled: y = 2 x, whose vjp keeps
 * the ybar it was given. */
static void twice(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    (void)ctx, (void)n, (void)m;
    y[0] = 2 * x[0];
}

static void twice_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                      const double *ybar, double *xbar)
{
    (void)n, (void)x, (void)m, (void)y;
    *(double *)ctx = ybar[0];
    xbar[0] = 2 * ybar[0];
}

static void twice_jvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                      const double *xdot, double *ydot)
{
    (void)n, (void)x, (void)m, (void)y;
    *(double *)ctx = xdot[0];
    ydot[0] = 2 * xdot[0];
}

static const ad_rule rule = {twice, twice_vjp, twice_jvp, NULL};

static ad_real through_rule(const ad_real *x, size_t n, void *ctx)
{
    ad_real y;
    (void)n;
    assert_int_equal(ad_external(&rule, ctx, 1, x, 1, &y), AD_OK);
    return ad_add(ad_mul(3.0, y), deep(x[1]));
}

/* y0 = 3 twice(x0), y1 = rise(x1): forward, the rule gets xdot unscaled */
static void through_rule_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    ad_real t;
    (void)n, (void)m;
    assert_int_equal(ad_external(&rule, ctx, 1, x, 1, &t), AD_OK);
    y[0] = ad_mul(3.0, t);
    y[1] = rise(x[1]);
}

static void test_user_rules_unscaled(void **state)
{
    (void)state;
    double x[2] = {1.0, 1.0}, g[2], seen = 0.0;
    gradient_ok(through_rule, &seen, 2, x, g);
    assert_same(seen, 3.0);
    assert_same(g[0], 6.0);
    assert_near(g[1], DEEP, ROUNDED, 0.0);  /* the whole tape is swept unscaled */
    double v[2] = {0.5, 1.0}, y[2], jv[2];
    assert_int_equal(ad_jvp(through_rule_fn, &seen, 2, x, v, 2, y, jv), AD_OK);
    assert_same(seen, 0.5);
    assert_same(jv[0], 3.0);
    assert_near(jv[1], DEEP, ROUNDED, 0.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradient),
        cmocka_unit_test(test_vjp),
        cmocka_unit_test(test_jacobian_rows),
        cmocka_unit_test(test_sparse),
        cmocka_unit_test(test_second_order),
        cmocka_unit_test(test_forward),
        cmocka_unit_test(test_threshold),
        cmocka_unit_test(test_overflow_flag),
        cmocka_unit_test(test_not_finite),
        cmocka_unit_test(test_user_rules_unscaled),
    };
    return cmocka_run_group_tests_name("scaled seeds", tests, NULL, NULL);
}
