/* dualrev/mpi.h under mpirun (tests/meson.build runs it on 1, 2 and 3
 * ranks): ad_mpi_gradient_sum and ad_mpi_hvp_sum on sub-communicators of
 * every size up to the world's, 1 and 2 threads, against
 *   - ad_gradient_sum and ad_hvp_sum in one process (the same bits),
 *   - closed forms of a quadratic sum (long double),
 *   - a term that fails in one rank's chunk (the same status everywhere,
 *     NaN outputs; the status ad_gradient_sum gives in one process),
 *   - bad arguments on one rank or all, sums that differ between ranks,
 *     nterms = 0, nterms smaller than the ranks, n = 0,
 *   - ad_mpi_sum_evaluator (the optimiser bridges in lockstep): its
 *     functions against ad_gradient_sum and ad_hvp_sum; where meson finds
 *     liblbfgs (TEST_MPI_LBFGS) and GSL (TEST_MPI_GSL), ad_lbfgs_minimize
 *     and ad_gsl_minimize on a sum through it converge on every rank to
 *     the bits of the one-process run, and a failing term (at the first
 *     point, or later in the run) or ranks that start from different x
 *     give the same status, point and evaluation count on every rank.
 * Every rank checks; the failures are added up and rank 0 prints each
 * failed check.  Exit status 0 only if every check passed on every rank. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dualrev.h>
#include <dualrev/mpi.h>

#include "mpi_check.h"
#ifdef TEST_MPI_LBFGS
#include <lbfgs.h>

#include <dualrev/lbfgs.h>
#endif
#ifdef TEST_MPI_GSL
#include <gsl/gsl_multimin.h>

#include <dualrev/gsl.h>
#endif

enum { N = 7, TERMS = 3001 };


/* ---- the problems ---- */

/* Row i's data: a[N] in [-1, 1), b, weight c > 0, from i alone. */
static void row(size_t i, double *a, double *b, double *c)
{
    uint64_t s = UINT64_C(0x9E3779B97F4A7C15) * (i + 1);
    for (int j = 0; j < N; j++) {
        s ^= s >> 33;
        s *= UINT64_C(0xff51afd7ed558ccd);
        s ^= s >> 29;
        a[j] = (double)(s >> 11) * 0x1.0p-52 - 1.0;
    }
    *b = sin((double)i);
    *c = 1.0 + (double)(i % 5);
}

typedef struct problem {
    size_t fail_foreign;   /* a term that returns a value of no recording (SIZE_MAX: none) */
    size_t fail_nonfinite; /* a term that makes log(-1) (AD_ENONFINITE under the checks) */
} problem;

/* A logistic loss of row i plus a little curvature: nonlinear, so that
 * the order of additions shows in the last bits. */
static ad_real logistic(size_t i, const ad_real *x, size_t n, void *ctx)
{
    const problem *p = ctx;
    double a[N], b, c;
    row(i, a, &b, &c);
    ad_real z = ad_dot(n, x, a);
    if (i == p->fail_foreign) {
        ad_real bogus = z;
        bogus.id += 1000000;  /* an ID the recording has not made */
        return bogus;
    }
    if (i == p->fail_nonfinite)
        z = ad_log(ad_sub(ad_mul(z, 0.0), 1.0));
    ad_real y = b > 0 ? ad_const(1.0) : ad_const(-1.0);
    ad_real t = ad_neg(ad_mul(y, z));
    return ad_add(ad_mul(c, ad_log1p(ad_exp(t))), ad_mul(0.01, ad_mul(z, z)));
}

/* (c/2) (a.x - b)^2: gradient c (a.x - b) a, H v = c a (a.v). */
static ad_real quadratic(size_t i, const ad_real *x, size_t n, void *ctx)
{
    double a[N], b, c;
    (void)ctx;
    row(i, a, &b, &c);
    ad_real r = ad_sub(ad_dot(n, x, a), b);
    return ad_mul(0.5 * c, ad_mul(r, r));
}

