/* dualrev/lbfgs.h: liblbfgs on Rosenbrock in 100 dimensions, the callback's
 * gradient against central differences, and a failing objective's status
 * reaching the caller; with replay (b.replay), the same runs to the same
 * bits with f called once, a guard that flips on the way recorded again,
 * and a function a program cannot keep evaluated as without replay.  Sums
 * (ad_lbfgs_of_sum): the plain objective's iterates to the bit where the
 * sum's chunks add up as it does, the same iterates on 1 and 2 threads,
 * gradients against central differences, a failing term, bad arguments.
 * An ODE fit through a checkpointed loop, with and without replay, to the
 * optimum of the written-out fit.  The progress hook: called at each
 * iteration with f, |g| and x that ad_gradient confirms, and stopping the
 * run. */
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
    assert_int_equal(ad_lbfgs_progress(&b, x, g, fx, 0, 0, 0, 2, 1, 1), LBFGSERR_CANCELED);
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

/* lbfgs with b from x_i = +-1.2. */
static void minimize_with(ad_lbfgs *b, int n, run *r)
{
    lbfgs_parameter_t param;
    for (int i = 0; i < n; i++)
        r->x[i] = i % 2 ? 1.2 : -1.2;
    lbfgs_parameter_init(&param);
    param.epsilon = 1e-10;
    param.max_iterations = 5000;
    assert_int_equal(ad_lbfgs_minimize(n, r->x, &r->fx, b, &param, &r->ret), AD_OK);
    assert_null(b->program);  /* freed by ad_lbfgs_minimize */
    assert_int_equal(b->stopped, 0);
    r->evaluations = b->evaluations;
}

static void minimize(ad_objective f, int n, int replay, run *r)
{
    memset(r, 0, sizeof *r);
    ad_lbfgs b = ad_lbfgs_of(f, &r->calls);
    assert_int_equal(b.replay, 0);  /* off by default */
    assert_null(b.program);
    assert_null(b.progress);
    b.replay = replay;
    minimize_with(&b, n, r);
}

/* The same with f the sum of nterms terms on `threads` threads. */
static void minimize_sum(ad_term term, size_t nterms, int n, unsigned threads, run *r)
{
    memset(r, 0, sizeof *r);
    ad_lbfgs b = ad_lbfgs_of_sum(term, NULL, nterms, threads);
    assert_int_equal(b.status, AD_OK);
    minimize_with(&b, n, r);
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
    if (ad_gradient(failing, NULL, 2, x, &fx, g) != AD_OK) {}  /* keeps a value, unless it has one */
    x[0] = 1.0, x[1] = 2.0;
    ad_lbfgs b = ad_lbfgs_of(failing, NULL);
    b.replay = 1;
    int ret;
    assert_int_equal(ad_lbfgs_minimize(2, x, &fx, &b, &param, &ret), AD_EFOREIGN);
    assert_true(ret != LBFGS_SUCCESS);
    assert_int_equal(b.evaluations, 1);
    assert_null(b.program);
}

/* ---- sums ---- */

static void test_sum_bitwise(void **state)
{
    static run plain, one, two, whole;
    (void)state;
    minimize(rosenbrock, 18, 0, &plain);
    minimize_sum(rosenbrock_term, 17, 18, 1, &one);
    minimize_sum(rosenbrock_term, 17, 18, 2, &two);
    minimize_sum(rosenbrock_one_term, 1, 18, 2, &whole);
    assert_same_run(&plain, &one, 18);
    assert_same_run(&plain, &two, 18);
    assert_same_run(&plain, &whole, 18);
    assert_true(plain.fx < 1e-12);
}

/* 99 terms in chunks of several: the same bits on 1 and 2 threads (the
 * library's promise), and the plain objective's optimum. */
static void test_sum_threads(void **state)
{
    static run plain, one, two;
    (void)state;
    minimize(rosenbrock, 100, 0, &plain);
    minimize_sum(rosenbrock_term, 99, 100, 1, &one);
    minimize_sum(rosenbrock_term, 99, 100, 2, &two);
    assert_same_run(&one, &two, 100);
    assert_true(one.fx < 1e-12);
    for (int i = 0; i < 100; i++) {
        assert_near(one.x[i], 1.0, 1e-5, 1e-5);
        assert_near(one.x[i], plain.x[i], 1e-5, 1e-5);
    }
}

