// Min-max of f32 / bf16 / f16 values and groups (minmax_simd.h), compiled for AVX2 and
// AVX-512.
#include "kernels/simd/simd_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/minmax/minmax_simd.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include "kernels/simd/lane_types-inl.h"           // DF, DU, DI, DH, DD, VF, VD, ...
#include "kernels/simd/transpose8-inl.h"           // D8, V8, load8, transpose8x8
#include "kernels/minmax/minmax_keys16_x86-inl.h"  // KeyPassesTo16, KeyPassesToFloats

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "kernels/minmax/minmax_simd.h"
#include "qobs/formats.h"  // f16_to_float, float_to_bf16, double_to_bf16, ...

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Only the AVX2 and AVX-512 passes carry kernels (simd_targets.h); the baseline pass
// Highway always adds stays empty.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

/// MinMaxGroups: num_groups (a multiple of 8) consecutive groups of len (a multiple of
/// 8) values; per group min and max, eight groups per pass, reduced by a transpose.
/// store(g0, mins, maxs) takes the eight groups' results as floats.
template <typename T, class Store>
bool MinMaxGroupsT(const T* x, bool bf16, int64_t num_groups, int64_t len, bool* zero_result, Store store) {
  const D8 d8;
  auto nan = hn::FirstN(d8, 0);
  auto zero = hn::FirstN(d8, 0);
  for (int64_t g0 = 0; g0 < num_groups; g0 += 8) {
    V8 lo[8], hi[8];
    for (int l = 0; l < 8; ++l) {
      const T* p = x + (g0 + l) * len;
      lo[l] = hi[l] = load8(p, bf16);
      nan = hn::Or(nan, hn::IsNaN(lo[l]));
      for (int64_t j = 8; j < len; j += 8) {
        const V8 r = load8(p + j, bf16);
        lo[l] = hn::Min(lo[l], r);
        hi[l] = hn::Max(hi[l], r);
        nan = hn::Or(nan, hn::IsNaN(r));
      }
    }
    V8 clo[8], chi[8];
    transpose8x8(d8, lo, clo);
    transpose8x8(d8, hi, chi);
    for (int k = 1; k < 8; ++k) {
      clo[0] = hn::Min(clo[0], clo[k]);
      chi[0] = hn::Max(chi[0], chi[k]);
    }
    store(g0, clo[0], chi[0]);
    zero = hn::Or(zero, hn::Or(hn::Eq(clo[0], hn::Zero(d8)), hn::Eq(chi[0], hn::Zero(d8))));
  }
  if (!hn::AllFalse(d8, zero)) *zero_result = true;
  return hn::AllFalse(d8, nan);
}

template <typename T>
bool MinMaxGroupsT(const T* x, bool bf16, int64_t num_groups, int64_t len, float* mins, float* maxs,
                   bool* zero_result) {
  return MinMaxGroupsT(x, bf16, num_groups, len, zero_result, [&](int64_t g0, V8 lo, V8 hi) HWY_ATTR {
    const D8 d8;
    hn::StoreU(lo, d8, mins + g0);
    hn::StoreU(hi, d8, maxs + g0);
  });
}

/// Eight results, elements of a bf16 / f16 tensor widened exactly, back to their 16-bit
/// patterns: bf16 is the high half of the float, f16 an exact conversion.
HWY_INLINE void StorePatterns16(V8 v, bool bf16, uint16_t* out) {
  const D8 d8;
  const hn::Rebind<uint16_t, D8> d16;
  if (bf16) {
    // the high half as a non-negative int32 (a logical shift), packed without saturating
    const hn::RebindToUnsigned<D8> du;
    const hn::RebindToSigned<D8> di;
    hn::StoreU(hn::DemoteTo(d16, hn::BitCast(di, hn::ShiftRight<16>(hn::BitCast(du, v)))), d16, out);
  } else {
    hn::StoreU(hn::BitCast(d16, hn::DemoteTo(hn::Rebind<hwy::float16_t, D8>(), v)), d16, out);
  }
}

void MinMaxKeys16(const uint16_t* x, int64_t n, int16_t* lo_out, int16_t* hi_out);  // below

