/* Sparse against dense Hessians (issue 30): ad_hessian (forward over
 * reverse) and ad_sparse_hessian (edge pushing) on the same program at the
 * same point, and ad_sparse_hessian_values into the structure that
 * ad_sparse_hessian returned, at that point and at a perturbed one.
 *
 *   status     equal, or one AD_OK and the other AD_EOVERFLOW (edge pushing
 *              keeps z h as a double where forward over reverse keeps the
 *              second partial as m 2^e: docs/conventions.md, "Second
 *              partials outside the range"; counted)
 *   structure  a lower-triangle pair whose dense entry (either order) is
 *              not 0 (NaN and Inf included) is in the sparse structure; a
 *              pair outside it is 0 in the dense Hessian, both orders
 *   value      where both entries are finite, |dense - sparse| is at most
 *              the sum of the two drivers' oracle tolerances (check.c's
 *              entry2 and entry2_sums with pairs): each is within its own
 *              of the exact value, so they are within the sum of each other
 *   values     ad_sparse_hessian_values at the same point: the same status,
 *              fx, grad and H values, bit for bit, the structure unchanged;
 *              at a perturbed point x': where ad_sparse_hessian's structure
 *              at x' lies inside the one given, its values bit for bit and
 *              0 on the pairs it lacks, else AD_ESTRUCTURE with NaN values
 *              and the structure unchanged
 *
 *   loops      a program whose checkpointed loops are recorded (c->run):
 *              ad_sparse_hessian through them has the same status as
 *              with the loops written out (c->p), or one AD_OK and the
 *              other AD_EOVERFLOW (counted), and, both AD_OK, the same
 *              structure, pair for pair: edge pushing carried through
 *              the steps keeps the reach of the loop written out (the
 *              values are check.c's, against the oracle); not where a
 *              recorded matrix's product is recorded (has_matrix)
 *
 * The program is c->p, with its checkpointed loops written out (the
 * oracle's); programs whose recording holds an external function without
 * an hvp rule are left out (both refuse them), and AD_ENOTSUP is a
 * failure. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_ctx.h"

#define TINY 0x1p-1074L
#define DRIVER "ad_hessian~ad_sparse_hessian"
#define VDRIVER "ad_sparse_hessian_values"

/* counts, in the report's cross[] */
enum { X_PROGRAMS, X_VALUES, X_BEYOND, X_UNBOUNDED, X_STRUCTURE, X_OVER_DENSE, X_OVER_SPARSE,
       X_KEPT, X_BITS, X_MOVED, X_LOOPS, X_LOOP_PAIRS, X_LOOP_OVER };

static double *dalloc(int n)
{
    double *a = malloc(((size_t)n + 1) * sizeof *a);
    for (int i = 0; i <= n; i++)
        a[i] = -12345.0;  /* anything a driver fails to write shows */
    return a;
}

static int same_bits(double a, double b) { return (a != a && b != b) || !memcmp(&a, &b, sizeof a); }

/* The known-defect classes that can make the two drivers differ: those of
 * second-order sweeps.  Classes that make the double run differ from the
 * ad_real one (both drivers run on ad_real) or that concern first-order
 * partials (both drivers use the same ones) explain nothing here. */
static const char *const second_order_classes[] = {
    "forward-structural-zero", "matrix-constant-row", "doc-limit-pow-second",
    "hypot-second-subnormal", "second-order-underflow", "doc-limit-prod-second", "dead-records",
    "oracle-mat-sqnorm-range",  /* 2 y A past the range inside the block: its Inf meets a zero */
    "map-dead-entry-second",    /* ad_mat_map's dead entries in second-order sweeps (a library bug) */
    /* a nested call's replay: NaN records where the written-out sweep has none */
    "nested-dead-record", "nested-jvp-zero-direction", "nested-atan2-range", "nested-second-inf-partial",
    "oracle-nested-cancel", "nested-prod-second",
};

/* A cross failure at (i, k) is known when the same discrepancy, seen as a
 * failure of one of the two drivers against the oracle (got: that
 * driver's value), belongs to a second-order known class. */
static const char *cross_known(const check_ctx *c, const char *kind, int i, int k, double dense,
                               double sparse, ld want, ld tol)
{
    const char *drivers[2] = {"ad_hessian", "ad_sparse_hessian"};
    double got[2] = {dense, sparse};
    for (int d = 0; d < 2; d++) {
        failure f = {drivers[d], kind, i, k, got[d], want, tol, NULL};
        const char *kn = known_defect_among(c, &f, second_order_classes,
                                            (int)(sizeof second_order_classes / sizeof *second_order_classes));
        if (kn)
            return kn;
    }
    return NULL;
}

static void cfail(check_ctx *c, const char *driver, const char *kind, int i, int j, double got,
                  ld want, ld tol, const char *known)
{
    failure f = {driver, kind, i, j, got, want, tol, known};
    report *r = c->r;
    int unknown = !f.known || known_is_bug(f.known);
    r->nfail++;
    if (unknown)
        r->nunknown++;
    if (r->nfail <= FUZZ_KEEP)
        r->f[r->nfail - 1] = f;
    else if (unknown)  /* keep unknown failures in view: they go first (as check.c) */
        for (int q = 0; q < FUZZ_KEEP; q++)
            if (r->f[q].known && !known_is_bug(r->f[q].known)) {
                r->f[q] = f;
                break;
            }
}

/* H is a lower triangle of n rows with columns ascending. */
static int csr_ok(const ad_csr *H, int n)
{
    if (H->rows != (size_t)n || H->cols != (size_t)n || !H->row_ptr || H->row_ptr[0] != 0 ||
        H->row_ptr[n] != H->nnz || (H->nnz && (!H->col || !H->val)))
        return 0;
    for (int r = 0; r < n; r++) {
        if (H->row_ptr[r] > H->row_ptr[r + 1])
            return 0;
        for (size_t e = H->row_ptr[r]; e < H->row_ptr[r + 1]; e++)
            if (H->col[e] > (size_t)r || (e > H->row_ptr[r] && H->col[e] <= H->col[e - 1]))
                return 0;
    }
    return 1;
}