static void closed_form(size_t nterms, const double *x, const double *v, double *f, double *g,
                        double *hv)
{
    long double F = 0, G[N] = {0}, H[N] = {0};
    for (size_t i = 0; i < nterms; i++) {
        double a[N], b, c;
        row(i, a, &b, &c);
        long double r = -(long double)b, av = 0;
        for (int j = 0; j < N; j++) {
            r += (long double)a[j] * x[j];
            av += (long double)a[j] * v[j];
        }
        F += 0.5L * c * r * r;
        for (int j = 0; j < N; j++) {
            G[j] += c * r * a[j];
            H[j] += c * av * a[j];
        }
    }
    *f = (double)F;
    for (int j = 0; j < N; j++) {
        g[j] = (double)G[j];
        hv[j] = (double)H[j];
    }
}

static const double X[N] = {0.3, -0.2, 0.1, 0.7, -0.5, 0.25, -0.05};
static const double V[N] = {1.0, 0.5, -0.25, 0.125, 2.0, -1.0, 0.75};



/* ---- the checks, on a communicator of `size` ranks ---- */

/* Bitwise equal to ad_gradient_sum / ad_hvp_sum in this process, on 1 and
 * 2 threads, at the default budget and a small one (many chunks). */
static void check_bits(MPI_Comm comm)
{
    problem p = {SIZE_MAX, SIZE_MAX};
    static const size_t budgets[] = {0, 4096};
    static const size_t counts[] = {TERMS, 40, 2, 1};
    for (size_t b = 0; b < 2; b++) {
        size_t was = ad_set_sum_chunk_bytes(budgets[b]);
        for (size_t k = 0; k < 4; k++) {
            size_t nt = counts[k];
            double f0 = 0.0, g0[N] = {0}, h0[N] = {0}, f1 = 0.0, g1[N] = {0}, h1[N] = {0};
            ad_status s = ad_gradient_sum(logistic, &p, nt, N, X, &f0, g0, 1);
            CHECK(s == AD_OK);
            for (unsigned th = 1; th <= 2; th++) {
                s = ad_mpi_gradient_sum(comm, logistic, &p, nt, N, X, &f1, g1, th);
                CHECK(s == AD_OK);
                CHECK(same_bits(&f0, &f1, 1) && same_bits(g0, g1, N));
            }
            s = ad_hvp_sum(logistic, &p, nt, N, X, V, &f0, g0, h0, 2);
            CHECK(s == AD_OK);
            for (unsigned th = 1; th <= 2; th++) {
                s = ad_mpi_hvp_sum(comm, logistic, &p, nt, N, X, V, &f1, g1, h1, th);
                CHECK(s == AD_OK);
                CHECK(same_bits(&f0, &f1, 1) && same_bits(g0, g1, N) && same_bits(h0, h1, N));
            }
        }
        ad_set_sum_chunk_bytes(was);
    }
}

