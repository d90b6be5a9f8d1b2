/* ADBench bundle adjustment: see ba.h. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ba.h"

#define T double
#define NAME(id) id##_d
#include "ba_residual.h"

#define T ad_real
#define NAME(id) id##_ad
#include "ba_residual.h"

/* ---- loading ---- */

static int read_doubles(FILE *f, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (fscanf(f, "%lf", &out[i]) != 1)
            return -1;
    return 0;
}

/* Zeroed room for n groups of `a` items of `size` bytes (n, a > 0).  The
 * sizes come from the file, so n * a may overflow; calloc checks only the
 * final product. */
static void *alloc_array(size_t n, size_t a, size_t size)
{
    if (n > SIZE_MAX / a / size)
        return NULL;
    return calloc(n * a, size);
}

static int alloc_problem(ba_problem *p)
{
    p->cams = alloc_array(p->n_cams, BA_CAM, sizeof *p->cams);
    p->pts = alloc_array(p->n_pts, BA_PT, sizeof *p->pts);
    p->w = alloc_array(p->n_obs, 1, sizeof *p->w);
    p->feats = alloc_array(p->n_obs, 2, sizeof *p->feats);
    p->obs = alloc_array(p->n_obs, 2, sizeof *p->obs);
    return p->cams && p->pts && p->w && p->feats && p->obs ? 0 : -1;
}

/* Copies element 0 (width doubles) of a to the other count - 1 elements. */
static void replicate(double *a, size_t count, size_t width)
{
    for (size_t i = 1; i < count; i++)
        memcpy(a + i * width, a, width * sizeof *a);
}

/* The body of ba_load once the file is open: sizes, then the one camera,
 * point, weight and feature that the file holds, in that order.  Returns 0
 * or an errno value: EINVAL for a malformed file, ENOMEM. */
static int parse_problem(FILE *f, ba_problem *p)
{
    if (fscanf(f, "%zu %zu %zu", &p->n_cams, &p->n_pts, &p->n_obs) != 3
        || !p->n_cams || !p->n_pts || !p->n_obs)
        return EINVAL;
    if (alloc_problem(p))
        return ENOMEM;
    if (read_doubles(f, p->cams, BA_CAM) || read_doubles(f, p->pts, BA_PT)
        || read_doubles(f, p->w, 1) || read_doubles(f, p->feats, 2))
        return EINVAL;
    replicate(p->cams, p->n_cams, BA_CAM);
    replicate(p->pts, p->n_pts, BA_PT);
    replicate(p->w, p->n_obs, 1);
    replicate(p->feats, p->n_obs, 2);
    for (size_t i = 0; i < p->n_obs; i++) {
        p->obs[2 * i] = i % p->n_cams;
        p->obs[2 * i + 1] = i % p->n_pts;
    }
    return 0;
}

int ba_load(const char *path, ba_problem *p)
{
    memset(p, 0, sizeof *p);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int err = parse_problem(f, p);
    fclose(f);
    if (!err)
        return 0;
    ba_free(p);
    errno = err;
    return -1;
}

void ba_free(ba_problem *p)
{
    free(p->cams);
    free(p->pts);
    free(p->w);
    free(p->feats);
    free(p->obs);
    memset(p, 0, sizeof *p);
}

size_t ba_inputs(const ba_problem *p)
{
    return BA_CAM * p->n_cams + BA_PT * p->n_pts + p->n_obs;
}

size_t ba_outputs(const ba_problem *p)
{
    return 3 * p->n_obs;
}

void ba_pack(const ba_problem *p, double *x)
{
    memcpy(x, p->cams, BA_CAM * p->n_cams * sizeof *x);
    x += BA_CAM * p->n_cams;
    memcpy(x, p->pts, BA_PT * p->n_pts * sizeof *x);
    memcpy(x + BA_PT * p->n_pts, p->w, p->n_obs * sizeof *x);
}

/* ---- residuals ---- */

void ba_residuals(const ba_problem *p, const double *x, double *y)
{
    ba_all_d(p, x, y);
}

/* n and m are fixed by the problem in ctx; the ad_function interface passes
 * them for functions whose sizes vary. */
void ba_residuals_ad(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n;
    (void)m;
    ba_all_ad(ctx, x, y);
}

void ba_observation_ad(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n;
    (void)m;
    ba_reproj_ad(x, x + BA_CAM, x[BA_CAM + BA_PT], ctx, y);
}

/* ---- Jacobian structure and per-observation assembly ---- */

/* Observation i's block is three runs of consecutive columns: its camera's,
 * its point's and its weight's; the first column of each. */
static void block_runs(const ba_problem *p, size_t i, size_t *cam, size_t *pt, size_t *w)
{
    *cam = BA_CAM * p->obs[2 * i];
    *pt = BA_CAM * p->n_cams + BA_PT * p->obs[2 * i + 1];
    *w = BA_CAM * p->n_cams + BA_PT * p->n_pts + i;
}

size_t ba_block_column(const ba_problem *p, size_t i, size_t k)
{
    size_t cam, pt, w;
    block_runs(p, i, &cam, &pt, &w);
    return k < BA_CAM ? cam + k : k < BA_CAM + BA_PT ? pt + (k - BA_CAM) : w;
}

int ba_block_used(int axis, size_t k)
{
    return k != (size_t)(BA_PRINCIPAL + 1 - axis);
}

#define BA_ROW_NNZ (BA_BLOCK - 1)

size_t ba_jacobian_nnz(const ba_problem *p)
{
    return (2 * BA_ROW_NNZ + 1) * p->n_obs;
}

