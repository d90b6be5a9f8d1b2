/* Second order through functions dualrev cannot see: ad_external with an
 * hvp rule (ad_rule.hvp) under ad_hvp, ad_hvps, ad_hessian, ad_hvp_sum,
 * ad_sparse_hessian and ad_sparse_hessian_values, also inside a
 * checkpointed loop's step; rules without hvp still refused.
 *
 * The maps A, B, C, E and G of external_maps.h, with closed-form
 * Jacobians and Hessians; G's rules call ad_gradient and ad_hvp
 * themselves (nested recordings).
 * The rules check what they are given (ctx, y the primal of x, xbar and
 * out zeroed) and count their calls.
 *
 * Oracles:
 *   - closed forms: f(z) = 1/2 y^T Q y + q^T y + 1/2 sum_i r_i z_i^2 with
 *     y = F(P z + c), whose Hessian is
 *     P^T (J^T Q J + sum_k (Q y + q)_k H_k) P + diag(r),
 *     J and H_k the map's closed-form Jacobian and Hessians; the sparse
 *     structure is known from P (an external's arguments make a dense
 *     block);
 *   - eighth-order central differences (check.h) of a gradient written by
 *     hand (the chain rule through the closed-form Jacobians), for a
 *     composition of A, B and C with ordinary operations between;
 *   - the same step written out, for a checkpointed loop whose step calls
 *     an external. */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "external_maps.h"
#include "../lib/drivers/testing.h"

/* ======================================================================
 * The maps and their rules
 * ====================================================================== */

#define MAXZ 6
#define RTOL 1e-13 /* against a closed form, relative to the largest entry */

/* A rule's ctx: its map, its calls, what it saw wrong.  One thread each. */
typedef struct ext {
    struct ext *self;
    enum map map;
    int primal_calls, vjp_calls, jvp_calls, hvp_calls;
    int bad;  /* sizes, y not the primal, xbar or out not zeroed, nested failures */
} ext;

static atomic_int bad_ctx;

static void ext_init(ext *e, enum map k)
{
    memset(e, 0, sizeof *e);
    e->self = e;
    e->map = k;
}

static ext *ext_check(void *ctx, size_t n, size_t m, const double *x, const double *y)
{
    ext *e = ctx;
    if (!e || e->self != e) {
        atomic_fetch_add(&bad_ctx, 1);
        return NULL;
    }
    if (n != map_n[e->map] || m != map_m[e->map])
        e->bad++;
    if (y) {
        double want[MAXM];
        map_eval(e->map, x, want);
        for (size_t j = 0; j < m; j++)
            e->bad += !same_double(y[j], want[j]);
    }
    return e;
}

static void zeroed(ext *e, const double *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        e->bad += !same_double(a[i], 0.0);
}

/* G by nested drivers: its value and gradient by ad_gradient, H v by
 * ad_hvp. */
static ad_real g_objective(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real s = ad_mul(ad_sin(x[0]), x[1]);
    s = ad_add(s, ad_mul(ad_sin(x[1]), x[2]));
    return ad_add(s, ad_mul(ad_sin(x[2]), x[0]));
}

static void rule_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    ext *e = ext_check(ctx, n, m, x, NULL);
    if (!e)
        return;
    e->primal_calls++;
    map_eval(e->map, x, y);
}

static void rule_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                     const double *ybar, double *xbar)
{
    ext *e = ext_check(ctx, n, m, x, y);
    double J[MAXM * MAXN];
    if (!e)
        return;
    e->vjp_calls++;
    zeroed(e, xbar, n);
    if (e->map == MAP_G) {
        double fx, g[3];
        e->bad += ad_gradient(g_objective, NULL, 3, x, &fx, g) != AD_OK;
        for (size_t i = 0; i < 3; i++)
            xbar[i] = ybar[0] * g[i];
        return;
    }
    map_jacobian(e->map, x, J);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < m; j++)
            xbar[i] += ybar[j] * J[j * n + i];
}

static void rule_jvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                     const double *xdot, double *ydot)
{
    ext *e = ext_check(ctx, n, m, x, y);
    double J[MAXM * MAXN];
    if (!e)
        return;
    e->jvp_calls++;
    map_jacobian(e->map, x, J);
    for (size_t j = 0; j < m; j++) {
        ydot[j] = 0.0;
        for (size_t i = 0; i < n; i++)
            ydot[j] += J[j * n + i] * xdot[i];
    }
}

static void rule_hvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                     const double *ybar, const double *xdot, double *out)
{
    ext *e = ext_check(ctx, n, m, x, y);
    double H[MAXN * MAXN];
    if (!e)
        return;
    e->hvp_calls++;
    zeroed(e, out, n);
    if (e->map == MAP_G) {
        double fx, g[3], hv[3];
        e->bad += ad_hvp(g_objective, NULL, 3, x, xdot, &fx, g, hv) != AD_OK;
        for (size_t i = 0; i < 3; i++)
            out[i] = ybar[0] * hv[i];
        return;
    }
    for (size_t j = 0; j < m; j++) {
        map_hessian(e->map, x, j, H);
        for (size_t a = 0; a < n; a++)
            for (size_t b = 0; b < n; b++)
                out[a] += ybar[j] * H[a * n + b] * xdot[b];
    }
}

