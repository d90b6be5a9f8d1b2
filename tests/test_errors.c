/* Every error path of ad_gradient: its status, NaN outputs, no crash, no
 * leak (run under AddressSanitizer/LeakSanitizer to see the last), and a
 * working library afterwards. */
#include <string.h>

#include "check.h"
#include "../lib/drivers/testing.h"

/* f(x) = sum_i x_i^2 + `extra` more records (multiplications by 1), with a
 * count of the calls.  Gradient 2x. */
typedef struct squares {
    long extra;
    int calls;
} squares;

static ad_real squares_objective(const ad_real *x, size_t n, void *ctx)
{
    squares *s = ctx;
    ad_real sum = ad_const(0.0);
    s->calls++;
    for (size_t i = 0; i < n; i++)
        sum = ad_add(sum, ad_mul(x[i], x[i]));
    for (long k = 0; k < s->extra; k++)
        sum = ad_mul(sum, 1.0);
    return sum;
}

/* Records of squares_objective (n >= 1): n products, n - 1 sums (the first
 * adds to a constant, so it takes the product's ID and records nothing) and
 * extra. */
static long squares_records(size_t n, long extra)
{
    return 2 * (long)n - 1 + extra;
}

static void check_squares_ok(size_t n, long extra)
{
    squares s = {extra, 0};
    double x[4] = {1.0, -2.0, 0.5, 3.0}, g[4];
    assert_true(n <= 4);
    double fx = gradient_ok(squares_objective, &s, n, x, g);
    double want = 0.0;
    for (size_t i = 0; i < n; i++) {
        want += x[i] * x[i];
        assert_same(g[i], 2 * x[i]);
    }
    assert_same(fx, want);
}

/* ---- invalid arguments ---- */

static void test_null_objective(void **state)
{
    double x[2] = {1, 2}, fx = 0, g[2] = {0, 0};
    (void)state;
    assert_int_equal(ad_gradient(NULL, NULL, 2, x, &fx, g), AD_EINVAL);
    assert_all_nan(fx, g, 2);
}

static void test_null_fx(void **state)
{
    squares s = {0, 0};
    double x[2] = {1, 2}, g[2] = {0, 0};
    (void)state;
    assert_int_equal(ad_gradient(squares_objective, &s, 2, x, NULL, g), AD_EINVAL);
    assert_nan(g[0]);
    assert_nan(g[1]);
    assert_int_equal(s.calls, 0);
}

static void test_null_x(void **state)
{
    squares s = {0, 0};
    double fx = 0, g[2] = {0, 0};
    (void)state;
    assert_int_equal(ad_gradient(squares_objective, &s, 2, NULL, &fx, g), AD_EINVAL);
    assert_all_nan(fx, g, 2);
    assert_int_equal(s.calls, 0);
}

static void test_null_grad(void **state)
{
    squares s = {0, 0};
    double x[2] = {1, 2}, fx = 0;
    (void)state;
    assert_int_equal(ad_gradient(squares_objective, &s, 2, x, &fx, NULL), AD_EINVAL);
    assert_nan(fx);
    assert_int_equal(s.calls, 0);
    /* With no inputs, x and grad may be NULL. */
    assert_int_equal(ad_gradient(squares_objective, &s, 0, NULL, &fx, NULL), AD_OK);
    assert_same(fx, 0.0);
}

static void test_stats_null(void **state)
{
    (void)state;
    assert_int_equal(ad_tape_stats_get(NULL), AD_EINVAL);
}

/* ---- the tape limit ---- */

static void check_limit(size_t n, long extra, ad_status want)
{
    squares s = {extra, 0};
    double x[4] = {1, 2, 3, 4}, fx = 0, g[4] = {0, 0, 0, 0};
    ad_status got = ad_gradient(squares_objective, &s, n, x, &fx, g);
    assert_int_equal(got, want);
    if (want != AD_OK)
        assert_all_nan(fx, g, n);
}

static void test_tape_limit(void **state)
{
    (void)state;
    assert_int_equal(ad_set_tape_limit(100), 0);  /* 0: no limit so far */
    check_limit(2, 100 - squares_records(2, 0), AD_OK);         /* exactly 100 records */
    check_limit(2, 100 - squares_records(2, 0) + 1, AD_ERANGE); /* 101 */
    check_limit(4, 1000000, AD_ERANGE);           /* far over */
    assert_int_equal(ad_set_tape_limit(0), 100);
    check_limit(4, 1000000, AD_OK);
    check_squares_ok(4, 10);
}

