/* dualrev/lbfgs.h: liblbfgs on Rosenbrock in 100 dimensions, the callback's
 * gradient against central differences, and a failing objective's status
 * reaching the caller; with replay (b.replay), the same runs to the same
 * bits with f called once, a guard that flips on the way recorded again,
 * and a function a program cannot keep evaluated as without replay. */
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

/* One run of lbfgs on f (n values) from x_i = +-1.2, replaying or not:
 * the minimiser, the value there, lbfgs's code, the evaluations, and f's
 * calls (counted through ctx). */
typedef struct run {
    lbfgsfloatval_t x[100], fx;
    int ret;
    unsigned long evaluations;
    bridge_calls calls;
} run;

static void minimize(ad_objective f, int n, int replay, run *r)
{
    lbfgs_parameter_t param;
    memset(r, 0, sizeof *r);
    for (int i = 0; i < n; i++)
        r->x[i] = i % 2 ? 1.2 : -1.2;
    lbfgs_parameter_init(&param);
    param.epsilon = 1e-10;
    param.max_iterations = 5000;
    ad_lbfgs b = ad_lbfgs_of(f, &r->calls);
    assert_int_equal(b.replay, 0);  /* off by default */
    assert_null(b.program);
    b.replay = replay;
    assert_int_equal(ad_lbfgs_minimize(n, r->x, &r->fx, &b, &param, &r->ret), AD_OK);
    assert_null(b.program);  /* freed by ad_lbfgs_minimize */
    r->evaluations = b.evaluations;
}

/* The replaying run's numbers are the recording run's, bit for bit: the
 * same iterates, the same minimiser, in as many evaluations. */
static void assert_same_run(const run *a, const run *b, int n)
{
    assert_int_equal(a->ret, b->ret);
    assert_int_equal(a->evaluations, b->evaluations);
    assert_same(a->fx, b->fx);
    for (int i = 0; i < n; i++)
        assert_same(a->x[i], b->x[i]);
}

static void test_rosenbrock_replay(void **state)
{
    static run plain, replayed;
    (void)state;
    minimize(counted_rosenbrock, 100, 0, &plain);
    minimize(counted_rosenbrock, 100, 1, &replayed);
    assert_same_run(&plain, &replayed, 100);
    assert_int_equal(plain.calls.f, plain.evaluations);
    assert_int_equal(replayed.calls.f, 1);  /* recorded at the first point, then replayed */
    assert_true(replayed.fx < 1e-12);
    for (int i = 0; i < 100; i++)
        assert_near(replayed.x[i], 1.0, 1e-5, 1e-5);
}

static void test_guard_flips(void **state)
{
    static run plain, replayed;
    (void)state;
    minimize(huber_rosenbrock, 10, 0, &plain);
    minimize(huber_rosenbrock, 10, 1, &replayed);
    assert_same_run(&plain, &replayed, 10);
    /* recorded again where a guard flipped, and replayed in between */
    assert_true(replayed.calls.f >= 2);
    assert_true(replayed.calls.f < replayed.evaluations / 2);
    assert_true(replayed.fx < 1e-12);
    for (int i = 0; i < 10; i++)
        assert_near(replayed.x[i], 1.0, 1e-5, 1e-5);
}

static void test_unkept(void **state)
{
    static run plain, replayed;
    (void)state;
    minimize(nested_rosenbrock, 10, 0, &plain);
    minimize(nested_rosenbrock, 10, 1, &replayed);
    assert_same_run(&plain, &replayed, 10);
    /* ad_gradient each time, after the one recording that found out */
    assert_int_equal(replayed.calls.f, replayed.evaluations + 1);
    assert_true(replayed.fx < 1e-12);
}

static void test_gradient_replay(void **state)
{
    const double x[5] = {0.5, -1.0, 1.5, 0.25, 2.0}, y[5] = {1.0, 1.0, -0.5, 0.75, 0.0};
    double g[5], gr[5];
    bridge_calls calls = {0, 0};
    (void)state;
    ad_lbfgs plain = ad_lbfgs_of(counted_rosenbrock, &calls), b = plain;
    b.replay = 1;
    for (int k = 0; k < 2; k++) {
        const double *at = k ? y : x;
        double fx = ad_lbfgs_evaluate(&plain, at, g, 5, 1.0);
        assert_same(ad_lbfgs_evaluate(&b, at, gr, 5, 1.0), fx);
        for (int i = 0; i < 5; i++)
            assert_same(gr[i], g[i]);
    }
    assert_int_equal(calls.f, 2 + 1);  /* two without replay, one recording */
    assert_int_equal(b.status, AD_OK);
    assert_non_null(b.program);
    ad_program_free(b.program);  /* lbfgs() called directly: the caller frees */
}

static void test_failure_replay(void **state)
{
    lbfgsfloatval_t x[2] = {1.0, 2.0}, fx;
    lbfgs_parameter_t param;
    double g[2];
    (void)state;
    lbfgs_parameter_init(&param);
    (void)ad_gradient(failing, NULL, 2, x, &fx, g);  /* keeps a value, unless it has one */
    x[0] = 1.0, x[1] = 2.0;
    ad_lbfgs b = ad_lbfgs_of(failing, NULL);
    b.replay = 1;
    int ret;
    assert_int_equal(ad_lbfgs_minimize(2, x, &fx, &b, &param, &ret), AD_EFOREIGN);
    assert_true(ret != LBFGS_SUCCESS);
    assert_int_equal(b.evaluations, 1);
    assert_null(b.program);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rosenbrock),
        cmocka_unit_test(test_gradient),
        cmocka_unit_test(test_failure_reaches_caller),
        cmocka_unit_test(test_rosenbrock_replay),
        cmocka_unit_test(test_guard_flips),
        cmocka_unit_test(test_unkept),
        cmocka_unit_test(test_gradient_replay),
        cmocka_unit_test(test_failure_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
