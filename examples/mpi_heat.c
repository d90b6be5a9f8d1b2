/* mpi_heat: a diffusion field fitted to the last state of a 1-D heat
 * equation whose cells are split over MPI ranks (mpi_heat.h), by L-BFGS.
 *
 * Each rank holds its slice of the field and of theta = log k.  The
 * objective runs the explicit steps through ad_checkpointed_loop with the
 * halo exchanges inside the steps; ad_mpi_gradient (dualrev/mpi.h)
 * differentiates it collectively: the exchanges' transposes send the
 * cotangents back, and each rank gets the gradient with respect to its
 * own theta.  liblbfgs then runs on every rank in lockstep over the whole
 * theta: the slices' gradients are gathered (MPI_Allgatherv), so every
 * rank has the same bits and takes the same steps.
 *
 * Usage: mpirun -np P mpi_heat [--cells N] [--steps S] [--iters K] [--check]
 *   --cells N   cells of the whole field (default 60)
 *   --steps S   explicit steps (default 500)
 *   --iters K   L-BFGS iterations at most (default 200)
 *   --check     at the start, and at the optimum, every rank also takes
 *               the gradient of the whole field in one process (the same
 *               code on MPI_COMM_NULL): the run fails unless the two agree
 *               to 1e-13 (relative to the largest entry)
 * Rank 0 prints the fit.  Exit status 0 on convergence (or the iteration
 * limit with the misfit reduced a hundredfold), 1 on a failure. */
#include <lbfgs.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_heat.h"

_Static_assert(_Generic((lbfgsfloatval_t)0, double: 1, default: 0),
               "liblbfgs must be built with LBFGS_FLOAT == 64");

typedef struct fit {
    heat_problem mine, whole;  /* this rank's slice; the whole field (--check) */
    int rank, ranks;
    int *counts, *displs;      /* the ranks' slices, for MPI_Allgatherv */
    double *g_mine;
    ad_status status;
    int evaluations;
} fit;

/* Every rank calls it with the same theta (all N); fills the same g. */
static lbfgsfloatval_t evaluate(void *instance, const lbfgsfloatval_t *theta,
                                lbfgsfloatval_t *g, const int n, const lbfgsfloatval_t step)
{
    fit *F = instance;
    double fx;
    (void)n;
    (void)step;
    F->evaluations++;
    F->status = ad_mpi_gradient(F->mine.comm, heat_objective, &F->mine, F->mine.n,
                                theta + F->mine.lo, &fx, F->g_mine);
    if (F->status != AD_OK)  /* every rank's status: all stop alike */
        return NAN;
    MPI_Allgatherv(F->g_mine, (int)F->mine.n, MPI_DOUBLE, g, F->counts, F->displs, MPI_DOUBLE,
                   F->mine.comm);
    return fx;
}

static int progress(void *instance, const lbfgsfloatval_t *x, const lbfgsfloatval_t *g,
                    const lbfgsfloatval_t fx, const lbfgsfloatval_t xnorm,
                    const lbfgsfloatval_t gnorm, const lbfgsfloatval_t step, int n, int k,
                    int ls)
{
    const fit *F = instance;
    (void)x, (void)g, (void)xnorm, (void)step, (void)n, (void)ls;
    if (F->rank == 0 && (k % 20 == 0 || k == 1))
        printf("  iteration %3d  J = %.10e  |g| = %.3e\n", k, fx, gnorm);
    return 0;
}

/* The distributed gradient against the whole field's in one process, at
 * theta (all N); the largest difference relative to the largest entry. */
static int check(fit *F, const double *theta, double *worst)
{
    size_t N = F->whole.cells;
    double fx, fw, *gw = malloc(N * sizeof *gw);
    if (!gw)
        return 0;
    ad_status s = ad_mpi_gradient(F->mine.comm, heat_objective, &F->mine, F->mine.n,
                                  theta + F->mine.lo, &fx, F->g_mine);
    ad_status w = ad_gradient(heat_objective, &F->whole, N, theta, &fw, gw);
    double big = 0.0, diff = fabs(fx - fw) / fmax(fabs(fw), 1e-300);
    for (size_t i = 0; i < N; i++)
        big = fmax(big, fabs(gw[i]));
    for (size_t i = 0; i < F->mine.n; i++)
        diff = fmax(diff, fabs(F->g_mine[i] - gw[F->mine.lo + i]) / big);
    free(gw);
    MPI_Allreduce(&diff, worst, 1, MPI_DOUBLE, MPI_MAX, F->mine.comm);
    int ok = s == AD_OK && w == AD_OK && *worst <= 1e-13, all;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, F->mine.comm);
    return all;
}