/* The building blocks: a plan's chunks added in order are ad_gradient_sum. */
static void check_chunks(void)
{
    problem p = {SIZE_MAX, SIZE_MAX};
    ad_sum_plan plan;
    CHECK(ad_sum_plan_make(logistic, &p, TERMS, N, X, 0, &plan) == AD_OK);
    CHECK(plan.nterms == TERMS && plan.per >= 1 &&
          plan.nchunks == 1 + (TERMS - 1 + plan.per - 1) / plan.per && plan.nchunks >= 17);
    double *out = malloc(plan.nchunks * (1 + N) * sizeof *out);
    CHECK(out != NULL);
    if (!out)
        return;
    size_t failed = 0;
    CHECK(ad_gradient_sum_chunks(logistic, &p, &plan, N, X, 0, plan.nchunks, out, &failed, 2) ==
          AD_OK);
    CHECK(failed == plan.nchunks);
    double f = 0.0, g[N] = {0}, f0, g0[N];
    for (size_t c = 0; c < plan.nchunks; c++) {
        f += out[c * (1 + N)];
        for (int j = 0; j < N; j++)
            g[j] += out[c * (1 + N) + 1 + (size_t)j];
    }
    CHECK(ad_gradient_sum(logistic, &p, TERMS, N, X, &f0, g0, 1) == AD_OK);
    CHECK(same_bits(&f, &f0, 1) && same_bits(g, g0, N));
    /* chunk 0 is term 0 alone */
    double f_t0, g_t0[N];
    CHECK(ad_gradient_sum(logistic, &p, 1, N, X, &f_t0, g_t0, 1) == AD_OK);
    CHECK(same_bits(&f_t0, out, 1) && same_bits(g_t0, out + 1, N));
    /* bad ranges and plans */
    ad_sum_plan bad = plan;
    bad.nchunks++;
    CHECK(ad_gradient_sum_chunks(logistic, &p, &bad, N, X, 0, 1, out, &failed, 1) == AD_EINVAL);
    CHECK(failed == 0 && all_nan(out, 1 + N));
    CHECK(ad_gradient_sum_chunks(logistic, &p, &plan, N, X, 2, 1, out, NULL, 1) == AD_EINVAL);
    CHECK(ad_gradient_sum_chunks(logistic, &p, &plan, N, X, 0, plan.nchunks + 1, out, NULL, 1) ==
          AD_EINVAL);
    CHECK(ad_gradient_sum_chunks(logistic, &p, NULL, N, X, 0, 1, out, NULL, 1) == AD_EINVAL);
    CHECK(ad_gradient_sum_chunks(logistic, &p, &plan, N, X, 3, 3, NULL, NULL, 1) == AD_OK);
    CHECK(ad_hvp_sum_chunks(logistic, &p, &plan, N, X, NULL, 0, 1, out, NULL, 1) == AD_EINVAL);
    CHECK(ad_sum_plan_make(NULL, &p, TERMS, N, X, 0, &plan) == AD_EINVAL);
    CHECK(ad_sum_plan_make(logistic, &p, TERMS, N, X, 0, NULL) == AD_EINVAL);
    CHECK(ad_sum_plan_make(logistic, &p, 0, N, X, 1, &plan) == AD_OK && plan.nchunks == 0);
    /* a failing chunk: its index, and the status ad_gradient_sum gives */
    p.fail_foreign = TERMS - 2;
    CHECK(ad_sum_plan_make(logistic, &p, TERMS, N, X, 0, &plan) == AD_OK);
    CHECK(ad_gradient_sum_chunks(logistic, &p, &plan, N, X, 0, plan.nchunks, out, &failed, 2) ==
          AD_EFOREIGN);
    CHECK(failed == plan.nchunks - 1 && all_nan(out, plan.nchunks * (1 + N)));
    free(out);
}

static void check_closed_form(MPI_Comm comm)
{
    double f = 0.0, g[N] = {0}, hv[N] = {0}, fe = 0.0, ge[N] = {0}, he[N] = {0};
    closed_form(TERMS, X, V, &fe, ge, he);
    CHECK(ad_mpi_hvp_sum(comm, quadratic, NULL, TERMS, N, X, V, &f, g, hv, 2) == AD_OK);
    CHECK(fabs(f - fe) <= 1e-12 * fabs(fe));
    for (int j = 0; j < N; j++) {
        CHECK(fabs(g[j] - ge[j]) <= 1e-11 * (1 + fabs(ge[j])));
        CHECK(fabs(hv[j] - he[j]) <= 1e-11 * (1 + fabs(he[j])));
    }
    double f1 = 0.0, g1[N] = {0};
    CHECK(ad_mpi_gradient_sum(comm, quadratic, NULL, TERMS, N, X, &f1, g1, 1) == AD_OK);
    CHECK(same_bits(&f, &f1, 1) && same_bits(g, g1, N));
}

/* A failing term: in the last rank's chunks, or two failures whose lower
 * chunk must win on every rank. */
