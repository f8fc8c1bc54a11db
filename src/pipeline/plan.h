// quantize_checkpoint, step 1 (plan): everything decided from the options and the
// checkpoint's header before any tensor is read, so that option and shape errors
// surface before any work (R5.3.1, R8.5.1).
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <vector>

#include "pipeline/compress.h"
#include "qobs/io.h"
#include "qobs/pipeline.h"

namespace qobs::detail {

/// A module to quantize: where its weight is and the tensors that replace it.
struct PlannedModule {
  std::string module;
  std::size_t shard;
  const TensorInfo* weight;
  std::vector<PlannedTensor> outputs;
};

/// One unit of calibration work: a module, or a fused group of sibling modules that
/// share one global scale (R6.10).
struct Job {
  std::vector<std::size_t> members;  ///< indices into QuantizePlan::modules
};

struct QuantizePlan {
  QuantizationScheme scheme;  ///< resolved; weights and format are set
  std::string format;
  std::string observer;  ///< the calibration observer's registry name (R6.9.1)
  TargetPlan targets;
  std::vector<PlannedModule> modules;  ///< checkpoint order
  std::vector<Job> jobs;               ///< in checkpoint order of each job's first member
  std::set<std::string> replaced;      ///< the `<module>.weight` tensors the outputs replace
  /// Per shard, the output file's tensors: passthrough ones, then each module's outputs.
  std::vector<std::vector<TensorSpec>> shard_specs;

  const QuantizationArgs& weight_args() const { return *scheme.weights; }
};

/// The plan for quantizing `ckpt` with `scheme` (from resolve_scheme(options)).
/// InvalidArgument when the checkpoint is already quantized, nothing matches the
/// targets, a weight's shape does not fit the scheme or a fused group is partly ignored.
QuantizePlan plan_quantize(const Checkpoint& ckpt, const QuantizeOptions& options, QuantizationScheme scheme);

}  // namespace qobs::detail
