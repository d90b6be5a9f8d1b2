/* dualrev internal: recordings kept as programs (program.c), whose records
 * remember what they computed, so that a replay can make them again on
 * another recording and differentiate them there (nested derivatives). */
#ifndef DUALREV_PROGRAM_H
#define DUALREV_PROGRAM_H

#include "tape.h"

/* What a record computed from: its arguments' values x and y as it saw
 * them (an argument's record may hold another: x + c shares x's ID), y a
 * one-argument operation's constant, and its value v.  The slots of an
 * ad_prod or ad_logsumexp record keep their two arguments' values in x
 * and y, and its header the constant elements' product (ad_prod) in x
 * (reduce.c). */
typedef struct ad_step {
    double x, y, v;
} ad_step;

/* The mode a program is recorded in. */
AD_HIDDEN extern const ad_mode ad_program_mode;

/* The step of the record at `id` in a program (a recording in the mode);
 * NULL if t's recording is not one. */
static inline ad_step *ad_tape_step(const ad_tape *t, uint32_t id)
{
    const ad_side *sd = ad_tape_side(t, &ad_program_mode);
    return sd ? ad_side_entry(t, sd, id) : NULL;
}

/* The operations (record.h's AD__OP_*) of a program's records, one byte
 * each: the record at `id`'s at [id - t->first]. */
AD_HIDDEN const unsigned char *ad_tape_ops(const ad_tape *t);

#endif
