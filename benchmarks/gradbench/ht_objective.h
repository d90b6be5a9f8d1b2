/* GradBench's ht objective (cpp/gradbench/evals/ht.hpp, from ADBench's
 * hand_light_matrix.h), complicated variant, translated to C with dualrev's
 * generic operations, step by step as the C++ does it.  Written once for
 * two number types: include it with T (double or ad_real) and NAME(id)
 * defined; both are undefined at the end.
 *
 * Matrices are column-major arrays, entry (i, j) of an r-row matrix at
 * [j * r + i], as in GradBench's LightMatrix.  Data (the model, the points)
 * stay double; theta and us are T.  The large matrices are allocated per
 * call, as the C++ allocates its LightMatrix objects. */

#ifndef GB_HT_OBJECTIVE_COMMON
#define GB_HT_OBJECTIVE_COMMON

#include <stdio.h>
#include <stdlib.h>

#include "ports.h"

static void *gb_xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "gradbench ports: out of memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

#endif

#if !defined(T) || !defined(NAME)
#error "define T and NAME(id) before including ht_objective.h"
#endif

/* out (lr x rc) = lhs (lr x lc) rhs (lc x rc), as GradBench's mat_mult:
 * out(i, k) = lhs(i, 0) rhs(0, k), then += lhs(i, j) rhs(j, k).  Three
 * forms for the operand types the objective multiplies. */
static void NAME(mat_mult_tt)(int lr, int lc, int rc, const T *lhs, const T *rhs, T *out)
{
    for (int i = 0; i < lr; i++)
        for (int k = 0; k < rc; k++) {
            T s = ad_mul(lhs[i], rhs[k * lc]);
            for (int j = 1; j < lc; j++)
                s = ad_add(s, ad_mul(lhs[j * lr + i], rhs[k * lc + j]));
            out[k * lr + i] = s;
        }
}

static void NAME(mat_mult_dt)(int lr, int lc, int rc, const double *lhs, const T *rhs, T *out)
{
    for (int i = 0; i < lr; i++)
        for (int k = 0; k < rc; k++) {
            T s = ad_mul(lhs[i], rhs[k * lc]);
            for (int j = 1; j < lc; j++)
                s = ad_add(s, ad_mul(lhs[j * lr + i], rhs[k * lc + j]));
            out[k * lr + i] = s;
        }
}

static void NAME(mat_mult_td)(int lr, int lc, int rc, const T *lhs, const double *rhs, T *out)
{
    for (int i = 0; i < lr; i++)
        for (int k = 0; k < rc; k++) {
            T s = ad_mul(lhs[i], rhs[k * lc]);
            for (int j = 1; j < lc; j++)
                s = ad_add(s, ad_mul(lhs[j * lr + i], rhs[k * lc + j]));
            out[k * lr + i] = s;
        }
}

static void NAME(set_identity)(int n, T *m)
{
    for (int j = 0; j < n; j++)
        for (int i = 0; i < n; i++)
            m[j * n + i] = AD_CONST(T, i == j ? 1.0 : 0.0);
}

static T NAME(sqnorm)(int n, const T *x)
{
    T res = ad_mul(x[0], x[0]);
    for (int i = 1; i < n; i++)
        res = ad_add(res, ad_mul(x[i], x[i]));
    return res;
}

