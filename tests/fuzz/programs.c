/* Recorded programs (ad_program_record, ad_program_record_function;
 * README.md, "Recorded programs"): the program under test is recorded at
 * its point x, and every replay is run at x and at two points near it,
 * against the same driver applied to the interpreted function there.
 *
 *   record     the status: AD_ENOTSUP exactly where the recording at x
 *              holds a block a program cannot keep (a nested call, a
 *              recorded matrix or a product
 *              of a constant one with an active vector, a checkpointed
 *              loop of some steps, a nested ad_gradient_r / ad_jvp_r, any
 *              of them with an argument that is a value of the
 *              recording), else the recording's own (AD_OK, or a nested
 *              call's failure); *P NULL on error; the statistics: n, m,
 *              and one guard per branch whose operands hold a value of
 *              the recording
 *   replay     at x, and at x' where the interpreted f makes the same
 *              operations: status and every output bit for bit (any NaN
 *              equal to any NaN) those of the driver on f: ad_program_value
 *              (f on constants), _gradient, _hvp, _sparse_hessian,
 *              _sparse_hessian_values (into the structure ad_sparse_hessian
 *              gave at x), _jacobian, _jvp, _vjp, _sparse_jacobian
 *   branch     at x' where a guard kept at x comes out the other way (the
 *              interpreted f, run on ad_real at x', takes the other side
 *              of that branch, and of none before it): AD_EBRANCH from
 *              every replay, NaN outputs, sparse results empty (the values
 *              call's structure unchanged); AD_EBRANCH anywhere else is a
 *              failure
 *   evaluate   ad_program_evaluate along x, x'', x', x and once without a
 *              gradient: ad_gradient's status and bits at every point
 *              (it records again where a guard fails)
 *
 * A nested ad_gradient (OP_NEST) is a constant of the recording computed
 * from values (ad_value): a program keeps it as it was at x (docs/api.md,
 * "Recorded programs").  Where such a constant moved at x' and reaches an
 * output, an operation of the recording or a kept guard, nothing is
 * compared there (counted). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_ctx.h"

enum { PG_PROGRAMS, PG_NOTSUP, PG_KEPT, PG_POINTS, PG_SAME, PG_BRANCH, PG_STALE, PG_BITS,
       PG_GUARDS, PG_EVAL, PG_EVAL_SKIP, PG_FAILED, PG_COUNT };
_Static_assert(PG_COUNT <= PROG_COUNTS, "check.h: PROG_COUNTS");

#define NPTS 3

int program_every = 1, program_this = 1;

static double *dalloc(int n)
{
    double *a = malloc(((size_t)n + 1) * sizeof *a);
    for (int i = 0; i <= n; i++)
        a[i] = -12345.0;  /* anything a call fails to write shows */
    return a;
}

static int same_bits(double a, double b) { return (a != a && b != b) || !memcmp(&a, &b, sizeof a); }

/* The known classes of a replay's failure, asked at the values f has
 * where it is compared (program_point_values, set around each point). */
static const char *const program_classes[] = {"program-fmin-fmax-signed-zero"};

static void pfail(check_ctx *c, const char *driver, const char *kind, int i, int j, double got,
                  ld want)
{
    failure f = {driver, kind, i, j, got, want, 0, NULL};
    report *r = c->r;
    if (program_point_values)
        f.known = known_defect_among(c, &f, program_classes, 1);
    int unknown = !f.known || known_is_bug(f.known);
    r->nfail++;
    r->nunknown += unknown;
    if (r->nfail <= FUZZ_KEEP)
        r->f[r->nfail - 1] = f;
    else if (unknown)
        for (int q = 0; q < FUZZ_KEEP; q++)  /* unknown failures first (as check.c) */
            if (r->f[q].known && !known_is_bug(r->f[q].known)) {
                r->f[q] = f;
                break;
            }
}

/* ---- the points: x, x' (each finite coordinate moved by about 2^-10 of
 * itself, 2^-20 at 0, as cross.c's) and x'' (moved by a quarter to a
 * half, alternately towards 0 and away, so that branches flip) ---- */

static void points(const prog *p, double **pt)
{
    pt[0] = p->x;
    for (int k = 1; k < NPTS; k++)
        pt[k] = dalloc(p->n);
    for (int i = 0; i < p->n; i++) {
        double v = p->x[i];
        pt[1][i] = !isfinite(v) ? v : v == 0 ? 0x1p-20 : v + ldexp(1.0, ilogb(v) - 10);
        pt[2][i] = !isfinite(v) ? v : v == 0 ? (i & 1 ? -0.375 : 0.375)
                 : i & 1 ? v * 0.625 : fabs(v) < 1e300 ? v * 1.5 : v * 0.75;
    }
}

