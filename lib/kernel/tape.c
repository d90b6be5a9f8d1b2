/* dualrev: the tape's memory and the forward pass's slow path. */
#include <stdatomic.h>
#include <string.h>
#include <threads.h>

#include "tape.h"

static ad__cursor idle_cursor = {NULL, NULL, 0, 0};
_Thread_local ad__cursor *ad__active = &idle_cursor;

static _Thread_local ad_thread self;
static atomic_uint_fast64_t serials;
static tss_t exit_key;
/* Atomic although call_once already orders it: ThreadSanitizer does not see
 * glibc's call_once (an internal __pthread_once call that it does not
 * intercept) and would report the first calls on two threads as a race. */
static atomic_int exit_key_ok;
static once_flag exit_key_once = ONCE_FLAG_INIT;

/* The first AD_SLAB chunks are allocated one by one; later ones come
 * AD_SLAB at a time, in one allocation of 6 MiB: three whole huge pages
 * (alloc.c) that nothing else shares.  A tape of up to 6 MiB thus reserves
 * only the chunks it uses, on ordinary pages, where a first touch faults in
 * 4 KiB, not 2 MiB. */
#define AD_SLAB 4
_Static_assert(AD_SLAB * AD_CHUNK * sizeof(ad__record) % ((size_t)2 << 20) == 0,
               "a slab is whole huge pages");

/* Whether chunk k starts an allocation: 0 .. AD_SLAB - 1, then every
 * AD_SLAB-th. */
static int slab_start(size_t k)
{
    return k < AD_SLAB || k % AD_SLAB == 0;
}

static void free_chunks(void **chunks, size_t n)
{
    for (size_t k = 0; k < n; k++)
        if (slab_start(k))
            ad_free(chunks[k]);
    ad_free(chunks);
}

/* Appends the next allocation's chunks, of `bytes` each, to a chunk table
 * (*n in use, room for *cap).  The table grows by copying: it is small. */
static ad_status add_chunks(void ***chunks, size_t *n, size_t *cap, size_t bytes)
{
    size_t add = *n < AD_SLAB ? 1 : AD_SLAB;
    if (*n + add > *cap) {
        /* 16 pointers, then doubling (ad_grow from 8, asked for twice) */
        size_t room = *cap ? *cap : 8;
        ad_status s = ad_grow((void **)chunks, &room, 2 * room, sizeof **chunks, *n);
        if (s != AD_OK)
            return s;
        *cap = room;
    }
    unsigned char *mem = ad_alloc(add * bytes);
    if (!mem)
        return AD_ENOMEM;
    for (size_t i = 0; i < add; i++)
        (*chunks)[(*n)++] = mem + i * bytes;
    return AD_OK;
}

void *ad_tape_state_new(ad_tape *t, const ad_tenant *who)
{
    size_t i = t->ntenants;
    if (ad_grow((void **)&t->tenant, &t->tenants_cap, i + 1, sizeof *t->tenant, i) != AD_OK)
        return NULL;
    void *state = ad_alloc(who->size);
    if (!state)
        return NULL;
    memset(state, 0, who->size);
    t->tenant[i] = (ad_tenancy){who, state};
    t->ntenants = i + 1;
    return state;
}

static void free_tenants(ad_tape *t)
{
    for (size_t i = 0; i < t->ntenants; i++) {
        if (t->tenant[i].who->free)
            t->tenant[i].who->free(t->tenant[i].state);
        ad_free(t->tenant[i].state);
    }
    ad_free(t->tenant);
}

void ad_tape_free(ad_tape *t)
{
    free_tenants(t);
    free_chunks((void **)t->chunks, t->nchunks);
    ad_free(t->adj);
    ad_free(t->inputs);
    ad_free(t->outputs);
    ad_free(t->blocks);
    for (int i = 0; i < AD_MODES; i++)
        free_chunks((void **)t->side[i].chunks, t->side[i].n);
    memset(t, 0, sizeof *t);
}

static void free_tapes(ad_thread *th)
{
    for (int i = 0; i < AD_MAX_NESTING; i++)
        ad_tape_free(&th->tapes[i]);
    for (int i = 0; i < th->ncleanup; i++)
        th->cleanup[i]();
}

static void free_thread(void *p)
{
    ad_thread *th = p;
    free_tapes(th);
    th->registered = 0;
}

