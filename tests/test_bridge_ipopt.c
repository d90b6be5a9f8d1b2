/* dualrev/ipopt.h: Hock-Schittkowski 71 with Ipopt, exact sparse Hessians
 * and Ipopt's own L-BFGS approximation; value-only calls recording
 * nothing; a structure that moves (AD_ESTRUCTURE) and a failing objective
 * stopping the solve; the initialisation's errors.  With replay
 * (b.replay): the same solves to the bit with f and g called only to
 * record, the Hessian of the Lagrangian with each call's weights, guards
 * that flip on the way recorded again (in a structure that stays, that
 * shrinks, and that moves: AD_ESTRUCTURE), value-only replays recording
 * nothing, a g a program cannot keep evaluated as without replay, and a
 * failing objective.  Sums (ad_ipopt_init_sum): the plain objective's
 * iterates to the bit where the sum's chunks add up as it does, the same
 * on 1 and 2 threads, HS71 with its objective as terms, the exact Hessian
 * refused with a status, a failing term, bad arguments.  An ODE fit
 * through a checkpointed loop, with and without replay, to the
 * written-out fit's optimum, by the exact Hessian where the library gives
 * one through the loop, else by Ipopt's limited-memory one.  The progress
 * hook at each iteration, and stopping the solve. */
#include <string.h>

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

/* ---- replay ---- */

static void counted_hs71_g(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    count_g(ctx);
    hs71_g(x, n, y, m, NULL);
}

/* The product in another order where x1 < 4.9: a guard that flips on the
 * way from x1 = 5 to 4.743, in a structure that stays. */
static void guarded_hs71_g(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    count_g(ctx);
    hs71_g(x, n, y, m, NULL);
    if (ad_lt(x[1], 4.9))
        y[0] = ad_mul(ad_mul(ad_mul(x[0], x[1]), x[2]), x[3]);
}

/* hs71_g plus nested_square(x0) - x0 x0 (0): no program keeps it. */
static void nested_hs71_g(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    count_g(ctx);
    hs71_g(x, n, y, m, NULL);
    y[0] = ad_add(y[0], ad_sub(nested_square(x[0]), ad_mul(x[0], x[0])));
}

typedef struct run {
    double x[4], obj, gx[2], mult_g[2], zl[4], zu[4];
    enum ApplicationReturnStatus app;
    long iterations;
    bridge_calls calls;  /* during the solve */
    bridge_calls init;   /* during ad_ipopt_init */
} run;

static void solve(ad_objective f, ad_function g, const char *hessian, int replay, run *r)
{
    ad_ipopt b;
    memset(r, 0, sizeof *r);
    r->x[0] = 1.0, r->x[1] = 5.0, r->x[2] = 5.0, r->x[3] = 1.0;
    assert_int_equal(ad_ipopt_init(&b, f, g, &r->calls, 4, 2, x_l, x_u, g_l, g_u, r->x), AD_OK);
    assert_int_equal(b.replay, 0);  /* off by default */
    b.replay = replay;
    r->init = r->calls;
    r->calls.f = r->calls.g = 0;
    quiet(&b);
    if (hessian)
        AddIpoptStrOption(b.problem, "hessian_approximation", (char *)hessian);
    assert_int_equal(
        ad_ipopt_solve(&b, r->x, &r->obj, r->gx, r->mult_g, r->zl, r->zu, &r->app), AD_OK);
    assert_true(r->app == Solve_Succeeded || r->app == Solved_To_Acceptable_Level);
    assert_near(r->obj, HS71_OPTIMUM, 1e-8, 0.0);
    assert_near(r->x[0], 1.0, 1e-6, 1e-6);
    assert_near(r->gx[1], 40.0, 1e-8, 0.0);
    r->iterations = b.iterations;
    ad_ipopt_free(&b);  /* and the programs */
    assert_null(b.fprog);
}

/* The same iterates, to the bit: the solution, its multipliers, the
 * iteration count. */
