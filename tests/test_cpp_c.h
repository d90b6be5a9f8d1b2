/* What test_cpp_c.c (C) gives test_cpp.cpp (C++): objectives written with
 * the C API's generic names, and the tape's records. */
#ifndef DUALREV_TESTS_TEST_CPP_C_H
#define DUALREV_TESTS_TEST_CPP_C_H

#include <stddef.h>

#include "dualrev.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The constant operands of the mixed forms. */
typedef struct cpp_c_point {
    double a, b;
    int k;
} cpp_c_point;

typedef struct cpp_c_unary {
    const char *name;
    ad_objective f;  /* f(x[0]); ctx unused */
} cpp_c_unary;

typedef struct cpp_c_binary {
    const char *name;
    ad_objective rr, rd, dr, ri, ir;  /* ctx: a cpp_c_point */
} cpp_c_binary;

/* In tests/ops_list.h's order. */
size_t cpp_c_unary_count(void);
const cpp_c_unary *cpp_c_unary_at(size_t i);
size_t cpp_c_binary_count(void);
const cpp_c_binary *cpp_c_binary_at(size_t i);

/* Two inputs: operations in every form, chained. */
ad_real cpp_c_mixed(const ad_real *x, size_t n, void *ctx);
/* Twelve inputs: every array primitive and recorded-matrix product. */
ad_real cpp_c_primitives(const ad_real *x, size_t n, void *ctx);
/* tests/template_objective.h of x[0], x[1], compiled for ad_real, and for
 * double. */
ad_real cpp_c_template(const ad_real *x, size_t n, void *ctx);
double cpp_c_template_d(double x, double y);

/* n = 4, m = 3: products, quotients, elementary functions. */
void cpp_c_vector(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx);

/* Copies the records of the calling thread's last top-level recording
 * (at most max of them) to out; returns their number, or (size_t)-1 if
 * there is no complete recording. */
size_t cpp_c_tape(ad__record *out, size_t max);

/* lib/testing.h's test hook: allocations after the next `after` fail. */
void cpp_c_fail_alloc_after(long after);

#ifdef __cplusplus
}
#endif

#endif
