/* Helpers shared by the dualrev tests: a finite-difference oracle, a seeded
 * random generator, and double comparisons that print both numbers when they
 * fail.  Header-only; every test includes it after dualrev.h. */
#ifndef DUALREV_TESTS_CHECK_H
#define DUALREV_TESTS_CHECK_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "dualrev.h"

/* A status the test does not need: a call inside an objective whose error
 * the recording keeps and the driver reports (ad_external,
 * ad_checkpointed_loop, ad_mat_record), or a probe whose outcome the test
 * reads elsewhere.  Every status is AD_NODISCARD, and gcc's C mode does not
 * let a cast to void drop one. */
static inline void status_unused(ad_status s)
{
    (void)s;
}

/* ---- finite differences ---- */

typedef double (*fd_fn)(double x, const void *ctx);

typedef struct fd_result {
    double d;      /* the derivative estimate */
    double noise;  /* bound on its rounding error, from the size of f */
} fd_result;

/* Step for the stencil around x: relative for large |x|, absolute near 0.
 * At 2^-10 the eighth-order truncation error, about h^8 f^(9) / 630, stays
 * below 1e-10 relative for every function the tests use, given that their
 * sample points keep at least 0.1 (0.15 at simple poles) from singularities. */
static inline double fd_step(double x)
{
    return 0x1p-10 * fmax(1.0, fabs(x));
}

/* Eighth-order central difference.  Its rounding error is at most
 * sum|c_k| * 2 * (error of one f evaluation) / h, that is about
 * 2.1 * k ulp * max|f| / h for a libm with k-ulp accuracy; noise allows
 * k = 40, so that it is a safe bound, not an estimate. */
static inline fd_result fd_derivative(fd_fn f, const void *ctx, double x)
{
    static const double c[4] = {4.0 / 5, -1.0 / 5, 4.0 / 105, -1.0 / 280};
    double h = fd_step(x), sum = 0.0, fmaxabs = fabs(f(x, ctx));
    for (int k = 1; k <= 4; k++) {
        double up = f(x + k * h, ctx), down = f(x - k * h, ctx);
        sum += c[k - 1] * (up - down);
        fmaxabs = fmax(fmaxabs, fmax(fabs(up), fabs(down)));
    }
    fd_result r = {sum / h, 2e-14 * fmaxabs / h};
    return r;
}

/* ---- random points ---- */

/* SplitMix64: tiny, and good enough to scatter sample points.  The tests
 * seed it with fixed values so that every run checks the same points. */
static inline uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static inline double rng_uniform(uint64_t *state, double lo, double hi)
{
    return lo + (hi - lo) * ((double)(rng_next(state) >> 11) * 0x1p-53);
}

/* ---- comparisons ---- */

static inline int same_double(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return a == b && signbit(a) == signbit(b);
}

static inline void check_same(double got, double want, const char *expr,
                              const char *file, int line)
{
    if (same_double(got, want))
        return;
    print_error("%s = %.17g, expected exactly %.17g\n", expr, got, want);
    _fail(file, line);
}

static inline void check_near(double got, double want, double rtol, double atol,
                              const char *expr, const char *file, int line)
{
    double err = fabs(got - want);
    if (err <= rtol * fabs(want) + atol)
        return;
    print_error("%s = %.17g, expected %.17g (error %.3g, rtol %.3g, atol %.3g)\n",
                expr, got, want, err, rtol, atol);
    _fail(file, line);
}

static inline void check_nan(double got, const char *expr, const char *file, int line)
{
    if (isnan(got))
        return;
    print_error("%s = %.17g, expected NaN\n", expr, got);
    _fail(file, line);
}

