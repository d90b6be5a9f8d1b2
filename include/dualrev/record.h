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

/* IDs at or above this are reserved so that a later record kind can be told
 * apart by its b field without widening the record. */
#define AD__ID_END UINT32_C(0xFFFFFF00)

/* The part of a tape the forward pass touches.  [cur, end) is the free room in
 * the current chunk; next is the ID the next record receives.  When no
 * recording is active, or after an error, cur == end == NULL, so the one
 * bounds check below also routes those cases to the slow path. */
typedef struct ad__cursor {
    ad__record *cur, *end;
    uint32_t next;
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
    return c->next++;
}

#endif