static void assert_same_run(const run *a, const run *b)
{
    assert_int_equal(a->app, b->app);
    assert_int_equal(a->iterations, b->iterations);
    assert_same(a->obj, b->obj);
    for (int i = 0; i < 4; i++) {
        assert_same(a->x[i], b->x[i]);
        assert_same(a->zl[i], b->zl[i]);
        assert_same(a->zu[i], b->zu[i]);
    }
    for (int j = 0; j < 2; j++) {
        assert_same(a->gx[j], b->gx[j]);
        assert_same(a->mult_g[j], b->mult_g[j]);
    }
}

static void test_hs71_replay(void **state)
{
    run plain, replayed;
    (void)state;
    solve(counted_hs71_objective, counted_hs71_g, NULL, 0, &plain);
    solve(counted_hs71_objective, counted_hs71_g, NULL, 1, &replayed);
    assert_same_run(&plain, &replayed);
    assert_true(plain.calls.f > 10 && plain.calls.g > 10);
    /* f and g recorded once each, and once together in the Lagrangian */
    assert_int_equal(replayed.calls.f, 2);
    assert_int_equal(replayed.calls.g, 2);
}

static void test_hs71_limited_memory_replay(void **state)
{
    run plain, replayed;
    (void)state;
    solve(counted_hs71_objective, counted_hs71_g, "limited-memory", 0, &plain);
    solve(counted_hs71_objective, counted_hs71_g, "limited-memory", 1, &replayed);
    assert_same_run(&plain, &replayed);
    assert_int_equal(replayed.calls.f, 1);  /* no Hessian, no Lagrangian */
    assert_int_equal(replayed.calls.g, 1);
}

static void test_guard_flips(void **state)
{
    run plain, replayed;
    (void)state;
    solve(guarded_hs71_objective, guarded_hs71_g, NULL, 0, &plain);
    solve(guarded_hs71_objective, guarded_hs71_g, NULL, 1, &replayed);
    assert_same_run(&plain, &replayed);
    /* each program recorded again where x1 fell below 4.9 (the start
     * point itself is on the other side) */
    assert_true(replayed.x[1] < 4.9);
    assert_true(replayed.calls.f >= 4 && replayed.calls.f < plain.calls.f / 2);
    assert_true(replayed.calls.g >= 4 && replayed.calls.g < plain.calls.g / 2);
}

static void test_unkept(void **state)
{
    run plain, replayed;
    (void)state;
    solve(counted_hs71_objective, nested_hs71_g, NULL, 0, &plain);
    solve(counted_hs71_objective, nested_hs71_g, NULL, 1, &replayed);
    assert_same_run(&plain, &replayed);
    /* g and the Lagrangian found unkept at their first recording, then
     * evaluated as without replay */
    assert_int_equal(replayed.calls.g, plain.calls.g + 2);
}

/* The Hessian callback with replay against the one without, at two points
 * and three sets of weights: each call's own weights, never the
 * recording's. */
static void test_hessian_weights(void **state)
{
    const double w[3][3] = {{1.0, 1.0, 1.0}, {0.0, -2.5, 0.125}, {3.0, 0.5, -7.0}};
    double x[4] = {1.0, 5.0, 5.0, 1.0}, h[10], hr[10];
    ad_ipopt plain, b;
    (void)state;
    assert_int_equal(ad_ipopt_init(&plain, hs71_objective, hs71_g, NULL, 4, 2, x_l, x_u, g_l,
                                   g_u, x),
                     AD_OK);
    assert_int_equal(ad_ipopt_init(&b, hs71_objective, hs71_g, NULL, 4, 2, x_l, x_u, g_l, g_u,
                                   x),
                     AD_OK);
    b.replay = 1;
    for (int k = 0; k < 6; k++) {
        double lambda[2] = {w[k % 3][1], w[k % 3][2]};
        if (k == 3)
            x[1] = 4.0, x[3] = 1.5;
        assert_true(ad__ipopt_h(4, x, 1, w[k % 3][0], 2, lambda, 1, 10, NULL, NULL, h, &plain));
        assert_true(ad__ipopt_h(4, x, 1, w[k % 3][0], 2, lambda, 1, 10, NULL, NULL, hr, &b));
        for (int e = 0; e < 10; e++)
            assert_same(hr[e], h[e]);
    }
    assert_non_null(b.lprog);
    /* the Lagrangian's x block is the structure fixed at x0 */
    assert_int_equal(b.lhess.row_ptr[4], b.hess.nnz);
    ad_ipopt_free(&plain);
    ad_ipopt_free(&b);
}