static const ad_rule rule_second = {rule_primal, rule_vjp, rule_jvp, rule_hvp};
static const ad_rule rule_first = {rule_primal, rule_vjp, rule_jvp, NULL};
static const ad_rule rule_nojvp = {rule_primal, rule_vjp, NULL, NULL};
static const ad_rule rule_hvp_nojvp = {rule_primal, rule_vjp, NULL, rule_hvp};

static void check_clean(const ext *e, const char *file, int line)
{
    if (e->bad || atomic_load(&bad_ctx)) {
        print_error("map %d: %d bad calls, %d bad ctx\n", (int)e->map, e->bad,
                    atomic_load(&bad_ctx));
        _fail(file, line);
    }
}
#define assert_clean(e) check_clean((e), __FILE__, __LINE__)

static void reset_calls(ext *e)
{
    e->primal_calls = e->vjp_calls = e->jvp_calls = e->hvp_calls = 0;
}

static void check_calls(const ext *e, int primal, int vjp, int jvp, int hvp, const char *file,
                        int line)
{
    if (e->primal_calls != primal || e->vjp_calls != vjp || e->jvp_calls != jvp ||
        e->hvp_calls != hvp) {
        print_error("map %d: calls primal %d, vjp %d, jvp %d, hvp %d; expected %d, %d, %d, %d\n",
                    (int)e->map, e->primal_calls, e->vjp_calls, e->jvp_calls, e->hvp_calls,
                    primal, vjp, jvp, hvp);
        _fail(file, line);
    }
}
#define assert_calls(e, p, v, j, h) check_calls((e), (p), (v), (j), (h), __FILE__, __LINE__)

/* ======================================================================
 * 1. Closed forms: f(z) = 1/2 y^T Q y + q^T y + 1/2 sum r_i z_i^2,
 *    y = F(P z + c)
 * ====================================================================== */

/* Argument i of the map: z[src] itself (the same value, its ID given
 * twice when two arguments name it), a constant c (src CONST), or the
 * combination P[i] z + c (src MIXED). */
enum { CONST = -1, MIXED = -2 };

typedef struct form {
    const char *name;
    enum map map;
    size_t nz;
    int src[MAXN];
    double P[MAXN][MAXZ], c[MAXN];
    double Q[MAXM][MAXM], q[MAXM], r[MAXZ];
    ext e;
    const ad_rule *rule;
    ad_status status;
} form;

/* The argument's row of P (a unit row for a plain z, zero for a constant). */
static double form_p(const form *F, size_t i, size_t k)
{
    int s = F->src[i];
    return s >= 0 ? (double)((size_t)s == k) : s == MIXED ? F->P[i][k] : 0.0;
}

static ad_real form_objective(const ad_real *z, size_t nz, void *ctx)
{
    form *F = ctx;
    size_t n = map_n[F->map], m = map_m[F->map];
    ad_real u[MAXN], y[MAXM];
    for (size_t i = 0; i < n; i++) {
        if (F->src[i] >= 0) {
            u[i] = z[F->src[i]];
            continue;
        }
        u[i] = ad_const(F->c[i]);
        for (size_t k = 0; F->src[i] == MIXED && k < nz; k++)
            u[i] = ad_add(u[i], ad_mul(F->P[i][k], z[k]));
    }
    ad_status s = ad_external(F->rule, &F->e, n, u, m, y);
    if (s != AD_OK && F->status == AD_OK)
        F->status = s;
    ad_real f = ad_const(0.0);
    for (size_t j = 0; j < m; j++) {
        ad_real qy = ad_mul(F->q[j], y[j]);
        for (size_t l = 0; l < m; l++)
            if (F->Q[j][l] != 0.0)
                qy = ad_add(qy, ad_mul(0.5 * F->Q[j][l], ad_mul(y[j], y[l])));
        f = ad_add(f, qy);
    }
    for (size_t k = 0; k < nz; k++)
        if (F->r[k] != 0.0)
            f = ad_add(f, ad_mul(0.5 * F->r[k], ad_mul(z[k], z[k])));
    return f;
}

