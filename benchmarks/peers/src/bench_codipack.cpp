// dualrev benchmarks/peers: our own harness code, under the repository's
// licence.  No peer code lives here: CoDiPack and Adept-2 are fetched by
// fetch_peers.sh into PEERS_DIR, outside the repository, never vendored.
//
// CoDiPack on the shared templated objectives (objectives.hpp),
// T = codi::RealReverse (its recommended default type: Jacobian tape, linear
// index management).  Gradient: setActive, registerInput, f, registerOutput,
// setPassive, seed, evaluate, read, reset -- every call (CoDiPack's
// Tutorial 5, "Repeated tape recordings").
#include <codi.hpp>

#include <memory>

#include "objectives.hpp"

using R = codi::RealReverse;
using Tape = R::Tape;

template <>
inline double Num<R>::v(const R &x) { return x.getValue(); }

#include "harness.hpp"

using namespace peers;

struct CoDiPack {
    static const char *name;
    std::vector<R> xa;        // the inputs, kept between calls
    size_t stmts = 0, args = 0;
    std::unique_ptr<R> kept;  // the output of the kept LSTM tape

    void note_stats(Tape &tape)
    {
        stmts = tape.getParameter(codi::TapeParameters::StatementSize);
        args = tape.getParameter(codi::TapeParameters::JacobianSize);
    }

    template <class F>
    double gradient(size_t n, const double *x, double *g, F f)
    {
        Tape &tape = R::getTape();
        xa.resize(n);
        tape.setActive();
        for (size_t j = 0; j < n; j++) {
            xa[j] = x[j];
            tape.registerInput(xa[j]);
        }
        R y = f(xa.data());
        tape.registerOutput(y);
        tape.setPassive();
        y.setGradient(1.0);
        tape.evaluate();
        for (size_t j = 0; j < n; j++)
            g[j] = xa[j].getGradient();
        note_stats(tape);
        tape.reset();
        return y.getValue();
    }

    double gmm_gradient(const gmm::Data &D, const double *x, double *g)
    {
        return gradient(D.nparams(), x, g, [&](const R *p) { return gmm::objective<R>(D, p); });
    }
    double lstm_gradient(const lstm::Data &D, const double *x, double *g)
    {
        return gradient(D.nparams(), x, g, [&](const R *p) { return lstm::objective<R>(D, p); });
    }

    double lstm_record(const lstm::Data &D, const double *x)
    {
        Tape &tape = R::getTape();
        size_t n = D.nparams();
        xa.resize(n);
        tape.setActive();
        for (size_t j = 0; j < n; j++) {
            xa[j] = x[j];
            tape.registerInput(xa[j]);
        }
        kept.reset(new R(lstm::objective<R>(D, xa.data())));
        tape.registerOutput(*kept);
        tape.setPassive();
        note_stats(tape);
        return kept->getValue();
    }
    void lstm_sweep(double *g)
    {
        Tape &tape = R::getTape();
        tape.clearAdjoints();
        kept->setGradient(1.0);
        tape.evaluate();
        for (size_t j = 0; j < xa.size(); j++)
            g[j] = xa[j].getGradient();
    }
    void lstm_release()
    {
        R::getTape().reset();
        kept.reset();
    }

    void ba_jacobian(const ba::Data &D, int i, double *err, double *jac)
    {
        Tape &tape = R::getTape();
        double in[15];
        ba::gather(D, i, in);
        xa.resize(15);
        tape.setActive();
        for (int j = 0; j < 15; j++) {
            xa[j] = in[j];
            tape.registerInput(xa[j]);
        }
        R e[2];
        ba::reproj_error<R>(&xa[0], &xa[11], &xa[14], &D.feats[2 * size_t(i)], e);
        tape.registerOutput(e[0]);
        tape.registerOutput(e[1]);
        tape.setPassive();
        for (int r = 0; r < 2; r++) {
            if (r)
                tape.clearAdjoints();
            e[r].setGradient(1.0);
            tape.evaluate();
            for (int j = 0; j < 15; j++)
                jac[15 * r + j] = xa[j].getGradient();
        }
        err[0] = e[0].getValue();
        err[1] = e[1].getValue();
        note_stats(tape);
        tape.reset();
    }

    std::string stats()
    {
        return "statements=" + std::to_string(stmts) + " arguments=" + std::to_string(args);
    }
};
const char *CoDiPack::name = "codipack";

int main()
{
    std::printf("# CoDiPack %s, codi::RealReverse, ForcedInlines=%d\n", CODI_VERSION,
                int(codi::Config::ForcedInlines));
#ifdef PEERS_FLAGS
    std::printf("# codipack harness flags: %s\n", PEERS_FLAGS);
#endif
    CoDiPack tool;
    return run_all(tool);
}
