/* Several threads differentiating at once, with every driver, each thread
 * checking its own results against analytic derivatives.  Each thread has
 * its own tapes; a mix-up would show as wrong numbers, a crash, or a
 * sanitizer report (./dev.sh tsan runs this under ThreadSanitizer).
 * Jacobians and linear maps made on one thread are also checked and freed
 * on another while both threads record.
 *
 * POSIX threads (workers.h) rather than C11 ones: ThreadSanitizer, gcc 12's
 * and clang 14's alike, does not intercept thrd_create (glibc 2.34 and later
 * start the thread without its pthread_create) and crashes in the new
 * thread. */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "workers.h"

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

#define ROUNDS 150
#define MAX_N 40000
#define BIG_N 40000   /* 80000 to 160000 records: two or three chunks */

/* Counts a failure unless |got - want| is within rounding of scale, the
 * sum of the magnitudes of the terms that make up want. */
static void check_close(worker *w, int round, const char *what, size_t i, double got,
                        double want, double scale, double rtol)
{
    if (!(fabs(got - want) <= rtol * scale + 1e-300))
        worker_fail(w, "round %d: %s[%zu] = %.17g, expected %.17g", round, what, i, got, want);
}

static void check_status(worker *w, int round, const char *what, ad_status s)
{
    if (s != AD_OK)
        worker_fail(w, "round %d: %s: %s", round, what, ad_strerror(s));
}

/* ---- gradients: the objectives ---- */

enum family { QUADRATIC, LOG_SUM_EXP, SIN_COS_RING, NESTED, FAMILIES };

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

/* The gradient g of the quadratic at x's values, from an inner ad_gradient
 * call: a nested recording on the thread's next tape. */
typedef struct nested_scratch {
    double *x, *g;
    ad_status status;
} nested_scratch;

static void nested_gradient(nested_scratch *s, const ad_real *x, size_t n)
{
    double q;
    for (size_t i = 0; i < n; i++)
        s->x[i] = ad_value(x[i]);
    ad_status st = ad_gradient(quadratic, NULL, n, s->x, &q, s->g);
    if (s->status == AD_OK)
        s->status = st;
}

/* q(x) + sum_i g_i x_i with q the quadratic and g its gradient at x,
 * entering as constants: gradient 2 g. */
static ad_real nested(const ad_real *x, size_t n, void *ctx)
{
    nested_scratch *s = ctx;
    nested_gradient(s, x, n);
    ad_real sum = quadratic(x, n, NULL);
    for (size_t i = 0; i < n; i++)
        sum = ad_add(sum, ad_mul(s->g[i], x[i]));
    return sum;
}

/* want[i] and, in scale[i], the sum of the magnitudes of its terms. */
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

/* ---- Jacobians: y_j = exp(x_a) x_b + (j+1) x_c^2, a = j, b = j+1 and
 * c = 3j+2 mod n: a row reaches one to three inputs ---- */

#define MAX_JN 200  /* n and m of the Jacobians */

static void row_inputs(size_t j, size_t n, size_t *a, size_t *b, size_t *c)
{
    *a = j % n;
    *b = (j + 1) % n;
    *c = (3 * j + 2) % n;
}

static void vector_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)ctx;
    for (size_t j = 0; j < m; j++) {
        size_t a, b, c;
        row_inputs(j, n, &a, &b, &c);
        y[j] = ad_add(ad_mul(ad_exp(x[a]), x[b]), ad_mul((double)(j + 1), ad_mul(x[c], x[c])));
    }
}

/* y, the dense Jacobian J (row-major) and the magnitudes of its terms. */
static void vector_want(size_t n, size_t m, const double *x, double *y, double *J, double *scale)
{
    memset(J, 0, n * m * sizeof *J);
    memset(scale, 0, n * m * sizeof *scale);
    for (size_t j = 0; j < m; j++) {
        size_t a, b, c;
        row_inputs(j, n, &a, &b, &c);
        double e = exp(x[a]), k = (double)(j + 1);
        double terms[3] = {e * x[b], e, 2.0 * k * x[c]};
        size_t at[3] = {a, b, c};
        for (int t = 0; t < 3; t++) {
            J[j * n + at[t]] += terms[t];
            scale[j * n + at[t]] += fabs(terms[t]);
        }
        y[j] = e * x[b] + k * (x[c] * x[c]);
    }
}

