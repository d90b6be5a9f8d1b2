/* shared_source: one function body, compiled for double and for ad_real.
 *
 * dualrev's operations (ad_add, ad_mul, ...) are C11 _Generic macros.  Given
 * ad_real arguments they compute the value and record a step on the tape;
 * given only plain numbers they are ordinary double arithmetic and record
 * nothing.  So a function written with them and a type parameter T can be
 * instantiated twice: a double copy for fast plain evaluation, an ad_real
 * copy for ad_gradient.  The two cannot drift apart, because there is only
 * one source.
 *
 * Here the pattern is a macro that stamps out a function per type;
 * lbfgs_logistic.c shows the other common form, a header included twice. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <dualrev.h>

/* The Rosenbrock function in n dimensions,
 *     f(x) = sum_{i < n-1} 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2,
 * with the signature of an ad_objective so that the ad_real copy can be
 * passed to ad_gradient as it is.
 *
 * Plain double constants (1.0, 100.0) mix freely with T: the mixed ad_real
 * forms treat them as constants.  A T-typed constant is AD_CONST(T, c). */
#define DEFINE_ROSENBROCK(T, name)                                            \
    static T name(const T *x, size_t n, void *ctx)                            \
    {                                                                         \
        (void)ctx;                                                            \
        T sum = AD_CONST(T, 0.0);                                             \
        for (size_t i = 0; i + 1 < n; i++) {                                  \
            T valley = ad_sub(x[i + 1], ad_mul(x[i], x[i]));                  \
            T offset = ad_sub(1.0, x[i]);                                     \
            sum = ad_add(sum, ad_add(ad_mul(100.0, ad_mul(valley, valley)),   \
                                     ad_mul(offset, offset)));                \
        }                                                                     \
        return sum;                                                           \
    }

DEFINE_ROSENBROCK(double, rosenbrock_double)
DEFINE_ROSENBROCK(ad_real, rosenbrock_ad)

/* The gradient worked out by hand, as an independent check.  x_i appears in
 * term i (as x_i) and in term i-1 (as x_{i+1} of that term). */
static double rosenbrock_grad_i(const double *x, size_t n, size_t i)
{
    double g = 0.0;
    if (i + 1 < n)
        g += -400.0 * x[i] * (x[i + 1] - x[i] * x[i]) - 2.0 * (1.0 - x[i]);
    if (i > 0)
        g += 200.0 * (x[i] - x[i - 1] * x[i - 1]);
    return g;
}

enum { N = 1000 };

int main(void)
{
    static double x[N], grad[N];
    /* A point away from the minimum at (1, ..., 1), varied per coordinate so
     * that no two gradient entries are alike. */
    for (size_t i = 0; i < N; i++)
        x[i] = 1.0 + 0.5 * sin((double)i);

    double f_plain = rosenbrock_double(x, N, NULL);

    double f_ad;
    ad_status s = ad_gradient(rosenbrock_ad, NULL, N, x, &f_ad, grad);
    if (s != AD_OK) {
        fprintf(stderr, "ad_gradient failed: %s\n", ad_strerror(s));
        return EXIT_FAILURE;
    }

    printf("Rosenbrock function, n = %d, at x_i = 1 + 0.5 sin(i)\n\n", N);
    printf("f from the double build : %.17g\n", f_plain);
    printf("f from the ad_real build: %.17g  %s\n\n", f_ad,
           f_plain == f_ad ? "(bitwise equal)" : "(MISMATCH)");

    printf("%5s  %24s  %24s\n", "i", "df/dx_i (ad_gradient)", "df/dx_i (closed form)");
    static const size_t shown[] = {0, 1, 2, 3, N / 2, N - 2, N - 1};
    for (size_t k = 0; k < sizeof shown / sizeof shown[0]; k++) {
        size_t i = shown[k];
        printf("%5zu  %24.17g  %24.17g\n", i, grad[i], rosenbrock_grad_i(x, N, i));
    }

    /* Both gradients round differently (the tape sums the same partials in
     * another order), so they agree to rounding, not bit for bit. */
    double max_err = 0.0, max_g = 0.0;
    for (size_t i = 0; i < N; i++) {
        double exact = rosenbrock_grad_i(x, N, i);
        max_err = fmax(max_err, fabs(grad[i] - exact));
        max_g = fmax(max_g, fabs(exact));
    }
    double rel = max_err / max_g;
    int ok = f_plain == f_ad && rel <= 1e-13;
    printf("\nmax |ad_gradient - closed form| over all %d entries: %.3e (%.3e relative to max |g|)\n",
           N, max_err, rel);
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
