/* replay-bench: recorded programs (ad_program_record, then replays) against
 * recording the function on every call (issue 35).
 *
 * A program is recorded once at x0; every timed call is at x1, a point a
 * few ulps-times-a-million away (perturb() below), as an optimiser's next
 * iterate would be.  On each ADBench input, side by side in one run (the
 * timed batches of all the rows alternate: timer.h), times:
 *
 *   GMM gmm_1k_d10_K25, the scalar source (gmm/gmm_objective.h, ADBench's
 *   loops as a user translates them; the one gmm-bench calls "scalar"):
 *     - the objective in plain double,
 *     - ad_gradient, which records and sweeps on every call,
 *     - ad_program_gradient, the replay,
 *     - ad_program_value, the replay's interpreter on constants alone (no
 *       recording, no sweep): what running the kept operations costs,
 *     - ad_linear_vjp on a kept ad_linearize of the same function: the
 *       reverse sweep alone,
 *     - ADOL-C's gradient() on a kept tape (taped once at x0 by
 *       peer_adolc_gmm.cpp's gmm_adolc_prepare, the whole problem on one
 *       tape, then gradient() at x1: a zero-order forward and a first-order
 *       reverse sweep of the tape, no taping), when the build found ADOL-C;
 *   LSTM lstm_l2_c1024: plain loss, ad_gradient, ad_program_gradient,
 *     ad_program_value, ad_linear_vjp;
 *   BA ba1_n49_m7776_p31843, the whole residual function (ba-bench's
 *     automatic Jacobian): plain residuals, ad_sparse_jacobian and
 *     ad_program_sparse_jacobian, ad_vjp and ad_program_vjp (J^T w, one
 *     reverse sweep, where the recording is the larger share),
 *     ad_program_value.
 *
 * Before timing, at x1: the replay's value and derivatives must be
 * ad_gradient's (ad_sparse_jacobian's, ad_vjp's) bit for bit -- printed,
 * and the program exits with status 1 if they are not; at x0 the GMM and
 * LSTM gradients are checked against ADBench's references, and ADOL-C's
 * kept-tape gradient at x1 against dualrev's (relative 1e-9).
 *
 * Memory: the program's bytes (ad_program_stats.bytes) over the bytes the
 * tape of the same recording holds (its records times their size, plus
 * block data: ad_tape_stats after the re-recording driver at x1), with the
 * array of values a replay allocates (replay_bytes) beside it.
 *
 * Targets (issue 35): GMM replay <= 6x the objective and faster than
 * ADOL-C's kept tape; LSTM and BA replay / re-recording <= 0.6; program
 * bytes / tape bytes <= 1.5.  The summary prints one line per problem. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ba.h"
#include "gmm.h"
#include "lstm.h"
#include "timer.h"

#define RTOL_F 1e-12
#define RTOL_GRAD 1e-9

#ifdef REPLAY_HAVE_ADOLC
/* ADOL-C's driver (adolc/drivers/drivers.h, C linkage): a zero-order
 * forward and a first-order reverse sweep of the tape kept under tag, at
 * x.  The tape is the one peer_adolc_gmm.cpp records under its tag 2. */
int gradient(short tag, int n, const double *x, double *g);
#define ADOLC_GMM_TAG 2
#endif

typedef struct options {
    bench_plan plan;
    int gmm, lstm, ba, peer;
    const char *dir;  /* ADBench's data/ and reference/, or the files */
} options;

static volatile double sink;

/* x1: each entry moved by about 1e-7 of itself (and 1e-9 where it is 0). */
static void perturb(size_t n, const double *x0, double *x1)
{
    for (size_t i = 0; i < n; i++) {
        double s = (double)((int)(i % 11) - 5);
        x1[i] = x0[i] * (1.0 + 2e-8 * s) + (x0[i] == 0.0 ? 1e-9 * s : 0.0);
    }
}

static int same_bits(const double *a, const double *b, size_t n)
{
    return n == 0 || memcmp(a, b, n * sizeof *a) == 0;
}

static double mib(size_t bytes)
{
    return (double)bytes / 1048576.0;
}

/* ---- finding the data ---- */

static int readable(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f)
        fclose(f);
    return f != NULL;
}

/* name + suffix in sub/ of dir, in dir, or in the default places (the
 * shared ADBench set next to the repository, then the tests' copy). */
