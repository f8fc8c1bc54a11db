// Numeric modes (R0.4).
#pragma once

namespace qobs {

/// kParity reproduces the reference's per-operation rounding: every element-wise op on
/// bf16/f16 operands is evaluated in f32 and rounded once to the operand dtype (R0.4b).
/// kWide keeps every intermediate in f32 (f64 for f64 data) and rounds only results that
/// are stored. Parity is the default everywhere; wide is an explicit option.
enum class NumericMode { kParity, kWide };

}  // namespace qobs
