/* The array primitives of include/dualrev/nary.h: ad_dot (all four forms),
 * ad_sum, ad_sqnorm, ad_prod, ad_logsumexp, ad_matvec, ad_matvec_rr and
 * ad_axpy.
 *
 * Oracles:
 *   - the same reduction unrolled into scalar operations (ad_mul, ad_add,
 *     ad_exp, ...; logsumexp shifted by its largest element), value and
 *     gradient to 1e-12 relative, at seeded random points;
 *   - gradients in closed form (dot: the other vector; sqnorm: 2x; prod: the
 *     product of the others; logsumexp: the softmax);
 *   - the tape: one n-ary record per output, whose size is predictable
 *     exactly from ad_tape_stats_get (k arguments: ceil(k/2) slots, plus a
 *     header slot when there is more than one), and its layout in
 *     ad_tape_dump;
 *   - the conventions of ad_prod (zeros, no division) and ad_logsumexp
 *     (empty, NaN, infinite and huge inputs);
 *   - Jacobians of functions built from the primitives: closed form,
 *     ad_jvp / ad_vjp, the transposition identity, ad_sparse_jacobian's
 *     structure (exactly the active arguments). */
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../lib/drivers/testing.h"

#define CHUNK 65536L
#define BIG_N (2 * 65536 + 3)  /* prod and logsumexp runs longer than a chunk */

#define IS_DOUBLE(e) _Generic((e), double: 1, default: 0)
#define IS_AD(e) _Generic((e), ad_real: 1, default: 0)

/* Records of one primitive over k arguments (k > 0, some active). */
static size_t nary_records(size_t k)
{
    size_t slots = (k + 1) / 2;
    return slots + (slots > 1);
}

static size_t last_records(void)
{
    ad_tape_stats st;
    assert_int_equal(ad_tape_stats_get(&st), AD_OK);
    return st.records;
}

/* ======================================================================
 * 1. Reductions against their scalar unrolling and closed forms
 * ====================================================================== */

enum kind { K_DOT, K_DOT_RD, K_DOT_DR, K_DOT_SELF, K_SUM, K_SQNORM, K_PROD, K_LSE, KINDS };
static const char *const kind_name[KINDS] = {"dot_r",  "dot_rd", "dot_dr", "dot_self",
                                              "sum",    "sqnorm", "prod",   "logsumexp"};

/* The objective: the primitive (through its generic name) over the inputs,
 * or its scalar unrolling.  K_DOT reads x[0..n) and x[n..2n); the others
 * x[0..n), with c as the constant vector of K_DOT_RD and K_DOT_DR. */
typedef struct reduction {
    enum kind kind;
    size_t n;
    const double *c;
    int unrolled;
    long pad;  /* records before the primitive: x[0] multiplied by 1 */
} reduction;

static size_t inputs_of(const reduction *r)
{
    return r->kind == K_DOT ? 2 * r->n : r->n;
}

static ad_real unrolled(const reduction *r, const ad_real *x)
{
    size_t n = r->n;
    ad_real s = ad_const(r->kind == K_PROD ? 1.0 : 0.0);
    if (r->kind == K_LSE) {
        /* max + log sum exp(x - max), the max a constant: the same function
         * (its gradient is the softmax either way), without the cancellation
         * of 1 - sum softmax that an active max would bring. */
        double mx = -INFINITY;
        for (size_t i = 0; i < n; i++)
            mx = fmax(mx, ad_value(x[i]));
        if (n == 0)
            return ad_const(-INFINITY);
        for (size_t i = 0; i < n; i++)
            s = ad_add(s, ad_exp(ad_sub(x[i], mx)));
        return ad_add(mx, ad_log(s));
    }
    for (size_t i = 0; i < n; i++) {
        switch (r->kind) {
        case K_DOT: s = ad_add(s, ad_mul(x[i], x[n + i])); break;
        case K_DOT_RD: s = ad_add(s, ad_mul(x[i], r->c[i])); break;
        case K_DOT_DR: s = ad_add(s, ad_mul(r->c[i], x[i])); break;
        case K_SUM: s = ad_add(s, x[i]); break;
        case K_DOT_SELF:
        case K_SQNORM: s = ad_add(s, ad_mul(x[i], x[i])); break;
        default: s = ad_mul(s, x[i]); break;
        }
    }
    return s;
}

static ad_real primitive(const reduction *r, const ad_real *x)
{
    size_t n = r->n;
    const double *c = r->c;
    switch (r->kind) {
    case K_DOT: return ad_dot(n, x, x + n);
    case K_DOT_RD: return ad_dot(n, x, c);
    case K_DOT_DR: return ad_dot(n, c, x);
    case K_DOT_SELF: return ad_dot(n, x, x);
    case K_SUM: return ad_sum(n, x);
    case K_SQNORM: return ad_sqnorm(n, x);
    case K_PROD: return ad_prod(n, x);
    default: return ad_logsumexp(n, x);
    }
}

static ad_real reduction_objective(const ad_real *x, size_t n_inputs, void *ctx)
{
    const reduction *r = ctx;
    static ad_real args[2 * BIG_N];  /* tests run on one thread */
    if (!r->pad)
        return r->unrolled ? unrolled(r, x) : primitive(r, x);
    memcpy(args, x, n_inputs * sizeof *x);
    for (long k = 0; k < r->pad; k++)
        args[0] = ad_mul(args[0], 1.0);
    return r->unrolled ? unrolled(r, args) : primitive(r, args);
}

/* Value and gradient of the reduction in closed form (prod: prefix x
 * suffix products; logsumexp: the softmax, shifted by the largest
 * element). */
static double closed_form(const reduction *r, const double *x, double *grad)
{
    size_t n = r->n;
    double v = 0.0;
    switch (r->kind) {
    case K_DOT:
        for (size_t i = 0; i < n; i++) {
            v += x[i] * x[n + i];
            grad[i] = x[n + i];
            grad[n + i] = x[i];
        }
        return v;
    case K_DOT_RD:
    case K_DOT_DR:
        for (size_t i = 0; i < n; i++) {
            v += x[i] * r->c[i];
            grad[i] = r->c[i];
        }
        return v;
    case K_SUM:
        for (size_t i = 0; i < n; i++) {
            v += x[i];
            grad[i] = 1.0;
        }
        return v;
    case K_DOT_SELF:
    case K_SQNORM:
        for (size_t i = 0; i < n; i++) {
            v += x[i] * x[i];
            grad[i] = 2.0 * x[i];
        }
        return v;
    case K_PROD: {
        /* prefix x suffix: the product of the others, without division */
        double prefix = 1.0;
        for (size_t i = 0; i < n; i++) {
            grad[i] = prefix;
            prefix *= x[i];
        }
        double suffix = 1.0;
        for (size_t i = n; i-- > 0;) {
            grad[i] *= suffix;
            suffix *= x[i];
        }
        return prefix;
    }
    default: {
        double mx = -INFINITY, s = 0.0;
        for (size_t i = 0; i < n; i++)
            mx = fmax(mx, x[i]);
        if (n == 0)
            return -INFINITY;
        for (size_t i = 0; i < n; i++)
            s += exp(x[i] - mx);
        for (size_t i = 0; i < n; i++)
            grad[i] = exp(x[i] - mx) / s;
        return mx + log(s);
    }
    }
}

/* Sample points: values that keep every reduction well away from 0 and
 * the products of 1000 factors inside the range of double. */
static void sample(enum kind kind, uint64_t *rng, double *x, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        switch (kind) {
        case K_PROD: {
            double mag = rng_uniform(rng, 0.5, 1.5);
            x[i] = rng_next(rng) % 2 ? mag : -mag;
            break;
        }
        case K_LSE: x[i] = rng_uniform(rng, 1.0, 6.0); break;  /* logsumexp >= 1 */
        case K_DOT_SELF:
        case K_SQNORM: x[i] = rng_uniform(rng, -2.0, 2.0); break;
        default: x[i] = rng_uniform(rng, 0.25, 2.0); break;  /* sums of positive terms */
        }
    }
}