static void make_exit_key(void)
{
    atomic_store_explicit(&exit_key_ok, tss_create(&exit_key, free_thread) == thrd_success,
                          memory_order_release);
}

ad_thread *ad_thread_self(void)
{
    return &self;
}

/* Tape memory is kept for the thread's lifetime; this frees it at exit. */
ad_status ad_thread_arm(ad_thread *th)
{
    if (th->registered)
        return AD_OK;
    call_once(&exit_key_once, make_exit_key);
    if (!atomic_load_explicit(&exit_key_ok, memory_order_acquire) ||
        tss_set(exit_key, th) != thrd_success)
        return AD_ENOMEM;
    th->registered = 1;
    return AD_OK;
}

ad_status ad_thread_cleanup(void (*free_state)(void))
{
    ad_thread *th = &self;
    int i = 0;
    while (i < th->ncleanup && th->cleanup[i] != free_state)
        i++;
    if (i == AD_CLEANUPS)
        return AD_ENOMEM;  /* more drivers than AD_CLEANUPS: raise it */
    th->cleanup[i] = free_state;
    th->ncleanup += i == th->ncleanup;
    return ad_thread_arm(th);
}

/* The side table sd's chunk beside chunk k, made on first use. */
static ad_status open_side(ad_side *sd, size_t k)
{
    while (k >= sd->n) {
        ad_status s = add_chunks((void ***)&sd->chunks, &sd->n, &sd->cap,
                                 AD_CHUNK * sizeof(ad__record));
        if (s != AD_OK)
            return s;
    }
    return AD_OK;
}

static ad_status open_chunk(ad_tape *t)
{
    size_t room = (size_t)(t->id_end - t->cursor.next);
    if (room == 0)
        return AD_ERANGE;
    if (t->open == t->nchunks) {
        ad_status s = add_chunks((void ***)&t->chunks, &t->nchunks, &t->chunks_cap,
                                 AD_CHUNK * sizeof(ad__record));
        if (s != AD_OK)
            return s;
    }
    ad__record *c = t->chunks[t->open++];
    t->cursor.cur = c;
    t->room_end = c + (room < AD_CHUNK ? room : AD_CHUNK);
    /* With modes on, every record takes the slow path (end NULL), which
     * takes it only once the side tables have this chunk (slow_end). */
    t->cursor.end = t->non ? NULL : t->room_end;
    t->slow_end = NULL;
    for (int i = 0; i < t->non; i++) {
        ad_side *sd = &t->side[t->on[i].side];
        ad_status s = open_side(sd, t->open - 1);
        if (s != AD_OK)
            return s;
        t->on[i].shift = (uintptr_t)sd->chunks[t->open - 1] - (uintptr_t)c;
    }
    if (t->non)
        t->slow_end = t->room_end;
    return AD_OK;
}

/* Whether side table i is already on for the recording being begun. */
static int in_use(const ad_tape *t, int i)
{
    for (int j = 0; j < t->non; j++)
        if (t->on[j].side == i)
            return 1;
    return 0;
}

/* The side table slot for mode m: the one it had before, or a free one, or
 * one another mode had (whose table is then freed); -1 if none is. */
static int side_for(ad_tape *t, const ad_mode *m)
{
    int free_slot = -1;
    for (int i = 0; i < AD_MODES; i++) {
        if (t->side[i].mode == m)
            return i;
        if (free_slot < 0 && (!t->side[i].mode || !in_use(t, i)))
            free_slot = i;
    }
    if (free_slot >= 0 && t->side[free_slot].mode) {
        free_chunks((void **)t->side[free_slot].chunks, t->side[free_slot].n);
        memset(&t->side[free_slot], 0, sizeof t->side[free_slot]);
    }
    if (free_slot >= 0)
        t->side[free_slot].mode = m;
    return free_slot;
}

/* A number no other recording in the process has.  Threads take them in
 * blocks: an atomic add on every recording would wait, as any locked
 * instruction does, for all the stores before it to reach the cache,
 * which shows on the Jacobians of small functions. */
#define SERIAL_BLOCK ((uint64_t)1 << 16)

static uint64_t new_serial(ad_thread *th)
{
    if (th->serial_next == th->serial_end) {
        th->serial_next = (uint64_t)atomic_fetch_add(&serials, SERIAL_BLOCK) + 1;
        th->serial_end = th->serial_next + SERIAL_BLOCK;
    }
    return th->serial_next++;
}

