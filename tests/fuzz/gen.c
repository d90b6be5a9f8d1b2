/* The random program generator.
 *
 * Two input modes: "tame" programs keep the operands of domain-restricted
 * operations inside their domains (the generator evaluates each
 * instruction on double as it appends it), so most derivatives are finite
 * and checked to the tolerance; "edge" programs draw inputs and constants
 * from the edges: +-0, subnormals, 1e-300, 1e300, values whose products
 * pass 2^511 and 2^-1022, poles, Inf and NaN.  One program in LOOP_SHARE
 * also holds checkpointed loops, whose steps are programs of their own
 * (gen_loop, gen_step; README.md, "Checkpointed loops").  Branches compare
 * through the guards (ad_lt, ...), which a recorded program keeps; one
 * program in GUARD_SHARE of the others also holds branches placed to flip
 * near its point (gen_guard; README.md, "Recorded programs"). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prog.h"

/* One program in LOOP_SHARE holds checkpointed loops; of the others, one
 * in NEST_SHARE holds nested derivatives (ad_gradient_r, ad_jvp_r). */
#define LOOP_SHARE 6
#define NEST_SHARE 6
/* Of the programs with neither, one in GUARD_SHARE holds branches placed
 * to flip near its point (gen_guard; README.md, "Recorded programs"). */
#define GUARD_SHARE 5
/* Of the programs without loops and nested derivatives, one in MAT_SHARE
 * holds recorded-matrix products and maps (ad_mat_mul, ad_mat_map; gen_mat),
 * from a stream of their own, beside the instructions it has without them. */
#define MAT_SHARE 4
/* Of the programs without loops and nested derivatives, one in COLL_SHARE
 * holds ad_external_collective nodes (gen_coll), from a stream of their
 * own, beside the instructions it has without them. */
#define COLL_SHARE 5

uint64_t rng_next(rng *r)
{
    /* splitmix64: every seed a good stream */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-53; }
int rng_int(rng *r, int n) { return n <= 0 ? 0 : (int)(rng_next(r) % (uint64_t)n); }

static double ordinary(rng *r)
{
    double v = 4.0 * rng_unit(r) - 2.0;
    return rng_int(r, 4) == 0 ? ldexp(v, rng_int(r, 9) - 4) : v;
}

static const double edges[] = {
    0.0, -0.0, 1.0, -1.0, 0.5, 2.0, -2.0, 3.0, -3.0, 0x1p-1074, -0x1p-1074, 1e-310, -1e-310,
    0x1p-1022, 1e-300, -1e-300, 1e300, -1e300, 1e-200, 1e200, 1e-160, 1e160, 1e154, 0x1p511,
    0x1p-511, 1e-100, 1e100, DBL_MAX, -DBL_MAX, 700.0, -745.0, 710.0, 1e-20, 1e20, 0.999999,
    1.000001, 171.5, -0.5, INFINITY, -INFINITY, NAN,
};

/* An input or constant of an edge program. */
double gen_input(rng *r)
{
    if (rng_int(r, 3) == 0)
        return ordinary(r);
    return edges[rng_int(r, (int)(sizeof edges / sizeof edges[0]))];
}

typedef struct gen {
    rng r;
    prog *p;
    double *val;   /* the double value of every slot so far */
    int cap_code, cap_args, cap_consts, cap_val;
    int tame, hub, chain;
    int maxlen;    /* arrays no longer than this (a step program's), 0: any */
    int loop_depth;  /* 0: the program; 1: a loop's step; 2: a loop's inside a step */
    int nest_level;  /* 0: the program; 1: a nested program (NESTR); 2: one inside that */
    rng br;        /* the branches' comparisons (gen_branch) */
} gen;

/* The seed of a program's branch stream from its main stream's. */
#define BRANCH_STREAM 0xbb67ae8584caa73bU

static double num(gen *g) { return g->tame ? ordinary(&g->r) : gen_input(&g->r); }

/* A slot to read: the newest (a chain), the hub (fan-out) or any. */
static int pick(gen *g)
{
    int ns = g->p->nslots;
    int u = rng_int(&g->r, 10);
    if (g->chain && u < 7)
        return ns - 1;
    if (g->hub >= 0 && u < 4)
        return g->hub;
    if (u < 5)
        return ns - 1 - rng_int(&g->r, ns < 4 ? ns : 4);
    return rng_int(&g->r, ns);
}

static int push_arg(gen *g, int slot)
{
    prog *p = g->p;
    p->args = prog_grow(p->args, &g->cap_args, p->nargs + 1, sizeof *p->args);
    p->args[p->nargs] = slot;
    return p->nargs++;
}

static int push_const(gen *g, double c)
{
    prog *p = g->p;
    p->consts = prog_grow(p->consts, &g->cap_consts, p->nconsts + 1, sizeof *p->consts);
    p->consts[p->nconsts] = c;
    return p->nconsts++;
}

/* Appends in, evaluates it on double, returns its first output slot. */
static int append(gen *g, insn in)
{
    prog *p = g->p;
    in.out = p->nslots;
    p->code = prog_grow(p->code, &g->cap_code, p->ncode + 1, sizeof *p->code);
    p->code[p->ncode++] = in;
    p->nslots += in.nout;
    g->val = prog_grow(g->val, &g->cap_val, p->nslots, sizeof *g->val);
    run_double_step(p, g->val, p->ncode - 1);
    return in.out;
}

