/* Element-wise maps of recorded matrices (ad_mat_map_r / _d, ad_mat_map_fn_r
 * / _d, include/dualrev/matrix.h).
 *
 * Oracles (tests/mat_ops.h): the same computation as scalar code (ad_tanh,
 * ad_exp, ... of each entry; ad_fmax(x, 0) for RELU, ad_mul(x, x) for
 * SQUARE, 1 / (1 + exp(-x)) for LOGISTIC, x^3 - x by ad_mul / ad_sub for
 * the user's function) under every driver: values bit for bit (but
 * LOGISTIC's and the user function's, which are computed otherwise),
 * derivatives to 1e-11; central differences; the closed forms of each
 * function's derivatives at +-0, Inf, NaN and subnormals.  Errors, the
 * check mode (a NaN made by a map names it), a user function without a
 * second derivative (AD_ENOTSUP from the second-order drivers). */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>

#include "mat_ops.h"
#include "../lib/drivers/testing.h"

static int teardown(void **state)
{
    (void)state;
    ad_test_fail_alloc_after(-1);
    ad_set_checks(0);
    return 0;
}

/* Each op after a product, and on its own (a recorded matrix's map). */
static void test_ops_against_scalar_code(void **state)
{
    (void)state;
    uint64_t rng = 0x3a9;
    for (int op = 0; op <= AD_MAP_COUNT; op++)
        for (int shape = 0; shape < 4; shape++) {
            /* k = 1 with B = 1 and no bias: C = A, the map of a recorded matrix */
            mcase c = {3, shape ? 2 : 1, 2, W_REC, shape ? shape % 3 : W_CONST, shape == 3 ? B_ACTIVE : B_NONE,
                       op, shape == 2 ? T_VEC : T_NONE, 0, 0, {0}, {0}, {0}};
            double z[64];
            int positive = op == AD_MAP_LOG || op == AD_MAP_SQRT;
            mcase_fill(&c, &rng, z, positive ? 0.5 : -1.5, positive ? 1.5 : 1.5);
            if (!shape)
                for (size_t q = 0; q < 64; q++)
                    c.cb[q] = 1.0;
            if (op == AD_MAP_RELU)  /* away from the kink, for central differences */
                for (size_t q = 0; q < mcase_inputs(&c); q++)
                    z[q] = z[q] < 0 ? z[q] - 0.5 : z[q] + 0.5;
            int bitwise = op != AD_MAP_LOGISTIC && op != AD_MAP_COUNT;
            mcase_check(&c, z, bitwise, op != AD_MAP_RELU || !shape);
        }
}

typedef struct one_ctx {
    int op;
    int status;
} one_ctx;

/* y = op(x) through a 1 x 1 map of a recorded x */
static void one_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    one_ctx *c = ctx;
    ad_mat X, Y;
    ad_real out[1];
    (void)n, (void)m;
    ad_status s = ad_mat_record(1, 1, x, &X);
    if (s == AD_OK)
        s = c->op == AD_MAP_COUNT ? ad_mat_map_fn(&cubic, NULL, &X, out, &Y)
                                  : ad_mat_map((ad_map_op)c->op, &X, out, &Y);
    c->status = (int)s;
    y[0] = s == AD_OK ? out[0] : ad_const(NAN);
}

