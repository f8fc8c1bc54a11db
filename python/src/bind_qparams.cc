// The qparam math, fake quantization / quantize / dequantize and flatten_for_calibration.
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "binding.h"

namespace qobs_ext {

void bind_qparams(py::module_& m) {
  m.def(
      "calculate_qparams",
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

  m.def(
      "generate_gparam",
      [](py::handle min_vals, py::handle max_vals, const std::string& mode) {
        Tensor mn = owned(min_vals, "min_vals"), mx = owned(max_vals, "max_vals");
        return out(qobs::generate_gparam(mn, mx, parse_mode(mode)));
      },
      py::arg("min_vals"), py::arg("max_vals"), py::arg("mode") = "parity");

  m.def(
      "compute_dynamic_scales_and_zp",
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
          case QOp::kFake:
            r = qobs::fake_quantize(xv.view, s, zp, args, gip, gp, nm);
            break;
          case QOp::kQuant:
            r = qobs::quantize(xv.view, s, zp, args, gip, gp, od, nm);
            break;
          case QOp::kDequant:
            r = qobs::dequantize(xv.view, s, zp, args, gip, gp, od, nm);
            break;
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

  m.def(
      "flatten_for_calibration",
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

  m.def(
      "generate_mx_scales",
      [](py::handle absmax, int num_bits) { return out(qobs::generate_mx_scales(owned(absmax, "absmax"), num_bits)); },
      py::arg("absmax"), py::arg("num_bits"));
}

}  // namespace qobs_ext
