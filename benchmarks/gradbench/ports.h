/* Our C ports of GradBench's ht and kmeans evals, written with dualrev's
 * public API (ht.c, kmeans.c), behind a plain-array interface that the C++
 * drivers (bench_ht.cpp, bench_kmeans.cpp) call beside GradBench's CoDiPack
 * tool.  Matrices are column-major, as GradBench's LightMatrix stores them,
 * so the drivers hand over pointers into the inputs GradBench parsed. */
#ifndef GRADBENCH_PORTS_H
#define GRADBENCH_PORTS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ht: hand tracking, complicated variant (GradBench's default) ---- */

#define GB_HT_THETA 26   /* pose parameters */
#define GB_HT_COLS 28    /* Jacobian columns: the two u columns, then theta */

typedef struct gb_ht_input {
    int bones;                              /* bone count */
    const int *parents;                     /* bones; -1 for the root */
    const double *base_relatives;           /* bones 4 x 4 matrices */
    const double *inverse_base_absolutes;   /* bones 4 x 4 matrices */
    int vertices;
    const double *base_positions;           /* 4 x vertices (homogeneous) */
    const double *weights;                  /* bones x vertices */
    const int *triangles;                   /* 3 vertex indices per triangle */
    int is_mirrored;
    int points;                             /* correspondences */
    const int *correspondences;             /* points triangle indices */
    const double *data_points;              /* 3 x points */
    const double *theta;                    /* GB_HT_THETA */
    const double *us;                       /* 2 x points barycentric pairs */
} gb_ht_input;

/* The residuals err (3 points) on doubles: the same source as the AD
 * versions, instantiated for double. */
void gb_ht_objective(const gb_ht_input *in, double *err);

/* What the timed calls keep between calls (GradBench's "prepare" step):
 * the seed matrix of gb_ht_jacobian_linear.  NULL when out of memory. */
typedef struct gb_ht_work gb_ht_work;
gb_ht_work *gb_ht_work_new(const gb_ht_input *in);
void gb_ht_work_free(gb_ht_work *w);

/* err and the 3 points x GB_HT_COLS Jacobian, row-major, by ad_jacobian of
 * the residuals as a function of GB_HT_COLS inputs: a shift s0 of every
 * u[2i], a shift s1 of every u[2i+1] (both 0), then theta.  Row 3i+j
 * depends on u[2i] and u[2i+1] alone, so the two shift columns are
 * GradBench's two compressed u columns.  Returns the ad_status. */
int gb_ht_jacobian(const gb_ht_input *in, double *err, double *jac);

/* The same Jacobian from ad_linearize of the residuals as a function of
 * all GB_HT_THETA + 2 points inputs (theta, then us), and ad_linear_jvps
 * along GB_HT_COLS directions, the seeds of GradBench's CoDiPack tool
 * (the sum of the u[2i] unit vectors, that of the u[2i+1], the theta unit
 * vectors).  jac is column-major (GradBench's layout): column c is
 * jac[c * 3 points .. ).  Returns the ad_status. */
int gb_ht_jacobian_linear(const gb_ht_input *in, gb_ht_work *w, double *err, double *jac);

/* ---- kmeans ---- */

/* The cost on doubles: the sum over points of the squared distance to the
 * nearest centroid.  points is n x d, centroids k x d, row-major. */
double gb_kmeans_cost(int n, int k, int d, const double *points, const double *centroids);

/* Buffers of k d doubles for the calls below, kept between calls. */
typedef struct gb_kmeans_work gb_kmeans_work;
gb_kmeans_work *gb_kmeans_work_new(int k, int d);
void gb_kmeans_work_free(gb_kmeans_work *w);

/* GradBench's "dir": J H^-1, where J is the gradient of the cost with
 * respect to the centroids and H its Hessian, which is diagonal: one
 * ad_hvp along the ones vector gives the gradient and H 1 = diag(H), and
 * dir is their quotient.  dir is k x d.  Returns the ad_status. */
int gb_kmeans_dir(int n, int k, int d, const double *points, const double *centroids,
                  gb_kmeans_work *w, double *dir);

/* The gradient alone (ad_gradient), k x d; *cost the cost. */
int gb_kmeans_grad(int n, int k, int d, const double *points, const double *centroids,
                   double *cost, double *grad);

/* dualrev's text for a status and its version. */
const char *gb_strerror(int status);
const char *gb_dualrev_version(void);

/* The dualrev tape of the calling thread: records of its last recording,
 * and bytes reserved. */
void gb_tape_stats(size_t *records, size_t *reserved_bytes);

#ifdef __cplusplus
}
#endif

#endif
