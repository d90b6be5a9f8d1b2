/* dualrev: edge pushing (Gower and Mello 2012), the sweep of
 * ad_sparse_hessian.
 *
 * One second-order recording, then one reverse sweep that carries, beside
 * each cotangent, the symmetric weights W of the nonlinear interactions
 * between live IDs.  Taking records from the highest ID down, record i =
 * phi(args), with first partials g and second partials h:
 *   pushes each interaction {i, p} onto its arguments: W_jp += g_j W_ip,
 *     and its own W_ii onto their pairs: W_jk += g_j g_k W_ii;
 *   creates its own: W_jk += z h_jk, z its cotangent;
 *   passes its cotangent on: z_j += z g_j.
 * W is the Hessian once only the inputs are left.  This is the staged
 * resolve of the dual-numbers paper (section 6) at second order: an
 * interaction {j, k} waits in the row of the larger ID, and the rows are
 * taken from the highest down, each once, when every contribution to it
 * has arrived.  A row is a list of entries, appended as they come and
 * merged when the row is taken, so that the cost is the records plus the
 * interactions pushed, never n sweeps.
 *
 * W is symmetric and kept as one entry per unordered pair: adding v to
 * W_jk and to W_kj is one entry's v, or 2v on the diagonal (j == k).
 * Structure: an interaction is kept even when its weight is 0 at x, as
 * second.c marks a second partial that is 0 only here. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "block.h"
#include "csr.h"
#include "edge_push.h"
#include "nary_kinds.h"
#include "second.h"
#include "seeded.h"
#include "walk.h"

/* One entry of a row: W_{row, col} += w.  Indices into the pool; 0 ends a
 * list. */
typedef struct entry {
    uint32_t col, next;
    double w;
} entry;

/* The sweep's arrays, kept per tape between calls. */
typedef struct pairs {
    entry *pool;             /* entry 0 unused */
    size_t used, pool_cap;
    uint32_t free;           /* entries of rows already taken, for reuse */
    uint32_t *head;          /* per ID: its row's latest entry */
    double *acc;             /* per ID: the merged weight in the row being taken */
    uint32_t *seen;          /* per ID: 1 + the row that last merged it */
    uint64_t *reached;       /* per ID: a bit, set once the ID's cotangent is reached */
    size_t ids_cap, seen_cap, acc_cap, reached_cap;
    uint32_t *cols;          /* the row being taken: its columns */
    size_t cols_cap;
    uint32_t *arg;           /* an n-ary record's arguments, their partials, values */
    double *g, *x;
    size_t arg_cap, g_cap, x_cap;
    struct bentry {          /* a block's outputs' rows: output o's W_{o, p} = w */
        uint32_t o, p;
        double w;
    } *brow;
    size_t brow_cap;
    size_t *jstart;          /* a block's partials: output o's are jarg/jval[jstart[o] ..) */
    uint32_t *jarg;
    double *jval;
    size_t jstart_cap, jarg_cap, jval_cap, jlen;
    uint32_t jrow;           /* an edges rule's output whose partials come in */
    const ad_block *blk;     /* the block being taken */
    ad_status status;
    int range;               /* a z h out of the double range was kept as NaN (scaled) */
} pairs;

static void pairs_free(void *state)
{
    pairs *ps = state;
    ad_free(ps->pool);
    ad_free(ps->head);
    ad_free(ps->acc);
    ad_free(ps->seen);
    ad_free(ps->reached);
    ad_free(ps->cols);
    ad_free(ps->arg);
    ad_free(ps->g);
    ad_free(ps->x);
    ad_free(ps->brow);
    ad_free(ps->jstart);
    ad_free(ps->jarg);
    ad_free(ps->jval);
}

static size_t pairs_bytes(const void *state)
{
    const pairs *ps = state;
    return ps->pool_cap * sizeof *ps->pool + ps->ids_cap * sizeof *ps->head +
           ps->seen_cap * sizeof *ps->seen + ps->acc_cap * sizeof *ps->acc +
           ps->reached_cap * sizeof *ps->reached + ps->cols_cap * sizeof *ps->cols +
           ps->arg_cap * sizeof *ps->arg + ps->g_cap * sizeof *ps->g + ps->x_cap * sizeof *ps->x +
           ps->brow_cap * sizeof *ps->brow + ps->jstart_cap * sizeof *ps->jstart +
           ps->jarg_cap * sizeof *ps->jarg + ps->jval_cap * sizeof *ps->jval;
}

