/* dualrev/cholmod.h: solving with the sparse Hessian of ad_sparse_hessian
 * by SuiteSparse CHOLMOD's sparse Cholesky factorisation (Debian:
 * libsuitesparse-dev), for Newton's method.
 *
 *   #include <dualrev/cholmod.h>      (after or instead of <cholmod.h>)
 *
 *   ad_csr H;  ad_cholmod S;  double shift;
 *   ad_sparse_hessian(f, ctx, n, x, &fx, g, &H);     the structure, once
 *   ad_cholmod_analyze(&S, &H);                      ordering and symbolic
 *   loop:                                            factorisation, once
 *       ad_sparse_hessian_values(f, ctx, n, x, &fx, g, &H);
 *       ad_cholmod_newton(&S, &H, g, d, &shift);     d = -(H + shift I)^-1 g
 *       ... line search along d ...
 *   ad_cholmod_free(&S);  ad_csr_free(&H);
 *
 * Header only: the library itself does not depend on CHOLMOD; a program
 * that includes this links -lcholmod (with -I/usr/include/suitesparse, or
 * pkg-config's cholmod flags where SuiteSparse installs them).
 *
 * H is the lower triangle (col <= row) by rows, as ad_sparse_hessian gives
 * it: the same arrays read by columns are the upper triangle, which is
 * what CHOLMOD is given (stype 1), so no transpose is made.  The
 * structure is fixed at ad_cholmod_analyze (its fill-reducing ordering and
 * symbolic factorisation are the expensive part CHOLMOD can reuse); each
 * ad_cholmod_factor copies H's values and factors numerically; a matrix of
 * another structure is refused (AD_ESTRUCTURE).
 *
 * Statuses: AD_EINVAL (NULL arguments, H not a square lower triangle with
 * columns ascending, a shift that is negative or not finite, a call out of
 * order), AD_ESTRUCTURE (H's structure is not the analysed one), AD_ENOMEM
 * and AD_ERANGE (CHOLMOD ran out of memory, or the sizes exceed its
 * integers), AD_ENOTPOSDEF (H + shift I is not positive definite: the
 * factor is then unusable until a factorisation succeeds), AD_ENONFINITE
 * (H's values or b hold Inf or NaN).  Nothing is printed: CHOLMOD's
 * messages are switched off.
 *
 * Threads: an ad_cholmod is used by one thread at a time; separate ones
 * may be used on separate threads (CHOLMOD's BLAS may use threads of its
 * own). */
#ifndef DUALREV_CHOLMOD_H
#define DUALREV_CHOLMOD_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#include <dualrev.h>

#if defined(__has_include)
#if __has_include(<cholmod.h>)
#include <cholmod.h>
#else
#include <suitesparse/cholmod.h>
#endif
#else
#include <cholmod.h>
#endif

AD__EXTERN_C_BEGIN

typedef struct ad_cholmod {
    cholmod_common common;
    cholmod_sparse *A;      /* H's structure: the upper triangle by columns */
    cholmod_factor *L;      /* the symbolic analysis, then the factor */
    cholmod_dense *B, *X, *Y, *E;  /* a solve's right-hand side, solution, workspaces */
    size_t n, nnz;
    int started;            /* cholmod_l_start was called */
    int factored;           /* L holds a successful factorisation */
    double shift;           /* that factorisation's shift: L L^T = H + shift I */
    unsigned long factorizations;  /* numerical factorisations so far */
} ad_cholmod;

/* CHOLMOD's status after a call, as an ad_status. */
static inline ad_status ad__cholmod_status(const cholmod_common *c, int ok)
{
    if (c->status == CHOLMOD_OUT_OF_MEMORY)
        return AD_ENOMEM;
    if (c->status == CHOLMOD_TOO_LARGE)
        return AD_ERANGE;
    if (c->status == CHOLMOD_NOT_POSDEF)
        return AD_ENOTPOSDEF;
    return ok && c->status >= CHOLMOD_OK ? AD_OK : AD_EINVAL;
}

/* Whether H is a lower triangle of n rows and n columns, columns
 * ascending in each row. */
static inline int ad__cholmod_lower(const ad_csr *H)
{
    size_t n = H->rows;
    if (H->cols != n || !H->row_ptr || H->row_ptr[0] != 0 || H->row_ptr[n] != H->nnz ||
        (H->nnz && (!H->col || !H->val)))
        return 0;
    for (size_t r = 0; r < n; r++) {
        if (H->row_ptr[r] > H->row_ptr[r + 1])
            return 0;
        for (size_t k = H->row_ptr[r]; k < H->row_ptr[r + 1]; k++)
            if (H->col[k] > r || (k > H->row_ptr[r] && H->col[k] <= H->col[k - 1]))
                return 0;
    }
    return 1;
}

