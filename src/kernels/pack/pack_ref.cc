// Scalar references of the row packing (R8.3.1, R8.5.1): one row (or element)
// after another, the executable specification of the threaded versions in
// kernels/pack/pack.cc.
#include "kernels/kernels.h"
#include "qobs/formats.h"
#include "qparams/packing_rows.h"

namespace qobs::kernels::ref {

Tensor pack_int_rows(const Tensor& q, int num_bits, std::string_view label) {
  const auto p = qobs::detail::check_pack_int_rows(q, num_bits, label);
  Tensor out(DType::kI32, p.packed_shape);
  const int8_t* src = q.data_as<int8_t>();
  uint32_t* dst = out.data_as<uint32_t>();
  for (int64_t r = 0; r < p.rows; ++r)
    qobs::detail::pack_stream([&](int64_t j) { return static_cast<int>(src[r * p.cols + j]); }, p.cols, num_bits,
                              dst + r * p.words, label, r);
  return out;
}

Tensor unpack_int_rows(const Tensor& packed, int num_bits, int64_t cols, std::string_view label) {
  const auto p = qobs::detail::check_unpack_int_rows(packed, num_bits, cols, label);
  Tensor out(DType::kI8, p.values_shape);
  const uint32_t* src = packed.data_as<uint32_t>();
  int8_t* dst = out.data_as<int8_t>();
  for (int64_t r = 0; r < p.rows; ++r) qobs::detail::unpack_stream(src + r * p.words, cols, num_bits, dst + r * cols);
  return out;
}

Tensor pack_fp4(const Tensor& q, std::string_view label) {
  Tensor out(DType::kU8, qobs::detail::check_pack_fp4(q, label));
  uint8_t* dst = out.data_as<uint8_t>();
  const int64_t n = q.numel();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t code = qobs::detail::fp4_pack_code(static_cast<float>(q.get(i)), i, label);
    dst[i / 2] |= static_cast<uint8_t>((i % 2 == 0) ? code : code << 4);
  }
  return out;
}

Tensor unpack_fp4(const Tensor& packed, DType out_dtype, std::string_view label) {
  Tensor out(out_dtype, qobs::detail::check_unpack_fp4(packed, out_dtype, label));
  const uint8_t* src = packed.data_as<uint8_t>();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t byte = src[i / 2];
    out.set(i, fp4_value(static_cast<uint8_t>(i % 2 == 0 ? byte & 0xF : byte >> 4)));
  }
  return out;
}

Tensor pack_fp6(const Tensor& q, std::string_view label) {
  Tensor out(DType::kU8, qobs::detail::check_pack_fp6(q, label));
  uint8_t* dst = out.data_as<uint8_t>();
  const int64_t n = q.numel();
  for (int64_t i = 0; i < n; i += 4) {
    uint8_t c[4];
    for (int64_t k = 0; k < 4; ++k) c[k] = qobs::detail::fp6_pack_code(static_cast<float>(q.get(i + k)), i + k, label);
    qobs::detail::fp6_pack_word(c, dst + i / 4 * 3);
  }
  return out;
}

Tensor unpack_fp6(const Tensor& packed, DType out_dtype, std::string_view label) {
  Tensor out(out_dtype, qobs::detail::check_unpack_fp6(packed, out_dtype, label));
  const uint8_t* src = packed.data_as<uint8_t>();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; i += 4) {
    uint8_t c[4];
    qobs::detail::fp6_unpack_word(src + i / 4 * 3, c);
    for (int64_t k = 0; k < 4; ++k) out.set(i + k, fp6_value(c[k]));
  }
  return out;
}

}  // namespace qobs::kernels::ref
