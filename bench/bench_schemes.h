// Quantization schemes the benchmarks and the reference comparison use, by name, so
// that bench/kernels_bench.cc, bench/bench_driver.cc and bench/compare_reference.py
// agree on what "int4_g128" or "nvfp4" means.
#pragma once

#include <stdexcept>
#include <string>

#include "qobs/qobs.h"

namespace qobs::bench {

/// int4_g128: INT4 symmetric, group 128 (W4A16); int4_g128_asym: the same asymmetric. nvfp4: FP4 E2M1 tensor_group 16 with
/// fp8 scales (NVFP4). int8_channel: INT8 symmetric per channel. fp8_channel: FP8
/// per channel. int8_tensor / fp8_tensor: one scale per tensor (static activations, W8A8).
inline QuantizationArgs scheme_args(const std::string& name) {
  QuantizationArgs a;
  if (name == "int4_g128" || name == "int4_g128_asym") {
    a.num_bits = 4;
    a.strategy = Strategy::kGroup;
    a.group_size = 128;
    a.symmetric = name == "int4_g128";
  } else if (name == "nvfp4") {
    a.num_bits = 4;
    a.type = QuantType::kFloat;
    a.strategy = Strategy::kTensorGroup;
    a.group_size = 16;
    a.scale_dtype = DType::kF8E4M3;
  } else if (name == "int8_channel") {
    a.num_bits = 8;
    a.strategy = Strategy::kChannel;
  } else if (name == "fp8_channel") {
    a.num_bits = 8;
    a.type = QuantType::kFloat;
    a.strategy = Strategy::kChannel;
  } else if (name == "int8_tensor") {
    a.num_bits = 8;
    a.strategy = Strategy::kTensor;
  } else if (name == "fp8_tensor") {
    a.num_bits = 8;
    a.type = QuantType::kFloat;
    a.strategy = Strategy::kTensor;
  } else {
    throw std::invalid_argument(
        "unknown scheme '" + name +
        "' (int4_g128, int4_g128_asym, nvfp4, int8_channel, fp8_channel, int8_tensor, fp8_tensor)");
  }
  return a.validated();
}

}  // namespace qobs::bench
