/* Values know their recording: a value of an earlier call, of another
 * thread, or of another nesting level, used in an operation, a primitive,
 * a recorded matrix, an external function or returned as an output, fails
 * the recording with AD_EFOREIGN; every output is then NaN, and the next
 * call on the thread is right.  Constants belong to every recording. */
#include <pthread.h>
#include <string.h>

#include "check.h"

/* ---- the example: a cached exp(x1) ---- */

typedef struct cache {
    int filled;
    ad_real e;
} cache;

/* f = x0^2 + exp(x1) x0 ... with exp(x1) computed on the first call only. */
static ad_real cached_exp(const ad_real *x, size_t n, void *ctx)
{
    cache *c = ctx;
    (void)n;
    if (!c->filled) {
        c->e = ad_exp(x[1]);
        c->filled = 1;
    }
    return ad_add(ad_mul(x[0], x[0]), ad_mul(c->e, x[0]));
}

static ad_real fresh_exp(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_add(ad_mul(x[0], x[0]), ad_mul(ad_exp(x[1]), x[0]));
}

/* f = x0^2 + e^x1 x0 at (2, 0.5): df/dx0 = 2 x0 + e^x1, df/dx1 = e^x1 x0. */
static void check_fresh(void)
{
    const double x[2] = {2.0, 0.5};
    double fx, g[2];
    assert_int_equal(ad_gradient(fresh_exp, NULL, 2, x, &fx, g), AD_OK);
    assert_near(g[0], 4.0 + exp(0.5), 1e-15, 0.0);
    assert_near(g[1], 2.0 * exp(0.5), 1e-15, 0.0);
}

static void test_cached_value_of_earlier_call(void **state)
{
    const double x[2] = {2.0, 0.5};
    double fx, g[2];
    cache c = {0, ad_const(0.0)};
    (void)state;
    assert_int_equal(ad_gradient(cached_exp, &c, 2, x, &fx, g), AD_OK);
    assert_near(g[0], 4.0 + exp(0.5), 1e-15, 0.0);
    assert_int_equal(ad_gradient(cached_exp, &c, 2, x, &fx, g), AD_EFOREIGN);
    assert_all_nan(fx, g, 2);
    check_fresh();
}

/* The same through every driver that records f. */
static void cached_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = cached_exp(x, n, ctx);
    y[1] = ad_mul(x[0], x[1]);
}

static void expect_nan(const double *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_nan(p[i]);
}

static void test_cached_value_every_driver(void **state)
{
    const double x[2] = {2.0, 0.5}, v[2] = {1.0, 1.0}, w[2] = {1.0, 1.0};
    double y[2], out[4], fx, g[2], h[4];
    ad_csr J;
    ad_linear *L = NULL;
    (void)state;
    for (int driver = 0; driver < 7; driver++) {
        cache c = {0, ad_const(0.0)};
        double first[2];
        assert_int_equal(ad_gradient(cached_exp, &c, 2, x, &fx, first), AD_OK);
        ad_status s;
        size_t outs = 2;
        switch (driver) {
        case 0: s = ad_jvp(cached_fn, &c, 2, x, v, 2, y, out); break;
        case 1: s = ad_vjp(cached_fn, &c, 2, x, 2, w, y, out); break;
        case 2: s = ad_jacobian(cached_fn, &c, 2, x, 2, y, out); outs = 4; break;
        case 3:
            s = ad_sparse_jacobian(cached_fn, &c, 2, x, 2, y, &J);
            assert_int_equal(J.nnz, 0);
            outs = 0;
            break;
        case 4:
            s = ad_linearize(cached_fn, &c, 2, x, 2, y, &L);
            assert_null(L);
            outs = 0;
            break;
        case 5: s = ad_hvp(cached_exp, &c, 2, x, v, &fx, g, out); break;
        default: s = ad_hessian(cached_exp, &c, 2, x, &fx, g, h); break;
        }
        assert_int_equal(s, AD_EFOREIGN);
        if (driver >= 5) {
            expect_nan(&fx, 1);
            expect_nan(g, 2);
            expect_nan(driver == 5 ? out : h, driver == 5 ? 2 : 4);
        } else {
            expect_nan(y, 2);
            expect_nan(out, outs);
        }
        check_fresh();
    }
}

