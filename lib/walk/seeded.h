/* dualrev internal: scaled seeds, and the passes that follow a sweep whose
 * results are not all finite (docs/tape.md, "Scaled seeds").
 *
 * A sweep is linear in its seeds, so every first-order sweep, and the
 * reverse sweep of second order, is seeded with AD_SEED_SCALE times its
 * seeds, and its results scaled back: exact in binary floating point
 * wherever nothing overflows or underflows.  Cotangents (tangents) that
 * would underflow then stay normal numbers.  Far out in a softmax a weight
 * is 1e-300 or less, and so is every cotangent below it: arithmetic on
 * subnormal numbers takes a microcode assist on every operation on this
 * class of machine, slow enough to be a large share of the gradient of a
 * mixture model, and rounds to fewer bits, or to 0.  A
 * cotangent above 2^512 overflows when scaled; the sweep only multiplies
 * and adds, so it reaches the results as an infinity or a NaN, and results
 * that are not all finite are swept again unscaled if the sweep raised the
 * overflow flag.  Tapes with the user's rules are swept unscaled.
 *
 * A driver writes one pass of its sweep (ad_pass) and hands it to
 * ad_seeded, which runs it as often as the results ask. */
#ifndef DUALREV_SEEDED_H
#define DUALREV_SEEDED_H

#include <string.h>

#include "collective.h"
#include "tape.h"

#define AD_SEED_SCALE 0x1p512
#define AD_SEED_UNSCALE 0x1p-512

/* The trait (tape.h) of a recording that holds a user's rule: its sweeps
 * are unscaled. */
enum { AD_SEEDS_UNSCALED = 4 };

static inline double ad_seed_scale(const ad_tape *t)
{
    return t->traits & AD_SEEDS_UNSCALED ? 1.0 : AD_SEED_SCALE;
}

/* What scales a sweep's results back from its seed's `scale`. */
static inline double ad_seed_back(double scale)
{
    return scale == 1.0 ? 1.0 : AD_SEED_UNSCALE;
}

/* A result read out of a sweep: g scaled back by u (x 1 is exact), and
 * + 0 so that a zero derivative is +0 from every driver, whatever order
 * its zero terms were added in (docs/conventions.md). */
static inline double ad_result(double g, double u)
{
    return g * u + 0.0;
}

/* dst[i * to] = src[i * from] scaled back from `scale`, i < n; returns
 * their sum (unscaled), which is not finite if one of them is not, and
 * NaN if one is NaN.  (A sum that overflows, of results near 2^1023 / n,
 * or Infs of both signs, at worst sweep them again for nothing: rare, and
 * it spares a test per result.) */
static inline double ad_unscale(double *dst, size_t to, const double *src, size_t from, size_t n,
                                double scale)
{
    double u = ad_seed_back(scale), sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = src[i * from];
        sum += g;
        dst[i * to] = ad_result(g, u);
    }
    return sum;
}

/* The overflow flag around a sweep (or a rule): ad_watch_begin clears it,
 * ad_watch_over says whether the sweep raised it (1), did not (0) or
 * cannot tell (-1: no flag to read), and leaves it as the caller had it:
 * the sweep's own overflow is not the caller's.  Results that are not all
 * finite come from a scaled cotangent that overflowed, or from infinite
 * partials (a value that overflowed in the forward pass, sqrt at 0),
 * which give the same infinities and NaNs whatever the scale: the sweep is
 * run again unscaled only if it raised the flag.  Where SSE2 does the sweeps'
 * arithmetic (x86-64), the flag is MXCSR's, read without a call (calls to
 * fetestexcept were a visible share of a per-observation Jacobian of a
 * small function); else <fenv.h>'s. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <xmmintrin.h>
#define AD_MXCSR_OE 0x8u  /* the overflow flag */

typedef struct ad_watch {
    int was;  /* set before the sweep */
} ad_watch;

static inline ad_watch ad_watch_begin(void)
{
    ad_watch w = {0};
    unsigned csr = _mm_getcsr();
    w.was = (csr & AD_MXCSR_OE) != 0;
    if (w.was)
        _mm_setcsr(csr & ~AD_MXCSR_OE);
    return w;
}

static inline int ad_watch_over(const ad_watch *w)
{
    unsigned csr = _mm_getcsr();
    int over = (csr & AD_MXCSR_OE) != 0;
    if (over != w->was)
        _mm_setcsr(w->was ? csr | AD_MXCSR_OE : csr & ~AD_MXCSR_OE);
    return over;
}
#else
#include <fenv.h>

typedef struct ad_watch {
    int was;
    fexcept_t flag;
} ad_watch;

static inline ad_watch ad_watch_begin(void)
{
    ad_watch w = {0};
#ifdef FE_OVERFLOW
    if (fetestexcept(FE_OVERFLOW)) {
        w.was = 1;
        fegetexceptflag(&w.flag, FE_OVERFLOW);
        feclearexcept(FE_OVERFLOW);
    }
#endif
    return w;
}

