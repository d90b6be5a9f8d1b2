/* dualrev internal: second-order recordings (ad_hvp, ad_hessian), whose
 * records keep their second partials beside them (second.c). */
#ifndef DUALREV_SECOND_H
#define DUALREV_SECOND_H

#include <math.h>

#include "tape.h"

/* Second partials of a record: d2/da2, d2/dadb, d2/db2, zero for a
 * constant argument.  An n-ary record's slots keep what its kind needs
 * (reduce.c, second_order.c). */
typedef struct ad_aux {
    double aa, ab, bb;
} ad_aux;

/* A one-argument record whose second partial is outside the double range
 * keeps it as m 2^e: aa NaN, ab = m, bb = e (second.c).  Whether h is
 * such a partial, and x times it, rounded once where the product is in
 * range. */
static inline int ad_aux_scaled(const ad__record *r, const ad_aux *h)
{
    return !r->b && h->aa != h->aa && h->ab != 0.0;
}

static inline double ad_aux_times(const ad_aux *h, double x)
{
    return ldexp(h->ab * x, (int)h->bb);
}

/* The trait (tape.h) of a recording with a second partial outside the
 * double range kept as NaN (second.c); ad_second_results says what it
 * makes of a sweep's results. */
enum { AD_SECOND_RANGE = 16 };

/* A second-order sweep's status from ad_seeded's (s) and the sum of its
 * results: AD_EOVERFLOW where they are NaN on a recording with such a
 * partial. */
static inline ad_status ad_second_results(const ad_tape *t, ad_status s, double sum)
{
    return s == AD_OK && sum != sum && t->traits & AD_SECOND_RANGE ? AD_EOVERFLOW : s;
}

/* The mode a second-order recording is made in. */
AD_HIDDEN extern const ad_mode ad_second_mode;

/* The second partials of the record at `id`, in a second-order recording. */
static inline ad_aux *ad_tape_aux(const ad_tape *t, uint32_t id)
{
    return ad_side_entry(t, ad_tape_side(t, &ad_second_mode), id);
}

#endif
