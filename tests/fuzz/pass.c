/* The oracle's passes over the linearised program, in long double.
 *
 * Forward: tangents from the seeded inputs (dual numbers); reverse:
 * cotangents from the seeded outputs; second: the mixed tangent of two
 * forward passes (hyper-dual numbers).  A slot that the seeds do not reach
 * structurally takes no part (its tangent is a structural zero, not a
 * 0 that meets an infinite partial): the sparse Jacobian's semantics,
 * which issue 19 asks of every driver.  Beside each value: M, the sum of
 * the magnitudes of its terms, and E, a bound on the error of a double
 * computation of it (each partial's error, and a rounding per term). */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"

#define EPS ORACLE_EPS
#define TINY 0x1p-1074L

static void pass_alloc(pass *P, int nslots, int nres)
{
    size_t ns = (size_t)nslots + 1, nr = (size_t)nres + 1;
    P->t = calloc(ns, sizeof *P->t);
    P->M = calloc(ns, sizeof *P->M);
    P->E = calloc(ns, sizeof *P->E);
    P->on = calloc(ns, 1);
    P->unc = calloc(ns, 1);
    P->lo = malloc(nr * sizeof *P->lo);
    P->hi = calloc(nr, sizeof *P->hi);
    P->over = calloc(nr, 1);
    P->nres = nres;
    P->ghi = 0;
    for (int r = 0; r < nres; r++)
        P->lo[r] = INFINITY;
}

void pass_free(pass *P)
{
    free(P->t), free(P->M), free(P->E), free(P->on), free(P->unc);
    free(P->lo), free(P->hi), free(P->over);
    memset(P, 0, sizeof *P);
}

/* |p| m with 0 for m = 0: a magnitude, where 0 x Inf is no term. */
static ld mag(ld p, ld m) { return m == 0 ? 0 : fabsl(p) * m; }

/* An intermediate x of the results in mask: the window of magnitudes. */
static void note(pass *P, uint32_t mask, ld x)
{
    x = fabsl(x);
    if (!(x > 0) || isinf(x))
        return;
    if (x > P->ghi)
        P->ghi = x;
    for (int r = 0; mask; r++, mask >>= 1)
        if (mask & 1) {
            if (x < P->lo[r]) P->lo[r] = x;
            if (x > P->hi[r]) P->hi[r] = x;
        }
}

/* For the second pass: a non-finite quantity, else as note(). */
static void note2(pass *P, uint32_t mask, ld x)
{
    if (mask && !isfinite(x))
        P->over[0] = 1;
    note(P, mask, x);
}

static void note_partial(pass *P, uint32_t mask, ld p);

/* A composite rule's 2 y (or M, x) is infinite: its results are not predicted. */
static void note_inner(pass *P, uint32_t mask, ld inner)
{
    if (!isinf(inner)) {
        note_partial(P, mask, inner);
        return;
    }
    for (int r = 0; mask; r++, mask >>= 1)
        if (mask & 1)
            P->over[r] = 1;
}

static void note_partial(pass *P, uint32_t mask, ld p)
{
    ld a = fabsl(p);
    if (!(a >= (ld)DBL_MAX || (a > 0 && a <= 0x1p-1075L)) || isinf(p))
        return;  /* finite and nonzero in long double, Inf or 0 in double */
    for (int r = 0; mask; r++, mask >>= 1)
        if (mask & 1)
            P->over[r] = 1;
}

/* Whether t (with error bound e) may be zero or of either sign. */
static int unsure(ld t, ld e, unsigned char unc) { return unc || (isfinite(t) && e >= fabsl(t) && !(t == 0 && e == 0)); }

/* Term p * t of a sum: is it certainly NaN, or of unknown class? */
static void classify(ld p, ld perr, ld t, ld e, unsigned char unc, int *sure_nan, int *unknown)
{
    if (isinf(t) && p == p && fabsl(p) <= perr + 4 * TINY && !unc) {
        *unknown = 1;  /* a subnormal partial may round to 0: Inf or NaN */
        return;
    }
    if (unc == 2) {  /* the partial's own NaN is order dependent */
        *unknown = 1;
        return;
    }
    if (p != p)
        *sure_nan = 1;
    else if (unc)
        *unknown = 1;  /* before the rest: an uncertain t may look like a sure 0 */
    else if (t != t || (isinf(p) && t == 0 && e == 0))
        *sure_nan = 1;
    else if (isinf(p) && unsure(t, e, 0))
        *unknown = 1;
}

