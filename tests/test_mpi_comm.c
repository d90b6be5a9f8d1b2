/* Differentiable communication (dualrev/mpi.h) under mpirun: tests/
 * meson.build runs it on 1, 2 and 3 ranks.  A field of NCELL cells is
 * cut into contiguous, unequal slices, one a rank, and halos go through
 * ad_mpi_sendrecv; sums through ad_mpi_allreduce_sum, a shared number
 * through ad_mpi_bcast.  Every rank also holds the whole problem and
 * differentiates it in one process, the oracle.  Checked:
 *   - ad_mpi_gradient, ad_mpi_hvp and ad_mpi_jvp against ad_gradient,
 *     ad_hvp and ad_jvp of the one-process code (1e-13), and the gradient
 *     against central differences of the distributed value;
 *   - a heat equation through ad_checkpointed_loop, its halos exchanged in
 *     the steps, gradient and H v against the one-process loop;
 *   - seeding: an objective that is each rank's share, not the reduced
 *     sum (the mistake), fails on every rank with AD_EINVAL;
 *   - a rank that fails (an error in f, in a loop's step), and allocation
 *     failures injected on one rank at every allocation in turn: the same
 *     status on every rank, NaN outputs, and nothing waits (a deadlock is
 *     the test's timeout).
 * Exit status 0 only if every check passed on every rank. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dualrev.h>
#include <dualrev/mpi.h>

#include "mpi_check.h"
#include "testing.h" /* ad_test_fail_alloc_after */

enum { NCELL = 23, STEPS = 12 };


/* ---- the slices and the halos ---- */

typedef struct slice {
    MPI_Comm comm;
    size_t lo, n;       /* this rank's cells [lo, lo + n) of NCELL */
    int left, right;    /* neighbours, or MPI_PROC_NULL */
    int share_mistake;  /* objective: return this rank's share, not the sum */
    int fail_rank;      /* this rank makes an error in f (-1: none) */
    long fail_step;     /* ... in this step of the loop (-1: in f itself) */
} slice;

static slice slice_of(MPI_Comm comm)
{
    int r, p;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &p);
    /* unequal: rank r gets NCELL / p cells, the last ones the rest */
    size_t base = NCELL / (size_t)p, lo = base * (size_t)r;
    size_t n = r == p - 1 ? NCELL - lo : base;
    slice s = {comm, lo, n, r > 0 ? r - 1 : MPI_PROC_NULL, r < p - 1 ? r + 1 : MPI_PROC_NULL,
               0, -1, -1};
    return s;
}

/* u[-1] and u[n] from the neighbours (0 beyond the ends); h[0..n+2)
 * gets left halo, u, right halo. */
static ad_status halo(const slice *s, const ad_real *u, ad_real *h)
{
    h[0] = h[s->n + 1] = ad_const(0.0);
    for (size_t i = 0; i < s->n; i++)
        h[i + 1] = u[i];
    ad_status a = ad_mpi_sendrecv(u, 1, s->left, &h[s->n + 1], 1, s->right, 1, s->comm);
    ad_status b = ad_mpi_sendrecv(u + s->n - 1, 1, s->right, &h[0], 1, s->left, 2, s->comm);
    return a != AD_OK ? a : b;
}

/* ---- the objective: a chain of cells ---- */

/* Cell i's term from p[i-1], p[i], p[i+1] (the same code for the slices
 * and for the whole field). */
static ad_real cell(size_t i, ad_real pl, ad_real pi, ad_real pr)
{
    double c = 1.0 + 0.1 * (double)(i % 4);
    ad_real d = ad_sub(pi, pl);
    ad_real t = ad_add(ad_mul(c, ad_mul(d, d)), ad_mul(ad_sin(pi), pr));
    return ad_add(t, ad_exp(ad_mul(0.1, pi)));
}

static ad_real whole_chain(const ad_real *p, size_t n, void *ctx)
{
    (void)ctx;
    ad_real f = ad_const(0.0);
    for (size_t i = 0; i < n; i++)
        f = ad_add(f, cell(i, i ? p[i - 1] : ad_const(0.0), p[i],
                           i + 1 < n ? p[i + 1] : ad_const(0.0)));
    return f;
}

