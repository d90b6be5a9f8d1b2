/* ad_dot and ad_sum: one n-ary record each, a run of argument slots (two
 * arguments per slot) under a header slot.  Runs may cross chunk boundaries
 * and be longer than a chunk; arguments may be constants or repeat.
 *
 * The sample values are small dyadic numbers and the expected values are
 * summed in the same order as the library sums them, so checks are exact. */
#include "check.h"
#include "../lib/drivers/testing.h"

#define CHUNK 65536L
#define MAX_N 200000

#define IS_DOUBLE(e) _Generic((e), double: 1, default: 0)
#define IS_AD(e) _Generic((e), ad_real: 1, default: 0)

/* The objective: `pad` multiplications by 1 of x[0] first, to place the run
 * on the tape, then dot(x[0..n), x[n..2n)) or sum(x[0..n)). */
typedef struct nary {
    enum { DOT, SUM } kind;
    size_t n;
    long pad;
} nary;

static ad_real nary_objective(const ad_real *x, size_t n_inputs, void *ctx)
{
    const nary *c = ctx;
    static ad_real args[2 * MAX_N];  /* tests run on one thread */
    (void)n_inputs;
    ad_real first = x[0];
    for (long k = 0; k < c->pad; k++)
        first = ad_mul(first, 1.0);
    args[0] = first;
    for (size_t i = 1; i < (c->kind == DOT ? 2 * c->n : c->n); i++)
        args[i] = x[i];
    return c->kind == DOT ? ad_dot(c->n, args, args + c->n) : ad_sum(c->n, args);
}

static double value_at(size_t i)
{
    return (double)((long)(i % 13) - 6) * 0.25;
}

/* Runs nary_objective and checks value and gradient exactly. */
static void check_nary(nary c)
{
    static double x[2 * MAX_N], g[2 * MAX_N];
    size_t inputs = c.kind == DOT ? 2 * c.n : c.n;
    double want = 0.0;
    for (size_t i = 0; i < inputs; i++)
        x[i] = value_at(i);
    for (size_t i = 0; i < c.n; i++)
        want += c.kind == DOT ? x[i] * x[c.n + i] : x[i];
    assert_same(gradient_ok(nary_objective, &c, inputs, x, g), want);
    for (size_t i = 0; i < inputs; i++) {
        double d = c.kind == SUM ? 1.0 : i < c.n ? x[c.n + i] : x[i - c.n];
        if (!same_double(g[i], d)) {
            print_error("n=%zu pad=%ld: grad[%zu] = %g, expected %g\n", c.n, c.pad, i, g[i], d);
            fail();
        }
    }
}

static void test_small_sizes(void **state)
{
    (void)state;
    for (size_t n = 1; n <= 9; n++) {
        check_nary((nary){DOT, n, 0});
        check_nary((nary){SUM, n, 0});
        check_nary((nary){DOT, n, 3});
        check_nary((nary){SUM, n, 3});
    }
}

/* The run starts at every offset from 12 slots before a chunk boundary to
 * just past it, so that the boundary falls inside the run, right after it,
 * or between the run and its header. */
static void test_run_across_chunk_boundary(void **state)
{
    (void)state;
    for (long before = -2; before <= 12; before++) {
        long pad = CHUNK - before;  /* the run starts at record index pad */
        check_nary((nary){DOT, 7, pad});
        check_nary((nary){SUM, 13, pad});
        check_nary((nary){DOT, 2, pad});
    }
}

static void test_run_longer_than_chunk(void **state)
{
    (void)state;
    check_nary((nary){DOT, MAX_N, 0});
    check_nary((nary){SUM, MAX_N, 5});
    check_nary((nary){SUM, 2 * CHUNK, 0});  /* exactly one chunk of slots */
}

/* ---- repeated and constant arguments ---- */

/* dot(x, x) over x[0..n) and sum(x0, x0, ..., x1, c, c): gradients 2x and
 * (count of x0, 1); constants take no part. */
static ad_real dot_self(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    return ad_dot(n, x, x);
}

static ad_real sum_repeated(const ad_real *x, size_t n, void *ctx)
{
    ad_real args[10];
    (void)n, (void)ctx;
    for (int i = 0; i < 7; i++)
        args[i] = x[0];
    args[7] = x[1];
    args[8] = ad_const(2.5);
    args[9] = ad_const(-1.0);
    return ad_sum(10, args);
}

static void test_repeated_and_constant_arguments(void **state)
{
    const double x[3] = {1.5, -2.0, 0.25};
    double g[3];
    (void)state;
    assert_same(gradient_ok(dot_self, NULL, 3, x, g), 1.5 * 1.5 + 4.0 + 0.0625);
    for (int i = 0; i < 3; i++)
        assert_same(g[i], 2 * x[i]);
    assert_same(gradient_ok(sum_repeated, NULL, 2, x, g), 7 * 1.5 - 2.0 + 2.5 - 1.0);
    assert_same(g[0], 7.0);
    assert_same(g[1], 1.0);
}

/* A dot product with one active element is an ordinary record. */
static ad_real dot_one_active(const ad_real *x, size_t n, void *ctx)
{
    ad_real a[3] = {ad_const(1.0), x[0], ad_const(3.0)};
    ad_real b[3] = {ad_const(4.0), ad_const(5.0), ad_const(6.0)};
    (void)n, (void)ctx;
    return ad_dot(3, a, b);
}

