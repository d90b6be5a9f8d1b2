/* sum-bench: ad_gradient_sum, the gradient of a sum by chunks of terms on
 * the library's threads, against ad_gradient of the sum written out in one
 * objective, for code as a user writes it:
 *
 *   - ADBench GMM (gmm_10k_d10_K25, gmm_1k_d64_K100), scalar and primitive
 *     versions (gmm/gmm_objective.h).  Term i < N is point i's
 *     log-likelihood part, evaluated by the objective's own source on the
 *     one point [i, i + 1); term N is everything that does not depend on the
 *     points (the constant, -N lse(alpha), the Wishart prior).  So the sum
 *     of the terms is ADBench's objective, and each term recomputes what the
 *     one-tape objective computes once for all points (exp of the log
 *     diagonals, their sums; in the primitive version the recorded
 *     matrices): a term is all a term function can see.
 *     A labelled variant (--batch) makes a term of 100 points in the
 *     primitive version, which then records its matrices once per term
 *     instead of once per point.
 *   - logistic regression, 10^6 synthetic rows (fixed seed), term i =
 *     log(1 + exp(-y_i x_i.w)) written straightforwardly.
 *
 * Each configuration runs in a child process of its own (fork), so that its
 * peak resident memory (VmHWM; ru_maxrss from wait4 beside it) is its own;
 * an idle child, forked from the same parent with the same data, gives the
 * baseline subtracted.  The parent never records anything, so no tape of
 * its own is inherited.  In the child: one call to warm up (it reserves the
 * tapes: its time is shown as "first", which for a tape of gigabytes is
 * mostly the kernel zeroing pages), then --reps calls timed one by one, the
 * median reported, as in an optimiser's loop, which keeps the tapes.
 *
 * Configurations: ad_gradient_sum on 1 and 2 threads at the default chunk
 * budget (the headline) and at other budgets (--budgets-kib, labelled);
 * ad_gradient of the whole sum written out (the same terms in one
 * objective); for GMM, ad_gradient of ADBench's one-tape objective as well
 * (gmm_objective_ad over all points); and a diagnostic: the same chunks on
 * two threads of the benchmark's own, each adding into its own arrays in
 * whatever order the chunks finish (no ordered addition), which bounds
 * what two threads can do on this machine.
 *
 * A whole-sum gradient whose tape (32 bytes per record, docs/api.md
 * "Costs", estimated from term 0's records) would not fit in --mem-limit-gb
 * or 80% of the available memory is not run: it is measured on the first
 * 100 points and scaled by N / 100, and said so.  On gmm_1k_d64_K100 the
 * 100-point run is made anyway, so that the scaling can be seen against
 * the full run.
 *
 * Checks (exit status 1 if one fails): every GMM gradient against ADBench's
 * reference (as gmm-bench: objective 1e-12, gradient 1e-9 relative); every
 * ad_gradient_sum result against the whole-sum gradient (1e-12 relative,
 * each entry against the largest magnitude of the gradient; the largest
 * relative error per entry is printed too); 1 and 2 threads the same bits.
 *
 * Where two threads' time goes: the benchmark's own pthread_cond_wait
 * (below) adds up the time the library's threads wait for a chunk's turn
 * in the ordered addition and for the helper at the end ("waits per call").
 *
 * The machine's other work is measured during each configuration's timed
 * calls (/proc/stat; "others" in the table): a configuration waits for a
 * quiet second before it starts and is run again (--retries, default 3)
 * when others used more than a quarter of a CPU meanwhile.
 *
 * Usage: sum-bench [--reps N] [--mem-limit-gb G] [--budgets-kib K,K,..]
 *                  [--rows N] [--features N] [--only gmm|logistic]
 *                  [--skip-d64] [--no-diagnostic] [--max-wait S] [--retries N]
 *                  [--batch B] [--set NAME] [DIR]
 * --batch B: the labelled variant of the primitive version with B points
 * per term (default 100; 0 leaves it out); --set NAME: only that GMM
 * data set.
 * DIR holds ADBench's data/ and reference/ (default ../shared/adbench
 * from the repository root). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "gmm.h"
#include "isolate.h"
#include "timer.h"

#define MAX_REPS 51
#define MAX_BUDGETS 8
#define DEFAULT_BUDGET ((size_t)1 << 20)
#define RTOL_F 1e-12     /* against ADBench's reference, as gmm-bench */
#define RTOL_GRAD 1e-9
#define RTOL_WHOLE 1e-12 /* ad_gradient_sum against ad_gradient of the whole sum */
#define ESTIMATE_POINTS 100
#define QUIET_CPUS 0.25  /* other work on the machine that makes a run count as disturbed */

/* ================= the problems, as a user writes them ================= */

typedef enum family { FAM_GMM, FAM_LOGISTIC } family;

typedef struct logistic_data {
    size_t rows, features;
    double *x; /* rows x features */
    double *y; /* -1 or +1 */
} logistic_data;

typedef struct problem {
    char name[80];
    family fam;
    gmm_problem gmm;          /* its n may be cut to a subset of the loaded points */
    gmm_version version;
    size_t per_term;          /* points per term (1: term i is point i) */
    const gmm_reference *ref; /* ADBench's gradient, or NULL */
    logistic_data lr;
    ad_term term;
    size_t n, nterms;         /* inputs, terms */
    const double *x;          /* where the gradient is taken */
} problem;

/* ---- GMM ---- */

/* The objective's scratch, one per thread: terms run on several threads at
 * once and must write nothing shared. */
static _Thread_local gmm_work tl_work;
static _Thread_local const gmm_problem *tl_work_for;

static gmm_work *thread_work(const gmm_problem *p)
{
    if (tl_work_for != p) {
        if (tl_work_for)
            gmm_work_free(&tl_work);
        tl_work_for = gmm_work_init(&tl_work, p) == 0 ? p : NULL;
    }
    return tl_work_for ? &tl_work : NULL;
}

/* Term i < N: point i's log-likelihood part; term N: the rest.  (With
 * per_term = B > 1, a labelled variant: term i < ceil(N / B) is points
 * [iB, iB + B), the last term the rest.) */
static ad_real gmm_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    const problem *pb = ctx;
    size_t N = pb->gmm.n, B = pb->per_term, last = pb->nterms - 1;
    size_t i0 = i < last ? i * B : 0, i1 = i < last ? (i0 + B < N ? i0 + B : N) : 0;
    gmm_work *w = thread_work(&pb->gmm);
    if (!w)
        return ad_const(NAN); /* out of memory: the checks fail */
    gmm_eval e = {&pb->gmm, w, pb->version, i0, i1, i == last};
    return gmm_objective_ad(x, n, &e);
}

