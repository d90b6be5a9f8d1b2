/* The fuzzer's programs: a DAG of instructions over numbered slots.
 *
 * Slots 0..n-1 are the inputs; each instruction writes nout consecutive
 * slots from `out`, reading only lower slots, so slot order is a
 * topological order.  The same program runs on double and on ad_real
 * (interp.h), and the oracle (oracle.c) linearises it at the double run's
 * values. */
#ifndef FUZZ_PROG_H
#define FUZZ_PROG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <dualrev.h>

enum {
    OP_CONST, OP_BRANCH, OP_NEST, OP_LOOP, OP_STEPK, OP_LOOPOUT, OP_NESTR, OP_NESTIN, OP_NESTOUT,
    /* unary */
    OP_NEG, OP_SQRT, OP_CBRT, OP_EXP, OP_EXPM1, OP_LOG, OP_LOG1P, OP_LOG2, OP_LOG10,
    OP_SIN, OP_COS, OP_TAN, OP_ASIN, OP_ACOS, OP_ATAN, OP_SINH, OP_COSH, OP_TANH,
    OP_ASINH, OP_ACOSH, OP_ATANH, OP_FABS, OP_ERF, OP_ERFC, OP_LGAMMA, OP_TGAMMA,
    /* binary: mode 0 slot-slot, 1 slot-constant, 2 constant-slot */
    OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_POW, OP_ATAN2, OP_HYPOT, OP_FMIN, OP_FMAX,
    /* array primitives over the args pool */
    OP_SUM, OP_DOT, OP_DOT_RD, OP_SQNORM, OP_PROD, OP_LSE, OP_MATVEC, OP_MATVEC_RR,
    OP_AXPY, OP_MAT_VEC, OP_MAT_SQNORM, OP_EXTERNAL,
    /* recorded-matrix products and maps (generated from a stream of their own) */
    OP_MAT_MUL, OP_MAT_MAP,
    /* ad_external_collective (generated from a stream of its own) */
    OP_COLLECTIVE,
    OP_COUNT
};
#define OP_FIRST_UNARY OP_NEG
#define OP_FIRST_BINARY OP_ADD
#define OP_FIRST_ARRAY OP_SUM

/* Field use by op (len = array length, rows = matrix rows / external outputs):
 *   CONST     k
 *   BRANCH    out = a cmp b ? slot c : slot d, the comparison through a guard (ad_lt, ...:
 *             a recorded program keeps it): mode 0 ad_lt(a, b), 1 ad_gt(b, a) (both
 *             a < b), 2 ad_le(a, b), 3 ad_ge(b, a) (both a <= b); branch_holds
 *   NEST      ad_gradient of subs[sub] at args[arg..arg+len); d < 0: fx, else grad[d]
 *   LOOP      ad_checkpointed_loop: state0 = args[arg..+len), params = args[arg+len..+rows),
 *             `steps` steps of subs[sub] (inputs: state, then params; outputs: the
 *             next state), `snaps` snapshots; len outputs, stateN
 *   NESTR     nested derivative of subs[sub], an objective of len inputs, x = args[arg..+len):
 *             mode 0: ad_gradient_r, outputs fx, grad[0..len) (1 + len);
 *             mode 1: ad_jvp_r along v = args[arg+len..+len), outputs y, jv (2)
 *   NESTIN    (in a program written out, prog_unnest) input of a nested call: a copy of
 *             slot a (the library's inner input IDs are its own)
 *   NESTOUT   (written out) a copy of slot a whose value is forced to k, what the library
 *             computed (mode 0: a nested call's output d of node sub; mode 1: a partial of
 *             the written-out sweep at a point where it takes its convention k: its
 *             derivative is not predicted; mode 2: an intermediate of a partial's
 *             formula, which a rounded result makes inexact, as the library has it)
 *   STEPK     (in a step program) a constant of step k: stepk_value(k, k)
 *   LOOPOUT   (in a program written out, prog_unroll) output i of a loop: a copy of
 *             slot a (next state i of the last step); args[arg..+len) are the loop's
 *             arguments and `steps` its steps, for the oracle: the library makes each
 *             output of a recorded loop a record, whatever the step computes; sub:
 *             the loop instance (unroll_span.loop)
 *   unary     a;  binary: a, b, k and mode
 *   SUM SQNORM PROD LSE   args[arg..+len)
 *   DOT       x = args[arg..+len), y = args[arg+len..+len); mode 1: y is x (same array)
 *   DOT_RD    x = args, c = consts[cst..+len); mode 1: ad_dot(c, x), ad_dot_dr
 *   MATVEC    A = consts[cst..+rows*len), x = args: rows outputs
 *   MATVEC_RR A = args[arg..+rows*len), x = args[arg+rows*len..+len)
 *   AXPY      y += k x, x = args[arg..+len), y = args[arg+len..+len); mode 1: x is y.
 *   MAT_VEC   A = args[arg..+rows*len) recorded; mode 0: x = args after A;
 *             mode 1: x = consts[cst..+len); mode 2: two products, x1, x2 after A
 *   MAT_SQNORM as MAT_VEC modes 0 and 1, one output
 *   EXTERNAL  x = args, rows outputs; sub 0: rule with jvp, 1: without
 *   MAT_MUL   C = A B (+ bias), A rows x len, B len x cols (ad_mat_mul); mode bits:
 *             kind (mode & 3): 0 A, B recorded (args); 1 A recorded, B wrapped (consts);
 *             2 A wrapped, B recorded; 3 C = A A, one recorded handle both sides
 *             (rows = len = cols); 4: a bias of rows entries, 8: the bias a double
 *             array (consts, _rd; else args, _rr); stage (mode >> 4 & 3): 0 C alone,
 *             1 then D = C C (rows = cols), 2 then D = A C (len = rows), 3 then
 *             D = map sub of C.  args: A's entries (kinds 0, 1, 3), B's (0, 2), the
 *             bias; consts: A's (2), B's (1), the bias.  Outputs C, then D
 *   MAT_MAP   C = map sub of A, A = args[arg..+rows*len) recorded (ad_mat_map):
 *             sub < AD_MAP_COUNT an ad_map_op, MAP_USER (MAP_USER_NOD2F) the
 *             user's function with (without) d2f; rows*len outputs
 *   COLLECTIVE ad_external_collective, active set, x = args[arg..+len) (len >= 0, maybe all
 *             constant), rows outputs (rows >= 0: a node of no outputs is a record too);
 *             the rule's coefficient k, in a ctx copied into the record:
 *             y_j = k x_a x_b + sin(x_c) as EXTERNAL's (len > 0), y_j = k (j + 1) (len 0) */
