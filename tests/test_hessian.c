/* Second order: ad_hvp and ad_hessian.
 *
 * Oracles:
 *   - an eighth-order central finite difference of the gradient (ad_gradient),
 *     column by column, for every elementary operation (tests/ops_list.h, all
 *     binary operations in their _rr, _rd and _dr forms) at seeded random
 *     points of its domain, and for the array primitives and recorded
 *     matrices;
 *   - Hessians in closed form: the array primitives (ad_prod at zeros,
 *     ad_logsumexp's diag(p) - p p^T at huge inputs, ...), Rosenbrock, and
 *     objectives built so that their second derivatives are known;
 *   - the API against itself: ad_hessian's columns against ad_hvp along e_j
 *     and H v against ad_hvp along v, value and gradient against
 *     ad_gradient, symmetry, on random compositions of every operation;
 *   - conventions and errors: constants (ID 0) with Inf or 0 values, NaN,
 *     the kinks of fabs/fmin/fmax/hypot, sqrt at 0, NULL arguments, external
 *     functions, the tape limit, nesting, allocation failure, threads, and
 *     first-order calls after second-order ones.
 *
 * Finite-difference tolerance, for each Hessian entry:
 *     |H - fd| <= RTOL |fd| + noise.
 * The stencil is check.h's, applied to the gradient: fd = sum_k c_k (g(x +
 * k h) - g(x - k h)) / h with sum |c_k| = 1.042.  Its rounding error is at
 * most 2 sum|c_k| (error of one gradient entry) / h; the gradient entries
 * are within 40 ulp of their largest value on the stencil, so noise =
 * 2e-14 max|g| / h bounds it (as check.h's fd_derivative).  The step is
 * h = 2^-10 (a power of two, so x +- k h are exact) for |x| < 16, relative
 * beyond.  The truncation error's leading term is h^8 g^(9) / 630; every
 * sample point keeps a distance d >= 0.1 from the nearest singularity (poles
 * of tan and gamma at >= 0.15, domain edges at >= 0.1, ops_list.h), and for
 * the worst case among the operations, a simple pole of f, it is 2880
 * (h/d)^8 < 3e-13 relative to f''.  Branch points (sqrt, log, asin, ...) give
 * smaller constants.  RTOL = 1e-8 then covers the truncation and the
 * rounding of dualrev's own second partials (a few ulps, digamma's series
 * to ~1e-15) with ample slack, while a wrong formula is off by O(1). */
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "workers.h"
#include "ops_list.h"
#include "ops_table.h"
#include "../lib/drivers/testing.h"

#define RTOL 1e-8
#define POINTS 100         /* random points per operation and form */
#define CHUNK 65536L
#define EPS 0x1p-52

static double *dalloc(size_t n)
{
    return xmalloc(n * sizeof(double));
}

/* ======================================================================
 * 1. The oracles and the common checks
 * ====================================================================== */

/* A power of two no smaller than x's ulp, so that x +- k h are exact. */
static double fd2_step(double x)
{
    double a = fabs(x);
    return a < 16.0 ? 0x1p-10 : ldexp(0x1p-14, ilogb(a));
}

/* H[i n + j] ~ d grad_i / d x_j by the eighth-order stencil on ad_gradient,
 * and noise[i n + j], the bound on its rounding error (see the top). */
static void fd_hessian(ad_objective f, void *ctx, size_t n, const double *x, double *H,
                       double *noise)
{
    static const double c[4] = {4.0 / 5, -1.0 / 5, 4.0 / 105, -1.0 / 280};
    double *xp = dalloc(n), *gu = dalloc(n), *gd = dalloc(n), *gmax = dalloc(n);
    memcpy(xp, x, n * sizeof *x);
    for (size_t j = 0; j < n; j++) {
        double h = fd2_step(x[j]);
        for (size_t i = 0; i < n; i++) {
            H[i * n + j] = 0.0;
            gmax[i] = 0.0;
        }
        for (int k = 1; k <= 4; k++) {
            xp[j] = x[j] + k * h;
            gradient_ok(f, ctx, n, xp, gu);
            xp[j] = x[j] - k * h;
            gradient_ok(f, ctx, n, xp, gd);
            for (size_t i = 0; i < n; i++) {
                H[i * n + j] += c[k - 1] * (gu[i] - gd[i]);
                gmax[i] = fmax(gmax[i], fmax(fabs(gu[i]), fabs(gd[i])));
            }
        }
        xp[j] = x[j];
        for (size_t i = 0; i < n; i++) {
            H[i * n + j] /= h;
            noise[i * n + j] = 2e-14 * gmax[i] / h;
        }
    }
    free(xp), free(gu), free(gd), free(gmax);
}

/* One entry against its reference, with a label for the failure message. */
static void entry_near(const char *what, size_t i, size_t j, double got, double want,
                       double rtol, double atol)
{
    if (fabs(got - want) <= rtol * fabs(want) + atol)
        return;
    print_error("%s: H[%zu][%zu] = %.17g, expected %.17g (error %.3g, rtol %.3g, atol %.3g)\n",
                what, i, j, got, want, fabs(got - want), rtol, atol);
    fail();
}

/* The same number from two calls: identical, or within 1e-15 relative
 * (what ad_hvp and ad_hessian must match ad_gradient's f and gradient to;
 * on x86-64 they are identical). */
static int agree(double a, double b)
{
    return same_double(a, b) || fabs(a - b) <= 1e-15 * fabs(b);
}

/* ad_hessian at x, which must succeed; f(x) and the gradient must be
 * ad_gradient's (the same partials, swept in the same order). */
static void hessian_ok(const char *what, ad_objective f, void *ctx, size_t n, const double *x,
                       double *grad, double *H)
{
    double fx = 0.0, fg;
    double *g1 = dalloc(n);
    ad_status s = ad_hessian(f, ctx, n, x, &fx, grad, H);
    if (s != AD_OK) {
        print_error("%s: ad_hessian returned %d (%s)\n", what, (int)s, ad_strerror(s));
        fail();
    }
    fg = gradient_ok(f, ctx, n, x, g1);
    if (!agree(fx, fg)) {
        print_error("%s: ad_hessian's f = %.17g, ad_gradient's %.17g\n", what, fx, fg);
        fail();
    }
    for (size_t i = 0; i < n; i++)
        if (!agree(grad[i], g1[i])) {
            print_error("%s: ad_hessian's grad[%zu] = %.17g, ad_gradient's %.17g\n", what, i,
                        grad[i], g1[i]);
            fail();
        }
    free(g1);
}

/* ad_hvp along v, which must succeed, with f(x) and the gradient of
 * ad_gradient; hv against H v with |error| <= rtol sum_j |H_ij v_j|
 * (+ the smallest normal number, for rows of zeros). */
static void hvp_agrees(const char *what, ad_objective f, void *ctx, size_t n, const double *x,
                       const double *v, const double *grad, const double *H, double rtol)
{
    double fx = 0.0, fg;
    double *g = dalloc(n), *g1 = dalloc(n), *hv = dalloc(n);
    ad_status s = ad_hvp(f, ctx, n, x, v, &fx, g, hv);
    if (s != AD_OK) {
        print_error("%s: ad_hvp returned %d (%s)\n", what, (int)s, ad_strerror(s));
        fail();
    }
    fg = gradient_ok(f, ctx, n, x, g1);
    if (!agree(fx, fg)) {
        print_error("%s: ad_hvp's f = %.17g, ad_gradient's %.17g\n", what, fx, fg);
        fail();
    }
    for (size_t i = 0; i < n; i++) {
        double want = 0.0, scale = 0.0;
        if (!agree(g[i], g1[i]) || !agree(g[i], grad[i])) {
            print_error("%s: ad_hvp's grad[%zu] = %.17g, ad_gradient's %.17g\n", what, i, g[i],
                        g1[i]);
            fail();
        }
        for (size_t j = 0; j < n; j++) {
            want += H[i * n + j] * v[j];
            scale += fabs(H[i * n + j] * v[j]);
        }
        if (!(fabs(hv[i] - want) <= rtol * scale + 0x1p-1022)) {
            print_error("%s: (H v)[%zu] = %.17g by ad_hvp, %.17g from ad_hessian\n", what, i,
                        hv[i], want);
            fail();
        }
    }
    free(g), free(g1), free(hv);
}

/* ad_hessian against finite differences of the gradient at x: entries
 * within RTOL |fd| + noise, H symmetric to the same tolerance; ad_hvp
 * along a random v agrees. */
static void check_against_fd(const char *what, ad_objective f, void *ctx, size_t n,
                             const double *x, uint64_t *rng)
{
    double *H = dalloc(n * n), *Hfd = dalloc(n * n), *noise = dalloc(n * n);
    double *g = dalloc(n), *v = dalloc(n);
    hessian_ok(what, f, ctx, n, x, g, H);
    fd_hessian(f, ctx, n, x, Hfd, noise);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++) {
            entry_near(what, i, j, H[i * n + j], Hfd[i * n + j], RTOL, noise[i * n + j]);
            entry_near(what, i, j, H[i * n + j], H[j * n + i], RTOL,
                       noise[i * n + j] + noise[j * n + i]);
        }
    fill_uniform(rng, v, n, -1.0, 1.0);
    hvp_agrees(what, f, ctx, n, x, v, g, H, 8 * EPS);
    free(H), free(Hfd), free(noise), free(g), free(v);
}

/* ======================================================================
 * 2. Elementary operations against finite differences of the gradient
 * ====================================================================== */

static void test_unary(void **state)
{
    const unary_op *op = *state;
    char what[64];
    uint64_t rng = 0x5ec0d001;
    snprintf(what, sizeof what, "%s", op->name);
    for (int i = 0; i < POINTS; i++) {
        double x = draw_unary(op, &rng, op->lo, op->hi);
        check_against_fd(what, unary_objective, (void *)op, 1, &x, &rng);
    }
}

/* The gamma functions left of 0, between their poles (keep_off_gamma_poles:
 * at least 0.15 from each). */
static void test_gamma_negative(void **state)
{
    static const unary_op *const ops[] = {&unary_lgamma, &unary_tgamma};
    uint64_t rng = 0x6a77a;
    (void)state;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < POINTS; i++) {
            double x = draw_unary(ops[k], &rng, -4.85, -0.15);
            check_against_fd(ops[k]->name, unary_objective, (void *)ops[k], 1, &x, &rng);
        }
}

static void check_binary_at(binary_point *p, uint64_t *rng)
{
    char what[64];
    double ab[2] = {p->a, p->b};
    snprintf(what, sizeof what, "%s_rr(%g, %g)", p->op->name, p->a, p->b);
    check_against_fd(what, objective_rr, p, 2, ab, rng);
    snprintf(what, sizeof what, "%s_rd(%g, %g)", p->op->name, p->a, p->b);
    check_against_fd(what, objective_rd, p, 1, &p->a, rng);
    snprintf(what, sizeof what, "%s_dr(%g, %g)", p->op->name, p->a, p->b);
    check_against_fd(what, objective_dr, p, 1, &p->b, rng);
}

static void test_binary(void **state)
{
    binary_point p = {*state, 0.0, 0.0};
    uint64_t rng = 0x5ec0d002;
    for (int i = 0; i < POINTS; i++) {
        draw_binary(&p, &rng);
        check_binary_at(&p, &rng);
    }
}

/* pow's forms beyond the box of ops_list.h: a negative base with integer
 * exponents (pow_rd: x^k, k = -3..3), and the constant base of pow_dr
 * across (0, 4] (c^x is smooth in x there). */
static void test_pow_forms(void **state)
{
    uint64_t rng = 0x90e5;
    (void)state;
    for (int k = -3; k <= 3; k++)
        for (int i = 0; i < 10; i++) {
            binary_point p = {&binary_pow, rng_uniform(&rng, -4.0, -0.1), (double)k};
            char what[64];
            snprintf(what, sizeof what, "pow_rd(%g, %d)", p.a, k);
            check_against_fd(what, objective_rd, &p, 1, &p.a, &rng);
        }
    for (int i = 0; i < POINTS; i++) {
        binary_point p = {&binary_pow, rng_uniform(&rng, 0.05, 4.0), rng_uniform(&rng, -5.0, 5.0)};
        check_against_fd("pow_dr", objective_dr, &p, 1, &p.b, &rng);
    }
}

/* ======================================================================
 * 3. Array primitives against closed-form Hessians
 * ====================================================================== */

enum pkind { P_DOT, P_DOT_RD, P_DOT_DR, P_SUM, P_SQNORM, P_PROD, P_LSE, PKINDS };
static const char *const pkind_name[PKINDS] = {"dot_r", "dot_rd", "dot_dr", "sum", "sqnorm",
                                                "prod", "logsumexp"};

#define PMAX 80  /* elements */

/* A primitive over e[0..k) (dot_r: a = e[0..k), b = e[k..2k)).  Element e
 * is input in[e], or the constant val[e] when in[e] < 0; an input may feed
 * several elements.  outer: the objective is sin(P) rather than P, so that
 * the cotangent reaching the primitive has a nonzero tangent. */
typedef struct prim {
    enum pkind kind;
    size_t k, n;             /* elements per array, inputs */
    int in[2 * PMAX];
    double val[2 * PMAX];    /* the elements' values (inputs' at the point) */
    double c[PMAX];          /* dot_rd / dot_dr's constant vector */
    int outer;
} prim;

static size_t prim_elements(const prim *p)
{
    return p->kind == P_DOT ? 2 * p->k : p->k;
}

static ad_real prim_value(const prim *p, const ad_real *e)
{
    size_t k = p->k;
    switch (p->kind) {
    case P_DOT: return ad_dot(k, (ad_real *)e, (ad_real *)e + k);
    case P_DOT_RD: return ad_dot(k, (ad_real *)e, (double *)p->c);
    case P_DOT_DR: return ad_dot(k, (double *)p->c, (ad_real *)e);
    case P_SUM: return ad_sum(k, (ad_real *)e);
    case P_SQNORM: return ad_sqnorm(k, (ad_real *)e);
    case P_PROD: return ad_prod(k, (ad_real *)e);
    default: return ad_logsumexp(k, (ad_real *)e);
    }
}

