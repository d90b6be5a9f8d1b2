/* dualrev: gradients and Hessian-vector products of sums, by chunks of
 * terms on the library's own threads (ad_gradient_sum, ad_hvp_sum).
 *
 * The terms are cut into chunks whose size depends only on the first
 * term's tape and the budget, never on the threads.  A worker takes the
 * next chunk, records it (the inputs, then its terms, summed in order) on
 * its own thread's tape, sweeps it and reuses the tape for its next chunk;
 * the chunks' results are added into the caller's arrays in chunk order,
 * each worker waiting for its turn.  So fx and grad are the same bits for
 * every number of threads, and a worker holds one chunk's tape.
 *
 * The same machinery serves ad_sum_plan_make and ad_gradient_sum_chunks /
 * ad_hvp_sum_chunks, which give a caller (dualrev/mpi.h) the chunking and
 * the results of a range of chunks, one by one, to add in chunk order
 * itself: the same bits as ad_gradient_sum where it adds them as put()
 * does. */
#define _GNU_SOURCE 1  /* sched_getaffinity, pthread_setaffinity_np */
#include <fenv.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "recording.h"
#include "status.h"
#include "sweep.h"
#include "tape.h"

#define SUM_MAX_THREADS 64
#define SUM_DEFAULT_BYTES ((size_t)1 << 20)
#define SUM_PER_INPUT 32
#define SUM_MIN_CHUNKS 16

/* ---- one call ---- */

/* What the caller has set on its thread that holds for its chunks on
 * every thread, so that the results do not depend on which thread runs
 * a chunk. */
typedef struct settings {
    unsigned checks;    /* ad_set_checks */
    size_t budget;      /* ad_set_sum_chunk_bytes, for a term's own sums */
    const char *label;  /* ad_where, for faults */
    fenv_t env;         /* rounding mode, exception masks */
#ifdef __linux__
    cpu_set_t cores;    /* the cores it may run on */
    int has_cores;
#endif
} settings;

typedef struct job {
    ad_term term;
    void *ctx;
    size_t nterms, n, per;  /* per: terms in each chunk after the first, which is term 0 */
    size_t nchunks;
    size_t c0, c1;          /* the chunks to run: [c0, c1) */
    double *out;            /* non-NULL: each chunk's results stored here, not added */
    const double *x, *v;    /* v: the direction of ad_hvp_sum */
    int hvp;                /* ad_hvp_sum (v may be NULL when n = 0) */
    settings caller;
    double *fx, *grad, *hv; /* the caller's, summed into in chunk order */
    atomic_size_t next;     /* the next chunk to take */
    atomic_int stop;        /* a chunk failed: take no more */
    pthread_mutex_t mu;
    pthread_cond_t turn_cv;
    size_t turn;            /* the chunk whose results go in next */
    size_t failed_at;       /* the first failed chunk (SIZE_MAX: none) */
    ad_status status;       /* its status */
    ad_fault fault;         /* its fault, if AD_ENONFINITE */
    int has_fault;
} job;

typedef struct chunk {
    const job *jb;
    size_t i0, i1;
    ad_checks *ck;  /* the thread's: faults inside term i name it */
} chunk;

static ad_real term_at(const chunk *ch, size_t i, const ad_real *x, size_t n)
{
    size_t was = ch->ck->term1;
    ch->ck->term1 = i + 1;
    ad_real s = ch->jb->term(i, x, n, ch->jb->ctx);
    ch->ck->term1 = was;
    return s;
}

/* The chunk's terms, summed in order. */
static ad_real chunk_sum(const ad_real *x, size_t n, void *ctx)
{
    const chunk *ch = ctx;
    ad_real s = term_at(ch, ch->i0, x, n);
    for (size_t i = ch->i0 + 1; i < ch->i1; i++)
        s = ad_add(s, term_at(ch, i, x, n));
    return s;
}

