/* Long recordings: tapes that span many 65536-record chunks, chunk
 * boundaries, reuse of a tape by later recordings of other sizes, the
 * statistics, and ad_release. */
#include <stdio.h>
#include <string.h>

#include "check.h"

#define CHUNK 65536L
#define RECORD_BYTES 24

/* s = a, then s = s + b, `steps` times: one record per step, and
 * f = a + steps * b, gradient (1, steps), exactly.  With keep_at >= 0 the
 * value after keep_at steps is returned instead: the records after it are
 * on the tape but cannot reach the output. */
typedef struct add_chain {
    long steps;
    long keep_at;
} add_chain;

static ad_real add_chain_objective(const ad_real *x, size_t n, void *ctx)
{
    const add_chain *c = ctx;
    ad_real s = x[0], kept = x[0];
    (void)n;
    for (long k = 1; k <= c->steps; k++) {
        s = ad_add(s, x[1]);
        if (k == c->keep_at)
            kept = s;
    }
    return c->keep_at >= 0 ? kept : s;
}

static void check_add_chain(long steps)
{
    add_chain c = {steps, -1};
    const double x[2] = {0.5, 0.25};
    double g[2];
    assert_same(gradient_ok(add_chain_objective, &c, 2, x, g), 0.5 + 0.25 * (double)steps);
    assert_same(g[0], 1.0);
    assert_same(g[1], (double)steps);

    ad_tape_stats st;
    assert_int_equal(ad_tape_stats_get(&st), AD_OK);
    assert_int_equal(st.inputs, 2);
    assert_int_equal(st.records, steps);
    assert_int_equal(st.block_bytes, 0);  /* scalar records keep nothing beside them */
}

static void test_long_add_chain(void **state)
{
    (void)state;
    check_add_chain(500000);
}

/* s = a, then s = s * b, `steps` times: f = a b^steps, gradient
 * (b^steps, steps a b^(steps-1)).  Each step rounds, so the tolerance is
 * steps * 2^-53 with a factor 4 of slack. */
static ad_real mul_chain(const ad_real *x, size_t n, void *ctx)
{
    const long *steps = ctx;
    ad_real s = x[0];
    (void)n;
    for (long k = 0; k < *steps; k++)
        s = ad_mul(s, x[1]);
    return s;
}

static void test_long_mul_chain(void **state)
{
    long steps = 500000;
    const double x[2] = {1.5, 1 + 0x1p-20};
    double g[2], rtol = 4.0 * (double)steps * 0x1p-53;
    (void)state;
    double fx = gradient_ok(mul_chain, &steps, 2, x, g);
    assert_near(fx, x[0] * pow(x[1], (double)steps), rtol, 0);
    assert_near(g[0], pow(x[1], (double)steps), rtol, 0);
    assert_near(g[1], (double)steps * x[0] * pow(x[1], (double)(steps - 1)), rtol, 0);
}

/* Off-by-one errors in the chunk arithmetic show up right at the edges. */
static void test_chunk_boundaries(void **state)
{
    static const long sizes[] = {1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK - 1, 2 * CHUNK,
                                 2 * CHUNK + 1, 3 * CHUNK};
    (void)state;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        check_add_chain(sizes[i]);
}

/* A tape keeps its chunks: later recordings, shorter or longer, reuse them
 * and the reserved bytes never shrink. */
static void test_reuse_with_other_sizes(void **state)
{
    static const long sizes[] = {500000, 70000, 1000000, 100, 0, 300000, 1000000};
    size_t last_bytes = 0;
    (void)state;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        check_add_chain(sizes[i]);
        ad_tape_stats st;
        assert_int_equal(ad_tape_stats_get(&st), AD_OK);
        assert_int_equal(st.record_bytes, RECORD_BYTES);
        assert_true(st.tape_bytes >= (size_t)sizes[i] * RECORD_BYTES);
        assert_int_equal(st.tape_bytes % (CHUNK * RECORD_BYTES), 0);
        assert_true(st.tape_bytes >= last_bytes);
        assert_true(st.adjoint_bytes >= ((size_t)sizes[i] + 3) * sizeof(double));
        last_bytes = st.tape_bytes;
    }
    /* a million records fill 16 chunks: four alone, then slabs of four */
    assert_int_equal(last_bytes, 16 * CHUNK * RECORD_BYTES);
}