static ad_real prim_objective(const ad_real *x, size_t n, void *ctx)
{
    const prim *p = ctx;
    ad_real e[2 * PMAX];
    (void)n;
    for (size_t i = 0; i < prim_elements(p); i++)
        e[i] = p->in[i] >= 0 ? x[p->in[i]] : ad_const(p->val[i]);
    ad_real r = prim_value(p, e);
    return p->outer ? ad_sin(r) : r;
}

/* The product of the elements other than i and j (i may equal j). */
static double prod_except(const double *v, size_t k, size_t i, size_t j)
{
    double q = 1.0;
    for (size_t l = 0; l < k; l++)
        if (l != i && l != j)
            q *= v[l];
    return q;
}

/* P, its gradient and Hessian over the elements (E x E), in closed form;
 * scale[e f]: the magnitude the rounding of entry (e, f) is relative to. */
static double prim_closed(const prim *p, double *g, double *H, double *scale)
{
    size_t k = p->k, E = prim_elements(p);
    const double *v = p->val;
    double P = 0.0, mx = -INFINITY, s = 0.0;
    memset(g, 0, E * sizeof *g);
    memset(H, 0, E * E * sizeof *H);
    for (size_t i = 0; i < E * E; i++)
        scale[i] = 0.0;
    switch (p->kind) {
    case P_DOT:
        for (size_t l = 0; l < k; l++) {
            P += v[l] * v[k + l];
            g[l] = v[k + l];
            g[k + l] = v[l];
            H[l * E + k + l] = H[(k + l) * E + l] = 1.0;
        }
        break;
    case P_DOT_RD:
    case P_DOT_DR:
        for (size_t l = 0; l < k; l++) {
            P += v[l] * p->c[l];
            g[l] = p->c[l];
        }
        break;
    case P_SUM:
        for (size_t l = 0; l < k; l++) {
            P += v[l];
            g[l] = 1.0;
        }
        break;
    case P_SQNORM:
        for (size_t l = 0; l < k; l++) {
            P += v[l] * v[l];
            g[l] = 2.0 * v[l];
            H[l * E + l] = 2.0;
        }
        break;
    case P_PROD:
        P = prod_except(v, k, k, k);
        for (size_t i = 0; i < k; i++) {
            g[i] = prod_except(v, k, i, i);
            for (size_t j = 0; j < k; j++)
                if (j != i)
                    H[i * E + j] = prod_except(v, k, i, j);
        }
        break;
    default:
        for (size_t l = 0; l < k; l++)
            mx = fmax(mx, v[l]);
        for (size_t l = 0; l < k; l++)
            s += exp(v[l] - mx);
        P = mx + log(s);
        for (size_t l = 0; l < k; l++)
            g[l] = exp(v[l] - mx) / s;
        for (size_t i = 0; i < k; i++)
            for (size_t j = 0; j < k; j++)
                H[i * E + j] = (i == j ? g[i] : 0.0) - g[i] * g[j];
        /* p(1 - p) cancels: its error is relative to p */
        for (size_t i = 0; i < k; i++)
            for (size_t j = 0; j < k; j++)
                scale[i * E + j] = g[i];
        break;
    }
    for (size_t i = 0; i < E * E; i++)
        scale[i] += fabs(H[i]);
    return P;
}

/* Value, gradient and Hessian of the objective over the inputs: the
 * elements' sums over each input's elements, composed with sin if outer. */
static void prim_want(const prim *p, double *fx, double *grad, double *H, double *scale)
{
    size_t E = prim_elements(p), n = p->n;
    double *ge = dalloc(E), *He = dalloc(E * E), *se = dalloc(E * E);
    double P = prim_closed(p, ge, He, se);
    double d1 = p->outer ? cos(P) : 1.0, d2 = p->outer ? -sin(P) : 0.0;
    *fx = p->outer ? sin(P) : P;
    memset(grad, 0, n * sizeof *grad);
    memset(H, 0, n * n * sizeof *H);
    memset(scale, 0, n * n * sizeof *scale);
    for (size_t e = 0; e < E; e++) {
        if (p->in[e] < 0)
            continue;
        grad[p->in[e]] += ge[e];
        for (size_t f = 0; f < E; f++)
            if (p->in[f] >= 0) {
                size_t ij = (size_t)p->in[e] * n + (size_t)p->in[f];
                H[ij] += He[e * E + f];
                scale[ij] += se[e * E + f];
            }
    }
    for (size_t i = 0; i < n * n; i++) {
        size_t r = i / n, c = i % n;
        double chain = grad[r] * grad[c];
        H[i] = d1 * H[i] + d2 * chain;
        scale[i] = fabs(d1) * scale[i] + fabs(d2 * chain);
    }
    for (size_t i = 0; i < n; i++)
        grad[i] *= d1;
    free(ge), free(He), free(se);
}

/* Elements and inputs for a case: pattern 0 all active and distinct,
 * 1 every third element a constant, 2 inputs repeated (element e is input
 * e mod 3, or for dot_r a . a). */
static void prim_setup(prim *p, enum pkind kind, size_t k, int pattern, uint64_t *rng)
{
    size_t E;
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->k = k;
    E = prim_elements(p);
    fill_uniform(rng, p->c, k, -2.0, 2.0);
    for (size_t e = 0; e < E; e++) {
        double mag;
        switch (kind) {
        case P_PROD: mag = rng_uniform(rng, 0.5, 1.5); break;
        case P_LSE: mag = rng_uniform(rng, 0.0, 4.0); break;
        default: mag = rng_uniform(rng, 0.25, 2.0); break;
        }
        p->val[e] = kind != P_LSE && rng_next(rng) % 2 ? -mag : mag;
    }
    for (size_t e = 0; e < E; e++) {
        if (pattern == 1 && e % 3 == 1) {
            p->in[e] = -1;
            continue;
        }
        if (pattern == 2) {
            size_t src = kind == P_DOT ? e % k : e % 3;
            if (kind != P_DOT && src >= k)
                src = 0;
            p->in[e] = (int)src;
            p->val[e] = p->val[src];
            continue;
        }
        p->in[e] = (int)p->n++;
    }
    if (pattern == 2)
        p->n = kind == P_DOT ? k : (k < 3 ? k : 3);
}

/* The inputs' values from the elements. */
static void prim_point(const prim *p, double *x)
{
    for (size_t e = 0; e < prim_elements(p); e++)
        if (p->in[e] >= 0)
            x[p->in[e]] = p->val[e];
}

/* P (outers = 1), and sin(P) too (outers = 2). */
static void check_prim(prim *p, const char *label, uint64_t *rng, int outers)
{
    size_t n = p->n;
    double *x = dalloc(n), *g = dalloc(n), *H = dalloc(n * n), *gw = dalloc(n);
    double *Hw = dalloc(n * n), *sw = dalloc(n * n), *v = dalloc(n);
    char what[96];
    prim_point(p, x);
    for (p->outer = 0; p->outer < outers; p->outer++) {
        double fw;
        snprintf(what, sizeof what, "%s%s%s", p->outer ? "sin o " : "", pkind_name[p->kind], label);
        hessian_ok(what, prim_objective, p, n, x, g, H);
        prim_want(p, &fw, gw, Hw, sw);
        /* prod over at most 80 factors, logsumexp over 80 terms: the
         * closed forms and dualrev's differ by a few hundred ulps at most */
        for (size_t i = 0; i < n * n; i++)
            entry_near(what, i / n, i % n, H[i], Hw[i], 0.0, 1e-13 * sw[i]);
        fill_uniform(rng, v, n, -1.0, 1.0);
        hvp_agrees(what, prim_objective, p, n, x, v, g, H, 1e-13);
    }
    free(x), free(g), free(H), free(gw), free(Hw), free(sw), free(v);
}

