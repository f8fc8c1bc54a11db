// quantize_checkpoint on a CUDA device (QuantizeOptions::device, docs/CLI.md "Devices"):
// which jobs run there (the placement, decided from the plan alone, so that it is known
// and reported before any tensor is read), and the runner that calibrates, quantizes
// and packs a job on the GPU with the bytes of calibrate_job (run.cc). The device
// computes what is as large as the weight (statistics, qparams, quantize, pack,
// dequantize); the host reads the checkpoint, turns the small qparams into the format's
// tensors with the CPU path's own code (compress_setup, assemble_compressed) and sums
// the report's errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pipeline/plan.h"
#include "pipeline/run.h"
#include "qobs/io.h"

namespace qobs::detail {

/// Which jobs of a plan run on the device.
struct Placement {
  /// Per job of the plan: "" when it runs on the device, else why it stays on the CPU.
  std::vector<std::string> cpu_reason;
  int64_t device_modules = 0;  ///< modules of the jobs on the device
  int64_t cpu_modules = 0;

  bool on_device(std::size_t j) const { return cpu_reason[j].empty(); }
  /// One line per distinct reason, in the order of the jobs: how many weights it keeps
  /// on the CPU, the reason, and the first of those weights.
  std::vector<std::string> cpu_notes(const QuantizePlan& plan) const;
};

/// The placement of `plan`'s jobs on a CUDA device, whether or not one is present: a job
/// runs there when every member's weight has a device path (cuda::path_unsupported) for
/// its group's observer and, with `baseline`, for kBaselineObserver. Quantizing and
/// packing have a device path for every weight the plan accepts (2-D, no g_idx), so the
/// observers decide. A fused group (R6.10) shares its global scale, so one member
/// without a device path keeps the whole group on the CPU.
Placement place_jobs(const QuantizePlan& plan, bool baseline);

/// The device's side of one run. Every thread that runs a job on the device borrows a
/// worker for it: a stream of its own, and pinned host buffers and device buffers that
/// grow to the largest job it has seen and are reused for the next, so that while one
/// thread's job computes on the device, another's weights are read into pinned memory
/// and copied in, and a third's results come back. At most QuantizeOptions::threads
/// jobs are in flight (run_jobs), so at most that many workers exist.
class DeviceRunner {
 public:
  /// `device`: the CUDA device's index (checked by the caller); `placement`: the
  /// plan's, which must outlive the runner.
  DeviceRunner(int device, const Placement& placement);
  ~DeviceRunner();
  DeviceRunner(const DeviceRunner&) = delete;
  DeviceRunner& operator=(const DeviceRunner&) = delete;

  bool runs(std::size_t j) const { return placement_.on_device(j); }
  /// calibrate_job(ckpt, plan, j, baseline) on the device: the same JobResult byte for
  /// byte (the report's seconds aside). Safe to call from several threads at once.
  JobResult calibrate(const Checkpoint& ckpt, const QuantizePlan& plan, std::size_t j, bool baseline);

  struct Worker;

 private:
  std::unique_ptr<Worker> acquire();
  void give_back(std::unique_ptr<Worker> w, bool clean);

  int device_;
  const Placement& placement_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Worker>> idle_;
};

}  // namespace qobs::detail