static void check_failures(MPI_Comm comm)
{
    double f = 0.0, g[N] = {0}, hv[N] = {0};
    ad_status s;
    problem p = {TERMS - 3, SIZE_MAX};  /* the last chunk: the last rank's */
    for (unsigned th = 1; th <= 2; th++) {
        s = ad_mpi_gradient_sum(comm, logistic, &p, TERMS, N, X, &f, g, th);
        CHECK(s == AD_EFOREIGN && same_everywhere(comm, s));
        CHECK(all_nan(&f, 1) && all_nan(g, N));
        s = ad_mpi_hvp_sum(comm, logistic, &p, TERMS, N, X, V, &f, g, hv, th);
        CHECK(s == AD_EFOREIGN && same_everywhere(comm, s));
        CHECK(all_nan(&f, 1) && all_nan(g, N) && all_nan(hv, N));
    }
    /* two failures: the one in the lower chunk is reported, as in one process */
    unsigned was = ad_set_checks(AD_CHECK_FINITE);
    problem q = {TERMS - 3, TERMS / 3};
    double f0, g0[N];
    ad_status s0 = ad_gradient_sum(logistic, &q, TERMS, N, X, &f0, g0, 2);
    CHECK(s0 == AD_ENONFINITE);
    s = ad_mpi_gradient_sum(comm, logistic, &q, TERMS, N, X, &f, g, 2);
    CHECK(s == s0 && same_everywhere(comm, s) && all_nan(&f, 1) && all_nan(g, N));
    q = (problem){TERMS / 3, TERMS - 3};
    s = ad_mpi_gradient_sum(comm, logistic, &q, TERMS, N, X, &f, g, 2);
    CHECK(s == AD_EFOREIGN && same_everywhere(comm, s));
    /* term 0 fails: the plan's recording, on every rank */
    q = (problem){0, SIZE_MAX};
    s = ad_mpi_gradient_sum(comm, logistic, &q, TERMS, N, X, &f, g, 2);
    CHECK(s == AD_EFOREIGN && same_everywhere(comm, s) && all_nan(g, N));
    ad_set_checks(was);
}

