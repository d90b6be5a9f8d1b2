/* Collective recordings in one process (dualrev.h, ad_set_collective and
 * ad_external_collective): what MPI's drivers (dualrev/mpi.h, tested
 * under mpirun by test_mpi_comm.c) build on.
 *   - the agreement hook is called where the docs say (begin and end of a
 *     recording, before a sweep, around a loop's replays), the status it
 *     returns is the driver's, with NaN outputs, and put back it is gone;
 *   - under a hook that agrees with everything, gradients, H v, J v and
 *     checkpointed loops give the bits they give without it;
 *   - ad_external_collective records on `active` alone (constant
 *     arguments, no arguments), its rules get the record's copy of ctx,
 *     and its rules run in every sweep even where no seed reaches them;
 *   - what is refused: programs, sparse Hessians, bad arguments. */
#include <string.h>

#include "check.h"

/* ---- a hook that counts, and fails on call `fail_at` ---- */

typedef struct counter {
    int calls;
    int fail_at;  /* 0: never */
    ad_status with;
} counter;

static ad_status agree(void *ctx, ad_status local)
{
    counter *c = ctx;
    c->calls++;
    if (c->fail_at && c->calls == c->fail_at)
        return c->with;
    return local;
}

/* ---- objectives ---- */

static ad_real rosen(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    ad_real f = ad_const(0.0);
    for (size_t i = 0; i + 1 < n; i++) {
        ad_real a = ad_sub(x[i + 1], ad_mul(x[i], x[i]));
        ad_real b = ad_sub(1.0, x[i]);
        f = ad_add(f, ad_add(ad_mul(100.0, ad_mul(a, a)), ad_mul(b, b)));
    }
    return f;
}

static void step(size_t k, const ad_real *x, ad_real *y, size_t n, const ad_real *p, size_t np,
                 void *ctx)
{
    (void)k, (void)np, (void)ctx;
    for (size_t i = 0; i < n; i++)
        y[i] = ad_add(x[i], ad_mul(0.1, ad_sin(ad_mul(p[i], x[(i + 1) % n]))));
}

static ad_real looped(const ad_real *x, size_t n, void *ctx)
{
    ad_real y[4], s = ad_const(0.0);
    (void)ctx;
    status_unused(ad_checkpointed_loop(step, NULL, 9, 2, n / 2, x, n / 2, x + n / 2, y));
    for (size_t i = 0; i < n / 2; i++)
        s = ad_add(s, ad_mul(y[i], y[i]));
    return s;
}

static void map(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m, (void)ctx;
    for (size_t i = 0; i < n; i++)
        y[i] = ad_mul(ad_exp(x[i]), x[(i + 1) % n]);
}

static const double X[4] = {0.3, -0.7, 1.1, 0.4}, V[4] = {1.0, -0.5, 0.25, 2.0};

static void test_hook_calls(void **state)
{
    (void)state;
    counter c = {0, 0, AD_OK};
    ad_collective hook = {agree, &c}, was = ad_set_collective(&hook);
    assert_null(was.agree);
    double fx, g[4];
    assert_int_equal(ad_gradient(rosen, NULL, 4, X, &fx, g), AD_OK);
    assert_int_equal(c.calls, 3);  /* begun, ended, the sweep */
    c.calls = 0;
    assert_int_equal(ad_gradient(looped, NULL, 4, X, &fx, g), AD_OK);
    assert_true(c.calls > 9);  /* and the loop's replays */
    was = ad_set_collective(NULL);
    assert_ptr_equal(was.ctx, &c);
    c.calls = 0;
    assert_int_equal(ad_gradient(rosen, NULL, 4, X, &fx, g), AD_OK);
    assert_int_equal(c.calls, 0);
}

/* The hook's status is the driver's, whichever call it fails. */
static void test_hook_fails(void **state)
{
    (void)state;
    counter c = {0, 0, AD_OK};
    ad_collective hook = {agree, &c};
    (void)ad_set_collective(&hook);
    double fx, g[4], hv[4];
    assert_int_equal(ad_hvp(looped, NULL, 4, X, V, &fx, g, hv), AD_OK);
    int total = c.calls;
    assert_true(total > 3);
    for (int k = 1; k <= total; k++) {
        c = (counter){0, k, AD_ECOMM};
        assert_int_equal(ad_hvp(looped, NULL, 4, X, V, &fx, g, hv), AD_ECOMM);
        assert_true(isnan(fx));
        for (int i = 0; i < 4; i++)
            assert_true(isnan(g[i]) && isnan(hv[i]));
    }
    (void)ad_set_collective(NULL);
}

