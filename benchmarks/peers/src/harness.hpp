// dualrev benchmarks/peers: our own harness code, under the repository's
// licence.  No peer code lives here: CoDiPack and Adept-2 are fetched by
// fetch_peers.sh into PEERS_DIR, outside the repository, never vendored.
//
// The driver shared by the three harnesses.  A tool is a class with:
//
//   static const char *name;
//   double gmm_gradient(const gmm::Data &, const double *x, double *g);
//   double lstm_gradient(const lstm::Data &, const double *x, double *g);
//       f(x) and its gradient, recording the tape anew at every call
//   double lstm_record(const lstm::Data &, const double *x);
//       records f once and keeps the tape; returns f(x)
//   void lstm_sweep(double *g);   one reverse sweep of the kept tape
//   void lstm_release();          drops the kept tape
//   void ba_jacobian(const ba::Data &, int i, double *err2, double *jac30);
//       the 2 residuals of observation i and their 2 x 15 Jacobian
//       (row-major; columns cam (11), X (3), w), recorded anew per call
//   std::string stats();          tape statistics of the last recording
//
// run_all<Tool>() checks every result against ADBench's Manual reference,
// then times the plain double objective and the tool side by side.
#ifndef PEERS_HARNESS_HPP
#define PEERS_HARNESS_HPP

#include "common.hpp"

