/* ADBench LSTM (benchmarks/lstm/): the loss and its gradient against
 * ADBench's reference results (the hand-written derivatives' output, and the
 * values ADBench's own test checks); the plain-double instantiation against
 * the recorded one; a kept linearisation's reverse sweep against
 * ad_gradient; the loaders' errors.  The data are in tests/data/adbench
 * (LSTM_DATA_DIR, set by meson). */
#define _POSIX_C_SOURCE 200809L  /* fmemopen */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "lstm.h"

#define RTOL_F 1e-12        /* the objective against the reference */
#define RTOL_GRAD 1e-9      /* gradients against the reference (the shared set's README) */
#define ATOL_EXPECTED 1e-8  /* ADBench's test: its objective is written to 8 digits */
#define RTOL_PLAIN 1e-14    /* plain double against the recorded value */

#define STEM "lstm_l2_c1024"

static const char *data_path(const char *name)
{
    static char path[4096];
    int len = snprintf(path, sizeof path, "%s/%s", LSTM_DATA_DIR, name);
    assert_true(len > 0 && (size_t)len < sizeof path);
    return path;
}

typedef struct fixture {
    lstm_problem p;
    lstm_reference ref;
    lstm_work w;
    double *x, *grad;
    size_t inputs;
} fixture;

static void load(fixture *fx)
{
    char err[LSTM_ERR_SIZE];
    if (lstm_load(data_path(STEM ".txt"), &fx->p, err)) {
        print_error("%s\n", err);
        fail();
    }
    assert_int_equal(fx->p.l, 2);
    assert_int_equal(fx->p.c, 1024);
    assert_int_equal(fx->p.b, 14);
    fx->inputs = lstm_inputs(&fx->p);
    assert_int_equal(fx->inputs, 8 * 2 * 14 + 3 * 14);
    if (lstm_load_reference(data_path(STEM "_manual.txt"), fx->inputs, &fx->ref, err)) {
        print_error("%s\n", err);
        fail();
    }
    assert_true(lstm_reference_matches(&fx->ref, &fx->p));
    assert_int_equal(lstm_work_init(&fx->w, &fx->p), 0);
    fx->x = xmalloc(fx->inputs * sizeof *fx->x);
    fx->grad = xmalloc(fx->inputs * sizeof *fx->grad);
    lstm_pack(&fx->p, fx->x);
}

static void unload(fixture *fx)
{
    free(fx->x);
    free(fx->grad);
    lstm_work_free(&fx->w);
    lstm_reference_free(&fx->ref);
    lstm_free(&fx->p);
}

/* Every entry; where the reference is exactly 0 (an input that never meets
 * a nonzero bit of the text), the gradient must be 0 too. */
static void check_gradient(const lstm_reference *ref, const double *grad)
{
    for (size_t j = 0; j < ref->count; j++)
        assert_near(grad[j], ref->grad[j], RTOL_GRAD, 0.0);
}

/* ---- loading ---- */

static void test_load_values(void **state)
{
    (void)state;
    fixture fx;
    load(&fx);
    /* the first weight, layer 1's first bias, out_b's last, layer 1's
     * first c, bits of the last character */
    assert_same(fx.p.main_params[0], 0.7477620204927391);
    assert_same(fx.p.main_params[8 * 14 + 4 * 14], 0.21684055088298304);
    assert_same(fx.p.extra[3 * 14 - 1], 0.11670601224776311);
    assert_same(fx.p.state[3 * 14], 0.5607967723731909);
    assert_same(fx.p.seq[1023 * 14 + 6], 0.0);
    assert_same(fx.p.seq[1023 * 14 + 7], 1.0);
    /* params: [main, extra] */
    assert_same(fx.x[8 * 2 * 14], fx.p.extra[0]);
    assert_same(fx.x[fx.inputs - 1], fx.p.extra[3 * 14 - 1]);
    assert_int_equal(fx.ref.objectives, 2);
    assert_same(fx.ref.objective, 6.66665179558852183e-01);
    assert_same(fx.ref.grad[0], 3.14387024996101187e-06);
    assert_same(fx.ref.grad[1], -0.0);
    assert_int_equal(fx.ref.l, 2);
    unload(&fx);
}

