// Test helpers: golden-file loading (schema in tools/make_golden.py) and tensor
// comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "qobs/qobs.h"

namespace qobs::testing {

/// A golden file: its tensors by id, and the JSON document.
struct Golden {
  nlohmann::json doc;
  Tensor tensor(const std::string& id) const;
  /// The tensor named by doc field `j` (a string id), or nullopt when null/absent.
  std::optional<Tensor> maybe(const nlohmann::json& j) const;
};

/// Loads tests/golden/<name>; returns nullopt when the file does not exist.
std::optional<Golden> load_golden(const std::string& name);

/// QuantizationArgs from a golden "args" object (model_dump of the reference).
QuantizationArgs args_from_golden(const nlohmann::json& j);

/// The args of a golden case: its "args" (the reference omits keys it did not write,
/// R8.7.5, and serializes zp_dtype as null for symmetric args, R1.3.5) with the
/// in-memory zp_dtype the generator records as "args_zp_dtype".
QuantizationArgs case_args_from_golden(const nlohmann::json& c);

/// n values on the FP6 E2M3 grid (R2.8) for power-of-two scales: x / s on the
/// midpoints of every step (ties to even), on grid values, at the saturation (7.5, the
/// midpoint 7.75 to the would-be 8, beyond) and signed zeros, with s = 2^-4 .. 2^-6 per
/// group of 16 and every other group capped at 7.5, so that min-max scales land on and
/// just past the grid's top. `seed` shifts the sequence.
std::vector<double> fp6_grid_values(int64_t n, uint32_t seed);

/// Bitwise equality with a readable failure description ("" when equal).
std::string describe_difference(const Tensor& expected, const Tensor& actual);

/// The IEEE bit pattern of a float (bit-exact comparisons that tell -0.0 from +0.0).
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

/// The IEEE bit pattern of a double.
inline uint64_t double_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}

/// Distance in units in the last place between two values of a float dtype.
int64_t ulp_distance(DType dt, double a, double b);

/// Runs f; expects exception type E whose message contains every needle.
template <typename E, typename F>
void expect_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no exception";
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

/// A fresh directory under /tmp, removed with its contents at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace qobs::testing