int ba_csr_alloc(const ba_problem *p, ad_csr *J)
{
    memset(J, 0, sizeof *J);
    J->rows = ba_outputs(p);
    J->cols = ba_inputs(p);
    J->nnz = ba_jacobian_nnz(p);
    J->row_ptr = alloc_array(J->rows + 1, 1, sizeof *J->row_ptr);
    J->col = alloc_array(J->nnz, 1, sizeof *J->col);
    J->val = alloc_array(J->nnz, 1, sizeof *J->val);
    if (!J->row_ptr || !J->col || !J->val) {
        ba_csr_release(J);
        return -1;
    }
    return 0;
}

void ba_csr_release(ad_csr *J)
{
    free(J->row_ptr);
    free(J->col);
    free(J->val);
    memset(J, 0, sizeof *J);
}

/* Observation i's 15 input columns and their values in x, run by run. */
static void gather_block(const ba_problem *p, const double *x, size_t i, size_t *cols,
                         double *in)
{
    size_t cam, pt, w;
    block_runs(p, i, &cam, &pt, &w);
    for (size_t k = 0; k < BA_CAM; k++)
        cols[k] = cam + k;
    for (size_t k = 0; k < BA_PT; k++)
        cols[BA_CAM + k] = pt + k;
    cols[BA_BLOCK - 1] = w;
    for (size_t k = 0; k < BA_BLOCK; k++)
        in[k] = x[cols[k]];
}

/* Writes observation i's two reprojection rows from entry e on: the used
 * entries of its dense 2x15 block.  Block order is ascending column order
 * (cameras, then points, then weights, in the input vector), so each row
 * comes out sorted.  Returns the next free entry. */
static size_t put_reproj_rows(size_t i, const size_t *cols, const double *block, ad_csr *J,
                              size_t e)
{
    for (int axis = 0; axis < 2; axis++) {
        J->row_ptr[2 * i + (size_t)axis] = e;
        /* each entry written, kept if used: the unused one is never the
         * last, so nothing is written past the rows */
        for (size_t k = 0; k < BA_BLOCK; k++) {
            J->col[e] = cols[k];
            J->val[e] = block[axis * BA_BLOCK + k];
            e += (size_t)ba_block_used(axis, k);
        }
    }
    return e;
}

ad_status ba_jacobian_by_observation(const ba_problem *p, const double *x, double *y, ad_csr *J)
{
    double in[BA_BLOCK], block[2 * BA_BLOCK];
    size_t cols[BA_BLOCK], e = 0;
    for (size_t i = 0; i < p->n_obs; i++) {
        gather_block(p, x, i, cols, in);
        ad_status s = ad_jacobian(ba_observation_ad, p->feats + 2 * i, BA_BLOCK, in, 2,
                                  y + 2 * i, block);
        if (s != AD_OK)
            return s;
        e = put_reproj_rows(i, cols, block, J, e);
    }
    /* w_err = 1 - w^2: one entry, cheaper written than recorded. */
    const double *w = x + BA_CAM * p->n_cams + BA_PT * p->n_pts;
    for (size_t i = 0; i < p->n_obs; i++) {
        y[2 * p->n_obs + i] = 1.0 - w[i] * w[i];
        J->row_ptr[2 * p->n_obs + i] = e;
        J->col[e] = ba_block_column(p, i, BA_BLOCK - 1);
        J->val[e++] = -2.0 * w[i];
    }
    J->row_ptr[J->rows] = e;
    return AD_OK;
}

/* ---- reference files ---- */

/* Reads a comment line after its '#'.  The header line "# n m p = ..."
 * gives the sizes of the problem. */
static void comment_line(FILE *f, ba_reference *ref)
{
    char line[256];
    int c;
    if (!fgets(line, sizeof line, f))
        return;
    sscanf(line, " n m p = %zu %zu %zu", &ref->n_cams, &ref->n_pts, &ref->n_obs);
    if (!strchr(line, '\n'))  /* a long line: drop the rest */
        while ((c = getc(f)) != EOF && c != '\n')
            continue;
}

/* The next number after any blank space and comment lines, through *v. */
static int next_number(FILE *f, ba_reference *ref, double *v)
{
    int c;
    while ((c = getc(f)) != EOF) {
        if (c == '#')
            comment_line(f, ref);
        else if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            ungetc(c, f);
            return fscanf(f, "%lf", v) == 1 ? 0 : -1;
        }
    }
    return -1;
}

/* The file's numbers in order: 2 reprojection errors, the weight error, the
 * sum of squares, the 2x15 block, d w_err / d w; then nothing more. */
static int parse_reference(FILE *f, ba_reference *ref)
{
    double *dst[4 + 2 * BA_BLOCK + 1], v;
    size_t n = 0;
    dst[n++] = &ref->reproj[0];
    dst[n++] = &ref->reproj[1];
    dst[n++] = &ref->w_err;
    dst[n++] = &ref->sum_sq;
    for (size_t k = 0; k < 2 * BA_BLOCK; k++)
        dst[n++] = &ref->block[k / BA_BLOCK][k % BA_BLOCK];
    dst[n++] = &ref->d_w_err;
    for (size_t k = 0; k < n; k++)
        if (next_number(f, ref, dst[k]))
            return -1;
    return next_number(f, ref, &v) == 0 || !ref->n_obs ? -1 : 0;
}

int ba_read_reference(const char *path, ba_reference *ref)
{
    memset(ref, 0, sizeof *ref);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    int st = parse_reference(f, ref);
    fclose(f);
    return st;
}
