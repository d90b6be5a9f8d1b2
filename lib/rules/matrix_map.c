/* dualrev: element-wise maps C = f(A) of recorded matrices (ad_mat_map_*,
 * include/dualrev/matrix.h).
 *
 * One block whose m n outputs are C's entries (a derived matrix,
 * mat_block.h), its argument the run of A's entries.  It keeps C's values
 * and each entry's partial f'(a), computed in the forward pass as the
 * scalar operation of the same name computes it, and for a user's function
 * its second partial f''(a) too (its ctx need not outlive the call); a
 * library function's second partial is formed in the sweep from a, f(a)
 * and f'(a) as lib/modes/second.c forms the scalar operation's.
 *   reverse  abar_q += f'(a_q) cbar_q
 *   forward  cdot_q = f'(a_q) adot_q
 *   second   abar'_q += f'(a_q) cbar'_q + f''(a_q) adot_q cbar_q
 *   edges    partial f'(a_q), curvature cbar_q f''(a_q) on (a_q, a_q). */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "mat_block.h"
#include "seeded.h"
#include "status.h"

#define USER (-1)

/* After C's values (mat_block.h, ad_mat_block_tail). */
typedef struct map {
    size_t m, n;
    size_t src;    /* offset of A's block */
    uint32_t a0;   /* A's first entry ID */
    int op;        /* ad_map_op, or USER */
    int curved;    /* second partials may be nonzero */
    /* then: double d[m n], and h[m n] for USER */
} map;

static const map *info(const ad_block *b)
{
    const ad_matrix_block *B = (const ad_matrix_block *)b;
    return (const map *)(const void *)((const char *)b + ad_mat_block_tail(B->rows, B->cols));
}

static const char *const names[AD_MAP_COUNT] = {
    "matrix map tanh", "matrix map exp", "matrix map log", "matrix map sqrt", "matrix map sin",
    "matrix map cos", "matrix map logistic", "matrix map relu", "matrix map square"};

static size_t count(const map *p)
{
    return p->m * p->n;
}

static const double *map_y(const map *p)
{
    return (const double *)(const void *)p - count(p);
}

static const double *map_d(const map *p)
{
    return (const double *)(const void *)(p + 1);
}

static const double *map_h(const map *p)
{
    return map_d(p) + count(p);
}

static const double *map_a(const ad_tape *t, const map *p)
{
    return ad_mat_block_values((const ad_matrix_block *)ad_block_at(t, p->src));
}

/* Value and partial of op at x, as ops.h's scalar operation makes them. */
static double value_partial(int op, double x, double *d)
{
    double y, e;
    switch (op) {
    case AD_MAP_TANH: {
        double s = 1.0 / cosh(x);
        *d = s * s;
        return tanh(x);
    }
    case AD_MAP_EXP:
        y = exp(x);
        *d = y;
        return y;
    case AD_MAP_LOG:
        y = log(x);
        *d = ad__nan_with(y, 1.0 / fabs(x));
        return y;
    case AD_MAP_SQRT:
        y = sqrt(x);
        *d = 0.5 / fabs(y);
        return y;
    case AD_MAP_SIN:
        *d = cos(x);
        return sin(x);
    case AD_MAP_COS:
        *d = -sin(x);
        return cos(x);
    case AD_MAP_LOGISTIC:  /* e = e^-|x| <= 1: nothing overflows */
        e = exp(-fabs(x));
        *d = e / ((1.0 + e) * (1.0 + e));
        return x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    case AD_MAP_RELU:
        *d = ad__select_weight(x, 0.0, x > 0.0);
        return ad__fmax(x, 0.0);
    default:  /* AD_MAP_SQUARE: ad_mul(x, x)'s two partials x, added */
        *d = 2.0 * x;
        return x * x;
    }
}