static insn blank(int op)
{
    insn in;
    memset(&in, 0, sizeof in);
    in.op = op;
    in.a = in.b = in.c = in.d = -1;
    in.nout = 1;
    return in;
}

/* Whether a tame program may apply op to v. */
static int in_domain(int op, double v)
{
    switch (op) {
    case OP_SQRT: case OP_LOG: case OP_LOG2: case OP_LOG10: return v > 0.0;
    case OP_LOG1P: return v > -1.0;
    case OP_ACOSH: return v >= 1.0 && v < 1e10;
    case OP_ASIN: case OP_ACOS: case OP_ATANH: return fabs(v) < 1.0;
    case OP_EXP: case OP_EXPM1: case OP_SINH: case OP_COSH: return fabs(v) < 50.0;
    case OP_TAN: case OP_SIN: case OP_COS: return fabs(v) < 100.0;
    case OP_LGAMMA: case OP_TGAMMA: return fabs(v) < 30.0 && !(v <= 0.0 && v == floor(v));
    case OP_CBRT: return v != 0.0;
    case OP_ERF: case OP_ERFC: case OP_TANH: case OP_ATAN: case OP_ASINH: return fabs(v) < 1e6;
    case OP_NESTR: return fabs(v) < 4.0;  /* a nested call's argument: its sweep's partials in range */
    default: return isfinite(v) && fabs(v) < 1e6;
    }
}

/* A slot whose value op accepts, in a tame program: one of a few picks,
 * else a new slot mapped into the domain. */
static int operand(gen *g, int op)
{
    for (int t = 0; t < 6; t++) {
        int s = pick(g);
        if (!g->tame || in_domain(op, g->val[s]))
            return s;
    }
    insn in = blank(OP_HYPOT);  /* hypot(s, 1) >= 1: every domain above but |x| < 1 */
    in.mode = 1;
    in.k = 1.0 + rng_unit(&g->r);
    in.a = pick(g);
    if (!isfinite(g->val[in.a]) || fabs(g->val[in.a]) > 10.0) {
        in.op = OP_TANH;  /* tanh of a finite value, then scaled below 1 */
        in.mode = 0;
    }
    int s = append(g, in);
    if (in_domain(op, g->val[s]))
        return s;
    in = blank(OP_TANH);
    in.a = s;
    s = append(g, in);
    in = blank(OP_MUL);
    in.mode = 1;
    in.a = s;
    in.k = 0.5;
    return append(g, in);
}

static int array_len(gen *g)
{
    int u = rng_int(&g->r, 20);
    return u < 2 ? 0 : u < 6 ? 1 : u < 18 ? 2 + rng_int(&g->r, 7) : 50 + rng_int(&g->r, 250);
}

static void fill_args(gen *g, insn *in, int count)
{
    in->arg = g->p->nargs;
    for (int i = 0; i < count; i++)
        push_arg(g, pick(g));
}

/* A matrix of slots, sometimes triangular (constant zeros on one side),
 * sometimes with constant (possibly infinite) entries. */
static void fill_matrix(gen *g, insn *in)
{
    int R = in->rows, L = in->len, tri = rng_int(&g->r, 4);
    int *ids = malloc(((size_t)R * (size_t)L + 1) * sizeof *ids);
    for (int j = 0; j < R; j++)
        for (int l = 0; l < L; l++) {
            int zero = (tri == 1 && l > j) || (tri == 2 && l < j);
            if (zero || rng_int(&g->r, 8) == 0) {
                insn c = blank(OP_CONST);
                c.k = zero ? (rng_int(&g->r, 2) ? 0.0 : -0.0) : num(g);
                ids[j * L + l] = append(g, c);
            } else {
                ids[j * L + l] = pick(g);
            }
        }
    in->arg = g->p->nargs;
    for (int i = 0; i < R * L; i++)
        push_arg(g, ids[i]);
    free(ids);
}

/* A branch: s_a cmp s_b ? s_c : s_d, the comparison a guard (ad_lt,
 * ad_gt, ad_le, ad_ge: prog.h).  The comparison comes from a stream of its
 * own (g->br), so that the programs are the fuzzer's before guards, seed
 * for seed; and <= (modes 2, 3) only where the operands differ where the
 * program is generated, so that the values there are the same too. */
static void gen_branch(gen *g)
{
    insn in = blank(OP_BRANCH);
    in.a = pick(g), in.b = pick(g), in.c = pick(g), in.d = pick(g);
    in.mode = rng_int(&g->br, 4);
    if (g->val[in.a] == g->val[in.b])
        in.mode &= 1;
    append(g, in);
}

/* A branch placed to flip (README.md, "Recorded programs"): a value a
 * of the program (an input, or one of the newest slots) against a
 * constant equal to it at the program's point, either way round, under
 * any of the four guards; it takes a itself or another slot.  At the
 * point a tie, which < and <= (> and >=) decide apart; wherever a moves,
 * two of the four guards flip.  Every choice comes from gr, the guards'
 * own stream. */
