/* lstm-bench: ADBench LSTM with dualrev.
 *
 * On one ADBench LSTM input (lstm_l2_c1024 by default), side by side in one
 * run, times:
 *   - the loss in plain double (lstm/lstm_objective.h instantiated for
 *     double: ADBench's objective as ADBench writes it),
 *   - ad_gradient, which records the loss and sweeps it on every call, as
 *     an optimiser calls it,
 *   - the reverse sweep alone: ad_linearize once, then ad_linear_vjp with
 *     cotangent 1 on the kept recording, the part of a gradient that does
 *     not re-run the function,
 * and prints each time over the plain time, the ratio ADBench reports, with
 * the records one gradient writes.  Both gradients are checked against
 * ADBench's reference first (PASS/FAIL); the program exits with status 1,
 * without timing, if a check fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lstm.h"
#include "timer.h"

#define DEFAULT_STEM "lstm_l2_c1024"
#define RTOL_F 1e-12
#define RTOL_GRAD 1e-9

typedef struct run {
    lstm_problem p;
    lstm_reference ref;
    lstm_work w;
    double *x, *grad, *vjp_grad;
    size_t inputs;
    ad_linear *lin;     /* the recording ad_linear_vjp sweeps */
    ad_tape_stats st;   /* after one ad_gradient from a released tape */
    ad_status status;   /* the first failure in a timed body */
} run;

/* ---- the three timed operations ---- */

static volatile double sink;

static void body_plain(void *ctx, size_t iters)
{
    run *r = ctx;
    lstm_eval e = {&r->p, &r->w};
    for (size_t k = 0; k < iters; k++) {
        bench_clobber(r->x);
        sink = lstm_objective(&e, r->x);
    }
}

static void body_gradient(void *ctx, size_t iters)
{
    run *r = ctx;
    lstm_eval e = {&r->p, &r->w};
    double fx;
    for (size_t k = 0; k < iters; k++) {
        ad_status s = ad_gradient(lstm_objective_ad, &e, r->inputs, r->x, &fx, r->grad);
        if (s != AD_OK && r->status == AD_OK)
            r->status = s;
        bench_clobber(r->grad);
    }
}

static void body_sweep(void *ctx, size_t iters)
{
    static const double one = 1.0;
    run *r = ctx;
    for (size_t k = 0; k < iters; k++) {
        ad_status s = ad_linear_vjp(r->lin, &one, r->vjp_grad);
        if (s != AD_OK && r->status == AD_OK)
            r->status = s;
        bench_clobber(r->vjp_grad);
    }
}

/* ---- checking against the reference ---- */

typedef struct accuracy {
    double f, grad;  /* largest relative errors */
} accuracy;

/* |got - want| / |want|; where the reference is exactly 0 (an input that
 * never meets a nonzero bit of the text), only 0 is right. */
static double rel_err(double got, double want)
{
    double d = fabs(got - want);
    if (d == 0.0)
        return 0.0;
    return want != 0.0 ? d / fabs(want) : INFINITY;
}

static accuracy compare(const lstm_reference *ref, double fx, const double *grad)
{
    accuracy a = {rel_err(fx, ref->objective), 0.0};
    for (size_t j = 0; grad && j < ref->count; j++) {
        double err = rel_err(grad[j], ref->grad[j]);
        a.grad = err > a.grad || err != err ? err : a.grad;
    }
    return a;
}

static int passes(accuracy a)
{
    return a.f <= RTOL_F && a.grad <= RTOL_GRAD;
}

/* One line of the check; 1 if it failed. */
static int report(const char *who, ad_status s, accuracy a, int with_grad)
{
    if (s != AD_OK) {
        printf("  %-15s FAIL: %s\n", who, ad_strerror(s));
        return 1;
    }
    if (!with_grad)
        a.grad = 0.0;
    printf("  %-15s %s (objective %.1e", who, passes(a) ? "PASS" : "FAIL", a.f);
    if (with_grad)
        printf(", gradient %.1e", a.grad);
    printf(")\n");
    return !passes(a);
}

/* The plain loss, ad_gradient and ad_linearize + ad_linear_vjp against the
 * reference; keeps the linearisation for timing.  The number that fail. */