/* The second partial at x, from y = f(x) and d = f'(x) (second.c). */
static double second_partial(int op, double x, double y, double d)
{
    switch (op) {
    case AD_MAP_TANH: return -2.0 * y * d;
    case AD_MAP_EXP: return y;
    case AD_MAP_LOG: return -d * d;
    case AD_MAP_SQRT: return -0.5 * d / fabs(x);
    case AD_MAP_SIN: return -y;
    case AD_MAP_COS: return -y;
    case AD_MAP_LOGISTIC: return -d * tanh(0.5 * x);  /* d (1 - 2 y), without cancelling */
    case AD_MAP_RELU: return 0.0;
    default: return 2.0;  /* AD_MAP_SQUARE */
    }
}

static double h_at(const ad_tape *t, const map *p, size_t q)
{
    if (p->op == USER)
        return map_h(p)[q];
    return second_partial(p->op, map_a(t, p)[q], map_y(p)[q], map_d(p)[q]);
}

/* ---- rules ---- */

static void map_vjp(ad_tape *t, ad_block *b, const double *ybar, double *xbar)
{
    (void)t;
    const map *p = info(b);
    const double *d = map_d(p);
    for (size_t q = 0; q < count(p); q++)
        xbar[q] = d[q] * ybar[q];
}

static void map_reverse(ad_tape *t, ad_block *b, uint32_t hid, double *adj, size_t L, size_t lane)
{
    const map *p = info(b);
    ad_mat_flush(t, (const ad_matrix_block *)b, hid, adj, L, lane);
    const double *d = map_d(p);
    size_t mn = count(p);
    if (L == 1) {
        double *restrict ab = adj + p->a0;
        const double *restrict cb = adj + hid + 1;
        for (size_t q = 0; q < mn; q++)
            ab[q] += d[q] * cb[q];
        return;
    }
    for (size_t q = 0; q < mn; q++)
        adj[((size_t)p->a0 + q) * L + lane] += d[q] * adj[((size_t)hid + 1 + q) * L + lane];
}

/* A NaN from a partial against a tangent that is zero by structure (an
 * exact sweep's entry not reached) is 0, as the scalar sweep's. */
static void map_forward(ad_tape *t, ad_block *b, uint32_t hid, double *tan, size_t L, size_t lane)
{
    const map *p = info(b);
    const double *d = map_d(p);
    for (size_t q = 0; q < count(p); q++) {
        double v = d[q] * tan[((size_t)p->a0 + q) * L + lane];
        if (AD__UNLIKELY(v != v) && ad_tangent_zero(t, p->a0 + (uint32_t)q))
            v = 0.0;
        tan[((size_t)hid + 1 + q) * L + lane] = v;
    }
}

/* A zero second partial adds nothing, even against a NaN tangent. */
static void map_second(ad_tape *t, ad_block *b, uint32_t hid, const double *tan, double *adj,
                       double *adjd, size_t L, size_t lane, int first)
{
    const map *p = info(b);
    const double *d = map_d(p);
    for (size_t q = 0; q < count(p); q++) {
        size_t a = (size_t)p->a0 + q, o = (size_t)hid + 1 + q;
        double z = adj[o], h = p->curved ? h_at(t, p, q) : 0.0;
        if (first)
            adj[a] += d[q] * z;
        double term = d[q] * adjd[o * L + lane];
        if (h != 0.0)
            term += h * tan[a * L + lane] * z;
        adjd[a * L + lane] += term;
    }
}

static void map_reach(const ad_block *b, const unsigned char *outs, unsigned char *args)
{
    memcpy(args, outs, count(info(b)));
}

static void map_partials(ad_tape *t, ad_block *b, uint32_t o,
                         void (*each)(void *cx, size_t arg, double d), void *cx)
{
    (void)t;
    each(cx, o, map_d(info(b))[o]);
}

static void map_curvature(ad_tape *t, ad_block *b, const double *ybar,
                          void (*each2)(void *cx, size_t a, size_t b, double v), void *cx)
{
    const map *p = info(b);
    for (size_t q = 0; p->curved && q < count(p); q++)
        each2(cx, q, q, ybar[q] * h_at(t, p, q));
}

