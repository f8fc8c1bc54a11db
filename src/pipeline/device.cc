#include "pipeline/device.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "core/check.h"
#include "kernels/kernels.h"
#include "kernels/kernels_cuda.h"
#include "qobs/cuda.h"
#include "qobs/pipeline.h"

namespace qobs {

// ---- DeviceSpec ----------------------------------------------------------------------

std::string DeviceSpec::str() const {
  if (kind == Kind::kCpu) return "cpu";
  return index ? "cuda:" + std::to_string(*index) : "cuda";
}

DeviceSpec parse_device(std::string_view text) {
  DeviceSpec d;
  if (text == "cpu") return d;
  d.kind = DeviceSpec::Kind::kCuda;
  if (text == "cuda") return d;
  const std::string_view prefix = "cuda:";
  const std::string_view digits = text.starts_with(prefix) ? text.substr(prefix.size()) : std::string_view();
  // a decimal index without sign or leading zeros, small enough for an int
  const bool index_ok = !digits.empty() && digits.size() <= 6 &&
                        std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
                        (digits.size() == 1 || digits[0] != '0');
  QOBS_CHECK(index_ok, InvalidArgument, "--device ", text, ": expected cpu, cuda or cuda:N (N a device index from 0)");
  d.index = std::stoi(std::string(digits));
  return d;
}

int cuda_device_for_rank(int local_rank, int device_count) {
  QOBS_CHECK(device_count > 0 && local_rank >= 0, InvalidArgument, "no CUDA device for local rank ", local_rank, " (",
             device_count, " devices)");
  return local_rank % device_count;
}

DeviceSpec resolve_device(const DeviceSpec& d, int local_rank) {
  if (d.kind != DeviceSpec::Kind::kCuda) return d;
  QOBS_CHECK(cuda::available(), InvalidArgument, "--device ", d.str(), ": ", cuda::unavailable_reason());
  const int n = cuda::device_count();
  QOBS_CHECK(d.index.value_or(0) < n, InvalidArgument, "--device ", d.str(), ": the CUDA runtime sees ", n,
             n == 1 ? " device (cuda:0)" : " devices (cuda:0 to cuda:" + std::to_string(n - 1) + ")");
  DeviceSpec out = d;
  if (!out.index) out.index = cuda_device_for_rank(local_rank, n);
  return out;
}

namespace detail {

using kernels::cuda::Backend;
using kernels::cuda::CopyKind;
using kernels::cuda::DeviceBuffer;
using kernels::cuda::Stream;
using Clock = std::chrono::steady_clock;

// ---- placement -----------------------------------------------------------------------

Placement place_jobs(const QuantizePlan& plan, bool baseline) {
  Placement p;
  p.cpu_reason.resize(plan.jobs.size());
  for (std::size_t j = 0; j < plan.jobs.size(); ++j) {
    const Job& job = plan.jobs[j];
    const PlanGroup& group = plan.group_of(job);
    std::vector<std::string> observers{group.observer};
    if (baseline && group.observer != kBaselineObserver) observers.emplace_back(kBaselineObserver);
    std::string& why = p.cpu_reason[j];
    // the device packs FP4 codes and int rows (quantize_on_device); FP6 codes are the CPU's
    if (packs_fp6(group.format())) why = group.format() + " (the device path packs no FP6 codes)";
    for (std::size_t k = 0; k < job.members.size() && why.empty(); ++k) {
      const PlannedModule& m = plan.modules[job.members[k]];
      // only the weight's dtype, shape and strides are read
      const TensorView weight(nullptr, m.weight->dtype, m.weight->shape);
      for (const std::string& name : observers) {
        ObserverOptions opt;
        opt.label = m.module + ".weight";
        why = cuda::path_unsupported(*load_observer(name, "weight", group.weight_args(), {}, opt), weight);
        if (!why.empty()) break;
      }
    }
    (why.empty() ? p.device_modules : p.cpu_modules) += static_cast<int64_t>(job.members.size());
  }
  return p;
}

std::vector<std::string> Placement::cpu_notes(const QuantizePlan& plan) const {
  struct Note {
    int64_t weights = 0;
    std::string first;
  };
  std::vector<std::string> order;
  std::map<std::string, Note> notes;
  for (std::size_t j = 0; j < cpu_reason.size(); ++j) {
    if (cpu_reason[j].empty()) continue;
    auto [it, fresh] = notes.try_emplace(cpu_reason[j]);
    if (fresh) {
      order.push_back(cpu_reason[j]);
      it->second.first = plan.modules[plan.jobs[j].members[0]].module;
    }
    it->second.weights += static_cast<int64_t>(plan.jobs[j].members.size());
  }
  std::vector<std::string> out;
  for (const std::string& why : order) {
    const Note& n = notes.at(why);
    out.push_back(std::to_string(n.weights) + (n.weights == 1 ? " weight stays" : " weights stay") +
                  " on the CPU: " + why + " (" + n.first + (n.weights > 1 ? ", ..." : "") + ")");
  }
  return out;
}

// ---- the runner ----------------------------------------------------------------------

namespace {

/// Offsets of the members' weights in one buffer: the device's allocations are aligned
/// to 256 bytes, and so is each weight in it.
constexpr std::size_t kAlign = 256;
std::size_t aligned(std::size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

/// Page-locked host memory that grows to the largest size asked of it (and is kept).
/// Grown only while no copy from or to it is pending on the worker's stream.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(const Backend& b) : b_(&b) {}
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { reset(); }
  unsigned char* get(std::size_t bytes) {
    if (bytes > capacity_) {
      reset();
      // at least 1 MiB and a quarter more than asked: the next job's weights are rarely
      // the same size
      const std::size_t grown = aligned(std::max<std::size_t>(bytes + bytes / 4, std::size_t{1} << 20));
      p_ = static_cast<unsigned char*>(b_->allocate_pinned(grown));
      capacity_ = grown;
    }
    return p_;
  }

 private:
  void reset() noexcept {
    if (!p_) return;
    try {
      b_->release_pinned(p_);
    } catch (...) {  // a failed release in a destructor: the memory is lost, nothing else
    }
    p_ = nullptr;
    capacity_ = 0;
  }
  const Backend* b_;
  unsigned char* p_ = nullptr;
  std::size_t capacity_ = 0;
};

/// Device memory that grows likewise; the old block is released on the stream, after
/// the work queued on it that may still read it.
class DeviceArena {
 public:
  DeviceArena(const Backend& b, Stream s) : b_(&b), s_(s) {}
  unsigned char* get(std::size_t bytes) {
    if (bytes > buffer_.bytes())
      buffer_ = DeviceBuffer(*b_, aligned(std::max<std::size_t>(bytes + bytes / 4, std::size_t{1} << 20)), s_);
    return buffer_.as<unsigned char>();
  }

