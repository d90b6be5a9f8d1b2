/* What a checkpointed loop does: every evaluation of the step in one
 * ad_gradient, in order, with the phase it belongs to.
 *
 *   loop_schedule [STEPS [SNAPSHOTS]]          a line per evaluation
 *
 * A toy loop (x <- x + h sin(x p)) is enough: the schedule depends on the
 * number of steps and snapshots alone.  The output is docs/revolve.svg's
 * data (docs/revolve.gp). */
#include <stdio.h>
#include <stdlib.h>

#include <dualrev.h>

typedef struct trace {
    size_t steps, snapshots;
    size_t evals;
    int swept;  /* the recording is over: evaluations now are the sweep's */
} trace;

static void step(size_t k, const ad_real *x, ad_real *next, size_t n, const ad_real *p,
                 size_t np, void *ctx)
{
    trace *tr = ctx;
    (void)n, (void)np;
    /* A step recorded to be swept gets active values; one that only
     * advances the state gets constants. */
    const char *phase = !tr->swept ? "forward" : x[0].id ? "recorded" : "recomputed";
    printf("%zu %zu %s\n", tr->evals++, k, phase);
    next[0] = ad_add(x[0], ad_mul(0.01, ad_sin(ad_mul(x[0], p[0]))));
}

static ad_real objective(const ad_real *x, size_t n, void *ctx)
{
    trace *tr = ctx;
    ad_real end;
    (void)n;
    ad_status s = ad_checkpointed_loop(step, tr, tr->steps, tr->snapshots, 1, &x[0], 1, &x[1], &end);
    tr->swept = s == AD_OK;
    return end;
}

int main(int argc, char **argv)
{
    trace tr = {argc > 1 ? strtoul(argv[1], NULL, 10) : 20, argc > 2 ? strtoul(argv[2], NULL, 10) : 3,
                0, 0};
    double x[2] = {0.5, 2.0}, fx, grad[2];
    printf("# evaluation step phase (%zu steps, %zu snapshots)\n", tr.steps, tr.snapshots);
    ad_status s = ad_gradient(objective, &tr, 2, x, &fx, grad);
    if (s != AD_OK) {
        fprintf(stderr, "loop_schedule: %s\n", ad_strerror(s));
        return 1;
    }
    printf("# %zu evaluations; x_N = %.17g, gradient (%.17g, %.17g)\n", tr.evals, fx, grad[0],
           grad[1]);
    return 0;
}
