/* dualrev: matrix-matrix products C = A B + bias 1^T (ad_mat_mul_*,
 * include/dualrev/matrix.h).
 *
 * One block whose m n outputs are C's entries (a derived matrix,
 * mat_block.h): handles of it go on into ad_mat_vec, ad_mat_mul and
 * ad_mat_map.  It keeps C's values, a constant operand's values, and the
 * IDs it must list; an operand on the tape is read from its own block.
 * Arguments, in order: B's entries (listed, when both operands are on the
 * tape), the bias (listed, when active), then the run of A's entries (or
 * B's, when A is constant).  Its rules are the bilinear ones, as whole
 * matrix products:
 *   reverse  Abar += Cbar B^T, Bbar += A^T Cbar, bbar += Cbar 1
 *   forward  Cdot = Adot B + A Bdot + bdot 1^T
 *   second   the tangents of the reverse: Abar' += Cbar' B^T + Cbar Bdot^T,
 *            Bbar' += A^T Cbar' + Adot^T Cbar, bbar' += Cbar' 1
 *   edges    dC_ij/dA_il = B_lj, dC_ij/dB_lj = A_il, dC_ij/db_i = 1,
 *            d2C_ij/dA_il dB_lj = 1. */
#include <math.h>
#include <string.h>

#include "alloc.h"
#include "check.h"
#include "mat_block.h"
#include "seeded.h"
#include "status.h"

#define NONE SIZE_MAX

/* After C's values (mat_block.h, ad_mat_block_tail). */
typedef struct mul {
    size_t m, n, k;     /* C is m x n */
    size_t amat, bmat;  /* offsets of A's and B's blocks when on the tape, else NONE */
    uint32_t a0, b0;    /* their first entries' IDs (0 when constant) */
    size_t aconst, bconst; /* byte offsets of a constant operand's values kept here */
    size_t xa, xb, xbias;  /* argument index of A(0, 0), B(0, 0), bias[0]; NONE if absent */
    /* then: a constant operand's values; uint32_t ids[nargs] */
} mul;

static const mul *info(const ad_block *b)
{
    const ad_matrix_block *B = (const ad_matrix_block *)b;
    return (const mul *)(const void *)((const char *)b + ad_mat_block_tail(B->rows, B->cols));
}

static const char *block_of(const mul *p)
{
    return (const char *)p - ad_mat_block_tail(p->m, p->n);
}

static const double *a_values(const ad_tape *t, const mul *p)
{
    if (p->amat != NONE)
        return ad_mat_block_values((const ad_matrix_block *)ad_block_at(t, p->amat));
    return (const double *)(const void *)(block_of(p) + p->aconst);
}

static const double *b_values(const ad_tape *t, const mul *p)
{
    if (p->bmat != NONE)
        return ad_mat_block_values((const ad_matrix_block *)ad_block_at(t, p->bmat));
    return (const double *)(const void *)(block_of(p) + p->bconst);
}

static const uint32_t *bias_ids(const mul *p)
{
    return ad_block_ids((const ad_block *)(const void *)block_of(p)) + p->xbias;
}

/* ---- kernels: each entry adds its terms in the order of l (or of the
 * summed index), whatever the loops' blocking, so results do not depend
 * on it ---- */

/* C (+)= A B, A m x k, B k x n; with zero, C starts from +0. */
static void mul_nn(size_t m, size_t k, size_t n, const double *restrict A,
                   const double *restrict B, double *restrict C, int zero)
{
    for (size_t i = 0; i < m; i++) {
        double *restrict c = C + i * n;
        const double *a = A + i * k;
        if (zero)
            memset(c, 0, n * sizeof *c);
        size_t l = 0;
        for (; l + 4 <= k; l += 4) {
            const double *b0 = B + l * n, *b1 = b0 + n, *b2 = b1 + n, *b3 = b2 + n;
            double a0 = a[l], a1 = a[l + 1], a2 = a[l + 2], a3 = a[l + 3];
            for (size_t j = 0; j < n; j++)
                c[j] = c[j] + a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
        }
        for (; l < k; l++) {
            const double *b0 = B + l * n;
            double a0 = a[l];
            for (size_t j = 0; j < n; j++)
                c[j] += a0 * b0[j];
        }
    }
}

