/* mpi-heat-bench: the gradient of examples/mpi_heat.h's heat objective
 * (a 1-D heat equation split over the ranks, halo exchanges inside the
 * checkpointed steps) by ad_mpi_gradient, timed on as many ranks as
 * mpirun starts; and the communication records' share of one step's tape.
 *
 *   mpirun -n K mpi-heat-bench [--cells N] [--steps S] [--snapshots C] [--reps R]
 *
 * Defaults: 4000 cells, 1000 steps, snapshots 0 (the library's default),
 * 9 calls.  theta is fixed (not the example's fit): log 0.6 plus a small
 * wave, so that every cell's gradient differs.
 *
 * Timing: one call to warm up (it reserves the tapes), then R calls, each
 * after a barrier, timed by the slowest rank (an MPI_Allreduce of MAX of
 * each rank's time); median and minimum.  The same for the forward pass
 * alone (heat_objective on constants: no recording, the exchanges carry
 * values), which gives the gradient/forward ratio.  On 1 rank only, also
 * ad_gradient of the same code with comm = MPI_COMM_NULL (the whole field
 * in one process, no MPI in the objective) and its forward pass: the
 * collective machinery's overhead.
 *
 * Tape: the records one step makes, recorded alone (state and k active
 * inputs, the outputs summed and, on comm, reduced), less the same
 * objective without the step; on MPI_COMM_WORLD and on MPI_COMM_NULL with
 * the same slice (u = 0 and k the end cell's beyond it: no exchange
 * records).  The difference is the exchanges' records and bytes.  Also
 * ad_tape_stats_get's step_bytes after a gradient (the largest tape one
 * replayed step took), on comm and in one process.
 *
 * Check: every rank also takes the whole field's gradient in one process
 * (MPI_COMM_NULL) and compares its slice: f and every entry to 1e-13
 * relative to the largest entry; "check: ok", or "check: FAILED" and exit
 * status 1.  benchmarks/mpi_ranks.sh alternates runs on 1 and 2
 * ranks. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../examples/mpi_heat.h"

/* The halo exchanges a call makes: MPI_Sendrecv through the profiling
 * interface (this definition is the program's; PMPI_Sendrecv is MPI's). */
static long sendrecv_calls;

int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest, int sendtag,
                 void *recvbuf, int recvcount, MPI_Datatype recvtype, int source, int recvtag,
                 MPI_Comm comm, MPI_Status *status)
{
    sendrecv_calls++;
    return PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype,
                         source, recvtag, comm, status);
}

static int cmp(const void *a, const void *b)
{
    double u = *(const double *)a, v = *(const double *)b;
    return (u > v) - (u < v);
}

/* The forward pass alone: heat_objective on constants. */
typedef struct forward_ctx {
    heat_problem *p;
    ad_real *theta;
    const double *x;
    double fx;
} forward_ctx;

static ad_status forward(forward_ctx *c)
{
    for (size_t i = 0; i < c->p->n; i++)
        c->theta[i] = ad_const(c->x[i]);
    c->fx = ad_value(heat_objective(c->theta, c->p->n, c->p));
    return isnan(c->fx) ? AD_EINVAL : AD_OK;
}

/* What one timed call runs. */
enum { RUN_MPI_GRADIENT, RUN_GRADIENT, RUN_FORWARD };
typedef struct run {
    int kind;
    heat_problem *p;
    const double *x;
    double *fx, *g;
    forward_ctx *fw;
} run;

static ad_status run_once(run *r)
{
    switch (r->kind) {
    case RUN_MPI_GRADIENT:
        return ad_mpi_gradient(r->p->comm, heat_objective, r->p, r->p->n, r->x, r->fx, r->g);
    case RUN_GRADIENT:
        return ad_gradient(heat_objective, r->p, r->p->n, r->x, r->fx, r->g);
    default:
        return forward(r->fw);
    }
}

/* reps timed calls after one warm-up, each after a barrier on comm (none
 * for MPI_COMM_NULL), the slowest rank's time; t sorted on return.  0 if
 * a call failed on some rank. */
static int time_runs(MPI_Comm comm, run *r, int reps, double *t)
{
    int bad = run_once(r) != AD_OK, any;
    for (int k = 0; k < reps; k++) {
        if (comm != MPI_COMM_NULL)
            MPI_Barrier(comm);
        double t0 = MPI_Wtime();
        bad |= run_once(r) != AD_OK;
        double dt = MPI_Wtime() - t0;
        if (comm != MPI_COMM_NULL)
            MPI_Allreduce(&dt, &t[k], 1, MPI_DOUBLE, MPI_MAX, comm);
        else
            t[k] = dt;
    }
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    qsort(t, (size_t)reps, sizeof *t, cmp);
    return !any;
}

