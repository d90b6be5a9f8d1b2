/* linear_solve: differentiating through code dualrev cannot see.
 *
 * The objective builds a matrix A(p) and a vector b(p) from parameters p
 * with ordinary dualrev operations, solves A x = b, and returns a loss of
 * x.  The solve is a hand-written LU factorisation on plain doubles -- it
 * stands for any solver, library call or kernel that is not written with
 * ad_real.  It enters the recording through ad_external, with a rule
 * (ad_rule) that supplies the derivatives dualrev cannot record:
 *
 *   primal  x = A^{-1} b
 *   vjp     given xbar, the cotangent of x:
 *               bbar = A^{-T} xbar,   Abar = -bbar x^T
 *           (one solve with the transpose; no inverse is formed)
 *   jvp     given Adot and bdot:
 *               xdot = A^{-1} (bdot - Adot x)
 *
 * Both follow from differentiating A x = b:  dA x + A dx = db.
 *
 * The program computes the gradient of the loss with respect to p, checks
 * it against central finite differences, checks the jvp rule against the
 * vjp rule, and exits with a failure status if either disagrees. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <dualrev.h>

enum { N = 5,   /* A is N x N */
       P = 4 }; /* parameters */

/* ======================================================================
 * A small dense LU solver with partial pivoting, on plain doubles
 * ====================================================================== */

typedef struct lu {
    size_t n;
    double a[N * N];  /* L (unit diagonal, not stored) and U, row-major */
    size_t piv[N];    /* step k swapped rows k and piv[k] */
} lu;

/* Factor the n x n row-major matrix A.  Returns 0 if A is singular. */
static int lu_factor(lu *f, size_t n, const double *A)
{
    f->n = n;
    for (size_t i = 0; i < n * n; i++)
        f->a[i] = A[i];
    for (size_t k = 0; k < n; k++) {
        size_t p = k;
        for (size_t i = k + 1; i < n; i++)
            if (fabs(f->a[i * n + k]) > fabs(f->a[p * n + k]))
                p = i;
        f->piv[k] = p;
        if (f->a[p * n + k] == 0.0)
            return 0;
        if (p != k)
            for (size_t j = 0; j < n; j++) {
                double t = f->a[k * n + j];
                f->a[k * n + j] = f->a[p * n + j];
                f->a[p * n + j] = t;
            }
        for (size_t i = k + 1; i < n; i++) {
            double l = f->a[i * n + k] /= f->a[k * n + k];
            for (size_t j = k + 1; j < n; j++)
                f->a[i * n + j] -= l * f->a[k * n + j];
        }
    }
    return 1;
}

static void swap(double *v, size_t i, size_t j)
{
    double t = v[i];
    v[i] = v[j];
    v[j] = t;
}

/* Solve A x = v in place: with P A = L U, x = U^{-1} L^{-1} P v. */
static void lu_solve(const lu *f, double *v)
{
    size_t n = f->n;
    for (size_t k = 0; k < n; k++)
        swap(v, k, f->piv[k]);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++)
            v[i] -= f->a[i * n + j] * v[j];
    for (size_t i = n; i-- > 0;) {
        for (size_t j = i + 1; j < n; j++)
            v[i] -= f->a[i * n + j] * v[j];
        v[i] /= f->a[i * n + i];
    }
}

/* Solve A^T x = v in place: A^T = U^T L^T P, so x = P^T L^{-T} U^{-T} v. */
static void lu_solve_transposed(const lu *f, double *v)
{
    size_t n = f->n;
    for (size_t i = 0; i < n; i++) {  /* U^T is lower triangular */
        for (size_t j = 0; j < i; j++)
            v[i] -= f->a[j * n + i] * v[j];
        v[i] /= f->a[i * n + i];
    }
    for (size_t i = n; i-- > 0;)      /* L^T is unit upper triangular */
        for (size_t j = i + 1; j < n; j++)
            v[i] -= f->a[j * n + i] * v[j];
    for (size_t k = n; k-- > 0;)      /* undo the row swaps, last first */
        swap(v, k, f->piv[k]);
}

/* ======================================================================
 * The rule
 *
 * The external's inputs are A's n*n entries (row-major) followed by b's n
 * entries; its outputs are x's n entries.  dualrev calls primal once, while
 * recording, and keeps copies of the inputs and outputs for the other two.
 * vjp and jvp run later, during the sweeps, after the objective has
 * returned.
 * ====================================================================== */