/* A hook that agrees with everything changes no bits. */
static void test_same_bits(void **state)
{
    (void)state;
    counter c = {0, 0, AD_OK};
    ad_collective hook = {agree, &c};
    double f0, g0[4], h0[4], f1, g1[4], h1[4], y0[4], j0[4], y1[4], j1[4];
    for (int which = 0; which < 2; which++) {
        ad_objective f = which ? looped : rosen;
        assert_int_equal(ad_hvp(f, NULL, 4, X, V, &f0, g0, h0), AD_OK);
        (void)ad_set_collective(&hook);
        assert_int_equal(ad_hvp(f, NULL, 4, X, V, &f1, g1, h1), AD_OK);
        (void)ad_set_collective(NULL);
        assert_memory_equal(&f0, &f1, sizeof f0);
        assert_memory_equal(g0, g1, sizeof g0);
        assert_memory_equal(h0, h1, sizeof h0);
    }
    assert_int_equal(ad_jvp(map, NULL, 4, X, V, 4, y0, j0), AD_OK);
    (void)ad_set_collective(&hook);
    assert_int_equal(ad_jvp(map, NULL, 4, X, V, 4, y1, j1), AD_OK);
    (void)ad_set_collective(NULL);
    assert_memory_equal(y0, y1, sizeof y0);
    assert_memory_equal(j0, j1, sizeof j0);
}

/* ---- ad_external_collective: y = c x, c from the copied ctx ---- */

typedef struct scale {
    double c;
    int *vjps;  /* counts the vjp calls */
} scale;

static void sc_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    const scale *s = ctx;
    for (size_t j = 0; j < m; j++)
        y[j] = j < n ? s->c * x[j] : s->c;
}

static void sc_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                   const double *ybar, double *xbar)
{
    const scale *s = ctx;
    (void)x, (void)y;
    (*s->vjps)++;
    for (size_t i = 0; i < n && i < m; i++)
        xbar[i] = s->c * ybar[i];
}

static void sc_jvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                   const double *xdot, double *ydot)
{
    const scale *s = ctx;
    (void)x, (void)y;
    for (size_t j = 0; j < m; j++)
        ydot[j] = j < n ? s->c * xdot[j] : 0.0;
}

static void sc_hvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                   const double *ybar, const double *xdot, double *out)
{
    (void)ctx, (void)n, (void)x, (void)m, (void)y, (void)ybar, (void)xdot, (void)out;
}

static const ad_rule sc_rule = {sc_primal, sc_vjp, sc_jvp, sc_hvp};

typedef struct probe {
    int active, vjps, const_args, dead;
    uint32_t out_id;
} probe;

/* f = x0 x1 + (c y)_0 with y = x or constants; with `dead`, a second
 * collective record whose output nothing uses. */
static ad_real with_external(const ad_real *x, size_t n, void *ctx)
{
    probe *p = ctx;
    scale s = {3.0, &p->vjps};
    ad_real a[2] = {x[0], x[1]}, y[2];
    (void)n;
    if (p->const_args)
        a[0] = a[1] = ad_const(0.5);
    status_unused(ad_external_collective(&sc_rule, &s, sizeof s, p->active, 2, a, 2, y));
    s.c = -1e300;  /* the record has its own copy */
    p->out_id = y[0].id;
    if (p->dead) {
        ad_real z;
        status_unused(ad_external_collective(&sc_rule, &s, sizeof s, 1, 0, NULL, 1, &z));
    }
    return ad_add(ad_mul(x[0], x[1]), y[0]);
}

