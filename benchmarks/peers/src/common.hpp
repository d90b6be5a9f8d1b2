// dualrev benchmarks/peers: our own harness code, under the repository's
// licence.  No peer code lives here: CoDiPack and Adept-2 are fetched by
// fetch_peers.sh into PEERS_DIR, outside the repository, never vendored.
//
// Shared by the three harnesses: ADBench readers, reference files, CPU-time
// measurement (median of 7 interleaved batches, each >= 50 ms), checks and
// the output line.  Include after objectives.hpp.
#ifndef PEERS_COMMON_HPP
#define PEERS_COMMON_HPP

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "objectives.hpp"

namespace peers {

// ------------------------------------------------------------- settings

// ADBench's directory: ADBENCH_DIR, which run.sh always sets (to
// <repo>/../shared/adbench when it exists, else the repository's
// tests/data/adbench).
inline std::string adbench_dir()
{
    const char *e = std::getenv("ADBENCH_DIR");
    if (!e || !*e) {
        std::fprintf(stderr, "error: ADBENCH_DIR is not set (run.sh sets it; by hand: "
                             "ADBENCH_DIR=<repo>/tests/data/adbench)\n");
        std::exit(2);
    }
    return e;
}

// Observations of the BA file whose Jacobian blocks are timed (summed).
inline int ba_nobs()
{
    const char *e = std::getenv("BA_NOBS");
    return e && *e ? std::atoi(e) : 4000;
}

// ---------------------------------------------------------------- files

[[noreturn]] inline void die(const std::string &msg)
{
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    std::exit(2);
}

inline std::ifstream open_in(const std::string &path)
{
    std::ifstream f(path);
    if (!f)
        die("cannot open " + path);
    return f;
}

template <class V>
void read_n(std::istream &in, V &v, size_t n, const std::string &what)
{
    v.resize(n);
    for (size_t i = 0; i < n; i++)
        if (!(in >> v[i]))
            die("short read in " + what);
}

inline gmm::Data read_gmm(const std::string &path)
{
    auto in = open_in(path);
    gmm::Data D;
    in >> D.d >> D.k >> D.n;
    read_n(in, D.alphas, D.k, path);
    read_n(in, D.means, size_t(D.k) * D.d, path);
    read_n(in, D.icf, size_t(D.k) * D.icf_sz(), path);
    read_n(in, D.x, size_t(D.n) * D.d, path);
    if (!(in >> D.gamma >> D.m))
        die("short read in " + path);
    return D;
}

inline lstm::Data read_lstm(const std::string &path)
{
    auto in = open_in(path);
    lstm::Data D;
    in >> D.l >> D.c >> D.b;
    read_n(in, D.main, size_t(8) * D.l * D.b, path);
    read_n(in, D.extra, size_t(3) * D.b, path);
    read_n(in, D.state, size_t(2) * D.l * D.b, path);
    read_n(in, D.seq, size_t(D.c) * D.b, path);
    return D;
}

// ADBench's reader: the file's one camera, point, weight and feature are
// copied to every camera, point and observation; observation i uses camera
// i mod n and point i mod m.
inline ba::Data read_ba(const std::string &path)
{
    auto in = open_in(path);
    ba::Data D;
    in >> D.n >> D.m >> D.p;
    std::vector<double> cam, X, w, feat;
    read_n(in, cam, 11, path);
    read_n(in, X, 3, path);
    read_n(in, w, 1, path);
    read_n(in, feat, 2, path);
    D.cams.resize(size_t(11) * D.n);
    D.X.resize(size_t(3) * D.m);
    D.w.assign(D.p, w[0]);
    D.feats.resize(size_t(2) * D.p);
    D.obs.resize(size_t(2) * D.p);
    for (int i = 0; i < D.n; i++)
        std::copy(cam.begin(), cam.end(), &D.cams[11 * size_t(i)]);
    for (int i = 0; i < D.m; i++)
        std::copy(X.begin(), X.end(), &D.X[3 * size_t(i)]);
    for (int i = 0; i < D.p; i++) {
        D.feats[2 * size_t(i)] = feat[0];
        D.feats[2 * size_t(i) + 1] = feat[1];
        D.obs[2 * size_t(i)] = i % D.n;
        D.obs[2 * size_t(i) + 1] = i % D.m;
    }
    return D;
}

inline bool is_file(const std::string &path)
{
    return std::ifstream(path).good();
}

// A file of ADBench's directory, in either layout: ADBench's own, inputs in
// data/ and references in reference/ (sub), or all files side by side (the
// repository's tests/data/adbench).
inline std::string adbench_file(const char *sub, const std::string &file)
{
    const std::string dir = adbench_dir();
    const std::string nested = dir + "/" + sub + "/" + file, flat = dir + "/" + file;
    if (is_file(nested))
        return nested;
    if (is_file(flat))
        return flat;
    die("no " + file + " in ADBENCH_DIR=" + dir + " (tried " + nested + " and " + flat + ")");
}
inline std::string adbench_data(const std::string &name)
{
    return adbench_file("data", name + ".txt");
}
inline std::string adbench_reference(const std::string &name)
{
    return adbench_file("reference", name + "_manual.txt");
}

// The numbers of a reference file, '#' lines skipped.
inline std::vector<double> read_reference(const std::string &path)
{
    auto in = open_in(path);
    std::vector<double> v;
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#')
            continue;
        std::istringstream ls(line);
        double x;
        while (ls >> x)
            v.push_back(x);
    }
    return v;
}

