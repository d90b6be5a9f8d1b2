/* dualrev internal: the allocator every tape buffer goes through. */
#ifndef DUALREV_ALLOC_H
#define DUALREV_ALLOC_H

#include <stddef.h>

#include "compiler.h"

AD_HIDDEN void *ad_alloc(size_t bytes);
AD_HIDDEN void ad_free(void *p);

#endif
