/* The benchmark programs, compiled twice from objectives.h: for double (the
 * primal baseline) and for ad_real (what ad_gradient records). */
#include <stdint.h>

#include "programs.h"

#define BENCH_T double
#define BENCH_NAME(f) f##_plain
#include "objectives.h"
#undef BENCH_T
#undef BENCH_NAME

#define BENCH_T ad_real
#define BENCH_NAME(f) f##_ad
#include "objectives.h"
#undef BENCH_T
#undef BENCH_NAME

typedef struct program {
    const char *name;
    prog_plain_fn plain;
    ad_objective objective;
    double paper_th_us, paper_ad_us;
} program;

static const program programs[PROG_COUNT] = {
    [PROG_SCALAR_MULT] = {"scalar mult", scalar_mult_plain, scalar_mult_ad, 0.146, 0.536},
    [PROG_DOT] = {"dot product", dot_plain, dot_ad, 2.21, 2.07},
    [PROG_SUM_MAT_VEC] = {"sum-mat-vec", sum_mat_vec_plain, sum_mat_vec_ad, 2.05, 1.32},
    [PROG_DOT_ARRAY] = {"dot (ad_dot)", dot_array_plain, dot_array_ad, 2.21, 2.07},
    [PROG_SUM_MAT_VEC_ARRAY] = {"sum-mat-vec (ad_dot)", sum_mat_vec_array_plain,
                                sum_mat_vec_array_ad, 2.05, 1.32},
    [PROG_ROTATE] = {"rotate_vec_by_quat", rotate_plain, rotate_ad, 8.77, 6.13},
    [PROG_T_BAD] = {"t_bad", t_bad_plain, t_bad_ad, -1.0, -1.0},
    [PROG_GMM_QX] = {"gmm Q(mu-x)", gmm_qx_plain, gmm_qx_ad, -1.0, -1.0},
};

const char *prog_name(bench_prog p) { return programs[p].name; }
prog_plain_fn prog_plain(bench_prog p) { return programs[p].plain; }
ad_objective prog_objective(bench_prog p) { return programs[p].objective; }
double prog_paper_th_us(bench_prog p) { return programs[p].paper_th_us; }
double prog_paper_ad_us(bench_prog p) { return programs[p].paper_ad_us; }

size_t prog_inputs(bench_prog p, size_t n)
{
    switch (p) {
    case PROG_SCALAR_MULT: return 2;
    case PROG_DOT:
    case PROG_DOT_ARRAY: return 2 * n;
    case PROG_SUM_MAT_VEC:
    case PROG_SUM_MAT_VEC_ARRAY: return prog_side(n) * (prog_side(n) + 1);
    case PROG_ROTATE: return 7;
    case PROG_T_BAD: return 1;
    case PROG_GMM_QX: return PROG_QX_D * (PROG_QX_D + 3) / 2;
    case PROG_COUNT: break;
    }
    return 0;
}

void prog_fill_inputs(bench_prog p, double *x, size_t inputs)
{
    /* xorshift64: the same inputs on every run and for every AD tool. */
    uint64_t s = 0x9E3779B97F4A7C15u;
    for (size_t i = 0; i < inputs; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = 0.5 + (double)(s >> 11) * 0x1p-53;
    }
    if (p == PROG_T_BAD)
        x[0] = 1.0;
}