static const ad_tenant tenant = {sizeof(pairs), pairs_free, pairs_bytes, NULL};

/* ---- the rows ---- */

static uint32_t new_entry(pairs *ps)
{
    if (ps->free) {
        uint32_t e = ps->free;
        ps->free = ps->pool[e].next;
        return e;
    }
    if (ps->used == UINT32_MAX ||
        ad_grow((void **)&ps->pool, &ps->pool_cap, ps->used + 1, sizeof *ps->pool, ps->used) !=
            AD_OK) {
        ps->status = AD_ENOMEM;
        return 0;
    }
    return (uint32_t)ps->used++;
}

/* W_jk += v, one entry for the unordered pair; nothing for a constant. */
static void add(pairs *ps, uint32_t j, uint32_t k, double v)
{
    if (!j || !k)
        return;
    uint32_t row = j > k ? j : k, e = new_entry(ps);
    if (!e)
        return;
    ps->pool[e] = (entry){j > k ? k : j, ps->head[row], v};
    ps->head[row] = e;
}

/* W_jk += v and W_kj += v. */
static void add_both(pairs *ps, uint32_t j, uint32_t k, double v)
{
    add(ps, j, k, j == k ? 2.0 * v : v);
}

static void reach(pairs *ps, uint32_t id)
{
    ps->reached[id >> 6] |= (uint64_t)1 << (id & 63);
}

static int is_reached(const pairs *ps, uint32_t id)
{
    return (int)(ps->reached[id >> 6] >> (id & 63) & 1);
}

/* Row i's entries merged, one per column, into ps->cols and ps->acc; its
 * list's entries go back to the pool.  Returns how many columns. */
static size_t take_row(pairs *ps, uint32_t i)
{
    size_t n = 0;
    uint32_t e = ps->head[i];
    ps->head[i] = 0;
    while (e) {
        entry *p = &ps->pool[e];
        uint32_t c = p->col, next = p->next;
        if (ps->seen[c] != i + 1) {
            ps->seen[c] = i + 1;
            ps->acc[c] = p->w;
            if (n == ps->cols_cap &&
                ad_grow((void **)&ps->cols, &ps->cols_cap, n + 1, sizeof *ps->cols, n) != AD_OK) {
                ps->status = AD_ENOMEM;
                return n;
            }
            ps->cols[n++] = c;
        } else {
            ps->acc[c] += p->w;
        }
        p->next = ps->free;
        ps->free = e;
        e = next;
    }
    return n;
}

/* ---- one record ---- */

/* Row i (n columns, taken) pushed onto arguments arg[0..k) of first
 * partials g. */
static void push(pairs *ps, uint32_t i, size_t n, const uint32_t *arg, const double *g, size_t k)
{
    for (size_t q = 0; q < n; q++) {
        uint32_t p = ps->cols[q];
        double w = ps->acc[p];
        if (p != i) {
            for (size_t j = 0; j < k; j++)
                add_both(ps, arg[j], p, g[j] * w);
            continue;
        }
        /* W_ii onto every pair of arguments; g (g w), as g g overflows
         * where W_ii is small (exp(x) at 700, say) */
        for (size_t j = 0; j < k; j++) {
            add(ps, arg[j], arg[j], g[j] * (g[j] * w));
            for (size_t l = j + 1; l < k; l++)
                add_both(ps, arg[j], arg[l], g[j] * (g[l] * w));
        }
    }
}

/* Cotangent z passed on to the arguments, which are reached. */
static void pass(pairs *ps, double *adj, double z, const uint32_t *arg, const double *g, size_t k)
{
    for (size_t j = 0; j < k; j++)
        if (arg[j]) {
            adj[arg[j]] += z * g[j];
            reach(ps, arg[j]);
        }
}

/* Whether a second partial is there (second.c writes -0 for one that is 0
 * only at this point). */
static int has(double h)
{
    uint64_t bits;
    memcpy(&bits, &h, sizeof bits);
    return bits != 0;
}

/* Row i pushed onto a lone argument a of partial w, a record with no
 * second partials (a constant factor or term, a negation): its entries
 * move to a's pairs as they are, scaled, without being merged first. */
