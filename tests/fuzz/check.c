/* Every driver on one program, against the double run (values, bit for
 * bit, any NaN equal to any NaN: payloads are not promised) and against
 * the oracle (derivatives: class exact, value to the error bound).  A
 * program with checkpointed loops is checked as the same program with its
 * loops written out (prog_unroll), and every driver is also run on that
 * one and compared with the loops' (loop_cross_check). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_ctx.h"

#define TINY 0x1p-1074L

static double *dalloc(int n)
{
    double *a = malloc(((size_t)n + 1) * sizeof *a);
    for (int i = 0; i <= n; i++)
        a[i] = -12345.0;  /* anything a driver fails to write shows */
    return a;
}

static void fail(check_ctx *c, const char *driver, const char *kind, int i, int j, double got,
                 ld want, ld tol)
{
    failure f = {driver, kind, i, j, got, want, tol, NULL};
    report *r = c->r;
    f.known = known_defect(c, &f);
    r->nfail++;
    int unknown = !f.known || known_is_bug(f.known);
    if (unknown)
        r->nunknown++;
    if (r->nfail <= FUZZ_KEEP)
        r->f[r->nfail - 1] = f;
    else if (unknown)  /* keep unknown failures in view: they go first */
        for (int k = 0; k < FUZZ_KEEP; k++)
            if (r->f[k].known && !known_is_bug(r->f[k].known)) {
                r->f[k] = f;
                break;
            }
}

static int same_bits(double a, double b) { return (a != a && b != b) || !memcmp(&a, &b, sizeof a); }

static void values(check_ctx *c, const char *driver, const double *y, int m)
{
    for (int j = 0; j < m; j++) {
        double want = c->val[c->p->outs[j]];
        if (!same_bits(y[j], want))
            fail(c, driver, "value-bits", -1, j, y[j], want, 0);
    }
}

/* AD_EOVERFLOW in place of AD_OK is right where some entry's
 * intermediates leave what a double sweep holds (c->allow_over): its
 * outputs are then NaN, which the library's own tests check. */
static int status(check_ctx *c, const char *driver, ad_status got, ad_status want)
{
    if (got == AD_EOVERFLOW && want == AD_OK && c->allow_over) {
        c->r->overflow++;
        return 0;
    }
    if (got != want)
        fail(c, driver, "status", (int)want, -1, (double)got, want, 0);
    return got == AD_OK && want == AD_OK;
}

/* 0 finite, 1 NaN, 2 +Inf, 3 -Inf; -1: finite or infinite (|t| at DBL_MAX
 * within its error) */
static int cls(ld t, ld e)
{
    if (t != t) return 1;
    if (isinf(t)) return t > 0 ? 2 : 3;
    if (fabsl(t) - e > (ld)DBL_MAX) return t > 0 ? 2 : 3;
    if (fabsl(t) + e >= (ld)DBL_MAX) return -1;
    return 0;
}

/* Whether result r of pass P has intermediates a double sweep cannot
 * hold.  A tape that holds a user's rule or a checkpointed loop is swept
 * unscaled (docs/tape.md, docs/api.md). */
static int out_of_range(const check_ctx *c, const pass *P, int r)
{
    int scaled_ok = !c->ext && !c->loop && range_scaled(P->lo[r], P->hi[r]);
    return P->over[r] || !(scaled_ok || range_unscaled(P->lo[r], P->hi[r]));
}

static int any_out_of_range(const check_ctx *c, const pass *P)
{
    for (int r = 0; r < P->nres; r++)
        if (out_of_range(c, P, r))
            return 1;
    return 0;
}

/* One derivative entry.  P: the pass of the library's mode, r its result
 * index for the window, slot the slot holding the entry; A (may be NULL):
 * the same entry grouped the other way, whose class is also accepted. */
static void entry(check_ctx *c, const char *driver, int i, int j, double got, const pass *P,
                  int r, int slot, const pass *A, int aslot)
{
    report *rep = c->r;
    ld t = P->on[slot] ? P->t[slot] : 0, E = P->on[slot] ? P->E[slot] : 0;
    if (out_of_range(c, P, r)) {
        rep->range++;  /* a double sweep cannot hold this entry's intermediates */
        return;
    }
    if (P->on[slot] && P->unc[slot]) {
        rep->unsure++;
        return;
    }
    rep->checked++;
    if (getenv("FUZZ_DEBUG"))
        fprintf(stderr, "%s i=%d j=%d: window %Lg .. %Lg, t %Lg, E %Lg\n", driver, i, j, P->lo[r], P->hi[r], t, E);
    int w = cls(t, E), g = cls(got, 0);
    int alt = !A ? w : !A->on[aslot] ? 0 : A->unc[aslot] ? w : cls(A->t[aslot], A->E[aslot]);
    if (w == -1 && (g == 0 || g >= 2))
        return;
    if (g != w && g != alt) {
        fail(c, driver, "class", i, j, got, t, E);
        return;
    }
    ld tol = 2 * E + 4 * TINY + ORACLE_EPS * fabsl(t);
    if (g == 0 && w == 0 && !(fabsl((ld)got - t) <= tol))
        fail(c, driver, "value", i, j, got, t, tol);
}

/* ---- the drivers ---- */

static void drv_gradient(check_ctx *c, double *g0)
{
    const prog *p = c->p;
    double fx, *g = dalloc(p->n);
    if (status(c, "ad_gradient", ad_gradient(fuzz_objective, (void *)c->run, (size_t)p->n, p->x, &fx, g), AD_OK)) {
        values(c, "ad_gradient", &fx, 1);
        for (int i = 0; i < p->n; i++)
            entry(c, "ad_gradient", i, 0, g[i], &c->re[0], i, i, &c->fe[i], p->outs[0]);
    }
    memcpy(g0, g, (size_t)p->n * sizeof *g);
    free(g);
}

static void drv_vjp(check_ctx *c)
{
    const prog *p = c->p;
    double *y = dalloc(p->m), *wj = dalloc(p->n);
    if (status(c, "ad_vjp", ad_vjp(fuzz_function, (void *)c->run, (size_t)p->n, p->x, (size_t)p->m, p->w, y, wj), AD_OK)) {
        values(c, "ad_vjp", y, p->m);
        for (int i = 0; i < p->n; i++)
            entry(c, "ad_vjp", i, -1, wj[i], &c->rw, i, i, NULL, 0);
    }
    free(y), free(wj);
}

static void drv_jvp(check_ctx *c)
{
    const prog *p = c->p;
    double *y = dalloc(p->m), *jv = dalloc(p->m);
    ad_status want = c->ext_nojvp ? AD_ENOTSUP : AD_OK;
    if (status(c, "ad_jvp", ad_jvp(fuzz_function, (void *)c->run, (size_t)p->n, p->x, p->v, (size_t)p->m, y, jv), want)) {
        values(c, "ad_jvp", y, p->m);
        for (int j = 0; j < p->m; j++)
            entry(c, "ad_jvp", -1, j, jv[j], &c->fv, j, p->outs[j], NULL, 0);
    }
    free(y), free(jv);
}

/* Entry (j, i) of a Jacobian from the library's mode, the other accepted
 * for its class. */
static void jac_entry(check_ctx *c, const char *driver, int fwd, int i, int j, double got)
{
    int s = c->p->outs[j];
    if (fwd)
        entry(c, driver, i, j, got, &c->fe[i], j, s, &c->re[j], i);
    else
        entry(c, driver, i, j, got, &c->re[j], i, i, &c->fe[i], s);
}

