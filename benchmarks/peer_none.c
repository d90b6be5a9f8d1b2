/* No comparison AD tool in this build (no C++ compiler, or no ADOL-C). */
#include "peer.h"

const char *peer_name(void)
{
    return NULL;
}

int peer_prepare(bench_prog p, size_t n, const double *x, size_t inputs, size_t records_hint)
{
    (void)p, (void)n, (void)x, (void)inputs, (void)records_hint;
    return -1;
}

int peer_tape_gradient(bench_prog p, size_t n, const double *x, size_t inputs, double *fx,
                       double *grad)
{
    (void)p, (void)n, (void)x, (void)inputs, (void)fx, (void)grad;
    return -1;
}

int peer_gradient(const double *x, size_t inputs, double *grad)
{
    (void)x, (void)inputs, (void)grad;
    return -1;
}

int peer_sparse_hessian(int which, size_t n, const double *x, int new_pattern, size_t *nnz)
{
    (void)which, (void)n, (void)x, (void)new_pattern, (void)nnz;
    return -1;
}