static int find(char *path, size_t size, const char *dir, const char *sub, const char *name,
                const char *suffix)
{
    const char *const dirs[] = {dir, REPLAY_REPO_ROOT "/../shared/adbench",
                                REPLAY_REPO_ROOT "/tests/data/adbench"};
    for (size_t i = dir ? 0 : 1; i < 3; i++) {
        snprintf(path, size, "%s/%s/%s%s", dirs[i], sub, name, suffix);
        if (readable(path))
            return 0;
        snprintf(path, size, "%s/%s%s", dirs[i], name, suffix);
        if (readable(path))
            return 0;
        if (dir)
            break;
    }
    return -1;
}

/* ---- output ---- */

static void print_row(const char *what, bench_time t, double plain_ns, const char *note)
{
    char med[24], lo[24], hi[24];
    printf("  %-40s %10s %10s %10s  %7.2f", what, fmt_time(med, t.median_ns),
           fmt_time(lo, t.min_ns), fmt_time(hi, t.max_ns), t.median_ns / plain_ns);
    if (note)
        printf("   %s", note);
    printf("\n");
}

static void print_head(void)
{
    printf("\n  %-40s %10s %10s %10s  %7s\n", "", "median", "min", "max", "/ plain");
}

/* What a program holds against what the tape of the same recording holds. */
typedef struct memory {
    size_t program, replay, records, record_bytes, tape, reserved, ops;
    double ratio;
} memory;

static int memory_of(const ad_program *P, memory *m)
{
    ad_program_stats ps;
    ad_tape_stats ts;
    if (ad_program_stats_get(P, &ps) != AD_OK || ad_tape_stats_get(&ts) != AD_OK)
        return -1;
    *m = (memory){ps.bytes, ps.replay_bytes, ts.records, ts.record_bytes,
                  ts.records * ts.record_bytes + ts.block_bytes, ts.tape_bytes, ps.operations, 0};
    m->ratio = (double)m->program / (double)m->tape;
    return 0;
}

static void print_memory(const memory *m)
{
    printf("  memory: program %.1f MiB (%zu operations, %.1f B each) / tape %.1f MiB (%zu records"
           " of %zu B) = %.2f (target <= 1.5);\n          a replay also allocates %.1f MiB of "
           "values; the tape reserves %.1f MiB\n",
           mib(m->program), m->ops, (double)m->program / (double)m->ops, mib(m->tape), m->records,
           m->record_bytes, m->ratio, mib(m->replay), mib(m->reserved));
}

/* One summary line per problem, kept until the end. */
static char summary[4][512];
static int nsummary;

/* ==== GMM ==== */

typedef struct gmm_run {
    gmm_problem p;
    gmm_reference ref;
    gmm_work w;
    gmm_eval e;
    size_t n;
    double *x0, *x1, *g, *g2;
    ad_program *P;
    ad_linear *lin;
    ad_status status;
    int failed;  /* ADOL-C */
} gmm_run;

static void note(ad_status *status, ad_status s)
{
    if (s != AD_OK && *status == AD_OK)
        *status = s;
}

static void gmm_fn(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = gmm_objective_ad(x, n, ctx);
}

static void gmm_plain(void *ctx, size_t iters)
{
    gmm_run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        bench_clobber(r->x1);
        sink = gmm_objective(&r->e, r->x1);
    }
}

static void gmm_grad(void *ctx, size_t iters)
{
    gmm_run *r = ctx;
    double fx;
    for (size_t k = 0; k < iters; k++) {
        note(&r->status, ad_gradient(gmm_objective_ad, &r->e, r->n, r->x1, &fx, r->g));
        bench_clobber(r->g);
    }
}

static void gmm_replay(void *ctx, size_t iters)
{
    gmm_run *r = ctx;
    double fx;
    for (size_t k = 0; k < iters; k++) {
        note(&r->status, ad_program_gradient(r->P, r->x1, &fx, r->g));
        bench_clobber(r->g);
    }
}

static void gmm_value(void *ctx, size_t iters)
{
    gmm_run *r = ctx;
    double fx;
    for (size_t k = 0; k < iters; k++) {
        note(&r->status, ad_program_value(r->P, r->x1, &fx));
        sink = fx;
    }
}

static void gmm_sweep(void *ctx, size_t iters)
{
    static const double one = 1.0;
    gmm_run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        note(&r->status, ad_linear_vjp(r->lin, &one, r->g));
        bench_clobber(r->g);
    }
}

#ifdef REPLAY_HAVE_ADOLC
static void gmm_adolc(void *ctx, size_t iters)
{
    gmm_run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        r->failed |= gradient(ADOLC_GMM_TAG, (int)r->n, r->x1, r->g) < 0;
        bench_clobber(r->g);
    }
}
#endif

