/* Recorded programs: ad_program_record, ad_program_record_function, the
 * replays (ad_program_value, _gradient, _hvp, _jacobian, _jvp, _vjp,
 * _sparse_jacobian, _sparse_hessian, _sparse_hessian_values),
 * ad_program_evaluate and ad_program_stats_get, with the branch guards
 * ad_lt, ad_le, ad_gt, ad_ge, and the external functions (ad_external) and
 * checkpointed loops a program keeps as calls, made again by a replay
 * (include/dualrev.h, "recorded programs").
 *
 * Oracles, each independent of the replay under test:
 *   - the drivers on f itself.  A replay at x makes the operations f makes
 *     at x, so each of its results must be the same bits (memcmp) as
 *     ad_gradient, ad_hvp, ad_jacobian, ad_jvp, ad_vjp, ad_sparse_hessian,
 *     ad_sparse_hessian_values and ad_sparse_jacobian of f at x, with the
 *     same status, and the program's value the bits of f run on constants
 *     (no recording at all).  Replay outputs are filled beforehand with a
 *     number other than the direct call's, so that an output one of them
 *     leaves unwritten shows;
 *   - closed forms: f3(x) = x0^2 x1 + sin(x1) x2 + exp(x0 x2) (gradient,
 *     Hessian) and F2(x) = (x0 x1 + sin x2, e^x0 x2^2) (Jacobian), to
 *     1e-12 of the largest entry, as test_nested.c;
 *   - check.h's eighth-order central differences of the mixed function
 *     (every mix of constants and primitives below) compiled for double
 *     from the same source, whose value must also be the program's bits;
 *   - for guards, the C comparison at the point: where it differs from the
 *     recording's, AD_EBRANCH and NaN results from every replay;
 *   - call counts of f (a replay never calls it) and of ctx reads; for
 *     external functions and loops, their rules' calls (a replay makes
 *     them) and the tape statistics of a replay's recording against f's
 *     (the same records, blocks and loop snapshots), the closed forms of
 *     external_maps.h and central differences of the replayed value.
 * "The same bits" takes all NaNs as one number (same_number below).
 *
 * Covered: every elementary operation in every rr/rd/dr form (ops_list.h),
 * constants on either side (x + c, c - x, c x, pow with a constant exponent
 * or base, atan2, fmin, fmax, hypot, div), ad_axpy with constant x or y,
 * ad_sum, ad_dot (both arrays active, either constant, an array with
 * itself), ad_sqnorm, ad_matvec, ad_matvec_rr, ad_prod, ad_logsumexp with
 * constant elements among active ones, selections across their kinks,
 * guards of every kind and form, guards on constants, vector programs,
 * edge values (signed zeros, subnormals, Inf, NaN), ctx changed after
 * recording, eight threads replaying one program, programs recorded or
 * replayed inside other recordings, long programs, ad_program_evaluate,
 * the statistics, errors (NULL arguments, scalar drivers on vector
 * programs, what a program cannot keep -- recorded matrices, nested
 * derivatives of active values, values made by hand --, values of other
 * recordings, the tape limit) and allocation failure at every count; pow
 * with an exponent or base the compiler sees, which it may fold (x^2 into
 * x x), at points where the folded and the called forms round apart; and
 * external functions and checkpointed loops (section 18): alone, among
 * operations and each other (an external's outputs feeding a loop, a
 * loop's state an external, externals in a step, loops in a step, inputs
 * that are constants, repeated or results of primitives, unused outputs,
 * guards on a call's output), a step that branches (its guards are its
 * own recordings', not the program's), rules without jvp or hvp
 * (AD_ENOTSUP where the driver on f gives it), rules that record, their
 * ctx changed after the recording (read by the replay; the rule kept as
 * it was passed; an external of constants not a call), a rule writing NaN
 * and a step meeting an invalid call at a replay (with and without
 * AD_CHECK_FINITE), the tape limit at every count, allocation failure at
 * every count, eight threads, and replays inside recordings. */
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "external_maps.h"
#include "ops_list.h"
#include "ops_table.h"
#include "../lib/drivers/testing.h"

#define NMAX 8
#define MMAX 6
#define RTOL 1e-12

/* What replays and direct calls write before they run. */
#define SENT_P 12345.0
#define SENT_D -6789.0

/* ======================================================================
 * 1. Comparisons
 * ====================================================================== */

/* The point being compared, for the messages. */
static const char *cur_name;
static const double *cur_x;
static size_t cur_n;

static void where(void)
{
    print_error("%s at x = (", cur_name ? cur_name : "?");
    for (size_t i = 0; cur_x && i < cur_n; i++)
        print_error("%s%.17g", i ? ", " : "", cur_x[i]);
    print_error(")\n");
}

static void set_where(const char *name, const double *x, size_t n)
{
    cur_name = name;
    cur_x = x;
    cur_n = n;
}

static void same_status_at(const char *driver, ad_status sp, ad_status sd, const char *file,
                           int line)
{
    if (sp == sd)
        return;
    where();
    print_error("%s: replay status %d (%s), expected %d (%s)\n", driver, (int)sp,
                ad_strerror(sp), (int)sd, ad_strerror(sd));
    _fail(file, line);
}
#define same_status(driver, sp, sd) same_status_at((driver), (sp), (sd), __FILE__, __LINE__)

/* p[i] and d[i] the same number: the same bits, or both NaN.  A NaN's
 * sign and payload are not the operation's but the compiler's (it may
 * swap the operands of a + b, and x86 keeps the first NaN operand's), and
 * the library takes all NaNs as one value (listing.c, same()). */
static int same_number(double p, double d)
{
    return memcmp(&p, &d, sizeof p) == 0 || (isnan(p) && isnan(d));
}

/* p[0..k) and d[0..k), bit for bit (NaN as above). */
static void same_bits_at(const char *driver, const char *what, const double *p, const double *d,
                         size_t k, const char *file, int line)
{
    for (size_t i = 0; i < k; i++)
        if (!same_number(p[i], d[i])) {
            where();
            print_error("%s: %s[%zu] = %.17g (%a) in the replay, %.17g (%a) expected\n", driver,
                        what, i, p[i], p[i], d[i], d[i]);
            _fail(file, line);
        }
}
#define same_bits(driver, what, p, d, k) \
    same_bits_at((driver), (what), (p), (d), (k), __FILE__, __LINE__)

static void all_nan_at(const char *driver, const char *what, const double *p, size_t k,
                       const char *file, int line)
{
    for (size_t i = 0; i < k; i++)
        if (!isnan(p[i])) {
            where();
            print_error("%s: %s[%zu] = %.17g, expected NaN\n", driver, what, i, p[i]);
            _fail(file, line);
        }
}
#define all_nan(driver, what, p, k) all_nan_at((driver), (what), (p), (k), __FILE__, __LINE__)

static void same_csr_at(const char *driver, const ad_csr *A, const ad_csr *B, const char *file,
                        int line)
{
    if (A->rows != B->rows || A->cols != B->cols || A->nnz != B->nnz ||
        !A->row_ptr != !B->row_ptr) {
        where();
        print_error("%s: CSR %zu x %zu, nnz %zu (row_ptr %p) in the replay, %zu x %zu, nnz %zu "
                    "(row_ptr %p) expected\n", driver, A->rows, A->cols, A->nnz,
                    (void *)A->row_ptr, B->rows, B->cols, B->nnz, (void *)B->row_ptr);
        _fail(file, line);
    }
    if (!A->row_ptr)
        return;
    if (memcmp(A->row_ptr, B->row_ptr, (A->rows + 1) * sizeof(size_t)) ||
        (A->nnz && memcmp(A->col, B->col, A->nnz * sizeof(size_t)))) {
        where();
        print_error("%s: the CSR structures differ\n", driver);
        _fail(file, line);
    }
    same_bits_at(driver, "val", A->val, B->val, A->nnz, file, line);
}
#define same_csr(driver, A, B) same_csr_at((driver), (A), (B), __FILE__, __LINE__)

/* A copy of H's structure and values, in arrays of our own. */
static ad_csr csr_copy(const ad_csr *H)
{
    ad_csr C = *H;
    C.row_ptr = xmalloc((H->rows + 1) * sizeof(size_t));
    C.col = xmalloc(H->nnz * sizeof(size_t));
    C.val = xmalloc(H->nnz * sizeof(double));
    memcpy(C.row_ptr, H->row_ptr, (H->rows + 1) * sizeof(size_t));
    if (H->nnz) {
        memcpy(C.col, H->col, H->nnz * sizeof(size_t));
        memcpy(C.val, H->val, H->nnz * sizeof(double));
    }
    return C;
}

static void csr_copy_free(ad_csr *C)
{
    free(C->row_ptr);
    free(C->col);
    free(C->val);
    memset(C, 0, sizeof *C);
}

/* A CSR as an uninitialised one may be: every field garbage. */
static void csr_garbage(ad_csr *C)
{
    memset(C, 0x5a, sizeof *C);
}

/* ======================================================================
 * 2. Subjects: functions, their programs, and the comparison at a point
 * ====================================================================== */

typedef struct subject {
    const char *name;
    ad_objective f;  /* a scalar function, or NULL */
    ad_function F;   /* else a function of m outputs */
    void *ctx;
    size_t n, m;     /* m is 1 for a scalar one */
} subject;

typedef struct scalar_call {
    ad_objective f;
    void *ctx;
} scalar_call;

static void scalar_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const scalar_call *c = ctx;
    (void)m;
    y[0] = c->f(x, n, c->ctx);
}

static ad_status record_status(const subject *s, const double *x, ad_program **P)
{
    return s->f ? ad_program_record(s->f, s->ctx, s->n, x, P)
                : ad_program_record_function(s->F, s->ctx, s->n, s->m, x, P);
}

static ad_program *record_at_(const subject *s, const double *x, const char *file, int line)
{
    ad_program *P = NULL;
    ad_status st = record_status(s, x, &P);
    if (st != AD_OK || !P) {
        set_where(s->name, x, s->n);
        where();
        print_error("recording: %s\n", ad_strerror(st));
        _fail(file, line);
    }
    return P;
}
#define record_at(s, x) record_at_((s), (x), __FILE__, __LINE__)

/* f (or F) run on constants: no recording, plain numbers. */
static void plain_values(const subject *s, const double *x, double *y)
{
    ad_real xs[NMAX], ys[MMAX];
    for (size_t i = 0; i < s->n; i++)
        xs[i] = ad_const(x[i]);
    for (size_t j = 0; j < s->m; j++)
        ys[j] = ad_const(NAN);
    if (s->f)
        ys[0] = s->f(xs, s->n, s->ctx);
    else
        s->F(xs, s->n, ys, s->m, s->ctx);
    for (size_t j = 0; j < s->m; j++)
        y[j] = ad_value(ys[j]);
}

/* The Hessian structure the direct driver finds at x (for
 * ad_sparse_hessian_values), in arrays of our own. */
static ad_csr structure_at(const subject *s, const double *x)
{
    double fx, g[NMAX];
    ad_csr H;
    assert_ok(ad_sparse_hessian(s->f, s->ctx, s->n, x, &fx, g, &H));
    ad_csr C = csr_copy(&H);
    ad_csr_free(&H);
    return C;
}

/* The scalar drivers, replay against direct. */
static void compare_scalar(const subject *s, ad_program *P, const double *x, const double *v,
                           const ad_csr *H0, double value)
{
    size_t n = s->n;
    double fp, fd, gp[NMAX], gd[NMAX], hp[NMAX], hd[NMAX];
    ad_status sp, sd;

    fp = SENT_P, fd = SENT_D;
    fill(gp, n, SENT_P), fill(gd, n, SENT_D);
    sp = ad_program_gradient(P, x, &fp, gp);
    sd = ad_gradient(s->f, s->ctx, n, x, &fd, gd);
    same_status("ad_program_gradient", sp, sd);
    same_bits("ad_program_gradient", "fx", &fp, &fd, 1);
    same_bits("ad_program_gradient", "grad", gp, gd, n);
    if (sd == AD_OK)
        same_bits("ad_gradient", "fx (f on constants)", &fd, &value, 1);

    fp = SENT_P, fd = SENT_D;
    fill(gp, n, SENT_P), fill(gd, n, SENT_D), fill(hp, n, SENT_P), fill(hd, n, SENT_D);
    sp = ad_program_hvp(P, x, v, &fp, gp, hp);
    sd = ad_hvp(s->f, s->ctx, n, x, v, &fd, gd, hd);
    same_status("ad_program_hvp", sp, sd);
    same_bits("ad_program_hvp", "fx", &fp, &fd, 1);
    same_bits("ad_program_hvp", "grad", gp, gd, n);
    same_bits("ad_program_hvp", "hv", hp, hd, n);

    ad_csr Hp, Hd;
    csr_garbage(&Hp), csr_garbage(&Hd);
    fp = SENT_P, fd = SENT_D;
    fill(gp, n, SENT_P), fill(gd, n, SENT_D);
    sp = ad_program_sparse_hessian(P, x, &fp, gp, &Hp);
    sd = ad_sparse_hessian(s->f, s->ctx, n, x, &fd, gd, &Hd);
    same_status("ad_program_sparse_hessian", sp, sd);
    same_bits("ad_program_sparse_hessian", "fx", &fp, &fd, 1);
    same_bits("ad_program_sparse_hessian", "grad", gp, gd, n);
    same_csr("ad_program_sparse_hessian", &Hp, &Hd);
    if (sp == AD_OK)
        ad_csr_free(&Hp);
    if (sd == AD_OK)
        ad_csr_free(&Hd);

    if (!H0)
        return;
    Hp = csr_copy(H0), Hd = csr_copy(H0);
    fill(Hp.val, Hp.nnz, SENT_P), fill(Hd.val, Hd.nnz, SENT_D);
    fp = SENT_P, fd = SENT_D;
    fill(gp, n, SENT_P), fill(gd, n, SENT_D);
    sp = ad_program_sparse_hessian_values(P, x, &fp, gp, &Hp);
    sd = ad_sparse_hessian_values(s->f, s->ctx, n, x, &fd, gd, &Hd);
    same_status("ad_program_sparse_hessian_values", sp, sd);
    same_bits("ad_program_sparse_hessian_values", "fx", &fp, &fd, 1);
    same_bits("ad_program_sparse_hessian_values", "grad", gp, gd, n);
    same_bits("ad_program_sparse_hessian_values", "val", Hp.val, Hd.val, Hp.nnz);
    csr_copy_free(&Hp);
    csr_copy_free(&Hd);
}

/* The vector drivers (on a scalar subject too: one output). */
static void compare_vector(ad_function F, void *ctx, ad_program *P, size_t n, size_t m,
                           const double *x, const double *v, const double *w,
                           const double *value)
{
    double yp[MMAX], yd[MMAX], jp[NMAX * MMAX], jd[NMAX * MMAX];
    ad_status sp, sd;

    fill(yp, m, SENT_P), fill(yd, m, SENT_D), fill(jp, n * m, SENT_P), fill(jd, n * m, SENT_D);
    sp = ad_program_jacobian(P, x, yp, jp);
    sd = ad_jacobian(F, ctx, n, x, m, yd, jd);
    same_status("ad_program_jacobian", sp, sd);
    same_bits("ad_program_jacobian", "y", yp, yd, m);
    same_bits("ad_program_jacobian", "jac", jp, jd, n * m);
    if (sd == AD_OK)
        same_bits("ad_jacobian", "y (F on constants)", yd, value, m);

    fill(yp, m, SENT_P), fill(yd, m, SENT_D), fill(jp, m, SENT_P), fill(jd, m, SENT_D);
    sp = ad_program_jvp(P, x, v, yp, jp);
    sd = ad_jvp(F, ctx, n, x, v, m, yd, jd);
    same_status("ad_program_jvp", sp, sd);
    same_bits("ad_program_jvp", "y", yp, yd, m);
    same_bits("ad_program_jvp", "jv", jp, jd, m);

    fill(yp, m, SENT_P), fill(yd, m, SENT_D), fill(jp, n, SENT_P), fill(jd, n, SENT_D);
    sp = ad_program_vjp(P, x, w, yp, jp);
    sd = ad_vjp(F, ctx, n, x, m, w, yd, jd);
    same_status("ad_program_vjp", sp, sd);
    same_bits("ad_program_vjp", "y", yp, yd, m);
    same_bits("ad_program_vjp", "wj", jp, jd, n);

    ad_csr Jp, Jd;
    csr_garbage(&Jp), csr_garbage(&Jd);
    fill(yp, m, SENT_P), fill(yd, m, SENT_D);
    sp = ad_program_sparse_jacobian(P, x, yp, &Jp);
    sd = ad_sparse_jacobian(F, ctx, n, x, m, yd, &Jd);
    same_status("ad_program_sparse_jacobian", sp, sd);
    same_bits("ad_program_sparse_jacobian", "y", yp, yd, m);
    same_csr("ad_program_sparse_jacobian", &Jp, &Jd);
    if (sp == AD_OK)
        ad_csr_free(&Jp);
    if (sd == AD_OK)
        ad_csr_free(&Jd);
}

/* Every replay of P at x against the same driver on the subject: the
 * same status and bits.  H0: a Hessian structure for
 * ad_sparse_hessian_values (scalar subjects), or NULL. */
static void compare_at(const subject *s, ad_program *P, const double *x, const ad_csr *H0,
                       uint64_t *rng)
{
    size_t n = s->n, m = s->m;
    scalar_call sc = {s->f, s->ctx};
    double v[NMAX], w[MMAX], yp[MMAX], yd[MMAX];
    fill_uniform(rng, v, n, -1.0, 1.0);
    fill_uniform(rng, w, m, -1.0, 1.0);
    set_where(s->name, x, n);

    fill(yp, m, SENT_P);
    same_status("ad_program_value", ad_program_value(P, x, yp), AD_OK);
    plain_values(s, x, yd);
    same_bits("ad_program_value", "y", yp, yd, m);

    if (s->f)
        compare_scalar(s, P, x, v, H0, yd[0]);
    compare_vector(s->f ? scalar_fn : s->F, s->f ? (void *)&sc : s->ctx, P, n, m, x, v, w, yd);
}

/* Every replay of P at x fails with AD_EBRANCH: NaN outputs, empty
 * CSRs. */
static void expect_branch(const subject *s, ad_program *P, const double *x, const ad_csr *H0)
{
    size_t n = s->n, m = s->m;
    double fx, g[NMAX], hv[NMAX], y[MMAX], jac[NMAX * MMAX], v[NMAX], w[MMAX];
    fill(v, n, 0.5), fill(w, m, -0.25);
    set_where(s->name, x, n);

    fill(y, m, SENT_P);
    same_status("ad_program_value", ad_program_value(P, x, y), AD_EBRANCH);
    all_nan("ad_program_value", "y", y, m);
    if (s->f) {
        fx = SENT_P, fill(g, n, SENT_P), fill(hv, n, SENT_P);
        same_status("ad_program_gradient", ad_program_gradient(P, x, &fx, g), AD_EBRANCH);
        all_nan("ad_program_gradient", "fx", &fx, 1);
        all_nan("ad_program_gradient", "grad", g, n);

        fx = SENT_P, fill(g, n, SENT_P);
        same_status("ad_program_hvp", ad_program_hvp(P, x, v, &fx, g, hv), AD_EBRANCH);
        all_nan("ad_program_hvp", "fx", &fx, 1);
        all_nan("ad_program_hvp", "grad", g, n);
        all_nan("ad_program_hvp", "hv", hv, n);

        ad_csr H;
        csr_garbage(&H);
        fx = SENT_P, fill(g, n, SENT_P);
        same_status("ad_program_sparse_hessian", ad_program_sparse_hessian(P, x, &fx, g, &H),
                    AD_EBRANCH);
        all_nan("ad_program_sparse_hessian", "fx", &fx, 1);
        all_nan("ad_program_sparse_hessian", "grad", g, n);
        assert_csr_empty(&H);

        if (H0) {
            ad_csr C = csr_copy(H0);
            fx = SENT_P, fill(g, n, SENT_P);
            same_status("ad_program_sparse_hessian_values",
                        ad_program_sparse_hessian_values(P, x, &fx, g, &C), AD_EBRANCH);
            all_nan("ad_program_sparse_hessian_values", "fx", &fx, 1);
            all_nan("ad_program_sparse_hessian_values", "grad", g, n);
            all_nan("ad_program_sparse_hessian_values", "val", C.val, C.nnz);
            csr_copy_free(&C);
        }
    }
    fill(y, m, SENT_P), fill(jac, n * m, SENT_P);
    same_status("ad_program_jacobian", ad_program_jacobian(P, x, y, jac), AD_EBRANCH);
    all_nan("ad_program_jacobian", "y", y, m);
    all_nan("ad_program_jacobian", "jac", jac, n * m);

    fill(y, m, SENT_P), fill(jac, m, SENT_P);
    same_status("ad_program_jvp", ad_program_jvp(P, x, v, y, jac), AD_EBRANCH);
    all_nan("ad_program_jvp", "y", y, m);
    all_nan("ad_program_jvp", "jv", jac, m);

    fill(y, m, SENT_P), fill(jac, n, SENT_P);
    same_status("ad_program_vjp", ad_program_vjp(P, x, w, y, jac), AD_EBRANCH);
    all_nan("ad_program_vjp", "y", y, m);
    all_nan("ad_program_vjp", "wj", jac, n);

    ad_csr J;
    csr_garbage(&J);
    fill(y, m, SENT_P);
    same_status("ad_program_sparse_jacobian", ad_program_sparse_jacobian(P, x, y, &J),
                AD_EBRANCH);
    all_nan("ad_program_sparse_jacobian", "y", y, m);
    assert_csr_empty(&J);
}

/* ======================================================================
 * 2b. External functions and checkpointed loops: kept as calls
 * ====================================================================== */

