// The SIMD infrastructure (kernels/simd): the level override, and the x86 table
// lookups against their portable twins.
//
// Tolerance policy: none. Every implementation must give the plain reference's bits
// (the reference fixes a canonical summation order where one is needed; the vector
// |e|^norm replays libm's powf exactly, libm_powf.h).
#include <gtest/gtest.h>

#include "kernels/kernel_test_data.h"

namespace qobs::kernels {
namespace {

using namespace qobs::kernels::testdata;

// ---- dispatch and threads -------------------------------------------------------------

TEST(SimdLevel, ScopedOverrideAndPublicEntryPoint) {
  const QuantizationArgs a = make_args(4, QuantType::kInt, true, Strategy::kGroup, 16);
  const Tensor t = Tensor::from_floats(DType::kF32, {8, 64}, make_data(512, Pattern::kNormal, 1));
  const FlatView flat = flatten_for_calibration(t.view(), "weight", a);
  const GridSearchResult ref = ref::grid_search(flat, a, mse_cfg());
  for (SimdLevel level : available_simd_levels()) {
    ScopedSimdLevel guard(level);
    EXPECT_EQ(active_simd_level(), level);
    EXPECT_EQ(diff(ref, grid_search(flat, a, mse_cfg())), "");
  }
}

TEST(TableLookups, X86LookupsEqualPortableGathers) {
  // The x86 forms of the search kernels' table lookups (table_lookups_x86-inl.h: the
  // 16-entry permute lookup, and the f64 terms by scalar loads / a gather split) against
  // their portable Highway gathers, bit for bit: every 4-bit index in every lane
  // position (and indices whose higher bits are set, which both must ignore), and every
  // bf16 pattern of an error value as the f64 table's index, both signs.
  alignas(64) float table[16];
  for (int i = 0; i < 16; ++i) table[i] = std::ldexp(1.0f + 0.0625f * static_cast<float>(i), i - 7);
  std::vector<double> table64(65536);
  for (std::size_t i = 0; i < table64.size(); ++i)
    table64[i] = static_cast<double>(i) * 0.5 + 1.0 / (1.0 + static_cast<double>(i));
  int levels = 0;
  for (SimdLevel level : available_simd_levels()) {
    if (level == SimdLevel::kScalar) continue;
    ++levels;
    const detail::TableLookupsSimd& k = *detail::table_lookups_simd(level);
    const int64_t N = k.lanes();
    std::vector<int32_t> ef;
    for (int32_t hi : {0, 16, 0x7FF0, -16})
      for (int32_t i = 0; i < 16; ++i)
        for (int64_t l = 0; l < N; ++l) ef.push_back(hi + static_cast<int32_t>((i + l) % 16));
    std::vector<float> a(ef.size()), b(ef.size());
    k.exp_table16(table, ef.data(), static_cast<int64_t>(ef.size()), a.data(), false);
    k.exp_table16(table, ef.data(), static_cast<int64_t>(ef.size()), b.data(), true);
    for (std::size_t j = 0; j < ef.size(); ++j) {
      ASSERT_EQ(float_bits(a[j]), float_bits(b[j])) << to_string(level) << " ef=" << ef[j];
      ASSERT_EQ(float_bits(a[j]), float_bits(table[ef[j] & 15])) << to_string(level) << " ef=" << ef[j];
    }
    std::vector<float> e;
    for (uint32_t p = 0; p < 65536; ++p) e.push_back(bf16_to_float(static_cast<uint16_t>(p)));
    std::vector<double> x(e.size()), y(e.size());
    k.terms_f64(table64.data(), e.data(), static_cast<int64_t>(e.size()), x.data(), false);
    k.terms_f64(table64.data(), e.data(), static_cast<int64_t>(e.size()), y.data(), true);
    for (std::size_t j = 0; j < e.size(); ++j) {
      ASSERT_EQ(double_bits(x[j]), double_bits(y[j])) << to_string(level) << " j=" << j;
      // lane j of a vector holds the pattern of element j: its table entry
      ASSERT_EQ(double_bits(x[j]), double_bits(table64[j])) << to_string(level) << " j=" << j;
    }
  }
  if (levels == 0) GTEST_SKIP() << "no vector level on this machine";
}

}  // namespace
}  // namespace qobs::kernels
