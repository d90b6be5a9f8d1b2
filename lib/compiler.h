/* dualrev internal: what the library needs of the compiler and the target. */
#ifndef DUALREV_COMPILER_H
#define DUALREV_COMPILER_H

#include <float.h>

#if defined(__GNUC__) || defined(__clang__)
#define AD_HIDDEN __attribute__((visibility("hidden")))
#else
#define AD_HIDDEN
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
