/* dualrev internal: an ad_csr as it is built (csr.c), and the thread's
 * spare arrays that ad_csr_free keeps for the next one. */
#ifndef DUALREV_CSR_H
#define DUALREV_CSR_H

#include "alloc.h"

typedef struct ad_csr_out {
    ad_csr *J;
    size_t cap;  /* entries' room in J->col and J->val */
} ad_csr_out;

/* J's row pointers for m rows and room for `want` entries, from the
 * thread's spare arrays where they are large enough; 0 without memory. */
AD_HIDDEN int ad_csr_start(ad_csr_out *o, size_t m, size_t want);

/* Room for `need` entries in J->col and J->val; 0 without memory. */
AD_HIDDEN int ad_csr_grow(ad_csr_out *o, size_t need);

/* The same, inline: each group asks, and there usually is room. */
AD_INLINE int ad_csr_room(ad_csr_out *o, size_t need)
{
    return need <= o->cap || ad_csr_grow(o, need);
}

/* J->col and J->val cut to J->nnz entries; 0 without memory. */
AD_HIDDEN int ad_csr_trim(ad_csr_out *o);

#endif
