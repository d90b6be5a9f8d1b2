/* The MLP of mlp_batch.h (5 313 parameters, a batch of 64): its loss and
 * gradient with recorded-matrix products and maps, the same source run on
 * doubles for the loss alone, and the gradient checked against central
 * differences of that double loss at 40 parameters.  Exit status 1 on a
 * mismatch (a test, see meson.build). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <dualrev.h>

#define MLP_T ad_real
#define MLP_NAME mlp_loss
#include "mlp_batch.h"
#undef MLP_T
#undef MLP_NAME
#define MLP_T double
#define MLP_NAME mlp_loss_d
#include "mlp_batch.h"

static double uniform(unsigned long long *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

int main(void)
{
    static double p[MLP_PARAMS], g[MLP_PARAMS], X[MLP_IN * MLP_B], t[MLP_B];
    static ad_real work_r[4 * MLP_H * MLP_B + MLP_B];
    static double work_d[4 * MLP_H * MLP_B + MLP_B];
    unsigned long long s = 42;
    for (size_t i = 0; i < MLP_PARAMS; i++)
        p[i] = uniform(&s) * 0.3;
    for (size_t i = 0; i < MLP_IN * MLP_B; i++)
        X[i] = uniform(&s);
    for (size_t j = 0; j < MLP_B; j++)
        t[j] = uniform(&s);
    mlp_data dr = {X, t, work_r}, dd = {X, t, work_d};
    double fx;
    ad_status st = ad_gradient(mlp_loss, &dr, MLP_PARAMS, p, &fx, g);
    if (st != AD_OK) {
        fprintf(stderr, "ad_gradient: %s\n", ad_strerror(st));
        return 1;
    }
    double fd = mlp_loss_d(p, MLP_PARAMS, &dd);
    printf("loss %.17g (double form %.17g)\n", fx, fd);
    int bad = fx != fd;  /* the values are bitwise the same */
    for (int k = 0; k < 40; k++) {
        size_t i = (size_t)(k * 131 + 7) % MLP_PARAMS;
        double h = 1e-5, keep = p[i];
        p[i] = keep + h;
        double up = mlp_loss_d(p, MLP_PARAMS, &dd);
        p[i] = keep - h;
        double down = mlp_loss_d(p, MLP_PARAMS, &dd);
        p[i] = keep;
        double cd = (up - down) / (2 * h);
        if (fabs(cd - g[i]) > 1e-7 * (1.0 + fabs(g[i]))) {
            printf("parameter %zu: gradient %.12g, central difference %.12g\n", i, g[i], cd);
            bad = 1;
        }
    }
    printf("gradient %s central differences at 40 parameters\n", bad ? "DIFFERS FROM" : "matches");
    return bad;
}