/* A recording's tag is its serial number mod 2^31, never 0, the
 * constants' (docs/conventions.md, "Values of other recordings"), with
 * the bits its modes set (AD__TAG_LISTED). */
static uint64_t key0_of(uint64_t serial, uint32_t bits)
{
    uint32_t tag = (uint32_t)serial & ~AD__TAG_LISTED;
    return ad__key_of(0, (tag ? tag : 1) | bits);
}

/* Puts on the recording's modes, in order, and a lone mode's own writer
 * (ad_mode.keyed) if it has one. */
static ad_status modes_on(ad_tape *t, const ad_mode *const *modes, int nmodes)
{
    t->non = 0;
    t->keyed = NULL;
    if (nmodes > AD_MODES)
        return AD_ENOMEM;  /* more modes than AD_MODES: raise it */
    for (int i = 0; i < nmodes; i++) {
        int k = side_for(t, modes[i]);
        if (k < 0)
            return AD_ENOMEM;
        t->on[t->non].take = modes[i]->take;
        t->on[t->non++].side = k;
    }
    if (nmodes == 1)
        t->keyed = modes[0]->keyed;
    return AD_OK;
}

ad_status ad_tape_begin(ad_tape *t, ad_thread *th, size_t n, const ad_mode *const *modes,
                        int nmodes)
{
    size_t limit = th->limit;
    ad_status s = ad_thread_arm(th);
    if (s != AD_OK)
        return s;
    if (n >= AD__ID_END - 1)
        return AD_ERANGE;
    ad_real *old = t->inputs;
    s = ad_reserve((void **)&t->inputs, &t->inputs_cap, n, sizeof *t->inputs);
    if (s != AD_OK)
        return s;
    /* IDs never change, so they are written once per buffer, not per call. */
    if (t->inputs != old)
        t->inputs_named = 0;
    for (; t->inputs_named < n; t->inputs_named++)
        t->inputs[t->inputs_named].id = (uint32_t)(t->inputs_named + 1);
    uint32_t bits = 0;
    for (int i = 0; i < nmodes; i++)
        bits |= modes[i]->tag;
    t->serial = new_serial(th);
    t->cursor.key0 = key0_of(t->serial, bits);
    uint32_t tag = ad__tag(&t->cursor);
    for (size_t i = 0; i < n; i++)
        t->inputs[i].tag = tag;
    t->first = (uint32_t)(n + 1);
    t->id_end = AD__ID_END;
    if (limit && limit < (size_t)(AD__ID_END - t->first))
        t->id_end = t->first + (uint32_t)limit;
    t->status = AD_OK;
    t->fault = AD_OK;
    t->blocks_len = 0;
    t->traits = 0;
    t->checks = 0;
    t->open = 0;
    t->cursor.cur = t->cursor.end = t->room_end = t->slow_end = NULL;
    t->cursor.next = t->first;
    s = modes_on(t, modes, nmodes);
    if (s != AD_OK)
        return s;
    /* Chunk 0 now, so the first record does not take the slow path; with a
     * limit of 0 records the slow path reports AD_ERANGE if one is made. */
    return t->id_end > t->first ? open_chunk(t) : AD_OK;
}

ad_status ad_tape_reserve_adjoints(ad_tape *t, uint32_t top)
{
    const double *old = t->adj;
    ad_status s = ad_reserve((void **)&t->adj, &t->adj_cap, (size_t)top + 1, sizeof *t->adj);
    if (t->adj != old)  /* new memory: nothing known */
        t->adj_zero = 0;
    return s;
}

ad_status ad_tape_reserve_lanes(ad_tape *t, size_t count)
{
    const double *old = t->adj;
    ad_status s = ad_reserve((void **)&t->adj, &t->adj_cap, count, sizeof *t->adj);
    if (t->adj != old)
        t->adj_zero = 0;
    return s;
}

void ad_tape_zero_adjoints(ad_tape *t, size_t count)
{
    if (t->adj_zero < count) {
        memset(t->adj + t->adj_zero, 0, (count - t->adj_zero) * sizeof *t->adj);
        t->adj_zero = count;
    }
}

