// QuantizationArgs (R1.2, R1.3): the enums and their spellings, the kwarg and
// block_structure readers, and validated(), which checks and infers the fields in the
// reference's order. JSON is args_json.cc; schemes, presets and configs have files of
// their own.
#include "qobs/args.h"

#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/text.h"
#include "qobs/formats.h"

namespace qobs {

namespace {

bool is_group_like(Strategy s) { return s == Strategy::kGroup || s == Strategy::kTensorGroup; }

}  // namespace

std::string_view to_string(QuantType v) { return v == QuantType::kInt ? "int" : "float"; }

std::string_view to_string(Strategy v) {
  switch (v) {
    case Strategy::kTensor:
      return "tensor";
    case Strategy::kChannel:
      return "channel";
    case Strategy::kGroup:
      return "group";
    case Strategy::kBlock:
      return "block";
    case Strategy::kToken:
      return "token";
    case Strategy::kTensorGroup:
      return "tensor_group";
    case Strategy::kAttnHead:
      return "attn_head";
  }
  return "";
}

std::string_view to_string(ActOrder v) {
  switch (v) {
    case ActOrder::kNone:
      return "";
    case ActOrder::kGroup:
      return "group";
    case ActOrder::kWeight:
      return "weight";
    case ActOrder::kDynamic:
      return "dynamic";
    case ActOrder::kStatic:
      return "static";
  }
  return "";
}

std::string_view to_string(QuantizationStatus s) {
  switch (s) {
    case QuantizationStatus::kInitialized:
      return "initialized";
    case QuantizationStatus::kCalibration:
      return "calibration";
    case QuantizationStatus::kFrozen:
      return "frozen";
    case QuantizationStatus::kCompressed:
      return "compressed";
    case QuantizationStatus::kDecompressed:
      return "decompressed";
  }
  return "";
}

QuantType parse_quant_type(std::string_view s) {
  const std::string l = ascii_lower(s);
  if (l == "int") return QuantType::kInt;
  if (l == "float") return QuantType::kFloat;
  QOBS_THROW(InvalidArgument, "type: '", s, "' is not one of int, float (R1.1.1)");
}

Strategy parse_strategy(std::string_view s) {
  const std::string l = ascii_lower(s);
  for (Strategy v : {Strategy::kTensor, Strategy::kChannel, Strategy::kGroup, Strategy::kBlock, Strategy::kToken,
                     Strategy::kTensorGroup, Strategy::kAttnHead})
    if (l == to_string(v)) return v;
  QOBS_THROW(InvalidArgument, "strategy: '", s,
             "' is not one of tensor, channel, group, block, token, tensor_group, attn_head (R1.1.2)");
}

Dynamic parse_dynamic(std::string_view s) {
  const std::string l = ascii_lower(s);
  if (l == "local") return Dynamic::kLocal;
  if (l == "true") return Dynamic::kTrue;
  if (l == "false") return Dynamic::kFalse;
  QOBS_THROW(InvalidArgument, "dynamic: string value '", s, "' must be \"local\" (R1.1.3)");
}

ActOrder parse_actorder(std::string_view s) {
  const std::string l = ascii_lower(s);
  if (l == "group") return ActOrder::kGroup;
  if (l == "weight") return ActOrder::kWeight;
  if (l == "dynamic") return ActOrder::kDynamic;
  if (l == "static") return ActOrder::kStatic;
  if (l == "true") return ActOrder::kGroup;
  if (l == "false" || l == "none" || l == "null" || l.empty()) return ActOrder::kNone;
  QOBS_THROW(InvalidArgument, "actorder: '", s, "' is not one of group, weight, dynamic, static (R1.1.4)");
}

ActOrder actorder_canonical(ActOrder a) {
  if (a == ActOrder::kDynamic) return ActOrder::kGroup;
  if (a == ActOrder::kStatic) return ActOrder::kWeight;
  return a;
}
bool actorder_equivalent(ActOrder a, ActOrder b) { return actorder_canonical(a) == actorder_canonical(b); }

double kwarg_as_double(const std::string& name, const KwargValue& v) {
  if (const auto* b = std::get_if<bool>(&v)) return *b ? 1.0 : 0.0;
  if (const auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&v)) return *d;
  QOBS_THROW(InvalidArgument, "observer_kwargs['", name, "']: expected a number, got '", std::get<std::string>(v),
             "' (R6.7.1)");
}

