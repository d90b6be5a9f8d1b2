/* ad_evaluate and ad_evaluate_function: a function's value alone.
 *
 * Against the same source compiled for double (the oracle: plain C
 * arithmetic) and against ad_gradient's value, bit for bit; nothing is
 * recorded; the errors, allocation failure at every index, and a value
 * of another recording returned. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "../lib/drivers/testing.h"

/* sum_i sin(x_i) x_{i+1} + exp(x_0 / n), written once for both types. */
#define BODY(T, x, n)                                                        \
    T s = ad_mul(ad_exp(ad_div(x[0], (double)n)), 1.0);                      \
    for (size_t i = 0; i + 1 < n; i++)                                       \
        s = ad_add(s, ad_mul(ad_sin(x[i]), x[i + 1]));

static ad_real f_ad(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    BODY(ad_real, x, n)
    return s;
}

static double f_plain(const double *x, size_t n)
{
    BODY(double, x, n)
    return s;
}

static void vec_ad(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)ctx;
    for (size_t j = 0; j + 1 < m; j++)  /* the last output left unwritten */
        y[j] = ad_mul(x[j % n], (double)(j + 1));
}

static void fill_x(double *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = 0.1 * (double)i - 1.3;
}

static void test_value_bits(void **state)
{
    (void)state;
    static double x[100], g[100];
    for (size_t n = 1; n <= 100; n += 33) {
        fill_x(x, n);
        double fx = 0.0, fg, plain = f_plain(x, n);
        assert_int_equal(ad_evaluate(f_ad, NULL, n, x, &fx), AD_OK);
        assert_int_equal(ad_gradient(f_ad, NULL, n, x, &fg, g), AD_OK);
        assert_memory_equal(&fx, &plain, sizeof fx);
        assert_memory_equal(&fx, &fg, sizeof fx);
    }
}

static void test_records_nothing(void **state)
{
    (void)state;
    double x[3] = {0.5, 1.5, 2.5}, fx, g[3];
    ad_tape_stats before, after;
    assert_int_equal(ad_gradient(f_ad, NULL, 3, x, &fx, g), AD_OK);
    assert_int_equal(ad_tape_stats_get(&before), AD_OK);
    assert_int_equal(ad_evaluate(f_ad, NULL, 3, x, &fx), AD_OK);
    assert_int_equal(ad_tape_stats_get(&after), AD_OK);
    assert_int_equal(before.records, after.records);
    /* the bytes in use: 24 a record, within what is reserved */
    assert_int_equal(after.used_bytes, after.records * 24);
    assert_true(after.records > 0 && after.used_bytes <= after.tape_bytes);
}

/* Inside a recording the value is a constant of it. */
static ad_real outer(const ad_real *x, size_t n, void *ctx)
{
    double v[3], fx;
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        v[i] = ad_value(x[i]);
    assert_int_equal(ad_evaluate(f_ad, NULL, n, v, &fx), AD_OK);
    return ad_add(ad_mul(x[0], fx), ad_mul(ad_const(fx), 0.0));
}

static void test_inside_recording(void **state)
{
    (void)state;
    double x[3] = {0.5, 1.5, 2.5}, fx, g[3], plain = f_plain(x, 3);
    assert_int_equal(ad_gradient(outer, NULL, 3, x, &fx, g), AD_OK);
    assert_true(g[0] == plain && g[1] == 0.0 && g[2] == 0.0);
}

/* f returns a value it was not given: one of the enclosing recording. */
static ad_real leak(const ad_real *x, size_t n, void *ctx)
{
    (void)x, (void)n;
    return *(const ad_real *)ctx;
}

static void leak_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = leak(x, n, ctx);
}

static ad_real leaking_outer(const ad_real *x, size_t n, void *ctx)
{
    double fx = 0.0, y[1] = {0.0}, v = ad_value(x[0]);
    (void)n, (void)ctx;
    assert_int_equal(ad_evaluate(leak, (void *)&x[0], 1, &v, &fx), AD_EFOREIGN);
    assert_true(isnan(fx));
    assert_int_equal(ad_evaluate_function(leak_fn, (void *)&x[0], 1, &v, 1, y), AD_EFOREIGN);
    assert_true(isnan(y[0]));
    return x[0];
}

static void test_foreign(void **state)
{
    (void)state;
    double x = 2.0, fx, g;
    assert_int_equal(ad_gradient(leaking_outer, NULL, 1, &x, &fx, &g), AD_OK);
}

static void test_vector(void **state)
{
    (void)state;
    double x[2] = {0.25, -4.0}, y[5], jac[10], yj[5];
    assert_int_equal(ad_evaluate_function(vec_ad, NULL, 2, x, 5, y), AD_OK);
    assert_int_equal(ad_jacobian(vec_ad, NULL, 2, x, 5, yj, jac), AD_OK);
    for (size_t j = 0; j < 4; j++) {
        assert_true(y[j] == x[j % 2] * (double)(j + 1));
        assert_memory_equal(&y[j], &yj[j], sizeof y[j]);
    }
    assert_true(isnan(y[4]));  /* unwritten */
    assert_int_equal(ad_evaluate_function(vec_ad, NULL, 2, x, 0, NULL), AD_OK);
}

static void test_errors(void **state)
{
    (void)state;
    double x[2] = {1.0, 2.0}, fx = 0.0, y[2] = {0.0, 0.0};
    assert_int_equal(ad_evaluate(NULL, NULL, 2, x, &fx), AD_EINVAL);
    assert_true(isnan(fx));
    assert_int_equal(ad_evaluate(f_ad, NULL, 2, x, NULL), AD_EINVAL);
    fx = 0.0;
    assert_int_equal(ad_evaluate(f_ad, NULL, 2, NULL, &fx), AD_EINVAL);
    assert_true(isnan(fx));
    assert_int_equal(ad_evaluate_function(NULL, NULL, 2, x, 2, y), AD_EINVAL);
    assert_true(isnan(y[0]) && isnan(y[1]));
    assert_int_equal(ad_evaluate_function(vec_ad, NULL, 2, NULL, 2, y), AD_EINVAL);
    assert_int_equal(ad_evaluate_function(vec_ad, NULL, 2, x, 2, NULL), AD_EINVAL);
}

/* Every allocation failing in turn: AD_ENOMEM and NaN, or the value. */
static void test_alloc_failure(void **state)
{
    (void)state;
    static double x[100];
    double y[3], want = f_plain((fill_x(x, 100), x), 100);
    int failed = 0;
    for (long i = 0; i < 8; i++) {
        double fx = 0.0;
        ad_test_fail_alloc_after(i);
        ad_status s = ad_evaluate(f_ad, NULL, 100, x, &fx);
        ad_status t = ad_evaluate_function(vec_ad, NULL, 100, x, 3, y);
        ad_test_fail_alloc_after(-1);
        assert_true((s == AD_OK && fx == want) || (s == AD_ENOMEM && isnan(fx)));
        assert_true((t == AD_OK && y[0] == x[0]) || (t == AD_ENOMEM && isnan(y[0])));
        failed += (s == AD_ENOMEM) + (t == AD_ENOMEM);
    }
    assert_true(failed >= 2);  /* both took the path */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_value_bits),     cmocka_unit_test(test_records_nothing),
        cmocka_unit_test(test_inside_recording), cmocka_unit_test(test_foreign),
        cmocka_unit_test(test_vector),         cmocka_unit_test(test_errors),
        cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests_name("evaluate", tests, NULL, NULL);
}
