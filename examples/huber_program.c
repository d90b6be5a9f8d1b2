/* huber_program: a robust linear regression (Huber loss) fitted by
 * Newton-CG, its gradients and Hessian-vector products from a recorded
 * program: the loss is recorded once and replayed at every point.
 *
 * The Huber loss of a residual r is r^2 / 2 where |r| <= delta, else
 * delta (|r| - delta / 2): the code branches on each residual.  Written
 * with a guard (ad_le), the program keeps the branch and a replay where a
 * residual crosses delta fails with AD_EBRANCH; the loop then records
 * again at that point.  Written with a selection (ad_select_le), both
 * sides are kept and the program is replayed everywhere.  Both fits must
 * reach the same minimiser, every replay's gradient must equal
 * ad_gradient's bit for bit, and the program exits nonzero otherwise. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <dualrev.h>

enum { SAMPLES = 2000, FEATURES = 10 };
#define DELTA 1.0
#define RIDGE 1e-6
#define GRAD_TOL 1e-9
#define MAX_NEWTON 40
#define MAX_CG 60

struct data {
    double x[SAMPLES][FEATURES], y[SAMPLES];
    int guarded;      /* 1: the branch by ad_le; 0: by ad_select_le */
    unsigned calls;   /* how often the loss was run (recorded) */
};