static void gen_guard(gen *g, rng *gr)
{
    prog *p = g->p;
    int ns = p->nslots;
    int a = p->n && rng_int(gr, 2) ? rng_int(gr, p->n) : ns - 1 - rng_int(gr, ns < 3 ? ns : 3);
    insn k = blank(OP_CONST);
    k.k = g->val[a];
    int ks = append(g, k), swap = rng_int(gr, 2), other = rng_int(gr, ns);
    insn in = blank(OP_BRANCH);
    in.a = swap ? ks : a;
    in.b = swap ? a : ks;
    in.mode = rng_int(gr, 4);
    in.c = a;
    in.d = other != a ? other : ks;
    if (rng_int(gr, 2)) {
        in.c = in.d;
        in.d = a;
    }
    append(g, in);
}

static void gen_array(gen *g, int op)
{
    insn in = blank(op);
    in.len = array_len(g);
    if (g->maxlen && in.len > g->maxlen)
        in.len = 1 + rng_int(&g->r, g->maxlen);
    if (op >= OP_MATVEC) {
        in.len = in.len > 12 ? 12 : in.len;
        in.rows = rng_int(&g->r, 5);
    }
    int L = in.len, R = in.rows;
    switch (op) {
    case OP_DOT: in.mode = rng_int(&g->r, 4) == 0; fill_args(g, &in, 2 * L); break;
    case OP_DOT_RD: case OP_MATVEC:
        in.mode = op == OP_DOT_RD && rng_int(&g->r, 2);  /* ad_dot_dr: the constant first */
        fill_args(g, &in, L);
        in.cst = g->p->nconsts;
        for (int i = 0; i < (op == OP_MATVEC ? R * L : L); i++)
            push_const(g, num(g));
        in.nout = op == OP_MATVEC ? R : 1;
        break;
    case OP_MATVEC_RR: fill_args(g, &in, R * L + L); in.nout = R; break;
    case OP_AXPY:
        in.mode = rng_int(&g->r, 4) == 0;
        in.k = num(g);
        fill_args(g, &in, 2 * L);
        in.nout = L;
        break;
    case OP_MAT_VEC: case OP_MAT_SQNORM: {
        in.mode = rng_int(&g->r, op == OP_MAT_VEC ? 3 : 2);
        fill_matrix(g, &in);
        int nx = in.mode == 1 ? 0 : in.mode == 2 ? 2 * L : L;
        for (int i = 0; i < nx; i++)
            push_arg(g, pick(g));
        in.cst = g->p->nconsts;
        if (in.mode == 1)
            for (int i = 0; i < L; i++)
                push_const(g, num(g));
        in.nout = op == OP_MAT_SQNORM ? 1 : in.mode == 2 ? 2 * R : R;
        break;
    }
    case OP_EXTERNAL:
        in.len = 1 + rng_int(&g->r, 4);
        in.rows = rng_int(&g->r, 4);
        in.sub = rng_int(&g->r, 3) == 0;
        fill_args(g, &in, in.len);
        in.nout = in.rows;
        break;
    default: fill_args(g, &in, L); break;
    }
    if (in.nout > 0)
        append(g, in);
}

static void gen_nest(gen *g, int depth)
{
    prog *p = g->p;
    insn in = blank(OP_NEST);
    in.len = 1 + rng_int(&g->r, 3);
    in.sub = p->nsubs;
    in.d = rng_int(&g->r, in.len + 1) - 1;
    p->subs = realloc(p->subs, (size_t)(p->nsubs + 1) * sizeof *p->subs);
    prog *sub = &p->subs[p->nsubs++];
    gen_program(sub, rng_next(&g->r) | (uint64_t)depth << 62, -in.len);
    fill_args(g, &in, in.len);
    append(g, in);
}

/* A two-argument operation on values so far; in a tame program kept in
 * its domain (pow's base positive and exponent small, no division by
 * nearly 0). */
static void gen_binary(gen *g)
{
    int op = OP_FIRST_BINARY + rng_int(&g->r, OP_FIRST_ARRAY - OP_FIRST_BINARY);
    insn in = blank(op);
    in.mode = rng_int(&g->r, 3);
    in.a = op == OP_POW && g->tame ? operand(g, OP_LOG) : pick(g);
    in.b = pick(g);
    in.k = num(g);
    if (g->tame && op == OP_POW && in.mode == 1)
        in.k = 3.0 * rng_unit(&g->r) - 1.0;
    if (g->tame && op == OP_POW && in.mode == 0 && fabs(g->val[in.b]) > 5.0)
        in.mode = 1, in.k = 2.0;
    if (g->tame && op == OP_POW && in.mode == 2)
        in.k = 0.5 + rng_unit(&g->r), in.a = operand(g, OP_TANH);
    if (g->tame && op == OP_DIV && in.mode != 2 && fabs(g->val[in.b]) < 1e-3)
        in.mode = 1, in.k = 1.5;
    append(g, in);
}

