// Packing for the compressed-tensors formats (SPEC §8.3, §8.5, §8.6).
#include "qobs/packing.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/element.h"
#include "qobs/formats.h"

namespace qobs {
namespace {

std::string name_or(std::string_view label) { return label.empty() ? std::string("tensor") : std::string(label); }

void check_bits(int num_bits, std::string_view label) {
  QOBS_CHECK(num_bits >= 1 && num_bits <= 8, InvalidArgument, name_or(label), ": packing needs 1..8 bits, got ",
             num_bits, " (R8.3.6)");
}

int64_t words_for(int64_t n, int num_bits) { return (n * num_bits + 31) / 32; }

// Appends the low `num_bits` of u to a little-endian bit stream starting at stream bit
// `bit` (R8.3.1). Words are accumulated as uint32 and stored as their two's-complement
// int32 pattern, so the stream never depends on signed shifts.
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

// Packs `n` values read through get(i) into `out` words: the shared body of the row and
// the zero-point packing, so both follow one bit order.
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

}  // namespace

Tensor pack_int_rows(const Tensor& q, int num_bits, std::string_view label) {
  check_bits(num_bits, label);
  QOBS_CHECK(q.dtype() == DType::kI8, InvalidArgument, name_or(label), ": packing needs int8 values, got ",
             dtype_name(q.dtype()), " (R8.3.6)");
  QOBS_CHECK(q.dim() >= 1, ShapeError, name_or(label), ": cannot pack a 0-dimensional tensor (R8.3.1)");
  const int64_t cols = q.shape().back();
  const int64_t rows = cols == 0 ? 0 : q.numel() / cols;
  const int64_t nw = words_for(cols, num_bits);
  Shape out_shape = q.shape();
  out_shape.back() = nw;
  Tensor out(DType::kI32, out_shape);
  const int8_t* src = q.data_as<int8_t>();
  uint32_t* dst = out.data_as<uint32_t>();
  for (int64_t r = 0; r < rows; ++r)
    pack_stream([&](int64_t j) { return static_cast<int>(src[r * cols + j]); }, cols, num_bits, dst + r * nw, label, r);
  return out;
}

Tensor unpack_int_rows(const Tensor& packed, int num_bits, int64_t cols, std::string_view label) {
  check_bits(num_bits, label);
  QOBS_CHECK(packed.dtype() == DType::kI32 && packed.dim() >= 1, InvalidArgument, name_or(label),
             ": packed weights must be int32 with at least one dimension (R8.3.1)");
  const int64_t nw = words_for(cols, num_bits);
  QOBS_CHECK(packed.shape().back() == nw, ShapeError, name_or(label), ": ", packed.shape().back(),
             " packed words per row, expected ", nw, " for ", cols, " columns of ", num_bits, " bits (R8.3.1)");
  const int64_t rows = nw == 0 ? 0 : packed.numel() / nw;
  Shape out_shape = packed.shape();
  out_shape.back() = cols;
  Tensor out(DType::kI8, out_shape);
  const uint32_t* src = packed.data_as<uint32_t>();
  int8_t* dst = out.data_as<int8_t>();
  const int lo = -(1 << (num_bits - 1));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j)
      dst[r * cols + j] = static_cast<int8_t>(static_cast<int>(get_bits(src + r * nw, j * num_bits, num_bits)) + lo);
  return out;
}

Tensor pack_zero_points(const Tensor& zp, int num_bits, std::string_view label) {
  check_bits(num_bits, label);
  QOBS_CHECK(zp.dtype() == DType::kI8, InvalidArgument, name_or(label), ": zero points must be int8 to pack, got ",
             dtype_name(zp.dtype()), " (R8.3.4)");
  QOBS_CHECK(zp.dim() == 2, ShapeError, name_or(label), ": zero points to pack must be 2-D (rows, groups), got ",
             shape_str(zp.shape()), " (R8.3.4)");
  const int64_t rows = zp.shape()[0], groups = zp.shape()[1];
  const int64_t nw = words_for(rows, num_bits);
  // Column g of zp is one bit stream; pack it into a scratch stream, then scatter the
  // words into column g of the (nw, groups) result.
  Tensor out(DType::kI32, {nw, groups});
  std::vector<uint32_t> stream(static_cast<std::size_t>(nw));
  const int8_t* src = zp.data_as<int8_t>();
  uint32_t* dst = out.data_as<uint32_t>();
  for (int64_t g = 0; g < groups; ++g) {
    std::fill(stream.begin(), stream.end(), 0u);
    pack_stream([&](int64_t r) { return static_cast<int>(src[r * groups + g]); }, rows, num_bits, stream.data(), label,
                g);
    for (int64_t w = 0; w < nw; ++w) dst[w * groups + g] = stream[static_cast<std::size_t>(w)];
  }
  return out;
}

Tensor unpack_zero_points(const Tensor& packed, int num_bits, int64_t rows, std::string_view label) {
  check_bits(num_bits, label);
  QOBS_CHECK(packed.dtype() == DType::kI32 && packed.dim() == 2, InvalidArgument, name_or(label),
             ": packed zero points must be 2-D int32 (R8.3.4)");
  const int64_t nw = words_for(rows, num_bits), groups = packed.shape()[1];
  QOBS_CHECK(packed.shape()[0] == nw, ShapeError, name_or(label), ": ", packed.shape()[0],
             " packed zero-point rows, expected ", nw, " for ", rows, " rows of ", num_bits, " bits (R8.3.4)");
  Tensor out(DType::kI8, {rows, groups});
  std::vector<uint32_t> stream(static_cast<std::size_t>(nw));
  const uint32_t* src = packed.data_as<uint32_t>();
  int8_t* dst = out.data_as<int8_t>();
  const int lo = -(1 << (num_bits - 1));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t w = 0; w < nw; ++w) stream[static_cast<std::size_t>(w)] = src[w * groups + g];
    for (int64_t r = 0; r < rows; ++r)
      dst[r * groups + g] = static_cast<int8_t>(static_cast<int>(get_bits(stream.data(), r * num_bits, num_bits)) + lo);
  }
  return out;
}