static const ad_block_kind map_kind = {
    .name = "matrix map", .vjp = map_vjp, .reverse = map_reverse, .forward = map_forward,
    .second = map_second, .reach = map_reach, .partials = map_partials,
    .curvature = map_curvature};

/* A user's function without d2f: no second-order rule, no edges. */
static const ad_block_kind map_first_kind = {
    .name = "matrix map", .vjp = map_vjp, .reverse = map_reverse, .forward = map_forward,
    .reach = map_reach};

/* ---- recording ---- */

typedef struct fun {
    int op;
    const ad_map_fn *fn;
    void *ctx;
} fun;

static double apply(const fun *f, double x, double *d)
{
    if (f->op != USER)
        return value_partial(f->op, x, d);
    *d = f->fn->df(x, f->ctx);
    return f->fn->f(x, f->ctx);
}

/* With AD_CHECK_FINITE, an entry made not finite from a finite one names
 * the map (its op); entries whose argument was not finite do not count. */
static int check(ad_tape *t, const char *name, size_t mn, const double *a, const double *y,
                 uint32_t first)
{
    if (!t->checks)
        return 1;
    int finite = 1;
    for (size_t q = 0; q < mn; q++)
        finite &= isfinite(a[q]) != 0;
    if (finite)
        return ad_check_block(t, name, mn, a, mn, y, first);
    /* some arguments are not finite: test the others alone (their
     * entries' values masked), then record every entry's value */
    double one = 0.0, nan = NAN;
    size_t bad = mn;
    for (size_t q = 0; q < mn && bad == mn; q++)
        if (isfinite(a[q]) && !isfinite(y[q]))
            bad = q;
    if (bad < mn) {
        double *masked = ad_alloc(mn * sizeof *masked);
        if (masked) {
            for (size_t q = 0; q < mn; q++)
                masked[q] = isfinite(a[q]) ? y[q] : 0.0;
            int ok = ad_check_block(t, name, 1, &one, mn, masked, first);
            ad_free(masked);
            if (!ok)
                return 0;
        }
    }
    return ad_check_block(t, name, 1, &nan, mn, y, first);
}

static ad_status fail_nan(ad_status s, size_t mn, ad_real *out, ad_mat *C, size_t m, size_t n)
{
    ad_fail_recording(s);
    if (out)
        ad_fill_nan_reals(out, mn);
    if (C)
        ad_mat_constant(m, n, out, C);
    return s;
}

static ad_status record(ad_tape *t, const fun *f, const ad_mat *A, ad_real *out, ad_mat *C)
{
    size_t m = A->rows, n = A->cols, mn = m * n, user = f->op == USER;
    int has_second = !user || f->fn->d2f;
    size_t tail = ad_mat_block_tail(m, n);
    size_t size = tail + sizeof(map) + mn * (user && has_second ? 2 : 1) * sizeof(double);
    size_t at = ad_block_new(t, size, (uint32_t)mn, 0, (uint32_t)mn);
    if (at == SIZE_MAX)
        return t->status != AD_OK ? t->status : AD_ENOMEM;
    size_t src = A->at;
    ad_matrix_block *blk = (ad_matrix_block *)ad_block_at(t, at);
    ad_mat_block_init(blk, m, n);
    blk->base.kind = has_second ? &map_kind : &map_first_kind;
    blk->base.ids = sizeof *blk;  /* no listed arguments */
    blk->base.run = A->id;
    map *p = (map *)(void *)((char *)blk + tail);
    p->m = m;
    p->n = n;
    p->src = src;
    p->a0 = A->id;
    p->op = f->op;
    p->curved = user ? has_second : f->op != AD_MAP_RELU;
    double *y = (double *)(void *)(blk + 1), *d = (double *)(void *)(p + 1), *h = d + mn;
    const double *a = map_a(t, p);
    ad_block_enter();  /* the user's functions may use dualrev */
    for (size_t q = 0; q < mn; q++) {
        y[q] = apply(f, a[q], &d[q]);
        if (user && has_second)
            h[q] = f->fn->d2f(a[q], f->ctx);
    }
    ad_block_leave();
    uint32_t first = ad_block_record(t, at);
    if (!first)
        return t->status;
    blk = (ad_matrix_block *)ad_block_at(t, at);
    blk->first = first;
    p = (map *)(void *)((char *)blk + tail);
    y = (double *)(void *)(blk + 1);
    if (!check(t, user ? "matrix map (user function)" : names[f->op], mn, map_a(t, p), y, first))
        return t->status;
    for (size_t q = 0; q < mn; q++)
        out[q] = ad__made(y[q], first + (uint32_t)q);
    ad_mat_result(t, at, first, m, n, out, C);
    return AD_OK;
}