static void test_value_calls_replay(void **state)
{
    double x[4] = {1.0, 5.0, 5.0, 1.0}, at[4] = {1.5, 4.5, 3.5, 1.25};
    double obj, objr, g[2], gr[2];
    bridge_calls calls = {0, 0};
    ad_ipopt plain, b;
    (void)state;
    assert_int_equal(ad_ipopt_init(&plain, hs71_objective, hs71_g, NULL, 4, 2, x_l, x_u, g_l,
                                   g_u, x),
                     AD_OK);
    assert_int_equal(ad_ipopt_init(&b, counted_hs71_objective, counted_hs71_g, &calls, 4, 2, x_l,
                                   x_u, g_l, g_u, x),
                     AD_OK);
    b.replay = 1;
    calls.f = calls.g = 0;
    assert_true(ad__ipopt_f(4, x, 1, &objr, &b));  /* these record */
    assert_true(ad__ipopt_g(4, x, 1, 2, gr, &b));
    assert_int_equal(calls.f, 1);
    assert_int_equal(calls.g, 1);
    size_t old = ad_set_tape_limit(1);  /* value replays record nothing */
    assert_true(ad__ipopt_f(4, at, 1, &objr, &b));
    assert_true(ad__ipopt_g(4, at, 1, 2, gr, &b));
    assert_true(ad__ipopt_f(4, at, 1, &obj, &plain));
    assert_true(ad__ipopt_g(4, at, 1, 2, g, &plain));
    ad_set_tape_limit(old);
    assert_same(objr, obj);
    assert_same(gr[0], g[0]);
    assert_same(gr[1], g[1]);
    assert_int_equal(calls.f, 1);
    assert_int_equal(calls.g, 1);
    assert_int_equal(b.status, AD_OK);
    ad_ipopt_free(&plain);
    ad_ipopt_free(&b);
}

/* A solve from x0 = (0, 0) to (3, 1) past a guard at x0 = 2 beyond which
 * the constraint gains x0 x1: the Hessian of the Lagrangian reaches (1, 0),
 * outside the structure fixed at x0.  With replay the programs of g and of
 * the Lagrangian are recorded again there, and the Lagrangian's new
 * structure stops the solve as without replay. */
static ad_real shifted_square(const ad_real *x, size_t n, void *ctx)
{
    (void)n;
    count_f(ctx);
    ad_real a = ad_sub(x[0], 3.0), c = ad_sub(x[1], 1.0);
    return ad_add(ad_mul(a, a), ad_mul(c, c));
}

static void growing_g(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m;
    count_g(ctx);
    y[0] = ad_add(x[0], x[1]);
    if (ad_gt(x[0], 2.0))
        y[0] = ad_add(y[0], ad_mul(1e-3, ad_mul(x[0], x[1])));
}

static void test_guard_moves_structure(void **state)
{
    const double lo[2] = {-10, -10}, hi[2] = {10, 10}, gl[1] = {-1e20}, gu[1] = {10};
    (void)state;
    for (int replay = 0; replay < 2; replay++) {
        double x[2] = {0.0, 0.0}, obj;
        bridge_calls calls = {0, 0};
        ad_ipopt b;
        enum ApplicationReturnStatus app;
        assert_int_equal(ad_ipopt_init(&b, shifted_square, growing_g, &calls, 2, 1, lo, hi, gl,
                                       gu, x),
                         AD_OK);
        assert_int_equal(b.hess.nnz, 2);  /* the diagonal */
        quiet(&b);
        b.replay = replay;
        assert_int_equal(ad_ipopt_solve(&b, x, &obj, NULL, NULL, NULL, NULL, &app),
                         AD_ESTRUCTURE);
        assert_true(app != Solve_Succeeded);
        if (replay)
            assert_non_null(b.lprog);  /* recorded again past the guard */
        ad_ipopt_free(&b);
    }
}