static void drv_jacobian(check_ctx *c, double *j0)
{
    const prog *p = c->p;
    double *y = dalloc(p->m), *J = dalloc(p->m * p->n);
    if (status(c, "ad_jacobian", ad_jacobian(fuzz_function, (void *)c->run, (size_t)p->n, p->x, (size_t)p->m, y, J), AD_OK)) {
        values(c, "ad_jacobian", y, p->m);
        for (int j = 0; j < p->m; j++)
            for (int i = 0; i < p->n; i++)
                jac_entry(c, "ad_jacobian", c->jac_forward, i, j, J[j * p->n + i]);
    }
    memcpy(j0, J, (size_t)p->n * sizeof *J);
    free(y), free(J);
}

/* ad_linear_jvps and ad_linear_vjps with DIRS directions (v and w among
 * them, scaled copies, unit vectors) against the single calls on the same
 * linearisation: the same status as the first single call that fails, and
 * the same bits otherwise (lanes must not change a result). */
#define DIRS 5

static void direction_seeds(double *D, const double *base, int len)
{
    static const double scale[DIRS] = {1.0, -2.0, 0.5, 0.0, 1.0};
    for (int d = 0; d < DIRS; d++)
        for (int i = 0; i < len; i++)
            D[d * len + i] = d == 4 ? (i == len / 2) : base[i] * scale[d];
}

static void directions_one_way(check_ctx *c, ad_linear *L, int forward, int in_len, int out_len,
                               const double *base)
{
    const char *name = forward ? "ad_linear_jvps" : "ad_linear_vjps";
    double *D = dalloc(DIRS * in_len + 1), *R = dalloc(DIRS * out_len + 1), *one = dalloc(out_len + 1);
    direction_seeds(D, base, in_len);
    ad_status many = forward ? ad_linear_jvps(L, DIRS, D, R) : ad_linear_vjps(L, DIRS, D, R);
    ad_status first = AD_OK;
    for (int d = 0; d < DIRS; d++) {
        ad_status s = forward ? ad_linear_jvp(L, D + d * in_len, one) : ad_linear_vjp(L, D + d * in_len, one);
        first = first != AD_OK ? first : s;
        for (int q = 0; many == AD_OK && s == AD_OK && q < out_len; q++)
            if (!same_bits(R[d * out_len + q], one[q]))
                fail(c, name, "lane", forward ? -1 : q, forward ? q : -1, R[d * out_len + q], one[q], 0);
    }
    if (many != first)
        fail(c, name, "status", (int)first, -1, (double)many, first, 0);
    free(D), free(R), free(one);
}

static void directions(check_ctx *c, ad_linear *L)
{
    const prog *p = c->p;
    directions_one_way(c, L, 1, p->n, p->m, p->v);
    directions_one_way(c, L, 0, p->m, p->n, p->w);
}

static void drv_linear(check_ctx *c)
{
    const prog *p = c->p;
    double *y = dalloc(p->m), *jv = dalloc(p->m), *wj = dalloc(p->n);
    ad_linear *L = NULL;
    if (status(c, "ad_linearize", ad_linearize(fuzz_function, (void *)c->run, (size_t)p->n, p->x, (size_t)p->m, y, &L), AD_OK)) {
        values(c, "ad_linearize", y, p->m);
        if (status(c, "ad_linear_jvp", ad_linear_jvp(L, p->v, jv), c->ext_nojvp ? AD_ENOTSUP : AD_OK))
            for (int j = 0; j < p->m; j++)
                entry(c, "ad_linear_jvp", -1, j, jv[j], &c->fv, j, p->outs[j], NULL, 0);
        if (status(c, "ad_linear_vjp", ad_linear_vjp(L, p->w, wj), AD_OK))
            for (int i = 0; i < p->n; i++)
                entry(c, "ad_linear_vjp", i, -1, wj[i], &c->rw, i, i, NULL, 0);
        directions(c, L);
    }
    ad_linear_free(L);
    free(y), free(jv), free(wj);
}

/* A CSR row holds exactly the inputs that reach the output. */
static void drv_sparse(check_ctx *c, double *s0, int *s0_has)
{
    const prog *p = c->p;
    double *y = dalloc(p->m);
    ad_csr J;
    memset(s0_has, 0, (size_t)p->n * sizeof *s0_has);
    if (status(c, "ad_sparse_jacobian", ad_sparse_jacobian(fuzz_function, (void *)c->run, (size_t)p->n, p->x, (size_t)p->m, y, &J), AD_OK)) {
        values(c, "ad_sparse_jacobian", y, p->m);
        for (int j = 0; j < p->m; j++) {
            uint32_t want = c->L.recd[p->outs[j]] ? c->L.smask[p->outs[j]] : 0, got = 0;
            for (size_t k = J.row_ptr[j]; k < J.row_ptr[j + 1]; k++) {
                int i = (int)J.col[k];
                got |= 1u << i;
                jac_entry(c, "ad_sparse_jacobian", 0, i, j, J.val[k]);
                if (j == 0)
                    s0[i] = J.val[k], s0_has[i] = 1;
            }
            if (got != want)
                fail(c, "ad_sparse_jacobian", "structure", (int)want, j, (double)got, want, 0);
        }
        ad_csr_free(&J);
    }
    free(y);
}

/* ---- second order: checked where everything on the way is finite and
 * well inside the range (the forward sweep of ad_hvp and ad_hessian is not
 * scaled, and its products meet the scaled cotangents) ---- */

#define LO2 0x1p-900L
#define HI2 0x1p300L

static int window_ok(const pass *P, int r)
{
    return !P->over[r] && P->hi[r] < HI2 && P->lo[r] > LO2;
}

/* The first-order forward pass U towards output 0: finite values, partials
 * and tangents, in the window. */
static int path_finite(const check_ctx *c, const pass *U)
{
    const lin *L = &c->L;
    if (!window_ok(U, 0))
        return 0;
    for (int s = 0; s < L->nslots; s++) {
        if (!U->on[s] || !(L->omask[s] & 1))
            continue;
        if (!isfinite(L->val[s]) || !isfinite(U->t[s]) || U->unc[s])
            return 0;
        for (int e = L->e0[s]; e < L->e0[s + 1]; e++)
            if (!isfinite(L->e[e].p) || fabsl(L->e[e].p) > HI2)
                return 0;
    }
    return 1;
}

static void entry2_sums(check_ctx *c, const char *driver, int i, int k, double got,
                        const pass *P2, const pass *U, const pass *V, int pairs);

/* Whether second-order entry (i, k) is outside what the oracle checks
 * (k < 0: H v's entry i). */
int second_skipped(const check_ctx *c, int i, int k, const pass *P2, const pass *U,
                          const pass *V)
{
    return c->L.big_second || !window_ok(P2, 0) || !path_finite(c, U) || !path_finite(c, V) ||
           !window_ok(&c->re[0], i) || (k >= 0 && !window_ok(&c->re[0], k));
}

/* Whether some entry of the Hessian (or, hv, of H v) is: a second-order
 * driver may then fail with AD_EOVERFLOW. */
static int second_over(const check_ctx *c, int hv)
{
    int any = c->over_first;
    for (int i = 0; i < c->p->n && !any; i++)
        for (int k = hv ? -1 : 0; k < (hv ? 0 : c->p->n) && !any; k++) {
            pass P2;
            const pass *V = hv ? &c->fv : &c->fe[k];
            pass_second(&c->L, &c->fe[i], V, &P2);
            any = second_skipped(c, i, k, &P2, &c->fe[i], V);
            pass_free(&P2);
        }
    return any;
}

