/* dualrev: scaled seeds' passes after results that are not all finite
 * (seeded.h, ad_retry). */
#include <string.h>

#include "seeded.h"

static void marks_free(void *state)
{
    ad_free(((ad_marks *)state)->bits);
}

static size_t marks_bytes(const void *state)
{
    return ((const ad_marks *)state)->cap * sizeof(uint64_t);
}

const ad_tenant ad_marks_tenant = {sizeof(ad_marks), marks_free, marks_bytes, NULL};

ad_status ad_reach_reserve(ad_tape *t, uint32_t top)
{
    ad_marks *m = ad_tape_state(t, &ad_marks_tenant);
    if (!m)
        return AD_ENOMEM;
    uint64_t *old = m->bits;
    size_t words = ((size_t)top >> 6) + 1;
    if (ad_reserve((void **)&m->bits, &m->cap, words, sizeof *m->bits) != AD_OK)
        return AD_ENOMEM;
    if (m->bits != old)
        memset(m->bits, 0, m->cap * sizeof *m->bits);
    return AD_OK;
}

int ad_retry_plan(ad_retry *r, ad_tape *t, uint32_t top, int over, int nan)
{
    if (over) {
        r->scale = 1.0;
    } else if (!r->exact && r->can_exact && nan) {
        r->status = ad_reach_reserve(t, top);
        if (r->status != AD_OK)
            return 0;
        r->exact = 1;
        r->scale = ad_seed_scale(t);
    } else {
        return 0;
    }
    r->pass++;
    r->watch = ad_watch_begin();
    return 1;
}