static void test_one_active_argument(void **state)
{
    double x = 2.0, g;
    (void)state;
    assert_same(gradient_ok(dot_one_active, NULL, 1, &x, &g), 4.0 + 10.0 + 18.0);
    assert_same(g, 5.0);
}

/* All arguments constant: a constant result, and, as for the scalar
 * operations, nothing recorded, however long the array. */
static ad_real sum_constants(const ad_real *x, size_t n, void *ctx)
{
    static ad_real args[3 * CHUNK];
    const size_t *count = ctx;
    (void)n;
    for (size_t i = 0; i < *count; i++)
        args[i] = ad_const(0.5);
    return ad_add(ad_mul(x[0], 2), ad_sum(*count, args));
}

static void test_constant_arguments_record_nothing(void **state)
{
    static const size_t counts[] = {1, 2, 1000, 3 * CHUNK};
    double x = 1.0, g;
    ad_tape_stats st;
    (void)state;
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        size_t count = counts[i];
        assert_same(gradient_ok(sum_constants, &count, 1, &x, &g), 2.0 + 0.5 * (double)count);
        assert_same(g, 2.0);
        assert_int_equal(ad_tape_stats_get(&st), AD_OK);
        assert_int_equal(st.records, 1);  /* x * 2; adding a constant records nothing */
    }
}

/* So a tape limit that fits the active records is enough. */
static void test_constant_arguments_within_tape_limit(void **state)
{
    size_t count = 1000;
    double x = 1.0, fx, g;
    (void)state;
    ad_set_tape_limit(10);
    ad_status s = ad_gradient(sum_constants, &count, 1, &x, &fx, &g);
    ad_set_tape_limit(0);
    assert_int_equal(s, AD_OK);
    assert_same(fx, 502.0);
    assert_same(g, 2.0);
}

/* ---- plain doubles ---- */

static void test_plain_double_forms(void **state)
{
    double a[5] = {1, 2, 3, 4, 5}, b[5] = {0.5, -1, 2, 0, 1};
    const double *ca = a;
    ad_real r[2] = {{1, 0, 0}, {2, 0, 0}};
    const ad_real *cr = r;
    (void)state;
    assert_true(IS_DOUBLE(ad_dot(5, a, b)));
    assert_true(IS_DOUBLE(ad_dot(5, ca, b)));
    assert_true(IS_DOUBLE(ad_sum(5, a)));
    assert_true(IS_AD(ad_dot(2, r, r)));
    assert_true(IS_AD(ad_dot(2, cr, cr)));
    assert_true(IS_AD(ad_sum(2, cr)));
    assert_same(ad_dot(5, a, b), 0.5 - 2 + 6 + 0 + 5);
    assert_same(ad_sum(5, ca), 15.0);
    assert_same(ad_sum(0, a), 0.0);
    assert_same(ad_dot(0, a, b), 0.0);
}

/* ---- errors ---- */

static void check_nary_fails(nary c, ad_status want)
{
    static double x[2 * MAX_N], g[2 * MAX_N];
    size_t inputs = c.kind == DOT ? 2 * c.n : c.n;
    double fx = 0;
    for (size_t i = 0; i < inputs; i++)
        x[i] = 1.0;
    assert_int_equal(ad_gradient(nary_objective, &c, inputs, x, &fx, g), want);
    assert_all_nan(fx, g, inputs);
}

/* dot of n = 10 takes 10 slots and a header. */
static void test_tape_limit(void **state)
{
    (void)state;
    ad_set_tape_limit(11);
    check_nary((nary){DOT, 10, 0});
    check_nary_fails((nary){DOT, 11, 0}, AD_ERANGE);
    check_nary_fails((nary){DOT, 10, 1}, AD_ERANGE);
    ad_set_tape_limit(CHUNK + 5);
    check_nary((nary){DOT, 100, CHUNK - 96});  /* pad + 100 slots + header */
    check_nary_fails((nary){DOT, 100, CHUNK - 95}, AD_ERANGE);
    ad_set_tape_limit(0);
    check_nary((nary){DOT, 100, CHUNK});
}

/* Allocation failure while a long run opens its chunks. */
static void test_alloc_failure(void **state)
{
    static double x[2 * MAX_N], g[2 * MAX_N];
    (void)state;
    for (size_t k = 0; k < 2 * MAX_N; k++)
        x[k] = 1.0;
    for (long i = 0;; i++) {
        nary c = {DOT, MAX_N, 0};
        double fx = 0;
        assert_int_equal(ad_release(), AD_OK);
        ad_test_fail_alloc_after(i);
        ad_status s = ad_gradient(nary_objective, &c, 2 * MAX_N, x, &fx, g);
        ad_test_fail_alloc_after(-1);
        if (s == AD_OK)
            break;
        assert_int_equal(s, AD_ENOMEM);
        assert_all_nan(fx, g, 2 * MAX_N);
        assert_true(i < 50);
    }
    check_nary((nary){DOT, MAX_N, 0});
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_sizes),
        cmocka_unit_test(test_run_across_chunk_boundary),
        cmocka_unit_test(test_run_longer_than_chunk),
        cmocka_unit_test(test_repeated_and_constant_arguments),
        cmocka_unit_test(test_one_active_argument),
        cmocka_unit_test(test_constant_arguments_record_nothing),
        cmocka_unit_test(test_constant_arguments_within_tape_limit),
        cmocka_unit_test(test_plain_double_forms),
        cmocka_unit_test(test_tape_limit),
        cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests_name("n-ary records", tests, NULL, NULL);
}
