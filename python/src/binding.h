// What the bind_*.cc files of the _qobs module share: Python objects to qobs types and
// back (convert.cc), the GIL release around the core's work, and the bind_* functions
// qobs_ext.cc calls, one per part of the public API.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file: STL conversions must agree across them

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "qobs/qobs.h"

namespace qobs_ext {

namespace py = pybind11;
using qobs::DType;
using qobs::QuantizationArgs;
using qobs::Shape;
using qobs::Tensor;
using qobs::TensorView;

// ---- tensors ---------------------------------------------------------------------------

/// A view plus the buffer that owns the exported memory for the duration of a call.
struct Borrowed {
  TensorView view;
  std::optional<py::buffer_info> info;  // released (PyBuffer_Release) on destruction
};

/// An owned qobs::Tensor exposed to Python. It implements the buffer protocol over its
/// own bytes, so numpy.asarray() and torch.from_numpy() wrap it without copying.
/// bfloat16 and float8 have no buffer format: they are exposed as their raw bit
/// patterns (int16 / uint8) and the Python layer reinterprets them (torch) or widens
/// them exactly to float32 (numpy, which has neither dtype).
class PyTensor {
 public:
  explicit PyTensor(Tensor t) : t_(std::make_shared<Tensor>(std::move(t))) {}
  const Tensor& get() const { return *t_; }
  Tensor& get() { return *t_; }

 private:
  std::shared_ptr<Tensor> t_;
};

/// A view of the memory of a qobs.Tensor, a torch tensor or a buffer-protocol array
/// (numpy), valid while `obj` lives; `what` names the argument in errors.
Borrowed borrow(py::handle obj, const char* what);
/// Owned copy of a (small) argument the core takes as an owned Tensor (scales, zero
/// points, min/max statistics).
Tensor owned(py::handle obj, const char* what);
std::optional<Tensor> owned_opt(py::handle obj, const char* what);
/// A result as a qobs.Tensor (None for nullopt).
py::object out(Tensor t);
py::object out_opt(std::optional<Tensor> t);

// ---- keyword values ----------------------------------------------------------------------

/// A keyword value in the core parser's terms (the JSON value it stands for). Only the
/// Python spelling is translated; which field takes which value is the core's rule.
qobs::FieldValue field_value(py::handle v);
/// Observer kwargs from a dict (None: none), through the core's conversion.
qobs::ObserverKwargs kwargs_from_dict(py::handle d);
py::dict kwargs_to_dict(const qobs::ObserverKwargs& kw);
/// "parity" / "wide".
qobs::NumericMode parse_mode(const std::string& m);
std::string_view mode_name(qobs::NumericMode m);

/// Runs f() with the GIL released: the core's work must not stop other Python threads.
/// Observers lock themselves (qobs/observer.h), so threads sharing one are safe.
template <typename F>
auto without_gil(F&& f) {
  py::gil_scoped_release nogil;
  return f();
}

// ---- the module's parts, in the order qobs_ext.cc binds them ------------------------------

void bind_tensor(py::module_& m);      ///< qobs.Tensor, data_ptr
void bind_args(py::module_& m);        ///< QuantizationArgs, QuantizationScheme, presets
void bind_qparams(py::module_& m);     ///< qparam math, fake quantization, flatten
void bind_statistics(py::module_& m);  ///< Statistics, reduce_statistics
void bind_importance(py::module_& m);  ///< importance files
void bind_observers(py::module_& m);   ///< ObserverOptions, Observer, registry, fusion
void bind_cuda(py::module_& m);        ///< qobs/cuda.h: devices, DeviceStatistics, the weight phases

}  // namespace qobs_ext
