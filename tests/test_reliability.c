/* Regression tests for issue 30: defects found by a reliability review,
 * one test case each.
 *
 * Oracles (never the library itself):
 *   prod_enomem      the closed-form Hessian of f = |A v|^2 / 2, A and v
 *                    inputs, A recorded (ad_mat_make) and multiplied by v
 *                    (ad_mat_vec): a product block whose edge-pushing
 *                    partials fill an array that grows several times;
 *                    allocation failure injected at every point;
 *   fresh_thread     x0 x1 by hand, on a thread that has never recorded;
 *   loop_written_out the same steps written out in C and recorded plainly:
 *                    every driver through ad_checkpointed_loop gives what
 *                    it gives there (0 * sqrt(0) is NaN: conventions.md);
 *   out_of_range     closed forms of log(exp(x0)) x1 and
 *                    pow(cbrt(pow(4, x0)), x1) = exp(c x0 x1), c = ln 4 / 3,
 *                    in long double;
 *   sparse_scaled    the closed form 2 * 1e300 * 3e-160 * 3e-160 in long
 *                    double;
 *   fault_name,      docs/api.md ("ad_fault": "matrix-vector product";
 *   fault_label      "ad_where": the label of the call that set it);
 *   ode              GradBench's ode (RK4) against forward mode on long
 *                    double dual numbers, one direction per checked entry.
 * Where a result cannot be represented on doubles along the way, a failing
 * status with NaN outputs is accepted, but never AD_OK with a wrong or NaN
 * result. */
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "../lib/drivers/testing.h"

/* ---- helpers ---- */

/* A junk CSR, as a caller's uninitialised one. */
static void junk(ad_csr *H)
{
    memset(H, 0xa5, sizeof *H);
}

/* The lower triangle of H into the row-major n x n d (0 where H has no
 * entry); there[r n + c] = 1 where it has one. */
static void csr_lower(const ad_csr *H, size_t n, double *d, unsigned char *there)
{
    for (size_t k = 0; k < n * n; k++)
        d[k] = 0.0, there[k] = 0;
    for (size_t r = 0; r < n; r++)
        for (size_t e = H->row_ptr[r]; e < H->row_ptr[r + 1]; e++)
            d[r * n + H->col[e]] = H->val[e], there[r * n + H->col[e]] = 1;
}

static int all_nan(const double *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isnan(p[i]))
            return 0;
    return 1;
}

/* got within rtol |want| + atol of want (never for a NaN or Inf got). */
static int near(double got, long double want, double rtol, double atol)
{
    return isfinite(got) && fabsl((long double)got - want) <= rtol * fabsl(want) + atol;
}

/* ======================================================================
 * 1. ad_sparse_hessian (and _values) through a product block, out of
 *    memory at every allocation
 * ====================================================================== */

#define PM 12                  /* A is PM x PM: 2 PM partials per output, 288 in all */
#define PN (PM * PM + PM)      /* inputs: A row-major, then v */

/* f = |A v|^2 / 2. */
static ad_real product_norm(const ad_real *x, size_t n, void *ctx)
{
    ad_mat M;
    ad_real y[PM];
    (void)n, (void)ctx;
    status_unused(ad_mat_make(PM, PM, x, &M));
    ad_mat_vec(&M, x + PM * PM, y);
    return ad_mul(0.5, ad_sqnorm(PM, y));
}

/* Its gradient and (lower) Hessian in closed form: with y = A v,
 * df/dA_jl = y_j v_l, df/dv_l = sum_j y_j A_jl; d2f/dA_jl dA_jk = v_l v_k,
 * d2f/dA_jl dv_k = A_jk v_l + y_j [l = k], d2f/dv_l dv_k = sum_j A_jl A_jk;
 * 0 between rows j != i of A. */
