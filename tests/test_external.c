/* Functions dualrev cannot see: ad_external with user-supplied rules
 * (ad_rule: primal, vjp, optional jvp).
 *
 * The rules here implement the maps A, B, C, D and G of external_maps.h,
 * with Jacobians in closed form; G's rules call ad_gradient themselves
 * (nested recordings).
 * The rules check what they are given (ctx unchanged, xbar zeroed, y the
 * primal of x) and count their calls; the tests check the counts.
 *
 * Oracles: gradients by hand (the chain rule through the closed-form
 * Jacobians), eighth-order central differences of the same composition on
 * plain doubles, and the same composition written with ordinary dualrev
 * operations. */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "external_maps.h"
#include "workers.h"
#include "../lib/drivers/testing.h"

/* ======================================================================
 * The maps and their rules
 * ====================================================================== */

/* A rule's ctx.  Counters are per ctx (one thread each); a ctx that does
 * not arrive as given cannot be trusted with its own counters, so that is
 * counted globally. */
typedef struct ext {
    struct ext *self;
    enum map map;
    int primal_calls, vjp_calls, jvp_calls;
    int bad_size, bad_xbar, bad_y, bad_nested;
} ext;

static atomic_int bad_ctx;
static atomic_int poisoned;  /* calls of rules that must never run */

static ext ext_make(enum map k)
{
    ext e;
    memset(&e, 0, sizeof e);
    e.map = k;
    return e;
}

/* Tie a ctx to its address, once it has one. */
static ext *ext_at(ext *e)
{
    e->self = e;
    return e;
}

static ext *ext_check(void *ctx, size_t n, size_t m)
{
    ext *e = ctx;
    if (!e || e->self != e) {
        atomic_fetch_add(&bad_ctx, 1);
        return NULL;
    }
    if (n != map_n[e->map] || m != map_m[e->map])
        e->bad_size++;
    return e;
}

/* G's value and gradient by a nested ad_gradient. */
static ad_real g_objective(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    ad_real s = ad_mul(ad_sin(x[0]), x[1]);
    s = ad_add(s, ad_mul(ad_sin(x[1]), x[2]));
    return ad_add(s, ad_mul(ad_sin(x[2]), x[0]));
}

static double g_nested(ext *e, const double *x, double *grad)
{
    double fx, scratch[3];
    if (ad_gradient(g_objective, NULL, 3, x, &fx, grad ? grad : scratch) != AD_OK)
        e->bad_nested++;
    return fx;
}

static void rule_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    ext *e = ext_check(ctx, n, m);
    if (!e)
        return;
    e->primal_calls++;
    if (e->map == MAP_G)
        y[0] = g_nested(e, x, NULL);
    else
        map_eval(e->map, x, y);
}

static void rule_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                     const double *ybar, double *xbar)
{
    ext *e = ext_check(ctx, n, m);
    double want[MAXM], J[MAXM * MAXN];
    if (!e)
        return;
    e->vjp_calls++;
    for (size_t i = 0; i < n; i++)
        if (!same_double(xbar[i], 0.0))
            e->bad_xbar++;
    map_eval(e->map, x, want);
    for (size_t j = 0; j < m; j++)
        if (!same_double(y[j], want[j]))
            e->bad_y++;
    if (e->map == MAP_G) {
        double grad[3];
        g_nested(e, x, grad);
        for (size_t i = 0; i < 3; i++)
            xbar[i] = ybar[0] * grad[i];
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
    ext *e = ext_check(ctx, n, m);
    double want[MAXM], J[MAXM * MAXN];
    if (!e)
        return;
    e->jvp_calls++;
    map_eval(e->map, x, want);
    for (size_t j = 0; j < m; j++)
        if (!same_double(y[j], want[j]))
            e->bad_y++;
    if (e->map == MAP_G) {
        double grad[3];
        g_nested(e, x, grad);
        ydot[0] = grad[0] * xdot[0] + grad[1] * xdot[1] + grad[2] * xdot[2];
        return;
    }
    map_jacobian(e->map, x, J);
    for (size_t j = 0; j < m; j++) {
        ydot[j] = 0.0;
        for (size_t i = 0; i < n; i++)
            ydot[j] += J[j * n + i] * xdot[i];
    }
}

static void poison_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    (void)ctx, (void)n, (void)x;
    atomic_fetch_add(&poisoned, 1);
    for (size_t j = 0; j < m; j++)
        y[j] = NAN;
}

static void poison_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                       const double *ybar, double *xbar)
{
    (void)ctx, (void)x, (void)m, (void)y, (void)ybar;
    atomic_fetch_add(&poisoned, 1);
    for (size_t i = 0; i < n; i++)
        xbar[i] = NAN;
}

static const ad_rule rule_full = {rule_primal, rule_vjp, rule_jvp, NULL};
static const ad_rule rule_nojvp = {rule_primal, rule_vjp, NULL, NULL};

/* y = map(x) through ad_external; a failure is kept in *status. */
static void apply(const ad_rule *rule, ext *e, const ad_real *x, ad_real *y, ad_status *status)
{
    ad_status s = ad_external(rule, e, map_n[e->map], x, map_m[e->map], y);
    if (s != AD_OK && status && *status == AD_OK)
        *status = s;
}

/* No rule saw anything wrong. */
static void check_ext_clean(const ext *e, const char *file, int line)
{
    if (e->bad_size || e->bad_xbar || e->bad_y || e->bad_nested || atomic_load(&bad_ctx) ||
        atomic_load(&poisoned)) {
        print_error("map %d: bad size %d, xbar not zeroed %d, y not the primal %d, nested "
                    "failures %d; bad ctx %d, poisoned rules run %d\n",
                    (int)e->map, e->bad_size, e->bad_xbar, e->bad_y, e->bad_nested,
                    atomic_load(&bad_ctx), atomic_load(&poisoned));
        _fail(file, line);
    }
}
#define assert_ext_clean(e) check_ext_clean((e), __FILE__, __LINE__)

static void check_calls(const ext *e, int primal, int vjp, int jvp, const char *file, int line)
{
    if (e->primal_calls != primal || e->vjp_calls != vjp || e->jvp_calls != jvp) {
        print_error("map %d: calls primal %d, vjp %d, jvp %d; expected %d, %d, %d\n", (int)e->map,
                    e->primal_calls, e->vjp_calls, e->jvp_calls, primal, vjp, jvp);
        _fail(file, line);
    }
}
#define assert_calls(e, p, v, j) check_calls((e), (p), (v), (j), __FILE__, __LINE__)

static void reset_calls(ext *e)
{
    e->primal_calls = e->vjp_calls = e->jvp_calls = 0;
}

/* ======================================================================
 * 1. A composition: ordinary operations, A, B and C, ordinary operations
 * ====================================================================== */

