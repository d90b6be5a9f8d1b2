/* Derivatives to nearly full precision over wide ranges: tails, huge and
 * tiny magnitudes, arguments next to the ends of a domain.  Finite
 * differences cannot see there (test_ops.c covers the bulk of each domain);
 * the oracle here is the analytic derivative in long double.
 *
 * Tolerance: 1e-12 relative.  Each recorded partial is a handful of
 * correctly rounded or 1-ulp operations; the worst honest case is erf and
 * erfc, whose exp(-x*x) inherits the rounding of x*x, x^2 2^-53 <= 8e-14
 * for |x| <= 26.  A cancelling formula is off by far more: 1e-12 separates
 * the two.  The gamma functions are left to test_ops.c: near the zeros of
 * digamma no formula keeps relative precision. */
#include <float.h>

#include "check.h"

#define POINTS 2000
#define RTOL 1e-12

typedef long double ld;

/* How to spread the sample points: uniformly over [lo, hi] (LINEAR), or
 * from a t log-uniform in [lo, hi] as t (POSITIVE), +-t (SIGNED), 1 + t
 * (ONE_PLUS), -1 + t (MINUS_ONE_PLUS) or +-(1 - t) (NEAR_ONE). */
typedef enum spread { LINEAR, POSITIVE, SIGNED, ONE_PLUS, MINUS_ONE_PLUS, NEAR_ONE } spread;

static double draw(spread s, double lo, double hi, uint64_t *rng)
{
    if (s == LINEAR)
        return rng_uniform(rng, lo, hi);
    double t = exp(rng_uniform(rng, log(lo), log(hi)));
    double sign = rng_next(rng) & 1 ? -1.0 : 1.0;
    switch (s) {
    case SIGNED: return sign * t;
    case ONE_PLUS: return 1.0 + t;
    case MINUS_ONE_PLUS: return -1.0 + t;
    case NEAR_ONE: return sign * (1.0 - t);
    default: return t;
    }
}

static int close_enough(double got, ld want)
{
    return fabsl((ld)got - want) <= RTOL * fabsl(want);
}

/* Skips points whose derivative is not a normal double: overflow and
 * underflow there say nothing about the formula. */
static int representable(ld want)
{
    return isfinite((double)want) && fabsl(want) >= DBL_MIN;
}

/* ---- unary operations ---- */

typedef struct unary_case {
    const char *name;
    ad_real (*ad)(ad_real);
    ld (*d)(ld);
    spread spread;
    double lo, hi;
} unary_case;

static ld sq(ld a) { return a * a; }
static ld d_sqrt(ld x) { return 0.5L / sqrtl(x); }
static ld d_cbrt(ld x) { return 1.0L / (3.0L * sq(cbrtl(x))); }
static ld d_exp(ld x) { return expl(x); }
static ld d_log(ld x) { return 1.0L / x; }
static ld d_log1p(ld x) { return 1.0L / (1.0L + x); }
static ld d_log2(ld x) { return 1.0L / (x * logl(2.0L)); }
static ld d_log10(ld x) { return 1.0L / (x * logl(10.0L)); }
static ld d_sin(ld x) { return cosl(x); }
static ld d_cos(ld x) { return -sinl(x); }
static ld d_tan(ld x) { return 1.0L / sq(cosl(x)); }
static ld d_asin(ld x) { return 1.0L / sqrtl((1.0L - x) * (1.0L + x)); }
static ld d_acos(ld x) { return -d_asin(x); }
static ld d_atan(ld x) { return 1.0L / (1.0L + x * x); }
static ld d_sinh(ld x) { return coshl(x); }
static ld d_cosh(ld x) { return sinhl(x); }
static ld d_tanh(ld x) { return 1.0L / sq(coshl(x)); }
static ld d_asinh(ld x) { return 1.0L / sqrtl(1.0L + x * x); }
static ld d_acosh(ld x) { return 1.0L / sqrtl((x - 1.0L) * (x + 1.0L)); }
static ld d_atanh(ld x) { return 1.0L / ((1.0L - x) * (1.0L + x)); }
static ld d_erf(ld x) { return 1.1283791670955125738961589031215452L * expl(-x * x); }
static ld d_erfc(ld x) { return -d_erf(x); }