 private:
  const Backend* b_;
  Stream s_;
  DeviceBuffer buffer_;
};

std::size_t nbytes_of(DType dt, const Shape& shape) {
  return static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dt);
}

}  // namespace

struct DeviceRunner::Worker {
  Worker(const Backend& backend, int dev)
      : b(backend),
        device(dev),
        stream(backend.create_stream()),
        weights_in(backend),
        results_out(backend),
        dequantized_out(backend),
        weights(backend, stream),
        quantized(backend, stream),
        packed(backend, stream),
        dequantized(backend, stream) {}
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  ~Worker() {
    // the arenas' memory is released on the stream before it goes
    weights = DeviceArena(b, stream);
    quantized = DeviceArena(b, stream);
    packed = DeviceArena(b, stream);
    dequantized = DeviceArena(b, stream);
    try {
      b.synchronize(stream);
      b.destroy_stream(stream);
    } catch (...) {  // a device in error: nothing more to release
    }
  }

  const Backend& b;
  int device;
  Stream stream;
  PinnedBuffer weights_in;       ///< the job's weights as read from the checkpoint
  PinnedBuffer results_out;      ///< a member's packed (or quantized) weight
  PinnedBuffer dequantized_out;  ///< a member's dequantized weight, for the report's sums
  DeviceArena weights, quantized, packed, dequantized;
};

DeviceRunner::DeviceRunner(int device, const Placement& placement) : device_(device), placement_(placement) {}
DeviceRunner::~DeviceRunner() = default;

std::unique_ptr<DeviceRunner::Worker> DeviceRunner::acquire() {
  const Backend& b = kernels::cuda::require_backend();
  b.set_device(device_);  // this thread's current device: the worker's stream and every buffer live there
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      std::unique_ptr<Worker> w = std::move(idle_.back());
      idle_.pop_back();
      return w;
    }
  }
  return std::make_unique<Worker>(b, device_);
}

