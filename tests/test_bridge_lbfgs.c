/* dualrev/lbfgs.h: liblbfgs on Rosenbrock in 100 dimensions, the callback's
 * gradient against central differences, and a failing objective's status
 * reaching the caller. */
#include <string.h>

#include <lbfgs.h>

#include <dualrev/lbfgs.h>

#include "bridge_problems.h"

static void test_rosenbrock(void **state)
{
    enum { N = 100 };
    lbfgsfloatval_t x[N], fx;
    lbfgs_parameter_t param;
    (void)state;
    for (int i = 0; i < N; i++)
        x[i] = i % 2 ? 1.2 : -1.2;
    lbfgs_parameter_init(&param);
    param.epsilon = 1e-10;
    param.max_iterations = 5000;
    ad_lbfgs b = ad_lbfgs_of(rosenbrock, NULL);
    int ret;
    assert_int_equal(ad_lbfgs_minimize(N, x, &fx, &b, &param, &ret), AD_OK);
    assert_true(ret == LBFGS_SUCCESS || ret == LBFGS_CONVERGENCE || ret == LBFGS_STOP ||
                ret == LBFGSERR_ROUNDING_ERROR);
    assert_int_equal(b.status, AD_OK);
    assert_true(b.evaluations > 0);
    assert_true(fx < 1e-12);
    for (int i = 0; i < N; i++)
        assert_near(x[i], 1.0, 1e-5, 1e-5);
}

static void test_gradient(void **state)
{
    const double x[5] = {0.5, -1.0, 1.5, 0.25, 2.0};
    double g[5];
    (void)state;
    ad_lbfgs b = ad_lbfgs_of(rosenbrock, NULL);
    double fx = ad_lbfgs_evaluate(&b, x, g, 5, 1.0);
    assert_near(fx, value_on_constants(rosenbrock, NULL, 5, x), 1e-15, 0.0);
    check_gradient_fd(rosenbrock, NULL, 5, x, g);
}

static void test_failure_reaches_caller(void **state)
{
    lbfgsfloatval_t x[2] = {1.0, 2.0}, fx;
    lbfgs_parameter_t param;
    (void)state;
    lbfgs_parameter_init(&param);
    ad_lbfgs b = ad_lbfgs_of(failing, NULL);
    double g[2];
    assert_int_equal(ad_gradient(failing, NULL, 2, x, &fx, g), AD_OK);  /* keeps a value */
    int ret;
    /* lbfgs's code says "already minimized" for a NaN first gradient: the
     * status is what reaches the caller */
    assert_int_equal(ad_lbfgs_minimize(2, x, &fx, &b, &param, &ret), AD_EFOREIGN);
    assert_true(ret != LBFGS_SUCCESS);
    assert_int_equal(b.status, AD_EFOREIGN);
    assert_int_equal(b.evaluations, 1);
    assert_int_equal(ad_lbfgs_progress(&b, x, g, fx, 0, 0, 0, 2, 1, 1), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rosenbrock),
        cmocka_unit_test(test_gradient),
        cmocka_unit_test(test_failure_reaches_caller),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