static void relink(pairs *ps, uint32_t i, uint32_t a, double w)
{
    uint32_t e = ps->head[i];
    ps->head[i] = 0;
    while (e) {
        entry *p = &ps->pool[e];
        uint32_t next = p->next, c = p->col;
        if (c == i) {
            c = a;
            p->w = w * (w * p->w);
        } else {
            p->w *= c == a ? 2.0 * w : w;
        }
        uint32_t row = a > c ? a : c;
        p->col = a > c ? c : a;
        p->next = ps->head[row];
        ps->head[row] = e;
        e = next;
    }
}

/* z h for a second partial outside the double range (second.h): edge
 * pushing keeps z h as it is, so a z h that is outside the range too is
 * NaN, and the sweep remembers it: results it reaches are NaN, and the
 * driver fails with AD_EOVERFLOW (where it reaches none, as into a
 * constant's pair, nothing is lost). */
static double scaled(pairs *ps, double z, const ad_aux *h)
{
    double v = ad_aux_times(h, z);
    if (z != 0.0 && (fabs(v) < DBL_MIN || isinf(v)) && isfinite(z)) {
        ps->range = 1;
        return NAN;
    }
    return v;
}

static void ordinary(pairs *ps, double *adj, uint32_t i, const ad__record *r, const ad_aux *h)
{
    uint32_t arg[2] = {r->a, r->b};
    double g[2] = {r->wa, r->wb}, z = adj[i];
    if ((!r->a || !r->b) && !has(h->aa) && !has(h->ab) && !has(h->bb)) {
        int q = !r->a;  /* the active one */
        relink(ps, i, arg[q], g[q]);
        pass(ps, adj, z, arg, g, 2);
        return;
    }
    push(ps, i, take_row(ps, i), arg, g, 2);
    if (ad_aux_scaled(r, h))
        add(ps, r->a, r->a, scaled(ps, z, h));
    else if (has(h->aa))
        add(ps, r->a, r->a, z * h->aa);
    if (has(h->ab))
        add_both(ps, r->a, r->b, z * h->ab);
    if (has(h->bb))
        add(ps, r->b, r->b, z * h->bb);
    pass(ps, adj, z, arg, g, 2);
}

/* ---- n-ary records ---- */

/* An n-ary record's active arguments, their partials and (for ad_prod,
 * from the slots' second-order entries) their values, in order. */
static size_t gather(pairs *ps, const ad_tape *t, uint32_t hid, uint32_t count)
{
    size_t need = 2 * (size_t)count;
    if (ad_reserve((void **)&ps->arg, &ps->arg_cap, need, sizeof *ps->arg) != AD_OK ||
        ad_reserve((void **)&ps->g, &ps->g_cap, need, sizeof *ps->g) != AD_OK ||
        ad_reserve((void **)&ps->x, &ps->x_cap, need + 1, sizeof *ps->x) != AD_OK) {
        ps->status = AD_ENOMEM;
        return 0;
    }
    size_t k = 0;
    for (uint32_t s = hid - count; s < hid; s++) {
        const ad__record *r = ad_tape_record(t, s);
        const ad_aux *v = ad_tape_aux(t, s);
        uint32_t a[2] = {r->a, r->b};
        double w[2] = {r->wa, r->wb}, x[2] = {v->aa, v->bb};
        for (int q = 0; q < 2; q++)
            if (a[q]) {
                ps->arg[k] = a[q];
                ps->g[k] = w[q];
                ps->x[k++] = x[q];
            }
    }
    return k;
}

/* The product of x[0..k) but x[j] and x[l] (j < l), times c. */
static double prod_but(const double *x, size_t k, size_t j, size_t l, double c)
{
    for (size_t m = 0; m < k; m++)
        if (m != j && m != l)
            c *= x[m];
    return c;
}

/* The second partials of an n-ary kind (nary_kinds.h), weighted by z
 * (second_order.c has the same rules as tangents). */