static void check_reduction(enum kind kind, size_t n, uint64_t seed)
{
    uint64_t rng = seed;
    reduction r = {kind, n, NULL, 0, 0};
    size_t inputs = inputs_of(&r);
    double *x = xmalloc(inputs * sizeof *x), *c = xmalloc(n * sizeof *c);
    double *g = xmalloc(inputs * sizeof *g), *gu = xmalloc(inputs * sizeof *gu);
    double *gw = xmalloc(inputs * sizeof *gw);
    sample(kind, &rng, x, inputs);
    fill_uniform(&rng, c, n, -2.0, 2.0);
    r.c = c;

    double fx = gradient_ok(reduction_objective, &r, inputs, x, g);
    size_t records = last_records();
    r.unrolled = 1;
    double fu = gradient_ok(reduction_objective, &r, inputs, x, gu);
    double fw = closed_form(&r, x, gw);

    if (!(fabs(fx - fu) <= 1e-12 * fabs(fu)) || !(fabs(fx - fw) <= 1e-12 * fabs(fw)))
        if (!(n == 0 && same_double(fx, fw) && same_double(fu, fw))) {
            print_error("%s n=%zu: value %.17g, unrolled %.17g, closed form %.17g\n",
                        kind_name[kind], n, fx, fu, fw);
            fail();
        }
    for (size_t i = 0; i < inputs; i++) {
        if (!(fabs(g[i] - gu[i]) <= 1e-12 * fabs(gu[i])) ||
            !(fabs(g[i] - gw[i]) <= 1e-12 * fabs(gw[i]))) {
            print_error("%s n=%zu: grad[%zu] = %.17g, unrolled %.17g, closed form %.17g\n",
                        kind_name[kind], n, i, g[i], gu[i], gw[i]);
            fail();
        }
    }
    /* One record: ceil(k/2) slots for k arguments (dot_r: one slot per
     * pair; dot_self: the layout of sqnorm), and a header when more than
     * one. */
    size_t want = n == 0 ? 0 : nary_records(kind == K_DOT ? 2 * n : n);
    if (records != want) {
        print_error("%s n=%zu: %zu records, expected %zu\n", kind_name[kind], n, records, want);
        fail();
    }
    free(x), free(c), free(g), free(gu), free(gw);
}

static const size_t sizes[] = {0, 1, 2, 3, 4, 5, 7, 8, 16, 31, 64, 999, 1000};
#define N_SIZES (sizeof sizes / sizeof sizes[0])

static void test_reductions_against_unrolled(void **state)
{
    (void)state;
    for (int k = 0; k < KINDS; k++)
        for (size_t s = 0; s < N_SIZES; s++)
            for (uint64_t seed = 1; seed <= 3; seed++)
                check_reduction((enum kind)k, sizes[s], seed * 7919 + s * 31 + (uint64_t)k);
}

/* The spec's own examples of record counts. */
static void test_record_counts(void **state)
{
    static double x[2000], g[2000], c[1000];
    reduction r = {K_DOT, 1000, c, 0, 0};
    (void)state;
    for (size_t i = 0; i < 2000; i++)
        x[i] = 1.0 + (double)(i % 7);
    for (size_t i = 0; i < 1000; i++)
        c[i] = 0.5;
    gradient_ok(reduction_objective, &r, 2000, x, g);
    assert_int_equal(last_records(), 1000 + 1);
    r.kind = K_DOT_RD;
    gradient_ok(reduction_objective, &r, 1000, x, g);
    assert_int_equal(last_records(), 500 + 1);
    r.kind = K_DOT_DR;
    gradient_ok(reduction_objective, &r, 1000, x, g);
    assert_int_equal(last_records(), 500 + 1);
    r.kind = K_DOT_SELF;  /* as its squared norm: half the slots of dot_r */
    gradient_ok(reduction_objective, &r, 1000, x, g);
    assert_int_equal(last_records(), 500 + 1);
    for (int k = K_SUM; k < KINDS; k++) {
        r.kind = (enum kind)k;
        gradient_ok(reduction_objective, &r, 1000, x, g);
        assert_int_equal(last_records(), 500 + 1);
        r.n = 999;
        gradient_ok(reduction_objective, &r, 999, x, g);
        assert_int_equal(last_records(), 500 + 1);
        r.n = 2;  /* one slot: an ordinary record */
        gradient_ok(reduction_objective, &r, 2, x, g);
        assert_int_equal(last_records(), 1);
        r.n = 1;
        gradient_ok(reduction_objective, &r, 1, x, g);
        assert_int_equal(last_records(), 1);
        r.n = 1000;
    }
}

/* ---- the tape, as ad_tape_dump lists it ---- */

typedef struct dumped {
    unsigned id, a, b;  /* b = 0: the sink (one argument) */
    double wa, wb;
    unsigned run;       /* header: slots in its run; else 0 */
} dumped;

/* The records of the last recording, parsed from ad_tape_dump. */
static size_t dump_records(dumped *out, size_t max)
{
    FILE *f = tmpfile();
    char line[256];
    size_t count = 0;
    int lineno = 0;
    assert_non_null(f);
    assert_int_equal(ad_tape_dump(f, max), AD_OK);
    rewind(f);
    while (fgets(line, sizeof line, f)) {
        dumped d = {0, 0, 0, 0.0, 0.0, 0};
        if (lineno++ < 2)  /* the summary line and the column names */
            continue;
        assert_true(count < max);
        char kind[32];
        if (sscanf(line, "%u n-ary (%31[a-z_/]): the %u", &d.id, kind, &d.run) == 3) {
            out[count++] = d;
            continue;
        }
        /* id, the operation (? unless the recording was checked), a, d/da, b, d/db */
        int got = sscanf(line, "%u %31s %u %lf %u %lf", &d.id, kind, &d.a, &d.wa, &d.b, &d.wb) - 1;
        if (got != 5 && got != 3) {
            print_error("unexpected ad_tape_dump line: %s", line);
            fail();
        }
        out[count++] = d;
    }
    fclose(f);
    return count;
}

static void check_dumped(const dumped *got, const dumped *want, size_t count, size_t got_count)
{
    assert_int_equal(got_count, count);
    for (size_t k = 0; k < count; k++) {
        assert_int_equal(got[k].id, want[k].id);
        assert_int_equal(got[k].run, want[k].run);
        if (want[k].run)
            continue;
        assert_int_equal(got[k].a, want[k].a);
        assert_int_equal(got[k].b, want[k].b);
        assert_near(got[k].wa, want[k].wa, 1e-5, 0.0);  /* printed with %g */
        if (want[k].b)
            assert_near(got[k].wb, want[k].wb, 1e-5, 0.0);
    }
}

/* prod(2, 3, 5, 7, 11): slots (x0 x1) (x2 x3) (x4 -) and a header; inputs
 * take IDs 1..5, records 6..9.  logsumexp(0, 0, 0): (x0 x1) (x2 -), header.
 * dot_rd over 3 with c = (0.5, -1, 4): (x0 x1) (x2 -), header.  A dot_r of
 * 2: (x0 y0) (x1 y1), header.  Two arguments of logsumexp: one slot. */
