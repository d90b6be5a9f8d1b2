/* dualrev: allocation with fault injection for the tests. */
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
    return malloc(bytes);
}

void ad_free(void *p)
{
    free(p);
}