/* The closed form at z: f, its gradient and its Hessian (nz x nz). */
static double form_want(const form *F, const double *z, double *g, double *H)
{
    enum map k = F->map;
    size_t n = map_n[k], m = map_m[k], nz = F->nz;
    double u[MAXN], y[MAXM], J[MAXM * MAXN], Hk[MAXN * MAXN], gy[MAXM];
    double inner[MAXN * MAXN] = {0};  /* J^T Q J + sum gy_k H_k, n x n */
    for (size_t i = 0; i < n; i++) {
        u[i] = F->src[i] < 0 ? F->c[i] : 0.0;  /* a constant, or a combination's offset */
        for (size_t l = 0; l < nz; l++)
            u[i] += form_p(F, i, l) * z[l];
    }
    map_eval(k, u, y);
    map_jacobian(k, u, J);
    double f = 0.0;
    for (size_t j = 0; j < m; j++) {
        gy[j] = F->q[j];
        for (size_t l = 0; l < m; l++)
            gy[j] += F->Q[j][l] * y[l];
        f += F->q[j] * y[j];
        for (size_t l = 0; l < m; l++)
            f += 0.5 * F->Q[j][l] * y[j] * y[l];
    }
    for (size_t j = 0; j < m; j++) {
        map_hessian(k, u, j, Hk);
        for (size_t a = 0; a < n * n; a++)
            inner[a] += gy[j] * Hk[a];
        for (size_t l = 0; l < m; l++)
            for (size_t a = 0; a < n; a++)
                for (size_t b = 0; b < n; b++)
                    inner[a * n + b] += J[j * n + a] * F->Q[j][l] * J[l * n + b];
    }
    for (size_t s = 0; s < nz; s++) {
        f += 0.5 * F->r[s] * z[s] * z[s];
        g[s] = F->r[s] * z[s];
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < m; j++)
                g[s] += form_p(F, i, s) * J[j * n + i] * gy[j];
        for (size_t t = 0; t < nz; t++) {
            double h = s == t ? F->r[s] : 0.0;
            for (size_t a = 0; a < n; a++)
                for (size_t b = 0; b < n; b++)
                    h += form_p(F, a, s) * inner[a * n + b] * form_p(F, b, t);
            H[s * nz + t] = h;
        }
    }
    return f;
}

/* The sparse structure (nz x nz, lower triangle read): the pairs of z
 * that reach the map's active arguments, which make one dense block, and
 * the diagonal of the r terms. */
static void form_structure(const form *F, unsigned char *want)
{
    size_t n = map_n[F->map], nz = F->nz;
    unsigned char in[MAXZ] = {0};
    for (size_t i = 0; i < n; i++)
        for (size_t s = 0; s < nz; s++)
            in[s] |= form_p(F, i, s) != 0.0;
    for (size_t s = 0; s < nz; s++)
        for (size_t t = 0; t < nz; t++)
            want[s * nz + t] = (in[s] && in[t]) || (s == t && F->r[s] != 0.0);
}

/* The active arguments of the map: each takes one hvp call per sparse
 * Hessian. */
static int form_active(const form *F)
{
    int k = 0;
    for (size_t i = 0; i < map_n[F->map]; i++)
        k += F->src[i] != CONST;
    return k;
}

/* The forms: outputs in products (A, C, E), a constant argument and one
 * argument twice (A), an argument that mixes two inputs (C), an input
 * beside the external (B, with a diagonal Hessian that the block makes
 * dense), nested rules (G). */
static form forms[] = {
    {.name = "A products", .map = MAP_A, .nz = 3, .src = {0, 1, 2},
     .Q = {{1.0, 1.0}, {1.0, 0.0}}, .q = {0.5, -1.0}},
    {.name = "A constant, twice", .map = MAP_A, .nz = 2, .src = {CONST, 0, 0}, .c = {0.7},
     .Q = {{2.0, 0.0}, {0.0, 0.0}}, .q = {0.0, 1.0}, .r = {0.0, 2.0}},
    {.name = "C mixed", .map = MAP_C, .nz = 2, .src = {MIXED}, .P = {{0.5, -0.25}}, .c = {0.1},
     .Q = {{1.0, 0.5, 0.0}, {0.5, 0.0, -1.0}, {0.0, -1.0, 0.25}}, .q = {1.0, -0.5, 0.3}},
    {.name = "B beside", .map = MAP_B, .nz = 4, .src = {0, 1, CONST, 3}, .c = {0, 0, 0.3},
     .Q = {{0.1}}, .q = {1.0}, .r = {0.0, 0.0, 3.0, 0.0}},
    {.name = "E square", .map = MAP_E, .nz = 2, .src = {0, 1}, .Q = {{1.0}}, .q = {1.0}},
    {.name = "G nested", .map = MAP_G, .nz = 3, .src = {0, 1, 2}, .Q = {{0.5}}, .q = {0.25},
     .r = {0.0, 1.0, 0.0}},
};
#define FORMS (sizeof forms / sizeof *forms)

static form *form_use(form *F, const ad_rule *rule)
{
    ext_init(&F->e, F->map);
    F->rule = rule;
    F->status = AD_OK;
    return F;
}

static double scale_of(const double *a, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s = fmax(s, fabs(a[i]));
    return s;
}

/* got against want, entry by entry, to rtol of the largest |want|. */
static void check_vec(const double *got, const double *want, size_t n, double rtol,
                      const char *what, const char *file, int line)
{
    double scale = scale_of(want, n);
    for (size_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= rtol * scale + 1e-300)) {
            print_error("%s[%zu] = %.17g, expected %.17g (rtol %.3g of %.3g)\n", what, i, got[i],
                        want[i], rtol, scale);
            _fail(file, line);
        }
}
#define assert_vec(got, want, n) check_vec((got), (want), (n), RTOL, #got, __FILE__, __LINE__)

