/* dualrev/cholmod.h: CHOLMOD's solve with the Hessian of ad_sparse_hessian
 * against a dense solve (Gaussian elimination with partial pivoting on
 * ad_hessian's matrix, written here), on a banded and on a denser
 * problem, with and without a shift, the analysis reused at other points
 * (ad_sparse_hessian_values); an indefinite Hessian refused
 * (AD_ENOTPOSDEF) and damped by ad_cholmod_newton to the least shift of
 * its sequence that a dense Cholesky accepts; bad arguments; Newton's
 * method with a line search on a phase field's energy to a minimum.  Leaks:
 * the sanitizer build (LeakSanitizer) runs this too. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dualrev/cholmod.h>

#include "check.h"

/* ---- problems ---- */

/* sum 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2: tridiagonal, indefinite
 * away from its minimum (1, ..., 1). */
static ad_real chained_rosenbrock(const ad_real *x, size_t n, void *ctx)
{
    ad_real s = ad_const(0.0);
    (void)ctx;
    for (size_t i = 0; i + 1 < n; i++) {
        ad_real a = ad_sub(x[i + 1], ad_mul(x[i], x[i])), b = ad_sub(1.0, x[i]);
        s = ad_add(s, ad_add(ad_mul(100.0, ad_mul(a, a)), ad_mul(b, b)));
    }
    return s;
}

/* Strictly convex, with pairs three apart and long-range ones:
 * sum x_i^2 / 2 + exp(x_i - x_{i+3}) + softplus(x_i + x_{(7i+2) mod n}),
 * convex terms plus the identity: positive definite at every x. */
static ad_real convex(const ad_real *x, size_t n, void *ctx)
{
    ad_real s = ad_const(0.0);
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        s = ad_add(s, ad_mul(0.5, ad_mul(x[i], x[i])));
        if (i + 3 < n)
            s = ad_add(s, ad_exp(ad_sub(x[i], x[i + 3])));
        size_t j = (7 * i + 2) % n;
        if (j != i)
            s = ad_add(s, ad_log(ad_add(1.0, ad_exp(ad_add(x[i], x[j])))));  /* softplus: convex */
    }
    return s;
}

/* x0^2 - 3 x1^2 + x0 x1 + x1 x2 + x2^2: indefinite at every x. */
static ad_real saddle3(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real s = ad_sub(ad_mul(x[0], x[0]), ad_mul(3.0, ad_mul(x[1], x[1])));
    s = ad_add(s, ad_add(ad_mul(x[0], x[1]), ad_mul(x[1], x[2])));
    return ad_add(s, ad_mul(x[2], x[2]));
}

/* ---- the dense oracle ---- */

/* x = (A + shift I)^-1 b, A n x n row-major, by Gaussian elimination with
 * partial pivoting (A, b untouched). */
static void dense_solve(size_t n, const double *A, double shift, const double *b, double *x)
{
    double *M = malloc(n * (n + 1) * sizeof *M);
    for (size_t r = 0; r < n; r++) {
        for (size_t c = 0; c < n; c++)
            M[r * (n + 1) + c] = A[r * n + c] + (r == c ? shift : 0.0);
        M[r * (n + 1) + n] = b[r];
    }
    for (size_t k = 0; k < n; k++) {
        size_t p = k;
        for (size_t r = k + 1; r < n; r++)
            if (fabs(M[r * (n + 1) + k]) > fabs(M[p * (n + 1) + k]))
                p = r;
        for (size_t c = 0; c <= n; c++) {
            double t = M[k * (n + 1) + c];
            M[k * (n + 1) + c] = M[p * (n + 1) + c];
            M[p * (n + 1) + c] = t;
        }
        for (size_t r = k + 1; r < n; r++) {
            double f = M[r * (n + 1) + k] / M[k * (n + 1) + k];
            for (size_t c = k; c <= n; c++)
                M[r * (n + 1) + c] -= f * M[k * (n + 1) + c];
        }
    }
    for (size_t k = n; k-- > 0;) {
        double s = M[k * (n + 1) + n];
        for (size_t c = k + 1; c < n; c++)
            s -= M[k * (n + 1) + c] * x[c];
        x[k] = s / M[k * (n + 1) + k];
    }
    free(M);
}

/* Whether A + shift I is positive definite: a dense Cholesky. */
static int dense_posdef(size_t n, const double *A, double shift)
{
    double *L = calloc(n * n, sizeof *L);
    int ok = 1;
    for (size_t j = 0; j < n && ok; j++) {
        double d = A[j * n + j] + shift;
        for (size_t k = 0; k < j; k++)
            d -= L[j * n + k] * L[j * n + k];
        if (!(d > 0.0)) {
            ok = 0;
            break;
        }
        L[j * n + j] = sqrt(d);
        for (size_t i = j + 1; i < n; i++) {
            double s = A[i * n + j];
            for (size_t k = 0; k < j; k++)
                s -= L[i * n + k] * L[j * n + k];
            L[i * n + j] = s / L[j * n + j];
        }
    }
    free(L);
    return ok;
}

