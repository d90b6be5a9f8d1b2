/* dualrev: checkpointed time loops (ad_checkpointed_loop).
 *
 * The loop is one block record (block.h).  Recording it runs the steps on
 * plain values and keeps the states the binomial schedule (revolve.h)
 * puts in the snapshots; its rules replay steps from them, each step on a
 * tape of its own, one nesting level down: the reverse rule records each
 * step once, in revolve order, and sweeps it; the forward rule records
 * each step once, in order, and runs its forward sweep; the second-order
 * rule does the reverse one with states and tangents in the snapshots,
 * each step recorded in second-order mode.  A rule's failure (memory, a
 * foreign value, a check) is the sweep's fault (ad_block_fail). */
#include <math.h>
#include <string.h>

#include "block.h"
#include "check.h"
#include "collective.h"
#include "listing.h"
#include "loop_hessian.h"
#include "recording.h"
#include "revolve.h"
#include "second.h"
#include "second_order.h"
#include "seeded.h"
#include "status.h"
#include "sweep.h"

typedef struct loop {
    ad_block base;
    ad_step_fn step;
    void *ctx;
    size_t steps, snaps, n, np;
    size_t width;  /* doubles per snapshot: n, or 2n (states and tangents) if recorded for second order */
    int warm;      /* the snapshots and `last` still hold the recording's descent */
    const char *label;  /* ad_where's where the loop was recorded: its steps' in every replay */
    /* then: double x[n + np] (state0, params), y[n] (stateN), last[n] (the
     * state before the last step), snap[snaps * width]; uint32_t ids[n + np] */
} loop;

static double *lp_x(loop *lp)
{
    return (double *)(void *)(lp + 1);
}

static double *lp_y(loop *lp)
{
    return lp_x(lp) + lp->n + lp->np;
}

static double *lp_last(loop *lp)
{
    return lp_y(lp) + lp->n;
}

static double *lp_snap(loop *lp, size_t k)
{
    return lp_last(lp) + lp->n + k * lp->width;
}

/* ---- what the last recording's loops keep, for ad_tape_stats ---- */

typedef struct loop_stats {
    uint64_t serial;  /* the recording the figures are of */
    size_t snapshot_bytes, step_bytes;
} loop_stats;

static void stats_out(const void *state, const ad_tape *t, ad_tape_stats *out)
{
    const loop_stats *st = state;
    if (st->serial == t->serial) {
        out->snapshot_bytes = st->snapshot_bytes;
        out->step_bytes = st->step_bytes;
    }
}

static const ad_tenant stats_tenant = {sizeof(loop_stats), NULL, NULL, stats_out};

/* The figures of t's current recording (NULL if they cannot be had). */
static loop_stats *stats_of(ad_tape *t)
{
    loop_stats *st = ad_tape_state(t, &stats_tenant);
    if (st && st->serial != t->serial)
        *st = (loop_stats){t->serial, 0, 0};
    return st;
}

/* ---- one replay: a rule's run of steps ---- */

typedef struct replay {
    loop *lp;
    const ad_tape *owner;  /* the tape whose block it is */
    int second;            /* states carry tangents (width 2n) */
    double *reg;           /* the current state (and its tangent) */
    double *vals, *vin;    /* a recorded step's inputs and their tangents: state, then params */
    double *xb, *xbd;      /* a recorded step's inputs' cotangents and their tangents */
    double *lam, *lamd;    /* the current state's cotangent and its tangent */
    double *pacc, *pdacc;  /* the params' cotangents and their tangents, summed over steps */
    ad_real *in, *out;     /* a plain step's arguments (state, then params) and results */
    size_t *frames;        /* the schedule's stack: the first step of each segment */
    int exact;             /* an exact sweep's replay: reach carried from step to step */
    ad_loop_edges *edges;  /* edge pushing's replay (loop_hessian.h): each step pulls its part back */
    unsigned char *sreach; /* exact: the state's entries reached, then the params' */
    unsigned char *flags;  /* exact: one step's sweep's flags (sweep.h, ad_reverse_in) */
    size_t bad1;           /* checked forward: the step k + 1 that made a non-finite state */
} replay;

/* While step k runs (or is recorded and swept), faults name it, and the
 * thread's label is the one the loop was recorded under, whenever the
 * replay runs; a label the step sets ends with it. */
