/* dualrev: allocation with fault injection for the tests. */
#include <stdint.h>
#include <stdlib.h>

#include "alloc.h"

static _Thread_local long fail_countdown = -1;

void ad_test_fail_alloc_after(long after)
{
    fail_countdown = after;
}

void *ad_alloc(size_t bytes)
{
    if (fail_countdown == 0)
        return NULL;
    if (fail_countdown > 0)
        fail_countdown--;
    /* Cache-line aligned: records and cotangents never straddle lines, and
     * streams start on a line.  aligned_alloc wants a multiple of 64. */
    if (bytes > SIZE_MAX - 63)
        return NULL;
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

void ad_free(void *p)
{
    free(p);
}