static void test_tape_layout(void **state)
{
    static double c3[3] = {0.5, -1.0, 4.0};
    const double p5[5] = {2, 3, 5, 7, 11}, z3[3] = {0, 0, 0}, d4[4] = {1, 2, 3, 4};
    double g[5];
    dumped got[16];
    reduction r = {K_PROD, 5, NULL, 0, 0};
    (void)state;

    gradient_ok(reduction_objective, &r, 5, p5, g);
    const dumped prod_want[] = {
        {6, 1, 2, 3 * 5 * 7 * 11, 2 * 5 * 7 * 11, 0},
        {7, 3, 4, 2 * 3 * 7 * 11, 2 * 3 * 5 * 11, 0},
        {8, 5, 0, 2 * 3 * 5 * 7, 0, 0},
        {9, 0, 0, 0, 0, 3},
    };
    check_dumped(got, prod_want, 4, dump_records(got, 16));

    r = (reduction){K_LSE, 3, NULL, 0, 0};
    gradient_ok(reduction_objective, &r, 3, z3, g);
    const dumped lse_want[] = {
        {4, 1, 2, 1.0 / 3, 1.0 / 3, 0}, {5, 3, 0, 1.0 / 3, 0, 0}, {6, 0, 0, 0, 0, 2},
    };
    check_dumped(got, lse_want, 3, dump_records(got, 16));

    r = (reduction){K_DOT_RD, 3, c3, 0, 0};
    gradient_ok(reduction_objective, &r, 3, d4, g);
    const dumped rd_want[] = {{4, 1, 2, 0.5, -1.0, 0}, {5, 3, 0, 4.0, 0, 0}, {6, 0, 0, 0, 0, 2}};
    check_dumped(got, rd_want, 3, dump_records(got, 16));

    r = (reduction){K_DOT, 2, NULL, 0, 0};
    gradient_ok(reduction_objective, &r, 4, d4, g);
    const dumped dot_want[] = {{5, 1, 3, 3.0, 1.0, 0}, {6, 2, 4, 4.0, 2.0, 0}, {7, 0, 0, 0, 0, 2}};
    check_dumped(got, dot_want, 3, dump_records(got, 16));

    r = (reduction){K_LSE, 2, NULL, 0, 0};
    gradient_ok(reduction_objective, &r, 2, z3, g);
    const dumped lse2_want[] = {{3, 1, 2, 0.5, 0.5, 0}};
    check_dumped(got, lse2_want, 1, dump_records(got, 16));
}

/* prod and logsumexp runs that cross chunk boundaries and are longer than a
 * chunk (the n-ary runs of the inline primitives are covered in
 * test_nary.c). */
static void test_long_runs(void **state)
{
    static double x[BIG_N], g[BIG_N], gw[BIG_N];
    static const long pads[] = {0, CHUNK - 3, CHUNK + 1};
    (void)state;
    for (size_t i = 0; i < BIG_N; i++)  /* exact products: powers of two and ones */
        x[i] = i % 4096 == 5 ? 2.0 : i % 4096 == 9 ? 0.5 : i % 3 ? 1.0 : -1.0;
    for (size_t p = 0; p < sizeof pads / sizeof pads[0]; p++) {
        reduction r = {K_PROD, BIG_N, NULL, 0, pads[p]};
        double want = closed_form(&r, x, gw);
        assert_same(gradient_ok(reduction_objective, &r, BIG_N, x, g), want);
        for (size_t i = 0; i < BIG_N; i++)
            if (!same_double(g[i], gw[i])) {
                print_error("prod pad=%ld: grad[%zu] = %g, expected %g\n", pads[p], i, g[i], gw[i]);
                fail();
            }
        assert_int_equal(last_records(), (size_t)pads[p] + nary_records(BIG_N));
    }
    for (size_t i = 0; i < BIG_N; i++)
        x[i] = sin((double)i);
    for (size_t p = 0; p < sizeof pads / sizeof pads[0]; p++) {
        reduction r = {K_LSE, BIG_N, NULL, 0, pads[p]};
        double want = closed_form(&r, x, gw);
        assert_near(gradient_ok(reduction_objective, &r, BIG_N, x, g), want, 1e-12, 0.0);
        for (size_t i = 0; i < BIG_N; i++)
            if (!(fabs(g[i] - gw[i]) <= 1e-12 * gw[i])) {
                print_error("logsumexp pad=%ld: grad[%zu] = %.17g, expected %.17g\n", pads[p], i,
                            g[i], gw[i]);
                fail();
            }
        assert_int_equal(last_records(), (size_t)pads[p] + nary_records(BIG_N));
    }
}

/* ======================================================================
 * 2. Forms: mixed dot, constants, plain doubles
 * ====================================================================== */

typedef struct mixed_dot {
    int form;       /* 0: (double *, ad_real *); 1: (ad_real *, double *); 2, 3: const pointers */
    double *c;
} mixed_dot;

static ad_real mixed_dot_objective(const ad_real *x, size_t n, void *ctx)
{
    const mixed_dot *d = ctx;
    const double *cc = d->c;
    ad_real *xm = (ad_real *)x;
    switch (d->form) {
    case 0: return ad_dot(n, d->c, xm);
    case 1: return ad_dot(n, xm, d->c);
    case 2: return ad_dot(n, cc, x);
    default: return ad_dot(n, x, cc);
    }
}

static void test_mixed_dot_forms(void **state)
{
    double c[7], x[7], g[4][7];
    uint64_t rng = 0xd07;
    double cc[2] = {1, 2};
    ad_real r[2] = {{1, 0, 0}, {2, 0, 0}};
    const double *ccp = cc;
    const ad_real *crp = r;
    (void)state;
    assert_true(IS_AD(ad_dot(2, cc, r)));
    assert_true(IS_AD(ad_dot(2, r, cc)));
    assert_true(IS_AD(ad_dot(2, ccp, crp)));
    assert_true(IS_AD(ad_dot(2, crp, ccp)));
    assert_true(IS_AD(ad_dot(2, crp, r)));
    assert_true(IS_DOUBLE(ad_dot(2, ccp, cc)));
    assert_same(ad_value(ad_dot(2, cc, r)), 5.0);
    assert_same(ad_value(ad_dot(2, crp, ccp)), 5.0);
    for (size_t n = 0; n <= 7; n++) {
        fill_uniform(&rng, c, n, -2.0, 2.0);
        fill_uniform(&rng, x, n, -2.0, 2.0);
        double f[4];
        for (int form = 0; form < 4; form++) {
            mixed_dot d = {form, c};
            f[form] = gradient_ok(mixed_dot_objective, &d, n, x, g[form]);
            assert_int_equal(last_records(), n ? nary_records(n) : 0);
        }
        double want = 0.0;
        for (size_t i = 0; i < n; i++)
            want += x[i] * c[i];
        for (int form = 0; form < 4; form++) {
            assert_same(f[form], want);
            for (size_t i = 0; i < n; i++)
                assert_same(g[form][i], c[i]);
        }
    }
}

/* Every primitive over constants only: an ID 0 result and no records. */
typedef struct constants {
    size_t n;
    uint32_t ids[16];   /* the primitives' result IDs */
    double vals[16];
} constants;

#define CONST_N 37

static ad_real constants_objective(const ad_real *x, size_t n_inputs, void *ctx)
{
    constants *k = ctx;
    ad_real a[CONST_N], b[CONST_N], y[3], t[CONST_N];
    double c[CONST_N], A[3 * CONST_N];
    size_t n = k->n, j = 0;
    (void)n_inputs;
    for (size_t i = 0; i < CONST_N; i++) {  /* all of them: n may be 0 */
        a[i] = ad_const(0.25 * (double)(i % 5) + 0.5);
        b[i] = ad_const(1.0 - 0.125 * (double)(i % 3));
        c[i] = 0.5;
    }
    for (size_t i = 0; i < 3 * CONST_N; i++)
        A[i] = 0.25;
    ad_real r[] = {ad_dot(n, a, b), ad_dot(n, a, c), ad_dot(n, c, a), ad_sum(n, a),
                   ad_sqnorm(n, a), ad_prod(n, a), ad_logsumexp(n, a)};
    for (; j < sizeof r / sizeof r[0]; j++) {
        k->ids[j] = r[j].id;
        k->vals[j] = r[j].v;
    }
    ad_matvec(3, n, A, a, y);
    for (size_t i = 0; i < 3; i++, j++)
        k->ids[j] = y[i].id;
    for (size_t i = 0; i < n; i++)
        t[i] = ad_const(1.0);
    ad_axpy(n, 2.0, a, t);
    k->ids[j++] = n ? t[n - 1].id : 0;
    ad_real s = ad_dot(n, a, b);
    for (size_t i = 0; i < 3; i++)
        s = ad_add(s, y[i]);
    return ad_add(ad_mul(x[0], 2.0), s);
}

