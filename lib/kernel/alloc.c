/* dualrev: allocation (with fault injection for the tests), and growth. */
#define _DEFAULT_SOURCE 1 /* madvise */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "alloc.h"

static _Thread_local long fail_countdown = -1;

void ad_test_fail_alloc_after(long after)
{
    fail_countdown = after;
}

/* A buffer of whole huge pages: tape slabs, long cotangent arrays.  A
 * sweep streams through them, and on 4 KiB pages it would miss the TLB
 * every 4 KiB (dearer still under a hypervisor's nested page tables), and
 * each first touch of a page costs a fault of its own. */
#define HUGE_PAGE ((size_t)2 << 20)

static void *alloc_huge(size_t bytes)
{
    size_t size = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = aligned_alloc(HUGE_PAGE, size);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p)
        (void)madvise(p, size, MADV_HUGEPAGE);  /* advice: refused, it changes nothing */
#endif
    return p;
}

void *ad_alloc(size_t bytes)
{
    if (fail_countdown == 0)
        return NULL;
    if (fail_countdown > 0)
        fail_countdown--;
    if (bytes > SIZE_MAX - HUGE_PAGE)
        return NULL;
    if (bytes >= HUGE_PAGE)
        return alloc_huge(bytes);
    /* Cache-line aligned: records and cotangents never straddle lines, and
     * streams start on a line.  aligned_alloc wants a multiple of 64. */
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

void ad_free(void *p)
{
    free(p);
}

/* Allocates afresh and copies only the `keep` elements wanted, not
 * realloc: a buffer's old contents are often dead, and copying them would
 * touch twice the memory. */
ad_status ad_grow_to(void **buf, size_t *cap, size_t need, size_t elem, size_t keep)
{
    /* Exact the first time (a workload usually repeats its size), doubling
     * when it grows. */
    size_t n = *cap ? *cap : need < 64 ? 64 : need;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : n * 2;
    if (n > SIZE_MAX / elem)
        return AD_ENOMEM;
    void *p = ad_alloc(n * elem);
    if (!p)
        return AD_ENOMEM;
    if (keep)
        memcpy(p, *buf, keep * elem);
    ad_free(*buf);
    *buf = p;
    *cap = n;
    return AD_OK;
}
