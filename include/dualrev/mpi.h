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
#include <dualrev/bridge.h>
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

/* ---- differentiable communication (collective recordings) ----
 *
 * For SPMD programs whose objective communicates: a domain split over the
 * ranks, halos exchanged, a sum reduced.  Each call below takes ad_real
 * buffers, communicates their values as its MPI namesake does, and inside
 * a recording of ad_mpi_gradient, ad_mpi_jvp or ad_mpi_hvp (below) makes
 * one record (ad_external_collective) whose rules communicate the
 * derivatives: a send's cotangent comes back as a receive, an allreduce's
 * is an allreduce, a broadcast's is a reduction to the root; tangents
 * travel as the values did.  An operation is recorded on the ranks that
 * take part in it whenever one of them holds an active value there (a flag
 * travels with the values), so a rank whose own values are constant still
 * sends back the cotangents of what it received.
 *
 * Every rank must make the same calls in the same order as MPI requires,
 * in its recording and in every replay of a checkpointed loop's steps.
 * Results: as MPI's; ad_mpi_allreduce_sum adds the ranks' values in rank
 * order, the same bits on every rank (it gathers count values from every
 * rank to do so: for the short vectors of a reduction, not a field).
 * Outside a recording, or in one made by another driver, they communicate
 * values alone (ad_gradient's sweep of such a recording gives no
 * derivative through them: use the ad_mpi_ drivers).
 *
 * The status is the communication's: AD_OK once the values have arrived,
 * else AD_EINVAL (NULL buffers with counts, a count beyond INT_MAX - 1),
 * AD_ENOMEM (the buffers of the call: nothing was sent) or AD_ECOMM (an
 * MPI call returned an error: only where comm's error handler is
 * MPI_ERRORS_RETURN), with NaN outputs.  A recording that cannot keep the
 * operation keeps its error instead, and the driver reports it on every
 * rank; the outputs are then the values, constant.  So f may go on to its
 * next communication whatever happened to its recording -- and must: a
 * rank that skips one leaves the others waiting. */

/* (internal) What an operation's record keeps: ad_external_collective
 * copies it into the record; `result` serves only while the record is
 * made. */
enum { AD__MPI_SENDRECV, AD__MPI_ALLREDUCE, AD__MPI_BCAST, AD__MPI_CLOSE };
typedef struct ad__mpi_op {
    MPI_Comm comm;
    int kind, dest, source, tag, root, rank, ranks;
    int seed_all;          /* the closing identity: every rank's cotangent, or rank 0's */
    int send_on, recv_on;  /* sendrecv: the edges that carry derivatives */
    const double *result;  /* the outputs, computed before the record is made */
} ad__mpi_op;

/* (internal) A buffer of count doubles (at least one). */
static inline double *ad__mpi_doubles(size_t count)
{
    return (double *)malloc((count ? count : 1) * sizeof(double));
}

static inline void ad__mpi_primal(void *ctx, size_t n, const double *x, size_t m, double *y)
{
    const ad__mpi_op *op = (const ad__mpi_op *)ctx;
    (void)n;
    (void)x;
    if (m)
        memcpy(y, op->result, m * sizeof *y);
}

/* (internal) out[i] = all[i] + all[stride + i] + ... over `ranks` rows of
 * all, i < count: the ranks' values added in rank order, the same bits on
 * every rank that adds them. */
static inline void ad__mpi_add_ranks(const double *all, size_t stride, int ranks, size_t count,
                                     double *out)
{
    for (size_t i = 0; i < count; i++) {
        double t = all[i];
        for (int r = 1; r < ranks; r++)
            t += all[(size_t)r * stride + i];
        out[i] = t;
    }
}

/* (internal) out[0..count) = the sum over ranks of in[0..count), in rank
 * order; 0 on success. */
static inline int ad__mpi_sum_ranks(MPI_Comm comm, int ranks, const double *in, double *out,
                                    size_t count)
{
    if (count == 0)
        return 0;
    double *all = ad__mpi_doubles(count * (size_t)ranks);
    if (!all)
        return 1;
    int bad = MPI_Allgather(in, (int)count, MPI_DOUBLE, all, (int)count, MPI_DOUBLE, comm) !=
              MPI_SUCCESS;
    if (!bad)
        ad__mpi_add_ranks(all, count, ranks, count, out);
    free(all);
    return bad;
}

