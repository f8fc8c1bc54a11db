// The quantize / dequantize / fake_quantize kernels (kernels/qdq) against their plain
// references (the executable specification), bit for bit: every available SIMD level x
// thread counts {1, 2, 3}, shapes around the vector widths (1..65 columns, 4097), every
// strategy (tensor, channel, token, group 1/16/32/128, tensor_group with a global
// scale, block, g_idx orders), x in f32 / bf16 / f16 (f64 once), INT2/4/8 symmetric and
// asymmetric, FP8, NVFP4, MXFP4 and MXFP6 / FP6, both numeric modes (R0.4), and data
// with NaN / Inf, all-equal groups, huge ranges, subnormals, signed zeros and exact
// rounding ties. The CUDA path's element step (qdq_cuda.h) is run on the CPU over every
// element of every case too (tests/kernels/cuda/host_grid.h).
//
// Tolerance policy: none. Results must have the reference's dtype, shape and bytes,
// NaN encodings included; errors must carry the reference's message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/qdq/qdq_call.h"
#include "kernels/qdq/qdq_cuda.h"
#include "kernels/simd/simd_level.h"
#include "qobs/qobs.h"
#include "test_util.h"

namespace qobs::kernels {
namespace {

using qobs::testing::describe_difference;
using qobs::testing::expect_error;

enum class Pattern { kNormal, kNonFinite, kEqual, kHugeRange, kSubnormal, kSignedZeros, kTies };

const char* pattern_name(Pattern p) {
  switch (p) {
    case Pattern::kNormal:
      return "normal";
    case Pattern::kNonFinite:
      return "nan_inf";
    case Pattern::kEqual:
      return "all_equal";
    case Pattern::kHugeRange:
      return "huge";
    case Pattern::kSubnormal:
      return "subnormal";
    case Pattern::kSignedZeros:
      return "signed_zeros";
    case Pattern::kTies:
      return "ties";
  }
  return "?";
}

std::vector<double> make_values(int64_t n, Pattern p, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> nd(0.0, 0.05);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double x = nd(rng);
    switch (p) {
      case Pattern::kNormal:
        break;
      case Pattern::kNonFinite:
        if (i % 11 == 3) x = NAN;
        else if (i % 13 == 5) x = (i % 2) ? INFINITY : -INFINITY;
        else if (i % 17 == 7) x = -NAN;
        break;
      case Pattern::kEqual:
        x = 0.375;
        break;
      case Pattern::kHugeRange:
        if (i % 7 == 3) x *= 1e30;
        break;
      case Pattern::kSubnormal:
        x *= 1e-38;
        break;
      case Pattern::kSignedZeros:
        if (i % 3 == 0) x = (i % 2) ? -0.0 : 0.0;
        else x *= 1e-4;
        break;
      // multiples of 2^-6: against power-of-two scales, x / s lands on .5 ties
      case Pattern::kTies:
        x = std::nearbyint(x * 64.0) / 64.0;
        break;
    }
    v[static_cast<std::size_t>(i)] = x;
  }
  return v;
}

QuantizationArgs int_args(int bits, bool sym, Strategy st, std::optional<int64_t> gs = std::nullopt) {
  QuantizationArgs a;
  a.num_bits = bits;
  a.symmetric = sym;
  a.strategy = st;
  a.group_size = gs;
  return a.validated();
}

QuantizationArgs fp8_args(Strategy st, std::optional<int64_t> gs = std::nullopt) {
  QuantizationArgs a;
  a.num_bits = 8;
  a.type = QuantType::kFloat;
  a.strategy = st;
  a.group_size = gs;
  return a.validated();
}

QuantizationArgs block_args(int64_t bh, int64_t bw) {
  QuantizationArgs a;
  a.num_bits = 8;
  a.type = QuantType::kFloat;
  a.strategy = Strategy::kBlock;
  a.block_structure = std::array<int64_t, 2>{bh, bw};
  return a.validated();
}

enum class ScaleKind { kSpread, kPow2, kFp8Grid, kZero };

/// Scales of shape `shape` in dtype dt: spread so that x / s covers the grid and its
/// clamps (kSpread), powers of two (MX, ties), fp8-grid values (NVFP4), or some zeros.
Tensor make_scale(const Shape& shape, DType dt, double q_max, ScaleKind kind, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.3, 2.0);
  std::uniform_int_distribution<int> e(-9, -3);
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) {
    switch (kind) {
      case ScaleKind::kSpread:
        v[i] = 0.12 / q_max * u(rng);
        break;
      case ScaleKind::kPow2:
        v[i] = std::ldexp(1.0, e(rng));
        break;
      case ScaleKind::kFp8Grid:
        v[i] = fp8_e4m3_to_float(fp8_e4m3_from_double(u(rng) * 0.02 * 2688.0 / 6.0));
        break;
      case ScaleKind::kZero:
        v[i] = i % 3 == 1 ? 0.0 : 0.12 / q_max * u(rng);
        break;
    }
  }
  return Tensor::from_values(dt, shape, v);
}

