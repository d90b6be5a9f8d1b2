/* dualrev internal: block records, for operations with several outputs whose
 * derivative is a rule rather than stored partials (external functions).
 *
 * On the tape a block is a header slot and one slot per output (record.h);
 * its data lives in the tape's block area, at the offset the header holds,
 * and starts with an ad_block.  Offsets, not pointers: the area may move
 * as it grows.  The sweeps call the kind's rules one lane at a time, on
 * compact arrays: cotangents or tangents of the outputs, and of the
 * arguments, whose IDs the block lists. */
#ifndef DUALREV_BLOCK_H
#define DUALREV_BLOCK_H

#include "tape.h"

typedef struct ad_block ad_block;

/* Traits (tape.h) of a recording with a block without a forward rule,
 * without a second-order one, or without partials for edge pushing. */
enum { AD_BLOCK_NO_JVP = 1, AD_BLOCK_NO_SECOND = 2, AD_BLOCK_NO_EDGES = 8 };

typedef struct ad_block_kind {
    const char *name;
    /* Its rules are the user's (ad_external): sweeps over a tape that
     * holds one pass them cotangents and tangents as they are, not scaled
     * (seeded.h, "Scaled seeds"), as a rule need not be exactly linear in
     * them (an iterative solver's absolute tolerance, say). */
    int foreign;
    /* Its rules communicate with other processes (ad_external_collective):
     * every sweep runs them on every process, reached or not, and the
     * recording holding it is swept once (collective.h). */
    int collective;
    /* xbar = J^T ybar over the arguments in order (listed, then the run);
     * xbar arrives zeroed */
    void (*vjp)(ad_tape *t, ad_block *b, const double *ybar, double *xbar);
    /* ydot = J xdot, or NULL: the block has no forward rule */
    void (*jvp)(ad_tape *t, ad_block *b, const double *xdot, double *ydot);
    /* Optional: the sweeps' work done in place on the cotangent (tangent)
     * array, lane `lane` of L, for kinds whose arguments are too many to
     * gather into compact arrays on every call (matrix.c). */
    void (*reverse)(ad_tape *t, ad_block *b, uint32_t hid, double *adj, size_t L,
                    size_t lane);
    void (*forward)(ad_tape *t, ad_block *b, uint32_t hid, double *tan, size_t L,
                    size_t lane);
    /* Optional: the second-order reverse sweep (second_order.c), lane `lane` of
     * the tangents tan and the cotangents' tangents adjd; adj, the
     * cotangents, has one lane and is updated when `first` is set.  A
     * block without it makes ad_hvp and ad_hessian return AD_ENOTSUP. */
    void (*second)(ad_tape *t, ad_block *b, uint32_t hid, const double *tan,
                   double *adj, double *adjd, size_t L, size_t lane, int first);
    /* Optional, for sparse Hessians (edge pushing): the partials of output
     * o with respect to the arguments (listed, then the run), through
     * each(cx, argument, partial), structural zeros left out; and the
     * second partials weighted by the outputs' cotangents ybar, through
     * each2(cx, a, b, value) once for each pair a <= b (NULL: none).  A
     * block without partials makes ad_sparse_hessian return AD_ENOTSUP. */
    void (*partials)(ad_tape *t, ad_block *b, uint32_t o,
                     void (*each)(void *cx, size_t arg, double d), void *cx);
    void (*curvature)(ad_tape *t, ad_block *b, const double *ybar,
                      void (*each2)(void *cx, size_t a, size_t b, double v), void *cx);
    /* Optional, for edge pushing in one call in place of partials,
     * curvature and the exact pullback (a checkpointed loop, whose three
     * come from one replay): from the outputs' cotangents ybar and the
     * outputs the sweep reached (outs), each(cx, o, arg, partial) for
     * the partials of each reached output (o ascending), each2 as
     * curvature's, and the arguments' cotangents into xbar with the
     * arguments reached flagged in args.  A rule that fails says so
     * with ad_block_fail and writes NaN into xbar. */
    void (*edges)(ad_tape *t, ad_block *b, const unsigned char *outs, const double *ybar,
                  void (*each)(void *cx, uint32_t o, size_t arg, double d),
                  void (*each2)(void *cx, size_t a, size_t b, double v), void *cx,
                  double *xbar, unsigned char *args);
    /* Optional, for sparse Jacobians: sets the flags of the arguments
     * (listed, then the run) that the outputs flagged in outs depend on.
     * Without it every output depends on every argument. */
    void (*reach)(const ad_block *b, const unsigned char *outs, unsigned char *args);
    /* Optional, for kinds whose reach only a replay can tell (a
     * checkpointed loop): the exact rules, used by the exact sweeps and
     * the sparse resolve in place of vjp and reach (jvp).  vjp_exact
     * takes cotangents from the outputs flagged in outs alone and flags
     * the arguments they reach in args; jvp_exact takes tangents from the
     * arguments flagged in args alone and flags the outputs they reach. */
    void (*vjp_exact)(ad_tape *t, ad_block *b, const unsigned char *outs,
                      const double *ybar, double *xbar, unsigned char *args);
    void (*jvp_exact)(ad_tape *t, ad_block *b, const unsigned char *args,
                      const double *xdot, double *ydot, unsigned char *outs);
} ad_block_kind;

/* Arguments: nargs listed IDs, then run_len consecutive IDs from run (a
 * recorded matrix's entries, say, which need not be listed one by one). */
