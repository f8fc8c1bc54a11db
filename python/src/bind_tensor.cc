// _qobs.Tensor: an owned result exposed through the buffer protocol, and data_ptr.
#include <cstdint>
#include <string>
#include <vector>

#include "binding.h"

namespace qobs_ext {

namespace {

std::string buffer_format(DType dt) {
  switch (dt) {
    case DType::kF64:
      return py::format_descriptor<double>::format();
    case DType::kF32:
      return py::format_descriptor<float>::format();
    case DType::kF16:
      return "e";
    case DType::kBF16:
      return py::format_descriptor<int16_t>::format();  // raw bits
    case DType::kF8E4M3:
      return py::format_descriptor<uint8_t>::format();  // raw bits
    case DType::kI8:
      return py::format_descriptor<int8_t>::format();
    case DType::kI16:
      return py::format_descriptor<int16_t>::format();
    case DType::kI32:
      return py::format_descriptor<int32_t>::format();
    case DType::kI64:
      return py::format_descriptor<int64_t>::format();
    case DType::kU8:
      return py::format_descriptor<uint8_t>::format();
    case DType::kBool:
      return "?";
  }
  return "B";
}

}  // namespace

void bind_tensor(py::module_& m) {
  py::class_<PyTensor>(m, "Tensor", py::buffer_protocol(),
                       "An owned, contiguous qobs tensor. numpy.asarray(t) wraps its bytes without "
                       "copying (bfloat16 / float8 as raw int16 / uint8 bit patterns).")
      .def_buffer([](PyTensor& t) -> py::buffer_info {
        Tensor& x = t.get();
        const auto es = static_cast<py::ssize_t>(qobs::dtype_size(x.dtype()));
        std::vector<py::ssize_t> shape(x.shape().begin(), x.shape().end());
        std::vector<py::ssize_t> strides;
        for (int64_t s : qobs::contiguous_strides(x.shape())) strides.push_back(static_cast<py::ssize_t>(s) * es);
        return py::buffer_info(x.data(), es, buffer_format(x.dtype()), static_cast<py::ssize_t>(shape.size()), shape,
                               strides);
      })
      .def_static(
          "copy_of", [](py::handle obj) { return PyTensor(owned(obj, "Tensor.copy_of")); },
          "Contiguous owned copy of a numpy array or torch tensor.")
      .def_static(
          "from_bytes",
          [](const std::string& dtype, const Shape& shape, py::bytes data) {
            const std::string b = data;
            return PyTensor(Tensor::from_bytes(qobs::parse_dtype(dtype), shape, b.data(), b.size()));
          },
          py::arg("dtype"), py::arg("shape"), py::arg("data"),
          "A tensor of any qobs dtype (incl. bfloat16 / float8_e4m3fn) from raw little-endian bytes.")
      .def(
          "tobytes",
          [](const PyTensor& t) { return py::bytes(static_cast<const char*>(t.get().data()), t.get().nbytes()); },
          "The raw little-endian bytes.")
      .def_property_readonly("dtype", [](const PyTensor& t) { return std::string(qobs::dtype_name(t.get().dtype())); })
      .def_property_readonly("shape", [](const PyTensor& t) { return py::tuple(py::cast(t.get().shape())); })
      .def_property_readonly("numel", [](const PyTensor& t) { return t.get().numel(); })
      .def(
          "to",
          [](const PyTensor& t, const std::string& dtype) { return PyTensor(t.get().to(qobs::parse_dtype(dtype))); },
          "Converted to another dtype with the reference's narrowing rule (exact when widening).")
      .def(
          "tolist_flat", [](const PyTensor& t) { return t.get().to_doubles(); },
          "All elements widened exactly to Python floats, row-major.")
      .def("__repr__", [](const PyTensor& t) {
        return "qobs.Tensor(dtype=" + std::string(qobs::dtype_name(t.get().dtype())) +
               ", shape=" + qobs::shape_str(t.get().shape()) + ")";
      });

  m.def(
      "data_ptr", [](py::handle obj) { return reinterpret_cast<std::uintptr_t>(borrow(obj, "data_ptr").view.data); },
      "Address of element [0, ..., 0] as qobs reads it (for zero-copy checks).");
}

}  // namespace qobs_ext
