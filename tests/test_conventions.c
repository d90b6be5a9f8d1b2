/* NaN and infinity propagation, and the documented conventions at points
 * where a derivative does not exist (docs/conventions.md, include/dualrev/ops.h). */
#include "check.h"
#include "ops_list.h"

/* ---- a one-argument and a two-argument harness ---- */

typedef ad_real (*unary_fn)(ad_real);
typedef ad_real (*binary_fn)(ad_real, ad_real);

static ad_real apply_unary(const ad_real *x, size_t n, void *ctx)
{
    const unary_fn *f = ctx;
    (void)n;
    return (*f)(x[0]);
}

static ad_real apply_binary(const ad_real *x, size_t n, void *ctx)
{
    const binary_fn *f = ctx;
    (void)n;
    return (*f)(x[0], x[1]);
}

/* f(x) and f'(x) through ad_gradient. */
static double d1(unary_fn f, double x, double *fx)
{
    double g;
    *fx = gradient_ok(apply_unary, &f, 1, &x, &g);
    return g;
}

static double d2(binary_fn f, double a, double b, double *ga, double *gb)
{
    double ab[2] = {a, b}, g[2];
    double fx = gradient_ok(apply_binary, &f, 2, ab, g);
    *ga = g[0];
    *gb = g[1];
    return fx;
}

#define DEFINE_UNARY(op, ...) static ad_real u_##op(ad_real x) { return ad_##op(x); }
UNARY_OPS(DEFINE_UNARY)
static ad_real b_pow(ad_real a, ad_real b) { return ad_pow(a, b); }
static ad_real b_atan2(ad_real a, ad_real b) { return ad_atan2(a, b); }
static ad_real b_hypot(ad_real a, ad_real b) { return ad_hypot(a, b); }
static ad_real b_fmin(ad_real a, ad_real b) { return ad_fmin(a, b); }
static ad_real b_fmax(ad_real a, ad_real b) { return ad_fmax(a, b); }

/* ---- NaN ---- */

typedef struct named_unary {
    const char *name;
    unary_fn f;
} named_unary;

#define NAMED_UNARY(op, ...) {#op, u_##op},
static const named_unary all_unary[] = {UNARY_OPS(NAMED_UNARY)};

/* The libm function of each, in the same order. */
#define UNARY_REF(op, ref, ...) ref,
static double (*const unary_ref[])(double) = {UNARY_OPS(UNARY_REF)};

/* Every unary operation but neg (whose derivative is -1 everywhere) has a
 * partial that depends on its argument, so a NaN argument gives a NaN
 * gradient. */
static void test_nan_argument_gives_nan_gradient(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof all_unary / sizeof all_unary[0]; i++) {
        double fx, g = d1(all_unary[i].f, NAN, &fx);
        int want_nan = all_unary[i].f != u_neg;
        if (isnan(fx) && (want_nan ? isnan(g) : g == -1.0))
            continue;
        print_error("%s(NaN) = %g, derivative %g\n", all_unary[i].name, fx, g);
        _fail(__FILE__, __LINE__);
    }
}

/* Outside the domain the value is NaN, and so is the partial: the log
 * family and atanh make it so explicitly; the others get it from their
 * formulas. */
static void test_domain_error_gives_nan_gradient(void **state)
{
    static const struct {
        unary_fn f;
        double x;
    } cases[] = {
        {u_sqrt, -1.0}, {u_log, -1.0}, {u_log1p, -2.0}, {u_log2, -0.5}, {u_log10, -3.0},
        {u_asin, 1.5}, {u_acos, -1.5}, {u_acosh, 0.5}, {u_atanh, 2.0}, {u_atanh, -1.5},
        {u_tgamma, -1.0}, {u_tgamma, -INFINITY}, {u_sin, INFINITY}, {u_cos, -INFINITY},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double fx, g = d1(cases[i].f, cases[i].x, &fx);
        if (isnan(fx) && isnan(g))
            continue;
        print_error("case %zu at %g: value %g, derivative %g\n", i, cases[i].x, fx, g);
        _fail(__FILE__, __LINE__);
    }
}

/* A NaN reaches the gradient entries that depend on it and no others:
 * f(x, z) = 2 sin x + z^2 at x = NaN. */
static ad_real nan_partly(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_add(ad_mul(2, ad_sin(x[0])), ad_mul(x[1], x[1]));
}

static void test_nan_reaches_dependent_entries_only(void **state)
{
    const double x[2] = {NAN, 1.5};
    double g[2];
    (void)state;
    assert_nan(gradient_ok(nan_partly, NULL, 2, x, g));
    assert_nan(g[0]);
    assert_same(g[1], 3.0);
}