std::array<int64_t, 2> parse_block_structure(std::string_view text) {
  std::vector<int64_t> parts;
  std::string cur;
  auto flush = [&]() {
    QOBS_CHECK(!cur.empty(), InvalidArgument, "block_structure '", text,
               "': expected \"AxB\" with two positive integers (R1.2.2)");
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(cur, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    QOBS_CHECK(used == cur.size(), InvalidArgument, "block_structure '", text, "': '", cur,
               "' is not an integer (R1.2.2)");
    parts.push_back(v);
    cur.clear();
  };
  for (char c : text) {
    if (c == 'x' || c == 'X') flush();
    else cur.push_back(c);
  }
  flush();
  QOBS_CHECK(parts.size() == 2 && parts[0] > 0 && parts[1] > 0, InvalidArgument, "block_structure '", text,
             "': must be two positive integers \"AxB\" (R1.2.2)");
  return {parts[0], parts[1]};
}

bool QuantizationArgs::is_mx() const {
  return (num_bits == 4 || num_bits == 6 || num_bits == 8) && type == QuantType::kFloat && group_size &&
         *group_size == 32 && scale_dtype && *scale_dtype == DType::kU8;
}

std::pair<float, float> QuantizationArgs::q_range() const {
  if (type == QuantType::kInt) {
    QOBS_CHECK(num_bits >= 1 && num_bits <= 32, InvalidArgument, "num_bits ", num_bits, " out of range for int (R2.1)");
    const double hi = std::ldexp(1.0, num_bits - 1);
    return {static_cast<float>(-hi), static_cast<float>(hi - 1)};
  }
  if (num_bits == 8) return {-kFp8E4M3Max, kFp8E4M3Max};
  if (num_bits == 4) return {-kFp4E2M1Max, kFp4E2M1Max};
  if (num_bits == 6) return {-kFp6E2M3Max, kFp6E2M3Max};
  QOBS_THROW(NotImplementedError, "float quantization with num_bits=", num_bits,
             " is not supported: only 4 (FP4 E2M1), 6 (FP6 E2M3) and 8 (FP8 E4M3) (R4.1 step 2)");
}

DType QuantizationArgs::pytorch_dtype() const {
  if (type == QuantType::kFloat) {
    if (num_bits == 8) return DType::kF8E4M3;
    QOBS_THROW(NotImplementedError, "type float with num_bits=", num_bits,
               " has no storage dtype; give zp_dtype explicitly (R1.3.2)");
  }
  if (num_bits <= 8) return DType::kI8;
  if (num_bits <= 16) return DType::kI16;
  return DType::kI32;
}

Strategy QuantizationArgs::get_strategy() const {
  QOBS_CHECK(strategy.has_value(), PreconditionError,
             "QuantizationArgs: strategy not inferred; call validated() (R1.3.1)");
  return *strategy;
}

QuantizationArgs QuantizationArgs::validated() const {
  QuantizationArgs a = *this;
  // R1.2.2 field checks
  QOBS_CHECK(!a.group_size || *a.group_size >= -1, InvalidArgument, "group_size ", *a.group_size,
             " is invalid: must be -1, 0 or positive (R1.2.2)");
  if (a.block_structure)
    QOBS_CHECK((*a.block_structure)[0] > 0 && (*a.block_structure)[1] > 0, InvalidArgument, "block_structure [",
               (*a.block_structure)[0], ", ", (*a.block_structure)[1], "] must be two positive integers (R1.2.2)");
  // R1.3.1 step 1
  if (!a.strategy) {
    if (!a.group_size) a.strategy = Strategy::kTensor;
    else if (*a.group_size > 0) a.strategy = Strategy::kGroup;
    else if (*a.group_size == -1) a.strategy = Strategy::kChannel;
    else QOBS_THROW(InvalidArgument, "group_size 0 without a strategy cannot be inferred (R1.3.1-1)");
  }
  const Strategy s = *a.strategy;
  // step 2
  QOBS_CHECK(!(s == Strategy::kToken && a.dynamic == Dynamic::kFalse), InvalidArgument,
             "strategy token requires dynamic quantization: static token quantization is impossible (R1.3.1-2)");
  // step 3
  if (is_group_like(s))
    QOBS_CHECK(a.group_size && *a.group_size > 0, InvalidArgument, "strategy ", to_string(s),
               " requires a positive group_size, got ", a.group_size ? std::to_string(*a.group_size) : "null",
               " (R1.3.1-3)");
  // step 4
  if (a.group_size && *a.group_size > 0)
    QOBS_CHECK(is_group_like(s), InvalidArgument, "group_size ", *a.group_size, " given with strategy ", to_string(s),
               ": only group and tensor_group take a group_size (R1.3.1-4)");
  // step 5
  if (s == Strategy::kBlock)
    QOBS_CHECK(a.block_structure.has_value(), InvalidArgument, "strategy block requires block_structure (R1.3.1-5)");
  else
    QOBS_CHECK(!a.block_structure.has_value(), InvalidArgument, "block_structure given with strategy ", to_string(s),
               ": only block takes one (R1.3.1-5)");
  // step 6
  if (actorder_canonical(a.actorder) == ActOrder::kGroup)
    QOBS_CHECK(is_group_like(s), InvalidArgument, "actorder ", to_string(a.actorder),
               " requires strategy group or tensor_group, got ", to_string(s), " (R1.3.1-6)");
  // step 7
  if (a.dynamic != Dynamic::kFalse) {
    QOBS_CHECK(s == Strategy::kToken || s == Strategy::kTensor || s == Strategy::kTensorGroup || s == Strategy::kGroup,
               InvalidArgument, "dynamic quantization supports strategies token, tensor, tensor_group, group; got ",
               to_string(s), " (R1.3.1-7)");
    if (a.dynamic == Dynamic::kLocal) {
      QOBS_CHECK(s == Strategy::kTensorGroup, InvalidArgument, "dynamic \"local\" requires strategy tensor_group, got ",
                 to_string(s), " (R1.3.1-7)");
      if (!a.observer) {
        a.observer = "minmax";
        a.observer_inferred = true;
      }
    } else {
      a.observer.reset();
      a.observer_inferred = false;
    }
  } else if (!a.observer) {
    // step 8
    a.observer = "memoryless_minmax";
    a.observer_inferred = true;
  }
  // step 9
  if (!a.zp_dtype) {
    a.zp_dtype = a.is_fp4() || a.is_fp6() ? DType::kF8E4M3 : a.pytorch_dtype();
    a.zp_dtype_inferred = true;
  }
  return a;
}

bool operator==(const QuantizationArgs& a, const QuantizationArgs& b) {
  return a.num_bits == b.num_bits && a.type == b.type && a.symmetric == b.symmetric && a.group_size == b.group_size &&
         a.strategy == b.strategy && a.block_structure == b.block_structure && a.dynamic == b.dynamic &&
         actorder_equivalent(a.actorder, b.actorder) && a.scale_dtype == b.scale_dtype && a.zp_dtype == b.zp_dtype &&
         a.observer == b.observer && a.observer_kwargs == b.observer_kwargs;
}

}  // namespace qobs