/* A program keeps each ad_external and ad_checkpointed_loop as a call that
 * a replay makes again: the rule (the step) runs again on the replayed
 * values, with the ctx f gave it.  The rules below are external_maps.h's
 * maps times ctx's factor, read at every call; each primal call is
 * counted (atomically: threads replay them).  An input x0 above nan_from
 * makes the primal's outputs NaN, above nan_vjp_from the vjp's first
 * cotangent. */
typedef struct ext_ctx {
    enum map k;
    double scale;
    double nan_from, nan_vjp_from;
    atomic_long primals;
} ext_ctx;

#define EXT_CTX(k) {(k), 1.0, INFINITY, INFINITY, 0}

static void ext_sizes(const ext_ctx *c, size_t n, size_t m)
{
    if (n != map_n[c->k] || m != map_m[c->k])
        abort();  /* a test's own mistake; rules may run on other threads */
}

static void ext_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    ext_ctx *c = ctx;
    ext_sizes(c, n, m);
    atomic_fetch_add(&c->primals, 1);
    map_eval(c->k, x, y);
    for (size_t j = 0; j < m; j++)
        y[j] = x[0] > c->nan_from ? NAN : c->scale * y[j];
}

static void ext_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                    const double *ybar, double *xbar)
{
    const ext_ctx *c = ctx;
    double J[MAXM * MAXN];
    (void)y;
    ext_sizes(c, n, m);
    map_jacobian(c->k, x, J);
    for (size_t j = 0; j < m; j++)
        for (size_t i = 0; i < n; i++)
            xbar[i] += c->scale * ybar[j] * J[j * n + i];
    if (x[0] > c->nan_vjp_from)
        xbar[0] = NAN;
}

static void ext_jvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                    const double *xdot, double *ydot)
{
    const ext_ctx *c = ctx;
    double J[MAXM * MAXN];
    (void)y;
    ext_sizes(c, n, m);
    map_jacobian(c->k, x, J);
    for (size_t j = 0; j < m; j++) {
        double s = 0.0;
        for (size_t i = 0; i < n; i++)
            s += J[j * n + i] * xdot[i];
        ydot[j] = c->scale * s;
    }
}

static void ext_hvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                    const double *ybar, const double *xdot, double *out)
{
    const ext_ctx *c = ctx;
    double H[MAXN * MAXN];
    (void)y;
    ext_sizes(c, n, m);
    for (size_t j = 0; j < m; j++) {
        map_hessian(c->k, x, j, H);
        for (size_t i = 0; i < n; i++) {
            double s = 0.0;
            for (size_t l = 0; l < n; l++)
                s += H[i * n + l] * xdot[l];
            out[i] += c->scale * ybar[j] * s;
        }
    }
}

static const ad_rule ext_full = {ext_primal, ext_vjp, ext_jvp, ext_hvp};
static const ad_rule ext_no_hvp = {ext_primal, ext_vjp, ext_jvp, NULL};
static const ad_rule ext_vjp_only = {ext_primal, ext_vjp, NULL, NULL};

/* A rule that uses dualrev itself (recording_rule): its value, gradient
 * and H v are those of inner_rule_f, taken by ad_gradient and ad_hvp (nested recordings,
 * made while the program, or a replay, records). */
static ad_real inner_rule_f(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    return ad_add(ad_sqnorm(n, x), ad_mul(ad_sin(x[0]), x[1]));
}

static void recording_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    double g[2];
    (void)ctx, (void)m;
    if (ad_gradient(inner_rule_f, NULL, n, x, y, g) != AD_OK)
        y[0] = NAN;
}

static void recording_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                       const double *ybar, double *xbar)
{
    double fx, g[2];
    (void)ctx, (void)m, (void)y;
    if (ad_gradient(inner_rule_f, NULL, n, x, &fx, g) != AD_OK)
        g[0] = g[1] = NAN;
    for (size_t i = 0; i < n; i++)
        xbar[i] = ybar[0] * g[i];
}

static void recording_jvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                       const double *xdot, double *ydot)
{
    double fx, g[2];
    (void)ctx, (void)m, (void)y;
    if (ad_gradient(inner_rule_f, NULL, n, x, &fx, g) != AD_OK)
        g[0] = g[1] = NAN;
    ydot[0] = g[0] * xdot[0] + g[1] * xdot[1];
}

static void recording_hvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                       const double *ybar, const double *xdot, double *out)
{
    double fx, g[2], hv[2];
    (void)ctx, (void)m, (void)y;
    if (ad_hvp(inner_rule_f, NULL, n, x, xdot, &fx, g, hv) != AD_OK)
        hv[0] = hv[1] = NAN;
    for (size_t i = 0; i < n; i++)
        out[i] = ybar[0] * hv[i];
}

static const ad_rule recording_rule = {recording_primal, recording_vjp, recording_jvp,
                                       recording_hvp};

/* Steps, of step size ctx->h (read at every call) times a factor of k,
 * so that a step replayed for the wrong k shows. */
typedef struct step_ctx {
    double h;
    ext_ctx *ext;    /* step_external's rule's ctx (map D) */
    double bad_from; /* step_bad: an ad_external with a NULL rule where s0 > bad_from */
} step_ctx;

static double step_h(const void *ctx, size_t k)
{
    const step_ctx *c = ctx;
    return c->h * (1.0 + (double)(k % 3) / 4.0);
}

/* (u, v), params (a, b): a predator-prey step, explicit Euler. */
static void step_ode(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *p,
                     size_t np, void *ctx)
{
    double h = step_h(ctx, k);
    ad_real u = s[0], v = s[1];
    (void)n, (void)np;
    next[0] = ad_add(u, ad_mul(h, ad_sub(ad_mul(p[0], ad_sin(v)), ad_mul(u, v))));
    next[1] = ad_add(v, ad_mul(h, ad_sub(ad_mul(u, p[1]), ad_tanh(v))));
}

/* Three states, no params: n-ary primitives and a selection in a step. */
static void step_plain(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *p,
                       size_t np, void *ctx)
{
    double h = step_h(ctx, k);
    (void)p, (void)np;
    ad_real sum = ad_sum(n, s);
    next[0] = ad_add(s[0], ad_mul(h, ad_cos(s[1])));
    next[1] = ad_add(s[1], ad_mul(h, ad_sub(ad_mul(s[2], 0.5), ad_mul(sum, 0.25))));
    next[2] = ad_add(s[2], ad_mul(h, ad_select_lt(s[0], s[1], ad_mul(s[0], s[1]),
                                                  ad_mul(ad_sqnorm(n, s), 0.1))));
}

/* A step that branches on its state: guards (ad_lt, ad_ge) and a branch
 * on a value.  They are the step's own recordings' (the reverse sweep's
 * replays), never the program's, and a replay runs the steps again: where
 * a step branches otherwise than at the recording, a replay still gives
 * f's numbers (no AD_EBRANCH). */
static void step_guarded(size_t k, const ad_real *s, ad_real *next, size_t n,
                         const ad_real *p, size_t np, void *ctx)
{
    double h = step_h(ctx, k);
    (void)n, (void)np;
    if (ad_lt(s[0], p[0]))
        next[0] = ad_add(s[0], ad_mul(h, ad_mul(s[1], s[1])));
    else
        next[0] = ad_sub(s[0], ad_mul(h, ad_sin(s[1])));
    next[1] = ad_ge(s[1], 0.0) ? ad_mul(s[1], 1.0 - h) : ad_add(s[1], ad_mul(h, ad_fabs(s[0])));
    if (ad_value(s[0]) > 0.5)
        next[1] = ad_add(next[1], ad_mul(h, s[0]));
}

/* A step calling an external function (map D: R^2 -> R^2). */
static void step_external(size_t k, const ad_real *s, ad_real *next, size_t n,
                          const ad_real *p, size_t np, void *ctx)
{
    const step_ctx *c = ctx;
    double h = step_h(ctx, k);
    ad_real d[2];
    (void)n, (void)np;
    status_unused(ad_external(&ext_full, c->ext, 2, s, 2, d));
    next[0] = ad_add(ad_mul(d[0], 1.0 - h), ad_mul(h, p[0]));
    next[1] = ad_mul(d[1], ad_add(1.0 - h, ad_mul(h, p[0])));
}

/* A step whose ad_external is invalid (a NULL rule) where s0 > bad_from:
 * an error met at a replay that the recording did not meet. */
static void step_bad(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *p,
                     size_t np, void *ctx)
{
    const step_ctx *c = ctx;
    double h = step_h(ctx, k);
    ad_real d[2];
    (void)n, (void)np;
    status_unused(ad_external(ad_value(s[0]) > c->bad_from ? NULL : &ext_full, c->ext, 2, s, 2, d));
    next[0] = ad_add(d[0], ad_mul(h, p[0]));
    next[1] = d[1];
}

static ext_ctx ext_A = EXT_CTX(MAP_A), ext_B = EXT_CTX(MAP_B), ext_C = EXT_CTX(MAP_C),
               ext_D = EXT_CTX(MAP_D), ext_E = EXT_CTX(MAP_E), ext_G = EXT_CTX(MAP_G),
               ext_in_step = EXT_CTX(MAP_D);
static step_ctx steps_c = {0.1, &ext_in_step, INFINITY};

/* The calls of the functions below (a replay makes none). */
static long call_f_calls;

/* An external function alone: the program's output is the call's. */
static ad_real ext_alone(const ad_real *x, size_t n, void *ctx)
{
    ad_real y[2];
    (void)n, (void)ctx;
    call_f_calls++;
    status_unused(ad_external(&ext_full, &ext_A, 3, x, 2, y));
    return y[1];
}

/* A checkpointed loop alone (revolve's choice of snapshots). */
static ad_real loop_alone(const ad_real *x, size_t n, void *ctx)
{
    ad_real s[2];
    (void)n, (void)ctx;
    call_f_calls++;
    status_unused(ad_checkpointed_loop(step_ode, &steps_c, 7, 0, 2, x, 2, x + 2, s));
    return s[0];
}

/* External functions and loops among ordinary operations and each other:
 * an external's inputs an operation's result, a primitive's, an input, a
 * constant and one value twice; an external feeding an external and a
 * loop (with a constant param), the loop's state feeding an external
 * (one of whose outputs is unused); n-ary primitives and a selection on
 * their results. */
static ad_real calls_mixed_T(const ad_real *x)
{
    ad_real u[3] = {ad_mul(x[0], x[1]), ad_sin(x[2]), x[0]}, a[2], b, c[3], s[2];
    status_unused(ad_external(&ext_full, &ext_A, 3, u, 2, a));
    ad_real w[4] = {a[0], ad_const(0.75), x[3], a[0]};
    status_unused(ad_external(&ext_full, &ext_B, 4, w, 1, &b));
    ad_real s0[2] = {a[1], ad_mul(b, 0.1)}, p[2] = {x[4], ad_const(0.5)};
    status_unused(ad_checkpointed_loop(step_ode, &steps_c, 5, 2, 2, s0, 2, p, s));
    status_unused(ad_external(&ext_full, &ext_C, 1, &s[0], 3, c));
    ad_real e[3] = {c[0], s[1], x[5]};
    ad_real t = ad_add(ad_mul(c[0], x[5]), ad_dot(3, e, e));
    t = ad_add(t, ad_select_lt(s[1], x[5], ad_mul(c[2], s[1]), ad_sum(3, e)));
    return ad_add(t, ad_mul(ad_exp(ad_mul(s[0], 0.25)), c[2]));
}

static ad_real calls_mixed(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    call_f_calls++;
    return calls_mixed_T(x);
}

/* Five outputs: a call's output, loop states (np = 0, a constant in the
 * state, one snapshot), an external of a loop's state and an input, a
 * constant, and calls_mixed. */
static void calls_vector(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    ad_real d[2], s[3], e;
    (void)n, (void)m, (void)ctx;
    call_f_calls++;
    status_unused(ad_external(&ext_full, &ext_D, 2, x, 2, d));
    y[0] = d[0];
    ad_real s0[3] = {d[1], x[2], ad_const(0.3)};
    status_unused(ad_checkpointed_loop(step_plain, &steps_c, 4, 1, 3, s0, 0, NULL, s));
    y[1] = s[0];
    ad_real ein[2] = {s[2], x[4]};
    status_unused(ad_external(&ext_full, &ext_E, 2, ein, 1, &e));
    y[2] = ad_add(ad_mul(s[1], x[3]), e);
    y[3] = ad_const(2.5);
    y[4] = calls_mixed_T(x);
}

/* A loop whose step branches (step_guarded): state (x0, x1), param x2. */
static ad_real guarded_loop(const ad_real *x, size_t n, void *ctx)
{
    ad_real s[2];
    (void)n, (void)ctx;
    call_f_calls++;
    status_unused(ad_checkpointed_loop(step_guarded, &steps_c, 6, 2, 2, x, 1, x + 2, s));
    return ad_add(s[0], ad_mul(s[1], x[2]));
}

/* A loop whose step calls an external function, then an external of the
 * loop's state. */
static ad_real loop_of_external(const ad_real *x, size_t n, void *ctx)
{
    ad_real s[2], e;
    (void)n, (void)ctx;
    call_f_calls++;
    status_unused(ad_checkpointed_loop(step_external, &steps_c, 5, 0, 2, x, 1, x + 2, s));
    status_unused(ad_external(&ext_full, &ext_E, 2, s, 1, &e));
    return ad_mul(e, ad_cos(x[1]));
}

/* A step running a loop of its own (3 steps of step_ode). */
static void step_of_loop(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *p,
                         size_t np, void *ctx)
{
    (void)k;
    status_unused(ad_checkpointed_loop(step_ode, ctx, 3, 0, n, s, np, p, next));
}

/* Loops in a loop, whose state array is both state0 and stateN. */
static ad_real loop_of_loops(const ad_real *x, size_t n, void *ctx)
{
    ad_real s[2] = {x[0], x[1]};
    (void)n, (void)ctx;
    call_f_calls++;
    status_unused(ad_checkpointed_loop(step_of_loop, &steps_c, 4, 2, 2, s, 2, x + 2, s));
    return ad_mul(s[0], ad_exp(s[1]));
}

/* A guard on an external function's output (map E: e^x0 x1, below 0
 * where x1 is): a replay where it comes out the other way is
 * AD_EBRANCH. */
static ad_real guard_on_call(const ad_real *x, size_t n, void *ctx)
{
    ad_real e;
    (void)n, (void)ctx;
    call_f_calls++;
    status_unused(ad_external(&ext_full, &ext_E, 2, x, 1, &e));
    return ad_lt(e, 0.0) ? ad_mul(e, x[0]) : ad_sin(e);
}

/* External functions whose rules lack jvp and hvp, or hvp. */
static ad_real ext_without_jvp(const ad_real *x, size_t n, void *ctx)
{
    ad_real e;
    (void)n, (void)ctx;
    call_f_calls++;
    status_unused(ad_external(&ext_vjp_only, &ext_E, 2, x, 1, &e));
    return ad_mul(e, ad_sin(x[0]));
}

static ad_real ext_without_hvp(const ad_real *x, size_t n, void *ctx)
{
    ad_real g;
    (void)n, (void)ctx;
    call_f_calls++;
    status_unused(ad_external(&ext_no_hvp, &ext_G, 3, x, 1, &g));
    return ad_add(g, ad_mul(x[0], x[1]));
}

/* An external function whose rules record (recording_rule). */
static ad_real ext_recording_rule(const ad_real *x, size_t n, void *ctx)
{
    ad_real y;
    (void)n, (void)ctx;
    call_f_calls++;
    status_unused(ad_external(&recording_rule, NULL, 2, x, 1, &y));
    return ad_mul(y, ad_cos(x[1]));
}

/* ======================================================================
 * 3. Every elementary operation
 * ====================================================================== */

/* op of both inputs, and of a constant (no operation at all). */
static ad_real unary_subject(const ad_real *x, size_t n, void *ctx)
{
    const unary_op *op = ctx;
    (void)n;
    ad_real a = op->ad(x[0]), b = op->ad(x[1]);
    ad_real c = op->ad(ad_const(0.5 * (op->lo + op->hi)));
    return ad_add(ad_mul(a, x[1]), ad_add(ad_mul(b, c), ad_neg(a)));
}

static void unary_vector(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const unary_op *op = ctx;
    (void)n, (void)m;
    y[0] = op->ad(x[0]);
    y[1] = ad_mul(op->ad(x[1]), x[0]);
    y[2] = ad_mul(y[0], op->ad(x[1]));
}

/* op of (x0, x1), (x0, b), (a, x1) and (x0, x0), a and b constants. */
static ad_real binary_subject(const ad_real *x, size_t n, void *ctx)
{
    const binary_point *p = ctx;
    const binary_op *op = p->op;
    (void)n;
    ad_real r = op->rr(x[0], x[1]), s = op->rd(x[0], p->b), t = op->dr(p->a, x[1]);
    ad_real u = op->rr(x[0], x[0]);
    return ad_add(ad_mul(r, s), ad_add(ad_mul(t, x[0]), u));
}

static void binary_vector(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const binary_point *p = ctx;
    const binary_op *op = p->op;
    (void)n, (void)m;
    y[0] = op->rr(x[0], x[1]);
    y[1] = op->rd(x[0], p->b);
    y[2] = op->dr(p->a, x[1]);
    y[3] = op->rr(x[1], x[0]);
}

static void draw_unary_point(const unary_op *op, uint64_t *rng, double *x)
{
    x[0] = draw_unary(op, rng, op->lo, op->hi);
    x[1] = draw_unary(op, rng, op->lo, op->hi);
}

/* x0 from the first argument's range, x1 from the second's, kept with
 * the constants in every form the subject calls. */
static void draw_binary_point(const binary_point *p, uint64_t *rng, double *x)
{
    const binary_op *op = p->op;
    do {
        x[0] = rng_uniform(rng, op->alo, op->ahi);
        x[1] = rng_uniform(rng, op->blo, op->bhi);
    } while (!op->keep(x[0], x[1]) || !op->keep(x[0], p->b) || !op->keep(p->a, x[1]));
}

#define OP_POINTS 150

static void test_unary_ops(void **state)
{
    (void)state;
    uint64_t rng = 101;
    for (size_t i = 0; i < N_UNARY_OPS; i++) {
        const unary_op *op = unary_op_at(i);
        subject s = {op->name, unary_subject, NULL, (void *)op, 2, 1};
        subject V = {op->name, NULL, unary_vector, (void *)op, 2, 3};
        double x0[2], x[2];
        draw_unary_point(op, &rng, x0);
        ad_program *P = record_at(&s, x0), *Q = record_at(&V, x0);
        ad_csr H0 = structure_at(&s, x0);
        compare_at(&s, P, x0, &H0, &rng);
        compare_at(&V, Q, x0, NULL, &rng);
        for (int k = 0; k < OP_POINTS; k++) {
            draw_unary_point(op, &rng, x);
            compare_at(&s, P, x, &H0, &rng);
            compare_at(&V, Q, x, NULL, &rng);
        }
        csr_copy_free(&H0);
        ad_program_free(P);
        ad_program_free(Q);
    }
}

static void test_binary_ops(void **state)
{
    (void)state;
    uint64_t rng = 202;
    for (size_t i = 0; i < N_BINARY_OPS; i++) {
        binary_point p = {binary_op_at(i), 0.0, 0.0};
        draw_binary(&p, &rng);
        subject s = {p.op->name, binary_subject, NULL, &p, 2, 1};
        subject V = {p.op->name, NULL, binary_vector, &p, 2, 4};
        double x0[2], x[2];
        draw_binary_point(&p, &rng, x0);
        ad_program *P = record_at(&s, x0), *Q = record_at(&V, x0);
        ad_csr H0 = structure_at(&s, x0);
        for (int k = 0; k < OP_POINTS; k++) {
            draw_binary_point(&p, &rng, x);
            compare_at(&s, P, x, &H0, &rng);
            compare_at(&V, Q, x, NULL, &rng);
        }
        csr_copy_free(&H0);
        ad_program_free(P);
        ad_program_free(Q);
    }
}

/* ======================================================================
 * 4. Constants on either side, and the array primitives: one source,
 *    compiled for ad_real and for double
 * ====================================================================== */

static double sel_lt_d(double l, double r, double t, double f)
{
    return l < r ? t : f;
}

#define SELECT_LT(l, r, t, f) _Generic((l), ad_real: ad_select_lt, default: sel_lt_d)(l, r, t, f)
#define MATVEC_RR(m, n, A, x, y) \
    _Generic((x), ad_real *: ad_matvec_rr, default: ad_matvec_d)(m, n, A, x, y)

static const double MIX_C5[5] = {0.5, -1.0, 0.25, 2.0, -0.75};
static const double MIX_A[10] = {1.0, -0.5, 0.25, 2.0, 0.0, -1.5, 0.75, 1.0, -0.25, 0.5};

/* x (6 inputs: x3 > 0) and constants c[0..8).  Every line's comment says
 * which path of a recording kept as a program it takes. */