static double gmm_error(const gmm_reference *ref, double fx, const double *g)
{
    double err = fabs(fx - ref->objective) / fabs(ref->objective);
    if (err > RTOL_F)
        return err;
    err = 0.0;
    for (size_t e = 0; e < ref->count; e++) {
        double d = fabs(g[ref->index[e]] - ref->grad[e]) / fabs(ref->grad[e]);
        err = d > err || d != d ? d : err;
    }
    return err;
}

static int gmm_setup(gmm_run *r, const char *dir)
{
    char path[4096], err[GMM_ERR_SIZE];
    const char *name = "gmm_1k_d10_K25";
    memset(r, 0, sizeof *r);
    if (find(path, sizeof path, dir, "data", name, ".txt") || gmm_load(path, &r->p, err)) {
        fprintf(stderr, "replay-bench: %s: %s\n", name, find(path, sizeof path, dir, "data",
                                                             name, ".txt") ? "not found" : err);
        return -1;
    }
    printf("\nGMM %s: d %zu, K %zu, n %zu; %zu parameters\n", path, r->p.d, r->p.k, r->p.n,
           gmm_inputs(&r->p));
    if (find(path, sizeof path, dir, "reference", name, "_manual.txt")
        || gmm_load_reference(path, &r->ref, err) || !gmm_reference_matches(&r->ref, &r->p)) {
        fprintf(stderr, "replay-bench: no usable reference for %s\n", name);
        return -1;
    }
    r->n = gmm_inputs(&r->p);
    r->x0 = malloc(r->n * sizeof *r->x0);
    r->x1 = malloc(r->n * sizeof *r->x1);
    r->g = malloc(r->n * sizeof *r->g);
    r->g2 = malloc(r->n * sizeof *r->g2);
    if (!r->x0 || !r->x1 || !r->g || !r->g2 || gmm_work_init(&r->w, &r->p)) {
        fprintf(stderr, "replay-bench: out of memory\n");
        return -1;
    }
    gmm_pack(&r->p, r->x0);
    perturb(r->n, r->x0, r->x1);
    r->e = (gmm_eval){&r->p, &r->w, GMM_SCALAR, 0, r->p.n, 1};
    return 0;
}

static void gmm_teardown(gmm_run *r)
{
    ad_program_free(r->P);
    ad_linear_free(r->lin);
    free(r->x0);
    free(r->x1);
    free(r->g);
    free(r->g2);
    gmm_work_free(&r->w);
    gmm_reference_free(&r->ref);
    gmm_free(&r->p);
}

