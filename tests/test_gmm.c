/* ADBench GMM (benchmarks/gmm/): the objective and its gradient, in both
 * versions (scalar operations, array primitives), against ADBench's
 * reference results; the plain-double instantiation against the recorded
 * one; batches of points against one call; the loaders' errors.
 *
 * gmm_1k_d64_K100 is checked with the primitive version only, in batches of
 * points, against a subset of its reference gradient
 * (gmm_1k_d64_K100_subset.txt, made by make_gmm_subset.py).  The data are
 * in tests/data/adbench (GMM_DATA_DIR, set by meson). */
#define _POSIX_C_SOURCE 200809L  /* fmemopen */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gmm.h"

#define RTOL_F 1e-12     /* the objective against the reference */
#define RTOL_GRAD 1e-9   /* gradients against the reference (ADBench's tolerance) */
#define RTOL_PLAIN 1e-14 /* plain double against the recorded value */
#define D64_BATCH 50     /* points per gradient on d64: a tape of about 150 MB */

typedef struct dataset {
    const char *name;     /* file stem in GMM_DATA_DIR */
    const char *ref;      /* reference file suffix */
    size_t d, k, n;       /* sizes the file must have */
} dataset;

static const dataset gmm_test = {"gmm_test", "_manual", 2, 3, 1};
static const dataset d2 = {"gmm_1k_d2_K5", "_manual", 2, 5, 1000};
static const dataset d10 = {"gmm_1k_d10_K25", "_manual", 10, 25, 1000};
static const dataset d64 = {"gmm_1k_d64_K100", "_subset", 64, 100, 1000};

static const char *data_path(const char *stem, const char *suffix)
{
    static char path[4096];
    int len = snprintf(path, sizeof path, "%s/%s%s.txt", GMM_DATA_DIR, stem, suffix);
    assert_true(len > 0 && (size_t)len < sizeof path);
    return path;
}

typedef struct fixture {
    gmm_problem p;
    gmm_reference ref;
    gmm_work w;
    double *x, *grad;
    size_t inputs;
} fixture;

static void load(const dataset *ds, fixture *fx)
{
    char err[GMM_ERR_SIZE];
    if (gmm_load(data_path(ds->name, ""), &fx->p, err)) {
        print_error("%s\n", err);
        fail();
    }
    assert_int_equal(fx->p.d, ds->d);
    assert_int_equal(fx->p.k, ds->k);
    assert_int_equal(fx->p.n, ds->n);
    if (gmm_load_reference(data_path(ds->name, ds->ref), &fx->ref, err)) {
        print_error("%s\n", err);
        fail();
    }
    assert_true(gmm_reference_matches(&fx->ref, &fx->p));
    assert_int_equal(gmm_work_init(&fx->w, &fx->p), 0);
    fx->inputs = gmm_inputs(&fx->p);
    fx->x = malloc(fx->inputs * sizeof *fx->x);
    fx->grad = malloc(fx->inputs * sizeof *fx->grad);
    assert_non_null(fx->x);
    assert_non_null(fx->grad);
    gmm_pack(&fx->p, fx->x);
}

static void unload(fixture *fx)
{
    free(fx->x);
    free(fx->grad);
    gmm_work_free(&fx->w);
    gmm_reference_free(&fx->ref);
    gmm_free(&fx->p);
}

/* The reference's entries (all, or a subset) of the gradient. */
static void check_against_reference(const fixture *fx, double f, const double *grad)
{
    assert_near(f, fx->ref.objective, RTOL_F, 0.0);
    for (size_t e = 0; e < fx->ref.count; e++)
        assert_near(grad[fx->ref.index[e]], fx->ref.grad[e], RTOL_GRAD, 0.0);
}

/* ---- loading ---- */

