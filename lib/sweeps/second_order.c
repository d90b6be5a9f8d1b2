/* dualrev: the second-order sweep, forward over reverse (the sweeps of
 * ad_hvp, ad_hessian and a checkpointed loop's second-order rule).
 *
 * H v is the derivative of the gradient in the direction v.  The objective
 * is recorded once in second-order mode, where each record also keeps its
 * second partials (modes/second.c, the mode's hook).  A forward sweep gives every value's
 * tangent t = d(value)/d(eps) along x + eps v (tangent.c); then one
 * reverse sweep carries, beside each cotangent z, its tangent z':
 *
 *   adj[a]  += z wa
 *   adjd[a] += z' wa + z (h_aa t_a + h_ab t_b)          (and so for b)
 *
 * since the tangent of a partial wa is h_aa t_a + h_ab t_b.  At the
 * inputs adj is the gradient and adjd is H v.  Several directions share
 * one sweep as lanes (adjd and the tangents have L per ID; adj has one),
 * which is how ad_hessian takes n directions. */
#include <string.h>

#include "block.h"
#include "nary_kinds.h"
#include "second.h"
#include "second_order.h"
#include "seeded.h"
#include "sweep.h"
#include "walk.h"

/* The tangents, then the cotangents' tangents, of every ID: kept per tape
 * between calls.  A sweep leaves the cotangents' tangents of the records
 * at 0 as it takes them, so [clean, clean_end) of tan2 is known to be 0
 * and the next pass with that layout clears only the inputs'. */
typedef struct scratch {
    double *tan2;
    size_t cap;
    size_t clean, clean_end;
} scratch;

static void scratch_free(void *state)
{
    ad_free(((scratch *)state)->tan2);
}

static size_t scratch_bytes(const void *state)
{
    return ((const scratch *)state)->cap * sizeof(double);
}

static const ad_tenant tenant = {sizeof(scratch), scratch_free, scratch_bytes, NULL};

/* adjd[a] += z' w + z wd, for every lane, and adj[a] += z w. */
AD_INLINE void give(double *adj, double *adjd, uint32_t a, double z, const double *zd, double w,
                    const double *wd, const size_t L)
{
    double *p = adjd + (size_t)a * L;
    adj[a] += z * w;
    for (size_t l = 0; l < L; l++)
        p[l] += zd[l] * w + z * wd[l];
}

/* Whether all three second partials are 0 (either sign): one test of
 * their bits, not three compares. */
AD_INLINE int all_zero(ad_aux h)
{
    uint64_t a, b, c;
    memcpy(&a, &h.aa, sizeof a);
    memcpy(&b, &h.ab, sizeof b);
    memcpy(&c, &h.bb, sizeof c);
    return ((a | b | c) << 1) == 0;
}

/* The tangent of a two-argument record's partials, from its second
 * partials h: wd_a = h_aa t_a + h_ab t_b, wd_b = h_ab t_a + h_bb t_b.
 * The record is read into locals first: a store into the arrays could
 * otherwise be its partials, to be read again for every lane. */