/* (internal) A sweep's exchange of a sendrecv: out[0..nout) to `to` and
 * in[0..nin) from `from`, each only where its edge carries derivatives
 * (on: the peer has a record for it too). */
static inline void ad__mpi_edges(const ad__mpi_op *op, const double *out, size_t nout, int out_on,
                                 int to, double *in, size_t nin, int in_on, int from)
{
    MPI_Sendrecv(out, out_on ? (int)nout : 0, MPI_DOUBLE, out_on ? to : MPI_PROC_NULL, op->tag,
                 in, in_on ? (int)nin : 0, MPI_DOUBLE, in_on ? from : MPI_PROC_NULL, op->tag,
                 op->comm, MPI_STATUS_IGNORE);
}

/* (internal) The operations' vjp, transposed communication: xbar arrives
 * zeroed. */
static inline void ad__mpi_vjp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                               const double *ybar, double *xbar)
{
    const ad__mpi_op *op = (const ad__mpi_op *)ctx;
    (void)x;
    (void)y;
    switch (op->kind) {
    case AD__MPI_SENDRECV:  /* what we received goes back to its source */
        ad__mpi_edges(op, ybar, m, op->recv_on, op->source, xbar, n, op->send_on, op->dest);
        break;
    case AD__MPI_ALLREDUCE:
        (void)ad__mpi_sum_ranks(op->comm, op->ranks, ybar, xbar, n);
        break;
    case AD__MPI_BCAST: {  /* every rank's cotangent, added up at the root in rank order */
        double *all = op->rank == op->root ? ad__mpi_doubles(m * (size_t)op->ranks) : NULL;
        MPI_Gather(ybar, (int)m, MPI_DOUBLE, all, (int)m, MPI_DOUBLE, op->root, op->comm);
        if (all)
            ad__mpi_add_ranks(all, m, op->ranks, n, xbar);
        free(all);
        break;
    }
    default:  /* the closing identity: the objective seeded on rank 0 alone */
        for (size_t i = 0; i < n; i++)
            xbar[i] = op->seed_all || op->rank == 0 ? ybar[i] : 0.0;
        break;
    }
}

/* (internal) The operations' jvp: tangents travel as the values did. */
static inline void ad__mpi_jvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                               const double *xdot, double *ydot)
{
    const ad__mpi_op *op = (const ad__mpi_op *)ctx;
    (void)x;
    (void)y;
    switch (op->kind) {
    case AD__MPI_SENDRECV:
        for (size_t j = 0; j < m; j++)
            ydot[j] = 0.0;
        ad__mpi_edges(op, xdot, n, op->send_on, op->dest, ydot, m, op->recv_on, op->source);
        break;
    case AD__MPI_ALLREDUCE:
        (void)ad__mpi_sum_ranks(op->comm, op->ranks, xdot, ydot, m);
        break;
    case AD__MPI_BCAST:
        if (op->rank == op->root && m)
            memcpy(ydot, xdot, m * sizeof *ydot);
        MPI_Bcast(ydot, (int)m, MPI_DOUBLE, op->root, op->comm);
        break;
    default:
        for (size_t j = 0; j < m; j++)
            ydot[j] = j < n ? xdot[j] : 0.0;
        break;
    }
}

/* (internal) Linear: no second derivative (out stays zero). */
static inline void ad__mpi_hvp(void *ctx, size_t n, const double *x, size_t m, const double *y,
                               const double *ybar, const double *xdot, double *out)
{
    (void)ctx, (void)n, (void)x, (void)m, (void)y, (void)ybar, (void)xdot, (void)out;
}

/* (internal) The record of op, made with its results in vals[0..m).  A
 * recording that cannot take it keeps the error, which its driver
 * reports on every rank; y then holds the values as constants, and the
 * operation is the communication's success: so that f goes on to its next
 * communication as the other ranks do. */
