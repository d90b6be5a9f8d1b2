/* lanes-bench: several directions per sweep (ad_linear_jvps,
 * ad_linear_vjps) against one sweep per direction, on a function shaped
 * like GradBench's hand tracking ("ht"): 26 parameters, a skinned point
 * cloud of 3 x POINTS residuals.
 *
 * The model: 5 bones, each a rotation by three angles (the parameters
 * 3b .. 3b+2, composed down a chain as a finger's joints are) and an
 * offset; each point is a blend of its two nearest bones' transforms,
 * plus a global translation (parameters 15 .. 17) and scale (18);
 * parameters 19 .. 25 bend the blend weights.  Written as a user writes
 * it, in scalar operations.  Then ad_hvps against ad_hvp calls on a
 * kmeans-like objective. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dualrev.h"
#include "timer.h"

#define N 26
#define BONES 5
#define POINTS 272

typedef struct cloud {
    double p[POINTS][3];
    int bone[POINTS][2];
} cloud;

/* R = Rz(c) Ry(b) Rx(a), row-major. */
static void rotation(ad_real a, ad_real b, ad_real c, ad_real R[9])
{
    ad_real ca = ad_cos(a), sa = ad_sin(a), cb = ad_cos(b), sb = ad_sin(b);
    ad_real cc = ad_cos(c), sc = ad_sin(c);
    R[0] = ad_mul(cc, cb);
    R[1] = ad_sub(ad_mul(ad_mul(cc, sb), sa), ad_mul(sc, ca));
    R[2] = ad_add(ad_mul(ad_mul(cc, sb), ca), ad_mul(sc, sa));
    R[3] = ad_mul(sc, cb);
    R[4] = ad_add(ad_mul(ad_mul(sc, sb), sa), ad_mul(cc, ca));
    R[5] = ad_sub(ad_mul(ad_mul(sc, sb), ca), ad_mul(cc, sa));
    R[6] = ad_neg(sb);
    R[7] = ad_mul(cb, sa);
    R[8] = ad_mul(cb, ca);
}

static void compose(const ad_real A[9], const ad_real B[9], ad_real C[9])
{
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) {
            ad_real s = ad_mul(A[3 * i], B[j]);
            for (int k = 1; k < 3; k++)
                s = ad_add(s, ad_mul(A[3 * i + k], B[3 * k + j]));
            C[3 * i + j] = s;
        }
}

static void hand(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const cloud *c = ctx;
    ad_real R[BONES][9], local[9];
    (void)n, (void)m;
    for (int b = 0; b < BONES; b++) {
        rotation(x[3 * b], x[3 * b + 1], x[3 * b + 2], local);
        if (b == 0)
            memcpy(R[0], local, sizeof local);
        else
            compose(R[b - 1], local, R[b]);
    }
    for (int i = 0; i < POINTS; i++) {
        int b0 = c->bone[i][0], b1 = c->bone[i][1];
        ad_real w = ad_div(1.0, ad_add(1.0, ad_exp(ad_neg(ad_mul(x[19 + i % 7], (double)(i % 5) - 2.0)))));
        for (int r = 0; r < 3; r++) {
            ad_real u = AD_CONST(ad_real, 0.0), v = AD_CONST(ad_real, 0.0);
            for (int k = 0; k < 3; k++) {
                u = ad_add(u, ad_mul(R[b0][3 * r + k], c->p[i][k]));
                v = ad_add(v, ad_mul(R[b1][3 * r + k], c->p[i][k]));
            }
            ad_real blend = ad_add(ad_mul(w, u), ad_mul(ad_sub(1.0, w), v));
            y[3 * i + r] = ad_sub(ad_add(ad_mul(x[18], blend), x[15 + r]), c->p[i][r]);
        }
    }
}

typedef struct job {
    ad_linear *L;
    size_t k;
    const double *V, *W;
    double *out;
} job;

static void singles_fwd(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t it = 0; it < iters; it++)
        for (size_t d = 0; d < j->k; d++)
            if (ad_linear_jvp(j->L, j->V + d * N, j->out + d * 3 * POINTS) != AD_OK)
                exit(1);
}

static void many_fwd(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t it = 0; it < iters; it++)
        if (ad_linear_jvps(j->L, j->k, j->V, j->out) != AD_OK)
            exit(1);
}