static int run_gmm(const options *o)
{
    gmm_run r;
    memory mem;
    double f0, f1, fr, fl;
    int failed = 0;
    if (gmm_setup(&r, o->dir)) {
        gmm_teardown(&r);
        return 1;
    }
    /* at x0: ad_gradient against ADBench's reference; the program */
    ad_status s = ad_gradient(gmm_objective_ad, &r.e, r.n, r.x0, &f0, r.g);
    double err = s == AD_OK ? gmm_error(&r.ref, f0, r.g) : INFINITY;
    printf("  ad_gradient at x0 against ADBench's reference: %s (%.1e)\n",
           err <= RTOL_GRAD ? "PASS" : "FAIL", err);
    failed += !(err <= RTOL_GRAD);
    if (s == AD_OK)
        s = ad_program_record(gmm_objective_ad, &r.e, r.n, r.x0, &r.P);
    /* at x1: the replay against ad_gradient, bit for bit; the sweep's handle */
    if (s == AD_OK)
        s = ad_program_gradient(r.P, r.x1, &fr, r.g2);
    if (s == AD_OK)
        s = ad_gradient(gmm_objective_ad, &r.e, r.n, r.x1, &f1, r.g);
    if (s == AD_OK && memory_of(r.P, &mem))
        s = AD_EINVAL;
    if (s == AD_OK)
        s = ad_linearize(gmm_fn, &r.e, r.n, r.x1, 1, &fl, &r.lin);
    if (s != AD_OK) {
        fprintf(stderr, "replay-bench: GMM: %s\n", ad_strerror(s));
        gmm_teardown(&r);
        return failed + 1;
    }
    int bitwise = same_bits(&f1, &fr, 1) && same_bits(r.g, r.g2, r.n);
    printf("  replay at x1 == ad_gradient at x1, bit for bit (value and %zu partials): %s\n", r.n,
           bitwise ? "yes" : "NO");
    failed += !bitwise;
    print_memory(&mem);
    int peer = 0;  /* ADOL-C's kept tape is timed */
#ifdef REPLAY_HAVE_ADOLC
    size_t batch = 0, adolc_bytes = 0;
    if (o->peer) {
        if (gmm_adolc_prepare(&r.p, (size_t)4 << 30, r.x0, &batch, &adolc_bytes) || batch != r.p.n
            || gradient(ADOLC_GMM_TAG, (int)r.n, r.x1, r.g2) < 0) {
            printf("  ADOL-C: FAIL (the whole problem on one kept tape did not work)\n");
            failed++;
        } else {
            double d = 0.0;
            for (size_t j = 0; j < r.n; j++) {
                double e = fabs(r.g2[j] - r.g[j]) / (fabs(r.g[j]) > 1e-300 ? fabs(r.g[j]) : 1.0);
                d = e > d || e != e ? e : d;
            }
            printf("  %s, tape of %.0f MiB kept from x0; its gradient at x1 against dualrev's: "
                   "%s (%.1e)\n", gmm_adolc_name(), mib(adolc_bytes),
                   d <= RTOL_GRAD ? "PASS" : "FAIL", d);
            failed += !(d <= RTOL_GRAD);
            peer = d <= RTOL_GRAD;
        }
    }
#endif
    if (failed) {
        gmm_teardown(&r);
        return failed;
    }
    bench_body body[6] = {gmm_plain, gmm_grad, gmm_replay, gmm_value, gmm_sweep, NULL};
    void *const ctx[6] = {&r, &r, &r, &r, &r, &r};
    bench_time t[6];
    size_t count = 5;
#ifdef REPLAY_HAVE_ADOLC
    if (peer)
        body[count++] = gmm_adolc;
#else
    (void)peer;
#endif
    bench_measure_side_by_side(&o->plan, count, body, ctx, t);
    if (r.status != AD_OK || r.failed) {
        fprintf(stderr, "replay-bench: GMM: a timed call failed: %s\n",
                r.failed ? "ADOL-C" : ad_strerror(r.status));
        gmm_teardown(&r);
        return 1;
    }
    double plain = t[0].median_ns;
    char buf[96];
    print_head();
    print_row("objective, plain double", t[0], plain, "= plain");
    print_row("ad_gradient (records every call)", t[1], plain, NULL);
    snprintf(buf, sizeof buf, "target <= 6; %.2f of ad_gradient", t[2].median_ns / t[1].median_ns);
    print_row("ad_program_gradient (replay)", t[2], plain, buf);
    print_row("ad_program_value (interpreter alone)", t[3], plain, NULL);
    print_row("ad_linear_vjp (sweep of a kept tape)", t[4], plain, NULL);
    if (count > 5) {
        snprintf(buf, sizeof buf, "replay / ADOL-C %.2f (target < 1)",
                 t[2].median_ns / t[5].median_ns);
        print_row("ADOL-C gradient() on a kept tape", t[5], plain, buf);
    }
    printf("  per record (%zu): objective %.2f ns, ad_gradient %.2f, replay %.2f, interpreter "
           "%.2f, sweep %.2f\n", mem.records, plain / (double)mem.records,
           t[1].median_ns / (double)mem.records, t[2].median_ns / (double)mem.records,
           t[3].median_ns / (double)mem.records, t[4].median_ns / (double)mem.records);
    char adolc[64] = "ADOL-C kept tape -";
    if (count > 5)
        snprintf(adolc, sizeof adolc, "ADOL-C kept tape %.2fx (replay/ADOL-C %.2f)",
                 t[5].median_ns / plain, t[2].median_ns / t[5].median_ns);
    snprintf(summary[nsummary++], sizeof summary[0],
             "GMM d10_K25   objective %s; ad_gradient %.2fx, replay %.2fx (<= 6), %s; "
             "replay/ad_gradient %.2f; bytes program/tape %.2f; bitwise %s",
             fmt_time(buf, plain), t[1].median_ns / plain, t[2].median_ns / plain, adolc,
             t[2].median_ns / t[1].median_ns, mem.ratio, bitwise ? "yes" : "NO");
    gmm_teardown(&r);
    return 0;
}

/* ==== LSTM ==== */

typedef struct lstm_run {
    lstm_problem p;
    lstm_reference ref;
    lstm_work w;
    lstm_eval e;
    size_t n;
    double *x0, *x1, *g, *g2;
    ad_program *P;
    ad_linear *lin;
    ad_status status;
} lstm_run;

static void lstm_plain(void *ctx, size_t iters)
{
    lstm_run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        bench_clobber(r->x1);
        sink = lstm_objective(&r->e, r->x1);
    }
}

