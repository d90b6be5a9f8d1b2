/* dualrev/gsl.h: GSL's vector_bfgs2 on Rosenbrock in 1000 dimensions, the
 * callbacks' values and gradients (value-only calls record nothing), and a
 * failing objective's status reaching the caller. */
#include <gsl/gsl_multimin.h>

#include <dualrev/gsl.h>

#include "bridge_problems.h"

static void test_rosenbrock(void **state)
{
    enum { N = 1000 };
    ad_gsl b;
    gsl_multimin_function_fdf F;
    (void)state;
    assert_int_equal(ad_gsl_init(&b, rosenbrock, NULL, N), AD_OK);
    ad_gsl_fill(&F, &b);
    gsl_vector *x = gsl_vector_alloc(N);
    for (size_t i = 0; i < N; i++)
        gsl_vector_set(x, i, i % 2 ? 1.2 : -1.2);
    gsl_multimin_fdfminimizer *s =
        gsl_multimin_fdfminimizer_alloc(gsl_multimin_fdfminimizer_vector_bfgs2, N);
    gsl_multimin_fdfminimizer_set(s, &F, x, 0.01, 0.1);
    int status = GSL_CONTINUE;
    for (int iter = 0; iter < 20000 && status == GSL_CONTINUE; iter++) {
        if (gsl_multimin_fdfminimizer_iterate(s))
            break;
        status = gsl_multimin_test_gradient(s->gradient, 1e-9);
    }
    assert_int_equal(b.status, AD_OK);
    assert_true(s->f < 1e-12);
    for (size_t i = 0; i < N; i++)
        assert_near(gsl_vector_get(s->x, i), 1.0, 1e-5, 1e-5);
    gsl_multimin_fdfminimizer_free(s);
    gsl_vector_free(x);
    ad_gsl_free(&b);
}

static void test_callbacks(void **state)
{
    const double xs[5] = {0.5, -1.0, 1.5, 0.25, 2.0};
    double fx, g[5];
    ad_gsl b;
    (void)state;
    assert_int_equal(ad_gsl_init(&b, rosenbrock, NULL, 5), AD_OK);
    /* a strided vector, as GSL may hand over */
    gsl_vector *wide = gsl_vector_alloc(10), *gw = gsl_vector_alloc(10);
    gsl_vector_view x = gsl_vector_subvector_with_stride(wide, 0, 2, 5);
    gsl_vector_view gv = gsl_vector_subvector_with_stride(gw, 1, 2, 5);
    for (size_t i = 0; i < 5; i++)
        gsl_vector_set(&x.vector, i, xs[i]);
    ad_gsl_fdf(&x.vector, &b, &fx, &gv.vector);
    for (size_t i = 0; i < 5; i++)
        g[i] = gsl_vector_get(&gv.vector, i);
    assert_near(fx, value_on_constants(rosenbrock, NULL, 5, xs), 1e-15, 0.0);
    check_gradient_fd(rosenbrock, NULL, 5, xs, g);
    /* value only: no recording, so a tape limit of 1 record does not stop it */
    size_t old = ad_set_tape_limit(1);
    assert_same(ad_gsl_f(&x.vector, &b), fx);
    ad_gsl_df(&x.vector, &b, &gv.vector);  /* a gradient is recorded: AD_ERANGE */
    ad_set_tape_limit(old);
    assert_int_equal(b.status, AD_ERANGE);
    assert_nan(gsl_vector_get(&gv.vector, 0));
    assert_nan(ad_gsl_f(&x.vector, &b));  /* after a failure, NaN */
    gsl_vector_free(wide);
    gsl_vector_free(gw);
    ad_gsl_free(&b);
}

static void test_failure_reaches_caller(void **state)
{
    double x0[2] = {1.0, 2.0}, fx, g[2];
    ad_gsl b;
    gsl_multimin_function_fdf F;
    (void)state;
    assert_int_equal(ad_gradient(failing, NULL, 2, x0, &fx, g), AD_OK);  /* keeps a value */
    assert_int_equal(ad_gsl_init(&b, failing, NULL, 2), AD_OK);
    ad_gsl_fill(&F, &b);
    gsl_vector *x = gsl_vector_alloc(2);
    gsl_vector_set(x, 0, 1.0);
    gsl_vector_set(x, 1, 2.0);
    gsl_multimin_fdfminimizer *s =
        gsl_multimin_fdfminimizer_alloc(gsl_multimin_fdfminimizer_vector_bfgs2, 2);
    gsl_multimin_fdfminimizer_set(s, &F, x, 0.01, 0.1);
    assert_int_equal(b.status, AD_EFOREIGN);
    gsl_multimin_fdfminimizer_free(s);
    gsl_vector_free(x);
    ad_gsl_free(&b);
}

int main(void)
{
    gsl_set_error_handler_off();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rosenbrock),
        cmocka_unit_test(test_callbacks),
        cmocka_unit_test(test_failure_reaches_caller),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
