/* The MLP of examples/mlp_batch.h (16 -> 64 -> 64 -> 1, tanh, 5 313
 * parameters, a batch of 64, mean squared error): the gradient's time as a
 * multiple of the plain forward pass, for
 *   - the recorded-matrix form (ad_mat_mul with the bias, ad_mat_map tanh),
 *   - scalar code (ad_mul / ad_add loops, ad_tanh per entry),
 *   - ad_mat_make once and ad_mat_vec per sample (issue 36's best before);
 * the forward pass is the same source on doubles (ad_mat_mul_d,
 * ad_mat_map_d), and a plain C loop (i-l-j loops, tanh) beside it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <dualrev.h>

#include "timer.h"

#define MLP_T ad_real
#define MLP_NAME mlp_loss
#include "../examples/mlp_batch.h"
#undef MLP_T
#undef MLP_NAME
#define MLP_T double
#define MLP_NAME mlp_loss_d
#include "../examples/mlp_batch.h"

static double P[MLP_PARAMS], G[MLP_PARAMS], X[MLP_IN * MLP_B], T[MLP_B];
static ad_real work_r[4 * MLP_H * MLP_B + MLP_B];
static double work_d[4 * MLP_H * MLP_B + MLP_B];

/* Scalar code: each entry a loop of ad_mul / ad_add, then ad_tanh. */
static ad_real mlp_scalar(const ad_real *p, size_t n, void *ctx)
{
    (void)n;
    (void)ctx;
    const ad_real *W1 = p, *b1 = W1 + MLP_H * MLP_IN, *W2 = b1 + MLP_H, *b2 = W2 + MLP_H * MLP_H,
                  *W3 = b2 + MLP_H, *b3 = W3 + MLP_H;
    ad_real *h1 = work_r, *h2 = h1 + MLP_H * MLP_B, *r = h2 + MLP_H * MLP_B;
    for (size_t i = 0; i < MLP_H; i++)
        for (size_t j = 0; j < MLP_B; j++) {
            ad_real s = ad_const(0.0);
            for (size_t l = 0; l < MLP_IN; l++)
                s = ad_add(s, ad_mul(W1[i * MLP_IN + l], X[l * MLP_B + j]));
            h1[i * MLP_B + j] = ad_tanh(ad_add(s, b1[i]));
        }
    for (size_t i = 0; i < MLP_H; i++)
        for (size_t j = 0; j < MLP_B; j++) {
            ad_real s = ad_const(0.0);
            for (size_t l = 0; l < MLP_H; l++)
                s = ad_add(s, ad_mul(W2[i * MLP_H + l], h1[l * MLP_B + j]));
            h2[i * MLP_B + j] = ad_tanh(ad_add(s, b2[i]));
        }
    for (size_t j = 0; j < MLP_B; j++) {
        ad_real s = ad_const(0.0);
        for (size_t l = 0; l < MLP_H; l++)
            s = ad_add(s, ad_mul(W3[l], h2[l * MLP_B + j]));
        r[j] = ad_sub(ad_add(s, b3[0]), T[j]);
    }
    return ad_mul(ad_sqnorm(MLP_B, r), 1.0 / MLP_B);
}

/* ad_mat_make once, ad_mat_vec per sample. */
static ad_real mlp_matvec(const ad_real *p, size_t n, void *ctx)
{
    (void)n;
    (void)ctx;
    const ad_real *W1 = p, *b1 = W1 + MLP_H * MLP_IN, *W2 = b1 + MLP_H, *b2 = W2 + MLP_H * MLP_H,
                  *W3 = b2 + MLP_H, *b3 = W3 + MLP_H;
    ad_mat m1, m2, m3;
    if (ad_mat_make(MLP_H, MLP_IN, W1, &m1) != AD_OK || ad_mat_make(MLP_H, MLP_H, W2, &m2) != AD_OK ||
        ad_mat_make(1, MLP_H, W3, &m3) != AD_OK)
        return ad_const(NAN);
    ad_real h1[MLP_H], h2[MLP_H], o, *r = work_r;
    double x[MLP_IN];
    for (size_t j = 0; j < MLP_B; j++) {
        for (size_t l = 0; l < MLP_IN; l++)
            x[l] = X[l * MLP_B + j];
        ad_mat_vec(&m1, x, h1);
        for (size_t i = 0; i < MLP_H; i++)
            h1[i] = ad_tanh(ad_add(h1[i], b1[i]));
        ad_mat_vec(&m2, h1, h2);
        for (size_t i = 0; i < MLP_H; i++)
            h2[i] = ad_tanh(ad_add(h2[i], b2[i]));
        ad_mat_vec(&m3, h2, &o);
        r[j] = ad_sub(ad_add(o, b3[0]), T[j]);
    }
    return ad_mul(ad_sqnorm(MLP_B, r), 1.0 / MLP_B);
}

