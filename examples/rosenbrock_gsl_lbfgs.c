/* rosenbrock_gsl_lbfgs: extended Rosenbrock in 1000 dimensions, minimised
 * with GSL's vector_bfgs2 (dualrev/gsl.h) and with liblbfgs
 * (dualrev/lbfgs.h), every gradient from dualrev.  Minimum 0 at x = 1. */
#include <math.h>
#include <stdio.h>

#include <dualrev.h>
#include <dualrev/gsl.h>
#include <dualrev/lbfgs.h>

enum { N = 1000 };

static ad_real rosenbrock(const ad_real *x, size_t n, void *ctx)
{
    ad_real s = ad_const(0.0);
    (void)ctx;
    for (size_t i = 0; i + 1 < n; i++) {
        ad_real a = ad_sub(x[i + 1], ad_mul(x[i], x[i])), b = ad_sub(1.0, x[i]);
        s = ad_add(s, ad_add(ad_mul(100.0, ad_mul(a, a)), ad_mul(b, b)));
    }
    return s;
}

static double start(size_t i)
{
    return i % 2 ? 1.0 : -1.2;
}

static int with_gsl(void)
{
    ad_gsl b;
    gsl_multimin_function_fdf F;
    if (ad_gsl_init(&b, rosenbrock, NULL, N) != AD_OK)
        return 1;
    ad_gsl_fill(&F, &b);
    gsl_vector *x = gsl_vector_alloc(N);
    for (size_t i = 0; i < N; i++)
        gsl_vector_set(x, i, start(i));
    gsl_multimin_fdfminimizer *s =
        gsl_multimin_fdfminimizer_alloc(gsl_multimin_fdfminimizer_vector_bfgs2, N);
    gsl_multimin_fdfminimizer_set(s, &F, x, 0.01, 0.1);
    int iter = 0, status = GSL_CONTINUE;
    while (status == GSL_CONTINUE && iter < 20000) {
        iter++;
        if (gsl_multimin_fdfminimizer_iterate(s))
            break;
        status = gsl_multimin_test_gradient(s->gradient, 1e-8);
    }
    double err = 0.0;
    for (size_t i = 0; i < N; i++)
        err = fmax(err, fabs(gsl_vector_get(s->x, i) - 1.0));
    printf("GSL vector_bfgs2: %d iterations, f = %.3e, max |x - 1| = %.1e, dualrev %s\n", iter,
           s->f, err, ad_strerror(b.status));
    int bad = b.status != AD_OK || err > 1e-5;
    gsl_multimin_fdfminimizer_free(s);
    gsl_vector_free(x);
    ad_gsl_free(&b);
    return bad;
}

static int with_lbfgs(void)
{
    lbfgsfloatval_t *x = lbfgs_malloc(N), fx;
    lbfgs_parameter_t param;
    if (!x)
        return 1;
    for (size_t i = 0; i < N; i++)
        x[i] = start(i);
    lbfgs_parameter_init(&param);
    param.epsilon = 1e-10;
    param.max_iterations = 20000;
    ad_lbfgs b = ad_lbfgs_of(rosenbrock, NULL);
    int ret;
    ad_status s = ad_lbfgs_minimize(N, x, &fx, &b, &param, &ret);
    double err = 0.0;
    for (size_t i = 0; i < N; i++)
        err = fmax(err, fabs(x[i] - 1.0));
    printf("liblbfgs: code %d, %lu gradients, f = %.3e, max |x - 1| = %.1e, dualrev %s\n", ret,
           b.evaluations, fx, err, ad_strerror(s));
    lbfgs_free(x);
    return s != AD_OK || err > 1e-5;
}

int main(void)
{
    gsl_set_error_handler_off();
    return with_gsl() | with_lbfgs();
}