static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static double unit(uint64_t *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

/* y = x . w_true + noise, with every tenth label an outlier. */
static void make_data(struct data *d)
{
    uint64_t s = UINT64_C(20261129);
    for (int i = 0; i < SAMPLES; i++) {
        double t = 0.0;
        for (int j = 0; j < FEATURES; j++) {
            d->x[i][j] = 2.0 * unit(&s) - 1.0;
            t += d->x[i][j] * (double)(j + 1) / FEATURES;
        }
        d->y[i] = t + 0.1 * (unit(&s) - 0.5) + (i % 10 == 0 ? 20.0 * (unit(&s) - 0.5) : 0.0);
    }
}

static ad_real huber(ad_real r, int guarded)
{
    ad_real a = ad_fabs(r);
    ad_real quad = ad_mul(0.5, ad_mul(r, r)), lin = ad_mul(DELTA, ad_sub(a, 0.5 * DELTA));
    if (!guarded)
        return ad_select_le(a, ad_const(DELTA), quad, lin);
    return ad_le(a, DELTA) ? quad : lin;
}

static ad_real loss(const ad_real *w, size_t n, void *ctx)
{
    struct data *d = ctx;
    d->calls++;
    ad_real s = ad_mul(0.5 * RIDGE, ad_dot(n, w, w));
    for (int i = 0; i < SAMPLES; i++) {
        ad_real r = ad_sub(ad_dot(n, w, d->x[i]), d->y[i]);
        s = ad_add(s, huber(r, d->guarded));
    }
    return ad_div(s, (double)SAMPLES);
}

static double dot(const double *a, const double *b)
{
    double s = 0.0;
    for (int j = 0; j < FEATURES; j++)
        s += a[j] * b[j];
    return s;
}

/* f(w) from the program, recorded again at w if a guard fails there. */
static ad_status value_at(ad_program **P, struct data *d, const double *w, double *fx,
                          unsigned *records)
{
    ad_status s = ad_program_value(*P, w, fx);
    if (s != AD_EBRANCH)
        return s;
    ad_program_free(*P);
    *P = NULL;
    ++*records;
    s = ad_program_record(loss, d, FEATURES, w, P);
    return s == AD_OK ? ad_program_value(*P, w, fx) : s;
}

/* Newton-CG from w = 0: CG on H d = -g with the program's H v, then a
 * backtracking line search on its values.  Each gradient is checked
 * against ad_gradient's, bit for bit.  Returns the Newton steps taken, or
 * -1 on an error or a mismatch. */
static int fit(struct data *d, double *w, unsigned *records)
{
    ad_program *P = NULL;
    memset(w, 0, FEATURES * sizeof *w);
    *records = 1;
    if (ad_program_record(loss, d, FEATURES, w, &P) != AD_OK)
        return -1;
    for (int k = 0; k < MAX_NEWTON; k++) {
        double fx, g[FEATURES], gcheck[FEATURES], fcheck, dir[FEATURES] = {0};
        if (ad_program_gradient(P, w, &fx, g) != AD_OK ||
            ad_gradient(loss, d, FEATURES, w, &fcheck, gcheck) != AD_OK ||
            memcmp(g, gcheck, sizeof g) || memcmp(&fx, &fcheck, sizeof fx))
            break;
        if (sqrt(dot(g, g)) < GRAD_TOL) {
            ad_program_free(P);
            return k;
        }
        double r[FEATURES], p[FEATURES], hp[FEATURES], unused[FEATURES], f0;
        for (int j = 0; j < FEATURES; j++)
            r[j] = p[j] = -g[j];
        double rr = dot(r, r);
        for (int c = 0; c < MAX_CG && rr > 1e-30; c++) {
            if (ad_program_hvp(P, w, p, &f0, unused, hp) != AD_OK)
                goto failed;
            double alpha = rr / dot(p, hp);
            for (int j = 0; j < FEATURES; j++) {
                dir[j] += alpha * p[j];
                r[j] -= alpha * hp[j];
            }
            double rr_new = dot(r, r);
            for (int j = 0; j < FEATURES; j++)
                p[j] = r[j] + rr_new / rr * p[j];
            rr = rr_new;
        }
        double t = 1.0, trial[FEATURES], ft = INFINITY;
        for (int ls = 0; ls < 40; ls++, t *= 0.5) {
            for (int j = 0; j < FEATURES; j++)
                trial[j] = w[j] + t * dir[j];
            if (value_at(&P, d, trial, &ft, records) != AD_OK)
                goto failed;
            if (ft <= fx + 1e-4 * t * dot(g, dir))
                break;
        }
        memcpy(w, trial, sizeof trial);
    }
failed:
    ad_program_free(P);
    return -1;
}

int main(void)
{
    static struct data d;
    make_data(&d);
    double w[2][FEATURES];
    int ok = 1;
    for (int guarded = 1; guarded >= 0; guarded--) {
        d.guarded = guarded;
        d.calls = 0;
        unsigned records = 0;
        int k = fit(&d, w[guarded], &records);
        printf("%s: %d Newton steps, %u recordings of the program (the loss run %u times, "
               "%d of them by the checks against ad_gradient)\n",
               guarded ? "guard (ad_le)" : "selection (ad_select_le)", k, records, d.calls, k + 1);
        ok &= k >= 0;
    }
    double diff = 0.0;
    for (int j = 0; j < FEATURES; j++)
        diff = fmax(diff, fabs(w[0][j] - w[1][j]));
    printf("w[0..2] = %.6f %.6f %.6f; the two fits differ by %.1e\n", w[0][0], w[0][1], w[0][2],
           diff);
    ok &= diff < 1e-8;

    /* What a replay saves: the gradient at the minimiser, re-recorded and replayed. */
    ad_program *P = NULL;
    double fx, g[FEATURES];
    d.guarded = 0;
    if (ad_program_record(loss, &d, FEATURES, w[0], &P) != AD_OK)
        return 1;
    clock_t c0 = clock();
    ad_status s = AD_OK;
    for (int i = 0; i < 200 && s == AD_OK; i++)
        s = ad_gradient(loss, &d, FEATURES, w[0], &fx, g);
    clock_t c1 = clock();
    for (int i = 0; i < 200 && s == AD_OK; i++)
        s = ad_program_gradient(P, w[0], &fx, g);
    clock_t c2 = clock();
    if (s != AD_OK) {
        fprintf(stderr, "huber_program: %s\n", ad_strerror(s));
        ad_program_free(P);
        return 1;
    }
    printf("gradient: %.3f ms recorded, %.3f ms replayed\n", (double)(c1 - c0) / CLOCKS_PER_SEC * 5,
           (double)(c2 - c1) / CLOCKS_PER_SEC * 5);
    ad_program_free(P);
    if (!ok)
        fprintf(stderr, "huber_program: FAILED\n");
    return ok ? 0 : 1;
}
