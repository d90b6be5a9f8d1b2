// dualrev.hpp on ADBench GMM: the scalar version of gmm/gmm_objective.h,
// the source the C API records, compiled as C++ with ad::real as the number
// type and the generic operations as dualrev.hpp's operators and functions,
// as peer_adolc_gmm.cpp does for ADOL-C.  Every operator calls the function
// the C generic name dispatches to, so the tape is the C API's, record for
// record: gmm-bench checks that the gradients are the same bits and the
// tapes the same size, and times the two side by side.
#include <dualrev.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <new>

#include "gmm.h"

#define ad_add(a, b) ((a) + (b))
#define ad_sub(a, b) ((a) - (b))
#define ad_mul(a, b) ((a) * (b))
#define ad_exp(x) exp(x)
#define ad_log(x) log(x)
#define ad_lgamma(x) ad_lgamma_d(x)  // what C's ad_lgamma on a double is
#define ad_value(x) ad::value(x)
#define AD_CONST(T, c) ad::constant<T>(c)
#define GMM_OBJECTIVE_SCALAR_ONLY
#define T ad::real
#define NAME(id) id##_hpp
#include "gmm_objective.h"

// The declaration gmm_bench.c makes (under GMM_HAVE_HPP).
extern "C" ad_status gmm_hpp_gradient(const gmm_problem *p, void *scratch, double *batch_grad,
                                      size_t batch, const double *params, double *fx,
                                      double *grad, size_t *records);

// gmm_gradient(GMM_SCALAR, ...) through ad::gradient: one gradient per
// batch of points, summed; scratch is gmm_work's (room for
// gmm_scalar_scratch ad_reals), batch_grad its grad.  Exceptions end here:
// the caller is C.
extern "C" ad_status gmm_hpp_gradient(const gmm_problem *p, void *scratch, double *batch_grad,
                                      size_t batch, const double *params, double *fx,
                                      double *grad, size_t *records)
{
    std::size_t inputs = gmm_inputs(p);
    ad::real *work = static_cast<ad::real *>(scratch);
    ad_status st = AD_OK;
    if (records)
        *records = 0;
    if (!batch || batch > p->n)
        batch = p->n;
    try {
        for (std::size_t i0 = 0; i0 < p->n; i0 += batch) {
            std::size_t i1 = i0 + batch < p->n ? i0 + batch : p->n;
            int global = i0 == 0;
            double *g = global ? grad : batch_grad;
            double f = ad::gradient(
                [=](const ad::real *x, std::size_t) {
                    return gmm_scalar_hpp(p, i0, i1, global, x, work);
                },
                ad::array_view(params, inputs), ad::array_ref(g, inputs));
            if (records)
                *records += ad::tape_stats().records;
            if (global) {
                *fx = f;
                continue;
            }
            *fx += f;
            for (std::size_t j = 0; j < inputs; j++)
                grad[j] += g[j];
        }
        return AD_OK;
    } catch (const ad::error &e) {
        st = e.status();
    } catch (const std::bad_alloc &) {
        st = AD_ENOMEM;
    }
    *fx = std::numeric_limits<double>::quiet_NaN();
    for (std::size_t j = 0; j < inputs; j++)
        grad[j] = std::numeric_limits<double>::quiet_NaN();
    return st;
}