typedef struct at_step {
    const char *label;
    size_t step1;
} at_step;

static at_step step_enter(const loop *lp, size_t k)
{
    ad_checks *ck = ad_checks_of(ad_thread_self());
    at_step was = {ck->label, ck->step1};
    ck->label = lp->label;
    ck->step1 = k + 1;
    return was;
}

static void step_leave(at_step was)
{
    ad_checks *ck = ad_checks_of(ad_thread_self());
    ck->label = was.label;
    ck->step1 = was.step1;
}

static int all_finite(const ad_real *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i].v))
            return 0;
    return 1;
}

static void replay_free(replay *rp)
{
    ad_free(rp->reg);
    ad_free(rp->in);
    ad_free(rp->frames);
    ad_free(rp->sreach);
    rp->reg = NULL;
    rp->in = NULL;
    rp->frames = NULL;
    rp->sreach = NULL;
}

static ad_status replay_make(replay *rp, const ad_tape *owner, loop *lp, int second)
{
    size_t n = lp->n, nx = lp->n + lp->np;
    memset(rp, 0, sizeof *rp);
    rp->lp = lp;
    rp->owner = owner;
    rp->second = second;
    if (nx > (SIZE_MAX / sizeof(double) - 1) / 8)  /* 8n + 6np + 1 below */
        return AD_ERANGE;
    rp->reg = ad_alloc((2 * n + 4 * nx + 2 * n + 2 * lp->np + 1) * sizeof(double));
    rp->in = ad_alloc((nx + n + 1) * sizeof(ad_real));
    rp->frames = ad_alloc((lp->snaps + 1) * sizeof(size_t));
    rp->sreach = ad_alloc(2 * nx + n);
    if (!rp->reg || !rp->in || !rp->frames || !rp->sreach) {
        replay_free(rp);
        return AD_ENOMEM;
    }
    memset(rp->reg, 0, 2 * n * sizeof *rp->reg);  /* the tangents a first-order replay keeps */
    rp->vals = rp->reg + 2 * n;
    rp->vin = rp->vals + nx;
    rp->xb = rp->vin + nx;
    rp->xbd = rp->xb + nx;
    rp->lam = rp->xbd + nx;
    rp->lamd = rp->lam + n;
    rp->pacc = rp->lamd + n;
    rp->pdacc = rp->pacc + lp->np;
    rp->out = rp->in + nx;
    rp->flags = rp->sreach + nx;
    memset(rp->sreach, 0, nx);
    const double *x = lp_x(lp);
    for (size_t i = 0; i < lp->np; i++) {
        rp->in[n + i] = ad_const(x[n + i]);
        rp->vals[n + i] = x[n + i];
    }
    return AD_OK;
}

/* Agreed with the other processes (collective.h): a replay that one of
 * them cannot start is started by none. */
static ad_status replay_start(replay *rp, const ad_tape *owner, loop *lp, int second)
{
    ad_status s = ad_agree(replay_make(rp, owner, lp, second));
    if (s != AD_OK)
        replay_free(rp);  /* rp's pointers are NULL or rp's own */
    return s;
}

/* Steps k0 .. k1-1 on plain values, from and into the state in reg.
 * With `guard`, they run with a recording of their own active (one level
 * down) that records nothing, as every value is constant: an active value
 * the step takes from elsewhere (the recording around the loop) fails it,
 * AD_EFOREIGN, instead of going unseen.  Outside every recording no value
 * is active, and the thread's next tape keeps its last recording. */
