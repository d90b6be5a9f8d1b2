/* Shared by test_mat_mul.c and test_mat_map.c: a computation written twice,
 * with the recorded-matrix operations (ad_mat_mul, ad_mat_map) and as the
 * scalar code a user would write (ad_mul / ad_add loops, ad_tanh, ...), and
 * every driver run on both.
 *
 * Oracles: the scalar-code recording (values bitwise where matrix.h promises
 * it: products, and the maps named after an elementary operation; the
 * derivatives to a relative 1e-11, as the sums are grouped differently),
 * central differences (check.h) of the scalar code's values, and the API's
 * identities (J^T w, J v, lanes against single directions). */
#ifndef DUALREV_TESTS_MAT_OPS_H
#define DUALREV_TESTS_MAT_OPS_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

enum { W_CONST = 0, W_REC = 1, W_REC_CONST = 2 };  /* an operand: wrapped, recorded, recorded constants */
enum { B_NONE = 0, B_ACTIVE = 1, B_DOUBLE = 2, B_CONST = 3 };
enum { T_NONE = 0, T_MUL = 1, T_VEC = 2, T_SQUARE = 3, T_MAP2 = 4 };

typedef struct mcase {
    size_t m, k, n;
    int a_mode, b_mode, bias_mode;
    int map_op;  /* -1: none, AD_MAP_COUNT: the user function (a cubic) */
    int then;    /* T_MUL: y = C D, D n x 2 from z; T_VEC: y = C x; T_SQUARE: C = A A; T_MAP2: y = sin(C) */
    int scalar;  /* the scalar-code version */
    int status;  /* the block version's last status (ad_mat_* calls) */
    double ca[64], cb[64], cbias[8];
} mcase;

static double cubic_f(double x, void *ctx) { (void)ctx; return x * x * x - x; }
static double cubic_df(double x, void *ctx) { (void)ctx; return 3.0 * x * x - 1.0; }
static double cubic_d2f(double x, void *ctx) { (void)ctx; return 6.0 * x; }
static const ad_map_fn cubic = {cubic_f, cubic_df, cubic_d2f};
static const ad_map_fn cubic_first = {cubic_f, cubic_df, NULL};

static size_t mcase_inputs(const mcase *c)
{
    size_t nz = 0;
    if (c->a_mode == W_REC)
        nz += c->m * c->k;
    if (c->b_mode == W_REC && c->then != T_SQUARE)
        nz += c->k * c->n;
    if (c->bias_mode == B_ACTIVE)
        nz += c->m;
    if (c->then == T_MUL)
        nz += c->n * 2;
    if (c->then == T_VEC)
        nz += c->n;
    return nz;
}

static size_t mcase_outputs(const mcase *c)
{
    return c->then == T_MUL ? c->m * 2 : c->then == T_VEC ? c->m : c->m * c->n;
}

static ad_real scalar_map(int op, ad_real x)
{
    switch (op) {
    case AD_MAP_TANH: return ad_tanh(x);
    case AD_MAP_EXP: return ad_exp(x);
    case AD_MAP_LOG: return ad_log(x);
    case AD_MAP_SQRT: return ad_sqrt(x);
    case AD_MAP_SIN: return ad_sin(x);
    case AD_MAP_COS: return ad_cos(x);
    case AD_MAP_LOGISTIC: return ad_div(1.0, ad_add(1.0, ad_exp(ad_neg(x))));
    case AD_MAP_RELU: return ad_fmax(x, 0.0);
    case AD_MAP_SQUARE: return ad_mul(x, x);
    default: return ad_sub(ad_mul(ad_mul(x, x), x), x);
    }
}

/* Sum_l a(i, l) b(l, j) from 0, then + bias: the scalar loop. */
static ad_real scalar_entry(const ad_real *A, const ad_real *B, const ad_real *bias, size_t k,
                            size_t n, size_t i, size_t j)
{
    ad_real s = ad_const(0.0);
    for (size_t l = 0; l < k; l++)
        s = ad_add(s, ad_mul(A[i * k + l], B[l * n + j]));
    return bias ? ad_add(s, bias[i]) : s;
}

