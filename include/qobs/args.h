// QuantizationArgs, QuantizationScheme, presets and QuantizationConfig (RULES §1).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "qobs/dtype.h"

namespace qobs {

enum class QuantType : uint8_t { kInt, kFloat };
enum class Strategy : uint8_t { kTensor, kChannel, kGroup, kBlock, kToken, kTensorGroup, kAttnHead };
/// R1.1.3: false, true or "local" (static global scale, run-time local scales).
enum class Dynamic : uint8_t { kFalse, kTrue, kLocal };
/// R1.1.4. The spelling given is preserved for serialization; kDynamic is an alias of
/// kGroup and kStatic an alias of kWeight (see actorder_equivalent).
enum class ActOrder : uint8_t { kNone, kGroup, kWeight, kDynamic, kStatic };

std::string_view to_string(QuantType v);
std::string_view to_string(Strategy v);
std::string_view to_string(ActOrder v);          ///< "" for kNone
QuantType parse_quant_type(std::string_view s);  ///< R1.1.1, case-insensitive
Strategy parse_strategy(std::string_view s);     ///< R1.1.2, case-insensitive
Dynamic parse_dynamic(std::string_view s);       ///< R1.1.3: "local" (or "true"/"false")
ActOrder parse_actorder(std::string_view s);     ///< R1.1.4 incl. aliases
/// Alias-aware actorder comparison: dynamic == group, static == weight.
bool actorder_equivalent(ActOrder a, ActOrder b);
/// kDynamic -> kGroup, kStatic -> kWeight, others unchanged.
ActOrder actorder_canonical(ActOrder a);

/// One observer keyword argument value (JSON scalar).
using KwargValue = std::variant<bool, int64_t, double, std::string>;
/// Observer keyword arguments, ordered by name.
using ObserverKwargs = std::map<std::string, KwargValue>;
/// Reads a numeric kwarg as double (bool/int/double accepted); InvalidArgument otherwise.
double kwarg_as_double(const std::string& name, const KwargValue& v);

/// One field value as a JSON document or Python keywords give it: the input of the one
/// QuantizationArgs parser (R1.2), so that JSON, C++ and Python callers get the same
/// checks and the same messages. QuantizationArgs::from_json converts its document to
/// these; the Python binding converts keyword arguments.
struct FieldValue {
  /// An integer outside the int64 range, as its decimal digits (rejected by name and value).
  struct BigInt {
    std::string digits;
    friend bool operator==(const BigInt&, const BigInt&) = default;
  };
  /// A value that has no JSON form (a Python object of another type), by its type name.
  struct Foreign {
    std::string type_name;
    friend bool operator==(const Foreign&, const Foreign&) = default;
  };
  using List = std::vector<FieldValue>;
  /// Keys in the order given: the first failing field is reported.
  using Map = std::vector<std::pair<std::string, FieldValue>>;

  std::variant<std::nullptr_t, bool, int64_t, BigInt, double, std::string, List, Map, Foreign> value;

  /// The value as it appears in error messages (JSON text; a Foreign value as <type>).
  std::string dump() const;
};

/// Observer keyword arguments from an object of scalars (R1.2 observer_kwargs, R6.7.1);
/// null gives none. `what` names the option in messages.
ObserverKwargs observer_kwargs_from_field(const FieldValue& v, std::string_view what = "observer_kwargs");

/// All fields and defaults of R1.2. Construct the plain struct, then call
/// validated() to run the checks and the inference of R1.2.1/R1.3.1 in order.
struct QuantizationArgs {
  int num_bits = 8;
  QuantType type = QuantType::kInt;
  bool symmetric = true;
  std::optional<int64_t> group_size;
  std::optional<Strategy> strategy;
  std::optional<std::array<int64_t, 2>> block_structure;
  Dynamic dynamic = Dynamic::kFalse;
  ActOrder actorder = ActOrder::kNone;
  std::optional<DType> scale_dtype;
  std::optional<DType> zp_dtype;
  std::optional<std::string> observer;
  ObserverKwargs observer_kwargs;
  /// Whether validated() filled observer / zp_dtype in (R1.3.1 steps 7-9) rather than
  /// the caller setting them: compressed-tensors 0.20 writes only the fields a user set
  /// (R8.7.5). Whoever assigns observer or zp_dtype after validation clears the flag.
  /// Not part of equality.
  bool observer_inferred = false;
  bool zp_dtype_inferred = false;

  /// Runs R1.2.2 and R1.3.1 (steps 1-9, first failure wins) and returns the object
  /// with strategy, observer and zp_dtype inferred. Idempotent.
  QuantizationArgs validated() const;

  /// Strategy after validation (throws PreconditionError if not yet inferred).
  Strategy get_strategy() const;

  /// R1.3.2 pytorch_dtype(): the storage dtype of quantized values.
  DType pytorch_dtype() const;