/* H v_j for the k rows of V. */
static void mat_vecs(const double *H, size_t n, size_t k, const double *V, double *HV)
{
    for (size_t j = 0; j < k; j++)
        for (size_t i = 0; i < n; i++) {
            HV[j * n + i] = 0.0;
            for (size_t l = 0; l < n; l++)
                HV[j * n + i] += H[i * n + l] * V[j * n + l];
        }
}

/* H (lower triangle) against the dense want: the structure exactly
 * `pattern` (lower triangle read), the values to RTOL. */
static void check_sparse(const ad_csr *H, const double *want, const unsigned char *pattern,
                         size_t n, const char *file, int line)
{
    double scale = scale_of(want, n * n);
    check_csr_valid(H, n, n, file, line);
    for (size_t r = 0; r < n; r++) {
        size_t k = H->row_ptr[r];
        for (size_t c = 0; c <= r; c++) {
            int there = k < H->row_ptr[r + 1] && H->col[k] == c;
            if (there != pattern[r * n + c]) {
                print_error("entry (%zu, %zu): %s the structure\n", r, c,
                            there ? "in" : "not in");
                _fail(file, line);
            }
            double v = there ? H->val[k++] : 0.0;
            check_near(v, want[r * n + c], 0.0, RTOL * scale + 1e-300, "H", file, line);
        }
    }
}
#define assert_sparse(H, want, pattern, n) \
    check_sparse((H), (want), (pattern), (n), __FILE__, __LINE__)

/* Every second-order driver on F at z against the closed form. */
static void check_form(form *F, const double *z, uint64_t *rng)
{
    size_t nz = F->nz, m = map_m[F->map];
    double fw, gw[MAXZ], Hw[MAXZ * MAXZ], v[MAXZ], V[5 * MAXZ], HVw[5 * MAXZ];
    double fx, g[MAXZ], hv[MAXZ], HV[5 * MAXZ], H[MAXZ * MAXZ];
    unsigned char pattern[MAXZ * MAXZ];
    fw = form_want(F, z, gw, Hw);
    fill_uniform(rng, v, nz, -1.0, 1.0);
    fill_uniform(rng, V, 5 * nz, -1.0, 1.0);
    form_use(F, &rule_second);

    /* ad_hvp: one jvp for the tangents, one hvp, and two vjp (the
     * cotangents and their tangents); G's rules nest drivers. */
    assert_ok(ad_hvp(form_objective, F, nz, z, v, &fx, g, hv));
    assert_int_equal(F->status, AD_OK);
    assert_near(fx, fw, 1e-14, 1e-300);
    assert_vec(g, gw, nz);
    mat_vecs(Hw, nz, 1, v, HVw);
    assert_vec(hv, HVw, nz);
    assert_calls(&F->e, 1, 2, 1, 1);

    /* ad_hvps, k = 1, 3, 5: sweeps of one lane, of four and of eight;
     * one hvp a direction, none for the lanes that carry none */
    static const size_t ks[3] = {1, 3, 5};
    for (int t = 0; t < 3; t++) {
        size_t k = ks[t];
        reset_calls(&F->e);
        assert_ok(ad_hvps(form_objective, F, nz, z, k, V, &fx, g, HV));
        assert_int_equal(F->e.hvp_calls, (int)k);
        mat_vecs(Hw, nz, k, V, HVw);
        assert_vec(HV, HVw, k * nz);
        assert_vec(g, gw, nz);
        if (k == 1) {  /* ad_hvp's along V's first row, to rounding */
            assert_ok(ad_hvp(form_objective, F, nz, z, V, &fx, g, hv));
            assert_vec(hv, HV, nz);
        }
    }

    assert_ok(ad_hessian(form_objective, F, nz, z, &fx, g, H));
    assert_near(fx, fw, 1e-14, 1e-300);
    assert_vec(g, gw, nz);
    assert_vec(H, Hw, nz * nz);

    /* ad_sparse_hessian: n hvp calls (one per active argument), m vjp
     * for the partials and one for the cotangents */
    ad_csr S;
    form_structure(F, pattern);
    reset_calls(&F->e);
    assert_ok(ad_sparse_hessian(form_objective, F, nz, z, &fx, g, &S));
    assert_calls(&F->e, 1, (int)m + 1, 0, form_active(F));
    assert_near(fx, fw, 1e-14, 1e-300);
    assert_vec(g, gw, nz);
    assert_sparse(&S, Hw, pattern, nz);
    /* and into that structure, at another point */
    double z2[MAXZ], g2[MAXZ], H2[MAXZ * MAXZ];
    for (size_t i = 0; i < nz; i++)
        z2[i] = z[i] + 0.125;
    form_want(F, z2, g2, H2);
    fill(S.val, S.nnz, 7.0);
    assert_ok(ad_sparse_hessian_values(form_objective, F, nz, z2, &fx, g, &S));
    assert_vec(g, g2, nz);
    assert_sparse(&S, H2, pattern, nz);
    ad_csr_free(&S);
    assert_int_equal(F->status, AD_OK);
    assert_clean(&F->e);
}

