/* dualrev: functions dualrev cannot see, differentiated by the user's rules.
 *
 * A block record (block.h) holding the rule, the user's ctx, and copies of
 * x and y taken when it ran, which the rules receive in every sweep. */
#include <math.h>
#include <string.h>

#include "block.h"
#include "check.h"
#include "collective.h"
#include "listing.h"
#include "status.h"

typedef struct external {
    ad_block base;
    ad_rule rule;
    void *ctx;
    size_t n, m;
    size_t ctx_at;  /* a collective record's copy of ctx, at this offset; 0: ctx */
    /* then: double x[n], y[m]; uint32_t ids[n]; the copy of ctx */
} external;

static void *ext_ctx(const external *e)
{
    return e->ctx_at ? (void *)((char *)(uintptr_t)e + e->ctx_at) : e->ctx;
}

static const double *ext_x(const external *e)
{
    return (const double *)(const void *)(e + 1);
}

static const double *ext_y(const external *e)
{
    return ext_x(e) + e->n;
}

static void ext_vjp(ad_tape *t, ad_block *b, const double *ybar, double *xbar)
{
    (void)t;
    const external *e = (const external *)b;
    e->rule.vjp(ext_ctx(e), e->n, ext_x(e), e->m, ext_y(e), ybar, xbar);
}

static void ext_jvp(ad_tape *t, ad_block *b, const double *xdot, double *ydot)
{
    (void)t;
    const external *e = (const external *)b;
    e->rule.jvp(ext_ctx(e), e->n, ext_x(e), e->m, ext_y(e), xdot, ydot);
}

/* ---- second order, from the rule's hvp ----
 *
 * The work array (block.h) holds 2m + 3n doubles for these (reserved when
 * the block is recorded): the outputs' cotangents and their tangents, the
 * arguments' tangents, then a vjp's and an hvp's results.  A constant
 * argument (ID 0, the sink) takes no tangent and gives nothing. */

/* out = (sum_k ybar_k H_k) xdot, out zeroed first as vjp's xbar is. */
static void ext_hvp(const external *e, const double *ybar, const double *xdot, double *out)
{
    memset(out, 0, e->n * sizeof *out);
    e->rule.hvp(ext_ctx(e), e->n, ext_x(e), e->m, ext_y(e), ybar, xdot, out);
}

/* xbar = J^T ybar, xbar zeroed first. */
static void ext_pull(const external *e, const double *ybar, double *xbar)
{
    memset(xbar, 0, e->n * sizeof *xbar);
    e->rule.vjp(ext_ctx(e), e->n, ext_x(e), e->m, ext_y(e), ybar, xbar);
}

/* Lane `lane` of the second-order sweep (second_order.c), forward over
 * reverse: adj[x] += J^T ybar (on the first lane only: adj has one), and
 * adjd[x] += J^T ybard + (sum_k ybar_k H_k) xdot.  The sweep raises the
 * nesting depth around it. */
static void ext_second(ad_tape *t, ad_block *b, uint32_t hid, const double *tan, double *adj,
                       double *adjd, size_t L, size_t lane, int first)
{
    const external *e = (const external *)b;
    const uint32_t *ids = ad_block_ids(b);
    size_t n = e->n, m = e->m;
    double *ybar = ad_block_work(t), *ybard = ybar + m, *xdot = ybard + m;
    double *xbar = xdot + n, *hv = xbar + n;
    for (size_t j = 0; j < m; j++) {
        ybar[j] = adj[hid + 1 + j];
        ybard[j] = adjd[(size_t)(hid + 1 + j) * L + lane];
    }
    for (size_t k = 0; k < n; k++)
        xdot[k] = ids[k] ? tan[(size_t)ids[k] * L + lane] : 0.0;
    if (first) {
        ext_pull(e, ybar, xbar);
        for (size_t k = 0; k < n; k++)
            if (ids[k])
                adj[ids[k]] += xbar[k];
    }
    ext_pull(e, ybard, xbar);
    ext_hvp(e, ybar, xdot, hv);
    for (size_t k = 0; k < n; k++)
        if (ids[k])
            adjd[(size_t)ids[k] * L + lane] += xbar[k] + hv[k];
}

/* Edge pushing (edge_push.c): row o of J from one vjp with the unit
 * cotangent e_o.  dualrev cannot see the function, so every entry is
 * structural, a zero included; the constant arguments' are left out. */
