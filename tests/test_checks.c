/* AD_CHECK_FINITE: the first record that makes Inf or NaN from finite
 * numbers, or the first cotangent that overflows in the reverse sweep,
 * stops the call with AD_ENONFINITE, and ad_last_fault names the operation
 * and the label (ad_where).  Off, nothing changes; on, results that are
 * finite are bitwise those of an unchecked recording. */
#include <stdio.h>
#include <string.h>

#include "check.h"

/* ---- one faulty operation, chosen by ctx ---- */

enum { LOG_NEG, EXP_OVER, ZERO_DIV, PROD_NAN, SUM_OVER, DOT_OVER, EXT_PRIMAL, EXT_VJP, REVERSE,
       KINDS };

static void nan_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    const int *kind = ctx;
    (void)n, (void)m;
    y[0] = *kind == EXT_PRIMAL ? NAN : 2.0 * x[0];
}

static void nan_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                    const double *ybar, double *xbar)
{
    const int *kind = ctx;
    (void)n, (void)x, (void)m, (void)y;
    xbar[0] = *kind == EXT_VJP ? NAN : 2.0 * ybar[0];
}

static ad_real faulty(const ad_real *x, size_t n, void *ctx)
{
    const int *kind = ctx;
    ad_real a[3] = {ad_mul(x[0], 1e308), ad_mul(x[0], 1e308), ad_sub(x[0], 1.0)};
    const ad_rule rule = {nan_primal, nan_vjp, NULL, NULL};
    ad_real y[1], r;
    (void)n;
    ad_where("before");
    ad_real warm = ad_mul(x[0], x[1]);
    ad_where("the faulty part");
    switch (*kind) {
    case LOG_NEG: r = ad_log(ad_neg(x[0])); break;
    case EXP_OVER: r = ad_exp(ad_mul(x[0], 1000.0)); break;
    case ZERO_DIV: r = ad_div(ad_sub(x[0], 1.0), ad_sub(x[1], 2.0)); break;
    case PROD_NAN: r = ad_prod(3, a); break;  /* 1e308 1e308 0 = Inf 0 */
    case SUM_OVER: r = ad_sum(2, a); break;
    case DOT_OVER: r = ad_dot(2, a, a + 1); break;
    case EXT_PRIMAL:
    case EXT_VJP:
        status_unused(ad_external(&rule, (void *)kind, 1, x, 1, y));
        r = y[0];
        break;
    default:  /* values 1e-300, 1, 1e300; the cotangent of the first is 1e600 */
        r = ad_mul(ad_mul(ad_mul(x[0], 1e-300), 1e300), 1e300);
        break;
    }
    ad_where(NULL);
    return ad_add(r, warm);
}

typedef struct expected {
    const char *op;
    ad_phase phase;
    size_t nargs;
    double arg0;
} expected;

static const expected want[KINDS] = {
    [LOG_NEG] = {"log", AD_PHASE_RECORD, 1, -1.0},
    [EXP_OVER] = {"exp", AD_PHASE_RECORD, 1, 1000.0},
    [ZERO_DIV] = {"div", AD_PHASE_RECORD, 2, 0.0},
    [PROD_NAN] = {"ad_prod", AD_PHASE_RECORD, 0, NAN},
    [SUM_OVER] = {"ad_sum/ad_dot_rd", AD_PHASE_RECORD, 0, NAN},
    [DOT_OVER] = {"ad_dot", AD_PHASE_RECORD, 0, NAN},
    [EXT_PRIMAL] = {"external", AD_PHASE_RECORD, 0, NAN},
    [EXT_VJP] = {"external", AD_PHASE_REVERSE, 0, NAN},
    [REVERSE] = {"mul", AD_PHASE_REVERSE, 0, NAN},
};

/* x0 = 1, x1 = 2: every kind's fault happens at this point. */
static const double at[2] = {1.0, 2.0};