/* ADBench's objective as one tape: what is common to the points is
 * computed once. */
static ad_real gmm_whole_adbench(const ad_real *x, size_t n, void *ctx)
{
    const problem *pb = ctx;
    gmm_work *w = thread_work(&pb->gmm);
    if (!w)
        return ad_const(NAN);
    gmm_eval e = {&pb->gmm, w, pb->version, 0, pb->gmm.n, 1};
    return gmm_objective_ad(x, n, &e);
}

/* ---- logistic regression ---- */

static ad_real logistic_term(size_t i, const ad_real *w, size_t n, void *ctx)
{
    const problem *pb = ctx;
    const double *xi = pb->lr.x + i * n;
    ad_real z = ad_mul(w[0], xi[0]);
    for (size_t j = 1; j < n; j++)
        z = ad_add(z, ad_mul(w[j], xi[j]));
    return ad_log(ad_add(1.0, ad_exp(ad_mul(-pb->lr.y[i], z))));
}

/* SplitMix64: the data do not depend on the C library's rand(). */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static double next_unit(uint64_t *s) /* [0, 1) */
{
    return (double)(next_u64(s) >> 11) * 0x1.0p-53;
}

/* Features uniform on [-1, 1), labels from a hidden weight vector with 10%
 * flipped; the gradient is taken at a point between 0 and the hidden one. */
static int make_logistic(problem *pb, size_t rows, size_t features, double *w0)
{
    uint64_t s = UINT64_C(20240607);
    logistic_data *d = &pb->lr;
    double *w_true = malloc(features * sizeof *w_true);
    d->rows = rows;
    d->features = features;
    d->x = malloc(rows * features * sizeof *d->x);
    d->y = malloc(rows * sizeof *d->y);
    if (!w_true || !d->x || !d->y) {
        free(w_true);
        return -1;
    }
    for (size_t j = 0; j < features; j++) {
        w_true[j] = 4.0 * next_unit(&s) - 2.0;
        w0[j] = 0.5 * w_true[j] + 0.2 * (next_unit(&s) - 0.5);
    }
    for (size_t i = 0; i < rows; i++) {
        double z = 0.0;
        for (size_t j = 0; j < features; j++) {
            d->x[i * features + j] = 2.0 * next_unit(&s) - 1.0;
            z += w_true[j] * d->x[i * features + j];
        }
        d->y[i] = (z >= 0.0) == (next_unit(&s) >= 0.1) ? 1.0 : -1.0;
    }
    free(w_true);
    snprintf(pb->name, sizeof pb->name, "logistic %zu x %zu", rows, features);
    pb->fam = FAM_LOGISTIC;
    pb->term = logistic_term;
    pb->n = features;
    pb->nterms = rows;
    pb->x = w0;
    pb->ref = NULL;
    return 0;
}

/* ---- sums of terms ---- */

/* Terms [i0, i1) summed in order: the whole sum, or a chunk. */
typedef struct span {
    const problem *pb;
    size_t i0, i1;
} span;

static ad_real span_sum(const ad_real *x, size_t n, void *ctx)
{
    const span *sp = ctx;
    void *tctx = (void *)(uintptr_t)sp->pb; /* ad_term's ctx is not const */
    ad_real s = sp->pb->term(sp->i0, x, n, tctx);
    for (size_t i = sp->i0 + 1; i < sp->i1; i++)
        s = ad_add(s, sp->pb->term(i, x, n, tctx));
    return s;
}

/* ================= what is measured, in a child ================= */

typedef enum method { M_IDLE, M_SUM, M_WHOLE, M_ADBENCH, M_SPLIT } method;

typedef struct config {
    method m;
    unsigned threads;
    size_t budget; /* chunk bytes (M_SUM, M_SPLIT) */
    int reps;
} config;

typedef struct result {
    int ran;
    ad_status status;
    double fx;
    double median_ns, min_ns, max_ns;
    int reps;
    double cpus;        /* process CPU time over wall time, timed calls */
    double others;      /* CPUs the rest of the machine used meanwhile */
    double steal;       /* CPUs stolen by the hypervisor meanwhile */
    double wait_turn;   /* diagnostic: seconds per call spent in the library's */
    double wait_end;    /* condition waits: for a chunk's turn / for the helpers */
    size_t term0_records; /* term 0's records as lib/drivers/sum.c counts them (+1) */
    double term0_ns;      /* the gradient of term 0 alone: bounds the sizing recording */
    double first_ns;      /* the warm-up call */
    ad_tape_stats stats;
    long hwm_kb, maxrss_kb;
} result;

/* ---- where the time goes: the library's condition waits ----
 *
 * The benchmark defines pthread_cond_wait, which the shared library's calls
 * reach before libc's, and adds up the time spent in it during timed calls:
 * on the job's turn_cv (ordered addition, put()) or on the pool's idle
 * condition (the caller waiting for helpers at the end).  The job lives on
 * the caller's stack, near `stack_mark`; the pool's conditions are static.
 * Waits of idle pool threads between calls are not counted (`counting`). */
static atomic_int counting;
static atomic_uintptr_t stack_mark;
static atomic_llong waited_turn_ns, waited_end_ns;

typedef int (*cond_wait_fn)(pthread_cond_t *, pthread_mutex_t *);

int pthread_cond_wait(pthread_cond_t *cv, pthread_mutex_t *mu)
{
    static cond_wait_fn real;
    if (!real) {
        void *sym = dlsym(RTLD_NEXT, "pthread_cond_wait");
        memcpy(&real, &sym, sizeof real); /* ISO C has no object-to-function cast */
        if (!real)
            abort();
    }
    if (!atomic_load(&counting))
        return real(cv, mu);
    double t0 = bench_now_ns();
    int rc = real(cv, mu);
    long long dt = (long long)(bench_now_ns() - t0);
    uintptr_t a = (uintptr_t)cv, mark = atomic_load(&stack_mark);
    if (a < mark && mark - a < ((uintptr_t)1 << 20))
        atomic_fetch_add(&waited_turn_ns, dt);
    else
        atomic_fetch_add(&waited_end_ns, dt);
    return rc;
}

/* ---- machine load ---- */