static chunk chunk_of(const job *jb, size_t c)
{
    chunk ch = {jb, 0, 1, NULL};
    if (c > 0) {
        ch.i0 = 1 + (c - 1) * jb->per;
        ch.i1 = jb->nterms - ch.i0 < jb->per ? jb->nterms : ch.i0 + jb->per;
    }
    return ch;
}

static ad_status chunk_run(const job *jb, chunk *ch, double *f, double *g, double *hv)
{
    ch->ck = ad_checks_of(ad_thread_self());
    size_t was = ch->ck->term1;
    if (ch->i1 - ch->i0 == 1)  /* one term: named in the sweep too */
        ch->ck->term1 = ch->i0 + 1;
    ad_status s = jb->hvp ? ad_hvp(chunk_sum, ch, jb->n, jb->x, jb->v, f, g, hv)
                          : ad_gradient(chunk_sum, ch, jb->n, jb->x, f, g);
    ch->ck->term1 = was;
    return s;
}

/* A fault in the sweep of a chunk of several terms names no term: each
 * is run alone until one faults again, which names it.  A fault none
 * makes alone (the sum of two large terms) stays as it was. */
static ad_status locate_term(const job *jb, const chunk *ch, double *f, double *g, double *hv)
{
    ad_fault was;
    if (ad_last_fault(&was) != AD_OK || was.term >= 0)
        return AD_ENONFINITE;
    for (size_t i = ch->i0; i < ch->i1; i++) {
        chunk one = {jb, i, i + 1, NULL};
        if (chunk_run(jb, &one, f, g, hv) == AD_ENONFINITE && ad_last_fault(&was) == AD_OK)
            return AD_ENONFINITE;
    }
    ad_fault_keep(&was);
    return AD_ENONFINITE;
}

/* Chunk c's value, gradient and H v into f, g and hv (scratch). */
static ad_status run_chunk(const job *jb, size_t c, double *f, double *g, double *hv)
{
    chunk ch = chunk_of(jb, c);
    /* No thread's tape limit holds (the caller's would fail the chunks it
     * happens to take). */
    size_t cap = ad_set_tape_limit(0);
    ad_status s = chunk_run(jb, &ch, f, g, hv);
    if (s == AD_ENONFINITE && ch.i1 - ch.i0 > 1)
        s = locate_term(jb, &ch, f, g, hv);
    ad_set_tape_limit(cap);
    return s;
}

