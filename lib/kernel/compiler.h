/* dualrev internal: what the library needs of the compiler and the target. */
#ifndef DUALREV_COMPILER_H
#define DUALREV_COMPILER_H

#include <float.h>

/* Kernels written once and specialised by the compiler for constant
 * arguments (lane counts, the sparse store) must really be inlined.  A
 * prefetch of an address never faults; without the builtin it is nothing. */
#if defined(__GNUC__) || defined(__clang__)
#define AD_HIDDEN __attribute__((visibility("hidden")))
#define AD_INLINE static inline __attribute__((always_inline))
#define AD_NOINLINE __attribute__((noinline))
#define AD_PREFETCH(p) __builtin_prefetch((const void *)(p))
#define AD_PREFETCH_W(p) __builtin_prefetch((const void *)(p), 1)
#else
#define AD_HIDDEN
#define AD_INLINE static inline
#define AD_NOINLINE
#define AD_PREFETCH(p) ((void)(p))
#define AD_PREFETCH_W(p) ((void)(p))
#endif

/* The library relies on IEEE semantics for NaN, Inf and signed zeros and on
 * evaluation in the precision of double: the public header's opt-out
 * (AD_ALLOW_FAST_MATH) does not apply here. */
#if defined(__FAST_MATH__) || (defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__)
#error "dualrev: the library cannot be built with -ffast-math or -ffinite-math-only"
#endif
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "dualrev: double arithmetic must be evaluated in double (FLT_EVAL_METHOD 0); on i386 use -msse2 -mfpmath=sse"
#endif

#endif
