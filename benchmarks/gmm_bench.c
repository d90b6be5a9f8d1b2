/* gmm-bench: ADBench Gaussian mixture model (GMM) with dualrev.
 *
 * On gmm_1k_d2_K5, gmm_1k_d10_K25 and gmm_1k_d64_K100, side by side in one
 * run, times:
 *   - the objective in plain double, from each of the two sources
 *     (gmm/gmm_objective.h: scalar operations, array primitives),
 *   - the gradient of each with dualrev (gmm_gradient),
 *   - the gradient with ADOL-C, taping and gradient() on every call, from
 *     the scalar source (peer_adolc_gmm.cpp), when the build found ADOL-C,
 *   - the scalar gradient through the C++ interface, dualrev.hpp
 *     (gmm_hpp.cpp: the same source with ad::real and its operators), when
 *     the build had a C++ compiler (GMM_HAVE_HPP), side by side with the C
 *     API's; its tape must be the C API's, and its gradient the same bits,
 * and prints each gradient's time over the plain time, the ratio ADBench
 * reports.  "plain" is ADBench's objective as ADBench writes it, the scalar
 * source in double; the primitive source's double time is shown beside it.
 *
 * A tape that would pass --tape-mb is recorded in batches of points, the
 * gradient summed over them (the objective is a sum over points, see
 * gmm.h): the sizes are measured first, on one- and two-point tapes.
 * Every gradient is checked against ADBench's reference first (PASS/FAIL);
 * the program exits with status 1 if any check fails. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gmm.h"
#include "isolate.h"
#include "timer.h"

#define RTOL_F 1e-12
#define RTOL_GRAD 1e-9

static const char *const sets[] = {"gmm_1k_d2_K5", "gmm_1k_d10_K25", "gmm_1k_d64_K100"};
enum { NSETS = sizeof sets / sizeof *sets, NVERSIONS = 2 };
static const char *const version_name[NVERSIONS] = {"scalar", "primitives"};

#ifdef GMM_HAVE_HPP
/* gmm_hpp.cpp: gmm_gradient(GMM_SCALAR, ...) through dualrev.hpp; scratch
 * and batch_grad are a gmm_work's scratch and grad. */
ad_status gmm_hpp_gradient(const gmm_problem *p, void *scratch, double *batch_grad, size_t batch,
                           const double *params, double *fx, double *grad, size_t *records);
#endif

typedef struct options {
    bench_plan plan;      /* small problems */
    bench_plan big_plan;  /* d64_K100: fewer repetitions of long calls */
    size_t budget;        /* tape bytes per call before batching */
    const char *dir;
    int skip_d64, peer;
} options;

typedef struct run {
    gmm_problem p;
    gmm_reference ref;
    gmm_work w;
    double *x, *grad;
    size_t inputs;
    size_t batch[NVERSIONS];    /* points per tape, 0: all */
    size_t records[NVERSIONS];  /* records of one whole gradient, all batches */
    size_t record_bytes;
    size_t hpp_records, hpp_record_bytes;  /* the C++ scalar gradient's tape */
    int hpp_same_bits;          /* its value and gradient are the C API's, bit for bit */
    ad_status status;           /* the first failure in a timed body */
} run;

/* ---- the timed operations ---- */

static volatile double sink;

/* What a timed body runs: one version of the problem. */
typedef struct timed {
    run *r;
    gmm_version v;
} timed;

static void body_plain(void *ctx, size_t iters)
{
    const timed *c = ctx;
    run *r = c->r;
    gmm_eval e = {&r->p, &r->w, c->v, 0, r->p.n, 1};
    for (size_t k = 0; k < iters; k++) {
        bench_clobber(r->x);
        sink = gmm_objective(&e, r->x);
    }
}

