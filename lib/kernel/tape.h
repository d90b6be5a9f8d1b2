/* dualrev internal: the tape and the per-thread state that owns it.
 *
 * Layout (docs/tape.md): records live in fixed-size chunks that are kept
 * between recordings, so growth never copies the tape and memory stays warm.
 * Inputs take IDs 1..n and have no record; record k (from 0) has ID n+1+k and
 * sits at chunks[k / AD_CHUNK][k % AD_CHUNK].  The cotangent array is dense,
 * indexed by ID, also kept between calls. */
#ifndef DUALREV_TAPE_H
#define DUALREV_TAPE_H

#include "alloc.h"
#include "dualrev.h"

#define AD_CHUNK_BITS 16
#define AD_CHUNK ((size_t)1 << AD_CHUNK_BITS)

typedef struct ad_tape ad_tape;

/* A recording mode (second order, checks) sends every record through the
 * slow path, where its hook sees the record before it is written: the
 * record's arguments and partials, its operation (record.h's AD__OP_*),
 * the arguments' values x and y (y: a one-argument operation's constant)
 * and the result's, v.  What the mode keeps of a record goes into its side
 * table, an entry as large as a record beside each record (ad_tape_side_here).
 * The hook of the recording's mode i ends with ad_tape_pass(t, i, ...),
 * which hands the record on to the next mode, or writes it, and returns
 * its ID; or it ends the recording (ad_tape_fail) and returns 0. */
typedef uint32_t (*ad_take)(ad_tape *t, int i, uint32_t a, double wa, uint32_t b, double wb,
                            int op, double x, double y, double v);

/* keyed, optional: the writer of every record that ad__push_keys sends
 * out of line in a recording whose only mode this is, in place of the
 * hook chain.  It takes the records with the recording's keys and room
 * for the modes, and hands the rest to ad_tape_keyed_rare. */
typedef uint32_t (*ad_keyed)(ad__cursor *c, uint64_t ka, double wa, uint64_t kb, double wb, int op,
                             double x, double y, double v);

typedef struct ad_mode {
    ad_take take;
    ad_keyed keyed;
    uint32_t tag;  /* bits the mode sets in the recording's tag (record.h) */
} ad_mode;

#define AD_MODES 2

/* A mode's side table: a chunk of entries per chunk of records, made as the
 * tape opens chunks and kept between recordings. */
typedef struct ad_side {
    const ad_mode *mode;
    unsigned char **chunks;
    size_t n, cap;
} ad_side;

/* A mode on for the recording: its hook, and how far its side table's
 * entries lie from the records in the current chunk. */
typedef struct ad_on {
    ad_take take;
    uintptr_t shift;
    int side;  /* its table: side[side] */
} ad_on;

/* A module that keeps state per tape (a driver's scratch, kept between
 * calls so that a repeated call allocates nothing) names itself with one
 * of these, static in its own file: the tape holds the state for it and
 * frees it with the tape, knowing neither its layout nor its owner. */
typedef struct ad_tenant {
    size_t size;                /* bytes of state, zero when first made */
    void (*free)(void *state);  /* frees what the state owns (not the state), or NULL */
    size_t (*bytes)(const void *state);  /* what it owns, for ad_tape_stats; or NULL */
    /* Its own figures of t's last recording for ad_tape_stats, or NULL. */
    void (*stats)(const void *state, const ad_tape *t, ad_tape_stats *out);
} ad_tenant;

/* One tenant's state on a tape. */
typedef struct ad_tenancy {
    const ad_tenant *who;
    void *state;
} ad_tenancy;


