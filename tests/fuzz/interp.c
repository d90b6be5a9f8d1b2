/* The program interpreter on double and on ad_real, and the ad_function /
 * ad_objective wrappers the drivers call. */
#include <stdlib.h>
#include <string.h>

#include "prog.h"

/* A nested call's failure shows as NaN in its outputs, which the oracle
 * compares; its status is not needed. */
static void status_unused(ad_status s)
{
    (void)s;
}

int fuzz_interp_errors;  /* an ad_mat_make or ad_external that failed */

/* ---- the external function: y_j = s x_a x_b + sin(x_c), with
 * a = j mod L, b = (j+1) mod L, c = (j+2) mod L and s = *ctx.  Its rules
 * skip zero seeds, as a careful rule does: an output that the sweep does
 * not reach gets a zero cotangent, and its partial may be infinite.  The
 * rule with jvp has hvp too (second order); the one without has
 * neither. ---- */
double fuzz_ext_scale = 1.5;

static void ext_idx(size_t j, size_t n, size_t *a, size_t *b, size_t *c)
{
    *a = j % n;
    *b = (j + 1) % n;
    *c = (j + 2) % n;
}

static void ext_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    double sc = *(const double *)ctx;
    for (size_t j = 0; j < m; j++) {
        size_t a, b, c;
        ext_idx(j, n, &a, &b, &c);
        y[j] = sc * x[a] * x[b] + sin(x[c]);
    }
}

static void ext_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                    const double *ybar, double *xbar)
{
    (void)y;
    double sc = *(const double *)ctx;
    for (size_t j = 0; j < m; j++) {
        size_t a, b, c;
        if (ybar[j] == 0)
            continue;
        ext_idx(j, n, &a, &b, &c);
        xbar[a] += ybar[j] * (sc * x[b]);
        xbar[b] += ybar[j] * (sc * x[a]);
        xbar[c] += ybar[j] * cos(x[c]);
    }
}

static void ext_jvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                    const double *xdot, double *ydot)
{
    (void)y;
    double sc = *(const double *)ctx;
    for (size_t j = 0; j < m; j++) {
        size_t a, b, c;
        ext_idx(j, n, &a, &b, &c);
        ydot[j] = (xdot[a] == 0 ? 0 : (sc * x[b]) * xdot[a]) + (xdot[b] == 0 ? 0 : (sc * x[a]) * xdot[b]) +
                  (xdot[c] == 0 ? 0 : cos(x[c]) * xdot[c]);
    }
}

/* y_j's Hessian: s on (a, b) and (b, a), -sin x_c on (c, c); weighted by
 * ybar_j along xdot, skipping zero seeds as the other rules do. */
static void ext_hvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                    const double *ybar, const double *xdot, double *out)
{
    (void)y;
    double sc = *(const double *)ctx;
    for (size_t j = 0; j < m; j++) {
        size_t a, b, c;
        if (ybar[j] == 0)
            continue;
        ext_idx(j, n, &a, &b, &c);
        if (xdot[b] != 0)
            out[a] += ybar[j] * (sc * xdot[b]);
        if (xdot[a] != 0)
            out[b] += ybar[j] * (sc * xdot[a]);
        if (xdot[c] != 0)
            out[c] += ybar[j] * (-sin(x[c]) * xdot[c]);
    }
}

const ad_rule fuzz_rule_jvp = {ext_primal, ext_vjp, ext_jvp, ext_hvp};
const ad_rule fuzz_rule_nojvp = {ext_primal, ext_vjp, NULL, NULL};

/* ---- OP_COLLECTIVE (ad_external_collective): the external's function
 * with the coefficient s of a ctx the library copies into the record (the
 * caller's is overwritten once the call returns, so that a rule reading
 * it, not the copy, shows), y_j = s (j + 1) where n is 0.  A rule that
 * finds the ctx's tag wrong counts an interpreter error. ---- */
#define COLL_TAG 0x5eed5eedu
typedef struct coll_ctx { double s; unsigned tag; } coll_ctx;

