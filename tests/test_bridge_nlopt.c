/* dualrev/nlopt.h: Hock-Schittkowski 71 with SLSQP (a vector inequality
 * constraint and a scalar equality), the callbacks' gradients and
 * Jacobian, value-only calls recording nothing, and a failing objective
 * stopping the optimiser; with replay (b.replay), the same solve to the
 * bit with each function called once, guards that flip on the way
 * recorded again, value-only replays recording nothing, and functions a
 * program cannot keep evaluated as without replay.  Sums
 * (ad_nlopt_init_sum): the plain objective's iterates to the bit where the
 * sum's chunks add up as it does, the same iterates on 1 and 2 threads,
 * value-only calls through the gradient, a failing term, bad arguments.
 * An ODE fit through a checkpointed loop, with and without replay, to the
 * written-out fit's optimum.  The progress hook, called per evaluation,
 * and stopping NLopt. */
#include <string.h>

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

/* One SLSQP solve of HS71 from (1, 5, 5, 1) with the given objective,
 * inequality (a vector function) and equality, replaying or not. */
typedef struct run {
    double x[4], fx;
    nlopt_result result;
    int evaluations;
    bridge_calls obj, ineq, eq;
} run;

static void solve(ad_objective f, ad_function c, ad_objective e, int replay, run *r)
{
    const double lo[4] = {1, 1, 1, 1}, hi[4] = {5, 5, 5, 5}, tol[1] = {1e-10};
    ad_nlopt obj, ineq, eq;
    memset(r, 0, sizeof *r);
    r->x[0] = 1.0, r->x[1] = 5.0, r->x[2] = 5.0, r->x[3] = 1.0;
    nlopt_opt opt = nlopt_create(NLOPT_LD_SLSQP, 4);
    assert_int_equal(ad_nlopt_init(&obj, opt, f, NULL, &r->obj, 4, 0), AD_OK);
    assert_int_equal(ad_nlopt_init(&ineq, opt, NULL, c, &r->ineq, 4, 1), AD_OK);
    assert_int_equal(ad_nlopt_init(&eq, opt, e, NULL, &r->eq, 4, 0), AD_OK);
    assert_int_equal(obj.replay, 0);  /* off by default */
    obj.replay = ineq.replay = eq.replay = replay;
    nlopt_set_lower_bounds(opt, lo);
    nlopt_set_upper_bounds(opt, hi);
    nlopt_set_min_objective(opt, ad_nlopt_scalar, &obj);
    nlopt_add_inequality_mconstraint(opt, 1, ad_nlopt_vector, &ineq, tol);
    nlopt_add_equality_constraint(opt, ad_nlopt_scalar, &eq, 1e-10);
    nlopt_set_xtol_rel(opt, 1e-12);
    nlopt_set_ftol_rel(opt, 1e-14);
    nlopt_set_maxeval(opt, 1000);  /* a few dozen: more is a failure */
    r->result = nlopt_optimize(opt, r->x, &r->fx);
    r->evaluations = nlopt_get_numevals(opt);
    assert_true(r->result > 0);
    assert_int_equal(obj.status, AD_OK);
    assert_int_equal(ineq.status, AD_OK);
    assert_int_equal(eq.status, AD_OK);
    assert_near(r->fx, HS71_OPTIMUM, 1e-8, 0.0);
    assert_near(r->x[0], 1.0, 1e-6, 1e-6);
    ad_nlopt_free(&obj), ad_nlopt_free(&ineq), ad_nlopt_free(&eq);  /* and the programs */
    assert_null(obj.program);
    nlopt_destroy(opt);
}

static void assert_same_run(const run *a, const run *b)
{
    assert_int_equal(a->result, b->result);
    assert_int_equal(a->evaluations, b->evaluations);
    assert_same(a->fx, b->fx);
    for (int i = 0; i < 4; i++)
        assert_same(a->x[i], b->x[i]);
}