static inline void ad__mpi_record(ad__mpi_op *op, int active, size_t n, const ad_real *x,
                                  size_t m, ad_real *y, const double *vals)
{
    static const ad_rule rule = {ad__mpi_primal, ad__mpi_vjp, ad__mpi_jvp, ad__mpi_hvp};
    op->result = vals;
    if (ad_external_collective(&rule, op, sizeof *op, active, n, x, m, y) != AD_OK)
        for (size_t j = 0; j < m; j++)
            y[j] = ad_const(vals[j]);
}

/* (internal) Whether one of x[0..n) is active. */
static inline int ad__mpi_active(const ad_real *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (x[i].id)
            return 1;
    return 0;
}

static inline ad_status ad__mpi_fail(ad_status s, ad_real *y, size_t m)
{
    for (size_t j = 0; y && j < m; j++)
        y[j] = ad_const(NAN);
    return s;
}

/* send[0..nsend) to dest and recv[0..nrecv) from source, with tag, as
 * MPI_Sendrecv (MPI_PROC_NULL for either: nothing goes, or recv is left
 * as it was).  send and recv must not overlap. */
AD_NODISCARD static inline ad_status ad_mpi_sendrecv(const ad_real *send, size_t nsend, int dest,
                                                     ad_real *recv, size_t nrecv, int source,
                                                     int tag, MPI_Comm comm)
{
    ad__mpi_op op;
    memset(&op, 0, sizeof op);
    if (dest == MPI_PROC_NULL)
        nsend = 0;
    if (source == MPI_PROC_NULL)
        nrecv = 0;
    if (comm == MPI_COMM_NULL || (nsend && !send) || (nrecv && !recv) ||
        nsend >= (size_t)INT_MAX || nrecv >= (size_t)INT_MAX)
        return ad__mpi_fail(AD_EINVAL, recv, nrecv);
    double *out = ad__mpi_doubles(nsend + 1 + nrecv + 1), *in = out + nsend + 1;
    if (!out)  /* and nothing sent: the peer waits (MPI's own failure, as AD_ECOMM's) */
        return ad__mpi_fail(AD_ENOMEM, recv, nrecv);
    for (size_t i = 0; i < nsend; i++)
        out[i] = send[i].v;
    op.comm = comm;
    op.kind = AD__MPI_SENDRECV;
    op.dest = dest;
    op.source = source;
    op.tag = tag;
    op.send_on = ad__mpi_active(send, nsend);
    out[nsend] = op.send_on;
    in[nrecv] = 0.0;
    ad_status s = AD_OK;
    if (MPI_Sendrecv(out, dest == MPI_PROC_NULL ? 0 : (int)nsend + 1, MPI_DOUBLE, dest, tag, in,
                     source == MPI_PROC_NULL ? 0 : (int)nrecv + 1, MPI_DOUBLE, source, tag, comm,
                     MPI_STATUS_IGNORE) != MPI_SUCCESS)
        s = AD_ECOMM;
    op.recv_on = in[nrecv] != 0.0;
    if (s == AD_OK)
        ad__mpi_record(&op, op.send_on || op.recv_on, nsend, send, nrecv, recv, in);
    free(out);
    return s == AD_OK ? s : ad__mpi_fail(s, recv, nrecv);
}

/* out[i] = the sum over the ranks of comm of their in[i], i < count, on
 * every rank, added in rank order (the same bits everywhere).  in and out
 * may be the same buffer. */