static ad_status run_plain(replay *rp, size_t k0, size_t k1, int guard)
{
    loop *lp = rp->lp;
    size_t n = lp->n;
    ad_thread *th = ad_thread_self();
    ad_tape *g = guard ? ad_thread_tape() : NULL;
    if (guard && !g)
        return AD_ENESTING;
    ad_status s = ad_agree(g ? ad_tape_begin(g, th, 0, NULL, 0) : AD_OK);
    if (s != AD_OK)
        return s;
    if (g)
        g->traits |= AD_GUARD_TAPE;
    /* collective (collective.h): every step runs on every process, which
     * agree on the first failure at the end */
    int coll = ad_collective_on();
    ad_checks *ck = ad_checks_of(th);
    if (g)
        ad_checks_begin(ck, g, th->depth);
    /* the recording's forward pass, checked: the first step to make a
     * non-finite state from a finite one is found again below (locate) */
    int check = guard && rp->owner && (rp->owner->checks & AD_CHECK_FINITE) && !coll;
    ad__cursor *outer = ad__active;
    if (g)
        ad__active = &g->cursor;
    th->depth++;
    for (size_t k = k0; k < k1 && (s == AD_OK || coll); k++) {
        for (size_t i = 0; i < n; i++) {
            rp->in[i] = ad_const(rp->reg[i]);
            rp->out[i] = ad_const(NAN);  /* what the step leaves unwritten */
        }
        at_step was = step_enter(lp, k);
        lp->step(k, rp->in, rp->out, n, rp->in + n, lp->np, lp->ctx);
        step_leave(was);
        if (s == AD_OK)
            s = g ? g->status : AD_OK;
        for (size_t i = 0; i < n; i++)
            if (rp->out[i].id && s == AD_OK)
                s = AD_EFOREIGN;  /* an active value, not made here */
        if (check && s == AD_OK && all_finite(rp->in, n + lp->np) && !all_finite(rp->out, n)) {
            rp->bad1 = k + 1;
            s = AD_ENONFINITE;
            break;  /* reg keeps step k's input */
        }
        for (size_t i = 0; i < n; i++)
            rp->reg[i] = rp->out[i].v;
    }
    th->depth--;
    ad__active = outer;
    return coll ? ad_agree(s) : s;
}

typedef struct step_call {
    loop *lp;
    size_t k;
} step_call;

static void step_function(const ad_real *x, size_t nx, ad_real *y, size_t m, void *ctx)
{
    const step_call *c = ctx;
    (void)nx;
    c->lp->step(c->k, x, y, m, x + m, c->lp->np, c->lp->ctx);
}

/* Step k recorded on the thread's tape one level down, from the state in
 * reg and the params; the tape, or NULL with *s set. */
static ad_tape *record_step(replay *rp, size_t k, int second, ad_status *s)
{
    loop *lp = rp->lp;
    ad_tape *T = ad_thread_tape();
    memcpy(rp->vals, rp->reg, lp->n * sizeof *rp->vals);
    step_call c = {lp, k};
    *s = ad_record(T, step_function, &c, lp->n + lp->np, rp->vals, lp->n, second);
    if (*s != AD_OK)
        return NULL;
    loop_stats *st = rp->owner ? ad_tape_state_if(rp->owner, &stats_tenant) : NULL;
    size_t bytes = (size_t)(T->cursor.next - T->first) * sizeof(ad__record) * (1 + (size_t)T->non);
    if (st && bytes > st->step_bytes)
        st->step_bytes = bytes;
    return T;
}

/* An exact replay's reach from one step to the next: the state's from
 * `state`, the params' gathered from `params` (NULL: none); then the next
 * sweep's seeds, the state's and the params' (forward: inputs first). */
static void carry(replay *rp, const unsigned char *state, const unsigned char *params)
{
    size_t n = rp->lp->n, np = rp->lp->np;
    unsigned char *sr = rp->sreach;
    memmove(sr, state, n);
    for (size_t i = 0; params && i < np; i++)
        sr[n + i] |= params[i];
    memcpy(rp->flags, sr, n + np);
}

/* Steps k0 .. k1-1 with tangents: each recorded, then swept forward
 * along (state tangent, params' tangents), into reg; every record
 * applied, or (exact) those the seeds reach (sweep.h, ad_forward_in). */
static ad_status run_tangent(replay *rp, size_t k0, size_t k1)
{
    size_t n = rp->lp->n;
    ad_status s = AD_OK;
    for (size_t k = k0; k < k1 && s == AD_OK; k++) {
        at_step was = step_enter(rp->lp, k);
        ad_tape *T = record_step(rp, k, 0, &s);
        if (T) {
            memcpy(rp->vin, rp->reg + n, n * sizeof *rp->vin);
            s = ad_forward_in(T, n, rp->vin, rp->reg + n, rp->exact ? rp->flags : NULL);
            if (rp->exact && s == AD_OK)  /* a failed sweep leaves the flags unset */
                carry(rp, rp->flags + rp->lp->n + rp->lp->np, NULL);
            ad_read_outputs(T, n, rp->reg);
        }
        step_leave(was);
    }
    return s;
}

