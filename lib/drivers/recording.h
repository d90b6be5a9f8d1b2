/* dualrev internal: a recording of the user's function, the first step of
 * every driver (recording.c). */
#ifndef DUALREV_RECORDING_H
#define DUALREV_RECORDING_H

#include "tape.h"

/* The modes a recording may be made in, besides the checks if they are on:
 * second order (second.h), a program for nested derivatives (program.h)
 * or a listing, kept as an ad_program (listing.h). */
enum { AD_RECORD_SECOND = 1, AD_RECORD_PROGRAM = 2, AD_RECORD_LISTING = 4 };

/* The calling thread's tape for the current nesting depth (NULL when
 * nested too deeply, which ad_record then reports as AD_ENESTING); a
 * recording of f at x on t, outputs in t->outputs[0..m), in the modes
 * `modes` (AD_RECORD_*, 0 for none). */
AD_HIDDEN ad_tape *ad_thread_tape(void);
AD_HIDDEN ad_status ad_record(ad_tape *t, ad_function f, void *ctx, size_t n,
                              const double *x, size_t m, unsigned modes);
/* The same for a scalar objective: one output. */
AD_HIDDEN ad_status ad_record_objective(ad_tape *t, ad_objective f, void *ctx, size_t n,
                                        const double *x, unsigned modes);

#endif