static void test_primitives_closed_form(void **state)
{
    static const size_t sizes[] = {1, 2, 3, 4, 5, 8, 9, 17, 33, 80};
    uint64_t rng = 0x9a1;
    (void)state;
    for (int kind = 0; kind < PKINDS; kind++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (int pattern = 0; pattern < 3; pattern++) {
                prim p;
                char label[48];
                prim_setup(&p, (enum pkind)kind, sizes[s], pattern, &rng);
                snprintf(label, sizeof label, " k=%zu pattern %d", sizes[s], pattern);
                check_prim(&p, label, &rng, 2);
            }
}

/* A primitive whose arguments fill one slot is a plain record (a linear
 * kind has no header).  Its second partials are those of a linear record,
 * 0, whatever the record at the same place of an earlier recording held. */
static ad_real exp_of_first(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_exp(ad_mul(x[0], x[1]));
}

static ad_real lone_slots(const ad_real *x, size_t n, void *ctx)
{
    const int *which = ctx;
    static const double c[2] = {3.0, -2.0};
    ad_real y[1];
    (void)n;
    switch (*which) {
    case 0: return ad_sum(2, (ad_real *)x);
    case 1: return ad_dot(1, (ad_real *)x, c);
    case 2: return ad_dot(2, c, (ad_real *)x);
    default: ad_matvec(1, 2, c, (ad_real *)x, y); return y[0];
    }
}

static void test_lone_linear_slot(void **state)
{
    const double x[2] = {0.5, 1.5};
    (void)state;
    for (int which = 0; which < 4; which++) {
        double g[2], H[4];
        hessian_ok("exp(x y)", exp_of_first, NULL, 2, x, g, H);  /* nonzero second partials */
        hessian_ok("lone slot", lone_slots, &which, 2, x, g, H);
        for (int i = 0; i < 4; i++)
            entry_near("one-slot sum/dot/matvec", (size_t)which, (size_t)i, H[i], 0.0, 0.0, 0.0);
    }
}

/* The same primitives against finite differences: an independent oracle
 * for the closed forms above. */
static void test_primitives_fd(void **state)
{
    static const size_t sizes[] = {1, 2, 3, 5, 9};
    uint64_t rng = 0xfd1;
    (void)state;
    for (int kind = 0; kind < PKINDS; kind++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            prim p;
            double x[2 * PMAX];
            prim_setup(&p, (enum pkind)kind, sizes[s], 1, &rng);
            prim_point(&p, x);
            for (p.outer = 0; p.outer <= 1; p.outer++)
                check_against_fd(pkind_name[kind], prim_objective, &p, p.n, x, &rng);
        }
}

/* ad_prod at zeros: the Hessian's entries are products of the other
 * elements, exactly; one zero leaves only its row and column, two zeros
 * only the entry between them, three nothing.  A constant zero zeroes all. */
static void test_prod_zeros(void **state)
{
    static const size_t k = 7;
    static const int zeros[][3] = {{2, -1, -1}, {0, -1, -1}, {6, -1, -1}, {1, 4, -1},
                                   {0, 6, -1},  {3, 4, -1},  {0, 3, 5}};
    uint64_t rng = 0x2e40;
    (void)state;
    for (size_t z = 0; z < sizeof zeros / sizeof zeros[0]; z++)
        for (int constant_zero = 0; constant_zero <= 1; constant_zero++) {
            prim p;
            char label[64];
            prim_setup(&p, P_PROD, k, 0, &rng);
            for (int q = 0; q < 3; q++)
                if (zeros[z][q] >= 0)
                    p.val[zeros[z][q]] = q == 1 ? -0.0 : 0.0;
            if (constant_zero) {  /* the first zero is a constant: renumber */
                p.in[zeros[z][0]] = -1;
                p.n = 0;
                for (size_t e = 0; e < k; e++)
                    if (p.in[e] >= 0)
                        p.in[e] = (int)p.n++;
            }
            snprintf(label, sizeof label, " zeros %d %d %d%s", zeros[z][0], zeros[z][1],
                     zeros[z][2], constant_zero ? " (first constant)" : "");
            /* entries whose closed form is 0 must be exactly 0 (the
             * tolerance is relative): products of the other elements */
            check_prim(&p, label, &rng, 2);
        }
}

/* ad_logsumexp at large inputs: diag(p) - p p^T, finite, from the
 * softmax shifted by the largest element. */
static void test_logsumexp_large(void **state)
{
    static const double offsets[] = {700.0, 1000.0, -1000.0, 1e6, -1e300};
    uint64_t rng = 0x15e;
    (void)state;
    for (size_t o = 0; o < sizeof offsets / sizeof offsets[0]; o++)
        for (size_t k = 1; k <= 9; k += 4) {
            prim p;
            char label[64];
            prim_setup(&p, P_LSE, k, 0, &rng);
            for (size_t e = 0; e < k; e++)  /* spread by O(1): a soft maximum */
                p.val[e] = offsets[o] + (fabs(offsets[o]) > 1e10 ? 1e284 : 1.0) * p.val[e];
            snprintf(label, sizeof label, " at %g", offsets[o]);
            /* sin(P) is meaningless where P's ulp is 1e284 */
            check_prim(&p, label, &rng, fabs(offsets[o]) > 1e10 ? 1 : 2);
        }
    /* Equal huge values: p = 1/k exactly, H = diag(1/k) - 1/k^2. */
    for (size_t k = 1; k <= 8; k *= 2) {
        double x[8], g[8], H[64], fx;
        prim p;
        prim_setup(&p, P_LSE, k, 0, &rng);
        for (size_t e = 0; e < k; e++)
            x[e] = p.val[e] = 1e308;
        assert_int_equal(ad_hessian(prim_objective, &p, k, x, &fx, g, H), AD_OK);
        for (size_t i = 0; i < k; i++) {
            assert_same(g[i], 1.0 / (double)k);
            for (size_t j = 0; j < k; j++)
                assert_same(H[i * k + j], (i == j ? 1.0 / (double)k : 0.0) -
                                              1.0 / (double)k / (double)k);
        }
    }
}

/* ---- vector-valued primitives and recorded matrices, composed with
 * sum_j sin(y_j) (their Hessians are then A^T diag(-sin y) A and the
 * bilinear terms) ---- */

enum vform { V_MATVEC, V_MATVEC_RR, V_AXPY, V_MAT_RR, V_MAT_RD, V_MAT_TWICE, V_WRAP, VFORMS };
static const char *const vform_name[VFORMS] = {"matvec", "matvec_rr", "axpy", "mat_vec rr",
                                                "mat_vec rd", "mat_vec twice", "wrapped mat_vec"};

enum shape { S_FULL, S_LOWER, S_UPPER };

#define VMAX 8

/* Inputs in order: the active matrix entries (row-major; for matvec and a
 * wrapped double matrix none: A is constant), then x; for axpy x then y. */
typedef struct vcase {
    enum vform form;
    size_t m, n;
    enum shape shape;
    int const_entries;       /* every fourth entry inside the shape a constant */
    double A[VMAX * VMAX];   /* values at the point (entries outside the shape 0) */
    double x[VMAX];          /* the vector's values (rd: the constant vector) */
    double a;                /* axpy */
} vcase;

static int inside(const vcase *c, size_t j, size_t l)
{
    return c->shape == S_FULL || (c->shape == S_LOWER ? l <= j : l >= j);
}

static int entry_active(const vcase *c, size_t j, size_t l)
{
    if (c->form == V_MATVEC || c->form == V_WRAP || !inside(c, j, l))
        return 0;
    return !(c->const_entries && (j * c->n + l) % 4 == 3);
}

static size_t vcase_inputs(const vcase *c, double *x)
{
    size_t k = 0;
    if (c->form == V_AXPY) {
        for (size_t i = 0; i < c->n; i++)
            x[k++] = c->x[i];
        for (size_t i = 0; i < c->n; i++)
            x[k++] = c->A[i];  /* y's start, kept in A's first row */
        return k;
    }
    for (size_t j = 0; j < c->m; j++)
        for (size_t l = 0; l < c->n; l++)
            if (entry_active(c, j, l))
                x[k++] = c->A[j * c->n + l];
    if (c->form != V_MAT_RD)
        for (size_t l = 0; l < c->n; l++)
            x[k++] = c->x[l];
    return k;
}

static ad_real vcase_objective(const ad_real *in, size_t n_in, void *ctx)
{
    const vcase *c = ctx;
    ad_real A[VMAX * VMAX], x[VMAX], y[VMAX], z[VMAX];
    size_t k = 0, m = c->m, n = c->n;
    ad_mat M;
    (void)n_in;
    if (c->form == V_AXPY) {
        for (size_t i = 0; i < n; i++)
            x[i] = in[k++];
        for (size_t i = 0; i < n; i++)
            y[i] = in[k++];
        ad_axpy(n, c->a, x, y);
        m = n;
    } else {
        for (size_t j = 0; j < m; j++)
            for (size_t l = 0; l < n; l++)
                A[j * n + l] = entry_active(c, j, l) ? in[k++] : ad_const(c->A[j * n + l]);
        for (size_t l = 0; l < n; l++)
            x[l] = c->form == V_MAT_RD ? ad_const(c->x[l]) : in[k++];
        switch (c->form) {
        case V_MATVEC: ad_matvec(m, n, c->A, x, y); break;
        case V_MATVEC_RR: ad_matvec_rr(m, n, A, x, y); break;
        case V_MAT_RD:
            assert_int_equal(ad_mat_make(m, n, A, &M), AD_OK);
            ad_mat_vec(&M, (double *)c->x, y);
            break;
        case V_WRAP:  /* a double matrix: wrapped, its zero triangle found */
            assert_int_equal(ad_mat_make(m, n, (double *)c->A, &M), AD_OK);
            ad_mat_vec(&M, x, y);
            break;
        default:
            assert_int_equal(ad_mat_make(m, n, A, &M), AD_OK);
            ad_mat_vec(&M, x, y);
            if (c->form == V_MAT_TWICE) {  /* square: y = M (M x), cubic */
                ad_mat_vec(&M, y, z);
                memcpy(y, z, m * sizeof *y);
            }
            break;
        }
    }
    ad_real s = ad_const(0.25);
    for (size_t j = 0; j < m; j++)
        s = ad_add(s, ad_sin(y[j]));
    return s;
}

/* The closed form for the once-applied forms: y = A x (axpy: y0 + a x) and
 * f = sum sin(y_j); H = J^T diag(-sin y) J + sum_j cos(y_j) d2y_j. */
static void vcase_closed(const vcase *c, size_t N, double *H, double *scale)
{
    size_t m = c->form == V_AXPY ? c->n : c->m, n = c->n;
    double *J = dalloc(m * N), y[VMAX];
    size_t col[VMAX * VMAX];  /* input index of entry (j, l), or SIZE_MAX */
    size_t k = 0, xoff;
    memset(J, 0, m * N * sizeof *J);
    memset(H, 0, N * N * sizeof *H);
    memset(scale, 0, N * N * sizeof *scale);
    if (c->form == V_AXPY) {
        for (size_t i = 0; i < n; i++) {
            y[i] = c->A[i] + c->a * c->x[i];
            J[i * N + i] = c->a;
            J[i * N + n + i] = 1.0;
        }
    } else {
        for (size_t j = 0; j < m; j++)
            for (size_t l = 0; l < n; l++)
                col[j * n + l] = entry_active(c, j, l) ? k++ : SIZE_MAX;
        xoff = k;
        for (size_t j = 0; j < m; j++) {
            y[j] = 0.0;
            for (size_t l = 0; l < n; l++) {
                double a = inside(c, j, l) ? c->A[j * n + l] : 0.0;
                y[j] += a * c->x[l];
                if (col[j * n + l] != SIZE_MAX)
                    J[j * N + col[j * n + l]] = c->x[l];
                if (c->form != V_MAT_RD)  /* x active */
                    J[j * N + xoff + l] = a;
            }
        }
        /* the bilinear part: d2 y_j / dA_jl dx_l = 1 */
        if (c->form != V_MATVEC && c->form != V_MAT_RD)
            for (size_t j = 0; j < m; j++)
                for (size_t l = 0; l < n; l++)
                    if (col[j * n + l] != SIZE_MAX) {
                        size_t p = col[j * n + l], q = xoff + l;
                        H[p * N + q] += cos(y[j]);
                        H[q * N + p] += cos(y[j]);
                        scale[p * N + q] += fabs(cos(y[j]));
                        scale[q * N + p] += fabs(cos(y[j]));
                    }
    }
    for (size_t j = 0; j < m; j++)
        for (size_t p = 0; p < N; p++)
            for (size_t q = 0; q < N; q++) {
                double t = -sin(y[j]) * J[j * N + p] * J[j * N + q];
                H[p * N + q] += t;
                scale[p * N + q] += fabs(t);
            }
    free(J);
}

static void check_vcase(vcase *c, uint64_t *rng)
{
    double in[2 * VMAX * VMAX], g[2 * VMAX * VMAX], v[2 * VMAX * VMAX];
    size_t N = vcase_inputs(c, in);
    double *H = dalloc(N * N), *Hw = dalloc(N * N), *sw = dalloc(N * N);
    char what[96];
    snprintf(what, sizeof what, "%s %zu x %zu shape %d consts %d", vform_name[c->form], c->m,
             c->n, (int)c->shape, c->const_entries);
    check_against_fd(what, vcase_objective, c, N, in, rng);
    if (c->form != V_MAT_TWICE) {
        hessian_ok(what, vcase_objective, c, N, in, g, H);
        vcase_closed(c, N, Hw, sw);
        for (size_t i = 0; i < N * N; i++)
            entry_near(what, i / N, i % N, H[i], Hw[i], 0.0, 1e-13 * sw[i] + 1e-300);
        fill_uniform(rng, v, N, -1.0, 1.0);
        hvp_agrees(what, vcase_objective, c, N, in, v, g, H, 1e-13);
    }
    free(H), free(Hw), free(sw);
}

static void test_vector_primitives(void **state)
{
    static const size_t shapes[][2] = {{1, 1}, {1, 3}, {2, 3}, {3, 2}, {3, 3}, {4, 4}, {5, 7}};
    uint64_t rng = 0x7ec;
    (void)state;
    for (int f = 0; f < VFORMS; f++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int sh = 0; sh < 3; sh++)
                for (int consts = 0; consts <= 1; consts++) {
                    vcase c;
                    memset(&c, 0, sizeof c);
                    c.form = (enum vform)f;
                    c.m = shapes[s][0];
                    c.n = shapes[s][1];
                    c.shape = (enum shape)sh;
                    c.const_entries = consts;
                    if (f == V_MAT_TWICE && c.m != c.n)
                        continue;
                    if ((f == V_AXPY || f == V_MATVEC) && (sh || consts))
                        continue;
                    if (f == V_WRAP && consts)
                        continue;
                    fill_uniform(&rng, c.A, c.m * c.n, -1.5, 1.5);
                    fill_uniform(&rng, c.x, c.n, -1.5, 1.5);
                    for (size_t j = 0; j < c.m; j++)
                        for (size_t l = 0; l < c.n; l++)
                            if (!inside(&c, j, l))
                                c.A[j * c.n + l] = 0.0;
                    c.a = rng_uniform(&rng, -2.0, 2.0);
                    check_vcase(&c, &rng);
                }
}

/* ======================================================================
 * 4. Rosenbrock against its closed form
 * ====================================================================== */

static ad_real rosenbrock(const ad_real *x, size_t n, void *ctx)
{
    ad_real s = ad_const(0.0);
    (void)ctx;
    for (size_t i = 0; i + 1 < n; i++) {
        ad_real t = ad_sub(x[i + 1], ad_mul(x[i], x[i]));
        ad_real u = ad_sub(1.0, x[i]);
        s = ad_add(s, ad_add(ad_mul(100.0, ad_mul(t, t)), ad_mul(u, u)));
    }
    return s;
}

/* H and, in scale, the sum of the magnitudes of the terms of each entry. */
static void rosenbrock_hessian(size_t n, const double *x, double *H, double *scale)
{
    memset(H, 0, n * n * sizeof *H);
    memset(scale, 0, n * n * sizeof *scale);
    for (size_t i = 0; i + 1 < n; i++) {
        H[i * n + i] += 1200.0 * x[i] * x[i] - 400.0 * x[i + 1] + 2.0;
        scale[i * n + i] += 1200.0 * x[i] * x[i] + 400.0 * fabs(x[i + 1]) + 2.0;
        H[(i + 1) * n + i + 1] += 200.0;
        scale[(i + 1) * n + i + 1] += 200.0;
        H[i * n + i + 1] = H[(i + 1) * n + i] = -400.0 * x[i];
        scale[i * n + i + 1] = scale[(i + 1) * n + i] = 400.0 * fabs(x[i]);
    }
}

/* Each entry is a short sum of products of exact or once-rounded numbers:
 * within 16 ulp of its terms' magnitude. */
static int rosenbrock_matches(size_t n, const double *x, const double *H, double *want,
                              double *scale, char *msg, size_t msg_size)
{
    rosenbrock_hessian(n, x, want, scale);
    for (size_t i = 0; i < n * n; i++)
        if (!(fabs(H[i] - want[i]) <= 16 * EPS * scale[i])) {
            snprintf(msg, msg_size, "n=%zu: H[%zu][%zu] = %.17g, expected %.17g", n, i / n,
                     i % n, H[i], want[i]);
            return 0;
        }
    return 1;
}

static void test_rosenbrock(void **state)
{
    static const size_t ns[] = {2, 10, 100};
    uint64_t rng = 0x4053;
    (void)state;
    for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++)
        for (int trial = 0; trial < 3; trial++) {
            size_t n = ns[s];
            double *x = dalloc(n), *g = dalloc(n), *H = dalloc(n * n), *want = dalloc(n * n);
            double *scale = dalloc(n * n), *v = dalloc(n);
            char msg[160];
            fill_uniform(&rng, x, n, -2.0, 2.0);
            if (trial == 0)
                for (size_t i = 0; i < n; i++)
                    x[i] = 1.0;  /* the minimum: H is positive definite there */
            hessian_ok("rosenbrock", rosenbrock, NULL, n, x, g, H);
            if (!rosenbrock_matches(n, x, H, want, scale, msg, sizeof msg)) {
                print_error("rosenbrock %s\n", msg);
                fail();
            }
            fill_uniform(&rng, v, n, -1.0, 1.0);
            hvp_agrees("rosenbrock", rosenbrock, NULL, n, x, v, g, H, 8 * EPS);
            free(x), free(g), free(H), free(want), free(scale), free(v);
        }
}

/* ======================================================================
 * 5. Random compositions of every operation
 * ====================================================================== */

#define MAX_NODES 160

typedef struct program {
    uint64_t seed;
    int steps;
} program;

/* A node whose value keeps |v| <= bound, or -1. */
static int pick_bounded(uint64_t *rng, const ad_real *node, size_t count, double bound)
{
    for (int tries = 0; tries < 12; tries++) {
        size_t i = (size_t)(rng_next(rng) % count);
        if (fabs(node[i].v) <= bound)
            return (int)i;
    }
    return -1;
}

static int pick_unary(uint64_t *rng, const ad_real *node, size_t count, const unary_op *op)
{
    for (int tries = 0; tries < 12; tries++) {
        size_t i = (size_t)(rng_next(rng) % count);
        double v = node[i].v;
        if (v >= op->lo && v <= op->hi && op->keep(v))
            return (int)i;
    }
    return -1;
}

/* Every operation of dualrev on random earlier nodes, each kept inside the
 * region its finite-difference test samples (so that values and
 * derivatives stay moderate), with constants of every kind mixed in.  The
 * same seed and inputs give the same program: it branches on values only
 * through the choice of arguments. */