static void test_constant_arguments_record_nothing(void **state)
{
    static const size_t ns[] = {0, 1, 2, 3, CONST_N};
    double x = 1.5, g;
    (void)state;
    for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++) {
        constants k;
        memset(&k, 0xff, sizeof k);
        k.n = ns[s];
        gradient_ok(constants_objective, &k, 1, &x, &g);
        assert_same(g, 2.0);
        assert_int_equal(last_records(), 1);  /* x * 2 only */
        for (size_t j = 0; j < 11; j++)
            assert_int_equal(k.ids[j], 0);
    }
}

/* n = 0: the neutral elements, as constants. */
static void test_empty(void **state)
{
    ad_real none[1] = {{5.0, 0, 0}};
    double dnone[1] = {5.0};
    (void)state;
    assert_same(ad_value(ad_prod(0, none)), 1.0);
    assert_int_equal(ad_prod(0, none).id, 0);
    assert_same(ad_prod(0, dnone), 1.0);
    assert_same(ad_value(ad_logsumexp(0, none)), -INFINITY);
    assert_int_equal(ad_logsumexp(0, none).id, 0);
    assert_same(ad_logsumexp(0, dnone), -INFINITY);
    assert_same(ad_value(ad_sqnorm(0, none)), 0.0);
    assert_same(ad_value(ad_dot(0, none, dnone)), 0.0);
    assert_same(ad_value(ad_dot(0, dnone, none)), 0.0);
    assert_same(ad_value(ad_dot(0, none, none)), 0.0);
}

/* Outside a recording, the ad_real forms compute values and record nothing. */
static void test_outside_recording(void **state)
{
    ad_real a[5];
    double d[5];
    (void)state;
    for (int i = 0; i < 5; i++) {
        d[i] = 0.5 + i;
        a[i] = ad_const(d[i]);
    }
    ad_real p = ad_prod(5, a), l = ad_logsumexp(5, a), s = ad_sqnorm(5, a);
    assert_int_equal(p.id, 0);
    assert_int_equal(l.id, 0);
    assert_int_equal(s.id, 0);
    assert_same(p.v, ad_prod(5, d));
    assert_same(l.v, ad_logsumexp(5, d));
    assert_same(s.v, ad_sqnorm(5, d));
}

/* ---- one source for double and ad_real ---- */

#define DEFINE_OBJECTIVE(T, name)                                                  \
    static T name(const T *x, size_t n, void *ctx)                                 \
    {                                                                              \
        const double *A = ctx;  /* 3 x n */                                        \
        T y[3], t[8];                                                              \
        (void)n;                                                                   \
        ad_matvec(3, 8, A, x, y);                                                  \
        for (size_t i = 0; i < 8; i++)                                             \
            t[i] = ad_mul(x[i], 0.5);                                              \
        ad_axpy(8, -1.5, x + 8, t);                                                \
        T parts[6] = {ad_dot(8, x, x + 8), ad_dot(8, A, x), ad_sqnorm(8, t),       \
                      ad_prod(8, t), ad_logsumexp(3, y), ad_sum(8, t)};            \
        return ad_add(ad_logsumexp(6, parts), AD_CONST(T, 0.25));                  \
    }

DEFINE_OBJECTIVE(double, shared_double)
DEFINE_OBJECTIVE(ad_real, shared_ad)

static void test_shared_source(void **state)
{
    double x[16], A[24], g[16], dv[8], dy[8];
    double dd[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t rng = 0x5a5e;
    (void)state;
    assert_true(IS_DOUBLE(ad_dot(8, dd, dd)));
    assert_true(IS_DOUBLE(ad_sum(8, dd)));
    assert_true(IS_DOUBLE(ad_sqnorm(8, dd)));
    assert_true(IS_DOUBLE(ad_prod(8, dd)));
    assert_true(IS_DOUBLE(ad_logsumexp(8, dd)));
    ad_matvec(1, 8, dd, dd, dy);  /* double y: compiles only as ad_matvec_d */
    assert_same(dy[0], 204.0);
    for (int i = 0; i < 8; i++)
        dv[i] = 1.0;
    ad_axpy(8, 2.0, dd, dv);
    assert_same(dv[7], 17.0);
    for (int trial = 0; trial < 5; trial++) {
        fill_uniform(&rng, x, 16, -1.0, 1.0);
        fill_uniform(&rng, A, 24, -1.0, 1.0);
        double plain = shared_double(x, 16, A);
        /* The double and ad_real builds compute the same values the same
         * way (no records outside the tape's arithmetic). */
        assert_same(gradient_ok(shared_ad, A, 16, x, g), plain);
        for (int i = 0; i < 16; i++)
            assert_true(isfinite(g[i]));
    }
}

/* Each _d form equals its _r form's value bitwise. */
static void test_double_forms_match_ad_forms(void **state)
{
    uint64_t rng = 0xb17;
    static double d[1001], e[1001];
    static ad_real a[1001], b[1001];
    (void)state;
    for (size_t s = 0; s < N_SIZES; s++) {
        size_t n = sizes[s];
        fill_uniform(&rng, d, n, -3.0, 3.0);
        fill_uniform(&rng, e, n, 0.5, 1.5);
        for (size_t i = 0; i < n; i++) {
            a[i] = ad_const(d[i]);
            b[i] = ad_const(e[i]);
        }
        assert_same(ad_value(ad_dot(n, a, b)), ad_dot(n, d, e));
        assert_same(ad_value(ad_dot(n, a, e)), ad_dot(n, d, e));
        assert_same(ad_value(ad_dot(n, d, b)), ad_dot(n, d, e));
        assert_same(ad_value(ad_sum(n, a)), ad_sum(n, d));
        assert_same(ad_value(ad_sqnorm(n, a)), ad_sqnorm(n, d));
        assert_same(ad_value(ad_prod(n, b)), ad_prod(n, e));
        assert_same(ad_value(ad_prod(n, a)), ad_prod(n, d));
        assert_same(ad_value(ad_logsumexp(n, a)), ad_logsumexp(n, d));
    }
}

/* ======================================================================
 * 3. ad_prod: zeros and extreme magnitudes, no division
 * ====================================================================== */

typedef struct prod_case {
    size_t n;
    double x[6];
    double value;     /* the product, left to right, as ad_prod_d forms it */
    double grad[6];   /* products of the others */
} prod_case;

static ad_real prod_objective(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    return ad_prod(n, x);
}

static void test_prod_zeros_and_extremes(void **state)
{
    static const prod_case cases[] = {
        /* one zero: the partial at the zero is the product of the others */
        {4, {2, 0, 3, 5}, 0, {0, 30, 0, 0}},
        {4, {0, -2, 3, 5}, 0, {-30, 0, 0, 0}},
        {4, {-2, 3, 5, 0}, 0, {0, 0, 0, -30}},
        {1, {0}, 0, {1}},
        {2, {0, -7}, 0, {-7, 0}},
        /* two zeros: every partial is 0 */
        {4, {2, 0, 3, 0}, 0, {0, 0, 0, 0}},
        {3, {0, 0, 4}, 0, {0, 0, 0}},
        {2, {0, 0}, 0, {0, 0}},
        /* the product overflows, the partials do not: P / x_i would be Inf */
        {3, {1e300, 1e10, 1e-300}, INFINITY, {1e10 * 1e-300, 1e300 * 1e-300, INFINITY}},
        /* the product underflows, the partials do not: P / x_i would be 0 */
        {3, {1e-300, 1e-100, 1e300}, 0, {1e-100 * 1e300, 1e-300 * 1e300, 0}},
        /* alternating 1e200 and 1e-200: every prefix and suffix in range */
        {4, {1e200, 1e-200, 1e200, 1e-200}, 1.0, {1e-200, 1e200, 1e-200, 1e200}},
    };
    (void)state;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const prod_case *c = &cases[k];
        double g[6];
        double v = gradient_ok(prod_objective, NULL, c->n, c->x, g);
        if (!(v == c->value || (c->value != 0 && fabs(v - c->value) <= 1e-14 * fabs(c->value)))) {
            print_error("case %zu: value %.17g, expected %.17g\n", k, v, c->value);
            fail();
        }
        assert_same(v, ad_prod(c->n, c->x));
        for (size_t i = 0; i < c->n; i++) {
            double w = c->grad[i];
            int ok = w == 0 ? g[i] == 0 : isinf(w) ? g[i] == w : fabs(g[i] - w) <= 1e-14 * fabs(w);
            if (!ok) {
                print_error("case %zu: grad[%zu] = %.17g, expected %.17g\n", k, i, g[i], w);
                fail();
            }
        }
    }
}

