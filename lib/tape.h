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

/* Second partials of a record (second-order recordings only): d2/da2,
 * d2/dadb, d2/db2, zero for a constant argument. */
typedef struct ad_aux {
    double aa, ab, bb;
} ad_aux;

/* tape.c finds a record's second partials at a fixed distance from it. */
_Static_assert(sizeof(ad_aux) == sizeof(ad__record), "second partials are as large as a record");

/* What a checked recording (ad_set_checks) keeps of each record beside it:
 * its value, its operation and the label in force when it was made. */
typedef struct ad_info {
    double v;
    const char *label;
    int op;
} ad_info;

/* A module that keeps state per tape (a driver's scratch, kept between
 * calls so that a repeated call allocates nothing) names itself with one
 * of these, static in its own file: the tape holds the state for it and
 * frees it with the tape, knowing neither its layout nor its owner. */
typedef struct ad_tenant {
    size_t size;                /* bytes of state, zero when first made */
    void (*free)(void *state);  /* frees what the state owns (not the state), or NULL */
} ad_tenant;

#define AD_TENANTS 6

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
    size_t adj_zero;         /* adj[0..adj_zero) are 0: ad_reverse's sweep leaves them so, which
                                spares it clearing them; other uses borrow adj
                                (ad_tape_borrow_adjoints), which sets this to 0 */
    ad_real *inputs;
    size_t inputs_cap;
    size_t inputs_named;     /* inputs[0..inputs_named) already carry their IDs */
    ad_real *outputs;        /* what the recorded function returned */
    size_t outputs_cap;
    uint64_t *bits;          /* what a sweep's seeds reach (ad_reach_mark); all zero between calls */
    size_t bits_cap;
    unsigned char *blocks;   /* block.c: the block records' data, at offsets */
    size_t blocks_len, blocks_cap;
    double *work;            /* block.c: a block's cotangents or tangents in a sweep */
    size_t work_cap;
    unsigned char *flags;    /* block.c: which of a block's outputs and arguments a row reaches */
    size_t flags_cap;
    size_t no_jvp;           /* blocks without a forward rule in this recording */
    size_t foreign;          /* blocks whose rules are the user's (ad_external) */
    /* Second-order recordings (hessian.c): every record takes the slow
     * path (cursor.end is NULL), which also writes its second partials. */
    int second;
    uint64_t serial;         /* this recording's number, unique in the process */
    uint64_t sweeps;         /* reverse sweeps so far (matrix.c: which products a sweep reached) */
    ad__record *room_end;    /* the end of the room in the current chunk */
    ad__record *slow_end;    /* room_end while a second-order or checked recording can write
                                on the slow path, else NULL */
    uintptr_t aux_shift;     /* a record's second partials' address less its own */
    ad_aux **aux;            /* aux[k] beside chunks[k]; kept between calls */
    size_t naux, aux_cap;
    size_t no_second;        /* blocks without a second-order rule */
    const uint64_t *reach;   /* during a sweep of what its seeds reach (ad_retry), t->bits */
    /* Checked recordings (check.c): every record takes the slow path too,
     * which checks it and keeps its ad_info. */
    unsigned checks;         /* the thread's ad_set_checks flags when the recording began */
    ad_info **info;          /* info[k] beside chunks[k]; kept between calls */
    size_t ninfo, info_cap;
    struct {
        const ad_tenant *who;
        void *state;
    } tenant[AD_TENANTS];     /* ad_tape_state */
} ad_tape;

/* t's state of the tenant `who`: made (zeroed) on first use, then the
 * same until t is freed; NULL if it cannot be had. */
AD_HIDDEN void *ad_tape_state(ad_tape *t, const ad_tenant *who);

/* The same, but NULL where the tenant has no state on t yet (for sweeps,
 * which read what the recording or the driver made). */
static inline void *ad_tape_state_if(const ad_tape *t, const ad_tenant *who)
{
    for (int i = 0; i < AD_TENANTS && t->tenant[i].who; i++)
        if (t->tenant[i].who == who)
            return t->tenant[i].state;
    return NULL;
}

/* Drivers with per-thread state (ad_thread_cleanup). */
#define AD_CLEANUPS 4

typedef struct ad_thread {
    ad_tape tapes[AD_MAX_NESTING];
    int depth;               /* recordings active on this thread */
    size_t limit;            /* max records per recording; 0 = ID range */
    int registered;          /* thread-exit cleanup armed */
    void (*cleanup[AD_CLEANUPS])(void);  /* ad_thread_cleanup */
    int ncleanup;
    uint64_t serial_next, serial_end;  /* recordings' serial numbers this thread may give */
    unsigned checks;         /* ad_set_checks */
    const char *label;       /* ad_where */
    ad_fault fault;          /* the last AD_ENONFINITE's (check.c) */
    int has_fault;
} ad_thread;