AD_NODISCARD static inline ad_status ad_mpi_allreduce_sum(const ad_real *in, ad_real *out,
                                                          size_t count, MPI_Comm comm)
{
    ad__mpi_op op;
    memset(&op, 0, sizeof op);
    if (comm == MPI_COMM_NULL || (count && (!in || !out)) || count >= (size_t)INT_MAX)
        return ad__mpi_fail(AD_EINVAL, out, count);
    if (MPI_Comm_rank(comm, &op.rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &op.ranks) != MPI_SUCCESS)
        return ad__mpi_fail(AD_ECOMM, out, count);
    size_t w = count + 1;
    double *all = ad__mpi_doubles(w * ((size_t)op.ranks + 1) + count), *mine = all;
    ad_real *args = (ad_real *)malloc((count ? count : 1) * sizeof *args);
    if (!all || !args) {
        free(all);
        free(args);
        return ad__mpi_fail(AD_ENOMEM, out, count);
    }
    double *every = mine + w, *sum = every + w * (size_t)op.ranks;
    for (size_t i = 0; i < count; i++) {
        mine[i] = in[i].v;
        args[i] = in[i];  /* in may be out */
    }
    mine[count] = ad__mpi_active(in, count);
    ad_status s = AD_OK;
    if (MPI_Allgather(mine, (int)w, MPI_DOUBLE, every, (int)w, MPI_DOUBLE, comm) != MPI_SUCCESS)
        s = AD_ECOMM;
    int active = 0;
    if (s == AD_OK)
        ad__mpi_add_ranks(every, w, op.ranks, count, sum);
    for (int r = 0; r < op.ranks && s == AD_OK; r++)
        active |= every[(size_t)r * w + count] != 0.0;
    op.comm = comm;
    op.kind = AD__MPI_ALLREDUCE;
    if (s == AD_OK)
        ad__mpi_record(&op, active, count, args, count, out, sum);
    free(all);
    free(args);
    return s == AD_OK ? s : ad__mpi_fail(s, out, count);
}

/* buf[0..count) of rank root to every rank of comm, as MPI_Bcast: on the
 * root buf is read and left as it was (its values then depend on
 * themselves, so the cotangents of every rank's copy add up there). */
AD_NODISCARD static inline ad_status ad_mpi_bcast(ad_real *buf, size_t count, int root,
                                                  MPI_Comm comm)
{
    ad__mpi_op op;
    memset(&op, 0, sizeof op);
    if (comm == MPI_COMM_NULL || (count && !buf) || count >= (size_t)INT_MAX)
        return ad__mpi_fail(AD_EINVAL, buf, count);
    if (MPI_Comm_rank(comm, &op.rank) != MPI_SUCCESS ||
        MPI_Comm_size(comm, &op.ranks) != MPI_SUCCESS)
        return ad__mpi_fail(AD_ECOMM, buf, count);
    if (root < 0 || root >= op.ranks)
        return ad__mpi_fail(AD_EINVAL, buf, count);
    double *vals = ad__mpi_doubles(count + 1);
    ad_real *args = (ad_real *)malloc((count ? count : 1) * sizeof *args);
    if (!vals || !args) {
        free(vals);
        free(args);
        return ad__mpi_fail(AD_ENOMEM, buf, count);
    }
    int is_root = op.rank == root;
    for (size_t i = 0; i < count; i++) {
        vals[i] = buf[i].v;
        args[i] = buf[i];
    }
    vals[count] = is_root ? ad__mpi_active(buf, count) : 0.0;
    ad_status s = AD_OK;
    if (MPI_Bcast(vals, (int)count + 1, MPI_DOUBLE, root, comm) != MPI_SUCCESS)
        s = AD_ECOMM;
    op.comm = comm;
    op.kind = AD__MPI_BCAST;
    op.root = root;
    if (s == AD_OK)
        ad__mpi_record(&op, vals[count] != 0.0, is_root ? count : 0, args, count, buf, vals);
    free(vals);
    free(args);
    return s == AD_OK ? s : ad__mpi_fail(s, buf, count);
}