static void guarded_shrinking_g(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m;
    count_g(ctx);
    y[0] = ad_add(x[0], 0.0);
    if (ad_lt(x[0], 0.5))
        y[0] = ad_add(y[0], ad_mul(1e-3, x[1]));
}

static void test_guard_shrinks_structure(void **state)
{
    const double lo[2] = {-1e20, -1e20}, hi[2] = {1e20, 1e20}, gl[1] = {-1e20}, gu[1] = {1.5};
    double xs[2][2], objs[2];
    long iters[2];
    bridge_calls calls[2] = {{0, 0}, {0, 0}};
    (void)state;
    for (int replay = 0; replay < 2; replay++) {
        double *x = xs[replay];
        ad_ipopt b;
        enum ApplicationReturnStatus app;
        x[0] = x[1] = 0.0;
        assert_int_equal(ad_ipopt_init(&b, counted_rosenbrock, guarded_shrinking_g,
                                       &calls[replay], 2, 1, lo, hi, gl, gu, x),
                         AD_OK);
        quiet(&b);
        b.replay = replay;
        calls[replay].f = calls[replay].g = 0;
        assert_int_equal(ad_ipopt_solve(&b, x, &objs[replay], NULL, NULL, NULL, NULL, &app),
                         AD_OK);
        assert_int_equal(app, Solve_Succeeded);
        assert_true(fabs(x[0] - 1.0) < 1e-6 && fabs(x[1] - 1.0) < 1e-6);
        iters[replay] = b.iterations;
        ad_ipopt_free(&b);
    }
    assert_int_equal(iters[0], iters[1]);
    assert_same(objs[0], objs[1]);
    assert_same(xs[0][0], xs[1][0]);
    assert_same(xs[0][1], xs[1][1]);
    assert_true(calls[1].g >= 4 && calls[1].g < calls[0].g / 2);  /* recorded again */
}

/* x0^2 + x1^2 at its first call (the initialisation's), which keeps x0;
 * a value of that recording afterwards (AD_EFOREIGN). */
typedef struct kept {
    ad_real x0;
    int have;
} kept;

static ad_real failing_later(const ad_real *x, size_t n, void *ctx)
{
    kept *k = (kept *)ctx;
    (void)n;
    if (!k->have) {
        k->x0 = x[0];
        k->have = 1;
        return ad_add(ad_mul(x[0], x[0]), ad_mul(x[1], x[1]));
    }
    return ad_add(x[0], k->x0);
}

static void test_failure_replay(void **state)
{
    double x[2] = {1.0, 2.0}, obj;
    const double lo[2] = {-10, -10}, hi[2] = {10, 10};
    kept k = {{0.0, 0, 0}, 0};
    ad_ipopt b;
    enum ApplicationReturnStatus app;
    (void)state;
    assert_int_equal(ad_ipopt_init(&b, failing_later, NULL, &k, 2, 0, lo, hi, NULL, NULL, x),
                     AD_OK);
    quiet(&b);
    b.replay = 1;
    assert_int_equal(ad_ipopt_solve(&b, x, &obj, NULL, NULL, NULL, NULL, &app), AD_EFOREIGN);
    assert_true(app != Solve_Succeeded);
    assert_null(b.fprog);
    ad_ipopt_free(&b);
}

/* ---- sums, loops, progress ---- */

typedef struct irun {
    double x[100], obj;
    enum ApplicationReturnStatus app;
    long iterations;
    unsigned long evaluations;
} irun;

