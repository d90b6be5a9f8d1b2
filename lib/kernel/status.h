/* dualrev internal: what a call that fails leaves in its outputs (status.c):
 * NaN, never a half-written result that looks valid. */
#ifndef DUALREV_STATUS_H
#define DUALREV_STATUS_H

#include "compiler.h"
#include "dualrev.h"

/* p[0..count) = NaN (nothing if p is NULL). */
AD_HIDDEN void ad_fill_nan(double *p, size_t count);
AD_HIDDEN void ad_fill_nan_reals(ad_real *p, size_t count);

#endif
