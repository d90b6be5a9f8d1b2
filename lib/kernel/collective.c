/* dualrev: the calling thread's agreement hook (collective.h). */
#include "collective.h"

static _Thread_local ad_collective hook;

ad_collective ad_set_collective(const ad_collective *c)
{
    ad_collective was = hook;
    hook = c && c->agree ? *c : (ad_collective){0};
    return was;
}

int ad_collective_on(void)
{
    return hook.agree != NULL;
}

ad_status ad_agree(ad_status s)
{
    return hook.agree ? hook.agree(hook.ctx, s) : s;
}
