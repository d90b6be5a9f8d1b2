/* dualrev: checked recordings -- where a NaN or an Inf came from.
 *
 * With checks on (ad_set_checks), the recording is made in ad_check_mode,
 * whose hook sees every record: it keeps the record's value, operation and
 * label (ad_info, in the mode's side table) and stops the recording at the
 * first record that makes a non-finite number from finite ones.  A reverse
 * or forward sweep whose results are not all finite is run again here,
 * plainly and unscaled, to find the first contribution that overflows. */
#include <math.h>
#include <string.h>

#include "block.h"
#include "check.h"
#include "walk.h"

static const char *const op_names[AD__OP_COUNT] = {
    [AD__OP_LINEAR] = "linear", [AD__OP_ADD] = "add", [AD__OP_SUB] = "sub",
    [AD__OP_NEG] = "neg", [AD__OP_FABS] = "fabs", [AD__OP_FMIN] = "fmin",
    [AD__OP_FMAX] = "fmax", [AD__OP_AXPY] = "ad_axpy", [AD__OP_NARY] = "n-ary",
    [AD__OP_BLOCK] = "block", [AD__OP_OUT] = "block output", [AD__OP_MUL] = "mul",
    [AD__OP_DIV] = "div", [AD__OP_POW] = "pow", [AD__OP_POW_RD] = "pow",
    [AD__OP_POW_DR] = "pow", [AD__OP_ATAN2] = "atan2", [AD__OP_HYPOT] = "hypot",
    [AD__OP_SQRT] = "sqrt", [AD__OP_CBRT] = "cbrt", [AD__OP_EXP] = "exp",
    [AD__OP_EXPM1] = "expm1", [AD__OP_LOG] = "log", [AD__OP_LOG1P] = "log1p",
    [AD__OP_LOG2] = "log2", [AD__OP_LOG10] = "log10", [AD__OP_SIN] = "sin",
    [AD__OP_COS] = "cos", [AD__OP_TAN] = "tan", [AD__OP_ASIN] = "asin",
    [AD__OP_ACOS] = "acos", [AD__OP_ATAN] = "atan", [AD__OP_SINH] = "sinh",
    [AD__OP_COSH] = "cosh", [AD__OP_TANH] = "tanh", [AD__OP_ASINH] = "asinh",
    [AD__OP_ACOSH] = "acosh", [AD__OP_ATANH] = "atanh", [AD__OP_ERF] = "erf",
    [AD__OP_ERFC] = "erfc", [AD__OP_LGAMMA] = "lgamma", [AD__OP_TGAMMA] = "tgamma",
};

/* An n-ary record's name, from its kind (record.h): the linear kind is
 * ad_sum, ad_dot_rd and ad_matvec alike. */
static const char *nary_name(double kind)
{
    static const char *const names[] = {"ad_sum/ad_dot_rd", "ad_dot", "ad_sqnorm", "ad_prod",
                                        "ad_logsumexp"};
    int k = (int)kind;
    return k >= 0 && k < (int)(sizeof names / sizeof *names) ? names[k] : "n-ary";
}

unsigned ad_set_checks(unsigned flags)
{
    ad_thread *th = ad_thread_self();
    unsigned old = th->checks;
    th->checks = flags & (AD_CHECK_FINITE | AD_CHECK_TRACE);
    return old;
}

void ad_where(const char *label)
{
    ad_thread_self()->label = label;
}

ad_status ad_last_fault(ad_fault *out)
{
    const ad_thread *th = ad_thread_self();
    if (!out || !th->has_fault)
        return AD_EINVAL;
    *out = th->fault;
    return AD_OK;
}

/* The info of record id, in a checked recording's side table. */
static ad_info *info_at(const ad_tape *t, uint32_t id)
{
    const ad_side *sd = ad_tape_side(t, &ad_check_mode);
    return sd ? ad_side_entry(t, sd, id) : NULL;
}

const ad_info *ad_tape_info(const ad_tape *t, uint32_t id)
{
    if (id < t->first || id > ad_tape_top(t))
        return NULL;
    return info_at(t, id);
}

double ad_tape_value(const ad_tape *t, uint32_t id)
{
    if (id == 0 || id >= t->cursor.next)
        return NAN;
    if (id < t->first)
        return t->inputs[id - 1].v;
    const ad_info *i = ad_tape_info(t, id);
    return i ? i->v : NAN;
}

