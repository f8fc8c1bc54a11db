// The releases of the reference that qobs reproduces (docs/RULES.md, R0.6): the one
// place in code that names them. Where two releases differ in numbers or in what they
// accept, qobs follows the release named here; the rules say which earlier behaviours
// are not reproduced.
#pragma once

#include <string_view>

namespace qobs {

struct ReferenceVersions {
  /// compressed-tensors: QuantizationArgs, presets, qparam math, fake quantization,
  /// the checkpoint formats and the config.json shape (R1, R2, R4, R5, R8).
  std::string_view compressed_tensors;
  /// llm-compressor: the observers and the calibration glue (R6, R7); run on the
  /// compressed-tensors release above.
  std::string_view llm_compressor;
};

inline constexpr ReferenceVersions kReferenceVersions{"0.20.1", "0.14.0.1"};

}  // namespace qobs
