// The min-max passes over 16-bit (bf16 / f16) groups in int16 keys: AVX-512's 32 groups
// per pass and AVX2's 16, per group a tree of in-register shuffles. x86-only: the trees
// are built from shuffles Highway 1.0.3 does not expose (vpermt2w, vshufi64x2 with
// immediates, 16-bit packs across 128-bit lanes). They take about 150 vector ops per KB
// of bf16, against about 700 for the portable eight-groups-per-pass kernel, which widens
// every value to f32 and transposes (NVFP4's groups of 16 ran at ~40% of a plain read
// that way; docs/history/PERFORMANCE-log.md).
//
// Portable twin: the eight-groups-per-pass kernel of minmax_simd.cc
// (MinMaxSimd::groups_to16_portable), compared with these passes bit for bit by
// tests/kernels/minmax/minmax_test.cc (X86KeyPassesEqualPortableEightGroupPasses).
//
// Per target it defines int KeyPassesTo16(x, bf16, num_groups, len, mins, maxs,
// zero_result, stream, ranges) -- 1 done, 0 some value NaN, -1 not a shape the passes
// take (the caller then runs the portable kernel); int64_t KeyPassesToFloats(x, bf16,
// num_groups, len, mins, maxs, zero_result) -- the groups done (a multiple of the pass
// width, 0 where the target has no float form), -1 when some value is NaN.
//
// A per-target header (Highway's -inl.h convention): included after <hwy/highway.h>,
// outside any namespace, re-read once per target.
#if defined(QOBS_KERNELS_MINMAX_MINMAX_KEYS16_X86_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QOBS_KERNELS_MINMAX_MINMAX_KEYS16_X86_INL_H_
#undef QOBS_KERNELS_MINMAX_MINMAX_KEYS16_X86_INL_H_
#else
#define QOBS_KERNELS_MINMAX_MINMAX_KEYS16_X86_INL_H_
#endif

#include <hwy/highway.h>

#include <climits>
#include <cstdint>

#include "kernels/minmax/minmax_simd.h"

HWY_BEFORE_NAMESPACE();
namespace qobs::kernels::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

/// Whether both output pointers are aligned for streaming stores of `bytes`.
HWY_INLINE bool aligned_pair(const void* a, const void* b, uintptr_t bytes) {
  return ((reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b)) & (bytes - 1)) == 0;
}

/// The running key vectors of a 16-bit pass (least / greatest key of the mins and of
/// the maxs stored) reduced into *ranges.
template <class V16>
HWY_INLINE void reduce_key_ranges(V16 mins_lo, V16 mins_hi, V16 maxs_lo, V16 maxs_hi, StoredKeyRanges* ranges) {
  const hn::DFromV<V16> d;
  ranges->mins_lo = hn::GetLane(hn::MinOfLanes(d, mins_lo));
  ranges->mins_hi = hn::GetLane(hn::MaxOfLanes(d, mins_hi));
  ranges->maxs_lo = hn::GetLane(hn::MinOfLanes(d, maxs_lo));
  ranges->maxs_hi = hn::GetLane(hn::MaxOfLanes(d, maxs_hi));
}

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

#if HWY_TARGET == HWY_AVX3
// 16-bit groups on AVX-512, 32 groups per pass, in 32 int16 lanes: a bf16 / f16 pattern b
// maps to the int16 key b ^ ((b >> 15) & 0x7FFF), whose signed order is the values'
// order for every non-NaN (-0 just below +0; the caller settles zero signs anyway), and
// back by the same map. NaNs become keys beyond +-inf's, so the group results alone
// show them. Each group's partial results are halved by a tree of shuffles, four steps
// from 16 partials (two groups per vector) to one (32 groups per vector).

/// The key map (an involution): b ^ ((b >> 15) & 0x7FFF), the and-xor in one ternlog.
HWY_INLINE __m512i key16(__m512i b) {
  return _mm512_ternarylogic_epi32(b, _mm512_srai_epi16(b, 15), _mm512_set1_epi16(0x7FFF), 0x78);
}