typedef struct insn {
    int op, mode;
    int a, b, c, d;
    double k;
    int arg, len, rows, cst, sub;
    int out, nout;
    int steps, snaps;   /* LOOP */
    int cols;           /* MAT_MUL: B's columns */
} insn;

/* OP_MAT_MAP's user functions (interp.c): f = sin x + a x^2 with a =
 * fuzz_map_scale (the ctx), f' = cos x + 2 a x, f'' = 2 a - sin x. */
#define MAP_USER AD_MAP_COUNT
#define MAP_USER_NOD2F (AD_MAP_COUNT + 1)
extern double fuzz_map_scale;
extern const ad_map_fn fuzz_map_fn, fuzz_map_fn_nod2f;

typedef struct prog {
    int n, m, nslots;
    int ncode, nargs, nconsts, nsubs;
    insn *code;
    int *args;
    double *consts;
    int *outs;          /* m output slots */
    struct prog *subs;  /* nested objectives (one output each), loop steps */
    double *x, *v, *w;  /* the point, a tangent direction (n), output weights (m) */
} prog;

/* Bit masks over inputs and outputs: n <= 32, m <= 32 (the generator keeps
 * n <= 6, m <= 4). */

/* gen.c */
typedef struct rng { uint64_t s; } rng;
uint64_t rng_next(rng *r);
double rng_unit(rng *r);
int rng_int(rng *r, int n);
void gen_program(prog *p, uint64_t seed, int size_hint);
double gen_input(rng *r);

/* prog.c */
void prog_free(prog *p);
/* Whether a BRANCH of this mode takes slot c at operand values a, b. */
int branch_holds(int mode, double a, double b);
/* a with room for need elements of size bytes (*cap of them now, doubling
 * from 16), as realloc returns it. */
void *prog_grow(void *a, int *cap, int need, size_t size);
void prog_copy(prog *dst, const prog *src);
void prog_print(const prog *p, FILE *out);
int prog_delete(prog *p, int j);
const char *op_name(int op);
int prog_has_external(const prog *p, int *without_jvp);
int prog_has_loop(const prog *p);
/* A MAT_MUL or MAT_MAP (or, with nod2f, one mapping by the user's function
 * without d2f). */
int prog_has_matop(const prog *p, int nod2f);
int insn_map_op(const insn *in);  /* the map a MAT_MAP or a MAT_MUL's stage 3 applies; -1 none */
int prog_nestr_outs(const insn *in);  /* a NESTR's outputs: 1 + len, or 2 */
int prog_nargs(const insn *in);
int prog_nconsts(const insn *in);
double stepk_value(double k0, long k);
/* The program with every loop written out (nested ones too): the same
 * values, bit for bit, from plain instructions.  info (may be NULL):
 * map[s], the slot of q that holds slot s of p; and a span for every
 * step written out (nested ones inside their step's): the slots
 * [lo, hi) of q it made, the slots of q that hold its next state, the
 * loop instruction of p it belongs to. */
typedef struct unroll_span {
    int lo, hi, top, nouts, nins;
    int *outs, *ins;       /* its next state; its state and params */
    int step, loop, depth; /* step k of loop instance `loop`, nested depth loops deep */
} unroll_span;
typedef struct unroll_info {
    int *map;
    int nspans, cap, nloops;
    unroll_span *spans;
} unroll_info;
void prog_unroll(const prog *p, prog *q, unroll_info *info);
void unroll_info_free(unroll_info *info);
/* The slots an instruction's results are computed from, as a recording
 * sees them (a branch: the slot it takes, at the values val); into buf
 * (prog_nargs(in) + 2 entries), their count. */
int insn_reads(const prog *p, const insn *in, const double *val, int *buf);

/* interp.c: the program on double, and the drivers' ad_function/ad_objective */
void run_double(const prog *p, const double *x, double *slots);
void run_double_step(const prog *p, double *slots, int j);
/* p run on ad_real under a recording (ad_linearize) with its inputs at x:
 * every slot's value (vals, p->nslots), and whether the library made it a
 * value of the recording (active: an ID; may be NULL).  The recording's
 * status (a nested call that failed fails it). */
ad_status run_recorded(const prog *p, const double *x, double *vals, unsigned char *active);
int prog_has_nestr(const prog *p);
extern long fuzz_step_k;    /* the step a step program runs (OP_STEPK) */
extern long fuzz_step_evals;  /* step programs run on ad_real (the library's calls) */
extern int fuzz_interp_errors;
void fuzz_function(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx);
ad_real fuzz_objective(const ad_real *x, size_t n, void *ctx);
extern const ad_rule fuzz_rule_jvp, fuzz_rule_nojvp, fuzz_rule_coll;
/* A program holds an OP_COLLECTIVE (its recordings are collective ones). */
int prog_has_collective(const prog *p);
extern double fuzz_ext_scale;

#endif
