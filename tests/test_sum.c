/* Sums on several threads: ad_gradient_sum, ad_hvp_sum and
 * ad_set_sum_chunk_bytes (docs/api.md, "Sums on several threads").
 *
 * Problems (term i of the sum, x the parameters):
 *   LOGISTIC  the logistic log-loss of row i, log(1 + e^z) - y_i z with
 *             z = a_i . x, d = 8 features; z by ad_dot_rd, or (LOOP) by a
 *             scalar loop of ad_mul and ad_add.
 *   VARIED    tapes of different sizes: term i applies (i + shift) % 7 + 1
 *             operations to three of n = 20 inputs, optionally padded.
 *   WIDE      n = 2000 parameters, each term touching three of them.
 *
 * Oracles:
 *   - the written-out sum: the same terms added in a loop inside one
 *     objective, by ad_gradient and ad_hvp, to RTOL = 1e-13 relative.  For
 *     VARIED and WIDE every first and second partial of every operation is
 *     >= 0 at the points used (x, v > 0), so no entry cancels and the
 *     tolerance is relative to the entry itself; for LOGISTIC it is
 *     relative to the sum of the magnitudes of the entry's contributions,
 *     computed analytically;
 *   - analytic derivatives: for LOGISTIC the gradient, sum_i (s_i - y_i)
 *     a_i with s_i = sigmoid(z_i), and the Hessian-vector product,
 *     sum_i s_i (1 - s_i) (a_i . v) a_i, accumulated in long double, to
 *     RTOL relative to the sums of the magnitudes of what makes them up;
 *     for WIDE and the nested terms, to RTOL relative to the entry;
 *   - the API against itself: fx, grad and hv the same bits for threads =
 *     1, 2, 3, 4, 8 and 0 (every core), and on repeated calls; each term
 *     called exactly once per call, term 0 twice; the caller's last
 *     recording one chunk, not the sum;
 *   - errors raised in one term (a foreign value, a non-finite value under
 *     AD_CHECK_FINITE with ad_last_fault, an external function under
 *     ad_hvp_sum, the nesting depth), allocation failure on the calling
 *     thread, invalid arguments: the same status for every thread count,
 *     the first failing chunk's when two fail, NaN outputs, and the next
 *     call right; the caller's tape limit not applied to the chunks (as
 *     docs/api.md says);
 *   - chunks made to run on the library's threads (section 5: a term
 *     waits until another thread has run one), the results the same bits,
 *     a failure there reported to the caller with its fault;
 *   - concurrency: several user threads calling at once, short-lived
 *     calling threads, terms that call ad_gradient and ad_gradient_sum;
 *   - n = 0 with x and grad NULL (last: a UBSan report there ends a run
 *     built with -fno-sanitize-recover).
 *
 * POSIX threads, as in test_threads.c (ThreadSanitizer does not intercept
 * C11 thrd_create); ./dev.sh tsan runs this file under ThreadSanitizer. */
#define _POSIX_C_SOURCE 200809L

#include <fenv.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "workers.h"
#include "../lib/drivers/testing.h"

#define RTOL 1e-13
#define SMALL_BUDGET ((size_t)4096) /* 170 records a chunk: many chunks */
#define DEFAULT_BUDGET ((size_t)1 << 20)

static const unsigned thread_counts[] = {1, 2, 3, 4, 8, 0};
#define NCOUNTS (sizeof thread_counts / sizeof thread_counts[0])

static double *dalloc(size_t n)
{
    return xmalloc(n * sizeof(double));
}

/* ======================================================================
 * 1. The problems
 * ====================================================================== */

#define LOG_D 8

typedef struct logistic {
    size_t rows;
    int loop;         /* z by a scalar loop instead of ad_dot_rd */
    double *A;        /* rows x LOG_D, row-major */
    double *y;        /* labels, 0 or 1 */
} logistic;

static ad_real logistic_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    const logistic *L = ctx;
    const double *a = L->A + i * LOG_D;
    ad_real z;
    (void)n;
    if (L->loop) {
        z = ad_mul(x[0], a[0]);
        for (size_t j = 1; j < LOG_D; j++)
            z = ad_add(z, ad_mul(x[j], a[j]));
    } else {
        z = ad_dot_rd(LOG_D, x, a);
    }
    return ad_sub(ad_log1p(ad_exp(z)), ad_mul(L->y[i], z));
}

static void logistic_make(logistic *L, size_t rows, int loop, uint64_t seed)
{
    uint64_t st = seed;
    double w[LOG_D];
    L->rows = rows;
    L->loop = loop;
    L->A = dalloc(rows * LOG_D + 1);
    L->y = dalloc(rows + 1);
    fill_uniform(&st, w, LOG_D, -1.0, 1.0);
    for (size_t i = 0; i < rows; i++) {
        double z = 0.0;
        for (size_t j = 0; j < LOG_D; j++) {
            L->A[i * LOG_D + j] = rng_uniform(&st, -1.0, 1.0);
            z += w[j] * L->A[i * LOG_D + j];
        }
        L->y[i] = rng_uniform(&st, 0.0, 1.0) < 1.0 / (1.0 + exp(-z)) ? 1.0 : 0.0;
    }
}

static void logistic_free(logistic *L)
{
    free(L->A);
    free(L->y);
}

/* The analytic value, gradient and H v over the first `rows` rows, and in
 * gscale and hscale the sums of the magnitudes of what makes each entry
 * up: for the gradient s + y per row, the two partials that the recording
 * adds into z's cotangent; for H v, s + s^2 per row, the two second
 * derivatives of log1p(exp(z)) through its two operations
 * (log1p' exp'' = s, log1p'' exp'^2 = -s^2), whose sum is s (1 - s). */
static void logistic_analytic(const logistic *L, size_t rows, const double *x, const double *v,
                              double *fx, double *g, double *gscale, double *hv, double *hscale)
{
    long double f = 0.0L, G[LOG_D] = {0}, GS[LOG_D] = {0}, H[LOG_D] = {0}, HS[LOG_D] = {0};
    for (size_t i = 0; i < rows; i++) {
        const double *a = L->A + i * LOG_D;
        long double z = 0.0L, av = 0.0L, avs = 0.0L;
        for (size_t j = 0; j < LOG_D; j++) {
            z += (long double)a[j] * x[j];
            av += (long double)a[j] * v[j];
            avs += fabsl((long double)a[j] * v[j]);
        }
        long double s = 1.0L / (1.0L + expl(-z)), w = s * (1.0L - s);
        f += log1pl(expl(z)) - L->y[i] * z;
        for (size_t j = 0; j < LOG_D; j++) {
            G[j] += (s - L->y[i]) * a[j];
            GS[j] += (s + L->y[i]) * fabsl((long double)a[j]);
            H[j] += w * av * a[j];
            HS[j] += (s + s * s) * avs * fabsl((long double)a[j]);
        }
    }
    *fx = (double)f;
    for (size_t j = 0; j < LOG_D; j++) {
        g[j] = (double)G[j];
        gscale[j] = (double)GS[j];
        hv[j] = (double)H[j];
        hscale[j] = (double)HS[j];
    }
}

/* VARIED: term i starts from x_a and applies (i + shift) % 7 + 1
 * operations, each increasing and convex in its arguments, and then `pad`
 * multiplications by 1.001 (a longer tape). */
typedef struct varied {
    unsigned shift;
    long pad;
} varied;

static ad_real varied_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    const varied *V = ctx;
    size_t a = i % n, b = (3 * i + 1) % n, c = (7 * i + 2) % n;
    size_t ops = (i + V->shift) % 7 + 1;
    ad_real t = x[a];
    for (size_t k = 0; k < ops; k++) {
        switch (k) {
        case 0: t = ad_mul(t, x[b]); break;
        case 1: t = ad_add(t, ad_exp(ad_mul(0.25, x[c]))); break;
        case 2: t = ad_exp(ad_mul(0.1, t)); break;
        case 3: t = ad_mul(ad_mul(t, t), 0.5); break;
        case 4: t = ad_pow(t, 1.5); break;
        case 5: t = ad_add(t, ad_mul(x[a], x[c])); break;
        default: t = ad_add(t, ad_div(x[b], 3.0)); break;
        }
    }
    for (long k = 0; k < V->pad; k++)
        t = ad_mul(t, 1.001);
    return t;
}

/* WIDE: x_a x_b + e^(x_c / 10) x_a, three of n inputs. */
static ad_real wide_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    size_t a = i % n, b = (37 * i + 11) % n, c = (101 * i + 5) % n;
    (void)ctx;
    return ad_add(ad_mul(x[a], x[b]), ad_mul(ad_exp(ad_mul(0.1, x[c])), x[a]));
}

/* The written-out sum: the terms added in order inside one objective. */
typedef struct written {
    ad_term term;
    void *ctx;
    size_t nterms;
} written;

