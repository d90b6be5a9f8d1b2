/* dualrev internal: second-order recordings (ad_hvp, ad_hessian), whose
 * records keep their second partials beside them (second.c). */
#ifndef DUALREV_SECOND_H
#define DUALREV_SECOND_H

#include "tape.h"

/* Second partials of a record: d2/da2, d2/dadb, d2/db2, zero for a
 * constant argument.  An n-ary record's slots keep what its kind needs
 * (reduce.c, hessian.c). */
typedef struct ad_aux {
    double aa, ab, bb;
} ad_aux;

/* The mode a second-order recording is made in. */
AD_HIDDEN extern const ad_mode ad_second_mode;

/* The second partials of the record at `id`, in a second-order recording. */
static inline ad_aux *ad_tape_aux(const ad_tape *t, uint32_t id)
{
    return ad_side_entry(t, ad_tape_side(t, &ad_second_mode), id);
}

#endif
