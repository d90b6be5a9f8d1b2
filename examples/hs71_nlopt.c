/* hs71_nlopt: Hock-Schittkowski problem 71 with NLopt's SLSQP, every
 * gradient and constraint Jacobian from dualrev (dualrev/nlopt.h).
 *
 *   minimise x0 x3 (x0 + x1 + x2) + x2
 *   subject to x0 x1 x2 x3 >= 25, x0^2 + x1^2 + x2^2 + x3^2 = 40,
 *              1 <= x <= 5, from (1, 5, 5, 1); optimum 17.0140173. */
#include <math.h>
#include <stdio.h>

#include <dualrev.h>
#include <dualrev/nlopt.h>

static ad_real objective(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_add(ad_mul(ad_mul(x[0], x[3]), ad_add(ad_add(x[0], x[1]), x[2])), x[2]);
}

/* NLopt's constraints are c(x) <= 0 and h(x) = 0. */
static void product(const ad_real *x, size_t n, ad_real *c, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    c[0] = ad_sub(25.0, ad_mul(ad_mul(x[0], x[1]), ad_mul(x[2], x[3])));
}

static ad_real sphere(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_sub(ad_add(ad_add(ad_mul(x[0], x[0]), ad_mul(x[1], x[1])),
                         ad_add(ad_mul(x[2], x[2]), ad_mul(x[3], x[3]))),
                  40.0);
}

int main(void)
{
    double x[4] = {1, 5, 5, 1}, lo[4] = {1, 1, 1, 1}, hi[4] = {5, 5, 5, 5}, f;
    const double tol[1] = {1e-10};
    nlopt_opt opt = nlopt_create(NLOPT_LD_SLSQP, 4);
    ad_nlopt obj, ineq, eq;
    if (ad_nlopt_init(&obj, opt, objective, NULL, NULL, 4, 0) != AD_OK ||
        ad_nlopt_init(&ineq, opt, NULL, product, NULL, 4, 1) != AD_OK ||
        ad_nlopt_init(&eq, opt, sphere, NULL, NULL, 4, 0) != AD_OK)
        return 1;
    nlopt_set_lower_bounds(opt, lo);
    nlopt_set_upper_bounds(opt, hi);
    nlopt_set_min_objective(opt, ad_nlopt_scalar, &obj);
    nlopt_add_inequality_mconstraint(opt, 1, ad_nlopt_vector, &ineq, tol);
    nlopt_add_equality_constraint(opt, ad_nlopt_scalar, &eq, 1e-10);
    nlopt_set_xtol_rel(opt, 1e-12);
    nlopt_result r = nlopt_optimize(opt, x, &f);
    ad_status s = obj.status != AD_OK ? obj.status : ineq.status != AD_OK ? ineq.status : eq.status;
    printf("NLopt SLSQP: result %d, dualrev %s\n", (int)r, ad_strerror(s));
    printf("f = %.10f at (%.6f, %.6f, %.6f, %.6f); known optimum 17.0140173\n", f, x[0], x[1],
           x[2], x[3]);
    ad_nlopt_free(&obj), ad_nlopt_free(&ineq), ad_nlopt_free(&eq);
    nlopt_destroy(opt);
    return r > 0 && s == AD_OK && fabs(f - 17.0140173) < 1e-6 ? 0 : 1;
}