static void entry2(check_ctx *c, const char *driver, int i, int k, double got, const pass *P2,
                   const pass *U, const pass *V)
{
    entry2_sums(c, driver, i, k, got, P2, U, V, 0);
}

ld second_bound(const check_ctx *c, const pass *P2, const pass *U, const pass *V, int pairs,
                ld *t, ld *E)
{
    int s = c->p->outs[0];
    *t = P2->on[s] ? P2->t[s] : 0;
    /* Forward over reverse adds every term into a running total, the
     * cotangent's tangent of each slot on the way (fan[] additions each):
     * recursive summation, eps |total| per addition. */
    long F = 0;
    for (int k = 0; k < c->L.nslots; k++)
        if ((c->L.omask[k] & 1) && (U->on[k] || V->on[k]))
            F += c->L.fan[k];
    *E = (P2->on[s] ? P2->E[s] : 0) +
         ORACLE_EPS * (pairs ? (ld)F * (ld)F : (ld)F) * (P2->on[s] ? P2->M[s] : 0);
    return 2 * *E + 4 * TINY + ORACLE_EPS * fabsl(*t);
}

/* pairs: the entry is summed as edge pushing sums it (ad_sparse_hessian):
 * an interaction pushed onto every pair of a record's arguments meets
 * others there, up to F^2 additions where forward over reverse makes F. */
static void entry2_sums(check_ctx *c, const char *driver, int i, int k, double got,
                        const pass *P2, const pass *U, const pass *V, int pairs)
{
    if (second_skipped(c, i, k, P2, U, V)) {
        c->r->second_skipped++;
        return;
    }
    c->r->checked++;
    ld t, E, tol = second_bound(c, P2, U, V, pairs, &t, &E);
    if (!isfinite(got))
        fail(c, driver, "class", i, k, got, t, E);
    else if (!(fabsl((ld)got - t) <= tol))
        fail(c, driver, "value", i, k, got, t, tol);
}

/* ad_hvps along DIRS directions against ad_hvp along each: the same
 * status as the first ad_hvp that fails, the same value and gradient, H v
 * to rounding (the lanes add the same terms). */
static void hvps_directions(check_ctx *c)
{
    const prog *p = c->p;
    size_t n = (size_t)p->n;
    double fx, fx1, *V = dalloc(DIRS * p->n + 1), *HV = dalloc(DIRS * p->n + 1);
    double *g = dalloc(p->n), *g1 = dalloc(p->n), *hv = dalloc(p->n);
    direction_seeds(V, p->v, p->n);
    ad_status many = ad_hvps(fuzz_objective, (void *)c->run, n, p->x, DIRS, V, &fx, g, HV);
    ad_status first = AD_OK;
    for (int d = 0; d < DIRS; d++) {
        ad_status s = ad_hvp(fuzz_objective, (void *)c->run, n, p->x, V + (size_t)d * n, &fx1, g1, hv);
        first = first != AD_OK ? first : s;
        if (many != AD_OK || s != AD_OK)
            continue;
        if (!same_bits(fx, fx1))
            fail(c, "ad_hvps(f)", "lane", -1, -1, fx, fx1, 0);
        for (int i = 0; i < p->n; i++) {
            double a = HV[(size_t)d * n + (size_t)i], b = hv[i];
            if (!same_bits(g[i], g1[i]))
                fail(c, "ad_hvps(grad)", "lane", i, -1, g[i], g1[i], 0);
            if (!same_bits(a, b) && !(fabs(a - b) <= 0x1p-44 * fmax(fabs(a), fabs(b))))
                fail(c, "ad_hvps", "lane", i, d, a, b, 0);
        }
    }
    if (many != first)
        fail(c, "ad_hvps", "status", (int)first, -1, (double)many, first, 0);
    free(V), free(HV), free(g), free(g1), free(hv);
}

static void drv_hvp(check_ctx *c, double *h0)
{
    const prog *p = c->p;
    double fx, *g = dalloc(p->n), *hv = dalloc(p->n);
    ad_status want = c->ext_nojvp || c->nod2f ? AD_ENOTSUP : AD_OK;  /* an external without hvp, a map without d2f */
    c->allow_over = second_over(c, 1);
    if (status(c, "ad_hvp", ad_hvp(fuzz_objective, (void *)c->run, (size_t)p->n, p->x, p->v, &fx, g, hv), want)) {
        values(c, "ad_hvp", &fx, 1);
        for (int i = 0; i < p->n; i++) {
            entry(c, "ad_hvp(grad)", i, 0, g[i], &c->re[0], i, i, &c->fe[i], p->outs[0]);
            pass P2;
            pass_second(&c->L, &c->fe[i], &c->fv, &P2);
            entry2(c, "ad_hvp", i, -1, hv[i], &P2, &c->fe[i], &c->fv);
            pass_free(&P2);
        }
    }
    hvps_directions(c);
    memcpy(h0, g, (size_t)p->n * sizeof *g);
    free(g), free(hv);
}

static void drv_hessian(check_ctx *c, double *h0)
{
    const prog *p = c->p;
    double fx, *g = dalloc(p->n), *H = dalloc(p->n * p->n);
    ad_status want = c->ext_nojvp || c->nod2f ? AD_ENOTSUP : AD_OK;  /* an external without hvp, a map without d2f */
    c->allow_over = second_over(c, 0);
    if (status(c, "ad_hessian", ad_hessian(fuzz_objective, (void *)c->run, (size_t)p->n, p->x, &fx, g, H), want)) {
        values(c, "ad_hessian", &fx, 1);
        for (int i = 0; i < p->n; i++) {
            entry(c, "ad_hessian(grad)", i, 0, g[i], &c->re[0], i, i, &c->fe[i], p->outs[0]);
            for (int k = i; k < p->n; k++) {
                pass P2;
                pass_second(&c->L, &c->fe[i], &c->fe[k], &P2);
                entry2(c, "ad_hessian", i, k, H[i * p->n + k], &P2, &c->fe[i], &c->fe[k]);
                if (k != i)
                    entry2(c, "ad_hessian", k, i, H[k * p->n + i], &P2, &c->fe[i], &c->fe[k]);
                pass_free(&P2);
            }
        }
    }
    memcpy(h0, g, (size_t)p->n * sizeof *g);
    free(g), free(H);
}

/* The lower triangle against the oracle, as ad_hessian's entries; an entry
 * outside the structure is 0. */
static void drv_sparse_hessian(check_ctx *c)
{
    const prog *p = c->p;
    double fx, *g = dalloc(p->n);
    ad_csr H;
    /* an external without hvp, a map without d2f; a collective record (docs/api.md) */
    ad_status want = c->ext_nojvp || c->nod2f || c->coll ? AD_ENOTSUP : AD_OK;
    c->allow_over = second_over(c, 0);
    ad_status got = ad_sparse_hessian(fuzz_objective, (void *)c->run, (size_t)p->n, p->x, &fx, g, &H);
    if (status(c, "ad_sparse_hessian", got, want)) {
        values(c, "ad_sparse_hessian", &fx, 1);
        for (int i = 0; i < p->n; i++) {
            entry(c, "ad_sparse_hessian(grad)", i, 0, g[i], &c->re[0], i, i, &c->fe[i],
                  p->outs[0]);
            for (int k = 0; k <= i; k++) {
                double h = 0.0;
                for (size_t e = H.row_ptr[i]; e < H.row_ptr[i + 1]; e++)
                    if (H.col[e] == (size_t)k)
                        h = H.val[e];
                pass P2;
                pass_second(&c->L, &c->fe[i], &c->fe[k], &P2);
                entry2_sums(c, "ad_sparse_hessian", i, k, h, &P2, &c->fe[i], &c->fe[k], 1);
                pass_free(&P2);
            }
        }
        ad_csr_free(&H);
    }
    free(g);
}

