/* Matrix-matrix products on recorded matrices (ad_mat_mul_rr / _rd / _d,
 * include/dualrev/matrix.h).
 *
 * Oracles (tests/mat_ops.h): the same computation as scalar code (ad_mul /
 * ad_add loops) under every driver -- values bit for bit, derivatives to
 * 1e-11 of the largest entry; central differences of the scalar code's
 * values; J^T w, J v and five lanes at once against the Jacobian; the
 * sparse drivers against the dense ones, with every nonzero present.
 * Cases: every pairing of recorded, wrapped and recorded-constant operands,
 * the bias as an active ad_real, a double, a constant ad_real or none, the
 * product of a product (a derived operand), ad_mat_vec of a product, A A
 * (one matrix on both sides), empty sizes.  Edges: +-0, Inf, NaN,
 * subnormals.  Errors: NULL arguments, sizes that do not match, handles of
 * another recording (AD_EFOREIGN), recorded programs (AD_ENOTSUP), the
 * check mode (AD_ENONFINITE naming the product), allocation failure at
 * every point. */
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

static void test_pairings(void **state)
{
    (void)state;
    uint64_t rng = 0x3a7;
    static const size_t sizes[][3] = {{3, 4, 2}, {2, 5, 3}, {1, 1, 1}, {4, 1, 3}, {2, 3, 5}};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++)
                for (int bias = 0; bias < 4; bias++) {
                    mcase c = {sizes[s][0], sizes[s][1], sizes[s][2], a, b, bias, -1, T_NONE, 0, 0,
                               {0}, {0}, {0}};
                    if (!mcase_inputs(&c))
                        continue;
                    double z[128];
                    mcase_fill(&c, &rng, z, -1.5, 1.5);
                    mcase_check(&c, z, 1, 1);
                }
}

/* Derived operands: a product times a recorded matrix, ad_mat_vec of a
 * product, a product's map; A A with one handle on both sides. */
static void test_compositions(void **state)
{
    (void)state;
    uint64_t rng = 0xc0;
    for (int then = T_MUL; then <= T_MAP2; then++)
        for (int a = 0; a < 3; a++)
            for (int bias = 0; bias < 3; bias++) {
                size_t m = 3, k = then == T_SQUARE ? 3 : 4, n = 3;
                mcase c = {m, k, n, then == T_SQUARE ? W_REC : a, W_REC, bias, -1, then, 0, 0,
                           {0}, {0}, {0}};
                double z[128];
                mcase_fill(&c, &rng, z, -1.2, 1.2);
                mcase_check(&c, z, 1, 1);
            }
}

/* Empty products: m, k or n zero (k = 0: C is the bias). */
static void test_empty(void **state)
{
    (void)state;
    uint64_t rng = 0xe;
    static const size_t sizes[][3] = {{0, 3, 2}, {3, 0, 2}, {3, 2, 0}, {0, 0, 0}};
    for (size_t s = 0; s < 4; s++)
        for (int bias = 0; bias < 3; bias++) {
            mcase c = {sizes[s][0], sizes[s][1], sizes[s][2], W_REC, W_REC, bias, -1, T_NONE, 0, 0,
                       {0}, {0}, {0}};
            double z[64];
            mcase_fill(&c, &rng, z, -1, 1);
            if (!mcase_inputs(&c) || !mcase_outputs(&c))
                continue;
            mcase_check(&c, z, 1, 1);
        }
}

/* +-0, Inf, NaN, subnormals, huge: values bitwise the scalar code's;
 * derivatives as the scalar code's where both are finite (the class where
 * they are not may differ: a whole product's rule against records, see
 * docs/conventions.md). */
static void test_edges(void **state)
{
    (void)state;
    static const double edge[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 0x1p-1070, -0x1p-1060,
                                  1e300, -1e300, 1.0, -2.0};
    uint64_t rng = 0xed9e;
    for (int rep = 0; rep < 60; rep++) {
        mcase c = {2, 3, 2, W_REC, (int)(rng_next(&rng) % 3), (int)(rng_next(&rng) % 3), -1,
                   T_NONE, 0, 0, {0}, {0}, {0}};
        double z[64];
        mcase_fill(&c, &rng, z, -1, 1);
        for (size_t q = 0; q < mcase_inputs(&c); q++)
            if (rng_next(&rng) % 2)
                z[q] = edge[rng_next(&rng) % (sizeof edge / sizeof *edge)];
        for (size_t q = 0; q < 64; q++)
            if (rng_next(&rng) % 3 == 0)
                c.cb[q] = edge[rng_next(&rng) % (sizeof edge / sizeof *edge)];
        size_t nz = mcase_inputs(&c), my = mcase_outputs(&c);
        double y[16], ys[16], g[64], gs[64], fx, fxs;
        mcase cs = c;
        cs.scalar = 1;
        assert_ok(ad_evaluate_function(mcase_f, &c, nz, z, my, y));
        assert_ok(ad_evaluate_function(mcase_f, &cs, nz, z, my, ys));
        assert_vec_bitwise(y, ys, my);
        ad_status s1 = ad_gradient(mcase_obj, &c, nz, z, &fx, g);
        ad_status s2 = ad_gradient(mcase_obj, &cs, nz, z, &fxs, gs);
        assert_vec_bitwise(&fx, &fxs, 1);
        if (s1 == AD_OK && s2 == AD_OK)
            for (size_t i = 0; i < nz; i++)
                if (isfinite(g[i]) && isfinite(gs[i]))
                    assert_near(g[i], gs[i], 1e-9, 1e-300);
    }
}