static int valid(const fun *f)
{
    return f->op == USER ? f->fn && f->fn->f && f->fn->df : f->op >= 0 && f->op < AD_MAP_COUNT;
}

static ad_status map_of(const fun *f, const ad_mat *A, ad_real *out, ad_mat *C)
{
    if (!A || !C || !valid(f) || !ad_size_fits(A->rows, A->cols) ||
        (A->rows && A->cols && !out))
        return fail_nan(AD_EINVAL, A && ad_size_fits(A->rows, A->cols) ? A->rows * A->cols : 0,
                        out, C, A ? A->rows : 0, A ? A->cols : 0);
    size_t m = A->rows, n = A->cols, mn = m * n;
    ad_tape *t = ad_recording();
    if (t && A->id && mn) {
        if (!ad_mat_block_of(t, A))
            return fail_nan(AD_EFOREIGN, mn, out, C, m, n);
        if (mn >= AD__ID_END)
            return fail_nan(AD_ERANGE, mn, out, C, m, n);
        ad_status s = record(t, f, A, out, C);
        return s == AD_OK ? s : fail_nan(s, mn, out, C, m, n);
    }
    /* constant entries, or no recording: values alone */
    for (size_t q = 0; q < mn; q++) {
        double d;
        out[q] = ad_const(apply(f, ad_mat_entry(A, q), &d));
    }
    ad_mat_constant(m, n, out, C);
    return AD_OK;
}

static ad_status map_d_of(const fun *f, const ad_mat *A, double *out, ad_mat *C)
{
    size_t m = A ? A->rows : 0, n = A ? A->cols : 0;
    int fits = ad_size_fits(m, n);
    ad_status s = !A || !C || !valid(f) || !fits || (m && n && !out) ? AD_EINVAL : AD_OK;
    for (size_t q = 0; fits && out && q < m * n; q++) {
        double d;
        out[q] = s == AD_OK ? apply(f, ad_mat_entry(A, q), &d) : NAN;
    }
    if (s != AD_OK)
        ad_fail_recording(s);
    if (C) {
        memset(C, 0, sizeof *C);
        C->rows = m;
        C->cols = n;
        C->a = out;
        C->shape = AD__FULL;
    }
    return s;
}

ad_status ad_mat_map_r(ad_map_op op, const ad_mat *A, ad_real *out, ad_mat *C)
{
    fun f = {(int)op, NULL, NULL};
    return map_of(&f, A, out, C);
}

ad_status ad_mat_map_d(ad_map_op op, const ad_mat *A, double *out, ad_mat *C)
{
    fun f = {(int)op, NULL, NULL};
    return map_d_of(&f, A, out, C);
}

ad_status ad_mat_map_fn_r(const ad_map_fn *fn, void *ctx, const ad_mat *A, ad_real *out,
                          ad_mat *C)
{
    fun f = {USER, fn, ctx};
    return map_of(&f, A, out, C);
}

ad_status ad_mat_map_fn_d(const ad_map_fn *fn, void *ctx, const ad_mat *A, double *out,
                          ad_mat *C)
{
    fun f = {USER, fn, ctx};
    return map_d_of(&f, A, out, C);
}
