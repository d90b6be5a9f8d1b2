/* dualrev internal: the binomial checkpointing schedule (Griewank and
 * Walther, "revolve", ACM TOMS 2000), for checkpointed loops (loop.c).
 *
 * To reverse l steps holding the first state in one of s snapshots, the
 * fewest advances of the step (forward evaluations, not counting the one
 * taping of each step) is t(l, s) = r l - beta(s + 1, r - 1), where
 * beta(s, r) = C(s + r, s) and the repetition number r is the least with
 * beta(s, r) >= l: no step is advanced more than r times.  A schedule
 * meets it by advancing m steps from the first state, keeping the state
 * reached in a second snapshot, reversing the last l - m steps with s - 1
 * snapshots, then the first m with s (ad_revolve_split gives an m that
 * does). */
#ifndef DUALREV_REVOLVE_H
#define DUALREV_REVOLVE_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"

/* t(l, s) above; 0 for l <= 1; UINT64_MAX where s = 0 and l > 1. */
AD_HIDDEN uint64_t ad_revolve_cost(size_t l, size_t s);

/* An optimal first advance m, 1 <= m < l, for l >= 2 steps and s >= 1
 * snapshots. */
AD_HIDDEN size_t ad_revolve_split(size_t l, size_t s);

/* The snapshots chosen for l steps when the caller leaves it to dualrev:
 * the fewest for which r <= 2, at most l. */
AD_HIDDEN size_t ad_revolve_default(size_t l);

#endif