Tensor make_zp(const Shape& shape, const QuantizationArgs& a, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto [lo, hi] = a.q_range();
  std::uniform_int_distribution<int> u(static_cast<int>(lo), static_cast<int>(hi));
  std::vector<double> v(static_cast<std::size_t>(shape_numel(shape)));
  for (double& z : v) z = u(rng);
  return Tensor::from_values(*a.zp_dtype, shape, v);
}

struct Case {
  Case(std::string name_, QuantizationArgs args_, Tensor x_, Tensor scale_)
      : name(std::move(name_)), args(std::move(args_)), x(std::move(x_)), scale(std::move(scale_)) {}
  std::string name;
  QuantizationArgs args;
  Tensor x;
  Tensor scale;
  std::optional<Tensor> zp, g_idx, global;
  std::optional<TensorView> view;  ///< a strided view of x, when set
};

/// Runs the CUDA path's element step (qdq_cuda.h) on the CPU over every output element
/// (tests/kernels/cuda/host_grid.h) and compares it with the reference's result, where
/// the device path applies (no g_idx order).
void expect_cuda_bodies_match(QdqOp op, const TensorView& xv, const Tensor& scale, const Tensor* zp,
                              const QuantizationArgs& args, const Tensor* gi, const Tensor* gs,
                              std::optional<DType> out_dtype, NumericMode mode, const Tensor& expected,
                              const std::string& what) {
  const QdqCall call = resolve_qdq(op, xv, scale, zp, args, gi, gs, out_dtype, mode);
  std::optional<cuda::QdqArgs> a = cuda::cuda_qdq_args(call, xv, scale.dtype(), mode);
  if (!a) return;
  Tensor out = Tensor::uninitialized(call.out_dtype, call.out_shape);
  a->x = xv.data;
  a->scale = scale.data();
  float g = 0.0f;
  if (gs) {
    g = static_cast<float>(*qobs::detail::global_scale_value(gs));
    a->global_scale = &g;
  }
  if (zp) {
    a->zero_point = zp->data();
    a->zp_dtype = zp->dtype();
  }
  a->out = out.data();
  for (int64_t i = 0; i < a->n; ++i) cuda::qdq_elem_cuda(*a, i);
  ASSERT_EQ(describe_difference(expected, out), "") << what << " (CUDA element step)";
}