/* Entry (i, k) of H (k <= i), or -1. */
static long where(const ad_csr *H, int i, int k)
{
    for (size_t e = H->row_ptr[i]; e < H->row_ptr[i + 1]; e++)
        if (H->col[e] == (size_t)k)
            return (long)e;
    return -1;
}

/* ---- where the two algorithms stay in the double range ----
 *
 * The tolerance below is the oracle's rounding model, which holds where no
 * intermediate of either algorithm leaves the double range.  check.c
 * checks each driver only inside a window ([2^-900, 2^300]) of the
 * oracle's forward-over-forward quantities; here each algorithm is
 * replayed on the linearisation in long double, at the level of slots,
 * and its own intermediates are followed to the entries they reach:
 *   edge pushing: z h (creations), g (g W) and g W (pushes), seeded as
 *     the sweep is, by 2^512, and rerun unscaled where that overflows;
 *   forward over reverse (lane k): the tangents u and h u (unscaled),
 *     the cotangents z, z (h u), the cotangents' tangents and their
 *     products with the partials (scaled, or the unscaled rerun).
 * An entry is compared where every intermediate that reaches it is
 * finite and fits a scaled or an unscaled sweep (pass.c's range_scaled,
 * range_unscaled: 2 to 4 bits from the ends), and the forward tangents
 * fit the unscaled range; an intermediate at W(a, b) or at the cotangent
 * tangent of slot a in lane k reaches the entries (i, k) with i, k inputs
 * that reach a and b (or k itself). */

typedef struct win {
    ld lo, hi;
    int over;  /* a non-finite intermediate */
} win;

static void win_init(win *w, int cnt)
{
    for (int q = 0; q < cnt; q++)
        w[q].lo = INFINITY, w[q].hi = 0, w[q].over = 0;
}

static void win_put(win *e, ld x, int bad)
{
    if (bad) {
        e->over = 1;
        return;
    }
    if (x < e->lo) e->lo = x;
    if (x > e->hi) e->hi = x;
}

/* Intermediate x reaches the entries (i, k) and (k, i), i in ma, k in mb. */
static void win_note(win *w, int n, uint32_t ma, uint32_t mb, ld x)
{
    int bad = !isfinite(x);
    x = fabsl(x);
    if (!bad && !(x > 0))
        return;
    for (int i = 0; i < n; i++)
        for (int k = 0; (ma >> i & 1) && k < n; k++)
            if (mb >> k & 1) {
                win_put(&w[i * n + k], x, bad);
                win_put(&w[k * n + i], x, bad);
            }
}

static int win_swept(const win *e)
{
    return !e->over && (range_scaled(e->lo, e->hi) || range_unscaled(e->lo, e->hi));
}

static int win_plain(const win *e)
{
    return !e->over && range_unscaled(e->lo, e->hi);
}

#define SIM_MAX_SLOTS 600  /* edge pushing's W is dense here: larger programs are not replayed */

/* Edge pushing over the slots the reverse sweep from output 0 reaches:
 * W, pushed and created as lib/sweeps' edge pushing does (one weight per
 * unordered pair, kept here in both orders).  H (n x n) gets W's inputs'
 * rows.  Returns 0 where the program is too large. */
static int sim_edge_pushing(const check_ctx *c, win *w, ld *H)
{
    const lin *L = &c->L;
    const pass *R = &c->re[0];
    int ns = L->nslots, n = L->n, cnt = 0;
    int *ix = malloc(((size_t)ns + 1) * sizeof *ix), *slot = malloc(((size_t)ns + 1) * sizeof *slot);
    for (int s = 0; s < ns; s++)
        if (R->on[s]) {
            slot[cnt] = s;
            ix[s] = cnt++;
        } else {
            ix[s] = -1;
        }
    if (cnt > SIM_MAX_SLOTS) {
        free(ix), free(slot);
        return 0;
    }
    ld *W = calloc((size_t)cnt * (size_t)cnt + 1, sizeof *W);
    for (int s = ns - 1; s >= n; s--) {
        int S = ix[s];
        if (S < 0)
            continue;
        const edge *e = L->e + L->e0[s];
        int ne = L->e0[s + 1] - L->e0[s];
        ld z = R->t[s], wss = W[(size_t)S * cnt + S];
        for (int q = 0; q < S; q++) {  /* W(s, q) onto the arguments */
            ld wv = W[(size_t)S * cnt + q];
            if (wv == 0)
                continue;
            for (int j = 0; j < ne; j++) {
                int a = ix[e[j].from];
                if (a < 0)
                    continue;
                ld v = e[j].p * wv;
                win_note(w, n, L->imask[e[j].from], L->imask[slot[q]], v);
                W[(size_t)a * cnt + q] += v;
                W[(size_t)q * cnt + a] += v;
            }
        }
        for (int j = 0; wss != 0 && j < ne; j++)  /* W(s, s) onto pairs: g (g W) */
            for (int l = 0; l < ne; l++) {
                int a = ix[e[j].from], b = ix[e[l].from];
                if (a < 0 || b < 0)
                    continue;
                ld inner = e[l].p * wss, v = e[j].p * inner;
                win_note(w, n, L->imask[e[j].from], L->imask[e[l].from], inner);
                win_note(w, n, L->imask[e[j].from], L->imask[e[l].from], v);
                W[(size_t)a * cnt + b] += v;
            }
        for (int h = L->h0[s]; h < L->h0[s + 1]; h++) {  /* creation: z h */
            const sec *q = &L->h[h];
            int ka = e[q->k].from, la = e[q->l].from, a = ix[ka], b = ix[la];
            if (q->p2 == 0 || a < 0 || b < 0)
                continue;
            ld v = z * q->p2;
            win_note(w, n, L->imask[ka], L->imask[la], v);
            W[(size_t)a * cnt + b] += v;
            if (q->k != q->l)
                W[(size_t)b * cnt + a] += v;
        }
        for (int q = 0; q < cnt; q++)
            W[(size_t)S * cnt + q] = W[(size_t)q * cnt + S] = 0;
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++)
            H[i * n + k] = ix[i] < 0 || ix[k] < 0 ? 0 : W[(size_t)ix[i] * cnt + ix[k]];
    free(W), free(ix), free(slot);
    return 1;
}

