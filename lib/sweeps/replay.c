/* dualrev: a program replayed onto the active recording, with its sweep.
 *
 * Nested derivatives (drivers/nested.c): a gradient taken inside a function
 * being recorded must itself be a function of that recording's values.
 * The inner function is recorded as a program (program.h), then its records
 * are made again on the outer recording, each from its operation and its
 * arguments' outer values, and so is its reverse (or forward) sweep: each
 * partial is made by operations on those values (partials() below), and
 * each product and sum of the sweep is an operation too.  The outer
 * recording then holds the inner gradient as ordinary records, which every
 * sweep and every mode takes; replayed onto a program, it nests again.
 * Every value is forced to the one the inner recording computed, so that
 * the results equal ad_gradient's and ad_jvp's. */
#include <math.h>
#include <string.h>

#include "program.h"
#include "replay.h"

/* The replay's arrays, indexed by the program's IDs: kept with the
 * program's tape (a tenant), so that a repeated call allocates nothing. */
typedef struct replay_store {
    unsigned char *slot;  /* slot[id]: SLOT, REACHED (flags below) */
    ad_real *val;         /* val[id]: the value of record (or input) id, replayed */
    ad_real *d;           /* d[id]: its cotangent or tangent */
    size_t cap;
    ad_real *buf;         /* a product's elements and partials */
    size_t buf_cap;
} replay_store;

static void store_free(void *state)
{
    replay_store *st = state;
    ad_free(st->slot);
    ad_free(st->val);
    ad_free(st->d);
    ad_free(st->buf);
}

static size_t store_bytes(const void *state)
{
    const replay_store *st = state;
    return st->cap * (1 + 2 * sizeof(ad_real)) + st->buf_cap * sizeof(ad_real);
}

static const ad_tenant store_tenant = {sizeof(replay_store), store_free, store_bytes, NULL};

/* An ID is a slot of an n-ary record; the reverse sweep reached it. */
enum { SLOT = 1, REACHED = 2 };

typedef struct replay {
    const ad_tape *p;
    const unsigned char *op;  /* the program's operations, from its first record */
    const ad_side *steps;     /* its steps (ad_tape_step) */
    uint32_t top;
    unsigned char *slot;
    ad_real *val, *d;
    replay_store *st;
} replay;

static int live(ad_real z)
{
    return z.id || z.v != 0.0;
}

static const ad_step *step_of(const replay *rp, uint32_t id)
{
    return ad_side_entry(rp->p, rp->steps, id);
}

static ad_real valued(ad_real p, double w)
{
    p.v = w;
    return p;
}

/* A record's argument k, whose value it saw was x: k's replayed value,
 * moved to x (x + c shares x's ID), or the constant x. */
static ad_real arg(const replay *rp, uint32_t k, double x)
{
    return k ? valued(rp->val[k], x) : ad_const(x);
}

/* 1 / ((1 - a)(1 + a)), as the forward pass takes it. */
static ad_real one_minus_sq_inv(ad_real a)
{
    return ad_div_dr(1.0, ad_mul_rr(ad_sub_dr(1.0, a), ad_add_dr(1.0, a)));
}

static ad_real gauss(ad_real a, double k)  /* k exp(-a^2) */
{
    return ad_mul_dr(k, ad_exp_r(ad_neg_r(ad_mul_rr(a, a))));
}

/* The partials of the one-argument record of operation op (constant c) at
 * a, result r. */
