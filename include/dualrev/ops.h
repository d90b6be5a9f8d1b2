/* dualrev: elementary operations on ad_real.
 *
 * Included by dualrev.h.  Each operation computes its value and its local
 * partials in the forward pass and records them (Jacobian taping), so the
 * reverse sweep is a stream of multiply-adds and never calls libm.  Use the
 * generic names (ad_mul, ad_sin, ...) from dualrev/generic.h; the suffixed
 * functions below are what they dispatch to: _rr, _rd, _dr, _dd name the
 * argument types (r = ad_real, d = double), _r a unary ad_real operation.
 *
 * Conventions at points where a derivative does not exist are listed in
 * docs/conventions.md; each is marked "convention" where it is applied. */
#ifndef DUALREV_OPS_H
#define DUALREV_OPS_H

#include <float.h>
#include <math.h>

AD__EXTERN_C_BEGIN

#define AD__LOG2E 1.44269504088896340735992468100189214
#define AD__LOG10E 0.434294481903251827651128918916605082
#define AD__2_SQRTPI 1.12837916709551257389615890312154517

/* Operations whose arguments are all constants record nothing.  op and the
 * values are for second-order recordings only (record.h); c is a
 * one-argument operation's constant (pow's exponent or base).  The
 * arguments are checked against the recording before anything is written
 * (record.h, ad__push_keys). */
static inline ad_real ad__rec1(double v, ad_real a, double wa, int op, double c)
{
    if (!a.id)
        return ad__real_of(v, 0);
    ad__cursor *cur = ad__active;
    uint64_t key0 = cur->key0;
    return ad__real_of(v, key0 + ad__push_keys(cur, ad__key(a), wa, key0, 0.0, op, a.v, c, v));
}

/* A constant argument is passed as key0, the recording's ID 0 (the sink),
 * whatever its tag; in the forms with a double (ad_add_rd, ...) the
 * compiler knows which one that is. */
static inline ad_real ad__rec2(double v, ad_real a, double wa, ad_real b, double wb, int op)
{
    ad__cursor *cur;
    uint64_t key0;
    if (AD__LIKELY(a.id && b.id)) {
        cur = ad__active;
        key0 = cur->key0;
        return ad__real_of(v, key0 + ad__push_keys(cur, ad__key(a), wa, ad__key(b), wb, op, a.v,
                                                   b.v, v));
    }
    if (!(a.id | b.id))
        return ad__real_of(v, 0);
    cur = ad__active;
    key0 = cur->key0;
    return ad__real_of(v, key0 + ad__push_keys(cur, a.id ? ad__key(a) : key0, wa,
                                               b.id ? ad__key(b) : key0, wb, op, a.v, b.v, v));
}

/* A partial that would be finite although the value is NaN (log of a
 * negative number, say) is made NaN, so that a NaN primal reaches the
 * gradient entries that depend on it. */
static inline double ad__nan_with(double v, double w)
{
    return v != v ? v : w;
}

/* ---- binary operations: the ad_real x ad_real forms ---- */

/* x + c, c + x and x - c have x's backpropagator (partial 1), so they take
 * x's ID and tag and record nothing, except in a program (record.h,
 * AD__TAG_LISTED), which must see the constant to replay them. */
static inline ad_real ad_add_rr(ad_real a, ad_real b)
{
    if ((a.id && b.id) || ad__listed(a.tag | b.tag))
        return ad__rec2(a.v + b.v, a, 1.0, b, 1.0, AD__OP_ADD);
    ad_real r = b.id ? b : a;  /* the active one's ID and tag, if either is */
    r.v = a.v + b.v;
    return r;
}

static inline ad_real ad_sub_rr(ad_real a, ad_real b)
{
    if (b.id || ad__listed(a.tag))
        return ad__rec2(a.v - b.v, a, 1.0, b, -1.0, AD__OP_SUB);
    ad_real r = {a.v - b.v, a.id, a.tag};
    return r;
}
static inline ad_real ad_mul_rr(ad_real a, ad_real b) { return ad__rec2(a.v * b.v, a, b.v, b, a.v, AD__OP_MUL); }