static ad_real shared_chain(const ad_real *p, size_t n, void *ctx)
{
    const slice *s = ctx;
    ad_real h[NCELL + 2], part = ad_const(0.0), f;
    (void)n;
    if (s->fail_rank == rank && s->fail_step < 0) {
        ad_real y;
        if (ad_external(NULL, NULL, 0, NULL, 1, &y) == AD_OK)  /* AD_EINVAL, kept */
            return ad_const(NAN);
    }
    if (halo(s, p, h) != AD_OK)
        return ad_const(NAN);
    for (size_t i = 0; i < s->n; i++)
        part = ad_add(part, cell(s->lo + i, h[i], h[i + 1], h[i + 2]));
    if (s->share_mistake)
        return part;
    if (ad_mpi_allreduce_sum(&part, &f, 1, s->comm) != AD_OK)
        return ad_const(NAN);
    return f;
}

/* A map with local outputs: y_i = p_i p_{i-1} + sin(p_{i+1}). */
static ad_real map_cell(ad_real pl, ad_real pi, ad_real pr)
{
    return ad_add(ad_mul(pi, pl), ad_sin(pr));
}

static void whole_map(const ad_real *p, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)ctx;
    (void)m;
    for (size_t i = 0; i < n; i++)
        y[i] = map_cell(i ? p[i - 1] : ad_const(0.0), p[i], i + 1 < n ? p[i + 1] : ad_const(0.0));
}

static void shared_map(const ad_real *p, size_t n, ad_real *y, size_t m, void *ctx)
{
    const slice *s = ctx;
    ad_real h[NCELL + 2];
    (void)n;
    (void)m;
    if (halo(s, p, h) != AD_OK)
        return;
    for (size_t i = 0; i < s->n; i++)
        y[i] = map_cell(h[i], h[i + 1], h[i + 2]);
}

/* ---- a shared number: theta on rank 0 only, broadcast ---- */

static ad_real theta_term(ad_real p, ad_real theta)
{
    ad_real d = ad_sub(p, theta);
    return ad_mul(ad_mul(d, d), ad_cos(theta));
}

static ad_real whole_theta(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    ad_real f = ad_const(0.0);
    for (size_t i = 0; i + 1 < n; i++)
        f = ad_add(f, theta_term(x[i], x[n - 1]));
    return f;
}

/* x: this rank's cells, then (rank 0) theta. */
static ad_real shared_theta(const ad_real *x, size_t n, void *ctx)
{
    const slice *s = ctx;
    ad_real theta = rank == 0 ? x[n - 1] : ad_const(0.0), part = ad_const(0.0), f;
    if (ad_mpi_bcast(&theta, 1, 0, s->comm) != AD_OK)
        return ad_const(NAN);
    for (size_t i = 0; i < s->n; i++)
        part = ad_add(part, theta_term(x[i], theta));
    if (ad_mpi_allreduce_sum(&part, &f, 1, s->comm) != AD_OK)
        return ad_const(NAN);
    return f;
}

/* ---- a heat equation, its halos exchanged in the loop's steps ----
 *
 * u' = u + dt (k_{i+1/2} (u_{i+1} - u_i) - k_{i-1/2} (u_i - u_{i-1}))
 *        + dt 0.1 sin(u_i),  k_{i+1/2} = (k_i + k_{i+1}) / 2,
 * u = 0 beyond the ends; the diffusivity k is the parameter.  The
 * steps' ctx is the slice, or NULL for the whole field in one process:
 * it outlives the recording, as a loop's ctx must. */

static void heat_cells(size_t n, const ad_real *uh, const ad_real *kh, ad_real *out)
{
    const double dt = 0.2;
    for (size_t i = 1; i <= n; i++) {
        ad_real kr = ad_mul(0.5, ad_add(kh[i], kh[i + 1]));
        ad_real kl = ad_mul(0.5, ad_add(kh[i - 1], kh[i]));
        ad_real flux = ad_sub(ad_mul(kr, ad_sub(uh[i + 1], uh[i])),
                              ad_mul(kl, ad_sub(uh[i], uh[i - 1])));
        ad_real src = ad_mul(0.1, ad_sin(uh[i]));
        out[i - 1] = ad_add(uh[i], ad_mul(dt, ad_add(flux, src)));
    }
}

static void heat_step(size_t k, const ad_real *u, ad_real *out, size_t n, const ad_real *kp,
                      size_t np, void *ctx)
{
    const slice *s = ctx;
    ad_real uh[NCELL + 2], kh[NCELL + 2];
    (void)np;
    if (!s) {
        uh[0] = uh[n + 1] = kh[0] = kh[n + 1] = ad_const(0.0);
        for (size_t i = 0; i < n; i++) {
            uh[i + 1] = u[i];
            kh[i + 1] = kp[i];
        }
    } else {
        if (s->fail_rank == rank && s->fail_step == (long)k) {
            ad_real y;
            if (ad_external(NULL, NULL, 0, NULL, 1, &y) == AD_OK)
                return;
        }
        ad_status a = halo(s, u, uh), b = halo(s, kp, kh);  /* both, always */
        if (a != AD_OK || b != AD_OK)
            return;
    }
    heat_cells(n, uh, kh, out);
}

