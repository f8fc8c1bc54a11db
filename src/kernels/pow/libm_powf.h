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

#include <cmath>
#include <cstdint>
#include <cstring>

#include "qobs/host_device.h"

namespace qobs::kernels::detail {

/// Constants of libm's powf: log2 part (16 (invc, logc) pairs + 5 polynomial
/// coefficients) and exp2 part (32 table words, the rounding shift, 3 coefficients).
struct PowfTables {
  const double* log2_tab;    ///< 32 doubles: invc_0, logc_0, invc_1, ...
  const double* log2_poly;   ///< A[0..4], A[4] ~ 1/ln2
  const uint64_t* exp2_tab;  ///< 32 words
  double exp2_shift;         ///< 0x1.8p+52 / 32
  const double* exp2_poly;   ///< C[0..2], C[2] ~ ln2
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
/// libm_powf_tables() is non-null and powf_matches(y) holds. Host and device code
/// (QOBS_HD): the CUDA kernels run it on device copies of the tables, with the
/// explicit fused multiply-adds libm's build has and no others.
QOBS_HD inline float powf_replay(float x, float y, const PowfTables& t) {
  auto bits32 = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  auto from_bits32 = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  };
  auto bits64 = [](double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    return u;
  };
  auto from_bits64 = [](uint64_t u) {
    double d;
    std::memcpy(&d, &u, 8);
    return d;
  };
  uint32_t ix = bits32(x);
  if (ix - 0x00800000u >= 0x7f800000u - 0x00800000u) {
    if (x == 0.0f) return 0.0f;  // y > 0
    // subnormal: normalize so the biased exponent goes negative
    ix = bits32(x * 0x1p23f) & 0x7fffffffu;
    ix -= 23u << 23;
  }
  // x = 2^k z with z in [0x3f330000, 2 * 0x3f330000) as float; c_i near the centre of
  // the i-th of 16 sub-intervals; log2 x = log1p(z/c - 1)/ln2 + log2 c + k.
  const uint32_t tmp = ix - 0x3f330000u;
  const int i = static_cast<int>((tmp >> 19) % 16);
  const uint32_t top = tmp & 0xff800000u;
  const uint32_t iz = ix - top;
  const int k = static_cast<int32_t>(top) >> 23;
  const double invc = t.log2_tab[2 * i], logc = t.log2_tab[2 * i + 1];
  const double z = from_bits32(iz);
  const double* A = t.log2_poly;
  // libm is built with contraction: every a*b+c below is one fused operation.
  const double r = std::fma(z, invc, -1.0);
  const double y0 = logc + static_cast<double>(k);
  const double r2 = r * r;
  const double p1 = std::fma(A[0], r, A[1]);
  const double p2 = std::fma(A[2], r, A[3]);
  const double r4 = r2 * r2;
  double q = std::fma(A[4], r, y0);
  q = std::fma(p2, r2, q);
  const double logx = std::fma(p1, r4, q);
  const double ylogx = static_cast<double>(y) * logx;
  if (ylogx > 0x1.fffffffd1d571p+6) return HUGE_VALF;  // overflow
  if (ylogx <= -150.0) return 0.0f;                    // underflow
  // 2^ylogx = 2^(k/32) * 2^r, |r| <= 1/64
  double kd = ylogx + t.exp2_shift;
  const uint64_t ki = bits64(kd);
  kd -= t.exp2_shift;
  const double rr = ylogx - kd;
  const uint64_t w = t.exp2_tab[ki % 32] + (ki << 47);
  const double s = from_bits64(w);
  const double* C = t.exp2_poly;
  const double zz = std::fma(C[0], rr, C[1]);
  const double rr2 = rr * rr;
  double v = std::fma(C[2], rr, 1.0);
  v = std::fma(zz, rr2, v);
  return static_cast<float>(v * s);
}

/// True when the vector pow may be used for exponent y: libm_powf_tables() is non-null
/// and y is finite and positive (the domain the replay reproduces).
bool powf_matches(float y);

/// Test hook: true makes libm_powf_tables() return nullptr (the std::pow fallback).
void force_libm_powf_for_testing(bool force);

}  // namespace qobs::kernels::detail
