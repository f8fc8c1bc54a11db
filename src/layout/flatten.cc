// RULES §3 flatten_for_calibration as index maps over the caller's memory. A copy is made
// only when the reference's reshape cannot be expressed with strides: block padding
// (R3.5), g_idx column reordering (R7.2.4), and activation dims that must be merged
// but are not contiguous with each other.
#include "qobs/layout.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "core/element.h"
#include "core/sizes.h"
#include "qobs/formats.h"

namespace qobs {

namespace {

int64_t axes_product(const std::vector<Axis>& axes) {
  int64_t n = 1;
  for (const Axis& a : axes) n = detail::mul_size(n, a.size, "flattened layout axis product");
  return n;
}

/// Offset of the i-th index (row-major) of a list of axes.
int64_t axes_offset(const std::vector<Axis>& axes, int64_t i) {
  int64_t off = 0;
  for (std::size_t d = axes.size(); d-- > 0;) {
    const int64_t idx = i % axes[d].size;
    i /= axes[d].size;
    off += idx * axes[d].stride;
  }
  return off;
}

/// True when `axes` (last fastest) step through storage row-major, the innermost one
/// with stride `inner`: each stride is the product of the later sizes times `inner`
/// (axes of size 1 take any stride).
bool axes_row_major(const std::vector<Axis>& axes, int64_t inner) {
  int64_t expect = inner;
  for (std::size_t d = axes.size(); d-- > 0;) {
    if (axes[d].size == 1) continue;
    if (axes[d].stride != expect) return false;
    expect *= axes[d].size;
  }
  return true;
}

float load_float(const void* base, DType dt, int64_t off) {
  return static_cast<float>(detail::load_element(base, dt, off));
}

/// One group axis of stride 1: a group's values are adjacent in storage.
bool unit_stride_group(const FlatLayout& layout) {
  return layout.group_axes.size() == 1 && layout.group_axes[0].stride == 1;
}

std::string label_of(std::string_view label, std::string_view base_name) {
  return label.empty() ? std::string(base_name) : std::string(label);
}

}  // namespace

int64_t FlatLayout::num_obs() const { return axes_product(obs_axes); }
int64_t FlatLayout::num_qparams() const { return axes_product(qparam_axes); }
int64_t FlatLayout::group_len() const { return axes_product(group_axes); }
Shape FlatLayout::flat_shape() const {
  if (unchanged) return qparam_shape;
  Shape s{num_obs()};
  s.insert(s.end(), qparam_shape.begin(), qparam_shape.end());
  s.push_back(group_len());
  return s;
}

void FlatView::gather(int64_t q, float* out) const {
  const int64_t qoff = axes_offset(layout.qparam_axes, q);
  const int64_t n_obs = layout.num_obs();
  const int64_t g_len = layout.group_len();
  // Fast path: one contiguous group axis.
  const bool unit_group = unit_stride_group(layout);
  for (int64_t n = 0; n < n_obs; ++n) {
    const int64_t base = qoff + axes_offset(layout.obs_axes, n);
    float* dst = out + n * g_len;
    if (unit_group && dtype == DType::kF32) {
      std::memcpy(dst, static_cast<const float*>(data) + base, static_cast<std::size_t>(g_len) * 4);
    } else if (unit_group) {
      for (int64_t g = 0; g < g_len; ++g) dst[g] = load_float(data, dtype, base + g);
    } else {
      for (int64_t g = 0; g < g_len; ++g) dst[g] = load_float(data, dtype, base + axes_offset(layout.group_axes, g));
    }
  }
}

bool FlatView::group_is_contiguous() const { return layout.num_obs() == 1 && axes_row_major(layout.group_axes, 1); }

bool FlatView::groups_end_to_end() const {
  return group_is_contiguous() && axes_row_major(layout.qparam_axes, layout.group_len());
}

int64_t FlatView::group_offset(int64_t q) const {
  return axes_offset(layout.qparam_axes, q) + axes_offset(layout.obs_axes, 0);
}

Tensor FlatView::materialize() const {
  Tensor out(dtype, layout.flat_shape());
  const int64_t nq = layout.num_qparams(), n_obs = layout.num_obs(), g_len = layout.group_len();
  const std::size_t es = dtype_size(dtype);
  auto* dst = static_cast<unsigned char*>(out.data());
  const auto* src = static_cast<const unsigned char*>(data);
  const auto ses = static_cast<int64_t>(es);
  // groups laid end to end (a row-major weight's group / channel / tensor_group view):
  // the flat order is the storage order, one copy
  if (groups_end_to_end()) {
    std::memcpy(dst, src + group_offset(0) * ses, static_cast<std::size_t>(nq * g_len) * es);
    return out;
  }
  // flat order is (n, q, g); a unit-stride group axis is one copy per group
  const bool unit_group = unit_stride_group(layout);
  for (int64_t n = 0; n < n_obs; ++n)
    for (int64_t q = 0; q < nq; ++q) {
      const int64_t base = axes_offset(layout.obs_axes, n) + axes_offset(layout.qparam_axes, q);
      unsigned char* const row = dst + (n * nq + q) * g_len * ses;
      if (unit_group) {
        std::memcpy(row, src + base * ses, static_cast<std::size_t>(g_len) * es);
        continue;
      }
      for (int64_t g = 0; g < g_len; ++g)
        std::memcpy(row + g * ses, src + (base + axes_offset(layout.group_axes, g)) * ses, es);
    }
  return out;
}

bool is_activation_base_name(std::string_view b) {
  return b == "input" || b == "output" || b == "q" || b == "k" || b == "v";
}

Tensor pad_to_blocks(const TensorView& value, int64_t bh, int64_t bw) {
  QOBS_CHECK(value.dim() >= 2, InvalidArgument, "block padding needs a tensor of rank >= 2, got shape ",
             shape_str(value.shape), " (R3.5)");
  const int64_t rows = value.shape[value.dim() - 2], cols = value.shape[value.dim() - 1];
  // The padded sizes come from the user's block_structure: each must fit before the
  // padded tensor is allocated and indexed (R3.5).
  QOBS_CHECK(bh > 0 && bw > 0, InvalidArgument, "block padding of shape ", shape_str(value.shape),
             ": block_structure [", bh, ", ", bw, "] must be two positive integers (R1.2.2)");
  const detail::ShowShape shape{value.shape};
  const int64_t R = detail::round_up_size(rows, bh, "block padding of shape ", shape, " to block_structure [", bh, ", ",
                                          bw, "]: padded rows");
  const int64_t C = detail::round_up_size(cols, bw, "block padding of shape ", shape, " to block_structure [", bh, ", ",
                                          bw, "]: padded columns");
  int64_t padded = detail::mul_size(R, C, "block padding of shape ", shape, " to block_structure [", bh, ", ", bw,
                                    "]: padded elements");
  for (int64_t i = 0; i + 2 < value.dim(); ++i)
    padded = detail::mul_size(padded, value.shape[i], "block padding of shape ", shape, " to block_structure [", bh,
                              ", ", bw, "]: padded elements");
  detail::mul_size(padded, static_cast<int64_t>(dtype_size(value.dtype)), "block padding of shape ", shape,
                   " to block_structure [", bh, ", ", bw, "]: padded bytes");
  Shape out_shape = value.shape;
  out_shape[out_shape.size() - 2] = R;
  out_shape[out_shape.size() - 1] = C;
  Tensor out(value.dtype, out_shape);
  const int64_t lead = rows == 0 || cols == 0 ? 0 : value.numel() / (rows * cols);
  const std::size_t es = dtype_size(value.dtype);
  auto* dst = static_cast<unsigned char*>(out.data());
  const auto* src = static_cast<const unsigned char*>(value.data);
  for (int64_t l = 0; l < lead; ++l)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t flat = (l * rows + r) * cols + c;
        std::memcpy(dst + ((l * R + r) * C + c) * static_cast<int64_t>(es),
                    src + value.offset_of(flat) * static_cast<int64_t>(es), es);
      }
  return out;
}