static void add(double *dst, const double *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

/* Doubles per chunk in a caller's array of chunk results: f, grad, hv. */
static size_t stride_of(const job *jb)
{
    return 1 + (jb->hvp ? 2 : 1) * jb->n;
}

/* Chunk c's results into the caller's arrays, after chunk c - 1's; or its
 * failure recorded (the first chunk's to fail, whatever the threads). */
static void put(job *jb, size_t c, ad_status s, const double *f, const double *g, const double *hv)
{
    pthread_mutex_lock(&jb->mu);
    while (jb->turn != c)
        pthread_cond_wait(&jb->turn_cv, &jb->mu);
    if (s != AD_OK && c < jb->failed_at) {
        jb->failed_at = c;
        jb->status = s;
        jb->has_fault = s == AD_ENONFINITE && ad_last_fault(&jb->fault) == AD_OK;
        atomic_store(&jb->stop, 1);
    }
    if (jb->failed_at == SIZE_MAX && jb->out) {
        double *o = jb->out + (c - jb->c0) * stride_of(jb);
        o[0] = *f;
        if (jb->n)
            memcpy(o + 1, g, jb->n * sizeof *g);
        if (hv && jb->n)
            memcpy(o + 1 + jb->n, hv, jb->n * sizeof *hv);
    } else if (jb->failed_at == SIZE_MAX) {
        *jb->fx += *f;
        add(jb->grad, g, jb->n);
        if (hv)
            add(jb->hv, hv, jb->n);
    }
    jb->turn++;
    pthread_cond_broadcast(&jb->turn_cv);
    pthread_mutex_unlock(&jb->mu);
}

/* Takes chunks until there are none left or one failed.  The results of
 * each go in at its turn, so a chunk taken is always put; the chunks taken
 * are always 0 .. next - 1, so every turn comes. */
static void work(job *jb)
{
    size_t n = jb->n ? jb->n : 1;
    double *g = ad_alloc(2 * n * sizeof *g), *hv = jb->hvp ? g + n : NULL, f;
    while (!atomic_load(&jb->stop)) {
        size_t c = atomic_fetch_add(&jb->next, 1);
        if (c >= jb->c1)
            break;
        ad_status s = AD_ENOMEM;
        if (g && !atomic_load(&jb->stop))
            s = run_chunk(jb, c, &f, g, hv);
        put(jb, c, s, &f, g, hv);
    }
    ad_free(g);
}

/* ---- the caller's settings ---- */

static _Thread_local size_t chunk_bytes;  /* 0: SUM_DEFAULT_BYTES */

static void settings_get(settings *st)
{
    const ad_checks *ck = ad_checks_of(ad_thread_self());
    st->checks = ck->flags;
    st->budget = chunk_bytes;
    st->label = ck->label;
    fegetenv(&st->env);
#ifdef __linux__
    st->has_cores = sched_getaffinity(0, sizeof st->cores, &st->cores) == 0;
#endif
}

/* The calling thread takes st's settings (its cores for good: a pool
 * thread made by a thread pinned to one core would otherwise stay there). */
static void settings_set(const settings *st)
{
    ad_checks *ck = ad_checks_of(ad_thread_self());
    ck->flags = st->checks;
    chunk_bytes = st->budget;
    ck->label = st->label;
    fesetenv(&st->env);
#ifdef __linux__
    if (st->has_cores)
        pthread_setaffinity_np(pthread_self(), sizeof st->cores, &st->cores);
#endif
}

/* ---- the pool: threads kept between calls, serving one call at a time ---- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t wake, idle;
    unsigned started;   /* threads made */
    int busy;           /* a call has the pool */
    job *jb;            /* its job */
    unsigned want;      /* threads it asked for besides its caller */
    unsigned joined;    /* of those, how many have taken it */
    unsigned active;    /* threads working on it */
    uint64_t generation;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER,
        .idle = PTHREAD_COND_INITIALIZER};

static void *pool_thread(void *arg)
{
    uint64_t seen = 0;
    settings own;
    (void)arg;
    settings_get(&own);
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (!pool.jb || pool.generation == seen || pool.joined >= pool.want)
            pthread_cond_wait(&pool.wake, &pool.mu);
        seen = pool.generation;
        job *jb = pool.jb;
        pool.joined++;
        pool.active++;
        pthread_mutex_unlock(&pool.mu);
        settings_set(&jb->caller);
        work(jb);
        own.has_cores = 0;
        settings_set(&own);
        pthread_mutex_lock(&pool.mu);
        if (--pool.active == 0)
            pthread_cond_broadcast(&pool.idle);
    }
    return NULL;
}

/* A child of fork() has none of the pool's threads, and no call of its
 * own in progress: it starts afresh. */
static void pool_forget(void)
{
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.idle, NULL);
    pool.started = pool.want = pool.joined = pool.active = 0;
    pool.busy = 0;
    pool.jb = NULL;
}

static void pool_once(void)
{
    pthread_atfork(NULL, NULL, pool_forget);
}

/* The pool for a call wanting `helpers` threads besides the caller: the
 * number it gets (0 if another call has the pool, or no thread could be
 * made), the pool then being the caller's until pool_release. */