static void check_y(worker *w, int round, size_t n, size_t m, const double *x, const double *y)
{
    for (size_t j = 0; j < m; j++) {
        size_t a, b, c;
        row_inputs(j, n, &a, &b, &c);
        double t1 = exp(x[a]) * x[b], t2 = (double)(j + 1) * (x[c] * x[c]);
        check_close(w, round, "y", j, y[j], t1 + t2, fabs(t1) + fabs(t2), 4e-16);
    }
}

/* jv = J v (or J^T v when transposed), each entry with its scale. */
static void apply_want(size_t n, size_t m, const double *J, const double *Js, const double *v,
                       int transposed, double *out, double *scale)
{
    size_t rows = transposed ? n : m, cols = transposed ? m : n;
    for (size_t r = 0; r < rows; r++) {
        out[r] = scale[r] = 0.0;
        for (size_t c = 0; c < cols; c++) {
            size_t k = transposed ? c * n + r : r * n + c;
            out[r] += J[k] * v[c];
            scale[r] += Js[k] * fabs(v[c]);
        }
    }
}

/* A sparse Jacobian's structure is the set of inputs each row reaches,
 * ascending, with the analytic values. */
static void check_csr(worker *w, int round, size_t n, size_t m, const ad_csr *S, const double *J,
                      const double *Js)
{
    if (S->rows != m || S->cols != n || !S->row_ptr || S->row_ptr[0] != 0 || S->row_ptr[m] != S->nnz) {
        worker_fail(w, "round %d: CSR of %zu x %zu has shape %zu x %zu, nnz %zu", round, m, n,
                    S->rows, S->cols, S->nnz);
        return;
    }
    for (size_t j = 0; j < m; j++) {
        size_t a, b, c, want[3], k = 0;
        row_inputs(j, n, &a, &b, &c);
        for (size_t i = 0; i < n; i++)  /* ascending, each once */
            if (i == a || i == b || i == c)
                want[k++] = i;
        size_t lo = S->row_ptr[j], hi = S->row_ptr[j + 1];
        if (hi < lo || hi - lo != k) {
            worker_fail(w, "round %d: CSR row %zu has %zu entries, expected %zu", round, j,
                        hi - lo, k);
            return;
        }
        for (size_t e = 0; e < k; e++) {
            if (S->col[lo + e] != want[e]) {
                worker_fail(w, "round %d: CSR row %zu column %zu, expected %zu", round, j,
                            S->col[lo + e], want[e]);
                return;
            }
            check_close(w, round, "CSR value", lo + e, S->val[lo + e], J[j * n + want[e]],
                        Js[j * n + want[e]], 1e-14);
        }
    }
}

/* ---- Hessians: the ring sin(x_a) cos(x_b) + (a+1)/8 x_a^2 x_b over
 * a = i, b = i+1 mod n, plus sum_i g_i x_i with g a nested gradient (it
 * enters as constants: it adds g to the gradient, nothing to H) ---- */

#define MAX_HN 64

static ad_real ring2(const ad_real *x, size_t n, void *ctx)
{
    nested_scratch *s = ctx;
    nested_gradient(s, x, n);
    ad_real sum = ad_const(0.0);
    for (size_t a = 0; a < n; a++) {
        size_t b = (a + 1) % n;
        double c = (double)(a + 1) / 8.0;
        sum = ad_add(sum, ad_mul(ad_sin(x[a]), ad_cos(x[b])));
        sum = ad_add(sum, ad_mul(c, ad_mul(ad_mul(x[a], x[a]), x[b])));
    }
    for (size_t i = 0; i < n; i++)
        sum = ad_add(sum, ad_mul(s->g[i], x[i]));
    return sum;
}

static void add_term(double *v, double *scale, size_t k, double t)
{
    v[k] += t;
    scale[k] += fabs(t);
}

/* The gradient and dense Hessian of ring2, with the magnitudes of their
 * terms. */