/* ---- what the interpreted f does at a point: every slot's value, as f
 * computes it on ad_real under a recording, and whether it is a value of
 * the recording ---- */

typedef struct at {
    double *val;
    unsigned char *act;
    ad_status st;
} at;

/* A block that the recording at x holds and a program cannot keep: a
 * nested call with an argument of the recording (externals and loops are
 * kept as calls, made again at each replay); a product
 * with a matrix (recorded, or constant with an active vector: a record
 * of constant partials, which a program does not keep either) with an
 * output of the recording (a constant matrix's row whose range, by the
 * shape its constant zeros make, reads no active entry is a constant). */
static int holds_block(const prog *run, const unsigned char *act)
{
    for (int j = 0; j < run->ncode; j++) {
        const insn *in = &run->code[j];
        if (in->op == OP_MAT_VEC || in->op == OP_MAT_SQNORM || in->op == OP_MAT_MUL ||
            in->op == OP_MAT_MAP) {  /* ad_mat_mul, ad_mat_map: an active result is refused */
            for (int o = 0; o < in->nout; o++)
                if (act[in->out + o])
                    return 1;
            continue;
        }
        if (in->op == OP_COLLECTIVE)  /* recorded always (active set), refused by a program */
            return 1;
        int block = in->op == OP_NESTR;
        for (int i = 0; block && i < prog_nargs(in); i++)
            if (act[run->args[in->arg + i]])
                return 1;
    }
    return 0;
}

/* Branches whose guard the recording keeps: an operand of the recording. */
static int kept(const insn *in, const unsigned char *act)
{
    return in->op == OP_BRANCH && (act[in->a] || act[in->b]);
}

enum { SAME, BRANCH, STALE, UNKEPT };

/* What a program recorded where f did A may do where f does B: SAME (f
 * makes the same operations: every replay is the driver's), BRANCH (a kept
 * guard comes out the other way first: AD_EBRANCH), STALE (a nested
 * gradient's constant moved and reaches what the program keeps), UNKEPT (a
 * branch not kept came out the other way, and not from a moved constant:
 * the fuzzer's model is wrong).  *which: the branch's instruction. */
static int compare_points(const prog *run, const at *A, const at *B, int *which)
{
    int ns = run->nslots, res = SAME;
    unsigned char *taint = calloc((size_t)ns + 1, 1);
    int *reads = malloc(((size_t)run->nargs + 8) * sizeof *reads);
    *which = -1;
    for (int j = 0; j < run->ncode && res == SAME; j++) {
        const insn *in = &run->code[j];
        int t = 0, live = 0;
        if (in->op == OP_NEST) {
            t = !same_bits(A->val[in->out], B->val[in->out]);
        } else if (in->op == OP_BRANCH) {
            t = taint[in->a] || taint[in->b] || taint[in->c] || taint[in->d];
            if (kept(in, A->act) && (taint[in->a] || taint[in->b]))
                res = STALE;
            else if (!taint[in->a] && !taint[in->b] &&
                     branch_holds(in->mode, A->val[in->a], A->val[in->b]) !=
                         branch_holds(in->mode, B->val[in->a], B->val[in->b]))
                res = kept(in, A->act) ? BRANCH : UNKEPT, *which = j;
        } else {
            int nr = insn_reads(run, in, A->val, reads);
            for (int k = 0; k < nr; k++)
                t |= taint[reads[k]];
        }
        for (int o = 0; o < in->nout; o++)
            live |= A->act[in->out + o];
        if (t && live && in->op != OP_NEST)
            res = res == SAME ? STALE : res;
        for (int o = 0; o < in->nout; o++)
            taint[in->out + o] = (unsigned char)t;
    }
    for (int j = 0; j < run->m && res == SAME; j++)
        if (taint[run->outs[j]])
            res = STALE;
    free(taint), free(reads);
    return res;
}

/* ---- the drivers: one call, its outputs in a row of doubles (value
 * entries, which a failure makes NaN, and structure entries) ---- */

enum { D_VALUE, D_VALUE1, D_GRADIENT, D_HVP, D_SPARSE_HESSIAN, D_VALUES, D_JACOBIAN, D_JVP,
       D_VJP, D_SPARSE_JACOBIAN, D_COUNT };