namespace peers {

template <class Tool>
void run_gmm(Tool &tool, bool &all_ok)
{
    const std::string name = "gmm_1k_d10_K25";
    gmm::Data D = read_gmm(adbench_data(name));
    std::vector<double> ref = read_reference(adbench_reference(name));
    const size_t n = D.nparams();
    if (ref.size() != n + 2)
        die("unexpected reference size for " + name);
    std::vector<double> x;
    x.insert(x.end(), D.alphas.begin(), D.alphas.end());
    x.insert(x.end(), D.means.begin(), D.means.end());
    x.insert(x.end(), D.icf.begin(), D.icf.end());

    Check chk;
    double f0 = gmm::objective<double>(D, x.data());
    chk.add(relerr(&f0, &ref[0], 1), 1e-12, "gmm plain objective");
    std::vector<double> g(n, NAN);
    double fx = tool.gmm_gradient(D, x.data(), g.data());
    std::string stats = tool.stats();
    chk.add(relerr(&fx, &ref[0], 1), 1e-12, "gmm AD objective");
    chk.add(relerr(g.data(), &ref[2], n), 1e-9, "gmm gradient");

    std::vector<double> t = measure({
        [&] { sink = gmm::objective<double>(D, x.data()); },
        [&] { sink = tool.gmm_gradient(D, x.data(), g.data()); },
    });
    // the last timed call's gradient, too
    chk.add(relerr(g.data(), &ref[2], n), 1e-9, "gmm gradient (after timing)");
    all_ok = all_ok && chk.ok;
    print_row(name.c_str(), Tool::name, t[0], t[1], 0, chk, stats);
}

template <class Tool>
void run_lstm(Tool &tool, bool &all_ok)
{
    const std::string name = "lstm_l2_c1024";
    lstm::Data D = read_lstm(adbench_data(name));
    std::vector<double> ref = read_reference(adbench_reference(name));
    const size_t n = D.nparams();
    if (ref.size() != n + 2)
        die("unexpected reference size for " + name);
    std::vector<double> x;
    x.insert(x.end(), D.main.begin(), D.main.end());
    x.insert(x.end(), D.extra.begin(), D.extra.end());

    Check chk;
    double f0 = lstm::objective<double>(D, x.data());
    chk.add(relerr(&f0, &ref[0], 1), 1e-12, "lstm plain objective");
    std::vector<double> g(n, NAN);
    double fx = tool.lstm_gradient(D, x.data(), g.data());
    std::string stats = tool.stats();
    chk.add(relerr(&fx, &ref[0], 1), 1e-12, "lstm AD objective");
    chk.add(relerr(g.data(), &ref[2], n), 1e-9, "lstm gradient");

    std::vector<double> t = measure({
        [&] { sink = lstm::objective<double>(D, x.data()); },
        [&] { sink = tool.lstm_gradient(D, x.data(), g.data()); },
    });
    chk.add(relerr(g.data(), &ref[2], n), 1e-9, "lstm gradient (after timing)");

    // The reverse sweep alone, on a tape recorded once.
    double fr = tool.lstm_record(D, x.data());
    chk.add(relerr(&fr, &ref[0], 1), 1e-12, "lstm kept-tape objective");
    std::vector<double> gs(n, NAN);
    tool.lstm_sweep(gs.data());
    chk.add(relerr(gs.data(), &ref[2], n), 1e-9, "lstm kept-tape sweep");
    std::fill(gs.begin(), gs.end(), NAN);
    std::vector<double> ts = measure({[&] {
        tool.lstm_sweep(gs.data());
        sink = gs[0];
    }});
    chk.add(relerr(gs.data(), &ref[2], n), 1e-9, "lstm kept-tape sweep (after timing)");
    tool.lstm_release();

    all_ok = all_ok && chk.ok;
    print_row(name.c_str(), Tool::name, t[0], t[1], ts[0], chk, stats);
}

template <class Tool>
void run_ba(Tool &tool, bool &all_ok)
{
    const std::string name = "ba1_n49_m7776_p31843";
    ba::Data D = read_ba(adbench_data(name));
    std::vector<double> ref = read_reference(adbench_reference(name));
    // [err (2), w_err, sum of squares, J (2 x 15), d w_err / d w]
    if (ref.size() != 35)
        die("unexpected reference size for " + name);
    const double *ref_err = &ref[0], *ref_jac = &ref[4];
    const int nobs = std::min(ba_nobs(), D.p);

    auto plain = [&](int i, double *err) {
        const double *cam = &D.cams[11 * size_t(D.obs[2 * i])];
        const double *X = &D.X[3 * size_t(D.obs[2 * i + 1])];
        ba::reproj_error<double>(cam, X, &D.w[i], &D.feats[2 * size_t(i)], err);
    };

    Check chk;
    double err[2], jac[30];
    double worst_e = 0, worst_j = 0, worst_ad_e = 0;
    for (int i = 0; i < nobs; i++) {
        plain(i, err);
        worst_e = std::max(worst_e, relerr(err, ref_err, 2));
        std::fill(jac, jac + 30, NAN);
        tool.ba_jacobian(D, i, err, jac);
        worst_ad_e = std::max(worst_ad_e, relerr(err, ref_err, 2));
        double ej = relerr(jac, ref_jac, 30);
        worst_j = std::isnan(ej) ? INFINITY : std::max(worst_j, ej);
    }
    std::string stats = tool.stats();
    chk.add(worst_e, 1e-12, "ba plain residuals");
    chk.add(worst_ad_e, 1e-12, "ba AD residuals");
    chk.add(worst_j, 1e-9, "ba jacobian blocks");

    double acc = 0;
    std::vector<double> t = measure({
        [&] {
            double s = 0;
            for (int i = 0; i < nobs; i++) {
                plain(i, err);
                s += err[0] + err[1];
            }
            sink = s;
        },
        [&] {
            double s = 0;
            for (int i = 0; i < nobs; i++) {
                tool.ba_jacobian(D, i, err, jac);
                s += jac[0] + jac[29];
            }
            acc = s;
            sink = s;
        },
    });
    // the timed loop summed the same block nobs times
    double want = double(nobs) * (ref_jac[0] + ref_jac[29]);
    chk.add(std::fabs(acc - want) / std::fabs(want), 1e-9, "ba jacobian (timed loop sum)");
    all_ok = all_ok && chk.ok;
    char prob[64];
    std::snprintf(prob, sizeof prob, "ba1 x%d obs", nobs);
    print_row(prob, Tool::name, t[0], t[1], 0, chk, stats);
}

template <class Tool>
int run_all(Tool &tool)
{
    bool ok = true;
    const char *only = std::getenv("PEERS_ONLY");  // gmm, lstm or ba: one problem
    auto want = [&](const char *p) { return !only || !*only || std::strcmp(only, p) == 0; };
    if (want("gmm"))
        run_gmm(tool, ok);
    if (want("lstm"))
        run_lstm(tool, ok);
    if (want("ba"))
        run_ba(tool, ok);
    return ok ? 0 : 1;
}

}  // namespace peers

#endif
