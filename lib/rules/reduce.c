/* dualrev: reductions whose partials need the whole array first.
 *
 * A product's partials are the products of all the other elements, and a
 * log-sum-exp's are the softmax, which needs the sum: both are computed into
 * a per-thread scratch array, then recorded as one n-ary record (nary.h). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "block.h"
#include "listing.h"
#include "program.h"
#include "second.h"
#include "tape.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <xmmintrin.h>
#else
#include <fenv.h>
#endif

/* Partials of one primitive, before they are recorded; per thread, freed
 * with its tapes. */
static _Thread_local double *scratch_buf;
static _Thread_local size_t scratch_cap;

static void scratch_free(void)
{
    ad_free(scratch_buf);
    scratch_buf = NULL;
    scratch_cap = 0;
}

/* Room for n partials, or NULL after ending the recording with AD_ENOMEM. */
static double *scratch(ad_tape *t, size_t n)
{
    if (ad_reserve((void **)&scratch_buf, &scratch_cap, n, sizeof(double)) == AD_OK &&
        ad_thread_cleanup(scratch_free) == AD_OK)
        return scratch_buf;
    scratch_free();
    ad_tape_fail(t, AD_ENOMEM);
    return NULL;
}

/* In a program (program.h), the values of the record's elements, for a
 * replay to make its partials again: the slots' arguments' in their
 * steps, and the constant elements' product in the header's.  The slots
 * are the active elements in pairs, in order (record(), below). */
static void program_values(ad_tape *t, uint32_t id, size_t n, const ad_real *x, double consts)
{
    ad_tape_step(t, id)->x = consts;
    uint32_t slot = id - ad_tape_record(t, id)->a;
    int half = 0;
    for (size_t i = 0; i < n; i++) {
        if (!x[i].id)
            continue;
        ad_step *st = ad_tape_step(t, slot);
        if (!half) {
            st->x = x[i].v;
            st->y = 0.0;
        } else {
            st->y = x[i].v;
            slot++;
        }
        half = !half;
    }
}

/* One n-ary record of x's active elements with partials w.  In a
 * second-order recording each slot's aux keeps its arguments' values, and
 * the header's the product of the constants', for ad_prod's second
 * partials (second_order.c).  v: the result's value. */
static uint32_t record(ad_tape *t, size_t n, const ad_real *x, const double *w, int kind,
                       double v)
{
    ad_listing_expect(t);
    ad__slots s = ad__slots_begin();
    size_t i = 0, k = SIZE_MAX;  /* k: an active element waiting for its pair */
    double consts = 1.0;
    for (; i < n; i++) {
        if (!x[i].id) {
            consts *= x[i].v;
            continue;
        }
        if (k == SIZE_MAX) {
            k = i;
            continue;
        }
        ad__slots_check(&s, ad__key(x[k]));
        ad__slots_check(&s, ad__key(x[i]));
        s = ad__slots_put(s, x[k].id, w[k], x[i].id, w[i]);
        k = SIZE_MAX;
    }
    if (k != SIZE_MAX) {
        ad__slots_check(&s, ad__key(x[k]));
        s = ad__slots_put(s, x[k].id, w[k], 0, 0.0);
    }
    uint32_t id = ad__slots_end(s, kind, v);
    if (ad_listing_of(t))
        ad_listing_nary(t, id, kind == AD__NARY_PROD ? AD_LIST_PROD : AD_LIST_LSE, n, x, NULL,
                        NULL);
    if (id && ad_tape_side(t, &ad_program_mode))
        program_values(t, id, n, x, consts);
    if (!id || !ad_tape_side(t, &ad_second_mode))
        return id;
    /* second_order.c's prod_run keeps two numbers per argument in the work array. */
    if (!ad_block_reserve(t, 4 * (size_t)ad_tape_record(t, id)->a))
        return 0;
    /* The first slot holds an active element, so none was written over:
     * the slots are the active elements in pairs, in order. */
    ad_tape_aux(t, id)->aa = consts;
    uint32_t slot = id - ad_tape_record(t, id)->a;
    int half = 0;
    for (i = 0; i < n; i++) {
        if (!x[i].id)
            continue;
        ad_aux *v = ad_tape_aux(t, slot);
        if (!half) {
            v->aa = x[i].v;
            v->bb = 1.0;
        } else {
            v->bb = x[i].v;
            slot++;
        }
        half = !half;
    }
    return id;
}

