/* mpi_logistic: one logistic regression fitted by several processes (MPI),
 * each with several threads (ad_mpi_gradient_sum), driven by liblbfgs.
 *
 * The objective is a sum over the rows of a data set, plus a regulariser:
 *
 *   f(w, b) = (1/N) sum_i log(1 + exp(-y_i (w.x_i + b))) + (lambda/2) |w|^2
 *
 * ad_mpi_gradient_sum (dualrev/mpi.h) cuts the rows into chunks as
 * ad_gradient_sum would, gives each rank a contiguous range of chunks (on
 * its own threads), sends every chunk's value and gradient to every rank
 * and adds them in chunk order.  Every rank then has the same value and
 * gradient, the same bits as ad_gradient_sum in one process whatever the
 * number of ranks and threads, and runs the same L-BFGS on them: the
 * ranks take identical steps in lockstep, with no other communication,
 * and rank 0 prints.
 *
 * The data are synthetic and deterministic, made row by row from the row's
 * index.  Which chunks a rank computes is the library's choice, so every
 * rank holds every row here (a real program would map its data file);
 * nothing is sent but the chunks' results.
 *
 * Usage: mpirun -np P mpi_logistic [--rows N] [--threads T] [--check]
 *   --rows N     rows in the whole data set (default 200000)
 *   --threads T  threads per rank for ad_mpi_gradient_sum (default: the
 *                cores the rank may run on; 0: every core of the machine)
 *   --check      every rank also fits the whole data set alone (what
 *                `mpirun -np 1` computes, on MPI_COMM_SELF), all at the
 *                same time, and the run fails unless the two optima are
 *                the same bits (and agree to 1e-8, which says how far
 *                apart they are if not)
 * It prints a hash of the optimum's bits, the same for every number of
 * ranks and threads.
 * Exit status 0 on convergence, 1 on a failure or a failed check.
 *
 * Cores: run one rank per machine (or per socket) and let its threads use
 * the cores.  Open MPI binds each rank to one core by default, and the
 * rank's threads would then share that core: give a rank its cores with
 * `--map-by ppr:1:node:pe=C` (C cores each) or `--bind-to none`. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dualrev.h>
#include <dualrev/mpi.h>
#include <lbfgs.h>
#include <mpi.h>
#ifdef __linux__
#include <sched.h>
#endif

/* liblbfgs must work in double, as ad_mpi_gradient_sum does. */
_Static_assert(_Generic((lbfgsfloatval_t)0, double: 1, default: 0),
               "liblbfgs must be built with LBFGS_FLOAT == 64");

enum { FEATURES = 20, PARAMS = FEATURES + 1 }; /* the weights, then the bias */
#define LAMBDA 1e-3
#define FLIP_RATE 0.10
#define SEED UINT64_C(20240607)
#define CHECK_RTOL 1e-8

/* ---- the data: any row, on any rank ---- */

/* SplitMix64.  Its state is a counter, so row i's numbers, which start at
 * draw i * (FEATURES + 1) of one long stream, are reached in one step. */
#define GOLDEN UINT64_C(0x9E3779B97F4A7C15)

static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += GOLDEN);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static double next_unit(uint64_t *state) /* uniform on [0, 1) */
{
    return (double)(next_u64(state) >> 11) * 0x1.0p-53;
}

/* The hidden model the labels come from, the same on every rank.  Feature
 * scales spread over a decade, as raw data's do, give L-BFGS some work. */
typedef struct truth {
    double scale[FEATURES], w[PARAMS];
} truth;

static void make_truth(truth *t)
{
    uint64_t s = ~SEED; /* a stream of its own */
    for (int j = 0; j < FEATURES; j++)
        t->scale[j] = 0.3 + 2.7 * next_unit(&s);
    for (int j = 0; j < PARAMS; j++)
        t->w[j] = 4.0 * next_unit(&s) - 2.0;
    for (int j = 0; j < FEATURES; j++)
        t->w[j] /= t->scale[j];
}

