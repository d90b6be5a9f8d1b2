/* dualrev internal: the allocator every tape buffer goes through. */
#ifndef DUALREV_ALLOC_H
#define DUALREV_ALLOC_H

#include <stddef.h>

#include "compiler.h"

AD_HIDDEN void *ad_alloc(size_t bytes);
AD_HIDDEN void ad_free(void *p);

/* Test hook: the next `after` allocations on this thread succeed, the
 * following ones fail; negative disarms.  Used to prove every allocation
 * failure is reported, not crashed on or leaked. */
AD_HIDDEN void ad_test_fail_alloc_after(long after);

#endif