/* The rule's ctx.  The primal caches A's factorisation here, and vjp and
 * jvp reuse it instead of factoring again (they could also refactor the
 * copy of A they are given: caching saves O(n^3) per sweep).
 *
 * Lifetime: ad_external keeps the pointer, not a copy.  ctx must stay valid
 * and unchanged until the recording's last sweep: until ad_gradient (or
 * ad_vjp, ad_jacobian, ...) returns, or, for ad_linearize, until
 * ad_linear_free.  So it is not a local variable of the objective: here it
 * lives in main().  And since it holds the factorisation of one matrix, an
 * objective that solved several systems would give each ad_external call
 * its own solver. */
typedef struct solver {
    lu f;
    int singular;
} solver;

static void solve_primal(void *ctx, size_t n_in, const double *in, size_t n, double *x)
{
    solver *s = ctx;
    (void)n_in;  /* n * n + n */
    s->singular = !lu_factor(&s->f, n, in);
    for (size_t i = 0; i < n; i++)
        x[i] = s->singular ? NAN : in[n * n + i];  /* b */
    if (!s->singular)
        lu_solve(&s->f, x);
}

/* inbar = J^T xbar.  dualrev hands inbar over zeroed; we set every entry. */
static void solve_vjp(void *ctx, size_t n_in, const double *in, size_t n, const double *x,
                      const double *xbar, double *inbar)
{
    const solver *s = ctx;
    double *Abar = inbar, *bbar = inbar + n * n;
    (void)n_in, (void)in;
    for (size_t i = 0; i < n; i++)
        bbar[i] = s->singular ? NAN : xbar[i];
    if (!s->singular)
        lu_solve_transposed(&s->f, bbar);  /* bbar = A^{-T} xbar */
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            Abar[i * n + j] = -bbar[i] * x[j];
}

/* xdot = J indot = A^{-1} (bdot - Adot x). */
static void solve_jvp(void *ctx, size_t n_in, const double *in, size_t n, const double *x,
                      const double *indot, double *xdot)
{
    const solver *s = ctx;
    const double *Adot = indot, *bdot = indot + n * n;
    (void)n_in, (void)in;
    for (size_t i = 0; i < n; i++) {
        double r = bdot[i];
        for (size_t j = 0; j < n; j++)
            r -= Adot[i * n + j] * x[j];
        xdot[i] = s->singular ? NAN : r;
    }
    if (!s->singular)
        lu_solve(&s->f, xdot);
}

static const ad_rule solve_rule = {solve_primal, solve_vjp, solve_jvp, NULL};

/* ======================================================================
 * The model: ordinary dualrev operations around the external solve
 * ====================================================================== */

/* A(p)_ij = [i = j] (4 + exp p0) + sin(p1 (i+1) - p2 (j+1)) / 2: diagonally
 * dominant, so well conditioned, and not symmetric, so that a vjp that
 * forgot the transpose would fail the check below.
 * b(p)_i = cos(p3 (i+1)) + p0 (i+1) / N.
 * loss = |x - t|^2 / 2 with t_i = 1 / (i+1). */
static ad_real loss(const ad_real *p, size_t np, void *ctx)
{
    solver *s = ctx;
    ad_real in[N * N + N], x[N], r[N];
    (void)np;
    ad_real diag = ad_add(4.0, ad_exp(p[0]));
    for (size_t i = 0; i < N; i++)
        for (size_t j = 0; j < N; j++) {
            ad_real t = ad_sub(ad_mul(p[1], (double)(i + 1)), ad_mul(p[2], (double)(j + 1)));
            ad_real a = ad_mul(0.5, ad_sin(t));
            in[i * N + j] = i == j ? ad_add(a, diag) : a;
        }
    for (size_t i = 0; i < N; i++)
        in[N * N + i] = ad_add(ad_cos(ad_mul(p[3], (double)(i + 1))),
                               ad_mul(p[0], (double)(i + 1) / N));

    /* In a recording, an error (AD_EINVAL, AD_ENOMEM) is also kept by the
     * recording and reported by ad_gradient, and x is NaN; outside one, x
     * is NaN and the caller sees a NaN loss. */
    ad_status kept = ad_external(&solve_rule, s, N * N + N, in, N, x);
    (void)kept;

    for (size_t i = 0; i < N; i++)
        r[i] = ad_sub(x[i], 1.0 / (double)(i + 1));
    return ad_mul(0.5, ad_sqnorm(N, r));
}