/* A limit that falls inside the second chunk. */
static void test_tape_limit_past_first_chunk(void **state)
{
    (void)state;
    ad_set_tape_limit(70000);
    check_limit(1, 70000 - squares_records(1, 0), AD_OK);
    check_limit(1, 70000 - squares_records(1, 0) + 1, AD_ERANGE);
    ad_set_tape_limit(0);
    check_limit(1, 70000, AD_OK);
}

/* The limit applies to each recording on its own, nested ones included. */
typedef struct limited_nest {
    long inner_extra;
    ad_status inner_status;
} limited_nest;

static ad_real limited_outer(const ad_real *x, size_t n, void *ctx)
{
    limited_nest *c = ctx;
    squares inner = {c->inner_extra, 0};
    double fx, g;
    double at = ad_value(x[0]);
    ad_real before = ad_mul(x[0], x[0]);
    (void)n;
    c->inner_status = ad_gradient(squares_objective, &inner, 1, &at, &fx, &g);
    return ad_mul(before, 3);  /* 3 x^2: 2 records */
}

static void test_tape_limit_is_per_recording(void **state)
{
    double x = 2.0, g;
    (void)state;
    ad_set_tape_limit(10);
    limited_nest c = {10 - squares_records(1, 0), AD_EINVAL};  /* inner: exactly 10 records */
    assert_same(gradient_ok(limited_outer, &c, 1, &x, &g), 12.0);
    assert_same(g, 12.0);
    assert_int_equal(c.inner_status, AD_OK);
    c.inner_extra++;                  /* inner: 11 records; outer unaffected */
    assert_same(gradient_ok(limited_outer, &c, 1, &x, &g), 12.0);
    assert_same(g, 12.0);
    assert_int_equal(c.inner_status, AD_ERANGE);
    ad_set_tape_limit(0);
}

/* ---- allocation failure ---- */

/* Long enough to need more than 16 chunks, so that the chunk table grows
 * too: every kind of tape allocation gets its turn to fail.  Chunks after
 * the fourth come four to an allocation (a slab). */
#define ALLOC_TEST_EXTRA (17 * 65536L)

/* Fails the i-th allocation for i = 0, 1, 2, ... until a call needs fewer.
 * With fresh set, every attempt starts from a released thread state;
 * otherwise each attempt inherits what the failed ones had allocated. */
static int count_failures_until_success(int fresh)
{
    const double x[3] = {1.0, -2.0, 0.5};
    int failures = 0;
    assert_int_equal(ad_release(), AD_OK);
    for (long i = 0;; i++) {
        squares s = {ALLOC_TEST_EXTRA, 0};
        double fx = 0, g[3] = {0, 0, 0};
        if (fresh)
            assert_int_equal(ad_release(), AD_OK);
        ad_test_fail_alloc_after(i);
        ad_status st = ad_gradient(squares_objective, &s, 3, x, &fx, g);
        ad_test_fail_alloc_after(-1);
        if (st == AD_OK) {
            assert_same(fx, 5.25);
            assert_same(g[1], -4.0);
            return failures;
        }
        assert_int_equal(st, AD_ENOMEM);
        assert_all_nan(fx, g, 3);
        failures++;
        assert_true(failures < 100);
    }
}

static void test_alloc_failure_fresh_state(void **state)
{
    (void)state;
    /* inputs, outputs, chunk table, chunks 0 to 3, 4 slabs of 4 chunks,
     * the larger table, cotangents */
    assert_true(count_failures_until_success(1) >= 13);
    check_squares_ok(4, ALLOC_TEST_EXTRA);
}

static void test_alloc_failure_kept_state(void **state)
{
    (void)state;
    assert_true(count_failures_until_success(0) >= 1);
    check_squares_ok(4, ALLOC_TEST_EXTRA);
}

/* The inner call of a nested pair runs out of memory; the outer one,
 * which already has its memory, is unaffected. */
typedef struct starved_nest {
    ad_status inner_status;
    double inner_fx, inner_grad;
} starved_nest;

