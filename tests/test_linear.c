/* Vector-valued functions: ad_jvp, ad_vjp, ad_jacobian, ad_linearize and the
 * linear maps it returns (and ad_sparse_jacobian where random programs and
 * threads exercise it; test_sparse.c has its own tests).
 *
 * Oracles: Jacobians in closed form (a family of functions, "mixed", over
 * the library's operations); for random programs over every operation of
 * ops_list.h, the transposition identity <w, J v> = <J^T w, v> between the
 * forward and the reverse sweep, central finite differences of the same
 * program interpreted on plain doubles, and the program's dependency sets
 * as the sparse structure.  Values y are compared exactly with the plain
 * evaluation: dualrev computes them with the same libm calls in the same
 * order (the build does not contract a*b+c into fma: ISO C mode, baseline
 * x86-64). */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ops_list.h"
#include "ops_table.h"
#include "../lib/drivers/testing.h"

/* ======================================================================
 * "mixed": a family of functions R^n -> R^m with Jacobians in closed form.
 * Output j is of kind j % 13; a, b, c are input indices picked from j.
 * Kinds 0 and 1 read every input (an n-ary dot and an n-ary sum, computed
 * once and shared by every row of that kind); kind 3 is a constant, kind 4
 * an input, kind 5 the same ad_real as the output before it; kind 6 an
 * fmin tie; kind 12 reaches x_a through a partial that is 0.
 * ====================================================================== */

#define MIX_KINDS 13
#define MIX_MAXN 512

static size_t mix_a(size_t j, size_t n) { return j % n; }
static size_t mix_b(size_t j, size_t n) { return (7 * j + 1) % n; }
static size_t mix_c(size_t j, size_t n) { return (3 * j + 2) % n; }

static void mixed(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    ad_real s[MIX_MAXN] = {{0}}, e[MIX_MAXN];  /* s: gcc cannot see n <= MIX_MAXN */
    (void)ctx;
    for (size_t i = 0; i < n; i++) {
        s[i] = ad_sin(x[i]);
        e[i] = ad_exp(x[i]);
    }
    ad_real sx = ad_dot(n, s, x), lse = ad_log(ad_sum(n, e));
    for (size_t j = 0; j < m; j++) {
        size_t a = mix_a(j, n), b = mix_b(j, n), c = mix_c(j, n);
        switch (j % MIX_KINDS) {
        case 0: y[j] = ad_mul(sx, (double)(j / MIX_KINDS + 1)); break;
        case 1: y[j] = ad_add(lse, (double)j); break;
        case 2: y[j] = ad_pow(x[a], x[b]); break;
        case 3: y[j] = ad_add(ad_const(3.0), 0.5); break;
        case 4: y[j] = x[a]; break;
        case 5: y[j] = y[j - 1]; break;
        case 6: {
            /* x_b - value(x_b) + value(x_a): equal to x_a, a tie for fmin. */
            ad_real t = ad_add(ad_sub(x[b], ad_value(x[b])), ad_value(x[a]));
            y[j] = ad_fmin(x[a], t);
            break;
        }
        case 7: y[j] = ad_add(ad_atan2(x[a], x[b]), ad_hypot(x[a], x[c])); break;
        case 8: y[j] = ad_div(ad_expm1(x[a]), ad_add(1.0, ad_mul(x[b], x[b]))); break;
        case 9:
            y[j] = ad_add(ad_add(ad_mul(ad_log1p(x[a]), ad_tanh(x[b])), ad_sqrt(x[c])), ad_erf(x[a]));
            break;
        case 10: {
            ad_real u[4] = {x[a], x[a], x[b], ad_const(2.0)}, v[4] = {x[a], x[b], x[b], x[c]};
            y[j] = ad_dot(4, u, v);
            break;
        }
        case 11: {
            ad_real u[4] = {x[a], ad_const(1.5), x[b], x[a]};
            y[j] = ad_sum(4, u);
            break;
        }
        default: y[j] = ad_add(ad_mul(x[a], 0.0), ad_pow(x[b], 2.0)); break;
        }
    }
}

/* y and the m x n Jacobian of mixed, in closed form (x > 0). */
static void mixed_want(size_t n, size_t m, const double *x, double *y, double *J)
{
    double sx = 0.0, se = 0.0;
    for (size_t i = 0; i < n; i++) {
        sx += sin(x[i]) * x[i];
        se += exp(x[i]);
    }
    memset(J, 0, n * m * sizeof *J);
    for (size_t j = 0; j < m; j++) {
        size_t a = mix_a(j, n), b = mix_b(j, n), c = mix_c(j, n);
        double *row = J + j * n, xa = x[a], xb = x[b], xc = x[c];
        switch (j % MIX_KINDS) {
        case 0: {
            double r = (double)(j / MIX_KINDS + 1);
            y[j] = r * sx;
            for (size_t i = 0; i < n; i++)
                row[i] = r * (x[i] * cos(x[i]) + sin(x[i]));
            break;
        }
        case 1:
            y[j] = log(se) + (double)j;
            for (size_t i = 0; i < n; i++)
                row[i] = exp(x[i]) / se;
            break;
        case 2:
            y[j] = pow(xa, xb);
            row[a] += xb * pow(xa, xb - 1.0);
            row[b] += log(xa) * pow(xa, xb);
            break;
        case 3: y[j] = 3.5; break;
        case 4: y[j] = xa; row[a] = 1.0; break;
        case 5:
            y[j] = y[j - 1];
            memcpy(row, row - n, n * sizeof *row);
            break;
        case 6:
            y[j] = xa;
            row[a] += 0.5;
            row[b] += 0.5;
            break;
        case 7: {
            double r2 = xa * xa + xb * xb, h = hypot(xa, xc);
            y[j] = atan2(xa, xb) + h;
            row[a] += xb / r2 + xa / h;
            row[b] -= xa / r2;
            row[c] += xc / h;
            break;
        }
        case 8: {
            double d = 1.0 + xb * xb;
            y[j] = expm1(xa) / d;
            row[a] += exp(xa) / d;
            row[b] -= expm1(xa) * 2.0 * xb / (d * d);
            break;
        }
        case 9:
            y[j] = log1p(xa) * tanh(xb) + sqrt(xc) + erf(xa);
            row[a] += tanh(xb) / (1.0 + xa) + 1.1283791670955126 /* 2 / sqrt(pi) */ * exp(-xa * xa);
            row[b] += log1p(xa) / (cosh(xb) * cosh(xb));
            row[c] += 0.5 / sqrt(xc);
            break;
        case 10:
            y[j] = xa * xa + xa * xb + xb * xb + 2.0 * xc;
            row[a] += 2.0 * xa + xb;
            row[b] += xa + 2.0 * xb;
            row[c] += 2.0;
            break;
        case 11:
            y[j] = 2.0 * xa + xb + 1.5;
            row[a] += 2.0;
            row[b] += 1.0;
            break;
        default:
            y[j] = xa * 0.0 + xb * xb;
            row[b] += 2.0 * xb;
            break;
        }
    }
}

/* The inputs row j of mixed reaches: flags[i] = 1 for each. */
static void mixed_structure(size_t j, size_t n, unsigned char *flags)
{
    memset(flags, 0, n);
    if (j % MIX_KINDS == 5)
        j--;
    size_t a = mix_a(j, n), b = mix_b(j, n), c = mix_c(j, n);
    switch (j % MIX_KINDS) {
    case 0:
    case 1: memset(flags, 1, n); break;
    case 3: break;
    case 4: flags[a] = 1; break;
    case 7:
    case 9:
    case 10: flags[a] = flags[b] = flags[c] = 1; break;
    default: flags[a] = flags[b] = 1; break;
    }
}

/* ======================================================================
 * Random programs over every operation.
 *
 * A program has n inputs and a list of instructions; each instruction makes
 * one new value from earlier ones: an elementary operation of ops_list.h, an
 * n-ary ad_sum or ad_dot over a few values (constants and repeats allowed),
 * or a constant.  An argument is used as is when it lies inside the
 * operation's sampling region (ops_list.h) and keep() accepts it, or else
 * mapped into the region by mid + half sin(u).  The generator evaluates the
 * program at the sample point as it goes, so every argument it keeps is in
 * its operation's domain there.  "Gentle" programs use regions clipped to
 * [-1.5, 1.5], where derivatives stay moderate, for the finite differences.
 * ====================================================================== */

enum { P_CONST, P_UNARY, P_BINARY, P_SUM, P_DOT };
#define P_MAXK 5

typedef struct parg {
    size_t src;        /* the value it reads */
    int mapped;        /* 1: mid + half sin(value) */
    double mid, half;
} parg;

typedef struct insn {
    int kind, op;
    size_t k;          /* terms of a sum or dot */
    size_t arg;        /* its arguments: args[arg ..] */
    double c;          /* P_CONST */
} insn;

typedef struct program {
    size_t n, m, len;
    insn *code;
    parg *args;
    size_t nargs, args_cap;
    size_t *out;       /* the values that are the outputs */
    uint64_t *mask;    /* per value: the inputs it depends on (n <= 64) */
    double *dval;      /* scratch: values on doubles */
    ad_real *rval;     /* scratch: values on ad_real */
} program;

static double arg_d(const parg *a, const double *val)
{
    double u = val[a->src];
    if (!a->mapped)
        return u;
    double s = sin(u);  /* one operation per statement, as ad_real does it */
    double q = a->half * s;
    return a->mid + q;
}

static ad_real arg_r(const parg *a, const ad_real *val)
{
    ad_real u = val[a->src];
    return a->mapped ? ad_add(a->mid, ad_mul(a->half, ad_sin(u))) : u;
}

static double eval_d(const program *p, const insn *I, const double *val)
{
    const parg *a = p->args + I->arg;
    double s = 0.0;
    switch (I->kind) {
    case P_CONST: return I->c;
    case P_UNARY: return unary_op_at((size_t)I->op)->ref(arg_d(a, val));
    case P_BINARY: return binary_op_at((size_t)I->op)->ref(arg_d(a, val), arg_d(a + 1, val));
    case P_SUM:
        for (size_t i = 0; i < I->k; i++)
            s += arg_d(a + i, val);
        return s;
    default:
        for (size_t i = 0; i < I->k; i++) {
            double t = arg_d(a + i, val) * arg_d(a + I->k + i, val);
            s += t;
        }
        return s;
    }
}

static ad_real eval_r(const program *p, const insn *I, const ad_real *val)
{
    const parg *a = p->args + I->arg;
    ad_real t[2 * P_MAXK];
    switch (I->kind) {
    case P_CONST: return ad_const(I->c);
    case P_UNARY: return unary_op_at((size_t)I->op)->ad(arg_r(a, val));
    case P_BINARY: {
        const binary_op *op = binary_op_at((size_t)I->op);
        ad_real u = arg_r(a, val), w = arg_r(a + 1, val);
        /* A constant argument goes through the mixed forms. */
        if (!u.id && w.id)
            return op->dr(u.v, w);
        if (u.id && !w.id)
            return op->rd(u, w.v);
        return op->rr(u, w);
    }
    case P_SUM:
        for (size_t i = 0; i < I->k; i++)
            t[i] = arg_r(a + i, val);
        return ad_sum(I->k, t);
    default:
        for (size_t i = 0; i < 2 * I->k; i++)
            t[i] = arg_r(a + i, val);
        return ad_dot(I->k, t, t + I->k);
    }
}

