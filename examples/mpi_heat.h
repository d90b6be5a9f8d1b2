/* mpi_heat.h: a 1-D heat equation whose field is split over MPI ranks,
 * differentiated through its halo exchanges (dualrev/mpi.h).  Shared by
 * examples/mpi_heat.c (the fit) and benchmarks/mpi_heat_bench.c.
 *
 * On (0, 1) with u = 0 at both ends, N cells of width h = 1/N:
 *
 *   u_i' = u_i + (dt/h^2) (k_{i+1/2} (u_{i+1} - u_i) - k_{i-1/2} (u_i - u_{i-1})),
 *   k = exp(theta) in each cell, k_{i+1/2} = (k_i + k_{i+1}) / 2,
 *
 * explicit steps through ad_checkpointed_loop; the objective is the misfit
 * of the last state to observations plus a smoothness penalty on theta:
 *
 *   J(theta) = 1/2 sum_i (u_i(T) - obs_i)^2 + alpha/2 sum_i (theta_{i+1} - theta_i)^2.
 *
 * Each rank holds the cells [lo, lo + n) and their theta; a step gets u
 * and k of the neighbouring cells from the neighbouring ranks
 * (ad_mpi_sendrecv, inside the step, so every replay exchanges again),
 * and the sums over cells are added over the ranks (ad_mpi_allreduce_sum).
 * The same code with comm = MPI_COMM_NULL is the whole field in one
 * process, the example's reference. */
#ifndef MPI_HEAT_H
#define MPI_HEAT_H

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include <dualrev.h>
#include <dualrev/mpi.h>

typedef struct heat_problem {
    MPI_Comm comm;      /* the ranks that share the field; MPI_COMM_NULL: one process */
    size_t cells;       /* N, the whole field's */
    size_t lo, n;       /* this rank's cells */
    int left, right;    /* the neighbouring ranks, or MPI_PROC_NULL */
    size_t steps, snapshots;
    double r;           /* dt / h^2 */
    double alpha;       /* the smoothness penalty's weight */
    const double *u0;   /* this rank's initial state, n */
    const double *obs;  /* this rank's observations of the last state, n */
    ad_real *work;      /* the steps' halo arrays, 2 (n + 2) (heat_split makes it) */
} heat_problem;

#define HEAT_PI 3.14159265358979323846

/* This rank's cells of an N-cell field split over comm's ranks (the first
 * N mod P ranks one more), or the whole field for MPI_COMM_NULL. */
static inline void heat_split(heat_problem *p, MPI_Comm comm, size_t cells)
{
    int rank = 0, ranks = 1;
    p->comm = comm;
    p->cells = cells;
    p->left = p->right = MPI_PROC_NULL;
    if (comm != MPI_COMM_NULL) {
        MPI_Comm_rank(comm, &rank);
        MPI_Comm_size(comm, &ranks);
        p->left = rank > 0 ? rank - 1 : MPI_PROC_NULL;
        p->right = rank < ranks - 1 ? rank + 1 : MPI_PROC_NULL;
    }
    size_t P = (size_t)ranks, R = (size_t)rank, base = cells / P, extra = cells % P;
    p->lo = R * base + (R < extra ? R : extra);
    p->n = base + (R < extra);
    p->work = malloc(2 * (p->n + 2) * sizeof *p->work);
}

/* g[0..n+2): the left neighbour's last value, v[0..n), the right one's
 * first; `edge` beyond the field's ends.  Both exchanges run on every
 * rank, whatever the first returned: a rank that skipped one would leave
 * its neighbour waiting. */
static inline ad_status heat_halo(const heat_problem *p, const ad_real *v, ad_real *g,
                                  ad_real edge_left, ad_real edge_right, int tag)
{
    size_t n = p->n;
    g[0] = edge_left;
    g[n + 1] = edge_right;
    for (size_t i = 0; i < n; i++)
        g[i + 1] = v[i];
    if (p->comm == MPI_COMM_NULL)
        return AD_OK;
    ad_status a = ad_mpi_sendrecv(v, 1, p->left, &g[n + 1], 1, p->right, tag, p->comm);
    ad_status b = ad_mpi_sendrecv(v + n - 1, 1, p->right, &g[0], 1, p->left, tag + 1, p->comm);
    return a != AD_OK ? a : b;
}

