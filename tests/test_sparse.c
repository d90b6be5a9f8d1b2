/* ad_sparse_jacobian: structure and values.
 *
 * Every test runs twice, with the pending set in the dense arrays (the
 * default) and in the uthash map (forced by ad_test_sparse_force_hash).
 *
 * Oracles: functions built so that the inputs each row reaches are known
 * (that set must be the row's columns exactly, even where a value is 0);
 * values against the dense ad_jacobian of the same function, and for
 * hand-written rows against closed forms. */
#define _POSIX_C_SOURCE 200809L  /* posix_memalign */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "../lib/drivers/testing.h"

static void assert_all_nan_n(const double *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        assert_nan(p[i]);
}

/* ---- new blocks with known contents ----
 *
 * The library allocates through aligned_alloc (lib/alloc.c); this test
 * program defines it, so the library's calls come here.  It allocates with
 * posix_memalign and, while fill_word is nonzero, fills each new block with
 * that 32-bit word, so that memory the library reads before writing holds a
 * known value instead of whatever malloc had there (MALLOC_PERTURB_, which
 * meson test sets, and the sanitizers' allocators would otherwise decide). */
static uint32_t fill_word;

void *aligned_alloc(size_t alignment, size_t size)
{
    void *p = NULL;
    if (posix_memalign(&p, alignment < sizeof(void *) ? sizeof(void *) : alignment, size) != 0)
        return NULL;
    if (fill_word)
        for (size_t i = 0; i < size / sizeof(uint32_t); i++)
            ((uint32_t *)p)[i] = fill_word;
    return p;
}

/* A CSR full of junk, as a caller's uninitialised struct would be: a failed
 * call must leave it empty (and must not free the junk). */
static void junk(ad_csr *J)
{
    memset(J, 0xa5, sizeof *J);
}

/* ======================================================================
 * Random sparse functions with known structure.
 *
 * Row kinds: TERMS combines a few chains of operations, each on one input
 * (inputs may repeat), by products and sums, one ad_sum, or one ad_dot
 * against more of its inputs, and may add a shared subexpression S (of
 * three inputs, computed once, used by many rows); INPUT is an input; CONST
 * a constant (empty row); DUP the previous output again; UNWRITTEN is left
 * NaN (empty row); ZERO reaches two inputs through partials that come to 0;
 * WIDE is one ad_sum over many inputs; LONG a chain of many records.
 * ====================================================================== */

enum { ROW_TERMS, ROW_INPUT, ROW_CONST, ROW_DUP, ROW_UNWRITTEN, ROW_ZERO, ROW_WIDE, ROW_LONG };
#define SP_MAXT 6

typedef struct sp_row {
    int kind, k, combine, shared;
    size_t in[SP_MAXT];
    int len[SP_MAXT];
    uint64_t seed;
} sp_row;

typedef struct sp_fun {
    size_t n, m;
    sp_row *rows;
    size_t shared_in[3], shared_at;  /* S is made just before row shared_at */
    int shared_len;
    uint64_t shared_seed;
    size_t wide_k;
    long long_len;
    ad_real *scratch;                /* wide rows' terms */
} sp_fun;

/* A chain of `len` operations; values stay moderate. */
static ad_real chain(ad_real u, long len, uint64_t *rng)
{
    for (long s = 0; s < len; s++) {
        switch (rng_next(rng) % 10) {
        case 0: u = ad_sin(u); break;
        case 1: u = ad_cos(u); break;
        case 2: u = ad_atan(u); break;
        case 3: u = ad_tanh(u); break;
        case 4: u = ad_mul(u, 1.25); break;
        case 5: u = ad_add(u, 0.5); break;  /* records nothing: u's ID */
        case 6: u = ad_hypot(u, 1.0); break;
        case 7: u = ad_log1p(ad_mul(u, u)); break;
        case 8: u = ad_sub(0.25, u); break;
        default: u = ad_erf(u); break;
        }
    }
    return u;
}

static void sp_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const sp_fun *F = ctx;
    ad_real S = ad_const(0.0);
    (void)n;
    for (size_t j = 0; j < m; j++) {
        if (j == F->shared_at) {
            uint64_t rng = F->shared_seed;
            S = ad_add(ad_mul(x[F->shared_in[0]], x[F->shared_in[1]]), ad_sin(x[F->shared_in[2]]));
            S = chain(S, F->shared_len, &rng);
        }
        const sp_row *r = &F->rows[j];
        uint64_t rng = r->seed;
        ad_real t[SP_MAXT], u[SP_MAXT], acc;
        switch (r->kind) {
        case ROW_INPUT: y[j] = x[r->in[0]]; break;
        case ROW_CONST: y[j] = ad_mul(ad_sin(ad_const(0.5)), 3.0); break;
        case ROW_DUP: y[j] = y[j - 1]; break;
        case ROW_UNWRITTEN: break;
        case ROW_ZERO:
            y[j] = ad_add(ad_mul(chain(x[r->in[0]], 2, &rng), 0.0), ad_sub(x[r->in[1]], x[r->in[1]]));
            break;
        case ROW_WIDE:
            for (size_t q = 0; q < F->wide_k; q++)
                F->scratch[q] = ad_sin(x[(j + 3 * q) % F->n]);
            y[j] = ad_sum(F->wide_k, F->scratch);
            break;
        case ROW_LONG: y[j] = chain(x[r->in[0]], F->long_len, &rng); break;
        default:
            t[0] = u[0] = ad_const(0.0);
            for (int q = 0; q < r->k; q++) {
                t[q] = chain(x[r->in[q]], r->len[q], &rng);
                u[q] = x[r->in[(q + 1) % r->k]];
            }
            if (r->combine == 1) {
                acc = ad_sum((size_t)r->k, t);
            } else if (r->combine == 2) {
                acc = ad_dot((size_t)r->k, t, u);
            } else {
                acc = t[0];
                for (int q = 1; q < r->k; q++)
                    acc = q % 2 ? ad_mul(acc, t[q]) : ad_add(acc, t[q]);
            }
            if (r->shared)
                acc = ad_add(acc, ad_mul(S, t[0]));
            y[j] = acc;
            break;
        }
    }
}

static void sp_free(sp_fun *F)
{
    free(F->rows);
    free(F->scratch);
    memset(F, 0, sizeof *F);
}