/* loss(z), z in R^4:
 *   u = (z0 z1, sin z2, exp(z3 / 2));  a = A(u)
 *   w = (a0, a1, z0, a0 z3);            b = B(w)
 *   s = b / 10;                         c = C(s)
 *   loss = c0 + c1 a1 + c2 z2 */
typedef struct composed {
    ext a, b, c;
    const ad_rule *rule;
    ad_status status;
} composed;

static void composed_init(composed *k, const ad_rule *rule)
{
    k->a = ext_make(MAP_A);
    k->b = ext_make(MAP_B);
    k->c = ext_make(MAP_C);
    ext_at(&k->a);
    ext_at(&k->b);
    ext_at(&k->c);
    k->rule = rule;
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
    apply(k->rule, &k->a, u, a, &k->status);
    w[0] = a[0];
    w[1] = a[1];
    w[2] = z[0];
    w[3] = ad_mul(a[0], z[3]);
    apply(k->rule, &k->b, w, b, &k->status);
    s[0] = ad_div(b[0], 10.0);
    apply(k->rule, &k->c, s, c, &k->status);
    return ad_add(ad_add(c[0], ad_mul(c[1], a[1])), ad_mul(c[2], z[2]));
}

static double composed_d(const double *z)
{
    double u[3], a[2], w[4], b[1], s[1], c[3];
    u[0] = z[0] * z[1];
    u[1] = sin(z[2]);
    u[2] = exp(z[3] * 0.5);
    map_eval(MAP_A, u, a);
    w[0] = a[0], w[1] = a[1], w[2] = z[0], w[3] = a[0] * z[3];
    map_eval(MAP_B, w, b);
    s[0] = b[0] / 10.0;
    map_eval(MAP_C, s, c);
    return c[0] + c[1] * a[1] + c[2] * z[2];
}


typedef struct fd_coord {
    double z[4];
    size_t i;
} fd_coord;

static double composed_coordinate(double t, const void *ctx)
{
    fd_coord c = *(const fd_coord *)ctx;
    c.z[c.i] = t;
    return composed_d(c.z);
}

static void check_gradient_vs_hand(const double *g, const double *gw, size_t n, double fx,
                                   double fw)
{
    double scale = 0.0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs(gw[i]));
    assert_near(fx, fw, 1e-14, 1e-300);
    for (size_t i = 0; i < n; i++)
        assert_near(g[i], gw[i], 1e-12, 1e-13 * scale);
}

static void test_composed_gradient(void **state)
{
    uint64_t rng = 0xc0de;
    (void)state;
    for (int r = 0; r < 2; r++)
        for (int trial = 0; trial < 20; trial++) {
            composed k;
            double z[4], g[4], gw[4];
            composed_init(&k, r ? &rule_nojvp : &rule_full);
            fill_uniform(&rng, z, 4, -1.0, 1.0);
            double fx = gradient_ok(composed_ad, &k, 4, z, g);
            assert_int_equal(k.status, AD_OK);
            double fw = composed_grad(z, gw);
            assert_same(fx, composed_d(z));
            check_gradient_vs_hand(g, gw, 4, fx, fw);
            if (trial < 5)
                for (size_t i = 0; i < 4; i++) {
                    fd_coord c;
                    memcpy(c.z, z, sizeof z);
                    c.i = i;
                    fd_result fd = fd_derivative(composed_coordinate, &c, z[i]);
                    assert_near(g[i], fd.d, 1e-7, fd.noise + 1e-9);
                }
            ext *all[3] = {&k.a, &k.b, &k.c};
            for (int e = 0; e < 3; e++) {
                assert_ext_clean(all[e]);
                assert_calls(all[e], 1, 1, 0);
            }
        }
    /* ad_tape_dump lists a tape with block records. */
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(ad_tape_dump(f, 1000), AD_OK);
    assert_true(ftell(f) > 0);
    fclose(f);
}

/* ======================================================================
 * 2. One map as a vector function: y = 2 map(1.5 z + 1/4), J = 3 J_map
 * ====================================================================== */

typedef struct single {
    ext e;
    const ad_rule *rule;
    ad_status status;
} single;

static void single_init(single *s, enum map k, const ad_rule *rule)
{
    s->e = ext_make(k);
    ext_at(&s->e);
    s->rule = rule;
    s->status = AD_OK;
}

static void single_f(const ad_real *z, size_t n, ad_real *y, size_t m, void *ctx)
{
    single *s = ctx;
    ad_real u[MAXN], v[MAXM];
    for (size_t i = 0; i < n; i++)
        u[i] = ad_add(ad_mul(z[i], 1.5), 0.25);
    apply(s->rule, &s->e, u, v, &s->status);
    for (size_t j = 0; j < m; j++)
        y[j] = ad_mul(v[j], 2.0);
}

static void single_want(enum map k, const double *z, double *y, double *J)
{
    double u[MAXN];
    size_t n = map_n[k], m = map_m[k];
    for (size_t i = 0; i < n; i++)
        u[i] = z[i] * 1.5 + 0.25;
    map_eval(k, u, y);
    map_jacobian(k, u, J);
    for (size_t j = 0; j < m; j++) {
        y[j] *= 2.0;
        for (size_t i = 0; i < n; i++)
            J[j * n + i] *= 3.0;
    }
}

static void check_matrix(const double *got, const double *want, size_t count, double rtol)
{
    double scale = 0.0;
    for (size_t k = 0; k < count; k++)
        scale = fmax(scale, fabs(want[k]));
    for (size_t k = 0; k < count; k++)
        assert_near(got[k], want[k], rtol, 1e-14 * scale + 1e-300);
}

/* got = J v (transposed: J^T v), to 1e-13 of the magnitude of the terms
 * (the sums may cancel). */
static void check_product(const double *got, const double *J, size_t m, size_t n, const double *v,
                          int transposed, const char *file, int line)
{
    for (size_t r = 0; r < (transposed ? n : m); r++) {
        double want = 0.0, scale = 0.0;
        for (size_t k = 0; k < (transposed ? m : n); k++) {
            double t = transposed ? v[k] * J[k * n + r] : J[r * n + k] * v[k];
            want += t;
            scale += fabs(t);
        }
        check_near(got[r], want, 0.0, 1e-13 * scale + 1e-300, "product", file, line);
    }
}
#define assert_jv(got, J, m, n, v) check_product((got), (J), (m), (n), (v), 0, __FILE__, __LINE__)
#define assert_wj(got, J, m, n, w) check_product((got), (J), (m), (n), (w), 1, __FILE__, __LINE__)

/* ad_jacobian, ad_vjp, ad_jvp and ad_sparse_jacobian of one map, with or
 * without its jvp rule. */