/* Row i: its features into x, its label (+1 or -1, 10% flipped) returned. */
static double make_row(const truth *t, size_t i, double *x)
{
    uint64_t s = SEED + (uint64_t)i * (FEATURES + 1) * GOLDEN;
    double z = t->w[FEATURES];
    for (int j = 0; j < FEATURES; j++) {
        x[j] = (2.0 * next_unit(&s) - 1.0) * t->scale[j];
        z += t->w[j] * x[j];
    }
    double y = z >= 0.0 ? 1.0 : -1.0;
    return next_unit(&s) < FLIP_RATE ? -y : y;
}

/* Rows [first, first + count) of the data set. */
typedef struct shard {
    size_t first, count;
    double *x; /* count x FEATURES */
    double *y; /* count */
} shard;

static int make_shard(shard *sh, const truth *t, size_t first, size_t count)
{
    sh->first = first;
    sh->count = count;
    sh->x = malloc((count ? count : 1) * FEATURES * sizeof *sh->x);
    sh->y = malloc((count ? count : 1) * sizeof *sh->y);
    if (!sh->x || !sh->y)
        return -1;
    for (size_t i = 0; i < count; i++)
        sh->y[i] = make_row(t, first + i, sh->x + i * FEATURES);
    return 0;
}

static void free_shard(shard *sh)
{
    free(sh->x);
    free(sh->y);
}

/* ---- the objective: one term per row ---- */

/* log(1 + e^t), written as max(t, 0) + log1p(e^-|t|) so that e^t never
 * overflows for a badly classified row. */
static ad_real softplus(ad_real t)
{
    return ad_add(ad_fmax(t, 0.0), ad_log1p(ad_exp(ad_neg(ad_fabs(t)))));
}

/* Row i's loss (i counts from the shard's first row, 0 here: the whole
 * data set).  ad_mpi_gradient_sum calls it from several threads at once:
 * it only reads the shard. */
static ad_real row_loss(size_t i, const ad_real *w, size_t n, void *ctx)
{
    const shard *sh = ctx;
    const double *x = sh->x + i * FEATURES;
    ad_real score = w[FEATURES]; /* the bias */
    (void)n;
    for (int j = 0; j < FEATURES; j++)
        score = ad_add(score, ad_mul(w[j], x[j]));
    return softplus(ad_mul(score, -sh->y[i]));
}

/* ---- the distributed evaluation ---- */

typedef struct fit {
    MPI_Comm comm;      /* the ranks that share the sum */
    const shard *data;  /* the whole data set, on every rank */
    size_t rows;        /* its rows */
    unsigned threads;   /* per rank, for ad_mpi_gradient_sum */
    double *sum;        /* PARAMS + 1: gradient, value */
    int evaluations, iterations;
    int failed;         /* ad_mpi_gradient_sum failed (on every rank alike) */
} fit;

/* liblbfgs's evaluate callback.  Every rank calls it with the same w and
 * gets the same f and g back, to the bit, so every rank's L-BFGS stays in
 * step; main checks at the end that it did. */
static lbfgsfloatval_t evaluate(void *instance, const lbfgsfloatval_t *w, lbfgsfloatval_t *g,
                                const int n, const lbfgsfloatval_t step)
{
    fit *ft = instance;
    double *sum = ft->sum;
    (void)step;
    /* the sum of the rows' losses and its gradient, shared out over the
     * ranks; a failure on any rank is every rank's, in the same call, so
     * that they all stop together */
    ad_status s = ad_mpi_gradient_sum(ft->comm, row_loss, (void *)ft->data, ft->rows, PARAMS, w,
                                      &sum[PARAMS], sum, ft->threads);
    if (s != AD_OK)
        fprintf(stderr, "ad_mpi_gradient_sum failed: %s\n", ad_strerror(s));
    ft->evaluations++;
    ft->failed = s != AD_OK;
    /* the mean, and the regulariser, which every rank adds alike (the
     * bias is not penalised) */
    double N = (double)ft->rows, f = sum[PARAMS] / N;
    for (int j = 0; j < n; j++)
        g[j] = sum[j] / N;
    for (int j = 0; j < FEATURES; j++) {
        f += 0.5 * LAMBDA * w[j] * w[j];
        g[j] += LAMBDA * w[j];
    }
    return ft->failed ? NAN : f;
}

/* Counts the iterations; stops every rank at once after a failed
 * evaluation (they all saw it). */
