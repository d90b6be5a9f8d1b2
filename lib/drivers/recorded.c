/* dualrev: recorded programs.  ad_program_record keeps the listing
 * (modes/listing.h) of one recording of f; a replay runs it (run() below)
 * as the function a driver records: each kept operation made again, by
 * the operation f called, on the new values.  The driver's recording is
 * then the one f would have made at that point, so every driver takes a
 * program and gives f's numbers bit for bit. */
#include <string.h>

#include "listing.h"
#include "recording.h"
#include "status.h"

struct ad_program {
    size_t n, m;
    uint32_t top;      /* the recording's IDs are 0..top */
    ad_ins *ins;
    size_t nins;
    double *consts;
    size_t nconsts;
    uint32_t *eids;    /* the n-ary operations' and selections' operands */
    size_t neids;
    ad_elem *out;      /* the outputs */
    ad_call *calls;    /* external functions' and checkpointed loops' calls */
    size_t ncalls, widest_call;
    size_t widest, guards;
    int unkept;        /* ad_program_evaluate's mark: f cannot be kept */
};

/* ---- recording ---- */

static void *copy(const void *p, size_t count, size_t size, int *ok)
{
    if (!count)
        return NULL;
    void *q = ad_alloc(count * size);
    if (q)
        memcpy(q, p, count * size);
    else
        *ok = 0;
    return q;
}

void ad_program_free(ad_program *P)
{
    if (!P)
        return;
    ad_free(P->ins);
    ad_free(P->consts);
    ad_free(P->eids);
    ad_free(P->out);
    ad_free(P->calls);
    ad_free(P);
}

/* An output must carry the value its record made, as an argument must. */
static int outputs_seen(const ad_tape *t, size_t m)
{
    for (size_t j = 0; j < m; j++)
        if (!ad_listing_made(t, t->outputs[j].id, t->outputs[j].v))
            return 0;
    return 1;
}

static ad_status keep(const ad_tape *t, const ad_listing *L, size_t n, size_t m, ad_program **out)
{
    if (!outputs_seen(t, m))
        return AD_ENOTSUP;
    ad_program *P = ad_alloc(sizeof *P);
    if (!P)
        return AD_ENOMEM;
    int ok = 1;
    *P = (ad_program){.n = n, .m = m, .top = (uint32_t)(t->cursor.next - 1), .nins = L->nins,
                      .nconsts = L->nconsts, .neids = L->neids, .widest = L->widest,
                      .guards = L->guards};
    P->ins = copy(L->ins, L->nins, sizeof *L->ins, &ok);
    P->consts = copy(L->consts, L->nconsts, sizeof *L->consts, &ok);
    P->eids = copy(L->eids, L->neids, sizeof *L->eids, &ok);
    P->calls = copy(L->calls, L->ncalls, sizeof *L->calls, &ok);
    P->ncalls = L->ncalls;
    for (size_t i = 0; i < L->ncalls; i++) {
        size_t w = L->calls[i].n + L->calls[i].np + L->calls[i].m;
        P->widest_call = w > P->widest_call ? w : P->widest_call;
    }
    P->out = m && ok && m <= SIZE_MAX / sizeof *P->out ? ad_alloc(m * sizeof *P->out) : NULL;
    if (!ok || (m && !P->out)) {
        ad_program_free(P);
        return AD_ENOMEM;
    }
    for (size_t j = 0; j < m; j++) {
        ad_real y = t->outputs[j];
        P->out[j] = (ad_elem){y.id, y.id ? 0.0 : y.v};
    }
    *out = P;
    return AD_OK;
}

/* The thread's tape, its listing emptied, for a program's recording. */
static ad_status listing_begin(ad_program **P, int f_ok, size_t n, const double *x, ad_tape **t)
{
    if (!P)
        return AD_EINVAL;
    *P = NULL;
    if (!f_ok || (n && !x))
        return AD_EINVAL;
    if (!(*t = ad_thread_tape()))
        return AD_ENESTING;
    return ad_listing_reset(*t) ? AD_OK : AD_ENOMEM;
}

ad_status ad_program_record_function(ad_function f, void *ctx, size_t n, size_t m,
                                     const double *x, ad_program **P)
{
    ad_tape *t;
    ad_status s = listing_begin(P, f != NULL, n, x, &t);
    if (s == AD_OK)
        s = ad_record(t, f, ctx, n, x, m, AD_RECORD_LISTING);
    return s == AD_OK ? keep(t, ad_listing_of(t), n, m, P) : s;
}