/// Runs op on the reference once and on the dispatcher at every level and thread count.
void expect_same(QdqOp op, const Case& c, NumericMode mode, std::optional<DType> out_dtype = std::nullopt) {
  const TensorView xv = c.view ? *c.view : c.x.view();
  const Tensor* zp = c.zp ? &*c.zp : nullptr;
  const Tensor* gi = c.g_idx ? &*c.g_idx : nullptr;
  const Tensor* gs = c.global ? &*c.global : nullptr;
  const Tensor expected = ref::qdq(op, xv, c.scale, zp, c.args, gi, gs, out_dtype, mode);
  expect_cuda_bodies_match(op, xv, c.scale, zp, c.args, gi, gs, out_dtype, mode, expected,
                           c.name + " op " + std::to_string(static_cast<int>(op)));
  for (SimdLevel level : available_simd_levels()) {
    ScopedSimdLevel guard(level);
    for (int threads : {1, 2, 3}) {
      const Tensor got = qdq(op, xv, c.scale, zp, c.args, gi, gs, out_dtype, mode, threads);
      const std::string diff = describe_difference(expected, got);
      ASSERT_EQ(diff, "") << c.name << " op " << static_cast<int>(op) << " mode " << static_cast<int>(mode) << " level "
                          << static_cast<int>(level) << " threads " << threads;
    }
  }
}

/// fake_quantize, quantize (natural dtype, and int8 / f32 storage) and dequantize of
/// the quantized values (as floats and, for INT grids, as int8 codes), both modes.
void check_all_ops(const Case& c) {
  for (NumericMode mode : {NumericMode::kParity, NumericMode::kWide}) {
    expect_same(QdqOp::kFakeQuantize, c, mode);
    expect_same(QdqOp::kQuantize, c, mode);
    expect_same(QdqOp::kQuantize, c, mode, DType::kF32);
    if (c.args.type == QuantType::kInt) expect_same(QdqOp::kQuantize, c, mode, DType::kI8);
    const Tensor* zp = c.zp ? &*c.zp : nullptr;
    const Tensor* gi = c.g_idx ? &*c.g_idx : nullptr;
    const Tensor* gs = c.global ? &*c.global : nullptr;
    const TensorView xv = c.view ? *c.view : c.x.view();
    Case d = c;
    d.view.reset();
    d.x = ref::qdq(QdqOp::kQuantize, xv, c.scale, zp, c.args, gi, gs, std::nullopt, mode);
    expect_same(QdqOp::kDequantize, d, mode);
    expect_same(QdqOp::kDequantize, d, mode, c.x.dtype());
    if (c.args.type == QuantType::kInt) {
      d.x = ref::qdq(QdqOp::kQuantize, xv, c.scale, zp, c.args, gi, gs, DType::kI8, mode);
      expect_same(QdqOp::kDequantize, d, mode);
    }
  }
}

struct Format {
  std::string name;
  QuantizationArgs args;
};

std::vector<Format> group_formats(int64_t gs) {
  std::vector<Format> f;
  for (int bits : {2, 4, 8})
    for (bool sym : {true, false})
      f.push_back({"int" + std::to_string(bits) + (sym ? "s" : "a"), int_args(bits, sym, Strategy::kGroup, gs)});
  f.push_back({"fp8", fp8_args(Strategy::kGroup, gs)});
  return f;
}

std::string dt_name(DType dt) { return std::string(dtype_name(dt)); }

TEST(QdqKernels, GroupStrategiesAllShapesAndPatterns) {
  uint32_t seed = 1;
  for (int64_t gs : {1, 16, 32, 128}) {
    std::vector<int64_t> cols_list;
    if (gs == 1) cols_list = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 4097};
    else cols_list = {gs, 2 * gs, 3 * gs};
    if (gs == 16) cols_list.push_back(4096 + 16);
    for (const Format& f : group_formats(gs))
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
        for (int64_t cols : cols_list) {
          const int64_t rows = cols > 1000 ? 2 : 3;
          const Pattern p = static_cast<Pattern>(seed % 7);
          Case c{f.name + "/g" + std::to_string(gs) + "/" + dt_name(dt) + "/" + std::to_string(cols) + "/" +
                     pattern_name(p),
                 f.args, Tensor::from_values(dt, {rows, cols}, make_values(rows * cols, p, seed)), Tensor()};
          const double qmax = f.args.q_range().second;
          const ScaleKind sk =
              p == Pattern::kTies ? ScaleKind::kPow2 : (seed % 9 == 4 ? ScaleKind::kZero : ScaleKind::kSpread);
          c.scale = make_scale({rows, cols / gs}, dt, qmax, sk, seed + 100);
          if (!f.args.symmetric) c.zp = make_zp({rows, cols / gs}, f.args, seed + 200);
          check_all_ops(c);
          ++seed;
        }
  }
}