/* Identical doubles: equal with the same sign, or both NaN. */
#define assert_same(got, want) check_same((got), (want), #got, __FILE__, __LINE__)
#define assert_near(got, want, rtol, atol) \
    check_near((got), (want), (rtol), (atol), #got, __FILE__, __LINE__)
#define assert_nan(got) check_nan((got), #got, __FILE__, __LINE__)

/* A status that must be AD_OK, named when it is not. */
static inline void check_ok(ad_status s, const char *expr, const char *file, int line)
{
    if (s == AD_OK)
        return;
    print_error("%s: status %d (%s)\n", expr, (int)s, ad_strerror(s));
    _fail(file, line);
}
#define assert_ok(s) check_ok((s), #s, __FILE__, __LINE__)

/* ---- calling ad_gradient ---- */

static inline double gradient_ok_at(ad_objective f, void *ctx, size_t n, const double *x,
                                    double *grad, const char *file, int line)
{
    double fx;
    ad_status s = ad_gradient(f, ctx, n, x, &fx, grad);
    if (s != AD_OK) {
        print_error("ad_gradient returned %d (%s)\n", (int)s, ad_strerror(s));
        _fail(file, line);
    }
    return fx;
}

/* ad_gradient that must succeed; returns f(x). */
#define gradient_ok(f, ctx, n, x, grad) gradient_ok_at((f), (ctx), (n), (x), (grad), __FILE__, __LINE__)

static inline void check_all_nan(double fx, const double *grad, size_t n,
                                 const char *file, int line)
{
    check_nan(fx, "fx", file, line);
    for (size_t i = 0; i < n; i++)
        check_nan(grad[i], "grad[i]", file, line);
}

/* The outputs of a failed ad_gradient call: all NaN. */
#define assert_all_nan(fx, grad, n) check_all_nan((fx), (grad), (n), __FILE__, __LINE__)

/* ---- vectors and CSR matrices (vector-valued functions) ---- */

/* malloc that fails the test instead of returning NULL (1 byte for 0). */
static inline void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* p[0..n) = v */
static inline void fill(double *p, size_t n, double v)
{
    for (size_t i = 0; i < n; i++)
        p[i] = v;
}

static inline void fill_uniform(uint64_t *state, double *p, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        p[i] = rng_uniform(state, lo, hi);
}

/* A well-formed CSR of the given shape: row_ptr from 0 to nnz, never
 * decreasing, columns strictly ascending within each row and below cols. */
static inline void check_csr_valid(const ad_csr *J, size_t rows, size_t cols,
                                   const char *file, int line)
{
    if (J->rows != rows || J->cols != cols) {
        print_error("CSR is %zu x %zu, expected %zu x %zu\n", J->rows, J->cols, rows, cols);
        _fail(file, line);
    }
    if (!J->row_ptr || J->row_ptr[0] != 0 || J->row_ptr[rows] != J->nnz ||
        (J->nnz && (!J->col || !J->val))) {
        print_error("CSR arrays: row_ptr %p, col %p, val %p, nnz %zu\n", (void *)J->row_ptr,
                    (void *)J->col, (void *)J->val, J->nnz);
        _fail(file, line);
    }
    for (size_t r = 0; r < rows; r++) {
        if (J->row_ptr[r] > J->row_ptr[r + 1]) {
            print_error("CSR row_ptr[%zu] = %zu > row_ptr[%zu] = %zu\n", r, J->row_ptr[r],
                        r + 1, J->row_ptr[r + 1]);
            _fail(file, line);
        }
        for (size_t k = J->row_ptr[r]; k < J->row_ptr[r + 1]; k++)
            if (J->col[k] >= cols || (k > J->row_ptr[r] && J->col[k] <= J->col[k - 1])) {
                print_error("CSR row %zu: column %zu at entry %zu (not ascending or >= %zu)\n",
                            r, J->col[k], k, cols);
                _fail(file, line);
            }
    }
}

/* The CSR of a failed call: empty, no arrays. */
static inline void check_csr_empty(const ad_csr *J, const char *file, int line)
{
    if (J->rows || J->cols || J->nnz || J->row_ptr || J->col || J->val) {
        print_error("CSR not emptied: %zu x %zu, nnz %zu, row_ptr %p, col %p, val %p\n", J->rows,
                    J->cols, J->nnz, (void *)J->row_ptr, (void *)J->col, (void *)J->val);
        _fail(file, line);
    }
}

#define assert_csr_valid(J, rows, cols) check_csr_valid((J), (rows), (cols), __FILE__, __LINE__)
#define assert_csr_empty(J) check_csr_empty((J), __FILE__, __LINE__)

/* A call made to fail at allocation i: AD_ENOMEM, and never after a call
 * with fewer allocations succeeded (failure points come first). */
static inline void check_alloc_failure(long i, ad_status st, int successes, const char *file,
                                       int line)
{
    if (successes) {
        print_error("allocation %ld: failed after a call with fewer allocations succeeded\n", i);
        _fail(file, line);
    }
    if (st != AD_ENOMEM) {
        print_error("allocation %ld failed: status %d (%s), expected AD_ENOMEM\n", i, (int)st,
                    ad_strerror(st));
        _fail(file, line);
    }
}
#define assert_alloc_failure(i, st, successes) \
    check_alloc_failure((i), (st), (successes), __FILE__, __LINE__)

/* sum_i x_i^2, then *(const long *)ctx more records (multiplications by 1),
 * to make a tape of a chosen length with a known gradient, 2x. */
static inline ad_real padded_squares(const ad_real *x, size_t n, void *ctx)
{
    const long *pad = ctx;
    ad_real s = ad_const(0.0);
    for (size_t i = 0; i < n; i++)
        s = ad_add(s, ad_mul(x[i], x[i]));
    for (long k = 0; k < *pad; k++)
        s = ad_mul(s, 1.0);
    return s;
}

/* ---- a value smuggled out of one recording into another ---- */

/* y_0 = x_0; y_1 = (length + 1) x_0, in `length` records, saved with
 * `save`, else the value saved by an earlier call. */
typedef struct fn_smuggler {
    int save;
    long length;
    ad_real saved;
} fn_smuggler;

static inline void fn_smuggle(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    fn_smuggler *s = ctx;
    ad_real v = x[0];
    (void)n, (void)m;
    for (long k = 0; k < s->length; k++)
        v = ad_add(v, x[0]);
    if (s->save)
        s->saved = v;
    y[0] = x[0];
    y[1] = s->saved;
}

#endif
