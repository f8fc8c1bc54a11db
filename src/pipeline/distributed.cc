// The rank-aware parts of quantize_checkpoint (pipeline.cc), which runs one sequence of
// steps for one process and for several. Every rank plans the same conversion from the
// same options and header (the plan is deterministic), so the shard files' headers and
// every tensor's offset are known everywhere: rank 0 creates the temporary folder and
// the shard files with their headers, each rank writes its own jobs' tensors at their
// planned offsets, and rank 0 writes the passthrough tensors, the index, config.json and
// the report, then publishes. The output is therefore the single-process one byte for
// byte; only the report's timings differ (as between two single-process runs) and it
// gains the `rank` of each tensor and a `ranks` list. Here: the agreement on errors
// after each step, the messages the ranks exchange (core's byte encoding), and the
// Collective of one that a single process runs the steps over.
#include "pipeline/distributed.h"

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "core/check.h"
#include "pipeline/run.h"

namespace qobs::detail {
namespace fs = std::filesystem;

namespace {

// The exception types a rank may fail with, so that the others rethrow the same type
// (the CLI's exit status and Python's exception class depend on it).
enum class Kind : uint8_t {
  kNone,
  kInterrupted,
  kIo,
  kShape,
  kInvalid,
  kUnknownName,
  kType,
  kPrecondition,
  kNotImplemented,
  kOther
};

std::pair<Kind, std::string> classify(std::exception_ptr e) {
  if (!e) return {Kind::kNone, ""};
  try {
    std::rethrow_exception(e);
  } catch (const Interrupted& x) {
    return {Kind::kInterrupted, x.what()};
  } catch (const IoError& x) {
    return {Kind::kIo, x.what()};
  } catch (const ShapeError& x) {
    return {Kind::kShape, x.what()};
  } catch (const InvalidArgument& x) {
    return {Kind::kInvalid, x.what()};
  } catch (const UnknownName& x) {
    return {Kind::kUnknownName, x.what()};
  } catch (const TypeError& x) {
    return {Kind::kType, x.what()};
  } catch (const PreconditionError& x) {
    return {Kind::kPrecondition, x.what()};
  } catch (const NotImplementedError& x) {
    return {Kind::kNotImplemented, x.what()};
  } catch (const std::exception& x) {
    return {Kind::kOther, x.what()};
  } catch (...) {
    return {Kind::kOther, "unknown error"};
  }
}

[[noreturn]] void throw_kind(Kind k, const std::string& m) {
  switch (k) {
    case Kind::kInterrupted:
      throw Interrupted(m);
    case Kind::kIo:
      throw IoError(m);
    case Kind::kShape:
      throw ShapeError(m);
    case Kind::kInvalid:
      throw InvalidArgument(m);
    case Kind::kUnknownName:
      throw UnknownName(m);
    case Kind::kType:
      throw TypeError(m);
    case Kind::kPrecondition:
      throw PreconditionError(m);
    case Kind::kNotImplemented:
      throw NotImplementedError(m);
    default:
      throw std::runtime_error(m);
  }
}

// What the ranks exchange is written with core's byte encoding; doubles travel as their
// bits, so that an infinite SQNR survives. Strings carry a uint64 length.
void put_str(ByteWriter& w, const std::string& s, std::string_view what) { w.put_string<uint64_t>(s, what); }
std::string get_str(ByteReader& r, std::string_view what) { return r.get_string<uint64_t>(what); }

void put_opt(ByteWriter& w, const std::optional<double>& v) {
  w.put<uint8_t>(v ? 1 : 0);
  if (v) w.put(*v);
}
std::optional<double> get_opt(ByteReader& r, std::string_view what) {
  if (r.get<uint8_t>(what) == 0) return std::nullopt;
  return r.get<double>(what);
}

void encode_report(ByteWriter& w, const TensorReport& t, std::size_t module_index) {
  w.put<uint64_t>(module_index);
  put_str(w, t.module, "module name");
  w.put<uint64_t>(t.shape.size());
  for (const int64_t d : t.shape) w.put(d);
  put_str(w, t.dtype, "dtype");
  put_str(w, t.observer, "observer");
  w.put(t.rel_mse);
  w.put(t.sqnr_db);
  w.put(t.seconds);
  put_opt(w, t.baseline_rel_mse);
  put_opt(w, t.baseline_sqnr_db);
  put_opt(w, t.global_scale);
}

TensorReport decode_report(ByteReader& r, std::size_t& module_index) {
  TensorReport t;
  module_index = r.get<uint64_t>("module index");
  t.module = get_str(r, "module name");
  const auto rank = r.get<uint64_t>("shape rank");
  QOBS_CHECK(rank <= r.remaining() / sizeof(int64_t), IoError, r.source(), ": shape rank ", rank, " of '", t.module,
             "' exceeds the message");
  t.shape.resize(rank);
  for (auto& d : t.shape) d = r.get<int64_t>("shape");
  t.dtype = get_str(r, "dtype");
  t.observer = get_str(r, "observer");
  t.rel_mse = r.get<double>("rel_mse");
  t.sqnr_db = r.get<double>("sqnr_db");
  t.seconds = r.get<double>("seconds");
  t.baseline_rel_mse = get_opt(r, "baseline_rel_mse");
  t.baseline_sqnr_db = get_opt(r, "baseline_sqnr_db");
  t.global_scale = get_opt(r, "global_scale");
  return t;
}

/// The reader of rank `r`'s part of an allgather.
ByteReader message_from(const std::vector<std::string>& all, std::size_t r) {
  return ByteReader(std::string_view(all[r]), "the message from rank " + std::to_string(r));
}

std::string host_name_of_process() {
  char b[256] = {};
  if (gethostname(b, sizeof b - 1) != 0 || b[0] == '\0') return "localhost";
  return b;
}

}  // namespace

void agree_on_errors(Collective& c, std::exception_ptr error) {
  const auto [kind, text] = classify(error);
  ByteWriter w;
  w.put(kind);
  put_str(w, text, "error message");
  const std::vector<std::string> all = c.allgather(w.str());
  for (std::size_t r = 0; r < all.size(); ++r) {
    ByteReader rd = message_from(all, r);
    const auto k = rd.get<Kind>("error kind");
    if (k == Kind::kNone) continue;
    const std::string m = get_str(rd, "error message");
    // This rank's own error keeps its original object (and type) when it is the first.
    if (static_cast<int>(r) == c.rank() && error) std::rethrow_exception(error);
    throw_kind(k, m);
  }
}

std::vector<std::string> OneProcess::allgather(const std::string& bytes) { return {bytes}; }

void run_step(Collective& c, const std::function<void()>& body, const std::function<void()>& before_agreeing) {
  std::exception_ptr err;
  try {
    body();
  } catch (...) {
    err = std::current_exception();
  }
  if (before_agreeing) before_agreeing();
  agree_on_errors(c, err);
}

void share_output_folder(Collective& c, OutputFolder& folder) {
  ByteWriter w;
  put_str(w, folder.out.string(), "output folder");
  put_str(w, folder.tmp.string(), "temporary folder");
  put_str(w, folder.host, "host name");
  const std::vector<std::string> all = c.allgather(c.rank() == 0 ? w.str() : std::string());
  ByteReader rd = message_from(all, 0);
  folder.out = get_str(rd, "output folder");
  folder.tmp = get_str(rd, "temporary folder");
  folder.host = get_str(rd, "host name");
}

void join_shard_files(const Collective& c, const OutputFolder& folder, const std::function<void()>& open_writers) {
  if (c.rank() == 0) return;
  QOBS_CHECK(fs::is_directory(folder.tmp), IoError, "rank ", c.rank(), " on host ", host_name_of_process(),
             " cannot see the temporary folder ", folder.tmp.string(), " that rank 0 created on host ", folder.host,
             ": MPI mode needs the output folder on a file system shared by every rank");
  open_writers();
}

void skip_other_ranks_tensors(const Collective& c, const Checkpoint& ckpt, const QuantizePlan& plan,
                              std::span<const std::size_t> mine,
                              const std::vector<std::unique_ptr<SafetensorsWriter>>& writers) {
  if (c.size() == 1) return;  // one rank writes every tensor
  std::set<std::string> own;
  for (const std::size_t j : mine)
    for (const std::size_t mi : plan.jobs[j].members)
      for (const PlannedTensor& t : plan.modules[mi].outputs) own.insert(plan.modules[mi].module + "." + t.local);
  for (std::size_t s = 0; s < writers.size(); ++s)
    for (const TensorSpec& spec : plan.shard_specs[s]) {
      const bool passthrough = !plan.replaced.count(spec.name) && ckpt.find(spec.name).has_value();
      if (!own.count(spec.name) && !(c.rank() == 0 && passthrough)) writers[s]->skip(spec.name);
    }
}

RankReport this_rank(const Collective& c, const QuantizePlan& plan, std::span<const std::size_t> mine, bool baseline) {
  RankReport me;
  me.rank = c.rank();
  me.host = host_name_of_process();
  me.jobs = static_cast<int64_t>(mine.size());
  for (const std::size_t j : mine) me.cost += job_cost(plan, j, baseline);
  return me;
}

void gather_reports(Collective& c, const QuantizePlan& plan, std::span<const std::size_t> mine, const RankReport& me,
                    QuantizeReport& report) {
  ByteWriter w;
  w.put<uint64_t>(static_cast<uint64_t>(me.modules));
  for (const std::size_t j : mine)
    for (const std::size_t mi : plan.jobs[j].members) encode_report(w, report.tensors[mi], mi);
  put_str(w, me.host, "host name");
  w.put(me.jobs);
  w.put(me.cost);
  w.put(me.seconds);
  const std::vector<std::string> all = c.allgather(w.str());
  for (std::size_t r = 0; r < all.size(); ++r) {
    ByteReader rd = message_from(all, r);
    RankReport k;
    k.rank = static_cast<int>(r);
    k.modules = static_cast<int64_t>(rd.get<uint64_t>("module count"));
    for (int64_t i = 0; i < k.modules; ++i) {
      std::size_t mi = 0;
      TensorReport t = decode_report(rd, mi);
      QOBS_CHECK(mi < report.tensors.size(), IoError, "rank ", r, " reported module ", mi, " of ",
                 report.tensors.size());
      t.rank = static_cast<int>(r);
      report.tensors[mi] = std::move(t);
    }
    k.host = get_str(rd, "host name");
    k.jobs = rd.get<int64_t>("job count");
    k.cost = rd.get<double>("cost");
    k.seconds = rd.get<double>("seconds");
    report.ranks.push_back(std::move(k));
  }
}

}  // namespace qobs::detail
