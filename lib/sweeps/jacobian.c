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

/* A block of B directions from j0, in L lanes, and the top of its
 * sweeps.  Direction j seeds e_j (dirs NULL: a column or row of J) or
 * dirs[j * len ..] (len n forward, m reverse); its results go to out + j
 * * step, consecutive ones `to` apart (a Jacobian's column: step 1, to n;
 * row: step n, to 1; J v_j: step m, to 1). */
typedef struct jac_block {
    double *out;
    size_t step, to;
    const double *dirs;
    size_t n, m, j0, B, L;
    uint32_t top;
} jac_block;

/* Tangents of the inputs of lane b (stride L) for direction j, scaled;
 * an exact pass also marks the inputs it seeds. */
static void seed_inputs(ad_tape *t, const jac_block *c, double *tan, size_t j, size_t b,
                        const ad_retry *r, size_t L)
{
    size_t n = c->n;
    if (!c->dirs) {
        tan[(j + 1) * L + b] = r->scale;
        if (r->exact)
            ad_reach_mark(t, (uint32_t)(j + 1));
        return;
    }
    const double *v = c->dirs + j * n;
    for (size_t i = 0; i < n; i++) {
        tan[(i + 1) * L + b] = v[i] * r->scale;
        if (r->exact && v[i] != 0.0)
            ad_reach_mark(t, (uint32_t)(i + 1));
    }
}

/* One pass of a block of directions forward (seeded.h, ad_pass): one
 * forward sweep in lanes, seeded scaled; an exact pass takes the block's
 * directions one by one. */
static double columns_pass(ad_tape *t, const ad_retry *r, void *ctx)
{
    const jac_block *c = ctx;
    double *tan = t->adj, sum = 0.0;
    size_t n = c->n, j0 = c->j0, B = c->B, L = c->L;
    if (r->exact) {
        t->adj_zero = 0;
        for (size_t b = 0; b < B; b++) {
            memset(tan, 0, (n + 1) * sizeof *tan);
            seed_inputs(t, c, tan, j0 + b, 0, r, 1);
            ad_tangent_reached(t, tan, c->top);
            ad_reach_clear(t, c->top);
            sum += ad_results_of(r, c->out + (j0 + b) * c->step, c->to, tan, 1, t->outputs, c->m);
        }
        return sum;
    }
    t->adj_zero = 0;  /* the tangents stay */
    memset(tan, 0, (n + 1) * L * sizeof *tan);
    for (size_t b = 0; b < B; b++)
        seed_inputs(t, c, tan, j0 + b, b, r, L);
    ad_tangent(t, tan, c->top, L);
    for (size_t b = 0; b < B; b++)
        sum += ad_results_of(r, c->out + (j0 + b) * c->step, c->to, tan + b, L, t->outputs, c->m);
    return sum;
}

/* k directions forward, AD_LANES at a time (seeded.h, "Scaled seeds"). */
static ad_status forward_blocks(ad_tape *t, jac_block c, size_t k)
{
    for (c.j0 = 0; c.j0 < k; c.j0 += AD_LANES) {
        c.B = k - c.j0 < AD_LANES ? k - c.j0 : AD_LANES;
        c.L = lanes_for(c.B);
        ad_status s = ad_seeded(t, c.top, AD_SEEDED_EXACT, columns_pass, &c, NULL);
        if (s != AD_OK)
            return s;
    }
    return AD_OK;
}

ad_status ad_jacobian_columns(ad_tape *t, size_t n, size_t m, uint32_t hi, double *jac)
{
    jac_block c = {jac, 1, n, NULL, n, m, 0, 0, 0, hi};
    return forward_blocks(t, c, n);
}