/* A zero derivative has one sign whichever driver computes it (issue 19
 * section 4): output 0's row from every driver that gives it. */
static void zero_signs(check_ctx *c, double *const *rows, int nrows, const int *sparse_has,
                       const double *sparse)
{
    for (int i = 0; i < c->p->n; i++) {
        int zeros = 0, neg = 0, n = 0;
        for (int r = 0; r < nrows; r++, n++) {
            zeros += rows[r][i] == 0;
            neg += rows[r][i] == 0 && signbit(rows[r][i]);
        }
        if (sparse_has[i]) {
            n++;
            zeros += sparse[i] == 0;
            neg += sparse[i] == 0 && signbit(sparse[i]);
        }
        if (zeros == n && neg && neg != n)
            fail(c, "cross-driver", "zero-sign", i, 0, (double)neg, n, 0);
    }
}

static void passes(check_ctx *c)
{
    const prog *p = c->p;
    double *e = calloc((size_t)(p->n > p->m ? p->n : p->m) + 1, sizeof *e);
    c->fe = calloc((size_t)p->n + 1, sizeof *c->fe);
    c->re = calloc((size_t)p->m + 1, sizeof *c->re);
    for (int i = 0; i < p->n; i++) {
        e[i] = 1;
        pass_forward(&c->L, e, 1u << i, &c->fe[i]);
        e[i] = 0;
    }
    for (int j = 0; j < p->m; j++) {
        e[j] = 1;
        pass_reverse(&c->L, e, 1u << j, &c->re[j]);
        e[j] = 0;
    }
    pass_forward(&c->L, p->v, (1u << p->n) - 1, &c->fv);
    pass_reverse(&c->L, p->w, (1u << p->m) - 1, &c->rw);
    free(e);
}

/* Externals that were recorded (an active argument, an output): only
 * those reach the sweeps and their AD_ENOTSUP. */
static void recorded_externals(check_ctx *c)
{
    for (int j = 0; j < c->p->ncode; j++) {
        const insn *in = &c->p->code[j];
        if (in->op == OP_EXTERNAL && in->nout > 0 && c->L.recd[in->out]) {
            c->ext = 1;
            c->ext_nojvp |= in->sub;
        }
        if (in->op == OP_COLLECTIVE)  /* recorded whatever it reads, no output needed */
            c->ext = c->coll = 1;
        /* a map by the user's function without d2f, recorded (docs/api.md,
         * ad_mat_map_fn): ad_hvp, ad_hessian, ad_sparse_hessian refuse it */
        if (insn_map_op(in) == MAP_USER_NOD2F && in->nout > 0 && c->L.recd[in->out + in->nout - 1])
            c->nod2f = 1;
    }
}

/* ---- checkpointed loops: the program with loops (c->run) against the
 * same program with the loops written out (c->p), driver by driver ---- */

/* The double run of the program with loops gives the outputs of the one
 * written out, bit for bit (the interpreter's loop against prog_unroll). */
static void unroll_values(check_ctx *c)
{
    const prog *run = c->run;
    double *v = malloc(((size_t)run->nslots + 1) * sizeof *v);
    run_double(run, run->x, v);
    for (int j = 0; j < run->m; j++)
        if (!same_bits(v[run->outs[j]], c->val[c->p->outs[j]]))
            fail(c, "interpreter", "unroll", -1, j, v[run->outs[j]], c->val[c->p->outs[j]], 0);
    free(v);
}

/* Enclosing spans first: by lo, then the larger. */
static int span_order(const void *x, const void *y)
{
    const unroll_span *a = *(const unroll_span *const *)x, *b = *(const unroll_span *const *)y;
    return a->lo != b->lo ? (a->lo > b->lo) - (a->lo < b->lo) : (a->hi < b->hi) - (a->hi > b->hi);
}

/* Loops that are recorded (some steps, an argument that is a record),
 * and in_loop: the slots that are records of a step's own tape.  Inside a
 * step everything computed from the state and the params is a record
 * (the step is recorded with them as inputs), though written out it may
 * be a constant; a nested loop is recorded on its step's tape if one of
 * its arguments is a record there.  Live: it reaches the step's next
 * state (in every step around it). */