static void gen_insn(gen *g, int depth)
{
    int u = rng_int(&g->r, 100), op;
    if (u < 45) {
        op = OP_FIRST_UNARY + rng_int(&g->r, OP_FIRST_BINARY - OP_FIRST_UNARY);
        insn in = blank(op);
        in.a = operand(g, op);
        append(g, in);
    } else if (u < 72) {
        gen_binary(g);
    } else if (u < 92) {
        gen_array(g, OP_FIRST_ARRAY + rng_int(&g->r, OP_MAT_MUL - OP_FIRST_ARRAY));
    } else if (u < 95) {
        insn in = blank(OP_CONST);
        in.k = num(g);
        append(g, in);
    } else if (u < 98 || depth > 0) {
        gen_branch(g);
    } else {
        gen_nest(g, depth);
    }
}

/* ---- recorded-matrix products and maps (OP_MAT_MUL, OP_MAT_MAP) ---- */

/* A small active entry, for log and sqrt near the edge of their domain:
 * |s| (tame programs; edge ones half the time) times 1e-300, a subnormal,
 * DBL_MIN, ... (0 where s is). */
static int tiny_entry(gen *g, rng *mr)
{
    static const double tiny[] = {1e-300, 0x1p-1070, 0x1p-1022, 1e-160, 1e-20};
    int s = pick(g);
    if (g->tame || rng_int(mr, 2)) {
        insn a = blank(OP_FABS);
        a.a = s;
        s = append(g, a);
    }
    insn in = blank(OP_MUL);
    in.mode = 1;
    in.a = s;
    in.k = tiny[rng_int(mr, 5)];
    return append(g, in);
}

/* count entries of a matrix into ids: slots so far, one in eight a
 * constant (zeros among them), and for a map by log or sqrt (map >= 0) in
 * a tame program slots in the domain, one in four (any program) tiny. */
static void mat_entries(gen *g, rng *mr, int *ids, int count, int map)
{
    int edge = map == AD_MAP_LOG || map == AD_MAP_SQRT;
    for (int i = 0; i < count; i++) {
        int u = rng_int(mr, 8);
        if (u == 0) {
            insn c = blank(OP_CONST);
            c.k = rng_int(mr, 3) == 0 ? (rng_int(mr, 2) ? 0.0 : -0.0) : num(g);
            ids[i] = append(g, c);
        } else if (edge && u < 3) {
            ids[i] = tiny_entry(g, mr);
        } else {
            ids[i] = edge && g->tame ? operand(g, OP_LOG) : pick(g);
        }
    }
}

/* One ad_mat_mul or ad_mat_map node (prog.h): 1 to 3 rows and columns,
 * inner dimension 0 to 3; every kind, bias, stage and map from mr. */
static void gen_mat(gen *g, rng *mr)
{
    prog *p = g->p;
    int *ids = malloc(40 * sizeof *ids);
    if (rng_int(mr, 3) == 0) {
        insn in = blank(OP_MAT_MAP);
        in.rows = 1 + rng_int(mr, 3);
        in.len = 1 + rng_int(mr, 3);
        in.sub = rng_int(mr, MAP_USER_NOD2F + 1);
        mat_entries(g, mr, ids, in.rows * in.len, in.sub);
        in.arg = p->nargs;
        for (int i = 0; i < in.rows * in.len; i++)
            push_arg(g, ids[i]);
        in.nout = in.rows * in.len;
        append(g, in);
        free(ids);
        return;
    }
    insn in = blank(OP_MAT_MUL);
    int kind = rng_int(mr, 4), stage = rng_int(mr, 4);
    int m = 1 + rng_int(mr, 3), k = rng_int(mr, 8) == 0 ? 0 : 1 + rng_int(mr, 3), n = 1 + rng_int(mr, 3);
    if (kind == 3)
        k = n = m;
    if (stage == 1)
        n = m;
    if (stage == 2)
        k = m;
    int bias = rng_int(mr, 2), bconst = bias && rng_int(mr, 3) == 0;
    in.rows = m, in.len = k, in.cols = n;
    in.mode = kind | bias << 2 | bconst << 3 | stage << 4;
    in.sub = stage == 3 ? rng_int(mr, MAP_USER_NOD2F + 1) : 0;
    int na = (kind != 2 ? m * k : 0) + (kind == 0 || kind == 2 ? k * n : 0) + (bias && !bconst ? m : 0);
    mat_entries(g, mr, ids, na, -1);
    in.arg = p->nargs;
    for (int i = 0; i < na; i++)
        push_arg(g, ids[i]);
    int nc = (kind == 2 ? m * k : 0) + (kind == 1 ? k * n : 0) + (bconst ? m : 0);
    in.cst = p->nconsts;
    for (int i = 0; i < nc; i++)
        push_const(g, rng_int(mr, 8) == 0 ? 0.0 : num(g));
    in.nout = m * n * (stage ? 2 : 1);
    append(g, in);
    free(ids);
}

/* ---- ad_external_collective (OP_COLLECTIVE) ---- */

/* A node of 0 to 4 arguments and 0 to 3 outputs (a node of none is still
 * a record, and makes the recording collective), its coefficient in the
 * ctx the library copies; one in three reads only constants (fresh
 * ones, or the program's), which ad_external would not record.  Every
 * choice comes from cr, the nodes' own stream. */
