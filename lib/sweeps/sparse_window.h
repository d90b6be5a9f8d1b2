/* dualrev internal: the window of the staged resolve's pending set.
 *
 * Records are appended in program order, so a group reaches mostly a
 * compact span of IDs just below its highest output.  The window holds
 * those: up to WINDOW IDs below the group's top, in its chunk, so that
 * their records are one array.  Its cells are small arrays of the call's
 * own that stay in cache; the group walks them downwards position by
 * position, as the dense reverse sweep walks the tape, to the lowest
 * position staged, and clears each as it is expanded (nothing stages into
 * it again: staging reaches only lower IDs).  So the window is clear for
 * the next group, and a group pays only for the span it uses.  Each step
 * of the walk also prefetches a record for a group further on.
 *
 * Static functions: this header belongs to sparse_rows.c alone. */
#ifndef DUALREV_SPARSE_WINDOW_H
#define DUALREV_SPARSE_WINDOW_H

#include <stdint.h>
#include <string.h>

#include "sparse_cell.h"

/* IDs below a group's highest output that the window covers. */
#define WINDOW 1024

/* Lanes are 16-bit, not bytes, which could alias anything and make the
 * compiler reload the kernel's state after every store into them.  Between
 * groups every position is clear: no lanes, -0 cotangents. */
typedef struct window {
    uint16_t lanes[WINDOW];        /* the lanes that reached each position */
    double val[WINDOW * GROUP];    /* L cotangents per position */
} window;

/* The tape's records, as the kernel keeps them in registers. */
typedef struct records {
    ad__record *const *chunks; /* the tape's */
    uint32_t first;            /* the tape's first record ID */
} records;

AD_INLINE const ad__record *record_at(const records *t, uint32_t id)
{
    size_t k = id - t->first;
    return &t->chunks[k >> AD_CHUNK_BITS][k & (AD_CHUNK - 1)];
}

/* The group's window, as the kernel keeps it in registers. */
typedef struct window_at {
    window *win;
    uint32_t wlo, whi;         /* the window's IDs; wlo is UINT32_MAX without one */
    const ad__record *wrec;    /* the window's records: wlo's, then on in one chunk */
    size_t wmin;               /* the lowest position staged (whi - wlo + 1 for none) */
    uintptr_t ahead;           /* just above the top record of the group PREFETCH_AHEAD on */
    int wkept;                 /* block outputs were left uncleared for their rule */
} window_at;

/* A clear window, in either lane count's layout; NULL without memory. */
static window *window_new(void)
{
    window *win = ad_alloc(sizeof *win);
    if (win) {
        memset(win->lanes, 0, sizeof win->lanes);
        for (size_t k = 0; k < WINDOW * GROUP; k++)
            win->val[k] = -0.0;
    }
    return win;
}

/* The highest ID among the group's outputs out[0..B). */
static inline uint32_t group_top(const ad_real *out, size_t B)
{
    uint32_t top = 0;
    for (size_t b = 0; b < B; b++)
        top = out[b].id > top ? out[b].id : top;
    return top;
}

/* The window below top, the group's highest output (none when every
 * output is an input or a constant): at most WINDOW IDs, all in top's
 * chunk, so that its records are one array.  Nothing is staged in it yet. */
AD_INLINE void window_open(window_at *w, const records *t, uint32_t top)
{
    w->wlo = UINT32_MAX;
    w->wkept = 0;
    if (top < t->first)
        return;
    size_t k = top - t->first, in_chunk = k & (AD_CHUNK - 1);
    size_t below = in_chunk < WINDOW - 1 ? in_chunk : WINDOW - 1;
    w->whi = top;
    w->wlo = top - (uint32_t)below;
    w->wrec = record_at(t, w->wlo);
    w->wmin = below + 1;
}

AD_INLINE void window_stage(window_at *w, size_t k, const double *z, double wt, unsigned M,
                            const size_t L)
{
    w->wmin = k < w->wmin ? k : w->wmin;
    w->win->lanes[k] |= (uint16_t)M;
    lanes_add(w->win->val + k * L, z, wt, M, L);
}

AD_INLINE void window_clear(window_at *w, size_t k, const size_t L)
{
    w->win->lanes[k] = 0;
    cell_clear(w->win->val + k * L, L);
}

/* Where the group reached id, at or above wlo (none if it did not). */
AD_INLINE cell window_cell(const window_at *w, uint32_t id, const size_t L)
{
    size_t k = id - w->wlo;
    return id <= w->whi && w->win->lanes[k] ? (cell){w->win->val + k * L, w->win->lanes[k]}
                                            : (cell){NULL, 0};
}

/* ---- prefetching for the group PREFETCH_AHEAD on ----
 *
 * The tape was written long before and has left the caches, and a group
 * reads its window downwards, one dependent step at a time, so a record
 * that misses the cache holds up the walk.  So each step of the walk also
 * asks for the record as far below the top of the group PREFETCH_AHEAD
 * groups on: as many of its records as this group walks (neighbouring rows
 * usually reach about as far), one prefetch a step.  Spread over the walk,
 * not issued as a burst before it, the prefetches never make the core wait
 * for its line fill buffers.  The address is an integer, never read
 * through, so one below a chunk's start is harmless: a prefetch does not
 * fault. */
#define PREFETCH_AHEAD 4

AD_INLINE void window_prefetch(const window_at *w, size_t k)
{
    AD_PREFETCH(w->ahead - (w->whi - w->wlo + 1 - k) * sizeof(ad__record));
}

/* w->ahead for the group of L outputs from out[from] on, of m: just above
 * its top record, or, when there is none, the end of the window, whose
 * lines the cache has. */
static void window_aim(window_at *w, const records *t, const ad_real *out, size_t from, size_t m,
                       size_t L)
{
    uint32_t top = from < m ? group_top(out + from, m - from < L ? m - from : L) : 0;
    w->ahead = top >= t->first ? (uintptr_t)(record_at(t, top) + 1) : (uintptr_t)(w->win + 1);
}

#endif
