/* dualrev: one recording of a function, on a given tape.
 *
 * Interleave (inputs take IDs 1..n; section 8 of the paper), run f with the
 * tape active, restore the caller's tape, and check what f returned.  Every
 * entry point (gradient, JVP, VJP, Jacobians, linearize) records this way. */
#include <math.h>

#include "check.h"
#include "collective.h"
#include "listing.h"
#include "program.h"
#include "recording.h"
#include "second.h"
#include "tape.h"

ad_tape *ad_thread_tape(void)
{
    ad_thread *th = ad_thread_self();
    return th->depth < AD_MAX_NESTING ? &th->tapes[th->depth] : NULL;
}

static ad_status prepare_outputs(ad_tape *t, size_t m)
{
    ad_status s = ad_reserve((void **)&t->outputs, &t->outputs_cap, m, sizeof *t->outputs);
    if (s != AD_OK)
        return s;
    /* An output f leaves unwritten reads as NaN, not as stale data. */
    for (size_t j = 0; j < m; j++)
        t->outputs[j] = ad_const(NAN);
    return AD_OK;
}

/* The recording's status once f has returned. */
static ad_status ended(const ad_tape *t, size_t m)
{
    if (t->status != AD_OK)
        return t->status;
    /* An output from another recording (or a stale ID) is refused, as an
     * argument would have been (inline: a call here shows on small
     * gradients). */
    const ad__cursor *c = &t->cursor;
    for (size_t j = 0; j < m; j++)
        if (ad__alien(ad__key(t->outputs[j]), c->key0, c->next))
            return AD_EFOREIGN;
    return AD_OK;
}

ad_status ad_record(ad_tape *t, ad_function f, void *ctx, size_t n, const double *x, size_t m,
                    unsigned modes_on)
{
    ad_thread *th = ad_thread_self();
    if (th->depth >= AD_MAX_NESTING)  /* t is then NULL, from ad_thread_tape */
        return AD_ENESTING;
    /* Checks first: they may refuse a record the others would keep. */
    const ad_mode *modes[AD_MODES];
    int nmodes = 0;
    ad_checks *ck = ad_checks_of(th);
    if (ck->flags)
        modes[nmodes++] = &ad_check_mode;
    if (modes_on & AD_RECORD_SECOND)
        modes[nmodes++] = &ad_second_mode;
    else if (modes_on & AD_RECORD_PROGRAM)
        modes[nmodes++] = &ad_program_mode;
    else if (modes_on & AD_RECORD_LISTING)
        modes[nmodes++] = &ad_listing_mode;
    ad_status s = ad_tape_begin(t, th, n, modes, nmodes);
    if (s == AD_OK) {
        ad_checks_begin(ck, t, th->depth);
        s = prepare_outputs(t, m);
    }
    if ((s = ad_agree_on(th, s)) != AD_OK)
        return s;
    if (th->collective.agree)
        t->traits |= AD_COLLECTIVE_TAPE;
    for (size_t i = 0; i < n; i++)
        t->inputs[i].v = x[i];
    ad__cursor *outer = ad__active;
    const char *label = ck->label;  /* an ad_where label f sets ends with f */
    ad__active = &t->cursor;
    th->depth++;
    f(t->inputs, n, t->outputs, m, ctx);
    th->depth--;
    ad__active = outer;
    ck->label = label;
    return ad_agree_on(th, ended(t, m));
}

typedef struct scalar {
    ad_objective f;
    void *ctx;
} scalar;

static void as_function(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const scalar *s = ctx;
    (void)m;
    y[0] = s->f(x, n, s->ctx);
}

ad_status ad_record_objective(ad_tape *t, ad_objective f, void *ctx, size_t n, const double *x,
                              unsigned modes)
{
    scalar call = {f, ctx};
    return ad_record(t, as_function, &call, n, x, 1, modes);
}