/* Forward over reverse in lane k (the tangents of fe[k]): the cotangents'
 * tangents zd, column k of H.  sw: intermediates of the reverse sweep
 * (scaled), pw: of the tangents (unscaled). */
static void sim_forward_over_reverse(const check_ctx *c, int k, win *sw, win *pw, ld *H)
{
    const lin *L = &c->L;
    const pass *R = &c->re[0], *U = &c->fe[k];
    int ns = L->nslots, n = L->n;
    uint32_t km = 1u << k;
    ld *zd = calloc((size_t)ns + 1, sizeof *zd);
    for (int s = ns - 1; s >= n; s--) {
        if (!R->on[s])
            continue;
        const edge *e = L->e + L->e0[s];
        int ne = L->e0[s + 1] - L->e0[s];
        ld z = R->t[s], zs = zd[s];
        win_note(sw, n, L->imask[s], km, z);
        win_note(sw, n, L->imask[s], km, zs);
        for (int j = 0; j < ne; j++) {
            ld t = zs * e[j].p;  /* 0 x Inf too: the sweep multiplies it */
            win_note(sw, n, L->imask[e[j].from], km, t);
            zd[e[j].from] += t;
        }
        for (int h = L->h0[s]; h < L->h0[s + 1]; h++) {
            const sec *q = &L->h[h];
            if (q->p2 == 0)
                continue;
            for (int o = 0; o < (q->k < q->l ? 2 : 1); o++) {
                int to = e[o ? q->l : q->k].from, from = e[o ? q->k : q->l].from;
                ld u = U->on[from] ? U->t[from] : 0, hu = q->p2 * u, t = z * hu;
                win_note(pw, n, L->imask[to], km, u);
                win_note(pw, n, L->imask[to], km, hu);
                win_note(sw, n, L->imask[to], km, t);
                zd[to] += t;
            }
        }
    }
    for (int i = 0; i < n; i++)
        H[i * n + k] = zd[i];
    free(zd);
}

/* The oracle's value of H[i][k] and the tolerance within which the dense
 * and the sparse Hessian agree: check.c's entry2 tolerance (forward over
 * reverse, F additions of the fan-out sums) plus entry2_sums's with pairs
 * (edge pushing, F^2).  Not finite where the oracle cannot bound it. */
static ld cross_tol(const check_ctx *c, int i, int k, ld *want, ld *mag, int *checked)
{
    pass P2;
    const pass *U = &c->fe[i], *V = &c->fe[k];
    pass_second(&c->L, U, V, &P2);
    int s = c->p->outs[0];
    ld t, E, M = P2.on[s] ? P2.M[s] : 0;
    /* each driver within its own bound of the oracle (check.c), so the two
     * within the sum */
    ld tol = second_bound(c, &P2, U, V, 0, &t, &E) + second_bound(c, &P2, U, V, 1, &t, &E);
    if (checked)
        *checked = !second_skipped(c, i, k, &P2, U, V);
    pass_free(&P2);
    *want = t;
    if (mag)
        *mag = M;
    return tol;
}

/* Whether every value on lane U's way to output 0 is finite: where one is
 * not, the oracle's partials there are conventions (docs/conventions.md),
 * with no error bound to build a tolerance on. */
static int values_finite(const check_ctx *c, const pass *U)
{
    const lin *L = &c->L;
    for (int s = 0; s < L->nslots; s++)
        if (U->on[s] && (L->omask[s] & 1) && !isfinite(L->val[s]))
            return 0;
    return 1;
}

/* Which entries both algorithms compute in range: ok[i * n + k]; He, Hf:
 * the replays' Hessians. */
static void in_range(const check_ctx *c, unsigned char *ok, ld *He, ld *Hf)
{
    int n = c->p->n;
    win *ew = malloc(((size_t)n * n + 1) * sizeof *ew), *sw = malloc(((size_t)n * n + 1) * sizeof *sw),
        *pw = malloc(((size_t)n * n + 1) * sizeof *pw);
    win_init(ew, n * n), win_init(sw, n * n), win_init(pw, n * n);
    int replayed = !c->L.big_second && sim_edge_pushing(c, ew, He);
    for (int k = 0; replayed && k < n; k++)
        sim_forward_over_reverse(c, k, sw, pw, Hf);
    unsigned char *fin = malloc((size_t)n + 1);
    for (int i = 0; i < n; i++)
        fin[i] = values_finite(c, &c->fe[i]);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++) {
            const pass *U = &c->fe[k];
            int q = i * n + k;
            ok[q] = replayed && fin[i] && fin[k] && win_swept(&ew[q]) && win_swept(&sw[q]) &&
                    win_plain(&pw[q]) && !U->over[0] && range_unscaled(U->lo[0], U->hi[0]);
            if (getenv("FUZZ_DEBUG"))
                fprintf(stderr, "cross (%d, %d): edge pushing %Lg [%Lg, %Lg]%s, forward over reverse "
                        "%Lg [%Lg, %Lg]%s, tangents [%Lg, %Lg]%s: %s\n", i, k, He[q], ew[q].lo,
                        ew[q].hi, ew[q].over ? " over" : "", Hf[q], sw[q].lo, sw[q].hi,
                        sw[q].over ? " over" : "", pw[q].lo, pw[q].hi, pw[q].over ? " over" : "",
                        ok[q] ? "compared" : "not compared");
        }
    free(ew), free(sw), free(pw), free(fin);
}

/* Why D[row][*] may be NaN where edge pushing has no pair: forward over
 * reverse multiplies, at each record that output 0's reverse sweep
 * reaches, the tangent of its cotangent by its first partials, and its
 * cotangent by h u, where edge pushing forms neither product.  That
 * tangent is 0 where nothing nonlinear lies above the record (the
 * output's seed), and h u is 0 in a lane that does not reach the
 * record's arguments; 0 x Inf is NaN.  Returns "partial" where a record
 * on the way to input `row` has a non-finite first partial (f = x0 Inf:
 * docs/conventions.md gives this product for sqrt at 0, "H itself is NaN
 * there"), "cotangent" where a cotangent on the way is past the double
 * range (in every pass: the unscaled one too), else NULL.  Named in the
 * failure's kind, still failures: reported, not decided. */