static void assert_close_vec(const double *got, const double *want, size_t n, double rtol)
{
    double scale = 0.0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(want[i]));
    for (size_t i = 0; i < n; i++)
        assert_near(got[i], want[i], 0.0, rtol * scale);
}

/* ---- tests ---- */

/* f's sparse Hessian at x and at x2 (the analysis reused), solved by
 * CHOLMOD against the dense solve of ad_hessian's matrix, with shifts. */
static void solve_against_dense(ad_objective f, size_t n, const double *x, const double *x2)
{
    double fx, *g = malloc(n * sizeof *g), *D = malloc(n * n * sizeof *D);
    double *b = malloc(n * sizeof *b), *got = malloc(n * sizeof *got), *want = malloc(n * sizeof *want);
    ad_csr H;
    ad_cholmod S;
    assert_ok(ad_sparse_hessian(f, NULL, n, x, &fx, g, &H));
    assert_ok(ad_cholmod_analyze(&S, &H));
    for (int point = 0; point < 2; point++) {
        const double *at = point ? x2 : x;
        if (point)
            assert_ok(ad_sparse_hessian_values(f, NULL, n, at, &fx, g, &H));
        assert_ok(ad_hessian(f, NULL, n, at, &fx, g, D));
        assert_true(dense_posdef(n, D, 0.0));  /* the premise */
        static const double shifts[] = {0.0, 2.5, 1e3};
        for (int k = 0; k < 3; k++) {
            for (size_t i = 0; i < n; i++)
                b[i] = sin(1.0 + (double)(i * (size_t)(k + 1)));
            assert_ok(ad_cholmod_factor(&S, &H, shifts[k]));
            assert_ok(ad_cholmod_solve(&S, b, got));
            dense_solve(n, D, shifts[k], b, want);
            assert_close_vec(got, want, n, 1e-10);
            /* x may be b */
            assert_ok(ad_cholmod_solve(&S, b, b));
            assert_close_vec(b, want, n, 1e-10);
        }
        /* Newton's direction, H positive definite here: no shift */
        double shift;
        assert_ok(ad_cholmod_newton(&S, &H, g, got, &shift));
        assert_true(shift == 0.0);
        dense_solve(n, D, 0.0, g, want);
        for (size_t i = 0; i < n; i++)
            want[i] = -want[i];
        assert_close_vec(got, want, n, 1e-10);
    }
    ad_cholmod_free(&S);
    ad_cholmod_free(&S);  /* twice: zeroed, nothing more */
    ad_csr_free(&H);
    free(g), free(D), free(b), free(got), free(want);
}

static void test_against_dense(void **state)
{
    (void)state;
    double x[40], x2[40];
    for (size_t i = 0; i < 40; i++) {
        x[i] = 1.0 + 1e-4 * sin((double)i);  /* near Rosenbrock's minimum: positive definite */
        x2[i] = 1.0 - 2e-4 * cos((double)i);
    }
    solve_against_dense(chained_rosenbrock, 40, x, x2);
    for (size_t i = 0; i < 40; i++) {
        x[i] = sin(3.0 * (double)i);
        x2[i] = cos(2.0 * (double)i) - 0.5;
    }
    solve_against_dense(convex, 40, x, x2);
    solve_against_dense(convex, 1, x, x2);
    solve_against_dense(convex, 5, x, x2);
}

/* An indefinite Hessian: AD_ENOTPOSDEF, no solve; ad_cholmod_newton finds
 * a shift of its sequence that the dense Cholesky accepts and whose
 * predecessor it refuses, and d solves (H + shift I) d = -g. */
