/* Nested derivatives: ad_gradient_r and ad_jvp_r (docs/api.md, "Nested
 * derivatives").
 *
 * Oracles, every one independent of the replay being tested:
 *   - closed forms.  f3(x) = x0^2 x1 + sin(x1) x2 + exp(x0 x2) has every
 *     mixed partial of every order in closed form (f3_deriv), and so has
 *     F2(x) = (x0 x1 + sin x2, e^x0 x2^2) (F2_deriv); the functions that
 *     enclose ad_gradient_r / ad_jvp_r of them (og, oj, vg, vj below) have
 *     their gradients, Jacobians and Hessians built from those (third
 *     derivatives of f3 and F2 included); towers of nested calls to depth 5
 *     have the partials of order up to 6 of f3.  Each elementary unary
 *     operation has its first three derivatives written out, each binary
 *     one its Hessian; the array primitives (ad_prod at zeros, the
 *     log-sum-exp, the squared norm, dot products) their Hessians and third
 *     derivatives;
 *   - central differences of plain double implementations (the same source
 *     compiled for double, or the closed forms above), with check.h's
 *     eighth-order stencil applied once per order (up to three times:
 *     third derivatives), with a bound on its rounding error (fd_mixed);
 *   - ad_hessian / ad_hvp of the same function (a separate code path: the
 *     second-order mode), to 1e-12 of the row's scale;
 *   - ad_gradient / ad_jvp: outside a recording, or from constants, the
 *     results are theirs, bit for bit, as constants.
 *
 * Every enclosing driver is run over a function calling ad_gradient_r and
 * one calling ad_jvp_r: ad_gradient, ad_jvp, ad_vjp, ad_jacobian (forward
 * and reverse sweeps), ad_linearize with ad_linear_jvp(s)/vjp(s), ad_hvp,
 * ad_hvps, ad_hessian, ad_sparse_jacobian, ad_sparse_hessian (and _values),
 * ad_gradient_sum and ad_hvp_sum (the call inside a term, on the library's
 * threads too) and ad_checkpointed_loop (the call inside a step).  Then:
 * programs longer than a tape has held (fresh threads, after ad_release,
 * growing), depth (towers to depth 5, mixing both calls), every operation
 * and primitive inside the inner function (in every rr/rd/dr form; x + c
 * shifts sharing IDs; constants among active elements; n-ary records
 * longer than a chunk), perturbation confusion and values of other levels
 * (through ctx, leaked, stale, two levels up), results outside a recording
 * and from constants, edge values, errors (NULL arguments, unsupported
 * records, the tape limit, allocation failure at every count, the nesting
 * limit, checks), degenerate inner functions, sizes on both sides of the
 * calls' small-size path, x read before f runs, and threads.
 *
 * Tolerances.  Closed forms: |error| <= 1e-12 times the largest entry of
 * the vector or matrix compared (a few hundred ulps; replayed operations
 * round differently from the closed form, a wrong rule is off by O(1)).
 * Finite differences: 1e-7 relative plus the stencil's rounding bound. */
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "workers.h"
#include "ops_list.h"
#include "ops_table.h"
#include "../lib/drivers/testing.h"

#define RTOL 1e-12
#define FD_RTOL 1e-7
#define NMAX 8

static double *dalloc(size_t n)
{
    return xmalloc((n ? n : 1) * sizeof(double));
}

/* ======================================================================
 * 1. Comparisons and the finite-difference oracle
 * ====================================================================== */

static double max_abs(const double *v, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s = fmax(s, fabs(v[i]));
    return s;
}

/* got[i] against want[i]: |error| <= rtol * max_k |want_k| + atol. */
static void vec_near_at(const char *what, const double *got, const double *want, size_t n,
                        double rtol, double atol, const char *file, int line)
{
    double tol = rtol * max_abs(want, n) + atol;
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - want[i]);
        if (!(err <= tol)) {
            print_error("%s[%zu] = %.17g, expected %.17g (error %.3g, tolerance %.3g)\n", what,
                        i, got[i], want[i], err, tol);
            _fail(file, line);
        }
    }
}
#define vec_near(what, got, want, n, rtol, atol) \
    vec_near_at((what), (got), (want), (n), (rtol), (atol), __FILE__, __LINE__)

/* The same, each entry with its own allowance atol[i] (a finite
 * difference's rounding bound) on top. */
static void vec_near_fd_at(const char *what, const double *got, const double *want,
                           const double *noise, size_t n, const char *file, int line)
{
    double scale = max_abs(want, n);
    for (size_t i = 0; i < n; i++) {
        double err = fabs(got[i] - want[i]), tol = FD_RTOL * scale + noise[i];
        if (!(err <= tol)) {
            print_error("%s[%zu] = %.17g, finite differences %.17g (error %.3g, tolerance %.3g)\n",
                        what, i, got[i], want[i], err, tol);
            _fail(file, line);
        }
    }
}
#define vec_near_fd(what, got, want, noise, n) \
    vec_near_fd_at((what), (got), (want), (noise), (n), __FILE__, __LINE__)

static void expect_nan_vec_at(const char *what, const double *v, size_t n, const char *file,
                              int line)
{
    for (size_t i = 0; i < n; i++)
        if (!isnan(v[i])) {
            print_error("%s[%zu] = %.17g, expected NaN\n", what, i, v[i]);
            _fail(file, line);
        }
}
#define expect_nan_vec(what, v, n) expect_nan_vec_at((what), (v), (n), __FILE__, __LINE__)


/* A plain double function of n inputs. */
typedef double (*plain_fn)(const double *x, size_t n, const void *ctx);

/* check.h's eighth-order stencil, applied along dirs[order-1], then (on
 * each of its points) along dirs[order-2], ...: an estimate of the mixed
 * directional derivative D_dirs[0] ... D_dirs[order-1] f at x.  fm
 * collects the largest |f| met. */
static double fd_rec(plain_fn f, const void *ctx, size_t n, const double *x, int order,
                     const double *const *dirs, double h, double *fm)
{
    static const double c[4] = {4.0 / 5, -1.0 / 5, 4.0 / 105, -1.0 / 280};
    if (order == 0) {
        double v = f(x, n, ctx);
        *fm = fmax(*fm, fabs(v));
        return v;
    }
    const double *d = dirs[order - 1];
    double xp[NMAX], sum = 0.0;
    for (int k = 1; k <= 4; k++) {
        for (size_t i = 0; i < n; i++)
            xp[i] = x[i] + k * h * d[i];
        double up = fd_rec(f, ctx, n, xp, order - 1, dirs, h, fm);
        for (size_t i = 0; i < n; i++)
            xp[i] = x[i] - k * h * d[i];
        double down = fd_rec(f, ctx, n, xp, order - 1, dirs, h, fm);
        sum += c[k - 1] * (up - down);
    }
    return sum / h;
}

/* The step for each order: a power of two, large enough that the rounding
 * error (below) stays small, small enough that the stencil's truncation
 * error, about h^8 times a ninth-and-higher derivative / 630, is below
 * 1e-12 for the smooth functions sampled here (entire functions, or points
 * at least 0.4 from a singularity: the third-order stencil reaches 12 h). */
static double fd_h(int order)
{
    return order == 1 ? 0x1p-9 : order == 2 ? 0x1p-6 : 0x1p-5;
}

/* One estimate and its rounding bound: each application of the stencil
 * multiplies an error by at most sum |c_k| * 2 / h = 2.083 / h, and each
 * evaluation of f is within 40 ulp of the largest |f| (as check.h), with a
 * factor 4 of margin. */
static double fd_mixed(plain_fn f, const void *ctx, size_t n, const double *x, int order,
                       const double *const *dirs, double *noise)
{
    double h = fd_h(order), fm = 0.0;
    assert_true(n <= NMAX);
    double d = fd_rec(f, ctx, n, x, order, dirs, h, &fm);
    *noise = 4.0 * 40.0 * DBL_EPSILON * fm * pow(2.083 / h, order);
    return d;
}

/* The unit vectors. */
static const double unit[NMAX][NMAX] = {
    {1, 0, 0, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 0, 0, 0, 0}, {0, 0, 1, 0, 0, 0, 0, 0},
    {0, 0, 0, 1, 0, 0, 0, 0}, {0, 0, 0, 0, 1, 0, 0, 0}, {0, 0, 0, 0, 0, 1, 0, 0},
    {0, 0, 0, 0, 0, 0, 1, 0}, {0, 0, 0, 0, 0, 0, 0, 1}};

/* FD gradient, Hessian (n x n) and directional third derivative
 * T[j][k] = sum_i w_i d3f/dx_i dx_j dx_k of a plain function. */
static void fd_gradient(plain_fn f, const void *ctx, size_t n, const double *x, double *g,
                        double *noise)
{
    for (size_t j = 0; j < n; j++) {
        const double *dirs[1] = {unit[j]};
        g[j] = fd_mixed(f, ctx, n, x, 1, dirs, &noise[j]);
    }
}

static void fd_hessian(plain_fn f, const void *ctx, size_t n, const double *x, double *H,
                       double *noise)
{
    for (size_t j = 0; j < n; j++)
        for (size_t k = 0; k < n; k++) {
            const double *dirs[2] = {unit[j], unit[k]};
            H[j * n + k] = fd_mixed(f, ctx, n, x, 2, dirs, &noise[j * n + k]);
        }
}

static void fd_third(plain_fn f, const void *ctx, size_t n, const double *x, const double *w,
                     double *T, double *noise)
{
    for (size_t j = 0; j < n; j++)
        for (size_t k = 0; k < n; k++) {
            const double *dirs[3] = {w, unit[j], unit[k]};
            T[j * n + k] = fd_mixed(f, ctx, n, x, 3, dirs, &noise[j * n + k]);
        }
}

/* ======================================================================
 * 2. The inner functions with closed forms: f3 and F2
 * ====================================================================== */

static double binom(int n, int k)
{
    double b = 1.0;
    for (int i = 1; i <= k; i++)
        b = b * (n - k + i) / i;
    return b;
}

static double factorial(int k)
{
    double f = 1.0;
    for (int i = 2; i <= k; i++)
        f *= i;
    return f;
}

/* The k-th derivative of sin. */
static double sin_deriv(double x, int k)
{
    switch (k % 4) {
    case 0: return sin(x);
    case 1: return cos(x);
    case 2: return -sin(x);
    default: return -cos(x);
    }
}

/* f3(x) = x0^2 x1 + sin(x1) x2 + exp(x0 x2) */
static double f3_d(const double *x, size_t n, const void *ctx)
{
    (void)n, (void)ctx;
    return x[0] * x[0] * x[1] + sin(x[1]) * x[2] + exp(x[0] * x[2]);
}

static ad_real f3_r(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real a = ad_mul(ad_mul(x[0], x[0]), x[1]);
    ad_real b = ad_mul(ad_sin(x[1]), x[2]);
    return ad_add(ad_add(a, b), ad_exp(ad_mul(x[0], x[2])));
}

/* d^(c0+c1+c2) f3 / dx0^c0 dx1^c1 dx2^c2.  For exp(u v):
 * d^a/du^a d^b/dv^b = exp(u v) sum_k C(a,k) C(b,k) k! u^(b-k) v^(a-k). */
static double f3_deriv(const double *x, int c0, int c1, int c2)
{
    double d = 0.0;
    if (c2 == 0 && c0 <= 2 && c1 <= 1)
        d += (c0 == 0 ? x[0] * x[0] : c0 == 1 ? 2.0 * x[0] : 2.0) * (c1 == 0 ? x[1] : 1.0);
    if (c0 == 0 && c2 <= 1)
        d += sin_deriv(x[1], c1) * (c2 == 0 ? x[2] : 1.0);
    if (c1 == 0) {
        double s = 0.0;
        for (int k = 0; k <= (c0 < c2 ? c0 : c2); k++)
            s += binom(c0, k) * binom(c2, k) * factorial(k) * pow(x[0], c2 - k) *
                 pow(x[2], c0 - k);
        d += exp(x[0] * x[2]) * s;
    }
    return d;
}

/* The partial of f3 along the indices idx[0..k). */
static double f3_at(const double *x, const int *idx, int k)
{
    int c[3] = {0, 0, 0};
    for (int i = 0; i < k; i++)
        c[idx[i]]++;
    return f3_deriv(x, c[0], c[1], c[2]);
}

static void f3_grad(const double *x, double *g)
{
    for (int i = 0; i < 3; i++)
        g[i] = f3_at(x, (int[]){i}, 1);
}

static void f3_hess(const double *x, double *H)
{
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            H[3 * i + j] = f3_at(x, (int[]){i, j}, 2);
}

static void f3_third(const double *x, double *T)
{
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 3; k++)
                T[9 * i + 3 * j + k] = f3_at(x, (int[]){i, j, k}, 3);
}

/* F2(x) = (x0 x1 + sin x2, e^x0 x2^2) */
static void F2_r(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = ad_add(ad_mul(x[0], x[1]), ad_sin(x[2]));
    y[1] = ad_mul(ad_exp(x[0]), ad_mul(x[2], x[2]));
}

static double F2_d(const double *x, size_t n, const void *ctx)
{
    const int *k = ctx;
    (void)n;
    return *k == 0 ? x[0] * x[1] + sin(x[2]) : exp(x[0]) * x[2] * x[2];
}

static double F2_deriv(int k, const double *x, int c0, int c1, int c2)
{
    if (k == 0) {
        double d = 0.0;
        if (c2 == 0 && c0 <= 1 && c1 <= 1)
            d += (c0 ? 1.0 : x[0]) * (c1 ? 1.0 : x[1]);
        if (c0 == 0 && c1 == 0)
            d += sin_deriv(x[2], c2);
        return d;
    }
    if (c1 != 0 || c2 > 2)
        return 0.0;
    return exp(x[0]) * (c2 == 0 ? x[2] * x[2] : c2 == 1 ? 2.0 * x[2] : 2.0);
}

static double F2_at(int k, const double *x, const int *idx, int order)
{
    int c[3] = {0, 0, 0};
    for (int i = 0; i < order; i++)
        c[idx[i]]++;
    return F2_deriv(k, x, c[0], c[1], c[2]);
}

/* ======================================================================
 * 3. Functions enclosing the nested calls, and their closed forms
 *
 * og(x) = f + c.g + g0 g1, (f, g) = ad_gradient_r(f3) at x.
 * oj(x) = y0 + y1 + d.u + u0 u1, (y, u) = ad_jvp_r(F2) at x along
 *         v = a x + b (elementwise; a1 = 0, so v1 is a constant).
 * vg(x) = (f, g0, g1, g2, g0 g1), vj(x) = (y0, y1, u0, u1, u0 u1): their
 *         first m outputs.
 * ====================================================================== */

static const double OG_C[3] = {0.3, -0.7, 0.5};
static const double OJ_A[3] = {1.5, 0.0, -0.5}, OJ_B[3] = {0.2, 0.9, -0.3};
static const double OJ_D[2] = {0.4, -1.1};

/* The last status of an inner call, when ctx is one of these. */
typedef struct probe {
    ad_status inner;
    int calls;
} probe;

static void note(void *ctx, ad_status s)
{
    probe *p = ctx;
    if (p) {
        p->calls++;
        if (s != AD_OK || p->inner == AD_OK)
            p->inner = s;
    }
}

static void og_parts(const ad_real *x, size_t n, void *ctx, ad_real *fx, ad_real *g)
{
    note(ctx, ad_gradient_r(f3_r, NULL, n, x, fx, g));
}

static ad_real og(const ad_real *x, size_t n, void *ctx)
{
    ad_real fx, g[3];
    og_parts(x, n, ctx, &fx, g);
    ad_real r = ad_add(fx, ad_add(ad_add(ad_mul(OG_C[0], g[0]), ad_mul(OG_C[1], g[1])),
                                  ad_mul(OG_C[2], g[2])));
    return ad_add(r, ad_mul(g[0], g[1]));
}

static void vg(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    ad_real out[5];
    og_parts(x, n, ctx, &out[0], &out[1]);
    out[4] = ad_mul(out[1], out[2]);
    for (size_t k = 0; k < m; k++)
        y[k] = out[k];
}

static void oj_parts(const ad_real *x, size_t n, void *ctx, ad_real *y, ad_real *u)
{
    ad_real v[3];
    for (size_t i = 0; i < 3; i++)
        v[i] = ad_add(ad_mul(OJ_A[i], x[i]), OJ_B[i]);
    note(ctx, ad_jvp_r(F2_r, NULL, n, x, v, 2, y, u));
}

static ad_real oj(const ad_real *x, size_t n, void *ctx)
{
    ad_real y[2], u[2];
    oj_parts(x, n, ctx, y, u);
    ad_real r = ad_add(ad_add(y[0], y[1]), ad_add(ad_mul(OJ_D[0], u[0]), ad_mul(OJ_D[1], u[1])));
    return ad_add(r, ad_mul(u[0], u[1]));
}

static void vj(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    ad_real out[5];
    oj_parts(x, n, ctx, &out[0], &out[2]);
    out[4] = ad_mul(out[2], out[3]);
    for (size_t k = 0; k < m; k++)
        y[k] = out[k];
}

/* Closed forms of og: value, gradient, Hessian, and of vg: outputs and
 * Jacobian (5 x 3). */
static double og_value(const double *x)
{
    double g[3];
    f3_grad(x, g);
    return f3_d(x, 3, NULL) + OG_C[0] * g[0] + OG_C[1] * g[1] + OG_C[2] * g[2] + g[0] * g[1];
}

static void og_grad(const double *x, double *out)
{
    double g[3], H[9];
    f3_grad(x, g);
    f3_hess(x, H);
    for (int j = 0; j < 3; j++) {
        out[j] = g[j] + g[1] * H[j] + g[0] * H[3 + j];
        for (int i = 0; i < 3; i++)
            out[j] += OG_C[i] * H[3 * i + j];
    }
}

static void og_hess(const double *x, double *out)
{
    double g[3], H[9], T[27];
    f3_grad(x, g);
    f3_hess(x, H);
    f3_third(x, T);
    for (int j = 0; j < 3; j++)
        for (int k = 0; k < 3; k++) {
            double s = H[3 * j + k] + H[j] * H[3 + k] + H[3 + j] * H[k] + g[1] * T[3 * j + k] +
                       g[0] * T[9 + 3 * j + k];
            for (int i = 0; i < 3; i++)
                s += OG_C[i] * T[9 * i + 3 * j + k];
            out[3 * j + k] = s;
        }
}

static void vg_jac(const double *x, double *y, double *J)
{
    double g[3], H[9];
    f3_grad(x, g);
    f3_hess(x, H);
    y[0] = f3_d(x, 3, NULL);
    for (int i = 0; i < 3; i++)
        y[1 + i] = g[i];
    y[4] = g[0] * g[1];
    for (int j = 0; j < 3; j++) {
        J[j] = g[j];
        for (int i = 0; i < 3; i++)
            J[3 * (1 + i) + j] = H[3 * i + j];
        J[12 + j] = g[1] * H[j] + g[0] * H[3 + j];
    }
}

/* oj's pieces at x: y, J (2 x 3), u = J v, U = du/dx (2 x 3) and
 * V[k] = d2u_k/dx2 (3 x 3 each), H[k] = d2y_k/dx2. */
typedef struct oj_pieces {
    double v[3], y[2], J[6], u[2], U[6], V[2][9], H[2][9];
} oj_pieces;

static void oj_compute(const double *x, oj_pieces *p)
{
    for (int i = 0; i < 3; i++)
        p->v[i] = OJ_A[i] * x[i] + OJ_B[i];
    for (int k = 0; k < 2; k++) {
        p->y[k] = F2_at(k, x, NULL, 0);
        p->u[k] = 0.0;
        for (int j = 0; j < 3; j++) {
            p->J[3 * k + j] = F2_at(k, x, (int[]){j}, 1);
            p->u[k] += p->J[3 * k + j] * p->v[j];
        }
        for (int j = 0; j < 3; j++) {
            double s = p->J[3 * k + j] * OJ_A[j];
            for (int i = 0; i < 3; i++)
                s += F2_at(k, x, (int[]){i, j}, 2) * p->v[i];
            p->U[3 * k + j] = s;
            for (int l = 0; l < 3; l++) {
                double h = F2_at(k, x, (int[]){j, l}, 2), t = h * (OJ_A[l] + OJ_A[j]);
                for (int i = 0; i < 3; i++)
                    t += F2_at(k, x, (int[]){i, j, l}, 3) * p->v[i];
                p->H[k][3 * j + l] = h;
                p->V[k][3 * j + l] = t;
            }
        }
    }
}

static double oj_value(const double *x)
{
    oj_pieces p;
    oj_compute(x, &p);
    return p.y[0] + p.y[1] + OJ_D[0] * p.u[0] + OJ_D[1] * p.u[1] + p.u[0] * p.u[1];
}

static void oj_grad(const double *x, double *out)
{
    oj_pieces p;
    oj_compute(x, &p);
    for (int j = 0; j < 3; j++)
        out[j] = p.J[j] + p.J[3 + j] + OJ_D[0] * p.U[j] + OJ_D[1] * p.U[3 + j] +
                 p.U[j] * p.u[1] + p.u[0] * p.U[3 + j];
}

static void oj_hess(const double *x, double *out)
{
    oj_pieces p;
    oj_compute(x, &p);
    for (int j = 0; j < 3; j++)
        for (int l = 0; l < 3; l++) {
            int e = 3 * j + l;
            out[e] = p.H[0][e] + p.H[1][e] + OJ_D[0] * p.V[0][e] + OJ_D[1] * p.V[1][e] +
                     p.V[0][e] * p.u[1] + p.U[j] * p.U[3 + l] + p.U[l] * p.U[3 + j] +
                     p.u[0] * p.V[1][e];
        }
}

static void vj_jac(const double *x, double *y, double *J)
{
    oj_pieces p;
    oj_compute(x, &p);
    y[0] = p.y[0], y[1] = p.y[1], y[2] = p.u[0], y[3] = p.u[1], y[4] = p.u[0] * p.u[1];
    for (int j = 0; j < 3; j++) {
        J[j] = p.J[j];
        J[3 + j] = p.J[3 + j];
        J[6 + j] = p.U[j];
        J[9 + j] = p.U[3 + j];
        J[12 + j] = p.u[1] * p.U[j] + p.u[0] * p.U[3 + j];
    }
}