static void create_nary(pairs *ps, const ad_tape *t, uint32_t hid, uint32_t count,
                        const ad_nary_kind *kind, double z, size_t k)
{
    const uint32_t *arg = ps->arg;
    const double *g = ps->g;
    if (kind->second == AD_NARY_PAIRS) {  /* between the two arguments of a slot */
        for (uint32_t s = hid - count; s < hid; s++) {
            const ad__record *r = ad_tape_record(t, s);
            if (r->a && r->b)
                add_both(ps, r->a, r->b, kind->h * z);
        }
    } else if (kind->second == AD_NARY_SQUARES) {
        for (size_t j = 0; j < k; j++)
            add(ps, arg[j], arg[j], kind->h * z);
    } else if (kind->second == AD_NARY_SOFTMAX) {  /* s = g: diag(s) - s s^T */
        for (size_t j = 0; j < k; j++) {
            add(ps, arg[j], arg[j], z * g[j] * (1.0 - g[j]));
            for (size_t l = j + 1; l < k; l++)
                add_both(ps, arg[j], arg[l], -z * g[j] * g[l]);
        }
    } else if (kind->second == AD_NARY_PRODUCT) {
        double c = ad_tape_aux(t, hid)->aa;
        for (size_t j = 0; j < k; j++)
            for (size_t l = j + 1; l < k; l++)
                add_both(ps, arg[j], arg[l], z * prod_but(ps->x, k, j, l, c));
    }
}

static void nary(pairs *ps, const ad_tape *t, double *adj, uint32_t hid, const ad__record *hdr)
{
    uint32_t count = hdr->a;
    double z = adj[hid];
    size_t k = gather(ps, t, hid, count);
    if (ps->status != AD_OK)
        return;
    push(ps, hid, take_row(ps, hid), ps->arg, ps->g, k);
    create_nary(ps, t, hid, count, ad_nary_kind_of(hdr->wa), z, k);
    pass(ps, adj, z, ps->arg, ps->g, k);
}

/* ---- blocks (recorded matrices and their products) ---- */

static void one_partial(void *cx, size_t arg, double d)
{
    pairs *ps = cx;
    if (ps->status != AD_OK)
        return;
    /* each array against its own room: one may have grown when the other could not */
    if (ad_grow((void **)&ps->jarg, &ps->jarg_cap, ps->jlen + 1, sizeof *ps->jarg, ps->jlen) !=
            AD_OK ||
        ad_grow((void **)&ps->jval, &ps->jval_cap, ps->jlen + 1, sizeof *ps->jval, ps->jlen) !=
            AD_OK) {
        ps->status = AD_ENOMEM;
        return;
    }
    ps->jarg[ps->jlen] = ad_block_arg(ps->blk, ad_block_ids(ps->blk), arg);
    ps->jval[ps->jlen++] = d;
}

static void one_curvature(void *cx, size_t a, size_t b, double v)
{
    pairs *ps = cx;
    if (ps->status != AD_OK)
        return;
    const uint32_t *ids = ad_block_ids(ps->blk);
    uint32_t i = ad_block_arg(ps->blk, ids, a), j = ad_block_arg(ps->blk, ids, b);
    if (a == b)
        add(ps, i, j, v);
    else
        add_both(ps, i, j, v);
}

/* The outputs' rows taken into ps->brow; returns how many entries. */
static size_t take_outputs(pairs *ps, uint32_t hid, uint32_t m)
{
    size_t len = 0;
    for (uint32_t o = 0; o < m && ps->status == AD_OK; o++) {
        size_t k = take_row(ps, hid + 1 + o);
        if (ad_grow((void **)&ps->brow, &ps->brow_cap, len + k, sizeof *ps->brow, len) != AD_OK)
            ps->status = AD_ENOMEM;
        for (size_t q = 0; q < k && ps->status == AD_OK; q++)
            ps->brow[len++] = (struct bentry){o, ps->cols[q], ps->acc[ps->cols[q]]};
    }
    return len;
}

/* Each output's partials, by output: jstart[0..m]. */
static void gather_partials(pairs *ps, ad_tape *t, ad_block *b)
{
    ps->jlen = 0;
    if (ad_reserve((void **)&ps->jstart, &ps->jstart_cap, (size_t)b->nout + 1,
                   sizeof *ps->jstart) != AD_OK) {
        ps->status = AD_ENOMEM;
        return;
    }
    for (uint32_t o = 0; o < b->nout && ps->status == AD_OK; o++) {
        ps->jstart[o] = ps->jlen;
        b->kind->partials(t, b, o, one_partial, ps);
    }
    ps->jstart[b->nout] = ps->jlen;
}

/* The outputs' interactions through the block's partials J: with an ID
 * outside, W_ap += J_oa W_op; among outputs, W' = J^T W J. */