/* The double form: bitwise the recorded values, for every bias form. */
static void test_double_form(void **state)
{
    (void)state;
    uint64_t rng = 0xd;
    double A[12], B[12], bias[3], out[9], outd[9];
    fill_uniform(&rng, A, 12, -2, 2);
    fill_uniform(&rng, B, 12, -2, 2);
    fill_uniform(&rng, bias, 3, -2, 2);
    ad_mat MA, MB, MC, MD;
    assert_ok(ad_mat_wrap(3, 4, A, &MA));
    assert_ok(ad_mat_wrap(4, 3, B, &MB));
    assert_ok(ad_mat_mul(&MA, &MB, bias, outd, &MC));
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 3; j++) {
            double s = 0.0;
            for (size_t l = 0; l < 4; l++)
                s += A[i * 4 + l] * B[l * 3 + j];
            assert_same(outd[i * 3 + j], s + bias[i]);
        }
    /* the result wraps out: a product with it is ad_mat_vec_d's */
    assert_ptr_equal(MC.a, outd);
    double x[3] = {1, 2, 3}, y[3], yw[3];
    ad_mat_vec(&MC, x, y);
    assert_ok(ad_mat_wrap(3, 3, outd, &MD));
    ad_mat_vec(&MD, x, yw);
    assert_vec_bitwise(y, yw, 3);
    /* ad_real form outside a recording: constants, the same values */
    ad_real o[9];
    assert_ok(ad_mat_mul(&MA, &MB, bias, o, &MC));
    for (size_t q = 0; q < 9; q++) {
        out[q] = o[q].v;
        assert_int_equal(o[q].id, 0);
    }
    assert_vec_bitwise(out, outd, 9);
    assert_int_equal(MC.id, 0);
}

/* ---- errors ---- */

typedef struct err_ctx {
    int which;
    ad_mat kept;
    int status;
} err_ctx;

static ad_real err_obj(const ad_real *z, size_t n, void *ctx)
{
    err_ctx *e = ctx;
    ad_mat A, B, C;
    ad_real out[4];
    double d[6] = {1, 2, 3, 4, 5, 6};
    (void)n;
    if (ad_mat_record(2, 2, z, &A) != AD_OK)
        return ad_const(NAN);
    if (ad_mat_wrap(2, 2, d, &B) != AD_OK)
        return ad_const(NAN);
    ad_status s = AD_OK;
    switch (e->which) {
    case 0: s = ad_mat_mul(&A, &B, (const ad_real *)NULL, out, &C); e->kept = A; break;
    case 1: s = ad_mat_mul(&e->kept, &B, (const ad_real *)NULL, out, &C); break;  /* foreign */
    case 2: s = ad_mat_mul(&B, &e->kept, (const ad_real *)NULL, out, &C); break;
    case 3: { ad_mat W; if (ad_mat_wrap(3, 2, d, &W) != AD_OK) return ad_const(NAN); s = ad_mat_mul(&A, &W, (const ad_real *)NULL, out, &C); break; }
    case 4: s = ad_mat_mul_rr(&A, &B, NULL, NULL, &C); break;
    case 5: s = ad_mat_mul_rr(NULL, &B, NULL, out, &C); break;
    case 6: s = ad_mat_mul_rr(&A, &B, NULL, out, NULL); break;
    case 7: { ad_real fb[2] = {ad_const(1), ad_const(2)}; fb[1].id = 3; fb[1].tag = 12345u; s = ad_mat_mul(&A, &B, fb, out, &C); break; }
    }
    e->status = (int)s;
    if (s != AD_OK)
        return ad_const(0.0);
    return ad_add(ad_add(out[0], out[1]), ad_add(out[2], out[3]));
}