static void recorded_loops(check_ctx *c)
{
    const prog *run = c->run, *p = c->p;
    const unroll_info *ui = c->ui;
    if (!ui)
        return;
    unsigned char *recd = calloc((size_t)run->ncode + 1, 1);
    for (int j = 0; j < run->ncode; j++) {
        const insn *in = &run->code[j];
        for (int i = 0; in->op == OP_LOOP && in->steps > 0 && i < in->len + in->rows; i++)
            recd[j] |= c->L.recd[ui->map[run->args[in->arg + i]]];
        c->loop |= recd[j];
        c->r->loops += recd[j];
    }
    size_t ns = (size_t)p->nslots + 1;
    c->in_loop = calloc(ns, 1);
    c->loop_top = calloc(ns, sizeof *c->loop_top);
    c->loop_up = calloc(ns, 1);
    c->top_reached = calloc((size_t)run->ncode + 1, 1);
    c->top_recd = recd;  /* kept */
    /* What output 0 reaches in the recording with loops: records read by
     * records (a recorded loop's outputs are records, phantom or not). */
    int *maker = c->maker = malloc(ns * sizeof *maker);
    for (int j = 0; j < p->ncode; j++)
        for (int t = 0; t < p->code[j].nout; t++)
            maker[p->code[j].out + t] = j;
    int *reads = malloc(((size_t)p->nargs + 4) * sizeof *reads);
    unsigned char *reach0 = calloc(ns, 1);
    reach0[p->outs[0]] = p->m > 0 && c->L.recd[p->outs[0]];
    for (int s = p->nslots - 1; s >= p->n; s--) {
        if (!reach0[s])
            continue;
        int nr = insn_reads(p, &p->code[maker[s]], c->val, reads);
        for (int t = 0; t < nr; t++)
            reach0[reads[t]] |= c->L.recd[reads[t]];
    }
    for (int j = 0; j < run->ncode; j++) {  /* reached loops, and what their arguments read */
        const insn *in = &run->code[j];
        for (int i = 0; recd[j] && i < in->nout; i++)
            c->top_reached[j] |= reach0[ui->map[in->out + i]];
        for (int i = 0; c->top_reached[j] && i < in->len + in->rows; i++)
            c->loop_up[ui->map[run->args[in->arg + i]]] = 1;
    }
    for (int s = p->nslots - 1; s >= p->n; s--) {  /* through records, phantoms included */
        if (!c->loop_up[s])
            continue;
        int nr = insn_reads(p, &p->code[maker[s]], c->val, reads);
        for (int t = 0; t < nr; t++)
            c->loop_up[reads[t]] |= c->L.recd[reads[t]];
    }
    c->loop_down = calloc(ns, 1);
    for (int s = p->n; s < p->nslots; s++) {
        const insn *in = &p->code[maker[s]];
        if (in->op == OP_LOOPOUT) {  /* a loop of no steps copies its state0 */
            c->loop_down[s] = c->L.recd[s] && (in->steps > 0 || c->loop_down[in->a]);
            continue;
        }
        int nr = insn_reads(p, in, c->val, reads);
        for (int t = 0; t < nr && c->L.recd[s]; t++)
            c->loop_down[s] |= c->loop_down[reads[t]];
    }
    unsigned char *rec = calloc(ns, 1), *dead = calloc(ns, 1), *live = calloc(ns, 1);
    unsigned char *act[4] = {calloc(ns, 1), calloc(ns, 1), calloc(ns, 1), calloc(ns, 1)};
    unsigned char *lrec = calloc((size_t)ui->nloops + 1, 1);
    /* a nested loop whose block the step around it reaches (an output live
     * there): it then takes all its outputs as reached */
    unsigned char *lreach = calloc((size_t)ui->nloops + 1, 1);
    const unroll_span **order = malloc(((size_t)ui->nspans + 1) * sizeof *order);
    for (int k = 0; k < ui->nspans; k++)
        order[k] = &ui->spans[k];
    qsort(order, (size_t)ui->nspans, sizeof *order, span_order);
    for (int k = 0; k < ui->nspans; k++) {
        const unroll_span *sp = order[k];
        int d = sp->depth - 1 < 3 ? sp->depth - 1 : 3;
        unsigned char *A = act[d];
        if (sp->step == 0) {  /* is the loop recorded where it runs? */
            int r = 0;
            for (int i = 0; i < sp->nins; i++)
                r |= d == 0 ? c->L.recd[sp->ins[i]] : act[d - 1][sp->ins[i]];
            lrec[sp->loop] = (unsigned char)(d == 0 ? recd[sp->top] && r : r);
        }
        if (!lrec[sp->loop] || sp->hi == sp->lo) {  /* not recorded: no records of its steps */
            memset(rec + sp->lo, 0, (size_t)(sp->hi - sp->lo));
            continue;
        }
        memset(A + sp->lo, 0, (size_t)(sp->hi - sp->lo));
        memset(live + sp->lo, 0, (size_t)(sp->hi - sp->lo));
        for (int i = 0; i < sp->nins; i++)
            A[sp->ins[i]] = 1;
        for (int s = sp->lo; s < sp->hi; s++) {
            const insn *in = &p->code[maker[s]];
            int nr = insn_reads(p, in, c->val, reads);
            for (int t = 0; t < nr; t++)
                A[s] |= A[reads[t]];
        }
        for (int i = 0; i < sp->nouts; i++)
            if (sp->outs[i] >= sp->lo)
                live[sp->outs[i]] = 1;
        for (int s = sp->hi - 1; s >= sp->lo; s--) {
            if (!live[s])
                continue;
            const insn *in = &p->code[maker[s]];
            int nr = insn_reads(p, in, c->val, reads);
            for (int t = 0; t < nr; t++)
                if (reads[t] >= sp->lo)
                    live[reads[t]] = 1;
        }
        for (int s = sp->lo; s < sp->hi; s++)  /* nested loops this step reaches */
            if (live[s] && p->code[maker[s]].op == OP_LOOPOUT)
                lreach[p->code[maker[s]].sub] = 1;
        for (int s = sp->lo; s < sp->hi; s++) {
            /* the innermost step decides, as it comes last: live there, in a
             * loop that its own step reaches (or the program's loop); a
             * reached loop's outputs are all reached */
            const insn *in = &p->code[maker[s]];
            rec[s] = A[s];
            dead[s] = in->op == OP_LOOPOUT ? !lreach[in->sub] : !live[s] || (d > 0 && !lreach[sp->loop]);
            c->loop_top[s] = sp->top;
        }
        /* the marks stay: a nested loop's first step asks them of its
         * arguments; a step reads only its own slots and its inputs */
    }
    for (int s = 0; s < p->nslots; s++)
        c->in_loop[s] = rec[s] ? (dead[s] ? 2 : 1) : 0;
    free(order), free(reads), free(lrec), free(lreach), free(rec), free(dead), free(live), free(reach0);
    for (int k = 0; k < 4; k++)
        free(act[k]);
}

/* A result entry and where the oracle has it: first order, result r of
 * pass P at slot; second order (U set), the mixed pass of U and V, entry
 * (i, k) (k < 0: H v's entry i). */
typedef struct xent {
    const pass *P;
    int r, slot;
    const pass *U, *V;
    int i, k;
} xent;

static xent xfirst(const pass *P, int r, int slot)
{
    xent e = {P, r, slot, NULL, NULL, 0, 0};
    return e;
}

static xent xsecond(const pass *U, const pass *V, int i, int k)
{
    xent e = {NULL, 0, 0, U, V, i, k};
    return e;
}

/* 0 finite, 1 NaN, 2 +Inf, 3 -Inf */
static int dcls(double x) { return x != x ? 1 : x == INFINITY ? 2 : x == -INFINITY ? 3 : 0; }

#define LOOP_RTOL 1e-12  /* relative to the largest entry of the result (tests/test_loop.c: 1e-13) */
#define HI_UNSCALED 0x1p1020L
#define LO_UNSCALED 0x1p-1020L

/* Whether the loop (a sweep that is not scaled) and the loop written out
 * (scaled, docs/tape.md "Scaled seeds") may differ in entry e: its
 * intermediates leave what an unscaled double sweep holds.  *tol gets the
 * oracle's error bound of the entry (Inf: none). */
static int xexcused(const check_ctx *c, const xent *e, ld *tol)
{
    *tol = INFINITY;
    if (e->P) {
        const pass *P = e->P;
        ld t = P->on[e->slot] ? P->t[e->slot] : 0, E = P->on[e->slot] ? P->E[e->slot] : 0;
        if (isfinite(t) && isfinite(E))
            *tol = 2 * E + 4 * TINY + ORACLE_EPS * fabsl(t);
        return out_of_range(c, P, e->r);
    }
    if (c->L.big_second || out_of_range(c, e->U, 0) || out_of_range(c, e->V, 0) ||
        out_of_range(c, &c->re[0], e->i) || (e->k >= 0 && out_of_range(c, &c->re[0], e->k)))
        return 1;
    pass P2;
    pass_second(&c->L, e->U, e->V, &P2);
    int s = c->p->outs[0], out = !(P2.hi[0] < HI_UNSCALED && P2.lo[0] > LO_UNSCALED);
    ld t = P2.on[s] ? P2.t[s] : 0, E = P2.on[s] ? P2.E[s] : 0;
    if (!out && !second_skipped(c, e->i, e->k, &P2, e->U, e->V) && isfinite(t) && isfinite(E)) {
        long F = 0;  /* as entry2_sums */
        for (int k = 0; k < c->L.nslots; k++)
            if ((c->L.omask[k] & 1) && (e->U->on[k] || e->V->on[k]))
                F += c->L.fan[k];
        E += ORACLE_EPS * (ld)F * (P2.on[s] ? P2.M[s] : 0);
        *tol = 2 * E + 4 * TINY + ORACLE_EPS * fabsl(t);
    }
    pass_free(&P2);
    return out;
}

static int ext_through_loop(const check_ctx *c);

/* The class of a first-order entry is order-dependent (the oracle's). */
static int xunsure(const xent *e)
{
    return e->P && e->P->on[e->slot] && e->P->unc[e->slot];
}

/* Entry (i, j) of a result: a from the loop, b written out; scale: the
 * largest finite |entry| of b's result. */
