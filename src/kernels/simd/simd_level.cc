#include "kernels/simd/simd_level.h"

#include <hwy/targets.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/check.h"

namespace qobs::kernels {

namespace {
// -1: no override; otherwise a SimdLevel value set by ScopedSimdLevel.
std::atomic<int> g_override{-1};

SimdLevel clamp_to_available(SimdLevel want) {
  const SimdLevel best = best_simd_level();
  return static_cast<int>(want) > static_cast<int>(best) ? best : want;
}

SimdLevel level_from_env() {
  const char* env = std::getenv("QOBS_SIMD");
  if (!env || !*env) return best_simd_level();
  const std::string v(env);
  if (v == "auto") return best_simd_level();
  if (v == "scalar") return SimdLevel::kScalar;
  if (v == "avx2") return clamp_to_available(SimdLevel::kAvx2);
  if (v == "avx512") return clamp_to_available(SimdLevel::kAvx512);
  QOBS_THROW(InvalidArgument, "QOBS_SIMD='", v, "': expected scalar, avx2, avx512 or auto");
}
}  // namespace

std::string_view to_string(SimdLevel level) {
  switch (level) {
    case SimdLevel::kScalar:
      return "scalar";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
  }
  return "?";
}

SimdLevel best_simd_level() {
  static const SimdLevel best = [] {
    const int64_t t = hwy::SupportedTargets();
#if HWY_ARCH_X86
    if (t & HWY_AVX3) return SimdLevel::kAvx512;
    if (t & HWY_AVX2) return SimdLevel::kAvx2;
#endif
    (void)t;
    return SimdLevel::kScalar;
  }();
  return best;
}

SimdLevel active_simd_level() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<SimdLevel>(o);
  static const SimdLevel from_env = level_from_env();  // read once: read-only afterwards, no other global state
  return from_env;
}

std::vector<SimdLevel> available_simd_levels() {
  std::vector<SimdLevel> out{SimdLevel::kScalar};
  if (static_cast<int>(best_simd_level()) >= 1) out.push_back(SimdLevel::kAvx2);
  if (static_cast<int>(best_simd_level()) >= 2) out.push_back(SimdLevel::kAvx512);
  return out;
}

ScopedSimdLevel::ScopedSimdLevel(SimdLevel level)
    : previous_(g_override.exchange(static_cast<int>(clamp_to_available(level)))) {}
ScopedSimdLevel::~ScopedSimdLevel() { g_override.store(previous_); }

}  // namespace qobs::kernels
