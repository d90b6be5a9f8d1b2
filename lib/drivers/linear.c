/* dualrev: vector-valued functions — J v, w^T J, whole Jacobians, and a
 * recording kept as a linear map to apply any number of times.
 *
 * One recording is the linearisation of f at x ("You Only Linearize Once"):
 * the forward sweep (tangent.c) applies J, the reverse sweep (resolve.c)
 * applies its transpose. */
#include <string.h>

#include "block.h"
#include "pair.h"
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

/* Lanes for a block of `count` rows or columns: 1, 2 or AD_LANES. */
static size_t lanes_for(size_t count)
{
    return count == 1 ? 1 : count == 2 ? 2 : AD_LANES;
}

/* A block of B rows or columns of J, from j0 (of m or n), L lanes, and
 * the top of its sweeps. */
typedef struct jac_block {
    double *jac;
    size_t n, m, j0, B, L;
    uint32_t top;
} jac_block;

/* One pass of a block of columns (seeded.h, ad_pass): one forward sweep,
 * seeded scaled; an exact pass takes the block's columns one by one. */
static double columns_pass(ad_tape *t, const ad_retry *r, void *ctx)
{
    const jac_block *c = ctx;
    double *tan = t->adj, sum = 0.0;
    size_t n = c->n, i0 = c->j0, B = c->B, L = c->L;
    if (r->exact) {
        for (size_t b = 0; b < B; b++) {
            memset(tan, 0, (n + 1) * sizeof *tan);
            tan[i0 + b + 1] = r->scale;
            ad_reach_mark(t, (uint32_t)(i0 + b + 1));
            ad_tangent_reached(t, tan, c->top);
            ad_reach_clear(t, c->top);
            sum += ad_results_of(r, c->jac + i0 + b, n, tan, 1, t->outputs, c->m);
        }
        return sum;
    }
    memset(tan, 0, (n + 1) * L * sizeof *tan);
    for (size_t b = 0; b < B; b++)
        tan[(i0 + b + 1) * L + b] = r->scale;
    ad_tangent(t, tan, c->top, L);
    for (size_t b = 0; b < B; b++)
        sum += ad_results_of(r, c->jac + i0 + b, n, tan + b, L, t->outputs, c->m);
    return sum;
}

/* Columns of J, AD_LANES at a time (seeded.h, "Scaled seeds"). */
static ad_status jacobian_by_columns(ad_tape *t, size_t n, size_t m, uint32_t hi, double *jac)
{
    for (size_t i0 = 0; i0 < n; i0 += AD_LANES) {
        size_t B = n - i0 < AD_LANES ? n - i0 : AD_LANES;
        jac_block c = {jac, n, m, i0, B, lanes_for(B), hi};
        ad_status s = ad_seeded(t, hi, AD_SEEDED_EXACT, columns_pass, &c, NULL);
        if (s != AD_OK)
            return s;
    }
    return AD_OK;
}

/* Rows j0 .. j0 + B of J from the inputs' cotangents, lane b row j0 + b,
 * scaled back (ad_results); returns their sum.  Written once for each
 * lane count, so that the loop knows its stride; on a first pass two rows
 * go by pairs of lanes (ad_unscale's work, one load and one multiplication
 * for both: per-observation Jacobians of tiny functions are all
 * overhead). */
AD_INLINE double rows_out(const double *adj, size_t n, size_t j0, size_t B, double *jac,
                       const ad_retry *r, const size_t L)
{
#ifdef AD_PAIRS
    if (L == 2 && B == 2 && !r->pass) {
        double u = ad_seed_back(r->scale), *r0 = jac + j0 * n, *r1 = r0 + n;
        ad_pair sum = {0.0, 0.0}, us = {u, u}, zero = {0.0, 0.0};
        for (size_t i = 0; i < n; i++) {
            ad_pair g = *(const ad_pair *)(adj + (i + 1) * 2);
            sum += g;
            g = g * us + zero;  /* ad_result */
            r0[i] = g[0];
            r1[i] = g[1];
        }
        return sum[0] + sum[1];
    }
#endif
    double total = 0.0;
    for (size_t b = 0; b < B; b++)
        total += ad_results(r, jac + (j0 + b) * n, 1, adj + L + b, L, n);
    return total;
}

static double rows_out_any(const double *adj, size_t n, size_t j0, size_t B, double *jac,
                        const ad_retry *r, size_t L)
{
    return L == 1   ? rows_out(adj, n, j0, B, jac, r, 1)
           : L == 2 ? rows_out(adj, n, j0, B, jac, r, 2)
                    : rows_out(adj, n, j0, B, jac, r, AD_LANES);
}

/* One pass of a block of rows (seeded.h, ad_pass): one reverse sweep,
 * from the block's highest output down, seeded scaled; an exact pass
 * takes the block's rows one by one. */
static double rows_pass(ad_tape *t, const ad_retry *r, void *ctx)
{
    const jac_block *c = ctx;
    double *adj = t->adj;
    size_t n = c->n, j0 = c->j0, B = c->B, L = c->L;
    uint32_t top = c->top;
    if (r->exact) {
        double sum = 0.0;
        for (size_t b = 0; b < B; b++) {
            uint32_t out = t->outputs[j0 + b].id;
            memset(adj, 0, ((size_t)top + 1) * sizeof *adj);
            adj[out] = r->scale;
            ad_reach_mark(t, out);
            ad_resolve_reached(t, adj, top);
            ad_reach_clear(t, top);
            sum += ad_results(r, c->jac + (j0 + b) * n, 1, adj + 1, 1, n);
        }
        return sum;
    }
    memset(adj, 0, ((size_t)top + 1) * L * sizeof *adj);
    for (size_t b = 0; b < B; b++)
        adj[(size_t)t->outputs[j0 + b].id * L + b] += r->scale;
    ad_resolve(t, adj, top, L);
    return rows_out_any(adj, n, j0, B, c->jac, r, L);
}

/* Rows of J, AD_LANES at a time, each block swept from its highest output
 * down (hi, every output's, for a single block) (seeded.h, "Scaled
 * seeds"). */
static ad_status jacobian_by_rows(ad_tape *t, size_t n, size_t m, uint32_t hi, double *jac)
{
    for (size_t j0 = 0; j0 < m; j0 += AD_LANES) {
        size_t B = m - j0 < AD_LANES ? m - j0 : AD_LANES;
        uint32_t top = B == m ? hi : ad_outputs_top_of(t, j0, B);
        jac_block c = {jac, n, m, j0, B, lanes_for(B), top};
        ad_status s = ad_seeded(t, top, AD_SEEDED_EXACT | AD_SEEDED_OVER, rows_pass, &c, NULL);
        if (s != AD_OK)
            return s;
    }
    return AD_OK;
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
        s = ad_tape_borrow_adjoints(t, ((size_t)hi + 1) * AD_LANES);
    if (s != AD_OK)
        goto fail;
    /* Recorded once; then whichever of n forward or m reverse sweeps is
     * fewer, unless an external function has no forward rule. */
    if (n <= m && !(t->traits & AD_BLOCK_NO_JVP))
        s = jacobian_by_columns(t, n, m, hi, jac);
    else
        s = jacobian_by_rows(t, n, m, hi, jac);
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

void ad_linear_free(ad_linear *L)
{
    if (!L)
        return;
    ad_tape_free(&L->tape);
    ad_free(L);
}