static void test_closed_forms(void **state)
{
    uint64_t rng = 0x5ec0;
    (void)state;
    for (size_t f = 0; f < FORMS; f++)
        for (int trial = 0; trial < 6; trial++) {
            double z[MAXZ];
            fill_uniform(&rng, z, forms[f].nz, -1.0, 1.0);
            check_form(&forms[f], z, &rng);
        }
}

/* ======================================================================
 * 2. A composition against central differences of its gradient by hand
 * ====================================================================== */

/* loss(z), z in R^4:
 *   u = (z0 z1, sin z2, exp(z3 / 2));  a = A(u)
 *   w = (a0, a1, z0, a0 z3);            b = B(w)
 *   s = b / 10;                         c = C(s)
 *   loss = c0 + c1 a1 + c2 z2 */
typedef struct composed {
    ext a, b, c;
    ad_status status;
} composed;

static void apply(const ad_rule *rule, ext *e, const ad_real *x, ad_real *y, ad_status *status)
{
    ad_status s = ad_external(rule, e, map_n[e->map], x, map_m[e->map], y);
    if (s != AD_OK && *status == AD_OK)
        *status = s;
}

static void composed_init(composed *k)
{
    ext_init(&k->a, MAP_A);
    ext_init(&k->b, MAP_B);
    ext_init(&k->c, MAP_C);
    k->status = AD_OK;
}

static ad_real composed_ad(const ad_real *z, size_t n, void *ctx)
{
    composed *k = ctx;
    ad_real u[3], a[2], w[4], b[1], s[1], c[3];
    (void)n;
    u[0] = ad_mul(z[0], z[1]);
    u[1] = ad_sin(z[2]);
    u[2] = ad_exp(ad_mul(z[3], 0.5));
    apply(&rule_second, &k->a, u, a, &k->status);
    w[0] = a[0];
    w[1] = a[1];
    w[2] = z[0];
    w[3] = ad_mul(a[0], z[3]);
    apply(&rule_second, &k->b, w, b, &k->status);
    s[0] = ad_div(b[0], 10.0);
    apply(&rule_second, &k->c, s, c, &k->status);
    return ad_add(ad_add(c[0], ad_mul(c[1], a[1])), ad_mul(c[2], z[2]));
}

/* Column j of the Hessian: the eighth-order stencil on the hand gradient;
 * noise[i] bounds entry i's rounding (check.h, fd_derivative). */
static void fd_column(const double *z, size_t j, double *col, double *noise)
{
    static const double cst[4] = {4.0 / 5, -1.0 / 5, 4.0 / 105, -1.0 / 280};
    double h = fd_step(z[j]), zp[4], gu[4], gd[4], gmax[4] = {0};
    memset(col, 0, 4 * sizeof *col);
    for (int k = 1; k <= 4; k++) {
        memcpy(zp, z, sizeof zp);
        zp[j] = z[j] + k * h;
        composed_grad(zp, gu);
        zp[j] = z[j] - k * h;
        composed_grad(zp, gd);
        for (size_t i = 0; i < 4; i++) {
            col[i] += cst[k - 1] * (gu[i] - gd[i]);
            gmax[i] = fmax(gmax[i], fmax(fabs(gu[i]), fabs(gd[i])));
        }
    }
    for (size_t i = 0; i < 4; i++) {
        col[i] /= h;
        noise[i] = 2e-14 * gmax[i] / h;
    }
}

static void test_composition(void **state)
{
    uint64_t rng = 0xc0de;
    (void)state;
    for (int trial = 0; trial < 8; trial++) {
        double z[4], gw[4], Hw[16], noise[16], col[4], nz[4];
        double fx, g[4], H[16], V[20], HV[20], HVw[20];
        composed k;
        fill_uniform(&rng, z, 4, -1.0, 1.0);
        double fw = composed_grad(z, gw);
        for (size_t j = 0; j < 4; j++) {
            fd_column(z, j, col, nz);
            for (size_t i = 0; i < 4; i++) {
                Hw[i * 4 + j] = col[i];
                noise[i * 4 + j] = nz[i];
            }
        }
        double scale = scale_of(Hw, 16);
        composed_init(&k);
        assert_ok(ad_hessian(composed_ad, &k, 4, z, &fx, g, H));
        assert_int_equal(k.status, AD_OK);
        assert_same(fx, fw);
        for (size_t i = 0; i < 4; i++)
            assert_near(g[i], gw[i], 1e-12, 1e-13 * scale_of(gw, 4));
        for (size_t e = 0; e < 16; e++)
            assert_near(H[e], Hw[e], 0.0, 1e-8 * scale + noise[e]);
        for (size_t i = 0; i < 4; i++)
            for (size_t j = 0; j < i; j++)
                assert_near(H[i * 4 + j], H[j * 4 + i], 1e-13, 1e-14 * scale);

        /* the sparse Hessian: A's arguments take all four inputs (z3
         * through exp), so the structure is dense; the values are
         * ad_hessian's to rounding */
        ad_csr S;
        assert_ok(ad_sparse_hessian(composed_ad, &k, 4, z, &fx, g, &S));
        assert_csr_valid(&S, 4, 4);
        assert_int_equal(S.nnz, 10);
        for (size_t r = 0; r < 4; r++)
            for (size_t e = S.row_ptr[r]; e < S.row_ptr[r + 1]; e++)
                assert_near(S.val[e], H[r * 4 + S.col[e]], 0.0, 1e-13 * scale);
        ad_csr_free(&S);

        fill_uniform(&rng, V, 20, -1.0, 1.0);
        assert_ok(ad_hvps(composed_ad, &k, 4, z, 5, V, &fx, g, HV));
        mat_vecs(H, 4, 5, V, HVw);
        for (size_t e = 0; e < 20; e++)
            assert_near(HV[e], HVw[e], 0.0, 1e-13 * scale * 4);
        assert_int_equal(k.status, AD_OK);
        assert_clean(&k.a);
        assert_clean(&k.b);
        assert_clean(&k.c);
    }
}