void pass_forward(const lin *L, const double *seed, uint32_t seeded, pass *P)
{
    pass_alloc(P, L->nslots, L->m);
    for (int i = 0; i < L->n; i++)
        if (seeded >> i & 1) {
            P->on[i] = 1;
            P->t[i] = seed[i];
            P->M[i] = fabsl((ld)seed[i]);
            note(P, L->omask[i], seed[i]);
        }
    for (int s = L->n; s < L->nslots; s++) {
        ld t = 0, M = 0, E = 0;
        int cnt = 0, sure_nan = 0, unknown = 0, pinf = 0, ninf = 0;
        for (int i = L->e0[s]; i < L->e0[s + 1]; i++) {
            const edge *e = &L->e[i];
            int k = e->from;
            if (!P->on[k])
                continue;
            if (e->sonly || (e->zskip && P->t[k] == 0 && P->E[k] == 0 && !P->unc[k])) {
                cnt++;  /* reached; a user rule adds nothing for a zero seed */
                continue;
            }
            if (e->zskip && unsure(P->t[k], P->E[k], P->unc[k])) {
                unknown = 1;  /* a rule skips a zero seed: is it exactly 0? */
                cnt++;
                /* The class is unknown, the value is the term's all the
                 * same (what the rule adds, within p E, whether it skips
                 * or not): pass_second and cross.c's replays build on it.
                 * A seed that is 0 here adds nothing, as before. */
                if (P->t[k] != 0) {
                    ld c = e->p * P->t[k];
                    t += c;
                    M += mag(e->p, P->M[k]);
                    E += mag(e->p, P->E[k]) + mag(e->err, P->M[k]) + TINY * (1 + P->M[k]);
                    note(P, L->omask[s], c);
                }
                continue;
            }
            ld c = e->p * P->t[k];
            t += c;
            M += mag(e->p, P->M[k]);
            E += mag(e->p, P->E[k]) + mag(e->err, P->M[k]) + TINY * (1 + P->M[k]);
            cnt++;
            classify(e->p, e->err, P->t[k], P->E[k], e->punc || (e->composite && isinf(P->t[k])) ? 2 : P->unc[k],
                     &sure_nan, &unknown);
            if (e->inner_f > 0) {
                note(P, L->omask[s], e->inner_f * P->t[k]);
                note(P, L->omask[s], e->inner_f_lo * P->t[k]);
                note_inner(P, L->omask[s], e->inner_r);  /* 2 y, the rule's partial */
            }
            pinf |= c == INFINITY, ninf |= c == -INFINITY;
            note(P, L->omask[s], c);
            note_partial(P, L->omask[s], e->p);
        }
        if (!cnt)
            continue;
        P->on[s] = 1;
        P->t[s] = t;
        P->M[s] = M;
        P->E[s] = E + EPS * cnt * M;
        /* Inf - Inf: another grouping of the same terms (a primitive's
         * factored rule) may keep one infinity */
        P->unc[s] = (unknown || (pinf && ninf)) && !sure_nan;
        note(P, L->omask[s], t);
        note(P, L->omask[s], M);  /* a partial sum may reach the sum of magnitudes */
    }
}

void pass_reverse(const lin *L, const double *w, uint32_t seeded, pass *P)
{
    pass_alloc(P, L->nslots, L->n);
    int *cnt = calloc((size_t)L->nslots + 1, sizeof *cnt);
    unsigned char *nan = calloc((size_t)L->nslots + 1, 1), *unk = calloc((size_t)L->nslots + 1, 1);
    unsigned char *sgn = calloc((size_t)L->nslots + 1, 1);
    for (int j = 0; j < L->m; j++)
        if (seeded >> j & 1) {
            int s = L->p->outs[j];
            if (!L->active[s])
                continue;
            P->on[s] = 1;
            P->t[s] += w[j];
            P->M[s] += fabsl((ld)w[j]);
            cnt[s]++;
            note(P, L->imask[s], w[j]);
        }
    for (int s = L->nslots - 1; s >= 0; s--) {
        if (!P->on[s])
            continue;
        P->E[s] += EPS * cnt[s] * P->M[s];
        P->unc[s] = unk[s] && !nan[s];
        note(P, L->imask[s], P->t[s]);
        note(P, L->imask[s], P->M[s]);  /* a partial sum may reach the sum of magnitudes */
        for (int i = L->e0[s]; i < L->e0[s + 1]; i++) {
            const edge *e = &L->e[i];
            int k = e->from, a = 0, b = 0;
            if (e->sonly || (e->zskip && P->t[s] == 0 && P->E[s] == 0 && !P->unc[s])) {
                P->on[k] = 1;  /* reached; a user rule adds nothing for a zero seed */
                continue;
            }
            if (e->zskip && unsure(P->t[s], P->E[s], P->unc[s])) {
                unk[k] = 1;  /* a rule skips a zero seed: is it exactly 0? */
                P->on[k] = 1;
                if (P->t[s] != 0) {  /* the value the term's all the same, as in pass_forward */
                    ld c = e->p * P->t[s];
                    P->t[k] += c;
                    P->M[k] += mag(e->p, P->M[s]);
                    P->E[k] += mag(e->p, P->E[s]) + mag(e->err, P->M[s]) + TINY * (1 + P->M[s]);
                    cnt[k]++;
                    note(P, L->imask[k], c);
                }
                continue;
            }
            ld c = e->p * P->t[s];
            P->on[k] = 1;
            P->t[k] += c;
            P->M[k] += mag(e->p, P->M[s]);
            P->E[k] += mag(e->p, P->E[s]) + mag(e->err, P->M[s]) + TINY * (1 + P->M[s]);
            cnt[k] += e->alias ? cnt[s] : 1;
            classify(e->p, e->err, P->t[s], P->E[s], e->punc || (e->composite && isinf(P->t[s])) ? 2 : P->unc[s],
                     &a, &b);
            if (e->inner_r > 0) {
                note(P, L->imask[k], e->inner_r * P->t[s]);
                note(P, L->imask[k], e->inner_r_lo * P->t[s]);
                note_inner(P, L->imask[k], e->inner_r);  /* 2 y, the rule's partial */
            }
            nan[k] |= (unsigned char)a;
            unk[k] |= (unsigned char)b;
            sgn[k] |= c == INFINITY ? 1 : c == -INFINITY ? 2 : 0;
            unk[k] |= sgn[k] == 3;  /* Inf - Inf: order dependent, as above */
            note(P, L->imask[k], c);
            note_partial(P, L->imask[k], e->p);
        }
    }
    free(cnt), free(nan), free(unk), free(sgn);
}