/* Prefix or suffix products past the range of double where the partials,
 * the products of the others, are not (issue 19): prod(1e200, 1e-110 x 4)
 * gave 0 for 1e-130 (its suffix 1e-330 underflowed), 1e200 1e200 = Inf
 * before a zero factor gave NaN for 0 and Inf for 1e100.  The oracle: the
 * products of the others in long double, whose range holds them, rounded
 * to double (Inf or 0 where that over- or underflows).  The value stays
 * ad_prod_d's, left to right, bitwise (NaN for 1e200 1e200 0 ...). */
static ad_real prod_after_constant(const ad_real *x, size_t n, void *ctx)
{
    ad_real e[8];
    e[0] = ad_const(*(const double *)ctx);
    for (size_t i = 0; i < n; i++)
        e[i + 1] = x[i];
    return ad_prod(n + 1, e);
}

static void check_prod_partials(size_t n, const double *x, const double *g, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        long double p = 1.0L;
        for (size_t k = 0; k < n; k++)
            if (k != i)
                p *= x[k];
        double want = (double)p;
        /* a zero partial is summed into the gradient's +0: either sign */
        int ok = want == 0.0 ? g[i] == 0.0 : isinf(want) ? g[i] == want
                                                        : fabs(g[i] - want) <= 1e-15 * fabs(want);
        if (!ok) {
            print_error("%s: grad[%zu] = %.17g, expected %.17g\n", what, i, g[i], want);
            fail();
        }
    }
}

static void test_prod_scaled(void **state)
{
    static const struct {
        size_t n;
        double x[6];
    } cases[] = {
        {5, {1e200, 1e-110, 1e-110, 1e-110, 1e-110}},
        {4, {1e200, 1e200, 0, 1e-300}},
        {4, {1e200, 0, 1e200, 1e-300}},
        {4, {1e-300, 1e-300, 1e300, 1e300}},
        {4, {1e-200, 1e-200, INFINITY, 3}},
        {5, {DBL_MAX, DBL_MAX, 1e-300, 1e-300, 4}},
        {5, {0, 1e300, 1e300, 1e-300, -2}},
        {6, {1e-170, -1e-170, 1e-170, 1e170, -1e170, 1e170}},
        {3, {5e-324, 5e-324, 1e308}},
    };
    (void)state;
    if (LDBL_MAX_EXP <= DBL_MAX_EXP)
        skip();  /* the oracle needs the wider range */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char what[32];
        double g[6];
        snprintf(what, sizeof what, "case %zu", k);
        double v = gradient_ok(prod_objective, NULL, cases[k].n, cases[k].x, g);
        assert_same(v, ad_prod(cases[k].n, cases[k].x));
        check_prod_partials(cases[k].n, cases[k].x, g, what);
    }
    {  /* the first case with 1e200 a constant */
        double c = 1e200, x[4] = {1e-110, 1e-110, 1e-110, 1e-110}, g[4];
        assert_same(gradient_ok(prod_after_constant, &c, 4, x, g), ad_prod(5, cases[0].x));
        for (int i = 0; i < 4; i++)
            assert_near(g[i], 1e-130, 1e-15, 0.0);
    }
    {  /* 200 factors 2^-1000, then 200 of 2^1000: every partial is 2^1000 or
        * 2^-1000 exactly, while the prefixes fall to 0 and the suffixes
        * rise to Inf */
        static double x[400], g[400];
        for (size_t i = 0; i < 400; i++)
            x[i] = i < 200 ? 0x1p-1000 : 0x1p1000;
        assert_same(gradient_ok(prod_objective, NULL, 400, x, g), 0.0);
        for (size_t i = 0; i < 400; i++)
            if (!same_double(g[i], i < 200 ? 0x1p1000 : 0x1p-1000)) {
                print_error("grad[%zu] = %.17g\n", i, g[i]);
                fail();
            }
    }
}

/* A zero at each position of long products: the partial there is the
 * product of the others, every other partial exactly 0; two zeros make
 * every partial 0. */
static void test_prod_zero_in_long_products(void **state)
{
    static double x[1000], g[1000], gw[1000];
    static const size_t ns[] = {2, 3, 5, 8, 1000};
    uint64_t rng = 0x2e40;
    (void)state;
    for (size_t s = 0; s < sizeof ns / sizeof ns[0]; s++) {
        size_t n = ns[s];
        for (size_t z = 0; z < n; z += n > 8 ? 97 : 1) {
            sample(K_PROD, &rng, x, n);
            x[z] = 0.0;
            reduction r = {K_PROD, n, NULL, 0, 0};
            closed_form(&r, x, gw);
            assert_true(gradient_ok(prod_objective, NULL, n, x, g) == 0.0);
            for (size_t i = 0; i < n; i++) {
                if (i == z)
                    assert_near(g[i], gw[i], 1e-12, 0.0);
                else
                    assert_true(g[i] == 0.0);
            }
            assert_true(g[z] != 0.0);
            size_t z2 = (z + 1 + n / 2) % n;
            if (z2 == z)
                continue;
            x[z2] = 0.0;
            assert_true(gradient_ok(prod_objective, NULL, n, x, g) == 0.0);
            for (size_t i = 0; i < n; i++)
                assert_true(g[i] == 0.0);
        }
    }
}

/* ======================================================================
 * 4. ad_logsumexp: huge and infinite inputs, NaN, conventions
 * ====================================================================== */

typedef struct lse_case {
    size_t n;
    double x[5];
    double value;
    double grad[5];
} lse_case;

static ad_real lse_objective(const ad_real *x, size_t n, void *ctx)
{
    (void)ctx;
    return ad_logsumexp(n, x);
}

static void test_logsumexp_conventions(void **state)
{
    const double e1 = exp(-1.0), inf = INFINITY, nan = NAN;
    const lse_case cases[] = {
        /* large: max + log(sum exp(x - max)), finite */
        {2, {1000, 1001}, 1001 + log1p(e1), {e1 / (1 + e1), 1 / (1 + e1)}},
        {2, {-1000, -1001}, -1000 + log1p(e1), {1 / (1 + e1), e1 / (1 + e1)}},
        {2, {1e300, 1e300}, 1e300, {0.5, 0.5}},
        {3, {-1e300, 1e300, 0}, 1e300, {0, 1, 0}},
        {2, {-1e300, -1e300}, -1e300, {0.5, 0.5}},
        {3, {1.7e308, 1.7e308, 1.7e308}, 1.7e308, {1.0 / 3, 1.0 / 3, 1.0 / 3}},
        {1, {-1e300}, -1e300, {1}},
        /* -Inf elements take no part */
        {3, {-inf, 0, 0}, log(2.0), {0, 0.5, 0.5}},
        {2, {-inf, 1e300}, 1e300, {0, 1}},
        /* max +Inf: value +Inf, 1/c for the c infinite elements */
        {4, {inf, 1, inf, -inf}, inf, {0.5, 0, 0.5, 0}},
        {3, {2, inf, -3}, inf, {0, 1, 0}},
        {3, {inf, inf, inf}, inf, {1.0 / 3, 1.0 / 3, 1.0 / 3}},
        {2, {-inf, inf}, inf, {0, 1}},
        /* all -Inf: value -Inf, 1/n each */
        {4, {-inf, -inf, -inf, -inf}, -inf, {0.25, 0.25, 0.25, 0.25}},
        {1, {-inf}, -inf, {1}},
        {5, {-inf, -inf, -inf, -inf, -inf}, -inf, {0.2, 0.2, 0.2, 0.2, 0.2}},
        /* any NaN: value NaN, every partial NaN */
        {3, {1, nan, 2}, nan, {nan, nan, nan}},
        {2, {nan, inf}, nan, {nan, nan}},
        {2, {-inf, nan}, nan, {nan, nan}},
        {3, {inf, -inf, nan}, nan, {nan, nan, nan}},
        {1, {nan}, nan, {nan}},
    };
    (void)state;
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const lse_case *c = &cases[k];
        double g[5];
        double v = gradient_ok(lse_objective, NULL, c->n, c->x, g);
        int ok = isnan(c->value) ? isnan(v)
                 : isinf(c->value) ? v == c->value
                                   : fabs(v - c->value) <= 1e-15 * fabs(c->value);
        if (!ok) {
            print_error("case %zu: value %.17g, expected %.17g\n", k, v, c->value);
            fail();
        }
        assert_same(ad_logsumexp(c->n, c->x), v);  /* the double form, bitwise */
        for (size_t i = 0; i < c->n; i++) {
            double w = c->grad[i];
            ok = isnan(w) ? isnan(g[i]) : w == 0 ? g[i] == 0 : fabs(g[i] - w) <= 1e-15 * w;
            if (!ok) {
                print_error("case %zu: grad[%zu] = %.17g, expected %.17g\n", k, i, g[i], w);
                fail();
            }
        }
    }
}