template <bool kMax>
HWY_INLINE __m512i pick16(__m512i a, __m512i b) {
  return kMax ? _mm512_max_epi16(a, b) : _mm512_min_epi16(a, b);
}

/// Steps 2-4 of the tree on eight vectors of four groups x 8 partials (one group per
/// 128-bit block): 32 results, one int16 per group, in the tree's lane order.
template <bool kMax>
HWY_INLINE __m512i tree_tail(const __m512i (&m)[8], __m512i order) {
  __m512i r[4], t[2];
  // step 2: the two qwords of a block are one group's 8 partials -> 4
  for (int j = 0; j < 4; ++j)
    r[j] = pick16<kMax>(_mm512_unpacklo_epi64(m[2 * j], m[2 * j + 1]), _mm512_unpackhi_epi64(m[2 * j], m[2 * j + 1]));
  // step 3: a block holds two groups (qwords), each in two dwords -> 2 partials
  for (int j = 0; j < 2; ++j) {
    const __m512 a = _mm512_castsi512_ps(r[2 * j]), b = _mm512_castsi512_ps(r[2 * j + 1]);
    t[j] = pick16<kMax>(_mm512_castps_si512(_mm512_shuffle_ps(a, b, 0x88)),
                        _mm512_castps_si512(_mm512_shuffle_ps(a, b, 0xDD)));
  }
  // step 4: each dword holds one group's two partials -> the low word of each dword
  const __m512i a = pick16<kMax>(t[0], _mm512_srli_epi32(t[0], 16));
  const __m512i b = pick16<kMax>(t[1], _mm512_srli_epi32(t[1], 16));
  return _mm512_permutex2var_epi16(a, order, b);
}

/// Step 1 on two vectors of two groups x 16 partials each: blocks 0 / 2 against 1 / 3.
template <bool kMax>
HWY_INLINE __m512i step1(__m512i a, __m512i b) {
  return pick16<kMax>(_mm512_shuffle_i64x2(a, b, 0x88), _mm512_shuffle_i64x2(a, b, 0xDD));
}

/// The final permutation: even words of the two step-4 vectors, reordered so that lane
/// g holds group g. Found by running the tree's shuffles on groups whose keys are their
/// numbers, so that it cannot drift from the steps above.
__m512i make_tree_order_index() {
  // groups 0..31 with all partials equal to their number; the identity permutation
  // (even words of a, then of b) shows where each lands
  __m512i v[16];
  for (int i = 0; i < 16; ++i) {
    alignas(64) int16_t w[32];
    for (int l = 0; l < 32; ++l) w[l] = static_cast<int16_t>(2 * i + l / 16);
    v[i] = _mm512_load_si512(w);
  }
  __m512i m[8];
  for (int i = 0; i < 8; ++i)
    m[i] = _mm512_min_epi16(_mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0x88),
                            _mm512_shuffle_i64x2(v[2 * i], v[2 * i + 1], 0xDD));
  __m512i r[4], t[2];
  for (int j = 0; j < 4; ++j)
    r[j] =
        _mm512_min_epi16(_mm512_unpacklo_epi64(m[2 * j], m[2 * j + 1]), _mm512_unpackhi_epi64(m[2 * j], m[2 * j + 1]));
  for (int j = 0; j < 2; ++j) {
    const __m512 a = _mm512_castsi512_ps(r[2 * j]), b = _mm512_castsi512_ps(r[2 * j + 1]);
    t[j] = _mm512_min_epi16(_mm512_castps_si512(_mm512_shuffle_ps(a, b, 0x88)),
                            _mm512_castps_si512(_mm512_shuffle_ps(a, b, 0xDD)));
  }
  alignas(64) int16_t wa[32], wb[32];
  _mm512_store_si512(wa, t[0]);
  _mm512_store_si512(wb, t[1]);
  alignas(64) int16_t idx[32];
  for (int s = 0; s < 16; ++s) {  // source word 2s of a (index s) and of b (index 32 + s)
    idx[wa[2 * s]] = static_cast<int16_t>(2 * s);
    idx[wb[2 * s]] = static_cast<int16_t>(32 + 2 * s);
  }
  return _mm512_load_si512(idx);
}