static void ring2_want(size_t n, const double *x, double *g, double *gs, double *H, double *Hs)
{
    memset(H, 0, n * n * sizeof *H);
    memset(Hs, 0, n * n * sizeof *Hs);
    for (size_t i = 0; i < n; i++) {
        g[i] = 2.0 * (double)(i + 1) * x[i];  /* the nested term's g_i */
        gs[i] = fabs(g[i]);
    }
    for (size_t a = 0; a < n; a++) {
        size_t b = (a + 1) % n;
        double c = (double)(a + 1) / 8.0, sa = sin(x[a]), ca = cos(x[a]), sb = sin(x[b]),
               cb = cos(x[b]);
        add_term(g, gs, a, ca * cb);
        add_term(g, gs, a, 2.0 * c * x[a] * x[b]);
        add_term(g, gs, b, -sa * sb);
        add_term(g, gs, b, c * x[a] * x[a]);
        add_term(H, Hs, a * n + a, -sa * cb);
        add_term(H, Hs, a * n + a, 2.0 * c * x[b]);
        add_term(H, Hs, b * n + b, -sa * cb);
        add_term(H, Hs, a * n + b, -ca * sb);
        add_term(H, Hs, a * n + b, 2.0 * c * x[a]);
        add_term(H, Hs, b * n + a, -ca * sb);
        add_term(H, Hs, b * n + a, 2.0 * c * x[a]);
    }
}

/* ---- handing results to another thread ----
 *
 * Each worker posts what it made into its own box and takes what its
 * neighbour posted: the neighbour checks it again and frees it, while the
 * maker records on.  The atomic exchange is the only synchronisation. */

/* A sparse Jacobian (J) or a linear map (L) made at x, handed to the
 * next thread. */
typedef struct parcel {
    ad_csr J;
    ad_linear *L;
    size_t n, m;
    double x[];
} parcel;

static _Atomic(parcel *) csr_box[WORKER_THREADS];
static _Atomic(parcel *) linear_box[WORKER_THREADS];

/* ---- the workers ---- */

enum driver { GRADIENT, JACOBIAN, SPARSE, HVP, HESSIAN, LINEAR, DRIVERS };

typedef struct buffers {
    int calls;
    double x[MAX_N], grad[MAX_N], want[MAX_N], scale[MAX_N], scratch_x[MAX_N], scratch_g[MAX_N];
    double y[MAX_JN], J[MAX_JN * MAX_JN], Jw[MAX_JN * MAX_JN], Js[MAX_JN * MAX_JN];
    double v[MAX_JN], out[MAX_JN], out_want[MAX_JN], out_scale[MAX_JN];
    double H[MAX_HN * MAX_HN], Hw[MAX_HN * MAX_HN], Hs[MAX_HN * MAX_HN];
} buffers;

static buffers bufs[WORKER_THREADS];

static void gradient_round(worker *w, buffers *b, int round)
{
    static const ad_objective objectives[FAMILIES] = {quadratic, log_sum_exp, sin_cos_ring, nested};
    enum family fam = (enum family)((round + w->index) % FAMILIES);
    size_t n = round % 25 == 7 ? BIG_N : 1 + (size_t)(round * 37 + w->index * 101) % 300;
    uint64_t rng = (uint64_t)(w->index * 1000 + round);
    nested_scratch scratch = {b->scratch_x, b->scratch_g, AD_OK};
    double fx;

    for (size_t i = 0; i < n; i++)
        b->x[i] = rng_uniform(&rng, -3.0, 3.0);
    ad_status s = ad_gradient(objectives[fam], &scratch, n, b->x, &fx, b->grad);
    b->calls++;
    check_status(w, round, "ad_gradient", s);
    check_status(w, round, "nested ad_gradient", scratch.status);
    if (s != AD_OK || scratch.status != AD_OK)
        return;
    analytic(fam, n, b->x, b->want, b->scale);
    for (size_t i = 0; i < n; i++)
        check_close(w, round, "grad", i, b->grad[i], b->want[i], b->scale[i], 1e-12);

    ad_tape_stats st = {0};
    if (ad_tape_stats_get(&st) != AD_OK || st.inputs != n)
        worker_fail(w, "round %d: stats.inputs = %zu, expected %zu", round, st.inputs, n);
}

