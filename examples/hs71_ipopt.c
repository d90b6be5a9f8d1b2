/* hs71_ipopt: Hock-Schittkowski problem 71 with Ipopt, the constraint
 * Jacobian and the Hessian of the Lagrangian exact and sparse from dualrev
 * (dualrev/ipopt.h).
 *
 *   minimise x0 x3 (x0 + x1 + x2) + x2
 *   subject to 25 <= x0 x1 x2 x3, x0^2 + x1^2 + x2^2 + x3^2 = 40,
 *              1 <= x <= 5, from (1, 5, 5, 1); optimum 17.0140173. */
#include <math.h>
#include <stdio.h>

#include <dualrev.h>
#include <dualrev/ipopt.h>

static ad_real objective(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_add(ad_mul(ad_mul(x[0], x[3]), ad_add(ad_add(x[0], x[1]), x[2])), x[2]);
}

static void constraints(const ad_real *x, size_t n, ad_real *g, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    g[0] = ad_mul(ad_mul(x[0], x[1]), ad_mul(x[2], x[3]));
    g[1] = ad_add(ad_add(ad_mul(x[0], x[0]), ad_mul(x[1], x[1])),
                  ad_add(ad_mul(x[2], x[2]), ad_mul(x[3], x[3])));
}

int main(void)
{
    double x[4] = {1, 5, 5, 1}, f, g[2];
    const double x_l[4] = {1, 1, 1, 1}, x_u[4] = {5, 5, 5, 5};
    const double g_l[2] = {25, 40}, g_u[2] = {2e19, 40};
    ad_ipopt b;
    enum ApplicationReturnStatus app;
    ad_status s = ad_ipopt_init(&b, objective, constraints, NULL, 4, 2, x_l, x_u, g_l, g_u, x);
    if (s != AD_OK) {
        fprintf(stderr, "ad_ipopt_init: %s\n", ad_strerror(s));
        return 1;
    }
    AddIpoptIntOption(b.problem, "print_level", 0);
    AddIpoptStrOption(b.problem, "sb", "yes");
    s = ad_ipopt_solve(&b, x, &f, g, NULL, NULL, NULL, &app);
    printf("Ipopt: status %d in %ld iterations, dualrev %s; Jacobian %zu entries, "
           "Hessian %zu\n", (int)app, b.iterations, ad_strerror(s), b.jac.nnz, b.hess.nnz);
    printf("f = %.10f at (%.6f, %.6f, %.6f, %.6f); known optimum 17.0140173\n", f, x[0], x[1],
           x[2], x[3]);
    ad_ipopt_free(&b);
    return s == AD_OK && app == Solve_Succeeded && fabs(f - 17.0140173) < 1e-6 ? 0 : 1;
}
