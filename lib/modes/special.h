/* dualrev internal: special functions the partials need (special.c). */
#ifndef DUALREV_SPECIAL_H
#define DUALREV_SPECIAL_H

#include "compiler.h"

/* psi(x) = d/dx log|Gamma(x)|, and its derivative psi'(x); NaN at the
 * poles 0, -1, -2, ... */
AD_HIDDEN double ad_digamma(double x);
AD_HIDDEN double ad_trigamma(double x);

#endif