static ad_real written_out(const ad_real *x, size_t n, void *ctx)
{
    const written *w = ctx;
    ad_real s = ad_const(0.0);
    for (size_t i = 0; i < w->nterms; i++)
        s = ad_add(s, w->term(i, x, n, w->ctx));
    return s;
}

/* Counts the calls of each term (they come from several threads). */
typedef struct counted {
    ad_term term;
    void *ctx;
    atomic_uint *calls;
} counted;

static ad_real counted_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    const counted *c = ctx;
    atomic_fetch_add(&c->calls[i], 1u);
    return c->term(i, x, n, c->ctx);
}

/* ======================================================================
 * 2. The common check
 * ====================================================================== */

typedef struct problem {
    const char *name;
    ad_term term;
    void *ctx;
    size_t nterms, n;
    const double *x, *v;
    const double *gscale, *hscale; /* magnitudes for the tolerance; NULL: the entry's own */
} problem;

typedef struct result {
    double fx, *g, *hv;
} result;

static void result_alloc(result *r, size_t n)
{
    r->g = dalloc(n);
    r->hv = dalloc(n);
}

static void result_free(result *r)
{
    free(r->g);
    free(r->hv);
}

static void near_entry(const char *what, const char *name, size_t j, double got, double want,
                       double scale, double rtol)
{
    double tol = rtol * fmax(fabs(want), scale);
    if (fabs(got - want) <= tol)
        return;
    print_error("%s: %s[%zu] = %.17g, expected %.17g (error %.3g, tolerance %.3g)\n", name, what,
                j, got, want, fabs(got - want), tol);
    fail();
}

static void same_entry(const char *what, const char *name, unsigned threads, size_t j,
                       double got, double want)
{
    if (same_double(got, want))
        return;
    print_error("%s, threads = %u: %s[%zu] = %.17g, expected exactly %.17g\n", name, threads,
                what, j, got, want);
    fail();
}

static void status_is(const char *name, const char *call, unsigned threads, ad_status got,
                      ad_status want)
{
    if (got == want)
        return;
    print_error("%s: %s, threads = %u: status %d (%s), expected %d (%s)\n", name, call, threads,
                (int)got, ad_strerror(got), (int)want, ad_strerror(want));
    fail();
}

/* One call of ad_gradient_sum (hvp = 0) or ad_hvp_sum (hvp = 1). */
static ad_status call_sum(int hvp, ad_term term, void *ctx, size_t nterms, size_t n,
                          const double *x, const double *v, result *r, unsigned threads)
{
    r->fx = -1.0;
    for (size_t j = 0; j < n; j++)
        r->g[j] = r->hv[j] = -1.0;
    return hvp ? ad_hvp_sum(term, ctx, nterms, n, x, v, &r->fx, r->g, r->hv, threads)
               : ad_gradient_sum(term, ctx, nterms, n, x, &r->fx, r->g, threads);
}

static void check_all_nan_result(const char *name, int hvp, const result *r, size_t n)
{
    if (!isnan(r->fx)) {
        print_error("%s: fx = %.17g after an error, expected NaN\n", name, r->fx);
        fail();
    }
    for (size_t j = 0; j < n; j++)
        if (!isnan(r->g[j]) || (hvp && !isnan(r->hv[j]))) {
            print_error("%s: grad[%zu] = %.17g, hv[%zu] = %.17g after an error, expected NaN\n",
                        name, j, r->g[j], j, r->hv[j]);
            fail();
        }
}

static void check_same_result(const char *name, int hvp, unsigned threads, const result *got,
                              const result *want, size_t n)
{
    same_entry("fx", name, threads, 0, got->fx, want->fx);
    for (size_t j = 0; j < n; j++) {
        same_entry("grad", name, threads, j, got->g[j], want->g[j]);
        if (hvp)
            same_entry("hv", name, threads, j, got->hv[j], want->hv[j]);
    }
}

/* The problem's sum by both entry points for every thread count (threads
 * = 1, 2 and 8 twice): the same bits every time, each term called once
 * per call (term 0 twice), and against ad_gradient and ad_hvp of the
 * written-out sum.
 * ref_g and ref_hv (n each, or NULL) receive the first results of
 * ad_gradient_sum and ad_hvp_sum; returns the first fx of ad_gradient_sum. */
static double check_sum(const problem *p, double *ref_g, double *ref_hv)
{
    size_t n = p->n;
    written w = {p->term, p->ctx, p->nterms};
    result oracle, ref, got;
    double fx_first = NAN;
    atomic_uint *calls = xmalloc((p->nterms + 1) * sizeof *calls);
    counted cnt = {p->term, p->ctx, calls};
    result_alloc(&oracle, n);
    result_alloc(&ref, n);
    result_alloc(&got, n);

    for (int hvp = 0; hvp < 2; hvp++) {
        const char *call = hvp ? "ad_hvp_sum" : "ad_gradient_sum";
        ad_status s = hvp ? ad_hvp(written_out, &w, n, p->x, p->v, &oracle.fx, oracle.g, oracle.hv)
                          : ad_gradient(written_out, &w, n, p->x, &oracle.fx, oracle.g);
        status_is(p->name, hvp ? "ad_hvp (written out)" : "ad_gradient (written out)", 1, s,
                  AD_OK);
        for (size_t k = 0; k < NCOUNTS; k++) {
            /* repeated: threads = 1, 2 and 8 */
            int reps = thread_counts[k] == 1 || thread_counts[k] == 2 || thread_counts[k] == 8
                           ? 2 : 1;
            for (int rep = 0; rep < reps; rep++) {
                unsigned th = thread_counts[k];
                for (size_t i = 0; i < p->nterms; i++)
                    atomic_store(&calls[i], 0u);
                result *r = k == 0 && rep == 0 ? &ref : &got;
                s = call_sum(hvp, counted_term, &cnt, p->nterms, n, p->x, p->v, r, th);
                status_is(p->name, call, th, s, AD_OK);
                for (size_t i = 0; i < p->nterms; i++) {
                    unsigned c = atomic_load(&calls[i]);
                    if (c != (i == 0 ? 2u : 1u)) {
                        print_error("%s: %s, threads = %u: term %zu called %u times\n", p->name,
                                    call, th, i, c);
                        fail();
                    }
                }
                if (r != &ref)
                    check_same_result(p->name, hvp, th, &got, &ref, n);
            }
        }
        /* Against the written-out sum. */
        near_entry(hvp ? "fx (hvp)" : "fx", p->name, 0, ref.fx, oracle.fx, 0.0, RTOL);
        for (size_t j = 0; j < n; j++) {
            near_entry(hvp ? "grad (hvp)" : "grad", p->name, j, ref.g[j], oracle.g[j],
                       p->gscale ? p->gscale[j] : 0.0, RTOL);
            if (hvp)
                near_entry("hv", p->name, j, ref.hv[j], oracle.hv[j],
                           p->hscale ? p->hscale[j] : 0.0, RTOL);
        }
        if (!hvp) {
            fx_first = ref.fx;
            if (ref_g)
                memcpy(ref_g, ref.g, n * sizeof *ref_g);
        } else if (ref_hv) {
            memcpy(ref_hv, ref.hv, n * sizeof *ref_hv);
        }
    }
    free(calls);
    result_free(&oracle);
    result_free(&ref);
    result_free(&got);
    return fx_first;
}

/* LOGISTIC over `rows` rows: check_sum, and the analytic derivatives. */
static void check_logistic(const char *name, size_t rows, int loop, size_t budget)
{
    logistic L;
    uint64_t st = 77;
    double x[LOG_D], v[LOG_D], fx, g[LOG_D], gs[LOG_D], hv[LOG_D], hs[LOG_D];
    double sg[LOG_D], shv[LOG_D];
    logistic_make(&L, rows, loop, 1000 + rows);
    fill_uniform(&st, x, LOG_D, -0.5, 0.5);
    fill_uniform(&st, v, LOG_D, -1.0, 1.0);
    logistic_analytic(&L, rows, x, v, &fx, g, gs, hv, hs);
    size_t old = ad_set_sum_chunk_bytes(budget);
    problem p = {name, logistic_term, &L, rows, LOG_D, x, v, gs, hs};
    double sfx = check_sum(&p, sg, shv);
    ad_set_sum_chunk_bytes(old);
    /* The analytic value: its own magnitude (the terms are positive). */
    near_entry("fx (analytic)", name, 0, sfx, fx, 0.0, RTOL);
    for (size_t j = 0; j < LOG_D; j++) {
        near_entry("grad (analytic)", name, j, sg[j], g[j], gs[j], RTOL);
        near_entry("hv (analytic)", name, j, shv[j], hv[j], hs[j], RTOL);
    }
    logistic_free(&L);
}

/* ======================================================================
 * 3. Results: against the oracles, and the same bits for every thread count
 * ====================================================================== */

