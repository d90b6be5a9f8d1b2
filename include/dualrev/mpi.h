/* dualrev/mpi.h: sums of terms shared out over MPI ranks, with results
 * that do not depend on the number of ranks or threads.
 *
 *   #include <mpi.h>
 *   #include <dualrev/mpi.h>
 *
 *   ad_status s = ad_mpi_gradient_sum(MPI_COMM_WORLD, term, ctx, nterms, n, x,
 *                                     &fx, grad, threads);
 *
 * Collective: every rank of comm calls it with the same term (the same
 * function of i and x on every rank: each rank may hold all the data, or
 * be able to compute any term), nterms, n and x.  The terms are cut into
 * chunks as ad_gradient_sum cuts them (ad_sum_plan_make, from term 0 at x:
 * the same on every rank); each rank runs a contiguous range of chunks on
 * `threads` threads (ad_gradient_sum_chunks); every chunk's value and
 * gradient go to every rank (MPI_Allgatherv), and each rank adds them in
 * chunk order as ad_gradient_sum does.  So every rank gets the same fx and
 * grad, and they are ad_gradient_sum's bits on one process, for every
 * number of ranks and threads.  Header only: the library does not link
 * MPI.
 *
 * Errors reach every rank as the same status: the ranks first agree on the
 * plan (an MPI_Allreduce of its figures and of a hash of x, and v: a rank
 * that differs gives AD_EINVAL everywhere), and after their chunks on the
 * first failure in a fixed order (bad arguments, then term 0's recording,
 * then the failing chunk of lowest index): its status is returned on every
 * rank, with fx, grad (and hv) NaN.  Nothing waits for a rank that failed.
 * An MPI call that returns an error (only where comm's error handler is
 * MPI_ERRORS_RETURN; the default aborts) gives AD_ECOMM on that rank, and
 * the other ranks may then wait: MPI's own failure, not one of dualrev's.
 * comm = MPI_COMM_NULL gives AD_EINVAL at once, without communication.
 *
 * Threads: only the calling thread calls MPI (MPI_THREAD_FUNNELED or
 * more is enough); the library's own threads run the terms.
 * Memory: every rank holds every chunk's results, nchunks (1 + n) doubles
 * (hv: 1 + 2 n), for the call. */
#ifndef DUALREV_MPI_H
#define DUALREV_MPI_H

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <dualrev.h>
#include <mpi.h>

AD__EXTERN_C_BEGIN