static void lstm_grad(void *ctx, size_t iters)
{
    lstm_run *r = ctx;
    double fx;
    for (size_t k = 0; k < iters; k++) {
        note(&r->status, ad_gradient(lstm_objective_ad, &r->e, r->n, r->x1, &fx, r->g));
        bench_clobber(r->g);
    }
}

static void lstm_replay(void *ctx, size_t iters)
{
    lstm_run *r = ctx;
    double fx;
    for (size_t k = 0; k < iters; k++) {
        note(&r->status, ad_program_gradient(r->P, r->x1, &fx, r->g));
        bench_clobber(r->g);
    }
}

static void lstm_value(void *ctx, size_t iters)
{
    lstm_run *r = ctx;
    double fx;
    for (size_t k = 0; k < iters; k++) {
        note(&r->status, ad_program_value(r->P, r->x1, &fx));
        sink = fx;
    }
}

static void lstm_sweep(void *ctx, size_t iters)
{
    static const double one = 1.0;
    lstm_run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        note(&r->status, ad_linear_vjp(r->lin, &one, r->g));
        bench_clobber(r->g);
    }
}

static int lstm_setup(lstm_run *r, const char *dir)
{
    char path[4096], err[LSTM_ERR_SIZE];
    const char *name = "lstm_l2_c1024";
    memset(r, 0, sizeof *r);
    if (find(path, sizeof path, dir, "data", name, ".txt") || lstm_load(path, &r->p, err)) {
        fprintf(stderr, "replay-bench: cannot load %s\n", name);
        return -1;
    }
    r->n = lstm_inputs(&r->p);
    printf("\nLSTM %s: l %zu, c %zu, b %zu; %zu parameters\n", path, r->p.l, r->p.c, r->p.b,
           r->n);
    if (find(path, sizeof path, dir, "reference", name, "_manual.txt")
        || lstm_load_reference(path, r->n, &r->ref, err) || !lstm_reference_matches(&r->ref, &r->p)) {
        fprintf(stderr, "replay-bench: no usable reference for %s\n", name);
        return -1;
    }
    r->x0 = malloc(r->n * sizeof *r->x0);
    r->x1 = malloc(r->n * sizeof *r->x1);
    r->g = malloc(r->n * sizeof *r->g);
    r->g2 = malloc(r->n * sizeof *r->g2);
    if (!r->x0 || !r->x1 || !r->g || !r->g2 || lstm_work_init(&r->w, &r->p)) {
        fprintf(stderr, "replay-bench: out of memory\n");
        return -1;
    }
    lstm_pack(&r->p, r->x0);
    perturb(r->n, r->x0, r->x1);
    r->e = (lstm_eval){&r->p, &r->w};
    return 0;
}

static void lstm_teardown(lstm_run *r)
{
    ad_program_free(r->P);
    ad_linear_free(r->lin);
    free(r->x0);
    free(r->x1);
    free(r->g);
    free(r->g2);
    lstm_work_free(&r->w);
    lstm_reference_free(&r->ref);
    lstm_free(&r->p);
}

static double lstm_error(const lstm_reference *ref, double fx, const double *g)
{
    double err = fabs(fx - ref->objective) / fabs(ref->objective);
    if (err > RTOL_F)
        return err;
    err = 0.0;
    for (size_t j = 0; j < ref->count; j++) {
        double d = fabs(g[j] - ref->grad[j]);
        d = d == 0.0 ? 0.0 : ref->grad[j] != 0.0 ? d / fabs(ref->grad[j]) : INFINITY;
        err = d > err || d != d ? d : err;
    }
    return err;
}