/* The underflow and overflow flags around the prefix and suffix products
 * of ad_prod_r: raised, a product lost bits to the range of double (a tiny
 * inexact result, or an overflow; an exact subnormal or a zero factor
 * raises neither and loses nothing).  The caller's flags are cleared
 * before and raised again after; those the products raised stay, as in
 * the same computation on double.  On x86-64 MXCSR's, read without a call
 * (as seeded.h's ad_watch); else <fenv.h>'s; without such flags, always. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RANGE_FLAGS 0x18u  /* MXCSR: overflow 0x8, underflow 0x10 */

static unsigned range_begin(void)
{
    unsigned csr = _mm_getcsr(), was = csr & RANGE_FLAGS;
    if (was)
        _mm_setcsr(csr & ~RANGE_FLAGS);
    return was;
}

static int range_lost(unsigned was)
{
    unsigned csr = _mm_getcsr();
    if (was)
        _mm_setcsr(csr | was);
    return (csr & RANGE_FLAGS) != 0;
}
#elif defined(FE_UNDERFLOW) && defined(FE_OVERFLOW)
static unsigned range_begin(void)
{
    int was = fetestexcept(FE_UNDERFLOW | FE_OVERFLOW);
    if (was)
        feclearexcept(was);
    return (unsigned)was;
}

static int range_lost(unsigned was)
{
    int lost = fetestexcept(FE_UNDERFLOW | FE_OVERFLOW) != 0;
    if (was)
        feraiseexcept((int)was);
    return lost;
}
#else
static unsigned range_begin(void) { return 0; }
static int range_lost(unsigned was) { (void)was; return 1; }
#endif

/* Keeps the products between the reads of the flags: the compiler knows
 * nothing of the flags, and could move arithmetic across the reads.  A
 * fence with p (in a register on x86-64) and memory (w, x) as operands. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define RANGE_FENCE(p) __asm__ volatile("" : "+x"(p) : : "memory")
#elif defined(__GNUC__) || defined(__clang__)
#define RANGE_FENCE(p) __asm__ volatile("" : "+m"(p) : : "memory")
#else
#define RANGE_FENCE(p) ((void)(p))
#endif

/* w[i] = x[0] ... x[i-1], then times x[i+1] ... x[n-1] (n > 0): exact at
 * zeros, where the total over x[i] would be 0/0.  Returns x[0] ... x[n-2],
 * left to right. */
static inline double prefix_suffix(size_t n, const ad_real *x, double *w)
{
    double p = 1.0;
    RANGE_FENCE(p);
    for (size_t i = 0; i + 1 < n; i++) {
        w[i] = p;
        p *= x[i].v;
    }
    w[n - 1] = p;
    double s = 1.0;
    for (size_t i = n - 1; i > 0; i--) {
        w[i] *= s;
        s *= x[i].v;
    }
    w[0] *= s;
    RANGE_FENCE(p);
    return p;
}

/* A product kept as m 2^e, with |m| in [2^-500, 2^500] unless it is 0,
 * Inf or NaN: a factor of 0, Inf or NaN gives the plain product, and
 * nothing else under- or overflows. */
typedef struct scaled {
    double m;
    int64_t e;
} scaled;

static scaled scaled_mul(scaled p, double x)
{
    double m = p.m * x, a = fabs(m), ax = fabs(x);
    if (a >= 0x1p-500 && a <= 0x1p500) {
        p.m = m;
    } else if (p.m == 0.0 || x == 0.0 || !isfinite(p.m) || !isfinite(x)) {
        p.m = m;
    } else if (ax >= 0x1p-500 && ax <= 0x1p500) {  /* m is in [2^-1000, 2^1000] */
        p.m = a < 0x1p-500 ? m * 0x1p600 : m * 0x1p-600;
        p.e += a < 0x1p-500 ? -600 : 600;
    } else {  /* [1/2, 1) x [1/2, 1): exact but for the one rounding */
        int i, j;
        p.m = frexp(p.m, &i) * frexp(x, &j);
        p.e += i + j;
    }
    return p;
}

/* m 2^e, rounded once, for |m| in [2^-1000, 2^1000] (or 0, Inf, NaN):
 * a product by 2^e where that is a double, 0 or Inf past 2^+-2100. */
