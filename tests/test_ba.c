/* ADBench bundle adjustment (benchmarks/ba/): residuals and sparse
 * Jacobians against ADBench's reference results, for ADBench's test input
 * and for its smallest benchmark input (31843 observations).
 *
 * The Jacobian is built two ways, ad_sparse_jacobian of the whole residual
 * function and one ad_jacobian per observation, and both are checked entry by
 * entry against the reference 2x15 block.  Expected columns are computed
 * here from ADBench's replication rule (observation i on camera i mod n and
 * point i mod m), not taken from the code under test.
 *
 * The data are in tests/data/adbench (BA_DATA_DIR, set by meson). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ba.h"

#define RTOL 1e-9  /* ADBench's tolerance for derivatives; values are held to it too */

typedef struct dataset {
    const char *name;  /* file stem in BA_DATA_DIR */
    size_t n, m, p;    /* sizes the file must have */
} dataset;

static const dataset ba_test = {"ba_test", 2, 10, 10};
static const dataset ba1 = {"ba1_n49_m7776_p31843", 49, 7776, 31843};

/* BA_DATA_DIR/<stem><suffix>, in a static buffer. */
static const char *data_path(const char *stem, const char *suffix)
{
    static char path[4096];
    int len = snprintf(path, sizeof path, "%s/%s%s", BA_DATA_DIR, stem, suffix);
    assert_true(len > 0 && (size_t)len < sizeof path);
    return path;
}

/* A loaded problem, its input vector and its reference results. */
typedef struct fixture {
    ba_problem p;
    ba_reference ref;
    double *x;
} fixture;

static void load(const dataset *d, fixture *fx)
{
    if (ba_load(data_path(d->name, ".txt"), &fx->p)) {
        print_error("cannot load %s: %s\n", d->name, strerror(errno));
        fail();
    }
    assert_int_equal(fx->p.n_cams, d->n);
    assert_int_equal(fx->p.n_pts, d->m);
    assert_int_equal(fx->p.n_obs, d->p);
    if (ba_read_reference(data_path(d->name, "_manual.txt"), &fx->ref)) {
        print_error("cannot read the reference of %s\n", d->name);
        fail();
    }
    assert_int_equal(fx->ref.n_cams, d->n);
    assert_int_equal(fx->ref.n_pts, d->m);
    assert_int_equal(fx->ref.n_obs, d->p);
    fx->x = malloc(ba_inputs(&fx->p) * sizeof *fx->x);
    assert_non_null(fx->x);
    ba_pack(&fx->p, fx->x);
}

static void unload(fixture *fx)
{
    free(fx->x);
    ba_free(&fx->p);
}

/* ---- expected values ---- */

static double expected_residual(const fixture *fx, size_t row)
{
    size_t p = fx->p.n_obs;
    return row < 2 * p ? fx->ref.reproj[row % 2] : fx->ref.w_err;
}

/* Every residual (all observations share the reference's values), and the
 * sum of squares, which the reference gives separately. */
static void check_residuals(const fixture *fx, const double *y)
{
    double sum_sq = 0.0;
    for (size_t r = 0; r < ba_outputs(&fx->p); r++) {
        assert_near(y[r], expected_residual(fx, r), RTOL, 0.0);
        sum_sq += y[r] * y[r];
    }
    assert_near(sum_sq, fx->ref.sum_sq, RTOL, 0.0);
}

/* Input column of entry k of observation i's block [camera, point, w]. */
static size_t expected_column(const ba_problem *p, size_t i, size_t k)
{
    size_t points = BA_CAM * p->n_cams, weights = points + BA_PT * p->n_pts;
    if (k < BA_CAM)
        return BA_CAM * (i % p->n_cams) + k;
    if (k < BA_CAM + BA_PT)
        return points + BA_PT * (i % p->n_pts) + (k - BA_CAM);
    return weights + i;
}

/* The entry of the block that reprojection row `axis` never depends on: the
 * principal point's other coordinate (v0 for x, u0 for y). */
static size_t absent_entry(int axis)
{
    return BA_PRINCIPAL + 1 - (size_t)axis;
}

/* ---- checking a Jacobian ---- */

static void check_shape(const fixture *fx, const ad_csr *J)
{
    size_t p = fx->p.n_obs;
    assert_int_equal(J->rows, 3 * p);
    assert_int_equal(J->cols, BA_CAM * fx->p.n_cams + BA_PT * fx->p.n_pts + p);
    /* 14 entries per reprojection row (15 less the absent one), 1 per
     * weight row */
    assert_int_equal(J->nnz, 2 * 14 * p + p);
    assert_non_null(J->row_ptr);
    assert_int_equal(J->row_ptr[0], 0);
    assert_int_equal(J->row_ptr[J->rows], J->nnz);
}

/* Row 2i + axis: the block's entries in ascending column order (the order of
 * the block), without the absent one, and their values. */