static void product_norm_exact(const double *x, double *fx, double *g, double *h)
{
    const double *A = x, *v = x + PM * PM;
    double y[PM], f = 0.0;
    for (size_t j = 0; j < PM; j++) {
        y[j] = 0.0;
        for (size_t l = 0; l < PM; l++)
            y[j] += A[j * PM + l] * v[l];
        f += y[j] * y[j];
    }
    *fx = 0.5 * f;
    for (size_t k = 0; k < PN * PN; k++)
        h[k] = 0.0;
    for (size_t l = 0; l < PM; l++) {
        double s = 0.0;
        for (size_t j = 0; j < PM; j++)
            s += y[j] * A[j * PM + l];
        g[PM * PM + l] = s;
        for (size_t k = 0; k <= l; k++) {
            double d = 0.0;
            for (size_t j = 0; j < PM; j++)
                d += A[j * PM + l] * A[j * PM + k];
            h[(PM * PM + l) * PN + PM * PM + k] = d;
        }
    }
    for (size_t j = 0; j < PM; j++)
        for (size_t l = 0; l < PM; l++) {
            size_t a = j * PM + l;
            g[a] = y[j] * v[l];
            for (size_t k = 0; k <= l; k++)
                h[a * PN + j * PM + k] = v[l] * v[k];
            for (size_t k = 0; k < PM; k++)  /* row PM^2 + k, column a: below the diagonal */
                h[(PM * PM + k) * PN + a] = A[j * PM + k] * v[l] + (l == k ? y[j] : 0.0);
        }
}

/* A successful call's results against the closed form: every entry of the
 * lower triangle to 1e-13 of the largest (sums of PM products of numbers
 * in [0.5, 1.5]), and an entry in H's structure wherever the exact
 * Hessian is not 0, none where the product's structure has none. */
static void check_product_norm(const double *x, double fx, const double *g, const ad_csr *H)
{
    static double want[PN * PN], got[PN * PN], wg[PN];
    static unsigned char there[PN * PN];
    double wf, scale = 0.0;
    product_norm_exact(x, &wf, wg, want);
    assert_near(fx, wf, 1e-13, 0.0);
    for (size_t i = 0; i < PN; i++)
        assert_near(g[i], wg[i], 1e-13, 1e-13 * fabs(wf));
    assert_csr_valid(H, PN, PN);
    csr_lower(H, PN, got, there);
    for (size_t k = 0; k < PN * PN; k++)
        scale = fmax(scale, fabs(want[k]));
    for (size_t r = 0; r < PN; r++)
        for (size_t c = 0; c <= r; c++) {
            assert_near(got[r * PN + c], want[r * PN + c], 1e-13, 1e-13 * scale);
            if (want[r * PN + c] != 0.0 && !there[r * PN + c])
                fail_msg("H(%zu, %zu) = %g is not in the structure", r, c, want[r * PN + c]);
            int other_rows = r < PM * PM && c < PM * PM && r / PM != c / PM;
            if (other_rows && there[r * PN + c])
                fail_msg("H(%zu, %zu): rows %zu and %zu of A do not interact", r, c, r / PM,
                         c / PM);
        }
}

/* ad_sparse_hessian (values = 0) or ad_sparse_hessian_values into the
 * structure S (values = 1), made to fail at allocation k = 0, 1, 2, ...
 * on a released thread until a call needs fewer: each failure is AD_ENOMEM
 * with NaN fx and gradient, and an empty H (ad_sparse_hessian) or NaN
 * values in S's unchanged structure (_values); the next call, with nothing
 * injected and the memory the failed call left, is right. */
static void prod_enomem(const double *x, int values, ad_csr *S)
{
    static size_t row_ptr[PN + 1], col[PN * (PN + 1) / 2];
    double fx, g[PN];
    int successes = 0, failures = 0;
    if (values) {  /* S's structure, to see that it does not change */
        assert_true(S->nnz <= PN * (PN + 1) / 2);
        memcpy(row_ptr, S->row_ptr, (PN + 1) * sizeof *row_ptr);
        memcpy(col, S->col, S->nnz * sizeof *col);
    }
    for (long k = 0; !successes; k++) {
        ad_csr H;
        ad_csr *out = values ? S : &H;
        if (!values)
            junk(&H);
        assert_int_equal(ad_release(), AD_OK);
        ad_test_fail_alloc_after(k);
        ad_status s = values ? ad_sparse_hessian_values(product_norm, NULL, PN, x, &fx, g, S)
                             : ad_sparse_hessian(product_norm, NULL, PN, x, &fx, g, &H);
        ad_test_fail_alloc_after(-1);
        if (s == AD_OK) {
            successes = 1;
        } else {
            assert_alloc_failure(k, s, successes);
            failures++;
            assert_nan(fx);
            assert_true(all_nan(g, PN));
            if (values)
                assert_true(all_nan(S->val, S->nnz));
            else
                assert_csr_empty(&H);
            /* the next call, on what the failed one left */
            s = values ? ad_sparse_hessian_values(product_norm, NULL, PN, x, &fx, g, S)
                       : ad_sparse_hessian(product_norm, NULL, PN, x, &fx, g, &H);
            if (s != AD_OK)
                fail_msg("the call after a failure at allocation %ld: status %d (%s)", k, (int)s,
                         ad_strerror(s));
        }
        if (values) {
            assert_int_equal(S->nnz, row_ptr[PN]);
            assert_memory_equal(S->row_ptr, row_ptr, (PN + 1) * sizeof *row_ptr);
            assert_memory_equal(S->col, col, S->nnz * sizeof *col);
        }
        check_product_norm(x, fx, g, out);
        if (!values)
            ad_csr_free(&H);
    }
    assert_true(failures >= 8);  /* the partials' arrays grow 4 times each */
}