static int check(run *r)
{
    lstm_eval e = {&r->p, &r->w};
    double fx = NAN, fy = NAN;
    int failed = report("plain double", AD_OK, compare(&r->ref, lstm_objective(&e, r->x), NULL),
                        0);
    ad_status s = ad_release();  /* so that the reserved sizes below are this problem's */
    if (s == AD_OK)
        s = ad_gradient(lstm_objective_ad, &e, r->inputs, r->x, &fx, r->grad);
    if (s == AD_OK)
        s = ad_tape_stats_get(&r->st);
    failed += report("ad_gradient", s, compare(&r->ref, fx, r->grad), 1);
    s = ad_linearize(lstm_function_ad, &e, r->inputs, r->x, 1, &fy, &r->lin);
    if (s == AD_OK)
        s = ad_linear_vjp(r->lin, &(const double){1.0}, r->vjp_grad);
    failed += report("ad_linear_vjp", s, compare(&r->ref, fy, r->vjp_grad), 1);
    if (!failed)
        printf("  ad_linear_vjp's value and gradient are ad_gradient's bit for bit: %s\n",
               fx == fy && !memcmp(r->grad, r->vjp_grad, r->inputs * sizeof *r->grad) ? "yes"
                                                                                    : "no");
    return failed;
}

/* ---- input ---- */

static int readable(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f)
        fclose(f);
    return f != NULL;
}

/* The data file: arg itself, or DEFAULT_STEM in the directory arg or its
 * data/; without arg, in the shared ADBench set next to the repository,
 * then in the repository's copy. */
static int find_data(const char *arg, char *path, size_t size)
{
    const char *const dirs[] = {LSTM_REPO_ROOT "/../shared/adbench/data",
                                LSTM_REPO_ROOT "/tests/data/adbench"};
    if (arg) {
        snprintf(path, size, "%s/" DEFAULT_STEM ".txt", arg);
        if (readable(path))
            return 0;
        snprintf(path, size, "%s/data/" DEFAULT_STEM ".txt", arg);
        if (readable(path))
            return 0;
        snprintf(path, size, "%s", arg);
        return 0;  /* the loader says what is wrong with it */
    }
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, size, "%s/" DEFAULT_STEM ".txt", dirs[i]);
        if (readable(path))
            return 0;
    }
    return -1;
}

/* STEM_manual.txt beside the data file DIR/STEM.txt (the tests' copy), or
 * in DIR/../reference (ADBench's layout). */
static int find_reference(const char *data, char *path, size_t size)
{
    const char *slash = strrchr(data, '/');
    const char *base = slash ? slash + 1 : data;
    int dir_len = (int)(base - data), stem_len = (int)strcspn(base, ".");
    snprintf(path, size, "%.*s%.*s_manual.txt", dir_len, data, stem_len, base);
    if (readable(path))
        return 0;
    snprintf(path, size, "%.*s../reference/%.*s_manual.txt", dir_len, data, stem_len, base);
    return readable(path) ? 0 : -1;
}

static int setup(run *r, const char *arg)
{
    char path[4096], ref_path[4096], err[LSTM_ERR_SIZE];
    memset(r, 0, sizeof *r);
    if (find_data(arg, path, sizeof path)) {
        fprintf(stderr, "lstm-bench: no " DEFAULT_STEM ".txt in " LSTM_REPO_ROOT
                        "/../shared/adbench/data or " LSTM_REPO_ROOT "/tests/data/adbench\n");
        return -1;
    }
    if (lstm_load(path, &r->p, err)) {
        fprintf(stderr, "lstm-bench: %s\n", err);
        return -1;
    }
    r->inputs = lstm_inputs(&r->p);
    if (find_reference(path, ref_path, sizeof ref_path)) {
        fprintf(stderr, "lstm-bench: no reference (*_manual.txt) for %s\n", path);
        return -1;
    }
    if (lstm_load_reference(ref_path, r->inputs, &r->ref, err)
        || !lstm_reference_matches(&r->ref, &r->p)) {
        fprintf(stderr, "lstm-bench: %s\n", *err ? err : "the reference is for another problem");
        return -1;
    }
    r->x = malloc(r->inputs * sizeof *r->x);
    r->grad = malloc(r->inputs * sizeof *r->grad);
    r->vjp_grad = malloc(r->inputs * sizeof *r->vjp_grad);
    if (!r->x || !r->grad || !r->vjp_grad || lstm_work_init(&r->w, &r->p)) {
        fprintf(stderr, "lstm-bench: out of memory\n");
        return -1;
    }
    lstm_pack(&r->p, r->x);
    printf("%s: l %zu, c %zu, b %zu; %zu parameters\n  reference %s\n", path, r->p.l, r->p.c,
           r->p.b, r->inputs, ref_path);
    return 0;
}