#define MIX_BODY(T)                                                                        \
    {                                                                                      \
        T a = ad_add(x[0], c[0]);             /* x + c: kept, elsewhere x's ID */          \
        T b = ad_sub(c[1], x[1]);             /* c - x */                                  \
        T m = ad_mul(c[2], x[2]);             /* c x */                                    \
        T p = ad_pow(x[3], c[3]);             /* pow, constant exponent */                 \
        T q = ad_pow(c[4], x[4]);             /* pow, constant base */                     \
        T at = ad_atan2(x[5], c[5]);          /* atan2 with a constant */                  \
        T at2 = ad_atan2(c[6], x[0]);                                                      \
        T fm = ad_fmin(x[1], c[7]);           /* fmin, fmax with a constant */             \
        T fM = ad_fmax(c[7], x[2]);                                                        \
        T hy = ad_hypot(x[3], 1.5);                                                        \
        T dv = ad_div(2.0, ad_add(x[2], 4.0));                                             \
        T sh = ad_sub(x[4], 0.75);            /* x - c */                                  \
        T ab = ad_fabs(sh);                                                                \
        T ys[4] = {x[0], AD_CONST(T, 2.0), x[1], AD_CONST(T, -1.0)};                       \
        const T xs[4] = {AD_CONST(T, 1.5), x[2], AD_CONST(T, -0.5), AD_CONST(T, 3.0)};     \
        ad_axpy(4, 0.75, xs, ys);             /* constant x, constant y, both */           \
        T arr[5] = {a, AD_CONST(T, 0.5), b, m, AD_CONST(T, -1.25)};                        \
        T s = ad_sum(5, arr);                 /* constant elements among active ones */    \
        T d1 = ad_dot(4, arr, ys);                                                         \
        T d2 = ad_dot(5, arr, arr);           /* an array with itself: a squared norm */   \
        T d3 = ad_dot(5, arr, MIX_C5);        /* a constant array either side */           \
        T d4 = ad_dot(5, MIX_C5, arr);                                                     \
        T sq = ad_sqnorm(4, ys);                                                           \
        T mv[2], mw[2];                                                                    \
        ad_matvec(2, 5, MIX_A, arr, mv);                                                   \
        const T Ar[6] = {x[0], AD_CONST(T, 0.25), x[1], x[2], AD_CONST(T, -0.5), x[3]};    \
        MATVEC_RR(2, 3, Ar, arr, mw);                                                      \
        T pr = ad_prod(5, arr);                                                            \
        T ls = ad_logsumexp(5, arr);                                                       \
        const T cs[3] = {AD_CONST(T, 1.0), AD_CONST(T, 2.0), AD_CONST(T, 4.0)};            \
        T sc = ad_sum(3, cs);                 /* constants only: a constant */             \
        T cp = ad_prod(3, cs);                                                             \
        T sel = SELECT_LT(x[0], x[1], ad_mul(x[0], x[2]), ad_sub(x[1], 1.0));              \
        T r = ad_add(ad_mul(a, b), ad_mul(m, p));                                          \
        r = ad_add(r, ad_mul(q, at));                                                      \
        r = ad_add(r, ad_mul(at2, fm));                                                    \
        r = ad_add(r, ad_mul(fM, hy));                                                     \
        r = ad_add(r, ad_sub(dv, ab));                                                     \
        r = ad_add(r, ad_mul(ys[0], ys[1]));                                               \
        r = ad_add(r, ad_add(ys[2], ys[3]));                                               \
        r = ad_add(r, ad_mul(s, d1));                                                      \
        r = ad_add(r, ad_sub(d2, ad_mul(d3, d4)));                                         \
        r = ad_add(r, ad_mul(sq, 0.125));                                                  \
        r = ad_add(r, ad_mul(mv[0], mv[1]));                                               \
        r = ad_add(r, ad_add(mw[0], ad_neg(mw[1])));                                       \
        r = ad_add(r, ad_add(ad_mul(pr, 0.5), ls));                                        \
        r = ad_add(r, ad_mul(ad_add(sc, cp), x[5]));                                       \
        return ad_add(r, ad_mul(sel, 3.0));                                                \
    }

static ad_real mix_T(const ad_real *x, const double *c) MIX_BODY(ad_real)
static double mix_d(const double *x, const double *c) MIX_BODY(double)

typedef struct mix_ctx {
    double c[8];
    long calls;
} mix_ctx;

#define MIX_CTX {{1.25, 0.5, 2.5, 2.5, 1.7, 0.75, -0.3, 0.2}, 0}

static ad_real mix_r(const ad_real *x, size_t n, void *ctx)
{
    mix_ctx *c = ctx;
    (void)n;
    c->calls++;
    return mix_T(x, c->c);
}

/* Five outputs: the mixed function, an input, a constant, x + c times an
 * input, and a selection of two constants on an active condition (a
 * record in the program, a constant elsewhere). */
static void mix_vector(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    mix_ctx *c = ctx;
    (void)n, (void)m;
    c->calls++;
    y[0] = mix_T(x, c->c);
    y[1] = x[2];
    y[2] = ad_const(3.5);
    y[3] = ad_mul(ad_add(x[0], 1.0), x[5]);
    y[4] = ad_select_lt(x[0], ad_const(0.0), ad_const(1.0), ad_const(2.0));
}

static void mix_point(uint64_t *rng, double *x)
{
    fill_uniform(rng, x, 6, -2.0, 2.0);
    x[3] = rng_uniform(rng, 0.2, 2.0);
}

/* A point whose difference stencils cross none of the kinks. */
static void mix_smooth_point(uint64_t *rng, const double *c, double *x)
{
    do
        mix_point(rng, x);
    while (fabs(x[1] - c[7]) < 0.05 || fabs(x[2] - c[7]) < 0.05 || fabs(x[0] - x[1]) < 0.05 ||
           fabs(x[4] - 0.75) < 0.05);
}

#define MIX_POINTS 300

static void test_mixed_constants(void **state)
{
    (void)state;
    uint64_t rng = 303;
    mix_ctx c = MIX_CTX, cv = MIX_CTX;
    subject s = {"mixed", mix_r, NULL, &c, 6, 1}, V = {"mixed vector", NULL, mix_vector, &cv, 6, 5};
    double x0[6], x[6];
    mix_point(&rng, x0);
    ad_program *P = record_at(&s, x0), *Q = record_at(&V, x0);
    ad_csr H0 = structure_at(&s, x0);
    for (int k = 0; k < MIX_POINTS; k++) {
        mix_point(&rng, x);
        compare_at(&s, P, x, &H0, &rng);
        compare_at(&V, Q, x, NULL, &rng);
    }
    /* Points on the kinks: x1 = c7 (fmin), x2 = c7 (fmax), x0 = x1 (the
     * selection), x4 = 0.75 (fabs at 0). */
    for (int k = 0; k < 4; k++) {
        mix_point(&rng, x);
        if (k == 0)
            x[1] = c.c[7];
        else if (k == 1)
            x[2] = c.c[7];
        else if (k == 2)
            x[0] = x[1];
        else
            x[4] = 0.75;
        compare_at(&s, P, x, &H0, &rng);
        compare_at(&V, Q, x, NULL, &rng);
    }
    csr_copy_free(&H0);
    ad_program_free(P);
    ad_program_free(Q);
}

/* The mixed function against differences of its double build. */
typedef struct mix_line_ctx {
    const double *x, *c;
    size_t i;
} mix_line_ctx;

static double mix_line(double t, const void *ctx)
{
    const mix_line_ctx *l = ctx;
    double xs[6];
    memcpy(xs, l->x, sizeof xs);
    xs[l->i] = t;
    return mix_d(xs, l->c);
}

/* The program's gradient along t -> x + t v, for a difference of it. */
typedef struct grad_line_ctx {
    ad_program *P;
    const double *x, *v;
    size_t i;
} grad_line_ctx;

static double grad_line(double t, const void *ctx)
{
    const grad_line_ctx *l = ctx;
    double xs[6], fx, g[6];
    for (int k = 0; k < 6; k++)
        xs[k] = l->x[k] + t * l->v[k];
    if (ad_program_gradient(l->P, xs, &fx, g) != AD_OK)
        return NAN;
    return g[l->i];
}

static double max_abs(const double *v, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s = fmax(s, fabs(v[i]));
    return s;
}

static void test_mixed_against_differences(void **state)
{
    (void)state;
    uint64_t rng = 404;
    mix_ctx c = MIX_CTX;
    subject s = {"mixed", mix_r, NULL, &c, 6, 1};
    double x0[6], x[6];
    mix_smooth_point(&rng, c.c, x0);
    ad_program *P = record_at(&s, x0);
    for (int k = 0; k < 40; k++) {
        mix_smooth_point(&rng, c.c, x);
        set_where("mixed", x, 6);
        double fx, g[6], hfx, hg[6], hv[6], v[6];
        fill_uniform(&rng, v, 6, -1.0, 1.0);
        assert_ok(ad_program_gradient(P, x, &fx, g));
        /* one source: the double build's value, bit for bit */
        double plain = mix_d(x, c.c);
        same_bits("ad_program_gradient", "fx (double build)", &fx, &plain, 1);
        double scale = max_abs(g, 6);
        for (size_t i = 0; i < 6; i++) {
            mix_line_ctx l = {x, c.c, i};
            fd_result d = fd_derivative(mix_line, &l, x[i]);
            assert_near(g[i], d.d, 0.0, 1e-9 * scale + d.noise);
        }
        /* H v against differences of the gradient along v */
        assert_ok(ad_program_hvp(P, x, v, &hfx, hg, hv));
        same_bits("ad_program_hvp", "grad", hg, g, 6);
        double hd[6], noise[6];
        for (size_t i = 0; i < 6; i++) {
            grad_line_ctx l = {P, x, v, i};
            fd_result d = fd_derivative(grad_line, &l, 0.0);
            hd[i] = d.d;
            noise[i] = d.noise;
        }
        double hscale = max_abs(hd, 6);
        for (size_t i = 0; i < 6; i++)
            assert_near(hv[i], hd[i], 0.0, 1e-9 * hscale + noise[i]);
    }
    ad_program_free(P);
}

/* ======================================================================
 * 5. Closed forms
 * ====================================================================== */

static ad_real f3_r(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real a = ad_mul(ad_mul(x[0], x[0]), x[1]);
    ad_real b = ad_mul(ad_sin(x[1]), x[2]);
    return ad_add(ad_add(a, b), ad_exp(ad_mul(x[0], x[2])));
}

static void f3_closed(const double *x, double *f, double *g, double *H)
{
    double e = exp(x[0] * x[2]);
    *f = x[0] * x[0] * x[1] + sin(x[1]) * x[2] + e;
    g[0] = 2 * x[0] * x[1] + x[2] * e;
    g[1] = x[0] * x[0] + cos(x[1]) * x[2];
    g[2] = sin(x[1]) + x[0] * e;
    H[0] = 2 * x[1] + x[2] * x[2] * e;
    H[1] = H[3] = 2 * x[0];
    H[2] = H[6] = e * (1 + x[0] * x[2]);
    H[4] = -sin(x[1]) * x[2];
    H[5] = H[7] = cos(x[1]);
    H[8] = x[0] * x[0] * e;
}

static void F2_r(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = ad_add(ad_mul(x[0], x[1]), ad_sin(x[2]));
    y[1] = ad_mul(ad_exp(x[0]), ad_mul(x[2], x[2]));
}

static void F2_closed(const double *x, double *y, double *J)
{
    double e = exp(x[0]);
    y[0] = x[0] * x[1] + sin(x[2]);
    y[1] = e * x[2] * x[2];
    J[0] = x[1], J[1] = x[0], J[2] = cos(x[2]);
    J[3] = e * x[2] * x[2], J[4] = 0.0, J[5] = 2 * e * x[2];
}

#define near_vec(got, want, n) \
    do {                                                                       \
        double tol_ = RTOL * max_abs((want), (n));                             \
        for (size_t i_ = 0; i_ < (n); i_++)                                    \
            assert_near((got)[i_], (want)[i_], 0.0, tol_);                     \
    } while (0)

static void test_closed_forms(void **state)
{
    (void)state;
    uint64_t rng = 505;
    double x0[3] = {0.3, -0.7, 1.1};
    ad_program *P = NULL, *Q = NULL;
    assert_ok(ad_program_record(f3_r, NULL, 3, x0, &P));
    assert_ok(ad_program_record_function(F2_r, NULL, 3, 2, x0, &Q));
    for (int k = 0; k < 30; k++) {
        double x[3], v[3], w[2];
        fill_uniform(&rng, x, 3, -1.5, 1.5);
        fill_uniform(&rng, v, 3, -1.0, 1.0);
        fill_uniform(&rng, w, 2, -1.0, 1.0);
        set_where("closed forms", x, 3);
        double f, g[3], H[9], fx, gx[3], hv[3], want_hv[3];
        f3_closed(x, &f, g, H);
        assert_ok(ad_program_value(P, x, &fx));
        assert_near(fx, f, RTOL, 0.0);
        assert_ok(ad_program_gradient(P, x, &fx, gx));
        assert_near(fx, f, RTOL, 0.0);
        near_vec(gx, g, 3);
        assert_ok(ad_program_hvp(P, x, v, &fx, gx, hv));
        for (int i = 0; i < 3; i++)
            want_hv[i] = H[3 * i] * v[0] + H[3 * i + 1] * v[1] + H[3 * i + 2] * v[2];
        near_vec(gx, g, 3);
        near_vec(hv, want_hv, 3);
        ad_csr S;
        assert_ok(ad_program_sparse_hessian(P, x, &fx, gx, &S));
        assert_csr_valid(&S, 3, 3);
        assert_int_equal(S.nnz, 6);  /* the lower triangle is dense */
        for (size_t r = 0; r < 3; r++)
            for (size_t e = S.row_ptr[r]; e < S.row_ptr[r + 1]; e++)
                assert_near(S.val[e], H[3 * r + S.col[e]], 0.0, RTOL * max_abs(H, 9));
        fill(S.val, S.nnz, 0.0);
        assert_ok(ad_program_sparse_hessian_values(P, x, &fx, gx, &S));
        for (size_t r = 0; r < 3; r++)
            for (size_t e = S.row_ptr[r]; e < S.row_ptr[r + 1]; e++)
                assert_near(S.val[e], H[3 * r + S.col[e]], 0.0, RTOL * max_abs(H, 9));
        ad_csr_free(&S);

        double y[2], J[6], yx[2], Jx[6], jv[2], wj[3], want_jv[2], want_wj[3];
        F2_closed(x, y, J);
        assert_ok(ad_program_jacobian(Q, x, yx, Jx));
        near_vec(yx, y, 2);
        near_vec(Jx, J, 6);
        assert_ok(ad_program_jvp(Q, x, v, yx, jv));
        for (int j = 0; j < 2; j++)
            want_jv[j] = J[3 * j] * v[0] + J[3 * j + 1] * v[1] + J[3 * j + 2] * v[2];
        near_vec(jv, want_jv, 2);
        assert_ok(ad_program_vjp(Q, x, w, yx, wj));
        for (int i = 0; i < 3; i++)
            want_wj[i] = w[0] * J[i] + w[1] * J[3 + i];
        near_vec(wj, want_wj, 3);
        ad_csr Js;
        assert_ok(ad_program_sparse_jacobian(Q, x, yx, &Js));
        assert_csr_valid(&Js, 2, 3);
        assert_int_equal(Js.nnz, 5);  /* y1 does not reach x1 */
        for (size_t r = 0; r < 2; r++)
            for (size_t e = Js.row_ptr[r]; e < Js.row_ptr[r + 1]; e++)
                assert_near(Js.val[e], J[3 * r + Js.col[e]], 0.0, RTOL * max_abs(J, 6));
        ad_csr_free(&Js);
    }
    ad_program_free(P);
    ad_program_free(Q);
}

/* ======================================================================
 * 6. Branch guards
 * ====================================================================== */

enum { G_LT, G_LE, G_GT, G_GE, G_KINDS };
enum { FORM_RR, FORM_RD, FORM_DR, FORMS };
static const char *const guard_names[G_KINDS][FORMS] = {
    {"ad_lt rr", "ad_lt rd", "ad_lt dr"}, {"ad_le rr", "ad_le rd", "ad_le dr"},
    {"ad_gt rr", "ad_gt rd", "ad_gt dr"}, {"ad_ge rr", "ad_ge rd", "ad_ge dr"}};

typedef struct guard_case {
    int kind, form;
    double c;
    long calls;
} guard_case;

/* Through the generic names, in each form. */
static int guard_rr(int kind, ad_real a, ad_real b)
{
    switch (kind) {
    case G_LT: return ad_lt(a, b);
    case G_LE: return ad_le(a, b);
    case G_GT: return ad_gt(a, b);
    default: return ad_ge(a, b);
    }
}

static int guard_rd(int kind, ad_real a, double b)
{
    switch (kind) {
    case G_LT: return ad_lt(a, b);
    case G_LE: return ad_le(a, b);
    case G_GT: return ad_gt(a, b);
    default: return ad_ge(a, b);
    }
}

static int guard_dr(int kind, double a, ad_real b)
{
    switch (kind) {
    case G_LT: return ad_lt(a, b);
    case G_LE: return ad_le(a, b);
    case G_GT: return ad_gt(a, b);
    default: return ad_ge(a, b);
    }
}

/* The comparison in C, the oracle. */
static int compare_plain(int kind, double a, double b)
{
    switch (kind) {
    case G_LT: return a < b;
    case G_LE: return a <= b;
    case G_GT: return a > b;
    default: return a >= b;
    }
}

static int guard_holds(const guard_case *g, const double *x)
{
    switch (g->form) {
    case FORM_RR: return compare_plain(g->kind, x[0], x[1]);
    case FORM_RD: return compare_plain(g->kind, x[0], g->c);
    default: return compare_plain(g->kind, g->c, x[1]);
    }
}

static ad_real guarded(const ad_real *x, size_t n, void *ctx)
{
    guard_case *g = ctx;
    (void)n;
    g->calls++;
    int holds = g->form == FORM_RR   ? guard_rr(g->kind, x[0], x[1])
                : g->form == FORM_RD ? guard_rd(g->kind, x[0], g->c)
                                     : guard_dr(g->kind, g->c, x[1]);
    ad_real base = ad_mul(x[0], x[1]);
    return holds ? ad_add(ad_sin(base), x[0]) : ad_mul(ad_exp(x[1]), base);
}

static void guarded_vector(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = guarded(x, n, ctx);
    y[1] = ad_mul(x[0], 2.0);
}

/* Points for a guard: random ones, then ties with the constant and each
 * other, signed zeros and NaN. */
static void guard_point(const guard_case *g, uint64_t *rng, int k, double *x)
{
    fill_uniform(rng, x, 2, -2.0, 2.0);
    switch (k % 8) {
    case 0: x[1] = x[0]; break;
    case 1: x[0] = g->c; break;
    case 2: x[1] = g->c; break;
    case 3: x[0] = 0.0, x[1] = -0.0; break;
    case 4: x[k % 16 < 8] = NAN; break;
    default: break;
    }
}

static void test_guards(void **state)
{
    (void)state;
    uint64_t rng = 606;
    for (int kind = 0; kind < G_KINDS; kind++)
        for (int form = 0; form < FORMS; form++)
            for (int outcome = 1; outcome >= 0; outcome--) {
                guard_case g = {kind, form, 0.25, 0};
                const char *name = guard_names[kind][form];
                subject s = {name, guarded, NULL, &g, 2, 1};
                subject V = {name, NULL, guarded_vector, &g, 2, 2};
                double x0[2], x[2];
                do
                    fill_uniform(&rng, x0, 2, -2.0, 2.0);
                while (guard_holds(&g, x0) != outcome);
                ad_program *P = record_at(&s, x0), *Q = record_at(&V, x0);
                ad_program_stats st;
                assert_ok(ad_program_stats_get(P, &st));
                assert_int_equal(st.guards, 1);
                ad_csr H0 = structure_at(&s, x0);
                int held = 0, flipped = 0;
                for (int k = 0; k < 160; k++) {
                    guard_point(&g, &rng, k, x);
                    if (guard_holds(&g, x) == outcome) {
                        held++;
                        compare_at(&s, P, x, &H0, &rng);
                        compare_at(&V, Q, x, NULL, &rng);
                    } else {
                        flipped++;
                        long calls = g.calls;
                        expect_branch(&s, P, x, &H0);
                        expect_branch(&V, Q, x, NULL);
                        assert_int_equal(g.calls, calls);  /* no driver called f */
                        /* and the program still works where it holds */
                        compare_at(&s, P, x0, &H0, &rng);
                    }
                }
                assert_true(held > 0 && flipped > 0);
                csr_copy_free(&H0);
                ad_program_free(P);
                ad_program_free(Q);
            }
}

/* The guards at a tie, each way: lt and gt fail there, le and ge hold. */
static void test_guard_ties(void **state)
{
    (void)state;
    uint64_t rng = 707;
    for (int kind = 0; kind < G_KINDS; kind++) {
        guard_case g = {kind, FORM_RR, 0.0, 0};
        subject s = {guard_names[kind][FORM_RR], guarded, NULL, &g, 2, 1};
        /* recorded where the strict comparison holds */
        double x0[2] = {kind == G_LT || kind == G_LE ? -1.0 : 1.0, 0.0};
        ad_program *P = record_at(&s, x0);
        double tie[2] = {0.5, 0.5}, zeros[2] = {-0.0, 0.0};
        if (kind == G_LT || kind == G_GT) {
            expect_branch(&s, P, tie, NULL);
            expect_branch(&s, P, zeros, NULL);
        } else {
            compare_at(&s, P, tie, NULL, &rng);
            compare_at(&s, P, zeros, NULL, &rng);
        }
        ad_program_free(P);
    }
}

/* A loop whose trip count depends on x: a guard per test, every one
 * recorded.  The replay holds where the count is the same. */
static ad_real grow_until(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real s = x[0];
    int k = 0;
    while (ad_lt(s, 10.0) && k < 60) {
        s = ad_mul(s, 1.5);
        k++;
    }
    return ad_add(ad_mul(s, x[1]), (double)k);
}

static int grow_count(double s)
{
    int k = 0;
    while (s < 10.0 && k < 60) {
        s *= 1.5;
        k++;
    }
    return k;
}

static void test_guard_loop(void **state)
{
    (void)state;
    uint64_t rng = 808;
    subject s = {"grow_until", grow_until, NULL, NULL, 2, 1};
    double x0[2] = {2.0, 0.5}, x[2];
    ad_program *P = record_at(&s, x0);
    ad_program_stats st;
    assert_ok(ad_program_stats_get(P, &st));
    assert_int_equal(st.guards, (size_t)grow_count(2.0) + 1);
    int held = 0, flipped = 0;
    for (int k = 0; k < 60; k++) {
        /* half of them about the recorded trip count's range [1.975, 2.963) */
        x[0] = k % 2 ? rng_uniform(&rng, 0.5, 12.0) : rng_uniform(&rng, 1.9, 3.05);
        x[1] = rng_uniform(&rng, -1.0, 1.0);
        if (grow_count(x[0]) == grow_count(x0[0])) {
            held++;
            compare_at(&s, P, x, NULL, &rng);
        } else {
            flipped++;
            expect_branch(&s, P, x, NULL);
        }
    }
    assert_true(held > 5 && flipped > 5);
    ad_program_free(P);
}

