/* dualrev: the second-order recording mode (ad_hvp, ad_hessian): the second
 * partials of the elementary operations, kept beside each record.
 *
 * Computed in the slow path from the operation and its arguments' values,
 * so that first-order recordings never pay for them.  For one-argument
 * operations only aa is used; y is then the operation's constant.  Where a
 * first partial follows a convention (docs/conventions.md), the second
 * follows it too: 0 where the first is constant around the point.
 * Called from the tape's slow path, as the mode's hook. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "second.h"
#include "special.h"

#define LN2 0.693147180559945309417232121458176568
#define LN10 2.30258509299404568401799145468436421

static ad_aux one(double aa)
{
    ad_aux h = {aa, 0.0, 0.0};
    return h;
}

static ad_aux two(double aa, double ab, double bb)
{
    ad_aux h = {aa, ab, bb};
    return h;
}

/* pow(a, b) = v: d/da = b a^(b-1), d/db = log(a) v; conventions at b = 0
 * (d/da = 0 for every a) and a = 0 (d/db = 0 for every b) carry over, and
 * d2/da2 is 0 wherever d/da is constant in a (b = 0 or 1, where a^(b-2)
 * may be Inf).  Where a power underflows to 0 its product is 0, not
 * Inf x 0 = NaN: b ((b - 1) a^(b-2)), as b (b - 1) overflows for |b| >
 * 1.3e154, and a^(b-1) (1 + b log a) only where a^(b-1) is not 0, as
 * b log a overflows for |b| > 2.4e305. */
static ad_aux pow2(double a, double b, double v)
{
    double aa = b == 0.0 || b == 1.0 ? 0.0 : b * ((b - 1.0) * pow(a, b - 2.0));
    double p = pow(a, b - 1.0);
    double ab = a == 0.0 || p == 0.0 ? 0.0 : p * (1.0 + b * log(a));
    double bb = a == 0.0 ? 0.0 : log(a) * log(a) * v;
    return two(aa, ab, bb);
}

/* atan2(a, b): wa = b / r^2, wb = -a / r^2 (r^2 = a^2 + b^2), and the
 * second partials -2ab / r^4, (a^2 - b^2) / r^4, 2ab / r^4 are formed from
 * them, as r^4 would overflow: 2 wa wb and (wb - wa)(wb + wa).  Where a
 * first partial is above 2^500 (both coordinates below 2^-500; 1 / 1e-310
 * even overflows, and Inf x 0 was NaN), from the partials at (a, b) 2^600,
 * then times 2^600 twice: H is homogeneous of degree -2.  NaN at the
 * origin and at two infinite coordinates, 0 at one (the limit): from the
 * first partials, NaN and 0 there. */
static ad_aux atan2_2(double a, double b, double wa, double wb)
{
    double s = 1.0;
    if (fabs(wa) > 0x1p500 || fabs(wb) > 0x1p500) {
        s = 0x1p600;
        ad__atan2_partials(a * s, b * s, &wa, &wb);
    }
    double aa = 2.0 * (wa * wb) * s * s;
    return two(aa, (wb - wa) * (wb + wa) * s * s, -aa);
}

/* hypot(a, b) = h: wa = a / h, wb = b / h, and the second partials b^2 / h^3,
 * -ab / h^3, a^2 / h^3 are (wb^2, -wa wb, wa^2) / h.  Where h is not a
 * normal number, with h taken at (a, b) s, s = ad__hypot_scale(h), as the
 * first partials were (ops.h); H is homogeneous of degree -1, so the
 * numerators are multiplied by s.
 * Convention: 0 at the origin, as fabs''; at an infinite argument the
 * partials' limits give 0. */
static ad_aux hypot2(double a, double b, double v, double wa, double wb)
{
    if (v == 0.0)
        return two(0.0, 0.0, 0.0);
    double s = isfinite(a) && isfinite(b) ? ad__hypot_scale(v) : 1.0;
    double h = s == 1.0 ? v : hypot(a * s, b * s);
    return two(wb * wb * s / h, -wa * wb * s / h, wa * wa * s / h);
}

static ad_aux binary(int op, double a, double b, double v, double wa, double wb)
{
    switch (op) {
    case AD__OP_MUL:
        return two(0.0, 1.0, 0.0);
    case AD__OP_DIV:  /* wa = 1/b, wb = -a/b^2; 2a/b^3 as -2 (wb / b): no Inf x 0 at a = 0 */
        return two(0.0, -wa * wa, -2.0 * (wb / b));
    case AD__OP_POW:
        return pow2(a, b, v);
    case AD__OP_ATAN2:
        return atan2_2(a, b, wa, wb);
    case AD__OP_HYPOT:
        return hypot2(a, b, v, wa, wb);
    }
    return two(0.0, 0.0, 0.0);
}

