/* AD_CHECK_FINITE inside a checkpointed loop and a sum: the fault names the
 * operation inside the step or the term, the step k and the term i, in the
 * forward pass and in the sweeps' replays, on one thread and on two; and a
 * label (ad_where) lasts as long as the call that set it, the steps'
 * replays keeping the one the loop was recorded under. */
#include <string.h>

#include "check.h"

/* ---- a loop whose step 3 takes log(0) ----
 *
 * State (s, l): s' = s - 1, l' = log(s) + l, from s = 3: step 3 takes the
 * log of 0.  With `grow`, step k multiplies instead by 1e-300, 1e300,
 * 1e300, ...: every value is finite (1e-300, 1, 1e300) and the cotangent of
 * step 1's input is 1e600. */
typedef struct looped {
    int grow;
    size_t steps, snaps;
} looped;

static void step(size_t k, const ad_real *x, ad_real *y, size_t n, const ad_real *p, size_t np,
                 void *ctx)
{
    const looped *lp = ctx;
    (void)n, (void)p, (void)np;
    if (lp->grow) {  /* under the label the loop was recorded under */
        y[0] = ad_mul(x[0], k == 0 ? 1e-300 : 1e300);
        y[1] = x[1];
        return;
    }
    ad_where("inside a step");  /* ends with the step */
    y[0] = ad_sub(x[0], 1.0);
    y[1] = ad_add(ad_log(x[0]), x[1]);
}

static ad_real loop_objective(const ad_real *x, size_t n, void *ctx)
{
    const looped *lp = ctx;
    ad_real s[2] = {x[0], x[1]}, e[2];
    (void)n;
    ad_where("the loop");
    ad_status st = ad_checkpointed_loop(step, ctx, lp->steps, lp->snaps, 2, s, 0, NULL, e);
    ad_where("after the loop");  /* not the steps' label in a sweep's replays */
    if (st != AD_OK)
        return ad_const(NAN);
    return ad_add(e[0], e[1]);
}

static void expect_fault(const char *op, ad_phase phase, int64_t step_k, int64_t term,
                         const char *label)
{
    ad_fault f;
    memset(&f, 0, sizeof f);
    assert_int_equal(ad_last_fault(&f), AD_OK);
    assert_non_null(f.op);
    assert_string_equal(f.op, op);
    assert_int_equal(f.phase, phase);
    assert_true(f.step == step_k);
    assert_true(f.term == term);
    if (label) {
        assert_non_null(f.label);
        assert_string_equal(f.label, label);
    } else {
        assert_null(f.label);
    }
}

static void test_loop_step_named(void **state)
{
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    const double x[2] = {3.0, 0.0};
    double fx, g[2];
    for (size_t snaps = 0; snaps < 3; snaps++) {
        looped lp = {0, 6, snaps};
        assert_int_equal(ad_gradient(loop_objective, &lp, 2, x, &fx, g), AD_ENONFINITE);
        assert_all_nan(fx, g, 2);
        /* log of 0 at step 3, under the step's own label */
        expect_fault("log", AD_PHASE_RECORD, 3, -1, "inside a step");
        /* three steps: no fault, and the value is the closed form */
        lp.steps = 3;
        assert_int_equal(ad_gradient(loop_objective, &lp, 2, x, &fx, g), AD_OK);
        assert_same(fx, 0.0 + log(3.0) + log(2.0) + log(1.0));
        assert_near(g[0], 1.0 + 1.0 / 3.0 + 1.0 / 2.0 + 1.0, 1e-15, 0.0);
        assert_int_equal(ad_last_fault(NULL), AD_EINVAL);
    }
    ad_set_checks(old);
}

static void test_loop_sweep_named(void **state)
{
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    const double x[2] = {1.0, 0.0};
    double fx, g[2];
    looped lp = {1, 3, 1};
    ad_where("set outside, before the call");
    assert_int_equal(ad_gradient(loop_objective, &lp, 2, x, &fx, g), AD_ENONFINITE);
    /* the cotangent of step 1's input overflows in the loop's own sweep,
     * whose replay of the step runs under the loop's label, not under the
     * one in force when the sweep runs */
    ad_fault f;
    assert_int_equal(ad_last_fault(&f), AD_OK);
    assert_int_equal(f.phase, AD_PHASE_REVERSE);
    assert_true(f.step == 1);
    assert_true(f.term == -1);
    assert_non_null(f.label);
    assert_string_equal(f.label, "the loop");
    /* the objective's labels ended with it: the caller's is back */
    lp.steps = 1;
    assert_int_equal(ad_gradient(loop_objective, &lp, 2, x, &fx, g), AD_OK);
    ad_where(NULL);
    ad_set_checks(old);
}