ad_status ad_tape_borrow_adjoints(ad_tape *t, size_t count)
{
    t->adj_zero = 0;
    return ad_reserve((void **)&t->adj, &t->adj_cap, count, sizeof *t->adj);
}

/* Everything but a record with room that the modes take: a new chunk,
 * the idle thread, a failed recording, a full chunk without modes.  Kept out
 * of ad__push_slow so that its common path saves no registers. */
static AD_NOINLINE uint32_t push_rare(ad__cursor *c, uint32_t a, double wa, uint32_t b, double wb,
                                      int op, double x, double y, double v)
{
    if (c == &idle_cursor)
        return 0;
    ad_tape *t = (ad_tape *)c;
    if (t->status == AD_OK && t->cursor.cur == t->room_end)
        t->status = open_chunk(t);
    if (t->status != AD_OK) {
        /* Record nothing more: the objective runs on to completion with
         * constants, and ad_gradient reports the status. */
        ad_tape_fail(t, t->status);
        return 0;
    }
    /* Room now: without modes the fast path takes it, with them this comes back. */
    return ad__push_at(c, a, wa, b, wb, op, x, y, v);
}

uint32_t ad__push_slow(ad__cursor *c, uint32_t a, double wa, uint32_t b, double wb, int op,
                       double x, double y, double v)
{
    ad_tape *t = (ad_tape *)c;
    if (c == &idle_cursor || (uintptr_t)c->cur >= (uintptr_t)t->slow_end)
        return push_rare(c, a, wa, b, wb, op, x, y, v);
    ad__ahead(t->cursor.cur);
    return t->on[0].take(t, 0, a, wa, b, wb, op, x, y, v);
}

size_t ad_set_tape_limit(size_t max_records)
{
    size_t old = self.limit;
    self.limit = max_records;
    return old;
}

ad_status ad_tape_stats_get(ad_tape_stats *out)
{
    if (!out)
        return AD_EINVAL;
    const ad_tape *t = &self.tapes[0];
    memset(out, 0, sizeof *out);
    if (t->first) {
        out->inputs = t->first - 1;
        out->records = (size_t)(t->cursor.next - t->first);
    }
    out->record_bytes = sizeof(ad__record);
    out->used_bytes = out->records * sizeof(ad__record);
    out->tape_bytes = t->nchunks * AD_CHUNK * sizeof(ad__record);
    out->adjoint_bytes = t->adj_cap * sizeof(double);
    out->block_bytes = t->first ? t->blocks_len : 0;
    for (int i = 0; i < AD_MODES; i++)
        out->side_bytes += t->side[i].n * AD_CHUNK * sizeof(ad__record);
    for (size_t i = 0; i < t->ntenants; i++) {
        const ad_tenant *who = t->tenant[i].who;
        out->driver_bytes += who->size + (who->bytes ? who->bytes(t->tenant[i].state) : 0);
        if (who->stats && t->first)
            who->stats(t->tenant[i].state, t, out);
    }
    return AD_OK;
}

ad_status ad_release(void)
{
    if (self.depth > 0)
        return AD_EBUSY;
    free_tapes(&self);
    return AD_OK;
}

/* Makes the slots written through s part of the tape. */
static void commit(ad_tape *t, ad__slots s)
{
    t->cursor.next += (uint64_t)(s.cur - t->cursor.cur);
    t->cursor.cur = s.cur;
}

ad_tape *ad_recording(void)
{
    if (ad__active == &idle_cursor || ((ad_tape *)ad__active)->status != AD_OK)
        return NULL;
    return (ad_tape *)ad__active;
}

static int recording(void)
{
    return ad_recording() != NULL;
}

void ad_tape_fail(ad_tape *t, ad_status s)
{
    t->status = s;
    t->cursor.cur = t->cursor.end = t->slow_end = NULL;
}

void ad__foreign(ad__cursor *c, uint64_t key)
{
    ad_tape *t = (ad_tape *)c;
    if (c != &idle_cursor && (uint32_t)key && t->status == AD_OK)
        ad_tape_fail(t, AD_EFOREIGN);
}

/* ad__push_keyed_slow's other cases: a key outside the recording's, the
 * idle thread, no room for the modes. */
