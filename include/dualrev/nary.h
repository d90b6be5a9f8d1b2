/* dualrev: array primitives recorded as one n-ary record.
 *
 * Included by dualrev.h.  A reduction written as a loop of scalar operations
 * leaves a chain of records whose reverse sweep is a chain of dependent
 * memory round trips; as one record, its arguments are independent and the
 * sweep streams over them.  Each primitive writes its partials in the forward
 * pass, two arguments per 24-byte slot, then one header slot. */
#ifndef DUALREV_NARY_H
#define DUALREV_NARY_H

AD__EXTERN_C_BEGIN

static inline ad_real ad__sqnorm_r(size_t n, const ad_real *x);

/* sum_i x[i] y[i].  A dot product of an array with itself is its squared
 * norm, recorded as one: two elements a slot instead of one. */
static inline ad_real ad__dot_r(size_t n, const ad_real *x, const ad_real *y)
{
    if (x == y)
        return ad__sqnorm_r(n, x);
    double v = 0.0;
    ad__slots s = ad__slots_begin();
    for (size_t i = 0; i < n; i++) {
        v += x[i].v * y[i].v;
        ad__slots_check(&s, ad__key(x[i]));
        ad__slots_check(&s, ad__key(y[i]));
        s = ad__slots_put(s, x[i].id, y[i].v, y[i].id, x[i].v);
    }
    return ad__made(v, ad__slots_end(s, AD__NARY_DOT, v));
}

static inline double ad_dot_d(size_t n, const double *x, const double *y)
{
    double v = 0.0;
    for (size_t i = 0; i < n; i++)
        v += x[i] * y[i];
    return v;
}

/* sum_i x[i] */
static inline ad_real ad__sum_r(size_t n, const ad_real *x)
{
    double v = 0.0;
    ad__slots s = ad__slots_begin();
    size_t i = 0;
    for (; i + 1 < n; i += 2) {
        v += x[i].v;
        v += x[i + 1].v;
        ad__slots_check(&s, ad__key(x[i]));
        ad__slots_check(&s, ad__key(x[i + 1]));
        s = ad__slots_put(s, x[i].id, 1.0, x[i + 1].id, 1.0);
    }
    if (i < n) {
        v += x[i].v;
        ad__slots_check(&s, ad__key(x[i]));
        s = ad__slots_put(s, x[i].id, 1.0, 0, 0.0);
    }
    return ad__made(v, ad__slots_end(s, AD__NARY_LINEAR, v));
}

static inline double ad_sum_d(size_t n, const double *x)
{
    double v = 0.0;
    for (size_t i = 0; i < n; i++)
        v += x[i];
    return v;
}

/* sum_i x[i] c[i], c constant: 12 bytes per argument */
static inline ad_real ad__dot_rd(size_t n, const ad_real *x, const double *c)
{
    double v = 0.0;
    ad__slots s = ad__slots_begin();
    size_t i = 0;
    for (; i + 1 < n; i += 2) {
        v += x[i].v * c[i];
        v += x[i + 1].v * c[i + 1];
        ad__slots_check(&s, ad__key(x[i]));
        ad__slots_check(&s, ad__key(x[i + 1]));
        s = ad__slots_put(s, x[i].id, c[i], x[i + 1].id, c[i + 1]);
    }
    if (i < n) {
        v += x[i].v * c[i];
        ad__slots_check(&s, ad__key(x[i]));
        s = ad__slots_put(s, x[i].id, c[i], 0, 0.0);
    }
    return ad__made(v, ad__slots_end(s, AD__NARY_LINEAR, v));
}

/* The primitives' public names: in a program (record.h, AD__TAG_LISTED)
 * each is kept with its constant elements, which the record folds into
 * its value, by an out-of-line call that then records it as above. */
enum { AD__LIST_DOT, AD__LIST_SUM, AD__LIST_DOT_RD, AD__LIST_SQNORM };
AD_API ad_real ad__nary_listed(int which, size_t n, uintptr_t x, uintptr_t y, uintptr_t c);

/* The arrays go out of line as integers: a pointer to const would make
 * gcc's -Wmaybe-uninitialized doubt every array the caller filled in a
 * loop, on the path that never runs outside a program. */
#define AD__ADDR(p) ((uintptr_t)(const void *)(p))

static inline int ad__listing(void)
{
    return ad__listed(ad__tag(ad__active));
}