/// Min and max of 32 consecutive groups of len 16-bit values (len 16 or a multiple of
/// 32) as keys; false when a group holds a NaN (its keys lie beyond +-inf's).
HWY_INLINE bool minmax_keys32(const uint16_t* x, int64_t len, int16_t nan_hi, int16_t nan_lo, __m512i order,
                              __m512i& lo, __m512i& hi) {
  // after step 1: eight vectors of four groups x 8 partials, for the mins and the maxs
  __m512i ml[8], mh[8];
  if (len == 16) {
    // two groups per load; step 1's shuffles serve both trees
    for (int i = 0; i < 8; ++i) {
      const __m512i a = key16(_mm512_loadu_si512(x + 64 * i)), b = key16(_mm512_loadu_si512(x + 64 * i + 32));
      const __m512i p = _mm512_shuffle_i64x2(a, b, 0x88), q = _mm512_shuffle_i64x2(a, b, 0xDD);
      ml[i] = _mm512_min_epi16(p, q);
      mh[i] = _mm512_max_epi16(p, q);
    }
  } else {
    for (int i = 0; i < 8; ++i) {
      __m512i vl[2], vh[2];
      for (int h = 0; h < 2; ++h) {
        __m512i gl[2], gh[2];
        for (int k = 0; k < 2; ++k) {
          const uint16_t* p = x + (4 * i + 2 * h + k) * len;
          gl[k] = gh[k] = key16(_mm512_loadu_si512(p));
          for (int64_t j = 32; j < len; j += 32) {
            const __m512i v = key16(_mm512_loadu_si512(p + j));
            gl[k] = _mm512_min_epi16(gl[k], v);
            gh[k] = _mm512_max_epi16(gh[k], v);
          }
        }
        // two groups' 32 partials -> 16 each, one group per 256-bit half
        vl[h] = _mm512_min_epi16(_mm512_shuffle_i64x2(gl[0], gl[1], 0x44), _mm512_shuffle_i64x2(gl[0], gl[1], 0xEE));
        vh[h] = _mm512_max_epi16(_mm512_shuffle_i64x2(gh[0], gh[1], 0x44), _mm512_shuffle_i64x2(gh[0], gh[1], 0xEE));
      }
      ml[i] = step1<false>(vl[0], vl[1]);
      mh[i] = step1<true>(vh[0], vh[1]);
    }
  }
  lo = tree_tail<false>(ml, order);
  hi = tree_tail<true>(mh, order);
  return !_mm512_cmpgt_epi16_mask(hi, _mm512_set1_epi16(nan_hi)) &&
         !_mm512_cmplt_epi16_mask(lo, _mm512_set1_epi16(nan_lo));
}

/// Keys back to values, widened to float (exact).
HWY_INLINE void store_keys_as_floats(__m512i k, bool bf16, float* out) {
  const __m512i b = key16(k);
  const __m256i b0 = _mm512_castsi512_si256(b), b1 = _mm512_extracti64x4_epi64(b, 1);
  if (bf16) {
    _mm512_storeu_ps(out, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b0), 16)));
    _mm512_storeu_ps(out + 16, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b1), 16)));
  } else {
    _mm512_storeu_ps(out, _mm512_cvtph_ps(b0));
    _mm512_storeu_ps(out + 16, _mm512_cvtph_ps(b1));
  }
}

