// bench_kmeans: GradBench's kmeans "dir", dualrev (kmeans.c) beside
// GradBench's CoDiPack tool, in one process on one parsed input.  Our own
// code: it compiles GradBench's tools/codipack/kmeans.cpp in, unchanged
// (its main renamed), from GRADBENCH_DIR at build time (run.sh), and calls
// the tool's Dir class as GradBench's function_main does: constructed once
// (the untimed "prepare"), then compute() per timed call.
//
// Usage: bench_kmeans INPUT.json LABEL   (REPS, MIN_MS from the environment)

#define main gradbench_codipack_kmeans_main
#include "kmeans.cpp"  // GRADBENCH_DIR/tools/codipack/kmeans.cpp
#undef main

#include <sstream>

#include "bench.hpp"
#include "ports.h"

namespace {

// The gradient alone with CoDiPack's default reverse type, RealReverse (a
// Jacobian tape), through GradBench's kmeans::objective: ours, beside
// ad_gradient.  The tape steps are those of the tool's runner
// (codi_impl.hpp): record, seed, evaluate, read and clear the inputs'
// adjoints, reset(false).
class CodiGradient {
  using Real = codi::RealReverse;

  kmeans::Input&    in;
  std::vector<Real> centroids;
  Real              err;

public:
  explicit CodiGradient(kmeans::Input& input)
      : in(input), centroids(input.centroids.begin(), input.centroids.end()) {}

  void compute(std::vector<double>& grad) {
    Real::Tape& tape = Real::getTape();
    grad.resize(centroids.size());
    tape.setActive();
    for (Real& c : centroids)
      tape.registerInput(c);
    kmeans::objective<Real>(in.n, in.k, in.d, in.points.data(), centroids.data(), &err);
    tape.registerOutput(err);
    tape.setPassive();
    err.setGradient(1.0);
    tape.evaluate();
    for (size_t i = 0; i < centroids.size(); i++) {
      grad[i]                  = centroids[i].getGradient();
      centroids[i].gradient() = 0.0;
    }
    tape.reset(false);
  }

  // The statements and Jacobian entries (arguments) of one recording, and
  // the bytes used, from CoDiPack's tape statistics.
  std::string tape_size() {
    Real::Tape& tape = Real::getTape();
    tape.setActive();
    for (Real& c : centroids)
      tape.registerInput(c);
    kmeans::objective<Real>(in.n, in.k, in.d, in.points.data(), centroids.data(), &err);
    tape.registerOutput(err);
    tape.setPassive();
    codi::TapeValues  values = tape.getTapeValues();
    std::stringstream text;
    values.formatDefault(text);
    tape.reset();
    std::string line, section, statements = "?", jacobians = "?";
    while (std::getline(text, line)) {
      size_t colon = line.find(':');
      if (line.rfind("  ", 0) != 0 && line.rfind("-", 0) != 0)
        section = line;
      else if (line.find("Total number") != std::string::npos && colon != std::string::npos &&
               (section == "Statement entries" || section == "Jacobian entries"))
        (section == "Statement entries" ? statements : jacobians) =
            std::to_string(std::stoul(line.substr(colon + 1)));
    }
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s statements, %s arguments, %.0f MB used", statements.c_str(),
                  jacobians.c_str(), values.getUsedMemorySize() / 1e6);
    return buf;
  }
};

// GradBench's expected "dir" (its manual tool's formula): each centroid
// minus the mean of the points nearest to it.  Our own loop.
std::vector<double> closed_form_dir(const kmeans::Input& in) {
  std::vector<double> sum((size_t)in.k * in.d, 0.0), dir((size_t)in.k * in.d);
  std::vector<int>    size(in.k, 0);
  for (int i = 0; i < in.n; i++) {
    const double* a    = &in.points[(size_t)i * in.d];
    int           best = 0;
    double        bd   = INFINITY;
    for (int j = 0; j < in.k; j++) {
      double dist = 0;
      for (int l = 0; l < in.d; l++) {
        double t = a[l] - in.centroids[(size_t)j * in.d + l];
        dist += t * t;
      }
      if (dist < bd) {
        bd   = dist;
        best = j;
      }
    }
    size[best]++;
    for (int l = 0; l < in.d; l++)
      sum[(size_t)best * in.d + l] += a[l];
  }
  for (int j = 0; j < in.k; j++)
    for (int l = 0; l < in.d; l++)
      dir[(size_t)j * in.d + l] =
          in.centroids[(size_t)j * in.d + l] - sum[(size_t)j * in.d + l] / size[j];
  return dir;
}

}  // namespace

