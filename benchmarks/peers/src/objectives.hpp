// dualrev benchmarks/peers: our own harness code, under the repository's
// licence.  No peer code lives here: CoDiPack and Adept-2 are fetched by
// fetch_peers.sh into PEERS_DIR, outside the repository, never vendored.
//
// The ADBench objectives (GMM, LSTM, BA), written ONCE as C++ templates on the
// number type T.  Every harness (bench_dualrev.cpp, bench_codipack.cpp,
// bench_adept.cpp) includes this same file and instantiates it for double and
// for its tool's active type.  Definitions: ADBench (see the repository's
// tests/data/adbench/README.md); the loops follow ADBench's own C++ sources
// (defs.h of its "Manual"/"Adept" modules): gmm_objective, lstm_objective,
// computeReprojError.
//
// The only things a tool must supply are, before this file is used:
//   Num<T>::c(double)  a constant of type T (ad::real has no constructor from
//                      double; every other type is simply T(c));
//   Num<T>::v(const T&) the passive value (used to find the maximum of GMM's
//                      log-sum-exp, which then enters as the active value it
//                      is, and for BA's branch on theta^2 == 0).
// Elementary functions are called unqualified after `using std::exp` etc., so
// that argument-dependent lookup picks each tool's overloads.
#ifndef PEERS_OBJECTIVES_HPP
#define PEERS_OBJECTIVES_HPP

#include <cmath>
#include <cstddef>
#include <vector>

template <class T>
struct Num {
    static T c(double x) { return T(x); }
    static double v(const T &x);  // specialised per tool
};
template <>
inline double Num<double>::v(const double &x) { return x; }

template <class T>
inline T cst(double x) { return Num<T>::c(x); }
template <class T>
inline double pval(const T &x) { return Num<T>::v(x); }

// ===================================================================== GMM
namespace gmm {

constexpr double PI = 3.14159265359;  // ADBench's literal, not M_PI

struct Data {
    int d = 0, k = 0, n = 0;
    std::vector<double> alphas, means, icf, x;  // k, k*d, k*d(d+1)/2, n*d
    double gamma = 0;
    int m = 0;
    int icf_sz() const { return d * (d + 1) / 2; }
    int nparams() const { return k + k * d + k * icf_sz(); }
};

// the plain-double constant part of the prior: log_gamma_distrib
inline double log_gamma_distrib(double a, int p)
{
    double out = 0.25 * p * (p - 1) * std::log(PI);
    for (int j = 1; j <= p; j++)
        out = out + std::lgamma(a + 0.5 * (1 - j));
    return out;
}

template <class T>
T sqnorm(int n, const T *x)
{
    T res = x[0] * x[0];
    for (int i = 1; i < n; i++)
        res = res + x[i] * x[i];
    return res;
}

// xc = x - mu (ADBench's subtract(d, x, mu, out))
template <class T>
void subtract(int d, const double *x, const T *y, T *out)
{
    for (int id = 0; id < d; id++)
        out[id] = x[id] - y[id];
}

template <class T>
void Qtimesx(int d, const T *Qdiag, const T *ltri, const T *x, T *out)
{
    for (int id = 0; id < d; id++)
        out[id] = Qdiag[id] * x[id];
    int Lparamsidx = 0;
    for (int i = 0; i < d; i++)
        for (int j = i + 1; j < d; j++) {
            out[j] = out[j] + ltri[Lparamsidx] * x[i];
            Lparamsidx++;
        }
}

// log-sum-exp with its maximum as the active value it is (ADBench's code),
// as a user writes it; the same source for every tool
template <class T>
T log_sum_exp(int n, const T *x)
{
    using std::exp;
    using std::log;
    T mx = x[0];
    for (int i = 1; i < n; i++)
        if (pval(x[i]) > pval(mx))
            mx = x[i];
    T semx = cst<T>(0.0);
    for (int i = 0; i < n; i++)
        semx = semx + exp(x[i] - mx);
    return log(semx) + mx;
}

template <class T>
void preprocess_qs(int d, int k, const T *icf, T *sum_qs, T *Qdiags)
{
    using std::exp;
    int icf_sz = d * (d + 1) / 2;
    for (int ik = 0; ik < k; ik++) {
        sum_qs[ik] = cst<T>(0.0);
        for (int id = 0; id < d; id++) {
            T q = icf[ik * icf_sz + id];
            sum_qs[ik] = sum_qs[ik] + q;
            Qdiags[ik * d + id] = exp(q);
        }
    }
}

template <class T>
T log_wishart_prior(int p, int k, double gamma, int wm, const T *sum_qs, const T *Qdiags,
                    const T *icf)
{
    int n = p + wm + 1;
    int icf_sz = p * (p + 1) / 2;
    double C = n * p * (std::log(gamma) - 0.5 * std::log(2.0)) - log_gamma_distrib(0.5 * n, p);
    T out = cst<T>(0.0);
    for (int ik = 0; ik < k; ik++) {
        T frobenius = sqnorm(p, &Qdiags[ik * p]) + sqnorm(icf_sz - p, &icf[ik * icf_sz + p]);
        out = out + 0.5 * gamma * gamma * frobenius - double(wm) * sum_qs[ik];
    }
    return out - double(k) * C;
}

// params = [alphas (k), means (k*d), icf (k*icf_sz)]
template <class T>
T objective(const Data &D, const T *params)
{
    using std::log;
    const int d = D.d, k = D.k, n = D.n, icf_sz = D.icf_sz();
    const T *alphas = params, *means = params + k, *icf = params + k + k * d;
    const double CONSTANT = -n * d * 0.5 * log(2 * PI);

    std::vector<T> Qdiags(d * k), sum_qs(k), xcentered(d), Qxcentered(d), main_term(k);
    preprocess_qs(d, k, icf, sum_qs.data(), Qdiags.data());

    T slse = cst<T>(0.0);
    for (int ix = 0; ix < n; ix++) {
        for (int ik = 0; ik < k; ik++) {
            subtract(d, &D.x[ix * d], &means[ik * d], xcentered.data());
            Qtimesx(d, &Qdiags[ik * d], &icf[ik * icf_sz + d], xcentered.data(),
                    Qxcentered.data());
            main_term[ik] = alphas[ik] + sum_qs[ik] - 0.5 * sqnorm(d, Qxcentered.data());
        }
        slse = slse + log_sum_exp(k, main_term.data());
    }
    T lse_alphas = log_sum_exp(k, alphas);
    T err = CONSTANT + slse - double(n) * lse_alphas;
    err = err + log_wishart_prior(d, k, D.gamma, D.m, sum_qs.data(), Qdiags.data(), icf);
    return err;
}

}  // namespace gmm