TEST(QdqKernels, TensorChannelTokenAndColumnScales) {
  uint32_t seed = 500;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t cols : {1, 5, 8, 16, 17, 31, 32, 33, 47, 64, 65, 4097})
      for (int bits : {4, 8})
        for (bool sym : {true, false}) {
          const int64_t rows = cols > 1000 ? 2 : 4;
          const Pattern p = static_cast<Pattern>(seed % 7);
          const Tensor x = Tensor::from_values(dt, {rows, cols}, make_values(rows * cols, p, seed));
          const QuantizationArgs ch = int_args(bits, sym, Strategy::kChannel);
          const QuantizationArgs te = int_args(bits, sym, Strategy::kTensor);
          const double qmax = ch.q_range().second;
          const std::string tag = dt_name(dt) + "/" + std::to_string(cols) + "/" + pattern_name(p);
          // channel: (rows, 1); tensor: (1,); a per-column (1, cols) scale advances with c
          for (const auto& [name, args, shape] :
               {std::tuple{std::string("channel"), ch, Shape{rows, 1}}, std::tuple{std::string("tensor"), te, Shape{1}},
                std::tuple{std::string("per_column"), ch, Shape{1, cols}}}) {
            Case c{name + "/int" + std::to_string(bits) + (sym ? "s/" : "a/") + tag, args, x,
                   make_scale(shape, dt, qmax, ScaleKind::kSpread, seed + 1)};
            if (!sym) c.zp = make_zp(shape, args, seed + 2);
            check_all_ops(c);
          }
          // FP8 per tensor / channel (no zero point)
          Case f{"fp8_channel/" + tag, fp8_args(Strategy::kChannel), x,
                 make_scale({rows, 1}, dt, 448, ScaleKind::kSpread, seed + 3)};
          check_all_ops(f);
          ++seed;
        }
  // token activations (B, S, H) with a (B, S, 1) scale, and a 0-dimensional scale
  const Tensor act = Tensor::from_values(DType::kBF16, {2, 3, 40}, make_values(240, Pattern::kNormal, 9));
  QuantizationArgs tok;
  tok.symmetric = false;
  tok.strategy = Strategy::kToken;
  tok.dynamic = Dynamic::kTrue;
  tok = tok.validated();
  Case t{"token", tok, act, make_scale({2, 3, 1}, DType::kBF16, 127, ScaleKind::kSpread, 10)};
  t.zp = make_zp({2, 3, 1}, tok, 11);
  check_all_ops(t);
  Case s0{"scalar_scale", int_args(8, true, Strategy::kTensor), act, Tensor::from_values(DType::kBF16, {}, {0.01})};
  check_all_ops(s0);
  // a 1-D x and a 0-dimensional x
  Case v1{"vector", int_args(4, true, Strategy::kTensor),
          Tensor::from_values(DType::kF32, {37}, make_values(37, Pattern::kNormal, 12)),
          make_scale({1}, DType::kF32, 7, ScaleKind::kSpread, 13)};
  check_all_ops(v1);
  Case v0{"zero_dim", int_args(4, true, Strategy::kTensor), Tensor::from_values(DType::kF32, {}, {0.3}),
          make_scale({1}, DType::kF32, 7, ScaleKind::kSpread, 14)};
  check_all_ops(v0);
}