static void test_fault_named(void **state)
{
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    for (int kind = 0; kind < KINDS; kind++) {
        double fx, g[2];
        ad_fault f;
        memset(&f, 0, sizeof f);
        assert_int_equal(ad_gradient(faulty, &kind, 2, at, &fx, g), AD_ENONFINITE);
        assert_all_nan(fx, g, 2);
        assert_int_equal(ad_last_fault(&f), AD_OK);
        assert_string_equal(f.op, want[kind].op);
        assert_non_null(f.label);
        assert_string_equal(f.label, "the faulty part");
        assert_int_equal(f.phase, want[kind].phase);
        assert_int_equal(f.nargs, want[kind].nargs);
        if (want[kind].nargs)
            assert_same(f.arg[0], want[kind].arg0);
        assert_true(f.id > 2);
        if (f.phase == AD_PHASE_REVERSE)
            assert_true(f.target > 0 && f.target < f.id);
        else if (kind != EXT_PRIMAL)
            assert_false(isfinite(f.value) && isfinite(f.partial[0]) && isfinite(f.partial[1]));
        /* the next call is right */
        int fine = LOG_NEG;
        const double ok[2] = {-1.0, 2.0};
        assert_int_equal(ad_gradient(faulty, &fine, 2, ok, &fx, g), AD_OK);
        assert_same(g[0], -1.0 + 2.0);
        assert_int_equal(ad_last_fault(&f), AD_EINVAL);
    }
    assert_int_equal(ad_set_checks(old), AD_CHECK_FINITE);
}

/* Checks off (the default): the same calls return AD_OK with what the
 * arithmetic gives, and no fault is kept. */
static void test_off_by_default(void **state)
{
    ad_fault f;
    (void)state;
    assert_int_equal(ad_set_checks(0), 0);
    for (int kind = 0; kind < KINDS; kind++) {
        double fx, g[2];
        assert_int_equal(ad_gradient(faulty, &kind, 2, at, &fx, g), AD_OK);
        assert_int_equal(ad_last_fault(&f), AD_EINVAL);
    }
    assert_int_equal(ad_last_fault(NULL), AD_EINVAL);
}

/* A fault in the forward pass of the other drivers, which share it. */
static void faulty_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = faulty(x, n, ctx);
    y[1] = ad_mul(x[0], x[1]);
}

static void test_every_driver(void **state)
{
    const double v[2] = {1.0, 0.5}, w[2] = {1.0, 1.0};
    double y[2], out[4], fx, g[2], h[4];
    int kind = LOG_NEG;
    ad_csr J;
    ad_linear *L;
    ad_fault f;
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    assert_int_equal(ad_jvp(faulty_fn, &kind, 2, at, v, 2, y, out), AD_ENONFINITE);
    assert_int_equal(ad_vjp(faulty_fn, &kind, 2, at, 2, w, y, out), AD_ENONFINITE);
    assert_int_equal(ad_jacobian(faulty_fn, &kind, 2, at, 2, y, out), AD_ENONFINITE);
    assert_int_equal(ad_sparse_jacobian(faulty_fn, &kind, 2, at, 2, y, &J), AD_ENONFINITE);
    assert_int_equal(ad_linearize(faulty_fn, &kind, 2, at, 2, y, &L), AD_ENONFINITE);
    assert_int_equal(ad_hvp(faulty, &kind, 2, at, v, &fx, g, out), AD_ENONFINITE);
    assert_int_equal(ad_hessian(faulty, &kind, 2, at, &fx, g, h), AD_ENONFINITE);
    assert_int_equal(ad_last_fault(&f), AD_OK);
    assert_string_equal(f.op, "log");
    kind = REVERSE;
    assert_int_equal(ad_vjp(faulty_fn, &kind, 2, at, 2, w, y, out), AD_ENONFINITE);
    assert_int_equal(ad_last_fault(&f), AD_OK);
    assert_int_equal(f.phase, AD_PHASE_REVERSE);
    assert_string_equal(f.label, "the faulty part");
    /* a linearisation keeps its recording's checks */
    assert_int_equal(ad_linearize(faulty_fn, &kind, 2, at, 2, y, &L), AD_OK);
    ad_set_checks(0);
    double wj[2] = {0.0, 0.0};
    assert_int_equal(ad_linear_vjp(L, w, wj), AD_ENONFINITE);
    assert_nan(wj[0]);
    assert_nan(wj[1]);
    assert_int_equal(ad_last_fault(&f), AD_OK);
    assert_string_equal(f.op, "mul");
    ad_linear_free(L);
    ad_set_checks(old);
}