/* d/db = -q (1 / b).  1 / b overflows for |b| < 5.6e-309, where -a / b^2
 * need not (-2.5e307 for 1e-310 / 2e-309): -q / b there, and only there,
 * as a third division is slower than the multiply. */
static inline ad_real ad_div_rr(ad_real a, ad_real b)
{
    double q = a.v / b.v, rb = 1.0 / b.v, wb = -q * rb;
    if (AD__UNLIKELY(isinf(rb)))
        wb = -q / b.v;
    return ad__rec2(q, a, rb, b, wb, AD__OP_DIV);
}

/* pow, with the exponents a compiler replaces by exact operations where
 * it sees them (x * x for 2, 1 / x for -1), which pow() need not round
 * alike, taken so at run time too: the same bits whether the exponent is
 * a constant of the caller's or a number it reads (a recorded program
 * replays it as one). */
static inline double ad__pow(double a, double b)
{
    return b == 2.0 ? a * a : b == -1.0 ? 1.0 / a : pow(a, b);
}

/* convention: d/da = 0 when b == 0 (a^0 is 1 for every a, 0^0 included);
 * d/db = 0 when a == 0 (0^b is constant in b wherever it is finite).
 * a^(b-1) overflows for tiny a where b a^(b-1), |b| < 1, need not (d/da
 * a^0.001 at 1e-310 is 4.9e306): there, 0 < a < 1, it is (b v) / a, v =
 * a^b, which is then a normal number. */
static inline double ad__pow_da(double a, double b, double v)
{
    if (b == 0.0)
        return 0.0;
    /* For a < 0, b - 1 rounded keeps neither integrality (tiny b: pow(a,
     * b - 1) is finite where v is NaN) nor parity (finite |b| >= 2^53,
     * an even integer, where b - 1 rounds to b or b - 2: b - 1 is odd,
     * a^(b-1) = -|a|^(b-1)).
     * An infinite b has no parity: pow takes |a| there, and so does
     * b pow(a, b - 1). */
    if (AD__UNLIKELY(a < 0.0)) {
        if (v != v)
            return v;
        if (fabs(b) >= 0x1p53 && fabs(b) <= DBL_MAX)
            return -b * ad__pow(-a, b - 1.0);
    }
    double d = b * ad__pow(a, b - 1.0);
    if (AD__UNLIKELY(fabs(d) > DBL_MAX) && a > 0.0 && a < 1.0)
        d = b * v / a;
    return d;
}
static inline double ad__pow_db(double a, double v) { return a == 0.0 ? 0.0 : log(a) * v; }

static inline ad_real ad_pow_rr(ad_real a, ad_real b)
{
    double v = ad__pow(a.v, b.v);
    return ad__rec2(v, a, ad__pow_da(a.v, b.v, v), b, ad__pow_db(a.v, v), AD__OP_POW);
}

static inline ad_real ad_pow_rd(ad_real a, double b)
{
    double v = ad__pow(a.v, b);
    return ad__rec1(v, a, ad__pow_da(a.v, b, v), AD__OP_POW_RD, b);
}

static inline ad_real ad_pow_dr(double a, ad_real b)
{
    double v = ad__pow(a, b.v);
    return ad__rec1(v, b, ad__pow_db(a, v), AD__OP_POW_DR, a);
}

/* atan2(a, b) is the angle of the point (b, a); its partials are
 * b / (a^2 + b^2) and -a / (a^2 + b^2), formed from the ratio of the smaller
 * to the larger, so that nothing overflows and an infinite coordinate gives
 * the limit, a signed zero.  At the origin, and at two infinite coordinates,
 * there is no limit, so they are NaN (0/0, Inf/Inf): convention. */