static const char *const pname[D_COUNT] = {
    "ad_program_value", "ad_program_value(objective)", "ad_program_gradient", "ad_program_hvp",
    "ad_program_sparse_hessian", "ad_program_sparse_hessian_values", "ad_program_jacobian",
    "ad_program_jvp", "ad_program_vjp", "ad_program_sparse_jacobian",
};

typedef struct row {
    double *v;
    unsigned char *isval;
    int len, cap;
} row;

static void put(row *r, double x, int isval)
{
    if (r->len == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->v = realloc(r->v, (size_t)r->cap * sizeof *r->v);
        r->isval = realloc(r->isval, (size_t)r->cap);
    }
    r->v[r->len] = x;
    r->isval[r->len++] = (unsigned char)isval;
}

static void put_all(row *r, const double *x, int n)
{
    for (int i = 0; i < n; i++)
        put(r, x[i], 1);
}

/* A CSR the driver filled: on success its structure and values; on
 * failure it must be empty (all fields 0), put as such. */
static void put_csr(row *r, const ad_csr *S, ad_status st)
{
    if (st != AD_OK) {
        put(r, (double)(S->rows | S->cols | S->nnz) + (S->row_ptr || S->col || S->val), 0);
        return;
    }
    put(r, (double)S->rows, 0), put(r, (double)S->cols, 0), put(r, (double)S->nnz, 0);
    for (size_t i = 0; i <= S->rows; i++)
        put(r, (double)S->row_ptr[i], 0);
    for (size_t e = 0; e < S->nnz; e++)
        put(r, (double)S->col[e], 0), put(r, S->val[e], 1);
}

static ad_csr csr_copy(const ad_csr *S)
{
    ad_csr W = *S;
    W.row_ptr = malloc((S->rows + 1) * sizeof *W.row_ptr);
    memcpy(W.row_ptr, S->row_ptr, (S->rows + 1) * sizeof *W.row_ptr);
    W.col = malloc((S->nnz + 1) * sizeof *W.col);
    W.val = malloc((S->nnz + 1) * sizeof *W.val);
    if (S->nnz)
        memcpy(W.col, S->col, S->nnz * sizeof *W.col);
    for (size_t e = 0; e < S->nnz; e++)
        W.val[e] = -12345.0;
    return W;
}

static void csr_copy_free(ad_csr *W)
{
    free(W->row_ptr), free(W->col), free(W->val);
}

/* f's outputs on constants, outside any recording (what ad_program_value
 * replays) */
static void f_value(const prog *run, const double *x, double *y)
{
    ad_real *xs = malloc(((size_t)run->n + 1) * sizeof *xs), *ys = malloc(((size_t)run->m + 1) * sizeof *ys);
    for (int i = 0; i < run->n; i++)
        xs[i] = ad_const(x[i]);
    fuzz_function(xs, (size_t)run->n, ys, (size_t)run->m, (void *)run);
    for (int j = 0; j < run->m; j++)
        y[j] = ys[j].v;
    free(xs), free(ys);
}

typedef struct progs {
    ad_program *s, *f;  /* ad_program_record's (output 0), ad_program_record_function's */
} progs;

/* Whether W still has S's structure. */
static int same_structure(const ad_csr *W, const ad_csr *S)
{
    return W->rows == S->rows && W->cols == S->cols && W->nnz == S->nnz && W->row_ptr && W->col &&
           !memcmp(W->row_ptr, S->row_ptr, (S->rows + 1) * sizeof *S->row_ptr) &&
           (!S->nnz || !memcmp(W->col, S->col, S->nnz * sizeof *S->col));
}

/* Driver d at z, on f (P NULL) or on the programs P; S0: the structure
 * the values call fills.  *moved: the values call changed the structure. */