static void body_gradient(void *ctx, size_t iters)
{
    const timed *c = ctx;
    run *r = c->r;
    double fx;
    for (size_t k = 0; k < iters; k++) {
        ad_status s = gmm_gradient(c->v, &r->p, &r->w, r->batch[c->v], r->x, &fx, r->grad, NULL);
        if (s != AD_OK && r->status == AD_OK)
            r->status = s;
        bench_clobber(r->grad);
    }
}

#ifdef GMM_HAVE_HPP
static void body_hpp(void *ctx, size_t iters)
{
    const timed *c = ctx;
    run *r = c->r;
    double fx;
    for (size_t k = 0; k < iters; k++) {
        ad_status s = gmm_hpp_gradient(&r->p, r->w.scratch, r->w.grad, r->batch[GMM_SCALAR], r->x,
                                       &fx, r->grad, NULL);
        if (s != AD_OK && r->status == AD_OK)
            r->status = s;
        bench_clobber(r->grad);
    }
}
#endif

/* ---- checking against the reference ---- */

typedef struct accuracy {
    double f, grad;  /* largest relative errors */
} accuracy;

static accuracy compare(const gmm_reference *ref, double fx, const double *grad)
{
    accuracy a = {fabs(fx - ref->objective) / fabs(ref->objective), 0.0};
    for (size_t e = 0; e < ref->count; e++) {
        double err = fabs(grad[ref->index[e]] - ref->grad[e]) / fabs(ref->grad[e]);
        a.grad = err > a.grad || err != err ? err : a.grad;
    }
    return a;
}

static int passes(accuracy a)
{
    return a.f <= RTOL_F && a.grad <= RTOL_GRAD;
}

static void print_check(const char *who, accuracy a)
{
    printf("  %-11s %s (objective %.1e, gradient %.1e)\n", who, passes(a) ? "PASS" : "FAIL",
           a.f, a.grad);
}

/* ---- sizes and batches ---- */

static size_t records_of(run *r, gmm_version v, size_t points)
{
    gmm_eval e = {&r->p, &r->w, v, 0, points, 1};
    ad_tape_stats st;
    double fx;
    if (ad_gradient(gmm_objective_ad, &e, r->inputs, r->x, &fx, r->grad) != AD_OK
        || ad_tape_stats_get(&st) != AD_OK)
        return 0;
    r->record_bytes = st.record_bytes;
    return st.records;
}

/* Points per tape so that a tape stays within budget bytes: from the
 * records of one- and two-point tapes (the rest is per component and
 * global, once per tape).  0: the whole problem fits. */
static size_t pick_batch(run *r, gmm_version v, size_t budget)
{
    size_t one = records_of(r, v, 1), two = r->p.n > 1 ? records_of(r, v, 2) : 2 * one;
    if (!one || !r->record_bytes)
        return 0;  /* the recording failed: the check that follows reports it */
    size_t per = two > one ? two - one : 1, base = one > per ? one - per : 0;
    size_t fit = budget / r->record_bytes;
    double whole_mb = (double)(base + r->p.n * per) * (double)r->record_bytes / 1048576.0;
    if (base + r->p.n * per <= fit)
        return 0;
    size_t b = fit > base ? (fit - base) / per : 1;
    printf("  %-11s a whole tape would take %.0f MiB: batches of %zu points\n",
           version_name[v], whole_mb, b ? b : 1);
    return b ? b : 1;
}

/* ---- ADOL-C, in a child process ---- */

typedef struct peer_result {
    int ok;  /* prepared and gradient computed */
    accuracy acc;
    bench_time t;
    size_t batch, tape_bytes;
} peer_result;

typedef struct peer_ctx {
    run *r;
    const bench_plan *plan;
    size_t budget, batch;
    int failed;
} peer_ctx;

#ifdef GMM_HAVE_ADOLC
static void body_peer(void *ctx, size_t iters)
{
    peer_ctx *pc = ctx;
    double fx;
    for (size_t k = 0; k < iters; k++) {
        pc->failed |= gmm_adolc_gradient(&pc->r->p, pc->batch, pc->r->x, &fx, pc->r->grad) != 0;
        bench_clobber(pc->r->grad);
    }
}

