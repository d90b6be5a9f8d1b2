/* ADBench LSTM: see lstm.h. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lstm.h"
#include "reader.h"

#define T double
#define NAME(id) id##_d
#include "lstm_objective.h"

#define T ad_real
#define NAME(id) id##_ad
#include "lstm_objective.h"

/* ---- sizes ---- */

/* Sizes whose every derived count (inputs, state, text, scratch, bytes of
 * each array) fits a size_t with room to spare: what a file claims is
 * checked before anything is allocated or indexed with it.  c >= 2: the
 * loss divides by (c - 1) b. */
static int sizes_fit(size_t l, size_t c, size_t b)
{
    size_t limit = SIZE_MAX / 64;
    return l && c >= 2 && b && l < limit && adb_mul_sat(adb_mul_sat(8, l) + 3, b) < limit
           && adb_mul_sat(c, b) < limit;
}

size_t lstm_inputs(const lstm_problem *p)
{
    return (8 * p->l + 3) * p->b;
}

void lstm_pack(const lstm_problem *p, double *params)
{
    size_t main_count = 8 * p->l * p->b;
    memcpy(params, p->main_params, main_count * sizeof *params);
    memcpy(params + main_count, p->extra, 3 * p->b * sizeof *params);
}

/* ---- reading numbers, with the line they were on ---- */

/* what[0..count) as finite doubles; `what` names the row in errors. */
static int read_row(adb_reader *r, double *dst, size_t count, const char *what)
{
    char tok[ADB_TOKEN_MAX];
    for (size_t i = 0; i < count; i++) {
        int got = adb_next_double(r, &dst[i], tok);
        if (got == ADB_GOT)
            continue;
        if (got == ADB_END)
            return adb_fail(r, "the file ends here; %s[%zu] expected next", what, i);
        return adb_fail(r, "%s[%zu]: expected a finite number, found \"%s\"", what, i,
                        got == ADB_TOO_LONG ? "(too long)" : tok);
    }
    return 0;
}

/* ---- the data file ---- */

static int read_sizes(adb_reader *r, lstm_problem *p)
{
    long long v[3];
    const long long lo[3] = {1, 2, 1};
    const char *what[3] = {"l (layers)", "c (characters)", "b (bits per character)"};
    for (int i = 0; i < 3; i++) {
        int e = adb_read_integer(r, &v[i], lo[i], LLONG_MAX, what[i]);
        if (e)
            return e;
    }
    if ((unsigned long long)v[0] > SIZE_MAX || (unsigned long long)v[1] > SIZE_MAX
        || (unsigned long long)v[2] > SIZE_MAX
        || !sizes_fit((size_t)v[0], (size_t)v[1], (size_t)v[2]))
        return adb_fail(r, "sizes l c b = %lld %lld %lld are too large", v[0], v[1], v[2]);
    p->l = (size_t)v[0];
    p->c = (size_t)v[1];
    p->b = (size_t)v[2];
    return 0;
}

static int alloc_problem(lstm_problem *p)
{
    p->main_params = calloc(8 * p->l * p->b, sizeof *p->main_params);
    p->extra = calloc(3 * p->b, sizeof *p->extra);
    p->state = calloc(2 * p->l * p->b, sizeof *p->state);
    p->seq = calloc(p->c * p->b, sizeof *p->seq);
    return p->main_params && p->extra && p->state && p->seq ? 0 : ENOMEM;
}

/* The blocks in the file's order: per layer a row of 4b weights and one of
 * 4b biases; in_w, out_w, out_b; per layer h and c; the text. */
static int read_blocks(adb_reader *r, lstm_problem *p)
{
    static const char *const extra[3] = {"in_w", "out_w", "out_b"};
    char what[64];
    size_t b = p->b;
    int e = 0;
    for (size_t j = 0; j < p->l && !e; j++) {
        snprintf(what, sizeof what, "layer %zu weights", j);
        if (!(e = read_row(r, p->main_params + 8 * b * j, 4 * b, what))) {
            snprintf(what, sizeof what, "layer %zu biases", j);
            e = read_row(r, p->main_params + 8 * b * j + 4 * b, 4 * b, what);
        }
    }
    for (size_t k = 0; k < 3 && !e; k++)
        e = read_row(r, p->extra + k * b, b, extra[k]);
    for (size_t k = 0; k < 2 * p->l && !e; k++) {
        snprintf(what, sizeof what, "layer %zu state %s", k / 2, k % 2 ? "c" : "h");
        e = read_row(r, p->state + k * b, b, what);
    }
    for (size_t t = 0; t < p->c && !e; t++) {
        snprintf(what, sizeof what, "character %zu", t);
        e = read_row(r, p->seq + t * b, b, what);
    }
    return e;
}

static int parse_problem(adb_reader *r, lstm_problem *p)
{
    int e = read_sizes(r, p);
    if (e)
        return e;
    if (alloc_problem(p))
        return adb_error(r, ENOMEM, "no memory for l c b = %zu %zu %zu", p->l, p->c, p->b);
    if ((e = read_blocks(r, p)))
        return e;
    if (!adb_at_end(r))
        return adb_fail(r, "unexpected data after the %zu characters", p->c);
    return 0;
}

int lstm_read(FILE *f, const char *name, lstm_problem *p, char err[LSTM_ERR_SIZE])
{
    adb_reader r;
    adb_tokens(&r, f, name, err, LSTM_ERR_SIZE);
    memset(p, 0, sizeof *p);
    int e = parse_problem(&r, p);
    if (e)
        lstm_free(p);
    return adb_status(e);
}

int lstm_load(const char *path, lstm_problem *p, char err[LSTM_ERR_SIZE])
{
    memset(p, 0, sizeof *p);
    FILE *f = adb_open(path, err, LSTM_ERR_SIZE);
    return f ? adb_close(f, lstm_read(f, path, p, err)) : -1;
}