/* The two kinds of enclosed call, for the driver tests. */
typedef struct nest_kind {
    const char *name;
    ad_objective scalar;
    ad_function vector;
    double (*value)(const double *x);
    void (*grad)(const double *x, double *g);
    void (*hess)(const double *x, double *H);
    void (*jac)(const double *x, double *y, double *J);
} nest_kind;

static const nest_kind kinds[2] = {
    {"ad_gradient_r", og, vg, og_value, og_grad, og_hess, vg_jac},
    {"ad_jvp_r", oj, vj, oj_value, oj_grad, oj_hess, vj_jac},
};

#define NPTS 3
static const double pts[NPTS][3] = {{0.3, -0.4, 0.5}, {-0.7, 0.2, 0.9}, {0.1, 1.1, -0.6}};

/* The plain forms of the closed forms, for finite differences. */
static double kind_value_d(const double *x, size_t n, const void *ctx)
{
    const nest_kind *k = ctx;
    (void)n;
    return k->value(x);
}

static double kind_grad_d(const double *x, size_t n, const void *ctx)
{
    const int *which = ctx;  /* {kind, component} */
    double g[3];
    (void)n;
    kinds[which[0]].grad(x, g);
    return g[which[1]];
}

/* Output which[1] of vg (which[0] = 0) or vj (1), from the closed forms:
 * each row of the Jacobians checked by finite differences. */
static double kind_out_d(const double *x, size_t n, const void *ctx)
{
    const int *which = ctx;
    (void)n;
    if (which[0] == 0) {
        double g[3];
        f3_grad(x, g);
        double y[5] = {f3_d(x, 3, NULL), g[0], g[1], g[2], g[0] * g[1]};
        return y[which[1]];
    }
    oj_pieces p;
    oj_compute(x, &p);
    double y[5] = {p.y[0], p.y[1], p.u[0], p.u[1], p.u[0] * p.u[1]};
    return y[which[1]];
}

static void kind_hv(const nest_kind *k, const double *x, const double *v, double *hv)
{
    double H[9];
    k->hess(x, H);
    for (int i = 0; i < 3; i++)
        hv[i] = H[3 * i] * v[0] + H[3 * i + 1] * v[1] + H[3 * i + 2] * v[2];
}

/* ---- the oracles, checked against finite differences of f3, F2 and
 * of themselves, so that a wrong closed form cannot pass as a bug ---- */

static void test_oracles(void **state)
{
    (void)state;
    for (int p = 0; p < NPTS; p++) {
        const double *x = pts[p];
        double g[3], H[9], T[27], fd[27], noise[27];
        f3_grad(x, g);
        fd_gradient(f3_d, NULL, 3, x, fd, noise);
        vec_near_fd("f3 gradient", g, fd, noise, 3);
        f3_hess(x, H);
        fd_hessian(f3_d, NULL, 3, x, fd, noise);
        vec_near_fd("f3 Hessian", H, fd, noise, 9);
        f3_third(x, T);
        for (int i = 0; i < 3; i++) {
            fd_third(f3_d, NULL, 3, x, unit[i], fd, noise);
            vec_near_fd("f3 third derivatives", T + 9 * i, fd, noise, 9);
        }
        for (int k = 0; k < 2; k++) {
            double Fd[9], Fn[9], Fc[9];
            fd_hessian(F2_d, &k, 3, x, Fd, Fn);
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++)
                    Fc[3 * i + j] = F2_at(k, x, (int[]){i, j}, 2);
            vec_near_fd("F2 Hessian", Fc, Fd, Fn, 9);
            for (int i = 0; i < 3; i++) {
                fd_third(F2_d, &k, 3, x, unit[i], Fd, Fn);
                for (int j = 0; j < 9; j++)
                    Fc[j] = F2_at(k, x, (int[]){i, j / 3, j % 3}, 3);
                vec_near_fd("F2 third derivatives", Fc, Fd, Fn, 9);
            }
        }
        for (int q = 0; q < 2; q++) {
            const nest_kind *k = &kinds[q];
            double got[9], want[9], nz[9];
            k->grad(x, got);
            fd_gradient(kind_value_d, k, 3, x, want, nz);
            vec_near_fd("outer gradient", got, want, nz, 3);
            k->hess(x, got);
            for (int c = 0; c < 3; c++) {
                int which[2] = {q, c};
                fd_gradient(kind_grad_d, which, 3, x, want + 3 * c, nz + 3 * c);
            }
            vec_near_fd("outer Hessian", got, want, nz, 9);
            double y[5], J[15];
            k->jac(x, y, J);
            for (int r = 0; r < 5; r++) {
                int which[2] = {q, r};
                assert_near(kind_out_d(x, 3, which), y[r], 1e-15, 0.0);
                fd_gradient(kind_out_d, which, 3, x, want, nz);
                vec_near_fd("outer Jacobian row", J + 3 * r, want, nz, 3);
            }
        }
    }
}

/* ======================================================================
 * 4. Programs longer than a tape has held: the first ones on a fresh
 *    thread or after ad_release, and each one longer than any before
 * ====================================================================== */

/* f = sum_k sin(c_k x0) x1, c_k = 1 + k / K: 3 records per term. */
static double long_c(long k, long K)
{
    return 1.0 + (double)k / (double)K;
}

static ad_real long_inner(const ad_real *x, size_t n, void *ctx)
{
    long K = *(const long *)ctx;
    ad_real s = ad_const(0.0);
    (void)n;
    for (long k = 0; k < K; k++)
        s = ad_add(s, ad_mul(ad_sin(ad_mul(x[0], long_c(k, K))), x[1]));
    return s;
}

typedef struct long_ctx {
    long K;
    ad_status st;
} long_ctx;

/* The gradient by ad_gradient_r, as outputs: the Jacobian is the Hessian. */
static void long_grad_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    long_ctx *c = ctx;
    ad_real fx;
    (void)m;
    ad_status s = ad_gradient_r(long_inner, &c->K, n, x, &fx, y);
    if (s != AD_OK)
        c->st = s;
}

/* df/dx0 by ad_gradient_r, then its gradient by ad_gradient_r: (f_00, f_01) */
static ad_real long_d0(const ad_real *x, size_t n, void *ctx)
{
    long_ctx *c = ctx;
    ad_real fx, g[2];
    ad_status s = ad_gradient_r(long_inner, &c->K, n, x, &fx, g);
    if (s != AD_OK)
        c->st = s;
    return g[0];
}

static ad_real long_d00(const ad_real *x, size_t n, void *ctx)
{
    long_ctx *c = ctx;
    ad_real fx, g[2];
    ad_status s = ad_gradient_r(long_d0, c, n, x, &fx, g);
    if (s != AD_OK)
        c->st = s;
    return g[0];
}

/* The Hessian and (f_000, f_001) in closed form. */
static void long_closed(long K, const double *x, double *H, double *T)
{
    double h00 = 0, h01 = 0, t0 = 0, t1 = 0;
    for (long k = 0; k < K; k++) {
        double c = long_c(k, K), s = sin(c * x[0]), co = cos(c * x[0]);
        h00 -= c * c * s * x[1];
        h01 += c * co;
        t0 -= c * c * c * co * x[1];
        t1 -= c * c * s;
    }
    H[0] = h00, H[1] = H[2] = h01, H[3] = 0.0;
    T[0] = t0, T[1] = t1;
}

static const double LONG_X[2] = {0.7, -1.3};

/* Checks the nested Hessian (depth 1) and third derivatives (depth 2) of
 * the K-term function; returns the number of failures (usable on any
 * thread). */
static int long_check(long K, char *msg, size_t len)
{
    long_ctx c = {K, AD_OK};
    double y[2], J[4], H[4], T[2], fx, g[2];
    int bad = 0;
    long_closed(K, LONG_X, H, T);
    ad_status s = ad_jacobian(long_grad_fn, &c, 2, LONG_X, 2, y, J);
    if (s != AD_OK || c.st != AD_OK) {
        snprintf(msg, len, "K = %ld: Hessian by nesting: status %d, inner %d", K, (int)s,
                 (int)c.st);
        bad = 1;
    }
    for (int i = 0; !bad && i < 4; i++)
        if (!(fabs(J[i] - H[i]) <= RTOL * (fabs(H[0]) + fabs(H[1])))) {
            snprintf(msg, len, "K = %ld: Hessian entry %d by nesting %.17g, expected %.17g", K,
                     i, J[i], H[i]);
            bad = 1;
        }
    c.st = AD_OK;
    s = ad_gradient(long_d00, &c, 2, LONG_X, &fx, g);
    if (s != AD_OK || c.st != AD_OK) {
        if (!bad)
            snprintf(msg, len, "K = %ld: depth 2: status %d, inner %d", K, (int)s, (int)c.st);
        return 1;
    }
    for (int i = 0; i < 2; i++)
        if (!(fabs(g[i] - T[i]) <= RTOL * (fabs(T[0]) + fabs(T[1])))) {
            if (!bad)
                snprintf(msg, len, "K = %ld: third derivative %d by nesting %.17g, expected %.17g",
                         K, i, g[i], T[i]);
            return 1;
        }
    return bad;
}

static void *long_on_new_thread(void *arg)
{
    char *msg = arg;
    long_check(40, msg, 200);
    return NULL;
}

static void test_long_programs(void **state)
{
    static const long Ks[] = {10, 40, 400, 4000};
    char msg[200] = "";
    int failures = 0;
    (void)state;
    /* after ad_release: 120 records on the inner tape, more than its first room */
    assert_ok(ad_release());
    if (long_check(40, msg, sizeof msg)) {
        print_error("after ad_release: %s\n", msg);
        failures++;
    }
    /* each longer than the one before, on tapes kept */
    assert_ok(ad_release());
    for (size_t i = 0; i < sizeof Ks / sizeof Ks[0]; i++)
        if (long_check(Ks[i], msg, sizeof msg)) {
            print_error("growing: %s\n", msg);
            failures++;
        }
    /* a fresh thread's first nested call */
    pthread_t t;
    msg[0] = '\0';
    assert_int_equal(pthread_create(&t, NULL, long_on_new_thread, msg), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    if (msg[0]) {
        print_error("on a new thread: %s\n", msg);
        failures++;
    }
    assert_int_equal(failures, 0);
}

/* ======================================================================
 * 5. Every driver encloses both calls
 * ====================================================================== */

static const double DIR_V[3] = {0.7, -0.2, 1.3};
static const double DIR_W[5] = {0.5, -1.0, 0.25, 2.0, -0.75};

static void expect_inner_ok(const probe *p, const char *what)
{
    if (p->inner != AD_OK || p->calls == 0) {
        print_error("%s: inner call status %d (%s), %d calls\n", what, (int)p->inner,
                    ad_strerror(p->inner), p->calls);
        fail();
    }
}

static void matvec3(size_t m, const double *J, const double *v, double *out)
{
    for (size_t r = 0; r < m; r++)
        out[r] = J[3 * r] * v[0] + J[3 * r + 1] * v[1] + J[3 * r + 2] * v[2];
}

static void vecmat3(size_t m, const double *w, const double *J, double *out)
{
    for (int j = 0; j < 3; j++) {
        out[j] = 0.0;
        for (size_t r = 0; r < m; r++)
            out[j] += w[r] * J[3 * r + (size_t)j];
    }
}

static void test_enclosed_by_gradient(void **state)
{
    (void)state;
    for (int q = 0; q < 2; q++)
        for (int p = 0; p < NPTS; p++) {
            const nest_kind *k = &kinds[q];
            probe pr = {AD_OK, 0};
            double fx, g[3], want[3];
            assert_ok(ad_gradient(k->scalar, &pr, 3, pts[p], &fx, g));
            expect_inner_ok(&pr, k->name);
            assert_near(fx, k->value(pts[p]), 1e-14, 0.0);
            k->grad(pts[p], want);
            vec_near(k->name, g, want, 3, RTOL, 0.0);
        }
}

static void test_enclosed_by_jvp(void **state)
{
    (void)state;
    for (int q = 0; q < 2; q++)
        for (int p = 0; p < NPTS; p++) {
            const nest_kind *k = &kinds[q];
            probe pr = {AD_OK, 0};
            double y[5], jv[5], wy[5], J[15], want[5];
            assert_ok(ad_jvp(k->vector, &pr, 3, pts[p], DIR_V, 5, y, jv));
            expect_inner_ok(&pr, k->name);
            k->jac(pts[p], wy, J);
            vec_near("y", y, wy, 5, 1e-14, 0.0);
            matvec3(5, J, DIR_V, want);
            vec_near("J v", jv, want, 5, RTOL, 0.0);
        }
}

static void test_enclosed_by_vjp(void **state)
{
    (void)state;
    for (int q = 0; q < 2; q++)
        for (int p = 0; p < NPTS; p++) {
            const nest_kind *k = &kinds[q];
            probe pr = {AD_OK, 0};
            double y[5], wj[3], wy[5], J[15], want[3];
            assert_ok(ad_vjp(k->vector, &pr, 3, pts[p], 5, DIR_W, y, wj));
            expect_inner_ok(&pr, k->name);
            k->jac(pts[p], wy, J);
            vec_near("y", y, wy, 5, 1e-14, 0.0);
            vecmat3(5, DIR_W, J, want);
            vec_near("w^T J", wj, want, 3, RTOL, 0.0);
        }
}

/* m = 5 > n: forward sweeps; m = 2 < n: reverse sweeps. */
static void test_enclosed_by_jacobian(void **state)
{
    (void)state;
    for (int q = 0; q < 2; q++)
        for (size_t m = 2; m <= 5; m += 3)
            for (int p = 0; p < NPTS; p++) {
                const nest_kind *k = &kinds[q];
                probe pr = {AD_OK, 0};
                double y[5], jac[15], wy[5], J[15];
                assert_ok(ad_jacobian(k->vector, &pr, 3, pts[p], m, y, jac));
                expect_inner_ok(&pr, k->name);
                k->jac(pts[p], wy, J);
                vec_near("y", y, wy, m, 1e-14, 0.0);
                vec_near("Jacobian", jac, J, 3 * m, RTOL, 0.0);
            }
}

static void test_enclosed_by_linearize(void **state)
{
    static const double V[9] = {1, 0, 0, 0.5, -1, 2, 0, 0.25, 1};
    (void)state;
    for (int q = 0; q < 2; q++)
        for (int p = 0; p < NPTS; p++) {
            const nest_kind *k = &kinds[q];
            probe pr = {AD_OK, 0};
            ad_linear *L = NULL;
            double y[5], wy[5], J[15], got[15], want[15];
            assert_ok(ad_linearize(k->vector, &pr, 3, pts[p], 5, y, &L));
            assert_non_null(L);
            expect_inner_ok(&pr, k->name);
            k->jac(pts[p], wy, J);
            vec_near("y", y, wy, 5, 1e-14, 0.0);
            for (int rep = 0; rep < 2; rep++) {
                if (rep) {  /* the handle outlives other nested calls on the same tapes */
                    double fx, g[3], H[9];
                    assert_ok(ad_hessian(kinds[1 - q].scalar, NULL, 3, pts[(p + 1) % NPTS], &fx,
                                         g, H));
                }
                assert_ok(ad_linear_jvp(L, DIR_V, got));
                matvec3(5, J, DIR_V, want);
                vec_near("linear J v", got, want, 5, RTOL, 0.0);
                assert_ok(ad_linear_vjp(L, DIR_W, got));
                vecmat3(5, DIR_W, J, want);
                vec_near("linear w^T J", got, want, 3, RTOL, 0.0);
            }
            assert_ok(ad_linear_jvps(L, 3, V, got));
            for (int j = 0; j < 3; j++) {
                matvec3(5, J, V + 3 * j, want);
                vec_near("linear J V", got + 5 * j, want, 5, RTOL, 0.0);
            }
            double W[15];
            for (int i = 0; i < 15; i++)
                W[i] = i % 5 == i / 5 ? 1.0 : 0.1 * (i % 3);
            assert_ok(ad_linear_vjps(L, 3, W, got));
            for (int j = 0; j < 3; j++) {
                vecmat3(5, W + 5 * j, J, want);
                vec_near("linear W^T J", got + 3 * j, want, 3, RTOL, 0.0);
            }
            ad_linear_free(L);
        }
}

static void test_enclosed_by_hvp(void **state)
{
    (void)state;
    for (int q = 0; q < 2; q++)
        for (int p = 0; p < NPTS; p++) {
            const nest_kind *k = &kinds[q];
            probe pr = {AD_OK, 0};
            double fx, g[3], hv[3], wg[3], want[3];
            assert_ok(ad_hvp(k->scalar, &pr, 3, pts[p], DIR_V, &fx, g, hv));
            expect_inner_ok(&pr, k->name);
            assert_near(fx, k->value(pts[p]), 1e-14, 0.0);
            k->grad(pts[p], wg);
            vec_near("gradient", g, wg, 3, RTOL, 0.0);
            kind_hv(k, pts[p], DIR_V, want);
            vec_near("H v", hv, want, 3, RTOL, 0.0);
        }
}

static void test_enclosed_by_hvps(void **state)
{
    static const double V[12] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 0.7, -0.2, 1.3};
    (void)state;
    for (int q = 0; q < 2; q++)
        for (int p = 0; p < NPTS; p++) {
            const nest_kind *k = &kinds[q];
            probe pr = {AD_OK, 0};
            double fx, g[3], HV[12], wg[3], want[3];
            assert_ok(ad_hvps(k->scalar, &pr, 3, pts[p], 4, V, &fx, g, HV));
            expect_inner_ok(&pr, k->name);
            k->grad(pts[p], wg);
            vec_near("gradient", g, wg, 3, RTOL, 0.0);
            for (int j = 0; j < 4; j++) {
                kind_hv(k, pts[p], V + 3 * j, want);
                vec_near("H v_j", HV + 3 * j, want, 3, RTOL, 0.0);
            }
        }
}

/* Third derivatives of f3 and F2 are in these Hessians. */
static void test_enclosed_by_hessian(void **state)
{
    (void)state;
    for (int q = 0; q < 2; q++)
        for (int p = 0; p < NPTS; p++) {
            const nest_kind *k = &kinds[q];
            probe pr = {AD_OK, 0};
            double fx, g[3], H[9], wg[3], want[9];
            assert_ok(ad_hessian(k->scalar, &pr, 3, pts[p], &fx, g, H));
            expect_inner_ok(&pr, k->name);
            assert_near(fx, k->value(pts[p]), 1e-14, 0.0);
            k->grad(pts[p], wg);
            vec_near("gradient", g, wg, 3, RTOL, 0.0);
            k->hess(pts[p], want);
            vec_near("Hessian", H, want, 9, RTOL, 0.0);
        }
}

/* A CSR against a dense matrix (rows x cols, lower triangle only if
 * lower): every stored entry matches, every missing one is 0. */
static void csr_matches(const char *what, const ad_csr *A, const double *dense, size_t rows,
                        size_t cols, int lower)
{
    double *got = dalloc(rows * cols), *want = dalloc(rows * cols);
    for (size_t i = 0; i < rows * cols; i++) {
        got[i] = 0.0;
        want[i] = lower && i % cols > i / cols ? 0.0 : dense[i];
    }
    for (size_t r = 0; r < rows; r++)
        for (size_t e = A->row_ptr[r]; e < A->row_ptr[r + 1]; e++)
            got[r * cols + A->col[e]] = A->val[e];
    vec_near(what, got, want, rows * cols, RTOL, 0.0);
    free(got);
    free(want);
}

static void test_enclosed_by_sparse_jacobian(void **state)
{
    (void)state;
    for (int q = 0; q < 2; q++)
        for (int p = 0; p < NPTS; p++) {
            const nest_kind *k = &kinds[q];
            probe pr = {AD_OK, 0};
            double y[5], wy[5], J[15];
            ad_csr S;
            assert_ok(ad_sparse_jacobian(k->vector, &pr, 3, pts[p], 5, y, &S));
            expect_inner_ok(&pr, k->name);
            assert_csr_valid(&S, 5, 3);
            k->jac(pts[p], wy, J);
            vec_near("y", y, wy, 5, 1e-14, 0.0);
            csr_matches("sparse Jacobian", &S, J, 5, 3, 0);
            ad_csr_free(&S);
        }
}

static void test_enclosed_by_sparse_hessian(void **state)
{
    (void)state;
    for (int q = 0; q < 2; q++)
        for (int p = 0; p < NPTS; p++) {
            const nest_kind *k = &kinds[q];
            probe pr = {AD_OK, 0};
            double fx, g[3], wg[3], want[9];
            ad_csr S;
            assert_ok(ad_sparse_hessian(k->scalar, &pr, 3, pts[p], &fx, g, &S));
            expect_inner_ok(&pr, k->name);
            assert_csr_valid(&S, 3, 3);
            k->grad(pts[p], wg);
            vec_near("gradient", g, wg, 3, RTOL, 0.0);
            k->hess(pts[p], want);
            csr_matches("sparse Hessian", &S, want, 3, 3, 1);
            /* the values at the next point, in this structure */
            const double *x2 = pts[(p + 1) % NPTS];
            ad_status st = ad_sparse_hessian_values(k->scalar, &pr, 3, x2, &fx, g, &S);
            assert_ok(st);
            k->hess(x2, want);
            csr_matches("sparse Hessian values", &S, want, 3, 3, 1);
            ad_csr_free(&S);
        }
}

/* Term i: the kind's function at x shifted by shift_of(i, .), the shifted
 * inputs sharing x's IDs (x + c records nothing). */
static double shift_of(size_t i, size_t j)
{
    return 0.01 * (double)((i * 7 + j * 3) % 11) - 0.05;
}

static ad_real sum_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    const nest_kind *k = ctx;
    ad_real xs[3];
    for (size_t j = 0; j < 3; j++)
        xs[j] = ad_add(x[j], shift_of(i, j));
    return k->scalar(xs, n, NULL);
}

#define NTERMS 24