static void peer_child(void *ctx, void *out)
{
    peer_ctx *pc = ctx;
    peer_result *res = out;
    double fx;
    memset(res, 0, sizeof *res);
    if (gmm_adolc_prepare(&pc->r->p, pc->budget, pc->r->x, &res->batch, &res->tape_bytes)
        || gmm_adolc_gradient(&pc->r->p, res->batch, pc->r->x, &fx, pc->r->grad))
        return;
    res->acc = compare(&pc->r->ref, fx, pc->r->grad);
    pc->batch = res->batch;
    res->t = bench_measure(pc->plan, body_peer, pc);
    res->ok = !pc->failed;
}

static int measure_peer(run *r, const bench_plan *plan, size_t budget, peer_result *res)
{
    peer_ctx pc = {r, plan, budget, 0, 0};
    return run_isolated(peer_child, &pc, res, sizeof *res) == 0 && res->ok ? 0 : -1;
}

static const char *peer_name(void)
{
    return gmm_adolc_name();
}
#else
static const char *peer_name(void)
{
    return NULL;
}

static int measure_peer(run *r, const bench_plan *plan, size_t budget, peer_result *res)
{
    (void)r, (void)plan, (void)budget;
    memset(res, 0, sizeof *res);
    return -1;
}
#endif

/* ---- input ---- */

/* A file that places[] (pairs of subdirectory and suffix) says may be in
 * dir: the first that opens, into path. */
typedef struct place {
    const char *sub, *suffix;
} place;

static int find(char *path, size_t size, const char *dir, const char *name,
                const place *places, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        snprintf(path, size, "%s/%s%s%s", dir, places[i].sub, name, places[i].suffix);
        FILE *f = fopen(path, "r");
        if (f) {
            fclose(f);
            return 0;
        }
    }
    return -1;
}

static const place data_places[] = {{"data/", ".txt"}, {"", ".txt"}};
static const place ref_places[] = {
    {"reference/", "_manual.txt"}, {"", "_manual.txt"}, {"", "_subset.txt"}};

/* dir in ADBench's layout (data/, reference/) or flat, as in the tests. */
static int load(run *r, const char *dir, const char *name)
{
    char path[4096], err[GMM_ERR_SIZE];
    memset(r, 0, sizeof *r);
    if (find(path, sizeof path, dir, name, data_places, 2)) {
        fprintf(stderr, "gmm-bench: no %s.txt in %s or %s/data\n", name, dir, dir);
        return -1;
    }
    if (gmm_load(path, &r->p, err)) {
        fprintf(stderr, "gmm-bench: %s\n", err);
        return -1;
    }
    if (find(path, sizeof path, dir, name, ref_places, 3)) {
        fprintf(stderr, "gmm-bench: no reference for %s in %s\n", name, dir);
        return -1;
    }
    if (gmm_load_reference(path, &r->ref, err) || !gmm_reference_matches(&r->ref, &r->p)) {
        fprintf(stderr, "gmm-bench: %s\n", *err ? err : "the reference is for another problem");
        return -1;
    }
    r->inputs = gmm_inputs(&r->p);
    r->x = malloc(r->inputs * sizeof *r->x);
    r->grad = malloc(r->inputs * sizeof *r->grad);
    if (!r->x || !r->grad || gmm_work_init(&r->w, &r->p)) {
        fprintf(stderr, "gmm-bench: out of memory\n");
        return -1;
    }
    gmm_pack(&r->p, r->x);
    printf("\n%s: d %zu, k %zu, n %zu; %zu parameters\n  reference %s: %zu gradient entries\n",
           name, r->p.d, r->p.k, r->p.n, r->inputs, path, r->ref.count);
    return 0;
}

static void unload(run *r)
{
    free(r->x);
    free(r->grad);
    gmm_work_free(&r->w);
    gmm_reference_free(&r->ref);
    gmm_free(&r->p);
}

