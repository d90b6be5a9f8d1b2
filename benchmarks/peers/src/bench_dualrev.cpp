// dualrev benchmarks/peers: our own harness code, under the repository's
// licence.  No peer code lives here: CoDiPack and Adept-2 are fetched by
// fetch_peers.sh into PEERS_DIR, outside the repository, never vendored.
//
// dualrev on the shared templated objectives (objectives.hpp), T = ad::real.
// Gradients by ad_gradient (a new recording per call), the kept-tape sweeps
// by ad_linearize once and ad_linear_vjp, BA blocks by ad_jacobian.
#include <dualrev.hpp>

#include <dlfcn.h>

#include "objectives.hpp"

template <>
inline ad::real Num<ad::real>::c(double x) { return ad::constant<ad::real>(x); }
template <>
inline double Num<ad::real>::v(const ad::real &x) { return ad::value(x); }

#include "harness.hpp"

using namespace peers;

struct Dualrev {
    static const char *name;
    ad_linear *L = nullptr;
    size_t lstm_n = 0;

    static void check(ad_status s, const char *what)
    {
        if (s != AD_OK)
            die(std::string("dualrev ") + what + ": " + ad_strerror(s));
    }

    static ad_real gmm_f(const ad_real *x, size_t, void *ctx)
    {
        return gmm::objective<ad::real>(*static_cast<const gmm::Data *>(ctx), x);
    }
    static ad_real lstm_f(const ad_real *x, size_t, void *ctx)
    {
        return lstm::objective<ad::real>(*static_cast<const lstm::Data *>(ctx), x);
    }
    static void lstm_fv(const ad_real *x, size_t, ad_real *y, size_t, void *ctx)
    {
        y[0] = lstm::objective<ad::real>(*static_cast<const lstm::Data *>(ctx), x);
    }
    // ctx: the observation's feature (2 doubles)
    static void ba_f(const ad_real *x, size_t, ad_real *y, size_t, void *ctx)
    {
        ba::reproj_error<ad::real>(x, x + 11, x + 14, static_cast<const double *>(ctx), y);
    }

    double gmm_gradient(const gmm::Data &D, const double *x, double *g)
    {
        double fx;
        check(ad_gradient(gmm_f, const_cast<gmm::Data *>(&D), D.nparams(), x, &fx, g),
              "ad_gradient");
        return fx;
    }
    double lstm_gradient(const lstm::Data &D, const double *x, double *g)
    {
        double fx;
        check(ad_gradient(lstm_f, const_cast<lstm::Data *>(&D), D.nparams(), x, &fx, g),
              "ad_gradient");
        return fx;
    }
    double lstm_record(const lstm::Data &D, const double *x)
    {
        double y;
        lstm_n = D.nparams();
        check(ad_linearize(lstm_fv, const_cast<lstm::Data *>(&D), lstm_n, x, 1, &y, &L),
              "ad_linearize");
        return y;
    }
    void lstm_sweep(double *g)
    {
        static const double w = 1.0;
        check(ad_linear_vjp(L, &w, g), "ad_linear_vjp");
    }
    void lstm_release()
    {
        ad_linear_free(L);
        L = nullptr;
    }
    void ba_jacobian(const ba::Data &D, int i, double *err, double *jac)
    {
        double in[15];
        ba::gather(D, i, in);
        check(ad_jacobian(ba_f, const_cast<double *>(&D.feats[2 * size_t(i)]), 15, in, 2, err,
                          jac),
              "ad_jacobian");
    }
    std::string stats()
    {
        ad_tape_stats st;
        check(ad_tape_stats_get(&st), "ad_tape_stats_get");
        return "records=" + std::to_string(st.records) +
               " tape_reserved_MiB=" + fmt("%.1f", double(st.tape_bytes) / 1048576.0);
    }
};
const char *Dualrev::name = "dualrev";

int main()
{
    Dl_info info{};
    const char *lib = dladdr(reinterpret_cast<void *>(&ad_version), &info) && info.dli_fname
                          ? info.dli_fname
                          : "?";
    std::printf("# dualrev %s (headers %s), library %s\n", ad_version(), DUALREV_VERSION_STRING,
                lib);
#ifdef PEERS_FLAGS
    std::printf("# dualrev harness flags: %s\n", PEERS_FLAGS);
#endif
    Dualrev tool;
    return run_all(tool);
}