AD_INLINE void apply2(const ad__record *r, ad_aux h, const double *tan, double *adj,
                      double *adjd, double z, const double *zd, const size_t L)
{
    const uint32_t a = r->a, b = r->b;
    const double wa = r->wa, wb = r->wb;
    /* A zero second partial adds nothing, even against a NaN or Inf
     * tangent (sqrt(x0) + x1^2 at x0 = 0 along x1): the partial does not
     * depend on that argument.  Linear records, the commonest, have no
     * second partials at all: their tangents' cotangents are zd w. */
    if (all_zero(h)) {
        double *pa = adjd + (size_t)a * L, *pb = adjd + (size_t)b * L;
        adj[a] += z * wa;
        adj[b] += z * wb;
        for (size_t l = 0; l < L; l++)
            pa[l] += zd[l] * wa;
        for (size_t l = 0; l < L; l++)  /* after a's: b may be a */
            pb[l] += zd[l] * wb;
        return;
    }
    const double *ta = tan + (size_t)a * L, *tb = tan + (size_t)b * L;
    double wda[AD_SECOND_LANES], wdb[AD_SECOND_LANES];
    for (size_t l = 0; l < L; l++) {
        /* Plain products first; only a NaN, rare, can come from a zero
         * second partial against a NaN or Inf tangent, and then the terms
         * are taken again without those. */
        wda[l] = h.aa * ta[l] + h.ab * tb[l];
        wdb[l] = h.ab * ta[l] + h.bb * tb[l];
        if (AD__UNLIKELY(wda[l] != wda[l] || wdb[l] != wdb[l])) {
            if (ad_aux_scaled(r, &h)) {  /* out of the double range (second.h) */
                wda[l] = ad_aux_times(&h, ta[l]);
                wdb[l] = 0.0;
                continue;
            }
            double aa = h.aa != 0.0 ? h.aa * ta[l] : 0.0, bb = h.bb != 0.0 ? h.bb * tb[l] : 0.0;
            double ab_a = h.ab != 0.0 ? h.ab * ta[l] : 0.0, ab_b = h.ab != 0.0 ? h.ab * tb[l] : 0.0;
            wda[l] = aa + ab_b;
            wdb[l] = ab_a + bb;
        }
    }
    give(adj, adjd, a, z, zd, wa, wda, L);
    give(adj, adjd, b, z, zd, wb, wdb, L);
}

/* logsumexp: the partials are the softmax w, whose tangent is
 * w_i (t_i - sum_j w_j t_j). */
AD_INLINE void lse_run(const ad_tape *t, uint32_t id, uint32_t count, const double *tan,
                       double *adj, double *adjd, double z, const double *zd, const size_t L)
{
    double s[AD_SECOND_LANES] = {0};
    for (uint32_t k = 1; k <= count; k++) {
        const ad__record *r = ad_tape_record(t, id - k);
        for (size_t l = 0; l < L; l++)
            s[l] += r->wa * tan[(size_t)r->a * L + l] + r->wb * tan[(size_t)r->b * L + l];
    }
    for (uint32_t k = 1; k <= count; k++) {
        const ad__record *r = ad_tape_record(t, id - k);
        double wda[AD_SECOND_LANES], wdb[AD_SECOND_LANES];
        for (size_t l = 0; l < L; l++) {
            wda[l] = r->wa * (tan[(size_t)r->a * L + l] - s[l]);
            wdb[l] = r->wb * (tan[(size_t)r->b * L + l] - s[l]);
        }
        give(adj, adjd, r->a, z, zd, r->wa, wda, L);
        give(adj, adjd, r->b, z, zd, r->wb, wdb, L);
    }
}

/* prod: the partial of x_i is C prod_{k != i} x_k (C: the constants'
 * product, in the header's aux; the active x_k in the slots' aux, two per
 * slot, in order).  Its tangent is the eps-part of the same product over
 * x_k + eps t_k: prefix and suffix products of such dual numbers, zero-safe
 * like the partials.  The prefixes go to the work array, reserved by
 * reduce.c. */
static void prod_run(const ad_tape *t, uint32_t id, uint32_t count, const double *tan,
                     double *adj, double *adjd, double z, const double *zd, size_t L)
{
    uint32_t lo = id - count;
    double *pre = ad_block_work(t);  /* value and eps-part of the prefix before each argument */
    for (size_t l = 0; l < L; l++) {
        double p = ad_tape_aux(t, id)->aa, pd = 0.0;
        size_t i = 0;
        for (uint32_t s = lo; s < id; s++) {
            const ad__record *r = ad_tape_record(t, s);
            const ad_aux *v = ad_tape_aux(t, s);
            uint32_t arg[2] = {r->a, r->b};
            double x[2] = {v->aa, v->bb};
            for (int q = 0; q < 2 && arg[q]; q++, i++) {
                double td = tan[(size_t)arg[q] * L + l];
                pre[2 * i] = p;
                pre[2 * i + 1] = pd;
                pd = pd * x[q] + p * td;
                p *= x[q];
            }
        }
        double sv = 1.0, sd = 0.0;
        for (uint32_t s = id; s-- > lo;) {
            const ad__record *r = ad_tape_record(t, s);
            const ad_aux *v = ad_tape_aux(t, s);
            uint32_t arg[2] = {r->a, r->b};
            double x[2] = {v->aa, v->bb}, w[2] = {r->wa, r->wb};
            for (int q = 1; q >= 0; q--) {
                if (!arg[q])
                    continue;
                i--;
                double wd = pre[2 * i + 1] * sv + pre[2 * i] * sd;
                if (l == 0)
                    adj[arg[q]] += z * w[q];
                adjd[(size_t)arg[q] * L + l] += zd[l] * w[q] + z * wd;
                double td = tan[(size_t)arg[q] * L + l];
                sd = sd * x[q] + sv * td;
                sv *= x[q];
            }
        }
    }
}

