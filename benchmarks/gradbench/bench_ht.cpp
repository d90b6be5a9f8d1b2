// bench_ht: GradBench's ht "jacobian", dualrev (ht.c) beside GradBench's
// CoDiPack tool, in one process on one parsed input.  Our own code: it
// compiles GradBench's tools/codipack/ht.cpp in, unchanged (its main
// renamed), from GRADBENCH_DIR at build time (run.sh), and calls the
// tool's Jacobian class as GradBench's function_main does: constructed
// once (the untimed "prepare"), then compute() per timed call.
//
// Usage: bench_ht INPUT.json LABEL   (REPS, MIN_MS from the environment)

#define main gradbench_codipack_ht_main
#include "ht.cpp"  // GRADBENCH_DIR/tools/codipack/ht.cpp
#undef main

#include "bench.hpp"
#include "ports.h"

namespace {

// The same Jacobian with CoDiPack's forward vector mode (the tool's type,
// RealForwardVec<4>, and seeds) in ceil(28 / 4) = 7 passes: the tool's
// codiGetRuns rounds (size + size - 1) / 4 = 13 passes for 28 columns, the
// last 6 with no direction seeded.  Ours, to show what that costs.
class CodiSevenPasses {
  using Real = codi::RealForwardVec<4>;
  static constexpr int dim = 4;

  ht::Input&        in;
  std::vector<Real> theta, us, err;

public:
  explicit CodiSevenPasses(ht::Input& input)
      : in(input), theta(input.theta.begin(), input.theta.end()),
        us(input.us.begin(), input.us.end()), err(3 * input.data.correspondences.size()) {}

  void seed(int col, int d, double v) {
    if (col >= 2)
      theta[col - 2].gradient()[d] = v;
    else
      for (size_t j = (size_t)col; j < us.size(); j += 2)
        us[j].gradient()[d] = v;
  }

  void compute(std::vector<double>& J) {
    const int cols = GB_HT_COLS, rows = (int)err.size();
    J.resize((size_t)cols * rows);
    for (int offset = 0; offset < cols; offset += dim) {
      int width = std::min(dim, cols - offset);
      for (int d = 0; d < width; d++)
        seed(offset + d, d, 1.0);
      ht::objective(theta.data(), us.data(), &in.data, err.data());
      for (int d = 0; d < width; d++) {
        for (int j = 0; j < rows; j++)
          J[(size_t)(offset + d) * rows + j] = err[j].getGradient()[d];
        seed(offset + d, d, 0.0);
      }
    }
  }
};

// Our port's view of GradBench's parsed input: pointers into its
// column-major LightMatrix data, the 4 x 4 matrices and triangles gathered
// into arrays of their own.
struct PortInput {
  std::vector<double> base_relatives, inverse_base_absolutes;
  std::vector<int>    triangles;
  gb_ht_input         in{};

  explicit PortInput(const ht::Input& input) {
    const ht::ModelLightMatrix& m = input.data.model;
    int bones = (int)m.bone_names.size();
    for (int b = 0; b < bones; b++) {
      check(m.base_relatives[b].nrows_ == 4 && m.base_relatives[b].ncols_ == 4, "4 x 4 bone");
      check(m.inverse_base_absolutes[b].nrows_ == 4 && m.inverse_base_absolutes[b].ncols_ == 4,
            "4 x 4 bone");
      base_relatives.insert(base_relatives.end(), m.base_relatives[b].data_,
                            m.base_relatives[b].data_ + 16);
      inverse_base_absolutes.insert(inverse_base_absolutes.end(),
                                    m.inverse_base_absolutes[b].data_,
                                    m.inverse_base_absolutes[b].data_ + 16);
    }
    for (const Triangle& t : m.triangles)
      triangles.insert(triangles.end(), t.verts, t.verts + 3);
    check(m.base_positions.nrows_ == 4, "homogeneous base positions");
    check(m.weights.nrows_ == bones && m.weights.ncols_ == m.base_positions.ncols_, "weights");
    check(input.theta.size() == GB_HT_THETA, "26 theta");
    check(input.us.size() == 2 * input.data.correspondences.size(), "the complicated variant");

    in.bones                  = bones;
    in.parents                = m.parents.data();
    in.base_relatives         = base_relatives.data();
    in.inverse_base_absolutes = inverse_base_absolutes.data();
    in.vertices               = m.base_positions.ncols_;
    in.base_positions         = m.base_positions.data_;
    in.weights                = m.weights.data_;
    in.triangles              = triangles.data();
    in.is_mirrored            = m.is_mirrored;
    in.points                 = (int)input.data.correspondences.size();
    in.correspondences        = input.data.correspondences.data();
    in.data_points            = input.data.points.data_;
    in.theta                  = input.theta.data();
    in.us                     = input.us.data();
  }