static void test_hs71_replay(void **state)
{
    run plain, replayed;
    (void)state;
    solve(counted_hs71_objective, counted_hs71_inequality, counted_hs71_equality, 0, &plain);
    solve(counted_hs71_objective, counted_hs71_inequality, counted_hs71_equality, 1, &replayed);
    assert_same_run(&plain, &replayed);
    assert_true(plain.obj.f > 5 && plain.ineq.g > 5 && plain.eq.f > 5);
    /* each recorded at the first point, then replayed */
    assert_int_equal(replayed.obj.f, 1);
    assert_int_equal(replayed.ineq.g, 1);
    assert_int_equal(replayed.eq.f, 1);
}

static void test_guard_flips(void **state)
{
    run plain, replayed;
    (void)state;
    solve(guarded_hs71_objective, guarded_hs71_inequality, counted_hs71_equality, 0, &plain);
    solve(guarded_hs71_objective, guarded_hs71_inequality, counted_hs71_equality, 1, &replayed);
    assert_same_run(&plain, &replayed);
    /* x1 falls below 4.9 on the way: both recorded again there */
    assert_true(replayed.obj.f >= 2 && replayed.obj.f < plain.obj.f);
    assert_true(replayed.ineq.g >= 2 && replayed.ineq.g < plain.ineq.g);
    assert_int_equal(replayed.eq.f, 1);
    assert_true(replayed.x[1] < 4.9);
}

static void test_unkept(void **state)
{
    run plain, replayed;
    (void)state;
    solve(counted_hs71_objective, nested_hs71_inequality, counted_hs71_equality, 0, &plain);
    solve(counted_hs71_objective, nested_hs71_inequality, counted_hs71_equality, 1, &replayed);
    assert_same_run(&plain, &replayed);
    /* the inequality, evaluated as without replay after the recording
     * that found out; the others replayed */
    assert_int_equal(replayed.ineq.g, plain.ineq.g + 1);
    assert_int_equal(replayed.obj.f, 1);
}

static void counted_two(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    count_g(ctx);
    two(x, n, y, m, NULL);
}

static void test_callbacks_replay(void **state)
{
    const double x[4] = {0.5, -1.0, 1.5, 0.25}, x2[4] = {0.75, 2.0, -1.5, 1.0};
    double g[4], gr[4], jac[8], jr[8], y[2], yr[2], fx;
    bridge_calls calls = {0, 0};
    ad_nlopt s, v, sr, vr;
    (void)state;
    nlopt_opt opt = nlopt_create(NLOPT_LD_SLSQP, 4);
    assert_int_equal(ad_nlopt_init(&s, opt, hs71_objective, NULL, NULL, 4, 0), AD_OK);
    assert_int_equal(ad_nlopt_init(&v, opt, NULL, two, NULL, 4, 2), AD_OK);
    assert_int_equal(ad_nlopt_init(&sr, opt, counted_hs71_objective, NULL, &calls, 4, 0), AD_OK);
    assert_int_equal(ad_nlopt_init(&vr, opt, NULL, counted_two, &calls, 4, 2), AD_OK);
    sr.replay = vr.replay = 1;
    /* value calls first: they record */
    fx = ad_nlopt_scalar(4, x, NULL, &s);
    assert_same(ad_nlopt_scalar(4, x, NULL, &sr), fx);
    ad_nlopt_vector(2, y, 4, x, NULL, &v);
    ad_nlopt_vector(2, yr, 4, x, NULL, &vr);
    assert_same(yr[0], y[0]);
    assert_same(yr[1], y[1]);
    assert_int_equal(calls.f, 1);
    assert_int_equal(calls.g, 1);
    for (int k = 0; k < 2; k++) {
        const double *at = k ? x2 : x;
        assert_same(ad_nlopt_scalar(4, at, gr, &sr), ad_nlopt_scalar(4, at, g, &s));
        for (int i = 0; i < 4; i++)
            assert_same(gr[i], g[i]);
        ad_nlopt_vector(2, yr, 4, at, jr, &vr);
        ad_nlopt_vector(2, y, 4, at, jac, &v);
        for (int j = 0; j < 2; j++)
            assert_same(yr[j], y[j]);
        for (int i = 0; i < 8; i++)
            assert_same(jr[i], jac[i]);
    }
    assert_int_equal(calls.f, 1);  /* replays only */
    assert_int_equal(calls.g, 1);
    /* value replays record nothing: a tape limit of 1 record does not
     * stop them; derivative replays record the programs' operations */
    ad_nlopt_vector(2, y, 4, x, NULL, &v);
    size_t old = ad_set_tape_limit(1);
    assert_same(ad_nlopt_scalar(4, x, NULL, &sr), fx);
    ad_nlopt_vector(2, yr, 4, x, NULL, &vr);
    assert_same(yr[0], y[0]);
    assert_same(yr[1], y[1]);
    assert_nan(ad_nlopt_scalar(4, x, g, &sr));
    ad_nlopt_vector(2, yr, 4, x, jr, &vr);
    ad_set_tape_limit(old);
    assert_int_equal(sr.status, AD_ERANGE);
    assert_int_equal(vr.status, AD_ERANGE);
    assert_nan(yr[0]);
    assert_nan(jr[0]);
    assert_int_equal(calls.f, 1);
    assert_int_equal(calls.g, 1);
    ad_nlopt_free(&s), ad_nlopt_free(&v), ad_nlopt_free(&sr), ad_nlopt_free(&vr);
    nlopt_destroy(opt);
}