static void check_arguments(MPI_Comm comm, int size)
{
    problem p = {SIZE_MAX, SIZE_MAX};
    double f = 0.0, g[N] = {0}, hv[N] = {0}, x[N] = {0};
    ad_status s;
    int me;
    MPI_Comm_rank(comm, &me);
    /* bad arguments on every rank */
    CHECK(ad_mpi_gradient_sum(comm, NULL, &p, TERMS, N, X, &f, g, 1) == AD_EINVAL &&
          all_nan(&f, 1) && all_nan(g, N));
    CHECK(ad_mpi_gradient_sum(comm, logistic, &p, TERMS, N, NULL, &f, g, 1) == AD_EINVAL);
    CHECK(ad_mpi_gradient_sum(comm, logistic, &p, TERMS, N, X, NULL, g, 1) == AD_EINVAL &&
          all_nan(g, N));
    CHECK(ad_mpi_hvp_sum(comm, logistic, &p, TERMS, N, X, NULL, &f, g, hv, 1) == AD_EINVAL &&
          all_nan(hv, N));
    CHECK(ad_mpi_gradient_sum(MPI_COMM_NULL, logistic, &p, TERMS, N, X, &f, g, 1) == AD_EINVAL &&
          all_nan(g, N));
    /* on the last rank only: every rank learns it */
    int last = me == size - 1;
    s = ad_mpi_gradient_sum(comm, logistic, &p, TERMS, N, X, &f, last ? NULL : g, 1);
    CHECK(s == AD_EINVAL && same_everywhere(comm, s) && (last || all_nan(g, N)));
    /* a different sum, or a different x, on the last rank */
    s = ad_mpi_gradient_sum(comm, logistic, &p, last ? TERMS - 1 : TERMS, N, X, &f, g, 1);
    CHECK(s == (size > 1 ? AD_EINVAL : AD_OK) && same_everywhere(comm, s));
    memcpy(x, X, sizeof x);
    if (last)
        x[3] = nextafter(x[3], 1.0);
    s = ad_mpi_hvp_sum(comm, logistic, &p, TERMS, N, x, V, &f, g, hv, 1);
    CHECK(s == (size > 1 ? AD_EINVAL : AD_OK) && same_everywhere(comm, s));
    /* the gradient on some ranks, H v on the others */
    if (size > 1) {
        s = last ? ad_mpi_hvp_sum(comm, logistic, &p, TERMS, N, X, V, &f, g, hv, 1)
                 : ad_mpi_gradient_sum(comm, logistic, &p, TERMS, N, X, &f, g, 1);
        CHECK(s == AD_EINVAL && same_everywhere(comm, s));
    }
    /* a different budget on one rank: a different chunking */
    if (size > 1) {
        size_t was = ad_set_sum_chunk_bytes(last ? 4096 : 0);
        s = ad_mpi_gradient_sum(comm, logistic, &p, TERMS, N, X, &f, g, 1);
        CHECK(s == AD_EINVAL && same_everywhere(comm, s));
        ad_set_sum_chunk_bytes(was);
    }
    /* nterms = 0, and n = 0 */
    s = ad_mpi_gradient_sum(comm, logistic, &p, 0, N, X, &f, g, 2);
    CHECK(s == AD_OK && f == 0.0 && !signbit(f));
    for (int j = 0; j < N; j++)
        CHECK(g[j] == 0.0);
    s = ad_mpi_hvp_sum(comm, logistic, &p, 0, 0, NULL, NULL, &f, NULL, NULL, 2);
    CHECK(s == AD_OK && f == 0.0);
    double f0, fz;
    CHECK(ad_gradient_sum(logistic, &p, 5, 0, NULL, &f0, NULL, 1) == AD_OK);
    CHECK(ad_mpi_gradient_sum(comm, logistic, &p, 5, 0, NULL, &fz, NULL, 2) == AD_OK);
    CHECK(same_bits(&f0, &fz, 1));
}

/* ---- the optimiser bridges over the ranks (ad_mpi_sum_evaluator) ---- */

enum { BRIDGE_TERMS = 601 };

/* logistic, but term fail_foreign fails only once x[0] has left X[0]: a
 * failure in the middle of a run, after a successful first evaluation. */
static ad_real logistic_later(size_t i, const ad_real *x, size_t n, void *ctx)
{
    static problem fine = {SIZE_MAX, SIZE_MAX};  /* read only */
    return logistic(i, x, n, ad_value(x[0]) == X[0] ? &fine : ctx);
}

/* The same bits of n doubles on every rank of comm (rank 0's). */
static int same_bits_everywhere(MPI_Comm comm, const double *a, size_t n)
{
    double b[N + 1];
    int differ, any;
    memcpy(b, a, n * sizeof *a);
    MPI_Bcast(b, (int)n, MPI_DOUBLE, 0, comm);
    differ = !same_bits(a, b, n);
    MPI_Allreduce(&differ, &any, 1, MPI_INT, MPI_MAX, comm);
    return !any;
}

/* The evaluator's functions: the MPI sums' bits, the same as the
 * one-process sums' and the default (zero or NULL) evaluator's. */