static ad_real starving_outer(const ad_real *x, size_t n, void *ctx)
{
    starved_nest *c = ctx;
    squares inner = {0, 0};
    double at = ad_value(x[0]);
    ad_real before = ad_mul(x[0], x[0]);
    (void)n;
    ad_test_fail_alloc_after(0);
    c->inner_status = ad_gradient(squares_objective, &inner, 1, &at, &c->inner_fx, &c->inner_grad);
    ad_test_fail_alloc_after(-1);
    return ad_add(before, ad_mul(x[0], 3));
}

static void test_alloc_failure_in_nested_call(void **state)
{
    starved_nest c = {AD_OK, 0, 0};
    double x = 2.0, g;
    (void)state;
    assert_int_equal(ad_release(), AD_OK);  /* the inner tape must allocate */
    check_squares_ok(1, 0);                 /* the outer one has its memory */
    assert_same(gradient_ok(starving_outer, &c, 1, &x, &g), 10.0);
    assert_same(g, 7.0);
    assert_int_equal(c.inner_status, AD_ENOMEM);
    assert_nan(c.inner_fx);
    assert_nan(c.inner_grad);
}

/* ---- values from other recordings ---- */

/* Records `length` operations (multiplications by 1: adding a constant
 * would record nothing); then, with save set, saves and returns the result,
 * and without, returns the value saved by an earlier call. */
typedef struct smuggler {
    int save;
    long length;
    ad_real saved;
} smuggler;

static ad_real smuggle(const ad_real *x, size_t n, void *ctx)
{
    smuggler *s = ctx;
    ad_real v = x[0];
    (void)n;
    for (long k = 0; k < s->length; k++)
        v = ad_mul(v, 1.0);
    if (s->save)
        s->saved = v;
    return s->saved;
}

/* The saved value's ID is one past the later recording's last (the
 * boundary) or far past it. */
static void test_foreign_from_earlier_recording(void **state)
{
    static const long later_lengths[] = {999, 1};
    (void)state;
    for (size_t i = 0; i < 2; i++) {
        smuggler s = {1, 1000, {0, 0, 0}};
        double x = 1.0, fx, g;
        assert_same(gradient_ok(smuggle, &s, 1, &x, &g), 1.0);
        s.save = 0;
        s.length = later_lengths[i];
        assert_int_equal(ad_gradient(smuggle, &s, 1, &x, &fx, &g), AD_EFOREIGN);
        assert_all_nan(fx, &g, 1);
    }
    check_squares_ok(2, 0);
}

/* The inner objective returns a value of the outer recording. */
static ad_real returns_outer_value(const ad_real *x, size_t n, void *ctx)
{
    const ad_real *outer_value = ctx;
    (void)x, (void)n;
    return *outer_value;
}

typedef struct leak_up {
    ad_status inner_status;
    double inner_fx, inner_grad;
} leak_up;

static ad_real outer_lends_value(const ad_real *x, size_t n, void *ctx)
{
    leak_up *c = ctx;
    ad_real v = x[0];
    double at = ad_value(x[0]);
    (void)n;
    for (int k = 0; k < 1000; k++)
        v = ad_mul(v, 1.0);
    c->inner_status = ad_gradient(returns_outer_value, &v, 1, &at, &c->inner_fx, &c->inner_grad);
    return v;
}

static void test_foreign_from_outer_recording(void **state)
{
    leak_up c = {AD_OK, 0, 0};
    double x = 1.0, g;
    (void)state;
    assert_same(gradient_ok(outer_lends_value, &c, 1, &x, &g), 1.0);
    assert_same(g, 1.0);
    assert_int_equal(c.inner_status, AD_EFOREIGN);
    assert_nan(c.inner_fx);
    assert_nan(c.inner_grad);
}

/* ---- ad_release while recording ---- */

static ad_real releases(const ad_real *x, size_t n, void *ctx)
{
    ad_status *release_status = ctx;
    ad_real y = ad_mul(x[0], x[0]);
    (void)n;
    *release_status = ad_release();
    return ad_mul(y, x[0]);
}

