#include "kernels/simd/libm_powf.h"

#include <link.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace qobs::kernels::detail {

namespace {

uint64_t bits64(double d) { uint64_t u; std::memcpy(&u, &d, 8); return u; }
double from_bits64(uint64_t u) { double d; std::memcpy(&d, &u, 8); return d; }
uint32_t bits32(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float from_bits32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

struct Segment {
  const unsigned char* base;
  std::size_t size;
};

int collect_libm_segments(dl_phdr_info* info, std::size_t, void* out) {
  const std::string name = info->dlpi_name ? info->dlpi_name : "";
  if (name.find("libm.so") == std::string::npos && name.find("libc.musl") == std::string::npos) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    // read-only data lives in a loadable, non-writable segment
    if (ph.p_type == PT_LOAD && !(ph.p_flags & PF_W))
      static_cast<std::vector<Segment>*>(out)->push_back(
          {reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr), ph.p_memsz});
  }
  return 0;
}

/// exp2 table: word i = bits(2^(i/32)) - i * 2^52 / 32, followed by the shift
/// 0x1.8p+52/32 and the three coefficients C ~ (ln2^3/6, ln2^2/2, ln2).
const uint64_t* find_exp2_table(const std::vector<Segment>& segs) {
  uint64_t expect[32];
  for (int i = 0; i < 32; ++i)
    expect[i] = bits64(static_cast<double>(std::exp2l(static_cast<long double>(i) / 32.0L))) -
                (static_cast<uint64_t>(i) << 52) / 32;
  const double ln2 = std::log(2.0);
  for (const Segment& s : segs)
    for (std::size_t off = 0; off + 36 * 8 <= s.size; off += 8) {
      const auto* t = reinterpret_cast<const uint64_t*>(s.base + off);
      bool ok = true;
      for (int i = 0; i < 32 && ok; ++i) ok = t[i] == expect[i];
      if (!ok) continue;
      const double* c = reinterpret_cast<const double*>(t + 33);
      if (from_bits64(t[32]) == 0x1.8p+47 && std::fabs(c[2] - ln2) < 1e-6 &&
          std::fabs(c[1] - ln2 * ln2 / 2) < 1e-3 && std::fabs(c[0] - ln2 * ln2 * ln2 / 6) < 1e-3)
        return t;
    }
  return nullptr;
}

/// log2 table: 16 pairs (invc, logc), invc decreasing from ~1/0.7, logc = log2(1/invc),
/// followed by 5 coefficients of log1p(r)/ln2 ~ (r^5/5 - r^4/4 + r^3/3 - r^2/2 + r)/ln2.
const double* find_log2_table(const std::vector<Segment>& segs) {
  const double il2 = 1.0 / std::log(2.0);
  for (const Segment& s : segs)
    for (std::size_t off = 0; off + 37 * 8 <= s.size; off += 8) {
      const auto* t = reinterpret_cast<const double*>(s.base + off);
      bool ok = t[0] > 1.35 && t[0] < 1.45;
      for (int i = 0; i < 16 && ok; ++i) {
        const double invc = t[2 * i], logc = t[2 * i + 1];
        ok = invc > 0.7 && invc < 1.45 && std::fabs(logc + std::log2(invc)) < 1e-9 && (i == 0 || invc < t[2 * i - 2]);
      }
      if (!ok) continue;
      const double* a = t + 32;
      if (std::fabs(a[4] - il2) < 1e-6 && std::fabs(a[3] + il2 / 2) < 1e-4 && std::fabs(a[2] - il2 / 3) < 1e-2 &&
          std::fabs(a[1] + il2 / 4) < 3e-2 && std::fabs(a[0] - il2 / 5) < 5e-2)
        return t;
    }
  return nullptr;
}

/// Probe inputs: several values in every binade, the subnormals, 0 and 1.
std::vector<float> probe_inputs() {
  std::vector<float> xs{0.0f, 1.0f, 0x1p-149f, 0x1.fffffcp-127f};
  for (int e = -149; e < 128; ++e)
    for (uint32_t m : {0u, 1u, 0x123457u, 0x3fffffu, 0x400001u, 0x5a5a5au, 0x7ffffeu, 0x7fffffu}) {
      const float v = std::ldexp(1.0f + static_cast<float>(m) / 8388608.0f, e);
      if (std::isfinite(v) && v > 0) xs.push_back(v);
    }
  // a dense run where quantization errors live
  for (uint32_t u = bits32(1e-6f); u < bits32(1.0f); u += 9973) xs.push_back(from_bits32(u));
  return xs;
}

bool replay_matches(const PowfTables& t, float y) {
  for (float x : probe_inputs())
    if (bits32(powf_replay(x, y, t)) != bits32(std::pow(x, y))) return false;
  return true;
}

}  // namespace

float powf_replay(float x, float y, const PowfTables& t) {
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
  double p1 = std::fma(A[0], r, A[1]);
  const double p2 = std::fma(A[2], r, A[3]);
  const double r4 = r2 * r2;
  double q = std::fma(A[4], r, y0);
  q = std::fma(p2, r2, q);
  const double logx = std::fma(p1, r4, q);
  const double ylogx = static_cast<double>(y) * logx;
  if (ylogx > 0x1.fffffffd1d571p+6) return INFINITY;  // overflow
  if (ylogx <= -150.0) return 0.0f;                   // underflow
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

const PowfTables* libm_powf_tables() {
  static const PowfTables* tables = []() -> const PowfTables* {
    volatile float warm = std::pow(2.0f, 0.5f);  // make sure libm is mapped
    (void)warm;
    std::vector<Segment> segs;
    dl_iterate_phdr(collect_libm_segments, &segs);
    const uint64_t* e = find_exp2_table(segs);
    const double* l = find_log2_table(segs);
    if (!e || !l) return nullptr;
    static PowfTables t;
    t.log2_tab = l;
    t.log2_poly = l + 32;
    t.exp2_tab = e;
    t.exp2_shift = from_bits64(e[32]);
    t.exp2_poly = reinterpret_cast<const double*>(e + 33);
    // The default norms and a few others must all replay exactly, else trust nothing.
    for (float y : {2.4f, 0.5f, 1.5f, 3.7f})
      if (!replay_matches(t, y)) return nullptr;
    return &t;
  }();
  return tables;
}

bool powf_matches(float y) {
  const PowfTables* t = libm_powf_tables();
  if (!t || !(y > 0) || !std::isfinite(y)) return false;
  static std::mutex mu;
  static std::map<uint32_t, bool> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(bits32(y));
  if (it != cache.end()) return it->second;
  const bool ok = replay_matches(*t, y);
  cache.emplace(bits32(y), ok);
  return ok;
}

}  // namespace qobs::kernels::detail
