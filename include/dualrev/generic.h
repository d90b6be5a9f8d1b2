/* dualrev: the generic names.
 *
 * Included by dualrev.h.  Each name picks its implementation from the types
 * of its arguments with C11 _Generic: any mix of ad_real and arithmetic types
 * (double, float, int, ...) for the binary operations.  With only arithmetic
 * arguments the result is a plain double and nothing is recorded, so one
 * objective source can be compiled for double and for ad_real. */
#ifndef DUALREV_GENERIC_H
#define DUALREV_GENERIC_H

static inline double ad__plain_value(double x) { return x; }

#define AD__BIN(op, a, b)                                                       \
    _Generic((a),                                                               \
        ad_real: _Generic((b), ad_real: ad_##op##_rr, default: ad_##op##_rd),   \
        default: _Generic((b), ad_real: ad_##op##_dr, default: ad_##op##_dd))((a), (b))

#define ad_add(a, b) AD__BIN(add, a, b)
#define ad_sub(a, b) AD__BIN(sub, a, b)
#define ad_mul(a, b) AD__BIN(mul, a, b)
#define ad_div(a, b) AD__BIN(div, a, b)
#define ad_pow(a, b) AD__BIN(pow, a, b)
#define ad_atan2(a, b) AD__BIN(atan2, a, b)
#define ad_hypot(a, b) AD__BIN(hypot, a, b)
#define ad_fmin(a, b) AD__BIN(fmin, a, b)
#define ad_fmax(a, b) AD__BIN(fmax, a, b)
/* Branch guards (ops.h): int results, kept by a program being recorded. */
#define ad_lt(a, b) AD__BIN(lt, a, b)
#define ad_le(a, b) AD__BIN(le, a, b)
#define ad_gt(a, b) AD__BIN(gt, a, b)
#define ad_ge(a, b) AD__BIN(ge, a, b)

#define AD__UN(op, plain, x) _Generic((x), ad_real: ad_##op##_r, default: plain)(x)

#define ad_neg(x) AD__UN(neg, ad_neg_d, x)
#define ad_sqrt(x) AD__UN(sqrt, sqrt, x)
#define ad_cbrt(x) AD__UN(cbrt, cbrt, x)
#define ad_exp(x) AD__UN(exp, exp, x)
#define ad_expm1(x) AD__UN(expm1, expm1, x)
#define ad_log(x) AD__UN(log, log, x)
#define ad_log1p(x) AD__UN(log1p, log1p, x)
#define ad_log2(x) AD__UN(log2, log2, x)
#define ad_log10(x) AD__UN(log10, log10, x)
#define ad_sin(x) AD__UN(sin, sin, x)
#define ad_cos(x) AD__UN(cos, cos, x)
#define ad_tan(x) AD__UN(tan, tan, x)
#define ad_asin(x) AD__UN(asin, asin, x)
#define ad_acos(x) AD__UN(acos, acos, x)
#define ad_atan(x) AD__UN(atan, atan, x)
#define ad_sinh(x) AD__UN(sinh, sinh, x)
#define ad_cosh(x) AD__UN(cosh, cosh, x)
#define ad_tanh(x) AD__UN(tanh, tanh, x)
#define ad_asinh(x) AD__UN(asinh, asinh, x)
#define ad_acosh(x) AD__UN(acosh, acosh, x)
#define ad_atanh(x) AD__UN(atanh, atanh, x)
#define ad_fabs(x) AD__UN(fabs, ad_fabs_d, x)
#define ad_erf(x) AD__UN(erf, erf, x)
#define ad_erfc(x) AD__UN(erfc, erfc, x)
#define ad_lgamma(x) AD__UN(lgamma, ad_lgamma_d, x)
#define ad_tgamma(x) AD__UN(tgamma, tgamma, x)

/* Array primitives: the element type of the first array picks the form. */
#define AD__ARR(op, x) _Generic((x), ad_real *: ad_##op##_r, const ad_real *: ad_##op##_r, default: ad_##op##_d)
#define ad_sum(n, x) AD__ARR(sum, x)((n), (x))
#define ad_sqnorm(n, x) AD__ARR(sqnorm, x)((n), (x))
#define ad_prod(n, x) AD__ARR(prod, x)((n), (x))
#define ad_logsumexp(n, x) AD__ARR(logsumexp, x)((n), (x))
/* Either array may be the constant one. */
#define ad_dot(n, x, y)                                                                 \
    _Generic((x), ad_real *: AD__DOT_R(y), const ad_real *: AD__DOT_R(y),               \
             default: _Generic((y), ad_real *: ad_dot_dr, const ad_real *: ad_dot_dr,   \
                               default: ad_dot_d))((n), (x), (y))
#define AD__DOT_R(y) _Generic((y), ad_real *: ad_dot_r, const ad_real *: ad_dot_r, default: ad_dot_rd)
/* The vector's element type picks the form; A is a constant matrix. */
#define ad_matvec(m, n, A, x, y) AD__ARR(matvec, x)((m), (n), (A), (x), (y))
#define ad_axpy(n, a, x, y) AD__ARR(axpy, x)((n), (a), (x), (y))

/* Recorded matrices (dualrev/matrix.h): an ad_real matrix is recorded, a
 * double one wrapped; the output's type picks the product, and with an
 * ad_real output the vector may be either. */
#define ad_mat_make(m, n, A, M)                                                        \
    _Generic((A), ad_real *: ad_mat_record, const ad_real *: ad_mat_record,            \
             default: ad_mat_wrap)((m), (n), (A), (M))
#define ad_mat_vec(M, x, y)                                                            \
    _Generic((y), ad_real *: _Generic((x), ad_real *: ad_mat_vec_rr,                   \
                                      const ad_real *: ad_mat_vec_rr,                  \
                                      default: ad_mat_vec_rd),                         \
             default: ad_mat_vec_d)((M), (x), (y))
/* *s = |M x|^2; s's type picks the form, as y's does for ad_mat_vec. */
#define ad_mat_sqnorm(M, x, s)                                                         \
    _Generic((s), ad_real *: _Generic((x), ad_real *: ad_mat_sqnorm_rr,                \
                                      const ad_real *: ad_mat_sqnorm_rr,               \
                                      default: ad_mat_sqnorm_rd),                      \
             default: ad_mat_sqnorm_d)((M), (x), (s))
/* C = A B + bias 1^T and C = op(A): out's type picks the form, and with an
 * ad_real out the bias may be either (or NULL). */
#define ad_mat_mul(A, B, bias, out, C)                                                 \
    _Generic((out), ad_real *: _Generic((bias), ad_real *: ad_mat_mul_rr,              \
                                        const ad_real *: ad_mat_mul_rr,                \
                                        default: ad_mat_mul_rd),                       \
             default: ad_mat_mul_d)((A), (B), (bias), (out), (C))
#define ad_mat_map(op, A, out, C)                                                      \
    _Generic((out), ad_real *: ad_mat_map_r, default: ad_mat_map_d)((op), (A), (out), (C))
#define ad_mat_map_fn(fn, ctx, A, out, C)                                              \
    _Generic((out), ad_real *: ad_mat_map_fn_r,                                        \
             default: ad_mat_map_fn_d)((fn), (ctx), (A), (out), (C))

/* The constant c as a T, for generic code compiled with T = double and with
 * T = ad_real: AD_CONST(T, 0.5). */
#define AD_CONST(T, c) _Generic((T){0}, ad_real: ad_const, default: ad__plain_value)(c)

/* The value of an ad_real, or a plain number itself, for generic code that
 * branches on values.  (ad_value) still names the function. */
#define ad_value(x) _Generic((x), ad_real: ad_value, default: ad__plain_value)(x)

#endif