/* Guards on constants are not kept; guards on any active value are. */
static ad_real guard_mix(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    int k = 0;
    k += ad_lt(ad_const(1.0), ad_const(2.0));
    k += ad_ge(ad_const(3.0), 1.0);
    k += ad_gt(2.0, ad_const(1.0));
    k += ad_le(1.0, 2.0);
    const ad_real two[2] = {ad_const(1.0), ad_const(2.0)};
    k += ad_lt(ad_sum(2, two), 5.0);            /* a primitive of constants */
    k += ad_lt(ad_add(ad_const(1.0), 2.0), 5.0);
    k += ad_lt(ad_add(x[0], 1.0), 100.0);       /* x + c: active */
    k += ad_gt(x[1], x[0]);
    ad_real sel = ad_select_lt(x[0], x[1], ad_const(1.0), ad_const(2.0));
    k += ad_le(sel, 1.5);                       /* a selection of constants: active */
    return ad_mul(ad_add(x[0], (double)k), x[1]);
}

static void test_guard_count(void **state)
{
    (void)state;
    uint64_t rng = 909;
    subject s = {"guard_mix", guard_mix, NULL, NULL, 2, 1};
    double x0[2] = {0.5, 1.5};
    ad_program *P = record_at(&s, x0);
    ad_program_stats st;
    assert_ok(ad_program_stats_get(P, &st));
    assert_int_equal(st.guards, 3);
    assert_true(st.operations > st.guards);
    double x[2] = {0.25, 2.0}, y[2] = {1.0, 0.5};
    compare_at(&s, P, x, NULL, &rng);
    expect_branch(&s, P, y, NULL);
    ad_program_free(P);
}

/* ======================================================================
 * 7. Selections across their kinks
 * ====================================================================== */

static ad_real selections(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real s1 = ad_select_lt(x[0], x[1], ad_mul(x[0], x[2]), ad_sin(x[1]));
    ad_real s2 = ad_select_le(x[1], ad_const(0.25), ad_exp(x[2]), ad_const(2.0));
    ad_real s3 = ad_select_eq(x[0], x[2], ad_const(1.5), ad_const(-0.5));  /* both constant */
    ad_real s4 = ad_select_lt(ad_const(0.0), x[2], x[0], x[1]);
    ad_real s5 = ad_fabs(ad_sub(x[0], x[1]));
    ad_real s6 = ad_fmin(x[0], x[1]), s7 = ad_fmax(x[1], x[2]);
    ad_real s8 = ad_fmin(x[2], 0.25), s9 = ad_fmax(-0.5, x[0]);
    ad_real s10 = ad_fabs(x[2]);
    ad_real s11 = ad_select_lt(x[0], x[1], ad_const(3.0), x[2]);
    ad_real s12 = ad_select_eq(ad_const(1.0), ad_const(1.0), x[0], x[1]);  /* constant test */
    ad_real s13 = ad_select_le(x[2], x[0], ad_const(0.5), ad_const(0.5));
    ad_real r = ad_add(ad_mul(s1, s2), ad_mul(s3, x[1]));
    r = ad_add(r, ad_add(s3, 1.0));
    r = ad_add(r, ad_mul(s4, s5));
    r = ad_add(r, ad_mul(s6, s7));
    r = ad_add(r, ad_add(ad_mul(s8, s9), s10));
    r = ad_add(r, ad_mul(s11, s12));
    return ad_add(r, ad_mul(s13, ad_mul(s10, s10)));
}

static void selections_vector(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = selections(x, n, ctx);
    y[1] = ad_select_eq(x[0], x[2], ad_const(1.5), ad_const(-0.5));
    y[2] = ad_select_lt(x[0], x[1], x[2], ad_const(0.0));
}

static void test_selections(void **state)
{
    (void)state;
    static const double grid[] = {-1.0, -0.5, -0.0, 0.0, 0.25, 1.0};
    const size_t g = sizeof grid / sizeof grid[0];
    uint64_t rng = 1010;
    subject s = {"selections", selections, NULL, NULL, 3, 1};
    subject V = {"selections vector", NULL, selections_vector, NULL, 3, 3};
    const double recorded[2][3] = {{-1.0, 0.5, 1.0}, {1.0, 0.5, 1.0}};
    for (int r = 0; r < 2; r++) {
        ad_program *P = record_at(&s, recorded[r]), *Q = record_at(&V, recorded[r]);
        ad_csr H0 = structure_at(&s, recorded[r]);
        for (size_t i = 0; i < g; i++)
            for (size_t j = 0; j < g; j++)
                for (size_t k = 0; k < g; k++) {
                    double x[3] = {grid[i], grid[j], grid[k]};
                    compare_at(&s, P, x, &H0, &rng);
                    compare_at(&V, Q, x, NULL, &rng);
                }
        csr_copy_free(&H0);
        ad_program_free(P);
        ad_program_free(Q);
    }
}

/* ======================================================================
 * 8. Edge values
 * ====================================================================== */

static const double edges[] = {0.0, -0.0, DBL_TRUE_MIN, -DBL_TRUE_MIN, 0x1p-1040, DBL_MIN,
                               DBL_MAX, -DBL_MAX, INFINITY, -INFINITY, NAN, -NAN, 1.0, -1.0,
                               0.5};
#define N_EDGES (sizeof edges / sizeof edges[0])

static void test_edge_values(void **state)
{
    (void)state;
    uint64_t rng = 1111;
    for (size_t i = 0; i < N_UNARY_OPS; i++) {
        const unary_op *op = unary_op_at(i);
        subject s = {op->name, unary_subject, NULL, (void *)op, 2, 1};
        double x0[2], x[2];
        draw_unary_point(op, &rng, x0);
        ad_program *P = record_at(&s, x0);
        for (size_t e = 0; e < N_EDGES; e++) {
            x[0] = edges[e], x[1] = x0[1];
            compare_at(&s, P, x, NULL, &rng);
            x[0] = x0[0], x[1] = edges[e];
            compare_at(&s, P, x, NULL, &rng);
        }
        ad_program_free(P);
    }
    for (size_t i = 0; i < N_BINARY_OPS; i++) {
        binary_point p = {binary_op_at(i), 0.0, 0.0};
        draw_binary(&p, &rng);
        subject s = {p.op->name, binary_subject, NULL, &p, 2, 1};
        double x0[2];
        draw_binary_point(&p, &rng, x0);
        ad_program *P = record_at(&s, x0);
        for (size_t e = 0; e < N_EDGES; e++)
            for (size_t f = 0; f < N_EDGES; f++) {
                double x[2] = {edges[e], edges[(f + e) % N_EDGES]};
                compare_at(&s, P, x, NULL, &rng);
            }
        ad_program_free(P);
    }
    mix_ctx c = MIX_CTX, cv = MIX_CTX;
    subject s = {"mixed", mix_r, NULL, &c, 6, 1}, V = {"mixed vector", NULL, mix_vector, &cv, 6, 5};
    subject S = {"selections", selections, NULL, NULL, 3, 1};
    double x0[6], x[6];
    mix_point(&rng, x0);
    ad_program *P = record_at(&s, x0), *Q = record_at(&V, x0), *R = record_at(&S, x0);
    for (size_t e = 0; e < N_EDGES; e++) {
        for (size_t i = 0; i < 6; i++) {
            memcpy(x, x0, sizeof x);
            x[i] = edges[e];
            compare_at(&s, P, x, NULL, &rng);
            compare_at(&V, Q, x, NULL, &rng);
            if (i < 3)
                compare_at(&S, R, x, NULL, &rng);
        }
        fill(x, 6, edges[e]);
        compare_at(&s, P, x, NULL, &rng);
        compare_at(&V, Q, x, NULL, &rng);
        compare_at(&S, R, x, NULL, &rng);
    }
    ad_program_free(P);
    ad_program_free(Q);
    ad_program_free(R);
}

/* ======================================================================
 * 9. ctx is not read, f not called, by a replay
 * ====================================================================== */

typedef struct weights {
    double w[4];
    long calls;
} weights;

static ad_real weighted(const ad_real *x, size_t n, void *ctx)
{
    weights *c = ctx;
    (void)n;
    c->calls++;
    ad_real s = ad_const(c->w[0]);
    for (int i = 0; i < 4; i++)
        s = ad_add(s, ad_mul(c->w[i], ad_sin(ad_mul(x[i], c->w[(i + 1) % 4]))));
    const ad_real e[3] = {x[0], ad_const(c->w[2]), x[3]};
    return ad_add(s, ad_mul(ad_prod(3, e), c->w[1]));
}

static void weighted_vector(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    weights *c = ctx;
    (void)m;
    y[0] = weighted(x, n, ctx);
    y[1] = ad_add(x[1], c->w[3]);
}

static void test_ctx_not_read(void **state)
{
    (void)state;
    uint64_t rng = 1212;
    weights used = {{0.5, -1.25, 2.0, 0.75}, 0}, used_v = used;
    weights orig = used, orig_v = used;
    subject s = {"weighted", weighted, NULL, &used, 4, 1};
    subject V = {"weighted vector", NULL, weighted_vector, &used_v, 4, 2};
    double x0[4] = {0.1, 0.2, 0.3, 0.4}, x[4];
    ad_program *P = record_at(&s, x0), *Q = record_at(&V, x0);
    assert_int_equal(used.calls, 1);
    assert_int_equal(used_v.calls, 1);
    /* ctx changed after the recording: the replay keeps the old numbers */
    for (int i = 0; i < 4; i++)
        used.w[i] = used_v.w[i] = 100.0 + i;
    subject so = {"weighted (old ctx)", weighted, NULL, &orig, 4, 1};
    subject Vo = {"weighted vector (old ctx)", NULL, weighted_vector, &orig_v, 4, 2};
    ad_csr H0 = structure_at(&so, x0);
    for (int k = 0; k < 20; k++) {
        fill_uniform(&rng, x, 4, -2.0, 2.0);
        compare_at(&so, P, x, &H0, &rng);
        compare_at(&Vo, Q, x, NULL, &rng);
    }
    /* and f was never called by them */
    assert_int_equal(used.calls, 1);
    assert_int_equal(used_v.calls, 1);
    /* f with the new numbers differs: the comparison could have failed */
    double fa, fb;
    assert_ok(ad_program_value(P, x, &fa));
    double ga[4];
    assert_ok(ad_gradient(weighted, &used, 4, x, &fb, ga));
    assert_true(fa != fb);
    csr_copy_free(&H0);
    ad_program_free(P);
    ad_program_free(Q);
}

/* ======================================================================
 * 10. Many threads replaying one program
 * ====================================================================== */

/* Eight threads (workers.h has four), each replaying the same two
 * programs at the same points in its own order, against the results of
 * the main thread's replays, themselves checked against the drivers. */
#define REPLAY_THREADS 8
#define THREAD_POINTS 10
#define THREAD_ROUNDS 100

typedef struct thread_ref {
    double x[6], v[6], w[5];
    double fx, g[6], hfx, hg[6], hv[6], sfx, sg[6], y[5];
    double jy[5], jac[30], vy[5], jv[5], wy[5], wj[6];
    ad_csr H, J;
    double *hvals;  /* ad_program_sparse_hessian_values' into H's structure */
} thread_ref;

static thread_ref thread_refs[THREAD_POINTS];

typedef struct replayer {
    int index;
    atomic_int *ready;
    ad_program *P, *V;
    int rounds;
    int failures;
    char first[200];
} replayer;

static void replayer_fail(replayer *r, int round, int point, const char *what)
{
    if (r->failures++)
        return;
    snprintf(r->first, sizeof r->first, "thread %d, round %d, point %d: %s", r->index, round,
             point, what);
}

static int bits_differ(const double *a, const double *b, size_t k)
{
    for (size_t i = 0; i < k; i++)
        if (!same_number(a[i], b[i]))
            return 1;
    return 0;
}

static int csr_differs(const ad_csr *A, const ad_csr *B)
{
    return A->rows != B->rows || A->cols != B->cols || A->nnz != B->nnz ||
           memcmp(A->row_ptr, B->row_ptr, (A->rows + 1) * sizeof(size_t)) ||
           memcmp(A->col, B->col, A->nnz * sizeof(size_t)) || bits_differ(A->val, B->val, A->nnz);
}

static void *replay_body(void *arg)
{
    replayer *r = arg;
    atomic_fetch_add(r->ready, 1);
    while (atomic_load(r->ready) < REPLAY_THREADS)
        sched_yield();
    for (int round = 0; round < r->rounds; round++)
        for (int k = 0; k < THREAD_POINTS; k++) {
            int point = (k + r->index) % THREAD_POINTS;
            const thread_ref *t = &thread_refs[point];
            double fx, g[6], hv[6], y[5], jac[30], jv[5], wj[6];
            if (ad_program_value(r->P, t->x, &fx) != AD_OK || bits_differ(&fx, &t->fx, 1))
                replayer_fail(r, round, point, "ad_program_value");
            if (ad_program_gradient(r->P, t->x, &fx, g) != AD_OK || bits_differ(&fx, &t->fx, 1) ||
                bits_differ(g, t->g, 6))
                replayer_fail(r, round, point, "ad_program_gradient");
            if (ad_program_hvp(r->P, t->x, t->v, &fx, g, hv) != AD_OK ||
                bits_differ(&fx, &t->hfx, 1) || bits_differ(g, t->hg, 6) || bits_differ(hv, t->hv, 6))
                replayer_fail(r, round, point, "ad_program_hvp");
            ad_csr H;
            if (ad_program_sparse_hessian(r->P, t->x, &fx, g, &H) != AD_OK)
                replayer_fail(r, round, point, "ad_program_sparse_hessian");
            else {
                if (csr_differs(&H, &t->H) || bits_differ(&fx, &t->sfx, 1) ||
                    bits_differ(g, t->sg, 6))
                    replayer_fail(r, round, point, "ad_program_sparse_hessian: values");
                fill(H.val, H.nnz, 0.0);
                if (ad_program_sparse_hessian_values(r->P, t->x, &fx, g, &H) != AD_OK ||
                    bits_differ(H.val, t->hvals, H.nnz))
                    replayer_fail(r, round, point, "ad_program_sparse_hessian_values");
                ad_csr_free(&H);
            }
            if (ad_program_jacobian(r->V, t->x, y, jac) != AD_OK || bits_differ(y, t->jy, 5) ||
                bits_differ(jac, t->jac, 30))
                replayer_fail(r, round, point, "ad_program_jacobian");
            if (ad_program_jvp(r->V, t->x, t->v, y, jv) != AD_OK || bits_differ(y, t->vy, 5) ||
                bits_differ(jv, t->jv, 5))
                replayer_fail(r, round, point, "ad_program_jvp");
            if (ad_program_vjp(r->V, t->x, t->w, y, wj) != AD_OK || bits_differ(y, t->wy, 5) ||
                bits_differ(wj, t->wj, 6))
                replayer_fail(r, round, point, "ad_program_vjp");
            ad_csr J;
            if (ad_program_sparse_jacobian(r->V, t->x, y, &J) != AD_OK)
                replayer_fail(r, round, point, "ad_program_sparse_jacobian");
            else {
                if (csr_differs(&J, &t->J) || bits_differ(y, t->jy, 5))
                    replayer_fail(r, round, point, "ad_program_sparse_jacobian: values");
                ad_csr_free(&J);
            }
        }
    return NULL;
}

/* The references: the main thread's replays of the scalar program P of s
 * and the vector one Q of V at THREAD_POINTS points drawn by draw,
 * themselves checked against the drivers. */
static void thread_refs_at(const subject *s, const subject *V, ad_program *P, ad_program *Q,
                           void (*draw)(uint64_t *, double *), uint64_t *rng)
{
    for (int k = 0; k < THREAD_POINTS; k++) {
        thread_ref *t = &thread_refs[k];
        draw(rng, t->x);
        fill_uniform(rng, t->v, 6, -1.0, 1.0);
        fill_uniform(rng, t->w, 5, -1.0, 1.0);
        compare_at(s, P, t->x, NULL, rng);
        compare_at(V, Q, t->x, NULL, rng);
        assert_ok(ad_program_gradient(P, t->x, &t->fx, t->g));
        assert_ok(ad_program_hvp(P, t->x, t->v, &t->hfx, t->hg, t->hv));
        assert_ok(ad_program_sparse_hessian(P, t->x, &t->sfx, t->sg, &t->H));
        t->hvals = xmalloc(t->H.nnz * sizeof(double));
        {
            double hfx, hg[6];
            ad_csr C = csr_copy(&t->H);
            assert_ok(ad_program_sparse_hessian_values(P, t->x, &hfx, hg, &C));
            memcpy(t->hvals, C.val, C.nnz * sizeof(double));
            csr_copy_free(&C);
        }
        assert_ok(ad_program_jacobian(Q, t->x, t->jy, t->jac));
        assert_ok(ad_program_jvp(Q, t->x, t->v, t->vy, t->jv));
        assert_ok(ad_program_vjp(Q, t->x, t->w, t->wy, t->wj));
        assert_ok(ad_program_sparse_jacobian(Q, t->x, t->y, &t->J));
    }
}

/* REPLAY_THREADS threads replaying P and Q `rounds` times at the
 * references' points: the same bits. */
static void threads_replay(ad_program *P, ad_program *Q, int rounds)
{
    static replayer r[REPLAY_THREADS];
    pthread_t th[REPLAY_THREADS];
    atomic_int ready = 0;
    for (int i = 0; i < REPLAY_THREADS; i++) {
        r[i] = (replayer){i, &ready, P, Q, rounds, 0, ""};
        assert_int_equal(pthread_create(&th[i], NULL, replay_body, &r[i]), 0);
    }
    for (int i = 0; i < REPLAY_THREADS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < REPLAY_THREADS; i++) {
        if (r[i].failures)
            print_error("%d failures, first: %s\n", r[i].failures, r[i].first);
        assert_int_equal(r[i].failures, 0);
    }
    for (int k = 0; k < THREAD_POINTS; k++) {
        ad_csr_free(&thread_refs[k].H);
        ad_csr_free(&thread_refs[k].J);
        free(thread_refs[k].hvals);
    }
}

static void test_threads(void **state)
{
    (void)state;
    uint64_t rng = 1313;
    mix_ctx c = MIX_CTX, cv = MIX_CTX;
    subject s = {"mixed", mix_r, NULL, &c, 6, 1}, V = {"mixed vector", NULL, mix_vector, &cv, 6, 5};
    double x0[6];
    mix_point(&rng, x0);
    ad_program *P = record_at(&s, x0), *Q = record_at(&V, x0);
    thread_refs_at(&s, &V, P, Q, mix_point, &rng);
    long calls = c.calls, calls_v = cv.calls;
    threads_replay(P, Q, THREAD_ROUNDS);
    assert_int_equal(c.calls, calls);
    assert_int_equal(cv.calls, calls_v);
    ad_program_free(P);
    ad_program_free(Q);
}

/* ======================================================================
 * 11. ad_program_evaluate
 * ====================================================================== */

static ad_real evaluated(const ad_real *x, size_t n, void *ctx)
{
    long *calls = ctx;
    ++*calls;
    ad_real r = ad_lt(x[0], 1.0) ? ad_mul(ad_sin(x[0]), x[1]) : ad_add(ad_exp(x[1]), x[0]);
    for (size_t i = 2; i < n; i++)
        r = ad_add(r, ad_mul(x[i], x[i]));
    return r;
}

static void prim_double(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    (void)ctx, (void)n, (void)m;
    y[0] = 2.0 * x[0] * x[1];
}

static void vjp_double(void *ctx, size_t n, const double *x, size_t m, const double *y,
                       const double *ybar, double *xbar)
{
    (void)ctx, (void)n, (void)m, (void)y;
    xbar[0] = 2.0 * x[1] * ybar[0];
    xbar[1] = 2.0 * x[0] * ybar[0];
}

static const ad_rule double_rule = {prim_double, vjp_double, NULL, NULL};

/* A recorded matrix (ad_mat_record): no program keeps it. */
static ad_real with_matrix(const ad_real *x, size_t n, void *ctx)
{
    long *calls = ctx;
    ad_mat M;
    ad_real A[4] = {x[0], x[1], ad_mul(x[1], 2.0), x[0]}, y[2];
    (void)n;
    ++*calls;
    if (ad_mat_record(2, 2, A, &M) != AD_OK)
        return ad_const(NAN);
    ad_mat_vec_rr(&M, x, y);
    return ad_add(ad_sin(y[0]), ad_mul(y[1], x[0]));
}

/* An external function and a checkpointed loop: kept as calls. */
static ad_real with_calls(const ad_real *x, size_t n, void *ctx)
{
    long *calls = ctx;
    ad_real e, s[2];
    (void)n;
    ++*calls;
    status_unused(ad_external(&ext_full, &ext_E, 2, x, 1, &e));
    ad_real s0[2] = {e, x[1]};
    status_unused(ad_checkpointed_loop(step_ode, &steps_c, 3, 0, 2, s0, 2, x, s));
    return ad_add(s[0], ad_mul(s[1], x[0]));
}

/* evaluate at x: the bits of ad_gradient (and its value alone), f called
 * `want_calls` more times. */