/* The mixed tangent t_uv of forward passes U and V (hyper-dual numbers):
 * t_uv = sum p t_uv[k] + sum p2 t_u[k] t_v[l].  A second partial that is
 * exactly 0 adds nothing (conventions.md); M, E and the window as above,
 * the window over every slot whose t_u or t_v is on, output 0's only. */
void pass_second(const lin *L, const pass *U, const pass *V, pass *P)
{
    pass_alloc(P, L->nslots, 1);
    for (int s = L->n; s < L->nslots; s++) {
        ld t = 0, M = 0, E = 0;
        int cnt = 0;
        uint32_t om = L->omask[s] & 1;
        /* Second order is checked only where everything on the way is finite. */
        if (om && (U->on[s] || V->on[s]) && !isfinite(L->val[s]))
            P->over[0] = 1;
        const edge *e = L->e + L->e0[s];
        for (int i = 0; i < L->e0[s + 1] - L->e0[s]; i++) {
            int k = e[i].from;
            if (!P->on[k])
                continue;
            t += e[i].p * P->t[k];
            M += mag(e[i].p, P->M[k]);
            /* the library sums this term again in reverse, among the fan[k] of k */
            E += mag(e[i].p, P->E[k]) + mag(e[i].err, P->M[k]) + TINY * (1 + P->M[k]) +
                 EPS * L->fan[k] * mag(e[i].p, P->M[k]);
            cnt++;
            note2(P, om, e[i].p * P->t[k]);
            note2(P, om, e[i].p);
        }
        for (int i = L->h0[s]; i < L->h0[s + 1]; i++) {
            const sec *h = &L->h[i];
            for (int order = 0; order < (h->k < h->l ? 2 : 1); order++) {
                int k = e[order ? h->l : h->k].from, l = e[order ? h->k : h->l].from;
                if (h->p2 == 0 || !U->on[k] || !V->on[l])
                    continue;
                ld uv = U->t[k] * V->t[l], muv = U->M[k] * V->M[l];
                t += h->p2 * uv;
                M += mag(h->p2, muv);
                E += mag(h->p2, U->E[k] * V->M[l] + U->M[k] * V->E[l]) + mag(h->err, muv) +
                     TINY * (1 + muv) + EPS * (L->fan[k] + L->fan[l]) * mag(h->p2, muv);
                cnt++;
                note2(P, om, h->p2 * uv);
                note2(P, om, h->p2);
                note2(P, om, U->t[k]);
                note2(P, om, V->t[l]);
            }
        }
        if (!cnt)
            continue;
        P->on[s] = 1;
        P->t[s] = t;
        P->M[s] = M;
        P->E[s] = E + EPS * cnt * M;
        note2(P, om, t);
    }
}

int range_scaled(ld lo, ld hi) { return hi < 0x1p510L && lo > 0x1p-1530L; }
int range_unscaled(ld lo, ld hi) { return hi < 0x1p1020L && lo > 0x1p-1020L; }