static void test_enclosed_by_gradient_sum(void **state)
{
    static const unsigned threads[] = {1, 2, 0};
    (void)state;
    size_t old = ad_set_sum_chunk_bytes(4096);  /* several chunks: every thread gets some */
    for (int q = 0; q < 2; q++)
        for (int p = 0; p < NPTS; p++) {
            const nest_kind *k = &kinds[q];
            double wf = 0.0, wg[3] = {0, 0, 0}, whv[3] = {0, 0, 0}, g1[3], hv1[3];
            for (size_t i = 0; i < NTERMS; i++) {
                double xs[3], gi[3], hi[3];
                for (size_t j = 0; j < 3; j++)
                    xs[j] = pts[p][j] + shift_of(i, j);
                wf += k->value(xs);
                k->grad(xs, gi);
                kind_hv(k, xs, DIR_V, hi);
                for (int j = 0; j < 3; j++)
                    wg[j] += gi[j], whv[j] += hi[j];
            }
            for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
                double fx, g[3], fx2, g2[3], hv[3];
                assert_ok(ad_gradient_sum(sum_term, (void *)k, NTERMS, 3, pts[p], &fx, g,
                                          threads[t]));
                assert_near(fx, wf, 1e-13, 0.0);
                vec_near("sum gradient", g, wg, 3, RTOL, 0.0);
                assert_ok(ad_hvp_sum(sum_term, (void *)k, NTERMS, 3, pts[p], DIR_V, &fx2, g2, hv,
                                     threads[t]));
                vec_near("sum gradient (hvp)", g2, wg, 3, RTOL, 0.0);
                vec_near("sum H v", hv, whv, 3, RTOL, 0.0);
                if (t == 0) {
                    memcpy(g1, g, sizeof g1);
                    memcpy(hv1, hv, sizeof hv1);
                }
                for (int j = 0; j < 3; j++) {  /* the same bits for every thread count */
                    assert_same(g[j], g1[j]);
                    assert_same(hv[j], hv1[j]);
                }
            }
        }
    ad_set_sum_chunk_bytes(old);
}

/* ---- checkpointed loops: the nested call in the step ----
 *
 * State s (3), one parameter p.  Gradient kind: s' = s - p grad f3(s), a
 * gradient-descent step.  JVP kind: (y, u) = F2 at s along v = s, and
 * s' = s + p (u0, u1, -y0).  The objective is c.s_N + s_N0 s_N1 over
 * x = (s_0, p); its closed-form gradient is carried through the steps
 * (loop_closed), its Hessian is the finite difference of that. */

#define LOOP_STEPS 7
static const double LOOP_C[3] = {0.6, -0.4, 0.9};

typedef struct loop_ctx {
    int kind;
    size_t snaps;
    ad_status inner, loop;
} loop_ctx;

static void loop_note(ad_status *slot, ad_status s)
{
    if (s != AD_OK && *slot == AD_OK)
        *slot = s;
}

static void nested_step(size_t k, const ad_real *s, ad_real *next, size_t n,
                        const ad_real *params, size_t np, void *ctx)
{
    loop_ctx *L = ctx;
    (void)k, (void)np;
    if (L->kind == 0) {
        ad_real fx, g[3];
        loop_note(&L->inner, ad_gradient_r(f3_r, NULL, n, s, &fx, g));
        for (size_t i = 0; i < 3; i++)
            next[i] = ad_sub(s[i], ad_mul(params[0], g[i]));
    } else {
        ad_real y[2], u[2];
        loop_note(&L->inner, ad_jvp_r(F2_r, NULL, n, s, s, 2, y, u));
        next[0] = ad_add(s[0], ad_mul(params[0], u[0]));
        next[1] = ad_add(s[1], ad_mul(params[0], u[1]));
        next[2] = ad_sub(s[2], ad_mul(params[0], y[0]));
    }
}

static void loop_final(const ad_real *x, void *ctx, ad_real *sN)
{
    loop_ctx *L = ctx;
    loop_note(&L->loop, ad_checkpointed_loop(nested_step, L, LOOP_STEPS, L->snaps, 3, x, 1,
                                             x + 3, sN));
}

static ad_real loop_objective(const ad_real *x, size_t n, void *ctx)
{
    ad_real sN[3];
    (void)n;
    loop_final(x, ctx, sN);
    return ad_add(ad_dot(3, sN, LOOP_C), ad_mul(sN[0], sN[1]));
}

static void loop_function(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m;
    loop_final(x, ctx, y);
}

/* The final state and D = d s_N / d x (3 x 4), stepped in closed form. */
static void loop_closed(int kind, const double *x, double *s, double *D)
{
    double p = x[3];
    memcpy(s, x, 3 * sizeof *s);
    for (int i = 0; i < 12; i++)
        D[i] = i / 4 == i % 4 ? 1.0 : 0.0;
    for (int step = 0; step < LOOP_STEPS; step++) {
        double G[3], dG[9], nD[12];
        if (kind == 0) {
            double g[3], H[9];
            f3_grad(s, g);
            f3_hess(s, H);
            for (int i = 0; i < 3; i++) {
                G[i] = -g[i];
                for (int j = 0; j < 3; j++)
                    dG[3 * i + j] = -H[3 * i + j];
            }
        } else {
            double y0 = F2_at(0, s, NULL, 0), u[2], U[6];
            for (int k = 0; k < 2; k++) {
                u[k] = 0.0;
                for (int j = 0; j < 3; j++) {
                    double Jkj = F2_at(k, s, (int[]){j}, 1), t = Jkj;
                    u[k] += Jkj * s[j];
                    for (int i = 0; i < 3; i++)
                        t += F2_at(k, s, (int[]){i, j}, 2) * s[i];
                    U[3 * k + j] = t;
                }
            }
            G[0] = u[0], G[1] = u[1], G[2] = -y0;
            for (int j = 0; j < 3; j++) {
                dG[j] = U[j];
                dG[3 + j] = U[3 + j];
                dG[6 + j] = -F2_at(0, s, (int[]){j}, 1);
            }
        }
        for (int i = 0; i < 3; i++)
            for (int c = 0; c < 4; c++) {
                double t = D[4 * i + c];
                for (int j = 0; j < 3; j++)
                    t += p * dG[3 * i + j] * D[4 * j + c];
                nD[4 * i + c] = t + (c == 3 ? G[i] : 0.0);
            }
        for (int i = 0; i < 3; i++)
            s[i] += p * G[i];
        memcpy(D, nD, sizeof nD);
    }
}

static void loop_grad_closed(int kind, const double *x, double *g, double *value)
{
    double s[3], D[12], c[3];
    loop_closed(kind, x, s, D);
    c[0] = LOOP_C[0] + s[1], c[1] = LOOP_C[1] + s[0], c[2] = LOOP_C[2];
    for (int j = 0; j < 4; j++)
        g[j] = c[0] * D[j] + c[1] * D[4 + j] + c[2] * D[8 + j];
    if (value)
        *value = LOOP_C[0] * s[0] + LOOP_C[1] * s[1] + LOOP_C[2] * s[2] + s[0] * s[1];
}

static double loop_grad_d(const double *x, size_t n, const void *ctx)
{
    const int *which = ctx;  /* {kind, component} */
    double g[4];
    (void)n;
    loop_grad_closed(which[0], x, g, NULL);
    return g[which[1]];
}

static void test_enclosed_by_checkpointed_loop(void **state)
{
    static const size_t snaps[] = {2, 0};
    (void)state;
    for (int q = 0; q < 2; q++)
        for (size_t si = 0; si < 2; si++)
            for (int p = 0; p < NPTS; p++) {
                double x[4] = {pts[p][0], pts[p][1], pts[p][2], 0.05};
                loop_ctx L = {q, snaps[si], AD_OK, AD_OK};
                double fx, g[4], wg[4], wf, H[16], FD[16], noise[16], hv[4];
                loop_grad_closed(q, x, wg, &wf);
                assert_ok(ad_gradient(loop_objective, &L, 4, x, &fx, g));
                assert_int_equal(L.inner, AD_OK);
                assert_int_equal(L.loop, AD_OK);
                assert_near(fx, wf, 1e-13, 0.0);
                vec_near("loop gradient", g, wg, 4, RTOL, 0.0);
                /* Hessian: against finite differences of the closed-form gradient */
                for (int c = 0; c < 4; c++) {
                    int which[2] = {q, c};
                    fd_gradient(loop_grad_d, which, 4, x, FD + 4 * c, noise + 4 * c);
                }
                assert_ok(ad_hessian(loop_objective, &L, 4, x, &fx, g, H));
                assert_int_equal(L.inner, AD_OK);
                vec_near("loop Hessian gradient", g, wg, 4, RTOL, 0.0);
                vec_near_fd("loop Hessian", H, FD, noise, 16);
                ad_csr S;
                assert_ok(ad_sparse_hessian(loop_objective, &L, 4, x, &fx, g, &S));
                assert_csr_valid(&S, 4, 4);
                csr_matches("loop sparse Hessian against ad_hessian", &S, H, 4, 4, 1);
                ad_csr_free(&S);
                const double v[4] = {0.3, -1.0, 0.5, 2.0};
                assert_ok(ad_hvp(loop_objective, &L, 4, x, v, &fx, g, hv));
                double want[4], wn[4];
                for (int i = 0; i < 4; i++) {
                    want[i] = wn[i] = 0.0;
                    for (int j = 0; j < 4; j++) {
                        want[i] += FD[4 * i + j] * v[j];
                        wn[i] += noise[4 * i + j] * fabs(v[j]);
                    }
                }
                vec_near_fd("loop H v", hv, want, wn, 4);
                /* vector drivers over the final state: D */
                double s[3], D[12], y[3], jac[12], jv[3], wJ[4];
                loop_closed(q, x, s, D);
                assert_ok(ad_jacobian(loop_function, &L, 4, x, 3, y, jac));
                vec_near("loop final state", y, s, 3, 1e-13, 0.0);
                vec_near("loop Jacobian", jac, D, 12, RTOL, 0.0);
                assert_ok(ad_jvp(loop_function, &L, 4, x, v, 3, y, jv));
                for (int i = 0; i < 3; i++)
                    want[i] = D[4 * i] * v[0] + D[4 * i + 1] * v[1] + D[4 * i + 2] * v[2] +
                              D[4 * i + 3] * v[3];
                vec_near("loop J v", jv, want, 3, RTOL, 0.0);
                assert_ok(ad_vjp(loop_function, &L, 4, x, 3, LOOP_C, y, wJ));
                for (int j = 0; j < 4; j++)
                    want[j] = LOOP_C[0] * D[j] + LOOP_C[1] * D[4 + j] + LOOP_C[2] * D[8 + j];
                vec_near("loop w^T J", wJ, want, 4, RTOL, 0.0);
                assert_int_equal(L.inner, AD_OK);
                assert_int_equal(L.loop, AD_OK);
            }
}

/* ======================================================================
 * 6. Depth: towers of nested calls
 *
 * Level 0 is f3; level L is the derivative of level L-1 along w_L, taken
 * by ad_gradient_r (then dotted with w_L by ad_dot_rd) or by ad_jvp_r
 * along the constant w_L.  The enclosing driver differentiates level D
 * once (ad_gradient) or twice (ad_hessian): partials of f3 of order D + 1
 * or D + 2, in closed form (f3_deriv).
 * ====================================================================== */

#define TOWER_MAX 6

typedef struct tower {
    int jvp[TOWER_MAX];        /* level L + 1 by ad_jvp_r */
    double w[TOWER_MAX][3];    /* level L + 1's direction */
    ad_status first_error;
    int calls;
} tower;

typedef struct tower_ctx {
    tower *t;
    int level;
} tower_ctx;

static ad_real tower_level(const ad_real *x, size_t n, void *ctx);

static void tower_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = tower_level(x, n, ctx);
}

static ad_real tower_level(const ad_real *x, size_t n, void *ctx)
{
    tower_ctx *c = ctx;
    if (c->level == 0)
        return f3_r(x, n, NULL);
    tower_ctx below = {c->t, c->level - 1};
    const double *w = c->t->w[c->level - 1];
    ad_status s;
    ad_real r;
    if (c->t->jvp[c->level - 1]) {
        ad_real v[3] = {ad_const(w[0]), ad_const(w[1]), ad_const(w[2])}, y;
        s = ad_jvp_r(tower_fn, &below, n, x, v, 1, &y, &r);
    } else {
        ad_real fx, g[3];
        s = ad_gradient_r(tower_level, &below, n, x, &fx, g);
        r = ad_dot(3, g, w);
    }
    c->t->calls++;
    if (s != AD_OK && c->t->first_error == AD_OK)
        c->t->first_error = s;
    return r;
}

/* sum over i_1..i_D of w_1[i_1] ... w_D[i_D] times the partial of f3 along
 * i_1..i_D and extra[0..ne). */
static double tower_closed(const tower *t, int depth, const double *x, const int *extra, int ne)
{
    int idx[TOWER_MAX + 2], total = 1;
    for (int L = 0; L < depth; L++)
        total *= 3;
    double sum = 0.0;
    for (int code = 0; code < total; code++) {
        double wprod = 1.0;
        int c = code;
        for (int L = 0; L < depth; L++, c /= 3) {
            idx[L] = c % 3;
            wprod *= t->w[L][c % 3];
        }
        for (int e = 0; e < ne; e++)
            idx[depth + e] = extra[e];
        if (wprod != 0.0)
            sum += wprod * f3_at(x, idx, depth + ne);
    }
    return sum;
}

static void tower_init(tower *t, unsigned jvp_mask)
{
    static const double W[TOWER_MAX][3] = {{0.5, -0.25, 1.0}, {1.0, 0.5, 0.25}, {-0.5, 1.0, 0.75},
                                           {0.25, 0.25, -1.0}, {1.0, -1.0, 0.5}, {0.5, 0.5, 0.5}};
    memset(t, 0, sizeof *t);
    for (int L = 0; L < TOWER_MAX; L++) {
        t->jvp[L] = (jvp_mask >> L) & 1u;
        memcpy(t->w[L], W[L], sizeof W[L]);
    }
}

/* Scale of the partials of order k of f3 at x: the tolerance is relative
 * to it, since single entries can be near 0 by cancellation. */
static double tower_scale(const tower *t, int depth, const double *x, int ne)
{
    double s = fabs(tower_closed(t, depth, x, NULL, 0));
    for (int i = 0; i < 3; i++) {
        s = fmax(s, fabs(tower_closed(t, depth, x, (int[]){i}, 1)));
        for (int j = 0; ne > 1 && j < 3; j++)
            s = fmax(s, fabs(tower_closed(t, depth, x, (int[]){i, j}, 2)));
    }
    return s;
}

static void check_tower(const tower *t, int depth, const double *x, int second, unsigned mask)
{
    tower_ctx top = {(tower *)t, depth};
    double fx, g[3], H[9];
    ad_status s = second ? ad_hessian(tower_level, &top, 3, x, &fx, g, H)
                         : ad_gradient(tower_level, &top, 3, x, &fx, g);
    if (s != AD_OK || t->first_error != AD_OK) {
        print_error("depth %d (jvp mask %#x): status %d, inner %d\n", depth, mask, (int)s,
                    (int)t->first_error);
        fail();
    }
    double scale = tower_scale(t, depth, x, second ? 2 : 1), tol = RTOL * scale;
    double want = tower_closed(t, depth, x, NULL, 0);
    if (!(fabs(fx - want) <= tol)) {
        print_error("depth %d (mask %#x): value %.17g, expected %.17g\n", depth, mask, fx, want);
        fail();
    }
    for (int i = 0; i < 3; i++) {
        want = tower_closed(t, depth, x, (int[]){i}, 1);
        if (!(fabs(g[i] - want) <= tol)) {
            print_error("depth %d (mask %#x): gradient[%d] %.17g, expected %.17g\n", depth,
                        mask, i, g[i], want);
            fail();
        }
        for (int j = 0; second && j < 3; j++) {
            want = tower_closed(t, depth, x, (int[]){i, j}, 2);
            if (!(fabs(H[3 * i + j] - want) <= tol)) {
                print_error("depth %d (mask %#x): H[%d][%d] %.17g, expected %.17g\n", depth,
                            mask, i, j, H[3 * i + j], want);
                fail();
            }
        }
    }
}

/* ad_gradient over 1 to 5 nested calls: partials of f3 of order 2 to 6;
 * every mix of ad_gradient_r and ad_jvp_r up to depth 3, and some beyond. */
static void test_depth_gradient(void **state)
{
    (void)state;
    for (int depth = 1; depth <= 5; depth++) {
        unsigned masks = depth <= 3 ? 1u << depth : 4;
        for (unsigned k = 0; k < masks; k++) {
            unsigned mask = depth <= 3 ? k : (unsigned[]){0u, 0x1fu, 0x15u, 0x0au}[k];
            for (int p = 0; p < NPTS; p++) {
                tower t;
                tower_init(&t, mask);
                check_tower(&t, depth, pts[p], 0, mask);
            }
        }
    }
}

/* ad_hessian over 1 to 3 nested calls: partials of order 3 to 5. */
static void test_depth_hessian(void **state)
{
    (void)state;
    for (int depth = 1; depth <= 3; depth++)
        for (unsigned mask = 0; mask < 1u << depth; mask++)
            for (int p = 0; p < NPTS; p++) {
                tower t;
                tower_init(&t, mask);
                check_tower(&t, depth, pts[p], 1, mask);
            }
}

/* The brief's cases spelled out: d/dx [w2 . grad(w1 . grad f3)] is
 * T(w1, w2, .); ad_hessian of w1 . grad f3 is T(w1, ., .); ad_jacobian of
 * grad(w1 . grad f3) is T(w1, ., .) too. */
static void grad_of_level1(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    tower_ctx *c = ctx;
    ad_real fx;
    (void)m;
    ad_status s = ad_gradient_r(tower_level, ctx, n, x, &fx, y);
    if (s != AD_OK && c->t->first_error == AD_OK)
        c->t->first_error = s;
}

static void test_third_derivatives(void **state)
{
    (void)state;
    for (int p = 0; p < NPTS; p++) {
        const double *x = pts[p];
        tower t;
        tower_init(&t, 0);
        double T[27], want[9], got[9], y[3];
        f3_third(x, T);
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 3; k++) {
                want[3 * j + k] = 0.0;
                for (int i = 0; i < 3; i++)
                    want[3 * j + k] += t.w[0][i] * T[9 * i + 3 * j + k];
            }
        tower_ctx level1 = {&t, 1};
        assert_ok(ad_jacobian(grad_of_level1, &level1, 3, x, 3, y, got));
        assert_int_equal(t.first_error, AD_OK);
        vec_near("Jacobian of grad(w . grad f3)", got, want, 9, RTOL, 0.0);
        double fx, g[3];
        assert_ok(ad_hessian(tower_level, &level1, 3, x, &fx, g, got));
        vec_near("Hessian of w . grad f3", got, want, 9, RTOL, 0.0);
        tower_ctx level2 = {&t, 2};
        assert_ok(ad_gradient(tower_level, &level2, 3, x, &fx, g));
        for (int k = 0; k < 3; k++) {
            double s = 0.0;
            for (int j = 0; j < 3; j++)
                s += t.w[1][j] * want[3 * j + k];
            got[k] = s;
        }
        vec_near("gradient of w2 . grad(w1 . grad f3)", g, got, 3, RTOL, 0.0);
        assert_int_equal(t.first_error, AD_OK);
    }
}

/* ======================================================================
 * 7. Every elementary operation inside the inner function
 * ====================================================================== */

/* f and its first three derivatives at x, in closed form; 0 for lgamma
 * and tgamma, which nested calls refuse. */
static int unary_derivs(const char *name, double x, double d[4])
{
#define IS(s) (strcmp(name, s) == 0)
    double q, t, e;
    if (IS("neg")) {
        d[0] = -x, d[1] = -1.0, d[2] = 0.0, d[3] = 0.0;
    } else if (IS("sqrt")) {
        t = sqrt(x);
        d[0] = t, d[1] = 0.5 / t, d[2] = -0.25 / (x * t), d[3] = 0.375 / (x * x * t);
    } else if (IS("cbrt")) {
        t = cbrt(x);
        d[0] = t, d[1] = 1.0 / (3 * t * t), d[2] = -2.0 / (9 * pow(t, 5));
        d[3] = 10.0 / (27 * pow(t, 8));
    } else if (IS("exp")) {
        d[0] = d[1] = d[2] = d[3] = exp(x);
    } else if (IS("expm1")) {
        d[0] = expm1(x), d[1] = d[2] = d[3] = exp(x);
    } else if (IS("log") || IS("log2") || IS("log10")) {
        double k = IS("log") ? 1.0 : IS("log2") ? 1.0 / log(2.0) : 1.0 / log(10.0);
        d[0] = IS("log") ? log(x) : IS("log2") ? log2(x) : log10(x);
        d[1] = k / x, d[2] = -k / (x * x), d[3] = 2 * k / (x * x * x);
    } else if (IS("log1p")) {
        q = 1.0 + x;
        d[0] = log1p(x), d[1] = 1 / q, d[2] = -1 / (q * q), d[3] = 2 / (q * q * q);
    } else if (IS("sin")) {
        d[0] = sin(x), d[1] = cos(x), d[2] = -sin(x), d[3] = -cos(x);
    } else if (IS("cos")) {
        d[0] = cos(x), d[1] = -sin(x), d[2] = -cos(x), d[3] = sin(x);
    } else if (IS("tan")) {
        t = tan(x);
        d[0] = t, d[1] = 1 + t * t, d[2] = 2 * t * (1 + t * t), d[3] = (1 + t * t) * (2 + 6 * t * t);
    } else if (IS("asin") || IS("acos")) {
        double sg = IS("asin") ? 1.0 : -1.0;
        q = 1 - x * x;
        d[0] = IS("asin") ? asin(x) : acos(x);
        d[1] = sg / sqrt(q), d[2] = sg * x / (q * sqrt(q));
        d[3] = sg * (1 + 2 * x * x) / (q * q * sqrt(q));
    } else if (IS("atan")) {
        q = 1 + x * x;
        d[0] = atan(x), d[1] = 1 / q, d[2] = -2 * x / (q * q), d[3] = (6 * x * x - 2) / (q * q * q);
    } else if (IS("sinh")) {
        d[0] = d[2] = sinh(x), d[1] = d[3] = cosh(x);
    } else if (IS("cosh")) {
        d[0] = d[2] = cosh(x), d[1] = d[3] = sinh(x);
    } else if (IS("tanh")) {
        t = tanh(x);
        d[0] = t, d[1] = 1 - t * t, d[2] = -2 * t * (1 - t * t), d[3] = (1 - t * t) * (6 * t * t - 2);
    } else if (IS("asinh") || IS("acosh")) {
        int as = IS("asinh");
        q = as ? 1 + x * x : x * x - 1;
        d[0] = as ? asinh(x) : acosh(x);
        d[1] = 1 / sqrt(q), d[2] = -x / (q * sqrt(q));
        d[3] = (as ? 2 * x * x - 1 : 2 * x * x + 1) / (q * q * sqrt(q));
    } else if (IS("atanh")) {
        q = 1 - x * x;
        d[0] = atanh(x), d[1] = 1 / q, d[2] = 2 * x / (q * q), d[3] = (2 + 6 * x * x) / (q * q * q);
    } else if (IS("fabs")) {
        d[0] = fabs(x), d[1] = x > 0 ? 1.0 : -1.0, d[2] = d[3] = 0.0;
    } else if (IS("erf") || IS("erfc")) {
        double sg = IS("erf") ? 1.0 : -1.0;
        e = 2 / sqrt(3.14159265358979323846) * exp(-x * x);
        d[0] = IS("erf") ? erf(x) : erfc(x);
        d[1] = sg * e, d[2] = -sg * 2 * x * e, d[3] = sg * (4 * x * x - 2) * e;
    } else {
        return 0;
    }
    return 1;
#undef IS
}