static void test_indefinite(void **state)
{
    (void)state;
    double x[3] = {0.3, -0.7, 1.1}, fx, g[3], D[9], d[3], want[3], shift;
    ad_csr H;
    ad_cholmod S;
    assert_ok(ad_sparse_hessian(saddle3, NULL, 3, x, &fx, g, &H));
    assert_ok(ad_hessian(saddle3, NULL, 3, x, &fx, g, D));
    assert_false(dense_posdef(3, D, 0.0));
    assert_ok(ad_cholmod_analyze(&S, &H));
    assert_int_equal(ad_cholmod_factor(&S, &H, 0.0), AD_ENOTPOSDEF);
    assert_int_equal(ad_cholmod_solve(&S, g, d), AD_EINVAL);  /* no factor */
    assert_int_equal(ad_cholmod_factor(&S, &H, 2.0), AD_ENOTPOSDEF);  /* -6 + 2 < 0 */
    assert_ok(ad_cholmod_newton(&S, &H, g, d, &shift));
    assert_true(shift > 0.0);
    assert_true(dense_posdef(3, D, shift));
    assert_false(dense_posdef(3, D, shift / 10.0));
    assert_true(S.shift == shift);
    dense_solve(3, D, shift, g, want);
    for (int i = 0; i < 3; i++)
        assert_near(d[i], -want[i], 1e-12, 1e-14);
    /* d is a descent direction: g . d < 0 */
    assert_true(g[0] * d[0] + g[1] * d[1] + g[2] * d[2] < 0.0);
    /* a factorisation that fails after one that succeeded leaves no factor */
    assert_int_equal(ad_cholmod_factor(&S, &H, 0.0), AD_ENOTPOSDEF);
    assert_int_equal(ad_cholmod_solve(&S, g, d), AD_EINVAL);
    ad_cholmod_free(&S);
    ad_csr_free(&H);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    double x[4] = {0.1, 0.2, 0.3, 0.4}, fx, g[4], d[4], shift;
    ad_csr H, K;
    ad_cholmod S, Z;
    memset(&Z, 0, sizeof Z);
    assert_ok(ad_sparse_hessian(chained_rosenbrock, NULL, 4, x, &fx, g, &H));
    assert_int_equal(ad_cholmod_analyze(NULL, &H), AD_EINVAL);
    assert_int_equal(ad_cholmod_analyze(&S, NULL), AD_EINVAL);
    /* before analyze (a zeroed S) */
    assert_int_equal(ad_cholmod_factor(&Z, &H, 0.0), AD_EINVAL);
    assert_int_equal(ad_cholmod_solve(&Z, g, d), AD_EINVAL);
    assert_int_equal(ad_cholmod_newton(&Z, &H, g, d, &shift), AD_EINVAL);
    ad_cholmod_free(&Z);
    ad_cholmod_free(NULL);
    /* not a square lower triangle with columns ascending */
    K = H;
    K.cols = 3;
    assert_int_equal(ad_cholmod_analyze(&S, &K), AD_EINVAL);
    size_t col[16];
    memcpy(col, H.col, H.nnz * sizeof *col);
    K = H;
    K.col = col;
    col[0] = 1;  /* row 0, column 1: above the diagonal */
    assert_int_equal(ad_cholmod_analyze(&S, &K), AD_EINVAL);
    memcpy(col, H.col, H.nnz * sizeof *col);
    size_t r1 = H.row_ptr[1];  /* row 1 holds (1,0), (1,1): swapped */
    assert_int_equal(H.row_ptr[2] - r1, 2);
    col[r1] = 1, col[r1 + 1] = 0;
    assert_int_equal(ad_cholmod_analyze(&S, &K), AD_EINVAL);
    K = H;
    K.rows = K.cols = 0;
    K.nnz = 0;
    assert_int_equal(ad_cholmod_analyze(&S, &K), AD_EINVAL);  /* n = 0 */
    /* analysed: bad shifts, another structure, values and b not finite */
    assert_ok(ad_cholmod_analyze(&S, &H));
    assert_int_equal(ad_cholmod_factor(&S, &H, -1.0), AD_EINVAL);
    assert_int_equal(ad_cholmod_factor(&S, &H, NAN), AD_EINVAL);
    assert_int_equal(ad_cholmod_factor(&S, &H, INFINITY), AD_EINVAL);
    assert_int_equal(ad_cholmod_factor(&S, NULL, 0.0), AD_EINVAL);
    double y[5] = {0.1, 0.2, 0.3, 0.4, 0.5}, gy[5];
    assert_ok(ad_sparse_hessian(chained_rosenbrock, NULL, 5, y, &fx, gy, &K));
    assert_int_equal(ad_cholmod_factor(&S, &K, 0.0), AD_ESTRUCTURE);
    assert_int_equal(ad_cholmod_newton(&S, &K, gy, gy, &shift), AD_ESTRUCTURE);
    ad_csr_free(&K);
    assert_ok(ad_sparse_hessian(saddle3, NULL, 4, x, &fx, g, &K));  /* 4 rows, other pairs */
    assert_int_equal(ad_cholmod_factor(&S, &K, 0.0), AD_ESTRUCTURE);
    ad_csr_free(&K);
    double keep = H.val[0];
    H.val[0] = NAN;
    assert_int_equal(ad_cholmod_factor(&S, &H, 0.0), AD_ENONFINITE);
    H.val[0] = keep;
    assert_ok(ad_cholmod_factor(&S, &H, 100.0));
    double b[4] = {1, 2, INFINITY, 4};
    assert_int_equal(ad_cholmod_solve(&S, b, d), AD_ENONFINITE);
    assert_int_equal(ad_cholmod_solve(&S, NULL, d), AD_EINVAL);
    assert_int_equal(ad_cholmod_solve(&S, g, NULL), AD_EINVAL);
    assert_int_equal(ad_cholmod_newton(&S, &H, NULL, d, &shift), AD_EINVAL);
    assert_ok(ad_cholmod_newton(&S, &H, g, d, NULL));  /* shift not wanted */
    ad_cholmod_free(&S);
    ad_csr_free(&H);
    assert_non_null(strstr(ad_strerror(AD_ENOTPOSDEF), "positive definite"));
}