static void singles_rev(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t it = 0; it < iters; it++)
        for (size_t d = 0; d < j->k; d++)
            if (ad_linear_vjp(j->L, j->W + d * 3 * POINTS, j->out + d * N) != AD_OK)
                exit(1);
}

static void many_rev(void *ctx, size_t iters)
{
    job *j = ctx;
    for (size_t it = 0; it < iters; it++)
        if (ad_linear_vjps(j->L, j->k, j->W, j->out) != AD_OK)
            exit(1);
}

typedef struct whole {
    const cloud *c;
    double x[N], y[3 * POINTS], *J;
} whole;

static void jacobian(void *ctx, size_t iters)
{
    whole *w = ctx;
    for (size_t it = 0; it < iters; it++)
        if (ad_jacobian(hand, (void *)w->c, N, w->x, 3 * POINTS, w->y, w->J) != AD_OK)
            exit(1);
}

static double lcg(unsigned long *s)
{
    *s = *s * 6364136223846793005UL + 1442695040888963407UL;
    return (double)(*s >> 11) / 9007199254740992.0;
}

/* ---- Hessian-vector products: a kmeans-like objective (GradBench's
 * kmeans "dir"): sum over points of the squared distance to the nearest
 * of K centroids, the centroids the parameters. ---- */

#define KM_K 10
#define KM_D 8
#define KM_P 1000

typedef struct kmeans {
    double x[KM_P][KM_D];
} kmeans;

static ad_real kmeans_cost(const ad_real *c, size_t n, void *ctx)
{
    const kmeans *km = ctx;
    ad_real total = AD_CONST(ad_real, 0.0);
    (void)n;
    for (int i = 0; i < KM_P; i++) {
        ad_real best = AD_CONST(ad_real, INFINITY);
        for (int k = 0; k < KM_K; k++) {
            ad_real dist = AD_CONST(ad_real, 0.0);
            for (int j = 0; j < KM_D; j++) {
                ad_real t = ad_sub(km->x[i][j], c[k * KM_D + j]);
                dist = ad_add(dist, ad_mul(t, t));
            }
            best = ad_fmin(best, dist);
        }
        total = ad_add(total, best);
    }
    return total;
}

typedef struct hjob {
    const kmeans *km;
    size_t k;
    const double *c, *V;
    double fx, g[KM_K * KM_D], *HV;
} hjob;

static void hvp_singles(void *ctx, size_t iters)
{
    hjob *j = ctx;
    for (size_t it = 0; it < iters; it++)
        for (size_t d = 0; d < j->k; d++)
            if (ad_hvp(kmeans_cost, (void *)j->km, KM_K * KM_D, j->c, j->V + d * KM_K * KM_D, &j->fx,
                       j->g, j->HV + d * KM_K * KM_D) != AD_OK)
                exit(1);
}

static void hvp_many(void *ctx, size_t iters)
{
    hjob *j = ctx;
    for (size_t it = 0; it < iters; it++)
        if (ad_hvps(kmeans_cost, (void *)j->km, KM_K * KM_D, j->c, j->k, j->V, &j->fx, j->g,
                    j->HV) != AD_OK)
            exit(1);
}

static void gradient_only(void *ctx, size_t iters)
{
    hjob *j = ctx;
    for (size_t it = 0; it < iters; it++)
        if (ad_gradient(kmeans_cost, (void *)j->km, KM_K * KM_D, j->c, &j->fx, j->g) != AD_OK)
            exit(1);
}