static double u0_of(size_t i)
{
    return sin(0.4 * (double)i) + 0.5;
}

static double target_of(size_t i)
{
    return 0.3 * cos(0.3 * (double)i);
}

/* sum over cells of (u_N - target)^2, from the loop over STEPS steps
 * with 3 snapshots (replays in the sweep). */
static ad_real heat_misfit(const ad_real *u0, const ad_real *k, size_t n, size_t lo,
                           const slice *s)
{
    ad_real u[NCELL], part = ad_const(0.0);
    if (ad_checkpointed_loop(heat_step, (void *)(uintptr_t)s, STEPS, 3, n, u0, n, k, u) != AD_OK)
        return ad_const(NAN);
    for (size_t i = 0; i < n; i++) {
        ad_real d = ad_sub(u[i], target_of(lo + i));
        part = ad_add(part, ad_mul(d, d));
    }
    return part;
}

static ad_real whole_heat(const ad_real *k, size_t n, void *ctx)
{
    ad_real u0[NCELL];
    (void)ctx;
    for (size_t i = 0; i < n; i++)
        u0[i] = ad_const(u0_of(i));
    return heat_misfit(u0, k, n, 0, NULL);
}

static ad_real shared_heat(const ad_real *k, size_t n, void *ctx)
{
    const slice *s = ctx;
    ad_real u0[NCELL], f;
    for (size_t i = 0; i < n; i++)
        u0[i] = ad_const(u0_of(s->lo + i));
    ad_real part = heat_misfit(u0, k, n, s->lo, s);
    if (ad_mpi_allreduce_sum(&part, &f, 1, s->comm) != AD_OK)
        return ad_const(NAN);
    return f;
}

/* ---- checks ---- */

static double P[NCELL + 1], V[NCELL + 1], K[NCELL];

static void points(void)
{
    for (size_t i = 0; i <= NCELL; i++) {
        P[i] = 0.7 * sin(1.3 * (double)i + 0.2) + 0.1;
        V[i] = cos(0.7 * (double)i) - 0.2;
    }
    for (size_t i = 0; i < NCELL; i++)
        K[i] = 0.4 + 0.3 * sin(0.9 * (double)i) * sin(0.9 * (double)i);
}

static int close_to(double a, double b, double tol)
{
    return fabs(a - b) <= tol * fmax(1.0, fabs(b));
}



static void check_chain(const slice *s)
{
    double fx, g[NCELL], wf, wg[NCELL], hv[NCELL], wh[NCELL], wfx, wgrad[NCELL];
    ad_status st = ad_mpi_gradient(s->comm, shared_chain, (void *)s, s->n, P + s->lo, &fx, g);
    CHECK(st == AD_OK);
    CHECK(ad_gradient(whole_chain, NULL, NCELL, P, &wf, wg) == AD_OK);
    CHECK(close_to(fx, wf, 1e-13));
    for (size_t i = 0; i < s->n; i++)
        CHECK(close_to(g[i], wg[s->lo + i], 1e-13));

    /* central differences of the distributed value (f on constants
     * outside any recording: the operations move values alone) */
    for (size_t j = 0; j < NCELL; j += 5) {
        double x[NCELL], fd[4];
        const double h = 1e-3, c[4] = {1.0 / 12, -2.0 / 3, 2.0 / 3, -1.0 / 12};
        const double off[4] = {-2, -1, 1, 2};
        for (int q = 0; q < 4; q++) {
            ad_real xr[NCELL];
            memcpy(x, P + s->lo, s->n * sizeof *x);
            if (j >= s->lo && j < s->lo + s->n)
                x[j - s->lo] += off[q] * h;
            for (size_t i = 0; i < s->n; i++)
                xr[i] = ad_const(x[i]);
            fd[q] = shared_chain(xr, s->n, (void *)s).v;
        }
        double d = (c[0] * fd[0] + c[1] * fd[1] + c[2] * fd[2] + c[3] * fd[3]) / h;
        if (j >= s->lo && j < s->lo + s->n)
            CHECK(close_to(g[j - s->lo], d, 1e-8));
    }

    st = ad_mpi_hvp(s->comm, shared_chain, (void *)s, s->n, P + s->lo, V + s->lo, &fx, g, hv);
    CHECK(st == AD_OK);
    CHECK(ad_hvp(whole_chain, NULL, NCELL, P, V, &wfx, wgrad, wh) == AD_OK);
    CHECK(close_to(fx, wfx, 1e-13));
    for (size_t i = 0; i < s->n; i++) {
        CHECK(close_to(g[i], wgrad[s->lo + i], 1e-13));
        CHECK(close_to(hv[i], wh[s->lo + i], 1e-13));
    }
}