/// Runs the 32-group passes over the first num_groups / 32 * 32 groups, handing each
/// pass's min and max keys to store(g, lo, hi); false when a group holds a NaN.
template <typename Store>
HWY_INLINE bool MinMaxPasses16(const uint16_t* x, bool bf16, int64_t num_groups, int64_t len, bool* zero_result,
                               Store store) {
  // NaN keys: |b| above the infinity pattern, mapped (positive ones stay, negative ones
  // fall below the key of -inf)
  const uint16_t inf = bf16 ? 0x7F80 : 0x7C00;
  const auto nan_hi = static_cast<int16_t>(inf), nan_lo = static_cast<int16_t>((inf | 0x8000) ^ 0x7FFF);
  const int64_t whole = num_groups / 32 * 32;
  static const __m512i order = make_tree_order_index();
  for (int64_t g = 0; g < whole; g += 32) {
    __m512i lo, hi;
    if (!minmax_keys32(x + g * len, len, nan_hi, nan_lo, order, lo, hi)) return false;
    store(g, lo, hi);
    // the keys of +0 and -0 are 0 and -1
    const __m512i minus1 = _mm512_set1_epi16(-1), zero = _mm512_setzero_si512();
    if (_mm512_cmpeq_epi16_mask(lo, zero) | _mm512_cmpeq_epi16_mask(lo, minus1) | _mm512_cmpeq_epi16_mask(hi, zero) |
        _mm512_cmpeq_epi16_mask(hi, minus1))
      *zero_result = true;
  }
  return true;
}

int KeyPassesTo16(const uint16_t* x, bool bf16, int64_t num_groups, int64_t len, uint16_t* mins, uint16_t* maxs,
                  bool* zero_result, bool stream, StoredKeyRanges* ranges) {
  if (num_groups % 32 != 0 || (len != 16 && len % 32 != 0)) return -1;
  const bool nt = stream && aligned_pair(mins, maxs, 64);
  __m512i mins_lo = _mm512_set1_epi16(INT16_MAX), mins_hi = _mm512_set1_epi16(INT16_MIN), maxs_lo = mins_lo,
          maxs_hi = mins_hi;
  const bool done =
      MinMaxPasses16(x, bf16, num_groups, len, zero_result, [&](int64_t g, __m512i lo, __m512i hi) HWY_ATTR {
        mins_lo = _mm512_min_epi16(mins_lo, lo);
        mins_hi = _mm512_max_epi16(mins_hi, lo);
        maxs_lo = _mm512_min_epi16(maxs_lo, hi);
        maxs_hi = _mm512_max_epi16(maxs_hi, hi);
        if (nt) {  // the key map is its own inverse
          _mm512_stream_si512(reinterpret_cast<__m512i*>(mins + g), key16(lo));
          _mm512_stream_si512(reinterpret_cast<__m512i*>(maxs + g), key16(hi));
        } else {
          _mm512_storeu_si512(mins + g, key16(lo));
          _mm512_storeu_si512(maxs + g, key16(hi));
        }
      });
  if (nt) _mm_sfence();  // the streamed stores before whatever tells another thread they are done
  if (!done) return 0;
  reduce_key_ranges(hn::Vec512<int16_t>{mins_lo}, hn::Vec512<int16_t>{mins_hi}, hn::Vec512<int16_t>{maxs_lo},
                    hn::Vec512<int16_t>{maxs_hi}, ranges);
  return 1;
}

int64_t KeyPassesToFloats(const uint16_t* x, bool bf16, int64_t num_groups, int64_t len, float* mins, float* maxs,
                          bool* zero_result) {
  if (len != 16 && len % 32 != 0) return 0;
  if (!MinMaxPasses16(x, bf16, num_groups, len, zero_result, [&](int64_t g, __m512i lo, __m512i hi) HWY_ATTR {
        store_keys_as_floats(lo, bf16, mins + g);
        store_keys_as_floats(hi, bf16, maxs + g);
      }))
    return -1;
  return num_groups / 32 * 32;
}
#endif  // HWY_TARGET == HWY_AVX3

