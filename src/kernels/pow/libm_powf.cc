#include "kernels/pow/libm_powf.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace qobs::kernels::detail {

namespace {

uint64_t bits64(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}
double from_bits64(uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

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
      if (from_bits64(t[32]) == 0x1.8p+47 && std::fabs(c[2] - ln2) < 1e-6 && std::fabs(c[1] - ln2 * ln2 / 2) < 1e-3 &&
          std::fabs(c[0] - ln2 * ln2 * ln2 / 6) < 1e-3)
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

/// Bytes of the dispatched powf hashed into the fingerprint: the whole function (its
/// fast path, the subnormal and over/underflow paths) and some padding after it.
constexpr std::size_t kCodeWindow = 1024;

/// Builds of libm whose dispatched powf equals powf_replay for every input: the
/// replay is the same sequence of operations (fused where that code fuses) on the same
/// constants, read from the disassembly, and LibmPowf.DISABLED_ExhaustiveCheckOfDispatchedPowf
/// compared all 2^31 non-negative x for several y. A sample cannot tell a fused from
/// an unfused build (they differ on a few x in a million), so nothing else is trusted.
struct VerifiedPowf {
  uint64_t fingerprint;
  const char* build;
};
constexpr VerifiedPowf kVerifiedPowf[] = {
    // x86-64, CPUs with FMA; every finite x >= 0 for y = 2.4, 3.7, 0.5 (the unfused
    // __powf_sse2 of the same build is not listed: the vector replay always fuses)
    {0x301ef3624b4b7f16ull, "Debian glibc 2.36-9+deb12u14, __powf_fma"},
};

void fnv1a(uint64_t& h, const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
}

LocatedPowf locate() {
  LocatedPowf loc;
  volatile float warm = std::pow(2.0f, 0.5f);  // make sure libm is mapped
  (void)warm;
  std::vector<Segment> segs;
  dl_iterate_phdr(collect_libm_segments, &segs);
  const uint64_t* e = find_exp2_table(segs);
  const double* l = find_log2_table(segs);
  // The implementation the IFUNC resolver picked for this process: what std::pow(float,
  // float) calls, and what the fingerprint must identify.
  const auto* code = reinterpret_cast<const unsigned char*>(dlsym(RTLD_DEFAULT, "powf"));
  bool code_mapped = false;
  for (const Segment& sg : segs)
    code_mapped = code_mapped || (code >= sg.base && code + kCodeWindow <= sg.base + sg.size);
  if (!e || !l || !code_mapped) return loc;
  loc.found = true;
  loc.tables.log2_tab = l;
  loc.tables.log2_poly = l + 32;
  loc.tables.exp2_tab = e;
  loc.tables.exp2_shift = from_bits64(e[32]);
  loc.tables.exp2_poly = reinterpret_cast<const double*>(e + 33);
  uint64_t h = 0xcbf29ce484222325ull;
  fnv1a(h, code, kCodeWindow);
  // the code addresses its constants relative to itself: same bytes, same distances
  const int64_t dl = reinterpret_cast<const unsigned char*>(l) - code;
  const int64_t de = reinterpret_cast<const unsigned char*>(e) - code;
  fnv1a(h, &dl, sizeof dl);
  fnv1a(h, &de, sizeof de);
  fnv1a(h, l, 37 * sizeof(double));
  fnv1a(h, e, 36 * sizeof(uint64_t));
  loc.fingerprint = h;
  for (const VerifiedPowf& v : kVerifiedPowf) loc.verified = loc.verified || v.fingerprint == h;
  return loc;
}

std::atomic<bool> g_force_libm{false};

}  // namespace

const LocatedPowf& located_libm_powf() {
  static const LocatedPowf loc = locate();
  return loc;
}

const PowfTables* libm_powf_tables() {
  static const bool env_libm = [] {
    const char* v = std::getenv("QOBS_POWF");
    return v != nullptr && std::string(v) == "libm";
  }();
  if (env_libm || g_force_libm.load(std::memory_order_relaxed)) return nullptr;
  const LocatedPowf& loc = located_libm_powf();
  return loc.found && loc.verified ? &loc.tables : nullptr;
}

bool powf_matches(float y) {
  // the replay covers libm's whole fast path for y > 0 finite (zero, inf and NaN
  // exponents take libm's special paths)
  return libm_powf_tables() != nullptr && y > 0 && std::isfinite(y);
}

void force_libm_powf_for_testing(bool force) { g_force_libm.store(force, std::memory_order_relaxed); }

}  // namespace qobs::kernels::detail
