// ObserverOptions, Observer (its calls release the GIL; observers lock themselves), the
// registry and fusion.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "binding.h"

namespace qobs_ext {

void bind_observers(py::module_& m) {
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
           py::arg("label") = qobs::ObserverOptions{}.label, py::arg("f32_errors") = qobs::ObserverOptions{}.f32_errors,
           py::arg("chunked_search") = qobs::ObserverOptions{}.chunked_search)
      .def_property_readonly("mode", [](const qobs::ObserverOptions& o) { return std::string(mode_name(o.mode)); })
      .def_readonly("label", &qobs::ObserverOptions::label)
      .def_readonly("f32_errors", &qobs::ObserverOptions::f32_errors)
      .def_readonly("chunked_search", &qobs::ObserverOptions::chunked_search);

  py::class_<qobs::Observer, std::shared_ptr<qobs::Observer>>(m, "Observer")
      .def_property_readonly("name", [](const qobs::Observer& o) { return std::string(o.name()); })
      .def_property_readonly("base_name", &qobs::Observer::base_name)
      .def_property_readonly("args", &qobs::Observer::args)
      .def_property_readonly("options", &qobs::Observer::options)
      .def_property_readonly("is_weight_observer", &qobs::Observer::is_weight_observer)
      .def(
          "observe",
          [](qobs::Observer& o, py::handle value) {
            Borrowed v = borrow(value, "observed value");
            without_gil([&] { o.observe(v.view); });
          },
          py::arg("value"))
      .def(
          "observe_flattened",
          [](qobs::Observer& o, py::handle value) {
            Borrowed v = borrow(value, "flattened observed value");
            without_gil([&] { o.observe_flattened(v.view); });
          },
          py::arg("value"))
      .def("has_statistics", [](const qobs::Observer& o) { return without_gil([&] { return o.has_statistics(); }); })
      .def("get_statistics",
           [](const qobs::Observer& o) {
             const auto stats = without_gil([&] { return o.get_statistics(); });
             py::list l;
             for (const auto& [n, t] : stats) l.append(py::make_tuple(n, out(t)));
             return l;
           })
      .def("get_qparams",
           [](qobs::Observer& o) {
             qobs::QParams q = without_gil([&] { return o.get_qparams(); });
             return py::make_tuple(out(std::move(q.scale)), out(std::move(q.zero_point)),
                                   out_opt(std::move(q.global_scale)));
           })
      .def("get_global_scale",
           [](qobs::Observer& o) { return out_opt(without_gil([&] { return o.get_global_scale(); })); })
      .def(
          "delete_statistics",
          [](qobs::Observer& o, bool cooperative) { without_gil([&] { o.delete_statistics(cooperative); }); },
          py::arg("cooperative") = true)
      .def("export_statistics",
           [](const qobs::Observer& o) { return without_gil([&] { return o.export_statistics(); }); })
      .def(
          "import_statistics",
          [](qobs::Observer& o, const qobs::Statistics& stats) { without_gil([&] { o.import_statistics(stats); }); },
          py::arg("stats"))
      .def(
          "merge_statistics",
          [](qobs::Observer& o, const qobs::Statistics& other) { without_gil([&] { o.merge_statistics(other); }); },
          py::arg("other"))
      .def("sync_table",
           [](const qobs::Observer& o) {
             py::list l;
             for (const auto& [n, op] : o.sync_table()) l.append(py::make_tuple(n, std::string(qobs::to_string(op))));
             return l;
           })
      // The caller (python/qobs/observer.py) keeps the bound array alive: the core
      // stores only a view of it (R6.10.3).
      .def(
          "bind_weight",
          [](qobs::Observer& o, py::handle weight) {
            Borrowed w = borrow(weight, "weight");
            without_gil([&] { o.bind_weight(w.view); });
          },
          py::arg("weight"))
      .def("unbind_weight", [](qobs::Observer& o) { without_gil([&] { o.unbind_weight(); }); })
      .def(
          "attach", [](qobs::Observer& o, int64_t in_features) { without_gil([&] { o.attach(in_features); }); },
          py::arg("in_features"))
      .def("detach", [](qobs::Observer& o) { without_gil([&] { o.detach(); }); })
      .def(
          "accumulate_input",
          [](qobs::Observer& o, py::handle x) {
            Borrowed v = borrow(x, "input");
            without_gil([&] { o.accumulate_input(v.view); });
          },
          py::arg("x"))
      .def("fused_partners", [](const qobs::Observer& o) { return without_gil([&] { return o.fused_partners(); }); })
      .def("grid_candidates",
           [](const qobs::Observer& o) { return without_gil([&] { return qobs::grid_candidates(o); }); })
      .def("imatrix_search_path",
           [](const qobs::Observer& o) { return without_gil([&] { return qobs::imatrix_search_path(o); }); });

  m.def(
      "load_observer",
      [](const std::string& name, const std::string& base_name, const QuantizationArgs& args, py::handle kwargs,
         const qobs::ObserverOptions& options) {
        return qobs::load_observer(name, base_name, args, kwargs_from_dict(kwargs), options);
      },
      py::arg("name"), py::arg("base_name"), py::arg("args"), py::arg("kwargs") = py::none(),
      py::arg_v("options", qobs::ObserverOptions{}, "ObserverOptions()"));
  m.def(
      "fuse_observers",
      [](const std::vector<std::shared_ptr<qobs::Observer>>& group) {
        without_gil([&] { qobs::fuse_observers(group); });
      },
      py::arg("group"));
  m.def("fused_layer_names", &qobs::fused_layer_names);
  m.def("registered_observers", &qobs::registered_observers);
  m.def("normalize_observer_name", &qobs::normalize_observer_name, py::arg("name"));
  m.def("calibration_observer_name", &qobs::calibration_observer_name, py::arg("base_name"), py::arg("name"));
  m.def("is_activation_base_name", &qobs::is_activation_base_name, py::arg("base_name"));
}

}  // namespace qobs_ext
