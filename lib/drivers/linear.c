/* dualrev: vector-valued functions — J v, w^T J, whole Jacobians, and a
 * recording kept as a linear map to apply any number of times.
 *
 * One recording is the linearisation of f at x ("You Only Linearize Once"):
 * the forward sweep (tangent.c) applies J, the reverse sweep (resolve.c)
 * applies its transpose; whole Jacobians take blocks of them in lanes
 * (sweeps/jacobian.c). */
#include <string.h>

#include "alloc.h"
#include "block.h"
#include "check.h"
#include "jacobian.h"
#include "recording.h"
#include "seeded.h"
#include "status.h"
#include "sweep.h"

struct ad_linear {
    ad_tape tape;  /* its own, not the thread's: it outlives the call */
    size_t n, m;
};

static int bad_args(ad_function f, size_t n, const double *x, size_t m, const double *y)
{
    return !f || (n && !x) || (m && !y);
}

typedef ad_status (*sweep)(ad_tape *t, size_t m, const double *in, double *out);

/* Record f on the thread's tape, then one sweep from `in` to `out`. */
static ad_status record_and_sweep(ad_function f, void *ctx, size_t n, const double *x, size_t m,
                                  double *y, sweep run, const double *in, size_t in_len,
                                  double *out, size_t out_len)
{
    ad_tape *t = ad_thread_tape();
    ad_status s = AD_EINVAL;
    if (bad_args(f, n, x, m, y) || (in_len && !in) || (out_len && !out))
        goto fail;
    s = ad_record(t, f, ctx, n, x, m, 0);
    if (s == AD_OK)
        s = run(t, m, in, out);
    if (s != AD_OK)
        goto fail;
    ad_read_outputs(t, m, y);
    return AD_OK;
fail:
    ad_fill_nan(y, m);
    ad_fill_nan(out, out_len);
    return s;
}

ad_status ad_jvp(ad_function f, void *ctx, size_t n, const double *x, const double *v,
                 size_t m, double *y, double *jv)
{
    return record_and_sweep(f, ctx, n, x, m, y, ad_forward, v, n, jv, m);
}

ad_status ad_vjp(ad_function f, void *ctx, size_t n, const double *x, size_t m,
                 const double *w, double *y, double *wj)
{
    return record_and_sweep(f, ctx, n, x, m, y, ad_reverse, w, m, wj, n);
}

ad_status ad_jacobian(ad_function f, void *ctx, size_t n, const double *x, size_t m,
                      double *y, double *jac)
{
    ad_tape *t = ad_thread_tape();
    ad_status s = AD_EINVAL;
    if (bad_args(f, n, x, m, y) || (n && m && !jac))
        goto fail;
    s = ad_record(t, f, ctx, n, x, m, 0);
    uint32_t hi = s == AD_OK ? ad_outputs_top(t, m) : 0;
    if (s == AD_OK)  /* for the sweeps' lanes */
        s = ad_tape_reserve_lanes(t, ((size_t)hi + 1) * AD_LANES);
    if (s != AD_OK)
        goto fail;
    /* Recorded once; then whichever of n forward or m reverse sweeps is
     * fewer, unless an external function has no forward rule. */
    if (n <= m && !(t->traits & AD_BLOCK_NO_JVP))
        s = ad_jacobian_columns(t, n, m, hi, jac);
    else
        s = ad_jacobian_rows(t, n, m, hi, jac);
    if (s != AD_OK)
        goto fail;
    ad_read_outputs(t, m, y);
    return AD_OK;
fail:
    ad_fill_nan(y, m);
    if (n && m)
        ad_fill_nan(jac, n * m);
    return s;
}

ad_status ad_linearize(ad_function f, void *ctx, size_t n, const double *x, size_t m,
                       double *y, ad_linear **out)
{
    ad_status s = AD_EINVAL;
    ad_linear *L = NULL;
    if (bad_args(f, n, x, m, y) || !out)
        goto fail;
    s = AD_ENOMEM;
    L = ad_alloc(sizeof *L);
    if (!L)
        goto fail;
    memset(L, 0, sizeof *L);
    L->n = n;
    L->m = m;
    s = ad_record(&L->tape, f, ctx, n, x, m, 0);
    /* The sweeps' work array and marks (seeded.h, ad_retry) are reserved
     * now, so applying L allocates nothing. */
    if (s == AD_OK)
        s = ad_tape_reserve_adjoints(&L->tape, ad_outputs_top(&L->tape, m));
    if (s == AD_OK)
        s = ad_reach_reserve(&L->tape, ad_outputs_top(&L->tape, m));
    if (s != AD_OK)
        goto fail;
    ad_read_outputs(&L->tape, m, y);
    *out = L;
    return AD_OK;
fail:
    ad_linear_free(L);
    if (out)
        *out = NULL;
    ad_fill_nan(y, m);
    return s;
}

