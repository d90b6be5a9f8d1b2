/* dualrev: a whole Jacobian's sweeps, a block of rows or columns at a time
 * in lanes (ad_jacobian). */
#include <string.h>

#include "jacobian.h"
#include "pair.h"
#include "seeded.h"
#include "sweep.h"

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
ad_status ad_jacobian_columns(ad_tape *t, size_t n, size_t m, uint32_t hi, double *jac)
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
ad_status ad_jacobian_rows(ad_tape *t, size_t n, size_t m, uint32_t hi, double *jac)
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
