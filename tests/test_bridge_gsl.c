/* dualrev/gsl.h: GSL's vector_bfgs2 on Rosenbrock in 1000 dimensions, the
 * callbacks' values and gradients (value-only calls record nothing), and a
 * failing objective's status reaching the caller; with replay (b.replay),
 * the same iterates to the bit with f called once, a guard that flips on
 * the way recorded again, value-only replays recording nothing, and a
 * function a program cannot keep evaluated as without replay. */
#include <string.h>

#include <gsl/gsl_multimin.h>

#include <dualrev/gsl.h>

#include "bridge_problems.h"

/* One vector_bfgs2 run on f from x_i = +-1.2, replaying or not: its
 * iterates' values (at most 4000 kept), the minimiser, the calls. */
typedef struct run {
    size_t n;
    double *x, f;
    double trace[4000];
    int iterations;
    bridge_calls calls;
} run;

static void minimize(ad_objective f, size_t n, int replay, run *r)
{
    ad_gsl b;
    gsl_multimin_function_fdf F;
    memset(r, 0, sizeof *r);
    r->n = n;
    assert_int_equal(ad_gsl_init(&b, f, &r->calls, n), AD_OK);
    assert_int_equal(b.replay, 0);  /* off by default */
    b.replay = replay;
    ad_gsl_fill(&F, &b);
    gsl_vector *x = gsl_vector_alloc(n);
    for (size_t i = 0; i < n; i++)
        gsl_vector_set(x, i, i % 2 ? 1.2 : -1.2);
    gsl_multimin_fdfminimizer *s =
        gsl_multimin_fdfminimizer_alloc(gsl_multimin_fdfminimizer_vector_bfgs2, n);
    gsl_multimin_fdfminimizer_set(s, &F, x, 0.01, 0.1);
    int status = GSL_CONTINUE;
    while (r->iterations < 20000 && status == GSL_CONTINUE) {
        if (gsl_multimin_fdfminimizer_iterate(s) || isnan(s->f))
            break;  /* a NaN: fail below, at once */
        if (r->iterations < 4000)
            r->trace[r->iterations] = s->f;
        r->iterations++;
        status = gsl_multimin_test_gradient(s->gradient, 1e-9);
    }
    assert_int_equal(b.status, AD_OK);
    assert_true(replay ? b.program != NULL : b.program == NULL);
    r->f = s->f;
    r->x = (double *)malloc(n * sizeof *r->x);
    assert_non_null(r->x);
    for (size_t i = 0; i < n; i++)
        r->x[i] = gsl_vector_get(s->x, i);
    gsl_multimin_fdfminimizer_free(s);
    gsl_vector_free(x);
    ad_gsl_free(&b);  /* frees the program */
    assert_null(b.program);
}

/* The same iterates, to the bit, to the same minimiser. */
static void assert_same_run(const run *a, const run *b)
{
    assert_int_equal(a->iterations, b->iterations);
    for (int k = 0; k < a->iterations && k < 4000; k++)
        assert_same(a->trace[k], b->trace[k]);
    assert_same(a->f, b->f);
    for (size_t i = 0; i < a->n; i++)
        assert_same(a->x[i], b->x[i]);
}

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

/* Rosenbrock as test_rosenbrock solves it, in 200 dimensions (a replay
 * in a sanitized debug build is a few times slower than f). */
static void test_rosenbrock_replay(void **state)
{
    static run plain, replayed;
    (void)state;
    minimize(counted_rosenbrock, 200, 0, &plain);
    minimize(counted_rosenbrock, 200, 1, &replayed);
    assert_same_run(&plain, &replayed);
    assert_true(plain.calls.f > 100);
    assert_int_equal(replayed.calls.f, 1);  /* recorded at the first point, then replayed */
    assert_true(replayed.f < 1e-12);
    for (size_t i = 0; i < 200; i++)
        assert_near(replayed.x[i], 1.0, 1e-5, 1e-5);
    free(plain.x), free(replayed.x);
}

static void test_guard_flips(void **state)
{
    static run plain, replayed;
    (void)state;
    minimize(huber_rosenbrock, 10, 0, &plain);
    minimize(huber_rosenbrock, 10, 1, &replayed);
    assert_same_run(&plain, &replayed);
    /* recorded again where a guard flipped, and replayed in between */
    assert_true(replayed.calls.f >= 2);
    assert_true(replayed.calls.f < plain.calls.f / 2);
    assert_true(replayed.f < 1e-12);
    for (size_t i = 0; i < 10; i++)
        assert_near(replayed.x[i], 1.0, 1e-5, 1e-5);
    free(plain.x), free(replayed.x);
}