/* ---- 0 x Inf in the reverse sweep ---- */

static ad_real sqrt_times_zero(ad_real x) { return ad_mul(ad_sqrt(x), 0.0); }
static ad_real zero_times_log(ad_real x) { return ad_mul(0, ad_log(x)); }
static ad_real sqrt_minus_sqrt(ad_real x) { return ad_sub(ad_sqrt(x), ad_sqrt(x)); }
static ad_real exp_times_zero(ad_real x) { return ad_mul(ad_exp(x), 0.0); }

/* A zero cotangent times an infinite partial is NaN: dualrev must not skip
 * products whose cotangent is zero. */
static void test_zero_cotangent_times_inf_is_nan(void **state)
{
    double fx;
    (void)state;
    assert_nan(d1(sqrt_times_zero, 0.0, &fx));
    assert_same(fx, 0.0);
    assert_nan(d1(zero_times_log, 0.0, &fx));
    assert_nan(fx);  /* 0 * -Inf */
    assert_nan(d1(sqrt_minus_sqrt, 0.0, &fx));
    assert_same(fx, 0.0);
    assert_nan(d1(exp_times_zero, 1000.0, &fx));
    assert_nan(fx);
    /* ... while finite partials with a zero cotangent give zero. */
    assert_same(d1(sqrt_times_zero, 4.0, &fx), 0.0);
}

/* ---- the conventions ---- */

static void test_sqrt_cbrt_at_zero(void **state)
{
    double fx;
    (void)state;
    assert_same(d1(u_sqrt, 0.0, &fx), INFINITY);
    assert_same(fx, 0.0);
    assert_same(d1(u_cbrt, 0.0, &fx), INFINITY);
    assert_same(fx, 0.0);
    assert_same(d1(u_cbrt, -0.0, &fx), INFINITY);
}

/* -0 is 0: a convention at 0 holds at -0 (sqrt, log, log2 and log10 gave
 * -Inf there, from 1 / -0), and every other partial at -0 is the one at
 * +0; the values stay libm's, -0 and -Inf included. */
static ad_real pow_x_half(ad_real x) { return ad_pow(x, 0.5); }
static ad_real pow_x_third(ad_real x) { return ad_pow(x, 1.0 / 3.0); }

static void test_minus_zero(void **state)
{
    static const struct {
        unary_fn f;
        double value, d;
    } cases[] = {
        {u_sqrt, -0.0, INFINITY}, {u_cbrt, -0.0, INFINITY}, {u_log, -INFINITY, INFINITY},
        {u_log2, -INFINITY, INFINITY}, {u_log10, -INFINITY, INFINITY},
        {u_log1p, -0.0, 1.0}, {pow_x_half, 0.0, INFINITY}, {pow_x_third, 0.0, INFINITY},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double fx, g = d1(cases[i].f, -0.0, &fx);
        if (same_double(fx, cases[i].value) && same_double(g, cases[i].d))
            continue;
        print_error("case %zu at -0: value %g, derivative %g; expected %g, %g\n", i, fx, g,
                    cases[i].value, cases[i].d);
        _fail(__FILE__, __LINE__);
    }
    for (size_t i = 0; i < sizeof all_unary / sizeof all_unary[0]; i++) {
        double fp, fm, gp = d1(all_unary[i].f, 0.0, &fp), gm = d1(all_unary[i].f, -0.0, &fm);
        if (same_double(gm, gp) && same_double(fm, unary_ref[i](-0.0)))
            continue;
        print_error("%s: derivative %g at -0, %g at +0 (value %g)\n", all_unary[i].name, gm, gp,
                    fm);
        _fail(__FILE__, __LINE__);
    }
}

static void test_fabs_at_zero(void **state)
{
    double fx;
    (void)state;
    assert_same(d1(u_fabs, 0.0, &fx), 0.0);
    assert_same(fx, 0.0);
    assert_same(d1(u_fabs, -0.0, &fx), 0.0);
    assert_same(fx, 0.0);
    assert_same(d1(u_fabs, -2.0, &fx), -1.0);
    assert_same(d1(u_fabs, 1e-300, &fx), 1.0);
}

static ad_real fmin_with_3(ad_real x) { return ad_fmin(x, 3.0); }
static ad_real fmax_3_with(ad_real x) { return ad_fmax(3, x); }
static ad_real fmin_self(ad_real x) { return ad_fmin(x, x); }