static void check_reproj_row(const fixture *fx, const ad_csr *J, size_t i, int axis)
{
    size_t r = 2 * i + (size_t)axis, e = J->row_ptr[r];
    assert_int_equal(J->row_ptr[r + 1] - e, 14);
    for (size_t k = 0; k < BA_BLOCK; k++) {
        if (k == absent_entry(axis))
            continue;
        if (J->col[e] != expected_column(&fx->p, i, k)) {
            print_error("row %zu, entry %zu: column %zu, expected %zu\n", r, k,
                        J->col[e], expected_column(&fx->p, i, k));
            fail();
        }
        assert_near(J->val[e], fx->ref.block[axis][k], RTOL, 0.0);
        e++;
    }
}

static void check_weight_row(const fixture *fx, const ad_csr *J, size_t i)
{
    size_t r = 2 * fx->p.n_obs + i, e = J->row_ptr[r];
    assert_int_equal(J->row_ptr[r + 1] - e, 1);
    assert_int_equal(J->col[e], expected_column(&fx->p, i, BA_BLOCK - 1));
    assert_near(J->val[e], fx->ref.d_w_err, RTOL, 0.0);
}

static void check_jacobian(const fixture *fx, const ad_csr *J)
{
    check_shape(fx, J);
    for (size_t i = 0; i < fx->p.n_obs; i++) {
        check_reproj_row(fx, J, i, 0);
        check_reproj_row(fx, J, i, 1);
    }
    for (size_t i = 0; i < fx->p.n_obs; i++)
        check_weight_row(fx, J, i);
}

/* ---- test cases ---- */

/* The reference stores 15 entries per reprojection row; the entry the row
 * cannot depend on must be 0 in it, else dropping it would lose a value. */
static void test_reference_absent_entries_are_zero(void **state)
{
    (void)state;
    fixture fx;
    load(&ba_test, &fx);
    assert_same(fx.ref.block[0][absent_entry(0)], 0.0);
    assert_same(fx.ref.block[1][absent_entry(1)], 0.0);
    unload(&fx);
}

static void test_loader_replicates(void **state)
{
    (void)state;
    fixture fx;
    load(&ba_test, &fx);
    const ba_problem *p = &fx.p;
    for (size_t i = 0; i < p->n_obs; i++) {
        assert_int_equal(p->obs[2 * i], i % p->n_cams);
        assert_int_equal(p->obs[2 * i + 1], i % p->n_pts);
        assert_same(p->w[i], 0.417022);
        assert_same(p->feats[2 * i + 1], 161.811929);
    }
    assert_same(p->cams[BA_CAM * (p->n_cams - 1) + BA_RADIAL + 1], 0.069976);
    assert_same(p->pts[BA_PT * (p->n_pts - 1)], 4.173048);
    unload(&fx);
}

static void test_load_errors(void **state)
{
    (void)state;
    ba_problem p;
    ba_reference ref;
    assert_int_equal(ba_load(data_path("no_such_file", ".txt"), &p), -1);
    assert_int_equal(errno, ENOENT);
    assert_null(p.cams);
    /* a reference file is not a data file */
    assert_int_equal(ba_load(data_path("ba_test_manual", ".txt"), &p), -1);
    assert_int_equal(errno, EINVAL);
    assert_null(p.cams);
    /* a data file is not a reference file */
    assert_int_equal(ba_read_reference(data_path("ba_test", ".txt"), &ref), -1);
}

static void residuals_case(const dataset *d)
{
    fixture fx;
    load(d, &fx);
    double *y = malloc(ba_outputs(&fx.p) * sizeof *y);
    assert_non_null(y);
    ba_residuals(&fx.p, fx.x, y);
    check_residuals(&fx, y);
    free(y);
    unload(&fx);
}

/* (a) ad_sparse_jacobian of all residuals, (b) ad_jacobian per observation:
 * both against the reference, and the same structure. */
static void jacobians_case(const dataset *d)
{
    fixture fx;
    load(d, &fx);
    size_t n = ba_inputs(&fx.p), m = ba_outputs(&fx.p);
    double *y = malloc(m * sizeof *y);
    ad_csr a, b;
    assert_non_null(y);
    assert_ok(ad_sparse_jacobian(ba_residuals_ad, &fx.p, n, fx.x, m, y, &a));
    check_residuals(&fx, y);
    check_jacobian(&fx, &a);

    assert_int_equal(ba_csr_alloc(&fx.p, &b), 0);
    memset(y, 0, m * sizeof *y);
    assert_ok(ba_jacobian_by_observation(&fx.p, fx.x, y, &b));
    check_residuals(&fx, y);
    check_jacobian(&fx, &b);

    assert_memory_equal(a.row_ptr, b.row_ptr, (m + 1) * sizeof *a.row_ptr);
    assert_memory_equal(a.col, b.col, a.nnz * sizeof *a.col);
    ad_csr_free(&a);
    ba_csr_release(&b);
    free(y);
    unload(&fx);
}

