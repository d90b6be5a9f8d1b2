/* ipopt_pendulum: swing a damped pendulum up from rest, hanging, to rest,
 * upright, in T = 5 s, with the least control effort, a torque bounded by
 * |u| <= 1.5: an optimal-control problem by direct transcription
 * (trapezoidal collocation on N steps), solved by Ipopt through
 * dualrev/ipopt.h, once with exact sparse Hessians of the Lagrangian and
 * once with Ipopt's L-BFGS approximation.
 *
 *   theta' = omega,  omega' = -sin(theta) - 0.1 omega + u
 *   minimise the integral of u^2, theta(0) = omega(0) = 0,
 *   theta(T) = pi, omega(T) = 0.
 *
 * Variables: theta_0..N, omega_0..N, u_0..N (3 (N + 1)); constraints: the
 * 2 N collocation defects; the boundary values are fixed by the bounds.
 *
 * Usage: ipopt_pendulum [N] [--replay] [--out FILE]   (N = 1000; FILE: t,
 * theta, omega, u of the exact-Hessian solution, for examples/pendulum.gp).
 * --replay sets the bridge's replay option: f, g and the Lagrangian are
 * recorded as programs at the first point and replayed (dualrev/ipopt.h);
 * the table's last columns say how long the callbacks took and their
 * share of the solve. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dualrev.h>
#include <dualrev/ipopt.h>

#define PI 3.14159265358979323846
#define T_END 5.0
#define U_MAX 1.5
#define DAMPING 0.1

typedef struct pendulum {
    size_t steps;  /* N */
    double h;      /* T / N */
} pendulum;

/* h sum (u_k^2 + u_{k+1}^2) / 2 */
static ad_real effort(const ad_real *z, size_t n, void *ctx)
{
    const pendulum *p = ctx;
    const ad_real *u = z + 2 * (p->steps + 1);
    ad_real s = ad_const(0.0);
    (void)n;
    for (size_t k = 0; k < p->steps; k++)
        s = ad_add(s, ad_add(ad_mul(u[k], u[k]), ad_mul(u[k + 1], u[k + 1])));
    return ad_mul(0.5 * p->h, s);
}

static ad_real accel(ad_real theta, ad_real omega, ad_real u)
{
    return ad_add(ad_sub(ad_neg(ad_sin(theta)), ad_mul(DAMPING, omega)), u);
}

/* The trapezoidal defects, theta's then omega's for each step. */
static void defects(const ad_real *z, size_t n, ad_real *y, size_t m, void *ctx)
{
    const pendulum *p = ctx;
    size_t N = p->steps;
    const ad_real *th = z, *om = z + N + 1, *u = z + 2 * (N + 1);
    (void)n, (void)m;
    for (size_t k = 0; k < N; k++) {
        y[2 * k] = ad_sub(ad_sub(th[k + 1], th[k]), ad_mul(0.5 * p->h, ad_add(om[k], om[k + 1])));
        ad_real a = accel(th[k], om[k], u[k]), b = accel(th[k + 1], om[k + 1], u[k + 1]);
        y[2 * k + 1] = ad_sub(ad_sub(om[k + 1], om[k]), ad_mul(0.5 * p->h, ad_add(a, b)));
    }
}

typedef struct run {
    const char *hessian;
    int replay;
    enum ApplicationReturnStatus app;
    ad_status status;
    double obj, seconds, eval_seconds;
    long iterations;
} run;

