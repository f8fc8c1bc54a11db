// The fast quantize / dequantize / fake_quantize: the call is resolved exactly
// as for the reference (resolve_qdq), then the tensor is walked as rows x cols along
// its last axis, where the scale of element (r, c) is scale[row_off(r) + col_idx[c]].
// Rows (or pieces of long rows) are threaded with parallel_for; every element is
// independent, so any split gives the same bits. When the scale index advances by one
// every G columns (tensor / channel / token: never; group / block: G = group or block
// width; a per-column scale: G = 1), rows go to the vector kernel (qdq_simd.cc);
// everything else (g_idx permutations, f64, fp8 x, other storage) runs a typed scalar
// loop over the reference's element steps (qdq_element), with the dtype switches
// hoisted out of the loop.
#include "kernels/qdq/qdq_cpu.h"

#include <algorithm>
#include <mutex>

#include "core/arith.h"
#include "core/element.h"
#include "kernels/parallel/thread_pool.h"
#include "kernels/qdq/qdq_call.h"
#include "kernels/qdq/qdq_simd.h"

namespace qobs::kernels::cpu {
namespace {

using detail::Narrow;
using detail::narrow_of;
using detail::QdqStorage;
using qobs::detail::Arith;

/// Elements per parallel task (rows are grouped up to it; longer rows are cut).
constexpr int64_t kTaskElems = int64_t{1} << 15;
/// The unit a long row is cut in.
constexpr int64_t kPiece = 8192;

std::optional<QdqStorage> storage_of(DType dt) {
  switch (dt) {
    case DType::kF32:
      return QdqStorage::kF32;
    case DType::kBF16:
      return QdqStorage::kBF16;
    case DType::kF16:
      return QdqStorage::kF16;
    case DType::kI8:
      return QdqStorage::kI8;
    default:
      return std::nullopt;
  }
}

/// Calls f with a typed element loader for x (one dtype switch per call).
template <typename F>
void with_loader(const TensorView& x, F&& f) {
  const void* p = x.data;
  switch (x.dtype) {
    case DType::kF64:
      return f([p](int64_t i) { return static_cast<const double*>(p)[i]; });
    case DType::kF32:
      return f([p](int64_t i) { return static_cast<double>(static_cast<const float*>(p)[i]); });
    case DType::kBF16:
      return f([p](int64_t i) { return static_cast<double>(bf16_to_float(static_cast<const uint16_t*>(p)[i])); });
    case DType::kF16:
      return f([p](int64_t i) { return static_cast<double>(f16_to_float(static_cast<const uint16_t*>(p)[i])); });
    case DType::kI8:
      return f([p](int64_t i) { return static_cast<double>(static_cast<const int8_t*>(p)[i]); });
    default: {
      const DType dt = x.dtype;
      return f([p, dt](int64_t i) { return qobs::detail::load_element(p, dt, i); });
    }
  }
}

/// Calls f with a typed element store into out, narrowing as Tensor::set does.
template <typename F>
void with_storer(Tensor& out, F&& f) {
  void* p = out.data();
  switch (out.dtype()) {
    case DType::kF64:
      return f([p](int64_t i, double v) { static_cast<double*>(p)[i] = v; });
    case DType::kF32:
      return f([p](int64_t i, double v) { static_cast<float*>(p)[i] = static_cast<float>(v); });
    case DType::kBF16:
      return f([p](int64_t i, double v) { static_cast<uint16_t*>(p)[i] = double_to_bf16(v); });
    case DType::kF16:
      return f([p](int64_t i, double v) { static_cast<uint16_t*>(p)[i] = double_to_f16(v); });
    default:
      return f([&out](int64_t i, double v) { out.set(i, v); });
  }
}

class FastQdq {
 public:
  FastQdq(const QdqCall& c, const TensorView& x, Tensor& out, SimdLevel level) : c_(c), x_(x), out_(out) {
    const Shape& shape = c.out_shape;
    cols_ = shape.empty() ? 1 : shape.back();
    rows_ = cols_ == 0 ? 0 : out.numel() / cols_;
    col_idx_.resize(static_cast<std::size_t>(cols_));
    for (int64_t col = 0; col < cols_; ++col) col_idx_[static_cast<std::size_t>(col)] = column_index(col);
    if (const detail::QdqSimd* k = detail::qdq_simd(level)) setup_simd(k);
  }

  /// The scales and zero points as doubles, for the scalar steps: built on first use
  /// only (the lanes take floats; an NVFP4 weight has a million of each, 16 MB as doubles).
  void ensure_doubles() {
    std::call_once(doubles_once_, [&] {
      s_ = c_.scale.to_doubles();
      if (c_.has_zp) z_ = c_.zero_point.to_doubles();
    });
  }