ad_status ad_directions_forward(ad_tape *t, size_t n, size_t m, uint32_t hi, size_t k,
                                const double *V, double *JV)
{
    jac_block c = {JV, m, 1, V, n, m, 0, 0, 0, hi};
    return forward_blocks(t, c, k);
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

/* Cotangents of the outputs in lane b (stride L) for direction j, scaled
 * (outputs that share an ID add up); an exact pass also marks the outputs
 * it seeds. */
static void seed_outputs(ad_tape *t, const jac_block *c, double *adj, size_t j, size_t b,
                         const ad_retry *r, size_t L)
{
    if (!c->dirs) {
        uint32_t out = t->outputs[j].id;
        adj[(size_t)out * L + b] += r->scale;
        if (r->exact)
            ad_reach_mark(t, out);
        return;
    }
    const double *w = c->dirs + j * c->m;
    for (size_t q = 0; q < c->m; q++) {
        uint32_t out = t->outputs[q].id;
        adj[(size_t)out * L + b] += w[q] * r->scale;
        if (r->exact && w[q] != 0.0)
            ad_reach_mark(t, out);
    }
}

/* One pass of a block of rows or directions backward (seeded.h,
 * ad_pass): one reverse sweep in lanes, from the block's highest output
 * down, seeded scaled; an exact pass takes the block's rows one by one. */
static double rows_pass(ad_tape *t, const ad_retry *r, void *ctx)
{
    const jac_block *c = ctx;
    double *adj = t->adj;
    size_t n = c->n, j0 = c->j0, B = c->B, L = c->L;
    uint32_t top = c->top;
    if (r->exact) {
        double sum = 0.0;
        t->adj_zero = 0;  /* the exact sweep leaves what it did not reach */
        for (size_t b = 0; b < B; b++) {
            memset(adj, 0, ((size_t)top + 1) * sizeof *adj);
            seed_outputs(t, c, adj, j0 + b, 0, r, 1);
            ad_resolve_reached(t, adj, top);
            ad_reach_clear(t, top);
            sum += ad_results(r, c->out + (j0 + b) * n, 1, adj + 1, 1, n);
        }
        return sum;
    }
    /* the sweep leaves its records' cotangents 0, as ad_reverse's does:
     * only what no sweep has cleared is cleared, and the inputs' and the
     * sink's after the results are read */
    size_t need = ((size_t)top + 1) * L;
    ad_tape_zero_adjoints(t, need);
    for (size_t b = 0; b < B; b++)
        seed_outputs(t, c, adj, j0 + b, b, r, L);
    ad_resolve(t, adj, top, L);
    double sum = rows_out_any(adj, n, j0, B, c->out, r, L);
    memset(adj, 0, (n + 1) * L * sizeof *adj);
    return sum;
}

/* A block whose last pass overflowed with a NaN among its results: which
 * of its rows does (the NaN may be another row's own, the overflow yet
 * another's), each swept alone as ad_reverse sweeps it. */
static ad_status reverse_one_by_one(ad_tape *t, jac_block c)
{
    size_t j0 = c.j0, B = c.B;
    for (size_t b = 0; b < B; b++) {
        c.j0 = j0 + b;
        c.B = c.L = 1;
        if (!c.dirs)
            c.top = ad_outputs_top_of(t, c.j0, 1);
        ad_status s = ad_seeded(t, c.top, AD_SEEDED_EXACT | AD_SEEDED_OVER, rows_pass, &c, NULL);
        if (s != AD_OK)
            return s;
    }
    return AD_OK;
}

/* k rows or directions backward, AD_LANES at a time, each block of rows
 * swept from its highest output down (seeded.h, "Scaled seeds"). */
static ad_status reverse_blocks(ad_tape *t, jac_block c, size_t k)
{
    uint32_t hi = c.top;
    for (c.j0 = 0; c.j0 < k; c.j0 += AD_LANES) {
        c.B = k - c.j0 < AD_LANES ? k - c.j0 : AD_LANES;
        c.L = lanes_for(c.B);
        c.top = c.dirs || c.B == c.m ? hi : ad_outputs_top_of(t, c.j0, c.B);
        ad_status s = ad_seeded(t, c.top, AD_SEEDED_EXACT | AD_SEEDED_OVER, rows_pass, &c, NULL);
        if (s == AD_EOVERFLOW && c.B > 1)
            s = reverse_one_by_one(t, c);
        if (s != AD_OK)
            return s;
    }
    return AD_OK;
}

ad_status ad_jacobian_rows(ad_tape *t, size_t n, size_t m, uint32_t hi, double *jac)
{
    jac_block c = {jac, n, 1, NULL, n, m, 0, 0, 0, hi};
    return reverse_blocks(t, c, m);
}

ad_status ad_directions_reverse(ad_tape *t, size_t n, size_t m, uint32_t hi, size_t k,
                                const double *W, double *WJ)
{
    jac_block c = {WJ, n, 1, W, n, m, 0, 0, 0, hi};
    return reverse_blocks(t, c, k);
}