static const double big_lo[100] = {0}, big_hi[100] = {0};  /* filled by bounds() */
static double lo100[100], hi100[100];

static void bounds(void)
{
    (void)big_lo, (void)big_hi;
    for (int i = 0; i < 100; i++)
        lo100[i] = -1e20, hi100[i] = 1e20;
}

static void irun_solve(ad_ipopt *b, size_t n, irun *r)
{
    memset(r, 0, sizeof *r);
    for (size_t i = 0; i < n; i++)
        r->x[i] = i % 2 ? 1.2 : -1.2;
    quiet(b);
    AddIpoptStrOption(b->problem, "hessian_approximation", (char *)"limited-memory");
    assert_int_equal(ad_ipopt_solve(b, r->x, &r->obj, NULL, NULL, NULL, NULL, &r->app), AD_OK);
    r->iterations = b->iterations;
    r->evaluations = b->evaluations;
}

static void assert_same_irun(const irun *a, const irun *b, size_t n)
{
    assert_int_equal(a->app, b->app);
    assert_int_equal(a->iterations, b->iterations);
    assert_int_equal(a->evaluations, b->evaluations);
    assert_same(a->obj, b->obj);
    for (size_t i = 0; i < n; i++)
        assert_same(a->x[i], b->x[i]);
}

static void ipopt_plain(ad_objective f, size_t n, irun *r)
{
    ad_ipopt b;
    double x0[100] = {0};
    bounds();
    assert_int_equal(ad_ipopt_init(&b, f, NULL, NULL, n, 0, lo100, hi100, NULL, NULL, x0), AD_OK);
    irun_solve(&b, n, r);
    ad_ipopt_free(&b);
}

static void ipopt_sum(ad_term term, size_t nterms, size_t n, unsigned threads, irun *r)
{
    ad_ipopt b;
    double x0[100] = {0};
    bounds();
    assert_int_equal(ad_ipopt_init_sum(&b, term, NULL, NULL, nterms, n, 0, threads, lo100, hi100,
                                       NULL, NULL, x0),
                     AD_OK);
    assert_int_equal(b.hessian, 0);
    assert_int_equal(b.hess.nnz, 0);
    irun_solve(&b, n, r);
    ad_ipopt_free(&b);
}

static void test_sum_bitwise(void **state)
{
    static irun plain, one, two, whole;
    (void)state;
    /* 5 terms: single-term chunks (rosenbrock_term), bit for bit */
    ipopt_plain(rosenbrock, 6, &plain);
    ipopt_sum(rosenbrock_term, 5, 6, 1, &one);
    ipopt_sum(rosenbrock_term, 5, 6, 2, &two);
    ipopt_sum(rosenbrock_one_term, 1, 6, 2, &whole);
    assert_true(plain.app == Solve_Succeeded || plain.app == Solved_To_Acceptable_Level);
    assert_same_irun(&plain, &one, 6);
    assert_same_irun(&plain, &two, 6);
    assert_same_irun(&plain, &whole, 6);
    assert_true(plain.obj < 1e-12);
}

static void test_sum_threads(void **state)
{
    static irun one, two;
    (void)state;
    ipopt_sum(rosenbrock_term, 23, 24, 1, &one);  /* 23 terms: chunks of 2 */
    ipopt_sum(rosenbrock_term, 23, 24, 2, &two);
    assert_same_irun(&one, &two, 24);
    assert_true(one.app == Solve_Succeeded || one.app == Solved_To_Acceptable_Level);
    for (size_t i = 0; i < 24; i++)
        assert_near(one.x[i], 1.0, 1e-5, 1e-5);
}

/* HS71's objective as four terms: x0 x3 x0, x0 x3 x1, x0 x3 x2, x2. */
static ad_real hs71_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return i < 3 ? ad_mul(ad_mul(x[0], x[3]), x[i]) : x[2];
}