static void test_fmin_fmax_ties(void **state)
{
    double fx, ga, gb;
    (void)state;
    assert_same(d2(b_fmin, 2.5, 2.5, &ga, &gb), 2.5);
    assert_same(ga, 0.5);
    assert_same(gb, 0.5);
    assert_same(d2(b_fmax, -1.0, -1.0, &ga, &gb), -1.0);
    assert_same(ga, 0.5);
    assert_same(gb, 0.5);
    assert_same(d1(fmin_with_3, 3.0, &fx), 0.5);
    assert_same(d1(fmax_3_with, 3.0, &fx), 0.5);
    assert_same(d1(fmin_self, 7.0, &fx), 1.0);
}

/* C's fmin and fmax ignore a NaN argument; so do their partials. */
static void test_fmin_fmax_ignore_nan(void **state)
{
    double ga, gb;
    (void)state;
    assert_same(d2(b_fmin, NAN, 2.0, &ga, &gb), 2.0);
    assert_same(ga, 0.0);
    assert_same(gb, 1.0);
    assert_same(d2(b_fmin, 2.0, NAN, &ga, &gb), 2.0);
    assert_same(ga, 1.0);
    assert_same(gb, 0.0);
    assert_same(d2(b_fmax, NAN, -4.0, &ga, &gb), -4.0);
    assert_same(ga, 0.0);
    assert_same(gb, 1.0);
    assert_same(d2(b_fmax, -4.0, NAN, &ga, &gb), -4.0);
    assert_same(ga, 1.0);
    assert_same(gb, 0.0);
}

/* Two NaNs: no argument to prefer; the value is NaN, and so are the
 * partials (found by the fuzzer: they were 1 and 0). */
static void test_fmin_fmax_two_nans(void **state)
{
    double ga, gb;
    (void)state;
    assert_nan(d2(b_fmin, NAN, NAN, &ga, &gb));
    assert_nan(ga);
    assert_nan(gb);
    assert_nan(d2(b_fmax, NAN, NAN, &ga, &gb));
    assert_nan(ga);
    assert_nan(gb);
}

static ad_real pow_x_huge(ad_real x) { return ad_pow(x, 1.3e16); }
static ad_real pow_x_tiny(ad_real x) { return ad_pow(x, -1e-310); }
static ad_real pow_x_inf(ad_real x) { return ad_pow(x, INFINITY); }
static ad_real pow_x_b_2_53(ad_real x) { return ad_pow(x, -16331239353195370.0); }

/* d/da a^b for a < 0 where b - 1 rounds (found by the fuzzer): for |b| >=
 * 2^53 to b itself, whose parity differs from b - 1's; for a tiny b to an
 * integer, although a^b is not real. 1.3e16 is even: a^b > 0 and
 * a^(b-1) < 0, so b a^(b-1) is -Inf at a = -3 and b at a = -1. */
static void test_pow_negative_base_rounded_exponent(void **state)
{
    double fx;
    (void)state;
    assert_same(d1(pow_x_huge, -3.0, &fx), -INFINITY);
    assert_same(fx, INFINITY);
    assert_same(d1(pow_x_huge, -1.0, &fx), -1.3e16);
    assert_same(fx, 1.0);
    assert_same(d1(pow_x_huge, 3.0, &fx), INFINITY);
    assert_nan(d1(pow_x_tiny, -0.5, &fx));
    assert_nan(fx);
    /* between 2^53 and 2^54, b - 1 rounds to b - 2 half the time */
    assert_same(d1(pow_x_b_2_53, -0.5, &fx), INFINITY);
    /* an infinite b has no parity: pow takes |a|, b pow(a, b - 1) too */
    assert_same(d1(pow_x_inf, -3.0, &fx), INFINITY);
    assert_same(fx, INFINITY);
}

/* Partials that are subnormal numbers although an intermediate overflows
 * (found by the fuzzer: they came out 0): d/dx atan x = 1 / (1 + x^2) at
 * 1e160 is 1e-320; sech^2 x at 360 is 4 e^-720 (5.7e-313). */
static void test_subnormal_partials(void **state)
{
    double fx;
    (void)state;
    double g = d1(u_atan, 1e160, &fx);
    assert_near(g, 1e-320, 0.0, 0x1p-1074);
    assert_near(d1(u_atan, -1e160, &fx), 1e-320, 0.0, 0x1p-1074);
    g = d1(u_tanh, 360.0, &fx);
    assert_near(g, 4.0 * exp(-720.0), 1e-3, 0.0);  /* subnormal: 3 digits */
    assert_true(g > 0.0);
    assert_same(d1(u_tanh, 800.0, &fx), 0.0);
}

