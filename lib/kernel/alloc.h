/* dualrev internal: the allocator every buffer goes through, and the one
 * rule by which buffers grow (alloc.c). */
#ifndef DUALREV_ALLOC_H
#define DUALREV_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "dualrev.h"

AD_HIDDEN void *ad_alloc(size_t bytes);

/* For the tests: the next `after` allocations on this thread succeed, the
 * following ones fail; negative disarms. */
AD_HIDDEN void ad_test_fail_alloc_after(long after);
AD_HIDDEN void ad_free(void *p);

/* Room for `need` elements of `elem` bytes in *buf (*cap of them now),
 * keeping the first `keep`: the one growth rule of the library (exact the
 * first time, as a workload usually repeats its size, then doubling).
 * The test for room is inline: most calls have it. */
AD_HIDDEN ad_status ad_grow_to(void **buf, size_t *cap, size_t need, size_t elem, size_t keep);

static inline ad_status ad_grow(void **buf, size_t *cap, size_t need, size_t elem, size_t keep)
{
    return need <= *cap ? AD_OK : ad_grow_to(buf, cap, need, elem, keep);
}

/* Whether a * b fits in a size_t (arrays of k rows of n, say). */
static inline int ad_size_fits(size_t a, size_t b)
{
    return !a || b <= SIZE_MAX / a;
}

/* The same for a buffer whose old contents are never needed. */
static inline ad_status ad_reserve(void **buf, size_t *cap, size_t need, size_t elem)
{
    return ad_grow(buf, cap, need, elem, 0);
}

#endif
