// quantize_checkpoint, steps 2-3 (schedule, calibrate): the planned jobs calibrated and
// compressed on one pool of QuantizeOptions::threads threads, shared with the kernels.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "pipeline/compress.h"
#include "pipeline/plan.h"

namespace qobs::detail {

/// What one job produced, per member: the tensors to write and the report line.
struct JobResult {
  std::vector<Compressed> outputs;  ///< `dequantized` already dropped
  std::vector<TensorReport> reports;
};

/// Calibrates job `j` of `plan` and compresses its members; with `baseline`, also
/// measures memoryless_minmax on the same weights.
JobResult calibrate_job(const Checkpoint& ckpt, const QuantizePlan& plan, std::size_t j, bool baseline);

/// Runs every job of `plan` as a task of a ThreadPool of `options.threads` threads; the
/// kernels' parallel_for calls inside a job run on the same threads, so no more than
/// that many calibrate at any time, and the results (byte-identical for any count) do
/// not depend on it. `consume(j, result)` is called on the calling thread in job order;
/// at most `threads` jobs are started ahead of it, which bounds memory. `check_cancel`
/// runs before each job and after each consume. The first failing job's exception (in
/// job order) is rethrown once the jobs already started have finished.
void run_jobs(const Checkpoint& ckpt, const QuantizePlan& plan, const QuantizeOptions& options,
              const std::function<void()>& check_cancel,
              const std::function<void(std::size_t j, JobResult&& result)>& consume);

}  // namespace qobs::detail
