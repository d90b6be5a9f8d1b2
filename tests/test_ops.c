/* Every elementary operation against libm: its value exactly, its derivative
 * (each argument, in every mix of ad_real and double) against an
 * eighth-order central finite difference of the libm function.
 *
 * Tolerance: |ad - fd| <= 1e-8 |fd| + noise.  noise bounds the difference's
 * rounding error (check.h); truncation is below 1e-10 relative at the
 * sampled points (see fd_step), and the partials dualrev records are within a
 * few ulps of the truth, so 1e-8 leaves ample slack while a wrong formula is
 * off by O(1). */
#include "check.h"
#include "ops_list.h"
#include "ops_table.h"

#define POINTS 200
#define RTOL 1e-8

/* ---- unary operations ---- */

static double unary_ref(double x, const void *ctx)
{
    const unary_op *op = ctx;
    return op->ref(x);
}

static void check_unary_at(const unary_op *op, double x)
{
    double g;
    double fx = gradient_ok(unary_objective, (void *)op, 1, &x, &g);
    assert_same(fx, op->ref(x));
    assert_same(op->plain(x), op->ref(x));
    fd_result fd = fd_derivative(unary_ref, op, x);
    assert_near(g, fd.d, RTOL, fd.noise);
}

static void test_unary(void **state)
{
    const unary_op *op = *state;
    uint64_t rng = 0x5eed0001;
    for (int i = 0; i < POINTS; i++)
        check_unary_at(op, draw_unary(op, &rng, op->lo, op->hi));
}

/* ---- binary operations ---- */

static double ref_in_a(double a, const void *ctx)
{
    const binary_point *p = ctx;
    return p->op->ref(a, p->b);
}

static double ref_in_b(double b, const void *ctx)
{
    const binary_point *p = ctx;
    return p->op->ref(p->a, b);
}

static void check_binary_at(binary_point *p)
{
    double want = p->op->ref(p->a, p->b);
    fd_result da = fd_derivative(ref_in_a, p, p->a);
    fd_result db = fd_derivative(ref_in_b, p, p->b);
    double ab[2] = {p->a, p->b}, g[2];

    assert_same(gradient_ok(objective_rr, p, 2, ab, g), want);
    assert_near(g[0], da.d, RTOL, da.noise);
    assert_near(g[1], db.d, RTOL, db.noise);

    assert_same(gradient_ok(objective_rd, p, 1, &p->a, g), want);
    assert_near(g[0], da.d, RTOL, da.noise);

    assert_same(gradient_ok(objective_dr, p, 1, &p->b, g), want);
    assert_near(g[0], db.d, RTOL, db.noise);

    assert_same(p->op->plain(p->a, p->b), want);
}

static void test_binary(void **state)
{
    binary_point p = {*state, 0.0, 0.0};
    uint64_t rng = 0x5eed0002;
    for (int i = 0; i < POINTS; i++) {
        draw_binary(&p, &rng);
        check_binary_at(&p);
    }
}

#define UNARY_TEST(op, ...) {.name = "unary " #op, .test_func = test_unary, .initial_state = (void *)&unary_##op},
#define BINARY_TEST(op, ...) {.name = "binary " #op, .test_func = test_binary, .initial_state = (void *)&binary_##op},

int main(void)
{
    const struct CMUnitTest tests[] = {
        UNARY_OPS(UNARY_TEST)
        BINARY_OPS(BINARY_TEST)
    };
    return cmocka_run_group_tests_name("elementary operations", tests, NULL, NULL);
}