/* ---- measuring one problem ---- */

/* Each version's gradient is timed side by side with the plain objectives
 * (ref: ADBench's, the scalar source; plain: the version's own source), so
 * its ratios come from batches run in turn.  Not with the other version's
 * gradient, whose tape would push its tape out of the caches between
 * batches, as an optimiser's own work between gradients does not. */
typedef struct result {
    const char *name;
    bench_time ref[NVERSIONS], plain[NVERSIONS], grad[NVERSIONS];
    size_t records[NVERSIONS];
    peer_result peer;
    int have_peer;
    bench_time hpp;           /* the C++ scalar gradient, timed with the C API's */
    int have_hpp;
    size_t hpp_records, hpp_record_bytes, record_bytes;
} result;

/* Each version's gradient against the reference; the number that fail. */
static int check_versions(run *r)
{
    int failed = 0;
    for (int v = 0; v < NVERSIONS; v++) {
        double fx;
        ad_status s = gmm_gradient((gmm_version)v, &r->p, &r->w, r->batch[v], r->x, &fx, r->grad,
                                   &r->records[v]);
        accuracy a = compare(&r->ref, fx, r->grad);
        if (s != AD_OK)
            printf("  %-11s FAIL: %s\n", version_name[v], ad_strerror(s));
        else
            print_check(version_name[v], a);
        failed += s != AD_OK || !passes(a);
    }
    return failed;
}

/* The C++ scalar gradient: against the reference, and against the C API's
 * (the same bits, as many records of as many bytes); the number of failed
 * checks. */
#ifdef GMM_HAVE_HPP
static int check_hpp(run *r)
{
    double fc, fx;
    size_t records;
    ad_tape_stats st;
    double *gc = malloc(r->inputs * sizeof *gc);
    ad_status s = gc ? gmm_gradient(GMM_SCALAR, &r->p, &r->w, r->batch[GMM_SCALAR], r->x, &fc, gc,
                                    &records)
                     : AD_ENOMEM;
    if (s == AD_OK)
        s = gmm_hpp_gradient(&r->p, r->w.scratch, r->w.grad, r->batch[GMM_SCALAR], r->x, &fx,
                             r->grad, &r->hpp_records);
    if (s == AD_OK)
        s = ad_tape_stats_get(&st);
    if (s != AD_OK) {
        printf("  %-11s FAIL: %s\n", "C++ hpp", ad_strerror(s));
        free(gc);
        return 1;
    }
    r->hpp_record_bytes = st.record_bytes;
    accuracy a = compare(&r->ref, fx, r->grad);
    print_check("C++ hpp", a);
    r->hpp_same_bits = memcmp(&fx, &fc, sizeof fx) == 0 &&
                       memcmp(r->grad, gc, r->inputs * sizeof *gc) == 0 && records == r->hpp_records;
    printf("  %-11s %zu records of %zu B per gradient (C API: %zu of %zu B); value and gradient "
           "%s\n", "C++ hpp", r->hpp_records, r->hpp_record_bytes, records, r->record_bytes,
           r->hpp_same_bits ? "bitwise the C API's" : "DIFFER from the C API's: FAIL");
    free(gc);
    return !passes(a) || !r->hpp_same_bits;
}
#else
static int check_hpp(run *r)
{
    (void)r;
    return 0;
}
#endif

/* ns in a unit that keeps 4 significant digits readable. */
static void print_row(const char *what, bench_time t, double plain_ns, const char *note)
{
    char med[24], lo[24], hi[24];
    printf("  %-32s %10s %10s %10s  %7.2f", what, fmt_time(med, t.median_ns),
           fmt_time(lo, t.min_ns), fmt_time(hi, t.max_ns), t.median_ns / plain_ns);
    if (note)
        printf("   %s", note);
    printf("\n");
}

