/* dualrev internal: the listing mode (listing.c), in which a recording
 * keeps each operation with its arguments and constants: a program
 * (ad_program_record) that can be run again at other points without the
 * user's function. */
#ifndef DUALREV_LISTING_H
#define DUALREV_LISTING_H

#include "tape.h"

/* One operation of a listing.  a and b are its arguments' IDs in the
 * recording (0: a constant, in consts from k on, a's before b's); id its
 * result's (0 for a guard).  op is record.h's AD__OP_* or AD_LIST_GUARD;
 * sub a comparison (AD__CMP_*), with AD_LIST_TRUE for a guard that held,
 * or an n-ary record's AD__LIST_* (nary.h) or AD_LIST_PROD/LSE.  An n-ary
 * operation's a elements (for a dot product a more: y's) are the IDs
 * eids[k...], each 0 taking the next constant from consts[b...] (for
 * AD__LIST_DOT_RD after its a constant factors there); a selection's
 * operands l, r, t, f likewise, at eids[k..k+4). */
typedef struct ad_ins {
    uint32_t a, b, id, k;
    unsigned char op, sub;
} ad_ins;

/* An output: a value's ID, or 0 and the constant. */
typedef struct ad_elem {
    uint32_t id;
    double v;
} ad_elem;

/* A call of an external function or a checkpointed loop, kept to be made
 * again: its rule (or step), ctx and sizes.  Its operation (AD_LIST_CALL,
 * a = the call's index) has the n + np inputs' elements at eids[k...],
 * constants from consts[b...], then the m outputs' IDs. */
typedef struct ad_call {
    ad_rule rule;
    ad_step_fn step;
    void *ctx;
    size_t steps, snapshots;
    size_t n, np, m;
} ad_call;

enum { AD_LIST_GUARD = AD__OP_COUNT, AD_LIST_CALL };
enum { AD_LIST_PROD = 8, AD_LIST_LSE };  /* after nary.h's AD__LIST_* */
enum { AD_LIST_TRUE = 8 };

/* What a listing holds, grown as the recording goes. */
typedef struct ad_listing {
    ad_ins *ins;
    size_t nins, ins_cap;
    double *consts;
    size_t nconsts, consts_cap;
    uint32_t *eids;
    size_t neids, eids_cap;
    ad_call *calls;
    size_t ncalls, calls_cap;
    size_t widest;   /* the most elements of one n-ary operation */
    size_t guards;
    int expect;      /* the next n-ary or selection record is announced */
    int sel_cmp;     /* the announced selection's comparison */
    ad_real sel_l, sel_r;
} ad_listing;

/* Whether a comparison (AD__CMP_*) holds, as C's operators decide it. */
static inline int ad_cmp_holds(int cmp, double a, double b)
{
    switch (cmp) {
    case AD__CMP_LT: return a < b;
    case AD__CMP_LE: return a <= b;
    case AD__CMP_EQ: return a == b;
    case AD__CMP_GT: return a > b;
    default: return a >= b;
    }
}

AD_HIDDEN extern const ad_mode ad_listing_mode;

/* t's listing, emptied for a new recording (NULL, out of memory); t's
 * listing if its recording is made in the mode (else NULL). */
AD_HIDDEN ad_listing *ad_listing_reset(ad_tape *t);
AD_HIDDEN ad_listing *ad_listing_of(ad_tape *t);

/* Whether x, seen as the value of record (or input) id of t's listing
 * recording, is the value that record made (a constant or an ID the
 * recording has not made: nothing to check). */
AD_HIDDEN int ad_listing_made(const ad_tape *t, uint32_t id, double x);

/* The announcements of the operations whose record alone does not say
 * what they computed: an n-ary record or a block is announced before it
 * is made (a selection with its comparison's operands, which the hook
 * keeps with the record); then, with its result's ID (0: none was made),
 * ad_listing_nary keeps its elements.  A guard is kept whole.  Each fails
 * the recording on a foreign or inconsistent operand. */
AD_HIDDEN void ad_listing_expect(ad_tape *t);
AD_HIDDEN void ad_listing_expect_selection(ad_tape *t, int cmp, ad_real l, ad_real r);
AD_HIDDEN void ad_listing_nary(ad_tape *t, uint32_t id, int which, size_t n, const ad_real *x,
                               const ad_real *y, const double *c);
AD_HIDDEN void ad_listing_guard(ad_tape *t, int cmp, ad_real a, ad_real b, int outcome);
/* A block's call, announced (ad_listing_expect) before its records; then
 * its inputs x (n) and p (np), and its m outputs' values y, IDs from
 * `first` on, as the call made them. */
AD_HIDDEN void ad_listing_call(ad_tape *t, const ad_call *call, const ad_real *x,
                               const ad_real *p, uint32_t first, const double *y);

#endif
