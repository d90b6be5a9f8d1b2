/* newton_logistic: fit an L2-regularised logistic regression by Newton's
 * method, with the exact Hessian from ad_hessian.
 *
 * Each iteration records the loss once (second-order recording) and gets
 * f, its gradient g and its Hessian H from that one recording.  The Newton
 * direction solves H d = -g.  H is symmetric positive definite here:
 * v^T H v = mean_i s_i (x_i . v_w + v_b)^2 + lambda |v_w|^2 with every
 * s_i = softplus'' > 0, positive for v_w != 0 through the L2 term and for
 * v = (0, v_b) through the data.  So a Cholesky factorisation solves it,
 * and its success checks that H is what it should be.  A backtracking line search
 * keeps the first steps safe; near the optimum every step is the full
 * Newton step and the gradient norm roughly squares at each iteration --
 * quadratic convergence, which only an exact Hessian gives.  The program
 * checks that it sees it (see check_quadratic) and exits nonzero otherwise.
 *
 * The data are synthetic and reproducible (SplitMix64 with a fixed seed, as
 * in lbfgs_logistic.c): features drawn uniformly with scales over a decade,
 * labels from a hidden weight vector, a tenth of them flipped so that the
 * classes overlap. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dualrev.h>

enum { SAMPLES = 2000, FEATURES = 30, PARAMS = FEATURES + 1 };
#define LAMBDA 1e-3       /* L2 weight; the bias is not penalised */
#define FLIP_RATE 0.10
#define SEED UINT64_C(20240607)

#define GRAD_TOL 1e-10    /* stop when |g| is below this */
#define MAX_ITER 30       /* Newton needs about ten here; thirty means trouble */

/* ---- data ---- */

/* SplitMix64: the data set does not depend on the C library's rand(). */
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

struct data {
    double x[SAMPLES * FEATURES];  /* samples x features, row-major */
    double y[SAMPLES];             /* labels, -1 or +1 */
    size_t flipped;
};

static void make_data(struct data *d)
{
    uint64_t state = SEED;
    double scale[FEATURES], w_true[PARAMS];
    for (size_t j = 0; j < FEATURES; j++)
        scale[j] = 0.3 + 2.7 * next_unit(&state);
    for (size_t j = 0; j < PARAMS; j++)
        w_true[j] = next_unit(&state) - 0.5;
    for (size_t j = 0; j < FEATURES; j++)
        w_true[j] /= scale[j];  /* each feature carries about the same signal */
    d->flipped = 0;
    for (size_t i = 0; i < SAMPLES; i++) {
        double z = w_true[FEATURES];
        for (size_t j = 0; j < FEATURES; j++) {
            double v = (2.0 * next_unit(&state) - 1.0) * sqrt(3.0) * scale[j];
            d->x[i * FEATURES + j] = v;
            z += w_true[j] * v;
        }
        d->y[i] = z >= 0.0 ? 1.0 : -1.0;
        if (next_unit(&state) < FLIP_RATE) {
            d->y[i] = -d->y[i];
            d->flipped++;
        }
    }
}

/* ---- the objective ---- */

/* log(1 + e^t), the logistic loss of a sample with margin -t.
 *
 * Written with a branch on the value, not as max(t, 0) + log1p(e^-|t|) (the
 * form of logistic_objective.h): both branches are smooth functions equal
 * to softplus, so the recorded first and second partials are exact for
 * every t.  The max/abs form is exact to first order, but its second
 * derivative follows the conventions for fmax and fabs (0 at the kink, see
 * docs/conventions.md) and misses softplus''(0) = 1/4 exactly at t = 0 --
 * where every sample sits at the usual starting point w = 0, which would
 * make the bias's row of H zero and H singular. */
static ad_real softplus(ad_real t)
{
    if (ad_value(t) > 0.0)
        return ad_add(t, ad_log1p(ad_exp(ad_neg(t))));  /* e^-t < 1: no overflow */
    return ad_log1p(ad_exp(t));
}

/* f(w) = (1/SAMPLES) sum_i softplus(-y_i (x_i . w + b)) + (LAMBDA/2) |w|^2,
 * with w = params[0 .. FEATURES) and b = params[FEATURES].  The score is one
 * n-ary record (ad_dot with a constant row); the sums are n-ary too. */