const char *ad_op_name(const ad_tape *t, uint32_t id)
{
    const ad__record *r = ad_tape_record(t, id);
    if (r->b == AD__NARY)
        return nary_name(r->wa);
    if (r->b == AD__BLOCK)
        return ad_block_of(t, r)->kind->name;
    const ad_info *i = ad_tape_info(t, id);
    return i && i->op >= 0 && i->op < AD__OP_COUNT ? op_names[i->op] : NULL;
}

/* f becomes the thread's last fault (ad_last_fault). */
static void keep(const ad_fault *f)
{
    ad_thread *th = ad_thread_self();
    th->fault = *f;
    th->has_fault = 1;
}

static void fail(ad_tape *t, const ad_fault *f)
{
    keep(f);
    ad_tape_fail(t, AD_ENONFINITE);
}

static ad_fault fault_at(uint32_t id, const char *op, const char *label, ad_phase phase)
{
    ad_fault f = {op, label, id, phase, 0, {NAN, NAN}, NAN, {NAN, NAN}, NAN, 0};
    return f;
}

/* Whether the arguments of the n-ary run below the header `id` (count
 * slots) all have finite values; an argument of unknown value counts as
 * finite, as its own record was checked. */
static int run_finite(const ad_tape *t, uint32_t id, uint32_t count)
{
    for (uint32_t i = 1; i <= count; i++) {
        const ad__record *s = ad_tape_record(t, id - i);
        if (!isfinite(ad_tape_value(t, s->a)) || (s->b && !isfinite(ad_tape_value(t, s->b))))
            return 0;
    }
    return 1;
}

static int run_partials_finite(const ad_tape *t, uint32_t id, uint32_t count)
{
    for (uint32_t i = 1; i <= count; i++) {
        const ad__record *s = ad_tape_record(t, id - i);
        if (!isfinite(s->wa) || !isfinite(s->wb))
            return 0;
    }
    return 1;
}

/* Whether the record about to get ID id is to be kept: its ad_info kept in
 * info; 0 after ending the recording. */
static int check(ad_tape *t, ad_info *info, uint32_t id, uint32_t a, double wa, uint32_t b,
                 double wb, int op, double x, double y, double v)
{
    const char *label = ad_thread_self()->label;
    info->v = v;
    info->label = label;
    info->op = op;
    if (!(t->checks & AD_CHECK_FINITE) || op == AD__OP_BLOCK || op == AD__OP_OUT)
        return 1;
    int bad;
    const char *name = op_names[op];
    if (op == AD__OP_NARY) {
        /* the run is below, written already; the header's a is its length */
        name = nary_name(wa);
        bad = run_finite(t, id, a) && (!isfinite(v) || !run_partials_finite(t, id, a));
    } else {
        /* y is b's value, or a one-argument operation's constant */
        bad = isfinite(x) && isfinite(y) &&
              (!isfinite(v) || (a && !isfinite(wa)) || (b && !isfinite(wb)));
    }
    if (!bad)
        return 1;
    ad_fault f = fault_at(id, name, label, AD_PHASE_RECORD);
    f.value = v;
    if (op != AD__OP_NARY) {
        f.nargs = b ? 2 : 1;
        f.arg[0] = x;
        f.arg[1] = b ? y : NAN;
        f.partial[0] = wa;
        f.partial[1] = b ? wb : NAN;
    }
    fail(t, &f);
    return 0;
}

/* The mode's hook. */
static uint32_t take(ad_tape *t, int i, uint32_t a, double wa, uint32_t b, double wb, int op,
                     double x, double y, double v)
{
    if (!check(t, ad_tape_side_here(t, i), (uint32_t)t->cursor.next, a, wa, b, wb, op, x, y, v))
        return 0;
    return ad_tape_pass(t, i, a, wa, b, wb, op, x, y, v);
}

_Static_assert(sizeof(ad_info) <= sizeof(ad__record), "a side entry is at most a record");
const ad_mode ad_check_mode = {take};

int ad_check_block(ad_tape *t, const char *name, size_t n, const double *x, size_t m,
                   const double *y, uint32_t first)
{
    if (!t->checks)
        return 1;
    int args_finite = 1, out_finite = 1;
    for (size_t j = 0; j < m; j++) {
        ad_info *i = info_at(t, first + (uint32_t)j);
        i->v = y[j];
        out_finite &= isfinite(y[j]) != 0;
    }
    if (!(t->checks & AD_CHECK_FINITE))
        return 1;
    for (size_t i = 0; i < n; i++)
        args_finite &= isfinite(x[i]) != 0;
    if (!args_finite || out_finite)
        return 1;
    ad_fault f = fault_at(first - 1, name, ad_tape_info(t, first - 1)->label, AD_PHASE_RECORD);
    for (size_t j = 0; j < m; j++)
        if (!isfinite(y[j])) {
            f.id = first + (uint32_t)j;
            f.value = y[j];
            break;
        }
    fail(t, &f);
    return 0;
}