static ad_real random_program(const ad_real *x, size_t n, void *ctx)
{
    const program *p = ctx;
    uint64_t rng = p->seed;
    ad_real node[MAX_NODES];
    double coef[MAX_NODES];
    size_t count = 0;
    for (size_t i = 0; i < n && count < MAX_NODES; i++)
        node[count++] = x[i];
    node[count++] = ad_const(0.75);  /* a constant node: ID 0 */
    for (int s = 0; s < p->steps && count + VMAX < MAX_NODES; s++) {
        unsigned what = (unsigned)(rng_next(&rng) % 12);
        if (what < 4) {
            const unary_op *op = unary_op_at(rng_next(&rng) % N_UNARY_OPS);
            int a = pick_unary(&rng, node, count, op);
            if (a >= 0)
                node[count++] = op->ad(node[a]);
        } else if (what < 8) {
            const binary_op *op = binary_op_at(rng_next(&rng) % N_BINARY_OPS);
            int form = (int)(rng_next(&rng) % 3);
            for (int tries = 0; tries < 12; tries++) {
                size_t a = (size_t)(rng_next(&rng) % count), b = (size_t)(rng_next(&rng) % count);
                double av = form == 2 ? rng_uniform(&rng, op->alo, op->ahi) : node[a].v;
                double bv = form == 1 ? rng_uniform(&rng, op->blo, op->bhi) : node[b].v;
                if (!(av >= op->alo && av <= op->ahi && bv >= op->blo && bv <= op->bhi &&
                      op->keep(av, bv)))
                    continue;
                node[count++] = form == 0 ? op->rr(node[a], node[b])
                              : form == 1 ? op->rd(node[a], bv)
                                          : op->dr(av, node[b]);
                break;
            }
        } else if (what < 10) {
            /* an n-ary primitive over k arguments, some constant */
            ad_real args[2 * 6];
            double c[6];
            size_t k = 1 + (size_t)(rng_next(&rng) % 6);
            enum pkind kind = (enum pkind)(rng_next(&rng) % PKINDS);
            double bound = kind == P_PROD ? 1.5 : 3.0;
            size_t got = 0;
            for (size_t i = 0; i < (kind == P_DOT ? 2 * k : k); i++) {
                int a = pick_bounded(&rng, node, count, bound);
                if (a < 0)
                    break;
                args[got++] = rng_next(&rng) % 5 == 0 ? ad_const(node[a].v) : node[a];
            }
            if (got < (kind == P_DOT ? 2 * k : k))
                continue;
            fill_uniform(&rng, c, k, -1.0, 1.0);
            switch (kind) {
            case P_DOT: node[count++] = ad_dot(k, args, args + k); break;
            case P_DOT_RD: node[count++] = ad_dot(k, args, c); break;
            case P_DOT_DR: node[count++] = ad_dot(k, c, args); break;
            case P_SUM: node[count++] = ad_sum(k, args); break;
            case P_SQNORM: node[count++] = ad_sqnorm(k, args); break;
            case P_PROD: node[count++] = ad_prod(k, args); break;
            default: node[count++] = ad_logsumexp(k, args); break;
            }
        } else {
            /* a vector operation: m, k <= 3 */
            size_t m = 1 + (size_t)(rng_next(&rng) % 3), k = 1 + (size_t)(rng_next(&rng) % 3);
            ad_real A[9], v[3], y[3], z[3];
            double Ad[9], vd[3];
            int form = (int)(rng_next(&rng) % 5), ok = 1;
            for (size_t i = 0; i < m * k && ok; i++) {
                int a = pick_bounded(&rng, node, count, 2.0);
                ok = a >= 0;
                A[i] = ok ? node[a] : ad_const(0.0);
                if (rng_next(&rng) % 4 == 0)  /* constants, zeros: triangles appear */
                    A[i] = ad_const(rng_next(&rng) % 2 ? 0.0 : rng_uniform(&rng, -1.0, 1.0));
            }
            for (size_t l = 0; l < k && ok; l++) {
                int a = pick_bounded(&rng, node, count, 2.0);
                ok = a >= 0;
                v[l] = ok ? node[a] : ad_const(0.0);
            }
            if (!ok)
                continue;
            fill_uniform(&rng, Ad, m * k, -1.0, 1.0);
            fill_uniform(&rng, vd, k, -1.0, 1.0);
            size_t outputs = m;
            ad_mat M;
            switch (form) {
            case 0: ad_matvec(m, k, Ad, v, y); break;
            case 1: ad_matvec_rr(m, k, A, v, y); break;
            case 2:
                for (size_t l = 0; l < k; l++)
                    y[l] = A[l];
                ad_axpy(k, Ad[0], v, y);
                outputs = k;
                break;
            case 3:
                if (ad_mat_make(m, k, A, &M) != AD_OK)
                    return ad_const(NAN);
                ad_mat_vec(&M, vd, y);
                break;
            default:
                if (ad_mat_make(m, k, A, &M) != AD_OK)
                    return ad_const(NAN);
                ad_mat_vec(&M, v, y);
                if (m == k) {
                    ad_mat_vec(&M, y, z);
                    for (size_t j = 0; j < m; j++)
                        y[j] = z[j];
                }
                break;
            }
            for (size_t j = 0; j < outputs; j++)
                node[count++] = y[j];
        }
    }
    /* The objective: a random combination of every node (a dot with a
     * constant vector: one more linear record). */
    fill_uniform(&rng, coef, count, -1.0, 1.0);
    return ad_dot(count, node, coef);
}

/* The largest |H_ij| in row i and column j: the magnitude that rounding
 * errors in entry (i, j) are measured against (see test_random_programs). */
static double cross_max(const double *H, size_t n, size_t i, size_t j)
{
    double m = 0.0;
    for (size_t k = 0; k < n; k++)
        m = fmax(m, fmax(fabs(H[i * n + k]), fabs(H[k * n + j])));
    return m;
}

/* Symmetry, ad_hvp along e_j against H's column j, ad_hvp along a random
 * v against H v.
 *
 * Tolerance: each entry is a sum of products of partials and second
 * partials, each a few ulps off; the programs keep every operation inside
 * the region of ops_list.h, so no term is far larger than the largest
 * entries of H in the same row and column, max(row i, col j).  H_ij and
 * H_ji come from different sweeps (directions e_j and e_i):
 *     |H_ij - H_ji| <= 1e-12 max(row i, col j),
 * about a thousand times the worst case observed (8e-16), while an error
 * in a rule is O(1).  ad_hvp(e_j) does lane j's arithmetic alone and
 * matches H's column to 4 ulp of the same scale (on x86-64: bitwise). */
static void check_program(program *p, size_t n, uint64_t *rng)
{
    double *x = dalloc(n), *g = dalloc(n), *H = dalloc(n * n), *e = dalloc(n);
    double *hv = dalloc(n), *gv = dalloc(n), *v = dalloc(n);
    double fx;
    char what[64];
    snprintf(what, sizeof what, "program %llx n=%zu", (unsigned long long)p->seed, n);
    for (size_t i = 0; i < n; i++) {
        double mag = rng_uniform(rng, 0.2, 2.5);
        x[i] = rng_next(rng) % 3 ? mag : -mag;
    }
    hessian_ok(what, random_program, p, n, x, g, H);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < i; j++) {
            double scale = cross_max(H, n, i, j), d = fabs(H[i * n + j] - H[j * n + i]);
            if (!(d <= 1e-12 * scale)) {
                print_error("%s: H[%zu][%zu] = %.17g, H[%zu][%zu] = %.17g\n", what, i, j,
                            H[i * n + j], j, i, H[j * n + i]);
                fail();
            }
        }
    for (size_t j = 0; j < n; j++) {
        memset(e, 0, n * sizeof *e);
        e[j] = 1.0;
        assert_int_equal(ad_hvp(random_program, p, n, x, e, &fx, gv, hv), AD_OK);
        for (size_t i = 0; i < n; i++)
            if (!same_double(hv[i], H[i * n + j]) &&
                !(fabs(hv[i] - H[i * n + j]) <= 4 * EPS * cross_max(H, n, i, j))) {
                print_error("%s: ad_hvp(e_%zu)[%zu] = %.17g, ad_hessian's H[%zu][%zu] = %.17g\n",
                            what, j, i, hv[i], i, j, H[i * n + j]);
                fail();
            }
    }
    fill_uniform(rng, v, n, -1.0, 1.0);
    hvp_agrees(what, random_program, p, n, x, v, g, H, 1e-10);
    free(x), free(g), free(H), free(e), free(hv), free(gv), free(v);
}

static void test_random_programs(void **state)
{
    uint64_t rng = 0xc0de;
    (void)state;
    for (int trial = 0; trial < 300; trial++) {
        program p = {rng_next(&rng), 20 + (int)(rng_next(&rng) % 80)};
        size_t n = 1 + (size_t)(rng_next(&rng) % 9);
        check_program(&p, n, &rng);
    }
}

/* ---- several directions from one recording (ad_hvps) ---- */

/* ad_hvps along k directions against k calls of ad_hvp: the same status,
 * value and gradient, and H v_j to rounding (the lanes' sweep and the
 * single one add the same terms; 4 ulp of their magnitude, from H). */
static void hvps_agree(const char *what, ad_objective f, void *ctx, size_t n, const double *x,
                       size_t k, uint64_t *rng)
{
    double *V = dalloc(k * n + 1), *HV = dalloc(k * n + 1), *H = dalloc(n * n), *g = dalloc(n);
    double *g1 = dalloc(n), *hv = dalloc(n), fx, fx1, fh;
    fill_uniform(rng, V, k * n, -1.0, 1.0);
    assert_int_equal(ad_hessian(f, ctx, n, x, &fh, g1, H), AD_OK);
    assert_int_equal(ad_hvps(f, ctx, n, x, k, V, &fx, g, HV), AD_OK);
    for (size_t j = 0; j < k; j++) {
        assert_int_equal(ad_hvp(f, ctx, n, x, V + j * n, &fx1, g1, hv), AD_OK);
        assert_same(fx, fx1);
        for (size_t i = 0; i < n; i++) {
            double scale = 0.0;
            for (size_t l = 0; l < n; l++)
                scale += fabs(H[i * n + l] * V[j * n + l]);
            assert_same(g[i], g1[i]);
            if (!same_double(HV[j * n + i], hv[i]) &&
                !(fabs(HV[j * n + i] - hv[i]) <= 4 * EPS * scale)) {
                print_error("%s: ad_hvps's (H v_%zu)[%zu] = %.17g, ad_hvp's %.17g\n", what, j, i,
                            HV[j * n + i], hv[i]);
                fail();
            }
        }
    }
    free(V), free(HV), free(H), free(g), free(g1), free(hv);
}

static void test_hvps_against_hvp(void **state)
{
    static const size_t ks[] = {1, 3, 4, 5, 8, 26};
    uint64_t rng = 0x4e5b;
    (void)state;
    for (int trial = 0; trial < 60; trial++) {
        program p = {rng_next(&rng), 20 + (int)(rng_next(&rng) % 80)};
        size_t n = 1 + (size_t)(rng_next(&rng) % 9);
        double x[9];
        for (size_t i = 0; i < n; i++) {
            double mag = rng_uniform(&rng, 0.2, 2.5);
            x[i] = rng_next(&rng) % 3 ? mag : -mag;
        }
        char what[64];
        snprintf(what, sizeof what, "program %llx n=%zu", (unsigned long long)p.seed, n);
        hvps_agree(what, random_program, &p, n, x, ks[trial % 6], &rng);
    }
}

/* H v_j of Rosenbrock's function in closed form, 26 directions. */
static void test_hvps_closed_form(void **state)
{
    enum { N = 12, K = 26 };
    uint64_t rng = 0x5eed;
    double x[N], H[N * N], scale[N * N], V[K * N], HV[K * N], g[N], fx;
    (void)state;
    fill_uniform(&rng, x, N, -1.5, 1.5);
    fill_uniform(&rng, V, K * N, -1.0, 1.0);
    rosenbrock_hessian(N, x, H, scale);
    assert_int_equal(ad_hvps(rosenbrock, NULL, N, x, K, V, &fx, g, HV), AD_OK);
    for (size_t j = 0; j < K; j++)
        for (size_t i = 0; i < N; i++) {
            double want = 0.0, mag = 0.0;
            for (size_t l = 0; l < N; l++) {
                want += H[i * N + l] * V[j * N + l];
                mag += scale[i * N + l] * fabs(V[j * N + l]);
            }
            assert_near(HV[j * N + i], want, 0.0, 32 * EPS * mag);
        }
}

static void no_jvp_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    (void)ctx, (void)n, (void)m;
    y[0] = x[0] * x[0];
}

static void no_jvp_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                       const double *ybar, double *xbar)
{
    (void)ctx, (void)n, (void)m, (void)y;
    xbar[0] = 2.0 * x[0] * ybar[0];
}

static ad_real through_external(const ad_real *x, size_t n, void *ctx)
{
    static const ad_rule rule = {no_jvp_primal, no_jvp_vjp, NULL, NULL};
    ad_real y;
    (void)n, (void)ctx;
    status_unused(ad_external(&rule, NULL, 1, x, 1, &y));
    return y;
}

static void test_hvps_errors(void **state)
{
    double x[3] = {0.5, -0.25, 1.5}, V[6] = {1, 0, 0, 0, 1, 1}, HV[6], g[3], fx = 7.0;
    (void)state;
    assert_int_equal(ad_hvps(rosenbrock, NULL, 3, x, 0, NULL, NULL, NULL, NULL), AD_OK);
    assert_int_equal(ad_hvps(NULL, NULL, 3, x, 2, V, &fx, g, HV), AD_EINVAL);
    assert_nan(fx);
    for (size_t i = 0; i < 6; i++)
        assert_nan(HV[i]);
    assert_int_equal(ad_hvps(rosenbrock, NULL, 3, x, 2, NULL, &fx, g, HV), AD_EINVAL);
    assert_int_equal(ad_hvps(rosenbrock, NULL, 3, x, 2, V, &fx, g, NULL), AD_EINVAL);
    assert_int_equal(ad_hvps(rosenbrock, NULL, 3, x, SIZE_MAX / 2, V, &fx, g, HV), AD_EINVAL);
    assert_int_equal(ad_hvps(through_external, NULL, 1, x, 2, V, &fx, g, HV), AD_ENOTSUP);
    assert_nan(HV[0]);
    assert_nan(HV[1]);
    /* allocation failing at every count: AD_ENOMEM and NaN, then right */
    assert_int_equal(ad_release(), AD_OK);
    double want[6], gw[3], fw;
    assert_int_equal(ad_hvps(rosenbrock, NULL, 3, x, 2, V, &fw, gw, want), AD_OK);
    int ok = 0;
    for (long i = 0; i < 64 && !ok; i++) {
        assert_int_equal(ad_release(), AD_OK);
        ad_test_fail_alloc_after(i);
        ad_status s = ad_hvps(rosenbrock, NULL, 3, x, 2, V, &fx, g, HV);
        ad_test_fail_alloc_after(-1);
        if (s == AD_OK) {
            ok = 1;
            break;
        }
        assert_int_equal(s, AD_ENOMEM);
        assert_nan(fx);
        for (size_t j = 0; j < 6; j++)
            assert_nan(HV[j]);
        assert_int_equal(ad_hvps(rosenbrock, NULL, 3, x, 2, V, &fx, g, HV), AD_OK);
        for (size_t j = 0; j < 6; j++)
            assert_same(HV[j], want[j]);
    }
    assert_true(ok);
}