static void evaluate_as_gradient(ad_program **P, ad_objective f, long *calls, size_t n,
                                 const double *x, long want_calls)
{
    long ref_calls = 0, before = *calls;
    double fx = SENT_P, g[NMAX], fd = SENT_D, gd[NMAX];
    fill(g, n, SENT_P);
    set_where("ad_program_evaluate", x, n);
    same_status("ad_program_evaluate", ad_program_evaluate(P, f, calls, n, x, &fx, g), AD_OK);
    assert_int_equal(*calls - before, want_calls);
    assert_ok(ad_gradient(f, &ref_calls, n, x, &fd, gd));
    same_bits("ad_program_evaluate", "fx", &fx, &fd, 1);
    same_bits("ad_program_evaluate", "grad", g, gd, n);
    /* the value alone, with no gradient */
    before = *calls;
    fx = SENT_P;
    same_status("ad_program_evaluate", ad_program_evaluate(P, f, calls, n, x, &fx, NULL), AD_OK);
    same_bits("ad_program_evaluate (value)", "fx", &fx, &fd, 1);
    assert_true(*calls - before <= 1);
}

static void test_evaluate(void **state)
{
    (void)state;
    uint64_t rng = 1414;
    long calls = 0;
    ad_program *P = NULL;
    double x[3] = {0.5, 0.25, 0.0};
    /* first use: recorded (one call), then replayed */
    evaluate_as_gradient(&P, evaluated, &calls, 2, x, 1);
    assert_non_null(P);
    ad_program *first = P;
    for (int k = 0; k < 10; k++) {
        x[0] = rng_uniform(&rng, -2.0, 0.99);
        x[1] = rng_uniform(&rng, -2.0, 2.0);
        evaluate_as_gradient(&P, evaluated, &calls, 2, x, 0);
    }
    assert_int_equal(calls, 1);
    assert_ptr_equal(P, first);
    /* the guard flips: recorded again there, once */
    x[0] = 2.0;
    evaluate_as_gradient(&P, evaluated, &calls, 2, x, 1);
    assert_int_equal(calls, 2);
    x[0] = 3.0;
    evaluate_as_gradient(&P, evaluated, &calls, 2, x, 0);
    assert_int_equal(calls, 2);
    /* a flip met by a value-only evaluation records too */
    double fx, fd, gd[2];
    long ref = 0;
    x[0] = -1.0;
    assert_ok(ad_program_evaluate(&P, evaluated, &calls, 2, x, &fx, NULL));
    assert_int_equal(calls, 3);
    assert_ok(ad_gradient(evaluated, &ref, 2, x, &fd, gd));
    assert_same(fx, fd);
    x[0] = -0.5;
    evaluate_as_gradient(&P, evaluated, &calls, 2, x, 0);
    /* another n: recorded again */
    x[2] = 0.75;
    evaluate_as_gradient(&P, evaluated, &calls, 3, x, 1);
    ad_program_stats st;
    assert_ok(ad_program_stats_get(P, &st));
    assert_int_equal(st.inputs, 3);
    ad_program_free(P);

    /* a function a program cannot keep: ad_gradient every time */
    calls = 0;
    P = NULL;
    double y[2] = {0.5, -0.25};
    assert_ok(ad_program_evaluate(&P, with_matrix, &calls, 2, y, &fx, gd));
    double fr, gr[2];
    long rc = 0;
    assert_ok(ad_gradient(with_matrix, &rc, 2, y, &fr, gr));
    assert_same(fx, fr);
    assert_same(gd[0], gr[0]);
    assert_same(gd[1], gr[1]);
    long after_first = calls;
    assert_true(after_first >= 1 && after_first <= 2);
    for (int k = 0; k < 5; k++) {
        y[0] = rng_uniform(&rng, -1.0, 1.0);
        y[1] = rng_uniform(&rng, -1.0, 1.0);
        evaluate_as_gradient(&P, with_matrix, &calls, 2, y, 1);
    }
    /* once f is known to be unkeepable, no recording is tried again */
    assert_int_equal(calls, after_first + 5 * 2);
    if (P) {
        /* the marker is no program to replay (docs/api.md: AD_ENOTSUP) */
        double f2 = SENT_P, g2[2] = {SENT_P, SENT_P};
        assert_int_equal(ad_program_gradient(P, y, &f2, g2), AD_ENOTSUP);
        assert_nan(f2);
        f2 = SENT_P;
        assert_int_equal(ad_program_value(P, y, &f2), AD_ENOTSUP);
    }
    ad_program_free(P);

    /* external functions and loops are kept (as calls): recorded once,
     * then replayed, their rules run again at every evaluation */
    calls = 0;
    P = NULL;
    y[0] = 0.5, y[1] = -0.25;
    evaluate_as_gradient(&P, with_calls, &calls, 2, y, 1);
    long primals = atomic_load(&ext_E.primals);
    for (int k = 0; k < 5; k++) {
        y[0] = rng_uniform(&rng, -1.0, 1.0);
        y[1] = rng_uniform(&rng, -1.0, 1.0);
        long before = atomic_load(&ext_E.primals);
        assert_ok(ad_program_evaluate(&P, with_calls, &calls, 2, y, &fx, gd));
        assert_true(atomic_load(&ext_E.primals) > before);
        evaluate_as_gradient(&P, with_calls, &calls, 2, y, 0);
    }
    assert_int_equal(calls, 1);
    assert_true(atomic_load(&ext_E.primals) > primals + 5);
    ad_program_stats st2;
    assert_ok(ad_program_stats_get(P, &st2));
    assert_int_equal(st2.operations, 4);  /* the two calls, a mul and an add */
    ad_program_free(P);
}

/* ======================================================================
 * 12. Statistics
 * ====================================================================== */

static ad_real small_f(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real t = ad_lt(x[0], 1.0) ? ad_mul(x[0], x[1]) : x[1];
    return ad_add(t, ad_sin(x[0]));
}

static ad_real constant_f(const ad_real *x, size_t n, void *ctx)
{
    (void)x, (void)n, (void)ctx;
    return ad_const(3.25);
}

static void test_stats(void **state)
{
    (void)state;
    uint64_t rng = 1515;
    double x[6] = {0.5, 0.7, 0.1, 0.9, 0.3, -0.2};
    ad_program *P = NULL;
    ad_program_stats st;
    assert_ok(ad_program_record(small_f, NULL, 2, x, &P));
    assert_ok(ad_program_stats_get(P, &st));
    assert_int_equal(st.inputs, 2);
    assert_int_equal(st.outputs, 1);
    assert_int_equal(st.operations, 4);  /* lt, mul, sin, add */
    assert_int_equal(st.guards, 1);
    assert_true(st.bytes >= 4 * st.operations);
    assert_true(st.replay_bytes >= st.inputs * sizeof(double));
    ad_program_free(P);

    mix_ctx c = MIX_CTX;
    assert_ok(ad_program_record_function(mix_vector, &c, 6, 5, x, &P));
    assert_ok(ad_program_stats_get(P, &st));
    assert_int_equal(st.inputs, 6);
    assert_int_equal(st.outputs, 5);
    assert_int_equal(st.guards, 0);
    assert_true(st.operations >= 40);
    assert_true(st.bytes >= 4 * st.operations);
    assert_true(st.replay_bytes >= st.inputs * sizeof(double));
    ad_program_free(P);

    /* nothing active: no operations, and the drivers' constant results */
    subject s = {"constant", constant_f, NULL, NULL, 2, 1};
    P = record_at(&s, x);
    assert_ok(ad_program_stats_get(P, &st));
    assert_int_equal(st.operations, 0);
    assert_int_equal(st.guards, 0);
    compare_at(&s, P, x + 2, NULL, &rng);
    ad_program_free(P);

    /* no inputs */
    double fx = 0.0;
    assert_ok(ad_program_record(constant_f, NULL, 0, NULL, &P));
    assert_ok(ad_program_value(P, NULL, &fx));
    assert_same(fx, 3.25);
    fx = 0.0;
    assert_ok(ad_program_gradient(P, NULL, &fx, NULL));
    assert_same(fx, 3.25);
    ad_program_free(P);

    /* a call, of an external function or a loop, is one operation; a
     * step's guards are not the program's */
    double z[4] = {0.5, -0.25, 0.75, 0.3};
    static const ad_objective calls_fs[] = {ext_alone, loop_alone, guarded_loop};
    static const size_t calls_n[] = {3, 4, 3}, calls_widest[] = {3 + 2, 2 + 2 + 2, 2 + 1 + 2};
    for (int i = 0; i < 3; i++) {
        assert_ok(ad_program_record(calls_fs[i], NULL, calls_n[i], z, &P));
        assert_ok(ad_program_stats_get(P, &st));
        assert_int_equal(st.inputs, calls_n[i]);
        assert_int_equal(st.operations, i < 2 ? 1 : 3);  /* the loop, a mul and an add */
        assert_int_equal(st.guards, 0);
        assert_true(st.bytes >= 4 * st.operations);
        assert_true(st.replay_bytes >= (calls_n[i] + calls_widest[i]) * sizeof(ad_real));
        ad_program_free(P);
    }

    assert_int_equal(ad_program_stats_get(NULL, &st), AD_EINVAL);
    assert_ok(ad_program_record(small_f, NULL, 2, x, &P));
    assert_int_equal(ad_program_stats_get(P, NULL), AD_EINVAL);
    ad_program_free(P);
    ad_program_free(NULL);
}

/* ======================================================================
 * 13. Programs inside recordings
 * ====================================================================== */

typedef struct nest_ctx {
    ad_program *P;
    mix_ctx mix;
    double X0[6], X1[6];
    ad_status rec, rep[4];
    long calls;
} nest_ctx;

/* Records the mixed function as a program (the first time), then replays
 * it at the fixed X1 in four ways, and uses the numbers as constants. */
static ad_real nest_outer(const ad_real *x, size_t n, void *ctx)
{
    nest_ctx *c = ctx;
    (void)n;
    c->calls++;
    if (!c->P)
        c->rec = ad_program_record(mix_r, &c->mix, 6, c->X0, &c->P);
    double fx, g[6], hfx, hg[6], hv[6], v[6] = {1, 0, 0, 0, 0, 0}, y, jac[6];
    c->rep[0] = ad_program_value(c->P, c->X1, &fx);
    c->rep[1] = ad_program_gradient(c->P, c->X1, &fx, g);
    c->rep[2] = ad_program_hvp(c->P, c->X1, v, &hfx, hg, hv);
    c->rep[3] = ad_program_jacobian(c->P, c->X1, &y, jac);
    ad_real r = ad_add(ad_mul(x[0], g[0]), ad_mul(x[1], fx));
    return ad_add(r, ad_mul(ad_mul(x[0], x[1]), hv[0] + jac[1]));
}

static void check_nest(const nest_ctx *c, const double *x, double fx, const double *g)
{
    mix_ctx m = MIX_CTX;
    double f1, g1[6], hf, hg[6], hv[6], v[6] = {1, 0, 0, 0, 0, 0};
    assert_ok(c->rec);
    for (int i = 0; i < 4; i++)
        assert_ok(c->rep[i]);
    scalar_call sc = {mix_r, &m};
    double y1, jac[6];
    assert_ok(ad_gradient(mix_r, &m, 6, c->X1, &f1, g1));
    assert_ok(ad_hvp(mix_r, &m, 6, c->X1, v, &hf, hg, hv));
    assert_ok(ad_jacobian(scalar_fn, &sc, 6, c->X1, 1, &y1, jac));
    double k = hv[0] + jac[1];
    double want_f = (x[0] * g1[0] + x[1] * f1) + (x[0] * x[1]) * k;
    double want_g[2] = {g1[0] + x[1] * k, f1 + x[0] * k};
    assert_same(fx, want_f);
    assert_same(g[0], want_g[0]);
    assert_same(g[1], want_g[1]);
}

static void test_inside_recordings(void **state)
{
    (void)state;
    uint64_t rng = 1616;
    nest_ctx c = {NULL, MIX_CTX, {0}, {0}, AD_EINVAL, {AD_EINVAL, AD_EINVAL, AD_EINVAL, AD_EINVAL}, 0};
    mix_point(&rng, c.X0);
    mix_point(&rng, c.X1);
    /* recorded and replayed while ad_gradient records nest_outer */
    double x[2] = {0.5, -1.5}, fx, g[2];
    assert_ok(ad_gradient(nest_outer, &c, 2, x, &fx, g));
    assert_non_null(c.P);
    check_nest(&c, x, fx, g);
    /* the program made there works anywhere */
    mix_ctx m = MIX_CTX;
    subject s = {"mixed (recorded inside)", mix_r, NULL, &m, 6, 1};
    for (int k = 0; k < 5; k++) {
        double y[6];
        mix_point(&rng, y);
        compare_at(&s, c.P, y, NULL, &rng);
    }
    ad_program_free(c.P);

    /* recorded inside an objective that is itself being recorded as a
     * program: the inner program stays out of the outer one, whose
     * replays then match nest_outer's derivatives */
    c.P = NULL;
    ad_program *Q = NULL;
    assert_ok(ad_program_record(nest_outer, &c, 2, x, &Q));
    assert_non_null(c.P);
    check_nest(&c, x, fx, g);
    ad_program_stats st;
    assert_ok(ad_program_stats_get(Q, &st));
    assert_int_equal(st.operations, 6);  /* mul, mul, add, mul, mul, add */
    subject o = {"nest_outer", nest_outer, NULL, &c, 2, 1};
    for (int k = 0; k < 5; k++) {
        double y[2];
        fill_uniform(&rng, y, 2, -2.0, 2.0);
        long calls = c.calls;
        double fq, gq[2], fo, go[2];
        assert_ok(ad_program_gradient(Q, y, &fq, gq));
        assert_int_equal(c.calls, calls);
        compare_at(&o, Q, y, NULL, &rng);
        assert_ok(ad_gradient(nest_outer, &c, 2, y, &fo, go));
        check_nest(&c, y, fq, gq);
    }
    ad_program_free(Q);
    ad_program_free(c.P);
}

/* A program recorded inside an objective from that objective's values
 * (their numbers), and a value of the enclosing recording smuggled in
 * through ctx: AD_EFOREIGN. */
typedef struct smuggle {
    ad_real outer;
    ad_status st;
    ad_program *P;
} smuggle;

static ad_real uses_outer(const ad_real *x, size_t n, void *ctx)
{
    smuggle *s = ctx;
    (void)n;
    return ad_mul(x[0], s->outer);
}

static ad_real records_inner(const ad_real *x, size_t n, void *ctx)
{
    smuggle *s = ctx;
    double at[1] = {ad_value(x[0])};
    s->outer = x[1];
    s->st = ad_program_record(uses_outer, s, 1, at, &s->P);
    (void)n;
    return ad_mul(x[0], x[1]);
}

static void test_foreign_from_enclosing(void **state)
{
    (void)state;
    smuggle s = {{0.0, 0, 0}, AD_OK, (ad_program *)&s};
    double x[2] = {1.5, 2.5}, fx, g[2];
    assert_ok(ad_gradient(records_inner, &s, 2, x, &fx, g));
    assert_int_equal(s.st, AD_EFOREIGN);
    assert_null(s.P);
}

/* ======================================================================
 * 14. Long programs
 * ====================================================================== */

#define LONG_STEPS 40000
#define LONG_SUM 3001

static ad_real long_f(const ad_real *x, size_t n, void *ctx)
{
    static ad_real terms[LONG_SUM];
    (void)ctx;
    ad_real s = x[0];
    for (int k = 0; k < LONG_STEPS; k++) {
        s = ad_add(ad_mul(s, 0.999), ad_sin(x[k % n]));
        s = ad_sub(s, 0.001);
    }
    for (int k = 0; k < LONG_SUM; k++)
        terms[k] = k % 3 ? ad_mul(x[k % n], (double)k) : ad_const((double)k);
    s = ad_add(s, ad_mul(ad_sum(LONG_SUM, terms), 1e-6));
    s = ad_add(s, ad_mul(ad_dot(LONG_SUM, terms, terms), 1e-12));
    return s;
}

static void test_long_program(void **state)
{
    (void)state;
    uint64_t rng = 1717;
    subject s = {"long", long_f, NULL, NULL, 3, 1};
    double x0[3] = {0.1, 0.2, 0.3};
    ad_program *P = record_at(&s, x0);
    ad_program_stats st;
    assert_ok(ad_program_stats_get(P, &st));
    assert_true(st.operations >= 4 * (size_t)LONG_STEPS);
    assert_true(st.bytes >= 4 * st.operations);
    for (int k = 0; k < 3; k++) {
        double x[3];
        fill_uniform(&rng, x, 3, -1.0, 1.0);
        compare_at(&s, P, x, NULL, &rng);
    }
    ad_program_free(P);
}

/* ======================================================================
 * 15. Errors
 * ====================================================================== */

static ad_real sq_f(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(ad_mul(x[0], x[0]), x[1]);
}

static void sq_F(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = ad_mul(x[0], x[1]);
    y[1] = ad_exp(x[0]);
}

