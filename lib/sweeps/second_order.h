/* dualrev internal: the second-order sweep (second_order.c), forward over
 * reverse, on a tape recorded in second-order mode. */
#ifndef DUALREV_SECOND_ORDER_H
#define DUALREV_SECOND_ORDER_H

#include "tape.h"

/* On t, recorded with n inputs and one output (an objective): its
 * gradient into grad and H v into hv, through ad_seeded (seeded.h).
 * AD_ENOTSUP for a tape with a block that has no second-order rule,
 * AD_ENOMEM, AD_EOVERFLOW, or a block's fault (ad_block_fail). */
AD_HIDDEN ad_status ad_second_hvp(ad_tape *t, size_t n, const double *v, double *grad,
                                  double *hv);

/* The same with the n columns of H (row-major n x n hess), AD_LANES
 * directions a sweep; H is not symmetrised: its symmetry is a check on the
 * sweep. */
AD_HIDDEN ad_status ad_second_columns(ad_tape *t, size_t n, double *grad, double *hess);
/* The same with k directions V (k rows of n): H v_j into HV + j n, each
 * as ad_second_hvp gives it, its status included (a block whose status is
 * AD_EOVERFLOW sweeps its directions one by one to find whose it is). */
AD_HIDDEN ad_status ad_second_directions(ad_tape *t, size_t n, size_t k, const double *V,
                                         double *grad, double *HV);

/* On t, recorded with n inputs and m outputs (a checkpointed loop's
 * step): the inputs' cotangents from weights w of the outputs,
 * xbar = J^T w, and their tangents along the inputs' tangents v,
 * xbard = J^T wd + (sum_j w_j H_j) v, where wd are the weights' tangents.
 * Every record that an output reaches is applied, whatever the outputs'
 * weights (zero cotangents included), and no other: the sweep is one pass
 * of the caller's, which takes every output of the loop as reached.
 * Errors as ad_second_hvp's. */
AD_HIDDEN ad_status ad_second_vjp(ad_tape *t, size_t m, const double *v, const double *w,
                                  const double *wd, double *xbar, double *xbard);

#endif