static const char *zero_times_inf(const check_ctx *c, int row)
{
    const lin *L = &c->L;
    const pass *R = &c->re[0];
    int cot = 0;
    for (int s = L->n; s < L->nslots; s++) {
        if (!(L->omask[s] & 1) || !R->on[s])
            continue;
        for (int e = L->e0[s]; e < L->e0[s + 1]; e++) {
            int a = L->e[e].from;
            if (!(L->imask[a] >> row & 1))
                continue;
            if (!isfinite((double)L->e[e].p))
                return "structure(0 x Inf: partial)";
            cot |= !(fabsl(R->t[s]) <= (ld)DBL_MAX) || !(fabsl(R->t[a]) <= (ld)DBL_MAX);
        }
    }
    return cot ? "structure(0 x Inf: cotangent)" : NULL;
}

/* Structure and values of dense D against sparse S, both AD_OK. */
static void compare(check_ctx *c, const double *D, const ad_csr *S)
{
    int n = c->p->n;
    unsigned char *ok = calloc((size_t)n * n + 1, 1);
    ld *He = calloc((size_t)n * n + 1, sizeof *He), *Hf = calloc((size_t)n * n + 1, sizeof *Hf);
    in_range(c, ok, He, Hf);
    for (int i = 0; i < n; i++)
        for (int k = 0; k <= i; k++) {
            double d[2] = {D[i * n + k], D[k * n + i]};
            long e = where(S, i, k);
            if (e < 0) {
                for (int o = 0; o < 2; o++)
                    if (d[o] != 0) {  /* NaN too */
                        ld want, tol = cross_tol(c, i, k, &want, NULL, NULL);
                        const char *kind = isfinite(d[o]) ? "value" : "class";
                        int r = o ? k : i;
                        const char *why = d[o] != d[o] ? zero_times_inf(c, r) : NULL;
                        failure named = {DRIVER, why, r, o ? i : k, d[o], 0, 0, NULL};
                        cfail(c, DRIVER, why ? why : "structure", r, o ? i : k, d[o], 0, 0,
                              why ? known_defect(c, &named)
                                  : cross_known(c, kind, r, o ? i : k, d[o], 0.0, want, tol));
                    }
                c->r->cross[X_STRUCTURE]++;
                continue;
            }
            double s = S->val[e];
            int fin[2] = {isfinite(d[0]) && isfinite(s), isfinite(d[1]) && isfinite(s)};
            int in[2] = {fin[0] && ok[i * n + k], fin[1] && ok[k * n + i]};
            if (!in[0] && !in[1]) {
                c->r->cross[X_UNBOUNDED] += fin[0] + fin[1];
                continue;
            }
            int checked;  /* the oracle's bound, once per pair (it is symmetric) */
            ld want, M, tol = cross_tol(c, i, k, &want, &M, &checked);
            for (int o = 0; o < 2; o++) {
                int r = o ? k : i, col = o ? i : k;  /* D[r][col] */
                if (!fin[o])
                    continue;
                if (!in[o] || !isfinite(tol) || !isfinite(want)) {
                    c->r->cross[X_UNBOUNDED]++;
                    continue;
                }
                c->r->cross[X_VALUES]++;
                c->r->cross[X_BEYOND] += !checked;
                /* the replays are the oracle's own Hessian, in other orders:
                 * long double rounding apart, they agree with it */
                int q = r * n + col;
                if (!(fabsl(He[q] - want) <= 0x1p-40L * M + TINY) ||
                    !(fabsl(Hf[q] - want) <= 0x1p-40L * M + TINY))
                {
                    double got = (double)(fabsl(He[q] - want) > fabsl(Hf[q] - want) ? He[q] : Hf[q]);
                    static const char *const limit[] = {"oracle-nested-cancel"};
                    failure w = {"oracle", "replay", r, col, got, want, 0x1p-40L * M, NULL};
                    cfail(c, "oracle", "replay", r, col, got, want, 0x1p-40L * M,
                          known_defect_among(c, &w, limit, 1));
                }
                if (!(fabsl((ld)d[o] - (ld)s) <= tol))
                    cfail(c, DRIVER, "value", r, col, d[o], s, tol,
                          cross_known(c, "value", r, col, d[o], s, want, tol));
            }
        }
    free(ok), free(He), free(Hf);
}

/* ad_sparse_hessian_values at x into S (the structure of the call that
 * gave want_fx, want_g, W at x, status want; W NULL: that call failed and
 * x is not the point S was made at). */