static void sp_make(sp_fun *F, uint64_t *rng, size_t n, size_t m, size_t wide_k, long long_len)
{
    memset(F, 0, sizeof *F);
    F->n = n;
    F->m = m;
    F->rows = xmalloc(m * sizeof *F->rows);
    memset(F->rows, 0, m * sizeof *F->rows);
    F->shared_at = m / 4;
    for (int k = 0; k < 3; k++)
        F->shared_in[k] = rng_next(rng) % n;
    F->shared_len = (int)(rng_next(rng) % 30);
    F->shared_seed = rng_next(rng);
    F->wide_k = wide_k;
    F->long_len = long_len;
    F->scratch = xmalloc((wide_k ? wide_k : 1) * sizeof *F->scratch);
    size_t long_row = long_len ? rng_next(rng) % m : m;
    for (size_t j = 0; j < m; j++) {
        sp_row *r = &F->rows[j];
        unsigned u = (unsigned)(rng_next(rng) % 100);
        r->seed = rng_next(rng);
        r->in[0] = rng_next(rng) % n;
        r->in[1] = rng_next(rng) % n;
        if (j == long_row)
            r->kind = ROW_LONG;
        else if (u < 6)
            r->kind = ROW_INPUT;
        else if (u < 10)
            r->kind = ROW_CONST;
        else if (u < 15 && j > 0 && F->rows[j - 1].kind != ROW_UNWRITTEN)
            r->kind = ROW_DUP;
        else if (u < 18)
            r->kind = ROW_UNWRITTEN;
        else if (u < 23)
            r->kind = ROW_ZERO;
        else if (u < 26 && wide_k)
            r->kind = ROW_WIDE;
        else
            r->kind = ROW_TERMS;
        if (r->kind != ROW_TERMS)
            continue;
        r->k = 1 + (int)(rng_next(rng) % SP_MAXT);
        for (int q = 0; q < r->k; q++) {
            if (q && rng_next(rng) % 4 == 0)
                r->in[q] = r->in[0];  /* the same input again */
            else if (q > 1)
                r->in[q] = rng_next(rng) % n;
            r->len[q] = (int)(rng_next(rng) % 6);
        }
        r->combine = (int)(rng_next(rng) % 3);
        r->shared = j >= F->shared_at && rng_next(rng) % 3 == 0;
    }
}

/* The inputs row j reaches. */
static void sp_structure(const sp_fun *F, size_t j, unsigned char *flags)
{
    memset(flags, 0, F->n);
    while (F->rows[j].kind == ROW_DUP)
        j--;
    const sp_row *r = &F->rows[j];
    switch (r->kind) {
    case ROW_INPUT:
    case ROW_LONG: flags[r->in[0]] = 1; break;
    case ROW_CONST:
    case ROW_UNWRITTEN: break;
    case ROW_ZERO: flags[r->in[0]] = flags[r->in[1]] = 1; break;
    case ROW_WIDE:
        for (size_t q = 0; q < F->wide_k; q++)
            flags[(j + 3 * q) % F->n] = 1;
        break;
    default:
        for (int q = 0; q < r->k; q++)
            flags[r->in[q]] = 1;
        if (r->shared)
            flags[F->shared_in[0]] = flags[F->shared_in[1]] = flags[F->shared_in[2]] = 1;
        break;
    }
}

/* ad_sparse_jacobian against the dense ad_jacobian and the known
 * structure: the columns of each row are exactly the inputs it reaches
 * (ascending), the values those of the dense Jacobian, and the dense
 * Jacobian is exactly 0 off the structure.  Returns the number of entries. */
static size_t check_sp(const sp_fun *F, const double *x)
{
    size_t n = F->n, m = F->m;
    double *Jd = xmalloc(n * m * sizeof *Jd), *yd = xmalloc(m * sizeof *yd), *y = xmalloc(m * sizeof *y);
    unsigned char *flags = xmalloc(n);
    ad_csr J;
    junk(&J);
    assert_int_equal(ad_jacobian(sp_f, (void *)F, n, x, m, yd, Jd), AD_OK);
    assert_int_equal(ad_sparse_jacobian(sp_f, (void *)F, n, x, m, y, &J), AD_OK);
    assert_csr_valid(&J, m, n);
    for (size_t j = 0; j < m; j++) {
        assert_same(y[j], yd[j]);
        if (F->rows[j].kind == ROW_UNWRITTEN)
            assert_nan(y[j]);
        sp_structure(F, j, flags);
        size_t count = 0;
        double scale = 0.0;
        for (size_t i = 0; i < n; i++) {
            count += flags[i];
            scale = fmax(scale, fabs(Jd[j * n + i]));
            if (!flags[i])
                assert_true(Jd[j * n + i] == 0.0);
        }
        if (J.row_ptr[j + 1] - J.row_ptr[j] != count) {
            print_error("row %zu (kind %d): %zu entries, reaches %zu inputs\n", j, F->rows[j].kind,
                        J.row_ptr[j + 1] - J.row_ptr[j], count);
            fail();
        }
        for (size_t k = J.row_ptr[j]; k < J.row_ptr[j + 1]; k++) {
            assert_true(flags[J.col[k]]);
            assert_near(J.val[k], Jd[j * n + J.col[k]], 1e-12, 1e-14 * scale + 1e-300);
        }
    }
    size_t nnz = J.nnz;
    ad_csr_free(&J);
    free(Jd), free(yd), free(y), free(flags);
    return nnz;
}

/* ---- the two stores ---- */

static ad_csr alloc_ref;  /* test_alloc_failure's; freed by reset_store should a check fail */

static int mode_dense = 0, mode_hash = 1;

static int set_store(void **state)
{
    ad_test_sparse_force_hash(**(int **)state);
    return 0;
}

static int reset_store(void **state)
{
    (void)state;
    ad_test_sparse_force_hash(0);
    ad_test_fail_alloc_after(-1);
    ad_set_tape_limit(0);
    fill_word = 0;
    ad_csr_free(&alloc_ref);
    return 0;
}

/* ======================================================================
 * Tests
 * ====================================================================== */

static void test_random_functions(void **state)
{
    static const size_t configs[][3] = {
        /* n, m, functions */
        {1, 1, 6}, {1, 9, 6}, {9, 1, 6}, {10, 20, 12}, {50, 40, 10},
        {120, 300, 4}, {40, 500, 3}, {300, 60, 3},
    };
    uint64_t rng = 0x5a125e;
    (void)state;
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++)
        for (size_t k = 0; k < configs[c][2]; k++) {
            size_t n = configs[c][0], m = configs[c][1];
            double *x = xmalloc(n * sizeof *x);
            sp_fun F;
            fill_uniform(&rng, x, n, -2.0, 2.0);
            sp_make(&F, &rng, n, m, 2 + rng_next(&rng) % 40, k == 1 ? 3000 : 0);
            check_sp(&F, x);
            sp_free(&F);
            free(x);
        }
}

