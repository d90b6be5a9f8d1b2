/* dualrev internal: a whole Jacobian's sweeps (jacobian.c). */
#ifndef DUALREV_JACOBIAN_H
#define DUALREV_JACOBIAN_H

#include "tape.h"

/* J (m x n, row-major) of the recording t with n inputs and m outputs,
 * whose highest output is hi, by columns (n forward sweeps, AD_LANES a
 * pass) or by rows (m reverse sweeps, AD_LANES a pass), each block of
 * lanes through ad_seeded.  t's cotangent array must hold (hi + 1)
 * AD_LANES doubles (ad_tape_reserve_lanes: the rows keep adj_zero).  AD_OK, AD_ENOMEM, AD_EOVERFLOW (rows), or a block's
 * fault. */
AD_HIDDEN ad_status ad_jacobian_columns(ad_tape *t, size_t n, size_t m, uint32_t hi,
                                        double *jac);
AD_HIDDEN ad_status ad_jacobian_rows(ad_tape *t, size_t n, size_t m, uint32_t hi, double *jac);

/* The same for k given directions: J v_j (V: k rows of n, JV: k rows of
 * m) or w_j^T J (W: k rows of m, WJ: k rows of n), AD_LANES a pass, each
 * as one ad_forward or ad_reverse would give it (its passes and exact
 * sweep).  t's cotangent array must hold (hi + 1) AD_LANES doubles, its
 * marks IDs 0..hi. */
AD_HIDDEN ad_status ad_directions_forward(ad_tape *t, size_t n, size_t m, uint32_t hi, size_t k,
                                          const double *V, double *JV);
AD_HIDDEN ad_status ad_directions_reverse(ad_tape *t, size_t n, size_t m, uint32_t hi, size_t k,
                                          const double *W, double *WJ);

#endif
