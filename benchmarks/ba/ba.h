/* ADBench bundle adjustment (BA) for dualrev: loader, residuals, Jacobian
 * assembly and reference files, shared by tests/test_ba.c and
 * benchmarks/ba_bench.c.
 *
 * The residual function maps x = [cameras (11 n), points (3 m), weights (p)]
 * to 3p residuals: the 2p weighted reprojection errors, then the p weight
 * errors.  Its definition is in ba_residual.h. */
#ifndef BA_H
#define BA_H

#include <stddef.h>

#include "dualrev.h"

#define BA_CAM 11                      /* values per camera */
#define BA_PT 3                        /* values per point */
#define BA_BLOCK (BA_CAM + BA_PT + 1)  /* inputs of one observation */

/* Offsets inside a camera: [r1 r2 r3, C1 C2 C3, f, u0 v0, k1 k2]. */
enum { BA_ROT = 0, BA_CENTER = 3, BA_FOCAL = 6, BA_PRINCIPAL = 7, BA_RADIAL = 9 };

typedef struct ba_problem {
    size_t n_cams, n_pts, n_obs;
    double *cams;   /* n_cams x 11 */
    double *pts;    /* n_pts x 3 */
    double *w;      /* n_obs weights */
    double *feats;  /* n_obs x 2 measured features */
    size_t *obs;    /* n_obs x 2: camera index, point index */
} ba_problem;

/* Reads an ADBench BA file and replicates it as ADBench's reader does: the
 * one camera, point, weight and feature to all, observation i on camera
 * i mod n and point i mod m.  Returns 0, or -1 with *p zeroed and errno set:
 * from fopen, EINVAL for a malformed file, ENOMEM. */
int ba_load(const char *path, ba_problem *p);
void ba_free(ba_problem *p);

size_t ba_inputs(const ba_problem *p);   /* 11 n + 3 m + p */
size_t ba_outputs(const ba_problem *p);  /* 3 p */

/* The input vector [cameras, points, weights] of the problem (ba_inputs
 * values). */
void ba_pack(const ba_problem *p, double *x);

/* All residuals in plain double (y has ba_outputs values). */
void ba_residuals(const ba_problem *p, const double *x, double *y);

/* The same residuals as an ad_function; ctx is the const ba_problem *, and
 * n and m must be its ba_inputs and ba_outputs. */
void ba_residuals_ad(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx);

/* One observation's reprojection error as an ad_function of its 15 inputs
 * [camera (11), point (3), weight], with 2 outputs; ctx is the observation's
 * feature, a const double[2]. */
void ba_observation_ad(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx);

/* Column of the problem's input vector that entry k of observation i's
 * 15-input block is (k < 11: camera, k < 14: point, k == 14: weight). */
size_t ba_block_column(const ba_problem *p, size_t i, size_t k);

/* Whether reprojection row `axis` (0: x, 1: y) depends on block entry k at
 * all.  Every entry but one does: the principal point's other coordinate
 * (v0 for x, u0 for y) never enters that row, so a Jacobian whose structure
 * comes from the computation has 14 entries per reprojection row where
 * ADBench's layout stores 15, one of them always 0. */
int ba_block_used(int axis, size_t k);

/* Nonzeros of the Jacobian: 14 per reprojection row, 1 per weight row. */
size_t ba_jacobian_nnz(const ba_problem *p);

/* Allocates J for the Jacobian: ba_outputs x ba_inputs, ba_jacobian_nnz
 * entries, arrays zeroed.  Returns 0, or -1 when out of memory (J zeroed).
 * Free with ba_csr_release (not ad_csr_free, which pairs with the library's
 * allocator). */
int ba_csr_alloc(const ba_problem *p, ad_csr *J);
void ba_csr_release(ad_csr *J);

/* Residuals y (ba_outputs values) and the Jacobian in J (from ba_csr_alloc,
 * structure and values, as ADBench's tools build theirs on every call), one
 * ad_jacobian of ba_observation_ad per observation; the weight rows are
 * -2 w, written by hand.  On an error, y and J are partly written. */
ad_status ba_jacobian_by_observation(const ba_problem *p, const double *x, double *y, ad_csr *J);

/* The contents of an ADBench "manual" reference file for BA.  Every
 * observation of an ADBench BA file has the same residuals and Jacobian
 * block, so the file gives them once. */
typedef struct ba_reference {
    size_t n_cams, n_pts, n_obs;
    double reproj[2];            /* reproj_err[2i], reproj_err[2i + 1] */
    double w_err;                /* w_err[i] */
    double sum_sq;               /* sum of squares of all 3p residuals */
    double block[2][BA_BLOCK];   /* d reproj_err / d [camera, point, w] */
    double d_w_err;              /* d w_err[i] / d w_i */
} ba_reference;

/* Reads a *_manual.txt reference file.  Returns 0, or -1 if it cannot be
 * read or does not have the expected layout. */
int ba_read_reference(const char *path, ba_reference *ref);

#endif