#define WRAP(op) static ad_real w_##op(ad_real x) { return ad_##op(x); }
WRAP(sqrt) WRAP(cbrt) WRAP(exp) WRAP(expm1) WRAP(log) WRAP(log1p) WRAP(log2)
WRAP(log10) WRAP(sin) WRAP(cos) WRAP(tan) WRAP(asin) WRAP(acos) WRAP(atan)
WRAP(sinh) WRAP(cosh) WRAP(tanh) WRAP(asinh) WRAP(acosh) WRAP(atanh) WRAP(erf)
WRAP(erfc)

static const unary_case unary_cases[] = {
    {"sqrt", w_sqrt, d_sqrt, POSITIVE, 1e-300, 1e300},
    {"cbrt", w_cbrt, d_cbrt, SIGNED, 1e-300, 1e300},
    {"exp", w_exp, d_exp, LINEAR, -700, 700},
    {"expm1", w_expm1, d_exp, LINEAR, -700, 700},
    {"log", w_log, d_log, POSITIVE, 1e-300, 1e300},
    {"log1p", w_log1p, d_log1p, POSITIVE, 1e-300, 1e300},
    {"log1p near -1", w_log1p, d_log1p, MINUS_ONE_PLUS, 1e-15, 1},
    {"log2", w_log2, d_log2, POSITIVE, 1e-300, 1e300},
    {"log10", w_log10, d_log10, POSITIVE, 1e-300, 1e300},
    {"sin", w_sin, d_sin, LINEAR, -1000, 1000},
    {"cos", w_cos, d_cos, LINEAR, -1000, 1000},
    {"tan", w_tan, d_tan, LINEAR, -1000, 1000},
    {"asin", w_asin, d_asin, NEAR_ONE, 1e-15, 1},
    {"acos", w_acos, d_acos, NEAR_ONE, 1e-15, 1},
    {"atan", w_atan, d_atan, SIGNED, 1e-300, 1e150},
    {"sinh", w_sinh, d_sinh, LINEAR, -700, 700},
    {"cosh", w_cosh, d_cosh, LINEAR, -700, 700},
    {"tanh", w_tanh, d_tanh, LINEAR, -30, 30},
    {"asinh", w_asinh, d_asinh, SIGNED, 1e-300, 1e300},
    {"acosh", w_acosh, d_acosh, ONE_PLUS, 1e-15, 1e300},
    {"atanh", w_atanh, d_atanh, NEAR_ONE, 1e-15, 1},
    {"erf", w_erf, d_erf, LINEAR, -26, 26},
    {"erfc", w_erfc, d_erfc, LINEAR, -26, 26},
};

static ad_real unary_objective(const ad_real *x, size_t n, void *ctx)
{
    const unary_case *c = ctx;
    (void)n;
    return c->ad(x[0]);
}

static void test_unary(void **state)
{
    const unary_case *c = *state;
    uint64_t rng = 0xacc0001;
    int bad = 0;
    if (LDBL_MANT_DIG < 64)
        skip();  /* the oracle needs a long double wider than double */
    for (int i = 0; i < POINTS; i++) {
        double x = draw(c->spread, c->lo, c->hi, &rng), g;
        ld want = c->d(x);
        if (!representable(want))
            continue;
        gradient_ok(unary_objective, (void *)c, 1, &x, &g);
        if (!close_enough(g, want) && bad++ < 3)
            print_error("%s'(%.17g) = %.17g, expected %.17Lg (relative error %.3Lg)\n",
                        c->name, x, g, want, fabsl((g - want) / want));
    }
    if (bad)
        print_error("%s: %d of %d points beyond %g relative\n", c->name, bad, POINTS, RTOL);
    assert_int_equal(bad, 0);
}

/* ---- binary operations ---- */

typedef struct binary_case {
    const char *name;
    ad_real (*ad)(ad_real, ad_real);
    void (*d)(ld a, ld b, ld *da, ld *db);
    spread sa, sb;
    double alo, ahi, blo, bhi;
} binary_case;

static void d_div(ld a, ld b, ld *da, ld *db)
{
    *da = 1.0L / b;
    *db = -a / (b * b);
}

static void d_pow(ld a, ld b, ld *da, ld *db)
{
    *da = b * powl(a, b - 1.0L);
    *db = logl(a) * powl(a, b);
}

