/* Tests on several threads at once: WORKER_THREADS workers start together,
 * so that their recordings overlap, and count their failures instead of
 * asserting (a cmocka assert on a worker thread would jump across threads);
 * run_workers joins them and fails the test if any worker failed.
 * Header-only; include after check.h. */
#ifndef DUALREV_TESTS_WORKERS_H
#define DUALREV_TESTS_WORKERS_H

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>

#define WORKER_THREADS 4

typedef struct worker {
    int index;
    atomic_int *ready;
    int failures;
    char first_failure[200];
} worker;

/* Counts a failure; the first one's message is kept, after the thread's
 * number. */
static inline void worker_fail(worker *w, const char *fmt, ...)
{
    if (w->failures++)
        return;
    int len = snprintf(w->first_failure, sizeof w->first_failure, "thread %d, ", w->index);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->first_failure + len, sizeof w->first_failure - (size_t)len, fmt, ap);
    va_end(ap);
}

/* The common failure: a number against the one expected. */
static inline void worker_report(worker *w, const char *what, int round, double got, double want)
{
    worker_fail(w, "round %d: %s = %.17g, expected %.17g", round, what, got, want);
}

/* Returns once every worker has reached it. */
static inline void worker_start(worker *w)
{
    atomic_fetch_add(w->ready, 1);
    while (atomic_load(w->ready) < WORKER_THREADS)
        sched_yield();
}

/* Runs body(&worker) on WORKER_THREADS threads, then asserts that none
 * failed, printing the first failure of each that did. */
static inline void run_workers(void *(*body)(void *))
{
    static worker workers[WORKER_THREADS];
    atomic_int ready = 0;
    pthread_t t[WORKER_THREADS];
    for (int i = 0; i < WORKER_THREADS; i++) {
        workers[i].index = i;
        workers[i].ready = &ready;
        workers[i].failures = 0;
        assert_int_equal(pthread_create(&t[i], NULL, body, &workers[i]), 0);
    }
    for (int i = 0; i < WORKER_THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < WORKER_THREADS; i++) {
        if (workers[i].failures)
            print_error("%d failures, first: %s\n", workers[i].failures, workers[i].first_failure);
        assert_int_equal(workers[i].failures, 0);
    }
}

#endif