/* ---- the checked reverse sweep ---- */

typedef struct sweep {
    ad_tape *t;
    double *adj;
    ad_fault f;
    int found;
} sweep;

/* A fault's operation: an external function's block is "external",
 * with or without its jvp rule. */
static const char *fault_op(const ad_tape *t, uint32_t id)
{
    const ad__record *r = ad_tape_record(t, id);
    if (r->b == AD__BLOCK && ad_block_of(t, r)->kind->foreign)
        return "external";
    const char *op = ad_op_name(t, id);
    return op ? op : "?";
}

/* The sweep's first fault: record hid made target's cotangent (tangent)
 * non-finite. */
static void note(sweep *s, uint32_t hid, uint32_t target, ad_phase phase)
{
    const ad_info *i = ad_tape_info(s->t, hid);
    s->f = fault_at(hid, fault_op(s->t, hid), i ? i->label : NULL, phase);
    s->f.target = target;
    s->found = 1;
}

/* The same for one term: `in` (a cotangent, or a tangent) times the
 * partial w of the record's argument `slot`. */
static void note_term(sweep *s, uint32_t hid, uint32_t target, double in, double w, int slot,
                      ad_phase phase)
{
    note(s, hid, target, phase);
    s->f.value = ad_tape_value(s->t, hid);
    s->f.cotangent = in;
    s->f.partial[slot] = w;
}

/* How a checked sweep ends: AD_ENONFINITE, its fault kept, if it found one. */
static ad_status sweep_end(const sweep *s)
{
    if (!s->found)
        return AD_OK;
    keep(&s->f);
    return AD_ENONFINITE;
}

/* adj[to] += z w, noting the first contribution that makes a finite
 * cotangent non-finite from finite numbers. */
static void add(sweep *s, uint32_t hid, uint32_t to, double z, double w, int slot)
{
    if (!to)
        return;
    double before = s->adj[to];
    s->adj[to] += z * w;
    if (!s->found && !isfinite(s->adj[to]) && isfinite(before) && isfinite(z) && isfinite(w))
        note_term(s, hid, to, z, w, slot, AD_PHASE_REVERSE);
}

static uint32_t block_arg(const ad_block *b, const uint32_t *ids, size_t i)
{
    return i < b->nargs ? ids[i] : b->run + (uint32_t)(i - b->nargs);
}

/* The block's rule, then whether it made an argument's finite cotangent
 * non-finite from finite output cotangents. */
static void apply_block(sweep *s, const ad__record *r, uint32_t hid)
{
    const ad_block *b = ad_block_of(s->t, r);
    const uint32_t *ids = ad_block_ids(b);
    size_t nargs = (size_t)b->nargs + b->run_len;
    int out_finite = 1;
    for (uint32_t j = 1; j <= b->nout; j++)
        out_finite &= isfinite(s->adj[hid + j]) != 0;
    double *before = out_finite ? ad_alloc((nargs ? nargs : 1) * sizeof *before) : NULL;
    for (size_t i = 0; before && i < nargs; i++)
        before[i] = s->adj[block_arg(b, ids, i)];
    ad_block_reverse(s->t, r, hid, s->adj, 1);
    for (size_t i = 0; before && i < nargs && !s->found; i++) {
        uint32_t id = block_arg(b, ids, i);
        if (id && isfinite(before[i]) && !isfinite(s->adj[id]))
            note(s, hid, id, AD_PHASE_REVERSE);
    }
    ad_free(before);
}

ad_status ad_check_reverse(ad_tape *t, size_t m, const double *w, uint32_t top)
{
    if (!(t->checks & AD_CHECK_FINITE))
        return AD_OK;
    sweep s = {t, t->adj, {0}, 0};
    memset(t->adj, 0, ((size_t)top + 1) * sizeof *t->adj);
    for (size_t j = 0; j < m; j++)
        t->adj[t->outputs[j].id] += w ? w[j] : 1.0;
    ad_walk wk = ad_walk_down_from(t, top);
    /* To the end even after a find: a recorded matrix's products leave
     * their parts waiting for the matrix below them (matrix.c). */
    for (int kind; (kind = ad_walk_down(&wk)) != AD_WALK_END;) {
        if (kind == AD_WALK_RUN) {
            const ad__record *r = wk.r - 1;
            uint32_t id = wk.id - 1;
            double z = t->adj[id];
            ad_walk_stop(&wk, r, id);
            add(&s, id, r->a, z, r->wa, 0);
            add(&s, id, r->b, z, r->wb, 1);
        } else if (kind == AD_WALK_NARY) {
            double z = t->adj[wk.hid];
            for (uint32_t i = 1; i <= wk.hdr->a; i++) {
                const ad__record *q = ad_tape_record(t, wk.hid - i);
                add(&s, wk.hid, q->a, z, q->wa, 0);
                add(&s, wk.hid, q->b, z, q->wb, 1);
            }
        } else {
            apply_block(&s, wk.hdr, wk.hid);
        }
    }
    memset(t->adj, 0, ((size_t)top + 1) * sizeof *t->adj);
    t->adj_zero = (size_t)top + 1;
    return sweep_end(&s);
}