typedef struct cpu_sample {
    double wall_ns, self_s;           /* this process */
    unsigned long long busy, steal;   /* the machine, in clock ticks */
} cpu_sample;

static void sample_cpu(cpu_sample *c)
{
    struct rusage ru;
    unsigned long long v[10] = {0};
    c->wall_ns = bench_now_ns();
    getrusage(RUSAGE_SELF, &ru);
    c->self_s = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
                (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
    FILE *f = fopen("/proc/stat", "r");
    if (f) {
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) != 8)
            memset(v, 0, sizeof v);
        fclose(f);
    }
    /* user nice system idle iowait irq softirq steal */
    c->busy = v[0] + v[1] + v[2] + v[5] + v[6];
    c->steal = v[7];
}

static void load_between(const cpu_sample *a, const cpu_sample *b, result *r)
{
    double tick = (double)sysconf(_SC_CLK_TCK), wall = (b->wall_ns - a->wall_ns) * 1e-9;
    double self = b->self_s - a->self_s;
    r->cpus = self / wall;
    r->others = ((double)(b->busy - a->busy) / tick - self) / wall;
    if (r->others < 0)
        r->others = 0;
    r->steal = (double)(b->steal - a->steal) / tick / wall;
}

/* ---- the diagnostic: the same chunks, added in any order ---- */

typedef struct split_job {
    const problem *pb;
    size_t per, nchunks;
    atomic_size_t next;
    atomic_int failed;
    double *fx, *grad; /* per thread */
} split_job;

typedef struct split_arg {
    split_job *jb;
    unsigned k;
} split_arg;

static void *split_worker(void *arg)
{
    const split_arg *a = arg;
    split_job *jb = a->jb;
    size_t n = jb->pb->n;
    double *g = malloc((n ? n : 1) * sizeof *g), f, *mine = jb->grad + a->k * n;
    if (!g) {
        atomic_store(&jb->failed, 1);
        return NULL;
    }
    for (;;) {
        size_t c = atomic_fetch_add(&jb->next, 1);
        if (c >= jb->nchunks)
            break;
        span sp = {jb->pb, 0, 1};
        if (c > 0) {
            sp.i0 = 1 + (c - 1) * jb->per;
            sp.i1 = jb->pb->nterms - sp.i0 < jb->per ? jb->pb->nterms : sp.i0 + jb->per;
        }
        if (ad_gradient(span_sum, &sp, n, jb->pb->x, &f, g) != AD_OK)
            atomic_store(&jb->failed, 1);
        jb->fx[a->k] += f;
        for (size_t j = 0; j < n; j++)
            mine[j] += g[j];
    }
    free(g);
    return NULL;
}

/* Chunks as lib/drivers/sum.c cuts them (docs/api.md, ad_gradient_sum "How"). */
static size_t terms_per_chunk(size_t term0_records, size_t n, size_t budget, size_t nterms)
{
    size_t fill = budget / sizeof(ad__record) / term0_records;
    size_t floor = (32 * n + term0_records - 1) / term0_records;
    size_t per = fill > floor ? fill : floor, share = (nterms - 1 + 15) / 16;
    if (per > share)
        per = share;
    return per ? per : 1;
}

static size_t chunks_of(size_t nterms, size_t per)
{
    return 1 + (nterms - 1 + per - 1) / per;
}

/* Term 0's records as ad_gradient_sum counts them. */
static size_t term0_records(const problem *pb, double *g)
{
    span sp = {pb, 0, 1};
    ad_tape_stats st;
    double f;
    if (ad_gradient(span_sum, &sp, pb->n, pb->x, &f, g) != AD_OK || ad_tape_stats_get(&st) != AD_OK)
        return 0;
    return st.records + 1;
}

/* The helper thread is made once and kept, as the library keeps its own,
 * so that its tape is warm from one call to the next. */
static pthread_barrier_t split_start, split_done;
static split_arg split_helper_arg;

static void *split_helper(void *unused)
{
    (void)unused;
    for (;;) {
        pthread_barrier_wait(&split_start);
        split_worker(&split_helper_arg);
        pthread_barrier_wait(&split_done);
    }
    return NULL;
}

static ad_status split_gradient(const problem *pb, size_t per, double *fx, double *grad)
{
    static int started;
    split_job jb = {pb, per, chunks_of(pb->nterms, per), 0, 0, NULL, NULL};
    double fxs[2] = {0, 0};
    double *g = calloc(2 * (pb->n ? pb->n : 1), sizeof *g);
    split_arg mine = {&jb, 0};
    if (!g)
        return AD_ENOMEM;
    if (!started) {
        pthread_t th;
        if (pthread_barrier_init(&split_start, NULL, 2) || pthread_barrier_init(&split_done, NULL, 2)
            || pthread_create(&th, NULL, split_helper, NULL)) {
            free(g);
            return AD_ENOMEM;
        }
        started = 1;
    }
    atomic_init(&jb.next, 0);
    atomic_init(&jb.failed, 0);
    jb.fx = fxs;
    jb.grad = g;
    split_helper_arg = (split_arg){&jb, 1};
    pthread_barrier_wait(&split_start);
    split_worker(&mine);
    pthread_barrier_wait(&split_done);
    *fx = fxs[0] + fxs[1];
    for (size_t j = 0; j < pb->n; j++)
        grad[j] = g[j] + g[pb->n + j];
    free(g);
    return atomic_load(&jb.failed) ? AD_ENOMEM : AD_OK;
}

/* ---- one call of a configuration ---- */