/* The program as an ad_function. */
static void program_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const program *p = ctx;
    ad_real *val = p->rval;
    for (size_t i = 0; i < n; i++)
        val[i] = x[i];
    for (size_t s = 0; s < p->len; s++)
        val[n + s] = eval_r(p, &p->code[s], val);
    for (size_t j = 0; j < m; j++)
        y[j] = val[p->out[j]];
}

/* The same program on doubles. */
static void program_d(const program *p, const double *x, double *y)
{
    double *val = p->dval;
    memcpy(val, x, p->n * sizeof *x);
    for (size_t s = 0; s < p->len; s++)
        val[p->n + s] = eval_d(p, &p->code[s], val);
    for (size_t j = 0; j < p->m; j++)
        y[j] = val[p->out[j]];
}

static size_t pick_value(uint64_t *rng, size_t count)
{
    if (count > 8 && rng_next(rng) % 2)  /* recent values: longer chains */
        return count - 1 - rng_next(rng) % 8;
    return rng_next(rng) % count;
}

static parg pick_arg(uint64_t *rng, const double *val, size_t count, double lo, double hi, int gentle)
{
    parg a;
    if (gentle) {
        lo = fmax(lo, -1.5);
        hi = fmin(hi, 1.5);
    }
    a.src = pick_value(rng, count);
    double v = val[a.src], margin = 0.05 * (hi - lo);
    int inside = v >= lo + margin && v <= hi - margin;
    a.mapped = !inside || rng_next(rng) % 4 == 0;
    a.mid = 0.5 * (lo + hi);
    a.half = 0.45 * (hi - lo);
    return a;
}

static void program_free(program *p)
{
    free(p->code);
    free(p->args);
    free(p->out);
    free(p->mask);
    free(p->dval);
    free(p->rval);
    memset(p, 0, sizeof *p);
}

/* A random program of `len` instructions with n inputs and m outputs,
 * generated at the point x. */
static void program_make(program *p, uint64_t *rng, size_t n, size_t m, size_t len, int gentle,
                         const double *x)
{
    size_t values = n + len;
    memset(p, 0, sizeof *p);
    p->n = n;
    p->m = m;
    p->len = len;
    p->code = xmalloc(len * sizeof *p->code);
    p->out = xmalloc(m * sizeof *p->out);
    p->mask = xmalloc(values * sizeof *p->mask);
    p->dval = xmalloc(values * sizeof *p->dval);
    p->rval = xmalloc(values * sizeof *p->rval);
    p->args_cap = 2 * len + 16;
    p->args = xmalloc(p->args_cap * sizeof *p->args);
    double *val = p->dval;
    for (size_t i = 0; i < n; i++) {
        val[i] = x[i];
        p->mask[i] = n <= 64 ? UINT64_C(1) << i : 0;
    }
    double box = gentle ? 1.5 : 10.0;  /* for the terms of sums and dots */
    for (size_t s = 0; s < len; s++) {
        size_t count = n + s, nargs = 0;
        insn I = {P_CONST, 0, 0, 0, 0.0};
        parg t[2 * P_MAXK];
        for (int attempt = 0;; attempt++) {
            unsigned r = (unsigned)(rng_next(rng) % 100);
            if (count == 0 || r < 4) {
                I.kind = P_CONST;
                I.c = rng_next(rng) % 4 == 0 ? 0.0 : rng_uniform(rng, -3.0, 3.0);
                nargs = 0;
                break;
            }
            if (r < 20 || attempt == 40) {  /* a sum of one term always does */
                I.kind = r % 2 && attempt < 40 ? P_DOT : P_SUM;
                I.k = attempt == 40 ? 1 : 1 + rng_next(rng) % P_MAXK;
                nargs = I.kind == P_DOT ? 2 * I.k : I.k;
                for (size_t i = 0; i < nargs; i++)
                    t[i] = pick_arg(rng, val, count, -box, box, gentle);
                break;
            }
            if (r < 58) {
                I.kind = P_UNARY;
                I.op = (int)(rng_next(rng) % N_UNARY_OPS);
                const unary_op *op = unary_op_at((size_t)I.op);
                t[0] = pick_arg(rng, val, count, op->lo, op->hi, gentle);
                nargs = 1;
                if (op->keep(arg_d(&t[0], val)))
                    break;
                continue;
            }
            I.kind = P_BINARY;
            I.op = (int)(rng_next(rng) % N_BINARY_OPS);
            const binary_op *op = binary_op_at((size_t)I.op);
            t[0] = pick_arg(rng, val, count, op->alo, op->ahi, gentle);
            t[1] = pick_arg(rng, val, count, op->blo, op->bhi, gentle);
            nargs = 2;
            if (op->keep(arg_d(&t[0], val), arg_d(&t[1], val)))
                break;
        }
        if (p->nargs + nargs > p->args_cap) {
            p->args_cap = 2 * (p->nargs + nargs);
            p->args = realloc(p->args, p->args_cap * sizeof *p->args);
            assert_non_null(p->args);
        }
        I.arg = p->nargs;
        memcpy(p->args + p->nargs, t, nargs * sizeof *t);
        p->nargs += nargs;
        p->code[s] = I;
        val[count] = eval_d(p, &p->code[s], val);
        assert_true(isfinite(val[count]));
        p->mask[count] = 0;
        for (size_t i = 0; i < nargs; i++)
            p->mask[count] |= p->mask[t[i].src];
    }
    for (size_t j = 0; j < m; j++) {
        if (len && rng_next(rng) % 10 < 7)
            p->out[j] = n + len - 1 - rng_next(rng) % ((len + 2) / 3);
        else
            p->out[j] = rng_next(rng) % values;
    }
}

/* ======================================================================
 * 1. Jacobians in closed form
 * ====================================================================== */

#define TOL_J 1e-12  /* relative, for closed-form Jacobians */

/* ad_jacobian, ad_jvp and ad_vjp of mixed at a random point, against the
 * closed form. */
static void check_mixed(size_t n, size_t m, uint64_t seed)
{
    uint64_t rng = seed;
    double *x = xmalloc(n * sizeof *x), *v = xmalloc(n * sizeof *v), *wj = xmalloc(n * sizeof *wj);
    double *y = xmalloc(m * sizeof *y), *yw = xmalloc(m * sizeof *yw), *y2 = xmalloc(m * sizeof *y2);
    double *w = xmalloc(m * sizeof *w), *jv = xmalloc(m * sizeof *jv);
    double *J = xmalloc(n * m * sizeof *J), *Jw = xmalloc(n * m * sizeof *Jw);
    fill_uniform(&rng, x, n, 0.5, 2.0);
    mixed_want(n, m, x, yw, Jw);

    assert_int_equal(ad_jacobian(mixed, NULL, n, x, m, y, J), AD_OK);
    for (size_t j = 0; j < m; j++) {
        assert_near(y[j], yw[j], 1e-14, 0.0);
        for (size_t i = 0; i < n; i++)
            assert_near(J[j * n + i], Jw[j * n + i], TOL_J, 1e-15);
    }

    fill_uniform(&rng, v, n, -1.0, 1.0);
    fill_uniform(&rng, w, m, -1.0, 1.0);
    assert_int_equal(ad_jvp(mixed, NULL, n, x, v, m, y2, jv), AD_OK);
    for (size_t j = 0; j < m; j++) {
        double want = 0.0, scale = 0.0;
        for (size_t i = 0; i < n; i++) {
            want += Jw[j * n + i] * v[i];
            scale += fabs(Jw[j * n + i] * v[i]);
        }
        assert_same(y2[j], y[j]);
        assert_near(jv[j], want, 0.0, TOL_J * scale + 1e-300);
    }
    assert_int_equal(ad_vjp(mixed, NULL, n, x, m, w, y2, wj), AD_OK);
    for (size_t i = 0; i < n; i++) {
        double want = 0.0, scale = 0.0;
        for (size_t j = 0; j < m; j++) {
            want += w[j] * Jw[j * n + i];
            scale += fabs(w[j] * Jw[j * n + i]);
        }
        assert_near(wj[i], want, 0.0, TOL_J * scale + 1e-300);
    }
    for (size_t j = 0; j < m; j++)
        assert_same(y2[j], y[j]);
    free(x), free(v), free(wj), free(y), free(yw), free(y2), free(w), free(jv), free(J), free(Jw);
}

static void test_jacobian_closed_form(void **state)
{
    /* {n, m}: wide (m << n: reverse sweeps), tall (forward sweeps), square,
     * and one either side of square. */
    static const size_t shapes[][2] = {
        {50, 2}, {50, 13}, {40, 26}, {300, 5}, {2, 50}, {1, 39}, {3, 100},
        {39, 1}, {13, 13}, {12, 13}, {14, 13}, {1, 1}, {26, 26},
    };
    (void)state;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (uint64_t seed = 1; seed <= 3; seed++)
            check_mixed(shapes[s][0], shapes[s][1], seed * 1000 + s);
}

/* Outputs that are only inputs and constants, in blocks of rows (n > m)
 * and of columns (n <= m): unit rows and zero rows, exactly. */
static void inputs_and_constants(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const size_t *pick = ctx;  /* input index, or n for a constant */
    for (size_t j = 0; j < m; j++)
        y[j] = pick[j] < n ? x[pick[j]] : ad_const((double)j);
}

static void test_jacobian_of_inputs_and_constants(void **state)
{
    static const size_t shapes[][2] = {{5, 4}, {9, 6}, {3, 7}, {2, 9}, {6, 6}, {1, 3}, {7, 1}};
    uint64_t rng = 0x1c;
    (void)state;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t n = shapes[s][0], m = shapes[s][1], pick[9];
        double x[9], y[9], J[81], v[9], w[9], jv[9], wj[9];
        for (size_t j = 0; j < m; j++)
            pick[j] = rng_next(&rng) % (n + 1);
        fill_uniform(&rng, x, n, -2.0, 2.0);
        fill_uniform(&rng, v, n, -1.0, 1.0);
        fill_uniform(&rng, w, m, -1.0, 1.0);
        assert_int_equal(ad_jacobian(inputs_and_constants, pick, n, x, m, y, J), AD_OK);
        assert_int_equal(ad_jvp(inputs_and_constants, pick, n, x, v, m, y, jv), AD_OK);
        assert_int_equal(ad_vjp(inputs_and_constants, pick, n, x, m, w, y, wj), AD_OK);
        for (size_t i = 0; i < n; i++) {
            double want = 0.0;
            for (size_t j = 0; j < m; j++)
                if (pick[j] == i)
                    want += w[j];
            assert_near(wj[i], want, 0.0, 0.0);  /* exactly (either sign of 0) */
        }
        for (size_t j = 0; j < m; j++) {
            assert_same(y[j], pick[j] < n ? x[pick[j]] : (double)j);
            assert_near(jv[j], pick[j] < n ? v[pick[j]] : 0.0, 0.0, 0.0);
            for (size_t i = 0; i < n; i++)
                assert_near(J[j * n + i], pick[j] == i ? 1.0 : 0.0, 0.0, 0.0);
        }
    }
}

/* An output f leaves unwritten reads as NaN; the others are unaffected. */
static void leaves_one_unwritten(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = ad_mul(x[0], x[1]);
    y[2] = ad_sin(x[1]);
}

