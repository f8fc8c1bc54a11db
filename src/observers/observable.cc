// What an observer may observe: the dtype rule and the finiteness rule of observed
// tensors (docs/DEVIATIONS.md D11), for the Observer base and the generation-2 adapter.
#include "observers/observable.h"

#include <cstdint>
#include <string>

#include "core/check.h"
#include "kernels/kernels.h"

namespace qobs::detail {

namespace {

bool is_integer_dtype(DType dt) {
  return dt == DType::kI8 || dt == DType::kI16 || dt == DType::kI32 || dt == DType::kI64 || dt == DType::kU8;
}

}  // namespace

bool check_observable_dtype(const TensorView& v, const std::string& label, bool allow_integer) {
  const bool is_float = v.dtype == DType::kF32 || v.dtype == DType::kBF16 || v.dtype == DType::kF16;
  if (!is_float)
    QOBS_CHECK(allow_integer && is_integer_dtype(v.dtype), TypeError, label,
               allow_integer ? ": min-max observers accept float32, bfloat16, float16 or integer tensors, got "
                             : ": this observer accepts float32, bfloat16 or float16 tensors, got ",
               dtype_name(v.dtype), " (docs/DEVIATIONS.md D11)");
  return is_float;
}

void check_observable(const TensorView& v, const std::string& label, bool allow_integer) {
  if (!check_observable_dtype(v, label, allow_integer)) return;  // integers are always finite
  const int64_t i = kernels::first_non_finite(v);                // threaded scan of the bit patterns
  if (i >= 0) {
    const double x = v.get(i);
    QOBS_THROW(InvalidArgument, label, ": non-finite value ", x, " at flat index ", i, " of shape ", shape_str(v.shape),
               " (observed tensors must be finite: the reference would produce a NaN/Inf scale; docs/DEVIATIONS.md)");
  }
}

}  // namespace qobs::detail
