/* GradBench's kmeans "dir" with dualrev: the cost of kmeans_objective.h on
 * doubles, its gradient (ad_gradient), and the Newton direction J H^-1
 * from one ad_hvp along the ones vector (H is diagonal, so H 1 is its
 * diagonal).  See ports.h. */
#include <math.h>
#include <stdlib.h>

#include "dualrev.h"
#include "ports.h"

#define T double
#define NAME(id) id##_d
#include "kmeans_objective.h"

#define T ad_real
#define NAME(id) id##_ad
#include "kmeans_objective.h"

typedef struct kmeans_data {
    int n, k, d;
    const double *points;
} kmeans_data;

static ad_real kmeans_f(const ad_real *c, size_t nvar, void *ctx)
{
    const kmeans_data *km = ctx;
    (void)nvar;
    return kmeans_objective_ad(km->n, km->k, km->d, km->points, c);
}

double gb_kmeans_cost(int n, int k, int d, const double *points, const double *centroids)
{
    return kmeans_objective_d(n, k, d, points, centroids);
}

struct gb_kmeans_work {
    double *ones, *grad, *hv;
};

gb_kmeans_work *gb_kmeans_work_new(int k, int d)
{
    size_t kd = (size_t)k * (size_t)d;
    gb_kmeans_work *w = malloc(sizeof *w);
    if (w == NULL)
        return NULL;
    w->ones = malloc(sizeof(double) * kd);
    w->grad = malloc(sizeof(double) * kd);
    w->hv = malloc(sizeof(double) * kd);
    if (w->ones == NULL || w->grad == NULL || w->hv == NULL) {
        gb_kmeans_work_free(w);
        return NULL;
    }
    for (size_t i = 0; i < kd; i++)
        w->ones[i] = 1.0;
    return w;
}

void gb_kmeans_work_free(gb_kmeans_work *w)
{
    if (w == NULL)
        return;
    free(w->hv);
    free(w->grad);
    free(w->ones);
    free(w);
}

int gb_kmeans_dir(int n, int k, int d, const double *points, const double *centroids,
                  gb_kmeans_work *w, double *dir)
{
    kmeans_data km = {n, k, d, points};
    size_t kd = (size_t)k * (size_t)d;
    double cost;
    ad_status s = ad_hvp(kmeans_f, &km, kd, centroids, w->ones, &cost, w->grad, w->hv);
    for (size_t i = 0; i < kd; i++)
        dir[i] = w->grad[i] / w->hv[i];
    return (int)s;
}

int gb_kmeans_grad(int n, int k, int d, const double *points, const double *centroids,
                   double *cost, double *grad)
{
    kmeans_data km = {n, k, d, points};
    return (int)ad_gradient(kmeans_f, &km, (size_t)k * (size_t)d, centroids, cost, grad);
}