#if HWY_TARGET == HWY_AVX2
// 16-bit groups on AVX2, 16 groups per pass in 16 int16 lanes: AVX-512's key map and
// tree (above) at half the width. One load is a group of 16; the tree halves the
// partials in four steps (128-bit halves, qwords, dwords, words) and packs the 16
// results into one vector. Instead of a final permutation (AVX2 has no 16-bit one), the
// groups are loaded into the slots whose results land in their own lanes.

HWY_INLINE __m256i key16_avx2(__m256i b) {
  return _mm256_xor_si256(b, _mm256_and_si256(_mm256_srai_epi16(b, 15), _mm256_set1_epi16(0x7FFF)));
}

template <bool kMax>
HWY_INLINE __m256i pick16_avx2(__m256i a, __m256i b) {
  return kMax ? _mm256_max_epi16(a, b) : _mm256_min_epi16(a, b);
}

/// 16 slots of 16 partial keys each -> one vector of 16 results (lane order: slot_of_lane).
template <bool kMax>
HWY_INLINE __m256i tree16_avx2(const __m256i (&k)[16]) {
  __m256i m[8], r[4], t[2];
  // step 1: a slot pair's 128-bit halves against each other: one slot per half, 8 partials
  for (int i = 0; i < 8; ++i)
    m[i] = pick16_avx2<kMax>(_mm256_permute2x128_si256(k[2 * i], k[2 * i + 1], 0x20),
                             _mm256_permute2x128_si256(k[2 * i], k[2 * i + 1], 0x31));
  // step 2: a half's two qwords are one slot's partials -> two slots per half, 4 each
  for (int j = 0; j < 4; ++j)
    r[j] =
        pick16_avx2<kMax>(_mm256_unpacklo_epi64(m[2 * j], m[2 * j + 1]), _mm256_unpackhi_epi64(m[2 * j], m[2 * j + 1]));
  // step 3: each slot's two dwords -> one dword (2 partials) per slot
  for (int j = 0; j < 2; ++j) {
    const __m256 a = _mm256_castsi256_ps(r[2 * j]), b = _mm256_castsi256_ps(r[2 * j + 1]);
    t[j] = pick16_avx2<kMax>(_mm256_castps_si256(_mm256_shuffle_ps(a, b, 0x88)),
                             _mm256_castps_si256(_mm256_shuffle_ps(a, b, 0xDD)));
  }
  // step 4: the low word of each dword against the high one, packed (exact: 0..65535)
  const __m256i low = _mm256_set1_epi32(0xFFFF);
  return _mm256_packus_epi32(_mm256_and_si256(pick16_avx2<kMax>(t[0], _mm256_srli_epi32(t[0], 16)), low),
                             _mm256_and_si256(pick16_avx2<kMax>(t[1], _mm256_srli_epi32(t[1], 16)), low));
}

/// slot_of_lane[l]: the slot whose result the tree puts in lane l. Found by running the
/// tree on slots whose keys are their numbers, so it cannot drift from the steps above.
struct TreeSlots16 {
  int slot_of_lane[16];
  TreeSlots16() {
    __m256i k[16];
    for (int i = 0; i < 16; ++i) k[i] = _mm256_set1_epi16(static_cast<int16_t>(i));
    alignas(32) int16_t lanes[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), tree16_avx2<false>(k));
    for (int l = 0; l < 16; ++l) slot_of_lane[l] = lanes[l];
  }
};