static ad_aux second_partials(int op, double x, double y, double v, double wa,
                                        double wb)
{
    switch (op) {
    case AD__OP_LINEAR: return two(0.0, 0.0, 0.0);
    case AD__OP_POW_RD: return one(pow2(x, y, v).aa);   /* x^y, y constant */
    case AD__OP_POW_DR: return one(pow2(y, x, v).bb);   /* y^x, y constant */
    /* -1/(4 x^1.5), -2/(9 x^(5/3)); convention: -Inf at 0 and -0 */
    case AD__OP_SQRT: return one(-0.5 * wa / fabs(x));
    case AD__OP_CBRT: return one(-2.0 * wa / (3.0 * x + 0.0));
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
    /* x wa first: 2 x overflows for |x| > 9e307, where wa is 0 */
    case AD__OP_ATAN: return one(-2.0 * (x * wa) * wa);
    case AD__OP_SINH: return one(v);
    case AD__OP_COSH: return one(v);
    case AD__OP_TANH: return one(-2.0 * v * wa);
    case AD__OP_ASINH: return one(-x * wa * wa * wa);
    case AD__OP_ACOSH: return one(-x * wa * wa * wa);
    case AD__OP_ATANH: return one(2.0 * x * wa * wa);
    case AD__OP_ERF: return one(-2.0 * (x * wa));
    case AD__OP_ERFC: return one(-2.0 * (x * wa));
    case AD__OP_LGAMMA: return one(ad_trigamma(x));
    case AD__OP_TGAMMA: {  /* Gamma (psi^2 + psi') */
        double psi = ad_digamma(x);
        return one(v * (psi * psi + ad_trigamma(x)));
    }
    }
    return binary(op, x, y, v, wa, wb);
}

/* A second partial the operation has at every point, written -0 where it
 * is 0 at this one; one it never has, +0.  The sparse Hessian takes the
 * sign bit for structure (an interaction that is 0 only here is still one);
 * every other reader takes -0 as 0. */
static double mark(int has, double h)
{
    return !has ? 0.0 : h == 0.0 ? -0.0 : h;
}

/* Which second partials an operation of two arguments, or of one (then
 * aa), has: a power of a constant exponent 0 or 1, or of base 1, has none. */
static ad_aux structure(int op, double y, ad_aux h)
{
    int aa = 1, ab = 0, bb = 0;
    if (op == AD__OP_DIV)
        aa = 0, ab = bb = 1;
    else if (op == AD__OP_POW || op == AD__OP_ATAN2 || op == AD__OP_HYPOT)
        ab = bb = 1;
    else if (op == AD__OP_POW_RD)
        aa = y != 0.0 && y != 1.0;
    else if (op == AD__OP_POW_DR)
        aa = y != 1.0 && y != 0.0;
    h.aa = mark(aa, h.aa);
    h.ab = mark(ab, h.ab);
    h.bb = mark(bb, h.bb);
    return h;
}

/* ---- second partials outside the double range ----
 *
 * A second partial can leave the range where the terms it makes do not:
 * log''(x) = -1/x^2 underflows for x > 1.3e154, where the tangent of x
 * may be as large as x.  Where a partial the operation has (structure())
 * comes out 0, subnormal or infinite from finite arguments, it is taken
 * again in long double, whose range is wider.  If the exact value is a
 * normal double after all (an intermediate of the formula left the
 * range: pow's a^(b-2)), it is kept.  If it is finite, nonzero and
 * outside the normal doubles, a one-argument record
 * keeps it as m 2^e (second.h, ad_aux_scaled), and the sweeps form
 * their terms from that; a two-argument record has no room for it and
 * keeps NaN, and the recording says so (AD_SECOND_RANGE): a result
 * that takes it is NaN, and the driver fails with AD_EOVERFLOW. */

#define SQRT_PI_L 1.772453850905516027298167483341145183L

/* The exact second partial `which` (0: aa, 1: ab, 2: bb) of op, in long
 * double, where it can leave the double range; NaN where not taken. */
static long double exact_l(int op, int which, long double x, long double y)
{
    switch (op) {
    case AD__OP_POW:  /* x^y, x > 0 */
        if (!(x > 0.0L))
            break;
        return which == 0   ? y * (y - 1.0L) * powl(x, y - 2.0L)
               : which == 1 ? powl(x, y - 1.0L) * (1.0L + y * logl(x))
                            : logl(x) * logl(x) * powl(x, y);
    case AD__OP_POW_RD: return x > 0.0L ? y * (y - 1.0L) * powl(x, y - 2.0L) : NAN;
    case AD__OP_POW_DR: return y > 0.0L ? logl(y) * logl(y) * powl(y, x) : NAN;
    case AD__OP_DIV:
        return which == 1 ? -1.0L / (y * y) : which == 2 ? 2.0L * x / (y * y * y) : NAN;
    case AD__OP_SQRT: return x > 0.0L ? -0.25L / (x * sqrtl(x)) : NAN;
    case AD__OP_CBRT: return x != 0.0L ? -2.0L / (9.0L * x * cbrtl(x) * cbrtl(x)) : NAN;
    case AD__OP_LOG: return -1.0L / (x * x);
    case AD__OP_LOG1P: return -1.0L / ((1.0L + x) * (1.0L + x));
    case AD__OP_LOG2: return -1.0L / (x * x * (long double)LN2);
    case AD__OP_LOG10: return -1.0L / (x * x * (long double)LN10);
    case AD__OP_ATAN: return -2.0L * x / ((1.0L + x * x) * (1.0L + x * x));
    case AD__OP_TANH: return -2.0L * tanhl(x) / (coshl(x) * coshl(x));
    case AD__OP_ASINH: return -x / ((1.0L + x * x) * sqrtl(1.0L + x * x));
    case AD__OP_ACOSH: return -x / ((x * x - 1.0L) * sqrtl(x * x - 1.0L));
    case AD__OP_ERF: return -4.0L * x / SQRT_PI_L * expl(-x * x);
    case AD__OP_ERFC: return 4.0L * x / SQRT_PI_L * expl(-x * x);
    }
    return NAN;
}

