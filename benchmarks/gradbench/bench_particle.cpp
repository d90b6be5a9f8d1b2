// bench_particle: GradBench's particle, dualrev's nested reverse mode
// (examples/particle.c, through particle.c) beside GradBench's finite-
// differences tool, in one process on one parsed input.  Our own code: it
// compiles GradBench's tools/finite/particle.cpp in, unchanged (its main
// renamed), from GRADBENCH_DIR at build time (run.sh), and calls the tool's
// Particle class as GradBench's function_main does: constructed once (the
// untimed "prepare"), then compute() per timed call.
//
// Usage: bench_particle INPUT.json LABEL   (REPS, MIN_MS from the environment)

#define main gradbench_finite_particle_main
#include "particle.cpp"  // GRADBENCH_DIR/tools/finite/particle.cpp
#undef main

#include "bench.hpp"
#include "ports.h"

int main(int argc, char** argv) {
  gbb::Args args;
  if (!gbb::parse_args(argc, argv, args))
    return 2;
  const int         reps   = args.reps;
  const double      min_ms = args.min_ms;
  const std::string label  = args.label;
  particle::Input input = gbb::read_input<particle::Input, nlohmann::json>(args.path);
  const double    w0    = input.w0;

  // The descent's first gradient and value are taken at w0.
  double           dr_w = 0, dr_grad = 0, dr_value = 0, cp_grad = 0, cp_value = 0;
  Particle         tool(input);  // GradBench's finite tool
  particle::Output tool_out = 0;
  Outer            outer;  // the tool's cost

  int  status = 0;  // the first dualrev error
  auto keep   = [&](int s) { status = status ? status : s; };
  std::vector<gbb::Timed> fns = {
      {"ad_gradient over ad_gradient_r", [&] { keep(gb_particle(w0, &dr_w)); }},
      {"GradBench finite tool", [&] { tool.compute(tool_out); }},
      {"ad_gradient over ad_gradient_r", [&] { keep(gb_particle_gradient(w0, &dr_grad)); }},
      {"Outer::gradient (finite tool)", [&] { outer.gradient(&w0, &cp_grad); }},
      {"simulation on constants", [&] { keep(gb_particle_objective(w0, &dr_value)); }},
      {"Outer::objective (finite tool)", [&] { Outer::objective(&w0, &cp_value); }},
  };

  auto checks = [&](std::vector<std::string>& out) {
    bool failed = false;
    out         = {
        gbb::verdict(gbb::difference(dr_w, tool_out), failed),
        gbb::verdict(gbb::difference(dr_grad, cp_grad), failed),
        gbb::verdict(gbb::difference(dr_value, cp_value), failed),
    };
    if (status != 0) {
      std::fprintf(stderr, "bench_particle: dualrev: %s\n", gb_strerror(status));
      failed = true;
    }
    return failed;
  };

  for (gbb::Timed& f : fns)
    f.call();
  std::vector<std::string> before;
  bool                     failed = checks(before);
  size_t                   records, reserved;
  gb_particle_gradient(w0, &dr_grad);
  gb_tape_stats(&records, &reserved);
  std::printf("# particle %s: w0 = %g; dualrev tape %zu records (one gradient), %.0f MB "
              "reserved\n",
              label.c_str(), w0, records, (double)reserved / 1e6);
  // For validate.py: both outputs, as GradBench's JSON protocol carries them.
  std::printf("OUTPUT\tparticle\t%s\tdualrev\t%s\n", label.c_str(),
              nlohmann::json(dr_w).dump().c_str());
  std::printf("OUTPUT\tparticle\t%s\tfinite\t%s\n", label.c_str(),
              nlohmann::json(tool_out).dump().c_str());

  if (gbb::measure_checked(fns, reps, min_ms, checks, before, failed)) {
    gbb::row("particle.rr", label, fns[0], fns[1], before[0]);
    gbb::row("particle.gradient", label, fns[2], fns[3], before[1]);
    gbb::row("particle.objective", label, fns[4], fns[5], before[2]);
  }
  return failed ? 1 : 0;
}
