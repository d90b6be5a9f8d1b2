/* L2-regularised logistic regression, written once for two number types.
 *
 * Include this file with T defined as the number type (double or ad_real)
 * and NAME(id) defined to give each function a per-type name; both are
 * undefined again at the end, so the next instantiation starts clean:
 *
 *     #define T double
 *     #define NAME(id) id##_double
 *     #include "logistic_objective.h"
 *
 *     #define T ad_real
 *     #define NAME(id) id##_ad
 *     #include "logistic_objective.h"
 *
 * The bodies use only dualrev's generic operations, which return a plain
 * double and record nothing when every argument is a plain number, so the
 * double instantiation costs what hand-written double code would.  Data (the
 * samples and labels) stay double in both: nothing is differentiated with
 * respect to them, and mixed ad_real-double operations record one argument.
 *
 * The parameter vector w has features + 1 entries: one weight per feature,
 * then the bias. */

#ifndef LOGISTIC_OBJECTIVE_DATA
#define LOGISTIC_OBJECTIVE_DATA

#include <assert.h>
#include <stddef.h>

struct logistic_data {
    size_t samples, features;
    const double *x;  /* samples x features, row-major */
    const double *y;  /* labels, -1 or +1 */
    double lambda;    /* L2 weight; the bias is not penalised, so that a
                         shifted class balance costs nothing */
};

#endif

#if !defined(T) || !defined(NAME)
#error "define T and NAME(id) before including logistic_objective.h"
#endif

/* The linear score w.x_i + b of sample i; its sign is the predicted label. */
static T NAME(logistic_score)(const T *w, const struct logistic_data *d, size_t i)
{
    const double *xi = d->x + i * d->features;
    T z = w[d->features];
    for (size_t j = 0; j < d->features; j++)
        z = ad_add(z, ad_mul(w[j], xi[j]));
    return z;
}

/* log(1 + e^t) as max(t, 0) + log1p(e^-|t|): e^-|t| never overflows, and
 * log1p keeps the tail accurate where 1 + e^-|t| would round to 1.  At t = 0
 * dualrev's conventions (fmax gives each tied argument 1/2, fabs has slope 0)
 * add up to 1/2, the true derivative there, so the kink costs nothing. */
static T NAME(logistic_softplus)(T t)
{
    return ad_add(ad_fmax(t, 0.0), ad_log1p(ad_exp(ad_neg(ad_fabs(t)))));
}

/* The mean logistic loss plus (lambda/2)|w|^2.  Its signature is that of an
 * ad_objective, so the ad_real instantiation goes straight to ad_gradient. */
static T NAME(logistic_objective)(const T *w, size_t n, void *ctx)
{
    const struct logistic_data *d = ctx;
    assert(n == d->features + 1);
    (void)n;

    T loss = AD_CONST(T, 0.0);
    for (size_t i = 0; i < d->samples; i++) {
        T margin = ad_mul(NAME(logistic_score)(w, d, i), d->y[i]);
        loss = ad_add(loss, NAME(logistic_softplus)(ad_neg(margin)));
    }

    T norm2 = AD_CONST(T, 0.0);
    for (size_t j = 0; j < d->features; j++)
        norm2 = ad_add(norm2, ad_mul(w[j], w[j]));

    return ad_add(ad_div(loss, (double)d->samples), ad_mul(norm2, 0.5 * d->lambda));
}

#undef T
#undef NAME