static inline void ad__atan2_partials(double a, double b, double *wa, double *wb)
{
    if (fabs(b) >= fabs(a)) {
        double t = a / b, d = b + a * t;
        *wa = 1.0 / d;
        *wb = -t / d;
    } else {
        double t = b / a, d = a + b * t;
        *wa = t / d;
        *wb = -1.0 / d;
    }
}

static inline ad_real ad_atan2_rr(ad_real a, ad_real b)
{
    double wa, wb;
    ad__atan2_partials(a.v, b.v, &wa, &wb);
    return ad__rec2(atan2(a.v, b.v), a, wa, b, wb, AD__OP_ATAN2);
}

/* hypot(a, b) = h: the partials a / h and b / h, where h is a normal
 * number.  Else, for finite a and b, h has overflowed or lost precision
 * below DBL_MIN (hypot(5e-324, 5e-324) is 5e-324), and the partials are
 * taken from a and b scaled by a power of two, exactly; conventions: 0, 0
 * at the origin, as fabs at 0; at an infinite argument the limits, +-1 for
 * it and 0 for the other, a NaN included (hypot(Inf, NaN) is Inf); NaN,
 * NaN at two infinite arguments (no limit).  A NaN h gives NaN partials. */
/* The power of two that brings finite a and b back into range where h =
 * hypot(a, b) is not a normal number: 2^600 below DBL_MIN, 1/4 past
 * DBL_MAX, else 1.  Shared with the second partials (lib/modes/second.h). */
static inline double ad__hypot_scale(double h)
{
    return h < DBL_MIN ? 0x1p600 : h > DBL_MAX ? 0.25 : 1.0;
}

static inline void ad__hypot_edge(double a, double b, double h, double *wa, double *wb)
{
    if (h == 0.0 || h != h) {
        *wa = *wb = h;
        return;
    }
    if (isinf(a) || isinf(b)) {
        *wa = isinf(b) ? (isinf(a) ? NAN : 0.0) : a > 0.0 ? 1.0 : -1.0;
        *wb = isinf(a) ? (isinf(b) ? NAN : 0.0) : b > 0.0 ? 1.0 : -1.0;
        return;
    }
    double s = ad__hypot_scale(h);
    a *= s;
    b *= s;
    h = hypot(a, b);
    *wa = a / h;
    *wb = b / h;
}

static inline ad_real ad_hypot_rr(ad_real a, ad_real b)
{
    double h = hypot(a.v, b.v), wa, wb;
    if (AD__LIKELY(h >= DBL_MIN && h <= DBL_MAX)) {
        wa = a.v / h;
        wb = b.v / h;
    } else {
        ad__hypot_edge(a.v, b.v, h, &wa, &wb);
    }
    return ad__rec2(h, a, wa, b, wb, AD__OP_HYPOT);
}

/* convention: at a tie each argument gets 1/2 (a subgradient, and exact for
 * fmin(x, x) = x).  A NaN argument is ignored, as C's fmin ignores it, so its
 * partial is 0 and the other argument's is 1; two NaNs give NaN partials. */
static inline double ad__select_weight(double a, double b, int a_wins)
{
    if (b != b)
        return a != a ? a : 1.0;  /* both NaN: the value is, and so are the partials */
    if (a != a)
        return 0.0;
    return a == b ? 0.5 : (double)a_wins;
}

/* fmin and fmax with their ties decided here: -0 is the smaller zero.
 * libm leaves the sign of fmin(-0, +0) open, and a compiler may swap the
 * operands of its builtin, so the same call could give either zero in two
 * files (a recorded program's replay is in another file than f). */
static inline double ad__fmin(double a, double b)
{
    if (a < b || b != b)
        return a;
    if (b < a || a != a)
        return b;
    return signbit(a) ? a : b;
}

static inline double ad__fmax(double a, double b)
{
    if (a > b || b != b)
        return a;
    if (b > a || a != a)
        return b;
    return signbit(a) ? b : a;
}

static inline ad_real ad_fmin_rr(ad_real a, ad_real b)
{
    double w = ad__select_weight(a.v, b.v, a.v < b.v);
    return ad__rec2(ad__fmin(a.v, b.v), a, w, b, 1.0 - w, AD__OP_FMIN);
}

