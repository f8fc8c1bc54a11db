// Row packing (R8.3.1, R8.5.1) threaded over rows, behind kernels.h: the public
// qobs/packing.h calls it (src/ops/packing.cc). Rows are independent bit streams, so
// blocks of rows go to parallel_for and the result never depends on the split. Widths
// that divide 32 (1, 2, 4, 8 bits) never straddle a word and are packed a whole word at
// a time (loops the compiler vectorizes); the others reuse the reference's stream code
// per row. A range error is reported by replaying the row through the reference, so its
// message (tensor, row, index, value) is the reference's, and parallel_for rethrows the
// lowest failing task's, which holds the first failing row.
#include <algorithm>
#include <cstring>

#include "kernels/kernels_cuda.h"
#include "kernels/kernels.h"
#include "qobs/formats.h"
#include "qparams/packing_rows.h"
#include "kernels/pack/pack_simd.h"
#include "kernels/parallel/thread_pool.h"
#include "kernels/simd/simd_level.h"

namespace qobs::kernels {

namespace {

using qobs::detail::PackedRows;

/// Values per parallel task.
constexpr int64_t kTaskElems = int64_t{1} << 16;

/// parallel_for over blocks of whole rows: body(r0, r1).
template <typename Body>
void for_row_blocks(int64_t rows, int64_t cols, int num_threads, Body&& body) {
  const int64_t per = std::max<int64_t>(1, kTaskElems / std::max<int64_t>(cols, 1));
  parallel_for((rows + per - 1) / per, resolve_num_threads(num_threads),
               [&](int64_t t, int) { body(t * per, std::min(rows, (t + 1) * per)); });
}

/// The words of one in-range row, `Bits` a compile-time divisor of 32 so that the
/// compiler unrolls and vectorises the shifts (a runtime width kept it scalar).
template <int Bits>
void pack_in_range(const int8_t* v, int64_t cols, uint32_t* words) {
  constexpr int lo = -(1 << (Bits - 1));
  constexpr int per = 32 / Bits;
  const int64_t full = cols / per;
  for (int64_t k = 0; k < full; ++k) {
    uint32_t w = 0;
    for (int l = 0; l < per; ++l) w |= static_cast<uint32_t>(v[k * per + l] - lo) << (l * Bits);
    words[k] = w;
  }
  uint32_t w = 0;
  for (int64_t j = full * per; j < cols; ++j) w |= static_cast<uint32_t>(v[j] - lo) << ((j - full * per) * Bits);
  if (full * per < cols) words[full] = w;
}

/// One row of pack_int_rows; `words` is zero-filled.
void pack_row(const int8_t* v, int64_t cols, int bits, uint32_t* words, std::string_view label, int64_t row) {
  auto reference = [&] {
    qobs::detail::pack_stream([&](int64_t j) { return static_cast<int>(v[j]); }, cols, bits, words, label, row);
  };
  if (32 % bits != 0) return reference();
  const int lo = -(1 << (bits - 1));
  // v - lo outside [0, 2^bits) leaves bits above `bits` set (negatives wrap high)
  uint32_t over = 0;
  for (int64_t j = 0; j < cols; ++j) over |= static_cast<uint32_t>(v[j] - lo) >> bits;
  if (over != 0) return reference();  // throws the reference's range error
  switch (bits) {
    case 1:
      return pack_in_range<1>(v, cols, words);
    case 2:
      return pack_in_range<2>(v, cols, words);
    case 4:
      return pack_in_range<4>(v, cols, words);
    case 8:
      return pack_in_range<8>(v, cols, words);
    case 16:
      return pack_in_range<16>(v, cols, words);
    default:
      return reference();
  }
}

void unpack_row(const uint32_t* words, int64_t cols, int bits, int8_t* v) {
  if (32 % bits != 0) return qobs::detail::unpack_stream(words, cols, bits, v);
  const int lo = -(1 << (bits - 1));
  const uint32_t mask = (1u << bits) - 1u;
  const int per = 32 / bits;
  const int64_t full = cols / per;
  for (int64_t k = 0; k < full; ++k) {
    const uint32_t w = words[k];
    for (int l = 0; l < per; ++l) v[k * per + l] = static_cast<int8_t>(static_cast<int>((w >> (l * bits)) & mask) + lo);
  }
  for (int64_t j = full * per; j < cols; ++j)
    v[j] = static_cast<int8_t>(static_cast<int>((words[full] >> ((j - full * per) * bits)) & mask) + lo);
}

/// The 16 E2M1 values in dtype dt, encoded as Tensor::set narrows them.
Tensor fp4_table(DType dt) {
  Tensor lut(dt, {16});
  for (uint8_t code = 0; code < 16; ++code) lut.set(code, fp4_value(code));
  return lut;
}

/// pack_fp4 of elements [b, e) of a bf16 / f16 / f32 tensor by bit pattern: every E2M1
/// value is sign, exponent and at most the top mantissa bit, so `bits >> shift` indexes
/// a table of codes when the bits below are zero. Anything else (off-grid, NaN) goes to
/// fp4_pack_code, which throws the reference's error.
template <typename Bits>
void pack_fp4_by_bits(const Tensor& q, int shift, std::string_view label, uint8_t* dst, int64_t b, int64_t e) {
  int8_t code_of[1024];
  std::fill(code_of, code_of + 1024, static_cast<int8_t>(-1));
  const Tensor lut = fp4_table(q.dtype());
  for (int code = 0; code < 16; ++code) code_of[lut.data_as<Bits>()[code] >> shift] = static_cast<int8_t>(code);
  const Bits low = static_cast<Bits>((Bits(1) << shift) - 1);
  const Bits* src = q.data_as<Bits>();
  // Without branches first: an element off the table (low bits set, or no code) only
  // marks the range, which is then redone element by element so that the error names
  // the first offending index, as before.
  int bad = 0;
  for (int64_t i = b; i < e; i += 2) {
    const Bits v0 = src[i], v1 = src[i + 1];
    const int c0 = code_of[v0 >> shift] | ((v0 & low) != 0 ? -1 : 0);
    const int c1 = code_of[v1 >> shift] | ((v1 & low) != 0 ? -1 : 0);
    bad |= c0 | c1;  // negative when either is
    dst[i / 2] = static_cast<uint8_t>((c0 & 0xF) | ((c1 & 0xF) << 4));
  }
  if (bad >= 0) return;
  auto code = [&](int64_t i) {
    const Bits v = src[i];
    const int c = (v & low) == 0 ? code_of[v >> shift] : -1;
    if (c >= 0) return static_cast<uint8_t>(c);
    return qobs::detail::fp4_pack_code(static_cast<float>(q.get(i)), i, label);
  };
  for (int64_t i = b; i < e; i += 2) {
    const uint8_t lo = code(i);  // the lower index first: it is the one an error names
    dst[i / 2] = static_cast<uint8_t>(lo | (code(i + 1) << 4));
  }
}

/// unpack_fp4 through fp4_table, copied element by element.
template <typename T>
void unpack_fp4_typed(const uint8_t* src, const Tensor& lut, T* dst, int64_t b, int64_t e) {
  const T* table = lut.data_as<T>();
  for (int64_t i = b; i < e; i += 2) {
    const uint8_t byte = src[i / 2];
    dst[i] = table[byte & 0xF];
    dst[i + 1] = table[byte >> 4];
  }
}

/// The 64 E2M3 values (codes 0..63) in dtype dt, encoded as Tensor::set narrows them.
Tensor fp6_table(DType dt) {
  Tensor lut(dt, {64});
  for (uint8_t code = 0; code < 64; ++code) lut.set(code, fp6_value(code));
  return lut;
}

/// pack_fp6 of elements [b, e) (whole words of four) of a bf16 / f16 / f32 tensor by bit
/// pattern: every E2M3 value is sign, exponent and at most the top three mantissa bits,
/// so `bits >> shift` indexes a table of codes when the bits below are zero. Anything
/// else (off-grid, NaN) goes to fp6_pack_code, which throws naming the element.
template <typename Bits>
void pack_fp6_by_bits(const Tensor& q, int shift, std::string_view label, uint8_t* dst, int64_t b, int64_t e) {
  int8_t code_of[4096];
  std::fill(code_of, code_of + 4096, static_cast<int8_t>(-1));
  const Tensor lut = fp6_table(q.dtype());
  for (int code = 0; code < 64; ++code) code_of[lut.data_as<Bits>()[code] >> shift] = static_cast<int8_t>(code);
  const Bits low = static_cast<Bits>((Bits(1) << shift) - 1);
  const Bits* src = q.data_as<Bits>();
  int bad = 0;
  for (int64_t i = b; i < e; i += 4) {
    uint8_t c[4];
    for (int k = 0; k < 4; ++k) {
      const Bits v = src[i + k];
      const int ck = code_of[v >> shift] | ((v & low) != 0 ? -1 : 0);
      bad |= ck;  // negative when off the table
      c[k] = static_cast<uint8_t>(ck & 0x3F);
    }
    qobs::detail::fp6_pack_word(c, dst + i / 4 * 3);
  }
  if (bad >= 0) return;
  for (int64_t i = b; i < e; i += 4) {  // in order, so that the error names the first offending index
    uint8_t c[4];
    for (int k = 0; k < 4; ++k) {
      const Bits v = src[i + k];
      const int ck = (v & low) == 0 ? code_of[v >> shift] : -1;
      c[k] = ck >= 0 ? static_cast<uint8_t>(ck)
                     : qobs::detail::fp6_pack_code(static_cast<float>(q.get(i + k)), i + k, label);
    }
    qobs::detail::fp6_pack_word(c, dst + i / 4 * 3);
  }
}

/// unpack_fp6 through fp6_table, copied element by element.
template <typename T>
void unpack_fp6_typed(const uint8_t* src, const Tensor& lut, T* dst, int64_t b, int64_t e) {
  const T* table = lut.data_as<T>();
  for (int64_t i = b; i < e; i += 4) {
    uint8_t c[4];
    qobs::detail::fp6_unpack_word(src + i / 4 * 3, c);
    for (int k = 0; k < 4; ++k) dst[i + k] = table[c[k]];
  }
}

}  // namespace

Tensor pack_int_rows(const Tensor& q, int num_bits, std::string_view label, int num_threads) {
  const PackedRows p = qobs::detail::check_pack_int_rows(q, num_bits, label);
  Tensor out(DType::kI32, p.packed_shape);
  const int8_t* src = q.data_as<int8_t>();
  uint32_t* dst = out.data_as<uint32_t>();
  for_row_blocks(p.rows, p.cols, num_threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) pack_row(src + r * p.cols, p.cols, num_bits, dst + r * p.words, label, r);
  });
  return out;
}