static inline int ad_watch_over(const ad_watch *w)
{
#ifdef FE_OVERFLOW
    int over = fetestexcept(FE_OVERFLOW) != 0;
    if (w->was)
        fesetexceptflag(&w->flag, FE_OVERFLOW);
    else if (over)
        feclearexcept(FE_OVERFLOW);
    return over;
#else
    return -1;  /* no flag to read: any result that is not finite is swept again */
#endif
}
#endif

/* Raises the overflow flag, as an overflow in the sweep would. */
static inline void ad_overflow_raise(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    _mm_setcsr(_mm_getcsr() | AD_MXCSR_OE);
#elif defined(FE_OVERFLOW)
    feraiseexcept(FE_OVERFLOW);
#endif
}

/* Results that are not all finite, again.  Each sweep applies every record
 * below its top, also those its seeds do not reach, with a zero cotangent
 * (tangent): 0 x an infinite partial is NaN there.  Three causes, then:
 * an overflow of the scaled seeds (the flag says so), such records (the
 * poison they spread is NaN, never Inf: 0, or NaN, times anything), and
 * infinite partials of records the seeds do reach, which stay.  So a sweep
 * whose results are not all finite is run again unscaled if it raised the
 * flag; then, if a result is NaN, again applying only what its seeds reach
 * (exact: the marks, ad_marks, say which IDs), scaled, and unscaled if that
 * overflows.  A finite result cannot have taken an overflowed term (an
 * infinity stays Inf or NaN) nor a NaN, and a record not reached adds only
 * zeros to it: each pass keeps the finite results and replaces only the
 * others (ad_results).  Results that are finite, or infinite without a
 * NaN (t_bad's), cost nothing more: a test of their sum, the flag read
 * twice.
 *
 * ad_retry is a pass's instructions (its scale, whether it is exact, the
 * first or a later one) and the loop's state; ad_seeded runs the loop. */
typedef struct ad_retry {
    double scale;       /* this pass's seed scale */
    int exact;          /* this pass applies only what the seeds reach */
    int pass;           /* 0 first */
    int can_exact;      /* the sweep has an exact form (the sparse resolve is exact) */
    int over;           /* the last pass raised the overflow flag (1), or not (0) */
    ad_status status;
    ad_watch watch;
} ad_retry;

/* One pass of a seeded sweep, for ad_seeded: seeds with r->scale times the
 * driver's seeds (r->exact: also marks the seeds' IDs, with
 * ad_reach_mark, and runs the exact sweep), sweeps, reads the results out
 * with ad_results or ad_results_of (r->pass: the first pass or a later
 * one), and returns the sum of its results, which says whether they are
 * all finite.  A pass that fails (out of memory, say) keeps its status in
 * ctx and returns 0.0: there is no pass after it. */
typedef double (*ad_pass)(ad_tape *t, const ad_retry *r, void *ctx);

/* The loop's pieces, for ad_seeded:
 *
 *   ad_retry r = ad_retry_begin(t, can_exact);
 *   do sum = one pass with r; while (ad_retry_next(&r, t, top, sum));
 *   r.status: AD_ENOMEM if the marks could not be had. */
static inline ad_retry ad_retry_begin(const ad_tape *t, int can_exact)
{
    ad_retry r;
    r.scale = ad_seed_scale(t);
    r.exact = 0;
    r.pass = 0;
    r.can_exact = can_exact;
    r.over = 0;
    r.status = AD_OK;
    r.watch = ad_watch_begin();
    return r;
}

/* seeded.c: the next pass for results not all finite, from the last
 * pass, whether it overflowed, and whether a result is NaN (reserving
 * the marks for IDs 0..top on the way to an exact pass); 0 if there is
 * none. */
AD_HIDDEN int ad_retry_plan(ad_retry *r, ad_tape *t, uint32_t top, int over, int nan);

/* After each pass, with the sum of its results (ad_results): 1 to run the
 * next pass (r says how).  Reads the flag back first, always. */
static inline int ad_retry_next(ad_retry *r, ad_tape *t, uint32_t top, double sum)
{
    int over = ad_watch_over(&r->watch);
    r->over = over == 1;
    return sum - sum != 0.0 && t->fault == AD_OK && !(t->traits & AD_COLLECTIVE_TAPE) &&
           ad_retry_plan(r, t, top, r->scale != 1.0 && over, sum != sum);
}

/* What ad_seeded may do with a sweep: run its exact form (AD_SEEDED_EXACT),
 * and take results that are still NaN after a last pass that overflowed
 * for AD_EOVERFLOW (AD_SEEDED_OVER).  The second only where every record
 * that pass applies lies on a path to a result: a reverse sweep's exact
 * pass, the sparse resolve; a forward sweep applies also records that
 * reach no result, whose overflow says nothing of the results. */