static double now(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One solve from the straight-line start; z gets the solution. */
static int solve(pendulum *p, const char *hessian, double *z, run *r)
{
    size_t N = p->steps, n = 3 * (N + 1), m = 2 * N;
    double *lo = malloc(n * sizeof *lo), *hi = malloc(n * sizeof *hi);
    double *gl = calloc(m, sizeof *gl), *gu = calloc(m, sizeof *gu);
    if (!lo || !hi || !gl || !gu) {
        free(lo), free(hi), free(gl), free(gu);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        lo[i] = i < 2 * (N + 1) ? -2e19 : -U_MAX;
        hi[i] = i < 2 * (N + 1) ? 2e19 : U_MAX;
    }
    lo[0] = hi[0] = 0.0;                      /* theta(0) */
    lo[N] = hi[N] = PI;                     /* theta(T) */
    lo[N + 1] = hi[N + 1] = 0.0;              /* omega(0) */
    lo[2 * N + 1] = hi[2 * N + 1] = 0.0;      /* omega(T) */
    for (size_t k = 0; k <= N; k++) {
        z[k] = PI * (double)k / (double)N;
        z[N + 1 + k] = PI / T_END;
        z[2 * (N + 1) + k] = 0.0;
    }
    ad_ipopt b;
    r->hessian = hessian ? hessian : "exact";
    r->status = ad_ipopt_init(&b, effort, defects, p, n, m, lo, hi, gl, gu, z);
    if (r->status == AD_OK) {
        AddIpoptIntOption(b.problem, "print_level", 0);
        AddIpoptStrOption(b.problem, "sb", "yes");
        AddIpoptNumOption(b.problem, "tol", 1e-8);
        AddIpoptIntOption(b.problem, "max_iter", 3000);
        if (hessian)
            AddIpoptStrOption(b.problem, "hessian_approximation", (char *)hessian);
        b.replay = r->replay;
        double t0 = now();
        r->status = ad_ipopt_solve(&b, z, &r->obj, NULL, NULL, NULL, NULL, &r->app);
        r->seconds = now() - t0;
        r->eval_seconds = b.eval_seconds;
        r->iterations = b.iterations;
        ad_ipopt_free(&b);
    }
    free(lo), free(hi), free(gl), free(gu);
    return r->status == AD_OK && (r->app == Solve_Succeeded || r->app == Solved_To_Acceptable_Level)
               ? 0 : -1;
}

int main(int argc, char **argv)
{
    pendulum p = {1000, 0.0};
    const char *out = NULL;
    int replay = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc)
            out = argv[++i];
        else if (!strcmp(argv[i], "--replay"))
            replay = 1;
        else
            p.steps = (size_t)strtoul(argv[i], NULL, 10);
    }
    if (p.steps < 2) {
        fprintf(stderr, "usage: %s [N >= 2] [--replay] [--out FILE]\n", argv[0]);
        return 2;
    }
    p.h = T_END / (double)p.steps;
    size_t n = 3 * (p.steps + 1);
    double *z = malloc(n * sizeof *z), *zl = malloc(n * sizeof *zl);
    if (!z || !zl)
        return 1;
    run exact = {.replay = replay}, lbfgs = {.replay = replay};
    int bad = solve(&p, NULL, z, &exact) | solve(&p, "limited-memory", zl, &lbfgs);
    printf("pendulum swing-up, N = %zu steps, %zu variables, %zu constraints%s\n", p.steps, n,
           2 * p.steps, replay ? ", replaying programs" : "");
    printf("%-15s %-22s %10s %6s %10s %10s %7s\n", "Hessian", "status", "effort", "iter",
           "wall s", "dualrev s", "share");
    const run *runs[2] = {&exact, &lbfgs};
    for (int k = 0; k < 2; k++) {
        const run *r = runs[k];
        printf("%-15s %-22s %10.6f %6ld %10.3f %10.3f %6.1f%%\n", r->hessian,
               r->status != AD_OK ? ad_strerror(r->status)
               : r->app == Solve_Succeeded ? "Solve_Succeeded"
               : r->app == Solved_To_Acceptable_Level ? "Solved_To_Acceptable"
                                                      : "not solved",
               r->obj, r->iterations, r->seconds, r->eval_seconds,
               100.0 * r->eval_seconds / r->seconds);
    }
    if (!bad && fabs(exact.obj - lbfgs.obj) > 1e-4 * fabs(exact.obj)) {
        fprintf(stderr, "the two solves disagree: %.10g and %.10g\n", exact.obj, lbfgs.obj);
        bad = 1;
    }
    if (out && !bad) {
        FILE *f = fopen(out, "w");
        if (!f) {
            perror(out);
            bad = 1;
        } else {
            fprintf(f, "# t theta omega u\n");
            for (size_t k = 0; k <= p.steps; k++)
                fprintf(f, "%.6f %.9f %.9f %.9f\n", p.h * (double)k, z[k], z[p.steps + 1 + k],
                        z[2 * (p.steps + 1) + k]);
            fclose(f);
        }
    }
    free(z), free(zl);
    return bad ? 1 : 0;
}
