/* dualrev: the listing mode.  Each record of the recording is kept as an
 * operation (listing.h) with its arguments' IDs and its constants, so
 * that a program (drivers/recorded.c) can run it again at other points.
 * A record only says what it computed if every value it saw is the value
 * its argument's record made: each is checked against the values kept in
 * the mode's side entries, and a value that changed on the way (a value
 * made by hand, or arithmetic on ad_value) fails the recording with
 * AD_ENOTSUP rather than keep a program that would replay it wrongly. */
#include <string.h>

#include "listing.h"

static void listing_free(void *state)
{
    ad_listing *L = state;
    ad_free(L->ins);
    ad_free(L->consts);
    ad_free(L->eids);
    ad_free(L->calls);
}

static size_t listing_bytes(const void *state)
{
    const ad_listing *L = state;
    return L->ins_cap * sizeof *L->ins + L->consts_cap * sizeof *L->consts +
           L->eids_cap * sizeof *L->eids + L->calls_cap * sizeof *L->calls;
}

static const ad_tenant listing_tenant = {sizeof(ad_listing), listing_free, listing_bytes, NULL};

ad_listing *ad_listing_reset(ad_tape *t)
{
    ad_listing *L = ad_tape_state(t, &listing_tenant);
    if (L) {
        L->nins = L->nconsts = L->neids = L->ncalls = L->widest = L->guards = 0;
        L->expect = 0;
    }
    return L;
}

ad_listing *ad_listing_of(ad_tape *t)
{
    return ad_tape_side(t, &ad_listing_mode) ? ad_tape_state_if(t, &listing_tenant) : NULL;
}

/* The value record (or input) id made. */
static double value_of(const ad_tape *t, uint32_t id)
{
    if (id < t->first)
        return t->inputs[id - 1].v;
    return *(const double *)ad_side_entry(t, ad_tape_side(t, &ad_listing_mode), id);
}

static int same(double x, double y)
{
    return memcmp(&x, &y, sizeof x) == 0 || (x != x && y != y);
}

int ad_listing_made(const ad_tape *t, uint32_t id, double x)
{
    return !id || id >= t->cursor.next || same(x, value_of(t, id));
}

/* Whether an argument seen with value x is what its record made; fails
 * the recording if not. */
static int seen(ad_tape *t, uint32_t id, double x)
{
    if (ad_listing_made(t, id, x))
        return 1;
    ad_tape_fail(t, AD_ENOTSUP);
    return 0;
}

static int fail(ad_tape *t, ad_status s)
{
    ad_tape_fail(t, s);
    return 0;
}

static int put_const(ad_tape *t, ad_listing *L, double c)
{
    if (ad_grow((void **)&L->consts, &L->consts_cap, L->nconsts + 1, sizeof c, L->nconsts))
        return fail(t, AD_ENOMEM);
    L->consts[L->nconsts++] = c;
    return 1;
}

/* An operand: of this recording, or a constant. */
static int ours(ad_tape *t, ad_real a)
{
    if (!a.id || !ad__alien(ad__key(a), t->cursor.key0, t->cursor.next))
        return 1;
    return fail(t, AD_EFOREIGN);
}

/* An element: its ID, and its value among the constants if it is one. */
static int put_elem(ad_tape *t, ad_listing *L, ad_real x)
{
    if (!ours(t, x) || !seen(t, x.id, x.v))
        return 0;
    if (ad_grow((void **)&L->eids, &L->eids_cap, L->neids + 1, sizeof *L->eids, L->neids))
        return fail(t, AD_ENOMEM);
    L->eids[L->neids++] = x.id;
    return x.id || put_const(t, L, x.v);
}