typedef struct unary_ctx {
    const unary_op *op;
    ad_status st;
} unary_ctx;

static void unary_note(unary_ctx *c, ad_status s)
{
    if (s != AD_OK && c->st == AD_OK)
        c->st = s;
}

static ad_real unary_inner(const ad_real *x, size_t n, void *ctx)
{
    (void)n;
    return ((unary_ctx *)ctx)->op->ad(x[0]);
}

static void unary_inner_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = unary_inner(x, n, ctx);
}

/* f'(x) by ad_gradient_r */
static ad_real unary_level1(const ad_real *x, size_t n, void *ctx)
{
    ad_real fx, g;
    unary_note(ctx, ad_gradient_r(unary_inner, ctx, n, x, &fx, &g));
    return g;
}

/* f''(x): ad_gradient_r of the above */
static ad_real unary_level2(const ad_real *x, size_t n, void *ctx)
{
    ad_real fx, g;
    unary_note(ctx, ad_gradient_r(unary_level1, ctx, n, x, &fx, &g));
    return g;
}

/* f'(x) x^2 by ad_jvp_r along the active v = x^2 */
static ad_real unary_jvp(const ad_real *x, size_t n, void *ctx)
{
    ad_real v = ad_mul(x[0], x[0]), y, u;
    unary_note(ctx, ad_jvp_r(unary_inner_fn, ctx, n, x, &v, 1, &y, &u));
    return u;
}

static void near_scaled(const char *what, const char *op, double x, double got, double want,
                        double scale)
{
    double tol = RTOL * scale + 1e-300;
    if (fabs(got - want) <= tol)
        return;
    print_error("%s of %s at %.17g: %.17g, expected %.17g (error %.3g, tolerance %.3g)\n", what,
                op, x, got, want, fabs(got - want), tol);
    fail();
}

static uint64_t seed_of(const char *name)
{
    uint64_t h = 1469598103934665603u;
    while (*name)
        h = (h ^ (unsigned char)*name++) * 1099511628211u;
    return h;
}

static void test_unary(void **state)
{
    const unary_op *op = *state;
    uint64_t rng = seed_of(op->name);
    double d[4];
    if (!unary_derivs(op->name, 1.5, d)) {
        /* lgamma, tgamma: their derivative is no operation */
        unary_ctx c = {op, AD_OK};
        double x = 2.5, fx, g, want[2];
        assert_int_equal(ad_gradient(unary_level1, &c, 1, &x, &fx, &g), AD_ENOTSUP);
        assert_int_equal(c.st, AD_ENOTSUP);
        assert_all_nan(fx, &g, 1);
        c.st = AD_OK;
        assert_int_equal(ad_gradient(unary_jvp, &c, 1, &x, &fx, &g), AD_ENOTSUP);
        assert_all_nan(fx, &g, 1);
        /* outside a recording it is ad_gradient */
        ad_real xr = ad_const(x), fr, gr;
        assert_ok(ad_gradient_r(unary_inner, &c, 1, &xr, &fr, &gr));
        assert_ok(ad_gradient(unary_inner, &c, 1, &x, &want[0], &want[1]));
        assert_same(fr.v, want[0]);
        assert_same(gr.v, want[1]);
        return;
    }
    for (int k = 0; k < 6; k++) {
        double x = draw_unary(op, &rng, op->lo, op->hi), fx, g, H, gg[1];
        unary_derivs(op->name, x, d);
        double scale = fabs(d[1]) + fabs(d[2]) + fabs(d[3]);
        unary_ctx c = {op, AD_OK};
        assert_ok(ad_gradient(unary_level1, &c, 1, &x, &fx, &g));
        near_scaled("f' (nested value)", op->name, x, fx, d[1], scale);
        near_scaled("f'' (gradient of ad_gradient_r)", op->name, x, g, d[2], scale);
        assert_ok(ad_hessian(unary_level1, &c, 1, &x, &fx, gg, &H));
        near_scaled("f''' (Hessian of ad_gradient_r)", op->name, x, H, d[3], scale);
        assert_ok(ad_gradient(unary_level2, &c, 1, &x, &fx, &g));
        near_scaled("f'' (depth 2 value)", op->name, x, fx, d[2], scale);
        near_scaled("f''' (gradient of depth 2)", op->name, x, g, d[3], scale);
        assert_ok(ad_gradient(unary_jvp, &c, 1, &x, &fx, &g));
        near_scaled("f' x^2 (ad_jvp_r)", op->name, x, fx, d[1] * x * x, scale * (1 + x * x));
        near_scaled("d/dx f' x^2 (ad_jvp_r)", op->name, x, g, d[2] * x * x + 2 * x * d[1],
                    scale * (1 + x * x + 2 * fabs(x)));
        assert_int_equal(c.st, AD_OK);
        /* against the second-order mode */
        assert_ok(ad_hessian(unary_inner, &c, 1, &x, &fx, gg, &H));
        assert_ok(ad_gradient(unary_level1, &c, 1, &x, &fx, &g));
        near_scaled("f'' against ad_hessian", op->name, x, g, H, scale);
    }
}

/* ---- binary operations, in their rr, rd and dr forms ---- */

/* The Hessian of op(a, b) in closed form: haa, hab, hbb. */
static void binary_hessian(const char *name, double a, double b, double *h)
{
#define IS(s) (strcmp(name, s) == 0)
    h[0] = h[1] = h[2] = 0.0;
    if (IS("mul")) {
        h[1] = 1.0;
    } else if (IS("div")) {
        h[1] = -1.0 / (b * b);
        h[2] = 2.0 * a / (b * b * b);
    } else if (IS("pow")) {
        double la = log(a);
        h[0] = b * (b - 1) * pow(a, b - 2);
        h[1] = pow(a, b - 1) * (1 + b * la);
        h[2] = pow(a, b) * la * la;
    } else if (IS("atan2")) {
        double q = a * a + b * b;
        h[0] = -2 * a * b / (q * q);
        h[1] = (a * a - b * b) / (q * q);
        h[2] = 2 * a * b / (q * q);
    } else if (IS("hypot")) {
        double r = hypot(a, b), r3 = r * r * r;
        h[0] = b * b / r3;
        h[1] = -a * b / r3;
        h[2] = a * a / r3;
    }
#undef IS
}

enum { FORM_RR, FORM_RD, FORM_DR };

typedef struct bin_ctx {
    binary_point pt;
    int form;
    int j;  /* for bin_hw_d */
    double w[2];
    ad_status st;
} bin_ctx;

static ad_real bin_inner(const ad_real *x, size_t n, void *ctx)
{
    const bin_ctx *c = ctx;
    (void)n;
    return c->form == FORM_RR ? c->pt.op->rr(x[0], x[1])
           : c->form == FORM_RD ? c->pt.op->rd(x[0], c->pt.b)
                                : c->pt.op->dr(c->pt.a, x[0]);
}

static void bin_inner_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = bin_inner(x, n, ctx);
}

static void bin_note(bin_ctx *c, ad_status s)
{
    if (s != AD_OK && c->st == AD_OK)
        c->st = s;
}

/* The gradient by ad_gradient_r, as outputs: its Jacobian is the Hessian. */
static void bin_grad_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    ad_real fx;
    (void)m;
    bin_note(ctx, ad_gradient_r(bin_inner, ctx, n, x, &fx, y));
}

/* w . gradient: its Hessian is T(w, ., .) */
static ad_real bin_wgrad(const ad_real *x, size_t n, void *ctx)
{
    bin_ctx *c = ctx;
    ad_real fx, g[2];
    bin_note(c, ad_gradient_r(bin_inner, ctx, n, x, &fx, g));
    return n == 2 ? ad_add(ad_mul(c->w[0], g[0]), ad_mul(c->w[1], g[1])) : ad_mul(c->w[0], g[0]);
}

/* J w by ad_jvp_r: its gradient is H w */
static ad_real bin_jvp(const ad_real *x, size_t n, void *ctx)
{
    bin_ctx *c = ctx;
    ad_real v[2] = {ad_const(c->w[0]), ad_const(c->w[1])}, y, u;
    bin_note(c, ad_jvp_r(bin_inner_fn, ctx, n, x, v, 1, &y, &u));
    return u;
}

/* The closed-form Hessian in the form's variables (n x n). */
static void bin_hess_form(const bin_ctx *c, const double *x, double *H)
{
    double a = c->pt.a, b = c->pt.b, h[3];
    if (c->form == FORM_RR)
        a = x[0], b = x[1];
    else if (c->form == FORM_RD)
        a = x[0];
    else
        b = x[0];
    binary_hessian(c->pt.op->name, a, b, h);
    if (c->form == FORM_RR) {
        H[0] = h[0], H[1] = H[2] = h[1], H[3] = h[2];
    } else {
        H[0] = c->form == FORM_RD ? h[0] : h[2];
    }
}

/* sum_i w_i H_ij at x: its gradient is row j of T(w, ., .) */
static double bin_hw_d(const double *x, size_t n, const void *ctx)
{
    const bin_ctx *c = ctx;
    double H[4];
    bin_hess_form(c, x, H);
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += c->w[i] * H[i * n + (size_t)c->j];
    return s;
}

static void test_binary(void **state)
{
    const binary_op *op = *state;
    uint64_t rng = seed_of(op->name);
    for (int form = FORM_RR; form <= FORM_DR; form++)
        for (int k = 0; k < 4; k++) {
            bin_ctx c = {{op, 0, 0}, form, 0, {0.8, -0.3}, AD_OK};
            draw_binary(&c.pt, &rng);
            size_t n = form == FORM_RR ? 2 : 1;
            double x[2] = {form == FORM_DR ? c.pt.b : c.pt.a, c.pt.b};
            double y[2], J[4], H[4], Hl[4], fx, g[2];
            bin_hess_form(&c, x, H);
            assert_ok(ad_jacobian(bin_grad_fn, &c, n, x, n, y, J));
            assert_int_equal(c.st, AD_OK);
            vec_near(op->name, J, H, n * n, RTOL, 1e-300);
            assert_ok(ad_hessian(bin_inner, &c, n, x, &fx, g, Hl));
            vec_near("against ad_hessian", J, Hl, n * n, RTOL, 1e-300);
            for (size_t i = 0; i < n; i++)  /* the inner gradient's values */
                assert_true(fabs(y[i] - g[i]) <= 1e-15 * fabs(g[i]));
            /* H w by ad_jvp_r */
            double hw[2], want[2];
            assert_ok(ad_gradient(bin_jvp, &c, n, x, &fx, hw));
            for (size_t i = 0; i < n; i++)
                want[i] = H[i * n] * c.w[0] + (n == 2 ? H[i * n + 1] * c.w[1] : 0.0);
            vec_near("H w (ad_jvp_r)", hw, want, n, RTOL, 1e-300);
            /* T(w, ., .) by ad_hessian over ad_gradient_r */
            double T[4], fd[4], noise[4];
            assert_ok(ad_hessian(bin_wgrad, &c, n, x, &fx, g, T));
            assert_int_equal(c.st, AD_OK);
            vec_near("grad of w . grad", g, want, n, RTOL, 1e-300);
            for (size_t j = 0; j < n; j++) {
                bin_ctx cj = c;
                cj.j = (int)j;
                fd_gradient(bin_hw_d, &cj, n, x, fd + j * n, noise + j * n);
            }
            vec_near_fd("T(w) by ad_hessian of w . ad_gradient_r", T, fd, noise, n * n);
        }
}

/* ======================================================================
 * 8. Array primitives, conditionals, shifts and mixed operations inside
 *    the inner function
 *
 * Each body is compiled for double (the finite-difference oracle) and for
 * ad_real.  x + c shares x's ID (a shift); constants sit among active
 * elements; ad_dot of an array with itself records a squared norm.
 * ====================================================================== */

static double sel_lt_d(double l, double r, double t, double f) { return l < r ? t : f; }
static double sel_le_d(double l, double r, double t, double f) { return l <= r ? t : f; }
static double sel_eq_d(double l, double r, double t, double f) { return l == r ? t : f; }
#define SEL(kind, l, r, t, f) \
    _Generic((t), ad_real: ad_select_##kind, default: sel_##kind##_d)((l), (r), (t), (f))

static void matvec_rr_d(size_t m, size_t n, const double *A, const double *x, double *y)
{
    ad_matvec_d(m, n, A, x, y);
}
#define MATVEC_RR(m, n, A, x, y) \
    _Generic((y), ad_real *: ad_matvec_rr, default: matvec_rr_d)((m), (n), (A), (x), (y))

#define DEFINE_PRIM(name, ...)                                                   \
    static double name##_d(const double *x, size_t n, const void *ctx)            \
    {                                                                             \
        typedef double T;                                                         \
        (void)n, (void)ctx;                                                       \
        __VA_ARGS__                                                               \
    }                                                                             \
    static ad_real name##_r(const ad_real *x, size_t n, void *ctx)                \
    {                                                                             \
        typedef ad_real T;                                                        \
        (void)n, (void)ctx;                                                       \
        __VA_ARGS__                                                               \
    }

DEFINE_PRIM(p_sum,
    T e[5] = {ad_mul(x[0], x[1]), ad_sin(x[2]), ad_mul(x[3], x[3]), ad_add(x[0], 2.5),
              AD_CONST(T, 0.75)};
    T s = ad_sum(5, e);
    return ad_mul(s, ad_cos(ad_mul(s, 0.3)));)

DEFINE_PRIM(p_dot,
    T y[4] = {x[1], ad_mul(x[2], x[2]), ad_add(x[3], -1.0), x[0]};
    T a = ad_dot(4, x, y);
    T b = ad_dot(4, y, y);  /* the same array: a squared norm */
    return ad_exp(ad_mul(0.3, ad_add(a, ad_mul(b, 0.25))));)

DEFINE_PRIM(p_dot_const,
    static const double c[4] = {0.5, -1.5, 2.0, 0.25};
    T y[4] = {AD_CONST(T, 2.0), x[1], AD_CONST(T, -1.0), ad_sin(x[3])};
    T a = ad_dot(4, x, c), b = ad_dot(4, c, y), d = ad_dot(4, x, y);
    return ad_add(ad_mul(a, d), ad_mul(b, b));)

DEFINE_PRIM(p_sqnorm,
    T e[4] = {x[0], ad_sub(x[1], 1.0), ad_sin(x[2]), ad_mul(x[3], x[0])};
    return ad_log(ad_add(1.0, ad_sqnorm(4, e)));)

DEFINE_PRIM(p_prod,
    T e[6] = {x[0], AD_CONST(T, 2.0), ad_add(x[1], 0.5), x[2], AD_CONST(T, -0.5),
              ad_mul(x[3], x[0])};
    return ad_prod(6, e);)

DEFINE_PRIM(p_lse,
    T e[5] = {x[0], ad_add(x[1], 0.5), AD_CONST(T, 0.3), ad_mul(x[3], 2.0), ad_mul(x[2], x[0])};
    return ad_logsumexp(5, e);)

DEFINE_PRIM(p_matvec,
    static const double A[12] = {0.5, -1.0, 0.25, 2.0, 1.5, 0.0, -0.75, 0.5, -0.5, 1.0, 1.25, -0.25};
    T y[3];
    ad_matvec(3, 4, A, x, y);
    T t[3] = {ad_sin(y[0]), ad_mul(y[1], y[1]), ad_mul(ad_exp(y[2]), 0.1)};
    return ad_sum(3, t);)

DEFINE_PRIM(p_matvec_rr,
    T A[6] = {x[0], ad_mul(x[1], x[2]), AD_CONST(T, 0.5), ad_sin(x[3]), ad_mul(x[0], x[0]), x[2]};
    T v[3] = {x[1], x[3], ad_add(x[0], 0.25)};
    T y[2];
    MATVEC_RR(2, 3, A, v, y);
    return ad_add(ad_sqnorm(2, y), ad_mul(y[0], ad_cos(y[1])));)

DEFINE_PRIM(p_axpy,
    T y[4] = {ad_mul(x[0], x[1]), ad_sin(x[2]), x[3], AD_CONST(T, 1.0)};
    T z[4] = {x[0], x[1], AD_CONST(T, 0.5), x[3]};
    ad_axpy(4, 1.5, z, y);
    return ad_prod(4, y);)

DEFINE_PRIM(p_select,
    T a = SEL(lt, x[0], x[1], ad_mul(ad_mul(x[0], x[1]), x[2]), ad_mul(ad_sin(x[3]), x[0]));
    T b = SEL(le, x[2], x[3], ad_exp(x[2]), ad_mul(x[1], x[1]));
    T c = SEL(eq, x[3], x[3], ad_mul(x[1], x[2]), x[0]);
    T d = SEL(eq, x[0], x[1], x[3], ad_mul(x[2], x[3]));
    return ad_add(ad_add(a, ad_mul(b, c)), d);)

DEFINE_PRIM(p_minmax,
    T a = ad_fmin(ad_mul(x[0], x[1]), ad_mul(x[2], x[2]));
    T b = ad_fmax(ad_exp(x[3]), ad_add(x[0], 3.0));
    T c = ad_fmin(x[2], 0.2);
    T d = ad_fmax(-1.0, ad_mul(x[1], x[3]));
    return ad_add(ad_add(ad_mul(a, b), ad_mul(c, x[1])), ad_mul(d, d));)

DEFINE_PRIM(p_pow,
    T t[7] = {ad_pow(x[0], 2.5), ad_pow(x[1], x[2]), ad_pow(2.0, x[3]), ad_pow(x[0], 3.0),
              ad_mul(ad_pow(x[1], 1.0), x[2]), ad_mul(ad_pow(x[2], 0.0), x[3]),
              ad_pow(x[3], -2.0)};
    return ad_sum(7, t);)

DEFINE_PRIM(p_trig2,
    T t[4] = {ad_mul(ad_atan2(x[0], x[1]), ad_hypot(x[2], x[3])), ad_atan2(x[2], 1.5),
              ad_hypot(2.0, x[3]), ad_atan2(0.7, x[0])};
    return ad_sum(4, t);)

DEFINE_PRIM(p_misc,
    T t[6] = {ad_div(x[0], x[1]), ad_mul(ad_sqrt(x[2]), ad_cbrt(x[3])),
              ad_log(ad_mul(x[1], x[1])), ad_mul(ad_fabs(ad_sub(x[0], x[3])), ad_neg(x[2])),
              ad_mul(ad_tanh(x[0]), ad_erf(x[1])), ad_div(ad_expm1(x[3]), ad_add(2.0, ad_cos(x[2])))};
    return ad_sum(6, t);)

DEFINE_PRIM(p_shift,
    T a = ad_add(x[0], 3.0), b = ad_sub(x[1], 2.0), c = ad_sub(2.0, x[2]), d = ad_add(x[3], 1.0);
    T t[5] = {ad_mul(ad_sin(a), ad_mul(b, b)), ad_exp(c), ad_mul(d, d),
              ad_sub(ad_add(x[0], 1.0), x[0]), ad_mul(ad_add(x[3], 0.5), ad_sub(x[3], 0.5))};
    T e[3] = {a, b, d};
    return ad_add(ad_add(ad_sum(5, t), ad_logsumexp(3, e)), ad_mul(ad_prod(3, e), 0.1));)

/* A wrapped double matrix times an ad_real vector is ad_matvec, and
 * |M x|^2 then ad_sqnorm: n-ary records, which nested calls replay
 * (docs/api.md lists ad_mat_wrap among what they refuse: only recorded
 * matrices make block records). */
DEFINE_PRIM(p_matwrap,
    static const double A[6] = {0.5, -1.0, 0.25, 1.5, 0.75, -0.5};
    ad_mat M;
    T y[2], s;
    if (ad_mat_make(2, 3, A, &M) != AD_OK)
        return AD_CONST(T, NAN);
    ad_mat_vec(&M, x + 1, y);
    ad_mat_sqnorm(&M, x, &s);
    return ad_add(ad_mul(ad_sin(y[0]), ad_add(y[1], ad_mul(x[0], x[0]))), ad_mul(s, 0.5));)

typedef struct prim {
    const char *name;
    plain_fn d;
    ad_objective r;
    double x[2][4];
} prim;

#define PRIM_ENTRY(name, ...) {#name, name##_d, name##_r, {__VA_ARGS__}}
static const prim prims[] = {
    PRIM_ENTRY(p_sum, {0.3, -0.6, 0.9, 0.4}, {-1.1, 0.5, 2.0, -0.3}),
    PRIM_ENTRY(p_dot, {0.3, -0.6, 0.9, 0.4}, {0.8, 0.2, -0.7, 1.1}),
    PRIM_ENTRY(p_dot_const, {0.3, -0.6, 0.9, 0.4}, {-0.5, 1.2, 0.1, 0.7}),
    PRIM_ENTRY(p_sqnorm, {0.3, -0.6, 0.9, 0.4}, {0.8, 0.2, -0.7, 1.1}),
    PRIM_ENTRY(p_prod, {0.3, -0.6, 0.9, 0.4}, {1.2, 0.7, -0.8, 0.5}),
    PRIM_ENTRY(p_lse, {0.3, -0.6, 0.9, 0.4}, {1.5, 2.0, -1.0, 0.2}),
    PRIM_ENTRY(p_matvec, {0.3, -0.6, 0.9, 0.4}, {0.8, 0.2, -0.7, 1.1}),
    PRIM_ENTRY(p_matvec_rr, {0.3, -0.6, 0.9, 0.4}, {0.8, 0.2, -0.7, 1.1}),
    PRIM_ENTRY(p_axpy, {0.3, -0.6, 0.9, 0.4}, {0.8, 0.2, -0.7, 1.1}),
    PRIM_ENTRY(p_select, {0.3, 0.8, 0.9, 0.4}, {1.0, 0.2, -0.5, 0.6}),
    PRIM_ENTRY(p_minmax, {0.3, -0.6, 0.9, 0.4}, {-0.8, 1.1, -0.6, 1.5}),
    PRIM_ENTRY(p_pow, {0.9, 1.3, 0.7, 1.8}, {1.6, 0.85, -1.2, -2.1}),
    PRIM_ENTRY(p_trig2, {0.6, 0.9, -0.5, 0.7}, {-0.7, 1.2, 0.8, -0.6}),
    PRIM_ENTRY(p_misc, {0.3, 1.2, 0.9, -0.8}, {-0.9, -1.0, 1.4, 0.7}),
    PRIM_ENTRY(p_shift, {0.3, -0.6, 0.9, 0.4}, {1.2, 0.4, -0.3, -0.9}),
    PRIM_ENTRY(p_matwrap, {0.3, -0.6, 0.9, 0.4}, {0.8, 0.2, -0.7, 1.1}),
};
#define NPRIMS (sizeof prims / sizeof prims[0])

static const double W4[4] = {0.5, -0.3, 0.8, 0.2};
static const double V4[4] = {-0.4, 1.0, 0.3, 0.6};

typedef struct prim_ctx {
    ad_objective f;
    ad_status st;
} prim_ctx;

static void prim_note(prim_ctx *c, ad_status s)
{
    if (s != AD_OK && c->st == AD_OK)
        c->st = s;
}

static ad_real prim_inner(const ad_real *x, size_t n, void *ctx)
{
    return ((prim_ctx *)ctx)->f(x, n, NULL);
}

static void prim_inner_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = prim_inner(x, n, ctx);
}

