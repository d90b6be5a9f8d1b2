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

typedef struct report {
    int nfail, nunknown;            /* failures, and those of no known class */
    failure f[FUZZ_KEEP];           /* the first failures, unknown ones first */
    long checked, range, unsure, second_skipped;
    long overflow;                  /* AD_EOVERFLOW statuses, where the oracle allows them */
} report;

void check_program(const prog *p, report *r);

/* known.c */
typedef struct check_ctx check_ctx;
const char *known_defect(const check_ctx *c, const failure *f);
int known_count(void);
const char *known_name(int k);
const char *known_why(int k);

#endif