static double scale2(double m, int64_t e)
{
    if (e == 0 || m == 0.0 || !isfinite(m))
        return m;
    if (e < -2100 || e > 2100)
        return copysign(e < 0 ? 0.0 : INFINITY, m);
    if (e < -1022 || e > 1023)
        return ldexp(m, (int)e);
    uint64_t bits = (uint64_t)(e + 1023) << 52;
    double p;
    memcpy(&p, &bits, sizeof p);
    return m * p;
}

/* prefix_suffix on scaled products, for where those lost bits: each
 * partial is rounded once however far its prefix and suffix products lie
 * outside the range of double (prod(1e200, 1e-110, 1e-110, 1e-110,
 * 1e-110): the suffix 1e-330 underflowed, and the partial 1e-130 with
 * it).  w gets the prefixes' m, w + n their e. */
static void prefix_suffix_scaled(size_t n, const ad_real *x, double *w)
{
    scaled p = {1.0, 0};
    for (size_t i = 0; i < n; i++) {
        w[i] = p.m;
        w[n + i] = (double)p.e;
        p = scaled_mul(p, x[i].v);
    }
    p.m = 1.0;
    p.e = 0;
    for (size_t i = n; i-- > 0;) {
        w[i] = scale2(w[i] * p.m, (int64_t)w[n + i] + p.e);
        p = scaled_mul(p, x[i].v);
    }
}

ad_real ad_prod_r(size_t n, const ad_real *x)
{
    ad_real r = ad_const(1.0);
    ad_tape *t = ad_recording();
    double *w = t && ad_any_active(n, x) ? scratch(t, n) : NULL;
    if (!w) {
        for (size_t i = 0; i < n; i++)
            r.v *= x[i].v;
        return r;
    }
    unsigned was = range_begin();
    double p = prefix_suffix(n, x, w);
    int lost = range_lost(was);
    r.v = p * x[n - 1].v;
    if (lost) {
        if (!(w = scratch(t, 2 * n)))  /* 2 n: n is at most SIZE_MAX / sizeof *x */
            return r;
        prefix_suffix_scaled(n, x, w);
    }
    return ad__made(r.v, record(t, n, x, w, AD__NARY_PROD, r.v));
}

/* The largest element; NaN if any is. */
static double max_d(size_t n, const double *x)
{
    double hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (x[i] != x[i])
            return NAN;
        if (x[i] > hi)
            hi = x[i];
    }
    return hi;
}

static double max_r(size_t n, const ad_real *x)
{
    double hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (x[i].v != x[i].v)
            return NAN;
        if (x[i].v > hi)
            hi = x[i].v;
    }
    return hi;
}

double ad_logsumexp_d(size_t n, const double *x)
{
    double hi = max_d(n, x);
    if (!isfinite(hi))  /* n = 0, NaN, or an infinite maximum: the value is hi */
        return hi;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += exp(x[i] - hi);
    return hi + log(sum);
}

/* Softmax at an infinite maximum (docs/conventions.md): the limit along
 * rays, 1/c for each of the c elements equal to the maximum, so 1/n each
 * when every element is -Inf. */
static void softmax_at_infinity(size_t n, const ad_real *x, double hi, double *w)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += x[i].v == hi;
    for (size_t i = 0; i < n; i++)
        w[i] = x[i].v == hi ? 1.0 / (double)c : 0.0;
}

/* The same arithmetic as ad_logsumexp_d, so the two values agree bitwise. */
ad_real ad_logsumexp_r(size_t n, const ad_real *x)
{
    ad_real r = ad_const(max_r(n, x));
    ad_tape *t = ad_recording();
    double *w = t && ad_any_active(n, x) ? scratch(t, n) : NULL;
    if (!isfinite(r.v)) {
        for (size_t i = 0; w && i < n; i++)
            w[i] = NAN;
        if (w && r.v == r.v)
            softmax_at_infinity(n, x, r.v, w);
    } else {
        double sum = 0.0;
        for (size_t i = 0; i < n; i++) {
            double e = exp(x[i].v - r.v);
            sum += e;
            if (w)
                w[i] = e;
        }
        for (size_t i = 0; w && i < n; i++)
            w[i] /= sum;
        r.v += log(sum);
    }
    return w ? ad__made(r.v, record(t, n, x, w, AD__NARY_LSE, r.v)) : r;
}