/* The gradient by ad_gradient_r as outputs (Jacobian: the Hessian). */
static void prim_grad_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    ad_real fx;
    (void)m;
    prim_note(ctx, ad_gradient_r(prim_inner, ctx, n, x, &fx, y));
}

/* W4 . gradient (Hessian: T(W4, ., .)). */
static ad_real prim_wgrad(const ad_real *x, size_t n, void *ctx)
{
    ad_real fx, g[NMAX];
    prim_note(ctx, ad_gradient_r(prim_inner, ctx, n, x, &fx, g));
    return ad_dot(n, g, W4);
}

/* J W4 by ad_jvp_r (gradient: H W4). */
static ad_real prim_jvp(const ad_real *x, size_t n, void *ctx)
{
    ad_real v[NMAX], y, u;
    for (size_t i = 0; i < n; i++)
        v[i] = ad_const(W4[i]);
    prim_note(ctx, ad_jvp_r(prim_inner_fn, ctx, n, x, v, 1, &y, &u));
    return u;
}

static void check_prim(const prim *P, const double *x)
{
    enum { N = 4 };
    prim_ctx c = {P->r, AD_OK};
    char what[96];
    double y[N], J[N * N], fd[N * N], noise[N * N], fx, g[N], H[N * N];
    /* the Hessian: the Jacobian of the nested gradient */
    assert_ok(ad_jacobian(prim_grad_fn, &c, N, x, N, y, J));
    assert_int_equal(c.st, AD_OK);
    fd_gradient(P->d, NULL, N, x, fd, noise);
    snprintf(what, sizeof what, "%s: nested gradient", P->name);
    vec_near_fd(what, y, fd, noise, N);
    assert_ok(ad_gradient(P->r, NULL, N, x, &fx, g));
    snprintf(what, sizeof what, "%s: nested gradient against ad_gradient", P->name);
    vec_near(what, y, g, N, 1e-14, 0.0);
    fd_hessian(P->d, NULL, N, x, fd, noise);
    snprintf(what, sizeof what, "%s: Hessian by nesting", P->name);
    vec_near_fd(what, J, fd, noise, N * N);
    assert_ok(ad_hessian(P->r, NULL, N, x, &fx, g, H));
    snprintf(what, sizeof what, "%s: Hessian by nesting against ad_hessian", P->name);
    vec_near(what, J, H, N * N, RTOL, 0.0);
    /* H w by ad_jvp_r, against ad_hvp */
    double hw[N], hv[N];
    assert_ok(ad_gradient(prim_jvp, &c, N, x, &fx, hw));
    assert_int_equal(c.st, AD_OK);
    assert_ok(ad_hvp(P->r, NULL, N, x, W4, &fx, g, hv));
    snprintf(what, sizeof what, "%s: H w by ad_jvp_r against ad_hvp", P->name);
    vec_near(what, hw, hv, N, RTOL, 0.0);
    /* third derivatives: ad_hessian of w . ad_gradient_r */
    double T[N * N], gw[N];
    assert_ok(ad_hessian(prim_wgrad, &c, N, x, &fx, gw, T));
    assert_int_equal(c.st, AD_OK);
    snprintf(what, sizeof what, "%s: gradient of w . nested gradient", P->name);
    vec_near(what, gw, hv, N, RTOL, 0.0);
    fd_third(P->d, NULL, N, x, W4, fd, noise);
    snprintf(what, sizeof what, "%s: T(w) by ad_hessian of w . ad_gradient_r", P->name);
    vec_near_fd(what, T, fd, noise, N * N);
    /* and by ad_hvp of it: T(w, v) */
    double tv[N], want[N];
    assert_ok(ad_hvp(prim_wgrad, &c, N, x, V4, &fx, gw, tv));
    for (int i = 0; i < N; i++) {
        want[i] = 0.0;
        for (int j = 0; j < N; j++)
            want[i] += T[N * i + j] * V4[j];
    }
    snprintf(what, sizeof what, "%s: T(w, v) by ad_hvp against ad_hessian", P->name);
    vec_near(what, tv, want, N, RTOL, 0.0);
    /* the sparse drivers over the same calls: edge pushing and the sparse
     * resolve through the replayed records */
    ad_csr S;
    assert_ok(ad_sparse_hessian(prim_wgrad, &c, N, x, &fx, gw, &S));
    assert_int_equal(c.st, AD_OK);
    assert_csr_valid(&S, N, N);
    snprintf(what, sizeof what, "%s: T(w) by ad_sparse_hessian", P->name);
    csr_matches(what, &S, T, N, N, 1);
    ad_csr_free(&S);
    assert_ok(ad_sparse_jacobian(prim_grad_fn, &c, N, x, N, y, &S));
    assert_int_equal(c.st, AD_OK);
    assert_csr_valid(&S, N, N);
    snprintf(what, sizeof what, "%s: Hessian by ad_sparse_jacobian of the nested gradient",
             P->name);
    csr_matches(what, &S, J, N, N, 0);
    ad_csr_free(&S);
}

static void test_primitives(void **state)
{
    (void)state;
    for (size_t k = 0; k < NPRIMS; k++)
        for (int p = 0; p < 2; p++)
            check_prim(&prims[k], prims[k].x[p]);
}

/* ---- closed forms: ad_prod at zeros and with constant elements ---- */

typedef struct prod_case {
    int with_consts;  /* e = (x0, 2, x1, x2, -0.5, x3, x4): C = -1 */
    double C;
} prod_case;

static ad_real prod_inner(const ad_real *x, size_t n, void *ctx)
{
    const prod_case *pc = ctx;
    if (!pc->with_consts)
        return ad_prod(n, (ad_real *)x);
    ad_real e[7] = {x[0], ad_const(2.0), x[1], x[2], ad_const(-0.5), x[3], x[4]};
    return ad_prod(7, e);
}

typedef struct prod_nest {
    prod_case pc;
    ad_status st;
} prod_nest;

static void prod_grad_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    prod_nest *c = ctx;
    ad_real fx;
    (void)m;
    ad_status s = ad_gradient_r(prod_inner, &c->pc, n, x, &fx, y);
    if (s != AD_OK)
        c->st = s;
}

static ad_real prod_wgrad(const ad_real *x, size_t n, void *ctx)
{
    prod_nest *c = ctx;
    ad_real fx, g[5];
    ad_status s = ad_gradient_r(prod_inner, &c->pc, n, x, &fx, g);
    if (s != AD_OK)
        c->st = s;
    static const double w[5] = {0.5, -1.0, 0.25, 2.0, 0.75};
    return ad_dot(n, g, w);
}

/* C times the product of x over the indices not in skip[0..k). */
static double prod_except(double C, const double *x, const int *skip, int k)
{
    double p = C;
    for (int i = 0; i < 5; i++) {
        int out = 0;
        for (int s = 0; s < k; s++)
            out |= skip[s] == i;
        if (!out)
            p *= x[i];
    }
    return p;
}

static void test_prod_closed_form(void **state)
{
    static const double points[4][5] = {{0.5, -1.5, 2.0, 0.75, -1.25},
                                        {0.5, 0.0, 2.0, 0.75, -1.25},
                                        {0.0, 0.7, 0.0, 1.5, -2.0},
                                        {0.0, 0.0, -0.0, 1.5, 2.0}};
    static const double w[5] = {0.5, -1.0, 0.25, 2.0, 0.75};
    (void)state;
    for (int wc = 0; wc < 2; wc++)
        for (int p = 0; p < 4; p++) {
            const double *x = points[p];
            prod_nest c = {{wc, wc ? -1.0 : 1.0}, AD_OK};
            double y[5], J[25], want[25], fx, gw[5], T[25];
            assert_ok(ad_jacobian(prod_grad_fn, &c, 5, x, 5, y, J));
            assert_int_equal(c.st, AD_OK);
            for (int i = 0; i < 5; i++) {
                double gi = prod_except(c.pc.C, x, (int[]){i}, 1);
                assert_true(y[i] == gi);  /* products of the same numbers */
                for (int j = 0; j < 5; j++)
                    want[5 * i + j] = i == j ? 0.0 : prod_except(c.pc.C, x, (int[]){i, j}, 2);
            }
            vec_near("Hessian of ad_prod by nesting", J, want, 25, RTOL, 0.0);
            assert_ok(ad_hessian(prod_wgrad, &c, 5, x, &fx, gw, T));
            assert_int_equal(c.st, AD_OK);
            for (int j = 0; j < 5; j++)
                for (int k = 0; k < 5; k++) {
                    double t = 0.0;
                    for (int i = 0; i < 5; i++)
                        if (i != j && i != k && j != k)
                            t += w[i] * prod_except(c.pc.C, x, (int[]){i, j, k}, 3);
                    want[5 * j + k] = t;
                }
            vec_near("third derivatives of ad_prod by nesting", T, want, 25, RTOL, 0.0);
        }
}

/* ---- closed forms: the log-sum-exp, the squared norm, a dot product ---- */

typedef struct reduce_case {
    int kind;  /* 0 logsumexp, 1 sqnorm, 2 dot(x[0:2], x[2:4]), 3 sum */
    ad_status st;
} reduce_case;

static ad_real reduce_inner(const ad_real *x, size_t n, void *ctx)
{
    const reduce_case *rc = ctx;
    switch (rc->kind) {
    case 0: return ad_logsumexp(n, (ad_real *)x);
    case 1: return ad_sqnorm(n, (ad_real *)x);
    case 2: return ad_dot(2, (ad_real *)x, (ad_real *)x + 2);
    default: return ad_sum(n, (ad_real *)x);
    }
}

static void reduce_grad_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    reduce_case *rc = ctx;
    ad_real fx;
    (void)m;
    ad_status s = ad_gradient_r(reduce_inner, ctx, n, x, &fx, y);
    if (s != AD_OK)
        rc->st = s;
}

static ad_real reduce_wgrad(const ad_real *x, size_t n, void *ctx)
{
    reduce_case *rc = ctx;
    ad_real fx, g[4];
    ad_status s = ad_gradient_r(reduce_inner, ctx, n, x, &fx, g);
    if (s != AD_OK)
        rc->st = s;
    return ad_dot(n, g, W4);
}

/* The fx of the inner call: its own Hessian must be the function's. */
static ad_real reduce_value(const ad_real *x, size_t n, void *ctx)
{
    reduce_case *rc = ctx;
    ad_real fx, g[4];
    ad_status s = ad_gradient_r(reduce_inner, ctx, n, x, &fx, g);
    if (s != AD_OK)
        rc->st = s;
    return fx;
}

static void test_reductions_closed_form(void **state)
{
    static const double points[3][4] = {{0.1, 0.7, -0.4, 0.2}, {700.0, 701.0, 699.5, 702.0},
                                        {-1.5, 0.0, 2.5, -0.25}};
    (void)state;
    for (int kind = 0; kind < 4; kind++)
        for (int p = 0; p < 3; p++) {
            const double *x = points[p];
            reduce_case rc = {kind, AD_OK};
            double y[4], H[16], T[16], hv[16], fx, g[4], wantH[16], wantT[16], wantg[4];
            double P[4] = {0, 0, 0, 0}, mx = x[0], S = 0.0;
            for (int i = 1; i < 4; i++)
                mx = fmax(mx, x[i]);
            for (int i = 0; i < 4; i++)
                S += exp(x[i] - mx);
            for (int i = 0; i < 4; i++)
                P[i] = exp(x[i] - mx) / S;
            for (int i = 0; i < 4; i++) {
                wantg[i] = kind == 0 ? P[i] : kind == 1 ? 2 * x[i] : kind == 2 ? x[i ^ 2] : 1.0;
                for (int j = 0; j < 4; j++) {
                    double h = 0.0;
                    if (kind == 0)
                        h = (i == j ? P[i] : 0.0) - P[i] * P[j];
                    else if (kind == 1)
                        h = i == j ? 2.0 : 0.0;
                    else if (kind == 2)
                        h = (i ^ 2) == j ? 1.0 : 0.0;
                    wantH[4 * i + j] = h;
                    double t = 0.0;  /* sum_i w_i T_ijk: only the log-sum-exp has any */
                    for (int a = 0; kind == 0 && a < 4; a++) {
                        int k = j, jj = i;
                        double Ta = (a == jj) * P[a] * ((a == k) - P[k]) -
                                    P[a] * ((a == k) - P[k]) * P[jj] -
                                    P[a] * P[jj] * ((jj == k) - P[k]);
                        t += W4[a] * Ta;
                    }
                    wantT[4 * i + j] = t;
                }
            }
            assert_ok(ad_jacobian(reduce_grad_fn, &rc, 4, x, 4, y, H));
            assert_int_equal(rc.st, AD_OK);
            vec_near("reduction gradient (nested)", y, wantg, 4, 1e-13, 0.0);
            vec_near("reduction Hessian (nested)", H, wantH, 16, RTOL, 1e-300);
            assert_ok(ad_hessian(reduce_wgrad, &rc, 4, x, &fx, g, T));
            assert_int_equal(rc.st, AD_OK);
            vec_near("reduction T(w) (nested)", T, wantT, 16, RTOL, 1e-300);
            /* the inner value, differentiated twice by the enclosing driver */
            assert_ok(ad_hessian(reduce_value, &rc, 4, x, &fx, g, hv));
            assert_int_equal(rc.st, AD_OK);
            vec_near("reduction value's gradient", g, wantg, 4, 1e-13, 0.0);
            vec_near("reduction value's Hessian", hv, wantH, 16, RTOL, 1e-300);
        }
}

/* ======================================================================
 * 9. Levels: perturbation confusion and values of other recordings
 * ====================================================================== */

/* Inner g(x, y) = x + y (which 0) or x y (1); the outer function is
 * x * d/dy g(x, y) at y = 1, x entering g through its inputs. */
static ad_real pc_inner(const ad_real *x, size_t n, void *ctx)
{
    (void)n;
    return *(const int *)ctx ? ad_mul(x[0], x[1]) : ad_add(x[0], x[1]);
}

static void pc_inner_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = pc_inner(x, n, ctx);
}

typedef struct pc_ctx {
    int mul;
    int by_jvp;
    int same;  /* y is x itself (the same outer value), not the constant 1 */
    ad_status st;
} pc_ctx;

static ad_real pc_outer(const ad_real *x, size_t n, void *ctx)
{
    pc_ctx *c = ctx;
    ad_real in[2] = {x[0], c->same ? x[0] : ad_const(1.0)}, d;
    (void)n;
    if (c->by_jvp) {
        ad_real v[2] = {ad_const(0.0), ad_const(1.0)}, y;
        c->st = ad_jvp_r(pc_inner_fn, &c->mul, 2, in, v, 1, &y, &d);
    } else {
        ad_real fx, g[2];
        c->st = ad_gradient_r(pc_inner, &c->mul, 2, in, &fx, g);
        d = g[1];
    }
    return ad_mul(x[0], d);
}

static void test_perturbation_confusion(void **state)
{
    (void)state;
    for (int by_jvp = 0; by_jvp < 2; by_jvp++) {
        /* d/dx [x * d/dy (x + y) at y = 1] at x = 1 is 1, not 2 */
        pc_ctx c = {0, by_jvp, 0, AD_OK};
        double x = 1.0, fx, g, H, gg;
        assert_ok(ad_gradient(pc_outer, &c, 1, &x, &fx, &g));
        assert_int_equal(c.st, AD_OK);
        assert_same(fx, 1.0);
        assert_same(g, 1.0);
        assert_ok(ad_hessian(pc_outer, &c, 1, &x, &fx, &gg, &H));
        assert_same(gg, 1.0);
        assert_same(H, 0.0);
        /* d/dx [x * d/dy (x y) at y = 1] = d/dx x^2 = 2x */
        c.mul = 1;
        x = 1.5;
        assert_ok(ad_gradient(pc_outer, &c, 1, &x, &fx, &g));
        assert_same(fx, 2.25);
        assert_same(g, 3.0);
        assert_ok(ad_hessian(pc_outer, &c, 1, &x, &fx, &gg, &H));
        assert_same(H, 2.0);
        /* y the same outer value as x: d/dx [x * d/dy (x y) at y = x] = 2x as well,
         * and with x + y, 1 */
        c.same = 1;
        assert_ok(ad_gradient(pc_outer, &c, 1, &x, &fx, &g));
        assert_same(fx, 2.25);
        assert_same(g, 3.0);
        c.mul = 0;
        assert_ok(ad_gradient(pc_outer, &c, 1, &x, &fx, &g));
        assert_same(fx, 1.5);
        assert_same(g, 1.0);
        assert_int_equal(c.st, AD_OK);
    }
}

/* og must still be right after a failure. */
static void check_og_ok(void)
{
    double fx, g[3], want[3];
    assert_ok(ad_gradient(og, NULL, 3, pts[0], &fx, g));
    og_grad(pts[0], want);
    vec_near("og after a failure", g, want, 3, RTOL, 0.0);
}

/* ---- a value of the enclosing recording read through ctx ---- */

typedef struct lend {
    int by_jvp;
    ad_real outer;
    ad_status inner;
} lend;

static ad_real inner_reads_ctx(const ad_real *x, size_t n, void *ctx)
{
    (void)n;
    return ad_mul(x[0], ((lend *)ctx)->outer);
}

static void inner_reads_ctx_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = inner_reads_ctx(x, n, ctx);
}

static ad_real outer_lends(const ad_real *x, size_t n, void *ctx)
{
    lend *L = ctx;
    ad_real fx, g;
    L->outer = ad_mul(x[0], 2.0);
    if (L->by_jvp)
        L->inner = ad_jvp_r(inner_reads_ctx_fn, L, n, x, x, 1, &fx, &g);
    else
        L->inner = ad_gradient_r(inner_reads_ctx, L, n, x, &fx, &g);
    return ad_add(fx, g);
}

static void outer_lends_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = outer_lends(x, n, ctx);
    y[1] = ad_mul(x[0], 3.0);
}

/* Runs the enclosing driver `driver` over f (scalar) or fv (two outputs)
 * at x = 0.5 and expects `want` with NaN outputs. */
static void expect_failure_every_driver(ad_objective f, ad_function fv, void *ctx, ad_status want,
                                        const char *what)
{
    const double x = 0.5, v = 1.0, w[2] = {1.0, -1.0};
    for (int driver = 0; driver < 9; driver++) {
        double out[6] = {0, 0, 0, 0, 0, 0}, fx = 0.0;
        ad_csr S;
        ad_linear *L = (ad_linear *)&S;
        ad_status s;
        size_t count = 2;
        switch (driver) {
        case 0: s = ad_gradient(f, ctx, 1, &x, &fx, out); count = 1; break;
        case 1: s = ad_hvp(f, ctx, 1, &x, &v, &fx, out, out + 1); break;
        case 2: s = ad_hessian(f, ctx, 1, &x, &fx, out, out + 1); break;
        case 3: s = ad_jvp(fv, ctx, 1, &x, &v, 2, out, out + 2); count = 4; break;
        case 4: s = ad_vjp(fv, ctx, 1, &x, 2, w, out, out + 2); count = 3; break;
        case 5: s = ad_jacobian(fv, ctx, 1, &x, 2, out, out + 2); count = 4; break;
        case 6:
            s = ad_linearize(fv, ctx, 1, &x, 2, out, &L);
            assert_null(L);
            break;
        case 7:
            s = ad_sparse_jacobian(fv, ctx, 1, &x, 2, out, &S);
            assert_csr_empty(&S);
            break;
        default:
            s = ad_sparse_hessian(f, ctx, 1, &x, &fx, out, &S);
            assert_csr_empty(&S);
            count = 1;
            break;
        }
        if (s != want) {
            print_error("%s, driver %d: status %d (%s), expected %d (%s)\n", what, driver, (int)s,
                        ad_strerror(s), (int)want, ad_strerror(want));
            fail();
        }
        if (driver <= 2 || driver == 8)
            assert_nan(fx);
        expect_nan_vec(what, out, count);
    }
}

static void test_foreign_through_ctx(void **state)
{
    (void)state;
    for (int by_jvp = 0; by_jvp < 2; by_jvp++) {
        lend L = {by_jvp, ad_const(0.0), AD_OK};
        expect_failure_every_driver(outer_lends, outer_lends_fn, &L, AD_EFOREIGN,
                                    by_jvp ? "ad_jvp_r, outer value in ctx"
                                           : "ad_gradient_r, outer value in ctx");
        assert_int_equal(L.inner, AD_EFOREIGN);
    }
    check_og_ok();
}

/* ---- an inner value kept and used after the call ---- */