/* R (3 x 3) from an angle-axis vector. */
static void NAME(angle_axis_to_rotation_matrix)(const T *angle_axis, T *R)
{
    T norm = ad_sqrt(NAME(sqnorm)(3, angle_axis));
    if (ad_value(norm) < .0001) {
        NAME(set_identity)(3, R);
        return;
    }

    T x = ad_div(angle_axis[0], norm);
    T y = ad_div(angle_axis[1], norm);
    T z = ad_div(angle_axis[2], norm);

    T s = ad_sin(norm);
    T c = ad_cos(norm);

    R[0 + 3 * 0] = ad_add(ad_mul(x, x), ad_mul(ad_sub(1, ad_mul(x, x)), c));
    R[0 + 3 * 1] = ad_sub(ad_mul(ad_mul(x, y), ad_sub(1, c)), ad_mul(z, s));
    R[0 + 3 * 2] = ad_add(ad_mul(ad_mul(x, z), ad_sub(1, c)), ad_mul(y, s));
    R[1 + 3 * 0] = ad_add(ad_mul(ad_mul(x, y), ad_sub(1, c)), ad_mul(z, s));
    R[1 + 3 * 1] = ad_add(ad_mul(y, y), ad_mul(ad_sub(1, ad_mul(y, y)), c));
    R[1 + 3 * 2] = ad_sub(ad_mul(ad_mul(y, z), ad_sub(1, c)), ad_mul(x, s));
    R[2 + 3 * 0] = ad_sub(ad_mul(ad_mul(x, z), ad_sub(1, c)), ad_mul(y, s));
    R[2 + 3 * 1] = ad_add(ad_mul(ad_mul(z, y), ad_sub(1, c)), ad_mul(x, s));
    R[2 + 3 * 2] = ad_add(ad_mul(z, z), ad_mul(ad_sub(1, ad_mul(z, z)), c));
}

/* R (3 x 3) = Rz Ry Rx from the angles (x, z, y). */
static void NAME(euler_angles_to_rotation_matrix)(const T *xzy, T *R)
{
    T tx = xzy[0], ty = xzy[2], tz = xzy[1];
    T Rx[9], Ry[9], Rz[9], tmp[9];

    NAME(set_identity)(3, Rx);
    Rx[1 + 3 * 1] = ad_cos(tx);
    Rx[2 + 3 * 1] = ad_sin(tx);
    Rx[1 + 3 * 2] = ad_neg(Rx[2 + 3 * 1]);
    Rx[2 + 3 * 2] = Rx[1 + 3 * 1];

    NAME(set_identity)(3, Ry);
    Ry[0 + 3 * 0] = ad_cos(ty);
    Ry[0 + 3 * 2] = ad_sin(ty);
    Ry[2 + 3 * 0] = ad_neg(Ry[0 + 3 * 2]);
    Ry[2 + 3 * 2] = Ry[0 + 3 * 0];

    NAME(set_identity)(3, Rz);
    Rz[0 + 3 * 0] = ad_cos(tz);
    Rz[1 + 3 * 0] = ad_sin(tz);
    Rz[0 + 3 * 1] = ad_neg(Rz[1 + 3 * 0]);
    Rz[1 + 3 * 1] = Rz[0 + 3 * 0];

    NAME(mat_mult_tt)(3, 3, 3, Rz, Ry, tmp);
    NAME(mat_mult_tt)(3, 3, 3, tmp, Rx, R);
}

/* pose_params (3 x (bones + 3)): global rotation, scale (ones), global
 * translation, then one column of angles per bone, filled from theta's 20
 * finger parameters. */
static void NAME(to_pose_params)(const T *theta, int bones, T *pose_params)
{
    int cols = bones + 3;
    for (int i = 0; i < 3 * cols; i++)
        pose_params[i] = AD_CONST(T, 0.);

    for (int j = 0; j < 3; j++) {
        pose_params[0 * 3 + j] = theta[j];
        pose_params[1 * 3 + j] = AD_CONST(T, 1.);
        pose_params[2 * 3 + j] = theta[3 + j];
    }

    int i_theta = 6;
    int i_pose_params = 5;
    int n_fingers = 5;
    for (int i_finger = 0; i_finger < n_fingers; i_finger++) {
        for (int i = 2; i <= 4; i++) {
            pose_params[i_pose_params * 3 + 0] = theta[i_theta++];
            if (i == 2)
                pose_params[i_pose_params * 3 + 1] = theta[i_theta++];
            i_pose_params++;
        }
        i_pose_params++;
    }
}