/* check.c: the checked recording's part of the slow path: checks the record
 * about to get ID `id` and keeps its ad_info; 0 after ending the recording
 * with AD_ENONFINITE. */
AD_HIDDEN int ad_check_record(ad_tape *t, uint32_t id, uint32_t a, double wa, uint32_t b,
                              double wb, int op, double x, double y, double v);
/* The outputs y[0..m) (IDs first..) of a block whose arguments have values
 * x[0..n): kept, and checked as a record's value. */
AD_HIDDEN int ad_check_block(ad_tape *t, const char *name, size_t n, const double *x, size_t m,
                             const double *y, uint32_t first);
/* After a reverse sweep whose results were not all finite: sweeps again,
 * plainly, checking each contribution; AD_ENONFINITE at the first that
 * overflows from finite numbers, else AD_OK. */
AD_HIDDEN ad_status ad_check_reverse(ad_tape *t, size_t m, const double *w, uint32_t top);
/* The same for a forward sweep seeded with v (ad_forward). */
AD_HIDDEN ad_status ad_check_forward(ad_tape *t, const double *v, uint32_t top);
/* One byte per record first..top, set for the slots of n-ary runs (whose
 * IDs nothing references); NULL if out of memory.  ad_free it. */
AD_HIDDEN unsigned char *ad_slot_marks(const ad_tape *t, uint32_t top);
/* An operation's name (op: record.h's AD__OP_*; an n-ary header's kind). */
AD_HIDDEN const char *ad_op_name(const ad_tape *t, uint32_t id);
/* The record's ad_info, in a checked recording (NULL otherwise). */
AD_HIDDEN const ad_info *ad_tape_info(const ad_tape *t, uint32_t id);
/* A value by ID: an input's, or a checked recording's record's (NaN if unknown). */
AD_HIDDEN double ad_tape_value(const ad_tape *t, uint32_t id);

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
 * memory of earlier recordings.  second: a second-order recording. */
AD_HIDDEN ad_status ad_tape_begin(ad_tape *t, ad_thread *th, size_t n, int second);

/* Records in t so far: IDs first .. top(t). */
static inline uint32_t ad_tape_top(const ad_tape *t) { return (uint32_t)(t->cursor.next - 1); }

/* Make sure t->adj holds IDs 0..top, for ad_reverse, which keeps what it
 * swept at 0 (adj_zero). */
AD_HIDDEN ad_status ad_tape_reserve_adjoints(ad_tape *t, uint32_t top);

/* t->adj with room for `count` doubles, for any other sweep (tangents,
 * several lanes, the sparse store), which leaves them holding anything:
 * the next ad_reverse clears what it needs again. */
AD_HIDDEN ad_status ad_tape_borrow_adjoints(ad_tape *t, size_t count);

/* Room for `need` elements of `elem` bytes in *buf (*cap of them now),
 * keeping the first `keep`: the one growth rule of the library (exact the
 * first time, as a workload usually repeats its size, then doubling). */
AD_HIDDEN ad_status ad_grow(void **buf, size_t *cap, size_t need, size_t elem, size_t keep);

/* The same for a buffer whose old contents are never needed. */
static inline ad_status ad_reserve(void **buf, size_t *cap, size_t need, size_t elem)
{
    return ad_grow(buf, cap, need, elem, 0);
}

AD_HIDDEN void ad_tape_free(ad_tape *t);

/* The tape being recorded on this thread, or NULL when none is (or when
 * the recording has already failed). */
AD_HIDDEN ad_tape *ad_recording(void);

/* Ends the recording t with status s: nothing more is recorded, and its
 * caller reports s. */
AD_HIDDEN void ad_tape_fail(ad_tape *t, ad_status s);

/* The same for the recording active on this thread, if there is one, so
 * that a primitive's error reaches the recording's caller; returns s. */
AD_HIDDEN ad_status ad_fail_recording(ad_status s);

/* Whether every active one of x[0..n) belongs to the recording t (record.h,
 * ad__check); if not, t fails with AD_EFOREIGN. */
AD_HIDDEN int ad_reals_mine(ad_tape *t, size_t n, const ad_real *x);

/* Whether any of x[0..n) is active (not a constant). */
static inline int ad_any_active(size_t n, const ad_real *x)
{
    for (size_t i = 0; i < n; i++)
        if (x[i].id)
            return 1;
    return 0;
}