  static void check(bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "bench_ht: unexpected input shape (%s)\n", what);
      std::exit(2);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  gbb::Args args;
  if (!gbb::parse_args(argc, argv, args))
    return 2;
  const int         reps   = args.reps;
  const double      min_ms = args.min_ms;
  const std::string label  = args.label;
  ht::Input input = gbb::read_input<ht::Input, nlohmann::json>(args.path);

  PortInput           port(input);
  const size_t        m = 3 * (size_t)port.in.points, cols = GB_HT_COLS;
  gb_ht_work*         work = gb_ht_work_new(&port.in);
  std::vector<double> dr_err(m), dr_jac(m * cols), dr_lin_err(m), dr_lin_jac(m * cols),
      dr_obj(m), cp7_jac;
  if (work == nullptr) {
    std::fprintf(stderr, "bench_ht: out of memory\n");
    return 2;
  }

  Jacobian        tool(input);  // GradBench's CoDiPack tool
  ht::JacOutput   tool_out;
  ht::Objective   golden(input);  // GradBench's objective on doubles
  ht::ObjOutput   golden_out;
  CodiSevenPasses cp7(input);

  int  status = 0;  // the first dualrev error
  auto keep   = [&](int s) { status = status ? status : s; };
  std::vector<gbb::Timed> fns = {
      {"ad_jacobian",
       [&] { keep(gb_ht_jacobian(&port.in, dr_err.data(), dr_jac.data())); }},
      {"GradBench tool (RealForwardVec<4>)", [&] { tool.compute(tool_out); }},
      {"ad_linearize + ad_linear_jvps",
       [&] {
         keep(gb_ht_jacobian_linear(&port.in, work, dr_lin_err.data(), dr_lin_jac.data()));
       }},
      {"RealForwardVec<4>, 7 passes (our driver)", [&] { cp7.compute(cp7_jac); }},
      {"our C port on double", [&] { gb_ht_objective(&port.in, dr_obj.data()); }},
      {"GradBench objective<double>", [&] { golden.compute(golden_out); }},
  };

  // GradBench's layout: column c of the Jacobian at [c * m, (c + 1) * m).
  auto tool_J = [&](size_t e) { return tool_out.jacobian[e]; };
  auto checks = [&](std::vector<std::string>& out) {
    bool failed = false;
    out         = {
        gbb::verdict(gbb::max_difference(
                         m * cols,
                         [&](size_t e) { return dr_jac[(e % m) * cols + e / m]; }, tool_J),
                     failed),
        gbb::verdict(gbb::max_difference(
                         m * cols, [&](size_t e) { return dr_lin_jac[e]; }, tool_J),
                     failed),
        gbb::verdict(gbb::max_difference(
                         m * cols, [&](size_t e) { return cp7_jac[e]; }, tool_J),
                     failed),
        gbb::verdict(std::max({gbb::max_difference(
                                   m, [&](size_t e) { return dr_obj[e]; },
                                   [&](size_t e) { return golden_out[e]; }),
                               gbb::max_difference(
                                   m, [&](size_t e) { return dr_err[e]; },
                                   [&](size_t e) { return golden_out[e]; }),
                               gbb::max_difference(
                                   m, [&](size_t e) { return dr_lin_err[e]; },
                                   [&](size_t e) { return golden_out[e]; })}),
                     failed),
    };
    if (status != 0) {
      std::fprintf(stderr, "bench_ht: dualrev: %s\n", gb_strerror(status));
      failed = true;
    }
    return failed;
  };

  for (gbb::Timed& f : fns)
    f.call();
  if (tool_out.jacobian_nrows != (int)m || tool_out.jacobian_ncols != (int)cols ||
      golden_out.size() != m) {
    std::fprintf(stderr, "bench_ht: the tool's Jacobian is %d x %d\n", tool_out.jacobian_nrows,
                 tool_out.jacobian_ncols);
    gb_ht_work_free(work);
    return 1;
  }
  std::vector<std::string> before;
  bool                     failed = checks(before);
  size_t records, reserved;
  gb_ht_jacobian(&port.in, dr_err.data(), dr_jac.data());
  gb_tape_stats(&records, &reserved);
  std::printf("# ht %s: %d points, %d vertices, %d bones; Jacobian %zu x %zu; dualrev tape "
              "%zu records (ad_jacobian), %.0f MB reserved\n",
              label.c_str(), port.in.points, port.in.vertices, port.in.bones, m, cols, records,
              (double)reserved / 1e6);

  if (gbb::measure_checked(fns, reps, min_ms, checks, before, failed)) {
    gbb::row("ht.jacobian", label, fns[0], fns[1], before[0]);
    gbb::row("ht.jacobian", label, fns[2], fns[1], before[1]);
    gbb::row("ht.jacobian", label, fns[0], fns[3], before[2]);
    gbb::row("ht.objective", label, fns[4], fns[5], before[3]);
  }
  gb_ht_work_free(work);
  return failed ? 1 : 0;
}