static ad_status drive(const prog *run, int d, const progs *P, const ad_csr *S0, const double *z,
                       row *r, int *moved)
{
    size_t n = (size_t)run->n, m = (size_t)run->m;
    int N = run->n, M = run->m;
    void *ctx = (void *)run;
    double fx, *a = dalloc(N * M + N + M), *b = dalloc(N + M);
    ad_csr S;
    memset(&S, 0, sizeof S);
    ad_status st = AD_OK;
    switch (d) {
    case D_VALUE:
        if (P)
            st = ad_program_value(P->f, z, a);
        else
            f_value(run, z, a);
        put_all(r, a, M);
        break;
    case D_VALUE1:
        if (P)
            st = ad_program_value(P->s, z, a);
        else
            f_value(run, z, a);
        put_all(r, a, 1);
        break;
    case D_GRADIENT:
        st = P ? ad_program_gradient(P->s, z, &fx, a) : ad_gradient(fuzz_objective, ctx, n, z, &fx, a);
        put_all(r, &fx, 1), put_all(r, a, N);
        break;
    case D_HVP:
        st = P ? ad_program_hvp(P->s, z, run->v, &fx, a, b)
               : ad_hvp(fuzz_objective, ctx, n, z, run->v, &fx, a, b);
        put_all(r, &fx, 1), put_all(r, a, N), put_all(r, b, N);
        break;
    case D_SPARSE_HESSIAN:
        st = P ? ad_program_sparse_hessian(P->s, z, &fx, a, &S)
               : ad_sparse_hessian(fuzz_objective, ctx, n, z, &fx, a, &S);
        put_all(r, &fx, 1), put_all(r, a, N), put_csr(r, &S, st);
        if (st == AD_OK)
            ad_csr_free(&S);
        break;
    case D_VALUES: {
        ad_csr W = csr_copy(S0);
        st = P ? ad_program_sparse_hessian_values(P->s, z, &fx, a, &W)
               : ad_sparse_hessian_values(fuzz_objective, ctx, n, z, &fx, a, &W);
        put_all(r, &fx, 1), put_all(r, a, N);
        *moved = !same_structure(&W, S0);
        if (!*moved)
            put_all(r, W.val, (int)W.nnz);
        csr_copy_free(&W);
        break;
    }
    case D_JACOBIAN:
        st = P ? ad_program_jacobian(P->f, z, b, a) : ad_jacobian(fuzz_function, ctx, n, z, m, b, a);
        put_all(r, b, M), put_all(r, a, N * M);
        break;
    case D_JVP:
        st = P ? ad_program_jvp(P->f, z, run->v, b, a) : ad_jvp(fuzz_function, ctx, n, z, run->v, m, b, a);
        put_all(r, b, M), put_all(r, a, M);
        break;
    case D_VJP:
        st = P ? ad_program_vjp(P->f, z, run->w, b, a) : ad_vjp(fuzz_function, ctx, n, z, m, run->w, b, a);
        put_all(r, b, M), put_all(r, a, N);
        break;
    case D_SPARSE_JACOBIAN:
        st = P ? ad_program_sparse_jacobian(P->f, z, b, &S) : ad_sparse_jacobian(fuzz_function, ctx, n, z, m, b, &S);
        put_all(r, b, M), put_csr(r, &S, st);
        if (st == AD_OK)
            ad_csr_free(&S);
        break;
    default: abort();
    }
    free(a), free(b);
    return st;
}

/* ---- one point ---- */

/* Every replay at z (point k) against the driver on f there (e SAME), or
 * AD_EBRANCH with NaN outputs (e BRANCH). */
static void replays_at(check_ctx *c, const progs *P, const ad_csr *S0, const double *z, int k, int e,
                       const double *vals)
{
    const prog *run = c->run;
    long *cnt = c->r->prog;
    program_point_values = vals;
    for (int d = 0; d < D_COUNT; d++) {
        row rf = {0}, rp = {0};
        int mf = 0, mp = 0;
        ad_status sp = drive(run, d, P, S0, z, &rp, &mp);
        if (mp)
            pfail(c, pname[d], "structure", -1, k, 0, 0);
        if (e == BRANCH) {
            if (sp != AD_EBRANCH)
                pfail(c, pname[d], "branch-status", -1, k, (double)sp, AD_EBRANCH);
            for (int q = 0; q < rp.len; q++)
                if (rp.isval[q] ? rp.v[q] == rp.v[q] : rp.v[q] != 0) {
                    pfail(c, pname[d], "branch-nan", q, k, rp.v[q], NAN);
                    break;
                }
        } else {
            ad_status sf = drive(run, d, NULL, S0, z, &rf, &mf);
            if (sp != sf)
                pfail(c, pname[d], sp == AD_EBRANCH ? "unexpected-branch" : "status", (int)sf, k,
                      (double)sp, sf);
            else if (rp.len != rf.len)
                pfail(c, pname[d], "length", -1, k, rp.len, rf.len);
            else
                for (int q = 0; q < rp.len; q++) {
                    cnt[PG_BITS]++;
                    if (!same_bits(rp.v[q], rf.v[q])) {
                        pfail(c, pname[d], rp.isval[q] ? "value-bits" : "structure-bits", q, k, rp.v[q],
                              rf.v[q]);
                        break;
                    }
                }
        }
        free(rf.v), free(rf.isval), free(rp.v), free(rp.isval);
    }
    program_point_values = NULL;
}