static void test_unwritten_output_is_nan(void **state)
{
    const double x[2] = {0.75, -1.25}, v[2] = {0.5, 2.0}, w[3] = {1.0, 1.0, -2.0};
    double y[3], J[6], jv[3], wj[2];
    ad_linear *L = NULL;
    (void)state;
    assert_int_equal(ad_jacobian(leaves_one_unwritten, NULL, 2, x, 3, y, J), AD_OK);
    assert_same(y[0], x[0] * x[1]);
    assert_nan(y[1]);
    assert_same(y[2], sin(x[1]));
    assert_same(J[0], x[1]);
    assert_same(J[1], x[0]);
    assert_true(J[4] == 0.0);
    assert_same(J[5], cos(x[1]));
    assert_int_equal(ad_jvp(leaves_one_unwritten, NULL, 2, x, v, 3, y, jv), AD_OK);
    assert_nan(y[1]);
    assert_same(jv[0], x[1] * v[0] + x[0] * v[1]);
    assert_same(jv[2], cos(x[1]) * v[1]);
    assert_int_equal(ad_vjp(leaves_one_unwritten, NULL, 2, x, 3, w, y, wj), AD_OK);
    assert_nan(y[1]);
    assert_same(wj[0], x[1]);
    assert_near(wj[1], x[0] - 2.0 * cos(x[1]), 1e-15, 0.0);
    assert_int_equal(ad_linearize(leaves_one_unwritten, NULL, 2, x, 3, y, &L), AD_OK);
    assert_nan(y[1]);
    assert_int_equal(ad_linear_vjp(L, w, wj), AD_OK);
    assert_same(wj[0], x[1]);
    ad_linear_free(L);
}

/* ======================================================================
 * 2. Random programs: transposition, finite differences, sparse structure
 * ====================================================================== */

#define TOL_T 1e-12  /* relative to the magnitude of the inner products' terms */

/* <w, J v> against <J^T w, v> for a few random v and w; y exactly. */
static double check_transposition(const program *p, const double *x, uint64_t *rng)
{
    size_t n = p->n, m = p->m;
    double *v = xmalloc(n * sizeof *v), *wj = xmalloc(n * sizeof *wj);
    double *w = xmalloc(m * sizeof *w), *jv = xmalloc(m * sizeof *jv);
    double *y = xmalloc(m * sizeof *y), *yw = xmalloc(m * sizeof *yw);
    double worst = 0.0;
    program_d(p, x, yw);
    for (int trial = 0; trial < 3; trial++) {
        fill_uniform(rng, v, n, -1.0, 1.0);
        fill_uniform(rng, w, m, -1.0, 1.0);
        assert_int_equal(ad_jvp(program_f, (void *)p, n, x, v, m, y, jv), AD_OK);
        for (size_t j = 0; j < m; j++)
            assert_same(y[j], yw[j]);
        assert_int_equal(ad_vjp(program_f, (void *)p, n, x, m, w, y, wj), AD_OK);
        for (size_t j = 0; j < m; j++)
            assert_same(y[j], yw[j]);
        double lhs = 0.0, rhs = 0.0, scale = 0.0;
        for (size_t j = 0; j < m; j++) {
            assert_true(isfinite(jv[j]));
            lhs += w[j] * jv[j];
            scale += fabs(w[j] * jv[j]);
        }
        for (size_t i = 0; i < n; i++) {
            assert_true(isfinite(wj[i]));
            rhs += wj[i] * v[i];
            scale += fabs(wj[i] * v[i]);
        }
        if (scale > 0.0)
            worst = fmax(worst, fabs(lhs - rhs) / scale);
        if (!(fabs(lhs - rhs) <= TOL_T * scale)) {
            print_error("program n=%zu m=%zu len=%zu: <w, Jv> = %.17g, <J^T w, v> = %.17g\n",
                        n, m, p->len, lhs, rhs);
            fail();
        }
    }
    free(v), free(wj), free(w), free(jv), free(y), free(yw);
    return worst;
}

static void test_transposition_random_programs(void **state)
{
    uint64_t rng = 0x7ea5e1;
    double worst = 0.0;
    (void)state;
    for (int k = 0; k < 400; k++) {
        size_t n = 1 + rng_next(&rng) % 10, m = 1 + rng_next(&rng) % 8;
        size_t len = 1 + rng_next(&rng) % 300;
        double x[10];
        program p;
        fill_uniform(&rng, x, n, -2.0, 2.0);
        program_make(&p, &rng, n, m, len, 0, x);
        worst = fmax(worst, check_transposition(&p, x, &rng));
        program_free(&p);
    }
    if (getenv("DUALREV_TEST_VERBOSE"))
        fprintf(stderr, "# worst transposition error / scale: %.3g\n", worst);
}

/* A program long enough for several chunks: sweeps and n-ary runs cross
 * chunk boundaries.  Gentle regions: over tens of thousands of steps the
 * full regions (exp up to 2e4, pow up to 1e3, ...) compound to derivatives
 * near 1e70, where the two sweeps' different summation orders differ by
 * rounding far above any tight tolerance. */
static void test_transposition_long_program(void **state)
{
    uint64_t rng = 0x10c5;
    double x[16];
    program p;
    (void)state;
    fill_uniform(&rng, x, 16, -2.0, 2.0);
    program_make(&p, &rng, 16, 6, 80000, 1, x);
    double worst = check_transposition(&p, x, &rng);
    ad_tape_stats st;
    assert_int_equal(ad_tape_stats_get(&st), AD_OK);
    if (getenv("DUALREV_TEST_VERBOSE"))
        fprintf(stderr, "# long program: %zu records, worst transposition error / scale: %.3g\n",
                st.records, worst);
    assert_true(st.records > 3 * 65536);
    program_free(&p);
}

/* ad_jacobian against J v and w^T J from ad_jvp and ad_vjp. */
static void check_program_jacobians(const program *p, const double *x, uint64_t *rng)
{
    size_t n = p->n, m = p->m;
    double *J = xmalloc(n * m * sizeof *J), *y = xmalloc(m * sizeof *y), *yw = xmalloc(m * sizeof *yw);
    double *v = xmalloc(n * sizeof *v), *wj = xmalloc(n * sizeof *wj);
    double *w = xmalloc(m * sizeof *w), *jv = xmalloc(m * sizeof *jv);
    program_d(p, x, yw);
    assert_int_equal(ad_jacobian(program_f, (void *)p, n, x, m, y, J), AD_OK);
    for (size_t j = 0; j < m; j++)
        assert_same(y[j], yw[j]);
    fill_uniform(rng, v, n, -1.0, 1.0);
    fill_uniform(rng, w, m, -1.0, 1.0);
    assert_int_equal(ad_jvp(program_f, (void *)p, n, x, v, m, y, jv), AD_OK);
    assert_int_equal(ad_vjp(program_f, (void *)p, n, x, m, w, y, wj), AD_OK);
    for (size_t j = 0; j < m; j++) {
        double want = 0.0, scale = 0.0;
        for (size_t i = 0; i < n; i++) {
            want += J[j * n + i] * v[i];
            scale += fabs(J[j * n + i] * v[i]);
        }
        assert_near(jv[j], want, 0.0, 1e-11 * scale + 1e-300);
    }
    for (size_t i = 0; i < n; i++) {
        double want = 0.0, scale = 0.0;
        for (size_t j = 0; j < m; j++) {
            want += w[j] * J[j * n + i];
            scale += fabs(w[j] * J[j * n + i]);
        }
        assert_near(wj[i], want, 0.0, 1e-11 * scale + 1e-300);
    }
    free(J), free(y), free(yw), free(v), free(wj), free(w), free(jv);
}

/* check on 150 random programs of up to 12 inputs, 12 outputs and 200
 * steps (n <= m half of the time: forward sweeps, else reverse), then on
 * two long ones (gentle, see above), 5 x 40 and 40 x 5. */
typedef void (*program_check)(const program *p, const double *x, uint64_t *rng);

static void on_random_programs(uint64_t seed, program_check check)
{
    uint64_t rng = seed;
    for (int k = 0; k < 150; k++) {
        size_t n = 1 + rng_next(&rng) % 12, m = 1 + rng_next(&rng) % 12;
        size_t len = 1 + rng_next(&rng) % 200;
        double x[12];
        program p;
        fill_uniform(&rng, x, n, -2.0, 2.0);
        program_make(&p, &rng, n, m, len, 0, x);
        check(&p, x, &rng);
        program_free(&p);
    }
    for (int k = 0; k < 2; k++) {
        double x[40];
        program p;
        fill_uniform(&rng, x, 40, -1.5, 1.5);
        program_make(&p, &rng, k ? 40 : 5, k ? 5 : 40, 40000, 1, x);
        check(&p, x, &rng);
        program_free(&p);
    }
}

static void test_jacobian_random_programs(void **state)
{
    (void)state;
    on_random_programs(0x1ac0b1, check_program_jacobians);
}

/* ad_sparse_jacobian (dense and hashed store) of a program against its
 * ad_jacobian, with the structure the program's dependency sets predict. */
static void check_program_sparse(const program *p, const double *x, uint64_t *rng)
{
    (void)rng;
    size_t n = p->n, m = p->m;
    double *J = xmalloc(n * m * sizeof *J), *y = xmalloc(m * sizeof *y), *yw = xmalloc(m * sizeof *yw);
    assert_true(n <= 64);
    program_d(p, x, yw);
    assert_int_equal(ad_jacobian(program_f, (void *)p, n, x, m, y, J), AD_OK);
    for (int hashed = 0; hashed < 2; hashed++) {
        ad_csr S;
        ad_test_sparse_force_hash(hashed);
        ad_status st = ad_sparse_jacobian(program_f, (void *)p, n, x, m, y, &S);
        ad_test_sparse_force_hash(0);
        assert_int_equal(st, AD_OK);
        assert_csr_valid(&S, m, n);
        for (size_t j = 0; j < m; j++) {
            uint64_t want = p->mask[p->out[j]], got = 0;
            double scale = 0.0;
            assert_same(y[j], yw[j]);
            for (size_t i = 0; i < n; i++)
                scale = fmax(scale, fabs(J[j * n + i]));
            for (size_t k = S.row_ptr[j]; k < S.row_ptr[j + 1]; k++) {
                got |= UINT64_C(1) << S.col[k];
                assert_near(S.val[k], J[j * n + S.col[k]], 1e-12, 1e-14 * scale + 1e-300);
            }
            if (got != want) {
                print_error("row %zu (%s store): columns %#llx, reached inputs %#llx\n", j,
                            hashed ? "hashed" : "dense", (unsigned long long)got,
                            (unsigned long long)want);
                fail();
            }
            for (size_t i = 0; i < n; i++)
                if (!(want >> i & 1))
                    assert_true(J[j * n + i] == 0.0);  /* unreached: exactly zero */
        }
        ad_csr_free(&S);
    }
    free(J), free(y), free(yw);
}

/* Last in this file: some programs' first outputs reach no input, which
 * met the qsort(NULL, 0) of lib/sparse.c's resolve_row at 6527b00 (see
 * test_sparse.c), fatal under -fno-sanitize-recover. */
static void test_sparse_random_programs(void **state)
{
    (void)state;
    on_random_programs(0x5ba25e, check_program_sparse);
}

/* Central finite differences of the plain-double program. */
typedef struct fd_program {
    const program *p;
    double *x, *y;
    size_t i, j;
} fd_program;

static double program_coordinate(double t, const void *ctx)
{
    const fd_program *c = ctx;
    double save = c->x[c->i];
    c->x[c->i] = t;
    program_d(c->p, c->x, c->y);
    c->x[c->i] = save;
    return c->y[c->j];
}