static int hvps_section(const bench_plan *plan, unsigned long *seed)
{
    static kmeans km;
    enum { HN = KM_K * KM_D, HK = 8 };
    double c[HN], V[HK * HN], HV1[HK * HN], HV2[HK * HN];
    for (int i = 0; i < KM_P; i++)
        for (int j = 0; j < KM_D; j++)
            km.x[i][j] = lcg(seed);
    for (int i = 0; i < HN; i++)
        c[i] = lcg(seed);
    for (int i = 0; i < HK * HN; i++)
        V[i] = 2.0 * lcg(seed) - 1.0;
    printf("\nkmeans-like (GradBench kmeans dir): %d centroids of %d, %d points; n = %d\n", KM_K,
           KM_D, KM_P, HN);
    static const size_t ks[] = {1, 4, 8};
    for (size_t i = 0; i < 3; i++) {
        hjob a = {.km = &km, .k = ks[i], .c = c, .V = V, .HV = HV1};
        hjob b = {.km = &km, .k = ks[i], .c = c, .V = V, .HV = HV2};
        bench_body body[3] = {hvp_singles, hvp_many, gradient_only};
        void *ctx[3] = {&a, &b, &a};
        bench_time t[3];
        bench_measure_side_by_side(plan, 3, body, ctx, t);
        double worst = 0.0;
        for (size_t q = 0; q < ks[i] * HN; q++) {
            double d = fabs(HV1[q] - HV2[q]) / (fabs(HV1[q]) + 1e-300);
            worst = d > worst ? d : worst;
        }
        char x1[16], x2[16], x3[16];
        printf("ad_hvps k = %zu: %zu ad_hvp %10s, ad_hvps %10s: %5.2fx; ad_gradient %10s "
               "(ad_hvp = %.2f gradients); largest relative difference %.1e\n",
               ks[i], ks[i], fmt_time(x1, t[0].median_ns), fmt_time(x2, t[1].median_ns),
               t[0].median_ns / t[1].median_ns, fmt_time(x3, t[2].median_ns),
               t[0].median_ns / (double)ks[i] / t[2].median_ns, worst);
        if (!(worst <= 1e-13))
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    bench_plan plan = {11, 20e6};
    if (argc > 1)
        plan.reps = atoi(argv[1]);
    static cloud c;
    unsigned long seed = 1;
    for (int i = 0; i < POINTS; i++) {
        for (int k = 0; k < 3; k++)
            c.p[i][k] = 2.0 * lcg(&seed) - 1.0;
        c.bone[i][0] = i % BONES;
        c.bone[i][1] = (i + 1) % BONES;
    }
    static whole w;
    w.c = &c;
    for (int i = 0; i < N; i++)
        w.x[i] = 0.3 * lcg(&seed) + (i == 18);
    size_t m = 3 * POINTS, kmax = N;
    double *V = malloc(kmax * N * sizeof *V), *W = malloc(kmax * m * sizeof *W);
    double *out = malloc(kmax * m * sizeof *out), *out2 = malloc(kmax * m * sizeof *out2);
    w.J = malloc(m * N * sizeof *w.J);
    if (!V || !W || !out || !out2 || !w.J)
        return 1;
    for (size_t i = 0; i < kmax * N; i++)
        V[i] = 2.0 * lcg(&seed) - 1.0;
    for (size_t i = 0; i < kmax * m; i++)
        W[i] = 2.0 * lcg(&seed) - 1.0;
    ad_linear *L;
    if (ad_linearize(hand, &c, N, w.x, m, w.y, &L) != AD_OK)
        return 1;
    ad_tape_stats st;
    jacobian(&w, 1);  /* on the thread's tape, whose statistics these are */
    if (ad_tape_stats_get(&st) != AD_OK)
        return 1;
    printf("ht-like: n = %d, m = %zu, %zu records a recording; median of %d batches\n", N, m,
           st.records, plan.reps);
    printf("%-28s %10s %10s %8s %s\n", "", "singles", "one call", "speed-up", "results");
    static const size_t ks[] = {4, 8, 26};
    for (int dir = 0; dir < 2; dir++)
        for (size_t i = 0; i < 3; i++) {
            size_t k = ks[i], len = dir ? N : m;
            job a = {L, k, V, W, out}, b = {L, k, V, W, out2};
            bench_body body[2] = {dir ? singles_rev : singles_fwd, dir ? many_rev : many_fwd};
            void *ctx[2] = {&a, &b};
            bench_time t[2];
            bench_measure_side_by_side(&plan, 2, body, ctx, t);
            int same = !memcmp(out, out2, k * len * sizeof *out);
            char x1[16], x2[16];
            printf("%s k = %-2zu %15s %10s %10s %7.2fx %s\n", dir ? "ad_linear_vjps" : "ad_linear_jvps",
                   k, "", fmt_time(x1, t[0].median_ns), fmt_time(x2, t[1].median_ns),
                   t[0].median_ns / t[1].median_ns, same ? "bitwise the singles'" : "DIFFER");
            if (!same)
                return 1;
        }
    bench_time tj = bench_measure(&plan, jacobian, &w);
    char xj[16];
    printf("ad_jacobian (records, then %d columns in lanes): %s\n", N, fmt_time(xj, tj.median_ns));
    ad_linear_free(L);
    free(V), free(W), free(out), free(out2), free(w.J);
    return hvps_section(&plan, &seed);
}
