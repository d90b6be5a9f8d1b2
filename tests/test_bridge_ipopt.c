/* dualrev/ipopt.h: Hock-Schittkowski 71 with Ipopt, exact sparse Hessians
 * and Ipopt's own L-BFGS approximation; value-only calls recording
 * nothing; a structure that moves (AD_ESTRUCTURE) and a failing objective
 * stopping the solve; the initialisation's errors. */
#include <dualrev/ipopt.h>

#include "bridge_problems.h"

/* HS71's constraints as Ipopt takes them: 25 <= x0 x1 x2 x3, sum x^2 = 40. */
static void hs71_g(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = ad_mul(ad_mul(x[0], x[1]), ad_mul(x[2], x[3]));
    y[1] = ad_add(ad_add(ad_mul(x[0], x[0]), ad_mul(x[1], x[1])),
                  ad_add(ad_mul(x[2], x[2]), ad_mul(x[3], x[3])));
}

static const double x_l[4] = {1, 1, 1, 1}, x_u[4] = {5, 5, 5, 5};
static const double g_l[2] = {25, 40}, g_u[2] = {2e19, 40};

static void quiet(ad_ipopt *b)
{
    AddIpoptIntOption(b->problem, "print_level", 0);
    AddIpoptStrOption(b->problem, "sb", "yes");
    AddIpoptNumOption(b->problem, "tol", 1e-10);
}

static void solve_hs71(const char *hessian, double *obj)
{
    double x[4] = {1.0, 5.0, 5.0, 1.0}, gx[2];
    ad_ipopt b;
    enum ApplicationReturnStatus app;
    assert_int_equal(ad_ipopt_init(&b, hs71_objective, hs71_g, NULL, 4, 2, x_l, x_u, g_l, g_u, x),
                     AD_OK);
    assert_int_equal(b.jac.nnz, 8);
    assert_int_equal(b.hess.nnz, 10);  /* the Lagrangian's lower triangle is dense */
    quiet(&b);
    if (hessian)
        AddIpoptStrOption(b.problem, "hessian_approximation", (char *)hessian);
    assert_int_equal(ad_ipopt_solve(&b, x, obj, gx, NULL, NULL, NULL, &app), AD_OK);
    assert_true(app == Solve_Succeeded || app == Solved_To_Acceptable_Level);
    assert_near(*obj, HS71_OPTIMUM, 1e-8, 0.0);
    assert_near(x[0], 1.0, 1e-6, 1e-6);
    assert_near(gx[1], 40.0, 1e-8, 0.0);
    ad_ipopt_free(&b);
}

static void test_hs71_exact(void **state)
{
    double obj;
    (void)state;
    solve_hs71(NULL, &obj);
}

static void test_hs71_limited_memory(void **state)
{
    double obj;
    (void)state;
    solve_hs71("limited-memory", &obj);
}

static void test_value_calls_record_nothing(void **state)
{
    double x[4] = {1.0, 5.0, 5.0, 1.0}, obj = 0.0, g[2] = {0.0, 0.0};
    ad_ipopt b;
    (void)state;
    assert_int_equal(ad_ipopt_init(&b, hs71_objective, hs71_g, NULL, 4, 2, x_l, x_u, g_l, g_u, x),
                     AD_OK);
    size_t old = ad_set_tape_limit(1);
    assert_true(ad__ipopt_f(4, x, 1, &obj, &b));
    assert_true(ad__ipopt_g(4, x, 1, 2, g, &b));
    ad_set_tape_limit(old);
    assert_same(obj, 1.0 * 1.0 * (1.0 + 5.0 + 5.0) + 5.0);
    assert_same(g[0], 25.0);
    assert_same(g[1], 52.0);
    assert_int_equal(b.status, AD_OK);
    ad_ipopt_free(&b);
}

/* HS71 and a fifth variable, x4^2 in the objective, which the product
 * constraint takes, by a C branch, only where x0 > 2: a point there
 * reaches the Jacobian's entry (0, 4), outside the structure at x0 = 1. */
static ad_real five_objective(const ad_real *x, size_t n, void *ctx)
{
    return ad_add(hs71_objective(x, n, ctx), ad_mul(x[4], x[4]));
}

