/* dualrev: the version of the library that was linked. */
#include "dualrev.h"

const char *ad_version(void)
{
    return DUALREV_VERSION_STRING;
}
