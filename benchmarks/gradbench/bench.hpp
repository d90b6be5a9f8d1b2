// Shared by the harnesses, bench_*.cpp (our own code): their command line,
// CPU time, alternating timed batches, GradBench's comparison metric, and
// the rows that run.sh collects into its table.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace gbb {

// CPU time of the process (one thread here), in ns.
inline double cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return 1e9 * (double)ts.tv_sec + (double)ts.tv_nsec;
}

struct Timed {
  std::string           label;
  std::function<void()> call;
  std::vector<double>   per_call_ms;  // one entry per batch
  long                  iters = 1;    // calls per batch

  Timed(std::string name, std::function<void()> fn)
      : label(std::move(name)), call(std::move(fn)) {}

  double median() const {
    std::vector<double> v = per_call_ms;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
  double min() const { return *std::min_element(per_call_ms.begin(), per_call_ms.end()); }
};

// Each function has been called once already (the checks). One more call
// each sets its batch length (at least min_ms of CPU time); then reps
// rounds, each timing one batch of every function in turn, so that the
// functions alternate and a slow stretch of the machine hits all of them.
inline void measure(std::vector<Timed>& fns, int reps, double min_ms) {
  for (Timed& f : fns) {
    double t0 = cpu_ns();
    f.call();
    double ms = (cpu_ns() - t0) / 1e6;
    f.iters   = ms >= min_ms ? 1 : (long)std::ceil(min_ms / std::max(ms, 1e-3));
  }
  for (int r = 0; r < reps; r++)
    for (Timed& f : fns) {
      double t0 = cpu_ns();
      for (long i = 0; i < f.iters; i++)
        f.call();
      f.per_call_ms.push_back((cpu_ns() - t0) / 1e6 / (double)f.iters);
    }
}

// GradBench's comparison (python/gradbench/gradbench/comparison.py, from
// ADBench): |x - y| / max(1, |x| + |y|) per entry, passing at 1e-4.
constexpr double tolerance = 1e-4;

inline double difference(double x, double y) {
  double d = std::fabs(x - y) / std::max(1.0, std::fabs(x) + std::fabs(y));
  return std::isnan(d) ? INFINITY : d;
}

// The largest difference between a(e) and b(e), e < count.
template <class A, class B>
double max_difference(size_t count, A a, B b) {
  double worst = 0;
  for (size_t e = 0; e < count; e++)
    worst = std::max(worst, difference(a(e), b(e)));
  return worst;
}

// "ok 3.1e-15" or "FAIL 2e-3"; failed is set on a failure.
inline std::string verdict(double worst, bool& failed) {
  char buf[48];
  bool ok = worst <= tolerance;
  failed  = failed || !ok;
  std::snprintf(buf, sizeof buf, "%s %.1e", ok ? "ok" : "FAIL", worst);
  if (!ok)
    std::fprintf(stderr, "CHECK FAILED: difference %.3e above %.0e\n", worst, tolerance);
  return buf;
}

// One table row for run.sh: tab-separated, after "ROW".
inline void row(const std::string& eval, const std::string& input, const Timed& dualrev,
                const Timed& codipack, const std::string& check) {
  std::printf("ROW\t%s\t%s\t%s\t%.3f\t%s\t%.3f\t%s\t%d\t%ld\t%ld\n", eval.c_str(), input.c_str(),
              dualrev.label.c_str(), dualrev.median(), codipack.label.c_str(),
              codipack.median(), check.c_str(), (int)dualrev.per_call_ms.size(), dualrev.iters,
              codipack.iters);
}

// The spread of every timed function, for the raw log.
inline void spread(const std::vector<Timed>& fns) {
  for (const Timed& f : fns) {
    std::printf("# %-44s median %9.3f ms  min %9.3f ms  (%zu batches of %ld)\n",
                f.label.c_str(), f.median(), f.min(), f.per_call_ms.size(), f.iters);
  }
}

// With GB_ONLY set (for perf or callgrind), times only the functions whose
// label contains it, prints their spread and returns true: no table rows.
inline bool only(std::vector<Timed>& fns, int reps, double min_ms) {
  const char* want = std::getenv("GB_ONLY");
  if (want == nullptr || *want == 0)
    return false;
  std::vector<Timed> kept;
  for (Timed& f : fns)
    if (f.label.find(want) != std::string::npos)
      kept.push_back(f);
  measure(kept, reps, min_ms);
  spread(kept);
  return true;
}

// Times fns (unless ONLY names one: only()) and checks again after the
// timing: a verdict that changed reads "before/after", and a failure then
// sets failed.  Whether the rows are to be printed.
template <class Checks>
bool measure_checked(std::vector<Timed>& fns, int reps, double min_ms, Checks checks,
                     std::vector<std::string>& verdicts, bool& failed) {
  if (only(fns, reps, min_ms))
    return false;
  measure(fns, reps, min_ms);
  std::vector<std::string> after;
  failed = checks(after) || failed;
  for (size_t i = 0; i < verdicts.size(); i++)
    if (after[i] != verdicts[i])
      verdicts[i] += "/" + after[i];
  spread(fns);
  return true;
}

inline int env_int(const char* name, int fallback) {
  const char* s = std::getenv(name);
  return s && *s ? std::atoi(s) : fallback;
}

inline double env_double(const char* name, double fallback) {
  const char* s = std::getenv(name);
  return s && *s ? std::atof(s) : fallback;
}

// A harness's command line, INPUT.json LABEL, with REPS and MIN_MS from
// the environment; false (after the usage line) if it is not that.
struct Args {
  std::string path, label;
  int         reps;
  double      min_ms;
};

inline bool parse_args(int argc, char** argv, Args& a) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s INPUT.json LABEL\n", argv[0]);
    return false;
  }
  a = {argv[1], argv[2], env_int("REPS", 7), env_double("MIN_MS", 200)};
  return true;
}

// The eval's input from the file, as GradBench's function_main reads it
// (Json: the tool's nlohmann::json).
template <class Input, class Json>
Input read_input(const std::string& path) {
  std::ifstream file(path);
  return Json::parse(file).template get<Input>();
}

}  // namespace gbb