static ad_status advance(replay *rp, size_t k0, size_t k1)
{
    return rp->second ? run_tangent(rp, k0, k1) : run_plain(rp, k0, k1, 1);
}

/* Step k's reverse, from the state in reg: the state's cotangent lam
 * (and its tangent) moves to step k's input, the params' add up.  Every
 * record applied, or (exact) those the reached state reaches (sweep.h,
 * ad_reverse_in): the loop's own sweep is one pass of its caller's. */
static ad_status sweep_step(replay *rp, size_t k)
{
    loop *lp = rp->lp;
    size_t n = lp->n, np = lp->np;
    ad_status s;
    if (rp->edges)
        return ad_loop_edges_step(rp->edges, lp->step, lp->ctx, k, rp->reg, lp_x(lp) + n);
    ad_tape *T = record_step(rp, k, rp->second, &s);
    if (!T)
        return s;
    if (rp->second) {
        memcpy(rp->vin, rp->reg + n, n * sizeof *rp->vin);
        s = ad_second_vjp(T, n, rp->vin, rp->lam, rp->lamd, rp->xb, rp->xbd);
        for (size_t i = 0; i < np; i++)
            rp->pdacc[i] += rp->xbd[n + i];
        memcpy(rp->lamd, rp->xbd, n * sizeof *rp->lamd);
    } else {
        s = ad_reverse_in(T, n, rp->lam, rp->xb, rp->exact ? rp->flags : NULL);
        if (rp->exact && s == AD_OK)  /* a failed sweep leaves the flags unset */
            carry(rp, rp->flags + n, rp->flags + 2 * n);
    }
    for (size_t i = 0; i < np; i++)
        rp->pacc[i] += rp->xb[n + i];
    memcpy(rp->lam, rp->xb, n * sizeof *rp->lam);
    return s;
}

static ad_status tape_step(replay *rp, size_t k)
{
    at_step was = step_enter(rp->lp, k);
    ad_status s = sweep_step(rp, k);
    step_leave(was);
    return s;
}

static void load(replay *rp, size_t slot)
{
    loop *lp = rp->lp;
    memcpy(rp->reg, lp_snap(lp, slot), lp->width * sizeof *rp->reg);
}

static void store(replay *rp, size_t slot)
{
    loop *lp = rp->lp;
    memcpy(lp_snap(lp, slot), rp->reg, lp->width * sizeof *rp->reg);
}

/* The schedule (revolve.h), from the state in snapshot 0.  A segment of
 * steps [a, b) is a frame: its first state is in snapshot k (its depth),
 * or in reg if it was just reached.  A segment longer than one step
 * advances m steps, keeps that state in snapshot k + 1 (unless one step
 * is left to its right) and takes the right part first; one step is taped
 * and reversed, then the frame below goes on with its left part, which
 * ends where this frame began.  Without `reverse`, it stops at the first
 * one-step segment: the recording's descent, reg holding the state before
 * the last step.  `warm`: that descent is in the snapshots and in `last`
 * already, and the first one-step segment is taped from there.  Frames
 * hold only their first step: k snapshots deep, S - k remain. */
static ad_status schedule(replay *rp, int reverse, int warm)
{
    loop *lp = rp->lp;
    size_t *A = rp->frames, k = 0, b = lp->steps, S = lp->snaps;
    int in_reg = 0;
    ad_status s = AD_OK;
    A[0] = 0;
    if (warm)
        memcpy(rp->reg, lp_last(lp), lp->n * sizeof *rp->reg);
    for (;;) {
        size_t a = A[k];
        if (b - a > 1) {
            size_t m = ad_revolve_split(b - a, S - k);
            if (!warm) {
                if (!in_reg)
                    load(rp, k);
                if ((s = advance(rp, a, a + m)) != AD_OK)
                    return s;
                if (b - a - m > 1)
                    store(rp, k + 1);
            }
            A[++k] = a + m;
            in_reg = 1;
            continue;
        }
        if (!warm && !in_reg)
            load(rp, k);
        if (!reverse) {
            memcpy(lp_last(lp), rp->reg, lp->n * sizeof *rp->reg);
            return AD_OK;
        }
        if ((s = tape_step(rp, a)) != AD_OK)
            return s;
        warm = 0;
        if (k == 0)
            return AD_OK;
        b = A[k--];
        in_reg = 0;
    }
}

