/* The shape of a computation rather than its operations: sharing, outputs
 * that are inputs or constants, no inputs, nested ad_gradient calls, and the
 * generic names in plain-double mode and with mixed argument types. */
#include <limits.h>

#include "check.h"

#define IS_DOUBLE(e) _Generic((e), double: 1, default: 0)
#define IS_AD(e) _Generic((e), ad_real: 1, default: 0)

/* ---- sharing, trivial outputs, no inputs ---- */

/* sum_{k=1}^{1000} x (x + k) = 1000 x^2 + 500500 x: x feeds 2000 records. */
static ad_real many_uses(const ad_real *x, size_t n, void *ctx)
{
    ad_real sum = ad_const(0.0);
    (void)n, (void)ctx;
    for (int k = 1; k <= 1000; k++)
        sum = ad_add(sum, ad_mul(x[0], ad_add(x[0], k)));
    return sum;
}

static void test_variable_used_many_times(void **state)
{
    static const double points[] = {0.5, -3.0, 0.0, 12.25};
    (void)state;
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++) {
        double x = points[i], g;
        assert_same(gradient_ok(many_uses, NULL, 1, &x, &g), 1000 * x * x + 500500 * x);
        assert_same(g, 2000 * x + 500500);
    }
}

/* Records other work, then returns input number *ctx itself. */
static ad_real return_input(const ad_real *x, size_t n, void *ctx)
{
    const size_t *which = ctx;
    ad_real unused = ad_const(0.0);
    for (size_t i = 0; i < n; i++)
        unused = ad_add(unused, ad_exp(x[i]));
    (void)unused;
    return x[*which];
}

static void test_output_is_input(void **state)
{
    const double x[4] = {1.5, -2.0, 3.25, 0.0};
    (void)state;
    for (size_t which = 0; which < 4; which++) {
        double g[4];
        assert_same(gradient_ok(return_input, &which, 4, x, g), x[which]);
        for (size_t i = 0; i < 4; i++)
            assert_same(g[i], i == which ? 1.0 : 0.0);
    }
}

/* Uses the inputs, then returns a constant: 42.5, or sin(0.5) from an
 * operation on constants (which records nothing). */
static ad_real return_constant(const ad_real *x, size_t n, void *ctx)
{
    const int *use_sin = ctx;
    ad_real unused = ad_mul(x[0], x[n - 1]);
    (void)unused;
    return *use_sin ? ad_sin(ad_const(0.5)) : ad_const(42.5);
}

static void test_constant_output(void **state)
{
    const double x[3] = {1.0, 2.0, 3.0};
    (void)state;
    for (int use_sin = 0; use_sin <= 1; use_sin++) {
        double g[3];
        double fx = gradient_ok(return_constant, &use_sin, 3, x, g);
        assert_same(fx, use_sin ? sin(0.5) : 42.5);
        for (int i = 0; i < 3; i++)
            assert_same(g[i], 0.0);
    }
}

typedef struct call_log {
    int calls;
    size_t last_n;
} call_log;

static ad_real no_inputs(const ad_real *x, size_t n, void *ctx)
{
    call_log *seen = ctx;
    (void)x;
    seen->calls++;
    seen->last_n = n;
    return ad_mul(ad_exp(ad_const(1.0)), 2);
}

static void test_no_inputs(void **state)
{
    call_log seen = {0, 99};
    double fx = 0.0, x = 5.0, g = 123.0;
    (void)state;
    assert_int_equal(ad_gradient(no_inputs, &seen, 0, NULL, &fx, NULL), AD_OK);
    assert_same(fx, exp(1.0) * 2);
    assert_int_equal(ad_gradient(no_inputs, &seen, 0, &x, &fx, &g), AD_OK);
    assert_same(fx, exp(1.0) * 2);
    assert_same(g, 123.0);  /* grad[0..0) is empty: nothing may be written */
    assert_int_equal(seen.calls, 2);
    assert_int_equal(seen.last_n, 0);
}