static void check_evaluator(MPI_Comm comm)
{
    problem p = {SIZE_MAX, SIZE_MAX};
    ad_sum_evaluator e = ad_mpi_sum_evaluator(&comm), none, bad = ad_mpi_sum_evaluator(NULL);
    memset(&none, 0, sizeof none);
    double f0 = 0.0, g0[N] = {0}, h0[N] = {0}, f1 = 0.0, g1[N] = {0}, h1[N] = {0};
    CHECK(ad_hvp_sum(logistic, &p, TERMS, N, X, V, &f0, g0, h0, 1) == AD_OK);
    for (unsigned th = 1; th <= 2; th++) {
        CHECK(ad_sum_evaluator_gradient(&e, logistic, &p, TERMS, N, X, &f1, g1, th) == AD_OK);
        CHECK(same_bits(&f0, &f1, 1) && same_bits(g0, g1, N));
        CHECK(ad_sum_evaluator_hvp(&e, logistic, &p, TERMS, N, X, V, &f1, g1, h1, th) == AD_OK);
        CHECK(same_bits(&f0, &f1, 1) && same_bits(g0, g1, N) && same_bits(h0, h1, N));
        CHECK(ad_sum_evaluator_gradient(&none, logistic, &p, TERMS, N, X, &f1, g1, th) == AD_OK);
        CHECK(same_bits(&f0, &f1, 1) && same_bits(g0, g1, N));
        CHECK(ad_sum_evaluator_hvp(NULL, logistic, &p, TERMS, N, X, V, &f1, g1, h1, th) == AD_OK);
        CHECK(same_bits(&f0, &f1, 1) && same_bits(g0, g1, N) && same_bits(h0, h1, N));
    }
    /* a failing term, in the last rank's chunks: the same status everywhere */
    p.fail_foreign = TERMS - 3;
    ad_status s = ad_sum_evaluator_gradient(&e, logistic, &p, TERMS, N, X, &f1, g1, 2);
    CHECK(s == AD_EFOREIGN && same_everywhere(comm, s) && all_nan(&f1, 1) && all_nan(g1, N));
    s = ad_sum_evaluator_hvp(&e, logistic, &p, TERMS, N, X, V, &f1, g1, h1, 2);
    CHECK(s == AD_EFOREIGN && same_everywhere(comm, s) && all_nan(h1, N));
    /* no communicator: AD_EINVAL at once, NaN */
    CHECK(ad_sum_evaluator_gradient(&bad, logistic, &p, TERMS, N, X, &f1, g1, 1) == AD_EINVAL &&
          all_nan(&f1, 1) && all_nan(g1, N));
    CHECK(ad_sum_evaluator_hvp(&bad, logistic, &p, TERMS, N, X, V, &f1, g1, h1, 1) ==
              AD_EINVAL &&
          all_nan(h1, N));
}

#ifdef TEST_MPI_LBFGS
typedef struct lbfgs_run {
    ad_status s;
    int ret;
    unsigned long evaluations;
    double fx, x[N];
} lbfgs_run;

/* ad_lbfgs_minimize on the sum from x0: in this process (comm NULL), or
 * over comm's ranks through ad_mpi_sum_evaluator. */
static lbfgs_run lbfgs_sum(MPI_Comm *comm, ad_term term, problem *p, const double *x0,
                           unsigned threads)
{
    lbfgs_run r;
    lbfgs_parameter_t param;
    lbfgs_parameter_init(&param);
    param.epsilon = 1e-8;
    param.max_iterations = 500;
    ad_lbfgs b = ad_lbfgs_of_sum(term, p, BRIDGE_TERMS, threads);
    if (comm)
        b.evaluator = ad_mpi_sum_evaluator(comm);
    memcpy(r.x, x0, sizeof r.x);
    r.fx = NAN;
    r.s = ad_lbfgs_minimize(N, r.x, &r.fx, &b, &param, &r.ret);
    r.evaluations = b.evaluations;
    return r;
}

/* The run over the ranks is the one-process run: status, lbfgs's code,
 * evaluations, x and fx, the same on every rank. */
static int same_run(MPI_Comm comm, const lbfgs_run *a, const lbfgs_run *b)
{
    double ev[2] = {(double)a->evaluations, (double)a->ret};
    return a->s == b->s && a->ret == b->ret && a->evaluations == b->evaluations &&
           same_bits(&a->fx, &b->fx, 1) && same_bits(a->x, b->x, N) &&
           same_everywhere(comm, a->s) && same_bits_everywhere(comm, ev, 2) &&
           same_bits_everywhere(comm, a->x, N) && same_bits_everywhere(comm, &a->fx, 1);
}