static inline ad_real ad_dot_r(size_t n, const ad_real *x, const ad_real *y)
{
    if (ad__listing())
        return ad__nary_listed(AD__LIST_DOT, n, AD__ADDR(x), AD__ADDR(y), 0);
    return ad__dot_r(n, x, y);
}

static inline ad_real ad_sum_r(size_t n, const ad_real *x)
{
    if (ad__listing())
        return ad__nary_listed(AD__LIST_SUM, n, AD__ADDR(x), 0, 0);
    return ad__sum_r(n, x);
}

static inline ad_real ad_dot_rd(size_t n, const ad_real *x, const double *c)
{
    if (ad__listing())
        return ad__nary_listed(AD__LIST_DOT_RD, n, AD__ADDR(x), 0, AD__ADDR(c));
    return ad__dot_rd(n, x, c);
}

static inline ad_real ad_sqnorm_r(size_t n, const ad_real *x)
{
    if (ad__listing())
        return ad__nary_listed(AD__LIST_SQNORM, n, AD__ADDR(x), 0, 0);
    return ad__sqnorm_r(n, x);
}

static inline ad_real ad_dot_dr(size_t n, const double *c, const ad_real *x)
{
    return ad_dot_rd(n, x, c);
}

/* sum_i x[i]^2 */
static inline ad_real ad__sqnorm_r(size_t n, const ad_real *x)
{
    double v = 0.0;
    ad__slots s = ad__slots_begin();
    size_t i = 0;
    for (; i + 1 < n; i += 2) {
        v += x[i].v * x[i].v;
        v += x[i + 1].v * x[i + 1].v;
        ad__slots_check(&s, ad__key(x[i]));
        ad__slots_check(&s, ad__key(x[i + 1]));
        s = ad__slots_put(s, x[i].id, 2.0 * x[i].v, x[i + 1].id, 2.0 * x[i + 1].v);
    }
    if (i < n) {
        v += x[i].v * x[i].v;
        ad__slots_check(&s, ad__key(x[i]));
        s = ad__slots_put(s, x[i].id, 2.0 * x[i].v, 0, 0.0);
    }
    return ad__made(v, ad__slots_end(s, AD__NARY_SQNORM, v));
}

static inline double ad_sqnorm_d(size_t n, const double *x)
{
    return ad_dot_d(n, x, x);
}

/* prod_i x[i].  The partials are products of all the other elements, formed
 * as prefix x suffix products: exact where an element is 0, no division. */
AD_API ad_real ad_prod_r(size_t n, const ad_real *x);

static inline double ad_prod_d(size_t n, const double *x)
{
    double v = 1.0;
    for (size_t i = 0; i < n; i++)
        v *= x[i];
    return v;
}

/* log sum_i exp(x[i]), shifted by the largest element so that it is finite
 * for large inputs; the partials are the softmax.  Conventions for empty
 * and infinite inputs are in docs/conventions.md. */
AD_API ad_real ad_logsumexp_r(size_t n, const ad_real *x);
AD_API double ad_logsumexp_d(size_t n, const double *x);

/* y = A x with A a constant m x n row-major matrix: one dot record per
 * output, 12 bytes per argument. */
static inline void ad_matvec_r(size_t m, size_t n, const double *A, const ad_real *x, ad_real *y)
{
    for (size_t j = 0; j < m; j++)
        y[j] = ad_dot_dr(n, A + j * n, x);
}

static inline void ad_matvec_d(size_t m, size_t n, const double *A, const double *x, double *y)
{
    for (size_t j = 0; j < m; j++)
        y[j] = ad_dot_d(n, A + j * n, x);
}

/* y = A x with A an ad_real m x n row-major matrix: one dot record per
 * output, 24 bytes per pair of arguments. */
static inline void ad_matvec_rr(size_t m, size_t n, const ad_real *A, const ad_real *x, ad_real *y)
{
    for (size_t j = 0; j < m; j++)
        y[j] = ad_dot_r(n, A + j * n, x);
}

/* y[i] += a x[i], a constant: one two-argument record per output (the
 * scalar form, a multiply then an add, takes two). */
static inline void ad_axpy_r(size_t n, double a, const ad_real *x, ad_real *y)
{
    for (size_t i = 0; i < n; i++) {
        double v = a * x[i].v + y[i].v;
        if (x[i].id || ad__listed(y[i].tag))
            y[i] = ad__rec2(v, x[i], a, y[i], 1.0, AD__OP_AXPY);
        else
            y[i].v = v;
    }
}

static inline void ad_axpy_d(size_t n, double a, const double *x, double *y)
{
    for (size_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

AD__EXTERN_C_END

#endif