static int never_term_called;

static ad_real never_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    (void)i, (void)x, (void)n, (void)ctx;
    never_term_called = 1;
    return ad_const(NAN);
}

static void test_empty_sum(void **state)
{
    double x[3] = {1.0, 2.0, 3.0}, v[3] = {1.0, 1.0, 1.0}, fx, g[3], hv[3];
    (void)state;
    never_term_called = 0;
    for (size_t k = 0; k < NCOUNTS; k++) {
        fx = 5.0, fill(g, 3, 5.0), fill(hv, 3, 5.0);
        assert_int_equal(ad_gradient_sum(never_term, NULL, 0, 3, x, &fx, g, thread_counts[k]),
                         AD_OK);
        assert_same(fx, 0.0);
        for (int j = 0; j < 3; j++)
            assert_same(g[j], 0.0);
        fx = 5.0, fill(g, 3, 5.0), fill(hv, 3, 5.0);
        assert_int_equal(ad_hvp_sum(never_term, NULL, 0, 3, x, v, &fx, g, hv, thread_counts[k]),
                         AD_OK);
        assert_same(fx, 0.0);
        for (int j = 0; j < 3; j++) {
            assert_same(g[j], 0.0);
            assert_same(hv[j], 0.0);
        }
    }
    assert_int_equal(never_term_called, 0);
}

static void test_one_term(void **state)
{
    (void)state;
    check_logistic("logistic, 1 term", 1, 0, 0);
    check_logistic("logistic loop, 1 term", 1, 1, 0);
    check_logistic("logistic, 1 term, small budget", 1, 0, SMALL_BUDGET);
}

/* 3 terms for up to 8 threads: with the default budget 2 chunks; with
 * padded terms and a tiny budget, 3 chunks of one term each. */
static void test_fewer_terms_than_threads(void **state)
{
    (void)state;
    check_logistic("logistic, 3 terms", 3, 0, 0);
    double x[20], v[20];
    uint64_t st = 5;
    fill_uniform(&st, x, 20, 0.5, 1.5);
    fill_uniform(&st, v, 20, 0.5, 1.5);
    varied V = {0, 300};
    size_t old = ad_set_sum_chunk_bytes(1);
    problem p = {"varied, 3 padded terms, a chunk each", varied_term, &V, 3, 20, x, v, NULL, NULL};
    check_sum(&p, NULL, NULL);
    V.pad = 0;
    p.name = "varied, 3 terms, tiny budget";
    check_sum(&p, NULL, NULL);
    ad_set_sum_chunk_bytes(old);
}

static void test_many_terms_logistic(void **state)
{
    (void)state;
    check_logistic("logistic, 10000 terms, small budget", 10000, 0, SMALL_BUDGET);
    check_logistic("logistic loop, 10000 terms, small budget", 10000, 1, SMALL_BUDGET);
    check_logistic("logistic, 10000 terms, default budget", 10000, 0, 0);
    check_logistic("logistic, 777 terms, 1-byte budget", 777, 0, 1);
}

static void test_many_terms_varied(void **state)
{
    double x[20], v[20];
    uint64_t st = 9;
    (void)state;
    fill_uniform(&st, x, 20, 0.5, 1.5);
    fill_uniform(&st, v, 20, 0.5, 1.5);
    size_t old = ad_set_sum_chunk_bytes(SMALL_BUDGET);
    /* term 0 the smallest (1 operation): chunks sized by it hold larger
     * terms; then term 0 the largest (7 operations). */
    varied V0 = {0, 0}, V6 = {6, 0};
    problem p = {"varied, term 0 smallest", varied_term, &V0, 10000, 20, x, v, NULL, NULL};
    check_sum(&p, NULL, NULL);
    p.name = "varied, term 0 largest";
    p.ctx = &V6;
    check_sum(&p, NULL, NULL);
    ad_set_sum_chunk_bytes(old);
}

static void test_many_parameters(void **state)
{
    enum { N = 2000 };
    double *x = dalloc(N), *v = dalloc(N);
    uint64_t st = 11;
    (void)state;
    fill_uniform(&st, x, N, 0.5, 1.5);
    fill_uniform(&st, v, N, 0.5, 1.5);
    /* a chunk at least 8 n = 16000 records: about 2700 terms, 4 chunks */
    size_t old = ad_set_sum_chunk_bytes(SMALL_BUDGET);
    problem p = {"wide, n = 2000", wide_term, NULL, 6000, N, x, v, NULL, NULL};
    double *g = dalloc(N), *hv = dalloc(N);
    double fx = check_sum(&p, g, hv);
    ad_set_sum_chunk_bytes(old);
    /* analytic: every product below is of positive numbers */
    long double F = 0.0L, *G = calloc(N, sizeof *G), *H = calloc(N, sizeof *H);
    assert_non_null(G);
    assert_non_null(H);
    for (size_t i = 0; i < 6000; i++) {
        size_t a = i % N, b = (37 * i + 11) % N, c = (101 * i + 5) % N;
        long double e = expl(0.1L * x[c]);
        F += (long double)x[a] * x[b] + e * x[a];
        G[a] += x[b] + e, G[b] += x[a], G[c] += 0.1L * e * x[a];
        H[a] += v[b] + 0.1L * e * v[c];
        H[b] += v[a];
        H[c] += 0.1L * e * v[a] + 0.01L * e * x[a] * v[c];
    }
    near_entry("fx (analytic)", p.name, 0, fx, (double)F, 0.0, RTOL);
    for (size_t j = 0; j < N; j++) {
        near_entry("grad (analytic)", p.name, j, g[j], (double)G[j], 0.0, RTOL);
        near_entry("hv (analytic)", p.name, j, hv[j], (double)H[j], 0.0, RTOL);
    }
    free(G), free(H), free(g), free(hv), free(x), free(v);
}

/* The budget: per thread, 0 restores the default; a different budget
 * moves the chunk boundaries (the last bits may differ), not the result. */
static void test_budget(void **state)
{
    logistic L;
    double x[LOG_D], g1[LOG_D], g2[LOG_D], f1, f2;
    uint64_t st = 3;
    (void)state;
    logistic_make(&L, 5000, 0, 31);
    fill_uniform(&st, x, LOG_D, -0.5, 0.5);
    size_t old = ad_set_sum_chunk_bytes(SMALL_BUDGET);
    assert_int_equal(ad_set_sum_chunk_bytes(0), SMALL_BUDGET);
    assert_int_equal(ad_set_sum_chunk_bytes(12345), DEFAULT_BUDGET);
    assert_int_equal(ad_set_sum_chunk_bytes(SMALL_BUDGET), 12345);
    assert_int_equal(ad_gradient_sum(logistic_term, &L, 5000, LOG_D, x, &f1, g1, 2), AD_OK);
    ad_set_sum_chunk_bytes(0);
    assert_int_equal(ad_gradient_sum(logistic_term, &L, 5000, LOG_D, x, &f2, g2, 2), AD_OK);
    double gs[LOG_D], hv[LOG_D], hs[LOG_D], fa, ga[LOG_D];
    logistic_analytic(&L, 5000, x, x, &fa, ga, gs, hv, hs);
    near_entry("fx (budgets)", "budget", 0, f1, f2, 0.0, RTOL);
    for (size_t j = 0; j < LOG_D; j++)
        near_entry("grad (budgets)", "budget", j, g1[j], g2[j], gs[j], RTOL);
    ad_set_sum_chunk_bytes(old);
    logistic_free(&L);
}

/* Memory: the calling thread's last recording is one chunk, not the sum. */
static void test_one_chunk_tape(void **state)
{
    logistic L;
    double x[LOG_D], g[LOG_D], fx;
    uint64_t st = 4;
    ad_tape_stats ts;
    (void)state;
    logistic_make(&L, 20000, 1, 41);
    fill_uniform(&st, x, LOG_D, -0.5, 0.5);
    size_t old = ad_set_sum_chunk_bytes(SMALL_BUDGET);
    assert_int_equal(ad_gradient_sum(logistic_term, &L, 20000, LOG_D, x, &fx, g, 1), AD_OK);
    assert_int_equal(ad_tape_stats_get(&ts), AD_OK);
    assert_int_equal(ts.inputs, LOG_D);
    /* a term is about 20 records; a chunk at most the budget's 170 + one term */
    if (ts.records > SMALL_BUDGET / 24 + 40) {
        print_error("last recording: %zu records, a chunk's budget is %zu\n", ts.records,
                    SMALL_BUDGET / 24);
        fail();
    }
    ad_set_sum_chunk_bytes(old);
    logistic_free(&L);
}

/* ======================================================================
 * 4. Errors raised in one term
 * ====================================================================== */

static ad_real kept;  /* an active value of a recording that has ended */

static ad_real keep_x0(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    kept = x[0];
    return ad_mul(x[0], x[0]);
}