static ad_status one_call(const config *c, const problem *pb, size_t per, double *fx,
                          double *grad)
{
    span whole = {pb, 0, pb->nterms};
    void *ctx = (void *)(uintptr_t)pb;
    switch (c->m) {
    case M_SUM:
        return ad_gradient_sum(pb->term, ctx, pb->nterms, pb->n, pb->x, fx, grad, c->threads);
    case M_WHOLE:
        return ad_gradient(span_sum, &whole, pb->n, pb->x, fx, grad);
    case M_ADBENCH:
        return ad_gradient(gmm_whole_adbench, ctx, pb->n, pb->x, fx, grad);
    case M_SPLIT:
        return split_gradient(pb, per, fx, grad);
    default:
        return AD_EINVAL;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void run_config(const config *c, const problem *pb, result *r, double *grad)
{
    double times[MAX_REPS];
    size_t per = 0;
    r->status = AD_OK;
    if (c->m == M_IDLE) {
        r->hwm_kb = bench_proc_kb("/proc/self/status", "VmHWM");
        return;
    }
    ad_set_sum_chunk_bytes(c->budget);
    if (c->m == M_SPLIT) {
        size_t rec = term0_records(pb, grad);
        per = rec ? terms_per_chunk(rec, pb->n, c->budget, pb->nterms) : 1;
    }
    int reps = c->reps;
    cpu_sample a, b;
    for (int rep = -1; rep < reps; rep++) {
        double t0 = bench_now_ns();
        if (rep == 0) {
            sample_cpu(&a);
            atomic_store(&waited_turn_ns, 0);
            atomic_store(&waited_end_ns, 0);
            atomic_store(&counting, 1);
        }
        char here;
        atomic_store(&stack_mark, (uintptr_t)&here);
        ad_status s = one_call(c, pb, per, &r->fx, grad);
        double t = bench_now_ns() - t0;
        if (s != AD_OK) {
            r->status = s;
            return;
        }
        if (rep == -1)
            r->first_ns = t;
        if (rep == -1 && t > 3e9 && reps > 3)
            reps = 3; /* calls of seconds: fewer of them */
        if (rep >= 0)
            times[rep] = t;
    }
    atomic_store(&counting, 0);
    sample_cpu(&b);
    load_between(&a, &b, r);
    r->wait_turn = (double)atomic_load(&waited_turn_ns) * 1e-9 / reps;
    r->wait_end = (double)atomic_load(&waited_end_ns) * 1e-9 / reps;
    r->reps = reps;
    qsort(times, (size_t)reps, sizeof *times, cmp_double);
    r->min_ns = times[0];
    r->max_ns = times[reps - 1];
    r->median_ns = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
    if (ad_tape_stats_get(&r->stats) != AD_OK)
        r->stats = (ad_tape_stats){0};
    r->hwm_kb = bench_proc_kb("/proc/self/status", "VmHWM");
    if (c->m == M_SUM) {
        /* after the peak was read: term 0's tape is smaller than a chunk's */
        double *g = malloc((pb->n ? pb->n : 1) * sizeof *g);
        double t0 = bench_now_ns();
        r->term0_records = g ? term0_records(pb, g) : 0;
        r->term0_ns = bench_now_ns() - t0;
        free(g);
    }
}

typedef struct {
    const config *c;
    const problem *pb;
    result *r;
    double *grad;
} child_job;

static void child_run(void *ctx)
{
    child_job *j = ctx;
    run_config(j->c, j->pb, j->r, j->grad);
    j->r->ran = 1;
}

/* Runs c in a child; its result and gradient (ran = 0: it did not report). */
static result run_child(const config *c, const problem *pb, double *grad)
{
    result r;
    memset(&r, 0, sizeof r);
    child_job j = {c, pb, &r, grad};
    bench_part parts[2] = {{&r, sizeof r}, {grad, pb->n * sizeof *grad}};
    long maxrss_kb;
    if (run_isolated_parts(child_run, &j, parts, 2, &maxrss_kb) != 0)
        memset(&r, 0, sizeof r);
    else
        r.maxrss_kb = maxrss_kb;
    return r;
}

/* ================= output ================= */

static const char *fmt_bytes(char buf[16], double b)
{
    if (!(b >= 0))
        snprintf(buf, 16, "-");
    else if (b < 1024.0 * 1024)
        snprintf(buf, 16, "%.0f KiB", b / 1024);
    else if (b < 1024.0 * 1024 * 1024)
        snprintf(buf, 16, "%.1f MiB", b / (1024.0 * 1024));
    else
        snprintf(buf, 16, "%.2f GiB", b / (1024.0 * 1024 * 1024));
    return buf;
}

static void print_load(void)
{
    double l[3] = {0, 0, 0};
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) != 3)
            l[0] = l[1] = l[2] = 0;
        fclose(f);
    }
    printf("  (load average %.2f %.2f %.2f; %.1f GiB available)\n", l[0], l[1], l[2],
           (double)bench_proc_kb("/proc/meminfo", "MemAvailable") / 1048576.0);
}

/* ================= one problem ================= */

typedef struct row {
    char label[56];
    config c;
    result r;
    double *grad;
    int attempts;     /* runs made (more than 1: the machine was busy) */
    int estimated;    /* measured on ESTIMATE_POINTS points and scaled */
    double scale;     /* that scale */
} row;

enum { MAX_ROWS = 16 };

typedef struct block {
    const problem *pb;
    long idle_kb;
    row rows[MAX_ROWS];
    int nrows;
    size_t term0; /* term 0's records */
    int failed;
} block;

typedef struct options {
    int reps;
    double mem_limit_gb;
    size_t budgets[MAX_BUDGETS]; /* other chunk budgets, shown beside */
    int nbudgets;
    size_t rows, features;
    size_t batch; /* points per term of the labelled primitive variant (0: none) */
    int gmm, logistic, d64, diagnostic;
    const char *set; /* only this GMM data set, or NULL */
    const char *dir;
} options;

static double above_idle(const block *b, const row *w)
{
    return (double)(w->r.hwm_kb - b->idle_kb) * 1024.0 * (w->estimated ? w->scale : 1.0);
}

static row *add_row(block *b, const char *label, config c)
{
    row *w = &b->rows[b->nrows++];
    memset(w, 0, sizeof *w);
    snprintf(w->label, sizeof w->label, "%s", label);
    w->c = c;
    w->grad = malloc((b->pb->n ? b->pb->n : 1) * sizeof *w->grad);
    if (!w->grad) {
        fprintf(stderr, "sum-bench: out of memory\n");
        exit(3);
    }
    return w;
}

/* The measured row of a configuration (estimates: find_estimate). */
static row *find_row(block *b, method m, unsigned threads, size_t budget)
{
    for (int i = 0; i < b->nrows; i++) {
        row *w = &b->rows[i];
        if (w->c.m == m && !w->estimated &&
            (m != M_SUM || (w->c.threads == threads && w->c.budget == budget)))
            return w;
    }
    return NULL;
}

static row *find_estimate(block *b, method m)
{
    for (int i = 0; i < b->nrows; i++)
        if (b->rows[i].c.m == m && b->rows[i].estimated)
            return &b->rows[i];
    return NULL;
}

/* ---- checks ---- */

typedef struct error {
    double normwise, entrywise; /* max |a-b| / max|b|; max |a-b| / |b| */
} error;