/* Rows are resolved in groups that share one pass, each row in a lane of
 * its own.  A row must still get exactly what a resolve of its own gives:
 * here each row of random functions again, alone, as the only output of
 * the same recording (m = 1, a group of one), compared bit for bit. */
typedef struct one_row {
    sp_fun *F;
    size_t j;
    ad_real *all;
} one_row;

static void only_row(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    one_row *o = ctx;
    (void)m;
    for (size_t j = 0; j < o->F->m; j++)  /* an unwritten row reads as NaN, as in ad_record */
        o->all[j] = ad_const(NAN);
    sp_f(x, n, o->all, o->F->m, o->F);
    y[0] = o->all[o->j];
}

static void test_rows_as_if_alone(void **state)
{
    static const size_t configs[][2] = {{5, 9}, {30, 41}, {3, 200}};
    uint64_t rng = 0xa10e;
    (void)state;
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++) {
        size_t n = configs[c][0], m = configs[c][1];
        double *x = xmalloc(n * sizeof *x), *y = xmalloc(m * sizeof *y), y1;
        sp_fun F;
        ad_csr J, R;
        fill_uniform(&rng, x, n, -2.0, 2.0);
        sp_make(&F, &rng, n, m, 2 + rng_next(&rng) % 10, 0);
        one_row o = {&F, 0, xmalloc(m * sizeof(ad_real))};
        assert_int_equal(ad_sparse_jacobian(sp_f, &F, n, x, m, y, &J), AD_OK);
        for (o.j = 0; o.j < m; o.j++) {
            assert_int_equal(ad_sparse_jacobian(only_row, &o, n, x, 1, &y1, &R), AD_OK);
            size_t at = J.row_ptr[o.j], len = J.row_ptr[o.j + 1] - at;
            assert_int_equal(R.nnz, len);
            for (size_t k = 0; k < len; k++) {
                assert_int_equal(R.col[k], J.col[at + k]);
                assert_same(R.val[k], J.val[at + k]);
            }
            ad_csr_free(&R);
        }
        ad_csr_free(&J);
        free(o.all);
        sp_free(&F);
        free(x);
        free(y);
    }
}

/* Two rows in one group, where the second reaches a record with an
 * infinite partial, sqrt at 0, and the first does not: the first row's
 * values must not see it (0 x Inf is NaN).  And a row whose only term is
 * -0: a zero derivative is +0 from every driver (docs/conventions.md). */
static void lanes_apart(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    ad_real t = ad_mul(x[0], 2.0);
    y[0] = ad_add(t, x[1]);
    y[1] = ad_sqrt(ad_sub(t, ad_mul(x[0], 2.0)));  /* sqrt(0): partial +Inf */
    y[2] = ad_mul(x[2], -0.0);                     /* d/dx2 = -0 */
    y[3] = ad_mul(x[2], 3.0);
}

static void test_lanes_kept_apart(void **state)
{
    const double x[3] = {0.75, -1.5, 2.0};
    double y[4];
    ad_csr J;
    (void)state;
    assert_int_equal(ad_sparse_jacobian(lanes_apart, NULL, 3, x, 4, y, &J), AD_OK);
    assert_csr_valid(&J, 4, 3);
    assert_int_equal(J.row_ptr[1], 2);
    assert_int_equal(J.col[0], 0);
    assert_same(J.val[0], 2.0);
    assert_same(J.val[1], 1.0);
    assert_int_equal(J.row_ptr[2], 3);  /* row 1: {x0}, NaN (Inf - Inf) */
    assert_int_equal(J.col[2], 0);
    assert_nan(J.val[2]);
    assert_int_equal(J.row_ptr[3], 4);
    assert_int_equal(J.col[3], 2);
    assert_same(J.val[3], 0.0);
    assert_int_equal(J.col[4], 2);
    assert_same(J.val[4], 3.0);
    ad_csr_free(&J);
}

/* Thousands of rows over several chunks: a row reaching a chain longer than
 * a chunk, wide n-ary sums that may straddle chunk boundaries, a shared
 * subexpression.  Besides the dense Jacobian: J v and J^T w from the CSR
 * against ad_jvp and ad_vjp. */
static void test_large(void **state)
{
    enum { N = 200, M = 4000 };
    uint64_t rng = 0x1a26e;
    double *x = xmalloc(N * sizeof *x), *v = xmalloc(N * sizeof *v), *wj = xmalloc(N * sizeof *wj);
    double *w = xmalloc(M * sizeof *w), *jv = xmalloc(M * sizeof *jv), *y = xmalloc(M * sizeof *y);
    double *av = xmalloc(M * sizeof *av), *aw = xmalloc(N * sizeof *aw);
    double *sv = xmalloc(M * sizeof *sv), *sw = xmalloc(N * sizeof *sw);
    sp_fun F;
    ad_csr J;
    (void)state;
    fill_uniform(&rng, x, N, -2.0, 2.0);
    sp_make(&F, &rng, N, M, 400, 100000);
    size_t nnz = check_sp(&F, x);
    ad_tape_stats st;
    assert_int_equal(ad_tape_stats_get(&st), AD_OK);
    if (getenv("DUALREV_TEST_VERBOSE"))
        fprintf(stderr, "# large: %zu records, %zu entries\n", st.records, nnz);
    assert_true(st.records > 3 * 65536);
    assert_true(nnz > M);

    assert_int_equal(ad_sparse_jacobian(sp_f, &F, N, x, M, y, &J), AD_OK);
    for (int trial = 0; trial < 2; trial++) {
        fill_uniform(&rng, v, N, -1.0, 1.0);
        fill_uniform(&rng, w, M, -1.0, 1.0);
        assert_int_equal(ad_jvp(sp_f, &F, N, x, v, M, y, jv), AD_OK);
        assert_int_equal(ad_vjp(sp_f, &F, N, x, M, w, y, wj), AD_OK);
        memset(aw, 0, N * sizeof *aw);
        memset(sw, 0, N * sizeof *sw);
        for (size_t j = 0; j < M; j++) {
            av[j] = sv[j] = 0.0;
            for (size_t k = J.row_ptr[j]; k < J.row_ptr[j + 1]; k++) {
                av[j] += J.val[k] * v[J.col[k]];
                sv[j] += fabs(J.val[k] * v[J.col[k]]);
                aw[J.col[k]] += w[j] * J.val[k];
                sw[J.col[k]] += fabs(w[j] * J.val[k]);
            }
        }
        for (size_t j = 0; j < M; j++)
            assert_near(jv[j], av[j], 0.0, 1e-12 * sv[j] + 1e-300);
        for (size_t i = 0; i < N; i++)
            assert_near(wj[i], aw[i], 0.0, 1e-12 * sw[i] + 1e-300);
    }
    ad_csr_free(&J);
    sp_free(&F);
    free(x), free(v), free(wj), free(w), free(jv), free(y), free(av), free(aw), free(sv), free(sw);
}