static void test_load_values(void **state)
{
    (void)state;
    fixture fx;
    load(&gmm_test, &fx);
    assert_same(fx.p.alpha[2], -0.758453);
    assert_same(fx.p.mu[1 * 2 + 1], 0.396767);
    assert_same(fx.p.icf[2 * 3 + 2], -1.270071);
    assert_same(fx.p.x[1], 2.029160);
    assert_same(fx.p.gamma, 1.0);
    assert_int_equal(fx.p.m, 0);
    assert_int_equal(fx.inputs, 3 * 3 * 4 / 2);
    /* params: [alpha, mu, icf] */
    assert_same(fx.x[3 + 2], 0.345561);
    assert_same(fx.x[3 + 6 + 3], -1.509405);
    assert_int_equal(fx.ref.count, 18);
    assert_int_equal(fx.ref.index[17], 17);
    assert_same(fx.ref.objective, 8.07380408004975791e+00);
    unload(&fx);
}

static void test_load_subset_reference(void **state)
{
    (void)state;
    gmm_reference ref;
    char err[GMM_ERR_SIZE];
    if (gmm_load_reference(data_path(d64.name, d64.ref), &ref, err)) {
        print_error("%s\n", err);
        fail();
    }
    /* 5 components of 1 + 64 + 64 + 66 entries; the first and the last */
    assert_int_equal(ref.count, 5 * 195);
    assert_int_equal(ref.index[0], 0);
    assert_int_equal(ref.index[ref.count - 1], 214499);
    assert_same(ref.grad[0], 3.55887589661892001e+00);
    gmm_reference_free(&ref);
}

/* gmm_read on text; returns the message, which must name line `line`. */
static const char *read_bad(const char *text, int expect_errno, const char *line)
{
    static char err[GMM_ERR_SIZE];
    gmm_problem p;
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    assert_int_equal(gmm_read(f, "bad", &p, err), -1);
    assert_int_equal(errno, expect_errno);
    fclose(f);
    assert_null(p.alpha);
    assert_null(p.x);
    if (line && !strstr(err, line)) {
        print_error("message \"%s\" does not name %s\n", err, line);
        fail();
    }
    return err;
}

static void assert_mentions(const char *msg, const char *what)
{
    if (!strstr(msg, what)) {
        print_error("message \"%s\" does not mention \"%s\"\n", msg, what);
        fail();
    }
}

