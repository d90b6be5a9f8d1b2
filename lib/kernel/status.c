/* dualrev: status messages, and the NaN a failed call leaves. */
#include <math.h>

#include "status.h"

const char *ad_strerror(ad_status s)
{
    switch (s) {
    case AD_OK: return "success";
    case AD_EINVAL: return "invalid argument (a NULL pointer or a value out of its domain)";
    case AD_ENOMEM: return "out of memory for the tape or the cotangents";
    case AD_ERANGE: return "the recording outgrew the record ID range or the tape limit";
    case AD_ENESTING: return "ad_gradient nested deeper than AD_MAX_NESTING";
    case AD_EFOREIGN: return "a value of another recording (an earlier call, another thread or nesting level) was used";
    case AD_EBUSY: return "not allowed while a recording is active on this thread";
    case AD_ENOTSUP: return "not supported here: a record without a rule for this sweep (an external function without jvp or hvp), or what a nested derivative or a recorded program cannot keep";
    case AD_ENONFINITE: return "a number became Inf or NaN from finite ones (AD_CHECK_FINITE; see ad_last_fault)";
    case AD_ESTRUCTURE: return "the point reaches a pair outside the structure fixed by an earlier call";
    case AD_EBRANCH: return "a comparison the program recorded (ad_lt, ad_le, ad_gt, ad_ge) comes out the other way at this point";
    case AD_ENOTPOSDEF: return "the matrix is not positive definite: its Cholesky factorisation failed (a Newton step needs a shift: ad_cholmod_newton)";
    case AD_ECOMM: return "a communication call failed: an MPI call returned an error (dualrev/mpi.h)";
    case AD_EOVERFLOW: return "a derivative left the double range on its way (a cotangent or tangent overflowed, or a second partial is out of range) and made NaN of results";
    }
    return "unknown ad_status";
}

void ad_fill_nan(double *p, size_t count)
{
    if (p)
        for (size_t i = 0; i < count; i++)
            p[i] = NAN;
}

void ad_fill_nan_reals(ad_real *p, size_t count)
{
    if (p)
        for (size_t i = 0; i < count; i++)
            p[i] = ad_const(NAN);
}
