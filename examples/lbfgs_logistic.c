/* lbfgs_logistic: fit an L2-regularised logistic regression with liblbfgs,
 * taking every gradient from dualrev.
 *
 * The data are synthetic and reproducible: features drawn from a fixed-seed
 * generator, labels from a hidden weight vector with a fraction flipped.  The
 * flips keep the classes overlapping, and the L2 term would keep the optimum
 * finite even without them.
 *
 * The objective lives in logistic_objective.h and is compiled twice: the
 * ad_real copy feeds L-BFGS through ad_gradient, the double copy scores the
 * result (final loss, training accuracy) without touching a tape.
 *
 * Usage: lbfgs_logistic [--tape-limit RECORDS]
 * A tape limit smaller than one recording makes ad_gradient fail with
 * AD_ERANGE, which shows how a failure travels out through L-BFGS. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dualrev.h>
#include <dualrev/lbfgs.h>
#include <lbfgs.h>

#define T double
#define NAME(id) id##_double
#include "logistic_objective.h"

#define T ad_real
#define NAME(id) id##_ad
#include "logistic_objective.h"

/* ad_gradient reads and writes double; liblbfgs may be configured for
 * float, in which case its buffers could not be handed over directly. */
_Static_assert(_Generic((lbfgsfloatval_t)0, double: 1, default: 0),
               "liblbfgs must be built with LBFGS_FLOAT == 64");

enum { SAMPLES = 2000, FEATURES = 50, PARAMS = FEATURES + 1 };
#define LAMBDA 1e-3
#define FLIP_RATE 0.10
#define SEED UINT64_C(20240607)

/* SplitMix64: a full-period 64-bit generator, written out here so that the
 * data set does not depend on the C library's rand(). */
static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Uniform on [0, 1): the top 53 bits fill a double's significand exactly. */
static double next_unit(uint64_t *state)
{
    return (double)(next_u64(state) >> 11) * 0x1.0p-53;
}

struct dataset {
    double x[SAMPLES * FEATURES];
    double y[SAMPLES];
    double w_true[PARAMS];
    size_t flipped;
};

static void make_dataset(struct dataset *ds)
{
    uint64_t state = SEED;
    /* Feature j is uniform with standard deviation scale[j], and its true
     * weight is divided by scale[j], so every feature carries about the same
     * signal and scores have a standard deviation near 2: most labels are
     * clear-cut, some are not.  Scales spread over a decade, as in raw
     * unstandardised data, make the Hessian ill-conditioned enough that
     * L-BFGS has real work to do.  Only arithmetic and sqrt (which IEEE 754
     * rounds exactly) are used, so the data set is the same everywhere. */
    double scale[FEATURES];
    for (size_t j = 0; j < FEATURES; j++)
        scale[j] = 0.3 + 2.7 * next_unit(&state);
    for (size_t j = 0; j < PARAMS; j++)
        ds->w_true[j] = next_unit(&state) - 0.5;
    for (size_t j = 0; j < FEATURES; j++)
        ds->w_true[j] /= scale[j];
    ds->flipped = 0;
    for (size_t i = 0; i < SAMPLES; i++) {
        double z = ds->w_true[FEATURES];
        for (size_t j = 0; j < FEATURES; j++) {
            double v = (2.0 * next_unit(&state) - 1.0) * sqrt(3.0) * scale[j];
            ds->x[i * FEATURES + j] = v;
            z += ds->w_true[j] * v;
        }
        double label = z >= 0.0 ? 1.0 : -1.0;
        if (next_unit(&state) < FLIP_RATE) {
            label = -label;
            ds->flipped++;
        }
        ds->y[i] = label;
    }
}

/* The bridge's progress callback (dualrev/lbfgs.h), which cancels the run
 * after a failed gradient, with a line of output per iteration. */
static int progress(void *instance, const lbfgsfloatval_t *x, const lbfgsfloatval_t *g,
                    const lbfgsfloatval_t fx, const lbfgsfloatval_t xnorm,
                    const lbfgsfloatval_t gnorm, const lbfgsfloatval_t step, int n, int k,
                    int ls)
{
    printf("%4d  %18.15f  %10.3e  %8.4f  %10.3e  %5d\n", k, fx, gnorm, xnorm, step, ls);
    return ad_lbfgs_progress(instance, x, g, fx, xnorm, gnorm, step, n, k, ls);
}