void DeviceRunner::give_back(std::unique_ptr<Worker> w, bool clean) {
  if (!clean) {
    // a job that failed may have left work queued that reads or writes the worker's
    // buffers: the next job must not start before it ends
    try {
      w->b.synchronize(w->stream);
    } catch (...) {
      return;  // the stream is in error: the worker goes
    }
  }
  const std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(w));
}

namespace {

/// A member's qparams: on the host as get_qparams returns them, and the zero point and
/// global scale where quantization on the device reads them.
struct MemberQParams {
  QParams host;
  DeviceBuffer zero_point, global_scale;
};

/// Phase 1 and 2 of `observer` for the members on the device (run.cc's calibrate: one
/// observer per member, given its module's importance (null for none) before any member
/// observes, fused members sharing the global scale, R6.10).
std::vector<MemberQParams> calibrate_on_device(DeviceRunner::Worker& w, const std::vector<TensorView>& weights,
                                               const std::vector<std::string>& labels, const QuantizationArgs& args,
                                               const std::string& observer,
                                               const std::vector<const ModuleImportance*>& importance) {
  const Backend& b = w.b;
  const std::size_t n = weights.size();
  std::vector<std::shared_ptr<Observer>> obs;
  std::vector<cuda::DeviceStatistics> stats;
  for (std::size_t k = 0; k < n; ++k) {
    ObserverOptions opt;
    opt.label = labels[k];
    obs.push_back(load_observer(observer, "weight", args, {}, opt));
    if (const ModuleImportance* imp = importance.empty() ? nullptr : importance[k]) give_importance(*obs[k], *imp);
  }
  for (std::size_t k = 0; k < n; ++k) stats.push_back(cuda::observe_weight(*obs[k], weights[k], w.stream.handle));
  // fuse_observers fuses tensor_group members only; get_global_scale takes the observer
  // first, then its partners in the group's order
  const bool fused = n > 1 && args.get_strategy() == Strategy::kTensorGroup;
  std::vector<MemberQParams> out(n);
  std::vector<DeviceBuffer> scales(n);
  for (std::size_t k = 0; k < n; ++k) {
    const cuda::QParamsLayout l = cuda::qparams_layout(*obs[k], stats[k]);
    MemberQParams& q = out[k];
    scales[k] = DeviceBuffer(b, nbytes_of(l.scale_dtype, l.scale_shape), w.stream);
    q.zero_point = DeviceBuffer(b, nbytes_of(l.zero_point_dtype, l.zero_point_shape), w.stream);
    if (l.has_global_scale) q.global_scale = DeviceBuffer(b, sizeof(float), w.stream);
    std::vector<const cuda::DeviceStatistics*> members;
    if (fused) {
      members.push_back(&stats[k]);
      for (std::size_t i = 0; i < n; ++i)
        if (i != k) members.push_back(&stats[i]);
    }
    cuda::qparams_from_statistics(*obs[k], stats[k], members, scales[k].get(), q.zero_point.get(), q.global_scale.get(),
                                  w.stream.handle);
    q.host.scale = Tensor::uninitialized(l.scale_dtype, l.scale_shape);
    q.host.zero_point = Tensor::uninitialized(l.zero_point_dtype, l.zero_point_shape);
    b.copy(q.host.scale.data(), scales[k].get(), q.host.scale.nbytes(), CopyKind::kDeviceToHost, w.stream);
    b.copy(q.host.zero_point.data(), q.zero_point.get(), q.host.zero_point.nbytes(), CopyKind::kDeviceToHost, w.stream);
    if (l.has_global_scale) {
      q.host.global_scale = Tensor::uninitialized(DType::kF32, {1});
      b.copy(q.host.global_scale->data(), q.global_scale.get(), sizeof(float), CopyKind::kDeviceToHost, w.stream);
    }
  }
  b.synchronize(w.stream);
  return out;
}

/// compress_weight's middle (quantize_and_measure, compress.cc) on the device: quantize
/// with the stored scale, pack when the format packs, dequantize as a loader does and
/// sum the errors against the weight on the host. `outputs`: also bring the quantized
/// or packed weight back (the baseline only measures).
Quantized quantize_on_device(DeviceRunner::Worker& w, const TensorView& host_weight, const TensorView& weight,
                             const CompressSetup& setup, const MemberQParams& qp, const QuantizationArgs& a,
                             const std::string& format, std::string_view label, bool outputs) {
  const Backend& b = w.b;
  const auto s = w.stream;
  DeviceBuffer scale_buffer(b, setup.scale.nbytes(), s);
  b.copy(scale_buffer.get(), setup.scale.data(), setup.scale.nbytes(), CopyKind::kHostToDevice, s);
  const TensorView scale(scale_buffer.get(), setup.scale.dtype(), setup.scale.shape());
  const TensorView zero_point(qp.zero_point.get(), qp.host.zero_point.dtype(), qp.host.zero_point.shape());
  const TensorView global(qp.global_scale.get(), DType::kF32, {1});
  const TensorView* g = qp.host.global_scale ? &global : nullptr;

  const cuda::QdqLayout ql = cuda::quantize_layout(weight, scale, &zero_point, a, g, setup.q_dtype);
  const TensorView q(w.quantized.get(nbytes_of(ql.dtype, ql.shape)), ql.dtype, ql.shape);
  cuda::quantize(weight, scale, &zero_point, a, g, setup.q_dtype, const_cast<void*>(q.data), NumericMode::kParity,
                 s.handle);
  Quantized out;
  const PlannedTensor* packed = setup.packed();
  std::size_t out_bytes = 0;
  unsigned char* host_out = nullptr;
  if (outputs) {
    if (packed) {
      out_bytes = nbytes_of(packed->dtype, packed->shape);
      unsigned char* d = w.packed.get(out_bytes);
      if (packs_fp4(format)) cuda::pack_fp4(q, d, label, s.handle);
      else cuda::pack_int_rows(q, a.num_bits, d, label, s.handle);
      host_out = w.results_out.get(out_bytes);
      b.copy(host_out, d, out_bytes, CopyKind::kDeviceToHost, s);
    } else {
      out_bytes = nbytes_of(ql.dtype, ql.shape);
      host_out = w.results_out.get(out_bytes);
      b.copy(host_out, q.data, out_bytes, CopyKind::kDeviceToHost, s);
    }
  }
  // a loader drops symmetric zero points (R8.2.3) and dequantizes without one
  const TensorView* load_zp = a.symmetric ? nullptr : &zero_point;
  const cuda::QdqLayout dl = cuda::dequantize_layout(q, scale, load_zp, a, g, host_weight.dtype);
  const std::size_t dq_bytes = nbytes_of(dl.dtype, dl.shape);
  unsigned char* dq = w.dequantized.get(dq_bytes);
  cuda::dequantize(q, scale, load_zp, a, g, host_weight.dtype, dq, NumericMode::kParity, s.handle);
  unsigned char* host_dq = w.dequantized_out.get(dq_bytes);
  b.copy(host_dq, dq, dq_bytes, CopyKind::kDeviceToHost, s);
  b.synchronize(s);
  out.error = kernels::error_sums(host_weight, TensorView(host_dq, dl.dtype, dl.shape));
  if (outputs) {
    if (packed) out.packed = Tensor::from_bytes(packed->dtype, packed->shape, host_out, out_bytes);
    else out.q = Tensor::from_bytes(ql.dtype, ql.shape, host_out, out_bytes);
  }
  return out;
}

}  // namespace