/* n and m from 1 to 60, either larger (forward or reverse Jacobian
 * sweeps), and now and then up to MAX_JN. */
static void jacobian_size(worker *w, int round, uint64_t *rng, size_t *n, size_t *m)
{
    size_t top = round % 16 == 3 + w->index ? MAX_JN : 60;
    *n = 1 + (size_t)(rng_next(rng) % top);
    *m = 1 + (size_t)(rng_next(rng) % top);
}

static void jacobian_round(worker *w, buffers *b, int round)
{
    uint64_t rng = (uint64_t)(w->index * 7919 + round);
    size_t n, m;
    jacobian_size(w, round, &rng, &n, &m);
    for (size_t i = 0; i < n; i++)
        b->x[i] = rng_uniform(&rng, -2.0, 2.0);
    ad_status s = ad_jacobian(vector_fn, NULL, n, b->x, m, b->y, b->J);
    check_status(w, round, "ad_jacobian", s);
    if (s != AD_OK)
        return;
    vector_want(n, m, b->x, b->out, b->Jw, b->Js);
    check_y(w, round, n, m, b->x, b->y);
    for (size_t k = 0; k < n * m; k++)
        check_close(w, round, "J", k, b->J[k], b->Jw[k], b->Js[k], 1e-14);
}

/* A parcel for the round's random point (its sizes from jacobian_size),
 * or NULL after reporting that memory ran out. */
static parcel *parcel_new(worker *w, int round, uint64_t *rng)
{
    size_t n, m;
    jacobian_size(w, round, rng, &n, &m);
    parcel *p = calloc(1, sizeof *p + n * sizeof p->x[0]);
    if (!p) {
        worker_fail(w, "round %d: out of memory", round);
        return NULL;
    }
    p->n = n;
    p->m = m;
    for (size_t i = 0; i < n; i++)
        p->x[i] = rng_uniform(rng, -2.0, 2.0);
    return p;
}

static void sparse_round(worker *w, buffers *b, int round)
{
    uint64_t rng = (uint64_t)(w->index * 104729 + round);
    parcel *p = parcel_new(w, round, &rng);
    if (!p)
        return;
    size_t n = p->n, m = p->m;
    ad_status s = ad_sparse_jacobian(vector_fn, NULL, n, p->x, m, b->y, &p->J);
    check_status(w, round, "ad_sparse_jacobian", s);
    vector_want(n, m, p->x, b->out, b->Jw, b->Js);
    if (s == AD_OK) {
        check_y(w, round, n, m, p->x, b->y);
        check_csr(w, round, n, m, &p->J, b->Jw, b->Js);
    }
    /* Post it; one of ours the neighbour has not taken yet is freed here. */
    parcel *old = atomic_exchange(&csr_box[w->index], p);
    if (old) {
        ad_csr_free(&old->J);
        free(old);
    }
    /* The neighbour's: untouched by its later recordings, freed here (its
     * arrays become this thread's spare ones, for its next Jacobian). */
    parcel *theirs = atomic_exchange(&csr_box[(w->index + 1) % WORKER_THREADS], NULL);
    if (theirs) {
        vector_want(theirs->n, theirs->m, theirs->x, b->out, b->Jw, b->Js);
        check_csr(w, round, theirs->n, theirs->m, &theirs->J, b->Jw, b->Js);
        ad_csr_free(&theirs->J);
        if (theirs->J.row_ptr || theirs->J.nnz)
            worker_fail(w, "round %d: ad_csr_free left the CSR non-empty", round);
        free(theirs);
    }
}