static void test_null_arguments(void **state)
{
    (void)state;
    double x[2] = {0.5, 0.25}, v[2] = {1.0, -1.0}, w[2] = {0.5, 2.0};
    double fx, g[2], hv[2], y[2], jac[4];
    ad_program *P = (ad_program *)x;
    set_where("NULL arguments", x, 2);

    /* recording: *P NULL on error */
    assert_int_equal(ad_program_record(NULL, NULL, 2, x, &P), AD_EINVAL);
    assert_null(P);
    P = (ad_program *)x;
    assert_int_equal(ad_program_record(sq_f, NULL, 2, NULL, &P), AD_EINVAL);
    assert_null(P);
    assert_int_equal(ad_program_record(sq_f, NULL, 2, x, NULL), AD_EINVAL);
    P = (ad_program *)x;
    assert_int_equal(ad_program_record_function(NULL, NULL, 2, 2, x, &P), AD_EINVAL);
    assert_null(P);
    P = (ad_program *)x;
    assert_int_equal(ad_program_record_function(sq_F, NULL, 2, 2, NULL, &P), AD_EINVAL);
    assert_null(P);
    assert_int_equal(ad_program_record_function(sq_F, NULL, 2, 2, x, NULL), AD_EINVAL);

    /* no program */
    fx = SENT_P;
    assert_int_equal(ad_program_value(NULL, x, &fx), AD_EINVAL);
    fx = SENT_P;
    assert_int_equal(ad_program_gradient(NULL, x, &fx, g), AD_EINVAL);
    assert_nan(fx);
    fx = SENT_P;
    assert_int_equal(ad_program_hvp(NULL, x, v, &fx, g, hv), AD_EINVAL);
    assert_nan(fx);
    assert_int_equal(ad_program_jacobian(NULL, x, y, jac), AD_EINVAL);
    assert_int_equal(ad_program_jvp(NULL, x, v, y, jac), AD_EINVAL);
    assert_int_equal(ad_program_vjp(NULL, x, w, y, jac), AD_EINVAL);
    ad_csr C;
    memset(&C, 0, sizeof C);
    assert_int_equal(ad_program_sparse_jacobian(NULL, x, y, &C), AD_EINVAL);
    assert_int_equal(ad_program_sparse_hessian(NULL, x, &fx, g, &C), AD_EINVAL);
    assert_int_equal(ad_program_sparse_hessian_values(NULL, x, &fx, g, &C), AD_EINVAL);

    /* a scalar program: each pointer NULL in turn, as the direct drivers
     * take it (the same status and NaN outputs) */
    ad_program *S = NULL, *V = NULL;
    assert_ok(ad_program_record(sq_f, NULL, 2, x, &S));
    assert_ok(ad_program_record_function(sq_F, NULL, 2, 2, x, &V));
    scalar_call sc = {sq_f, NULL};

    fill(y, 2, SENT_P);
    assert_int_equal(ad_program_value(S, NULL, y), AD_EINVAL);
    assert_nan(y[0]);
    assert_int_equal(ad_program_value(S, x, NULL), AD_EINVAL);
    fill(y, 2, SENT_P);
    assert_int_equal(ad_program_value(V, NULL, y), AD_EINVAL);
    all_nan("ad_program_value", "y", y, 2);

    for (int k = 0; k < 3; k++) {
        const double *xa = k == 0 ? NULL : x;
        double *fa = k == 1 ? NULL : &fx, *ga = k == 2 ? NULL : g;
        double fd = SENT_D, gd[2] = {SENT_D, SENT_D}, hd[2] = {SENT_D, SENT_D};
        double *fda = k == 1 ? NULL : &fd, *gda = k == 2 ? NULL : gd;
        fx = SENT_P, fill(g, 2, SENT_P), fill(hv, 2, SENT_P);
        same_status("ad_program_gradient (NULL)", ad_program_gradient(S, xa, fa, ga),
                    ad_gradient(sq_f, NULL, 2, xa, fda, gda));
        same_bits("ad_program_gradient (NULL)", "fx", &fx, &fd, fa ? 1 : 0);
        same_bits("ad_program_gradient (NULL)", "grad", g, gd, ga ? 2 : 0);
        fx = SENT_P, fill(g, 2, SENT_P), fd = SENT_D, fill(gd, 2, SENT_D);
        same_status("ad_program_hvp (NULL)", ad_program_hvp(S, xa, v, fa, ga, hv),
                    ad_hvp(sq_f, NULL, 2, xa, v, fda, gda, hd));
        same_bits("ad_program_hvp (NULL)", "fx", &fx, &fd, fa ? 1 : 0);
        same_bits("ad_program_hvp (NULL)", "grad", g, gd, ga ? 2 : 0);
        same_bits("ad_program_hvp (NULL)", "hv", hv, hd, 2);
        assert_nan(hv[0]);
    }
    {
        double fd = SENT_D, gd[2] = {SENT_D, SENT_D}, hd[2] = {SENT_D, SENT_D};
        fx = SENT_P, fill(g, 2, SENT_P), fill(hv, 2, SENT_P);
        same_status("ad_program_hvp (v NULL)", ad_program_hvp(S, x, NULL, &fx, g, hv),
                    ad_hvp(sq_f, NULL, 2, x, NULL, &fd, gd, hd));
        same_bits("ad_program_hvp (v NULL)", "fx", &fx, &fd, 1);
        same_bits("ad_program_hvp (v NULL)", "grad", g, gd, 2);
        same_bits("ad_program_hvp (v NULL)", "hv", hv, hd, 2);
        assert_nan(fx);
        fx = SENT_P, fd = SENT_D;
        same_status("ad_program_hvp (hv NULL)", ad_program_hvp(S, x, v, &fx, g, NULL),
                    ad_hvp(sq_f, NULL, 2, x, v, &fd, gd, NULL));
        same_bits("ad_program_hvp (hv NULL)", "fx", &fx, &fd, 1);
        assert_nan(fx);
    }
    {
        double fd = SENT_D, gd[2] = {SENT_D, SENT_D};
        fx = SENT_P, fill(g, 2, SENT_P);
        same_status("ad_program_sparse_hessian (H NULL)",
                    ad_program_sparse_hessian(S, x, &fx, g, NULL),
                    ad_sparse_hessian(sq_f, NULL, 2, x, &fd, gd, NULL));
        same_bits("ad_program_sparse_hessian (H NULL)", "fx", &fx, &fd, 1);
        same_bits("ad_program_sparse_hessian (H NULL)", "grad", g, gd, 2);
        assert_nan(fx);
        ad_csr Hp, Hd;
        memset(&Hp, 0, sizeof Hp), memset(&Hd, 0, sizeof Hd);
        fx = SENT_P, fd = SENT_D, fill(g, 2, SENT_P), fill(gd, 2, SENT_D);
        same_status("ad_program_sparse_hessian_values (no structure)",
                    ad_program_sparse_hessian_values(S, x, &fx, g, &Hp),
                    ad_sparse_hessian_values(sq_f, NULL, 2, x, &fd, gd, &Hd));
        same_bits("ad_program_sparse_hessian_values (no structure)", "fx", &fx, &fd, 1);
        same_bits("ad_program_sparse_hessian_values (no structure)", "grad", g, gd, 2);
        assert_nan(fx);
        csr_garbage(&Hp);
        fx = SENT_P, fill(g, 2, SENT_P);
        assert_int_equal(ad_program_sparse_hessian(S, NULL, &fx, g, &Hp), AD_EINVAL);
        assert_nan(fx);
        assert_csr_empty(&Hp);
    }
    /* the vector drivers, a pointer NULL in turn */
    for (int k = 0; k < 3; k++) {
        const double *xa = k == 0 ? NULL : x;
        double *ya = k == 1 ? NULL : y, *ja = k == 2 ? NULL : jac;
        double yd[2] = {SENT_D, SENT_D}, jd[4] = {SENT_D, SENT_D, SENT_D, SENT_D};
        double *yda = k == 1 ? NULL : yd, *jda = k == 2 ? NULL : jd;
        fill(y, 2, SENT_P), fill(jac, 4, SENT_P);
        same_status("ad_program_jacobian (NULL)", ad_program_jacobian(V, xa, ya, ja),
                    ad_jacobian(sq_F, NULL, 2, xa, 2, yda, jda));
        same_bits("ad_program_jacobian (NULL)", "y", y, yd, ya ? 2 : 0);
        same_bits("ad_program_jacobian (NULL)", "jac", jac, jd, ja ? 4 : 0);
        fill(y, 2, SENT_P), fill(jac, 4, SENT_P), fill(yd, 2, SENT_D), fill(jd, 4, SENT_D);
        same_status("ad_program_jvp (NULL)", ad_program_jvp(V, xa, v, ya, ja),
                    ad_jvp(sq_F, NULL, 2, xa, v, 2, yda, jda));
        same_bits("ad_program_jvp (NULL)", "y", y, yd, ya ? 2 : 0);
        same_bits("ad_program_jvp (NULL)", "jv", jac, jd, ja ? 2 : 0);
        fill(y, 2, SENT_P), fill(jac, 4, SENT_P), fill(yd, 2, SENT_D), fill(jd, 4, SENT_D);
        same_status("ad_program_vjp (NULL)", ad_program_vjp(V, xa, w, ya, ja),
                    ad_vjp(sq_F, NULL, 2, xa, 2, w, yda, jda));
        same_bits("ad_program_vjp (NULL)", "y", y, yd, ya ? 2 : 0);
        same_bits("ad_program_vjp (NULL)", "wj", jac, jd, ja ? 2 : 0);
        ad_csr Jp, Jd;
        csr_garbage(&Jp), csr_garbage(&Jd);
        fill(y, 2, SENT_P), fill(yd, 2, SENT_D);
        same_status("ad_program_sparse_jacobian (NULL)", ad_program_sparse_jacobian(V, xa, ya, &Jp),
                    ad_sparse_jacobian(sq_F, NULL, 2, xa, 2, yda, &Jd));
        same_bits("ad_program_sparse_jacobian (NULL)", "y", y, yd, ya ? 2 : 0);
        if (k < 2) {
            assert_csr_empty(&Jp);
            assert_csr_empty(&Jd);
        } else {
            ad_csr_free(&Jp);
            ad_csr_free(&Jd);
        }
    }
    {
        double yd[2] = {SENT_D, SENT_D}, jd[2] = {SENT_D, SENT_D};
        fill(y, 2, SENT_P), fill(jac, 4, SENT_P);
        same_status("ad_program_jvp (v NULL)", ad_program_jvp(V, x, NULL, y, jac),
                    ad_jvp(sq_F, NULL, 2, x, NULL, 2, yd, jd));
        same_bits("ad_program_jvp (v NULL)", "y", y, yd, 2);
        same_bits("ad_program_jvp (v NULL)", "jv", jac, jd, 2);
        assert_nan(y[0]);
        fill(y, 2, SENT_P), fill(jac, 4, SENT_P), fill(yd, 2, SENT_D), fill(jd, 2, SENT_D);
        same_status("ad_program_vjp (w NULL)", ad_program_vjp(V, x, NULL, y, jac),
                    ad_vjp(sq_F, NULL, 2, x, 2, NULL, yd, jd));
        same_bits("ad_program_vjp (w NULL)", "y", y, yd, 2);
        same_bits("ad_program_vjp (w NULL)", "wj", jac, jd, 2);
        assert_nan(y[0]);
        fill(y, 2, SENT_P), fill(yd, 2, SENT_D);
        same_status("ad_program_sparse_jacobian (J NULL)",
                    ad_program_sparse_jacobian(V, x, y, NULL),
                    ad_sparse_jacobian(sq_F, NULL, 2, x, 2, yd, NULL));
        same_bits("ad_program_sparse_jacobian (J NULL)", "y", y, yd, 2);
        assert_nan(y[0]);
    }
    /* the vector drivers on the scalar program: the direct drivers on f */
    {
        double yd[1], jd[2];
        assert_ok(ad_program_jacobian(S, x, y, jac));
        assert_ok(ad_jacobian(scalar_fn, &sc, 2, x, 1, yd, jd));
        same_bits("ad_program_jacobian (m = 1)", "y", y, yd, 1);
        same_bits("ad_program_jacobian (m = 1)", "jac", jac, jd, 2);
    }

    /* ad_program_evaluate */
    fx = SENT_P, fill(g, 2, SENT_P);
    assert_int_equal(ad_program_evaluate(NULL, sq_f, NULL, 2, x, &fx, g), AD_EINVAL);
    assert_nan(fx);
    all_nan("ad_program_evaluate", "grad", g, 2);
    ad_program *E = NULL;
    fx = SENT_P, fill(g, 2, SENT_P);
    assert_int_equal(ad_program_evaluate(&E, NULL, NULL, 2, x, &fx, g), AD_EINVAL);
    assert_nan(fx);
    all_nan("ad_program_evaluate", "grad", g, 2);
    fill(g, 2, SENT_P);
    assert_int_equal(ad_program_evaluate(&E, sq_f, NULL, 2, x, NULL, g), AD_EINVAL);
    all_nan("ad_program_evaluate", "grad", g, 2);
    fx = SENT_P;
    assert_int_equal(ad_program_evaluate(&E, sq_f, NULL, 2, NULL, &fx, g), AD_EINVAL);
    assert_nan(fx);
    assert_null(E);

    ad_program_free(S);
    ad_program_free(V);
}

/* The scalar drivers on a program of two outputs: AD_EINVAL, NaN. */
static void test_scalar_drivers_on_vector_programs(void **state)
{
    (void)state;
    double x[2] = {0.5, 0.25}, v[2] = {1.0, 0.5}, fx, g[2], hv[2];
    ad_program *V = NULL;
    assert_ok(ad_program_record_function(sq_F, NULL, 2, 2, x, &V));
    set_where("m = 2", x, 2);
    fx = SENT_P, fill(g, 2, SENT_P);
    assert_int_equal(ad_program_gradient(V, x, &fx, g), AD_EINVAL);
    assert_nan(fx);
    all_nan("ad_program_gradient", "grad", g, 2);
    fx = SENT_P, fill(g, 2, SENT_P), fill(hv, 2, SENT_P);
    assert_int_equal(ad_program_hvp(V, x, v, &fx, g, hv), AD_EINVAL);
    assert_nan(fx);
    all_nan("ad_program_hvp", "grad", g, 2);
    all_nan("ad_program_hvp", "hv", hv, 2);
    ad_csr H;
    memset(&H, 0, sizeof H);
    fx = SENT_P, fill(g, 2, SENT_P);
    assert_int_equal(ad_program_sparse_hessian(V, x, &fx, g, &H), AD_EINVAL);
    assert_nan(fx);
    all_nan("ad_program_sparse_hessian", "grad", g, 2);
    assert_csr_empty(&H);
    /* a program of two outputs is not an objective: evaluate records f */
    long calls = 0;
    assert_ok(ad_program_evaluate(&V, evaluated, &calls, 2, x, &fx, g));
    assert_int_equal(calls, 1);
    ad_program_stats st;
    assert_ok(ad_program_stats_get(V, &st));
    assert_int_equal(st.outputs, 1);
    ad_program_free(V);
}

/* A failed early check empties the CSR, as the direct drivers do
 * (ad_sparse_hessian and ad_sparse_jacobian take H, J as outputs only), and
 * ad_sparse_hessian_values' values are NaN. */
static void test_csr_on_early_failure(void **state)
{
    (void)state;
    double x[2] = {0.5, 0.25}, fx, g[2], y[2];
    ad_program *S = NULL, *V = NULL;
    assert_ok(ad_program_record(sq_f, NULL, 2, x, &S));
    assert_ok(ad_program_record_function(sq_F, NULL, 2, 2, x, &V));
    set_where("early failure", x, 2);
    ad_csr H, J;
    /* a vector program under a scalar driver */
    csr_garbage(&H);
    assert_int_equal(ad_program_sparse_hessian(V, x, &fx, g, &H), AD_EINVAL);
    assert_csr_empty(&H);
    /* no program */
    csr_garbage(&J);
    assert_int_equal(ad_program_sparse_jacobian(NULL, x, y, &J), AD_EINVAL);
    assert_csr_empty(&J);
    csr_garbage(&H);
    assert_int_equal(ad_program_sparse_hessian(NULL, x, &fx, g, &H), AD_EINVAL);
    assert_csr_empty(&H);
    /* the replay's first allocation fails (ad_release: none is kept) */
    csr_garbage(&H);
    assert_ok(ad_release());
    ad_test_fail_alloc_after(0);
    ad_status s = ad_program_sparse_hessian(S, x, &fx, g, &H);
    ad_test_fail_alloc_after(-1);
    assert_int_equal(s, AD_ENOMEM);
    assert_csr_empty(&H);
    csr_garbage(&J);
    assert_ok(ad_release());
    ad_test_fail_alloc_after(0);
    s = ad_program_sparse_jacobian(V, x, y, &J);
    ad_test_fail_alloc_after(-1);
    assert_int_equal(s, AD_ENOMEM);
    assert_csr_empty(&J);
    /* sparse_hessian_values: NaN values on every failure */
    subject sub = {"sq_f", sq_f, NULL, NULL, 2, 1};
    ad_csr H0 = structure_at(&sub, x), C = csr_copy(&H0);
    fill(C.val, C.nnz, SENT_P);
    assert_ok(ad_release());
    ad_test_fail_alloc_after(0);
    s = ad_program_sparse_hessian_values(S, x, &fx, g, &C);
    ad_test_fail_alloc_after(-1);
    assert_int_equal(s, AD_ENOMEM);
    all_nan("ad_program_sparse_hessian_values", "val", C.val, C.nnz);
    ad_program *W = NULL;
    assert_ok(ad_program_record_function(sq_F, NULL, 2, 2, x, &W));
    fill(C.val, C.nnz, SENT_P);
    assert_int_equal(ad_program_sparse_hessian_values(W, x, &fx, g, &C), AD_EINVAL);
    all_nan("ad_program_sparse_hessian_values", "val", C.val, C.nnz);
    ad_program_free(W);
    csr_copy_free(&C);
    csr_copy_free(&H0);
    ad_program_free(S);
    ad_program_free(V);
}

/* ---- what a program cannot keep: AD_ENOTSUP, *P NULL ---- */

static ad_real uses_external(const ad_real *x, size_t n, void *ctx)
{
    ad_real y;
    (void)n, (void)ctx;
    status_unused(ad_external(&double_rule, NULL, 2, x, 1, &y));
    return ad_mul(y, x[0]);
}

static ad_real uses_recorded_matrix(const ad_real *x, size_t n, void *ctx)
{
    ad_mat M;
    ad_real A[4] = {x[0], x[1], ad_mul(x[1], 2.0), x[0]}, y[2];
    (void)n, (void)ctx;
    status_unused(ad_mat_make(2, 2, A, &M));
    ad_mat_vec(&M, x, y);
    return ad_add(y[0], y[1]);
}

static ad_real uses_wrapped_matrix(const ad_real *x, size_t n, void *ctx)
{
    static const double A[4] = {1.0, 2.0, 3.0, 4.0};
    ad_mat M;
    ad_real s;
    (void)n, (void)ctx;
    status_unused(ad_mat_make(2, 2, A, &M));
    ad_mat_sqnorm(&M, x, &s);
    return s;
}

static void loop_step(size_t k, const ad_real *state, ad_real *next, size_t n,
                      const ad_real *params, size_t np, void *ctx)
{
    (void)k, (void)n, (void)np, (void)ctx;
    next[0] = ad_mul(state[0], params[0]);
}

static ad_real uses_loop(const ad_real *x, size_t n, void *ctx)
{
    ad_real s;
    (void)n, (void)ctx;
    status_unused(ad_checkpointed_loop(loop_step, NULL, 6, 0, 1, &x[0], 1, &x[1], &s));
    return s;
}

static void test_unsupported_blocks(void **state)
{
    (void)state;
    uint64_t rng = 2929;
    static const ad_objective fs[] = {uses_recorded_matrix, uses_wrapped_matrix};
    static const char *const names[] = {"ad_mat_record", "ad_mat_wrap"};
    double x[2] = {0.75, 1.25};
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) {
        double fx, g[2];
        /* f itself is fine */
        assert_ok(ad_gradient(fs[i], NULL, 2, x, &fx, g));
        ad_program *P = (ad_program *)x;
        ad_status s = ad_program_record(fs[i], NULL, 2, x, &P);
        if (s != AD_ENOTSUP)
            print_error("%s: %s\n", names[i], ad_strerror(s));
        assert_int_equal(s, AD_ENOTSUP);
        assert_null(P);
        scalar_call sc = {fs[i], NULL};
        P = (ad_program *)x;
        assert_int_equal(ad_program_record_function(scalar_fn, &sc, 2, 1, x, &P), AD_ENOTSUP);
        assert_null(P);
    }
    /* external functions and checkpointed loops, once refused here, are
     * kept (as calls): section 18 */
    subject kept[] = {{"ad_external (vjp only)", uses_external, NULL, NULL, 2, 1},
                      {"ad_checkpointed_loop", uses_loop, NULL, NULL, 2, 1}};
    for (int i = 0; i < 2; i++) {
        ad_program *P = record_at(&kept[i], x);
        for (int k = 0; k < 10; k++) {
            double y[2];
            fill_uniform(&rng, y, 2, -1.5, 1.5);
            compare_at(&kept[i], P, y, NULL, &rng);
        }
        ad_program_free(P);
    }
}

/* A nested derivative inside f: the enclosing recording gets the
 * replay of the inner one's records and sweep, whose partials a program
 * cannot see (a fabs's sign, for one). */
static ad_real inner_abs(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(x[0], ad_fabs(x[1]));
}

static ad_real nested_gradient(const ad_real *x, size_t n, void *ctx)
{
    ad_real fx, g[2];
    (void)ctx;
    status_unused(ad_gradient_r(inner_abs, NULL, n, x, &fx, g));
    return ad_add(g[1], ad_mul(fx, 0.0));
}

static void inner_abs_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = inner_abs(x, n, ctx);
}

static ad_real nested_jvp(const ad_real *x, size_t n, void *ctx)
{
    ad_real y, jv, v[2] = {ad_const(0.0), ad_const(1.0)};
    (void)ctx;
    status_unused(ad_jvp_r(inner_abs_fn, NULL, n, x, v, 1, &y, &jv));
    return jv;
}

/* From constants alone the nested call's results are constants: fine. */
static ad_real nested_from_constants(const ad_real *x, size_t n, void *ctx)
{
    ad_real fx, g[2], c[2] = {ad_const(2.0), ad_const(-3.0)};
    (void)ctx;
    status_unused(ad_gradient_r(inner_abs, NULL, n, c, &fx, g));
    return ad_mul(x[0], g[1]);
}

static void test_unsupported_nested(void **state)
{
    (void)state;
    uint64_t rng = 1818;
    double x[2] = {1.0, 1.0};
    subject c = {"nested_from_constants", nested_from_constants, NULL, NULL, 2, 1};
    ad_program *P = record_at(&c, x);
    double y[2] = {0.5, -0.75};
    compare_at(&c, P, y, NULL, &rng);
    ad_program_free(P);
    static const ad_objective fs[] = {nested_gradient, nested_jvp};
    static const char *const names[] = {"ad_gradient_r", "ad_jvp_r"};
    for (int i = 0; i < 2; i++) {
        P = (ad_program *)x;
        ad_status s = ad_program_record(fs[i], NULL, 2, x, &P);
        if (s != AD_ENOTSUP) {
            double fp, fd, gp[2], gd[2], z[2] = {1.0, -1.0};
            if (s == AD_OK) {
                status_unused(ad_program_gradient(P, z, &fp, gp));
                status_unused(ad_gradient(fs[i], NULL, 2, z, &fd, gd));
                print_error("%s inside f: recorded; at (1, -1) the replay gives %g, f %g\n",
                            names[i], fp, fd);
                ad_program_free(P);
            }
        }
        assert_int_equal(s, AD_ENOTSUP);
        assert_null(P);
    }
}

/* Values changed without an operation. */
static ad_real hand_argument(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real z = ad_mul(x[0], x[1]);
    z.v += 1.0;
    return ad_mul(z, x[0]);
}

static ad_real hand_output(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real z = ad_mul(x[0], x[1]);
    z.v += 1.0;
    return z;
}

static ad_real hand_input_argument(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real z = x[0];
    z.v = sin(ad_value(x[0]));  /* arithmetic on ad_value, put back by hand */
    return ad_mul(z, x[1]);
}

static ad_real hand_guard(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real z = ad_mul(x[0], x[1]);
    z.v = ad_value(z) * 2.0;
    return ad_lt(z, 100.0) ? x[0] : x[1];
}

static ad_real hand_element(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real e[3] = {ad_mul(x[0], 3.0), ad_const(1.0), x[1]};
    e[0].v -= 0.5;
    return ad_sum(3, e);
}

static ad_real hand_condition(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real z = ad_mul(x[0], x[1]);
    z.v = -z.v;
    return ad_select_lt(z, x[1], x[0], x[1]);
}

static ad_real hand_shift(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real z = ad_exp(x[0]);
    z.v *= 2.0;
    return ad_add(z, 1.0);
}

static ad_real hand_signed_zero(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real z = ad_mul(x[0], 0.0);
    z.v = -z.v;
    return ad_add(z, x[1]);
}

static void test_unsupported_hand_made(void **state)
{
    (void)state;
    static const ad_objective fs[] = {hand_argument, hand_output, hand_input_argument,
                                      hand_guard, hand_element, hand_condition, hand_shift,
                                      hand_signed_zero};
    double x[2] = {0.75, 1.25};
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) {
        ad_program *P = (ad_program *)x;
        ad_status s = ad_program_record(fs[i], NULL, 2, x, &P);
        if (s != AD_ENOTSUP)
            print_error("function %zu: %s\n", i, ad_strerror(s));
        assert_int_equal(s, AD_ENOTSUP);
        assert_null(P);
    }
}

/* An input changed by hand and returned as it is. */
static ad_real hand_input_output(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real z = x[0];
    z.v += 1.0;
    return z;
}

static void hand_input_outputs(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = ad_mul(x[0], x[1]);
    y[1] = x[1];
    y[1].v *= 3.0;
}

static void test_unsupported_hand_made_input(void **state)
{
    (void)state;
    double x[2] = {0.75, 1.25}, fx, g[2];
    ad_program *P = (ad_program *)x;
    ad_status s = ad_program_record(hand_input_output, NULL, 2, x, &P);
    if (s == AD_OK) {
        double fp;
        status_unused(ad_program_value(P, x, &fp));
        status_unused(ad_gradient(hand_input_output, NULL, 2, x, &fx, g));
        print_error("recorded: the program's value %g, f's %g\n", fp, fx);
        ad_program_free(P);
    }
    assert_int_equal(s, AD_ENOTSUP);
    assert_null(P);
    P = (ad_program *)x;
    s = ad_program_record_function(hand_input_outputs, NULL, 2, 2, x, &P);
    if (s == AD_OK)
        ad_program_free(P);
    assert_int_equal(s, AD_ENOTSUP);
    assert_null(P);
}