/* ---- the stale value's ID: inside the new tape, or past its end ---- */

typedef struct stale {
    int save;
    long length;  /* records made before the stale value is used */
    ad_real saved;
} stale;

static ad_real uses_stale(const ad_real *x, size_t n, void *ctx)
{
    stale *s = ctx;
    ad_real v = x[0];
    (void)n;
    for (long k = 0; k < s->length; k++)
        v = ad_mul(v, 1.0);
    if (s->save) {
        s->saved = v;
        return v;
    }
    return ad_add(v, ad_sin(s->saved));  /* used as an argument, not returned */
}

static void test_stale_id_below_and_past_top(void **state)
{
    static const long later[] = {1, 999, 5000};
    (void)state;
    for (size_t i = 0; i < 3; i++) {
        stale s = {1, 1000, ad_const(0.0)};
        double x = 1.0, fx, g;
        assert_int_equal(ad_gradient(uses_stale, &s, 1, &x, &fx, &g), AD_OK);
        s.save = 0;
        s.length = later[i];
        assert_int_equal(ad_gradient(uses_stale, &s, 1, &x, &fx, &g), AD_EFOREIGN);
        assert_all_nan(fx, &g, 1);
        check_fresh();
    }
}

/* A value with the recording's tag but an ID it has not made yet (as a
 * value of a recording 2^32 recordings back could have) stays off the
 * tape: the check is a range, not only a tag compare. */
static ad_real forged_id(const ad_real *x, size_t n, void *ctx)
{
    ad_real y = ad_mul(x[0], x[0]), f = y;
    (void)n, (void)ctx;
    f.id += 1000;
    return ad_add(y, ad_mul(f, x[0]));
}

static void test_tag_right_id_unmade(void **state)
{
    double x = 3.0, fx, g;
    (void)state;
    assert_int_equal(ad_gradient(forged_id, NULL, 1, &x, &fx, &g), AD_EFOREIGN);
    assert_all_nan(fx, &g, 1);
    check_fresh();
}

/* ---- constants belong to every recording ---- */

typedef struct kept {
    int made;
    ad_real c[3];  /* ad_const, a value of plain arithmetic, a constant result */
} kept;

static ad_real uses_constants(const ad_real *x, size_t n, void *ctx)
{
    kept *k = ctx;
    (void)n;
    if (!k->made) {
        k->c[0] = ad_const(2.0);
        k->c[1] = ad_mul(ad_const(1.5), ad_const(2.0));  /* all-constant: a constant */
        k->c[2] = ad_sub(x[0], x[0]);
        k->c[2] = ad_mul(k->c[2], 0.0);
        k->c[2] = ad_const(ad_value(k->c[2]) + 1.0);
        k->made = 1;
    }
    ad_real s = ad_sum(3, k->c);
    return ad_add(ad_mul(s, x[0]), ad_dot(3, k->c, k->c));
}

static void test_constants_from_earlier_calls(void **state)
{
    kept k = {0, {ad_const(0), ad_const(0), ad_const(0)}};
    double x = 2.0, fx, g;
    (void)state;
    for (int call = 0; call < 3; call++) {
        assert_int_equal(ad_gradient(uses_constants, &k, 1, &x, &fx, &g), AD_OK);
        assert_same(g, 6.0);
        assert_same(fx, 12.0 + 14.0);
    }
}

/* A recording that failed leaves results of ID 0 that keep its tag: a
 * later recording takes them as constants in every position of a binary
 * operation (out of line: their key fails the inline check), and an
 * argument of another recording in either position is refused. */