ad_status ad_linear_jvp(ad_linear *L, const double *v, double *jv)
{
    if (!L || (L->n && !v) || (L->m && !jv)) {
        ad_fill_nan(jv, L ? L->m : 0);
        return AD_EINVAL;
    }
    ad_status s = ad_forward(&L->tape, L->m, v, jv);
    if (s != AD_OK)
        ad_fill_nan(jv, L->m);
    return s;
}

ad_status ad_linear_vjp(ad_linear *L, const double *w, double *wj)
{
    if (!L || (L->m && !w) || (L->n && !wj)) {
        ad_fill_nan(wj, L ? L->n : 0);
        return AD_EINVAL;
    }
    ad_status s = ad_reverse(&L->tape, L->m, w, wj);
    if (s != AD_OK)
        ad_fill_nan(wj, L->n);
    return s;
}

/* With AD_CHECK_FINITE: the fault of the first direction whose results
 * are not all finite, as one ad_linear_jvp / ad_linear_vjp finds it. */
static ad_status check_directions(ad_tape *t, int forward, size_t k, const double *in,
                                  size_t in_len, const double *out, size_t out_len, uint32_t hi)
{
    for (size_t j = 0; j < k; j++) {
        const double *o = out + j * out_len;
        double sum = 0.0;
        for (size_t i = 0; i < out_len; i++)
            sum += o[i];
        if (sum - sum == 0.0)
            continue;
        const double *d = in + j * in_len;
        ad_status s = forward ? ad_check_forward(t, d, hi) : ad_check_reverse(t, in_len, d, hi);
        if (s != AD_OK)
            return s;
    }
    return AD_OK;
}

/* k directions through L's recording, AD_LANES a sweep. */
static ad_status directions(ad_linear *L, int forward, size_t k, const double *in, double *out)
{
    size_t in_len = forward ? L->n : L->m, out_len = forward ? L->m : L->n;
    ad_tape *t = &L->tape;
    uint32_t hi = ad_outputs_top(t, L->m);
    ad_status s = forward && t->traits & AD_BLOCK_NO_JVP ? AD_ENOTSUP : AD_OK;
    if (s == AD_OK)  /* the lanes' room, kept for later calls */
        s = ad_tape_reserve_lanes(t, ((size_t)hi + 1) * AD_LANES);
    if (s == AD_OK)
        s = forward ? ad_directions_forward(t, L->n, L->m, hi, k, in, out)
                    : ad_directions_reverse(t, L->n, L->m, hi, k, in, out);
    if (s == AD_OK && t->checks)
        s = check_directions(t, forward, k, in, in_len, out, out_len, hi);
    return s;
}

/* ad_linear_jvps and ad_linear_vjps: in (k rows of in_len) to out (k rows
 * of out_len). */
static ad_status apply_many(ad_linear *L, int forward, size_t k, const double *in, double *out)
{
    size_t in_len = L ? (forward ? L->n : L->m) : 0, out_len = L ? (forward ? L->m : L->n) : 0;
    if (!k)
        return L ? AD_OK : AD_EINVAL;
    if (!L || !ad_size_fits(k, in_len) || !ad_size_fits(k, out_len) || (in_len && !in) ||
        (out_len && !out)) {
        if (ad_size_fits(k, out_len))
            ad_fill_nan(out, k * out_len);
        return AD_EINVAL;
    }
    ad_status s = directions(L, forward, k, in, out);
    if (s != AD_OK)
        ad_fill_nan(out, k * out_len);
    return s;
}

ad_status ad_linear_jvps(ad_linear *L, size_t k, const double *V, double *JV)
{
    return apply_many(L, 1, k, V, JV);
}

ad_status ad_linear_vjps(ad_linear *L, size_t k, const double *W, double *WJ)
{
    return apply_many(L, 0, k, W, WJ);
}

void ad_linear_free(ad_linear *L)
{
    if (!L)
        return;
    ad_tape_free(&L->tape);
    ad_free(L);
}