static double coll_scale(void *ctx)
{
    const coll_ctx *k = ctx;
    if (k->tag != COLL_TAG) {
        fuzz_interp_errors++;
        return NAN;
    }
    return k->s;
}

static void coll_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    double sc = coll_scale(ctx);
    if (n == 0) {
        for (size_t j = 0; j < m; j++)
            y[j] = sc * (double)(j + 1);
        return;
    }
    ext_primal(&sc, n, x, m, y);
}

static void coll_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                     const double *ybar, double *xbar)
{
    double sc = coll_scale(ctx);
    if (n)
        ext_vjp(&sc, n, x, m, y, ybar, xbar);
}

static void coll_jvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                     const double *xdot, double *ydot)
{
    double sc = coll_scale(ctx);
    if (n)
        ext_jvp(&sc, n, x, m, y, xdot, ydot);
    else
        for (size_t j = 0; j < m; j++)
            ydot[j] = 0;
}

static void coll_hvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                     const double *ybar, const double *xdot, double *out)
{
    double sc = coll_scale(ctx);
    if (n)
        ext_hvp(&sc, n, x, m, y, ybar, xdot, out);
}

const ad_rule fuzz_rule_coll = {coll_primal, coll_vjp, coll_jvp, coll_hvp};

/* ---- nested gradients: the result is a constant of the outer program ---- */

static double nest_value(const prog *p, const insn *in, const double *vals)
{
    const prog *sub = &p->subs[in->sub];
    double fx, *grad = malloc(((size_t)in->len + 1) * sizeof *grad);
    /* AD_EOVERFLOW: the nested program is far out; its NaN gradient is then
     * the value (the double run and the ad_real run make the same call). */
    ad_status s = ad_gradient(fuzz_objective, (void *)sub, (size_t)in->len, vals, &fx, grad);
    if (s != AD_OK && s != AD_EOVERFLOW)
        fuzz_interp_errors++;
    double r = in->d < 0 ? fx : grad[in->d];
    free(grad);
    return r;
}

static double nest_value_d(const prog *p, const insn *in, const double *s)
{
    double *vals = malloc(((size_t)in->len + 1) * sizeof *vals);
    for (int i = 0; i < in->len; i++)
        vals[i] = s[p->args[in->arg + i]];
    double r = nest_value(p, in, vals);
    free(vals);
    return r;
}

static double nest_value_r(const prog *p, const insn *in, const ad_real *s)
{
    double *vals = malloc(((size_t)in->len + 1) * sizeof *vals);
    for (int i = 0; i < in->len; i++)
        vals[i] = ad_value(s[p->args[in->arg + i]]);
    double r = nest_value(p, in, vals);
    free(vals);
    return r;
}

/* ---- nested derivatives (OP_NESTR): on double, ad_gradient and ad_jvp
 * (what ad_gradient_r and ad_jvp_r give outside a recording); on ad_real,
 * ad_gradient_r and ad_jvp_r, whose results are values of the recording.
 * A failure gives NaN (and fails the enclosing recording, which its driver
 * reports; check.c expects it from run_recorded's status). ---- */

static void nestr_d(const prog *p, const insn *in, double *s)
{
    const prog *sub = &p->subs[in->sub];
    int k = in->len, na = prog_nargs(in);
    double *x = malloc(((size_t)na + 1) * sizeof *x), *o = s + in->out;
    for (int i = 0; i < na; i++)
        x[i] = s[p->args[in->arg + i]];
    if (in->mode)
        status_unused(ad_jvp(fuzz_function, (void *)sub, (size_t)k, x, x + k, 1, o, o + 1));
    else
        status_unused(ad_gradient(fuzz_objective, (void *)sub, (size_t)k, x, o, o + 1));
    free(x);
}