static void gen_coll(gen *g, rng *cr)
{
    prog *p = g->p;
    insn in = blank(OP_COLLECTIVE);
    in.len = rng_int(cr, 5);
    in.rows = rng_int(cr, 4);
    static const double ks[] = {1.5, -0.75, 2.0, 0.3125, -3.0};
    in.k = ks[rng_int(cr, 5)];
    int consts = rng_int(cr, 3) == 0;
    int *ids = malloc(((size_t)in.len + 1) * sizeof *ids);
    for (int i = 0; i < in.len; i++) {
        if (consts) {
            insn c = blank(OP_CONST);
            c.k = g->tame ? 4.0 * rng_unit(cr) - 2.0 : gen_input(cr);
            ids[i] = append(g, c);
        } else {
            int ns = p->nslots;
            ids[i] = rng_int(cr, 2) ? ns - 1 - rng_int(cr, ns < 4 ? ns : 4) : rng_int(cr, ns);
        }
    }
    in.arg = p->nargs;
    for (int i = 0; i < in.len; i++)
        push_arg(g, ids[i]);
    in.nout = in.rows;
    append(g, in);
    free(ids);
}

/* ---- nested derivatives (OP_NESTR) ---- */

static void gen_nestr(gen *g);

/* One instruction of a nested program: the scalar operations but lgamma
 * and tgamma (their partial, digamma, is no operation: AD_ENOTSUP when
 * nested), the n-ary records of reduce.c (no blocks: externals, recorded
 * matrices and loops are AD_ENOTSUP when nested), constants, branches,
 * and one level down a nested call of its own. */
static void gen_inner_insn(gen *g)
{
    int u = rng_int(&g->r, 100);
    if (u < 42) {
        int op = OP_FIRST_UNARY + rng_int(&g->r, OP_LGAMMA - OP_FIRST_UNARY);
        insn in = blank(op);
        in.a = operand(g, op);
        append(g, in);
    } else if (u < 72) {
        gen_binary(g);
    } else if (u < 86) {
        gen_array(g, OP_SUM + rng_int(&g->r, OP_MATVEC - OP_SUM));
    } else if (u < 90) {
        insn in = blank(OP_CONST);
        in.k = num(g);
        append(g, in);
    } else if (u < 94 || g->nest_level > 1) {
        gen_branch(g);
    } else {
        gen_nestr(g);
    }
}

/* The nested program of a NESTR of k inputs, generated at the values x0
 * its arguments have (so that a tame program's operands are in their
 * domains there): one output (the last slot, mostly), 2 to 7
 * instructions, after its inputs combined two times in three. */
static void gen_inner(gen *parent, prog *sub, int k, const double *x0)
{
    gen g;
    memset(&g, 0, sizeof g);
    memset(sub, 0, sizeof *sub);
    g.r.s = rng_next(&parent->r);
    g.br.s = g.r.s ^ BRANCH_STREAM;
    g.p = sub;
    g.tame = parent->tame;
    g.hub = -1;
    g.maxlen = 6;
    g.nest_level = parent->nest_level + 1;
    g.chain = rng_int(&g.r, 2) == 0;
    sub->n = k;
    sub->m = 1;
    sub->nslots = k;
    sub->x = malloc(((size_t)k + 1) * sizeof *sub->x);
    sub->v = calloc((size_t)k + 1, sizeof *sub->v);
    sub->w = calloc(2, sizeof *sub->w);
    sub->w[0] = 1.0;
    g.val = prog_grow(g.val, &g.cap_val, k + 1, sizeof *g.val);
    for (int i = 0; i < k; i++)
        g.val[i] = sub->x[i] = x0[i];
    /* Most nested programs start from all their inputs: x0 op x1 op ...,
     * so that the gradient has few structural zeros. */
    if (k > 1 && rng_int(&g.r, 3) != 0) {
        static const int mix[] = {OP_ADD, OP_SUB, OP_MUL, OP_MUL, OP_HYPOT, OP_ATAN2, OP_FMAX, OP_DIV};
        int acc = 0;
        for (int i = 1; i < k; i++) {
            insn in = blank(mix[rng_int(&g.r, g.tame ? 6 : 8)]);
            in.a = acc, in.b = i;
            acc = append(&g, in);
        }
    }
    int count = 2 + rng_int(&g.r, 6);
    for (int i = 0; i < count; i++)
        gen_inner_insn(&g);
    sub->outs = malloc(2 * sizeof *sub->outs);
    sub->outs[0] = rng_int(&g.r, 8) == 0 ? rng_int(&g.r, sub->nslots) : sub->nslots - 1;
    free(g.val);
}

/* A nested derivative of a program of 1 to 3 inputs read from the values
 * so far: its gradient (ad_gradient_r: f and the gradient), or one in three
 * times its derivative along a direction of values so far (ad_jvp_r). */
static void gen_nestr(gen *g)
{
    prog *p = g->p;
    insn in = blank(OP_NESTR);
    in.mode = rng_int(&g->r, 3) == 0;
    in.len = 1 + rng_int(&g->r, 3);
    in.nout = prog_nestr_outs(&in);
    in.arg = p->nargs;
    for (int i = 0; i < (in.mode ? 2 * in.len : in.len); i++)
        push_arg(g, operand(g, OP_NESTR));
    double x0[3];
    for (int i = 0; i < in.len; i++)
        x0[i] = g->val[p->args[in.arg + i]];
    in.sub = p->nsubs;
    p->subs = realloc(p->subs, (size_t)(p->nsubs + 1) * sizeof *p->subs);
    prog *sub = &p->subs[p->nsubs++];
    gen_inner(g, sub, in.len, x0);
    append(g, in);
}

