// Mergeable statistics (R6.11): an observer's export / import / merge, the all-reduce
// emulation reduce_statistics, and the byte format of Statistics::serialize.
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/arith.h"
#include "core/bytes.h"
#include "core/check.h"
#include "qobs/observer.h"

namespace qobs {

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kSum:
      return "sum";
  }
  return "";
}

Statistics Observer::export_statistics() const {
  const Lock held = lock();
  Statistics s;
  s.observer = std::string(name());
  s.contributions = contributions_;
  const auto table = sync_table();
  for (const auto& [n, t] : state_) {
    ReduceOp op = ReduceOp::kAvg;
    bool synced = false;
    for (const auto& [tn, top] : table)
      if (tn == n) {
        op = top;
        synced = true;
      }
    // Statistics the reference never syncs are exported with the op that keeps a
    // single rank's value meaningful: min for minima, max for maxima.
    if (!synced) op = n == "min_vals" ? ReduceOp::kMin : (n == "max_vals" ? ReduceOp::kMax : ReduceOp::kSum);
    s.items.push_back({n, t, op});
  }
  return s;
}

void Observer::import_statistics(const Statistics& stats) {
  QOBS_CHECK(stats.observer.empty() || normalize_observer_name(stats.observer) == normalize_observer_name(name()),
             InvalidArgument, "statistics of observer '", stats.observer, "' cannot be imported into ", name());
  const Lock held = lock();
  state_.clear();
  extremes_.reset();
  for (const auto& it : stats.items) state_[it.name] = it.value;
  contributions_ = stats.contributions;
}

void Observer::merge_statistics(const Statistics& other) {
  const auto table = sync_table();
  if (table.empty()) return;  // memoryless observers: the reference never reduces (R6.11.1)
  const Lock held = lock();
  extremes_.reset();
  Statistics mine = export_statistics();
  // keep only synced statistics in the reduction; others stay as they are
  Statistics a, b;
  a.observer = b.observer = mine.observer;
  a.contributions = mine.contributions;
  b.contributions = other.contributions;
  for (const auto& [n, op] : table) {
    const Tensor* x = mine.find(n);
    const Tensor* y = other.find(n);
    if (!x && !y) continue;
    if (!x) {
      state_[n] = *y;
      continue;
    }
    if (!y) continue;
    a.items.push_back({n, *x, op});
    b.items.push_back({n, *y, op});
  }
  const Statistics ranks[2] = {a, b};
  Statistics merged = reduce_statistics(ranks);
  for (const auto& it : merged.items) state_[it.name] = it.value;
  contributions_ = a.contributions + b.contributions;
}

const Tensor* Statistics::find(std::string_view name) const {
  for (const auto& it : items)
    if (it.name == name) return &it.value;
  return nullptr;
}

Statistics reduce_statistics(std::span<const Statistics> ranks) {
  QOBS_CHECK(!ranks.empty(), InvalidArgument, "reduce_statistics: no statistics given");
  Statistics out;
  out.observer = ranks[0].observer;
  out.contributions = 0;
  for (const auto& r : ranks) out.contributions += r.contributions;
  for (const auto& item : ranks[0].items) {
    Tensor acc = item.value;
    const DType dt = acc.dtype();
    std::vector<double> sum(static_cast<std::size_t>(acc.numel()));
    for (int64_t i = 0; i < acc.numel(); ++i) sum[i] = 0;
    double weight_total = 0;
    for (const auto& r : ranks) {
      const Tensor* t = r.find(item.name);
      QOBS_CHECK(t != nullptr, InvalidArgument, "reduce_statistics: statistic '", item.name,
                 "' is missing on one of the ranks");
      QOBS_CHECK(t->shape() == acc.shape() && t->dtype() == dt, InvalidArgument,
                 "reduce_statistics: size mismatch for '", item.name, "': ", shape_str(t->shape()), " ",
                 dtype_name(t->dtype()), " vs ", shape_str(acc.shape()), " ", dtype_name(dt));
      const double w = static_cast<double>(r.contributions);
      for (int64_t i = 0; i < acc.numel(); ++i) {
        const double v = t->get(i);
        switch (item.reduce) {
          case ReduceOp::kMin:
            if (&r != &ranks[0]) acc.set(i, detail::nan_min(acc.get(i), v));
            break;
          case ReduceOp::kMax:
            if (&r != &ranks[0]) acc.set(i, detail::nan_max(acc.get(i), v));
            break;
          case ReduceOp::kSum:
            sum[i] += v;
            break;
          case ReduceOp::kAvg:
            sum[i] += v * w;
            break;
        }
      }
      weight_total += w;
    }
    if (item.reduce == ReduceOp::kSum)
      for (int64_t i = 0; i < acc.numel(); ++i) acc.set(i, sum[i]);
    if (item.reduce == ReduceOp::kAvg)
      for (int64_t i = 0; i < acc.numel(); ++i) acc.set(i, sum[i] / weight_total);
    out.items.push_back({item.name, std::move(acc), item.reduce});
  }
  return out;
}

