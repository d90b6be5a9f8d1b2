/* layout-bench: what a compact one-argument record would save, measured on
 * real record streams before building it (issue 32).
 *
 * The record streams of ADBench LSTM l2_c1024 and GMM d10_K25 (natural
 * source) are copied off the tape after one ad_gradient, then swept in
 * reverse with one cotangent in two layouts, side by side:
 *   24-byte   the tape's layout: {a, b, wa, wb} per ID, a one-argument
 *             record's b the sink (ID 0);
 *   16 + 8    {a, b, wa} per ID, and wb in a second stream that only
 *             records with b != 0 take: a one-argument record costs 16
 *             bytes, a two-argument one 24 as now;
 *   split     {a, b, wa} per ID and wb per ID in a parallel array: the
 *             bytes of the 24-byte layout, no record across a cache line
 *             (separates what compactness gains from what the split does).
 * Both loops are the plain sweep (no prefetch, no walker), and must give
 * the same gradient bit for bit.  The primitives' and blocks' records do
 * not occur in these streams (checked). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gmm.h"
#include "lstm.h"
#include "testing.h"
#include "timer.h"

typedef struct slot16 {
    uint32_t a, b;
    double wa;
} slot16;

typedef struct stream {
    const char *name;
    size_t first, n;  /* the first record's ID; records */
    ad__record *r24;
    slot16 *r16;
    double *wb;       /* 1 + the records with b != 0; wb[0] unused */
    size_t nwb;
    double *wbk;      /* every record's wb, by ID (the split layout) */
    double *adj;      /* first + n */
} stream;

/* One sweep in each layout, seeded at the last record, leaving the
 * gradient in adj[1..first) (the records' cotangents 0 again). */
static void once24(stream *s)
{
    double *adj = s->adj;
    adj[s->first + s->n - 1] = 1.0;
    for (size_t k = s->n; k-- > 0;) {
        const ad__record *r = &s->r24[k];
        double z = adj[s->first + k];
        adj[s->first + k] = 0.0;
        adj[r->a] += z * r->wa;
        adj[r->b] += z * r->wb;
    }
}

static void once16(stream *s)
{
    double *adj = s->adj;
    const double *q = s->wb + 1 + s->nwb;
    adj[s->first + s->n - 1] = 1.0;
    for (size_t k = s->n; k-- > 0;) {
        slot16 r = s->r16[k];
        double z = adj[s->first + k];
        adj[s->first + k] = 0.0;
        adj[r.a] += z * r.wa;
        if (r.b)
            adj[r.b] += z * *--q;
    }
}

static void once_split(stream *s)
{
    double *adj = s->adj;
    adj[s->first + s->n - 1] = 1.0;
    for (size_t k = s->n; k-- > 0;) {
        slot16 r = s->r16[k];
        double z = adj[s->first + k];
        adj[s->first + k] = 0.0;
        adj[r.a] += z * r.wa;
        adj[r.b] += z * s->wbk[k];
    }
}

typedef void (*one_sweep)(stream *s);

static void repeat(stream *s, one_sweep sweep, size_t iters)
{
    for (size_t it = 0; it < iters; it++) {
        sweep(s);
        bench_clobber(s->adj);
        memset(s->adj, 0, s->first * sizeof *s->adj);
    }
}

static void sweep24(void *ctx, size_t iters) { repeat(ctx, once24, iters); }
static void sweep16(void *ctx, size_t iters) { repeat(ctx, once16, iters); }
static void sweep_split(void *ctx, size_t iters) { repeat(ctx, once_split, iters); }

/* The gradients of the three layouts, compared bit for bit; 0 if they
 * agree. */
static int same_gradient(stream *s)
{
    const one_sweep sweeps[3] = {once24, once16, once_split};
    double *g = malloc(s->first * sizeof *g);
    int differ = !g;
    for (int k = 0; k < 3 && g; k++) {
        sweeps[k](s);
        if (k == 0)
            memcpy(g, s->adj, s->first * sizeof *g);
        else
            differ |= memcmp(g + 1, s->adj + 1, (s->first - 1) * sizeof *g) != 0;
        memset(s->adj, 0, s->first * sizeof *s->adj);
    }
    free(g);
    return differ;
}

/* The last recording's records, in both layouts; 0 or -1. */
static int take_stream(stream *s, const char *name, size_t inputs)
{
    s->name = name;
    s->first = inputs + 1;
    s->n = ad_test_records(NULL, 0);
    s->r24 = malloc(s->n * sizeof *s->r24);
    s->r16 = malloc(s->n * sizeof *s->r16);
    s->wb = malloc((s->n + 1) * sizeof *s->wb);
    s->wbk = malloc(s->n * sizeof *s->wbk);
    s->adj = calloc(s->first + s->n, sizeof *s->adj);
    if (!s->r24 || !s->r16 || !s->wb || !s->wbk || !s->adj)
        return -1;
    ad_test_records(s->r24, s->n);
    s->nwb = 0;
    for (size_t k = 0; k < s->n; k++) {
        const ad__record *r = &s->r24[k];
        if (r->b >= AD__ID_END)
            return -1;  /* an n-ary or block record: not modelled here */
        s->r16[k] = (slot16){r->a, r->b, r->wa};
        s->wbk[k] = r->wb;
        if (r->b)
            s->wb[1 + s->nwb++] = r->wb;
    }
    return 0;
}

