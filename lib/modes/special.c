/* dualrev: the gamma functions and their derivative, digamma. */
#define _DEFAULT_SOURCE 1 /* lgamma_r */
#include <math.h>

#include "dualrev.h"
#include "alloc.h"
#include "special.h"

#define PI 3.14159265358979323846264338327950288

/* psi(x) = d/dx log|Gamma(x)|.  Recurrence up to x >= 10, then the
 * asymptotic series to the x^-14 term (next term below 1e-16 there);
 * reflection for negative x.  NaN at the poles 0, -1, -2, ... */
double ad_digamma(double x)
{
    if (x != x || x == -INFINITY)
        return NAN;
    if (x <= 0.0) {
        double k = nearbyint(x);
        if (x == k)
            return NAN;
        /* psi(x) = psi(1 - x) - pi cot(pi x); reduce first, as x - k is exact. */
        return ad_digamma(1.0 - x) - PI / tan(PI * (x - k));
    }
    double acc = 0.0;
    while (x < 10.0) {
        acc -= 1.0 / x;
        x += 1.0;
    }
    double f = 1.0 / (x * x);
    double series = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 -
                    f * (1.0 / 132 - f * (691.0 / 32760 - f * (1.0 / 12)))))));
    return acc + log(x) - 0.5 / x - series;
}

/* psi'(x), the trigamma function: the second derivative of lgamma.  The
 * same plan as digamma: recurrence psi'(x) = psi'(x + 1) + 1/x^2 up to
 * x >= 10, the asymptotic series to the x^-15 term, reflection
 * psi'(x) = pi^2 / sin^2(pi x) - psi'(1 - x) for negative x. */
double ad_trigamma(double x)
{
    if (x != x || x == -INFINITY)
        return NAN;
    if (x <= 0.0) {
        double k = nearbyint(x);
        if (x == k)
            return NAN;
        double s = sin(PI * (x - k));
        return PI * PI / (s * s) - ad_trigamma(1.0 - x);
    }
    double acc = 0.0;
    while (x < 10.0) {
        acc += 1.0 / (x * x);
        x += 1.0;
    }
    double r = 1.0 / x, f = r * r;
    double series = r + 0.5 * f + r * f * (1.0 / 6 - f * (1.0 / 30 - f * (1.0 / 42 - f * (1.0 / 30 -
                    f * (5.0 / 66 - f * (691.0 / 2730 - f * (7.0 / 6)))))));
    return acc + series;
}

double ad_lgamma_d(double x)
{
#ifdef AD_HAVE_LGAMMA_R
    int sign;
    return lgamma_r(x, &sign);
#else
    return lgamma(x);
#endif
}

ad_real ad_lgamma_r(ad_real x)
{
    return ad__rec1(ad_lgamma_d(x.v), x, ad_digamma(x.v), AD__OP_LGAMMA, 0.0);
}

/* convention: at the poles the value is +-Inf or NaN and the partial NaN. */
ad_real ad_tgamma_r(ad_real x)
{
    double v = tgamma(x.v);
    return ad__rec1(v, x, v * ad_digamma(x.v), AD__OP_TGAMMA, 0.0);
}