/* The n-ary record whose header is at id; returns the number of slots. */
static uint32_t nary(const ad_tape *t, const ad__record *r, uint32_t id, const double *tan,
                     double *adj, double *adjd, double z, const double *zd, size_t L)
{
    uint32_t count = r->a;
    const ad_nary_kind *kind = ad_nary_kind_of(r->wa);
    if (kind->second == AD_NARY_SOFTMAX) {
        lse_run(t, id, count, tan, adj, adjd, z, zd, L);
        return count;
    }
    if (kind->second == AD_NARY_PRODUCT) {
        prod_run(t, id, count, tan, adj, adjd, z, zd, L);
        return count;
    }
    ad_aux h = {0.0, 0.0, 0.0};
    if (kind->second == AD_NARY_PAIRS)
        h.ab = kind->h;
    else if (kind->second == AD_NARY_SQUARES)
        h.aa = h.bb = kind->h;
    for (uint32_t k = 1; k <= count; k++) {
        const ad__record *s = ad_tape_record(t, id - k);
        ad_aux hs = h;
        if (!s->b)  /* the sink: a lone argument */
            hs.ab = hs.bb = 0.0;
        apply2(s, hs, tan, adj, adjd, z, zd, L);
    }
    return count;
}

/* An exact sweep's marks (seeded.h, ad_retry): the arguments of a record
 * it applies are reached. */
AD_INLINE void reach2(ad_tape *t, const ad__record *r)
{
    ad_reach_mark(t, r->a);
    ad_reach_mark(t, r->b);
}

/* Whether one of the outputs of the block whose header is hid is reached;
 * if so its arguments are, all of them (its rule adds to each). */
static int block_reached(ad_tape *t, const ad__record *r, uint32_t hid)
{
    ad_block *b = ad_block_of(t, r);
    int on = b->kind->collective;  /* run, reached or not: collective.h */
    for (uint32_t j = 1; j <= r->a; j++)
        on |= ad_reached(ad_reach_bits(t), hid + j);
    if (on) {
        const uint32_t *ids = ad_block_ids(b);
        for (uint32_t k = 0; k < b->nargs; k++)
            ad_reach_mark(t, ids[k]);
        for (uint32_t k = 0; k < b->run_len; k++)
            ad_reach_mark(t, b->run + k);
    }
    return on;
}

/* A run of ordinary records, from the one below w's place down while
 * they last in its chunk, each applied once its cotangent is complete. */
AD_INLINE void run_second(ad_walk *w, const ad_aux *aux, const double *tan, double *adj,
                          double *adjd, const size_t L)
{
    const ad__record *r = w->r, *base = w->base;
    uint32_t id = w->id;
    do {
        --r;
        --id;
        double zd[AD_SECOND_LANES];
        for (size_t l = 0; l < L; l++) {
            zd[l] = adjd[(size_t)id * L + l];
            adjd[(size_t)id * L + l] = 0.0;
        }
        apply2(r, aux[r - base], tan, adj, adjd, adj[id], zd, L);
    } while (r > base && ad_walk_ordinary(r - 1));
    ad_walk_stop(w, r, id);
}

/* The second partials lie beside the records, chunk for chunk; an n-ary
 * record's run is handled with its header.  An exact sweep applies only
 * the records its seed reaches, marking as it goes, one at a time.  The
 * cotangents' tangents of every record are left at 0: those it does not
 * reach never had any. */