static void twice_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    (void)ctx, (void)n, (void)m;
    y[0] = 2.0 * x[0];
}

static void twice_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                      const double *ybar, double *xbar)
{
    (void)ctx, (void)n, (void)x, (void)m, (void)y;
    xbar[0] = 2.0 * ybar[0];
}

static const ad_rule twice_rule = {twice_primal, twice_vjp, NULL, NULL};

enum fault_kind { F_NONE, F_FOREIGN, F_NONFINITE, F_EXTERNAL };

/* LOGISTIC, with a fault added to term at[k] (two at most). */
typedef struct faulty {
    logistic *L;
    size_t at[2];
    enum fault_kind kind[2];
} faulty;

static ad_real faulty_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    const faulty *f = ctx;
    ad_real t = logistic_term(i, x, n, f->L);
    for (int k = 0; k < 2; k++) {
        if (f->kind[k] == F_NONE || i != f->at[k])
            continue;
        switch (f->kind[k]) {
        case F_FOREIGN: t = ad_add(t, kept); break;
        case F_NONFINITE: t = ad_add(t, ad_log(ad_mul(-1.0, ad_exp(x[0])))); break;
        default: {
            ad_real y;
            status_unused(ad_external(&twice_rule, NULL, 1, x, 1, &y));
            t = ad_add(t, y);
            break;
        }
        }
    }
    return t;
}

#define ERR_TERMS 2000

typedef struct err_fixture {
    logistic L;
    double x[LOG_D], v[LOG_D];
    result ref[2]; /* ad_gradient_sum's and ad_hvp_sum's, threads = 1 */
    size_t old_budget;
} err_fixture;

static void fixture_open(err_fixture *e)
{
    uint64_t st = 21;
    logistic_make(&e->L, ERR_TERMS, 0, 51);
    fill_uniform(&st, e->x, LOG_D, -0.5, 0.5);
    fill_uniform(&st, e->v, LOG_D, -1.0, 1.0);
    e->old_budget = ad_set_sum_chunk_bytes(SMALL_BUDGET);
    for (int hvp = 0; hvp < 2; hvp++) {
        result_alloc(&e->ref[hvp], LOG_D);
        assert_int_equal(call_sum(hvp, logistic_term, &e->L, ERR_TERMS, LOG_D, e->x, e->v,
                                  &e->ref[hvp], 1), AD_OK);
    }
}

static void fixture_close(err_fixture *e)
{
    ad_set_sum_chunk_bytes(e->old_budget);
    result_free(&e->ref[0]);
    result_free(&e->ref[1]);
    logistic_free(&e->L);
}

/* A good call after an error: the reference's bits. */
static void good_call_after(const char *name, err_fixture *e, int hvp, unsigned threads)
{
    result r;
    result_alloc(&r, LOG_D);
    status_is(name, "the call after", threads,
              call_sum(hvp, logistic_term, &e->L, ERR_TERMS, LOG_D, e->x, e->v, &r, threads),
              AD_OK);
    check_same_result(name, hvp, threads, &r, &e->ref[hvp], LOG_D);
    result_free(&r);
}

/* term fails with `want` for every thread count, by both entry points
 * (want_hvp for ad_hvp_sum); NaN outputs; the next good call right.
 * check_fault: ad_last_fault on the calling thread describes a log. */
static void expect_failure(const char *name, err_fixture *e, faulty *f, ad_status want,
                           ad_status want_hvp, int check_fault)
{
    result r;
    result_alloc(&r, LOG_D);
    for (int hvp = 0; hvp < 2; hvp++) {
        ad_status w = hvp ? want_hvp : want;
        for (size_t k = 0; k < NCOUNTS; k++) {
            unsigned th = thread_counts[k];
            ad_status s = call_sum(hvp, faulty_term, f, ERR_TERMS, LOG_D, e->x, e->v, &r, th);
            status_is(name, hvp ? "ad_hvp_sum" : "ad_gradient_sum", th, s, w);
            if (w == AD_OK)
                continue;
            check_all_nan_result(name, hvp, &r, LOG_D);
            if (check_fault) {
                ad_fault fault;
                memset(&fault, 0, sizeof fault);
                status_is(name, "ad_last_fault", th, ad_last_fault(&fault), AD_OK);
                if (!fault.op || strcmp(fault.op, "log") != 0 || fault.phase != AD_PHASE_RECORD ||
                    fault.nargs != 1 || !(fault.arg[0] < 0.0) || !isnan(fault.value)) {
                    print_error("%s: threads = %u: fault op %s, phase %d, nargs %zu, arg %g, "
                                "value %g\n", name, th, fault.op ? fault.op : "(null)",
                                (int)fault.phase, fault.nargs, fault.arg[0], fault.value);
                    fail();
                }
            }
            good_call_after(name, e, hvp, th);
        }
    }
    result_free(&r);
}

static void test_foreign_value(void **state)
{
    err_fixture e;
    double one = 1.0, g;
    (void)state;
    fixture_open(&e);
    assert_same(gradient_ok(keep_x0, NULL, 1, &one, &g), 1.0);
    static const size_t where[] = {777, 0, 1, ERR_TERMS - 1};
    for (size_t k = 0; k < sizeof where / sizeof where[0]; k++) {
        faulty f = {&e.L, {where[k], 0}, {F_FOREIGN, F_NONE}};
        char name[64];
        snprintf(name, sizeof name, "foreign value in term %zu", where[k]);
        expect_failure(name, &e, &f, AD_EFOREIGN, AD_EFOREIGN, 0);
    }
    fixture_close(&e);
}

static void test_nonfinite_value(void **state)
{
    err_fixture e;
    (void)state;
    fixture_open(&e);
    static const size_t where[] = {777, 0, ERR_TERMS - 1};
    for (size_t k = 0; k < sizeof where / sizeof where[0]; k++) {
        faulty f = {&e.L, {where[k], 0}, {F_NONFINITE, F_NONE}};
        char name[64];
        snprintf(name, sizeof name, "non-finite value in term %zu", where[k]);
        unsigned was = ad_set_checks(AD_CHECK_FINITE);
        expect_failure(name, &e, &f, AD_ENONFINITE, AD_ENONFINITE, 1);
        ad_set_checks(was);
        /* The checks are the caller's: off, the same terms give NaN and
         * AD_OK (no worker kept the checks on). */
        for (size_t c = 0; c < NCOUNTS; c++) {
            double fx, g[LOG_D];
            assert_int_equal(ad_gradient_sum(faulty_term, &f, ERR_TERMS, LOG_D, e.x, &fx, g,
                                             thread_counts[c]), AD_OK);
            assert_nan(fx);
        }
    }
    /* After a good call, no fault is left. */
    good_call_after("after the faults", &e, 0, 2);
    ad_fault fault;
    assert_int_equal(ad_last_fault(&fault), AD_EINVAL);
    fixture_close(&e);
}

/* Two faulty terms in different chunks: the first chunk's status, for
 * every thread count. */
static void test_first_failure_wins(void **state)
{
    err_fixture e;
    double one = 1.0, g;
    (void)state;
    fixture_open(&e);
    assert_same(gradient_ok(keep_x0, NULL, 1, &one, &g), 1.0);
    unsigned was = ad_set_checks(AD_CHECK_FINITE);
    faulty f1 = {&e.L, {1500, 777}, {F_FOREIGN, F_NONFINITE}};
    expect_failure("non-finite in 777, foreign in 1500", &e, &f1, AD_ENONFINITE, AD_ENONFINITE,
                   1);
    faulty f2 = {&e.L, {1500, 777}, {F_NONFINITE, F_FOREIGN}};
    expect_failure("foreign in 777, non-finite in 1500", &e, &f2, AD_EFOREIGN, AD_EFOREIGN, 0);
    ad_set_checks(was);
    fixture_close(&e);
}

/* An external function without an hvp rule: ad_gradient_sum
 * differentiates it, ad_hvp_sum refuses it (AD_ENOTSUP). */
static void test_external_in_term(void **state)
{
    err_fixture e;
    (void)state;
    fixture_open(&e);
    faulty f = {&e.L, {777, 0}, {F_EXTERNAL, F_NONE}};
    expect_failure("external function in term 777", &e, &f, AD_OK, AD_ENOTSUP, 0);
    /* and the gradient right: the written-out sum's */
    written w = {faulty_term, &f, ERR_TERMS};
    double fo, go[LOG_D], fs, gs[LOG_D], fa, ga[LOG_D], scale[LOG_D], hv[LOG_D], hs[LOG_D];
    logistic_analytic(&e.L, ERR_TERMS, e.x, e.v, &fa, ga, scale, hv, hs);
    scale[0] += 2.0;  /* the external function's 2 x_0 */
    fo = gradient_ok(written_out, &w, LOG_D, e.x, go);
    for (size_t k = 0; k < NCOUNTS; k++) {
        assert_int_equal(ad_gradient_sum(faulty_term, &f, ERR_TERMS, LOG_D, e.x, &fs, gs,
                                         thread_counts[k]), AD_OK);
        near_entry("fx", "external", 0, fs, fo, 0.0, RTOL);
        for (size_t j = 0; j < LOG_D; j++)
            near_entry("grad", "external", j, gs[j], go[j], scale[j], RTOL);
        near_entry("grad (analytic)", "external", 0, gs[0], ga[0] + 2.0, scale[0], RTOL);
    }
    fixture_close(&e);
}

