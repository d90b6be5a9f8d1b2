/* Section 5: the array primitives of dualrev/nary.h, each against the same
 * function unrolled into scalar operations the natural way (a loop of ad_add,
 * ad_mul, ad_exp, ...), in the same run: the gradient time of both, the plain
 * double time, and the tape bytes of one call of each.
 *
 * Functions with a vector output (matvec, axpy) are differentiated with
 * ad_vjp and fixed weights w, which is one recording and one reverse sweep,
 * like ad_gradient: no reduction of the outputs adds records to either side.
 * Before timing, the two versions must agree on the value(s) and on the
 * gradient to 1e-12 relative, and the primitive's value must agree with the
 * plain evaluation; a row that does not says FAIL. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "report.h"

#define AGREE_TOL 1e-12

#define TSV_HEADER                                                                         \
    "primitive\tm\tn\tinputs\toutputs\trecords_prim\trecords_unrolled\ttape_bytes_prim\t"  \
    "tape_bytes_unrolled\tpeak_bytes_prim\tpeak_bytes_unrolled\tplain_ns\tprim_ns\t"       \
    "prim_min_ns\tprim_max_ns\tunrolled_ns\tunrolled_min_ns\tunrolled_max_ns\t"            \
    "unrolled_over_prim\tprim_over_plain\tunrolled_over_plain\tcheck"

/* A function's size and constants; ctx of every function below. */
typedef struct shape {
    size_t m, n;      /* matvec: A is m x n; the others: vectors of length n */
    const double *c;  /* ad_dot_rd's constant vector, ad_matvec_r's matrix */
    double a;         /* ad_axpy_r's constant */
} shape;

#define SHAPE(ctx) ((const shape *)(ctx))

/* ---- the functions: primitive, unrolled, plain double ---- */

/* sum x */
static ad_real sum_prim(const ad_real *x, size_t inputs, void *ctx)
{
    (void)ctx;
    return ad_sum(inputs, x);
}

static ad_real sum_unrl(const ad_real *x, size_t inputs, void *ctx)
{
    (void)ctx;
    ad_real acc = x[0];
    for (size_t i = 1; i < inputs; i++)
        acc = ad_add(acc, x[i]);
    return acc;
}

static void sum_plain(const double *x, size_t inputs, const shape *s, double *y)
{
    (void)s;
    y[0] = ad_sum(inputs, x);
}

/* x . y; inputs x[0..n), then y[0..n) */
static ad_real dot_prim(const ad_real *x, size_t inputs, void *ctx)
{
    (void)inputs;
    size_t n = SHAPE(ctx)->n;
    return ad_dot(n, x, x + n);
}

static ad_real dot_unrl(const ad_real *x, size_t inputs, void *ctx)
{
    (void)inputs;
    size_t n = SHAPE(ctx)->n;
    ad_real acc = ad_mul(x[0], x[n]);
    for (size_t i = 1; i < n; i++)
        acc = ad_add(acc, ad_mul(x[i], x[n + i]));
    return acc;
}

static void dot_plain(const double *x, size_t inputs, const shape *s, double *y)
{
    (void)inputs;
    y[0] = ad_dot(s->n, x, x + s->n);
}

/* x . c, c constant */
static ad_real dotc_prim(const ad_real *x, size_t inputs, void *ctx)
{
    return ad_dot(inputs, x, SHAPE(ctx)->c);
}

static ad_real dotc_unrl(const ad_real *x, size_t inputs, void *ctx)
{
    const double *c = SHAPE(ctx)->c;
    ad_real acc = ad_mul(x[0], c[0]);
    for (size_t i = 1; i < inputs; i++)
        acc = ad_add(acc, ad_mul(x[i], c[i]));
    return acc;
}

static void dotc_plain(const double *x, size_t inputs, const shape *s, double *y)
{
    y[0] = ad_dot(inputs, x, s->c);
}

/* x . x */
static ad_real sqnorm_prim(const ad_real *x, size_t inputs, void *ctx)
{
    (void)ctx;
    return ad_sqnorm(inputs, x);
}