/* Operations on constants record nothing, inside a recording or outside. */
static ad_real constants_then_one_record(const ad_real *x, size_t n, void *ctx)
{
    ad_real c = ad_hypot(ad_sin(ad_const(1.0)), ad_pow(ad_const(2.0), 3));
    (void)n, (void)ctx;
    return ad_mul(x[0], c);
}

static void test_constant_operations_record_nothing(void **state)
{
    ad_real outside = ad_mul(ad_const(2.0), ad_const(3.0));
    ad_tape_stats st;
    double x = 2.0, g;
    (void)state;
    assert_same(outside.v, 6.0);
    assert_int_equal(outside.id, 0);
    gradient_ok(constants_then_one_record, NULL, 1, &x, &g);
    assert_same(g, hypot(sin(1.0), 8.0));
    assert_int_equal(ad_tape_stats_get(&st), AD_OK);
    assert_int_equal(st.records, 1);
    assert_int_equal(st.inputs, 1);
}

/* ---- nested ad_gradient ---- */

typedef struct nested {
    long inner_padding;  /* extra records in the inner recording */
    long outer_padding;  /* extra records in the outer one, after the inner call */
    ad_status inner_status;
    double inner_fx, inner_grad[2];
} nested;

/* Adds `count` records (multiplications by 1): same value, same derivative. */
static ad_real pad(ad_real v, long count)
{
    for (long k = 0; k < count; k++)
        v = ad_mul(v, 1.0);
    return v;
}

/* g(u, v) = u^2 v + sin v, gradient (2 u v, u^2 + cos v). */
static ad_real inner_g(const ad_real *x, size_t n, void *ctx)
{
    const nested *c = ctx;
    ad_real u = pad(x[0], c->inner_padding);
    (void)n;
    return ad_add(ad_mul(ad_mul(u, u), x[1]), ad_sin(x[1]));
}

/* f(x, y) = x y + g_u x + g_v y + sin x + g, where g, g_u, g_v (the inner
 * call's results at (x, y)) enter as constants.  It records before and after
 * the inner call, so a disturbed outer tape would show. */
static ad_real outer_f(const ad_real *x, size_t n, void *ctx)
{
    nested *c = ctx;
    ad_real before = ad_mul(x[0], x[1]);
    double at[2] = {ad_value(x[0]), ad_value(x[1])};
    (void)n;
    c->inner_status = ad_gradient(inner_g, c, 2, at, &c->inner_fx, c->inner_grad);
    ad_real linear = ad_add(ad_mul(ad_const(c->inner_grad[0]), x[0]), ad_mul(c->inner_grad[1], x[1]));
    ad_real after = pad(ad_sin(x[0]), c->outer_padding);
    return ad_add(ad_add(before, linear), ad_add(after, ad_const(c->inner_fx)));
}

static void check_nested(long inner_padding, long outer_padding)
{
    nested c = {inner_padding, outer_padding, AD_EINVAL, 0, {0, 0}};
    const double xy[2] = {0.75, -1.25};
    double x = xy[0], y = xy[1], g[2];
    double fx = gradient_ok(outer_f, &c, 2, xy, g);

    assert_int_equal(c.inner_status, AD_OK);
    double gu = 2 * x * y, gv = x * x + cos(y), gval = x * x * y + sin(y);
    assert_near(c.inner_fx, gval, 1e-14, 0);
    assert_near(c.inner_grad[0], gu, 1e-14, 0);
    assert_near(c.inner_grad[1], gv, 1e-14, 0);
    assert_near(fx, x * y + gu * x + gv * y + sin(x) + gval, 1e-14, 1e-15);
    assert_near(g[0], y + gu + cos(x), 1e-14, 0);
    assert_near(g[1], x + gv, 1e-14, 0);
}

static void test_nested_gradient(void **state)
{
    (void)state;
    check_nested(0, 0);
}

/* Either recording spans several tape chunks (65536 records each). */
static void test_nested_gradient_long_recordings(void **state)
{
    (void)state;
    check_nested(150000, 0);
    check_nested(0, 150000);
    check_nested(150000, 150000);
}