/* Frees what S holds (also after a failed ad_cholmod_analyze) and zeroes
 * it.  S = NULL, or a zeroed S, does nothing. */
static inline void ad_cholmod_free(ad_cholmod *S)
{
    if (!S)
        return;
    if (S->started) {
        cholmod_l_free_sparse(&S->A, &S->common);
        cholmod_l_free_factor(&S->L, &S->common);
        cholmod_l_free_dense(&S->B, &S->common);
        cholmod_l_free_dense(&S->X, &S->common);
        cholmod_l_free_dense(&S->Y, &S->common);
        cholmod_l_free_dense(&S->E, &S->common);
        cholmod_l_finish(&S->common);
    }
    memset(S, 0, sizeof *S);
}

/* Starts S (whatever it held before: it is not freed) on H's structure:
 * CHOLMOD's fill-reducing ordering and symbolic factorisation, done once
 * for every matrix of this structure (H's values are not read).  On an
 * error S is left freed (zeroed).  Cost: CHOLMOD's analysis, about the
 * time of a numerical factorisation or less; memory: H's structure
 * (16 nnz + 8 n bytes), L's structure. */
AD_NODISCARD static inline ad_status ad_cholmod_analyze(ad_cholmod *S, const ad_csr *H)
{
    if (!S)
        return AD_EINVAL;
    memset(S, 0, sizeof *S);
    if (!H || !ad__cholmod_lower(H) || H->rows == 0)
        return AD_EINVAL;
    size_t n = H->rows, nnz = H->nnz;
    if ((SuiteSparse_long)n < 0 || (SuiteSparse_long)nnz < 0 ||
        (size_t)(SuiteSparse_long)n != n || (size_t)(SuiteSparse_long)nnz != nnz)
        return AD_ERANGE;
    cholmod_common *c = &S->common;
    if (!cholmod_l_start(c))
        return AD_ENOMEM;
    S->started = 1;
    c->print = 0;  /* no messages: statuses say it */
    c->error_handler = NULL;
    c->quick_return_if_not_posdef = 1;
    ad_status s = AD_OK;
    S->A = cholmod_l_allocate_sparse(n, n, nnz, 1, 1, 1, CHOLMOD_REAL, c);
    if (!S->A)
        s = ad__cholmod_status(c, 0);
    if (s == AD_OK) {
        SuiteSparse_long *p = (SuiteSparse_long *)S->A->p, *i = (SuiteSparse_long *)S->A->i;
        for (size_t r = 0; r <= n; r++)
            p[r] = (SuiteSparse_long)H->row_ptr[r];
        for (size_t k = 0; k < nnz; k++)
            i[k] = (SuiteSparse_long)H->col[k];
        memset(S->A->x, 0, (nnz ? nnz : 1) * sizeof(double));
        S->L = cholmod_l_analyze(S->A, c);
        if (!S->L)
            s = ad__cholmod_status(c, 0);
    }
    if (s == AD_OK) {
        S->B = cholmod_l_zeros(n, 1, CHOLMOD_REAL, c);
        if (!S->B)
            s = ad__cholmod_status(c, 0);
    }
    if (s != AD_OK) {
        ad_cholmod_free(S);
        return s == AD_OK ? AD_ENOMEM : s;
    }
    S->n = n;
    S->nnz = nnz;
    return AD_OK;
}

/* Factors H + shift I (shift >= 0, finite) numerically: H must have the
 * structure S was analysed on (AD_ESTRUCTURE otherwise; an O(nnz)
 * comparison).  AD_ENOTPOSDEF where it is not positive definite; the
 * factor is then unusable (ad_cholmod_solve: AD_EINVAL) until a
 * factorisation succeeds.  Cost: CHOLMOD's numerical factorisation. */
