// Which instruction set the fast kernels use, chosen once per call and never changing
// the results (every level is bit-identical to the scalar reference). The level is detected
// once; QOBS_SIMD=scalar|avx2|avx512|auto forces one, and ScopedSimdLevel lets tests
// run every available level in one process. A forced level the CPU lacks falls back
// to the best available one below it (avx512 -> avx2 -> scalar).
#pragma once

#include <string_view>
#include <vector>

namespace qobs::kernels {

enum class SimdLevel { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

std::string_view to_string(SimdLevel level);
/// Highest level this CPU supports (and this binary was compiled for).
SimdLevel best_simd_level();
/// The level the kernels use now: the test override, else QOBS_SIMD, else the best.
SimdLevel active_simd_level();
/// Every level this CPU supports, lowest first (always contains kScalar).
std::vector<SimdLevel> available_simd_levels();

/// RAII override of the active level (tests and benchmarks). Not thread-safe against
/// concurrent kernel calls that start while the guard is being constructed/destroyed.
class ScopedSimdLevel {
 public:
  explicit ScopedSimdLevel(SimdLevel level);
  ~ScopedSimdLevel();
  ScopedSimdLevel(const ScopedSimdLevel&) = delete;
  ScopedSimdLevel& operator=(const ScopedSimdLevel&) = delete;

 private:
  int previous_;
};

}  // namespace qobs::kernels
