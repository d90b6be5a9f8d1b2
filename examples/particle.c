/* particle: GradBench's "particle" eval with nested reverse mode (its "rr"
 * function), a translation of its C++ tools (cpp/gradbench/gd.hpp,
 * cpp/gradbench/evals/particle.hpp, tools/enzyme/particle.cpp).
 *
 * A particle starts at (0, 8) with velocity (0.75, 0) in the field of two
 * unit charges at (10, 10 - w) and (10, 0).  Euler steps of 0.1 move it,
 * its acceleration being minus the gradient of the potential
 * sum 1 / |x - charge| at its position, until it crosses the x axis;
 * linear interpolation gives where.  Gradient descent finds the w that
 * brings that point closest to the origin, minimising x0(t_f)^2.
 *
 * The gradient of the descent is ad_gradient of the whole simulation; the
 * potential's gradient at each step, taken inside that recording, is
 * ad_gradient_r, whose results are values of the outer recording, so the
 * outer gradient differentiates through them (nested reverse mode).  The
 * charges depend on w: they enter the potential's gradient through its
 * inputs, beside the position, as dualrev requires.
 *
 * The simulation is written once, on ad_real: outside a recording an
 * ad_real is a plain number and ad_gradient_r is ad_gradient, so the
 * descent's function values come from the same code on constants.
 *
 * Usage: particle [W0]   (the start; GradBench's eval sends 0)
 * Exits 1 unless the default start gives GradBench's expected output. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <dualrev.h>

/* ---- points (particle.hpp) ---- */

typedef struct point {
    ad_real x, y;
} point;

static point point_add(point u, point v)
{
    return (point){ad_add(u.x, v.x), ad_add(u.y, v.y)};
}

static point point_scale(double k, point p)
{
    return (point){ad_mul(k, p.x), ad_mul(k, p.y)};
}

static ad_real dist(point u, point v)
{
    ad_real dx = ad_sub(u.x, v.x), dy = ad_sub(u.y, v.y);
    return ad_sqrt(ad_add(ad_mul(dx, dx), ad_mul(dy, dy)));
}

/* The potential at x of unit charges (particle::accel). */
static ad_real accel(const point *charges, int count, point x)
{
    ad_real a = ad_const(0.0);
    for (int i = 0; i < count; i++)
        a = ad_add(a, ad_div(1.0, dist(charges[i], x)));
    return a;
}

/* ---- the simulation ---- */

enum { CHARGES = 2, INPUTS = 2 + 2 * CHARGES };

/* accel with its arguments as one input vector, for ad_gradient_r: the
 * position, then the charges. */
static ad_real accel_of_vector(const ad_real *v, size_t n, void *ctx)
{
    point charges[CHARGES] = {{v[2], v[3]}, {v[4], v[5]}};
    (void)n;
    (void)ctx;
    return accel(charges, CHARGES, (point){v[0], v[1]});
}

/* The gradient of the potential at x, with respect to x. */
static ad_status accel_gradient(const point *charges, point x, point *g)
{
    ad_real v[INPUTS] = {x.x, x.y, charges[0].x, charges[0].y, charges[1].x, charges[1].y};
    ad_real fx, grad[INPUTS];
    ad_status s = ad_gradient_r(accel_of_vector, NULL, INPUTS, v, &fx, grad);
    *g = (point){grad[0], grad[1]};
    return s;
}

/* x0(t_f)^2 for control w (naive_euler of tools/enzyme/particle.cpp).  On
 * a failed gradient, NaN at once: its NaN would never cross the axis.
 * Inside a recording the failure has also failed the recording. */