/// The portable form of MinMaxGroupsTo16: the eight-group passes with their results
/// narrowed back to 16-bit patterns in registers (num_groups and len multiples of 8,
/// else -1), the key ranges read back from the stored results while they are in cache.
int MinMaxGroupsTo16Portable(const uint16_t* x, bool bf16, int64_t num_groups, int64_t len, uint16_t* mins,
                             uint16_t* maxs, bool* zero_result, bool /*stream*/, StoredKeyRanges* ranges) {
  *zero_result = false;
  if (num_groups % 8 != 0 || len % 8 != 0) return -1;
  if (!MinMaxGroupsT(x, bf16, num_groups, len, zero_result, [&](int64_t g0, V8 lo, V8 hi) HWY_ATTR {
        StorePatterns16(lo, bf16, mins + g0);
        StorePatterns16(hi, bf16, maxs + g0);
      }))
    return 0;
  *ranges = {};
  MinMaxKeys16(mins, num_groups, &ranges->mins_lo, &ranges->mins_hi);
  MinMaxKeys16(maxs, num_groups, &ranges->maxs_lo, &ranges->maxs_hi);
  return 1;
}

/// The results as 16-bit patterns of the data's own dtype (exact: they are elements),
/// with no float statistics in between: the x86 key passes where the shape allows
/// (minmax_keys16_x86-inl.h; their key ranges come from the registers), else the
/// portable eight-group passes; 1 done, 0 a NaN, -1 not a shape these passes take.
int MinMaxGroupsTo16(const uint16_t* x, bool bf16, int64_t num_groups, int64_t len, uint16_t* mins, uint16_t* maxs,
                     bool* zero_result, bool stream, StoredKeyRanges* ranges) {
  *zero_result = false;
  const int keyed = KeyPassesTo16(x, bf16, num_groups, len, mins, maxs, zero_result, stream, ranges);
  if (keyed >= 0) return keyed;
  return MinMaxGroupsTo16Portable(x, bf16, num_groups, len, mins, maxs, zero_result, stream, ranges);
}

bool MinMaxGroups(const void* x, DType dt, int64_t num_groups, int64_t len, float* mins, float* maxs,
                  bool* zero_result) {
  *zero_result = false;
  if (dt == DType::kF32)
    return MinMaxGroupsT(static_cast<const float*>(x), false, num_groups, len, mins, maxs, zero_result);
  const auto* x16 = static_cast<const uint16_t*>(x);
  const bool bf16 = dt == DType::kBF16;
  const int64_t done = KeyPassesToFloats(x16, bf16, num_groups, len, mins, maxs, zero_result);
  if (done < 0) return false;
  if (done == num_groups) return true;
  return MinMaxGroupsT(x16 + done * len, bf16, num_groups - done, len, mins + done, maxs + done, zero_result);
}

void MinMax(const float* x, int64_t n, float* lo_out, float* hi_out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF lo = hn::Set(df, INFINITY), hi = hn::Set(df, -INFINITY);
  auto nan = hn::FirstN(df, 0);  // all false (MaskFalse is newer than Highway 1.0.3)
  // four independent chains keep the loads streaming
  VF lo1 = lo, hi1 = hi, lo2 = lo, hi2 = hi, lo3 = lo, hi3 = hi;
  int64_t j = 0;
  for (; j + 4 * N <= n; j += 4 * N) {
    const VF a = hn::LoadU(df, x + j), b = hn::LoadU(df, x + j + N), c = hn::LoadU(df, x + j + 2 * N),
             d = hn::LoadU(df, x + j + 3 * N);
    lo = hn::Min(lo, a);
    hi = hn::Max(hi, a);
    lo1 = hn::Min(lo1, b);
    hi1 = hn::Max(hi1, b);
    lo2 = hn::Min(lo2, c);
    hi2 = hn::Max(hi2, c);
    lo3 = hn::Min(lo3, d);
    hi3 = hn::Max(hi3, d);
    nan = hn::Or(nan, hn::Or(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), hn::Or(hn::IsNaN(c), hn::IsNaN(d))));
  }
  for (; j < n; j += N) {
    const auto m = hn::FirstN(df, static_cast<size_t>(n - j));
    const VF a = hn::MaskedLoad(m, df, x + j);
    lo = hn::IfThenElse(m, hn::Min(lo, a), lo);
    hi = hn::IfThenElse(m, hn::Max(hi, a), hi);
    nan = hn::Or(nan, hn::And(m, hn::IsNaN(a)));
  }
  lo = hn::Min(hn::Min(lo, lo1), hn::Min(lo2, lo3));
  hi = hn::Max(hn::Max(hi, hi1), hn::Max(hi2, hi3));
  if (!hn::AllFalse(df, nan)) {
    *lo_out = *hi_out = NAN;  // torch.amin/amax propagate NaN
    return;
  }
  *lo_out = hn::GetLane(hn::MinOfLanes(df, lo));
  *hi_out = hn::GetLane(hn::MaxOfLanes(df, hi));
}