  void run(int num_threads) {
    // A task is a block of whole rows, or one piece of a row when rows are long.
    const int64_t row_len = std::max<int64_t>(cols_, 1);
    const int64_t rows_per_task = std::max<int64_t>(1, kTaskElems / row_len);
    const int64_t pieces = rows_per_task > 1 ? 1 : (cols_ + kPiece - 1) / kPiece;
    const int64_t row_tasks = (rows_ + rows_per_task - 1) / rows_per_task;
    parallel_for(row_tasks * pieces, num_threads, [&](int64_t t, int) {
      const int64_t rt = t / pieces, piece = t % pieces;
      const int64_t c0 = pieces > 1 ? piece * kPiece : 0, c1 = pieces > 1 ? std::min(cols_, c0 + kPiece) : cols_;
      for (int64_t r = rt * rows_per_task; r < std::min(rows_, (rt + 1) * rows_per_task); ++r) row(r, c0, c1);
    });
  }

 private:
  /// The part of element (r, c)'s scale index that depends on c alone.
  int64_t column_index(int64_t col) const {
    switch (c_.layout) {
      case QdqCall::Layout::kGroup:
        return c_.rank[static_cast<std::size_t>(col)] / c_.group_size * c_.bs->in_strides.back();
      case QdqCall::Layout::kBlock:
        return col / c_.bw;
      case QdqCall::Layout::kBroadcast:
        return c_.out_shape.empty() ? 0 : col * c_.bsc->in_strides.back();
    }
    return 0;
  }
  int64_t row_offset(int64_t r) const {
    switch (c_.layout) {
      case QdqCall::Layout::kGroup:
        return c_.bs->offset(r * c_.ngroups);
      case QdqCall::Layout::kBlock:
        return (r / c_.bh) * c_.nbc;
      case QdqCall::Layout::kBroadcast:
        return c_.bsc->offset(r * cols_);
    }
    return 0;
  }

  void setup_simd(const detail::QdqSimd* k) {
    const auto& p = c_.plan;
    const auto xs = storage_of(x_.dtype), os = storage_of(out_.dtype());
    const auto ny = narrow_of(p.y_dt, p.mode), ns = narrow_of(p.s_dt, p.mode), nx = narrow_of(p.x_dt, p.mode);
    // quantization reads float x; dequantization also int8 codes
    const bool x_ok = xs && (*xs != QdqStorage::kI8 || c_.op == QdqOp::kDequantize);
    if (!x_ok || !os || !ny || !ns || !nx) return;
    // The vector kernel needs a scale index that advances by one every `group_`
    // columns (group, block, per-column scales) or never (tensor, channel, token);
    // g_idx orders break that and run the scalar loop.
    const int64_t idx0 = col_idx_[0];
    int64_t g = 1;
    while (g < cols_ && col_idx_[static_cast<std::size_t>(g)] == idx0) ++g;
    for (int64_t col = 0; col < cols_; ++col)
      if (col_idx_[static_cast<std::size_t>(col)] != idx0 + col / g) return;
    group_ = g;
    // the per-element constants of qdq_element, evaluated once per scale element
    const Arith ax{p.x_dt, p.mode}, as{p.s_dt, p.mode};
    sf_ = floats_of(c_.scale, sf_owned_);  // exact for f32 / bf16 / f16 scales; f64 rounds as a cast does
    if (c_.has_zp) {
      // int8 / uint8 and FP8 zero points are values of every float dtype (at most 8
      // significant bits, within f16's range), so casting them is the identity: NVFP4's
      // million FP8 zero points need no per-element rounding calls
      const DType zdt = c_.zero_point.dtype();
      if ((zdt == DType::kI8 || zdt == DType::kU8 || zdt == DType::kF8E4M3) && exact_small(p.x_dt) &&
          exact_small(p.s_dt)) {
        zxf_ = zsf_ = floats_of(c_.zero_point, zxf_owned_);
      } else {
        ensure_doubles();
        const Shape shape{static_cast<int64_t>(z_.size())};
        zxf_owned_ = Tensor::uninitialized(DType::kF32, shape);
        zsf_owned_ = Tensor::uninitialized(DType::kF32, shape);
        float* zx = zxf_owned_.data_as<float>();
        float* zs = zsf_owned_.data_as<float>();
        for (std::size_t i = 0; i < z_.size(); ++i) {
          zx[i] = static_cast<float>(ax.cast(z_[i]));
          zs[i] = static_cast<float>(as.cast(z_[i]));
        }
        zxf_ = zx;
        zsf_ = zs;
      }
    }
    args_.op = c_.op;
    args_.x_storage = *xs;
    args_.out_storage = *os;
    args_.has_zp = c_.has_zp;
    args_.y_narrow = *ny;
    args_.s_narrow = *ns;
    args_.grid = p.grid;
    args_.q_min = static_cast<float>(p.q_min);
    args_.q_max = static_cast<float>(p.q_max);
    simd_ = k;  // last: an early return above leaves the scalar loop
  }