static void d_atan2(ld a, ld b, ld *da, ld *db)
{
    ld r2 = a * a + b * b;
    *da = b / r2;
    *db = -a / r2;
}

static void d_hypot(ld a, ld b, ld *da, ld *db)
{
    ld h = sqrtl(a * a + b * b);
    *da = a / h;
    *db = b / h;
}

static ad_real w_div(ad_real a, ad_real b) { return ad_div(a, b); }
static ad_real w_pow(ad_real a, ad_real b) { return ad_pow(a, b); }
static ad_real w_atan2(ad_real a, ad_real b) { return ad_atan2(a, b); }
static ad_real w_hypot(ad_real a, ad_real b) { return ad_hypot(a, b); }

static const binary_case binary_cases[] = {
    {"div", w_div, d_div, SIGNED, SIGNED, 1e-100, 1e100, 1e-100, 1e100},
    {"pow", w_pow, d_pow, POSITIVE, LINEAR, 1e-3, 1e3, -50, 50},
    {"atan2", w_atan2, d_atan2, SIGNED, SIGNED, 1e-100, 1e100, 1e-100, 1e100},
    {"hypot", w_hypot, d_hypot, SIGNED, SIGNED, 1e-100, 1e100, 1e-100, 1e100},
};

static ad_real binary_objective(const ad_real *x, size_t n, void *ctx)
{
    const binary_case *c = ctx;
    (void)n;
    return c->ad(x[0], x[1]);
}

static void test_binary(void **state)
{
    const binary_case *c = *state;
    uint64_t rng = 0xacc0002;
    int bad = 0;
    if (LDBL_MANT_DIG < 64)
        skip();
    for (int i = 0; i < POINTS; i++) {
        double ab[2], g[2];
        ld da, db;
        ab[0] = draw(c->sa, c->alo, c->ahi, &rng);
        ab[1] = draw(c->sb, c->blo, c->bhi, &rng);
        c->d(ab[0], ab[1], &da, &db);
        if (!representable(da) || !representable(db))
            continue;
        gradient_ok(binary_objective, (void *)c, 2, ab, g);
        if ((!close_enough(g[0], da) || !close_enough(g[1], db)) && bad++ < 3)
            print_error("%s at (%.17g, %.17g): gradient (%.17g, %.17g), expected (%.17Lg, %.17Lg)\n",
                        c->name, ab[0], ab[1], g[0], g[1], da, db);
    }
    assert_int_equal(bad, 0);
}

/* ---- points where an intermediate over- or underflows ----
 *
 * Each partial at these points is a double apart from its formula's
 * intermediates (issue 19): 1 / b overflows where -a / b^2 is -2.5e307;
 * a^(b-1) overflows where b a^(b-1) is 4.9e306; hypot overflows, or is
 * subnormal and so off by up to 40% (hypot(5e-324, 5e-324) is 5e-324),
 * where a / h and b / h are ordinary numbers.  The oracle is the analytic
 * partial in long double, rounded to double: where that is Inf or 0 the
 * partial must be too (Inf: the partial itself overflows), where it is
 * subnormal within 2 of its ulps, else within RTOL. */
static int matches(double got, ld want)
{
    double w = (double)want;
    if (isinf(w) || w == 0.0)
        return got == w;
    if (fabs(w) < DBL_MIN)
        return fabs(got - w) <= 2 * DBL_TRUE_MIN;
    return close_enough(got, want);
}

typedef struct extreme_case {
    const binary_case *op;
    double a, b;
} extreme_case;

static ad_real a_over_const(const ad_real *x, size_t n, void *ctx)
{
    const extreme_case *c = ctx;
    (void)n;
    return c->op->ad(x[0], ad_const(c->b));
}

static ad_real const_over_b(const ad_real *x, size_t n, void *ctx)
{
    const extreme_case *c = ctx;
    (void)n;
    return c->op->ad(ad_const(c->a), x[0]);
}