/* ---- hand-written rows, closed-form values ---- */

#define SPECIAL_N 6
#define SPECIAL_M 12

static void special_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = x[2];                                                   /* an input */
    y[1] = ad_mul(ad_sin(ad_const(0.5)), 3.0);                     /* a constant */
    y[2] = y[0];                                                   /* a duplicate */
    /* y[3] unwritten */
    y[4] = ad_add(ad_mul(ad_exp(x[0]), 0.0), ad_sub(x[1], x[1]));  /* partials 0 */
    {
        ad_real a[4] = {x[3], x[3], x[4], ad_const(2.0)}, b[4] = {x[3], x[4], x[4], x[5]};
        y[5] = ad_dot(4, a, b);                                    /* repeats, a constant */
    }
    /* x5 - value(x5) + value(x0) carries x5's ID and x0's value: a tie */
    y[6] = ad_fmin(x[0], ad_add(ad_sub(x[5], ad_value(x[5])), ad_value(x[0])));
    ad_real S = ad_sin(ad_mul(x[1], x[4]));                        /* shared by rows 7-9 */
    y[7] = ad_mul(S, x[0]);
    y[8] = ad_add(S, x[2]);
    {
        ad_real t[3] = {S, S, x[5]};
        y[9] = ad_sum(3, t);
    }
    y[10] = ad_add(ad_sub(x[3], 1.0), 2.0);                        /* x3's ID, another value */
    y[11] = ad_add(ad_pow(x[1], x[2]), ad_atan2(x[4], x[5]));
}

typedef struct entry {
    size_t col;
    double val;
} entry;

static void test_special_rows(void **state)
{
    const double x[SPECIAL_N] = {0.5, 1.25, 0.75, -1.5, 2.0, 0.625};
    double y[SPECIAL_M];
    double c = cos(x[1] * x[4]), S = sin(x[1] * x[4]), r2 = x[4] * x[4] + x[5] * x[5];
    const double yw[SPECIAL_M] = {
        x[2], 3.0 * sin(0.5), x[2], NAN, 0.0, x[3] * x[3] + x[3] * x[4] + x[4] * x[4] + 2.0 * x[5],
        x[0], S * x[0], S + x[2], 2.0 * S + x[5], x[3] + 1.0,
        pow(x[1], x[2]) + atan2(x[4], x[5]),
    };
    const entry want[] = {
        /* row 0 */ {2, 1.0},
        /* row 2 */ {2, 1.0},
        /* row 4 */ {0, 0.0}, {1, 0.0},
        /* row 5 */ {3, 2.0 * x[3] + x[4]}, {4, x[3] + 2.0 * x[4]}, {5, 2.0},
        /* row 6 */ {0, 0.5}, {5, 0.5},
        /* row 7 */ {0, S}, {1, x[0] * c * x[4]}, {4, x[0] * c * x[1]},
        /* row 8 */ {1, c * x[4]}, {2, 1.0}, {4, c * x[1]},
        /* row 9 */ {1, 2.0 * c * x[4]}, {4, 2.0 * c * x[1]}, {5, 1.0},
        /* row 10 */ {3, 1.0},
        /* row 11 */ {1, x[2] * pow(x[1], x[2] - 1.0)}, {2, log(x[1]) * pow(x[1], x[2])},
        {4, x[5] / r2}, {5, -x[4] / r2},
    };
    const size_t row_ptr[SPECIAL_M + 1] = {0, 1, 1, 2, 2, 4, 7, 9, 12, 15, 18, 19, 23};
    ad_csr J;
    (void)state;
    junk(&J);
    assert_int_equal(ad_sparse_jacobian(special_f, NULL, SPECIAL_N, x, SPECIAL_M, y, &J), AD_OK);
    assert_csr_valid(&J, SPECIAL_M, SPECIAL_N);
    for (size_t j = 0; j < SPECIAL_M; j++) {
        if (j == 3)
            assert_nan(y[j]);
        else
            assert_near(y[j], yw[j], 1e-15, 0.0);
    }
    for (size_t j = 0; j <= SPECIAL_M; j++)
        assert_int_equal(J.row_ptr[j], row_ptr[j]);
    for (size_t k = 0; k < J.nnz; k++) {
        assert_int_equal(J.col[k], want[k].col);
        assert_near(J.val[k], want[k].val, 1e-14, 1e-300);
        if (want[k].val == 0.0)
            assert_true(J.val[k] == 0.0);  /* kept although 0 */
    }
    ad_csr_free(&J);
}

/* Rows that reach no input, before any row that does: a constant, an
 * output left unwritten; and a function without inputs.  Each is an empty
 * row.  (Under UBSan this found lib/sparse.c of 6527b00 calling
 * qsort(NULL, 0, ...) in resolve_row for such rows.) */
static void reaches_nothing_first(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m, (void)ctx;
    y[0] = ad_const(1.0);
    /* y[1] unwritten */
    y[2] = n ? ad_sin(x[0]) : ad_const(2.0);
    y[3] = ad_mul(ad_const(2.0), 3.0);
}

static void test_rows_reaching_nothing_first(void **state)
{
    const double x[1] = {0.5};
    double y[4];
    ad_csr J;
    (void)state;
    junk(&J);
    assert_int_equal(ad_sparse_jacobian(reaches_nothing_first, NULL, 1, x, 4, y, &J), AD_OK);
    assert_csr_valid(&J, 4, 1);
    assert_int_equal(J.row_ptr[1], 0);
    assert_int_equal(J.row_ptr[2], 0);
    assert_int_equal(J.row_ptr[3], 1);
    assert_int_equal(J.nnz, 1);
    assert_int_equal(J.col[0], 0);
    assert_same(J.val[0], cos(0.5));
    assert_same(y[0], 1.0);
    assert_nan(y[1]);
    assert_same(y[2], sin(0.5));
    assert_same(y[3], 6.0);
    ad_csr_free(&J);
    junk(&J);
    assert_int_equal(ad_sparse_jacobian(reaches_nothing_first, NULL, 0, NULL, 4, y, &J), AD_OK);
    assert_csr_valid(&J, 4, 0);
    assert_int_equal(J.nnz, 0);
    assert_same(y[2], 2.0);
    ad_csr_free(&J);
}