/* The output is an intermediate from the middle of a multi-chunk tape. */
static void test_output_from_middle_of_tape(void **state)
{
    static const long keep[] = {1, CHUNK, 100000, 199999};
    (void)state;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        add_chain c = {200000, keep[i]};
        const double x[2] = {-1.0, 0.5};
        double g[2];
        assert_same(gradient_ok(add_chain_objective, &c, 2, x, g), -1.0 + 0.5 * (double)keep[i]);
        assert_same(g[0], 1.0);
        assert_same(g[1], (double)keep[i]);
    }
}

static void test_release(void **state)
{
    ad_tape_stats st;
    (void)state;
    check_add_chain(3 * CHUNK);
    assert_int_equal(ad_release(), AD_OK);
    assert_int_equal(ad_tape_stats_get(&st), AD_OK);
    assert_int_equal(st.tape_bytes, 0);
    assert_int_equal(st.adjoint_bytes, 0);
    assert_int_equal(st.records, 0);
    assert_int_equal(st.inputs, 0);
    assert_int_equal(ad_release(), AD_OK);  /* twice is harmless */
    check_add_chain(CHUNK + 1);
}

/* The reverse sweep leaves the cotangents it read at 0, so that the next
 * gradient need not clear them (lib/resolve.c).  Gradients of objectives
 * with n-ary records, matrices and their products (blocks, whose output
 * slots the sweep skips) and plain chains, taken in turns and between
 * other uses of the cotangents' array (Jacobians, sparse Jacobians, J v,
 * Hessian-vector products), must each be bitwise the one taken first,
 * after ad_release(), from fresh memory. */
#define TURN_N 12

static ad_real turn_blocks(const ad_real *x, size_t n, void *ctx)
{
    ad_real A[9], y[3], s;
    ad_mat M;
    (void)n, (void)ctx;
    for (int k = 0; k < 9; k++)
        A[k] = ad_mul(x[k % TURN_N], x[(k + 1) % TURN_N]);
    assert_int_equal(ad_mat_record(3, 3, A, &M), AD_OK);
    ad_mat_vec(&M, x + 9, y);
    ad_mat_sqnorm(&M, x + 8, &s);
    return ad_add(ad_add(ad_dot(3, y, x + 3), s), ad_sqnorm(TURN_N, x));
}

static ad_real turn_chain(const ad_real *x, size_t n, void *ctx)
{
    ad_real acc = x[0];
    (void)ctx;
    for (int r = 0; r < 40; r++)
        for (size_t i = 1; i < n; i++)
            acc = ad_add(ad_mul(acc, 0.5), ad_sin(ad_mul(x[i], acc)));
    return acc;
}

static ad_real turn_short(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return ad_mul(x[2], ad_exp(x[5]));
}

static void turn_vector(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    for (size_t j = 0; j < m; j++)
        y[j] = ad_mul((double)(j + 1), turn_blocks(x, n, ctx));
}

static void test_cotangents_left_clear(void **state)
{
    static const ad_objective fs[] = {turn_blocks, turn_chain, turn_short};
    double x[TURN_N], v[TURN_N], first[3][TURN_N], g[TURN_N], fx, y[3], J[3 * TURN_N];
    uint64_t rng = 0xc1ea2;
    (void)state;
    fill_uniform(&rng, x, TURN_N, -1.0, 1.0);
    fill_uniform(&rng, v, TURN_N, -1.0, 1.0);
    for (int f = 0; f < 3; f++) {
        assert_int_equal(ad_release(), AD_OK);
        assert_int_equal(ad_gradient(fs[f], NULL, TURN_N, x, &fx, first[f]), AD_OK);
    }
    static const int order[] = {1, 0, 2, 0, 1, 1, 2, 0, 0, 1, 2, 2, 1, 0, 2, 1, 0, 1, 0, 2,
                                0, 0, 1, 2};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        int f = order[k];
        assert_int_equal(ad_gradient(fs[f], NULL, TURN_N, x, &fx, g), AD_OK);
        for (size_t i = 0; i < TURN_N; i++)
            assert_same(g[i], first[f][i]);
        /* two gradients in a row, then one of the array's other uses */
        if (k % 3 != 2)
            continue;
        if (k % 4 == 0)
            assert_int_equal(ad_jacobian(turn_vector, NULL, TURN_N, x, 3, y, J), AD_OK);
        else if (k % 4 == 1) {
            ad_csr S;
            assert_int_equal(ad_sparse_jacobian(turn_vector, NULL, TURN_N, x, 3, y, &S), AD_OK);
            ad_csr_free(&S);
        } else if (k % 4 == 2)
            assert_int_equal(ad_jvp(turn_vector, NULL, TURN_N, x, v, 3, y, J), AD_OK);
        else
            assert_int_equal(ad_hvp(fs[f], NULL, TURN_N, x, v, &fx, g, J), AD_OK);
    }
}