static ad_ins *put_ins(ad_tape *t, ad_listing *L, int op, int sub, uint32_t a, uint32_t b,
                       uint32_t id, size_t k)
{
    if (ad_grow((void **)&L->ins, &L->ins_cap, L->nins + 1, sizeof(ad_ins), L->nins)) {
        fail(t, AD_ENOMEM);
        return NULL;
    }
    ad_ins *in = &L->ins[L->nins++];
    *in = (ad_ins){a, b, id, (uint32_t)k, (unsigned char)op, (unsigned char)sub};
    return in;
}

static int unary(int op)
{
    return op == AD__OP_NEG || op == AD__OP_FABS || op == AD__OP_POW_RD || op == AD__OP_POW_DR ||
           (op >= AD__OP_SQRT && op < AD__OP_COUNT);
}

static int binary(int op)
{
    switch (op) {
    case AD__OP_ADD: case AD__OP_SUB: case AD__OP_FMIN: case AD__OP_FMAX: case AD__OP_AXPY:
    case AD__OP_MUL: case AD__OP_DIV: case AD__OP_POW: case AD__OP_ATAN2: case AD__OP_HYPOT:
        return 1;
    default:
        return 0;
    }
}

/* An elementary record: its arguments, then its constants (an axpy's
 * factor, then a constant argument's value; pow's constant exponent or
 * base). */
static int keep_elementary(ad_tape *t, ad_listing *L, uint32_t id, uint32_t a, double wa,
                           uint32_t b, int op, double x, double y)
{
    size_t k = L->nconsts;
    if (unary(op)) {
        if (!seen(t, a, x))
            return 0;
        if ((op == AD__OP_POW_RD || op == AD__OP_POW_DR) && !put_const(t, L, y))
            return 0;
    } else if (binary(op)) {
        if (!seen(t, a, x) || !seen(t, b, y))
            return 0;
        if (op == AD__OP_AXPY && !put_const(t, L, wa))
            return 0;
        if ((!a && !put_const(t, L, x)) || (!b && !put_const(t, L, y)))
            return 0;
    } else {
        return fail(t, AD_ENOTSUP);  /* a block or a record of constant partials */
    }
    return put_ins(t, L, op, 0, a, b, id, k) != NULL;
}

/* A selection, announced with its comparison's operands. */
static int keep_selection(ad_tape *t, ad_listing *L, uint32_t id, uint32_t a, double x,
                          uint32_t b, double y)
{
    size_t k = L->neids, kc = L->nconsts;
    uint64_t key0 = t->cursor.key0;
    ad_real tv = ad__real_of(x, a ? key0 + a : 0), fv = ad__real_of(y, b ? key0 + b : 0);
    L->expect = 0;
    if (!put_elem(t, L, L->sel_l) || !put_elem(t, L, L->sel_r) || !put_elem(t, L, tv) ||
        !put_elem(t, L, fv))
        return 0;
    return put_ins(t, L, AD__OP_SELECT, L->sel_cmp, 0, (uint32_t)kc, id, k) != NULL;
}

static uint32_t take(ad_tape *t, int i, uint32_t a, double wa, uint32_t b, double wb, int op,
                     double x, double y, double v)
{
    ad_listing *L = ad_tape_state_if(t, &listing_tenant);
    uint32_t id = (uint32_t)t->cursor.next;
    *(double *)ad_tape_side_here(t, i) = v;
    int ok;
    if (!L)
        ok = fail(t, AD_ENOMEM);
    else if (op == AD__OP_NARY || op == AD__OP_BLOCK || op == AD__OP_OUT)
        ok = L->expect || fail(t, AD_ENOTSUP);  /* kept by ad_listing_nary or _call, after */
    else if (op == AD__OP_SELECT)
        ok = L->expect ? keep_selection(t, L, id, a, x, b, y) : fail(t, AD_ENOTSUP);
    else
        ok = keep_elementary(t, L, id, a, wa, b, op, x, y);
    return ok ? ad_tape_pass(t, i, a, wa, b, wb, op, x, y, v) : 0;
}