struct ad_block {
    const ad_block_kind *kind;
    uint32_t nout, nargs;
    uint32_t run, run_len;
    size_t ids;  /* byte offset from the block to its nargs argument IDs */
};

static inline const uint32_t *ad_block_ids(const ad_block *b)
{
    return (const uint32_t *)(const void *)((const char *)b + b->ids);
}

/* The ID of b's argument k (ids: ad_block_ids(b)): the listed ones, then
 * the run. */
static inline uint32_t ad_block_arg(const ad_block *b, const uint32_t *ids, size_t k)
{
    return k < b->nargs ? ids[k] : b->run + (uint32_t)(k - b->nargs);
}

/* Room for a block of `size` bytes in t's block area, with nout outputs
 * and nargs + run_len arguments; returns its offset, or ends the recording with
 * AD_ENOMEM and returns SIZE_MAX.  Reserves the sweeps' work array too, so
 * that sweeps never allocate. */
AD_HIDDEN size_t ad_block_new(ad_tape *t, size_t size, uint32_t nout, uint32_t nargs,
                              uint32_t run_len);

static inline ad_block *ad_block_at(const ad_tape *t, size_t offset)
{
    return (ad_block *)(void *)(t->blocks + offset);
}

/* Records the block at `offset` (header and output slots); returns the
 * first output's ID, or 0 if the recording failed. */
AD_HIDDEN uint32_t ad_block_record(ad_tape *t, size_t offset);

/* The block whose header is r. */
AD_HIDDEN ad_block *ad_block_of(const ad_tape *t, const ad__record *r);

/* The sweeps' part (hid: the header's ID; L lanes side by side). */
AD_HIDDEN void ad_block_reverse(ad_tape *t, const ad__record *r, uint32_t hid, double *adj,
                                size_t L);
AD_HIDDEN void ad_block_forward(ad_tape *t, const ad__record *r, uint32_t hid, double *tan,
                                size_t L);
/* ad_block_second: lanes 0 .. live - 1 of L (live >= 1); the lanes above
 * carry no direction (zero tangents and seeds) and are left as they are. */
AD_HIDDEN void ad_block_second(ad_tape *t, const ad__record *r, uint32_t hid,
                               const double *tan, double *adj, double *adjd, size_t L,
                               size_t live);

/* User rules may use dualrev: the nesting depth goes up around them, so
 * that a nested recording cannot take the tape being swept.  The sweeps'
 * entry points above do it; a kind's rule that calls user code from a
 * hook they do not wrap (partials, curvature) does it itself. */
static inline void ad_block_enter(void)
{
    ad_thread_self()->depth++;
}

static inline void ad_block_leave(void)
{
    ad_thread_self()->depth--;
}

/* A rule that fails in a sweep (a checkpointed loop's replay ran out of
 * memory, say) says so here, and writes NaN where its results go: the
 * first fault of a driver call is kept in t->fault, and ad_seeded (or the
 * sparse driver) returns it. */
AD_HIDDEN void ad_block_fail(ad_tape *t, ad_status s);

/* Cotangents of the arguments from those of the outputs, for the sparse
 * resolve: returns the argument cotangents (t's work array). */
AD_HIDDEN const double *ad_block_pullback(ad_tape *t, ad_block *b, const double *ybar);

/* The exact pullback, for the exact sweep and the sparse resolve: from
 * the outputs flagged in ad_block_flags(t) (the others' ybar 0), with the
 * arguments they reach flagged after them; returns the argument
 * cotangents (t's work array). */
AD_HIDDEN const double *ad_block_pullback_reached(ad_tape *t, ad_block *b,
                                                  const double *ybar);

/* The exact forward sweep's part for a kind with jvp_exact (one lane):
 * tangents from the arguments whose tangent is not zero by structure
 * (seeded.h, ad_tangent_zero); sets the header's and outputs' tangents
 * and marks the outputs reached. */
AD_HIDDEN void ad_block_forward_reached(ad_tape *t, const ad__record *r, uint32_t hid,
                                        double *tan);

/* The rules' scratch, per tape (a tenant of block.c), reserved as blocks
 * are recorded so that sweeps never allocate. */
typedef struct ad_block_scratch {
    double *work;
    size_t work_cap;
    unsigned char *flags;
    size_t flags_cap;
} ad_block_scratch;

AD_HIDDEN extern const ad_tenant ad_block_tenant;

/* Made by ad_block_new (or ad_block_reserve) before any rule runs. */
static inline ad_block_scratch *ad_block_scratch_of(const ad_tape *t)
{
    return ad_tape_state_if(t, &ad_block_tenant);
}

/* The rules' work array: as many doubles as the largest block has outputs
 * and arguments, or as ad_block_reserve asked for; anything between uses. */
static inline double *ad_block_work(const ad_tape *t)
{
    return ad_block_scratch_of(t)->work;
}

/* Room for `doubles` in the work array, for a rule that needs more (a
 * recording's, which fails with AD_ENOMEM and returns 0 if there is none). */
AD_HIDDEN int ad_block_reserve(ad_tape *t, size_t doubles);

/* Flags for the outputs, then for the arguments (sparse.c, with reach). */
static inline unsigned char *ad_block_flags(const ad_tape *t)
{
    return ad_block_scratch_of(t)->flags;
}

/* The work array, holding the outputs' cotangents for ad_block_pullback. */
static inline double *ad_block_ybar(const ad_tape *t)
{
    return ad_block_work(t);
}

#endif
