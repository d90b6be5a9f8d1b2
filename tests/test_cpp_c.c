/* The C side of test_cpp.cpp, compiled as C11: every operation through the
 * C API's generic names, as a C user writes it, and the tape's records as
 * bytes, so that the C++ test compares dualrev.hpp with what C records.
 * The interface is test_cpp_c.h's, included by both sides. */
#include <string.h>

#include "test_cpp_c.h"
#include "ops_list.h"
#include "../lib/drivers/testing.h"

/* ---- one operation per objective ---- */

#define C_UNARY(op, ...) \
    static ad_real c_unary_##op(const ad_real *x, size_t n, void *ctx) \
    {                                                                  \
        (void)n, (void)ctx;                                            \
        return ad_##op(x[0]);                                          \
    }
UNARY_OPS(C_UNARY)

/* rr: both inputs; rd, ri: x[0] with p->b or p->k; dr, ir: p->a or p->k
 * with x[0]. */
#define C_BINARY(op, ...)                                                  \
    static ad_real c_rr_##op(const ad_real *x, size_t n, void *ctx)        \
    {                                                                      \
        (void)n, (void)ctx;                                                \
        return ad_##op(x[0], x[1]);                                        \
    }                                                                      \
    static ad_real c_rd_##op(const ad_real *x, size_t n, void *ctx)        \
    {                                                                      \
        const cpp_c_point *p = ctx;                                        \
        (void)n;                                                           \
        return ad_##op(x[0], p->b);                                        \
    }                                                                      \
    static ad_real c_dr_##op(const ad_real *x, size_t n, void *ctx)        \
    {                                                                      \
        const cpp_c_point *p = ctx;                                        \
        (void)n;                                                           \
        return ad_##op(p->a, x[0]);                                        \
    }                                                                      \
    static ad_real c_ri_##op(const ad_real *x, size_t n, void *ctx)        \
    {                                                                      \
        const cpp_c_point *p = ctx;                                        \
        (void)n;                                                           \
        return ad_##op(x[0], p->k);                                        \
    }                                                                      \
    static ad_real c_ir_##op(const ad_real *x, size_t n, void *ctx)        \
    {                                                                      \
        const cpp_c_point *p = ctx;                                        \
        (void)n;                                                           \
        return ad_##op(p->k, x[0]);                                        \
    }
BINARY_OPS(C_BINARY)

#define C_UNARY_ENTRY(op, ...) {#op, c_unary_##op},
static const cpp_c_unary unary[] = {UNARY_OPS(C_UNARY_ENTRY)};

#define C_BINARY_ENTRY(op, ...) {#op, c_rr_##op, c_rd_##op, c_dr_##op, c_ri_##op, c_ir_##op},
static const cpp_c_binary binary[] = {BINARY_OPS(C_BINARY_ENTRY)};

size_t cpp_c_unary_count(void)
{
    return sizeof unary / sizeof *unary;
}

const cpp_c_unary *cpp_c_unary_at(size_t i)
{
    return &unary[i];
}

size_t cpp_c_binary_count(void)
{
    return sizeof binary / sizeof *binary;
}

const cpp_c_binary *cpp_c_binary_at(size_t i)
{
    return &binary[i];
}

/* ---- a longer objective: every operation and every form at once ---- */

ad_real cpp_c_mixed(const ad_real *x, size_t n, void *ctx)
{
    ad_real a = x[0], b = x[1];
    float f = 0.5f;
    int k = 3;
    (void)n, (void)ctx;
    ad_real s = ad_add(ad_add(a, b), ad_add(a, 1.0));
    s = ad_add(s, ad_sub(2, b));
    s = ad_add(s, ad_mul(ad_mul(a, f), ad_div(b, k)));
    s = ad_add(s, ad_div(1.0, a));
    s = ad_sub(s, ad_neg(b));
    s = ad_add(s, ad_mul(ad_pow(a, 2), ad_exp(ad_neg(ad_mul(b, b)))));
    s = ad_mul(s, ad_atan2(a, ad_add(b, 3)));
    s = ad_div(s, ad_hypot(a, 2.0));
    s = ad_sub(s, ad_fmin(ad_sin(a), ad_cos(b)));
    s = ad_add(s, ad_fmax(0, ad_log1p(ad_mul(a, a))));
    return ad_add(s, ad_sqrt(ad_add(ad_fabs(b), 1)));
}