static unsigned pool_take(job *jb, unsigned helpers)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pool_once);
    pthread_mutex_lock(&pool.mu);
    if (pool.busy) {
        pthread_mutex_unlock(&pool.mu);
        return 0;
    }
    while (pool.started < helpers) {
        pthread_t th;
        pthread_attr_t at;
        int ok = pthread_attr_init(&at) == 0;
        if (ok) {
            pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
            ok = pthread_create(&th, &at, pool_thread, NULL) == 0;
            pthread_attr_destroy(&at);
        }
        if (!ok)
            break;
        pool.started++;
    }
    if (helpers > pool.started)
        helpers = pool.started;
    if (helpers) {
        pool.busy = 1;
        pool.jb = jb;
        pool.want = helpers;
        pool.joined = 0;
        pool.generation++;
        pthread_cond_broadcast(&pool.wake);
    }
    pthread_mutex_unlock(&pool.mu);
    return helpers;
}

/* After the caller's own work, which took the last chunk: no helper joins
 * any more, and those that did are waited for; then the pool is free. */
static void pool_release(void)
{
    pthread_mutex_lock(&pool.mu);
    pool.want = pool.joined;
    while (pool.active > 0)
        pthread_cond_wait(&pool.idle, &pool.mu);
    pool.jb = NULL;
    pool.busy = 0;
    pthread_mutex_unlock(&pool.mu);
}

/* ---- the entry points ---- */

size_t ad_set_sum_chunk_bytes(size_t bytes)
{
    size_t old = chunk_bytes ? chunk_bytes : SUM_DEFAULT_BYTES;
    chunk_bytes = bytes;
    return old;
}

/* The cores the caller may run on (taskset, an MPI rank's binding), else
 * those online. */
static long cores(const settings *caller)
{
#ifdef __linux__
    if (caller->has_cores)
        return CPU_COUNT(&caller->cores);
#else
    (void)caller;
#endif
    return sysconf(_SC_NPROCESSORS_ONLN);
}

static unsigned threads_for(const job *jb, unsigned threads)
{
    size_t nchunks = jb->c1 - jb->c0;
    if (threads == 0) {
        long c = cores(&jb->caller);
        threads = c > 0 ? (unsigned)(c < SUM_MAX_THREADS ? c : SUM_MAX_THREADS) : 1;
    }
    if (threads > SUM_MAX_THREADS)
        threads = SUM_MAX_THREADS;
    return nchunks < threads ? (unsigned)nchunks : threads;
}

/* a / b rounded up, for any a (nterms may be near SIZE_MAX). */
static size_t ceil_div(size_t a, size_t b)
{
    return a / b + (a % b != 0);
}

/* Terms per chunk: as many as fill the budget at the first term's size,
 * and enough that the chunk's records outnumber its n inputs
 * SUM_PER_INPUT-fold, whose cotangents every chunk clears, reads and adds
 * (about the work of a third of a record each); but no more than leave
 * SUM_MIN_CHUNKS chunks to share out, where there are that many terms.
 * From term 0's recording at x on the calling thread and its budget only:
 * never from the threads.  nterms > 0. */
static ad_status chunk_size_of(job *jb)
{
    ad_tape *t = ad_thread_tape();
    chunk ch = {jb, 0, 1, ad_checks_of(ad_thread_self())};
    size_t cap = ad_set_tape_limit(0);
    ad_status s = ad_record_objective(t, chunk_sum, &ch, jb->n, jb->x, 0);
    ad_set_tape_limit(cap);
    if (s != AD_OK)
        return s;
    size_t records = (size_t)(t->cursor.next - t->first) + 1;
    size_t bytes = chunk_bytes ? chunk_bytes : SUM_DEFAULT_BYTES;
    size_t fill = bytes / (jb->hvp ? 3 : 1) / sizeof(ad__record) / records;
    size_t floor = ceil_div(SUM_PER_INPUT * jb->n, records);
    size_t share = ceil_div(jb->nterms - 1, SUM_MIN_CHUNKS);
    jb->per = fill > floor ? fill : floor;
    if (jb->per > share)
        jb->per = share;
    if (jb->per == 0)
        jb->per = 1;
    jb->nchunks = 1 + ceil_div(jb->nterms - 1, jb->per);
    return AD_OK;
}