static void test_release_inside_objective(void **state)
{
    ad_status release_status = AD_OK;
    double x = 2.0, g;
    (void)state;
    assert_same(gradient_ok(releases, &release_status, 1, &x, &g), 8.0);
    assert_same(g, 12.0);  /* the recording survived the refused release */
    assert_int_equal(release_status, AD_EBUSY);
    assert_int_equal(ad_release(), AD_OK);
}

/* ---- nesting depth ---- */

#define LEVELS (AD_MAX_NESTING + 1)

/* Level L computes x^2 + L x + (level L+1's value, as a constant): its
 * gradient is 2x + L, its value sum_{k=L}^{16} (x^2 + k x).  Each level
 * records before and after calling the next. */
typedef struct tower {
    int level;  /* of the objective now running */
    ad_status status[LEVELS + 1];
    double fx[LEVELS + 1], grad[LEVELS + 1];
} tower;

static ad_real tower_level(const ad_real *x, size_t n, void *ctx)
{
    tower *t = ctx;
    int level = ++t->level;
    double at = ad_value(x[0]);
    ad_real square = ad_mul(x[0], x[0]);
    (void)n;
    t->status[level + 1] = ad_gradient(tower_level, t, 1, &at, &t->fx[level + 1], &t->grad[level + 1]);
    double deeper = t->status[level + 1] == AD_OK ? t->fx[level + 1] : 0.0;
    t->level = level - 1;
    return ad_add(ad_add(square, ad_mul(level, x[0])), deeper);
}

static void test_nesting_too_deep(void **state)
{
    tower t = {0, {AD_OK}, {0}, {0}};
    double x = 0.5;
    (void)state;
    t.status[1] = ad_gradient(tower_level, &t, 1, &x, &t.fx[1], &t.grad[1]);
    for (int level = 1; level <= AD_MAX_NESTING; level++) {
        double want = 0.0;
        for (int k = level; k <= AD_MAX_NESTING; k++)
            want += x * x + k * x;
        assert_int_equal(t.status[level], AD_OK);
        assert_same(t.fx[level], want);
        assert_same(t.grad[level], 2 * x + level);
    }
    assert_int_equal(t.status[LEVELS], AD_ENESTING);
    assert_all_nan(t.fx[LEVELS], &t.grad[LEVELS], 1);
    check_squares_ok(3, 0);  /* the depth count is back at 0 */
}

/* ---- messages ---- */

static void test_strerror(void **state)
{
    static const ad_status all[] = {AD_OK,        AD_EINVAL,   AD_ENOMEM,
                                    AD_ERANGE,    AD_ENESTING, AD_EFOREIGN,
                                    AD_EBUSY,     AD_ENOTSUP,  AD_ENONFINITE,
                                    AD_ESTRUCTURE, AD_EOVERFLOW, AD_EBRANCH,
                                    AD_ENOTPOSDEF, AD_ECOMM};
    enum { COUNT = sizeof all / sizeof all[0] };
    (void)state;
    for (int i = 0; i < COUNT; i++) {
        const char *m = ad_strerror(all[i]);
        assert_non_null(m);
        assert_true(strlen(m) > 0);
        for (int j = 0; j < i; j++)
            assert_string_not_equal(m, ad_strerror(all[j]));
    }
    assert_non_null(ad_strerror((ad_status)99));
    assert_true(strlen(ad_strerror((ad_status)99)) > 0);
    assert_non_null(ad_strerror((ad_status)-1));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_objective),
        cmocka_unit_test(test_null_fx),
        cmocka_unit_test(test_null_x),
        cmocka_unit_test(test_null_grad),
        cmocka_unit_test(test_stats_null),
        cmocka_unit_test(test_tape_limit),
        cmocka_unit_test(test_tape_limit_past_first_chunk),
        cmocka_unit_test(test_tape_limit_is_per_recording),
        cmocka_unit_test(test_alloc_failure_fresh_state),
        cmocka_unit_test(test_alloc_failure_kept_state),
        cmocka_unit_test(test_alloc_failure_in_nested_call),
        cmocka_unit_test(test_foreign_from_earlier_recording),
        cmocka_unit_test(test_foreign_from_outer_recording),
        cmocka_unit_test(test_release_inside_objective),
        cmocka_unit_test(test_nesting_too_deep),
        cmocka_unit_test(test_strerror),
    };
    return cmocka_run_group_tests_name("errors", tests, NULL, NULL);
}