static void teardown(run *r)
{
    ad_linear_free(r->lin);
    free(r->x);
    free(r->grad);
    free(r->vjp_grad);
    lstm_work_free(&r->w);
    lstm_reference_free(&r->ref);
    lstm_free(&r->p);
}

/* ---- output ---- */

static double mib(size_t bytes)
{
    return (double)bytes / 1048576.0;
}

/* What one gradient writes (records and block data) and what the thread
 * keeps reserved for it; the kept linearisation holds as much again. */
static void print_tape(const run *r)
{
    const ad_tape_stats *st = &r->st;
    size_t written = st->records * st->record_bytes + st->block_bytes;
    printf("  tape: %zu records of %zu B per call (%.1f per time step), %zu bytes (%.1f MiB);\n"
           "        reserved %.1f MiB of tape, %.1f MiB of cotangents\n",
           st->records, st->record_bytes, (double)st->records / (double)(r->p.c - 1), written,
           mib(written), mib(st->tape_bytes), mib(st->adjoint_bytes));
}

/* ns in a unit that keeps 3 significant digits readable. */
static void print_row(const char *what, bench_time t, double plain_ns)
{
    char med[24], lo[24], hi[24];
    printf("  %-36s %10s %10s %10s  %7.2f\n", what, fmt_time(med, t.median_ns),
           fmt_time(lo, t.min_ns), fmt_time(hi, t.max_ns), t.median_ns / plain_ns);
}

static void print_times(const bench_time t[3], const ad_tape_stats *st)
{
    char buf[24];
    double plain = t[0].median_ns, rest = t[1].median_ns - t[2].median_ns;
    printf("\n  %-36s %10s %10s %10s  %7s\n", "", "median", "min", "max", "/ plain");
    print_row("loss, plain double", t[0], plain);
    print_row("ad_gradient (records every call)", t[1], plain);
    print_row("ad_linear_vjp (sweep of a kept tape)", t[2], plain);
    /* a difference of medians: an estimate, not a measurement */
    printf("  %-36s %10s %32.2f\n", "gradient - sweep (recording, set-up)", fmt_time(buf, rest),
           rest / plain);
    printf("  per record of the tape: gradient %.2f ns, sweep %.2f ns, plain loss %.2f ns\n",
           t[1].median_ns / (double)st->records, t[2].median_ns / (double)st->records,
           plain / (double)st->records);
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--reps N] [--min-ms MS] [PATH]\n"
            "  PATH        an LSTM data file, or a directory holding " DEFAULT_STEM ".txt\n"
            "              (or data/" DEFAULT_STEM ".txt); the reference STEM_manual.txt is\n"
            "              read from beside the data file or from ../reference/\n"
            "              (default: ../shared/adbench/data from the repository root,\n"
            "              then tests/data/adbench)\n"
            "  --reps N    timed batches per measurement, at least 3; the median (11)\n"
            "  --min-ms MS each batch loops until it lasts this long (20)\n",
            argv0);
    exit(2);
}

static const char *parse(int argc, char **argv, bench_plan *plan)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            plan->reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-ms") && i + 1 < argc)
            plan->min_rep_ns = atof(argv[++i]) * 1e6;
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            usage(argv[0]);
    }
    if (plan->reps < 3 || !(plan->min_rep_ns > 0.0))
        usage(argv[0]);
    return path;
}

int main(int argc, char **argv)
{
    bench_plan plan = {11, 20e6};
    const char *path = parse(argc, argv, &plan);
    run r;
    printf("ADBench LSTM: gradient of the loss with dualrev\n");
    if (setup(&r, path)) {
        teardown(&r);
        return 1;
    }
    int failed = check(&r);
    print_tape(&r);
    if (failed) {
        fprintf(stderr, "lstm-bench: %d check(s) failed; nothing timed\n", failed);
        teardown(&r);
        return 1;
    }
    printf("median of %d batches, each >= %.0f ms, after a warm-up; the three alternate\n",
           plan.reps, plan.min_rep_ns * 1e-6);
    /* side by side: batches of the three alternate, so their ratios come
     * from the same stretch of the machine's load */
    const bench_body body[3] = {body_plain, body_gradient, body_sweep};
    void *const ctx[3] = {&r, &r, &r};
    bench_time t[3];
    bench_measure_side_by_side(&plan, 3, body, ctx, t);
    print_times(t, &r.st);
    if (r.status != AD_OK) {
        fprintf(stderr, "lstm-bench: a timed call failed: %s\n", ad_strerror(r.status));
        failed = 1;
    }
    teardown(&r);
    return failed;
}