Tensor unpack_int_rows(const Tensor& packed, int num_bits, int64_t cols, std::string_view label, int num_threads) {
  const PackedRows p = qobs::detail::check_unpack_int_rows(packed, num_bits, cols, label);
  Tensor out(DType::kI8, p.values_shape);
  const uint32_t* src = packed.data_as<uint32_t>();
  int8_t* dst = out.data_as<int8_t>();
  for_row_blocks(p.rows, cols, num_threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) unpack_row(src + r * p.words, cols, num_bits, dst + r * cols);
  });
  return out;
}

Tensor pack_fp4(const Tensor& q, std::string_view label, int num_threads) {
  // every byte is written below (or an error is thrown): no zero fill
  Tensor out = Tensor::uninitialized(DType::kU8, qobs::detail::check_pack_fp4(q, label));
  const int64_t cols = q.shape().back(), rows = cols == 0 ? 0 : q.numel() / cols;
  uint8_t* dst = out.data_as<uint8_t>();
  const detail::PackSimd* simd = detail::pack_simd(active_simd_level());
  // cols is even, so a block of rows owns whole output bytes
  for_row_blocks(rows, cols, num_threads, [&](int64_t r0, int64_t r1) {
    const int64_t b = r0 * cols, e = r1 * cols;
    // bf16 / f16 in vector lanes; a block with an element off the E2M1 grid is redone by
    // the table loop below, which names it
    const bool is16 = q.dtype() == DType::kBF16 || q.dtype() == DType::kF16;
    if (is16 && simd && simd->fp4_16(q.data_as<uint16_t>() + b, e - b, q.dtype() == DType::kBF16, dst + b / 2)) return;
    switch (q.dtype()) {
      case DType::kF32:
        return pack_fp4_by_bits<uint32_t>(q, 22, label, dst, b, e);
      case DType::kBF16:
        return pack_fp4_by_bits<uint16_t>(q, 6, label, dst, b, e);
      case DType::kF16:
        return pack_fp4_by_bits<uint16_t>(q, 9, label, dst, b, e);
      default:
        for (int64_t i = b; i < e; i += 2) {
          const uint8_t lo = qobs::detail::fp4_pack_code(static_cast<float>(q.get(i)), i, label);
          const uint8_t hi = qobs::detail::fp4_pack_code(static_cast<float>(q.get(i + 1)), i + 1, label);
          dst[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
        }
    }
  });
  return out;
}

Tensor unpack_fp4(const Tensor& packed, DType out_dtype, std::string_view label, int num_threads) {
  Tensor out(out_dtype, qobs::detail::check_unpack_fp4(packed, out_dtype, label));
  const Tensor lut = fp4_table(out_dtype);
  const int64_t cols = out.shape().back(), rows = cols == 0 ? 0 : out.numel() / cols;
  const uint8_t* src = packed.data_as<uint8_t>();
  for_row_blocks(rows, cols, num_threads, [&](int64_t r0, int64_t r1) {
    switch (dtype_size(out_dtype)) {
      case 8:
        return unpack_fp4_typed(src, lut, out.data_as<uint64_t>(), r0 * cols, r1 * cols);
      case 4:
        return unpack_fp4_typed(src, lut, out.data_as<uint32_t>(), r0 * cols, r1 * cols);
      default:
        return unpack_fp4_typed(src, lut, out.data_as<uint16_t>(), r0 * cols, r1 * cols);
    }
  });
  return out;
}

Tensor pack_fp6(const Tensor& q, std::string_view label, int num_threads) {
  // every byte is written below (or an error is thrown): no zero fill
  Tensor out = Tensor::uninitialized(DType::kU8, qobs::detail::check_pack_fp6(q, label));
  const int64_t cols = q.shape().back(), rows = cols == 0 ? 0 : q.numel() / cols;
  uint8_t* dst = out.data_as<uint8_t>();
  // cols is a multiple of 4, so a block of rows owns whole output words
  for_row_blocks(rows, cols, num_threads, [&](int64_t r0, int64_t r1) {
    const int64_t b = r0 * cols, e = r1 * cols;
    switch (q.dtype()) {
      case DType::kF32:
        return pack_fp6_by_bits<uint32_t>(q, 20, label, dst, b, e);
      case DType::kBF16:
        return pack_fp6_by_bits<uint16_t>(q, 4, label, dst, b, e);
      case DType::kF16:
        return pack_fp6_by_bits<uint16_t>(q, 7, label, dst, b, e);
      default:
        for (int64_t i = b; i < e; i += 4) {
          uint8_t c[4];
          for (int64_t k = 0; k < 4; ++k)
            c[k] = qobs::detail::fp6_pack_code(static_cast<float>(q.get(i + k)), i + k, label);
          qobs::detail::fp6_pack_word(c, dst + i / 4 * 3);
        }
    }
  });
  return out;
}

Tensor unpack_fp6(const Tensor& packed, DType out_dtype, std::string_view label, int num_threads) {
  Tensor out(out_dtype, qobs::detail::check_unpack_fp6(packed, out_dtype, label));
  const Tensor lut = fp6_table(out_dtype);
  const int64_t cols = out.shape().back(), rows = cols == 0 ? 0 : out.numel() / cols;
  const uint8_t* src = packed.data_as<uint8_t>();
  for_row_blocks(rows, cols, num_threads, [&](int64_t r0, int64_t r1) {
    switch (dtype_size(out_dtype)) {
      case 8:
        return unpack_fp6_typed(src, lut, out.data_as<uint64_t>(), r0 * cols, r1 * cols);
      case 4:
        return unpack_fp6_typed(src, lut, out.data_as<uint32_t>(), r0 * cols, r1 * cols);
      default:
        return unpack_fp6_typed(src, lut, out.data_as<uint16_t>(), r0 * cols, r1 * cols);
    }
  });
  return out;
}

namespace cuda {

void pack_int_rows(const Backend& b, const int8_t* q, int64_t rows, int64_t cols, int bits, uint32_t* out,
                   std::string_view label, Stream s) {
  qobs::detail::check_pack_bits(bits, label);
  PackIntArgs a;
  a.q = q;
  a.rows = rows;
  a.cols = cols;
  a.bits = bits;
  a.words = qobs::detail::packed_words(cols, bits);
  a.out = out;
  DeviceBuffer bad(b, sizeof(unsigned long long), s);
  b.fill(bad.get(), 0xFF, sizeof(unsigned long long), s);
  a.first_bad = bad.as<unsigned long long>();
  if (rows * a.words > 0) b.pack_int(a, s);
  const auto f = read_back<unsigned long long>(b, bad.get(), s);
  if (f == ~0ull) return;
  // the reference's error for the first bad value: its row, replayed on the host
  const int64_t r = static_cast<int64_t>(f) / cols;
  Tensor row = Tensor::uninitialized(DType::kI8, {1, cols});
  b.copy(row.data(), q + r * cols, static_cast<std::size_t>(cols), CopyKind::kDeviceToHost, s);
  b.synchronize(s);
  qobs::detail::pack_stream([&](int64_t j) { return static_cast<int>(row.data_as<int8_t>()[j]); }, cols, bits,
                            std::vector<uint32_t>(static_cast<std::size_t>(a.words + 1)).data(), label, r);
}

void pack_fp4(const Backend& b, const void* q, DType dtype, int64_t n, uint8_t* out, std::string_view label, Stream s) {
  PackFp4Args a{q, dtype, n, out, nullptr};
  DeviceBuffer bad(b, sizeof(unsigned long long), s);
  b.fill(bad.get(), 0xFF, sizeof(unsigned long long), s);
  a.first_bad = bad.as<unsigned long long>();
  if (n > 0) b.pack_fp4(a, s);
  const auto f = read_back<unsigned long long>(b, bad.get(), s);
  if (f == ~0ull) return;
  Tensor v = Tensor::uninitialized(dtype, {1});
  b.copy(v.data(), static_cast<const unsigned char*>(q) + f * dtype_size(dtype), dtype_size(dtype),
         CopyKind::kDeviceToHost, s);
  b.synchronize(s);
  qobs::detail::fp4_pack_code(static_cast<float>(v.get(0)), static_cast<int64_t>(f), label);
}

}  // namespace cuda

}  // namespace qobs::kernels
