/* dualrev: array primitives recorded as one n-ary record.
 *
 * Included by dualrev.h.  A reduction written as a loop of scalar operations
 * leaves a chain of records whose reverse sweep is a chain of dependent
 * memory round trips; as one record, its arguments are independent and the
 * sweep streams over them.  Each primitive writes its partials in the forward
 * pass, two arguments per 24-byte slot, then one header slot. */
#ifndef DUALREV_NARY_H
#define DUALREV_NARY_H

/* sum_i x[i] y[i] */
static inline ad_real ad_dot_r(size_t n, const ad_real *x, const ad_real *y)
{
    double v = 0.0;
    ad__slots s = ad__slots_begin();
    for (size_t i = 0; i < n; i++) {
        v += x[i].v * y[i].v;
        s = ad__slots_put(s, x[i].id, y[i].v, y[i].id, x[i].v);
    }
    ad_real r = {v, ad__slots_end(s)};
    return r;
}

static inline double ad_dot_d(size_t n, const double *x, const double *y)
{
    double v = 0.0;
    for (size_t i = 0; i < n; i++)
        v += x[i] * y[i];
    return v;
}

/* sum_i x[i] */
static inline ad_real ad_sum_r(size_t n, const ad_real *x)
{
    double v = 0.0;
    ad__slots s = ad__slots_begin();
    size_t i = 0;
    for (; i + 1 < n; i += 2) {
        v += x[i].v;
        v += x[i + 1].v;
        s = ad__slots_put(s, x[i].id, 1.0, x[i + 1].id, 1.0);
    }
    if (i < n) {
        v += x[i].v;
        s = ad__slots_put(s, x[i].id, 1.0, 0, 0.0);
    }
    ad_real r = {v, ad__slots_end(s)};
    return r;
}

static inline double ad_sum_d(size_t n, const double *x)
{
    double v = 0.0;
    for (size_t i = 0; i < n; i++)
        v += x[i];
    return v;
}

#endif
