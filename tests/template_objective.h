/* One objective body, compiled twice by test_structure.c: with REAL defined
 * as double and as ad_real, and NAME naming the result.  It mixes int, float
 * and double constants, and branches on a value. */
static REAL NAME(REAL x, REAL y)
{
    REAL s = ad_add(ad_mul(x, y), ad_sin(x));
    REAL t = ad_div(ad_exp(ad_mul(-0.5, ad_mul(y, y))), ad_add(2, ad_cos(y)));
    if (ad_value(x) > 0)
        s = ad_add(s, ad_sqrt(x));
    else
        s = ad_sub(s, ad_atan2(x, 1.5f));
    REAL u = ad_fmax(ad_log1p(ad_mul(x, x)), ad_tanh(y));
    REAL terms[3] = {ad_pow(s, 2), ad_mul(ad_add(t, u), ad_hypot(x, 3)), AD_CONST(REAL, 0.25)};
    return ad_sum(3, terms);
}
