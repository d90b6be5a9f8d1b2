/* The README's first snippet, built against an installed dualrev: the
 * gradient of x0 exp(-(x0 + x1)) against its closed form. */
#include <dualrev.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static ad_real f(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real z = ad_add(x[0], x[1]);
    return ad_mul(x[0], ad_exp(ad_neg(z)));
}

int main(void)
{
    double x[2] = {1.0, 2.0}, fx, grad[2];
    ad_status s = ad_gradient(f, NULL, 2, x, &fx, grad);
    if (s != AD_OK) {
        fprintf(stderr, "%s\n", ad_strerror(s));
        return 1;
    }
    /* f = x0 e^-z, df/dx0 = (1 - x0) e^-z, df/dx1 = -x0 e^-z at z = 3 */
    double e = exp(-3.0), want[3] = {e, 0.0, -e};
    int ok = fabs(fx - want[0]) <= 1e-15 && fabs(grad[0] - want[1]) <= 1e-15 &&
             fabs(grad[1] - want[2]) <= 1e-15 && strcmp(ad_version(), DUALREV_VERSION_STRING) == 0;
    printf("%s: f = %.17g, grad = (%.17g, %.17g), library %s, headers %s\n", ok ? "ok" : "FAIL",
           fx, grad[0], grad[1], ad_version(), DUALREV_VERSION_STRING);
    return ok ? 0 : 1;
}