/* ---- the block's rules ---- */

/* A rule's end: its failure s the sweep's fault, with NaN in out[0..count);
 * and the caller's overflow flag as it was before the rule (w, from
 * ad_watch_begin): the steps' values may overflow in a replay, which says
 * nothing of the caller's derivatives, and the steps' sweeps report an
 * overflow that made NaN of their results as a fault (AD_EOVERFLOW). */
static void end_rule(ad_tape *t, ad_status s, double *out, size_t count, const ad_watch *w)
{
    if (s != AD_OK) {
        ad_block_fail(t, s);
        ad_fill_nan(out, count);
    }
    (void)ad_watch_over(w);
}

/* The reverse rule, exact (outs: the outputs reached; args gets the
 * arguments reached) or not (outs NULL: every record of every step
 * applied, as the loop written out would be by a sweep that is not
 * exact, zero cotangents included). */
static void reverse_rule(ad_tape *t, ad_block *b, const unsigned char *outs,
                         const double *ybar, double *xbar, unsigned char *args)
{
    loop *lp = (loop *)b;
    size_t n = lp->n;
    ad_watch w = ad_watch_begin();  /* see end_rule() */
    replay rp;
    ad_status s = replay_start(&rp, t, lp, 0);
    if (s == AD_OK) {
        memcpy(rp.lam, ybar, n * sizeof *rp.lam);
        memset(rp.pacc, 0, lp->np * sizeof *rp.pacc);
        if (outs) {
            rp.exact = 1;
            carry(&rp, outs, NULL);
        }
        s = schedule(&rp, 1, lp->warm);
        lp->warm = 0;  /* the reverse overwrote the snapshots */
        memcpy(xbar, rp.lam, n * sizeof *xbar);
        memcpy(xbar + n, rp.pacc, lp->np * sizeof *xbar);
        if (outs)
            memcpy(args, rp.sreach, n + lp->np);
        replay_free(&rp);
    }
    end_rule(t, s, xbar, n + lp->np, &w);
}

static void loop_vjp(ad_tape *t, ad_block *b, const double *ybar, double *xbar)
{
    reverse_rule(t, b, NULL, ybar, xbar, NULL);
}

static void loop_vjp_exact(ad_tape *t, ad_block *b, const unsigned char *outs,
                           const double *ybar, double *xbar, unsigned char *args)
{
    reverse_rule(t, b, outs, ybar, xbar, args);
}

/* The forward rule, exact (args: the arguments whose tangents count;
 * outs gets the outputs reached) or not (args NULL). */
static void forward_rule(ad_tape *t, ad_block *b, const unsigned char *args,
                         const double *xdot, double *ydot, unsigned char *outs)
{
    loop *lp = (loop *)b;
    size_t n = lp->n, np = lp->np;
    ad_watch w = ad_watch_begin();  /* see end_rule() */
    replay rp;
    ad_status s = replay_start(&rp, t, lp, 1);
    if (s == AD_OK) {
        memcpy(rp.reg, lp_x(lp), n * sizeof *rp.reg);
        memcpy(rp.reg + n, xdot, n * sizeof *rp.reg);
        memcpy(rp.vin + n, xdot + n, np * sizeof *rp.vin);
        if (args) {
            rp.exact = 1;
            carry(&rp, args, args + n);
        }
        s = run_tangent(&rp, 0, lp->steps);
        memcpy(ydot, rp.reg + n, n * sizeof *ydot);
        if (args)
            memcpy(outs, rp.sreach, n);
        replay_free(&rp);
    }
    end_rule(t, s, ydot, n, &w);
}

static void loop_jvp(ad_tape *t, ad_block *b, const double *xdot, double *ydot)
{
    forward_rule(t, b, NULL, xdot, ydot, NULL);
}

static void loop_jvp_exact(ad_tape *t, ad_block *b, const unsigned char *args,
                           const double *xdot, double *ydot, unsigned char *outs)
{
    forward_rule(t, b, args, xdot, ydot, outs);
}