static int partial1(int op, double c, ad_real a, ad_real r, ad_real *pa)
{
    switch (op) {
    case AD__OP_POW_RD: *pa = ad_mul_dr(c, ad_pow_rd(a, c - 1.0)); return c != 0.0 && c != 1.0;
    case AD__OP_POW_DR: *pa = ad_mul_dr(log(c), r); return c != 0.0;
    case AD__OP_SQRT: *pa = ad_div_dr(0.5, r); return 1;
    case AD__OP_CBRT: *pa = ad_div_dr(1.0, ad_mul_dr(3.0, ad_mul_rr(r, r))); return 1;
    case AD__OP_EXP: *pa = r; return 1;
    case AD__OP_EXPM1: *pa = ad_exp_r(a); return 1;
    case AD__OP_LOG: *pa = ad_div_dr(1.0, a); return 1;
    case AD__OP_LOG1P: *pa = ad_div_dr(1.0, ad_add_dr(1.0, a)); return 1;
    case AD__OP_LOG2: *pa = ad_div_dr(AD__LOG2E, a); return 1;
    case AD__OP_LOG10: *pa = ad_div_dr(AD__LOG10E, a); return 1;
    case AD__OP_SIN: *pa = ad_cos_r(a); return 1;
    case AD__OP_COS: *pa = ad_neg_r(ad_sin_r(a)); return 1;
    case AD__OP_TAN: *pa = ad_add_dr(1.0, ad_mul_rr(r, r)); return 1;
    case AD__OP_ASIN: *pa = ad_sqrt_r(one_minus_sq_inv(a)); return 1;
    case AD__OP_ACOS: *pa = ad_neg_r(ad_sqrt_r(one_minus_sq_inv(a))); return 1;
    case AD__OP_ATAN: *pa = ad_div_dr(1.0, ad_add_dr(1.0, ad_mul_rr(a, a))); return 1;
    case AD__OP_SINH: *pa = ad_cosh_r(a); return 1;
    case AD__OP_COSH: *pa = ad_sinh_r(a); return 1;
    case AD__OP_TANH: {
        ad_real s = ad_div_dr(1.0, ad_cosh_r(a));
        *pa = ad_mul_rr(s, s);
        return 1;
    }
    case AD__OP_ASINH: *pa = ad_div_dr(1.0, ad_hypot_rd(a, 1.0)); return 1;
    case AD__OP_ACOSH:
        *pa = ad_div_dr(1.0, ad_mul_rr(ad_sqrt_r(ad_sub_rd(a, 1.0)), ad_sqrt_r(ad_add_rd(a, 1.0))));
        return 1;
    case AD__OP_ATANH: *pa = one_minus_sq_inv(a); return 1;
    case AD__OP_ERF: *pa = gauss(a, AD__2_SQRTPI); return 1;
    case AD__OP_ERFC: *pa = gauss(a, -AD__2_SQRTPI); return 1;
    }
    return -1;  /* lgamma, tgamma: their derivative, the digamma function, is no operation */
}

/* atan2(a, b)'s partials b / (a^2 + b^2) and -a / (a^2 + b^2) from the
 * ratio of the smaller coordinate to the larger, as ops.h takes them: no
 * square leaves the range, nor do the partials' own derivatives. */
static void atan2_partials(ad_real a, ad_real b, ad_real *pa, ad_real *pb)
{
    if (fabs(b.v) >= fabs(a.v)) {
        ad_real t = ad_div_rr(a, b), d = ad_add_rr(b, ad_mul_rr(a, t));
        *pa = ad_div_dr(1.0, d);
        *pb = ad_neg_r(ad_div_rr(t, d));
    } else {
        ad_real t = ad_div_rr(b, a), d = ad_add_rr(a, ad_mul_rr(b, t));
        *pa = ad_div_rr(t, d);
        *pb = ad_div_dr(-1.0, d);
    }
}

/* The same for an operation of two arguments a and b, one of which may be
 * its constant c; ha (hb): a (b) is an argument, not the constant, whose
 * partial alone is made (the constant's would leave records on the tape,
 * NaN at a pole).  Else partial1's. */
static int partial2(int op, double c, int ha, int hb, ad_real a, ad_real b, ad_real r,
                    ad_real *pa, ad_real *pb)
{
    switch (op) {
    case AD__OP_MUL: *pa = b; *pb = a; return 1;
    case AD__OP_DIV:
        if (ha)
            *pa = ad_div_dr(1.0, b);
        if (hb)
            *pb = ad_neg_r(ad_div_rr(r, b));
        return 1;
    case AD__OP_POW:
        if (ha)
            *pa = ad_mul_rr(b, ad_pow_rr(a, ad_sub_rd(b, 1.0)));
        if (hb)  /* convention: 0 at a = 0 */
            *pb = a.v == 0.0 ? ad_const(0.0) : ad_mul_rr(ad_log_r(a), r);
        return 1;
    case AD__OP_ATAN2: atan2_partials(a, b, pa, pb); return 1;
    case AD__OP_HYPOT:
        if (ha)
            *pa = ad_div_rr(a, r);
        if (hb)
            *pb = ad_div_rr(b, r);
        return 1;
    }
    return partial1(op, c, a, r, pa);
}