/* ad_program_evaluate along the points (x, x'', x', x), each against
 * ad_gradient there, then once without a gradient at x against f's value:
 * the same status and bits, wherever the program records again.  notsup:
 * f cannot be kept (each call is ad_gradient's). */
static void evaluations(check_ctx *c, double *const *pt, const at *A, int notsup)
{
    static const int order[] = {0, 2, 1, 0, 0};
    const prog *run = c->run;
    size_t n = (size_t)run->n;
    ad_program *E = NULL;
    int rec = -1;  /* the point E was recorded at (-1: none yet) */
    double fx, fe, *g = dalloc(run->n), *ge = dalloc(run->n), *y = dalloc(run->m);
    for (int t = 0; t < 5; t++) {
        int k = order[t], last = t == 4, which, e = SAME;
        if (k >= NPTS || (k && !run->n))
            continue;
        if (rec >= 0 && !notsup)
            e = compare_points(run, &A[rec], &A[k], &which);
        if (e == STALE || e == UNKEPT) {  /* kept constants moved: record anew */
            c->r->prog[PG_EVAL_SKIP]++;
            ad_program_free(E);
            E = NULL;
            rec = -1;
            continue;
        }
        if (e == BRANCH || rec < 0)
            rec = k;
        ad_status se = ad_program_evaluate(&E, fuzz_objective, (void *)run, n, pt[k], &fe,
                                           last ? NULL : ge);
        ad_status sf = AD_OK;
        if (last)
            f_value(run, pt[k], y), fx = y[0];
        else
            sf = ad_gradient(fuzz_objective, (void *)run, n, pt[k], &fx, g);
        c->r->prog[PG_EVAL]++;
        program_point_values = A[k].val;
        if (getenv("FUZZ_DEBUG"))
            fprintf(stderr, "evaluate at point %d (recorded at %d, e %d): %d fx %g, ad_gradient %d fx %g\n", k, rec, e,
                    (int)se, fe, (int)sf, fx);
        if (se != sf) {
            pfail(c, "ad_program_evaluate", "status", (int)sf, k, (double)se, sf);
            continue;
        }
        if (!same_bits(fe, fx))
            pfail(c, "ad_program_evaluate", "value-bits", -1, k, fe, fx);
        for (int i = 0; !last && i < run->n; i++)
            if (!same_bits(ge[i], g[i])) {
                pfail(c, "ad_program_evaluate", "value-bits", i, k, ge[i], g[i]);
                break;
            }
    }
    program_point_values = NULL;
    ad_program_free(E);
    free(g), free(ge), free(y);
}

/* ---- the check ---- */

static void stats(check_ctx *c, const char *driver, const ad_program *P, int m, long guards)
{
    ad_program_stats st;
    if (ad_program_stats_get(P, &st) != AD_OK) {
        pfail(c, driver, "stats", -1, -1, 0, 0);
        return;
    }
    if (st.inputs != (size_t)c->run->n || st.outputs != (size_t)m)
        pfail(c, driver, "stats-shape", (int)st.inputs, (int)st.outputs, (double)st.outputs, m);
    if (st.guards != (size_t)guards)
        pfail(c, driver, "stats-guards", -1, -1, (double)st.guards, guards);
}

