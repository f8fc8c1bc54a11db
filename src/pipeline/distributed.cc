// quantize_checkpoint over several ranks. Every rank plans the same conversion from the
// same options and header (the plan is deterministic), so the shard files' headers and
// every tensor's offset are known everywhere: rank 0 creates the temporary folder and
// the shard files with their headers, each rank writes its own jobs' tensors at their
// planned offsets, and rank 0 writes the passthrough tensors, the index, config.json and
// the report, then publishes. The output is therefore the single-process one byte for
// byte; only the report's timings differ (as between two single-process runs) and it
// gains the `rank` of each tensor and a `ranks` list.
#include "pipeline/distributed.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>

#include "core/check.h"
#include "pipeline/run.h"

namespace qobs::detail {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// A small byte encoding for what the ranks exchange; doubles travel as their bits so
// that an infinite SQNR survives.
struct Writer {
  std::string out;
  template <typename T>
  void pod(T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    out += s;
  }
  void opt(const std::optional<double>& v) {
    pod<uint8_t>(v ? 1 : 0);
    if (v) pod(*v);
  }
};

struct Reader {
  const std::string& in;
  std::size_t at = 0;
  template <typename T>
  T pod() {
    QOBS_CHECK(at + sizeof(T) <= in.size(), IoError, "a message from another rank is truncated (", in.size(),
               " bytes)");
    T v;
    std::memcpy(&v, in.data() + at, sizeof v);
    at += sizeof v;
    return v;
  }
  std::string str() {
    const auto n = pod<uint64_t>();
    QOBS_CHECK(n <= in.size() - at, IoError, "a message from another rank is truncated (", in.size(), " bytes)");
    std::string s = in.substr(at, n);
    at += n;
    return s;
  }
  std::optional<double> opt() {
    if (pod<uint8_t>() == 0) return std::nullopt;
    return pod<double>();
  }
};

// The exception types a rank may fail with, so that the others rethrow the same type
// (the CLI's exit status and Python's exception class depend on it).
enum class Kind : uint8_t { kNone, kInterrupted, kIo, kShape, kInvalid, kUnknownName, kType, kPrecondition,
                            kNotImplemented, kOther };

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
    case Kind::kInterrupted: throw Interrupted(m);
    case Kind::kIo: throw IoError(m);
    case Kind::kShape: throw ShapeError(m);
    case Kind::kInvalid: throw InvalidArgument(m);
    case Kind::kUnknownName: throw UnknownName(m);
    case Kind::kType: throw TypeError(m);
    case Kind::kPrecondition: throw PreconditionError(m);
    case Kind::kNotImplemented: throw NotImplementedError(m);
    default: throw std::runtime_error(m);
  }
}

std::string encode_report(const TensorReport& t, std::size_t module_index) {
  Writer w;
  w.pod<uint64_t>(module_index);
  w.str(t.module);
  w.pod<uint64_t>(t.shape.size());
  for (const int64_t d : t.shape) w.pod(d);
  w.str(t.dtype);
  w.str(t.observer);
  w.pod(t.rel_mse);
  w.pod(t.sqnr_db);
  w.pod(t.seconds);
  w.opt(t.baseline_rel_mse);
  w.opt(t.baseline_sqnr_db);
  w.opt(t.global_scale);
  return w.out;
}

TensorReport decode_report(Reader& r, std::size_t& module_index) {
  TensorReport t;
  module_index = r.pod<uint64_t>();
  t.module = r.str();
  t.shape.resize(r.pod<uint64_t>());
  for (auto& d : t.shape) d = r.pod<int64_t>();
  t.dtype = r.str();
  t.observer = r.str();
  t.rel_mse = r.pod<double>();
  t.sqnr_db = r.pod<double>();
  t.seconds = r.pod<double>();
  t.baseline_rel_mse = r.opt();
  t.baseline_sqnr_db = r.opt();
  t.global_scale = r.opt();
  return t;
}

std::string host_name_of_process() {
  char b[256] = {};
  if (gethostname(b, sizeof b - 1) != 0 || b[0] == '\0') return "localhost";
  return b;
}

}  // namespace

void agree_on_errors(Collective& c, std::exception_ptr error) {
  const auto [kind, text] = classify(error);
  Writer w;
  w.pod(kind);
  w.str(text);
  const std::vector<std::string> all = c.allgather(w.out);
  for (std::size_t r = 0; r < all.size(); ++r) {
    Reader rd{all[r]};
    const auto k = rd.pod<Kind>();
    if (k == Kind::kNone) continue;
    const std::string m = rd.str();
    // This rank's own error keeps its original object (and type) when it is the first.
    if (static_cast<int>(r) == c.rank() && error) std::rethrow_exception(error);
    throw_kind(k, m);
  }
}

