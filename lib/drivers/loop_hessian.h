/* dualrev internal: a checkpointed loop's part in a sparse Hessian
 * (loop_hessian.c), edge pushing carried through the loop's steps.
 *
 * loop.c runs its reverse schedule with one of these: each step, taken
 * from the last down, pulls back through it the loop's Jacobian rows (of
 * the outputs the caller's sweep reached), the outputs' cotangents and
 * the interactions found so far, and adds the step's own, weighted by the
 * cotangents of its outputs.  What the steps do not reach stays out: the
 * structure is that of the loop written out. */
#ifndef DUALREV_LOOP_HESSIAN_H
#define DUALREV_LOOP_HESSIAN_H

#include "tape.h"

typedef struct ad_loop_edges ad_loop_edges;

/* A loop of n states and np params, from its outputs' cotangents ybar and
 * the outputs reached (outs, n flags); NULL with *s set (AD_ENOMEM,
 * AD_ERANGE). */
AD_HIDDEN ad_loop_edges *ad_loop_edges_new(size_t n, size_t np, const unsigned char *outs,
                                           const double *ybar, ad_status *s);

/* Step k, from state (n values) and params (np): recorded twice one
 * nesting level down (its sparse Jacobian, and the edge pushing of its
 * outputs weighted by their cotangents), everything pulled back through
 * it.  A step's AD_EOVERFLOW leaves NaN (ad_loop_edges_overflowed). */
AD_HIDDEN ad_status ad_loop_edges_step(ad_loop_edges *E, ad_step_fn step, void *ctx, size_t k,
                                       const double *state, const double *params);

/* Whether a step's sweep overflowed: the results are NaN. */
AD_HIDDEN int ad_loop_edges_overflowed(const ad_loop_edges *E);

/* The results, over the loop's arguments (states, then params) whose
 * ids[k] is not 0: each(cx, o, arg, d) for the Jacobian's rows of the
 * reached outputs, o ascending and args ascending within a row;
 * each2(cx, a, b, v) once per pair a <= b of the loop's Hessian weighted
 * by ybar; xbar (n + np) the arguments' cotangents, args (n + np) the
 * arguments reached. */
AD_HIDDEN void ad_loop_edges_emit(const ad_loop_edges *E, const uint32_t *ids,
                                  void (*each)(void *cx, uint32_t o, size_t arg, double d),
                                  void (*each2)(void *cx, size_t a, size_t b, double v),
                                  void *cx, double *xbar, unsigned char *args);

AD_HIDDEN void ad_loop_edges_free(ad_loop_edges *E);

#endif
