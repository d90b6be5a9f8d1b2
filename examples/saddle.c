/* saddle: GradBench's "saddle" eval with nested reverse mode (its "rr"
 * function), a translation of its C++ tools (cpp/gradbench/gd.hpp,
 * cpp/gradbench/evals/saddle.hpp, tools/enzyme/saddle.cpp).
 *
 * f(p1, p2) = (p1x^2 + p1y^2) - (p2x^2 + p2y^2).  Starting both searches
 * at s, find p1 = argmin over p1 of [max over p2 of f(p1, p2)] by gradient
 * descent, then p2 = argmax over p2 of f(p1, p2); print p1 and p2.
 *
 * The objective of the outer descent is itself a gradient descent (the
 * inner argmax).  Its gradient is ad_gradient of that whole inner descent;
 * the inner descent's own gradients, taken inside that recording, are
 * ad_gradient_r, whose results are values of the outer recording, so the
 * outer gradient differentiates through them (nested reverse mode).  p1
 * enters the inner gradient through its inputs x, as dualrev requires.
 *
 * The descent works on ad_real throughout: outside a recording an ad_real
 * is a plain number and ad_gradient_r is ad_gradient, so the same code
 * serves the outer level (on constants) and the inner one (recorded).
 *
 * Usage: saddle [SX SY]   (the start; GradBench's eval sends 1 1)
 * Exits 1 unless the default start gives GradBench's expected output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <dualrev.h>

enum { DIM = 2 };

/* ---- the function (saddle::objective) ---- */

static ad_real saddle_objective(ad_real x1, ad_real y1, ad_real x2, ad_real y2)
{
    return ad_sub(ad_add(ad_mul(x1, x1), ad_mul(y1, y1)), ad_add(ad_mul(x2, x2), ad_mul(y2, y2)));
}

/* The same with its four arguments as one input vector, for the drivers. */
static ad_real saddle_of_vector(const ad_real *x, size_t n, void *ctx)
{
    (void)n;
    (void)ctx;
    return saddle_objective(x[0], x[1], x[2], x[3]);
}

/* ---- gradient descent (cpp/gradbench/gd.hpp) ---- */

/* A function of DIM variables to descend: its value and gradient at x.
 * status keeps the first error of the drivers that the gradients call,
 * and a descent stops at it (inside a recording, the error has also
 * failed the enclosing recording, whose driver reports it). */
typedef struct cost cost;
struct cost {
    ad_real (*objective)(const cost *c, const ad_real *x);
    void (*gradient)(const cost *c, const ad_real *x, ad_real *g);
    int negated;              /* gd.hpp's multiplicative_inverse: maximise */
    const ad_real *p1;        /* the inner cost (R2Cost): the fixed point */
    const double *start;      /* the outer cost (R1Cost): the inner start */
    ad_status *status;
};

static ad_real value_at(const cost *c, const ad_real *x)
{
    ad_real v = c->objective(c, x);
    return c->negated ? ad_neg(v) : v;
}

static void gradient_at(const cost *c, const ad_real *x, ad_real *g)
{
    c->gradient(c, x, g);
    if (c->negated)
        for (int j = 0; j < DIM; j++)
            g[j] = ad_neg(g[j]);
}

static void keep_status(ad_status *status, ad_status s)
{
    if (*status == AD_OK)
        *status = s;
}

/* The loop's tests read values only: they steer it, and no derivative
 * flows through a comparison. */
static double magnitude(const ad_real *v)
{
    double acc = 0.0;
    for (int j = 0; j < DIM; j++)
        acc += ad_value(v[j]) * ad_value(v[j]);
    return sqrt(acc);
}

static double vector_dist(const ad_real *u, const ad_real *v)
{
    double acc = 0.0;
    for (int j = 0; j < DIM; j++) {
        double d = ad_value(u[j]) - ad_value(v[j]);
        acc += d * d;
    }
    return sqrt(acc);
}

/* multivariate_argmin: from xp, steps against the gradient while they lower
 * the value, doubling the step size after 10 successes and halving it
 * after a failure, until the gradient or the step is below 1e-5 (or a
 * driver fails). */
static void argmin(const cost *f, const ad_real *xp, ad_real *x)
{
    ad_real fx, gx[DIM], x_prime[DIM];
    for (int j = 0; j < DIM; j++)
        x[j] = xp[j];
    fx = value_at(f, xp);
    gradient_at(f, x, gx);
    int i = 0;
    double eta = 1e-5;
    for (;;) {
        /* A failed driver gives NaN, which no test below would stop at. */
        if (*f->status != AD_OK || magnitude(gx) <= 1e-5)
            return;
        if (i == 10) {
            eta *= 2;
            i = 0;
            continue;
        }
        for (int j = 0; j < DIM; j++)
            x_prime[j] = ad_sub(x[j], ad_mul(eta, gx[j]));
        if (vector_dist(x, x_prime) <= 1e-5)
            return;
        ad_real fx_prime = value_at(f, x_prime);
        if (ad_value(fx_prime) < ad_value(fx)) {
            for (int j = 0; j < DIM; j++)
                x[j] = x_prime[j];
            fx = fx_prime;
            gradient_at(f, x, gx);
            i++;
        } else {
            eta /= 2;
            i = 0;
        }
    }
}

static void argmax(const cost *f, const ad_real *xp, ad_real *x)
{
    cost neg = *f;
    neg.negated = !f->negated;
    argmin(&neg, xp, x);
}

