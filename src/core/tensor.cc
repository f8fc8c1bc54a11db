#include "qobs/tensor.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <type_traits>

#include "core/check.h"
#include "core/element.h"
#include "core/sizes.h"
#include "qobs/formats.h"

namespace qobs {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n = detail::mul_size(n, d, "element count of shape ", detail::ShowShape{shape});
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t acc = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    // the product of all dims is no stride: only the inner ones must fit
    if (i > 0) acc = detail::mul_size(acc, shape[i], "strides of shape ", detail::ShowShape{shape});
  }
  return s;
}

std::string shape_str(const Shape& shape) {
  std::ostringstream os;
  os << '(';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ',';
  os << ')';
  return os.str();
}

namespace {

double load(const void* base, DType dt, int64_t off) { return detail::load_element(base, dt, off); }

using detail::to_int;

void store(void* base, DType dt, int64_t i, double v) { detail::store_element(base, dt, i, v); }

/// store() for n consecutive elements from index 0, with the dtype switch hoisted out of
/// the loop (the same per-element narrowing as store()).
template <typename Src>
void store_all(void* base, DType dt, const Src* v, std::size_t n) {
  auto typed = [&](auto* p, auto conv) {
    for (std::size_t i = 0; i < n; ++i) p[i] = conv(static_cast<double>(v[i]));
  };
  if constexpr (std::is_same_v<Src, float>) {
    // f32 sources round to bf16 / f16 by bit arithmetic (the same RNE as the double
    // converters, tested for every binade; NaN keeps the double path's canonical form)
    if (dt == DType::kBF16) {
      auto* p = static_cast<uint16_t*>(base);
      for (std::size_t i = 0; i < n; ++i) p[i] = v[i] != v[i] ? double_to_bf16(v[i]) : float_to_bf16(v[i]);
      return;
    }
    if (dt == DType::kF16) {
      auto* p = static_cast<uint16_t*>(base);
      for (std::size_t i = 0; i < n; ++i) p[i] = v[i] != v[i] ? double_to_f16(v[i]) : float_to_f16(v[i]);
      return;
    }
    // and to FP8 by integer arithmetic (fp8_e4m3_from_double's code for every float)
    if (dt == DType::kF8E4M3) {
      auto* p = static_cast<uint8_t*>(base);
      for (std::size_t i = 0; i < n; ++i) p[i] = fp8_e4m3_from_float(v[i]);
      return;
    }
  }
  switch (dt) {
    case DType::kF64:
      return typed(static_cast<double*>(base), [](double x) { return x; });
    case DType::kF32:
      return typed(static_cast<float*>(base), [](double x) { return static_cast<float>(x); });
    case DType::kBF16:
      return typed(static_cast<uint16_t*>(base), [](double x) { return double_to_bf16(x); });
    case DType::kF16:
      return typed(static_cast<uint16_t*>(base), [](double x) { return double_to_f16(x); });
    case DType::kI8:
      return typed(static_cast<int8_t*>(base), [](double x) { return to_int<int8_t>(x); });
    case DType::kI32:
      return typed(static_cast<int32_t*>(base), [](double x) { return to_int<int32_t>(x); });
    default:
      for (std::size_t i = 0; i < n; ++i) store(base, dt, static_cast<int64_t>(i), static_cast<double>(v[i]));
  }
}

/// Every FP8 E4M3 code's value (fp8_e4m3_to_float), looked up instead of rebuilt from
/// its bits: NVFP4 weights have a million FP8 scales or zero points each.
const std::array<float, 256>& fp8_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<std::size_t>(c)] = fp8_e4m3_to_float(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

/// load() for n consecutive elements from index 0, dtype switch hoisted.
void load_all(const void* base, DType dt, double* out, std::size_t n) {
  auto typed = [&](const auto* p, auto conv) {
    for (std::size_t i = 0; i < n; ++i) out[i] = conv(p[i]);
  };
  switch (dt) {
    case DType::kF64:
      return typed(static_cast<const double*>(base), [](double x) { return x; });
    case DType::kF32:
      return typed(static_cast<const float*>(base), [](float x) { return static_cast<double>(x); });
    case DType::kBF16:
      return typed(static_cast<const uint16_t*>(base),
                   [](uint16_t b) { return static_cast<double>(bf16_to_float(b)); });
    case DType::kF16:
      return typed(static_cast<const uint16_t*>(base), [](uint16_t b) { return static_cast<double>(f16_to_float(b)); });
    case DType::kF8E4M3:
      return typed(static_cast<const uint8_t*>(base),
                   [&t = fp8_values()](uint8_t b) { return static_cast<double>(t[b]); });
    default:
      for (std::size_t i = 0; i < n; ++i) out[i] = load(base, dt, static_cast<int64_t>(i));
  }
}

}  // namespace