/* The computation on z; y gets mcase_outputs(c) values. */
static void mcase_f(const ad_real *z, size_t nz, ad_real *y, size_t my, void *ctx)
{
    mcase *c = ctx;
    size_t m = c->m, k = c->k, n = c->n, p = 0;
    (void)nz;
    (void)my;
    int square = c->then == T_SQUARE;
    ad_real *A = calloc(m * k + 1, sizeof *A), *B = calloc(k * n + 1, sizeof *B),
            *bias = calloc(m + 1, sizeof *bias), *C = calloc(m * n + 1, sizeof *C),
            *E = calloc(m * n + 1, sizeof *E);
    for (size_t q = 0; q < m * k; q++)
        A[q] = c->a_mode == W_REC ? z[p++] : ad_const(c->ca[q]);
    for (size_t q = 0; q < k * n; q++)
        B[q] = square ? A[q] : c->b_mode == W_REC ? z[p++] : ad_const(c->cb[q]);
    for (size_t i = 0; i < m; i++)
        bias[i] = c->bias_mode == B_ACTIVE ? z[p++] : ad_const(c->cbias[i]);
    const ad_real *D = z + p;  /* T_MUL: n x 2; T_VEC: n */
    ad_real *bias_r = c->bias_mode == B_ACTIVE || c->bias_mode == B_CONST ? bias : NULL;
    if (c->scalar) {
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++) {
                ad_real v = scalar_entry(A, B, bias_r ? bias_r : c->bias_mode == B_DOUBLE ? bias : NULL,
                                         k, n, i, j);
                C[i * n + j] = c->map_op >= 0 ? scalar_map(c->map_op, v) : v;
            }
        for (size_t i = 0; i < m; i++) {
            if (c->then == T_MUL)
                for (size_t j2 = 0; j2 < 2; j2++) {
                    ad_real s = ad_const(0.0);
                    for (size_t l = 0; l < n; l++)
                        s = ad_add(s, ad_mul(C[i * n + l], D[l * 2 + j2]));
                    y[i * 2 + j2] = s;
                }
            else if (c->then == T_VEC) {
                ad_real s = ad_const(0.0);
                for (size_t l = 0; l < n; l++)
                    s = ad_add(s, ad_mul(C[i * n + l], D[l]));
                y[i] = s;
            } else
                for (size_t j = 0; j < n; j++)
                    y[i * n + j] = c->then == T_MAP2 ? ad_sin(C[i * n + j]) : C[i * n + j];
        }
    } else {
        ad_mat MA, MB, MC, ME, MD;
        ad_status s = AD_OK, t;
        if (c->a_mode == W_CONST)
            t = ad_mat_wrap(m, k, c->ca, &MA);
        else
            t = ad_mat_record(m, k, A, &MA);
        s = s == AD_OK ? t : s;
        if (square)
            MB = MA;
        else if (c->b_mode == W_CONST)
            t = ad_mat_wrap(k, n, c->cb, &MB);
        else
            t = ad_mat_record(k, n, B, &MB);
        s = s == AD_OK ? t : s;
        if (c->bias_mode == B_DOUBLE)
            t = ad_mat_mul(&MA, &MB, c->cbias, C, &MC);
        else
            t = ad_mat_mul(&MA, &MB, bias_r, C, &MC);
        s = s == AD_OK ? t : s;
        const ad_mat *R = &MC;
        ad_real *Rv = C;
        if (c->map_op >= 0) {
            if (c->map_op == AD_MAP_COUNT)
                t = ad_mat_map_fn(&cubic, NULL, &MC, E, &ME);
            else
                t = ad_mat_map((ad_map_op)c->map_op, &MC, E, &ME);
            s = s == AD_OK ? t : s;
            R = &ME;
            Rv = E;
        }
        if (c->then == T_MUL) {
            ad_real *Y = calloc(m * 2 + 1, sizeof *Y);
            t = ad_mat_record(n, 2, D, &MD);
            s = s == AD_OK ? t : s;
            ad_mat MY;
            t = ad_mat_mul(R, &MD, (const ad_real *)NULL, Y, &MY);
            s = s == AD_OK ? t : s;
            memcpy(y, Y, m * 2 * sizeof *y);
            free(Y);
        } else if (c->then == T_VEC) {
            ad_mat_vec(R, D, y);
        } else if (c->then == T_MAP2) {
            ad_real *Y = calloc(m * n + 1, sizeof *Y);
            ad_mat MY;
            t = ad_mat_map(AD_MAP_SIN, R, Y, &MY);
            s = s == AD_OK ? t : s;
            memcpy(y, Y, m * n * sizeof *y);
            free(Y);
        } else
            memcpy(y, Rv, m * n * sizeof *y);
        c->status = (int)s;
    }
    free(A), free(B), free(bias), free(C), free(E);
}