static void values_into(check_ctx *c, const double *x, ad_csr *S, ad_status want,
                        double want_fx, const double *want_g, const ad_csr *W)
{
    const prog *p = c->p;
    int n = p->n;
    size_t nnz = S->nnz;
    size_t *rp = malloc((size_t)(n + 1) * sizeof *rp), *col = malloc((nnz + 1) * sizeof *col);
    memcpy(rp, S->row_ptr, (size_t)(n + 1) * sizeof *rp);
    if (nnz)
        memcpy(col, S->col, nnz * sizeof *col);
    /* is W's structure inside S's? */
    int inside = W != NULL;
    for (int i = 0; W && i < n; i++)
        for (size_t e = W->row_ptr[i]; e < W->row_ptr[i + 1]; e++)
            inside &= where(S, i, (int)W->col[e]) >= 0;
    for (size_t e = 0; e < nnz; e++)
        S->val[e] = -12345.0;
    double fx, *g = dalloc(n);
    ad_status got = ad_sparse_hessian_values(fuzz_objective, (void *)c->drive, (size_t)n, x, &fx, g, S);
    int same = S->rows == (size_t)n && S->cols == (size_t)n && S->nnz == nnz && S->row_ptr &&
               !memcmp(S->row_ptr, rp, (size_t)(n + 1) * sizeof *rp) &&
               (!nnz || (S->col && !memcmp(S->col, col, nnz * sizeof *col)));
    if (!same)
        cfail(c, VDRIVER, "structure", -1, -1, (double)S->nnz, (ld)nnz, 0, NULL);
    else if (W && want == AD_OK && !inside) {
        /* x reaches a pair outside S */
        if (got != AD_ESTRUCTURE)
            cfail(c, VDRIVER, "status", AD_ESTRUCTURE, -1, (double)got, AD_ESTRUCTURE, 0, NULL);
        c->r->cross[X_MOVED]++;
    } else if (W && got != want) {
        cfail(c, VDRIVER, "status", (int)want, -1, (double)got, want, 0, NULL);
    } else if (!W && got != want && got != AD_ESTRUCTURE) {
        /* the sweep at x failed (want): the values call fails as it does,
         * or finds a pair outside S before */
        cfail(c, VDRIVER, "status", (int)want, -1, (double)got, want, 0, NULL);
    } else if (got == AD_OK) {
        c->r->cross[X_KEPT]++;
        if (!same_bits(fx, want_fx))
            cfail(c, VDRIVER, "value-bits", -1, 0, fx, want_fx, 0, NULL);
        for (int i = 0; i < n; i++)
            if (!same_bits(g[i], want_g[i]))
                cfail(c, VDRIVER, "value-bits", i, 0, g[i], want_g[i], 0, NULL);
        for (int i = 0; i < n; i++)
            for (size_t e = S->row_ptr[i]; e < S->row_ptr[i + 1]; e++) {
                long w = where(W, i, (int)S->col[e]);
                double h = w < 0 ? 0.0 : W->val[w];
                c->r->cross[X_BITS]++;
                if (!same_bits(S->val[e], h))
                    cfail(c, VDRIVER, "value-bits", i, (int)S->col[e], S->val[e], h, 0, NULL);
            }
    }
    if (same && got != AD_OK) {
        int nan = fx != fx;
        for (int i = 0; i < n; i++)
            nan &= g[i] != g[i];
        for (size_t e = 0; e < nnz; e++)
            nan &= S->val[e] != S->val[e];
        if (!nan)
            cfail(c, VDRIVER, "nan-outputs", -1, -1, (double)got, 0, 0, NULL);
    }
    free(g), free(rp), free(col);
}

/* Whether run holds a recorded matrix's product: its rule lists the
 * pairs of arguments by their IDs, and an argument that is also another
 * argument's (a loop's output written out is the step's input) moves
 * its structural zeros (edge-push-block-zero): not compared. */
static int has_matrix(const prog *run)
{
    for (int j = 0; j < run->ncode; j++)
        if (run->code[j].op == OP_MAT_VEC || run->code[j].op == OP_MAT_SQNORM ||
            run->code[j].op == OP_MAT_MUL || run->code[j].op == OP_MAT_MAP)
            return 1;
    return 0;
}

/* The structure through the recorded loops (c->run) against S, the one
 * with the loops written out (status ss). */
static void loop_structure(check_ctx *c, const ad_csr *S, ad_status ss)
{
    int n = c->p->n;
    if (has_matrix(c->run))
        return;
    double f, *g = dalloc(n);
    ad_csr L;
    ad_status sl = ad_sparse_hessian(fuzz_objective, (void *)c->run, (size_t)n, c->p->x, &f, g, &L);
    c->r->cross[X_LOOPS]++;
    if (sl != ss) {
        if ((sl == AD_OK && ss == AD_EOVERFLOW) || (sl == AD_EOVERFLOW && ss == AD_OK))
            c->r->cross[X_LOOP_OVER]++;
        else
            cfail(c, "ad_sparse_hessian(loop)", "status", (int)ss, -1, (double)sl, ss, 0, NULL);
    } else if (sl == AD_OK) {
        if (!csr_ok(&L, n))
            cfail(c, "ad_sparse_hessian(loop)", "csr", -1, -1, (double)L.nnz, 0, 0, NULL);
        else
            for (int i = 0; i < n; i++)
                for (int k = 0; k <= i; k++) {
                    int in_l = where(&L, i, k) >= 0, in_s = where(S, i, k) >= 0;
                    c->r->cross[X_LOOP_PAIRS] += in_s;
                    if (in_l != in_s)
                        cfail(c, "ad_sparse_hessian(loop)", "structure", i, k, in_l, in_s, 0, NULL);
                }
    }
    ad_csr_free(&L);
    free(g);
}

/* A point near x: each finite coordinate moved by about 2^-10 of itself
 * (2^-20 at 0), so that most programs keep their branches and some
 * do not. */
static void perturb(const prog *p, double *x)
{
    for (int i = 0; i < p->n; i++) {
        double v = p->x[i];
        x[i] = !isfinite(v) ? v : v == 0 ? 0x1p-20 : v + ldexp(1.0, ilogb(v) - 10);
    }
}

