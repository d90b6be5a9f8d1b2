/* What both drivers ask of dualrev beside the ports: status text, the
 * library's version and the calling thread's tape statistics (ports.h). */
#include "dualrev.h"
#include "ports.h"

const char *gb_strerror(int status)
{
    return ad_strerror((ad_status)status);
}

const char *gb_dualrev_version(void)
{
    return ad_version();
}

void gb_tape_stats(size_t *records, size_t *reserved_bytes)
{
    ad_tape_stats st;
    if (ad_tape_stats_get(&st) != AD_OK) {
        *records = 0;
        *reserved_bytes = 0;
        return;
    }
    *records = st.records;
    *reserved_bytes = st.tape_bytes + st.adjoint_bytes + st.side_bytes + st.driver_bytes;
}