/* ======================================================================
 * 6. Edge cases and conventions
 * ====================================================================== */

static ad_real const_objective(const ad_real *x, size_t n, void *ctx)
{
    (void)x, (void)n, (void)ctx;
    return ad_const(4.5);
}

static ad_real input_objective(const ad_real *x, size_t n, void *ctx)
{
    const size_t *which = ctx;
    (void)n;
    return x[*which];
}

static ad_real cube(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(x[0], ad_mul(x[0], x[0]));
}

/* n = 0 (NULL arrays allowed), n = 1, a constant objective, an objective
 * that is one of its inputs (no records), or an input plus a constant
 * (which shares the input's ID). */
static void test_sizes_and_trivial_objectives(void **state)
{
    double fx = 0.0, x[5] = {0.5, -1.0, 2.0, 3.0, -4.0}, g[5], H[25], hv[5];
    const double v[5] = {1.0, 2.0, 3.0, 4.0, 5.0};
    (void)state;
    assert_int_equal(ad_hessian(const_objective, NULL, 0, NULL, &fx, NULL, NULL), AD_OK);
    assert_same(fx, 4.5);
    fx = 0.0;
    assert_int_equal(ad_hvp(const_objective, NULL, 0, NULL, NULL, &fx, NULL, NULL), AD_OK);
    assert_same(fx, 4.5);
    assert_int_equal(ad_hessian(cube, NULL, 1, x, &fx, g, H), AD_OK);  /* one lane */
    assert_same(fx, 0.125);
    assert_same(g[0], 0.75);
    assert_same(H[0], 3.0);
    assert_int_equal(ad_hvp(cube, NULL, 1, x, v + 1, &fx, g, hv), AD_OK);
    assert_same(hv[0], 6.0);
    for (size_t n = 1; n <= 5; n++) {
        assert_int_equal(ad_hessian(const_objective, NULL, n, x, &fx, g, H), AD_OK);
        assert_same(fx, 4.5);
        for (size_t i = 0; i < n; i++) {
            assert_same(g[i], 0.0);
            for (size_t j = 0; j < n; j++)
                assert_same(H[i * n + j], 0.0);
        }
        assert_int_equal(ad_hvp(const_objective, NULL, n, x, v, &fx, g, hv), AD_OK);
        for (size_t i = 0; i < n; i++)
            assert_same(hv[i], 0.0);
        for (size_t w = 0; w < n; w++) {
            assert_int_equal(ad_hessian(input_objective, &w, n, x, &fx, g, H), AD_OK);
            assert_same(fx, x[w]);
            for (size_t i = 0; i < n; i++) {
                assert_same(g[i], i == w ? 1.0 : 0.0);
                for (size_t j = 0; j < n; j++)
                    assert_same(H[i * n + j], 0.0);
            }
            assert_int_equal(ad_hvp(input_objective, &w, n, x, v, &fx, g, hv), AD_OK);
            for (size_t i = 0; i < n; i++)
                assert_same(hv[i], 0.0);
        }
    }
}

/* Objectives of one or two inputs whose exact Hessian is finite although
 * a constant (ID 0) argument is 0 or Inf somewhere along the way. */
typedef struct edge {
    const char *name;
    size_t n;
    double x[2];
    ad_real (*f)(const ad_real *x);
    double H[4];
} edge;

static ad_real e_times_zero(const ad_real *x) { return ad_mul(x[0], 0.0); }
static ad_real e_zero_times(const ad_real *x) { return ad_mul(0.0, x[0]); }
static ad_real e_square_times_zero(const ad_real *x) { return ad_mul(ad_mul(x[0], x[0]), 0.0); }
static ad_real e_exp_times_zero(const ad_real *x) { return ad_mul(ad_exp(x[0]), 0.0); }
static ad_real e_div_const(const ad_real *x) { return ad_div(x[0], 4.0); }
static ad_real e_const_div(const ad_real *x) { return ad_div(4.0, x[0]); }
static ad_real e_div_inf(const ad_real *x) { return ad_div(ad_mul(x[0], x[0]), INFINITY); }
static ad_real e_pow2(const ad_real *x) { return ad_pow(x[0], 2.0); }
static ad_real e_pow0(const ad_real *x) { return ad_pow(x[0], 0.0); }
static ad_real e_pow1(const ad_real *x) { return ad_pow(x[0], 1.0); }
static ad_real e_pow3(const ad_real *x) { return ad_pow(x[0], 3.0); }
static ad_real e_zero_pow(const ad_real *x) { return ad_pow(0.0, x[0]); }
static ad_real e_pow_rr(const ad_real *x) { return ad_pow(x[0], x[1]); }
static ad_real e_fmin_inf(const ad_real *x) { return ad_mul(ad_fmin(x[0], INFINITY), x[0]); }
static ad_real e_fmax_ninf(const ad_real *x) { return ad_fmax(ad_mul(x[0], x[0]), -INFINITY); }
static ad_real e_hypot_zero(const ad_real *x) { return ad_hypot(x[0], 0.0); }
static ad_real e_plus_inf(const ad_real *x) { return ad_add(ad_mul(x[0], x[0]), -INFINITY); }
static ad_real e_sum_with_consts(const ad_real *x)
{
    ad_real e[4] = {x[0], ad_const(INFINITY), x[1], ad_const(0.0)};
    return ad_add(ad_mul(x[0], x[1]), ad_sum(4, e));
}
static ad_real e_dot_const_zero(const ad_real *x)
{
    ad_real e[3] = {x[0], x[1], ad_const(2.0)};
    ad_real f[3] = {x[1], ad_const(0.0), ad_const(0.0)};
    return ad_add(ad_dot(3, e, f), ad_mul(x[0], x[0]));
}
static ad_real e_prod_const_zero(const ad_real *x)
{
    ad_real e[3] = {x[0], ad_const(0.0), x[1]};
    return ad_add(ad_prod(3, e), ad_mul(x[0], x[1]));
}

static ad_real edge_objective(const ad_real *x, size_t n, void *ctx)
{
    const edge *e = ctx;
    (void)n;
    return e->f(x);
}

static const edge edges[] = {
    {"x * 0", 1, {3.0, 0}, e_times_zero, {0}},
    {"0 * x", 1, {-2.0, 0}, e_zero_times, {0}},
    {"x^2 * 0", 1, {5.0, 0}, e_square_times_zero, {0}},
    {"exp(x) * 0", 1, {700.0, 0}, e_exp_times_zero, {0}},
    {"x / 4", 1, {3.0, 0}, e_div_const, {0}},
    {"4 / x", 1, {2.0, 0}, e_const_div, {1.0}},
    {"x^2 / Inf", 1, {2.0, 0}, e_div_inf, {0}},
    {"pow(x, 2) at 0", 1, {0.0, 0}, e_pow2, {2.0}},
    {"pow(x, 0) at 0", 1, {0.0, 0}, e_pow0, {0}},
    {"pow(x, 3) at 0", 1, {0.0, 0}, e_pow3, {0}},
    {"pow(x, 1) at 2", 1, {2.0, 0}, e_pow1, {0}},
    {"pow(0, x) at 1.5", 1, {1.5, 0}, e_zero_pow, {0}},
    {"pow(x, y) at (0, 2)", 2, {0.0, 2.0}, e_pow_rr, {2.0, 0, 0, 0}},
    {"pow(x, y) at (0, 3)", 2, {0.0, 3.0}, e_pow_rr, {0, 0, 0, 0}},
    {"fmin(x, Inf) x", 1, {1.5, 0}, e_fmin_inf, {2.0}},
    {"fmax(x^2, -Inf)", 1, {1.5, 0}, e_fmax_ninf, {2.0}},
    {"hypot(x, 0)", 1, {-3.0, 0}, e_hypot_zero, {0}},
    {"x^2 - Inf", 1, {1.5, 0}, e_plus_inf, {2.0}},
    {"x y + sum(x, Inf, y, 0)", 2, {1.5, -2.0}, e_sum_with_consts, {0, 1, 1, 0}},
    {"dot with constant 0s", 2, {1.5, -2.0}, e_dot_const_zero, {2, 1, 1, 0}},
    {"prod with constant 0", 2, {1.5, -2.0}, e_prod_const_zero, {0, 1, 1, 0}},
};

static void test_constants_in_the_path(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof edges / sizeof edges[0]; k++) {
        const edge *e = &edges[k];
        double g[2], H[4], hv[2], fx;
        const double v[2] = {0.75, -1.25};
        hessian_ok(e->name, edge_objective, (void *)e, e->n, e->x, g, H);
        for (size_t i = 0; i < e->n * e->n; i++)
            entry_near(e->name, i / e->n, i % e->n, H[i], e->H[i], 0.0, 0.0);
        assert_int_equal(ad_hvp(edge_objective, (void *)e, e->n, e->x, v, &fx, g, hv), AD_OK);
        for (size_t i = 0; i < e->n; i++) {
            double want = 0.0;
            for (size_t j = 0; j < e->n; j++)
                want += e->H[i * e->n + j] * v[j];
            entry_near(e->name, i, 0, hv[i], want, 0.0, 0.0);  /* (H v)_i */
        }
    }
}

/* pow(x, 1) = x at x = 0: d2/dx2 is 0, as at every other x, not
 * b (b - 1) a^(b - 2) = 0 x Inf (a regression test for lib/modes/second.h). */
static void test_pow_one_at_zero(void **state)
{
    static const edge cases[] = {
        {"pow(x, 1) at 0", 1, {0.0, 0}, e_pow1, {0}},
        {"pow(x, 1) at -0", 1, {-0.0, 0}, e_pow1, {0}},
    };
    (void)state;
    for (size_t k = 0; k < 2; k++) {
        double g[1], H[1];
        hessian_ok(cases[k].name, edge_objective, (void *)&cases[k], 1, cases[k].x, g, H);
        assert_same(g[0], 1.0);
        entry_near(cases[k].name, 0, 0, H[0], 0.0, 0.0, 0.0);
    }
    {
        /* pow(x, y) at (0, 1): d2/dx2 = 0 (x^1 = x); d2/dxdy has no limit
         * (x^(y-1)(1 + y log x) -> -Inf), and the convention d/dy = 0 at
         * x = 0 makes it 0.  H must at least be symmetric there. */
        const edge e = {"pow(x, y) at (0, 1)", 2, {0.0, 1.0}, e_pow_rr, {0}};
        double g[2], H[4];
        hessian_ok(e.name, edge_objective, (void *)&e, 2, e.x, g, H);
        entry_near(e.name, 0, 0, H[0], 0.0, 0.0, 0.0);
        assert_same(H[1], H[2]);
    }
}

static ad_real e_fabs(const ad_real *x) { return ad_mul(ad_fabs(x[0]), 3.0); }
static ad_real e_fmin_tie(const ad_real *x) { return ad_fmin(x[0], x[1]); }
static ad_real e_fmax_tie(const ad_real *x) { return ad_fmax(x[0], x[1]); }
static ad_real e_hypot(const ad_real *x) { return ad_hypot(x[0], x[1]); }
static ad_real e_sqrt(const ad_real *x) { return ad_sqrt(x[0]); }
static ad_real e_cbrt(const ad_real *x) { return ad_cbrt(x[0]); }
static ad_real e_log(const ad_real *x) { return ad_log(x[0]); }
static ad_real e_log2(const ad_real *x) { return ad_log2(x[0]); }
static ad_real e_log10(const ad_real *x) { return ad_log10(x[0]); }
static ad_real e_atan2(const ad_real *x) { return ad_atan2(x[0], x[1]); }

/* docs/conventions.md, second derivatives: fabs, fmin and fmax are
 * piecewise linear (0 everywhere, kinks and ties included); hypot is 0 at
 * the origin, as fabs; atan2 is NaN there. */
static void test_conventions(void **state)
{
    static const double pts[] = {-2.0, -0.0, 0.0, 1e-300, 3.0};
    static const double ties[][2] = {{1.0, 1.0}, {0.0, 0.0}, {-2.0, -2.0}, {1.0, 2.0}, {3.0, -1.0}};
    (void)state;
    for (size_t k = 0; k < sizeof pts / sizeof pts[0]; k++) {
        edge e = {"3 fabs(x)", 1, {pts[k], 0}, e_fabs, {0}};
        double g[1], H[1];
        hessian_ok(e.name, edge_objective, &e, 1, e.x, g, H);
        assert_same(H[0], 0.0);
    }
    for (size_t k = 0; k < sizeof ties / sizeof ties[0]; k++) {
        edge e[2] = {{"fmin", 2, {ties[k][0], ties[k][1]}, e_fmin_tie, {0}},
                     {"fmax", 2, {ties[k][0], ties[k][1]}, e_fmax_tie, {0}}};
        for (int q = 0; q < 2; q++) {
            double g[2], H[4];
            hessian_ok(e[q].name, edge_objective, &e[q], 2, e[q].x, g, H);
            for (int i = 0; i < 4; i++)
                assert_same(H[i], 0.0);
        }
    }
    {
        edge e = {"hypot at the origin", 2, {0.0, 0.0}, e_hypot, {0}};
        double g[2], H[4];
        hessian_ok(e.name, edge_objective, &e, 2, e.x, g, H);
        for (int i = 0; i < 4; i++)
            assert_same(H[i], 0.0);
        assert_same(g[0], 0.0);
        assert_same(g[1], 0.0);
    }
    {
        edge e = {"atan2 at the origin", 2, {0.0, 0.0}, e_atan2, {0}};
        double g[2], H[4];
        hessian_ok(e.name, edge_objective, &e, 2, e.x, g, H);
        for (int i = 0; i < 4; i++)
            assert_nan(H[i]);
    }
    /* atan2 far out, where (a^2 + b^2)^2 overflows a double, and at an
     * infinite coordinate, where every second partial tends to 0:
     * H = [[-2ab, a^2 - b^2], [a^2 - b^2, 2ab]] / (a^2 + b^2)^2, in long
     * double, whose range holds it */
    static const double far[][2] = {{3e200, 4e200}, {-5e100, 1e99}, {1e-300, -2e150},
                                    {7.0, INFINITY}, {-INFINITY, 2.0}};
    for (size_t k = 0; k < sizeof far / sizeof far[0]; k++) {
        edge e = {"atan2 far out", 2, {far[k][0], far[k][1]}, e_atan2, {0}};
        double g[2], H[4];
        hessian_ok(e.name, edge_objective, &e, 2, e.x, g, H);
        long double a = far[k][0], b = far[k][1], r2 = a * a + b * b, r4 = r2 * r2;
        double want[4] = {(double)(-2.0L * a * b / r4), (double)((a * a - b * b) / r4), 0.0,
                          (double)(2.0L * a * b / r4)};
        if (isinf(far[k][0]) || isinf(far[k][1]))
            want[0] = want[1] = want[3] = 0.0;
        want[2] = want[1];
        for (int i = 0; i < 4; i++)
            entry_near(e.name, i / 2, i % 2, H[i], want[i], 1e-14, 0.0);
    }
}

