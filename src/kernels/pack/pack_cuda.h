// Row packing (R8.3.1 INT rows, R8.5.1 FP4) on a CUDA device: one output word (INT) or
// byte (FP4) per thread, with the bit order of packing_rows.h. Host and device code
// (QOBS_HD): the tests run the bodies on the CPU over every index against the plain
// references (tests/kernels/pack), the device runs the same source (pack_cuda.cu).
//
// A value off its range or grid is not an error the device can raise: the thread
// records its element's flat index with an atomic minimum, and the caller, seeing one,
// replays that row through the reference, whose error names it (as the CPU path does).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/element.h"
#include "qobs/formats.h"
#include "qobs/host_device.h"

namespace qobs::kernels::cuda {

struct PackIntArgs {
  const int8_t* q = nullptr;              ///< rows x cols values (device)
  int64_t rows = 0, cols = 0, words = 0;  ///< words per row: packed_words(cols, bits)
  int bits = 4;
  uint32_t* out = nullptr;                  ///< rows x words (device)
  unsigned long long* first_bad = nullptr;  ///< the least bad flat index, preset to ~0 (device)
};

/// Word w of row r: the bits of every value that overlaps it (R8.3.1: value j is
/// stored as j - lo in bits [j * bits, (j + 1) * bits) of the row's little-endian stream).
QOBS_NO_EXEC_CHECK
template <class AtomicMin>
QOBS_HD inline void pack_int_word(const PackIntArgs& a, int64_t r, int64_t w, AtomicMin atomic_min) {
  const int lo = -(1 << (a.bits - 1)), hi = (1 << (a.bits - 1)) - 1;
  const int64_t first = (w * 32) / a.bits, last = ((w + 1) * 32 + a.bits - 1) / a.bits;  // values [first, last)
  uint32_t word = 0;
  for (int64_t j = first; j < last && j < a.cols; ++j) {
    const int v = a.q[r * a.cols + j];
    if (v < lo || v > hi) {
      atomic_min(a.first_bad, static_cast<unsigned long long>(r * a.cols + j));
      continue;
    }
    const uint64_t u = static_cast<uint64_t>(static_cast<uint32_t>(v - lo));
    const int64_t bit = j * a.bits - w * 32;  // the value's first bit relative to the word (may be < 0)
    word |= static_cast<uint32_t>(bit >= 0 ? u << bit : u >> -bit);
  }
  a.out[r * a.words + w] = word;
}

struct PackFp4Args {
  const void* q = nullptr;  ///< n FP4 grid values in a float dtype (device)
  DType dtype = DType::kF32;
  int64_t n = 0;           ///< even
  uint8_t* out = nullptr;  ///< n / 2 bytes (device)
  unsigned long long* first_bad = nullptr;
};

/// The E2M1 code of v (fp4_pack_code's), or -1 when v is not a grid value.
QOBS_HD inline int fp4_code_or_bad(float v) {
  const float twice = 2.0f * std::fabs(v);
  const int k = twice <= 12.0f ? static_cast<int>(twice) : -1;  // NaN fails the comparison
  int idx = -1;
  if (k >= 0 && static_cast<float>(k) == twice) {
    switch (k) {
      case 0:
        idx = 0;
        break;
      case 1:
        idx = 1;
        break;
      case 2:
        idx = 2;
        break;
      case 3:
        idx = 3;
        break;
      case 4:
        idx = 4;
        break;
      case 6:
        idx = 5;
        break;
      case 8:
        idx = 6;
        break;
      case 12:
        idx = 7;
        break;
      default:
        break;
    }
  }
  if (idx < 0) return -1;
  return (std::signbit(v) ? 0x8 : 0x0) | idx;  // the sign bit: -0.0 gives code 8 (Q17)
}

/// Byte b: elements 2b (low nibble) and 2b + 1 (high nibble) (R8.5.1).
QOBS_NO_EXEC_CHECK
template <class AtomicMin>
QOBS_HD inline void pack_fp4_byte(const PackFp4Args& a, int64_t b, AtomicMin atomic_min) {
  uint8_t byte = 0;
  for (int h = 0; h < 2; ++h) {
    const int64_t i = 2 * b + h;
    const int code = fp4_code_or_bad(static_cast<float>(qobs::detail::load_element(a.q, a.dtype, i)));
    if (code < 0) {
      atomic_min(a.first_bad, static_cast<unsigned long long>(i));
      continue;
    }
    byte |= static_cast<uint8_t>(h == 0 ? code : code << 4);
  }
  a.out[b] = byte;
}

/// Launchers on `stream` (a cudaStream_t). pack_cuda.cu.
void launch_pack_int(const PackIntArgs& a, void* stream);
void launch_pack_fp4(const PackFp4Args& a, void* stream);

}  // namespace qobs::kernels::cuda
