// The public qobs/packing.h (RULES §8.3, §8.5, §8.6). Weight rows are packed by the
// threaded kernels (kernels.h); the zero points and E8M0 scales are small and packed
// here, one scalar pass each.
#include "qobs/packing.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/kernels.h"
#include "qobs/formats.h"
#include "qparams/packing_rows.h"

namespace qobs {

using detail::check_pack_bits;
using detail::name_or;
using detail::packed_words;

Tensor pack_int_rows(const Tensor& q, int num_bits, std::string_view label) {
  return kernels::pack_int_rows(q, num_bits, label);
}
Tensor unpack_int_rows(const Tensor& packed, int num_bits, int64_t cols, std::string_view label) {
  return kernels::unpack_int_rows(packed, num_bits, cols, label);
}
Tensor pack_fp4(const Tensor& q, std::string_view label) { return kernels::pack_fp4(q, label); }
Tensor unpack_fp4(const Tensor& packed, DType out_dtype, std::string_view label) {
  return kernels::unpack_fp4(packed, out_dtype, label);
}
Tensor pack_fp6(const Tensor& q, std::string_view label) { return kernels::pack_fp6(q, label); }
Tensor unpack_fp6(const Tensor& packed, DType out_dtype, std::string_view label) {
  return kernels::unpack_fp6(packed, out_dtype, label);
}

Tensor pack_zero_points(const Tensor& zp, int num_bits, std::string_view label) {
  check_pack_bits(num_bits, label);
  QOBS_CHECK(zp.dtype() == DType::kI8, InvalidArgument, name_or(label), ": zero points must be int8 to pack, got ",
             dtype_name(zp.dtype()), " (R8.3.4)");
  QOBS_CHECK(zp.dim() == 2, ShapeError, name_or(label), ": zero points to pack must be 2-D (rows, groups), got ",
             shape_str(zp.shape()), " (R8.3.4)");
  const int64_t rows = zp.shape()[0], groups = zp.shape()[1];
  const int64_t nw = packed_words(rows, num_bits);
  // Column g of zp is one bit stream; pack it into a scratch stream, then scatter the
  // words into column g of the (nw, groups) result.
  Tensor out(DType::kI32, {nw, groups});
  std::vector<uint32_t> stream(static_cast<std::size_t>(nw));
  const int8_t* src = zp.data_as<int8_t>();
  uint32_t* dst = out.data_as<uint32_t>();
  for (int64_t g = 0; g < groups; ++g) {
    std::fill(stream.begin(), stream.end(), 0u);
    detail::pack_stream([&](int64_t r) { return static_cast<int>(src[r * groups + g]); }, rows, num_bits, stream.data(),
                        label, g);
    for (int64_t w = 0; w < nw; ++w) dst[w * groups + g] = stream[static_cast<std::size_t>(w)];
  }
  return out;
}

Tensor unpack_zero_points(const Tensor& packed, int num_bits, int64_t rows, std::string_view label) {
  check_pack_bits(num_bits, label);
  QOBS_CHECK(packed.dtype() == DType::kI32 && packed.dim() == 2, InvalidArgument, name_or(label),
             ": packed zero points must be 2-D int32 (R8.3.4)");
  const int64_t nw = packed_words(rows, num_bits), groups = packed.shape()[1];
  QOBS_CHECK(packed.shape()[0] == nw, ShapeError, name_or(label), ": ", packed.shape()[0],
             " packed zero-point rows, expected ", nw, " for ", rows, " rows of ", num_bits, " bits (R8.3.4)");
  Tensor out(DType::kI8, {rows, groups});
  std::vector<uint32_t> stream(static_cast<std::size_t>(nw));
  const uint32_t* src = packed.data_as<uint32_t>();
  int8_t* dst = out.data_as<int8_t>();
  std::vector<int8_t> column(static_cast<std::size_t>(rows));
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t w = 0; w < nw; ++w) stream[static_cast<std::size_t>(w)] = src[w * groups + g];
    detail::unpack_stream(stream.data(), rows, num_bits, column.data());
    for (int64_t r = 0; r < rows; ++r) dst[r * groups + g] = column[static_cast<std::size_t>(r)];
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
    const int64_t e = kE8M0Bias + (exp2 - 1);
    dst[i] = static_cast<uint8_t>(static_cast<uint64_t>(e) & 0xFFu);  // wraps like the reference cast
  }
  return out;
}

Tensor decode_e8m0(const Tensor& codes, DType out_dtype) {
  QOBS_CHECK(codes.dtype() == DType::kU8, InvalidArgument, "E8M0 scales must be uint8, got ", dtype_name(codes.dtype()),
             " (R8.6.2)");
  QOBS_CHECK(is_floating(out_dtype), InvalidArgument, "E8M0 scales decode into a float dtype");
  Tensor out(out_dtype, codes.shape());
  const uint8_t* src = codes.data_as<uint8_t>();
  for (int64_t i = 0; i < codes.numel(); ++i)
    out.set(i, src[i] == 0xFF ? std::nan("") : std::ldexp(1.0, static_cast<int>(src[i]) - kE8M0Bias));
  return out;
}

}  // namespace qobs