/* Z += X Y^T: X m x n, Y k x n, Z m x k; T (n x k) is scratch for Y^T. */
static void mul_nt(size_t m, size_t n, size_t k, const double *restrict X,
                   const double *restrict Y, double *restrict Z, double *restrict T)
{
    for (size_t l = 0; l < k; l++)
        for (size_t j = 0; j < n; j++)
            T[j * k + l] = Y[l * n + j];
    mul_nn(m, n, k, X, T, Z, 0);
}

/* Z += P^T X: P m x k, X m x n, Z k x n. */
static void mul_tn(size_t m, size_t k, size_t n, const double *restrict P,
                   const double *restrict X, double *restrict Z)
{
    size_t i = 0;
    for (; i + 4 <= m; i += 4) {
        const double *x0 = X + i * n, *x1 = x0 + n, *x2 = x1 + n, *x3 = x2 + n;
        for (size_t l = 0; l < k; l++) {
            double p0 = P[i * k + l], p1 = P[(i + 1) * k + l], p2 = P[(i + 2) * k + l],
                   p3 = P[(i + 3) * k + l];
            double *restrict z = Z + l * n;
            for (size_t j = 0; j < n; j++)
                z[j] = z[j] + p0 * x0[j] + p1 * x1[j] + p2 * x2[j] + p3 * x3[j];
        }
    }
    for (; i < m; i++)
        for (size_t l = 0; l < k; l++) {
            double p0 = P[i * k + l];
            double *restrict z = Z + l * n;
            const double *x0 = X + i * n;
            for (size_t j = 0; j < n; j++)
                z[j] += p0 * x0[j];
        }
}

/* ---- rules ---- */

/* v[q] = src[(id0 + q) L + lane], q < count */
static void gather(double *v, const double *src, size_t id0, size_t count, size_t L, size_t lane)
{
    for (size_t q = 0; q < count; q++)
        v[q] = src[(id0 + q) * L + lane];
}

static void scatter_add(double *dst, const double *v, size_t id0, size_t count, size_t L,
                        size_t lane)
{
    for (size_t q = 0; q < count; q++)
        dst[(id0 + q) * L + lane] += v[q];
}

/* xbar over the arguments in order, from ybar (C's cotangents); w is
 * scratch of k n.  The compact form of the reverse rule. */
static void pull(const ad_tape *t, const mul *p, const double *ybar, double *abar,
                 double *bbar, double *biasbar, double *w)
{
    size_t m = p->m, n = p->n, k = p->k;
    if (abar)
        mul_nt(m, n, k, ybar, b_values(t, p), abar, w);
    if (bbar)
        mul_tn(m, k, n, a_values(t, p), ybar, bbar);
    for (size_t i = 0; biasbar && i < m; i++) {
        double s = 0.0;
        for (size_t j = 0; j < n; j++)
            s += ybar[i * n + j];
        biasbar[i] += s;
    }
}

static void mul_vjp(ad_tape *t, ad_block *b, const double *ybar, double *xbar)
{
    const mul *p = info(b);
    double *w = ad_block_work(t) + b->nout + b->nargs + b->run_len;
    pull(t, p, ybar, p->xa != NONE ? xbar + p->xa : NULL, p->xb != NONE ? xbar + p->xb : NULL,
         p->xbias != NONE ? xbar + p->xbias : NULL, w);
}

static void mul_reverse(ad_tape *t, ad_block *b, uint32_t hid, double *adj, size_t L, size_t lane)
{
    const mul *p = info(b);
    size_t m = p->m, n = p->n, k = p->k, mn = m * n;
    ad_mat_flush(t, (const ad_matrix_block *)b, hid, adj, L, lane);
    double *w = ad_block_work(t), *cb = w, *abar = cb + mn, *bbar = abar + m * k,
           *biasbar = bbar + k * n, *scratch = biasbar + m;
    gather(cb, adj, (size_t)hid + 1, mn, L, lane);
    if (p->xa != NONE)
        memset(abar, 0, m * k * sizeof *abar);
    if (p->xb != NONE)
        memset(bbar, 0, k * n * sizeof *bbar);
    if (p->xbias != NONE)
        memset(biasbar, 0, m * sizeof *biasbar);
    pull(t, p, cb, p->xa != NONE ? abar : NULL, p->xb != NONE ? bbar : NULL,
         p->xbias != NONE ? biasbar : NULL, scratch);
    if (p->xa != NONE)
        scatter_add(adj, abar, p->a0, m * k, L, lane);
    if (p->xb != NONE)
        scatter_add(adj, bbar, p->b0, k * n, L, lane);
    for (size_t i = 0; p->xbias != NONE && i < m; i++)
        adj[(size_t)bias_ids(p)[i] * L + lane] += biasbar[i];
}

