/* A multilayer perceptron 16 -> 64 -> 64 -> 1 with tanh, on a batch of 64
 * inputs, mean squared error: written once for T = double and T = ad_real
 * (include with MLP_T and MLP_NAME defined).  A layer is
 * act(W X + b 1^T): one ad_mat_mul with the bias, one ad_mat_map.
 *
 * Parameters p (5 313): W1 (64 x 16), b1, W2 (64 x 64), b2, W3 (1 x 64), b3,
 * row-major.  The batch X is 16 x 64, one input per column. */
#ifndef MLP_SIZES
#define MLP_SIZES
enum { MLP_IN = 16, MLP_H = 64, MLP_B = 64 };
#define MLP_PARAMS (MLP_H * MLP_IN + MLP_H + MLP_H * MLP_H + MLP_H + MLP_H + 1)

typedef struct mlp_data {
    const double *X;  /* MLP_IN x MLP_B */
    const double *t;  /* MLP_B targets */
    void *work;       /* room for 4 MLP_H x MLP_B values and MLP_B more, of the type used */
} mlp_data;
#endif

/* On error (NaN out, an allocation that failed) the loss is NaN, and the
 * recording reports the status. */
static MLP_T MLP_NAME(const MLP_T *p, size_t n, void *ctx)
{
    const mlp_data *d = ctx;
    MLP_T *z1 = d->work, *h1 = z1 + MLP_H * MLP_B, *z2 = h1 + MLP_H * MLP_B,
          *h2 = z2 + MLP_H * MLP_B, *out = h2 + MLP_H * MLP_B;
    const MLP_T *W1 = p, *b1 = W1 + MLP_H * MLP_IN, *W2 = b1 + MLP_H, *b2 = W2 + MLP_H * MLP_H,
                *W3 = b2 + MLP_H, *b3 = W3 + MLP_H;
    ad_mat mW1, mW2, mW3, mX, mZ1, mH1, mZ2, mH2, mO;
    (void)n;
    if (ad_mat_make(MLP_H, MLP_IN, W1, &mW1) != AD_OK || ad_mat_make(MLP_H, MLP_H, W2, &mW2) != AD_OK ||
        ad_mat_make(1, MLP_H, W3, &mW3) != AD_OK || ad_mat_wrap(MLP_IN, MLP_B, d->X, &mX) != AD_OK ||
        ad_mat_mul(&mW1, &mX, b1, z1, &mZ1) != AD_OK ||          /* W1 X + b1 1^T */
        ad_mat_map(AD_MAP_TANH, &mZ1, h1, &mH1) != AD_OK ||
        ad_mat_mul(&mW2, &mH1, b2, z2, &mZ2) != AD_OK ||
        ad_mat_map(AD_MAP_TANH, &mZ2, h2, &mH2) != AD_OK ||
        ad_mat_mul(&mW3, &mH2, b3, out, &mO) != AD_OK)          /* 1 x 64 */
        return AD_CONST(MLP_T, NAN);
    MLP_T *r = z1;  /* the residuals, over z1 (no longer needed) */
    for (size_t j = 0; j < MLP_B; j++)
        r[j] = ad_sub(out[j], d->t[j]);
    return ad_mul(ad_sqnorm(MLP_B, r), 1.0 / MLP_B);
}