static const char *lbfgs_code_text(int code)
{
    switch (code) {
    case LBFGS_SUCCESS: return "LBFGS_SUCCESS: converged, |g| <= epsilon * max(1, |x|)";
    case LBFGS_STOP: return "LBFGS_STOP: the objective stopped decreasing (delta test)";
    case LBFGS_ALREADY_MINIMIZED: return "LBFGS_ALREADY_MINIMIZED: the start point is a minimum";
    case LBFGSERR_UNKNOWNERROR: return "LBFGSERR_UNKNOWNERROR: unknown error";
    case LBFGSERR_LOGICERROR: return "LBFGSERR_LOGICERROR: logic error";
    case LBFGSERR_OUTOFMEMORY: return "LBFGSERR_OUTOFMEMORY: insufficient memory";
    case LBFGSERR_CANCELED: return "LBFGSERR_CANCELED: cancelled by the progress callback";
    case LBFGSERR_INVALID_N: return "LBFGSERR_INVALID_N: invalid number of variables";
    case LBFGSERR_INVALID_N_SSE: return "LBFGSERR_INVALID_N_SSE: variables not a multiple of 16 (SSE build)";
    case LBFGSERR_INVALID_X_SSE: return "LBFGSERR_INVALID_X_SSE: x not 16-byte aligned (SSE build)";
    case LBFGSERR_INVALID_EPSILON: return "LBFGSERR_INVALID_EPSILON: invalid epsilon";
    case LBFGSERR_INVALID_TESTPERIOD: return "LBFGSERR_INVALID_TESTPERIOD: invalid past";
    case LBFGSERR_INVALID_DELTA: return "LBFGSERR_INVALID_DELTA: invalid delta";
    case LBFGSERR_INVALID_LINESEARCH: return "LBFGSERR_INVALID_LINESEARCH: invalid line search";
    case LBFGSERR_INVALID_MINSTEP: return "LBFGSERR_INVALID_MINSTEP: invalid min_step";
    case LBFGSERR_INVALID_MAXSTEP: return "LBFGSERR_INVALID_MAXSTEP: invalid max_step";
    case LBFGSERR_INVALID_FTOL: return "LBFGSERR_INVALID_FTOL: invalid ftol";
    case LBFGSERR_INVALID_WOLFE: return "LBFGSERR_INVALID_WOLFE: invalid wolfe";
    case LBFGSERR_INVALID_GTOL: return "LBFGSERR_INVALID_GTOL: invalid gtol";
    case LBFGSERR_INVALID_XTOL: return "LBFGSERR_INVALID_XTOL: invalid xtol";
    case LBFGSERR_INVALID_MAXLINESEARCH: return "LBFGSERR_INVALID_MAXLINESEARCH: invalid max_linesearch";
    case LBFGSERR_INVALID_ORTHANTWISE: return "LBFGSERR_INVALID_ORTHANTWISE: invalid orthantwise_c";
    case LBFGSERR_INVALID_ORTHANTWISE_START: return "LBFGSERR_INVALID_ORTHANTWISE_START: invalid orthantwise_start";
    case LBFGSERR_INVALID_ORTHANTWISE_END: return "LBFGSERR_INVALID_ORTHANTWISE_END: invalid orthantwise_end";
    case LBFGSERR_OUTOFINTERVAL: return "LBFGSERR_OUTOFINTERVAL: line search step out of the interval of uncertainty";
    case LBFGSERR_INCORRECT_TMINMAX: return "LBFGSERR_INCORRECT_TMINMAX: line search interval became inconsistent";
    case LBFGSERR_ROUNDING_ERROR: return "LBFGSERR_ROUNDING_ERROR: rounding errors block further progress";
    case LBFGSERR_MINIMUMSTEP: return "LBFGSERR_MINIMUMSTEP: line search step fell below min_step";
    case LBFGSERR_MAXIMUMSTEP: return "LBFGSERR_MAXIMUMSTEP: line search step exceeded max_step";
    case LBFGSERR_MAXIMUMLINESEARCH: return "LBFGSERR_MAXIMUMLINESEARCH: line search ran out of evaluations";
    case LBFGSERR_MAXIMUMITERATION: return "LBFGSERR_MAXIMUMITERATION: iteration limit reached";
    case LBFGSERR_WIDTHTOOSMALL: return "LBFGSERR_WIDTHTOOSMALL: interval of uncertainty below xtol";
    case LBFGSERR_INVALIDPARAMETERS: return "LBFGSERR_INVALIDPARAMETERS: a line search parameter went negative";
    case LBFGSERR_INCREASEGRADIENT: return "LBFGSERR_INCREASEGRADIENT: the search direction is not a descent direction";
    default: return "unrecognised liblbfgs return code";
    }
}

/* Fraction of samples whose label has the sign of the score. */
static double accuracy(const double *w, const struct logistic_data *d)
{
    size_t right = 0;
    for (size_t i = 0; i < d->samples; i++)
        right += logistic_score_double(w, d, i) * d->y[i] > 0.0;
    return (double)right / (double)d->samples;
}

static double norm(const double *v, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += v[i] * v[i];
    return sqrt(s);
}