/* Entry (i, j) of Cdot again without the terms whose tangent is zero by
 * structure (a constant's, or in an exact sweep one not reached): only
 * when the plain sum is NaN, as matrix.c's row_tangent does. */
static double tangent_again(const ad_tape *t, const mul *p, const double *A, const double *B,
                            const double *adot, const double *bdot, const double *biasdot,
                            size_t i, size_t j)
{
    size_t n = p->n, k = p->k;
    double s = 0.0;
    for (size_t l = 0; p->xa != NONE && l < k; l++)
        if (!ad_tangent_zero(t, p->a0 + (uint32_t)(i * k + l)))
            s += adot[i * k + l] * B[l * n + j];
    for (size_t l = 0; p->xb != NONE && l < k; l++)
        if (!ad_tangent_zero(t, p->b0 + (uint32_t)(l * n + j)))
            s += A[i * k + l] * bdot[l * n + j];
    if (p->xbias != NONE && !ad_tangent_zero(t, bias_ids(p)[i]))
        s += biasdot[i];
    return s;
}

static void mul_forward(ad_tape *t, ad_block *b, uint32_t hid, double *tan, size_t L, size_t lane)
{
    const mul *p = info(b);
    size_t m = p->m, n = p->n, k = p->k, mn = m * n;
    const double *A = a_values(t, p), *B = b_values(t, p);
    double *w = ad_block_work(t), *cd = w, *adot = cd + mn, *bdot = adot + m * k,
           *biasdot = bdot + k * n;
    memset(cd, 0, mn * sizeof *cd);
    if (p->xa != NONE) {
        gather(adot, tan, p->a0, m * k, L, lane);
        mul_nn(m, k, n, adot, B, cd, 0);
    }
    if (p->xb != NONE) {
        gather(bdot, tan, p->b0, k * n, L, lane);
        mul_nn(m, k, n, A, bdot, cd, 0);
    }
    for (size_t i = 0; p->xbias != NONE && i < m; i++) {
        uint32_t id = bias_ids(p)[i];
        biasdot[i] = id ? tan[(size_t)id * L + lane] : 0.0;
        for (size_t j = 0; j < n; j++)
            cd[i * n + j] += biasdot[i];
    }
    for (size_t q = 0; q < mn; q++) {
        double v = cd[q];
        if (AD__UNLIKELY(v != v))
            v = tangent_again(t, p, A, B, adot, bdot, biasdot, q / n, q % n);
        tan[((size_t)hid + 1 + q) * L + lane] = v;
    }
}

static void mul_second(ad_tape *t, ad_block *b, uint32_t hid, const double *tan, double *adj,
                       double *adjd, size_t L, size_t lane, int first)
{
    const mul *p = info(b);
    size_t m = p->m, n = p->n, k = p->k, mn = m * n;
    const double *A = a_values(t, p), *B = b_values(t, p);
    double *w = ad_block_work(t), *cb = w, *cbd = cb + mn, *adot = cbd + mn,
           *bdot = adot + m * k, *abar = bdot + k * n, *bbar = abar + m * k,
           *scratch = bbar + k * n;
    gather(cb, adj, (size_t)hid + 1, mn, 1, 0);
    gather(cbd, adjd, (size_t)hid + 1, mn, L, lane);
    if (p->xa != NONE)
        gather(adot, tan, p->a0, m * k, L, lane);
    if (p->xb != NONE)
        gather(bdot, tan, p->b0, k * n, L, lane);
    if (p->xa != NONE) {
        if (first) {
            memset(abar, 0, m * k * sizeof *abar);
            mul_nt(m, n, k, cb, B, abar, scratch);
            scatter_add(adj, abar, p->a0, m * k, 1, 0);
        }
        memset(abar, 0, m * k * sizeof *abar);
        mul_nt(m, n, k, cbd, B, abar, scratch);
        if (p->xb != NONE)
            mul_nt(m, n, k, cb, bdot, abar, scratch);
        scatter_add(adjd, abar, p->a0, m * k, L, lane);
    }
    if (p->xb != NONE) {
        if (first) {
            memset(bbar, 0, k * n * sizeof *bbar);
            mul_tn(m, k, n, A, cb, bbar);
            scatter_add(adj, bbar, p->b0, k * n, 1, 0);
        }
        memset(bbar, 0, k * n * sizeof *bbar);
        mul_tn(m, k, n, A, cbd, bbar);
        if (p->xa != NONE)
            mul_tn(m, k, n, adot, cb, bbar);
        scatter_add(adjd, bbar, p->b0, k * n, L, lane);
    }
    for (size_t i = 0; p->xbias != NONE && i < m; i++) {
        double s = 0.0, sd = 0.0;
        for (size_t j = 0; j < n; j++) {
            s += cb[i * n + j];
            sd += cbd[i * n + j];
        }
        size_t id = bias_ids(p)[i];
        if (first)
            adj[id] += s;
        adjd[id * L + lane] += sd;
    }
}

