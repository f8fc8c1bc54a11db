// cpu::minmax (search.h): R6.3.1 min / max of every group, threaded, with the
// vector kernels of minmax_simd.h. Bit-identical to ref::minmax.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/parallel/thread_pool.h"
#include "kernels/minmax/group_minmax.h"
#include "kernels/minmax/minmax_cpu.h"
#include "kernels/minmax/minmax_simd.h"
#include "kernels/simd/stream_store.h"
#include "qobs/formats.h"
#include "qparams/qparam_math.h"

namespace qobs::kernels::cpu {

using namespace qobs::kernels::detail;

namespace {

/// True when the values of each qparam element lie contiguous in (obs, group) order,
/// also with several observations per element (an activation batch under the tensor
/// strategy: every token an observation), which FlatView::group_is_contiguous does not
/// cover. load_group then reads group q in place from group_offset(q).
bool values_contiguous(const FlatView& flat) {
  if (flat.group_is_contiguous()) return true;
  std::vector<Axis> axes = flat.layout.obs_axes;
  axes.insert(axes.end(), flat.layout.group_axes.begin(), flat.layout.group_axes.end());
  int64_t expect = 1;
  for (std::size_t d = axes.size(); d-- > 0;) {
    if (axes[d].size == 1) continue;
    if (axes[d].stride != expect) return false;
    expect *= axes[d].size;
  }
  return true;
}

/// Min-max results as Tensor::from_floats stores them in dt (f32, or bf16 / f16 for
/// results of such tensors, which convert exactly).
void store_results(DType dt, const float* v, int64_t n, void* out, int64_t at, const detail::ConvertSimd* cv) {
  if (dt == DType::kF32) {
    std::copy(v, v + n, static_cast<float*>(out) + at);
    return;
  }
  const bool bf16 = dt == DType::kBF16;
  uint16_t* dst = static_cast<uint16_t*>(out) + at;
  if (cv) return cv->narrow16(v, n, bf16, dst);
  for (int64_t i = 0; i < n; ++i)
    dst[i] = v[i] != v[i] ? (bf16 ? double_to_bf16(v[i]) : double_to_f16(v[i]))
                          : (bf16 ? float_to_bf16(v[i]) : float_to_f16(v[i]));
}

/// Groups [q, q_end) of many (the not-one-huge-group case) into mins / maxs, indexed from q.
void minmax_range(const FlatView& flat, bool contiguous, bool eight_at_once, int64_t q, int64_t q_end, int64_t len,
                  const GroupKernels& k, std::vector<float>& buf, float* mins, float* maxs) {
  const int64_t q0 = q;
  if (eight_at_once) {
    const int64_t whole = (q_end - q) / 8 * 8;
    const std::size_t es = dtype_size(flat.dtype);
    const auto* x = static_cast<const unsigned char*>(flat.data) + static_cast<std::size_t>(flat.group_offset(q)) * es;
    // NaN: the per-group loop below redoes the range with the reference's propagation
    bool zero_result = false;
    if (whole > 0 && k.minmax->groups(x, flat.dtype, whole, len, mins, maxs, &zero_result)) {
      for (int64_t g = q; zero_result && g < q + whole; ++g)
        if (mins[g - q0] == 0.0f || maxs[g - q0] == 0.0f) {
          // the zero's sign, from the group's values as floats
          const float* v = load_group(flat, contiguous, g, len, k, buf);
          settle_zero_signs(v, len, mins + (g - q0), maxs + (g - q0));
        }
      q += whole;
    }
  }
  for (; q < q_end; ++q) {
    const float* x = load_group(flat, contiguous, q, len, k, buf);
    double l, h;
    group_minmax(x, len, k, &l, &h);
    mins[q - q0] = static_cast<float>(l);
    maxs[q - q0] = static_cast<float>(h);
  }
}

/// Groups [q, q + count) (count a multiple of 32, laid end to end) of a bf16 / f16 tensor
/// into 16-bit statistics of the same dtype with minmax_groups_to16_simd (by streaming
/// stores if `stream`), the sign of a zero result settled on the patterns as
/// settle_zero_signs does on floats (the last zero of the group). Returns the groups
/// done: count, with *ranges the StoredKeyRanges of the statistics written; or 0 when the
/// level or shape has no such pass or a NaN needs the per-group loop.
int64_t minmax_to16(const FlatView& flat, int64_t q, int64_t count, int64_t len, const detail::MinmaxSimd& k,
                    bool stream, uint16_t* mins, uint16_t* maxs, StoredKeyRanges* ranges) {
  const auto* x = static_cast<const uint16_t*>(flat.data) + flat.group_offset(q);
  bool zero_result = false;
  if (k.groups_to16(x, flat.dtype == DType::kBF16, count, len, mins + q, maxs + q, &zero_result, stream, ranges) != 1)
    return 0;
  if (!zero_result) return count;
  for (int64_t g = 0; g < count; ++g) {
    uint16_t& lo = mins[q + g];
    uint16_t& hi = maxs[q + g];
    if ((lo & 0x7FFFu) != 0 && (hi & 0x7FFFu) != 0) continue;
    const uint16_t* v = x + g * len;
    int64_t j = len - 1;
    while (j >= 0 && (v[j] & 0x7FFFu) != 0) --j;
    if (j < 0) continue;
    if ((lo & 0x7FFFu) == 0) lo = v[j];
    if ((hi & 0x7FFFu) == 0) hi = v[j];
  }
  // a settled zero's key moved between those of +0 and -0: the ranges from the patterns
  // as they now are (rare: a group's min or max exactly zero)
  *ranges = stored_key_ranges16(k, mins + q, maxs + q, count);
  return count;
}

/// What one task read back of the statistics it wrote: the least and greatest min and
/// max (int16 keys of 16-bit statistics, or floats), NaN shown as minmax_keys16_simd /
/// minmax_simd show it.
struct TaskExtremes {
  StoredKeyRanges keys;
  float fmins_lo = INFINITY, fmaxs_hi = -INFINITY;
  bool fnan = false;
};

/// The task's statistics [q, q_end) in out_dt, read while they are in its cache (f32:
/// the task's whole range once; 16-bit: merged into what the task has).
void read_back(DType out_dt, const void* out_mins, const void* out_maxs, int64_t q, int64_t q_end,
               const detail::MinmaxSimd& k, TaskExtremes& t) {
  const int64_t n = q_end - q;
  if (n <= 0) return;
  if (out_dt == DType::kF32) {
    float lo, hi, lo2, hi2;
    k.minmax(static_cast<const float*>(out_mins) + q, n, &lo, &hi);
    k.minmax(static_cast<const float*>(out_maxs) + q, n, &lo2, &hi2);
    t.fnan = std::isnan(lo) || std::isnan(hi) || std::isnan(lo2) || std::isnan(hi2);
    t.fmins_lo = lo;
    t.fmaxs_hi = hi2;
    return;
  }
  t.keys.merge(stored_key_ranges16(k, static_cast<const uint16_t*>(out_mins) + q,
                                   static_cast<const uint16_t*>(out_maxs) + q, n));
}

/// The tasks' read-backs combined: StatisticsExtremes of all the statistics.
StatisticsExtremes combine_extremes(DType out_dt, const std::vector<TaskExtremes>& tasks) {
  if (out_dt == DType::kF32) {
    double lo = INFINITY, hi = -INFINITY;
    for (const TaskExtremes& t : tasks) {
      if (t.fnan) return {NAN, NAN};
      lo = std::min(lo, static_cast<double>(t.fmins_lo));
      hi = std::max(hi, static_cast<double>(t.fmaxs_hi));
    }
    return {lo, hi};
  }
  StoredKeyRanges all;
  for (const TaskExtremes& t : tasks) all.merge(t.keys);
  const bool bf16 = out_dt == DType::kBF16;
  const KeyExtremes m = key_extremes16(all.mins_lo, all.mins_hi, bf16),
                    x = key_extremes16(all.maxs_lo, all.maxs_hi, bf16);
  if (m.nan || x.nan) return {NAN, NAN};
  return {m.lo, x.hi};
}

/// The kernel, results stored in out_dt (f32 written in place; bf16 / f16 a block at a
/// time from a small float buffer, so no float copy of all the results is made).
void minmax_impl(const FlatView& flat, DType out_dt, void* out_mins, void* out_maxs, const GroupKernels& k,
                 int num_threads, std::optional<StatisticsExtremes>* extremes) {
  if (extremes) extremes->reset();
  const int64_t nq = flat.layout.num_qparams();
  const int64_t len = flat.layout.num_obs() * flat.layout.group_len();
  const bool contiguous = values_contiguous(flat);
  const int threads = resolve_num_threads(num_threads);
  const bool vec_dtype = flat.dtype == DType::kF32 || flat.dtype == DType::kBF16 || flat.dtype == DType::kF16;
  if (nq == 1 && vec_dtype && len >= (int64_t{1} << 16) && contiguous) {
    // One huge group (tensor strategy, e.g. a static activation scale over a whole
    // calibration batch): split the range; min / max combine exactly in any order except
    // for the sign of a zero, which group_minmax's rule settles below. bf16 / f16 are
    // widened a cache-sized chunk at a time instead of into one copy of the tensor.
    const std::size_t es = dtype_size(flat.dtype);
    const auto* base =
        static_cast<const unsigned char*>(flat.data) + static_cast<std::size_t>(flat.group_offset(0)) * es;
    const int64_t parts = threads == 1 ? 1 : threads * 4, step = (len + parts - 1) / parts;
    if (flat.dtype != DType::kF32 && k.minmax) {
      // bf16 / f16 in one pass of int16 keys (32 lanes, no widening; an activation batch
      // at stream speed). A NaN or a zero extreme takes the float loop below, which
      // gives the reference's NaN and the last zero's sign.
      const KeyExtremes ke = minmax16_threaded(*k.minmax, reinterpret_cast<const uint16_t*>(base), len,
                                               flat.dtype == DType::kBF16, parts, threads);
      if (!ke.nan && !ke.zero) {
        store_results(out_dt, &ke.lo, 1, out_mins, 0, nullptr);
        store_results(out_dt, &ke.hi, 1, out_maxs, 0, nullptr);
        return;
      }
    }
    constexpr int64_t kChunk = 4096;
    std::vector<double> lo(static_cast<std::size_t>(parts)), hi(static_cast<std::size_t>(parts));
    parallel_for(parts, threads, [&](int64_t p, int) {
      const int64_t b = p * step, e = std::min(len, b + step);
      double l = INFINITY, h = -INFINITY;
      if (flat.dtype == DType::kF32) {
        if (e > b) group_minmax(reinterpret_cast<const float*>(base) + b, e - b, k, &l, &h);
      } else {
        const auto* src = reinterpret_cast<const uint16_t*>(base);
        const bool bf16 = flat.dtype == DType::kBF16;
        float buf[kChunk];
        for (int64_t c = b; c < e; c += kChunk) {  // chunks in index order: later equal zeros win
          const int64_t n = std::min(kChunk, e - c);
          widen16(k.convert, src + c, n, bf16, buf);
          double cl, ch;
          group_minmax(buf, n, k, &cl, &ch);
          l = qobs::detail::nan_min(l, cl);
          h = qobs::detail::nan_max(h, ch);
        }
      }
      lo[static_cast<std::size_t>(p)] = l;
      hi[static_cast<std::size_t>(p)] = h;
    });
    double l = INFINITY, h = -INFINITY;
    for (int64_t p = 0; p < parts; ++p) {  // parts in index order: later equal zeros win
      l = qobs::detail::nan_min(l, lo[static_cast<std::size_t>(p)]);
      h = qobs::detail::nan_max(h, hi[static_cast<std::size_t>(p)]);
    }
    const float fl = static_cast<float>(l), fh = static_cast<float>(h);
    store_results(out_dt, &fl, 1, out_mins, 0, nullptr);
    store_results(out_dt, &fh, 1, out_maxs, 0, nullptr);
    return;
  }
  const int64_t target_tasks = threads == 1 ? 1 : threads * 8;
  // Groups of up to 128 laid end to end (NVFP4's 16, MXFP4's 32, INT4's 128): eight per
  // pass (minmax_groups_simd), tasks of whole passes. Read in place, bf16 / f16 widened
  // in registers: one group at a time widened each group into a buffer first (bf16 INT4
  // g128 at ~55% of a plain read; ~80% now).
  const bool eight_at_once = k.minmax && vec_dtype && len % 8 == 0 && len <= 128 && flat.groups_end_to_end();
  // tasks of whole 32-group passes: the AVX-512 16-bit kernel takes 32 at a time
  const int64_t unit = eight_at_once ? 32 : 1;
  const int64_t per_task = (std::max<int64_t>(1, (nq + target_tasks - 1) / target_tasks) + unit - 1) / unit * unit;
  const int64_t num_tasks = (nq + per_task - 1) / per_task;
  std::vector<std::vector<float>> bufs(static_cast<std::size_t>(threads));
  // the extremes: f32 statistics read back while they are in the task's cache; 16-bit
  // ones from the kernel's registers (the rest read back block by block): no pass of
  // the callers over all of them later
  const bool read_extremes = extremes && eight_at_once;
  std::vector<TaskExtremes> task_extremes(read_extremes ? static_cast<std::size_t>(num_tasks) : 0);
  // 16-bit statistics beyond the caches (NVFP4's groups of 16): streamed, with their
  // key ranges taken from the kernel's registers instead of read back (stream_store.h)
  const bool stream = out_dt != DType::kF32 && stream_output(2 * nq * static_cast<int64_t>(dtype_size(out_dt)));
  parallel_for(num_tasks, threads, [&](int64_t task, int worker) {
    const int64_t q_begin = task * per_task, q_end = std::min(nq, (task + 1) * per_task);
    std::vector<float>& buf = bufs[static_cast<std::size_t>(worker)];
    if (out_dt == DType::kF32) {
      minmax_range(flat, contiguous, eight_at_once, q_begin, q_end, len, k, buf,
                   static_cast<float*>(out_mins) + q_begin, static_cast<float*>(out_maxs) + q_begin);
      if (read_extremes)
        read_back(out_dt, out_mins, out_maxs, q_begin, q_end, *k.minmax, task_extremes[static_cast<std::size_t>(task)]);
      return;
    }
    constexpr int64_t kBlock = 1024;  // a multiple of 32: blocks keep the 8- and 32-group passes
    float lo[kBlock], hi[kBlock];
    for (int64_t q = q_begin; q < q_end; q += kBlock) {
      const int64_t e = std::min(q_end, q + kBlock);
      int64_t done = 0;  // groups [q, q + done) stored as 16-bit patterns directly
      StoredKeyRanges ranges;
      if (eight_at_once && flat.dtype == out_dt && (e - q) >= 32)
        done = minmax_to16(flat, q, (e - q) / 32 * 32, len, *k.minmax, stream, static_cast<uint16_t*>(out_mins),
                           static_cast<uint16_t*>(out_maxs), &ranges);
      if (read_extremes && done > 0) task_extremes[static_cast<std::size_t>(task)].keys.merge(ranges);
      if (q + done == e) continue;
      minmax_range(flat, contiguous, eight_at_once, q + done, e, len, k, buf, lo, hi);
      store_results(out_dt, lo, e - q - done, out_mins, q + done, k.convert);
      store_results(out_dt, hi, e - q - done, out_maxs, q + done, k.convert);
      if (read_extremes)
        read_back(out_dt, out_mins, out_maxs, q + done, e, *k.minmax, task_extremes[static_cast<std::size_t>(task)]);
    }
  });
  if (read_extremes) *extremes = combine_extremes(out_dt, task_extremes);
}

}  // namespace

void minmax(const FlatView& flat, float* mins, float* maxs, SimdLevel level, int num_threads) {
  minmax_impl(flat, DType::kF32, mins, maxs, GroupKernels::at(level), num_threads, nullptr);
}

void minmax_stats(const FlatView& flat, void* mins, void* maxs, SimdLevel level, int num_threads,
                  std::optional<StatisticsExtremes>* extremes) {
  QOBS_CHECK(flat.dtype == DType::kF32 || flat.dtype == DType::kBF16 || flat.dtype == DType::kF16, InvalidArgument,
             "minmax_stats: statistics of a ", dtype_name(flat.dtype), " tensor (f32, bf16 or f16 only)");
  minmax_impl(flat, flat.dtype, mins, maxs, GroupKernels::at(level), num_threads, extremes);
}

}  // namespace qobs::kernels::cpu
