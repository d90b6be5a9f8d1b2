/* Newton's method at n = 100 000 with the exact sparse Hessian
 * (ad_sparse_hessian) and a sparse Cholesky solve (CHOLMOD, through
 * dualrev/cholmod.h).
 *
 * The energy of a discretised 1-D phase field (a double well with
 * stretching and bending terms and a nonlinear coupling):
 *   E(u) = sum_i 1/4 (u_i^2 - 1)^2 - f_i u_i
 *        + sum_i kappa/2 (u_{i+1} - u_i)^2 + eps log cosh(u_{i+1} - u_i)
 *        + sum_i gamma/2 (u_{i+1} - 2 u_i + u_{i-1})^2,
 * whose Hessian is pentadiagonal and, where u is near 0, indefinite.
 * The structure is found once (ad_sparse_hessian) and CHOLMOD's analysis
 * made once (ad_cholmod_analyze); each step writes the values at the new
 * point into it (ad_sparse_hessian_values), factors H + shift I with the
 * least shift that makes it positive definite (ad_cholmod_newton: 0 near a
 * minimum, so that the last steps are Newton's own) and takes a
 * backtracking (Armijo) line search along d = -(H + shift I)^-1 g.
 *
 *   newton_sparse [N]
 *
 * Fails (exit 1) unless the gradient falls below 1e-9 (max norm) within
 * 100 steps, the last two steps undamped, and the Hessian at the end is
 * positive definite (a minimum). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dualrev.h>
#include <dualrev/cholmod.h>

static const double kappa = 0.1, eps = 0.05, gamma_ = 0.05;

static double load(size_t i)
{
    return 0.6 + 0.3 * sin(2.0 * 3.141592653589793 * (double)i / 5000.0);
}

static ad_real energy(const ad_real *u, size_t n, void *ctx)
{
    (void)ctx;
    ad_real e = ad_const(0.0);
    for (size_t i = 0; i < n; i++) {
        ad_real w = ad_sub(ad_mul(u[i], u[i]), 1.0);
        e = ad_add(e, ad_sub(ad_mul(0.25, ad_mul(w, w)), ad_mul(load(i), u[i])));
        if (i + 1 < n) {
            ad_real d = ad_sub(u[i + 1], u[i]);
            e = ad_add(e, ad_add(ad_mul(0.5 * kappa, ad_mul(d, d)),
                                 ad_mul(eps, ad_log(ad_cosh(d)))));
        }
        if (i > 0 && i + 1 < n) {
            ad_real c = ad_add(ad_sub(u[i + 1], ad_mul(2.0, u[i])), u[i - 1]);
            e = ad_add(e, ad_mul(0.5 * gamma_, ad_mul(c, c)));
        }
    }
    return e;
}

static double seconds(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double max_abs(const double *v, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(v[i]));
    return m;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)strtoul(argv[1], NULL, 10) : 100000;
    if (n < 3)
        return 1;
    double *u = malloc(n * sizeof *u), *g = malloc(n * sizeof *g), *d = malloc(n * sizeof *d);
    double *ut = malloc(n * sizeof *ut), *gt = malloc(n * sizeof *gt);
    if (!u || !g || !d || !ut || !gt)
        return 1;
    for (size_t i = 0; i < n; i++)
        u[i] = 0.1 * sin(0.37 * (double)i);  /* near 0: the Hessian is indefinite here */
    double t0 = seconds(), t_hess = 0.0, t_solve = 0.0, fx, ft, shift = 0.0;
    ad_csr H;
    ad_cholmod S;
    ad_status s = ad_sparse_hessian(energy, NULL, n, u, &fx, g, &H);
    if (s != AD_OK) {
        fprintf(stderr, "ad_sparse_hessian: %s\n", ad_strerror(s));
        return 1;
    }
    t_hess += seconds() - t0;
    double t1 = seconds();
    s = ad_cholmod_analyze(&S, &H);
    t_solve += seconds() - t1;
    if (s != AD_OK) {
        fprintf(stderr, "ad_cholmod_analyze: %s\n", ad_strerror(s));
        ad_csr_free(&H);
        return 1;
    }
    printf("n = %zu, %zu Hessian entries in the lower triangle\n", n, H.nnz);
    int step, damped_last = 0, ok = 0;
    for (step = 0; step < 100; step++) {
        if (step) {
            double th = seconds();
            s = ad_sparse_hessian_values(energy, NULL, n, u, &fx, g, &H);
            t_hess += seconds() - th;
            if (s != AD_OK) {
                fprintf(stderr, "ad_sparse_hessian_values: %s\n", ad_strerror(s));
                break;
            }
        }
        double gn = max_abs(g, n);
        printf("step %2d  E = %.15e  |g| = %.3e  shift = %.3g\n", step, fx, gn, shift);
        if (gn < 1e-9) {
            ok = 1;
            break;
        }
        double ts = seconds();
        s = ad_cholmod_newton(&S, &H, g, d, &shift);
        t_solve += seconds() - ts;
        if (s != AD_OK) {
            fprintf(stderr, "ad_cholmod_newton: %s\n", ad_strerror(s));
            break;
        }
        damped_last = (damped_last << 1 | (shift > 0.0)) & 3;
        double slope = 0.0, t = 1.0;
        for (size_t i = 0; i < n; i++)
            slope += g[i] * d[i];
        for (;; t *= 0.5) {  /* Armijo backtracking on the value alone */
            for (size_t i = 0; i < n; i++)
                ut[i] = u[i] + t * d[i];
            s = ad_evaluate(energy, NULL, n, ut, &ft);
            if (s != AD_OK || ft <= fx + 1e-4 * t * slope || t < 1e-10)
                break;
        }
        if (s != AD_OK) {
            fprintf(stderr, "ad_evaluate: %s\n", ad_strerror(s));
            break;
        }
        memcpy(u, ut, n * sizeof *u);
    }
    /* a minimum: H positive definite without a shift */
    int posdef = ok && ad_cholmod_factor(&S, &H, 0.0) == AD_OK;
    double total = seconds() - t0;
    printf("%s after %d steps in %.2f s (Hessians %.2f s, CHOLMOD %.2f s, %lu factorisations); "
           "the last two steps %s, the Hessian at the end %s\n",
           ok ? "converged" : "NOT converged", step, total, t_hess, t_solve, S.factorizations,
           damped_last ? "damped" : "undamped", posdef ? "positive definite" : "NOT positive definite");
    ad_cholmod_free(&S);
    ad_csr_free(&H);
    free(u), free(g), free(d), free(ut), free(gt);
    return ok && posdef && !damped_last ? 0 : 1;
}