/* The second partials of the record at `id`, in a second-order recording. */
static inline ad_aux *ad_tape_aux(const ad_tape *t, uint32_t id)
{
    size_t k = id - t->first;
    return &t->aux[k >> AD_CHUNK_BITS][k & (AD_CHUNK - 1)];
}

/* The record at `id` (first <= id <= top). */
static inline const ad__record *ad_tape_record(const ad_tape *t, uint32_t id)
{
    size_t k = id - t->first;
    return &t->chunks[k >> AD_CHUNK_BITS][k & (AD_CHUNK - 1)];
}

/* record.c: the calling thread's tape for the current nesting depth (NULL
 * when nested too deeply, which ad_record then reports as AD_ENESTING); a
 * recording of f at x on t, outputs in t->outputs[0..m); the highest ID a
 * sweep must cover (outputs and inputs); the outputs' values. */
AD_HIDDEN ad_tape *ad_thread_tape(void);
AD_HIDDEN ad_status ad_record(ad_tape *t, ad_function f, void *ctx, size_t n,
                              const double *x, size_t m, int second);
/* The same for a scalar objective: one output. */
AD_HIDDEN ad_status ad_record_objective(ad_tape *t, ad_objective f, void *ctx, size_t n,
                                        const double *x, int second);
AD_HIDDEN uint32_t ad_outputs_top(const ad_tape *t, size_t m);
AD_HIDDEN uint32_t ad_outputs_top_of(const ad_tape *t, size_t from, size_t count);
AD_HIDDEN void ad_read_outputs(const ad_tape *t, size_t m, double *y);
AD_HIDDEN void ad_fill_nan(double *p, size_t count);
AD_HIDDEN void ad_fill_nan_reals(ad_real *p, size_t count);

/* Sweeps carry up to AD_LANES cotangents or tangents per ID side by side
 * (array[id * lanes + lane], lanes 1, 2 or AD_LANES), so that a block of
 * Jacobian rows or columns shares one pass over the records. */
#define AD_LANES 4

/* Scaled seeds.  A sweep is linear in its seeds, so every first-order
 * sweep, and the reverse sweep of second order, is seeded with
 * AD_SEED_SCALE times its seeds, and its results scaled back: exact in
 * binary floating point wherever nothing overflows or underflows.
 * Cotangents (tangents) that would underflow then stay normal numbers.
 * Far out in a softmax a weight is 1e-300 or less, and so is every
 * cotangent below it: subnormal arithmetic costs a microcode assist of
 * about 60 ns an operation on this class of machine (a third of the
 * ADBench GMM d64 gradient), and rounds to fewer bits, or to 0.  A
 * cotangent above 2^512 overflows when scaled; the sweep only multiplies
 * and adds, so it reaches the results as an infinity or a NaN, and results
 * that are not all finite are swept again unscaled if the sweep raised the
 * overflow flag.  Tapes with the user's rules are swept unscaled.
 * docs/tape.md, "Scaled seeds". */
#define AD_SEED_SCALE 0x1p512
#define AD_SEED_UNSCALE 0x1p-512

static inline double ad_seed_scale(const ad_tape *t)
{
    return t->foreign ? 1.0 : AD_SEED_SCALE;
}

/* What scales a sweep's results back from its seed's `scale`. */
static inline double ad_seed_back(double scale)
{
    return scale == 1.0 ? 1.0 : AD_SEED_UNSCALE;
}

/* A result read out of a sweep: g scaled back by u (x 1 is exact), and
 * + 0 so that a zero derivative is +0 from every driver, whatever order
 * its zero terms were added in (docs/conventions.md). */
static inline double ad_result(double g, double u)
{
    return g * u + 0.0;
}

/* dst[i * to] = src[i * from] scaled back from `scale`, i < n; returns
 * their sum (unscaled), which is not finite if one of them is not, and
 * NaN if one is NaN.  (A sum that overflows, of results near 2^1023 / n,
 * or Infs of both signs, at worst sweep them again for nothing: rare, and
 * it spares a test per result.) */
static inline double ad_unscale(double *dst, size_t to, const double *src, size_t from, size_t n,
                                double scale)
{
    double u = ad_seed_back(scale), sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double g = src[i * from];
        sum += g;
        dst[i * to] = ad_result(g, u);
    }
    return sum;
}

