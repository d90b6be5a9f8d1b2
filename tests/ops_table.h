/* The operations of ops_list.h as tables: each through its generic name,
 * in every mix of ad_real and double, with the objectives and sample points
 * that the first-order (test_ops.c) and second-order (test_hessian.c) tests
 * share, and all of them in a list for tests that draw among them
 * (test_hessian.c, test_linear.c).  Header-only; include after check.h and
 * ops_list.h. */
#ifndef DUALREV_TESTS_OPS_TABLE_H
#define DUALREV_TESTS_OPS_TABLE_H

/* ---- unary operations ---- */

typedef struct unary_op {
    const char *name;
    ad_real (*ad)(ad_real);        /* through the generic name */
    double (*plain)(double);       /* the generic name with a double */
    double (*ref)(double);         /* libm */
    double lo, hi;
    int (*keep)(double);
} unary_op;

#define DEFINE_UNARY(op, ref, lo, hi, keep)                           \
    static ad_real ad_of_##op(ad_real x) { return ad_##op(x); }       \
    static double plain_of_##op(double x) { return ad_##op(x); }      \
    static const unary_op unary_##op = {#op, ad_of_##op, plain_of_##op, ref, lo, hi, keep};
UNARY_OPS(DEFINE_UNARY)

static inline ad_real unary_objective(const ad_real *x, size_t n, void *ctx)
{
    const unary_op *op = ctx;
    (void)n;
    return op->ad(x[0]);
}

/* A point of [lo, hi] that op keeps. */
static inline double draw_unary(const unary_op *op, uint64_t *rng, double lo, double hi)
{
    double x;
    do
        x = rng_uniform(rng, lo, hi);
    while (!op->keep(x));
    return x;
}

/* ---- binary operations ---- */

typedef struct binary_op {
    const char *name;
    ad_real (*rr)(ad_real, ad_real);
    ad_real (*rd)(ad_real, double);
    ad_real (*dr)(double, ad_real);
    double (*plain)(double, double);
    double (*ref)(double, double);
    double alo, ahi, blo, bhi;
    int (*keep)(double, double);
} binary_op;

#define DEFINE_BINARY(op, ref, alo, ahi, blo, bhi, keep)                        \
    static ad_real rr_of_##op(ad_real a, ad_real b) { return ad_##op(a, b); }   \
    static ad_real rd_of_##op(ad_real a, double b) { return ad_##op(a, b); }    \
    static ad_real dr_of_##op(double a, ad_real b) { return ad_##op(a, b); }    \
    static double plain_of_##op(double a, double b) { return ad_##op(a, b); }   \
    static const binary_op binary_##op = {#op, rr_of_##op, rd_of_##op, dr_of_##op, \
        plain_of_##op, ref, alo, ahi, blo, bhi, keep};
BINARY_OPS(DEFINE_BINARY)

/* One sample point; the objectives below read the argument that is held
 * constant from here. */
typedef struct binary_point {
    const binary_op *op;
    double a, b;
} binary_point;

static inline ad_real objective_rr(const ad_real *x, size_t n, void *ctx)
{
    const binary_point *p = ctx;
    (void)n;
    return p->op->rr(x[0], x[1]);
}

static inline ad_real objective_rd(const ad_real *x, size_t n, void *ctx)
{
    const binary_point *p = ctx;
    (void)n;
    return p->op->rd(x[0], p->b);
}

static inline ad_real objective_dr(const ad_real *x, size_t n, void *ctx)
{
    const binary_point *p = ctx;
    (void)n;
    return p->op->dr(p->a, x[0]);
}

/* A point of p->op's box that it keeps, into p->a and p->b. */
static inline void draw_binary(binary_point *p, uint64_t *rng)
{
    do {
        p->a = rng_uniform(rng, p->op->alo, p->op->ahi);
        p->b = rng_uniform(rng, p->op->blo, p->op->bhi);
    } while (!p->op->keep(p->a, p->b));
}

/* ---- every operation, in ops_list.h's order ----
 *
 * Through functions, so that a test which draws none has no unused array. */

#define OPS_TABLE_ONE(op, ...) +1
enum { N_UNARY_OPS = 0 UNARY_OPS(OPS_TABLE_ONE), N_BINARY_OPS = 0 BINARY_OPS(OPS_TABLE_ONE) };

/* The i-th unary (binary) operation, i < N_UNARY_OPS (N_BINARY_OPS). */
static inline const unary_op *unary_op_at(size_t i)
{
#define OPS_TABLE_UNARY(op, ...) &unary_##op,
    static const unary_op *const all[] = {UNARY_OPS(OPS_TABLE_UNARY)};
    return all[i];
}

static inline const binary_op *binary_op_at(size_t i)
{
#define OPS_TABLE_BINARY(op, ...) &binary_##op,
    static const binary_op *const all[] = {BINARY_OPS(OPS_TABLE_BINARY)};
    return all[i];
}

#endif