static error compare_vectors(double fa, const double *a, double fb, const double *b, size_t n)
{
    double big = 0, diff = 0, worst = fabs(fa - fb) / fabs(fb);
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        big = fmax(big, fabs(b[i]));
        diff = fmax(diff, d);
        if (d > 0)
            worst = fmax(worst, d / fabs(b[i]));
    }
    error e = {fmax(fabs(fa - fb) / fabs(fb), big > 0 ? diff / big : diff), worst};
    if (isnan(fa) || isnan(fb))
        e.normwise = e.entrywise = NAN;
    return e;
}

/* Against ADBench's reference, as gmm-bench: 1 if it fails. */
static int check_reference(const problem *pb, const row *w, char *out, size_t size)
{
    const gmm_reference *ref = pb->ref;
    double ef = fabs(w->r.fx - ref->objective) / fabs(ref->objective), eg = 0;
    for (size_t e = 0; e < ref->count; e++) {
        double err = fabs(w->grad[ref->index[e]] - ref->grad[e]) / fabs(ref->grad[e]);
        eg = err > eg || err != err ? err : eg;
    }
    int ok = ef <= RTOL_F && eg <= RTOL_GRAD;
    snprintf(out, size, "ref %s %.0e/%.0e", ok ? "ok" : "FAIL", ef, eg);
    return !ok;
}

static void print_rows_header(void)
{
    printf("  %-36s %9s %9s %9s %6s %6s %10s %7s %10s  %s\n", "configuration", "median", "min",
           "max", "x1thr", "/whole", "peak-idle", "whole/", "tape", "checks; load");
}

/* One line: time, its ratios to 1 thread (default budget) and to the
 * whole sum, peak memory above idle and the whole sum's over it. */
static void print_row(block *b, row *w)
{
    const problem *pb = b->pb;
    char t1[16], t2[16], t3[16], t4[16], m1[16], m2[16], chk[96] = "", extra[128] = "";
    if (!w->r.ran || w->r.status != AD_OK) {
        printf("  %-36s FAILED: %s\n", w->label,
               w->r.ran ? ad_strerror(w->r.status) : "the child did not report");
        b->failed++;
        return;
    }
    row *one = find_row(b, M_SUM, 1, DEFAULT_BUDGET), *whole = find_row(b, M_WHOLE, 0, 0);
    if (w->estimated)
        one = NULL;
    char x1[16] = "-", xw[16] = "-", mw[16] = "-";
    if (one && one->r.ran && one->r.status == AD_OK && w->c.m != M_IDLE)
        snprintf(x1, sizeof x1, "%.2f", one->r.median_ns / w->r.median_ns);
    if (whole && whole->r.ran && whole->r.status == AD_OK && !whole->estimated)
        snprintf(xw, sizeof xw, "%.2f", w->r.median_ns / whole->r.median_ns);
    row *wm = whole ? whole : find_estimate(b, M_WHOLE); /* the memory: measured or not */
    if (wm && wm->r.ran && wm->r.status == AD_OK)
        snprintf(mw, sizeof mw, "%.1f", above_idle(b, wm) / above_idle(b, w));
    size_t off = 0;
    if (pb->ref && !w->estimated) {
        b->failed += check_reference(pb, w, chk, sizeof chk);
        off = strlen(chk);
    }
    if (whole && whole->r.ran && whole->r.status == AD_OK && !whole->estimated && w != whole &&
        !w->estimated && (w->c.m == M_SUM || w->c.m == M_SPLIT || w->c.m == M_ADBENCH)) {
        error e = compare_vectors(w->r.fx, w->grad, whole->r.fx, whole->grad, pb->n);
        int ok = e.normwise <= RTOL_WHOLE;
        if (w->c.m != M_ADBENCH) /* a different function's tape: shown, not checked */
            b->failed += !ok;
        snprintf(chk + off, sizeof chk - off, "%swhole %s %.0e (entry %.0e)", off ? ", " : "",
                 w->c.m == M_ADBENCH ? "~" : ok ? "ok" : "FAIL", e.normwise, e.entrywise);
        off = strlen(chk);
    }
    if (w->c.m == M_SUM && w->c.threads > 1) {
        row *same = find_row(b, M_SUM, 1, w->c.budget);
        if (same && same->r.ran && same->r.status == AD_OK) {
            int bits = memcmp(&same->r.fx, &w->r.fx, sizeof w->r.fx) == 0 &&
                       memcmp(same->grad, w->grad, pb->n * sizeof *w->grad) == 0;
            b->failed += !bits;
            snprintf(chk + off, sizeof chk - off, "%s%s", off ? ", " : "",
                     bits ? "bits = 1 thr" : "BITS DIFFER from 1 thread");
        }
    }
    snprintf(extra, sizeof extra, "; first %s; cpu %.2f, others %.2f%s",
             fmt_time(t4, w->r.first_ns), w->r.cpus, w->r.others,
             w->attempts > 1 ? (w->r.others > QUIET_CPUS ? " (busy, runs: all)" : " (rerun)") : "");
    printf("  %-36s %9s %9s %9s %6s %6s %10s %7s %10s  %s%s%s\n", w->label,
           w->estimated ? "-" : fmt_time(t1, w->r.median_ns),
           w->estimated ? "-" : fmt_time(t2, w->r.min_ns),
           w->estimated ? "-" : fmt_time(t3, w->r.max_ns), w->estimated ? "-" : x1,
           w->estimated ? "-" : xw, fmt_bytes(m1, above_idle(b, w)), mw,
           fmt_bytes(m2, (double)w->r.stats.tape_bytes * (w->estimated ? w->scale : 1.0)), chk,
           w->estimated ? "" : extra, w->estimated ? "  (ESTIMATED: see below)" : "");
    if (w->r.maxrss_kb && labs(w->r.maxrss_kb - w->r.hwm_kb) > 4096)
        printf("  %-36s (ru_maxrss %ld kB, VmHWM %ld kB)\n", "", w->r.maxrss_kb, w->r.hwm_kb);
    if (w->c.m == M_SUM && w->c.threads > 1)
        printf("  %-36s waits per call: %.3f s for a chunk's turn (put), %.3f s for the helper "
               "at the end; steal %.2f CPU\n",
               "", w->r.wait_turn, w->r.wait_end, w->r.steal);
}

/* ---- a quiet machine ----
 *
 * Other work on the machine (2 shared vCPUs) takes a CPU from one of the
 * two threads.  Each configuration waits, up to --max-wait seconds, for a
 * second in which the machine used less than QUIET_CPUS besides this
 * process; one whose timed calls still met more than that is run again,
 * up to --retries times, and the rerun is said in the table. */
