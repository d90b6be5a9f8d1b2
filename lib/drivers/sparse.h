/* dualrev internal: the sparse Jacobian's driver (sparse.c): its switch
 * for the tests. */
#ifndef DUALREV_SPARSE_H
#define DUALREV_SPARSE_H

#include "compiler.h"

/* Resolve sparse rows with the uthash map even when the dense arrays are
 * available, so both stores are tested. */
AD_HIDDEN void ad_test_sparse_force_hash(int on);

#endif