/* Whether the double h may have left the range it should be in. */
static int suspect(double h)
{
    uint64_t bits;
    memcpy(&bits, &h, sizeof bits);
    return bits != 0 && (fabs(h) < DBL_MIN || isinf(h));  /* +0: not a partial at all */
}

/* Whether exact, the long double value, is a finite nonzero number that
 * the normal doubles do not hold. */
static int outside(long double exact)
{
    long double m = fabsl(exact);
    return m > 0.0L && m <= LDBL_MAX && (m < (long double)DBL_MIN || m > (long double)DBL_MAX);
}

static int in_normal(long double exact)
{
    long double m = fabsl(exact);
    return m >= (long double)DBL_MIN && m <= (long double)DBL_MAX;
}

/* h's partials out of range kept as above; has_b: the record has a
 * second argument (else only aa is a partial). */
static ad_aux in_range(ad_tape *t, int op, double x, double y, int has_b, ad_aux h)
{
    double *part[3] = {&h.aa, &h.ab, &h.bb};
    if (!isfinite(x) || !isfinite(y))
        return h;
    for (int k = 0; k < (has_b ? 3 : 1); k++) {
        if (!suspect(*part[k]))
            continue;
        long double e = exact_l(op, k, x, y);
        if (in_normal(e)) {  /* a formula's intermediate left the range, not the partial */
            *part[k] = (double)e;
            continue;
        }
        if (!outside(e))
            continue;
        if (!has_b) {
            int exp2;
            long double m = frexpl(e, &exp2);
            return two(NAN, (double)m, (double)exp2);
        }
        *part[k] = NAN;
        t->traits |= AD_SECOND_RANGE;
    }
    return h;
}

/* take's curved operations: the second partials computed, marked for
 * structure, zero for a constant argument, and kept in range. */
static AD_NOINLINE uint32_t take_curved(ad_tape *t, int i, uint32_t a, double wa, uint32_t b,
                                        double wb, int op, double x, double y, double v,
                                        ad_aux *side)
{
    ad_aux h = structure(op, y, second_partials(op, x, y, v, wa, wb));
    /* A constant's tangent is 0, but 0 x Inf would still make NaN. */
    if (!a)
        h.aa = h.ab = 0.0;
    if (!b)
        h.ab = h.bb = 0.0;
    *side = a || b ? in_range(t, op, x, y, b != 0, h) : h;
    return ad_tape_pass(t, i, a, wa, b, wb, op, x, y, v);
}

/* The hook: the record's second partials into its side entry.  Not a
 * running pointer: n-ary slots advance the cursor without the hooks.
 * Linear records and products, the commonest, are written here, so that
 * this path saves no registers. */
static uint32_t take(ad_tape *t, int i, uint32_t a, double wa, uint32_t b, double wb, int op,
                     double x, double y, double v)
{
    ad_aux *side = ad_tape_side_here(t, i);
    ad__ahead((const ad__record *)(void *)side);
    if (AD__UNLIKELY(op > AD__OP_MUL))
        return take_curved(t, i, a, wa, b, wb, op, x, y, v, side);
    side->aa = 0.0;
    side->ab = op == AD__OP_MUL && a && b ? 1.0 : 0.0;
    side->bb = 0.0;
    return ad_tape_pass(t, i, a, wa, b, wb, op, x, y, v);
}

/* The writer of a recording whose only mode this is (tape.h, ad_mode):
 * every record comes here from ad__push_keys, and one whose keys are the
 * recording's and for which there is room is taken without the hook
 * chain. */
static uint32_t keyed(ad__cursor *c, uint64_t ka, double wa, uint64_t kb, double wb, int op,
                      double x, double y, double v)
{
    ad_tape *t = (ad_tape *)c;
    uint64_t key0 = c->key0, next = c->next;
    if (AD__UNLIKELY((ka - key0 >= next) | (kb - key0 >= next)) ||
        AD__UNLIKELY((uintptr_t)c->cur >= (uintptr_t)t->slow_end))
        return ad_tape_keyed_rare(c, ka, wa, kb, wb, op, x, y, v);
    return take(t, 0, (uint32_t)(ka - key0), wa, (uint32_t)(kb - key0), wb, op, x, y, v);
}

_Static_assert(sizeof(ad_aux) <= sizeof(ad__record), "a side entry is at most a record");
const ad_mode ad_second_mode = {take, keyed, 0};
