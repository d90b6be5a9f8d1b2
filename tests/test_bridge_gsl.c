/* dualrev/gsl.h: GSL's vector_bfgs2 on Rosenbrock in 1000 dimensions, the
 * callbacks' values and gradients (value-only calls record nothing), and a
 * failing objective's status reaching the caller; with replay (b.replay),
 * the same iterates to the bit with f called once, a guard that flips on
 * the way recorded again, value-only replays recording nothing, and a
 * function a program cannot keep evaluated as without replay.  Sums
 * (ad_gsl_init_sum): the plain objective's iterates to the bit where the
 * sum's chunks add up as it does, the same iterates on 1 and 2 threads,
 * the callbacks against central differences, a failing term, bad
 * arguments.  ad_gsl_minimize: an ODE fit through a checkpointed loop,
 * with and without replay, to the written-out fit's optimum; the progress
 * hook at each iteration, and stopping the loop. */
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
    if (ad_gradient(failing, NULL, 2, x0, &fx, g) != AD_OK) {}  /* keeps a value, unless it has one */
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

/* ---- sums, ad_gsl_minimize, loops, progress ---- */

typedef struct mrun {
    double x[100], f;
    int code;
    long iterations;
    unsigned long evaluations;
} mrun;

/* ad_gsl_minimize with vector_bfgs2 from x_i = +-1.2. */
static void gsl_run(ad_gsl *b, size_t n, mrun *r)
{
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < n; i++)
        r->x[i] = i % 2 ? 1.2 : -1.2;
    assert_int_equal(ad_gsl_minimize(b, gsl_multimin_fdfminimizer_vector_bfgs2, r->x, 0.01, 0.1,
                                     1e-9, 20000, &r->f, &r->code),
                     AD_OK);
    r->iterations = b->iterations;
    r->evaluations = b->evaluations;
}

static void assert_same_mrun(const mrun *a, const mrun *b, size_t n)
{
    assert_int_equal(a->code, b->code);
    assert_int_equal(a->iterations, b->iterations);
    assert_int_equal(a->evaluations, b->evaluations);
    assert_same(a->f, b->f);
    for (size_t i = 0; i < n; i++)
        assert_same(a->x[i], b->x[i]);
}

static void run_plain(ad_objective f, size_t n, mrun *r)
{
    ad_gsl b;
    assert_int_equal(ad_gsl_init(&b, f, NULL, n), AD_OK);
    gsl_run(&b, n, r);
    ad_gsl_free(&b);
}

static void run_sum(ad_term term, size_t nterms, size_t n, unsigned threads, mrun *r)
{
    ad_gsl b;
    assert_int_equal(ad_gsl_init_sum(&b, term, NULL, nterms, n, threads), AD_OK);
    gsl_run(&b, n, r);
    assert_int_equal(b.status, AD_OK);
    ad_gsl_free(&b);
}

static void test_minimize(void **state)
{
    static mrun r, t;
    static run old;
    (void)state;
    run_plain(rosenbrock, 10, &r);
    assert_true(r.code == GSL_SUCCESS || r.code == GSL_ENOPROG);  /* at the minimum */
    assert_true(r.f < 1e-12);
    for (size_t i = 0; i < 10; i++)
        assert_near(r.x[i], 1.0, 1e-5, 1e-5);
    /* the loop written by hand (minimize, above) takes the same iterates */
    minimize(rosenbrock, 10, 0, &old);
    assert_int_equal(r.iterations, old.iterations);
    assert_same(r.f, old.f);
    for (size_t i = 0; i < 10; i++)
        assert_same(r.x[i], old.x[i]);
    free(old.x);
    /* an iteration limit: GSL_CONTINUE */
    ad_gsl b;
    assert_int_equal(ad_gsl_init(&b, rosenbrock, NULL, 10), AD_OK);
    for (size_t i = 0; i < 10; i++)
        t.x[i] = -1.2;
    assert_int_equal(ad_gsl_minimize(&b, gsl_multimin_fdfminimizer_vector_bfgs2, t.x, 0.01, 0.1,
                                     1e-9, 3, &t.f, &t.code),
                     AD_OK);
    assert_int_equal(t.code, GSL_CONTINUE);
    assert_int_equal(b.iterations, 3);
    ad_gsl_free(&b);
}