/* ---- checkpointed loops ---- */

static void gen_loop(gen *g, int max_steps);

/* The unary operations whose partials are infinite or NaN somewhere
 * near the edge values: sqrt and log at 0, asin at 1, ... */
static const int singular[] = {OP_SQRT, OP_CBRT, OP_LOG, OP_LOG2, OP_LOG1P, OP_ASIN, OP_ACOSH,
                               OP_ATANH, OP_TGAMMA, OP_LGAMMA, OP_FABS};

/* One instruction of a step program: scalar operations, n-ary records
 * (no blocks), constants of the step (OP_STEPK), branches, and, one level
 * down, a loop of its own. */
static void gen_step_insn(gen *g, int outer_steps)
{
    int u = rng_int(&g->r, 100);
    if (u < 40) {
        int op = !g->tame && rng_int(&g->r, 3) == 0
                     ? singular[rng_int(&g->r, (int)(sizeof singular / sizeof *singular))]
                     : OP_FIRST_UNARY + rng_int(&g->r, OP_FIRST_BINARY - OP_FIRST_UNARY);
        insn in = blank(op);
        in.a = operand(g, op);
        append(g, in);
    } else if (u < 70) {
        int op = OP_FIRST_BINARY + rng_int(&g->r, OP_FIRST_ARRAY - OP_FIRST_BINARY);
        insn in = blank(op);
        in.mode = rng_int(&g->r, 3);
        in.a = op == OP_POW && g->tame ? operand(g, OP_LOG) : pick(g);
        in.b = pick(g);
        in.k = num(g);
        if (!g->tame && rng_int(&g->r, 4) == 0) {  /* 0 x, -0 x, Inf x */
            static const double zk[] = {0.0, -0.0, INFINITY, 0x1p-1074};
            in.op = OP_MUL, in.mode = 1, in.k = zk[rng_int(&g->r, 4)];
        }
        if (g->tame && in.op == OP_POW && in.mode == 1)
            in.k = 3.0 * rng_unit(&g->r) - 1.0;
        if (g->tame && in.op == OP_POW && in.mode == 0 && fabs(g->val[in.b]) > 5.0)
            in.mode = 1, in.k = 2.0;
        if (g->tame && in.op == OP_POW && in.mode == 2)
            in.k = 0.5 + rng_unit(&g->r), in.a = operand(g, OP_TANH);
        if (g->tame && in.op == OP_DIV && in.mode != 2 && fabs(g->val[in.b]) < 1e-3)
            in.mode = 1, in.k = 1.5;
        append(g, in);
    } else if (u < 82) {
        gen_array(g, OP_SUM + rng_int(&g->r, OP_AXPY + 1 - OP_SUM));
    } else if (u < 89) {
        insn in = blank(OP_STEPK);
        in.k = g->tame ? 0.25 * ordinary(&g->r) : num(g);
        append(g, in);
    } else if (u < 92 && g->loop_depth == 1 && outer_steps <= 7) {
        gen_loop(g, 3);  /* nested checkpointing */
    } else if (u < 95) {
        insn in = blank(OP_CONST);
        in.k = num(g);
        append(g, in);
    } else {
        gen_branch(g);
    }
}

/* The step program of a loop with ns states and np params whose first
 * state and params are x0: ns + np inputs, ns outputs.  Tame: the
 * operands are in their domains at x0, and most outputs are bounded
 * (tanh, sin, atan of what the step computed), so that thirteen steps
 * stay finite; edge: singular operations, and products with 0 and Inf. */
static void gen_step(gen *parent, prog *sub, int ns, int np, const double *x0, int steps)
{
    gen g;
    memset(&g, 0, sizeof g);
    memset(sub, 0, sizeof *sub);
    g.r.s = rng_next(&parent->r);
    g.br.s = g.r.s ^ BRANCH_STREAM;
    g.p = sub;
    g.tame = parent->tame;
    g.hub = -1;
    g.maxlen = 6;
    g.loop_depth = parent->loop_depth + 1;
    sub->n = ns + np;
    sub->m = ns;
    sub->nslots = sub->n;
    sub->x = malloc(((size_t)sub->n + 1) * sizeof *sub->x);
    sub->v = calloc((size_t)sub->n + 1, sizeof *sub->v);
    sub->w = calloc((size_t)sub->m + 1, sizeof *sub->w);
    g.val = prog_grow(g.val, &g.cap_val, sub->n + 1, sizeof *g.val);
    for (int i = 0; i < sub->n; i++)
        g.val[i] = sub->x[i] = x0[i];
    int count = 1 + rng_int(&g.r, 6);
    for (int i = 0; i < count; i++)
        gen_step_insn(&g, steps);
    sub->outs = malloc(((size_t)ns + 1) * sizeof *sub->outs);
    for (int i = 0; i < ns; i++) {
        int u = rng_int(&g.r, 8), s;
        if (u == 0)
            s = rng_int(&g.r, sub->n);  /* a state (kept, swapped) or a param */
        else if (u == 1)
            s = rng_int(&g.r, sub->nslots);
        else
            s = sub->nslots - 1 - rng_int(&g.r, 3 < sub->nslots ? 3 : sub->nslots);
        if (g.tame && s >= sub->n && rng_int(&g.r, 4) != 0) {
            static const int bound[] = {OP_TANH, OP_SIN, OP_ATAN};
            insn in = blank(bound[rng_int(&g.r, 3)]);
            in.a = s;
            s = append(&g, in);
        }
        sub->outs[i] = s;
    }
    free(g.val);
}