static void push_block(pairs *ps, uint32_t hid, size_t len)
{
    for (size_t q = 0; q < len; q++) {
        uint32_t o = ps->brow[q].o, p = ps->brow[q].p;
        double w = ps->brow[q].w;
        size_t o0 = ps->jstart[o], o1 = ps->jstart[o + 1];
        if (p <= hid) {
            for (size_t a = o0; a < o1; a++)
                add_both(ps, ps->jarg[a], p, ps->jval[a] * w);
            continue;
        }
        uint32_t o2 = p - hid - 1;  /* another output, or o itself */
        if (o2 == o) {
            for (size_t a = o0; a < o1; a++) {
                add(ps, ps->jarg[a], ps->jarg[a], ps->jval[a] * (ps->jval[a] * w));
                for (size_t c = a + 1; c < o1; c++)
                    add_both(ps, ps->jarg[a], ps->jarg[c], ps->jval[a] * (ps->jval[c] * w));
            }
            continue;
        }
        for (size_t a = o0; a < o1; a++)
            for (size_t c = ps->jstart[o2]; c < ps->jstart[o2 + 1]; c++)
                add_both(ps, ps->jarg[a], ps->jarg[c], ps->jval[a] * (ps->jval[c] * w));
    }
}

/* The arguments' cotangents from the outputs' ybar, and (*args) the
 * arguments they reach, or NULL: all.  A kind whose reach only a replay
 * can tell (a checkpointed loop) takes its exact pullback from the
 * outputs the sweep reached, as the sweep takes a record only once its
 * cotangent is reached: its plain one would sweep every record of every
 * step, and the arguments it does not reach would be, with a zero
 * cotangent that meets their own records' infinite partials. */
static const double *pullback(const pairs *ps, ad_tape *t, ad_block *b, uint32_t hid,
                              const double *ybar, const unsigned char **args)
{
    *args = NULL;
    if (!b->kind->vjp_exact)
        return ad_block_pullback(t, b, ybar);
    unsigned char *outs = ad_block_flags(t);
    for (uint32_t o = 0; o < b->nout; o++)
        outs[o] = (unsigned char)is_reached(ps, hid + 1 + o);
    *args = outs + b->nout;
    return ad_block_pullback_reached(t, b, ybar);
}

/* A partial of output o from a kind's edges rule, which gives the outputs
 * in order: jstart[] closed up to o. */
static void row_partial(void *cx, uint32_t o, size_t arg, double d)
{
    pairs *ps = cx;
    while (ps->jrow < o)
        ps->jstart[++ps->jrow] = ps->jlen;
    one_partial(cx, arg, d);
}

/* A block whose kind has an edges rule: partials, curvature and the
 * pullback from one call (block.h). */
static void block_edges(pairs *ps, ad_tape *t, double *adj, uint32_t hid, ad_block *b,
                        size_t len)
{
    uint32_t m = b->nout;
    size_t nx = (size_t)b->nargs + b->run_len;
    if (ad_reserve((void **)&ps->jstart, &ps->jstart_cap, (size_t)m + 1, sizeof *ps->jstart) !=
        AD_OK) {
        ps->status = AD_ENOMEM;
        return;
    }
    unsigned char *outs = ad_block_flags(t), *args = outs + m;
    double *ybar = ad_block_ybar(t), *xbar = ybar + m;
    for (uint32_t o = 0; o < m; o++) {
        outs[o] = (unsigned char)is_reached(ps, hid + 1 + o);
        ybar[o] = adj[hid + 1 + o];
    }
    memset(xbar, 0, nx * sizeof *xbar);
    memset(args, 0, nx);
    ps->jlen = 0;
    ps->jrow = 0;
    ps->jstart[0] = 0;
    b->kind->edges(t, b, outs, ybar, row_partial, one_curvature, ps, xbar, args);
    while (ps->jrow < m)
        ps->jstart[++ps->jrow] = ps->jlen;
    if (ps->status != AD_OK)
        return;
    push_block(ps, hid, len);
    for (size_t k = 0; k < nx; k++) {
        uint32_t id = ad_block_arg(b, ad_block_ids(b), k);
        if (id && args[k]) {
            adj[id] += xbar[k];
            reach(ps, id);
        }
    }
}

