/* GradBench's kmeans cost (cpp/gradbench/evals/kmeans.hpp) translated to C
 * with dualrev's generic operations: for each point, the smallest squared
 * distance to a centroid (std::min there, which CoDiPack overloads as its
 * min operation: ad_fmin here), summed.  Written once for two number
 * types: include it with T (double or ad_real) and NAME(id) defined; both
 * are undefined at the end.  points (n x d) stay double; the centroids
 * (k x d, row-major) are T. */

#if !defined(T) || !defined(NAME)
#error "define T and NAME(id) before including kmeans_objective.h"
#endif

static T NAME(euclid_dist_2)(int d, const double *a, const T *b)
{
    T dist = AD_CONST(T, 0);
    for (int i = 0; i < d; i++)
        dist = ad_add(dist, ad_mul(ad_sub(a[i], b[i]), ad_sub(a[i], b[i])));
    return dist;
}

static T NAME(kmeans_objective)(int n, int k, int d, const double *points, const T *centroids)
{
    T cost = AD_CONST(T, 0);
    for (int i = 0; i < n; i++) {
        const double *a = &points[i * d];
        T closest = AD_CONST(T, INFINITY);
        for (int j = 0; j < k; j++) {
            const T *b = &centroids[j * d];
            closest = ad_fmin(closest, NAME(euclid_dist_2)(d, a, b));
        }
        cost = ad_add(cost, closest);
    }
    return cost;
}

#undef T
#undef NAME