/* ======================================================================
 * 3. Rules without hvp, and hvp without jvp
 * ====================================================================== */

static void test_without_hvp(void **state)
{
    const double z[3] = {0.4, -0.3, 0.9}, v[3] = {1.0, 0.5, -0.5}, V[6] = {1, 0, 0, 0, 1, 0};
    double fx, g[3], hv[3], HV[6], H[9];
    form *F = &forms[0];
    (void)state;
    /* the structure a sparse Hessian with hvp gives, for the values call */
    ad_csr S;
    assert_ok(ad_sparse_hessian(form_objective, form_use(F, &rule_second), 3, z, &fx, g, &S));
    for (int r = 0; r < 2; r++) {
        const ad_rule *rule = r ? &rule_nojvp : &rule_first;
        ad_csr T;
        assert_int_equal(ad_hvp(form_objective, form_use(F, rule), 3, z, v, &fx, g, hv),
                         AD_ENOTSUP);
        assert_all_nan(fx, g, 3);
        for (int i = 0; i < 3; i++)
            assert_nan(hv[i]);
        assert_int_equal(ad_hvps(form_objective, F, 3, z, 2, V, &fx, g, HV), AD_ENOTSUP);
        for (int i = 0; i < 6; i++)
            assert_nan(HV[i]);
        assert_int_equal(ad_hessian(form_objective, F, 3, z, &fx, g, H), AD_ENOTSUP);
        for (int i = 0; i < 9; i++)
            assert_nan(H[i]);
        memset(&T, 0xa5, sizeof T);
        assert_int_equal(ad_sparse_hessian(form_objective, F, 3, z, &fx, g, &T), AD_ENOTSUP);
        assert_all_nan(fx, g, 3);
        assert_csr_empty(&T);
        assert_int_equal(ad_sparse_hessian_values(form_objective, F, 3, z, &fx, g, &S),
                         AD_ENOTSUP);
        for (size_t e = 0; e < S.nnz; e++)
            assert_nan(S.val[e]);
        assert_int_equal(F->e.hvp_calls, 0);
        /* first order is fine */
        double gw[3], Hw[9];
        form_want(F, z, gw, Hw);
        gradient_ok(form_objective, F, 3, z, g);
        assert_vec(g, gw, 3);
        assert_clean(&F->e);
    }
    ad_csr_free(&S);
}

/* hvp without jvp: the second-order sweeps could not take the outputs'
 * tangents; AD_EINVAL from ad_external, inside a recording or not, and
 * from the driver, which records nothing of it. */
typedef struct lone {
    ext e;
    ad_status got;
    double y0;
} lone;

static ad_real lone_objective(const ad_real *z, size_t n, void *ctx)
{
    lone *c = ctx;
    ad_real y[1];
    (void)n;
    c->got = ad_external(&rule_hvp_nojvp, &c->e, 2, z, 1, y);
    c->y0 = y[0].v;
    return ad_add(y[0], z[0]);
}

static void test_hvp_without_jvp(void **state)
{
    const double z[2] = {0.5, 1.5}, v[2] = {1.0, 0.0};
    double fx, g[2], hv[2];
    lone c;
    (void)state;
    ext_init(&c.e, MAP_E);
    assert_int_equal(ad_gradient(lone_objective, &c, 2, z, &fx, g), AD_EINVAL);
    assert_int_equal(c.got, AD_EINVAL);
    assert_nan(c.y0);
    assert_all_nan(fx, g, 2);
    assert_int_equal(ad_hvp(lone_objective, &c, 2, z, v, &fx, g, hv), AD_EINVAL);
    assert_int_equal(c.got, AD_EINVAL);
    /* outside a recording */
    ad_real zr[2] = {ad_const(z[0]), ad_const(z[1])}, y[1];
    assert_int_equal(ad_external(&rule_hvp_nojvp, &c.e, 2, zr, 1, y), AD_EINVAL);
    assert_nan(y[0].v);
    assert_int_equal(c.e.primal_calls, 0);
}

/* ======================================================================
 * 4. Sums on threads, and a checkpointed loop's step
 * ====================================================================== */