/* The caller's results, before any chunk adds to them (grad and hv may be
 * NULL when n = 0). */
static void zero(job *jb)
{
    *jb->fx = 0.0;
    if (jb->n)
        memset(jb->grad, 0, jb->n * sizeof *jb->grad);
    if (jb->n && jb->hv)
        memset(jb->hv, 0, jb->n * sizeof *jb->hv);
}

/* Chunks [jb->c0, jb->c1) on `threads` threads: added into the caller's
 * arrays (jb->out NULL, which zero() has cleared) or stored into jb->out. */
static ad_status run_chunks_of(job *jb, unsigned threads)
{
    jb->failed_at = SIZE_MAX;
    jb->status = AD_OK;
    jb->turn = jb->c0;
    atomic_store(&jb->next, jb->c0);
    if (jb->c0 == jb->c1)
        return AD_OK;
    if (pthread_mutex_init(&jb->mu, NULL) != 0)
        return AD_ENOMEM;
    if (pthread_cond_init(&jb->turn_cv, NULL) != 0) {
        pthread_mutex_destroy(&jb->mu);
        return AD_ENOMEM;
    }
    unsigned helpers = threads_for(jb, threads) - 1;
    if (helpers)
        helpers = pool_take(jb, helpers);
    work(jb);
    if (helpers)
        pool_release();
    pthread_cond_destroy(&jb->turn_cv);
    pthread_mutex_destroy(&jb->mu);
    if (jb->has_fault)  /* the failed chunk's, for the caller's ad_last_fault */
        ad_fault_keep(&jb->fault);
    return jb->status;
}

/* The terms run without the thread's agreement hook (collective.h): the
 * chunks the calling thread takes differ from call to call, and the
 * library's threads have none. */
static ad_status chunk_size(job *jb)
{
    ad_collective was = ad_set_collective(NULL);
    ad_status s = chunk_size_of(jb);
    ad_set_collective(&was);
    return s;
}

static ad_status run_chunks(job *jb, unsigned threads)
{
    ad_collective was = ad_set_collective(NULL);
    ad_status s = run_chunks_of(jb, threads);
    ad_set_collective(&was);
    return s;
}

static ad_status sum(job *jb, unsigned threads)
{
    ad_status s = chunk_size(jb);
    if (s != AD_OK)
        return s;
    zero(jb);
    jb->c0 = 0;
    jb->c1 = jb->nchunks;
    return run_chunks(jb, threads);
}

static void start(job *jb, ad_term term, void *ctx, size_t nterms, size_t n, const double *x,
                  int hvp, const double *v, double *fx, double *grad, double *hv)
{
    *jb = (job){.term = term, .ctx = ctx, .nterms = nterms, .n = n, .x = x, .hvp = hvp, .v = v,
                .fx = fx, .grad = grad, .hv = hv};
    settings_get(&jb->caller);
    atomic_init(&jb->next, 0);
    atomic_init(&jb->stop, 0);
    if (nterms == 0)
        zero(jb);
}

ad_status ad_gradient_sum(ad_term term, void *ctx, size_t nterms, size_t n, const double *x,
                          double *fx, double *grad, unsigned threads)
{
    job jb;
    ad_status s = AD_EINVAL;
    if (term && fx && (!n || (x && grad))) {
        start(&jb, term, ctx, nterms, n, x, 0, NULL, fx, grad, NULL);
        s = nterms ? sum(&jb, threads) : AD_OK;
    }
    if (s != AD_OK) {
        ad_fill_nan(fx, 1);
        ad_fill_nan(grad, n);
    }
    return s;
}