/* A tangent that overflows: x 1e300, then x 1e300 again, along v = 1e10. */
static void tangent_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    ad_where("growth");
    y[0] = ad_mul(ad_mul(ad_mul(x[0], 1e-300), 1e300), 1e300);
    ad_where(NULL);
}

static void test_tangent_overflow(void **state)
{
    const double x = 1.0, v = 1.0;
    double y, jv;
    ad_fault f;
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    assert_int_equal(ad_jvp(tangent_fn, NULL, 1, &x, &v, 1, &y, &jv), AD_OK);
    assert_same(jv, 1e300);
    const double big = 1e10;
    assert_int_equal(ad_jvp(tangent_fn, NULL, 1, &x, &big, 1, &y, &jv), AD_ENONFINITE);
    assert_nan(jv);
    assert_int_equal(ad_last_fault(&f), AD_OK);
    assert_string_equal(f.op, "mul");
    assert_string_equal(f.label, "growth");
    assert_int_equal(f.phase, AD_PHASE_TANGENT);
    assert_same(f.partial[0], 1e300);
    assert_int_equal(f.target, f.id);
    ad_set_checks(old);
}

/* ---- no false alarms: checked results are the unchecked ones ---- */

static ad_real busy(const ad_real *x, size_t n, void *ctx)
{
    ad_real s = ad_const(0.0), t[4] = {x[0], x[1], x[2], x[3]};
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        ad_real u = ad_sin(ad_mul(x[i], x[(i + 1) % n]));
        s = ad_add(s, ad_div(ad_exp(u), ad_add(ad_mul(x[i], x[i]), 1.0)));
        t[i % 4] = ad_hypot(u, x[i]);
    }
    s = ad_add(s, ad_logsumexp(4, t));
    s = ad_add(s, ad_dot(4, t, x));
    return ad_add(s, ad_prod(4, x));
}

static void test_checked_equals_unchecked(void **state)
{
    double x[6], fx[2], g[2][6], hv[2][6], v[6];
    uint64_t rng = 0xc4ec;
    (void)state;
    for (int i = 0; i < 6; i++) {
        x[i] = rng_uniform(&rng, -2.0, 2.0);
        v[i] = rng_uniform(&rng, -1.0, 1.0);
    }
    for (int on = 0; on < 2; on++) {
        unsigned old = ad_set_checks(on ? AD_CHECK_FINITE | AD_CHECK_TRACE : 0);
        assert_int_equal(ad_gradient(busy, NULL, 6, x, &fx[on], g[on]), AD_OK);
        assert_int_equal(ad_hvp(busy, NULL, 6, x, v, &fx[on], g[on], hv[on]), AD_OK);
        ad_set_checks(old);
    }
    assert_memory_equal(g[0], g[1], sizeof g[0]);
    assert_memory_equal(hv[0], hv[1], sizeof hv[0]);
    assert_memory_equal(&fx[0], &fx[1], sizeof fx[0]);
}

/* An infinite input is not the library's fault: nothing is reported. */
static ad_real logs(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_log(x[0]);
}

static void test_non_finite_inputs_not_faults(void **state)
{
    const double xs[3] = {INFINITY, NAN, -INFINITY};
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    for (int i = 0; i < 3; i++) {
        double fx, g;
        assert_int_equal(ad_gradient(logs, NULL, 1, &xs[i], &fx, &g), AD_OK);
    }
    ad_set_checks(old);
}