static int parse_args(int argc, char **argv, size_t *tape_limit)
{
    *tape_limit = 0;
    if (argc == 1)
        return 0;
    if (argc == 3 && strcmp(argv[1], "--tape-limit") == 0) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(argv[2], &end, 10);
        /* strtoull would accept leading blanks and a minus sign; a count
         * must start with a digit. */
        if (argv[2][0] >= '0' && argv[2][0] <= '9' && errno == 0 && *end == '\0' && v > 0 &&
            v <= SIZE_MAX) {
            *tape_limit = (size_t)v;
            return 0;
        }
    }
    fprintf(stderr, "usage: %s [--tape-limit RECORDS]\n", argv[0]);
    return -1;
}

int main(int argc, char **argv)
{
    size_t tape_limit;
    if (parse_args(argc, argv, &tape_limit) != 0)
        return 2;
    if (tape_limit)
        ad_set_tape_limit(tape_limit);

    /* Too large for the stack, and it must outlive every callback. */
    struct dataset *ds = malloc(sizeof *ds);
    lbfgsfloatval_t *w = lbfgs_malloc(PARAMS);
    double *grad = malloc(PARAMS * sizeof *grad);
    if (!ds || !w || !grad) {
        fprintf(stderr, "out of memory\n");
        free(ds);
        lbfgs_free(w);
        free(grad);
        return 1;
    }
    make_dataset(ds);

    struct logistic_data data = {.samples = SAMPLES, .features = FEATURES, .x = ds->x,
                                 .y = ds->y, .lambda = LAMBDA};
    /* liblbfgs's callbacks for the objective: each evaluation one ad_gradient */
    ad_lbfgs bridge = ad_lbfgs_of(logistic_objective_ad, &data);
    printf("L2-regularised logistic regression: %d samples, %d features + bias, "
           "lambda = %g, %zu labels flipped (%.1f%%)\n",
           SAMPLES, FEATURES, LAMBDA, ds->flipped, 100.0 * (double)ds->flipped / SAMPLES);

    for (int i = 0; i < PARAMS; i++)
        w[i] = 0.0;

    lbfgs_parameter_t param;
    lbfgs_parameter_init(&param);
    param.max_iterations = 500;

    printf("\n%4s  %18s  %10s  %8s  %10s  %5s\n", "iter", "f", "|g|", "|x|", "step", "evals");
    lbfgsfloatval_t fx_lbfgs;
    int ret = lbfgs(PARAMS, w, &fx_lbfgs, ad_lbfgs_evaluate, progress, &bridge, &param);
    printf("\nlbfgs returned %d: %s\n", ret, lbfgs_code_text(ret));
    printf("gradient evaluations  : %lu\n", bridge.evaluations);

    int status = EXIT_SUCCESS;
    if (bridge.status != AD_OK) {
        fprintf(stderr,
                "ad_gradient failed during the optimisation: %s\n"
                "(lbfgs saw only NaN from then on: its return code says nothing about the fit)\n",
                ad_strerror(bridge.status));
        status = EXIT_FAILURE;
        goto out;
    }
    if (ret < 0)
        status = EXIT_FAILURE;

    /* A fresh gradient at the returned point: lbfgs() does not hand back its
     * last gradient, and on failure it reverts to an earlier point anyway. */
    double fx_ad;
    ad_status s = ad_gradient(logistic_objective_ad, &data, PARAMS, w, &fx_ad, grad);
    if (s != AD_OK) {
        fprintf(stderr, "ad_gradient failed at the final point: %s\n", ad_strerror(s));
        status = EXIT_FAILURE;
        goto out;
    }
    ad_tape_stats stats;
    if (ad_tape_stats_get(&stats) == AD_OK)
        printf("tape per evaluation   : %zu records, %.1f MiB reserved\n", stats.records,
               (double)stats.tape_bytes / (1024.0 * 1024.0));

    /* Both copies run the same operations in the same order on the same
     * values (dualrev computes an ad_real's value exactly as double code
     * would), so the results must agree to the last bit. */
    double fx_double = logistic_objective_double(w, PARAMS, &data);
    printf("final f (ad_gradient) : %.17g\n", fx_ad);
    printf("final f (double build): %.17g  %s\n", fx_double,
           fx_double == fx_ad ? "(bitwise equal)" : "(MISMATCH)");
    if (fx_double != fx_ad)
        status = EXIT_FAILURE;
    double gnorm = norm(grad, PARAMS), xnorm = norm(w, PARAMS);
    printf("final |g|             : %.3e  (|g| / max(1, |x|) = %.3e, epsilon = %g)\n", gnorm,
           gnorm / fmax(1.0, xnorm), param.epsilon);

    printf("training accuracy     : %.2f%% (hidden true weights: %.2f%%)\n",
           100.0 * accuracy(w, &data), 100.0 * accuracy(ds->w_true, &data));

out:
    printf("%s\n", status == EXIT_SUCCESS ? "result: converged" : "result: FAILED");
    free(ds);
    lbfgs_free(w);
    free(grad);
    return status;
}
