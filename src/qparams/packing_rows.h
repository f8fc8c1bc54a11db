// The bit layout and argument checks of the compressed-tensors packing (RULES §8.3,
// §8.5), shared by the zero-point packing (packing.cc), the scalar references of the
// row packing (kernels/pack/pack_ref.cc) and its threaded fast path
// (kernels/pack/pack.cc), so that all of them follow one bit order and one set of error
// messages.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/check.h"
#include "qobs/formats.h"
#include "qobs/tensor.h"

namespace qobs::detail {

inline std::string name_or(std::string_view label) {
  return label.empty() ? std::string("tensor") : std::string(label);
}

inline void check_pack_bits(int num_bits, std::string_view label) {
  QOBS_CHECK(num_bits >= 1 && num_bits <= 8, InvalidArgument, name_or(label), ": packing needs 1..8 bits, got ",
             num_bits, " (R8.3.6)");
}

/// ceil(n * num_bits / 32) for n >= 0 and 1..8 bits, without forming n * num_bits: n
/// may come from a hostile checkpoint's weight_shape, where the product would overflow.
inline int64_t packed_words(int64_t n, int num_bits) { return n / 32 * num_bits + ((n % 32) * num_bits + 31) / 32; }

/// Appends the low `num_bits` of u to a little-endian bit stream starting at stream bit
/// `bit` (R8.3.1). Words are accumulated as uint32 and stored as their two's-complement
/// int32 pattern, so the stream never depends on signed shifts.
inline void put_bits(uint32_t* words, int64_t bit, uint32_t u, int num_bits) {
  const int64_t w = bit / 32;
  const int off = static_cast<int>(bit % 32);
  words[w] |= u << off;
  if (off + num_bits > 32) words[w + 1] |= u >> (32 - off);  // value straddles two words
}

inline uint32_t get_bits(const uint32_t* words, int64_t bit, int num_bits) {
  const int64_t w = bit / 32;
  const int off = static_cast<int>(bit % 32);
  uint64_t v = words[w] >> off;
  if (off + num_bits > 32) v |= static_cast<uint64_t>(words[w + 1]) << (32 - off);
  return static_cast<uint32_t>(v) & ((1u << num_bits) - 1u);
}

/// Packs `n` values read through get(i) into `out` words (zero-filled): the shared body
/// of the row and the zero-point packing. `row` names the stream in the range error.
template <typename Get>
void pack_stream(Get get, int64_t n, int num_bits, uint32_t* out, std::string_view label, int64_t row) {
  const int lo = -(1 << (num_bits - 1)), hi = (1 << (num_bits - 1)) - 1;
  for (int64_t j = 0; j < n; ++j) {
    const int v = get(j);
    QOBS_CHECK(v >= lo && v <= hi, InvalidArgument, name_or(label), ": value ", v, " at row ", row, ", index ", j,
               " is outside the ", num_bits, "-bit range [", lo, ", ", hi, "] (R8.3.1)");
    put_bits(out, j * num_bits, static_cast<uint32_t>(v - lo), num_bits);
  }
}

/// Inverse of pack_stream for n values into dst.
inline void unpack_stream(const uint32_t* words, int64_t n, int num_bits, int8_t* dst) {
  const int lo = -(1 << (num_bits - 1));
  for (int64_t j = 0; j < n; ++j)
    dst[j] = static_cast<int8_t>(static_cast<int>(get_bits(words, j * num_bits, num_bits)) + lo);
}

/// The rows x cols int8 values and rows x words int32 words of a row packing.
struct PackedRows {
  int64_t rows = 0, cols = 0, words = 0;
  Shape packed_shape, values_shape;
};

/// R8.3.1 / R8.3.6 checks of pack_int_rows.
inline PackedRows check_pack_int_rows(const Tensor& q, int num_bits, std::string_view label) {
  check_pack_bits(num_bits, label);
  QOBS_CHECK(q.dtype() == DType::kI8, InvalidArgument, name_or(label), ": packing needs int8 values, got ",
             dtype_name(q.dtype()), " (R8.3.6)");
  QOBS_CHECK(q.dim() >= 1, ShapeError, name_or(label), ": cannot pack a 0-dimensional tensor (R8.3.1)");
  PackedRows p;
  p.cols = q.shape().back();
  p.rows = p.cols == 0 ? 0 : q.numel() / p.cols;
  p.words = packed_words(p.cols, num_bits);
  p.values_shape = q.shape();
  p.packed_shape = q.shape();
  p.packed_shape.back() = p.words;
  return p;
}

/// R8.3.1 checks of unpack_int_rows.
inline PackedRows check_unpack_int_rows(const Tensor& packed, int num_bits, int64_t cols, std::string_view label) {
  check_pack_bits(num_bits, label);
  QOBS_CHECK(packed.dtype() == DType::kI32 && packed.dim() >= 1, InvalidArgument, name_or(label),
             ": packed weights must be int32 with at least one dimension (R8.3.1)");
  QOBS_CHECK(cols >= 0, InvalidArgument, name_or(label), ": unpacking needs a non-negative column count, got ", cols,
             " (R8.3.1)");
  PackedRows p;
  p.cols = cols;
  p.words = packed_words(cols, num_bits);
  QOBS_CHECK(packed.shape().back() == p.words, ShapeError, name_or(label), ": ", packed.shape().back(),
             " packed words per row, expected ", p.words, " for ", cols, " columns of ", num_bits, " bits (R8.3.1)");
  p.rows = p.words == 0 ? 0 : packed.numel() / p.words;
  p.packed_shape = packed.shape();
  p.values_shape = packed.shape();
  p.values_shape.back() = cols;
  return p;
}

/// R8.5.1 checks of pack_fp4; returns the packed (uint8) shape.
inline Shape check_pack_fp4(const Tensor& q, std::string_view label) {
  QOBS_CHECK(is_floating(q.dtype()) && q.dtype() != DType::kF8E4M3, InvalidArgument, name_or(label),
             ": FP4 packing needs values in a float tensor, got ", dtype_name(q.dtype()), " (R8.5.1)");
  QOBS_CHECK(q.dim() >= 1, ShapeError, name_or(label), ": cannot pack a 0-dimensional tensor (R8.5.1)");
  const int64_t cols = q.shape().back();
  QOBS_CHECK(cols % 2 == 0, InvalidArgument, name_or(label), ": FP4 packing needs an even number of columns, got ",
             cols, " (R8.5.1)");
  Shape out_shape = q.shape();
  out_shape.back() = cols / 2;
  return out_shape;
}

/// R8.5.1 checks of unpack_fp4; returns the unpacked shape.
inline Shape check_unpack_fp4(const Tensor& packed, DType out_dtype, std::string_view label) {
  QOBS_CHECK(packed.dtype() == DType::kU8 && packed.dim() >= 1, InvalidArgument, name_or(label),
             ": packed FP4 must be uint8 with at least one dimension (R8.5.1)");
  QOBS_CHECK(is_floating(out_dtype) && out_dtype != DType::kF8E4M3, InvalidArgument, name_or(label),
             ": FP4 values unpack into f64/f32/bf16/f16, not ", dtype_name(out_dtype));
  Shape out_shape = packed.shape();
  out_shape.back() *= 2;
  return out_shape;
}

/// The E2M1 code of element i (value v) of a tensor being packed (R8.5.1); off-grid
/// values are an error rather than a silent code 0.
inline uint8_t fp4_pack_code(float v, int64_t i, std::string_view label) {
  // Magnitude index by 2|v|: {0, 0.5, 1, 1.5, 2, 3, 4, 6} -> 2|v| in {0,1,2,3,4,6,8,12}.
  static constexpr int8_t kIndexOfTwice[13] = {0, 1, 2, 3, 4, -1, 5, -1, 6, -1, -1, -1, 7};
  const float twice = 2.0f * std::fabs(v);
  const int k = twice <= 12.0f ? static_cast<int>(twice) : -1;  // NaN fails the comparison
  const int idx = (k >= 0 && static_cast<float>(k) == twice) ? kIndexOfTwice[k] : -1;
  QOBS_CHECK(idx >= 0, InvalidArgument, name_or(label), ": element ", i, " = ", v,
             " is not an FP4 (E2M1) grid value (R8.5.1)");
  // sign bit, not v < 0: -0.0 must give code 8 (Q17)
  return static_cast<uint8_t>((std::signbit(v) ? 0x8 : 0x0) | idx);
}

/// R8.10.1 checks of pack_fp6; returns the packed (uint8) shape: (*leading, cols / 4 x 3).
inline Shape check_pack_fp6(const Tensor& q, std::string_view label) {
  QOBS_CHECK(is_floating(q.dtype()) && q.dtype() != DType::kF8E4M3, InvalidArgument, name_or(label),
             ": FP6 packing needs values in a float tensor, got ", dtype_name(q.dtype()), " (R8.10.1)");
  QOBS_CHECK(q.dim() >= 1, ShapeError, name_or(label), ": cannot pack a 0-dimensional tensor (R8.10.1)");
  const int64_t cols = q.shape().back();
  QOBS_CHECK(cols % 4 == 0, InvalidArgument, name_or(label),
             ": tensor must have a multiple of 4 columns for fp6 packing, got ", cols, " (R8.10.1)");
  Shape out_shape = q.shape();
  out_shape.back() = cols / 4 * 3;
  return out_shape;
}

/// R8.10.1 checks of unpack_fp6; returns the unpacked shape (*leading, bytes / 3 x 4).
inline Shape check_unpack_fp6(const Tensor& packed, DType out_dtype, std::string_view label) {
  QOBS_CHECK(packed.dtype() == DType::kU8 && packed.dim() >= 1, InvalidArgument, name_or(label),
             ": packed FP6 must be uint8 with at least one dimension (R8.10.1)");
  QOBS_CHECK(is_floating(out_dtype) && out_dtype != DType::kF8E4M3, InvalidArgument, name_or(label),
             ": FP6 values unpack into f64/f32/bf16/f16, not ", dtype_name(out_dtype));
  QOBS_CHECK(packed.shape().back() % 3 == 0, ShapeError, name_or(label), ": ", packed.shape().back(),
             " packed FP6 bytes per row are not a multiple of 3 (four codes in three bytes, R8.10.1)");
  Shape out_shape = packed.shape();
  out_shape.back() = out_shape.back() / 3 * 4;
  return out_shape;
}

/// The 6-bit E2M3 code of element i (value v) of a tensor being packed (R8.10.1):
/// magnitude index in bits 0-4, v's sign bit in bit 5 (so -0.0 gives code 32).
/// Off-grid values and NaN are an error rather than a silent code.
inline uint8_t fp6_pack_code(float v, int64_t i, std::string_view label) {
  const float a = std::fabs(v);
  const uint8_t idx = a <= kFp6E2M3Max ? fp6_index(a) : uint8_t{0};  // NaN fails the comparison
  QOBS_CHECK(a <= kFp6E2M3Max && fp6_magnitude(idx) == a, InvalidArgument, name_or(label), ": element ", i, " = ", v,
             " is not an FP6 (E2M3) grid value (R8.10.1)");
  return static_cast<uint8_t>((std::signbit(v) ? 0x20 : 0x00) | idx);
}

/// Four 6-bit codes into three bytes, little-endian: c0 | c1 << 6 | c2 << 12 | c3 << 18
/// (R8.10.1).
inline void fp6_pack_word(const uint8_t* c, uint8_t* out) {
  const uint32_t w = static_cast<uint32_t>(c[0]) | static_cast<uint32_t>(c[1]) << 6 |
                     static_cast<uint32_t>(c[2]) << 12 | static_cast<uint32_t>(c[3]) << 18;
  out[0] = static_cast<uint8_t>(w);
  out[1] = static_cast<uint8_t>(w >> 8);
  out[2] = static_cast<uint8_t>(w >> 16);
}
/// The inverse: three bytes into four codes.
inline void fp6_unpack_word(const uint8_t* in, uint8_t* c) {
  const uint32_t w =
      static_cast<uint32_t>(in[0]) | static_cast<uint32_t>(in[1]) << 8 | static_cast<uint32_t>(in[2]) << 16;
  for (int k = 0; k < 4; ++k) c[k] = static_cast<uint8_t>((w >> (6 * k)) & 0x3Fu);
}

}  // namespace qobs::detail