static void check_single(enum map k, int with_jvp, uint64_t *rng)
{
    size_t n = map_n[k], m = map_m[k];
    double z[MAXN], y[MAXM], yw[MAXM], J[MAXM * MAXN], Jw[MAXM * MAXN];
    double v[MAXN], w[MAXM], jv[MAXM], wj[MAXN];
    single s;
    single_init(&s, k, with_jvp ? &rule_full : &rule_nojvp);
    fill_uniform(rng, z, n, -1.0, 1.0);
    fill_uniform(rng, v, n, -1.0, 1.0);
    fill_uniform(rng, w, m, -1.0, 1.0);
    single_want(k, z, yw, Jw);

    /* Whole Jacobian: forward sweeps when n <= m and there is a jvp rule,
     * reverse sweeps otherwise. */
    assert_int_equal(ad_jacobian(single_f, &s, n, z, m, y, J), AD_OK);
    for (size_t j = 0; j < m; j++)
        assert_same(y[j], yw[j]);
    check_matrix(J, Jw, n * m, 1e-13);
    assert_int_equal(s.e.primal_calls, 1);
    if (!with_jvp)
        assert_int_equal(s.e.jvp_calls, 0);

    reset_calls(&s.e);
    assert_int_equal(ad_vjp(single_f, &s, n, z, m, w, y, wj), AD_OK);
    assert_wj(wj, Jw, m, n, w);
    assert_calls(&s.e, 1, 1, 0);

    reset_calls(&s.e);
    fill_uniform(rng, jv, m, 1.0, 2.0);  /* no stale NaN */
    ad_status st = ad_jvp(single_f, &s, n, z, v, m, y, jv);
    if (with_jvp) {
        assert_int_equal(st, AD_OK);
        assert_jv(jv, Jw, m, n, v);
        for (size_t j = 0; j < m; j++)
            assert_same(y[j], yw[j]);
        assert_calls(&s.e, 1, 0, 1);
    } else {
        assert_int_equal(st, AD_ENOTSUP);
        for (size_t j = 0; j < m; j++) {
            assert_nan(y[j]);
            assert_nan(jv[j]);
        }
    }

    /* Sparse: every output of the map depends on every input of it. */
    ad_csr S;
    assert_int_equal(ad_sparse_jacobian(single_f, &s, n, z, m, y, &S), AD_OK);
    assert_csr_valid(&S, m, n);
    assert_int_equal(S.nnz, n * m);
    for (size_t j = 0; j < m; j++)
        for (size_t i = 0; i < n; i++) {
            size_t at = S.row_ptr[j] + i;
            assert_int_equal(S.col[at], i);
            assert_near(S.val[at], Jw[j * n + i], 1e-13, 1e-14);
        }
    ad_csr_free(&S);
    assert_int_equal(s.status, AD_OK);
    assert_ext_clean(&s.e);
}

static void test_jacobians_through_externals(void **state)
{
    uint64_t rng = 0x7ac;
    (void)state;
    for (int k = MAP_A; k <= MAP_D; k++)
        for (int trial = 0; trial < 4; trial++) {
            check_single((enum map)k, 1, &rng);
            check_single((enum map)k, 0, &rng);
        }
}

/* ad_linearize, then J and J^T applied 100 times each; ctx stays valid
 * until ad_linear_free.  Without a jvp rule, J^T still works and J returns
 * AD_ENOTSUP with NaN outputs. */
static void test_linearize_reuse(void **state)
{
    uint64_t rng = 0x11ea;
    (void)state;
    for (int k = MAP_A; k <= MAP_D; k++)
        for (int with_jvp = 0; with_jvp < 2; with_jvp++) {
            enum map map = (enum map)k;
            size_t n = map_n[map], m = map_m[map];
            double z[MAXN], y[MAXM], yw[MAXM], Jw[MAXM * MAXN], v[MAXN], w[MAXM];
            double jv[MAXM], wj[MAXN];
            single s;
            ad_linear *L = NULL;
            single_init(&s, map, with_jvp ? &rule_full : &rule_nojvp);
            fill_uniform(&rng, z, n, -1.0, 1.0);
            single_want(map, z, yw, Jw);
            assert_int_equal(ad_linearize(single_f, &s, n, z, m, y, &L), AD_OK);
            for (size_t j = 0; j < m; j++)
                assert_same(y[j], yw[j]);
            for (int round = 0; round < 100; round++) {
                fill_uniform(&rng, v, n, -1.0, 1.0);
                fill_uniform(&rng, w, m, -1.0, 1.0);
                assert_int_equal(ad_linear_vjp(L, w, wj), AD_OK);
                assert_wj(wj, Jw, m, n, w);
                fill_uniform(&rng, jv, m, 1.0, 2.0);  /* no stale NaN */
                ad_status st = ad_linear_jvp(L, v, jv);
                if (with_jvp) {
                    assert_int_equal(st, AD_OK);
                    assert_jv(jv, Jw, m, n, v);
                } else {
                    assert_int_equal(st, AD_ENOTSUP);
                    for (size_t j = 0; j < m; j++)
                        assert_nan(jv[j]);
                }
            }
            assert_calls(&s.e, 1, 100, with_jvp ? 100 : 0);
            ad_linear_free(L);
            assert_ext_clean(&s.e);
        }
}

/* The spec's cases in one place: no jvp rule, n < m (C: 1 -> 3). */
static void test_no_jvp_rule(void **state)
{
    const double z[1] = {0.3}, v[1] = {1.0}, w[3] = {1.0, -1.0, 0.5};
    double y[3], yw[3], J[3], Jw[3], jv[3], wj[1];
    single s;
    ad_linear *L = NULL;
    (void)state;
    single_init(&s, MAP_C, &rule_nojvp);
    single_want(MAP_C, z, yw, Jw);
    assert_int_equal(ad_jacobian(single_f, &s, 1, z, 3, y, J), AD_OK);
    check_matrix(J, Jw, 3, 1e-14);
    assert_int_equal(ad_vjp(single_f, &s, 1, z, 3, w, y, wj), AD_OK);
    assert_near(wj[0], Jw[0] - Jw[1] + 0.5 * Jw[2], 1e-14, 1e-15);
    fill_uniform(&(uint64_t){1}, jv, 3, 1.0, 2.0);
    assert_int_equal(ad_jvp(single_f, &s, 1, z, v, 3, y, jv), AD_ENOTSUP);
    for (int j = 0; j < 3; j++) {
        assert_nan(y[j]);
        assert_nan(jv[j]);
    }
    assert_int_equal(ad_linearize(single_f, &s, 1, z, 3, y, &L), AD_OK);
    fill_uniform(&(uint64_t){2}, jv, 3, 1.0, 2.0);
    assert_int_equal(ad_linear_jvp(L, v, jv), AD_ENOTSUP);
    for (int j = 0; j < 3; j++)
        assert_nan(jv[j]);
    assert_int_equal(ad_linear_vjp(L, w, wj), AD_OK);
    assert_near(wj[0], Jw[0] - Jw[1] + 0.5 * Jw[2], 1e-14, 1e-15);
    ad_linear_free(L);
    assert_int_equal(s.e.jvp_calls, 0);
    assert_ext_clean(&s.e);
}