static void block(pairs *ps, ad_tape *t, double *adj, uint32_t hid, const ad__record *hdr)
{
    ad_block *b = ad_block_of(t, hdr);
    uint32_t m = b->nout;
    int any = 0;
    for (uint32_t o = 0; o < m; o++)
        any |= is_reached(ps, hid + 1 + o);
    if (!any)
        return;
    ps->blk = b;
    size_t len = take_outputs(ps, hid, m);
    if (b->kind->edges) {
        if (ps->status == AD_OK)
            block_edges(ps, t, adj, hid, b, len);
        return;
    }
    gather_partials(ps, t, b);
    if (ps->status != AD_OK)
        return;
    push_block(ps, hid, len);
    double *ybar = ad_block_ybar(t);
    for (uint32_t o = 0; o < m; o++)
        ybar[o] = adj[hid + 1 + o];
    if (b->kind->curvature)
        b->kind->curvature(t, b, ybar, one_curvature, ps);
    const unsigned char *args;
    const double *xbar = pullback(ps, t, b, hid, ybar, &args);
    for (size_t k = 0; k < (size_t)b->nargs + b->run_len; k++) {
        uint32_t id = ad_block_arg(b, ad_block_ids(b), k);
        if (id && (!args || args[k])) {
            adj[id] += xbar[k];
            reach(ps, id);
        }
    }
}

/* ---- the sweep ---- */

static ad_status reserve(pairs *ps, uint32_t top)
{
    size_t ids = (size_t)top + 1, words = ((size_t)top >> 6) + 1;
    if (ad_reserve((void **)&ps->head, &ps->ids_cap, ids, sizeof *ps->head) != AD_OK ||
        ad_reserve((void **)&ps->seen, &ps->seen_cap, ids, sizeof *ps->seen) != AD_OK ||
        ad_reserve((void **)&ps->acc, &ps->acc_cap, ids, sizeof *ps->acc) != AD_OK ||
        ad_reserve((void **)&ps->reached, &ps->reached_cap, words, sizeof *ps->reached) != AD_OK ||
        ad_reserve((void **)&ps->pool, &ps->pool_cap, 1024, sizeof *ps->pool) != AD_OK)
        return AD_ENOMEM;
    memset(ps->head, 0, ids * sizeof *ps->head);
    memset(ps->seen, 0, ids * sizeof *ps->seen);
    memset(ps->reached, 0, words * sizeof *ps->reached);
    ps->used = 1;
    ps->free = 0;
    ps->status = AD_OK;
    ps->range = 0;
    return AD_OK;
}

/* The sweep from the objective's ID down, seeded with `seed`: W left in
 * the inputs' rows, the gradient in adj, both times the seed. */
static ad_status sweep(pairs *ps, ad_tape *t, double *adj, uint32_t top, double seed)
{
    uint32_t out = t->outputs[0].id;
    adj[out] = seed;
    if (out)
        reach(ps, out);
    unsigned char *const *aux = ad_tape_side(t, &ad_second_mode)->chunks;
    ad_walk w = ad_walk_down_from(t, top);
    for (int kind; ps->status == AD_OK && (kind = ad_walk_down(&w)) != AD_WALK_END;) {
        if (kind == AD_WALK_RUN) {
            const ad__record *r = w.r - 1;
            uint32_t i = w.id - 1;
            ad_walk_stop(&w, r, i);
            if (is_reached(ps, i))
                ordinary(ps, adj, i, r, (const ad_aux *)(const void *)aux[w.c] + (r - w.base));
        } else if (kind == AD_WALK_NARY) {
            if (is_reached(ps, w.hid))
                nary(ps, t, adj, w.hid, w.hdr);
        } else {
            block(ps, t, adj, w.hid, w.hdr);
        }
    }
    return ps->status;
}