  /// A tensor's values as floats: its own data when it is f32 (no copy), else
  /// Tensor::to's typed conversion (FP8 by table) kept in `owned`.
  static const float* floats_of(const Tensor& t, Tensor& owned) {
    if (t.dtype() == DType::kF32) return t.data_as<float>();
    owned = t.to(DType::kF32);
    return owned.data_as<float>();
  }

  /// Float dtypes that hold every int8 / uint8 / FP8 E4M3 value exactly.
  static bool exact_small(DType dt) {
    return dt == DType::kF64 || dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16;
  }

  void row(int64_t r, int64_t c0, int64_t c1) {
    const int64_t off = row_offset(r), base = r * cols_;
    if (!simd_) return scalar(base, off, c0, c1);
    detail::QdqRunArgs a = args_;
    a.x = static_cast<const unsigned char*>(x_.data) + (base + c0) * static_cast<int64_t>(dtype_size(x_.dtype));
    a.out = static_cast<unsigned char*>(out_.data()) + (base + c0) * static_cast<int64_t>(dtype_size(out_.dtype()));
    a.n = c1 - c0;
    const int64_t so = off + col_idx_[static_cast<std::size_t>(c0)];
    a.s = sf_ + so;
    if (c_.has_zp) {
      a.z_x = zxf_ + so;
      a.z_s = zsf_ + so;
    }
    a.group = group_;
    // a piece of a long row may start inside a group
    a.head = group_ - c0 % group_;
    if (!simd_->run(a)) scalar(base, off, c0, c1);  // NaN / Inf: the scalar steps
  }

  void scalar(int64_t base, int64_t off, int64_t c0, int64_t c1) {
    ensure_doubles();
    with_loader(x_, [&](auto load) {
      with_storer(out_, [&](auto store) {
        for (int64_t col = c0; col < c1; ++col) {
          const std::size_t so = static_cast<std::size_t>(off + col_idx_[static_cast<std::size_t>(col)]);
          store(base + col, qdq_element(c_.op, load(base + col), s_[so], c_.has_zp ? z_[so] : 0.0, c_.plan));
        }
      });
    });
  }

  const QdqCall& c_;
  const TensorView& x_;
  Tensor& out_;
  std::once_flag doubles_once_;
  std::vector<double> s_, z_;  // ensure_doubles()
  int64_t rows_ = 0, cols_ = 0;
  std::vector<int64_t> col_idx_;
  const detail::QdqSimd* simd_ = nullptr;  ///< null: the scalar loop
  int64_t group_ = 1;
  // f32 scales and zero points for the lanes: the tensors' own data, or conversions
  const float* sf_ = nullptr;
  const float* zxf_ = nullptr;
  const float* zsf_ = nullptr;
  Tensor sf_owned_, zxf_owned_, zsf_owned_;
  detail::QdqRunArgs args_;
};

}  // namespace

Tensor qdq(QdqOp op, const TensorView& x, const Tensor& scale, const Tensor* zero_point, const QuantizationArgs& args,
           const Tensor* g_idx, const Tensor* global_scale, std::optional<DType> out_dtype, NumericMode mode,
           SimdLevel level, int num_threads) {
  const QdqCall c = resolve_qdq(op, x, scale, zero_point, args, g_idx, global_scale, out_dtype, mode);
  // A broadcast x (an output larger than x) is rare enough for the reference loops.
  if (x.shape != c.out_shape) return run_reference(c, x);
  // every element is stored by run(): each row piece by the lanes or by the scalar steps
  Tensor out = Tensor::uninitialized(c.out_dtype, c.out_shape);
  if (out.numel() == 0) return out;
  // strided views are gathered once; the loops below read x as contiguous rows
  Tensor gathered;
  TensorView xv = x;
  if (!x.is_contiguous()) {
    gathered = Tensor::copy_of(x);
    xv = gathered.view();
  }
  FastQdq(c, xv, out, level).run(resolve_num_threads(num_threads));
  return out;
}

}  // namespace qobs::kernels::cpu