static void hessian_round(worker *w, buffers *b, int round, int dense)
{
    uint64_t rng = (uint64_t)(w->index * 31337 + round);
    size_t n = 1 + (size_t)(rng_next(&rng) % (dense ? 40 : MAX_HN));
    nested_scratch scratch = {b->scratch_x, b->scratch_g, AD_OK};
    double fx;
    for (size_t i = 0; i < n; i++) {
        b->x[i] = rng_uniform(&rng, -2.0, 2.0);
        b->v[i] = rng_uniform(&rng, -1.0, 1.0);
    }
    ad_status s = dense ? ad_hessian(ring2, &scratch, n, b->x, &fx, b->grad, b->H)
                        : ad_hvp(ring2, &scratch, n, b->x, b->v, &fx, b->grad, b->out);
    check_status(w, round, dense ? "ad_hessian" : "ad_hvp", s);
    check_status(w, round, "nested ad_gradient", scratch.status);
    if (s != AD_OK || scratch.status != AD_OK)
        return;
    ring2_want(n, b->x, b->want, b->scale, b->Hw, b->Hs);
    for (size_t i = 0; i < n; i++)
        check_close(w, round, "grad", i, b->grad[i], b->want[i], b->scale[i], 1e-13);
    if (dense) {
        for (size_t k = 0; k < n * n; k++)
            check_close(w, round, "H", k, b->H[k], b->Hw[k], b->Hs[k], 1e-13);
        return;
    }
    apply_want(n, n, b->Hw, b->Hs, b->v, 0, b->out_want, b->out_scale);
    for (size_t i = 0; i < n; i++)
        check_close(w, round, "Hv", i, b->out[i], b->out_want[i], b->out_scale[i], 1e-13);
}

/* J v and J^T w from a handle, three times each, against the analytic J
 * at the handle's point. */
static void check_linear(worker *w, buffers *b, int round, const parcel *p, uint64_t *rng)
{
    size_t n = p->n, m = p->m;
    vector_want(n, m, p->x, b->y, b->Jw, b->Js);
    for (int rep = 0; rep < 3; rep++) {
        int transposed = rep % 2;
        size_t in = transposed ? m : n, out = transposed ? n : m;
        for (size_t i = 0; i < in; i++)
            b->v[i] = rng_uniform(rng, -1.0, 1.0);
        ad_status s = transposed ? ad_linear_vjp(p->L, b->v, b->out) : ad_linear_jvp(p->L, b->v, b->out);
        check_status(w, round, transposed ? "ad_linear_vjp" : "ad_linear_jvp", s);
        apply_want(n, m, b->Jw, b->Js, b->v, transposed, b->out_want, b->out_scale);
        for (size_t i = 0; i < out; i++)
            check_close(w, round, transposed ? "J^T w" : "J v", i, b->out[i], b->out_want[i],
                        b->out_scale[i], 1e-14);
    }
}

static void linear_round(worker *w, buffers *b, int round)
{
    uint64_t rng = (uint64_t)(w->index * 65537 + round);
    parcel *p = parcel_new(w, round, &rng);
    if (!p)
        return;
    size_t n = p->n, m = p->m;
    ad_status s = ad_linearize(vector_fn, NULL, n, p->x, m, b->y, &p->L);
    check_status(w, round, "ad_linearize", s);
    if (s != AD_OK) {
        free(p);
        return;
    }
    check_y(w, round, n, m, p->x, b->y);
    check_linear(w, b, round, p, &rng);
    parcel *old = atomic_exchange(&linear_box[w->index], p);
    if (old) {
        ad_linear_free(old->L);
        free(old);
    }
    /* The neighbour's handle, applied and freed on this thread. */
    parcel *theirs = atomic_exchange(&linear_box[(w->index + 1) % WORKER_THREADS], NULL);
    if (theirs) {
        check_linear(w, b, round, theirs, &rng);
        ad_linear_free(theirs->L);
        free(theirs);
    }
}

static void run_driver(worker *w, enum driver d, int round)
{
    buffers *b = &bufs[w->index];
    switch (d) {
    case GRADIENT: gradient_round(w, b, round); break;
    case JACOBIAN: jacobian_round(w, b, round); break;
    case SPARSE: sparse_round(w, b, round); break;
    case HVP: hessian_round(w, b, round, 0); break;
    case HESSIAN: hessian_round(w, b, round, 1); break;
    default: linear_round(w, b, round); break;
    }
}

static void *gradients(void *arg)
{
    worker *w = arg;
    bufs[w->index].calls = 0;
    worker_start(w);
    for (int round = 0; round < ROUNDS; round++)
        run_driver(w, GRADIENT, round);
    if (bufs[w->index].calls != ROUNDS)
        worker_fail(w, "%d gradients, expected %d", bufs[w->index].calls, ROUNDS);
    return NULL;
}