/* The function's last output is an output of a block other than its last
 * (the other outputs are above it on the tape, and unused): sweeps must
 * still see every output of the block, with cotangent 0 for the unused
 * ones, whatever an earlier sweep left in memory. */
typedef struct first_out {
    single s;
    size_t pick;  /* which output of the map the function returns */
} first_out;

static void first_out_f(const ad_real *z, size_t n, ad_real *y, size_t m, void *ctx)
{
    first_out *c = ctx;
    ad_real v[MAXM];
    (void)n;
    apply(c->s.rule, &c->s.e, z, v, &c->s.status);
    y[0] = v[c->pick];
    if (m > 1)
        y[1] = z[0];
}

static ad_real first_out_objective(const ad_real *z, size_t n, void *ctx)
{
    ad_real y[1];
    first_out_f(z, n, y, 1, ctx);
    return y[0];
}

static void test_output_below_block_top(void **state)
{
    uint64_t rng = 0xb10c;
    (void)state;
    for (int k = MAP_A; k <= MAP_C; k += 2)  /* A: 2 outputs, C: 3 */
        for (size_t pick = 0; pick + 1 < map_m[k]; pick++) {
            enum map map = (enum map)k;
            size_t n = map_n[map];
            double z[MAXN], g[MAXN], J[2 * MAXN], Jw[MAXM * MAXN], yw[MAXM], y[2];
            double v[MAXN], jv[2], w[2] = {1.0, 0.0};
            first_out c = {.pick = pick};
            composed dirty;
            double zd[4] = {0.9, -0.9, 0.8, 0.7}, gd[4];
            fill_uniform(&rng, z, n, -1.0, 1.0);
            fill_uniform(&rng, v, n, -1.0, 1.0);
            map_eval(map, z, yw);
            map_jacobian(map, z, Jw);
            for (int with_jvp = 0; with_jvp < 2; with_jvp++) {
                single_init(&c.s, map, with_jvp ? &rule_full : &rule_nojvp);
                /* Leave cotangents and tangents in the tape's memory. */
                composed_init(&dirty, &rule_full);
                gradient_ok(composed_ad, &dirty, 4, zd, gd);
                assert_same(gradient_ok(first_out_objective, &c, n, z, g), yw[pick]);
                check_matrix(g, Jw + pick * n, n, 1e-14);
                gradient_ok(composed_ad, &dirty, 4, zd, gd);
                assert_int_equal(ad_vjp(first_out_f, &c, n, z, 1, w, y, g), AD_OK);
                check_matrix(g, Jw + pick * n, n, 1e-14);
                if (n > 1) {  /* rows: reverse sweeps over two outputs */
                    gradient_ok(composed_ad, &dirty, 4, zd, gd);
                    assert_int_equal(ad_jacobian(first_out_f, &c, n, z, 2, y, J), AD_OK);
                    check_matrix(J, Jw + pick * n, n, 1e-14);
                }
                if (with_jvp) {
                    assert_int_equal(ad_jvp(first_out_f, &c, n, z, v, 1, y, jv), AD_OK);
                    assert_jv(jv, Jw + pick * n, 1, n, v);
                }
                assert_int_equal(c.s.status, AD_OK);
                assert_ext_clean(&c.s.e);
            }
        }
}

/* ======================================================================
 * 3. Sparse structure across an external, constant inputs
 * ====================================================================== */

/* z in R^6: u = (z0 z1, z5, z3); a = A(u);  b = B(1, z2, 2, z4);
 * y = (a0, a1 + z4, 3 z2, 1, b).  A's y1 does not depend on its x1, but
 * dualrev cannot see that: row 1 has column 5, with value 0.  B's constant
 * arguments take no part. */
typedef struct sparse_ctx {
    single a;
    ext b;
} sparse_ctx;

static void sparse_f(const ad_real *z, size_t n, ad_real *y, size_t m, void *ctx)
{
    sparse_ctx *c = ctx;
    ad_real u[3] = {ad_mul(z[0], z[1]), z[5], z[3]}, a[2];
    ad_real v[4] = {ad_const(1.0), z[2], ad_const(2.0), z[4]}, b[1];
    (void)n, (void)m;
    apply(c->a.rule, &c->a.e, u, a, &c->a.status);
    apply(c->a.rule, &c->b, v, b, &c->a.status);
    y[0] = a[0];
    y[1] = ad_add(a[1], z[4]);
    y[2] = ad_mul(z[2], 3.0);
    y[3] = ad_const(1.0);
    y[4] = b[0];
}

static void test_sparse_across_external(void **state)
{
    static const char *const structure[5] = {"11.1.1", "11.111", "..1...", "......", "..1.1."};
    uint64_t rng = 0x5ba;
    (void)state;
    for (int with_jvp = 0; with_jvp < 2; with_jvp++)
        for (int trial = 0; trial < 6; trial++) {
            double z[6], y[5], y2[5], J[30], JA[6], JB[4];
            sparse_ctx c;
            ad_csr S;
            int hashed = trial % 2;
            single_init(&c.a, MAP_A, with_jvp ? &rule_full : &rule_nojvp);
            c.b = ext_make(MAP_B);
            ext_at(&c.b);
            fill_uniform(&rng, z, 6, -1.0, 1.0);
            assert_int_equal(ad_jacobian(sparse_f, &c, 6, z, 5, y, J), AD_OK);
            double u[3] = {z[0] * z[1], z[5], z[3]}, v[4] = {1.0, z[2], 2.0, z[4]};
            map_jacobian(MAP_A, u, JA);
            map_jacobian(MAP_B, v, JB);
            const double Jw[30] = {
                JA[0] * z[1], JA[0] * z[0], 0, JA[2], 0, JA[1],
                JA[3] * z[1], JA[3] * z[0], 0, JA[5], 1, JA[4],
                0, 0, 3, 0, 0, 0,
                0, 0, 0, 0, 0, 0,
                0, 0, JB[1], 0, JB[3], 0,
            };
            check_matrix(J, Jw, 30, 1e-13);
            if (with_jvp) {  /* forward: B's constant arguments have tangent 0 */
                double v[6], jv[5];
                fill_uniform(&rng, v, 6, -1.0, 1.0);
                assert_int_equal(ad_jvp(sparse_f, &c, 6, z, v, 5, y2, jv), AD_OK);
                assert_jv(jv, Jw, 5, 6, v);
            }
            ad_test_sparse_force_hash(hashed);
            ad_status st = ad_sparse_jacobian(sparse_f, &c, 6, z, 5, y2, &S);
            ad_test_sparse_force_hash(0);
            assert_int_equal(st, AD_OK);
            assert_csr_valid(&S, 5, 6);
            for (size_t j = 0; j < 5; j++) {
                char got[7] = "......";
                assert_same(y2[j], y[j]);
                for (size_t k = S.row_ptr[j]; k < S.row_ptr[j + 1]; k++) {
                    got[S.col[k]] = '1';
                    assert_near(S.val[k], J[j * 6 + S.col[k]], 1e-14, 1e-300);
                }
                if (strcmp(got, structure[j]) != 0) {
                    print_error("row %zu (%s store): columns %s, expected %s\n", j,
                                hashed ? "hashed" : "dense", got, structure[j]);
                    fail();
                }
            }
            assert_true(J[1 * 6 + 5] == 0.0);
            ad_csr_free(&S);
            assert_int_equal(c.a.status, AD_OK);
            assert_ext_clean(&c.a.e);
            assert_ext_clean(&c.b);
        }
}