static void test_sparse_hessian_prod_enomem(void **state)
{
    static double x[PN];
    uint64_t rng = 30;
    double fx, g[PN];
    ad_csr S;
    (void)state;
    fill_uniform(&rng, x, PN, 0.5, 1.5);
    prod_enomem(x, 0, NULL);
    assert_int_equal(ad_sparse_hessian(product_norm, NULL, PN, x, &fx, g, &S), AD_OK);
    prod_enomem(x, 1, &S);
    ad_csr_free(&S);
}

/* ======================================================================
 * 2. ad_sparse_hessian on a thread that has never recorded (under UBSan:
 *    an empty row sorted with qsort(NULL, 0, ...))
 * ====================================================================== */

static ad_real x0_times_x1(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(x[0], x[1]);
}

typedef struct fresh_call {
    ad_status status;
    double fx, g[2], h[4];
    unsigned char there[4];
    size_t nnz;
} fresh_call;

static void *sparse_hessian_on_thread(void *arg)
{
    fresh_call *c = arg;
    const double x[2] = {3.0, 5.0};
    ad_csr H;
    c->status = ad_sparse_hessian(x0_times_x1, NULL, 2, x, &c->fx, c->g, &H);
    if (c->status == AD_OK) {
        c->nnz = H.nnz;
        csr_lower(&H, 2, c->h, c->there);
        ad_csr_free(&H);
    }
    return NULL;
}

