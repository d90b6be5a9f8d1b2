/* Our C ports of GradBench's evals, written with dualrev's public API,
 * behind a plain-array interface that the C++ drivers call beside a
 * GradBench tool: ht and kmeans (ht.c, kmeans.c; bench_ht.cpp,
 * bench_kmeans.cpp, beside the CoDiPack tool), saddle and particle (the
 * examples, through saddle.c and particle.c; bench_saddle.cpp,
 * bench_particle.cpp, beside the finite-differences tool).  Matrices are
 * column-major, as GradBench's LightMatrix stores them, so the drivers hand
 * over pointers into the inputs GradBench parsed. */
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

/* ---- saddle and particle: nested reverse mode, GradBench's "rr" ----
 *
 * examples/saddle.c and examples/particle.c, unchanged: an outer gradient
 * descent whose gradients are ad_gradient of a function that takes
 * gradients itself with ad_gradient_r.  Each returns the ad_status. */

/* The eval: from start, p1 (the argmin) then p2 (the argmax) into out. */
int gb_saddle(const double start[2], double out[4]);

/* One gradient of the outer descent's cost at p1, the maximum over p2 of
 * f(p1, p2) found by the inner descent from start: ad_gradient of that
 * descent, whose own gradients are ad_gradient_r. */
int gb_saddle_outer_gradient(const double start[2], const double p1[2], double grad[2]);

/* That cost's value: the inner descent on constants (its gradients are
 * then ad_gradient's). */
int gb_saddle_outer_objective(const double start[2], const double p1[2], double *value);

/* The eval: the control w found from w0. */
int gb_particle(double w0, double *w);

/* One gradient of the descent's cost at w, x0(t_f)^2 of the Euler
 * simulation: ad_gradient of it, each step's force by ad_gradient_r. */
int gb_particle_gradient(double w, double *grad);

/* That cost's value: the simulation on constants. */
int gb_particle_objective(double w, double *value);

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