static void check_lbfgs(MPI_Comm comm, int size)
{
    problem p = {SIZE_MAX, SIZE_MAX};
    int me;
    MPI_Comm_rank(comm, &me);
    lbfgs_run one = lbfgs_sum(NULL, logistic, &p, X, 1);
    CHECK(one.s == AD_OK && one.ret == LBFGS_SUCCESS && one.evaluations > 5);
    for (unsigned th = 1; th <= 2; th++) {
        lbfgs_run all = lbfgs_sum(&comm, logistic, &p, X, th);
        CHECK(all.s == AD_OK && all.ret == LBFGS_SUCCESS);
        CHECK(same_run(comm, &all, &one));
    }
    /* converged: the gradient at the optimum is small */
    double f, g[N], gn = 0.0;
    CHECK(ad_gradient_sum(logistic, &p, BRIDGE_TERMS, N, one.x, &f, g, 1) == AD_OK);
    for (int j = 0; j < N; j++)
        gn = fmax(gn, fabs(g[j]));
    CHECK(gn < 1e-6 * (1.0 + fabs(f)));
    /* a term that fails at the first point, in the last rank's chunks */
    for (unsigned th = 1; th <= 2; th++) {
        p.fail_foreign = BRIDGE_TERMS - 3;
        one = lbfgs_sum(NULL, logistic, &p, X, 1);
        lbfgs_run all = lbfgs_sum(&comm, logistic, &p, X, th);
        CHECK(one.s == AD_EFOREIGN && one.evaluations == 1);
        CHECK(same_run(comm, &all, &one));
        /* the same term, once the run has left X: later, the same everywhere */
        one = lbfgs_sum(NULL, logistic_later, &p, X, 1);
        all = lbfgs_sum(&comm, logistic_later, &p, X, th);
        CHECK(one.s == AD_EFOREIGN && one.evaluations >= 2);
        CHECK(same_run(comm, &all, &one));
        /* a term in the first rank's chunks (chunk 1) */
        p.fail_foreign = 1;
        one = lbfgs_sum(NULL, logistic_later, &p, X, 1);
        all = lbfgs_sum(&comm, logistic_later, &p, X, th);
        CHECK(one.s == AD_EFOREIGN && one.evaluations >= 2);
        CHECK(same_run(comm, &all, &one));
    }
    /* ranks out of step (the last starts elsewhere): AD_EINVAL on every
     * rank at the first evaluation, nobody left waiting */
    if (size > 1) {
        double x[N];
        p.fail_foreign = SIZE_MAX;
        memcpy(x, X, sizeof x);
        if (me == size - 1)
            x[2] = nextafter(x[2], 1.0);
        lbfgs_run all = lbfgs_sum(&comm, logistic, &p, x, 2);
        CHECK(all.s == AD_EINVAL && same_everywhere(comm, all.s) && all.evaluations == 1);
    }
    /* no communicator */
    ad_lbfgs b = ad_lbfgs_of_sum(logistic, &p, BRIDGE_TERMS, 1);
    b.evaluator = ad_mpi_sum_evaluator(NULL);
    double x[N];
    int ret;
    memcpy(x, X, sizeof x);
    CHECK(ad_lbfgs_minimize(N, x, &f, &b, NULL, &ret) == AD_EINVAL && b.evaluations == 1);
}
#endif

#ifdef TEST_MPI_GSL
typedef struct gsl_run {
    ad_status s;
    int code;
    long iterations;
    unsigned long evaluations;
    double fx, x[N];
} gsl_run;

static gsl_run gsl_sum(MPI_Comm *comm, ad_term term, problem *p, unsigned threads)
{
    gsl_run r;
    ad_gsl b;
    memcpy(r.x, X, sizeof r.x);
    r.fx = NAN;
    r.s = ad_gsl_init_sum(&b, term, p, BRIDGE_TERMS, N, threads);
    if (r.s != AD_OK)
        return r;
    if (comm)
        b.evaluator = ad_mpi_sum_evaluator(comm);
    r.s = ad_gsl_minimize(&b, gsl_multimin_fdfminimizer_vector_bfgs2, r.x, 0.01, 0.1, 1e-4, 500,
                          &r.fx, &r.code);
    r.iterations = b.iterations;
    r.evaluations = b.evaluations;
    ad_gsl_free(&b);
    return r;
}