ad_status ad_hvp_sum(ad_term term, void *ctx, size_t nterms, size_t n, const double *x,
                     const double *v, double *fx, double *grad, double *hv, unsigned threads)
{
    job jb;
    ad_status s = AD_EINVAL;
    if (term && fx && (!n || (x && v && grad && hv))) {
        start(&jb, term, ctx, nterms, n, x, 1, v, fx, grad, hv);
        s = nterms ? sum(&jb, threads) : AD_OK;
    }
    if (s != AD_OK) {
        ad_fill_nan(fx, 1);
        ad_fill_nan(grad, n);
        ad_fill_nan(hv, n);
    }
    return s;
}

/* ---- the building blocks: a sum's chunking, and a range of its chunks ---- */

ad_status ad_sum_plan_make(ad_term term, void *ctx, size_t nterms, size_t n, const double *x,
                           int second_order, ad_sum_plan *plan)
{
    if (!plan)
        return AD_EINVAL;
    *plan = (ad_sum_plan){nterms, 1, 0};
    if (!term || (n && !x))
        return AD_EINVAL;
    if (nterms == 0)
        return AD_OK;
    job jb;
    double fx;
    start(&jb, term, ctx, nterms, n, x, second_order != 0, NULL, &fx, NULL, NULL);
    ad_status s = chunk_size(&jb);
    if (s == AD_OK) {
        plan->per = jb.per;
        plan->nchunks = jb.nchunks;
    }
    return s;
}

/* Whether plan is one ad_sum_plan_make could have made: its chunks cover
 * nterms terms, term 0 alone first. */
static int plan_ok(const ad_sum_plan *plan)
{
    if (!plan || plan->per == 0)
        return 0;
    if (plan->nterms == 0)
        return plan->nchunks == 0;
    return plan->nchunks == 1 + ceil_div(plan->nterms - 1, plan->per);
}

static ad_status sum_chunks(ad_term term, void *ctx, const ad_sum_plan *plan, size_t n,
                            const double *x, int hvp, const double *v, size_t c0, size_t c1,
                            double *out, size_t *failed, unsigned threads)
{
    job jb;
    double fx;
    size_t stride = 1 + (hvp ? 2 : 1) * n;
    ad_status s = AD_EINVAL;
    if (failed)
        *failed = c1;
    if (term && plan_ok(plan) && c0 <= c1 && c1 <= plan->nchunks && (c0 == c1 || out) &&
        (!n || (x && (!hvp || v))) && (c1 - c0 <= SIZE_MAX / stride / sizeof(double))) {
        if (c0 == c1)
            return AD_OK;
        start(&jb, term, ctx, plan->nterms, n, x, hvp, v, &fx, NULL, NULL);
        jb.per = plan->per;
        jb.nchunks = plan->nchunks;
        jb.c0 = c0;
        jb.c1 = c1;
        jb.out = out;
        s = run_chunks(&jb, threads);
        if (s != AD_OK && failed)
            *failed = jb.failed_at == SIZE_MAX ? c0 : jb.failed_at;
    } else if (failed) {
        *failed = c0;
    }
    /* NaN where the caller's results go, unless the range itself is wrong */
    if (s != AD_OK && out && plan && c0 <= c1 && c1 <= plan->nchunks &&
        c1 - c0 <= SIZE_MAX / stride / sizeof(double))
        ad_fill_nan(out, (c1 - c0) * stride);
    return s;
}

ad_status ad_gradient_sum_chunks(ad_term term, void *ctx, const ad_sum_plan *plan, size_t n,
                                 const double *x, size_t c0, size_t c1, double *out,
                                 size_t *failed, unsigned threads)
{
    return sum_chunks(term, ctx, plan, n, x, 0, NULL, c0, c1, out, failed, threads);
}

ad_status ad_hvp_sum_chunks(ad_term term, void *ctx, const ad_sum_plan *plan, size_t n,
                            const double *x, const double *v, size_t c0, size_t c1, double *out,
                            size_t *failed, unsigned threads)
{
    return sum_chunks(term, ctx, plan, n, x, 1, v, c0, c1, out, failed, threads);
}
