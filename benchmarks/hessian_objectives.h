/* The sparse-Hessian benchmark's functions, written once for any scalar
 * type, as objectives.h is: BENCH_T, BENCH_NAME(f), and ad_add, ad_sub and
 * ad_mul in scope (dualrev's generic operations, or adouble's operators),
 * taking a double for either argument.  Sums start from their first term.
 * No include guard: included once per scalar type. */

/* Extended Rosenbrock: sum_{i < n-1} 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2,
 * a tridiagonal Hessian. */
static BENCH_T BENCH_NAME(rosenbrock_term)(const BENCH_T *x, size_t i)
{
    BENCH_T t = ad_sub(x[i + 1], ad_mul(x[i], x[i]));
    BENCH_T u = ad_sub(1.0, x[i]);
    return ad_add(ad_mul(100.0, ad_mul(t, t)), ad_mul(u, u));
}

static BENCH_T BENCH_NAME(rosenbrock)(const BENCH_T *x, size_t n, void *ctx)
{
    (void)ctx;
    BENCH_T acc = BENCH_NAME(rosenbrock_term)(x, 0);
    for (size_t i = 1; i + 1 < n; i++)
        acc = ad_add(acc, BENCH_NAME(rosenbrock_term)(x, i));
    return acc;
}

/* ARWHEAD: sum_{i < n-1} (-4 x_i + 3) + (x_i^2 + x_n^2)^2: the diagonal
 * and the last row. */
static BENCH_T BENCH_NAME(arwhead_term)(const BENCH_T *x, size_t n, size_t i)
{
    BENCH_T q = ad_add(ad_mul(x[i], x[i]), ad_mul(x[n - 1], x[n - 1]));
    return ad_add(ad_add(ad_mul(-4.0, x[i]), 3.0), ad_mul(q, q));
}

static BENCH_T BENCH_NAME(arwhead)(const BENCH_T *x, size_t n, void *ctx)
{
    (void)ctx;
    BENCH_T acc = BENCH_NAME(arwhead_term)(x, n, 0);
    for (size_t i = 1; i + 1 < n; i++)
        acc = ad_add(acc, BENCH_NAME(arwhead_term)(x, n, i));
    return acc;
}

/* BDQRTIC: sum_{i < n-4} (-4 x_i + 3)^2 + (x_i^2 + 2 x_{i+1}^2
 * + 3 x_{i+2}^2 + 4 x_{i+3}^2 + 5 x_n^2)^2: a band of four and the last
 * row. */
static BENCH_T BENCH_NAME(bdqrtic_term)(const BENCH_T *x, size_t n, size_t i)
{
    BENCH_T l = ad_add(ad_mul(-4.0, x[i]), 3.0);
    BENCH_T q = ad_add(ad_add(ad_mul(x[i], x[i]), ad_mul(2.0, ad_mul(x[i + 1], x[i + 1]))),
                       ad_add(ad_mul(3.0, ad_mul(x[i + 2], x[i + 2])),
                              ad_mul(4.0, ad_mul(x[i + 3], x[i + 3]))));
    q = ad_add(q, ad_mul(5.0, ad_mul(x[n - 1], x[n - 1])));
    return ad_add(ad_mul(l, l), ad_mul(q, q));
}

static BENCH_T BENCH_NAME(bdqrtic)(const BENCH_T *x, size_t n, void *ctx)
{
    (void)ctx;
    BENCH_T acc = BENCH_NAME(bdqrtic_term)(x, n, 0);
    for (size_t i = 1; i + 4 < n; i++)
        acc = ad_add(acc, BENCH_NAME(bdqrtic_term)(x, n, i));
    return acc;
}