static int by_col(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* H's lower triangle from the inputs' rows, columns ascending, scaled
 * back by u; *sum gets the sum of its values. */
static ad_status assemble(pairs *ps, size_t n, ad_csr *H, double u, double *sum)
{
    ad_csr_out o = {H, 0};
    H->rows = H->cols = n;
    if (!ad_csr_start(&o, n, n))
        return AD_ENOMEM;
    H->nnz = 0;
    for (uint32_t r = 1; r <= n; r++) {
        H->row_ptr[r - 1] = H->nnz;
        size_t k = take_row(ps, r);
        if (ps->status != AD_OK)
            return ps->status;
        if (k > 1)
            qsort(ps->cols, k, sizeof *ps->cols, by_col);
        if (!ad_csr_room(&o, H->nnz + k))
            return AD_ENOMEM;
        for (size_t q = 0; q < k; q++) {
            double v = ad_result(ps->acc[ps->cols[q]], u);
            *sum += v;
            H->col[H->nnz] = ps->cols[q] - 1;
            H->val[H->nnz++] = v;
        }
    }
    H->row_ptr[n] = H->nnz;
    return o.cap - H->nnz > H->nnz / 4 && !ad_csr_trim(&o) ? AD_ENOMEM : AD_OK;
}

/* Where column c is in H's row r, or SIZE_MAX. */
static size_t find(const ad_csr *H, size_t r, size_t c)
{
    size_t lo = H->row_ptr[r], hi = H->row_ptr[r + 1];
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (H->col[mid] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < H->row_ptr[r + 1] && H->col[lo] == c ? lo : SIZE_MAX;
}

/* The inputs' rows written into H's fixed structure, scaled back as
 * ad_results does (seeded.h): a first pass writes every value, a later
 * one only those not finite; *sum gets the sum of H's values. */
static ad_status scatter(pairs *ps, size_t n, ad_csr *H, const ad_retry *rt, double *sum)
{
    double u = ad_seed_back(rt->scale);
    if (H->nnz && !rt->pass)  /* val may be NULL without entries */
        memset(H->val, 0, H->nnz * sizeof *H->val);
    for (uint32_t r = 1; r <= n; r++) {
        size_t k = take_row(ps, r);
        if (ps->status != AD_OK)
            return ps->status;
        for (size_t q = 0; q < k; q++) {
            size_t at = find(H, r - 1, ps->cols[q] - 1);
            if (at == SIZE_MAX)
                return AD_ESTRUCTURE;
            if (!rt->pass || H->val[at] - H->val[at] != 0.0)
                H->val[at] = ad_result(ps->acc[ps->cols[q]], u);
        }
    }
    for (size_t k = 0; k < H->nnz; k++)
        *sum += H->val[k];
    return AD_OK;
}

/* What one pass of the sweep writes (seeded.h, ad_pass). */
typedef struct sparse_pass {
    pairs *ps;
    size_t n;
    double *grad;
    ad_csr *H;
    int fixed;  /* H's structure is given */
    uint32_t top;
    ad_status status;
} sparse_pass;

/* One pass: the sweep seeded with r's scale, then H built afresh (a
 * first pass, not fixed) or its structure filled, and the gradient. */
static double one_pass(ad_tape *t, const ad_retry *r, void *ctx)
{
    sparse_pass *c = ctx;
    pairs *ps = c->ps;
    double sum = 0.0;
    ad_status s = reserve(ps, c->top);
    if (s == AD_OK) {
        memset(t->adj, 0, ((size_t)c->top + 1) * sizeof *t->adj);
        s = sweep(ps, t, t->adj, c->top, r->scale);
    }
    if (s == AD_OK)
        s = c->fixed || r->pass ? scatter(ps, c->n, c->H, r, &sum)
                                : assemble(ps, c->n, c->H, ad_seed_back(r->scale), &sum);
    if (s != AD_OK) {
        c->status = s;
        return 0.0;
    }
    return sum + ad_results(r, c->grad, 1, t->adj + 1, 1, c->n);
}

/* Through ad_seeded, as every sweep is (seeded.h, "Scaled seeds"): it is
 * exact already (a record takes part once its cotangent is reached), so
 * only the unscaled rerun is left. */
ad_status ad_edge_push(ad_tape *t, size_t n, double *grad, ad_csr *H, int fixed)
{
    if (t->traits & AD_BLOCK_NO_EDGES)  /* an external function's block */
        return AD_ENOTSUP;
    uint32_t top = ad_outputs_top(t, 1);
    pairs *ps = ad_tape_state(t, &tenant);
    ad_status s = ps ? AD_OK : AD_ENOMEM;
    if (s == AD_OK)
        s = ad_tape_borrow_adjoints(t, (size_t)top + 1);
    if (s != AD_OK)
        return s;
    sparse_pass c = {ps, n, grad, H, fixed, top, AD_OK};
    double sum;
    s = ad_seeded(t, top, AD_SEEDED_OVER, one_pass, &c, &sum);
    if (c.status != AD_OK)
        return c.status;
    s = ad_second_results(t, s, sum);
    return s == AD_OK && ps->range && sum != sum ? AD_EOVERFLOW : s;
}