ad_status ad_program_record(ad_objective f, void *ctx, size_t n, const double *x, ad_program **P)
{
    ad_tape *t;
    ad_status s = listing_begin(P, f != NULL, n, x, &t);
    if (s == AD_OK)
        s = ad_record_objective(t, f, ctx, n, x, AD_RECORD_LISTING);
    return s == AD_OK ? keep(t, ad_listing_of(t), n, 1, P) : s;
}

ad_status ad_program_stats_get(const ad_program *P, ad_program_stats *out)
{
    if (!P || !out)
        return AD_EINVAL;
    *out = (ad_program_stats){
        .inputs = P->n,
        .outputs = P->m,
        .operations = P->nins,
        .guards = P->guards,
        .bytes = sizeof *P + P->nins * sizeof *P->ins + P->nconsts * sizeof *P->consts +
                 P->neids * sizeof *P->eids + P->m * sizeof *P->out +
                 P->ncalls * sizeof *P->calls,
        .replay_bytes = ((size_t)P->top + 1 + 2 * P->widest + P->widest_call) * sizeof(ad_real),
    };
    return AD_OK;
}

/* ---- replaying ---- */

typedef struct run {
    const ad_program *P;
    ad_real *val;     /* val[id]: the value the operation kept as id made, replayed */
    ad_real *xs, *ys; /* an n-ary operation's elements */
    ad_real *cs;      /* a call's inputs and outputs */
    int recorded;     /* run inside the driver's recording, which a guard fails */
    int owned;        /* val is the replay's own, not the thread's spare */
    ad_status call_status; /* a call made again failed with it */
    ad_status status;
} run;

static ad_real operand(const ad_real *val, uint32_t id, const double **c)
{
    return id ? val[id] : ad_const(*(*c)++);
}

static ad_real unary(int op, ad_real a, const double *c)
{
    switch (op) {
    case AD__OP_NEG: return ad_neg_r(a);
    case AD__OP_FABS: return ad_fabs_r(a);
    case AD__OP_POW_RD: return ad_pow_rd(a, c[0]);
    case AD__OP_POW_DR: return ad_pow_dr(c[0], a);
    case AD__OP_SQRT: return ad_sqrt_r(a);
    case AD__OP_CBRT: return ad_cbrt_r(a);
    case AD__OP_EXP: return ad_exp_r(a);
    case AD__OP_EXPM1: return ad_expm1_r(a);
    case AD__OP_LOG: return ad_log_r(a);
    case AD__OP_LOG1P: return ad_log1p_r(a);
    case AD__OP_LOG2: return ad_log2_r(a);
    case AD__OP_LOG10: return ad_log10_r(a);
    case AD__OP_SIN: return ad_sin_r(a);
    case AD__OP_COS: return ad_cos_r(a);
    case AD__OP_TAN: return ad_tan_r(a);
    case AD__OP_ASIN: return ad_asin_r(a);
    case AD__OP_ACOS: return ad_acos_r(a);
    case AD__OP_ATAN: return ad_atan_r(a);
    case AD__OP_SINH: return ad_sinh_r(a);
    case AD__OP_COSH: return ad_cosh_r(a);
    case AD__OP_TANH: return ad_tanh_r(a);
    case AD__OP_ASINH: return ad_asinh_r(a);
    case AD__OP_ACOSH: return ad_acosh_r(a);
    case AD__OP_ATANH: return ad_atanh_r(a);
    case AD__OP_ERF: return ad_erf_r(a);
    case AD__OP_ERFC: return ad_erfc_r(a);
    case AD__OP_LGAMMA: return ad_lgamma_r(a);
    default: return ad_tgamma_r(a);
    }
}

static ad_real binary(int op, ad_real a, ad_real b)
{
    switch (op) {
    case AD__OP_ADD: return ad_add_rr(a, b);
    case AD__OP_SUB: return ad_sub_rr(a, b);
    case AD__OP_MUL: return ad_mul_rr(a, b);
    case AD__OP_DIV: return ad_div_rr(a, b);
    case AD__OP_POW: return ad_pow_rr(a, b);
    case AD__OP_ATAN2: return ad_atan2_rr(a, b);
    case AD__OP_HYPOT: return ad_hypot_rr(a, b);
    case AD__OP_FMIN: return ad_fmin_rr(a, b);
    default: return ad_fmax_rr(a, b);
    }
}

/* n operands from their IDs, each 0 taking the next constant; returns
 * where the constants it did not take start. */
