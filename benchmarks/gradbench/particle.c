/* GradBench's particle "rr" with dualrev: the port timed is the example
 * itself, examples/particle.c, included here with its main renamed, so
 * that the benchmark and the example cannot drift apart.  See ports.h. */
#define main particle_example_main
#include "../../examples/particle.c"
#undef main

#include "ports.h"

int gb_particle(double w0, double *w)
{
    return (int)particle(w0, w);
}

int gb_particle_gradient(double w, double *grad)
{
    ad_status status = AD_OK;
    *grad = gradient(w, &status);
    return (int)status;
}

int gb_particle_objective(double w, double *value)
{
    ad_status status = AD_OK;
    *value = objective(w, &status);
    return (int)status;
}
