/* dualrev: scaled seeds' passes after results that are not all finite
 * (seeded.h, ad_retry). */
#include <string.h>

#include "seeded.h"

ad_status ad_reach_reserve(ad_tape *t, uint32_t top)
{
    uint64_t *old = t->bits;
    size_t words = ((size_t)top >> 6) + 1;
    if (ad_reserve((void **)&t->bits, &t->bits_cap, words, sizeof *t->bits) != AD_OK)
        return AD_ENOMEM;
    if (t->bits != old)
        memset(t->bits, 0, t->bits_cap * sizeof *t->bits);
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
    r->watch = ad_watch_begin(r->scale);
    return 1;
}