void program_checks(check_ctx *c)
{
    const prog *run = c->run;
    int n = run->n, ns = run->nslots;
    long *cnt = c->r->prog;
    double *pt[NPTS];
    at A[NPTS];
    /* a block's call refused in the recording (ad_external, ad_mat_make:
     * AD_ENOTSUP) counts as the interpreter's error: not here */
    int errors = fuzz_interp_errors;
    cnt[PG_PROGRAMS]++;
    points(run, pt);
    for (int k = 0; k < NPTS; k++) {
        A[k].val = dalloc(ns);
        A[k].act = calloc((size_t)ns + 1, 1);
        A[k].st = run_recorded(run, pt[k], A[k].val, A[k].act);
    }
    /* the recordings */
    int block = holds_block(run, A[0].act);
    progs P = {NULL, NULL};
    ad_status ss = ad_program_record(fuzz_objective, (void *)run, (size_t)n, run->x, &P.s);
    ad_status sf = ad_program_record_function(fuzz_function, (void *)run, (size_t)n, (size_t)run->m, run->x, &P.f);
    ad_status want = block ? AD_ENOTSUP : A[0].st;
    for (int q = 0; q < 2; q++) {
        ad_status got = q ? sf : ss;
        const char *name = q ? "ad_program_record_function" : "ad_program_record";
        /* a block and a nested call's failure: whichever the recording meets first */
        if (got != want && !(block && A[0].st != AD_OK && got == A[0].st))
            pfail(c, name, "record-status", (int)want, -1, (double)got, want);
        if (got != AD_OK && (q ? P.f : P.s))
            pfail(c, name, "record-null", -1, -1, 0, 0);
    }
    cnt[PG_NOTSUP] += ss == AD_ENOTSUP;
    cnt[PG_FAILED] += ss != AD_OK && ss != AD_ENOTSUP;
    if (ss == AD_OK && sf == AD_OK) {
        cnt[PG_KEPT]++;
        long guards = 0;
        for (int j = 0; j < run->ncode; j++)
            guards += kept(&run->code[j], A[0].act);
        cnt[PG_GUARDS] += guards;
        stats(c, "ad_program_record", P.s, 1, guards);
        stats(c, "ad_program_record_function", P.f, run->m, guards);
        /* m > 1: the scalar replays refuse the program of m outputs */
        if (run->m != 1) {
            double fx, *g = dalloc(n);
            ad_status s = ad_program_gradient(P.f, run->x, &fx, g);
            if (s != AD_EINVAL || fx == fx)
                pfail(c, "ad_program_gradient", "einval", -1, -1, (double)s, AD_EINVAL);
            free(g);
        }
        /* the structure the values calls fill: ad_sparse_hessian's at x (an
         * empty one where it fails) */
        ad_csr S0;
        double fx, *g = dalloc(n);
        int own = ad_sparse_hessian(fuzz_objective, (void *)run, (size_t)n, run->x, &fx, g, &S0) != AD_OK;
        if (own) {
            memset(&S0, 0, sizeof S0);
            S0.rows = S0.cols = (size_t)n;
            S0.row_ptr = calloc((size_t)n + 1, sizeof *S0.row_ptr);
            S0.col = malloc(sizeof *S0.col);
            S0.val = malloc(sizeof *S0.val);
        }
        free(g);
        for (int k = 0; k < NPTS; k++) {
            int which, e = k ? compare_points(run, &A[0], &A[k], &which) : SAME;
            if (k && (!n || !memcmp(pt[k], pt[0], (size_t)n * sizeof *pt[0])))
                continue;  /* no other point */
            cnt[PG_POINTS]++;
            if (e == UNKEPT) {
                pfail(c, "ad_program_record", "unkept-branch", which, k, 0, 0);
                continue;
            }
            if (e == STALE) {
                cnt[PG_STALE]++;
                continue;
            }
            cnt[e == BRANCH ? PG_BRANCH : PG_SAME]++;
            replays_at(c, &P, &S0, pt[k], k, e, A[k].val);
        }
        if (own)
            free(S0.row_ptr), free(S0.col), free(S0.val);
        else
            ad_csr_free(&S0);
    }
    evaluations(c, pt, A, ss == AD_ENOTSUP);
    ad_program_free(P.s);
    ad_program_free(P.f);
    for (int k = 0; k < NPTS; k++) {
        free(A[k].val), free(A[k].act);
        if (k)
            free(pt[k]);
    }
    fuzz_interp_errors = errors;
}

void programs_summary(const long *t)
{
    if (!t[PG_PROGRAMS])
        return;
    printf("fuzz: recorded programs: %ld programs, %ld recorded (%ld guards kept), %ld AD_ENOTSUP "
           "(a block), %ld failed otherwise; %ld points replayed: %ld the same operations "
           "(%ld values bit for bit), %ld AD_EBRANCH (a guard flipped), %ld not compared (a nested "
           "gradient's constant moved); ad_program_evaluate: %ld calls, %ld points skipped\n",
           t[PG_PROGRAMS], t[PG_KEPT], t[PG_GUARDS], t[PG_NOTSUP], t[PG_FAILED], t[PG_POINTS],
           t[PG_SAME], t[PG_BITS], t[PG_BRANCH], t[PG_STALE], t[PG_EVAL], t[PG_EVAL_SKIP]);
}
