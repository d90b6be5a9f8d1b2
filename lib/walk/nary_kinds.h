/* dualrev internal: the kinds of n-ary records (record.h, AD__NARY_*), one
 * table for every sweep and the checks.
 *
 * Every kind keeps its first partials in its slots, one or two arguments
 * each, and reaches every argument of its slots: the first-order sweeps
 * need nothing more.  The table says what the rest need: the name a fault
 * shows, and the second partials between the arguments, as a form the
 * second-order sweeps (sweeps/second_order.c, sweeps/edge_push.c) take. */
#ifndef DUALREV_NARY_KINDS_H
#define DUALREV_NARY_KINDS_H

#include "tape.h"

typedef enum ad_nary_second {
    AD_NARY_NONE,     /* linear: ad_sum, ad_dot_rd, ad_matvec */
    AD_NARY_PAIRS,    /* h between the two arguments of each slot (ad_dot: 1) */
    AD_NARY_SQUARES,  /* h on each argument's diagonal (ad_sqnorm: 2) */
    AD_NARY_SOFTMAX,  /* diag(s) - s s^T, s the slots' partials (ad_logsumexp) */
    AD_NARY_PRODUCT   /* C times the product of the others (ad_prod; C in the header's aux) */
} ad_nary_second;

typedef struct ad_nary_kind {
    const char *name;
    ad_nary_second second;
    double h;  /* PAIRS' and SQUARES' constant */
} ad_nary_kind;

/* The kind of the n-ary record whose header is hdr (its wa). */
static inline const ad_nary_kind *ad_nary_kind_of(double wa)
{
    static const ad_nary_kind kinds[] = {
        [AD__NARY_LINEAR] = {"ad_sum/ad_dot_rd", AD_NARY_NONE, 0.0},
        [AD__NARY_DOT] = {"ad_dot", AD_NARY_PAIRS, 1.0},
        [AD__NARY_SQNORM] = {"ad_sqnorm", AD_NARY_SQUARES, 2.0},
        [AD__NARY_PROD] = {"ad_prod", AD_NARY_PRODUCT, 0.0},
        [AD__NARY_LSE] = {"ad_logsumexp", AD_NARY_SOFTMAX, 0.0},
    };
    static const ad_nary_kind unknown = {"n-ary", AD_NARY_NONE, 0.0};
    int k = (int)wa;
    return k >= 0 && k < (int)(sizeof kinds / sizeof *kinds) ? &kinds[k] : &unknown;
}

#endif