/* A loop of 1 to 4 states and 0 to 2 params, read from the program so
 * far; 0, 1, 2, 3, 7 or 13 steps (at most max_steps), the default
 * snapshot count or 1, 2, steps, more than steps. */
static void gen_loop(gen *g, int max_steps)
{
    static const int step_counts[] = {0, 1, 2, 3, 7, 13};
    prog *p = g->p;
    insn in = blank(OP_LOOP);
    int ns = 1 + rng_int(&g->r, 4), np = rng_int(&g->r, 3);
    in.len = ns, in.rows = np, in.nout = ns;
    int nc = 0;
    while (nc < 6 && step_counts[nc] <= max_steps)
        nc++;
    in.steps = step_counts[rng_int(&g->r, nc)];
    int u = rng_int(&g->r, 5);
    in.snaps = u == 0 ? 0 : u == 1 ? 1 : u == 2 ? 2 : u == 3 ? in.steps : in.steps + 1 + rng_int(&g->r, 3);
    fill_args(g, &in, ns + np);
    double *x0 = malloc(((size_t)(ns + np) + 1) * sizeof *x0);
    for (int i = 0; i < ns + np; i++)
        x0[i] = g->val[p->args[in.arg + i]];
    in.sub = p->nsubs;
    p->subs = realloc(p->subs, (size_t)(p->nsubs + 1) * sizeof *p->subs);
    prog *sub = &p->subs[p->nsubs++];
    gen_step(g, sub, ns, np, x0, in.steps);
    free(x0);
    int out = append(g, in);
    /* Edge programs: an output of the loop with a zero cotangent beside
     * another, a_N + 0 b_N (docs/conventions.md, "NaN and Inf"). */
    if (!g->tame && ns > 1 && rng_int(&g->r, 2)) {
        insn z = blank(OP_MUL);
        z.mode = 1;
        z.a = out + rng_int(&g->r, ns);
        z.k = rng_int(&g->r, 2) ? 0.0 : -0.0;
        int zs = append(g, z);
        insn a = blank(OP_ADD);
        a.a = out + rng_int(&g->r, ns);
        a.b = zs;
        append(g, a);
    }
}

/* size_hint < 0: a nested objective with -size_hint inputs and one output,
 * no externals or nesting of its own (the top bits of seed: depth). */