/* ---- derivatives of SPMD programs that communicate ----
 *
 * Collective: every rank of comm calls the same driver with its own f's
 * share -- x, n and v are the rank's own (its slice of a field, say; n
 * may differ between ranks, and be 0) -- and f runs on every rank,
 * communicating through the operations above.  The thread's agreement
 * hook (ad_set_collective) is set for the call, so that a failure on one
 * rank (an error in f, memory) is every rank's, with the status of the
 * failing rank of lowest number, and nothing waits for a rank that
 * stopped; the results are then NaN everywhere.
 *
 * Seeding, once: the objective of ad_mpi_gradient and ad_mpi_hvp is one
 * number for the whole program, and f must return that same value on
 * every rank (after ad_mpi_allreduce_sum, or ad_mpi_bcast from the rank
 * that computed it).  Its cotangent enters on rank 0 alone, so that the
 * reductions' transposes give every rank the gradient of the one
 * objective with respect to its own x: seeding every rank would give
 * ranks times it.  A rank whose f returns a different value (its own
 * share, not the reduced sum -- the mistake) fails the call on every rank
 * with AD_EINVAL.  fx is that value on every rank.
 *
 * Supported inside f: every ad_ operation, ad_external, checkpointed
 * loops (their steps may communicate: each replay communicates again, on
 * every rank alike), nested derivatives that do not communicate.  Not
 * collective: sparse Hessians and Jacobians, programs, ad_hvps (their
 * sweeps' number depends on each rank's structure).  The sweeps of a
 * collective recording are made once and in full (no second pass for
 * results that are not finite) and the fault search of the checks does
 * not go into a loop's steps.  Only the calling thread calls MPI. */

/* (internal) A driver's call: the agreement hook's context too. */
typedef struct ad__mpi_call {
    MPI_Comm comm;
    ad_objective f;
    ad_function g;
    void *ctx;
    size_t m;
    int rank;
    ad_status pending;  /* a failure of the wrapper's own, for the next agreement */
} ad__mpi_call;

/* (internal) The agreement hook: the failure of lowest rank, or AD_OK. */
static inline ad_status ad__mpi_agree(void *ctx, ad_status local)
{
    ad__mpi_call *c = (ad__mpi_call *)ctx;
    if (local == AD_OK)
        local = c->pending;
    uint64_t key = ad__mpi_key((uint64_t)c->rank, local), first;
    if (MPI_Allreduce(&key, &first, 1, MPI_UINT64_T, MPI_MIN, c->comm) != MPI_SUCCESS)
        return AD_ECOMM;
    return first == UINT64_MAX ? AD_OK : (ad_status)(first & 0xff);
}

/* (internal) Ends f's recording with the closing identity (rank 0's
 * cotangent alone for an objective, seed_all 0; every output's for a
 * function): the last record on every rank, so every sweep takes every
 * record below it. */
static inline ad_status ad__mpi_close(ad__mpi_call *c, int seed_all, size_t n, const ad_real *x,
                                      size_t m, ad_real *y)
{
    ad__mpi_op op;
    memset(&op, 0, sizeof op);
    op.comm = c->comm;
    op.kind = AD__MPI_CLOSE;
    op.rank = c->rank;
    op.seed_all = seed_all;
    double *vals = ad__mpi_doubles(m);
    if (!vals)
        return ad__mpi_fail(AD_ENOMEM, y, m);
    for (size_t j = 0; j < m; j++)
        vals[j] = j < n ? x[j].v : 0.0;
    ad__mpi_record(&op, 1, n, x, m, y, vals);
    free(vals);
    return AD_OK;
}

static inline ad_real ad__mpi_objective(const ad_real *x, size_t n, void *ctx)
{
    ad__mpi_call *c = (ad__mpi_call *)ctx;
    ad_real y = c->f(x, n, c->ctx), out;
    uint64_t bits, mine[2], most[2];
    memcpy(&bits, &y.v, sizeof bits);
    mine[0] = bits;
    mine[1] = ~bits;
    if (MPI_Allreduce(mine, most, 2, MPI_UINT64_T, MPI_MAX, c->comm) != MPI_SUCCESS)
        c->pending = AD_ECOMM;
    else if (most[0] != ~most[1] && c->pending == AD_OK)
        c->pending = AD_EINVAL;  /* not the same objective on every rank */
    if (ad__mpi_close(c, 0, 1, &y, 1, &out) != AD_OK && c->pending == AD_OK)
        c->pending = AD_ENOMEM;
    return out;
}

static inline void ad__mpi_function(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    ad__mpi_call *c = (ad__mpi_call *)ctx;
    c->g(x, n, y, c->m, c->ctx);
    if (ad__mpi_close(c, 1, c->m, y, m, y) != AD_OK && c->pending == AD_OK)
        c->pending = AD_ENOMEM;
}