static void test_failure_replay(void **state)
{
    double x[2] = {1.0, 2.0}, fx, g[2];
    ad_nlopt b;
    (void)state;
    if (ad_gradient(failing, NULL, 2, x, &fx, g) != AD_OK) {}  /* keeps a value, unless it has one */
    nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, 2);
    assert_int_equal(ad_nlopt_init(&b, opt, failing, NULL, NULL, 2, 0), AD_OK);
    b.replay = 1;
    nlopt_set_min_objective(opt, ad_nlopt_scalar, &b);
    nlopt_set_maxeval(opt, 100);
    assert_int_equal(nlopt_optimize(opt, x, &fx), NLOPT_FORCED_STOP);
    assert_int_equal(b.status, AD_EFOREIGN);
    assert_null(b.program);
    ad_nlopt_free(&b);
    nlopt_destroy(opt);
}

/* ---- sums, loops, progress ---- */

typedef struct lrun {
    double x[100], fx;
    nlopt_result result;
    int evaluations;
} lrun;

/* NLopt's L-BFGS from x_i = +-1.2 (the first n of x0 if given) on b. */
static void lbfgs_run(ad_nlopt *b, nlopt_opt opt, size_t n, const double *x0, lrun *r)
{
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < n; i++)
        r->x[i] = x0 ? x0[i] : i % 2 ? 1.2 : -1.2;
    nlopt_set_min_objective(opt, ad_nlopt_scalar, b);
    nlopt_set_ftol_rel(opt, 1e-15);
    nlopt_set_xtol_rel(opt, 1e-12);
    nlopt_set_maxeval(opt, 20000);
    r->result = nlopt_optimize(opt, r->x, &r->fx);
    r->evaluations = nlopt_get_numevals(opt);
}

static void assert_same_lrun(const lrun *a, const lrun *b, size_t n)
{
    assert_int_equal(a->result, b->result);
    assert_int_equal(a->evaluations, b->evaluations);
    assert_same(a->fx, b->fx);
    for (size_t i = 0; i < n; i++)
        assert_same(a->x[i], b->x[i]);
}

static void run_plain(ad_objective f, void *ctx, size_t n, int replay, const double *x0,
                      lrun *r)
{
    ad_nlopt b;
    nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, (unsigned)n);
    assert_int_equal(ad_nlopt_init(&b, opt, f, NULL, ctx, n, 0), AD_OK);
    b.replay = replay;
    lbfgs_run(&b, opt, n, x0, r);
    assert_true(r->result > 0);
    assert_int_equal(b.status, AD_OK);
    ad_nlopt_free(&b);
    nlopt_destroy(opt);
}

static void run_sum(ad_term term, size_t nterms, size_t n, unsigned threads, lrun *r)
{
    ad_nlopt b;
    nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, (unsigned)n);
    assert_int_equal(ad_nlopt_init_sum(&b, opt, term, NULL, nterms, n, threads), AD_OK);
    lbfgs_run(&b, opt, n, NULL, r);
    assert_true(r->result > 0);
    assert_int_equal(b.status, AD_OK);
    assert_int_equal(b.evaluations, (unsigned long)r->evaluations);
    ad_nlopt_free(&b);
    nlopt_destroy(opt);
}

