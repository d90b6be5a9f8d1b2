/* dualrev: a readable listing of a small tape, to look at what was recorded. */
#include <stdio.h>

#include "block.h"

static const char *nary_kind(double kind)
{
    static const char *const names[] = {"linear", "dot", "sqnorm", "prod", "logsumexp"};
    int k = (int)kind;
    return k >= 0 && k < (int)(sizeof names / sizeof *names) ? names[k] : "?";
}

ad_status ad_tape_dump(FILE *out, size_t max_records)
{
    if (!out)
        return AD_EINVAL;
    ad_thread *th = ad_thread_self();
    if (th->depth > 0)
        return AD_EBUSY;
    const ad_tape *t = &th->tapes[0];
    if (t->first == 0 || t->status != AD_OK)
        return AD_EINVAL;
    uint32_t top = ad_tape_top(t);
    fprintf(out, "inputs: IDs 1..%u; records: %u (%zu bytes each)\n",
            t->first - 1, top + 1 - t->first, sizeof(ad__record));
    fprintf(out, "%8s  %8s %14s  %8s %14s\n", "id", "a", "d/da", "b", "d/db");
    for (uint32_t id = t->first; id <= top && id - t->first < max_records; id++) {
        const ad__record *r = ad_tape_record(t, id);
        if (r->b == AD__NARY)
            fprintf(out, "%8u  n-ary (%s): the %u slots above are its arguments\n", id,
                    nary_kind(r->wa), r->a);
        else if (r->b == AD__BLOCK)
            fprintf(out, "%8u  block (%s): %u outputs, %u arguments\n", id, ad_block_of(t, r)->kind->name,
                    r->a, ad_block_of(t, r)->nargs);
        else if (r->b == AD__OUT)
            fprintf(out, "%8u  output %u of the block at %u\n", id, r->a - 1, id - r->a);
        else if (r->b)
            fprintf(out, "%8u  %8u %14.6g  %8u %14.6g\n", id, r->a, r->wa, r->b, r->wb);
        else  /* b = 0 is the constant sink: a one-argument record */
            fprintf(out, "%8u  %8u %14.6g  %8s %14s\n", id, r->a, r->wa, "-", "-");
    }
    return AD_OK;
}
