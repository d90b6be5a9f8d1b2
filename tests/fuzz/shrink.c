/* Shrinking a failing program: delete instructions, outputs, array
 * elements and simplify inputs while the same driver still fails in the
 * same way (a failure of no known class). */
#include <stdlib.h>
#include <string.h>

#include "check.h"

extern int fuzz_strict;

int shrink_still_fails(const prog *p, const char *driver, const char *kind);
void shrink(prog *p, const char *driver, const char *kind);

/* For shrinking a known failure: the class it must keep (NULL: none). */
const char *shrink_class;

int shrink_still_fails(const prog *p, const char *driver, const char *kind)
{
    report r;
    int strict = fuzz_strict;
    fuzz_strict = 0;
    check_program(p, &r);
    fuzz_strict = strict;
    int n = r.nfail < FUZZ_KEEP ? r.nfail : FUZZ_KEEP;
    for (int k = 0; k < n; k++) {
        const char *kn = r.f[k].known;
        int same = shrink_class ? kn && !strcmp(kn, shrink_class) : !kn || strict;
        if (same && !strcmp(r.f[k].driver, driver) && !strcmp(r.f[k].kind, kind))
            return 1;
    }
    return 0;
}

/* Try t in place of p: keep it if it still fails, else drop it. */
static int attempt(prog *p, prog *t, const char *driver, const char *kind)
{
    if (shrink_still_fails(t, driver, kind)) {
        prog_free(p);
        *p = *t;
        return 1;
    }
    prog_free(t);
    return 0;
}

static int drop_insns(prog *p, const char *driver, const char *kind)
{
    int progress = 0;
    for (int j = p->ncode - 1; j >= 0; j--) {
        if (j >= p->ncode)
            continue;
        prog t;
        prog_copy(&t, p);
        if (!prog_delete(&t, j)) {
            prog_free(&t);
            continue;
        }
        progress |= attempt(p, &t, driver, kind);
    }
    return progress;
}

static int drop_outputs(prog *p, const char *driver, const char *kind)
{
    int progress = 0;
    for (int j = p->m - 1; j >= 0 && p->m > 1; j--) {
        prog t;
        prog_copy(&t, p);
        memmove(t.outs + j, t.outs + j + 1, (size_t)(t.m - j - 1) * sizeof *t.outs);
        memmove(t.w + j, t.w + j + 1, (size_t)(t.m - j - 1) * sizeof *t.w);
        t.m--;
        progress |= attempt(p, &t, driver, kind);
    }
    return progress;
}

static int simplify_inputs(prog *p, const char *driver, const char *kind)
{
    static const double simple[] = {1.0, 0.5, 2.0};
    int progress = 0;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < 3; k++) {
            if (p->x[i] == simple[k] && p->v[i] == 1.0)
                break;
            prog t;
            prog_copy(&t, p);
            t.x[i] = simple[k];
            t.v[i] = 1.0;
            if (attempt(p, &t, driver, kind)) {
                progress = 1;
                break;
            }
        }
    for (int j = 0; j < p->m; j++) {
        if (p->w[j] == 1.0)
            continue;
        prog t;
        prog_copy(&t, p);
        t.w[j] = 1.0;
        progress |= attempt(p, &t, driver, kind);
    }
    return progress;
}

static int shorten_arrays(prog *p, const char *driver, const char *kind)
{
    int progress = 0;
    for (int j = 0; j < p->ncode; j++) {
        int op = p->code[j].op;
        if (op != OP_SUM && op != OP_SQNORM && op != OP_PROD && op != OP_LSE && op != OP_DOT_RD &&
            op != OP_DOT)
            continue;
        while (p->code[j].len > 0) {
            prog t;
            prog_copy(&t, p);
            t.code[j].len /= 2;
            if (!attempt(p, &t, driver, kind))
                break;
            progress = 1;
        }
    }
    return progress;
}

/* The idx-th program of p's tree in preorder (0: p itself; then the
 * nested objectives and loop steps, theirs inside), or NULL. */
static prog *nth_prog(prog *p, int *idx)
{
    if ((*idx)-- == 0)
        return p;
    for (int i = 0; i < p->nsubs; i++) {
        prog *q = nth_prog(&p->subs[i], idx);
        if (q)
            return q;
    }
    return NULL;
}

static prog *prog_at(prog *p, int idx) { return nth_prog(p, &idx); }

/* Instructions of the nested programs (loop steps, nested objectives). */
static int drop_sub_insns(prog *p, const char *driver, const char *kind)
{
    int progress = 0;
    for (int idx = 1; prog_at(p, idx); idx++)
        for (int j = prog_at(p, idx)->ncode - 1; j >= 0; j--) {
            if (j >= prog_at(p, idx)->ncode)
                continue;
            prog t;
            prog_copy(&t, p);
            if (!prog_delete(prog_at(&t, idx), j)) {
                prog_free(&t);
                continue;
            }
            progress |= attempt(p, &t, driver, kind);
        }
    return progress;
}

/* Fewer steps in a loop, then the default snapshot count. */
static int fewer_steps(prog *p, const char *driver, const char *kind)
{
    static const int counts[] = {0, 1, 2, 3, 7};
    int progress = 0;
    for (int idx = 0; prog_at(p, idx); idx++)
        for (int j = 0; j < prog_at(p, idx)->ncode; j++) {
            const insn *in = &prog_at(p, idx)->code[j];
            if (in->op != OP_LOOP)
                continue;
            for (int k = 0; k < 5 && counts[k] < in->steps; k++) {
                prog t;
                prog_copy(&t, p);
                prog_at(&t, idx)->code[j].steps = counts[k];
                if (attempt(p, &t, driver, kind)) {
                    progress = 1;
                    break;
                }
            }
            in = &prog_at(p, idx)->code[j];
            if (in->snaps != 0) {
                prog t;
                prog_copy(&t, p);
                prog_at(&t, idx)->code[j].snaps = 0;
                progress |= attempt(p, &t, driver, kind);
            }
        }
    return progress;
}

void shrink(prog *p, const char *driver, const char *kind)
{
    for (int round = 0; round < 8; round++) {
        int progress = drop_insns(p, driver, kind);
        progress |= drop_sub_insns(p, driver, kind);
        progress |= fewer_steps(p, driver, kind);
        progress |= drop_outputs(p, driver, kind);
        progress |= shorten_arrays(p, driver, kind);
        progress |= simplify_inputs(p, driver, kind);
        if (!progress)
            break;
    }
}
