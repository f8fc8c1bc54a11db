// qobs/cuda.h: the CUDA device queries, the opaque DeviceStatistics and the two phases
// of a weight observer on device memory, and the activation statistics and imatrix
// importance accumulated on the device. Device tensors cross as what torch reports of
// them (data_ptr, dtype name, shape, strides in elements) and streams as the integer
// value of a cudaStream_t; python/qobs/cuda.py turns torch tensors and streams into
// these. Every call that does device work releases the GIL.
#include <cstdint>
#include <string>
#include <vector>

#include "binding.h"
#include "qobs/cuda.h"

namespace qobs_ext {

namespace {

using qobs::cuda::ActivationStatistics;
using qobs::cuda::DeviceImportance;
using qobs::cuda::DeviceStatistics;

/// A view of device memory: the core reads only its shape, dtype and strides on the
/// host, the kernels its data.
TensorView device_view(std::uintptr_t data_ptr, const std::string& dtype, const Shape& shape, const Shape& strides) {
  return TensorView(reinterpret_cast<const void*>(data_ptr), qobs::parse_dtype(dtype), shape, strides);
}

void* device_ptr(std::uintptr_t p) { return reinterpret_cast<void*>(p); }

qobs::cuda::StreamHandle stream_of(std::uintptr_t handle) { return reinterpret_cast<qobs::cuda::StreamHandle>(handle); }

/// ActivationStatistics and DeviceImportance: the same four calls, `add` taking one batch.
template <class Acc>
void bind_accumulator(py::module_& m, const char* name, const char* doc, const char* add_name,
                      void (Acc::*add)(const qobs::Observer&, const TensorView&, qobs::cuda::StreamHandle),
                      const char* add_doc, const char* store_doc) {
  py::class_<Acc>(m, name, doc)
      .def(py::init<>())
      .def(
          "unsupported",
          [](const Acc& a, const qobs::Observer& o, std::uintptr_t data_ptr, const std::string& dtype,
             const Shape& shape, const Shape& strides) {
            const TensorView x = device_view(data_ptr, dtype, shape, strides);
            return without_gil([&] { return a.unsupported(o, x); });
          },
          py::arg("observer"), py::arg("data_ptr"), py::arg("dtype"), py::arg("shape"), py::arg("strides"))
      .def(
          add_name,
          [add](Acc& a, const qobs::Observer& o, std::uintptr_t data_ptr, const std::string& dtype, const Shape& shape,
                const Shape& strides, std::uintptr_t stream) {
            const TensorView x = device_view(data_ptr, dtype, shape, strides);
            without_gil([&] { (a.*add)(o, x, stream_of(stream)); });
          },
          py::arg("observer"), py::arg("data_ptr"), py::arg("dtype"), py::arg("shape"), py::arg("strides"),
          py::arg("stream"), add_doc)
      .def_property_readonly("empty", &Acc::empty)
      .def(
          "store_into",
          [](Acc& a, qobs::Observer& o, std::uintptr_t stream) {
            without_gil([&] { a.store_into(o, stream_of(stream)); });
          },
          py::arg("observer"), py::arg("stream"), store_doc);
}

}  // namespace

void bind_cuda(py::module_& m) {
  m.def("cuda_available", &qobs::cuda::available);
  m.def("cuda_unavailable_reason", &qobs::cuda::unavailable_reason);
  m.def("cuda_device_count", &qobs::cuda::device_count);
  m.def("cuda_describe_device", &qobs::cuda::describe_device, py::arg("device"));

  py::class_<DeviceStatistics>(m, "DeviceStatistics",
                               "An observer's statistics of one weight in CUDA device memory (qobs/cuda.h).")
      .def_property_readonly("shape", [](const DeviceStatistics& s) { return py::tuple(py::cast(s.shape())); })
      .def_property_readonly("dtype",
                             [](const DeviceStatistics& s) { return std::string(qobs::dtype_name(s.dtype())); })
      .def_property_readonly("device", &DeviceStatistics::device)
      .def(
          "copy_to",
          [](const DeviceStatistics& s, std::uintptr_t min_vals, std::uintptr_t max_vals, std::uintptr_t stream) {
            without_gil([&] { s.copy_to(device_ptr(min_vals), device_ptr(max_vals), stream_of(stream)); });
          },
          py::arg("min_vals_ptr"), py::arg("max_vals_ptr"), py::arg("stream"),
          "Enqueues copies of min_vals / max_vals into device buffers of this shape and dtype.");

  m.def(
      "cuda_device_unsupported",
      [](const qobs::Observer& o, std::uintptr_t data_ptr, const std::string& dtype, const Shape& shape,
         const Shape& strides) {
        const TensorView w = device_view(data_ptr, dtype, shape, strides);
        return without_gil([&] { return qobs::cuda::device_unsupported(o, w); });
      },
      py::arg("observer"), py::arg("data_ptr"), py::arg("dtype"), py::arg("shape"), py::arg("strides"));
  m.def(
      "cuda_observe_weight",
      [](const qobs::Observer& o, std::uintptr_t data_ptr, const std::string& dtype, const Shape& shape,
         const Shape& strides, std::uintptr_t stream) {
        const TensorView w = device_view(data_ptr, dtype, shape, strides);
        return without_gil([&] { return qobs::cuda::observe_weight(o, w, stream_of(stream)); });
      },
      py::arg("observer"), py::arg("data_ptr"), py::arg("dtype"), py::arg("shape"), py::arg("strides"),
      py::arg("stream"));
  m.def(
      "cuda_qparams_layout",
      [](const qobs::Observer& o, const DeviceStatistics& stats) {
        const qobs::cuda::QParamsLayout l = qobs::cuda::qparams_layout(o, stats);
        return py::make_tuple(py::tuple(py::cast(l.scale_shape)), std::string(qobs::dtype_name(l.scale_dtype)),
                              py::tuple(py::cast(l.zero_point_shape)),
                              std::string(qobs::dtype_name(l.zero_point_dtype)), l.has_global_scale);
      },
      py::arg("observer"), py::arg("stats"));
  m.def(
      "cuda_global_scale_from_statistics",
      [](const qobs::Observer& o, const DeviceStatistics& stats, const std::vector<const DeviceStatistics*>& fused,
         std::uintptr_t global_ptr, std::uintptr_t stream) {
        without_gil([&] {
          qobs::cuda::global_scale_from_statistics(o, stats, fused, device_ptr(global_ptr), stream_of(stream));
        });
      },
      py::arg("observer"), py::arg("stats"), py::arg("fused"), py::arg("global_ptr"), py::arg("stream"));
  m.def(
      "cuda_qparams_from_statistics",
      [](const qobs::Observer& o, const DeviceStatistics& stats, const std::vector<const DeviceStatistics*>& fused,
         std::uintptr_t scale_ptr, std::uintptr_t zp_ptr, std::uintptr_t global_ptr, std::uintptr_t stream) {
        without_gil([&] {
          qobs::cuda::qparams_from_statistics(o, stats, fused, device_ptr(scale_ptr), device_ptr(zp_ptr),
                                              device_ptr(global_ptr), stream_of(stream));
        });
      },
      py::arg("observer"), py::arg("stats"), py::arg("fused"), py::arg("scale_ptr"), py::arg("zp_ptr"),
      py::arg("global_ptr"), py::arg("stream"));

  bind_accumulator<ActivationStatistics>(
      m, "CudaActivationStatistics",
      "An activation observer's min_vals / max_vals over batches in CUDA device memory "
      "(qobs/cuda.h ActivationStatistics).",
      "observe", &ActivationStatistics::observe, "Enqueues one batch; nothing waits for the device.",
      "Waits for the stream and replaces the observer's min_vals / max_vals; ValueError for a recorded "
      "non-finite batch.");
  bind_accumulator<DeviceImportance>(
      m, "CudaImportance",
      "An imatrix observer's importance over input batches in CUDA device memory (qobs/cuda.h DeviceImportance).",
      "accumulate", &DeviceImportance::accumulate, "Enqueues one input batch; nothing waits for the device.",
      "Waits for the stream and replaces the observer's importance_sum / importance_count.");
}

}  // namespace qobs_ext