/* ---- the checked forward sweep ---- */

unsigned char *ad_slot_marks(const ad_tape *t, uint32_t top)
{
    size_t n = top >= t->first ? (size_t)(top + 1 - t->first) : 0;
    unsigned char *slot = ad_alloc(n ? n : 1);
    if (!slot)
        return NULL;
    memset(slot, 0, n ? n : 1);
    ad_walk w = ad_walk_down_from(t, top);
    for (int kind; (kind = ad_walk_down(&w)) != AD_WALK_END;) {
        if (kind == AD_WALK_RUN)
            ad_walk_stop(&w, w.base, w.id - (uint32_t)(w.r - w.base));  /* the rest of the run */
        else if (kind == AD_WALK_NARY)
            memset(slot + (w.hid - w.hdr->a - t->first), 1, w.hdr->a);
    }
    return slot;
}

/* tan[id] += w tan[from], noting the first term that makes a non-finite
 * tangent from finite numbers. */
static void term(sweep *s, uint32_t id, uint32_t from, double w, int slot)
{
    if (!from)
        return;
    double before = s->adj[id], d = s->adj[from];
    s->adj[id] += w * d;
    if (!s->found && !isfinite(s->adj[id]) && isfinite(before) && isfinite(w) && isfinite(d))
        note_term(s, id, id, d, w, slot, AD_PHASE_TANGENT);
}

static void forward_block(sweep *s, const ad__record *r, uint32_t hid)
{
    const ad_block *b = ad_block_of(s->t, r);
    const uint32_t *ids = ad_block_ids(b);
    size_t nargs = (size_t)b->nargs + b->run_len;
    int in_finite = 1;
    for (size_t i = 0; i < nargs; i++)
        in_finite &= isfinite(s->adj[block_arg(b, ids, i)]) != 0;
    ad_block_forward(s->t, r, hid, s->adj, 1);
    for (uint32_t j = 1; j <= b->nout && in_finite && !s->found; j++)
        if (!isfinite(s->adj[hid + j]))
            note(s, hid, hid + j, AD_PHASE_TANGENT);
}

ad_status ad_check_forward(ad_tape *t, const double *v, uint32_t top)
{
    if (!(t->checks & AD_CHECK_FINITE))
        return AD_OK;
    unsigned char *slot = ad_slot_marks(t, top);
    if (!slot)
        return AD_ENOMEM;
    sweep s = {t, t->adj, {0}, 0};
    t->adj[0] = 0.0;
    for (uint32_t i = 1; i < t->first; i++)
        t->adj[i] = v[i - 1];
    ad_walk w = ad_walk_up_from(t, top);
    for (int kind; !s.found && (kind = ad_walk_up(&w)) != AD_WALK_END;) {
        if (kind == AD_WALK_BLOCK) {
            forward_block(&s, w.hdr, w.hid);
        } else if (kind == AD_WALK_RUN) {
            const ad__record *r = w.r;
            uint32_t id = w.id;
            ad_walk_stop_up(&w, r + 1, id + 1);
            if (slot[id - t->first])  /* its header takes it */
                continue;
            t->adj[id] = 0.0;
            term(&s, id, r->a, r->wa, 0);
            term(&s, id, r->b, r->wb, 1);
        } else {
            t->adj[w.hid] = 0.0;
            for (uint32_t k = w.hdr->a; k >= 1 && !s.found; k--) {  /* in the sweeps' order */
                const ad__record *q = ad_tape_record(t, w.hid - k);
                term(&s, w.hid, q->a, q->wa, 0);
                term(&s, w.hid, q->b, q->wb, 1);
            }
        }
    }
    ad_free(slot);
    t->adj_zero = 0;
    return sweep_end(&s);
}