static int progress(void *instance, const lbfgsfloatval_t *w, const lbfgsfloatval_t *g,
                    const lbfgsfloatval_t fx, const lbfgsfloatval_t wnorm,
                    const lbfgsfloatval_t gnorm, const lbfgsfloatval_t step, int n, int k,
                    int ls)
{
    fit *ft = instance;
    (void)w, (void)g, (void)fx, (void)wnorm, (void)gnorm, (void)step, (void)n, (void)ls;
    ft->iterations = k;
    return ft->failed;
}

typedef struct outcome {
    int code;        /* lbfgs()'s return */
    int iterations, evaluations;
    double f, seconds;
    lbfgsfloatval_t *w;
} outcome;

/* L-BFGS from w = 0 over the ranks of comm. */
static int solve(MPI_Comm comm, const shard *data, unsigned threads, outcome *out)
{
    double sum[PARAMS + 1];
    fit ft = {comm, data, data->count, threads, sum, 0, 0, 0};
    lbfgs_parameter_t param;
    lbfgs_parameter_init(&param);
    /* Stop at |g| <= 1e-8 max(1, |w|).  Much tighter cannot be reached: the
     * line search compares values of f, and near the optimum they change
     * by less than their rounding. */
    param.epsilon = 1e-8;
    param.max_iterations = 1000;
    out->w = lbfgs_malloc(PARAMS);
    if (!out->w) { /* the other ranks would wait for this one forever */
        fprintf(stderr, "out of memory\n");
        MPI_Abort(comm, 1);
    }
    for (int j = 0; j < PARAMS; j++)
        out->w[j] = 0.0;
    MPI_Barrier(comm);
    double t0 = MPI_Wtime();
    out->code = lbfgs(PARAMS, out->w, &out->f, evaluate, progress, &ft, &param);
    out->seconds = MPI_Wtime() - t0;
    out->evaluations = ft.evaluations;
    out->iterations = ft.iterations;
    return ft.failed ? -1 : 0;
}

/* ---- main ---- */

/* The cores this process may run on, which mpirun's binding decides;
 * 0 (every core, ad_mpi_gradient_sum's own choice) where that is not known. */
static unsigned usable_cores(void)
{
#ifdef __linux__
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        return (unsigned)CPU_COUNT(&set);
#endif
    return 0;
}

typedef struct options {
    size_t rows;
    unsigned threads;
    int check;
} options;

static int parse(int argc, char **argv, options *o)
{
    *o = (options){200000, usable_cores(), 0};
    for (int i = 1; i < argc; i++) {
        char *end = NULL;
        if (!strcmp(argv[i], "--rows") && i + 1 < argc)
            o->rows = (size_t)strtoull(argv[++i], &end, 10);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            o->threads = (unsigned)strtoul(argv[++i], &end, 10);
        else if (!strcmp(argv[i], "--check"))
            o->check = 1;
        else
            return -1;
        if (end && *end)
            return -1;
    }
    return o->rows > 0 ? 0 : -1;
}

static double max_rel_diff(const double *a, const double *b, int n)
{
    double d = 0.0, big = 0.0;
    for (int j = 0; j < n; j++) {
        d = fmax(d, fabs(a[j] - b[j]));
        big = fmax(big, fabs(b[j]));
    }
    return d / big;
}

/* Whether every rank ended with rank 0's weights, to the bit: the ranks
 * ran in lockstep only if the reductions gave them all the same numbers. */
