/* The closed-form maps that the external-function tests run through
 * ad_external, with their Jacobians and Hessians, and a composition of
 * A, B and C differentiated by hand (test_external.c,
 * test_external_second.c):
 *   A: R^3 -> R^2   y0 = x0 x1 + sin x2,  y1 = x0^2 x2
 *   B: R^4 -> R^1   y0 = sum_i (i+1) x_i^3
 *   C: R^1 -> R^3   y = (cos x0, sin x0, x0^2)
 *   D: R^2 -> R^2   y = (x0 + sin(x1) / 10, x1 + cos(x0) / 10)
 *   E: R^2 -> R^1   y0 = exp(x0) x1
 *   G: R^3 -> R^1   sum_i sin(x_i) x_(i+1 mod 3)
 * Functions are static inline: each test uses some of them. */
#ifndef DUALREV_TESTS_EXTERNAL_MAPS_H
#define DUALREV_TESTS_EXTERNAL_MAPS_H

#include <math.h>
#include <stddef.h>
#include <string.h>

enum map { MAP_A, MAP_B, MAP_C, MAP_D, MAP_E, MAP_G, MAPS };
static const size_t map_n[MAPS] = {3, 4, 1, 2, 2, 3};
static const size_t map_m[MAPS] = {2, 1, 3, 2, 1, 1};
#define MAXN 4
#define MAXM 3

static inline double g_value(const double *x)
{
    return sin(x[0]) * x[1] + sin(x[1]) * x[2] + sin(x[2]) * x[0];
}

static inline void map_eval(enum map k, const double *x, double *y)
{
    switch (k) {
    case MAP_A:
        y[0] = x[0] * x[1] + sin(x[2]);
        y[1] = x[0] * x[0] * x[2];
        break;
    case MAP_B:
        y[0] = 0.0;
        for (int i = 0; i < 4; i++)
            y[0] += (i + 1) * x[i] * x[i] * x[i];
        break;
    case MAP_C:
        y[0] = cos(x[0]);
        y[1] = sin(x[0]);
        y[2] = x[0] * x[0];
        break;
    case MAP_D:
        y[0] = x[0] + sin(x[1]) / 10;
        y[1] = x[1] + cos(x[0]) / 10;
        break;
    case MAP_E: y[0] = exp(x[0]) * x[1]; break;
    default: y[0] = g_value(x); break;
    }
}

/* The m x n Jacobian, row-major. */
static inline void map_jacobian(enum map k, const double *x, double *J)
{
    switch (k) {
    case MAP_A:
        J[0] = x[1], J[1] = x[0], J[2] = cos(x[2]);
        J[3] = 2 * x[0] * x[2], J[4] = 0.0, J[5] = x[0] * x[0];
        break;
    case MAP_B:
        for (int i = 0; i < 4; i++)
            J[i] = 3.0 * (i + 1) * x[i] * x[i];
        break;
    case MAP_C: J[0] = -sin(x[0]), J[1] = cos(x[0]), J[2] = 2 * x[0]; break;
    case MAP_D:
        J[0] = 1.0, J[1] = cos(x[1]) / 10;
        J[2] = -sin(x[0]) / 10, J[3] = 1.0;
        break;
    case MAP_E: J[0] = exp(x[0]) * x[1], J[1] = exp(x[0]); break;
    default:
        J[0] = cos(x[0]) * x[1] + sin(x[2]);
        J[1] = sin(x[0]) + cos(x[1]) * x[2];
        J[2] = sin(x[1]) + cos(x[2]) * x[0];
        break;
    }
}

/* The n x n Hessian of output j. */
static inline void map_hessian(enum map k, const double *x, size_t j, double *H)
{
    size_t n = map_n[k];
    memset(H, 0, n * n * sizeof *H);
    switch (k) {
    case MAP_A:
        if (j == 0) {
            H[0 * 3 + 1] = H[1 * 3 + 0] = 1.0;
            H[2 * 3 + 2] = -sin(x[2]);
        } else {
            H[0] = 2 * x[2];
            H[0 * 3 + 2] = H[2 * 3 + 0] = 2 * x[0];
        }
        break;
    case MAP_B:
        for (size_t i = 0; i < 4; i++)
            H[i * 4 + i] = 6.0 * (double)(i + 1) * x[i];
        break;
    case MAP_C: H[0] = j == 0 ? -cos(x[0]) : j == 1 ? -sin(x[0]) : 2.0; break;
    case MAP_D:
        if (j == 0)
            H[3] = -sin(x[1]) / 10;
        else
            H[0] = -cos(x[0]) / 10;
        break;
    case MAP_E:
        H[0] = exp(x[0]) * x[1];
        H[1] = H[2] = exp(x[0]);
        break;
    default:
        H[0] = -sin(x[0]) * x[1];
        H[1] = H[3] = cos(x[0]);
        H[2] = H[6] = cos(x[2]);
        H[4] = -sin(x[1]) * x[2];
        H[5] = H[7] = cos(x[1]);
        H[8] = -sin(x[2]) * x[0];
        break;
    }
}

/* The gradient by hand: the chain rule backwards through the closed-form
 * Jacobians. */
static inline double composed_grad(const double *z, double *g)
{
    double u[3], a[2], w[4], b[1], s[1], c[3], JA[6], JB[4], JC[3];
    u[0] = z[0] * z[1];
    u[1] = sin(z[2]);
    u[2] = exp(z[3] * 0.5);
    map_eval(MAP_A, u, a);
    w[0] = a[0], w[1] = a[1], w[2] = z[0], w[3] = a[0] * z[3];
    map_eval(MAP_B, w, b);
    s[0] = b[0] / 10.0;
    map_eval(MAP_C, s, c);
    map_jacobian(MAP_A, u, JA);
    map_jacobian(MAP_B, w, JB);
    map_jacobian(MAP_C, s, JC);

    double cbar[3] = {1.0, a[1], z[2]}, abar[2] = {0.0, c[1]}, wbar[4], ubar[3];
    g[0] = g[1] = g[3] = 0.0;
    g[2] = c[2];
    double sbar = JC[0] * cbar[0] + JC[1] * cbar[1] + JC[2] * cbar[2];
    double bbar = sbar / 10.0;
    for (int i = 0; i < 4; i++)
        wbar[i] = bbar * JB[i];
    abar[0] += wbar[0] + wbar[3] * z[3];
    abar[1] += wbar[1];
    g[0] += wbar[2];
    g[3] += wbar[3] * a[0];
    for (int i = 0; i < 3; i++)
        ubar[i] = abar[0] * JA[i] + abar[1] * JA[3 + i];
    g[0] += ubar[0] * z[1];
    g[1] += ubar[0] * z[0];
    g[2] += ubar[1] * cos(z[2]);
    g[3] += ubar[2] * 0.5 * u[2];
    return c[0] + c[1] * a[1] + c[2] * z[2];
}

#endif