// The value of element i of a float tensor, widened to float (exact for every dtype
// that pack_fp4 accepts: an E2M1 grid value is exact in all of them).
inline float load_float(const uint8_t* base, DType dt, int64_t i) {
  return static_cast<float>(detail::load_element(base, dt, i));
}

Tensor pack_fp4(const Tensor& q, std::string_view label) {
  QOBS_CHECK(is_floating(q.dtype()) && q.dtype() != DType::kF8E4M3, InvalidArgument, name_or(label),
             ": FP4 packing needs values in a float tensor, got ", dtype_name(q.dtype()), " (R8.5.1)");
  QOBS_CHECK(q.dim() >= 1, ShapeError, name_or(label), ": cannot pack a 0-dimensional tensor (R8.5.1)");
  const int64_t cols = q.shape().back();
  QOBS_CHECK(cols % 2 == 0, InvalidArgument, name_or(label), ": FP4 packing needs an even number of columns, got ",
             cols, " (R8.5.1)");
  Shape out_shape = q.shape();
  out_shape.back() = cols / 2;
  Tensor out(DType::kU8, out_shape);
  uint8_t* dst = out.data_as<uint8_t>();
  const uint8_t* src = q.data_as<uint8_t>();
  // Magnitude index by 2|v|: {0, 0.5, 1, 1.5, 2, 3, 4, 6} -> 2|v| in {0,1,2,3,4,6,8,12};
  // -1 marks a value off the grid, which must be an error rather than a silent code 0.
  static constexpr int8_t kIndexOfTwice[13] = {0, 1, 2, 3, 4, -1, 5, -1, 6, -1, -1, -1, 7};
  const int64_t n = q.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = load_float(src, q.dtype(), i);
    const float twice = 2.0f * std::fabs(v);
    const int k = twice <= 12.0f ? static_cast<int>(twice) : -1;  // NaN fails the comparison
    const int idx = (k >= 0 && static_cast<float>(k) == twice) ? kIndexOfTwice[k] : -1;
    QOBS_CHECK(idx >= 0, InvalidArgument, name_or(label), ": element ", i, " = ", v,
               " is not an FP4 (E2M1) grid value (R8.5.1)");
    // sign bit, not v < 0: -0.0 must give code 8 (Q17)
    const uint8_t code = static_cast<uint8_t>((std::signbit(v) ? 0x8 : 0x0) | idx);
    dst[i / 2] |= static_cast<uint8_t>((i % 2 == 0) ? code : code << 4);
  }
  return out;
}

Tensor unpack_fp4(const Tensor& packed, DType out_dtype, std::string_view label) {
  QOBS_CHECK(packed.dtype() == DType::kU8 && packed.dim() >= 1, InvalidArgument, name_or(label),
             ": packed FP4 must be uint8 with at least one dimension (R8.5.1)");
  QOBS_CHECK(is_floating(out_dtype) && out_dtype != DType::kF8E4M3, InvalidArgument, name_or(label),
             ": FP4 values unpack into f64/f32/bf16/f16, not ", dtype_name(out_dtype));
  Shape out_shape = packed.shape();
  out_shape.back() *= 2;
  Tensor out(out_dtype, out_shape);
  const uint8_t* src = packed.data_as<uint8_t>();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t byte = src[i / 2];
    out.set(i, fp4_value(static_cast<uint8_t>(i % 2 == 0 ? byte & 0xF : byte >> 4)));
  }
  return out;
}

Tensor encode_e8m0(const Tensor& scale, std::string_view label) {
  QOBS_CHECK(is_floating(scale.dtype()), InvalidArgument, name_or(label), ": E8M0 encoding needs float scales, got ",
             dtype_name(scale.dtype()), " (R8.6.2)");
  Tensor out(DType::kU8, scale.shape());
  uint8_t* dst = out.data_as<uint8_t>();
  for (int64_t i = 0; i < scale.numel(); ++i) {
    const double s = scale.get(i);
    QOBS_CHECK(std::isfinite(s) && s > 0, InvalidArgument, name_or(label), ": scale element ", i, " = ", s,
               " has no E8M0 code (needs a positive finite value, R8.6.2)");
    int exp2 = 0;
    std::frexp(s, &exp2);  // s = m * 2^exp2 with m in [0.5, 1): floor(log2 s) = exp2 - 1
    const int64_t e = 127 + (exp2 - 1);
    dst[i] = static_cast<uint8_t>(static_cast<uint64_t>(e) & 0xFFu);  // wraps like the reference cast
  }
  return out;
}

Tensor decode_e8m0(const Tensor& codes, DType out_dtype) {
  QOBS_CHECK(codes.dtype() == DType::kU8, InvalidArgument, "E8M0 scales must be uint8, got ",
             dtype_name(codes.dtype()), " (R8.6.2)");
  QOBS_CHECK(is_floating(out_dtype), InvalidArgument, "E8M0 scales decode into a float dtype");
  Tensor out(out_dtype, codes.shape());
  const uint8_t* src = codes.data_as<uint8_t>();
  for (int64_t i = 0; i < codes.numel(); ++i)
    out.set(i, src[i] == 0xFF ? std::nan("") : std::ldexp(1.0, static_cast<int>(src[i]) - 127));
  return out;
}

}  // namespace qobs
