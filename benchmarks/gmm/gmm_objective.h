/* The ADBench GMM objective, written once for any number type, in two
 * versions (see gmm.h).
 *
 * Include with T defined as the number type and NAME(id) giving each
 * function a per-type name; both are undefined at the end.  The bodies use
 * only dualrev's generic operations, which on plain doubles return double and
 * record nothing, so the double instantiation is ordinary double code.  The
 * scalar version uses only ad_add, ad_sub, ad_mul, ad_exp, ad_log, ad_value
 * and AD_CONST, so that C++ can include it with those defined for ADOL-C's
 * adouble (GMM_OBJECTIVE_SCALAR_ONLY leaves the primitive version out).
 *
 * Definition (/work/shared/adbench/README.md, "GMM"):
 *   t_ik = alpha_k + sum_j q_kj - 0.5 |Q_k (x_i - mu_k)|^2
 *   f = -n d/2 log(2 PI) + sum_i lse_k(t_ik) - n lse(alpha) + P
 *   P = sum_k [0.5 gamma^2 (sum_j exp(q_kj)^2 + sum_j l_kj^2) - m sum_j q_kj] - k C
 * with Q_k lower triangular, diagonal exp(q_k), strict lower part l_k filled
 * column by column, PI = 3.14159265359 and C from d, m, gamma alone. */

#ifndef GMM_OBJECTIVE_ONCE
#define GMM_OBJECTIVE_ONCE

#include <math.h>
#include <string.h>

#define GMM_PI 3.14159265359  /* ADBench's literal, not M_PI */

static inline size_t gmm_icf_size(size_t d)
{
    return d * (d + 1) / 2;
}

/* Numbers of scratch each version uses (the layouts are at their tops). */
static inline size_t gmm_scalar_scratch(const gmm_problem *p)
{
    return p->k * (p->d + 3) + 2 * p->d;
}

static inline size_t gmm_prim_scratch(const gmm_problem *p)
{
    return p->k * ((p->d + 1) * (p->d + 1) + 4) + p->d + 1 + p->n;
}

/* The global terms that are plain numbers: -n d/2 log(2 PI) and -k C,
 * evaluated as ADBench does (its integer products are exact here). */
static inline double gmm_constant_points(const gmm_problem *p)
{
    return -(double)(p->n * p->d) * 0.5 * log(2 * GMM_PI);
}

static inline double gmm_constant_prior(const gmm_problem *p)
{
    double d = (double)p->d, N = (double)(p->d + (size_t)p->m + 1);
    double lgamma_distrib = 0.25 * d * (d - 1) * log(GMM_PI);
    for (size_t j = 1; j <= p->d; j++)
        lgamma_distrib = lgamma_distrib + ad_lgamma(0.5 * N + 0.5 * (1.0 - (double)j));
    double C = N * d * (log(p->gamma) - 0.5 * log(2.0)) - lgamma_distrib;
    return (double)p->k * C;
}

#endif

#if !defined(T) || !defined(NAME)
#error "define T and NAME(id) before including gmm_objective.h"
#endif

/* ---- the scalar version: ADBench's loops ---- */

/* log sum exp, shifted by the largest value, which is one of the active
 * numbers: the translation a user writes (its derivative cancels, but it
 * is recorded as any value is). */
static T NAME(gmm_lse)(size_t n, const T *v)
{
    T hi = v[0];
    for (size_t i = 1; i < n; i++)
        if (ad_value(hi) < ad_value(v[i]))
            hi = v[i];
    T sum = AD_CONST(T, 0.0);
    for (size_t i = 0; i < n; i++)
        sum = ad_add(sum, ad_exp(ad_sub(v[i], hi)));
    return ad_add(ad_log(sum), hi);
}

static T NAME(gmm_sqnorm)(size_t n, const T *v)
{
    if (n == 0)
        return AD_CONST(T, 0.0);
    T sum = ad_mul(v[0], v[0]);
    for (size_t i = 1; i < n; i++)
        sum = ad_add(sum, ad_mul(v[i], v[i]));
    return sum;
}

