/* dualrev: the recording kernel, inlined into user code.
 *
 * Included by dualrev.h; not a public interface of its own. The tape lives in
 * lib/kernel/tape.c; this header sees only the cursor that the forward pass advances,
 * so that every elementary operation compiles to a handful of stores. */
#ifndef DUALREV_RECORD_H
#define DUALREV_RECORD_H

#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define AD__GNU 1
#define AD__LIKELY(x) __builtin_expect(!!(x), 1)
#define AD__UNLIKELY(x) __builtin_expect(!!(x), 0)
#define AD_API __attribute__((visibility("default")))
#else
#define AD__LIKELY(x) (x)
#define AD__UNLIKELY(x) (x)
#define AD_API
#endif

/* On every function that returns an ad_status: a status dropped on the
 * floor is a warning.  C++17 and C23 take [[nodiscard]], which a cast to
 * void silences; in C11 gcc's and clang's warn_unused_result, which gcc
 * does not let a cast silence (test the status, or compile with
 * -DAD_NODISCARD= to turn the warning off). */
#ifndef AD_NODISCARD
#if defined(__cplusplus) && __cplusplus >= 201703L
#define AD_NODISCARD [[nodiscard]]
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ > 201710L
#define AD_NODISCARD [[nodiscard]]
#elif defined(__GNUC__) || defined(__clang__)
#define AD_NODISCARD __attribute__((warn_unused_result))
#else
#define AD_NODISCARD
#endif
#endif

/* C++ includes the C API with C linkage.  Its thread-local cursor is
 * declared __thread there where it can be: C++'s thread_local on an extern
 * variable goes through a wrapper call in case it has a dynamic initialiser,
 * which ours never has. */
#ifdef __cplusplus
#define AD__EXTERN_C_BEGIN extern "C" {
#define AD__EXTERN_C_END }
#ifdef AD__GNU
#define AD__THREAD_LOCAL __thread
#else
#define AD__THREAD_LOCAL thread_local
#endif
#else
#define AD__EXTERN_C_BEGIN
#define AD__EXTERN_C_END
#define AD__THREAD_LOCAL _Thread_local
#endif

AD__EXTERN_C_BEGIN

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

/* A block record (lib/rules/block.h: external functions, recorded matrices) has
 * several outputs and keeps its data beside the tape: a header slot
 * {a = number of outputs, b = AD__BLOCK, wa = the data's offset}, then one
 * slot per output {a = distance back to the header, b = AD__OUT}, whose IDs
 * are the outputs'. */
#define AD__BLOCK UINT32_C(0xFFFFFFFE)
#define AD__OUT UINT32_C(0xFFFFFFFD)

/* The part of a tape the forward pass touches.  [cur, end) is the free room in
 * the current chunk; next is the ID the next record receives.  When no
 * recording is active, or after an error, cur == end == NULL, and in a
 * second-order recording end is NULL, so the one bounds check below also
 * routes those cases to the slow path. */
typedef struct ad__cursor {
    ad__record *cur, *end;
    uint64_t next;   /* 64-bit: a uint32_t could alias the records' argument IDs, forcing a reload per record */
    uint64_t key0;   /* the key (below) of ID 0 with this recording's tag; 0 when idle */
} ad__cursor;

/* Every ad_real carries the tag of the recording that made it (0 for a
 * constant made by ad_const).  Its key is its second word, ID and tag,
 * read as one uint64_t (tag << 32 | ID on a little-endian machine): one
 * register where the value is passed, so reading it costs nothing.  A key
 * belongs to the active recording when key - key0 < next: the tag matches
 * and the ID names a record already made (or is 0), so that one compare
 * both catches a value of another recording and keeps a stale ID off the
 * tape.  A constant of another tag fails that compare too, and is let
 * through by a second test, off the hot path. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define AD__KEY_WORD 1
#endif

static inline uint64_t ad__key_of(uint32_t id, uint32_t tag)
{
    return (uint64_t)tag << 32 | id;
}

static inline uint32_t ad__tag(const ad__cursor *c)
{
    return (uint32_t)(c->key0 >> 32);
}

/* The top bit of a tag marks a recording being kept as a program
 * (ad_program_record): there an operation that would record nothing and
 * still change a value (x + c, a selection of constants, a comparison)
 * takes a path that keeps it.  Tested on the values at hand, so that other
 * recordings pay one register test. */
#define AD__TAG_LISTED UINT32_C(0x80000000)

static inline int ad__listed(uint32_t tag)
{
    return (int)AD__UNLIKELY((tag & AD__TAG_LISTED) != 0);
}