static void test_residuals_ba_test(void **state)
{
    (void)state;
    residuals_case(&ba_test);
}

static void test_residuals_ba1(void **state)
{
    (void)state;
    residuals_case(&ba1);
}

static void test_jacobians_ba_test(void **state)
{
    (void)state;
    jacobians_case(&ba_test);
}

static void test_jacobians_ba1(void **state)
{
    (void)state;
    jacobians_case(&ba1);
}

/* ---- ADBench's own expected CSR values for ba_test ---- */

/* The numbers of a file, '#' lines skipped; at most max. */
static size_t read_numbers(const char *path, double *out, size_t max)
{
    FILE *f = fopen(path, "r");
    char line[256];
    size_t n = 0;
    assert_non_null(f);
    while (fgets(line, sizeof line, f))
        if (line[0] != '#' && n < max && sscanf(line, "%lf", &out[n]) == 1)
            n++;
    fclose(f);
    return n;
}

/* expected_ba_test.txt lists the whole Jacobian in ADBench's CSR layout,
 * 15 entries per reprojection row: ours is that layout less the absent
 * entries, which must be 0 there. */
static void test_expected_csr_ba_test(void **state)
{
    (void)state;
    enum { ADBENCH_NNZ = 310 };
    double want[ADBENCH_NNZ + 1];
    fixture fx;
    ad_csr J;
    load(&ba_test, &fx);
    assert_int_equal(read_numbers(data_path("expected_ba_test", ".txt"), want, ADBENCH_NNZ + 1),
                     ADBENCH_NNZ);
    double *y = malloc(ba_outputs(&fx.p) * sizeof *y);
    assert_non_null(y);
    assert_int_equal(ba_csr_alloc(&fx.p, &J), 0);
    assert_ok(ba_jacobian_by_observation(&fx.p, fx.x, y, &J));
    size_t e = 0, w = 0;
    for (size_t r = 0; r < J.rows; r++)
        for (size_t k = 0; k < (r < 2 * fx.p.n_obs ? (size_t)BA_BLOCK : 1); k++, w++) {
            if (r < 2 * fx.p.n_obs && k == absent_entry((int)(r % 2)))
                assert_same(want[w], 0.0);
            else
                assert_near(J.val[e++], want[w], RTOL, 0.0);
        }
    assert_int_equal(e, J.nnz);
    ba_csr_release(&J);
    free(y);
    unload(&fx);
}

/* ---- the |r|^2 == 0 branch of the rotation ---- */

/* Reprojection error `axis` of the 15-input block as a function of input k,
 * through ad_jacobian's value output, for finite differences. */
typedef struct probe {
    double in[BA_BLOCK];
    double feat[2];
    size_t k;
    int axis;
} probe;

static double probe_at(double v, const void *ctx)
{
    probe q = *(const probe *)ctx;
    double y[2], jac[2 * BA_BLOCK];
    q.in[q.k] = v;
    ad_status s = ad_jacobian(ba_observation_ad, q.feat, BA_BLOCK, q.in, 2, y, jac);
    return s == AD_OK ? y[q.axis] : NAN;
}

/* At r = 0 the rotation takes its first-order form, X + r x X.  Its value
 * and derivatives must continue the angle-axis form around it: finite
 * differences step off r = 0 and so differentiate the angle-axis form. */
static void test_zero_rotation_branch(void **state)
{
    (void)state;
    fixture fx;
    load(&ba_test, &fx);
    probe q;
    double y[2], jac[2 * BA_BLOCK];
    memcpy(q.in, fx.p.cams, BA_CAM * sizeof *q.in);
    memcpy(q.in + BA_CAM, fx.p.pts, BA_PT * sizeof *q.in);
    q.in[BA_CAM + BA_PT] = fx.p.w[0];
    memcpy(q.feat, fx.p.feats, sizeof q.feat);
    q.in[BA_ROT] = q.in[BA_ROT + 1] = q.in[BA_ROT + 2] = 0.0;
    assert_ok(ad_jacobian(ba_observation_ad, q.feat, BA_BLOCK, q.in, 2, y, jac));
    for (q.axis = 0; q.axis < 2; q.axis++)
        for (q.k = 0; q.k < BA_BLOCK; q.k++) {
            fd_result d = fd_derivative(probe_at, &q, q.in[q.k]);
            assert_near(jac[q.axis * BA_BLOCK + q.k], d.d, 1e-8, d.noise);
        }
    unload(&fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loader_replicates),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_reference_absent_entries_are_zero),
        cmocka_unit_test(test_residuals_ba_test),
        cmocka_unit_test(test_residuals_ba1),
        cmocka_unit_test(test_jacobians_ba_test),
        cmocka_unit_test(test_jacobians_ba1),
        cmocka_unit_test(test_expected_csr_ba_test),
        cmocka_unit_test(test_zero_rotation_branch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