/* A 1-D phase field's energy (examples/newton_sparse.c): a tilted double
 * well with stretching, log cosh and bending terms; pentadiagonal,
 * indefinite near u = 0. */
static ad_real phase_field(const ad_real *u, size_t n, void *ctx)
{
    (void)ctx;
    ad_real e = ad_const(0.0);
    for (size_t i = 0; i < n; i++) {
        ad_real w = ad_sub(ad_mul(u[i], u[i]), 1.0);
        double f = 0.6 + 0.3 * sin((double)i / 40.0);
        e = ad_add(e, ad_sub(ad_mul(0.25, ad_mul(w, w)), ad_mul(f, u[i])));
        if (i + 1 < n) {
            ad_real d = ad_sub(u[i + 1], u[i]);
            e = ad_add(e, ad_add(ad_mul(0.05, ad_mul(d, d)), ad_mul(0.05, ad_log(ad_cosh(d)))));
        }
        if (i > 0 && i + 1 < n) {
            ad_real c = ad_add(ad_sub(u[i + 1], ad_mul(2.0, u[i])), u[i - 1]);
            e = ad_add(e, ad_mul(0.025, ad_mul(c, c)));
        }
    }
    return e;
}

/* Newton with a backtracking line search on the phase field from near
 * u = 0: damped there (the Hessian is indefinite), then undamped to a
 * minimum, quadratically, the analysis made once.  The end is checked
 * by ad_gradient (|g| small) and by a dense Cholesky of ad_hessian's
 * matrix (a minimum). */
static void test_newton(void **state)
{
    (void)state;
    enum { N = 300 };
    static double x[N], g[N], d[N], xt[N], gt[N], D[N * N];
    double fx, ft, shift;
    for (size_t i = 0; i < N; i++)
        x[i] = 0.1 * sin(0.37 * (double)i);
    ad_csr H;
    ad_cholmod S;
    assert_ok(ad_sparse_hessian(phase_field, NULL, N, x, &fx, g, &H));
    assert_ok(ad_cholmod_analyze(&S, &H));
    int it, damped = 0, last_damped = 1;
    double gn = INFINITY;
    for (it = 0; it < 100; it++) {
        if (it)
            assert_ok(ad_sparse_hessian_values(phase_field, NULL, N, x, &fx, g, &H));
        gn = 0.0;
        for (size_t i = 0; i < N; i++)
            gn = fmax(gn, fabs(g[i]));
        if (getenv("NEWTON_DEBUG"))
            fprintf(stderr, "it %d f %.17g |g| %g\n", it, fx, gn);
        if (gn < 1e-10)
            break;
        assert_ok(ad_cholmod_newton(&S, &H, g, d, &shift));
        damped += shift > 0.0;
        last_damped = shift > 0.0;
        double slope = 0.0, t = 1.0;
        for (size_t i = 0; i < N; i++)
            slope += g[i] * d[i];
        assert_true(slope < 0.0);
        for (;; t *= 0.5) {
            for (size_t i = 0; i < N; i++)
                xt[i] = x[i] + t * d[i];
            assert_ok(ad_gradient(phase_field, NULL, N, xt, &ft, gt));
            if (ft <= fx + 1e-4 * t * slope || t < 1e-12)
                break;
        }
        memcpy(x, xt, sizeof x);
    }
    assert_true(gn < 1e-10);
    assert_true(it < 40);
    assert_true(damped > 0);   /* the start is where the Hessian is indefinite */
    assert_false(last_damped); /* Newton's own steps at the end */
    assert_ok(ad_gradient(phase_field, NULL, N, x, &fx, g));
    for (size_t i = 0; i < N; i++)
        assert_near(g[i], 0.0, 0.0, 1e-10);
    assert_ok(ad_hessian(phase_field, NULL, N, x, &fx, g, D));
    assert_true(dense_posdef(N, D, 0.0));
    assert_true(S.factorizations >= (unsigned long)it);
    ad_cholmod_free(&S);
    ad_csr_free(&H);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_dense),
        cmocka_unit_test(test_indefinite),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_newton),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