static ad_real pow_x_0(ad_real x) { return ad_pow(x, 0.0); }
static ad_real pow_0_x(ad_real x) { return ad_pow(0.0, x); }
static ad_real pow_x_3(ad_real x) { return ad_pow(x, 3); }
static ad_real pow_x_1(ad_real x) { return ad_pow(x, 1); }

/* d/da a^b = 0 where b = 0; d/db a^b = 0 where a = 0. */
static void test_pow_conventions(void **state)
{
    double fx, ga, gb;
    (void)state;
    assert_same(d2(b_pow, 0.0, 0.0, &ga, &gb), 1.0);
    assert_same(ga, 0.0);
    assert_same(gb, 0.0);
    assert_same(d2(b_pow, 2.0, 0.0, &ga, &gb), 1.0);
    assert_same(ga, 0.0);
    assert_same(gb, log(2.0));
    assert_same(d2(b_pow, 0.0, 2.0, &ga, &gb), 0.0);
    assert_same(ga, 0.0);
    assert_same(gb, 0.0);
    assert_same(d2(b_pow, -3.0, 0.0, &ga, &gb), 1.0);
    assert_same(ga, 0.0);
    assert_same(d1(pow_x_0, 0.0, &fx), 0.0);
    assert_same(fx, 1.0);
    assert_same(d1(pow_0_x, 2.0, &fx), 0.0);
    assert_same(fx, 0.0);
    assert_same(d1(pow_0_x, 0.0, &fx), 0.0);
    assert_same(fx, 1.0);
}

/* d/db a^b is NaN for a < 0 (a^b is not real around non-integer b);
 * d/da 0^b is the one-sided +Inf for 0 < b < 1. */
static void test_pow_edges(void **state)
{
    double ga, gb;
    (void)state;
    assert_same(d2(b_pow, -2.0, 3.0, &ga, &gb), -8.0);
    assert_same(ga, 12.0);
    assert_nan(gb);
    assert_same(d2(b_pow, 0.0, 0.5, &ga, &gb), 0.0);
    assert_same(ga, INFINITY);
    assert_same(gb, 0.0);
}

/* Not conventions but plain calculus, at the same awkward points. */
static void test_pow_integer_exponents(void **state)
{
    double fx;
    (void)state;
    assert_same(d1(pow_x_3, -2.0, &fx), 12.0);   /* negative base */
    assert_same(fx, -8.0);
    assert_same(d1(pow_x_3, 0.0, &fx), 0.0);
    assert_same(d1(pow_x_1, 0.0, &fx), 1.0);
    assert_same(d1(pow_x_1, -5.0, &fx), 1.0);
}

static void test_hypot_at_origin(void **state)
{
    double ga, gb;
    (void)state;
    assert_same(d2(b_hypot, 0.0, 0.0, &ga, &gb), 0.0);
    assert_same(ga, 0.0);
    assert_same(gb, 0.0);
    assert_same(d2(b_hypot, -0.0, 0.0, &ga, &gb), 0.0);
    assert_same(ga, 0.0);
    assert_same(gb, 0.0);
}

/* hypot(NaN, 1) is NaN, and so are both partials (they were 0, 0).  At an
 * infinite argument hypot is +Inf whatever the other one is, a NaN
 * included: the partials are the limits, +-1 for the infinite argument and
 * 0 for the other (a NaN one too, as fmin's); two infinite arguments have
 * no limit: NaN, NaN. */
static void test_hypot_nan_and_infinity(void **state)
{
    static const struct {
        double a, b, value, ga, gb;
    } cases[] = {
        {NAN, 1.0, NAN, NAN, NAN},
        {1.0, NAN, NAN, NAN, NAN},
        {NAN, 0.0, NAN, NAN, NAN},
        {-2.0, NAN, NAN, NAN, NAN},
        {NAN, NAN, NAN, NAN, NAN},
        {INFINITY, NAN, INFINITY, 1.0, 0.0},
        {NAN, -INFINITY, INFINITY, 0.0, -1.0},
        {-INFINITY, 5.0, INFINITY, -1.0, 0.0},
        {0.0, INFINITY, INFINITY, 0.0, 1.0},
        {1e308, -INFINITY, INFINITY, 0.0, -1.0},
        {INFINITY, -INFINITY, INFINITY, NAN, NAN},
        {-INFINITY, -INFINITY, INFINITY, NAN, NAN},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double ga, gb, v = d2(b_hypot, cases[i].a, cases[i].b, &ga, &gb);
        if (same_double(v, cases[i].value) && same_double(ga, cases[i].ga) &&
            same_double(gb, cases[i].gb) && same_double(v, hypot(cases[i].a, cases[i].b)))
            continue;
        print_error("hypot(%g, %g) = %g, gradient (%g, %g); expected %g, (%g, %g)\n", cases[i].a,
                    cases[i].b, v, ga, gb, cases[i].value, cases[i].ga, cases[i].gb);
        _fail(__FILE__, __LINE__);
    }
}

