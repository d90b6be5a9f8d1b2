/* Programs: copying, freeing, printing, and deleting an instruction (for
 * the shrinker). */
#include <stdlib.h>
#include <string.h>

#include "prog.h"

static const char *const names[OP_COUNT] = {
    "const", "branch", "nest", "neg", "sqrt", "cbrt", "exp", "expm1", "log", "log1p", "log2",
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

/* How many args an instruction reads from the pool. */
static int nargs_of(const insn *in)
{
    int L = in->len, R = in->rows;
    switch (in->op) {
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
}

void prog_print(const prog *p, FILE *out)
{
    print_prog(p, out, "  ");
    for (int i = 0; i < p->nsubs; i++) {
        int used = 0;
        for (int j = 0; j < p->ncode; j++)
            used |= p->code[j].op == OP_NEST && p->code[j].sub == i;
        if (!used)
            continue;
        fprintf(out, "  nested objective sub=%d (output: its s%d):\n", i, p->subs[i].outs[0]);
        print_prog(&p->subs[i], out, "      ");
    }
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
    int lo = del.out, hi = del.out + del.nout, shift = del.nout;
#define MAP(s) ((s) < lo ? (s) : (s) < hi ? repl : (s) - shift)
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
