/* dualrev: sparse Hessians (ad_sparse_hessian, ad_sparse_hessian_values):
 * one second-order recording, then edge pushing (sweeps/edge_push.c). */
#include <string.h>

#include "edge_push.h"
#include "recording.h"
#include "status.h"

/* Whether H is a lower triangle of n rows with columns ascending (the
 * structure ad_sparse_hessian_values writes into). */
static int lower_triangle(const ad_csr *H, size_t n)
{
    if (H->rows != n || H->cols != n || !H->row_ptr || H->row_ptr[0] != 0 ||
        H->row_ptr[n] != H->nnz || (H->nnz && (!H->col || !H->val)))
        return 0;
    for (size_t r = 0; r < n; r++) {
        if (H->row_ptr[r] > H->row_ptr[r + 1] || H->row_ptr[r + 1] > H->nnz)
            return 0;
        for (size_t k = H->row_ptr[r]; k < H->row_ptr[r + 1]; k++)
            if (H->col[k] > r || (k > H->row_ptr[r] && H->col[k] <= H->col[k - 1]))
                return 0;
    }
    return 1;
}

/* f recorded at x, its Hessian into H (fixed: into H's structure), *fx. */
static ad_status record_and_sweep(ad_objective f, void *ctx, size_t n, const double *x,
                                  double *fx, double *grad, ad_csr *H, int fixed)
{
    ad_tape *t = ad_thread_tape();
    ad_status s = ad_record_objective(t, f, ctx, n, x, 1);
    if (s == AD_OK)
        s = ad_edge_push(t, n, grad, H, fixed);
    if (s == AD_OK)
        ad_read_outputs(t, 1, fx);
    return s;
}

ad_status ad_sparse_hessian(ad_objective f, void *ctx, size_t n, const double *x, double *fx,
                            double *grad, ad_csr *H)
{
    ad_status s = AD_EINVAL;
    if (H)
        memset(H, 0, sizeof *H);
    if (f && fx && H && (!n || (x && grad)))
        s = record_and_sweep(f, ctx, n, x, fx, grad, H, 0);
    if (s == AD_OK)
        return AD_OK;
    ad_csr_free(H);
    ad_fill_nan(fx, 1);
    ad_fill_nan(grad, n);
    return s;
}

ad_status ad_sparse_hessian_values(ad_objective f, void *ctx, size_t n, const double *x,
                                   double *fx, double *grad, ad_csr *H)
{
    ad_status s = AD_EINVAL;
    int valid = H && lower_triangle(H, n);
    if (f && fx && valid && (!n || (x && grad)))
        s = record_and_sweep(f, ctx, n, x, fx, grad, H, 1);
    if (s == AD_OK)
        return AD_OK;
    if (valid)
        ad_fill_nan(H->val, H->nnz);
    ad_fill_nan(fx, 1);
    ad_fill_nan(grad, n);
    return s;
}