TensorView::TensorView(const void* data_, DType dtype_, Shape shape_, Shape strides_)
    : data(data_), dtype(dtype_), shape(std::move(shape_)), strides(std::move(strides_)) {
  if (strides.empty()) strides = contiguous_strides(shape);
  QOBS_CHECK(strides.size() == shape.size(), InvalidArgument, "TensorView: ", strides.size(),
             " strides for a shape of rank ", shape.size());
  for (int64_t d : shape)
    QOBS_CHECK(d >= 0, InvalidArgument, "TensorView: negative dimension in shape ", shape_str(shape));
  // Every element offset (and its byte offset) must fit: the kernels compute
  // offset * itemsize without further checks.
  const int64_t n = numel();
  if (n == 0) return;
  const detail::ShowShape sh{shape}, st{strides};
  int64_t lo = 0, hi = 0;  // lowest and highest element offset
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const int64_t span =
        detail::mul_size(shape[d] - 1, strides[d], "TensorView: offsets of shape ", sh, " strides ", st);
    if (span < 0) lo = detail::add_size(lo, span, "TensorView: offsets of shape ", sh, " strides ", st);
    else hi = detail::add_size(hi, span, "TensorView: offsets of shape ", sh, " strides ", st);
  }
  const auto es = static_cast<int64_t>(dtype_size(dtype));
  detail::mul_size(lo, es, "TensorView: byte offsets of shape ", sh, " strides ", st);
  detail::mul_size(hi, es, "TensorView: byte offsets of shape ", sh, " strides ", st);
}

bool TensorView::is_contiguous() const {
  if (strides.empty()) return true;
  return strides == contiguous_strides(shape) || numel() <= 1;
}

int64_t TensorView::offset_of(int64_t flat) const {
  return strides.empty() ? flat : strided_offset(shape, strides, flat);
}

double TensorView::get(int64_t flat) const { return load(data, dtype, offset_of(flat)); }

Tensor::Tensor(DType dtype, Shape shape, NoFill) : dtype_(dtype), shape_(std::move(shape)) {
  for (int64_t d : shape_) QOBS_CHECK(d >= 0, InvalidArgument, "negative dimension in shape ", shape_str(shape_));
  const int64_t nbytes = detail::mul_size(shape_numel(shape_), static_cast<int64_t>(dtype_size(dtype)), "bytes of a ",
                                          dtype_name(dtype), " tensor of shape ", detail::ShowShape{shape_});
  bytes_.resize(static_cast<std::size_t>(nbytes));  // StorageAllocator: no fill
}

Tensor::Tensor(DType dtype, Shape shape) : Tensor(dtype, std::move(shape), NoFill{}) {
  std::fill(bytes_.begin(), bytes_.end(), static_cast<unsigned char>(0));
}

Tensor Tensor::uninitialized(DType dtype, Shape shape) { return Tensor(dtype, std::move(shape), NoFill{}); }

Tensor Tensor::from_values(DType dtype, Shape shape, std::span<const double> values) {
  Tensor t = uninitialized(dtype, std::move(shape));
  QOBS_CHECK(static_cast<int64_t>(values.size()) == t.numel(), InvalidArgument, "from_values: ", values.size(),
             " values for shape ", shape_str(t.shape_));
  store_all(t.bytes_.data(), dtype, values.data(), values.size());
  return t;
}

Tensor Tensor::from_values(DType dtype, Shape shape, std::initializer_list<double> values) {
  return from_values(dtype, std::move(shape), std::span<const double>(values.begin(), values.size()));
}

