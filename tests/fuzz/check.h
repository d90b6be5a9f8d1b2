/* Running a program under every driver and comparing with the double run
 * and the oracle. */
#ifndef FUZZ_CHECK_H
#define FUZZ_CHECK_H

#include "oracle.h"

typedef struct failure {
    const char *driver;  /* "ad_gradient", ..., or "cross-driver" */
    const char *kind;    /* status, value-bits, class, value, structure, zero-sign, interp */
    int i, j;            /* input and output index (or Hessian row, column) */
    double got;
    ld want, tol;
    const char *known;   /* the known-defect class it belongs to, or NULL */
} failure;

#define FUZZ_KEEP 16
#define CROSS_COUNTS 13
#define PROG_COUNTS 12
#define HOOK_COUNTS 24

typedef struct report {
    int nfail, nunknown;            /* failures, and those of no known class */
    failure f[FUZZ_KEEP];           /* the first failures, unknown ones first */
    long checked, range, unsure, second_skipped;
    long overflow;                  /* AD_EOVERFLOW statuses, where the oracle allows them */
    long loops;                     /* checkpointed loops recorded (top level) */
    long loop_compared, loop_excused;  /* entries compared with the loop written out; not
                                          compared (outside an unscaled sweep's range,
                                          class order-dependent, AD_EOVERFLOW) */
    long cross[CROSS_COUNTS];       /* cross.c's counts (cross_summary) */
    long nest_programs, nest_nodes, nest_replayed;  /* programs with nested calls; the calls
                                                       (nested ones too), and those replayed */
    long nest_failed;               /* programs whose recording a nested call failed */
    long nest_unsure;               /* nested calls' outputs that differ from ad_gradient's
                                       where the oracle bounds no difference (out of an
                                       unscaled sweep's range, a class it does not predict) */
    long prog[PROG_COUNTS];         /* programs.c's counts (programs_summary) */
    long hook[HOOK_COUNTS];         /* cross.c's collective-hook counts (hook_summary) */
} report;

void check_program(const prog *p, report *r);

/* known.c */
typedef struct check_ctx check_ctx;
const char *known_defect(const check_ctx *c, const failure *f);
const char *known_defect_among(const check_ctx *c, const failure *f, const char *const *names,
                               int count);
int known_count(void);
int known_is_bug(const char *name);  /* a reported library bug: still a failure */
const char *known_name(int k);
const char *known_why(int k);

/* cross.c: ad_hessian against ad_sparse_hessian, and ad_sparse_hessian_values */
void cross_hessians(check_ctx *c);
void cross_summary(const long *counts);
/* cross.c: every driver with a trivial ad_set_collective hook against none */
void hook_checks(check_ctx *c);
void hook_summary(const long *counts);
extern int hook_every;  /* --hook N: the seeds divisible by N (0: none; default 2) */
extern int hook_this;   /* this program's seed is one of them (main.c sets it) */

/* programs.c: recorded programs (ad_program_record), replayed at x and near it */
void program_checks(check_ctx *c);
void programs_summary(const long *counts);
extern int program_every;  /* --programs N: the seeds divisible by N (0: none; default 1) */
extern int program_this;   /* this program's seed is one of them (main.c sets it) */
extern const double *program_point_values;  /* known.c: f's values where a replay is compared */

/* alloc.c: allocation failure at every count (--alloc) */
int alloc_campaign(const prog *p, uint64_t seed, uint64_t turn, int verbose);
int alloc_summary(void);  /* 1: a leak found at the end */

#endif