JobResult DeviceRunner::calibrate(const Checkpoint& ckpt, const QuantizePlan& plan, std::size_t j, bool baseline) {
  std::unique_ptr<Worker> w = acquire();
  try {
    const Backend& b = w->b;
    const Job& job = plan.jobs[j];
    const PlanGroup& group = plan.group_of(job);
    const QuantizationArgs& wargs = group.weight_args();
    const std::size_t n = job.members.size();
    // 1. Read the members' weights into pinned memory, each copied to the device as soon
    //    as it is read, so that one's copy overlaps the next one's read.
    std::vector<std::size_t> offset(n);
    std::size_t total = 0;
    for (std::size_t k = 0; k < n; ++k) {
      offset[k] = total;
      total += aligned(plan.modules[job.members[k]].weight->nbytes());
    }
    unsigned char* host = w->weights_in.get(total);
    unsigned char* dev = w->weights.get(total);
    std::vector<TensorView> host_views, views;
    std::vector<std::string> labels;
    std::vector<const ModuleImportance*> importance;
    for (std::size_t k = 0; k < n; ++k) {
      const PlannedModule& m = plan.modules[job.members[k]];
      const std::span<const uint8_t> bytes = ckpt.shards()[m.shard].bytes(*m.weight);
      std::memcpy(host + offset[k], bytes.data(), bytes.size());
      b.copy(dev + offset[k], host + offset[k], bytes.size(), CopyKind::kHostToDevice, w->stream);
      host_views.emplace_back(host + offset[k], m.weight->dtype, m.weight->shape);
      views.emplace_back(dev + offset[k], m.weight->dtype, m.weight->shape);
      labels.push_back(m.module + ".weight");
      importance.push_back(m.importance ? &*m.importance : nullptr);
    }
    // 2. Calibrate, quantize and pack each member.
    const auto start = Clock::now();
    const std::vector<MemberQParams> qp = calibrate_on_device(*w, views, labels, wargs, group.observer, importance);
    std::vector<Compressed> outputs;
    std::vector<QParams> host_qp;
    for (std::size_t k = 0; k < n; ++k) {
      const CompressSetup setup =
          compress_setup(views[k].dtype, views[k].shape, qp[k].host, wargs, group.format(), labels[k]);
      Quantized qz =
          quantize_on_device(*w, host_views[k], views[k], setup, qp[k], wargs, group.format(), labels[k], true);
      outputs.push_back(
          assemble_compressed(setup, std::move(qz), qp[k].host, wargs, group.format(), views[k].shape, labels[k]));
      host_qp.push_back(qp[k].host);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - start).count();
    JobResult r = finish_job(plan, j, std::move(outputs), host_qp, secs, baseline, [&] {
      const std::vector<MemberQParams> bq =
          calibrate_on_device(*w, views, labels, wargs, std::string(kBaselineObserver), {});
      std::vector<kernels::ErrorSums> errors;
      for (std::size_t k = 0; k < n; ++k) {
        const CompressSetup setup =
            compress_setup(views[k].dtype, views[k].shape, bq[k].host, wargs, group.format(), labels[k]);
        errors.push_back(
            quantize_on_device(*w, host_views[k], views[k], setup, bq[k], wargs, group.format(), labels[k], false)
                .error);
      }
      return errors;
    });
    give_back(std::move(w), true);
    return r;
  } catch (...) {
    give_back(std::move(w), false);
    throw;
  }
}

}  // namespace detail
}  // namespace qobs