/* The overflow flag around a scaled sweep.  Results that are not all
 * finite come from a scaled cotangent that overflowed, or from infinite
 * partials (a value that overflowed in the forward pass, sqrt at 0),
 * which give the same infinities and NaNs whatever the scale: the sweep is
 * run again unscaled only if it raised the flag.  The flag is cleared for
 * the sweep if it was set, and left as the caller had it: the scaled
 * sweep's own overflow is not the caller's.  Where SSE2 does the sweeps'
 * arithmetic (x86-64), the flag is MXCSR's, read without a call (two
 * fetestexcept calls were 1% of a per-observation BA Jacobian); else
 * <fenv.h>'s. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <xmmintrin.h>
#define AD_MXCSR_OE 0x8u  /* the overflow flag */

typedef struct ad_watch {
    double scale;
    int was;  /* set before the sweep */
} ad_watch;

static inline ad_watch ad_watch_begin(double scale)
{
    ad_watch w = {scale, 0};
    if (scale != 1.0) {
        unsigned csr = _mm_getcsr();
        w.was = (csr & AD_MXCSR_OE) != 0;
        if (w.was)
            _mm_setcsr(csr & ~AD_MXCSR_OE);
    }
    return w;
}

static inline int ad_overflow_end(const ad_watch *w)
{
    unsigned csr = _mm_getcsr();
    int over = (csr & AD_MXCSR_OE) != 0;
    if (over != w->was)
        _mm_setcsr(w->was ? csr | AD_MXCSR_OE : csr & ~AD_MXCSR_OE);
    return over;
}
#else
#include <fenv.h>

typedef struct ad_watch {
    double scale;
    int was;
    fexcept_t flag;
} ad_watch;

static inline ad_watch ad_watch_begin(double scale)
{
    ad_watch w = {.scale = scale};
#ifdef FE_OVERFLOW
    if (scale != 1.0 && fetestexcept(FE_OVERFLOW)) {
        w.was = 1;
        fegetexceptflag(&w.flag, FE_OVERFLOW);
        feclearexcept(FE_OVERFLOW);
    }
#endif
    return w;
}

static inline int ad_overflow_end(const ad_watch *w)
{
#ifdef FE_OVERFLOW
    int over = fetestexcept(FE_OVERFLOW) != 0;
    if (w->was)
        fesetexceptflag(&w->flag, FE_OVERFLOW);
    else if (over)
        feclearexcept(FE_OVERFLOW);
    return over;
#else
    return 1;  /* no flag to read: any result that is not finite is swept again */
#endif
}
#endif

/* Whether the sweep since ad_watch_begin raised the flag (never unscaled),
 * which is left as it was before; to be called once per ad_watch_begin. */
static inline int ad_watch_over(const ad_watch *w)
{
    return w->scale != 1.0 && ad_overflow_end(w);
}

/* Results that are not all finite, again.  Each sweep applies every record
 * below its top, also those its seeds do not reach, with a zero cotangent
 * (tangent): 0 x an infinite partial is NaN there.  Three causes, then:
 * an overflow of the scaled seeds (the flag says so), such records (the
 * poison they spread is NaN, never Inf: 0, or NaN, times anything), and
 * infinite partials of records the seeds do reach, which stay.  So a sweep
 * whose results are not all finite is run again unscaled if it raised the
 * flag; then, if a result is NaN, again applying only what its seeds reach
 * (exact: t->bits marks those IDs), scaled, and unscaled if that
 * overflows.  A finite result cannot have taken an overflowed term (an
 * infinity stays Inf or NaN) nor a NaN, and a record not reached adds only
 * zeros to it: each pass keeps the finite results and replaces only the
 * others (ad_results).  Results that are finite, or infinite without a
 * NaN (t_bad's), cost nothing more: a test of their sum, the flag read
 * twice.
 *
 *   ad_retry r = ad_retry_begin(t, 1);
 *   do { sweep with r.scale, r.exact; sum = ad_results(&r, ...) + ...; }
 *   while (ad_retry_next(&r, t, top, sum));
 *   r.status: AD_ENOMEM if the marks could not be had. */
typedef struct ad_retry {
    double scale;       /* this pass's seed scale */
    int exact;          /* this pass applies only what the seeds reach */
    int pass;           /* 0 first */
    int can_exact;      /* the sweep has an exact form (the sparse resolve is exact) */
    ad_status status;
    ad_watch watch;
} ad_retry;

static inline ad_retry ad_retry_begin(const ad_tape *t, int can_exact)
{
    ad_retry r;
    r.scale = ad_seed_scale(t);
    r.exact = 0;
    r.pass = 0;
    r.can_exact = can_exact;
    r.status = AD_OK;
    r.watch = ad_watch_begin(r.scale);
    return r;
}

