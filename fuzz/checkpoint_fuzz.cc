// libFuzzer target for checkpoint folders as the CLI reads them: the input is unpacked
// into a folder (config.json, model.safetensors.index.json, shards), which then goes
// through Checkpoint::open, `qobs inspect --tensors`, reading every tensor, target
// planning, and either a dry-run `qobs quantize` (plain checkpoints) or `qobs
// dequantize` (checkpoints whose config.json has a quantization_config).
//
// Input format (fuzz/make_corpus.py writes the seeds):
//   byte 0        options: bits 0-2 pick the scheme (kSchemes), bit 3 opens the file
//                 model.safetensors instead of the folder
//   then records  [file id: 1 byte, index into kFiles modulo its size]
//                 [length: 2 bytes little-endian][content: length bytes, cut at the end]
// A later record for the same file replaces the earlier one.
//
// The library's error types are the expected outcome of bad input; a sanitizer report,
// any other exception, or an inconsistent read (a tensor's bytes not matching its
// header) is a crash.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "qobs/io.h"
#include "qobs/pipeline.h"

namespace {
namespace fs = std::filesystem;

constexpr std::array<std::string_view, 5> kFiles{"config.json", "model.safetensors.index.json", "model.safetensors",
                                                 "model-00001-of-00002.safetensors",
                                                 "model-00002-of-00002.safetensors"};
// Weight-only or dynamic-activation presets, which `qobs quantize` accepts: one per
// packing / scale layout (int packed, int asymmetric, int8 per channel, fp8 per
// channel and block, nvfp4, mxfp4).
constexpr std::array<const char*, 8> kSchemes{"W8A16",       "W4A16",     "W4A16_ASYM", "W8A8",
                                              "FP8_DYNAMIC", "FP8_BLOCK", "NVFP4A16",   "MXFP4A16"};

// One folder per process, reused: the checkpoint in `in`, dequantize output in `out`.
struct Scratch {
  fs::path in, out;
  Scratch() {
    const char* shm = "/dev/shm";
    std::string tmpl = (fs::is_directory(shm) ? std::string(shm) : fs::temp_directory_path().string()) +
                       "/qobs_checkpoint_fuzz_XXXXXX";
    if (!mkdtemp(tmpl.data())) std::abort();
    in = fs::path(tmpl) / "in";
    out = fs::path(tmpl) / "out";
    fs::create_directories(in);
    fs::create_directories(out);
  }
};

void touch_every_tensor(const qobs::Checkpoint& c) {
  uint64_t sum = 0;
  for (std::size_t s = 0; s < c.shards().size(); ++s)
    for (const qobs::TensorInfo& t : c.shards()[s].tensors()) {
      const std::span<const uint8_t> b = c.shards()[s].bytes(t);
      if (b.size() != t.nbytes()) __builtin_trap();
      for (uint8_t v : b) sum += v;
      qobs::Tensor scratch;
      const qobs::TensorView v = c.shards()[s].view(t, scratch);
      if (v.numel() > 0) sum += static_cast<uint64_t>(v.get(v.numel() - 1) != 0);
      const auto where = c.find(t.name);
      if (!where || where->first != s || where->second->name != t.name) __builtin_trap();
    }
  if (sum == 0xdeadbeefcafeull) std::abort();  // keeps the reads from being optimized away
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Scratch dirs;
  if (size == 0) return 0;
  const uint8_t options = data[0];

  std::array<std::optional<std::string>, kFiles.size()> files;
  for (size_t i = 1; i + 3 <= size;) {
    const size_t id = data[i] % kFiles.size();
    const size_t len = std::min<size_t>(data[i + 1] | (size_t{data[i + 2]} << 8), size - i - 3);
    files[id] = std::string(reinterpret_cast<const char*>(data + i + 3), len);
    i += 3 + len;
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dirs.in)) fs::remove_all(e.path(), ec);
  for (size_t id = 0; id < kFiles.size(); ++id)
    if (files[id]) std::ofstream(dirs.in / kFiles[id], std::ios::binary) << *files[id];

  const std::string path = (options & 8) ? (dirs.in / "model.safetensors").string() : dirs.in.string();
  qobs::fuzz::allow_library_errors([&] { (void)qobs::inspect_checkpoint(path, true); });
  bool compressed = false;
  qobs::fuzz::allow_library_errors([&] {
    const qobs::Checkpoint c = qobs::Checkpoint::open(path);
    touch_every_tensor(c);
    (void)qobs::plan_targets(c, {}, {});
    compressed = c.config_json().find("quantization_config") != std::string::npos;
  });
  if (compressed) {
    const std::string out = (dirs.out / "dequantized.safetensors").string();
    qobs::fuzz::allow_library_errors([&] { (void)qobs::dequantize_checkpoint(path, out); });
    fs::remove(out, ec);
  } else {
    qobs::QuantizeOptions o;
    o.model_path = path;
    o.scheme = kSchemes[options & 7];
    o.observer = "memoryless_minmax";  // the cheapest observer: the fuzzer is after the file handling
    o.dry_run = true;
    o.baseline = false;
    qobs::fuzz::allow_library_errors([&] { (void)qobs::quantize_checkpoint(o); });
  }
  return 0;
}