/* Allocation failure on the calling thread, at each allocation in turn
 * (its tapes released first, so that they are allocated again). */
static void test_alloc_failure(void **state)
{
    err_fixture e;
    static const unsigned counts[] = {1, 2, 8};
    result r;
    (void)state;
    fixture_open(&e);
    result_alloc(&r, LOG_D);
    for (int hvp = 0; hvp < 2; hvp++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            unsigned th = counts[k];
            int successes = 0, failures = 0;
            for (long i = 0; successes < 3; i++) {
                assert_int_equal(ad_release(), AD_OK);
                ad_test_fail_alloc_after(i);
                ad_status s = call_sum(hvp, logistic_term, &e.L, ERR_TERMS, LOG_D, e.x, e.v, &r,
                                       th);
                ad_test_fail_alloc_after(-1);
                if (s == AD_OK) {
                    successes++;
                    check_same_result("after allocation failures", hvp, th, &r, &e.ref[hvp],
                                      LOG_D);
                    continue;
                }
                failures++;
                /* on one thread the failure points come first; on more,
                 * which chunks the caller takes depends on timing */
                if (th == 1)
                    assert_alloc_failure(i, s, successes);
                else
                    assert_int_equal(s, AD_ENOMEM);
                check_all_nan_result("allocation failure", hvp, &r, LOG_D);
                good_call_after("after an allocation failure", &e, hvp, th);
                assert_true(i < 200);
            }
            assert_true(failures > 0);
        }
    result_free(&r);
    fixture_close(&e);
}

static void test_invalid_arguments(void **state)
{
    err_fixture e;
    double fx, g[LOG_D], hv[LOG_D];
    (void)state;
    fixture_open(&e);
    for (size_t k = 0; k < NCOUNTS; k++) {
        unsigned th = thread_counts[k];
        /* NULL term (also with no terms) */
        for (size_t nt = 0; nt <= ERR_TERMS; nt += ERR_TERMS) {
            fx = 0.0, fill(g, LOG_D, 0.0), fill(hv, LOG_D, 0.0);
            assert_int_equal(ad_gradient_sum(NULL, NULL, nt, LOG_D, e.x, &fx, g, th), AD_EINVAL);
            assert_all_nan(fx, g, LOG_D);
            fx = 0.0, fill(g, LOG_D, 0.0), fill(hv, LOG_D, 0.0);
            assert_int_equal(ad_hvp_sum(NULL, NULL, nt, LOG_D, e.x, e.v, &fx, g, hv, th),
                             AD_EINVAL);
            assert_all_nan(fx, g, LOG_D);
            for (size_t j = 0; j < LOG_D; j++)
                assert_nan(hv[j]);
        }
        /* NULL fx */
        fill(g, LOG_D, 0.0), fill(hv, LOG_D, 0.0);
        assert_int_equal(ad_gradient_sum(logistic_term, &e.L, ERR_TERMS, LOG_D, e.x, NULL, g, th),
                         AD_EINVAL);
        for (size_t j = 0; j < LOG_D; j++)
            assert_nan(g[j]);
        fill(g, LOG_D, 0.0);
        assert_int_equal(ad_hvp_sum(logistic_term, &e.L, ERR_TERMS, LOG_D, e.x, e.v, NULL, g, hv,
                                    th), AD_EINVAL);
        for (size_t j = 0; j < LOG_D; j++) {
            assert_nan(g[j]);
            assert_nan(hv[j]);
        }
        /* NULL x, grad (v, hv) with n > 0, also with no terms */
        for (size_t nt = 0; nt <= ERR_TERMS; nt += ERR_TERMS) {
            fx = 0.0, fill(g, LOG_D, 0.0);
            assert_int_equal(ad_gradient_sum(logistic_term, &e.L, nt, LOG_D, NULL, &fx, g, th),
                             AD_EINVAL);
            assert_all_nan(fx, g, LOG_D);
            fx = 0.0;
            assert_int_equal(ad_gradient_sum(logistic_term, &e.L, nt, LOG_D, e.x, &fx, NULL, th),
                             AD_EINVAL);
            assert_nan(fx);
            const double *xs[4] = {NULL, e.x, e.x, e.x}, *vs[4] = {e.v, NULL, e.v, e.v};
            for (int which = 0; which < 4; which++) {
                double *gp = which == 2 ? NULL : g, *hp = which == 3 ? NULL : hv;
                fx = 0.0, fill(g, LOG_D, 0.0), fill(hv, LOG_D, 0.0);
                assert_int_equal(ad_hvp_sum(logistic_term, &e.L, nt, LOG_D, xs[which], vs[which],
                                            &fx, gp, hp, th), AD_EINVAL);
                assert_nan(fx);
                for (size_t j = 0; j < LOG_D; j++) {
                    if (gp)
                        assert_nan(g[j]);
                    if (hp)
                        assert_nan(hv[j]);
                }
            }
        }
        good_call_after("after AD_EINVAL", &e, 0, th);
        good_call_after("after AD_EINVAL", &e, 1, th);
    }
    fixture_close(&e);
}

/* The nesting depth: a sum called inside AD_MAX_NESTING recordings cannot
 * record (AD_ENESTING); one level less, it can. */
typedef struct deep {
    int levels;
    err_fixture *e;
    ad_status status;
    result r;
} deep;

static ad_real deep_objective(const ad_real *x, size_t n, void *ctx)
{
    deep *d = ctx;
    (void)n;
    if (d->levels-- > 0) {
        double xv = ad_value(x[0]), fx, g;
        status_unused(ad_gradient(deep_objective, d, 1, &xv, &fx, &g));
    } else {
        d->status = call_sum(0, logistic_term, &d->e->L, ERR_TERMS, LOG_D, d->e->x, d->e->v,
                             &d->r, 2);
    }
    return ad_mul(x[0], 2.0);
}

static void test_nesting(void **state)
{
    err_fixture e;
    (void)state;
    fixture_open(&e);
    for (int below = 0; below < 2; below++) {
        deep d = {AD_MAX_NESTING - 1 - below, &e, AD_EINVAL, {0, NULL, NULL}};
        double x = 1.0, g;
        result_alloc(&d.r, LOG_D);
        assert_same(gradient_ok(deep_objective, &d, 1, &x, &g), 2.0);
        assert_same(g, 2.0);
        if (below == 0) {
            assert_int_equal(d.status, AD_ENESTING);
            check_all_nan_result("nested AD_MAX_NESTING deep", 0, &d.r, LOG_D);
        } else {
            assert_int_equal(d.status, AD_OK);
            check_same_result("nested AD_MAX_NESTING - 1 deep", 0, 2, &d.r, &e.ref[0], LOG_D);
        }
        result_free(&d.r);
    }
    good_call_after("after nesting", &e, 0, 2);
    fixture_close(&e);
}

/* The caller's tape limit does not apply to the chunks (docs/api.md:
 * "its ad_set_tape_limit cap does not (each chunk is small)"). */
static void test_tape_limit_not_applied(void **state)
{
    err_fixture e;
    (void)state;
    fixture_open(&e);
    /* a term is a few records, a chunk of the small budget 170 or more.
     * The limit is restored before anything is asserted, so that a failure
     * here leaves the next tests alone. */
    ad_status st[2][NCOUNTS];
    int same[2][NCOUNTS];
    result r;
    result_alloc(&r, LOG_D);
    size_t old = ad_set_tape_limit(50);
    for (int hvp = 0; hvp < 2; hvp++)
        for (size_t k = 0; k < NCOUNTS; k++) {
            st[hvp][k] = call_sum(hvp, logistic_term, &e.L, ERR_TERMS, LOG_D, e.x, e.v, &r,
                                  thread_counts[k]);
            same[hvp][k] = same_double(r.fx, e.ref[hvp].fx);
            for (size_t j = 0; j < LOG_D; j++)
                same[hvp][k] &= same_double(r.g[j], e.ref[hvp].g[j]) &&
                                (!hvp || same_double(r.hv[j], e.ref[hvp].hv[j]));
        }
    ad_set_tape_limit(old);
    result_free(&r);
    int bad = 0;
    for (int hvp = 0; hvp < 2; hvp++)
        for (size_t k = 0; k < NCOUNTS; k++)
            if (st[hvp][k] != AD_OK || !same[hvp][k]) {
                print_error("caller's tape limit of 50 records: %s, threads = %u: %s%s\n",
                            hvp ? "ad_hvp_sum" : "ad_gradient_sum", thread_counts[k],
                            ad_strerror(st[hvp][k]),
                            st[hvp][k] == AD_OK ? ", results differ from the reference" : "");
                bad = 1;
            }
    fixture_close(&e);
    if (bad)
        fail_msg("the caller's ad_set_tape_limit cap applied to the chunks it ran");
}

