/* Nested derivatives written out (prog.c, prog_unnest): a program's OP_NESTR
 * instructions (ad_gradient_r, ad_jvp_r) replaced by plain instructions,
 * the nested program's own and those of its reverse (forward) sweep, so
 * that the oracle differentiates the nested results as it differentiates
 * everything else (README.md, "Nested derivatives"). */
#ifndef FUZZ_NEST_H
#define FUZZ_NEST_H

#include "oracle.h"

/* One nested call, as the library makes it where the program runs. */
typedef struct nest_node {
    int mode, k;         /* OP_NESTR's mode and inputs */
    int depth;           /* 0: in the program; 1: in a nested program */
    int active;          /* an argument is a value of the enclosing recording: replayed */
    int top;             /* the program's instruction it is in (or is) */
    double in[6];        /* x, then v */
    double ref[4];       /* its outputs under the recording (fx, grad; y, jv) */
    double plain[4];     /* ad_gradient's or ad_jvp's at the same point */
    ad_status plain_st;
    int dead_nonfinite;  /* gradient: a record of the nested program that its output does not
                            reach has a partial that is not finite */
    int zero_dir_nonfinite;  /* jvp: a partial that is not finite towards what only the
                                inputs of direction 0 reach */
    int atan2_far;       /* an atan2 of the nested program with max(|a|, |b|) past 2^255
                            or below 2^-255 */
    const prog *sub;     /* the nested program */
} nest_node;

typedef struct nest_info {
    int *map;                /* slot of p: the slot of q that holds it */
    unsigned char *approx;   /* per slot of q: a value of a written-out sweep, which the
                                library computes its own way (to rounding) */
    ad_status status;        /* the recording's (run_recorded): a nested call that failed
                                fails it, and every driver */
    int nnodes, cap;
    nest_node *nodes;
    int bad_value, bad_active;  /* q's double run against the recording: the first slot
                                   of p that differs (value; a nested call's output's
                                   activity), -1: none */
    double bad_got, bad_want;
    int bad_act_got;
} nest_info;

/* q: p with every OP_NESTR written out (nested ones too), its values
 * those of p under a recording, bit for bit (NESTOUT forces a nested
 * call's outputs to the library's). */
void prog_unnest(const prog *p, prog *q, nest_info *ni);
void nest_info_free(nest_info *ni);

/* oracle.c: the first partials of a unary or binary instruction at its
 * operands' values (b: the second slot's, unused otherwise) and result
 * v, with the oracle's conventions: *pa towards slot a (mode 2: 0),
 * *pb towards slot b (mode 0) or slot a (mode 2). */
void oracle_scalar_partials(const insn *in, double a, double b, double v, ld *pa, ld *pb);

/* oracle.c: per slot of the program lin_build builds, a value of a
 * written-out sweep (nest_info.approx), or NULL: lin_build then adds to
 * each partial the error its operands' values bring (their own error,
 * propagated), and takes the class of what such values reach as not
 * predicted where a value or partial on the way is not finite. */
extern const unsigned char *lin_approx;

#endif
