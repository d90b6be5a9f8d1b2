/* dualrev internal: the second-order sweep (hessian.c) for drivers that
 * run it on a tape of their own (checkpointed loops' steps, loop.c). */
#ifndef DUALREV_HESSIAN_H
#define DUALREV_HESSIAN_H

#include "tape.h"

/* On t, recorded in second-order mode with n inputs and m outputs: the
 * inputs' cotangents from weights w of the outputs, xbar = J^T w, and
 * their tangents along the inputs' tangents v, xbard = J^T wd +
 * (sum_j w_j H_j) v, where wd are the weights' tangents.  AD_ENOTSUP for
 * a tape with a block that has no second-order rule, AD_ENOMEM, or a
 * block's fault (ad_block_fail). */
AD_HIDDEN ad_status ad_second_vjp(ad_tape *t, size_t m, const double *v, const double *w,
                                  const double *wd, double *xbar, double *xbard);

#endif