static unsigned long long busy_ticks(void)
{
    cpu_sample c;
    sample_cpu(&c);
    return c.busy + c.steal;
}

static double busy_over(double secs)
{
    unsigned long long a = busy_ticks();
    struct timespec ts = {(time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9)};
    nanosleep(&ts, NULL);
    return (double)(busy_ticks() - a) / (double)sysconf(_SC_CLK_TCK) / secs;
}

static int max_wait_s = 300, retries = 3;

static void wait_quiet(void)
{
    double t0 = bench_now_ns();
    while (busy_over(1.0) > QUIET_CPUS && bench_now_ns() - t0 < max_wait_s * 1e9)
        ;
}

static void run_row(block *b, row *w)
{
    for (int attempt = 0; attempt <= retries; attempt++) {
        wait_quiet();
        fprintf(stderr, "  [%s: %s%s]\n", b->pb->name, w->label, attempt ? ", again" : "");
        w->r = run_child(&w->c, b->pb, w->grad);
        w->attempts = attempt + 1;
        if (!w->r.ran || w->r.status != AD_OK || w->r.others <= QUIET_CPUS)
            break;
    }
}

/* The whole sum's tape in bytes if recorded, from term 0 (docs/api.md,
 * "Costs": 32 bytes per record at the peak of a gradient). */
static double whole_estimate(const block *b)
{
    return 32.0 * (double)b->term0 * (double)b->pb->nterms;
}

static int whole_fits(const options *o, double need)
{
    double avail = (double)bench_proc_kb("/proc/meminfo", "MemAvailable") * 1024.0;
    return need <= o->mem_limit_gb * 1e9 && need <= 0.8 * avail;
}

/* The whole-sum configuration m on the first ESTIMATE_POINTS points,
 * scaled: a row of its own. */
static void run_estimate(block *b, method m, const char *label)
{
    problem sub = *b->pb;
    sub.gmm.n = ESTIMATE_POINTS;
    sub.nterms = (ESTIMATE_POINTS + sub.per_term - 1) / sub.per_term + 1;
    sub.ref = NULL;
    row *w = add_row(b, label, (config){m, 0, 0, 3});
    wait_quiet();
    fprintf(stderr, "  [%s: %s]\n", b->pb->name, label);
    w->r = run_child(&w->c, &sub, w->grad);
    w->estimated = 1;
    w->scale = (double)b->pb->gmm.n / ESTIMATE_POINTS;
}

static void run_problem(const options *o, block *b)
{
    const problem *pb = b->pb;
    config idle = {M_IDLE, 0, 0, 0};
    char notes[8][160], m1[16];
    int nnotes = 0;
    row *w;
    b->nrows = 0;
    w = add_row(b, "idle child", idle);
    w->r = run_child(&idle, pb, w->grad);
    free(w->grad);
    b->nrows = 0; /* not a row of the table */
    if (!w->r.ran) {
        printf("\n%s: the idle child did not report\n", pb->name);
        b->failed++;
        return;
    }
    b->idle_kb = w->r.hwm_kb;
    printf("\n%s: %zu inputs, %zu terms; idle child VmHWM %ld kB\n", pb->name, pb->n, pb->nterms,
           b->idle_kb);
    print_load();

    /* the headline: default budget, 1 and 2 threads */
    for (unsigned t = 1; t <= 2; t++) {
        char label[56];
        snprintf(label, sizeof label, "ad_gradient_sum, %u thread%s", t, t > 1 ? "s" : "");
        w = add_row(b, label, (config){M_SUM, t, DEFAULT_BUDGET, o->reps});
        run_row(b, w);
        if (t == 1)
            b->term0 = w->r.term0_records;
    }
    if (!b->term0) {
        printf("  no term-0 record count (the 1-thread call failed): the rest is skipped\n");
        b->failed++;
        return;
    }
    size_t per = terms_per_chunk(b->term0, pb->n, DEFAULT_BUDGET, pb->nterms);
    snprintf(notes[nnotes++], sizeof notes[0],
             "term 0: %zu records, its gradient alone %.2f ms (ad_gradient_sum records it once "
             "more, on the caller, before the helpers start)",
             b->term0, b->rows[0].r.term0_ns * 1e-6);
    snprintf(notes[nnotes++], sizeof notes[0],
             "default budget 1 MiB: %zu terms per chunk (%s), %zu chunks", per,
             DEFAULT_BUDGET / sizeof(ad__record) >= 32 * pb->n ? "sized by the budget"
                                                               : "sized by the 32 n records floor",
             chunks_of(pb->nterms, per));

    /* the whole sum in one objective, and ADBench's one tape: run if they
     * fit, else estimated from 100 points (GMM); on d64_K100 the estimates
     * are shown beside the runs */
    for (method m = M_WHOLE; m <= M_ADBENCH; m++) {
        const char *label = m == M_WHOLE ? "ad_gradient, whole sum" : "ad_gradient, ADBench one tape";
        const char *elabel = m == M_WHOLE ? "whole sum, 100 points x N/100"
                                          : "ADBench one tape, 100 points x N/100";
        if (m == M_ADBENCH && pb->fam != FAM_GMM)
            break;
        double need = whole_estimate(b);
        row *est = NULL;
        if (pb->fam == FAM_GMM && pb->per_term == 1) {
            run_estimate(b, m, elabel);
            est = &b->rows[b->nrows - 1];
            if (est->r.ran && est->r.status == AD_OK)
                need = above_idle(b, est);
        }
        if (whole_fits(o, need)) {
            w = add_row(b, label, (config){m, 0, 0, o->reps});
            run_row(b, w);
            if (est && !strstr(pb->name, "d64")) {
                free(est->grad); /* shown only where the whole one was not run */
                *est = *w;
                b->nrows--;
            }
        } else {
            snprintf(notes[nnotes++], sizeof notes[0],
                     "%s NOT run: it would take about %s (over %.0f GB or 80%% of the memory "
                     "available)", label, fmt_bytes(m1, need), o->mem_limit_gb);
        }
    }

    /* other budgets, labelled; those that cut the same chunks are left out */
    for (int i = 0; i < o->nbudgets; i++) {
        size_t bud = o->budgets[i], p2 = terms_per_chunk(b->term0, pb->n, bud, pb->nterms);
        if (p2 == per) {
            snprintf(notes[nnotes++], sizeof notes[0],
                     "budget %zu KiB: the same chunks as the default (%zu terms): not run",
                     bud >> 10, p2);
            continue;
        }
        for (unsigned t = 1; t <= 2; t++) {
            char label[56];
            /* figures bounded to 8 digits, so that the label fits */
            snprintf(label, sizeof label, "sum %u thr, %zu KiB (%zu/chunk)", t,
                     (size_t)(bud >> 10) % 100000000u, p2 % 100000000u);
            w = add_row(b, label, (config){M_SUM, t, bud, o->reps});
            run_row(b, w);
        }
    }
    if (o->diagnostic) {
        w = add_row(b, "diag: own 2 threads, any order", (config){M_SPLIT, 2, DEFAULT_BUDGET,
                                                                 o->reps});
        run_row(b, w);
    }

    print_rows_header();
    for (int i = 0; i < b->nrows; i++)
        print_row(b, &b->rows[i]);
    for (int i = 0; i < nnotes; i++)
        printf("  %s\n", notes[i]);
    fflush(stdout);
}

