/* Several threads differentiating at once, each checking its own results
 * against analytic gradients.  Each thread has its own tapes; a mix-up would
 * show as wrong numbers, a crash, or a sanitizer report.
 *
 * Workers never call cmocka's assertions (those longjmp within one thread):
 * they count failures and keep the first message for the main thread.
 * POSIX threads rather than C11 ones: ThreadSanitizer (gcc 12) does not
 * intercept thrd_create and crashes in the new thread. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>

#include "check.h"

/* Whether malloc's own totals can show the tapes: glibc 2.33 or later, and
 * no sanitizer whose allocator bypasses glibc's. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define SANITIZER_MALLOC 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZER_MALLOC 1
#endif
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33)) && \
    !defined(SANITIZER_MALLOC)
#define HAVE_HEAP_TOTALS 1
#include <malloc.h>
#endif

#define THREADS 4
#define ROUNDS 150
#define MAX_N 40000
#define BIG_N 40000   /* 80000 to 160000 records: two or three chunks */

enum family { QUADRATIC, LOG_SUM_EXP, SIN_COS_RING, NESTED, FAMILIES };

/* ---- the objectives ---- */

/* sum_i (i+1) x_i^2 */
static ad_real quadratic(const ad_real *x, size_t n, void *ctx)
{
    ad_real s = ad_const(0.0);
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        s = ad_add(s, ad_mul((double)(i + 1), ad_mul(x[i], x[i])));
    return s;
}

/* log sum_i exp x_i */
static ad_real log_sum_exp(const ad_real *x, size_t n, void *ctx)
{
    ad_real s = ad_const(0.0);
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        s = ad_add(s, ad_exp(x[i]));
    return ad_log(s);
}

/* sum_i sin x_i cos x_(i+1 mod n) */
static ad_real sin_cos_ring(const ad_real *x, size_t n, void *ctx)
{
    ad_real s = ad_const(0.0);
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        s = ad_add(s, ad_mul(ad_sin(x[i]), ad_cos(x[(i + 1) % n])));
    return s;
}

/* q(x) + sum_i g_i x_i with q the quadratic and g its gradient at x, from
 * an inner ad_gradient call, entering as constants: gradient 2 g. */
typedef struct nested_scratch {
    double *x, *g;
    ad_status status;
} nested_scratch;

static ad_real nested(const ad_real *x, size_t n, void *ctx)
{
    nested_scratch *s = ctx;
    double q;
    for (size_t i = 0; i < n; i++)
        s->x[i] = ad_value(x[i]);
    s->status = ad_gradient(quadratic, NULL, n, s->x, &q, s->g);
    ad_real sum = quadratic(x, n, NULL);
    for (size_t i = 0; i < n; i++)
        sum = ad_add(sum, ad_mul(s->g[i], x[i]));
    return sum;
}

/* ---- the analytic gradients ---- */

/* want[i] and, in scale[i], the sum of the magnitudes of the terms that make
 * it up: the rounding error of either computation is relative to that. */
static void analytic(enum family fam, size_t n, const double *x, double *want, double *scale)
{
    double total = 0.0;
    if (fam == LOG_SUM_EXP)
        for (size_t i = 0; i < n; i++)
            total += exp(x[i]);
    for (size_t i = 0; i < n; i++) {
        double next = x[(i + 1) % n], prev = x[(i + n - 1) % n];
        double t1, t2 = 0.0;
        switch (fam) {
        case QUADRATIC: t1 = 2.0 * (double)(i + 1) * x[i]; break;
        case NESTED: t1 = 4.0 * (double)(i + 1) * x[i]; break;
        case LOG_SUM_EXP: t1 = exp(x[i]) / total; break;
        default:
            t1 = cos(x[i]) * cos(next);
            t2 = -sin(prev) * sin(x[i]);
            break;
        }
        want[i] = t1 + t2;
        scale[i] = fabs(t1) + fabs(t2);
    }
}

/* ---- the workers ---- */

typedef struct worker {
    int index;
    atomic_int *ready;
    int calls, failures;
    char first_failure[160];
    double x[MAX_N], grad[MAX_N], want[MAX_N], scale[MAX_N], scratch_x[MAX_N], scratch_g[MAX_N];
} worker;

static void report(worker *w, const char *what, size_t n, size_t i, double got, double want)
{
    if (w->failures++ == 0)
        snprintf(w->first_failure, sizeof w->first_failure,
                 "thread %d, n=%zu: %s[%zu] = %.17g, expected %.17g", w->index, n, what, i, got, want);
}

