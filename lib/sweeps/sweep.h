/* dualrev internal: the first-order sweeps over a tape, reverse (resolve.c)
 * and forward (tangent.c), for the drivers. */
#ifndef DUALREV_SWEEP_H
#define DUALREV_SWEEP_H

#include "tape.h"

/* Sweeps carry up to AD_LANES cotangents or tangents per ID side by side
 * (array[id * lanes + lane], lanes 1, 2 or AD_LANES), so that a block of
 * Jacobian rows or columns shares one pass over the records. */
#define AD_LANES 4

/* Second-order sweeps take up to twice as many: a pass reads each
 * record's second partials too, a fixed cost that more lanes share. */
#define AD_SECOND_LANES 8

/* What ad_reverse and ad_forward seed and read out, for their passes
 * (seeded.h, ad_pass): weights `in` of the m outputs and cotangents `out`
 * of the n inputs, or tangents of the inputs and of the outputs; hi, the
 * top of the sweep. */
typedef struct ad_seeds {
    size_t m, n;
    const double *in;
    double *out;
    uint32_t hi;
    unsigned char *flags;  /* ad_reverse_in's, ad_forward_in's exact flags, or NULL */
} ad_seeds;

/* The reverse sweep (resolve.c).  ad_resolve applies records top, top-1, ...,
 * first, each once, adding cotangent x partial into its arguments'
 * cotangents.  ad_reverse seeds output j of the last recording with w[j]
 * (1 when w is NULL), sweeps, and writes the inputs' cotangents to wj. */
AD_HIDDEN void ad_resolve(ad_tape *t, double *adj, uint32_t top, size_t lanes);
AD_HIDDEN ad_status ad_reverse(ad_tape *t, size_t m, const double *w, double *wj);
/* ad_reverse as one pass of the caller's own sweep, for a rule that
 * sweeps a tape of its own (a checkpointed loop's step): exact NULL,
 * every record applied, and results not all finite left so (the caller's
 * exact pass settles them); else the exact sweep from the outputs flagged
 * in exact[0..m), whatever their weight, which flags the inputs reached
 * in exact[m..m+n). */
AD_HIDDEN ad_status ad_reverse_in(ad_tape *t, size_t m, const double *w, double *wj,
                                  unsigned char *exact);
/* An exact reverse sweep (seeded.h, ad_retry), one lane: applies only the records
 * that the IDs marked (seeded.h, ad_marks) reach, marking them as it goes; leaves
 * the swept cotangents as ad_resolve's one lane does, and the marks for the
 * caller to read and clear (ad_reach_clear). */
AD_HIDDEN void ad_resolve_reached(ad_tape *t, double *adj, uint32_t top);

/* The forward sweep, J v (tangent.c).  ad_tangent runs records first..top,
 * each tangent the partials times its arguments' tangents; ad_forward seeds
 * the inputs with v and writes the outputs' tangents to jv. */
AD_HIDDEN void ad_tangent(ad_tape *t, double *tan, uint32_t top, size_t lanes);
AD_HIDDEN ad_status ad_forward(ad_tape *t, size_t m, const double *v, double *jv);
/* ad_forward as one pass of the caller's own sweep, as ad_reverse_in:
 * exact NULL, every record applied; else the exact sweep from the inputs
 * flagged in exact[0..n), which flags the outputs reached in
 * exact[n..n+m). */
AD_HIDDEN ad_status ad_forward_in(ad_tape *t, size_t m, const double *v, double *jv,
                                  unsigned char *exact);
/* An exact forward sweep (seeded.h, ad_retry), one lane: only the records that depend on the
 * IDs marked (ad_marks) take tangents from their arguments, and only from
 * those that do; the others' tangents are 0.  Leaves the marks for the
 * caller to read and clear (ad_reach_clear). */
AD_HIDDEN void ad_tangent_reached(ad_tape *t, double *tan, uint32_t top);

#endif
