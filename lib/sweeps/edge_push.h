/* dualrev internal: edge pushing (edge_push.c), the sparse Hessian's
 * sweep. */
#ifndef DUALREV_EDGE_PUSH_H
#define DUALREV_EDGE_PUSH_H

#include "tape.h"

/* On t, recorded in second-order mode with n inputs and one output: the
 * gradient into grad, and the lower triangle of the Hessian into H, built
 * afresh, or (fixed) into the values of H's structure, a lower triangle
 * with columns ascending.  AD_ENOTSUP (a block without partials for edge
 * pushing), AD_ENOMEM, AD_ESTRUCTURE (fixed: an entry outside H's
 * structure), AD_EOVERFLOW, or a block's fault. */
AD_HIDDEN ad_status ad_edge_push(ad_tape *t, size_t n, double *grad, ad_csr *H, int fixed);

#endif
