// One module's weight -> compressed-tensors tensors (RULES §8.2-8.6, table R8.9): the
// setup and the assembly are shared with the device path (device.cc), which quantizes,
// packs and measures on the GPU in between.
#include "pipeline/compress.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/check.h"
#include "core/sizes.h"
#include "qobs/packing.h"
#include "qobs/qparams.h"

namespace qobs::detail {
namespace {

// ceil(a / b) for a >= 0, b > 0, without the overflow of (a + b - 1) / b near INT64_MAX.
int64_t cdiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }

// a * b of shape arithmetic; InvalidArgument naming the weight instead of a signed overflow.
int64_t mul_dims(int64_t a, int64_t b, std::string_view label, const Shape& w) {
  return mul_size(a, b, label, ": weight shape ", ShowShape{w}, " is too large to plan its packed tensors");
}

// R5.7.3 scale shape of a 2-D weight.
Shape scale_shape(const QuantizationArgs& a, const Shape& w) {
  switch (a.get_strategy()) {
    case Strategy::kTensor:
      return {1};
    case Strategy::kChannel:
      return {w[0], 1};
    case Strategy::kGroup:
    case Strategy::kTensorGroup:
      return {w[0], cdiv(w[1], *a.group_size)};
    case Strategy::kBlock:
      return {cdiv(w[0], (*a.block_structure)[0]), cdiv(w[1], (*a.block_structure)[1])};
    default:
      break;
  }
  QOBS_THROW(InvalidArgument, "weights with strategy ", to_string(a.get_strategy()), " cannot be calibrated (R3.2)");
}

bool packs_int(const std::string& format) { return format == "pack-quantized"; }
bool e8m0_scales(const std::string& format) {
  return format == "mxfp4-pack-quantized" || format == "mxfp6-pack-quantized" || format == "mxfp8-quantized";
}
// The compressor that quantizes without the (all-zero) zero point: MXFP6's (R8.10.1),
// so that -0.0 keeps its sign (x / s + 0 would make it +0.0).
bool quantizes_without_zero_point(const std::string& format) { return packs_fp6(format); }
// Group and channel zero points of pack-quantized weights are bit-packed along dim 0
// (R8.3.4); any other zero point is stored as computed.
bool packs_zero_point(const QuantizationArgs& a, const std::string& format) {
  const Strategy s = a.get_strategy();
  return packs_int(format) && (s == Strategy::kGroup || s == Strategy::kChannel || s == Strategy::kTensorGroup);
}

}  // namespace

bool packs_fp4(const std::string& format) {
  return format == "nvfp4-pack-quantized" || format == "mxfp4-pack-quantized";
}
bool packs_fp6(const std::string& format) { return format == "mxfp6-pack-quantized"; }

DType model_dtype_of(DType w) {
  return (w == DType::kF16 || w == DType::kBF16 || w == DType::kF32 || w == DType::kF64) ? w : DType::kF16;
}