/* The run over the ranks, on 1 and 2 threads, is the one-process run:
 * status, GSL's code, iterations, evaluations, x and fx, the same on every
 * rank. */
static void check_gsl_same(MPI_Comm comm, ad_term term, problem *p, const gsl_run *one)
{
    for (unsigned th = 1; th <= 2; th++) {
        gsl_run all = gsl_sum(&comm, term, p, th);
        double ev[3] = {(double)all.code, (double)all.iterations, (double)all.evaluations};
        CHECK(all.s == one->s && all.code == one->code && all.iterations == one->iterations &&
              all.evaluations == one->evaluations);
        CHECK(same_bits(&all.fx, &one->fx, 1) && same_bits(all.x, one->x, N));
        CHECK(same_everywhere(comm, all.s) && same_bits_everywhere(comm, ev, 3) &&
              same_bits_everywhere(comm, all.x, N) && same_bits_everywhere(comm, &all.fx, 1));
    }
}

static void check_gsl(MPI_Comm comm)
{
    problem p = {SIZE_MAX, SIZE_MAX};
    gsl_run one = gsl_sum(NULL, logistic, &p, 1);
    CHECK(one.s == AD_OK && one.code == GSL_SUCCESS && one.iterations > 2);
    check_gsl_same(comm, logistic, &p, &one);
    /* a term (in the last rank's chunks) that fails once the run has left X */
    p.fail_foreign = BRIDGE_TERMS - 3;
    one = gsl_sum(NULL, logistic_later, &p, 1);
    CHECK(one.s == AD_EFOREIGN && one.evaluations >= 2);
    check_gsl_same(comm, logistic_later, &p, &one);
    /* no communicator */
    ad_gsl b;
    double x[N], fx;
    int code;
    memcpy(x, X, sizeof x);
    CHECK(ad_gsl_init_sum(&b, logistic, &p, BRIDGE_TERMS, N, 1) == AD_OK);
    b.evaluator = ad_mpi_sum_evaluator(NULL);
    CHECK(ad_gsl_minimize(&b, gsl_multimin_fdfminimizer_vector_bfgs2, x, 0.01, 0.1, 1e-4, 500, &fx,
                          &code) == AD_EINVAL &&
          b.evaluations == 1);
    ad_gsl_free(&b);
}
#endif

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    check_chunks();
    /* every communicator size up to the world's: ranks 0 .. size - 1 */
    for (int size = 1; size <= world; size++) {
        MPI_Comm comm;
        MPI_Comm_split(MPI_COMM_WORLD, rank < size ? 0 : MPI_UNDEFINED, rank, &comm);
        if (comm != MPI_COMM_NULL) {
            check_bits(comm);
            check_closed_form(comm);
            check_failures(comm);
            check_arguments(comm, size);
            check_evaluator(comm);
#ifdef TEST_MPI_LBFGS
            check_lbfgs(comm, size);
#endif
#ifdef TEST_MPI_GSL
            check_gsl(comm);
#endif
            MPI_Comm_free(&comm);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    int total;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("test_mpi: the bridges over the ranks: liblbfgs %s, GSL %s\n",
#ifdef TEST_MPI_LBFGS
               "tested",
#else
               "not found, skipped",
#endif
#ifdef TEST_MPI_GSL
               "tested");
#else
               "not found, skipped");
#endif
    if (rank == 0)
        printf("test_mpi: %d ranks, sub-communicators of 1 to %d ranks: %s (%d failed checks)\n",
               world, world, total ? "FAILED" : "ok", total);
    MPI_Finalize();
    return total != 0;
}