static void test_sum_hs71(void **state)
{
    double x[4] = {1.0, 5.0, 5.0, 1.0}, obj, gx[2];
    ad_ipopt b;
    enum ApplicationReturnStatus app;
    (void)state;
    assert_int_equal(ad_ipopt_init_sum(&b, hs71_term, hs71_g, NULL, 4, 4, 2, 2, x_l, x_u, g_l,
                                       g_u, x),
                     AD_OK);
    assert_int_equal(b.jac.nnz, 8);
    quiet(&b);
    assert_int_equal(ad_ipopt_solve(&b, x, &obj, gx, NULL, NULL, NULL, &app), AD_OK);
    assert_true(app == Solve_Succeeded || app == Solved_To_Acceptable_Level);
    assert_near(obj, HS71_OPTIMUM, 1e-8, 0.0);
    assert_near(x[0], 1.0, 1e-6, 1e-6);
    assert_near(gx[1], 40.0, 1e-8, 0.0);
    /* the value-only callback, through the gradient: the objective's value */
    double v;
    const double at[4] = {1.5, 4.5, 3.5, 1.25};
    assert_true(ad__ipopt_f(4, (Number *)at, 1, &v, &b));
    assert_near(v, value_on_constants(hs71_objective, NULL, 4, at), 1e-15, 0.0);
    /* an exact Hessian asked for: refused with a status */
    x[0] = 1.0, x[1] = 5.0, x[2] = 5.0, x[3] = 1.0;
    AddIpoptStrOption(b.problem, "hessian_approximation", (char *)"exact");
    assert_int_equal(ad_ipopt_solve(&b, x, &obj, gx, NULL, NULL, NULL, &app), AD_ENOTSUP);
    assert_true(app != Solve_Succeeded);
    ad_ipopt_free(&b);
}

static void test_sum_errors(void **state)
{
    double x[10] = {0}, obj;
    size_t bad = 5;
    ad_ipopt b;
    enum ApplicationReturnStatus app;
    (void)state;
    bounds();
    assert_int_equal(ad_ipopt_init_sum(&b, NULL, NULL, NULL, 9, 10, 0, 1, lo100, hi100, NULL,
                                       NULL, x),
                     AD_EINVAL);
    assert_null(b.problem);
    assert_int_equal(ad_ipopt_init_sum(&b, rosenbrock_term, NULL, NULL, 9, 10, 0, 1, NULL, hi100,
                                       NULL, NULL, x),
                     AD_EINVAL);
    assert_int_equal(ad_ipopt_init_sum(&b, rosenbrock_term, NULL, NULL, 9, 10, 1, 1, lo100,
                                       hi100, g_l, g_u, x),
                     AD_EINVAL);  /* m > 0 without g */
    assert_int_equal(ad_ipopt_solve(&b, x, &obj, NULL, NULL, NULL, NULL, &app), AD_EINVAL);
    assert_int_equal(app, Invalid_Problem_Definition);
    ad_ipopt_free(&b);  /* nothing to free: harmless */
    keep_foreign();
    for (unsigned threads = 1; threads <= 2; threads++) {
        assert_int_equal(ad_ipopt_init_sum(&b, failing_term, NULL, &bad, 9, 10, 0, threads,
                                           lo100, hi100, NULL, NULL, x),
                         AD_OK);
        quiet(&b);
        assert_int_equal(ad_ipopt_solve(&b, x, &obj, NULL, NULL, NULL, NULL, &app), AD_EFOREIGN);
        assert_true(app != Solve_Succeeded);
        ad_ipopt_free(&b);
    }
}

