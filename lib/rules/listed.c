/* dualrev: the operations that take another path in a recording kept as
 * a program (record.h, AD__TAG_LISTED), because their records alone do
 * not say what they computed: a selection (its comparison), a guard (no
 * record at all), and the inline primitives, which fold their constant
 * elements into their values.  Each tells the listing (modes/listing.h)
 * and then records as it would anywhere else. */
#include "listing.h"

/* Of two constants too, a selection on an active comparison is a record
 * (of no arguments): a replay must select again, and a later operation
 * must find it by its ID. */
ad_real ad__select_listed(int cmp, ad_real l, ad_real r, ad_real t, ad_real f)
{
    int c = ad_cmp_holds(cmp, l.v, r.v);
    double w = c ? 1.0 : 0.0, v = c ? t.v : f.v;
    ad_tape *tp = ad_recording();
    if (!tp || !ad_listing_of(tp) || (!l.id && !r.id && !t.id && !f.id))
        return ad__select(c, t, f);
    ad_listing_expect_selection(tp, cmp, l, r);
    if (t.id || f.id)
        return ad__select(c, t, f);
    ad__cursor *cur = &tp->cursor;
    uint64_t key0 = cur->key0;
    return ad__real_of(v, key0 + ad__push_keys(cur, key0, w, key0, 1.0 - w, AD__OP_SELECT, t.v,
                                               f.v, v));
}

void ad__guard(int cmp, ad_real a, ad_real b, int outcome)
{
    ad_tape *t = ad_recording();
    if (t && (a.id || b.id))
        ad_listing_guard(t, cmp, a, b, outcome);
}

ad_real ad__nary_listed(int which, size_t n, uintptr_t xa, uintptr_t ya, uintptr_t ca)
{
    const ad_real *x = (const ad_real *)xa, *y = (const ad_real *)ya;
    const double *c = (const double *)ca;
    ad_tape *t = ad_recording();
    if (which == AD__LIST_DOT && x == y)
        which = AD__LIST_SQNORM;
    if (t)
        ad_listing_expect(t);
    ad_real r;
    switch (which) {
    case AD__LIST_DOT: r = ad__dot_r(n, x, y); break;
    case AD__LIST_SUM: r = ad__sum_r(n, x); break;
    case AD__LIST_DOT_RD: r = ad__dot_rd(n, x, c); break;
    default: r = ad__sqnorm_r(n, x); break;
    }
    if (t)
        ad_listing_nary(t, r.id, which, n, x, which == AD__LIST_DOT ? y : NULL,
                        which == AD__LIST_DOT_RD ? c : NULL);
    return r;
}
