/* Programs: copying, freeing, printing, and deleting an instruction (for
 * the shrinker); loops written out (prog_unroll) and nested derivatives
 * written out (prog_unnest, nest.h) for the oracle. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nest.h"
#include "prog.h"

static const char *const names[OP_COUNT] = {
    "const", "branch", "nest", "loop", "stepk", "loopout", "nest_r", "nestin", "nestout", "neg", "sqrt", "cbrt", "exp", "expm1", "log", "log1p", "log2",
    "log10", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
    "acosh", "atanh", "fabs", "erf", "erfc", "lgamma", "tgamma", "add", "sub", "mul", "div",
    "pow", "atan2", "hypot", "fmin", "fmax", "ad_sum", "ad_dot", "ad_dot_rd", "ad_sqnorm",
    "ad_prod", "ad_logsumexp", "ad_matvec", "ad_matvec_rr", "ad_axpy", "ad_mat_vec",
    "ad_mat_sqnorm", "ad_external", "ad_mat_mul", "ad_mat_map", "ad_external_collective",
};

const char *op_name(int op) { return op >= 0 && op < OP_COUNT ? names[op] : "?"; }

void prog_free(prog *p)
{
    for (int i = 0; i < p->nsubs; i++)
        prog_free(&p->subs[i]);
    free(p->subs);
    free(p->code);
    free(p->args);
    free(p->consts);
    free(p->outs);
    free(p->x);
    free(p->v);
    free(p->w);
    memset(p, 0, sizeof *p);
}

static void *dup(const void *a, size_t bytes)
{
    void *d = malloc(bytes + 1);
    if (bytes)
        memcpy(d, a, bytes);
    return d;
}

void prog_copy(prog *d, const prog *s)
{
    *d = *s;
    d->code = dup(s->code, (size_t)s->ncode * sizeof *s->code);
    d->args = dup(s->args, (size_t)s->nargs * sizeof *s->args);
    d->consts = dup(s->consts, (size_t)s->nconsts * sizeof *s->consts);
    d->outs = dup(s->outs, (size_t)s->m * sizeof *s->outs);
    d->x = dup(s->x, (size_t)s->n * sizeof *s->x);
    d->v = dup(s->v, (size_t)s->n * sizeof *s->v);
    d->w = dup(s->w, (size_t)s->m * sizeof *s->w);
    d->subs = malloc((size_t)s->nsubs * sizeof *d->subs + 1);
    for (int i = 0; i < s->nsubs; i++)
        prog_copy(&d->subs[i], &s->subs[i]);
}

static int nargs_of(const insn *in);
int prog_nargs(const insn *in) { return nargs_of(in); }

/* How many constants an instruction reads from the pool. */
static int nconsts_of(const insn *in);
int prog_nconsts(const insn *in) { return nconsts_of(in); }

static int nconsts_of(const insn *in)
{
    switch (in->op) {
    case OP_DOT_RD: return in->len;
    case OP_MATVEC: return in->rows * in->len;
    case OP_MAT_VEC: case OP_MAT_SQNORM: return in->mode == 1 ? in->len : 0;
    case OP_MAT_MUL: {
        int kind = in->mode & 3, m = in->rows, k = in->len, n = in->cols;
        return (kind == 2 ? m * k : 0) + (kind == 1 ? k * n : 0) + ((in->mode & 12) == 12 ? m : 0);
    }
    default: return 0;
    }
}

int prog_has_matop(const prog *p, int nod2f)
{
    for (int j = 0; j < p->ncode; j++) {
        const insn *in = &p->code[j];
        if ((in->op == OP_MAT_MUL || in->op == OP_MAT_MAP) &&
            (!nod2f || insn_map_op(in) == MAP_USER_NOD2F))
            return 1;
    }
    return 0;
}

int insn_map_op(const insn *in)
{
    if (in->op == OP_MAT_MAP || (in->op == OP_MAT_MUL && (in->mode >> 4 & 3) == 3))
        return in->sub;
    return -1;
}

int prog_has_external(const prog *p, int *without_jvp)
{
    int any = 0;
    *without_jvp = 0;
    for (int j = 0; j < p->ncode; j++)
        if (p->code[j].op == OP_EXTERNAL) {
            any = 1;
            *without_jvp |= p->code[j].sub;
        }
    return any;
}

int prog_has_collective(const prog *p)
{
    for (int j = 0; j < p->ncode; j++)
        if (p->code[j].op == OP_COLLECTIVE)
            return 1;
    return 0;
}

int prog_has_nestr(const prog *p)
{
    for (int j = 0; j < p->ncode; j++)
        if (p->code[j].op == OP_NESTR)
            return 1;
    return 0;
}

int prog_nestr_outs(const insn *in) { return in->mode ? 2 : 1 + in->len; }

int prog_has_loop(const prog *p)
{
    for (int j = 0; j < p->ncode; j++)
        if (p->code[j].op == OP_LOOP)
            return 1;
    return 0;
}

/* OP_STEPK's value in step k: the step function depends on k, so that a
 * replay of the wrong step shows. */
double stepk_value(double k0, long k) { return k0 * (double)(k % 4 + 1); }

/* How many args an instruction reads from the pool. */
static int nargs_of(const insn *in)
{
    int L = in->len, R = in->rows;
    switch (in->op) {
    case OP_LOOP: return L + R;
    case OP_LOOPOUT: return L;
    case OP_DOT: case OP_AXPY: return 2 * L;
    case OP_MATVEC_RR: return R * L + L;
    case OP_MAT_VEC: return R * L + (in->mode == 1 ? 0 : in->mode == 2 ? 2 * L : L);
    case OP_MAT_SQNORM: return R * L + (in->mode == 1 ? 0 : L);
    case OP_MAT_MUL: {
        int kind = in->mode & 3, n = in->cols;
        return (kind != 2 ? R * L : 0) + (kind == 0 || kind == 2 ? L * n : 0) + ((in->mode & 12) == 4 ? R : 0);
    }
    case OP_MAT_MAP: return R * L;
    case OP_SUM: case OP_DOT_RD: case OP_SQNORM: case OP_PROD: case OP_LSE: case OP_MATVEC:
    case OP_EXTERNAL: case OP_NEST: case OP_COLLECTIVE: return L;
    case OP_NESTR: return in->mode ? 2 * L : L;
    default: return 0;
    }
}

static void print_vec(FILE *out, const double *v, int n)
{
    for (int i = 0; i < n; i++)
        fprintf(out, "%s%.17g", i ? ", " : "", v[i]);
}

