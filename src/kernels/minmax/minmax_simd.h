// The vector min-max kernels (minmax_simd.cc, with the x86 16-bit key passes of
// minmax_keys16_x86-inl.h): NaN-propagating min / max of an array, of small groups
// eight (or 16 / 32) per pass, and the int16 key extremes of 16-bit patterns. Scalar
// twin: the nan_min / nan_max loop of ref::minmax (minmax_ref.cc); the caller settles
// the sign of a zero result (settle_zero_signs in group_minmax.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/simd/simd_level.h"
#include "qobs/dtype.h"

namespace qobs::kernels::detail {

/// The least and greatest int16 key of n >= 1 bf16 / f16 bit patterns b, the key being
/// b ^ ((b >> 15) & 0x7FFF) (as int16): the keys' signed order is the values' order for
/// every non-NaN (-0 just below +0), and NaNs map beyond the keys of +-inf, so the two
/// results alone show the extremes, and whether a NaN or an infinity is present. The
/// map is its own inverse.
inline int16_t key16_of(uint16_t b) { return static_cast<int16_t>(b ^ ((b & 0x8000u) ? 0x7FFFu : 0u)); }
/// What the least and greatest keys say: a NaN is present, or one of the extremes is a
/// zero (whose sign the callers' rules settle from the order of the values), or else
/// the extremes as floats (exact).
struct KeyExtremes {
  bool nan = false;
  bool zero = false;
  float lo = 0.0f, hi = 0.0f;
};
KeyExtremes key_extremes16(int16_t lo, int16_t hi, bool is_bf16);
/// The least and greatest keys of stored 16-bit mins and of stored 16-bit maxs.
struct StoredKeyRanges {
  int16_t mins_lo = INT16_MAX, mins_hi = INT16_MIN, maxs_lo = INT16_MAX, maxs_hi = INT16_MIN;
  void merge(const StoredKeyRanges& o) {
    mins_lo = std::min(mins_lo, o.mins_lo);
    mins_hi = std::max(mins_hi, o.mins_hi);
    maxs_lo = std::min(maxs_lo, o.maxs_lo);
    maxs_hi = std::max(maxs_hi, o.maxs_hi);
  }
};

/// The vector min-max kernels (simd_dispatch.h).
struct MinmaxSimd {
  /// NaN-propagating min and max of n floats (n >= 1).
  void (*minmax)(const float* x, int64_t n, float* lo, float* hi);
  /// Min and max of each of num_groups (a multiple of 8) consecutive groups of len (a
  /// multiple of 8) f32 / bf16 / f16 values (dt): eight groups per pass, or on AVX-512
  /// 32 groups of 16-bit values (len 16 or a multiple of 32) per pass in int16 keys.
  /// The sign of a zero result is unspecified (the caller settles it), and *zero_result
  /// says whether any result is a zero, so that the caller looks only then; false when
  /// some value is NaN.
  bool (*groups)(const void* x, DType dt, int64_t num_groups, int64_t len, float* mins, float* maxs, bool* zero_result);
  /// groups with the results stored as the data's own 16-bit patterns (no float
  /// statistics in between): the x86 key passes (minmax_keys16_x86-inl.h: AVX-512 32
  /// groups per pass, num_groups a multiple of 32 and len 16 or a multiple of 32; AVX2
  /// 16, multiples of 16), else the eight-group passes (num_groups and len multiples of
  /// 8). Returns 1 when done, 0 when some value is NaN, -1 when the shape has no such
  /// pass (the caller takes `groups`). Zero signs as there. On 1, *ranges holds the
  /// StoredKeyRanges of what was stored. `stream`: write the results by streaming
  /// stores where the passes and the alignment allow (stream_store.h); the same bytes.
  int (*groups_to16)(const uint16_t* x, bool bf16, int64_t num_groups, int64_t len, uint16_t* mins, uint16_t* maxs,
                     bool* zero_result, bool stream, StoredKeyRanges* ranges);
  /// groups_to16 by the portable eight-group passes alone: the x86 key passes' twin.
  int (*groups_to16_portable)(const uint16_t* x, bool bf16, int64_t num_groups, int64_t len, uint16_t* mins,
                              uint16_t* maxs, bool* zero_result, bool stream, StoredKeyRanges* ranges);
  /// The least and greatest key (key16_of) of n >= 1 bf16 / f16 bit patterns.
  void (*keys16)(const uint16_t* x, int64_t n, int16_t* lo, int16_t* hi);
};
/// The table for a vector level; nullptr for kScalar (the scalar twin: the nan_min /
/// nan_max loop of ref::minmax).
const MinmaxSimd* minmax_simd(SimdLevel level);

/// StoredKeyRanges of n >= 1 stored mins and maxs, read back.
StoredKeyRanges stored_key_ranges16(const MinmaxSimd& k, const uint16_t* mins, const uint16_t* maxs, int64_t n);
/// k.keys16 over [0, n) split into `parts` ranges on up to `threads` threads.
KeyExtremes minmax16_threaded(const MinmaxSimd& k, const uint16_t* x, int64_t n, bool is_bf16, int64_t parts,
                              int threads);

}  // namespace qobs::kernels::detail
