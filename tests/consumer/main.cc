// Calibrates a small weight through the installed public API (qobs.h only) and checks
// the results against values worked out by hand from the rules:
//   int8, symmetric, per channel (row) weights. R4.1 step 3: scale = amax / 127.5
//   with amax = max |w| of the row, zero point 0.
//     row 0 [255, -3, 1, 0.5]:     amax 255   -> scale 2
//     row 1 [-63.75, 10, 0, 2]:    amax 63.75 -> scale 0.5
//   R5.1.2 quantize: round half to even of x / scale, clamped to [-128, 127]:
//     row 0: 127.5 -> 128 -> 127, -1.5 -> -2, 0.5 -> 0, 0.25 -> 0
//     row 1: -127.5 -> -128, 20, 0, 4
//   R8.3.1 pack (8 bits): u = q + 128, element j in bits [8j, 8j + 8) of the row's word:
//     row 0 u = [255, 126, 128, 128] -> 0x80807EFF; row 1 u = [0, 148, 128, 132] -> 0x84809400
#include <cstdint>
#include <cstdio>
#include <vector>

#include "qobs/qobs.h"

namespace {

int failures = 0;

void expect(bool ok, const char* what, double got, double want) {
  if (ok) return;
  std::printf("FAIL %s: got %.17g, want %.17g\n", what, got, want);
  ++failures;
}

}  // namespace

int main() {
  const std::vector<float> w = {255.0f, -3.0f, 1.0f, 0.5f, -63.75f, 10.0f, 0.0f, 2.0f};
  const qobs::TensorView view(w.data(), qobs::DType::kF32, {2, 4});
  qobs::QuantizationArgs channel;
  channel.num_bits = 8;
  channel.symmetric = true;
  channel.strategy = qobs::Strategy::kChannel;
  const qobs::QuantizationArgs args = channel.validated();

  auto observer = qobs::load_observer("memoryless_minmax", "weight", args);
  observer->observe(view);
  const qobs::QParams qp = observer->get_qparams();
  expect(qp.scale.numel() == 2, "scale elements", static_cast<double>(qp.scale.numel()), 2);
  expect(qp.scale.get(0) == 2.0, "scale[0]", qp.scale.get(0), 2.0);
  expect(qp.scale.get(1) == 0.5, "scale[1]", qp.scale.get(1), 0.5);
  expect(qp.zero_point.get(0) == 0.0 && qp.zero_point.get(1) == 0.0, "zero point", qp.zero_point.get(0), 0.0);

  const qobs::Tensor q = qobs::quantize(view, qp.scale, &qp.zero_point, args, nullptr, nullptr, qobs::DType::kI8);
  const double want_q[] = {127, -2, 0, 0, -128, 20, 0, 4};
  for (int64_t i = 0; i < 8; ++i) expect(q.get(i) == want_q[i], "quantized value", q.get(i), want_q[i]);

  const qobs::Tensor packed = qobs::pack_int_rows(q, 8, "weight");
  const double want_words[] = {static_cast<double>(static_cast<int32_t>(0x80807EFFu)),
                               static_cast<double>(static_cast<int32_t>(0x84809400u))};
  for (int64_t i = 0; i < 2; ++i) expect(packed.get(i) == want_words[i], "packed word", packed.get(i), want_words[i]);

  if (failures == 0) std::printf("qobs consumer: ok\n");
  return failures == 0 ? 0 : 1;
}