/* n-ary records longer than a chunk: y_0 = sum of 140000 terms, y_1 a dot
 * of 140000 pairs, over 1000 inputs, each input repeated; y_2 = x_0. */
#define LONG_TERMS 140000
#define LONG_N 1000

static void long_nary(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    static ad_real a[LONG_TERMS], b[LONG_TERMS];  /* one thread */
    (void)m, (void)ctx;
    for (size_t i = 0; i < LONG_TERMS; i++) {
        a[i] = x[i % n];
        b[i] = x[(7 * i + 3) % n];
    }
    y[0] = ad_sum(LONG_TERMS, a);
    y[1] = ad_dot(LONG_TERMS, a, b);
    y[2] = x[0];
}

static void test_nary_longer_than_a_chunk(void **state)
{
    uint64_t rng = 0x10;
    double *x = xmalloc(LONG_N * sizeof *x), *want = xmalloc(LONG_N * sizeof *want);
    double *scale = xmalloc(LONG_N * sizeof *scale), *Jd = xmalloc(3 * LONG_N * sizeof *Jd);
    double *v = xmalloc(LONG_N * sizeof *v), y[3], jv[3];
    ad_csr J;
    (void)state;
    fill_uniform(&rng, x, LONG_N, -1.0, 1.0);
    fill_uniform(&rng, v, LONG_N, -1.0, 1.0);
    memset(want, 0, LONG_N * sizeof *want);
    memset(scale, 0, LONG_N * sizeof *scale);
    for (size_t i = 0; i < LONG_TERMS; i++) {
        size_t p = i % LONG_N, q = (7 * i + 3) % LONG_N;
        want[p] += x[q];
        want[q] += x[p];
        scale[p] += fabs(x[q]);
        scale[q] += fabs(x[p]);
    }
    assert_int_equal(ad_sparse_jacobian(long_nary, NULL, LONG_N, x, 3, y, &J), AD_OK);
    assert_csr_valid(&J, 3, LONG_N);
    assert_int_equal(J.row_ptr[1], LONG_N);
    assert_int_equal(J.row_ptr[2], 2 * LONG_N);
    assert_int_equal(J.nnz, 2 * LONG_N + 1);
    assert_int_equal(ad_jacobian(long_nary, NULL, LONG_N, x, 3, y, Jd), AD_OK);
    for (size_t i = 0; i < LONG_N; i++) {
        assert_same(J.val[i], (double)(LONG_TERMS / LONG_N));
        assert_same(Jd[i], (double)(LONG_TERMS / LONG_N));
        assert_near(J.val[LONG_N + i], want[i], 0.0, 1e-14 * scale[i]);
        assert_near(Jd[LONG_N + i], want[i], 0.0, 1e-14 * scale[i]);
    }
    assert_same(J.val[2 * LONG_N], 1.0);
    /* The forward sweep, against the CSR. */
    assert_int_equal(ad_jvp(long_nary, NULL, LONG_N, x, v, 3, y, jv), AD_OK);
    for (size_t j = 0; j < 3; j++) {
        double sum = 0.0, mag = 0.0;
        for (size_t k = J.row_ptr[j]; k < J.row_ptr[j + 1]; k++) {
            sum += J.val[k] * v[J.col[k]];
            mag += fabs(J.val[k] * v[J.col[k]]);
        }
        assert_near(jv[j], sum, 0.0, 1e-13 * mag);
    }
    ad_csr_free(&J);
    free(x), free(want), free(scale), free(Jd), free(v);
}

/* ---- calls in sequence: the stores' memory is reused ---- */


static void test_calls_in_sequence(void **state)
{
    uint64_t rng = 0x5e9;
    sp_fun A, B, C;
    double xa[100], xb[3], xc[7];
    double xs[SPECIAL_N] = {0.5, 1.25, 0.75, -1.5, 2.0, 0.625}, ys[SPECIAL_M], g[64], gx[64];
    long pad = 150000;
    (void)state;
    fill_uniform(&rng, xa, 100, -2.0, 2.0);
    fill_uniform(&rng, xb, 3, -2.0, 2.0);
    fill_uniform(&rng, xc, 7, -2.0, 2.0);
    fill_uniform(&rng, gx, 64, -1.0, 1.0);
    sp_make(&A, &rng, 100, 50, 30, 0);    /* many inputs, few rows */
    sp_make(&B, &rng, 3, 400, 5, 20000);  /* few inputs, many rows: B's records sit on A's input IDs */
    sp_make(&C, &rng, 7, 30, 10, 0);
    check_sp(&A, xa);
    check_sp(&B, xb);
    check_sp(&A, xa);
    gradient_ok(padded_squares, &pad, 64, gx, g);  /* the thread's tape and cotangents change */
    check_sp(&C, xc);
    check_sp(&B, xb);
    assert_int_equal(ad_release(), AD_OK);
    check_sp(&C, xc);
    double J[SPECIAL_N * SPECIAL_M];
    assert_int_equal(ad_jacobian(special_f, NULL, SPECIAL_N, xs, SPECIAL_M, ys, J), AD_OK);
    check_sp(&A, xa);
    for (int k = 0; k < 50; k++)  /* many calls: the row stamps move on */
        check_sp(&C, xc);
    sp_free(&A), sp_free(&B), sp_free(&C);
}

/* Leaves every entry and row pointer of J wrong, then frees it. */
static void poison_and_free(ad_csr *J)
{
    for (size_t k = 0; k < J->nnz; k++)
        J->col[k] = SIZE_MAX, J->val[k] = NAN;
    for (size_t j = 0; j <= J->rows; j++)
        J->row_ptr[j] = SIZE_MAX;
    ad_csr_free(J);
}

/* ad_csr_free keeps a Jacobian's arrays for the thread's next one: one of
 * the same size takes them over, whatever they were left holding.  One
 * much smaller, or larger, gets arrays of its own (at most a quarter
 * larger than it needs). */