static inline ad_real ad_fmax_rr(ad_real a, ad_real b)
{
    double w = ad__select_weight(a.v, b.v, a.v > b.v);
    return ad__rec2(ad__fmax(a.v, b.v), a, w, b, 1.0 - w, AD__OP_FMAX);
}

/* Conditional expressions whose structure does not move with x: the value
 * is t where the condition holds, else f, and the derivative flows to that
 * one only, but both t and f are the record's arguments, so that a sparse
 * Jacobian or Hessian read off the tape has both branches' structure at
 * every x.  The condition's operands l and r have no derivative (a NaN
 * makes lt and le false, eq false).  docs/conventions.md, "Conditional
 * expressions". */
static inline ad_real ad__select(int c, ad_real t, ad_real f)
{
    return ad__rec2(c ? t.v : f.v, t, c ? 1.0 : 0.0, f, c ? 0.0 : 1.0, AD__OP_SELECT);
}

/* The comparisons of ad_select_* and of the branch guards (ad_lt, ...). */
enum { AD__CMP_LT, AD__CMP_LE, AD__CMP_EQ, AD__CMP_GT, AD__CMP_GE };

/* Out of line, in a program: a selection keeps its comparison (its
 * operands' IDs), so that a replay selects again. */
AD_API ad_real ad__select_listed(int cmp, ad_real l, ad_real r, ad_real t, ad_real f);

static inline ad_real ad_select_lt(ad_real l, ad_real r, ad_real t, ad_real f)
{
    if (ad__listed(l.tag | r.tag | t.tag | f.tag))
        return ad__select_listed(AD__CMP_LT, l, r, t, f);
    return ad__select(l.v < r.v, t, f);
}

static inline ad_real ad_select_le(ad_real l, ad_real r, ad_real t, ad_real f)
{
    if (ad__listed(l.tag | r.tag | t.tag | f.tag))
        return ad__select_listed(AD__CMP_LE, l, r, t, f);
    return ad__select(l.v <= r.v, t, f);
}

static inline ad_real ad_select_eq(ad_real l, ad_real r, ad_real t, ad_real f)
{
    if (ad__listed(l.tag | r.tag | t.tag | f.tag))
        return ad__select_listed(AD__CMP_EQ, l, r, t, f);
    return ad__select(l.v == r.v, t, f);
}

/* Branch guards: the comparison of the values, as a C comparison makes
 * it (false with a NaN).  In a program each is kept, and a replay where
 * one comes out the other way fails with AD_EBRANCH; elsewhere they cost
 * the comparison and a register test. */
AD_API void ad__guard(int cmp, ad_real a, ad_real b, int outcome);

static inline int ad__guarded(int cmp, ad_real a, ad_real b, int outcome)
{
    if (ad__listed(a.tag | b.tag))
        ad__guard(cmp, a, b, outcome);
    return outcome;
}

#define AD__GUARD(name, cmp, rel)                                                             \
    static inline int ad_##name##_rr(ad_real a, ad_real b) { return ad__guarded(cmp, a, b, a.v rel b.v); } \
    static inline int ad_##name##_rd(ad_real a, double b) { return ad_##name##_rr(a, ad_const(b)); } \
    static inline int ad_##name##_dr(double a, ad_real b) { return ad_##name##_rr(ad_const(a), b); } \
    static inline int ad_##name##_dd(double a, double b) { return a rel b; }

AD__GUARD(lt, AD__CMP_LT, <)
AD__GUARD(le, AD__CMP_LE, <=)
AD__GUARD(gt, AD__CMP_GT, >)
AD__GUARD(ge, AD__CMP_GE, >=)

/* The mixed forms: a constant argument is an ad_real with ID 0, which the
 * inlined recorder folds away (one record, one live argument).  pow has its
 * own mixed forms above, to skip the log() a constant exponent never needs. */
