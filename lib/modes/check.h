/* dualrev internal: checked recordings (ad_set_checks): the recording mode
 * (check.c), and the checked sweeps and what they say of a tape
 * (check_sweep.c). */
#ifndef DUALREV_CHECK_H
#define DUALREV_CHECK_H

#include "tape.h"

/* What a checked recording keeps of each record beside it: its value, its
 * operation and the label in force when it was made. */
typedef struct ad_info {
    double v;
    const char *label;
    int op;
} ad_info;

/* A thread's checks: its ad_set_checks flags, its ad_where label and its
 * last fault (ad_last_fault), kept by check.c in the thread's modes'
 * area (tape.h). */
typedef struct ad_checks {
    unsigned flags;
    const char *label;
    size_t step1, term1;  /* where the thread is: loop step k + 1, sum term i + 1 (0: none) */
    ad_fault fault;
    int has_fault;
} ad_checks;

_Static_assert(sizeof(ad_checks) <= AD_THREAD_MODES_BYTES, "the thread's modes' area holds them");

static inline ad_checks *ad_checks_of(ad_thread *th)
{
    return (ad_checks *)(void *)th->modes;
}

/* A recording that begins on t at nesting depth `depth` takes the
 * thread's flags ck; one at depth 0 (a driver's call) forgets the last
 * fault.  (Inline, with ck passed: a thread-local lookup is a call in a
 * shared library, a visible share of a tiny gradient.) */
static inline void ad_checks_begin(ad_checks *ck, ad_tape *t, int depth)
{
    t->checks = ck->flags;
    if (depth == 0)
        ck->has_fault = 0;
}

/* The mode a checked recording is made in: its hook checks each record
 * and keeps its ad_info, and ends the recording with AD_ENONFINITE at a
 * record that is not finite from finite arguments (AD_CHECK_FINITE). */
AD_HIDDEN extern const ad_mode ad_check_mode;

/* The outputs y[0..m) (IDs first..) of a block whose arguments have values
 * x[0..n): kept, and checked as a record's value. */
AD_HIDDEN int ad_check_block(ad_tape *t, const char *name, size_t n, const double *x, size_t m,
                             const double *y, uint32_t first);
/* The record's ad_info, in a checked recording (NULL otherwise). */
AD_HIDDEN const ad_info *ad_tape_info(const ad_tape *t, uint32_t id);
/* A value by ID: an input's, or a checked recording's record's (NaN if unknown). */
AD_HIDDEN double ad_tape_value(const ad_tape *t, uint32_t id);
/* An operation's name (record.h's AD__OP_*), or NULL (an n-ary record's
 * is its kind's: walk/nary_kinds.h). */
AD_HIDDEN const char *ad_op_label(int op);
/* A fault at record id, what is not known of it NaN, in the loop step and
 * the sum's term the thread is in; f kept as the thread's last
 * (ad_last_fault). */
AD_HIDDEN ad_fault ad_fault_at(uint32_t id, const char *op, const char *label, ad_phase phase);
AD_HIDDEN void ad_fault_keep(const ad_fault *f);

/* ---- check_sweep.c ---- */

/* After a reverse sweep whose results were not all finite: sweeps again,
 * plainly, checking each contribution; AD_ENONFINITE at the first that
 * overflows from finite numbers, else AD_OK. */
AD_HIDDEN ad_status ad_check_reverse(ad_tape *t, size_t m, const double *w, uint32_t top);
/* The same for a forward sweep seeded with v (ad_forward). */
AD_HIDDEN ad_status ad_check_forward(ad_tape *t, const double *v, uint32_t top);
/* One byte per record first..top, set for the slots of n-ary runs (whose
 * IDs nothing references); NULL if out of memory.  ad_free it. */
AD_HIDDEN unsigned char *ad_slot_marks(const ad_tape *t, uint32_t top);
/* A record's operation's name: a block's kind's, an n-ary record's, or a
 * checked recording's record's (NULL if not known). */
AD_HIDDEN const char *ad_op_name(const ad_tape *t, uint32_t id);

#endif