AD_NOINLINE uint32_t ad_tape_keyed_rare(ad__cursor *c, uint64_t ka, double wa, uint64_t kb,
                                       double wb, int op, double x, double y, double v)
{
    if (ad__alien(ka, c->key0, c->next) || ad__alien(kb, c->key0, c->next)) {
        ad__foreign(c, ad__alien(ka, c->key0, c->next) ? ka : kb);
        return 0;
    }
    /* constants of another tag come as their own keys: ID 0 */
    uint32_t a = (uint32_t)ka ? (uint32_t)(ka - c->key0) : 0;
    uint32_t b = (uint32_t)kb ? (uint32_t)(kb - c->key0) : 0;
    return ad__push_slow(c, a, wa, b, wb, op, x, y, v);
}

/* Every record of a recording with modes comes here: to a lone mode's
 * own writer, or, the recording's own keys and room for the modes,
 * straight to the first mode's hook, saving no registers on the way. */
uint32_t ad__push_keyed_slow(ad__cursor *c, uint64_t ka, double wa, uint64_t kb, double wb, int op,
                             double x, double y, double v)
{
    ad_tape *t = (ad_tape *)c;
    if (AD__UNLIKELY(c == &idle_cursor))
        return ad_tape_keyed_rare(c, ka, wa, kb, wb, op, x, y, v);
    if (t->keyed)
        return t->keyed(c, ka, wa, kb, wb, op, x, y, v);
    uint64_t key0 = c->key0, next = c->next;
    if (AD__LIKELY((ka - key0 < next) & (kb - key0 < next)) &&
        AD__LIKELY((uintptr_t)c->cur < (uintptr_t)t->slow_end))
        return t->on[0].take(t, 0, (uint32_t)(ka - key0), wa, (uint32_t)(kb - key0), wb, op, x, y,
                             v);
    return ad_tape_keyed_rare(c, ka, wa, kb, wb, op, x, y, v);
}

int ad_reals_mine(ad_tape *t, size_t n, const ad_real *x)
{
    const ad__cursor *c = &t->cursor;
    for (size_t i = 0; i < n; i++)
        if (ad__alien(ad__key(x[i]), c->key0, c->next)) {
            ad__foreign(&t->cursor, ad__key(x[i]));
            return 0;
        }
    return 1;
}

ad_status ad_fail_recording(ad_status s)
{
    ad_tape *t = ad_recording();
    if (t)
        ad_tape_fail(t, s);
    return s;
}

ad__slots ad__slots_more(ad__slots s)
{
    ad__slots none = {NULL, NULL, s.count, s.key0, s.span, s.any, 1};
    if (!recording())
        return none;
    ad_tape *t = (ad_tape *)ad__active;
    if (s.count && !s.any) {
        /* Only constants so far, all in this room (nothing is committed
         * before an active argument): they contribute nothing, so write
         * over them rather than commit slots that no record would own. */
        ad__slots again = {t->cursor.cur, t->room_end, 0, s.key0, s.span, 0, 0};
        return again;
    }
    if (s.cur)
        commit(t, s);
    if (t->cursor.cur == t->room_end) {
        ad_status st = open_chunk(t);
        if (st != AD_OK) {
            ad_tape_fail(t, st);
            return none;
        }
    }
    /* The slots need no second partials: their header's kind gives them. */
    ad__slots more = {t->cursor.cur, t->room_end, s.count, s.key0, s.span, s.any, 0};
    return more;
}

/* A sweep that starts among a block's outputs must cover all of them: the
 * block reads (or writes) every output's slot at once. */
static uint32_t to_block_end(const ad_tape *t, uint32_t hi)
{
    if (hi < t->first)
        return hi;
    const ad__record *r = ad_tape_record(t, hi);
    if (r->b != AD__OUT)
        return hi;
    uint32_t header = hi - r->a;
    return header + ad_tape_record(t, header)->a;
}

uint32_t ad_outputs_top_of(const ad_tape *t, size_t from, size_t count)
{
    uint32_t hi = t->first - 1;  /* the inputs' slots are always read back */
    for (size_t j = from; j < from + count; j++)
        if (t->outputs[j].id > hi)
            hi = t->outputs[j].id;
    return to_block_end(t, hi);
}

uint32_t ad_outputs_top(const ad_tape *t, size_t m)
{
    return ad_outputs_top_of(t, 0, m);
}

void ad_read_outputs(const ad_tape *t, size_t m, double *y)
{
    for (size_t j = 0; j < m; j++)
        y[j] = t->outputs[j].v;
}