static void ext_partials(ad_tape *t, ad_block *b, uint32_t o,
                         void (*each)(void *cx, size_t arg, double d), void *cx)
{
    const external *e = (const external *)b;
    const uint32_t *ids = ad_block_ids(b);
    double *ybar = ad_block_ybar(t);
    memset(ybar, 0, e->m * sizeof *ybar);
    ybar[o] = 1.0;
    const double *xbar = ad_block_pullback(t, b, ybar);
    for (size_t k = 0; k < e->n; k++)
        if (ids[k])
            each(cx, k, xbar[k]);
}

/* sum_k ybar_k H_k, a column a time from hvp along e_a; the pairs a <= b
 * of active arguments, every one structural as above.  ybar lies at the
 * start of the work array (ad_block_ybar), the unit tangent and the
 * column after it. */
static void ext_curvature(ad_tape *t, ad_block *b, const double *ybar,
                          void (*each2)(void *cx, size_t a, size_t b, double v), void *cx)
{
    const external *e = (const external *)b;
    const uint32_t *ids = ad_block_ids(b);
    size_t n = e->n;
    double *xdot = ad_block_work(t) + e->m, *col = xdot + n;
    memset(xdot, 0, n * sizeof *xdot);
    ad_block_enter();
    for (size_t a = 0; a < n; a++) {
        if (!ids[a])
            continue;
        xdot[a] = 1.0;
        ext_hvp(e, ybar, xdot, col);
        xdot[a] = 0.0;
        for (size_t c = a; c < n; c++)
            if (ids[c])
                each2(cx, a, c, col[c]);
    }
    ad_block_leave();
}

/* Without hvp, no second-order rule and no edge-pushing one: ad_hvp and
 * ad_sparse_hessian report AD_ENOTSUP on a tape with the block. */
static const ad_block_kind with_hvp = {.name = "external", .foreign = 1, .vjp = ext_vjp,
                                       .jvp = ext_jvp, .second = ext_second,
                                       .partials = ext_partials, .curvature = ext_curvature};
static const ad_block_kind with_jvp = {.name = "external", .foreign = 1, .vjp = ext_vjp,
                                       .jvp = ext_jvp};
static const ad_block_kind without_jvp = {.name = "external", .foreign = 1,
                                          .vjp = ext_vjp};

/* Collective: no edge-pushing rules, as a sparse Hessian's sweeps, one
 * per output, differ in number from process to process. */
static const ad_block_kind coll_hvp = {.name = "collective", .foreign = 1, .collective = 1,
                                       .vjp = ext_vjp, .jvp = ext_jvp, .second = ext_second};
static const ad_block_kind coll_jvp = {.name = "collective", .foreign = 1, .collective = 1,
                                       .vjp = ext_vjp, .jvp = ext_jvp};
static const ad_block_kind coll_vjp = {.name = "collective", .foreign = 1, .collective = 1,
                                       .vjp = ext_vjp};

static const ad_block_kind *kind_of(const ad_rule *rule, int collective)
{
    if (collective)
        return rule->hvp ? &coll_hvp : rule->jvp ? &coll_jvp : &coll_vjp;
    return rule->hvp ? &with_hvp : rule->jvp ? &with_jvp : &without_jvp;
}

/* The error is kept in the recording, if there is one, so that its caller
 * reports it rather than a gradient that silently lacks this function. */
static ad_status fail(ad_status s, size_t m, ad_real *y)
{
    ad_fill_nan_reals(y, m);
    return ad_fail_recording(s);
}

/* Not recorded: the primal alone, on copies of the values. */
static ad_status run_plain(const ad_rule *rule, void *ctx, size_t n, const ad_real *x, size_t m,
                           ad_real *y)
{
    if (n > SIZE_MAX / sizeof(double) - m)
        return fail(AD_ENOMEM, m, y);
    double *v = ad_alloc((n + m ? n + m : 1) * sizeof *v);
    if (!v)
        return fail(AD_ENOMEM, m, y);
    for (size_t i = 0; i < n; i++)
        v[i] = x[i].v;
    rule->primal(ctx, n, v, m, v + n);
    for (size_t j = 0; j < m; j++)
        y[j] = ad_const(v[n + j]);
    ad_free(v);
    return AD_OK;
}

static int bad_rule(const ad_rule *rule, size_t n, const ad_real *x, size_t m, ad_real *y)
{
    /* hvp without jvp: the second-order sweeps need the outputs' tangents */
    return !rule || !rule->primal || !rule->vjp || (rule->hvp && !rule->jvp) || (n && !x) ||
           (m && !y);
}

