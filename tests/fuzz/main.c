/* The differential fuzzer's command line.
 *
 *   fuzz [--count N] [--seed S] [--seconds T] [--strict] [--show SEED] [--quiet]
 *        [--list-known] [--alloc N] [--alloc-only N] [--programs N] [--hook N]
 *
 * Runs programs with seeds S, S+1, ... (N of them, or for T seconds),
 * prints each failing seed with its failures and a shrunk program, counts
 * the failures of the known-defect classes (known.c; --strict counts them
 * as failures), and exits 1 if any failure is of no known class.  --show
 * prints one program, its failures and the first one shrunk (known or
 * not); --list-known prints the seeds of programs whose failures are all
 * known, with the class of the first.  --alloc N also runs every N-th
 * seed's allocation-failure campaign (alloc.c); --alloc-only N runs only
 * that.  --programs N records and replays the programs of the seeds
 * divisible by N as ad_programs (programs.c; default 1: all, 0: none). */
#define _POSIX_C_SOURCE 200809L  /* setenv */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

extern int fuzz_strict;
void shrink(prog *p, const char *driver, const char *kind);
extern const char *shrink_class;

typedef struct totals {
    long programs, failing, unknown, checked, range, unsure, second, overflow;
    long known[32];
    long loops, loop_compared, loop_excused;
    long cross[CROSS_COUNTS];
    long nest_programs, nest_nodes, nest_replayed, nest_failed, nest_unsure;
    long prog[PROG_COUNTS];
    long hook[HOOK_COUNTS];
} totals;