/// num_groups (a multiple of 16) groups of len (a multiple of 16) bf16 / f16 values:
/// 16-bit results; 1 done, 0 some value NaN (keys beyond +-inf's).
int MinMaxGroupsKeys16(const uint16_t* x, bool bf16, int64_t num_groups, int64_t len, uint16_t* mins, uint16_t* maxs,
                       bool* zero_result, bool stream, StoredKeyRanges* ranges) {
  static const TreeSlots16 slots;
  const bool nt = stream && aligned_pair(mins, maxs, 32);
  __m256i mins_lo = _mm256_set1_epi16(INT16_MAX), mins_hi = _mm256_set1_epi16(INT16_MIN), maxs_lo = mins_lo,
          maxs_hi = mins_hi;
  const int16_t inf = bf16 ? 0x7F80 : 0x7C00;
  const __m256i pos_inf_key = _mm256_set1_epi16(inf);
  const __m256i neg_inf_key = _mm256_set1_epi16(static_cast<int16_t>((0x8000 | inf) ^ 0x7FFF));
  const __m256i magnitude = _mm256_set1_epi16(0x7FFF), zero = _mm256_setzero_si256();
  __m256i nan = zero, zeros = zero;
  for (int64_t g0 = 0; g0 < num_groups; g0 += 16) {
    __m256i lo[16], hi[16];
    for (int l = 0; l < 16; ++l) {
      const uint16_t* p = x + (g0 + l) * len;
      const int s = slots.slot_of_lane[l];
      lo[s] = hi[s] = key16_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      for (int64_t j = 16; j < len; j += 16) {
        const __m256i k = key16_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + j)));
        lo[s] = _mm256_min_epi16(lo[s], k);
        hi[s] = _mm256_max_epi16(hi[s], k);
      }
    }
    const __m256i lo_key = tree16_avx2<false>(lo), hi_key = tree16_avx2<true>(hi);
    nan = _mm256_or_si256(
        nan, _mm256_or_si256(_mm256_cmpgt_epi16(hi_key, pos_inf_key), _mm256_cmpgt_epi16(neg_inf_key, lo_key)));
    mins_lo = _mm256_min_epi16(mins_lo, lo_key);
    mins_hi = _mm256_max_epi16(mins_hi, lo_key);
    maxs_lo = _mm256_min_epi16(maxs_lo, hi_key);
    maxs_hi = _mm256_max_epi16(maxs_hi, hi_key);
    const __m256i lo_b = key16_avx2(lo_key), hi_b = key16_avx2(hi_key);  // the map is an involution
    zeros = _mm256_or_si256(zeros, _mm256_or_si256(_mm256_cmpeq_epi16(_mm256_and_si256(lo_b, magnitude), zero),
                                                   _mm256_cmpeq_epi16(_mm256_and_si256(hi_b, magnitude), zero)));
    if (nt) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(mins + g0), lo_b);
      _mm256_stream_si256(reinterpret_cast<__m256i*>(maxs + g0), hi_b);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(mins + g0), lo_b);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(maxs + g0), hi_b);
    }
  }
  if (nt) _mm_sfence();  // the streamed stores before whatever tells another thread they are done
  if (!_mm256_testz_si256(zeros, zeros)) *zero_result = true;
  if (!_mm256_testz_si256(nan, nan)) return 0;
  reduce_key_ranges(hn::Vec256<int16_t>{mins_lo}, hn::Vec256<int16_t>{mins_hi}, hn::Vec256<int16_t>{maxs_lo},
                    hn::Vec256<int16_t>{maxs_hi}, ranges);
  return 1;
}

int KeyPassesTo16(const uint16_t* x, bool bf16, int64_t num_groups, int64_t len, uint16_t* mins, uint16_t* maxs,
                  bool* zero_result, bool stream, StoredKeyRanges* ranges) {
  if (num_groups % 16 != 0 || len % 16 != 0) return -1;
  return MinMaxGroupsKeys16(x, bf16, num_groups, len, mins, maxs, zero_result, stream, ranges);
}

/// AVX2 has no float form of the key passes (16-bit results widen in the eight-group kernel).
int64_t KeyPassesToFloats(const uint16_t*, bool, int64_t, int64_t, float*, float*, bool*) { return 0; }
#endif  // HWY_TARGET == HWY_AVX2

}  // namespace HWY_NAMESPACE
}  // namespace qobs::kernels::detail
HWY_AFTER_NAMESPACE();

#endif  // QOBS_KERNELS_MINMAX_MINMAX_KEYS16_X86_INL_H_
