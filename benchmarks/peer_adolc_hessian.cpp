// ADOL-C's sparse Hessian on the sparse-Hessian benchmark's functions, from
// the same source as dualrev's (hessian_objectives.h), taped as a user would
// at every call.  sparse_hess's steps with its default options: the
// sparsity pattern from the tape (hess_pat, safe mode), ColPack's acyclic
// colouring for indirect recovery (smallest-last ordering), the compressed
// Hessian (hess_mat: one second-order sweep per colour), and ColPack's
// recovery.  Debian 12's ADOL-C is built without ColPack, so its
// sparse_hess refuses to run; the steps are called here one by one instead,
// with Debian's ColPack, when the build found it (BENCH_HAVE_COLPACK), and
// sparse_hess itself otherwise (the peer is then absent where it refuses).
#include <adolc/adolc.h>
#include <adolc/internal/usrparms.h>

#include <climits>
#include <cstdlib>
#include <vector>

#ifdef BENCH_HAVE_COLPACK
#include <ColPack/ColPackHeaders.h>
#endif

#include "peer.h"

#define ad_add(a, b) ((a) + (b))
#define ad_sub(a, b) ((a) - (b))
#define ad_mul(a, b) ((a) * (b))
#define BENCH_T adouble
#define BENCH_NAME(f) f##_adolc
#include "hessian_objectives.h"

namespace {

const short tag = 2;

typedef adouble (*hess_fn)(const adouble *x, size_t n, void *ctx);

const hess_fn fns[] = {rosenbrock_adolc, arwhead_adolc, bdqrtic_adolc};

// The tape's buffers: sized once per function and n from what the first
// recording needed, so that the tape stays in memory (as peer_adolc.cpp).
uint ops = OBUFSIZE, locs = LBUFSIZE, vals = VBUFSIZE, tays = TBUFSIZE;
int sized_which = -1;
size_t sized_n = 0;

#ifndef BENCH_HAVE_COLPACK
// The last sparse_hess call's pattern and values, reused by repeat 1.
unsigned int *rind = nullptr, *cind = nullptr;
double *values = nullptr;
#endif

uint fit(size_t need)
{
    size_t n = need + 64;
    return n > UINT_MAX ? UINT_MAX : (uint)n;
}

void record(int which, size_t n, const double *x)
{
    trace_on(tag, 0, ops, locs, vals, tays);
    {
        std::vector<adouble> ax(n);
        for (size_t i = 0; i < n; i++)
            ax[i] <<= x[i];
        adouble y = fns[which](ax.data(), n, nullptr);
        double fx;
        y >>= fx;
    }
    trace_off();
}

// Buffers for (which, n): one recording with room to spare, then its sizes.
int size_buffers(int which, size_t n, const double *x)
{
    size_t bound = 64 * n + 4096;
    ops = locs = vals = tays = fit(bound);
    record(which, n, x);
    size_t st[STAT_SIZE];
    tapestats(tag, st);
    if (st[OP_FILE_ACCESS] || st[LOC_FILE_ACCESS] || st[VAL_FILE_ACCESS])
        return -1;
    ops = fit(st[NUM_OPERATIONS]);
    locs = fit(st[NUM_LOCATIONS]);
    vals = fit(st[NUM_VALUES]);
    tays = fit(st[TAY_STACK_SIZE]);
    sized_which = which;
    sized_n = n;
    return 0;
}

#ifdef BENCH_HAVE_COLPACK
// The pattern, colouring and compressed Hessian of the last new pattern.
struct colouring {
    size_t n = 0;
    unsigned int **pattern = nullptr;  // hess_pat's rows: count, then columns
    ColPack::GraphColoringInterface *g = nullptr;
    double **seed = nullptr;           // n x colours, ColPack's
    int colours = 0;
    double **compressed = nullptr;     // n x colours, ADOL-C's myalloc2
};

colouring col;

void drop_colouring()
{
    for (size_t i = 0; col.pattern && i < col.n; i++)
        free(col.pattern[i]);
    delete[] col.pattern;
    delete col.g;
    if (col.compressed)
        myfree2(col.compressed);
    col = colouring();
}

int new_colouring(size_t n, const double *x)
{
    drop_colouring();
    col.n = n;
    col.pattern = new unsigned int *[n]();
    if (hess_pat(tag, (int)n, x, col.pattern, 0) < 0)
        return -1;
    col.g = new ColPack::GraphColoringInterface(SRC_MEM_ADOLC, col.pattern, (int)n);
    int rows = 0;
    col.g->GenerateSeedHessian(&col.seed, &rows, &col.colours, "SMALLEST_LAST",
                               "ACYCLIC_FOR_INDIRECT_RECOVERY");
    col.compressed = myalloc2((int)n, col.colours);
    return 0;
}

int hessian_values(size_t n, const double *x, size_t *nnz)
{
    std::vector<double> xs(x, x + n);
    if (hess_mat(tag, (int)n, col.colours, xs.data(), col.seed, col.compressed) < 0)
        return -1;
    ColPack::HessianRecovery recovery;
    unsigned int *rind = nullptr, *cind = nullptr;
    double *values = nullptr;
    int count = recovery.IndirectRecover_CoordinateFormat_unmanaged(
        col.g, col.compressed, col.pattern, &rind, &cind, &values);
    free(rind);
    free(cind);
    free(values);
    *nnz = (size_t)count;
    return 0;
}
#endif

}  // namespace

extern "C" int peer_sparse_hessian(int which, size_t n, const double *x, int new_pattern,
                                   size_t *nnz)
{
    if (which < 0 || which > 2 || n > INT_MAX)
        return -1;
    if ((which != sized_which || n != sized_n) && size_buffers(which, n, x) != 0)
        return -1;
    record(which, n, x);
#ifdef BENCH_HAVE_COLPACK
    if ((new_pattern || col.n != n) && new_colouring(n, x) != 0)
        return -1;
    return hessian_values(n, x, nnz);
#else
    if (new_pattern) {
        free(rind);
        free(cind);
        free(values);
        rind = cind = nullptr;
        values = nullptr;
    }
    int options[2] = {0, 0};  // safe pattern, indirect recovery: the defaults
    int count = 0;
    try {
        if (sparse_hess(tag, (int)n, new_pattern ? 0 : 1, x, &count, &rind, &cind, &values,
                        options) < 0)
            return -1;
    } catch (...) {
        return -1;
    }
    *nnz = (size_t)count;
    return 0;
#endif
}