/* ---- one step's records ----
 *
 * x = [u (n), k (n)], both active as a step's inputs are in its replays;
 * the objective is the sum of heat_step's outputs (with_step) or of u
 * (without: the same n additions), reduced over comm. */
typedef struct one_step {
    heat_problem *p;
    int with_step;
    ad_real *out;
} one_step;

static ad_real one_step_objective(const ad_real *x, size_t n2, void *ctx)
{
    one_step *s = ctx;
    heat_problem *p = s->p;
    size_t n = p->n;
    const ad_real *u = x, *k = x + n, *v = u;
    ad_real part = ad_const(0.0), J;
    (void)n2;
    if (s->with_step) {
        heat_step(0, u, s->out, n, k, n, p);
        v = s->out;
    }
    for (size_t i = 0; i < n; i++)
        part = ad_add(part, v[i]);
    if (p->comm == MPI_COMM_NULL)
        return part;
    return ad_mpi_allreduce_sum(&part, &J, 1, p->comm) == AD_OK ? J : ad_const(NAN);
}

typedef struct tape_figures {
    double records, used_bytes, block_bytes;
} tape_figures;

/* The tape of one_step_objective at x (2 n), with and without the step:
 * the step's share, *out = with - without.  0 on failure. */
static int step_tape(heat_problem *p, const double *x, tape_figures *out)
{
    one_step s = {p, 0, malloc((p->n ? p->n : 1) * sizeof(ad_real))};
    double fx, *g = malloc(2 * (p->n ? p->n : 1) * sizeof *g);
    tape_figures f[2];
    int ok = s.out && g;
    for (int w = 0; w < 2 && ok; w++) {
        s.with_step = w;
        ad_status st = p->comm == MPI_COMM_NULL
                           ? ad_gradient(one_step_objective, &s, 2 * p->n, x, &fx, g)
                           : ad_mpi_gradient(p->comm, one_step_objective, &s, 2 * p->n, x, &fx, g);
        ad_tape_stats ts;
        ok = st == AD_OK && ad_tape_stats_get(&ts) == AD_OK;
        f[w].records = (double)ts.records;
        f[w].used_bytes = (double)ts.used_bytes;
        f[w].block_bytes = (double)ts.block_bytes;
    }
    if (ok) {
        out->records = f[1].records - f[0].records;
        out->used_bytes = f[1].used_bytes - f[0].used_bytes;
        out->block_bytes = f[1].block_bytes - f[0].block_bytes;
    }
    free(s.out);
    free(g);
    return ok;
}


static void print_times(const char *what, int ranks, const double *t, int reps)
{
    printf("mpi-heat-bench: %-34s %d rank%s: median %8.2f ms, min %8.2f ms (%d calls)\n", what,
           ranks, ranks > 1 ? "s" : " ", 1e3 * t[reps / 2], 1e3 * t[0], reps);
}