static void check_map(const slice *s)
{
    double y[NCELL], jv[NCELL], wy[NCELL], wjv[NCELL];
    ad_status st = ad_mpi_jvp(s->comm, shared_map, (void *)s, s->n, P + s->lo, V + s->lo, s->n,
                              y, jv);
    CHECK(st == AD_OK);
    CHECK(ad_jvp(whole_map, NULL, NCELL, P, V, NCELL, wy, wjv) == AD_OK);
    for (size_t i = 0; i < s->n; i++) {
        CHECK(y[i] == wy[s->lo + i]);
        CHECK(close_to(jv[i], wjv[s->lo + i], 1e-14));
    }
}

static void check_theta(const slice *s)
{
    /* the whole problem's x: the cells, then theta; rank 0's share has theta */
    double x[NCELL + 1], wg[NCELL + 1], wf, fx, g[NCELL + 1], hv[NCELL + 1];
    double wfx, wgrad[NCELL + 1], wh[NCELL + 1], v[NCELL + 1];
    memcpy(x, P, NCELL * sizeof *x);
    x[NCELL] = 0.3;
    memcpy(v, V, (NCELL + 1) * sizeof *v);
    CHECK(ad_gradient(whole_theta, NULL, NCELL + 1, x, &wf, wg) == AD_OK);
    CHECK(ad_hvp(whole_theta, NULL, NCELL + 1, x, v, &wfx, wgrad, wh) == AD_OK);
    double mine[NCELL + 1], vm[NCELL + 1];
    size_t n = s->n + (rank == 0);
    memcpy(mine, P + s->lo, s->n * sizeof *mine);
    memcpy(vm, V + s->lo, s->n * sizeof *vm);
    if (rank == 0) {
        mine[s->n] = x[NCELL];
        vm[s->n] = v[NCELL];
    }
    CHECK(ad_mpi_gradient(s->comm, shared_theta, (void *)s, n, mine, &fx, g) == AD_OK);
    CHECK(close_to(fx, wf, 1e-13));
    for (size_t i = 0; i < s->n; i++)
        CHECK(close_to(g[i], wg[s->lo + i], 1e-13));
    if (rank == 0)  /* every rank's cotangent of theta, added at the root */
        CHECK(close_to(g[s->n], wg[NCELL], 1e-13));
    CHECK(ad_mpi_hvp(s->comm, shared_theta, (void *)s, n, mine, vm, &fx, g, hv) == AD_OK);
    for (size_t i = 0; i < s->n; i++)
        CHECK(close_to(hv[i], wh[s->lo + i], 1e-12));
    if (rank == 0)
        CHECK(close_to(hv[s->n], wh[NCELL], 1e-12));
}

static void check_heat(const slice *s)
{
    double fx, g[NCELL], wf, wg[NCELL], hv[NCELL], wh[NCELL], wfx, wgrad[NCELL];
    CHECK(ad_gradient(whole_heat, NULL, NCELL, K, &wf, wg) == AD_OK);
    ad_status st = ad_mpi_gradient(s->comm, shared_heat, (void *)s, s->n, K + s->lo, &fx, g);
    CHECK(st == AD_OK);
    CHECK(close_to(fx, wf, 1e-13));
    for (size_t i = 0; i < s->n; i++)
        CHECK(close_to(g[i], wg[s->lo + i], 1e-13));
    CHECK(ad_hvp(whole_heat, NULL, NCELL, K, V, &wfx, wgrad, wh) == AD_OK);
    st = ad_mpi_hvp(s->comm, shared_heat, (void *)s, s->n, K + s->lo, V + s->lo, &fx, g, hv);
    CHECK(st == AD_OK);
    for (size_t i = 0; i < s->n; i++) {
        CHECK(close_to(g[i], wgrad[s->lo + i], 1e-13));
        CHECK(close_to(hv[i], wh[s->lo + i], 1e-12));
    }
}

