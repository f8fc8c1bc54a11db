// quantize_checkpoint, step 1 (plan): everything decided from the options and the
// checkpoint's header before any tensor is read, so that option and shape errors
// surface before any work (R5.3.1, R8.5.1).
#pragma once

#include <cstddef>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "pipeline/compress.h"
#include "qobs/io.h"
#include "qobs/pipeline.h"

namespace qobs::detail {

/// One config group (R1.6): its scheme (weights and format set) and calibration observer.
struct PlanGroup {
  std::string name;           ///< the config_groups key
  QuantizationScheme scheme;  ///< resolved; weights and format are set
  std::string observer;       ///< the calibration observer's registry name (R6.9.1)

  const QuantizationArgs& weight_args() const { return *scheme.weights; }
  const std::string& format() const { return *scheme.format; }
};

/// A module to quantize: where its weight is, its group and the tensors that replace it.
struct PlannedModule {
  std::string module;
  std::size_t shard;
  const TensorInfo* weight;
  std::vector<PlannedTensor> outputs;
  std::size_t group = 0;  ///< index into QuantizePlan::groups
  /// From QuantizeOptions::importance_path, for a group whose observer weighs by
  /// importance (R6.12.4): the observer's importance statistics before it observes.
  std::optional<ModuleImportance> importance;
};

/// One unit of calibration work: a module, or a fused group of sibling modules that
/// share one global scale (R6.10); all members belong to one config group.
struct Job {
  std::vector<std::size_t> members;  ///< indices into QuantizePlan::modules
};

struct QuantizePlan {
  std::vector<PlanGroup> groups;  ///< one for --scheme, the config's groups for --config
  std::string format;             ///< the config's: the groups' one format, or "mixed-precision"
  /// --config: the config as given (ignore, kv_cache_scheme) written back as the reference
  /// writes it; unset for --scheme (the config then lists the ignored Linear layers).
  std::optional<QuantizationConfig> config;
  /// R1.6.5: the experts kept per layer, from --config or from the input model's
  /// quantization_config; written into the output's (R8.7).
  std::optional<ExpertSparsityConfig> moe_sparsity_config;
  TargetPlan targets;
  std::vector<PlannedModule> modules;  ///< checkpoint order
  std::vector<Job> jobs;               ///< in checkpoint order of each job's first member
  std::set<std::string> replaced;      ///< the `<module>.weight` tensors the outputs replace
  /// Per shard, the output file's tensors: passthrough ones, then each module's outputs.
  std::vector<std::vector<TensorSpec>> shard_specs;

  const PlanGroup& group_of(const Job& job) const { return groups[modules[job.members[0]].group]; }
};

/// The groups of a conversion, each resolved as resolve_scheme resolves a preset: the
/// preset as "group_0", or the groups of options.config.
std::vector<PlanGroup> resolve_groups(const QuantizeOptions& options);

/// The plan for quantizing `ckpt` with `groups` (from resolve_groups(options)).
/// InvalidArgument when the checkpoint is already quantized, nothing matches the
/// targets, a weight's shape does not fit the scheme or a fused group is partly ignored;
/// with options.importance_path, when the file names a module the checkpoint lacks or
/// lacks a module an importance-weighted observer calibrates, or a length differs from
/// the weight's in_features (R6.12.4; IoError for an unreadable file).
QuantizePlan plan_quantize(const Checkpoint& ckpt, const QuantizeOptions& options, std::vector<PlanGroup> groups);

/// A module's importance as the statistics the imatrix observers keep (R6.8.3,
/// importance_sum and importance_count, SUM-reduced): what attach + accumulate_input
/// would have left, for import_statistics and reduce_statistics (importance.cc).
Statistics importance_statistics(const ModuleImportance& m);
/// `m` as an imatrix observer's importance: attach(in_features), then its statistics
/// imported, before the observer observes (R6.12.4). Both calibration paths (run.cc,
/// device.cc) give it so.
void give_importance(Observer& observer, const ModuleImportance& m);

}  // namespace qobs::detail