/* sqrt and cbrt at 0.  Observed: the gradient is +Inf (the one-sided
 * limit, docs/conventions.md) and the Hessian NaN, not the -Inf the
 * conventions list as the second partial: the sweep adds z' w + z w' at
 * the record, and with z' = 0 (the output's cotangent is the constant 1)
 * and w = +Inf the first term is 0 x Inf = NaN -- the "no zero skipping"
 * rule of the first-order sweep (docs/conventions.md, NaN and Inf).  The
 * same holds for pow(x, c) with 0 < c < 1. */
static ad_real sqrt_plus_square(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_add(ad_sqrt(x[0]), ad_mul(x[1], x[1]));
}

static void test_sqrt_at_zero(void **state)
{
    /* The +Inf partial of sqrt at 0 makes its own row NaN, but not x1's:
     * the add's zero second partials ignore the NaN tangent of sqrt(x0). */
    {
        double x[2] = {0.0, 1.5}, g[2], H[4], fx;
        assert_int_equal(ad_hessian(sqrt_plus_square, NULL, 2, x, &fx, g, H), AD_OK);
        assert_same(g[0], INFINITY);
        assert_same(g[1], 3.0);
        assert_same(H[1 * 2 + 1], 2.0);
    }
    /* -0 is 0 (docs/conventions.md): the same at -0, where sqrt's and the
     * logarithms' partials were -Inf; so is log's, whose value is -Inf. */
    static const edge cases[] = {
        {"sqrt at 0", 1, {0.0, 0}, e_sqrt, {0}},  {"cbrt at 0", 1, {0.0, 0}, e_cbrt, {0}},
        {"sqrt at -0", 1, {-0.0, 0}, e_sqrt, {0}}, {"cbrt at -0", 1, {-0.0, 0}, e_cbrt, {0}},
        {"log at 0", 1, {0.0, 0}, e_log, {0}},     {"log at -0", 1, {-0.0, 0}, e_log, {0}},
        {"log2 at -0", 1, {-0.0, 0}, e_log2, {0}}, {"log10 at -0", 1, {-0.0, 0}, e_log10, {0}},
    };
    (void)state;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        double g[1], H[1], hv[1], fx, v = 1.0;
        hessian_ok(cases[k].name, edge_objective, (void *)&cases[k], 1, cases[k].x, g, H);
        assert_same(g[0], INFINITY);
        assert_nan(H[0]);
        assert_int_equal(ad_hvp(edge_objective, (void *)&cases[k], 1, cases[k].x, &v, &fx, g, hv),
                         AD_OK);
        assert_nan(hv[0]);
    }
}

/* Second partials whose formulas over- or underflowed where the exact
 * value is an ordinary number (issue 19): 2 x overflows for |x| > 9e307
 * where atan's and erf's partials are 0 (Inf x 0 = NaN); so does pow's
 * b (b - 1) for b > 1.3e154 and b log a for b > 2.4e305 where a power is
 * 0; atan2's came from its first partials, one of which overflows where
 * the other coordinate is 0 (a constant's too: its partial is formed all
 * the same), and so did division's; hypot's divided by h, which
 * overflowed or was subnormal, and its first partials were 0 past
 * DBL_MAX, and 0 at a NaN.  Expected: the exact Hessians, in long double
 * where not 0 or NaN. */
static ad_real e_atan(const ad_real *x) { return ad_atan(x[0]); }
static ad_real e_erf(const ad_real *x) { return ad_erf(x[0]); }
static ad_real e_erfc(const ad_real *x) { return ad_erfc(x[0]); }
static ad_real e_pow_big(const ad_real *x) { return ad_pow(x[0], 1e300); }
static ad_real e_atan2_x0(const ad_real *x) { return ad_atan2(x[0], 0.0); }
static ad_real e_atan2_0x(const ad_real *x) { return ad_atan2(0.0, x[0]); }
static ad_real e_zero_div(const ad_real *x) { return ad_div(0.0, x[0]); }
static ad_real e_max_div(const ad_real *x) { return ad_div(DBL_MAX, x[0]); }

static void test_far_out(void **state)
{
    static const edge zeros[] = {
        {"atan at 1e308", 1, {1e308, 0}, e_atan, {0}},
        {"atan at -1.5e308", 1, {-1.5e308, 0}, e_atan, {0}},
        {"erf at 1e308", 1, {1e308, 0}, e_erf, {0}},
        {"erf at -DBL_MAX", 1, {-DBL_MAX, 0}, e_erf, {0}},
        {"erfc at 1.2e308", 1, {1.2e308, 0}, e_erfc, {0}},
        {"pow(x, 1e300) at 0.5", 1, {0.5, 0}, e_pow_big, {0}},
        {"pow(x, y) at (0.5, 1.5e308)", 2, {0.5, 1.5e308}, e_pow_rr, {0}},
        {"pow(x, y) at (0.1, 1.7e308)", 2, {0.1, 1.7e308}, e_pow_rr, {0}},
        {"atan2(x, 0) at 1e-310", 1, {1e-310, 0}, e_atan2_x0, {0}},
        {"atan2(x, 0) at -5e-324", 1, {-5e-324, 0}, e_atan2_x0, {0}},
        {"atan2(0, x) at -2e-310", 1, {-2e-310, 0}, e_atan2_0x, {0}},
        {"0 / x at 1e-310", 1, {1e-310, 0}, e_zero_div, {0}},
        {"hypot(x, y) at (Inf, 5)", 2, {INFINITY, 5.0}, e_hypot, {0}},
        {"hypot(x, y) at (-3, -Inf)", 2, {-3.0, -INFINITY}, e_hypot, {0}},
    };
    (void)state;
    for (size_t k = 0; k < sizeof zeros / sizeof zeros[0]; k++) {
        const edge *e = &zeros[k];
        double g[2], H[4], hv[2], fx;
        const double v[2] = {0.75, -1.25};
        hessian_ok(e->name, edge_objective, (void *)e, e->n, e->x, g, H);
        for (size_t i = 0; i < e->n * e->n; i++)
            entry_near(e->name, i / e->n, i % e->n, H[i], 0.0, 0.0, 0.0);
        assert_int_equal(ad_hvp(edge_objective, (void *)e, e->n, e->x, v, &fx, g, hv), AD_OK);
        for (size_t i = 0; i < e->n; i++)
            entry_near(e->name, i, 0, hv[i], 0.0, 0.0, 0.0);
    }
    if (LDBL_MANT_DIG < 64)
        return;  /* the oracles below need a long double wider than double */
    /* DBL_MAX / x at 1.3: 2 a / b^3 = 1.6e308, but -2 wb overflowed */
    {
        const edge e = {"DBL_MAX / x at 1.3", 1, {1.3, 0}, e_max_div, {0}};
        double g[1], H[1], hv[1], fx, one = 1.0;
        long double b = 1.3;
        hessian_ok(e.name, edge_objective, (void *)&e, 1, e.x, g, H);
        entry_near(e.name, 0, 0, H[0], (double)(2.0L * DBL_MAX / (b * b * b)), 1e-14, 0.0);
        assert_int_equal(ad_hvp(edge_objective, (void *)&e, 1, e.x, &one, &fx, g, hv), AD_OK);
        assert_same(hv[0], H[0]);
    }
    /* hypot past DBL_MAX: b^2 / h^3 ... are subnormal, not 0; and the
     * gradient a / h, b / h */
    static const double far[][2] = {{1.5e308, 1.5e308}, {1e308, -1.7e308}, {-DBL_MAX, 1e307}};
    for (size_t k = 0; k < sizeof far / sizeof far[0]; k++) {
        const edge e = {"hypot past DBL_MAX", 2, {far[k][0], far[k][1]}, e_hypot, {0}};
        double g[2], H[4];
        long double a = far[k][0], b = far[k][1], h = sqrtl(a * a + b * b), h3 = h * h * h;
        double want[4] = {(double)(b * b / h3), (double)(-a * b / h3), (double)(-a * b / h3),
                          (double)(a * a / h3)};
        hessian_ok(e.name, edge_objective, (void *)&e, 2, e.x, g, H);
        assert_near(g[0], (double)(a / h), 1e-15, 0.0);
        assert_near(g[1], (double)(b / h), 1e-15, 0.0);
        for (int i = 0; i < 4; i++)
            entry_near(e.name, (size_t)i / 2, (size_t)i % 2, H[i], want[i], 1e-13,
                       2 * DBL_TRUE_MIN);
    }
    /* hypot at a NaN: NaN throughout, as the value */
    {
        const edge e = {"hypot(x, y) at (NaN, 1)", 2, {NAN, 1.0}, e_hypot, {0}};
        double g[2], H[4], fx;
        assert_int_equal(ad_hessian(edge_objective, (void *)&e, 2, e.x, &fx, g, H), AD_OK);
        assert_nan(fx);
        assert_nan(g[0]);
        assert_nan(g[1]);
        for (int i = 0; i < 4; i++)
            assert_nan(H[i]);
    }
}

static ad_real nan_objective(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    /* sin(x0) x1 + x2^2: x2 never meets x0 */
    return ad_add(ad_mul(ad_sin(x[0]), x[1]), ad_mul(x[2], x[2]));
}

/* A NaN input reaches the value, the gradient entries that depend on it
 * (as in first order: g2 = 2 x2 stays exact), and every entry of H whose
 * exact value depends on it.  The tangent of sin(x0) is cos(NaN) x 0 = NaN
 * along every direction (no zero skipping, as in ad_jvp), but the add that
 * joins the two terms has zero second partials, which add nothing even
 * against a NaN tangent (docs/conventions.md): H[2][2] = 2 stays exact. */
static void test_nan_propagation(void **state)
{
    double x[3] = {NAN, 2.0, 1.5}, g[3], H[9], fx, hv[3];
    const double v[3] = {1.0, 0.0, 0.0};
    (void)state;
    assert_int_equal(ad_hessian(nan_objective, NULL, 3, x, &fx, g, H), AD_OK);
    assert_nan(fx);
    assert_nan(g[0]);
    assert_nan(g[1]);
    assert_same(g[2], 3.0);
    for (int j = 0; j < 3; j++)
        assert_nan(H[0 * 3 + j]);  /* the row of x0 */
    assert_nan(H[1 * 3 + 0]);      /* d2/dx1dx0 = cos(x0) */
    assert_same(H[2 * 3 + 2], 2.0);
    assert_same(H[2 * 3 + 1], 0.0);
    assert_int_equal(ad_hvp(nan_objective, NULL, 3, x, v, &fx, g, hv), AD_OK);
    assert_nan(hv[0]);
    assert_nan(hv[1]);
    assert_same(g[2], 3.0);
}

/* ======================================================================
 * 7. Errors
 * ====================================================================== */

static void check_hvp_einval(ad_objective f, size_t n, const double *x, const double *v,
                             int with_fx, int with_grad, int with_hv)
{
    double fx = 1.0, g[3] = {1, 1, 1}, hv[3] = {1, 1, 1};
    ad_status s = ad_hvp(f, NULL, n, x, v, with_fx ? &fx : NULL, with_grad ? g : NULL,
                         with_hv ? hv : NULL);
    assert_int_equal(s, AD_EINVAL);
    for (size_t i = 0; i < n; i++) {
        if (with_grad)
            assert_nan(g[i]);
        if (with_hv)
            assert_nan(hv[i]);
    }
    if (with_fx)
        assert_nan(fx);
}

static void check_hessian_einval(ad_objective f, size_t n, const double *x, int with_fx,
                                 int with_grad, int with_hess)
{
    double fx = 1.0, g[3] = {1, 1, 1}, H[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    ad_status s = ad_hessian(f, NULL, n, x, with_fx ? &fx : NULL, with_grad ? g : NULL,
                             with_hess ? H : NULL);
    assert_int_equal(s, AD_EINVAL);
    for (size_t i = 0; with_grad && i < n; i++)
        assert_nan(g[i]);
    for (size_t i = 0; with_hess && i < n * n; i++)
        assert_nan(H[i]);
    if (with_fx)
        assert_nan(fx);
}

/* Every NULL that is not allowed: AD_EINVAL, and every output given NaN. */
static void test_null_arguments(void **state)
{
    const double x[3] = {1.0, 2.0, 3.0}, v[3] = {1.0, 0.0, 0.0};
    (void)state;
    check_hvp_einval(NULL, 3, x, v, 1, 1, 1);
    check_hvp_einval(rosenbrock, 3, x, v, 0, 1, 1);
    check_hvp_einval(rosenbrock, 3, NULL, v, 1, 1, 1);
    check_hvp_einval(rosenbrock, 3, x, NULL, 1, 1, 1);
    check_hvp_einval(rosenbrock, 3, x, v, 1, 0, 1);
    check_hvp_einval(rosenbrock, 3, x, v, 1, 1, 0);
    check_hvp_einval(NULL, 0, NULL, NULL, 1, 0, 0);
    check_hvp_einval(const_objective, 0, NULL, NULL, 0, 0, 0);
    check_hessian_einval(NULL, 3, x, 1, 1, 1);
    check_hessian_einval(rosenbrock, 3, x, 0, 1, 1);
    check_hessian_einval(rosenbrock, 3, NULL, 1, 1, 1);
    check_hessian_einval(rosenbrock, 3, x, 1, 0, 1);
    check_hessian_einval(rosenbrock, 3, x, 1, 1, 0);
    check_hessian_einval(NULL, 0, NULL, 1, 0, 0);
    check_hessian_einval(const_objective, 0, NULL, 0, 0, 0);
}

/* ad_external with a rule without hvp has no second-order rule:
 * AD_ENOTSUP, NaN outputs; the same objective differentiates once. */
static void twice_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    (void)ctx, (void)n, (void)m;
    y[0] = 2.0 * x[0];
}