typedef struct ad_tape {
    ad__cursor cursor;       /* first: ad__active points here */
    ad_status status;        /* first error of this recording, sticky */
    ad_status fault;         /* first error a block's rule met in the sweeps of one driver
                                call (a checkpointed loop's replay): ad_seeded reports it */
    uint32_t first;          /* ID of the first record */
    uint32_t id_end;         /* IDs stay below this */
    size_t open;             /* chunks opened by this recording */
    ad__record **chunks;     /* allocated chunks, kept between recordings */
    size_t nchunks, chunks_cap;
    double *adj;             /* cotangents, indexed by ID */
    size_t adj_cap;
    size_t adj_zero;         /* adj[0..adj_zero) are 0: ad_reverse's sweep leaves them so, which
                                spares it clearing them; other uses borrow adj
                                (ad_tape_borrow_adjoints), which sets this to 0 */
    ad_real *inputs;
    size_t inputs_cap;
    size_t inputs_named;     /* inputs[0..inputs_named) already carry their IDs */
    ad_real *outputs;        /* what the recorded function returned */
    size_t outputs_cap;
    unsigned char *blocks;   /* block.c: the block records' data, at offsets */
    size_t blocks_len, blocks_cap;
    unsigned traits;         /* what the recording's records make of it, for its sweeps: bits
                                the modules define (block.h, seeded.h, second.h), zero at
                                every recording's start */
    uint64_t serial;         /* this recording's number, unique in the process */
    uint64_t sweeps;         /* reverse sweeps run over t (a count the tests read) */
    ad__record *room_end;    /* the end of the room in the current chunk */
    ad__record *slow_end;    /* room_end while the recording's modes can take records, else NULL */
    ad_keyed keyed;          /* a lone mode's own writer (ad_mode), or NULL */
    unsigned checks;         /* the thread's ad_set_checks flags when the recording began
                                (check.h, ad_checks_begin) */
    ad_side side[AD_MODES];  /* side tables, of the modes of this recording or of earlier ones */
    ad_on on[AD_MODES];      /* this recording's modes, in order */
    int non;
    ad_tenancy *tenant;      /* ad_tape_state: as many as have state on t */
    size_t ntenants, tenants_cap;
} ad_tape;

/* t's state of the tenant `who`, or NULL where the tenant has no state on
 * t yet (for sweeps, which read what the recording or the driver made). */
static inline void *ad_tape_state_if(const ad_tape *t, const ad_tenant *who)
{
    for (size_t i = 0; i < t->ntenants; i++)
        if (t->tenant[i].who == who)
            return t->tenant[i].state;
    return NULL;
}

/* tape.c: the state made, zeroed; NULL if it cannot be had. */
AD_HIDDEN void *ad_tape_state_new(ad_tape *t, const ad_tenant *who);

/* t's state of the tenant `who`: made on first use, then the same until t
 * is freed; NULL if it cannot be had. */
static inline void *ad_tape_state(ad_tape *t, const ad_tenant *who)
{
    void *state = ad_tape_state_if(t, who);
    return state ? state : ad_tape_state_new(t, who);
}

/* Drivers with per-thread state (ad_thread_cleanup). */
#define AD_CLEANUPS 4
#define AD_THREAD_MODES_BYTES 192

typedef struct ad_thread {
    ad_tape tapes[AD_MAX_NESTING];
    int depth;               /* recordings active on this thread */
    size_t limit;            /* max records per recording; 0 = ID range */
    int registered;          /* thread-exit cleanup armed */
    void (*cleanup[AD_CLEANUPS])(void);  /* ad_thread_cleanup */
    int ncleanup;
    uint64_t serial_next, serial_end;  /* recordings' serial numbers this thread may give */
    ad_collective collective;  /* the agreement hook (collective.h), agree NULL: none */
    /* The recording modes' per-thread state (check.h, ad_checks): its
     * layout is theirs; it lies here so that a recording finds it with
     * the thread's tapes, as a thread-local of its own would cost every
     * call a lookup (a call, in a shared library). */
    _Alignas(16) unsigned char modes[AD_THREAD_MODES_BYTES];
} ad_thread;

/* Per-thread state that a driver keeps in its own _Thread_local variables
 * is freed with the thread's tapes, at thread exit and by ad_release, by
 * the function it registers here (once or every time: registering again
 * does nothing).  AD_ENOMEM if the thread's exit cleanup cannot be armed;
 * the driver then frees its state itself. */
AD_HIDDEN ad_status ad_thread_cleanup(void (*free_state)(void));

AD_HIDDEN ad_thread *ad_thread_self(void);

/* Makes sure the memory of th, the calling thread's, is freed when the
 * thread exits; AD_ENOMEM if that cannot be arranged. */
AD_HIDDEN ad_status ad_thread_arm(ad_thread *th);

/* Prepare t to record a function of n inputs on th, the calling thread
 * (its record limit, its serial numbers): t->inputs gets room for their
 * ad_reals, with IDs 1..n set; the caller sets the values.  Keeps the
 * memory of earlier recordings.  modes[0..nmodes): the recording's modes,
 * whose hooks take each record in that order. */
AD_HIDDEN ad_status ad_tape_begin(ad_tape *t, ad_thread *th, size_t n, const ad_mode *const *modes,
                                  int nmodes);

/* Records in t so far: IDs first .. top(t). */
static inline uint32_t ad_tape_top(const ad_tape *t) { return (uint32_t)(t->cursor.next - 1); }

/* Make sure t->adj holds IDs 0..top, for ad_reverse, which keeps what it
 * swept at 0 (adj_zero). */
