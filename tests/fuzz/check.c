/* Every driver on one program, against the double run (values, bit for
 * bit, any NaN equal to any NaN: payloads are not promised) and against
 * the oracle (derivatives: class exact, value to the error bound). */
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
    if (!f.known)
        r->nunknown++;
    if (r->nfail <= FUZZ_KEEP)
        r->f[r->nfail - 1] = f;
    else if (!f.known)  /* keep unknown failures in view: they go first */
        for (int k = 0; k < FUZZ_KEEP; k++)
            if (r->f[k].known) {
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
 * hold.  A tape that holds a user's rule is swept unscaled (docs/tape.md). */
static int out_of_range(const check_ctx *c, const pass *P, int r)
{
    int scaled_ok = !c->ext && range_scaled(P->lo[r], P->hi[r]);
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
    if (status(c, "ad_gradient", ad_gradient(fuzz_objective, (void *)p, (size_t)p->n, p->x, &fx, g), AD_OK)) {
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
    if (status(c, "ad_vjp", ad_vjp(fuzz_function, (void *)p, (size_t)p->n, p->x, (size_t)p->m, p->w, y, wj), AD_OK)) {
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
    if (status(c, "ad_jvp", ad_jvp(fuzz_function, (void *)p, (size_t)p->n, p->x, p->v, (size_t)p->m, y, jv), want)) {
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
    if (status(c, "ad_jacobian", ad_jacobian(fuzz_function, (void *)p, (size_t)p->n, p->x, (size_t)p->m, y, J), AD_OK)) {
        values(c, "ad_jacobian", y, p->m);
        for (int j = 0; j < p->m; j++)
            for (int i = 0; i < p->n; i++)
                jac_entry(c, "ad_jacobian", c->jac_forward, i, j, J[j * p->n + i]);
    }
    memcpy(j0, J, (size_t)p->n * sizeof *J);
    free(y), free(J);
}

static void drv_linear(check_ctx *c)
{
    const prog *p = c->p;
    double *y = dalloc(p->m), *jv = dalloc(p->m), *wj = dalloc(p->n);
    ad_linear *L = NULL;
    if (status(c, "ad_linearize", ad_linearize(fuzz_function, (void *)p, (size_t)p->n, p->x, (size_t)p->m, y, &L), AD_OK)) {
        values(c, "ad_linearize", y, p->m);
        if (status(c, "ad_linear_jvp", ad_linear_jvp(L, p->v, jv), c->ext_nojvp ? AD_ENOTSUP : AD_OK))
            for (int j = 0; j < p->m; j++)
                entry(c, "ad_linear_jvp", -1, j, jv[j], &c->fv, j, p->outs[j], NULL, 0);
        if (status(c, "ad_linear_vjp", ad_linear_vjp(L, p->w, wj), AD_OK))
            for (int i = 0; i < p->n; i++)
                entry(c, "ad_linear_vjp", i, -1, wj[i], &c->rw, i, i, NULL, 0);
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
    if (status(c, "ad_sparse_jacobian", ad_sparse_jacobian(fuzz_function, (void *)p, (size_t)p->n, p->x, (size_t)p->m, y, &J), AD_OK)) {
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
static int second_skipped(const check_ctx *c, int i, int k, const pass *P2, const pass *U,
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

/* pairs: the entry is summed as edge pushing sums it (ad_sparse_hessian):
 * an interaction pushed onto every pair of a record's arguments meets
 * others there, up to F^2 additions where forward over reverse makes F. */
static void entry2_sums(check_ctx *c, const char *driver, int i, int k, double got,
                        const pass *P2, const pass *U, const pass *V, int pairs)
{
    int s = c->p->outs[0];
    if (second_skipped(c, i, k, P2, U, V)) {
        c->r->second_skipped++;
        return;
    }
    c->r->checked++;
    ld t = P2->on[s] ? P2->t[s] : 0, E = P2->on[s] ? P2->E[s] : 0;
    /* Forward over reverse adds every term into a running total, the
     * cotangent's tangent of each slot on the way (fan[] additions each):
     * recursive summation, eps |total| per addition. */
    long F = 0;
    for (int k = 0; k < c->L.nslots; k++)
        if ((c->L.omask[k] & 1) && (U->on[k] || V->on[k]))
            F += c->L.fan[k];
    E += ORACLE_EPS * (pairs ? (ld)F * (ld)F : (ld)F) * (P2->on[s] ? P2->M[s] : 0);
    ld tol = 2 * E + 4 * TINY + ORACLE_EPS * fabsl(t);
    if (!isfinite(got))
        fail(c, driver, "class", i, k, got, t, E);
    else if (!(fabsl((ld)got - t) <= tol))
        fail(c, driver, "value", i, k, got, t, tol);
}

static void drv_hvp(check_ctx *c, double *h0)
{
    const prog *p = c->p;
    double fx, *g = dalloc(p->n), *hv = dalloc(p->n);
    ad_status want = c->ext ? AD_ENOTSUP : AD_OK;
    c->allow_over = second_over(c, 1);
    if (status(c, "ad_hvp", ad_hvp(fuzz_objective, (void *)p, (size_t)p->n, p->x, p->v, &fx, g, hv), want)) {
        values(c, "ad_hvp", &fx, 1);
        for (int i = 0; i < p->n; i++) {
            entry(c, "ad_hvp(grad)", i, 0, g[i], &c->re[0], i, i, &c->fe[i], p->outs[0]);
            pass P2;
            pass_second(&c->L, &c->fe[i], &c->fv, &P2);
            entry2(c, "ad_hvp", i, -1, hv[i], &P2, &c->fe[i], &c->fv);
            pass_free(&P2);
        }
    }
    memcpy(h0, g, (size_t)p->n * sizeof *g);
    free(g), free(hv);
}

static void drv_hessian(check_ctx *c, double *h0)
{
    const prog *p = c->p;
    double fx, *g = dalloc(p->n), *H = dalloc(p->n * p->n);
    ad_status want = c->ext ? AD_ENOTSUP : AD_OK;
    c->allow_over = second_over(c, 0);
    if (status(c, "ad_hessian", ad_hessian(fuzz_objective, (void *)p, (size_t)p->n, p->x, &fx, g, H), want)) {
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
    ad_status want = c->ext ? AD_ENOTSUP : AD_OK;
    c->allow_over = second_over(c, 0);
    ad_status got = ad_sparse_hessian(fuzz_objective, (void *)p, (size_t)p->n, p->x, &fx, g, &H);
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
    }
}

void check_program(const prog *p, report *r)
{
    check_ctx c;
    memset(&c, 0, sizeof c);
    memset(r, 0, sizeof *r);
    c.p = p;
    c.r = r;
    double *val = malloc(((size_t)p->nslots + 1) * sizeof *val);
    int before = fuzz_interp_errors;
    run_double(p, p->x, val);
    c.val = val;
    lin_build(&c.L, p, val);
    recorded_externals(&c);
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
    zero_signs(&c, rows, c.ext ? 2 : 4, s0_has, s0);
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
}