static void test_load_errors(void **state)
{
    (void)state;
    gmm_problem p;
    gmm_reference ref;
    char err[GMM_ERR_SIZE];
    assert_int_equal(gmm_load(data_path("no_such_file", ""), &p, err), -1);
    assert_int_equal(errno, ENOENT);
    assert_null(p.alpha);
    assert_mentions(err, "no_such_file");
    /* a reference is not a data file, and the other way round */
    assert_int_equal(gmm_load(data_path("gmm_test", "_manual"), &p, err), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(gmm_load_reference(data_path("gmm_test", ""), &ref, err), -1);
    assert_int_equal(errno, EINVAL);
    assert_null(ref.grad);

    const char *head = "2 2 1\n0.5\n-0.5\n1 2\n3 4\n";
    char text[256];
    assert_mentions(read_bad("2 0 1\n", EINVAL, "bad:1:"), "k (components)");
    assert_mentions(read_bad("2 2 1\n0.5\n", EINVAL, "bad:2:"), "alpha[1]");
    assert_mentions(read_bad("2 2 1\n0.5\n-0.5\n1 x\n", EINVAL, "bad:4:"), "mu[0][1]");
    snprintf(text, sizeof text, "%s0 0 0\n0 0 0\n9 9\n1 0 7\n", head);
    assert_mentions(read_bad(text, EINVAL, "bad:9:"), "after gamma and m");
    snprintf(text, sizeof text, "%s0 0 0\n0 0 0\n9 9\n0 0\n", head);
    assert_mentions(read_bad(text, EINVAL, "bad:9:"), "gamma");
    snprintf(text, sizeof text, "%s0 0 0\n0 0 0\n9 9\n1 -1\n", head);
    assert_mentions(read_bad(text, EINVAL, "bad:9:"), "m (Wishart)");
    snprintf(text, sizeof text, "%s0 0 0\n0 0 0\n9 inf\n1 0\n", head);
    assert_mentions(read_bad(text, EINVAL, "bad:8:"), "x[0][1]");
    /* and a good one */
    snprintf(text, sizeof text, "%s0 0 0\n0 0 0\n9 9\n1 0\n", head);
    FILE *f = fmemopen(text, strlen(text), "r");
    assert_non_null(f);
    assert_int_equal(gmm_read(f, "good", &p, err), 0);
    fclose(f);
    assert_same(p.x[1], 9.0);
    gmm_free(&p);
}

static const char *read_bad_reference(const char *text, const char *line)
{
    static char err[GMM_ERR_SIZE];
    gmm_reference ref;
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    assert_int_equal(gmm_read_reference(f, "ref", &ref, err), -1);
    assert_int_equal(errno, EINVAL);
    fclose(f);
    assert_null(ref.index);
    assert_mentions(err, line);
    return err;
}

/* d k n = 1 1 1: 3 gradient entries */
#define REF_HEAD "# d k n gamma m = 1 1 1 1 0\n1.5\n1.5\n"

static void test_reference_errors(void **state)
{
    (void)state;
    assert_mentions(read_bad_reference("1.5\n", "ref:1:"), "header");
    assert_mentions(read_bad_reference(REF_HEAD "1\n2\n", "ref:5:"), "expected k(d+1)(d+2)/2 = 3");
    assert_mentions(read_bad_reference(REF_HEAD "1\n2 3\n", "ref:5:"), "first gradient line");
    assert_mentions(read_bad_reference(REF_HEAD "1 0.5\n0 0.5\n", "ref:5:"), "ascending");
    assert_mentions(read_bad_reference(REF_HEAD "3 0.5\n", "ref:4:"), "below 3");
    assert_mentions(read_bad_reference(REF_HEAD "0 nan\n", "ref:4:"), "finite");
    assert_mentions(read_bad_reference("# d k n gamma m = 1 1 1 1 0\n1.5\n", "ref:2:"),
                    "two objectives");
    char text[1024];
    memset(text, '1', sizeof text - 1);
    text[sizeof text - 1] = '\0';
    memcpy(text, REF_HEAD, strlen(REF_HEAD));
    assert_mentions(read_bad_reference(text, "ref:4:"), "too long");

    /* a long comment is fine */
    gmm_reference ref;
    char err[GMM_ERR_SIZE];
    memset(text, 'x', sizeof text - 1);
    text[0] = '#';
    snprintf(text + 600, sizeof text - 600, "\n%s0.5\n1\n2\n", REF_HEAD);
    FILE *f = fmemopen(text, strlen(text), "r");
    assert_non_null(f);
    if (gmm_read_reference(f, "ref", &ref, err)) {
        print_error("%s\n", err);
        fail();
    }
    fclose(f);
    assert_int_equal(ref.count, 3);
    assert_same(ref.grad[2], 2.0);
    assert_same(ref.objective, 1.5);
    gmm_reference_free(&ref);
}

/* ---- values and gradients ---- */

static double whole_objective(fixture *fx, gmm_version v)
{
    gmm_eval e = {&fx->p, &fx->w, v, 0, fx->p.n, 1};
    return gmm_objective(&e, fx->x);
}

/* One gradient of the whole problem, then batches of 7 points. */
static void gradient_case(const dataset *ds, gmm_version v)
{
    fixture fx;
    load(ds, &fx);
    double f, fb, plain = whole_objective(&fx, v);
    double *batched = malloc(fx.inputs * sizeof *batched);
    assert_non_null(batched);

    assert_ok(gmm_gradient(v, &fx.p, &fx.w, 0, fx.x, &f, fx.grad, NULL));
    check_against_reference(&fx, f, fx.grad);
    assert_near(plain, f, RTOL_PLAIN, 0.0);
    assert_near(plain, fx.ref.objective, RTOL_F, 0.0);

    /* The batches' sums are added in another order than one tape's: equal
     * to rounding, relative to the gradient's scale. */
    double scale = 0.0;
    for (size_t j = 0; j < fx.inputs; j++)
        scale = fmax(scale, fabs(fx.grad[j]));
    assert_ok(gmm_gradient(v, &fx.p, &fx.w, 7, fx.x, &fb, batched, NULL));
    assert_near(fb, f, 1e-14, 0.0);
    for (size_t j = 0; j < fx.inputs; j++)
        assert_near(batched[j], fx.grad[j], 1e-12, 1e-14 * scale);
    free(batched);
    unload(&fx);
}

static void test_scalar_gmm_test(void **state)
{
    (void)state;
    gradient_case(&gmm_test, GMM_SCALAR);
}

static void test_primitives_gmm_test(void **state)
{
    (void)state;
    gradient_case(&gmm_test, GMM_PRIMITIVES);
}

static void test_scalar_d2(void **state)
{
    (void)state;
    gradient_case(&d2, GMM_SCALAR);
}

static void test_primitives_d2(void **state)
{
    (void)state;
    gradient_case(&d2, GMM_PRIMITIVES);
}

static void test_scalar_d10(void **state)
{
    (void)state;
    gradient_case(&d10, GMM_SCALAR);
}

static void test_primitives_d10(void **state)
{
    (void)state;
    gradient_case(&d10, GMM_PRIMITIVES);
}

/* The parts of a split objective (points in pieces, the global terms with
 * one of them) add up to the whole, in plain double and recorded. */
static void test_parts_add_up(void **state)
{
    (void)state;
    fixture fx;
    load(&d2, &fx);
    for (int v = GMM_SCALAR; v <= GMM_PRIMITIVES; v++) {
        gmm_eval head = {&fx.p, &fx.w, (gmm_version)v, 0, 400, 1};
        gmm_eval tail = {&fx.p, &fx.w, (gmm_version)v, 400, 1000, 0};
        gmm_eval none = {&fx.p, &fx.w, (gmm_version)v, 0, 0, 1};
        double whole = whole_objective(&fx, (gmm_version)v);
        assert_near(gmm_objective(&head, fx.x) + gmm_objective(&tail, fx.x), whole, 1e-14, 0.0);
        /* no points: the global terms alone, which the points' sum completes */
        double f, g = gmm_objective(&none, fx.x);
        gmm_eval points = {&fx.p, &fx.w, (gmm_version)v, 0, 1000, 0};
        assert_near(g + gmm_objective(&points, fx.x), whole, 1e-14, 0.0);
        f = gradient_ok(gmm_objective_ad, &tail, fx.inputs, fx.x, fx.grad);
        assert_near(f, gmm_objective(&tail, fx.x), RTOL_PLAIN, 0.0);
    }
    unload(&fx);
}

/* The primitive version's tape is the smaller by more than half. */
static void test_primitives_tape_smaller(void **state)
{
    (void)state;
    fixture fx;
    ad_tape_stats st;
    size_t records[2];
    load(&d10, &fx);
    gmm_eval e = {&fx.p, &fx.w, GMM_SCALAR, 0, 50, 1};
    for (int v = GMM_SCALAR; v <= GMM_PRIMITIVES; v++) {
        e.version = (gmm_version)v;
        gradient_ok(gmm_objective_ad, &e, fx.inputs, fx.x, fx.grad);
        assert_ok(ad_tape_stats_get(&st));
        records[v] = st.records;
    }
    assert_true(2 * records[GMM_PRIMITIVES] < records[GMM_SCALAR]);
    unload(&fx);
}

static void test_primitives_d64_batched(void **state)
{
    (void)state;
    fixture fx;
    double f;
    load(&d64, &fx);
    assert_ok(gmm_gradient(GMM_PRIMITIVES, &fx.p, &fx.w, D64_BATCH, fx.x, &f, fx.grad, NULL));
    /* (plain double against recorded is checked on d2 and d10: on d64 it
     * would add a tenth to the time of this test under AddressSanitizer) */
    check_against_reference(&fx, f, fx.grad);
    unload(&fx);
    /* the tape of a d64 batch is large; give it back to the other tests */
    assert_ok(ad_release());
}

/* A failing batch: its status, and NaN everywhere. */
static void test_gradient_error(void **state)
{
    (void)state;
    fixture fx;
    double f;
    load(&d2, &fx);
    size_t old = ad_set_tape_limit(1000);
    ad_status s = gmm_gradient(GMM_PRIMITIVES, &fx.p, &fx.w, 100, fx.x, &f, fx.grad, NULL);
    ad_set_tape_limit(old);
    assert_int_equal(s, AD_ERANGE);
    assert_all_nan(f, fx.grad, fx.inputs);
    unload(&fx);
}

/* ---- the sparse Hessian ---- */

/* d2_K5's whole objective, scalar version: ad_sparse_hessian against the
 * dense ad_hessian, values to 1e-12 of the largest entry and the
 * structure equal to the dense nonzero pattern (every component's
 * parameters meet the others' in the log-sum-exp over components); the
 * same for the primitive version, with its recorded matrices. */
static void test_sparse_hessian_d2(void **state)
{
    fixture fx;
    (void)state;
    load(&d2, &fx);
    size_t n = fx.inputs;
    gmm_eval e = {&fx.p, &fx.w, GMM_SCALAR, 0, fx.p.n, 1};
    double f, fd, *g = malloc(n * sizeof *g), *gd = malloc(n * sizeof *gd);
    double *hd = malloc(n * n * sizeof *hd);
    assert_true(g && gd && hd);
    ad_csr H;
    assert_ok(ad_sparse_hessian(gmm_objective_ad, &e, n, fx.x, &f, g, &H));
    assert_csr_valid(&H, n, n);
    assert_ok(ad_hessian(gmm_objective_ad, &e, n, fx.x, &fd, gd, hd));
    assert_same(f, fd);
    double scale = 0.0;
    for (size_t k = 0; k < n * n; k++)
        scale = fmax(scale, fabs(hd[k]));
    size_t dense_nnz = 0;
    for (size_t r = 0; r < n; r++)
        for (size_t c = 0; c <= r; c++)
            dense_nnz += hd[r * n + c] != 0.0;
    assert_int_equal(H.nnz, dense_nnz);
    for (size_t r = 0; r < n; r++) {
        assert_near(g[r], gd[r], 1e-12, 1e-14 * scale);
        for (size_t k = H.row_ptr[r]; k < H.row_ptr[r + 1]; k++) {
            assert_true(H.col[k] <= r);
            assert_true(hd[r * n + H.col[k]] != 0.0);
            assert_near(H.val[k], hd[r * n + H.col[k]], 1e-12, 1e-12 * scale);
        }
    }
    ad_csr_free(&H);
    e.version = GMM_PRIMITIVES;
    double fp, *gp = malloc(n * sizeof *gp);
    assert_non_null(gp);
    assert_ok(ad_sparse_hessian(gmm_objective_ad, &e, n, fx.x, &fp, gp, &H));
    assert_near(fp, f, 1e-13, 0.0);
    assert_int_equal(H.nnz, dense_nnz);
    for (size_t r = 0; r < n; r++) {
        assert_near(gp[r], gd[r], 1e-12, 1e-13 * scale);
        for (size_t k = H.row_ptr[r]; k < H.row_ptr[r + 1]; k++)
            assert_near(H.val[k], hd[r * n + H.col[k]], 1e-12, 1e-12 * scale);
    }
    ad_csr_free(&H);
    free(gp);
    free(g), free(gd), free(hd);
    unload(&fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_values),
        cmocka_unit_test(test_load_subset_reference),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_reference_errors),
        cmocka_unit_test(test_scalar_gmm_test),
        cmocka_unit_test(test_primitives_gmm_test),
        cmocka_unit_test(test_scalar_d2),
        cmocka_unit_test(test_primitives_d2),
        cmocka_unit_test(test_scalar_d10),
        cmocka_unit_test(test_primitives_d10),
        cmocka_unit_test(test_parts_add_up),
        cmocka_unit_test(test_primitives_tape_smaller),
        cmocka_unit_test(test_gradient_error),
        cmocka_unit_test(test_primitives_d64_batched),
        cmocka_unit_test(test_sparse_hessian_d2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
