/* GradBench's saddle "rr" with dualrev: the port timed is the example
 * itself, examples/saddle.c, included here with its main renamed, so that
 * the benchmark and the example cannot drift apart.  See ports.h. */
#define main saddle_example_main
#include "../../examples/saddle.c"
#undef main

#include "ports.h"

int gb_saddle(const double start[2], double out[4])
{
    return (int)saddle(start, out);
}

/* The outer cost, as saddle() makes it. */
static cost outer_cost(const double *start, ad_status *status)
{
    return (cost){outer_objective, outer_gradient, 0, NULL, start, status};
}

int gb_saddle_outer_gradient(const double start[2], const double p1[2], double grad[2])
{
    ad_status status = AD_OK;
    cost outer = outer_cost(start, &status);
    ad_real x[DIM] = {ad_const(p1[0]), ad_const(p1[1])}, g[DIM];
    outer.gradient(&outer, x, g);
    for (int j = 0; j < DIM; j++)
        grad[j] = ad_value(g[j]);
    return (int)status;
}

int gb_saddle_outer_objective(const double start[2], const double p1[2], double *value)
{
    ad_status status = AD_OK;
    cost outer = outer_cost(start, &status);
    ad_real x[DIM] = {ad_const(p1[0]), ad_const(p1[1])};
    *value = ad_value(outer.objective(&outer, x));
    return (int)status;
}