/* Closed forms at edge points: value, first and second derivative. */
static void closed_form(int op, double x, double *f, double *d, double *h)
{
    long double X = x, e;
    switch (op) {
    case AD_MAP_TANH: *f = tanh(x); *d = (double)(1.0L / (coshl(X) * coshl(X))); *h = (double)(-2.0L * tanhl(X) / (coshl(X) * coshl(X))); break;
    case AD_MAP_EXP: *f = *d = *h = exp(x); break;
    case AD_MAP_LOG: *f = log(x); *d = x == 0 ? INFINITY : x < 0 || isnan(x) ? NAN : 1.0 / x; *h = x < 0 || isnan(x) ? NAN : -(*d) * (*d); break;
    case AD_MAP_SQRT: *f = sqrt(x); *d = 0.5 / fabs(*f); *h = -0.5 * *d / fabs(x); break;
    case AD_MAP_SIN: *f = sin(x); *d = cos(x); *h = -sin(x); break;
    case AD_MAP_COS: *f = cos(x); *d = -sin(x); *h = -cos(x); break;
    case AD_MAP_LOGISTIC:
        e = expl(-fabsl(X));
        *f = (double)(X >= 0 ? 1.0L / (1.0L + e) : e / (1.0L + e));
        *d = (double)(e / ((1.0L + e) * (1.0L + e)));
        *h = (double)(-(e / ((1.0L + e) * (1.0L + e))) * tanhl(X / 2));
        break;
    case AD_MAP_RELU: *f = x > 0 ? x : (isnan(x) ? 0.0 : 0.0 * (x == x)); *d = isnan(x) ? 0.0 : x > 0 ? 1.0 : x == 0 ? 0.5 : 0.0; *h = 0.0; break;
    case AD_MAP_SQUARE: *f = x * x; *d = 2 * x; *h = 2; break;
    default: *f = x * x * x - x; *d = 3 * x * x - 1; *h = 6 * x; break;
    }
}

static ad_real one_obj(const ad_real *x, size_t n, void *ctx)
{
    ad_real y;
    one_f(x, n, &y, 1, ctx);
    return y;
}

static void test_edges_closed_forms(void **state)
{
    (void)state;
    static const double xs[] = {0.0, -0.0, 0x1p-1070, -0x1p-1070, 1e-300, 2.5, -3.0, 30.0, -40.0,
                                800.0, -800.0, INFINITY, -INFINITY, NAN};
    for (int op = 0; op <= AD_MAP_COUNT; op++)
        for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) {
            double x = xs[i], f, d, h, y, J, fx, g, H, v = 1.0, hv;
            closed_form(op, x, &f, &d, &h);
            one_ctx c = {op, 0};
            assert_ok(ad_jacobian(one_f, &c, 1, &x, 1, &y, &J));
            assert_int_equal(c.status, AD_OK);
            if (!(same_double(y, f) || (isnan(y) && isnan(f)) || fabs(y - f) <= 1e-15 * fabs(f)))
                fail_msg("op %d at %a: value %a, want %a", op, x, y, f);
            if (!(isnan(d) ? isnan(J) : isinf(d) ? J == d : fabs(J - d) <= 1e-14 * fabs(d) + 1e-300))
                fail_msg("op %d at %a: derivative %a, want %a", op, x, J, d);
            assert_ok(ad_hessian(one_obj, &c, 1, &x, &fx, &g, &H));
            if (!isfinite(f) || !isfinite(d))
                continue;  /* an infinite partial meets a zero tangent: NaN, as scalar code's
                            * (docs/conventions.md, second-order-inf-partial) */
            assert_ok(ad_hvp(one_obj, &c, 1, &x, &v, &fx, &g, &hv));
            if (!(isnan(h) ? isnan(H) : isinf(h) ? H == h : fabs(H - h) <= 1e-13 * fabs(h) + 1e-300))
                fail_msg("op %d at %a: second derivative %a, want %a", op, x, H, h);
            assert_true(same_double(H, hv) || (isnan(H) && isnan(hv)));
            ad_csr S;
            memset(&S, 0, sizeof S);
            assert_ok(ad_sparse_hessian(one_obj, &c, 1, &x, &fx, &g, &S));
            double Hs = S.row_ptr[1] ? S.val[0] : 0.0;
            if (!(isnan(h) ? isnan(Hs) : isinf(h) ? Hs == h : fabs(Hs - h) <= 1e-13 * fabs(h) + 1e-300))
                fail_msg("op %d at %a: sparse second derivative %a, want %a", op, x, Hs, h);
            /* structure: a curved op has its entry, RELU none */
            assert_int_equal(S.row_ptr[1], op == AD_MAP_RELU ? 0u : 1u);
            ad_csr_free(&S);
        }
}