static void test_sum_gradient(void **state)
{
    const double x[5] = {0.5, -1.0, 1.5, 0.25, 2.0};
    double g[5], gp[5], fp;
    (void)state;
    ad_lbfgs b = ad_lbfgs_of_sum(rosenbrock_term, NULL, 4, 2);
    double fx = ad_lbfgs_evaluate(&b, x, g, 5, 1.0);
    assert_int_equal(b.status, AD_OK);
    assert_int_equal(b.evaluations, 1);
    assert_near(fx, value_on_constants(rosenbrock, NULL, 5, x), 1e-15, 0.0);
    check_gradient_fd(rosenbrock, NULL, 5, x, g);
    assert_int_equal(ad_gradient(rosenbrock, NULL, 5, x, &fp, gp), AD_OK);
    for (int i = 0; i < 5; i++)
        assert_near(g[i], gp[i], 1e-15, 1e-15);
}

static void test_sum_errors(void **state)
{
    lbfgsfloatval_t x[10], fx;
    lbfgs_parameter_t param;
    size_t bad = 5;
    int ret;
    (void)state;
    lbfgs_parameter_init(&param);
    for (int i = 0; i < 10; i++)
        x[i] = 0.5;
    ad_lbfgs b = ad_lbfgs_of_sum(NULL, NULL, 9, 1);
    assert_int_equal(b.status, AD_EINVAL);
    assert_int_equal(ad_lbfgs_minimize(10, x, &fx, &b, &param, &ret), AD_EINVAL);
    assert_int_equal(ret, LBFGSERR_UNKNOWNERROR);
    assert_int_equal(b.evaluations, 0);
    ad_lbfgs f0 = ad_lbfgs_of(NULL, NULL);
    assert_int_equal(ad_lbfgs_minimize(10, x, &fx, &f0, &param, &ret), AD_EINVAL);
    b = ad_lbfgs_of_sum(rosenbrock_term, NULL, 9, 1);
    assert_int_equal(ad_lbfgs_minimize(10, NULL, &fx, &b, &param, &ret), AD_EINVAL);
    assert_int_equal(ad_lbfgs_minimize(10, x, NULL, &b, &param, &ret), AD_EINVAL);
    assert_int_equal(ad_lbfgs_minimize(-1, x, &fx, &b, &param, &ret), AD_EINVAL);
    assert_int_equal(ad_lbfgs_minimize(10, x, &fx, NULL, &param, &ret), AD_EINVAL);
    assert_int_equal(b.status, AD_OK);
    keep_foreign();
    for (unsigned threads = 1; threads <= 2; threads++) {
        b = ad_lbfgs_of_sum(failing_term, &bad, 9, threads);
        assert_int_equal(ad_lbfgs_minimize(10, x, &fx, &b, &param, &ret), AD_EFOREIGN);
        assert_true(ret != LBFGS_SUCCESS);
        assert_int_equal(b.evaluations, 1);
        assert_nan(fx);
        /* the bridge keeps the status: a second run does not start */
        assert_int_equal(ad_lbfgs_minimize(10, x, &fx, &b, &param, &ret), AD_EFOREIGN);
        assert_int_equal(b.evaluations, 1);
    }
}

/* ---- loops ---- */

static void fit_ode(ad_objective f, ode_fit *o, int replay, double p[2], double *fx,
                    unsigned long *evaluations)
{
    lbfgs_parameter_t param;
    int ret;
    lbfgs_parameter_init(&param);
    param.epsilon = 1e-12;
    param.max_iterations = 1000;
    p[0] = 1.6, p[1] = 0.5;
    ad_lbfgs b = ad_lbfgs_of(f, o);
    b.replay = replay;
    assert_int_equal(ad_lbfgs_minimize(2, p, fx, &b, &param, &ret), AD_OK);
    assert_true(ret == LBFGS_SUCCESS || ret == LBFGS_STOP || ret == LBFGSERR_ROUNDING_ERROR);
    *evaluations = b.evaluations;
}

