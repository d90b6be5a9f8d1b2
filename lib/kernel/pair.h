/* dualrev internal: two doubles as one SSE2 register.
 *
 * Compilers do not pair the lanes of the short loops below on their own
 * (two Jacobian rows, a 10-element column), so the kernels write the pairs
 * out where GCC and Clang give vector types; AD_PAIRS says they can.
 * Elsewhere they fall back to a lane at a time, with the same operations
 * on each element in the same order. */
#ifndef DUALREV_PAIR_H
#define DUALREV_PAIR_H

#if defined(__GNUC__) || defined(__clang__)
#define AD_PAIRS 1
/* At a 16-byte aligned address (the cotangent array is 64-byte aligned). */
typedef double ad_pair __attribute__((vector_size(16)));
/* At any double's address, and may stand for doubles stored one at a time.
 * A double's alignment: 8 on x86-64, 4 in i386 structs and blocks. */
typedef double ad_pair_u __attribute__((vector_size(16), aligned(_Alignof(double)), may_alias));
/* Lane selectors: all ones where a lane is kept. */
typedef long long ad_pair_mask __attribute__((vector_size(16)));
#endif

#endif