/// The least and greatest int16 key (key16's map, b ^ ((b >> 15) & 0x7FFF)) of n bf16 /
/// f16 patterns: one pass in 16-bit lanes, four independent chains.
void MinMaxKeys16(const uint16_t* x, int64_t n, int16_t* lo_out, int16_t* hi_out) {
  const hn::ScalableTag<int16_t> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const V mag = hn::Set(d, 0x7FFF);
  auto key = [&](const uint16_t* p) HWY_ATTR {
    const V b = hn::LoadU(d, reinterpret_cast<const int16_t*>(p));
    return hn::Xor(b, hn::And(hn::ShiftRight<15>(b), mag));
  };
  V lo0 = hn::Set(d, INT16_MAX), hi0 = hn::Set(d, INT16_MIN);
  V lo1 = lo0, hi1 = hi0, lo2 = lo0, hi2 = hi0, lo3 = lo0, hi3 = hi0;
  int64_t j = 0;
  for (; j + 4 * N <= n; j += 4 * N) {
    const V a = key(x + j), b = key(x + j + N), c = key(x + j + 2 * N), e = key(x + j + 3 * N);
    lo0 = hn::Min(lo0, a);
    hi0 = hn::Max(hi0, a);
    lo1 = hn::Min(lo1, b);
    hi1 = hn::Max(hi1, b);
    lo2 = hn::Min(lo2, c);
    hi2 = hn::Max(hi2, c);
    lo3 = hn::Min(lo3, e);
    hi3 = hn::Max(hi3, e);
  }
  for (; j + N <= n; j += N) {
    const V a = key(x + j);
    lo0 = hn::Min(lo0, a);
    hi0 = hn::Max(hi0, a);
  }
  int16_t lo = hn::GetLane(hn::MinOfLanes(d, hn::Min(hn::Min(lo0, lo1), hn::Min(lo2, lo3))));
  int16_t hi = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hn::Max(hi0, hi1), hn::Max(hi2, hi3))));
  for (; j < n; ++j) {
    lo = std::min(lo, key16_of(x[j]));
    hi = std::max(hi, key16_of(x[j]));
  }
  *lo_out = lo;
  *hi_out = hi;
}

inline constexpr MinmaxSimd kMinmaxSimd{&MinMax, &MinMaxGroups, &MinMaxGroupsTo16, &MinMaxGroupsTo16Portable,
                                        &MinMaxKeys16};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <vector>

#include "kernels/parallel/thread_pool.h"  // parallel_for
#include "kernels/simd/simd_dispatch.h"

namespace qobs::kernels::detail {

const MinmaxSimd* minmax_simd(SimdLevel level) { return QOBS_SIMD_TABLE(MinmaxSimd, kMinmaxSimd); }

StoredKeyRanges stored_key_ranges16(const MinmaxSimd& k, const uint16_t* mins, const uint16_t* maxs, int64_t n) {
  StoredKeyRanges r;
  k.keys16(mins, n, &r.mins_lo, &r.mins_hi);
  k.keys16(maxs, n, &r.maxs_lo, &r.maxs_hi);
  return r;
}
KeyExtremes key_extremes16(int16_t lo, int16_t hi, bool is_bf16) {
  const uint16_t inf = is_bf16 ? 0x7F80u : 0x7C00u;
  KeyExtremes r;
  r.nan = hi > key16_of(inf) || lo < key16_of(static_cast<uint16_t>(inf | 0x8000u));
  r.zero = lo == 0 || lo == -1 || hi == 0 || hi == -1;  // the keys of +0 and -0
  const auto value_of = [&](int16_t k) {
    const auto b = static_cast<uint16_t>(key16_of(static_cast<uint16_t>(k)));  // the map is an involution
    return is_bf16 ? bf16_to_float(b) : f16_to_float(b);
  };
  r.lo = value_of(lo);
  r.hi = value_of(hi);
  return r;
}
KeyExtremes minmax16_threaded(const MinmaxSimd& k, const uint16_t* x, int64_t n, bool is_bf16, int64_t parts,
                              int threads) {
  const int64_t step = (n + parts - 1) / parts;
  std::vector<int16_t> lo(static_cast<std::size_t>(parts), INT16_MAX), hi(static_cast<std::size_t>(parts), INT16_MIN);
  parallel_for(parts, threads, [&](int64_t p, int) {
    const int64_t b = p * step, e = std::min(n, b + step);
    if (e > b) k.keys16(x + b, e - b, &lo[static_cast<std::size_t>(p)], &hi[static_cast<std::size_t>(p)]);
  });
  return key_extremes16(*std::min_element(lo.begin(), lo.end()), *std::max_element(hi.begin(), hi.end()), is_bf16);
}

}  // namespace qobs::kernels::detail
#endif  // HWY_ONCE