/* Random points of every size, huge and shifted: value and softmax, and the
 * double form bitwise. */
static void test_logsumexp_huge_inputs(void **state)
{
    static double x[1000], xs[1000], gw[1000], gs[1000];
    static const double shifts[] = {1000.0, -1000.0, 1e6, -1e15, 1e300};
    uint64_t rng = 0x15e;
    (void)state;
    for (size_t s = 1; s < N_SIZES; s++) {
        size_t n = sizes[s];
        fill_uniform(&rng, x, n, -5.0, 5.0);
        for (size_t k = 0; k < sizeof shifts / sizeof shifts[0]; k++) {
            double shift = shifts[k];
            for (size_t i = 0; i < n; i++)
                xs[i] = shift == 1e300 ? x[i] * 1e299 : x[i] + shift;
            double v = gradient_ok(lse_objective, NULL, n, xs, gs);
            reduction r = {K_LSE, n, NULL, 0, 0};
            double want = closed_form(&r, xs, gw);
            assert_true(isfinite(v));
            assert_near(v, want, 1e-15, 0.0);
            assert_same(ad_logsumexp(n, xs), v);
            for (size_t i = 0; i < n; i++)
                assert_near(gs[i], gw[i], 1e-12, 1e-300);
        }
    }
}

/* ======================================================================
 * 5. Matrix-vector products and axpy
 * ====================================================================== */

/* ad_function: y = A x (ad_matvec_r), B x with B an ad_real matrix of
 * inputs (ad_matvec_rr), or t + a x (ad_axpy_r), primitive or unrolled. */
enum vform { V_MATVEC, V_MATVEC_RR, V_AXPY, VFORMS };

typedef struct vec {
    enum vform form;
    size_t rows, cols;
    const double *A;
    double a;
    int unrolled;
} vec;

/* inputs: V_MATVEC x[cols]; V_MATVEC_RR B[rows*cols] then x[cols];
 * V_AXPY x[cols] then t[cols] (rows == cols) */
static size_t vec_inputs(const vec *v)
{
    return v->form == V_MATVEC ? v->cols : v->form == V_MATVEC_RR ? (v->rows + 1) * v->cols
                                                                  : 2 * v->cols;
}

static void vec_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const vec *v = ctx;
    size_t r = v->rows, c = v->cols;
    (void)n, (void)m;
    switch (v->form) {
    case V_MATVEC:
        if (!v->unrolled) {
            ad_matvec(r, c, v->A, x, y);
            return;
        }
        for (size_t j = 0; j < r; j++) {
            y[j] = ad_const(0.0);
            for (size_t i = 0; i < c; i++)
                y[j] = ad_add(y[j], ad_mul(v->A[j * c + i], x[i]));
        }
        return;
    case V_MATVEC_RR:
        if (!v->unrolled) {
            ad_matvec_rr(r, c, x, x + r * c, y);
            return;
        }
        for (size_t j = 0; j < r; j++) {
            y[j] = ad_const(0.0);
            for (size_t i = 0; i < c; i++)
                y[j] = ad_add(y[j], ad_mul(x[j * c + i], x[r * c + i]));
        }
        return;
    default:
        for (size_t i = 0; i < c; i++)
            y[i] = x[c + i];
        if (!v->unrolled) {
            ad_axpy(c, v->a, x, y);
            return;
        }
        for (size_t i = 0; i < c; i++)
            y[i] = ad_add(ad_mul(v->a, x[i]), y[i]);
        return;
    }
}

/* The Jacobian in closed form. */
static void vec_jacobian(const vec *v, const double *x, double *J)
{
    size_t r = v->rows, c = v->cols, n = vec_inputs(v);
    memset(J, 0, r * n * sizeof *J);
    for (size_t j = 0; j < r; j++) {
        double *row = J + j * n;
        switch (v->form) {
        case V_MATVEC:
            for (size_t i = 0; i < c; i++)
                row[i] = v->A[j * c + i];
            break;
        case V_MATVEC_RR:
            for (size_t i = 0; i < c; i++) {
                row[j * c + i] = x[r * c + i];
                row[r * c + i] = x[j * c + i];
            }
            break;
        default:
            row[j] = v->a;
            row[c + j] = 1.0;
            break;
        }
    }
}

static size_t vec_records(const vec *v)
{
    size_t r = v->rows, c = v->cols;
    if (c == 0)
        return 0;
    switch (v->form) {
    case V_MATVEC: return r * nary_records(c);
    case V_MATVEC_RR: return r * nary_records(2 * c);
    default: return c;  /* one two-argument record per output */
    }
}

static void check_vec(enum vform form, size_t rows, size_t cols, uint64_t seed)
{
    uint64_t rng = seed;
    vec v = {form, form == V_AXPY ? cols : rows, cols, NULL, 0.0, 0};
    rows = v.rows;
    size_t n = vec_inputs(&v);
    double *A = xmalloc(rows * cols * sizeof *A), *x = xmalloc(n * sizeof *x);
    double *J = xmalloc(rows * n * sizeof *J), *Ju = xmalloc(rows * n * sizeof *Ju);
    double *Jw = xmalloc(rows * n * sizeof *Jw), *y = xmalloc(rows * sizeof *y);
    double *yu = xmalloc(rows * sizeof *yu), *w = xmalloc(rows * sizeof *w);
    double *wj = xmalloc(n * sizeof *wj);
    fill_uniform(&rng, A, rows * cols, -2.0, 2.0);
    fill_uniform(&rng, x, n, 0.25, 2.0);  /* positive terms: no cancellation */
    v.A = A;
    v.a = rng_uniform(&rng, 0.5, 2.0);
    if (form == V_MATVEC)
        for (size_t i = 0; i < rows * cols; i++)
            A[i] = fabs(A[i]) + 0.1;

    /* The record count, from a reverse sweep (which records only f). */
    fill_uniform(&rng, w, rows, -1.0, 1.0);
    assert_int_equal(ad_vjp(vec_f, &v, n, x, rows, w, y, wj), AD_OK);
    if (last_records() != vec_records(&v)) {
        print_error("form %d, %zu x %zu: %zu records, expected %zu\n", (int)form, rows, cols,
                    last_records(), vec_records(&v));
        fail();
    }
    assert_int_equal(ad_jacobian(vec_f, &v, n, x, rows, y, J), AD_OK);
    v.unrolled = 1;
    assert_int_equal(ad_jacobian(vec_f, &v, n, x, rows, yu, Ju), AD_OK);
    vec_jacobian(&v, x, Jw);
    for (size_t j = 0; j < rows; j++) {
        assert_near(y[j], yu[j], 1e-12, 0.0);
        for (size_t i = 0; i < n; i++) {
            assert_near(J[j * n + i], Ju[j * n + i], 1e-12, 0.0);
            assert_near(J[j * n + i], Jw[j * n + i], 1e-12, 0.0);
        }
    }
    free(A), free(x), free(J), free(Ju), free(Jw), free(y), free(yu), free(w), free(wj);
}