/* Record id's partials as values of the active recording, equal to its
 * own: constants where its operation is linear, or where neither argument
 * is active (nor the cotangent or tangents they multiply, `needed`: they
 * would only make zeros).  AD_ENOTSUP where they have no recording. */
static ad_status partials(const replay *rp, uint32_t id, int needed, ad_real *pa, ad_real *pb)
{
    const ad__record *r = ad_tape_record(rp->p, id);
    int op = rp->op[id - rp->p->first];
    *pa = ad_const(r->wa);
    *pb = ad_const(r->wb);
    if (op < AD__OP_CURVED || !needed || !(rp->val[r->a].id | rp->val[r->b].id))
        return AD_OK;
    const ad_step *st = step_of(rp, id);
    ad_real a = arg(rp, r->a, st->x), b = arg(rp, r->b, st->y);
    int k = partial2(op, st->y, r->a != 0, r->b != 0, a, b, rp->val[id], pa, pb);
    if (k < 0)
        return AD_ENOTSUP;
    if (k) {
        *pa = valued(*pa, r->wa);
        *pb = valued(*pb, r->wb);
    } else {
        *pa = ad_const(r->wa);
    }
    return AD_OK;
}

/* ---- the values ---- */

static int grow(replay *rp, size_t n)
{
    return ad_reserve((void **)&rp->st->buf, &rp->st->buf_cap, n, sizeof(ad_real)) == AD_OK;
}

/* The arguments of a product's or log-sum-exp's record, replayed, into
 * rp->st->buf: returns how many. */
static size_t gather(replay *rp, uint32_t id, uint32_t count)
{
    size_t k = 0;
    for (uint32_t q = id - count; q < id; q++) {
        const ad__record *s = ad_tape_record(rp->p, q);
        const ad_step *st = step_of(rp, q);
        rp->st->buf[k++] = arg(rp, s->a, st->x);
        if (s->b)
            rp->st->buf[k++] = arg(rp, s->b, st->y);
    }
    return k;
}

/* A product again, from its elements and the constants' product; the
 * others again from their slots, whose partials are the same numbers. */
static ad_status nary_value(replay *rp, uint32_t id)
{
    const ad__record *h = ad_tape_record(rp->p, id);
    const ad_step *st = step_of(rp, id);
    uint32_t count = h->a;
    if ((int)h->wa == AD__NARY_PROD) {
        if (!grow(rp, 2 * (size_t)count + 1))
            return AD_ENOMEM;
        size_t k = gather(rp, id, count);
        rp->st->buf[k++] = ad_const(st->x);
        rp->val[id] = valued(ad_prod_r(k, rp->st->buf), st->v);
        return AD_OK;
    }
    ad__slots s = ad__slots_begin();
    for (uint32_t q = id - count; q < id; q++) {
        const ad__record *r = ad_tape_record(rp->p, q);
        s = ad__slots_put(s, rp->val[r->a].id, r->wa, rp->val[r->b].id, r->wb);
    }
    rp->val[id] = ad__made(st->v, ad__slots_end(s, (int)h->wa, st->v));
    return AD_OK;
}

static ad_status values(replay *rp, uint32_t id)
{
    const ad__record *r = ad_tape_record(rp->p, id);
    if (r->b == AD__NARY)
        return nary_value(rp, id);
    const ad_step *st = step_of(rp, id);
    ad_real a = arg(rp, r->a, st->x), b = arg(rp, r->b, st->y);
    rp->val[id] = ad__rec2(st->v, a, r->wa, b, r->wb, rp->op[id - rp->p->first]);
    return AD_OK;
}