  /// R1.3.5 JSON with exactly the keys of R1.2 in their order (zp_dtype null when
  /// symmetric).
  std::string to_json(int indent = -1) const;
  /// R8.7.5 JSON as compressed-tensors 0.20 writes it into config.json: the R1.3.5
  /// keys less actorder / block_structure / scale_dtype when null, observer_kwargs when
  /// empty, and observer / zp_dtype unless the caller set them (not inferred) and they
  /// are written non-null. Parsing it gives an equal object.
  std::string to_config_json(int indent = -1) const;
  /// Parses JSON (unknown keys -> InvalidArgument, R1.2.1) and validates.
  static QuantizationArgs from_json(std::string_view json);
  /// The same parser over already-split fields (unknown keys -> InvalidArgument,
  /// R1.2.1); fields not given keep the defaults above. Validates.
  static QuantizationArgs from_fields(const FieldValue::Map& fields);

  bool is_fp4() const { return type == QuantType::kFloat && num_bits == 4; }
  bool is_fp6() const { return type == QuantType::kFloat && num_bits == 6; }
  /// R2.4.4 should_generate_mx_scales.
  bool is_mx() const;
  /// (q_min, q_max) of R2.1-R2.3, R2.8 (float with bits not in {4, 6, 8} ->
  /// NotImplementedError).
  std::pair<float, float> q_range() const;

  friend bool operator==(const QuantizationArgs& a, const QuantizationArgs& b);
};

/// Parses a block_structure given as "AxB" (R1.2.2); InvalidArgument with "positive".
std::array<int64_t, 2> parse_block_structure(std::string_view text);

/// R1.4.
struct QuantizationScheme {
  std::vector<std::string> targets;
  std::optional<QuantizationArgs> weights;
  std::optional<QuantizationArgs> input_activations;
  std::optional<QuantizationArgs> output_activations;
  std::optional<std::string> format;

  /// Validates each args object and the scheme rules of R1.4.2.
  QuantizationScheme validated() const;
  std::string to_json(int indent = -1) const;
  /// R8.7.1: the scheme with its args as to_config_json writes them.
  std::string to_config_json(int indent = -1) const;
  static QuantizationScheme from_json(std::string_view json);
  friend bool operator==(const QuantizationScheme&, const QuantizationScheme&) = default;
};

/// R1.5: the preset scheme `name` (case-insensitive) with the given targets; a fresh
/// copy each call. Unknown -> UnknownName.
QuantizationScheme preset_scheme(std::string_view name, std::vector<std::string> targets = {"Linear"});
/// Whether `name` is a preset (case-insensitive).
bool is_preset_name(std::string_view name);
/// All preset names in the order of R1.5.
std::vector<std::string> preset_names();

enum class QuantizationStatus : uint8_t { kInitialized, kCalibration, kFrozen, kCompressed, kDecompressed };
std::string_view to_string(QuantizationStatus s);

/// R1.6.5: compressed-tensors 0.20's ExpertSparsityConfig, the experts a MoE model keeps
/// per decoder layer.
struct ExpertSparsityConfig {
  std::string method;  ///< "prune" or "novice"
  /// one entry per decoder layer: the experts kept, or nullopt for a dense layer
  std::vector<std::optional<int64_t>> num_experts;
  friend bool operator==(const ExpertSparsityConfig&, const ExpertSparsityConfig&) = default;
};

/// R1.6: model-level configuration.
struct QuantizationConfig {
  std::vector<std::pair<std::string, QuantizationScheme>> config_groups;
  std::string quant_method = "compressed-tensors";
  std::optional<QuantizationArgs> kv_cache_scheme;
  std::string format = "fakequant";
  QuantizationStatus quantization_status = QuantizationStatus::kInitialized;
  std::optional<double> global_compression_ratio;
  std::vector<std::string> ignore;
  std::optional<ExpertSparsityConfig> moe_sparsity_config;  ///< R1.6.5

  /// R1.6.2.
  bool requires_calibration_data() const;
  /// R1.6.4.
  void merge(const QuantizationConfig& other);
  /// R8.7: the quantization_config object as compressed-tensors 0.20 writes it (its
  /// own keys; the writer adds version, sparsity and transform configs), groups and
  /// kv_cache_scheme as to_config_json, moe_sparsity_config always present (null when
  /// absent).
  std::string to_json(int indent = -1) const;
  /// Groups given as preset name -> list of targets are expanded (R1.6.1).
  static QuantizationConfig from_json(std::string_view json);
};

/// R1.6.3: module class name as used by ignore lists ("Linear" for routers and gates).
std::string module_type_for_ignore(std::string_view class_name);

/// R8.1.2: the compression format inferred for a scheme with weights.
std::string infer_compression_format(const QuantizationScheme& scheme);

}  // namespace qobs