/* ---- values of other recordings: AD_EFOREIGN ---- */

static ad_real kept;

static ad_real keeps(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    kept = ad_mul(x[0], x[1]);
    return kept;
}

static ad_real foreign_mul(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(kept, x[0]);
}

static ad_real foreign_shift(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_add(ad_add(kept, 1.0), x[0]);
}

static ad_real foreign_guard(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_lt(kept, x[0]) ? x[0] : x[1];
}

static ad_real foreign_element(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    const ad_real e[3] = {kept, x[0], ad_const(2.0)};
    return ad_sum(3, e);
}

static ad_real foreign_prod(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    const ad_real e[3] = {x[1], kept, x[0]};
    return ad_prod(3, e);
}

static ad_real foreign_condition(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_select_lt(kept, x[0], x[0], x[1]);
}

static ad_real foreign_output(const ad_real *x, size_t n, void *ctx)
{
    (void)x, (void)n, (void)ctx;
    return kept;
}

static void test_foreign(void **state)
{
    (void)state;
    static const ad_objective fs[] = {foreign_mul, foreign_shift, foreign_guard, foreign_element,
                                      foreign_prod, foreign_condition, foreign_output};
    double x[2] = {0.75, 1.25}, fx, g[2];
    for (int from = 0; from < 2; from++) {
        /* kept from an ad_gradient, then from a program's recording */
        if (from == 0) {
            assert_ok(ad_gradient(keeps, NULL, 2, x, &fx, g));
        } else {
            ad_program *K = NULL;
            assert_ok(ad_program_record(keeps, NULL, 2, x, &K));
            ad_program_free(K);
        }
        for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) {
            ad_program *P = (ad_program *)x;
            ad_status s = ad_program_record(fs[i], NULL, 2, x, &P);
            if (s != AD_EFOREIGN)
                print_error("function %zu, kept from %d: %s\n", i, from, ad_strerror(s));
            assert_int_equal(s, AD_EFOREIGN);
            assert_null(P);
        }
    }
}

/* ---- the tape limit ---- */

static int reset_settings(void **state)
{
    (void)state;
    ad_test_fail_alloc_after(-1);
    ad_set_tape_limit(0);
    ad_set_checks(0);
    return 0;
}

static void test_tape_limit(void **state)
{
    (void)state;
    mix_ctx c = MIX_CTX;
    double x[6] = {0.5, 0.7, 0.1, 0.9, 0.3, -0.2}, v[6] = {1, 0, 0, 0, 0, 0}, fx, g[6], hv[6];
    ad_program *P = (ad_program *)x;
    ad_set_tape_limit(20);
    assert_int_equal(ad_program_record(mix_r, &c, 6, x, &P), AD_ERANGE);
    assert_null(P);
    ad_set_tape_limit(0);
    assert_ok(ad_program_record(mix_r, &c, 6, x, &P));
    set_where("tape limit", x, 6);
    ad_set_tape_limit(20);
    fx = SENT_P, fill(g, 6, SENT_P);
    assert_int_equal(ad_program_gradient(P, x, &fx, g), AD_ERANGE);
    assert_nan(fx);
    all_nan("ad_program_gradient", "grad", g, 6);
    fx = SENT_P, fill(g, 6, SENT_P), fill(hv, 6, SENT_P);
    assert_int_equal(ad_program_hvp(P, x, v, &fx, g, hv), AD_ERANGE);
    all_nan("ad_program_hvp", "hv", hv, 6);
    double y[1], jac[6];
    fill(jac, 6, SENT_P);
    assert_int_equal(ad_program_jacobian(P, x, y, jac), AD_ERANGE);
    all_nan("ad_program_jacobian", "jac", jac, 6);
    /* the value records nothing */
    double fv, fd, gd[6];
    assert_ok(ad_program_value(P, x, &fv));
    ad_set_tape_limit(0);
    assert_ok(ad_gradient(mix_r, &c, 6, x, &fd, gd));
    assert_same(fv, fd);
    assert_ok(ad_program_gradient(P, x, &fx, g));
    same_bits("ad_program_gradient", "grad", g, gd, 6);
    ad_program_free(P);
}

/* ---- checks: a replay stops where f's recording stops ---- */

static ad_real logs(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_add(ad_log(x[0]), ad_mul(ad_sqrt(x[1]), ad_add(x[0], 2.0)));
}

static void test_checks(void **state)
{
    (void)state;
    uint64_t rng = 2121;
    subject s = {"logs (checked)", logs, NULL, NULL, 2, 1};
    double x0[2] = {1.0, 2.0};
    ad_set_checks(AD_CHECK_FINITE);
    ad_program *P = record_at(&s, x0);
    int faults = 0;
    for (int k = 0; k < 40; k++) {
        double x[2];
        fill_uniform(&rng, x, 2, -1.0, 3.0);
        double fx, g[2];
        if (ad_gradient(logs, NULL, 2, x, &fx, g) == AD_ENONFINITE)
            faults++;
        compare_at(&s, P, x, NULL, &rng);
    }
    assert_true(faults > 0);
    ad_set_checks(0);
    ad_program_free(P);
}

/* ======================================================================
 * 16. Allocation failure at every count
 * ====================================================================== */

/* The mixed function behind a guard that holds: guards, selections and
 * primitives all allocate in the listing. */
static ad_real guarded_mix(const ad_real *x, size_t n, void *ctx)
{
    ad_real r = mix_r(x, n, ctx);
    return ad_gt(x[5], -100.0) ? r : ad_neg(r);
}

enum {
    AF_RECORD, AF_RECORD_FUNCTION, AF_VALUE, AF_GRADIENT, AF_HVP, AF_JACOBIAN, AF_JVP, AF_VJP,
    AF_SPARSE_JACOBIAN, AF_SPARSE_HESSIAN, AF_SPARSE_HESSIAN_VALUES, AF_EVALUATE_FIRST,
    AF_EVALUATE_AGAIN, AF_KINDS
};

static const char *const af_names[AF_KINDS] = {
    "ad_program_record", "ad_program_record_function", "ad_program_value",
    "ad_program_gradient", "ad_program_hvp", "ad_program_jacobian", "ad_program_jvp",
    "ad_program_vjp", "ad_program_sparse_jacobian", "ad_program_sparse_hessian",
    "ad_program_sparse_hessian_values", "ad_program_evaluate (first)",
    "ad_program_evaluate (again)"};

typedef struct af_state {
    mix_ctx ctx;
    ad_objective f;     /* guarded_mix, or calls_mixed */
    ad_function F;      /* mix_vector, or calls_vector */
    ad_program *P, *V;  /* recorded beforehand, for the replays */
    ad_csr H0;
    double x[6], v[6], w[5];
} af_state;

/* Outputs: out[0..count) (NaN on failure), the CSR (empty on failure), a
 * program made (NULL on failure). */
typedef struct af_out {
    double out[60];
    size_t count;
    ad_csr C;
    int has_csr;
    ad_program *made;
    int record_failed;  /* the recording of AF_RECORD* failed (not its replay) */
} af_out;

static ad_status af_call(int api, af_state *a, af_out *o)
{
    double *p = o->out;
    ad_status s;
    o->made = NULL;
    o->has_csr = 0;
    o->record_failed = 0;
    switch (api) {
    case AF_RECORD:
        o->count = 0;
        o->made = (ad_program *)a;
        s = ad_program_record(a->f, &a->ctx, 6, a->x, &o->made);
        o->record_failed = s != AD_OK;
        if (s == AD_OK) {
            o->count = 7;
            s = ad_program_gradient(o->made, a->x, p, p + 1);
        }
        return s;
    case AF_RECORD_FUNCTION:
        o->count = 0;
        o->made = (ad_program *)a;
        s = ad_program_record_function(a->F, &a->ctx, 6, 5, a->x, &o->made);
        o->record_failed = s != AD_OK;
        if (s == AD_OK) {
            o->count = 35;
            s = ad_program_jacobian(o->made, a->x, p, p + 5);
        }
        return s;
    case AF_VALUE:
        o->count = 1;
        return ad_program_value(a->P, a->x, p);
    case AF_GRADIENT:
        o->count = 7;
        return ad_program_gradient(a->P, a->x, p, p + 1);
    case AF_HVP:
        o->count = 13;
        return ad_program_hvp(a->P, a->x, a->v, p, p + 1, p + 7);
    case AF_JACOBIAN:
        o->count = 35;
        return ad_program_jacobian(a->V, a->x, p, p + 5);
    case AF_JVP:
        o->count = 10;
        return ad_program_jvp(a->V, a->x, a->v, p, p + 5);
    case AF_VJP:
        o->count = 11;
        return ad_program_vjp(a->V, a->x, a->w, p, p + 5);
    case AF_SPARSE_JACOBIAN:
        o->count = 5;
        o->has_csr = 1;
        csr_garbage(&o->C);
        return ad_program_sparse_jacobian(a->V, a->x, p, &o->C);
    case AF_SPARSE_HESSIAN:
        o->count = 7;
        o->has_csr = 1;
        csr_garbage(&o->C);
        return ad_program_sparse_hessian(a->P, a->x, p, p + 1, &o->C);
    case AF_SPARSE_HESSIAN_VALUES:
        o->count = 7 + a->H0.nnz;
        o->C = csr_copy(&a->H0);
        s = ad_program_sparse_hessian_values(a->P, a->x, p, p + 1, &o->C);
        memcpy(p + 7, o->C.val, a->H0.nnz * sizeof(double));
        csr_copy_free(&o->C);
        return s;
    case AF_EVALUATE_FIRST:
        o->count = 7;
        return ad_program_evaluate(&o->made, a->f, &a->ctx, 6, a->x, p, p + 1);
    default: {
        o->count = 7;
        ad_program *E = a->P;
        s = ad_program_evaluate(&E, a->f, &a->ctx, 6, a->x, p, p + 1);
        if (E != a->P) {  /* recorded again: a change we do not expect */
            ad_program_free(E);
            return AD_EBRANCH;
        }
        return s;
    }
    }
}

/* state: the API (AF_*), plus AF_KINDS for the programs of external
 * functions and loops (calls_mixed, calls_vector), whose replays call
 * them again: their blocks, the loops' snapshots and steps' tapes, the
 * rules' work all allocate in a replay. */
static void test_alloc_failure(void **state)
{
    const int api = (int)(intptr_t)*state % AF_KINDS, calls = (int)(intptr_t)*state / AF_KINDS;
    uint64_t rng = 1919;
    static af_state a;
    a = (af_state){.ctx = MIX_CTX, .f = calls ? calls_mixed : guarded_mix,
                   .F = calls ? calls_vector : mix_vector};
    if (calls) {
        fill_uniform(&rng, a.x, 6, -1.0, 1.0);
    } else {
        mix_point(&rng, a.x);
        a.x[5] = fabs(a.x[5]);
    }
    fill_uniform(&rng, a.v, 6, -1.0, 1.0);
    fill_uniform(&rng, a.w, 5, -1.0, 1.0);
    assert_ok(ad_program_record(a.f, &a.ctx, 6, a.x, &a.P));
    assert_ok(ad_program_record_function(a.F, &a.ctx, 6, 5, a.x, &a.V));
    subject s = {calls ? "calls_mixed" : "guarded_mix", a.f, NULL, &a.ctx, 6, 1};
    a.H0 = structure_at(&s, a.x);
    set_where(af_names[api], a.x, 6);

    static af_out want, got;
    memset(&want, 0, sizeof want);
    assert_ok(af_call(api, &a, &want));
    ad_program_free(want.made);
    if (api == AF_EVALUATE_FIRST || api == AF_EVALUATE_AGAIN) {
        /* evaluate's results are ad_gradient's */
        double fd, gd[6];
        assert_ok(ad_gradient(a.f, &a.ctx, 6, a.x, &fd, gd));
        same_bits(af_names[api], "fx", want.out, &fd, 1);
        same_bits(af_names[api], "grad", want.out + 1, gd, 6);
    }
    for (int fresh = 1; fresh >= 0; fresh--) {
        int successes = 0, failures = 0;
        assert_ok(ad_release());
        for (long i = 0; successes < 3; i++) {
            if (fresh)
                assert_ok(ad_release());
            memset(&got, 0, sizeof got);
            ad_test_fail_alloc_after(i);
            ad_status st = af_call(api, &a, &got);
            ad_test_fail_alloc_after(-1);
            if (st == AD_OK) {
                successes++;
                same_bits(af_names[api], "results", got.out, want.out, want.count);
                if (got.has_csr) {
                    same_csr(af_names[api], &got.C, &want.C);
                    ad_csr_free(&got.C);
                }
                ad_program_free(got.made);
                continue;
            }
            if (successes || st != AD_ENOMEM)
                print_error("%s (%s state), allocation %ld:\n", af_names[api],
                            fresh ? "fresh" : "kept", i);
            assert_alloc_failure(i, st, successes);
            all_nan(af_names[api], "results", got.out, got.count);
            if (got.record_failed)
                assert_null(got.made);
            else
                ad_program_free(got.made);
            if (got.has_csr)
                assert_csr_empty(&got.C);
            failures++;
            assert_true(i < 5000);
        }
        if (fresh)
            assert_true(failures > 0);
    }
    if (want.has_csr)
        ad_csr_free(&want.C);
    csr_copy_free(&a.H0);
    ad_program_free(a.P);
    ad_program_free(a.V);
}

/* ======================================================================
 * 17. pow with a constant the compiler sees
 * ====================================================================== */

/* A compiler turns pow(a, 2.0) into a * a where it sees the 2.0 (gcc:
 * also pow(a, -1.0) into 1 / a), and glibc's pow need not round alike
 * (at 94906297^2 = 9007205210252209, halfway between two doubles, pow
 * rounds up and the product to even).  f's operations are those the
 * compiler made of f; a replay must make the same. */
static double pow_exponent = 2.0;

static ad_real pow_literal_3(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_pow(x[0], 3.0);  /* d/dx: 3 pow(x, 2.0), folded to 3 x x */
}

static ad_real pow_literal_m1(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_pow(x[0], -1.0);  /* folded to 1 / x */
}

static ad_real pow_literal_2(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_pow(x[0], 2.0);
}

static ad_real pow_literal_half(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_pow(x[0], 0.5);
}

static ad_real pow_literal_m2(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_pow(x[0], -2.0);
}

static ad_real pow_literal_1(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_pow(x[0], 1.0);
}

static ad_real pow_base_10(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_pow(10.0, x[0]);
}

static ad_real pow_base_2(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(ad_pow(2.0, x[0]), ad_pow(0.3, x[0]));
}

static ad_real pow_runtime(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_pow(x[0], *(volatile double *)&pow_exponent);  /* a call of pow */
}

static const struct pow_case {
    const char *name;
    ad_objective f;
    double at;  /* a point where pow and the folded form round apart */
} pow_cases[] = {
    {"pow(x, 2.0)", pow_literal_2, 94906297.0},
    {"pow(x, 3.0)", pow_literal_3, 94906297.0},
    {"pow(x, -1.0)", pow_literal_m1, 1.7500431844994366},
    {"pow(x, e), e = 2.0 at run time", pow_runtime, 94906297.0},
    {"pow(x, 0.5)", pow_literal_half, 2.0},
    {"pow(x, -2.0)", pow_literal_m2, 3.0},
    {"pow(x, 1.0)", pow_literal_1, 3.0},
    {"pow(10.0, x)", pow_base_10, 0.3},
    {"pow(2.0, x) pow(0.3, x)", pow_base_2, 0.3},
};

static void test_pow_constant(void **state)
{
    const struct pow_case *c = *state;
    uint64_t rng = 2020;
    subject s = {c->name, c->f, NULL, NULL, 1, 1};
    double x0 = 1.5;
    ad_program *P = record_at(&s, &x0);
    compare_at(&s, P, &c->at, NULL, &rng);
    for (int k = 0; k < 300; k++) {
        double x = rng_uniform(&rng, 0.5, 4.0);
        compare_at(&s, P, &x, NULL, &rng);
    }
    ad_program_free(P);
}

/* ======================================================================
 * 18. External functions and checkpointed loops: kept as calls
 * ====================================================================== */

#define CALL_POINTS 60

static void unit_point(uint64_t *rng, double *x)
{
    fill_uniform(rng, x, 6, -1.0, 1.0);
}

typedef struct call_case {
    subject s;
    int jvp, hvp;  /* whether its rules have them */
} call_case;

static const call_case call_cases[] = {
    {{"ext_alone", ext_alone, NULL, NULL, 3, 1}, 1, 1},
    {{"loop_alone", loop_alone, NULL, NULL, 4, 1}, 1, 1},
    {{"calls_mixed", calls_mixed, NULL, NULL, 6, 1}, 1, 1},
    {{"calls_vector", NULL, calls_vector, NULL, 6, 5}, 1, 1},
    {{"guarded_loop", guarded_loop, NULL, NULL, 3, 1}, 1, 1},
    {{"loop_of_external", loop_of_external, NULL, NULL, 3, 1}, 1, 1},
    {{"loop_of_loops", loop_of_loops, NULL, NULL, 4, 1}, 1, 1},
    {{"ext_recording_rule", ext_recording_rule, NULL, NULL, 2, 1}, 1, 1},
    {{"ext_without_hvp", ext_without_hvp, NULL, NULL, 3, 1}, 1, 0},
    {{"ext_without_jvp", ext_without_jvp, NULL, NULL, 2, 1}, 0, 0},
};
#define N_CALL_CASES (sizeof call_cases / sizeof call_cases[0])

/* What the comparisons would pass vacuously on (both sides NaN, or the
 * same error) must not happen where the rules are fine: the replays
 * succeed, with finite numbers, or AD_ENOTSUP exactly where a rule is
 * missing; and they do not call f. */
static void replays_succeed(const call_case *c, ad_program *P, const double *x)
{
    const subject *s = &c->s;
    size_t n = s->n, m = s->m;
    double v[NMAX], w[MMAX], y[MMAX], out[NMAX * MMAX], fx, g[NMAX], hv[NMAX];
    fill(v, n, 0.5), fill(w, m, -0.75);
    long calls = call_f_calls;
    set_where(s->name, x, n);
    if (s->f) {
        same_status("ad_program_gradient", ad_program_gradient(P, x, &fx, g), AD_OK);
        assert_true(isfinite(fx));
        for (size_t i = 0; i < n; i++)
            assert_true(isfinite(g[i]));
        ad_status sh = ad_program_hvp(P, x, v, &fx, g, hv);
        same_status("ad_program_hvp", sh, c->hvp ? AD_OK : AD_ENOTSUP);
        for (size_t i = 0; c->hvp && i < n; i++)
            assert_true(isfinite(hv[i]));
    }
    same_status("ad_program_jacobian", ad_program_jacobian(P, x, y, out), AD_OK);
    for (size_t i = 0; i < n * m; i++)
        assert_true(isfinite(out[i]));
    same_status("ad_program_vjp", ad_program_vjp(P, x, w, y, out), AD_OK);
    ad_status sj = ad_program_jvp(P, x, v, y, out);
    same_status("ad_program_jvp", sj, c->jvp ? AD_OK : AD_ENOTSUP);
    if (!c->jvp) {
        all_nan("ad_program_jvp", "y", y, m);
        all_nan("ad_program_jvp", "jv", out, m);
    }
    assert_int_equal(call_f_calls, calls);
}

/* Each program of external functions and loops against the drivers on f
 * at CALL_POINTS points: the same status and bits, from every replay. */
static void test_calls(void **state)
{
    (void)state;
    uint64_t rng = 2323;
    for (size_t i = 0; i < N_CALL_CASES; i++) {
        const call_case *c = &call_cases[i];
        const subject *s = &c->s;
        double x0[NMAX], x[NMAX];
        fill_uniform(&rng, x0, s->n, -1.0, 1.0);
        if (s->f == guarded_loop)
            x0[0] = -0.5, x0[2] = 0.25;  /* the first step takes ad_lt's true branch */
        ad_program *P = record_at(s, x0);
        ad_csr H0 = {0};
        if (s->f && c->hvp)
            H0 = structure_at(s, x0);
        int other_branch = 0;
        for (int k = 0; k < CALL_POINTS; k++) {
            fill_uniform(&rng, x, s->n, -1.0, 1.0);
            compare_at(s, P, x, H0.row_ptr ? &H0 : NULL, &rng);
            replays_succeed(c, P, x);
            if (s->f == guarded_loop && !(x[0] < x[2]))
                other_branch++;
            if (s->f) {
                /* the replay's recording is f's: its records, its blocks,
                 * its loops' snapshots (the recording's count) */
                double fx, g[NMAX];
                ad_tape_stats a, b;
                assert_ok(ad_gradient(s->f, NULL, s->n, x, &fx, g));
                assert_ok(ad_tape_stats_get(&a));
                assert_ok(ad_program_gradient(P, x, &fx, g));
                assert_ok(ad_tape_stats_get(&b));
                assert_int_equal(a.records, b.records);
                assert_int_equal(a.block_bytes, b.block_bytes);
                assert_int_equal(a.snapshot_bytes, b.snapshot_bytes);
            }
        }
        if (s->f == guarded_loop)
            assert_true(other_branch > 5);  /* and no AD_EBRANCH there */
        if (H0.row_ptr)
            csr_copy_free(&H0);
        ad_program_free(P);
    }
    /* a guard on a call's output: AD_EBRANCH where it flips */
    subject gs = {"guard_on_call", guard_on_call, NULL, NULL, 2, 1};
    double g0[2] = {0.5, -0.5};
    ad_program *G = record_at(&gs, g0);
    ad_csr GH = structure_at(&gs, g0);
    int flips = 0;
    for (int k = 0; k < CALL_POINTS; k++) {
        double y[2];
        fill_uniform(&rng, y, 2, -1.0, 1.0);
        if (y[1] < 0.0) {
            compare_at(&gs, G, y, &GH, &rng);
        } else {
            flips++;
            expect_branch(&gs, G, y, &GH);
        }
    }
    assert_true(flips > 5);
    csr_copy_free(&GH);
    ad_program_free(G);

    /* no jvp rule: AD_ENOTSUP from ad_program_jvp as from ad_jvp */
    double x[2] = {0.25, -0.5}, v[2] = {1.0, 0.5}, y, jv;
    ad_program *P = NULL;
    assert_ok(ad_program_record(ext_without_jvp, NULL, 2, x, &P));
    scalar_call sc = {ext_without_jvp, NULL};
    assert_int_equal(ad_jvp(scalar_fn, &sc, 2, x, v, 1, &y, &jv), AD_ENOTSUP);
    y = jv = SENT_P;
    assert_int_equal(ad_program_jvp(P, x, v, &y, &jv), AD_ENOTSUP);
    assert_nan(y);
    assert_nan(jv);
    ad_program_free(P);
}