static void nestr_r(const prog *p, const insn *in, ad_real *s)
{
    const prog *sub = &p->subs[in->sub];
    int k = in->len, na = prog_nargs(in);
    ad_real *x = malloc(((size_t)na + 1) * sizeof *x), *o = s + in->out;
    for (int i = 0; i < na; i++)
        x[i] = s[p->args[in->arg + i]];
    if (in->mode)
        status_unused(ad_jvp_r(fuzz_function, (void *)sub, (size_t)k, x, x + k, 1, o, o + 1));
    else
        status_unused(ad_gradient_r(fuzz_objective, (void *)sub, (size_t)k, x, o, o + 1));
    free(x);
}

/* NESTOUT: on double the value the library computed; on ad_real (where
 * no program written out is run) the copy. */
#define nestout_d(in, s) ((in)->k)
#define nestout_r(in, s) ((s)[(in)->a])

/* ---- elementary operations by opcode, both types ---- */

#define UNARY_CASES(x)                                                             \
    case OP_NEG: return ad_neg(x);     case OP_SQRT: return ad_sqrt(x);            \
    case OP_CBRT: return ad_cbrt(x);   case OP_EXP: return ad_exp(x);              \
    case OP_EXPM1: return ad_expm1(x); case OP_LOG: return ad_log(x);              \
    case OP_LOG1P: return ad_log1p(x); case OP_LOG2: return ad_log2(x);            \
    case OP_LOG10: return ad_log10(x); case OP_SIN: return ad_sin(x);              \
    case OP_COS: return ad_cos(x);     case OP_TAN: return ad_tan(x);              \
    case OP_ASIN: return ad_asin(x);   case OP_ACOS: return ad_acos(x);            \
    case OP_ATAN: return ad_atan(x);   case OP_SINH: return ad_sinh(x);            \
    case OP_COSH: return ad_cosh(x);   case OP_TANH: return ad_tanh(x);            \
    case OP_ASINH: return ad_asinh(x); case OP_ACOSH: return ad_acosh(x);          \
    case OP_ATANH: return ad_atanh(x); case OP_FABS: return ad_fabs(x);            \
    case OP_ERF: return ad_erf(x);     case OP_ERFC: return ad_erfc(x);            \
    case OP_LGAMMA: return ad_lgamma(x); case OP_TGAMMA: return ad_tgamma(x);      \
    default: abort();

#define BINARY_CASES(a, b)                                                         \
    case OP_ADD: return ad_add(a, b);     case OP_SUB: return ad_sub(a, b);        \
    case OP_MUL: return ad_mul(a, b);     case OP_DIV: return ad_div(a, b);        \
    case OP_POW: return ad_pow(a, b);     case OP_ATAN2: return ad_atan2(a, b);    \
    case OP_HYPOT: return ad_hypot(a, b); case OP_FMIN: return ad_fmin(a, b);      \
    case OP_FMAX: return ad_fmax(a, b);   default: abort();

/* A branch's comparison (prog.h), written with the guards: on ad_real a
 * recorded program keeps it (ad_program_record), and a replay where it
 * comes out the other way fails with AD_EBRANCH.  On double the C
 * comparison, as branch_holds. */
#define GUARD_CASES(a, b)                                                            \
    case 1: return ad_gt(b, a); case 2: return ad_le(a, b);                         \
    case 3: return ad_ge(b, a); default: return ad_lt(a, b);

static int branch_d(int mode, double a, double b) { switch (mode & 3) { GUARD_CASES(a, b) } }
static int branch_r(int mode, ad_real a, ad_real b) { switch (mode & 3) { GUARD_CASES(a, b) } }

static double unary_d(int op, double x) { switch (op) { UNARY_CASES(x) } }
static ad_real unary_r(int op, ad_real x) { switch (op) { UNARY_CASES(x) } }
static double binary_dd(int op, double a, double b) { switch (op) { BINARY_CASES(a, b) } }
static ad_real binary_rr(int op, ad_real a, ad_real b) { switch (op) { BINARY_CASES(a, b) } }
static ad_real binary_rd(int op, ad_real a, double b) { switch (op) { BINARY_CASES(a, b) } }
static ad_real binary_dr(int op, double a, ad_real b) { switch (op) { BINARY_CASES(a, b) } }

/* ---- checkpointed loops: on double the loop is run; on ad_real it is
 * ad_checkpointed_loop with a step function that runs the step program
 * on the values the library gives it ---- */

