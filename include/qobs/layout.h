// flatten_for_calibration (RULES §3): the view of an observed tensor as
// (num_observations, *qparam_shape, group_len) that every observer reduces over
// dims (0, -1).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "qobs/args.h"
#include "qobs/tensor.h"

namespace qobs {

/// One logical axis of a flattened view: `size` indices, `stride` elements apart in the
/// underlying storage. A flattened dimension may consist of several axes (e.g. the
/// (batch, seq) pair merged into the observation dimension).
struct Axis {
  int64_t size;
  int64_t stride;
};

/// Index map of a flattened observation.
struct FlatLayout {
  Shape qparam_shape;             ///< shape of the scale tensor this view calibrates
  std::vector<Axis> obs_axes;     ///< dim 0 (product = num_obs)
  std::vector<Axis> qparam_axes;  ///< row-major over qparam elements
  std::vector<Axis> group_axes;   ///< dim -1 (product = group_len)
  /// Token strategy on activations: the reference returns the value unchanged (R3.3).
  bool unchanged = false;

  int64_t num_obs() const;
  int64_t num_qparams() const;
  int64_t group_len() const;
  /// (num_obs, *qparam_shape, group_len) as the reference's flatten returns it.
  Shape flat_shape() const;
};

/// A flattened observation: storage pointer, dtype and index map. Owns a copy when the
/// layout needed one (block padding, g_idx reordering, non-mergeable strides).
struct FlatView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  FlatLayout layout;
  std::shared_ptr<const Tensor> owned;  ///< keeps `data` alive when it points into a copy

  /// Writes the num_obs * group_len values of qparam element q, widened to float, in
  /// (obs, group) row-major order.
  void gather(int64_t q, float* out) const;
  /// True when the values of one qparam element are group_len contiguous elements
  /// (num_obs == 1, group axes row-major from stride 1): kernels can read in place.
  bool group_is_contiguous() const;
  /// True when, in addition, group q starts q * group_len elements after group 0
  /// (groups laid end to end, as tensor_group / group / channel views of a row-major
  /// weight are).
  bool groups_end_to_end() const;
  /// Storage offset (elements) of the first value of qparam element q when
  /// group_is_contiguous().
  int64_t group_offset(int64_t q) const;
  /// The view as a contiguous tensor of shape layout.flat_shape().
  Tensor materialize() const;
};

/// R3.1-R3.5. base_name: "weight"; "input"/"output"; "q"/"k"/"v". `g_idx` (weights,
/// group strategies only) reorders columns by a stable ascending sort first (R7.2.4).
/// `label` names the tensor in error messages.
FlatView flatten_for_calibration(const TensorView& value, std::string_view base_name, const QuantizationArgs& args,
                                 std::span<const int32_t> g_idx = {}, std::string_view label = {});

/// flatten_for_calibration of a value whose memory the host must not read (device
/// memory): the same view where the reshape is an index map, nullopt where it needs a
/// copy (block padding, non-mergeable activation strides). No g_idx.
std::optional<FlatView> flatten_in_place(const TensorView& value, std::string_view base_name,
                                         const QuantizationArgs& args, std::string_view label = {});
/// A view of a value that is flattened already, shape (num_observations, *qparam_shape,
/// group_len) as R3.1 returns it (llm-compressor's update_statistics_from_observed
/// receives such values; the lsq observers keep theirs). Strides are the view's own.
/// Rank below 2 -> ShapeError naming `label`.
FlatView flat_view_of_flattened(const TensorView& flattened, std::string_view label);

/// R3.5 zero padding of the last two dims to multiples of the block structure.
Tensor pad_to_blocks(const TensorView& value, int64_t block_rows, int64_t block_cols);

/// True for input, output, q, k, v (ACTIVATION_OBS of R6.1.9).
bool is_activation_base_name(std::string_view base_name);

}  // namespace qobs