typedef struct tagged {
    int phase;        /* 0: make the tagged constant; 1: use it; 2, 3: a foreign value first, second */
    ad_real c, other;
} tagged;

static ad_real tagged_constant(const ad_real *x, size_t n, void *ctx)
{
    tagged *k = ctx;
    (void)n;
    if (k->phase == 0) {
        ad_real v = x[0];
        for (int i = 0; i < 20; i++)
            v = ad_mul(v, x[0]);  /* past the tape limit: ID 0 from here */
        k->c = ad_mul(x[0], 2.0);
        return ad_add(v, k->c);
    }
    if (k->phase == 2)
        return ad_mul(k->other, x[0]);
    if (k->phase == 3)
        return ad_mul(x[0], k->other);
    /* 3 x^2 + c x + x c + (x - c) */
    ad_real sq = ad_mul(ad_mul(x[0], x[0]), 3.0);
    return ad_add(ad_add(sq, ad_mul(k->c, x[0])), ad_add(ad_mul(x[0], k->c), ad_sub(x[0], k->c)));
}

static void test_tagged_constant_either_position(void **state)
{
    tagged k = {0, ad_const(0), ad_const(0)};
    double x = 1.5, fx, g;
    (void)state;
    size_t old = ad_set_tape_limit(5);
    assert_int_equal(ad_gradient(tagged_constant, &k, 1, &x, &fx, &g), AD_ERANGE);
    ad_set_tape_limit(old);
    assert_int_equal(k.c.id, 0);
    assert_int_not_equal(k.c.tag, 0);
    double c = ad_value(k.c);
    assert_same(c, 3.0);
    k.phase = 1;
    assert_int_equal(ad_gradient(tagged_constant, &k, 1, &x, &fx, &g), AD_OK);
    assert_same(fx, 3.0 * x * x + 2.0 * c * x + (x - c));
    assert_same(g, 6.0 * x + 2.0 * c + 1.0);
    cache ce = {0, ad_const(0.0)};
    const double x2[2] = {2.0, 0.5};
    double g2[2];
    assert_int_equal(ad_gradient(cached_exp, &ce, 2, x2, &fx, g2), AD_OK);
    k.other = ce.e;
    for (k.phase = 2; k.phase <= 3; k.phase++) {
        assert_int_equal(ad_gradient(tagged_constant, &k, 1, &x, &fx, &g), AD_EFOREIGN);
        assert_all_nan(fx, &g, 1);
        check_fresh();
    }
}

/* ---- every kind of argument ---- */

static void foreign_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    (void)ctx, (void)n, (void)m;
    y[0] = 2.0 * x[0];
}

static void foreign_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                        const double *ybar, double *xbar)
{
    (void)ctx, (void)n, (void)x, (void)m, (void)y;
    xbar[0] = 2.0 * ybar[0];
}

typedef struct by_kind {
    int kind, save;
    ad_real saved[2];
} by_kind;

/* Uses saved (from an earlier call) as the argument of one kind of
 * operation; x stands in for the second argument where one is needed. */