/* The second-order replay, rp started with states and tangents: from the
 * outputs' cotangents rp->lam and their tangents rp->lamd, along the
 * arguments' tangents rp->vin (state0's, then the params'), the
 * arguments' cotangents into rp->xb and their tangents into rp->xbd.  A
 * step's second partial out of range (AD_EOVERFLOW) is the caller's as if
 * the loop were written out: NaN where it goes, and the recording says so
 * (second.h), for a pass that is not exact may sweep the loop where the
 * exact one does not. */
static ad_status second_replay(ad_tape *t, replay *rp)
{
    loop *lp = rp->lp;
    size_t n = lp->n, np = lp->np;
    memcpy(rp->reg, lp_x(lp), n * sizeof *rp->reg);
    memcpy(rp->reg + n, rp->vin, n * sizeof *rp->reg);
    store(rp, 0);
    memset(rp->pacc, 0, 2 * np * sizeof *rp->pacc);  /* and pdacc */
    ad_status s = schedule(rp, 1, 0);
    lp->warm = 0;
    memcpy(rp->xb, rp->lam, n * sizeof *rp->xb);
    memcpy(rp->xb + n, rp->pacc, np * sizeof *rp->xb);
    memcpy(rp->xbd, rp->lamd, n * sizeof *rp->xbd);
    memcpy(rp->xbd + n, rp->pdacc, np * sizeof *rp->xbd);
    if (s == AD_EOVERFLOW) {
        t->traits |= AD_SECOND_RANGE;
        ad_fill_nan(rp->xb, n + np);
        ad_fill_nan(rp->xbd, n + np);
        s = AD_OK;
    }
    return s;
}

/* Lane `lane` of L: the outputs' cotangents (adj, one lane) and their
 * tangents (adjd) move to the arguments, along the arguments' tangents
 * (tan); adj is updated on the first lane only. */
static void loop_second(ad_tape *t, ad_block *b, uint32_t hid, const double *tan,
                        double *adj, double *adjd, size_t L, size_t lane, int first)
{
    loop *lp = (loop *)b;
    const uint32_t *ids = ad_block_ids(b);
    size_t n = lp->n, nx = n + lp->np;
    ad_watch w = ad_watch_begin();  /* see end_rule() */
    replay rp;
    ad_status s = replay_start(&rp, t, lp, 1);
    if (s == AD_OK) {
        for (size_t j = 0; j < n; j++) {
            rp.lam[j] = adj[hid + 1 + j];
            rp.lamd[j] = adjd[(size_t)(hid + 1 + j) * L + lane];
        }
        for (size_t k = 0; k < nx; k++)
            rp.vin[k] = ids[k] ? tan[(size_t)ids[k] * L + lane] : 0.0;
        s = second_replay(t, &rp);
        if (s == AD_OK)
            for (size_t k = 0; k < nx; k++) {
                if (first)
                    adj[ids[k]] += rp.xb[k];
                adjd[(size_t)ids[k] * L + lane] += rp.xbd[k];
            }
        replay_free(&rp);
    }
    end_rule(t, s, NULL, 0, &w);
}

/* ---- edge pushing (sparse Hessians) ---- */

/* Edge pushing's rule (block.h, edges): one reverse schedule whose
 * steps each pull back the Jacobian rows of the outputs reached (outs),
 * the cotangents and the interactions found so far, and add their own
 * (loop_hessian.c): the loop's partials, its Hessian weighted by ybar and
 * the arguments' cotangents (xbar, args reached), all with the structure
 * of the loop written out. */