static void stream_free(stream *s)
{
    free(s->r24);
    free(s->r16);
    free(s->wb);
    free(s->wbk);
    free(s->adj);
}

static int report(stream *s, const bench_plan *plan)
{
    if (same_gradient(s)) {
        fprintf(stderr, "layout-bench: %s: the layouts' gradients differ\n", s->name);
        return -1;
    }
    bench_body body[3] = {sweep24, sweep16, sweep_split};
    void *ctx[3] = {s, s, s};
    bench_time t[3];
    bench_measure_side_by_side(plan, 3, body, ctx, t);
    size_t one = s->n - s->nwb;
    double b24 = 32.0 * (double)s->n, b16 = b24 - 8.0 * (double)one;
    char x[16], y[16], z[16];
    printf("%-14s %8zu %6.1f%% | %6.1f %6.1f MB | %9s %9s %9s | %6.3f %6.3f\n", s->name, s->n,
           100.0 * (double)one / (double)s->n, b24 / 1e6, b16 / 1e6, fmt_time(x, t[0].median_ns),
           fmt_time(y, t[1].median_ns), fmt_time(z, t[2].median_ns),
           t[1].median_ns / t[0].median_ns, t[2].median_ns / t[0].median_ns);
    return 0;
}

/* The records of one gradient of f at x (n inputs), into s; 0 or -1. */
static int record_stream(stream *s, const char *name, ad_objective f, void *ctx, size_t n,
                         const double *x)
{
    double *g = malloc(n * sizeof *g), fx;
    int st = g && ad_gradient(f, ctx, n, x, &fx, g) == AD_OK ? take_stream(s, name, n) : -1;
    free(g);
    return st;
}

static int lstm_stream(stream *s, const char *path)
{
    lstm_problem p;
    lstm_work w;
    char err[LSTM_ERR_SIZE];
    if (lstm_load(path, &p, err) || lstm_work_init(&w, &p)) {
        fprintf(stderr, "layout-bench: %s\n", err);
        return -1;
    }
    lstm_eval e = {&p, &w};
    size_t n = lstm_inputs(&p);
    double *x = malloc(n * sizeof *x);
    int st = -1;
    if (x) {
        lstm_pack(&p, x);
        st = record_stream(s, "lstm l2 c1024", lstm_objective_ad, &e, n, x);
    }
    free(x);
    lstm_work_free(&w);
    lstm_free(&p);
    return st;
}

static int gmm_stream(stream *s, const char *path)
{
    gmm_problem p;
    gmm_work w;
    char err[GMM_ERR_SIZE];
    if (gmm_load(path, &p, err) || gmm_work_init(&w, &p)) {
        fprintf(stderr, "layout-bench: %s\n", err);
        return -1;
    }
    gmm_eval e = {&p, &w, GMM_SCALAR, 0, p.n, 1};
    size_t n = gmm_inputs(&p);
    double *x = malloc(n * sizeof *x);
    int st = -1;
    if (x) {
        gmm_pack(&p, x);
        st = record_stream(s, "gmm d10 K25", gmm_objective_ad, &e, n, x);
    }
    free(x);
    gmm_work_free(&w);
    gmm_free(&p);
    return st;
}

int main(int argc, char **argv)
{
    bench_plan plan = {11, 20e6};
    if (argc > 1)
        plan.reps = atoi(argv[1]);
    const char *data = LAYOUT_REPO_ROOT "/tests/data/adbench";
    char lstm_path[512], gmm_path[512];
    snprintf(lstm_path, sizeof lstm_path, "%s/lstm_l2_c1024.txt", data);
    snprintf(gmm_path, sizeof gmm_path, "%s/gmm_1k_d10_K25.txt", data);
    printf("reverse sweep of the record stream, one cotangent; median of %d batches\n", plan.reps);
    printf("%-14s %8s %7s | %6s %6s    | %9s %9s %9s | %13s\n", "stream", "records", "1-arg",
           "24-byte", "16+8", "24-byte", "16+8", "split", "/ 24-byte");
    int status = 0;
    stream s[2];
    memset(s, 0, sizeof s);
    if (lstm_stream(&s[0], lstm_path) || report(&s[0], &plan))
        status = 1;
    if (gmm_stream(&s[1], gmm_path) || report(&s[1], &plan))
        status = 1;
    stream_free(&s[0]);
    stream_free(&s[1]);
    printf("(MB: tape plus cotangents swept, 32 bytes a record now, 8 fewer a one-argument one)\n");
    return status;
}