static void test_jacobian_random_programs_fd(void **state)
{
    uint64_t rng = 0xfd0001;
    (void)state;
    for (int k = 0; k < 12; k++) {
        size_t n = 1 + rng_next(&rng) % 4, m = 1 + rng_next(&rng) % 4;
        size_t len = 10 + rng_next(&rng) % 40;
        double x[4], y[4], J[16];
        program p;
        fill_uniform(&rng, x, n, -1.5, 1.5);
        program_make(&p, &rng, n, m, len, 1, x);
        assert_int_equal(ad_jacobian(program_f, &p, n, x, m, y, J), AD_OK);
        for (size_t j = 0; j < m; j++)
            for (size_t i = 0; i < n; i++) {
                double xs[4], ys[4];
                memcpy(xs, x, sizeof xs);
                fd_program c = {&p, xs, ys, i, j};
                fd_result fd = fd_derivative(program_coordinate, &c, x[i]);
                assert_near(J[j * n + i], fd.d, 1e-7, fd.noise + 1e-9);
            }
        program_free(&p);
    }
}

/* ======================================================================
 * 3. Linearizations
 * ====================================================================== */

/* A linearization applied 100 times gives exactly what fresh ad_jvp and
 * ad_vjp calls give (same records, same sweep), allocating nothing. */
static void check_reuse(ad_function f, void *ctx, size_t n, size_t m, const double *x,
                        const double *yw, uint64_t *rng)
{
    double *v = xmalloc(n * sizeof *v), *wj = xmalloc(n * sizeof *wj), *wj2 = xmalloc(n * sizeof *wj2);
    double *w = xmalloc(m * sizeof *w), *jv = xmalloc(m * sizeof *jv), *jv2 = xmalloc(m * sizeof *jv2);
    double *y = xmalloc(m * sizeof *y);
    ad_linear *L = NULL;
    assert_int_equal(ad_linearize(f, ctx, n, x, m, y, &L), AD_OK);
    assert_non_null(L);
    for (size_t j = 0; j < m; j++)
        assert_same(y[j], yw[j]);
    for (int it = 0; it < 100; it++) {
        fill_uniform(rng, v, n, -1.0, 1.0);
        fill_uniform(rng, w, m, -1.0, 1.0);
        ad_test_fail_alloc_after(0);  /* applying L must not allocate */
        ad_status s1 = ad_linear_jvp(L, v, jv);
        ad_status s2 = ad_linear_vjp(L, w, wj);
        ad_test_fail_alloc_after(-1);
        assert_int_equal(s1, AD_OK);
        assert_int_equal(s2, AD_OK);
        assert_int_equal(ad_jvp(f, ctx, n, x, v, m, y, jv2), AD_OK);
        for (size_t j = 0; j < m; j++) {
            assert_same(jv[j], jv2[j]);
            assert_same(y[j], yw[j]);
        }
        assert_int_equal(ad_vjp(f, ctx, n, x, m, w, y, wj2), AD_OK);
        for (size_t i = 0; i < n; i++)
            assert_same(wj[i], wj2[i]);
    }
    ad_linear_free(L);
    free(v), free(wj), free(wj2), free(w), free(jv), free(jv2), free(y);
}

static void test_linearize_reuse(void **state)
{
    uint64_t rng = 0x11ea;
    double x[20], yw[30], Jw[600];
    (void)state;
    fill_uniform(&rng, x, 20, 0.5, 2.0);
    mixed_want(20, 30, x, yw, Jw);
    /* mixed's values are checked against the closed form elsewhere; here y
     * must be what ad_jvp gives. */
    double jvp_y[30], v[20] = {0}, jv[30];
    assert_int_equal(ad_jvp(mixed, NULL, 20, x, v, 30, jvp_y, jv), AD_OK);
    check_reuse(mixed, NULL, 20, 30, x, jvp_y, &rng);
    check_reuse(mixed, NULL, 20, 7, x, jvp_y, &rng);

    for (int k = 0; k < 4; k++) {
        size_t n = 1 + rng_next(&rng) % 10, m = 1 + rng_next(&rng) % 10;
        double px[10], py[10];
        program p;
        fill_uniform(&rng, px, n, -2.0, 2.0);
        program_make(&p, &rng, n, m, k == 3 ? 5000 : 300, 0, px);
        program_d(&p, px, py);
        check_reuse(program_f, &p, n, m, px, py, &rng);
        program_free(&p);
    }
}

/* jv = J v and wj = J^T w against the closed form Jw (m x n), each entry
 * to TOL_J of the magnitude of its terms. */
static void check_maps(const double *Jw, size_t n, size_t m, const double *v, const double *jv,
                       const double *w, const double *wj)
{
    for (size_t j = 0; j < m; j++) {
        double want = 0.0, scale = 0.0;
        for (size_t i = 0; i < n; i++) {
            want += Jw[j * n + i] * v[i];
            scale += fabs(Jw[j * n + i] * v[i]);
        }
        assert_near(jv[j], want, 0.0, TOL_J * scale + 1e-300);
    }
    for (size_t i = 0; i < n; i++) {
        double want = 0.0, scale = 0.0;
        for (size_t j = 0; j < m; j++) {
            want += w[j] * Jw[j * n + i];
            scale += fabs(w[j] * Jw[j * n + i]);
        }
        assert_near(wj[i], want, 0.0, TOL_J * scale + 1e-300);
    }
}

/* The map of a linearization against the closed form: J v and J^T w. */
static void check_linear_against_closed_form(ad_linear *L, size_t n, size_t m, const double *Jw,
                                             uint64_t *rng)
{
    double *v = xmalloc(n * sizeof *v), *wj = xmalloc(n * sizeof *wj);
    double *w = xmalloc(m * sizeof *w), *jv = xmalloc(m * sizeof *jv);
    fill_uniform(rng, v, n, -1.0, 1.0);
    fill_uniform(rng, w, m, -1.0, 1.0);
    assert_int_equal(ad_linear_jvp(L, v, jv), AD_OK);
    assert_int_equal(ad_linear_vjp(L, w, wj), AD_OK);
    check_maps(Jw, n, m, v, jv, w, wj);
    free(v), free(wj), free(w), free(jv);
}

/* ---- many directions at once (ad_linear_jvps, ad_linear_vjps) ---- */

/* k directions through L against k single calls, bit for bit (NaN where
 * they give NaN), V and W with some entries 0, +-Inf and NaN when `edges`. */
static void check_directions(ad_linear *L, size_t n, size_t m, size_t k, int edges, uint64_t *rng)
{
    size_t kn = k * n + 1, km = k * m + 1;
    double *V = xmalloc(kn * sizeof *V), *JV = xmalloc(km * sizeof *JV), *one = xmalloc(m * sizeof *one);
    double *W = xmalloc(km * sizeof *W), *WJ = xmalloc(kn * sizeof *WJ), *row = xmalloc(n * sizeof *row);
    static const double edge[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e308, 5e-324};
    fill_uniform(rng, V, k * n, -1.0, 1.0);
    fill_uniform(rng, W, k * m, -1.0, 1.0);
    for (size_t e = 0; edges && e < k; e++) {
        V[e * n + rng_next(rng) % n] = edge[e % 7];
        W[e * m + rng_next(rng) % m] = edge[(e + 3) % 7];
    }
    /* A call fails as the first of its single calls that fails, with NaN
     * results for every direction. */
    ad_status fwd = ad_linear_jvps(L, k, V, JV), rev = ad_linear_vjps(L, k, W, WJ);
    ad_status fwd1 = AD_OK, rev1 = AD_OK;
    for (size_t j = 0; j < k; j++) {
        ad_status s = ad_linear_jvp(L, V + j * n, one);
        fwd1 = fwd1 != AD_OK ? fwd1 : s;
        for (size_t q = 0; q < m; q++)
            if (fwd == AD_OK)
                assert_same(JV[j * m + q], one[q]);
            else
                assert_nan(JV[j * m + q]);
        s = ad_linear_vjp(L, W + j * m, row);
        rev1 = rev1 != AD_OK ? rev1 : s;
        for (size_t i = 0; i < n; i++)
            if (rev == AD_OK)
                assert_same(WJ[j * n + i], row[i]);
            else
                assert_nan(WJ[j * n + i]);
    }
    assert_int_equal(fwd, fwd1);
    assert_int_equal(rev, rev1);
    assert_true(edges || (fwd == AD_OK && rev == AD_OK));
    free(V), free(JV), free(one), free(W), free(WJ), free(row);
}

static void test_directions_against_single_calls(void **state)
{
    static const size_t ks[] = {0, 1, 3, 4, 5, 8, 26};
    uint64_t rng = 0x1a4e5;
    double x[20], y[30];
    (void)state;
    fill_uniform(&rng, x, 20, 0.5, 2.0);
    ad_linear *L = NULL;
    assert_int_equal(ad_linearize(mixed, NULL, 20, x, 30, y, &L), AD_OK);
    for (size_t i = 0; i < sizeof ks / sizeof *ks; i++) {
        check_directions(L, 20, 30, ks[i], 0, &rng);
        check_directions(L, 20, 30, ks[i], 1, &rng);
    }
    ad_linear_free(L);
    for (int t = 0; t < 6; t++) {  /* random programs, some long (several chunks) */
        size_t n = 1 + rng_next(&rng) % 10, m = 1 + rng_next(&rng) % 10;
        double px[10], py[10];
        program p;
        fill_uniform(&rng, px, n, -2.0, 2.0);
        program_make(&p, &rng, n, m, t == 5 ? 100000 : 300, 0, px);
        assert_int_equal(ad_linearize(program_f, &p, n, px, m, py, &L), AD_OK);
        check_directions(L, n, m, ks[1 + (size_t)t % 6], t & 1, &rng);
        ad_linear_free(L);
        program_free(&p);
    }
}

/* J v_j and w_j^T J of mixed against its closed-form Jacobian. */
static void test_directions_closed_form(void **state)
{
    enum { N = 20, M = 30, K = 26 };
    uint64_t rng = 0xd1e5;
    double x[N], y[M], yw[M], *J = xmalloc(N * M * sizeof *J);
    double *V = xmalloc(K * N * sizeof *V), *JV = xmalloc(K * M * sizeof *JV);
    double *W = xmalloc(K * M * sizeof *W), *WJ = xmalloc(K * N * sizeof *WJ);
    (void)state;
    fill_uniform(&rng, x, N, 0.5, 2.0);
    mixed_want(N, M, x, yw, J);
    ad_linear *L = NULL;
    assert_int_equal(ad_linearize(mixed, NULL, N, x, M, y, &L), AD_OK);
    fill_uniform(&rng, V, K * N, -1.0, 1.0);
    fill_uniform(&rng, W, K * M, -1.0, 1.0);
    assert_int_equal(ad_linear_jvps(L, K, V, JV), AD_OK);
    assert_int_equal(ad_linear_vjps(L, K, W, WJ), AD_OK);
    for (size_t d = 0; d < K; d++)
        check_maps(J, N, M, V + d * N, JV + d * M, W + d * M, WJ + d * N);
    ad_linear_free(L);
    free(J), free(V), free(JV), free(W), free(WJ);
}

