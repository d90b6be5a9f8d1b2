/* dualrev internal: what the tests may switch and inspect, and nothing
 * more.  Hidden symbols: the tests link the static library. */
#ifndef DUALREV_TESTING_H
#define DUALREV_TESTING_H

#include "dualrev.h"
#include "compiler.h"

/* alloc.c: the next `after` allocations on this thread succeed, the
 * following ones fail; negative disarms. */
AD_HIDDEN void ad_test_fail_alloc_after(long after);

/* sparse.c: resolve sparse rows with the uthash map even when the dense
 * arrays are available, so both stores are tested. */
AD_HIDDEN void ad_test_sparse_force_hash(int on);

/* The calling thread's outermost tape: reverse sweeps run over it so far,
 * and its last complete recording's records copied to out[0..max); returns
 * how many there are, or (size_t)-1 if there is no complete recording. */
AD_HIDDEN uint64_t ad_test_sweeps(void);
AD_HIDDEN size_t ad_test_records(ad__record *out, size_t max);

#endif
