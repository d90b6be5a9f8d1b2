/* dualrev: the calling thread's agreement hook (collective.h). */
#include "collective.h"

ad_collective ad_set_collective(const ad_collective *c)
{
    ad_thread *th = ad_thread_self();
    ad_collective was = th->collective;
    th->collective = c && c->agree ? *c : (ad_collective){0};
    return was;
}