static ad_real naive_euler(ad_real w, ad_status *status)
{
    point charges[CHARGES] = {{ad_const(10.0), ad_sub(10.0, w)}, {ad_const(10.0), ad_const(0.0)}};
    point x = {ad_const(0.0), ad_const(8.0)};
    point xdot = {ad_const(0.75), ad_const(0.0)};
    double delta_t = 1e-1;
    for (;;) {
        point xddot;
        ad_status s = accel_gradient(charges, x, &xddot);
        if (s != AD_OK) {
            *status = s;
            return ad_const(NAN);
        }
        xddot = point_scale(-1.0, xddot);
        x = point_add(x, point_scale(delta_t, xdot));
        if (ad_value(x.y) <= 0) {
            ad_real delta_t_f = ad_div(ad_neg(x.y), xdot.y);
            point step = {ad_mul(delta_t_f, xdot.x), ad_mul(delta_t_f, xdot.y)};
            point x_t_f = point_add(x, step);
            return ad_mul(x_t_f.x, x_t_f.x);
        }
        xdot = point_add(xdot, point_scale(delta_t, xddot));
    }
}

/* What ad_gradient records: the simulation with w active. */
static ad_real naive_euler_recorded(const ad_real *w, size_t n, void *ctx)
{
    ad_status inner = AD_OK;  /* a failure fails the recording: ad_gradient reports it */
    (void)n;
    (void)ctx;
    return naive_euler(w[0], &inner);
}

/* ---- gradient descent over w (cpp/gradbench/gd.hpp, input size 1) ---- */

static double objective(double w, ad_status *status)
{
    return ad_value(naive_euler(ad_const(w), status));
}

static double gradient(double w, ad_status *status)
{
    double fx, g;
    ad_status s = ad_gradient(naive_euler_recorded, NULL, 1, &w, &fx, &g);
    if (*status == AD_OK)
        *status = s;
    return g;
}

/* multivariate_argmin for one variable: steps against the gradient while
 * they lower the value, doubling the step size after 10 successes and
 * halving it after a failure, until the gradient or the step is below
 * 1e-5 (or a driver fails). */
static double argmin(double xp, ad_status *status)
{
    double x = xp, fx = objective(xp, status), gx = gradient(x, status);
    int i = 0;
    double eta = 1e-5;
    while (*status == AD_OK) {
        if (fabs(gx) <= 1e-5)
            return x;
        if (i == 10) {
            eta *= 2;
            i = 0;
            continue;
        }
        double x_prime = x - eta * gx;
        if (fabs(x - x_prime) <= 1e-5)
            return x;
        double fx_prime = objective(x_prime, status);
        if (fx_prime < fx) {
            x = x_prime;
            fx = fx_prime;
            gx = gradient(x, status);
            i++;
        } else {
            eta /= 2;
            i = 0;
        }
    }
    return NAN;
}

/* The eval (particle.cpp's compute): the w found from w0. */
static ad_status particle(double w0, double *w)
{
    ad_status status = AD_OK;
    *w = argmin(w0, &status);
    return status;
}

/* ---- the check ---- */

/* GradBench's expected output for w0 = 0, copied from its
 * python/gradbench/gradbench/evals/particle/run.py (commit f26651a7),
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
static const double expected = 0.2071918746486116;

/* GradBench's validator metric (python/gradbench/gradbench/comparison.py)
 * passes at 1e-4; the check also asks for 1e-6 relative, which a rounding
 * difference keeps (GradBench's finite-differences tool is 1.4e-9 away)
 * and a force that missed its dependence on w would not. */
static int check(double w)
{
    double d = fabs(w - expected);
    if (d / fmax(1.0, fabs(w) + fabs(expected)) <= 1e-4 && d <= 1e-6 * expected)
        return 1;
    fprintf(stderr, "particle: w is %.17g, GradBench expects %.17g\n", w, expected);
    return 0;
}

int main(int argc, char **argv)
{
    double w0 = argc == 2 ? atof(argv[1]) : 0.0, w;
    ad_status s = particle(w0, &w);
    if (s != AD_OK) {
        fprintf(stderr, "particle: %s\n", ad_strerror(s));
        return 1;
    }
    printf("w0 = %g\nw = %.17g\n", w0, w);
    if (argc == 2)
        return 0;
    if (!check(w))
        return 1;
    printf("matches GradBench's expected output\n");
    return 0;
}