/* ================= targets ================= */

typedef struct verdicts {
    int met, missed;
} verdicts;

static void verdict(verdicts *v, int ok)
{
    if (ok)
        v->met++;
    else
        v->missed++;
}

static void print_targets(block *blocks, int nb)
{
    verdicts v = {0, 0};
    printf("\ntargets (default budget 1 MiB; the headline is the scalar GMM version):\n");
    printf("  speed-up, 2 threads over 1 (>= 1.8):\n");
    for (int i = 0; i < nb; i++) {
        block *b = &blocks[i];
        row *one = find_row(b, M_SUM, 1, DEFAULT_BUDGET), *two = find_row(b, M_SUM, 2,
                                                                           DEFAULT_BUDGET);
        row *diag = find_row(b, M_SPLIT, 2, 0);
        if (!one || !two || !one->r.ran || !two->r.ran)
            continue;
        int head = b->pb->fam == FAM_GMM && b->pb->version == GMM_SCALAR;
        double x = one->r.median_ns / two->r.median_ns;
        printf("    %-46s %.2f: %s%s", b->pb->name, x, x >= 1.8 ? "MET" : "MISSED",
               head ? " (headline)" : "");
        if (diag && diag->r.ran && diag->r.status == AD_OK)
            printf("   [own threads, no ordering: %.2f]", one->r.median_ns / diag->r.median_ns);
        printf("\n");
        if (head)
            verdict(&v, x >= 1.8);
    }
    printf("  peak memory, gmm_1k_d64_K100 scalar: whole-sum tape / sum's peak above idle (>= 10):\n");
    for (int i = 0; i < nb; i++) {
        block *b = &blocks[i];
        if (!strstr(b->pb->name, "d64") || b->pb->per_term != 1)
            continue;
        row *est = find_estimate(b, M_WHOLE), *whole = find_row(b, M_WHOLE, 0, 0);
        if (!whole)
            whole = est;
        for (unsigned t = 1; t <= 2; t++) {
            row *s = find_row(b, M_SUM, t, DEFAULT_BUDGET);
            if (!whole || !s || !whole->r.ran || !s->r.ran)
                continue;
            char m1[16], m2[16], m3[16];
            double tape = (double)whole->r.stats.tape_bytes * (whole->estimated ? whole->scale : 1);
            double peak = above_idle(b, s), x = tape / peak;
            int head = b->pb->version == GMM_SCALAR;
            printf("    %-46s %u thr: tape %s (%s), peak of the whole gradient %s; sum %s: "
                   "%.0fx %s%s\n",
                   b->pb->name, t, fmt_bytes(m1, tape),
                   whole->estimated ? "ESTIMATED from 100 points x 10" : "measured",
                   fmt_bytes(m3, above_idle(b, whole)), fmt_bytes(m2, peak), x,
                   x >= 10 ? "MET" : "MISSED", head ? " (headline)" : "");
            if (head)
                verdict(&v, x >= 10);
        }
        if (est && whole && whole != est && !whole->estimated)
            printf("    %-46s (100-point estimate x 10: tape %.2f GiB, peak %.2f GiB; measured "
                   "%.2f, %.2f)\n",
                   "", (double)est->r.stats.tape_bytes * est->scale / 1073741824.0,
                   above_idle(b, est) / 1073741824.0,
                   (double)whole->r.stats.tape_bytes / 1073741824.0,
                   above_idle(b, whole) / 1073741824.0);
    }
    printf("  1 thread no slower than ad_gradient of the whole sum (time ratio <= 1):\n");
    for (int i = 0; i < nb; i++) {
        block *b = &blocks[i];
        row *one = find_row(b, M_SUM, 1, DEFAULT_BUDGET), *whole = find_row(b, M_WHOLE, 0, 0),
            *adb = find_row(b, M_ADBENCH, 0, 0);
        if (!one || !whole || !one->r.ran || !whole->r.ran || whole->estimated)
            continue;
        int head = b->pb->fam == FAM_GMM && b->pb->version == GMM_SCALAR;
        double x = one->r.median_ns / whole->r.median_ns;
        printf("    %-46s %.3f: %s%s", b->pb->name, x, x <= 1.0 ? "MET" : "MISSED",
               head ? " (headline)" : "");
        if (adb && adb->r.ran && adb->r.status == AD_OK && !adb->estimated)
            printf("   [over ADBench's one tape: %.2f]", one->r.median_ns / adb->r.median_ns);
        printf("\n");
        if (head)
            verdict(&v, x <= 1.0);
    }
    printf("  headline verdicts: %d MET, %d MISSED\n", v.met, v.missed);
}

/* ================= main ================= */

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--reps N] [--mem-limit-gb G] [--budgets-kib K,K,..] [--rows N]\n"
            "          [--features N] [--only gmm|logistic] [--skip-d64] [--no-diagnostic]\n"
            "          [--max-wait S] [--retries N] [--batch B] [--set NAME] [DIR]\n",
            argv0);
    exit(2);
}

