// dualrev benchmarks/peers: our own harness code, under the repository's
// licence.  No peer code lives here: CoDiPack and Adept-2 are fetched by
// fetch_peers.sh into PEERS_DIR, outside the repository, never vendored.
//
// Adept-2 on the shared templated objectives (objectives.hpp),
// T = adept::adouble.  Gradient: set the inputs' values, new_recording, f,
// seed, compute_adjoint, read -- every call (Adept's documented pattern).
#include <adept.h>

#include <memory>

#include "objectives.hpp"

using adept::adouble;

template <>
inline double Num<adouble>::v(const adouble &x) { return x.value(); }

#include "harness.hpp"

using namespace peers;

struct Adept {
    static const char *name;
    adept::Stack stack;            // the active stack of this thread
    std::vector<adouble> xa;       // the inputs, kept between calls
    size_t stmts = 0, ops = 0;
    std::unique_ptr<adouble> kept; // the output of the kept LSTM recording

    void note_stats()
    {
        stmts = stack.n_statements();
        ops = stack.n_operations();
    }

    void set_inputs(size_t n, const double *x)
    {
        if (xa.size() != n)
            xa = std::vector<adouble>(n);
        for (size_t j = 0; j < n; j++)
            xa[j].set_value(x[j]);
    }

    template <class F>
    double gradient(size_t n, const double *x, double *g, F f)
    {
        set_inputs(n, x);
        stack.new_recording();
        adouble y = f(xa.data());
        y.set_gradient(1.0);
        stack.compute_adjoint();
        for (size_t j = 0; j < n; j++)
            g[j] = xa[j].get_gradient();
        note_stats();
        return y.value();
    }

    double gmm_gradient(const gmm::Data &D, const double *x, double *g)
    {
        return gradient(D.nparams(), x, g,
                        [&](const adouble *p) { return gmm::objective<adouble>(D, p); });
    }
    double lstm_gradient(const lstm::Data &D, const double *x, double *g)
    {
        return gradient(D.nparams(), x, g,
                        [&](const adouble *p) { return lstm::objective<adouble>(D, p); });
    }

    double lstm_record(const lstm::Data &D, const double *x)
    {
        set_inputs(D.nparams(), x);
        stack.new_recording();
        kept.reset(new adouble(lstm::objective<adouble>(D, xa.data())));
        note_stats();
        return kept->value();
    }
    void lstm_sweep(double *g)
    {
        stack.clear_gradients();
        kept->set_gradient(1.0);
        stack.compute_adjoint();
        for (size_t j = 0; j < xa.size(); j++)
            g[j] = xa[j].get_gradient();
    }
    void lstm_release() { kept.reset(); }

    void ba_jacobian(const ba::Data &D, int i, double *err, double *jac)
    {
        double in[15];
        ba::gather(D, i, in);
        set_inputs(15, in);
        stack.new_recording();
        adouble e[2];
        ba::reproj_error<adouble>(&xa[0], &xa[11], &xa[14], &D.feats[2 * size_t(i)], e);
        for (int r = 0; r < 2; r++) {
            if (r)
                stack.clear_gradients();
            e[r].set_gradient(1.0);
            stack.compute_adjoint();
            for (int j = 0; j < 15; j++)
                jac[15 * r + j] = xa[j].get_gradient();
        }
        err[0] = e[0].value();
        err[1] = e[1].value();
        note_stats();
    }

    std::string stats()
    {
        return "statements=" + std::to_string(stmts) + " operations=" + std::to_string(ops);
    }
};
const char *Adept::name = "adept";

int main()
{
    std::printf("# Adept %s, adept::adouble, library compiled with: %s\n",
                adept::version().c_str(), adept::compiler_flags().c_str());
#ifdef PEERS_FLAGS
    std::printf("# adept harness flags: %s\n", PEERS_FLAGS);
#endif
    Adept tool;
    return run_all(tool);
}