void cross_hessians(check_ctx *c)
{
    const prog *p = c->p;
    int n = p->n;
    if (c->ext_nojvp || c->nod2f || c->coll)
        return;  /* ad_hessian refuses a recorded external without hvp, a map without d2f
                    (AD_ENOTSUP); ad_sparse_hessian a collective record (AD_ENOTSUP) */
    double fd, fs, *gd = dalloc(n), *gs = dalloc(n), *D = dalloc(n * n);
    ad_csr S;
    ad_status sd = ad_hessian(fuzz_objective, (void *)c->drive, (size_t)n, p->x, &fd, gd, D);
    ad_status ss = ad_sparse_hessian(fuzz_objective, (void *)c->drive, (size_t)n, p->x, &fs, gs, &S);
    c->r->cross[X_PROGRAMS]++;
    if (sd != ss || sd == AD_ENOTSUP) {  /* c->p has no external without hvp: AD_ENOTSUP is wrong */
        int over = (sd == AD_OK && ss == AD_EOVERFLOW) || (sd == AD_EOVERFLOW && ss == AD_OK);
        if (over)
            c->r->cross[ss == AD_EOVERFLOW ? X_OVER_SPARSE : X_OVER_DENSE]++;
        else {
            /* an external without hvp that a nested call's NaN made recorded */
            static const char *const nested[] = {"nested-dead-record", "nested-jvp-zero-direction"};
            failure w = {DRIVER, "status", (int)sd, -1, (double)ss, sd, 0, NULL};
            const char *k = ss == AD_ENOTSUP ? known_defect_among(c, &w, nested, 2) : NULL;
            cfail(c, DRIVER, "status", (int)sd, -1, (double)ss, sd, 0, k);
        }
    } else if (sd == AD_OK) {
        if (!csr_ok(&S, n))
            cfail(c, "ad_sparse_hessian", "csr", -1, -1, (double)S.nnz, 0, 0, NULL);
        else
            compare(c, D, &S);
    }
    if (c->ui && c->drive == c->p && (ss != AD_OK || csr_ok(&S, n)))
        loop_structure(c, &S, ss);
    if (ss == AD_OK && csr_ok(&S, n)) {
        ad_csr W = S, W1;
        W.val = malloc((S.nnz + 1) * sizeof *W.val);  /* the values S holds now */
        if (S.nnz)
            memcpy(W.val, S.val, S.nnz * sizeof *W.val);
        values_into(c, p->x, &S, ss, fs, gs, &W);
        free(W.val);
        double *x1 = dalloc(n), f1, *g1 = dalloc(n);
        perturb(p, x1);
        ad_status s1 = ad_sparse_hessian(fuzz_objective, (void *)c->drive, (size_t)n, x1, &f1, g1, &W1);
        if (s1 == AD_OK && !csr_ok(&W1, n))
            cfail(c, "ad_sparse_hessian", "csr", -1, -1, (double)W1.nnz, 0, 0, NULL);
        else
            values_into(c, x1, &S, s1, f1, g1, s1 == AD_OK ? &W1 : NULL);
        ad_csr_free(&W1);
        free(x1), free(g1);
    }
    ad_csr_free(&S);
    free(gd), free(gs), free(D);
}

void cross_summary(const long *t)
{
    if (!t[X_PROGRAMS])
        return;
    printf("fuzz: sparse against dense Hessians: %ld programs, %ld entries compared (%ld of them "
           "outside check.c's second-order window), %ld not (out of range, or not bounded by the "
           "oracle), %ld pairs outside the structure checked 0; AD_EOVERFLOW from "
           "ad_hessian alone %ld, from ad_sparse_hessian alone %ld; ad_sparse_hessian_values: "
           "%ld calls AD_OK, %ld values bit for bit, %ld perturbed points refused (AD_ESTRUCTURE); "
           "through recorded loops: %ld programs, %ld pairs of the written-out structure, the "
           "same, %ld with AD_EOVERFLOW on one side only\n",
           t[X_PROGRAMS], t[X_VALUES], t[X_BEYOND], t[X_UNBOUNDED], t[X_STRUCTURE], t[X_OVER_DENSE],
           t[X_OVER_SPARSE], t[X_KEPT], t[X_BITS], t[X_MOVED], t[X_LOOPS], t[X_LOOP_PAIRS],
           t[X_LOOP_OVER]);
}

/* ---- collective recordings: every driver with a trivial agreement hook
 * (ad_set_collective, agree returning the local status) against the same
 * driver without one (README.md, "Collective recordings") ---- */

/* counts, in the report's hook[] */
enum { H_PROGRAMS, H_CALLS, H_SAME, H_NONFINITE, H_NONFINITE_DIFF, H_AGREE, H_COLL_PROGRAMS,
       H_NEST_VALUE, H_RECOVERED, H_ENOTSUP_BY };

int hook_every = 2;  /* --hook N: the seeds divisible by N (0: none; default 2) */
int hook_this;

typedef struct agree_count { long calls; } agree_count;

static ad_status agree_local(void *ctx, ad_status local)
{
    ((agree_count *)ctx)->calls++;
    return local;
}

/* One driver's results: status, its values (fx, y) and derivatives. */
typedef struct hres {
    ad_status s;
    int nv, nd;
    double *v, *d;
} hres;

#define HOOK_DRIVERS 11
static const char *const hook_names[HOOK_DRIVERS] = {
    "ad_gradient", "ad_vjp", "ad_jvp", "ad_jacobian", "ad_linearize", "ad_sparse_jacobian",
    "ad_hvp", "ad_hessian", "ad_sparse_hessian", "ad_hvps", "ad_linear_jvps"};

static void csr_into(const ad_csr *S, double *d, int n, int cap)
{
    /* rows, then row pointers, columns and values, as doubles */
    int k = 0;
    d[k++] = (double)S->nnz;
    for (int i = 0; i <= n && k < cap; i++)
        d[k++] = (double)S->row_ptr[i];
    for (size_t e = 0; e < S->nnz && k < cap; e++)
        d[k++] = (double)S->col[e];
    for (size_t e = 0; e < S->nnz && k < cap; e++)
        d[k++] = S->val[e];
}

