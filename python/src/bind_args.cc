// QuantizationArgs, QuantizationScheme and the presets, through the core's parser.
#include <optional>
#include <string>
#include <vector>

#include "binding.h"

namespace qobs_ext {

namespace {

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

std::optional<QuantizationArgs> opt_args(py::handle v) {
  if (v.is_none()) return std::nullopt;
  return v.cast<QuantizationArgs>();
}

}  // namespace

void bind_args(py::module_& m) {
  py::class_<QuantizationArgs>(m, "QuantizationArgs")
      .def(py::init([](const py::kwargs& kw) { return args_from_kwargs(kw); }),
           "Keywords as compressed-tensors' QuantizationArgs; validated and inferred (R1.2, R1.3).")
      .def_readonly("num_bits", &QuantizationArgs::num_bits)
      .def_property_readonly("type", [](const QuantizationArgs& a) { return std::string(qobs::to_string(a.type)); })
      .def_readonly("symmetric", &QuantizationArgs::symmetric)
      .def_readonly("group_size", &QuantizationArgs::group_size)
      .def_property_readonly("strategy",
                             [](const QuantizationArgs& a) -> py::object {
                               return a.strategy ? py::cast(std::string(qobs::to_string(*a.strategy))) : py::none();
                             })
      .def_property_readonly("block_structure",
                             [](const QuantizationArgs& a) -> py::object {
                               if (!a.block_structure) return py::none();
                               py::list l;
                               l.append((*a.block_structure)[0]);
                               l.append((*a.block_structure)[1]);
                               return l;
                             })
      .def_property_readonly("dynamic",
                             [](const QuantizationArgs& a) -> py::object {
                               switch (a.dynamic) {
                                 case qobs::Dynamic::kFalse:
                                   return py::bool_(false);
                                 case qobs::Dynamic::kTrue:
                                   return py::bool_(true);
                                 case qobs::Dynamic::kLocal:
                                   return py::str("local");
                               }
                               return py::none();
                             })
      .def_property_readonly("actorder",
                             [](const QuantizationArgs& a) -> py::object {
                               return a.actorder == qobs::ActOrder::kNone
                                          ? py::none()
                                          : py::cast(std::string(qobs::to_string(a.actorder)));
                             })
      .def_property_readonly("scale_dtype", [](const QuantizationArgs& a) { return opt_dtype(a.scale_dtype); })
      .def_property_readonly("zp_dtype", [](const QuantizationArgs& a) { return opt_dtype(a.zp_dtype); })
      .def_property_readonly("observer", [](const QuantizationArgs& a) { return opt_str(a.observer); })
      .def_property_readonly("observer_kwargs",
                             [](const QuantizationArgs& a) { return kwargs_to_dict(a.observer_kwargs); })
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
  m.def(
      "reference_versions",
      [] {
        py::dict d;
        d["compressed_tensors"] = std::string(qobs::kReferenceVersions.compressed_tensors);
        d["llm_compressor"] = std::string(qobs::kReferenceVersions.llm_compressor);
        return d;
      },
      "The reference releases qobs reproduces (docs/RULES.md R0.6).");
}

}  // namespace qobs_ext