long fuzz_step_k;
long fuzz_step_evals;

static void run_d(const prog *p, double *s, int j0, int j1);
static void run_r(const prog *p, ad_real *s, int j0, int j1);

static void loop_d(const prog *p, const insn *in, double *s)
{
    const prog *sub = &p->subs[in->sub];
    int ns = in->len, np = in->rows;
    double *t = malloc(((size_t)sub->nslots + 1) * sizeof *t);
    double *cur = malloc(((size_t)ns + 1) * sizeof *cur);
    for (int i = 0; i < ns; i++)
        cur[i] = s[p->args[in->arg + i]];
    long saved = fuzz_step_k;
    for (int k = 0; k < in->steps; k++) {
        for (int i = 0; i < ns; i++)
            t[i] = cur[i];
        for (int i = 0; i < np; i++)
            t[ns + i] = s[p->args[in->arg + ns + i]];
        fuzz_step_k = k;
        run_d(sub, t, 0, sub->ncode);
        for (int i = 0; i < ns; i++)
            cur[i] = t[sub->outs[i]];
    }
    fuzz_step_k = saved;
    for (int i = 0; i < ns; i++)
        s[in->out + i] = cur[i];
    free(t);
    free(cur);
}

/* ad_step_fn: ctx is the step program. */
static void fuzz_step(size_t k, const ad_real *state, ad_real *next, size_t n,
                      const ad_real *params, size_t np, void *ctx)
{
    const prog *sub = ctx;
    ad_real *t = malloc(((size_t)sub->nslots + 1) * sizeof *t);
    for (size_t i = 0; i < n; i++)
        t[i] = state[i];
    for (size_t i = 0; i < np; i++)
        t[n + i] = params[i];
    long saved = fuzz_step_k;
    fuzz_step_k = (long)k;
    fuzz_step_evals++;
    run_r(sub, t, 0, sub->ncode);
    fuzz_step_k = saved;
    for (size_t i = 0; i < n; i++)
        next[i] = t[sub->outs[i]];
    free(t);
}

static void loop_r(const prog *p, const insn *in, ad_real *s)
{
    const prog *sub = &p->subs[in->sub];
    int ns = in->len, np = in->rows;
    ad_real *x = malloc(((size_t)(ns + np) + 1) * sizeof *x);
    for (int i = 0; i < ns + np; i++)
        x[i] = s[p->args[in->arg + i]];
    ad_status st = ad_checkpointed_loop(fuzz_step, (void *)sub, (size_t)in->steps, (size_t)in->snaps,
                                        (size_t)ns, x, (size_t)np, np ? x + ns : NULL, s + in->out);
    if (st != AD_OK)
        fuzz_interp_errors++;
    free(x);
}

/* ---- OP_MAT_MAP's user function (prog.h): f = sin x + a x^2, a the ctx ---- */
double fuzz_map_scale = 0.25;

static double map_f(double x, void *ctx) { return sin(x) + *(const double *)ctx * x * x; }
static double map_df(double x, void *ctx) { return cos(x) + 2.0 * *(const double *)ctx * x; }
static double map_d2f(double x, void *ctx) { return 2.0 * *(const double *)ctx - sin(x); }

const ad_map_fn fuzz_map_fn = {map_f, map_df, map_d2f};
const ad_map_fn fuzz_map_fn_nod2f = {map_f, map_df, NULL};

/* ---- the two instantiations ---- */

static void external_d(const ad_rule *rule, int n, const double *x, int m, double *y)
{
    rule->primal(&fuzz_ext_scale, (size_t)n, x, (size_t)m, y);
}

static void external_r(const ad_rule *rule, int n, const ad_real *x, int m, ad_real *y)
{
    if (ad_external(rule, &fuzz_ext_scale, (size_t)n, x, (size_t)m, y) != AD_OK)
        fuzz_interp_errors++;
}

static void collective_d(const insn *in, int n, const double *x, int m, double *y)
{
    coll_ctx k = {in->k, COLL_TAG};
    coll_primal(&k, (size_t)n, x, (size_t)m, y);
}