static void test_arrays_kept_for_next_call(void **state)
{
    uint64_t rng = 0x5a7e;
    sp_fun big, small;
    double xb[60], xb2[60], xs[7], y[80];
    ad_csr J;
    (void)state;
    fill_uniform(&rng, xb, 60, -2.0, 2.0);
    fill_uniform(&rng, xb2, 60, -2.0, 2.0);
    fill_uniform(&rng, xs, 7, -2.0, 2.0);
    sp_make(&big, &rng, 60, 80, 20, 0);
    sp_make(&small, &rng, 7, 30, 5, 0);
    assert_int_equal(ad_sparse_jacobian(sp_f, &big, 60, xb, 80, y, &J), AD_OK);
    size_t *row_ptr = J.row_ptr, *col = J.col;
    double *val = J.val;
    poison_and_free(&J);
    assert_int_equal(ad_sparse_jacobian(sp_f, &big, 60, xb2, 80, y, &J), AD_OK);
    assert_ptr_equal(J.row_ptr, row_ptr);
    assert_ptr_equal(J.col, col);
    assert_ptr_equal(J.val, val);
    poison_and_free(&J);
    check_sp(&big, xb2);  /* the structure and values, on the poisoned arrays */
    check_sp(&small, xs);
    check_sp(&big, xb);
    sp_free(&big), sp_free(&small);
}

/* ---- nested calls ---- */

/* An objective that takes the sparse Jacobian of special_f at its own
 * point and returns sum_k val_k x_(col_k), with the values as constants:
 * gradient[i] = sum of the values in column i. */
typedef struct sparse_inside {
    ad_status st;
    size_t nnz;
    double colsum[SPECIAL_N];
} sparse_inside;

static ad_real objective_with_sparse(const ad_real *x, size_t n, void *ctx)
{
    sparse_inside *c = ctx;
    double at[SPECIAL_N], y[SPECIAL_M];
    ad_csr J;
    ad_real s = ad_mul(x[0], 0.0);
    for (size_t i = 0; i < n; i++)
        at[i] = ad_value(x[i]);
    c->st = ad_sparse_jacobian(special_f, NULL, n, at, SPECIAL_M, y, &J);
    c->nnz = J.nnz;
    memset(c->colsum, 0, sizeof c->colsum);
    for (size_t k = 0; k < J.nnz; k++) {
        c->colsum[J.col[k]] += J.val[k];
        s = ad_add(s, ad_mul(J.val[k], x[J.col[k]]));
    }
    ad_csr_free(&J);
    return s;
}

/* G(x) = (x_0 c, x_1, x_2 + x_0) where c is an entry of the sparse
 * Jacobian of special_f, taken inside G. */
static void function_with_sparse(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    sparse_inside *c = ctx;
    double at[SPECIAL_N], yi[SPECIAL_M];
    ad_csr J;
    (void)n, (void)m;
    ad_real before = ad_mul(x[2], 1.0);
    for (size_t i = 0; i < SPECIAL_N; i++)
        at[i] = ad_value(x[i]);
    c->st = ad_sparse_jacobian(special_f, NULL, SPECIAL_N, at, SPECIAL_M, yi, &J);
    c->nnz = J.nnz;
    double v = J.nnz > 4 ? J.val[4] : NAN;  /* row 5, d/dx3 = 2 x3 + x4 */
    ad_csr_free(&J);
    y[0] = ad_mul(x[0], v);
    y[1] = x[1];
    y[2] = ad_add(before, x[0]);
}

static void test_nested(void **state)
{
    const double x[SPECIAL_N] = {0.5, 1.25, 0.75, -1.5, 2.0, 0.625};
    double g[SPECIAL_N], y[3];
    sparse_inside c;
    ad_csr J;
    (void)state;
    memset(&c, 0, sizeof c);
    gradient_ok(objective_with_sparse, &c, SPECIAL_N, x, g);
    assert_int_equal(c.st, AD_OK);
    assert_int_equal(c.nnz, 23);
    for (size_t i = 0; i < SPECIAL_N; i++)
        assert_near(g[i], c.colsum[i], 1e-15, 1e-15);

    memset(&c, 0, sizeof c);
    junk(&J);
    assert_int_equal(ad_sparse_jacobian(function_with_sparse, &c, SPECIAL_N, x, 3, y, &J), AD_OK);
    assert_int_equal(c.st, AD_OK);
    assert_int_equal(c.nnz, 23);
    double d = 2.0 * x[3] + x[4];
    assert_csr_valid(&J, 3, SPECIAL_N);
    assert_int_equal(J.nnz, 4);
    const size_t cols[4] = {0, 1, 0, 2};
    const double vals[4] = {d, 1.0, 1.0, 1.0};
    for (size_t k = 0; k < 4; k++) {
        assert_int_equal(J.col[k], cols[k]);
        assert_same(J.val[k], vals[k]);
    }
    assert_same(y[0], x[0] * d);
    ad_csr_free(&J);
}

/* ---- errors ---- */

/* y_j = (j+1) x_(j mod n), or the constant j + 1/2 without inputs. */
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

static void test_null_arguments(void **state)
{
    counted c = {0};
    const double x[3] = {1.0, 2.0, 3.0};
    double y[2];
    ad_csr J;
    (void)state;
    fill(y, 2, 7.0), junk(&J);
    assert_int_equal(ad_sparse_jacobian(NULL, &c, 3, x, 2, y, &J), AD_EINVAL);
    assert_all_nan_n(y, 2), assert_csr_empty(&J);
    fill(y, 2, 7.0), junk(&J);
    assert_int_equal(ad_sparse_jacobian(counted_f, &c, 3, NULL, 2, y, &J), AD_EINVAL);
    assert_all_nan_n(y, 2), assert_csr_empty(&J);
    junk(&J);
    assert_int_equal(ad_sparse_jacobian(counted_f, &c, 3, x, 2, NULL, &J), AD_EINVAL);
    assert_csr_empty(&J);
    fill(y, 2, 7.0);
    assert_int_equal(ad_sparse_jacobian(counted_f, &c, 3, x, 2, y, NULL), AD_EINVAL);
    assert_all_nan_n(y, 2);
    assert_int_equal(c.calls, 0);
    ad_csr_free(NULL);
    ad_csr_free(&J);  /* an emptied CSR may be freed again */
    /* and the next call works */
    assert_int_equal(ad_sparse_jacobian(counted_f, &c, 3, x, 2, y, &J), AD_OK);
    assert_csr_valid(&J, 2, 3);
    assert_int_equal(J.nnz, 2);
    assert_int_equal(J.col[1], 1);
    assert_same(J.val[1], 2.0);
    assert_same(y[1], 4.0);
    ad_csr_free(&J);
}