static void run_round(worker *w, int round)
{
    static const ad_objective objectives[FAMILIES] = {quadratic, log_sum_exp, sin_cos_ring, nested};
    enum family fam = (enum family)((round + w->index) % FAMILIES);
    size_t n = round % 25 == 7 ? BIG_N : 1 + (size_t)(round * 37 + w->index * 101) % 300;
    uint64_t rng = (uint64_t)(w->index * 1000 + round);
    nested_scratch scratch = {w->scratch_x, w->scratch_g, AD_OK};
    double fx;

    for (size_t i = 0; i < n; i++)
        w->x[i] = rng_uniform(&rng, -3.0, 3.0);
    ad_status s = ad_gradient(objectives[fam], &scratch, n, w->x, &fx, w->grad);
    w->calls++;
    if (s != AD_OK || scratch.status != AD_OK) {
        report(w, "status", n, 0, (double)s, (double)scratch.status);
        return;
    }
    analytic(fam, n, w->x, w->want, w->scale);
    for (size_t i = 0; i < n; i++)
        if (!(fabs(w->grad[i] - w->want[i]) <= 1e-12 * w->scale[i] + 1e-300))
            report(w, "grad", n, i, w->grad[i], w->want[i]);

    ad_tape_stats st = {0};
    if (ad_tape_stats_get(&st) != AD_OK || st.inputs != n)
        report(w, "stats.inputs", n, 0, (double)st.inputs, (double)n);
}

static void *work(void *arg)
{
    worker *w = arg;
    atomic_fetch_add(w->ready, 1);
    while (atomic_load(w->ready) < THREADS)  /* start together */
        sched_yield();
    for (int round = 0; round < ROUNDS; round++)
        run_round(w, round);
    return NULL;
}

static void run_workers(void)
{
    static worker workers[THREADS];
    atomic_int ready = 0;
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        workers[i].index = i;
        workers[i].ready = &ready;
        workers[i].calls = workers[i].failures = 0;
        assert_int_equal(pthread_create(&t[i], NULL, work, &workers[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < THREADS; i++) {
        if (workers[i].failures)
            print_error("%d failures, first: %s\n", workers[i].failures, workers[i].first_failure);
        assert_int_equal(workers[i].failures, 0);
        assert_int_equal(workers[i].calls, ROUNDS);
    }
}

static void test_concurrent_gradients(void **state)
{
    (void)state;
    run_workers();
}

/* The tape limit belongs to the thread that set it. */
static ad_real three_records(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_exp(ad_sin(ad_cos(x[0])));
}

static void test_limit_is_per_thread(void **state)
{
    double x = 1.0, fx, g;
    (void)state;
    ad_set_tape_limit(2);
    run_workers();
    assert_int_equal(ad_gradient(three_records, NULL, 1, &x, &fx, &g), AD_ERANGE);
    ad_set_tape_limit(0);
    gradient_ok(three_records, NULL, 1, &x, &g);
}

#ifdef HAVE_HEAP_TOTALS
/* A thread's tapes are freed when it exits.  LeakSanitizer does not report
 * tapes lost at thread exit (checked with a deliberately leaking build), so
 * this test compares malloc's own totals instead. */
static size_t heap_in_use(void)
{
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
}

/* x_0 x_1^steps, one record per step. */
static ad_real mul_chain_for_exit(const ad_real *x, size_t n, void *ctx)
{
    const long *steps = ctx;
    ad_real s = x[0];
    (void)n;
    for (long k = 0; k < *steps; k++)
        s = ad_mul(s, x[1]);
    return s;
}

static void *record_and_exit(void *arg)
{
    size_t *in_use_while_alive = arg;
    long steps = 400000;  /* seven chunks, about 10 MB */
    const double x[2] = {1.0, 1.0};
    double fx, g[2];
    if (ad_gradient(mul_chain_for_exit, &steps, 2, x, &fx, g) == AD_OK)
        *in_use_while_alive = heap_in_use();
    return NULL;
}

static void test_thread_exit_frees_tapes(void **state)
{
    size_t in_use_while_alive = 0;
    pthread_t t;
    (void)state;
    size_t before = heap_in_use();
    assert_int_equal(pthread_create(&t, NULL, record_and_exit, &in_use_while_alive), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_true(in_use_while_alive > before + 8000000);  /* the totals do see the tape */
    assert_true(heap_in_use() < before + 1000000);
}
#define THREAD_EXIT_TEST cmocka_unit_test(test_thread_exit_frees_tapes),
#else
#define THREAD_EXIT_TEST
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_gradients),
        cmocka_unit_test(test_limit_is_per_thread),
        THREAD_EXIT_TEST
    };
    return cmocka_run_group_tests_name("threads", tests, NULL, NULL);
}
