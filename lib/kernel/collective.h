/* dualrev internal: collective recordings (dualrev.h, ad_set_collective).
 *
 * Processes that communicate inside f must take the same path through
 * every driver: a process that stops where the others go on to a sweep
 * whose rules communicate leaves them waiting.  So at each point where a
 * local failure would part them (a recording begun and ended, memory for
 * a sweep, a loop's replay), the drivers call ad_agree, which returns the
 * status the processes agree on when the thread has a hook, and s
 * unchanged when it has none.  The hook lies with the thread's tapes
 * (tape.h), which the drivers hold already: a thread-local of its own
 * would cost each call a lookup, in a shared library. */
#ifndef DUALREV_COLLECTIVE_H
#define DUALREV_COLLECTIVE_H

#include "tape.h"

/* The trait (tape.h) of a recording that holds a collective record
 * (ad_external_collective) or was made under a hook: its sweeps run once,
 * in full, on every process alike -- no pass again for results that are
 * not finite, no exact pass that skips a record its seeds do not reach,
 * no checked sweep -- and agree before they start. */
enum { AD_COLLECTIVE_TAPE = 32 };

/* The trait of a checkpointed loop's guard (loop.c, run_plain): a
 * recording that keeps nothing and is never swept, inside which a loop
 * need not be recorded for the sweeps' sake. */
enum { AD_GUARD_TAPE = 64 };

/* s, or the status th's hook agrees on. */
static inline ad_status ad_agree_on(ad_thread *th, ad_status s)
{
    return th->collective.agree ? th->collective.agree(th->collective.ctx, s) : s;
}

static inline ad_status ad_agree(ad_status s)
{
    return ad_agree_on(ad_thread_self(), s);
}

/* Before a sweep of t: agreed if t is collective (the others' sweeps
 * are made under the same hook). */
static inline ad_status ad_agree_sweep(const ad_tape *t, ad_status s)
{
    return t->traits & AD_COLLECTIVE_TAPE ? ad_agree(s) : s;
}

/* Whether the calling thread has a hook set. */
static inline int ad_collective_on(void)
{
    return ad_thread_self()->collective.agree != NULL;
}

#endif