// --------------------------------------------------------------- checks

// Entrywise relative error: max_i |a_i - b_i| / max(|b_i|, 1e-8 max_j |b_j|)
// (the floor keeps exact zeros of the reference from dividing by zero; every
// entry above it is held to its own relative tolerance).  NaN gives inf.
inline double relerr(const double *a, const double *b, size_t n)
{
    double big = 0;
    for (size_t i = 0; i < n; i++)
        big = std::max(big, std::fabs(b[i]));
    double floor = big > 0 ? 1e-8 * big : 1e-300, worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = std::fabs(a[i] - b[i]) / std::max(std::fabs(b[i]), floor);
        if (std::isnan(e))
            return INFINITY;
        worst = std::max(worst, e);
    }
    return worst;
}

struct Check {
    double worst = 0;  // largest relative error seen
    bool ok = true;
    void add(double err, double tol, const char *what)
    {
        if (!(err <= tol)) {
            ok = false;
            std::fprintf(stderr, "CHECK FAILED: %s: relative error %.3e > %.1e\n", what, err, tol);
        }
        if (!(err <= worst))
            worst = std::isnan(err) ? INFINITY : err;
    }
    std::string str() const
    {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s %.1e", ok ? "ok" : "FAIL", worst);
        return buf;
    }
};

// ---------------------------------------------------------------- timer

inline double cpu_seconds()
{
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Seconds per call of fn, calling it until >= min_s of CPU time has passed.
inline double batch(const std::function<void()> &fn, double min_s)
{
    long count = 0;
    double t0 = cpu_seconds(), t;
    do {
        fn();
        count++;
        t = cpu_seconds();
    } while (t - t0 < min_s);
    return (t - t0) / double(count);
}

inline double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Times the functions side by side: one warm-up batch each, then `batches`
// rounds, each running one batch of every function in turn.  Returns the
// median seconds per call of each.
inline std::vector<double> measure(const std::vector<std::function<void()>> &fns,
                                   int batches = 7, double min_s = 0.05)
{
    std::vector<std::vector<double>> t(fns.size());
    for (auto &f : fns)
        batch(f, min_s);
    for (int b = 0; b < batches; b++)
        for (size_t i = 0; i < fns.size(); i++)
            t[i].push_back(batch(fns[i], min_s));
    std::vector<double> med;
    for (auto &ti : t)
        med.push_back(median(ti));
    return med;
}

// Keeps results alive.
inline volatile double sink;

// --------------------------------------------------------------- output

// One line per (problem, tool).  sweep <= 0 prints "-".
inline void print_row(const char *problem, const char *tool, double plain, double ad,
                      double sweep, const Check &chk, const std::string &stats)
{
    char sw[32] = "-", swr[32] = "-";
    if (sweep > 0) {
        std::snprintf(sw, sizeof sw, "%.4g", sweep * 1e3);
        std::snprintf(swr, sizeof swr, "%.2f", sweep / plain);
    }
    std::printf("ROW\t%s\t%s\t%.4g\t%.4g\t%.2f\t%s\t%s\t%s\t%s\n", problem, tool, plain * 1e3,
                ad * 1e3, ad / plain, sw, swr, chk.str().c_str(), stats.c_str());
    std::fflush(stdout);
}

inline std::string fmt(const char *f, double a)
{
    char buf[128];
    std::snprintf(buf, sizeof buf, f, a);
    return buf;
}

}  // namespace peers

#endif