/* ---- the sweeps ---- */

/* t + p z, in as few records as it takes: none for a unit partial, one
 * (an axpy) for another constant one. */
static ad_real plus_times(ad_real t, ad_real p, ad_real z)
{
    if (p.id || !z.id)
        return ad_add_rr(t, ad_mul_rr(p, z));
    if (p.v == 1.0)
        return ad_add_rr(t, z);
    if (!t.id)
        return ad_add_rd(ad_mul_dr(p.v, z), t.v);
    return ad__rec2(p.v * z.v + t.v, z, p.v, t, 1.0, AD__OP_AXPY);
}

/* d[k] += p z, as the reverse sweep adds, and k is reached; nothing for
 * the sink. */
static void give(replay *rp, uint32_t k, ad_real p, ad_real z)
{
    if (k) {
        rp->d[k] = plus_times(rp->d[k], p, z);
        rp->slot[k] |= REACHED;
    }
}

/* A product's partials: the constants' product times the other elements',
 * from prefix and suffix products (as ad_prod's); into buf[k..2k). */
static void prod_partials(replay *rp, size_t k, double consts)
{
    ad_real *x = rp->st->buf, *w = rp->st->buf + k, p = ad_const(consts);
    for (size_t i = 0; i < k; i++) {
        w[i] = p;
        p = ad_mul_rr(p, x[i]);
    }
    p = ad_const(1.0);
    for (size_t i = k; i-- > 0;) {
        w[i] = ad_mul_rr(w[i], p);
        p = ad_mul_rr(p, x[i]);
    }
}

/* The partial of a log-sum-exp r at an element a whose partial is w:
 * exp(a - r), its exponent's value taken from w as the record took it. */
static ad_real softmax(ad_real a, ad_real r, double w)
{
    return ad_exp_r(valued(ad_sub_rr(a, r), log(w)));
}

/* Slot q (at ID sid) of an n-ary record of kind `kind` whose result is r:
 * its partials; w: a product's, from prod_partials, at its slot's first
 * argument.  Where a slot's partial is an argument's value, the argument
 * is moved to it (arg()); a log-sum-exp's slots keep their values. */
static void slot_partials(const replay *rp, int kind, uint32_t sid, ad_real r, const ad_real *w,
                          ad_real *pa, ad_real *pb)
{
    const ad__record *q = ad_tape_record(rp->p, sid);
    *pa = ad_const(q->wa);
    *pb = ad_const(q->wb);
    ad_real a = rp->val[q->a], b = rp->val[q->b];
    switch (kind) {
    case AD__NARY_DOT:
        if (q->b)
            *pa = b;
        if (q->a)
            *pb = a;
        break;
    case AD__NARY_SQNORM:
        *pa = ad_mul_dr(2.0, a);
        *pb = ad_mul_dr(2.0, b);
        break;
    case AD__NARY_LSE: {
        const ad_step *st = step_of(rp, sid);
        *pa = softmax(arg(rp, q->a, st->x), r, q->wa);
        if (q->b)
            *pb = softmax(arg(rp, q->b, st->y), r, q->wb);
        break;
    }
    case AD__NARY_PROD:
        *pa = w[0];
        if (q->b)
            *pb = w[1];
        break;
    }
    *pa = valued(*pa, q->wa);
    *pb = valued(*pb, q->wb);
}

/* The partials of every slot of the n-ary record at id, into buf (two per
 * slot, from the lowest); constants where they would multiply none but
 * zeros (needed = 0). */