static void test_directions_errors(void **state)
{
    double x[3] = {0.7, 1.1, 1.3}, y[4], V[6] = {1, 0, 0, 0, 1, 0}, JV[8], W[8] = {0}, WJ[6];
    (void)state;
    ad_linear *L = NULL;
    assert_int_equal(ad_linear_jvps(NULL, 2, V, JV), AD_EINVAL);
    assert_int_equal(ad_linear_vjps(NULL, 0, NULL, NULL), AD_EINVAL);
    assert_int_equal(ad_linearize(mixed, NULL, 3, x, 4, y, &L), AD_OK);
    assert_int_equal(ad_linear_jvps(L, 0, NULL, NULL), AD_OK);
    assert_int_equal(ad_linear_vjps(L, 0, NULL, NULL), AD_OK);
    assert_int_equal(ad_linear_jvps(L, 2, NULL, JV), AD_EINVAL);
    for (size_t j = 0; j < 8; j++)
        assert_nan(JV[j]);
    assert_int_equal(ad_linear_jvps(L, 2, V, NULL), AD_EINVAL);
    assert_int_equal(ad_linear_vjps(L, 2, W, NULL), AD_EINVAL);
    assert_int_equal(ad_linear_vjps(L, 2, NULL, WJ), AD_EINVAL);
    for (size_t i = 0; i < 6; i++)
        assert_nan(WJ[i]);
    assert_int_equal(ad_linear_jvps(L, SIZE_MAX / 2, V, JV), AD_EINVAL);
    /* the first call with lanes takes their room: a failure there is
     * AD_ENOMEM with NaN results, and the next call is right */
    ad_test_fail_alloc_after(0);
    ad_status s = ad_linear_jvps(L, 2, V, JV);
    ad_test_fail_alloc_after(-1);
    assert_int_equal(s, AD_ENOMEM);
    for (size_t j = 0; j < 8; j++)
        assert_nan(JV[j]);
    assert_int_equal(ad_linear_jvps(L, 2, V, JV), AD_OK);
    double col[4];
    assert_int_equal(ad_linear_jvp(L, V + 3, col), AD_OK);
    for (size_t j = 0; j < 4; j++)
        assert_same(JV[4 + j], col[j]);
    /* once the room is there, applying L allocates nothing */
    ad_test_fail_alloc_after(0);
    s = ad_linear_vjps(L, 2, W, WJ);
    ad_test_fail_alloc_after(-1);
    assert_int_equal(s, AD_OK);
    ad_linear_free(L);
}


/* An objective that linearizes mixed at its own point, takes u = J^T w from
 * the linearization as constants, and returns <u, x> + sum x_i^2: gradient
 * u + 2x.  It keeps the handle for use after ad_gradient has returned. */
#define NEST_N 6
#define NEST_M 15

typedef struct nested_linearize {
    const double *w;
    ad_linear *L;
    ad_status lin, vjp;
    double y[NEST_M], u[NEST_N];
} nested_linearize;

static ad_real linearizing_objective(const ad_real *x, size_t n, void *ctx)
{
    nested_linearize *c = ctx;
    double at[NEST_N];
    ad_real uc[NEST_N], sq[NEST_N];
    ad_real before = ad_mul(x[0], 1.0);  /* recorded before the inner call */
    (void)n;  /* NEST_N: fixed sizes let the compiler see every entry set */
    for (size_t i = 0; i < NEST_N; i++)
        at[i] = ad_value(x[i]);
    c->lin = ad_linearize(mixed, NULL, NEST_N, at, NEST_M, c->y, &c->L);
    c->vjp = ad_linear_vjp(c->L, c->w, c->u);
    for (size_t i = 0; i < NEST_N; i++) {
        uc[i] = ad_const(c->u[i]);
        sq[i] = ad_mul(x[i], x[i]);
    }
    return ad_add(ad_sub(ad_add(ad_dot(NEST_N, uc, x), ad_sum(NEST_N, sq)), before), x[0]);
}

static void test_linearize_inside_gradient(void **state)
{
    uint64_t rng = 0x2e57;
    double x[NEST_N], w[NEST_M], g[NEST_N], yw[NEST_M], Jw[NEST_N * NEST_M], u2[NEST_N];
    nested_linearize c;
    (void)state;
    fill_uniform(&rng, x, NEST_N, 0.5, 2.0);
    fill_uniform(&rng, w, NEST_M, -1.0, 1.0);
    mixed_want(NEST_N, NEST_M, x, yw, Jw);
    memset(&c, 0, sizeof c);
    c.w = w;
    gradient_ok(linearizing_objective, &c, NEST_N, x, g);
    assert_int_equal(c.lin, AD_OK);
    assert_int_equal(c.vjp, AD_OK);
    assert_non_null(c.L);
    for (size_t j = 0; j < NEST_M; j++)
        assert_near(c.y[j], yw[j], 1e-14, 0.0);
    for (size_t i = 0; i < NEST_N; i++) {
        double want = 0.0, scale = 0.0;
        for (size_t j = 0; j < NEST_M; j++) {
            want += w[j] * Jw[j * NEST_N + i];
            scale += fabs(w[j] * Jw[j * NEST_N + i]);
        }
        assert_near(c.u[i], want, 0.0, TOL_J * scale + 1e-300);
        assert_near(g[i], c.u[i] + 2.0 * x[i], 1e-15, 1e-15);
    }
    /* The handle outlives the recording it was made in. */
    assert_int_equal(ad_linear_vjp(c.L, w, u2), AD_OK);
    for (size_t i = 0; i < NEST_N; i++)
        assert_same(u2[i], c.u[i]);
    check_linear_against_closed_form(c.L, NEST_N, NEST_M, Jw, &rng);
    ad_linear_free(c.L);
}

/* Applying a handle inside an objective being recorded leaves that
 * recording intact: x^3 summed, gradient 3x^2 exactly. */
typedef struct applies_handle {
    ad_linear *L;
    const double *v;
    double jv[30];
    ad_status st[2];
} applies_handle;

static ad_real cubes_applying_handle(const ad_real *x, size_t n, void *ctx)
{
    applies_handle *c = ctx;
    ad_real s = ad_const(0.0);
    c->st[0] = ad_linear_jvp(c->L, c->v, c->jv);
    for (size_t i = 0; i < n; i++) {
        s = ad_add(s, ad_mul(x[i], ad_mul(x[i], x[i])));
        if (i == n / 2)
            c->st[1] = ad_linear_jvp(c->L, c->v, c->jv);
    }
    return s;
}

/* A handle has its own tape: the thread's later recordings, the release of
 * its memory, and other handles do not touch it. */
static void test_linear_handle_keeps_its_own_tape(void **state)
{
    uint64_t rng = 0x0a7e;
    enum { N = 20, M = 30 };
    double x[N], x2[N], v[N], w[M], y[M], jv0[M], wj0[N], jv[M], wj[N], yw[M], Jw[N * M];
    ad_linear *L = NULL, *L2 = NULL;
    (void)state;
    fill_uniform(&rng, x, N, 0.5, 2.0);
    fill_uniform(&rng, x2, N, 0.5, 2.0);
    fill_uniform(&rng, v, N, -1.0, 1.0);
    fill_uniform(&rng, w, M, -1.0, 1.0);
    mixed_want(N, M, x, yw, Jw);
    assert_int_equal(ad_linearize(mixed, NULL, N, x, M, y, &L), AD_OK);
    assert_int_equal(ad_linear_jvp(L, v, jv0), AD_OK);
    assert_int_equal(ad_linear_vjp(L, w, wj0), AD_OK);

    /* Other work on this thread: a gradient of several chunks with more
     * inputs, a Jacobian, a sparse Jacobian, another linearization. */
    long pad = 300000;
    double bx[64], g[64], fx, J[7 * 40], jy[40];
    ad_csr S;
    fill_uniform(&rng, bx, 64, -1.0, 1.0);
    gradient_ok(padded_squares, &pad, 64, bx, g);
    assert_int_equal(ad_jacobian(mixed, NULL, 7, x2, 40, jy, J), AD_OK);
    assert_int_equal(ad_sparse_jacobian(mixed, NULL, N, x2, M, y, &S), AD_OK);
    ad_csr_free(&S);
    assert_int_equal(ad_linearize(mixed, NULL, N, x2, M, y, &L2), AD_OK);
    assert_int_equal(ad_linear_jvp(L, v, jv), AD_OK);
    for (size_t j = 0; j < M; j++)
        assert_same(jv[j], jv0[j]);
    assert_int_equal(ad_linear_jvp(L2, v, jv), AD_OK);  /* interleaved with L */
    assert_int_equal(ad_linear_vjp(L, w, wj), AD_OK);
    for (size_t i = 0; i < N; i++)
        assert_same(wj[i], wj0[i]);

    /* The thread's memory goes; the handles keep theirs. */
    assert_int_equal(ad_release(), AD_OK);
    assert_int_equal(ad_linear_jvp(L, v, jv), AD_OK);
    assert_int_equal(ad_linear_vjp(L, w, wj), AD_OK);
    for (size_t j = 0; j < M; j++)
        assert_same(jv[j], jv0[j]);
    for (size_t i = 0; i < N; i++)
        assert_same(wj[i], wj0[i]);
    check_linear_against_closed_form(L, N, M, Jw, &rng);
    double Jw2[N * M], yw2[M];
    mixed_want(N, M, x2, yw2, Jw2);
    check_linear_against_closed_form(L2, N, M, Jw2, &rng);

    /* Applied inside another recording, which stays intact. */
    applies_handle c;
    double cx[5] = {1.5, -0.5, 2.0, 0.25, -3.0}, cg[5];
    memset(&c, 0, sizeof c);
    c.L = L;
    c.v = v;
    c.st[0] = c.st[1] = AD_EINVAL;
    fx = gradient_ok(cubes_applying_handle, &c, 5, cx, cg);
    assert_int_equal(c.st[0], AD_OK);
    assert_int_equal(c.st[1], AD_OK);
    double want = 0.0;
    for (size_t i = 0; i < 5; i++) {
        want += cx[i] * (cx[i] * cx[i]);
        assert_same(cg[i], 3.0 * cx[i] * cx[i]);
    }
    assert_same(fx, want);
    for (size_t j = 0; j < M; j++)
        assert_same(c.jv[j], jv0[j]);
    ad_linear_free(L2);
    ad_linear_free(L);
}

/* ======================================================================
 * 5. Errors
 * ====================================================================== */

/* y_j = (j+1) x_(j mod n), or the constant j + 1/2 without inputs; counts
 * its calls. */
typedef struct counted {
    int calls;
} counted;

static void counted_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    counted *c = ctx;
    c->calls++;
    for (size_t j = 0; j < m; j++)
        y[j] = n ? ad_mul(x[j % n], (double)(j + 1)) : ad_const((double)j + 0.5);
}

static void assert_all_nan_n(const double *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_nan(p[i]);
}

#define SENTINEL 7.0
#define RESET() (fill(y, 2, SENTINEL), fill(jv, 2, SENTINEL), \
                 fill(wj, 3, SENTINEL), fill(jac, 6, SENTINEL))

