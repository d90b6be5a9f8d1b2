/* dualrev: checked recordings -- where a NaN or an Inf came from.
 *
 * With checks on (ad_set_checks), the recording is made in ad_check_mode,
 * whose hook sees every record: it keeps the record's value, operation and
 * label (ad_info, in the mode's side table) and stops the recording at the
 * first record that makes a non-finite number from finite ones.  Sweeps
 * whose results are not all finite are run again in check_sweep.c. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "nary_kinds.h"

static const char *const names[AD__OP_COUNT] = {
    [AD__OP_LINEAR] = "linear", [AD__OP_ADD] = "add", [AD__OP_SUB] = "sub",
    [AD__OP_NEG] = "neg", [AD__OP_FABS] = "fabs", [AD__OP_FMIN] = "fmin",
    [AD__OP_FMAX] = "fmax", [AD__OP_AXPY] = "ad_axpy", [AD__OP_NARY] = "n-ary",
    [AD__OP_BLOCK] = "block", [AD__OP_OUT] = "block output", [AD__OP_SELECT] = "select",
    [AD__OP_MUL] = "mul",
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

const char *ad_op_label(int op)
{
    return op >= 0 && op < AD__OP_COUNT ? names[op] : NULL;
}

unsigned ad_set_checks(unsigned flags)
{
    ad_checks *ck = ad_checks_of(ad_thread_self());
    unsigned old = ck->flags;
    ck->flags = flags & (AD_CHECK_FINITE | AD_CHECK_TRACE);
    return old;
}

void ad_where(const char *label)
{
    ad_checks_of(ad_thread_self())->label = label;
}

ad_status ad_last_fault(ad_fault *out)
{
    const ad_checks *ck = ad_checks_of(ad_thread_self());
    if (!out || !ck->has_fault)
        return AD_EINVAL;
    *out = ck->fault;
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

void ad_fault_keep(const ad_fault *f)
{
    ad_checks *ck = ad_checks_of(ad_thread_self());
    ck->fault = *f;
    ck->has_fault = 1;
}

static void fail(ad_tape *t, const ad_fault *f)
{
    ad_fault_keep(f);
    ad_tape_fail(t, AD_ENONFINITE);
}

ad_fault ad_fault_at(uint32_t id, const char *op, const char *label, ad_phase phase)
{
    const ad_checks *ck = ad_checks_of(ad_thread_self());
    ad_fault f = {op, label, id, phase, 0, {NAN, NAN}, NAN, {NAN, NAN}, NAN, 0,
                  (int64_t)ck->step1 - 1, (int64_t)ck->term1 - 1};
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
    const char *label = ad_checks_of(ad_thread_self())->label;
    info->v = v;
    info->label = label;
    info->op = op;
    if (!(t->checks & AD_CHECK_FINITE) || op == AD__OP_BLOCK || op == AD__OP_OUT)
        return 1;
    int bad;
    const char *name = ad_op_label(op);
    if (op == AD__OP_NARY) {
        /* the run is below, written already; the header's a is its length */
        name = ad_nary_kind_of(wa)->name;
        bad = run_finite(t, id, a) && (!isfinite(v) || !run_partials_finite(t, id, a));
    } else {
        /* y is b's value, or a one-argument operation's constant */
        bad = isfinite(x) && isfinite(y) &&
              (!isfinite(v) || (a && !isfinite(wa)) || (b && !isfinite(wb)));
    }
    if (!bad)
        return 1;
    ad_fault f = ad_fault_at(id, name, label, AD_PHASE_RECORD);
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
const ad_mode ad_check_mode = {take, NULL, 0};

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
    ad_fault f = ad_fault_at(first - 1, name, ad_tape_info(t, first - 1)->label, AD_PHASE_RECORD);
    for (size_t j = 0; j < m; j++)
        if (!isfinite(y[j])) {
            f.id = first + (uint32_t)j;
            f.value = y[j];
            break;
        }
    fail(t, &f);
    return 0;
}