static void twice_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                      const double *ybar, double *xbar)
{
    (void)ctx, (void)n, (void)x, (void)m, (void)y;
    xbar[0] = 2.0 * ybar[0];
}

static ad_real with_external(const ad_real *x, size_t n, void *ctx)
{
    static const ad_rule rule = {twice_primal, twice_vjp, NULL, NULL};
    ad_real y;
    (void)n, (void)ctx;
    if (ad_external(&rule, NULL, 1, x, 1, &y) != AD_OK)
        return ad_const(NAN);
    return ad_mul(y, x[1]);
}

static void test_external_not_supported(void **state)
{
    const double x[2] = {1.5, 2.0}, v[2] = {1.0, 1.0};
    double fx = 0.0, g[2], H[4], hv[2];
    (void)state;
    assert_int_equal(ad_hessian(with_external, NULL, 2, x, &fx, g, H), AD_ENOTSUP);
    assert_nan(fx);
    for (int i = 0; i < 2; i++)
        assert_nan(g[i]);
    for (int i = 0; i < 4; i++)
        assert_nan(H[i]);
    fx = 0.0;
    assert_int_equal(ad_hvp(with_external, NULL, 2, x, v, &fx, g, hv), AD_ENOTSUP);
    assert_all_nan(fx, g, 2);
    assert_nan(hv[0]);
    assert_nan(hv[1]);
    assert_same(gradient_ok(with_external, NULL, 2, x, g), 6.0);
    assert_same(g[0], 4.0);
    assert_same(g[1], 3.0);
}

static size_t last_records(void)
{
    ad_tape_stats st;
    assert_int_equal(ad_tape_stats_get(&st), AD_OK);
    return st.records;
}

/* A cap of exactly the records a recording takes passes; one less is
 * AD_ERANGE with NaN outputs, in both second-order calls. */
static void test_tape_limit(void **state)
{
    static const long pads[] = {0, 5, CHUNK + 7};
    const double x[3] = {1.0, -2.0, 0.5}, v[3] = {1.0, 1.0, 1.0};
    double fx, g[3], H[9], hv[3];
    (void)state;
    for (size_t p = 0; p < sizeof pads / sizeof pads[0]; p++) {
        long pad = pads[p];
        gradient_ok(padded_squares, &pad, 3, x, g);
        size_t records = last_records();
        assert_int_equal(records, 5 + (size_t)pad);  /* 3 products, 2 sums, the pad */
        ad_set_tape_limit(records);
        assert_int_equal(ad_hessian(padded_squares, &pad, 3, x, &fx, g, H), AD_OK);
        assert_int_equal(last_records(), records);
        assert_int_equal(ad_hvp(padded_squares, &pad, 3, x, v, &fx, g, hv), AD_OK);
        ad_set_tape_limit(records - 1);
        assert_int_equal(ad_hessian(padded_squares, &pad, 3, x, &fx, g, H), AD_ERANGE);
        assert_all_nan(fx, g, 3);
        for (int i = 0; i < 9; i++)
            assert_nan(H[i]);
        assert_int_equal(ad_hvp(padded_squares, &pad, 3, x, v, &fx, g, hv), AD_ERANGE);
        assert_all_nan(fx, g, 3);
        for (int i = 0; i < 3; i++)
            assert_nan(hv[i]);
        ad_set_tape_limit(0);
    }
}

/* ---- nesting ---- */

static ad_real quartic(const ad_real *x, size_t n, void *ctx)
{
    ad_real s = ad_const(0.0);
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        ad_real sq = ad_mul(x[i], x[i]);
        s = ad_add(s, ad_mul(sq, sq));
    }
    return s;
}

typedef struct nest {
    int inner;         /* 0: ad_hvp, 1: ad_gradient, 2: ad_hessian */
    ad_status status;
    double vals[4], out[16], fx;
} nest;

/* quartic(x) + sum_i c_i x_i, c from an inner call at x's values (as
 * constants): hvp along 1 (12 x_i^2), the gradient (4 x_i^3), or the
 * Hessian's diagonal. */
static ad_real nesting_objective(const ad_real *x, size_t n, void *ctx)
{
    nest *s = ctx;
    const double ones[4] = {1.0, 1.0, 1.0, 1.0};
    double g[4];
    for (size_t i = 0; i < n; i++)
        s->vals[i] = ad_value(x[i]);
    if (s->inner == 0)
        s->status = ad_hvp(quartic, NULL, n, s->vals, ones, &s->fx, g, s->out);
    else if (s->inner == 1)
        s->status = ad_gradient(quartic, NULL, n, s->vals, &s->fx, s->out);
    else {
        double H[16];
        s->status = ad_hessian(quartic, NULL, n, s->vals, &s->fx, g, H);
        for (size_t i = 0; i < n; i++)
            s->out[i] = H[i * n + i];
    }
    ad_real sum = quartic(x, n, NULL);
    for (size_t i = 0; i < n; i++)
        sum = ad_add(sum, ad_mul(s->out[i], x[i]));
    return sum;
}

static void test_nesting(void **state)
{
    const double x[4] = {0.5, -1.0, 1.5, 2.0}, v[4] = {1.0, -1.0, 0.5, 2.0};
    (void)state;
    for (int inner = 0; inner < 3; inner++) {
        nest s = {inner, AD_EINVAL, {0}, {0}, 0.0};
        double g[4], H[16], hv[4], fx;
        /* outer first order */
        gradient_ok(nesting_objective, &s, 4, x, g);
        assert_int_equal(s.status, AD_OK);
        for (int i = 0; i < 4; i++) {
            double c = inner == 1 ? 4.0 * x[i] * x[i] * x[i] : 12.0 * x[i] * x[i];
            assert_same(s.out[i], c);
            assert_near(g[i], 4.0 * x[i] * x[i] * x[i] + c, 1e-15, 0.0);
        }
        /* outer second order: the inner results are constants */
        s.status = AD_EINVAL;
        hessian_ok("nested", nesting_objective, &s, 4, x, g, H);
        assert_int_equal(s.status, AD_OK);
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++)
                assert_near(H[i * 4 + j], i == j ? 12.0 * x[i] * x[i] : 0.0, 1e-15, 0.0);
        s.status = AD_EINVAL;
        assert_int_equal(ad_hvp(nesting_objective, &s, 4, x, v, &fx, g, hv), AD_OK);
        assert_int_equal(s.status, AD_OK);
        for (int i = 0; i < 4; i++)
            assert_near(hv[i], 12.0 * x[i] * x[i] * v[i], 1e-15, 0.0);
    }
}

/* ad_hessian inside ad_hessian inside ...: the calls nest until
 * AD_MAX_NESTING, where the innermost gets AD_ENESTING. */
typedef struct deep {
    int depth, deepest;
    ad_status last;
} deep;

static ad_real deep_objective(const ad_real *x, size_t n, void *ctx)
{
    deep *d = ctx;
    double v = ad_value(x[0]), fx, g, H;
    (void)n;
    d->depth++;
    if (d->depth > d->deepest)
        d->deepest = d->depth;
    ad_status s = ad_hessian(deep_objective, d, 1, &v, &fx, &g, &H);
    if (s != AD_OK)
        d->last = s;
    d->depth--;
    return ad_mul(x[0], ad_mul(x[0], x[0]));
}

static void test_nesting_depth(void **state)
{
    deep d = {0, 0, AD_OK};
    double x = 2.0, fx, g, H;
    (void)state;
    assert_int_equal(ad_hessian(deep_objective, &d, 1, &x, &fx, &g, &H), AD_OK);
    assert_int_equal(d.last, AD_ENESTING);
    assert_int_equal(d.deepest, AD_MAX_NESTING);
    assert_same(H, 12.0);
}

/* ---- allocation failure ---- */

#define AF_N 6

/* Every kind of record a second-order recording keeps: scalars across a
 * chunk boundary, prod (its work array), logsumexp, dot, a recorded matrix
 * and its product. */
static ad_real alloc_objective(const ad_real *x, size_t n, void *ctx)
{
    const long *pad = ctx;
    ad_real s = ad_mul(x[0], x[1]), A[6], y[2];
    ad_mat M;
    (void)n;
    for (long k = 0; k < *pad; k++)
        s = ad_mul(s, 1.0);
    for (int i = 0; i < 6; i++)
        A[i] = ad_mul(x[i], 0.5);
    if (ad_mat_make(2, 3, A, &M) != AD_OK)
        return ad_const(NAN);
    ad_mat_vec(&M, (ad_real *)x + 3, y);
    ad_real parts[5] = {s, ad_prod(AF_N, (ad_real *)x), ad_logsumexp(AF_N, (ad_real *)x),
                        ad_dot(3, (ad_real *)x, (ad_real *)x + 3), ad_mul(y[0], y[1])};
    return ad_sum(5, parts);
}

static void test_alloc_failure(void **state)
{
    const double x[AF_N] = {0.5, -1.0, 1.5, 0.75, -0.25, 1.25};
    const double v[AF_N] = {1.0, -0.5, 0.25, 2.0, 0.0, 1.0};
    long pad = CHUNK + 100;
    double fx, g[AF_N], H[AF_N * AF_N], Hw[AF_N * AF_N], gw[AF_N], hv[AF_N];
    (void)state;
    hessian_ok("alloc", alloc_objective, &pad, AF_N, x, gw, Hw);
    for (int which = 0; which < 2; which++) {
        int successes = 0;
        for (long i = 0; successes < 3; i++) {
            fx = 0.0;
            assert_int_equal(ad_release(), AD_OK);
            ad_test_fail_alloc_after(i);
            ad_status s = which == 0 ? ad_hessian(alloc_objective, &pad, AF_N, x, &fx, g, H)
                                     : ad_hvp(alloc_objective, &pad, AF_N, x, v, &fx, g, hv);
            ad_test_fail_alloc_after(-1);
            if (s == AD_OK) {
                successes++;
                for (int k = 0; k < AF_N; k++)
                    assert_same(g[k], gw[k]);
                for (int k = 0; which == 0 && k < AF_N * AF_N; k++)
                    assert_same(H[k], Hw[k]);
                continue;
            }
            assert_alloc_failure(i, s, successes);
            assert_all_nan(fx, g, AF_N);
            for (int k = 0; which == 0 && k < AF_N * AF_N; k++)
                assert_nan(H[k]);
            for (int k = 0; which == 1 && k < AF_N; k++)
                assert_nan(hv[k]);
            assert_true(i < 200);
        }
    }
}

/* ======================================================================
 * 8. Threads, and first-order calls after second-order ones
 * ====================================================================== */

#define ROUNDS 40
/* about 350,000 records: six chunks, the last two (with their second
 * partials) from the first slab of four (lib/kernel/tape.c) */
#define BIG_ROSEN 70000

/* H v of Rosenbrock's tridiagonal Hessian, row by row, against hv; each
 * entry within 16 ulp of the magnitude of its terms. */
static int rosenbrock_hv_matches(size_t n, const double *x, const double *v, const double *hv,
                                 char *msg, size_t msg_size)
{
    for (size_t i = 0; i < n; i++) {
        double d = (i > 0 ? 200.0 : 0.0), dscale = d, want, scale;
        if (i + 1 < n) {
            d += 1200.0 * x[i] * x[i] - 400.0 * x[i + 1] + 2.0;
            dscale += 1200.0 * x[i] * x[i] + 400.0 * fabs(x[i + 1]) + 2.0;
        }
        want = d * v[i];
        scale = dscale * fabs(v[i]);
        if (i + 1 < n) {
            want += -400.0 * x[i] * v[i + 1];
            scale += 400.0 * fabs(x[i] * v[i + 1]);
        }
        if (i > 0) {
            want += -400.0 * x[i - 1] * v[i - 1];
            scale += 400.0 * fabs(x[i - 1] * v[i - 1]);
        }
        if (!(fabs(hv[i] - want) <= 16 * EPS * scale)) {
            snprintf(msg, msg_size, "n=%zu: hv[%zu] = %.17g, expected %.17g", n, i, hv[i], want);
            return 0;
        }
    }
    return 1;
}

/* A Hessian of Rosenbrock (small n) and a Hessian-vector product (the last
 * round: a tape of six chunks), both against the closed form. */
static void worker_round(worker *w, int round)
{
    uint64_t rng = (uint64_t)(w->index * 7919 + round);
    int big = round == ROUNDS - 1;
    size_t n = big ? BIG_ROSEN : 2 + (size_t)(round * 13 + w->index * 7) % 40;
    size_t nn = big ? 1 : n * n;
    double *x = malloc(n * sizeof *x), *g = malloc(n * sizeof *g), *v = malloc(n * sizeof *v);
    double *hv = malloc(n * sizeof *hv), *H = malloc(nn * sizeof *H);
    double *want = malloc(nn * sizeof *want), *scale = malloc(nn * sizeof *scale), fx;
    char msg[160];
    ad_status s;
    if (!x || !g || !v || !hv || !H || !want || !scale) {
        worker_fail(w, "round %d: %s", round, "out of memory");
    } else {
        for (size_t i = 0; i < n; i++) {
            x[i] = rng_uniform(&rng, -2.0, 2.0);
            v[i] = rng_uniform(&rng, -1.0, 1.0);
        }
        if (!big) {
            s = ad_hessian(rosenbrock, NULL, n, x, &fx, g, H);
            if (s != AD_OK)
                worker_fail(w, "round %d: %s", round, ad_strerror(s));
            else if (!rosenbrock_matches(n, x, H, want, scale, msg, sizeof msg))
                worker_fail(w, "round %d: %s", round, msg);
        }
        s = ad_hvp(rosenbrock, NULL, n, x, v, &fx, g, hv);
        if (s != AD_OK)
            worker_fail(w, "round %d: %s", round, ad_strerror(s));
        else if (!rosenbrock_hv_matches(n, x, v, hv, msg, sizeof msg))
            worker_fail(w, "round %d: %s", round, msg);
    }
    free(x), free(g), free(v), free(hv), free(H), free(want), free(scale);
}