TEST(QdqKernels, MixedDtypesF64AndOutputs) {
  // bf16 / f16 x with an f32 scale (y in f32, R0.4c), f32 x with a bf16 scale, f64 x
  const std::vector<double> vals = make_values(6 * 96, Pattern::kNormal, 20);
  const QuantizationArgs g32 = int_args(4, false, Strategy::kGroup, 32);
  for (auto [xd, sd] : {std::pair{DType::kBF16, DType::kF32}, std::pair{DType::kF16, DType::kF32},
                        std::pair{DType::kF32, DType::kBF16}, std::pair{DType::kF64, DType::kF32},
                        std::pair{DType::kF32, DType::kF64}, std::pair{DType::kF16, DType::kBF16}}) {
    Case c{"mixed/" + dt_name(xd) + "/" + dt_name(sd), g32, Tensor::from_values(xd, {6, 96}, vals),
           make_scale({6, 3}, sd, 7, ScaleKind::kSpread, 21)};
    c.zp = make_zp({6, 3}, g32, 22);
    check_all_ops(c);
    for (NumericMode mode : {NumericMode::kParity, NumericMode::kWide}) {
      expect_same(QdqOp::kQuantize, c, mode, DType::kF16);
      expect_same(QdqOp::kQuantize, c, mode, DType::kF8E4M3);
      expect_same(QdqOp::kQuantize, c, mode, DType::kI32);
    }
  }
}

TEST(QdqKernels, Nvfp4AndMxfp4) {
  uint32_t seed = 700;
  const QuantizationArgs nv = *preset_scheme("NVFP4A16").weights;
  const QuantizationArgs mx = *preset_scheme("MXFP4A16").weights;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t cols : {16, 32, 48, 64, 96, 4096 + 32})
      for (Pattern p : {Pattern::kNormal, Pattern::kNonFinite, Pattern::kSignedZeros, Pattern::kHugeRange,
                        Pattern::kSubnormal, Pattern::kTies, Pattern::kEqual}) {
        const int64_t rows = cols > 1000 ? 2 : 3;
        const Tensor x = Tensor::from_values(dt, {rows, cols}, make_values(rows * cols, p, seed));
        const std::string tag = dt_name(dt) + "/" + std::to_string(cols) + "/" + pattern_name(p);
        // NVFP4: fp8-grid scales (in x's dtype) divided by an f32 global scale (R5.1.1 step 1)
        Case n{"nvfp4/" + tag, nv, x, make_scale({rows, cols / 16}, dt, 6, ScaleKind::kFp8Grid, seed + 1)};
        n.global = Tensor::from_values(DType::kF32, {1}, {2688.0 / (0.3 + 0.01 * (seed % 7))});
        check_all_ops(n);
        if (cols % 32 == 0) {
          Case m{"mxfp4/" + tag, mx, x, make_scale({rows, cols / 32}, dt, 6, ScaleKind::kPow2, seed + 2)};
          check_all_ops(m);
        }
        ++seed;
      }
}