static void xentry(check_ctx *c, const char *driver, int i, int j, double a, double b, double scale,
                   const xent *e)
{
    ld tol;
    if (xexcused(c, e, &tol)) {
        c->r->loop_excused++;
        return;
    }
    int ca = dcls(a), cb = dcls(b);
    if (ca != cb) {
        if (xunsure(e)) {
            c->r->loop_excused++;
            return;
        }
        /* The loop written out shows a documented defect (a NaN where the
         * structural ideal has none, forward-structural-zero say) that the
         * loop does not: as a failure of the written-out value, it is known. */
        failure w = {driver, "class", i, j, b, 0, 0, NULL};
        const char *k = cb == 1 ? known_defect(c, &w) : NULL;
        if (k && !known_is_bug(k) && strncmp(k, "loop-", 5)) {  /* the loops' classes are the loop's */
            c->r->loop_excused++;
            return;
        }
        /* First order, the same of the loop: a documented defect of blocks
         * (dead-records, matrix-constant-row) that the loop's outputs bring
         * in, as records although the step makes constants of them (a
         * matrix of them is recorded, a constant one written out). */
        failure l = {driver, "class", i, j, a, 0, 0, NULL};
        k = ca == 1 && failure_mode(c, &l) != '2' && !strstr(driver, "(grad)") ? known_defect(c, &l) : NULL;
        if (k && (!strcmp(k, "dead-records") || !strcmp(k, "matrix-constant-row"))) {
            c->r->loop_excused++;
            return;
        }
        /* An external that only the loop's outputs make recorded: the
         * Jacobian of the loop written out may sweep by columns (its tape
         * has no external without a jvp rule), the loop's by rows. */
        if (!strcmp(driver, "ad_jacobian") && ext_through_loop(c)) {
            c->r->loop_excused++;
            return;
        }
        c->r->loop_compared++;
        fail(c, driver, "loop-class", i, j, a, b, 0);
        return;
    }
    c->r->loop_compared++;
    ld d = fabsl((ld)a - (ld)b);
    /* the params' cotangents are summed step by step: not bit for bit;
     * where the sum cancels, both are within the oracle's bound */
    if (ca == 0 && !(d <= LOOP_RTOL * scale) && !(d <= 2 * tol))
        fail(c, driver, "loop-value", i, j, a, b, LOOP_RTOL * scale > 2 * tol ? LOOP_RTOL * scale : 2 * tol);
}

static double xscale(const double *b, int cnt)
{
    double s = 0;
    for (int k = 0; k < cnt; k++)
        if (isfinite(b[k]) && fabs(b[k]) > s)
            s = fabs(b[k]);
    return s;
}

/* An external that the library records only as it reads a recorded
 * loop's output (a record, docs/api.md, though the step made a constant
 * of it): the loop's AD_ENOTSUP, checked against the oracle by the
 * drivers' checks, is the loop written out's AD_OK. */
static int ext_through_loop(const check_ctx *c)
{
    for (int j = 0; j < c->p->ncode; j++) {
        const insn *in = &c->p->code[j];
        if (in->op == OP_EXTERNAL && in->nout > 0 && c->L.recd[in->out] && !c->L.active[in->out])
            return 1;
    }
    return 0;
}

/* Both statuses: equal, or AD_EOVERFLOW on one side where an entry may
 * leave the double range (allow).  Whether both are AD_OK. */
static int xstatus(check_ctx *c, const char *driver, const ad_status *st, int allow)
{
    if (st[0] == st[1])
        return st[0] == AD_OK;
    if (st[0] == AD_ENOTSUP && ext_through_loop(c)) {  /* the other: AD_OK, or what its sweep meets */
        c->r->loop_excused++;
        return 0;
    }
    /* One side's status against AD_OK is a documented defect of no loop
     * (a block's rule that overflows, say), met on one tape only: the
     * loop's is swept unscaled, the one written out scaled. */
    for (int l = 0; l < 2; l++) {
        failure w = {driver, "status", AD_OK, -1, (double)st[l], AD_OK, 0, NULL};
        const char *k = st[l] != AD_OK && st[1 - l] == AD_OK ? known_defect(c, &w) : NULL;
        if (k && !known_is_bug(k) && strncmp(k, "loop-", 5)) {
            c->r->loop_excused++;
            return 0;
        }
    }
    if (allow && ((st[0] == AD_EOVERFLOW && st[1] == AD_OK) || (st[1] == AD_EOVERFLOW && st[0] == AD_OK))) {
        c->r->loop_excused++;
        return 0;
    }
    fail(c, driver, "loop-status", (int)st[1], -1, (double)st[0], st[1], 0);
    return 0;
}