#define AD__MIXED(name, plain)                                                        \
    static inline ad_real ad_##name##_rd(ad_real a, double b) { return ad_##name##_rr(a, ad_const(b)); } \
    static inline ad_real ad_##name##_dr(double a, ad_real b) { return ad_##name##_rr(ad_const(a), b); } \
    static inline double ad_##name##_dd(double a, double b) { return plain; }

AD__MIXED(add, a + b)
AD__MIXED(sub, a - b)
AD__MIXED(mul, a * b)
AD__MIXED(div, a / b)
AD__MIXED(atan2, atan2(a, b))
AD__MIXED(hypot, hypot(a, b))
AD__MIXED(fmin, ad__fmin(a, b))
AD__MIXED(fmax, ad__fmax(a, b))
static inline double ad_pow_dd(double a, double b) { return ad__pow(a, b); }

/* ---- unary operations ---- */

static inline ad_real ad_neg_r(ad_real x) { return ad__rec1(-x.v, x, -1.0, AD__OP_NEG, 0.0); }
static inline double ad_neg_d(double x) { return -x; }

/* sqrt and cbrt at 0: the one-sided derivative, +Inf (convention), at -0
 * too: sqrt(-0) is -0, hence fabs. */
static inline ad_real ad_sqrt_r(ad_real x)
{
    double v = sqrt(x.v);
    return ad__rec1(v, x, 0.5 / fabs(v), AD__OP_SQRT, 0.0);
}

static inline ad_real ad_cbrt_r(ad_real x)
{
    double v = cbrt(x.v);
    return ad__rec1(v, x, 1.0 / (3.0 * v * v), AD__OP_CBRT, 0.0);
}

static inline ad_real ad_exp_r(ad_real x)
{
    double v = exp(x.v);
    return ad__rec1(v, x, v, AD__OP_EXP, 0.0);
}

/* exp(x), not expm1(x) + 1, which cancels for very negative x. */
static inline ad_real ad_expm1_r(ad_real x) { return ad__rec1(expm1(x.v), x, exp(x.v), AD__OP_EXPM1, 0.0); }

/* log, log2 and log10 at 0: the one-sided derivative, +Inf (convention),
 * at -0 too, hence fabs (a negative x has a NaN value, and so a NaN
 * partial).  log2 and log10 divide the constant 1 / ln 2 (1 / ln 10):
 * x ln 2 would lose bits below DBL_MIN. */
static inline ad_real ad_log_r(ad_real x)
{
    double v = log(x.v);
    return ad__rec1(v, x, ad__nan_with(v, 1.0 / fabs(x.v)), AD__OP_LOG, 0.0);
}

static inline ad_real ad_log1p_r(ad_real x)
{
    double v = log1p(x.v);
    return ad__rec1(v, x, ad__nan_with(v, 1.0 / (1.0 + x.v)), AD__OP_LOG1P, 0.0);
}

static inline ad_real ad_log2_r(ad_real x)
{
    double v = log2(x.v);
    return ad__rec1(v, x, ad__nan_with(v, AD__LOG2E / fabs(x.v)), AD__OP_LOG2, 0.0);
}

static inline ad_real ad_log10_r(ad_real x)
{
    double v = log10(x.v);
    return ad__rec1(v, x, ad__nan_with(v, AD__LOG10E / fabs(x.v)), AD__OP_LOG10, 0.0);
}

static inline ad_real ad_sin_r(ad_real x) { return ad__rec1(sin(x.v), x, cos(x.v), AD__OP_SIN, 0.0); }
static inline ad_real ad_cos_r(ad_real x) { return ad__rec1(cos(x.v), x, -sin(x.v), AD__OP_COS, 0.0); }

static inline ad_real ad_tan_r(ad_real x)
{
    double v = tan(x.v);
    return ad__rec1(v, x, 1.0 + v * v, AD__OP_TAN, 0.0);
}