AD_INLINE void sweep_second(ad_tape *t, const double *tan, double *adj, double *adjd, uint32_t top,
                            const size_t L, size_t live, const int exact)
{
    unsigned char *const *aux = ad_tape_side(t, &ad_second_mode)->chunks;
    ad_walk w = ad_walk_down_from(t, top);
    for (int kind; (kind = ad_walk_down(&w)) != AD_WALK_END;) {
        if (kind == AD_WALK_RUN && !exact) {
            run_second(&w, (const ad_aux *)(const void *)aux[w.c], tan, adj, adjd, L);
            continue;
        }
        uint32_t id = kind == AD_WALK_RUN ? w.id - 1 : w.hid;
        double z = adj[id], zd[AD_SECOND_LANES];
        for (size_t l = 0; l < L; l++) {
            zd[l] = adjd[(size_t)id * L + l];
            if (kind != AD_WALK_BLOCK)
                adjd[(size_t)id * L + l] = 0.0;
        }
        int on = !exact || ad_reached(ad_reach_bits(t), id);
        if (kind == AD_WALK_RUN) {
            const ad__record *r = w.r - 1;
            ad_walk_stop(&w, r, id);
            if (on) {
                reach2(t, r);
                apply2(r, ((const ad_aux *)(const void *)aux[w.c])[r - w.base], tan, adj, adjd, z, zd,
                       L);
            }
        } else if (kind == AD_WALK_NARY) {
            if (on) {
                for (uint32_t s = 1; exact && s <= w.hdr->a; s++)
                    reach2(t, ad_tape_record(t, id - s));
                nary(t, w.hdr, id, tan, adj, adjd, z, zd, L);
            }
        } else {
            if (!exact || block_reached(t, w.hdr, id))
                ad_block_second(t, w.hdr, id, tan, adj, adjd, L, live);
            memset(adjd + (size_t)id * L, 0, ((size_t)w.hdr->a + 1) * L * sizeof *adjd);
        }
    }
    if (exact)
        ad_reach_clear(t, top);
}

/* live: the lanes that carry a direction, for the blocks' rules. */
static void second_sweep(ad_tape *t, const double *tan, double *adj, double *adjd, uint32_t top,
                         size_t L, size_t live, int exact)
{
    if (L == 1)
        exact ? sweep_second(t, tan, adj, adjd, top, 1, 1, 1)
              : sweep_second(t, tan, adj, adjd, top, 1, 1, 0);
    else if (L == AD_LANES)
        exact ? sweep_second(t, tan, adj, adjd, top, AD_LANES, live, 1)
              : sweep_second(t, tan, adj, adjd, top, AD_LANES, live, 0);
    else
        exact ? sweep_second(t, tan, adj, adjd, top, AD_SECOND_LANES, live, 1)
              : sweep_second(t, tan, adj, adjd, top, AD_SECOND_LANES, live, 0);
}

/* The tangents' array, zero at the inputs, for the caller to seed: lane l
 * of input k is tan[(k + 1) * L + l]. */
static double *seeds(ad_tape *t, size_t n, size_t L)
{
    double *tan = ((scratch *)ad_tape_state_if(t, &tenant))->tan2;
    memset(tan, 0, (n + 1) * L * sizeof *tan);
    return tan;
}

/* The outputs' seeds: weights w of the m outputs and their tangents wd
 * (one lane), or, w NULL, the objective's 1 and 0; all: every pass is
 * exact, from every output whatever its weight (ad_second_vjp). */
typedef struct out_seeds {
    size_t m;
    const double *w, *wd;
    int all;
} out_seeds;

/* From the seeded inputs: the tangents, then the second-order sweep,
 * seeded with r's scale, exact or not (seeded.h, "Scaled seeds" and
 * ad_retry), the first `live` of its L lanes carrying directions.
 * Leaves the gradient in t->adj; returns the cotangents' tangents, whose
 * lane l at the inputs is H v_l; both times the scale. */