static void loop_cross_check(check_ctx *c)
{
    const prog *q = c->p, *P[2] = {c->run, c->p};
    size_t n = (size_t)q->n, m = (size_t)q->m;
    int N = q->n, M = q->m;
    double fx[2], *g[2], *h[2], *y[2], *A[2], *B[2], *J[2];
    ad_status st[2];
    for (int l = 0; l < 2; l++) {
        g[l] = dalloc(N), h[l] = dalloc(N), y[l] = dalloc(M);
        A[l] = dalloc(N > M ? N : M), B[l] = dalloc(N > M ? N : M), J[l] = dalloc(N * M);
    }
    xent e;

    for (int l = 0; l < 2; l++)
        st[l] = ad_gradient(fuzz_objective, (void *)P[l], n, q->x, &fx[l], g[l]);
    if (xstatus(c, "ad_gradient", st, c->over_first))
        for (int i = 0; i < N; i++)
            e = xfirst(&c->re[0], i, i), xentry(c, "ad_gradient", i, 0, g[0][i], g[1][i], xscale(g[1], N), &e);

    for (int l = 0; l < 2; l++)
        st[l] = ad_vjp(fuzz_function, (void *)P[l], n, q->x, m, q->w, y[l], A[l]);
    if (xstatus(c, "ad_vjp", st, c->over_first))
        for (int i = 0; i < N; i++)
            e = xfirst(&c->rw, i, i), xentry(c, "ad_vjp", i, -1, A[0][i], A[1][i], xscale(A[1], N), &e);

    for (int l = 0; l < 2; l++)
        st[l] = ad_jvp(fuzz_function, (void *)P[l], n, q->x, q->v, m, y[l], A[l]);
    if (xstatus(c, "ad_jvp", st, c->over_first))
        for (int j = 0; j < M; j++)
            e = xfirst(&c->fv, j, q->outs[j]), xentry(c, "ad_jvp", -1, j, A[0][j], A[1][j], xscale(A[1], M), &e);

    for (int l = 0; l < 2; l++)
        st[l] = ad_jacobian(fuzz_function, (void *)P[l], n, q->x, m, y[l], J[l]);
    if (xstatus(c, "ad_jacobian", st, c->over_first))
        for (int j = 0; j < M; j++)
            for (int i = 0; i < N; i++) {
                e = c->jac_forward ? xfirst(&c->fe[i], j, q->outs[j]) : xfirst(&c->re[j], i, i);
                xentry(c, "ad_jacobian", i, j, J[0][j * N + i], J[1][j * N + i], xscale(J[1], N * M), &e);
            }

    ad_linear *L[2] = {NULL, NULL};
    for (int l = 0; l < 2; l++)
        st[l] = ad_linearize(fuzz_function, (void *)P[l], n, q->x, m, y[l], &L[l]);
    if (xstatus(c, "ad_linearize", st, c->over_first)) {
        for (int l = 0; l < 2; l++)
            st[l] = ad_linear_jvp(L[l], q->v, A[l]);
        if (xstatus(c, "ad_linear_jvp", st, c->over_first))
            for (int j = 0; j < M; j++)
                e = xfirst(&c->fv, j, q->outs[j]),
                xentry(c, "ad_linear_jvp", -1, j, A[0][j], A[1][j], xscale(A[1], M), &e);
        for (int l = 0; l < 2; l++)
            st[l] = ad_linear_vjp(L[l], q->w, B[l]);
        if (xstatus(c, "ad_linear_vjp", st, c->over_first))
            for (int i = 0; i < N; i++)
                e = xfirst(&c->rw, i, i), xentry(c, "ad_linear_vjp", i, -1, B[0][i], B[1][i], xscale(B[1], N), &e);
    }
    ad_linear_free(L[0]);
    ad_linear_free(L[1]);

    /* the sparse Jacobian: the structure exactly, the values as a dense matrix */
    ad_csr S[2];
    for (int l = 0; l < 2; l++) {
        st[l] = ad_sparse_jacobian(fuzz_function, (void *)P[l], n, q->x, m, y[l], &S[l]);
        for (int k = 0; k < N * M; k++)
            J[l][k] = 0.0;
    }
    if (xstatus(c, "ad_sparse_jacobian", st, c->over_first)) {
        uint32_t *mask = calloc(2 * m + 1, sizeof *mask);
        for (int l = 0; l < 2; l++)
            for (int j = 0; j < M; j++)
                for (size_t k = S[l].row_ptr[j]; k < S[l].row_ptr[j + 1]; k++) {
                    mask[l * M + j] |= 1u << S[l].col[k];
                    J[l][j * N + (int)S[l].col[k]] = S[l].val[k];
                }
        for (int j = 0; j < M; j++) {
            if (mask[j] != mask[M + j])
                fail(c, "ad_sparse_jacobian", "loop-structure", (int)mask[M + j], j, (double)mask[j],
                     mask[M + j], 0);
            for (int i = 0; i < N; i++)
                if ((mask[j] & mask[M + j]) >> i & 1) {
                    e = xfirst(&c->re[j], i, i);
                    xentry(c, "ad_sparse_jacobian", i, j, J[0][j * N + i], J[1][j * N + i],
                           xscale(J[1], N * M), &e);
                }
        }
        free(mask);
    }
    for (int l = 0; l < 2; l++)
        if (st[l] == AD_OK)
            ad_csr_free(&S[l]);

    if (!c->ext_nojvp || ext_through_loop(c)) {  /* second order: an external without hvp makes both AD_ENOTSUP */
        int over = second_over(c, 1);
        for (int l = 0; l < 2; l++)
            st[l] = ad_hvp(fuzz_objective, (void *)P[l], n, q->x, q->v, &fx[l], g[l], h[l]);
        if (xstatus(c, "ad_hvp", st, over))
            for (int i = 0; i < N; i++) {
                e = xfirst(&c->re[0], i, i);
                xentry(c, "ad_hvp(grad)", i, 0, g[0][i], g[1][i], xscale(g[1], N), &e);
                e = xsecond(&c->fe[i], &c->fv, i, -1);
                xentry(c, "ad_hvp", i, -1, h[0][i], h[1][i], xscale(h[1], N), &e);
            }
        double *H[2] = {dalloc(N * N), dalloc(N * N)};
        over = second_over(c, 0);
        for (int l = 0; l < 2; l++)
            st[l] = ad_hessian(fuzz_objective, (void *)P[l], n, q->x, &fx[l], g[l], H[l]);
        if (xstatus(c, "ad_hessian", st, over))
            for (int i = 0; i < N; i++) {
                e = xfirst(&c->re[0], i, i);
                xentry(c, "ad_hessian(grad)", i, 0, g[0][i], g[1][i], xscale(g[1], N), &e);
                for (int k = 0; k < N; k++) {
                    e = xsecond(&c->fe[i < k ? i : k], &c->fe[i < k ? k : i], i < k ? i : k, i < k ? k : i);
                    xentry(c, "ad_hessian", i, k, H[0][i * N + k], H[1][i * N + k], xscale(H[1], N * N), &e);
                }
            }
        free(H[0]), free(H[1]);
    }
    for (int l = 0; l < 2; l++)
        free(g[l]), free(h[l]), free(y[l]), free(A[l]), free(B[l]), free(J[l]);
}

/* ---- nested derivatives (prog.c, prog_unnest): the program with its nested calls
 * written out (c->p) is the oracle's; the drivers run the program ---- */

static const char *nest_driver(const nest_node *nd) { return nd->mode ? "ad_jvp_r" : "ad_gradient_r"; }

/* n-ary records in a nested program (nested ones' too): there the
 * replayed sweep's sums are ad_gradient's only to rounding (docs/api.md). */
static int has_nary(const prog *p)
{
    for (int j = 0; j < p->ncode; j++)
        if (p->code[j].op >= OP_FIRST_ARRAY)
            return 1;
    for (int i = 0; i < p->nsubs; i++)
        if (has_nary(&p->subs[i]))
            return 1;
    return 0;
}

/* How far output t (grad[t - 1], or jv) of a nested call may be from
 * ad_gradient's (ad_jvp's), by the oracle of the nested program at the
 * call's point (its own nested calls written out): twice the oracle's
 * tolerance of the entry where the replay's sums are ad_gradient's only to
 * rounding (nary: n-ary records; each is within one of the exact value),
 * else 0.  -1: the oracle does not bound the entry, or a double sweep
 * that is not scaled cannot hold its intermediates (the replay's
 * products and sums are operations on doubles, ad_gradient's sweep is
 * scaled by 2^512: docs/conventions.md). */
static ld nest_tolerance(const nest_node *nd, int t, int nary)
{
    prog sub, q;
    nest_info ni;
    prog_copy(&sub, nd->sub);
    memcpy(sub.x, nd->in, (size_t)nd->k * sizeof *sub.x);
    prog_unnest(&sub, &q, &ni);
    double *val = malloc(((size_t)q.nslots + 1) * sizeof *val);
    run_double(&q, q.x, val);
    lin L;
    lin_approx = ni.approx;
    lin_build(&L, &q, val);
    lin_approx = NULL;
    pass P;
    double one = 1.0;
    int slot;
    if (nd->mode) {  /* ad_jvp's seeds: the inputs of nonzero direction (docs/conventions.md) */
        uint32_t seeded = 0;
        for (int i = 0; i < nd->k; i++)
            seeded |= (uint32_t)(nd->in[nd->k + i] != 0) << i;
        pass_forward(&L, nd->in + nd->k, seeded, &P);
        slot = q.outs[0];
    } else {
        pass_reverse(&L, &one, 1, &P);
        slot = t - 1;
    }
    int r = nd->mode ? 0 : t - 1;
    ld tol = -1;
    if (ni.status == AD_OK && P.on[slot] && !P.unc[slot] && !P.over[r] && range_unscaled(P.lo[r], P.hi[r]) &&
        isfinite(P.t[slot]) && isfinite(P.E[slot]))
        tol = nary ? 2 * (2 * P.E[slot] + 4 * TINY + ORACLE_EPS * fabsl(P.t[slot])) : 0;
    pass_free(&P);
    lin_free(&L);
    free(val);
    prog_free(&q);
    nest_info_free(&ni);
    prog_free(&sub);
    return tol;
}

/* The nested calls' own checks, and whether the program stops there:
 *   a replayed call's outputs are ad_gradient's (ad_jvp's) at the same
 *   point, bit for bit (docs/api.md: the same operations in the same
 *   order), kind nested-value (i: the call's number, j: the output);
 *   where the recording failed (a nested call failed: ad_gradient's
 *   AD_EOVERFLOW at constant arguments, say), every driver returns its
 *   status: checked here, and nothing else is. */