static void test_sum_bitwise(void **state)
{
    static lrun plain, one, two, whole;
    (void)state;
    run_plain(rosenbrock, NULL, 18, 0, NULL, &plain);
    run_sum(rosenbrock_term, 17, 18, 1, &one);
    run_sum(rosenbrock_term, 17, 18, 2, &two);
    run_sum(rosenbrock_one_term, 1, 18, 2, &whole);
    assert_same_lrun(&plain, &one, 18);
    assert_same_lrun(&plain, &two, 18);
    assert_same_lrun(&plain, &whole, 18);
    assert_true(plain.fx < 1e-10);
}

static void test_sum_threads(void **state)
{
    static lrun plain, one, two;
    (void)state;
    run_plain(rosenbrock, NULL, 100, 0, NULL, &plain);
    run_sum(rosenbrock_term, 99, 100, 1, &one);
    run_sum(rosenbrock_term, 99, 100, 2, &two);
    assert_same_lrun(&one, &two, 100);
    assert_true(one.fx < 1e-10);
    for (size_t i = 0; i < 100; i++)
        assert_near(one.x[i], plain.x[i], 1e-4, 1e-4);
}

static void test_sum_callbacks(void **state)
{
    const double x[5] = {0.5, -1.0, 1.5, 0.25, 2.0};
    double g[5];
    ad_nlopt b;
    (void)state;
    nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, 5);
    assert_int_equal(ad_nlopt_init_sum(&b, opt, rosenbrock_term, NULL, 4, 5, 2), AD_OK);
    double fx = ad_nlopt_scalar(5, x, g, &b);
    assert_near(fx, value_on_constants(rosenbrock, NULL, 5, x), 1e-15, 0.0);
    check_gradient_fd(rosenbrock, NULL, 5, x, g);
    assert_same(ad_nlopt_scalar(5, x, NULL, &b), fx);  /* through the gradient */
    assert_int_equal(b.status, AD_OK);
    assert_int_equal(b.evaluations, 2);
    ad_nlopt_free(&b);
    nlopt_destroy(opt);
}

static void test_sum_errors(void **state)
{
    double x[10], fx, g[10];
    size_t bad = 5;
    ad_nlopt b;
    (void)state;
    for (int i = 0; i < 10; i++)
        x[i] = 0.5;
    nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, 10);
    assert_int_equal(ad_nlopt_init_sum(&b, opt, NULL, NULL, 9, 10, 1), AD_EINVAL);
    ad_nlopt_free(&b);  /* nothing to free: harmless */
    /* a call of another size */
    assert_int_equal(ad_nlopt_init_sum(&b, opt, rosenbrock_term, NULL, 9, 10, 1), AD_OK);
    assert_nan(ad_nlopt_scalar(9, x, g, &b));
    assert_int_equal(b.status, AD_EINVAL);
    ad_nlopt_free(&b);
    keep_foreign();
    for (unsigned threads = 1; threads <= 2; threads++) {
        assert_int_equal(ad_nlopt_init_sum(&b, opt, failing_term, &bad, 9, 10, threads), AD_OK);
        nlopt_set_min_objective(opt, ad_nlopt_scalar, &b);
        nlopt_set_maxeval(opt, 100);
        for (int i = 0; i < 10; i++)
            x[i] = 0.5;
        assert_int_equal(nlopt_optimize(opt, x, &fx), NLOPT_FORCED_STOP);
        assert_int_equal(b.status, AD_EFOREIGN);
        assert_int_equal(b.evaluations, 0);
        assert_int_equal(b.stopped, 0);
        ad_nlopt_free(&b);
    }
    nlopt_destroy(opt);
}

