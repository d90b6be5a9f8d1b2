/* dualrev internal: what the tests may switch and inspect, and nothing
 * more: testing.c's window on the tape, and the switches of the modules
 * that own them.  Hidden symbols: the tests link the static library. */
#ifndef DUALREV_TESTING_H
#define DUALREV_TESTING_H

#include "alloc.h"   /* ad_test_fail_alloc_after */
#include "dualrev.h"
#include "sparse.h"  /* ad_test_sparse_force_hash */

/* testing.c: the calling thread's outermost tape: reverse sweeps run over it so far,
 * and its last complete recording's records copied to out[0..max); returns
 * how many there are, or (size_t)-1 if there is no complete recording. */
AD_HIDDEN uint64_t ad_test_sweeps(void);
AD_HIDDEN size_t ad_test_records(ad__record *out, size_t max);

#endif
