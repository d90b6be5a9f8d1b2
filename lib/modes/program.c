/* dualrev: the program mode.  Each record keeps the values it computed
 * from beside it (program.h), and its operation in a byte of the mode's
 * own array: from them a replay (sweeps/replay.c) makes the record and
 * its partials again as operations of another recording. */
#include "program.h"

/* The operations of a tape's program, one byte per record from its first. */
typedef struct ops {
    unsigned char *op;
    size_t cap;
} ops;

static void ops_free(void *state)
{
    ad_free(((ops *)state)->op);
}

static size_t ops_bytes(const void *state)
{
    return ((const ops *)state)->cap;
}

static const ad_tenant ops_tenant = {sizeof(ops), ops_free, ops_bytes, NULL};

const unsigned char *ad_tape_ops(const ad_tape *t)
{
    const ops *o = ad_tape_state_if(t, &ops_tenant);
    return o ? o->op : NULL;
}

static uint32_t take(ad_tape *t, int i, uint32_t a, double wa, uint32_t b, double wb, int op,
                     double x, double y, double v)
{
    ops *o = ad_tape_state(t, &ops_tenant);
    size_t k = (size_t)(t->cursor.next - t->first);
    /* keep what was written: an n-ary record's slots pass by the hook, so
     * k may lie past the array's end */
    if (!o || ad_grow((void **)&o->op, &o->cap, k + 1, 1, k < o->cap ? k : o->cap) != AD_OK) {
        ad_tape_fail(t, AD_ENOMEM);
        return 0;
    }
    o->op[k] = (unsigned char)op;
    ad_step *s = ad_tape_side_here(t, i);
    s->x = x;
    s->y = y;
    s->v = v;
    return ad_tape_pass(t, i, a, wa, b, wb, op, x, y, v);
}

_Static_assert(sizeof(ad_step) <= sizeof(ad__record), "a side entry is at most a record");
_Static_assert(AD__OP_COUNT <= 256, "an operation is a byte");
const ad_mode ad_program_mode = {take, NULL, 0};