static void test_sparse_hessian_fresh_thread(void **state)
{
    fresh_call c;
    pthread_t t;
    (void)state;
    memset(&c, 0, sizeof c);
    assert_int_equal(pthread_create(&t, NULL, sparse_hessian_on_thread, &c), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(c.status, AD_OK);
    assert_same(c.fx, 15.0);
    assert_same(c.g[0], 5.0);
    assert_same(c.g[1], 3.0);
    /* lower triangle [[0], [1, 0]]: one entry, (1, 0) */
    assert_int_equal(c.nnz, 1);
    assert_true(c.there[1 * 2 + 0]);
    assert_same(c.h[1 * 2 + 0], 1.0);
    assert_same(c.h[0 * 2 + 0], 0.0);
    assert_same(c.h[1 * 2 + 1], 0.0);
}

/* ======================================================================
 * 3. A checkpointed loop gives what the loop written out gives
 * ====================================================================== */

/* (a, b) -> (a, sqrt(a)) */
static void sqrt_step(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *params,
                      size_t np, void *ctx)
{
    (void)k, (void)n, (void)params, (void)np, (void)ctx;
    next[0] = s[0];
    next[1] = ad_sqrt(s[0]);
}

typedef struct loop_case {
    size_t steps, snaps;
    int loop;   /* 1: ad_checkpointed_loop; 0: the steps written out */
    int outs;   /* outputs of the vector form: 1 (Jacobian by rows) or 2 (by columns) */
} loop_case;

/* state_N from state0 = (x0, x1), as the case says. */
static void run_steps(const loop_case *L, const ad_real *x, ad_real *sN)
{
    if (L->loop) {
        status_unused(ad_checkpointed_loop(sqrt_step, NULL, L->steps, L->snaps, 2, x, 0, NULL, sN));
        return;
    }
    ad_real s[2] = {x[0], x[1]}, next[2];
    for (size_t k = 0; k < L->steps; k++) {
        sqrt_step(k, s, next, 2, NULL, 0, NULL);
        s[0] = next[0], s[1] = next[1];
    }
    sN[0] = s[0], sN[1] = s[1];
}

/* f = a_N + 0 b_N */
static ad_real loop_objective(const ad_real *x, size_t n, void *ctx)
{
    ad_real sN[2];
    (void)n;
    run_steps(ctx, x, sN);
    return ad_add(sN[0], ad_mul(0.0, sN[1]));
}

/* y = (a_N + 0 b_N) or (a_N + 0 b_N, a_N) */
static void loop_function(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    ad_real sN[2];
    (void)n;
    run_steps(ctx, x, sN);
    y[0] = ad_add(sN[0], ad_mul(0.0, sN[1]));
    if (m > 1)
        y[1] = sN[0];
}

/* Everything the drivers give for one case, NaN for what a call did not
 * write.  sj: ad_sparse_jacobian as a dense m x 2 matrix. */
#define LOOP_RESULTS 29
typedef struct loop_results {
    double v[LOOP_RESULTS];
    ad_status st[6];
} loop_results;

static const char *const loop_result_name[LOOP_RESULTS] = {
    "gradient f", "gradient g0", "gradient g1",
    "jacobian y0", "jacobian y1", "jacobian J00", "jacobian J01", "jacobian J10", "jacobian J11",
    "sparse_jacobian y0", "sparse_jacobian y1", "sparse_jacobian J00", "sparse_jacobian J01",
    "sparse_jacobian J10", "sparse_jacobian J11",
    "hvp(e0) f", "hvp(e0) g0", "hvp(e0) g1", "hvp(e0) Hv0", "hvp(e0) Hv1",
    "hvp(e1) Hv0", "hvp(e1) Hv1",
    "hessian f", "hessian g0", "hessian g1", "hessian H00", "hessian H01", "hessian H10",
    "hessian H11"};

static const char *const loop_driver_name[6] = {"ad_gradient", "ad_jacobian",
                                                 "ad_sparse_jacobian", "ad_hvp(e0)",
                                                 "ad_hvp(e1)", "ad_hessian"};

static void loop_drive(loop_case *L, const double *x, loop_results *r)
{
    double *v = r->v, fx, g[2];
    const double e0[2] = {1.0, 0.0}, e1[2] = {0.0, 1.0};
    size_t m = (size_t)L->outs;
    ad_csr J;
    fill(v, LOOP_RESULTS, NAN);
    r->st[0] = ad_gradient(loop_objective, L, 2, x, &v[0], &v[1]);
    r->st[1] = ad_jacobian(loop_function, L, 2, x, m, &v[3], &v[5]);
    r->st[2] = ad_sparse_jacobian(loop_function, L, 2, x, m, &v[9], &J);
    if (r->st[2] == AD_OK) {
        fill(&v[11], 4, 0.0);
        for (size_t row = 0; row < m; row++)
            for (size_t e = J.row_ptr[row]; e < J.row_ptr[row + 1]; e++)
                v[11 + row * 2 + J.col[e]] = J.val[e];
        ad_csr_free(&J);
    }
    r->st[3] = ad_hvp(loop_objective, L, 2, x, e0, &v[15], &v[16], &v[18]);
    r->st[4] = ad_hvp(loop_objective, L, 2, x, e1, &fx, g, &v[20]);
    r->st[5] = ad_hessian(loop_objective, L, 2, x, &v[22], &v[23], &v[25]);
}

static void test_checkpointed_loop_written_out(void **state)
{
    static const size_t steps[] = {1, 2, 5}, snaps[] = {0, 1, 2, 5};
    const double x[2] = {0.0, 1.0};
    int mismatches = 0;
    (void)state;
    for (int outs = 1; outs <= 2; outs++)
        for (size_t i = 0; i < sizeof steps / sizeof *steps; i++)
            for (size_t j = 0; j < sizeof snaps / sizeof *snaps; j++) {
                loop_case plain = {steps[i], snaps[j], 0, outs}, loop = plain;
                loop_results want, got;
                loop.loop = 1;
                loop_drive(&plain, x, &want);
                loop_drive(&loop, x, &got);
                /* the oracle is the convention: d/da (a + 0 sqrt(a)) at 0 is NaN */
                assert_int_equal(want.st[0], AD_OK);
                assert_nan(want.v[1]);
                assert_same(want.v[2], 0.0);
                for (int d = 0; d < 6; d++)
                    if (got.st[d] != want.st[d]) {
                        print_error("steps %zu, snapshots %zu, %d outputs: %s status %d, "
                                    "written out %d\n", steps[i], snaps[j], outs,
                                    loop_driver_name[d], (int)got.st[d], (int)want.st[d]);
                        mismatches++;
                    }
                for (int k = 0; k < LOOP_RESULTS; k++)
                    if (!same_double(got.v[k], want.v[k])) {
                        print_error("steps %zu, snapshots %zu, %d outputs: %s = %.17g, "
                                    "written out %.17g\n", steps[i], snaps[j], outs,
                                    loop_result_name[k], got.v[k], want.v[k]);
                        mismatches++;
                    }
            }
    assert_int_equal(mismatches, 0);
}

/* ======================================================================
 * 4. Second partials whose formulas leave the double range
 * ====================================================================== */

/* log(exp(x0)) x1 */
static ad_real log_exp(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(ad_log(ad_exp(x[0])), x[1]);
}

/* pow(cbrt(pow(4, x0)), x1) */
static ad_real pow_cbrt(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_pow(ad_cbrt(ad_pow(4.0, x[0])), x[1]);
}

typedef struct exact2 {
    long double f, g[2], h[4];
    double rtol, atol_h;  /* atol_h: for the entries whose exact value is 0 */
} exact2;

/* One driver's outcome: AD_OK with every output finite and within
 * tolerance of the closed form, or a failure with every output NaN. */
static int check_outcome(const char *driver, ad_status s, const double *out, const long double *want,
                         size_t count, const exact2 *e)
{
    if (s != AD_OK) {
        if (all_nan(out, count))
            return 0;
        print_error("%s: status %d (%s) with outputs that are not NaN\n", driver, (int)s,
                    ad_strerror(s));
        return 1;
    }
    int bad = 0;
    for (size_t k = 0; k < count; k++)
        if (!near(out[k], want[k], e->rtol, want[k] == 0.0L ? e->atol_h : 0.0)) {
            print_error("%s: AD_OK, output %zu = %.17g, exact %.17Lg\n", driver, k, out[k],
                        want[k]);
            bad++;
        }
    return bad;
}

/* ad_hessian, ad_hvp (e0, e1) and ad_sparse_hessian at x against e. */
static void check_second_order(ad_objective f, const double x[2], const exact2 *e)
{
    long double want[7] = {e->f, e->g[0], e->g[1], e->h[0], e->h[1], e->h[2], e->h[3]};
    double out[7], dense[7], sparse[7];
    unsigned char there[4];
    int bad = 0;
    /* ad_hessian: f, g, H */
    ad_status s = ad_hessian(f, NULL, 2, x, &dense[0], &dense[1], &dense[3]);
    bad += check_outcome("ad_hessian", s, dense, want, 7, e);
    /* ad_hvp with e0 and e1: f, g, a column of H */
    for (int c = 0; c < 2; c++) {
        const double v[2] = {c == 0, c == 1};
        long double wc[5] = {e->f, e->g[0], e->g[1], e->h[c], e->h[2 + c]};
        s = ad_hvp(f, NULL, 2, x, v, &out[0], &out[1], &out[3]);
        bad += check_outcome(c ? "ad_hvp(e1)" : "ad_hvp(e0)", s, out, wc, 5, e);
    }
    /* ad_sparse_hessian: f, g, the lower triangle (mirrored) */
    ad_csr H;
    s = ad_sparse_hessian(f, NULL, 2, x, &sparse[0], &sparse[1], &H);
    if (s == AD_OK) {
        csr_lower(&H, 2, &sparse[3], there);
        sparse[4] = sparse[5];
        ad_csr_free(&H);
    } else {
        assert_csr_empty(&H);
        fill(&sparse[3], 4, NAN);
    }
    bad += check_outcome("ad_sparse_hessian", s, sparse, want, 7, e);
    /* dense and sparse agree wherever both are finite */
    for (int k = 0; k < 7; k++)
        if (isfinite(dense[k]) && isfinite(sparse[k]) &&
            fabs(dense[k] - sparse[k]) > e->rtol * fmax(fabs(dense[k]), fabs(sparse[k])) +
                                             (want[k] == 0.0L ? 2.0 * e->atol_h : 0.0)) {
            print_error("output %d: ad_hessian %.17g, ad_sparse_hessian %.17g\n", k, dense[k],
                        sparse[k]);
            bad++;
        }
    assert_int_equal(bad, 0);
}

static void test_second_partials_out_of_range(void **state)
{
    (void)state;
    /* log(exp(x0)) x1 at (700, 2): exp(700) = 1.0e304, its square is not
     * a double.  H = [[0, 1], [1, 0]]; the exact zero H00 is the difference
     * of two terms of size x1 = 2 (1/u u'' and 1/u^2 u'^2), each a few
     * roundings: a few ulps of 2 absolute (64 allowed). */
    const double a[2] = {700.0, 2.0};
    exact2 e = {1400.0L, {2.0L, 700.0L}, {0.0L, 1.0L, 1.0L, 0.0L}, 1e-13, 64 * 2.0 * DBL_EPSILON};
    check_second_order(log_exp, a, &e);

    /* pow(cbrt(pow(4, x0)), x1) at (440.73, -1.86) = exp(c x0 x1),
     * c = ln(4)/3: 4^x0 = 1e265, cbrt of it 4.7e88, its power -3.86 (in
     * pow's second partial) below the double range.  H00 = (c x1)^2 f,
     * H01 = (c + c^2 x0 x1) f, H11 = (c x0)^2 f, f = 1.6e-165.  The relative
     * condition of f and of each entry to a rounding of an intermediate is
     * |c x0 x1| = 379 at most, so a few dozen roundings on the way stay
     * below 1e-10. */
    const double b[2] = {440.73, -1.86};
    long double c = logl(4.0L) / 3.0L, x0 = b[0], x1 = b[1], f = expl(c * x0 * x1);
    exact2 p = {f, {c * x1 * f, c * x0 * f},
                {c * x1 * c * x1 * f, (c + c * c * x0 * x1) * f, (c + c * c * x0 * x1) * f,
                 c * x0 * c * x0 * f},
                1e-10, 0.0};
    check_second_order(pow_cbrt, b, &p);
}

/* ======================================================================
 * 5. The sparse Hessian's sweep is scaled like the others'
 * ====================================================================== */

/* ((x x) 1e300) 3e-160) 3e-160, in this order: the cotangent of x x is
 * 9e-320, a subnormal number, without the seeds' scaling. */
static ad_real scaled_square(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(ad_mul(ad_mul(ad_mul(x[0], x[0]), 1e300), 3e-160), 3e-160);
}

static void test_sparse_hessian_scaled(void **state)
{
    /* f' = f'' = 2 * 1e300 * 3e-160 * 3e-160 at x = 1 (the doubles nearest
     * those constants), in long double: within an ulp after rounding; each
     * driver rounds four products (2x, then the three constants), 2 ulps.
     * 4 ulps allowed. */
    const double x[1] = {1.0};
    const long double exact = 2.0L * (long double)1e300 * (long double)3e-160 *
                              (long double)3e-160;
    const double rtol = 4 * DBL_EPSILON, want_f = 1e300 * 3e-160 * 3e-160;
    double fx, g[1], h[1];
    ad_csr H;
    (void)state;
    assert_int_equal(ad_gradient(scaled_square, NULL, 1, x, &fx, g), AD_OK);
    assert_near(g[0], (double)exact, rtol, 0.0);
    assert_int_equal(ad_hessian(scaled_square, NULL, 1, x, &fx, g, h), AD_OK);
    assert_near(g[0], (double)exact, rtol, 0.0);
    assert_near(h[0], (double)exact, rtol, 0.0);
    assert_int_equal(ad_sparse_hessian(scaled_square, NULL, 1, x, &fx, g, &H), AD_OK);
    size_t nnz = H.nnz;
    h[0] = nnz == 1 ? H.val[0] : NAN;
    ad_csr_free(&H);
    assert_same(fx, want_f);
    assert_near(g[0], (double)exact, rtol, 0.0);
    assert_int_equal(nnz, 1);
    assert_near(h[0], (double)exact, rtol, 0.0);
}

/* ======================================================================
 * 6. Fault reports
 * ====================================================================== */

/* A recorded 2 x 2 matrix of x0 .. x3 times (x4, x5): 1e308 * 10 twice
 * overflows while the product is recorded. */
static ad_real overflowing_product(const ad_real *x, size_t n, void *ctx)
{
    ad_mat M;
    ad_real y[2];
    (void)n, (void)ctx;
    ad_where("the product");
    status_unused(ad_mat_make(2, 2, x, &M));
    ad_mat_vec(&M, x + 4, y);
    ad_where(NULL);
    return ad_add(y[0], y[1]);
}

static void test_fault_name_matrix_product(void **state)
{
    const double x[6] = {1e308, 1e308, 1e308, 1e308, 10.0, 10.0};
    double fx, g[6];
    ad_fault f;
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    assert_int_equal(ad_gradient(overflowing_product, NULL, 6, x, &fx, g), AD_ENONFINITE);
    ad_set_checks(old);
    assert_all_nan(fx, g, 6);
    memset(&f, 0, sizeof f);
    assert_int_equal(ad_last_fault(&f), AD_OK);
    assert_non_null(f.op);
    assert_string_equal(f.op, "matrix-vector product");  /* docs/api.md, ad_fault */
    assert_int_equal(f.phase, AD_PHASE_RECORD);
    assert_non_null(f.label);
    assert_string_equal(f.label, "the product");
}

/* Sets a label and leaves it set. */
static ad_real labelled(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_where("an earlier call");
    return ad_mul(x[0], x[0]);
}

/* log(-x0): a fault at x0 = 1, with no label of its own. */
static ad_real unlabelled_fault(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_log(ad_neg(x[0]));
}

static void test_fault_label_of_earlier_call(void **state)
{
    const double x[1] = {1.0};
    double fx, g[1];
    ad_fault f;
    (void)state;
    ad_where(NULL);
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    assert_int_equal(ad_gradient(labelled, NULL, 1, x, &fx, g), AD_OK);
    assert_int_equal(ad_gradient(unlabelled_fault, NULL, 1, x, &fx, g), AD_ENONFINITE);
    ad_set_checks(old);
    ad_where(NULL);
    memset(&f, 0, sizeof f);
    assert_int_equal(ad_last_fault(&f), AD_OK);
    assert_string_equal(f.op, "log");
    if (f.label)
        fail_msg("the fault carries the label \"%s\" of an earlier call", f.label);
}

/* ======================================================================
 * 8. GradBench's ode: RK4 on y0' = x0, yi' = xi y(i-1), y(0) = 0, from
 *    t = 0 to 2 in s steps; the gradient of y(n-1)(2)
 * ====================================================================== */

#define ODE_MAXN 1000

typedef struct ode {
    size_t n, s;
} ode;

static double ode_x(size_t i)
{
    return 1.1825293877960668 * (double)(i + 1) / 2.0;
}

/* k = F(yy): k0 = x0, ki = xi yy(i-1) */
static void ode_rhs(const ad_real *x, const ad_real *yy, ad_real *k, size_t n)
{
    k[0] = x[0];
    for (size_t i = 1; i < n; i++)
        k[i] = ad_mul(x[i], yy[i - 1]);
}

static ad_real ode_objective(const ad_real *x, size_t n, void *ctx)
{
    const ode *o = ctx;
    const double h = 2.0 / (double)o->s, h2 = h / 2.0, h6 = h / 6.0;
    static ad_real work[6 * ODE_MAXN];  /* no assert inside a recording */
    ad_real *y = work, *yy = y + n, *k1 = yy + n, *k2 = k1 + n, *k3 = k2 + n, *k4 = k3 + n;
    for (size_t i = 0; i < n; i++)
        y[i] = ad_const(0.0);
    for (size_t step = 0; step < o->s; step++) {
        ode_rhs(x, y, k1, n);
        for (size_t i = 0; i < n; i++)
            yy[i] = ad_add(y[i], ad_mul(h2, k1[i]));
        ode_rhs(x, yy, k2, n);
        for (size_t i = 0; i < n; i++)
            yy[i] = ad_add(y[i], ad_mul(h2, k2[i]));
        ode_rhs(x, yy, k3, n);
        for (size_t i = 0; i < n; i++)
            yy[i] = ad_add(y[i], ad_mul(h, k3[i]));
        ode_rhs(x, yy, k4, n);
        for (size_t i = 0; i < n; i++) {
            ad_real sum = ad_add(ad_add(ad_add(k1[i], ad_mul(2.0, k2[i])), ad_mul(2.0, k3[i])),
                                 k4[i]);
            y[i] = ad_add(y[i], ad_mul(h6, sum));
        }
    }
    return y[n - 1];
}

/* The same RK4 on long double dual numbers, tangent along x_dir: returns
 * d y(n-1)/d x_dir, *value y(n-1).  The same double constants h, h/2,
 * h/6 and x; no over- or underflow in long double's range. */
typedef struct dual {
    long double v, d;
} dual;

static dual dmul(dual a, dual b)
{
    return (dual){a.v * b.v, a.d * b.v + a.v * b.d};
}

static dual dadd(dual a, dual b)
{
    return (dual){a.v + b.v, a.d + b.d};
}

static dual dscale(double c, dual a)
{
    return (dual){c * a.v, c * a.d};
}

static void ode_rhs_dual(const dual *x, const dual *yy, dual *k, size_t n)
{
    k[0] = x[0];
    for (size_t i = 1; i < n; i++)
        k[i] = dmul(x[i], yy[i - 1]);
}

static long double ode_tangent(const ode *o, size_t dir, long double *value)
{
    const size_t n = o->n;
    const double h = 2.0 / (double)o->s, h2 = h / 2.0, h6 = h / 6.0;
    static dual work[7 * ODE_MAXN];
    dual *x = work, *y = x + n, *yy = y + n, *k1 = yy + n, *k2 = k1 + n, *k3 = k2 + n,
         *k4 = k3 + n;
    for (size_t i = 0; i < n; i++) {
        x[i] = (dual){ode_x(i), i == dir};
        y[i] = (dual){0.0L, 0.0L};
    }
    for (size_t step = 0; step < o->s; step++) {
        ode_rhs_dual(x, y, k1, n);
        for (size_t i = 0; i < n; i++)
            yy[i] = dadd(y[i], dscale(h2, k1[i]));
        ode_rhs_dual(x, yy, k2, n);
        for (size_t i = 0; i < n; i++)
            yy[i] = dadd(y[i], dscale(h2, k2[i]));
        ode_rhs_dual(x, yy, k3, n);
        for (size_t i = 0; i < n; i++)
            yy[i] = dadd(y[i], dscale(h, k3[i]));
        ode_rhs_dual(x, yy, k4, n);
        for (size_t i = 0; i < n; i++) {
            dual sum = dadd(dadd(dadd(k1[i], dscale(2.0, k2[i])), dscale(2.0, k3[i])), k4[i]);
            y[i] = dadd(y[i], dscale(h6, sum));
        }
    }
    *value = y[n - 1].v;
    return y[n - 1].d;
}

/* ad_gradient of the ode at x_i = 1.18... (i + 1) / 2: AD_OK with a finite
 * value and gradient, `checks` entries of it (spread over i, the first and
 * the last included) against the long double tangents; or a failure with
 * every output NaN.  Every number of the RK4 and of its tangents and
 * cotangents is a sum of products of positive numbers: no cancellation,
 * each result off by at most (operations on its longest path, about
 * 4 n + 20 s) roundings, below 1e-12 relative; 1e-11 allowed. */
static void check_ode(size_t n, size_t s, size_t checks)
{
    static double x[ODE_MAXN], g[ODE_MAXN];
    ode o = {n, s};
    double fx;
    assert_true(n <= ODE_MAXN);
    for (size_t i = 0; i < n; i++)
        x[i] = ode_x(i);
    ad_status st = ad_gradient(ode_objective, &o, n, x, &fx, g);
    if (st != AD_OK) {
        assert_nan(fx);
        assert_true(all_nan(g, n));
    } else {
        size_t nonfinite = 0;
        for (size_t i = 0; i < n; i++)
            nonfinite += !isfinite(g[i]);
        if (nonfinite || !isfinite(fx))
            fail_msg("AD_OK with f = %.17g and %zu of %zu gradient entries not finite", fx,
                     nonfinite, n);
        for (size_t c = 0; c < checks; c++) {
            size_t i = checks > 1 ? c * (n - 1) / (checks - 1) : n - 1;
            long double value, d = ode_tangent(&o, i, &value);
            assert_true(isfinite((double)d));
            if (!near(g[i], d, 1e-11, 0.0))
                fail_msg("n %zu, s %zu: gradient[%zu] = %.17g, forward mode %.17Lg", n, s, i,
                         g[i], d);
            if (!near(fx, value, 1e-11, 0.0))
                fail_msg("n %zu, s %zu: f = %.17g, forward mode %.17Lg", n, s, fx, value);
        }
    }
}

static void test_ode(void **state)
{
    (void)state;
    check_ode(50, 300, 50);      /* every entry; everything in range */
    check_ode(1000, 300, 20);    /* cotangents past 1e308, values below 1e-308 */
}

/* Each test starts from a clean thread state, whatever the one before
 * left when it failed (cmocka carries on after a failed assert or a
 * signal): no allocation failure armed, no checks, no label. */
static int clean_state(void **state)
{
    (void)state;
    ad_test_fail_alloc_after(-1);
    ad_set_checks(0);
    ad_where(NULL);
    return ad_release() == AD_OK ? 0 : -1;
}

#define TEST(name) cmocka_unit_test_setup(name, clean_state)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_sparse_hessian_prod_enomem),
        TEST(test_sparse_hessian_fresh_thread),
        TEST(test_checkpointed_loop_written_out),
        TEST(test_second_partials_out_of_range),
        TEST(test_sparse_hessian_scaled),
        TEST(test_fault_name_matrix_product),
        TEST(test_fault_label_of_earlier_call),
        TEST(test_ode),
    };
    /* Under the sanitizers a report ends the process: DUALREV_TEST_FILTER
     * (a cmocka pattern, e.g. "test_ode") runs some cases alone. */
    const char *only = getenv("DUALREV_TEST_FILTER");
    if (only)
        cmocka_set_test_filter(only);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