static void collective_r(const insn *in, int n, const ad_real *x, int m, ad_real *y)
{
    coll_ctx k = {in->k, COLL_TAG};
    if (ad_external_collective(&fuzz_rule_coll, &k, sizeof k, 1, (size_t)n, x, (size_t)m, y) != AD_OK)
        fuzz_interp_errors++;
    /* the record has its own copy */
    volatile coll_ctx *kv = &k;
    kv->s = NAN;
    kv->tag = 0;
}

#define T double
#define RUN run_d
#define unary unary_d
#define binary_rr binary_dd
#define binary_rd binary_dd
#define binary_dr binary_dd
#define nest_value nest_value_d
#define MATVEC_RR ad_matvec_d
#define EXTERNAL external_d
#define COLLECTIVE collective_d
#define LOOP loop_d
#define NESTR nestr_d
#define NESTOUT nestout_d
#define BRANCH branch_d
#define MATOPS matops_d
#define MAPAPPLY mapapply_d
#include "interp_body.h"
#undef MATOPS
#undef MAPAPPLY
#undef BRANCH
#undef NESTR
#undef NESTOUT
#undef LOOP
#undef T
#undef RUN
#undef unary
#undef binary_rr
#undef binary_rd
#undef binary_dr
#undef nest_value
#undef MATVEC_RR
#undef EXTERNAL
#undef COLLECTIVE

#define T ad_real
#define RUN run_r
#define unary unary_r
#define nest_value nest_value_r
#define MATVEC_RR ad_matvec_rr
#define EXTERNAL external_r
#define COLLECTIVE collective_r
#define LOOP loop_r
#define NESTR nestr_r
#define NESTOUT nestout_r
#define BRANCH branch_r
#define MATOPS matops_r
#define MAPAPPLY mapapply_r
#include "interp_body.h"

void run_double(const prog *p, const double *x, double *slots)
{
    if (p->n)
        memcpy(slots, x, (size_t)p->n * sizeof *x);
    run_d(p, slots, 0, p->ncode);
}

void run_double_step(const prog *p, double *slots, int j)
{
    run_d(p, slots, j, j + 1);
}

/* The drivers' callbacks: ctx is the program. */
void fuzz_function(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const prog *p = ctx;
    ad_real *s = malloc(((size_t)p->nslots + 1) * sizeof *s);
    if (n)
        memcpy(s, x, n * sizeof *x);
    run_r(p, s, 0, p->ncode);
    for (size_t j = 0; j < m; j++)
        y[j] = s[p->outs[j]];
    free(s);
}

ad_real fuzz_objective(const ad_real *x, size_t n, void *ctx)
{
    const prog *p = ctx;
    ad_real *s = malloc(((size_t)p->nslots + 1) * sizeof *s);
    if (n)
        memcpy(s, x, n * sizeof *x);
    run_r(p, s, 0, p->ncode);
    ad_real r = s[p->outs[0]];
    free(s);
    return r;
}

/* ---- a run under a recording: every slot's value and activity ---- */

typedef struct recorded {
    const prog *p;
    unsigned char *active;
} recorded;

static void all_slots(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const recorded *rc = ctx;
    const prog *p = rc->p;
    ad_real *s = malloc(((size_t)p->nslots + 1) * sizeof *s);
    if (n)
        memcpy(s, x, n * sizeof *x);
    run_r(p, s, 0, p->ncode);
    for (size_t j = 0; j < m; j++) {
        y[j] = s[j];
        if (rc->active)
            rc->active[j] = s[j].id != 0;
    }
    free(s);
}

ad_status run_recorded(const prog *p, const double *x, double *vals, unsigned char *active)
{
    recorded rc = {p, active};
    ad_linear *L = NULL;
    if (active)
        memset(active, 0, (size_t)p->nslots);
    ad_status st = ad_linearize(all_slots, &rc, (size_t)p->n, x, (size_t)p->nslots, vals, &L);
    ad_linear_free(L);
    return st;
}
