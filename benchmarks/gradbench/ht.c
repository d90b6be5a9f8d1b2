/* GradBench's ht "jacobian" with dualrev: the objective of ht_objective.h
 * on doubles, and its Jacobian by ad_jacobian (GB_HT_COLS inputs) and by
 * ad_linearize + ad_linear_jvps (all inputs, GradBench's seeds).  See
 * ports.h. */
#include <stdlib.h>
#include <string.h>

#include "dualrev.h"
#include "ports.h"

#define T double
#define NAME(id) id##_d
#include "ht_objective.h"

#define T ad_real
#define NAME(id) id##_ad
#include "ht_objective.h"

void gb_ht_objective(const gb_ht_input *in, double *err)
{
    ht_objective_d(in->theta, in->us, in, err);
}

/* ---- ad_jacobian: x = (s0, s1, theta); u[2i + c] = us[2i + c] + s_c ---- */

static void ht_shifted(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    const gb_ht_input *in = ctx;
    ad_real *us = gb_xmalloc(sizeof *us * 2 * (size_t)in->points);
    (void)n;
    (void)m;
    for (int i = 0; i < in->points; i++)
        for (int c = 0; c < 2; c++)
            us[2 * i + c] = ad_add(in->us[2 * i + c], x[c]);
    ht_objective_ad(x + 2, us, in, y);
    free(us);
}

int gb_ht_jacobian(const gb_ht_input *in, double *err, double *jac)
{
    double x[GB_HT_COLS] = {0.0, 0.0};
    memcpy(x + 2, in->theta, sizeof(double) * GB_HT_THETA);
    return ad_jacobian(ht_shifted, (void *)in, GB_HT_COLS, x, 3 * (size_t)in->points, err, jac);
}

/* ---- ad_linearize over x = (theta, us), GradBench's seeds ---- */

struct gb_ht_work {
    size_t n;   /* GB_HT_THETA + 2 points */
    double *x;  /* the point: theta, then us */
    double *V;  /* GB_HT_COLS seed directions of n entries */
};

gb_ht_work *gb_ht_work_new(const gb_ht_input *in)
{
    gb_ht_work *w = malloc(sizeof *w);
    if (w == NULL)
        return NULL;
    w->n = GB_HT_THETA + 2 * (size_t)in->points;
    w->x = malloc(sizeof(double) * w->n);
    w->V = calloc((size_t)GB_HT_COLS * w->n, sizeof(double));
    if (w->x == NULL || w->V == NULL) {
        gb_ht_work_free(w);
        return NULL;
    }
    memcpy(w->x, in->theta, sizeof(double) * GB_HT_THETA);
    memcpy(w->x + GB_HT_THETA, in->us, sizeof(double) * 2 * (size_t)in->points);
    for (int i = 0; i < in->points; i++) {
        w->V[0 * w->n + GB_HT_THETA + 2 * (size_t)i] = 1.0;
        w->V[1 * w->n + GB_HT_THETA + 2 * (size_t)i + 1] = 1.0;
    }
    for (size_t t = 0; t < GB_HT_THETA; t++)
        w->V[(2 + t) * w->n + t] = 1.0;
    return w;
}

void gb_ht_work_free(gb_ht_work *w)
{
    if (w == NULL)
        return;
    free(w->V);
    free(w->x);
    free(w);
}

static void ht_natural(const ad_real *x, size_t n, ad_real *y, size_t m, void *ctx)
{
    (void)n;
    (void)m;
    ht_objective_ad(x, x + GB_HT_THETA, ctx, y);
}

int gb_ht_jacobian_linear(const gb_ht_input *in, gb_ht_work *w, double *err, double *jac)
{
    ad_linear *L = NULL;
    ad_status s = ad_linearize(ht_natural, (void *)in, w->n, w->x, 3 * (size_t)in->points, err, &L);
    if (s == AD_OK)
        s = ad_linear_jvps(L, GB_HT_COLS, w->V, jac);
    ad_linear_free(L);
    return (int)s;
}