static void test_null_arguments(void **state)
{
    counted c = {0};
    const double x[3] = {1.0, 2.0, 3.0}, v[3] = {1.0, 1.0, 1.0}, w[2] = {1.0, -1.0};
    double y[2], jv[2], wj[3], jac[6];
    ad_linear *L;
    (void)state;

    RESET();
    assert_int_equal(ad_jvp(NULL, &c, 3, x, v, 2, y, jv), AD_EINVAL);
    assert_all_nan_n(y, 2), assert_all_nan_n(jv, 2);
    RESET();
    assert_int_equal(ad_jvp(counted_f, &c, 3, NULL, v, 2, y, jv), AD_EINVAL);
    assert_all_nan_n(y, 2), assert_all_nan_n(jv, 2);
    RESET();
    assert_int_equal(ad_jvp(counted_f, &c, 3, x, NULL, 2, y, jv), AD_EINVAL);
    assert_all_nan_n(y, 2), assert_all_nan_n(jv, 2);
    RESET();
    assert_int_equal(ad_jvp(counted_f, &c, 3, x, v, 2, NULL, jv), AD_EINVAL);
    assert_all_nan_n(jv, 2);
    RESET();
    assert_int_equal(ad_jvp(counted_f, &c, 3, x, v, 2, y, NULL), AD_EINVAL);
    assert_all_nan_n(y, 2);

    RESET();
    assert_int_equal(ad_vjp(NULL, &c, 3, x, 2, w, y, wj), AD_EINVAL);
    assert_all_nan_n(y, 2), assert_all_nan_n(wj, 3);
    RESET();
    assert_int_equal(ad_vjp(counted_f, &c, 3, NULL, 2, w, y, wj), AD_EINVAL);
    assert_all_nan_n(y, 2), assert_all_nan_n(wj, 3);
    RESET();
    assert_int_equal(ad_vjp(counted_f, &c, 3, x, 2, NULL, y, wj), AD_EINVAL);
    assert_all_nan_n(y, 2), assert_all_nan_n(wj, 3);
    RESET();
    assert_int_equal(ad_vjp(counted_f, &c, 3, x, 2, w, NULL, wj), AD_EINVAL);
    assert_all_nan_n(wj, 3);
    RESET();
    assert_int_equal(ad_vjp(counted_f, &c, 3, x, 2, w, y, NULL), AD_EINVAL);
    assert_all_nan_n(y, 2);

    RESET();
    assert_int_equal(ad_jacobian(NULL, &c, 3, x, 2, y, jac), AD_EINVAL);
    assert_all_nan_n(y, 2), assert_all_nan_n(jac, 6);
    RESET();
    assert_int_equal(ad_jacobian(counted_f, &c, 3, NULL, 2, y, jac), AD_EINVAL);
    assert_all_nan_n(y, 2), assert_all_nan_n(jac, 6);
    RESET();
    assert_int_equal(ad_jacobian(counted_f, &c, 3, x, 2, NULL, jac), AD_EINVAL);
    assert_all_nan_n(jac, 6);
    RESET();
    assert_int_equal(ad_jacobian(counted_f, &c, 3, x, 2, y, NULL), AD_EINVAL);
    assert_all_nan_n(y, 2);

    RESET();
    L = (ad_linear *)&c;  /* anything but NULL: must come back NULL */
    assert_int_equal(ad_linearize(NULL, &c, 3, x, 2, y, &L), AD_EINVAL);
    assert_null(L);
    assert_all_nan_n(y, 2);
    RESET();
    L = (ad_linear *)&c;
    assert_int_equal(ad_linearize(counted_f, &c, 3, NULL, 2, y, &L), AD_EINVAL);
    assert_null(L);
    assert_all_nan_n(y, 2);
    RESET();
    L = (ad_linear *)&c;
    assert_int_equal(ad_linearize(counted_f, &c, 3, x, 2, NULL, &L), AD_EINVAL);
    assert_null(L);
    RESET();
    assert_int_equal(ad_linearize(counted_f, &c, 3, x, 2, y, NULL), AD_EINVAL);
    assert_all_nan_n(y, 2);
    assert_int_equal(c.calls, 0);  /* f never ran */

    /* The handle's functions. */
    RESET();
    assert_int_equal(ad_linearize(counted_f, &c, 3, x, 2, y, &L), AD_OK);
    assert_int_equal(c.calls, 1);
    assert_same(y[0], 1.0);
    assert_same(y[1], 4.0);
    assert_int_equal(ad_linear_jvp(NULL, v, jv), AD_EINVAL);
    assert_int_equal(ad_linear_jvp(L, NULL, jv), AD_EINVAL);
    assert_all_nan_n(jv, 2);
    assert_int_equal(ad_linear_jvp(L, v, NULL), AD_EINVAL);
    assert_int_equal(ad_linear_vjp(NULL, w, wj), AD_EINVAL);
    assert_int_equal(ad_linear_vjp(L, NULL, wj), AD_EINVAL);
    assert_all_nan_n(wj, 3);
    assert_int_equal(ad_linear_vjp(L, w, NULL), AD_EINVAL);
    /* ... and the handle still works. */
    assert_int_equal(ad_linear_jvp(L, v, jv), AD_OK);
    assert_same(jv[0], 1.0);
    assert_same(jv[1], 2.0);
    assert_int_equal(ad_linear_vjp(L, w, wj), AD_OK);
    assert_same(wj[0], 1.0);
    assert_same(wj[1], -2.0);
    assert_true(wj[2] == 0.0);
    ad_linear_free(L);
    ad_linear_free(NULL);
    assert_int_equal(c.calls, 1);
}

/* ---- n = 0 and m = 0 ---- */

static void test_empty_shapes(void **state)
{
    counted c = {0};
    const double x[3] = {1.0, 2.0, 3.0}, v[3] = {1.0, -1.0, 0.5}, w[3] = {1.0, 2.0, 3.0};
    double y[3], jv[3], wj[3];
    ad_linear *L = NULL;
    (void)state;

    /* No inputs: the outputs are constants, J v = 0 (length m), J^T w empty. */
    fill(jv, 3, SENTINEL);
    assert_int_equal(ad_jvp(counted_f, &c, 0, NULL, NULL, 3, y, jv), AD_OK);
    for (size_t j = 0; j < 3; j++) {
        assert_same(y[j], (double)j + 0.5);
        assert_true(jv[j] == 0.0);
    }
    fill(y, 3, SENTINEL);
    assert_int_equal(ad_vjp(counted_f, &c, 0, NULL, 3, w, y, NULL), AD_OK);
    assert_same(y[2], 2.5);
    fill(y, 3, SENTINEL);
    assert_int_equal(ad_jacobian(counted_f, &c, 0, NULL, 3, y, NULL), AD_OK);
    assert_same(y[1], 1.5);
    assert_int_equal(ad_linearize(counted_f, &c, 0, NULL, 3, y, &L), AD_OK);
    assert_same(y[0], 0.5);
    fill(jv, 3, SENTINEL);
    assert_int_equal(ad_linear_jvp(L, NULL, jv), AD_OK);
    for (size_t j = 0; j < 3; j++)
        assert_true(jv[j] == 0.0);
    assert_int_equal(ad_linear_vjp(L, w, NULL), AD_OK);
    ad_linear_free(L);

    /* No outputs: J v empty, J^T w = 0 (length n). */
    assert_int_equal(ad_jvp(counted_f, &c, 3, x, v, 0, NULL, NULL), AD_OK);
    fill(wj, 3, SENTINEL);
    assert_int_equal(ad_vjp(counted_f, &c, 3, x, 0, NULL, NULL, wj), AD_OK);
    for (size_t i = 0; i < 3; i++)
        assert_true(wj[i] == 0.0);
    assert_int_equal(ad_jacobian(counted_f, &c, 3, x, 0, NULL, NULL), AD_OK);
    assert_int_equal(ad_linearize(counted_f, &c, 3, x, 0, NULL, &L), AD_OK);
    assert_int_equal(ad_linear_jvp(L, v, NULL), AD_OK);
    fill(wj, 3, SENTINEL);
    assert_int_equal(ad_linear_vjp(L, NULL, wj), AD_OK);
    for (size_t i = 0; i < 3; i++)
        assert_true(wj[i] == 0.0);
    ad_linear_free(L);

    /* Neither. */
    assert_int_equal(ad_jvp(counted_f, &c, 0, NULL, NULL, 0, NULL, NULL), AD_OK);
    assert_int_equal(ad_vjp(counted_f, &c, 0, NULL, 0, NULL, NULL, NULL), AD_OK);
    assert_int_equal(ad_jacobian(counted_f, &c, 0, NULL, 0, NULL, NULL), AD_OK);
    assert_int_equal(ad_linearize(counted_f, &c, 0, NULL, 0, NULL, &L), AD_OK);
    assert_int_equal(ad_linear_jvp(L, NULL, NULL), AD_OK);
    assert_int_equal(ad_linear_vjp(L, NULL, NULL), AD_OK);
    ad_linear_free(L);

    /* A Jacobian with one side empty needs no jac array, even with the
     * other side non-empty. */
    assert_int_equal(ad_jacobian(counted_f, &c, 3, x, 0, NULL, NULL), AD_OK);
    assert_int_equal(ad_jacobian(counted_f, &c, 0, NULL, 2, y, NULL), AD_OK);
    assert_int_equal(c.calls, 14);
}

/* ---- allocation failure ---- */

/* y_j = (j+1) x_0 x_(j mod n), after `pad` multiplications of x_0 by 1:
 * pad + 2m records. */
typedef struct padded {
    long pad;
} padded;

static void padded_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const padded *p = ctx;
    ad_real t = x[0];
    for (long k = 0; k < p->pad; k++)
        t = ad_mul(t, 1.0);
    for (size_t j = 0; j < m; j++)
        y[j] = ad_mul(ad_mul(t, x[j % n]), (double)(j + 1));
}

static void padded_want(size_t n, size_t m, const double *x, double *y, double *J)
{
    memset(J, 0, n * m * sizeof *J);
    for (size_t j = 0; j < m; j++) {
        y[j] = x[0] * x[j % n] * (double)(j + 1);
        J[j * n] += (double)(j + 1) * x[j % n];
        J[j * n + j % n] += (double)(j + 1) * x[0];
    }
}

enum api { API_JACOBIAN, API_JVP, API_VJP, API_LINEARIZE };

#define PMAX 4

/* One call of `which` on padded_f; res gets jac, jv or wj (for a
 * linearization: J v, and J^T w in res + m). */
static ad_status call_api(enum api which, padded *ctx, size_t n, size_t m, const double *x,
                          const double *v, const double *w, double *y, double *res, ad_linear **L)
{
    switch (which) {
    case API_JACOBIAN: return ad_jacobian(padded_f, ctx, n, x, m, y, res);
    case API_JVP: return ad_jvp(padded_f, ctx, n, x, v, m, y, res);
    case API_VJP: return ad_vjp(padded_f, ctx, n, x, m, w, y, res);
    default: return ad_linearize(padded_f, ctx, n, x, m, y, L);
    }
}

static size_t result_len(enum api which, size_t n, size_t m)
{
    return which == API_JACOBIAN ? n * m : which == API_JVP ? m : which == API_VJP ? n : 0;
}

/* The results of a successful call, exactly (the values are dyadic). */
static void check_api_ok(enum api which, size_t n, size_t m, const double *x, const double *v,
                         const double *w, const double *y, const double *res, ad_linear *L)
{
    double yw[PMAX], Jw[PMAX * PMAX], jv[PMAX], wj[PMAX];
    padded_want(n, m, x, yw, Jw);
    for (size_t j = 0; j < m; j++)
        assert_same(y[j], yw[j]);
    if (which == API_LINEARIZE) {
        ad_test_fail_alloc_after(0);
        ad_status s1 = ad_linear_jvp(L, v, jv), s2 = ad_linear_vjp(L, w, wj);
        ad_test_fail_alloc_after(-1);
        assert_int_equal(s1, AD_OK);
        assert_int_equal(s2, AD_OK);
    }
    for (size_t j = 0; j < m; j++) {
        double want = 0.0;
        for (size_t i = 0; i < n; i++)
            want += Jw[j * n + i] * v[i];
        if (which == API_JVP)
            assert_same(res[j], want);
        if (which == API_LINEARIZE)
            assert_same(jv[j], want);
    }
    for (size_t i = 0; i < n; i++) {
        double want = 0.0;
        for (size_t j = 0; j < m; j++)
            want += w[j] * Jw[j * n + i];
        if (which == API_VJP)
            assert_same(res[i], want);
        if (which == API_LINEARIZE)
            assert_same(wj[i], want);
    }
    if (which == API_JACOBIAN)
        for (size_t k = 0; k < n * m; k++)
            assert_same(res[k], Jw[k]);
}

