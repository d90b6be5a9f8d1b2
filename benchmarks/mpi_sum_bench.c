/* mpi-sum-bench: ad_mpi_gradient_sum (dualrev/mpi.h) on a logistic
 * regression of 10^6 synthetic rows of 20 features (one term a row, as
 * sum-bench's), timed on as many ranks as mpirun starts.
 *
 *   mpirun -n K mpi-sum-bench [--rows N] [--threads T] [--reps R]
 *
 * One call to warm up (it reserves the tapes), then R calls, each between
 * two barriers, timed by the slowest rank; the median and the minimum are
 * printed, with a hash of the gradient's bits.  Last, every rank computes
 * ad_gradient_sum in one process (1 thread) and the run fails (exit 1)
 * unless the bits are the same.  benchmarks/mpi_ranks.sh alternates
 * runs on 1 and 2 ranks. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dualrev.h>
#include <dualrev/mpi.h>

enum { FEATURES = 20, PARAMS = FEATURES + 1 };

typedef struct data {
    size_t rows;
    double *x, *y;
} data;

static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static double unit(uint64_t *s)
{
    return (double)(next_u64(s) >> 11) * 0x1.0p-53;
}

static ad_real row_loss(size_t i, const ad_real *w, size_t n, void *ctx)
{
    const data *d = ctx;
    const double *x = d->x + i * FEATURES;
    ad_real score = w[FEATURES];
    (void)n;
    for (int j = 0; j < FEATURES; j++)
        score = ad_add(score, ad_mul(w[j], x[j]));
    return ad_log1p(ad_exp(ad_mul(score, -d->y[i])));
}

static int cmp(const void *a, const void *b)
{
    double u = *(const double *)a, v = *(const double *)b;
    return (u > v) - (u < v);
}

static uint64_t hash_bits(const double *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < n * sizeof *p; i++)
        h = (h ^ b[i]) * UINT64_C(0x100000001b3);
    return h;
}

int main(int argc, char **argv)
{
    int provided, rank, ranks;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    size_t rows = 1000000;
    unsigned threads = 1;
    int reps = 15;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows"))
            rows = (size_t)strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--threads"))
            threads = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
    }
    if (reps < 1 || reps > 1000)
        reps = 15;
    data d = {rows, malloc(rows * FEATURES * sizeof(double)), malloc(rows * sizeof(double))};
    if (!d.x || !d.y) {
        fprintf(stderr, "out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    uint64_t s = 20240607;
    double wtrue[PARAMS];
    for (int j = 0; j < PARAMS; j++)
        wtrue[j] = 2.0 * unit(&s) - 1.0;
    for (size_t i = 0; i < rows; i++) {
        double z = wtrue[FEATURES];
        for (int j = 0; j < FEATURES; j++) {
            d.x[i * FEATURES + (size_t)j] = 2.0 * unit(&s) - 1.0;
            z += wtrue[j] * d.x[i * FEATURES + (size_t)j];
        }
        d.y[i] = (z >= 0) == (unit(&s) >= 0.1) ? 1.0 : -1.0;
    }
    double w[PARAMS], f, g[PARAMS], *t = malloc((size_t)reps * sizeof *t);
    for (int j = 0; j < PARAMS; j++)
        w[j] = 0.1 * sin(j + 1.0);
    int bad = !t;
    ad_status st = ad_mpi_gradient_sum(MPI_COMM_WORLD, row_loss, &d, rows, PARAMS, w, &f, g,
                                       threads);
    bad |= st != AD_OK;
    for (int r = 0; r < reps && !bad; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        st = ad_mpi_gradient_sum(MPI_COMM_WORLD, row_loss, &d, rows, PARAMS, w, &f, g, threads);
        double dt = MPI_Wtime() - t0;
        MPI_Allreduce(&dt, &t[r], 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        bad |= st != AD_OK;
    }
    /* the same bits as ad_gradient_sum in one process */
    double f1, g1[PARAMS];
    bad |= ad_gradient_sum(row_loss, &d, rows, PARAMS, w, &f1, g1, 1) != AD_OK;
    bad |= memcmp(&f, &f1, sizeof f) != 0 || memcmp(g, g1, sizeof g) != 0;
    int any;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (rank == 0) {
        if (!any) {
            qsort(t, (size_t)reps, sizeof *t, cmp);
            printf("mpi-sum-bench: %zu rows x %d features, %d rank%s x %u thread%s: "
                   "median %.1f ms, min %.1f ms (%d calls); f = %.17g, "
                   "hash of f and grad %016llx; same bits as ad_gradient_sum: yes\n",
                   rows, FEATURES, ranks, ranks > 1 ? "s" : "", threads, threads > 1 ? "s" : "",
                   1e3 * t[reps / 2], 1e3 * t[0], reps, f,
                   (unsigned long long)(hash_bits(&f, 1) ^ hash_bits(g, PARAMS)));
        } else {
            printf("mpi-sum-bench: FAILED (%s, or not the same bits as ad_gradient_sum)\n",
                   ad_strerror(st));
        }
    }
    free(t);
    free(d.x);
    free(d.y);
    MPI_Finalize();
    return any;
}
