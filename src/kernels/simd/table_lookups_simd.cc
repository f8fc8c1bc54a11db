// Array forms of the x86 table lookups and their portable twins (table_lookups_simd.h),
// compiled for AVX2 and AVX-512. For the tests only: the kernels inline the lookups.
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/table_lookups_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "kernels/simd/lane_types-inl.h"
#include "kernels/simd/table_lookups_x86-inl.h"

#include "kernels/simd/table_lookups_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Only the AVX2 and AVX-512 passes carry kernels (simd_targets.h); the baseline pass
// Highway always adds stays empty.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

void ExpTable16(const float* table, const int32_t* ef, int64_t n, float* out, bool portable) {
  const DF df;
  const DI di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t j = 0; j + N <= n; j += N) {
    const hn::Vec<DI> v = hn::LoadU(di, ef + j);
    hn::StoreU(portable ? exp_table16_portable(table, v) : exp_table16(table, v), df, out + j);
  }
}

void TermsF64(const double* table64, const float* e, int64_t n, double* out, bool portable) {
  const DF df;
  const DD dd;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t j = 0; j + N <= n; j += N) {
    VD lower = hn::Zero(dd), upper = hn::Zero(dd);
    const VF v = hn::LoadU(df, e + j);
    if (portable) add_table_terms_f64_portable(lower, upper, v, table64);
    else add_table_terms_f64(lower, upper, v, table64);
    hn::StoreU(lower, dd, out + j);
    hn::StoreU(upper, dd, out + j + N / 2);
  }
}

int Lanes() { return static_cast<int>(hn::Lanes(DF())); }

inline constexpr TableLookupsSimd kTableLookupsSimd{&ExpTable16, &TermsF64, &Lanes};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const TableLookupsSimd* table_lookups_simd(SimdLevel level) {
  return QOBS_SIMD_TABLE(TableLookupsSimd, kTableLookupsSimd);
}

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