/* Constant inputs (ID 0) to an external, and an input given twice:
 * a = A(0.7, z0, z0), loss = a0 + a1 + z1; and all inputs constant. */
typedef struct consts {
    single s;
    int all_constant;
} consts;

static ad_real consts_objective(const ad_real *z, size_t n, void *ctx)
{
    consts *c = ctx;
    ad_real u[3] = {ad_const(0.7), z[0], z[0]}, a[2];
    (void)n;
    if (c->all_constant)
        u[1] = u[2] = ad_const(ad_value(z[0]));
    apply(c->s.rule, &c->s.e, u, a, &c->s.status);
    return ad_add(ad_add(a[0], a[1]), z[1]);
}

static void test_constant_inputs(void **state)
{
    const double z[2] = {0.4, -1.3};
    double g[2];
    (void)state;
    for (int all = 0; all < 2; all++) {
        consts c = {.all_constant = all};
        single_init(&c.s, MAP_A, &rule_full);
        double fx = gradient_ok(consts_objective, &c, 2, z, g);
        double u[3] = {0.7, z[0], z[0]}, a[2], JA[6];
        map_eval(MAP_A, u, a);
        map_jacobian(MAP_A, u, JA);
        assert_same(fx, a[0] + a[1] + z[1]);
        if (all)
            assert_same(g[0], 0.0);
        else
            assert_near(g[0], JA[1] + JA[2] + JA[4] + JA[5], 1e-15, 0.0);
        assert_same(g[1], 1.0);
        assert_int_equal(c.s.status, AD_OK);
        assert_int_equal(c.s.e.primal_calls, 1);
        assert_ext_clean(&c.s.e);
    }
}

/* ======================================================================
 * 4. Errors and calls outside a recording
 * ====================================================================== */

enum bad_arg { BAD_RULE, BAD_PRIMAL, BAD_VJP, BAD_X, BAD_Y, BAD_ARGS };

typedef struct bad_call {
    enum bad_arg which;
    ext e;
    ad_status got;
    double y[2];
} bad_call;

/* ad_external with one NULL argument; status and y as they come back. */
static ad_status call_bad(bad_call *b, const ad_real *x, ad_real *yout)
{
    ad_rule r = rule_full;
    const ad_rule *rp = &r;
    ad_real y[2] = {{7.0, 0, 0}, {7.0, 0, 0}};
    const ad_real *xp = x;
    ad_real *yp = y;
    switch (b->which) {
    case BAD_RULE: rp = NULL; break;
    case BAD_PRIMAL: r.primal = NULL; break;
    case BAD_VJP: r.vjp = NULL; break;
    case BAD_X: xp = NULL; break;
    default: yp = NULL; break;
    }
    ad_status s = ad_external(rp, &b->e, 3, xp, 2, yp);
    b->y[0] = y[0].v;
    b->y[1] = y[1].v;
    yout[0] = y[0];
    yout[1] = y[1];
    return s;
}

static ad_real bad_objective(const ad_real *x, size_t n, void *ctx)
{
    bad_call *b = ctx;
    ad_real y[2];
    (void)n;
    b->got = call_bad(b, x, y);
    return ad_add(ad_mul(x[0], x[1]), ad_mul(x[2], 2.0));
}

static void test_null_arguments(void **state)
{
    const double x[3] = {0.5, -0.25, 1.5};
    (void)state;
    for (int which = 0; which < BAD_ARGS; which++) {
        bad_call b;
        double fx = 0.0, g[3] = {0, 0, 0};
        b.which = (enum bad_arg)which;
        b.e = ext_make(MAP_A);
        ext_at(&b.e);
        b.got = AD_OK;
        /* In a recording: the call fails, and so does the recording. */
        assert_int_equal(ad_gradient(bad_objective, &b, 3, x, &fx, g), AD_EINVAL);
        assert_int_equal(b.got, AD_EINVAL);
        assert_all_nan(fx, g, 3);
        if (which != BAD_Y) {
            assert_nan(b.y[0]);
            assert_nan(b.y[1]);
        }
        assert_int_equal(b.e.vjp_calls, 0);
        /* Outside a recording: the same status. */
        ad_real xc[3] = {ad_const(x[0]), ad_const(x[1]), ad_const(x[2])}, y[2];
        assert_int_equal(call_bad(&b, xc, y), AD_EINVAL);
        if (which != BAD_Y) {
            assert_nan(b.y[0]);
            assert_nan(b.y[1]);
        }
        /* The thread's next recording is unaffected. */
        double ok[3];
        assert_near(gradient_ok(g_objective, NULL, 3, x, ok), g_value(x), 1e-15, 0.0);
    }
}

/* Outside a recording only primal runs, and y is constant. */
static void test_outside_recording(void **state)
{
    ext e = ext_make(MAP_A);
    ad_real x[3] = {ad_const(0.5), ad_const(-1.0), ad_const(2.0)}, y[2];
    double yw[2], xd[3] = {0.5, -1.0, 2.0};
    (void)state;
    ext_at(&e);
    map_eval(MAP_A, xd, yw);
    assert_int_equal(ad_external(&rule_full, &e, 3, x, 2, y), AD_OK);
    assert_same(y[0].v, yw[0]);
    assert_same(y[1].v, yw[1]);
    assert_int_equal(y[0].id, 0);
    assert_int_equal(y[1].id, 0);
    assert_calls(&e, 1, 0, 0);
    /* An input with an ID (left over from a finished recording) is still
     * only a value here. */
    x[1].id = 2;
    assert_int_equal(ad_external(&rule_nojvp, &e, 3, x, 2, y), AD_OK);
    assert_same(y[1].v, yw[1]);
    assert_int_equal(y[0].id, 0);
    assert_calls(&e, 2, 0, 0);
    assert_ext_clean(&e);
}

/* The rule struct is copied: the objective's own copy may change or die
 * before the sweep.  ctx is kept: it arrives unchanged (the rules check). */
