/* dualrev internal: one ID's cell in the staged resolve (sparse_rows.c):
 * L cotangents side by side, one lane per row of the group, in the window
 * or in the store alike.  A row's lane gets exactly the operations of a
 * resolve of that row alone, so rows resolved together give the values
 * each would give by itself.  Inlined with L constant. */
#ifndef DUALREV_SPARSE_CELL_H
#define DUALREV_SPARSE_CELL_H

#include "pair.h"
#include "sparse_rows.h"

/* Where the group reached an ID: its cotangents and lanes (v NULL if none). */
typedef struct cell {
    const double *v;
    unsigned lanes;
} cell;

/* A cell starts at -0 in every lane, the identity of addition (-0 + x is x
 * for every x, -0 and NaN included), so a lane's first contribution is its
 * value exactly, as in a resolve of that row alone: +0 would turn a first
 * -0 into +0. */
AD_INLINE void cell_clear(double *v, const size_t L)
{
#ifdef AD_PAIRS
    if (L == 2) {  /* one store, which the cell's first load can take from */
        *(ad_pair_u *)v = (ad_pair_u){-0.0, -0.0};
        return;
    }
#endif
    for (size_t l = 0; l < L; l++)
        v[l] = -0.0;
}

/* v[l] += z[l] * w for the lanes l in M; the other lanes are left alone,
 * so each row gets exactly the operations of a resolve of its own: a lane
 * outside M holds -0 in z, and 0 x Inf would be NaN.  A pair is computed
 * whole and, unless both lanes reached the record (the common case, taken
 * first), the lanes outside M put back: one store, which the next load of
 * the cell can take from (two single stores would make it wait for both to
 * reach the cache). */
AD_INLINE void lanes_add(double *v, const double *z, double w, unsigned M, const size_t L)
{
#ifdef AD_PAIRS
    if (L == 2) {
        static const ad_pair_mask keep[4] = {{0, 0}, {-1, 0}, {0, -1}, {-1, -1}};
        ad_pair_u old = *(ad_pair_u *)v, sum = old + *(const ad_pair_u *)z * (ad_pair_u){w, w};
        if (AD__LIKELY(M == 3))
            *(ad_pair_u *)v = sum;
        else
            *(ad_pair_u *)v = (ad_pair_u)(((ad_pair_mask)sum & keep[M]) |
                                          ((ad_pair_mask)old & ~keep[M]));
        return;
    }
#endif
    for (size_t l = 0; l < L; l++)
        if (M >> l & 1)
            v[l] += z[l] * w;
}

#endif
