/* Compiled, never run: the public headers under the strictest warnings
 * (tests/meson.build), with every generic name used the way users use it,
 * so that the macros' expansions are checked as well as the declarations. */
#include <dualrev.h>

ad_real hygiene_objective(const ad_real *x, size_t n, void *ctx);
double hygiene_plain(const double *x, size_t n, void *ctx);

ad_real hygiene_objective(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    ad_real a = x[0], b = n > 1 ? x[1] : x[0];
    float f = 0.5f;
    int k = 3;
    ad_real s = ad_add(ad_add(a, b), ad_add(a, 1.0));
    s = ad_add(s, ad_sub(2, b));
    s = ad_add(s, ad_mul(ad_mul(a, f), ad_div(b, k)));
    s = ad_add(s, ad_div(1.0, a));
    s = ad_add(s, ad_pow(a, b));
    s = ad_add(s, ad_pow(a, 2));
    s = ad_add(s, ad_pow(2.0, b));
    s = ad_add(s, ad_atan2(a, b));
    s = ad_add(s, ad_hypot(a, 1.0));
    s = ad_add(s, ad_fmin(a, b));
    s = ad_add(s, ad_fmax(0, b));
    s = ad_add(s, ad_select_lt(a, b, a, ad_const(1.0)));
    s = ad_add(s, ad_add(ad_select_le(a, b, a, b), ad_select_eq(a, b, b, a)));
    s = ad_add(s, ad_neg(a));
    s = ad_add(s, ad_sqrt(a));
    s = ad_add(s, ad_cbrt(a));
    s = ad_add(s, ad_exp(a));
    s = ad_add(s, ad_expm1(a));
    s = ad_add(s, ad_log(a));
    s = ad_add(s, ad_log1p(a));
    s = ad_add(s, ad_log2(a));
    s = ad_add(s, ad_log10(a));
    s = ad_add(s, ad_sin(a));
    s = ad_add(s, ad_cos(a));
    s = ad_add(s, ad_tan(a));
    s = ad_add(s, ad_asin(a));
    s = ad_add(s, ad_acos(a));
    s = ad_add(s, ad_atan(a));
    s = ad_add(s, ad_sinh(a));
    s = ad_add(s, ad_cosh(a));
    s = ad_add(s, ad_tanh(a));
    s = ad_add(s, ad_asinh(a));
    s = ad_add(s, ad_acosh(a));
    s = ad_add(s, ad_atanh(a));
    s = ad_add(s, ad_fabs(a));
    s = ad_add(s, ad_erf(a));
    s = ad_add(s, ad_erfc(a));
    s = ad_add(s, ad_lgamma(a));
    s = ad_add(s, ad_tgamma(a));
    s = ad_add(s, ad_sum(n, x));
    s = ad_add(s, ad_dot(n, x, x));
    s = ad_add(s, ad_sqnorm(n, x));
    s = ad_add(s, ad_prod(n, x));
    s = ad_add(s, ad_logsumexp(n, x));
    double c[2] = {1.0, 2.0};
    ad_real y[2] = {ad_const(0.0), ad_const(0.0)};
    s = ad_add(s, ad_dot(n < 2 ? n : 2, x, c));
    s = ad_add(s, ad_dot(n < 2 ? n : 2, c, x));
    ad_matvec(1, n < 2 ? n : 2, c, x, y);
    ad_axpy(n < 2 ? n : 2, 2.0, x, y);
    ad_mat M;
    if (n >= 2 && ad_mat_make(1, 2, x, &M) == AD_OK) {
        ad_real q;
        ad_mat_vec(&M, x, y);
        ad_mat_vec(&M, c, y);
        ad_mat_sqnorm(&M, x, &q);
        s = ad_add(s, q);
    }
    if (ad_value(s) < 0.0)
        s = ad_mul(s, AD_CONST(ad_real, -1.0));
    return s;
}

double hygiene_plain(const double *x, size_t n, void *ctx)
{
    (void)ctx;
    double s = ad_add(x[0], 1) + ad_exp(x[0]) + ad_sum(n, x) + ad_dot(n, x, x) + ad_lgamma(x[0]);
    ad_mat M;
    double y[2];
    if (n >= 2 && ad_mat_make(1, 2, x, &M) == AD_OK) {
        ad_mat_vec(&M, x, y);
        double q;
        ad_mat_sqnorm(&M, x, &q);
        s += y[0] + q;
    }
    return s + ad_value(x[0]) + AD_CONST(double, 2.0) + (double)DUALREV_VERSION_NUMBER;
}