// ==================================================================== LSTM
namespace lstm {

struct Data {
    int l = 0, c = 0, b = 0;
    std::vector<double> main, extra, state, seq;  // 8lb, 3b, 2lb, c*b
    int nparams() const { return 8 * l * b + 3 * b; }
};

template <class T>
T sigmoid(T x)
{
    using std::exp;
    return 1.0 / (1.0 + exp(-x));
}

// log(sum exp + 2): ADBench's definition, no max shift
template <class T>
T logsumexp(const T *vect, int sz)
{
    using std::exp;
    using std::log;
    T sum = cst<T>(0.0);
    for (int i = 0; i < sz; i++)
        sum = sum + exp(vect[i]);
    sum = sum + 2.0;
    return log(sum);
}

template <class T>
void model(int hsize, const T *weight, const T *bias, T *hidden, T *cell, const T *input)
{
    using std::tanh;
    std::vector<T> gates(4 * hsize);
    T *forget = &gates[0];
    T *ingate = &gates[hsize];
    T *outgate = &gates[2 * hsize];
    T *change = &gates[3 * hsize];
    for (int i = 0; i < hsize; i++) {
        forget[i] = sigmoid<T>(input[i] * weight[i] + bias[i]);
        ingate[i] = sigmoid<T>(hidden[i] * weight[hsize + i] + bias[hsize + i]);
        outgate[i] = sigmoid<T>(input[i] * weight[2 * hsize + i] + bias[2 * hsize + i]);
        change[i] = tanh(hidden[i] * weight[3 * hsize + i] + bias[3 * hsize + i]);
    }
    for (int i = 0; i < hsize; i++)
        cell[i] = cell[i] * forget[i] + ingate[i] * change[i];
    for (int i = 0; i < hsize; i++)
        hidden[i] = outgate[i] * tanh(cell[i]);
}

template <class T>
void predict(int l, int b, const T *w, const T *w2, T *s, const double *x, T *x2)
{
    for (int i = 0; i < b; i++)
        x2[i] = x[i] * w2[i];
    T *xp = x2;
    for (int i = 0; i <= 2 * l * b - 1; i += 2 * b) {
        model(b, &w[i * 4], &w[(i + b) * 4], &s[i], &s[i + b], xp);
        xp = &s[i];
    }
    for (int i = 0; i < b; i++)
        x2[i] = xp[i] * w2[b + i] + w2[2 * b + i];
}

// params = [main (8lb), extra (3b)]; the state is reset from D.state.
template <class T>
T objective(const Data &D, const T *params)
{
    const int l = D.l, c = D.c, b = D.b;
    const T *main_params = params, *extra_params = params + 8 * l * b;
    std::vector<T> state(2 * l * b);
    for (int i = 0; i < 2 * l * b; i++)
        state[i] = cst<T>(D.state[i]);
    T total = cst<T>(0.0);
    int count = 0;
    const double *input = &D.seq[0];
    std::vector<T> ypred(b), ynorm(b);
    for (int t = 0; t <= (c - 1) * b - 1; t += b) {
        predict(l, b, main_params, extra_params, state.data(), input, ypred.data());
        T lse = logsumexp(ypred.data(), b);
        for (int i = 0; i < b; i++)
            ynorm[i] = ypred[i] - lse;
        const double *ygold = &D.seq[t + b];
        for (int i = 0; i < b; i++)
            total = total + ygold[i] * ynorm[i];
        count += b;
        input = ygold;
    }
    return -total / double(count);
}

}  // namespace lstm