static ad_status nary_partials(replay *rp, uint32_t id, int needed, ad_real **out)
{
    const ad__record *h = ad_tape_record(rp->p, id);
    uint32_t count = h->a;
    int kind = needed ? (int)h->wa : AD__NARY_LINEAR;
    if (!grow(rp, 4 * (size_t)count + 1))
        return AD_ENOMEM;
    ad_real *w = rp->st->buf + 2 * (size_t)count;
    size_t k = 0;
    if (kind == AD__NARY_PROD) {
        k = gather(rp, id, count);
        prod_partials(rp, k, step_of(rp, id)->x);
        /* the partials follow the k elements: lay them out two per slot */
        memmove(w, rp->st->buf + k, k * sizeof *w);
    }
    ad_real *pw = rp->st->buf;
    size_t e = 0;
    for (uint32_t q = id - count; q < id; q++, pw += 2) {
        slot_partials(rp, kind, q, rp->val[id], w + e, &pw[0], &pw[1]);
        e += ad_tape_record(rp->p, q)->b ? 2 : 1;
    }
    *out = rp->st->buf;
    return AD_OK;
}

static ad_status reverse(replay *rp, uint32_t id)
{
    const ad__record *r = ad_tape_record(rp->p, id);
    ad_real z = rp->d[id], pa, pb, *w;
    ad_status s;
    if (r->b == AD__NARY) {
        if ((s = nary_partials(rp, id, live(z), &w)) != AD_OK)
            return s;
        for (uint32_t k = r->a; k-- > 0;) {  /* the slots downwards, as the sweep */
            const ad__record *q = ad_tape_record(rp->p, id - r->a + k);
            give(rp, q->a, w[2 * k], z);
            give(rp, q->b, w[2 * k + 1], z);
        }
        return AD_OK;
    }
    if ((s = partials(rp, id, live(z), &pa, &pb)) != AD_OK)
        return s;
    give(rp, r->a, pa, z);
    give(rp, r->b, pb, z);
    return AD_OK;
}

/* t = sum p d[k] over an ordinary record's arguments, the sink's left
 * out, and so are those the seeds do not reach: zero by structure, as
 * ad_jvp takes an input whose direction is a constant 0 (a partial there
 * may be infinite); a record is reached if one of them is. */
static ad_real take(replay *rp, uint32_t id, ad_real t, uint32_t k, ad_real p)
{
    if (!k || !(rp->slot[k] & REACHED))
        return t;
    rp->slot[id] |= REACHED;
    return plus_times(t, p, rp->d[k]);
}

static ad_status forward(replay *rp, uint32_t id)
{
    const ad__record *r = ad_tape_record(rp->p, id);
    ad_real t = ad_const(0.0), pa, pb, *w;
    ad_status s;
    if (r->b == AD__NARY) {
        int needed = 0;
        for (uint32_t q = id - r->a; q < id; q++)
            needed |= live(rp->d[ad_tape_record(rp->p, q)->a]) |
                      live(rp->d[ad_tape_record(rp->p, q)->b]);
        if ((s = nary_partials(rp, id, needed, &w)) != AD_OK)
            return s;
        for (uint32_t k = 0; k < r->a; k++) {
            const ad__record *q = ad_tape_record(rp->p, id - r->a + k);
            t = take(rp, id, take(rp, id, t, q->a, w[2 * k]), q->b, w[2 * k + 1]);
        }
    } else {
        if ((s = partials(rp, id, live(rp->d[r->a]) | live(rp->d[r->b]), &pa, &pb)) != AD_OK)
            return s;
        t = take(rp, id, take(rp, id, t, r->a, pa), r->b, pb);
    }
    rp->d[id] = t;
    return AD_OK;
}

/* ---- the replays ---- */

/* The arrays for IDs 0 .. top, from p's store; the slots of n-ary records
 * marked, the inputs' values set, the cotangents (tangents) zero;
 * AD_ENOTSUP at a block. */