namespace {

constexpr char kMagic[8] = {'Q', 'O', 'B', 'S', 'S', 'T', 'A', 'T'};

}  // namespace

std::vector<uint8_t> Statistics::serialize() const {
  detail::ByteWriter w;
  w.put_bytes(kMagic, sizeof kMagic);
  w.put<uint32_t>(1);  // format version
  w.put_string<uint32_t>(observer, "observer name");
  w.put<int64_t>(contributions);
  w.put<uint32_t>(static_cast<uint32_t>(items.size()));
  for (const auto& it : items) {
    w.put_string<uint32_t>(it.name, "statistic name");
    w.put(it.reduce);
    w.put(it.value.dtype());
    w.put<uint32_t>(static_cast<uint32_t>(it.value.dim()));
    for (int64_t d : it.value.shape()) w.put<int64_t>(d);
    w.put<uint64_t>(it.value.nbytes());
    w.put_bytes(it.value.data(), it.value.nbytes());  // the tensor's own (little-endian) element bytes
  }
  return w.take();
}

Statistics Statistics::deserialize(std::span<const uint8_t> bytes) {
  detail::ByteReader r(bytes, "statistics bytes");
  QOBS_CHECK(std::memcmp(r.get_bytes(sizeof kMagic, "magic").data(), kMagic, sizeof kMagic) == 0, IoError,
             "statistics bytes do not start with QOBSSTAT");
  const uint32_t version = r.get<uint32_t>("version");
  QOBS_CHECK(version == 1, IoError, "statistics format version ", version, " is not supported (expected 1)");
  Statistics s;
  s.observer = r.get_string<uint32_t>("observer name");
  s.contributions = r.get<int64_t>("contributions");
  QOBS_CHECK(s.contributions >= 1, IoError, "statistics: contributions ", s.contributions, " must be >= 1");
  const uint32_t n = r.get<uint32_t>("item count");
  for (uint32_t k = 0; k < n; ++k) {
    Statistic it;
    it.name = r.get_string<uint32_t>("statistic name");
    const uint8_t op = r.get<uint8_t>("reduce op");
    QOBS_CHECK(op <= static_cast<uint8_t>(ReduceOp::kSum), IoError, "statistics: invalid reduce op ", int(op));
    it.reduce = static_cast<ReduceOp>(op);
    const uint8_t dt = r.get<uint8_t>("dtype");
    QOBS_CHECK(dt <= static_cast<uint8_t>(DType::kBool), IoError, "statistics: invalid dtype code ", int(dt));
    const uint32_t rank = r.get<uint32_t>("rank");
    QOBS_CHECK(rank <= 8, IoError, "statistics: rank ", rank, " of '", it.name, "' is implausible");
    Shape shape;
    int64_t numel = 1;
    for (uint32_t d = 0; d < rank; ++d) {
      const int64_t v = r.get<int64_t>("shape");
      QOBS_CHECK(v >= 0 && v <= (int64_t{1} << 40), IoError, "statistics: invalid dimension ", v);
      shape.push_back(v);
      numel *= v;
      QOBS_CHECK(numel <= (int64_t{1} << 40), IoError, "statistics: tensor '", it.name, "' is implausibly large");
    }
    const uint64_t nbytes = r.get<uint64_t>("byte count");
    QOBS_CHECK(nbytes == static_cast<uint64_t>(numel) * dtype_size(static_cast<DType>(dt)), IoError, "statistics: '",
               it.name, "' declares ", nbytes, " bytes for shape ", shape_str(shape));
    const auto data = r.get_bytes(nbytes, "tensor bytes");
    it.value = Tensor::from_bytes(static_cast<DType>(dt), shape, data.data(), nbytes);
    s.items.push_back(std::move(it));
  }
  QOBS_CHECK(r.remaining() == 0, IoError, "statistics: ", r.remaining(), " trailing bytes");
  return s;
}

}  // namespace qobs