static ad_real one_kind(const ad_real *x, size_t n, void *ctx)
{
    by_kind *b = ctx;
    (void)n;
    if (b->save) {
        b->saved[0] = ad_mul(x[0], x[1]);
        b->saved[1] = ad_exp(x[1]);
        return ad_add(b->saved[0], b->saved[1]);
    }
    ad_real a[2] = {x[0], b->saved[1]}, y[2], r = x[0];
    ad_mat M;
    const ad_rule rule = {foreign_primal, foreign_vjp, NULL, NULL};
    switch (b->kind) {
    case 0: r = ad_mul(x[0], b->saved[1]); break;
    case 1: r = ad_log(b->saved[1]); break;
    case 2: r = ad_hypot(b->saved[1], 1.0); break;
    case 3: r = ad_sum(2, a); break;
    case 4: r = ad_dot(2, a, x); break;
    case 5: r = ad_sqnorm(2, a); break;
    case 6: r = ad_prod(2, a); break;
    case 7: r = ad_logsumexp(2, a); break;
    case 8: {
        const double c[2] = {1.0, 2.0};
        r = ad_dot(2, a, c);
        break;
    }
    case 9:
        y[0] = x[0], y[1] = x[1];
        ad_axpy(2, 3.0, a, y);
        r = y[1];
        break;
    case 10:
        status_unused(ad_external(&rule, NULL, 2, a, 1, y));
        r = y[0];
        break;
    case 11: {
        const ad_real A[4] = {x[0], x[1], b->saved[1], x[0]};
        status_unused(ad_mat_record(2, 2, A, &M));
        ad_mat_vec(&M, x, y);
        r = y[0];
        break;
    }
    case 12: {
        const ad_real A[4] = {x[0], x[1], x[1], x[0]};
        status_unused(ad_mat_record(2, 2, A, &M));
        ad_mat_vec(&M, a, y);
        r = y[0];
        break;
    }
    case 13: {
        const double A[4] = {1, 2, 3, 4};
        status_unused(ad_mat_wrap(2, 2, A, &M));
        ad_mat_vec(&M, a, y);
        r = y[1];
        break;
    }
    default: r = b->saved[0]; break;  /* returned */
    }
    return ad_add(r, x[0]);
}

static void test_every_kind_of_argument(void **state)
{
    const double x[2] = {0.75, 0.5};
    (void)state;
    for (int kind = 0; kind <= 14; kind++) {
        by_kind b = {kind, 1, {ad_const(0), ad_const(0)}};
        double fx, g[2], v[2] = {1.0, -1.0}, hv[2];
        assert_int_equal(ad_gradient(one_kind, &b, 2, x, &fx, g), AD_OK);
        b.save = 0;
        assert_int_equal(ad_gradient(one_kind, &b, 2, x, &fx, g), AD_EFOREIGN);
        assert_all_nan(fx, g, 2);
        if (kind != 10) {  /* an external function without hvp has no second-order rule */
            assert_int_equal(ad_hvp(one_kind, &b, 2, x, v, &fx, g, hv), AD_EFOREIGN);
            expect_nan(hv, 2);
        }
        check_fresh();
    }
}

/* ---- nesting: a value of the outer recording inside the inner, and back ---- */

typedef struct levels {
    ad_real outer_value, inner_value;
    ad_status inner_status;
    double inner_fx, inner_g;
    int inner_leaks;  /* the inner objective hands a value of its own out */
} levels;

static ad_real inner_uses_outer(const ad_real *x, size_t n, void *ctx)
{
    levels *l = ctx;
    (void)n;
    l->inner_value = ad_mul(x[0], x[0]);
    if (l->inner_leaks)
        return l->inner_value;
    return ad_mul(x[0], l->outer_value);  /* the outer value as an argument */
}

static ad_real outer_calls_inner(const ad_real *x, size_t n, void *ctx)
{
    levels *l = ctx;
    double at = ad_value(x[0]);
    (void)n;
    l->outer_value = ad_mul(x[0], 3.0);
    l->inner_status = ad_gradient(inner_uses_outer, l, 1, &at, &l->inner_fx, &l->inner_g);
    if (l->inner_leaks)  /* the inner recording's value, in an outer operation */
        return ad_add(l->outer_value, ad_mul(l->inner_value, x[0]));
    return ad_add(l->outer_value, ad_const(l->inner_fx));
}

static void test_outer_value_in_inner_recording(void **state)
{
    levels l = {0};
    double x = 2.0, fx, g;
    (void)state;
    assert_int_equal(ad_gradient(outer_calls_inner, &l, 1, &x, &fx, &g), AD_OK);
    assert_int_equal(l.inner_status, AD_EFOREIGN);
    assert_nan(l.inner_fx);
    assert_nan(l.inner_g);
    assert_nan(fx);  /* the inner NaN, as a constant */
    assert_same(g, 3.0);
    check_fresh();
}

