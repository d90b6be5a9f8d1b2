/* dualrev: status messages. */
#include "dualrev.h"

const char *ad_strerror(ad_status s)
{
    switch (s) {
    case AD_OK: return "success";
    case AD_EINVAL: return "invalid argument (a NULL pointer or a value out of its domain)";
    case AD_ENOMEM: return "out of memory for the tape or the cotangents";
    case AD_ERANGE: return "the recording outgrew the record ID range or the tape limit";
    case AD_ENESTING: return "ad_gradient nested deeper than AD_MAX_NESTING";
    case AD_EFOREIGN: return "the objective returned a value that does not belong to its recording";
    case AD_EBUSY: return "not allowed while a recording is active on this thread";
    case AD_ENOTSUP: return "an external function on the tape has no rule for this sweep (jvp, or second order)";
    }
    return "unknown ad_status";
}