/* One explicit step: u -> out, params k (= exp(theta), made once). */
static inline void heat_step(size_t step, const ad_real *u, ad_real *out, size_t n,
                             const ad_real *k, size_t np, void *ctx)
{
    const heat_problem *p = ctx;
    ad_real *ug = p->work, *kg = ug + n + 2;
    (void)step;
    (void)np;
    /* u = 0 at the ends; k beyond them is the end cell's own */
    ad_status a = heat_halo(p, u, ug, ad_const(0.0), ad_const(0.0), 10);
    ad_status b = heat_halo(p, k, kg, k[0], k[n - 1], 20);
    if (a != AD_OK || b != AD_OK) {
        for (size_t i = 0; i < n; i++)
            out[i] = ad_const(NAN);
        return;
    }
    for (size_t i = 1; i <= n; i++) {
        ad_real kr = ad_mul(0.5, ad_add(kg[i], kg[i + 1]));
        ad_real kl = ad_mul(0.5, ad_add(kg[i - 1], kg[i]));
        ad_real flux = ad_sub(ad_mul(kr, ad_sub(ug[i + 1], ug[i])),
                              ad_mul(kl, ad_sub(ug[i], ug[i - 1])));
        out[i - 1] = ad_add(ug[i], ad_mul(p->r, flux));
    }
}

/* J(theta) for this rank's theta[0..n): the same value on every rank. */
static inline ad_real heat_objective(const ad_real *theta, size_t n, void *ctx)
{
    const heat_problem *p = ctx;
    ad_real part = ad_const(0.0), J;
    ad_real *k = calloc(4 * n + 2, sizeof *k), *u0 = k + n, *u = u0 + n, *tg = u + n;
    if (!k)
        return ad_const(NAN);
    for (size_t i = 0; i < n; i++) {
        k[i] = ad_exp(theta[i]);
        u0[i] = ad_const(p->u0[i]);
    }
    if (ad_checkpointed_loop(heat_step, ctx, p->steps, p->snapshots, n, u0, n, k, u) != AD_OK)
        for (size_t i = 0; i < n; i++)
            u[i] = ad_const(NAN);  /* and on: the penalty's exchange is still to come */
    for (size_t i = 0; i < n; i++) {
        ad_real d = ad_sub(u[i], p->obs[i]);
        part = ad_add(part, ad_mul(0.5, ad_mul(d, d)));
    }
    /* the penalty's differences across a rank boundary need the right
     * neighbour's first theta; beyond the last cell, none (theta itself) */
    ad_status s = heat_halo(p, theta, tg, theta[0], theta[n - 1], 30);
    for (size_t i = 1; i <= n; i++) {
        ad_real d = ad_sub(tg[i + 1], tg[i]);
        part = ad_add(part, ad_mul(0.5 * p->alpha, ad_mul(d, d)));
    }
    free(k);
    if (p->comm != MPI_COMM_NULL && s == AD_OK)
        s = ad_mpi_allreduce_sum(&part, &J, 1, p->comm);
    else
        J = part;
    return s == AD_OK ? J : ad_const(NAN);
}

/* The made-up truth and data, from the cell's index alone. */
static inline double heat_x(size_t i, size_t cells)
{
    return ((double)i + 0.5) / (double)cells;
}

static inline double heat_true_theta(size_t i, size_t cells)
{
    double x = heat_x(i, cells);
    return log(0.6 + 0.3 * sin(2.0 * HEAT_PI * x) + 0.2 * exp(-40.0 * (x - 0.7) * (x - 0.7)));
}

static inline double heat_u0(size_t i, size_t cells)
{
    double x = heat_x(i, cells);
    return sin(HEAT_PI * x) + 0.5 * sin(3.0 * HEAT_PI * x);
}

/* The problem's data on p's cells: u0 and the observations of the last
 * state, made by running the true field forward (values alone: constants
 * through the same code); 0 on a failure. */
static inline int heat_make_data(heat_problem *p, double *u0, double *obs)
{
    ad_real *t = malloc(3 * p->n * sizeof *t), *u = t + p->n, *k = u + p->n;
    if (!t)
        return 0;
    for (size_t i = 0; i < p->n; i++) {
        u0[i] = heat_u0(p->lo + i, p->cells);
        u[i] = ad_const(u0[i]);
        k[i] = ad_const(exp(heat_true_theta(p->lo + i, p->cells)));
    }
    int ok = ad_checkpointed_loop(heat_step, p, p->steps, 0, p->n, u, p->n, k, t) == AD_OK;
    for (size_t i = 0; i < p->n; i++)
        obs[i] = t[i].v;
    free(t);
    return ok;
}

#endif