static void test_inner_value_in_outer_recording(void **state)
{
    levels l = {0};
    double x = 2.0, fx, g;
    (void)state;
    l.inner_leaks = 1;
    assert_int_equal(ad_gradient(outer_calls_inner, &l, 1, &x, &fx, &g), AD_EFOREIGN);
    assert_int_equal(l.inner_status, AD_OK);
    assert_same(l.inner_g, 4.0);
    assert_all_nan(fx, &g, 1);
    check_fresh();
}

/* ---- another thread's value ---- */

typedef struct across {
    ad_real value;      /* made by the first thread's recording */
    ad_status status;   /* the second thread's, using it */
    double fx, g;
    int check_ok;
} across;

static ad_real makes(const ad_real *x, size_t n, void *ctx)
{
    across *a = ctx;
    (void)n;
    a->value = ad_mul(x[0], x[0]);
    return a->value;
}

static ad_real uses(const ad_real *x, size_t n, void *ctx)
{
    across *a = ctx;
    (void)n;
    return ad_mul(x[0], a->value);
}

static void *first_thread(void *p)
{
    double x = 2.0, fx, g;
    status_unused(ad_gradient(makes, p, 1, &x, &fx, &g));
    return NULL;
}

static void *second_thread(void *p)
{
    across *a = p;
    double x = 2.0, fx, g[2];
    const double x2[2] = {2.0, 0.5};
    a->status = ad_gradient(uses, a, 1, &x, &a->fx, &a->g);
    a->check_ok = ad_gradient(fresh_exp, NULL, 2, x2, &fx, g) == AD_OK &&
                  g[0] == 4.0 + exp(0.5);
    return NULL;
}

static void test_value_of_another_thread(void **state)
{
    across a = {ad_const(0), AD_OK, 0, 0, 0};
    pthread_t t;
    (void)state;
    assert_int_equal(pthread_create(&t, NULL, first_thread, &a), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_not_equal(a.value.id, 0);
    assert_int_equal(pthread_create(&t, NULL, second_thread, &a), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(a.status, AD_EFOREIGN);
    assert_all_nan(a.fx, &a.g, 1);
    assert_true(a.check_ok);
    /* and on this thread, a third */
    double x = 2.0, fx, g;
    assert_int_equal(ad_gradient(uses, &a, 1, &x, &fx, &g), AD_EFOREIGN);
    check_fresh();
}

/* ---- a failure already recorded stays the one reported ---- */

static ad_real limit_then_foreign(const ad_real *x, size_t n, void *ctx)
{
    const ad_real *stale_value = ctx;
    ad_real v = x[0];
    (void)n;
    for (int k = 0; k < 100; k++)
        v = ad_mul(v, x[0]);
    return ad_mul(v, *stale_value);
}

static void test_first_error_sticks(void **state)
{
    cache c = {0, ad_const(0.0)};
    const double x2[2] = {2.0, 0.5};
    double x = 1.0, fx, g[2];
    (void)state;
    assert_int_equal(ad_gradient(cached_exp, &c, 2, x2, &fx, g), AD_OK);
    size_t old = ad_set_tape_limit(10);
    assert_int_equal(ad_gradient(limit_then_foreign, &c.e, 1, &x, &fx, g), AD_ERANGE);
    ad_set_tape_limit(old);
    check_fresh();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cached_value_of_earlier_call),
        cmocka_unit_test(test_cached_value_every_driver),
        cmocka_unit_test(test_stale_id_below_and_past_top),
        cmocka_unit_test(test_tag_right_id_unmade),
        cmocka_unit_test(test_constants_from_earlier_calls),
        cmocka_unit_test(test_tagged_constant_either_position),
        cmocka_unit_test(test_every_kind_of_argument),
        cmocka_unit_test(test_outer_value_in_inner_recording),
        cmocka_unit_test(test_inner_value_in_outer_recording),
        cmocka_unit_test(test_value_of_another_thread),
        cmocka_unit_test(test_first_error_sticks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