static void test_empty_shapes(void **state)
{
    counted c = {0};
    const double x[3] = {1.0, 2.0, 3.0};
    double y[3];
    ad_csr J;
    (void)state;
    /* No inputs: rows of constants, all empty. */
    junk(&J);
    assert_int_equal(ad_sparse_jacobian(counted_f, &c, 0, NULL, 3, y, &J), AD_OK);
    assert_csr_valid(&J, 3, 0);
    assert_int_equal(J.nnz, 0);
    for (size_t j = 0; j < 3; j++) {
        assert_int_equal(J.row_ptr[j + 1], 0);
        assert_same(y[j], (double)j + 0.5);
    }
    ad_csr_free(&J);
    /* No outputs. */
    junk(&J);
    assert_int_equal(ad_sparse_jacobian(counted_f, &c, 3, x, 0, NULL, &J), AD_OK);
    assert_csr_valid(&J, 0, 3);
    assert_int_equal(J.nnz, 0);
    ad_csr_free(&J);
    /* Neither. */
    junk(&J);
    assert_int_equal(ad_sparse_jacobian(counted_f, &c, 0, NULL, 0, NULL, &J), AD_OK);
    assert_csr_valid(&J, 0, 0);
    ad_csr_free(&J);
    assert_int_equal(c.calls, 3);
}

/* For allocation failures: a row that reaches ~4800 records and all 300
 * inputs (more than a pool block of the hash store, several growths of its
 * table, of the heap, of the column list), a duplicate of it (the CSR grows
 * several times), an input, a constant, small rows, and 140000 records that
 * no row reaches (three chunks). */
#define ALLOC_N 300
#define ALLOC_M 6

static void alloc_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    ad_real t[ALLOC_N];
    (void)m, (void)ctx;
    for (size_t i = 0; i < n; i++) {
        uint64_t rng = i;
        t[i] = chain(x[i], 16, &rng);
    }
    y[0] = ad_sum(n, t);
    y[1] = x[7];
    y[2] = ad_const(2.0);
    y[3] = y[0];
    y[4] = ad_mul(ad_sin(x[3]), x[250]);
    ad_real pad = x[1];
    for (long k = 0; k < 140000; k++)
        pad = ad_mul(pad, 1.0);
    y[5] = ad_hypot(x[5], x[6]);
}

/* After a failed call, another function: the same records, but row 0 goes
 * from a record above them straight to one below them (sin x_5), so a
 * store that kept anything of the failed row (pending IDs among those
 * records) would wrongly resolve it here. */
static void alloc_probe_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)m, (void)ctx;
    ad_real below = ad_sin(x[5]);
    for (size_t i = 0; i < n; i++) {
        uint64_t rng = i;
        chain(x[i], 16, &rng);
    }
    y[0] = ad_mul(below, 2.0);
    y[1] = x[7];
}

static void check_after_failure(const double *x, long failed_at)
{
    double y[2];
    ad_csr J;
    assert_int_equal(ad_sparse_jacobian(alloc_probe_f, NULL, ALLOC_N, x, 2, y, &J), AD_OK);
    assert_csr_valid(&J, 2, ALLOC_N);
    int ok = J.nnz == 2 && J.row_ptr[1] == 1 && J.col[0] == 5 && J.col[1] == 7 &&
             same_double(J.val[0], 2.0 * cos(x[5])) && same_double(J.val[1], 1.0);
    size_t nnz = J.nnz, row0 = J.row_ptr[1];
    ad_csr_free(&J);  /* before asserting: no leak reports on top of a failure */
    if (!ok) {
        print_error("after a call failing at allocation %ld: %zu entries (%zu in row 0), "
                    "expected {x5} and {x7}\n", failed_at, nnz, row0);
        fail();
    }
}

static int alloc_failures(const ad_csr *ref, const double *yref, const double *x, int fresh)
{
    int failures = 0, successes = 0;
    assert_int_equal(ad_release(), AD_OK);
    for (long i = 0; successes < 3; i++) {
        double y[ALLOC_M];
        ad_csr J;
        fill(y, ALLOC_M, 7.0);
        junk(&J);
        if (fresh)
            assert_int_equal(ad_release(), AD_OK);
        ad_test_fail_alloc_after(i);
        ad_status st = ad_sparse_jacobian(alloc_f, NULL, ALLOC_N, x, ALLOC_M, y, &J);
        ad_test_fail_alloc_after(-1);
        if (st == AD_OK) {
            successes++;
            assert_csr_valid(&J, ALLOC_M, ALLOC_N);
            assert_int_equal(J.nnz, ref->nnz);
            for (size_t j = 0; j <= ALLOC_M; j++)
                assert_int_equal(J.row_ptr[j], ref->row_ptr[j]);
            for (size_t k = 0; k < J.nnz; k++) {
                assert_int_equal(J.col[k], ref->col[k]);
                assert_same(J.val[k], ref->val[k]);
            }
            for (size_t j = 0; j < ALLOC_M; j++)
                assert_same(y[j], yref[j]);
            ad_csr_free(&J);
            continue;
        }
        assert_alloc_failure(i, st, successes);
        failures++;
        assert_all_nan_n(y, ALLOC_M);
        assert_csr_empty(&J);
        assert_true(i < 1000);
        check_after_failure(x, i);
    }
    return failures;
}

static void test_alloc_failure(void **state)
{
    uint64_t rng = 0xa110c;
    double x[ALLOC_N], y[ALLOC_M];
    ad_csr *ref = &alloc_ref;
    (void)state;
    fill_uniform(&rng, x, ALLOC_N, -2.0, 2.0);
    assert_int_equal(ad_sparse_jacobian(alloc_f, NULL, ALLOC_N, x, ALLOC_M, y, ref), AD_OK);
    assert_int_equal(ref->row_ptr[1], ALLOC_N);
    assert_int_equal(ref->nnz, 2 * ALLOC_N + 1 + 2 + 2);
    /* inputs, outputs, the chunk table, three chunks, the row pointers, the
     * store's arrays or its map and pool, pending IDs and columns growing,
     * the CSR growing */
    fill_word = 1;  /* see test_failed_call_then_another */
    int fresh = alloc_failures(ref, y, x, 1);
    int kept = alloc_failures(ref, y, x, 0);
    fill_word = 0;
    if (getenv("DUALREV_TEST_VERBOSE"))
        fprintf(stderr, "# allocation failures: %d fresh, %d kept\n", fresh, kept);
    assert_true(fresh >= 15);
    assert_true(kept >= 8);
    ad_csr_free(ref);
}

/* A call that fails after the store's arrays were (re)allocated must leave
 * nothing that a later call trusts.  Each round: release the thread's
 * memory (the row epoch starts again from 0), a call failing at allocation
 * k, then a good call, which must give the right Jacobian.  Its first row
 * takes epoch 1, and every new block is filled with 1s: a stamp array that
 * was allocated but never zeroed says "already reached in this row" for
 * every ID.  (A library that initialises what it allocates does not care
 * what new blocks hold.) */