// ====================================================================== BA
namespace ba {

struct Data {
    int n = 0, m = 0, p = 0;
    std::vector<double> cams, X, w, feats;  // n*11, m*3, p, p*2
    std::vector<int> obs;                   // p*2: camera, point
};

template <class T>
T sqsum(int n, const T *x)
{
    T res = x[0] * x[0];
    for (int i = 1; i < n; i++)
        res = res + x[i] * x[i];
    return res;
}

template <class T>
void cross(const T *a, const T *b, T *out)
{
    out[0] = a[1] * b[2] - a[2] * b[1];
    out[1] = a[2] * b[0] - a[0] * b[2];
    out[2] = a[0] * b[1] - a[1] * b[0];
}

template <class T>
void rodrigues_rotate_point(const T *rot, const T *pt, T *rotatedPt)
{
    using std::cos;
    using std::sin;
    using std::sqrt;
    T sqtheta = sqsum(3, rot);
    if (pval(sqtheta) != 0) {
        T theta, costheta, sintheta, theta_inverse, w[3], w_cross_pt[3], tmp;
        theta = sqrt(sqtheta);
        costheta = cos(theta);
        sintheta = sin(theta);
        theta_inverse = 1.0 / theta;
        for (int i = 0; i < 3; i++)
            w[i] = rot[i] * theta_inverse;
        cross(w, pt, w_cross_pt);
        tmp = (w[0] * pt[0] + w[1] * pt[1] + w[2] * pt[2]) * (1. - costheta);
        for (int i = 0; i < 3; i++)
            rotatedPt[i] = pt[i] * costheta + w_cross_pt[i] * sintheta + w[i] * tmp;
    } else {
        T rot_cross_pt[3];
        cross(rot, pt, rot_cross_pt);
        for (int i = 0; i < 3; i++)
            rotatedPt[i] = pt[i] + rot_cross_pt[i];
    }
}

template <class T>
void radial_distort(const T *rad_params, T *proj)
{
    T rsq, L;
    rsq = sqsum(2, proj);
    L = 1. + rad_params[0] * rsq + rad_params[1] * rsq * rsq;
    proj[0] = proj[0] * L;
    proj[1] = proj[1] * L;
}

template <class T>
void project(const T *cam, const T *X, T *proj)
{
    const T *C = &cam[3];
    T Xo[3], Xcam[3];
    Xo[0] = X[0] - C[0];
    Xo[1] = X[1] - C[1];
    Xo[2] = X[2] - C[2];
    rodrigues_rotate_point(&cam[0], Xo, Xcam);
    proj[0] = Xcam[0] / Xcam[2];
    proj[1] = Xcam[1] / Xcam[2];
    radial_distort(&cam[9], proj);
    proj[0] = proj[0] * cam[6] + cam[7];
    proj[1] = proj[1] * cam[6] + cam[8];
}

// err (2) = w * (proj(cam, X) - feat)
template <class T>
void reproj_error(const T *cam, const T *X, const T *w, const double *feat, T *err)
{
    T proj[2];
    project(cam, X, proj);
    err[0] = (*w) * (proj[0] - feat[0]);
    err[1] = (*w) * (proj[1] - feat[1]);
}

// the 15 inputs of observation i: [cam (11), X (3), w (1)]
inline void gather(const Data &D, int i, double *in15)
{
    const double *cam = &D.cams[11 * D.obs[2 * i]], *X = &D.X[3 * D.obs[2 * i + 1]];
    for (int j = 0; j < 11; j++)
        in15[j] = cam[j];
    for (int j = 0; j < 3; j++)
        in15[11 + j] = X[j];
    in15[14] = D.w[i];
}

}  // namespace ba

#endif