static void test_loop(void **state)
{
    static ode_fit o;
    double pu[2], pl[2], pr[2], fu, fl, fr;
    unsigned long eu, el, er;
    (void)state;
    ode_fit_init(&o, 0);
    /* the gradients first: the loop's against the written-out steps' and
     * central differences */
    const double at[2] = {1.7, 0.45};
    double gu[2], gl[2];
    assert_int_equal(ad_gradient(ode_unrolled, &o, 2, at, &fu, gu), AD_OK);
    assert_int_equal(ad_gradient(ode_looped, &o, 2, at, &fl, gl), AD_OK);
    assert_same(fl, fu);
    for (int i = 0; i < 2; i++)
        assert_near(gl[i], gu[i], 1e-12, 0.0);
    check_gradient_fd(ode_looped, &o, 2, at, gl);
    fit_ode(ode_unrolled, &o, 0, pu, &fu, &eu);
    fit_ode(ode_looped, &o, 0, pl, &fl, &el);
    o.calls.f = 0;
    fit_ode(ode_looped, &o, 1, pr, &fr, &er);
    assert_int_equal(o.calls.f, 1);  /* recorded once, the loop kept as a call */
    assert_true(fu < 1e-16 && fl < 1e-16 && fr < 1e-16);
    /* the optimum is (ODE_K, ODE_C), where the data came from */
    assert_near(pu[0], ODE_K, 1e-6, 0.0);
    assert_near(pu[1], ODE_C, 1e-6, 0.0);
    assert_near(pl[0], ODE_K, 1e-6, 0.0);
    assert_near(pl[1], ODE_C, 1e-6, 0.0);
    /* a replay gives the loop's own numbers: the same run */
    assert_int_equal(er, el);
    assert_same(fr, fl);
    assert_same(pr[0], pl[0]);
    assert_same(pr[1], pl[1]);
}

/* ---- progress ---- */

static void test_progress(void **state)
{
    static hook_log h;
    static run r;
    (void)state;
    memset(&h, 0, sizeof h);
    memset(&r, 0, sizeof r);
    ad_lbfgs b = ad_lbfgs_of(rosenbrock, NULL);
    b.progress = log_progress;
    b.progress_ctx = &h;
    minimize_with(&b, 4, &r);
    assert_true(r.fx < 1e-12);
    assert_true(h.calls > 10 && h.calls < HOOK_MAX);
    check_hook_log(&h, rosenbrock, NULL, 4, 1);
    for (long c = 1; c < h.calls; c++)
        assert_true(h.f[c] <= h.f[c - 1]);  /* a descent method */
    assert_int_equal(h.evaluations[h.calls - 1], b.evaluations);
    assert_same(h.f[h.calls - 1], r.fx);
}

static void test_progress_stops(void **state)
{
    static hook_log h;
    lbfgsfloatval_t x[4] = {-1.2, 1.2, -1.2, 1.2}, fx;
    lbfgs_parameter_t param;
    int ret;
    (void)state;
    memset(&h, 0, sizeof h);
    h.stop_at = 3;
    lbfgs_parameter_init(&param);
    for (int sum = 0; sum < 2; sum++) {
        ad_lbfgs b = sum ? ad_lbfgs_of_sum(rosenbrock_term, NULL, 3, 2)
                         : ad_lbfgs_of(rosenbrock, NULL);
        b.progress = log_progress;
        b.progress_ctx = &h;
        h.calls = 0;
        x[0] = x[2] = -1.2, x[1] = x[3] = 1.2;
        assert_int_equal(ad_lbfgs_minimize(4, x, &fx, &b, &param, &ret), AD_OK);
        assert_int_equal(ret, LBFGSERR_CANCELED);
        assert_int_equal(b.stopped, 1);
        assert_int_equal(b.status, AD_OK);
        assert_int_equal(h.calls, 3);
        assert_true(fx > 1e-3);  /* far from the minimum */
        /* a run without the hook's stop goes on to it, stopped cleared */
        h.stop_at = 0;
        x[0] = x[2] = -1.2, x[1] = x[3] = 1.2;
        assert_int_equal(ad_lbfgs_minimize(4, x, &fx, &b, &param, &ret), AD_OK);
        assert_int_equal(b.stopped, 0);
        assert_true(h.calls > 10);
        h.stop_at = 3;
    }
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
        cmocka_unit_test(test_sum_bitwise),
        cmocka_unit_test(test_sum_threads),
        cmocka_unit_test(test_sum_gradient),
        cmocka_unit_test(test_sum_errors),
        cmocka_unit_test(test_loop),
        cmocka_unit_test(test_progress),
        cmocka_unit_test(test_progress_stops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
