/* dualrev: the binomial checkpointing schedule (revolve.h). */
#include "revolve.h"

/* beta(s, r) = C(s + r, s), saturating at UINT64_MAX; 0 for r < 0. */
static uint64_t beta(size_t s, long r)
{
    if (r < 0)
        return 0;
    uint64_t b = 1;
    /* C(s + j, j) from C(s + j - 1, j - 1): exact at each step. */
    for (long j = 1; j <= r; j++) {
        uint64_t f = (uint64_t)s + (uint64_t)j;
        if (b > UINT64_MAX / f)
            return UINT64_MAX;
        b = b * f / (uint64_t)j;
    }
    return b;
}

/* The repetition number of l steps over s >= 1 snapshots. */
static long repetitions(size_t l, size_t s)
{
    long r = 0;
    while (beta(s, r) < l)
        r++;
    return r;
}

uint64_t ad_revolve_cost(size_t l, size_t s)
{
    if (l <= 1)
        return 0;
    if (s == 0)
        return UINT64_MAX;
    long r = repetitions(l, s);
    return (uint64_t)r * l - beta(s + 1, r - 1);
}

/* With r the repetition number of l over s: the left part takes at most
 * beta(s, r - 1) steps (repetition r - 1), the right at most
 * beta(s - 1, r) (repetition r, one snapshot fewer), and the split
 * closest to the left end that allows both is optimal. */
size_t ad_revolve_split(size_t l, size_t s)
{
    if (s <= 1)
        return l - 1;
    long r = repetitions(l, s);
    uint64_t right = beta(s - 1, r), m = beta(s, r - 2);
    if (right < l && l - right > m)
        m = l - right;
    if (m < 1)
        m = 1;
    return m < l - 1 ? (size_t)m : l - 1;
}

size_t ad_revolve_default(size_t l)
{
    size_t s = 1;
    while (s < l && beta(s, 2) < l)
        s++;
    return s;
}