static void print_insn(const prog *p, const insn *in, FILE *out, const char *ind)
{
    fprintf(out, "%s", ind);
    for (int i = 0; i < in->nout; i++)
        fprintf(out, "%ss%d", i ? "," : "", in->out + i);
    fprintf(out, " = %s", op_name(in->op));
    if (in->op == OP_CONST) {
        fprintf(out, " %.17g\n", in->k);
        return;
    }
    if (in->op == OP_BRANCH) {
        static const char *const cmp[4] = {"<", ">", "<=", ">="};
        int m = in->mode & 3, swap = m & 1;  /* ad_gt(b, a), ad_ge(b, a) */
        fprintf(out, " s%d %s s%d ? s%d : s%d\n", swap ? in->b : in->a, cmp[m], swap ? in->a : in->b,
                in->c, in->d);
        return;
    }
    if (in->op == OP_STEPK) {
        fprintf(out, " %.17g * (k %% 4 + 1)\n", in->k);
        return;
    }
    if (in->op == OP_NESTIN) {
        fprintf(out, "(s%d)\n", in->a);
        return;
    }
    if (in->op == OP_NESTOUT) {
        fprintf(out, "(s%d) = %.17g%s\n", in->a, in->k,
                in->mode == 1 ? " (a convention: derivative not predicted)" : in->mode == 2 ? " (the record's value)" : "");
        return;
    }
    if (in->op == OP_NESTR) {
        fprintf(out, " %s sub=%d x[", in->mode ? "ad_jvp_r" : "ad_gradient_r", in->sub);
        for (int i = 0; i < prog_nargs(in); i++)
            fprintf(out, "%s%ss%d", i == in->len ? "] v[" : "", i && i != in->len ? " " : "",
                    p->args[in->arg + i]);
        fprintf(out, "]%s\n", in->mode ? ": y, jv" : ": fx, grad");
        return;
    }
    if (in->op == OP_LOOPOUT) {
        fprintf(out, "(s%d) steps=%d args[", in->a, in->steps);
        for (int i = 0; i < in->len; i++)
            fprintf(out, "%ss%d", i ? " " : "", p->args[in->arg + i]);
        fprintf(out, "]\n");
        return;
    }
    if (in->op == OP_LOOP) {
        fprintf(out, " steps=%d snapshots=%d sub=%d state0[", in->steps, in->snaps, in->sub);
        for (int i = 0; i < in->len + in->rows; i++)
            fprintf(out, "%s%ss%d", i == in->len ? "] params[" : "", i && i != in->len ? " " : "",
                    p->args[in->arg + i]);
        fprintf(out, "]\n");
        return;
    }
    if (in->op < OP_FIRST_BINARY) {
        if (in->op != OP_NEST)
            fprintf(out, "(s%d)\n", in->a);
    } else if (in->op < OP_FIRST_ARRAY) {
        if (in->mode == 0)
            fprintf(out, "(s%d, s%d)\n", in->a, in->b);
        else if (in->mode == 1)
            fprintf(out, "(s%d, %.17g)\n", in->a, in->k);
        else
            fprintf(out, "(%.17g, s%d)\n", in->k, in->a);
        return;
    }
    if (in->op == OP_NEST || in->op >= OP_FIRST_ARRAY) {
        fprintf(out, " len=%d rows=%d mode=%d", in->len, in->rows, in->mode);
        if (in->op == OP_AXPY)
            fprintf(out, " a=%.17g", in->k);
        if (in->op == OP_EXTERNAL)
            fprintf(out, " %s", in->sub ? "(no jvp rule)" : "(with jvp rule)");
        if (in->op == OP_COLLECTIVE)
            fprintf(out, " k=%.17g (active, ctx copied)", in->k);
        if (in->op == OP_MAT_MUL) {
            static const char *const kinds[4] = {"recorded x recorded", "recorded x wrapped",
                                                 "wrapped x recorded", "A A"};
            static const char *const stages[4] = {"", " then D = C C", " then D = A C", " then D = map(C)"};
            fprintf(out, " cols=%d (%s%s%s%s)", in->cols, kinds[in->mode & 3],
                    in->mode & 4 ? (in->mode & 8 ? " + double bias" : " + bias") : "",
                    stages[in->mode >> 4 & 3], "");
        }
        if (insn_map_op(in) >= 0) {
            static const char *const maps[] = {"tanh", "exp", "log", "sqrt", "sin", "cos", "logistic",
                                               "relu", "square", "user", "user without d2f"};
            fprintf(out, " map=%s", maps[insn_map_op(in)]);
        }
        if (in->op == OP_NEST)
            fprintf(out, " sub=%d result=%s%d", in->sub, in->d < 0 ? "fx" : "grad", in->d < 0 ? 0 : in->d);
        fprintf(out, " args[");
        int na = nargs_of(in);
        for (int i = 0; i < na; i++)
            fprintf(out, "%ss%d", i ? " " : "", p->args[in->arg + i]);
        fprintf(out, "]");
        int nc = nconsts_of(in);
        if (nc) {
            fprintf(out, " consts[");
            print_vec(out, p->consts + in->cst, nc);
            fprintf(out, "]");
        }
        fprintf(out, "\n");
    }
}

static void print_subs(const prog *p, FILE *out, const char *ind);

static void print_prog(const prog *p, FILE *out, const char *ind)
{
    fprintf(out, "%sinputs n=%d: x = [", ind, p->n);
    print_vec(out, p->x, p->n);
    fprintf(out, "]\n%s  v = [", ind);
    print_vec(out, p->v, p->n);
    fprintf(out, "]\n");
    for (int j = 0; j < p->ncode; j++)
        print_insn(p, &p->code[j], out, ind);
    fprintf(out, "%soutputs m=%d: [", ind, p->m);
    for (int j = 0; j < p->m; j++)
        fprintf(out, "%ss%d", j ? ", " : "", p->outs[j]);
    fprintf(out, "]  w = [");
    print_vec(out, p->w, p->m);
    fprintf(out, "]\n");
    print_subs(p, out, ind);
}

static void print_subs(const prog *p, FILE *out, const char *ind)
{
    char deeper[64];
    snprintf(deeper, sizeof deeper, "%s    ", ind);
    for (int i = 0; i < p->nsubs; i++) {
        int nest = 0, loop = 0, nestr = 0;
        for (int j = 0; j < p->ncode; j++) {
            nest |= p->code[j].op == OP_NEST && p->code[j].sub == i;
            loop |= p->code[j].op == OP_LOOP && p->code[j].sub == i;
            nestr |= p->code[j].op == OP_NESTR && p->code[j].sub == i;
        }
        nest |= nestr;
        if (nestr)
            fprintf(out, "%snested program sub=%d, differentiated inside the recording (output: its s%d; x "
                         "is where the generator made it):\n", ind, i, p->subs[i].outs[0]);
        else if (nest)
            fprintf(out, "%snested objective sub=%d (output: its s%d):\n", ind, i, p->subs[i].outs[0]);
        else if (loop)
            fprintf(out, "%sloop step sub=%d (inputs: the state, then the params; outputs: the "
                         "next state; x is unused):\n", ind, i);
        if (nest || loop)
            print_prog(&p->subs[i], out, deeper);
    }
}

void prog_print(const prog *p, FILE *out)
{
    print_prog(p, out, "  ");
}

/* Removes instruction j: later reads of its outputs read its first operand
 * instead (or slot 0), and the slots above are renumbered.  Returns 0 if
 * j cannot be removed (a program with no inputs keeps its first slot). */
int prog_delete(prog *p, int j)
{
    insn del = p->code[j];
    int repl = del.a >= 0 ? del.a : nargs_of(&del) > 0 ? p->args[del.arg] : -1;
    if (repl < 0 || repl >= del.out)
        repl = del.out > 0 ? 0 : -1;
    if (repl < 0)
        return 0;
    /* a loop of no steps: its outputs are its state0 */
    int same = del.op == OP_LOOP && del.steps == 0;
    int lo = del.out, hi = del.out + del.nout, shift = del.nout;
#define MAP(s) ((s) < lo ? (s) : (s) < hi ? (same ? p->args[del.arg + (s) - lo] : repl) : (s) - shift)
    for (int i = j + 1; i < p->ncode; i++) {
        insn *in = &p->code[i];
        if (in->a >= 0) in->a = MAP(in->a);
        if (in->b >= 0) in->b = MAP(in->b);
        if (in->c >= 0) in->c = MAP(in->c);
        if (in->op == OP_BRANCH && in->d >= 0) in->d = MAP(in->d);
        int na = nargs_of(in);
        for (int k = 0; k < na; k++)
            p->args[in->arg + k] = MAP(p->args[in->arg + k]);
        in->out -= shift;
    }
    for (int k = 0; k < p->m; k++)
        p->outs[k] = MAP(p->outs[k]);
#undef MAP
    memmove(p->code + j, p->code + j + 1, (size_t)(p->ncode - j - 1) * sizeof *p->code);
    p->ncode--;
    p->nslots -= shift;
    return 1;
}

/* ---- writing loops out ---- */

typedef struct unroller {
    prog *q;
    int cap_code, cap_args, cap_consts;
    unroll_info *info;
    const prog *root;
    int top;    /* the instruction of root being written out */
    int depth;  /* loops around the program being written out */
} unroller;

void *prog_grow(void *a, int *cap, int need, size_t size)
{
    if (need <= *cap)
        return a;
    int c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    *cap = c;
    return realloc(a, (size_t)c * size);
}

/* Appends src's instructions to q, src's slot s being q's map[s]
 * (map[0..src->n) given); k: the step src runs, for OP_STEPK. */
