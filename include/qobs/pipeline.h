// Checkpoint conversion: a Hugging Face safetensors checkpoint in, a compressed-tensors
// checkpoint out (RULES §8), weight-only calibration with the observers of §6. Shared by
// the `qobs` command-line tool and the Python package.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "qobs/args.h"
#include "qobs/io.h"
#include "qobs/reference.h"
#include "qobs/tensor.h"

namespace qobs {

class Collective;  // qobs/collective.h

/// Where quantize_checkpoint calibrates, quantizes and packs the weights (`--device`,
/// docs/CLI.md "Devices"). The output is byte-identical for every device.
struct DeviceSpec {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  /// kCuda: the device's index; unset: device 0 (the CLI gives each MPI rank its own,
  /// cuda_device_for_rank).
  std::optional<int> index;

  /// "cpu", "cuda" or "cuda:N", as parse_device reads it.
  std::string str() const;
  bool operator==(const DeviceSpec&) const = default;
};

/// "cpu", "cuda" or "cuda:N" (N a decimal index from 0); anything else is an
/// InvalidArgument naming the value and the accepted forms.
DeviceSpec parse_device(std::string_view text);

/// The CUDA device of a rank that asked for `--device cuda` without an index: its rank
/// among the ranks of its host (`local_rank`) modulo the devices the host has.
int cuda_device_for_rank(int local_rank, int device_count);

/// `device` checked against the CUDA runtime, with its index: cpu as given; cuda without
/// a usable device, or with an index the runtime does not have, is an InvalidArgument
/// naming the device and why; cuda without an index gets cuda_device_for_rank's.
DeviceSpec resolve_device(const DeviceSpec& device, int local_rank = 0);

/// Options of quantize_checkpoint (the flags of `qobs quantize`).
struct QuantizeOptions {
  std::string model_path;  ///< checkpoint folder (or one .safetensors file)
  /// Must not exist unless overwrite. Never the input, an ancestor of it (replacing it
  /// would delete the input) or a folder inside it (it would be copied into itself).
  std::string output_dir;
  std::string scheme;  ///< preset name (R1.5), case-insensitive
  /// Weight observer (registry name); default: the preset's (R1.3.4). The name is stored
  /// in the config as given; calibration uses calibration_observer_name() (R6.9.1).
  std::optional<std::string> observer;
  ObserverKwargs observer_kwargs;  ///< merged into the weights' observer_kwargs
  /// Modules to quantize, in compressed-tensors' syntax (docs/CLI.md "Matching"): `re:<regex>`
  /// (anchored at the start of the module name), an exact module name, or a class name
  /// (Linear, Embedding, inferred from the weight). Empty: the Linear layers but lm_head.
  /// Each entry must match a module of the checkpoint (else InvalidArgument).
  std::vector<std::string> targets;
  /// Modules to leave unquantized, same syntax and the same must-match rule.
  std::vector<std::string> ignore;
  /// Several config groups (`--config`): replaces `scheme` and `targets`; `ignore` is
  /// appended to the config's. Each module gets the group whose target matches it most
  /// specifically (exact name, then regex, then class).
  std::optional<QuantizationConfig> config;
  std::string config_source = "--config";  ///< names the config in errors (its file)
  /// An importance file (write_importance / `qobs.collect_importance`) for the
  /// importance-weighted observers (imatrix_mse, nvfp4_expanded_imatrix, imatrix_lsq):
  /// each weight they calibrate gets its module's importance_sum / importance_count as
  /// the observer's own statistics (R6.12.4). Without it those observers are refused;
  /// with it, a run without such an observer is refused (the file would be ignored).
  std::optional<std::string> importance_path;
  /// The thread budget: up to `threads` layers are calibrated at once, and the kernels
  /// inside them run on the same threads (memory grows with it; output does not change).
  /// 0: QOBS_NUM_THREADS if set, else every core.
  int threads = 0;
  bool overwrite = false;
  bool dry_run = false;  ///< calibrate and report, write no checkpoint
  bool baseline = true;  ///< also measure memoryless_minmax for comparison
  /// Folder for qobs-report.json / .csv: default output_dir; for a dry run, no report
  /// files unless set.
  std::optional<std::string> report_dir;
  /// Cooperative cancellation: when it reads true (set from another thread or a signal
  /// handler; std::atomic<bool> is lock-free, so a handler may store to it), the run
  /// stops before the next layer, removes its temporary folder and throws Interrupted.
  const std::atomic<bool>* cancel = nullptr;
  /// Several processes share the conversion (docs/CLI.md "MPI mode"): every rank calls
  /// quantize_checkpoint with the same options; the jobs are split by estimated cost,
  /// each rank writes its tensors into the shared temporary folder and rank 0 publishes.
  /// The output folder is the single-process one. Null: this process does everything.
  Collective* collective = nullptr;
  /// Where weights are calibrated, quantized and packed. kCuda: every weight whose
  /// observer and layout have a device path (cuda::path_unsupported, and a fused group
  /// only when all its members have one) runs on that CUDA device, the others on the CPU;
  /// the output is the CPU run's byte for byte. Without a usable device, or with an index
  /// the runtime does not have: InvalidArgument before anything is read or written.
  DeviceSpec device;
  /// Notes on how the run proceeds, one line each, without a trailing newline: with a
  /// CUDA device, the device and how many weights run there, then one line per distinct
  /// reason that keeps weights on the CPU. Called on the calling thread of rank 0 before
  /// calibration starts; null: none.
  std::function<void(const std::string&)> log;
};

/// quantize_checkpoint stopped because QuantizeOptions::cancel was set; nothing was
/// written to the output folder.
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Figures for one quantized weight. rel_mse = sum((w - dq)^2) / sum(w^2) and
/// sqnr_db = 10 log10(sum(w^2) / sum((w - dq)^2)), where dq is the weight as a loader
/// dequantizes it from the written tensors. Infinite SQNR (exact) is reported as +inf
/// (null in JSON).
struct TensorReport {
  std::string module;  ///< module path ("model.layers.0.mlp.up_proj")
  Shape shape;
  std::string dtype;  ///< of the original weight
  std::string observer;
  double rel_mse = 0;
  double sqnr_db = 0;
  double seconds = 0;  ///< wall time of calibration + quantization + packing
  std::optional<double> baseline_rel_mse;
  std::optional<double> baseline_sqnr_db;
  std::optional<double> global_scale;  ///< tensor_group: the (possibly fused) global scale
  std::optional<int> rank;             ///< the rank that calibrated it; set only with a Collective
};

/// One rank's share of a run with a Collective.
struct RankReport {
  int rank = 0;
  std::string host;
  int64_t jobs = 0;
  int64_t modules = 0;
  double cost = 0;     ///< the estimated cost it was assigned (elements x grid candidates)
  double seconds = 0;  ///< wall time of its calibration step
};

struct QuantizeReport {
  std::string model_path;
  std::string output_dir;
  std::string scheme;
  std::string format;  ///< compressed-tensors format (R8.1.2)
  std::string observer;
  std::string baseline_observer = "memoryless_minmax";
  bool dry_run = false;
  std::vector<TensorReport> tensors;  ///< in checkpoint order
  std::vector<std::string> ignored;   ///< Linear layers left unquantized (the config's ignore)
  int64_t copied_tensors = 0;         ///< tensors passed through unchanged
  uint64_t input_bytes = 0;
  uint64_t output_bytes = 0;  ///< tensor bytes written (0 for a dry run)
  double seconds = 0;
  std::vector<RankReport> ranks;  ///< empty unless run with a Collective

