#include "test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdlib.h>

#include "qobs/formats.h"

namespace qobs::testing {

namespace {

std::vector<uint8_t> base64_decode(const std::string& in) {
  static const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<uint8_t> out;
  uint32_t buf = 0;
  int bits = 0;
  for (char c : in) {
    if (c == '=') break;
    const auto pos = chars.find(c);
    if (pos == std::string::npos) continue;
    buf = (buf << 6) | static_cast<uint32_t>(pos);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>((buf >> bits) & 0xFF));
    }
  }
  return out;
}

}  // namespace

Tensor Golden::tensor(const std::string& id) const {
  const auto& t = doc.at("tensors").at(id);
  const DType dt = parse_dtype(t.at("dtype").get<std::string>());
  const Shape shape = t.at("shape").get<Shape>();
  const auto bytes = base64_decode(t.at("b64").get<std::string>());
  return Tensor::from_bytes(dt, shape, bytes.data(), bytes.size());
}

std::optional<Tensor> Golden::maybe(const nlohmann::json& j) const {
  if (j.is_null()) return std::nullopt;
  return tensor(j.get<std::string>());
}

std::optional<Golden> load_golden(const std::string& name) {
  std::ifstream f(std::string(QOBS_GOLDEN_DIR) + "/" + name);
  if (!f) return std::nullopt;
  Golden g;
  g.doc = nlohmann::json::parse(f);
  return g;
}

QuantizationArgs args_from_golden(const nlohmann::json& j) { return QuantizationArgs::from_json(j.dump()); }

QuantizationArgs case_args_from_golden(const nlohmann::json& c) {
  QuantizationArgs a = args_from_golden(c["args"]);
  if (c.contains("args_zp_dtype") && c["args_zp_dtype"].is_string())
    a.zp_dtype = parse_dtype(c["args_zp_dtype"].get<std::string>());
  return a;
}

std::vector<double> fp6_grid_values(int64_t n, uint32_t seed) {
  static const double t[] = {0.0625, 0.1875, 0.9375, 1.0625, 1.9375, 2.125, 2.375, 3.875, 4.25, 4.75, 7.25,
                             7.5,    7.75,   8.0,    0.0,    -0.0,   0.125, 1.875, 3.75,  6.5,  5.25, 0.4375};
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::size_t g = i / 16;
    const double m = t[(i * 7 + seed) % std::size(t)];
    v[i] =
        (i % 3 == 1 ? -1.0 : 1.0) * (g % 2 == 0 ? std::min(m, 7.5) : m) * std::ldexp(1.0, -4 - static_cast<int>(g % 3));
  }
  return v;
}

int64_t ulp_distance(DType dt, double a, double b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b)) return INT64_MAX;
  auto ordinal = [&](double v) -> int64_t {
    int64_t bits;
    if (dt == DType::kF32) {
      int32_t b32;
      const float f = static_cast<float>(v);
      std::memcpy(&b32, &f, 4);
      bits = b32;
      return bits < 0 ? INT32_MIN - bits : bits;
    }
    uint16_t h = dt == DType::kBF16 ? float_to_bf16(static_cast<float>(v)) : double_to_f16(v);
    int16_t s = static_cast<int16_t>(h);
    return s < 0 ? INT16_MIN - s : s;
  };
  return std::llabs(ordinal(a) - ordinal(b));
}

std::string describe_difference(const Tensor& e, const Tensor& a) {
  std::ostringstream os;
  if (e.dtype() != a.dtype())
    os << "dtype " << dtype_name(a.dtype()) << " != expected " << dtype_name(e.dtype()) << "; ";
  if (e.shape() != a.shape()) {
    os << "shape " << shape_str(a.shape()) << " != expected " << shape_str(e.shape());
    return os.str();
  }
  int shown = 0, diffs = 0;
  for (int64_t i = 0; i < e.numel(); ++i) {
    const double x = e.get(i), y = a.get(i);
    const bool same = (std::isnan(x) && std::isnan(y)) || (x == y && std::signbit(x) == std::signbit(y));
    if (!same) {
      ++diffs;
      if (shown++ < 5) os << "[" << i << "] " << y << " != expected " << x << "; ";
    }
  }
  if (diffs) os << diffs << " of " << e.numel() << " elements differ";
  return os.str();
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/qobs_test_XXXXXX";
  const char* made = mkdtemp(tmpl);
  if (!made) throw std::runtime_error("mkdtemp failed");
  path = made;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

}  // namespace qobs::testing