/* The double forms: bitwise the recorded values; the result wraps out. */
static void test_double_form(void **state)
{
    (void)state;
    double A[6] = {0.5, -1.0, 2.0, 0.0, -0.0, 3.0}, out[6];
    ad_mat MA, MC;
    assert_ok(ad_mat_wrap(2, 3, A, &MA));
    for (int op = 0; op < AD_MAP_COUNT; op++) {
        ad_real o[6];
        assert_ok(ad_mat_map_d((ad_map_op)op, &MA, out, &MC));
        assert_ptr_equal(MC.a, out);
        assert_ok(ad_mat_map_r((ad_map_op)op, &MA, o, &MC));
        for (size_t q = 0; q < 6; q++) {
            assert_true(same_double(o[q].v, out[q]) || (isnan(o[q].v) && isnan(out[q])));
            assert_int_equal(o[q].id, 0);
        }
    }
    assert_ok(ad_mat_map_fn_d(&cubic, NULL, &MA, out, &MC));
    assert_same(out[2], 6.0);
}

static void test_errors(void **state)
{
    (void)state;
    double A[2] = {1, 2}, out[2];
    ad_real o[2];
    ad_mat MA, MC;
    assert_ok(ad_mat_wrap(1, 2, A, &MA));
    assert_int_equal(ad_mat_map_d(AD_MAP_COUNT, &MA, out, &MC), AD_EINVAL);
    assert_nan(out[0]);
    assert_int_equal(ad_mat_map_d((ad_map_op)-1, &MA, out, &MC), AD_EINVAL);
    assert_int_equal(ad_mat_map_r(AD_MAP_EXP, NULL, o, &MC), AD_EINVAL);
    assert_int_equal(ad_mat_map_r(AD_MAP_EXP, &MA, NULL, &MC), AD_EINVAL);
    assert_int_equal(ad_mat_map_r(AD_MAP_EXP, &MA, o, NULL), AD_EINVAL);
    assert_nan(o[0].v);
    ad_map_fn bad = {NULL, cubic_df, NULL};
    assert_int_equal(ad_mat_map_fn_r(&bad, NULL, &MA, o, &MC), AD_EINVAL);
    assert_int_equal(ad_mat_map_fn_d(NULL, NULL, &MA, out, &MC), AD_EINVAL);
    /* empty: nothing to do */
    assert_ok(ad_mat_wrap(0, 3, A, &MA));
    assert_ok(ad_mat_map_r(AD_MAP_EXP, &MA, NULL, &MC));
    assert_int_equal(MC.rows, 0);
}

/* A handle of another recording: AD_EFOREIGN. */
static ad_mat kept;
static ad_real foreign_obj(const ad_real *x, size_t n, void *ctx)
{
    ad_mat X, Y;
    ad_real out[2];
    (void)n;
    if (ad_mat_record(1, 2, x, &X) != AD_OK)
        return ad_const(NAN);
    if (ctx) {
        kept = X;
        return ad_add(x[0], x[1]);
    }
    if (ad_mat_map(AD_MAP_EXP, &kept, out, &Y) != AD_OK)
        return ad_const(0.0);
    return ad_add(out[0], out[1]);
}

static void test_foreign(void **state)
{
    (void)state;
    double x[2] = {1, 2}, fx, g[2];
    int keep = 1;
    assert_ok(ad_gradient(foreign_obj, &keep, 2, x, &fx, g));
    assert_int_equal(ad_gradient(foreign_obj, NULL, 2, x, &fx, g), AD_EFOREIGN);
    assert_nan(fx);
}

/* sum of cubic(x) through a map with a user function without d2f */
static ad_real first_only_obj(const ad_real *x, size_t n, void *ctx)
{
    ad_mat X, Y;
    ad_real out[4];
    (void)ctx;
    if (ad_mat_record(2, n / 2, x, &X) != AD_OK ||
        ad_mat_map_fn(&cubic_first, NULL, &X, out, &Y) != AD_OK)
        return ad_const(NAN);
    return ad_sum(n, out);
}