enum { AD_SEEDED_EXACT = 1, AD_SEEDED_OVER = 2 };

/* The seeded sweep of t up to ID top: `pass` with ctx, first scaled, then
 * as many more times as its results ask (ad_retry); how: AD_SEEDED_*.
 * *last (if last is not NULL) gets the last pass's sum, for a caller
 * that looks further into results not all finite (ad_check_reverse).
 * AD_ENOMEM if an exact pass's marks could not be had, a block rule's
 * fault (ad_block_fail: no pass follows it), AD_EOVERFLOW if results are
 * NaN (or Infs of both signs) after the last pass and it overflowed
 * (AD_SEEDED_OVER): a NaN that the exact derivative need not have; else
 * AD_OK (a pass's own failure is the caller's to report).
 * Always inlined, so that `pass`, a constant, is called directly and can
 * be inlined in its turn. */
AD_INLINE ad_status ad_seeded(ad_tape *t, uint32_t top, int how, ad_pass pass, void *ctx,
                              double *last)
{
    ad_retry r = ad_retry_begin(t, how & AD_SEEDED_EXACT);
    double sum;
    t->fault = AD_OK;
    do
        sum = pass(t, &r, ctx);
    while (ad_retry_next(&r, t, top, sum));
    if (last)
        *last = sum;
    if (r.status != AD_OK || t->fault != AD_OK)
        return r.status != AD_OK ? r.status : t->fault;
    return sum != sum && r.over && how & AD_SEEDED_OVER ? AD_EOVERFLOW : AD_OK;
}

/* The first pass's results, as ad_unscale; a later pass's only where
 * dst is not finite.  Returns the sum of dst, as ad_unscale. */
static inline double ad_results(const ad_retry *r, double *dst, size_t to, const double *src,
                                size_t from, size_t n)
{
    if (!r->pass)
        return ad_unscale(dst, to, src, from, n, r->scale);
    double u = ad_seed_back(r->scale), sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = dst[i * to];
        if (d - d != 0.0)
            d = dst[i * to] = ad_result(src[i * from], u);
        sum += d;
    }
    return sum;
}

/* The same for outputs: dst[j * to] from src[outs[j].id * L], j < m. */
static inline double ad_results_of(const ad_retry *r, double *dst, size_t to, const double *src,
                                   size_t L, const ad_real *outs, size_t m)
{
    double u = ad_seed_back(r->scale), sum = 0.0;
    for (size_t j = 0; j < m; j++) {
        double d = 0.0;
        int take = !r->pass;
        if (!take) {
            d = dst[j * to];
            take = d - d != 0.0;
        }
        if (take)
            d = dst[j * to] = ad_result(src[(size_t)outs[j].id * L], u);
        sum += d;
    }
    return sum;
}

/* What an exact pass's seeds reach: a bit per ID, zero between passes;
 * and, while an exact forward sweep runs, the same bits for the blocks'
 * forward rules (ad_tangent_zero).  Kept per tape (seeded.c), made by
 * ad_reach_reserve before the first exact pass. */
typedef struct ad_marks {
    uint64_t *bits;
    size_t cap;
    const uint64_t *reach;  /* bits during an exact forward sweep, else NULL */
} ad_marks;

AD_HIDDEN extern const ad_tenant ad_marks_tenant;

/* t's marks, or NULL if no exact pass has been prepared on t. */
static inline ad_marks *ad_marks_of(const ad_tape *t)
{
    return ad_tape_state_if(t, &ad_marks_tenant);
}

static inline uint64_t *ad_reach_bits(const ad_tape *t)
{
    return ad_marks_of(t)->bits;
}

static inline void ad_reach_mark(const ad_tape *t, uint32_t id)
{
    uint64_t *bits = ad_reach_bits(t);
    bits[id >> 6] |= (uint64_t)1 << (id & 63);
}

static inline int ad_reached(const uint64_t *bits, uint32_t id)
{
    return (int)(bits[id >> 6] >> (id & 63) & 1);
}

/* Clears the marks of IDs 0..top after an exact sweep. */
static inline void ad_reach_clear(const ad_tape *t, uint32_t top)
{
    memset(ad_reach_bits(t), 0, (((size_t)top >> 6) + 1) * sizeof(uint64_t));
}

/* Whether the tangent of id is zero by structure in a forward sweep: a
 * constant, or, in an exact pass, not reached from the seeds.  Its
 * partials may be anything, and 0 x Inf must not make NaN. */
static inline int ad_tangent_zero(const ad_tape *t, uint32_t id)
{
    if (!id)
        return 1;
    const ad_marks *m = ad_marks_of(t);
    return m && m->reach && !ad_reached(m->reach, id);
}

/* seeded.c: t's marks with room for IDs 0..top, zero. */
AD_HIDDEN ad_status ad_reach_reserve(ad_tape *t, uint32_t top);

#endif