/* Driver dr on run at its point into r (r->v, r->d allocated here). */
static void hook_run(const prog *run, int dr, hres *r)
{
    int n = run->n, m = run->m;
    size_t N = (size_t)n, M = (size_t)m;
    void *ctx = (void *)run;
    int K = 3;  /* ad_hvps' and ad_linear_jvps' lanes */
    r->nv = dr == 0 || (dr >= 6 && dr != 10) ? 1 : m;
    int cap = n * m + 2 * n + 2 * m + n * n + K * n + K * m + 8;
    r->v = dalloc(r->nv);
    r->d = dalloc(cap + 2 * n * n + n + 2);
    r->nd = 0;
    double *V = dalloc(K * n);
    for (int l = 0; l < K; l++)
        for (int i = 0; i < n; i++)
            V[l * n + i] = run->v[i] * (l == 0 ? 1.0 : l == 1 ? -0.5 : (i == l % (n ? n : 1) ? 1.0 : 0.0));
    switch (dr) {
    case 0: r->s = ad_gradient(fuzz_objective, ctx, N, run->x, r->v, r->d); r->nd = n; break;
    case 1: r->s = ad_vjp(fuzz_function, ctx, N, run->x, M, run->w, r->v, r->d); r->nd = n; break;
    case 2: r->s = ad_jvp(fuzz_function, ctx, N, run->x, run->v, M, r->v, r->d); r->nd = m; break;
    case 3: r->s = ad_jacobian(fuzz_function, ctx, N, run->x, M, r->v, r->d); r->nd = n * m; break;
    case 4: case 10: {
        ad_linear *L = NULL;
        r->s = ad_linearize(fuzz_function, ctx, N, run->x, M, r->v, &L);
        if (r->s == AD_OK) {
            ad_status a, b;
            if (dr == 4) {
                a = ad_linear_jvp(L, run->v, r->d);
                b = ad_linear_vjp(L, run->w, r->d + m);
                r->nd = m + n;
            } else {
                a = ad_linear_jvps(L, (size_t)K, V, r->d);
                double *W = dalloc(K * m);
                for (int l = 0; l < K * m; l++)
                    W[l] = run->w[l % (m ? m : 1)] * (l < m ? 1.0 : -0.25 * (l / (m ? m : 1)));
                b = ad_linear_vjps(L, (size_t)K, W, r->d + K * m);
                free(W);
                r->nd = K * m + K * n;
            }
            r->s = a != AD_OK ? a : b;
        }
        ad_linear_free(L);
        break;
    }
    case 5: {
        ad_csr S;
        memset(&S, 0, sizeof S);
        r->s = ad_sparse_jacobian(fuzz_function, ctx, N, run->x, M, r->v, &S);
        if (r->s == AD_OK) {
            r->nd = 1 + (m + 1) + 2 * (int)S.nnz;
            free(r->d);
            r->d = dalloc(r->nd);
            csr_into(&S, r->d, m, r->nd);
            ad_csr_free(&S);
        }
        break;
    }
    case 6: r->s = ad_hvp(fuzz_objective, ctx, N, run->x, run->v, r->v, r->d, r->d + n); r->nd = 2 * n; break;
    case 7: r->s = ad_hessian(fuzz_objective, ctx, N, run->x, r->v, r->d, r->d + n); r->nd = n + n * n; break;
    case 8: {
        ad_csr S;
        memset(&S, 0, sizeof S);
        double *g = dalloc(n);
        r->s = ad_sparse_hessian(fuzz_objective, ctx, N, run->x, r->v, g, &S);
        if (r->s == AD_OK) {
            r->nd = n + 1 + (n + 1) + 2 * (int)S.nnz;
            free(r->d);
            r->d = dalloc(r->nd);
            memcpy(r->d, g, N * sizeof *g);
            csr_into(&S, r->d + n, n, r->nd - n);
            ad_csr_free(&S);
        }
        free(g);
        break;
    }
    case 9: r->s = ad_hvps(fuzz_objective, ctx, N, run->x, (size_t)K, V, r->v, r->d, r->d + n); r->nd = n + K * n; break;
    default: abort();
    }
    free(V);
}

static int all_finite(const double *a, int n)
{
    for (int i = 0; i < n; i++)
        if (!isfinite(a[i]))
            return 0;
    return 1;
}

static int has_op(const prog *p, int op)
{
    for (int j = 0; j < p->ncode; j++)
        if (p->code[j].op == op)
            return 1;
    return 0;
}

/* A loop whose step (at any depth) runs a loop. */
static int loop_in_step(const prog *p, int inside)
{
    for (int j = 0; j < p->ncode; j++)
        if (p->code[j].op == OP_LOOP &&
            (inside || loop_in_step(&p->subs[p->code[j].sub], 1)))
            return 1;
    return 0;
}

/* A hook failure, its class asked of known.c (hook-* classes). */
static void hfail(check_ctx *c, const char *driver, const char *kind, int i, int j, double got, ld want)
{
    failure f = {driver, kind, i, j, got, want, 0, NULL};
    cfail(c, driver, kind, i, j, got, want, 0, known_defect(c, &f));
}

/* f's nested derivatives (OP_NEST's ad_gradient, OP_NESTR's ad_gradient_r,
 * ad_jvp_r) are recordings of their own, collective under the hook: where
 * the one pass leaves a result not finite that the passes after it made
 * finite without the hook, the node's outputs differ, and so may f's
 * values.  1 if some node's outputs so differ; a node whose outputs
 * differ though the hook's are finite fails (hook-nested-bits). */
static int hook_nested(check_ctx *c)
{
    const prog *run = c->run;
    if (!has_op(run, OP_NEST) && !has_op(run, OP_NESTR))
        return 0;
    double *va = dalloc(run->nslots), *vb = dalloc(run->nslots);
    ad_status sa = run_recorded(run, run->x, va, NULL);
    ad_collective h = {agree_local, &(agree_count){0}};
    ad_collective old = ad_set_collective(&h);
    int before = fuzz_interp_errors;
    ad_status sb = run_recorded(run, run->x, vb, NULL);
    ad_set_collective(old.agree ? &old : NULL);
    if (fuzz_interp_errors != before) {  /* a loop's status: the drivers' runs tell it */
        c->hook_interp = 1;
        fuzz_interp_errors = before;
    }
    int moved = sa != sb;
    for (int j = 0; j < run->ncode; j++) {
        const insn *in = &run->code[j];
        if (in->op != OP_NEST && in->op != OP_NESTR)
            continue;
        int differ = 0, fin = 1;
        for (int i = 0; i < prog_nargs(in); i++)  /* an argument moved: so may the node */
            fin &= same_bits(va[run->args[in->arg + i]], vb[run->args[in->arg + i]]);
        for (int o = in->out; o < in->out + in->nout; o++) {
            differ |= !same_bits(va[o], vb[o]);
            fin &= isfinite(vb[o]) != 0;
        }
        if (differ && fin)
            hfail(c, "ad_gradient_r", "hook-nested-bits", j, -1, 0, 0);
        moved |= differ;
    }
    free(va), free(vb);
    return moved;
}

