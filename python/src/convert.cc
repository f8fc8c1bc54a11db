// Python objects to qobs types and back, for every bind_*.cc file.
//
// Arrays cross without a copy. numpy arrays and anything else exposing the buffer
// protocol are read through it; torch tensors (which do not expose it, and whose
// bfloat16 / float8 dtypes numpy cannot describe) through data_ptr(), shape, stride()
// and dtype. Either way the core receives a strided TensorView of the caller's memory,
// valid while the call runs: the Python argument keeps the memory alive.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "binding.h"

namespace qobs_ext {

namespace {

// ---- tensors in ---------------------------------------------------------------------

/// dtype of a buffer-protocol format character and item size. Formats carry byte-order
/// and size prefixes ('<f', '=e'); numpy's 'l' and 'q' are both int64 on LP64.
std::optional<DType> dtype_of_format(const std::string& format, py::ssize_t itemsize) {
  std::string f = format;
  while (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@' || f[0] == '|')) f.erase(0, 1);
  if (f.size() != 1) return std::nullopt;
  switch (f[0]) {
    case 'f':
      return itemsize == 4 ? std::optional(DType::kF32) : std::nullopt;
    case 'd':
      return itemsize == 8 ? std::optional(DType::kF64) : std::nullopt;
    case 'e':
      return itemsize == 2 ? std::optional(DType::kF16) : std::nullopt;
    case 'b':
      return DType::kI8;
    case 'B':
      return DType::kU8;
    case 'h':
      return itemsize == 2 ? std::optional(DType::kI16) : std::nullopt;
    case 'i':
      return itemsize == 4 ? std::optional(DType::kI32) : std::nullopt;
    case 'l':
    case 'q':
      return itemsize == 8 ? std::optional(DType::kI64) : (itemsize == 4 ? std::optional(DType::kI32) : std::nullopt);
    case '?':
      return DType::kBool;
    default:
      return std::nullopt;
  }
}

bool is_torch_tensor(py::handle obj) {
  // Duck-typed so that torch stays an optional dependency: a torch.Tensor is the only
  // common array type with data_ptr(), stride() and a device.
  return py::hasattr(obj, "data_ptr") && py::hasattr(obj, "stride") && py::hasattr(obj, "device") &&
         py::hasattr(obj, "dtype");
}

Shape int_list(py::handle seq) {
  Shape out;
  for (py::handle d : seq) out.push_back(d.cast<int64_t>());
  return out;
}

/// Non-owning view of a torch tensor's memory.
TensorView torch_view(py::handle t) {
  const std::string device = py::str(t.attr("device").attr("type"));
  if (device != "cpu")
    throw qobs::InvalidArgument("qobs works on CPU memory; got a torch tensor on device '" + device +
                                "' (move it with .cpu() first)");
  const std::string layout = py::str(t.attr("layout"));
  if (layout != "torch.strided")
    throw qobs::TypeError("qobs reads strided (dense) torch tensors; got layout " + layout);
  // Lazy conjugation / negation are bits on the tensor, not in memory: reading the
  // memory would give other values. (Only complex tensors have the conj bit.)
  if (py::hasattr(t, "is_neg") && t.attr("is_neg")().cast<bool>())
    throw qobs::TypeError("qobs cannot read a torch tensor with the lazy negation bit set; call .resolve_neg()");
  const std::string dtype = py::str(t.attr("dtype"));  // "torch.bfloat16"
  const DType dt = qobs::parse_dtype(dtype);
  const auto ptr = t.attr("data_ptr")().cast<std::uintptr_t>();
  return TensorView(reinterpret_cast<const void*>(ptr), dt, int_list(t.attr("shape")), int_list(t.attr("stride")()));
}

bool is_dtype_object(py::handle v) {
  // torch.dtype, and numpy.dtype with its per-dtype subclasses: str() gives the name
  // ("torch.float8_e4m3fn", "float16") that parse_dtype reads.
  for (py::handle t : py::type::of(v).attr("__mro__"))
    if (py::str(t.attr("__name__")).cast<std::string>() == "dtype") return true;
  return false;
}

py::object kwarg_to_py(const qobs::KwargValue& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

}  // namespace

// ---- tensors in and out --------------------------------------------------------------------

Borrowed borrow(py::handle obj, const char* what) {
  if (py::isinstance<PyTensor>(obj)) return {obj.cast<const PyTensor&>().get().view(), std::nullopt};
  if (is_torch_tensor(obj)) return {torch_view(obj), std::nullopt};
  if (PyObject_CheckBuffer(obj.ptr())) {
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request();
    const auto dt = dtype_of_format(info.format, info.itemsize);
    if (!dt)
      throw qobs::TypeError(std::string(what) + ": unsupported array element format '" + info.format +
                            "' (qobs reads float32/float16/float64, integer and bool arrays; bfloat16 via torch)");
    Shape shape(info.shape.begin(), info.shape.end());
    Shape strides;
    for (py::ssize_t s : info.strides) {
      if (s % info.itemsize != 0)
        throw qobs::InvalidArgument(std::string(what) + ": array strides must be multiples of the element size");
      strides.push_back(s / info.itemsize);
    }
    TensorView v(info.ptr, *dt, std::move(shape), std::move(strides));
    return {std::move(v), std::move(info)};
  }
  throw qobs::TypeError(std::string(what) + ": expected a numpy array or a torch tensor, got " +
                        std::string(py::str(py::type::of(obj).attr("__name__"))));
}

Tensor owned(py::handle obj, const char* what) { return Tensor::copy_of(borrow(obj, what).view); }

std::optional<Tensor> owned_opt(py::handle obj, const char* what) {
  if (obj.is_none()) return std::nullopt;
  return owned(obj, what);
}

py::object out(Tensor t) { return py::cast(PyTensor(std::move(t))); }

py::object out_opt(std::optional<Tensor> t) { return t ? out(std::move(*t)) : py::none(); }

// ---- keyword values ----------------------------------------------------------------

/// A keyword value in the core parser's terms (the JSON value it stands for). Only the
/// Python spelling is translated here; which field takes which value is the core's rule.
qobs::FieldValue field_value(py::handle v) {
  // bool first: Python bool is an int subclass.
  if (v.is_none()) return {nullptr};
  if (py::isinstance<py::bool_>(v)) return {v.cast<bool>()};
  if (py::isinstance<py::int_>(v)) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
    if (overflow != 0) return {qobs::FieldValue::BigInt{std::string(py::str(v))}};
    if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
    return {static_cast<int64_t>(x)};
  }
  if (py::isinstance<py::float_>(v)) return {v.cast<double>()};
  // str-valued enums (compressed-tensors' and ours) are str subclasses and give their
  // spelling; other enums carry it in .value.
  if (py::isinstance<py::str>(v)) return {v.cast<std::string>()};
  if (py::hasattr(v, "value") && py::isinstance<py::str>(v.attr("value"))) return {v.attr("value").cast<std::string>()};
  if (is_dtype_object(v)) return {std::string(py::str(v))};
  if (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v)) {
    qobs::FieldValue::List l;
    for (py::handle e : v) l.push_back(field_value(e));
    return {std::move(l)};
  }
  if (py::isinstance<py::dict>(v)) {
    qobs::FieldValue::Map m;
    for (auto item : py::reinterpret_borrow<py::dict>(v)) m.emplace_back(py::str(item.first), field_value(item.second));
    return {std::move(m)};
  }
  // numpy scalars and 0-d tensors: a number, as the reference would use it in arithmetic.
  if (py::hasattr(v, "__float__") && !py::hasattr(v, "__len__"))
    return {py::reinterpret_steal<py::object>(PyNumber_Float(v.ptr())).cast<double>()};
  return {qobs::FieldValue::Foreign{py::str(py::type::of(v).attr("__name__"))}};
}

qobs::ObserverKwargs kwargs_from_dict(py::handle d) {
  return qobs::observer_kwargs_from_field(field_value(d), "kwargs");
}

py::dict kwargs_to_dict(const qobs::ObserverKwargs& kw) {
  py::dict d;
  for (const auto& [k, v] : kw) d[py::str(k)] = kwarg_to_py(v);
  return d;
}

qobs::NumericMode parse_mode(const std::string& m) {
  if (m == "parity") return qobs::NumericMode::kParity;
  if (m == "wide") return qobs::NumericMode::kWide;
  throw qobs::InvalidArgument("numeric mode must be \"parity\" or \"wide\", got \"" + m + "\"");
}

std::string_view mode_name(qobs::NumericMode m) { return m == qobs::NumericMode::kWide ? "wide" : "parity"; }

}  // namespace qobs_ext