static void fit_ode(ad_objective f, ode_fit *o, const char *hessian, int replay, irun *r,
                    int *exact)
{
    const double lo[2] = {0.1, 0.0}, hi[2] = {10.0, 5.0};
    double p0[2] = {1.6, 0.5};
    ad_ipopt b;
    memset(r, 0, sizeof *r);
    assert_int_equal(ad_ipopt_init(&b, f, NULL, o, 2, 0, lo, hi, NULL, NULL, p0), AD_OK);
    *exact = b.hessian;
    quiet(&b);
    if (hessian)
        AddIpoptStrOption(b.problem, "hessian_approximation", (char *)hessian);
    b.replay = replay;
    r->x[0] = p0[0], r->x[1] = p0[1];
    ad_status s = ad_ipopt_solve(&b, r->x, &r->obj, NULL, NULL, NULL, NULL, &r->app);
    if (hessian && !strcmp(hessian, "exact") && !b.hessian) {
        /* no Hessian through the loop: the exact path stops with a status */
        assert_int_equal(s, AD_ENOTSUP);
        assert_true(r->app != Solve_Succeeded);
    } else {
        assert_int_equal(s, AD_OK);
        assert_true(r->app == Solve_Succeeded);
    }
    r->iterations = b.iterations;
    r->evaluations = b.evaluations;
    ad_ipopt_free(&b);
}

static void test_loop(void **state)
{
    static ode_fit o;
    static irun u, l, rp, ex, exr;
    int exact_u, exact_l, e;
    (void)state;
    ode_fit_init(&o, 0);
    fit_ode(ode_unrolled, &o, NULL, 0, &u, &exact_u);
    assert_int_equal(exact_u, 1);
    fit_ode(ode_looped, &o, "limited-memory", 0, &l, &exact_l);
    o.calls.f = 0;
    fit_ode(ode_looped, &o, "limited-memory", 1, &rp, &e);
    /* once by ad_ipopt_init (the Hessian's structure, or AD_ENOTSUP), once
     * recorded: the loop is kept as a call */
    assert_int_equal(o.calls.f, 2);
    assert_same_irun(&l, &rp, 2);
    assert_true(u.obj < 1e-14 && l.obj < 1e-14);
    assert_near(u.x[0], ODE_K, 1e-6, 0.0);
    assert_near(u.x[1], ODE_C, 1e-6, 0.0);
    assert_near(l.x[0], ODE_K, 1e-6, 0.0);
    assert_near(l.x[1], ODE_C, 1e-6, 0.0);
    /* the exact Hessian through the loop: the written-out fit's solve
     * where the library gives it, else AD_ENOTSUP from the solve */
    fit_ode(ode_looped, &o, "exact", 0, &ex, &e);
    fit_ode(ode_looped, &o, "exact", 1, &exr, &e);
    if (exact_l) {
        assert_near(ex.x[0], ODE_K, 1e-6, 0.0);
        assert_near(ex.x[1], ODE_C, 1e-6, 0.0);
        assert_int_equal(ex.iterations, u.iterations);
        assert_same_irun(&ex, &exr, 2);
    } else {
        print_message("# ad_sparse_hessian through a checkpointed loop: AD_ENOTSUP; "
                      "Ipopt ran with its limited-memory Hessian\n");
    }
}

static void test_progress(void **state)
{
    static hook_log h;
    double x[4] = {1.0, 5.0, 5.0, 1.0}, obj;
    ad_ipopt b;
    enum ApplicationReturnStatus app;
    (void)state;
    memset(&h, 0, sizeof h);
    assert_int_equal(ad_ipopt_init(&b, hs71_objective, hs71_g, NULL, 4, 2, x_l, x_u, g_l, g_u, x),
                     AD_OK);
    quiet(&b);
    b.progress = log_progress;
    b.progress_ctx = &h;
    assert_int_equal(ad_ipopt_solve(&b, x, &obj, NULL, NULL, NULL, NULL, &app), AD_OK);
    assert_int_equal(app, Solve_Succeeded);
    assert_int_equal(b.stopped, 0);
    /* iterations 0 (the start point) to the last, one call each */
    assert_int_equal(h.calls, b.iterations + 1);
    check_hook_log(&h, hs71_objective, NULL, 4, 0);
    assert_same(h.f[h.calls - 1], obj);
    assert_true(h.inf_du[h.calls - 1] < 1e-9);
    assert_nan(h.gnorm[0]);
    assert_int_equal(h.have_x[0], 0);
    /* stopped at the fourth call (iteration 3) */
    memset(&h, 0, sizeof h);
    h.stop_at = 4;
    x[0] = 1.0, x[1] = 5.0, x[2] = 5.0, x[3] = 1.0;
    assert_int_equal(ad_ipopt_solve(&b, x, &obj, NULL, NULL, NULL, NULL, &app), AD_OK);
    assert_int_equal(app, User_Requested_Stop);
    assert_int_equal(b.stopped, 1);
    assert_int_equal(b.status, AD_OK);
    assert_int_equal(h.calls, 4);
    assert_int_equal(b.iterations, 3);
    ad_ipopt_free(&b);
}