/* A plain C forward pass: i-l-j loops, the bias, tanh. */
/* out = tanh(W in + b 1^T): W rows x cols, in cols x MLP_B, row-major. */
static void plain_layer(size_t rows, size_t cols, const double *W, const double *b,
                        const double *in, double *out)
{
    for (size_t i = 0; i < rows; i++) {
        double *h = out + i * MLP_B;
        for (size_t j = 0; j < MLP_B; j++)
            h[j] = 0.0;
        for (size_t l = 0; l < cols; l++)
            for (size_t j = 0; j < MLP_B; j++)
                h[j] += W[i * cols + l] * in[l * MLP_B + j];
        for (size_t j = 0; j < MLP_B; j++)
            h[j] = tanh(h[j] + b[i]);
    }
}

static double mlp_plain(const double *p)
{
    static double h1[MLP_H * MLP_B], h2[MLP_H * MLP_B];
    const double *W1 = p, *b1 = W1 + MLP_H * MLP_IN, *W2 = b1 + MLP_H, *b2 = W2 + MLP_H * MLP_H,
                 *W3 = b2 + MLP_H, *b3 = W3 + MLP_H;
    plain_layer(MLP_H, MLP_IN, W1, b1, X, h1);
    plain_layer(MLP_H, MLP_H, W2, b2, h1, h2);
    double loss = 0.0;
    for (size_t j = 0; j < MLP_B; j++) {
        double s = 0.0;
        for (size_t l = 0; l < MLP_H; l++)
            s += W3[l] * h2[l * MLP_B + j];
        double r = s + b3[0] - T[j];
        loss += r * r;
    }
    return loss / MLP_B;
}

static int failed;

static void run_forward(void *ctx, size_t iters)
{
    mlp_data *d = ctx;
    for (size_t i = 0; i < iters; i++) {
        double v = mlp_loss_d(P, MLP_PARAMS, d);
        bench_clobber(&v);
    }
}

static void run_plain(void *ctx, size_t iters)
{
    (void)ctx;
    for (size_t i = 0; i < iters; i++) {
        double v = mlp_plain(P);
        bench_clobber(&v);
    }
}

static void run_gradient(void *ctx, size_t iters)
{
    ad_objective f = *(ad_objective *)ctx;
    mlp_data d = {X, T, work_r};
    for (size_t i = 0; i < iters; i++) {
        double fx;
        if (ad_gradient(f, &d, MLP_PARAMS, P, &fx, G) != AD_OK)
            failed = 1;
        bench_clobber(G);
    }
}

int main(void)
{
    unsigned long long s = 7;
    for (size_t i = 0; i < MLP_PARAMS; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        P[i] = ((double)(s >> 11) / 9007199254740992.0 * 2 - 1) * 0.3;
    }
    for (size_t i = 0; i < MLP_IN * MLP_B; i++)
        X[i] = sin((double)i);
    for (size_t j = 0; j < MLP_B; j++)
        T[j] = cos((double)j);
    mlp_data dd = {X, T, work_d};
    ad_objective maps = mlp_loss, scalar = mlp_scalar, matvec = mlp_matvec;
    bench_plan plan = {11, 20e6};
    bench_body body[5] = {run_forward, run_plain, run_gradient, run_gradient, run_gradient};
    void *ctx[5] = {&dd, NULL, &maps, &scalar, &matvec};
    bench_time t[5];
    bench_measure_side_by_side(&plan, 5, body, ctx, t);
    if (failed) {
        fprintf(stderr, "a gradient failed\n");
        return 1;
    }
    char b[5][16];
    printf("MLP 16-64-64-1 tanh, %d parameters, batch %d, MSE (median of %d)\n", MLP_PARAMS, MLP_B,
           plan.reps);
    printf("  forward, shared source on doubles (ad_mat_mul_d, ad_mat_map_d)  %10s\n",
           fmt_time(b[0], t[0].median_ns));
    printf("  forward, plain C loops                                          %10s\n",
           fmt_time(b[1], t[1].median_ns));
    const char *names[3] = {"gradient, ad_mat_mul + ad_mat_map (batch)     ",
                            "gradient, scalar code (ad_mul/ad_add, ad_tanh)",
                            "gradient, ad_mat_make + ad_mat_vec per sample "};
    for (int k = 0; k < 3; k++)
        printf("  %s  %10s  %5.2fx shared-source forward  %5.2fx plain C forward\n", names[k],
               fmt_time(b[2 + k], t[2 + k].median_ns), t[2 + k].median_ns / t[0].median_ns,
               t[2 + k].median_ns / t[1].median_ns);
    return 0;
}