/* The block of rule at x on t, the recording: ctx kept, or (ctx_bytes)
 * copied after the arrays, where the rules find it (ext_ctx). */
static ad_status record(ad_tape *t, const ad_rule *rule, const void *ctx, size_t ctx_bytes,
                        int collective, size_t n, const ad_real *x, size_t m, ad_real *y)
{
    if (!ad_reals_mine(t, n, x))
        return fail(AD_EFOREIGN, m, y);
    if (n >= AD__ID_END || m >= AD__ID_END || ctx_bytes > SIZE_MAX / 2 ||
        n + m > (SIZE_MAX / 2 - sizeof(external) - ctx_bytes) / (sizeof(double) + sizeof(uint32_t)))
        return fail(AD_ERANGE, m, y);
    size_t ids_at = sizeof(external) + (n + m) * sizeof(double);
    size_t ctx_at = ctx_bytes ? (ids_at + n * sizeof(uint32_t) + 15) / 16 * 16 : 0;
    size_t size = ctx_bytes ? ctx_at + ctx_bytes : ids_at + n * sizeof(uint32_t);
    int listing = ad_listing_of(t) != NULL;
    if (listing && collective)  /* a program replays without the other processes */
        return fail(AD_ENOTSUP, m, y);
    size_t at = ad_block_new(t, size, (uint32_t)m, (uint32_t)n, 0);
    if (at == SIZE_MAX || (rule->hvp && !ad_block_reserve(t, 2 * m + 3 * n)))
        return fail(AD_ENOMEM, m, y);  /* ext_second's work */
    external *e = (external *)ad_block_at(t, at);
    e->base.kind = kind_of(rule, collective);
    e->base.ids = ids_at;
    e->rule = *rule;
    e->ctx = (void *)(uintptr_t)ctx;
    e->n = n;
    e->m = m;
    e->ctx_at = ctx_at;
    if (ctx_bytes)
        memcpy((char *)e + ctx_at, ctx, ctx_bytes);
    double *xv = (double *)(void *)(e + 1);
    uint32_t *ids = (uint32_t *)(void *)((char *)e + e->base.ids);
    for (size_t i = 0; i < n; i++) {
        xv[i] = x[i].v;
        ids[i] = x[i].id;
    }
    rule->primal((void *)(uintptr_t)ctx, n, xv, m, xv + n);
    if (listing)  /* after the primal, whose own primitives announce theirs */
        ad_listing_expect(t);
    uint32_t first = ad_block_record(t, at);
    if (!first)
        return fail(t->status, m, y);
    e = (external *)ad_block_at(t, at);
    if (collective)
        t->traits |= AD_COLLECTIVE_TAPE;
    if (!ad_check_block(t, e->base.kind->name, n, ext_x(e), m, ext_y(e), first))
        return fail(AD_ENONFINITE, m, y);
    if (listing) {
        ad_listing_call(t, &(ad_call){.rule = *rule, .ctx = (void *)(uintptr_t)ctx, .n = n, .m = m},
                        x, NULL, first, ext_y(e));
        if (t->status != AD_OK)
            return fail(t->status, m, y);
    }
    for (size_t j = 0; j < m; j++)
        y[j] = ad__made(ext_y(e)[j], first + (uint32_t)j);
    return AD_OK;
}

ad_status ad_external(const ad_rule *rule, void *ctx, size_t n, const ad_real *x, size_t m,
                      ad_real *y)
{
    if (bad_rule(rule, n, x, m, y))
        return fail(AD_EINVAL, m, y);
    ad_tape *t = ad_recording();
    if (!t || !ad_any_active(n, x) || m == 0)
        return run_plain(rule, ctx, n, x, m, y);
    return record(t, rule, ctx, 0, 0, n, x, m, y);
}

ad_status ad_external_collective(const ad_rule *rule, const void *ctx, size_t ctx_bytes,
                                 int active, size_t n, const ad_real *x, size_t m, ad_real *y)
{
    if (bad_rule(rule, n, x, m, y) || (ctx_bytes && !ctx))
        return fail(AD_EINVAL, m, y);
    ad_tape *t = ad_recording();
    if (!t || !active)
        return run_plain(rule, (void *)(uintptr_t)ctx, n, x, m, y);
    return record(t, rule, ctx, ctx_bytes, 1, n, x, m, y);
}