static void emit(unroller *u, const prog *src, int *map, long k)
{
    prog *q = u->q;
    for (int j = 0; j < src->ncode; j++) {
        const insn *in = &src->code[j];
        if (src == u->root)
            u->top = j;
        if (in->op == OP_LOOP) {
            const prog *sub = &src->subs[in->sub];
            int ns = in->len, np = in->rows;
            int *cur = malloc(((size_t)ns + 1) * sizeof *cur);
            int *smap = malloc(((size_t)sub->nslots + 1) * sizeof *smap);
            for (int i = 0; i < ns; i++)
                cur[i] = map[src->args[in->arg + i]];
            int loop_id = u->info ? u->info->nloops++ : 0, top = u->top;
            for (int step = 0; step < in->steps; step++) {
                for (int i = 0; i < ns; i++)
                    smap[i] = cur[i];
                for (int i = 0; i < np; i++)
                    smap[ns + i] = map[src->args[in->arg + ns + i]];
                int lo = q->nslots, *ins = malloc(((size_t)(ns + np) + 1) * sizeof *ins);
                memcpy(ins, smap, (size_t)(ns + np) * sizeof *ins);
                u->depth++;
                emit(u, sub, smap, step);
                u->depth--;
                for (int i = 0; i < ns; i++)
                    cur[i] = smap[sub->outs[i]];
                if (!u->info) {
                    free(ins);
                    continue;
                }
                unroll_info *f = u->info;
                f->spans = prog_grow(f->spans, &f->cap, f->nspans + 1, sizeof *f->spans);
                unroll_span *sp = &f->spans[f->nspans++];
                sp->lo = lo, sp->hi = q->nslots, sp->top = top, sp->nouts = ns, sp->nins = ns + np;
                sp->outs = malloc(((size_t)ns + 1) * sizeof *sp->outs);
                memcpy(sp->outs, cur, (size_t)ns * sizeof *cur);
                sp->ins = ins;
                sp->step = step, sp->loop = loop_id, sp->depth = u->depth + 1;  /* 1: a step of the program's loop */
            }
            /* the outputs: records of the loop's block (oracle.c) */
            for (int i = 0; i < ns; i++) {
                insn o;
                memset(&o, 0, sizeof o);
                o.op = OP_LOOPOUT;
                o.a = cur[i], o.b = o.c = o.d = -1;
                o.steps = in->steps;
                o.sub = loop_id;  /* the loop instance (unroll_span.loop) */
                o.len = ns + np;
                q->args = prog_grow(q->args, &u->cap_args, q->nargs + ns + np + 1, sizeof *q->args);
                o.arg = q->nargs;
                for (int t = 0; t < ns + np; t++)
                    q->args[q->nargs++] = map[src->args[in->arg + t]];
                o.out = q->nslots++;
                o.nout = 1;
                map[in->out + i] = o.out;
                q->code = prog_grow(q->code, &u->cap_code, q->ncode + 1, sizeof *q->code);
                q->code[q->ncode++] = o;
            }
            free(cur);
            free(smap);
            continue;
        }
        insn o = *in;
        if (o.a >= 0) o.a = map[o.a];
        if (o.b >= 0) o.b = map[o.b];
        if (o.op == OP_BRANCH) o.c = map[o.c], o.d = map[o.d];
        if (o.op == OP_STEPK) {
            o.op = OP_CONST;
            o.k = stepk_value(in->k, k);
        }
        int na = nargs_of(in), nc = nconsts_of(in);
        q->args = prog_grow(q->args, &u->cap_args, q->nargs + na + 1, sizeof *q->args);
        o.arg = q->nargs;
        for (int t = 0; t < na; t++)
            q->args[q->nargs++] = map[src->args[in->arg + t]];
        q->consts = prog_grow(q->consts, &u->cap_consts, q->nconsts + nc + 1, sizeof *q->consts);
        o.cst = q->nconsts;
        for (int t = 0; t < nc; t++)
            q->consts[q->nconsts++] = src->consts[in->cst + t];
        if (o.op == OP_NEST || o.op == OP_NESTR) {  /* its objective, copied */
            q->subs = realloc(q->subs, (size_t)(q->nsubs + 1) * sizeof *q->subs);
            prog_copy(&q->subs[q->nsubs], &src->subs[in->sub]);
            o.sub = q->nsubs++;
        }
        o.out = q->nslots;
        for (int t = 0; t < in->nout; t++)
            map[in->out + t] = q->nslots + t;
        q->nslots += in->nout;
        q->code = prog_grow(q->code, &u->cap_code, q->ncode + 1, sizeof *q->code);
        q->code[q->ncode++] = o;
    }
}

void prog_unroll(const prog *p, prog *q, unroll_info *info)
{
    memset(q, 0, sizeof *q);
    if (info)
        memset(info, 0, sizeof *info);
    unroller u = {q, 0, 0, 0, info, p, 0, 0};
    q->n = p->n, q->m = p->m, q->nslots = p->n;
    q->x = dup(p->x, (size_t)p->n * sizeof *p->x);
    q->v = dup(p->v, (size_t)p->n * sizeof *p->v);
    q->w = dup(p->w, (size_t)p->m * sizeof *p->w);
    int *map = malloc(((size_t)p->nslots + 1) * sizeof *map);
    for (int i = 0; i < p->n; i++)
        map[i] = i;
    emit(&u, p, map, 0);
    q->outs = malloc(((size_t)p->m + 1) * sizeof *q->outs);
    for (int j = 0; j < p->m; j++)
        q->outs[j] = map[p->outs[j]];
    if (!q->code) q->code = malloc(sizeof *q->code);
    if (!q->args) q->args = malloc(sizeof *q->args);
    if (!q->consts) q->consts = malloc(sizeof *q->consts);
    if (info)
        info->map = map;
    else
        free(map);
}

void unroll_info_free(unroll_info *info)
{
    for (int k = 0; k < info->nspans; k++)
        free(info->spans[k].outs), free(info->spans[k].ins);
    free(info->spans);
    free(info->map);
    memset(info, 0, sizeof *info);
}

int branch_holds(int mode, double a, double b)
{
    switch (mode & 3) {
    case 1: return b > a;
    case 2: return a <= b;
    case 3: return b >= a;
    default: return a < b;
    }
}

int insn_reads(const prog *p, const insn *in, const double *val, int *buf)
{
    int n = 0;
    switch (in->op) {
    case OP_CONST: case OP_STEPK: case OP_NEST: return 0;  /* a nested gradient is a constant */
    case OP_BRANCH: buf[0] = branch_holds(in->mode, val[in->a], val[in->b]) ? in->c : in->d; return 1;
    case OP_LOOPOUT: case OP_NESTIN: case OP_NESTOUT: buf[n++] = in->a; break;
    default:
        if (in->op >= OP_FIRST_UNARY && in->op < OP_FIRST_ARRAY) {
            buf[n++] = in->a;
            if (in->op >= OP_FIRST_BINARY && in->mode == 0)
                buf[n++] = in->b;
            return n;
        }
        break;
    }
    int na = nargs_of(in);
    for (int i = 0; i < na; i++)
        buf[n++] = p->args[in->arg + i];
    return n;
}

/* ---- nested derivatives written out (README.md, "Nested derivatives") ----
 *
 * An OP_NESTR (ad_gradient_r, ad_jvp_r) inside the program is replaced by
 * plain instructions: copies of its arguments (NESTIN, the nested
 * program's inputs), the nested program's instructions on them, then its
 * reverse sweep (gradient) or forward sweep (jvp) as instructions too:
 * each local partial is written from the mathematics (d sin = cos, d a^b
 * = b a^(b-1) and log(a) a^b, ...), each product and sum of the sweep is a
 * multiplication and an addition.  The oracle (oracle.c) then
 * differentiates the nested results as everything else: a derivative of a
 * gradient is one of the sweep written out, to any depth (a nested call
 * inside a nested program is written out first, inside it).
 *
 * What the library does and the oracle follows (docs/api.md, "Nested
 * derivatives"): a call whose arguments hold no value of the enclosing
 * recording is ad_gradient (ad_jvp), its results constants; else the
 * results are the recording's values, and a sweep's step whose
 * cotangent (tangents) is a constant zero makes no records (its partials
 * are constants).  Records of the nested program are what its own
 * recording makes records (run_recorded: the values it reads are IDs).
 *
 * Values: the written-out program's double run must give the library's
 * values bit for bit, for the oracle linearises at them.  The nested
 * program's own instructions do (the same operations on the same
 * values); the sweep's partials and sums are the library's only to
 * rounding, so the nested call's outputs are forced to what the library
 * computed (NESTOUT: its value under the recording, run_recorded), and
 * the oracle widens each partial's error by the error its operands'
 * values may have (nest_info.approx; oracle.c).  Where a partial's formula
 * is not finite but the convention is (pow's d/da at a = b = 0, hypot at
 * the origin, logsumexp's infinite elements), its value is forced to the
 * convention (NESTOUT mode 1) and the derivative through it not
 * predicted. */

#define TWO_SQRTPI 1.1283791670955126    /* 2 / sqrt(pi) */
#define LOG2E 1.4426950408889634         /* 1 / ln 2 */
#define LOG10E 0.43429448190325182       /* 1 / ln 10 */