typedef struct leak {
    int use;  /* 0: in an operation after the call; 1: returned; 2: in the next inner call;
                 3: as the next inner call's x; 4: as ad_jvp_r's v */
    ad_real saved;
    ad_status first, second;
} leak;

static ad_real inner_saves(const ad_real *x, size_t n, void *ctx)
{
    leak *k = ctx;
    (void)n;
    ad_real v = ad_sin(x[0]);
    k->saved = v;
    return ad_mul(v, x[0]);
}

static ad_real inner_uses_saved(const ad_real *x, size_t n, void *ctx)
{
    (void)n;
    return ad_mul(x[0], ((leak *)ctx)->saved);
}

static void inner_reads_leak_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = ad_mul(x[0], x[0]);
}

static ad_real outer_leaks(const ad_real *x, size_t n, void *ctx)
{
    leak *k = ctx;
    ad_real fx, g, fx2, g2;
    k->first = ad_gradient_r(inner_saves, k, n, x, &fx, &g);
    switch (k->use) {
    case 0: return ad_add(fx, ad_mul(k->saved, x[0]));
    case 1: return k->saved;
    case 2:
        k->second = ad_gradient_r(inner_uses_saved, k, n, x, &fx2, &g2);
        return ad_add(fx, g2);
    case 3:
        k->second = ad_gradient_r(inner_saves, k, n, &k->saved, &fx2, &g2);
        return ad_add(fx, g2);
    default:
        k->second = ad_jvp_r(inner_reads_leak_fn, k, n, x, &k->saved, 1, &fx2, &g2);
        return ad_add(fx, g2);
    }
}

static void outer_leaks_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = outer_leaks(x, n, ctx);
    y[1] = x[0];
}

static void test_foreign_leaked_inner_value(void **state)
{
    (void)state;
    for (int use = 0; use < 5; use++) {
        leak k = {use, ad_const(0.0), AD_OK, AD_OK};
        expect_failure_every_driver(outer_leaks, outer_leaks_fn, &k, AD_EFOREIGN,
                                    (const char *[]){"leaked value used", "leaked value returned",
                                                     "leaked value in the next inner call",
                                                     "leaked value as x",
                                                     "leaked value as v"}[use]);
        assert_int_equal(k.first, AD_OK);
        if (use >= 2)
            assert_int_equal(k.second, AD_EFOREIGN);
    }
    check_og_ok();
}

/* ---- x holding a value of an earlier recording, or of the level above
 * the caller ---- */

/* x^2 (x + 1) */
static ad_real square_cube(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(ad_mul(x[0], x[0]), ad_add(x[0], 1.0));
}

typedef struct stale {
    int phase;  /* 0: save x[0]; 1: pass the saved value as x */
    ad_real saved;
    ad_status st;
} stale;

static ad_real outer_stale(const ad_real *x, size_t n, void *ctx)
{
    stale *s = ctx;
    ad_real fx, g;
    (void)n;
    if (s->phase == 0)
        s->saved = x[0];
    s->st = ad_gradient_r(square_cube, NULL, 1, s->phase ? &s->saved : x, &fx, &g);
    return ad_add(fx, ad_mul(x[0], g));
}

static void outer_stale_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = outer_stale(x, n, ctx);
    y[1] = x[0];
}

typedef struct two_up {
    ad_real top;      /* a value of the outermost recording */
    int through_op;   /* the middle level uses it in an operation, else as x */
    ad_status inner, middle;
} two_up;

static ad_real middle_level(const ad_real *x, size_t n, void *ctx)
{
    two_up *t = ctx;
    ad_real fx, g;
    if (t->through_op)
        return ad_mul(x[0], t->top);
    t->inner = ad_gradient_r(square_cube, NULL, n, &t->top, &fx, &g);
    return ad_mul(x[0], g);
}

static ad_real top_level(const ad_real *x, size_t n, void *ctx)
{
    two_up *t = ctx;
    ad_real fx, g;
    t->top = ad_mul(x[0], 1.5);
    t->middle = ad_gradient_r(middle_level, t, n, x, &fx, &g);
    return ad_add(fx, g);
}

static void top_level_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = top_level(x, n, ctx);
    y[1] = x[0];
}

static void test_foreign_other_levels(void **state)
{
    (void)state;
    /* a value of an earlier recording as x: the first call is right */
    stale s = {0, ad_const(0.0), AD_OK};
    double x = 0.5, fx, g;
    assert_ok(ad_gradient(outer_stale, &s, 1, &x, &fx, &g));
    s.phase = 1;
    s.st = AD_OK;
    expect_failure_every_driver(outer_stale, outer_stale_fn, &s, AD_EFOREIGN, "stale x");
    assert_int_equal(s.st, AD_EFOREIGN);
    /* a value of the level above the caller, as x or in an operation */
    for (int op = 0; op < 2; op++) {
        two_up t = {ad_const(0.0), op, AD_OK, AD_OK};
        expect_failure_every_driver(top_level, top_level_fn, &t, AD_EFOREIGN,
                                    op ? "value two levels up in an operation"
                                       : "value two levels up as x");
        if (!op)
            assert_int_equal(t.inner, AD_EFOREIGN);
        assert_int_equal(t.middle, AD_EFOREIGN);
    }
    check_og_ok();
}

/* ======================================================================
 * 10. Outside a recording, and from constants: ad_gradient's and ad_jvp's
 *    numbers, as constants
 * ====================================================================== */

static void expect_constants(const ad_real *r, size_t n, const double *want, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (!same_double(r[i].v, want[i]) || r[i].id != 0 || r[i].tag != 0) {
            print_error("%s[%zu] = {%.17g, id %u, tag %u}, expected the constant %.17g\n", what,
                        i, r[i].v, (unsigned)r[i].id, (unsigned)r[i].tag, want[i]);
            fail();
        }
}

static ad_real prim_by_index(const ad_real *x, size_t n, void *ctx)
{
    return prims[*(const size_t *)ctx].r(x, n, NULL);
}

static void prim_by_index_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    y[0] = prim_by_index(x, n, ctx);
    for (size_t j = 1; j < m; j++)
        y[j] = ad_mul(y[0], x[j - 1]);
}

/* Inside a recording, the same calls from constants: the enclosing
 * recording takes them as constants. */
typedef struct from_consts {
    size_t prim;
    double fx, g[4], y[3], jv[3];
    int bad;
} from_consts;

static ad_real outer_from_constants(const ad_real *x, size_t n, void *ctx)
{
    from_consts *c = ctx;
    const prim *P = &prims[c->prim];
    ad_real xc[4], vc[4], fx, g[4], y[3], jv[3];
    for (size_t i = 0; i < 4; i++) {
        xc[i] = ad_const(P->x[0][i]);
        vc[i] = ad_const(W4[i]);
    }
    if (ad_gradient_r(prim_by_index, &c->prim, 4, xc, &fx, g) != AD_OK ||
        ad_jvp_r(prim_by_index_fn, &c->prim, 4, xc, vc, 3, y, jv) != AD_OK)
        c->bad = 1;
    c->fx = fx.v;
    for (int i = 0; i < 4; i++) {
        c->g[i] = g[i].v;
        c->bad |= g[i].id != 0 || g[i].tag != 0;
    }
    for (int j = 0; j < 3; j++) {
        c->y[j] = y[j].v, c->jv[j] = jv[j].v;
        c->bad |= y[j].id != 0 || jv[j].id != 0 || y[j].tag != 0 || jv[j].tag != 0;
    }
    c->bad |= fx.id != 0;
    (void)n;
    /* x[0] itself is the only active term: the gradient is (1, fx-free) */
    return ad_add(ad_mul(x[0], 2.0), ad_add(fx, jv[1]));
}

/* Functions of no inputs. */
static ad_real seven(const ad_real *x, size_t n, void *ctx)
{
    (void)x, (void)n, (void)ctx;
    return ad_const(7.0);
}

static void nothing(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)x, (void)n, (void)y, (void)m, (void)ctx;
}

static void test_outside_recording(void **state)
{
    (void)state;
    for (size_t k = 0; k < NPRIMS; k++)
        for (int p = 0; p < 2; p++) {
            const double *x = prims[k].x[p];
            ad_real xr[4], vr[4], fr, gr[4], yr[3], jvr[3];
            double fx, g[4], y[3], jv[3];
            for (int i = 0; i < 4; i++) {
                xr[i] = ad_const(x[i]);
                vr[i] = ad_const(W4[i]);
            }
            assert_ok(ad_gradient(prim_by_index, &k, 4, x, &fx, g));
            assert_ok(ad_gradient_r(prim_by_index, &k, 4, xr, &fr, gr));
            expect_constants(&fr, 1, &fx, "fx outside a recording");
            expect_constants(gr, 4, g, "grad outside a recording");
            assert_ok(ad_jvp(prim_by_index_fn, &k, 4, x, W4, 3, y, jv));
            assert_ok(ad_jvp_r(prim_by_index_fn, &k, 4, xr, vr, 3, yr, jvr));
            expect_constants(yr, 3, y, "y outside a recording");
            expect_constants(jvr, 3, jv, "jv outside a recording");
            if (p == 0) {
                /* inside a recording, from constants */
                from_consts c = {k, 0, {0}, {0}, {0}, 0};
                double ofx, og1;
                double z = 0.25;
                assert_ok(ad_gradient(outer_from_constants, &c, 1, &z, &ofx, &og1));
                assert_false(c.bad);
                assert_same(og1, 2.0);
                assert_same(c.fx, fx);
                for (int i = 0; i < 4; i++)
                    assert_same(c.g[i], g[i]);
                for (int j = 0; j < 3; j++) {
                    assert_same(c.y[j], y[j]);
                    assert_same(c.jv[j], jv[j]);
                }
                assert_same(ofx, 0.5 + (fx + jv[1]));
            }
        }
    /* n = 0, m = 0: NULL arrays */
    ad_real fr;
    assert_ok(ad_gradient_r(seven, NULL, 0, NULL, &fr, NULL));
    assert_same(fr.v, 7.0);
    assert_ok(ad_jvp_r(nothing, NULL, 0, NULL, NULL, 0, NULL, NULL));
}

/* ======================================================================
 * 11. Edge values: +-0, subnormals, Inf, NaN, the largest double
 * ====================================================================== */

static ad_real edge_inner(const ad_real *x, size_t n, void *ctx)
{
    ad_real e[3] = {x[0], x[1], x[0]};
    (void)n;
    switch (*(const int *)ctx) {
    case 0: return ad_mul(x[0], x[1]);
    case 1: return ad_add(ad_sqrt(x[0]), ad_mul(x[1], x[1]));
    case 2: return ad_mul(ad_fabs(x[0]), x[1]);
    case 3: return ad_fmin(x[0], x[1]);
    case 4: return ad_fmax(ad_mul(x[0], 2.0), x[1]);
    case 5: return ad_hypot(x[0], x[1]);
    case 6: return ad_pow(x[0], x[1]);
    case 7: return ad_div(x[0], x[1]);
    case 8: return ad_mul(ad_log(x[0]), x[1]);
    case 9: return ad_atan2(x[0], x[1]);
    case 10: return ad_prod(3, e);
    case 11: return ad_logsumexp(2, (ad_real *)x);
    case 12: return ad_mul(ad_exp(x[0]), x[1]);
    case 13: return ad_sqnorm(2, (ad_real *)x);
    case 14: return ad_cbrt(ad_mul(x[0], x[1]));
    case 15: return ad_dot(2, (ad_real *)x, e + 1);
    case 16: return ad_mul(ad_sin(x[0]), ad_tanh(x[1]));
    default: return ad_select_lt(x[0], x[1], ad_mul(x[0], x[0]), ad_mul(x[1], 3.0));
    }
}
#define EDGE_FUNCTIONS 18

static void edge_inner_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    y[0] = edge_inner(x, n, ctx);
    for (size_t j = 1; j < m; j++)
        y[j] = ad_mul(y[0], x[j - 1]);
}

typedef struct edge_ctx {
    int which;
    ad_status sg, sj;
    double fx, g[2], y[3], jv[3];
} edge_ctx;

static const double EDGE_V[2] = {0.5, -1.0};

static ad_real edge_outer(const ad_real *x, size_t n, void *ctx)
{
    edge_ctx *c = ctx;
    ad_real fx, g[2], y[3], jv[3], v[2] = {ad_const(EDGE_V[0]), ad_const(EDGE_V[1])};
    c->sg = ad_gradient_r(edge_inner, &c->which, n, x, &fx, g);
    c->sj = ad_jvp_r(edge_inner_fn, &c->which, n, x, v, 3, y, jv);
    c->fx = fx.v, c->g[0] = g[0].v, c->g[1] = g[1].v;
    for (int j = 0; j < 3; j++)
        c->y[j] = y[j].v, c->jv[j] = jv[j].v;
    return ad_add(ad_add(fx, g[0]), ad_add(g[1], jv[2]));
}

/* The same number to rounding: identical, or both finite and within 4
 * units in the last place (a subnormal's included). */
static int edge_agree(double a, double b)
{
    if (same_double(a, b))
        return 1;
    if (!isfinite(a) || !isfinite(b))
        return 0;
    double m = fmax(fabs(a), fabs(b)), ulp = nextafter(m, INFINITY) - m;
    return fabs(a - b) <= 4 * ulp;
}

static void edge_check(const char *what, int which, const double *x, double got, double want)
{
    if (edge_agree(got, want))
        return;
    print_error("function %d at (%g, %g): %s = %.17g, ad_gradient/ad_jvp give %.17g\n", which,
                x[0], x[1], what, got, want);
    fail();
}

/* ---- records the sweep does not reach (fuzz findings) ---- */

/* sqrt(x0) computed and unused: its infinite partial at 0 must not reach
 * the gradient (ad_gradient's exact sweep leaves it out: 0, not NaN). */
static ad_real dead_sqrt(const ad_real *x, size_t n, void *ctx)
{
    (void)n;
    (void)ctx;
    ad_real unused = ad_sqrt(x[0]);
    (void)unused;
    return ad_mul(x[1], x[1]);
}

static ad_real dead_sqrt_outer(const ad_real *x, size_t n, void *ctx)
{
    ad_real fx, g[2];
    double *out = ctx;
    assert_int_equal(ad_gradient_r(dead_sqrt, NULL, n, x, &fx, g), AD_OK);
    out[0] = g[0].v;
    out[1] = g[1].v;
    return ad_add(g[0], g[1]);
}

/* log2(x0) + x1 along v = (0, 1) at x0 = 0: ad_jvp leaves the input of
 * direction 0 out (jv = 1, not 0 x Inf). */
static void log2_plus(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n;
    (void)m;
    (void)ctx;
    y[0] = ad_add(ad_log2(x[0]), x[1]);
}

static ad_real log2_plus_outer(const ad_real *x, size_t n, void *ctx)
{
    ad_real v[2] = {ad_const(0.0), ad_const(1.0)}, y, jv;
    double *out = ctx;
    assert_int_equal(ad_jvp_r(log2_plus, NULL, n, x, v, 1, &y, &jv), AD_OK);
    out[0] = jv.v;
    return ad_mul(jv, x[1]);
}

/* d2/db2 atan2(a, b) far from the origin, through a nested gradient: the
 * partials' own derivatives stay in range (2.39e-301 at b = 2e100). */
static ad_real atan2_far(const ad_real *x, size_t n, void *ctx)
{
    (void)n;
    (void)ctx;
    return ad_atan2(0.955, x[0]);
}

static ad_real atan2_far_outer(const ad_real *x, size_t n, void *ctx)
{
    ad_real fx, g;
    (void)ctx;
    assert_int_equal(ad_gradient_r(atan2_far, NULL, n, x, &fx, &g), AD_OK);
    return g;
}

static void test_unreached_records(void **state)
{
    (void)state;
    double x[2] = {0.0, 3.0}, fx, g[2], inner[2];
    assert_int_equal(ad_gradient(dead_sqrt_outer, inner, 2, x, &fx, g), AD_OK);
    assert_true(inner[0] == 0.0 && inner[1] == 6.0);
    assert_true(g[0] == 0.0 && g[1] == 2.0);
    double x2[2] = {0.0, 2.0}, jv;
    assert_int_equal(ad_gradient(log2_plus_outer, &jv, 2, x2, &fx, g), AD_OK);
    assert_true(jv == 1.0);
    double b = 2e100, d2, hess;
    assert_int_equal(ad_gradient(atan2_far_outer, NULL, 1, &b, &fx, &d2), AD_OK);
    assert_int_equal(ad_hessian(atan2_far, NULL, 1, &b, &fx, g, &hess), AD_OK);
    assert_true(hess > 2.3e-301 && hess < 2.5e-301);
    assert_true(fabs(d2 - hess) <= 1e-12 * hess);
}

static void test_edge_values(void **state)
{
    int fail_count = 0;
    static const double E[][2] = {
        {0.0, 0.0},        {-0.0, 0.0},       {0.0, -0.0},      {5e-324, 1.0},
        {1e-310, -2.0},    {-3e-320, 4e-321}, {1e-300, 1e-300}, {INFINITY, 1.0},
        {-INFINITY, 2.0},  {INFINITY, 0.0},   {-0.0, -INFINITY}, {NAN, 1.0},
        {1.0, NAN},        {DBL_MAX, 2.0},    {-DBL_MAX, DBL_MAX}, {1.0, 1.0},
        {2.0, -0.0},       {0.5, INFINITY}};
    (void)state;
    for (int which = 0; which < EDGE_FUNCTIONS; which++)
        for (size_t p = 0; p < sizeof E / sizeof E[0]; p++) {
            const double *x = E[p];
            double fx, g[2], y[3], jv[3];
            ad_status sg = ad_gradient(edge_inner, &which, 2, x, &fx, g);
            ad_status sj = ad_jvp(edge_inner_fn, &which, 2, x, EDGE_V, 3, y, jv);
            /* outside a recording: the same bits, as constants */
            ad_real xr[2] = {ad_const(x[0]), ad_const(x[1])}, fr, gr[2], yr[3], jvr[3];
            ad_real vr[2] = {ad_const(EDGE_V[0]), ad_const(EDGE_V[1])};
            assert_int_equal(ad_gradient_r(edge_inner, &which, 2, xr, &fr, gr), sg);
            assert_int_equal(ad_jvp_r(edge_inner_fn, &which, 2, xr, vr, 3, yr, jvr), sj);
            if (sg == AD_OK) {
                expect_constants(&fr, 1, &fx, "edge fx outside");
                expect_constants(gr, 2, g, "edge grad outside");
            }
            if (sj == AD_OK) {
                expect_constants(yr, 3, y, "edge y outside");
                expect_constants(jvr, 3, jv, "edge jv outside");
            }
            /* inside a recording, with x active: the same numbers */
            edge_ctx c = {which, AD_EINVAL, AD_EINVAL, 0, {0}, {0}, {0}};
            double ofx, og2[2];
            /* the enclosing gradient of these values may overflow (AD_EOVERFLOW):
             * the values compared are taken while recording */
            ad_status so = ad_gradient(edge_outer, &c, 2, x, &ofx, og2);
            if (so != AD_OK && so != AD_EOVERFLOW) {
                print_error("function %d at (%g, %g): enclosing ad_gradient %d (%s)\n", which,
                            x[0], x[1], (int)so, ad_strerror(so));
                fail();
            }
            if (sg == AD_EOVERFLOW && (c.sg == AD_OK || c.sg == AD_EOVERFLOW) && c.sj == sj)
                continue;  /* ad_gradient's sweep overflowed (docs/conventions.md): the
                              replayed one has no such status (see the report) */
            if (c.sg != sg || c.sj != sj) {
                print_error("function %d at (%g, %g): inside a recording ad_gradient_r %d, "
                            "ad_jvp_r %d; ad_gradient %d, ad_jvp %d; values fx %g grad %g %g\n",
                            which, x[0], x[1], (int)c.sg, (int)c.sj, (int)sg, (int)sj, c.fx,
                            c.g[0], c.g[1]);
                fail_count++;
                continue;
            }
            edge_check("fx", which, x, c.fx, fx);
            edge_check("grad[0]", which, x, c.g[0], g[0]);
            edge_check("grad[1]", which, x, c.g[1], g[1]);
            for (int j = 0; j < 3; j++) {
                edge_check("y", which, x, c.y[j], y[j]);
                edge_check("jv", which, x, c.jv[j], jv[j]);
            }
        }
    assert_int_equal(fail_count, 0);
}

/* ======================================================================
 * 12. Errors
 * ====================================================================== */

/* ---- NULL arguments ---- */

static int calls_of_counted;

static ad_real counted(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    calls_of_counted++;
    return n ? ad_mul(x[0], x[n - 1]) : ad_const(1.0);
}

static void counted_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    for (size_t j = 0; j < m; j++)
        y[j] = counted(x, n, ctx);
}

static void nan_reals(const ad_real *r, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (!isnan(r[i].v) || r[i].id != 0) {
            print_error("%s[%zu] = {%.17g, id %u}, expected a NaN constant\n", what, i, r[i].v,
                        (unsigned)r[i].id);
            fail();
        }
}

/* The NULL cases of both calls, outside a recording when outer is NULL,
 * else inside one (x and v the recording's values). */