static int same_on_every_rank(const double *w)
{
    double w0[PARAMS];
    memcpy(w0, w, sizeof w0);
    MPI_Bcast(w0, PARAMS, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    int differ = memcmp(w0, w, sizeof w0) != 0, any;
    MPI_Allreduce(&differ, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    return !any;
}

static void print_result(const char *title, const outcome *r, int ranks, unsigned threads)
{
    printf("%s: %d rank%s x %u thread%s%s\n", title, ranks, ranks > 1 ? "s" : "", threads,
           threads == 1 ? "" : "s", threads ? "" : " (0: every core of the machine)");
    printf("  lbfgs returned %d (%s): %d iterations, %d evaluations, %.3f s\n", r->code,
           r->code == LBFGS_SUCCESS ? "converged" : r->code >= 0 ? "stopped" : "error",
           r->iterations, r->evaluations, r->seconds);
    printf("  f = %.15f\n  w =", r->f);
    for (int j = 0; j < PARAMS; j++)
        printf("%s % .10f", j % 7 == 0 && j ? "\n     " : "", r->w[j]);
    printf("  (the last: bias)\n");
}

/* The whole data set, on every rank.  0, or -1 on every rank if any rank
 * is out of memory. */
static int all_rows(shard *data, const truth *t, size_t rows)
{
    int bad = make_shard(data, t, 0, rows) != 0, any_bad;
    MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    return any_bad ? -1 : 0;
}

/* FNV-1a of the bits of n doubles: the same for every number of ranks and
 * threads, which the test compares between runs. */
static uint64_t hash_bits(const double *p, int n)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < (size_t)n * sizeof *p; i++)
        h = (h ^ b[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* The check: the whole data set fitted by this rank alone (on
 * MPI_COMM_SELF, as `mpirun -np 1` would fit it), against w.  Every rank
 * makes this fit at the same time, rather than one rank working while the
 * others wait for it in MPI (which spins on their cores), and compares it
 * with its own w; rank 0 prints.  0 if the two optima are the same bits
 * (every evaluation gave the same bits, so L-BFGS took the same steps). */
static int check_alone(const shard *data, const options *o, const double *w, int rank)
{
    outcome one = {0, 0, 0, 0, 0, NULL};
    int status = 1;
    if (solve(MPI_COMM_SELF, data, o->threads, &one) != 0 || one.code < 0) {
        printf("check: the one-rank fit FAILED on rank %d\n", rank);
    } else {
        double d = max_rel_diff(w, one.w, PARAMS);
        int same = memcmp(w, one.w, PARAMS * sizeof *w) == 0;
        status = !(d <= CHECK_RTOL) || !same;
        if (rank == 0) {
            print_result("check, each rank alone", &one, 1, o->threads);
            printf("check: max |w - w_one| / max |w_one| = %.2e (<= %g), the same bits: %s: %s\n",
                   d, CHECK_RTOL, same ? "yes" : "NO", status ? "FAILED" : "ok");
        }
    }
    if (one.w) /* NULL if the fit could not start */
        lbfgs_free(one.w);
    return status;
}

int main(int argc, char **argv)
{
    /* dualrev's worker threads never call MPI; only this thread does. */
    int provided, rank, ranks, status = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    options o;
    if (parse(argc, argv, &o)) {
        if (rank == 0)
            fprintf(stderr, "usage: %s [--rows N] [--threads T] [--check]\n", argv[0]);
        MPI_Finalize();
        return 2;
    }
    truth t;
    make_truth(&t);
    shard data;
    if (all_rows(&data, &t, o.rows) != 0) {
        if (rank == 0)
            fprintf(stderr, "out of memory for the data\n");
        free_shard(&data);
        MPI_Finalize();
        return 1;
    }
    if (rank == 0)
        printf("logistic regression: %zu rows, %d features + bias, lambda = %g; "
               "about %zu rows per rank\n", o.rows, FEATURES, LAMBDA, o.rows / (size_t)ranks);

    /* the fit, by every rank */
    outcome all = {0, 0, 0, 0, 0, NULL};
    if (solve(MPI_COMM_WORLD, &data, o.threads, &all) != 0 || all.code < 0)
        status = 1;
    int lockstep = same_on_every_rank(all.w);
    double slowest;
    MPI_Reduce(&all.seconds, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    all.seconds = slowest;
    if (rank == 0) {
        print_result("fit", &all, ranks, o.threads);
        printf("  every rank has the same weights, to the bit: %s\n", lockstep ? "yes" : "NO");
        printf("  hash of the weights' bits: %016llx (the same for every number of ranks "
               "and threads)\n", (unsigned long long)hash_bits(all.w, PARAMS));
    }
    if (!lockstep)
        status = 1;
    if (o.check && check_alone(&data, &o, all.w, rank) != 0)
        status = 1;

    /* every rank exits with the same status */
    int any_status;
    MPI_Allreduce(&status, &any_status, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (rank == 0)
        printf("result: %s\n", any_status ? "FAILED" : "converged");
    free_shard(&data);
    lbfgs_free(all.w);
    MPI_Finalize();
    return any_status;
}
