// quantize_checkpoint, steps 2-3 (schedule, calibrate): the planned jobs calibrated and
// compressed on one pool of QuantizeOptions::threads threads, shared with the kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "pipeline/compress.h"
#include "pipeline/plan.h"
#include "qobs/io.h"

namespace qobs::detail {

class DeviceRunner;  // device.h

/// What one job produced, per member: the tensors to write and the report line.
struct JobResult {
  std::vector<Compressed> outputs;
  std::vector<TensorReport> reports;
};

/// The observer the report's baseline figures are measured with.
inline constexpr std::string_view kBaselineObserver = "memoryless_minmax";

/// Calibrates job `j` of `plan` and compresses its members; with `baseline`, also
/// measures kBaselineObserver on the same weights.
JobResult calibrate_job(const Checkpoint& ckpt, const QuantizePlan& plan, std::size_t j, bool baseline);

/// Job j's result from its members' compressed outputs and qparams (`seconds`: the
/// calibration and compression of all of them). With `baseline`, the report's baseline
/// figures: the job's own where its observer is kBaselineObserver, else the sums
/// `baseline_errors()` measures (one per member). calibrate_job and the device path
/// (device.cc) both end here.
JobResult finish_job(const QuantizePlan& plan, std::size_t j, std::vector<Compressed>&& outputs,
                     const std::vector<QParams>& qp, double seconds, bool baseline,
                     const std::function<std::vector<kernels::ErrorSums>()>& baseline_errors);

/// Runs the jobs `jobs` of `plan` (indices into plan.jobs) as tasks of a ThreadPool of
/// `options.threads` threads; the kernels' parallel_for calls inside a job run on the
/// same threads, so no more than that many calibrate at any time, and the results
/// (byte-identical for any count) do not depend on it. `consume(j, result)` is called on
/// the calling thread in the order of `jobs`; at most `threads` jobs are started ahead of
/// it, which bounds memory. `check_cancel` runs before each job and after each consume.
/// The first failing job's exception (in that order) is rethrown once the jobs already
/// started have finished. `idle`, when given, is the calling thread's own work while the
/// next result is not ready (the writing of pass-through tensors): one piece per call,
/// false once there is none left; it runs on the caller between waits, so it adds no
/// thread to the budget. `device`, when given, runs the jobs it places on its CUDA
/// device (DeviceRunner::runs) on the same tasks; the others are calibrate_job's.
void run_jobs(const Checkpoint& ckpt, const QuantizePlan& plan, const QuantizeOptions& options,
              std::span<const std::size_t> jobs, const std::function<void()>& check_cancel,
              const std::function<void(std::size_t j, JobResult&& result)>& consume,
              const std::function<bool()>& idle = {}, DeviceRunner* device = nullptr);

/// Step 4's pass-through tensors (those not in plan.replaced), written one per
/// write_next() call: run_jobs' `idle`, so that the copy overlaps the jobs instead of
/// trailing them, then write_all() for the rest. With no writers (a dry run, or an MPI
/// rank other than 0) it only counts them.
class PassthroughCopy {
 public:
  PassthroughCopy(const Checkpoint& ckpt, const QuantizePlan& plan,
                  std::vector<std::unique_ptr<SafetensorsWriter>>* writers, std::function<void()> check_cancel);
  int64_t count() const { return static_cast<int64_t>(todo_.size()); }
  /// Writes the next tensor; false once none is left to write.
  bool write_next();
  void write_all() {
    while (write_next()) {
    }
  }

 private:
  const Checkpoint& ckpt_;
  std::vector<std::unique_ptr<SafetensorsWriter>>* writers_;
  std::function<void()> check_cancel_;
  std::vector<std::pair<std::size_t, const TensorInfo*>> todo_;  ///< (shard, tensor)
  std::size_t next_ = 0;
};

/// The estimated cost of job `j`: the weight elements of its members times the grid
/// candidates each element is evaluated for (1 for the min-max observers), plus one
/// pass for the baseline. An estimate for balancing only; it never changes an output.
double job_cost(const QuantizePlan& plan, std::size_t j, bool baseline);

/// Splits the jobs over `ranks` processes: longest processing time first (the largest
/// cost goes to the least loaded rank; ties by job index and by rank), so every rank
/// computes the same assignment. Returns, per rank, its jobs in ascending order; a
/// fused group is one job and so stays on one rank. One rank gets every job.
std::vector<std::vector<std::size_t>> assign_jobs(const QuantizePlan& plan, int ranks, bool baseline);

}  // namespace qobs::detail