static const char *target_of(const char *name, gmm_version v)
{
    if (v == GMM_SCALAR)
        return "target <= 10";
    return strstr(name, "d2_") ? NULL : "target <= 4";
}

static void print_tapes(const run *r)
{
    for (int v = 0; v < NVERSIONS; v++) {
        double pairs = (double)(r->p.n * r->p.k);
        double mib = (double)r->records[v] * (double)r->record_bytes / 1048576.0;
        printf("  %-11s %zu records of %zu B per gradient (%.0f MiB, %.1f records per point "
               "and component), ", version_name[v], r->records[v], r->record_bytes, mib,
               (double)r->records[v] / pairs);
        if (r->batch[v])
            printf("in batches of %zu points\n", r->batch[v]);
        else
            printf("one tape\n");
    }
}

/* One problem's timings, over ADBench's objective as ADBench writes it
 * (the scalar source in double). */
static void print_set(const char *name, const result *res)
{
    const char *target = target_of(name, GMM_PRIMITIVES);
    double ref_s = res->ref[GMM_SCALAR].median_ns, ref_p = res->ref[GMM_PRIMITIVES].median_ns;
    char own[64];
    printf("\n  %-32s %10s %10s %10s  %7s\n", "", "median", "min", "max", "/ plain");
    print_row("plain double (scalar source)", res->ref[GMM_SCALAR], ref_s, "= plain");
    print_row("dualrev gradient, scalar", res->grad[GMM_SCALAR], ref_s,
              target_of(name, GMM_SCALAR));
    if (res->have_hpp) {
        snprintf(own, sizeof own, "%.3f x the C API's", res->hpp.median_ns /
                 res->grad[GMM_SCALAR].median_ns);
        print_row("dualrev.hpp gradient, scalar", res->hpp, ref_s, own);
        printf("  tape bytes per record: C API %zu, dualrev.hpp %zu; records per gradient: %zu, %zu\n",
               res->record_bytes, res->hpp_record_bytes, res->records[GMM_SCALAR],
               res->hpp_records);
    }
    print_row("plain double (scalar source)", res->ref[GMM_PRIMITIVES], ref_p,
              "= plain, timed with the primitives");
    print_row("plain double, primitive source", res->plain[GMM_PRIMITIVES], ref_p, NULL);
    snprintf(own, sizeof own, "%s%s(%.2f over its own double source)", target ? target : "",
             target ? " " : "",
             res->grad[GMM_PRIMITIVES].median_ns / res->plain[GMM_PRIMITIVES].median_ns);
    print_row("dualrev gradient, primitives", res->grad[GMM_PRIMITIVES], ref_p, own);
    if (res->have_peer) {
        print_row("ADOL-C taping + gradient", res->peer.t, ref_s, NULL);
        printf("  dualrev / ADOL-C: scalar %.3f, primitives %.3f\n",
               res->grad[GMM_SCALAR].median_ns / res->peer.t.median_ns,
               res->grad[GMM_PRIMITIVES].median_ns / res->peer.t.median_ns);
    }
}

