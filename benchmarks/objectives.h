/* The source of every benchmark program, written once for any scalar type.
 *
 * No include guard: a file includes this once per scalar type, after
 * defining
 *   BENCH_T        the scalar type: double, ad_real, or ADOL-C's adouble;
 *   BENCH_NAME(f)  f with that type's suffix pasted on,
 * with ad_add, ad_sub and ad_mul in scope: dualrev's generic operations in C
 * (plain double arithmetic when given doubles), the operators for adouble in
 * peer_adolc.cpp.  Only those three operations appear below, so the double
 * run, dualrev and ADOL-C all evaluate the very same sequence of arithmetic.
 *
 * Each entry point has the ad_objective shape; ctx points at the program's
 * size n (see programs.h).  Sums start from their first term rather than
 * from 0 so that no type-specific constant is needed. */

static BENCH_T BENCH_NAME(dot_of)(const BENCH_T *x, const BENCH_T *y, size_t len)
{
    BENCH_T acc = ad_mul(x[0], y[0]);
    for (size_t i = 1; i < len; i++)
        acc = ad_add(acc, ad_mul(x[i], y[i]));
    return acc;
}

static BENCH_T BENCH_NAME(scalar_mult)(const BENCH_T *x, size_t inputs, void *ctx)
{
    (void)inputs;
    (void)ctx;
    return ad_mul(x[0], x[1]);
}

/* Inputs: x[0..n), then y[0..n). */
static BENCH_T BENCH_NAME(dot)(const BENCH_T *x, size_t inputs, void *ctx)
{
    (void)inputs;
    size_t n = *(const size_t *)ctx;
    return BENCH_NAME(dot_of)(x, x + n, n);
}

/* Inputs: the m x m matrix row by row, then the vector.  The sum of A v is
 * accumulated row by row, as "sum (matVec a v)" evaluates. */
static BENCH_T BENCH_NAME(sum_mat_vec)(const BENCH_T *x, size_t inputs, void *ctx)
{
    (void)inputs;
    size_t m = prog_side(*(const size_t *)ctx);
    const BENCH_T *v = x + m * m;
    BENCH_T sum = BENCH_NAME(dot_of)(x, v, m);
    for (size_t i = 1; i < m; i++)
        sum = ad_add(sum, BENCH_NAME(dot_of)(x + i * m, v, m));
    return sum;
}

#ifndef __cplusplus
/* The same two programs with dualrev's array primitive: ad_dot records one
 * n-ary record per call, and on double arrays it is the plain loop. */
static BENCH_T BENCH_NAME(dot_array)(const BENCH_T *x, size_t inputs, void *ctx)
{
    (void)inputs;
    size_t n = *(const size_t *)ctx;
    return ad_dot(n, x, x + n);
}

static BENCH_T BENCH_NAME(sum_mat_vec_array)(const BENCH_T *x, size_t inputs, void *ctx)
{
    (void)inputs;
    size_t m = prog_side(*(const size_t *)ctx);
    const BENCH_T *v = x + m * m;
    BENCH_T sum = ad_dot(m, x, v);
    for (size_t i = 1; i < m; i++)
        sum = ad_add(sum, ad_dot(m, x + i * m, v));
    return sum;
}
#endif

/* ---- rotate_vec_by_quat (Krawiec et al. 2022) ---- */

static BENCH_T BENCH_NAME(dot3)(const BENCH_T *a, const BENCH_T *b)
{
    return ad_add(ad_add(ad_mul(a[0], b[0]), ad_mul(a[1], b[1])), ad_mul(a[2], b[2]));
}

/* Component k of the cross product a x b. */
static BENCH_T BENCH_NAME(cross3_at)(const BENCH_T *a, const BENCH_T *b, int k)
{
    int i = (k + 1) % 3, j = (k + 2) % 3;
    return ad_sub(ad_mul(a[i], b[j]), ad_mul(a[j], b[i]));
}

/* Inputs: v (3), then q = s + u (s, then u's 3).  The rotated vector is
 *   v' = 2 (u.v) u + (s^2 - u.u) v + 2 s (u x v),
 * and the benchmark differentiates v'_0 + v'_1 + v'_2, as the paper's
 * Vec3-valued function needs one scalar output for one gradient. */
static BENCH_T BENCH_NAME(rotate)(const BENCH_T *x, size_t inputs, void *ctx)
{
    (void)inputs;
    (void)ctx;
    const BENCH_T *v = x, *q = x + 3, *u = x + 4;
    BENCH_T two_uv = ad_mul(2.0, BENCH_NAME(dot3)(u, v));
    BENCH_T ss_uu = ad_sub(ad_mul(q[0], q[0]), BENCH_NAME(dot3)(u, u));
    BENCH_T two_s = ad_mul(2.0, q[0]);
    BENCH_T r[3];
    for (int k = 0; k < 3; k++)
        r[k] = ad_add(ad_add(ad_mul(two_uv, u[k]), ad_mul(ss_uu, v[k])),
                      ad_mul(two_s, BENCH_NAME(cross3_at)(u, v, k)));
    return ad_add(ad_add(r[0], r[1]), r[2]);
}

/* ---- GMM's inner loop (ADBench; benchmarks/gmm/gmm_objective.h) ---- */

/* Inputs: Q's diagonal (64), its strict lower triangle column by column
 * (2016), mu (64); n points x_i, made up here, are data.  The sum over the
 * points of the components of Q (mu - x_i): the column-by-column loop of
 * GMM's main term, whose d64_K100 gradient is almost all this loop, on a tape
 * as long as n makes it.  Sums, not GMM's squared norm, keep the program a
 * polynomial of degree 2 for the check. */
static BENCH_T BENCH_NAME(gmm_qx)(const BENCH_T *x, size_t inputs, void *ctx)
{
    (void)inputs;
    size_t n = *(const size_t *)ctx;
    const BENCH_T *qdiag = x, *l = x + PROG_QX_D, *mu = l + PROG_QX_D * (PROG_QX_D - 1) / 2;
    BENCH_T xc[PROG_QX_D], qx[PROG_QX_D], sum = x[0];
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < PROG_QX_D; j++)
            xc[j] = ad_sub(mu[j], prog_qx_point(i, j));
        for (size_t j = 0; j < PROG_QX_D; j++)
            qx[j] = ad_mul(qdiag[j], xc[j]);
        size_t idx = 0;
        for (size_t col = 0; col < PROG_QX_D; col++)
            for (size_t r = col + 1; r < PROG_QX_D; r++)
                qx[r] = ad_add(qx[r], ad_mul(l[idx++], xc[col]));
        size_t j = 0;
        if (i == 0)
            sum = qx[j++];
        for (; j < PROG_QX_D; j++)
            sum = ad_add(sum, qx[j]);
    }
    return sum;
}

/* ---- t_bad (paper, section 5.4) ---- */

/* Each x_k is used twice, so naive dual numbers take 2^n backpropagator
 * calls; a work-efficient reverse pass takes time linear in n. */
static BENCH_T BENCH_NAME(t_bad)(const BENCH_T *x, size_t inputs, void *ctx)
{
    (void)inputs;
    size_t n = *(const size_t *)ctx;
    BENCH_T xk = x[0];
    for (size_t k = 0; k < n; k++)
        xk = ad_mul(xk, xk);
    return xk;
}