/* Fails allocation i = 0, 1, 2, ... of the call until three calls in a row
 * succeed; every failed call must report AD_ENOMEM with NaN outputs (a NULL
 * handle), every successful one the right numbers.  With fresh set, each
 * attempt starts from released thread memory; otherwise it inherits what
 * the failed attempts had allocated.  Returns the number of failures. */
static int alloc_failures(enum api which, size_t n, size_t m, long pad, int fresh)
{
    const double x[PMAX] = {1.5, -0.75, 2.0, 0.5}, v[PMAX] = {0.5, -1.0, 0.25, 2.0};
    const double w[PMAX] = {1.0, -0.5, 2.0, 0.25};
    padded ctx = {pad};
    int failures = 0, successes = 0;
    assert_true(n <= PMAX && m <= PMAX);
    assert_int_equal(ad_release(), AD_OK);
    for (long i = 0; successes < 3; i++) {
        double y[PMAX], res[PMAX * PMAX];
        ad_linear *L = (ad_linear *)&ctx;
        fill(y, PMAX, SENTINEL);
        fill(res, PMAX * PMAX, SENTINEL);
        if (fresh)
            assert_int_equal(ad_release(), AD_OK);
        ad_test_fail_alloc_after(i);
        ad_status st = call_api(which, &ctx, n, m, x, v, w, y, res, &L);
        ad_test_fail_alloc_after(-1);
        if (st == AD_OK) {
            successes++;
            check_api_ok(which, n, m, x, v, w, y, res, L);
            if (which == API_LINEARIZE)
                ad_linear_free(L);
            continue;
        }
        assert_alloc_failure(i, st, successes);
        failures++;
        assert_all_nan_n(y, m);
        assert_all_nan_n(res, result_len(which, n, m));
        if (which == API_LINEARIZE)
            assert_null(L);
        assert_true(i < 500);
    }
    return failures;
}

/* Past 16 chunks the chunk table grows too, so every kind of allocation of
 * a recording gets its turn to fail. */
#define MANY_CHUNKS (17 * 65536L)

static void test_alloc_failure_jacobian(void **state)
{
    (void)state;
    /* inputs, outputs, chunk table, chunks 0 to 3, 4 slabs of 4 chunks, the
     * larger table, work array */
    assert_true(alloc_failures(API_JACOBIAN, 3, 2, MANY_CHUNKS, 1) >= 13);  /* reverse sweeps */
    assert_true(alloc_failures(API_JACOBIAN, 3, 2, MANY_CHUNKS, 0) >= 3);
    assert_true(alloc_failures(API_JACOBIAN, 2, 4, 3 * 65536L, 1) >= 6);   /* forward sweeps */
    assert_true(alloc_failures(API_JACOBIAN, 2, 4, 10, 0) >= 2);
}

static void test_alloc_failure_jvp_vjp(void **state)
{
    (void)state;
    assert_true(alloc_failures(API_JVP, 3, 2, 3 * 65536L, 1) >= 6);
    assert_true(alloc_failures(API_VJP, 3, 2, 3 * 65536L, 1) >= 6);
    assert_true(alloc_failures(API_JVP, 4, 4, 10, 0) >= 2);
    assert_true(alloc_failures(API_VJP, 4, 4, 10, 0) >= 2);
}

static void test_alloc_failure_linearize(void **state)
{
    (void)state;
    /* the handle, inputs, outputs, chunk table, chunks 0 to 3, 4 slabs of 4
     * chunks, the larger table, work array: fresh every time, as the
     * handle has its own tape */
    assert_true(alloc_failures(API_LINEARIZE, 3, 2, MANY_CHUNKS, 0) >= 14);
    assert_true(alloc_failures(API_LINEARIZE, 1, 1, 0, 0) >= 5);
}

/* ---- the tape limit ---- */

static void check_limited(enum api which, size_t n, size_t m, long pad, ad_status want)
{
    const double x[PMAX] = {1.5, -0.75, 2.0, 0.5}, v[PMAX] = {0.5, -1.0, 0.25, 2.0};
    const double w[PMAX] = {1.0, -0.5, 2.0, 0.25};
    padded ctx = {pad};
    double y[PMAX], res[PMAX * PMAX];
    ad_linear *L = (ad_linear *)&ctx;
    fill(y, PMAX, SENTINEL);
    fill(res, PMAX * PMAX, SENTINEL);
    ad_status st = call_api(which, &ctx, n, m, x, v, w, y, res, &L);
    assert_int_equal(st, want);
    if (st == AD_OK) {
        check_api_ok(which, n, m, x, v, w, y, res, L);
        if (which == API_LINEARIZE)
            ad_linear_free(L);
        return;
    }
    assert_all_nan_n(y, m);
    assert_all_nan_n(res, result_len(which, n, m));
    if (which == API_LINEARIZE)
        assert_null(L);
}

static void test_tape_limit(void **state)
{
    (void)state;
    assert_int_equal(ad_set_tape_limit(100), 0);
    for (int a = API_JACOBIAN; a <= API_LINEARIZE; a++) {
        check_limited((enum api)a, 2, 3, 100 - 6, AD_OK);  /* exactly 100 records */
        check_limited((enum api)a, 2, 3, 100 - 5, AD_ERANGE);
        check_limited((enum api)a, 3, 2, 1000000, AD_ERANGE);
    }
    /* A limit inside the second chunk. */
    ad_set_tape_limit(70000);
    for (int a = API_JACOBIAN; a <= API_LINEARIZE; a++) {
        check_limited((enum api)a, 3, 2, 70000 - 4, AD_OK);
        check_limited((enum api)a, 3, 2, 70000 - 3, AD_ERANGE);
    }
    assert_int_equal(ad_set_tape_limit(0), 70000);
    for (int a = API_JACOBIAN; a <= API_LINEARIZE; a++)
        check_limited((enum api)a, 3, 2, 200000, AD_OK);
}

/* ---- values from other recordings ---- */


/* Every entry point on f, without assertions (it may run inside an
 * objective); check_foreign_probe checks the results. */
typedef struct foreign_probe {
    ad_status st[5];
    double out[17];  /* every output array, end to end */
    int handle_given;
    ad_csr S;
} foreign_probe;

static void run_foreign_probe(ad_function f, void *ctx, foreign_probe *p)
{
    const double x[1] = {1.0}, v[1] = {1.0}, w[2] = {1.0, 1.0};
    double *o = p->out;
    ad_linear *L = (ad_linear *)ctx;
    fill(o, 17, SENTINEL);
    memset(&p->S, 0xa5, sizeof p->S);  /* junk: must come back empty */
    p->st[0] = ad_jvp(f, ctx, 1, x, v, 2, o, o + 2);      /* out[0..4) */
    p->st[1] = ad_vjp(f, ctx, 1, x, 2, w, o + 4, o + 6);  /* out[4..7) */
    p->st[2] = ad_jacobian(f, ctx, 1, x, 2, o + 7, o + 9); /* out[7..11) */
    p->st[3] = ad_linearize(f, ctx, 1, x, 2, o + 11, &L); /* out[11..13) */
    p->handle_given = L != NULL;
    if (p->st[3] == AD_OK)
        ad_linear_free(L);
    p->st[4] = ad_sparse_jacobian(f, ctx, 1, x, 2, o + 13, &p->S);  /* out[13..15) */
}

static void check_foreign_probe(foreign_probe *p)
{
    for (int k = 0; k < 5; k++)
        assert_int_equal(p->st[k], AD_EFOREIGN);
    assert_all_nan_n(p->out, 15);
    assert_false(p->handle_given);
    assert_csr_empty(&p->S);
}

static void check_all_foreign(ad_function f, void *ctx)
{
    foreign_probe p;
    run_foreign_probe(f, ctx, &p);
    check_foreign_probe(&p);
}

static void test_foreign_from_earlier_recording(void **state)
{
    static const long later_lengths[] = {999, 1};
    (void)state;
    for (size_t i = 0; i < 2; i++) {
        fn_smuggler s = {1, 1000, {0, 0, 0}};
        const double x[1] = {1.0};
        double y[2], jac[2];
        assert_int_equal(ad_jacobian(fn_smuggle, &s, 1, x, 2, y, jac), AD_OK);
        assert_same(y[1], 1001.0);
        assert_same(jac[1], 1001.0);
        s.save = 0;
        s.length = later_lengths[i];  /* its last ID is one below, or far below */
        check_all_foreign(fn_smuggle, &s);
    }
}

/* f returns a value of the recording that called it. */
static void returns_outer_value(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const ad_real *outer = ctx;
    (void)n, (void)m;
    y[0] = x[0];
    y[1] = *outer;
}

static ad_real lends_value(const ad_real *x, size_t n, void *ctx)
{
    foreign_probe *p = ctx;
    ad_real v = x[0];
    (void)n;
    for (int k = 0; k < 1000; k++)
        v = ad_add(v, x[0]);  /* 1000 records */
    run_foreign_probe(returns_outer_value, &v, p);
    return v;
}

static void test_foreign_from_outer_recording(void **state)
{
    double x = 1.0, g;
    foreign_probe p;
    (void)state;
    assert_same(gradient_ok(lends_value, &p, 1, &x, &g), 1001.0);
    assert_same(g, 1001.0);
    check_foreign_probe(&p);
}

/* ---- nesting depth ---- */

typedef struct probes {
    ad_status jvp, vjp, jac, lin, sparse;
    double out[15];  /* every output array, end to end: all NaN on failure */
    ad_csr S;
    int ran;
} probes;

typedef struct lin_tower {
    int level;
    probes at[AD_MAX_NESTING + 1];
} lin_tower;

/* Every entry point, from inside the objective at this level. */
static void probe(probes *p)
{
    counted c = {0};
    const double x[2] = {1.0, 2.0}, v[2] = {1.0, 1.0}, w[2] = {1.0, 1.0};
    ad_linear *L = (ad_linear *)&c;
    double *o = p->out;
    p->ran = 1;
    p->jvp = ad_jvp(counted_f, &c, 2, x, v, 2, o, o + 2);             /* out[0..4) */
    p->vjp = ad_vjp(counted_f, &c, 2, x, 2, w, o + 4, o + 6);         /* out[4..8) */
    p->jac = ad_jacobian(counted_f, &c, 2, x, 1, o + 8, o + 9);       /* out[8..11) */
    p->lin = ad_linearize(counted_f, &c, 2, x, 2, o + 11, &L);        /* out[11..13) */
    if (p->lin != AD_OK && L)
        p->lin = AD_EINVAL;  /* a failed linearization must give no handle */
    if (p->lin == AD_OK)
        ad_linear_free(L);
    p->sparse = ad_sparse_jacobian(counted_f, &c, 2, x, 2, o + 13, &p->S);  /* out[13..15) */
}

static ad_real lin_tower_level(const ad_real *x, size_t n, void *ctx)
{
    lin_tower *t = ctx;
    int level = ++t->level;
    double at = ad_value(x[0]), fx, g;
    (void)n;
    if (level >= AD_MAX_NESTING - 1)
        probe(&t->at[level]);
    if (level < AD_MAX_NESTING)
        status_unused(ad_gradient(lin_tower_level, t, 1, &at, &fx, &g));
    t->level = level - 1;
    return ad_mul(x[0], x[0]);
}