void ad_listing_expect(ad_tape *t)
{
    ad_listing *L = ad_listing_of(t);
    if (L)
        L->expect = 1;
}

void ad_listing_expect_selection(ad_tape *t, int cmp, ad_real l, ad_real r)
{
    ad_listing *L = ad_listing_of(t);
    if (!L)
        return;
    L->expect = 1;
    L->sel_cmp = cmp;
    L->sel_l = l;
    L->sel_r = r;
}

void ad_listing_nary(ad_tape *t, uint32_t id, int which, size_t n, const ad_real *x,
                     const ad_real *y, const double *c)
{
    ad_listing *L = ad_listing_of(t);
    if (!L)
        return;
    L->expect = 0;
    if (!id || t->status != AD_OK)
        return;
    if (n > UINT32_MAX) {
        fail(t, AD_ERANGE);
        return;
    }
    size_t k = L->neids, kc = L->nconsts;
    for (size_t i = 0; c && i < n; i++)
        if (!put_const(t, L, c[i]))
            return;
    for (size_t i = 0; i < n; i++)
        if (!put_elem(t, L, x[i]))
            return;
    for (size_t i = 0; y && i < n; i++)
        if (!put_elem(t, L, y[i]))
            return;
    if (n > L->widest)
        L->widest = n;
    put_ins(t, L, AD__OP_NARY, which, (uint32_t)n, (uint32_t)kc, id, k);
}

void ad_listing_guard(ad_tape *t, int cmp, ad_real a, ad_real b, int outcome)
{
    ad_listing *L = ad_listing_of(t);
    if (!L || t->status != AD_OK || !ours(t, a) || !ours(t, b))
        return;
    if (!seen(t, a.id, a.v) || !seen(t, b.id, b.v))
        return;
    size_t k = L->nconsts;
    if ((!a.id && !put_const(t, L, a.v)) || (!b.id && !put_const(t, L, b.v)))
        return;
    if (put_ins(t, L, AD_LIST_GUARD, cmp | (outcome ? AD_LIST_TRUE : 0), a.id, b.id, 0, k))
        L->guards++;
}

void ad_listing_call(ad_tape *t, const ad_call *call, const ad_real *x, const ad_real *p,
                     uint32_t first, const double *y)
{
    ad_listing *L = ad_listing_of(t);
    if (!L)
        return;
    L->expect = 0;
    if (t->status != AD_OK)
        return;
    if (call->n + call->np > UINT32_MAX || L->ncalls >= UINT32_MAX) {
        fail(t, AD_ERANGE);
        return;
    }
    size_t k = L->neids, kc = L->nconsts;
    for (size_t i = 0; i < call->n; i++)
        if (!put_elem(t, L, x[i]))
            return;
    for (size_t i = 0; i < call->np; i++)
        if (!put_elem(t, L, p[i]))
            return;
    const ad_side *sd = ad_tape_side(t, &ad_listing_mode);
    for (size_t j = 0; j < call->m; j++) {
        /* the outputs' values, for the operations that take them */
        *(double *)ad_side_entry(t, sd, first + (uint32_t)j) = y[j];
        if (ad_grow((void **)&L->eids, &L->eids_cap, L->neids + 1, sizeof *L->eids, L->neids)) {
            fail(t, AD_ENOMEM);
            return;
        }
        L->eids[L->neids++] = first + (uint32_t)j;
    }
    if (ad_grow((void **)&L->calls, &L->calls_cap, L->ncalls + 1, sizeof *L->calls, L->ncalls)) {
        fail(t, AD_ENOMEM);
        return;
    }
    L->calls[L->ncalls] = *call;
    put_ins(t, L, AD_LIST_CALL, 0, (uint32_t)L->ncalls++, (uint32_t)kc, 0, k);
}

_Static_assert(sizeof(double) <= sizeof(ad__record), "a side entry holds a value");
const ad_mode ad_listing_mode = {take, NULL, AD__TAG_LISTED};