/* ---- pictures: names, values and labels ---- */

static size_t capture(ad_status (*print)(FILE *, size_t), char *buf, size_t size)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(print(f, 100), AD_OK);
    rewind(f);
    size_t len = fread(buf, 1, size - 1, f);
    buf[len] = 0;
    fclose(f);
    return len;
}

static void test_dump_and_dot_name_operations(void **state)
{
    static char buf[16384];
    int kind = LOG_NEG;
    const double ok[2] = {-1.0, 2.0};
    double fx, g[2];
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_TRACE);
    assert_int_equal(ad_gradient(faulty, &kind, 2, ok, &fx, g), AD_OK);
    ad_set_checks(old);
    capture(ad_tape_dump, buf, sizeof buf);
    assert_non_null(strstr(buf, " log "));
    assert_non_null(strstr(buf, " neg "));
    assert_non_null(strstr(buf, " mul "));
    capture(ad_tape_dot, buf, sizeof buf);
    assert_true(strncmp(buf, "digraph tape {", 14) == 0);
    assert_non_null(strstr(buf, ": log\\n= 0"));
    assert_non_null(strstr(buf, "[the faulty part]"));
    assert_non_null(strstr(buf, "x0\\n= -1"));
    assert_non_null(strstr(buf, "}\n"));
    /* unchecked: the shape, without names */
    assert_int_equal(ad_gradient(faulty, &kind, 2, ok, &fx, g), AD_OK);
    capture(ad_tape_dot, buf, sizeof buf);
    assert_non_null(strstr(buf, ": ?"));
    assert_null(strstr(buf, "log"));
    assert_int_equal(ad_tape_dot(NULL, 10), AD_EINVAL);
}

/* (x0 x1) (x2 + x0 x3): an ordinary record above an ad_dot whose slots
 * sit below it, in one chunk. */
static ad_real dot_then_mul(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real a = ad_mul(x[0], x[1]);
    ad_real u[2] = {x[0], x[2]}, v[2] = {x[1], x[3]};
    ad_real d = ad_dot(2, u, v);
    return ad_mul(ad_add(x[2], d), a);
}

/* The DOT picture draws an n-ary record as its header's node, with its
 * slots as edges: no slot is a node of its own, wherever it sits. */
static void test_dot_draws_slots_as_edges(void **state)
{
    static char buf[16384];
    const double x[4] = {1.0, 2.0, 3.0, 4.0};
    double fx, g[4];
    (void)state;
    assert_int_equal(ad_gradient(dot_then_mul, NULL, 4, x, &fx, g), AD_OK);
    capture(ad_tape_dump, buf, sizeof buf);
    unsigned hdr = 0, count = 0;
    const char *at = strstr(buf, "n-ary (ad_dot): the ");
    assert_non_null(at);
    while (at > buf && at[-1] != '\n')
        at--;
    assert_int_equal(sscanf(at, "%u  n-ary (ad_dot): the %u", &hdr, &count), 2);
    assert_true(count >= 1);
    capture(ad_tape_dot, buf, sizeof buf);
    char node[32];
    for (unsigned k = 1; k <= count; k++) {
        snprintf(node, sizeof node, "  n%u [", hdr - k);
        assert_null(strstr(buf, node));
    }
    snprintf(node, sizeof node, "  n%u [", hdr);
    assert_non_null(strstr(buf, node));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dot_draws_slots_as_edges),
        cmocka_unit_test(test_fault_named),
        cmocka_unit_test(test_off_by_default),
        cmocka_unit_test(test_every_driver),
        cmocka_unit_test(test_tangent_overflow),
        cmocka_unit_test(test_checked_equals_unchecked),
        cmocka_unit_test(test_non_finite_inputs_not_faults),
        cmocka_unit_test(test_dump_and_dot_name_operations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