/* t_ik given c_k = alpha_k + sum_j q_kj, as ADBench writes it: x - mu. */
static T NAME(gmm_main_term)(size_t d, T c, const T *qdiag, const T *l, const T *mu,
                             const double *x, T *xc, T *qx)
{
    for (size_t j = 0; j < d; j++)
        xc[j] = ad_sub(x[j], mu[j]);
    for (size_t j = 0; j < d; j++)
        qx[j] = ad_mul(qdiag[j], xc[j]);
    size_t idx = 0;
    for (size_t col = 0; col < d; col++)
        for (size_t r = col + 1; r < d; r++)
            qx[r] = ad_add(qx[r], ad_mul(l[idx++], xc[col]));
    return ad_sub(c, ad_mul(0.5, NAME(gmm_sqnorm)(d, qx)));
}

/* The Wishart prior less its constant -k C. */
static T NAME(gmm_prior)(const gmm_problem *p, const T *icf, const T *qdiag, const T *sumq)
{
    size_t d = p->d, s = gmm_icf_size(d);
    double half_gamma_sq = 0.5 * p->gamma * p->gamma;
    T out = AD_CONST(T, 0.0);
    for (size_t k = 0; k < p->k; k++) {
        T frob = ad_add(NAME(gmm_sqnorm)(d, qdiag + k * d),
                        NAME(gmm_sqnorm)(s - d, icf + k * s + d));
        out = ad_sub(ad_add(out, ad_mul(half_gamma_sq, frob)), ad_mul((double)p->m, sumq[k]));
    }
    return out;
}

/* Scratch: qdiag (k d), sumq (k), c (k), t (k), xc (d), qx (d). */
static T NAME(gmm_scalar)(const gmm_problem *p, size_t i0, size_t i1, int global,
                          const T *params, T *scratch)
{
    size_t d = p->d, K = p->k, s = gmm_icf_size(d);
    const T *alpha = params, *mu = alpha + K, *icf = mu + K * d;
    T *qdiag = scratch, *sumq = qdiag + K * d, *c = sumq + K, *t = c + K, *xc = t + K,
      *qx = xc + d;
    for (size_t k = 0; k < K; k++) {
        sumq[k] = AD_CONST(T, 0.0);
        for (size_t j = 0; j < d; j++) {
            sumq[k] = ad_add(sumq[k], icf[k * s + j]);
            qdiag[k * d + j] = ad_exp(icf[k * s + j]);
        }
        c[k] = ad_add(alpha[k], sumq[k]);
    }
    T slse = AD_CONST(T, 0.0);
    for (size_t i = i0; i < i1; i++) {
        for (size_t k = 0; k < K; k++)
            t[k] = NAME(gmm_main_term)(d, c[k], qdiag + k * d, icf + k * s + d, mu + k * d,
                                       p->x + i * d, xc, qx);
        slse = ad_add(slse, NAME(gmm_lse)(K, t));
    }
    if (!global)
        return slse;
    T f = ad_sub(ad_add(gmm_constant_points(p), slse),
                 ad_mul((double)p->n, NAME(gmm_lse)(K, alpha)));
    return ad_add(f, ad_sub(NAME(gmm_prior)(p, icf, qdiag, sumq), gmm_constant_prior(p)));
}

#ifndef GMM_OBJECTIVE_SCALAR_ONLY

/* ---- the primitive version: recorded matrices and n-ary records ----
 *
 * The tape's size is the cost, and nearly all of it is per (point,
 * component) pair.  Each Q_k is recorded once as the lower triangular
 * (d+1) x (d+1) matrix A_k = [[0, 0], [-Q_k mu_k, Q_k]] (homogeneous
 * coordinates: A_k [1; x_i] = [0; Q_k (x_i - mu_k)]).  A pair is then one
 * square norm of a product with the constant point, |A_k [1; x_i]|^2 --
 * it stores the point and the product, 16 (d + 1) bytes, and two slots --
 * and t = c - sq/2 as one record, where a scalar or n-ary row form stores
 * a partial per entry of Q_k.  The norm's reverse rule forms
 * Abar += 2 sqbar y [1; x_i]^T over the triangle from the stored values.
 * Per point, one logsumexp. */

