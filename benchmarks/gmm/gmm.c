/* ADBench GMM: see gmm.h. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gmm.h"
#include "reader.h"

#define T double
#define NAME(id) id##_d
#include "gmm_objective.h"

#define T ad_real
#define NAME(id) id##_ad
#include "gmm_objective.h"

/* ---- sizes ---- */

/* Sizes whose every derived count (inputs, scratch, bytes of each array)
 * fits a size_t with room to spare: what the file claims is checked before
 * anything is allocated or indexed with it. */
static int sizes_fit(size_t d, size_t k, size_t n)
{
    size_t limit = SIZE_MAX / 64;
    size_t s = adb_mul_sat(d, d + 1) / 2;
    return d && k && n && d < limit && s < limit && adb_mul_sat(k, s + 2 * d + 4) < limit
           && adb_mul_sat(n, d) < limit && n < limit;
}

size_t gmm_inputs(const gmm_problem *p)
{
    return p->k * (p->d + 1) * (p->d + 2) / 2;
}

void gmm_pack(const gmm_problem *p, double *params)
{
    size_t k = p->k, d = p->d;
    memcpy(params, p->alpha, k * sizeof *params);
    memcpy(params + k, p->mu, k * d * sizeof *params);
    memcpy(params + k + k * d, p->icf, k * gmm_icf_size(d) * sizeof *params);
}

/* ---- reading numbers, with the line they were on ---- */

/* The next token as a finite double; `what` and i, j name it in errors
 * (i, j = SIZE_MAX: no index). */
static int read_double(adb_reader *r, double *v, const char *what, size_t i, size_t j)
{
    char tok[ADB_TOKEN_MAX], idx[48] = "";
    int got = adb_next_double(r, v, tok);
    if (got == ADB_GOT)
        return 0;
    if (j != SIZE_MAX)
        snprintf(idx, sizeof idx, "[%zu][%zu]", i, j);
    else if (i != SIZE_MAX)
        snprintf(idx, sizeof idx, "[%zu]", i);
    if (got == ADB_END)
        return adb_fail(r, "the file ends here; %s%s expected next", what, idx);
    if (got == ADB_TOO_LONG)
        return adb_fail(r, "%s%s: not a number (token too long)", what, idx);
    return adb_fail(r, "%s%s: expected a finite number, found \"%s\"", what, idx, tok);
}

static int read_matrix(adb_reader *r, double *dst, size_t rows, size_t cols, const char *what)
{
    for (size_t i = 0; i < rows; i++)
        for (size_t j = 0; j < cols; j++) {
            int e = read_double(r, &dst[i * cols + j], what, i, cols > 1 ? j : SIZE_MAX);
            if (e)
                return e;
        }
    return 0;
}

/* ---- the data file ---- */

static int read_sizes(adb_reader *r, gmm_problem *p)
{
    long long v[3];
    const char *what[3] = {"d (dimension)", "k (components)", "n (points)"};
    for (int i = 0; i < 3; i++) {
        int e = adb_read_integer(r, &v[i], 1, LLONG_MAX, what[i]);
        if (e)
            return e;
    }
    if ((unsigned long long)v[0] > SIZE_MAX || (unsigned long long)v[1] > SIZE_MAX
        || (unsigned long long)v[2] > SIZE_MAX
        || !sizes_fit((size_t)v[0], (size_t)v[1], (size_t)v[2]))
        return adb_fail(r, "sizes d k n = %lld %lld %lld are too large", v[0], v[1], v[2]);
    p->d = (size_t)v[0];
    p->k = (size_t)v[1];
    p->n = (size_t)v[2];
    return 0;
}

static int alloc_problem(gmm_problem *p)
{
    p->alpha = calloc(p->k, sizeof *p->alpha);
    p->mu = calloc(p->k * p->d, sizeof *p->mu);
    p->icf = calloc(p->k * gmm_icf_size(p->d), sizeof *p->icf);
    p->x = calloc(p->n * p->d, sizeof *p->x);
    return p->alpha && p->mu && p->icf && p->x ? 0 : ENOMEM;
}