/* The rules' derivatives are right (the comparisons above are of
 * derivatives, not of numbers that agree by accident): an external
 * function alone against its map's closed forms, and a loop of external
 * functions against central differences of the replayed value. */
static void test_calls_closed_forms(void **state)
{
    (void)state;
    uint64_t rng = 2424;
    double x[3], J[6], H[9], v[3], fx, g[3], hv[3];
    ad_program *P = NULL, *Q = NULL;
    fill_uniform(&rng, x, 3, -1.0, 1.0);
    assert_ok(ad_program_record(ext_alone, NULL, 3, x, &P));
    assert_ok(ad_program_record(loop_of_external, NULL, 3, x, &Q));
    for (int k = 0; k < 10; k++) {
        fill_uniform(&rng, x, 3, -1.0, 1.0);
        fill_uniform(&rng, v, 3, -1.0, 1.0);
        assert_ok(ad_program_hvp(P, x, v, &fx, g, hv));
        double y[2];
        map_eval(MAP_A, x, y);
        map_jacobian(MAP_A, x, J);
        map_hessian(MAP_A, x, 1, H);
        assert_same(fx, y[1]);
        for (int i = 0; i < 3; i++) {
            assert_near(g[i], J[3 + i], 1e-15, 1e-15);
            double h = H[i * 3] * v[0] + H[i * 3 + 1] * v[1] + H[i * 3 + 2] * v[2];
            assert_near(hv[i], h, 1e-14, 1e-14);
        }
        assert_ok(ad_program_gradient(Q, x, &fx, g));
        for (int i = 0; i < 3; i++) {
            double xp[3] = {x[0], x[1], x[2]}, up, down, step = 1e-6;
            xp[i] = x[i] + step;
            assert_ok(ad_program_value(Q, xp, &up));
            xp[i] = x[i] - step;
            assert_ok(ad_program_value(Q, xp, &down));
            assert_near(g[i], (up - down) / (2 * step), 1e-6, 1e-6);
        }
    }
    ad_program_free(P);
    ad_program_free(Q);
}

/* ---- ctx: read by the replay's rules and steps ---- */

static ext_ctx ext_read = EXT_CTX(MAP_G), ext_read_step = EXT_CTX(MAP_D),
               ext_baked = EXT_CTX(MAP_C);
static step_ctx steps_read = {0.1, &ext_read_step, INFINITY};

typedef struct rule_pick {
    const ad_rule *rule;
} rule_pick;

/* An external function of the rule ctx picks, and a loop of external
 * functions: all their ctx (ext_read, steps_read, ext_read_step) is read
 * by a replay. */
static ad_real ctx_calls(const ad_real *x, size_t n, void *ctx)
{
    const rule_pick *r = ctx;
    ad_real g, s[2];
    (void)n;
    status_unused(ad_external(r->rule, &ext_read, 3, x, 1, &g));
    ad_real s0[2] = {g, x[1]};
    status_unused(ad_checkpointed_loop(step_external, &steps_read, 4, 0, 2, s0, 1, x + 2, s));
    return ad_add(ad_mul(s[0], x[0]), s[1]);
}

/* An external function of constants alone: not recorded (its primal
 * runs, its outputs are constants), so not a call the program keeps; its
 * numbers are constants of the program, as everything f computes from
 * constants. */
static ad_real baked_call(const ad_real *x, size_t n, void *ctx)
{
    ad_real k = ad_const(0.5), c[3];
    (void)n, (void)ctx;
    status_unused(ad_external(&ext_full, &ext_baked, 1, &k, 3, c));
    return ad_add(ad_mul(x[0], c[1]), c[2]);
}

static void test_calls_ctx_read(void **state)
{
    (void)state;
    uint64_t rng = 2525;
    rule_pick pick = {&ext_full}, old_pick = {&ext_full};
    subject s = {"ctx_calls", ctx_calls, NULL, &pick, 3, 1};
    double x0[3] = {0.25, -0.5, 0.75}, x[3], xs[CALL_POINTS][3], before[CALL_POINTS], after;
    ad_program *P = record_at(&s, x0);
    for (int k = 0; k < CALL_POINTS; k++) {
        fill_uniform(&rng, xs[k], 3, -1.0, 1.0);
        assert_ok(ad_program_value(P, xs[k], &before[k]));
    }
    /* ctx changed after the recording: the replay reads it, and gives
     * what f gives with the new numbers */
    ext_read.scale = 2.5;
    ext_read_step.scale = 0.75;
    steps_read.h = 0.05;
    ad_csr H0 = structure_at(&s, x0);
    int differ = 0;
    for (int k = 0; k < CALL_POINTS; k++) {
        compare_at(&s, P, xs[k], &H0, &rng);
        assert_ok(ad_program_value(P, xs[k], &after));
        differ += !same_number(after, before[k]);
    }
    assert_int_equal(differ, CALL_POINTS);
    /* the rule is the one f passed at the recording (ad_external copies
     * it): f that now picks one without hvp differs, the replay not */
    pick.rule = &ext_no_hvp;
    subject so = {"ctx_calls (the recording's rule)", ctx_calls, NULL, &old_pick, 3, 1};
    double v[3] = {1.0, -0.5, 0.25}, fx, g[3], hv[3];
    assert_int_equal(ad_hvp(ctx_calls, &pick, 3, x0, v, &fx, g, hv), AD_ENOTSUP);
    assert_ok(ad_program_hvp(P, x0, v, &fx, g, hv));
    for (int k = 0; k < 10; k++) {
        fill_uniform(&rng, x, 3, -1.0, 1.0);
        compare_at(&so, P, x, &H0, &rng);
    }
    csr_copy_free(&H0);
    ext_read.scale = ext_read_step.scale = 1.0;
    steps_read.h = 0.1;
    ad_program_free(P);

    /* an external function of constants: kept as its numbers, its ctx
     * not read again */
    subject b = {"baked_call", baked_call, NULL, NULL, 1, 1};
    P = record_at(&b, x0);
    long primals = atomic_load(&ext_baked.primals);
    double y = 0.75, fb, fr;
    ext_baked.scale = 3.0;
    assert_ok(ad_program_value(P, &y, &fb));
    assert_ok(ad_program_gradient(P, &y, &fr, g));
    assert_int_equal(atomic_load(&ext_baked.primals), primals);
    plain_values(&b, &y, &fr);
    assert_true(!same_number(fb, fr));  /* f with the new ctx */
    ext_baked.scale = 1.0;
    plain_values(&b, &y, &fr);
    assert_same(fb, fr);  /* f with the recording's */
    ad_program_free(P);
}

/* ---- errors met by a replay's calls ---- */

static ext_ctx ext_nan = {MAP_E, 1.0, 0.0, INFINITY, 0},
               ext_nan_vjp = {MAP_E, 1.0, INFINITY, 0.0, 0}, ext_bad = EXT_CTX(MAP_D);
static step_ctx steps_bad = {0.1, &ext_bad, 0.0};

/* An external function of ctx (an ext_ctx), among operations. */
static ad_real ext_of_ctx(const ad_real *x, size_t n, void *ctx)
{
    ad_real e;
    (void)n;
    status_unused(ad_external(&ext_full, ctx, 2, x, 1, &e));
    return ad_add(ad_mul(e, x[1]), ad_sin(x[0]));
}

/* A loop of step_bad: an invalid ad_external in a step where the state's
 * first element is above 0. */
static ad_real bad_loop(const ad_real *x, size_t n, void *ctx)
{
    ad_real s[2];
    (void)n, (void)ctx;
    status_unused(ad_checkpointed_loop(step_bad, &steps_bad, 4, 2, 2, x, 1, x + 2, s));
    return ad_mul(s[0], ad_add(s[1], 1.0));
}

/* Where a replay's rule or step fails, every replay fails as the driver
 * on f does: the same status, NaN results; and the program stays good
 * for other points.  A rule writing NaN (outputs or cotangents: an error
 * with AD_CHECK_FINITE, NaN numbers without), a step meeting an invalid
 * call, and the tape limit at every count. */
static void test_calls_failing(void **state)
{
    (void)state;
    uint64_t rng = 2626;
    double x0[3] = {-0.5, 0.25, -0.25}, x[3], fx, g[3];
    subject s[2] = {{"NaN outputs", ext_of_ctx, NULL, &ext_nan, 2, 1},
                    {"NaN cotangents", ext_of_ctx, NULL, &ext_nan_vjp, 2, 1}};
    for (int i = 0; i < 2; i++) {
        ad_program *P = record_at(&s[i], x0);
        ad_csr H0 = structure_at(&s[i], x0);
        for (int checks = 0; checks < 2; checks++) {
            ad_set_checks(checks ? AD_CHECK_FINITE : 0);
            int failed = 0;
            for (int k = 0; k < CALL_POINTS; k++) {
                fill_uniform(&rng, x, 2, -1.0, 1.0);
                compare_at(&s[i], P, x, &H0, &rng);
                ad_status st = ad_program_gradient(P, x, &fx, g);
                if (x[0] > 0.0) {
                    failed++;
                    same_status("ad_program_gradient", st, checks ? AD_ENONFINITE : AD_OK);
                    if (checks) {
                        assert_nan(fx);
                        all_nan("ad_program_gradient", "grad", g, 2);
                    } else if (i == 0) {
                        assert_nan(fx);  /* the vjp's cotangents are finite */
                    } else {
                        assert_nan(g[0]);
                    }
                } else {
                    same_status("ad_program_gradient", st, AD_OK);
                    assert_true(isfinite(fx) && isfinite(g[0]) && isfinite(g[1]));
                }
            }
            assert_true(failed > 5);
        }
        ad_set_checks(0);
        csr_copy_free(&H0);
        ad_program_free(P);
    }

    /* a step's invalid call, met at the replay only */
    subject b = {"bad_loop", bad_loop, NULL, NULL, 3, 1};
    double xb[3] = {-0.8, 0.1, -0.2};
    ad_program *P = record_at(&b, xb);
    int failed = 0;
    for (int k = 0; k < CALL_POINTS; k++) {
        fill_uniform(&rng, x, 3, -1.0, 1.0);
        compare_at(&b, P, x, NULL, &rng);
        fx = SENT_P, fill(g, 3, SENT_P);
        ad_status st = ad_program_gradient(P, x, &fx, g);
        if (x[0] > 0.0) {
            failed++;
            same_status("ad_program_gradient", st, AD_EINVAL);
            assert_nan(fx);
            all_nan("ad_program_gradient", "grad", g, 3);
        }
    }
    assert_true(failed > 5);
    compare_at(&b, P, xb, NULL, &rng);
    same_status("ad_program_gradient", ad_program_gradient(P, xb, &fx, g), AD_OK);
    ad_program_free(P);

    /* the tape limit at every count up to the replays' needs: the replay
     * stops where f's recording stops (its calls' blocks, the steps'
     * tapes) */
    subject m = {"calls_mixed (tape limit)", calls_mixed, NULL, NULL, 6, 1};
    subject V = {"calls_vector (tape limit)", NULL, calls_vector, NULL, 6, 5};
    double y0[6];
    unit_point(&rng, y0);
    ad_program *M = record_at(&m, y0), *Q = record_at(&V, y0);
    ad_set_tape_limit(5);
    ad_program *R = (ad_program *)y0;
    assert_int_equal(ad_program_record(calls_mixed, NULL, 6, y0, &R), AD_ERANGE);
    assert_null(R);
    int limited = 0;
    for (size_t lim = 1; lim < 2000; lim++) {
        double y[6], fd, gd[6], hd[6], jd[30], yd[5];
        unit_point(&rng, y);
        ad_set_tape_limit(lim);
        compare_at(&m, M, y, NULL, &rng);
        compare_at(&V, Q, y, NULL, &rng);
        /* until the drivers on f no longer meet the limit */
        scalar_call sc = {calls_mixed, NULL};
        ad_status st[3] = {ad_hvp(calls_mixed, NULL, 6, y, y0, &fd, gd, hd),
                           ad_jacobian(calls_vector, NULL, 6, y, 5, yd, jd),
                           ad_jacobian(scalar_fn, &sc, 6, y, 1, yd, jd)};
        if (st[0] == AD_OK && st[1] == AD_OK && st[2] == AD_OK)
            break;
        for (int i = 0; i < 3; i++)
            assert_true(st[i] == AD_OK || st[i] == AD_ERANGE);
        limited++;
    }
    assert_true(limited > 20);
    ad_set_tape_limit(0);
    ad_program_free(M);
    ad_program_free(Q);
}

/* ---- threads ---- */

/* Eight threads replaying programs of external functions and loops (whose
 * rules and steps are safe to run on several threads at once): the bits
 * of the main thread's replays, which are the drivers'. */
static void test_calls_threads(void **state)
{
    (void)state;
    uint64_t rng = 2727;
    subject s = {"calls_mixed", calls_mixed, NULL, NULL, 6, 1};
    subject V = {"calls_vector", NULL, calls_vector, NULL, 6, 5};
    double x0[6];
    unit_point(&rng, x0);
    ad_program *P = record_at(&s, x0), *Q = record_at(&V, x0);
    thread_refs_at(&s, &V, P, Q, unit_point, &rng);
    long calls = call_f_calls, primals = atomic_load(&ext_A.primals);
    threads_replay(P, Q, 20);
    assert_int_equal(call_f_calls, calls);
    /* each replay's recording calls each primal once */
    assert_true(atomic_load(&ext_A.primals) - primals >= REPLAY_THREADS * 20 * THREAD_POINTS);
    ad_program_free(P);
    ad_program_free(Q);
}

/* ---- inside recordings ---- */

typedef struct calls_nest {
    ad_program *P;
    double X0[6], X1[6];
    ad_status st[4];
    double fx, g[6], hv[6];
} calls_nest;

/* Records calls_mixed as a program (the first time), replays it at X1,
 * and uses the numbers as constants. */
static ad_real calls_outer(const ad_real *x, size_t n, void *ctx)
{
    calls_nest *c = ctx;
    double hf, hg[6], v[6] = {1, 0, 0, 0, 0, 0};
    (void)n;
    if (!c->P)
        c->st[0] = ad_program_record(calls_mixed, NULL, 6, c->X0, &c->P);
    c->st[1] = ad_program_gradient(c->P, c->X1, &c->fx, c->g);
    c->st[2] = ad_program_hvp(c->P, c->X1, v, &hf, hg, c->hv);
    c->st[3] = ad_program_value(c->P, c->X1, &hf);
    return ad_add(ad_mul(x[0], c->fx), ad_mul(ad_mul(x[1], x[0]), c->g[0] + c->hv[0]));
}

static void check_calls_nest(const calls_nest *c, const double *x, double fx, const double *g)
{
    double f1, g1[6], hf, hg[6], hv[6], v[6] = {1, 0, 0, 0, 0, 0};
    for (int i = 0; i < 4; i++)
        assert_ok(c->st[i]);
    assert_ok(ad_gradient(calls_mixed, NULL, 6, c->X1, &f1, g1));
    assert_ok(ad_hvp(calls_mixed, NULL, 6, c->X1, v, &hf, hg, hv));
    assert_same(c->fx, f1);
    assert_same(c->g[0], g1[0]);
    assert_same(c->hv[0], hv[0]);
    double k = g1[0] + hv[0];
    assert_same(fx, x[0] * f1 + (x[1] * x[0]) * k);
    assert_same(g[0], f1 + x[1] * k);
    assert_same(g[1], x[0] * k);
}

static void test_calls_inside_recordings(void **state)
{
    (void)state;
    uint64_t rng = 2828;
    calls_nest c = {0};
    unit_point(&rng, c.X0);
    unit_point(&rng, c.X1);
    double x[2] = {0.5, -1.5}, fx, g[2];
    /* recorded and replayed while ad_gradient records calls_outer */
    assert_ok(ad_gradient(calls_outer, &c, 2, x, &fx, g));
    assert_non_null(c.P);
    check_calls_nest(&c, x, fx, g);
    subject s = {"calls_mixed (recorded inside)", calls_mixed, NULL, NULL, 6, 1};
    for (int k = 0; k < 5; k++) {
        double y[6];
        unit_point(&rng, y);
        compare_at(&s, c.P, y, NULL, &rng);
    }
    /* replayed inside an objective recorded as a program, and that one
     * replayed */
    ad_program *Q = NULL;
    assert_ok(ad_program_record(calls_outer, &c, 2, x, &Q));
    subject o = {"calls_outer", calls_outer, NULL, &c, 2, 1};
    for (int k = 0; k < 5; k++) {
        double y[2], fq, gq[2];
        fill_uniform(&rng, y, 2, -2.0, 2.0);
        assert_ok(ad_program_gradient(Q, y, &fq, gq));
        check_calls_nest(&c, y, fq, gq);
        compare_at(&o, Q, y, NULL, &rng);
    }
    ad_program_free(Q);
    ad_program_free(c.P);
}

/* ======================================================================
 * main
 * ====================================================================== */

#define AF_TEST(api) \
    {.name = "allocation failure: " #api, .test_func = test_alloc_failure, \
     .teardown_func = reset_settings, .initial_state = (void *)(intptr_t)api}

#define AF_CALLS_TEST(api) \
    {.name = "allocation failure, external functions and loops: " #api, \
     .test_func = test_alloc_failure, .teardown_func = reset_settings, \
     .initial_state = (void *)(intptr_t)(AF_KINDS + api)}

#define POW_TEST(i) \
    {.name = pow_cases[i].name, .test_func = test_pow_constant, \
     .initial_state = (void *)&pow_cases[i]}

int main(void)
{
    _Static_assert(sizeof pow_cases / sizeof pow_cases[0] == 9, "a POW_TEST per case");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unary_ops),
        cmocka_unit_test(test_binary_ops),
        cmocka_unit_test(test_mixed_constants),
        cmocka_unit_test(test_mixed_against_differences),
        cmocka_unit_test(test_closed_forms),
        cmocka_unit_test(test_guards),
        cmocka_unit_test(test_guard_ties),
        cmocka_unit_test(test_guard_loop),
        cmocka_unit_test(test_guard_count),
        cmocka_unit_test(test_selections),
        cmocka_unit_test(test_edge_values),
        cmocka_unit_test(test_ctx_not_read),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_evaluate),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_inside_recordings),
        cmocka_unit_test(test_foreign_from_enclosing),
        cmocka_unit_test(test_long_program),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_scalar_drivers_on_vector_programs),
        cmocka_unit_test_teardown(test_csr_on_early_failure, reset_settings),
        cmocka_unit_test(test_unsupported_blocks),
        cmocka_unit_test(test_unsupported_nested),
        cmocka_unit_test(test_unsupported_hand_made),
        cmocka_unit_test(test_unsupported_hand_made_input),
        cmocka_unit_test(test_foreign),
        cmocka_unit_test_teardown(test_tape_limit, reset_settings),
        cmocka_unit_test_teardown(test_checks, reset_settings),
        cmocka_unit_test(test_calls),
        cmocka_unit_test(test_calls_closed_forms),
        cmocka_unit_test_teardown(test_calls_ctx_read, reset_settings),
        cmocka_unit_test_teardown(test_calls_failing, reset_settings),
        cmocka_unit_test(test_calls_threads),
        cmocka_unit_test(test_calls_inside_recordings),
        AF_TEST(AF_RECORD),
        AF_TEST(AF_RECORD_FUNCTION),
        AF_TEST(AF_VALUE),
        AF_TEST(AF_GRADIENT),
        AF_TEST(AF_HVP),
        AF_TEST(AF_JACOBIAN),
        AF_TEST(AF_JVP),
        AF_TEST(AF_VJP),
        AF_TEST(AF_SPARSE_JACOBIAN),
        AF_TEST(AF_SPARSE_HESSIAN),
        AF_TEST(AF_SPARSE_HESSIAN_VALUES),
        AF_TEST(AF_EVALUATE_FIRST),
        AF_TEST(AF_EVALUATE_AGAIN),
        AF_CALLS_TEST(AF_RECORD),
        AF_CALLS_TEST(AF_RECORD_FUNCTION),
        AF_CALLS_TEST(AF_VALUE),
        AF_CALLS_TEST(AF_GRADIENT),
        AF_CALLS_TEST(AF_HVP),
        AF_CALLS_TEST(AF_JACOBIAN),
        AF_CALLS_TEST(AF_JVP),
        AF_CALLS_TEST(AF_VJP),
        AF_CALLS_TEST(AF_SPARSE_JACOBIAN),
        AF_CALLS_TEST(AF_SPARSE_HESSIAN),
        AF_CALLS_TEST(AF_SPARSE_HESSIAN_VALUES),
        AF_CALLS_TEST(AF_EVALUATE_FIRST),
        AF_CALLS_TEST(AF_EVALUATE_AGAIN),
        POW_TEST(0), POW_TEST(1), POW_TEST(2), POW_TEST(3), POW_TEST(4), POW_TEST(5),
        POW_TEST(6), POW_TEST(7), POW_TEST(8),
    };
    return cmocka_run_group_tests_name("program", tests, NULL, NULL);
}