/* ======================================================================
 * 5. Chunks on the library's threads, made to happen
 *
 * Cheap terms are often all taken by one thread before another wakes.
 * Here the first thread to run a term i >= 1 waits until another thread
 * runs one: the caller and the library's threads woken for this call all
 * take chunks (chunks > 2 of them) whatever the timing, so at least two
 * threads run chunks, one of them the library's.  The wait is bounded
 * (GATE_SECONDS) only so that a broken pool fails the test instead of
 * hanging it.
 * ====================================================================== */

#define GATE_SECONDS 30.0

typedef struct gate {
    logistic *L;
    pthread_t caller;
    enum fault_kind on_helper; /* added to every term i >= 1 run off the caller */
    ad_term extra;             /* added to every term, if set (its ctx: the gate) */
    atomic_int claimed, keeper_known, other_ran, timed_out;
    pthread_t keeper;          /* the thread that waits, once keeper_known */
    atomic_int caller_terms, helper_terms;
} gate;

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ad_real gate_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    gate *g = ctx;
    ad_real t = logistic_term(i, x, n, g->L);
    if (g->extra)
        t = ad_add(t, g->extra(i, x, n, g));
    if (i == 0)
        return t;
    pthread_t self = pthread_self();
    if (pthread_equal(self, g->caller)) {
        atomic_fetch_add(&g->caller_terms, 1);
    } else {
        atomic_fetch_add(&g->helper_terms, 1);
        if (g->on_helper == F_NONFINITE)
            t = ad_add(t, ad_log(ad_mul(-1.0, ad_exp(x[0]))));
        else if (g->on_helper == F_FOREIGN)
            t = ad_add(t, kept);
    }
    if (!atomic_exchange(&g->claimed, 1)) {
        g->keeper = self;
        atomic_store(&g->keeper_known, 1);
        double t0 = seconds_now();
        while (!atomic_load(&g->other_ran) && !atomic_load(&g->timed_out)) {
            if (seconds_now() - t0 > GATE_SECONDS)
                atomic_store(&g->timed_out, 1);
            sched_yield();
        }
    } else if (!atomic_load(&g->other_ran)) {
        while (!atomic_load(&g->keeper_known))
            sched_yield();
        if (!pthread_equal(self, g->keeper))
            atomic_store(&g->other_ran, 1);
    }
    return t;
}

static void gate_reset(gate *g, logistic *L, enum fault_kind kind)
{
    g->L = L;
    g->caller = pthread_self();
    g->on_helper = kind;
    g->extra = NULL;
    atomic_store(&g->claimed, 0);
    atomic_store(&g->keeper_known, 0);
    atomic_store(&g->other_ran, 0);
    atomic_store(&g->timed_out, 0);
    atomic_store(&g->caller_terms, 0);
    atomic_store(&g->helper_terms, 0);
}

/* No waiting: for a call on one thread. */
static void gate_open(gate *g)
{
    atomic_store(&g->claimed, 1);
    atomic_store(&g->keeper_known, 1);
    atomic_store(&g->other_ran, 1);
}

static void gate_check(const gate *g, unsigned threads)
{
    if (atomic_load(&g->timed_out) || !atomic_load(&g->other_ran) ||
        !atomic_load(&g->helper_terms)) {
        print_error("threads = %u: %d terms on the caller, %d on the library's threads%s\n",
                    threads, atomic_load(&g->caller_terms), atomic_load(&g->helper_terms),
                    atomic_load(&g->timed_out) ? ", timed out" : "");
        fail();
    }
}

static const unsigned gated_counts[] = {2, 3, 8};
#define NGATED (sizeof gated_counts / sizeof gated_counts[0])

/* Chunks on both sides: the same bits as on one thread. */
static void test_chunks_on_library_threads(void **state)
{
    err_fixture e;
    gate g;
    result r;
    (void)state;
    fixture_open(&e);
    result_alloc(&r, LOG_D);
    for (int hvp = 0; hvp < 2; hvp++)
        for (size_t k = 0; k < NGATED; k++) {
            unsigned th = gated_counts[k];
            gate_reset(&g, &e.L, F_NONE);
            status_is("gated", hvp ? "ad_hvp_sum" : "ad_gradient_sum", th,
                      call_sum(hvp, gate_term, &g, ERR_TERMS, LOG_D, e.x, e.v, &r, th), AD_OK);
            gate_check(&g, th);
            check_same_result("gated", hvp, th, &r, &e.ref[hvp], LOG_D);
        }
    result_free(&r);
    fixture_close(&e);
}

/* The failing chunk on a library thread (the caller's terms never fail,
 * and a library thread runs some): its status, the caller's checks
 * applied there, and its fault handed to the caller's ad_last_fault. */
static void test_failure_on_library_thread(void **state)
{
    err_fixture e;
    gate g;
    result r;
    double one = 1.0, gr;
    (void)state;
    fixture_open(&e);
    result_alloc(&r, LOG_D);
    assert_same(gradient_ok(keep_x0, NULL, 1, &one, &gr), 1.0);
    for (int hvp = 0; hvp < 2; hvp++)
        for (size_t k = 0; k < NGATED; k++) {
            unsigned th = gated_counts[k];
            const char *call = hvp ? "ad_hvp_sum" : "ad_gradient_sum";
            /* non-finite, checks on */
            static const char label[] = "the caller's label";
            gate_reset(&g, &e.L, F_NONFINITE);
            unsigned was = ad_set_checks(AD_CHECK_FINITE);
            ad_where(label);
            ad_status s = call_sum(hvp, gate_term, &g, ERR_TERMS, LOG_D, e.x, e.v, &r, th);
            ad_where(NULL);
            ad_set_checks(was);
            gate_check(&g, th);
            status_is("non-finite on a library thread", call, th, s, AD_ENONFINITE);
            check_all_nan_result("non-finite on a library thread", hvp, &r, LOG_D);
            ad_fault fault;
            memset(&fault, 0, sizeof fault);
            status_is("non-finite on a library thread", "ad_last_fault", th,
                      ad_last_fault(&fault), AD_OK);
            if (!fault.op || strcmp(fault.op, "log") != 0 || fault.phase != AD_PHASE_RECORD ||
                fault.label != label) {
                print_error("threads = %u: fault op %s, phase %d, label %s\n", th,
                            fault.op ? fault.op : "(null)", (int)fault.phase,
                            fault.label ? fault.label : "(null)");
                fail();
            }
            good_call_after("after a non-finite value on a library thread", &e, hvp, th);
            /* the same, checks off: the library's threads did not keep
             * them (NaN, no error) */
            gate_reset(&g, &e.L, F_NONFINITE);
            s = call_sum(hvp, gate_term, &g, ERR_TERMS, LOG_D, e.x, e.v, &r, th);
            gate_check(&g, th);
            status_is("non-finite on a library thread, checks off", call, th, s, AD_OK);
            assert_nan(r.fx);
            /* a foreign value */
            gate_reset(&g, &e.L, F_FOREIGN);
            s = call_sum(hvp, gate_term, &g, ERR_TERMS, LOG_D, e.x, e.v, &r, th);
            gate_check(&g, th);
            status_is("foreign value on a library thread", call, th, s, AD_EFOREIGN);
            check_all_nan_result("foreign value on a library thread", hvp, &r, LOG_D);
            good_call_after("after a foreign value on a library thread", &e, hvp, th);
        }
    result_free(&r);
    fixture_close(&e);
}

/* An inner sum of 161 terms of about 120 records each, whose chunks (and
 * so its bits) follow the budget of the thread that runs it: 1 term a
 * chunk at 64 bytes, 10 at the default. */
static ad_real chain_term(size_t k, const ad_real *u, size_t n, void *ctx)
{
    ad_real p = ad_mul(u[0], 1.0 + 1e-3 * (double)k);
    (void)n, (void)ctx;
    for (int j = 0; j < 60; j++)
        p = ad_add(ad_mul(p, 0.999), u[1]);
    return p;
}

#define CHAIN_TERMS 161
#define TINY_BUDGET ((size_t)64)

static ad_real inner_chain_sum(size_t i, const ad_real *x, size_t n, void *ctx)
{
    double u[2] = {ad_value(x[i % n]), ad_value(x[(i + 1) % n])}, f, g[2];
    (void)ctx;
    if (ad_gradient_sum(chain_term, NULL, CHAIN_TERMS, 2, u, &f, g, 1) != AD_OK)
        return ad_const(NAN);
    return ad_add(ad_mul(f, x[i % n]), ad_mul(g[1], x[(i + 1) % n]));
}