static void null_cases(const ad_real *x2, ad_status *worst)
{
    ad_real fx, g[2], y[2], jv[2];
    const ad_real *v2 = x2;
    ad_status s;
#define EXPECT_EINVAL(call)                              \
    do {                                                 \
        s = (call);                                      \
        if (s != AD_EINVAL)                              \
            *worst = s == AD_OK ? AD_EBUSY : s;          \
    } while (0)
    fx = g[0] = g[1] = ad_const(0.0);
    EXPECT_EINVAL(ad_gradient_r(NULL, NULL, 2, x2, &fx, g));
    nan_reals(&fx, 1, "fx (f NULL)");
    nan_reals(g, 2, "grad (f NULL)");
    g[0] = g[1] = ad_const(0.0);
    EXPECT_EINVAL(ad_gradient_r(counted, NULL, 2, x2, NULL, g));
    nan_reals(g, 2, "grad (fx NULL)");
    fx = g[0] = g[1] = ad_const(0.0);
    EXPECT_EINVAL(ad_gradient_r(counted, NULL, 2, NULL, &fx, g));
    nan_reals(&fx, 1, "fx (x NULL)");
    nan_reals(g, 2, "grad (x NULL)");
    fx = ad_const(0.0);
    EXPECT_EINVAL(ad_gradient_r(counted, NULL, 2, x2, &fx, NULL));
    nan_reals(&fx, 1, "fx (grad NULL)");
    y[0] = y[1] = jv[0] = jv[1] = ad_const(0.0);
    EXPECT_EINVAL(ad_jvp_r(NULL, NULL, 2, x2, v2, 2, y, jv));
    nan_reals(y, 2, "y (f NULL)");
    nan_reals(jv, 2, "jv (f NULL)");
    y[0] = y[1] = jv[0] = jv[1] = ad_const(0.0);
    EXPECT_EINVAL(ad_jvp_r(counted_fn, NULL, 2, NULL, v2, 2, y, jv));
    nan_reals(y, 2, "y (x NULL)");
    nan_reals(jv, 2, "jv (x NULL)");
    y[0] = y[1] = jv[0] = jv[1] = ad_const(0.0);
    EXPECT_EINVAL(ad_jvp_r(counted_fn, NULL, 2, x2, NULL, 2, y, jv));
    nan_reals(y, 2, "y (v NULL)");
    nan_reals(jv, 2, "jv (v NULL)");
    jv[0] = jv[1] = ad_const(0.0);
    EXPECT_EINVAL(ad_jvp_r(counted_fn, NULL, 2, x2, v2, 2, NULL, jv));
    nan_reals(jv, 2, "jv (y NULL)");
    y[0] = y[1] = ad_const(0.0);
    EXPECT_EINVAL(ad_jvp_r(counted_fn, NULL, 2, x2, v2, 2, y, NULL));
    nan_reals(y, 2, "y (jv NULL)");
#undef EXPECT_EINVAL
}

typedef struct null_inside {
    ad_status worst;  /* AD_EINVAL when every case returned it */
    int calls;
} null_inside;

static ad_real outer_null_cases(const ad_real *x, size_t n, void *ctx)
{
    null_inside *c = ctx;
    (void)n;
    c->worst = AD_EINVAL;
    int before = calls_of_counted;
    null_cases(x, &c->worst);
    c->calls = calls_of_counted - before;
    return ad_mul(x[0], x[1]);
}

static void outer_null_cases_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    ad_real x2[2] = {x[0], ad_mul(x[0], 2.0)};
    y[0] = outer_null_cases(x2, n, ctx);
    y[1] = x[0];
}

static ad_real outer_null_cases1(const ad_real *x, size_t n, void *ctx)
{
    ad_real x2[2] = {x[0], ad_mul(x[0], 2.0)};
    (void)n;
    return outer_null_cases(x2, 2, ctx);
}

static void test_null_arguments(void **state)
{
    (void)state;
    ad_real x2[2] = {ad_const(1.5), ad_const(-2.0)}, fx;
    ad_status worst = AD_EINVAL;
    int before = calls_of_counted;
    null_cases(x2, &worst);
    assert_int_equal(worst, AD_EINVAL);
    assert_int_equal(calls_of_counted, before);  /* f is never called */
    /* n = 0 (m = 0) with NULL arrays is fine */
    assert_ok(ad_gradient_r(counted, NULL, 0, NULL, &fx, NULL));
    assert_same(fx.v, 1.0);
    assert_ok(ad_jvp_r(counted_fn, NULL, 2, x2, x2, 0, NULL, NULL));
    /* inside a recording: the same statuses, and the enclosing recording fails */
    null_inside c = {AD_OK, 0};
    expect_failure_every_driver(outer_null_cases1, outer_null_cases_fn, &c, AD_EINVAL,
                                "NULL arguments inside a recording");
    assert_int_equal(c.worst, AD_EINVAL);
    assert_int_equal(c.calls, 0);
    check_og_ok();
}

/* ---- what cannot be replayed: external functions, recorded matrices,
 * checkpointed loops, lgamma and tgamma of active values ---- */

static void sq_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    (void)ctx, (void)n, (void)m;
    y[0] = x[0] * x[0];
}

static void sq_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                   const double *ybar, double *xbar)
{
    (void)ctx, (void)n, (void)m, (void)y;
    xbar[0] = 2.0 * x[0] * ybar[0];
}

static void sq_jvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                   const double *xdot, double *ydot)
{
    (void)ctx, (void)n, (void)m, (void)y;
    ydot[0] = 2.0 * x[0] * xdot[0];
}

static void sq_hvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                   const double *ybar, const double *xdot, double *out)
{
    (void)ctx, (void)n, (void)x, (void)m, (void)y;
    out[0] = 2.0 * ybar[0] * xdot[0];
}

static void half_square_step(size_t k, const ad_real *s, ad_real *next, size_t n,
                             const ad_real *params, size_t np, void *ctx)
{
    (void)k, (void)n, (void)params, (void)np, (void)ctx;
    next[0] = ad_mul(ad_mul(s[0], s[0]), 0.5);
}

enum { UNSUP_EXTERNAL, UNSUP_MAT_RECORD, UNSUP_LOOP, UNSUP_LGAMMA,
       UNSUP_TGAMMA, UNSUP_KINDS };
static const char *const unsup_name[UNSUP_KINDS] = {
    "ad_external", "ad_mat_record", "ad_checkpointed_loop", "lgamma", "tgamma"};

/* x0^2 (ad_external), 2 x0 x0 (a recorded matrix),
 * the loop's s <- s^2 / 2 three times, lgamma(x0), tgamma(x0): each times
 * x0. */
static ad_real unsup_inner(const ad_real *x, size_t n, void *ctx)
{
    static const ad_rule rule = {sq_primal, sq_vjp, sq_jvp, sq_hvp};
    ad_real y[1] = {ad_const(NAN)}, Ar[1];
    ad_mat M;
    (void)n;
    switch (*(const int *)ctx) {
    case UNSUP_EXTERNAL: status_unused(ad_external(&rule, NULL, 1, x, 1, y)); break;
    case UNSUP_MAT_RECORD:
        Ar[0] = ad_mul(x[0], 2.0);
        if (ad_mat_record(1, 1, Ar, &M) == AD_OK)
            ad_mat_vec(&M, x, y);
        break;
    case UNSUP_LOOP: status_unused(ad_checkpointed_loop(half_square_step, NULL, 3, 0, 1, x, 0, NULL, y)); break;
    case UNSUP_LGAMMA: y[0] = ad_lgamma(x[0]); break;
    default: y[0] = ad_tgamma(x[0]); break;
    }
    return ad_mul(y[0], x[0]);
}

static void unsup_inner_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = unsup_inner(x, n, ctx);
}

typedef struct unsup_ctx {
    int kind;
    int by_jvp;
    int constant;  /* the nested call from constants: allowed */
    ad_status st;
    double fx, g;
} unsup_ctx;

static ad_real unsup_outer(const ad_real *x, size_t n, void *ctx)
{
    unsup_ctx *c = ctx;
    ad_real in = c->constant ? ad_const(x[0].v) : x[0], fx, g;
    (void)n;
    if (c->by_jvp)
        c->st = ad_jvp_r(unsup_inner_fn, &c->kind, 1, &in, &in, 1, &fx, &g);
    else
        c->st = ad_gradient_r(unsup_inner, &c->kind, 1, &in, &fx, &g);
    c->fx = fx.v, c->g = g.v;
    return ad_add(ad_mul(x[0], 3.0), ad_mul(fx, g));
}

static void unsup_outer_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = unsup_outer(x, n, ctx);
    y[1] = x[0];
}

static void test_unsupported_inside(void **state)
{
    (void)state;
    for (int kind = 0; kind < UNSUP_KINDS; kind++)
        for (int by_jvp = 0; by_jvp < 2; by_jvp++) {
            char what[96];
            snprintf(what, sizeof what, "%s inside %s", unsup_name[kind],
                     by_jvp ? "ad_jvp_r" : "ad_gradient_r");
            unsup_ctx c = {kind, by_jvp, 0, AD_OK, 0, 0};
            expect_failure_every_driver(unsup_outer, unsup_outer_fn, &c, AD_ENOTSUP, what);
            assert_int_equal(c.st, AD_ENOTSUP);
            assert_nan(c.fx);
            assert_nan(c.g);
            /* from constants, and outside a recording: ad_gradient's (ad_jvp's) numbers */
            double x = 1.25, want[2], fxo, go;
            if (by_jvp)
                assert_ok(ad_jvp(unsup_inner_fn, &c.kind, 1, &x, &x, 1, &want[0], &want[1]));
            else
                assert_ok(ad_gradient(unsup_inner, &c.kind, 1, &x, &want[0], &want[1]));
            c.constant = 1;
            assert_ok(ad_gradient(unsup_outer, &c, 1, &x, &fxo, &go));
            assert_int_equal(c.st, AD_OK);
            assert_same(c.fx, want[0]);
            assert_same(c.g, want[1]);
            assert_same(go, 3.0);
            ad_real xr = ad_const(x), fr, gr;
            if (by_jvp)
                assert_ok(ad_jvp_r(unsup_inner_fn, &c.kind, 1, &xr, &xr, 1, &fr, &gr));
            else
                assert_ok(ad_gradient_r(unsup_inner, &c.kind, 1, &xr, &fr, &gr));
            expect_constants(&fr, 1, &want[0], what);
            expect_constants(&gr, 1, &want[1], what);
        }
    check_og_ok();
}

/* ---- the tape limit: the inner recording's, and the enclosing one's ---- */

typedef struct limited {
    long inner_pad, outer_pad;
    ad_status st;
    double fx, g;
} limited;

static ad_real limited_outer(const ad_real *x, size_t n, void *ctx)
{
    limited *c = ctx;
    ad_real s = x[0], fx, g;
    (void)n;
    for (long k = 0; k < c->outer_pad; k++)
        s = ad_mul(s, 1.0);
    c->st = ad_gradient_r(padded_squares, &c->inner_pad, 1, x, &fx, &g);
    c->fx = fx.v, c->g = g.v;
    return ad_add(ad_mul(s, g), fx);
}

static void limited_outer_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = limited_outer(x, n, ctx);
    y[1] = x[0];
}

static void test_tape_limit(void **state)
{
    (void)state;
    const double x = 1.5;
    double fx, g;
    assert_int_equal(ad_set_tape_limit(300), 0);
    /* both fit: x (2x) + x^2 = 3 x^2, gradient 6x */
    limited c = {100, 50, AD_EINVAL, 0, 0};
    assert_ok(ad_gradient(limited_outer, &c, 1, &x, &fx, &g));
    assert_ok(c.st);
    assert_same(c.g, 3.0);
    assert_same(fx, 6.75);
    assert_same(g, 9.0);
    /* the inner recording passes its limit */
    c.inner_pad = 400;
    expect_failure_every_driver(limited_outer, limited_outer_fn, &c, AD_ERANGE, "inner past limit");
    assert_int_equal(c.st, AD_ERANGE);
    assert_nan(c.fx);
    assert_nan(c.g);
    /* the enclosing recording passes it while the inner program is replayed */
    c.inner_pad = 200;
    c.outer_pad = 250;
    expect_failure_every_driver(limited_outer, limited_outer_fn, &c, AD_ERANGE,
                                "enclosing recording past limit");
    assert_int_equal(c.st, AD_ERANGE);
    assert_nan(c.fx);
    assert_nan(c.g);
    assert_int_equal(ad_set_tape_limit(0), 300);
    c.inner_pad = 4000, c.outer_pad = 4000;
    assert_ok(ad_gradient(limited_outer, &c, 1, &x, &fx, &g));
    assert_same(g, 9.0);
    check_og_ok();
}

/* ---- allocation failure at every count ---- */

enum { AF_GRADIENT, AF_HESSIAN, AF_JACOBIAN, AF_TOWER, AF_LINEARIZE, AF_SUM, AF_HVP, AF_PRIM,
       AF_KINDS };

/* One call of driver `api`; out gets its results, *count how many. */
static ad_status af_call(int api, double *fx, double *out, size_t *count)
{
    const double *x = pts[1];
    probe pr = {AD_OK, 0};
    switch (api) {
    case AF_GRADIENT:
        *count = 3;
        return ad_gradient(og, &pr, 3, x, fx, out);
    case AF_HESSIAN:
        *count = 12;
        return ad_hessian(oj, &pr, 3, x, fx, out, out + 3);
    case AF_JACOBIAN:
        *count = 20;
        *fx = 0.0;
        return ad_jacobian(vj, &pr, 3, x, 5, out, out + 5);
    case AF_TOWER: {
        static tower t;
        static tower_ctx top;
        tower_init(&t, 0x2);
        top.t = &t, top.level = 2;
        *count = 3;
        return ad_gradient(tower_level, &top, 3, x, fx, out);
    }
    case AF_LINEARIZE: {
        ad_linear *L = NULL;
        *count = 10;
        *fx = 0.0;
        ad_status s = ad_linearize(vg, &pr, 3, x, 5, out, &L);
        if (s == AD_OK)
            s = ad_linear_jvp(L, DIR_V, out + 5);
        else if (L)
            s = AD_EBUSY;  /* a failed linearisation leaves no handle */
        ad_linear_free(L);
        return s;
    }
    case AF_SUM:
        *count = 3;
        return ad_gradient_sum(sum_term, (void *)&kinds[1], 6, 3, x, fx, out, 1);
    case AF_PRIM: {  /* n-ary records (ad_logsumexp, ad_prod) in the inner function */
        prim_ctx c = {p_shift_r, AD_OK};
        *count = 20;
        *fx = 0.0;
        ad_status s = ad_jacobian(prim_grad_fn, &c, 4, prims[0].x[0], 4, out, out + 4);
        return s == AD_OK ? c.st : s;
    }
    default:
        *count = 6;
        return ad_hvp(og, &pr, 3, x, DIR_V, fx, out, out + 3);
    }
}

/* The same results from the closed forms. */
static void af_want(int api, double *fx, double *out)
{
    const double *x = pts[1];
    double y[5], J[15], H[9];
    switch (api) {
    case AF_GRADIENT: *fx = og_value(x); og_grad(x, out); break;
    case AF_HESSIAN:
        *fx = oj_value(x);
        oj_grad(x, out);
        oj_hess(x, out + 3);
        break;
    case AF_JACOBIAN:
        vj_jac(x, out, out + 5);
        *fx = 0.0;
        break;
    case AF_TOWER: {
        tower t;
        tower_init(&t, 0x2);
        *fx = tower_closed(&t, 2, x, NULL, 0);
        for (int i = 0; i < 3; i++)
            out[i] = tower_closed(&t, 2, x, (int[]){i}, 1);
        break;
    }
    case AF_LINEARIZE:
        vg_jac(x, y, J);
        memcpy(out, y, sizeof y);
        matvec3(5, J, DIR_V, out + 5);
        *fx = 0.0;
        break;
    case AF_SUM: {
        *fx = 0.0;
        out[0] = out[1] = out[2] = 0.0;
        for (size_t i = 0; i < 6; i++) {
            double xs[3], gi[3];
            for (size_t j = 0; j < 3; j++)
                xs[j] = x[j] + shift_of(i, j);
            *fx += oj_value(xs);
            oj_grad(xs, gi);
            for (int j = 0; j < 3; j++)
                out[j] += gi[j];
        }
        break;
    }
    case AF_PRIM: {  /* an uninjected call's results */
        size_t count;
        assert_ok(af_call(api, fx, out, &count));
        break;
    }
    default:
        *fx = og_value(x);
        og_grad(x, out);
        og_hess(x, H);
        matvec3(3, H, DIR_V, out + 3);
        break;
    }
}

static void test_alloc_failure(void **state)
{
    static const char *const names[AF_KINDS] = {"ad_gradient", "ad_hessian", "ad_jacobian",
                                                "depth 2", "ad_linearize", "ad_gradient_sum",
                                                "ad_hvp", "n-ary records"};
    (void)state;
    for (int api = 0; api < AF_KINDS; api++)
        for (int fresh = 1; fresh >= 0; fresh--) {
            double wfx, want[20];
            af_want(api, &wfx, want);
            int successes = 0, failures = 0;
            assert_ok(ad_release());
            for (long i = 0; successes < 3; i++) {
                double fx = 0.0, out[20];
                size_t count = 0;
                for (int k = 0; k < 20; k++)
                    out[k] = 0.0;
                if (fresh)
                    assert_ok(ad_release());
                ad_test_fail_alloc_after(i);
                ad_status s = af_call(api, &fx, out, &count);
                ad_test_fail_alloc_after(-1);
                if (s == AD_OK) {
                    successes++;
                    if (api != AF_JACOBIAN && api != AF_LINEARIZE && api != AF_PRIM)
                        assert_near(fx, wfx, 1e-13, 0.0);
                    vec_near(names[api], out, want, count, RTOL, 0.0);
                    continue;
                }
                if (successes || s != AD_ENOMEM)
                    print_error("%s (%s state), allocation %ld:\n", names[api],
                                fresh ? "fresh" : "kept", i);
                assert_alloc_failure(i, s, successes);
                if (api != AF_JACOBIAN && api != AF_LINEARIZE && api != AF_PRIM)
                    assert_nan(fx);
                expect_nan_vec(names[api], out, api == AF_LINEARIZE ? 5 : count);
                failures++;
                assert_true(i < 3000);
            }
            if (fresh)
                assert_true(failures > 0);
        }
    check_og_ok();
}

/* ---- the nesting limit ---- */

/* Level L of a chain: h_L(x) = h_(L+1)'(x) + L x (by ad_gradient_r or
 * ad_jvp_r), h_top = x^3.  Level L is recorded on the thread's tape L. */
typedef struct chain {
    int level, top, by_jvp;
    ad_status st[AD_MAX_NESTING + 4];
} chain;

static ad_real chain_level(const ad_real *x, size_t n, void *ctx);

static void chain_level_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = chain_level(x, n, ctx);
}

static ad_real chain_level(const ad_real *x, size_t n, void *ctx)
{
    chain *c = ctx;
    int level = c->level;
    if (level == c->top)
        return ad_mul(ad_mul(x[0], x[0]), x[0]);
    ad_real fx, d, one = ad_const(1.0);
    c->level = level + 1;
    ad_status s = c->by_jvp ? ad_jvp_r(chain_level_fn, c, n, x, &one, 1, &fx, &d)
                            : ad_gradient_r(chain_level, c, n, x, &fx, &d);
    c->level = level;
    c->st[level] = s;
    return ad_add(d, ad_mul(x[0], (double)level));
}

/* h_0 and h_0' at x, from the polynomials. */
static void chain_closed(int top, double x, double *h, double *dh)
{
    double c[4] = {0, 0, 0, 1};  /* h_top = x^3 */
    for (int L = top - 1; L >= 0; L--) {
        double d[4] = {c[1], 2 * c[2], 3 * c[3], 0};
        d[1] += L;
        memcpy(c, d, sizeof c);
    }
    *h = c[0] + x * (c[1] + x * (c[2] + x * c[3]));
    *dh = c[1] + x * (2 * c[2] + x * 3 * c[3]);
}

static void chain_two(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = chain_level(x, n, ctx);
    y[1] = x[0];
}

static void test_nesting_limit(void **state)
{
    (void)state;
    const double x = 0.75;
    for (int by_jvp = 0; by_jvp < 2; by_jvp++) {
        /* AD_MAX_NESTING - 1 nested calls under the driver: every tape in use */
        chain c = {0, AD_MAX_NESTING - 1, by_jvp, {AD_OK}};
        double fx, g, h, dh, H, gg;
        chain_closed(c.top, x, &h, &dh);
        assert_ok(ad_gradient(chain_level, &c, 1, &x, &fx, &g));
        for (int L = 0; L < c.top; L++)
            assert_int_equal(c.st[L], AD_OK);
        assert_near(fx, h, 1e-14, 0.0);
        assert_near(g, dh, 1e-14, 0.0);
        assert_ok(ad_hessian(chain_level, &c, 1, &x, &fx, &gg, &H));
        assert_near(gg, dh, 1e-14, 0.0);
        /* one more: AD_ENESTING, from the deepest call up to the driver */
        c.top = AD_MAX_NESTING;
        for (int L = 0; L < AD_MAX_NESTING + 4; L++)
            c.st[L] = AD_OK;
        expect_failure_every_driver(chain_level, chain_two, &c, AD_ENESTING, "too deep");
        for (int L = 0; L < c.top; L++)
            assert_int_equal(c.st[L], AD_ENESTING);
        c.top = AD_MAX_NESTING + 3;
        assert_int_equal(ad_gradient(chain_level, &c, 1, &x, &fx, &g), AD_ENESTING);
        assert_all_nan(fx, &g, 1);
    }
    check_og_ok();
}

/* ---- checks (AD_CHECK_FINITE) apply to the inner recording too ---- */

static ad_real log_inner(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(ad_log(x[0]), x[0]);
}

static ad_real outer_log(const ad_real *x, size_t n, void *ctx)
{
    ad_real fx, g;
    *(ad_status *)ctx = ad_gradient_r(log_inner, NULL, n, x, &fx, &g);
    return ad_add(fx, g);
}

static void test_checks(void **state)
{
    (void)state;
    unsigned old = ad_set_checks(AD_CHECK_FINITE);
    for (int q = 0; q < 2; q++) {
        const nest_kind *k = &kinds[q];
        double fx, g[3], H[9], wg[3], wh[9];
        assert_ok(ad_hessian(k->scalar, NULL, 3, pts[2], &fx, g, H));
        k->grad(pts[2], wg);
        k->hess(pts[2], wh);
        vec_near("gradient, checked", g, wg, 3, RTOL, 0.0);
        vec_near("Hessian, checked", H, wh, 9, RTOL, 0.0);
    }
    ad_status st = AD_OK;
    double x = -1.0, fx, g;
    assert_int_equal(ad_gradient(outer_log, &st, 1, &x, &fx, &g), AD_ENONFINITE);
    assert_int_equal(st, AD_ENONFINITE);
    assert_all_nan(fx, &g, 1);
    ad_fault fault;
    assert_ok(ad_last_fault(&fault));
    assert_string_equal(fault.op, "log");
    assert_same(fault.arg[0], -1.0);
    ad_set_checks(old);
    x = 2.0;
    assert_ok(ad_gradient(outer_log, &st, 1, &x, &fx, &g));
    assert_near(g, log(x) + 1.0 + 1.0 / x, 1e-15, 0.0);  /* d/dx (x log x + log x + 1) */
    check_og_ok();
}

/* ======================================================================
 * 13. Threads: nested calls on several threads at once give the bits they
 *     give on one
 * ====================================================================== */

