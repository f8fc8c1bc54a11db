// Bit-level packing of quantized weights for the compressed-tensors checkpoint format
// (RULES §8.3 pack-quantized, §8.5 nvfp4-pack-quantized, §8.6 MX E8M0 scales, §8.10
// mxfp6-pack-quantized).
//
// Every function is a pure transformation of one tensor; none of them quantizes. The
// values handed in must already be on the quantized grid (quantize() of qparams.h), and
// out-of-grid input is an InvalidArgument naming the element, never silently clamped.
#pragma once

#include <cstdint>
#include <string_view>

#include "qobs/tensor.h"

namespace qobs {

/// R8.3.1 pack-quantized weights. q: int8 (R8.3.6), shape (*leading, cols), every value
/// in [-2^(b-1), 2^(b-1) - 1]. Each row becomes a little-endian bit stream of
/// u = q + 2^(b-1): element j occupies stream bits [j*b, j*b + b), stream bit k lives in
/// word k / 32 at bit k % 32. Returns int32 of shape (*leading, ceil(cols*b/32)), unused
/// high bits 0. num_bits in 1..8, else InvalidArgument. `label` names the tensor in errors.
Tensor pack_int_rows(const Tensor& q, int num_bits, std::string_view label = {});

/// Inverse of pack_int_rows: int32 words (*leading, words) -> int8 (*leading, cols).
/// The word count must equal ceil(cols*b/32) (ShapeError otherwise).
Tensor unpack_int_rows(const Tensor& packed, int num_bits, int64_t cols, std::string_view label = {});

/// R8.3.4 zero points of asymmetric group / channel weights, packed along dim 0: the
/// int8 matrix zp (rows, n_groups) is transposed, each of its n_groups columns packed
/// as one bit stream (R8.3.1), and the result transposed back: int32 of shape
/// (ceil(rows*b/32), n_groups). Example (b = 4): [[1,-1],[2,-2],[3,-3]] -> [[2985, 1383]].
Tensor pack_zero_points(const Tensor& zp, int num_bits, std::string_view label = {});

/// Inverse of pack_zero_points: int32 (ceil(rows*b/32), n_groups) -> int8 (rows, n_groups).
Tensor unpack_zero_points(const Tensor& packed, int num_bits, int64_t rows, std::string_view label = {});

/// R8.5.1 FP4 nibbles. q: a float tensor (f32/bf16/f16/f64) of shape (*leading, cols),
/// cols even, every value on the E2M1 grid {0, 0.5, 1, 1.5, 2, 3, 4, 6} with either
/// sign. Nibble code = (sign bit << 3) | magnitude index, the sign read from the sign
/// bit, so -0.0 gives code 8 (Q17: which zeros carry a sign is decided by quantize(),
/// R8.5.6). Byte k of a row holds column 2k in its low nibble and 2k+1 in its high one.
/// Returns uint8 (*leading, cols/2). NaN or off-grid values -> InvalidArgument.
Tensor pack_fp4(const Tensor& q, std::string_view label = {});

/// Inverse of pack_fp4: uint8 (*leading, cols/2) -> `out_dtype` (*leading, cols) with
/// code 8 decoded as -0.0. out_dtype must be a float dtype that holds the E2M1 grid
/// exactly (f64, f32, bf16, f16).
Tensor unpack_fp4(const Tensor& packed, DType out_dtype = DType::kF32, std::string_view label = {});

/// R8.10.1 FP6 codes, four in three bytes. q: a float tensor (f32/bf16/f16/f64) of shape
/// (*leading, cols), cols a multiple of 4, every value on the E2M3 grid (R2.8) with
/// either sign. Code = (sign bit << 5) | magnitude index (0..31 in value order), the sign
/// read from the sign bit (-0.0 gives code 32). Codes c0..c3 of four consecutive
/// columns form w = c0 | c1 << 6 | c2 << 12 | c3 << 18, stored as its three bytes,
/// low byte first. Returns uint8 (*leading, cols / 4 x 3). NaN or off-grid values ->
/// InvalidArgument.
Tensor pack_fp6(const Tensor& q, std::string_view label = {});

/// Inverse of pack_fp6: uint8 (*leading, 3k) -> `out_dtype` (*leading, 4k), code 32
/// decoded as -0.0. out_dtype must be a float dtype that holds the E2M3 grid exactly (f64,
/// f32, bf16, f16). Every byte string decodes.
Tensor unpack_fp6(const Tensor& packed, DType out_dtype = DType::kF32, std::string_view label = {});

/// R8.6.2 E8M0 scale codes: 127 + floor(log2(scale)) as uint8, same shape. scale: a float
/// tensor of positive finite values (R4.1 gives exact powers of two; a value between two
/// powers is truncated to the lower one, Q29). The floor is exact (frexp), not the
/// rounded log2 of a narrow dtype. Exponents outside [0, 255] wrap modulo 256 as the
/// reference's integer cast does (unreachable for scales from R4.1).
Tensor encode_e8m0(const Tensor& scale, std::string_view label = {});

/// Decodes E8M0 codes to 2^(e - 127) in `out_dtype` (code 255, the E8M0 NaN, decodes
/// to NaN; values below the dtype's range flush to 0 as the reference's cast does).
Tensor decode_e8m0(const Tensor& codes, DType out_dtype = DType::kF32);

}  // namespace qobs