std::vector<PlannedTensor> plan_compressed(const QuantizationArgs& a, const std::string& format, DType weight_dtype,
                                           const Shape& w, std::string_view label) {
  QOBS_CHECK(w.size() == 2, InvalidArgument, label, ": only 2-D weights are quantized, got shape ", shape_str(w));
  QOBS_CHECK(is_floating(weight_dtype) && weight_dtype != DType::kF8E4M3, InvalidArgument, label,
             ": weights must be f32, bf16, f16 or f64 to quantize, got ", dtype_name(weight_dtype));
  // An empty weight has no statistics to calibrate from; the observer would fail later
  // with a message that names no tensor.
  QOBS_CHECK(w[0] > 0 && w[1] > 0, InvalidArgument, label, ": weight of shape ", shape_str(w),
             " has no elements and cannot be quantized; exclude it with --ignore");
  const Strategy st = a.get_strategy();
  if (st == Strategy::kGroup || st == Strategy::kTensorGroup) {
    const int64_t gs = *a.group_size;
    QOBS_CHECK(w[1] % gs == 0, InvalidArgument, label, ": group_size ", gs, " does not divide ", w[1],
               " columns (R5.3.1); exclude the layer with --ignore or choose a scheme with another group size");
  }
  const DType md = model_dtype_of(weight_dtype);
  const Shape ss = scale_shape(a, w);
  std::vector<PlannedTensor> out;
  // (not value_or: pytorch_dtype() throws for FP4, whose zp_dtype is always set, R1.3.1-9)
  const DType zp_dt = a.zp_dtype ? *a.zp_dtype : a.pytorch_dtype();
  if (packs_int(format)) {
    QOBS_CHECK(a.type == QuantType::kInt && a.num_bits >= 1 && a.num_bits <= 8, InvalidArgument, label,
               ": pack-quantized needs int weights of 1..8 bits (R8.3.6)");
    out.push_back({"weight_packed", DType::kI32, {w[0], cdiv(mul_dims(w[1], a.num_bits, label, w), 32)}});
    out.push_back({"weight_scale", md, ss});
    if (!a.symmetric) {
      if (packs_zero_point(a, format))
        out.push_back({"weight_zero_point", DType::kI32, {cdiv(mul_dims(ss[0], a.num_bits, label, w), 32), ss[1]}});
      else out.push_back({"weight_zero_point", zp_dt, ss});
    }
    out.push_back({"weight_shape", DType::kI64, {2}});
  } else if (packs_fp4(format)) {
    QOBS_CHECK(a.is_fp4(), InvalidArgument, label, ": ", format, " needs FP4 weights (R8.5)");
    QOBS_CHECK(w[1] % 2 == 0, InvalidArgument, label, ": FP4 packing needs an even number of columns, got ", w[1],
               " (R8.5.1)");
    out.push_back({"weight_packed", DType::kU8, {w[0], w[1] / 2}});
    if (format == "nvfp4-pack-quantized") {
      out.push_back({"weight_scale", a.scale_dtype.value_or(DType::kF8E4M3), ss});
      out.push_back({"weight_global_scale", DType::kF32, {1}});
    } else {
      out.push_back({"weight_scale", DType::kU8, ss});
    }
  } else if (packs_fp6(format)) {
    QOBS_CHECK(a.is_fp6(), InvalidArgument, label, ": ", format, " needs FP6 weights (R8.10)");
    QOBS_CHECK(w[1] % 4 == 0, InvalidArgument, label, ": FP6 packing needs a multiple of 4 columns, got ", w[1],
               " (R8.10.1)");
    out.push_back({"weight_packed", DType::kU8, {w[0], w[1] / 4 * 3}});
    out.push_back({"weight_scale", DType::kU8, ss});
  } else {
    QOBS_CHECK(!a.is_fp6(), InvalidArgument, label,
               ": FP6 weights are stored only as mxfp6-pack-quantized "
               "(float, 6 bits, group_size 32), not ",
               format, " (R8.10)");
    // int-quantized, float-quantized, naive-quantized, mxfp8-quantized: the weight itself
    // in the quantized dtype (R8.4.1, R8.6.4).
    out.push_back({"weight", a.pytorch_dtype(), w});
    out.push_back({"weight_scale", e8m0_scales(format) ? DType::kU8 : md, ss});
    if (!a.symmetric) out.push_back({"weight_zero_point", zp_dt, ss});
    if (st == Strategy::kTensorGroup) out.push_back({"weight_global_scale", DType::kF32, {1}});
  }
  return out;
}