static ad_real copied_rule_objective(const ad_real *z, size_t n, void *ctx)
{
    single *s = ctx;
    ad_rule r = rule_full;
    ad_real u[3] = {z[0], z[1], z[2]}, a[2];
    (void)n;
    if (ad_external(&r, &s->e, 3, u, 2, a) != AD_OK)
        s->status = AD_EINVAL;
    r.primal = poison_primal;
    r.vjp = poison_vjp;
    r.jvp = NULL;
    return ad_add(a[0], ad_mul(a[1], 3.0));
}

static void test_rule_is_copied(void **state)
{
    const double z[3] = {0.3, -0.6, 1.1};
    double g[3], JA[6];
    single s;
    (void)state;
    single_init(&s, MAP_A, &rule_full);
    gradient_ok(copied_rule_objective, &s, 3, z, g);
    map_jacobian(MAP_A, z, JA);
    for (int i = 0; i < 3; i++)
        assert_near(g[i], JA[i] + 3.0 * JA[3 + i], 1e-15, 1e-15);
    assert_int_equal(s.status, AD_OK);
    assert_calls(&s.e, 1, 1, 0);
    assert_ext_clean(&s.e);
}

/* A tape limit that the external's records (a header and one per output)
 * do not fit in: the recording fails with AD_ERANGE, y is NaN. */
typedef struct limited {
    single s;
    ad_status got;
    double y0;
} limited;

static ad_real limited_objective(const ad_real *z, size_t n, void *ctx)
{
    limited *c = ctx;
    ad_real u[3] = {z[0], z[1], z[2]}, a[2];
    (void)n;
    c->got = ad_external(c->s.rule, &c->s.e, 3, u, 2, a);
    c->y0 = a[0].v;
    return ad_add(a[0], a[1]);
}

static void test_tape_limit(void **state)
{
    const double z[3] = {0.5, 0.25, -1.0};
    double fx, g[3];
    limited c;
    (void)state;
    single_init(&c.s, MAP_A, &rule_full);
    gradient_ok(limited_objective, &c, 3, z, g);
    size_t records = 0;
    ad_tape_stats st;
    assert_int_equal(ad_tape_stats_get(&st), AD_OK);
    records = st.records;
    assert_int_equal(records, 1 + 2 + 1);  /* header, one slot per output (docs/tape.md); a0 + a1 */
    ad_set_tape_limit(records);
    gradient_ok(limited_objective, &c, 3, z, g);
    assert_int_equal(c.got, AD_OK);
    for (size_t limit = records - 1; limit >= 1; limit--) {
        ad_set_tape_limit(limit);
        ad_status s = ad_gradient(limited_objective, &c, 3, z, &fx, g);
        ad_set_tape_limit(0);
        assert_int_equal(s, AD_ERANGE);
        assert_all_nan(fx, g, 3);
        if (limit < records - 1) {  /* the external itself did not fit */
            assert_int_not_equal(c.got, AD_OK);
            assert_nan(c.y0);
        }
    }
    assert_ext_clean(&c.s.e);
}

/* Empty arrays may be NULL, as elsewhere in the API: no inputs (y is then
 * constant), no outputs (the primal still runs). */
static void empty_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    int *calls = ctx;
    (void)x;
    ++*calls;
    for (size_t j = 0; j < m; j++)
        y[j] = (double)(n + j);
}

typedef struct empty_ctx {
    ad_status got[2];
    int calls;
} empty_ctx;

static ad_real empty_objective(const ad_real *z, size_t n, void *ctx)
{
    const ad_rule rule = {empty_primal, poison_vjp, NULL, NULL};
    ad_real y[2] = {{7.0, 7, 0}, {7.0, 7, 0}};
    empty_ctx *c = ctx;
    (void)n;
    c->got[0] = ad_external(&rule, &c->calls, 0, NULL, 2, y);
    c->got[1] = ad_external(&rule, &c->calls, 1, z, 0, NULL);
    return ad_add(ad_mul(z[0], y[1]), y[0]);
}

static void test_empty_arrays(void **state)
{
    double z = 3.0, g;
    empty_ctx c = {{AD_EINVAL, AD_EINVAL}, 0};
    (void)state;
    assert_same(gradient_ok(empty_objective, &c, 1, &z, &g), 3.0);
    assert_same(g, 1.0);
    assert_int_equal(c.got[0], AD_OK);
    assert_int_equal(c.got[1], AD_OK);
    assert_int_equal(c.calls, 2);
    assert_int_equal(atomic_load(&poisoned), 0);
}

/* ======================================================================
 * 5. Nested recordings inside rules, several externals in a tape
 * ====================================================================== */

/* loss = 2 G(sin z0, z1 z2, z0) + z1; G's primal, vjp and jvp each call
 * ad_gradient. */
static ad_real nested_objective(const ad_real *z, size_t n, void *ctx)
{
    single *s = ctx;
    ad_real u[3] = {ad_sin(z[0]), ad_mul(z[1], z[2]), z[0]}, g[1];
    (void)n;
    apply(s->rule, &s->e, u, g, &s->status);
    return ad_add(ad_mul(g[0], 2.0), z[1]);
}

static void nested_f(const ad_real *z, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m;
    y[0] = nested_objective(z, n, ctx);
    y[1] = ad_mul(z[0], z[2]);
}

static double nested_grad(const double *z, double *g)
{
    double u[3] = {sin(z[0]), z[1] * z[2], z[0]}, G[3];
    map_jacobian(MAP_G, u, G);
    g[0] = 2.0 * (G[0] * cos(z[0]) + G[2]);
    g[1] = 2.0 * G[1] * z[2] + 1.0;
    g[2] = 2.0 * G[1] * z[1];
    return 2.0 * g_value(u) + z[1];
}

/* An outer objective that runs the nested gradient inside itself. */
typedef struct outer {
    single s;
    const double *z;
    double fx, g[3];
    ad_status status;
} outer;

static ad_real outer_objective(const ad_real *x, size_t n, void *ctx)
{
    outer *o = ctx;
    (void)n;
    o->status = ad_gradient(nested_objective, &o->s, 3, o->z, &o->fx, o->g);
    return ad_mul(x[0], o->fx);
}