static void *work(void *arg)
{
    worker *w = arg;
    worker_start(w);
    for (int round = 0; round < ROUNDS; round++)
        worker_round(w, round);
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    run_workers(work);
}

/* A lone-slot dot (first order: the slot alone; second order: with its
 * header), prod, logsumexp, a recorded matrix product and scalars. */
static ad_real mixed_objective(const ad_real *x, size_t n, void *ctx)
{
    ad_real A[4] = {x[0], x[1], ad_const(0.0), x[2]}, y[2];
    ad_mat M;
    (void)n, (void)ctx;
    if (ad_mat_make(2, 2, A, &M) != AD_OK)
        return ad_const(NAN);
    ad_mat_vec(&M, (ad_real *)x + 2, y);
    ad_real parts[5] = {ad_dot(1, (ad_real *)x, (ad_real *)x + 1), ad_prod(4, (ad_real *)x),
                        ad_logsumexp(3, (ad_real *)x + 1), ad_mul(y[0], ad_sin(y[1])),
                        ad_sqnorm(1, (ad_real *)x + 3)};
    return ad_sum(5, parts);
}

/* The mode is per recording: a first-order call after a second-order one
 * records the same tape (same record count) and returns the same bits. */
static void test_mode_does_not_leak(void **state)
{
    const double x[4] = {0.5, -1.25, 0.75, 2.0}, v[4] = {1.0, 0.5, -1.0, 0.25};
    double g0[4], g1[4], H[16], hv[4], fx, fx0, fx1;
    (void)state;
    fx0 = gradient_ok(mixed_objective, NULL, 4, x, g0);
    size_t records = last_records();
    assert_int_equal(ad_hessian(mixed_objective, NULL, 4, x, &fx, g1, H), AD_OK);
    size_t second_records = last_records();
    assert_true(second_records >= records);  /* lone-slot headers kept */
    fx1 = gradient_ok(mixed_objective, NULL, 4, x, g1);
    assert_same(fx1, fx0);
    for (int i = 0; i < 4; i++)
        assert_same(g1[i], g0[i]);
    assert_int_equal(last_records(), records);
    assert_int_equal(ad_hvp(mixed_objective, NULL, 4, x, v, &fx, g1, hv), AD_OK);
    fx1 = gradient_ok(mixed_objective, NULL, 4, x, g1);
    assert_same(fx1, fx0);
    for (int i = 0; i < 4; i++)
        assert_same(g1[i], g0[i]);
    assert_int_equal(last_records(), records);
    /* and the other way round: second order, unchanged by first-order calls */
    double H2[16];
    assert_int_equal(ad_hessian(mixed_objective, NULL, 4, x, &fx, g1, H2), AD_OK);
    assert_int_equal(last_records(), second_records);
    for (int i = 0; i < 16; i++)
        assert_same(H2[i], H[i]);
}

/* ======================================================================
 * 9. Tapes across chunk boundaries
 * ====================================================================== */

/* sum_i x_i^2 padded past two chunks: H = 2 I, from three sweeps of four,
 * four and one lanes. */
static void test_long_tape_hessian(void **state)
{
    long pad = 2 * CHUNK + 11;
    double x[9], g[9], H[81], fx;
    (void)state;
    for (int i = 0; i < 9; i++)
        x[i] = 0.25 * (i - 4);
    assert_int_equal(ad_hessian(padded_squares, &pad, 9, x, &fx, g, H), AD_OK);
    assert_true(last_records() > 2 * CHUNK);
    for (int i = 0; i < 9; i++) {
        assert_same(g[i], 2.0 * x[i]);
        for (int j = 0; j < 9; j++)
            assert_same(H[i * 9 + j], i == j ? 2.0 : 0.0);
    }
}

/* Recorded-matrix blocks whose header and outputs straddle a chunk
 * boundary: the Hessian is that of the unpadded objective (the pad only
 * multiplies x0 by 1, exactly), bit for bit. */
static ad_real block_objective(const ad_real *x, size_t n, void *ctx)
{
    const long *pad = ctx;
    ad_real A[9], y[3], z[3];
    ad_mat M;
    (void)n;
    A[0] = x[0];
    for (long k = 0; k < *pad; k++)
        A[0] = ad_mul(A[0], 1.0);
    for (int i = 1; i < 9; i++)
        A[i] = x[i];
    if (ad_mat_make(3, 3, A, &M) != AD_OK)
        return ad_const(NAN);
    ad_mat_vec(&M, (ad_real *)x + 9, y);
    ad_mat_vec(&M, y, z);
    return ad_add(z[1], ad_sin(z[0]));  /* an output of the block, and through it */
}

static void test_blocks_across_chunks(void **state)
{
    double x[12], g[12], H0[144], H[144];
    long pad = 0;
    uint64_t rng = 0xb10c;
    (void)state;
    fill_uniform(&rng, x, 12, -1.0, 1.0);
    hessian_ok("blocks, no pad", block_objective, &pad, 12, x, g, H0);
    /* the matrix block takes records pad .. pad + 9, the products 4 each */
    for (long j = 0; j <= 18; j++) {
        pad = CHUNK - 1 - j;
        hessian_ok("blocks across a chunk boundary", block_objective, &pad, 12, x, g, H);
        for (int i = 0; i < 144; i++)
            if (!same_double(H[i], H0[i])) {
                print_error("pad %ld: H[%d][%d] = %.17g, unpadded %.17g\n", pad, i / 12, i % 12,
                            H[i], H0[i]);
                fail();
            }
    }
}

#define LONG_N 100000

/* prod or logsumexp of LONG_N inputs after `pad` records, so that the run
 * starts before a chunk boundary and ends after it. */
typedef struct long_run {
    int lse;
    long pad;
} long_run;

static ad_real long_run_objective(const ad_real *x, size_t n, void *ctx)
{
    const long_run *r = ctx;
    static ad_real args[2 * CHUNK + 3];
    memcpy(args, x, n * sizeof *x);
    for (long k = 0; k < r->pad; k++)
        args[0] = ad_mul(args[0], 1.0);
    return r->lse ? ad_logsumexp(n, args) : ad_prod(n, args);
}

/* H v of prod (x_i = +-1, +-2, +-1/2: exact products): (H v)_i = sum_{j != i}
 * P / (x_i x_j) v_j; of logsumexp: p v - p (p.v). */
static void test_long_runs(void **state)
{
    static const long pads[] = {0, CHUNK - 3, CHUNK - 20000};
    static double x[2 * CHUNK + 3], v[2 * CHUNK + 3], g[2 * CHUNK + 3], hv[2 * CHUNK + 3];
    static const size_t sizes[] = {LONG_N, 2 * CHUNK + 3};
    uint64_t rng = 0x10e;
    (void)state;
    for (size_t sz = 0; sz < 2; sz++)
        for (size_t p = 0; p < sizeof pads / sizeof pads[0]; p++)
            for (int lse = 0; lse <= 1; lse++) {
                size_t n = sizes[sz];
                long_run r = {lse, pads[p]};
                double fx, P = 1.0, s = 0.0, sv = 0.0, scale = 0.0, mx = -INFINITY;
                if (sz == 1 && p > 0)
                    continue;  /* a run longer than a chunk crosses one anyway */
                for (size_t i = 0; i < n; i++) {
                    x[i] = lse ? sin((double)i) : i % 4096 == 5 ? 2.0 : i % 4096 == 9 ? 0.5
                                                 : i % 3 ? 1.0 : -1.0;
                    v[i] = rng_uniform(&rng, -1.0, 1.0);
                }
                assert_int_equal(ad_hvp(long_run_objective, &r, n, x, v, &fx, g, hv), AD_OK);
                if (!lse) {
                    for (size_t i = 0; i < n; i++) {
                        P *= x[i];
                        s += v[i] / x[i];
                        scale += fabs(v[i] / x[i]);
                    }
                    for (size_t i = 0; i < n; i++) {
                        double want = P / x[i] * (s - v[i] / x[i]);
                        if (!(fabs(hv[i] - want) <= 1e-10 * fabs(P / x[i]) * scale)) {
                            print_error("prod n=%zu pad=%ld: hv[%zu] = %.17g, expected %.17g\n", n,
                                        r.pad, i, hv[i], want);
                            fail();
                        }
                    }
                } else {
                    for (size_t i = 0; i < n; i++)
                        mx = fmax(mx, x[i]);
                    for (size_t i = 0; i < n; i++)
                        s += exp(x[i] - mx);
                    for (size_t i = 0; i < n; i++) {
                        sv += exp(x[i] - mx) / s * v[i];
                        scale += exp(x[i] - mx) / s * fabs(v[i]);
                    }
                    for (size_t i = 0; i < n; i++) {
                        double pi = exp(x[i] - mx) / s, want = pi * (v[i] - sv);
                        if (!(fabs(hv[i] - want) <= 1e-12 * pi * (fabs(v[i]) + scale))) {
                            print_error("lse n=%zu pad=%ld: hv[%zu] = %.17g, expected %.17g\n", n,
                                        r.pad, i, hv[i], want);
                            fail();
                        }
                    }
                }
            }
}

/* A run of LONG_N active elements made from five inputs, crossing a chunk
 * boundary, in a full ad_hessian.  prod: e_k = c_k x_(k mod 5) (one record
 * each), f = C prod x_i^m_i with m_i = LONG_N / 5, so H_ij = m_i (m_j -
 * [i = j]) f / (x_i x_j); logsumexp: e_k = x_(k mod 5) + c_k (no records:
 * the input's ID), after a pad, H = diag(P) - P P^T with P_i the softmax's
 * mass on input i. */
typedef struct five {
    int lse;
    long pad;
} five;

static double five_c(size_t k)
{
    return k % 2 ? 0.5 : 2.0;  /* LONG_N even: C = 1 */
}

static ad_real five_objective(const ad_real *x, size_t n, void *ctx)
{
    const five *r = ctx;
    static ad_real e[LONG_N];
    ad_real first = x[0];
    (void)n;
    for (long k = 0; k < r->pad; k++)
        first = ad_mul(first, 1.0);
    for (size_t k = 0; k < LONG_N; k++) {
        ad_real xi = k % 5 ? x[k % 5] : first;
        e[k] = r->lse ? ad_add(xi, 0.01 * (double)(k % 97)) : ad_mul(xi, five_c(k));
    }
    return r->lse ? ad_logsumexp(LONG_N, e) : ad_prod(LONG_N, e);
}

static void test_long_runs_hessian(void **state)
{
    static const long pads[] = {0, CHUNK - 40000, CHUNK - 3};
    const double xp[5] = {1.0, -1.0, 1.0, -1.0, 1.0};
    const double xl[5] = {0.5, -0.25, 0.0, 0.125, 1.0};
    (void)state;
    for (size_t p = 0; p < sizeof pads / sizeof pads[0]; p++)
        for (int lse = 0; lse <= 1; lse++) {
            five r = {lse, pads[p]};
            const double *x = lse ? xl : xp;
            double g[5], H[25], fx, P[5] = {0}, S = 0.0;
            assert_int_equal(ad_hessian(five_objective, &r, 5, x, &fx, g, H), AD_OK);
            if (!lse) {
                double m = LONG_N / 5, f = 1.0;  /* (+-1)^(even) = 1 */
                assert_same(fx, f);
                for (int i = 0; i < 5; i++)
                    for (int j = 0; j < 5; j++) {
                        double want = m * (m - (i == j)) * f / (x[i] * x[j]);
                        assert_same(H[i * 5 + j], want);
                    }
                continue;
            }
            for (size_t k = 0; k < LONG_N; k++)
                S += exp(x[k % 5] + 0.01 * (double)(k % 97));
            for (size_t k = 0; k < LONG_N; k++)
                P[k % 5] += exp(x[k % 5] + 0.01 * (double)(k % 97)) / S;
            for (int i = 0; i < 5; i++) {
                assert_near(g[i], P[i], 1e-11, 0.0);
                for (int j = 0; j < 5; j++)
                    assert_near(H[i * 5 + j], (i == j ? P[i] : 0.0) - P[i] * P[j], 1e-10, 1e-12);
            }
        }
}

#define UNARY_TEST(op, ...) \
    {.name = "second derivative of " #op, .test_func = test_unary, .initial_state = (void *)&unary_##op},
#define BINARY_TEST(op, ...) \
    {.name = "second derivatives of " #op, .test_func = test_binary, .initial_state = (void *)&binary_##op},

int main(void)
{
    const struct CMUnitTest tests[] = {
        UNARY_OPS(UNARY_TEST)
        BINARY_OPS(BINARY_TEST)
        cmocka_unit_test(test_gamma_negative),
        cmocka_unit_test(test_pow_forms),
        cmocka_unit_test(test_primitives_closed_form),
        cmocka_unit_test(test_primitives_fd),
        cmocka_unit_test(test_lone_linear_slot),
        cmocka_unit_test(test_prod_zeros),
        cmocka_unit_test(test_logsumexp_large),
        cmocka_unit_test(test_vector_primitives),
        cmocka_unit_test(test_rosenbrock),
        cmocka_unit_test(test_random_programs),
        cmocka_unit_test(test_hvps_against_hvp),
        cmocka_unit_test(test_hvps_closed_form),
        cmocka_unit_test(test_hvps_errors),
        cmocka_unit_test(test_sizes_and_trivial_objectives),
        cmocka_unit_test(test_constants_in_the_path),
        cmocka_unit_test(test_pow_one_at_zero),
        cmocka_unit_test(test_conventions),
        cmocka_unit_test(test_sqrt_at_zero),
        cmocka_unit_test(test_far_out),
        cmocka_unit_test(test_nan_propagation),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_external_not_supported),
        cmocka_unit_test(test_tape_limit),
        cmocka_unit_test(test_nesting),
        cmocka_unit_test(test_nesting_depth),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_mode_does_not_leak),
        cmocka_unit_test(test_long_tape_hessian),
        cmocka_unit_test(test_blocks_across_chunks),
        cmocka_unit_test(test_long_runs),
        cmocka_unit_test(test_long_runs_hessian),
    };
    return cmocka_run_group_tests_name("second order", tests, NULL, NULL);
}
