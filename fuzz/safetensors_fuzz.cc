// libFuzzer target for the safetensors parser (include/qobs/io.h). Any input must either
// parse into tensors whose bytes lie inside the buffer, or throw qobs::IoError; AddressSanitizer
// turns every out-of-bounds read into a crash, and any other exception escapes and is
// reported by libFuzzer as a crash too.
#include <cstddef>
#include <cstdint>
#include <span>

#include "qobs/error.h"
#include "qobs/io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const qobs::SafetensorsFile f = qobs::SafetensorsFile::from_buffer(std::span<const uint8_t>(data, size), "fuzz");
    uint64_t sum = 0;
    for (const qobs::TensorInfo& t : f.tensors()) {
      const std::span<const uint8_t> b = f.bytes(t);
      if (b.size() != t.nbytes() || (b.size() && (b.data() < data || b.data() + b.size() > data + size)))
        __builtin_trap();
      for (uint8_t v : b) sum += v;  // touch every byte the header claims
      qobs::Tensor scratch;
      const qobs::TensorView v = f.view(t, scratch);
      if (v.numel() > 0) sum += static_cast<uint64_t>(v.get(v.numel() - 1) != 0);
    }
    if (sum == 0xdeadbeefcafeull) return 1;  // keeps the loop from being optimized away
  } catch (const qobs::IoError&) {
  }
  return 0;
}
