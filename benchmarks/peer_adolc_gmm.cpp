// ADOL-C on ADBench GMM: the scalar version of gmm/gmm_objective.h, the
// same source dualrev records, with adouble as the number type and the
// generic operations as ADOL-C's operators.  Every gradient tapes each batch
// of points again (trace_on, <<=, the objective, >>=, trace_off) and then
// calls gradient(), as benchmarks/peer_adolc.cpp does for the other
// programs.
//
// ADOL-C keeps a tape in memory only while it fits the buffers given to
// trace_on(); past them it writes tape files.  gmm_adolc_prepare() measures
// what one point costs on the tape, picks the batch that fits the memory
// budget, records the first (largest) batch once with room to spare, and
// gives every later recording buffers of just the size that took.
#include <adolc/adolc.h>
#include <adolc/internal/usrparms.h>

#include <climits>
#include <cmath>
#include <vector>

#include "gmm.h"

namespace {

// The scalar source reads values only of its numbers, to shift logsumexp.
inline double value_of(const adouble &x)
{
    return x.getValue();
}

}  // namespace

#define ad_add(a, b) ((a) + (b))
#define ad_sub(a, b) ((a) - (b))
#define ad_mul(a, b) ((a) * (b))
#define ad_exp(x) exp(x)
#define ad_log(x) log(x)
#define ad_lgamma(x) std::lgamma(x)
#define ad_value(x) value_of(x)
#define AD_CONST(T, c) T(c)
#define GMM_OBJECTIVE_SCALAR_ONLY
#define T adouble
#define NAME(id) id##_adolc
#include "gmm_objective.h"

#ifndef BENCH_PEER_VERSION
#define BENCH_PEER_VERSION ""
#endif

namespace {

const short tag = 2;

struct tape_size {
    size_t ops, locs, vals, taylors;
};

tape_size buffers = {OBUFSIZE, LBUFSIZE, VBUFSIZE, TBUFSIZE};

uint fit(size_t need)
{
    size_t n = need + 64;
    return n > UINT_MAX ? UINT_MAX : (uint)n;
}

// Records points [i0, i1) (and the global terms with the first point) at
// params; the size of the tape that took.  -1 if ADOL-C wrote tape files.
int record(const gmm_problem *p, size_t i0, size_t i1, const double *params, double *fx,
           tape_size *took)
{
    size_t n = gmm_inputs(p);
    trace_on(tag, 0, fit(buffers.ops), fit(buffers.locs), fit(buffers.vals),
             fit(buffers.taylors));
    {
        std::vector<adouble> x(n), scratch(gmm_scalar_scratch(p));
        for (size_t i = 0; i < n; i++)
            x[i] <<= params[i];
        adouble y = gmm_scalar_adolc(p, i0, i1, i0 == 0, x.data(), scratch.data());
        y >>= *fx;
    }
    trace_off();
    size_t st[STAT_SIZE];
    tapestats(tag, st);
    *took = {st[NUM_OPERATIONS], st[NUM_LOCATIONS], st[NUM_VALUES], st[TAY_STACK_SIZE]};
    return st[OP_FILE_ACCESS] || st[LOC_FILE_ACCESS] || st[VAL_FILE_ACCESS] ? -1 : 0;
}

// Bytes of a tape of that size: 1 per operation, 4 per location (locint),
// 8 per value and per Taylor coefficient that gradient() keeps.
size_t bytes(const tape_size &s)
{
    return s.ops + 4 * s.locs + 8 * s.vals + 8 * s.taylors;
}

// A bound on one point's tape for the first recordings: a few entries of
// each kind per operation of the scalar version.
size_t bound_per_point(const gmm_problem *p)
{
    return 8 * p->k * (p->d * p->d + 4 * p->d + 8) + 64;
}

std::vector<double> batch_grad;

}  // namespace

extern "C" const char *gmm_adolc_name(void)
{
    return "ADOL-C " BENCH_PEER_VERSION;
}

extern "C" int gmm_adolc_prepare(const gmm_problem *p, size_t budget_bytes,
                                 const double *params, size_t *batch, size_t *tape_bytes)
{
    double fx;
    tape_size one, two, first;
    size_t base_bound = 8 * (gmm_inputs(p) + p->k * (p->d * p->d + 4 * p->d)) + 1024;
    size_t b = base_bound + 2 * bound_per_point(p);
    buffers = {b, b, b, b};
    if (record(p, 0, 1, params, &fx, &one) || (p->n > 1 && record(p, 0, 2, params, &fx, &two)))
        return -1;
    if (p->n == 1)
        two = one;
    // per point, and the rest (inputs, per-component work, global terms)
    tape_size per = {two.ops - one.ops, two.locs - one.locs, two.vals - one.vals,
                     two.taylors - one.taylors};
    tape_size base = {one.ops - per.ops, one.locs - per.locs, one.vals - per.vals,
                      one.taylors - per.taylors};
    size_t per_bytes = bytes(per) ? bytes(per) : 1;
    size_t fits = budget_bytes > bytes(base) ? (budget_bytes - bytes(base)) / per_bytes : 1;
    *batch = fits < 1 ? 1 : fits > p->n ? p->n : fits;
    // The first batch, with 5% to spare, then buffers of the size it took.
    size_t m = *batch;
    buffers = {base.ops + m * per.ops, base.locs + m * per.locs, base.vals + m * per.vals,
               base.taylors + m * per.taylors};
    buffers = {buffers.ops + buffers.ops / 20, buffers.locs + buffers.locs / 20,
               buffers.vals + buffers.vals / 20, buffers.taylors + buffers.taylors / 20};
    if (record(p, 0, m, params, &fx, &first))
        return -1;
    buffers = first;
    *tape_bytes = bytes(first);
    batch_grad.assign(gmm_inputs(p), 0.0);
    return 0;
}

extern "C" int gmm_adolc_gradient(const gmm_problem *p, size_t batch, const double *params,
                                  double *fx, double *grad)
{
    size_t n = gmm_inputs(p);
    tape_size took;
    if (batch_grad.size() != n)
        batch_grad.assign(n, 0.0);
    for (size_t i0 = 0; i0 < p->n; i0 += batch) {
        size_t i1 = i0 + batch < p->n ? i0 + batch : p->n;
        double f, *g = i0 == 0 ? grad : batch_grad.data();
        if (record(p, i0, i1, params, &f, &took) || gradient(tag, (int)n, params, g) < 0)
            return -1;
        *fx = i0 == 0 ? f : *fx + f;
        if (i0 > 0)
            for (size_t j = 0; j < n; j++)
                grad[j] += g[j];
    }
    return 0;
}