/* Out of line: an active value whose key is not the recording's fails the
 * recording with AD_EFOREIGN (if it has not failed already). */
AD_API void ad__foreign(ad__cursor *c, uint64_t key);

/* Whether an argument's key is not the recording's, whose keys are key0
 * and the `span` above it, and it is active. */
static inline int ad__alien(uint64_t key, uint64_t key0, uint64_t span)
{
    return AD__UNLIKELY(key - key0 >= span) && (uint32_t)key;
}

/* The calling thread's active tape (never NULL: an idle cursor when no
 * recording is active). */
extern AD_API AD__THREAD_LOCAL ad__cursor *ad__active;

/* What a record's operation was, for second-order recordings (ad_hvp),
 * which compute the second partials from it and from the arguments'
 * values, and for checked recordings (ad_set_checks), which name it.  The
 * fast path never reads it, so it costs nothing there: each operation
 * passes a constant.  Those before AD__OP_CURVED have no second partials. */
enum {
    AD__OP_LINEAR, AD__OP_ADD, AD__OP_SUB, AD__OP_NEG, AD__OP_FABS, AD__OP_FMIN, AD__OP_FMAX,
    AD__OP_AXPY, AD__OP_NARY, AD__OP_BLOCK, AD__OP_OUT, AD__OP_SELECT,
    AD__OP_MUL, AD__OP_DIV, AD__OP_POW, AD__OP_POW_RD, AD__OP_POW_DR, AD__OP_ATAN2,
    AD__OP_HYPOT, AD__OP_SQRT, AD__OP_CBRT, AD__OP_EXP, AD__OP_EXPM1, AD__OP_LOG,
    AD__OP_LOG1P, AD__OP_LOG2, AD__OP_LOG10, AD__OP_SIN, AD__OP_COS, AD__OP_TAN,
    AD__OP_ASIN, AD__OP_ACOS, AD__OP_ATAN, AD__OP_SINH, AD__OP_COSH, AD__OP_TANH,
    AD__OP_ASINH, AD__OP_ACOSH, AD__OP_ATANH, AD__OP_ERF, AD__OP_ERFC, AD__OP_LGAMMA,
    AD__OP_TGAMMA, AD__OP_COUNT
};
#define AD__OP_CURVED AD__OP_MUL

/* Out of line: opens the next chunk, records with second partials in a
 * second-order recording, or reports that the record cannot be taken (idle
 * tape, memory exhausted, ID range used up) by returning 0.  c is the
 * thread's cursor (passed, as the thread-local lookup costs a call in a
 * shared library); x and y are the arguments' values (for one argument, y
 * is the operation's constant), v the result's. */
AD_API uint32_t ad__push_slow(ad__cursor *c, uint32_t a, double wa, uint32_t b, double wb, int op,
                              double x, double y, double v);

/* Asks for the tape ahead of where the next record goes.  A long
 * recording writes lines that no cache holds, and a store to such a line
 * waits for it to be read in; asked for early, the read overlaps the
 * records before it.  The distance is a page: a closer prefetch is issued
 * too late to hide memory's latency (docs/tape.md, "Forward pass").  A
 * prefetch never faults, so one past the room's end is harmless.
 * The slots of an n-ary run (below) do without: their loop is stores alone,
 * which the hardware's prefetchers keep up with, and a prefetch per slot
 * would only add an instruction or more. */
#define AD__AHEAD_BYTES 4096

static inline void ad__ahead(const ad__record *r)
{
#ifdef AD__GNU
    __builtin_prefetch((const void *)((uintptr_t)r + AD__AHEAD_BYTES), 1);
#else
    (void)r;
#endif
}

/* The room check is an unsigned compare, so that a second-order recording
 * can send every record to the slow path with end = NULL. */
static inline uint32_t ad__push_at(ad__cursor *c, uint32_t a, double wa, uint32_t b, double wb,
                                   int op, double x, double y, double v)
{
    ad__record *r = c->cur;
    if (AD__UNLIKELY((uintptr_t)r >= (uintptr_t)c->end))
        return ad__push_slow(c, a, wa, b, wb, op, x, y, v);
    ad__ahead(r);
    r->a = a;
    r->b = b;
    r->wa = wa;
    r->wb = wb;
    c->cur = r + 1;
    return (uint32_t)c->next++;
}

/* Out of line: ad__push_keys found an argument's key outside the
 * recording's, or no room: a key of another recording fails the recording
 * (AD_EFOREIGN) and 0 is returned; else the record goes to ad__push_slow. */