static void branching_g(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    hs71_g(x, n, y, m, ctx);
    if (ad_value(x[0]) > 2.0)
        y[0] = ad_add(y[0], ad_mul(x[0], x[4]));
}

static void test_structure_moves(void **state)
{
    double x[5] = {1.0, 5.0, 5.0, 1.0, 0.5}, obj;
    const double lo[5] = {1, 1, 1, 1, -5}, hi[5] = {5, 5, 5, 5, 5};
    ad_ipopt b;
    enum ApplicationReturnStatus app;
    (void)state;
    assert_int_equal(ad_ipopt_init(&b, five_objective, branching_g, NULL, 5, 2, lo, hi, g_l, g_u,
                                   x),
                     AD_OK);
    quiet(&b);
    double at[5] = {3.0, 4.0, 2.0, 1.5, 0.5};
    ad_status s = ad_ipopt_solve(&b, at, &obj, NULL, NULL, NULL, NULL, &app);
    assert_int_equal(s, AD_ESTRUCTURE);
    assert_true(app != Solve_Succeeded);
    ad_ipopt_free(&b);
}

/* Rosenbrock under a constraint whose term in x1 is there only where
 * x0 < 0.5: the start point fixes both entries of its row, and past
 * x0 = 0.5 the point reaches fewer, which is no change of structure. */
static void shrinking_g(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = ad_add(x[0], 0.0);
    if (ad_value(x[0]) < 0.5)
        y[0] = ad_add(y[0], ad_mul(1e-3, x[1]));
}

static void test_structure_shrinks(void **state)
{
    double x[2] = {0.0, 0.0}, obj;
    const double lo[2] = {-1e20, -1e20}, hi[2] = {1e20, 1e20}, gl[1] = {-1e20}, gu[1] = {1.5};
    ad_ipopt b;
    enum ApplicationReturnStatus app;
    (void)state;
    assert_int_equal(ad_ipopt_init(&b, rosenbrock, shrinking_g, NULL, 2, 1, lo, hi, gl, gu, x),
                     AD_OK);
    assert_int_equal(b.jac.nnz, 2);
    quiet(&b);
    assert_int_equal(ad_ipopt_solve(&b, x, &obj, NULL, NULL, NULL, NULL, &app), AD_OK);
    assert_int_equal(app, Solve_Succeeded);
    assert_true(fabs(x[0] - 1.0) < 1e-6 && fabs(x[1] - 1.0) < 1e-6);
    ad_ipopt_free(&b);
}

static void test_failure_stops(void **state)
{
    double x[2] = {1.0, 2.0}, obj;
    const double lo[2] = {-10, -10}, hi[2] = {10, 10};
    ad_ipopt b;
    enum ApplicationReturnStatus app;
    (void)state;
    assert_int_equal(ad_ipopt_init(&b, failing, NULL, NULL, 2, 0, lo, hi, NULL, NULL, x), AD_OK);
    quiet(&b);  /* failing kept a value of the initialisation's recording */
    assert_int_equal(ad_ipopt_solve(&b, x, &obj, NULL, NULL, NULL, NULL, &app), AD_EFOREIGN);
    assert_true(app != Solve_Succeeded);
    ad_ipopt_free(&b);
}

static void test_init_errors(void **state)
{
    double x[4] = {1.0, 5.0, 5.0, 1.0};
    ad_ipopt b;
    (void)state;
    assert_int_equal(ad_ipopt_init(&b, NULL, hs71_g, NULL, 4, 2, x_l, x_u, g_l, g_u, x), AD_EINVAL);
    assert_null(b.problem);
    assert_int_equal(ad_ipopt_init(&b, hs71_objective, NULL, NULL, 4, 2, x_l, x_u, g_l, g_u, x),
                     AD_EINVAL);
    assert_int_equal(ad_ipopt_init(&b, hs71_objective, hs71_g, NULL, 4, 2, x_l, x_u, g_l, g_u,
                                   NULL),
                     AD_EINVAL);
    ad_ipopt_free(&b);  /* nothing to free: harmless */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hs71_exact),
        cmocka_unit_test(test_hs71_limited_memory),
        cmocka_unit_test(test_value_calls_record_nothing),
        cmocka_unit_test(test_structure_moves),
        cmocka_unit_test(test_structure_shrinks),
        cmocka_unit_test(test_failure_stops),
        cmocka_unit_test(test_init_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