static void parse(int argc, char **argv, options *o)
{
    *o = (options){5, 20.0, {(size_t)256 << 10, (size_t)8 << 20}, 2, 1000000, 20, 100, 1, 1, 1, 1,
                   NULL, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--reps") && v) {
            o->reps = atoi(v);
            i++;
        } else if (!strcmp(a, "--mem-limit-gb") && v) {
            o->mem_limit_gb = atof(v);
            i++;
        } else if (!strcmp(a, "--budgets-kib") && v) {
            o->nbudgets = 0;
            for (char *end; *v && o->nbudgets < MAX_BUDGETS; v = *end ? end + 1 : end) {
                unsigned long k = strtoul(v, &end, 10);
                if (end == v || (*end && *end != ','))
                    usage(argv[0]);
                if (k)
                    o->budgets[o->nbudgets++] = (size_t)k << 10;
            }
            i++;
        } else if (!strcmp(a, "--rows") && v) {
            o->rows = (size_t)strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--batch") && v) {
            o->batch = (size_t)strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--features") && v) {
            o->features = (size_t)strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--only") && v) {
            o->gmm = !strcmp(v, "gmm");
            o->logistic = !strcmp(v, "logistic");
            i++;
        } else if (!strcmp(a, "--max-wait") && v) {
            max_wait_s = atoi(v);
            i++;
        } else if (!strcmp(a, "--retries") && v) {
            retries = atoi(v);
            i++;
        } else if (!strcmp(a, "--set") && v) {
            o->set = v;
            i++;
        } else if (!strcmp(a, "--skip-d64")) {
            o->d64 = 0;
        } else if (!strcmp(a, "--no-diagnostic")) {
            o->diagnostic = 0;
        } else if (a[0] != '-' && !o->dir) {
            o->dir = a;
        } else {
            usage(argv[0]);
        }
    }
    if (o->reps < 1 || o->reps > MAX_REPS || o->rows < 2 || o->features < 1 ||
        !(o->mem_limit_gb > 0))
        usage(argv[0]);
}

/* ADBench's layout: DIR/data/NAME.txt, DIR/reference/NAME_manual.txt. */
static int load_gmm(const char *dir, const char *name, gmm_problem *p, gmm_reference *ref)
{
    char path[4096], err[GMM_ERR_SIZE];
    snprintf(path, sizeof path, "%s/data/%s.txt", dir, name);
    if (gmm_load(path, p, err)) {
        printf("\n%s: NOT measured: %s\n", name, err);
        return -1;
    }
    snprintf(path, sizeof path, "%s/reference/%s_manual.txt", dir, name);
    if (gmm_load_reference(path, ref, err) || !gmm_reference_matches(ref, p)) {
        printf("\n%s: NOT measured: %s\n", name, *err ? err : "reference for another problem");
        gmm_free(p);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const sets[] = {"gmm_10k_d10_K25", "gmm_1k_d64_K100"};
    static const char *const vname[] = {"scalar", "primitives"};
    static problem problems[8];
    static block blocks[8];
    options o;
    int nb = 0, failed = 0;
    parse(argc, argv, &o);
    const char *dir = o.dir ? o.dir : SUM_REPO_ROOT "/../shared/adbench";
    printf("sum-bench: ad_gradient_sum against ad_gradient of the whole sum (dualrev %s)\n",
           ad_version());
    printf("%ld CPUs online; memory %.1f GiB, %.1f GiB available; whole sums run up to %.1f GB\n",
           sysconf(_SC_NPROCESSORS_ONLN), (double)bench_proc_kb("/proc/meminfo", "MemTotal") / 1048576.0,
           (double)bench_proc_kb("/proc/meminfo", "MemAvailable") / 1048576.0, o.mem_limit_gb);
    printf("time: median of %d calls after one warm-up (3 where a call takes over 3 s), each "
           "configuration in a child process\n", o.reps);
    printf("columns: x1thr = time of ad_gradient_sum on 1 thread (1 MiB) / this time; /whole = "
           "this time / whole sum's;\n  peak-idle = VmHWM of the child minus the idle child's; "
           "whole/ = the whole sum's peak-idle / this one's;\n  tape = ad_tape_stats tape_bytes "
           "of the calling thread; checks: ref = against ADBench (objective/gradient),\n  whole "
           "= max |g - g_whole| / max |g_whole| (entry: max per-entry relative error), bits = "
           "same bits as 1 thread;\n  cpu = process CPU time / wall time, others = CPUs used by "
           "the rest of the machine meanwhile\n");

    for (size_t s = 0; o.gmm && s < sizeof sets / sizeof *sets; s++) {
        static gmm_problem p[2];
        static gmm_reference ref[2];
        if ((!o.d64 && strstr(sets[s], "d64")) || (o.set && strcmp(o.set, sets[s])))
            continue;
        if (load_gmm(dir, sets[s], &p[s], &ref[s])) {
            failed++;
            continue;
        }
        double *x = malloc(gmm_inputs(&p[s]) * sizeof *x);
        if (!x) {
            fprintf(stderr, "sum-bench: out of memory\n");
            return 3;
        }
        gmm_pack(&p[s], x);
        /* scalar and primitives, a point per term; then, labelled, the
         * primitives with o.batch points per term */
        for (int v = 0; v < 3; v++) {
            problem *pb = &problems[nb];
            size_t B = v < 2 ? 1 : o.batch;
            if (v == 2 && B <= 1)
                break;
            snprintf(pb->name, sizeof pb->name, "%s %s", sets[s], vname[v < 2 ? v : 1]);
            if (B > 1)
                snprintf(pb->name + strlen(pb->name), sizeof pb->name - strlen(pb->name),
                         ", %zu points/term", B);
            pb->fam = FAM_GMM;
            pb->gmm = p[s];
            pb->version = v < 2 ? (gmm_version)v : GMM_PRIMITIVES;
            pb->per_term = B;
            pb->ref = &ref[s];
            pb->term = gmm_term;
            pb->n = gmm_inputs(&p[s]);
            pb->nterms = (p[s].n + B - 1) / B + 1;
            pb->x = x;
            blocks[nb].pb = pb;
            run_problem(&o, &blocks[nb]);
            failed += blocks[nb++].failed;
        }
    }
    if (o.logistic) {
        problem *pb = &problems[nb];
        double *w0 = malloc(o.features * sizeof *w0);
        if (!w0 || make_logistic(pb, o.rows, o.features, w0)) {
            fprintf(stderr, "sum-bench: out of memory\n");
            return 3;
        }
        blocks[nb].pb = pb;
        run_problem(&o, &blocks[nb]);
        failed += blocks[nb++].failed;
        free(pb->lr.x); /* the children are done with them */
        free(pb->lr.y);
    }
    print_targets(blocks, nb);
    if (failed)
        printf("\nFAILED: %d check(s) or configuration(s) failed\n", failed);
    return failed ? 1 : 0;
}