namespace {

/// flatten_in_place's signal: the reshape needs a copy of the data.
struct NeedsCopy {};

FlatView flatten_impl(const TensorView& value_in, std::string_view base_name, const QuantizationArgs& args,
                      std::span<const int32_t> g_idx, std::string_view label, bool allow_copy) {
  const std::string name = label_of(label, base_name);
  const Strategy st = args.get_strategy();
  TensorView value = value_in;
  if (value.strides.empty()) value.strides = contiguous_strides(value.shape);
  FlatView fv;
  fv.dtype = value.dtype;
  fv.data = value.data;
  FlatLayout& L = fv.layout;
  const int64_t rank = value.dim();

  // before anything reads the data to copy it
  auto copy_allowed = [&] {
    if (!allow_copy) throw NeedsCopy{};
  };
  auto keep_copy = [&](Tensor t) {
    auto owned = std::make_shared<const Tensor>(std::move(t));
    value = owned->view();
    fv.data = owned->data();
    fv.owned = std::move(owned);
  };
  auto dim_axes = [&](int64_t from, int64_t to) {  // axes of dims [from, to)
    std::vector<Axis> axes;
    for (int64_t d = from; d < to; ++d) axes.push_back({value.shape[d], value.strides[d]});
    return axes;
  };

  if (base_name == "weight") {
    QOBS_CHECK(rank >= 1, InvalidArgument, name, ": cannot flatten a 0-dimensional weight (R3.2)");
    const int64_t cols = value.shape[rank - 1];
    switch (st) {
      case Strategy::kTensor:
        L.qparam_shape = {1};
        L.obs_axes = {};
        L.qparam_axes = {{1, 0}};
        L.group_axes = dim_axes(0, rank);
        break;
      case Strategy::kChannel:
        L.qparam_shape.assign(value.shape.begin(), value.shape.end() - 1);
        L.qparam_shape.push_back(1);
        L.qparam_axes = dim_axes(0, rank - 1);
        L.qparam_axes.push_back({1, 0});
        L.group_axes = {{cols, value.strides[rank - 1]}};
        break;
      case Strategy::kGroup:
      case Strategy::kTensorGroup: {
        const int64_t gs = *args.group_size;
        QOBS_CHECK(cols % gs == 0, ShapeError, name, ": group_size ", gs, " does not divide ", cols,
                   " columns of shape ", shape_str(value.shape), " (R3.2)");
        if (!g_idx.empty()) {
          QOBS_CHECK(static_cast<int64_t>(g_idx.size()) == cols, InvalidArgument, name, ": g_idx has ", g_idx.size(),
                     " entries for ", cols, " columns (R7.2.4)");
          // stable ascending sort of g_idx, then gather columns in that order
          std::vector<int64_t> perm(static_cast<std::size_t>(cols));
          std::iota(perm.begin(), perm.end(), 0);
          std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return g_idx[a] < g_idx[b]; });
          copy_allowed();
          Tensor src = Tensor::copy_of(value);
          Tensor re(value.dtype, value.shape);
          const int64_t rows = value.numel() / cols;
          const std::size_t es = dtype_size(value.dtype);
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
              std::memcpy(
                  static_cast<unsigned char*>(re.data()) + (r * cols + c) * static_cast<int64_t>(es),
                  static_cast<const unsigned char*>(src.data()) + (r * cols + perm[c]) * static_cast<int64_t>(es), es);
          keep_copy(std::move(re));
        }
        L.qparam_shape.assign(value.shape.begin(), value.shape.end() - 1);
        L.qparam_shape.push_back(cols / gs);
        L.qparam_axes = dim_axes(0, rank - 1);
        L.qparam_axes.push_back({cols / gs, detail::mul_size(gs, value.strides[rank - 1], name, ": group_size ", gs,
                                                             " times the column stride")});
        L.group_axes = {{gs, value.strides[rank - 1]}};
        break;
      }
      case Strategy::kBlock: {
        QOBS_CHECK(rank == 2, InvalidArgument, name, ": block strategy needs a 2-D weight, got shape ",
                   shape_str(value.shape), " (R3.2)");
        const int64_t bh = (*args.block_structure)[0], bw = (*args.block_structure)[1];
        if (value.shape[0] % bh != 0 || value.shape[1] % bw != 0) {
          copy_allowed();
          keep_copy(pad_to_blocks(value, bh, bw));
        }
        const int64_t R = value.shape[0], C = value.shape[1];
        L.qparam_shape = {R / bh, C / bw};
        L.qparam_axes = {
            {R / bh, detail::mul_size(bh, value.strides[0], name, ": block rows ", bh, " times the row stride")},
            {C / bw, detail::mul_size(bw, value.strides[1], name, ": block columns ", bw, " times the column stride")}};
        L.group_axes = {{bh, value.strides[0]}, {bw, value.strides[1]}};
        break;
      }
      case Strategy::kToken:
      case Strategy::kAttnHead:
        QOBS_THROW(InvalidArgument, name, ": strategy ", to_string(st), " does not apply to weights (R3.2)");
    }
    return fv;
  }

  if (base_name == "input" || base_name == "output") {
    QOBS_CHECK(rank >= 1, InvalidArgument, name, ": cannot flatten a 0-dimensional activation (R3.3)");
    switch (st) {
      case Strategy::kTensor:
        L.qparam_shape = {1};
        L.obs_axes = dim_axes(0, rank - 1);
        L.qparam_axes = {{1, 0}};
        L.group_axes = dim_axes(rank - 1, rank);
        return fv;
      case Strategy::kToken: {
        // Unchanged (never used by observers: token is always dynamic): the whole value
        // is one observation row per leading index.
        L.qparam_shape.assign(value.shape.begin(), value.shape.end());
        L.obs_axes = {};
        L.qparam_axes = dim_axes(0, rank);
        L.group_axes = {};
        L.unchanged = true;
        return fv;
      }
      case Strategy::kGroup:
      case Strategy::kTensorGroup: {
        const int64_t gs = *args.group_size;
        QOBS_CHECK(rank >= 2, InvalidArgument, name, ": group strategies need an activation of rank >= 2, got ",
                   shape_str(value.shape), " (R3.3)");
        if (rank == 2) {
          // Q15: (tokens, hidden) merges into one dim and splits into (tokens*hidden/gs, gs):
          // the statistic is a single value.
          const int64_t n = value.numel();
          QOBS_CHECK(n % gs == 0, ShapeError, name, ": group_size ", gs, " does not divide ", n, " elements of shape ",
                     shape_str(value.shape), " (R3.3, Q15)");
          if (!value.is_contiguous()) {
            copy_allowed();
            keep_copy(Tensor::copy_of(value));
          }
          L.qparam_shape = {};
          L.obs_axes = {{n / gs, gs}};
          L.qparam_axes = {};
          L.group_axes = {{gs, 1}};
          return fv;
        }
        const int64_t hidden = value.shape[rank - 1];
        QOBS_CHECK(hidden % gs == 0, ShapeError, name, ": group_size ", gs, " does not divide the last dim ", hidden,
                   " of shape ", shape_str(value.shape), " (R3.3)");
        L.obs_axes = dim_axes(0, 2);
        L.qparam_shape.assign(value.shape.begin() + 2, value.shape.end() - 1);
        L.qparam_shape.push_back(hidden / gs);
        L.qparam_axes = dim_axes(2, rank - 1);
        L.qparam_axes.push_back({hidden / gs, detail::mul_size(gs, value.strides[rank - 1], name, ": group_size ", gs,
                                                               " times the hidden stride")});
        L.group_axes = {{gs, value.strides[rank - 1]}};
        return fv;
      }
      default:
        QOBS_THROW(InvalidArgument, name, ": strategy ", to_string(st), " does not apply to activations (R3.3)");
    }
  }

  if (base_name == "q" || base_name == "k" || base_name == "v") {
    QOBS_CHECK(rank == 4, InvalidArgument, name, ": attention states must be (batch, heads, seq, head_dim), got ",
               shape_str(value.shape), " (R3.4)");
    const Axis B{value.shape[0], value.strides[0]}, H{value.shape[1], value.strides[1]},
        S{value.shape[2], value.strides[2]}, D{value.shape[3], value.strides[3]};
    if (st == Strategy::kTensor) {
      L.qparam_shape = {1};
      L.obs_axes = {B, S};
      L.qparam_axes = {{1, 0}};
      L.group_axes = {H, D};
      return fv;
    }
    if (st == Strategy::kAttnHead) {
      L.qparam_shape = {H.size, 1, 1};
      L.obs_axes = {B, S};
      L.qparam_axes = {H, {1, 0}, {1, 0}};
      L.group_axes = {D};
      return fv;
    }
    QOBS_THROW(InvalidArgument, name, ": strategy ", to_string(st), " does not apply to attention states (R3.4)");
  }
  QOBS_THROW(InvalidArgument, "unknown base_name '", base_name, "': expected weight, input, output, q, k or v (R3.1)");
}

}  // namespace