/* Output (i, j) depends on row i of A, column j of B and bias i. */
static void mul_reach(const ad_block *b, const unsigned char *outs, unsigned char *args)
{
    const mul *p = info(b);
    size_t m = p->m, n = p->n, k = p->k;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            if (!outs[i * n + j])
                continue;
            for (size_t l = 0; p->xa != NONE && l < k; l++)
                args[p->xa + i * k + l] = 1;
            for (size_t l = 0; p->xb != NONE && l < k; l++)
                args[p->xb + l * n + j] = 1;
            if (p->xbias != NONE)
                args[p->xbias + i] = 1;
        }
}

static void mul_partials(ad_tape *t, ad_block *b, uint32_t o,
                         void (*each)(void *cx, size_t arg, double d), void *cx)
{
    const mul *p = info(b);
    size_t n = p->n, k = p->k, i = o / n, j = o % n;
    const double *A = a_values(t, p), *B = b_values(t, p);
    if (p->xb != NONE)
        for (size_t l = 0; l < k; l++)
            each(cx, p->xb + l * n + j, A[i * k + l]);
    if (p->xbias != NONE)
        each(cx, p->xbias + i, 1.0);
    if (p->xa != NONE)
        for (size_t l = 0; l < k; l++)
            each(cx, p->xa + i * k + l, B[l * n + j]);
}

static void mul_curvature(ad_tape *t, ad_block *b, const double *ybar,
                          void (*each2)(void *cx, size_t a, size_t b, double v), void *cx)
{
    (void)t;
    const mul *p = info(b);
    size_t m = p->m, n = p->n, k = p->k;
    if (p->xa == NONE || p->xb == NONE)
        return;  /* linear */
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++)
            for (size_t l = 0; l < k; l++) {
                size_t ia = p->xa + i * k + l, ib = p->xb + l * n + j;
                each2(cx, ia < ib ? ia : ib, ia < ib ? ib : ia, ybar[i * n + j]);
            }
}

static const ad_block_kind mul_kind = {
    .name = "matrix product", .vjp = mul_vjp, .reverse = mul_reverse, .forward = mul_forward,
    .second = mul_second, .reach = mul_reach, .partials = mul_partials,
    .curvature = mul_curvature};

/* ---- recording ---- */

/* M's values row-major: a wrapped matrix's own, else copied into *tmp
 * (freed by the caller); NULL if out of memory. */
static const double *values_of(const ad_mat *M, double **tmp)
{
    static const double none = 0.0;  /* no entries: never read */
    *tmp = NULL;
    if (M->a || !M->rows || !M->cols)
        return M->a ? M->a : &none;
    size_t mn = M->rows * M->cols;
    *tmp = ad_alloc(mn * sizeof **tmp);
    if (!*tmp)
        return NULL;
    for (size_t q = 0; q < mn; q++)
        (*tmp)[q] = ad_mat_entry(M, q);
    return *tmp;
}

/* out[] = A B + bias on values, no record. */
static ad_status plain(const ad_mat *A, const ad_mat *B, const ad_real *br, const double *bd,
                       double *C)
{
    size_t m = A->rows, k = A->cols, n = B->cols;
    double *ta, *tb;
    const double *a = values_of(A, &ta), *b = values_of(B, &tb);
    ad_status s = AD_OK;
    if (!a || !b)
        s = AD_ENOMEM;
    else {
        mul_nn(m, k, n, a, b, C, 1);
        for (size_t i = 0; (br || bd) && i < m; i++) {
            double bi = br ? br[i].v : bd[i];
            for (size_t j = 0; j < n; j++)
                C[i * n + j] += bi;
        }
    }
    ad_free(ta);
    ad_free(tb);
    return s;
}

/* Bytes of work the rules use (second's is the most), with room for the
 * compact pullback's arrays before it. */