static void test_nested_rules(void **state)
{
    const double z[3] = {0.7, -0.4, 1.2};
    double g[3], gw[3], y[2], J[6], v[3] = {0.5, -1.0, 2.0}, w[2] = {1.0, -0.5}, jv[2], wj[3];
    single s;
    ad_linear *L = NULL;
    (void)state;
    double fw = nested_grad(z, gw);
    for (int r = 0; r < 2; r++) {
        single_init(&s, MAP_G, r ? &rule_nojvp : &rule_full);
        assert_near(gradient_ok(nested_objective, &s, 3, z, g), fw, 1e-15, 0.0);
        for (int i = 0; i < 3; i++)
            assert_near(g[i], gw[i], 1e-14, 1e-15);
        assert_calls(&s.e, 1, 1, 0);

        /* ad_jacobian: n = 3 > m = 2, reverse sweeps. */
        assert_int_equal(ad_jacobian(nested_f, &s, 3, z, 2, y, J), AD_OK);
        assert_near(y[0], fw, 1e-15, 0.0);
        for (int i = 0; i < 3; i++)
            assert_near(J[i], gw[i], 1e-14, 1e-15);
        assert_same(J[3], z[2]);
        assert_same(J[4], 0.0);
        assert_same(J[5], z[0]);

        assert_int_equal(ad_vjp(nested_f, &s, 3, z, 2, w, y, wj), AD_OK);
        for (int i = 0; i < 3; i++)
            assert_near(wj[i], w[0] * gw[i] + w[1] * J[3 + i], 1e-14, 1e-15);

        ad_status st = ad_jvp(nested_f, &s, 3, z, v, 2, y, jv);
        if (r == 0) {
            assert_int_equal(st, AD_OK);
            assert_near(jv[0], gw[0] * v[0] + gw[1] * v[1] + gw[2] * v[2], 1e-14, 1e-15);
            assert_near(jv[1], z[2] * v[0] + z[0] * v[2], 1e-15, 0.0);
        } else {
            assert_int_equal(st, AD_ENOTSUP);
        }

        assert_int_equal(ad_linearize(nested_f, &s, 3, z, 2, y, &L), AD_OK);
        for (int k = 0; k < 3; k++) {
            assert_int_equal(ad_linear_vjp(L, w, wj), AD_OK);
            for (int i = 0; i < 3; i++)
                assert_near(wj[i], w[0] * gw[i] + w[1] * J[3 + i], 1e-14, 1e-15);
        }
        ad_linear_free(L);
        assert_int_equal(s.status, AD_OK);
        assert_ext_clean(&s.e);

        /* All of it one level down, inside another recording. */
        outer o;
        double x = 2.0, gx;
        single_init(&o.s, MAP_G, r ? &rule_nojvp : &rule_full);
        o.z = z;
        assert_near(gradient_ok(outer_objective, &o, 1, &x, &gx), 2.0 * fw, 1e-15, 0.0);
        assert_int_equal(o.status, AD_OK);
        for (int i = 0; i < 3; i++)
            assert_near(o.g[i], gw[i], 1e-14, 1e-15);
        assert_near(gx, fw, 1e-15, 0.0);
        assert_ext_clean(&o.s.e);
    }
}

/* A chain of 50 externals (D), alternating between two ctxs, against the
 * same chain of ordinary operations and finite differences. */
#define CHAIN 50

typedef struct chain {
    ext e[2];
    const ad_rule *rule;
    int by_ops;
    ad_status status;
} chain;

static ad_real chain_objective(const ad_real *z, size_t n, void *ctx)
{
    chain *c = ctx;
    ad_real v[2] = {z[0], z[1]}, y[2];
    (void)n;
    for (int k = 0; k < CHAIN; k++) {
        if (c->by_ops) {
            y[0] = ad_add(v[0], ad_div(ad_sin(v[1]), 10.0));
            y[1] = ad_add(v[1], ad_div(ad_cos(v[0]), 10.0));
        } else {
            apply(c->rule, &c->e[k % 2], v, y, &c->status);
        }
        v[0] = y[0];
        v[1] = ad_mul(y[1], 1.01);  /* an ordinary operation between them */
    }
    return ad_mul(v[0], v[1]);
}

static double chain_d(const double *z)
{
    double v[2] = {z[0], z[1]}, y[2];
    for (int k = 0; k < CHAIN; k++) {
        map_eval(MAP_D, v, y);
        v[0] = y[0];
        v[1] = y[1] * 1.01;
    }
    return v[0] * v[1];
}

static double chain_coordinate(double t, const void *ctx)
{
    const fd_coord *c = ctx;
    double z[2] = {c->z[0], c->z[1]};
    z[c->i] = t;
    return chain_d(z);
}

static void test_many_externals_in_one_tape(void **state)
{
    const double z[2] = {0.3, -0.8};
    double g[2], gops[2];
    (void)state;
    for (int r = 0; r < 2; r++) {
        chain c, ops;
        memset(&c, 0, sizeof c);
        memset(&ops, 0, sizeof ops);
        c.e[0] = ext_make(MAP_D);
        c.e[1] = ext_make(MAP_D);
        ext_at(&c.e[0]);
        ext_at(&c.e[1]);
        c.rule = r ? &rule_nojvp : &rule_full;
        ops.by_ops = 1;
        double fx = gradient_ok(chain_objective, &c, 2, z, g);
        double fo = gradient_ok(chain_objective, &ops, 2, z, gops);
        assert_int_equal(c.status, AD_OK);
        assert_near(fx, fo, 1e-14, 0.0);
        assert_same(fx, chain_d(z));
        for (size_t i = 0; i < 2; i++) {
            fd_coord fc = {{z[0], z[1], 0, 0}, i};
            fd_result fd = fd_derivative(chain_coordinate, &fc, z[i]);
            assert_near(g[i], gops[i], 1e-12, 0.0);
            assert_near(g[i], fd.d, 1e-7, fd.noise + 1e-9);
        }
        for (int k = 0; k < 2; k++) {
            assert_calls(&c.e[k], CHAIN / 2, CHAIN / 2, 0);
            assert_ext_clean(&c.e[k]);
        }
    }
}

/* ======================================================================
 * 6. Threads
 * ====================================================================== */

#define ROUNDS 200