static void loop_edges(ad_tape *t, ad_block *b, const unsigned char *outs, const double *ybar,
                       void (*each)(void *cx, uint32_t o, size_t arg, double d),
                       void (*each2)(void *cx, size_t a, size_t b, double v), void *cx,
                       double *xbar, unsigned char *args)
{
    loop *lp = (loop *)b;
    size_t n = lp->n, nx = n + lp->np;
    memset(args, 0, nx);
    if (t->fault != AD_OK) {  /* an earlier rule failed: the sweep's results are lost */
        ad_fill_nan(xbar, nx);
        return;
    }
    ad_watch w = ad_watch_begin();  /* see end_rule() */
    replay rp;
    ad_status s = replay_start(&rp, t, lp, 0);
    if (s == AD_OK) {
        rp.edges = ad_loop_edges_new(n, lp->np, outs, ybar, &s);
        if (rp.edges) {
            ad_block_enter();  /* the steps are recorded one level down */
            s = schedule(&rp, 1, lp->warm);
            lp->warm = 0;  /* the reverse overwrote the snapshots */
            ad_block_leave();
            if (s == AD_OK && ad_loop_edges_overflowed(rp.edges))
                t->traits |= AD_SECOND_RANGE;  /* as second_replay's */
            if (s == AD_OK)
                ad_loop_edges_emit(rp.edges, ad_block_ids(b), each, each2, cx, xbar, args);
            ad_loop_edges_free(rp.edges);
        }
        replay_free(&rp);
    }
    if (s != AD_OK)
        memset(args, 0, nx);
    end_rule(t, s, xbar, nx, &w);
}

static const ad_block_kind loop_kind = {.name = "checkpointed loop",
                                        .foreign = 1,  /* the steps are the user's code */
                                        .vjp = loop_vjp,
                                        .jvp = loop_jvp,
                                        .second = loop_second,
                                        .edges = loop_edges,
                                        .vjp_exact = loop_vjp_exact,
                                        .jvp_exact = loop_jvp_exact};

/* ---- recording ---- */

static ad_status fail(ad_status s, size_t n, ad_real *y)
{
    ad_fill_nan_reals(y, n);
    return ad_fail_recording(s);
}

/* Not recorded: the steps on plain values. */
static ad_status just_run(ad_step_fn step, void *ctx, size_t steps, size_t n, const ad_real *x0,
                          size_t np, const ad_real *p, ad_real *y)
{
    if (n + np > (SIZE_MAX - sizeof(loop)) / sizeof(double) / 4)
        return fail(AD_ERANGE, n, y);
    loop *lp = ad_alloc(sizeof(loop) + (n + np) * sizeof(double));
    if (!lp)
        return fail(AD_ENOMEM, n, y);
    *lp = (loop){.step = step, .ctx = ctx, .steps = steps, .snaps = 0, .n = n, .np = np,
                 .label = ad_checks_of(ad_thread_self())->label};
    double *x = lp_x(lp);
    for (size_t i = 0; i < n; i++)
        x[i] = x0[i].v;
    for (size_t i = 0; i < np; i++)
        x[n + i] = p[i].v;
    replay rp;
    ad_status s = replay_start(&rp, NULL, lp, 0);
    if (s == AD_OK) {
        memcpy(rp.reg, x, n * sizeof *rp.reg);
        s = run_plain(&rp, 0, steps, ad_recording() != NULL);
        for (size_t i = 0; i < n && s == AD_OK; i++)
            y[i] = ad_const(rp.reg[i]);
        replay_free(&rp);
    }
    ad_free(lp);
    return s == AD_OK ? AD_OK : fail(s, n, y);
}

/* Step rp->bad1 - 1, which made a non-finite state from the finite one
 * in reg, recorded again with the thread's checks: the fault names the
 * operation inside the step, or, if none shows, the loop. */
static ad_status locate(replay *rp)
{
    size_t k = rp->bad1 - 1;
    at_step was = step_enter(rp->lp, k);
    ad_status s;
    if (record_step(rp, k, 0, &s) || s != AD_ENONFINITE) {
        ad_fault f = ad_fault_at(0, "checkpointed loop", rp->lp->label, AD_PHASE_RECORD);
        ad_fault_keep(&f);
    }
    step_leave(was);
    return AD_ENONFINITE;
}

/* The recording's descent and the last step, into x and y. */
static ad_status forward(ad_tape *t, loop *lp)
{
    replay rp;
    ad_status s = replay_start(&rp, t, lp, 0);
    if (s != AD_OK)
        return s;
    memcpy(lp_snap(lp, 0), lp_x(lp), lp->n * sizeof(double));
    s = schedule(&rp, 0, 0);
    if (s == AD_OK)
        s = run_plain(&rp, lp->steps - 1, lp->steps, 1);
    if (s == AD_ENONFINITE && rp.bad1)  /* never set while collective */
        s = locate(&rp);
    memcpy(lp_y(lp), rp.reg, lp->n * sizeof(double));
    replay_free(&rp);
    lp->warm = 1;
    return s;
}