enum { P_ONE = -1, P_SKIP = -2 };  /* a partial that is exactly 1; a read that takes none */

typedef struct writer {
    prog *q;
    int cap_code, cap_args, cap_consts, cap_val, cap_act, cap_approx;
    double *val;            /* q's double run so far */
    unsigned char *act;     /* a value of the outermost recording (structurally) */
    /* lev[l], l >= 1: a value of the recording of the nested program being
     * written l levels down (what its inputs reach); lev[0] is act */
    unsigned char *lev[4];
    int cap_lev[4], nlev;
    int level;              /* the recording the sweep being written is replayed onto */
    int stack[4], nstack;   /* the nodes being written, outermost first */
    unsigned char *approx;  /* made while writing a sweep */
    int sweep;
    nest_info *ni;
    int top;                /* the instruction of the program being written */
} writer;

static int same_bits(double a, double b) { return (a != a && b != b) || !memcmp(&a, &b, sizeof a); }
static int dcls(double x) { return x != x ? 1 : x == INFINITY ? 2 : x == -INFINITY ? 3 : 0; }

static insn blank(int op)
{
    insn in;
    memset(&in, 0, sizeof in);
    in.op = op;
    in.a = in.b = in.c = in.d = -1;
    in.nout = 1;
    return in;
}

/* The slots instruction I reads, as insn_reads, but ad_dot of x with
 * itself (mode 1) reads x only. */
static int reads_of(const prog *q, const insn *I, const double *val, int *buf)
{
    int n = insn_reads(q, I, val, buf);
    return I->op == OP_DOT && I->mode ? I->len : n;
}

/* Appends in to q, runs it on double, returns its first output slot. */
static int put(writer *w, insn in)
{
    prog *q = w->q;
    in.out = q->nslots;
    q->code = prog_grow(q->code, &w->cap_code, q->ncode + 1, sizeof *q->code);
    q->code[q->ncode++] = in;
    q->nslots += in.nout;
    w->val = prog_grow(w->val, &w->cap_val, q->nslots + 1, sizeof *w->val);
    w->act = prog_grow(w->act, &w->cap_act, q->nslots + 1, 1);
    w->approx = prog_grow(w->approx, &w->cap_approx, q->nslots + 1, 1);
    run_double_step(q, w->val, q->ncode - 1);
    const insn *o = &q->code[q->ncode - 1];
    int *reads = malloc(((size_t)prog_nargs(o) + 3) * sizeof *reads);
    int nr = reads_of(q, o, w->val, reads);
    w->lev[0] = w->act;
    for (int l = 1; l < w->nlev; l++) {
        int cap = w->cap_lev[l];
        w->lev[l] = prog_grow(w->lev[l], &w->cap_lev[l], q->nslots + 1, 1);
        if (w->cap_lev[l] > cap)
            memset(w->lev[l] + cap, 0, (size_t)(w->cap_lev[l] - cap));
    }
    for (int l = 0; l < w->nlev; l++) {
        int a = 0;
        for (int t = 0; t < nr; t++)
            a |= w->lev[l][reads[t]];
        for (int t = 0; t < in.nout; t++)
            w->lev[l][in.out + t] = (unsigned char)a;
    }
    free(reads);
    for (int t = 0; t < in.nout; t++)
        w->approx[in.out + t] = (unsigned char)w->sweep;
    return in.out;
}

static int push_args(writer *w, const int *slots, int n)
{
    prog *q = w->q;
    q->args = prog_grow(q->args, &w->cap_args, q->nargs + n + 1, sizeof *q->args);
    int at = q->nargs;
    for (int i = 0; i < n; i++)
        q->args[q->nargs++] = slots[i];
    return at;
}

static int push_consts(writer *w, const double *c, int n)
{
    prog *q = w->q;
    q->consts = prog_grow(q->consts, &w->cap_consts, q->nconsts + n + 1, sizeof *q->consts);
    int at = q->nconsts;
    for (int i = 0; i < n; i++)
        q->consts[q->nconsts++] = c[i];
    return at;
}

static int w_const(writer *w, double k)
{
    insn in = blank(OP_CONST);
    in.k = k;
    return put(w, in);
}

static int w_un(writer *w, int op, int a)
{
    insn in = blank(op);
    in.a = a;
    return put(w, in);
}

static int w_bin(writer *w, int op, int a, int b)
{
    insn in = blank(op);
    in.a = a, in.b = b;
    return put(w, in);
}

/* a^k, k a constant of the operation (the library's pow_rd, whose
 * partial is a constant at k = 0 and 1, replay.c) */
static int w_powk(writer *w, int a, double k)
{
    insn in = blank(OP_POW);
    in.a = a, in.mode = 1, in.k = k;
    return put(w, in);
}

static int w_copy(writer *w, int a)
{
    insn in = blank(OP_NESTIN);
    in.a = a;
    return put(w, in);
}

/* Slot a, its value forced to k (mode 0: output d of nested call node;
 * mode 1: a partial at its convention; mode 2: a value of a partial's
 * formula that a rounded result makes inexact, as the library's record
 * has it). */
static int w_force(writer *w, int a, double k, int mode, int node, int d)
{
    insn in = blank(OP_NESTOUT);
    in.a = a, in.k = k, in.mode = mode, in.sub = node, in.d = d;
    return put(w, in);
}

static int w_prod(writer *w, const int *slots, int n)
{
    insn in = blank(OP_PROD);
    in.len = n;
    in.arg = push_args(w, slots, n);
    return put(w, in);
}

/* The partial p (a slot), or its convention conv where the formula's
 * value is of another class (NaN, +-Inf, finite). */
static int conventional(writer *w, int p, double conv)
{
    if (dcls(w->val[p]) == dcls(conv))
        return p;
    return w_force(w, p, conv, 1, -1, -1);
}

/* ---- the local partials, written as instructions ---- */

/* d/da of the unary instruction I (result r) at a: live, by its formula
 * on the slots; else the constant it takes (the library's, a record's
 * partial: a constant where the seed it multiplies is a constant 0). */
static int unary_partial(writer *w, const insn *I, int r, int live)
{
    ld pa, pb;
    oracle_scalar_partials(I, w->val[I->a], 0.0, w->val[r], &pa, &pb);
    double conv = (double)pa;
    int a = I->a, p;
    if (I->op == OP_NEG)
        return w_const(w, -1.0);
    if (I->op == OP_FABS || !live)
        return w_const(w, conv);
    switch (I->op) {
    case OP_SQRT: p = w_bin(w, OP_DIV, w_const(w, 0.5), r); break;
    case OP_CBRT: p = w_bin(w, OP_DIV, w_const(w, 1.0), w_bin(w, OP_MUL, w_const(w, 3.0), w_bin(w, OP_MUL, r, r))); break;
    case OP_EXP: p = r; break;
    case OP_EXPM1: p = w_un(w, OP_EXP, a); break;
    case OP_LOG: p = w_bin(w, OP_DIV, w_const(w, 1.0), a); break;
    case OP_LOG2: p = w_bin(w, OP_DIV, w_const(w, LOG2E), a); break;
    case OP_LOG10: p = w_bin(w, OP_DIV, w_const(w, LOG10E), a); break;
    case OP_LOG1P: p = w_bin(w, OP_DIV, w_const(w, 1.0), w_bin(w, OP_ADD, a, w_const(w, 1.0))); break;
    case OP_SIN: p = w_un(w, OP_COS, a); break;
    case OP_COS: p = w_un(w, OP_NEG, w_un(w, OP_SIN, a)); break;
    case OP_TAN: {
        int c = w_un(w, OP_COS, a);
        p = w_bin(w, OP_DIV, w_const(w, 1.0), w_bin(w, OP_MUL, c, c));
        break;
    }
    case OP_ASIN: case OP_ACOS: {
        int d = w_bin(w, OP_MUL, w_bin(w, OP_SUB, w_const(w, 1.0), a), w_bin(w, OP_ADD, w_const(w, 1.0), a));
        p = w_bin(w, OP_DIV, w_const(w, I->op == OP_ASIN ? 1.0 : -1.0), w_un(w, OP_SQRT, d));
        break;
    }
    case OP_ATAN: p = w_bin(w, OP_DIV, w_const(w, 1.0), w_bin(w, OP_ADD, w_const(w, 1.0), w_bin(w, OP_MUL, a, a))); break;
    case OP_SINH: p = w_un(w, OP_COSH, a); break;
    case OP_COSH: p = w_un(w, OP_SINH, a); break;
    case OP_TANH: {
        int c = w_un(w, OP_COSH, a);
        p = w_bin(w, OP_DIV, w_const(w, 1.0), w_bin(w, OP_MUL, c, c));
        break;
    }
    case OP_ASINH: p = w_bin(w, OP_DIV, w_const(w, 1.0), w_bin(w, OP_HYPOT, a, w_const(w, 1.0))); break;
    case OP_ACOSH: {
        int lo = w_un(w, OP_SQRT, w_bin(w, OP_SUB, a, w_const(w, 1.0)));
        int hi = w_un(w, OP_SQRT, w_bin(w, OP_ADD, a, w_const(w, 1.0)));
        p = w_bin(w, OP_DIV, w_const(w, 1.0), w_bin(w, OP_MUL, lo, hi));
        break;
    }
    case OP_ATANH: {
        int d = w_bin(w, OP_MUL, w_bin(w, OP_SUB, w_const(w, 1.0), a), w_bin(w, OP_ADD, w_const(w, 1.0), a));
        p = w_bin(w, OP_DIV, w_const(w, 1.0), d);
        break;
    }
    case OP_ERF: case OP_ERFC: {
        int g = w_un(w, OP_EXP, w_un(w, OP_NEG, w_bin(w, OP_MUL, a, a)));
        p = w_bin(w, OP_MUL, w_const(w, I->op == OP_ERF ? TWO_SQRTPI : -TWO_SQRTPI), g);
        break;
    }
    default:  /* lgamma, tgamma: not generated in nested programs (AD_ENOTSUP) */
        return w_force(w, w_const(w, conv), conv, 1, -1, -1);
    }
    return conventional(w, p, conv);
}

