/* The ADBench bundle-adjustment residuals, written once for two number types.
 *
 * Include with T defined as the number type (double or ad_real) and NAME(id)
 * giving each function a per-type name; both are undefined at the end.  The
 * bodies use only dualrev's generic operations, which on plain doubles return
 * double and record nothing, so the double instantiation is ordinary double
 * code.  The measured features stay double in both: they are data, not
 * inputs.
 *
 * Definition (ADBench; /work/shared/adbench/README.md, "BA"): a camera is
 * [r (3), C (3), f, u0 v0, k1 k2], r a Rodrigues rotation vector.  A point X
 * projects to
 *   Xo = X - C,
 *   Xcam = Xo cos t + (w x Xo) sin t + w (w.Xo)(1 - cos t), t = |r|, w = r/t
 *          (Xo + r x Xo when |r|^2 == 0),
 *   u = (Xcam_x, Xcam_y) / Xcam_z,  u *= 1 + k1 |u|^2 + k2 |u|^4,
 *   proj = u f + (u0, v0),
 * and observation i of weight w_i and feature feat_i contributes
 *   reproj_err[2i..2i+1] = w_i (proj - feat_i),  w_err[i] = 1 - w_i^2.
 * The order of operations follows that definition so that the values match
 * ADBench's to rounding. */

#if !defined(T) || !defined(NAME)
#error "define T and NAME(id) before including ba_residual.h"
#endif

static void NAME(ba_cross)(const T *a, const T *b, T *out)
{
    out[0] = ad_sub(ad_mul(a[1], b[2]), ad_mul(a[2], b[1]));
    out[1] = ad_sub(ad_mul(a[2], b[0]), ad_mul(a[0], b[2]));
    out[2] = ad_sub(ad_mul(a[0], b[1]), ad_mul(a[1], b[0]));
}

/* Rotates x by the Rodrigues vector r.  The branch is on the exact value 0,
 * as in ADBench: there the angle-axis form divides by zero, and the
 * first-order form X + r x X has the right value and derivative. */
static void NAME(ba_rotate)(const T *r, const T *x, T *out)
{
    T sq = ad_dot(3, r, r), rx[3];
    if (ad_value(sq) == 0.0) {
        NAME(ba_cross)(r, x, rx);
        for (int k = 0; k < 3; k++)
            out[k] = ad_add(x[k], rx[k]);
        return;
    }
    T theta = ad_sqrt(sq), c = ad_cos(theta), s = ad_sin(theta);
    T inv = ad_div(1.0, theta);
    T axis[3] = {ad_mul(r[0], inv), ad_mul(r[1], inv), ad_mul(r[2], inv)};
    NAME(ba_cross)(axis, x, rx);
    T along = ad_mul(ad_dot(3, axis, x), ad_sub(1.0, c));
    for (int k = 0; k < 3; k++)
        out[k] = ad_add(ad_add(ad_mul(x[k], c), ad_mul(rx[k], s)), ad_mul(axis[k], along));
}

/* Projection of point x by camera cam into the image. */
static void NAME(ba_project)(const T *cam, const T *x, T *proj)
{
    T xo[3], xc[3];
    for (int k = 0; k < 3; k++)
        xo[k] = ad_sub(x[k], cam[BA_CENTER + k]);
    NAME(ba_rotate)(cam + BA_ROT, xo, xc);
    T u[2] = {ad_div(xc[0], xc[2]), ad_div(xc[1], xc[2])};
    T rsq = ad_dot(2, u, u);
    T distortion = ad_add(ad_add(1.0, ad_mul(cam[BA_RADIAL], rsq)),
                          ad_mul(cam[BA_RADIAL + 1], ad_mul(rsq, rsq)));
    for (int a = 0; a < 2; a++)
        proj[a] = ad_add(ad_mul(ad_mul(u[a], distortion), cam[BA_FOCAL]), cam[BA_PRINCIPAL + a]);
}

/* Weighted reprojection error of one observation. */
static void NAME(ba_reproj)(const T *cam, const T *x, T w, const double *feat, T *err)
{
    T proj[2];
    NAME(ba_project)(cam, x, proj);
    for (int a = 0; a < 2; a++)
        err[a] = ad_mul(w, ad_sub(proj[a], feat[a]));
}

/* All residuals of problem p at x = [cameras, points, weights]. */
static void NAME(ba_all)(const ba_problem *p, const T *x, T *y)
{
    const T *cams = x, *pts = x + BA_CAM * p->n_cams, *w = pts + BA_PT * p->n_pts;
    for (size_t i = 0; i < p->n_obs; i++)
        NAME(ba_reproj)(cams + BA_CAM * p->obs[2 * i], pts + BA_PT * p->obs[2 * i + 1], w[i],
                        p->feats + 2 * i, y + 2 * i);
    for (size_t i = 0; i < p->n_obs; i++)
        y[2 * p->n_obs + i] = ad_sub(1.0, ad_mul(w[i], w[i]));
}

#undef T
#undef NAME