static void test_external_collective(void **state)
{
    (void)state;
    double fx, g[2];
    const double x[2] = {0.5, 2.0};
    probe p = {1, 0, 0, 0, 0};
    assert_int_equal(ad_gradient(with_external, &p, 2, x, &fx, g), AD_OK);
    assert_same(fx, 0.5 * 2.0 + 1.5);
    assert_same(g[0], 2.0 + 3.0);  /* the copy's c = 3 */
    assert_same(g[1], 0.5);
    assert_int_equal(p.vjps, 1);
    assert_true(p.out_id != 0);

    p = (probe){1, 0, 1, 0, 0};  /* constant arguments: recorded all the same */
    assert_int_equal(ad_gradient(with_external, &p, 2, x, &fx, g), AD_OK);
    assert_true(p.out_id != 0);
    assert_int_equal(p.vjps, 1);
    assert_same(g[0], 2.0);

    p = (probe){0, 0, 0, 0, 0};  /* not active: the primal alone, a constant */
    assert_int_equal(ad_gradient(with_external, &p, 2, x, &fx, g), AD_OK);
    assert_int_equal(p.out_id, 0u);
    assert_int_equal(p.vjps, 0);
    assert_same(g[0], 2.0);

    /* a record no seed reaches still runs (n = 0 too), in every sweep:
     * the gradient's and the second-order one (twice there: first lane) */
    p = (probe){1, 0, 0, 1, 0};
    assert_int_equal(ad_gradient(with_external, &p, 2, x, &fx, g), AD_OK);
    assert_int_equal(p.vjps, 2);
    double hv[2], v[2] = {1.0, 0.0};
    p = (probe){1, 0, 0, 1, 0};
    assert_int_equal(ad_hvp(with_external, &p, 2, x, v, &fx, g, hv), AD_OK);
    assert_true(p.vjps >= 4);
    assert_same(hv[0], 0.0);
    assert_same(hv[1], 1.0);
}

static void test_refused(void **state)
{
    (void)state;
    double fx, g[2];
    const double x[2] = {0.5, 2.0};
    probe p = {1, 0, 0, 0, 0};
    ad_csr H;
    memset(&H, 0, sizeof H);
    assert_int_equal(ad_sparse_hessian(with_external, &p, 2, x, &fx, g, &H), AD_ENOTSUP);
    ad_program *P = NULL;
    assert_int_equal(ad_program_record(with_external, &p, 2, x, &P), AD_ENOTSUP);
    assert_null(P);
    ad_real y[1], a[1] = {ad_const(1.0)};
    assert_int_equal(ad_external_collective(&sc_rule, NULL, 8, 1, 1, a, 1, y), AD_EINVAL);
    assert_true(isnan(y[0].v));
    assert_int_equal(ad_external_collective(NULL, NULL, 0, 1, 1, a, 1, y), AD_EINVAL);
    /* outside a recording: the primal on the values, constant */
    int vjps = 0;
    scale s = {2.0, &vjps};
    assert_int_equal(ad_external_collective(&sc_rule, &s, sizeof s, 1, 1, a, 1, y), AD_OK);
    assert_same(y[0].v, 2.0);
    assert_int_equal(y[0].id, 0u);
}

/* A loop in a loop's step: the outer loop's forward pass runs its steps
 * under a guard that records nothing, where the inner loop is not recorded
 * (no sweep takes a guard) even under a hook. */
static void id_step(size_t k, const ad_real *x, ad_real *y, size_t n, const ad_real *p, size_t np,
                    void *ctx)
{
    (void)k, (void)p, (void)np, (void)ctx;
    for (size_t i = 0; i < n; i++)
        y[i] = ad_mul(1.5, x[i]);
}

static void outer_step(size_t k, const ad_real *x, ad_real *y, size_t n, const ad_real *p,
                       size_t np, void *ctx)
{
    ad_real s[2] = {x[0], p[0]};
    (void)k, (void)n, (void)np, (void)ctx;
    status_unused(ad_checkpointed_loop(id_step, NULL, 2, 0, 2, s, 0, NULL, s));
    y[0] = ad_add(s[0], s[1]);
    y[1] = x[1];
}

static ad_real nested_loops(const ad_real *x, size_t n, void *ctx)
{
    ad_real out[2];
    (void)n, (void)ctx;
    status_unused(ad_checkpointed_loop(outer_step, NULL, 3, 0, 2, x, 1, x + 2, out));
    return ad_mul(out[0], out[1]);
}

static void test_nested_loops(void **state)
{
    (void)state;
    counter c = {0, 0, AD_OK};
    ad_collective hook = {agree, &c};
    double f0, g0[3], f1, g1[3];
    assert_int_equal(ad_gradient(nested_loops, NULL, 3, X, &f0, g0), AD_OK);
    (void)ad_set_collective(&hook);
    assert_int_equal(ad_gradient(nested_loops, NULL, 3, X, &f1, g1), AD_OK);
    (void)ad_set_collective(NULL);
    assert_memory_equal(&f0, &f1, sizeof f0);
    assert_memory_equal(g0, g1, sizeof g0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hook_calls),
        cmocka_unit_test(test_hook_fails),
        cmocka_unit_test(test_same_bits),
        cmocka_unit_test(test_external_collective),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_nested_loops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