namespace {

/// weight_packed of the quantized values q (R8.3.1, R8.5.1, R8.10.1).
Tensor pack_weight(const Tensor& q, const QuantizationArgs& a, const std::string& format, std::string_view label) {
  if (packs_fp4(format)) return pack_fp4(q, label);
  if (packs_fp6(format)) return pack_fp6(q, label);
  return pack_int_rows(q, a.num_bits, label);
}

/// Rows [r0, r1) of a 2-D tensor with one row of qparams per weight row, as a tensor (a
/// 0- or 1-element tensor-strategy qparam is every row's).
Tensor qparam_rows(const Tensor& t, int64_t r0, int64_t r1) {
  if (t.numel() <= 1) return t;
  const int64_t width = t.shape()[1];
  const auto* base =
      static_cast<const unsigned char*>(t.data()) + r0 * width * static_cast<int64_t>(dtype_size(t.dtype()));
  return Tensor::copy_of(TensorView(base, t.dtype(), {r1 - r0, width}));
}

/// The quantized weight, its packed form (when the format packs) and the report's error
/// sums of `w` against dequantize(q) with the stored qparams (what a loader
/// reconstructs). When the qparams are per row (tensor, channel, group, tensor_group) of
/// a 2-D weight, this runs a block of rows at a time: quantize, pack into the packed
/// tensor's rows, dequantize and add to the sums while the block is in cache, so neither
/// the quantized nor the dequantized copy is ever whole (each was as large as the
/// weight). Quantization, packing and dequantization are element- or row-wise, and the
/// blocks hold a multiple of 8 elements so that kernels::add_error_sums gives
/// error_sums' result bit for bit: the outputs equal the whole-tensor steps'.
Quantized quantize_and_measure(const TensorView& w, const Tensor& scale, const Tensor& zp, const QuantizationArgs& a,
                               const Tensor* g, std::optional<DType> q_dt, const std::string& format,
                               const PlannedTensor* packed_plan, std::string_view label) {
  // A loader drops symmetric zero points (R8.2.3) and dequantizes without one.
  const bool load_zp = !a.symmetric;
  double sig[kernels::kErrorSumPartials] = {}, err[kernels::kErrorSumPartials] = {};
  Quantized out;
  const Strategy st = a.get_strategy();
  const bool per_row =
      st == Strategy::kTensor || st == Strategy::kChannel || st == Strategy::kGroup || st == Strategy::kTensorGroup;
  const int64_t rows = w.dim() == 2 ? w.shape[0] : 0, cols = w.dim() == 2 ? w.shape[1] : 0;
  const auto rows_of = [&](const Tensor& t) { return t.numel() <= 1 || (t.dim() == 2 && t.shape()[0] == rows); };
  const Tensor* qzp = quantizes_without_zero_point(format) ? nullptr : &zp;
  if (!per_row || rows == 0 || cols == 0 || !w.is_contiguous() || !rows_of(scale) || !rows_of(zp)) {
    out.q = quantize(w, scale, qzp, a, nullptr, g, q_dt);
    const Tensor dq = dequantize(out.q.view(), scale, load_zp ? &zp : nullptr, a, nullptr, g, w.dtype);
    kernels::add_error_sums(w, dq.view(), sig, err);
    out.error = kernels::error_sums_of(sig, err);
    return out;
  }
  // Packed by blocks only where the format packs; a format that stores q itself
  // quantizes it whole first and is measured by blocks.
  const bool pack_blocks = packed_plan != nullptr && packed_plan->shape.size() == 2 && packed_plan->shape[0] == rows;
  if (pack_blocks) out.packed = Tensor::uninitialized(packed_plan->dtype, packed_plan->shape);
  else out.q = quantize(w, scale, qzp, a, nullptr, g, q_dt);
  // about 2^20 elements per block: the block's copies stay in L2 / L3 between the steps
  const int64_t block_rows = std::max<int64_t>(8, ((int64_t{1} << 20) / cols) / 8 * 8);
  const std::size_t w_es = dtype_size(w.dtype);
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
    const int64_t r1 = std::min(rows, r0 + block_rows);
    const TensorView wv(static_cast<const unsigned char*>(w.data) + r0 * cols * static_cast<int64_t>(w_es), w.dtype,
                        {r1 - r0, cols});
    const Tensor s = qparam_rows(scale, r0, r1), z = qparam_rows(zp, r0, r1);
    Tensor qb;
    TensorView qv;
    if (pack_blocks) {
      qb = quantize(wv, s, qzp ? &z : nullptr, a, nullptr, g, q_dt);
      qv = qb.view();
      const Tensor pb = pack_weight(qb, a, format, label);
      const std::size_t row_bytes = static_cast<std::size_t>(pb.nbytes() / (r1 - r0));
      std::memcpy(static_cast<unsigned char*>(out.packed.data()) + static_cast<std::size_t>(r0) * row_bytes, pb.data(),
                  pb.nbytes());
    } else {
      qv = TensorView(
          static_cast<const unsigned char*>(out.q.data()) + r0 * cols * static_cast<int64_t>(dtype_size(out.q.dtype())),
          out.q.dtype(), {r1 - r0, cols});
    }
    const Tensor dq = dequantize(qv, s, load_zp ? &z : nullptr, a, nullptr, g, w.dtype);
    kernels::add_error_sums(wv, dq.view(), sig, err);
  }
  out.error = kernels::error_sums_of(sig, err);
  return out;
}

}  // namespace