static void test_atan2_at_origin(void **state)
{
    double ga, gb;
    (void)state;
    assert_same(d2(b_atan2, 0.0, 0.0, &ga, &gb), 0.0);
    assert_nan(ga);
    assert_nan(gb);
}

/* One infinite coordinate: the partials b / (a^2 + b^2) and -a / (a^2 + b^2)
 * tend to 0 (signed zeros, which a gradient's sum from +0 makes +0); two
 * have no limit. */
static void test_atan2_at_infinity(void **state)
{
    static const double cases[][2] = {{2.0, INFINITY},  {2.0, -INFINITY}, {-2.0, INFINITY},
                                      {INFINITY, 3.0},  {-INFINITY, 3.0}, {INFINITY, -3.0},
                                      {0.0, INFINITY},  {INFINITY, 0.0},  {-1e300, -INFINITY}};
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double a = cases[i][0], b = cases[i][1], ga, gb;
        assert_same(d2(b_atan2, a, b, &ga, &gb), atan2(a, b));
        assert_true(ga == 0.0);
        assert_true(gb == 0.0);
    }
    double ga, gb;
    d2(b_atan2, INFINITY, -INFINITY, &ga, &gb);
    assert_nan(ga);
    assert_nan(gb);
}

/* At the poles the value is +-Inf or NaN and the partial NaN. */
static void test_gamma_poles(void **state)
{
    static const double poles[] = {0.0, -1.0, -2.0, -10.0};
    (void)state;
    for (size_t i = 0; i < sizeof poles / sizeof poles[0]; i++) {
        double fx;
        assert_nan(d1(u_lgamma, poles[i], &fx));
        assert_same(fx, INFINITY);
        assert_nan(d1(u_tgamma, poles[i], &fx));
        assert_true(isinf(fx) || isnan(fx));
    }
}

/* Saturating functions have derivative 0 at an infinite argument (the
 * limit), not NaN. */
static void test_limits_at_infinity(void **state)
{
    static const struct {
        unary_fn f;
        double x, value;
    } cases[] = {
        {u_exp, -INFINITY, 0.0}, {u_atan, INFINITY, 1.5707963267948966},
        {u_atan, -INFINITY, -1.5707963267948966}, {u_tanh, INFINITY, 1.0},
        {u_tanh, -INFINITY, -1.0}, {u_erf, INFINITY, 1.0}, {u_erf, -INFINITY, -1.0},
        {u_erfc, INFINITY, 0.0}, {u_sqrt, INFINITY, INFINITY}, {u_log, INFINITY, INFINITY},
        {u_asinh, INFINITY, INFINITY},
    };
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double fx, g = d1(cases[i].f, cases[i].x, &fx);
        if (same_double(fx, cases[i].value) && g == 0.0)
            continue;
        print_error("case %zu at %g: value %g, derivative %g\n", i, cases[i].x, fx, g);
        _fail(__FILE__, __LINE__);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nan_argument_gives_nan_gradient),
        cmocka_unit_test(test_domain_error_gives_nan_gradient),
        cmocka_unit_test(test_nan_reaches_dependent_entries_only),
        cmocka_unit_test(test_zero_cotangent_times_inf_is_nan),
        cmocka_unit_test(test_sqrt_cbrt_at_zero),
        cmocka_unit_test(test_minus_zero),
        cmocka_unit_test(test_fabs_at_zero),
        cmocka_unit_test(test_fmin_fmax_ties),
        cmocka_unit_test(test_fmin_fmax_ignore_nan),
        cmocka_unit_test(test_fmin_fmax_two_nans),
        cmocka_unit_test(test_pow_negative_base_rounded_exponent),
        cmocka_unit_test(test_subnormal_partials),
        cmocka_unit_test(test_pow_conventions),
        cmocka_unit_test(test_pow_edges),
        cmocka_unit_test(test_pow_integer_exponents),
        cmocka_unit_test(test_hypot_at_origin),
        cmocka_unit_test(test_hypot_nan_and_infinity),
        cmocka_unit_test(test_atan2_at_origin),
        cmocka_unit_test(test_atan2_at_infinity),
        cmocka_unit_test(test_gamma_poles),
        cmocka_unit_test(test_limits_at_infinity),
    };
    return cmocka_run_group_tests_name("conventions", tests, NULL, NULL);
}