/// FP6 E2M3 (R2.8): MXFP6 with power-of-two scales and without / with an all-zero uint8
/// zero point (which turns -0.0 into +0.0), and non-MX FP6 per channel and group 16 with
/// spread scales, on every pattern; plus rows built on the grid's ties, its saturation
/// at +-7.5 and NaN, in tails of every length.
TEST(QdqKernels, Mxfp6AndFp6) {
  uint32_t seed = 900;
  const QuantizationArgs mx = *preset_scheme("MXFP6A16").weights;
  QuantizationArgs f6;
  f6.num_bits = 6;
  f6.type = QuantType::kFloat;
  f6.strategy = Strategy::kChannel;
  f6 = f6.validated();
  QuantizationArgs g16 = f6;
  g16.strategy = Strategy::kGroup;
  g16.group_size = 16;
  g16 = g16.validated();
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t cols : {32, 64, 96, 4096 + 32})
      for (Pattern p : {Pattern::kNormal, Pattern::kNonFinite, Pattern::kSignedZeros, Pattern::kHugeRange,
                        Pattern::kSubnormal, Pattern::kTies, Pattern::kEqual}) {
        const int64_t rows = cols > 1000 ? 2 : 3;
        const Tensor x = Tensor::from_values(dt, {rows, cols}, make_values(rows * cols, p, seed));
        const std::string tag = dt_name(dt) + "/" + std::to_string(cols) + "/" + pattern_name(p);
        Case m{"mxfp6/" + tag, mx, x, make_scale({rows, cols / 32}, dt, 7.5, ScaleKind::kPow2, seed + 1)};
        check_all_ops(m);
        m.name += "/zp";
        m.zp = Tensor(DType::kU8, {rows, cols / 32});
        check_all_ops(m);
        Case c{"fp6_channel/" + tag, f6, x, make_scale({rows, 1}, dt, 7.5, ScaleKind::kSpread, seed + 2)};
        check_all_ops(c);
        Case g{"fp6_g16/" + tag, g16, x, make_scale({rows, cols / 16}, dt, 7.5, ScaleKind::kSpread, seed + 3)};
        check_all_ops(g);
        ++seed;
      }
  // x / s on the E2M3 ties (midpoints of each step), the grid values, the saturation
  // (7.5, its midpoint 7.75 to the would-be 8, beyond), signed zeros, NaN; scale 2^-4
  const std::vector<double> t{0.0625, 0.1875, 0.9375, 1.0625, 1.9375, 2.125, 2.375, 3.875, 4.25, 4.75, 7.25,
                              7.5,    7.75,   8.0,    1e9,    0.0,    -0.0,  0.125, 1.875, 3.75, 6.5,  NAN};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t cols : {32, 64, 96}) {
      const int64_t rows = 3;
      std::vector<double> v(static_cast<std::size_t>(rows * cols));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = (i % 2 ? -1.0 : 1.0) * t[i % t.size()] * 0.0625;
      const std::vector<double> scales(static_cast<std::size_t>(rows * cols / 32), 0.0625);
      Case m{"mxfp6_ties/" + dt_name(dt) + "/" + std::to_string(cols), mx, Tensor::from_values(dt, {rows, cols}, v),
             Tensor::from_values(dt, {rows, cols / 32}, scales)};
      check_all_ops(m);
    }
}

TEST(QdqKernels, BlockGidxBroadcastAndStridedViews) {
  // block: shapes that do not divide the blocks
  for (auto [R, C, bh, bw] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{33, 47, 16, 16}, {128, 130, 128, 128}, {8, 4097, 4, 64}}) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const QuantizationArgs a = block_args(bh, bw);
      Case c{"block/" + std::to_string(R) + "x" + std::to_string(C), a,
             Tensor::from_values(dt, {R, C}, make_values(R * C, Pattern::kNormal, 31)),
             make_scale({(R + bh - 1) / bh, (C + bw - 1) / bw}, dt, 448, ScaleKind::kSpread, 32)};
      check_all_ops(c);
    }
  }
  // g_idx: a random order, a sorted one and the "-1 = no order" marker (R5.3.1 step 4)
  const int64_t rows = 5, cols = 64, gs = 16;
  std::vector<double> perm(cols);
  for (int64_t i = 0; i < cols; ++i) perm[static_cast<std::size_t>(i)] = static_cast<double>(i / gs);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(33));
  std::vector<double> sorted(cols), none(cols, -1.0);
  for (int64_t i = 0; i < cols; ++i) sorted[static_cast<std::size_t>(i)] = static_cast<double>(i / gs);
  for (const auto& g : {perm, sorted, none})
    for (bool sym : {true, false}) {
      const QuantizationArgs a = int_args(4, sym, Strategy::kGroup, gs);
      Case c{"g_idx", a,
             Tensor::from_values(DType::kBF16, {rows, cols}, make_values(rows * cols, Pattern::kNormal, 34)),
             make_scale({rows, cols / gs}, DType::kBF16, 7, ScaleKind::kSpread, 35)};
      c.g_idx = Tensor::from_values(DType::kI32, {cols}, g);
      if (!sym) c.zp = make_zp({rows, cols / gs}, a, 36);
      check_all_ops(c);
    }
  // x broadcast against a larger scale: (1, 40) x by (6, 1) scales
  Case b{"broadcast_x", int_args(8, true, Strategy::kChannel),
         Tensor::from_values(DType::kF32, {1, 40}, make_values(40, Pattern::kNormal, 37)),
         make_scale({6, 1}, DType::kF32, 127, ScaleKind::kSpread, 38)};
  check_all_ops(b);
  // a transposed (strided) view of x
  const Tensor base = Tensor::from_values(DType::kBF16, {48, 24}, make_values(48 * 24, Pattern::kNormal, 39));
  Case t{"transposed", int_args(4, true, Strategy::kGroup, 16), base,
         make_scale({24, 3}, DType::kBF16, 7, ScaleKind::kSpread, 40)};
  t.view = TensorView(base.data(), DType::kBF16, {24, 48}, {1, 24});
  check_all_ops(t);
}