static ad_real sqnorm_unrl(const ad_real *x, size_t inputs, void *ctx)
{
    (void)ctx;
    ad_real acc = ad_mul(x[0], x[0]);
    for (size_t i = 1; i < inputs; i++)
        acc = ad_add(acc, ad_mul(x[i], x[i]));
    return acc;
}

static void sqnorm_plain(const double *x, size_t inputs, const shape *s, double *y)
{
    (void)s;
    y[0] = ad_sqnorm(inputs, x);
}

/* prod x */
static ad_real prod_prim(const ad_real *x, size_t inputs, void *ctx)
{
    (void)ctx;
    return ad_prod(inputs, x);
}

static ad_real prod_unrl(const ad_real *x, size_t inputs, void *ctx)
{
    (void)ctx;
    ad_real acc = x[0];
    for (size_t i = 1; i < inputs; i++)
        acc = ad_mul(acc, x[i]);
    return acc;
}

static void prod_plain(const double *x, size_t inputs, const shape *s, double *y)
{
    (void)s;
    y[0] = ad_prod(inputs, x);
}

/* log sum exp x; the unrolled form shifted by the largest element, as a
 * careful scalar version is written (the shift is a constant: its
 * derivative cancels) */
static ad_real lse_prim(const ad_real *x, size_t inputs, void *ctx)
{
    (void)ctx;
    return ad_logsumexp(inputs, x);
}

static ad_real lse_unrl(const ad_real *x, size_t inputs, void *ctx)
{
    (void)ctx;
    double hi = ad_value(x[0]);
    for (size_t i = 1; i < inputs; i++)
        hi = fmax(hi, ad_value(x[i]));
    ad_real acc = ad_exp(ad_sub(x[0], hi));
    for (size_t i = 1; i < inputs; i++)
        acc = ad_add(acc, ad_exp(ad_sub(x[i], hi)));
    return ad_add(hi, ad_log(acc));
}

static void lse_plain(const double *x, size_t inputs, const shape *s, double *y)
{
    (void)s;
    y[0] = ad_logsumexp(inputs, x);
}

/* y = A x, A a constant m x n matrix */
static void matvec_prim(const ad_real *x, size_t inputs, ad_real *y, size_t outputs, void *ctx)
{
    (void)inputs;
    (void)outputs;
    const shape *s = ctx;
    ad_matvec(s->m, s->n, s->c, x, y);
}

static void matvec_unrl(const ad_real *x, size_t inputs, ad_real *y, size_t outputs, void *ctx)
{
    (void)inputs;
    (void)outputs;
    const shape *s = ctx;
    for (size_t j = 0; j < s->m; j++) {
        const double *row = s->c + j * s->n;
        ad_real acc = ad_mul(row[0], x[0]);
        for (size_t i = 1; i < s->n; i++)
            acc = ad_add(acc, ad_mul(row[i], x[i]));
        y[j] = acc;
    }
}

static void matvec_plain(const double *x, size_t inputs, const shape *s, double *y)
{
    (void)inputs;
    ad_matvec(s->m, s->n, s->c, x, y);
}

/* y = A v, A an m x n matrix of ad_real; inputs A row by row, then v */
static void matvec_rr_prim(const ad_real *x, size_t inputs, ad_real *y, size_t outputs, void *ctx)
{
    (void)inputs;
    (void)outputs;
    const shape *s = ctx;
    ad_matvec_rr(s->m, s->n, x, x + s->m * s->n, y);
}

static void matvec_rr_unrl(const ad_real *x, size_t inputs, ad_real *y, size_t outputs, void *ctx)
{
    (void)inputs;
    (void)outputs;
    const shape *s = ctx;
    const ad_real *v = x + s->m * s->n;
    for (size_t j = 0; j < s->m; j++) {
        const ad_real *row = x + j * s->n;
        ad_real acc = ad_mul(row[0], v[0]);
        for (size_t i = 1; i < s->n; i++)
            acc = ad_add(acc, ad_mul(row[i], v[i]));
        y[j] = acc;
    }
}

static void matvec_rr_plain(const double *x, size_t inputs, const shape *s, double *y)
{
    (void)inputs;
    ad_matvec(s->m, s->n, x, x + s->m * s->n, y);
}

