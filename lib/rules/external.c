/* dualrev: functions dualrev cannot see, differentiated by the user's rules.
 *
 * A block record (block.h) holding the rule, the user's ctx, and copies of
 * x and y taken when it ran, which the rules receive in every sweep. */
#include <math.h>
#include <string.h>

#include "block.h"
#include "check.h"
#include "status.h"

typedef struct external {
    ad_block base;
    ad_rule rule;
    void *ctx;
    size_t n, m;
    /* then: double x[n], y[m]; uint32_t ids[n] */
} external;

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
    e->rule.vjp(e->ctx, e->n, ext_x(e), e->m, ext_y(e), ybar, xbar);
}

static void ext_jvp(ad_tape *t, ad_block *b, const double *xdot, double *ydot)
{
    (void)t;
    const external *e = (const external *)b;
    e->rule.jvp(e->ctx, e->n, ext_x(e), e->m, ext_y(e), xdot, ydot);
}

/* No second-order rule: ad_hvp reports AD_ENOTSUP on a tape with one. */
static const ad_block_kind with_jvp = {.name = "external", .foreign = 1, .vjp = ext_vjp,
                                       .jvp = ext_jvp};
static const ad_block_kind without_jvp = {.name = "external", .foreign = 1,
                                          .vjp = ext_vjp};

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

ad_status ad_external(const ad_rule *rule, void *ctx, size_t n, const ad_real *x, size_t m,
                      ad_real *y)
{
    if (!rule || !rule->primal || !rule->vjp || (n && !x) || (m && !y))
        return fail(AD_EINVAL, m, y);
    ad_tape *t = ad_recording();
    if (!t || !ad_any_active(n, x) || m == 0)
        return run_plain(rule, ctx, n, x, m, y);
    if (!ad_reals_mine(t, n, x))
        return fail(AD_EFOREIGN, m, y);
    if (n >= AD__ID_END || m >= AD__ID_END ||
        n + m > (SIZE_MAX - sizeof(external)) / (sizeof(double) + sizeof(uint32_t)))
        return fail(AD_ERANGE, m, y);
    size_t size = sizeof(external) + (n + m) * sizeof(double) + n * sizeof(uint32_t);
    size_t at = ad_block_new(t, size, (uint32_t)m, (uint32_t)n, 0);
    if (at == SIZE_MAX)
        return fail(AD_ENOMEM, m, y);
    external *e = (external *)ad_block_at(t, at);
    e->base.kind = rule->jvp ? &with_jvp : &without_jvp;
    e->base.ids = sizeof(external) + (n + m) * sizeof(double);
    e->rule = *rule;
    e->ctx = ctx;
    e->n = n;
    e->m = m;
    double *xv = (double *)(void *)(e + 1);
    uint32_t *ids = (uint32_t *)(void *)((char *)e + e->base.ids);
    for (size_t i = 0; i < n; i++) {
        xv[i] = x[i].v;
        ids[i] = x[i].id;
    }
    rule->primal(ctx, n, xv, m, xv + n);
    uint32_t first = ad_block_record(t, at);
    if (!first)
        return fail(t->status, m, y);
    e = (external *)ad_block_at(t, at);
    if (!ad_check_block(t, e->base.kind->name, n, ext_x(e), m, ext_y(e), first))
        return fail(AD_ENONFINITE, m, y);
    for (size_t j = 0; j < m; j++)
        y[j] = ad__made(ext_y(e)[j], first + (uint32_t)j);
    return AD_OK;
}