ad_status ad_checkpointed_loop(ad_step_fn step, void *ctx, size_t steps, size_t snapshots,
                               size_t n, const ad_real *state0, size_t np,
                               const ad_real *params, ad_real *stateN)
{
    if (!step || (n && (!state0 || !stateN)) || (np && !params))
        return fail(AD_EINVAL, n, stateN);
    if (n == 0)
        return AD_OK;
    ad_tape *t = ad_recording();
    /* collective (collective.h): recorded on every process, active or not,
     * as its replays may communicate; not in a guard, which no sweep takes */
    int active = (ad_collective_on() && t && !(t->traits & AD_GUARD_TAPE)) ||
                 ad_any_active(n, state0) || ad_any_active(np, params);
    if (!t || !active || steps == 0) {
        if (steps == 0) {
            if (t && !(ad_reals_mine(t, n, state0) && ad_reals_mine(t, np, params)))
                return fail(AD_EFOREIGN, n, stateN);
            memmove(stateN, state0, n * sizeof *stateN);
            return AD_OK;
        }
        return just_run(step, ctx, steps, n, state0, np, params, stateN);
    }
    ad_status s = AD_OK;
    if (!ad_reals_mine(t, n, state0) || !ad_reals_mine(t, np, params))
        s = AD_EFOREIGN;
    size_t S = snapshots ? snapshots : ad_revolve_default(steps);
    if (S > steps)
        S = steps;
    size_t width = ad_tape_side(t, &ad_second_mode) ? 2 * n : n;
    size_t nx = n + np, words = SIZE_MAX;
    if (nx < AD__ID_END && n <= SIZE_MAX / 8 && S <= (SIZE_MAX / 8 - 3 * nx) / width)
        words = 3 * nx + S * width;  /* x, y, last (and room), snapshots */
    if (s == AD_OK && (words == SIZE_MAX || words > (SIZE_MAX - sizeof(loop)) / 8 - nx))
        s = AD_ERANGE;
    size_t size = sizeof(loop) + words * sizeof(double) + nx * sizeof(uint32_t);
    size_t at = s == AD_OK ? ad_block_new(t, size, (uint32_t)n, (uint32_t)nx, 0) : SIZE_MAX;
    loop_stats *st = at == SIZE_MAX ? NULL : stats_of(t);
    if (s == AD_OK && !st)
        s = AD_ENOMEM;
    if ((s = ad_agree(s)) != AD_OK)
        return fail(s, n, stateN);
    loop *lp = (loop *)ad_block_at(t, at);
    lp->base.kind = &loop_kind;
    lp->base.ids = sizeof(loop) + words * sizeof(double);
    *lp = (loop){lp->base, step, ctx, steps, S, n, np, width, 0,
                 ad_checks_of(ad_thread_self())->label};
    double *x = lp_x(lp);
    uint32_t *ids = (uint32_t *)(void *)((char *)lp + lp->base.ids);
    for (size_t i = 0; i < nx; i++) {
        ad_real v = i < n ? state0[i] : params[i - n];
        x[i] = v.v;
        ids[i] = v.id;
    }
    st->snapshot_bytes += S * width * sizeof(double);
    int listing = ad_listing_of(t) != NULL;
    s = forward(t, lp);
    if (s != AD_OK)
        return fail(s, n, stateN);
    if (listing)
        ad_listing_expect(t);
    uint32_t first = ad_block_record(t, at);
    if (!first)
        return fail(t->status, n, stateN);
    lp = (loop *)ad_block_at(t, at);
    if (!ad_check_block(t, loop_kind.name, nx, lp_x(lp), n, lp_y(lp), first))
        return fail(AD_ENONFINITE, n, stateN);
    if (listing) {
        ad_call call = {.step = step, .ctx = ctx, .steps = steps, .snapshots = snapshots,
                        .n = n, .np = np, .m = n};
        ad_listing_call(t, &call, state0, params, first, lp_y(lp));
        if (t->status != AD_OK)
            return fail(t->status, n, stateN);
    }
    for (size_t j = 0; j < n; j++)
        stateN[j] = ad__made(lp_y(lp)[j], first + (uint32_t)j);
    return AD_OK;
}
