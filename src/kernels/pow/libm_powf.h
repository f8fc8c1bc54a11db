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
// coefficients close to the Taylor ones) and replays the algorithm -- but only when the
// powf implementation dispatched in this process (glibc picks __powf_fma or the unfused
// __powf_sse2 by CPU and GLIBC_TUNABLES) is byte for byte a build that was verified
// exhaustively (its fingerprint is listed in libm_powf.cc). A probe set cannot be
// trusted: the fused and unfused builds agree on all but a few inputs in a million.
// Otherwise (another libm, another build or variant, or QOBS_POWF=libm in the
// environment) the kernels call std::pow per lane.
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

/// libm's powf as found in this process, before any decision to trust it.
struct LocatedPowf {
  PowfTables tables{};
  bool found = false;        ///< tables and the dispatched code located
  uint64_t fingerprint = 0;  ///< hash of the dispatched code, the tables and their distance
  bool verified = false;     ///< fingerprint is one of the exhaustively verified builds
};
/// Thread-safe; computed once.
const LocatedPowf& located_libm_powf();

/// The tables when the replay may stand in for std::pow: located, verified, and
/// neither QOBS_POWF=libm (read once) nor force_libm_powf_for_testing(true) in force;
/// nullptr otherwise. Thread-safe.
const PowfTables* libm_powf_tables();

/// Scalar replay of libm's powf for x >= 0 (finite or +inf excluded) and finite y > 0
/// with the located tables; equals std::pow(x, y) bit for bit whenever
/// libm_powf_tables() is non-null and powf_matches(y) holds.
float powf_replay(float x, float y, const PowfTables& t);

/// True when the vector pow may be used for exponent y: libm_powf_tables() is non-null
/// and y is finite and positive (the domain the replay reproduces).
bool powf_matches(float y);

/// Test hook: true makes libm_powf_tables() return nullptr (the std::pow fallback).
void force_libm_powf_for_testing(bool force);

}  // namespace qobs::kernels::detail
