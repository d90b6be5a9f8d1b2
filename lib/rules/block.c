/* dualrev: block records -- the tape side of external functions. */
#include <math.h>
#include <string.h>

#include "block.h"
#include "seeded.h"

#define BLOCK_ALIGN 16

static void scratch_free(void *state)
{
    ad_block_scratch *sc = state;
    ad_free(sc->work);
    ad_free(sc->flags);
}

static size_t scratch_bytes(const void *state)
{
    const ad_block_scratch *sc = state;
    return sc->work_cap * sizeof *sc->work + sc->flags_cap;
}

const ad_tenant ad_block_tenant = {sizeof(ad_block_scratch), scratch_free, scratch_bytes, NULL};

int ad_block_reserve(ad_tape *t, size_t doubles)
{
    ad_block_scratch *sc = ad_tape_state(t, &ad_block_tenant);
    if (sc && ad_reserve((void **)&sc->work, &sc->work_cap, doubles, sizeof *sc->work) == AD_OK)
        return 1;
    ad_tape_fail(t, AD_ENOMEM);
    return 0;
}

/* Work and flags for a block of `count` outputs and arguments. */
static int reserve_scratch(ad_tape *t, size_t count)
{
    if (!ad_block_reserve(t, count))
        return 0;
    ad_block_scratch *sc = ad_block_scratch_of(t);
    if (ad_reserve((void **)&sc->flags, &sc->flags_cap, count, 1) == AD_OK)
        return 1;
    ad_tape_fail(t, AD_ENOMEM);
    return 0;
}

/* The block area grows by copying: it is addressed by offsets. */
static int reserve_area(ad_tape *t, size_t need)
{
    return ad_grow((void **)&t->blocks, &t->blocks_cap, need, 1, t->blocks_len) == AD_OK;
}

size_t ad_block_new(ad_tape *t, size_t size, uint32_t nout, uint32_t nargs, uint32_t run_len)
{
    size_t at = t->blocks_len;  /* aligned: every block's size is rounded up */
    size_t work = (size_t)nout + nargs + run_len;
    if (size > SIZE_MAX - at - BLOCK_ALIGN)
        size = SIZE_MAX;  /* fails below */
    size_t end = size == SIZE_MAX ? SIZE_MAX : (at + size + BLOCK_ALIGN - 1) / BLOCK_ALIGN * BLOCK_ALIGN;
    if (!work)
        work = 1;
    if (end == SIZE_MAX || !reserve_area(t, end)) {
        ad_tape_fail(t, AD_ENOMEM);
        return SIZE_MAX;
    }
    if (!reserve_scratch(t, work))
        return SIZE_MAX;
    t->blocks_len = end;
    ad_block *b = ad_block_at(t, at);
    memset(b, 0, sizeof *b);
    b->nout = nout;
    b->nargs = nargs;
    b->run_len = run_len;
    return at;
}

uint32_t ad_block_record(ad_tape *t, size_t offset)
{
    const ad_block *b = ad_block_at(t, offset);
    double off;
    uint64_t bits = offset;
    memcpy(&off, &bits, sizeof off);
    /* t is the recording tape, so its cursor is the active one; passed,
     * as a thread-local lookup costs a call in a shared library. */
    ad__cursor *c = &t->cursor;
    uint32_t hid = ad__push_at(c, b->nout, off, AD__BLOCK, 0.0, AD__OP_BLOCK, 0.0, 0.0, 0.0);
    if (!hid)
        return 0;
    if (!b->kind->jvp && !b->kind->forward)
        t->traits |= AD_BLOCK_NO_JVP;
    if (!b->kind->second)
        t->traits |= AD_BLOCK_NO_SECOND;
    if (b->kind->foreign)
        t->traits |= AD_SEEDS_UNSCALED;
    if (!b->kind->partials && !b->kind->edges)
        t->traits |= AD_BLOCK_NO_EDGES;
    /* With room for all of them (a first-order recording: end is set),
     * the output slots are written in one loop; else one by one, which
     * takes the next chunk when this one fills (IDs stay consecutive) and
     * in a second-order recording writes their second partials. */
    uint32_t j = 1;
    if (c->end && (size_t)(c->end - c->cur) >= b->nout) {
        ad__record *r = c->cur;
        for (; j <= b->nout; j++, r++)
            *r = (ad__record){j, AD__OUT, 0.0, 0.0};
        c->cur = r;
        c->next += b->nout;
    }
    for (; j <= b->nout; j++)
        if (!ad__push_at(c, j, 0.0, AD__OUT, 0.0, AD__OP_OUT, 0.0, 0.0, 0.0))
            return 0;
    return hid + 1;
}

ad_block *ad_block_of(const ad_tape *t, const ad__record *r)
{
    uint64_t bits;
    memcpy(&bits, &r->wa, sizeof bits);
    return ad_block_at(t, (size_t)bits);
}

const double *ad_block_pullback(ad_tape *t, ad_block *b, const double *ybar)
{
    double *xbar = ad_block_work(t) + b->nout;
    memset(xbar, 0, ((size_t)b->nargs + b->run_len) * sizeof *xbar);
    ad_block_enter();
    b->kind->vjp(t, b, ybar, xbar);
    ad_block_leave();
    return xbar;
}

/* The exact pullback of a kind without exact rules: its vjp works on
 * whole rows, also those of outputs not reached, whose products may
 * overflow without reaching a result (docs/conventions.md, dead
 * records), or be a constant entry's.  The rule's overflow counts
 * (seeded.h, AD_SEEDED_OVER) only where it left the cotangent of a
 * reached argument that is not a constant infinite (a NaN there may be
 * the conventions' own, from a NaN entry). */