QuantizeReport quantize_distributed(const QuantizeOptions& o, const ProgressCallback& progress) {
  Collective& c = *o.collective;
  const int rank = c.rank();
  const int ranks = c.size();
  const auto t0 = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };

  // 1. Plan, on every rank alike. Only rank 0 checks OUT and removes stale folders: those
  // checks act on the file system, which the ranks share.
  OutputFolder folder;
  std::optional<Checkpoint> ckpt;
  std::optional<QuantizePlan> plan;
  std::exception_ptr err;
  try {
    std::vector<PlanGroup> groups = resolve_groups(o);
    if (rank == 0) folder = prepare_output(o);
    ckpt = Checkpoint::open(o.model_path);
    plan = plan_quantize(*ckpt, o, std::move(groups));
  } catch (...) {
    err = std::current_exception();
  }
  agree_on_errors(c, err);
  {
    Writer w;
    w.str(folder.out.string());
    w.str(folder.tmp.string());
    w.str(folder.host);
    const std::vector<std::string> all = c.allgather(rank == 0 ? w.out : std::string());
    Reader rd{all[0]};
    folder.out = rd.str();
    folder.tmp = rd.str();
    folder.host = rd.str();
  }
  QuantizeReport report = start_report(o, *plan, *ckpt, folder);
  const std::vector<std::vector<std::size_t>> assignment = assign_jobs(*plan, ranks, o.baseline);
  const std::vector<std::size_t>& mine = assignment[static_cast<std::size_t>(rank)];

  const auto check_cancel = [&] {
    if (o.cancel && o.cancel->load())
      QOBS_THROW(Interrupted, o.dry_run ? o.model_path : folder.out.string(), ": interrupted before completion",
                 o.dry_run ? "" : "; the partial output was removed and the output folder left as it was");
  };
  std::vector<std::unique_ptr<SafetensorsWriter>> writers;
  const auto open_writers = [&](SafetensorsWriter::Mode mode) {
    for (std::size_t s = 0; s < ckpt->shards().size(); ++s)
      writers.push_back(std::make_unique<SafetensorsWriter>((folder.tmp / ckpt->shard_names()[s]).string(),
                                                            plan->shard_specs[s],
                                                            std::map<std::string, std::string>{{"format", "pt"}}, mode));
  };
  RankReport me;
  me.rank = rank;
  me.host = host_name_of_process();
  me.jobs = static_cast<int64_t>(mine.size());
  for (const std::size_t j : mine) me.cost += job_cost(*plan, j, o.baseline);
  try {
    // 2. Rank 0 creates the temporary folder and the shard files with their headers;
    // after the barrier the others open them. A rank that cannot see them does not
    // share OUT's file system with rank 0, which this mode needs.
    err = nullptr;
    try {
      check_cancel();
      if (!o.dry_run && rank == 0) {
        create_temporary(folder);
        open_writers(SafetensorsWriter::Mode::kCreate);
      }
    } catch (...) {
      err = std::current_exception();
    }
    agree_on_errors(c, err);
    if (!o.dry_run) c.guard_temporary(folder.tmp, o.cancel);
    try {
      if (!o.dry_run && rank != 0) {
        QOBS_CHECK(fs::is_directory(folder.tmp), IoError, "rank ", rank, " on host ", me.host,
                   " cannot see the temporary folder ", folder.tmp.string(), " that rank 0 created on host ",
                   folder.host, ": MPI mode needs the output folder on a file system shared by every rank");
        open_writers(SafetensorsWriter::Mode::kJoin);
      }
      if (!o.dry_run) {
        // Each rank writes its jobs' outputs; rank 0 also the passthrough tensors.
        std::set<std::string> own;
        for (const std::size_t j : mine)
          for (const std::size_t mi : plan->jobs[j].members)
            for (const PlannedTensor& t : plan->modules[mi].outputs) own.insert(plan->modules[mi].module + "." + t.local);
        for (std::size_t s = 0; s < writers.size(); ++s)
          for (const TensorSpec& spec : plan->shard_specs[s]) {
            const bool passthrough = !plan->replaced.count(spec.name) && ckpt->find(spec.name).has_value();
            if (!own.count(spec.name) && !(rank == 0 && passthrough)) writers[s]->skip(spec.name);
          }
      }
    } catch (...) {
      err = std::current_exception();
    }
    agree_on_errors(c, err);

    // 3. Calibrate this rank's jobs and write their tensors. Rank 0 shows the progress of
    // every rank: the others post their counts, which it collects between its own jobs
    // and, once done, until every rank has finished.
    err = nullptr;
    int64_t done = 0;
    int finished = 1;
    const auto total = static_cast<int64_t>(plan->modules.size());
    const auto collect = [&](bool wait) {
      for (const auto& [from, n] : c.receive_progress(wait)) {
        if (n < 0) {
          ++finished;
          continue;
        }
        done += n;
        if (progress) progress(Progress{.done = done, .total = total, .elapsed_s = elapsed(), .last = nullptr});
      }
    };
    const auto calib_start = Clock::now();
    try {
      // rank 0 alone writes the pass-through tensors, between waits for its jobs
      PassthroughCopy passthrough(*ckpt, *plan, o.dry_run || rank != 0 ? nullptr : &writers, check_cancel);
      report.copied_tensors = passthrough.count();
      run_jobs(*ckpt, *plan, o, mine, check_cancel, [&](std::size_t j, JobResult&& r) {
        const Job& job = plan->jobs[j];
        for (std::size_t k = 0; k < job.members.size(); ++k) {
          const std::size_t mi = job.members[k];
          const PlannedModule& m = plan->modules[mi];
          if (!o.dry_run)
            for (const auto& [local, t] : r.outputs[k].tensors) writers[m.shard]->write(m.module + "." + local, t);
          ckpt->shards()[m.shard].release(*m.weight);
          report.tensors[mi] = std::move(r.reports[k]);
          report.tensors[mi].rank = rank;
          ++me.modules;
          if (rank == 0) {
            ++done;
            if (progress) progress(Progress{.done = done, .total = total, .elapsed_s = elapsed(), .last = &report.tensors[mi]});
          }
        }
        if (rank != 0) c.post_progress(static_cast<int64_t>(job.members.size()));
        if (rank == 0) collect(false);
      }, [&] { return passthrough.write_next(); });
      passthrough.write_all();
      for (auto& w : writers) report.output_bytes += w->data_size();
      for (auto& w : writers) w->close();
    } catch (...) {
      err = std::current_exception();
    }
    me.seconds = std::chrono::duration<double>(Clock::now() - calib_start).count();
    if (rank != 0) {
      c.post_progress(-1);
    } else {
      while (finished < ranks) collect(true);
    }
    agree_on_errors(c, err);

    // 4. Gather the report lines and the ranks' figures.
    {
      Writer w;
      w.pod<uint64_t>(static_cast<uint64_t>(me.modules));
      for (const std::size_t j : mine)
        for (const std::size_t mi : plan->jobs[j].members) w.out += encode_report(report.tensors[mi], mi);
      w.str(me.host);
      w.pod(me.jobs);
      w.pod(me.cost);
      w.pod(me.seconds);
      const std::vector<std::string> all = c.allgather(w.out);
      for (std::size_t r = 0; r < all.size(); ++r) {
        Reader rd{all[r]};
        RankReport k;
        k.rank = static_cast<int>(r);
        k.modules = static_cast<int64_t>(rd.pod<uint64_t>());
        for (int64_t i = 0; i < k.modules; ++i) {
          std::size_t mi = 0;
          TensorReport t = decode_report(rd, mi);
          QOBS_CHECK(mi < report.tensors.size(), IoError, "rank ", r, " reported module ", mi, " of ",
                     report.tensors.size());
          t.rank = static_cast<int>(r);
          report.tensors[mi] = std::move(t);
        }
        k.host = rd.str();
        k.jobs = rd.pod<int64_t>();
        k.cost = rd.pod<double>();
        k.seconds = rd.pod<double>();
        report.ranks.push_back(std::move(k));
      }
    }

    // 5. Rank 0 publishes; then every rank learns whether that worked.
    err = nullptr;
    try {
      if (rank == 0) {
        if (o.dry_run) {
          report.seconds = elapsed();
          if (o.report_dir) write_reports(*o.report_dir, report);
        } else {
          if (ckpt->sharded()) write_index(folder.tmp, *ckpt, *plan, report.output_bytes);
          write_config(folder.tmp, *ckpt, *plan);
          copy_other_files(o.model_path, *ckpt, folder.tmp, check_cancel);
          report.seconds = elapsed();
          write_reports(o.report_dir ? fs::path(*o.report_dir) : folder.tmp, report);
          c.publish_guarded([&] {
            check_cancel();  // the last moment at which stopping leaves OUT untouched
            publish(folder);
          });
        }
      }
    } catch (...) {
      err = std::current_exception();
    }
    agree_on_errors(c, err);
    report.seconds = elapsed();
    if (!o.dry_run) c.guard_temporary({}, nullptr);
  } catch (...) {
    writers.clear();
    if (!o.dry_run) {
      if (rank == 0) remove_quietly(folder.tmp);
      c.guard_temporary({}, nullptr);
    }
    rethrow_naming_output(folder);
  }
  return report;
}

}  // namespace qobs::detail
