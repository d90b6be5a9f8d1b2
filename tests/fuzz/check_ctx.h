/* What check.c knows about the program under test, for known.c. */
#ifndef FUZZ_CHECK_CTX_H
#define FUZZ_CHECK_CTX_H

#include "check.h"

struct check_ctx {
    const prog *p;
    const double *val;   /* the double run */
    lin L;
    pass *fe, *re;       /* forward passes seeded with e_i, reverse with e_j */
    pass fv, rw;         /* seeded with v, with w */
    int ext, ext_nojvp;
    int jac_forward;     /* ad_jacobian sweeps forward */
    int over_first;      /* some first-order entry is outside a double sweep's range */
    int allow_over;      /* the driver being checked may fail with AD_EOVERFLOW */
    report *r;
};

/* The mode of the pass behind a failure: 'f'orward, 'r'everse, '2'nd order,
 * or 0 (values, statuses). */
int failure_mode(const check_ctx *c, const failure *f);

#endif