static int run_lstm(const options *o)
{
    lstm_run r;
    memory mem;
    double f0, f1, fr, fl;
    int failed = 0;
    if (lstm_setup(&r, o->dir)) {
        lstm_teardown(&r);
        return 1;
    }
    ad_status s = ad_gradient(lstm_objective_ad, &r.e, r.n, r.x0, &f0, r.g);
    double err = s == AD_OK ? lstm_error(&r.ref, f0, r.g) : INFINITY;
    printf("  ad_gradient at x0 against ADBench's reference: %s (%.1e)\n",
           err <= RTOL_GRAD ? "PASS" : "FAIL", err);
    failed += !(err <= RTOL_GRAD);
    if (s == AD_OK)
        s = ad_program_record(lstm_objective_ad, &r.e, r.n, r.x0, &r.P);
    if (s == AD_OK)
        s = ad_program_gradient(r.P, r.x1, &fr, r.g2);
    if (s == AD_OK)
        s = ad_gradient(lstm_objective_ad, &r.e, r.n, r.x1, &f1, r.g);
    if (s == AD_OK && memory_of(r.P, &mem))
        s = AD_EINVAL;
    if (s == AD_OK)
        s = ad_linearize(lstm_function_ad, &r.e, r.n, r.x1, 1, &fl, &r.lin);
    if (s != AD_OK) {
        fprintf(stderr, "replay-bench: LSTM: %s\n", ad_strerror(s));
        lstm_teardown(&r);
        return failed + 1;
    }
    int bitwise = same_bits(&f1, &fr, 1) && same_bits(r.g, r.g2, r.n);
    printf("  replay at x1 == ad_gradient at x1, bit for bit (value and %zu partials): %s\n", r.n,
           bitwise ? "yes" : "NO");
    failed += !bitwise;
    print_memory(&mem);
    if (failed) {
        lstm_teardown(&r);
        return failed;
    }
    const bench_body body[5] = {lstm_plain, lstm_grad, lstm_replay, lstm_value, lstm_sweep};
    void *const ctx[5] = {&r, &r, &r, &r, &r};
    bench_time t[5];
    bench_measure_side_by_side(&o->plan, 5, body, ctx, t);
    if (r.status != AD_OK) {
        fprintf(stderr, "replay-bench: LSTM: a timed call failed: %s\n", ad_strerror(r.status));
        lstm_teardown(&r);
        return 1;
    }
    double plain = t[0].median_ns;
    char buf[96];
    print_head();
    print_row("loss, plain double", t[0], plain, "= plain");
    print_row("ad_gradient (records every call)", t[1], plain, NULL);
    snprintf(buf, sizeof buf, "%.2f of ad_gradient (target <= 0.6)",
             t[2].median_ns / t[1].median_ns);
    print_row("ad_program_gradient (replay)", t[2], plain, buf);
    print_row("ad_program_value (interpreter alone)", t[3], plain, NULL);
    print_row("ad_linear_vjp (sweep of a kept tape)", t[4], plain, NULL);
    snprintf(summary[nsummary++], sizeof summary[0],
             "LSTM l2_c1024 objective %s; ad_gradient %.2fx, replay %.2fx; "
             "replay/ad_gradient %.2f (<= 0.6); bytes program/tape %.2f; bitwise %s",
             fmt_time(buf, plain), t[1].median_ns / plain, t[2].median_ns / plain,
             t[2].median_ns / t[1].median_ns, mem.ratio, bitwise ? "yes" : "NO");
    lstm_teardown(&r);
    return 0;
}

/* ==== BA ==== */

typedef struct ba_run {
    ba_problem p;
    size_t n, m;
    double *x0, *x1, *y, *w, *wj;
    ad_program *P;
    ad_linear *lin;
    ad_status status;
} ba_run;

static void ba_plain(void *ctx, size_t iters)
{
    ba_run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        ba_residuals(&r->p, r->x1, r->y);
        bench_clobber(r->y);
    }
}

static void ba_sparse(void *ctx, size_t iters)
{
    ba_run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        ad_csr J;
        note(&r->status, ad_sparse_jacobian(ba_residuals_ad, &r->p, r->n, r->x1, r->m, r->y, &J));
        bench_clobber(J.val);
        ad_csr_free(&J);
    }
}

static void ba_replay_sparse(void *ctx, size_t iters)
{
    ba_run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        ad_csr J;
        note(&r->status, ad_program_sparse_jacobian(r->P, r->x1, r->y, &J));
        bench_clobber(J.val);
        ad_csr_free(&J);
    }
}

static void ba_vjp(void *ctx, size_t iters)
{
    ba_run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        note(&r->status, ad_vjp(ba_residuals_ad, &r->p, r->n, r->x1, r->m, r->w, r->y, r->wj));
        bench_clobber(r->wj);
    }
}

static void ba_replay_vjp(void *ctx, size_t iters)
{
    ba_run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        note(&r->status, ad_program_vjp(r->P, r->x1, r->w, r->y, r->wj));
        bench_clobber(r->wj);
    }
}

static void ba_sweep(void *ctx, size_t iters)
{
    ba_run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        note(&r->status, ad_linear_vjp(r->lin, r->w, r->wj));
        bench_clobber(r->wj);
    }
}

static void ba_value(void *ctx, size_t iters)
{
    ba_run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        note(&r->status, ad_program_value(r->P, r->x1, r->y));
        bench_clobber(r->y);
    }
}

static int same_csr(const ad_csr *a, const ad_csr *b)
{
    return a->rows == b->rows && a->cols == b->cols && a->nnz == b->nnz
           && !memcmp(a->row_ptr, b->row_ptr, (a->rows + 1) * sizeof *a->row_ptr)
           && !memcmp(a->col, b->col, a->nnz * sizeof *a->col) && same_bits(a->val, b->val, a->nnz);
}