static const double *pullback_counted(ad_tape *t, ad_block *b, const double *ybar)
{
    unsigned char *args = ad_block_flags(t) + b->nout;
    size_t nx = (size_t)b->nargs + b->run_len;
    ad_watch w = ad_watch_begin();
    const double *xbar = ad_block_pullback(t, b, ybar);
    memset(args, !b->kind->reach, nx);
    if (b->kind->reach)
        b->kind->reach(b, ad_block_flags(t), args);
    if (ad_watch_over(&w) == 1) {
        const uint32_t *ids = ad_block_ids(b);
        for (size_t k = 0; k < nx; k++)
            if (args[k] && ad_block_arg(b, ids, k) && isinf(xbar[k])) {
                ad_overflow_raise();
                break;
            }
    }
    return xbar;
}

const double *ad_block_pullback_reached(ad_tape *t, ad_block *b, const double *ybar)
{
    unsigned char *outs = ad_block_flags(t), *args = outs + b->nout;
    size_t nx = (size_t)b->nargs + b->run_len;
    if (!b->kind->vjp_exact)
        return pullback_counted(t, b, ybar);
    double *xbar = ad_block_work(t) + b->nout;
    memset(xbar, 0, nx * sizeof *xbar);
    memset(args, 0, nx);
    ad_block_enter();
    b->kind->vjp_exact(t, b, outs, ybar, xbar, args);
    ad_block_leave();
    return xbar;
}


void ad_block_forward_reached(ad_tape *t, const ad__record *r, uint32_t hid, double *tan)
{
    ad_block *b = ad_block_of(t, r);
    const uint32_t *ids = ad_block_ids(b);
    size_t nx = (size_t)b->nargs + b->run_len;
    unsigned char *outs = ad_block_flags(t), *args = outs + b->nout;
    double *xdot = ad_block_work(t), *ydot = xdot + nx;
    int any = 0;
    for (size_t k = 0; k < nx; k++) {
        uint32_t id = ad_block_arg(b, ids, k);
        args[k] = !ad_tangent_zero(t, id);
        xdot[k] = args[k] ? tan[id] : 0.0;
        any |= args[k];
    }
    memset(outs, 0, b->nout);
    memset(ydot, 0, b->nout * sizeof *ydot);
    if (any) {
        ad_block_enter();
        b->kind->jvp_exact(t, b, args, xdot, ydot, outs);
        ad_block_leave();
    }
    tan[hid] = 0.0;
    for (uint32_t j = 0; j < b->nout; j++) {
        tan[hid + 1 + j] = outs[j] ? ydot[j] : 0.0;
        if (outs[j])
            ad_reach_mark(t, hid + 1 + j);
    }
}

void ad_block_reverse(ad_tape *t, const ad__record *r, uint32_t hid, double *adj, size_t L)
{
    ad_block *b = ad_block_of(t, r);
    if (b->kind->reverse) {
        for (size_t l = 0; l < L; l++)
            b->kind->reverse(t, b, hid, adj, L, l);
        return;
    }
    const uint32_t *ids = ad_block_ids(b);
    double *ybar = ad_block_work(t);
    for (size_t l = 0; l < L; l++) {
        for (uint32_t j = 0; j < b->nout; j++)
            ybar[j] = adj[(size_t)(hid + 1 + j) * L + l];
        const double *xbar = ad_block_pullback(t, b, ybar);
        for (uint32_t k = 0; k < b->nargs; k++)
            adj[(size_t)ids[k] * L + l] += xbar[k];
        for (uint32_t k = 0; k < b->run_len; k++)
            adj[(size_t)(b->run + k) * L + l] += xbar[b->nargs + k];
    }
}

void ad_block_forward(ad_tape *t, const ad__record *r, uint32_t hid, double *tan, size_t L)
{
    ad_block *b = ad_block_of(t, r);
    for (size_t l = 0; l < L; l++)
        tan[(size_t)hid * L + l] = 0.0;
    if (b->kind->forward) {
        for (size_t l = 0; l < L; l++)
            b->kind->forward(t, b, hid, tan, L, l);
        return;
    }
    const uint32_t *ids = ad_block_ids(b);
    size_t nx = (size_t)b->nargs + b->run_len;
    double *xdot = ad_block_work(t), *ydot = ad_block_work(t) + nx;
    for (size_t l = 0; l < L; l++) {
        /* A constant argument's tangent is 0 (its slot is the sink). */
        for (uint32_t k = 0; k < b->nargs; k++)
            xdot[k] = ids[k] ? tan[(size_t)ids[k] * L + l] : 0.0;
        for (uint32_t k = 0; k < b->run_len; k++)
            xdot[b->nargs + k] = tan[(size_t)(b->run + k) * L + l];
        ad_block_enter();
        b->kind->jvp(t, b, xdot, ydot);
        ad_block_leave();
        for (uint32_t j = 0; j < b->nout; j++)
            tan[(size_t)(hid + 1 + j) * L + l] = ydot[j];
    }
}

void ad_block_second(ad_tape *t, const ad__record *r, uint32_t hid, const double *tan,
                     double *adj, double *adjd, size_t L, size_t live)
{
    ad_block *b = ad_block_of(t, r);
    ad_block_enter();
    for (size_t l = 0; l < live; l++)
        b->kind->second(t, b, hid, tan, adj, adjd, L, l, l == 0);
    ad_block_leave();
}

void ad_block_fail(ad_tape *t, ad_status s)
{
    if (t->fault == AD_OK)
        t->fault = s;
}