/* |A v|^2, A an m x n matrix of ad_real recorded once (ad_mat_record);
 * inputs A row by row, then v */
static ad_real mat_sqnorm_prim(const ad_real *x, size_t inputs, void *ctx)
{
    (void)inputs;
    const shape *s = ctx;
    ad_mat M;
    ad_real r;
    if (ad_mat_make(s->m, s->n, x, &M) != AD_OK)
        return ad_const(NAN);  /* the recording keeps the error */
    ad_mat_sqnorm(&M, x + s->m * s->n, &r);
    return r;
}

static ad_real mat_sqnorm_unrl(const ad_real *x, size_t inputs, void *ctx)
{
    (void)inputs;
    const shape *s = ctx;
    const ad_real *v = x + s->m * s->n;
    ad_real sum = ad_const(0.0);
    for (size_t j = 0; j < s->m; j++) {
        const ad_real *row = x + j * s->n;
        ad_real acc = ad_mul(row[0], v[0]);
        for (size_t i = 1; i < s->n; i++)
            acc = ad_add(acc, ad_mul(row[i], v[i]));
        sum = ad_add(sum, ad_mul(acc, acc));
    }
    return sum;
}

static void mat_sqnorm_plain(const double *x, size_t inputs, const shape *s, double *y)
{
    (void)inputs;
    ad_mat W;
    if (ad_mat_wrap(s->m, s->n, x, &W) != AD_OK) {
        y[0] = NAN;
        return;
    }
    ad_mat_sqnorm(&W, x + s->m * s->n, &y[0]);
}

/* y + a x, a constant; inputs x[0..n), then y[0..n) */
static void axpy_prim(const ad_real *x, size_t inputs, ad_real *y, size_t outputs, void *ctx)
{
    (void)inputs;
    const shape *s = ctx;
    for (size_t i = 0; i < outputs; i++)
        y[i] = x[s->n + i];
    ad_axpy(s->n, s->a, x, y);
}

static void axpy_unrl(const ad_real *x, size_t inputs, ad_real *y, size_t outputs, void *ctx)
{
    (void)inputs;
    const shape *s = ctx;
    for (size_t i = 0; i < outputs; i++)
        y[i] = ad_add(ad_mul(s->a, x[i]), x[s->n + i]);
}

static void axpy_plain(const double *x, size_t inputs, const shape *s, double *y)
{
    (void)inputs;
    for (size_t i = 0; i < s->n; i++)
        y[i] = x[s->n + i];
    ad_axpy(s->n, s->a, x, y);
}

/* ---- the list ---- */

typedef void (*plain_fn)(const double *x, size_t inputs, const shape *s, double *y);

typedef enum kind { VEC1, VEC2, MAT_CONST, MAT_AD } kind;  /* what the inputs are */

typedef struct prim {
    const char *name;          /* the primitive's ad_real form */
    kind in;
    int vector_out;            /* the outputs: ad_vjp, not ad_gradient */
    int near_one;              /* inputs in [0.99, 1.01): 10^5 of them multiply to O(1) */
    ad_objective scalar[2];    /* the primitive, the unrolled form */
    ad_function vector[2];
    plain_fn plain;
} prim;

static const prim prims[] = {
    {"ad_sum_r", VEC1, 0, 0, {sum_prim, sum_unrl}, {0}, sum_plain},
    {"ad_dot_r", VEC2, 0, 0, {dot_prim, dot_unrl}, {0}, dot_plain},
    {"ad_dot_rd", VEC1, 0, 0, {dotc_prim, dotc_unrl}, {0}, dotc_plain},
    {"ad_sqnorm_r", VEC1, 0, 0, {sqnorm_prim, sqnorm_unrl}, {0}, sqnorm_plain},
    {"ad_prod_r", VEC1, 0, 1, {prod_prim, prod_unrl}, {0}, prod_plain},
    {"ad_logsumexp_r", VEC1, 0, 0, {lse_prim, lse_unrl}, {0}, lse_plain},
    {"ad_matvec_r", MAT_CONST, 1, 0, {0}, {matvec_prim, matvec_unrl}, matvec_plain},
    {"ad_matvec_rr", MAT_AD, 1, 0, {0}, {matvec_rr_prim, matvec_rr_unrl}, matvec_rr_plain},
    {"ad_axpy_r", VEC2, 1, 0, {0}, {axpy_prim, axpy_unrl}, axpy_plain},
    {"ad_mat_sqnorm_rr", MAT_AD, 0, 0, {mat_sqnorm_prim, mat_sqnorm_unrl}, {0}, mat_sqnorm_plain},
};