const PlannedTensor* CompressSetup::packed() const {
  for (const PlannedTensor& p : plan)
    if (p.local == "weight_packed") return &p;
  return nullptr;
}

CompressSetup compress_setup(DType weight_dtype, const Shape& weight_shape, const QParams& qp,
                             const QuantizationArgs& a, const std::string& format, std::string_view label) {
  CompressSetup s;
  s.plan = plan_compressed(a, format, weight_dtype, weight_shape, label);
  // R5.7.5 / R8.2.5: the scale as the module parameter holds it, and quantization uses
  // exactly that value. fp8 (NVFP4) and power-of-two (MX) scales are exact in every
  // model dtype, so the stored fp8 / E8M0 codes below decode to the same value.
  s.scale = qp.scale.to(model_dtype_of(weight_dtype));
  if (a.type == QuantType::kInt || a.num_bits == 8) s.q_dtype = a.pytorch_dtype();  // int8/16/32 or fp8
  return s;
}

Compressed assemble_compressed(const CompressSetup& setup, Quantized&& qz, const QParams& qp, const QuantizationArgs& a,
                               const std::string& format, const Shape& w_shape, std::string_view label) {
  const Tensor& zp = qp.zero_point;
  const Tensor* g = qp.global_scale ? &*qp.global_scale : nullptr;
  Compressed c;
  c.error = qz.error;
  for (const PlannedTensor& p : setup.plan) {
    Tensor t;
    if (p.local == "weight_packed") {
      if (qz.packed.numel() > 0) t = std::move(qz.packed);
      else t = pack_weight(qz.q, a, format, label);
    } else if (p.local == "weight") {
      t = std::move(qz.q);
    } else if (p.local == "weight_scale") {
      if (p.dtype == DType::kU8) t = encode_e8m0(setup.scale, label);  // R8.6.2
      else t = setup.scale.to(p.dtype);                                // model dtype, or fp8 (R8.5.2)
    } else if (p.local == "weight_zero_point") {
      const Tensor z = zp.to(DType::kI8);
      t = packs_zero_point(a, format)
              ? pack_zero_points(z.reshaped({z.numel() / z.shape().back(), z.shape().back()}), a.num_bits, label)
              : zp;
    } else if (p.local == "weight_global_scale") {
      QOBS_CHECK(g != nullptr, InvalidArgument, label, ": tensor_group weights produced no global scale (R6.1.5)");
      t = g->to(DType::kF32).reshaped({1});
    } else if (p.local == "weight_shape") {
      t = Tensor::from_values(DType::kI64, {2}, {static_cast<double>(w_shape[0]), static_cast<double>(w_shape[1])});
    }
    QOBS_CHECK(t.dtype() == p.dtype && t.shape() == p.shape, InvalidArgument, label, ".", p.local, ": produced ",
               dtype_name(t.dtype()), " ", shape_str(t.shape()), ", planned ", dtype_name(p.dtype), " ",
               shape_str(p.shape));
    c.tensors.emplace_back(p.local, std::move(t));
  }
  return c;
}

Compressed compress_weight(const TensorView& w, const QParams& qp, const QuantizationArgs& a, const std::string& format,
                           std::string_view label) {
  const CompressSetup setup = compress_setup(w.dtype, w.shape, qp, a, format, label);
  const Tensor* g = qp.global_scale ? &*qp.global_scale : nullptr;
  Quantized qz =
      quantize_and_measure(w, setup.scale, qp.zero_point, a, g, setup.q_dtype, format, setup.packed(), label);
  return assemble_compressed(setup, std::move(qz), qp, a, format, w.shape, label);
}

}  // namespace qobs::detail