typedef struct thread_want {
    double og_g[NPTS][3], og_H[NPTS][9], vj_y[NPTS][5], vj_J[NPTS][15], tw_g[NPTS][3];
    double sum_g[NPTS][3];
} thread_want;

static thread_want thread_ref;

/* One round's results at point p, into the same layout. */
static ad_status thread_round(int p, double *og_g, double *og_H, double *vj_y, double *vj_J,
                              double *tw_g, double *sum_g)
{
    double fx;
    ad_status s = ad_hessian(og, NULL, 3, pts[p], &fx, og_g, og_H);
    if (s == AD_OK)
        s = ad_jacobian(vj, NULL, 3, pts[p], 5, vj_y, vj_J);
    if (s == AD_OK) {
        tower t;
        tower_ctx top = {&t, 2};
        tower_init(&t, 0x2);
        s = ad_gradient(tower_level, &top, 3, pts[p], &fx, tw_g);
        if (s == AD_OK && t.first_error != AD_OK)
            s = t.first_error;
    }
    if (s == AD_OK)
        s = ad_gradient_sum(sum_term, (void *)&kinds[0], 8, 3, pts[p], &fx, sum_g, 0);
    return s;
}

static void compare_bits(worker *w, int round, const char *what, const double *got,
                         const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!same_double(got[i], want[i])) {
            worker_report(w, what, round, got[i], want[i]);
            return;
        }
}

static void *thread_body(void *arg)
{
    worker *w = arg;
    worker_start(w);
    for (int round = 0; round < 12; round++) {
        int p = (w->index + round) % NPTS;
        double og_g[3], og_H[9], vj_y[5], vj_J[15], tw_g[3], sum_g[3];
        ad_status s = thread_round(p, og_g, og_H, vj_y, vj_J, tw_g, sum_g);
        if (s != AD_OK) {
            worker_fail(w, "round %d: status %d (%s)", round, (int)s, ad_strerror(s));
            continue;
        }
        compare_bits(w, round, "og gradient", og_g, thread_ref.og_g[p], 3);
        compare_bits(w, round, "og Hessian", og_H, thread_ref.og_H[p], 9);
        compare_bits(w, round, "vj values", vj_y, thread_ref.vj_y[p], 5);
        compare_bits(w, round, "vj Jacobian", vj_J, thread_ref.vj_J[p], 15);
        compare_bits(w, round, "depth 2 gradient", tw_g, thread_ref.tw_g[p], 3);
        compare_bits(w, round, "sum gradient", sum_g, thread_ref.sum_g[p], 3);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    for (int p = 0; p < NPTS; p++) {
        assert_ok(thread_round(p, thread_ref.og_g[p], thread_ref.og_H[p], thread_ref.vj_y[p],
                               thread_ref.vj_J[p], thread_ref.tw_g[p], thread_ref.sum_g[p]));
        double want[15], y[5];
        og_hess(pts[p], want);
        vec_near("og Hessian", thread_ref.og_H[p], want, 9, RTOL, 0.0);
        vj_jac(pts[p], y, want);
        vec_near("vj Jacobian", thread_ref.vj_J[p], want, 15, RTOL, 0.0);
    }
    run_workers(thread_body);
}

/* ======================================================================
 * 14. Degenerate inner functions, active directions, long n-ary records
 * ====================================================================== */

/* Inner functions whose output is an input, a shifted input, a constant,
 * or that call ad_gradient and ad_release themselves. */
typedef struct trivial {
    int which;
    ad_status release, plain;
} trivial;

static ad_real trivial_inner(const ad_real *x, size_t n, void *ctx)
{
    trivial *t = ctx;
    (void)n;
    switch (t->which) {
    case 0: return x[1];                    /* an input */
    case 1: return ad_add(x[0], 2.0);       /* a shifted input: x0's ID */
    case 2: return ad_const(4.0);           /* a constant */
    case 3: return ad_mul(x[2], ad_const(0.0));  /* active, with zero partials */
    default: {                              /* a plain nested ad_gradient, and ad_release */
        double at = x[0].v, fx, g;
        t->plain = ad_gradient(square_cube, NULL, 1, &at, &fx, &g);
        t->release = ad_release();
        return ad_add(ad_mul(x[0], x[1]), ad_mul(x[2], g));  /* g = 3 x0^2 + 2 x0, a constant */
    }
    }
}

static void trivial_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    y[0] = trivial_inner(x, n, ctx);
    y[1] = x[0];                    /* an input */
    y[2] = ad_const(-1.0);          /* a constant */
    if (m > 3)
        y[3] = ad_sub(x[2], 0.5);   /* a shifted input */
}

typedef struct trivial_outer_ctx {
    trivial t;
    int by_jvp;
    ad_status st;
} trivial_outer_ctx;

/* Outputs: the inner call's fx (y0), gradient (jv) ... */
static void trivial_outer(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    trivial_outer_ctx *c = ctx;
    (void)m;
    if (c->by_jvp) {
        ad_real v[3] = {ad_mul(x[0], 2.0), ad_const(1.0), x[2]};
        c->st = ad_jvp_r(trivial_fn, &c->t, n, x, v, 4, y, y + 4);
    } else {
        c->st = ad_gradient_r(trivial_inner, &c->t, n, x, y, y + 1);
    }
}

static void test_trivial_inner(void **state)
{
    const double x[3] = {0.5, -1.5, 2.0};
    (void)state;
    for (int which = 0; which < 5; which++) {
        /* gradient_r: outputs fx, g0, g1, g2 */
        trivial_outer_ctx c = {{which, AD_OK, AD_OK}, 0, AD_EINVAL};
        double y[8], J[24], wy[4], wJ[12];
        memset(wJ, 0, sizeof wJ);
        double g3 = 3 * x[0] * x[0] + 2 * x[0];
        switch (which) {
        case 0: wy[0] = x[1], wy[1] = 0, wy[2] = 1, wy[3] = 0, wJ[1] = 1; break;
        case 1: wy[0] = x[0] + 2, wy[1] = 1, wy[2] = 0, wy[3] = 0, wJ[0] = 1; break;
        case 2: wy[0] = 4, wy[1] = wy[2] = wy[3] = 0; break;
        case 3: wy[0] = 0, wy[1] = wy[2] = wy[3] = 0; break;
        default:
            wy[0] = x[0] * x[1] + x[2] * g3, wy[1] = x[1], wy[2] = x[0], wy[3] = g3;
            wJ[0] = x[1], wJ[1] = x[0], wJ[2] = g3;  /* d fx */
            wJ[4] = 1;                                /* d g0 = d x1 */
            wJ[6] = 1;                                /* d g1 = d x0 */
            break;
        }
        assert_ok(ad_jacobian(trivial_outer, &c, 3, x, 4, y, J));
        assert_ok(c.st);
        vec_near("trivial inner: values", y, wy, 4, 1e-15, 0.0);
        vec_near("trivial inner: Jacobian", J, wJ, 12, 1e-15, 0.0);
        if (which == 4) {
            assert_int_equal(c.t.plain, AD_OK);
            assert_int_equal(c.t.release, AD_EBUSY);
        }
        /* jvp_r: outputs y0..y3 of trivial_fn, then J v, with v = (2 x0, 1, x2) */
        c.by_jvp = 1;
        double v[3] = {2 * x[0], 1.0, x[2]}, yy[4] = {wy[0], x[0], -1.0, x[2] - 0.5};
        double jrow[3] = {which == 0 ? 0 : which == 1 ? 1 : which == 4 ? x[1] : 0,
                          which == 0 ? 1 : which == 4 ? x[0] : 0, which == 4 ? g3 : 0};
        double want[8] = {yy[0], yy[1], yy[2], yy[3],
                          jrow[0] * v[0] + jrow[1] * v[1] + jrow[2] * v[2], v[0], 0.0, v[2]};
        assert_ok(ad_jacobian(trivial_outer, &c, 3, x, 8, y, J));
        assert_ok(c.st);
        vec_near("trivial inner (jvp): values", y, want, 8, 1e-15, 0.0);
        /* d(J v)/dx: J is constant except for which 4 (x0 x1 term), v = (2 x0, 1, x2) */
        double dj[3] = {jrow[0] * 2 + (which == 4 ? v[1] : 0), which == 4 ? v[0] : 0, jrow[2]};
        vec_near("trivial inner (jvp): d(J v)", J + 12, dj, 3, 1e-15, 0.0);
        double dv0[3] = {2, 0, 0}, dv2[3] = {0, 0, 1};
        vec_near("J v of an input", J + 15, dv0, 3, 1e-15, 0.0);
        vec_near("J v of a shifted input", J + 21, dv2, 3, 1e-15, 0.0);
    }
}

/* ad_jvp_r with constant x and active v: J(c) v, linear in v. */
static void jvp_const_x(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    ad_real c[3] = {ad_const(pts[1][0]), ad_const(pts[1][1]), ad_const(pts[1][2])}, yy[2];
    (void)ctx, (void)m;
    ad_status s = ad_jvp_r(F2_r, NULL, n, c, x, 2, yy, y);
    if (s != AD_OK)
        y[0] = y[1] = ad_const(NAN);
}

static ad_real jvp_no_outputs(const ad_real *x, size_t n, void *ctx)
{
    *(ad_status *)ctx = ad_jvp_r(F2_r, NULL, n, x, x, 0, NULL, NULL);
    return ad_mul(x[0], x[0]);
}

static void test_active_directions(void **state)
{
    (void)state;
    const double v[3] = {0.3, -0.8, 1.1};
    double y[2], J[6], want[6];
    assert_ok(ad_jacobian(jvp_const_x, NULL, 3, v, 2, y, J));
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 3; j++)
            want[3 * k + j] = F2_at(k, pts[1], (int[]){j}, 1);
    vec_near("d(J v)/dv with constant x", J, want, 6, 1e-15, 0.0);
    double Jv[2] = {want[0] * v[0] + want[1] * v[1] + want[2] * v[2],
                    want[3] * v[0] + want[4] * v[1] + want[5] * v[2]};
    vec_near("J v with constant x", y, Jv, 2, 1e-14, 0.0);
    /* m = 0 inside a recording, y and jv NULL */
    ad_status st = AD_EINVAL;
    double fx, g[3];
    assert_ok(ad_gradient(jvp_no_outputs, &st, 3, v, &fx, g));
    assert_ok(st);
    assert_same(g[0], 2 * v[0]);
}

/* ---- n-ary records longer than a chunk (65536 records), in the inner
 * program and in the replay ---- */

#define BIG 150000

typedef struct big_ctx {
    int kind;  /* 0 logsumexp, 1 prod, 2 sum of squares by ad_dot */
    ad_status st;
} big_ctx;

static double big_c(size_t k)
{
    return 0.5 + 0.25 * (double)(k % 5) / 4.0;
}

static ad_real big_inner(const ad_real *x, size_t n, void *ctx)
{
    static ad_real e[BIG];
    const big_ctx *b = ctx;
    (void)n;
    for (size_t k = 0; k < BIG; k++)
        e[k] = b->kind == 1 ? x[k % 3] : ad_mul(x[k % 3], big_c(k));
    return b->kind == 0 ? ad_logsumexp(BIG, e) : b->kind == 1 ? ad_prod(BIG, e) : ad_dot(BIG, e, e);
}

static void big_grad_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    big_ctx *b = ctx;
    ad_real fx;
    (void)m;
    ad_status s = ad_gradient_r(big_inner, ctx, n, x, &fx, y);
    if (s != AD_OK)
        b->st = s;
}

static void test_long_nary_records(void **state)
{
    static const double xs[3][3] = {{0.3, -0.2, 0.1}, {1.00001, 0.99998, 1.00002},
                                     {0.3, -0.2, 0.1}};
    (void)state;
    for (int kind = 0; kind < 3; kind++) {
        const double *x = xs[kind];
        big_ctx b = {kind, AD_OK};
        double y[3], J[9], H[9], g[3];
        assert_ok(ad_jacobian(big_grad_fn, &b, 3, x, 3, y, J));
        assert_int_equal(b.st, AD_OK);
        if (kind == 0) {
            /* e_k = c_k x_(k mod 3): H_ij = sum_(k in i) c_k^2 p_k [i = j] - P_i P_j,
             * P_i = sum_(k in i) c_k p_k */
            long double S = 0, P[3] = {0, 0, 0}, Q[3] = {0, 0, 0}, mx = -1e300;
            for (size_t k = 0; k < BIG; k++)
                mx = fmaxl(mx, (long double)big_c(k) * x[k % 3]);
            for (size_t k = 0; k < BIG; k++)
                S += expl(big_c(k) * x[k % 3] - mx);
            for (size_t k = 0; k < BIG; k++) {
                long double p = expl(big_c(k) * x[k % 3] - mx) / S;
                P[k % 3] += big_c(k) * p;
                Q[k % 3] += big_c(k) * big_c(k) * p;
            }
            for (int i = 0; i < 3; i++) {
                g[i] = (double)P[i];
                for (int j = 0; j < 3; j++)
                    H[3 * i + j] = (double)((i == j ? Q[i] : 0) - P[i] * P[j]);
            }
        } else if (kind == 1) {
            /* f = prod x_i^m_i, m_i = BIG / 3 */
            double m = BIG / 3, f = pow(x[0], m) * pow(x[1], m) * pow(x[2], m);
            for (int i = 0; i < 3; i++) {
                g[i] = m * f / x[i];
                for (int j = 0; j < 3; j++)
                    H[3 * i + j] = m * (m - (i == j)) * f / (x[i] * x[j]);
            }
        } else {
            /* f = sum_k c_k^2 x_(k mod 3)^2 */
            double s2[3] = {0, 0, 0};
            for (size_t k = 0; k < BIG; k++)
                s2[k % 3] += big_c(k) * big_c(k);
            for (int i = 0; i < 3; i++) {
                g[i] = 2 * s2[i] * x[i];
                for (int j = 0; j < 3; j++)
                    H[3 * i + j] = i == j ? 2 * s2[i] : 0.0;
            }
        }
        vec_near("long n-ary: gradient", y, g, 3, 1e-9, 0.0);
        vec_near("long n-ary: Hessian", J, H, 9, 1e-9, 0.0);
    }
}

/* ---- sizes on both sides of the calls' small-size path ----
 *
 * f(x) = sum_i a_i sin(x_i) x_(i+1 mod n), F(x)_j = x_j x_(j+1 mod n)
 * (j < m), at n (and m) from 1 to 70: outside a recording, ad_gradient's
 * and ad_jvp's bits; inside one, the Hessian in closed form. */

#define SZ_MAX 70

static double sz_a(size_t i)
{
    return 0.5 + 0.1 * (double)(i % 7);
}

static double sz_x(size_t i)
{
    return 0.3 + 0.05 * (double)(i % 11) - 0.02 * (double)(i % 3);
}

static ad_real sz_f(const ad_real *x, size_t n, void *ctx)
{
    ad_real s = ad_const(0.0);
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        s = ad_add(s, ad_mul(ad_mul(ad_sin(x[i]), x[(i + 1) % n]), sz_a(i)));
    return s;
}

static void sz_F(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)ctx;
    for (size_t j = 0; j < m; j++)
        y[j] = ad_mul(x[j % n], x[(j + 1) % n]);
}

static void sz_grad_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    ad_real fx;
    (void)m;
    *(ad_status *)ctx = ad_gradient_r(sz_f, NULL, n, x, &fx, y);
}

static void sz_hess(size_t n, const double *x, double *H)
{
    memset(H, 0, n * n * sizeof *H);
    for (size_t i = 0; i < n; i++) {
        size_t j = (i + 1) % n;
        double a = sz_a(i);
        if (j == i) {
            H[i * n + i] += a * (2 * cos(x[i]) - sin(x[i]) * x[i]);
        } else {
            H[i * n + i] -= a * sin(x[i]) * x[j];
            H[i * n + j] += a * cos(x[i]);
            H[j * n + i] += a * cos(x[i]);
        }
    }
}

static void test_sizes(void **state)
{
    static const size_t ns[] = {1, 2, 3, 16, 17, 31, 32, 33, 63, 64, 65, SZ_MAX};
    static const size_t ms[] = {1, 15, 16, 17, 40};
    (void)state;
    double x[SZ_MAX], v[SZ_MAX], g[SZ_MAX], *H = dalloc(SZ_MAX * SZ_MAX),
           *J = dalloc(SZ_MAX * SZ_MAX), y[SZ_MAX], jv[SZ_MAX], fx;
    ad_real xr[SZ_MAX], vr[SZ_MAX], gr[SZ_MAX], yr[SZ_MAX], jvr[SZ_MAX], fr;
    for (size_t i = 0; i < SZ_MAX; i++) {
        x[i] = sz_x(i), v[i] = 1.0 - 0.03 * (double)i;
        xr[i] = ad_const(x[i]), vr[i] = ad_const(v[i]);
    }
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
        size_t n = ns[a];
        assert_ok(ad_gradient(sz_f, NULL, n, x, &fx, g));
        assert_ok(ad_gradient_r(sz_f, NULL, n, xr, &fr, gr));
        expect_constants(&fr, 1, &fx, "fx outside, by size");
        expect_constants(gr, n, g, "grad outside, by size");
        for (size_t b = 0; b < sizeof ms / sizeof ms[0]; b++) {
            size_t m = ms[b];
            assert_ok(ad_jvp(sz_F, NULL, n, x, v, m, y, jv));
            assert_ok(ad_jvp_r(sz_F, NULL, n, xr, vr, m, yr, jvr));
            expect_constants(yr, m, y, "y outside, by size");
            expect_constants(jvr, m, jv, "jv outside, by size");
        }
        ad_status st = AD_EINVAL;
        double *want = dalloc(n * n);
        assert_ok(ad_jacobian(sz_grad_fn, &st, n, x, n, y, J));
        assert_ok(st);
        vec_near("gradient by size", y, g, n, 1e-14, 0.0);
        sz_hess(n, x, want);
        vec_near("Hessian by size", J, want, n * n, RTOL, 0.0);
        free(want);
    }
    free(H);
    free(J);
}

/* ---- x is read before f is called (docs/api.md, ad_gradient_r,
 * "Pointers"): f may reuse the caller's array ---- */

typedef struct scratch_ctx {
    ad_real *work;  /* the caller's array, which f overwrites */
    ad_status st;
} scratch_ctx;

static ad_real overwrites_work(const ad_real *x, size_t n, void *ctx)
{
    scratch_ctx *c = ctx;
    for (size_t i = 0; i < n; i++)
        c->work[i] = ad_const(-7.0);
    return ad_mul(ad_mul(x[0], x[0]), x[1]);
}

static ad_real outer_with_work(const ad_real *x, size_t n, void *ctx)
{
    scratch_ctx *c = ctx;
    ad_real work[2] = {ad_mul(x[0], 1.0), ad_mul(x[1], 1.0)}, fx, g[2];
    c->work = work;
    c->st = ad_gradient_r(overwrites_work, c, n, work, &fx, g);
    return ad_add(ad_mul(g[0], 0.5), g[1]);  /* x0 x1 + x0^2 */
}

static void test_x_read_before_f(void **state)
{
    (void)state;
    const double x[2] = {1.5, -0.5};
    double fx, g[2];
    scratch_ctx c = {NULL, AD_EINVAL};
    assert_ok(ad_gradient(outer_with_work, &c, 2, x, &fx, g));
    assert_ok(c.st);
    assert_near(fx, x[0] * x[1] + x[0] * x[0], 1e-15, 0.0);
    assert_near(g[0], x[1] + 2 * x[0], 1e-15, 0.0);
    assert_near(g[1], x[0], 1e-15, 0.0);
}

/* After the tests that change thread settings: the defaults back, even
 * when the test failed half-way. */
static int reset_settings(void **state)
{
    (void)state;
    ad_test_fail_alloc_after(-1);
    ad_set_tape_limit(0);
    ad_set_checks(0);
    ad_set_sum_chunk_bytes(0);
    return 0;
}

#define UNARY_TEST(op, ...) \
    {.name = "nested derivatives of " #op, .test_func = test_unary, .initial_state = (void *)&unary_##op},
#define BINARY_TEST(op, ...) \
    {.name = "nested derivatives of " #op, .test_func = test_binary, .initial_state = (void *)&binary_##op},

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_programs),
        cmocka_unit_test(test_oracles),
        cmocka_unit_test(test_enclosed_by_gradient),
        cmocka_unit_test(test_enclosed_by_jvp),
        cmocka_unit_test(test_enclosed_by_vjp),
        cmocka_unit_test(test_enclosed_by_jacobian),
        cmocka_unit_test(test_enclosed_by_linearize),
        cmocka_unit_test(test_enclosed_by_hvp),
        cmocka_unit_test(test_enclosed_by_hvps),
        cmocka_unit_test(test_enclosed_by_hessian),
        cmocka_unit_test(test_enclosed_by_sparse_jacobian),
        cmocka_unit_test(test_enclosed_by_sparse_hessian),
        cmocka_unit_test_teardown(test_enclosed_by_gradient_sum, reset_settings),
        cmocka_unit_test(test_enclosed_by_checkpointed_loop),
        cmocka_unit_test(test_depth_gradient),
        cmocka_unit_test(test_depth_hessian),
        cmocka_unit_test(test_third_derivatives),
        UNARY_OPS(UNARY_TEST)
        BINARY_OPS(BINARY_TEST)
        cmocka_unit_test(test_primitives),
        cmocka_unit_test(test_prod_closed_form),
        cmocka_unit_test(test_reductions_closed_form),
        cmocka_unit_test(test_perturbation_confusion),
        cmocka_unit_test(test_foreign_through_ctx),
        cmocka_unit_test(test_foreign_leaked_inner_value),
        cmocka_unit_test(test_foreign_other_levels),
        cmocka_unit_test(test_outside_recording),
        cmocka_unit_test(test_edge_values),
        cmocka_unit_test(test_unreached_records),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_unsupported_inside),
        cmocka_unit_test_teardown(test_tape_limit, reset_settings),
        cmocka_unit_test(test_nesting_limit),
        cmocka_unit_test_teardown(test_checks, reset_settings),
        cmocka_unit_test(test_trivial_inner),
        cmocka_unit_test(test_active_directions),
        cmocka_unit_test(test_long_nary_records),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_x_read_before_f),
        cmocka_unit_test(test_threads),
        cmocka_unit_test_teardown(test_alloc_failure, reset_settings),
    };
    return cmocka_run_group_tests_name("nested", tests, NULL, NULL);
}