static void test_errors(void **state)
{
    (void)state;
    double z[4] = {1, 2, 3, 4}, fx, g[4];
    err_ctx e = {0, {0}, 0};
    assert_ok(ad_gradient(err_obj, &e, 4, z, &fx, g));
    assert_same(fx, 7 + 10 + 15 + 22.0);
    static const ad_status want[] = {AD_OK, AD_EFOREIGN, AD_EFOREIGN, AD_EINVAL, AD_EINVAL,
                                     AD_EINVAL, AD_EINVAL, AD_EFOREIGN};
    for (int w = 1; w < 8; w++) {
        e.which = w;
        ad_status s = ad_gradient(err_obj, &e, 4, z, &fx, g);
        if (s != want[w])
            fail_msg("case %d: %s, want %s", w, ad_strerror(s), ad_strerror(want[w]));
        assert_int_equal(e.status, (int)want[w]);
        assert_nan(fx);
    }
    /* the double form */
    ad_mat A, B, C;
    double d[4] = {1, 2, 3, 4}, out[4];
    assert_ok(ad_mat_wrap(2, 2, d, &A));
    assert_ok(ad_mat_wrap(1, 2, d, &B));
    assert_int_equal(ad_mat_mul_d(&A, &B, NULL, out, &C), AD_EINVAL);
    assert_nan(out[0]);
    assert_int_equal(ad_mat_mul_d(NULL, &B, NULL, out, &C), AD_EINVAL);
    assert_int_equal(ad_mat_mul_d(&A, &A, NULL, NULL, &C), AD_EINVAL);
}

/* A recorded program refuses the product (AD_ENOTSUP), never a wrong program. */
static void test_program_refuses(void **state)
{
    (void)state;
    mcase c = {2, 2, 2, W_REC, W_CONST, B_NONE, -1, T_NONE, 0, 0, {1, 2, 3, 4}, {5, 6, 7, 8}, {0}};
    double z[4] = {1, 2, 3, 4};
    ad_program *P = (ad_program *)&c;
    assert_int_equal(ad_program_record(mcase_obj, &c, 4, z, &P), AD_ENOTSUP);
    assert_null(P);
}

/* AD_CHECK_FINITE: an overflow in the product names it. */
static void test_check_names_product(void **state)
{
    (void)state;
    mcase c = {1, 2, 1, W_REC, W_CONST, B_NONE, -1, T_NONE, 0, 0, {0}, {1e300, 1e300}, {0}};
    double z[2] = {1e10, 1.0}, fx, g[2];
    ad_set_checks(AD_CHECK_FINITE);
    assert_int_equal(ad_gradient(mcase_obj, &c, 2, z, &fx, g), AD_ENONFINITE);
    ad_fault f;
    assert_ok(ad_last_fault(&f));
    assert_string_equal(f.op, "matrix product");
    assert_true(isinf(f.value));
    /* a NaN operand is not the product's fault */
    z[0] = NAN;
    assert_ok(ad_gradient(mcase_obj, &c, 2, z, &fx, g));
    ad_set_checks(0);
}

/* Allocation failure at every point: AD_ENOMEM, then the right numbers. */
static void test_alloc_failure(void **state)
{
    (void)state;
    uint64_t rng = 0xa1;
    mcase c = {3, 3, 3, W_REC, W_REC, B_ACTIVE, AD_MAP_TANH, T_MUL, 0, 0, {0}, {0}, {0}};
    double z[64], fw, gw[64];
    mcase_fill(&c, &rng, z, -1, 1);
    size_t nz = mcase_inputs(&c);
    for (int api = 0; api < 3; api++) {
        int successes = 0;
        double hw[64 * 64], hv[64], v[64];
        fill_uniform(&rng, v, nz, -1, 1);
        gradient_ok(mcase_obj, &c, nz, z, gw);
        assert_ok(ad_hvp(mcase_obj, &c, nz, z, v, &fw, gw, hw));
        for (long i = 0; successes < 3; i++) {
            double fx, g[64];
            ad_csr S;
            memset(&S, 0, sizeof S);
            assert_ok(ad_release());
            ad_test_fail_alloc_after(i);
            ad_status st = api == 0   ? ad_gradient(mcase_obj, &c, nz, z, &fx, g)
                           : api == 1 ? ad_hvp(mcase_obj, &c, nz, z, v, &fx, g, hv)
                                      : ad_sparse_hessian(mcase_obj, &c, nz, z, &fx, g, &S);
            ad_test_fail_alloc_after(-1);
            if (st == AD_OK) {
                successes++;
                assert_same(fx, fw);
                assert_vec_rel(g, gw, nz, 1e-14);
                if (api == 1)
                    assert_vec_rel(hv, hw, nz, 1e-14);
                ad_csr_free(&S);
            } else
                assert_alloc_failure(i, st, successes);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_pairings, teardown),
        cmocka_unit_test_teardown(test_compositions, teardown),
        cmocka_unit_test_teardown(test_empty, teardown),
        cmocka_unit_test_teardown(test_edges, teardown),
        cmocka_unit_test_teardown(test_double_form, teardown),
        cmocka_unit_test_teardown(test_errors, teardown),
        cmocka_unit_test_teardown(test_program_refuses, teardown),
        cmocka_unit_test_teardown(test_check_names_product, teardown),
        cmocka_unit_test_teardown(test_alloc_failure, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
