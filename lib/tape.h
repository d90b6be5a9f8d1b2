/* dualrev internal: the tape and the per-thread state that owns it.
 *
 * Layout (docs/tape.md): records live in fixed-size chunks that are kept
 * between recordings, so growth never copies the tape and memory stays warm.
 * Inputs take IDs 1..n and have no record; record k (from 0) has ID n+1+k and
 * sits at chunks[k / AD_CHUNK][k % AD_CHUNK].  The cotangent array is dense,
 * indexed by ID, also kept between calls. */
#ifndef DUALREV_TAPE_H
#define DUALREV_TAPE_H

#include "dualrev.h"
#include "alloc.h"

#define AD_CHUNK_BITS 16
#define AD_CHUNK ((size_t)1 << AD_CHUNK_BITS)

typedef struct ad_tape {
    ad__cursor cursor;       /* first: ad__active points here */
    ad_status status;        /* first error of this recording, sticky */
    uint32_t first;          /* ID of the first record */
    uint32_t id_end;         /* IDs stay below this */
    size_t open;             /* chunks opened by this recording */
    ad__record **chunks;     /* allocated chunks, kept between recordings */
    size_t nchunks, chunks_cap;
    double *adj;             /* cotangents, indexed by ID */
    size_t adj_cap;
    ad_real *inputs;
    size_t inputs_cap;
    size_t inputs_named;     /* inputs[0..inputs_named) already carry their IDs */
} ad_tape;

typedef struct ad_thread {
    ad_tape tapes[AD_MAX_NESTING];
    int depth;               /* recordings active on this thread */
    size_t limit;            /* max records per recording; 0 = ID range */
    int registered;          /* thread-exit cleanup armed */
} ad_thread;

AD_HIDDEN ad_thread *ad_thread_self(void);

/* Prepare t to record a function of n inputs: t->inputs gets room for
 * their ad_reals, with IDs 1..n set; the caller sets the values.  Keeps the
 * memory of earlier recordings. */
AD_HIDDEN ad_status ad_tape_begin(ad_tape *t, size_t n, size_t limit);

/* Records in t so far: IDs first .. top(t). */
static inline uint32_t ad_tape_top(const ad_tape *t) { return (uint32_t)(t->cursor.next - 1); }

/* Make sure t->adj holds IDs 0..top. */
AD_HIDDEN ad_status ad_tape_reserve_adjoints(ad_tape *t, uint32_t top);

AD_HIDDEN void ad_tape_free(ad_tape *t);

/* The reverse sweep (resolve.c): apply records top, top-1, ..., first, each
 * once, adding cotangent x partial into its arguments' cotangents. */
AD_HIDDEN void ad_resolve(const ad_tape *t, double *adj, uint32_t top);

#endif