int main(int argc, char** argv) {
  gbb::Args args;
  if (!gbb::parse_args(argc, argv, args))
    return 2;
  const int         reps   = args.reps;
  const double      min_ms = args.min_ms;
  const std::string label  = args.label;
  kmeans::Input input = gbb::read_input<kmeans::Input, nlohmann::json>(args.path);

  const int       n = input.n, k = input.k, d = input.d;
  const size_t    kd   = (size_t)k * d;
  gb_kmeans_work* work = gb_kmeans_work_new(k, d);
  if (work == nullptr) {
    std::fprintf(stderr, "bench_kmeans: out of memory\n");
    return 2;
  }
  std::vector<double> dr_dir(kd), dr_grad(kd), cp_grad;
  double              dr_cost = 0, dr_grad_cost = 0;

  Dir                 tool(input);  // GradBench's CoDiPack tool
  kmeans::DirOutput   tool_out;
  kmeans::Cost        golden(input);  // GradBench's cost on doubles
  kmeans::CostOutput  golden_out = 0;
  CodiGradient        cp_gradient(input);
  std::vector<double> expected = closed_form_dir(input);

  int  status = 0;  // the first dualrev error
  auto keep   = [&](int s) { status = status ? status : s; };
  const double* P = input.points.data();
  const double* C = input.centroids.data();
  std::vector<gbb::Timed> fns = {
      {"ad_hvp (ones) + divide", [&] { keep(gb_kmeans_dir(n, k, d, P, C, work, dr_dir.data())); }},
      {"GradBench tool (RealReverseGen<RealForward>)", [&] { tool.compute(tool_out); }},
      {"ad_gradient", [&] { keep(gb_kmeans_grad(n, k, d, P, C, &dr_grad_cost, dr_grad.data())); }},
      {"RealReverse gradient (our driver)", [&] { cp_gradient.compute(cp_grad); }},
      {"our C port on double", [&] { dr_cost = gb_kmeans_cost(n, k, d, P, C); }},
      {"GradBench objective<double>", [&] { golden.compute(golden_out); }},
  };

  auto checks = [&](std::vector<std::string>& out) {
    bool failed = false;
    auto at     = [](const std::vector<double>& v) { return [&v](size_t e) { return v[e]; }; };
    out         = {
        gbb::verdict(std::max(gbb::max_difference(kd, at(dr_dir), at(tool_out.dir)),
                                      gbb::max_difference(kd, at(dr_dir), at(expected))),
                             failed),
        gbb::verdict(gbb::max_difference(kd, at(dr_grad), at(cp_grad)), failed),
        gbb::verdict(std::max(gbb::difference(dr_cost, golden_out),
                                      gbb::difference(dr_grad_cost, golden_out)),
                             failed),
    };
    if (status != 0) {
      std::fprintf(stderr, "bench_kmeans: dualrev: %s\n", gb_strerror(status));
      failed = true;
    }
    return failed;
  };

  for (gbb::Timed& f : fns)
    f.call();
  std::vector<std::string> before;
  bool                     failed = checks(before);
  size_t                   records, reserved;
  gb_kmeans_dir(n, k, d, P, C, work, dr_dir.data());
  gb_tape_stats(&records, &reserved);
  std::printf("# kmeans %s: n=%d k=%d d=%d; dualrev tape %zu records (ad_hvp), %.0f MB reserved;"
              " CoDiPack RealReverse tape %s; tool vs closed form %.1e\n",
              label.c_str(), n, k, d, records, (double)reserved / 1e6,
              cp_gradient.tape_size().c_str(),
              gbb::max_difference(
                  kd, [&](size_t e) { return tool_out.dir[e]; },
                  [&](size_t e) { return expected[e]; }));

  if (gbb::measure_checked(fns, reps, min_ms, checks, before, failed)) {
    gbb::row("kmeans.dir", label, fns[0], fns[1], before[0]);
    gbb::row("kmeans.gradient", label, fns[2], fns[3], before[1]);
    gbb::row("kmeans.cost", label, fns[4], fns[5], before[2]);
  }
  gb_kmeans_work_free(work);
  return failed ? 1 : 0;
}