static void test_matvec_and_axpy(void **state)
{
    static const size_t shapes[][2] = {{1, 1}, {1, 2}, {2, 3}, {3, 2}, {4, 4}, {5, 7},
                                       {2, 16}, {7, 1}, {3, 0}, {1, 1000}, {3, 301}};
    (void)state;
    for (int f = 0; f < VFORMS; f++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            if (f == V_MATVEC_RR && shapes[s][1] > 400)
                continue;  /* inputs (rows + 1) cols; enough covered */
            check_vec((enum vform)f, shapes[s][0], shapes[s][1], 0xa11 + s * 17 + (uint64_t)f);
        }
}

/* The spec's example: ad_matvec_r m x n takes m (ceil(n/2) + 1) records,
 * ad_axpy_r exactly n. */
static void test_matvec_axpy_record_counts(void **state)
{
    static double A[10 * 101], x[202], y[101], w[101], wj[202];
    (void)state;
    for (size_t i = 0; i < 10 * 101; i++)
        A[i] = 1.0;
    for (size_t i = 0; i < 202; i++)
        x[i] = 1.0;
    for (size_t i = 0; i < 101; i++)
        w[i] = 1.0;
    vec v = {V_MATVEC, 10, 101, A, 0.0, 0};
    assert_int_equal(ad_vjp(vec_f, &v, 101, x, 10, w, y, wj), AD_OK);
    assert_int_equal(last_records(), 10 * (51 + 1));
    v = (vec){V_AXPY, 101, 101, NULL, 3.0, 0};
    assert_int_equal(ad_vjp(vec_f, &v, 202, x, 101, w, y, wj), AD_OK);
    assert_int_equal(last_records(), 101);
    for (size_t i = 0; i < 101; i++) {
        assert_same(y[i], 4.0);
        assert_same(wj[i], 3.0);
        assert_same(wj[101 + i], 1.0);
    }
}

/* ======================================================================
 * 6. Jacobians of functions made of primitives
 * ====================================================================== */

#define PN 9   /* inputs */
#define PM 13  /* outputs */

static const double prim_c[5] = {0.5, -1.25, 0.0, 2.0, 0.75};  /* c[2] = 0: reached anyway */
static const double prim_A[3 * 4] = {1.0, -0.5, 0.25, 2.0, 0.0, 1.5, -1.0, 0.5, 3.0, 0.125, 1.0, -2.0};
static const double prim_a = -0.5;

static void prims_all(const ad_real *x, ad_real *y)
{
    ad_real p[4] = {x[0], ad_const(2.0), x[3], x[8]};
    ad_real l[4] = {x[5], ad_const(0.5), x[6], x[7]};
    ad_real t[3] = {x[8], ad_const(1.5), x[4]};
    ad_real row[3] = {x[0], x[1], ad_const(-0.75)};
    y[0] = ad_dot(4, x, x + 4);
    y[1] = ad_dot(5, x + 1, prim_c);
    y[2] = ad_sqnorm(7, x + 2);
    y[3] = ad_prod(4, p);
    y[4] = ad_logsumexp(4, l);
    ad_matvec(3, 4, prim_A, x + 3, y + 5);
    ad_axpy(3, prim_a, x, t);
    y[8] = t[0];
    y[9] = t[1];
    y[10] = t[2];
    y[11] = ad_sum(3, x + 6);
    ad_matvec_rr(1, 3, row, x + 2, y + 12);
}

/* Outputs 0 .. m-1 of prims_all. */
static void prims(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    ad_real all[PM];
    (void)n, (void)ctx;
    prims_all(x, all);
    for (size_t j = 0; j < m; j++)
        y[j] = all[j];
}

/* The active arguments of each output: the sparse structure. */
static const char *const prims_structure[PM] = {
    "11111111.", ".11111...", "..1111111", "1..1....1", ".....111.", "...1111..", "...1111..",
    "...1111..", "1.......1", ".1.......", "..1.1....", "......111", "11111....",
};

static void prims_jacobian(const double *x, double *J)
{
    memset(J, 0, PM * PN * sizeof *J);
    double *r;
    for (int i = 0; i < 4; i++) {
        J[0 * PN + i] = x[4 + i];
        J[0 * PN + 4 + i] = x[i];
    }
    for (int i = 0; i < 5; i++)
        J[1 * PN + 1 + i] = prim_c[i];
    for (int i = 2; i < 9; i++)
        J[2 * PN + i] = 2.0 * x[i];
    r = J + 3 * PN;
    r[0] = 2.0 * x[3] * x[8];
    r[3] = x[0] * 2.0 * x[8];
    r[8] = x[0] * 2.0 * x[3];
    double mx = fmax(fmax(x[5], 0.5), fmax(x[6], x[7]));
    double s = exp(x[5] - mx) + exp(0.5 - mx) + exp(x[6] - mx) + exp(x[7] - mx);
    r = J + 4 * PN;
    for (int i = 5; i < 8; i++)
        r[i] = exp(x[i] - mx) / s;
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < 4; i++)
            J[(5 + j) * PN + 3 + i] = prim_A[j * 4 + i];
    J[8 * PN + 0] = prim_a;
    J[8 * PN + 8] = 1.0;
    J[9 * PN + 1] = prim_a;
    J[10 * PN + 2] = prim_a;
    J[10 * PN + 4] = 1.0;
    for (int i = 6; i < 9; i++)
        J[11 * PN + i] = 1.0;
    r = J + 12 * PN;
    r[0] = x[2];
    r[1] = x[3];
    r[2] = x[0];
    r[3] = x[1];
    r[4] = -0.75;
}

static double dot_n(const double *a, const double *b, size_t n, double *scale)
{
    double s = 0.0;
    *scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        s += a[i] * b[i];
        *scale += fabs(a[i] * b[i]);
    }
    return s;
}

/* The sparse structure: exactly the active arguments, zeros included;
 * with the dense or the hashed store. */
static void check_prims_sparse(size_t m, const double *x, const double *y, const double *J,
                               int hashed)
{
    double y2[PM];
    ad_csr S;
    ad_test_sparse_force_hash(hashed);
    ad_status st = ad_sparse_jacobian(prims, NULL, PN, x, m, y2, &S);
    ad_test_sparse_force_hash(0);
    assert_int_equal(st, AD_OK);
    assert_csr_valid(&S, m, PN);
    for (size_t j = 0; j < m; j++) {
        char got[PN + 1];
        memset(got, '.', PN);
        got[PN] = 0;
        assert_same(y2[j], y[j]);
        for (size_t k = S.row_ptr[j]; k < S.row_ptr[j + 1]; k++) {
            got[S.col[k]] = '1';
            assert_near(S.val[k], J[j * PN + S.col[k]], 1e-14, 1e-300);
        }
        if (strcmp(got, prims_structure[j]) != 0) {
            print_error("row %zu (%s store): columns %s, expected %s\n", j,
                        hashed ? "hashed" : "dense", got, prims_structure[j]);
            fail();
        }
    }
    ad_csr_free(&S);
}

