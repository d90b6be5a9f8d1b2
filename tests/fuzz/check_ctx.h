/* What check.c knows about the program under test, for known.c. */
#ifndef FUZZ_CHECK_CTX_H
#define FUZZ_CHECK_CTX_H

#include "check.h"
#include "nest.h"

struct check_ctx {
    const prog *p;       /* the program, its loops written out (prog_unroll) */
    const prog *run;     /* the program the drivers run: p, or the one with loops */
    const unroll_info *ui;  /* run's slots in p, the steps written out (NULL: run is p) */
    const nest_info *nest;  /* run's nested calls written out in p (NULL: none) */
    const prog *drive;   /* what cross.c's drivers run: p, or run where p has values
                            forced (nested calls written out) */
    int loop;            /* run records a checkpointed loop: its sweeps are not
                            scaled */
    unsigned char *in_loop;  /* per slot of p: a record of a step's tape (of a recorded
                                loop), 1 if it reaches the step's next state (and that of
                                each step around it), 2 if it does not (computed, not
                                used); 0: not such a record */
    int *maker;              /* per slot of p: the instruction that makes it */
    int *loop_top;           /* per slot with in_loop: its loop's instruction in run */
    unsigned char *top_reached;  /* per instruction of run: a recorded loop whose outputs
                                    output 0 reaches (written out) */
    unsigned char *top_recd;     /* per instruction of run: a recorded loop */
    unsigned char *loop_up;  /* per slot of p: a record that an argument of such a loop
                                reads (directly or not) */
    unsigned char *loop_down;  /* per slot of p: a record that reads (directly or not)
                                  an output of a recorded loop */
    const double *val;   /* the double run */
    lin L;
    pass *fe, *re;       /* forward passes seeded with e_i, reverse with e_j */
    pass fv, rw;         /* seeded with v, with w */
    int ext, ext_nojvp;
    int hook_loop_in_step;  /* cross.c hook_checks: run has a loop in a loop's step */
    int hook_const_loop;  /* run has a loop of constant arguments (or a loop in a step) */
    int hook_interp;     /* an interpreter error (a loop's status) under the hook */
    int coll;            /* a recorded ad_external_collective (OP_COLLECTIVE): the
                            recording is collective, its sweeps run once, in full */
    int nod2f;           /* a recorded ad_mat_map_fn without d2f: second order is AD_ENOTSUP */
    int jac_forward;     /* ad_jacobian sweeps forward */
    int over_first;      /* some first-order entry is outside a double sweep's range */
    int allow_over;      /* the driver being checked may fail with AD_EOVERFLOW */
    report *r;
};

/* check.c: whether second-order entry (i, k) (k < 0: H v's entry i) of
 * P2, along U and V, lies outside the window the oracle checks; and the
 * entry's oracle value t, its error bound E and its tolerance (pairs: the
 * entry summed as edge pushing sums it). */
int second_skipped(const check_ctx *c, int i, int k, const pass *P2, const pass *U,
                   const pass *V);
ld second_bound(const check_ctx *c, const pass *P2, const pass *U, const pass *V, int pairs,
                ld *t, ld *E);

/* The mode of the pass behind a failure: 'f'orward, 'r'everse, '2'nd order,
 * or 0 (values, statuses). */
int failure_mode(const check_ctx *c, const failure *f);

#endif
