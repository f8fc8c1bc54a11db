// Importance files (R6.12.4): {module: (importance_sum, importance_count)}.
#include <cstdint>
#include <string>
#include <vector>

#include "binding.h"

namespace qobs_ext {

void bind_importance(py::module_& m) {
  const auto importance_out = [](const qobs::ImportanceMap& imp) {
    py::dict d;
    for (const auto& [module, e] : imp) d[py::str(module)] = py::make_tuple(out(e.sum), e.count);
    return d;
  };
  m.def(
      "write_importance",
      [](const std::string& path, const py::dict& entries) {
        qobs::ImportanceMap imp;
        for (const auto& [k, v] : entries) {
          const auto t = py::reinterpret_borrow<py::tuple>(v);
          if (t.size() != 2)
            throw qobs::InvalidArgument("importance entries are (importance_sum, importance_count) pairs");
          imp[k.cast<std::string>()] = qobs::ModuleImportance{owned(t[0], "importance_sum"), t[1].cast<int64_t>()};
        }
        py::gil_scoped_release unlocked;
        qobs::write_importance(path, imp);
      },
      py::arg("path"), py::arg("entries"));
  m.def(
      "read_importance",
      [=](const std::string& path) {
        qobs::ImportanceMap imp;
        {
          py::gil_scoped_release unlocked;
          imp = qobs::read_importance(path);
        }
        return importance_out(imp);
      },
      py::arg("path"));
  m.def(
      "merge_importance",
      [=](const std::vector<std::string>& paths, const std::string& out_path) {
        qobs::ImportanceMap imp;
        {
          py::gil_scoped_release unlocked;
          imp = qobs::merge_importance(paths, out_path);
        }
        return importance_out(imp);
      },
      py::arg("paths"), py::arg("out"));
}

}  // namespace qobs_ext