/* (x1 - 2)^2 by an external function whose rule has no hvp: no sparse
 * Hessian (AD_ENOTSUP), so ad_ipopt_init falls back to limited-memory. */
static void sq_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    (void)ctx, (void)n, (void)m;
    y[0] = (x[0] - 2.0) * (x[0] - 2.0);
}

static void sq_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                   const double *ybar, double *xbar)
{
    (void)ctx, (void)n, (void)m, (void)y;
    xbar[0] = 2.0 * (x[0] - 2.0) * ybar[0];
}

static const ad_rule sq_rule = {sq_primal, sq_vjp, NULL, NULL};

static ad_real no_hessian(const ad_real *x, size_t n, void *ctx)
{
    ad_real y;
    (void)n, (void)ctx;
    if (ad_external(&sq_rule, NULL, 1, x + 1, 1, &y) != AD_OK)
        return ad_const(NAN);
    ad_real a = ad_sub(x[0], 1.0);
    return ad_add(ad_mul(a, a), y);
}

static void test_no_hessian(void **state)
{
    const double lo[2] = {-10, -10}, hi[2] = {10, 10};
    double x[2] = {0.0, 0.0}, obj, fx, H[4], g[2];
    ad_ipopt b;
    enum ApplicationReturnStatus app;
    (void)state;
    assert_int_equal(ad_hessian(no_hessian, NULL, 2, x, &fx, g, H), AD_ENOTSUP);  /* the premise */
    assert_int_equal(ad_ipopt_init(&b, no_hessian, NULL, NULL, 2, 0, lo, hi, NULL, NULL, x),
                     AD_OK);
    assert_int_equal(b.hessian, 0);
    quiet(&b);
    assert_int_equal(ad_ipopt_solve(&b, x, &obj, NULL, NULL, NULL, NULL, &app), AD_OK);
    assert_true(app == Solve_Succeeded);
    assert_near(x[0], 1.0, 1e-7, 1e-7);
    assert_near(x[1], 2.0, 1e-7, 1e-7);
    x[0] = x[1] = 0.0;
    AddIpoptStrOption(b.problem, "hessian_approximation", (char *)"exact");
    assert_int_equal(ad_ipopt_solve(&b, x, &obj, NULL, NULL, NULL, NULL, &app), AD_ENOTSUP);
    assert_true(app != Solve_Succeeded);
    ad_ipopt_free(&b);
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
        cmocka_unit_test(test_hs71_replay),
        cmocka_unit_test(test_hs71_limited_memory_replay),
        cmocka_unit_test(test_guard_flips),
        cmocka_unit_test(test_unkept),
        cmocka_unit_test(test_hessian_weights),
        cmocka_unit_test(test_value_calls_replay),
        cmocka_unit_test(test_guard_moves_structure),
        cmocka_unit_test(test_guard_shrinks_structure),
        cmocka_unit_test(test_failure_replay),
        cmocka_unit_test(test_sum_bitwise),
        cmocka_unit_test(test_sum_threads),
        cmocka_unit_test(test_sum_hs71),
        cmocka_unit_test(test_sum_errors),
        cmocka_unit_test(test_loop),
        cmocka_unit_test(test_progress),
        cmocka_unit_test(test_no_hessian),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