int main(int argc, char **argv)
{
    int rank, ranks;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    size_t cells = 4000, steps = 1000, snapshots = 0;
    int reps = 9;
    for (int a = 1; a + 1 < argc; a += 2) {
        if (!strcmp(argv[a], "--cells"))
            cells = strtoul(argv[a + 1], NULL, 10);
        else if (!strcmp(argv[a], "--steps"))
            steps = strtoul(argv[a + 1], NULL, 10);
        else if (!strcmp(argv[a], "--snapshots"))
            snapshots = strtoul(argv[a + 1], NULL, 10);
        else if (!strcmp(argv[a], "--reps"))
            reps = atoi(argv[a + 1]);
    }
    if (reps < 1 || reps > 1000)
        reps = 9;
    if (cells < 2 * (size_t)ranks || steps == 0) {
        if (rank == 0)
            fprintf(stderr, "mpi-heat-bench: need at least two cells a rank and one step\n");
        MPI_Finalize();
        return 1;
    }
    /* as examples/mpi_heat.c: dt / h^2 = 0.4 / kmax, stable for k <= 1.5 */
    heat_problem base = {.steps = steps, .snapshots = snapshots, .r = 0.4 / 1.5, .alpha = 1e-4};
    heat_problem mine = base, whole = base;
    heat_split(&mine, MPI_COMM_WORLD, cells);
    heat_split(&whole, MPI_COMM_NULL, cells);
    double *theta = malloc(cells * sizeof *theta), *u0 = malloc(2 * cells * sizeof *u0);
    double *obs = u0 ? u0 + cells : NULL;
    double *g = malloc(cells * sizeof *g), *gw = malloc(cells * sizeof *gw);
    double *t = malloc((size_t)reps * sizeof *t);
    ad_real *theta_c = malloc(cells * sizeof *theta_c);
    if (!theta || !u0 || !g || !gw || !t || !theta_c || !mine.work || !whole.work) {
        fprintf(stderr, "mpi-heat-bench: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int ok = heat_make_data(&whole, u0, obs);
    mine.u0 = u0 + mine.lo;
    mine.obs = obs + mine.lo;
    whole.u0 = u0;
    whole.obs = obs;
    for (size_t i = 0; i < cells; i++)
        theta[i] = log(0.6) + 0.2 * sin(7.0 * heat_x(i, cells));
    const double *x = theta + mine.lo;
    if (rank == 0)
        printf("mpi-heat-bench: %zu cells, %zu steps, snapshots %zu%s, %d rank%s x 1 thread, "
               "%zu..%zu cells a rank\n",
               cells, steps, snapshots, snapshots ? "" : " (library default)", ranks,
               ranks > 1 ? "s" : "", cells / (size_t)ranks,
               cells / (size_t)ranks + (cells % (size_t)ranks != 0));

    /* the check: this rank's slice against the whole field in one process */
    double fx = NAN, fw = NAN, worst = INFINITY;
    ad_status s1 = ad_mpi_gradient(MPI_COMM_WORLD, heat_objective, &mine, mine.n, x, &fx, g);
    ad_tape_stats ts_mpi, ts_whole;
    memset(&ts_mpi, 0, sizeof ts_mpi);
    memset(&ts_whole, 0, sizeof ts_whole);
    if (ad_tape_stats_get(&ts_mpi) != AD_OK)
        ok = 0;
    ad_status s2 = ad_gradient(heat_objective, &whole, cells, theta, &fw, gw);
    if (ad_tape_stats_get(&ts_whole) != AD_OK)
        ok = 0;
    if (ok && s1 == AD_OK && s2 == AD_OK) {
        double big = 0.0;
        for (size_t i = 0; i < cells; i++)
            big = fmax(big, fabs(gw[i]));
        double diff = fabs(fx - fw) / fmax(fabs(fw), 1e-300);
        for (size_t i = 0; i < mine.n; i++)
            diff = fmax(diff, fabs(g[i] - gw[mine.lo + i]) / big);
        if (!(diff == diff))
            diff = INFINITY;
        MPI_Allreduce(&diff, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    } else {
        double inf = INFINITY;
        MPI_Allreduce(&inf, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    }
    int good = ok && s1 == AD_OK && s2 == AD_OK && worst <= 1e-13, all;
    MPI_Allreduce(&good, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0 && s2 == AD_OK) {
        double big = 0.0;
        for (size_t i = 0; i < cells; i++)
            big = fmax(big, fabs(gw[i]));
        printf("mpi-heat-bench: f = %.17g, max |grad| = %.6e\n", fw, big);
    }
    if (rank == 0)
        printf("check: %s (gradient on %d rank%s against the whole field in one process: "
               "max rel diff %.2e, limit 1e-13%s%s)\n",
               all ? "ok" : "FAILED", ranks, ranks > 1 ? "s" : "", worst,
               s1 == AD_OK ? "" : "; ad_mpi_gradient: ", s1 == AD_OK ? "" : ad_strerror(s1));

    /* the exchanges of one gradient and of one forward pass (this rank's) */
    if (all) {
        forward_ctx fc1 = {&mine, theta_c, x, NAN};
        long c0 = sendrecv_calls;
        ad_status sg = ad_mpi_gradient(MPI_COMM_WORLD, heat_objective, &mine, mine.n, x, &fx, g);
        long c1 = sendrecv_calls;
        ad_status sf = forward(&fc1);
        long c2 = sendrecv_calls;
        if (rank == 0)
            printf("mpi-heat-bench: MPI_Sendrecv calls on rank 0: %ld a gradient, %ld a forward "
                   "pass (%zu steps: %.2f and %.2f a step)%s\n",
                   c1 - c0, c2 - c1, steps, (double)(c1 - c0) / (double)steps,
                   (double)(c2 - c1) / (double)steps,
                   sg == AD_OK && sf == AD_OK ? "" : " FAILED");
    }

    /* timing */
    double tg_med = NAN, tf_med = NAN, tw_med = NAN, twf_med = NAN;
    forward_ctx fc = {&mine, theta_c, x, NAN};
    run r = {RUN_MPI_GRADIENT, &mine, x, &fx, g, &fc};
    if (all && (all = time_runs(MPI_COMM_WORLD, &r, reps, t))) {
        tg_med = t[reps / 2];
        if (rank == 0)
            print_times("ad_mpi_gradient (MPI_COMM_WORLD)", ranks, t, reps);
    }
    r.kind = RUN_FORWARD;
    if (all && (all = time_runs(MPI_COMM_WORLD, &r, reps, t))) {
        tf_med = t[reps / 2];
        if (rank == 0)
            print_times("forward on constants (WORLD)", ranks, t, reps);
    }
    if (all && ranks == 1) {
        forward_ctx fcw = {&whole, theta_c, theta, NAN};
        run rw = {RUN_GRADIENT, &whole, theta, &fw, gw, &fcw};
        if ((all = time_runs(MPI_COMM_NULL, &rw, reps, t))) {
            tw_med = t[reps / 2];
            print_times("ad_gradient (MPI_COMM_NULL)", ranks, t, reps);
        }
        rw.kind = RUN_FORWARD;
        if (all && (all = time_runs(MPI_COMM_NULL, &rw, reps, t))) {
            twf_med = t[reps / 2];
            print_times("forward on constants (NULL)", ranks, t, reps);
        }
    }
    if (all && rank == 0) {
        printf("mpi-heat-bench: gradient/forward (medians), %d rank%s: %.2f\n", ranks,
               ranks > 1 ? "s" : "", tg_med / tf_med);
        if (ranks == 1)
            printf("mpi-heat-bench: one process, MPI_COMM_NULL: gradient/forward %.2f; "
                   "ad_mpi_gradient / ad_gradient %.3f\n",
                   tw_med / twf_med, tg_med / tw_med);
    }

    /* one step's records, with and without the exchanges, on this slice */
    if (all) {
        heat_problem lone = base;
        heat_split(&lone, MPI_COMM_NULL, mine.n);
        double *xs = malloc(2 * mine.n * sizeof *xs);
        tape_figures with, without;
        int tok = xs && lone.work;
        for (size_t i = 0; tok && i < mine.n; i++) {
            xs[i] = u0[mine.lo + i];
            xs[mine.n + i] = exp(x[i]);
        }
        tok = tok && step_tape(&mine, xs, &with);
        tok = tok && step_tape(&lone, xs, &without);
        int tall;
        MPI_Allreduce(&tok, &tall, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (tall) {
            /* per rank: rank 0's, and the sums over ranks */
            double mine_f[6] = {with.records, with.used_bytes, with.block_bytes,
                                without.records, without.used_bytes, without.block_bytes};
            double sum_f[6];
            MPI_Reduce(mine_f, sum_f, 6, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            if (rank == 0) {
                double cr = with.records - without.records;
                double cu = with.used_bytes - without.used_bytes;
                double cb = with.block_bytes - without.block_bytes;
                double wt = with.used_bytes + with.block_bytes;
                printf("tape, one step on rank 0 (%zu cells), with exchanges:    %8.0f records, "
                       "%9.0f record bytes + %7.0f block bytes\n",
                       mine.n, with.records, with.used_bytes, with.block_bytes);
                printf("tape, one step on rank 0 (%zu cells), without exchanges: %8.0f records, "
                       "%9.0f record bytes + %7.0f block bytes\n",
                       mine.n, without.records, without.used_bytes, without.block_bytes);
                printf("tape, one step on rank 0: communication records %.0f (%.4f%% of the "
                       "records), %.0f record bytes + %.0f block bytes (%.4f%% of the bytes)\n",
                       cr, 100.0 * cr / with.records, cu, cb, 100.0 * (cu + cb) / wt);
                double scr = sum_f[0] - sum_f[3];
                double scb = sum_f[1] + sum_f[2] - sum_f[4] - sum_f[5];
                printf("tape, one step, all %d rank%s: %.0f records of which %.0f communication "
                       "(%.4f%%); %.0f bytes of which %.0f communication (%.4f%%)\n",
                       ranks, ranks > 1 ? "s" : "", sum_f[0], scr, 100.0 * scr / sum_f[0],
                       sum_f[1] + sum_f[2], scb, 100.0 * scb / (sum_f[1] + sum_f[2]));
            }
        } else if (rank == 0) {
            printf("tape: the one-step recordings FAILED\n");
        }
        free(xs);
        free(lone.work);
    }
    /* step_bytes after a full gradient: the largest tape a replayed step took */
    uint64_t sb[2] = {ts_mpi.step_bytes, ts_whole.step_bytes}, sbmax[2] = {0, 0};
    MPI_Reduce(sb, sbmax, 2, MPI_UINT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0)
        printf("ad_tape_stats step_bytes after a gradient: %llu (ad_mpi_gradient, largest over "
               "ranks, %zu..%zu cells a rank), %llu (ad_gradient, %zu cells, one process); "
               "records of the gradient's top tape: %zu (rank 0), %zu (one process)\n",
               (unsigned long long)sbmax[0], cells / (size_t)ranks,
               cells / (size_t)ranks + (cells % (size_t)ranks != 0),
               (unsigned long long)sbmax[1], cells, ts_mpi.records, ts_whole.records);

    free(theta);
    free(u0);
    free(g);
    free(gw);
    free(t);
    free(theta_c);
    free(mine.work);
    free(whole.work);
    MPI_Finalize();
    return all ? 0 : 1;
}