/* (1-x)(1+x) rather than 1-x*x: no cancellation near |x| = 1. */
static inline ad_real ad_asin_r(ad_real x)
{
    return ad__rec1(asin(x.v), x, 1.0 / sqrt((1.0 - x.v) * (1.0 + x.v)), AD__OP_ASIN, 0.0);
}

static inline ad_real ad_acos_r(ad_real x)
{
    return ad__rec1(acos(x.v), x, -1.0 / sqrt((1.0 - x.v) * (1.0 + x.v)), AD__OP_ACOS, 0.0);
}

/* Past 2^500, x^2 would overflow where 1 / x^2 is a subnormal number. */
static inline ad_real ad_atan_r(ad_real x)
{
    double w = AD__UNLIKELY(fabs(x.v) > 0x1p500) ? 1.0 / x.v / x.v : 1.0 / (1.0 + x.v * x.v);
    return ad__rec1(atan(x.v), x, w, AD__OP_ATAN, 0.0);
}
static inline ad_real ad_sinh_r(ad_real x) { return ad__rec1(sinh(x.v), x, cosh(x.v), AD__OP_SINH, 0.0); }
static inline ad_real ad_cosh_r(ad_real x) { return ad__rec1(cosh(x.v), x, sinh(x.v), AD__OP_COSH, 0.0); }

/* sech^2 from cosh: 1 - tanh^2 cancels to 0 for |x| > 19; squared after
 * the division, as cosh^2 overflows for |x| > 355 where sech^2 is still
 * above DBL_MIN. */
static inline ad_real ad_tanh_r(ad_real x)
{
    double s = 1.0 / cosh(x.v);
    return ad__rec1(tanh(x.v), x, s * s, AD__OP_TANH, 0.0);
}

/* hypot(x, 1) rather than sqrt(x*x + 1): no overflow for large |x|. */
static inline ad_real ad_asinh_r(ad_real x) {
    return ad__rec1(asinh(x.v), x, 1.0 / hypot(x.v, 1.0), AD__OP_ASINH, 0.0);
}

/* Two square roots: (x-1)(x+1) overflows for x > 1.3e154. */
static inline ad_real ad_acosh_r(ad_real x)
{
    return ad__rec1(acosh(x.v), x, 1.0 / (sqrt(x.v - 1.0) * sqrt(x.v + 1.0)), AD__OP_ACOSH, 0.0);
}

static inline ad_real ad_atanh_r(ad_real x)
{
    double v = atanh(x.v);
    return ad__rec1(v, x, ad__nan_with(v, 1.0 / ((1.0 - x.v) * (1.0 + x.v))), AD__OP_ATANH, 0.0);
}

/* convention: 0 at x = 0, the midpoint of the subdifferential [-1, 1];
 * NaN at NaN. */
static inline ad_real ad_fabs_r(ad_real x)
{
    double w = x.v > 0.0 ? 1.0 : x.v < 0.0 ? -1.0 : x.v == 0.0 ? 0.0 : x.v;
    return ad__rec1(fabs(x.v), x, w, AD__OP_FABS, 0.0);
}

/* Through a double parameter: fabs() called on an int draws -Wabsolute-value. */
static inline double ad_fabs_d(double x) { return fabs(x); }

static inline ad_real ad_erf_r(ad_real x) {
    return ad__rec1(erf(x.v), x, AD__2_SQRTPI * exp(-x.v * x.v), AD__OP_ERF, 0.0);
}
static inline ad_real ad_erfc_r(ad_real x) {
    return ad__rec1(erfc(x.v), x, -AD__2_SQRTPI * exp(-x.v * x.v), AD__OP_ERFC, 0.0);
}

/* The gamma functions need the digamma function, which <math.h> lacks; they
 * live in lib/modes/special.c.  ad_lgamma_d avoids lgamma()'s global signgam, which
 * would race between threads. */
AD_API ad_real ad_lgamma_r(ad_real x);
AD_API double ad_lgamma_d(double x);
AD_API ad_real ad_tgamma_r(ad_real x);

AD__EXTERN_C_END

#endif
