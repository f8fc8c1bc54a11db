// Mergeable observer statistics: Statistics (serialize, pickle) and reduce_statistics.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "binding.h"

namespace qobs_ext {

namespace {

qobs::ReduceOp parse_reduce(const std::string& s) {
  if (s == "min") return qobs::ReduceOp::kMin;
  if (s == "max") return qobs::ReduceOp::kMax;
  if (s == "avg") return qobs::ReduceOp::kAvg;
  if (s == "sum") return qobs::ReduceOp::kSum;
  throw qobs::InvalidArgument("reduce op must be one of min, max, avg, sum; got \"" + s + "\"");
}

}  // namespace

void bind_statistics(py::module_& m) {
  py::class_<qobs::Statistics>(m, "Statistics")
      .def(py::init([](std::string observer, py::list items, int64_t contributions) {
             qobs::Statistics s;
             s.observer = std::move(observer);
             s.contributions = contributions;
             for (py::handle it : items) {
               auto t = py::reinterpret_borrow<py::tuple>(it);
               if (t.size() != 3) throw qobs::InvalidArgument("Statistics items are (name, tensor, reduce) triples");
               s.items.push_back(
                   {t[0].cast<std::string>(), owned(t[1], "statistic"), parse_reduce(t[2].cast<std::string>())});
             }
             return s;
           }),
           py::arg("observer"), py::arg("items"), py::arg("contributions") = 1)
      .def_readonly("observer", &qobs::Statistics::observer)
      .def_readonly("contributions", &qobs::Statistics::contributions)
      .def_property_readonly(
          "items",
          [](const qobs::Statistics& s) {
            py::list l;
            for (const auto& it : s.items)
              l.append(py::make_tuple(it.name, out(it.value), std::string(qobs::to_string(it.reduce))));
            return l;
          })
      .def("find",
           [](const qobs::Statistics& s, const std::string& name) -> py::object {
             const Tensor* t = s.find(name);
             return t ? out(*t) : py::none();
           })
      .def("empty", &qobs::Statistics::empty)
      .def("serialize",
           [](const qobs::Statistics& s) {
             const std::vector<uint8_t> b = s.serialize();
             return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
           })
      .def_static("deserialize",
                  [](py::bytes b) {
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

  m.def(
      "reduce_statistics", [](const std::vector<qobs::Statistics>& ranks) { return qobs::reduce_statistics(ranks); },
      py::arg("ranks"));
}

}  // namespace qobs_ext