Tensor Tensor::from_floats(DType dtype, Shape shape, std::span<const float> values) {
  Tensor t = uninitialized(dtype, std::move(shape));
  QOBS_CHECK(static_cast<int64_t>(values.size()) == t.numel(), InvalidArgument, "from_floats: ", values.size(),
             " values for shape ", shape_str(t.shape_));
  store_all(t.bytes_.data(), dtype, values.data(), values.size());
  return t;
}

Tensor Tensor::copy_of(const TensorView& view) {
  Tensor t = uninitialized(view.dtype, view.shape);
  const std::size_t es = dtype_size(view.dtype);
  const int64_t n = view.numel();
  if (view.is_contiguous()) {
    if (n) std::memcpy(t.bytes_.data(), view.data, static_cast<std::size_t>(n) * es);
    return t;
  }
  const auto* src = static_cast<const unsigned char*>(view.data);
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(t.bytes_.data() + i * es, src + view.offset_of(i) * static_cast<int64_t>(es), es);
  return t;
}

Tensor Tensor::from_bytes(DType dtype, Shape shape, const void* bytes, std::size_t nbytes) {
  Tensor t = uninitialized(dtype, std::move(shape));
  QOBS_CHECK(nbytes == t.bytes_.size(), InvalidArgument, "from_bytes: ", nbytes, " bytes for ", dtype_name(dtype),
             " shape ", shape_str(t.shape_), " (needs ", t.bytes_.size(), ")");
  if (nbytes) std::memcpy(t.bytes_.data(), bytes, nbytes);
  return t;
}

double Tensor::get(int64_t i) const { return load(bytes_.data(), dtype_, i); }
void Tensor::set(int64_t i, double v) { store(bytes_.data(), dtype_, i, v); }

std::vector<double> Tensor::to_doubles() const {
  std::vector<double> out(static_cast<std::size_t>(numel()));
  load_all(bytes_.data(), dtype_, out.data(), out.size());
  return out;
}

std::vector<float> Tensor::to_floats() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) out[static_cast<std::size_t>(i)] = static_cast<float>(get(i));
  return out;
}

Tensor Tensor::reshaped(Shape shape) const {
  QOBS_CHECK(shape_numel(shape) == numel(), ShapeError, "cannot reshape ", shape_str(shape_), " to ", shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

namespace {

bool float_like(DType dt) {
  return dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16 || dt == DType::kF8E4M3;
}

/// Elements [begin, begin + n) of a float-like tensor's bytes as floats (exact: every
/// f32 / bf16 / f16 / FP8 value is a float).
void load_floats(const unsigned char* src, DType dt, std::size_t begin, std::size_t n, float* out) {
  // one loop per dtype (the switch inside the loop kept the compiler from vectorizing)
  auto typed16 = [&](auto conv) {
    for (std::size_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, src + 2 * (begin + i), 2);
      out[i] = conv(b);
    }
  };
  switch (dt) {
    case DType::kF32:
      std::memcpy(out, src + 4 * begin, 4 * n);
      return;
    case DType::kBF16:
      return typed16([](uint16_t b) { return bf16_to_float(b); });
    case DType::kF16:
      return typed16([](uint16_t b) { return f16_to_float(b); });
    default: {
      const std::array<float, 256>& fp8 = fp8_values();
      for (std::size_t i = 0; i < n; ++i) out[i] = fp8[src[begin + i]];
    }
  }
}

}  // namespace

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor t = uninitialized(dtype, shape_);
  if (float_like(dtype_) && float_like(dtype)) {
    // between float dtypes through floats, a block at a time: store_all's float
    // converters give store()'s codes without the double round trip
    constexpr std::size_t kBlock = 4096;
    float buf[kBlock];
    const std::size_t n = static_cast<std::size_t>(numel()), out_size = dtype_size(dtype);
    for (std::size_t b = 0; b < n; b += kBlock) {
      const std::size_t len = std::min(kBlock, n - b);
      load_floats(bytes_.data(), dtype_, b, len, buf);
      store_all(t.bytes_.data() + b * out_size, dtype, buf, len);
    }
    return t;
  }
  const std::vector<double> v = to_doubles();
  store_all(t.bytes_.data(), dtype, v.data(), v.size());
  return t;
}

bool Tensor::bit_equal(const Tensor& other) const {
  return dtype_ == other.dtype_ && shape_ == other.shape_ && bytes_ == other.bytes_;
}

}  // namespace qobs