static ad_real logistic_loss(const ad_real *params, size_t n, void *ctx)
{
    const struct data *d = ctx;
    static ad_real terms[SAMPLES];  /* one thread; 16 bytes per sample */
    (void)n;
    for (size_t i = 0; i < SAMPLES; i++) {
        ad_real score = ad_add(ad_dot(FEATURES, params, d->x + i * FEATURES), params[FEATURES]);
        terms[i] = softplus(ad_mul(score, -d->y[i]));
    }
    ad_real mean = ad_div(ad_sum(SAMPLES, terms), (double)SAMPLES);
    return ad_add(mean, ad_mul(ad_sqnorm(FEATURES, params), 0.5 * LAMBDA));
}

/* f alone, for the line search.  Outside a recording the ad_real
 * operations compute values and record nothing, so the same function
 * serves; the numbers are those a recording would compute, bit for bit. */
static double loss_value(const double *w, const struct data *d)
{
    ad_real p[PARAMS];
    for (size_t j = 0; j < PARAMS; j++)
        p[j] = ad_const(w[j]);
    return ad_value(logistic_loss(p, PARAMS, (void *)d));
}

/* ---- linear algebra ---- */

/* H = L L^T in place (the lower triangle becomes L).  Returns 0 if H is not
 * positive definite (a nonpositive pivot), which for this loss would mean
 * a wrong Hessian. */
static int cholesky(double *H, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        double s = H[j * n + j];
        for (size_t k = 0; k < j; k++)
            s -= H[j * n + k] * H[j * n + k];
        if (!(s > 0.0))
            return 0;
        double l = sqrt(s);
        H[j * n + j] = l;
        for (size_t i = j + 1; i < n; i++) {
            double t = H[i * n + j];
            for (size_t k = 0; k < j; k++)
                t -= H[i * n + k] * H[j * n + k];
            H[i * n + j] = t / l;
        }
    }
    return 1;
}

/* Solves L L^T d = -g by forward then back substitution. */
static void newton_direction(const double *L, size_t n, const double *g, double *d)
{
    for (size_t i = 0; i < n; i++) {
        double s = -g[i];
        for (size_t k = 0; k < i; k++)
            s -= L[i * n + k] * d[k];
        d[i] = s / L[i * n + i];
    }
    for (size_t i = n; i-- > 0;) {
        double s = d[i];
        for (size_t k = i + 1; k < n; k++)
            s -= L[k * n + i] * d[k];
        d[i] = s / L[i * n + i];
    }
}

static double norm(const double *v, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += v[i] * v[i];
    return sqrt(s);
}

/* ---- the convergence check ---- */

/* Whether the last gradient norms show quadratic convergence.
 *
 * Near the optimum |g| is proportional to the distance to it (H is
 * nonsingular), so the norms follow e_(k+1) = C e_k^p with p the order of
 * convergence.  Three consecutive norms give p exactly under that model:
 *     p = log(e_(k+1) / e_k) / log(e_k / e_(k-1)).
 * Newton's method with the exact Hessian has p = 2.  A Hessian that is off
 * by a fixed relative amount gives p = 1 (linear convergence), and
 * quasi-Newton methods are superlinear with p well below 2 (1.618 for the
 * secant method); p >= 1.8 separates those cleanly.  The triple used is the
 * last one whose newest norm is above 1e-13: below that the norm nears
 * its rounding floor (the gradient's terms are O(1), so about 1e-16 to
 * 1e-15 here) and stops following the model.  The steps in it must be full
 * Newton steps (t = 1), or the line search, not Newton, set the pace. */
static int check_quadratic(const double *gnorm, const double *step_t, int iters, double *order)
{
    for (int k = iters - 1; k >= 1; k--) {
        if (gnorm[k + 1] < 1e-13)
            continue;
        *order = log(gnorm[k + 1] / gnorm[k]) / log(gnorm[k] / gnorm[k - 1]);
        return step_t[k] == 1.0 && step_t[k - 1] == 1.0 && *order >= 1.8;
    }
    *order = NAN;
    return 0;  /* fewer than three usable norms */
}

/* ---- Newton's method ---- */

static double accuracy(const double *w, const struct data *d)
{
    size_t right = 0;
    for (size_t i = 0; i < SAMPLES; i++) {
        double z = w[FEATURES];
        for (size_t j = 0; j < FEATURES; j++)
            z += w[j] * d->x[i * FEATURES + j];
        right += z * d->y[i] > 0.0;
    }
    return (double)right / SAMPLES;
}