static int run_ba(const options *o)
{
    ba_run r;
    memory mem;
    char path[4096];
    const char *name = "ba1_n49_m7776_p31843";
    memset(&r, 0, sizeof r);
    if (find(path, sizeof path, o->dir, "data", name, ".txt") || ba_load(path, &r.p)) {
        fprintf(stderr, "replay-bench: cannot load %s\n", name);
        return 1;
    }
    r.n = ba_inputs(&r.p);
    r.m = ba_outputs(&r.p);
    printf("\nBA %s: %zu cameras, %zu points, %zu observations; %zu inputs, %zu residuals\n",
           path, r.p.n_cams, r.p.n_pts, r.p.n_obs, r.n, r.m);
    r.x0 = malloc(r.n * sizeof *r.x0);
    r.x1 = malloc(r.n * sizeof *r.x1);
    r.wj = malloc(2 * r.n * sizeof *r.wj);
    r.y = malloc(3 * r.m * sizeof *r.y);
    int failed = 0;
    ad_status s = r.x0 && r.x1 && r.wj && r.y ? AD_OK : AD_ENOMEM;
    ad_csr J1 = {0}, J2 = {0};
    if (s == AD_OK) {
        ba_pack(&r.p, r.x0);
        perturb(r.n, r.x0, r.x1);
        r.w = r.y + r.m;
        ba_residuals(&r.p, r.x0, r.w);  /* w: the residuals at x0, J^T w a Gauss-Newton gradient */
        s = ad_program_record_function(ba_residuals_ad, &r.p, r.n, r.m, r.x0, &r.P);
    }
    double *y2 = r.y + 2 * r.m, *wj2 = r.wj + r.n;
    int sparse_same = 0, vjp_same = 0;
    if (s == AD_OK)
        s = ad_program_sparse_jacobian(r.P, r.x1, y2, &J2);
    if (s == AD_OK)
        s = ad_sparse_jacobian(ba_residuals_ad, &r.p, r.n, r.x1, r.m, r.y, &J1);
    if (s == AD_OK)
        sparse_same = same_csr(&J1, &J2) && same_bits(r.y, y2, r.m);
    if (s == AD_OK)
        s = ad_program_vjp(r.P, r.x1, r.w, y2, wj2);
    if (s == AD_OK)
        s = ad_vjp(ba_residuals_ad, &r.p, r.n, r.x1, r.m, r.w, r.y, r.wj);
    if (s == AD_OK && memory_of(r.P, &mem))
        s = AD_EINVAL;
    if (s == AD_OK)
        vjp_same = same_bits(r.y, y2, r.m) && same_bits(r.wj, wj2, r.n);
    if (s == AD_OK)
        s = ad_linearize(ba_residuals_ad, &r.p, r.n, r.x1, r.m, y2, &r.lin);
    if (s == AD_OK)
        printf("  Jacobian %zu x %zu, %zu nonzeros\n", J1.rows, J1.cols, J1.nnz);
    ad_csr_free(&J1);
    ad_csr_free(&J2);
    if (s != AD_OK) {
        fprintf(stderr, "replay-bench: BA: %s\n", ad_strerror(s));
        failed = 1;
        goto out;
    }
    printf("  replay at x1 == re-recording at x1, bit for bit: sparse Jacobian (y, structure, "
           "values) %s, vjp (y, J^T w) %s\n", sparse_same ? "yes" : "NO", vjp_same ? "yes" : "NO");
    failed += !sparse_same + !vjp_same;
    print_memory(&mem);
    if (failed)
        goto out;
    /* two groups, each timed with the plain residuals and its ratios over
     * that group's plain time: the sparse Jacobians; the vjps, with the
     * interpreter and the sweep alone */
    const bench_body body[3] = {ba_plain, ba_sparse, ba_replay_sparse};
    const bench_body body2[5] = {ba_plain, ba_vjp, ba_replay_vjp, ba_value, ba_sweep};
    void *const ctx[5] = {&r, &r, &r, &r, &r};
    bench_time t[3], tv[5];
    bench_measure_side_by_side(&o->plan, 3, body, ctx, t);
    bench_measure_side_by_side(&o->plan, 5, body2, ctx, tv);
    if (r.status != AD_OK) {
        fprintf(stderr, "replay-bench: BA: a timed call failed: %s\n", ad_strerror(r.status));
        failed = 1;
        goto out;
    }
    double plain = t[0].median_ns, plain2 = tv[0].median_ns;
    char buf[96];
    print_head();
    print_row("residuals, plain double", t[0], plain, "= plain");
    print_row("ad_sparse_jacobian (records every call)", t[1], plain, NULL);
    snprintf(buf, sizeof buf, "%.2f of ad_sparse_jacobian (target <= 0.6)",
             t[2].median_ns / t[1].median_ns);
    print_row("ad_program_sparse_jacobian (replay)", t[2], plain, buf);
    print_row("residuals, plain double", tv[0], plain2, "= plain of the rows below");
    print_row("ad_vjp (records every call)", tv[1], plain2, NULL);
    snprintf(buf, sizeof buf, "%.2f of ad_vjp", tv[2].median_ns / tv[1].median_ns);
    print_row("ad_program_vjp (replay)", tv[2], plain2, buf);
    print_row("ad_program_value (interpreter alone)", tv[3], plain2, NULL);
    print_row("ad_linear_vjp (sweep of a kept tape)", tv[4], plain2, NULL);
    snprintf(summary[nsummary++], sizeof summary[0],
             "BA ba1        residuals %s; sparse Jacobian %.2fx, replay %.2fx, replay/re-recording "
             "%.2f (<= 0.6); vjp %.2fx, replay %.2fx, %.2f; bytes program/tape %.2f; bitwise %s",
             fmt_time(buf, plain), t[1].median_ns / plain, t[2].median_ns / plain,
             t[2].median_ns / t[1].median_ns, tv[1].median_ns / plain2,
             tv[2].median_ns / plain2, tv[2].median_ns / tv[1].median_ns, mem.ratio,
             sparse_same && vjp_same ? "yes" : "NO");
out:
    ad_program_free(r.P);
    ad_linear_free(r.lin);
    free(r.x0);
    free(r.x1);
    free(r.wj);
    free(r.y);
    ba_free(&r.p);
    return failed;
}