static const double *along(ad_tape *t, uint32_t top, size_t L, size_t live, const ad_retry *r,
                           const out_seeds *o)
{
    scratch *sc = ad_tape_state_if(t, &tenant);
    double *tan = sc->tan2;
    size_t base = ((size_t)top + 1) * L, inputs = (size_t)t->first * L;
    double *adjd = tan + base;
    ad_tangent(t, tan, top, L);
    memset(t->adj, 0, ((size_t)top + 1) * sizeof *t->adj);
    int clean = sc->clean <= base + inputs && sc->clean_end >= 2 * base;
    memset(adjd, 0, (clean ? inputs : base) * sizeof *adjd);
    /* Outputs that share an ID add up; a constant one seeds the sink.  An
     * exact pass starts from the outputs of nonzero weight, or from every
     * output (o->all). */
    int exact = r->exact || o->all;
    for (size_t j = 0; j < o->m; j++) {
        uint32_t id = t->outputs[j].id;
        double w = o->w ? o->w[j] : 1.0, wd = o->w ? o->wd[j] : 0.0;
        t->adj[id] += w * r->scale;
        adjd[(size_t)id * L] += wd * r->scale;
        if (exact && (o->all || w != 0.0 || wd != 0.0))
            ad_reach_mark(t, id);
    }
    second_sweep(t, tan, t->adj, adjd, top, L, live, exact);
    sc->clean = base + inputs;
    sc->clean_end = 2 * base;
    return adjd;
}

static const out_seeds objective = {1, NULL, NULL, 0};

/* Room for the sweeps of a second-order recording with m outputs. */
static ad_status room(ad_tape *t, size_t m, size_t L, uint32_t *top)
{
    if (t->traits & AD_BLOCK_NO_SECOND)
        return AD_ENOTSUP;
    *top = ad_outputs_top(t, m);
    size_t ids = (size_t)*top + 1;
    ad_status s = ad_tape_borrow_adjoints(t, ids);  /* left holding the gradient and more */
    scratch *sc = s == AD_OK ? ad_tape_state(t, &tenant) : NULL;
    if (s == AD_OK && (!sc || ids > SIZE_MAX / (2 * L)))
        s = AD_ENOMEM;
    if (s == AD_OK) {
        const double *old = sc->tan2;
        s = ad_reserve((void **)&sc->tan2, &sc->cap, 2 * L * ids, sizeof *sc->tan2);
        if (sc->tan2 != old)  /* new memory: nothing known */
            sc->clean = sc->clean_end = 0;
    }
    return s;
}

/* The seeds and results of ad_hvp (v, hv), of ad_second_vjp (v, the
 * outputs' seeds o; grad and hv the inputs' cotangents and their
 * tangents) or of a block of directions j0 .. j0+B-1 in L lanes: e_j
 * (dirs NULL: columns of H) or dirs[j n ..], H v_j at out + j step,
 * entries `to` apart. */
typedef struct second_seeds {
    size_t n, j0, B, L;
    const double *v;
    const out_seeds *o;
    double *grad, *hv;
    const double *dirs;
    double *out;
    size_t step, to;
    uint32_t top;
} second_seeds;

/* One pass of ad_hvp or ad_second_vjp (seeded.h, ad_pass). */
static double hvp_pass(ad_tape *t, const ad_retry *r, void *ctx)
{
    const second_seeds *c = ctx;
    size_t n = c->n;
    double *tan = seeds(t, n, 1);
    if (n)
        memcpy(tan + 1, c->v, n * sizeof *c->v);
    const double *adjd = along(t, c->top, 1, 1, r, c->o);
    double sum = ad_results(r, c->grad, 1, t->adj + 1, 1, n);
    return sum + ad_results(r, c->hv, 1, adjd + 1, 1, n);
}

/* One pass of a block of directions (seeded.h, ad_pass). */
static double hessian_pass(ad_tape *t, const ad_retry *r, void *ctx)
{
    const second_seeds *c = ctx;
    size_t n = c->n, j0 = c->j0, B = c->B, L = c->L;
    double *tan = seeds(t, n, L);
    for (size_t b = 0; b < B; b++) {
        if (!c->dirs) {
            tan[(j0 + b + 1) * L + b] = 1.0;
            continue;
        }
        const double *v = c->dirs + (j0 + b) * n;
        for (size_t i = 0; i < n; i++)
            tan[(i + 1) * L + b] = v[i];
    }
    const double *adjd = along(t, c->top, L, B, r, c->o);
    double sum = ad_results(r, c->grad, 1, t->adj + 1, 1, n);
    for (size_t b = 0; b < B; b++)
        sum += ad_results(r, c->out + (j0 + b) * c->step, c->to, adjd + L + b, L, n);
    return sum;
}