/* d/dA and d/dB of the binary instruction I (result r), A and B its
 * operands (slot a, slot b or the constant k by mode); need[0], need[1]:
 * which to make.  Into p[0], p[1] (P_ONE: exactly 1). */
static void binary_partials(writer *w, const insn *I, int r, int live, const int *need, int *p)
{
    int mode = I->mode, op = I->op;
    double av = w->val[I->a], bv = mode == 0 ? w->val[I->b] : 0.0;
    ld la, lb;
    oracle_scalar_partials(I, av, bv, w->val[r], &la, &lb);
    double conv[2] = {(double)la, (double)lb};  /* towards A (slot a, modes 0, 1), B (slot b; a in mode 2) */
    p[0] = p[1] = P_SKIP;
    int A = mode == 2 ? -1 : I->a, B = mode == 0 ? I->b : mode == 2 ? I->a : -1;
#define KSLOT(x) ((x) >= 0 ? (x) : ((x) = w_const(w, I->k)))
    switch (op) {
    case OP_ADD: p[0] = p[1] = P_ONE; return;
    case OP_SUB:
        p[0] = P_ONE;
        if (need[1])
            p[1] = w_const(w, -1.0);
        return;
    case OP_FMIN: case OP_FMAX:
        for (int i = 0; i < 2; i++)
            if (need[i])
                p[i] = w_const(w, conv[i]);
        return;
    default: break;
    }
    /* The replay makes both partials of a two-argument record (replay.c
     * partial2), the one of a constant argument too, which nothing reads:
     * on a nested program's recording its own replay applies it (the dead
     * records' class), NaN where its partials are not finite. */
    if (live && mode == 0 && op != OP_MUL && need[0] != need[1] && w->level >= 1 && w->nstack >= 2 &&
        w->lev[w->level][need[0] ? I->a : I->b] &&
        (!isfinite(av) || !isfinite(bv) || av == 0 || bv == 0 || !isfinite(conv[need[0] ? 1 : 0])))
        w->ni->nodes[w->stack[w->nstack - 2]].dead_nonfinite = 1;
    if (!live || (op == OP_MUL && mode != 0) || (op == OP_DIV && mode == 1)) {
        for (int i = 0; i < 2; i++)  /* constants: not live, or linear in its slot */
            if (need[i])
                p[i] = w_const(w, conv[i]);
        return;
    }
    switch (op) {
    case OP_MUL:  /* mode 0 */
        if (need[0]) p[0] = B;
        if (need[1]) p[1] = A;
        return;
    case OP_DIV:  /* a / b; k / a: d/dB = -r / B */
        if (need[0]) p[0] = w_bin(w, OP_DIV, w_const(w, 1.0), B);
        if (need[1]) p[1] = w_un(w, OP_NEG, w_bin(w, OP_DIV, r, B));
        break;
    case OP_POW:
        /* The replay makes log(0) r for d/da 0^a, and b a^(b-1) for d/da
         * a^0, before it takes the constant (replay.c partial1): records
         * nothing reads, on the recording it replays onto; in a nested
         * program's, whose own replay applies them (the dead records'
         * class), log(0) = -Inf, and 0^-1 = Inf, make NaN of its gradient. */
        if (w->level >= 1 && w->nstack >= 2 && w->lev[w->level][I->a] &&
            ((mode == 2 && I->k == 0.0 && need[1]) ||
             (mode == 1 && I->k == 0.0 && need[0] && !isfinite(1.0 / (av * av)))))
            w->ni->nodes[w->stack[w->nstack - 2]].dead_nonfinite = 1;
        if (need[0])
            p[0] = mode == 1 && I->k == 0.0 ? w_const(w, 0.0)
                 : mode == 1 && I->k == 1.0 ? w_const(w, 1.0)
                 : mode == 1 ? w_bin(w, OP_MUL, w_const(w, I->k), w_powk(w, A, I->k - 1.0))
                             : w_bin(w, OP_MUL, B, w_bin(w, OP_POW, A, w_bin(w, OP_SUB, B, w_const(w, 1.0))));
        if (need[1]) {  /* d/db a^b = 0 at a = 0 for every b (conventions.md): a constant */
            double a0 = mode == 2 ? I->k : av;
            p[1] = a0 == 0.0 ? w_const(w, 0.0) : w_bin(w, OP_MUL, w_un(w, OP_LOG, KSLOT(A)), r);
        }
        break;
    case OP_ATAN2: {
        /* b / (a^2 + b^2), -a / (a^2 + b^2), the sum of the squares as its
         * terms: what depends on a constant coordinate is then a constant
         * (as in the library's records), where hypot(a, b) would tie the
         * two together.  Far from the origin its partials leave the range
         * where the exact ones do not: those entries are not compared
         * (README.md, "Nested derivatives": found so). */
        int a = KSLOT(A), b = KSLOT(B);
        int q = w_bin(w, OP_ADD, w_bin(w, OP_MUL, a, a), w_bin(w, OP_MUL, b, b));
        if (need[0]) p[0] = w_bin(w, OP_DIV, B, q);
        if (need[1]) p[1] = w_un(w, OP_NEG, w_bin(w, OP_DIV, A, q));
        break;
    }
    case OP_HYPOT:
        if (need[0]) p[0] = w_bin(w, OP_DIV, KSLOT(A), r);
        if (need[1]) p[1] = w_bin(w, OP_DIV, KSLOT(B), r);
        break;
    default: abort();
    }
#undef KSLOT
    for (int i = 0; i < 2; i++)
        if (need[i])
            p[i] = conventional(w, p[i], conv[i]);
}

/* logsumexp's partials with the oracle's conventions (oracle.c
 * lse_edges): NaN with a NaN element, 1/(number of +Inf) on each, 1/n
 * when all are -Inf. */
static double softmax_conv(const double *x, int n, int k)
{
    int nan = 0, ninf = 0, nminf = 0;
    ld mx = -INFINITY, sum = 0;
    for (int i = 0; i < n; i++) {
        nan |= x[i] != x[i];
        ninf += x[i] == INFINITY;
        nminf += x[i] == -INFINITY;
        if (x[i] > mx) mx = x[i];
    }
    if (nan) return NAN;
    if (ninf) return x[k] == INFINITY ? 1.0 / ninf : 0.0;
    if (nminf == n) return 1.0 / n;
    for (int i = 0; i < n; i++)
        sum += expl((ld)x[i] - mx);
    return (double)(expl((ld)x[k] - mx) / sum);
}

/* The product of the elements but k, as IEEE forms it from exact factors
 * (long double: no overflow on the way), rounded. */
