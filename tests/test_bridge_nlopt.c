/* dualrev/nlopt.h: Hock-Schittkowski 71 with SLSQP (a vector inequality
 * constraint and a scalar equality), the callbacks' gradients and
 * Jacobian, value-only calls recording nothing, and a failing objective
 * stopping the optimiser. */
#include <nlopt.h>

#include <dualrev/nlopt.h>

#include "bridge_problems.h"

static void test_hs71(void **state)
{
    double x[4] = {1.0, 5.0, 5.0, 1.0}, lo[4] = {1, 1, 1, 1}, hi[4] = {5, 5, 5, 5}, fx;
    ad_nlopt obj, ineq, eq;
    (void)state;
    nlopt_opt opt = nlopt_create(NLOPT_LD_SLSQP, 4);
    assert_int_equal(ad_nlopt_init(&obj, opt, hs71_objective, NULL, NULL, 4, 0), AD_OK);
    assert_int_equal(ad_nlopt_init(&ineq, opt, NULL, hs71_inequality, NULL, 4, 1), AD_OK);
    assert_int_equal(ad_nlopt_init(&eq, opt, hs71_equality, NULL, NULL, 4, 0), AD_OK);
    const double tol[1] = {1e-10};
    nlopt_set_lower_bounds(opt, lo);
    nlopt_set_upper_bounds(opt, hi);
    nlopt_set_min_objective(opt, ad_nlopt_scalar, &obj);
    nlopt_add_inequality_mconstraint(opt, 1, ad_nlopt_vector, &ineq, tol);
    nlopt_add_equality_constraint(opt, ad_nlopt_scalar, &eq, 1e-10);
    nlopt_set_xtol_rel(opt, 1e-12);
    nlopt_set_ftol_rel(opt, 1e-14);
    nlopt_result r = nlopt_optimize(opt, x, &fx);
    assert_true(r > 0);
    assert_int_equal(obj.status, AD_OK);
    assert_int_equal(ineq.status, AD_OK);
    assert_int_equal(eq.status, AD_OK);
    assert_near(fx, HS71_OPTIMUM, 1e-8, 0.0);
    assert_near(x[0], 1.0, 1e-6, 1e-6);
    ad_nlopt_free(&obj), ad_nlopt_free(&ineq), ad_nlopt_free(&eq);
    nlopt_destroy(opt);
}

/* y = (x0 x1 - x2, sin(x3) x0) */
static void two(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = ad_sub(ad_mul(x[0], x[1]), x[2]);
    y[1] = ad_mul(ad_sin(x[3]), x[0]);
}

static ad_real two_0(const ad_real *x, size_t n, void *ctx)
{
    ad_real y[2];
    two(x, n, y, 2, ctx);
    return y[0];
}

static ad_real two_1(const ad_real *x, size_t n, void *ctx)
{
    ad_real y[2];
    two(x, n, y, 2, ctx);
    return y[1];
}

static void test_callbacks(void **state)
{
    const double x[4] = {0.5, -1.0, 1.5, 0.25};
    double g[4], jac[8], y[2], fx;
    ad_nlopt s, v;
    (void)state;
    nlopt_opt opt = nlopt_create(NLOPT_LD_SLSQP, 4);
    assert_int_equal(ad_nlopt_init(&s, opt, hs71_objective, NULL, NULL, 4, 0), AD_OK);
    assert_int_equal(ad_nlopt_init(&v, opt, NULL, two, NULL, 4, 2), AD_OK);
    fx = ad_nlopt_scalar(4, x, g, &s);
    assert_near(fx, value_on_constants(hs71_objective, NULL, 4, x), 1e-15, 0.0);
    check_gradient_fd(hs71_objective, NULL, 4, x, g);
    ad_nlopt_vector(2, y, 4, x, jac, &v);
    assert_same(y[0], value_on_constants(two_0, NULL, 4, x));
    check_gradient_fd(two_0, NULL, 4, x, jac);
    check_gradient_fd(two_1, NULL, 4, x, jac + 4);
    /* value only: no recording, so a tape limit of 1 record does not stop it */
    size_t old = ad_set_tape_limit(1);
    double y2[2];
    assert_same(ad_nlopt_scalar(4, x, NULL, &s), fx);
    ad_nlopt_vector(2, y2, 4, x, NULL, &v);
    assert_same(y2[0], y[0]);
    assert_same(y2[1], y[1]);
    assert_nan(ad_nlopt_scalar(4, x, g, &s));  /* a gradient is recorded: AD_ERANGE */
    ad_set_tape_limit(old);
    assert_int_equal(s.status, AD_ERANGE);
    ad_nlopt_free(&s), ad_nlopt_free(&v);
    ad_nlopt both;
    assert_int_equal(ad_nlopt_init(&both, opt, hs71_objective, two, NULL, 4, 2), AD_EINVAL);
    ad_nlopt_free(&both);  /* nothing to free: harmless */
    nlopt_destroy(opt);
}

static void test_failure_stops(void **state)
{
    double x[2] = {1.0, 2.0}, fx, g[2];
    ad_nlopt b;
    (void)state;
    assert_int_equal(ad_gradient(failing, NULL, 2, x, &fx, g), AD_OK);  /* keeps a value */
    nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, 2);
    assert_int_equal(ad_nlopt_init(&b, opt, failing, NULL, NULL, 2, 0), AD_OK);
    nlopt_set_min_objective(opt, ad_nlopt_scalar, &b);
    nlopt_set_maxeval(opt, 100);
    assert_int_equal(nlopt_optimize(opt, x, &fx), NLOPT_FORCED_STOP);
    assert_int_equal(b.status, AD_EFOREIGN);
    ad_nlopt_free(&b);
    nlopt_destroy(opt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hs71),
        cmocka_unit_test(test_callbacks),
        cmocka_unit_test(test_failure_stops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