AD_HIDDEN ad_status ad_tape_reserve_adjoints(ad_tape *t, uint32_t top);

/* t->adj with room for `count` doubles for sweeps of several lanes that,
 * like ad_reverse's, leave what they swept 0 (jacobian.c's rows): what is
 * known to be 0 stays known.  ad_tape_zero_adjoints makes adj[0..count)
 * 0, clearing only what is not known to be. */
AD_HIDDEN ad_status ad_tape_reserve_lanes(ad_tape *t, size_t count);
AD_HIDDEN void ad_tape_zero_adjoints(ad_tape *t, size_t count);

/* t->adj with room for `count` doubles, for any other sweep (tangents,
 * several lanes, the sparse store), which leaves them holding anything:
 * the next ad_reverse clears what it needs again. */
AD_HIDDEN ad_status ad_tape_borrow_adjoints(ad_tape *t, size_t count);

AD_HIDDEN void ad_tape_free(ad_tape *t);

/* The tape being recorded on this thread, or NULL when none is (or when
 * the recording has already failed). */
AD_HIDDEN ad_tape *ad_recording(void);

/* Ends the recording t with status s: nothing more is recorded, and its
 * caller reports s. */
AD_HIDDEN void ad_tape_fail(ad_tape *t, ad_status s);

/* What a mode's own writer (ad_mode.keyed) does not take: a key outside
 * the recording's (AD_EFOREIGN), the idle thread, no room for the modes. */
AD_HIDDEN uint32_t ad_tape_keyed_rare(ad__cursor *c, uint64_t ka, double wa, uint64_t kb, double wb,
                                      int op, double x, double y, double v);

/* The same for the recording active on this thread, if there is one, so
 * that a primitive's error reaches the recording's caller; returns s. */
AD_HIDDEN ad_status ad_fail_recording(ad_status s);

/* Whether every active one of x[0..n) belongs to the recording t (record.h,
 * ad__alien); if not, t fails with AD_EFOREIGN. */
AD_HIDDEN int ad_reals_mine(ad_tape *t, size_t n, const ad_real *x);

/* Whether any of x[0..n) is active (not a constant). */
static inline int ad_any_active(size_t n, const ad_real *x)
{
    for (size_t i = 0; i < n; i++)
        if (x[i].id)
            return 1;
    return 0;
}

/* The highest ID a sweep of outputs from .. from + count must cover (the
 * inputs' at least, and all of a block's outputs if it starts among
 * them); the same for all m outputs; the outputs' values. */
AD_HIDDEN uint32_t ad_outputs_top_of(const ad_tape *t, size_t from, size_t count);
AD_HIDDEN uint32_t ad_outputs_top(const ad_tape *t, size_t m);
AD_HIDDEN void ad_read_outputs(const ad_tape *t, size_t m, double *y);

/* In the hook of the recording's mode i: the side entry of the record
 * about to be written. */
static inline void *ad_tape_side_here(const ad_tape *t, int i)
{
    return (void *)((uintptr_t)t->cursor.cur + t->on[i].shift);
}

/* The end of the hook of the recording's mode i: the next mode's hook, or
 * the record written, with the ID it gets. */
static inline uint32_t ad_tape_pass(ad_tape *t, int i, uint32_t a, double wa, uint32_t b,
                                    double wb, int op, double x, double y, double v)
{
    if (++i < t->non)
        return t->on[i].take(t, i, a, wa, b, wb, op, x, y, v);
    ad__record *r = t->cursor.cur;
    r->a = a;
    r->b = b;
    r->wa = wa;
    r->wb = wb;
    t->cursor.cur = r + 1;
    return (uint32_t)t->cursor.next++;
}

/* The side table of mode m in this recording, or NULL if m is not on. */
static inline const ad_side *ad_tape_side(const ad_tape *t, const ad_mode *m)
{
    for (int i = 0; i < t->non; i++)
        if (t->side[t->on[i].side].mode == m)
            return &t->side[t->on[i].side];
    return NULL;
}

/* Record id's entry in the side table sd. */
static inline void *ad_side_entry(const ad_tape *t, const ad_side *sd, uint32_t id)
{
    size_t k = id - t->first;
    return sd->chunks[k >> AD_CHUNK_BITS] + (k & (AD_CHUNK - 1)) * sizeof(ad__record);
}

/* The record at `id` (first <= id <= top). */
static inline const ad__record *ad_tape_record(const ad_tape *t, uint32_t id)
{
    size_t k = id - t->first;
    return &t->chunks[k >> AD_CHUNK_BITS][k & (AD_CHUNK - 1)];
}

#endif
