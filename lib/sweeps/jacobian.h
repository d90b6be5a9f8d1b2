/* dualrev internal: a whole Jacobian's sweeps (jacobian.c). */
#ifndef DUALREV_JACOBIAN_H
#define DUALREV_JACOBIAN_H

#include "tape.h"

/* J (m x n, row-major) of the recording t with n inputs and m outputs,
 * whose highest output is hi, by columns (n forward sweeps, AD_LANES a
 * pass) or by rows (m reverse sweeps, AD_LANES a pass), each block of
 * lanes through ad_seeded.  t's cotangent array must hold (hi + 1)
 * AD_LANES doubles.  AD_OK, AD_ENOMEM, AD_EOVERFLOW (rows), or a block's
 * fault. */
AD_HIDDEN ad_status ad_jacobian_columns(ad_tape *t, size_t n, size_t m, uint32_t hi,
                                        double *jac);
AD_HIDDEN ad_status ad_jacobian_rows(ad_tape *t, size_t n, size_t m, uint32_t hi, double *jac);

#endif