/* Times everything on one problem; the number of failed checks. */
static int measure_set(const options *o, const char *name, const char *dir, result *res)
{
    run r;
    int failed = 0;
    memset(res, 0, sizeof *res);
    res->name = name;
    if (load(&r, dir, name)) {
        unload(&r);
        return 1;
    }
    const bench_plan *plan = r.p.d > 32 ? &o->big_plan : &o->plan;
    for (int v = 0; v < NVERSIONS; v++)
        r.batch[v] = pick_batch(&r, (gmm_version)v, o->budget);
    failed += check_versions(&r);
    print_tapes(&r);
    failed += check_hpp(&r);
    if (!failed) {
        for (int v = 0; v < NVERSIONS; v++) {
            timed c[2] = {{&r, GMM_SCALAR}, {&r, (gmm_version)v}};
            bench_body body[3] = {body_plain, body_gradient, body_plain};
            void *const ctx[3] = {&c[0], &c[1], &c[1]};
            bench_time t[3];
            size_t count = v == GMM_SCALAR ? 2 : 3;
#ifdef GMM_HAVE_HPP
            /* the C++ scalar gradient, side by side with the C API's */
            if (v == GMM_SCALAR) {
                body[2] = body_hpp;
                count = 3;
            }
#endif
            /* the scalar version's own source is the reference */
            bench_measure_side_by_side(plan, count, body, ctx, t);
            res->ref[v] = t[0];
            res->grad[v] = t[1];
            res->plain[v] = v == GMM_SCALAR ? t[0] : t[2];
            res->records[v] = r.records[v];
            if (v == GMM_SCALAR && count == 3) {
                res->hpp = t[2];
                res->have_hpp = 1;
            }
        }
        res->hpp_records = r.hpp_records;
        res->hpp_record_bytes = r.hpp_record_bytes;
        res->record_bytes = r.record_bytes;
        if (r.status != AD_OK) {
            printf("  a timed gradient failed: %s\n", ad_strerror(r.status));
            failed++;
        }
    }
    if (ad_release() != AD_OK)  /* the tape's memory goes back before ADOL-C takes its own */
        failed++;
    if (!failed && o->peer) {
        res->have_peer = measure_peer(&r, plan, o->budget, &res->peer) == 0;
        if (res->have_peer) {
            print_check("ADOL-C", res->peer.acc);
            failed += !passes(res->peer.acc);
            printf("  ADOL-C      %.0f MiB of tape per batch, ", res->peer.tape_bytes / 1048576.0);
            if (res->peer.batch < r.p.n)
                printf("in batches of %zu points\n", res->peer.batch);
            else
                printf("one tape\n");
        } else {
            printf("  ADOL-C      FAIL: it did not complete\n");
            failed++;
        }
    }
    unload(&r);
    if (!failed)
        print_set(name, res);
    return failed;
}

/* ---- summary ---- */

static void print_summary(const result *res, int n, int peer)
{
    printf("\nsummary: gradient time / plain time, plain = ADBench's objective in double "
           "(the scalar source),\ntimed side by side with each gradient (the column: with the "
           "scalar one)\n");
    printf("%-16s %10s %8s %8s %8s %13s %11s %11s %8s\n", "problem", "plain", "scalar", "prims",
           "ADOL-C", "prims/ADOL-C", "rec scalar", "rec prims", "hpp/C");
    for (int i = 0; i < n; i++) {
        char t[24];
        double plain = res[i].ref[GMM_SCALAR].median_ns;
        if (plain <= 0.0) {
            printf("%-16s (not measured)\n", res[i].name);
            continue;
        }
        printf("%-16s %10s %8.2f %8.2f", res[i].name, fmt_time(t, plain),
               res[i].grad[GMM_SCALAR].median_ns / plain,
               res[i].grad[GMM_PRIMITIVES].median_ns / res[i].ref[GMM_PRIMITIVES].median_ns);
        if (res[i].have_peer)
            printf(" %8.1f %13.3f", res[i].peer.t.median_ns / plain,
                   res[i].grad[GMM_PRIMITIVES].median_ns / res[i].peer.t.median_ns);
        else
            printf(" %8s %13s", "-", "-");
        printf(" %11zu %11zu", res[i].records[GMM_SCALAR], res[i].records[GMM_PRIMITIVES]);
        if (res[i].have_hpp)
            printf(" %8.3f\n", res[i].hpp.median_ns / res[i].grad[GMM_SCALAR].median_ns);
        else
            printf(" %8s\n", "-");
    }
    printf("targets: primitives <= 4 on d10_K25 and d64_K100, scalar <= 10\n"
           "published gradient / objective (ADBench, GMM 1k): Adept 12.6 on d10_K25 "
           "(16.9 on d64_K100), CoDiPack 14.3, ADOL-C 49 on d10_K25\n");
    if (!peer)
        printf("ADOL-C: not built (ADOL-C or a C++ compiler not found)\n");
#ifdef GMM_HAVE_HPP
    printf("hpp/C: the scalar gradient through dualrev.hpp over the C API's, timed side by side\n");
#else
    printf("hpp/C: not built (no C++ compiler)\n");
#endif
}