/* positions (3 x vertices): the skinned mesh, then the global transform. */
static void NAME(get_skinned_vertex_positions)(const gb_ht_input *in, const T *pose_params,
                                               T *positions)
{
    int nb = in->bones, nv = in->vertices;
    T *relatives = gb_xmalloc(sizeof(T) * 16 * (size_t)nb);
    T *absolutes = gb_xmalloc(sizeof(T) * 16 * (size_t)nb);
    T *transforms = gb_xmalloc(sizeof(T) * 16 * (size_t)nb);
    T *curr_positions = gb_xmalloc(sizeof(T) * 4 * (size_t)nv);

    /* get_posed_relatives */
    for (int i = 0; i < nb; i++) {
        T tr[16], R[9];
        NAME(set_identity)(4, tr);
        NAME(euler_angles_to_rotation_matrix)(&pose_params[(i + 3) * 3], R);
        for (int c = 0; c < 3; c++)
            for (int r = 0; r < 3; r++)
                tr[c * 4 + r] = R[c * 3 + r];
        NAME(mat_mult_dt)(4, 4, 4, &in->base_relatives[16 * i], tr, &relatives[16 * i]);
    }

    /* relatives_to_absolutes */
    for (int i = 0; i < nb; i++) {
        if (in->parents[i] == -1)
            for (int e = 0; e < 16; e++)
                absolutes[16 * i + e] = relatives[16 * i + e];
        else
            NAME(mat_mult_tt)(4, 4, 4, &absolutes[16 * in->parents[i]], &relatives[16 * i],
                              &absolutes[16 * i]);
    }

    /* bone transforms */
    for (int i = 0; i < nb; i++)
        NAME(mat_mult_td)(4, 4, 4, &absolutes[16 * i], &in->inverse_base_absolutes[16 * i],
                          &transforms[16 * i]);

    /* skinning */
    for (int e = 0; e < 3 * nv; e++)
        positions[e] = AD_CONST(T, 0.);
    for (int i_bone = 0; i_bone < nb; i_bone++) {
        NAME(mat_mult_td)(4, 4, nv, &transforms[16 * i_bone], in->base_positions, curr_positions);
        for (int i_vert = 0; i_vert < nv; i_vert++)
            for (int i = 0; i < 3; i++) {
                T change = ad_mul(curr_positions[i_vert * 4 + i],
                                  in->weights[(size_t)i_vert * (size_t)nb + (size_t)i_bone]);
                positions[i_vert * 3 + i] = ad_add(positions[i_vert * 3 + i], change);
            }
    }

    if (in->is_mirrored)
        for (int j = 0; j < nv; j++)
            positions[j * 3] = ad_mul(positions[j * 3], -1);

    /* apply_global_transform */
    T R[9];
    NAME(angle_axis_to_rotation_matrix)(&pose_params[0], R);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            R[i * 3 + j] = ad_mul(R[i * 3 + j], pose_params[1 * 3 + i]);

    T *tmp = curr_positions;  /* 3 x nv fits in the 4 x nv buffer */
    NAME(mat_mult_tt)(3, 3, nv, R, positions, tmp);
    for (int j = 0; j < nv; j++)
        for (int i = 0; i < 3; i++)
            positions[j * 3 + i] = ad_add(tmp[j * 3 + i], pose_params[2 * 3 + i]);

    free(curr_positions);
    free(transforms);
    free(absolutes);
    free(relatives);
}

/* err (3 points): each data point minus its barycentric point on the
 * posed mesh. */
static void NAME(ht_objective)(const T *theta, const T *us, const gb_ht_input *in, T *err)
{
    T *pose_params = gb_xmalloc(sizeof(T) * 3 * (size_t)(in->bones + 3));
    T *vertex_positions = gb_xmalloc(sizeof(T) * 3 * (size_t)in->vertices);

    NAME(to_pose_params)(theta, in->bones, pose_params);
    NAME(get_skinned_vertex_positions)(in, pose_params, vertex_positions);

    for (int i = 0; i < in->points; i++) {
        const int *verts = &in->triangles[3 * in->correspondences[i]];
        const T *u = &us[2 * i];
        for (int j = 0; j < 3; j++) {
            T hand_point_coord =
                ad_add(ad_add(ad_mul(u[0], vertex_positions[verts[0] * 3 + j]),
                              ad_mul(u[1], vertex_positions[verts[1] * 3 + j])),
                       ad_mul(ad_sub(ad_sub(1., u[0]), u[1]), vertex_positions[verts[2] * 3 + j]));
            err[i * 3 + j] = ad_sub(in->data_points[i * 3 + j], hand_point_coord);
        }
    }

    free(vertex_positions);
    free(pose_params);
}

#undef T
#undef NAME