int main(int argc, char **argv)
{
    size_t cells = 60, steps = 500;
    int iters = 200, want_check = 0;
    MPI_Init(&argc, &argv);
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--cells") && a + 1 < argc)
            cells = strtoul(argv[++a], NULL, 10);
        else if (!strcmp(argv[a], "--steps") && a + 1 < argc)
            steps = strtoul(argv[++a], NULL, 10);
        else if (!strcmp(argv[a], "--iters") && a + 1 < argc)
            iters = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--check"))
            want_check = 1;
    }
    fit F;
    memset(&F, 0, sizeof F);
    MPI_Comm_rank(MPI_COMM_WORLD, &F.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &F.ranks);
    if (cells < (size_t)F.ranks || steps == 0) {
        if (F.rank == 0)
            fprintf(stderr, "mpi_heat: need at least one cell a rank and one step\n");
        MPI_Finalize();
        return 1;
    }
    /* dt / h^2 = 0.4 / kmax: stable for k up to kmax = 1.5 */
    heat_problem base = {.steps = steps, .snapshots = 0, .r = 0.4 / 1.5, .alpha = 1e-4};
    F.mine = F.whole = base;
    heat_split(&F.mine, MPI_COMM_WORLD, cells);
    heat_split(&F.whole, MPI_COMM_NULL, cells);
    double *theta = malloc(cells * sizeof *theta);
    double *u0 = malloc(2 * cells * sizeof *u0), *obs = u0 + cells;
    F.g_mine = malloc(cells * sizeof *F.g_mine);
    F.counts = malloc(2 * (size_t)F.ranks * sizeof *F.counts);
    lbfgsfloatval_t *x = lbfgs_malloc((int)cells);
    if (!theta || !u0 || !F.g_mine || !F.counts || !x || !F.mine.work || !F.whole.work) {
        fprintf(stderr, "mpi_heat: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    F.displs = F.counts + F.ranks;
    for (int r = 0; r < F.ranks; r++) {
        heat_problem q = base;
        size_t P = (size_t)F.ranks, R = (size_t)r;
        q.lo = R * (cells / P) + (R < cells % P ? R : cells % P);
        F.displs[r] = (int)q.lo;
        F.counts[r] = (int)(cells / P + (R < cells % P));
    }
    /* the whole field's data on every rank (for --check), the slice's views */
    int ok = heat_make_data(&F.whole, u0, obs);
    F.mine.u0 = u0 + F.mine.lo;
    F.mine.obs = obs + F.mine.lo;
    F.whole.u0 = u0;
    F.whole.obs = obs;
    for (size_t i = 0; i < cells; i++)
        theta[i] = x[i] = log(0.6);
    double worst = 0.0;
    if (ok && want_check) {
        ok = check(&F, theta, &worst);
        if (F.rank == 0)
            printf("check at the start: gradient on %d ranks vs one process, max rel diff %.2e%s\n",
                   F.ranks, worst, ok ? "" : "  FAILED");
    }
    double J0 = NAN, J = NAN;
    if (ok) {
        lbfgs_parameter_t param;
        lbfgs_parameter_init(&param);
        param.max_iterations = iters;
        param.epsilon = 1e-7;
        double *gtmp = malloc(cells * sizeof *gtmp);
        J0 = gtmp ? evaluate(&F, x, gtmp, (int)cells, 0.0) : NAN;
        free(gtmp);
        if (F.rank == 0)
            printf("mpi_heat: %zu cells on %d ranks, %zu steps, fitting theta = log k\n", cells,
                   F.ranks, steps);
        int ret = lbfgs((int)cells, x, &J, evaluate, progress, &F, &param);
        ok = F.status == AD_OK && (ret == LBFGS_SUCCESS || ret == LBFGS_STOP ||
                                   ret == LBFGS_ALREADY_MINIMIZED ||
                                   ((ret == LBFGSERR_MAXIMUMITERATION ||
                                     ret == LBFGSERR_ROUNDING_ERROR) && J < 0.01 * J0));
        const char *why = ret == LBFGS_SUCCESS || ret == LBFGS_ALREADY_MINIMIZED ? "converged"
                          : ret == LBFGSERR_MAXIMUMITERATION ? "iteration limit"
                          : ret == LBFGSERR_ROUNDING_ERROR   ? "at rounding level"
                                                             : "stopped";
        if (F.rank == 0)
            printf("L-BFGS: %s, %s (%d), %d evaluations, J %.6e -> %.6e\n",
                   ok ? "done" : "FAILED", why, ret, F.evaluations, J0, J);
        if (F.status != AD_OK && F.rank == 0)
            printf("mpi_heat: %s\n", ad_strerror(F.status));
    }
    if (ok) {
        double err = 0.0, norm = 0.0;
        for (size_t i = 0; i < cells; i++) {
            double kt = exp(heat_true_theta(i, cells)), kf = exp(x[i]);
            err += (kf - kt) * (kf - kt);
            norm += kt * kt;
        }
        if (F.rank == 0)
            printf("fitted k against the true field: relative L2 error %.3f\n", sqrt(err / norm));
        if (want_check) {
            memcpy(theta, x, cells * sizeof *theta);
            ok = check(&F, theta, &worst);
            if (F.rank == 0)
                printf("check at the optimum: max rel diff %.2e%s\n", worst, ok ? "" : "  FAILED");
        }
    }
    lbfgs_free(x);
    free(theta);
    free(u0);
    free(F.g_mine);
    free(F.counts);
    free(F.mine.work);
    free(F.whole.work);
    MPI_Finalize();
    return ok ? 0 : 1;
}