/* ---- a sum whose term 11 takes log(0), or whose term 11 overflows in
 * the sweep ---- */

typedef struct summed {
    int grow;
    size_t bad;
} summed;

static ad_real term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    const summed *s = ctx;
    (void)n;
    ad_where("a term");
    ad_real r;
    if (i != s->bad)
        r = ad_mul(x[0], (double)i);
    else if (s->grow)  /* values 1e-300, 1, 1e300; the cotangent of the first 1e600 */
        r = ad_mul(ad_mul(ad_mul(x[0], 1e-300), 1e300), 1e300);
    else
        r = ad_log(ad_sub(x[0], 1.0));
    ad_where(NULL);
    return r;
}

static void test_sum_term_named(void **state)
{
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    const double x[1] = {1.0};
    double fx, g[1];
    size_t small = ad_set_sum_chunk_bytes(1);  /* the smallest chunks, then the default's */
    for (int chunks = 0; chunks < 2; chunks++) {
        for (unsigned threads = 1; threads <= 2; threads++) {
            summed s = {0, 11};
            assert_int_equal(ad_gradient_sum(term, &s, 40, 1, x, &fx, g, threads), AD_ENONFINITE);
            assert_nan(fx);
            assert_nan(g[0]);
            expect_fault("log", AD_PHASE_RECORD, -1, 11, "a term");
            s.grow = 1;
            assert_int_equal(ad_gradient_sum(term, &s, 40, 1, x, &fx, g, threads), AD_ENONFINITE);
            expect_fault("mul", AD_PHASE_REVERSE, -1, 11, "a term");
            /* no bad term: the closed form */
            s.bad = 40;
            assert_int_equal(ad_gradient_sum(term, &s, 40, 1, x, &fx, g, threads), AD_OK);
            assert_same(g[0], 780.0);
        }
        ad_set_sum_chunk_bytes(small);
    }
    ad_set_checks(old);
}

/* A loop inside a term: both named.  The loop's ctx outlives the term,
 * as the chunk's sweep replays the steps after the term has returned. */
static ad_real term_with_loop(size_t i, const ad_real *x, size_t n, void *ctx)
{
    static const looped short_loop = {0, 2, 0}, long_loop = {0, 5, 0};
    const size_t *bad = ctx;
    ad_real in[2] = {ad_add(x[0], 2.0), x[0]};
    return loop_objective(in, n, (void *)(uintptr_t)(i == *bad ? &long_loop : &short_loop));
}

static void test_loop_in_term_named(void **state)
{
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    const double x[1] = {1.0};
    double fx, g[1];
    size_t bad = 6;
    for (unsigned threads = 1; threads <= 2; threads++) {
        assert_int_equal(ad_gradient_sum(term_with_loop, &bad, 9, 1, x, &fx, g, threads),
                         AD_ENONFINITE);
        expect_fault("log", AD_PHASE_RECORD, 3, 6, "inside a step");
    }
    ad_set_checks(old);
}

/* A label set by an objective ends with it: the next call's fault, made
 * with no label in force, names none. */
static ad_real labelled(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_where("left by the last call");
    return ad_log(x[0]);
}

static ad_real unlabelled(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_log(x[0]);
}

static void test_label_lifetime(void **state)
{
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    double x = 2.0, fx, g;
    assert_int_equal(ad_gradient(labelled, NULL, 1, &x, &fx, &g), AD_OK);
    x = 0.0;
    assert_int_equal(ad_gradient(unlabelled, NULL, 1, &x, &fx, &g), AD_ENONFINITE);
    expect_fault("log", AD_PHASE_RECORD, -1, -1, NULL);
    ad_set_checks(old);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loop_step_named),
        cmocka_unit_test(test_loop_sweep_named),
        cmocka_unit_test(test_sum_term_named),
        cmocka_unit_test(test_loop_in_term_named),
        cmocka_unit_test(test_label_lifetime),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