/* A_k from mu_k and icf_k; the strict upper part is constant zeros, which
 * ad_mat_make finds, so products cost the triangle only. */
static void NAME(gmm_affine)(size_t d, const T *mu, const T *icf, T *A)
{
    size_t e = d + 1, idx = d;
    for (size_t r = 0; r < e * e; r++)
        A[r] = AD_CONST(T, 0.0);
    A[0] = AD_CONST(T, 0.0);  /* the homogeneous coordinate's row: y_0 = 0 */
    for (size_t j = 0; j < d; j++)
        A[(j + 1) * e + 1 + j] = ad_exp(icf[j]);
    for (size_t col = 0; col < d; col++)
        for (size_t r = col + 1; r < d; r++)
            A[(r + 1) * e + 1 + col] = icf[idx++];
    for (size_t j = 0; j < d; j++)
        A[(j + 1) * e] = ad_neg(ad_dot(j + 1, A + (j + 1) * e + 1, mu));
}

/* The global terms; y (d) is scratch, frob (k) too. */
static T NAME(gmm_prim_global)(const gmm_problem *p, const T *alpha, const T *icf,
                               const T *A, const T *sumq, T *frob, T *y, T slse)
{
    size_t d = p->d, s = gmm_icf_size(d), e = d + 1;
    for (size_t k = 0; k < p->k; k++) {
        for (size_t j = 0; j < d; j++)
            y[j] = A[k * e * e + (j + 1) * e + 1 + j];
        frob[k] = ad_add(ad_sqnorm(d, y), ad_sqnorm(s - d, icf + k * s + d));
    }
    T prior = ad_sub(ad_mul(0.5 * p->gamma * p->gamma, ad_sum(p->k, frob)),
                     ad_mul((double)p->m, ad_sum(p->k, sumq)));
    T f = ad_sub(ad_add(gmm_constant_points(p), slse),
                 ad_mul((double)p->n, ad_logsumexp(p->k, alpha)));
    return ad_add(f, ad_sub(prior, gmm_constant_prior(p)));
}

/* Scratch: A (k (d+1)^2), sumq, c, t, frob (k each), y (d + 1), lse (n).
 * mats: k handles.  xe: d + 1 doubles. */
static T NAME(gmm_prim)(const gmm_problem *p, size_t i0, size_t i1, int global,
                        const T *params, T *scratch, ad_mat *mats, double *xe)
{
    size_t d = p->d, K = p->k, s = gmm_icf_size(d), e = d + 1;
    const T *alpha = params, *mu = alpha + K, *icf = mu + K * d;
    T *A = scratch, *sumq = A + K * e * e, *c = sumq + K, *t = c + K, *frob = t + K,
      *y = frob + K, *lse = y + e;
    for (size_t k = 0; k < K; k++) {
        NAME(gmm_affine)(d, mu + k * d, icf + k * s, A + k * e * e);
        if (ad_mat_make(e, e, A + k * e * e, &mats[k]) != AD_OK)
            return ad_mul(NAN, params[0]);  /* the recording keeps the error */
        sumq[k] = ad_sum(d, icf + k * s);
        c[k] = ad_add(alpha[k], sumq[k]);
    }
    xe[0] = 1.0;
    for (size_t i = i0; i < i1; i++) {
        memcpy(xe + 1, p->x + i * d, d * sizeof *xe);
        for (size_t k = 0; k < K; k++) {
            /* t = c - sq/2 as c + (-0.5) sq, bit for bit: one record, and
             * ad__push's cursor loads do not wait on the store the norm
             * just made to it, as a second n-ary record's would */
            T sq;
            ad_mat_sqnorm(&mats[k], xe, &sq);
            t[k] = c[k];
            ad_axpy(1, -0.5, &sq, &t[k]);
        }
        lse[i - i0] = ad_logsumexp(K, t);
    }
    T slse = ad_sum(i1 - i0, lse);
    return global ? NAME(gmm_prim_global)(p, alpha, icf, A, sumq, frob, y, slse) : slse;
}

#endif

#undef T
#undef NAME
