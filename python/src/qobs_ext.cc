// _qobs: the pybind11 translation layer between Python and the qobs C++ core.
//
// A translator, nothing more: this file converts Python objects to qobs types and back, releases
// the GIL around work, and calls the public API (include/qobs). It holds no arithmetic
// and no defaults of its own: every default comes from the C++ structs, every check
// from the core. Conveniences (reference-compatible signatures, enums, returning torch
// tensors for torch input) live in python/qobs/*.py.
//
// Arrays cross without a copy. numpy arrays and anything else exposing the buffer
// protocol are read through it; torch tensors (which do not expose it, and whose
// bfloat16 / float8 dtypes numpy cannot describe) through data_ptr(), shape, stride()
// and dtype. Either way the core receives a strided TensorView of the caller's memory,
// valid while the call runs: the Python argument keeps the memory alive.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qobs/qobs.h"

namespace py = pybind11;

namespace {

using qobs::DType;
using qobs::QuantizationArgs;
using qobs::Shape;
using qobs::Tensor;
using qobs::TensorView;

// ---- tensors in ---------------------------------------------------------------------

/// dtype of a buffer-protocol format character and item size. Formats carry byte-order
/// and size prefixes ('<f', '=e'); numpy's 'l' and 'q' are both int64 on LP64.
std::optional<DType> dtype_of_format(const std::string& format, py::ssize_t itemsize) {
  std::string f = format;
  while (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@' || f[0] == '|')) f.erase(0, 1);
  if (f.size() != 1) return std::nullopt;
  switch (f[0]) {
    case 'f': return itemsize == 4 ? std::optional(DType::kF32) : std::nullopt;
    case 'd': return itemsize == 8 ? std::optional(DType::kF64) : std::nullopt;
    case 'e': return itemsize == 2 ? std::optional(DType::kF16) : std::nullopt;
    case 'b': return DType::kI8;
    case 'B': return DType::kU8;
    case 'h': return itemsize == 2 ? std::optional(DType::kI16) : std::nullopt;
    case 'i': return itemsize == 4 ? std::optional(DType::kI32) : std::nullopt;
    case 'l':
    case 'q': return itemsize == 8 ? std::optional(DType::kI64) : (itemsize == 4 ? std::optional(DType::kI32) : std::nullopt);
    case '?': return DType::kBool;
    default: return std::nullopt;
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

/// A view plus the buffer that owns the exported memory for the duration of a call.
struct Borrowed {
  TensorView view;
  std::optional<py::buffer_info> info;  // released (PyBuffer_Release) on destruction
};

class PyTensor;  // forward: owned results can be passed back in

Borrowed borrow(py::handle obj, const char* what);

// ---- tensors out --------------------------------------------------------------------

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

std::string buffer_format(DType dt) {
  switch (dt) {
    case DType::kF64: return py::format_descriptor<double>::format();
    case DType::kF32: return py::format_descriptor<float>::format();
    case DType::kF16: return "e";
    case DType::kBF16: return py::format_descriptor<int16_t>::format();  // raw bits
    case DType::kF8E4M3: return py::format_descriptor<uint8_t>::format();  // raw bits
    case DType::kI8: return py::format_descriptor<int8_t>::format();
    case DType::kI16: return py::format_descriptor<int16_t>::format();
    case DType::kI32: return py::format_descriptor<int32_t>::format();
    case DType::kI64: return py::format_descriptor<int64_t>::format();
    case DType::kU8: return py::format_descriptor<uint8_t>::format();
    case DType::kBool: return "?";
  }
  return "B";
}

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

/// Owned copy of a (small) argument the core takes as an owned Tensor (scales, zero
/// points, min/max statistics).
Tensor owned(py::handle obj, const char* what) { return Tensor::copy_of(borrow(obj, what).view); }

std::optional<Tensor> owned_opt(py::handle obj, const char* what) {
  if (obj.is_none()) return std::nullopt;
  return owned(obj, what);
}

py::object out(Tensor t) { return py::cast(PyTensor(std::move(t))); }

py::object out_opt(std::optional<Tensor> t) { return t ? out(std::move(*t)) : py::none(); }

// ---- QuantizationArgs from keywords -----------------------------------------------

bool is_dtype_object(py::handle v) {
  // torch.dtype, and numpy.dtype with its per-dtype subclasses: str() gives the name
  // ("torch.float8_e4m3fn", "float16") that parse_dtype reads.
  for (py::handle t : py::type::of(v).attr("__mro__"))
    if (py::str(t.attr("__name__")).cast<std::string>() == "dtype") return true;
  return false;
}

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

qobs::ObserverKwargs kwargs_from_dict(py::handle d) { return qobs::observer_kwargs_from_field(field_value(d), "kwargs"); }

py::object kwarg_to_py(const qobs::KwargValue& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

py::dict kwargs_to_dict(const qobs::ObserverKwargs& kw) {
  py::dict d;
  for (const auto& [k, v] : kw) d[py::str(k)] = kwarg_to_py(v);
  return d;
}

/// QuantizationArgs from keyword arguments spelled as compressed-tensors spells them,
/// through the core's parser: the checks and messages of QuantizationArgs.from_json.
QuantizationArgs args_from_kwargs(const py::kwargs& kw) {
  qobs::FieldValue::Map fields;
  for (auto item : kw) fields.emplace_back(py::str(item.first), field_value(item.second));
  return QuantizationArgs::from_fields(fields);
}

py::object opt_str(const std::optional<std::string>& s) { return s ? py::cast(*s) : py::none(); }

py::object opt_dtype(const std::optional<DType>& d) {
  return d ? py::cast(std::string(qobs::dtype_name(*d))) : py::none();
}

qobs::NumericMode parse_mode(const std::string& m) {
  if (m == "parity") return qobs::NumericMode::kParity;
  if (m == "wide") return qobs::NumericMode::kWide;
  throw qobs::InvalidArgument("numeric mode must be \"parity\" or \"wide\", got \"" + m + "\"");
}

std::string_view mode_name(qobs::NumericMode m) { return m == qobs::NumericMode::kWide ? "wide" : "parity"; }

qobs::ReduceOp parse_reduce(const std::string& s) {
  if (s == "min") return qobs::ReduceOp::kMin;
  if (s == "max") return qobs::ReduceOp::kMax;
  if (s == "avg") return qobs::ReduceOp::kAvg;
  if (s == "sum") return qobs::ReduceOp::kSum;
  throw qobs::InvalidArgument("reduce op must be one of min, max, avg, sum; got \"" + s + "\"");
}

std::optional<QuantizationArgs> opt_args(py::handle v) {
  if (v.is_none()) return std::nullopt;
  return v.cast<QuantizationArgs>();
}

/// Runs f() with the GIL released: the core's work must not stop other Python threads.
/// Observers lock themselves (qobs/observer.h), so threads sharing one are safe.
template <typename F>
auto without_gil(F&& f) {
  py::gil_scoped_release nogil;
  return f();
}

/// The error translator: qobs's exception kinds to the Python types the reference
/// raises (R0.5). Order matters: TypeError and ShapeError derive from
/// std::invalid_argument and must be matched before the generic ValueError case.
void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const qobs::TypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what());
  } catch (const qobs::InvalidArgument& e) {  // incl. ShapeError
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const qobs::NotImplementedError& e) {
    PyErr_SetString(PyExc_NotImplementedError, e.what());
  } catch (const qobs::PreconditionError& e) {
    PyErr_SetString(PyExc_AssertionError, e.what());
  } catch (const qobs::UnknownName& e) {
    PyErr_SetString(PyExc_KeyError, e.what());
  } catch (const qobs::IoError& e) {
    PyErr_SetString(PyExc_OSError, e.what());
  }
}

}  // namespace

PYBIND11_MODULE(_qobs, m) {
  m.doc() = "qobs C++ core (translation layer; use the `qobs` package)";
  py::register_exception_translator(&translate);

  // ---- Tensor ---------------------------------------------------------------------
  py::class_<PyTensor>(m, "Tensor", py::buffer_protocol(),
                       "An owned, contiguous qobs tensor. numpy.asarray(t) wraps its bytes without "
                       "copying (bfloat16 / float8 as raw int16 / uint8 bit patterns).")
      .def_buffer([](PyTensor& t) -> py::buffer_info {
        Tensor& x = t.get();
        const auto es = static_cast<py::ssize_t>(qobs::dtype_size(x.dtype()));
        std::vector<py::ssize_t> shape(x.shape().begin(), x.shape().end());
        std::vector<py::ssize_t> strides;
        for (int64_t s : qobs::contiguous_strides(x.shape())) strides.push_back(static_cast<py::ssize_t>(s) * es);
        return py::buffer_info(x.data(), es, buffer_format(x.dtype()), static_cast<py::ssize_t>(shape.size()),
                               shape, strides);
      })
      .def_static("copy_of", [](py::handle obj) { return PyTensor(owned(obj, "Tensor.copy_of")); },
                  "Contiguous owned copy of a numpy array or torch tensor.")
      .def_static("from_bytes",
                  [](const std::string& dtype, const Shape& shape, py::bytes data) {
                    const std::string b = data;
                    return PyTensor(Tensor::from_bytes(qobs::parse_dtype(dtype), shape, b.data(), b.size()));
                  },
                  py::arg("dtype"), py::arg("shape"), py::arg("data"),
                  "A tensor of any qobs dtype (incl. bfloat16 / float8_e4m3fn) from raw little-endian bytes.")
      .def("tobytes", [](const PyTensor& t) {
        return py::bytes(static_cast<const char*>(t.get().data()), t.get().nbytes());
      }, "The raw little-endian bytes.")
      .def_property_readonly("dtype", [](const PyTensor& t) { return std::string(qobs::dtype_name(t.get().dtype())); })
      .def_property_readonly("shape", [](const PyTensor& t) { return py::tuple(py::cast(t.get().shape())); })
      .def_property_readonly("numel", [](const PyTensor& t) { return t.get().numel(); })
      .def("to", [](const PyTensor& t, const std::string& dtype) { return PyTensor(t.get().to(qobs::parse_dtype(dtype))); },
           "Converted to another dtype with the reference's narrowing rule (exact when widening).")
      .def("tolist_flat", [](const PyTensor& t) { return t.get().to_doubles(); },
           "All elements widened exactly to Python floats, row-major.")
      .def("__repr__", [](const PyTensor& t) {
        return "qobs.Tensor(dtype=" + std::string(qobs::dtype_name(t.get().dtype())) + ", shape=" +
               qobs::shape_str(t.get().shape()) + ")";
      });

  m.def("data_ptr", [](py::handle obj) {
    return reinterpret_cast<std::uintptr_t>(borrow(obj, "data_ptr").view.data);
  }, "Address of element [0, ..., 0] as qobs reads it (for zero-copy checks).");

  // ---- QuantizationArgs -----------------------------------------------------------
  py::class_<QuantizationArgs>(m, "QuantizationArgs")
      .def(py::init([](const py::kwargs& kw) { return args_from_kwargs(kw); }),
           "Keywords as compressed-tensors' QuantizationArgs; validated and inferred (R1.2, R1.3).")
      .def_readonly("num_bits", &QuantizationArgs::num_bits)
      .def_property_readonly("type", [](const QuantizationArgs& a) { return std::string(qobs::to_string(a.type)); })
      .def_readonly("symmetric", &QuantizationArgs::symmetric)
      .def_readonly("group_size", &QuantizationArgs::group_size)
      .def_property_readonly("strategy", [](const QuantizationArgs& a) -> py::object {
        return a.strategy ? py::cast(std::string(qobs::to_string(*a.strategy))) : py::none();
      })
      .def_property_readonly("block_structure", [](const QuantizationArgs& a) -> py::object {
        if (!a.block_structure) return py::none();
        py::list l;
        l.append((*a.block_structure)[0]);
        l.append((*a.block_structure)[1]);
        return l;
      })
      .def_property_readonly("dynamic", [](const QuantizationArgs& a) -> py::object {
        switch (a.dynamic) {
          case qobs::Dynamic::kFalse: return py::bool_(false);
          case qobs::Dynamic::kTrue: return py::bool_(true);
          case qobs::Dynamic::kLocal: return py::str("local");
        }
        return py::none();
      })
      .def_property_readonly("actorder", [](const QuantizationArgs& a) -> py::object {
        return a.actorder == qobs::ActOrder::kNone ? py::none() : py::cast(std::string(qobs::to_string(a.actorder)));
      })
      .def_property_readonly("scale_dtype", [](const QuantizationArgs& a) { return opt_dtype(a.scale_dtype); })
      .def_property_readonly("zp_dtype", [](const QuantizationArgs& a) { return opt_dtype(a.zp_dtype); })
      .def_property_readonly("observer", [](const QuantizationArgs& a) { return opt_str(a.observer); })
      .def_property_readonly("observer_kwargs", [](const QuantizationArgs& a) { return kwargs_to_dict(a.observer_kwargs); })
      .def("pytorch_dtype", [](const QuantizationArgs& a) { return std::string(qobs::dtype_name(a.pytorch_dtype())); })
      .def("is_mx", &QuantizationArgs::is_mx)
      .def("q_range", &QuantizationArgs::q_range)
      .def("to_json", &QuantizationArgs::to_json, py::arg("indent") = -1)
      .def_static("from_json", [](const std::string& s) { return QuantizationArgs::from_json(s); })
      .def("__eq__", [](const QuantizationArgs& a, const QuantizationArgs& b) { return a == b; })
      .def("__copy__", [](const QuantizationArgs& a) { return a; })
      .def("__deepcopy__", [](const QuantizationArgs& a, py::handle) { return a; })
      .def(py::pickle([](const QuantizationArgs& a) { return a.to_json(); },
                      [](const std::string& s) { return QuantizationArgs::from_json(s); }));

  // ---- QuantizationScheme and presets ---------------------------------------------
  py::class_<qobs::QuantizationScheme>(m, "QuantizationScheme")
      .def(py::init([](std::vector<std::string> targets, py::handle weights, py::handle input_activations,
                       py::handle output_activations, std::optional<std::string> format) {
             qobs::QuantizationScheme s;
             s.targets = std::move(targets);
             s.weights = opt_args(weights);
             s.input_activations = opt_args(input_activations);
             s.output_activations = opt_args(output_activations);
             s.format = std::move(format);
             return s.validated();
           }),
           py::arg("targets"), py::arg("weights") = py::none(), py::arg("input_activations") = py::none(),
           py::arg("output_activations") = py::none(), py::arg("format") = py::none())
      .def_readonly("targets", &qobs::QuantizationScheme::targets)
      .def_readonly("weights", &qobs::QuantizationScheme::weights)
      .def_readonly("input_activations", &qobs::QuantizationScheme::input_activations)
      .def_readonly("output_activations", &qobs::QuantizationScheme::output_activations)
      .def_readonly("format", &qobs::QuantizationScheme::format)
      .def("to_json", &qobs::QuantizationScheme::to_json, py::arg("indent") = -1)
      .def_static("from_json", [](const std::string& s) { return qobs::QuantizationScheme::from_json(s); })
      .def("__eq__", [](const qobs::QuantizationScheme& a, const qobs::QuantizationScheme& b) { return a == b; });

  m.def("preset_scheme", &qobs::preset_scheme, py::arg("name"), py::arg("targets"));
  m.def("is_preset_name", &qobs::is_preset_name, py::arg("name"));
  m.def("preset_names", &qobs::preset_names);
  m.def("infer_compression_format", &qobs::infer_compression_format, py::arg("scheme"));

  // ---- qparam math, fake quantization, flatten --------------------------------------
  m.def("calculate_qparams",
        [](py::handle min_vals, py::handle max_vals, const QuantizationArgs& args, py::handle global_scale,
           const std::string& mode) {
          Tensor mn = owned(min_vals, "min_vals"), mx = owned(max_vals, "max_vals");
          std::optional<Tensor> g = owned_opt(global_scale, "global_scale");
          qobs::ScaleZeroPoint r;
          {
            py::gil_scoped_release nogil;
            r = qobs::calculate_qparams(mn, mx, args, g ? &*g : nullptr, parse_mode(mode));
          }
          return py::make_tuple(out(std::move(r.scale)), out(std::move(r.zero_point)));
        },
        py::arg("min_vals"), py::arg("max_vals"), py::arg("args"), py::arg("global_scale") = py::none(),
        py::arg("mode") = "parity");

  m.def("generate_gparam",
        [](py::handle min_vals, py::handle max_vals, const std::string& mode) {
          Tensor mn = owned(min_vals, "min_vals"), mx = owned(max_vals, "max_vals");
          return out(qobs::generate_gparam(mn, mx, parse_mode(mode)));
        },
        py::arg("min_vals"), py::arg("max_vals"), py::arg("mode") = "parity");

  m.def("compute_dynamic_scales_and_zp",
        [](py::handle value, const QuantizationArgs& args, py::handle global_scale, const std::string& mode) {
          Borrowed v = borrow(value, "value");
          std::optional<Tensor> g = owned_opt(global_scale, "global_scale");
          qobs::ScaleZeroPoint r;
          {
            py::gil_scoped_release nogil;
            r = qobs::compute_dynamic_scales_and_zp(v.view, args, g ? &*g : nullptr, parse_mode(mode));
          }
          return py::make_tuple(out(std::move(r.scale)), out(std::move(r.zero_point)));
        },
        py::arg("value"), py::arg("args"), py::arg("global_scale") = py::none(), py::arg("mode") = "parity");

  // fake_quantize / quantize / dequantize share one argument translation.
  enum class QOp { kFake, kQuant, kDequant };
  auto qdq = [](QOp op) {
    return [op](py::handle x, py::handle scale, py::handle zero_point, const QuantizationArgs& args, py::handle g_idx,
                py::handle global_scale, std::optional<std::string> dtype, const std::string& mode) {
      Borrowed xv = borrow(x, "x");
      Tensor s = owned(scale, "scale");
      std::optional<Tensor> z = owned_opt(zero_point, "zero_point");
      std::optional<Tensor> gi = owned_opt(g_idx, "g_idx");
      std::optional<Tensor> g = owned_opt(global_scale, "global_scale");
      std::optional<DType> od;
      if (dtype) od = qobs::parse_dtype(*dtype);
      const qobs::NumericMode nm = parse_mode(mode);
      Tensor r;
      {
        py::gil_scoped_release nogil;
        const Tensor* zp = z ? &*z : nullptr;
        const Tensor* gip = gi ? &*gi : nullptr;
        const Tensor* gp = g ? &*g : nullptr;
        switch (op) {
          case QOp::kFake: r = qobs::fake_quantize(xv.view, s, zp, args, gip, gp, nm); break;
          case QOp::kQuant: r = qobs::quantize(xv.view, s, zp, args, gip, gp, od, nm); break;
          case QOp::kDequant: r = qobs::dequantize(xv.view, s, zp, args, gip, gp, od, nm); break;
        }
      }
      return out(std::move(r));
    };
  };
  const auto qdq_args = [] {
    return std::make_tuple(py::arg("x"), py::arg("scale"), py::arg("zero_point"), py::arg("args"),
                           py::arg("g_idx") = py::none(), py::arg("global_scale") = py::none(),
                           py::arg("dtype") = py::none(), py::arg("mode") = "parity");
  };
  std::apply([&](auto... a) { m.def("fake_quantize", qdq(QOp::kFake), a...); }, qdq_args());
  std::apply([&](auto... a) { m.def("quantize", qdq(QOp::kQuant), a...); }, qdq_args());
  std::apply([&](auto... a) { m.def("dequantize", qdq(QOp::kDequant), a...); }, qdq_args());

  m.def("flatten_for_calibration",
        [](py::handle value, const std::string& base_name, const QuantizationArgs& args, py::handle g_idx) {
          Borrowed v = borrow(value, "value");
          std::vector<int32_t> gi;
          if (!g_idx.is_none()) {
            const Tensor t = owned(g_idx, "g_idx");
            for (double d : t.to_doubles()) gi.push_back(static_cast<int32_t>(d));
          }
          Tensor r;
          {
            py::gil_scoped_release nogil;
            r = qobs::flatten_for_calibration(v.view, base_name, args, gi).materialize();
          }
          return out(std::move(r));
        },
        py::arg("value"), py::arg("base_name"), py::arg("args"), py::arg("g_idx") = py::none());

  m.def("generate_mx_scales", [](py::handle absmax, int num_bits) {
    return out(qobs::generate_mx_scales(owned(absmax, "absmax"), num_bits));
  }, py::arg("absmax"), py::arg("num_bits"));

  // ---- observers --------------------------------------------------------------------
  py::class_<qobs::ObserverOptions>(m, "ObserverOptions")
      .def(py::init([](const std::string& mode, std::string label, bool f32_errors, bool chunked_search) {
             qobs::ObserverOptions o;
             o.mode = parse_mode(mode);
             o.label = std::move(label);
             o.f32_errors = f32_errors;
             o.chunked_search = chunked_search;
             return o;
           }),
           py::arg("mode") = std::string(mode_name(qobs::ObserverOptions{}.mode)),
           py::arg("label") = qobs::ObserverOptions{}.label,
           py::arg("f32_errors") = qobs::ObserverOptions{}.f32_errors,
           py::arg("chunked_search") = qobs::ObserverOptions{}.chunked_search)
      .def_property_readonly("mode", [](const qobs::ObserverOptions& o) { return std::string(mode_name(o.mode)); })
      .def_readonly("label", &qobs::ObserverOptions::label)
      .def_readonly("f32_errors", &qobs::ObserverOptions::f32_errors)
      .def_readonly("chunked_search", &qobs::ObserverOptions::chunked_search);

  py::class_<qobs::Statistics>(m, "Statistics")
      .def(py::init([](std::string observer, py::list items, int64_t contributions) {
             qobs::Statistics s;
             s.observer = std::move(observer);
             s.contributions = contributions;
             for (py::handle it : items) {
               auto t = py::reinterpret_borrow<py::tuple>(it);
               if (t.size() != 3) throw qobs::InvalidArgument("Statistics items are (name, tensor, reduce) triples");
               s.items.push_back({t[0].cast<std::string>(), owned(t[1], "statistic"), parse_reduce(t[2].cast<std::string>())});
             }
             return s;
           }),
           py::arg("observer"), py::arg("items"), py::arg("contributions") = 1)
      .def_readonly("observer", &qobs::Statistics::observer)
      .def_readonly("contributions", &qobs::Statistics::contributions)
      .def_property_readonly("items", [](const qobs::Statistics& s) {
        py::list l;
        for (const auto& it : s.items) l.append(py::make_tuple(it.name, out(it.value), std::string(qobs::to_string(it.reduce))));
        return l;
      })
      .def("find", [](const qobs::Statistics& s, const std::string& name) -> py::object {
        const Tensor* t = s.find(name);
        return t ? out(*t) : py::none();
      })
      .def("empty", &qobs::Statistics::empty)
      .def("serialize", [](const qobs::Statistics& s) {
        const std::vector<uint8_t> b = s.serialize();
        return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
      })
      .def_static("deserialize", [](py::bytes b) {
        const std::string s = b;
        return qobs::Statistics::deserialize(
            std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
      })
      .def(py::pickle(
          [](const qobs::Statistics& s) {
            const std::vector<uint8_t> b = s.serialize();
            return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
          },
          [](py::bytes b) {
            const std::string s = b;
            return qobs::Statistics::deserialize(
                std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
          }));

  m.def("reduce_statistics", [](const std::vector<qobs::Statistics>& ranks) {
    return qobs::reduce_statistics(ranks);
  }, py::arg("ranks"));

  // ---- importance files (R6.12.4): {module: (importance_sum, importance_count)} ------
  const auto importance_out = [](const qobs::ImportanceMap& imp) {
    py::dict d;
    for (const auto& [module, e] : imp) d[py::str(module)] = py::make_tuple(out(e.sum), e.count);
    return d;
  };
  m.def("write_importance", [](const std::string& path, const py::dict& entries) {
    qobs::ImportanceMap imp;
    for (const auto& [k, v] : entries) {
      const auto t = py::reinterpret_borrow<py::tuple>(v);
      if (t.size() != 2) throw qobs::InvalidArgument("importance entries are (importance_sum, importance_count) pairs");
      imp[k.cast<std::string>()] = qobs::ModuleImportance{owned(t[0], "importance_sum"), t[1].cast<int64_t>()};
    }
    py::gil_scoped_release unlocked;
    qobs::write_importance(path, imp);
  }, py::arg("path"), py::arg("entries"));
  m.def("read_importance", [=](const std::string& path) {
    qobs::ImportanceMap imp;
    {
      py::gil_scoped_release unlocked;
      imp = qobs::read_importance(path);
    }
    return importance_out(imp);
  }, py::arg("path"));
  m.def("merge_importance", [=](const std::vector<std::string>& paths, const std::string& out_path) {
    qobs::ImportanceMap imp;
    {
      py::gil_scoped_release unlocked;
      imp = qobs::merge_importance(paths, out_path);
    }
    return importance_out(imp);
  }, py::arg("paths"), py::arg("out"));

  py::class_<qobs::Observer, std::shared_ptr<qobs::Observer>>(m, "Observer")
      .def_property_readonly("name", [](const qobs::Observer& o) { return std::string(o.name()); })
      .def_property_readonly("base_name", &qobs::Observer::base_name)
      .def_property_readonly("args", &qobs::Observer::args)
      .def_property_readonly("options", &qobs::Observer::options)
      .def_property_readonly("is_weight_observer", &qobs::Observer::is_weight_observer)
      .def("observe", [](qobs::Observer& o, py::handle value) {
        Borrowed v = borrow(value, "observed value");
        without_gil([&] { o.observe(v.view); });
      }, py::arg("value"))
      .def("observe_flattened", [](qobs::Observer& o, py::handle value) {
        Borrowed v = borrow(value, "flattened observed value");
        without_gil([&] { o.observe_flattened(v.view); });
      }, py::arg("value"))
      .def("has_statistics", [](const qobs::Observer& o) { return without_gil([&] { return o.has_statistics(); }); })
      .def("get_statistics", [](const qobs::Observer& o) {
        const auto stats = without_gil([&] { return o.get_statistics(); });
        py::list l;
        for (const auto& [n, t] : stats) l.append(py::make_tuple(n, out(t)));
        return l;
      })
      .def("get_qparams", [](qobs::Observer& o) {
        qobs::QParams q = without_gil([&] { return o.get_qparams(); });
        return py::make_tuple(out(std::move(q.scale)), out(std::move(q.zero_point)), out_opt(std::move(q.global_scale)));
      })
      .def("get_global_scale", [](qobs::Observer& o) {
        return out_opt(without_gil([&] { return o.get_global_scale(); }));
      })
      .def("delete_statistics", [](qobs::Observer& o, bool cooperative) {
        without_gil([&] { o.delete_statistics(cooperative); });
      }, py::arg("cooperative") = true)
      .def("export_statistics", [](const qobs::Observer& o) {
        return without_gil([&] { return o.export_statistics(); });
      })
      .def("import_statistics", [](qobs::Observer& o, const qobs::Statistics& stats) {
        without_gil([&] { o.import_statistics(stats); });
      }, py::arg("stats"))
      .def("merge_statistics", [](qobs::Observer& o, const qobs::Statistics& other) {
        without_gil([&] { o.merge_statistics(other); });
      }, py::arg("other"))
      .def("sync_table", [](const qobs::Observer& o) {
        py::list l;
        for (const auto& [n, op] : o.sync_table()) l.append(py::make_tuple(n, std::string(qobs::to_string(op))));
        return l;
      })
      // The caller (python/qobs/observer.py) keeps the bound array alive: the core
      // stores only a view of it (R6.10.3).
      .def("bind_weight", [](qobs::Observer& o, py::handle weight) {
        Borrowed w = borrow(weight, "weight");
        without_gil([&] { o.bind_weight(w.view); });
      }, py::arg("weight"))
      .def("unbind_weight", [](qobs::Observer& o) { without_gil([&] { o.unbind_weight(); }); })
      .def("attach", [](qobs::Observer& o, int64_t in_features) {
        without_gil([&] { o.attach(in_features); });
      }, py::arg("in_features"))
      .def("detach", [](qobs::Observer& o) { without_gil([&] { o.detach(); }); })
      .def("accumulate_input", [](qobs::Observer& o, py::handle x) {
        Borrowed v = borrow(x, "input");
        without_gil([&] { o.accumulate_input(v.view); });
      }, py::arg("x"))
      .def("fused_partners", [](const qobs::Observer& o) {
        return without_gil([&] { return o.fused_partners(); });
      })
      .def("grid_candidates", [](const qobs::Observer& o) {
        return without_gil([&] { return qobs::grid_candidates(o); });
      })
      .def("imatrix_search_path", [](const qobs::Observer& o) {
        return without_gil([&] { return qobs::imatrix_search_path(o); });
      });

  m.def("load_observer",
        [](const std::string& name, const std::string& base_name, const QuantizationArgs& args, py::handle kwargs,
           const qobs::ObserverOptions& options) {
          return qobs::load_observer(name, base_name, args, kwargs_from_dict(kwargs), options);
        },
        py::arg("name"), py::arg("base_name"), py::arg("args"), py::arg("kwargs") = py::none(),
        py::arg_v("options", qobs::ObserverOptions{}, "ObserverOptions()"));
  m.def("fuse_observers", [](const std::vector<std::shared_ptr<qobs::Observer>>& group) {
    without_gil([&] { qobs::fuse_observers(group); });
  }, py::arg("group"));
  m.def("fused_layer_names", &qobs::fused_layer_names);
  m.def("registered_observers", &qobs::registered_observers);
  m.def("normalize_observer_name", &qobs::normalize_observer_name, py::arg("name"));
  m.def("calibration_observer_name", &qobs::calibration_observer_name, py::arg("base_name"), py::arg("name"));
  m.def("is_activation_base_name", &qobs::is_activation_base_name, py::arg("base_name"));

  m.attr("__version__") = QOBS_VERSION;
}