void hook_checks(check_ctx *c)
{
    const prog *run = c->run;
    report *R = c->r;
    R->hook[H_PROGRAMS]++;
    R->hook[H_COLL_PROGRAMS] += c->coll;
    c->hook_loop_in_step = loop_in_step(run, 0);
    /* a loop of constant arguments (without the hook): recorded with it */
    if (has_op(run, OP_LOOP)) {
        double *va = dalloc(run->nslots);
        unsigned char *act = calloc((size_t)run->nslots + 1, 1);
        int before = fuzz_interp_errors;
        if (run_recorded(run, run->x, va, act) == AD_OK)
            for (int j = 0; j < run->ncode; j++) {
                const insn *in = &run->code[j];
                int any = 0;
                for (int i = 0; in->op == OP_LOOP && i < prog_nargs(in); i++)
                    any |= act[run->args[in->arg + i]];
                c->hook_const_loop |= in->op == OP_LOOP && in->steps > 0 && !any;
            }
        fuzz_interp_errors = before;  /* check.c counts the drivers' */
        free(va), free(act);
    }
    c->hook_const_loop |= c->hook_loop_in_step;
    int nest = hook_nested(c);
    for (int dr = 0; dr < HOOK_DRIVERS; dr++) {
        hres a, b;
        hook_run(run, dr, &a);
        agree_count cnt = {0};
        ad_collective h = {agree_local, &cnt};
        ad_collective old = ad_set_collective(&h);
        int before = fuzz_interp_errors;
        hook_run(run, dr, &b);
        ad_collective back = ad_set_collective(old.agree ? &old : NULL);
        if (fuzz_interp_errors != before) {  /* the hook's alone: check.c counts the others */
            c->hook_interp = 1;
            hfail(c, hook_names[dr], "hook-interp", -1, -1, fuzz_interp_errors - before, 0);
            fuzz_interp_errors = before;
        }
        if (back.agree != agree_local || back.ctx != &cnt)
            hfail(c, hook_names[dr], "hook-set", -1, -1, 0, 0);
        R->hook[H_CALLS]++;
        R->hook[H_AGREE] += cnt.calls;
        /* begun and ended: a recording, agreed on twice at least */
        if (cnt.calls < 2)
            hfail(c, hook_names[dr], "hook-agree", -1, -1, (double)cnt.calls, 2);
        /* One pass with the hook, the no-hook passes after it only where
         * it was not all finite (seeded.h): where the hook's results are
         * finite, the same bits; elsewhere (documented: no pass again, an
         * overflow is left Inf or NaN) counted, by what the passes after
         * the first made of it without the hook. */
        int fin_a = a.s == AD_OK && all_finite(a.d, a.nd);
        int fin_b = b.s == AD_OK && all_finite(b.d, b.nd);
        int vsame = 1, dsame = a.nd == b.nd;
        for (int j = 0; j < a.nv; j++)
            vsame &= same_bits(a.v[j], b.v[j]);
        for (int i = 0; dsame && i < a.nd; i++)
            dsame &= same_bits(a.d[i], b.d[i]);
        int same = a.s == b.s && vsame && dsame;
        /* with a collective record, the recording is collective either way:
         * the same, finite or not; a nested ad_gradient's constant
         * (OP_NEST) is the exception, its recording collective only with
         * the hook */
        int strict = fin_b || (c->coll && !nest);
        if (same) {
            R->hook[H_SAME]++;
        } else if (nest && !vsame) {
            R->hook[H_NEST_VALUE]++;
        } else if (!strict) {
            R->hook[fin_a ? H_RECOVERED : H_NONFINITE_DIFF]++;
            if (a.s == AD_OK && b.s == AD_OK && !vsame)  /* values are the recording's, not a sweep's */
                for (int j = 0; j < a.nv; j++)
                    if (!same_bits(a.v[j], b.v[j]))
                        hfail(c, hook_names[dr], "hook-value-bits", -1, j, b.v[j], a.v[j]);
        } else if (a.s != b.s) {
            hfail(c, hook_names[dr], "hook-status", (int)a.s, -1, (double)b.s, a.s);
        } else if (a.nd != b.nd) {
            hfail(c, hook_names[dr], "hook-length", -1, -1, (double)b.nd, a.nd);
        } else {
            for (int j = 0; j < a.nv; j++)
                if (!same_bits(a.v[j], b.v[j]))
                    hfail(c, hook_names[dr], "hook-value-bits", -1, j, b.v[j], a.v[j]);
            for (int i = 0; i < a.nd; i++)
                if (!same_bits(a.d[i], b.d[i]))
                    hfail(c, hook_names[dr], "hook-bits", i, -1, b.d[i], a.d[i]);
        }
        R->hook[H_NONFINITE] += !fin_b;
        if (!same && getenv("FUZZ_DEBUG"))  /* what the hook changed, counted or not */
            fprintf(stderr, "hook: %s status %d -> %d, values %s, derivatives %s (%s)\n", hook_names[dr],
                    (int)a.s, (int)b.s, vsame ? "same" : "differ", dsame ? "same" : "differ",
                    fin_b ? "finite with the hook" : fin_a ? "finite without the hook only" : "not finite");
        if (b.s == AD_ENOTSUP && a.s != AD_ENOTSUP)
            R->hook[H_ENOTSUP_BY + dr]++;
        free(a.v), free(a.d), free(b.v), free(b.d);
    }
}

void hook_summary(const long *t)
{
    if (!t[H_PROGRAMS])
        return;
    printf("fuzz: collective hook: %ld programs (%ld with a collective record), %ld driver calls "
           "with and without a trivial hook (%ld agree calls), %ld the same bits; %ld not all "
           "finite with the hook (one pass), of which differ: %ld finite without it (its passes "
           "after the first), %ld not finite either way; %ld whose values a nested ad_gradient's "
           "constant changed; AD_ENOTSUP with the hook only:",
           t[H_PROGRAMS], t[H_COLL_PROGRAMS], t[H_CALLS], t[H_AGREE], t[H_SAME], t[H_NONFINITE],
           t[H_RECOVERED], t[H_NONFINITE_DIFF], t[H_NEST_VALUE]);
    int any = 0;
    for (int d = 0; d < HOOK_DRIVERS; d++)
        if (t[H_ENOTSUP_BY + d])
            printf(" %s %ld", hook_names[d], t[H_ENOTSUP_BY + d]), any = 1;
    printf("%s\n", any ? "" : " none");
}