static const double *gather(ad_real *dst, const ad_real *val, const uint32_t *e, size_t n,
                            const double *c)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = e[i] ? val[e[i]] : ad_const(*c++);
    return c;
}

static ad_real select_again(const run *r, const ad_ins *in)
{
    ad_real o[4];
    gather(o, r->val, r->P->eids + in->k, 4, r->P->consts + in->b);
    switch (in->sub) {
    case AD__CMP_LT: return ad_select_lt(o[0], o[1], o[2], o[3]);
    case AD__CMP_LE: return ad_select_le(o[0], o[1], o[2], o[3]);
    default: return ad_select_eq(o[0], o[1], o[2], o[3]);
    }
}

static ad_real nary_again(const run *r, const ad_ins *in)
{
    const ad_program *P = r->P;
    size_t n = in->a;
    const uint32_t *e = P->eids + in->k;
    const double *c = P->consts + in->b;
    if (in->sub == AD__LIST_DOT_RD) {
        gather(r->xs, r->val, e, n, c + n);
        return ad_dot_rd(n, r->xs, c);
    }
    c = gather(r->xs, r->val, e, n, c);
    switch (in->sub) {
    case AD__LIST_DOT:
        gather(r->ys, r->val, e + n, n, c);
        return ad_dot_r(n, r->xs, r->ys);
    case AD__LIST_SUM: return ad_sum_r(n, r->xs);
    case AD__LIST_SQNORM: return ad_sqnorm_r(n, r->xs);
    case AD_LIST_PROD: return ad_prod_r(n, r->xs);
    default: return ad_logsumexp_r(n, r->xs);
    }
}

/* An external function or a checkpointed loop, called again: its rule
 * (or step) runs on the new values, with the ctx it was given. */
static ad_status call_again(const run *r, const ad_ins *in)
{
    const ad_program *P = r->P;
    const ad_call *c = &P->calls[in->a];
    size_t nx = c->n + c->np;
    const uint32_t *e = P->eids + in->k;
    gather(r->cs, r->val, e, nx, P->consts + in->b);
    ad_real *y = r->cs + nx;
    ad_status s = c->step ? ad_checkpointed_loop(c->step, c->ctx, c->steps, c->snapshots, c->n,
                                                 r->cs, c->np, r->cs + c->n, y)
                          : ad_external(&c->rule, c->ctx, c->n, r->cs, c->m, y);
    for (size_t j = 0; j < c->m; j++)
        r->val[e[nx + j]] = y[j];
    return s;
}

/* One kept operation, made again; 0 if it is a guard that fails here. */
AD_INLINE int again(run *r, const ad_ins *in)
{
    const ad_program *P = r->P;
    ad_real *val = r->val;
    const double *c = P->consts + in->k;
    ad_real a, b;
    switch (in->op) {
    case AD__OP_NARY:
        val[in->id] = nary_again(r, in);
        return 1;
    case AD__OP_SELECT:
        val[in->id] = select_again(r, in);
        return 1;
    case AD_LIST_CALL:
        if ((r->call_status = call_again(r, in)) != AD_OK)
            return 0;
        return 1;
    case AD_LIST_GUARD:
        a = operand(val, in->a, &c);
        b = operand(val, in->b, &c);
        return ad_cmp_holds(in->sub & ~AD_LIST_TRUE, a.v, b.v) == !!(in->sub & AD_LIST_TRUE);
    case AD__OP_AXPY: {
        double f = *c++;
        a = operand(val, in->a, &c);
        b = operand(val, in->b, &c);
        ad_axpy_r(1, f, &a, &b);
        val[in->id] = b;
        return 1;
    }
    case AD__OP_ADD: case AD__OP_SUB: case AD__OP_MUL: case AD__OP_DIV: case AD__OP_POW:
    case AD__OP_ATAN2: case AD__OP_HYPOT: case AD__OP_FMIN: case AD__OP_FMAX:
        a = operand(val, in->a, &c);
        b = operand(val, in->b, &c);
        val[in->id] = binary(in->op, a, b);
        return 1;
    default:
        val[in->id] = unary(in->op, val[in->a], c);
        return 1;
    }
}

/* The program as a function: what the drivers record. */
static void run_function(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    run *r = ctx;
    const ad_program *P = r->P;
    for (size_t i = 0; i < n; i++)
        r->val[i + 1] = x[i];
    const ad_ins *in = P->ins, *end = in + P->nins;
    for (; in < end; in++)
        if (!again(r, in)) {
            r->status = r->call_status != AD_OK ? r->call_status : AD_EBRANCH;
            if (r->recorded)
                ad_fail_recording(r->status);
            ad_fill_nan_reals(y, m);
            return;
        }
    for (size_t j = 0; j < m; j++)
        y[j] = P->out[j].id ? r->val[P->out[j].id] : ad_const(P->out[j].v);
}