/* The seeding mistake, and a rank that fails. */
static void check_failures(const slice *s0)
{
    double fx, g[NCELL], hv[NCELL];
    slice s = *s0;
    int p;
    MPI_Comm_size(s.comm, &p);
    s.share_mistake = 1;
    ad_status st = ad_mpi_gradient(s.comm, shared_chain, &s, s.n, P + s.lo, &fx, g);
    CHECK(st == (p > 1 ? AD_EINVAL : AD_OK));  /* one rank: the share is the sum */
    CHECK(same_everywhere(s.comm, st));
    if (p > 1)
        CHECK(all_nan(&fx, 1) && all_nan(g, s.n));

    for (int r = 0; r < p; r++) {
        s = *s0;
        s.fail_rank = r;
        st = ad_mpi_gradient(s.comm, shared_chain, &s, s.n, P + s.lo, &fx, g);
        CHECK(st == AD_EINVAL && same_everywhere(s.comm, st));
        CHECK(all_nan(&fx, 1) && all_nan(g, s.n));
        s.fail_step = 7;  /* in the loop's steps: the forward pass's */
        st = ad_mpi_gradient(s.comm, shared_heat, &s, s.n, K + s.lo, &fx, g);
        CHECK(st == AD_EINVAL && same_everywhere(s.comm, st));
        CHECK(all_nan(&fx, 1) && all_nan(g, s.n));
        st = ad_mpi_hvp(s.comm, shared_heat, &s, s.n, K + s.lo, V + s.lo, &fx, g, hv);
        CHECK(st == AD_EINVAL && same_everywhere(s.comm, st));
        CHECK(all_nan(hv, s.n));
    }
    /* bad arguments on one rank: every rank's AD_EINVAL, nothing run */
    st = ad_mpi_gradient(s.comm, rank == p - 1 ? NULL : shared_chain, (void *)s0, s0->n,
                         P + s0->lo, &fx, g);
    CHECK(st == AD_EINVAL && same_everywhere(s.comm, st));
    CHECK(ad_mpi_gradient(MPI_COMM_NULL, shared_chain, (void *)s0, s0->n, P, &fx, g) ==
          AD_EINVAL);
}

/* Allocation failures injected on rank `who`, at its k-th allocation for
 * k = 0, 1, ... until the call succeeds: every call's status the same
 * everywhere, AD_ENOMEM with NaN, then the results of a clean run. */
static void check_memory(const slice *s, int who, int hvp)
{
    double fx0, g0[NCELL], h0[NCELL], fx, g[NCELL], hv[NCELL];
    ad_status st0 = hvp ? ad_mpi_hvp(s->comm, shared_heat, (void *)s, s->n, K + s->lo,
                                     V + s->lo, &fx0, g0, h0)
                        : ad_mpi_gradient(s->comm, shared_heat, (void *)s, s->n, K + s->lo, &fx0,
                                          g0);
    CHECK(st0 == AD_OK);
    int done = 0;
    long k;
    for (k = 0; k < 2000 && !done; k++) {
        CHECK(ad_release() == AD_OK);
        if (rank == who)
            ad_test_fail_alloc_after(k);
        ad_status st = hvp ? ad_mpi_hvp(s->comm, shared_heat, (void *)s, s->n, K + s->lo,
                                        V + s->lo, &fx, g, hv)
                           : ad_mpi_gradient(s->comm, shared_heat, (void *)s, s->n,
                                             K + s->lo, &fx, g);
        ad_test_fail_alloc_after(-1);
        CHECK(same_everywhere(s->comm, st));
        if (st == AD_OK) {
            CHECK(fx == fx0);
            for (size_t i = 0; i < s->n; i++)
                CHECK(g[i] == g0[i] && (!hvp || hv[i] == h0[i]));
            done = 1;
        } else {
            CHECK(st == AD_ENOMEM);
            CHECK(all_nan(&fx, 1) && all_nan(g, s->n));
        }
        int all_done;
        MPI_Allreduce(&done, &all_done, 1, MPI_INT, MPI_MIN, s->comm);
        done = all_done;
    }
    CHECK(done);
    CHECK(k > 3);  /* the calls allocate: the injection reached them */
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    points();
    /* every size of communicator up to the world's */
    for (int size = 1; size <= world; size++) {
        MPI_Comm comm;
        MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &comm);
        if (comm != MPI_COMM_NULL) {
            slice s = slice_of(comm);
            check_chain(&s);
            check_map(&s);
            check_theta(&s);
            check_heat(&s);
            check_failures(&s);
            if (size == world)
                for (int who = 0; who < size; who += size > 1 ? size - 1 : 1) {
                    check_memory(&s, who, 0);
                    check_memory(&s, who, 1);
                }
            MPI_Comm_free(&comm);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("test_mpi_comm: %d ranks, %d failed checks\n", world, total);
    MPI_Finalize();
    return total != 0;
}