/* Newton's method from w = 0.  Records |g| and the step length of every
 * iteration; returns the number of iterations to |g| < GRAD_TOL, or -1 on
 * an error or without convergence.  *fx is the final f. */
static int newton(const struct data *d, double *w, double *H, double *gnorm, double *step_t,
                  double *fx)
{
    double g[PARAMS], dir[PARAMS], trial[PARAMS];
    printf("%4s  %22s  %10s  %10s  %6s  %14s\n", "iter", "f", "|g|", "|step|", "t",
           "|g|/|g_prev|^2");
    for (int k = 0; k <= MAX_ITER; k++) {
        /* f, g and H from one second-order recording */
        ad_status s = ad_hessian(logistic_loss, (void *)d, PARAMS, w, fx, g, H);
        if (s != AD_OK) {
            fprintf(stderr, "ad_hessian failed: %s\n", ad_strerror(s));
            return -1;
        }
        gnorm[k] = norm(g, PARAMS);
        if (k == 0)
            printf("%4d  %22.17f  %10.3e\n", k, *fx, gnorm[k]);
        else
            printf("%4d  %22.17f  %10.3e  %10.3e  %6.4f  %14.4g\n", k, *fx, gnorm[k],
                   step_t[k - 1] * norm(dir, PARAMS), step_t[k - 1],
                   gnorm[k] / (gnorm[k - 1] * gnorm[k - 1]));
        if (gnorm[k] < GRAD_TOL)
            return k;
        if (k == MAX_ITER)
            break;

        /* H d = -g */
        if (!cholesky(H, PARAMS)) {
            fprintf(stderr, "iteration %d: the Hessian is not positive definite\n", k);
            return -1;
        }
        newton_direction(H, PARAMS, g, dir);

        /* Backtracking (Armijo): halve t until f decreases by at least
         * 1e-4 t g.d.  The full step is tried first and, near the optimum,
         * taken. */
        double slope = 0.0, t = 1.0;
        for (size_t j = 0; j < PARAMS; j++)
            slope += g[j] * dir[j];
        for (;;) {
            for (size_t j = 0; j < PARAMS; j++)
                trial[j] = w[j] + t * dir[j];
            if (loss_value(trial, d) <= *fx + 1e-4 * t * slope || t < 0x1p-30)
                break;
            t *= 0.5;
        }
        memcpy(w, trial, sizeof trial);
        step_t[k] = t;
    }
    fprintf(stderr, "no convergence to |g| < %g in %d iterations\n", GRAD_TOL, MAX_ITER);
    return -1;
}

int main(void)
{
    struct data *d = malloc(sizeof *d);
    double *H = malloc(PARAMS * PARAMS * sizeof *H);
    double w[PARAMS] = {0}, gnorm[MAX_ITER + 1], step_t[MAX_ITER + 1], fx = NAN, order = NAN;
    int ok = 0;
    if (!d || !H) {
        fprintf(stderr, "out of memory\n");
    } else {
        make_data(d);
        printf("L2-regularised logistic regression by Newton's method (exact Hessian):\n"
               "%d samples, %d features + bias, lambda = %g, %zu labels flipped\n\n",
               SAMPLES, FEATURES, LAMBDA, d->flipped);
        int iters = newton(d, w, H, gnorm, step_t, &fx);
        if (iters >= 0) {
            int quadratic = check_quadratic(gnorm, step_t, iters, &order);
            /* The value from the recording and from a plain evaluation: the
             * same operations on the same numbers, so the same bits. */
            double plain = loss_value(w, d);
            printf("\nconverged in %d iterations: |g| = %.3e\n", iters, gnorm[iters]);
            printf("order of convergence (last usable three |g|): %.2f; quadratic is 2\n", order);
            printf("final f (ad_hessian) : %.17g\n", fx);
            printf("final f (no tape)    : %.17g  %s\n", plain,
                   plain == fx ? "(bitwise equal)" : "(MISMATCH)");
            printf("training accuracy    : %.2f%%\n", 100.0 * accuracy(w, d));
            if (!quadratic)
                fprintf(stderr, "convergence was not quadratic (order %.2f, or the steps that "
                                "measured it were damped)\n", order);
            ok = quadratic && plain == fx;
        }
    }
    printf("%s\n", ok ? "result: converged quadratically" : "result: FAILED");
    free(d);
    free(H);
    return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}