static double prod_conv(const double *x, int n, int k)
{
    ld m = 1;
    int zero = 0, inf = 0, nan = 0, neg = 0;
    for (int i = 0; i < n; i++) {
        if (i == k) continue;
        if (x[i] != x[i]) nan = 1;
        else if (x[i] == 0) zero = 1, neg ^= signbit(x[i]) != 0;
        else if (isinf(x[i])) inf = 1, neg ^= x[i] < 0;
        else m *= x[i];
    }
    if (nan || (zero && inf)) return NAN;
    if (zero) return neg ? -0.0 : 0.0;
    if (inf) return (neg ^ (m < 0)) ? -INFINITY : INFINITY;
    return (double)m;
}

/* The reads of instruction I at its output s that a sweep passes
 * through, into reads[], and (emit) their partials into ps[] (P_ONE,
 * P_SKIP for reads the nested program's recording does not make records,
 * iact; else a slot).  Returns how many. */
static int partials(writer *w, const insn *I, int s, const unsigned char *iact, int live, int emit,
                    int *reads, int *ps)
{
    const prog *q = w->q;
    int n = 0, op = I->op;
    if (op == OP_CONST || op == OP_NEST)
        return 0;
    if (op == OP_BRANCH || op == OP_NESTIN || op == OP_NESTOUT) {
        reads[0] = op == OP_BRANCH ? (branch_holds(I->mode, w->val[I->a], w->val[I->b]) ? I->c : I->d) : I->a;
        ps[0] = iact[reads[0]] ? P_ONE : P_SKIP;
        return 1;
    }
    if (op >= OP_FIRST_UNARY && op < OP_FIRST_BINARY) {
        reads[0] = I->a;
        ps[0] = !iact[I->a] ? P_SKIP : emit ? unary_partial(w, I, s, live) : P_SKIP;
        return 1;
    }
    if (op >= OP_FIRST_BINARY && op < OP_FIRST_ARRAY) {
        int p[2];
        if (I->mode == 0) {
            reads[0] = I->a, reads[1] = I->b;
            int need[2] = {iact[I->a], iact[I->b]};
            if (emit)
                binary_partials(w, I, s, live, need, p);
            ps[0] = need[0] && emit ? p[0] : P_SKIP;
            ps[1] = need[1] && emit ? p[1] : P_SKIP;
            return 2;
        }
        reads[0] = I->a;
        int need[2] = {I->mode == 1 && iact[I->a], I->mode == 2 && iact[I->a]};
        if (emit)
            binary_partials(w, I, s, live, need, p);
        ps[0] = !iact[I->a] || !emit ? P_SKIP : I->mode == 1 ? p[0] : p[1];
        return 1;
    }
    /* arrays (those nested programs hold: reduce.c's) */
    int L = I->len, base = I->arg;
    double *x = malloc(((size_t)L + 1) * sizeof *x);
    for (int i = 0; i < L; i++)
        x[i] = w->val[q->args[base + i]];
    for (int i = 0; i < L; i++) {
        int xi = w->q->args[base + i];
        switch (op) {
        case OP_SUM:
            reads[n] = xi, ps[n++] = P_ONE;
            break;
        case OP_DOT_RD:
            reads[n] = xi, ps[n++] = emit ? w_const(w, w->q->consts[I->cst + i]) : P_SKIP;
            break;
        case OP_SQNORM:
        sqnorm:  /* ad_dot of an array with itself is its squared norm (nary.h) */
            reads[n] = xi;
            ps[n++] = !emit ? P_SKIP : live ? w_bin(w, OP_MUL, w_const(w, 2.0), xi) : w_const(w, 2.0 * x[i]);
            break;
        case OP_DOT:
            if (I->mode) {
                goto sqnorm;
            } else {
                int yi = w->q->args[base + L + i];
                reads[n] = xi, ps[n++] = !emit ? P_SKIP : live ? yi : w_const(w, w->val[yi]);
                reads[n] = yi, ps[n++] = !emit ? P_SKIP : live ? xi : w_const(w, x[i]);
            }
            break;
        case OP_PROD: {
            reads[n] = xi;
            if (!emit || !iact[xi]) {
                ps[n++] = P_SKIP;
                break;
            }
            double conv = prod_conv(x, L, i);
            if (!live) {
                ps[n++] = w_const(w, conv);
                break;
            }
            int *others = malloc(((size_t)L + 1) * sizeof *others), no = 0;
            for (int t = 0; t < L; t++)
                if (t != i)
                    others[no++] = w->q->args[base + t];
            ps[n++] = conventional(w, no ? w_prod(w, others, no) : w_const(w, 1.0), conv);
            free(others);
            break;
        }
        case OP_LSE: {
            reads[n] = xi;
            if (!emit || !iact[xi]) {
                ps[n++] = P_SKIP;
                break;
            }
            double conv = softmax_conv(x, L, i);
            if (!live) {
                ps[n++] = w_const(w, conv);
                break;
            }
            /* exp(x_i - r): r is rounded, and x_i - r off by its last place,
             * so the exponent's value is log of the softmax (the record's
             * partial, as the library has it: its derivative is x_i - r's) */
            int e = w_bin(w, OP_SUB, xi, s);
            if (conv > 0 && isfinite(conv))
                e = w_force(w, e, log(conv), 2, -1, -1);
            ps[n++] = conventional(w, w_un(w, OP_EXP, e), conv);
            break;
        }
        default:
            fprintf(stderr, "prog_unnest: %s in a nested program is not written out\n", op_name(op));
            abort();
        }
    }
    free(x);
    for (int i = 0; i < n; i++)
        if (!iact[reads[i]])
            ps[i] = P_SKIP;
    return n;
}

/* Whether a partial of I at s towards a record (iact) is not finite, by
 * the conventions (what the library's record holds). */
static int nonfinite_partial(const writer *w, const insn *I, int s, const unsigned char *iact)
{
    const double *val = w->val;
    int op = I->op;
    if (op >= OP_FIRST_UNARY && op < OP_FIRST_ARRAY) {
        ld pa, pb;
        int binary = op >= OP_FIRST_BINARY, two = binary && I->mode == 0;
        oracle_scalar_partials(I, val[I->a], two ? val[I->b] : 0.0, val[s], &pa, &pb);
        int bad_a = (!binary || I->mode != 2) && iact[I->a] && !isfinite((double)pa);
        int bad_b = binary && ((two && iact[I->b]) || (I->mode == 2 && iact[I->a])) && !isfinite((double)pb);
        return bad_a || bad_b;
    }
    if (op < OP_FIRST_ARRAY)
        return 0;  /* copies, branches, constants */
    int L = I->len, bad = 0;
    const int *g = w->q->args + I->arg;
    double *x = malloc(((size_t)L + 1) * sizeof *x);
    for (int i = 0; i < L; i++)
        x[i] = val[g[i]];
    for (int i = 0; i < L && !bad; i++) {
        if (!iact[g[i]] && !(op == OP_DOT && !I->mode && iact[g[L + i]]))
            continue;
        switch (op) {
        case OP_DOT: bad = I->mode ? !isfinite(2.0 * x[i]) : !isfinite(x[i]) || !isfinite(val[g[L + i]]); break;
        case OP_SQNORM: bad = !isfinite(2.0 * x[i]); break;
        case OP_DOT_RD: bad = !isfinite(w->q->consts[I->cst + i]); break;
        case OP_PROD: bad = !isfinite(prod_conv(x, L, i)); break;
        case OP_LSE: bad = !isfinite(softmax_conv(x, L, i)); break;
        default: break;
        }
    }
    free(x);
    return bad;
}

/* Whether the library's record for I at s may have a partial that is
 * not finite where the written-out one's are: an atan2 far from the origin
 * or near it (the replay's a a + b b), and an instruction of a nested
 * call's written-out sweep (its formulas are ours, not the library's) at
 * values near the end of the range. */
static int replay_risky(const writer *w, const insn *I, int s)
{
    int *reads = malloc(((size_t)prog_nargs(I) + 3) * sizeof *reads);
    int nr = reads_of(w->q, I, w->val, reads), risky = 0;
    if (I->op == OP_ATAN2) {
        double a = I->mode == 2 ? I->k : w->val[I->a];
        double b = I->mode == 0 ? w->val[I->b] : I->mode == 1 ? I->k : w->val[I->a];
        double big = fmax(fabs(a), fabs(b));
        risky = !isfinite(big) || big > 0x1p255 || (big > 0 && big < 0x1p-255);
    }
    for (int t = -1; t < nr && !risky && w->approx[s]; t++) {
        double v = fabs(w->val[t < 0 ? s : reads[t]]);
        risky = !isfinite(v) || v > 0x1p400 || (v > 0 && v < 0x1p-400);
    }
    free(reads);
    return risky;
}

