/* dualrev: reductions whose partials need the whole array first.
 *
 * A product's partials are the products of all the other elements, and a
 * log-sum-exp's are the softmax, which needs the sum: both are computed into
 * a per-thread scratch array, then recorded as one n-ary record (nary.h). */
#include <math.h>

#include "tape.h"

/* Room for n partials, or NULL after ending the recording with AD_ENOMEM. */
static double *scratch(ad_tape *t, size_t n)
{
    ad_thread *th = ad_thread_self();
    if (ad_reserve((void **)&th->scratch, &th->scratch_cap, n, sizeof(double)) == AD_OK)
        return th->scratch;
    ad_tape_fail(t, AD_ENOMEM);
    return NULL;
}

/* One n-ary record of x's active elements with partials w.  In a
 * second-order recording each slot's aux keeps its arguments' values, and
 * the header's the product of the constants', for ad_prod's second
 * partials (hessian.c). */
static uint32_t record(ad_tape *t, size_t n, const ad_real *x, const double *w, int kind)
{
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
        s = ad__slots_put(s, x[k].id, w[k], x[i].id, w[i]);
        k = SIZE_MAX;
    }
    if (k != SIZE_MAX)
        s = ad__slots_put(s, x[k].id, w[k], 0, 0.0);
    uint32_t id = ad__slots_end(s, kind);
    if (!id || !t->second)
        return id;
    /* hessian.c's prod_run keeps two numbers per argument in the work array. */
    if (ad_reserve((void **)&t->work, &t->work_cap, 4 * (size_t)ad_tape_record(t, id)->a,
                   sizeof *t->work) != AD_OK) {
        ad_tape_fail(t, AD_ENOMEM);
        return 0;
    }
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

ad_real ad_prod_r(size_t n, const ad_real *x)
{
    ad_real r = {1.0, 0};
    ad_tape *t = ad_recording();
    double *w = t && ad_any_active(n, x) ? scratch(t, n) : NULL;
    if (!w) {
        for (size_t i = 0; i < n; i++)
            r.v *= x[i].v;
        return r;
    }
    /* w[i] = x[0] ... x[i-1], then times x[i+1] ... x[n-1]: exact at zeros,
     * where the total over x[i] would be 0/0. */
    for (size_t i = 0; i < n; i++) {
        w[i] = r.v;
        r.v *= x[i].v;
    }
    double suffix = 1.0;
    for (size_t i = n; i-- > 0;) {
        w[i] *= suffix;
        suffix *= x[i].v;
    }
    r.id = record(t, n, x, w, AD__NARY_PROD);
    return r;
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
    ad_real r = {max_r(n, x), 0};
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
    if (w)
        r.id = record(t, n, x, w, AD__NARY_LSE);
    return r;
}