static void test_extremes(void **state)
{
    static const binary_case *const div = &binary_cases[0], *const pw = &binary_cases[1],
                                    *const hy = &binary_cases[3];
    static const extreme_case cases[] = {
        /* d/db a/b, |b| < 5.6e-309: a tiny a over a tiny b (d/da = 1/b overflows) */
        {div, 1e-310, 2e-309},
        {div, -3e-311, 5e-309},
        {div, 4e-312, -1e-309},
        {div, 5e-324, 5e-324},
        /* d/da a^b with a^(b-1) past DBL_MAX */
        {pw, 1e-310, 0.001},
        {pw, 1e-310, -0.001},
        {pw, 2e-320, 0.002},
        {pw, 4.9406564584124654e-324, 0.045},
        {pw, 1e-300, 0.005},
        /* hypot past DBL_MAX, and below DBL_MIN */
        {hy, 1.5e308, 1.5e308},
        {hy, 1e308, -1.7e308},
        {hy, -1.7976931348623157e308, 1e300},
        {hy, 1.7976931348623157e308, -1.7976931348623157e308},
        {hy, 4.9406564584124654e-324, 4.9406564584124654e-324},
        {hy, 2e-323, -3e-323},
        {hy, 1e-310, 3e-310},
        {hy, -4e-320, 1e-322},
        {hy, 2.2250738585072009e-308, 1e-310},
    };
    (void)state;
    if (LDBL_MANT_DIG < 64)
        skip();
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const extreme_case *c = &cases[i];
        double ab[2] = {c->a, c->b}, g[2], g1;
        ld da, db;
        c->op->d(c->a, c->b, &da, &db);
        gradient_ok(binary_objective, (void *)c->op, 2, ab, g);
        if (!matches(g[0], da) || !matches(g[1], db)) {
            bad++;
            print_error("%s at (%.17g, %.17g): gradient (%.17g, %.17g), expected (%.17Lg, %.17Lg)\n",
                        c->op->name, c->a, c->b, g[0], g[1], da, db);
        }
        /* the same with the other argument a constant */
        gradient_ok(a_over_const, (void *)c, 1, &ab[0], &g1);
        if (!matches(g1, da)) {
            bad++;
            print_error("%s(x, %.17g) at %.17g: %.17g, expected %.17Lg\n", c->op->name, c->b, c->a,
                        g1, da);
        }
        gradient_ok(const_over_b, (void *)c, 1, &ab[1], &g1);
        if (!matches(g1, db)) {
            bad++;
            print_error("%s(%.17g, x) at %.17g: %.17g, expected %.17Lg\n", c->op->name, c->a, c->b,
                        g1, db);
        }
    }
    assert_int_equal(bad, 0);
}

/* hypot(x, x) = sqrt(2) |x|: the derivative sqrt(2), also where hypot(x, x)
 * is subnormal and rounds to x (it was 2 there). */
static ad_real hypot_self(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_hypot(x[0], x[0]);
}

static void test_hypot_self(void **state)
{
    static const double xs[] = {4.9406564584124654e-324, 1e-322, 3e-310, 2.2250738585072014e-308,
                                1.0, 1e308, 1.7976931348623157e308, -4.9406564584124654e-324};
    (void)state;
    if (LDBL_MANT_DIG < 64)
        skip();
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
        double g, v = gradient_ok(hypot_self, NULL, 1, &xs[i], &g);
        assert_same(v, hypot(xs[i], xs[i]));
        ld want = xs[i] > 0 ? sqrtl(2.0L) : -sqrtl(2.0L);
        if (!close_enough(g, want)) {
            print_error("d/dx hypot(x, x) at %.17g = %.17g, expected %.17Lg\n", xs[i], g, want);
            fail();
        }
    }
}

#define CASES(arr) (sizeof arr / sizeof arr[0])

int main(void)
{
    struct CMUnitTest tests[CASES(unary_cases) + CASES(binary_cases) + 2];
    size_t k = 0;
    for (size_t i = 0; i < CASES(unary_cases); i++, k++)
        tests[k] = (struct CMUnitTest){.name = unary_cases[i].name, .test_func = test_unary,
                                       .initial_state = (void *)&unary_cases[i]};
    for (size_t i = 0; i < CASES(binary_cases); i++, k++)
        tests[k] = (struct CMUnitTest){.name = binary_cases[i].name, .test_func = test_binary,
                                       .initial_state = (void *)&binary_cases[i]};
    tests[k++] = (struct CMUnitTest){.name = "extremes", .test_func = test_extremes};
    tests[k++] = (struct CMUnitTest){.name = "hypot(x, x)", .test_func = test_hypot_self};
    return cmocka_run_group_tests_name("accuracy", tests, NULL, NULL);
}