static ad_real run_objective(const ad_real *x, size_t n, void *ctx)
{
    ad_real y;
    run_function(x, n, &y, 1, ctx);
    return y;
}

/* The thread's value array, kept between replays (a large one costs its
 * pages' faults again on every call otherwise): one replay at a time
 * takes it; a replay that finds it taken has its own. */
static _Thread_local ad_real *spare;
static _Thread_local size_t spare_cap;
static _Thread_local int spare_taken;

static void spare_free(void)
{
    ad_free(spare);
    spare = NULL;
    spare_cap = 0;
}

/* A replay's arrays, or AD_ENOMEM. */
static ad_status run_begin(run *r, const ad_program *P, size_t extra)
{
    size_t count = (size_t)P->top + 1 + 2 * P->widest + P->widest_call + extra;
    *r = (run){.P = P, .recorded = 1, .status = AD_OK};
    if (count > SIZE_MAX / sizeof(ad_real))
        return AD_ENOMEM;
    if (!spare_taken && ad_thread_cleanup(spare_free) == AD_OK &&
        ad_reserve((void **)&spare, &spare_cap, count, sizeof *spare) == AD_OK) {
        spare_taken = 1;
        r->val = spare;
    } else {
        r->owned = 1;
        if (!(r->val = ad_alloc(count * sizeof(ad_real))))
            return AD_ENOMEM;
    }
    r->xs = r->val + P->top + 1;
    r->ys = r->xs + P->widest;
    r->cs = r->ys + P->widest;
    return AD_OK;
}

/* A driver's status, AD_EBRANCH where a guard failed. */
static ad_status run_end(run *r, ad_status s)
{
    if (r->owned)
        ad_free(r->val);
    else
        spare_taken = 0;
    return r->status != AD_OK ? r->status : s;
}

ad_status ad_program_value(ad_program *P, const double *x, double *fx)
{
    if (!P || (!fx && P->m) || (P->n && !x) || P->unkept) {
        if (P)
            ad_fill_nan(fx, P->m);
        return P && P->unkept ? AD_ENOTSUP : AD_EINVAL;
    }
    run r;
    if (run_begin(&r, P, P->n + P->m) != AD_OK) {
        ad_fill_nan(fx, P->m);
        return AD_ENOMEM;
    }
    ad_real *xs = r.cs + P->widest_call, *ys = xs + P->n;
    for (size_t i = 0; i < P->n; i++)
        xs[i] = ad_const(x[i]);
    r.recorded = 0;
    run_function(xs, P->n, ys, P->m, &r);
    for (size_t j = 0; j < P->m; j++)
        fx[j] = r.status == AD_OK ? ys[j].v : NAN;
    return run_end(&r, AD_OK);
}

/* The scalar drivers' check: a program of one output. */
static ad_status scalar_begin(run *r, ad_program *P, double *fx, double *grad, double *more)
{
    if (P && !P->unkept && P->m == 1 && run_begin(r, P, 0) == AD_OK)
        return AD_OK;
    size_t n = P ? P->n : 0;
    ad_fill_nan(fx, 1);
    ad_fill_nan(grad, n);
    ad_fill_nan(more, n);
    return !P ? AD_EINVAL : P->unkept ? AD_ENOTSUP : P->m != 1 ? AD_EINVAL : AD_ENOMEM;
}

ad_status ad_program_gradient(ad_program *P, const double *x, double *fx, double *grad)
{
    run r;
    ad_status s = scalar_begin(&r, P, fx, grad, NULL);
    if (s != AD_OK)
        return s;
    return run_end(&r, ad_gradient(run_objective, &r, P->n, x, fx, grad));
}

ad_status ad_program_hvp(ad_program *P, const double *x, const double *v, double *fx,
                         double *grad, double *hv)
{
    run r;
    ad_status s = scalar_begin(&r, P, fx, grad, hv);
    if (s != AD_OK)
        return s;
    return run_end(&r, ad_hvp(run_objective, &r, P->n, x, v, fx, grad, hv));
}

/* A CSR a failed start leaves: empty (an output, perhaps never
 * initialised, as the sparse drivers take it), or its values NaN. */
static void csr_failed(ad_csr *A, int keep_structure)
{
    if (A && keep_structure)
        ad_fill_nan(A->val, A->nnz);
    else if (A)
        memset(A, 0, sizeof *A);
}