TEST(QdqKernels, LongRowsCutInsideGroups) {
  // rows longer than one parallel task are cut into pieces, which may start inside a
  // group (48 does not divide the piece length) or a constant-scale row
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const int64_t cols = 48 * 1030;
    const Tensor x = Tensor::from_values(dt, {2, cols}, make_values(2 * cols, Pattern::kNormal, 45));
    Case g{"long/g48/" + dt_name(dt), int_args(4, false, Strategy::kGroup, 48), x,
           make_scale({2, cols / 48}, dt, 7, ScaleKind::kSpread, 46)};
    g.zp = make_zp({2, cols / 48}, g.args, 47);
    check_all_ops(g);
    Case c{"long/channel/" + dt_name(dt), fp8_args(Strategy::kChannel), x,
           make_scale({2, 1}, dt, 448, ScaleKind::kSpread, 48)};
    check_all_ops(c);
    // a NaN in one piece sends only that piece to the scalar steps
    std::vector<double> v = make_values(2 * cols, Pattern::kNormal, 49);
    v[static_cast<std::size_t>(cols + 20000)] = NAN;
    Case n{"long/nan/" + dt_name(dt), g.args, Tensor::from_values(dt, {2, cols}, v), g.scale};
    n.zp = g.zp;
    check_all_ops(n);
  }
}

TEST(QdqKernels, PublicFunctionsMatchReferenceAndErrorsAgree) {
  const QuantizationArgs a = int_args(4, true, Strategy::kGroup, 32);
  const Tensor x = Tensor::from_values(DType::kBF16, {4, 64}, make_values(256, Pattern::kNormal, 41));
  const Tensor s = make_scale({4, 2}, DType::kBF16, 7, ScaleKind::kSpread, 42);
  EXPECT_EQ(describe_difference(ref::qdq(QdqOp::kFakeQuantize, x.view(), s, nullptr, a, nullptr, nullptr, std::nullopt,
                                         NumericMode::kParity),
                                fake_quantize(x.view(), s, nullptr, a)),
            "");
  // argument errors come from the shared resolution: same type and message
  const Tensor bad_scale = Tensor::from_values(DType::kF32, {4, 2}, {1, 2, 3, NAN, 5, 6, 7, 8});
  expect_error<InvalidArgument>([&] { fake_quantize(x.view(), bad_scale, nullptr, a); }, {"scale[3]", "R5.1.1"});
  const QuantizationArgs g48 = int_args(4, true, Strategy::kGroup, 48);
  expect_error<InvalidArgument>([&] { quantize(x.view(), s, nullptr, g48); },
                                {"divisble by the given group_size 48 but got 64", "R5.3.1"});
}

}  // namespace
}  // namespace qobs::kernels