  std::string to_json() const;
  std::string to_csv() const;
  /// Human-readable table (one line per tensor, then totals).
  std::string summary_table() const;
};

/// Progress after each quantized layer (called on the calling thread, in order).
struct Progress {
  int64_t done = 0;
  int64_t total = 0;
  double elapsed_s = 0;
  const TensorReport* last = nullptr;
};
using ProgressCallback = std::function<void(const Progress&)>;

/// Converts a checkpoint. Validates everything that can be validated before any work
/// (scheme, observer, shapes, output folder), writes into a temporary folder beside
/// output_dir (`.<name>.qobs-tmp-<host>-<pid>`) and renames it into place only when
/// complete; on failure the temporary folder is removed and the exception propagates
/// (IoError for files, InvalidArgument for options and shapes, each naming the file or
/// tensor; a path inside the temporary folder is reported as the output path). Before
/// writing, it removes temporary folders that an earlier run on this host killed with
/// SIGKILL left beside output_dir (their PID is dead); see docs/CLI.md.
QuantizeReport quantize_checkpoint(const QuantizeOptions& options, const ProgressCallback& progress = {});

/// The preset with the observer override and kwargs applied, validated. A preset that
/// needs activation statistics (static or "local" input activations, imatrix_mse) or
/// has nothing to quantize -> InvalidArgument saying so.
QuantizationScheme resolve_scheme(const QuantizeOptions& options);

/// Whether a tensor is the weight of a Linear layer by transformers' naming: a 2-D
/// `<module>.weight` whose module is not an embedding or a norm (lm_head is Linear).
bool is_linear_weight(std::string_view tensor_name, const Shape& shape);

/// Which modules get quantized and which Linear layers stay unquantized (the config's
/// `ignore`), from the checkpoint's tensor names and shapes.
struct TargetPlan {
  std::vector<std::string> quantize;  ///< module paths, checkpoint order
  std::vector<std::string> ignored;
};
TargetPlan plan_targets(const Checkpoint& checkpoint, const std::vector<std::string>& targets,
                        const std::vector<std::string>& ignore);

/// The QuantizationConfig of a JSON document in one of the reference's forms: a
/// compressed-tensors QuantizationConfig (`config_groups`, `ignore`, `kv_cache_scheme`,
/// `format`, alone or as a config.json's `quantization_config`), or an llm-compressor
/// recipe whose QuantizationModifier has `config_groups` or `scheme` + `targets`, and
/// `ignore` / `kv_cache_scheme`. `source` names the file in errors.
QuantizationConfig quantization_config_from_document(std::string_view json, const std::string& source);

/// The value of a plain (unquoted) YAML scalar: the one typing rule of --config YAML
/// documents and --observer-kwarg values, PyYAML's yaml.safe_load (YAML 1.1), with which
/// llm-compressor reads recipes. null: `~`, `null`, `Null`, `NULL` and the empty scalar;
/// booleans: yes / no / true / false / on / off, each lower-case, Capitalized or UPPER;
/// integers: decimal, `0b` binary, `0x` hexadecimal, octal after a leading `0`, base 60
/// (`1:30` is 90), with `_` separators; floats: with a `.` and an exponent only with its
/// sign (`1.5`, `.5`, `1.0e+3`), `.inf`, `-.inf`, `.nan`, base 60 with a fraction;
/// everything else a string (`1e3`, `0o10`, `1.0e3`, timestamps). An integer beyond int64
/// is a FieldValue::BigInt. Quoting is YAML syntax, before this rule: a quoted scalar is a
/// string. docs/CLI.md "Scalar types".
FieldValue yaml_plain_scalar(std::string_view text);

/// Where a model argument is: an existing path as given; else, for a Hugging Face hub id
/// (`org/name` or `name`), the snapshot folder of the local cache ($HF_HUB_CACHE, else
/// $HF_HOME/hub, else ~/.cache/huggingface/hub): `models--org--name/refs/<revision>` holds
/// a commit hash naming `snapshots/<hash>/`; a revision may also be a commit hash. Never
/// downloads. Not cached -> IoError naming the places looked at.
std::string resolve_model_path(const std::string& model, const std::string& revision = "main");

/// Text summary of a checkpoint: files, tensor count, bytes by dtype, the
/// quantization_config (if any) and, with list_tensors, every tensor.
std::string inspect_checkpoint(const std::string& path, bool list_tensors = false);

/// The weight of `module` as a loader reconstructs it from a compressed-tensors
/// checkpoint (RULES §8.3-8.6 decoding): unpack, decode the stored scale (fp8 or E8M0 into
/// `model_dtype`), then dequantize() with the scheme's args (R5.1.3, Q21: args are
/// passed, never inferred from shapes). Result dtype: model_dtype.
Tensor load_dequantized_weight(const Checkpoint& checkpoint, std::string_view module, const QuantizationArgs& args,
                               const std::string& format, DType model_dtype);

/// Dequantizes every quantized module of a compressed-tensors checkpoint written with
/// one config group (as `qobs quantize` writes them) into one plain safetensors file of
/// `<module>.weight` tensors (`qobs dequantize`). The model dtype is the weight_scale
/// dtype when that is a float dtype wider than fp8, else config.json's torch_dtype /
/// dtype, else f32; `dtype` overrides that (to mirror a loader that decodes into a fixed
/// dtype, e.g. compressed-tensors decodes NVFP4 into bf16). Returns the number of tensors
/// written.
int64_t dequantize_checkpoint(const std::string& path, const std::string& out_file,
                              std::optional<DType> dtype = std::nullopt);

/// One module's input importance: the statistics imatrix_mse accumulates (R6.8.2,
/// R6.8.3), kept as the observer keeps them.
struct ModuleImportance {
  Tensor sum;         ///< f32, one value per input feature: the sum of x^2 over the inputs
  int64_t count = 0;  ///< the inputs' rows (tokens) summed
};
/// Module path ("model.layers.0.mlp.up_proj") -> its importance.
using ImportanceMap = std::map<std::string, ModuleImportance>;

/// The `qobs.format` / `qobs.format_version` metadata of an importance file: a
/// safetensors file with `<module>.importance_sum` (F32, [in_features]) and
/// `<module>.importance_count` (I64, shape []) per module (docs/CLI.md "Importance").
inline constexpr std::string_view kImportanceFormat = "qobs-importance";
inline constexpr std::string_view kImportanceFormatVersion = "1";

/// Writes `importance` to `path` atomically (a temporary file beside it, renamed into
/// place when complete; on failure nothing is left). Every entry is validated first as
/// read_importance validates it (InvalidArgument naming the module), so nothing is
/// written for bad statistics; an empty map is refused.
void write_importance(const std::string& path, const ImportanceMap& importance);

/// Reads and validates an importance file: IoError when it is not a safetensors file of
/// this format (truncated, corrupt, other metadata, an unexpected tensor name, dtype or
/// shape); InvalidArgument naming the file, module and index for a sum that is not
/// finite or is negative, a count below 1 or a module with only one of its two tensors
/// (R6.12.4).
ImportanceMap read_importance(const std::string& path);

/// Combines importance files collected on several machines (or over several data
/// shards) with the statistics' reduce op, SUM (R6.8.2, R6.11.1; reduce_statistics:
/// each sum element is the f64 sum of the files' f32 values rounded once to f32; counts
/// add exactly), and writes the result to `out` (atomically). Every file must cover the
/// same modules with the same lengths (InvalidArgument naming the file and module).
/// Returns the merged map.
ImportanceMap merge_importance(const std::vector<std::string>& paths, const std::string& out);

/// The compressed-tensors version written into quantization_config.version (R8.7): the
/// release whose config.json shape qobs writes.
inline constexpr std::string_view kCompressedTensorsFormatVersion = kReferenceVersions.compressed_tensors;

}  // namespace qobs