void gen_program(prog *p, uint64_t seed, int size_hint)
{
    gen g;
    memset(&g, 0, sizeof g);
    memset(p, 0, sizeof *p);
    g.r.s = seed;
    g.br.s = seed ^ BRANCH_STREAM;
    g.p = p;
    int depth = size_hint < 0;
    g.tame = rng_int(&g.r, 2);
    /* Checkpointed loops, in one program of LOOP_SHARE, from a stream of
     * their own: the other programs are those of a fuzzer without loops.
     * Nested derivatives likewise, from a stream of their own, in one
     * program of NEST_SHARE of the others (README.md, "Nested
     * derivatives"); three in four of those are tame. */
    rng lr = {seed ^ 0x2545f4914f6cdd1dU}, nr = {seed ^ 0x6a09e667f3bcc909U};
    rng gr = {seed ^ 0x510e527fade682d1U};
    int loops = !depth && rng_int(&lr, LOOP_SHARE) == 0;
    int nests = !depth && !loops && rng_int(&nr, NEST_SHARE) == 0;
    /* Branches placed to flip, likewise (gen_guard), in one program of
     * GUARD_SHARE of those with neither, beside the instructions the
     * program has without them. */
    int guards = !depth && !loops && !nests && rng_int(&gr, GUARD_SHARE) == 0;
    rng mr = {seed ^ 0x9b05688c2b3e6c1fU};
    int mats = !depth && !loops && !nests && rng_int(&mr, MAT_SHARE) == 0;
    rng cr = {seed ^ 0x1f83d9abfb41bd6bU};
    int colls = !depth && !loops && !nests && rng_int(&cr, COLL_SHARE) == 0;
    if (nests && rng_int(&nr, 4) != 0)
        g.tame = 1;
    int shape = rng_int(&g.r, 10);
    g.chain = shape == 0;
    p->n = depth ? -size_hint : rng_int(&g.r, 10) == 0 ? 0 : 1 + rng_int(&g.r, 6);
    p->m = depth ? 1 : 1 + rng_int(&g.r, 4);
    p->nslots = p->n;
    p->x = malloc(((size_t)p->n + 1) * sizeof *p->x);
    p->v = malloc(((size_t)p->n + 1) * sizeof *p->v);
    p->w = malloc(((size_t)p->m + 1) * sizeof *p->w);
    g.val = prog_grow(g.val, &g.cap_val, p->n + 1, sizeof *g.val);
    for (int i = 0; i < p->n; i++)
        g.val[i] = p->x[i] = g.tame ? ordinary(&g.r) : gen_input(&g.r);
    if (p->n == 0) {  /* something to read: a constant */
        insn in = blank(OP_CONST);
        in.k = num(&g);
        append(&g, in);
    }
    g.hub = shape == 1 ? rng_int(&g.r, p->nslots) : -1;
    int count = depth ? 1 + rng_int(&g.r, 5)
              : g.chain ? 50 + rng_int(&g.r, 200)
              : size_hint > 0 ? 1 + rng_int(&g.r, size_hint) : 1 + rng_int(&g.r, 30);
    int first_loop = rng_int(&lr, count), nloops = 0;
    int first_nest = rng_int(&nr, count), nnests = 0;
    int first_guard = rng_int(&gr, count), nguards = 0, guard_at = -1;
    int first_mat = rng_int(&mr, count), nmats = 0, mat_at = -1;
    int first_coll = rng_int(&cr, count), ncolls = 0, coll_at = -1;
    for (int i = 0; i < count; i++) {
        if (colls && ncolls < 3 && (i == first_coll || rng_int(&cr, 8) == 0)) {
            gen_coll(&g, &cr);
            ncolls++;
            if (coll_at < 0 && p->code[p->ncode - 1].nout)
                coll_at = p->code[p->ncode - 1].out;
        }
        if (mats && nmats < 4 && (i == first_mat || rng_int(&mr, 8) == 0)) {
            gen_mat(&g, &mr);
            if (!nmats++)
                mat_at = p->code[p->ncode - 1].out;
        }
        if (guards && nguards < 3 && (i == first_guard || rng_int(&gr, 8) == 0)) {
            gen_guard(&g, &gr);
            if (!nguards++)
                guard_at = p->nslots - 1;
        }
        if (loops && nloops < 3 && (i == first_loop || rng_int(&lr, 15) == 0)) {
            gen_loop(&g, 13);
            nloops++;
        } else if (nests && nnests < 4 && (i == first_nest || rng_int(&nr, 12) == 0)) {
            gen_nestr(&g);
            nnests++;
            if (rng_int(&g.r, 3) != 0) {  /* its outputs combined, w . (f, grad f) */
                const insn *nd = &p->code[p->ncode - 1];
                insn in = blank(OP_DOT_RD);
                in.len = nd->nout;
                in.arg = p->nargs;
                for (int t = 0; t < nd->nout; t++)
                    push_arg(&g, nd->out + t);
                in.cst = p->nconsts;
                for (int t = 0; t < in.len; t++)
                    push_const(&g, g.tame ? ordinary(&g.r) : num(&g));
                append(&g, in);
            }
        } else if (depth && rng_int(&g.r, 3) == 0)
            gen_array(&g, OP_SUM + rng_int(&g.r, OP_MATVEC - OP_SUM));
        else if (depth)
            gen_insn(&g, 1);
        else
            gen_insn(&g, 0);
    }
    p->outs = malloc((size_t)p->m * sizeof *p->outs);
    for (int j = 0; j < p->m; j++)
        p->outs[j] = rng_int(&g.r, 4) == 0 ? rng_int(&g.r, p->nslots) : p->nslots - 1 - rng_int(&g.r, 3 < p->nslots ? 3 : p->nslots);
    /* A program with nested calls: half its outputs made after the first */
    int after = p->nslots;
    for (int j = 0; nests && j < p->ncode && after == p->nslots; j++)
        if (p->code[j].op == OP_NESTR)
            after = p->code[j].out;
    for (int j = 0; nests && after < p->nslots && j < p->m; j++)
        if (rng_int(&nr, 2))
            p->outs[j] = after + rng_int(&nr, p->nslots - after);
    /* A program with guards: half its outputs made at or after the first */
    for (int j = 0; guard_at >= 0 && j < p->m; j++)
        if (rng_int(&gr, 2))
            p->outs[j] = guard_at + rng_int(&gr, p->nslots - guard_at);
    /* A program with matrix nodes: half its outputs made at or after the first */
    for (int j = 0; mat_at >= 0 && j < p->m; j++)
        if (rng_int(&mr, 2))
            p->outs[j] = mat_at + rng_int(&mr, p->nslots - mat_at);
    /* A program with collective nodes: half its outputs made at or after the first */
    for (int j = 0; coll_at >= 0 && j < p->m; j++)
        if (rng_int(&cr, 2))
            p->outs[j] = coll_at + rng_int(&cr, p->nslots - coll_at);
    /* Directions and weights: nonzero, so that every input and output is
     * seeded; edge programs sometimes scale them far out. */
    for (int i = 0; i < p->n; i++)
        p->v[i] = (rng_unit(&g.r) + 0.5) * (rng_int(&g.r, 2) ? 1 : -1) *
                  (!g.tame && rng_int(&g.r, 5) == 0 ? (rng_int(&g.r, 2) ? 1e200 : 1e-200) : 1.0);
    for (int j = 0; j < p->m; j++)
        p->w[j] = (rng_unit(&g.r) + 0.5) * (rng_int(&g.r, 2) ? 1 : -1) *
                  (!g.tame && rng_int(&g.r, 5) == 0 ? (rng_int(&g.r, 2) ? 1e200 : 1e-200) : 1.0);
    free(g.val);
}