static void reaches_two(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = ad_mul(ad_sin(x[0]), 2.0);
    y[1] = x[1];
}

static void test_failed_call_then_another(void **state)
{
    const double x[2] = {0.5, 1.5};
    double y[2];
    ad_csr J;
    (void)state;
    int failures = 0, wrong = 0;
    fill_word = 1;
    for (long k = 0; k < 40; k++) {
        assert_int_equal(ad_release(), AD_OK);
        ad_test_fail_alloc_after(k);
        ad_status st = ad_sparse_jacobian(reaches_two, NULL, 2, x, 2, y, &J);
        ad_test_fail_alloc_after(-1);
        if (st != AD_OK) {
            assert_int_equal(st, AD_ENOMEM);
            assert_csr_empty(&J);
            failures++;
        } else {
            ad_csr_free(&J);
        }
        assert_int_equal(ad_sparse_jacobian(reaches_two, NULL, 2, x, 2, y, &J), AD_OK);
        assert_csr_valid(&J, 2, 2);
        if (J.nnz != 2 || J.col[0] != 0 || J.col[1] != 1 || !same_double(J.val[0], 2.0 * cos(x[0])) ||
            !same_double(J.val[1], 1.0)) {
            if (wrong++ == 0)
                print_error("after a call failing at allocation %ld: %zu entries, expected 2\n", k,
                            J.nnz);
        }
        ad_csr_free(&J);
    }
    fill_word = 0;
    assert_true(failures >= 6);
    assert_int_equal(wrong, 0);
}

/* y_0 = x_0 after `pad` multiplications by 1, y_1 = x_1 x_0: pad + 1 records. */
static void padded_f(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const long *pad = ctx;
    ad_real t = x[0];
    (void)n, (void)m;
    for (long k = 0; k < *pad; k++)
        t = ad_mul(t, 1.0);
    y[0] = t;
    y[1] = ad_mul(x[1], t);
}

static void check_limited(long pad, ad_status want)
{
    const double x[2] = {1.5, -0.5};
    double y[2];
    ad_csr J;
    fill(y, 2, 7.0), junk(&J);
    assert_int_equal(ad_sparse_jacobian(padded_f, &pad, 2, x, 2, y, &J), want);
    if (want != AD_OK) {
        assert_all_nan_n(y, 2);
        assert_csr_empty(&J);
        return;
    }
    assert_csr_valid(&J, 2, 2);
    assert_int_equal(J.nnz, 3);
    assert_same(J.val[0], 1.0);
    assert_same(J.val[1], x[1]);
    assert_same(J.val[2], x[0]);
    assert_same(y[1], x[0] * x[1]);
    ad_csr_free(&J);
}

/* A thread that has recorded nothing and only frees a Jacobian keeps its
 * arrays until it exits, and must free them then: a leak here fails the
 * sanitizer run. */
static void *free_only(void *J)
{
    ad_csr_free(J);
    return NULL;
}

static void test_freed_on_another_thread(void **state)
{
    const double x[2] = {0.5, 1.5};
    double y[2];
    ad_csr J;
    pthread_t t;
    (void)state;
    assert_int_equal(ad_sparse_jacobian(reaches_two, NULL, 2, x, 2, y, &J), AD_OK);
    assert_int_equal(pthread_create(&t, NULL, free_only, &J), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_csr_empty(&J);
    assert_int_equal(ad_sparse_jacobian(reaches_two, NULL, 2, x, 2, y, &J), AD_OK);
    assert_csr_valid(&J, 2, 2);
    assert_int_equal(J.nnz, 2);
    assert_same(J.val[0], 2.0 * cos(x[0]));
    assert_same(J.val[1], 1.0);
    ad_csr_free(&J);
}

static void test_tape_limit(void **state)
{
    (void)state;
    ad_set_tape_limit(100);
    check_limited(99, AD_OK);  /* exactly 100 records */
    check_limited(100, AD_ERANGE);
    check_limited(1000000, AD_ERANGE);
    ad_set_tape_limit(70000);  /* inside the second chunk */
    check_limited(69999, AD_OK);
    check_limited(70000, AD_ERANGE);
    ad_set_tape_limit(0);
    check_limited(200000, AD_OK);
}


static void test_foreign(void **state)
{
    static const long later_lengths[] = {999, 1};
    (void)state;
    for (size_t i = 0; i < 2; i++) {
        fn_smuggler s = {1, 1000, {0, 0, 0}};
        const double x[1] = {1.0};
        double y[2];
        ad_csr J;
        assert_int_equal(ad_sparse_jacobian(fn_smuggle, &s, 1, x, 2, y, &J), AD_OK);
        assert_same(y[1], 1001.0);
        assert_int_equal(J.nnz, 2);
        assert_same(J.val[1], 1001.0);
        ad_csr_free(&J);
        s.save = 0;
        s.length = later_lengths[i];
        fill(y, 2, 7.0), junk(&J);
        assert_int_equal(ad_sparse_jacobian(fn_smuggle, &s, 1, x, 2, y, &J), AD_EFOREIGN);
        assert_all_nan_n(y, 2);
        assert_csr_empty(&J);
    }
}

#define BOTH(f)                                                       \
    {#f " (dense store)", f, set_store, reset_store, &mode_dense},    \
    {#f " (hash store)", f, set_store, reset_store, &mode_hash}

int main(void)
{
    const struct CMUnitTest tests[] = {
        /* Last: the tests that met the qsort(NULL, 0) of lib/sparse.c's
         * resolve_row at 6527b00 (rows reaching no input before any row that
         * does; the column list's first allocation failing), on which a
         * -fno-sanitize-recover build aborts, so that such a build still
         * runs the others first. */
        BOTH(test_special_rows),
        BOTH(test_large),
        BOTH(test_nary_longer_than_a_chunk),
        BOTH(test_nested),
        BOTH(test_null_arguments),
        BOTH(test_tape_limit),
        BOTH(test_foreign),
        BOTH(test_failed_call_then_another),
        BOTH(test_alloc_failure),
        BOTH(test_random_functions),
        BOTH(test_rows_as_if_alone),
        BOTH(test_lanes_kept_apart),
        BOTH(test_calls_in_sequence),
        BOTH(test_arrays_kept_for_next_call),
        BOTH(test_freed_on_another_thread),
        BOTH(test_empty_shapes),
        BOTH(test_rows_reaching_nothing_first),
    };
    return cmocka_run_group_tests_name("sparse", tests, NULL, NULL);
}