/* The loss as a function R^P -> R^1, for ad_jvp. */
static void loss_fn(const ad_real *p, size_t np, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = loss(p, np, ctx);
}

/* The loss at p without recording anything: outside ad_gradient the
 * operations on constants only compute values, and ad_external only runs
 * the primal.  The finite differences use the very same code. */
static double loss_value(const double *p, solver *s)
{
    ad_real q[P];
    for (size_t k = 0; k < P; k++)
        q[k] = ad_const(p[k]);
    return ad_value(loss(q, P, s));
}

int main(void)
{
    const double p[P] = {0.3, 0.7, -0.4, 1.1};
    solver s;  /* the rule's ctx: outlives every call below */
    double fx, grad[P];

    ad_status st = ad_gradient(loss, &s, P, p, &fx, grad);
    if (st != AD_OK) {
        fprintf(stderr, "ad_gradient failed: %s\n", ad_strerror(st));
        return EXIT_FAILURE;
    }

    /* Central differences, step h = 1e-5 max(1, |p_k|).  Their error is
     * about h^2 |f'''| / 6 (truncation) plus eps |f| / h (rounding of f,
     * here amplified by the solve only by cond(A), about 2): about 1e-10 for
     * the smooth, O(1) functions here.  A bound of 1e-6 leaves a factor of
     * 10^4 for that, while a wrong rule (a missing transpose or sign, an
     * entry of Abar out of place) gives errors of order 1e-2 to 1. */
    const double bound = 1e-6;
    double fd[P], scale = 0.0, err = 0.0;
    for (size_t k = 0; k < P; k++) {
        double h = 1e-5 * fmax(1.0, fabs(p[k])), q[P];
        for (size_t i = 0; i < P; i++)
            q[i] = p[i];
        q[k] = p[k] + h;
        double up = loss_value(q, &s);
        q[k] = p[k] - h;
        double down = loss_value(q, &s);
        fd[k] = (up - down) / (2.0 * h);
        scale = fmax(scale, fabs(fd[k]));
    }
    /* Relative to the largest entry, so that an entry near 0 does not
     * turn a tiny absolute difference into a large relative one. */
    for (size_t k = 0; k < P; k++)
        err = fmax(err, fabs(grad[k] - fd[k]) / scale);

    printf("loss of the solution of A(p) x = b(p), N = %d, at p = (%g, %g, %g, %g)\n", N, p[0],
           p[1], p[2], p[3]);
    printf("loss = %.17g\n\n", fx);
    printf("%3s  %24s  %24s\n", "k", "d loss / d p_k (AD)", "central difference");
    for (size_t k = 0; k < P; k++)
        printf("%3zu  %24.16e  %24.16e\n", k, grad[k], fd[k]);
    printf("\nmax |AD - FD| / max |FD| = %.3g (bound %.0e)\n", err, bound);

    /* The jvp rule against the vjp rule: the derivative of the loss along
     * v by one forward sweep (jvp rule) equals grad . v (vjp rule). */
    const double v[P] = {0.25, -1.0, 0.5, 2.0};
    double y, dir, dot = 0.0, dot_scale = 0.0;
    st = ad_jvp(loss_fn, &s, P, p, v, 1, &y, &dir);
    if (st != AD_OK) {
        fprintf(stderr, "ad_jvp failed: %s\n", ad_strerror(st));
        return EXIT_FAILURE;
    }
    for (size_t k = 0; k < P; k++) {
        dot += grad[k] * v[k];
        dot_scale += fabs(grad[k] * v[k]);
    }
    /* Both are exact derivatives, rounded differently: agreement to a few
     * hundred ulps of the terms' magnitude is expected. */
    double dir_err = fabs(dir - dot) / dot_scale;
    printf("along v: jvp rule %.16e, vjp rule %.16e, difference / scale %.3g\n", dir, dot,
           dir_err);

    if (!(err <= bound) || !(dir_err <= 1e-12)) {
        fprintf(stderr, "linear_solve: derivatives disagree\n");
        return EXIT_FAILURE;
    }
    return EXIT_SUCCESS;
}