/* (internal) FNV-1a over the bytes of n doubles, from h. */
static inline uint64_t ad__mpi_hash(uint64_t h, const double *p, size_t n)
{
    const unsigned char *b = (const unsigned char *)p;
    for (size_t i = 0; p && i < n * sizeof *p; i++) {
        h ^= b[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* (internal) A failure's rank in the order every rank agrees on: stage 0
 * the arguments, 1 term 0's recording, 2 + c chunk c (or the memory of a
 * rank whose first chunk is c); lower first.  UINT64_MAX: none. */
static inline uint64_t ad__mpi_key(uint64_t stage, ad_status s)
{
    if (s == AD_OK)
        return UINT64_MAX;
    if (stage > (UINT64_MAX >> 8) - 1)
        stage = (UINT64_MAX >> 8) - 1;
    return stage << 8 | (uint64_t)s;
}

/* (internal) The body of ad_mpi_gradient_sum (v, hv NULL, hvp 0) and
 * ad_mpi_hvp_sum. */
static inline ad_status ad__mpi_sum(MPI_Comm comm, ad_term term, void *ctx, size_t nterms,
                                    size_t n, const double *x, const double *v, double *fx,
                                    double *grad, double *hv, unsigned threads, int hvp)
{
    ad_sum_plan plan;
    ad_status s = AD_OK;
    uint64_t key;
    int rank = 0, ranks = 1;
    double *all = NULL;
    int *counts = NULL, *displs = NULL;
    MPI_Datatype row = MPI_DATATYPE_NULL;
    size_t stride = 1 + (hvp ? 2 : 1) * n, c0 = 0, c1 = 0;

    if (comm == MPI_COMM_NULL) {
        s = AD_EINVAL;
        goto done;
    }
    if (MPI_Comm_size(comm, &ranks) != MPI_SUCCESS || MPI_Comm_rank(comm, &rank) != MPI_SUCCESS) {
        s = AD_ECOMM;
        goto done;
    }

    /* The plan, here; then the ranks agree on it, or on the first failure. */
    memset(&plan, 0, sizeof plan);
    if (!term || !fx || (n && (!x || !grad || (hvp && (!v || !hv)))))
        key = ad__mpi_key(0, AD_EINVAL);
    else
        key = ad__mpi_key(1, ad_sum_plan_make(term, ctx, nterms, n, x, hvp, &plan));
    {
        uint64_t h = ad__mpi_hash(UINT64_C(0xcbf29ce484222325), key == UINT64_MAX ? x : NULL, n);
        h = ad__mpi_hash(h, key == UINT64_MAX && hvp ? v : NULL, n);
        uint64_t kind = hvp ? 1u : 0u;
        uint64_t mine[13] = {~key,
                             (uint64_t)nterms, ~(uint64_t)nterms,
                             (uint64_t)n, ~(uint64_t)n,
                             (uint64_t)plan.per, ~(uint64_t)plan.per,
                             (uint64_t)plan.nchunks, ~(uint64_t)plan.nchunks,
                             h, ~h, kind, ~kind};
        uint64_t most[13];
        int differ = 0;
        if (MPI_Allreduce(mine, most, 13, MPI_UINT64_T, MPI_MAX, comm) != MPI_SUCCESS) {
            s = AD_ECOMM;
            goto done;
        }
        key = ~most[0];
        for (int k = 1; k < 13; k += 2)
            differ |= most[k] != ~most[k + 1];
        if (key != UINT64_MAX) {
            s = (ad_status)(key & 0xff);
            goto done;
        }
        if (differ) {  /* not the same sum, or not the same x, on every rank */
            s = AD_EINVAL;
            goto done;
        }
    }
    *fx = 0.0;
    for (size_t j = 0; j < n; j++) {
        grad[j] = 0.0;
        if (hvp)
            hv[j] = 0.0;
    }
    if (plan.nchunks == 0)
        goto done;

    /* This rank's chunks: an equal share, the first ranks one more. */
    {
        size_t p = (size_t)ranks, r = (size_t)rank, base = plan.nchunks / p,
               extra = plan.nchunks % p;
        c0 = r * base + (r < extra ? r : extra);
        c1 = c0 + base + (r < extra);
    }
    s = AD_OK;
    if (plan.nchunks > (size_t)INT_MAX || stride > (size_t)INT_MAX ||
        plan.nchunks > SIZE_MAX / sizeof(double) / stride)
        s = AD_ERANGE;  /* MPI counts are ints */
    if (s == AD_OK) {
        all = (double *)malloc(plan.nchunks * stride * sizeof *all);
        counts = (int *)malloc(2 * (size_t)ranks * sizeof *counts);
        if (!all || !counts)
            s = AD_ENOMEM;
    }
    key = ad__mpi_key(2 + c0, s);
    if (s == AD_OK && c1 > c0) {
        size_t failed = c1;
        s = hvp ? ad_hvp_sum_chunks(term, ctx, &plan, n, x, v, c0, c1, all + c0 * stride, &failed,
                                    threads)
                : ad_gradient_sum_chunks(term, ctx, &plan, n, x, c0, c1, all + c0 * stride,
                                         &failed, threads);
        key = ad__mpi_key(2 + failed, s);
    }
    {
        uint64_t first;
        if (MPI_Allreduce(&key, &first, 1, MPI_UINT64_T, MPI_MIN, comm) != MPI_SUCCESS) {
            s = AD_ECOMM;
            goto done;
        }
        if (first != UINT64_MAX) {
            s = (ad_status)(first & 0xff);
            goto done;
        }
    }

    /* Every chunk's results to every rank, then added in chunk order. */
    displs = counts + ranks;
    for (int k = 0; k < ranks; k++) {
        size_t p = (size_t)ranks, r = (size_t)k, base = plan.nchunks / p,
               extra = plan.nchunks % p;
        displs[k] = (int)(r * base + (r < extra ? r : extra));
        counts[k] = (int)(base + (r < extra));
    }
    if (MPI_Type_contiguous((int)stride, MPI_DOUBLE, &row) != MPI_SUCCESS ||
        MPI_Type_commit(&row) != MPI_SUCCESS ||
        MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, counts, displs, row, comm) !=
            MPI_SUCCESS) {
        s = AD_ECOMM;
        goto done;
    }
    for (size_t c = 0; c < plan.nchunks; c++) {
        const double *o = all + c * stride;
        *fx += o[0];
        for (size_t j = 0; j < n; j++)
            grad[j] += o[1 + j];
        if (hvp)
            for (size_t j = 0; j < n; j++)
                hv[j] += o[1 + n + j];
    }

done:
    if (row != MPI_DATATYPE_NULL)
        MPI_Type_free(&row);
    free(all);
    free(counts);
    if (s != AD_OK) {
        if (fx)
            *fx = NAN;
        for (size_t j = 0; grad && j < n; j++)
            grad[j] = NAN;
        for (size_t j = 0; hvp && hv && j < n; j++)
            hv[j] = NAN;
    }
    return s;
}

/* f(x) = sum over i < nterms of term(i, x, n, ctx), its value and gradient
 * on every rank of comm (collective; above). */
AD_NODISCARD static inline ad_status ad_mpi_gradient_sum(MPI_Comm comm, ad_term term, void *ctx,
                                                         size_t nterms, size_t n, const double *x,
                                                         double *fx, double *grad,
                                                         unsigned threads)
{
    return ad__mpi_sum(comm, term, ctx, nterms, n, x, NULL, fx, grad, NULL, threads, 0);
}

/* The same, and H v (ad_hvp_sum's bits). */
AD_NODISCARD static inline ad_status ad_mpi_hvp_sum(MPI_Comm comm, ad_term term, void *ctx,
                                                    size_t nterms, size_t n, const double *x,
                                                    const double *v, double *fx, double *grad,
                                                    double *hv, unsigned threads)
{
    return ad__mpi_sum(comm, term, ctx, nterms, n, x, v, fx, grad, hv, threads, 1);
}

AD__EXTERN_C_END

#endif /* DUALREV_MPI_H */