/* ---- the sweeps ---- */

/* A cotangent or tangent that makes records: a value of the recording the
 * sweep is replayed onto (not the outermost one's: a nested call inside a
 * nested program is replayed onto that program's), or not 0. */
static int live_of(const writer *w, int z) { return w->lev[w->level][z] || w->val[z] != 0.0; }

/* The reverse sweep over q's instructions [j0, j1) (the nested program
 * written out, slots below nsl), from its output out: the cotangents of
 * its inputs ins[0..k) into grad. */
static void reverse_sweep(writer *w, int j0, int j1, int nsl, const unsigned char *iact, const int *ins,
                          int k, int out, int *grad)
{
    int *cot = malloc(((size_t)nsl + 1) * sizeof *cot);
    for (int s = 0; s < nsl; s++)
        cot[s] = -1;
    if (iact[out])
        cot[out] = w_const(w, 1.0);
    for (int J = j1 - 1; J >= j0; J--) {
        insn I = w->q->code[J];
        int cap = prog_nargs(&I) * 2 + 4;
        int *reads = malloc((size_t)cap * sizeof *reads), *ps = malloc((size_t)cap * sizeof *ps);
        for (int t = I.nout - 1; t >= 0; t--) {
            int s = I.out + t;
            if (!iact[s] || cot[s] < 0)
                continue;
            int z = cot[s];
            int n = partials(w, &I, s, iact, live_of(w, z), 1, reads, ps);
            for (int i = 0; i < n; i++) {
                if (ps[i] == P_SKIP)
                    continue;
                int c = ps[i] == P_ONE ? z : w_bin(w, OP_MUL, ps[i], z);
                int r = reads[i];
                cot[r] = cot[r] < 0 ? c : w_bin(w, OP_ADD, cot[r], c);
            }
        }
        free(reads), free(ps);
    }
    for (int i = 0; i < k; i++)
        grad[i] = cot[ins[i]] >= 0 ? cot[ins[i]] : w_const(w, 0.0);
    free(cot);
}

/* The forward sweep over the same, the inputs' tangents the slots vs:
 * the output's tangent into *jv. */
static void forward_sweep(writer *w, int j0, int j1, int nsl, const unsigned char *iact, const int *ins,
                          const int *vs, int k, int out, int *jv)
{
    int *tan = malloc(((size_t)nsl + 1) * sizeof *tan);
    for (int s = 0; s < nsl; s++)
        tan[s] = -1;
    for (int i = 0; i < k; i++)
        tan[ins[i]] = vs[i];
    for (int J = j0; J < j1; J++) {
        insn I = w->q->code[J];
        int cap = prog_nargs(&I) * 2 + 4;
        int *reads = malloc((size_t)cap * sizeof *reads), *ps = malloc((size_t)cap * sizeof *ps);
        for (int t = 0; t < I.nout; t++) {
            int s = I.out + t;
            if (!iact[s])
                continue;
            /* the partials are made only if a tangent they multiply is live */
            int n = partials(w, &I, s, iact, 0, 0, reads, ps), needed = 0;
            for (int i = 0; i < n; i++)
                needed |= iact[reads[i]] && tan[reads[i]] >= 0 && live_of(w, tan[reads[i]]);
            n = partials(w, &I, s, iact, needed, 1, reads, ps);
            int ts = -1;
            for (int i = 0; i < n; i++) {
                if (ps[i] == P_SKIP || tan[reads[i]] < 0)
                    continue;
                int c = ps[i] == P_ONE ? tan[reads[i]] : w_bin(w, OP_MUL, ps[i], tan[reads[i]]);
                ts = ts < 0 ? c : w_bin(w, OP_ADD, ts, c);
            }
            tan[s] = ts;
        }
        free(reads), free(ps);
    }
    *jv = iact[out] && tan[out] >= 0 ? tan[out] : w_const(w, 0.0);
    free(tan);
}

/* ---- writing programs out ---- */

static void write_nestr(writer *w, const prog *src, const insn *in, int *map, const double *ref,
                        const unsigned char *ref_act, int depth);

/* src's instructions into q, src's slot s being q's map[s] (its inputs'
 * given); ref, ref_act: src's values and activity under its recording. */
static void write_prog(writer *w, const prog *src, int *map, const double *ref, const unsigned char *ref_act,
                       int depth)
{
    for (int j = 0; j < src->ncode; j++) {
        const insn *in = &src->code[j];
        if (depth == 0)
            w->top = j;
        if (in->op == OP_NESTR) {
            write_nestr(w, src, in, map, ref, ref_act, depth);
            continue;
        }
        insn o = *in;
        if (o.a >= 0) o.a = map[o.a];
        if (o.b >= 0) o.b = map[o.b];
        if (o.op == OP_BRANCH) o.c = map[o.c], o.d = map[o.d];
        int na = prog_nargs(in), nc = prog_nconsts(in);
        int *t = malloc(((size_t)na + 1) * sizeof *t);
        for (int i = 0; i < na; i++)
            t[i] = map[src->args[in->arg + i]];
        o.arg = push_args(w, t, na);
        free(t);
        o.cst = push_consts(w, src->consts + in->cst, nc);
        if (o.op == OP_NEST || o.op == OP_LOOP) {  /* its program, copied */
            prog *q = w->q;
            q->subs = realloc(q->subs, (size_t)(q->nsubs + 1) * sizeof *q->subs);
            prog_copy(&q->subs[q->nsubs], &src->subs[in->sub]);
            o.sub = q->nsubs++;
        }
        int out = put(w, o);
        for (int i = 0; i < in->nout; i++) {
            map[in->out + i] = out + i;
            if (depth == 0)  /* the library's (a product's rows, say, one by one) */
                w->act[out + i] = ref_act[in->out + i];
        }
    }
}