/* ==== main ==== */

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--reps N] [--min-ms MS] [--only gmm|lstm|ba] [--no-adolc] [DIR]\n"
            "  DIR          ADBench's data/ and reference/, or a directory holding the files\n"
            "               (default: ../shared/adbench from the repository root, then\n"
            "               tests/data/adbench)\n"
            "  --reps N     timed batches per measurement, at least 3; the median (11)\n"
            "  --min-ms MS  each batch loops until it lasts this long (20)\n"
            "  --only P     one problem\n"
            "  --no-adolc   leave ADOL-C out\n",
            argv0);
    exit(2);
}

int main(int argc, char **argv)
{
    options o = {{11, 20e6}, 1, 1, 1, 0, NULL};
#ifdef REPLAY_HAVE_ADOLC
    o.peer = 1;
#endif
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            o.plan.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-ms") && i + 1 < argc)
            o.plan.min_rep_ns = atof(argv[++i]) * 1e6;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            const char *p = argv[++i];
            o.gmm = !strcmp(p, "gmm");
            o.lstm = !strcmp(p, "lstm");
            o.ba = !strcmp(p, "ba");
            if (!o.gmm && !o.lstm && !o.ba)
                usage(argv[0]);
        } else if (!strcmp(argv[i], "--no-adolc"))
            o.peer = 0;
        else if (argv[i][0] != '-' && !o.dir)
            o.dir = argv[i];
        else
            usage(argv[0]);
    }
    if (o.plan.reps < 3 || !(o.plan.min_rep_ns > 0.0))
        usage(argv[0]);
    printf("replay-bench: recorded programs (recorded once at x0, replayed at x1) against "
           "recording every call\nmedian of %d batches, each >= %.0f ms, after a warm-up; the "
           "rows of a problem alternate\n", o.plan.reps, o.plan.min_rep_ns * 1e-6);
    int failed = 0;
    if (o.gmm)
        failed += run_gmm(&o);
    fflush(stdout);
    failed += ad_release() != AD_OK;
    if (o.lstm)
        failed += run_lstm(&o);
    fflush(stdout);
    failed += ad_release() != AD_OK;
    if (o.ba)
        failed += run_ba(&o);
    printf("\nsummary (time / plain objective; replay at x1 of a program recorded at x0):\n");
    for (int i = 0; i < nsummary; i++)
        printf("%s\n", summary[i]);
#ifndef REPLAY_HAVE_ADOLC
    if (o.gmm)
        printf("ADOL-C: not built (ADOL-C or a C++ compiler not found)\n");
#endif
    if (failed)
        fprintf(stderr, "replay-bench: %d check(s) failed\n", failed);
    return failed ? 1 : 0;
}