/* The gamma and m at the end, then nothing more. */
static int read_wishart(adb_reader *r, gmm_problem *p)
{
    long long m;
    int e = read_double(r, &p->gamma, "gamma", SIZE_MAX, SIZE_MAX);
    if (e)
        return e;
    if (!(p->gamma > 0.0))
        return adb_fail(r, "gamma = %g: must be positive", p->gamma);
    e = adb_read_integer(r, &m, 0, INT_MAX, "m (Wishart)");
    if (e)
        return e;
    p->m = (int)m;
    if (!adb_at_end(r))
        return adb_fail(r, "unexpected data after gamma and m");
    return 0;
}

static int parse_problem(adb_reader *r, gmm_problem *p)
{
    int e = read_sizes(r, p);
    if (e)
        return e;
    if (alloc_problem(p))
        return adb_error(r, ENOMEM, "no memory for d k n = %zu %zu %zu", p->d, p->k, p->n);
    if ((e = read_matrix(r, p->alpha, p->k, 1, "alpha"))
        || (e = read_matrix(r, p->mu, p->k, p->d, "mu"))
        || (e = read_matrix(r, p->icf, p->k, gmm_icf_size(p->d), "icf"))
        || (e = read_matrix(r, p->x, p->n, p->d, "x")))
        return e;
    return read_wishart(r, p);
}

int gmm_read(FILE *f, const char *name, gmm_problem *p, char err[GMM_ERR_SIZE])
{
    adb_reader r;
    adb_tokens(&r, f, name, err, GMM_ERR_SIZE);
    memset(p, 0, sizeof *p);
    int e = parse_problem(&r, p);
    if (e)
        gmm_free(p);
    return adb_status(e);
}

int gmm_load(const char *path, gmm_problem *p, char err[GMM_ERR_SIZE])
{
    memset(p, 0, sizeof *p);
    FILE *f = adb_open(path, err, GMM_ERR_SIZE);
    return f ? adb_close(f, gmm_read(f, path, p, err)) : -1;
}

void gmm_free(gmm_problem *p)
{
    free(p->alpha);
    free(p->mu);
    free(p->icf);
    free(p->x);
    memset(p, 0, sizeof *p);
}

/* ---- reference files ---- */

/* The blank-separated fields of a line, at most max of them, terminated in
 * place; returns how many there are (max + 1 if more). */
static size_t split(char *line, char **field, size_t max)
{
    static const char blanks[] = " \t\r";
    size_t n = 0;
    for (char *p = line + strspn(line, blanks); *p; p += strspn(p, blanks)) {
        char *end = p + strcspn(p, blanks);
        if (n < max)
            field[n] = p;
        n++;
        if (!*end)
            break;
        *end = '\0';
        p = end + 1;
    }
    return n;
}

static int parse_finite(const char *s, double *v)
{
    char *end;
    *v = strtod(s, &end);
    return *end || end == s || !isfinite(*v) ? -1 : 0;
}

static int grow_entries(gmm_reference *ref, size_t *cap)
{
    size_t n = *cap ? 2 * *cap : 1024;
    size_t *index = realloc(ref->index, n * sizeof *index);
    if (index)
        ref->index = index;
    double *grad = index ? realloc(ref->grad, n * sizeof *grad) : NULL;
    if (!grad)
        return ENOMEM;
    ref->grad = grad;
    *cap = n;
    return 0;
}

/* Reading state: how many objectives were seen, fields per entry line. */
typedef struct ref_state {
    int have_header, objectives;
    size_t fields, cap, total;
} ref_state;

