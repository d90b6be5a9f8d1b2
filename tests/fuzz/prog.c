/* Programs: copying, freeing, printing, and deleting an instruction (for
 * the shrinker). */
#include <stdlib.h>
#include <string.h>

#include "prog.h"

static const char *const names[OP_COUNT] = {
    "const", "branch", "nest", "loop", "stepk", "loopout", "neg", "sqrt", "cbrt", "exp", "expm1", "log", "log1p", "log2",
    "log10", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
    "acosh", "atanh", "fabs", "erf", "erfc", "lgamma", "tgamma", "add", "sub", "mul", "div",
    "pow", "atan2", "hypot", "fmin", "fmax", "ad_sum", "ad_dot", "ad_dot_rd", "ad_sqnorm",
    "ad_prod", "ad_logsumexp", "ad_matvec", "ad_matvec_rr", "ad_axpy", "ad_mat_vec",
    "ad_mat_sqnorm", "ad_external",
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
static int nconsts_of(const insn *in)
{
    switch (in->op) {
    case OP_DOT_RD: return in->len;
    case OP_MATVEC: return in->rows * in->len;
    case OP_MAT_VEC: case OP_MAT_SQNORM: return in->mode == 1 ? in->len : 0;
    default: return 0;
    }
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
    case OP_SUM: case OP_DOT_RD: case OP_SQNORM: case OP_PROD: case OP_LSE: case OP_MATVEC:
    case OP_EXTERNAL: case OP_NEST: return L;
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
        fprintf(out, " s%d < s%d ? s%d : s%d\n", in->a, in->b, in->c, in->d);
        return;
    }
    if (in->op == OP_STEPK) {
        fprintf(out, " %.17g * (k %% 4 + 1)\n", in->k);
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
        if (in->op == OP_NEST)
            fprintf(out, " sub=%d result=%s%d", in->sub, in->d < 0 ? "fx" : "grad", in->d < 0 ? 0 : in->d);
        fprintf(out, " args[");
        int na = nargs_of(in);
        for (int i = 0; i < na; i++)
            fprintf(out, "%ss%d", i ? " " : "", p->args[in->arg + i]);
        fprintf(out, "]");
        int nc = in->op == OP_DOT_RD ? in->len : in->op == OP_MATVEC ? in->rows * in->len
               : (in->op == OP_MAT_VEC || in->op == OP_MAT_SQNORM) && in->mode == 1 ? in->len : 0;
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
        int nest = 0, loop = 0;
        for (int j = 0; j < p->ncode; j++) {
            nest |= p->code[j].op == OP_NEST && p->code[j].sub == i;
            loop |= p->code[j].op == OP_LOOP && p->code[j].sub == i;
        }
        if (nest)
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
        if (o.op == OP_NEST) {  /* its objective, copied */
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

int insn_reads(const prog *p, const insn *in, const double *val, int *buf)
{
    int n = 0;
    switch (in->op) {
    case OP_CONST: case OP_STEPK: case OP_NEST: return 0;  /* a nested gradient is a constant */
    case OP_BRANCH: buf[0] = val[in->a] < val[in->b] ? in->c : in->d; return 1;
    case OP_LOOPOUT: buf[n++] = in->a; break;
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
