// ADOL-C as the comparison AD tool: the same objectives.h source, with the
// scalar type adouble and the generic operations as its operators.
//
// ADOL-C keeps a tape in memory only while it fits the buffers given to
// trace_on(); past them it writes tape files.  peer_prepare() records once
// with room to spare, reads the sizes the tape needed, and every later
// recording gets buffers of just that size: the tape stays in memory, and
// trace_on() allocates no more than it must (ADOL-C's default sizes, 2^19
// entries per buffer, measured slower on the small programs here).
#include <adolc/adolc.h>
#include <adolc/internal/usrparms.h>

#include <climits>
#include <vector>

#include "peer.h"

#define ad_add(a, b) ((a) + (b))
#define ad_sub(a, b) ((a) - (b))
#define ad_mul(a, b) ((a) * (b))
#define BENCH_T adouble
#define BENCH_NAME(f) f##_adolc
#include "objectives.h"

#ifndef BENCH_PEER_VERSION
#define BENCH_PEER_VERSION ""
#endif

namespace {

const short tag = 1;

typedef adouble (*tape_fn)(const adouble *x, size_t inputs, void *ctx);

tape_fn program_of(bench_prog p)
{
    switch (p) {
    case PROG_SCALAR_MULT: return scalar_mult_adolc;
    case PROG_DOT:
    case PROG_DOT_ARRAY: return dot_adolc;
    case PROG_SUM_MAT_VEC:
    case PROG_SUM_MAT_VEC_ARRAY: return sum_mat_vec_adolc;
    case PROG_ROTATE: return rotate_adolc;
    case PROG_T_BAD: return t_bad_adolc;
    case PROG_GMM_QX: return gmm_qx_adolc;
    case PROG_COUNT: break;
    }
    return nullptr;
}

struct buffers {
    uint ops, locs, vals, taylors;
};

buffers sizes = {OBUFSIZE, LBUFSIZE, VBUFSIZE, TBUFSIZE};

uint fit(size_t need)
{
    size_t n = need + 64;
    return n > UINT_MAX ? UINT_MAX : (uint)n;
}

// Record p at x on the tape `tag`, as an ADOL-C user would: independents
// declared with <<=, the dependent read back with >>=.
int record(bench_prog p, size_t n, const double *x, size_t inputs, double *fx)
{
    tape_fn f = program_of(p);
    if (!f)
        return -1;
    trace_on(tag, 0, sizes.ops, sizes.locs, sizes.vals, sizes.taylors);
    {
        std::vector<adouble> ax(inputs);
        for (size_t i = 0; i < inputs; i++)
            ax[i] <<= x[i];
        adouble y = f(ax.data(), inputs, &n);
        y >>= *fx;
    }
    trace_off();
    return 0;
}

}  // namespace

extern "C" const char *peer_name(void)
{
    return "ADOL-C " BENCH_PEER_VERSION;
}

extern "C" int peer_prepare(bench_prog p, size_t n, const double *x, size_t inputs,
                            size_t records_hint)
{
    // A generous bound for this one recording: ADOL-C spends a few
    // operations, locations and Taylor values per elementary operation.
    size_t bound = 16 * (records_hint + inputs) + 1024;
    sizes = {fit(bound), fit(bound), fit(bound), fit(bound)};
    double fx;
    if (record(p, n, x, inputs, &fx) != 0)
        return -1;
    size_t st[STAT_SIZE];
    tapestats(tag, st);
    if (st[OP_FILE_ACCESS] || st[LOC_FILE_ACCESS] || st[VAL_FILE_ACCESS])
        return -1;  // the tape spilled to files: the bound above was wrong
    sizes = {fit(st[NUM_OPERATIONS]), fit(st[NUM_LOCATIONS]), fit(st[NUM_VALUES]),
             fit(st[TAY_STACK_SIZE])};
    return record(p, n, x, inputs, &fx);
}

extern "C" int peer_tape_gradient(bench_prog p, size_t n, const double *x, size_t inputs,
                                  double *fx, double *grad)
{
    if (record(p, n, x, inputs, fx) != 0)
        return -1;
    return gradient(tag, (int)inputs, x, grad) < 0 ? -1 : 0;
}

extern "C" int peer_gradient(const double *x, size_t inputs, double *grad)
{
    return gradient(tag, (int)inputs, x, grad) < 0 ? -1 : 0;
}