AD_API uint32_t ad__push_keyed_slow(ad__cursor *c, uint64_t ka, double wa, uint64_t kb, double wb,
                                    int op, double x, double y, double v);

/* A record whose arguments are given by their keys (ad__key), checked
 * against the recording as the record is written: a constant argument
 * passes key0, the key of ID 0 (the sink) in this recording.  The checks
 * and the room test are one unlikely branch, whose target does not return
 * into this path, so nothing here is reloaded after it. */
static inline uint32_t ad__push_keys(ad__cursor *c, uint64_t ka, double wa, uint64_t kb, double wb,
                                     int op, double x, double y, double v)
{
    ad__record *r = c->cur;
    uint64_t key0 = c->key0, next = c->next;
    if (AD__UNLIKELY((uintptr_t)r >= (uintptr_t)c->end) ||
        AD__UNLIKELY((ka - key0 >= next) | (kb - key0 >= next)))
        return ad__push_keyed_slow(c, ka, wa, kb, wb, op, x, y, v);
    ad__ahead(r);
    r->a = (uint32_t)ka;  /* key0's ID is 0 */
    r->b = (uint32_t)kb;
    r->wa = wa;
    r->wb = wb;
    c->cur = r + 1;
    c->next = next + 1;
    return (uint32_t)next;
}

/* A record whose partials are constants (a sum, a header). */
static inline uint32_t ad__push(ad__cursor *c, uint32_t a, double wa, uint32_t b, double wb)
{
    return ad__push_at(c, a, wa, b, wb, AD__OP_LINEAR, 0.0, 0.0, 0.0);
}

/* Bulk recording of an n-ary record: a private copy of the cursor that the
 * caller fills in a tight loop, so the shared cursor is not reloaded per
 * slot.  ad__slots_more commits what was written and opens more room; it
 * returns an empty room (cur == end == NULL) once recording is impossible. */
typedef struct ad__slots {
    ad__record *cur, *end;
    uint64_t count;  /* slots written, committed or not */
    uint64_t key0, span;  /* an argument's key k is the recording's if k - key0 < span */
    uint32_t any;    /* nonzero once an active argument was written */
    int dead;        /* no more room will come: stop asking */
} ad__slots;

AD_API ad__slots ad__slots_more(ad__slots s);

static inline ad__slots ad__slots_begin(void)
{
    ad__cursor *c = ad__active;
    ad__slots s = {c->cur, c->end, 0, c->key0, c->next, 0, 0};
    return s;
}

/* Checks an argument of the run against the recording (ad__alien). */
static inline void ad__slots_check(const ad__slots *s, uint64_t key)
{
    if (ad__alien(key, s->key0, s->span))
        ad__foreign(ad__active, key);
}

/* a and b are checked by the caller (ad__slots_check): a recording that
 * fails there has no room, so nothing more is written. */
static inline ad__slots ad__slots_put(ad__slots s, uint32_t a, double wa, uint32_t b, double wb)
{
    if (AD__UNLIKELY((uintptr_t)s.cur >= (uintptr_t)s.end)) {
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

/* What an n-ary record computes, kept in its header's wa for second-order
 * sweeps, which need each kind's second partials: none for a linear
 * function of its arguments, 1 between the two arguments of each slot of
 * a dot product, 2 on each argument of a squared norm; prod and logsumexp
 * are dense (lib/sweeps/second_order.c). */
enum { AD__NARY_LINEAR, AD__NARY_DOT, AD__NARY_SQNORM, AD__NARY_PROD, AD__NARY_LSE };

/* The result ID of the slots written: none if no argument was active (or
 * the recording failed: the room is then empty), the slot itself if there
 * is only one, else a header over the run.  The slots are committed to the
 * shared cursor, whose room they were taken from.  A second-order recording
 * (end == NULL) keeps the header of a lone slot too: slots have no second
 * partials of their own, their header's kind gives them. */
static inline uint32_t ad__slots_end(ad__slots s, int kind, double v)
{
    ad__cursor *c = ad__active;
    if (!s.any || !s.cur || !c->cur)  /* c->cur: the recording failed meanwhile */
        return 0;
    c->next += (uint64_t)(s.cur - c->cur);
    c->cur = s.cur;
    if (s.count == 1 && c->end)
        return (uint32_t)(c->next - 1);
    return ad__push_at(c, (uint32_t)s.count, (double)kind, AD__NARY, 0.0, AD__OP_NARY, 0.0, 0.0, v);
}

AD__EXTERN_C_END

#endif
