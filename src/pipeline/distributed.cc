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
#include <filesystem>
#include <memory>
#include <optional>
#include <set>

#include "core/bytes.h"
#include "core/check.h"
#include "pipeline/run.h"

namespace qobs::detail {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

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
    ByteWriter w;
    put_str(w, folder.out.string(), "output folder");
    put_str(w, folder.tmp.string(), "temporary folder");
    put_str(w, folder.host, "host name");
    const std::vector<std::string> all = c.allgather(rank == 0 ? w.str() : std::string());
    ByteReader rd = message_from(all, 0);
    folder.out = get_str(rd, "output folder");
    folder.tmp = get_str(rd, "temporary folder");
    folder.host = get_str(rd, "host name");
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
      ByteWriter w;
      w.put<uint64_t>(static_cast<uint64_t>(me.modules));
      for (const std::size_t j : mine)
        for (const std::size_t mi : plan->jobs[j].members) encode_report(w, report.tensors[mi], mi);
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
