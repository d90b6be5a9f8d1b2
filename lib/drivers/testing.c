/* dualrev: the tests' window on the thread's tape (testing.h). */
#include <string.h>

#include "tape.h"
#include "testing.h"

uint64_t ad_test_sweeps(void)
{
    return ad_thread_self()->tapes[0].sweeps;
}

size_t ad_test_records(ad__record *out, size_t max)
{
    const ad_thread *th = ad_thread_self();
    const ad_tape *t = &th->tapes[0];
    if (th->depth > 0 || t->first == 0 || t->status != AD_OK)
        return (size_t)-1;
    size_t count = (size_t)ad_tape_top(t) + 1 - t->first;
    for (size_t k = 0; k < count && k < max; k++)
        memcpy(&out[k], ad_tape_record(t, t->first + (uint32_t)k), sizeof *out);
    return count;
}
