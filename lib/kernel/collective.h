/* dualrev internal: collective recordings (dualrev.h, ad_set_collective).
 *
 * Processes that communicate inside f must take the same path through
 * every driver: a process that stops where the others go on to a sweep
 * whose rules communicate leaves them waiting.  So at each point where a
 * local failure would part them (a recording begun and ended, memory for
 * a sweep, a loop's replay), the drivers call ad_agree, which returns the
 * status the processes agree on when a hook is set, and s unchanged when
 * none is. */
#ifndef DUALREV_COLLECTIVE_H
#define DUALREV_COLLECTIVE_H

#include "dualrev.h"
#include "compiler.h"

/* The trait (tape.h) of a recording that holds a collective record
 * (ad_external_collective): its sweeps run once, in full, on every
 * process alike -- no pass again for results not all finite, no exact
 * pass that skips a record its seeds do not reach, no checked sweep. */
enum { AD_COLLECTIVE_TAPE = 32 };

/* The trait of a checkpointed loop's guard (loop.c, run_plain): a
 * recording that keeps nothing and is never swept, inside which a loop
 * need not be recorded for the sweeps' sake. */
enum { AD_GUARD_TAPE = 64 };

AD_HIDDEN ad_status ad_agree(ad_status s);
/* Whether the calling thread has a hook set. */
AD_HIDDEN int ad_collective_on(void);

#endif