/* ---- options ---- */

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--reps N] [--big-reps N] [--min-ms MS] [--tape-mb MB] [--skip-d64]\n"
            "          [--no-adolc] [DIR]\n"
            "  DIR          ADBench's data/ and reference/, or a directory holding the files\n"
            "               (default: ../shared/adbench from the repository root, then\n"
            "               tests/data/adbench, whose d64_K100 reference is a subset)\n"
            "  --reps N     timed batches per measurement, at least 3; the median (7)\n"
            "  --big-reps N the same for d64_K100, whose calls take seconds (3)\n"
            "  --min-ms MS  each batch loops until it lasts this long (20)\n"
            "  --tape-mb MB larger tapes are recorded in batches of points (1024)\n"
            "  --skip-d64   leave gmm_1k_d64_K100 out\n"
            "  --no-adolc   leave ADOL-C out\n",
            argv0);
    exit(2);
}

static void parse(int argc, char **argv, options *o)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            o->plan.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--big-reps") && i + 1 < argc)
            o->big_plan.reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--min-ms") && i + 1 < argc)
            o->plan.min_rep_ns = o->big_plan.min_rep_ns = atof(argv[++i]) * 1e6;
        else if (!strcmp(argv[i], "--tape-mb") && i + 1 < argc)
            o->budget = (size_t)atol(argv[++i]) << 20;
        else if (!strcmp(argv[i], "--skip-d64"))
            o->skip_d64 = 1;
        else if (!strcmp(argv[i], "--no-adolc"))
            o->peer = 0;
        else if (argv[i][0] != '-' && !o->dir)
            o->dir = argv[i];
        else
            usage(argv[0]);
    }
    if (o->plan.reps < 3 || o->big_plan.reps < 1 || o->plan.min_rep_ns <= 0.0 || !o->budget)
        usage(argv[0]);
}

/* The shared ADBench set next to the repository, else the tests' copy. */
static const char *default_dir(const char *name)
{
    static const char *const dirs[] = {GMM_REPO_ROOT "/../shared/adbench",
                                       GMM_REPO_ROOT "/tests/data/adbench"};
    char path[4096];
    for (size_t i = 0; i < 2; i++)
        if (!find(path, sizeof path, dirs[i], name, data_places, 2))
            return dirs[i];
    return dirs[0];
}

int main(int argc, char **argv)
{
    int have_peer = peer_name() != NULL;
    options o = {{7, 20e6}, {3, 20e6}, (size_t)1024 << 20, NULL, 0, have_peer};
    result res[NSETS];
    int failed = 0, n = 0;
    parse(argc, argv, &o);
    printf("ADBench GMM: gradient of the log-likelihood with dualrev%s%s\n",
           o.peer ? " and " : "", o.peer ? peer_name() : "");
    printf("median of %d batches (%d on d64_K100), each >= %.0f ms, after a warm-up; "
           "tapes over %zu MiB in batches of points\n",
           o.plan.reps, o.big_plan.reps, o.plan.min_rep_ns * 1e-6, o.budget >> 20);
    for (int i = 0; i < NSETS; i++) {
        if (o.skip_d64 && strstr(sets[i], "d64")) {
            printf("\n%s: skipped (--skip-d64)\n", sets[i]);
            continue;
        }
        failed += measure_set(&o, sets[i], o.dir ? o.dir : default_dir(sets[i]), &res[n++]);
        fflush(stdout);
    }
    print_summary(res, n, have_peer);
    if (failed)
        fprintf(stderr, "gmm-bench: %d check(s) failed\n", failed);
    return failed ? 1 : 0;
}