static int header_line(adb_reader *r, const char *line, gmm_reference *ref, ref_state *st)
{
    long long d, k, n;
    double gamma;
    int m;
    if (sscanf(line, "# d k n gamma m = %lld %lld %lld %lf %d", &d, &k, &n, &gamma, &m) != 5)
        return 0;  /* another comment */
    if (st->have_header)
        return adb_fail(r, "a second \"# d k n gamma m\" header");
    if (d <= 0 || k <= 0 || n <= 0 || m < 0 || !(gamma > 0.0)
        || !sizes_fit((size_t)d, (size_t)k, (size_t)n))
        return adb_fail(r, "header sizes d k n gamma m = %lld %lld %lld %g %d are invalid", d,
                        k, n, gamma, m);
    ref->d = (size_t)d;
    ref->k = (size_t)k;
    ref->n = (size_t)n;
    ref->gamma = gamma;
    ref->m = m;
    st->have_header = 1;
    st->total = ref->k * (ref->d + 1) * (ref->d + 2) / 2;
    return 0;
}

/* An "index value" or "value" line of the gradient. */
static int entry_line(adb_reader *r, char **field, size_t nf, gmm_reference *ref, ref_state *st)
{
    double v;
    unsigned long long idx = ref->count;
    char *end;
    if (!st->fields)
        st->fields = nf;
    if (nf != st->fields)
        return adb_fail(r, "%zu numbers on the line, %zu on the first gradient line", nf,
                        st->fields);
    if (nf == 2) {
        errno = 0;
        idx = strtoull(field[0], &end, 10);
        if (*end || end == field[0] || errno || field[0][0] == '-')
            return adb_fail(r, "expected a gradient index, found \"%s\"", field[0]);
        if (idx >= st->total || (ref->count && idx <= ref->index[ref->count - 1]))
            return adb_fail(r, "gradient index %s is not ascending or not below %zu",
                            field[0], st->total);
    }
    if (parse_finite(field[nf - 1], &v))
        return adb_fail(r, "expected a finite number, found \"%s\"", field[nf - 1]);
    if (ref->count == st->cap && grow_entries(ref, &st->cap))
        return ENOMEM;
    ref->index[ref->count] = (size_t)idx;
    ref->grad[ref->count++] = v;
    return 0;
}

static int number_line(adb_reader *r, char *line, gmm_reference *ref, ref_state *st)
{
    char *field[2];
    size_t nf = split(line, field, 2);
    if (nf == 0)
        return 0;  /* blank */
    if (!st->have_header)
        return adb_fail(r, "numbers before the \"# d k n gamma m = ...\" header");
    if (st->objectives < 2) {
        double v;
        if (nf != 1 || parse_finite(field[0], &v))
            return adb_fail(r, "expected the objective, one number");
        if (st->objectives++ == 0)
            ref->objective = v;
        return 0;
    }
    if (nf > 2)
        return adb_fail(r, "expected a gradient entry: \"value\" or \"index value\"");
    return entry_line(r, field, nf, ref, st);
}

static int parse_reference(adb_reader *r, gmm_reference *ref)
{
    char line[256];
    ref_state st = {0, 0, 0, 0, 0};
    int got, e;
    while ((got = adb_next_line(r, line, sizeof line)) != ADB_END) {
        const char *c = line + strspn(line, " \t");
        if (got == ADB_CUT && *c != '#')  /* a long comment is only cut short */
            return adb_fail(r, "line too long for a reference file");
        e = *c == '#' ? header_line(r, c, ref, &st) : number_line(r, line, ref, &st);
        if (e)
            return e;
    }
    if (!st.have_header || st.objectives < 2)
        return adb_fail(r, "the file ends before its header and two objectives");
    if (st.fields == 1 && ref->count != st.total)
        return adb_fail(r, "%zu gradient entries, expected k(d+1)(d+2)/2 = %zu", ref->count,
                        st.total);
    if (!ref->count)
        return adb_fail(r, "no gradient entries");
    return 0;
}

