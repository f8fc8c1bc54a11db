// libFuzzer target for the parsing that the Python package exposes: QuantizationArgs,
// QuantizationScheme and QuantizationConfig from JSON (SPEC R1.2, R1.4, R1.6), and the
// string parsers behind the keyword arguments (dtype, strategy, type, dynamic, actorder,
// block_structure, preset names).
//
// Input format: byte 0 picks the entry point (modulo 4: args, scheme, config, strings),
// the rest is its text. A parsed object is also serialized and parsed again, and its
// derived values (q_range, storage dtype, compression format, ...) are computed.
//
// The library's error types are the expected outcome of bad input; a sanitizer report
// or any other exception (a nlohmann::json type_error, std::out_of_range, ...) is a crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "qobs/args.h"
#include "qobs/dtype.h"

namespace {
using qobs::fuzz::allow_library_errors;

void derived(const qobs::QuantizationArgs& a) {
  allow_library_errors([&] { (void)a.q_range(); });
  allow_library_errors([&] { (void)a.pytorch_dtype(); });
  allow_library_errors([&] { (void)a.is_mx(); });
  for (const auto& kv : a.observer_kwargs)
    allow_library_errors([&] { (void)qobs::kwarg_as_double(kv.first, kv.second); });
  allow_library_errors([&] { (void)qobs::QuantizationArgs::from_json(a.to_json()); });
}

void derived(const qobs::QuantizationScheme& s) {
  for (const auto* a : {&s.weights, &s.input_activations, &s.output_activations})
    if (*a) derived(**a);
  (void)qobs::infer_compression_format(s);
  allow_library_errors([&] { (void)qobs::QuantizationScheme::from_json(s.to_json()); });
}

void strings(std::string_view text) {
  const std::string s(text);
  allow_library_errors([&] { (void)qobs::parse_dtype(s); });
  allow_library_errors([&] { (void)qobs::parse_block_structure(s); });
  allow_library_errors([&] { (void)qobs::parse_strategy(s); });
  allow_library_errors([&] { (void)qobs::parse_quant_type(s); });
  allow_library_errors([&] { (void)qobs::parse_dynamic(s); });
  allow_library_errors([&] { (void)qobs::parse_actorder(s); });
  allow_library_errors([&] {
    if (qobs::is_preset_name(s)) derived(qobs::preset_scheme(s, {s}));
  });
  (void)qobs::module_type_for_ignore(s);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
    case 0:
      allow_library_errors([&] { derived(qobs::QuantizationArgs::from_json(text)); });
      break;
    case 1:
      allow_library_errors([&] { derived(qobs::QuantizationScheme::from_json(text)); });
      break;
    case 2:
      allow_library_errors([&] {
        qobs::QuantizationConfig c = qobs::QuantizationConfig::from_json(text);
        for (const auto& group : c.config_groups) derived(group.second);
        if (c.kv_cache_scheme) derived(*c.kv_cache_scheme);
        (void)c.requires_calibration_data();
        const std::string json = c.to_json();
        c.merge(qobs::QuantizationConfig(c));
        (void)qobs::QuantizationConfig::from_json(json);
      });
      break;
    default:
      strings(text);
  }
  return 0;
}