/* First every thread on the same driver at once, a block of rounds each;
 * then each on a different one. */
static void *drivers(void *arg)
{
    worker *w = arg;
    enum { BLOCK = 10 };
    worker_start(w);
    for (int round = 0; round < 2 * BLOCK * DRIVERS; round++) {
        int k = round < BLOCK * DRIVERS ? round / BLOCK : round + w->index;
        run_driver(w, (enum driver)(k % DRIVERS), round);
    }
    return NULL;
}

static void test_concurrent_gradients(void **state)
{
    (void)state;
    run_workers(gradients);
}

/* Frees what no neighbour took, here on the main thread. */
static void empty_boxes(void)
{
    for (int i = 0; i < WORKER_THREADS; i++) {
        parcel *c = atomic_exchange(&csr_box[i], NULL);
        parcel *l = atomic_exchange(&linear_box[i], NULL);
        if (c)
            ad_csr_free(&c->J);
        if (l)
            ad_linear_free(l->L);
        free(c);
        free(l);
    }
}

static void test_concurrent_drivers(void **state)
{
    (void)state;
    run_workers(drivers);
    empty_boxes();
    assert_int_equal(ad_release(), AD_OK);  /* the spare CSR arrays taken above */
}

/* Threads that live for one call each, started and joined by several
 * workers at once: thread-exit cleanup (tapes, kept CSR arrays) runs while
 * other threads record, and every thread takes a block of serial numbers. */
typedef struct child {
    size_t n;
    double x[8], y[8], grad[8];
    ad_csr J;
    ad_status s;
} child;

static void *child_main(void *arg)
{
    child *c = arg;
    double fx;
    c->s = ad_gradient(sin_cos_ring, NULL, c->n, c->x, &fx, c->grad);
    if (c->s == AD_OK)
        c->s = ad_sparse_jacobian(vector_fn, NULL, c->n, c->x, c->n, c->y, &c->J);
    ad_csr copy = c->J;  /* kept by this thread until it exits */
    ad_csr_free(&copy);
    return NULL;
}

static void *spawner(void *arg)
{
    worker *w = arg;
    buffers *b = &bufs[w->index];
    worker_start(w);
    for (int round = 0; round < 25; round++) {
        child c = {.n = 1 + (size_t)(round + w->index) % 8};
        uint64_t rng = (uint64_t)(w->index * 271 + round);
        pthread_t t;
        for (size_t i = 0; i < c.n; i++)
            c.x[i] = rng_uniform(&rng, -2.0, 2.0);
        if (pthread_create(&t, NULL, child_main, &c) != 0 || pthread_join(t, NULL) != 0) {
            worker_fail(w, "round %d: pthread_create or pthread_join failed", round);
            return NULL;
        }
        check_status(w, round, "child", c.s);
        if (c.s != AD_OK)
            continue;
        analytic(SIN_COS_RING, c.n, c.x, b->want, b->scale);
        for (size_t i = 0; i < c.n; i++)
            check_close(w, round, "child grad", i, c.grad[i], b->want[i], b->scale[i], 1e-12);
        /* The child's arrays were freed when it exited: only the numbers
         * copied before then are left to check. */
        if (c.J.rows != c.n || c.J.cols != c.n)
            worker_fail(w, "round %d: child's CSR is %zu x %zu", round, c.J.rows, c.J.cols);
        run_driver(w, (enum driver)((round + w->index) % DRIVERS), round);
    }
    return NULL;
}

static void test_short_lived_threads(void **state)
{
    (void)state;
    run_workers(spawner);
    empty_boxes();
    assert_int_equal(ad_release(), AD_OK);
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
    run_workers(gradients);
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
        cmocka_unit_test(test_concurrent_drivers),
        cmocka_unit_test(test_short_lived_threads),
        cmocka_unit_test(test_limit_is_per_thread),
        THREAD_EXIT_TEST
    };
    return cmocka_run_group_tests_name("threads", tests, NULL, NULL);
}