/* resolve.c: the next pass for results not all finite, from the last
 * pass, whether it overflowed, and whether a result is NaN (reserving
 * t->bits for IDs 0..top on the way to an exact pass); 0 if there is
 * none. */
AD_HIDDEN int ad_retry_plan(ad_retry *r, ad_tape *t, uint32_t top, int over, int nan);

/* After each pass, with the sum of its results (ad_results): 1 to run the
 * next pass (r says how).  Reads the flag back first, always. */
static inline int ad_retry_next(ad_retry *r, ad_tape *t, uint32_t top, double sum)
{
    int over = ad_watch_over(&r->watch);
    return sum - sum != 0.0 && ad_retry_plan(r, t, top, over, sum != sum);
}

/* The first pass's results, as ad_unscale; a later pass's only where
 * dst is not finite.  Returns the sum of dst, as ad_unscale. */
static inline double ad_results(const ad_retry *r, double *dst, size_t to, const double *src,
                                size_t from, size_t n)
{
    if (!r->pass)
        return ad_unscale(dst, to, src, from, n, r->scale);
    double u = ad_seed_back(r->scale), sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = dst[i * to];
        if (d - d != 0.0)
            d = dst[i * to] = ad_result(src[i * from], u);
        sum += d;
    }
    return sum;
}

/* The same for outputs: dst[j * to] from src[outs[j].id * L], j < m. */
static inline double ad_results_of(const ad_retry *r, double *dst, size_t to, const double *src,
                                   size_t L, const ad_real *outs, size_t m)
{
    double u = ad_seed_back(r->scale), sum = 0.0;
    for (size_t j = 0; j < m; j++) {
        double d = 0.0;
        int take = !r->pass;
        if (!take) {
            d = dst[j * to];
            take = d - d != 0.0;
        }
        if (take)
            d = dst[j * to] = ad_result(src[(size_t)outs[j].id * L], u);
        sum += d;
    }
    return sum;
}

/* Marks of what a sweep's seeds reach, a bit per ID in t->bits (zero
 * between calls: a sweep that marks clears them after). */
static inline void ad_reach_mark(ad_tape *t, uint32_t id)
{
    t->bits[id >> 6] |= (uint64_t)1 << (id & 63);
}

static inline int ad_reached(const uint64_t *bits, uint32_t id)
{
    return (int)(bits[id >> 6] >> (id & 63) & 1);
}

/* Whether the tangent of id is zero by structure in a forward sweep: a
 * constant, or, in an exact pass, not reached from the seeds.  Its
 * partials may be anything, and 0 x Inf must not make NaN. */
static inline int ad_tangent_zero(const ad_tape *t, uint32_t id)
{
    return !id || (t->reach && !ad_reached(t->reach, id));
}

/* resolve.c: t->bits with room for IDs 0..top, zero. */
AD_HIDDEN ad_status ad_reach_reserve(ad_tape *t, uint32_t top);

/* resolve.c: the reverse sweep.  ad_resolve applies records top, top-1, ...,
 * first, each once, adding cotangent x partial into its arguments'
 * cotangents.  ad_reverse seeds output j of the last recording with w[j]
 * (1 when w is NULL), sweeps, and writes the inputs' cotangents to wj. */
AD_HIDDEN void ad_resolve(ad_tape *t, double *adj, uint32_t top, size_t lanes);
AD_HIDDEN ad_status ad_reverse(ad_tape *t, size_t m, const double *w, double *wj);
/* An exact reverse sweep (ad_retry), one lane: applies only the records
 * that the IDs marked in t->bits reach, marking them as it goes; leaves
 * the marks zero and the swept cotangents as ad_resolve's one lane does. */
AD_HIDDEN void ad_resolve_reached(ad_tape *t, double *adj, uint32_t top);


/* tangent.c: the forward sweep, J v.  ad_tangent runs records first..top,
 * each tangent the partials times its arguments' tangents; ad_forward seeds
 * the inputs with v and writes the outputs' tangents to jv. */
AD_HIDDEN void ad_tangent(const ad_tape *t, double *tan, uint32_t top, size_t lanes);
AD_HIDDEN ad_status ad_forward(ad_tape *t, size_t m, const double *v, double *jv);
/* An exact forward sweep, one lane: only the records that depend on the
 * IDs marked in t->bits take tangents from their arguments, and only from
 * those that do; the others' tangents are 0.  Leaves the marks zero. */
AD_HIDDEN void ad_tangent_reached(ad_tape *t, double *tan, uint32_t top);

#endif