ad_status ad_program_sparse_hessian(ad_program *P, const double *x, double *fx, double *grad,
                                    ad_csr *H)
{
    run r;
    ad_status s = scalar_begin(&r, P, fx, grad, NULL);
    if (s != AD_OK) {
        csr_failed(H, 0);
        return s;
    }
    return run_end(&r, ad_sparse_hessian(run_objective, &r, P->n, x, fx, grad, H));
}

ad_status ad_program_sparse_hessian_values(ad_program *P, const double *x, double *fx,
                                           double *grad, ad_csr *H)
{
    run r;
    ad_status s = scalar_begin(&r, P, fx, grad, NULL);
    if (s != AD_OK) {
        csr_failed(H, 1);
        return s;
    }
    s = run_end(&r, ad_sparse_hessian_values(run_objective, &r, P->n, x, fx, grad, H));
    if (s == AD_EBRANCH && H && H->val)
        ad_fill_nan(H->val, H->nnz);
    return s;
}

/* The vector drivers: NaN results (of sizes f gives) on a failed start. */
static ad_status vector_begin(run *r, ad_program *P, double *y, double *out, size_t count)
{
    if (P && !P->unkept && run_begin(r, P, 0) == AD_OK)
        return AD_OK;
    if (P) {
        ad_fill_nan(y, P->m);
        ad_fill_nan(out, count);
    }
    return !P ? AD_EINVAL : P->unkept ? AD_ENOTSUP : AD_ENOMEM;
}

ad_status ad_program_jacobian(ad_program *P, const double *x, double *y, double *jac)
{
    run r;
    ad_status s = vector_begin(&r, P, y, jac, P ? P->n * P->m : 0);
    if (s != AD_OK)
        return s;
    return run_end(&r, ad_jacobian(run_function, &r, P->n, x, P->m, y, jac));
}

ad_status ad_program_jvp(ad_program *P, const double *x, const double *v, double *y, double *jv)
{
    run r;
    ad_status s = vector_begin(&r, P, y, jv, P ? P->m : 0);
    if (s != AD_OK)
        return s;
    return run_end(&r, ad_jvp(run_function, &r, P->n, x, v, P->m, y, jv));
}

ad_status ad_program_vjp(ad_program *P, const double *x, const double *w, double *y, double *wj)
{
    run r;
    ad_status s = vector_begin(&r, P, y, wj, P ? P->n : 0);
    if (s != AD_OK)
        return s;
    return run_end(&r, ad_vjp(run_function, &r, P->n, x, P->m, w, y, wj));
}

ad_status ad_program_sparse_jacobian(ad_program *P, const double *x, double *y, ad_csr *J)
{
    run r;
    ad_status s = vector_begin(&r, P, y, NULL, 0);
    if (s != AD_OK) {
        csr_failed(J, 0);
        return s;
    }
    return run_end(&r, ad_sparse_jacobian(run_function, &r, P->n, x, P->m, y, J));
}

/* ---- an optimiser's evaluations ---- */

static ad_status evaluate_once(ad_program *P, const double *x, double *fx, double *grad)
{
    return grad ? ad_program_gradient(P, x, fx, grad) : ad_program_value(P, x, fx);
}

ad_status ad_program_evaluate(ad_program **P, ad_objective f, void *ctx, size_t n,
                              const double *x, double *fx, double *grad)
{
    if (!P || !f || !fx || (n && !x)) {
        ad_fill_nan(fx, 1);
        ad_fill_nan(grad, n);
        return AD_EINVAL;
    }
    ad_status s = AD_EBRANCH;
    if (*P && (*P)->unkept)
        s = AD_ENOTSUP;
    else if (*P && (*P)->n == n && (*P)->m == 1)
        s = evaluate_once(*P, x, fx, grad);
    if (s == AD_EBRANCH) {
        ad_program_free(*P);
        s = ad_program_record(f, ctx, n, x, P);
        if (s == AD_OK)
            return evaluate_once(*P, x, fx, grad);
        if (s == AD_ENOTSUP && (*P = ad_alloc(sizeof **P)) != NULL)
            **P = (ad_program){.n = n, .m = 1, .unkept = 1};
    }
    if (s == AD_OK)
        return s;
    if (s != AD_ENOTSUP) {
        ad_fill_nan(fx, 1);
        ad_fill_nan(grad, n);
        return s;
    }
    return grad ? ad_gradient(f, ctx, n, x, fx, grad) : ad_evaluate(f, ctx, n, x, fx);
}