/* The caller's settings hold where the library's threads run its chunks:
 * its rounding mode (the pool's threads were made under another), and its
 * chunk budget for sums its terms make.  Either way the bits of one
 * thread. */
static void test_caller_settings_on_library_threads(void **state)
{
    enum { OUTER = 40 };
    err_fixture e;
    gate g;
    result r, ref, nearest;
    (void)state;
    fixture_open(&e);
    result_alloc(&r, LOG_D);
    result_alloc(&ref, LOG_D);
    result_alloc(&nearest, LOG_D);
    for (size_t k = 0; k < NGATED; k++) { /* the pool made, under round to nearest */
        gate_reset(&g, &e.L, F_NONE);
        assert_int_equal(call_sum(0, gate_term, &g, ERR_TERMS, LOG_D, e.x, e.v, &r,
                                  gated_counts[k]), AD_OK);
        gate_check(&g, gated_counts[k]);
    }
    for (int hvp = 0; hvp < 2; hvp++) {
        const char *call = hvp ? "ad_hvp_sum" : "ad_gradient_sum";
        int was = fegetround();
        assert_int_equal(fesetround(FE_UPWARD), 0);
        ad_status s = call_sum(hvp, logistic_term, &e.L, ERR_TERMS, LOG_D, e.x, e.v, &ref, 1);
        for (size_t k = 0; k < NGATED && s == AD_OK; k++) {
            gate_reset(&g, &e.L, F_NONE);
            status_is("rounding upward", call, gated_counts[k],
                      call_sum(hvp, gate_term, &g, ERR_TERMS, LOG_D, e.x, e.v, &r,
                               gated_counts[k]), AD_OK);
            gate_check(&g, gated_counts[k]);
            check_same_result("rounding upward", hvp, gated_counts[k], &r, &ref, LOG_D);
        }
        fesetround(was);
        assert_int_equal(s, AD_OK);
        assert_true(ref.fx != e.ref[hvp].fx); /* the mode made a difference */

        /* the budget: the inner sums' bits differ with it on one thread */
        size_t old = ad_set_sum_chunk_bytes(0);
        gate_reset(&g, &e.L, F_NONE);
        gate_open(&g);
        g.extra = inner_chain_sum;
        assert_int_equal(call_sum(hvp, gate_term, &g, OUTER, LOG_D, e.x, e.v, &nearest, 1),
                         AD_OK);
        ad_set_sum_chunk_bytes(TINY_BUDGET);
        assert_int_equal(call_sum(hvp, gate_term, &g, OUTER, LOG_D, e.x, e.v, &ref, 1), AD_OK);
        assert_true(ref.fx != nearest.fx);
        for (size_t k = 0; k < NGATED; k++) {
            gate_reset(&g, &e.L, F_NONE);
            g.extra = inner_chain_sum;
            status_is("the caller's budget in nested sums", call, gated_counts[k],
                      call_sum(hvp, gate_term, &g, OUTER, LOG_D, e.x, e.v, &r, gated_counts[k]),
                      AD_OK);
            gate_check(&g, gated_counts[k]);
            check_same_result("the caller's budget in nested sums", hvp, gated_counts[k], &r,
                              &ref, LOG_D);
        }
        ad_set_sum_chunk_bytes(old);
    }
    result_free(&nearest);
    result_free(&ref);
    result_free(&r);
    fixture_close(&e);
}

/* nterms near SIZE_MAX: the chunk count must not wrap (a wrapped count
 * summed term 0 alone and returned AD_OK).  Term 5 fails, in chunk 1. */
static ad_real huge_sum_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    ad_real t = ad_mul(x[0], (double)(i % 7 + 1));
    (void)n, (void)ctx;
    return i == 5 ? ad_add(t, kept) : t;
}

static void test_huge_nterms(void **state)
{
    static const size_t below[] = {1, 15, 100, 10000};
    double one = 1.0, gr, x[1] = {0.5}, v[1] = {1.0}, fx, g[1], hv[1];
    (void)state;
    assert_same(gradient_ok(keep_x0, NULL, 1, &one, &gr), 1.0);
    for (size_t b = 0; b < sizeof below / sizeof below[0]; b++)
        for (size_t k = 0; k < NCOUNTS; k++) {
            unsigned th = thread_counts[k];
            size_t nterms = SIZE_MAX - below[b];
            status_is("SIZE_MAX terms", "ad_gradient_sum", th,
                      ad_gradient_sum(huge_sum_term, NULL, nterms, 1, x, &fx, g, th),
                      AD_EFOREIGN);
            assert_all_nan(fx, g, 1);
            status_is("SIZE_MAX terms", "ad_hvp_sum", th,
                      ad_hvp_sum(huge_sum_term, NULL, nterms, 1, x, v, &fx, g, hv, th),
                      AD_EFOREIGN);
            assert_all_nan(fx, g, 1);
            assert_nan(hv[0]);
        }
}

/* ======================================================================
 * 6. Concurrency
 * ====================================================================== */

static logistic shared_L;
static double shared_x[LOG_D], shared_v[LOG_D];
static result shared_ref[2];
#define SHARED_TERMS 5000
#define WORKER_ROUNDS 6

static void shared_open(void)
{
    uint64_t st = 61;
    logistic_make(&shared_L, SHARED_TERMS, 0, 71);
    fill_uniform(&st, shared_x, LOG_D, -0.5, 0.5);
    fill_uniform(&st, shared_v, LOG_D, -1.0, 1.0);
    size_t old = ad_set_sum_chunk_bytes(SMALL_BUDGET);
    for (int hvp = 0; hvp < 2; hvp++) {
        result_alloc(&shared_ref[hvp], LOG_D);
        assert_int_equal(call_sum(hvp, logistic_term, &shared_L, SHARED_TERMS, LOG_D, shared_x,
                                  shared_v, &shared_ref[hvp], 1), AD_OK);
    }
    ad_set_sum_chunk_bytes(old);
}

static void shared_close(void)
{
    result_free(&shared_ref[0]);
    result_free(&shared_ref[1]);
    logistic_free(&shared_L);
}

/* Calls both entry points and counts differences from the references. */
static void shared_round(worker *w, int round, unsigned threads)
{
    result r;
    double g[LOG_D], hv[LOG_D];
    r.g = g, r.hv = hv;
    for (int hvp = 0; hvp < 2; hvp++) {
        ad_status s = call_sum(hvp, logistic_term, &shared_L, SHARED_TERMS, LOG_D, shared_x,
                               shared_v, &r, threads);
        if (s != AD_OK) {
            worker_fail(w, "round %d: %s", round, ad_strerror(s));
            continue;
        }
        if (!same_double(r.fx, shared_ref[hvp].fx))
            worker_report(w, "fx", round, r.fx, shared_ref[hvp].fx);
        for (size_t j = 0; j < LOG_D; j++) {
            if (!same_double(g[j], shared_ref[hvp].g[j]))
                worker_report(w, "grad", round, g[j], shared_ref[hvp].g[j]);
            if (hvp && !same_double(hv[j], shared_ref[hvp].hv[j]))
                worker_report(w, "hv", round, hv[j], shared_ref[hvp].hv[j]);
        }
    }
}

static void *user_thread_body(void *arg)
{
    worker *w = arg;
    ad_set_sum_chunk_bytes(SMALL_BUDGET);  /* the reference's budget: per thread */
    worker_start(w);
    for (int round = 0; round < WORKER_ROUNDS; round++)
        shared_round(w, round, 2);
    return NULL;
}

/* WORKER_THREADS user threads calling at once, each with threads = 2: one
 * has the library's threads at a time, the others run alone. */
static void test_user_threads(void **state)
{
    (void)state;
    shared_open();
    run_workers(user_thread_body);
    shared_close();
}

static void *short_lived_body(void *arg)
{
    worker *w = arg;
    ad_set_sum_chunk_bytes(SMALL_BUDGET);
    shared_round(w, 0, 2);
    shared_round(w, 1, 0);
    return NULL;
}

/* Calling threads that exit (freeing their tapes) while the library's
 * threads stay; then a call from the main thread. */
static void test_short_lived_callers(void **state)
{
    (void)state;
    shared_open();
    for (int k = 0; k < 3; k++) {
        worker w = {k, NULL, 0, ""};
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, short_lived_body, &w), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        if (w.failures)
            print_error("%d failures, first: %s\n", w.failures, w.first_failure);
        assert_int_equal(w.failures, 0);
    }
    worker w = {99, NULL, 0, ""};
    size_t old = ad_set_sum_chunk_bytes(SMALL_BUDGET);
    shared_round(&w, 0, 2);
    ad_set_sum_chunk_bytes(old);
    if (w.failures)
        print_error("%d failures, first: %s\n", w.failures, w.first_failure);
    assert_int_equal(w.failures, 0);
    shared_close();
}