/* term i = 1/2 E(x_a, x_b)^2 + E(x_a, x_b), a = i mod n, b = (i + 1) mod n;
 * one ext per term (each runs on one thread). */
#define SUM_TERMS 40
#define SUM_N 5

static ext sum_ext[SUM_TERMS];

static ad_real sum_term(size_t i, const ad_real *x, size_t n, void *ctx)
{
    ad_real u[2] = {x[i % n], x[(i + 1) % n]}, y[1];
    (void)ctx;
    if (ad_external(&rule_second, &sum_ext[i], 2, u, 1, y) != AD_OK)
        return ad_const(NAN);
    return ad_add(ad_mul(0.5, ad_mul(y[0], y[0])), y[0]);
}

static void test_hvp_sum(void **state)
{
    double x[SUM_N], v[SUM_N], want[SUM_N] = {0}, gwant[SUM_N] = {0}, fx, g[SUM_N], hv[SUM_N];
    uint64_t rng = 0x5a;
    (void)state;
    fill_uniform(&rng, x, SUM_N, -1.0, 1.0);
    fill_uniform(&rng, v, SUM_N, -1.0, 1.0);
    for (size_t i = 0; i < SUM_TERMS; i++) {
        form F = {.map = MAP_E, .nz = 2, .src = {0, 1}, .Q = {{1.0}}, .q = {1.0}};
        size_t a = i % SUM_N, b = (i + 1) % SUM_N;
        double z[2] = {x[a], x[b]}, gz[2], Hz[4];
        form_want(&F, z, gz, Hz);
        gwant[a] += gz[0], gwant[b] += gz[1];
        want[a] += Hz[0] * v[a] + Hz[1] * v[b];
        want[b] += Hz[2] * v[a] + Hz[3] * v[b];
    }
    for (unsigned threads = 1; threads <= 2; threads++) {
        for (size_t i = 0; i < SUM_TERMS; i++)
            ext_init(&sum_ext[i], MAP_E);
        assert_ok(ad_hvp_sum(sum_term, NULL, SUM_TERMS, SUM_N, x, v, &fx, g, hv, threads));
        assert_vec(g, gwant, SUM_N);
        assert_vec(hv, want, SUM_N);
        for (size_t i = 0; i < SUM_TERMS; i++)
            assert_clean(&sum_ext[i]);
    }
}

/* A loop of 6 steps over the state (s0, s1), parameter p:
 *   next = (s0 + 0.1 E(s0, p) , s1 + 0.1 sin(s0) E(s1, p)),
 * through the external, checkpointed or written out. */
typedef struct looped {
    ext e;
    int checkpointed;
    ad_status status;
} looped;

static void loop_step(size_t k, const ad_real *s, ad_real *next, size_t n, const ad_real *p,
                      size_t np, void *ctx)
{
    looped *L = ctx;
    ad_real u[2], y0[1], y1[1];
    (void)k, (void)n, (void)np;
    u[0] = s[0], u[1] = p[0];
    ad_status st = ad_external(&rule_second, &L->e, 2, u, 1, y0);
    u[0] = s[1];
    if (st == AD_OK)
        st = ad_external(&rule_second, &L->e, 2, u, 1, y1);
    if (st != AD_OK && L->status == AD_OK)
        L->status = st;
    next[0] = ad_add(s[0], ad_mul(0.1, y0[0]));
    next[1] = ad_add(s[1], ad_mul(0.1, ad_mul(ad_sin(s[0]), y1[0])));
}

static ad_real loop_objective(const ad_real *x, size_t n, void *ctx)
{
    looped *L = ctx;
    ad_real s[2] = {x[0], x[1]}, out[2], buf[2][2];
    (void)n;
    if (L->checkpointed) {
        ad_status st = ad_checkpointed_loop(loop_step, L, 6, 2, 2, s, 1, x + 2, out);
        if (st != AD_OK && L->status == AD_OK)
            L->status = st;
    } else {
        memcpy(buf[0], s, sizeof s);
        for (size_t k = 0; k < 6; k++)
            loop_step(k, buf[k & 1], buf[(k + 1) & 1], 2, x + 2, 1, L);
        memcpy(out, buf[0], sizeof out);
    }
    return ad_add(ad_mul(out[0], out[1]), ad_mul(out[0], out[0]));
}