static void check_prims(size_t m, const double *x, uint64_t *rng)
{
    double J[PM * PN], Jw[PM * PN], y[PM], y2[PM], v[PN], w[PM], jv[PM], wj[PN], e[PN];
    double col[PM];
    prims_jacobian(x, Jw);
    assert_int_equal(ad_jacobian(prims, NULL, PN, x, m, y, J), AD_OK);
    for (size_t j = 0; j < m; j++)
        for (size_t i = 0; i < PN; i++)
            assert_near(J[j * PN + i], Jw[j * PN + i], 1e-12, 1e-300);

    /* Columns from ad_jvp and rows from ad_vjp. */
    for (size_t i = 0; i < PN; i++) {
        memset(e, 0, sizeof e);
        e[i] = 1.0;
        assert_int_equal(ad_jvp(prims, NULL, PN, x, e, m, y2, col), AD_OK);
        for (size_t j = 0; j < m; j++) {
            assert_same(y2[j], y[j]);
            assert_near(col[j], J[j * PN + i], 1e-14, 1e-300);
        }
    }
    for (size_t j = 0; j < m; j++) {
        double ej[PM] = {0};
        ej[j] = 1.0;
        assert_int_equal(ad_vjp(prims, NULL, PN, x, m, ej, y2, wj), AD_OK);
        for (size_t i = 0; i < PN; i++)
            assert_near(wj[i], J[j * PN + i], 1e-14, 1e-300);
    }

    /* <w, J v> = <J^T w, v> */
    for (int trial = 0; trial < 5; trial++) {
        double sl, sr;
        fill_uniform(rng, v, PN, -1.0, 1.0);
        fill_uniform(rng, w, m, -1.0, 1.0);
        assert_int_equal(ad_jvp(prims, NULL, PN, x, v, m, y2, jv), AD_OK);
        assert_int_equal(ad_vjp(prims, NULL, PN, x, m, w, y2, wj), AD_OK);
        double lhs = dot_n(w, jv, m, &sl), rhs = dot_n(wj, v, PN, &sr);
        assert_near(lhs, rhs, 0.0, 1e-12 * (sl + sr));
    }

    check_prims_sparse(m, x, y, J, 0);
    check_prims_sparse(m, x, y, J, 1);
}

static void test_jacobians_of_primitives(void **state)
{
    uint64_t rng = 0x9e7;
    double x[PN];
    (void)state;
    for (int trial = 0; trial < 4; trial++) {
        fill_uniform(&rng, x, PN, 0.25, 2.0);
        check_prims(PM, x, &rng);  /* n < m: forward sweeps */
        check_prims(5, x, &rng);   /* n > m: reverse sweeps */
        check_prims(1, x, &rng);
    }
    /* Zero partials keep their entries: x3 = 0 zeroes the prod's other
     * partials, x2 = 0 a sqnorm partial. */
    fill_uniform(&rng, x, PN, 0.25, 2.0);
    x[3] = 0.0;
    x[2] = 0.0;
    check_prims(PM, x, &rng);
    check_prims(5, x, &rng);
}

/* Reductions over 1000 inputs in one function: rows by reverse sweeps. */
#define WN 1000

static void wide(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const double *c = ctx;
    (void)m;
    y[0] = ad_prod(n, x);
    y[1] = ad_logsumexp(n, x);
    y[2] = ad_sqnorm(n, x);
    y[3] = ad_dot(n, c, x);
    y[4] = ad_dot(n / 2, x, x + n / 2);
}

static void test_wide_jacobian(void **state)
{
    static double x[WN], c[WN], J[5 * WN], gw[WN], v[WN], wj[WN];
    double y[5], w[5], jv[5];
    uint64_t rng = 0x1de;
    (void)state;
    sample(K_PROD, &rng, x, WN);
    fill_uniform(&rng, c, WN, -1.0, 1.0);
    assert_int_equal(ad_jacobian(wide, c, WN, x, 5, y, J), AD_OK);
    reduction r = {K_PROD, WN, NULL, 0, 0};
    assert_same(y[0], ad_prod(WN, x));
    closed_form(&r, x, gw);
    for (size_t i = 0; i < WN; i++)
        assert_near(J[i], gw[i], 1e-12, 0.0);
    r.kind = K_LSE;
    assert_same(y[1], ad_logsumexp(WN, x));
    closed_form(&r, x, gw);
    for (size_t i = 0; i < WN; i++) {
        assert_near(J[WN + i], gw[i], 1e-12, 0.0);
        assert_same(J[2 * WN + i], 2.0 * x[i]);
        assert_same(J[3 * WN + i], c[i]);
        assert_same(J[4 * WN + i], i < WN / 2 ? x[WN / 2 + i] : x[i - WN / 2]);
    }
    fill_uniform(&rng, v, WN, -1.0, 1.0);
    fill_uniform(&rng, w, 5, -1.0, 1.0);
    assert_int_equal(ad_jvp(wide, c, WN, x, v, 5, y, jv), AD_OK);
    assert_int_equal(ad_vjp(wide, c, WN, x, 5, w, y, wj), AD_OK);
    double sl, sr, lhs = dot_n(w, jv, 5, &sl), rhs = dot_n(wj, v, WN, &sr);
    assert_near(lhs, rhs, 0.0, 1e-12 * (sl + sr));
}

/* ======================================================================
 * 7. Errors: tape limit and allocation failure in prod and logsumexp
 * ====================================================================== */

static void test_tape_limit(void **state)
{
    double x[10], g[10], fx;
    (void)state;
    for (int i = 0; i < 10; i++)
        x[i] = 0.5 + 0.25 * i;
    for (int k = K_PROD; k <= K_LSE; k++) {
        reduction r = {(enum kind)k, 10, NULL, 0, 0};  /* 5 slots and a header */
        ad_set_tape_limit(6);
        gradient_ok(reduction_objective, &r, 10, x, g);
        ad_set_tape_limit(5);
        ad_status s = ad_gradient(reduction_objective, &r, 10, x, &fx, g);
        ad_set_tape_limit(0);
        assert_int_equal(s, AD_ERANGE);
        assert_all_nan(fx, g, 10);
    }
}

static void test_alloc_failure(void **state)
{
    static double x[BIG_N], g[BIG_N];
    (void)state;
    for (size_t i = 0; i < BIG_N; i++)
        x[i] = 1.0;
    for (int k = K_PROD; k <= K_LSE; k++) {
        int successes = 0;
        for (long i = 0; successes < 3; i++) {
            reduction r = {(enum kind)k, BIG_N, NULL, 0, 0};
            double fx = 0;
            assert_int_equal(ad_release(), AD_OK);
            ad_test_fail_alloc_after(i);
            ad_status s = ad_gradient(reduction_objective, &r, BIG_N, x, &fx, g);
            ad_test_fail_alloc_after(-1);
            if (s == AD_OK) {
                successes++;
                assert_near(fx, k == K_PROD ? 1.0 : 1.0 + log((double)BIG_N), 1e-15, 0.0);
                assert_near(g[BIG_N - 1], k == K_PROD ? 1.0 : 1.0 / BIG_N, 1e-15, 0.0);
                continue;
            }
            assert_alloc_failure(i, s, successes);
            assert_all_nan(fx, g, BIG_N);
            assert_true(i < 100);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reductions_against_unrolled),
        cmocka_unit_test(test_record_counts),
        cmocka_unit_test(test_tape_layout),
        cmocka_unit_test(test_long_runs),
        cmocka_unit_test(test_mixed_dot_forms),
        cmocka_unit_test(test_constant_arguments_record_nothing),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_outside_recording),
        cmocka_unit_test(test_shared_source),
        cmocka_unit_test(test_double_forms_match_ad_forms),
        cmocka_unit_test(test_prod_zeros_and_extremes),
        cmocka_unit_test(test_prod_scaled),
        cmocka_unit_test(test_prod_zero_in_long_products),
        cmocka_unit_test(test_logsumexp_conventions),
        cmocka_unit_test(test_logsumexp_huge_inputs),
        cmocka_unit_test(test_matvec_and_axpy),
        cmocka_unit_test(test_matvec_axpy_record_counts),
        cmocka_unit_test(test_jacobians_of_primitives),
        cmocka_unit_test(test_wide_jacobian),
        cmocka_unit_test(test_tape_limit),
        cmocka_unit_test(test_alloc_failure),
    };
    return cmocka_run_group_tests_name("array primitives", tests, NULL, NULL);
}
