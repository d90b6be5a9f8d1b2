/* dualrev-bench: the benchmark run.  See README.md in this directory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "peer.h"

#define COUNT(a) (sizeof (a) / sizeof *(a))

static grad_row programs[] = {
    {.prog = PROG_SCALAR_MULT, .n = 1, .with_peer = 1},
    {.prog = PROG_DOT, .n = 1000, .with_peer = 1},
    {.prog = PROG_DOT, .n = 10000, .with_peer = 1},
    {.prog = PROG_DOT, .n = 1000000, .with_peer = 1},
    {.prog = PROG_SUM_MAT_VEC, .n = 10000, .with_peer = 1},
    {.prog = PROG_SUM_MAT_VEC, .n = 1000000, .with_peer = 1},
    {.prog = PROG_DOT_ARRAY, .n = 1000, .with_peer = 1},
    {.prog = PROG_DOT_ARRAY, .n = 10000, .with_peer = 1},
    {.prog = PROG_DOT_ARRAY, .n = 1000000, .with_peer = 1},
    {.prog = PROG_SUM_MAT_VEC_ARRAY, .n = 10000, .with_peer = 1},
    {.prog = PROG_SUM_MAT_VEC_ARRAY, .n = 1000000, .with_peer = 1},
    {.prog = PROG_ROTATE, .n = 1, .with_peer = 1},
};

static grad_row tbad[] = {
    {.prog = PROG_T_BAD, .n = 100000, .with_peer = 1},
    {.prog = PROG_T_BAD, .n = 1000000, .with_peer = 1},
    {.prog = PROG_T_BAD, .n = 10000000, .with_peer = 1},
};

/* Points: tapes of 0.1, 1.5, 24 and 195 MiB. */
static grad_row cache[] = {
    {.prog = PROG_GMM_QX, .n = 1, .with_peer = 1},
    {.prog = PROG_GMM_QX, .n = 16, .with_peer = 1},
    {.prog = PROG_GMM_QX, .n = 256, .with_peer = 1},
    {.prog = PROG_GMM_QX, .n = 2048, .with_peer = 1},
};

static mem_row memory[] = {
    {.prog = PROG_DOT, .n = 1000000},
    {.prog = PROG_SUM_MAT_VEC, .n = 1000000},
    {.prog = PROG_DOT_ARRAY, .n = 1000000},
    {.prog = PROG_SUM_MAT_VEC_ARRAY, .n = 1000000},
    {.prog = PROG_T_BAD, .n = 100000},
    {.prog = PROG_T_BAD, .n = 1000000},
    {.prog = PROG_T_BAD, .n = 10000000},
};

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--reps N] [--min-ms MS] [--max-n N] [--out DIR] [--only SECTION]\n"
            "  --reps N    timed batches per measurement; the median is reported (11)\n"
            "  --min-ms MS each batch loops until it lasts this long (20)\n"
            "  --max-n N   skip the sizes above N (a quick run: --max-n 100000)\n"
            "  --out DIR   write programs.tsv, tbad.tsv, memory.tsv, primitives.tsv,\n"
            "              hessian.tsv and cache.tsv there\n"
            "  --only primitives  run only the array-primitives section\n"
            "  --only hessian     run only the second-order section (ad_hvp, ad_hessian)\n"
            "  --only cache       run only GMM's inner loop on tapes of growing size\n"
            "  --only sparse-hessian  run only the sparse-Hessian section\n",
            argv0);
    exit(2);
}

/* --only: one section alone. */
enum { ONLY_NONE, ONLY_PRIMITIVES, ONLY_HESSIAN, ONLY_CACHE, ONLY_SPARSE_HESSIAN };

static void parse(int argc, char **argv, bench_ctx *b, size_t *max_n, int *only)
{
    /* Every option takes a value: walk them in pairs. */
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage(argv[0]);
        if (!strcmp(a, "--reps"))
            b->plan.reps = atoi(v);
        else if (!strcmp(a, "--min-ms"))
            b->plan.min_rep_ns = atof(v) * 1e6;
        else if (!strcmp(a, "--max-n"))
            *max_n = (size_t)strtoull(v, NULL, 10);
        else if (!strcmp(a, "--out"))
            b->out_dir = v;
        else if (!strcmp(a, "--only") && !strcmp(v, "primitives"))
            *only = ONLY_PRIMITIVES;
        else if (!strcmp(a, "--only") && !strcmp(v, "hessian"))
            *only = ONLY_HESSIAN;
        else if (!strcmp(a, "--only") && !strcmp(v, "cache"))
            *only = ONLY_CACHE;
        else if (!strcmp(a, "--only") && !strcmp(v, "sparse-hessian"))
            *only = ONLY_SPARSE_HESSIAN;
        else
            usage(argv[0]);
    }
    if (b->plan.reps < 1 || b->plan.min_rep_ns <= 0.0)
        usage(argv[0]);
}

/* Moves the rows of size <= max_n to the front of rows; kept counts them. */
#define KEEP_UP_TO(rows, max_n, kept)                   \
    do {                                                \
        (kept) = 0;                                     \
        for (size_t i_ = 0; i_ < COUNT(rows); i_++)     \
            if ((rows)[i_].n <= (max_n))                \
                (rows)[(kept)++] = (rows)[i_];          \
    } while (0)

/* A wrong gradient makes its timing meaningless: fail the run. */
static int all_checked(const grad_row *rows, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (strcmp(rows[i].check, "ok") != 0)
            return 0;
    return 1;
}

static void print_banner(const bench_ctx *b)
{
    printf("dualrev benchmarks (compiler %s, %s)\n", __VERSION__,
#ifdef __OPTIMIZE__
           "optimised"
#else
           "NOT optimised: rebuild with buildtype=release for meaningful numbers"
#endif
    );
    printf("comparison: %s\n\n", b->peer ? b->peer : "none (this build found no ADOL-C)");
}

int main(int argc, char **argv)
{
    bench_ctx b = {{11, 20e6}, NULL, peer_name()};
    size_t max_n = (size_t)-1;
    int only = ONLY_NONE;
    parse(argc, argv, &b, &max_n, &only);
    print_banner(&b);
    if (only == ONLY_PRIMITIVES)
        return section_primitives(&b, max_n) ? 0 : 1;
    if (only == ONLY_HESSIAN)
        return section_hessian(&b, max_n) ? 0 : 1;
    if (only == ONLY_SPARSE_HESSIAN)
        return section_sparse_hessian(&b, max_n) ? 0 : 1;
    size_t np, nt, nc, nm;
    KEEP_UP_TO(cache, max_n, nc);
    if (only == ONLY_CACHE) {
        section_cache(&b, cache, nc);
        return all_checked(cache, nc) ? 0 : 1;
    }
    KEEP_UP_TO(programs, max_n, np);
    KEEP_UP_TO(tbad, max_n, nt);
    KEEP_UP_TO(memory, max_n, nm);
    section_programs(&b, programs, np);
    section_tbad(&b, tbad, nt);
    section_memory(&b, memory, nm);
    section_targets(&b, programs, np, memory, nm);
    int prims_ok = section_primitives(&b, max_n);
    int hess_ok = section_hessian(&b, max_n);
    int sparse_hess_ok = section_sparse_hessian(&b, max_n);
    section_cache(&b, cache, nc);
    return all_checked(programs, np) && all_checked(tbad, nt) && all_checked(cache, nc) &&
                   prims_ok && hess_ok && sparse_hess_ok ? 0 : 1;
}