FlatView flatten_for_calibration(const TensorView& value, std::string_view base_name, const QuantizationArgs& args,
                                 std::span<const int32_t> g_idx, std::string_view label) {
  return flatten_impl(value, base_name, args, g_idx, label, true);
}

std::optional<FlatView> flatten_in_place(const TensorView& value, std::string_view base_name,
                                         const QuantizationArgs& args, std::string_view label) {
  try {
    return flatten_impl(value, base_name, args, {}, label, false);
  } catch (const NeedsCopy&) {
    return std::nullopt;
  }
}

FlatView flat_view_of_flattened(const TensorView& v, std::string_view label) {
  QOBS_CHECK(v.dim() >= 2, ShapeError, label_of(label, "value"),
             ": a flattened value has shape (num_observations, *qparam_shape, group_size) (R3.1), got shape ",
             shape_str(v.shape));
  const Shape strides = v.strides.empty() ? contiguous_strides(v.shape) : v.strides;
  FlatView f;
  f.data = v.data;
  f.dtype = v.dtype;
  f.layout.obs_axes = {Axis{v.shape.front(), strides.front()}};
  for (std::size_t d = 1; d + 1 < v.shape.size(); ++d) {
    f.layout.qparam_shape.push_back(v.shape[d]);
    f.layout.qparam_axes.push_back(Axis{v.shape[d], strides[d]});
  }
  f.layout.group_axes = {Axis{v.shape.back(), strides.back()}};
  return f;
}

}  // namespace qobs
