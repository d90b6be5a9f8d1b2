/* A timing is only worth printing if the gradient it timed is right. */
#include <math.h>
#include <stdlib.h>

#include "bench.h"

/* Every program but t_bad is a polynomial of degree <= 3, so a central
 * difference with this step is exact up to rounding. */
#define STEP 1e-4
#define FD_TOL 1e-7
#define AGREE_TOL 1e-10

/* The directional derivative of p at x along d = (+-1, ...), by central
 * difference; also sum |g_i d_i|, the scale to judge the error against. */
static int central_difference(bench_prog p, size_t n, const double *x, size_t inputs,
                              const double *g, double *fd, double *gd, double *scale)
{
    double *xp = malloc(inputs * sizeof *xp), *xm = malloc(inputs * sizeof *xm);
    if (!xp || !xm) {
        free(xp);
        free(xm);
        return 0;
    }
    *gd = *scale = 0.0;
    for (size_t i = 0; i < inputs; i++) {
        double d = (i * 7 + 3) % 5 < 2 ? -1.0 : 1.0;
        xp[i] = x[i] + STEP * d;
        xm[i] = x[i] - STEP * d;
        *gd += g[i] * d;
        *scale += fabs(g[i]);
    }
    prog_plain_fn f = prog_plain(p);
    *fd = (f(xp, inputs, &n) - f(xm, inputs, &n)) / (2.0 * STEP);
    free(xp);
    free(xm);
    return 1;
}

const char *check_gradient(bench_prog p, size_t n, const double *x, size_t inputs, double fx,
                           const double *g)
{
    double plain = prog_plain(p)(x, inputs, &n);
    if (fabs(fx - plain) > 1e-12 * fabs(plain))
        return "value differs from the plain evaluation";
    if (p == PROG_T_BAD)  /* d/dx x^(2^n) at x = 1; +Inf once 2^n overflows */
        return g[0] == ldexp(1.0, n > 2000 ? 2000 : (int)n) ? NULL : "gradient is not 2^n";
    double fd, gd, scale;
    if (!central_difference(p, n, x, inputs, g, &fd, &gd, &scale))
        return "out of memory for the check";
    return fabs(fd - gd) <= FD_TOL * scale ? NULL : "gradient differs from central difference";
}

const char *check_agree(const double *g, const double *h, size_t inputs)
{
    for (size_t i = 0; i < inputs; i++) {
        if (g[i] == h[i])  /* also equal infinities */
            continue;
        if (!(fabs(g[i] - h[i]) <= AGREE_TOL * (fabs(g[i]) + fabs(h[i]))))
            return "gradient differs from dualrev's";
    }
    return NULL;
}

void bench_fill(double *v, size_t count, uint64_t seed, double lo, double width)
{
    uint64_t s = seed;
    for (size_t i = 0; i < count; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v[i] = lo + width * ((double)(s >> 11) * 0x1p-53);
    }
}

int check_close(double a, double b, double rtol)
{
    return a == b || fabs(a - b) <= rtol * fmax(fabs(a), fabs(b));
}