ad_status ad_second_hvp(ad_tape *t, size_t n, const double *v, double *grad, double *hv)
{
    uint32_t top;
    ad_status s = ad_agree_sweep(t, room(t, 1, 1, &top));
    if (s != AD_OK)
        return s;
    second_seeds c = {.n = n, .v = v, .o = &objective, .grad = grad, .hv = hv, .top = top};
    double sum;
    s = ad_seeded(t, top, AD_SEEDED_EXACT, hvp_pass, &c, &sum);
    return ad_second_results(t, s, sum);
}

/* Direction j0 + b of c's block alone, for its status. */
static ad_status one_by_one(ad_tape *t, second_seeds c)
{
    size_t j0 = c.j0, B = c.B;
    c.L = 1;
    c.B = 1;
    for (size_t b = 0; b < B; b++) {
        c.j0 = j0 + b;
        double sum;
        ad_status s = ad_seeded(t, c.top, AD_SEEDED_EXACT, hessian_pass, &c, &sum);
        s = ad_second_results(t, s, sum);
        if (s != AD_OK)
            return s;
    }
    return AD_OK;
}

/* The wide lanes' tangents and cotangent tangents, 16 AD_SECOND_LANES
 * bytes an ID, are read and written once a record: beyond what a cache
 * holds, that costs more than the pass it saves. */
#define WIDE_BYTES ((size_t)4 << 20)

/* Lanes for k directions over records up to top: 1, AD_LANES, or
 * AD_SECOND_LANES where more than AD_LANES are asked and their arrays are
 * small. */
static size_t lanes_for(size_t k, uint32_t top)
{
    size_t wide = ((size_t)top + 1) * 2 * AD_SECOND_LANES * sizeof(double);
    return k == 1 ? 1 : k <= AD_LANES || wide > WIDE_BYTES ? AD_LANES : AD_SECOND_LANES;
}

/* k directions, L at a time.  A block whose results say AD_EOVERFLOW
 * takes its directions again one by one: the NaN may be one direction's
 * and the out-of-range partial another's, and each fails as ad_hvp along
 * it would. */
static ad_status directions(ad_tape *t, second_seeds c, size_t k)
{
    size_t L = lanes_for(k, ad_outputs_top(t, 1));
    ad_status s = ad_agree_sweep(t, room(t, 1, L, &c.top));
    for (c.j0 = 0; c.j0 < k && s == AD_OK; c.j0 += L) {
        c.B = k - c.j0 < L ? k - c.j0 : L;
        c.L = L;
        double sum;
        s = ad_seeded(t, c.top, AD_SEEDED_EXACT, hessian_pass, &c, &sum);
        s = ad_second_results(t, s, sum);
        if (s == AD_EOVERFLOW && c.B > 1)
            s = one_by_one(t, c);
    }
    return s;
}

/* Columns of H.  H is not symmetrised: its symmetry is a check on the
 * sweep. */
ad_status ad_second_columns(ad_tape *t, size_t n, double *grad, double *hess)
{
    second_seeds c = {.n = n, .o = &objective, .grad = grad, .out = hess, .step = 1, .to = n};
    return directions(t, c, n);
}

ad_status ad_second_directions(ad_tape *t, size_t n, size_t k, const double *V, double *grad,
                               double *HV)
{
    second_seeds c = {.n = n, .o = &objective, .grad = grad, .dirs = V, .out = HV, .step = n,
                      .to = 1};
    return directions(t, c, k);
}

ad_status ad_second_vjp(ad_tape *t, size_t m, const double *v, const double *w, const double *wd,
                        double *xbar, double *xbard)
{
    out_seeds o = {m, w, wd, 1};
    second_seeds c = {.n = t->first - 1, .v = v, .o = &o, .grad = xbar, .hv = xbard};
    ad_status s = room(t, m, 1, &c.top);
    if (s == AD_OK)
        s = ad_reach_reserve(t, c.top);  /* its passes are exact */
    if ((s = ad_agree_sweep(t, s)) != AD_OK)
        return s;
    double sum;
    s = ad_seeded(t, c.top, 0, hvp_pass, &c, &sum);
    return ad_second_results(t, s, sum);
}