/* The sizes: a vector length n, or a square matrix's side m = n. */
static const struct {
    size_t vec, mat;
} sizes[] = {{10, 10}, {1000, 100}, {100000, 1000}};

#define COUNT(a) (sizeof (a) / sizeof *(a))

/* ---- one row: one primitive at one size ---- */

typedef struct prim_row {
    const prim *p;
    shape s;
    size_t inputs, outputs;
    size_t records[2];  /* primitive, unrolled: one call's records */
    size_t blocks[2];   /* and the bytes kept beside them (recorded matrices) */
    size_t rec_bytes;
    bench_time plain, grad[2];
    const char *check;
} prim_row;

static size_t elements(const prim_row *r)
{
    return r->s.m * r->s.n;
}

/* "100000", or "1000x1000" for a matrix */
static const char *fmt_size(char buf[24], const prim_row *r)
{
    if (r->p->in == MAT_CONST || r->p->in == MAT_AD)
        snprintf(buf, 24, "%zux%zu", r->s.m, r->s.n);
    else
        snprintf(buf, 24, "%zu", r->s.n);
    return buf;
}

static double tape_bytes(const prim_row *r, int k)
{
    return (double)(r->records[k] * r->rec_bytes + r->blocks[k]);
}

/* Tape plus the cotangent array, one double per ID (0, the inputs and the
 * records), which are both in use during the reverse sweep. */
static double peak_bytes(const prim_row *r, int k)
{
    return tape_bytes(r, k) + (double)((1 + r->inputs + r->records[k]) * sizeof(double));
}

static volatile double sink;

typedef struct job {
    const prim *p;
    shape *s;  /* ctx of the functions, which only read it */
    size_t inputs, outputs;
    const double *x, *w;
    double *y, *g;
    int which;   /* 0: the primitive, 1: unrolled */
    int failed;  /* a timed call did not return AD_OK */
} job;

static ad_status gradient(job *j)
{
    const prim *p = j->p;
    if (!p->vector_out)
        return ad_gradient(p->scalar[j->which], j->s, j->inputs, j->x, j->y, j->g);
    return ad_vjp(p->vector[j->which], j->s, j->inputs, j->x, j->outputs, j->w, j->y, j->g);
}

static void run_grad(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t i = 0; i < iters; i++)
        if (gradient(j) != AD_OK)
            j->failed = 1;
}

static void run_plain(void *ctx, size_t iters)
{
    job *j = ctx;
    double acc = 0.0;
    for (size_t i = 0; i < iters; i++) {
        bench_clobber(j->x);
        j->p->plain(j->x, j->inputs, j->s, j->y);
        acc += j->y[0];
    }
    sink = acc;
}

static int agree(double a, double b)
{
    return check_close(a, b, AGREE_TOL);
}

/* The first index where a and b disagree, or count. */
static size_t first_disagreement(const double *a, const double *b, size_t count)
{
    size_t i = 0;
    while (i < count && agree(a[i], b[i]))
        i++;
    return i;
}

static const char *compare(const prim_row *r, const double *y0, const double *y1,
                           const double *yp, const double *g0, const double *g1)
{
    char sz[24];
    size_t i;
    if ((i = first_disagreement(y0, y1, r->outputs)) < r->outputs) {
        fprintf(stderr, "%s %s: value %zu: primitive %.17g, unrolled %.17g\n", r->p->name,
                fmt_size(sz, r), i, y0[i], y1[i]);
        return "FAIL: values differ";
    }
    if ((i = first_disagreement(y0, yp, r->outputs)) < r->outputs) {
        fprintf(stderr, "%s %s: value %zu: primitive %.17g, plain %.17g\n", r->p->name,
                fmt_size(sz, r), i, y0[i], yp[i]);
        return "FAIL: value differs from plain";
    }
    if ((i = first_disagreement(g0, g1, r->inputs)) < r->inputs) {
        fprintf(stderr, "%s %s: gradient %zu: primitive %.17g, unrolled %.17g\n", r->p->name,
                fmt_size(sz, r), i, g0[i], g1[i]);
        return "FAIL: gradients differ";
    }
    return "ok";
}