/* (internal) A call's start: the rank, and the ranks' agreement on the
 * arguments (local: AD_EINVAL if this rank's are not usable). */
static inline ad_status ad__mpi_begin(ad__mpi_call *c, MPI_Comm comm, ad_status local)
{
    memset(c, 0, sizeof *c);
    if (comm == MPI_COMM_NULL)
        return AD_EINVAL;
    c->comm = comm;
    if (MPI_Comm_rank(comm, &c->rank) != MPI_SUCCESS)
        return AD_ECOMM;
    return ad__mpi_agree(c, local);
}

/* (internal) A call's end: the hook put back, and the ranks' agreement on
 * the outcome (a failure inside a sweep, whose rules cannot stop it). */
static inline ad_status ad__mpi_end(ad__mpi_call *c, ad_collective was, ad_status s)
{
    ad_set_collective(&was);
    return ad__mpi_agree(c, s);
}

static inline void ad__mpi_nan(double *p, size_t count)
{
    for (size_t i = 0; p && i < count; i++)
        p[i] = NAN;
}

/* The objective's value (the same on every rank) and its gradient with
 * respect to this rank's x[0..n), on every rank of comm (collective). */
AD_NODISCARD static inline ad_status ad_mpi_gradient(MPI_Comm comm, ad_objective f, void *ctx,
                                                     size_t n, const double *x, double *fx,
                                                     double *grad)
{
    ad__mpi_call c;
    int bad = !f || !fx || (n && (!x || !grad));
    ad_status s = ad__mpi_begin(&c, comm, bad ? AD_EINVAL : AD_OK);
    if (s == AD_OK) {
        c.f = f;
        c.ctx = ctx;
        ad_collective hook = {ad__mpi_agree, &c};
        ad_collective was = ad_set_collective(&hook);
        s = ad__mpi_end(&c, was, ad_gradient(ad__mpi_objective, &c, n, x, fx, grad));
    }
    if (s != AD_OK) {
        ad__mpi_nan(fx, 1);
        ad__mpi_nan(grad, n);
    }
    return s;
}

/* The same, and H v along this rank's share v[0..n) of the direction:
 * hv is this rank's share of H v. */
AD_NODISCARD static inline ad_status ad_mpi_hvp(MPI_Comm comm, ad_objective f, void *ctx, size_t n,
                                                const double *x, const double *v, double *fx,
                                                double *grad, double *hv)
{
    ad__mpi_call c;
    int bad = !f || !fx || (n && (!x || !v || !grad || !hv));
    ad_status s = ad__mpi_begin(&c, comm, bad ? AD_EINVAL : AD_OK);
    if (s == AD_OK) {
        c.f = f;
        c.ctx = ctx;
        ad_collective hook = {ad__mpi_agree, &c};
        ad_collective was = ad_set_collective(&hook);
        s = ad__mpi_end(&c, was, ad_hvp(ad__mpi_objective, &c, n, x, v, fx, grad, hv));
    }
    if (s != AD_OK) {
        ad__mpi_nan(fx, 1);
        ad__mpi_nan(grad, n);
        ad__mpi_nan(hv, n);
    }
    return s;
}

/* y = f(x) and jv = J v, each rank its own outputs y[0..m) and their
 * tangents along the ranks' shares of v (collective; no seeding: a
 * forward sweep). */
AD_NODISCARD static inline ad_status ad_mpi_jvp(MPI_Comm comm, ad_function f, void *ctx, size_t n,
                                                const double *x, const double *v, size_t m,
                                                double *y, double *jv)
{
    ad__mpi_call c;
    double *buf = NULL;
    ad_status s = AD_OK;
    if (!f || (n && (!x || !v)) || (m && (!y || !jv)) || m >= SIZE_MAX / 4)
        s = AD_EINVAL;
    else if (!(buf = ad__mpi_doubles(2 * (m + 1))))
        s = AD_ENOMEM;
    s = ad__mpi_begin(&c, comm, s);
    if (s == AD_OK) {
        c.g = f;
        c.ctx = ctx;
        c.m = m;
        ad_collective hook = {ad__mpi_agree, &c};
        ad_collective was = ad_set_collective(&hook);
        /* one output more, the closing record's, so that none is empty */
        s = ad__mpi_end(&c, was, ad_jvp(ad__mpi_function, &c, n, x, v, m + 1, buf, buf + m + 1));
        if (s == AD_OK && m) {
            memcpy(y, buf, m * sizeof *y);
            memcpy(jv, buf + m + 1, m * sizeof *jv);
        }
    }
    free(buf);
    if (s != AD_OK) {
        ad__mpi_nan(y, m);
        ad__mpi_nan(jv, m);
    }
    return s;
}