AD_NODISCARD static inline ad_status ad_cholmod_factor(ad_cholmod *S, const ad_csr *H, double shift)
{
    if (!S || !S->A || !H || !(shift >= 0.0) || !isfinite(shift))
        return AD_EINVAL;
    S->factored = 0;
    if (H->rows != S->n || H->cols != S->n || H->nnz != S->nnz || !H->row_ptr ||
        (H->nnz && (!H->col || !H->val)))
        return AD_ESTRUCTURE;
    const SuiteSparse_long *p = (const SuiteSparse_long *)S->A->p, *i = (const SuiteSparse_long *)S->A->i;
    for (size_t r = 0; r <= S->n; r++)
        if ((size_t)p[r] != H->row_ptr[r])
            return AD_ESTRUCTURE;
    for (size_t k = 0; k < S->nnz; k++)
        if ((size_t)i[k] != H->col[k])
            return AD_ESTRUCTURE;
    for (size_t k = 0; k < S->nnz; k++)
        if (!isfinite(H->val[k]))
            return AD_ENONFINITE;
    if (S->nnz)
        memcpy(S->A->x, H->val, S->nnz * sizeof(double));
    double beta[2] = {shift, 0.0};
    cholmod_common *c = &S->common;
    int ok = cholmod_l_factorize_p(S->A, beta, NULL, 0, S->L, c);
    S->factorizations++;
    ad_status s = ad__cholmod_status(c, ok);
    if (s == AD_OK && S->L->minor < S->n)
        s = AD_ENOTPOSDEF;
    if (s == AD_OK && !S->L->is_super && !S->L->is_ll) {
        /* a simplicial LDL^T goes through indefinite matrices: D must be
         * positive, the first entry of each of L's columns */
        const SuiteSparse_long *lp = (const SuiteSparse_long *)S->L->p;
        const double *lx = (const double *)S->L->x;
        for (size_t j = 0; j < S->n && s == AD_OK; j++)
            if (!(lx[lp[j]] > 0.0) || !isfinite(lx[lp[j]]))
                s = AD_ENOTPOSDEF;
    }
    if (s != AD_OK)
        return s;
    S->factored = 1;
    S->shift = shift;
    return AD_OK;
}

/* x = (H + shift I)^-1 b with the last successful factorisation (x may be
 * b).  AD_EINVAL without one; AD_ENONFINITE if b holds Inf or NaN.  Cost:
 * two triangular solves with the factor; no allocation after the first
 * call. */
AD_NODISCARD static inline ad_status ad_cholmod_solve(ad_cholmod *S, const double *b, double *x)
{
    if (!S || !S->factored || !b || !x)
        return AD_EINVAL;
    for (size_t k = 0; k < S->n; k++)
        if (!isfinite(b[k]))
            return AD_ENONFINITE;
    memcpy(S->B->x, b, S->n * sizeof(double));
    cholmod_common *c = &S->common;
    int ok = cholmod_l_solve2(CHOLMOD_A, S->L, S->B, NULL, &S->X, NULL, &S->Y, &S->E, c);
    ad_status s = ad__cholmod_status(c, ok);
    if (s != AD_OK)
        return s;
    memcpy(x, S->X->x, S->n * sizeof(double));
    return AD_OK;
}

/* Newton's direction with damping: d = -(H + shift I)^-1 g, with the
 * least shift of 0, tau0, 10 tau0, 100 tau0, ... for which H + shift I is
 * positive definite (Nocedal and Wright, Algorithm 3.3, "Cholesky with
 * added multiple of the identity"), into *shift; tau0 = 1e-3 times the
 * largest |H_ii| (1e-3 if that is 0), or -min H_ii + tau0 when a diagonal
 * entry is not positive, where no smaller shift can succeed.  At most 60
 * factorisations, then AD_ENOTPOSDEF; d may be g.  Cost: one numerical
 * factorisation where H is positive definite, and a solve. */
AD_NODISCARD static inline ad_status ad_cholmod_newton(ad_cholmod *S, const ad_csr *H, const double *g,
                                                      double *d, double *shift)
{
    if (!S || !S->A || !H || !g || !d)
        return AD_EINVAL;
    if (shift)
        *shift = NAN;
    double dmax = 0.0, dmin = INFINITY;
    if (H->rows == S->n && H->row_ptr && (!H->nnz || (H->col && H->val)))
        for (size_t r = 0; r < S->n; r++) {
            double h = 0.0;  /* a diagonal entry outside the structure is 0 */
            size_t last = H->row_ptr[r + 1];
            if (last > H->row_ptr[r] && last <= H->nnz && H->col[last - 1] == r)
                h = H->val[last - 1];
            dmax = fmax(dmax, fabs(h));
            dmin = fmin(dmin, h);
        }
    double beta = dmax > 0.0 && isfinite(dmax) ? 1e-3 * dmax : 1e-3;
    double tau = dmin > 0.0 ? 0.0 : -dmin + beta;
    ad_status s = AD_ENOTPOSDEF;
    for (int tries = 0; tries < 60; tries++) {
        s = ad_cholmod_factor(S, H, tau);
        if (s != AD_ENOTPOSDEF)
            break;
        tau = tau == 0.0 ? beta : 10.0 * tau;
        if (!isfinite(tau))
            break;
    }
    if (s != AD_OK)
        return s;
    s = ad_cholmod_solve(S, g, d);
    if (s != AD_OK)
        return s;
    for (size_t k = 0; k < S->n; k++)
        d[k] = -d[k];
    if (shift)
        *shift = tau;
    return AD_OK;
}

AD__EXTERN_C_END

#endif
