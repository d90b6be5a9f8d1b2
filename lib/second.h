/* dualrev internal: second partials of the elementary operations, for second-order
 * recordings (ad_hvp, ad_hessian).
 *
 * Computed in the slow path from the operation and its arguments' values,
 * so that first-order recordings never pay for them.  For one-argument
 * operations only aa is used; y is then the operation's constant.  Where a
 * first partial follows a convention (docs/conventions.md), the second
 * follows it too: 0 where the first is constant around the point.
 * Inlined into the slow path (tape.c), its only caller. */
#ifndef DUALREV_SECOND_H
#define DUALREV_SECOND_H

#include <math.h>

#include "tape.h"

/* special.c */
AD_HIDDEN double ad_digamma(double x);
AD_HIDDEN double ad_trigamma(double x);

#define LN2 0.693147180559945309417232121458176568
#define LN10 2.30258509299404568401799145468436421

static inline ad_aux one(double aa)
{
    ad_aux h = {aa, 0.0, 0.0};
    return h;
}

static inline ad_aux two(double aa, double ab, double bb)
{
    ad_aux h = {aa, ab, bb};
    return h;
}

/* pow(a, b) = v: d/da = b a^(b-1), d/db = log(a) v; conventions at b = 0
 * (d/da = 0 for every a) and a = 0 (d/db = 0 for every b) carry over, and
 * d2/da2 is 0 wherever d/da is constant in a (b = 0 or 1). */
static inline ad_aux pow2(double a, double b, double v)
{
    double c = b * (b - 1.0);  /* 0 for b = 0 and b = 1, where a^(b-2) may be Inf */
    double aa = c == 0.0 ? 0.0 : c * pow(a, b - 2.0);
    double ab = a == 0.0 ? 0.0 : pow(a, b - 1.0) * (1.0 + b * log(a));
    double bb = a == 0.0 ? 0.0 : log(a) * log(a) * v;
    return two(aa, ab, bb);
}

static inline ad_aux binary(int op, double a, double b, double v, double wa, double wb)
{
    switch (op) {
    case AD__OP_MUL:
        return two(0.0, 1.0, 0.0);
    case AD__OP_DIV:  /* wa = 1/b, wb = -a/b^2 */
        return two(0.0, -wa * wa, -2.0 * wb * wa);
    case AD__OP_POW:
        return pow2(a, b, v);
    case AD__OP_ATAN2:  /* wa = b/h^2, wb = -a/h^2: from them, as h^4 would overflow */
        return two(2.0 * wa * wb, wb * wb - wa * wa, -2.0 * wa * wb);
    case AD__OP_HYPOT:  /* wa = a/h, wb = b/h; convention: 0 at the origin, as fabs'' */
        if (!(v > 0.0))
            return two(0.0, 0.0, 0.0);
        return two(wb * wb / v, -wa * wb / v, wa * wa / v);
    }
    return two(0.0, 0.0, 0.0);
}

static inline ad_aux ad_second_partials(int op, double x, double y, double v, double wa,
                                        double wb)
{
    switch (op) {
    case AD__OP_LINEAR: return two(0.0, 0.0, 0.0);
    case AD__OP_POW_RD: return one(pow2(x, y, v).aa);   /* x^y, y constant */
    case AD__OP_POW_DR: return one(pow2(y, x, v).bb);   /* y^x, y constant */
    case AD__OP_SQRT: return one(-0.5 * wa / x);        /* -1/(4 x^1.5) */
    case AD__OP_CBRT: return one(-2.0 * wa / (3.0 * x));
    case AD__OP_EXP: return one(v);
    case AD__OP_EXPM1: return one(wa);
    case AD__OP_LOG: return one(-wa * wa);
    case AD__OP_LOG1P: return one(-wa * wa);
    case AD__OP_LOG2: return one(-wa * wa * LN2);
    case AD__OP_LOG10: return one(-wa * wa * LN10);
    case AD__OP_SIN: return one(-v);
    case AD__OP_COS: return one(-v);
    case AD__OP_TAN: return one(2.0 * v * wa);
    case AD__OP_ASIN: return one(x * wa * wa * wa);
    case AD__OP_ACOS: return one(x * wa * wa * wa);
    case AD__OP_ATAN: return one(-2.0 * x * wa * wa);
    case AD__OP_SINH: return one(v);
    case AD__OP_COSH: return one(v);
    case AD__OP_TANH: return one(-2.0 * v * wa);
    case AD__OP_ASINH: return one(-x * wa * wa * wa);
    case AD__OP_ACOSH: return one(-x * wa * wa * wa);
    case AD__OP_ATANH: return one(2.0 * x * wa * wa);
    case AD__OP_ERF: return one(-2.0 * x * wa);
    case AD__OP_ERFC: return one(-2.0 * x * wa);
    case AD__OP_LGAMMA: return one(ad_trigamma(x));
    case AD__OP_TGAMMA: {  /* Gamma (psi^2 + psi') */
        double psi = ad_digamma(x);
        return one(v * (psi * psi + ad_trigamma(x)));
    }
    }
    return binary(op, x, y, v, wa, wb);
}

#endif