/* The scalar objective over the outputs: sum_j (w_j y_j + y_j^2 / 2), w_j = 1 + j / 8. */
typedef struct mobj {
    mcase *c;
} mobj;

static ad_real mcase_obj(const ad_real *z, size_t nz, void *ctx)
{
    mcase *c = ctx;
    size_t my = mcase_outputs(c);
    ad_real *y = calloc(my + 1, sizeof *y), s = ad_const(0.0);
    mcase_f(z, nz, y, my, c);
    for (size_t j = 0; j < my; j++)
        s = ad_add(s, ad_add(ad_mul(1.0 + (double)j / 8, y[j]), ad_mul(0.5, ad_mul(y[j], y[j]))));
    free(y);
    return s;
}

static double scale_of(const double *v, size_t n)
{
    double s = 0.0;
    for (size_t q = 0; q < n; q++)
        if (isfinite(v[q]) && fabs(v[q]) > s)
            s = fabs(v[q]);
    return s > 0.0 ? s : 1.0;
}

/* got and want agree to rtol of the largest entry, NaN with NaN, Inf with Inf. */
static void check_vec_rel(const double *got, const double *want, size_t n, double rtol,
                          const char *what, const char *file, int line)
{
    double sc = scale_of(want, n);
    for (size_t q = 0; q < n; q++) {
        int ok = isnan(want[q]) ? isnan(got[q])
                 : isinf(want[q]) ? got[q] == want[q]
                 : fabs(got[q] - want[q]) <= rtol * sc;
        if (!ok) {
            print_error("%s[%zu]: got %.17g, want %.17g\n", what, q, got[q], want[q]);
            _fail(file, line);
        }
    }
}
#define assert_vec_rel(got, want, n, rtol) check_vec_rel((got), (want), (n), (rtol), #got, __FILE__, __LINE__)

static void check_vec_bitwise(const double *got, const double *want, size_t n, const char *what,
                              const char *file, int line)
{
    for (size_t q = 0; q < n; q++)
        if (!(same_double(got[q], want[q]) || (isnan(got[q]) && isnan(want[q])))) {
            print_error("%s[%zu]: got %a, want %a\n", what, q, got[q], want[q]);
            _fail(file, line);
        }
}
#define assert_vec_bitwise(got, want, n) check_vec_bitwise((got), (want), (n), #got, __FILE__, __LINE__)

/* Central differences of the scalar code's values (ad_evaluate_function). */
typedef struct fd_ctx {
    mcase *c;
    double *z;
    size_t nz, i, j;
} fd_ctx;

static double fd_component(double x, const void *vctx)
{
    const fd_ctx *f = vctx;
    size_t my = mcase_outputs(f->c);
    double *z = malloc((f->nz + 1) * sizeof *z), *y = malloc((my + 1) * sizeof *y), v;
    memcpy(z, f->z, f->nz * sizeof *z);
    z[f->i] = x;
    if (ad_evaluate_function(mcase_f, f->c, f->nz, z, my, y) != AD_OK)
        y[f->j] = NAN;
    v = y[f->j];
    free(z), free(y);
    return v;
}

/* Every driver on the block version against the scalar version.  bitwise:
 * values compared bit for bit; finite: the point is tame (central
 * differences, Hessian symmetry). */