/* ---- generic names ---- */

#define BINARY_TYPES(op)                                 \
    do {                                                 \
        assert_true(IS_DOUBLE(ad_##op(2.0, 3)));         \
        assert_true(IS_DOUBLE(ad_##op(2, 3.0f)));        \
        assert_true(IS_DOUBLE(ad_##op(2.0f, 3.0f)));     \
        assert_true(IS_DOUBLE(ad_##op(2, 3u)));          \
        assert_true(IS_AD(ad_##op(r, 3)));               \
        assert_true(IS_AD(ad_##op(2.0f, r)));            \
        assert_true(IS_AD(ad_##op(r, r)));               \
    } while (0)

#define UNARY_TYPES(op)                                  \
    do {                                                 \
        assert_true(IS_DOUBLE(ad_##op(2)));              \
        assert_true(IS_DOUBLE(ad_##op(2.0f)));           \
        assert_true(IS_DOUBLE(ad_##op(2.0)));            \
        assert_true(IS_AD(ad_##op(r)));                  \
    } while (0)

/* With only plain numbers every name yields a double; with an ad_real
 * anywhere it yields an ad_real.  (_Generic does not evaluate its operand,
 * so nothing here is computed or recorded.) */
static void test_generic_result_types(void **state)
{
    const ad_real r = {1.0, 0, 0};
    (void)state;
    BINARY_TYPES(add); BINARY_TYPES(sub); BINARY_TYPES(mul);
    BINARY_TYPES(div); BINARY_TYPES(pow); BINARY_TYPES(atan2);
    BINARY_TYPES(hypot); BINARY_TYPES(fmin); BINARY_TYPES(fmax);
    UNARY_TYPES(neg); UNARY_TYPES(sqrt); UNARY_TYPES(cbrt); UNARY_TYPES(exp);
    UNARY_TYPES(expm1); UNARY_TYPES(log); UNARY_TYPES(log1p); UNARY_TYPES(log2);
    UNARY_TYPES(log10); UNARY_TYPES(sin); UNARY_TYPES(cos); UNARY_TYPES(tan);
    UNARY_TYPES(asin); UNARY_TYPES(acos); UNARY_TYPES(atan); UNARY_TYPES(sinh);
    UNARY_TYPES(cosh); UNARY_TYPES(tanh); UNARY_TYPES(asinh); UNARY_TYPES(acosh);
    UNARY_TYPES(atanh); UNARY_TYPES(fabs); UNARY_TYPES(erf); UNARY_TYPES(erfc);
    UNARY_TYPES(lgamma); UNARY_TYPES(tgamma);
    assert_true(IS_DOUBLE(ad_value(2)));
    assert_true(IS_DOUBLE(ad_value(r)));
}

/* Integer arguments are converted to double first: no integer division,
 * no unsigned wrap-around, no integer abs. */
static void test_generic_plain_values(void **state)
{
    (void)state;
    assert_same(ad_div(1, 2), 0.5);
    assert_same(ad_sub(1u, 2u), -1.0);
    assert_same(ad_neg(1u), -1.0);
    assert_same(ad_mul(UINT32_MAX, 2u), 8589934590.0);
    assert_same(ad_add(INT_MAX, 1), 2147483648.0);
    assert_same(ad_add(1.5f, 2), 3.5);
    assert_same(ad_mul(0.1f, 3), (double)0.1f * 3.0);
    assert_same(ad_pow(2, 10), 1024.0);
    assert_same(ad_pow(2, -1), 0.5);
    assert_same(ad_hypot(3, 4), 5.0);
    assert_same(ad_fmin(1, 2.5f), 1.0);
    assert_same(ad_atan2(1, -1), atan2(1.0, -1.0));
    assert_same(ad_sqrt(4), 2.0);
    assert_same(ad_fabs(-3), 3.0);
    assert_same(ad_fabs(-2.5), 2.5);
    assert_same(ad_lgamma(3), lgamma(3.0));
    assert_same(ad_tgamma(5), 24.0);
    assert_same(ad_value(2.5f), 2.5);
}

/* 3x + x/2 + x^2 + (1 - x) + fmax(x, 0), with int, float and unsigned
 * constants, and x read through the const pointer. */
static ad_real mixed_types(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real a = ad_add(ad_mul(3, x[0]), ad_div(x[0], 2.0f));
    ad_real b = ad_add(ad_pow(x[0], 2), ad_sub(1u, x[0]));
    return ad_add(ad_add(a, b), ad_fmax(x[0], 0));
}

static ad_real mixed_powers(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_add(ad_pow(2, x[0]), ad_pow(x[0], 0.5f));
}

static void test_generic_mixed_in_recording(void **state)
{
    double x = 1.5, g;
    (void)state;
    assert_same(gradient_ok(mixed_types, NULL, 1, &x, &g), 4.5 + 0.75 + 2.25 - 0.5 + 1.5);
    assert_same(g, 3 + 0.5 + 2 * x - 1 + 1);
    double fx = gradient_ok(mixed_powers, NULL, 1, &x, &g);
    assert_same(fx, pow(2, x) + pow(x, 0.5));
    assert_near(g, pow(2, x) * log(2.0) + 0.5 / sqrt(x), 1e-14, 0);
}

/* AD_CONST(T, c): c as a T, for generic code. */
static void test_generic_constant(void **state)
{
    ad_real c = AD_CONST(ad_real, 0.5);
    (void)state;
    assert_true(IS_AD(AD_CONST(ad_real, 0.5)));
    assert_true(IS_DOUBLE(AD_CONST(double, 0.5)));
    assert_same(c.v, 0.5);
    assert_int_equal(c.id, 0);
    assert_same(AD_CONST(double, 3), 3.0);
}

#define REAL double
#define NAME template_plain
#include "template_objective.h"
#undef REAL
#undef NAME
#define REAL ad_real
#define NAME template_ad
#include "template_objective.h"
#undef REAL
#undef NAME

static ad_real template_objective(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return template_ad(x[0], x[1]);
}

typedef struct template_point {
    double x, y;
} template_point;

static double template_in_x(double x, const void *ctx)
{
    const template_point *p = ctx;
    return template_plain(x, p->y);
}

static double template_in_y(double y, const void *ctx)
{
    const template_point *p = ctx;
    return template_plain(p->x, y);
}

/* The same source gives the same value both ways, and the ad_real build
 * differentiates the double build (finite differences, as in test_ops.c). */
static void test_template_double_and_ad_real(void **state)
{
    static const template_point points[] = {{0.7, -1.2}, {-0.4, 0.9}, {2.5, 0.3}, {-2.0, -2.2}};
    (void)state;
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++) {
        const template_point *p = &points[i];
        double xy[2] = {p->x, p->y}, g[2];
        assert_same(gradient_ok(template_objective, NULL, 2, xy, g), template_plain(p->x, p->y));
        fd_result dx = fd_derivative(template_in_x, p, p->x);
        fd_result dy = fd_derivative(template_in_y, p, p->y);
        assert_near(g[0], dx.d, 1e-8, dx.noise);
        assert_near(g[1], dy.d, 1e-8, dy.noise);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_variable_used_many_times),
        cmocka_unit_test(test_output_is_input),
        cmocka_unit_test(test_constant_output),
        cmocka_unit_test(test_no_inputs),
        cmocka_unit_test(test_constant_operations_record_nothing),
        cmocka_unit_test(test_nested_gradient),
        cmocka_unit_test(test_nested_gradient_long_recordings),
        cmocka_unit_test(test_generic_result_types),
        cmocka_unit_test(test_generic_plain_values),
        cmocka_unit_test(test_generic_mixed_in_recording),
        cmocka_unit_test(test_generic_constant),
        cmocka_unit_test(test_template_double_and_ad_real),
    };
    return cmocka_run_group_tests_name("structure", tests, NULL, NULL);
}