/* A term that calls ad_gradient: the gradient (2 u v, u^2) of u^2 v at
 * u = x_a, v = x_b, constants here; term = g0 x_a + g1 x_b + x_a x_b. */
static ad_real inner_cubic(const ad_real *u, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(ad_mul(u[0], u[0]), u[1]);
}

typedef struct nested_ctx {
    size_t n;
    atomic_int failures;
} nested_ctx;

static ad_real nested_gradient_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    nested_ctx *c = ctx;
    size_t a = i % n, b = (5 * i + 3) % n;
    double u[2] = {ad_value(x[a]), ad_value(x[b])}, f, g[2];
    if (ad_gradient(inner_cubic, NULL, 2, u, &f, g) != AD_OK || f != u[0] * u[0] * u[1])
        atomic_fetch_add(&c->failures, 1);
    return ad_add(ad_add(ad_mul(g[0], x[a]), ad_mul(g[1], x[b])), ad_mul(x[a], x[b]));
}

/* A term that calls ad_gradient_sum (threads = 2) over 5 inner terms
 * (k + 1) u_0 u_1^k at u = (x_a, x_b): on a library thread, or on a
 * caller whose call has the library's threads, it runs alone. */
static ad_real inner_term(size_t k, const ad_real *u, size_t n, void *ctx)
{
    ad_real p = u[0];
    (void)n, (void)ctx;
    for (size_t j = 0; j < k; j++)
        p = ad_mul(p, u[1]);
    return ad_mul((double)(k + 1), p);
}

static ad_real nested_sum_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    nested_ctx *c = ctx;
    size_t a = i % n, b = (5 * i + 3) % n;
    double u[2] = {ad_value(x[a]), ad_value(x[b])}, f, g[2];
    if (ad_gradient_sum(inner_term, NULL, 5, 2, u, &f, g, 2) != AD_OK)
        atomic_fetch_add(&c->failures, 1);
    /* the inner sum, analytic */
    double F = 0.0, G0 = 0.0, G1 = 0.0;
    for (int k = 0; k < 5; k++) {
        F += (k + 1) * u[0] * pow(u[1], k);
        G0 += (k + 1) * pow(u[1], k);
        G1 += k > 0 ? (k + 1) * k * u[0] * pow(u[1], k - 1) : 0.0;
    }
    if (fabs(f - F) > 1e-13 * F || fabs(g[0] - G0) > 1e-13 * G0 || fabs(g[1] - G1) > 1e-13 * G1)
        atomic_fetch_add(&c->failures, 1);
    return ad_add(ad_mul(f, x[a]), ad_mul(g[1], x[b]));
}

static void test_nested_calls(void **state)
{
    enum { N = 10, TERMS = 600 };
    double x[N], v[N];
    uint64_t st = 13;
    (void)state;
    fill_uniform(&st, x, N, 0.5, 1.5);
    fill_uniform(&st, v, N, 0.5, 1.5);
    nested_ctx c = {N, 0};
    size_t old = ad_set_sum_chunk_bytes(SMALL_BUDGET);
    problem p = {"nested ad_gradient in the terms", nested_gradient_term, &c, TERMS, N, x, v,
                 NULL, NULL};
    double g[N], hv[N];
    check_sum(&p, g, hv);
    assert_int_equal(atomic_load(&c.failures), 0);
    /* analytic: d/dx_a = g0 + x_b, d/dx_b = g1 + x_a, the g constants */
    double want[N] = {0};
    for (size_t i = 0; i < TERMS; i++) {
        size_t a = i % N, b = (5 * i + 3) % N;
        want[a] += 2.0 * x[a] * x[b] + x[b];
        want[b] += x[a] * x[a] + x[a];
    }
    for (size_t j = 0; j < N; j++)
        near_entry("grad (analytic)", p.name, j, g[j], want[j], 0.0, RTOL);

    p.name = "nested ad_gradient_sum in the terms";
    p.term = nested_sum_term;
    check_sum(&p, g, hv);
    assert_int_equal(atomic_load(&c.failures), 0);
    /* analytic: d/dx_a = F, d/dx_b = dF/du_1, the inner sum's (constants) */
    for (size_t j = 0; j < N; j++)
        want[j] = 0.0;
    for (size_t i = 0; i < TERMS; i++) {
        size_t a = i % N, b = (5 * i + 3) % N;
        for (int k = 0; k < 5; k++) {
            want[a] += (k + 1) * x[a] * pow(x[b], k);
            want[b] += k > 0 ? (k + 1) * k * x[a] * pow(x[b], k - 1) : 0.0;
        }
    }
    for (size_t j = 0; j < N; j++) {
        near_entry("grad (analytic)", p.name, j, g[j], want[j], 0.0, RTOL);
        near_entry("hv (analytic)", p.name, j, hv[j], 0.0, 0.0, RTOL);
    }
    ad_set_sum_chunk_bytes(old);
}

/* Terms that read no input: n = 0, x and grad (v, hv) NULL, as a pointer
 * to an array of length 0 may be (docs/api.md, "Pointers"); fx the sum.
 * Last in the list: under -fno-sanitize-recover a UBSan report here ends
 * the run. */
static ad_real constant_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    (void)x, (void)n, (void)ctx;
    return ad_const((double)(i + 1));
}

static ad_real reciprocal_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    (void)x, (void)n, (void)ctx;
    return ad_const(1.0 / (double)(i + 1));
}

static void test_no_inputs(void **state)
{
    (void)state;
    never_term_called = 0;
    for (size_t k = 0; k < NCOUNTS; k++) {
        double fx = -1.0;
        assert_int_equal(ad_gradient_sum(never_term, NULL, 0, 0, NULL, &fx, NULL,
                                         thread_counts[k]), AD_OK);
        assert_same(fx, 0.0);
        fx = -1.0;
        assert_int_equal(ad_hvp_sum(never_term, NULL, 0, 0, NULL, NULL, &fx, NULL, NULL,
                                    thread_counts[k]), AD_OK);
        assert_same(fx, 0.0);
        fx = -1.0;
        assert_int_equal(ad_gradient_sum(constant_term, NULL, 100, 0, NULL, &fx, NULL,
                                         thread_counts[k]), AD_OK);
        assert_same(fx, 5050.0);
        fx = -1.0;
        assert_int_equal(ad_hvp_sum(constant_term, NULL, 100, 0, NULL, NULL, &fx, NULL, NULL,
                                    thread_counts[k]), AD_OK);
        assert_same(fx, 5050.0);
    }
    /* ad_hvp_sum is ad_hvp_sum with v NULL too: the same chunks (a third
     * of the budget), so the same bits as with v given */
    size_t old = ad_set_sum_chunk_bytes(8192);
    double v0 = 0.0, fx_null = -1.0, fx_v = -1.0, fx_grad = -1.0;
    assert_int_equal(ad_hvp_sum(reciprocal_term, NULL, 100000, 0, NULL, NULL, &fx_null, NULL,
                                NULL, 1), AD_OK);
    assert_int_equal(ad_hvp_sum(reciprocal_term, NULL, 100000, 0, NULL, &v0, &fx_v, NULL, NULL,
                                1), AD_OK);
    assert_int_equal(ad_gradient_sum(reciprocal_term, NULL, 100000, 0, NULL, &fx_grad, NULL, 1),
                     AD_OK);
    ad_set_sum_chunk_bytes(old);
    assert_same(fx_null, fx_v);
    assert_true(fx_grad != fx_v); /* the chunks differ: the comparison can fail */
    assert_int_equal(never_term_called, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_sum),
        cmocka_unit_test(test_one_term),
        cmocka_unit_test(test_fewer_terms_than_threads),
        cmocka_unit_test(test_many_terms_logistic),
        cmocka_unit_test(test_many_terms_varied),
        cmocka_unit_test(test_many_parameters),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_one_chunk_tape),
        cmocka_unit_test(test_foreign_value),
        cmocka_unit_test(test_nonfinite_value),
        cmocka_unit_test(test_first_failure_wins),
        cmocka_unit_test(test_external_in_term),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_invalid_arguments),
        cmocka_unit_test(test_nesting),
        cmocka_unit_test(test_tape_limit_not_applied),
        cmocka_unit_test(test_chunks_on_library_threads),
        cmocka_unit_test(test_failure_on_library_thread),
        cmocka_unit_test(test_caller_settings_on_library_threads),
        cmocka_unit_test(test_huge_nterms),
        cmocka_unit_test(test_user_threads),
        cmocka_unit_test(test_short_lived_callers),
        cmocka_unit_test(test_nested_calls),
        cmocka_unit_test(test_no_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