static void mcase_check_at(mcase *c, double *z, int bitwise, int finite, const char *file, int line)
{
    size_t nz = mcase_inputs(c), my = mcase_outputs(c), N = nz ? nz : 1, M = my ? my : 1;
    double *y = calloc(M, sizeof *y), *ys = calloc(M, sizeof *ys), *J = calloc(M * N, sizeof *J),
           *Js = calloc(M * N, sizeof *Js), *w = calloc(M * 5, sizeof *w),
           *v = calloc(N * 5, sizeof *v), *out = calloc(M * N * 5 + N * 5 + N * N, sizeof *out),
           *want = calloc(M * N * 5 + N * 5 + N * N, sizeof *want), *H = calloc(N * N, sizeof *H),
           *Hs = calloc(N * N, sizeof *Hs), *g = calloc(N, sizeof *g), *gs = calloc(N, sizeof *gs);
    double fx, fxs;
    uint64_t rng = 0x5eed + nz;
    for (size_t q = 0; q < M * 5; q++)
        w[q] = rng_uniform(&rng, -1.0, 1.0);
    for (size_t q = 0; q < N * 5; q++)
        v[q] = rng_uniform(&rng, -1.0, 1.0);
    mcase cs = *c;
    cs.scalar = 1;
    c->scalar = 0;
    const double tol = 1e-11;

    /* Jacobian both ways round (forward when nz <= my) */
    if (ad_jacobian(mcase_f, c, nz, z, my, y, J) != AD_OK || c->status != AD_OK)
        _fail(file, line);
    if (ad_jacobian(mcase_f, &cs, nz, z, my, ys, Js) != AD_OK)
        _fail(file, line);
    if (bitwise)
        check_vec_bitwise(y, ys, my, "y", file, line);
    else
        check_vec_rel(y, ys, my, 1e-14, "y", file, line);
    check_vec_rel(J, Js, my * nz, tol, "J", file, line);

    /* central differences */
    for (size_t i = 0; finite && i < nz; i++)
        for (size_t j = 0; j < my; j++) {
            fd_ctx f = {&cs, z, nz, i, j};
            fd_result r = fd_derivative(fd_component, &f, z[i]);
            if (fabs(J[j * nz + i] - r.d) > 1e-6 * (1.0 + fabs(r.d)) + 10 * r.noise) {
                print_error("J[%zu][%zu] = %.17g, central difference %.17g\n", j, i, J[j * nz + i],
                            r.d);
                _fail(file, line);
            }
        }

    /* vjp, jvp against J; lanes (ad_linear_vjps, 5 directions) against them */
    if (ad_vjp(mcase_f, c, nz, z, my, w, y, out) != AD_OK)
        _fail(file, line);
    for (size_t i = 0; i < nz; i++) {
        want[i] = 0.0;
        for (size_t j = 0; j < my; j++)
            want[i] += w[j] * Js[j * nz + i];
    }
    check_vec_rel(out, want, nz, tol, "vjp", file, line);
    if (ad_jvp(mcase_f, c, nz, z, v, my, y, out) != AD_OK)
        _fail(file, line);
    for (size_t j = 0; j < my; j++) {
        want[j] = 0.0;
        for (size_t i = 0; i < nz; i++)
            want[j] += Js[j * nz + i] * v[i];
    }
    check_vec_rel(out, want, my, tol, "jvp", file, line);
    ad_linear *L = NULL;
    if (ad_linearize(mcase_f, c, nz, z, my, y, &L) != AD_OK)
        _fail(file, line);
    if (ad_linear_vjps(L, 5, w, out) != AD_OK)
        _fail(file, line);
    for (size_t d = 0; d < 5; d++)
        for (size_t i = 0; i < nz; i++) {
            want[d * nz + i] = 0.0;
            for (size_t j = 0; j < my; j++)
                want[d * nz + i] += w[d * my + j] * Js[j * nz + i];
        }
    check_vec_rel(out, want, 5 * nz, tol, "vjps", file, line);
    if (ad_linear_jvps(L, 5, v, out) != AD_OK)
        _fail(file, line);
    for (size_t d = 0; d < 5; d++)
        for (size_t j = 0; j < my; j++) {
            want[d * my + j] = 0.0;
            for (size_t i = 0; i < nz; i++)
                want[d * my + j] += Js[j * nz + i] * v[d * nz + i];
        }
    check_vec_rel(out, want, 5 * my, tol, "jvps", file, line);
    ad_linear_free(L);

    /* sparse Jacobian: every entry of J in the structure, values J's */
    ad_csr S;
    memset(&S, 0, sizeof S);
    if (ad_sparse_jacobian(mcase_f, c, nz, z, my, y, &S) != AD_OK)
        _fail(file, line);
    memset(out, 0, my * nz * sizeof *out);
    for (size_t j = 0; j < my; j++)
        for (size_t e = S.row_ptr[j]; e < S.row_ptr[j + 1]; e++)
            out[j * nz + S.col[e]] = S.val[e];
    check_vec_rel(out, Js, my * nz, tol, "sparse J", file, line);
    for (size_t q = 0; finite && q < my * nz; q++)
        if (Js[q] != 0.0 && out[q] == 0.0) {
            print_error("sparse J misses entry %zu\n", q);
            _fail(file, line);
        }
    ad_csr_free(&S);

    /* the objective: gradient, H v, H, sparse H */
    if (ad_gradient(mcase_obj, c, nz, z, &fx, g) != AD_OK || ad_gradient(mcase_obj, &cs, nz, z, &fxs, gs) != AD_OK)
        _fail(file, line);
    if (bitwise)
        check_vec_bitwise(&fx, &fxs, 1, "fx", file, line);
    check_vec_rel(g, gs, nz, tol, "gradient", file, line);
    int second = c->map_op != AD_MAP_COUNT + 1;
    ad_status hs = ad_hessian(mcase_obj, c, nz, z, &fx, g, H);
    if (hs != AD_OK || ad_hessian(mcase_obj, &cs, nz, z, &fxs, gs, Hs) != AD_OK)
        _fail(file, line);
    (void)second;
    check_vec_rel(H, Hs, nz * nz, 1e-10, "H", file, line);
    if (ad_hvp(mcase_obj, c, nz, z, v, &fx, g, out) != AD_OK)
        _fail(file, line);
    for (size_t i = 0; i < nz; i++) {
        want[i] = 0.0;
        for (size_t l = 0; l < nz; l++)
            want[i] += Hs[i * nz + l] * v[l];
    }
    check_vec_rel(out, want, nz, 1e-10, "hvp", file, line);
    ad_csr SH;
    memset(&SH, 0, sizeof SH);
    if (ad_sparse_hessian(mcase_obj, c, nz, z, &fx, g, &SH) != AD_OK)
        _fail(file, line);
    memset(out, 0, nz * nz * sizeof *out);
    for (size_t i = 0; i < nz; i++)
        for (size_t e = SH.row_ptr[i]; e < SH.row_ptr[i + 1]; e++) {
            out[i * nz + SH.col[e]] = SH.val[e];
            out[SH.col[e] * nz + i] = SH.val[e];
        }
    check_vec_rel(out, Hs, nz * nz, 1e-10, "sparse H", file, line);
    for (size_t q = 0; finite && q < nz * nz; q++)
        if (Hs[q] != 0.0 && out[q] == 0.0) {
            print_error("sparse H misses entry %zu\n", q);
            _fail(file, line);
        }
    ad_csr_free(&SH);
    free(y), free(ys), free(J), free(Js), free(w), free(v), free(out), free(want), free(H), free(Hs),
        free(g), free(gs);
}
#define mcase_check(c, z, bitwise, finite) mcase_check_at((c), (z), (bitwise), (finite), __FILE__, __LINE__)

/* Fills the case's constants and a point z in [lo, hi]. */
static void mcase_fill(mcase *c, uint64_t *rng, double *z, double lo, double hi)
{
    for (size_t q = 0; q < 64; q++) {
        c->ca[q] = rng_uniform(rng, lo, hi);
        c->cb[q] = rng_uniform(rng, lo, hi);
    }
    for (size_t q = 0; q < 8; q++)
        c->cbias[q] = rng_uniform(rng, lo, hi);
    for (size_t q = 0; q < mcase_inputs(c); q++)
        z[q] = rng_uniform(rng, lo, hi);
}

#endif