/* A user function without d2f: first order works, second order refuses. */
static void test_first_order_user_function(void **state)
{
    (void)state;
    double z[4] = {0.1, 0.2, 0.3, 0.4}, fx, g[4], H[16], v[4] = {1, 0, 0, 0}, hv[4], y[4], J[16];
    assert_int_equal(ad_hessian(first_only_obj, NULL, 4, z, &fx, g, H), AD_ENOTSUP);
    assert_int_equal(ad_hvp(first_only_obj, NULL, 4, z, v, &fx, g, hv), AD_ENOTSUP);
    ad_csr S;
    memset(&S, 0, sizeof S);
    assert_int_equal(ad_sparse_hessian(first_only_obj, NULL, 4, z, &fx, g, &S), AD_ENOTSUP);
    assert_ok(ad_gradient(first_only_obj, NULL, 4, z, &fx, g));
    for (int q = 0; q < 4; q++)
        assert_near(g[q], 3 * z[q] * z[q] - 1, 1e-15, 0);
    (void)y, (void)J;
}

/* AD_CHECK_FINITE: a NaN made by a map names it (log of a negative entry);
 * an entry that was NaN already is not the map's fault. */
static void test_check_names_map(void **state)
{
    (void)state;
    double x[2] = {2.0, -1.0}, y, J[2];
    ad_set_checks(AD_CHECK_FINITE);
    one_ctx c = {AD_MAP_LOG, 0};
    (void)J;
    double fx, g;
    assert_int_equal(ad_gradient(one_obj, &c, 1, x + 1, &fx, &g), AD_ENONFINITE);
    ad_fault f;
    assert_ok(ad_last_fault(&f));
    assert_string_equal(f.op, "matrix map log");
    assert_nan(f.value);
    c.op = AD_MAP_SQRT;
    assert_int_equal(ad_gradient(one_obj, &c, 1, x + 1, &fx, &g), AD_ENONFINITE);
    assert_ok(ad_last_fault(&f));
    assert_string_equal(f.op, "matrix map sqrt");
    /* a 2 x 1 map with a NaN entry beside a negative one: the negative one
     * is still found */
    mcase k = {2, 1, 1, W_REC, W_CONST, B_NONE, AD_MAP_LOG, T_NONE, 0, 0, {0}, {1.0}, {0}};
    double z[2] = {NAN, -1.0};
    assert_int_equal(ad_gradient(mcase_obj, &k, 2, z, &fx, J), AD_ENONFINITE);
    assert_ok(ad_last_fault(&f));
    assert_string_equal(f.op, "matrix map log");
    ad_set_checks(0);
    (void)y;
}

/* Allocation failure at every point of a map's recording and sweeps. */
static void test_alloc_failure(void **state)
{
    (void)state;
    uint64_t rng = 0xa2;
    mcase c = {3, 2, 3, W_REC, W_REC, B_DOUBLE, AD_MAP_COUNT, T_MAP2, 0, 0, {0}, {0}, {0}};
    double z[64], fw, gw[64], v[64], hw[64];
    mcase_fill(&c, &rng, z, -1, 1);
    size_t nz = mcase_inputs(&c);
    fill_uniform(&rng, v, nz, -1, 1);
    assert_ok(ad_hvp(mcase_obj, &c, nz, z, v, &fw, gw, hw));
    int successes = 0;
    for (long i = 0; successes < 3; i++) {
        double fx, g[64], hv[64];
        assert_ok(ad_release());
        ad_test_fail_alloc_after(i);
        ad_status st = ad_hvp(mcase_obj, &c, nz, z, v, &fx, g, hv);
        ad_test_fail_alloc_after(-1);
        if (st == AD_OK) {
            successes++;
            assert_same(fx, fw);
            assert_vec_rel(hv, hw, nz, 1e-14);
        } else
            assert_alloc_failure(i, st, successes);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_ops_against_scalar_code, teardown),
        cmocka_unit_test_teardown(test_edges_closed_forms, teardown),
        cmocka_unit_test_teardown(test_double_form, teardown),
        cmocka_unit_test_teardown(test_errors, teardown),
        cmocka_unit_test_teardown(test_foreign, teardown),
        cmocka_unit_test_teardown(test_first_order_user_function, teardown),
        cmocka_unit_test_teardown(test_check_names_map, teardown),
        cmocka_unit_test_teardown(test_alloc_failure, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