static int work_fits(size_t m, size_t k, size_t n, size_t *work)
{
    if (!ad_size_fits(m, n) || !ad_size_fits(m, k) || !ad_size_fits(k, n))
        return 0;
    size_t mn = m * n, mk = m * k, kn = k * n, lim = SIZE_MAX / 16;
    if (mn > lim / 4 || mk > lim / 4 || kn > lim / 8 || m > lim / 4)
        return 0;
    *work = 2 * mn + 3 * mk + 4 * kn + 2 * m + 1;
    return 1;
}

static ad_status record(ad_tape *t, const ad_mat *A, const ad_matrix_block *BA,
                        const ad_mat *B, const ad_matrix_block *BB, const ad_real *br,
                        const double *bd, int bias_on, ad_real *out, ad_mat *C)
{
    size_t m = A->rows, k = A->cols, n = B->cols, mn = m * n, work;
    if (!work_fits(m, k, n, &work) || mn >= AD__ID_END)
        return ad_fail_recording(AD_ERANGE);
    size_t mk = m * k, kn = k * n;
    int a_on = BA != NULL, b_on = BB != NULL;
    size_t nlisted = (a_on && b_on ? kn : 0) + (bias_on ? m : 0);
    size_t run_len = a_on ? mk : b_on ? kn : 0;
    if (nlisted >= AD__ID_END || run_len >= AD__ID_END)
        return ad_fail_recording(AD_ERANGE);
    size_t tail = ad_mat_block_tail(m, n), consts = tail + sizeof(mul);
    size_t na = a_on ? 0 : mk, nb = b_on ? 0 : kn;
    size_t ids = consts + (na + nb) * sizeof(double);
    size_t size = ids + nlisted * sizeof(uint32_t);
    size_t at = ad_block_new(t, size, (uint32_t)mn, (uint32_t)nlisted, (uint32_t)run_len);
    if (at == SIZE_MAX || !ad_block_reserve(t, work))
        return t->status != AD_OK ? t->status : AD_ENOMEM;
    size_t amat = a_on ? A->at : NONE, bmat = b_on ? B->at : NONE;
    ad_matrix_block *blk = (ad_matrix_block *)ad_block_at(t, at);
    ad_mat_block_init(blk, m, n);
    blk->base.kind = &mul_kind;
    blk->base.ids = ids;
    blk->base.run = a_on ? A->id : b_on ? B->id : 0;
    mul *p = (mul *)(void *)((char *)blk + tail);
    p->m = m;
    p->n = n;
    p->k = k;
    p->amat = amat;
    p->bmat = bmat;
    p->a0 = a_on ? A->id : 0;
    p->b0 = b_on ? B->id : 0;
    p->aconst = consts;
    p->bconst = consts + na * sizeof(double);
    p->xb = a_on && b_on ? 0 : (!a_on && b_on ? nlisted : NONE);
    p->xbias = bias_on ? (a_on && b_on ? kn : 0) : NONE;
    p->xa = a_on ? nlisted : NONE;
    double *cv = (double *)(void *)(blk + 1), *kv = (double *)(void *)((char *)blk + consts);
    uint32_t *lid = (uint32_t *)(void *)((char *)blk + ids);
    for (size_t q = 0; q < na; q++)
        kv[q] = ad_mat_entry(A, q);
    for (size_t q = 0; q < nb; q++)
        kv[na + q] = ad_mat_entry(B, q);
    if (a_on && b_on)
        for (size_t q = 0; q < kn; q++)
            lid[q] = B->id + (uint32_t)q;
    for (size_t i = 0; bias_on && i < m; i++)
        lid[p->xbias + i] = br[i].id;
    mul_nn(m, k, n, a_values(t, p), b_values(t, p), cv, 1);
    for (size_t i = 0; (br || bd) && i < m; i++) {
        double bi = br ? br[i].v : bd[i];
        for (size_t j = 0; j < n; j++)
            cv[i * n + j] += bi;
    }
    uint32_t first = ad_block_record(t, at);
    if (!first)
        return t->status;
    blk = (ad_matrix_block *)ad_block_at(t, at);
    p = (mul *)(void *)((char *)blk + tail);
    cv = (double *)(void *)(blk + 1);
    blk->first = first;
    if (t->checks) {
        /* a non-finite entry from finite operands names the product */
        int finite = 1;
        const double *av = a_values(t, p), *bv = b_values(t, p);
        for (size_t q = 0; q < mk; q++)
            finite &= isfinite(av[q]) != 0;
        for (size_t q = 0; q < kn; q++)
            finite &= isfinite(bv[q]) != 0;
        for (size_t i = 0; (br || bd) && i < m; i++)
            finite &= isfinite(br ? br[i].v : bd[i]) != 0;
        double x = finite ? 0.0 : NAN;
        if (!ad_check_block(t, mul_kind.name, 1, &x, mn, cv, first))
            return t->status;
    }
    for (size_t q = 0; q < mn; q++)
        out[q] = ad__made(cv[q], first + (uint32_t)q);
    ad_mat_result(t, at, first, m, n, out, C);
    return AD_OK;
}