static ad_status prepare(replay *rp, ad_tape *p, size_t n, const ad_real *x)
{
    size_t count = (size_t)rp->top + 1;
    replay_store *st = ad_tape_state(p, &store_tenant);
    if (!st || count > SIZE_MAX / sizeof(ad_real))
        return AD_ENOMEM;
    if (st->cap < count) {
        store_free(st);
        *st = (replay_store){0};
        st->slot = ad_alloc(count);
        st->val = ad_alloc(count * sizeof(ad_real));
        st->d = ad_alloc(count * sizeof(ad_real));
        if (!st->slot || !st->val || !st->d) {
            store_free(st);
            *st = (replay_store){0};
            return AD_ENOMEM;
        }
        st->cap = count;
    }
    rp->st = st;
    rp->slot = st->slot;
    rp->val = st->val;
    rp->d = st->d;
    rp->op = ad_tape_ops(p);
    rp->steps = ad_tape_side(p, &ad_program_mode);
    memset(rp->slot, 0, count);
    memset(rp->d, 0, count * sizeof(ad_real));  /* all constant zeros */
    rp->val[0] = ad_const(0.0);
    for (size_t i = 0; i < n; i++)
        rp->val[i + 1] = x[i];
    for (uint32_t id = rp->top; id >= p->first; id--) {
        const ad__record *r = ad_tape_record(p, id);
        if (r->b == AD__BLOCK || r->b == AD__OUT)
            return AD_ENOTSUP;
        if (r->b == AD__NARY) {
            memset(rp->slot + id - r->a, SLOT, r->a);
            id -= r->a;
        }
    }
    return AD_OK;
}

/* The values of records first .. top, and their tangents if `tangents`. */
static ad_status run_values(replay *rp, int tangents)
{
    ad_status s = AD_OK;
    for (uint32_t id = rp->p->first; id <= rp->top && s == AD_OK; id++)
        if (!(rp->slot[id] & SLOT) && (s = values(rp, id)) == AD_OK && tangents)
            s = forward(rp, id);
    return s;
}

/* What the replay leaves: the active recording's status if it failed on
 * the way (the records made so far are then not a function of anything). */
static ad_status ended(ad_tape *outer, ad_status s)
{
    return outer->status != AD_OK ? outer->status : s;
}

/* An output's value, replayed (its value may not be its record's: x + c). */
static ad_real result(const ad_real *out, const ad_real *of)
{
    return out->id ? valued(of[out->id], out->v) : ad_const(out->v);
}

ad_status ad_replay_gradient(ad_tape *p, size_t n, const ad_real *x, ad_real *fx, ad_real *grad)
{
    ad_tape *outer = ad_recording();
    replay rp = {p, NULL, NULL, ad_outputs_top(p, 1), NULL, NULL, NULL, NULL};
    ad_status s = outer ? prepare(&rp, p, n, x) : AD_EINVAL;
    if (s == AD_OK)
        s = run_values(&rp, 0);
    const ad_real *out = &p->outputs[0];
    if (s == AD_OK && out->id) {
        /* records the output does not reach are not applied, as the exact
         * sweep leaves them (0 x Inf would be NaN) */
        rp.d[out->id] = ad_const(1.0);
        rp.slot[out->id] |= REACHED;
        for (uint32_t id = rp.top; id >= p->first && s == AD_OK; id--)
            if (rp.slot[id] == REACHED)
                s = reverse(&rp, id);
    }
    if (outer)
        s = ended(outer, s);
    if (s == AD_OK) {
        *fx = result(out, rp.val);
        for (size_t i = 0; i < n; i++)
            grad[i] = rp.d[i + 1];
    }
    return s;
}

ad_status ad_replay_jvp(ad_tape *p, size_t n, const ad_real *x, const ad_real *v, size_t m,
                        ad_real *y, ad_real *jv)
{
    ad_tape *outer = ad_recording();
    replay rp = {p, NULL, NULL, ad_outputs_top(p, m), NULL, NULL, NULL, NULL};
    ad_status s = outer ? prepare(&rp, p, n, x) : AD_EINVAL;
    if (s == AD_OK) {
        for (size_t i = 0; i < n; i++) {
            rp.d[i + 1] = v[i];
            rp.slot[i + 1] |= live(v[i]) ? REACHED : 0;
        }
        s = run_values(&rp, 1);
    }
    if (outer)
        s = ended(outer, s);
    if (s == AD_OK) {
        for (size_t j = 0; j < m; j++) {
            y[j] = result(&p->outputs[j], rp.val);
            jv[j] = p->outputs[j].id ? rp.d[p->outputs[j].id] : ad_const(0.0);
        }
    }
    return s;
}