/* multivariate_max: the value at the argmax. */
static ad_real max_of(const cost *f, const ad_real *xp)
{
    ad_real x[DIM];
    argmax(f, xp, x);
    return value_at(f, x);
}

/* ---- the inner cost (R2Cost): f(p1, p2) as a function of p2 ---- */

static ad_real inner_objective(const cost *c, const ad_real *p2)
{
    return saddle_objective(c->p1[0], c->p1[1], p2[0], p2[1]);
}

/* p1 may be values of the outer recording: they enter the inner gradient
 * through its inputs, and the p2 part of the gradient is kept. */
static void inner_gradient(const cost *c, const ad_real *p2, ad_real *g)
{
    ad_real x[4] = {c->p1[0], c->p1[1], p2[0], p2[1]}, fx, grad[4];
    keep_status(c->status, ad_gradient_r(saddle_of_vector, NULL, 4, x, &fx, grad));
    g[0] = grad[2];
    g[1] = grad[3];
}

static cost inner_cost(const ad_real *p1, ad_status *status)
{
    return (cost){inner_objective, inner_gradient, 0, p1, NULL, status};
}

/* ---- the outer cost (R1Cost): max over p2 of f(p1, p2) ---- */

static ad_real max_over_p2(const ad_real *p1, const double *start, ad_status *status)
{
    ad_real s[DIM] = {ad_const(start[0]), ad_const(start[1])};
    cost inner = inner_cost(p1, status);
    return max_of(&inner, s);
}

static ad_real outer_objective(const cost *c, const ad_real *p1)
{
    return max_over_p2(p1, c->start, c->status);
}

/* What ad_gradient records: the inner descent from the start, with p1
 * active.  An error inside fails the recording, and ad_gradient reports
 * it; here it only stops the descent. */
static ad_real max_over_p2_recorded(const ad_real *p1, size_t n, void *ctx)
{
    ad_status inner = AD_OK;
    (void)n;
    return max_over_p2(p1, ctx, &inner);
}

static void outer_gradient(const cost *c, const ad_real *p1, ad_real *g)
{
    double x[DIM] = {ad_value(p1[0]), ad_value(p1[1])}, fx, grad[DIM];
    keep_status(c->status, ad_gradient(max_over_p2_recorded, (void *)c->start, DIM, x, &fx, grad));
    for (int j = 0; j < DIM; j++)
        g[j] = ad_const(grad[j]);
}

/* ---- the eval (saddle.cpp's compute) ---- */

/* out = p1, then p2.  Returns the first error of a driver, or AD_OK. */
static ad_status saddle(const double start[DIM], double out[2 * DIM])
{
    ad_status status = AD_OK;
    ad_real s[DIM] = {ad_const(start[0]), ad_const(start[1])}, r1[DIM], r2[DIM];
    cost outer = {outer_objective, outer_gradient, 0, NULL, start, &status};
    argmin(&outer, s, r1);
    cost inner = inner_cost(r1, &status);
    argmax(&inner, s, r2);
    for (int j = 0; j < DIM; j++) {
        out[j] = ad_value(r1[j]);
        out[DIM + j] = ad_value(r2[j]);
    }
    return status;
}

/* ---- the check ---- */

/* GradBench's expected output for start (1, 1), copied from its
 * python/gradbench/gradbench/evals/saddle/run.py (commit f26651a7),
 * under this notice:
 *
 * MIT License
 *
 * Copyright (c) 2024 Sam Estep
 *
 * Permission is hereby granted, free of charge, to any person obtaining a copy
 * of this software and associated documentation files (the "Software"), to deal
 * in the Software without restriction, including without limitation the rights
 * to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
 * copies of the Software, and to permit persons to whom the Software is
 * furnished to do so, subject to the following conditions:
 *
 * The above copyright notice and this permission notice shall be included in all
 * copies or substantial portions of the Software.
 *
 * THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 * IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
 * FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
 * AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
 * LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
 * OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
 * SOFTWARE. */
static const double expected[2 * DIM] = {
    8.246324826140356e-06, 8.246324826140356e-06, 8.246324826140356e-06, 8.246324826140356e-06,
};

/* GradBench's validator metric (python/gradbench/gradbench/comparison.py)
 * passes at 1e-4 and so would accept 0 here; the check also asks for the
 * expected numbers to 1e-6 relative, which the descent's path determines. */
static int check(const double out[2 * DIM])
{
    int ok = 1;
    for (int j = 0; j < 2 * DIM; j++) {
        double d = fabs(out[j] - expected[j]);
        double metric = d / fmax(1.0, fabs(out[j]) + fabs(expected[j]));
        if (!(metric <= 1e-4 && d <= 1e-6 * fabs(expected[j]))) {
            fprintf(stderr, "saddle: output %d is %.17g, GradBench expects %.17g\n", j, out[j],
                    expected[j]);
            ok = 0;
        }
    }
    return ok;
}

int main(int argc, char **argv)
{
    double start[DIM] = {1.0, 1.0}, out[2 * DIM];
    int is_default = argc != 3;
    if (argc == 3) {
        start[0] = atof(argv[1]);
        start[1] = atof(argv[2]);
    }
    ad_status s = saddle(start, out);
    if (s != AD_OK) {
        fprintf(stderr, "saddle: %s\n", ad_strerror(s));
        return 1;
    }
    printf("start (%g, %g)\np1 = (%.17g, %.17g)\np2 = (%.17g, %.17g)\n", start[0], start[1],
           out[0], out[1], out[2], out[3]);
    if (is_default && !check(out))
        return 1;
    if (is_default)
        printf("matches GradBench's expected output\n");
    return 0;
}