static double now(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void print_failure(const failure *f)
{
    printf("    %s %s", f->driver, f->kind);
    if (f->i >= 0) printf(" i=%d", f->i);
    if (f->j >= 0) printf(" j=%d", f->j);
    printf(": got %.17g, expected %.17Lg (tolerance %.3Lg)%s%s\n", f->got, f->want, f->tol,
           f->known ? " known: " : "", f->known ? f->known : "");
}

static void print_report(const report *r)
{
    int n = r->nfail < FUZZ_KEEP ? r->nfail : FUZZ_KEEP;
    for (int k = 0; k < n; k++)
        print_failure(&r->f[k]);
    if (r->nfail > n)
        printf("    ... %d failures in all\n", r->nfail);
}

/* The first failure of no known class (with any, the first failure),
 * shrunk, printed. */
static void show_shrunk(const prog *p, const report *r, int any)
{
    const failure *f = NULL;
    for (int k = 0; k < FUZZ_KEEP && k < r->nfail && !f; k++)
        if (!r->f[k].known || known_is_bug(r->f[k].known) || any)
            f = &r->f[k];
    if (!f)
        return;
    prog t;
    prog_copy(&t, p);
    shrink_class = any || known_is_bug(f->known) ? f->known : NULL;  /* a known failure keeps its class */
    shrink(&t, f->driver, f->kind);
    shrink_class = NULL;
    printf("  shrunk program (%s %s):\n", f->driver, f->kind);
    prog_print(&t, stdout);
    report r2;
    if (getenv("FUZZ_DEBUG_SHRUNK"))  /* FUZZ_DEBUG's output for the shrunk program alone */
        setenv("FUZZ_DEBUG", "1", 1);
    check_program(&t, &r2);
    print_report(&r2);
    prog_free(&t);
}

static int list_known;  /* --list-known: print the seeds of known failures too */
static long alloc_every;  /* --alloc N: every N-th seed's allocation-failure campaign (alloc.c) */
static int alloc_only;    /* --alloc-only N: that campaign, without the differential checks */

static void one(uint64_t seed, totals *T, int verbose, int quiet)
{
    prog p;
    report r;
    gen_program(&p, seed, 0);
    program_this = program_every > 0 && seed % (uint64_t)program_every == 0;
    hook_this = hook_every > 0 && seed % (uint64_t)hook_every == 0;
    if (alloc_only)
        memset(&r, 0, sizeof r);
    else
        check_program(&p, &r);
    T->programs++;
    T->checked += r.checked, T->range += r.range, T->unsure += r.unsure, T->second += r.second_skipped;
    T->overflow += r.overflow;
    T->loops += r.loops, T->loop_compared += r.loop_compared, T->loop_excused += r.loop_excused;
    for (int q = 0; q < CROSS_COUNTS; q++)
        T->cross[q] += r.cross[q];
    for (int q = 0; q < PROG_COUNTS; q++)
        T->prog[q] += r.prog[q];
    for (int q = 0; q < HOOK_COUNTS; q++)
        T->hook[q] += r.hook[q];
    T->nest_programs += r.nest_programs, T->nest_nodes += r.nest_nodes;
    T->nest_replayed += r.nest_replayed, T->nest_failed += r.nest_failed, T->nest_unsure += r.nest_unsure;
    T->failing += r.nfail > 0;
    T->unknown += r.nunknown > 0;
    if (alloc_every && seed % (uint64_t)alloc_every == 0 &&
        alloc_campaign(&p, seed, seed / (uint64_t)alloc_every, verbose))
        T->failing += !r.nfail, T->unknown += !r.nunknown;
    int n = r.nfail < FUZZ_KEEP ? r.nfail : FUZZ_KEEP;
    for (int k = 0; k < n; k++)
        for (int c = 0; c < known_count(); c++)
            if (r.f[k].known && !strcmp(r.f[k].known, known_name(c)))
                T->known[c]++;
    if (verbose || (r.nunknown && !quiet)) {
        printf("%s seed=%" PRIu64 "\n", r.nunknown ? "FAIL" : "program", seed);
        if (verbose)
            prog_print(&p, stdout);
        print_report(&r);
        if (r.nunknown || verbose)
            show_shrunk(&p, &r, verbose);
        fflush(stdout);
    } else if (r.nunknown) {
        printf("FAIL seed=%" PRIu64 "\n", seed);
    }
    if (!verbose && r.nfail && !r.nunknown && list_known)
        printf("KNOWN seed=%" PRIu64 " %s\n", seed, r.f[0].known);
    prog_free(&p);
}

int main(int argc, char **argv)
{
    uint64_t seed = 1, show = 0;
    long count = 3000;
    double seconds = 0;
    int has_show = 0, quiet = 0;
    for (int a = 1; a < argc; a++) {
        const char *o = argv[a], *v = a + 1 < argc ? argv[a + 1] : "0";
        if (!strcmp(o, "--count")) count = atol(v), a++;
        else if (!strcmp(o, "--seed")) seed = strtoull(v, NULL, 0), a++;
        else if (!strcmp(o, "--seconds")) seconds = atof(v), a++;
        else if (!strcmp(o, "--show")) show = strtoull(v, NULL, 0), has_show = 1, a++;
        else if (!strcmp(o, "--strict")) fuzz_strict = 1;
        else if (!strcmp(o, "--quiet")) quiet = 1;
        else if (!strcmp(o, "--list-known")) list_known = 1;
        else if (!strcmp(o, "--alloc")) alloc_every = atol(v), a++;
        else if (!strcmp(o, "--alloc-only")) alloc_every = atol(v), alloc_only = 1, a++;
        else if (!strcmp(o, "--programs")) program_every = atoi(v), a++;
        else if (!strcmp(o, "--hook")) hook_every = atoi(v), a++;
        else {
            fprintf(stderr, "usage: %s [--count N] [--seed S] [--seconds T] [--strict] [--show SEED] [--quiet] [--list-known] [--alloc N] [--alloc-only N] [--programs N] [--hook N]\n", argv[0]);
            return 2;
        }
    }
    totals T;
    memset(&T, 0, sizeof T);
    double t0 = now();
    if (has_show)
        one(show, &T, 1, 0);
    else
        for (long k = 0; seconds > 0 ? now() - t0 < seconds : k < count; k++)
            one(seed + (uint64_t)k, &T, 0, quiet);
    double dt = now() - t0;
    printf("fuzz: %ld programs (seeds %" PRIu64 "..) in %.1f s, %.0f/s; %ld entries checked, "
           "%ld outside a double sweep's range, %ld of order-dependent class, %ld second-order "
           "entries not checked (non-finite or far out); %ld calls AD_EOVERFLOW (allowed: an entry "
           "out of range)\n",
           T.programs, seed, dt, (double)T.programs / (dt > 0 ? dt : 1), T.checked, T.range, T.unsure,
           T.second, T.overflow);
    printf("fuzz: checkpointed loops: %ld recorded, %ld step evaluations; against the loops written out "
           "%ld entries compared, %ld not (outside an unscaled sweep's range, order-dependent class, "
           "AD_EOVERFLOW)\n", T.loops, fuzz_step_evals, T.loop_compared, T.loop_excused);
    printf("fuzz: nested derivatives: %ld programs, %ld calls (ad_gradient_r, ad_jvp_r; nested ones too), "
           "%ld of them replayed on the recording; %ld programs whose recording a nested call failed; "
           "%ld outputs off ad_gradient's (ad_jvp's) where the oracle bounds no difference\n",
           T.nest_programs, T.nest_nodes, T.nest_replayed, T.nest_failed, T.nest_unsure);
    for (int c = 0; c < known_count(); c++)
        if (T.known[c])
            printf("fuzz: known defect %s: %ld failures (%s)\n", known_name(c), T.known[c], known_why(c));
    cross_summary(T.cross);
    programs_summary(T.prog);
    hook_summary(T.hook);
    T.unknown += alloc_summary();  /* a leak found by the last check */
    printf("fuzz: %ld programs failed, %ld of them of no known class\n", T.failing, T.unknown);
    return T.unknown ? 1 : 0;
}