void lstm_free(lstm_problem *p)
{
    free(p->main_params);
    free(p->extra);
    free(p->state);
    free(p->seq);
    memset(p, 0, sizeof *p);
}

/* ---- reference files ---- */

/* A "# l c b = ..." header gives the sizes; other comments are skipped. */
static int comment_line(adb_reader *r, const char *line, lstm_reference *ref)
{
    long long l, c, b;
    if (sscanf(line, "# l c b = %lld %lld %lld", &l, &c, &b) != 3)
        return 0;
    if (ref->l)
        return adb_fail(r, "a second \"# l c b\" header");
    if (l < 1 || c < 2 || b < 1 || !sizes_fit((size_t)l, (size_t)c, (size_t)b))
        return adb_fail(r, "header sizes l c b = %lld %lld %lld are invalid", l, c, b);
    ref->l = (size_t)l;
    ref->c = (size_t)c;
    ref->b = (size_t)b;
    return 0;
}

/* The numbers of a line, appended to ref->grad, which holds room for cap:
 * the objective(s) and the gradient are sorted out at the end. */
static int number_line(adb_reader *r, const char *line, lstm_reference *ref, size_t cap)
{
    const char *s = line;
    char *end;
    for (;;) {
        s += strspn(s, " \t\r");
        if (!*s)
            return 0;
        double v = strtod(s, &end);
        if (end == s || !isfinite(v) || (*end && !strchr(" \t\r", *end)))
            return adb_fail(r, "expected a finite number, found \"%.*s\"",
                            (int)strcspn(s, " \t\r"), s);
        if (ref->count == cap)
            return adb_fail(r, "more than the objective twice and %zu gradient entries",
                            cap - 2);
        ref->grad[ref->count++] = v;
        s = end;
    }
}

/* The first 1 or 2 numbers are the objective: it is written twice when
 * more than inputs numbers follow it. */
static int split_objectives(adb_reader *r, lstm_reference *ref, size_t inputs)
{
    if (ref->count < inputs + 1)
        return adb_fail(r, "%zu numbers: expected the objective and %zu gradient entries",
                        ref->count, inputs);
    ref->objectives = ref->count - inputs;
    ref->objective = ref->grad[0];
    if (ref->objectives == 2 && ref->grad[1] != ref->objective)
        return adb_fail(r, "the objective is given twice, as %.17g and %.17g", ref->grad[0],
                        ref->grad[1]);
    memmove(ref->grad, ref->grad + ref->objectives, inputs * sizeof *ref->grad);
    ref->count = inputs;
    return 0;
}

static int parse_reference(adb_reader *r, size_t inputs, lstm_reference *ref)
{
    char line[512];
    int got, e;
    size_t cap = inputs + 2;
    if (!(ref->grad = malloc(cap * sizeof *ref->grad)))
        return ENOMEM;
    while ((got = adb_next_line(r, line, sizeof line)) != ADB_END) {
        const char *c = line + strspn(line, " \t");
        if (got == ADB_CUT && *c != '#')  /* a long comment is only cut short */
            return adb_fail(r, "line too long for a reference file");
        e = *c == '#' ? comment_line(r, c, ref) : number_line(r, line, ref, cap);
        if (e)
            return e;
    }
    return split_objectives(r, ref, inputs);
}

int lstm_read_reference(FILE *f, const char *name, size_t inputs, lstm_reference *ref,
                        char err[LSTM_ERR_SIZE])
{
    adb_reader r;
    adb_lines(&r, f, name, err, LSTM_ERR_SIZE);
    memset(ref, 0, sizeof *ref);
    int e = inputs && inputs < SIZE_MAX / 64 ? parse_reference(&r, inputs, ref) : EINVAL;
    if (!e)
        return 0;
    if (e == ENOMEM)
        adb_error(&r, e, "out of memory");
    else if (err && !err[0])  /* nothing read: the length was refused */
        adb_error(&r, e, "gradient length %zu is invalid", inputs);
    lstm_reference_free(ref);
    return adb_status(e);
}

int lstm_load_reference(const char *path, size_t inputs, lstm_reference *ref,
                        char err[LSTM_ERR_SIZE])
{
    memset(ref, 0, sizeof *ref);
    FILE *f = adb_open(path, err, LSTM_ERR_SIZE);
    return f ? adb_close(f, lstm_read_reference(f, path, inputs, ref, err)) : -1;
}

void lstm_reference_free(lstm_reference *ref)
{
    free(ref->grad);
    memset(ref, 0, sizeof *ref);
}

int lstm_reference_matches(const lstm_reference *ref, const lstm_problem *p)
{
    return ref->count == lstm_inputs(p)
           && (!ref->l || (ref->l == p->l && ref->c == p->c && ref->b == p->b));
}

/* ---- evaluation ---- */

int lstm_work_init(lstm_work *w, const lstm_problem *p)
{
    w->scratch = calloc(lstm_scratch(p), sizeof(ad_real));
    return w->scratch ? 0 : -1;
}

void lstm_work_free(lstm_work *w)
{
    free(w->scratch);
    memset(w, 0, sizeof *w);
}

double lstm_objective(const lstm_eval *e, const double *params)
{
    return lstm_loss_d(e->p, params, e->w->scratch);
}

/* n is fixed by the problem in ctx. */
ad_real lstm_objective_ad(const ad_real *params, size_t n, void *ctx)
{
    const lstm_eval *e = ctx;
    (void)n;
    return lstm_loss_ad(e->p, params, e->w->scratch);
}

/* m is 1: the loss. */
void lstm_function_ad(const ad_real *params, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = lstm_objective_ad(params, n, ctx);
}
