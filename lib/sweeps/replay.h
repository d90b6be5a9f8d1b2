/* dualrev internal: a program (a recording made in program mode,
 * program.h) replayed onto the recording active on this thread, with its
 * reverse or forward sweep: the nested derivatives' sweeps (replay.c). */
#ifndef DUALREV_REPLAY_H
#define DUALREV_REPLAY_H

#include "tape.h"

/* p recorded a function of n inputs with m outputs (p->outputs).  Its
 * records are made again on the active recording, from x (p's inputs'
 * values, values of that recording or constants), and so are those of
 * the sweep:
 *   ad_replay_gradient (m = 1): *fx = f(x) and grad = its gradient;
 *   ad_replay_jvp: y = f(x) and jv = J v, v values as x is.
 * Every result is a value of the active recording, so the recording
 * differentiates through it.  AD_ENOTSUP where p holds a block (an
 * external function, a recorded matrix, a checkpointed loop) or
 * lgamma or tgamma of an active value, whose partials have no recording;
 * AD_ENOMEM; or the active recording's status if it failed.  Outputs are
 * written only on AD_OK.  The replay's arrays are kept with p for the
 * next call. */
AD_HIDDEN ad_status ad_replay_gradient(ad_tape *p, size_t n, const ad_real *x,
                                       ad_real *fx, ad_real *grad);
AD_HIDDEN ad_status ad_replay_jvp(ad_tape *p, size_t n, const ad_real *x,
                                  const ad_real *v, size_t m, ad_real *y, ad_real *jv);

#endif
