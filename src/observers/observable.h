// What an observer may observe (observable.cc): the dtype rule and the finiteness rule of
// observed tensors, shared by the Observer base and the generation-2 adapter.
#pragma once

#include <string>

#include "qobs/tensor.h"

namespace qobs::detail {

/// The dtype rule of observed tensors (float32, bfloat16, float16; integers too when
/// `allow_integer`): TypeError naming `label` otherwise. True for float tensors, which
/// may hold NaN / Inf.
bool check_observable_dtype(const TensorView& v, const std::string& label, bool allow_integer);
/// The dtype rule, then for float tensors the finiteness rule: InvalidArgument naming
/// `label`, the first non-finite value, its flat index and the shape.
void check_observable(const TensorView& v, const std::string& label, bool allow_integer);

}  // namespace qobs::detail