/* Many inputs and few records: the cotangents must cover the inputs. */
static ad_real sum_of_squares(const ad_real *x, size_t n, void *ctx)
{
    ad_real s = ad_const(0.0);
    (void)ctx;
    for (size_t i = 0; i < n; i += 1000)
        s = ad_add(s, ad_mul(x[i], x[i]));
    return s;
}

static void test_many_inputs(void **state)
{
    enum { N = 200000 };
    static double x[N], g[N];
    (void)state;
    for (size_t i = 0; i < N; i++)
        x[i] = (double)(i % 7) - 3.0;
    gradient_ok(sum_of_squares, NULL, N, x, g);
    for (size_t i = 0; i < N; i++)
        assert_same(g[i], i % 1000 == 0 ? 2 * x[i] : 0.0);
}

/* ---- ad_tape_dump ---- */

/* x0 x1 + sin x0 + dot((x0, x1), (x1, 2)), with the dump status taken
 * inside the recording. */
static ad_real dump_objective(const ad_real *x, size_t n, void *ctx)
{
    ad_status *inside = ctx;
    ad_real b[2] = {x[1], ad_const(2.0)};
    (void)n;
    *inside = ad_tape_dump(stderr, 0);
    return ad_add(ad_add(ad_mul(x[0], x[1]), ad_sin(x[0])), ad_dot(2, x, b));
}

/* The dump of the last recording, at most max_records records, as text. */
static ad_status dump_to(char *buf, size_t size, size_t max_records)
{
    FILE *f = tmpfile();
    assert_non_null(f);
    ad_status s = ad_tape_dump(f, max_records);
    rewind(f);
    size_t len = fread(buf, 1, size - 1, f);
    buf[len] = '\0';
    fclose(f);
    return s;
}

static int count_lines(const char *text)
{
    int lines = 0;
    for (; *text; text++)
        lines += *text == '\n';
    return lines;
}

static void test_dump(void **state)
{
    static char text[4096];
    const double x[2] = {0.5, 2.0};
    double g[2];
    ad_status inside = AD_OK;
    (void)state;
    assert_int_equal(ad_tape_dump(NULL, 10), AD_EINVAL);
    assert_int_equal(ad_release(), AD_OK);
    assert_int_equal(dump_to(text, sizeof text, 10), AD_EINVAL);  /* nothing recorded */

    gradient_ok(dump_objective, &inside, 2, x, g);
    assert_int_equal(inside, AD_EBUSY);
    /* mul, sin, add, the dot's two slots (one per element pair) and its
     * header, add; after two heading lines, one line per record */
    assert_int_equal(dump_to(text, sizeof text, 100), AD_OK);
    assert_non_null(strstr(text, "IDs 1..2"));
    assert_non_null(strstr(text, "records: 7"));
    assert_non_null(strstr(text, "n-ary"));
    assert_int_equal(count_lines(text), 2 + 7);
    assert_int_equal(dump_to(text, sizeof text, 2), AD_OK);
    assert_int_equal(count_lines(text), 2 + 2);
}

/* A recording that failed leaves nothing to dump. */
static void test_dump_after_failure(void **state)
{
    static char text[256];
    add_chain c = {10, -1};
    const double x[2] = {1.0, 1.0};
    double fx, g[2];
    (void)state;
    ad_set_tape_limit(5);
    ad_status s = ad_gradient(add_chain_objective, &c, 2, x, &fx, g);
    ad_set_tape_limit(0);
    assert_int_equal(s, AD_ERANGE);
    assert_int_equal(dump_to(text, sizeof text, 10), AD_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_long_add_chain),
        cmocka_unit_test(test_long_mul_chain),
        cmocka_unit_test(test_chunk_boundaries),
        cmocka_unit_test(test_reuse_with_other_sizes),
        cmocka_unit_test(test_output_from_middle_of_tape),
        cmocka_unit_test(test_release),
        cmocka_unit_test(test_many_inputs),
        cmocka_unit_test(test_cotangents_left_clear),
        cmocka_unit_test(test_dump),
        cmocka_unit_test(test_dump_after_failure),
    };
    return cmocka_run_group_tests_name("tape", tests, NULL, NULL);
}