static void test_sum_bitwise(void **state)
{
    static mrun plain, one, two, whole;
    (void)state;
    run_plain(rosenbrock, 18, &plain);
    run_sum(rosenbrock_term, 17, 18, 1, &one);
    run_sum(rosenbrock_term, 17, 18, 2, &two);
    run_sum(rosenbrock_one_term, 1, 18, 2, &whole);
    assert_same_mrun(&plain, &one, 18);
    assert_same_mrun(&plain, &two, 18);
    assert_same_mrun(&plain, &whole, 18);
    assert_true(plain.f < 1e-12);
}

static void test_sum_threads(void **state)
{
    static mrun plain, one, two;
    (void)state;
    run_plain(rosenbrock, 100, &plain);
    run_sum(rosenbrock_term, 99, 100, 1, &one);
    run_sum(rosenbrock_term, 99, 100, 2, &two);
    assert_same_mrun(&one, &two, 100);
    assert_true(one.code == GSL_SUCCESS || one.code == GSL_ENOPROG);
    assert_true(one.f < 1e-12);
    for (size_t i = 0; i < 100; i++)
        assert_near(one.x[i], plain.x[i], 1e-5, 1e-5);
}

static void test_sum_callbacks(void **state)
{
    const double xs[5] = {0.5, -1.0, 1.5, 0.25, 2.0};
    double fx, g[5];
    ad_gsl b;
    (void)state;
    assert_int_equal(ad_gsl_init_sum(&b, rosenbrock_term, NULL, 4, 5, 2), AD_OK);
    gsl_vector *x = gsl_vector_alloc(5), *gv = gsl_vector_alloc(5);
    for (size_t i = 0; i < 5; i++)
        gsl_vector_set(x, i, xs[i]);
    ad_gsl_fdf(x, &b, &fx, gv);
    for (size_t i = 0; i < 5; i++)
        g[i] = gsl_vector_get(gv, i);
    assert_near(fx, value_on_constants(rosenbrock, NULL, 5, xs), 1e-15, 0.0);
    check_gradient_fd(rosenbrock, NULL, 5, xs, g);
    assert_same(ad_gsl_f(x, &b), fx);  /* through the gradient: the same bits */
    assert_int_equal(b.evaluations, 2);
    assert_int_equal(b.status, AD_OK);
    gsl_vector_free(x), gsl_vector_free(gv);
    ad_gsl_free(&b);
}

static void test_sum_errors(void **state)
{
    double x[10], fx;
    size_t bad = 5;
    int code;
    ad_gsl b;
    (void)state;
    for (int i = 0; i < 10; i++)
        x[i] = 0.5;
    assert_int_equal(ad_gsl_init_sum(&b, NULL, NULL, 9, 10, 1), AD_EINVAL);
    ad_gsl_free(&b);  /* nothing to free: harmless */
    assert_int_equal(ad_gsl_init(&b, NULL, NULL, 10), AD_EINVAL);
    ad_gsl_free(&b);
    assert_int_equal(ad_gsl_init_sum(&b, rosenbrock_term, NULL, 9, 10, 1), AD_OK);
    const gsl_multimin_fdfminimizer_type *T = gsl_multimin_fdfminimizer_vector_bfgs2;
    assert_int_equal(ad_gsl_minimize(&b, NULL, x, 0.01, 0.1, 1e-9, 10, &fx, &code), AD_EINVAL);
    assert_int_equal(ad_gsl_minimize(&b, T, NULL, 0.01, 0.1, 1e-9, 10, &fx, &code), AD_EINVAL);
    assert_int_equal(ad_gsl_minimize(&b, T, x, 0.01, 0.1, 1e-9, 10, NULL, &code), AD_EINVAL);
    assert_int_equal(ad_gsl_minimize(NULL, T, x, 0.01, 0.1, 1e-9, 10, &fx, &code), AD_EINVAL);
    assert_int_equal(code, GSL_EINVAL);
    ad_gsl_free(&b);
    assert_int_equal(ad_gsl_init_sum(&b, rosenbrock_term, NULL, 0, 0, 1), AD_OK);
    assert_int_equal(ad_gsl_minimize(&b, T, x, 0.01, 0.1, 1e-9, 10, &fx, &code), AD_EINVAL);
    ad_gsl_free(&b);
    keep_foreign();
    for (unsigned threads = 1; threads <= 2; threads++) {
        assert_int_equal(ad_gsl_init_sum(&b, failing_term, &bad, 9, 10, threads), AD_OK);
        assert_int_equal(ad_gsl_minimize(&b, T, x, 0.01, 0.1, 1e-9, 10, &fx, &code),
                         AD_EFOREIGN);
        assert_int_equal(b.iterations, 0);
        assert_int_equal(b.evaluations, 1);
        assert_nan(fx);
        ad_gsl_free(&b);
    }
}

