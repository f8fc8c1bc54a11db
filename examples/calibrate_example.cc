// Built-in example: calibrates a synthetic transformer-like weight with several
// observers and schemes and prints the resulting scales and quantization errors.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "qobs/qobs.h"

namespace {

std::vector<float> make_weight(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::student_t_distribution<float> t(4.0f);
  std::vector<float> w(static_cast<std::size_t>(rows * cols));
  for (auto& v : w) v = 0.02f * t(gen);
  for (int64_t r = 0; r < rows; r += 37) w[static_cast<std::size_t>(r * cols + (r % cols))] *= 25.0f;  // outliers
  return w;
}

double relative_mse(const qobs::Tensor& q, const std::vector<float>& w) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double d = q.get(static_cast<int64_t>(i)) - w[i];
    num += d * d;
    den += static_cast<double>(w[i]) * w[i];
  }
  return num / den;
}

}  // namespace

int main() {
  const int64_t rows = 256, cols = 512;
  const std::vector<float> w = make_weight(rows, cols, 7);
  const qobs::TensorView view(w.data(), qobs::DType::kF32, {rows, cols});

  struct Case {
    const char* scheme;
    const char* observer;
  };
  const Case cases[] = {
      {"W4A16", "memoryless_minmax"},    {"W4A16", "memoryless_mse"},    {"W4A16_ASYM", "memoryless_minmax"},
      {"W4A16_ASYM", "memoryless_mse"},  {"W8A16", "memoryless_minmax"}, {"FP8_DYNAMIC", "memoryless_minmax"},
      {"NVFP4A16", "memoryless_minmax"}, {"NVFP4A16", "memoryless_mse"}, {"NVFP4A16", "nvfp4_expanded_mse"},
      {"MXFP4A16", "memoryless_minmax"}, {"MXFP4A16", "memoryless_mse"},
  };
  std::printf("qobs example: %lldx%lld float32 weight (Student-t, outliers)\n", static_cast<long long>(rows),
              static_cast<long long>(cols));
  std::printf("%-12s %-20s %-12s %-14s %-12s %s\n", "scheme", "observer", "scale shape", "global scale", "rel. MSE",
              "SQNR dB");
  for (const Case& c : cases) {
    const qobs::QuantizationArgs args = *qobs::preset_scheme(c.scheme).weights;
    auto obs = qobs::load_observer(c.observer, "weight", args);
    obs->observe(view);
    const qobs::QParams qp = obs->get_qparams();
    const qobs::Tensor fq = qobs::fake_quantize(view, qp.scale, &qp.zero_point, args, nullptr,
                                                qp.global_scale ? &*qp.global_scale : nullptr);
    const double rmse = relative_mse(fq, w);
    char g[32] = "-";
    if (qp.global_scale) std::snprintf(g, sizeof g, "%.4f", qp.global_scale->get(0));
    std::printf("%-12s %-20s %-12s %-14s %-12.3e %.2f\n", c.scheme, c.observer,
                qobs::shape_str(qp.scale.shape()).c_str(), g, rmse, -10.0 * std::log10(rmse));
  }
  return 0;
}