int gmm_read_reference(FILE *f, const char *name, gmm_reference *ref, char err[GMM_ERR_SIZE])
{
    adb_reader r;
    adb_lines(&r, f, name, err, GMM_ERR_SIZE);
    memset(ref, 0, sizeof *ref);
    int e = parse_reference(&r, ref);
    if (e == ENOMEM)
        adb_error(&r, e, "out of memory");
    if (e)
        gmm_reference_free(ref);
    return adb_status(e);
}

int gmm_load_reference(const char *path, gmm_reference *ref, char err[GMM_ERR_SIZE])
{
    memset(ref, 0, sizeof *ref);
    FILE *f = adb_open(path, err, GMM_ERR_SIZE);
    return f ? adb_close(f, gmm_read_reference(f, path, ref, err)) : -1;
}

void gmm_reference_free(gmm_reference *ref)
{
    free(ref->index);
    free(ref->grad);
    memset(ref, 0, sizeof *ref);
}

int gmm_reference_matches(const gmm_reference *ref, const gmm_problem *p)
{
    return ref->d == p->d && ref->k == p->k && ref->n == p->n && ref->gamma == p->gamma
           && ref->m == p->m;
}

/* ---- evaluation ---- */

int gmm_work_init(gmm_work *w, const gmm_problem *p)
{
    size_t scalar = gmm_scalar_scratch(p), prim = gmm_prim_scratch(p);
    w->scratch = calloc(scalar > prim ? scalar : prim, sizeof(ad_real));
    w->xe = calloc(p->d + 1, sizeof *w->xe);
    w->mats = calloc(p->k, sizeof *w->mats);
    w->grad = calloc(gmm_inputs(p), sizeof *w->grad);
    if (w->scratch && w->xe && w->mats && w->grad)
        return 0;
    gmm_work_free(w);
    return -1;
}

void gmm_work_free(gmm_work *w)
{
    free(w->scratch);
    free(w->xe);
    free(w->mats);
    free(w->grad);
    memset(w, 0, sizeof *w);
}

double gmm_objective(const gmm_eval *e, const double *params)
{
    if (e->version == GMM_SCALAR)
        return gmm_scalar_d(e->p, e->i0, e->i1, e->global, params, e->w->scratch);
    return gmm_prim_d(e->p, e->i0, e->i1, e->global, params, e->w->scratch, e->w->mats,
                      e->w->xe);
}

/* n is fixed by the problem in ctx. */
ad_real gmm_objective_ad(const ad_real *params, size_t n, void *ctx)
{
    const gmm_eval *e = ctx;
    (void)n;
    if (e->version == GMM_SCALAR)
        return gmm_scalar_ad(e->p, e->i0, e->i1, e->global, params, e->w->scratch);
    return gmm_prim_ad(e->p, e->i0, e->i1, e->global, params, e->w->scratch, e->w->mats,
                       e->w->xe);
}

ad_status gmm_gradient(gmm_version v, const gmm_problem *p, gmm_work *w, size_t batch,
                       const double *params, double *fx, double *grad, size_t *records)
{
    size_t inputs = gmm_inputs(p);
    ad_tape_stats st;
    if (records)
        *records = 0;
    if (!batch || batch > p->n)
        batch = p->n;
    /* The first batch carries the global terms and writes grad; the others
     * go through w->grad and are added. */
    for (size_t i0 = 0; i0 < p->n; i0 += batch) {
        gmm_eval e = {p, w, v, i0, i0 + batch < p->n ? i0 + batch : p->n, i0 == 0};
        double f, *g = i0 == 0 ? grad : w->grad;
        ad_status s = ad_gradient(gmm_objective_ad, &e, inputs, params, &f, g);
        if (s != AD_OK) {
            *fx = NAN;
            for (size_t j = 0; j < inputs; j++)
                grad[j] = NAN;
            return s;
        }
        if (records && ad_tape_stats_get(&st) == AD_OK)
            *records += st.records;
        if (i0 == 0) {
            *fx = f;
            continue;
        }
        *fx += f;
        for (size_t j = 0; j < inputs; j++)
            grad[j] += g[j];
    }
    return AD_OK;
}