static void test_inside_loop(void **state)
{
    const double x[3] = {0.3, -0.6, 0.45}, v[3] = {1.0, -0.5, 0.25};
    double fx[2], g[2][3], hv[2][3], H[2][9];
    ad_csr S[2];
    looped L;
    (void)state;
    for (int l = 0; l < 2; l++) {
        ext_init(&L.e, MAP_E);
        L.checkpointed = l;
        L.status = AD_OK;
        assert_ok(ad_hvp(loop_objective, &L, 3, x, v, &fx[l], g[l], hv[l]));
        assert_ok(ad_hessian(loop_objective, &L, 3, x, &fx[l], g[l], H[l]));
        assert_ok(ad_sparse_hessian(loop_objective, &L, 3, x, &fx[l], g[l], &S[l]));
        assert_int_equal(L.status, AD_OK);
        assert_clean(&L.e);
    }
    assert_same(fx[1], fx[0]);
    assert_vec(g[1], g[0], 3);
    assert_vec(hv[1], hv[0], 3);
    assert_vec(H[1], H[0], 9);
    /* written out: E(s1, p) and E(s0, p) mix every input; the loop is a
     * dense block: both structures are the whole triangle */
    for (int l = 0; l < 2; l++) {
        assert_csr_valid(&S[l], 3, 3);
        assert_int_equal(S[l].nnz, 6);
        for (size_t r = 0; r < 3; r++)
            for (size_t e = S[l].row_ptr[r]; e < S[l].row_ptr[r + 1]; e++)
                assert_near(S[l].val[e], H[0][r * 3 + S[l].col[e]], 0.0,
                            RTOL * scale_of(H[0], 9));
        ad_csr_free(&S[l]);
    }
}

/* ======================================================================
 * 5. Allocation failure
 * ====================================================================== */

enum alloc_api { A_HVP, A_HESSIAN, A_SPARSE, A_VALUES, A_APIS };

/* One call on F at z; its outputs into out (fx, grad, then H v, H or the
 * sparse values); returns its status. */
static ad_status alloc_call(int api, form *F, const double *z, ad_csr *S, double *out)
{
    size_t nz = F->nz;
    const double v[MAXZ] = {0.5, -1.0, 0.25, 2.0, 1.0, -0.5};
    switch (api) {
    case A_HVP: return ad_hvp(form_objective, F, nz, z, v, out, out + 1, out + 1 + nz);
    case A_HESSIAN: return ad_hessian(form_objective, F, nz, z, out, out + 1, out + 1 + nz);
    case A_SPARSE: {
        ad_csr T;
        ad_status s = ad_sparse_hessian(form_objective, F, nz, z, out, out + 1, &T);
        if (s == AD_OK) {
            assert_int_equal(T.nnz, S->nnz);
            memcpy(out + 1 + nz, T.val, T.nnz * sizeof *out);
            ad_csr_free(&T);
        } else {
            assert_csr_empty(&T);
            fill(out + 1 + nz, S->nnz, NAN);
        }
        return s;
    }
    default: {
        ad_status s = ad_sparse_hessian_values(form_objective, F, nz, z, out, out + 1, S);
        memcpy(out + 1 + nz, S->val, S->nnz * sizeof *out);
        return s;
    }
    }
}

static size_t alloc_outputs(int api, const form *F, const ad_csr *S)
{
    size_t nz = F->nz;
    return 1 + nz + (api == A_HVP ? nz : api == A_HESSIAN ? nz * nz : S->nnz);
}

/* Every form but G, whose rules' own drivers would meet the failure and
 * count it, not report it. */
static void test_alloc_failure(void **state)
{
    (void)state;
    for (size_t f = 0; f < FORMS; f++)
        for (int api = 0; api < A_APIS && forms[f].map != MAP_G; api++)
            for (int fresh = 0; fresh < 2; fresh++) {
                form *F = form_use(&forms[f], &rule_second);
                double z[MAXZ] = {0.3, -0.7, 0.9, 0.2, 0.5, -0.1}, want[64], got[64], fx, g[MAXZ];
                ad_csr S;
                assert_ok(ad_sparse_hessian(form_objective, F, F->nz, z, &fx, g, &S));
                size_t nout = alloc_outputs(api, F, &S);
                assert_ok(alloc_call(api, F, z, &S, want));
                int successes = 0, failures = 0;
                for (long i = 0; successes < 3; i++) {
                    if (fresh)
                        assert_ok(ad_release());
                    fill(got, nout, 7.0);
                    form_use(F, &rule_second);
                    ad_test_fail_alloc_after(i);
                    ad_status st = alloc_call(api, F, z, &S, got);
                    ad_test_fail_alloc_after(-1);
                    if (st == AD_OK) {
                        successes++;
                        for (size_t k = 0; k < nout; k++)
                            assert_same(got[k], want[k]);
                        continue;
                    }
                    failures++;
                    assert_alloc_failure(i, st, successes);
                    for (size_t k = 0; k < nout; k++)
                        assert_nan(got[k]);
                    assert_true(i < 400);
                }
                assert_true(failures > 0 || !fresh);
                ad_csr_free(&S);
                assert_clean(&F->e);
            }
}

/* After every test, even a failed one: no failure injection. */
static int reset(void **state)
{
    (void)state;
    ad_test_fail_alloc_after(-1);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_closed_forms, reset),
        cmocka_unit_test_teardown(test_composition, reset),
        cmocka_unit_test_teardown(test_without_hvp, reset),
        cmocka_unit_test_teardown(test_hvp_without_jvp, reset),
        cmocka_unit_test_teardown(test_hvp_sum, reset),
        cmocka_unit_test_teardown(test_inside_loop, reset),
        cmocka_unit_test_teardown(test_alloc_failure, reset),
    };
    return cmocka_run_group_tests_name("external functions, second order", tests, NULL, NULL);
}