static void test_nesting_too_deep(void **state)
{
    static lin_tower t;
    double x = 0.5, g;
    (void)state;
    memset(&t, 0, sizeof t);
    assert_same(gradient_ok(lin_tower_level, &t, 1, &x, &g), 0.25);
    assert_same(g, 1.0);
    /* At depth 15 there is room for one more recording; at 16 none. */
    probes *ok = &t.at[AD_MAX_NESTING - 1], *deep = &t.at[AD_MAX_NESTING];
    assert_true(ok->ran && deep->ran);
    assert_int_equal(ok->jvp, AD_OK);
    assert_int_equal(ok->vjp, AD_OK);
    assert_int_equal(ok->jac, AD_OK);
    assert_int_equal(ok->lin, AD_OK);
    assert_int_equal(ok->sparse, AD_OK);
    assert_csr_valid(&ok->S, 2, 2);
    assert_int_equal(ok->S.nnz, 2);
    ad_csr_free(&ok->S);
    assert_int_equal(deep->jvp, AD_ENESTING);
    assert_int_equal(deep->vjp, AD_ENESTING);
    assert_int_equal(deep->jac, AD_ENESTING);
    assert_int_equal(deep->lin, AD_ENESTING);
    assert_int_equal(deep->sparse, AD_ENESTING);
    assert_all_nan_n(deep->out, 15);
    assert_csr_empty(&deep->S);
}

/* ======================================================================
 * 6. Threads
 *
 * Workers never call cmocka's assertions (those longjmp within one thread):
 * they count failures and keep the first message for the main thread.
 * ====================================================================== */

#define THREADS 4
#define ROUNDS 36

typedef struct lin_worker {
    int index;
    atomic_int *ready;
    int rounds, failures;
    char first[200];
    /* a handle made by the main thread, with its results there */
    ad_linear *given;
    size_t gn, gm;
    double gv[40], gw[40], gjv[40], gwj[40];
    /* a handle made here, for the main thread to use after this thread
     * (and its tapes) are gone, with the point it was made at */
    ad_linear *made;
    double mx[12];
} lin_worker;

static void lw_report(lin_worker *w, const char *what, size_t n, size_t m, size_t k, double got,
                      double want)
{
    if (w->failures++ == 0)
        snprintf(w->first, sizeof w->first, "thread %d, %zu x %zu: %s[%zu] = %.17g, expected %.17g",
                 w->index, m, n, what, k, got, want);
}

static int lw_near(double got, double want, double atol)
{
    return fabs(got - want) <= 1e-12 * fabs(want) + atol;
}

static void lw_round(lin_worker *w, int round)
{
    uint64_t rng = (uint64_t)(w->index * 7919 + round * 104729 + 1);
    size_t n = 1 + rng_next(&rng) % 60, m = 1 + rng_next(&rng) % 60;
    if (round % 12 == 5)
        n = 400, m = 90;
    double *x = malloc(n * sizeof *x), *v = malloc(n * sizeof *v), *wj = malloc(n * sizeof *wj);
    double *y = malloc(m * sizeof *y), *yw = malloc(m * sizeof *yw), *ww = malloc(m * sizeof *ww);
    double *jv = malloc(m * sizeof *jv), *J = malloc(n * m * sizeof *J), *Jw = malloc(n * m * sizeof *Jw);
    unsigned char *flags = malloc(n);
    if (!x || !v || !wj || !y || !yw || !ww || !jv || !J || !Jw || !flags) {
        lw_report(w, "malloc", n, m, 0, 0, 0);
        goto out;
    }
    fill_uniform(&rng, x, n, 0.5, 2.0);
    fill_uniform(&rng, v, n, -1.0, 1.0);
    fill_uniform(&rng, ww, m, -1.0, 1.0);
    mixed_want(n, m, x, yw, Jw);
    int kind = (round + w->index) % 3;
    if (kind == 0) {
        ad_status s = ad_jacobian(mixed, NULL, n, x, m, y, J);
        if (s != AD_OK)
            lw_report(w, "jacobian status", n, m, 0, s, AD_OK);
        else
            for (size_t k = 0; k < n * m; k++)
                if (!lw_near(J[k], Jw[k], 1e-15))
                    lw_report(w, "jacobian", n, m, k, J[k], Jw[k]);
    } else if (kind == 1) {
        ad_linear *L = NULL;
        ad_status s = ad_linearize(mixed, NULL, n, x, m, y, &L);
        if (s == AD_OK)
            s = ad_linear_jvp(L, v, jv);
        if (s == AD_OK)
            s = ad_linear_vjp(L, ww, wj);
        ad_linear_free(L);
        if (s != AD_OK)
            lw_report(w, "linearize status", n, m, 0, s, AD_OK);
        for (size_t j = 0; j < m && s == AD_OK; j++) {
            double want = 0.0, scale = 0.0;
            for (size_t i = 0; i < n; i++) {
                want += Jw[j * n + i] * v[i];
                scale += fabs(Jw[j * n + i] * v[i]);
            }
            if (!(fabs(jv[j] - want) <= 1e-12 * scale + 1e-300))
                lw_report(w, "J v", n, m, j, jv[j], want);
        }
        for (size_t i = 0; i < n && s == AD_OK; i++) {
            double want = 0.0, scale = 0.0;
            for (size_t j = 0; j < m; j++) {
                want += ww[j] * Jw[j * n + i];
                scale += fabs(ww[j] * Jw[j * n + i]);
            }
            if (!(fabs(wj[i] - want) <= 1e-12 * scale + 1e-300))
                lw_report(w, "J^T w", n, m, i, wj[i], want);
        }
    } else {
        ad_csr S;
        ad_test_sparse_force_hash(round % 2);  /* per thread */
        ad_status s = ad_sparse_jacobian(mixed, NULL, n, x, m, y, &S);
        ad_test_sparse_force_hash(0);
        if (s != AD_OK || S.rows != m || S.cols != n || S.row_ptr[0] != 0 || S.row_ptr[m] != S.nnz) {
            lw_report(w, "sparse status", n, m, 0, s, AD_OK);
        } else {
            for (size_t j = 0; j < m; j++) {
                mixed_structure(j, n, flags);
                size_t expect = 0;
                for (size_t i = 0; i < n; i++)
                    expect += flags[i];
                if (S.row_ptr[j + 1] - S.row_ptr[j] != expect)
                    lw_report(w, "sparse row length", n, m, j, (double)(S.row_ptr[j + 1] - S.row_ptr[j]),
                              (double)expect);
                for (size_t k = S.row_ptr[j]; k < S.row_ptr[j + 1]; k++) {
                    size_t i = S.col[k];
                    if (i >= n || !flags[i] || (k > S.row_ptr[j] && i <= S.col[k - 1]))
                        lw_report(w, "sparse column", n, m, k, (double)i, -1.0);
                    else if (!lw_near(S.val[k], Jw[j * n + i], 1e-15))
                        lw_report(w, "sparse value", n, m, k, S.val[k], Jw[j * n + i]);
                }
            }
        }
        ad_csr_free(&S);
    }
    for (size_t j = 0; j < m; j++)
        if (!(fabs(y[j] - yw[j]) <= 1e-14 * fabs(yw[j])))
            lw_report(w, "y", n, m, j, y[j], yw[j]);

    /* The handle the main thread made, applied here: same numbers. */
    double gjv[40], gwj[40];
    if (ad_linear_jvp(w->given, w->gv, gjv) != AD_OK || ad_linear_vjp(w->given, w->gw, gwj) != AD_OK)
        lw_report(w, "given handle status", w->gn, w->gm, 0, 0, 0);
    for (size_t j = 0; j < w->gm; j++)
        if (!same_double(gjv[j], w->gjv[j]))
            lw_report(w, "given J v", w->gn, w->gm, j, gjv[j], w->gjv[j]);
    for (size_t i = 0; i < w->gn; i++)
        if (!same_double(gwj[i], w->gwj[i]))
            lw_report(w, "given J^T w", w->gn, w->gm, i, gwj[i], w->gwj[i]);
out:
    free(x), free(v), free(wj), free(y), free(yw), free(ww), free(jv), free(J), free(Jw), free(flags);
}

static void *lw_main(void *arg)
{
    lin_worker *w = arg;
    atomic_fetch_add(w->ready, 1);
    while (atomic_load(w->ready) < THREADS)
        sched_yield();
    for (int round = 0; round < ROUNDS; round++, w->rounds++)
        lw_round(w, round);
    double y[20];
    uint64_t rng = (uint64_t)w->index + 99;
    fill_uniform(&rng, w->mx, 12, 0.5, 2.0);
    if (ad_linearize(mixed, NULL, 12, w->mx, 20, y, &w->made) != AD_OK)
        lw_report(w, "made handle status", 12, 20, 0, 0, 0);
    return NULL;
}

static void test_threads(void **state)
{
    static lin_worker workers[THREADS];
    atomic_int ready = 0;
    pthread_t t[THREADS];
    uint64_t rng = 0x7777;
    (void)state;
    for (int i = 0; i < THREADS; i++) {
        lin_worker *w = &workers[i];
        memset(w, 0, sizeof *w);
        w->index = i;
        w->ready = &ready;
        w->gn = 10 + (size_t)i * 7;
        w->gm = 40 - (size_t)i * 5;
        double x[40], y[40];
        fill_uniform(&rng, x, w->gn, 0.5, 2.0);
        fill_uniform(&rng, w->gv, w->gn, -1.0, 1.0);
        fill_uniform(&rng, w->gw, w->gm, -1.0, 1.0);
        assert_int_equal(ad_linearize(mixed, NULL, w->gn, x, w->gm, y, &w->given), AD_OK);
        assert_int_equal(ad_linear_jvp(w->given, w->gv, w->gjv), AD_OK);
        assert_int_equal(ad_linear_vjp(w->given, w->gw, w->gwj), AD_OK);
    }
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, lw_main, &workers[i]), 0);
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < THREADS; i++) {
        if (workers[i].failures)
            print_error("%d failures, first: %s\n", workers[i].failures, workers[i].first);
        assert_int_equal(workers[i].failures, 0);
        assert_int_equal(workers[i].rounds, ROUNDS);
        ad_linear_free(workers[i].given);
        /* The worker's handle outlives the worker. */
        double yw[20], Jw[12 * 20];
        mixed_want(12, 20, workers[i].mx, yw, Jw);
        assert_non_null(workers[i].made);
        check_linear_against_closed_form(workers[i].made, 12, 20, Jw, &rng);
        ad_linear_free(workers[i].made);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jacobian_closed_form),
        cmocka_unit_test(test_jacobian_of_inputs_and_constants),
        cmocka_unit_test(test_unwritten_output_is_nan),
        cmocka_unit_test(test_transposition_random_programs),
        cmocka_unit_test(test_transposition_long_program),
        cmocka_unit_test(test_jacobian_random_programs),
        cmocka_unit_test(test_jacobian_random_programs_fd),
        cmocka_unit_test(test_linearize_reuse),
        cmocka_unit_test(test_directions_against_single_calls),
        cmocka_unit_test(test_directions_closed_form),
        cmocka_unit_test(test_directions_errors),
        cmocka_unit_test(test_linearize_inside_gradient),
        cmocka_unit_test(test_linear_handle_keeps_its_own_tape),
        cmocka_unit_test(test_null_arguments),
        cmocka_unit_test(test_empty_shapes),
        cmocka_unit_test(test_alloc_failure_jacobian),
        cmocka_unit_test(test_alloc_failure_jvp_vjp),
        cmocka_unit_test(test_alloc_failure_linearize),
        cmocka_unit_test(test_tape_limit),
        cmocka_unit_test(test_foreign_from_earlier_recording),
        cmocka_unit_test(test_foreign_from_outer_recording),
        cmocka_unit_test(test_nesting_too_deep),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_sparse_random_programs),
    };
    return cmocka_run_group_tests_name("linear", tests, NULL, NULL);
}