/* The operand's block when it is on the tape t; *foreign when it is a
 * handle of another recording. */
static const ad_matrix_block *on_tape(const ad_tape *t, const ad_mat *M, int *foreign)
{
    if (!t || !M->id)
        return NULL;
    const ad_matrix_block *B = ad_mat_block_of(t, M);
    if (!B)
        *foreign = 1;
    return B;
}

static ad_status fail_nan(ad_status s, size_t m, size_t n, ad_real *out, ad_mat *C)
{
    ad_fail_recording(s);
    if (out)
        ad_fill_nan_reals(out, m * n);
    if (C)
        ad_mat_constant(m, n, out, C);
    return s;
}

static ad_status mul_of(const ad_mat *A, const ad_mat *B, const ad_real *br, const double *bd,
                        ad_real *out, ad_mat *C)
{
    if (!A || !B || !C || A->cols != B->rows || !ad_size_fits(A->rows, B->cols) ||
        (A->rows && B->cols && !out))
        return fail_nan(AD_EINVAL, A && B ? A->rows : 0, A && B ? B->cols : 0,
                        A && B && ad_size_fits(A->rows, B->cols) ? out : NULL, C);
    size_t m = A->rows, n = B->cols, mn = m * n;
    ad_tape *t = ad_recording();
    int foreign = 0;
    const ad_matrix_block *BA = on_tape(t, A, &foreign), *BB = on_tape(t, B, &foreign);
    if (foreign)
        return fail_nan(AD_EFOREIGN, m, n, out, C);
    int bias_on = br && t && ad_any_active(m, br);
    if (bias_on && !ad_reals_mine(t, m, br))
        return fail_nan(t->status != AD_OK ? t->status : AD_EFOREIGN, m, n, out, C);
    if (!mn) {
        ad_mat_constant(m, n, out, C);
        return AD_OK;
    }
    if (BA || BB || bias_on) {
        ad_status s = record(t, A, BA, B, BB, br, bd, bias_on, out, C);
        return s == AD_OK ? s : fail_nan(s, m, n, out, C);
    }
    double *v = ad_alloc(mn * sizeof *v);
    ad_status s = v ? plain(A, B, br, bd, v) : AD_ENOMEM;
    if (s != AD_OK) {
        ad_free(v);
        return fail_nan(s, m, n, out, C);
    }
    for (size_t q = 0; q < mn; q++)
        out[q] = ad_const(v[q]);
    ad_free(v);
    ad_mat_constant(m, n, out, C);
    return AD_OK;
}

ad_status ad_mat_mul_rr(const ad_mat *A, const ad_mat *B, const ad_real *bias, ad_real *out,
                        ad_mat *C)
{
    return mul_of(A, B, bias, NULL, out, C);
}

ad_status ad_mat_mul_rd(const ad_mat *A, const ad_mat *B, const double *bias, ad_real *out,
                        ad_mat *C)
{
    return mul_of(A, B, NULL, bias, out, C);
}

ad_status ad_mat_mul_d(const ad_mat *A, const ad_mat *B, const double *bias, double *out,
                       ad_mat *C)
{
    size_t m = A && B ? A->rows : 0, n = A && B ? B->cols : 0;
    ad_status s = AD_OK;
    if (!A || !B || !C || A->cols != B->rows || !ad_size_fits(m, n) || (m && n && !out))
        s = AD_EINVAL;
    else if (m && n)
        s = plain(A, B, NULL, bias, out);
    if (s != AD_OK) {
        ad_fail_recording(s);
        for (size_t q = 0; out && ad_size_fits(m, n) && q < m * n; q++)
            out[q] = NAN;
    }
    if (C) {
        memset(C, 0, sizeof *C);
        C->rows = m;
        C->cols = n;
        C->a = out;
        C->shape = AD__FULL;
    }
    return s;
}
