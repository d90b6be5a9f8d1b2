/* dualrev: the recording kernel, inlined into user code.
 *
 * Included by dualrev.h; not a public interface of its own. The tape lives in
 * lib/tape.c; this header sees only the cursor that the forward pass advances,
 * so that every elementary operation compiles to a handful of stores. */
#ifndef DUALREV_RECORD_H
#define DUALREV_RECORD_H

#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define AD__LIKELY(x) __builtin_expect(!!(x), 1)
#define AD__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define AD_API __attribute__((visibility("default")))
#else
#define AD__LIKELY(x) (x)
#define AD__UNLIKELY(x) (x)
#define AD_API
#endif

/* One record: the defunctionalised Contrib of the dual-numbers paper (9.2),
 * fixed at two arguments.  A unary operation sets b = 0: ID 0 is the constant,
 * whose cotangent slot is a sink that nobody reads, so the reverse sweep needs
 * no branch on arity.  24 bytes, 12 per argument. */
typedef struct ad__record {
    uint32_t a, b;   /* argument IDs */
    double wa, wb;   /* local partials d(result)/d(a), d(result)/d(b) */
} ad__record;

/* IDs at or above this are reserved: a b field in that range marks a record
 * of another kind, so kinds need no extra byte in the record. */
#define AD__ID_END UINT32_C(0xFFFFFF00)

/* An n-ary record is a run of ordinary slots, two arguments each, followed
 * by a header slot {a = number of slots in the run, b = AD__NARY}; the
 * header's ID is the result's.  The run's own IDs are never referenced. */
#define AD__NARY UINT32_C(0xFFFFFFFF)

/* The part of a tape the forward pass touches.  [cur, end) is the free room in
 * the current chunk; next is the ID the next record receives.  When no
 * recording is active, or after an error, cur == end == NULL, so the one
 * bounds check below also routes those cases to the slow path. */
typedef struct ad__cursor {
    ad__record *cur, *end;
    uint64_t next;   /* 64-bit: a uint32_t could alias the records' argument IDs, forcing a reload per record */
} ad__cursor;

/* The calling thread's active tape (never NULL: an idle cursor when no
 * recording is active). */
extern AD_API _Thread_local ad__cursor *ad__active;

/* Out of line: opens the next chunk, or reports that the record cannot be
 * taken (idle tape, memory exhausted, ID range used up) by returning 0. */
AD_API uint32_t ad__push_slow(uint32_t a, double wa, uint32_t b, double wb);

static inline uint32_t ad__push(uint32_t a, double wa, uint32_t b, double wb)
{
    ad__cursor *c = ad__active;
    ad__record *r = c->cur;
    if (AD__UNLIKELY(r == c->end))
        return ad__push_slow(a, wa, b, wb);
    r->a = a;
    r->b = b;
    r->wa = wa;
    r->wb = wb;
    c->cur = r + 1;
    return (uint32_t)c->next++;
}

/* Bulk recording of an n-ary record: a private copy of the cursor that the
 * caller fills in a tight loop, so the shared cursor is not reloaded per
 * slot.  ad__slots_more commits what was written and opens more room; it
 * returns an empty room (cur == end == NULL) once recording is impossible. */
typedef struct ad__slots {
    ad__record *cur, *end;
    uint64_t count;  /* slots written, committed or not */
    uint32_t any;    /* nonzero once an active argument was written */
    int dead;        /* no more room will come: stop asking */
} ad__slots;

AD_API ad__slots ad__slots_more(ad__slots s);
AD_API uint32_t ad__slots_finish(ad__slots s);

static inline ad__slots ad__slots_begin(void)
{
    ad__cursor *c = ad__active;
    ad__slots s = {c->cur, c->end, 0, 0, 0};
    return s;
}

static inline ad__slots ad__slots_put(ad__slots s, uint32_t a, double wa, uint32_t b, double wb)
{
    if (AD__UNLIKELY(s.cur == s.end)) {
        if (s.dead)
            return s;
        s = ad__slots_more(s);
        if (!s.cur)
            return s;
    }
    s.cur->a = a;
    s.cur->b = b;
    s.cur->wa = wa;
    s.cur->wb = wb;
    s.cur++;
    s.count++;
    s.any |= a | b;
    return s;
}

/* The result ID of the slots written: none if no argument was active, the
 * slot itself if there is only one, else a header over the run. */
static inline uint32_t ad__slots_end(ad__slots s)
{
    return s.any ? ad__slots_finish(s) : 0;
}

#endif
