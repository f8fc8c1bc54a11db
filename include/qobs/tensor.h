// Tensors in, tensors out, no framework.
//
// TensorView is a non-owning strided view over caller memory (shapes and strides in
// elements, row-major by default). Tensor is an owned, contiguous, row-major result.
// Every element type of DType can be held; arithmetic entry points accept f32, bf16
// and f16 observations and return results in the dtypes the reference returns.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "qobs/dtype.h"
#include "qobs/storage.h"

namespace qobs {

using Shape = std::vector<int64_t>;

/// Product of the dimensions (1 for a 0-dimensional shape).
int64_t shape_numel(const Shape& shape);
/// Row-major contiguous strides (in elements) of a shape.
Shape contiguous_strides(const Shape& shape);
/// Storage offset (in elements) of row-major flat index `flat` of `shape` laid out
/// with `strides` (0 for a broadcast dimension).
inline int64_t strided_offset(const Shape& shape, const Shape& strides, int64_t flat) {
  int64_t off = 0;
  for (std::size_t d = shape.size(); d-- > 0;) {
    const int64_t idx = flat % shape[d];
    flat /= shape[d];
    off += idx * strides[d];
  }
  return off;
}
/// "(4, 6)" style rendering used in error messages.
std::string shape_str(const Shape& shape);

/// Non-owning strided view. data points at element [0, ..., 0].
struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  Shape strides;  ///< in elements; may be empty for "contiguous"

  TensorView() = default;
  TensorView(const void* data_, DType dtype_, Shape shape_, Shape strides_ = {});

  int64_t numel() const { return shape_numel(shape); }
  int64_t dim() const { return static_cast<int64_t>(shape.size()); }
  bool is_contiguous() const;
  /// Element at flat row-major index i, widened exactly to double
  /// (int64 beyond 2^53 loses precision; never used for those).
  double get(int64_t flat_index) const;
  /// Offset in elements of the element at a row-major flat index.
  int64_t offset_of(int64_t flat_index) const;
};

/// Owned contiguous tensor.
class Tensor {
 public:
  Tensor() = default;
  /// Zero-filled tensor.
  Tensor(DType dtype, Shape shape);
  /// A tensor whose bytes are left as the allocator gives them: for a caller that
  /// writes every byte before anything reads it (a kernel's output), so that no zero
  /// fill pass is paid first.
  static Tensor uninitialized(DType dtype, Shape shape);

  /// Builds a tensor of dtype from values; each value is converted with the reference's
  /// narrowing rule (RNE for floats, R0.4a; round-half-even + saturate for integers).
  static Tensor from_values(DType dtype, Shape shape, std::span<const double> values);
  static Tensor from_values(DType dtype, Shape shape, std::initializer_list<double> values);
  static Tensor from_floats(DType dtype, Shape shape, std::span<const float> values);
  /// Copies a view (any strides) into a contiguous tensor of the same dtype.
  static Tensor copy_of(const TensorView& view);
  /// Copies raw little-endian bytes (must be numel * dtype_size long).
  static Tensor from_bytes(DType dtype, Shape shape, const void* bytes, std::size_t nbytes);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_numel(shape_); }
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  std::size_t nbytes() const { return bytes_.size(); }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  template <typename T>
  T* data_as() {
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(bytes_.data());
  }

  /// Element i widened exactly to double.
  double get(int64_t i) const;
  /// Sets element i from a double with the narrowing rule of from_values.
  void set(int64_t i, double v);
  /// All elements widened to double / float.
  std::vector<double> to_doubles() const;
  std::vector<float> to_floats() const;
  /// Same bytes, new shape (numel must match).
  Tensor reshaped(Shape shape) const;
  /// Converted to another dtype with the narrowing rule.
  Tensor to(DType dtype) const;

  TensorView view() const { return TensorView(bytes_.data(), dtype_, shape_); }
  bool defined() const { return !bytes_.empty() || (shape_numel(shape_) == 0 && !shape_.empty()); }

  /// Bitwise equality of dtype, shape and bytes.
  bool bit_equal(const Tensor& other) const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  struct NoFill {};
  Tensor(DType dtype, Shape shape, NoFill);
  std::vector<unsigned char, detail::StorageAllocator<unsigned char>> bytes_;
};

}  // namespace qobs