/* ---- array primitives and recorded matrices ----
 *
 * x: 12 inputs.  Every primitive in every mix of ad_real and double. */
ad_real cpp_c_primitives(const ad_real *x, size_t n, void *ctx)
{
    static const double c[6] = {0.5, -1.25, 2.0, 0.75, -0.5, 1.5};
    static const double A[6] = {1.0, 2.0, -1.0, 0.5, 0.25, -3.0}; /* 2 x 3 */
    ad_real y[3], z[3], t[4], s, q;
    ad_mat M, W;
    (void)n, (void)ctx;
    s = ad_add(ad_sum(5, x), ad_dot(4, x, x + 4));
    s = ad_add(s, ad_dot(4, x, x));
    s = ad_add(s, ad_dot(6, x + 2, c));
    s = ad_add(s, ad_dot(6, c, x + 3));
    s = ad_add(s, ad_mul(ad_sqnorm(7, x + 1), ad_prod(3, x + 6)));
    s = ad_add(s, ad_logsumexp(5, x + 4));
    ad_matvec(2, 3, A, x + 2, y);
    s = ad_add(s, ad_mul(y[0], y[1]));
    ad_matvec_rr(2, 3, x + 6, x, z);
    s = ad_add(s, ad_sub(z[0], z[1]));
    for (int i = 0; i < 3; i++)
        t[i] = x[i + 8];
    ad_axpy(3, -0.75, x, t);
    s = ad_add(s, ad_sum(3, t));
    if (ad_mat_make(2, 2, x + 8, &M) != AD_OK || ad_mat_make(2, 3, A, &W) != AD_OK)
        return ad_const(NAN);
    ad_mat_vec(&M, x + 1, z);
    s = ad_add(s, ad_mul(z[0], z[1]));
    ad_mat_vec(&M, c, z);
    s = ad_add(s, ad_add(z[0], z[1]));
    ad_mat_sqnorm(&M, x + 3, &q);
    s = ad_add(s, q);
    ad_mat_sqnorm(&M, c + 2, &q);
    s = ad_add(s, q);
    ad_mat_vec(&W, x + 5, z);
    return ad_add(s, ad_mul(z[0], z[1]));
}

/* ---- the tape ---- */

size_t cpp_c_tape(ad__record *out, size_t max)
{
    return ad_test_records(out, max);
}

void cpp_c_fail_alloc_after(long after)
{
    ad_test_fail_alloc_after(after);
}

/* ---- one source for both types ---- */

#define REAL ad_real
#define NAME template_ad
#include "template_objective.h"
#undef REAL
#undef NAME
#define REAL double
#define NAME template_d
#include "template_objective.h"
#undef REAL
#undef NAME

ad_real cpp_c_template(const ad_real *x, size_t n, void *ctx)
{
    (void)n, (void)ctx;
    return template_ad(x[0], x[1]);
}

double cpp_c_template_d(double x, double y)
{
    return template_d(x, y);
}

/* ---- a vector function, n = 4, m = 3 ---- */

void cpp_c_vector(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n, (void)m, (void)ctx;
    y[0] = ad_add(ad_mul(x[0], ad_sin(x[1])), x[2]);
    y[1] = ad_div(ad_exp(ad_sub(x[3], x[0])), ad_add(1, ad_mul(x[1], x[1])));
    y[2] = ad_sub(ad_mul(ad_pow(x[2], 2), x[3]), ad_atan2(x[0], x[3]));
}
