// bench_saddle: GradBench's saddle, dualrev's nested reverse mode
// (examples/saddle.c, through saddle.c) beside GradBench's finite-
// differences tool, in one process on one parsed input.  Our own code: it
// compiles GradBench's tools/finite/saddle.cpp in, unchanged (its main
// renamed), from GRADBENCH_DIR at build time (run.sh), and calls the tool's
// Saddle class as GradBench's function_main does: constructed once (the
// untimed "prepare"), then compute() per timed call.
//
// Usage: bench_saddle INPUT.json LABEL   (REPS, MIN_MS from the environment)

#define main gradbench_finite_saddle_main
#include "saddle.cpp"  // GRADBENCH_DIR/tools/finite/saddle.cpp
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
  saddle::Input input = gbb::read_input<saddle::Input, nlohmann::json>(args.path);
  const double*  start = input.start;

  // The outer descent's first gradient and value are taken at the start.
  double dr_out[4], dr_grad[2], dr_value = 0, cp_grad[2], cp_value = 0;
  Saddle         tool(input);  // GradBench's finite tool
  saddle::Output tool_out;
  R1Cost         r1(input);  // the tool's outer cost

  int  status = 0;  // the first dualrev error
  auto keep   = [&](int s) { status = status ? status : s; };
  std::vector<gbb::Timed> fns = {
      {"ad_gradient over ad_gradient_r", [&] { keep(gb_saddle(start, dr_out)); }},
      {"GradBench finite tool", [&] { tool.compute(tool_out); }},
      {"ad_gradient over ad_gradient_r",
       [&] { keep(gb_saddle_outer_gradient(start, start, dr_grad)); }},
      {"R1Cost::gradient (finite tool)", [&] { r1.gradient(start, cp_grad); }},
      {"inner descent on constants",
       [&] { keep(gb_saddle_outer_objective(start, start, &dr_value)); }},
      {"R1Cost::objective (finite tool)", [&] { r1.objective(start, &cp_value); }},
  };

  auto checks = [&](std::vector<std::string>& out) {
    bool failed = false;
    out         = {
        gbb::verdict(gbb::max_difference(
                         4, [&](size_t e) { return dr_out[e]; },
                         [&](size_t e) { return tool_out.at(e); }),
                     failed),
        gbb::verdict(gbb::max_difference(
                         2, [&](size_t e) { return dr_grad[e]; },
                         [&](size_t e) { return cp_grad[e]; }),
                     failed),
        gbb::verdict(gbb::difference(dr_value, cp_value), failed),
    };
    if (status != 0) {
      std::fprintf(stderr, "bench_saddle: dualrev: %s\n", gb_strerror(status));
      failed = true;
    }
    return failed;
  };

  for (gbb::Timed& f : fns)
    f.call();
  if (tool_out.size() != 4) {
    std::fprintf(stderr, "bench_saddle: the tool's output has %zu numbers\n", tool_out.size());
    return 1;
  }
  std::vector<std::string> before;
  bool                     failed = checks(before);
  size_t                   records, reserved;
  gb_saddle_outer_gradient(start, start, dr_grad);
  gb_tape_stats(&records, &reserved);
  std::printf("# saddle %s: start (%g, %g); dualrev tape %zu records (one outer gradient), "
              "%.0f MB reserved\n",
              label.c_str(), start[0], start[1], records, (double)reserved / 1e6);
  // For validate.py: both outputs, as GradBench's JSON protocol carries them.
  std::vector<double> dr_vec(dr_out, dr_out + 4);
  std::printf("OUTPUT\tsaddle\t%s\tdualrev\t%s\n", label.c_str(),
              nlohmann::json(dr_vec).dump().c_str());
  std::printf("OUTPUT\tsaddle\t%s\tfinite\t%s\n", label.c_str(),
              nlohmann::json(tool_out).dump().c_str());

  if (gbb::measure_checked(fns, reps, min_ms, checks, before, failed)) {
    gbb::row("saddle.rr", label, fns[0], fns[1], before[0]);
    gbb::row("saddle.gradient", label, fns[2], fns[3], before[1]);
    gbb::row("saddle.objective", label, fns[4], fns[5], before[2]);
  }
  return failed ? 1 : 0;
}
