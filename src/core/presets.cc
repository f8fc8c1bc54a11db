// The preset schemes of R1.5 (W4A16, NVFP4, FP8_BLOCK, ...): preset_scheme and the
// names it accepts.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/text.h"
#include "qobs/args.h"

namespace qobs {

namespace {

QuantizationArgs int_weights(int bits, bool symmetric, std::optional<int64_t> group, Strategy strategy) {
  QuantizationArgs a;
  a.num_bits = bits;
  a.type = QuantType::kInt;
  a.symmetric = symmetric;
  a.group_size = group;
  a.strategy = strategy;
  return a;
}

QuantizationArgs dyn_token(int bits, QuantType type) {
  QuantizationArgs a;
  a.num_bits = bits;
  a.type = type;
  a.strategy = Strategy::kToken;
  a.dynamic = Dynamic::kTrue;
  return a;
}

QuantizationArgs fp_args(int bits, int64_t group, Strategy strategy, DType scale_dtype) {
  QuantizationArgs a;
  a.num_bits = bits;
  a.type = QuantType::kFloat;
  a.group_size = group;
  a.strategy = strategy;
  a.scale_dtype = scale_dtype;
  a.zp_dtype = scale_dtype;
  return a;
}

const std::vector<std::string>& wxay_names() {
  static const std::vector<std::string> k{"W2A4",  "W2A8", "W2A16", "W3A4", "W3A8",  "W3A16", "W4A4",  "W4A8",
                                          "W4A16", "W5A8", "W5A16", "W6A8", "W6A16", "W7A8",  "W7A16", "W8A16"};
  return k;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names{"UNQUANTIZED"};
  for (const auto& n : wxay_names()) names.push_back(n);
  for (const char* n : {"W4A16_ASYM", "W8A8", "INT8", "W4AFP8", "FP8", "FP8_DYNAMIC", "FP8_BLOCK", "NVFP4A16", "NVFP4",
                        "MXFP4A16", "MXFP4", "MXFP4XFP8", "MXFP6A16", "MXFP6A8", "MXFP8A16", "MXFP8"})
    names.emplace_back(n);
  return names;
}

bool is_preset_name(std::string_view name) {
  const std::string u = ascii_upper(name);
  for (const auto& n : preset_names())
    if (n == u) return true;
  return false;
}

QuantizationScheme preset_scheme(std::string_view name, std::vector<std::string> targets) {
  const std::string u = ascii_upper(name);
  QuantizationScheme s;
  s.targets = std::move(targets);
  if (u == "UNQUANTIZED") return s;
  if (std::find(wxay_names().begin(), wxay_names().end(), u) != wxay_names().end()) {
    const int wb = u[1] - '0';
    const int ab = std::stoi(u.substr(3));
    s.weights = int_weights(wb, true, 128, Strategy::kGroup);
    if (ab != 16) s.input_activations = dyn_token(ab, QuantType::kInt);
  } else if (u == "W4A16_ASYM") {
    s.weights = int_weights(4, false, 128, Strategy::kGroup);
  } else if (u == "W8A8" || u == "INT8") {
    s.weights = int_weights(8, true, std::nullopt, Strategy::kChannel);
    s.input_activations = dyn_token(8, QuantType::kInt);
  } else if (u == "W4AFP8") {
    s.weights = int_weights(4, true, 128, Strategy::kGroup);
    s.input_activations = dyn_token(8, QuantType::kFloat);
  } else if (u == "FP8") {
    QuantizationArgs w;
    w.num_bits = 8;
    w.type = QuantType::kFloat;
    w.strategy = Strategy::kTensor;
    s.weights = w;
    QuantizationArgs i = w;
    i.observer = "static_minmax";
    s.input_activations = i;
  } else if (u == "FP8_DYNAMIC") {
    QuantizationArgs w;
    w.num_bits = 8;
    w.type = QuantType::kFloat;
    w.strategy = Strategy::kChannel;
    s.weights = w;
    s.input_activations = dyn_token(8, QuantType::kFloat);
  } else if (u == "FP8_BLOCK") {
    QuantizationArgs w;
    w.num_bits = 8;
    w.type = QuantType::kFloat;
    w.strategy = Strategy::kBlock;
    w.block_structure = std::array<int64_t, 2>{128, 128};
    s.weights = w;
    QuantizationArgs i;
    i.num_bits = 8;
    i.type = QuantType::kFloat;
    i.strategy = Strategy::kGroup;
    i.group_size = 128;
    i.dynamic = Dynamic::kTrue;
    s.input_activations = i;
  } else if (u == "NVFP4A16" || u == "NVFP4") {
    s.weights = fp_args(4, 16, Strategy::kTensorGroup, DType::kF8E4M3);
    if (u == "NVFP4") {
      QuantizationArgs i = fp_args(4, 16, Strategy::kTensorGroup, DType::kF8E4M3);
      i.dynamic = Dynamic::kLocal;
      i.observer = "static_minmax";
      s.input_activations = i;
    }
  } else if (u == "MXFP4A16" || u == "MXFP4") {
    s.weights = fp_args(4, 32, Strategy::kGroup, DType::kU8);
    if (u == "MXFP4") {
      QuantizationArgs i = fp_args(4, 32, Strategy::kGroup, DType::kU8);
      i.dynamic = Dynamic::kTrue;
      s.input_activations = i;
    }
  } else if (u == "MXFP4XFP8") {
    // MXFP4 weights with FP8 inputs, dynamic per group of 128 with float scales (not MX)
    s.weights = fp_args(4, 32, Strategy::kGroup, DType::kU8);
    QuantizationArgs i;
    i.num_bits = 8;
    i.type = QuantType::kFloat;
    i.group_size = 128;
    i.strategy = Strategy::kGroup;
    i.dynamic = Dynamic::kTrue;
    s.input_activations = i;
  } else if (u == "MXFP6A16" || u == "MXFP6A8") {
    s.weights = fp_args(6, 32, Strategy::kGroup, DType::kU8);
    if (u == "MXFP6A8") {
      // MXFP8 inputs: FP8, dynamic, group 32 with E8M0 scales
      QuantizationArgs i = fp_args(8, 32, Strategy::kGroup, DType::kU8);
      i.dynamic = Dynamic::kTrue;
      s.input_activations = i;
    }
  } else if (u == "MXFP8A16" || u == "MXFP8") {
    QuantizationArgs w;
    w.num_bits = 8;
    w.type = QuantType::kFloat;
    w.group_size = 32;
    w.strategy = Strategy::kGroup;
    w.scale_dtype = DType::kU8;
    w.zp_dtype = DType::kU8;
    s.weights = w;
    if (u == "MXFP8") {
      QuantizationArgs i = w;
      i.dynamic = Dynamic::kTrue;
      s.input_activations = i;
    }
  } else {
    QOBS_THROW(UnknownName, "unknown preset scheme '", name, "' (R1.5.1)");
  }
  return s.validated();
}

}  // namespace qobs
