/* ADBench GMM: see gmm.h. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gmm.h"

#define T double
#define NAME(id) id##_d
#include "gmm_objective.h"

#define T ad_real
#define NAME(id) id##_ad
#include "gmm_objective.h"

/* ---- sizes ---- */

/* a * b, or SIZE_MAX if that overflows */
static size_t mul_sat(size_t a, size_t b)
{
    return b && a > SIZE_MAX / b ? SIZE_MAX : a * b;
}

/* Sizes whose every derived count (inputs, scratch, bytes of each array)
 * fits a size_t with room to spare: what the file claims is checked before
 * anything is allocated or indexed with it. */
static int sizes_fit(size_t d, size_t k, size_t n)
{
    size_t limit = SIZE_MAX / 64;
    size_t s = mul_sat(d, d + 1) / 2;
    return d && k && n && d < limit && s < limit && mul_sat(k, s + 2 * d + 4) < limit
           && mul_sat(n, d) < limit && n < limit;
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

typedef struct reader {
    FILE *f;
    const char *name;
    size_t line;  /* 1-based line of the next character */
    size_t last;  /* line of the last token read */
    char *err;    /* GMM_ERR_SIZE bytes, or NULL */
} reader;

#if defined(__GNUC__) || defined(__clang__)
#define GMM_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define GMM_PRINTF(f, a)
#endif

/* Writes "name:line: message" to r->err; returns EINVAL. */
GMM_PRINTF(2, 3) static int fail(const reader *r, const char *fmt, ...)
{
    if (r->err) {
        va_list ap;
        int len = snprintf(r->err, GMM_ERR_SIZE, "%s:%zu: ", r->name, r->line);
        va_start(ap, fmt);
        if (len >= 0 && len < GMM_ERR_SIZE)
            vsnprintf(r->err + len, GMM_ERR_SIZE - (size_t)len, fmt, ap);
        va_end(ap);
    }
    return EINVAL;
}

/* The next whitespace-separated token of at most size - 1 characters.
 * Returns 1, 0 at the end of the file, -1 for a token too long. */
static int next_token(reader *r, char *buf, size_t size)
{
    int c;
    while ((c = getc(r->f)) != EOF && isspace(c))
        r->line += c == '\n';
    if (c == EOF) {
        r->line = r->last;  /* name the last line that had something */
        return 0;
    }
    r->last = r->line;
    size_t len = 0;
    do {
        if (len + 1 >= size)
            return -1;
        buf[len++] = (char)c;
    } while ((c = getc(r->f)) != EOF && !isspace(c));
    if (c != EOF)
        ungetc(c, r->f);  /* a newline is counted when the next token is sought */
    buf[len] = '\0';
    return 1;
}

/* Longer than any number written in full */
#define TOKEN_MAX 64

/* The next token as a finite double; `what` and i, j name it in errors
 * (i, j = SIZE_MAX: no index). */
static int read_double(reader *r, double *v, const char *what, size_t i, size_t j)
{
    char tok[TOKEN_MAX], idx[48] = "", *end = tok;
    int got = next_token(r, tok, sizeof tok);
    if (got > 0) {
        *v = strtod(tok, &end);
        if (!*end && end != tok && isfinite(*v))
            return 0;
    }
    if (j != SIZE_MAX)
        snprintf(idx, sizeof idx, "[%zu][%zu]", i, j);
    else if (i != SIZE_MAX)
        snprintf(idx, sizeof idx, "[%zu]", i);
    if (got == 0)
        return fail(r, "the file ends here; %s%s expected next", what, idx);
    if (got < 0)
        return fail(r, "%s%s: not a number (token too long)", what, idx);
    return fail(r, "%s%s: expected a finite number, found \"%s\"", what, idx, tok);
}

/* The next token as an integer in [lo, hi]. */
static int read_integer(reader *r, long long *v, long long lo, long long hi, const char *what)
{
    char tok[TOKEN_MAX], *end;
    int got = next_token(r, tok, sizeof tok);
    if (got == 0)
        return fail(r, "the file ends here; %s expected next", what);
    errno = 0;
    *v = got > 0 ? strtoll(tok, &end, 10) : 0;
    if (got < 0 || *end || end == tok || errno || *v < lo || *v > hi)
        return fail(r, "%s: expected an integer in [%lld, %lld], found \"%s\"", what, lo, hi,
                    got > 0 ? tok : "(too long)");
    return 0;
}

static int read_matrix(reader *r, double *dst, size_t rows, size_t cols, const char *what)
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

static int read_sizes(reader *r, gmm_problem *p)
{
    long long v[3];
    const char *what[3] = {"d (dimension)", "k (components)", "n (points)"};
    for (int i = 0; i < 3; i++) {
        int e = read_integer(r, &v[i], 1, LLONG_MAX, what[i]);
        if (e)
            return e;
    }
    if ((unsigned long long)v[0] > SIZE_MAX || (unsigned long long)v[1] > SIZE_MAX
        || (unsigned long long)v[2] > SIZE_MAX
        || !sizes_fit((size_t)v[0], (size_t)v[1], (size_t)v[2]))
        return fail(r, "sizes d k n = %lld %lld %lld are too large", v[0], v[1], v[2]);
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
static int read_wishart(reader *r, gmm_problem *p)
{
    long long m;
    char tok[TOKEN_MAX];
    int e = read_double(r, &p->gamma, "gamma", SIZE_MAX, SIZE_MAX);
    if (e)
        return e;
    if (!(p->gamma > 0.0))
        return fail(r, "gamma = %g: must be positive", p->gamma);
    e = read_integer(r, &m, 0, INT_MAX, "m (Wishart)");
    if (e)
        return e;
    p->m = (int)m;
    if (next_token(r, tok, sizeof tok) != 0)
        return fail(r, "unexpected data after gamma and m");
    return 0;
}

static int parse_problem(reader *r, gmm_problem *p)
{
    int e = read_sizes(r, p);
    if (e)
        return e;
    if (alloc_problem(p)) {
        if (r->err)
            snprintf(r->err, GMM_ERR_SIZE, "%s: no memory for d k n = %zu %zu %zu", r->name,
                     p->d, p->k, p->n);
        return ENOMEM;
    }
    if ((e = read_matrix(r, p->alpha, p->k, 1, "alpha"))
        || (e = read_matrix(r, p->mu, p->k, p->d, "mu"))
        || (e = read_matrix(r, p->icf, p->k, gmm_icf_size(p->d), "icf"))
        || (e = read_matrix(r, p->x, p->n, p->d, "x")))
        return e;
    return read_wishart(r, p);
}

int gmm_read(FILE *f, const char *name, gmm_problem *p, char err[GMM_ERR_SIZE])
{
    reader r = {f, name, 1, 1, err};
    memset(p, 0, sizeof *p);
    if (err)
        err[0] = '\0';
    int e = parse_problem(&r, p);
    if (!e)
        return 0;
    gmm_free(p);
    errno = e;
    return -1;
}

/* fopen, with its failure described in err. */
static FILE *open_file(const char *path, char *err)
{
    FILE *f = fopen(path, "r");
    if (!f && err) {
        int e = errno;
        snprintf(err, GMM_ERR_SIZE, "%s: %s", path, strerror(e));
        errno = e;
    }
    return f;
}

int gmm_load(const char *path, gmm_problem *p, char err[GMM_ERR_SIZE])
{
    memset(p, 0, sizeof *p);
    FILE *f = open_file(path, err);
    if (!f)
        return -1;
    int st = gmm_read(f, path, p, err);
    int e = errno;
    fclose(f);
    errno = e;
    return st;
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

/* One line into buf, without its newline.  1, 0 at the end; 2 if it was
 * longer than the buffer, whose rest is then dropped. */
static int next_line(reader *r, char *buf, size_t size)
{
    int c, cut = 0;
    if (!fgets(buf, (int)size, r->f))
        return 0;
    r->line++;
    size_t len = strlen(buf);
    if (len && buf[len - 1] == '\n')
        buf[--len] = '\0';
    else
        while ((c = getc(r->f)) != EOF && c != '\n')
            cut = 1;
    return cut ? 2 : 1;
}

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

static int header_line(reader *r, const char *line, gmm_reference *ref, ref_state *st)
{
    long long d, k, n;
    double gamma;
    int m;
    if (sscanf(line, "# d k n gamma m = %lld %lld %lld %lf %d", &d, &k, &n, &gamma, &m) != 5)
        return 0;  /* another comment */
    if (st->have_header)
        return fail(r, "a second \"# d k n gamma m\" header");
    if (d <= 0 || k <= 0 || n <= 0 || m < 0 || !(gamma > 0.0)
        || !sizes_fit((size_t)d, (size_t)k, (size_t)n))
        return fail(r, "header sizes d k n gamma m = %lld %lld %lld %g %d are invalid", d, k,
                    n, gamma, m);
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
static int entry_line(reader *r, char **field, size_t nf, gmm_reference *ref, ref_state *st)
{
    double v;
    unsigned long long idx = ref->count;
    char *end;
    if (!st->fields)
        st->fields = nf;
    if (nf != st->fields)
        return fail(r, "%zu numbers on the line, %zu on the first gradient line", nf,
                    st->fields);
    if (nf == 2) {
        errno = 0;
        idx = strtoull(field[0], &end, 10);
        if (*end || end == field[0] || errno || field[0][0] == '-')
            return fail(r, "expected a gradient index, found \"%s\"", field[0]);
        if (idx >= st->total || (ref->count && idx <= ref->index[ref->count - 1]))
            return fail(r, "gradient index %s is not ascending or not below %zu", field[0],
                        st->total);
    }
    if (parse_finite(field[nf - 1], &v))
        return fail(r, "expected a finite number, found \"%s\"", field[nf - 1]);
    if (ref->count == st->cap && grow_entries(ref, &st->cap))
        return ENOMEM;
    ref->index[ref->count] = (size_t)idx;
    ref->grad[ref->count++] = v;
    return 0;
}

static int number_line(reader *r, char *line, gmm_reference *ref, ref_state *st)
{
    char *field[2];
    size_t nf = split(line, field, 2);
    if (nf == 0)
        return 0;  /* blank */
    if (!st->have_header)
        return fail(r, "numbers before the \"# d k n gamma m = ...\" header");
    if (st->objectives < 2) {
        double v;
        if (nf != 1 || parse_finite(field[0], &v))
            return fail(r, "expected the objective, one number");
        if (st->objectives++ == 0)
            ref->objective = v;
        return 0;
    }
    if (nf > 2)
        return fail(r, "expected a gradient entry: \"value\" or \"index value\"");
    return entry_line(r, field, nf, ref, st);
}

static int parse_reference(reader *r, gmm_reference *ref)
{
    char line[256];
    ref_state st = {0, 0, 0, 0, 0};
    int got, e;
    while ((got = next_line(r, line, sizeof line)) > 0) {
        const char *c = line + strspn(line, " \t");
        if (got == 2 && *c != '#')  /* a long comment is only cut short */
            return fail(r, "line too long for a reference file");
        e = *c == '#' ? header_line(r, c, ref, &st) : number_line(r, line, ref, &st);
        if (e)
            return e;
    }
    if (!st.have_header || st.objectives < 2)
        return fail(r, "the file ends before its header and two objectives");
    if (st.fields == 1 && ref->count != st.total)
        return fail(r, "%zu gradient entries, expected k(d+1)(d+2)/2 = %zu", ref->count,
                    st.total);
    if (!ref->count)
        return fail(r, "no gradient entries");
    return 0;
}

int gmm_read_reference(FILE *f, const char *name, gmm_reference *ref, char err[GMM_ERR_SIZE])
{
    reader r = {f, name, 0, 0, err};
    memset(ref, 0, sizeof *ref);
    if (err)
        err[0] = '\0';
    int e = parse_reference(&r, ref);
    if (!e)
        return 0;
    if (e == ENOMEM && err)
        snprintf(err, GMM_ERR_SIZE, "%s: out of memory", name);
    gmm_reference_free(ref);
    errno = e;
    return -1;
}

int gmm_load_reference(const char *path, gmm_reference *ref, char err[GMM_ERR_SIZE])
{
    memset(ref, 0, sizeof *ref);
    FILE *f = open_file(path, err);
    if (!f)
        return -1;
    int st = gmm_read_reference(f, path, ref, err);
    int e = errno;
    fclose(f);
    errno = e;
    return st;
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
