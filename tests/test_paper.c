/* The worked examples of Smeding & Vakar, "Dual-Numbers Reverse AD,
 * Efficiently" (POPL 2023), with their gradients in closed form.
 *
 * The sample points are small dyadic numbers, so every value and every
 * cotangent below is exact in double and the checks can demand equality. */
#include "check.h"

/* Fig. 1 and section 9.4: lambda(x, y). let z = x + y in x * z. */
static ad_real fig1(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real z = ad_add(x[0], x[1]);
    return ad_mul(x[0], z);
}

static void test_fig1(void **state)
{
    static const double points[][2] = {{3, 4}, {-1.5, 2}, {0, 0}, {1000, -7.25}, {0.125, -0.5}};
    (void)state;
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++) {
        double x = points[i][0], y = points[i][1], g[2];
        assert_same(gradient_ok(fig1, NULL, 2, points[i], g), x * (x + y));
        assert_same(g[0], 2 * x + y);
        assert_same(g[1], x);
    }
}

/* Section 6.1: let x3 = x1 + x2 in x3 * x1 + x3. */
static ad_real section61(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real x3 = ad_add(x[0], x[1]);
    return ad_add(ad_mul(x3, x[0]), x3);
}

static void test_section61(void **state)
{
    static const double points[][2] = {{2, 5}, {-3, 0.5}, {0, 0}, {-1, 1}, {64, -0.25}};
    (void)state;
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++) {
        double x1 = points[i][0], x2 = points[i][1], g[2];
        assert_same(gradient_ok(section61, NULL, 2, points[i], g), (x1 + x2) * x1 + (x1 + x2));
        assert_same(g[0], 2 * x1 + x2 + 1);
        assert_same(g[1], x1 + 1);
    }
}

/* Section 5.4's t_bad: x_k = op(x_(k-1), x_(k-1)).  Each x_k is used twice,
 * so the naive transformation takes 2^steps backpropagator calls; finishing
 * at all shows that every record is applied once. */
typedef struct tbad {
    ad_real (*op)(ad_real, ad_real);
    long steps;
} tbad;

static ad_real tbad_objective(const ad_real *x, size_t n, void *ctx)
{
    const tbad *t = ctx;
    ad_real v = x[0];
    (void)n;
    for (long k = 0; k < t->steps; k++)
        v = t->op(v, v);
    return v;
}

static ad_real op_fmin(ad_real a, ad_real b) { return ad_fmin(a, b); }
static ad_real op_fmax(ad_real a, ad_real b) { return ad_fmax(a, b); }
static ad_real op_sub(ad_real a, ad_real b) { return ad_sub(a, b); }
static ad_real op_div(ad_real a, ad_real b) { return ad_div(a, b); }
static ad_real op_add(ad_real a, ad_real b) { return ad_add(a, b); }
static ad_real op_mul(ad_real a, ad_real b) { return ad_mul(a, b); }

static void check_tbad(ad_real (*op)(ad_real, ad_real), long steps, double x0,
                       double want_fx, double want_grad)
{
    tbad t = {op, steps};
    double g;
    assert_same(gradient_ok(tbad_objective, &t, 1, &x0, &g), want_fx);
    assert_same(g, want_grad);
}

/* fmin(x, x) = fmax(x, x) = x: the tie rule gives 1/2 + 1/2 = 1 per step. */
static void test_tbad_select(void **state)
{
    (void)state;
    check_tbad(op_fmin, 1000000, 1.75, 1.75, 1.0);
    check_tbad(op_fmax, 1000000, -3.5, -3.5, 1.0);
}

/* x - x = 0 and x / x = 1: each step's two partials cancel exactly. */
static void test_tbad_cancelling(void **state)
{
    (void)state;
    check_tbad(op_sub, 1000000, 2.5, 0.0, 0.0);
    check_tbad(op_div, 1000000, 2.5, 1.0, 0.0);
}

/* x_n = 2^n x_0 and x_n = x_0^(2^n): derivative 2^n at x_0 = 1, which is
 * still finite for n = 1000. */
static void test_tbad_doubling(void **state)
{
    (void)state;
    check_tbad(op_add, 1000, 1.0, ldexp(1.0, 1000), ldexp(1.0, 1000));
    check_tbad(op_mul, 1000, 1.0, 1.0, ldexp(1.0, 1000));
    check_tbad(op_add, 1000, 0x1p-1000, 1.0, ldexp(1.0, 1000));
}

/* Section 2: x_k = x_(k-2) + x_(k-1) from inputs (x_0, x_1), so that
 * x_n = F(n-1) x_0 + F(n) x_1 with Fibonacci numbers F. */
static ad_real fibonacci_chain(const ad_real *x, size_t n, void *ctx)
{
    const int *steps = ctx;
    ad_real prev = x[0], cur = x[1];
    (void)n;
    for (int k = 2; k <= *steps; k++) {
        ad_real next = ad_add(prev, cur);
        prev = cur;
        cur = next;
    }
    return cur;
}

static double fibonacci(int n)
{
    uint64_t a = 0, b = 1;  /* F(0), F(1) */
    for (int k = 0; k < n; k++) {
        uint64_t t = a + b;
        a = b;
        b = t;
    }
    return (double)a;
}

static void test_fibonacci(void **state)
{
    static const int steps[] = {2, 3, 4, 10, 40, 70};
    const double x[2] = {1.0, 1.0};
    (void)state;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        int n = steps[i];
        double g[2];
        double fx = gradient_ok(fibonacci_chain, (void *)&steps[i], 2, x, g);
        assert_same(fx, fibonacci(n + 1));
        assert_same(g[0], fibonacci(n - 1));
        assert_same(g[1], fibonacci(n));
    }
}

/* The paper's benchmark suite includes Knossos' ex2: f(x) = x^3 + x^4, written
 * once with products and once with pow. */
static ad_real ex2_products(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real sq = ad_mul(x[0], x[0]);
    return ad_add(ad_mul(sq, x[0]), ad_mul(sq, sq));
}

static ad_real ex2_pow(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_add(ad_pow(x[0], 3), ad_pow(x[0], 4));
}

static void test_knossos_ex2(void **state)
{
    static const double fx_at[] = {0, 2, 24, 108}, dfx_at[] = {0, 7, 44, 135};
    (void)state;
    for (int x = 1; x <= 3; x++) {
        double xd = x, g;
        assert_same(gradient_ok(ex2_products, NULL, 1, &xd, &g), fx_at[x]);
        assert_same(g, dfx_at[x]);
        assert_same(gradient_ok(ex2_pow, NULL, 1, &xd, &g), fx_at[x]);
        assert_same(g, dfx_at[x]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fig1),
        cmocka_unit_test(test_section61),
        cmocka_unit_test(test_tbad_select),
        cmocka_unit_test(test_tbad_cancelling),
        cmocka_unit_test(test_tbad_doubling),
        cmocka_unit_test(test_fibonacci),
        cmocka_unit_test(test_knossos_ex2),
    };
    return cmocka_run_group_tests_name("paper examples", tests, NULL, NULL);
}