static void write_nestr(writer *w, const prog *src, const insn *in, int *map, const double *ref,
                        const unsigned char *ref_act, int depth)
{
    const prog *sub = &src->subs[in->sub];
    int k = in->len, na = prog_nargs(in), nout = in->nout;
    int xs[6];
    nest_node nd;
    memset(&nd, 0, sizeof nd);
    nd.mode = in->mode, nd.k = k, nd.depth = depth, nd.top = w->top, nd.sub = sub;
    for (int i = 0; i < na; i++) {
        xs[i] = map[src->args[in->arg + i]];
        nd.in[i] = w->val[xs[i]];
        nd.active |= ref_act[src->args[in->arg + i]];
    }
    for (int t = 0; t < nout; t++)
        nd.ref[t] = ref[in->out + t];
    if (in->mode)
        nd.plain_st = ad_jvp(fuzz_function, (void *)sub, (size_t)k, nd.in, nd.in + k, 1, nd.plain, nd.plain + 1);
    else
        nd.plain_st = ad_gradient(fuzz_objective, (void *)sub, (size_t)k, nd.in, nd.plain, nd.plain + 1);
    nest_info *ni = w->ni;
    ni->nodes = prog_grow(ni->nodes, &ni->cap, ni->nnodes + 1, sizeof *ni->nodes);
    int node = ni->nnodes++;
    ni->nodes[node] = nd;
    double *sval = malloc(((size_t)sub->nslots + 1) * sizeof *sval);
    unsigned char *sact = malloc((size_t)sub->nslots + 1);
    ad_status st = nd.active ? run_recorded(sub, nd.in, sval, sact) : AD_OK;
    if (!nd.active || st != AD_OK) {
        /* ad_gradient's (ad_jvp's) constants; or a replay that fails, and
         * fails the recording (nest_info.status) */
        for (int t = 0; t < nout; t++)
            map[in->out + t] = w_const(w, nd.ref[t]);
        free(sval), free(sact);
        return;
    }
    int *smap = malloc(((size_t)sub->nslots + 1) * sizeof *smap);
    int code_lo = w->q->ncode;
    /* the nested program's recording, a level down */
    int l = depth + 1, saved_nlev = w->nlev;
    w->lev[l] = prog_grow(w->lev[l], &w->cap_lev[l], w->q->nslots + 1, 1);
    memset(w->lev[l], 0, (size_t)w->cap_lev[l]);
    w->nlev = l + 1;
    for (int i = 0; i < k; i++) {
        smap[i] = w_copy(w, xs[i]);
        w->lev[l][smap[i]] = 1;
    }
    w->stack[w->nstack++] = node;
    write_prog(w, sub, smap, sval, sact, depth + 1);
    for (int s = 0; s < sub->nslots && ni->bad_value < 0; s++)
        if (!same_bits(w->val[smap[s]], sval[s]))
            ni->bad_value = s, ni->bad_got = w->val[smap[s]], ni->bad_want = sval[s];
    int code_hi = w->q->ncode, nsl = w->q->nslots, out = smap[sub->outs[0]];
    /* the records of the nested program's recording: what its inputs reach */
    unsigned char *iact = calloc((size_t)nsl + 1, 1);
    int cap = 16, *reads = malloc((size_t)cap * sizeof *reads);
    for (int i = 0; i < k; i++)
        iact[smap[i]] = 1;
    for (int J = code_lo + k; J < code_hi; J++) {
        const insn *I = &w->q->code[J];
        if (prog_nargs(I) + 3 > cap) {
            cap = prog_nargs(I) + 3;
            reads = realloc(reads, (size_t)cap * sizeof *reads);
        }
        int nr = reads_of(w->q, I, w->val, reads), a = 0;
        for (int t = 0; t < nr; t++)
            a |= iact[reads[t]];
        for (int t = 0; t < I->nout; t++)
            iact[I->out + t] = (unsigned char)a;
    }
    /* A record the output does not reach, with a partial that is not
     * finite (reported: the replay's reverse sweep applies it, 0 x Inf) */
    unsigned char *reach = calloc((size_t)nsl + 1, 1);
    reach[out] = iact[out];
    for (int J = code_hi - 1; J >= code_lo + k && !in->mode; J--) {
        const insn *I = &w->q->code[J];
        if (prog_nargs(I) + 3 > cap) {
            cap = prog_nargs(I) + 3;
            reads = realloc(reads, (size_t)cap * sizeof *reads);
        }
        int r = 0;
        for (int t = 0; t < I->nout; t++)
            r |= reach[I->out + t];
        if (!r) {
            for (int t = 0; t < I->nout && !ni->nodes[node].dead_nonfinite; t++)
                if (iact[I->out + t] && (nonfinite_partial(w, I, I->out + t, iact) || replay_risky(w, I, I->out + t)))
                    ni->nodes[node].dead_nonfinite = 1;
            continue;
        }
        int nr = reads_of(w->q, I, w->val, reads);
        for (int t = 0; t < nr; t++)
            reach[reads[t]] |= iact[reads[t]];
    }
    free(reach);
    /* atan2 far from the origin or near it, where the library's replayed
     * partials b / (a a + b b) lose their own partials to the range */
    for (int J = code_lo + k; J < code_hi; J++) {
        const insn *I = &w->q->code[J];
        if (I->op != OP_ATAN2 || !iact[I->out])
            continue;
        double a = I->mode == 2 ? I->k : w->val[I->a];
        double b = I->mode == 0 ? w->val[I->b] : I->mode == 1 ? I->k : w->val[I->a];
        double big = fmax(fabs(a), fabs(b));
        if (isfinite(big) && (big > 0x1p255 || (big > 0 && big < 0x1p-255)))
            ni->nodes[node].atan2_far = 1;
    }
    /* jvp: a partial that is not finite towards what only inputs of
     * direction 0 reach (reported: ad_jvp leaves inputs of weight 0
     * unseeded, docs/conventions.md; the replay multiplies their zero
     * tangents by it, 0 x Inf) */
    unsigned char *zr = calloc((size_t)nsl + 1, 1), *sr = calloc((size_t)nsl + 1, 1);
    for (int i = 0; i < k && in->mode; i++) {
        if (w->val[xs[k + i]] == 0.0)
            zr[smap[i]] = 1;
        else
            sr[smap[i]] = 1;
    }
    for (int J = code_lo + k; J < code_hi && in->mode; J++) {
        const insn *I = &w->q->code[J];
        if (prog_nargs(I) + 3 > cap) {
            cap = prog_nargs(I) + 3;
            reads = realloc(reads, (size_t)cap * sizeof *reads);
        }
        int nr = reads_of(w->q, I, w->val, reads), z = 0, sd = 0;
        for (int t = 0; t < nr; t++)
            z |= zr[reads[t]], sd |= sr[reads[t]];
        for (int t = 0; t < I->nout; t++) {
            zr[I->out + t] = (unsigned char)z, sr[I->out + t] = (unsigned char)sd;
            if (!iact[I->out + t] || !z)
                continue;
            /* towards a read that only zero directions reach */
            unsigned char *only = calloc((size_t)nsl + 1, 1);
            for (int r = 0; r < nr; r++)
                if (zr[reads[r]] && !sr[reads[r]])
                    only[reads[r]] = 1;
            if (nonfinite_partial(w, I, I->out + t, only))
                ni->nodes[node].zero_dir_nonfinite = 1;
            free(only);
        }
    }
    free(zr), free(sr);
    free(reads);
    int res[4];
    res[0] = out;
    int saved_sweep = w->sweep, saved_level = w->level;
    w->sweep = 1;
    w->level = depth;
    w->nlev = l;  /* the sweep is made on the enclosing recording */
    if (in->mode)
        forward_sweep(w, code_lo + k, code_hi, nsl, iact, smap, xs + k, k, out, &res[1]);
    else
        reverse_sweep(w, code_lo + k, code_hi, nsl, iact, smap, k, out, res + 1);
    w->sweep = saved_sweep;
    w->level = saved_level;
    w->nlev = saved_nlev;
    w->nstack--;
    for (int t = 0; t < nout; t++) {
        map[in->out + t] = w_force(w, res[t], nd.ref[t], 0, node, t);
        if (depth == 0 && ni->bad_active < 0 && w->act[map[in->out + t]] != ref_act[in->out + t])
            ni->bad_active = in->out + t, ni->bad_act_got = w->act[map[in->out + t]];
    }
    free(iact), free(smap), free(sval), free(sact);
}

void prog_unnest(const prog *p, prog *q, nest_info *ni)
{
    memset(q, 0, sizeof *q);
    memset(ni, 0, sizeof *ni);
    ni->bad_value = ni->bad_active = -1;
    writer w;
    memset(&w, 0, sizeof w);
    w.q = q, w.ni = ni;
    w.nlev = 1;
    q->n = p->n, q->m = p->m, q->nslots = p->n;
    size_t n1 = (size_t)p->n + 1, m1 = (size_t)p->m + 1;
    q->x = malloc(n1 * sizeof *q->x), q->v = malloc(n1 * sizeof *q->v), q->w = malloc(m1 * sizeof *q->w);
    if (p->n) {
        memcpy(q->x, p->x, (size_t)p->n * sizeof *p->x);
        memcpy(q->v, p->v, (size_t)p->n * sizeof *p->v);
    }
    memcpy(q->w, p->w, (size_t)p->m * sizeof *p->w);
    w.val = prog_grow(w.val, &w.cap_val, p->n + 1, sizeof *w.val);
    w.act = prog_grow(w.act, &w.cap_act, p->n + 1, 1);
    w.approx = prog_grow(w.approx, &w.cap_approx, p->n + 1, 1);
    for (int i = 0; i < p->n; i++)
        w.val[i] = p->x[i], w.act[i] = 1, w.approx[i] = 0;
    double *ref = malloc(((size_t)p->nslots + 1) * sizeof *ref);
    unsigned char *ract = malloc((size_t)p->nslots + 1);
    ni->status = run_recorded(p, p->x, ref, ract);
    int *map = malloc(((size_t)p->nslots + 1) * sizeof *map);
    for (int i = 0; i < p->n; i++)
        map[i] = i;
    write_prog(&w, p, map, ref, ract, 0);
    q->outs = malloc(m1 * sizeof *q->outs);
    for (int j = 0; j < p->m; j++)
        q->outs[j] = map[p->outs[j]];
    if (!q->code) q->code = malloc(sizeof *q->code);
    if (!q->args) q->args = malloc(sizeof *q->args);
    if (!q->consts) q->consts = malloc(sizeof *q->consts);
    for (int s = p->n; s < p->nslots && ni->bad_value < 0 && ni->status == AD_OK; s++)
        if (!same_bits(w.val[map[s]], ref[s]))
            ni->bad_value = s, ni->bad_got = w.val[map[s]], ni->bad_want = ref[s];
    ni->map = map;
    ni->approx = w.approx;
    free(w.val), free(w.act), free(ref), free(ract);
    for (int l = 1; l < 4; l++)
        free(w.lev[l]);
}

void nest_info_free(nest_info *ni)
{
    free(ni->map), free(ni->approx), free(ni->nodes);
    memset(ni, 0, sizeof *ni);
}