static int nest_first(check_ctx *c)
{
    const nest_info *ni = c->nest;
    const prog *run = c->run;
    c->r->nest_programs++;
    c->r->nest_nodes += ni->nnodes;
    for (int k = 0; k < ni->nnodes; k++)
        c->r->nest_replayed += ni->nodes[k].active;
    for (int k = 0; k < ni->nnodes; k++) {
        const nest_node *nd = &ni->nodes[k];
        if (!nd->active || nd->plain_st != AD_OK || ni->status != AD_OK)
            continue;
        for (int t = 0; t < (nd->mode ? 2 : 1 + nd->k); t++) {
            if (same_bits(nd->ref[t], nd->plain[t]))
                continue;
            ld tol = t > 0 ? nest_tolerance(nd, t, has_nary(nd->sub)) : 0;
            if (tol < 0)
                c->r->nest_unsure++;
            else if (!(isfinite(nd->ref[t]) && isfinite(nd->plain[t]) &&
                       fabsl((ld)nd->ref[t] - (ld)nd->plain[t]) <= tol))
                fail(c, nest_driver(nd), "nested-value", k, t, nd->ref[t], nd->plain[t], tol);
        }
    }
    if (ni->status == AD_OK)
        return 0;
    size_t n = (size_t)run->n, m = (size_t)run->m;
    double fx, *g = dalloc(run->n), *h = dalloc(run->n), *y = dalloc(run->m), *a = dalloc(run->m),
           *J = dalloc(run->n * run->m), *H = dalloc(run->n * run->n);
    ad_linear *L = NULL;
    ad_csr S;
    ad_status got[9];
    void *ctx = (void *)run;
    got[0] = ad_gradient(fuzz_objective, ctx, n, run->x, &fx, g);
    got[1] = ad_vjp(fuzz_function, ctx, n, run->x, m, run->w, y, g);
    got[2] = ad_jvp(fuzz_function, ctx, n, run->x, run->v, m, y, a);
    got[3] = ad_jacobian(fuzz_function, ctx, n, run->x, m, y, J);
    got[4] = ad_linearize(fuzz_function, ctx, n, run->x, m, y, &L);
    ad_linear_free(L);
    got[5] = ad_sparse_jacobian(fuzz_function, ctx, n, run->x, m, y, &S);
    if (got[5] == AD_OK)
        ad_csr_free(&S);
    got[6] = ad_hvp(fuzz_objective, ctx, n, run->x, run->v, &fx, g, h);
    got[7] = ad_hessian(fuzz_objective, ctx, n, run->x, &fx, g, H);
    got[8] = ad_sparse_hessian(fuzz_objective, ctx, n, run->x, &fx, g, &S);
    if (got[8] == AD_OK)
        ad_csr_free(&S);
    static const char *const names[9] = {"ad_gradient", "ad_vjp", "ad_jvp", "ad_jacobian", "ad_linearize",
                                         "ad_sparse_jacobian", "ad_hvp", "ad_hessian", "ad_sparse_hessian"};
    for (int d = 0; d < 9; d++)
        if (got[d] != ni->status)
            fail(c, names[d], "status", (int)ni->status, -1, (double)got[d], ni->status, 0);
    c->r->nest_failed++;
    free(g), free(h), free(y), free(a), free(J), free(H);
    return 1;
}

void check_program(const prog *run, report *r)
{
    check_ctx c;
    memset(&c, 0, sizeof c);
    memset(r, 0, sizeof *r);
    /* The oracle and the checks see the program with its loops written
     * out; the drivers run the one with loops. */
    prog unrolled;
    unroll_info ui;
    nest_info ni;
    int has_loop = prog_has_loop(run);
    int has_nest = !has_loop && prog_has_nestr(run);  /* the generator makes no program with both */
    const prog *p = run;
    int before = fuzz_interp_errors;
    if (has_loop) {
        prog_unroll(run, &unrolled, &ui);
        p = &unrolled;
        c.ui = &ui;
    } else if (has_nest) {
        prog_unnest(run, &unrolled, &ni);
        p = &unrolled;
        c.nest = &ni;
    }
    if (has_nest && getenv("FUZZ_DEBUG")) {  /* the program written out */
        fprintf(stderr, "written out:\n");
        prog_print(p, stderr);
    }
    c.p = p;
    c.run = run;
    c.drive = has_nest ? run : p;
    c.r = r;
    double *val = malloc(((size_t)p->nslots + 1) * sizeof *val);
    run_double(p, p->x, val);
    c.val = val;
    if (has_loop)
        unroll_values(&c);
    if (has_nest && nest_first(&c)) {  /* a nested call failed: every driver with it */
        if (program_this)
            program_checks(&c);
        free(val);
        prog_free(&unrolled);
        nest_info_free(&ni);
        return;
    }
    lin_approx = has_nest ? ni.approx : NULL;
    lin_build(&c.L, p, val);
    lin_approx = NULL;
    /* The writing out's own checks: its double run gives the recording's
     * values (interpreter unnest), its structural activity the library's
     * at the nested calls' outputs (interpreter unnest-activity); here,
     * where known.c tells the documented differences of the double and
     * ad_real forms (fmin's zeros, a matrix's shape). */
    if (has_nest && ni.bad_value >= 0)
        fail(&c, "interpreter", "unnest", ni.bad_value, -1, ni.bad_got, ni.bad_want, 0);
    if (has_nest && ni.bad_active >= 0)
        fail(&c, "interpreter", "unnest-activity", ni.bad_active, -1, ni.bad_act_got, !ni.bad_act_got, 0);
    recorded_externals(&c);
    recorded_loops(&c);
    c.jac_forward = p->n <= p->m && !c.ext_nojvp;
    passes(&c);
    for (int i = 0; i < p->n; i++)
        c.over_first |= any_out_of_range(&c, &c.fe[i]);
    for (int j = 0; j < p->m; j++)
        c.over_first |= any_out_of_range(&c, &c.re[j]);
    c.over_first |= any_out_of_range(&c, &c.fv) || any_out_of_range(&c, &c.rw);
    c.allow_over = c.over_first;
    int n = p->n;
    double *rows[4], *s0 = dalloc(n);
    int *s0_has = calloc((size_t)n + 1, sizeof *s0_has);
    for (int k = 0; k < 4; k++)
        rows[k] = dalloc(n);
    drv_gradient(&c, rows[0]);
    drv_vjp(&c);
    drv_jvp(&c);
    drv_jacobian(&c, rows[1]);
    drv_linear(&c);
    drv_sparse(&c, s0, s0_has);
    drv_hvp(&c, rows[2]);
    drv_hessian(&c, rows[3]);
    drv_sparse_hessian(&c);
    cross_hessians(&c);
    if (hook_this)
        hook_checks(&c);
    if (program_this)
        program_checks(&c);
    zero_signs(&c, rows, c.ext_nojvp || c.nod2f ? 2 : 4, s0_has, s0);
    if (has_loop)
        loop_cross_check(&c);
    if (fuzz_interp_errors != before)
        fail(&c, "interpreter", "interp", -1, -1, fuzz_interp_errors - before, 0, 0);
    for (int k = 0; k < 4; k++)
        free(rows[k]);
    free(s0), free(s0_has);
    for (int i = 0; i < n; i++)
        pass_free(&c.fe[i]);
    for (int j = 0; j < p->m; j++)
        pass_free(&c.re[j]);
    pass_free(&c.fv), pass_free(&c.rw);
    free(c.fe), free(c.re);
    lin_free(&c.L);
    free(val);
    if (has_loop) {
        prog_free(&unrolled);
        unroll_info_free(&ui);
    }
    if (has_nest) {
        prog_free(&unrolled);
        nest_info_free(&ni);
    }
    free(c.in_loop);
    free(c.maker);
    free(c.loop_top), free(c.loop_up), free(c.top_reached), free(c.loop_down), free(c.top_recd);
}