static void test_loop(void **state)
{
    static ode_fit o;
    static lrun u, l, rp;
    const double x0[2] = {1.6, 0.5};
    (void)state;
    ode_fit_init(&o, 0);
    run_plain(ode_unrolled, &o, 2, 0, x0, &u);
    run_plain(ode_looped, &o, 2, 0, x0, &l);
    o.calls.f = 0;
    run_plain(ode_looped, &o, 2, 1, x0, &rp);
    assert_int_equal(o.calls.f, 1);  /* recorded once, the loop kept as a call */
    assert_true(u.fx < 1e-14 && l.fx < 1e-14);
    assert_near(u.x[0], ODE_K, 1e-6, 0.0);
    assert_near(u.x[1], ODE_C, 1e-6, 0.0);
    assert_near(l.x[0], ODE_K, 1e-6, 0.0);
    assert_near(l.x[1], ODE_C, 1e-6, 0.0);
    assert_same_lrun(&l, &rp, 2);
    /* value-only calls run the loop on constants */
    ad_nlopt b;
    nlopt_opt opt = nlopt_create(NLOPT_LN_NELDERMEAD, 2);
    assert_int_equal(ad_nlopt_init(&b, opt, ode_looped, NULL, &o, 2, 0), AD_OK);
    const double at[2] = {1.7, 0.45};
    assert_same(ad_nlopt_scalar(2, at, NULL, &b), value_on_constants(ode_unrolled, &o, 2, at));
    ad_nlopt_free(&b);
    nlopt_destroy(opt);
}

static void test_progress(void **state)
{
    static hook_log h;
    static lrun r;
    ad_nlopt b;
    (void)state;
    memset(&h, 0, sizeof h);
    nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, 4);
    assert_int_equal(ad_nlopt_init(&b, opt, rosenbrock, NULL, NULL, 4, 0), AD_OK);
    b.progress = log_progress;
    b.progress_ctx = &h;
    lbfgs_run(&b, opt, 4, NULL, &r);
    assert_true(r.result > 0);
    assert_int_equal(b.stopped, 0);
    /* once per evaluation, each with f and |g| there */
    assert_int_equal(h.calls, r.evaluations);
    check_hook_log(&h, rosenbrock, NULL, 4, 1);
    for (long c = 0; c < h.calls; c++)
        assert_int_equal(h.evaluations[c], (unsigned long)c + 1);
    /* stopped at the fifth */
    memset(&h, 0, sizeof h);
    h.stop_at = 5;
    b.evaluations = 0;
    lbfgs_run(&b, opt, 4, NULL, &r);
    assert_int_equal(r.result, NLOPT_FORCED_STOP);
    assert_int_equal(b.stopped, 1);
    assert_int_equal(b.status, AD_OK);
    assert_int_equal(h.calls, 5);
    ad_nlopt_free(&b);
    nlopt_destroy(opt);
    /* derivative-free: value-only calls, gnorm NaN */
    memset(&h, 0, sizeof h);
    opt = nlopt_create(NLOPT_LN_NELDERMEAD, 4);
    assert_int_equal(ad_nlopt_init(&b, opt, rosenbrock, NULL, NULL, 4, 0), AD_OK);
    b.progress = log_progress;
    b.progress_ctx = &h;
    h.stop_at = 7;
    lbfgs_run(&b, opt, 4, NULL, &r);
    assert_int_equal(r.result, NLOPT_FORCED_STOP);
    assert_int_equal(h.calls, 7);
    check_hook_log(&h, rosenbrock, NULL, 4, 1);
    assert_nan(h.gnorm[0]);
    ad_nlopt_free(&b);
    nlopt_destroy(opt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hs71),
        cmocka_unit_test(test_callbacks),
        cmocka_unit_test(test_failure_stops),
        cmocka_unit_test(test_hs71_replay),
        cmocka_unit_test(test_guard_flips),
        cmocka_unit_test(test_unkept),
        cmocka_unit_test(test_callbacks_replay),
        cmocka_unit_test(test_failure_replay),
        cmocka_unit_test(test_sum_bitwise),
        cmocka_unit_test(test_sum_threads),
        cmocka_unit_test(test_sum_callbacks),
        cmocka_unit_test(test_sum_errors),
        cmocka_unit_test(test_loop),
        cmocka_unit_test(test_progress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