/* lstm_read on text; the message, which must name line `line`. */
static const char *read_bad(const char *text, const char *line)
{
    static char err[LSTM_ERR_SIZE];
    lstm_problem p;
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    assert_int_equal(lstm_read(f, "bad", &p, err), -1);
    assert_int_equal(errno, EINVAL);
    fclose(f);
    assert_null(p.main_params);
    assert_null(p.seq);
    if (!strstr(err, line)) {
        print_error("message \"%s\" does not name %s\n", err, line);
        fail();
    }
    return err;
}

static void assert_mentions(const char *msg, const char *what)
{
    if (!strstr(msg, what)) {
        print_error("message \"%s\" does not mention \"%s\"\n", msg, what);
        fail();
    }
}

/* l c b = 1 2 1: main 8 values (two rows of 4), extra 3, state 2, text 2 */
#define GOOD_HEAD "1 2 1\n\n1 2 3 4\n5 6 7 8\n\n0.5\n0.25\n-1\n\n0\n0\n\n"

static void test_load_errors(void **state)
{
    (void)state;
    lstm_problem p;
    lstm_reference ref;
    char err[LSTM_ERR_SIZE];
    assert_int_equal(lstm_load(data_path("no_such_file.txt"), &p, err), -1);
    assert_int_equal(errno, ENOENT);
    assert_null(p.main_params);
    assert_mentions(err, "no_such_file");
    /* a reference is not a data file, and the other way round */
    assert_int_equal(lstm_load(data_path(STEM "_manual.txt"), &p, err), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(lstm_load_reference(data_path(STEM ".txt"), 266, &ref, err), -1);
    assert_int_equal(errno, EINVAL);
    assert_null(ref.grad);

    assert_mentions(read_bad("1 1 1\n", "bad:1:"), "c (characters)");
    assert_mentions(read_bad("1 2 1\n\n1 2 3\n", "bad:3:"), "layer 0 weights[3]");
    assert_mentions(read_bad("1 2 1\n\n1 2 3 4\n5 x 7 8\n", "bad:4:"), "layer 0 biases[1]");
    assert_mentions(read_bad(GOOD_HEAD "1\n", "bad:13:"), "character 1[0]");
    assert_mentions(read_bad(GOOD_HEAD "1\n0\n7\n", "bad:15:"), "after the 2 characters");
    assert_mentions(read_bad("1 2 1\n\n1 2 3 4\n5 6 7 8\n\n0.5\ninf\n", "bad:7:"), "out_w[0]");
    /* and a good one */
    const char *good = GOOD_HEAD "1\n0\n";
    FILE *f = fmemopen((void *)good, strlen(good), "r");
    assert_non_null(f);
    assert_int_equal(lstm_read(f, "good", &p, err), 0);
    fclose(f);
    assert_same(p.main_params[5], 6.0);
    assert_same(p.extra[2], -1.0);
    assert_same(p.seq[0], 1.0);
    lstm_free(&p);
}

static const char *read_bad_reference(const char *text, size_t inputs, const char *line)
{
    static char err[LSTM_ERR_SIZE];
    lstm_reference ref;
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    assert_int_equal(lstm_read_reference(f, "ref", inputs, &ref, err), -1);
    assert_int_equal(errno, EINVAL);
    fclose(f);
    assert_null(ref.grad);
    assert_mentions(err, line);
    return err;
}

static void test_reference_errors(void **state)
{
    (void)state;
    assert_mentions(read_bad_reference("0.5\n1\n", 2, "ref:2:"), "2 gradient entries");
    assert_mentions(read_bad_reference("0.5\n0.5\n1\n2\n3\n", 2, "ref:5:"), "more than");
    assert_mentions(read_bad_reference("0.5\n0.25\n1\n2\n", 2, "ref:4:"), "given twice");
    assert_mentions(read_bad_reference("0.5\n1 x\n", 2, "ref:2:"), "\"x\"");
    assert_mentions(read_bad_reference("# l c b = 1 1 1\n", 2, "ref:1:"), "invalid");
    assert_mentions(read_bad_reference("0.5\n1\n2\n", 0, "ref"), "length 0");

    /* the expected-values layout: comments, the objective once */
    lstm_reference ref;
    char err[LSTM_ERR_SIZE];
    const char *text = "# a comment\n0.5\n# another\n1 2\n";
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    assert_non_null(f);
    if (lstm_read_reference(f, "ref", 2, &ref, err)) {
        print_error("%s\n", err);
        fail();
    }
    fclose(f);
    assert_int_equal(ref.objectives, 1);
    assert_int_equal(ref.l, 0);
    assert_same(ref.objective, 0.5);
    assert_same(ref.grad[1], 2.0);
    lstm_reference_free(&ref);
}

/* ---- values and gradients ---- */

static void test_gradient(void **state)
{
    (void)state;
    fixture fx;
    load(&fx);
    lstm_eval e = {&fx.p, &fx.w};
    double f;
    assert_ok(ad_gradient(lstm_objective_ad, &e, fx.inputs, fx.x, &f, fx.grad));
    assert_near(f, fx.ref.objective, RTOL_F, 0.0);
    check_gradient(&fx.ref, fx.grad);
    /* the plain-double instantiation: the same arithmetic */
    assert_near(lstm_objective(&e, fx.x), f, RTOL_PLAIN, 0.0);
    unload(&fx);
}

/* The values ADBench's LstmTests check, to its tolerance for the objective
 * (written to 8 digits) and ours for the gradient. */
static void test_adbench_expected(void **state)
{
    (void)state;
    fixture fx;
    lstm_reference expected;
    char err[LSTM_ERR_SIZE];
    load(&fx);
    if (lstm_load_reference(data_path("expected_" STEM ".txt"), fx.inputs, &expected, err)) {
        print_error("%s\n", err);
        fail();
    }
    assert_true(lstm_reference_matches(&expected, &fx.p));
    lstm_eval e = {&fx.p, &fx.w};
    double f;
    assert_ok(ad_gradient(lstm_objective_ad, &e, fx.inputs, fx.x, &f, fx.grad));
    assert_near(f, expected.objective, 0.0, ATOL_EXPECTED);
    check_gradient(&expected, fx.grad);
    lstm_reference_free(&expected);
    unload(&fx);
}

/* Every call starts from the file's state: a second call gives the same
 * bits, and the problem's state is untouched. */
static void test_state_reset(void **state)
{
    (void)state;
    fixture fx;
    load(&fx);
    lstm_eval e = {&fx.p, &fx.w};
    double h0 = fx.p.state[0], f1, f2, first = lstm_objective(&e, fx.x);
    double *g2 = xmalloc(fx.inputs * sizeof *g2);
    assert_same(lstm_objective(&e, fx.x), first);
    assert_ok(ad_gradient(lstm_objective_ad, &e, fx.inputs, fx.x, &f1, fx.grad));
    assert_ok(ad_gradient(lstm_objective_ad, &e, fx.inputs, fx.x, &f2, g2));
    assert_same(f2, f1);
    assert_memory_equal(g2, fx.grad, fx.inputs * sizeof *g2);
    assert_same(fx.p.state[0], h0);
    free(g2);
    unload(&fx);
}

/* ad_linearize once, ad_linear_vjp with cotangent 1 (what lstm-bench times
 * as the sweep alone): the reference gradient, twice over. */
static void test_linear_vjp(void **state)
{
    (void)state;
    fixture fx;
    load(&fx);
    lstm_eval e = {&fx.p, &fx.w};
    ad_linear *lin = NULL;
    double y, one = 1.0;
    assert_ok(ad_linearize(lstm_function_ad, &e, fx.inputs, fx.x, 1, &y, &lin));
    assert_near(y, fx.ref.objective, RTOL_F, 0.0);
    for (int k = 0; k < 2; k++) {
        assert_ok(ad_linear_vjp(lin, &one, fx.grad));
        check_gradient(&fx.ref, fx.grad);
    }
    ad_linear_free(lin);
    unload(&fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_values),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_reference_errors),
        cmocka_unit_test(test_gradient),
        cmocka_unit_test(test_adbench_expected),
        cmocka_unit_test(test_state_reset),
        cmocka_unit_test(test_linear_vjp),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