/* ---- optimiser bridges over MPI ranks ----
 *
 *   MPI_Comm comm = MPI_COMM_WORLD;
 *   ad_lbfgs b = ad_lbfgs_of_sum(term, ctx, nterms, threads);
 *   b.evaluator = ad_mpi_sum_evaluator(&comm);
 *   s = ad_lbfgs_minimize(n, x, &fx, &b, &param, &ret);     on every rank
 *
 * An evaluator (dualrev/bridge.h) for the sum bridges (ad_lbfgs_of_sum,
 * ad_gsl_init_sum, ad_nlopt_init_sum, ad_ipopt_init_sum): each evaluation
 * is one ad_mpi_gradient_sum (ad_mpi_hvp_sum) on *comm, with the bridge's
 * term, ctx, nterms and threads.  Every rank of comm constructs the same
 * bridge with the same arguments, sets its evaluator so, and runs the same
 * optimiser from the same x with the same options: each evaluation gives
 * every rank the same bits (ad_gradient_sum's in one process), so the
 * optimisers take the same steps and ask for the same points, and the
 * ranks stay in lockstep, each evaluation one collective call on comm;
 * they end with the same x, objective and status, the same as one
 * process's run without the evaluator.  A failing term fails the
 * evaluation on every rank with the same status, and every bridge stops
 * at the same point.  Lockstep needs the optimiser to be deterministic:
 * no time limits, no random numbers unless seeded alike, and a progress
 * hook that answers alike on every rank.  A rank whose optimiser asks for
 * another x meets AD_EINVAL on every rank (ad_mpi_gradient_sum compares
 * the x's); one that stops asking leaves the others waiting.
 *
 * comm is read at each evaluation: *comm must stay valid, and unchanged,
 * while the bridge is used.  comm NULL gives AD_EINVAL at each evaluation,
 * without communication (as MPI_COMM_NULL does). */

/* (internal) The evaluator's functions; ctx is the MPI_Comm *. */
AD_NODISCARD static inline ad_status ad__mpi_eval_gradient(void *ctx, ad_term term, void *tctx,
                                                           size_t nterms, size_t n,
                                                           const double *x, double *fx,
                                                           double *grad, unsigned threads)
{
    MPI_Comm comm = ctx ? *(MPI_Comm *)ctx : MPI_COMM_NULL;
    return ad_mpi_gradient_sum(comm, term, tctx, nterms, n, x, fx, grad, threads);
}

AD_NODISCARD static inline ad_status ad__mpi_eval_hvp(void *ctx, ad_term term, void *tctx,
                                                      size_t nterms, size_t n, const double *x,
                                                      const double *v, double *fx, double *grad,
                                                      double *hv, unsigned threads)
{
    MPI_Comm comm = ctx ? *(MPI_Comm *)ctx : MPI_COMM_NULL;
    return ad_mpi_hvp_sum(comm, term, tctx, nterms, n, x, v, fx, grad, hv, threads);
}

/* The evaluator of sums over the ranks of *comm (above): set a sum
 * bridge's evaluator field to it after the bridge's constructor. */
static inline ad_sum_evaluator ad_mpi_sum_evaluator(MPI_Comm *comm)
{
    ad_sum_evaluator e;
    e.gradient = ad__mpi_eval_gradient;
    e.hvp = ad__mpi_eval_hvp;
    e.ctx = comm;
    return e;
}

AD__EXTERN_C_END

#endif /* DUALREV_MPI_H */