static void measure(const bench_plan *plan, prim_row *r)
{
    const prim *p = r->p;
    size_t m = r->s.m, n = r->s.n;
    r->inputs = p->in == VEC2 ? 2 * n : p->in == MAT_AD ? m * n + n : n;
    r->outputs = !p->vector_out ? 1 : p->in == VEC2 ? n : m;
    size_t nc = p->in == MAT_CONST ? m * n : n;
    double *x = malloc(r->inputs * sizeof *x), *c = malloc(nc * sizeof *c);
    double *w = malloc(r->outputs * sizeof *w), *yp = malloc(r->outputs * sizeof *yp);
    double *y[2] = {malloc(r->outputs * sizeof(double)), malloc(r->outputs * sizeof(double))};
    double *g[2] = {malloc(r->inputs * sizeof(double)), malloc(r->inputs * sizeof(double))};
    if (!x || !c || !w || !yp || !y[0] || !y[1] || !g[0] || !g[1]) {
        fprintf(stderr, "out of memory for %s %zu x %zu\n", p->name, m, n);
        exit(1);
    }
    if (p->near_one)
        bench_fill(x, r->inputs, 0x9E3779B97F4A7C15u, 0.99, 0.02);
    else
        bench_fill(x, r->inputs, 0x9E3779B97F4A7C15u, 0.5, 1.0);
    bench_fill(c, nc, 0xD1B54A32D192ED03u, 0.5, 1.0);
    bench_fill(w, r->outputs, 0x8CB92BA72F3D8DD7u, 0.5, 1.0);
    r->s.c = c;
    r->s.a = 0.75;

    job j[2];
    r->check = "ok";
    for (int k = 0; k < 2; k++) {
        j[k] = (job){p, &r->s, r->inputs, r->outputs, x, w, y[k], g[k], k, 0};
        ad_status st = gradient(&j[k]);
        ad_tape_stats ts;
        if (st != AD_OK || ad_tape_stats_get(&ts) != AD_OK) {
            char sz[24];
            fprintf(stderr, "%s %s: %s\n", p->name, fmt_size(sz, r), ad_strerror(st));
            r->check = k ? "FAIL: unrolled gradient failed" : "FAIL: primitive's gradient failed";
        } else {
            r->records[k] = ts.records;
            r->blocks[k] = ts.block_bytes;
            r->rec_bytes = ts.record_bytes;
        }
    }
    job jp = j[0];
    jp.y = yp;
    p->plain(x, r->inputs, &r->s, yp);
    if (r->check[0] == 'o')
        r->check = compare(r, y[0], y[1], yp, g[0], g[1]);

    bench_time none = {NAN, NAN, NAN, 0};
    r->plain = r->grad[0] = r->grad[1] = none;
    if (r->check[0] == 'o') {
        const bench_body body[3] = {run_plain, run_grad, run_grad};
        void *const ctx[3] = {&jp, &j[0], &j[1]};
        bench_time t[3];
        bench_measure_side_by_side(plan, 3, body, ctx, t);  /* their ratios are reported */
        r->plain = t[0];
        r->grad[0] = t[1];
        r->grad[1] = t[2];
        if (j[0].failed || j[1].failed)
            r->check = "FAIL: a timed gradient failed";
    }
    free(x);
    free(c);
    free(w);
    free(yp);
    for (int k = 0; k < 2; k++) {
        free(y[k]);
        free(g[k]);
    }
}

/* ---- output ---- */

/* bytes as "144 B", "11.7 KiB", "45.8 MiB" (three significant digits) */
static const char *fmt_bytes(char buf[16], double v)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB"};
    if (isnan(v))
        return "-";
    int u = 0;
    while (v >= 1024.0 && u < 3) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, 16, u == 0 || v >= 100.0 ? "%.0f %s" : v >= 10.0 ? "%.1f %s" : "%.2f %s", v,
             units[u]);
    return buf;
}