static void fit_ode(ad_objective f, ode_fit *o, int replay, mrun *r)
{
    ad_gsl b;
    memset(r, 0, sizeof *r);
    r->x[0] = 1.6, r->x[1] = 0.5;
    assert_int_equal(ad_gsl_init(&b, f, o, 2), AD_OK);
    b.replay = replay;
    assert_int_equal(ad_gsl_minimize(&b, gsl_multimin_fdfminimizer_vector_bfgs2, r->x, 0.01, 0.1,
                                     1e-10, 1000, &r->f, &r->code),
                     AD_OK);
    r->iterations = b.iterations;
    r->evaluations = b.evaluations;
    ad_gsl_free(&b);
}

static void test_loop(void **state)
{
    static ode_fit o;
    static mrun u, l, rp;
    (void)state;
    ode_fit_init(&o, 0);
    /* the value-only callback runs the loop on constants */
    ad_gsl b;
    assert_int_equal(ad_gsl_init(&b, ode_looped, &o, 2), AD_OK);
    gsl_vector *x = gsl_vector_alloc(2);
    gsl_vector_set(x, 0, ODE_K);
    gsl_vector_set(x, 1, ODE_C);
    assert_same(ad_gsl_f(x, &b), 0.0);
    gsl_vector_set(x, 0, 1.7);
    assert_same(ad_gsl_f(x, &b), value_on_constants(ode_unrolled, &o, 2, (double[]){1.7, ODE_C}));
    gsl_vector_free(x);
    ad_gsl_free(&b);
    fit_ode(ode_unrolled, &o, 0, &u);
    fit_ode(ode_looped, &o, 0, &l);
    o.calls.f = 0;
    fit_ode(ode_looped, &o, 1, &rp);
    assert_int_equal(o.calls.f, 1);  /* recorded once, the loop kept as a call */
    assert_true(u.f < 1e-16 && l.f < 1e-16);
    assert_near(u.x[0], ODE_K, 1e-6, 0.0);
    assert_near(u.x[1], ODE_C, 1e-6, 0.0);
    assert_near(l.x[0], ODE_K, 1e-6, 0.0);
    assert_near(l.x[1], ODE_C, 1e-6, 0.0);
    assert_same_mrun(&l, &rp, 2);
}

static void test_progress(void **state)
{
    static hook_log h;
    static mrun r;
    ad_gsl b;
    (void)state;
    memset(&h, 0, sizeof h);
    assert_int_equal(ad_gsl_init(&b, rosenbrock, NULL, 4), AD_OK);
    b.progress = log_progress;
    b.progress_ctx = &h;
    gsl_run(&b, 4, &r);
    assert_true(r.code == GSL_SUCCESS || r.code == GSL_ENOPROG);
    assert_true(r.f < 1e-12);
    assert_int_equal(b.stopped, 0);
    assert_int_equal(h.calls, r.iterations);
    check_hook_log(&h, rosenbrock, NULL, 4, 1);
    for (long c = 1; c < h.calls; c++)
        assert_true(h.f[c] <= h.f[c - 1]);
    assert_same(h.f[h.calls - 1], r.f);
    assert_true(h.gnorm[h.calls - 1] < 1e-5);
    /* stopped at the third iteration */
    memset(&h, 0, sizeof h);
    h.stop_at = 3;
    gsl_run(&b, 4, &r);
    assert_int_equal(b.stopped, 1);
    assert_int_equal(b.status, AD_OK);
    assert_int_equal(r.code, GSL_CONTINUE);
    assert_int_equal(r.iterations, 3);
    assert_int_equal(h.calls, 3);
    assert_same(r.f, h.f[2]);
    assert_same(r.x[0], h.x[2][0]);
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
        cmocka_unit_test(test_minimize),
        cmocka_unit_test(test_sum_bitwise),
        cmocka_unit_test(test_sum_threads),
        cmocka_unit_test(test_sum_callbacks),
        cmocka_unit_test(test_sum_errors),
        cmocka_unit_test(test_loop),
        cmocka_unit_test(test_progress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