static void test_unkept(void **state)
{
    static run plain, replayed;
    (void)state;
    minimize(nested_rosenbrock, 10, 0, &plain);
    minimize(nested_rosenbrock, 10, 1, &replayed);
    assert_same_run(&plain, &replayed);
    /* evaluated as without replay, after the one recording that found out */
    assert_int_equal(replayed.calls.f, plain.calls.f + 1);
    assert_true(replayed.f < 1e-12);
    free(plain.x), free(replayed.x);
}

static void test_callbacks_replay(void **state)
{
    const double xs[5] = {0.5, -1.0, 1.5, 0.25, 2.0};
    double fx, fr;
    ad_gsl plain, b;
    bridge_calls calls = {0, 0};
    (void)state;
    assert_int_equal(ad_gsl_init(&plain, counted_rosenbrock, NULL, 5), AD_OK);
    assert_int_equal(ad_gsl_init(&b, counted_rosenbrock, &calls, 5), AD_OK);
    b.replay = 1;
    gsl_vector *x = gsl_vector_alloc(5), *g = gsl_vector_alloc(5), *gr = gsl_vector_alloc(5);
    for (size_t i = 0; i < 5; i++)
        gsl_vector_set(x, i, xs[i]);
    assert_same(ad_gsl_f(x, &b), ad_gsl_f(x, &plain));  /* records */
    assert_int_equal(calls.f, 1);
    ad_gsl_fdf(x, &plain, &fx, g);
    ad_gsl_fdf(x, &b, &fr, gr);
    assert_same(fr, fx);
    for (size_t i = 0; i < 5; i++)
        assert_same(gsl_vector_get(gr, i), gsl_vector_get(g, i));
    gsl_vector_set(x, 2, -0.75);
    ad_gsl_df(x, &plain, g);
    ad_gsl_df(x, &b, gr);
    for (size_t i = 0; i < 5; i++)
        assert_same(gsl_vector_get(gr, i), gsl_vector_get(g, i));
    assert_int_equal(calls.f, 1);  /* replays only */
    /* a value replay records nothing: a tape limit of 1 record does not
     * stop it; a gradient replay records the program's operations */
    size_t old = ad_set_tape_limit(1);
    assert_same(ad_gsl_f(x, &b), ad_gsl_f(x, &plain));
    ad_gsl_df(x, &b, gr);
    ad_set_tape_limit(old);
    assert_int_equal(b.status, AD_ERANGE);
    assert_nan(gsl_vector_get(gr, 0));
    assert_nan(ad_gsl_f(x, &b));  /* after a failure, NaN */
    assert_int_equal(calls.f, 1);
    gsl_vector_free(x), gsl_vector_free(g), gsl_vector_free(gr);
    ad_gsl_free(&plain);
    ad_gsl_free(&b);
}

static void test_failure_replay(void **state)
{
    double x0[2] = {1.0, 2.0}, fx, g[2];
    ad_gsl b;
    gsl_multimin_function_fdf F;
    (void)state;
    (void)ad_gradient(failing, NULL, 2, x0, &fx, g);  /* keeps a value, unless it has one */
    assert_int_equal(ad_gsl_init(&b, failing, NULL, 2), AD_OK);
    b.replay = 1;
    ad_gsl_fill(&F, &b);
    gsl_vector *x = gsl_vector_alloc(2);
    gsl_vector_set(x, 0, 1.0);
    gsl_vector_set(x, 1, 2.0);
    gsl_multimin_fdfminimizer *s =
        gsl_multimin_fdfminimizer_alloc(gsl_multimin_fdfminimizer_vector_bfgs2, 2);
    gsl_multimin_fdfminimizer_set(s, &F, x, 0.01, 0.1);
    assert_int_equal(b.status, AD_EFOREIGN);
    assert_null(b.program);
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
        cmocka_unit_test(test_rosenbrock_replay),
        cmocka_unit_test(test_guard_flips),
        cmocka_unit_test(test_unkept),
        cmocka_unit_test(test_callbacks_replay),
        cmocka_unit_test(test_failure_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
