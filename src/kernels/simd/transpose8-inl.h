// Per-target 8 x 8 float transpose on 256-bit vectors (on AVX-512 too), shared by the
// batch kernel's input (poly_batch_simd.cc BatchTranspose) and the eight-groups-per-pass
// min-max (minmax_simd.cc). Included inside each kernel file's per-target namespace,
// once per Highway target -- hence no include guard.

using D8 = hn::FixedTag<float, 8>;  // 256-bit vectors, on AVX-512 too
using V8 = hn::Vec<D8>;

/// col[k] lane l = row[l] lane k: pairs of floats, pairs of pairs (as doubles), then
/// 128-bit halves.
HWY_INLINE void transpose8x8(D8 d8, const V8* row, V8* col) {
  const hn::Repartition<double, D8> d8d;
  V8 t[8], u[8];
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = hn::InterleaveLower(d8, row[2 * k], row[2 * k + 1]);
    t[2 * k + 1] = hn::InterleaveUpper(d8, row[2 * k], row[2 * k + 1]);
  }
  for (int k = 0; k < 2; ++k)
    for (int h = 0; h < 2; ++h) {
      const auto a = hn::BitCast(d8d, t[4 * k + h]), b = hn::BitCast(d8d, t[4 * k + 2 + h]);
      u[4 * k + 2 * h] = hn::BitCast(d8, hn::InterleaveLower(d8d, a, b));
      u[4 * k + 2 * h + 1] = hn::BitCast(d8, hn::InterleaveUpper(d8d, a, b));
    }
  // u[0..3]: elements 0-3 of rows 0-3 (low half) and 4-7 (high half); u[4..7] rows 4-7
  for (int k = 0; k < 4; ++k) {
    col[k] = hn::ConcatLowerLower(d8, u[4 + k], u[k]);
    col[k + 4] = hn::ConcatUpperUpper(d8, u[4 + k], u[k]);
  }
}