static void print_header(const bench_plan *plan)
{
    printf("\n== Array primitives against the same function unrolled into scalar operations "
           "(median of %d, each >= %.0f ms) ==\n",
           plan->reps, plan->min_rep_ns / 1e6);
    printf("prim: the primitive's gradient (ad_gradient; ad_vjp with fixed weights for matvec and "
           "axpy, whose outputs are vectors)\n");
    printf("unrl: the same function as a loop of ad_add/ad_mul/ad_exp/... (logsumexp shifted by "
           "its max); up = unrl / prim\n");
    printf("tape: records x 24 B for one call, and the data a recorded matrix keeps beside "
           "them; peak: tape + cotangents (8 B per input and per record)\n");
    printf("%-14s %9s %8s | %9s %9s | %9s %9s | %9s %9s %9s %6s | %7s %7s | %s\n", "primitive",
           "size", "inputs", "tape prim", "tape unrl", "peak prim", "peak unrl", "plain", "prim",
           "unrl", "up", "prim/pl", "unrl/pl", "check");
}

static void print_row(const prim_row *r)
{
    char sz[24], t[10][16];
    double pl = r->plain.median_ns, g0 = r->grad[0].median_ns, g1 = r->grad[1].median_ns;
    int rec = r->rec_bytes != 0;
    printf("%-14s %9s %8zu | %9s %9s | %9s %9s | %9s %9s %9s %6s | %7s %7s | %s\n", r->p->name,
           fmt_size(sz, r), r->inputs, fmt_bytes(t[0], rec ? tape_bytes(r, 0) : NAN),
           fmt_bytes(t[1], rec ? tape_bytes(r, 1) : NAN),
           fmt_bytes(t[2], rec ? peak_bytes(r, 0) : NAN),
           fmt_bytes(t[3], rec ? peak_bytes(r, 1) : NAN), fmt_time(t[4], pl),
           fmt_time(t[5], g0), fmt_time(t[6], g1), fmt_ratio(t[7], g1, g0),
           fmt_ratio(t[8], g0, pl), fmt_ratio(t[9], g1, pl), r->check);
}

static void write_row(FILE *f, const prim_row *r)
{
    double pl = r->plain.median_ns, g0 = r->grad[0].median_ns, g1 = r->grad[1].median_ns;
    fprintf(f, "%s\t%zu\t%zu\t%zu\t%zu\t%zu\t%zu\t", r->p->name, r->s.m, r->s.n, r->inputs,
            r->outputs, r->records[0], r->records[1]);
    double cells[] = {tape_bytes(r, 0), tape_bytes(r, 1), peak_bytes(r, 0), peak_bytes(r, 1),
                      pl, g0, r->grad[0].min_ns, r->grad[0].max_ns, g1, r->grad[1].min_ns,
                      r->grad[1].max_ns, g1 / g0, g0 / pl, g1 / pl};
    for (size_t i = 0; i < COUNT(cells); i++)
        tsv_num(f, cells[i], 0);
    fprintf(f, "%s\n", r->check);
}

int section_primitives(const bench_ctx *b, size_t max_n)
{
    /* 30 rows of three timings each: batches of half --min-ms keep the
     * section near 15 s with the default settings. */
    bench_plan plan = {b->plan.reps, b->plan.min_rep_ns / 2.0};
    print_header(&plan);
    FILE *f = tsv_open(b, "primitives.tsv", TSV_HEADER);
    int ok = 1;
    for (size_t i = 0; i < COUNT(prims); i++) {
        int mat = prims[i].in == MAT_CONST || prims[i].in == MAT_AD;
        for (size_t k = 0; k < COUNT(sizes); k++) {
            prim_row r = {.p = &prims[i]};
            r.s.n = mat ? sizes[k].mat : sizes[k].vec;
            r.s.m = mat ? r.s.n : 1;
            if (elements(&r) > max_n)
                continue;
            measure(&plan, &r);
            print_row(&r);
            fflush(stdout);
            if (f)
                write_row(f, &r);
            ok &= r.check[0] == 'o';
        }
    }
    tsv_close(f);
    return ok;
}