static void *work(void *arg)
{
    worker *w = arg;
    uint64_t rng = 0x7700 + (uint64_t)w->index;
    worker_start(w);
    for (int round = 0; round < ROUNDS; round++) {
        composed k;
        double z[4], g[4], gw[4], fx, scale = 0.0;
        composed_init(&k, round % 2 ? &rule_nojvp : &rule_full);
        fill_uniform(&rng, z, 4, -1.0, 1.0);
        ad_status s = ad_gradient(composed_ad, &k, 4, z, &fx, g);
        if (s != AD_OK || k.status != AD_OK) {
            worker_report(w, "status", round, (double)s, (double)k.status);
            continue;
        }
        composed_grad(z, gw);
        for (int i = 0; i < 4; i++)
            scale = fmax(scale, fabs(gw[i]));
        for (int i = 0; i < 4; i++)
            if (!(fabs(g[i] - gw[i]) <= 1e-12 * fabs(gw[i]) + 1e-13 * scale))
                worker_report(w, "grad", round, g[i], gw[i]);
        ext *all[3] = {&k.a, &k.b, &k.c};
        for (int e = 0; e < 3; e++)
            if (all[e]->bad_size || all[e]->bad_xbar || all[e]->bad_y || all[e]->vjp_calls != 1 ||
                all[e]->primal_calls != 1)
                worker_report(w, "rule check", round, (double)e, 0.0);

        /* Rules that record on this thread's tapes themselves. */
        if (round % 3 == 0) {
            single ns;
            double g3[3], gw3[3], f3;
            single_init(&ns, MAP_G, &rule_full);
            s = ad_gradient(nested_objective, &ns, 3, z, &f3, g3);
            nested_grad(z, gw3);
            if (s != AD_OK || ns.status != AD_OK || ns.e.bad_nested)
                worker_report(w, "nested status", round, (double)s, (double)ns.e.bad_nested);
            for (int i = 0; i < 3; i++)
                if (!(fabs(g3[i] - gw3[i]) <= 1e-14 * fabs(gw3[i]) + 1e-15))
                    worker_report(w, "nested grad", round, g3[i], gw3[i]);
        }

        /* And a Jacobian through a map without a jvp rule, n < m. */
        single one;
        double x1 = z[0], y[3], J[3], yw[3], Jw[3];
        single_init(&one, MAP_C, &rule_nojvp);
        s = ad_jacobian(single_f, &one, 1, &x1, 3, y, J);
        single_want(MAP_C, &x1, yw, Jw);
        if (s != AD_OK)
            worker_report(w, "jacobian status", round, (double)s, 0.0);
        for (int j = 0; j < 3; j++)
            if (!(fabs(J[j] - Jw[j]) <= 1e-13 * fabs(Jw[j]) + 1e-15))
                worker_report(w, "jacobian", round, J[j], Jw[j]);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    run_workers(work);
    assert_int_equal(atomic_load(&bad_ctx), 0);
}

/* ======================================================================
 * 7. Allocation failure
 * ====================================================================== */

enum alloc_api { ALLOC_GRADIENT, ALLOC_JACOBIAN, ALLOC_LINEARIZE, ALLOC_APIS };

static void test_alloc_failure(void **state)
{
    const double z[4] = {0.3, -0.7, 0.9, 0.2};
    double gw[4];
    (void)state;
    double fw = composed_grad(z, gw);
    for (int api = 0; api < ALLOC_APIS; api++)
        for (int fresh = 0; fresh < 2; fresh++) {
            int successes = 0;
            assert_int_equal(ad_release(), AD_OK);
            for (long i = 0; successes < 3; i++) {
                composed k;
                single s;
                ad_linear *L = NULL;
                double fx = 7.0, g[4] = {7, 7, 7, 7}, y[2] = {7, 7}, J[6];
                composed_init(&k, &rule_full);
                single_init(&s, MAP_A, &rule_full);
                if (fresh)
                    assert_int_equal(ad_release(), AD_OK);
                ad_test_fail_alloc_after(i);
                ad_status st;
                switch (api) {
                case ALLOC_GRADIENT: st = ad_gradient(composed_ad, &k, 4, z, &fx, g); break;
                case ALLOC_JACOBIAN: st = ad_jacobian(single_f, &s, 3, z, 2, y, J); break;
                default: st = ad_linearize(single_f, &s, 3, z, 2, y, &L); break;
                }
                ad_test_fail_alloc_after(-1);
                if (st == AD_OK) {
                    successes++;
                    if (api == ALLOC_GRADIENT) {
                        check_gradient_vs_hand(g, gw, 4, fx, fw);
                    } else {
                        double yw[2], Jw[6];
                        single_want(MAP_A, z, yw, Jw);
                        if (api == ALLOC_LINEARIZE) {
                            double w[2] = {1.0, 0.0};
                            assert_int_equal(ad_linear_vjp(L, w, J), AD_OK);
                            assert_int_equal(ad_linear_jvp(L, (double[3]){1, 0, 0}, J + 3), AD_OK);
                            check_matrix(J, Jw, 3, 1e-13);
                            assert_near(J[3], Jw[0], 1e-13, 0.0);
                            assert_near(J[4], Jw[3], 1e-13, 0.0);
                            ad_linear_free(L);
                        } else {
                            check_matrix(J, Jw, 6, 1e-13);
                        }
                    }
                    continue;
                }
                assert_alloc_failure(i, st, successes);
                if (api == ALLOC_GRADIENT) {
                    assert_all_nan(fx, g, 4);
                } else {
                    assert_nan(y[0]);
                    assert_nan(y[1]);
                }
                if (api == ALLOC_LINEARIZE)
                    assert_null(L);
                assert_true(i < 200);
            }
        }
}

/* ad_external itself when memory runs out inside a recording: AD_ENOMEM,
 * y NaN, and the recording reports it.  The failure point is swept from
 * the first allocation of the recording on. */
typedef struct starved {
    single s;
    long after;
    ad_status got;
    double y0;
} starved;

static ad_real starved_objective(const ad_real *z, size_t n, void *ctx)
{
    starved *c = ctx;
    ad_real u[3] = {z[0], z[1], z[2]}, a[2];
    (void)n;
    ad_test_fail_alloc_after(c->after);
    c->got = ad_external(c->s.rule, &c->s.e, 3, u, 2, a);
    ad_test_fail_alloc_after(-1);
    c->y0 = a[0].v;
    return ad_add(a[0], a[1]);
}

static void test_alloc_failure_in_external(void **state)
{
    const double z[3] = {0.5, 0.25, -1.0};
    double JA[6];
    int failures = 0, successes = 0;
    (void)state;
    map_jacobian(MAP_A, z, JA);
    for (long i = 0; successes < 3; i++) {
        starved c;
        double fx, g[3];
        single_init(&c.s, MAP_A, &rule_full);
        c.after = i;
        assert_int_equal(ad_release(), AD_OK);
        ad_status st = ad_gradient(starved_objective, &c, 3, z, &fx, g);
        if (st == AD_OK) {
            successes++;
            assert_int_equal(c.got, AD_OK);
            for (int k = 0; k < 3; k++)
                assert_near(g[k], JA[k] + JA[3 + k], 1e-15, 1e-15);
            continue;
        }
        failures++;
        assert_alloc_failure(i, st, successes);
        assert_int_equal(c.got, AD_ENOMEM);
        assert_nan(c.y0);
        assert_all_nan(fx, g, 3);
        assert_true(i < 100);
    }
    if (getenv("DUALREV_TEST_VERBOSE"))
        fprintf(stderr, "# ad_external: %d allocation failure points\n", failures);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_composed_gradient),
        cmocka_unit_test(test_jacobians_through_externals),
        cmocka_unit_test(test_linearize_reuse),
        cmocka_unit_test(test_no_jvp_rule),
        cmocka_unit_test(test_output_below_block_top),
        cmocka_unit_test(test_sparse_across_external),
        cmocka_unit_test(test_constant_inputs),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_outside_recording),
        cmocka_unit_test(test_rule_is_copied),
        cmocka_unit_test(test_tape_limit),
        cmocka_unit_test(test_empty_arrays),
        cmocka_unit_test(test_nested_rules),
        cmocka_unit_test(test_many_externals_in_one_tape),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_alloc_failure),
        cmocka_unit_test(test_alloc_failure_in_external),
    };
    return cmocka_run_group_tests_name("external functions", tests, NULL, NULL);
}
