// Bit parity with std::pow(float, float) for the grid-search error |e|^norm.
//
// The scalar reference evaluates |e|^norm with std::pow in f32 (Arith::pow_abs), i.e.
// the platform libm's powf. glibc (>= 2.28, also musl) computes powf with a table-driven
// log2 / exp2 pair evaluated in double and rounded once to float; that result is not
// always the correctly rounded one, so a different vector pow -- however accurate --
// disagrees with std::pow in a fraction of the cases, and the rounded error sums would
// then occasionally disagree too. The only exact scheme is to evaluate the same
// operations with the same constants. Rather than duplicating libm's tables in this
// repository, qobs reads them from the libm that is loaded in the process (their
// shape is fully determined: 2^(i/32) bit patterns, 1/c with log2(c) pairs, minimax
// coefficients close to the Taylor ones), replays the algorithm on a probe set
// against std::pow, and uses the vector pow only if every probe matches bit for bit.
// Otherwise (another libm, a different build) the kernels call std::pow per lane.
#pragma once

#include <cstdint>

namespace qobs::kernels::detail {

/// Constants of libm's powf: log2 part (16 (invc, logc) pairs + 5 polynomial
/// coefficients) and exp2 part (32 table words, the rounding shift, 3 coefficients).
struct PowfTables {
  const double* log2_tab;   ///< 32 doubles: invc_0, logc_0, invc_1, ...
  const double* log2_poly;  ///< A[0..4], A[4] ~ 1/ln2
  const uint64_t* exp2_tab; ///< 32 words
  double exp2_shift;        ///< 0x1.8p+52 / 32
  const double* exp2_poly;  ///< C[0..2], C[2] ~ ln2
};

/// The located and verified tables, or nullptr when libm's powf could not be matched.
/// Thread-safe; computed once.
const PowfTables* libm_powf_tables();

/// Scalar replay of libm's powf for x >= 0 (finite or +inf excluded) and finite y > 0
/// with the located tables; equals std::pow(x, y) bit for bit whenever
/// libm_powf_tables() is non-null and powf_matches(y) holds.
float powf_replay(float x, float y, const PowfTables& t);

/// True when the vector pow may be used for exponent y: the tables exist and the
/// replay equals std::pow on a probe set spanning every binade for this y (checked
/// once per distinct y, cached).
bool powf_matches(float y);

}  // namespace qobs::kernels::detail
