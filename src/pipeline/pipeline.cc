// quantize_checkpoint, read top to bottom as its steps: plan (plan.cc: scheme, targets,
// fused groups, output tensors, every check that needs no data) -> temporary folder ->
// schedule and calibrate (run.cc: one thread pool for layers and kernels) -> write
// (here: each job's tensors in order as they arrive, then the passthrough tensors) ->
// publish (publish.cc: index, config.json, copied files, reports, the atomic rename).
// One process or several run the same steps (distributed.h).
#include "qobs/pipeline.h"

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "kernels/parallel/thread_pool.h"
#include "qobs/cuda.h"
#include "pipeline/device.h"
#include "pipeline/distributed.h"
#include "pipeline/plan.h"
#include "pipeline/publish.h"
#include "pipeline/run.h"

namespace qobs {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace detail {

QuantizeReport start_report(const QuantizeOptions& o, const detail::QuantizePlan& plan, const Checkpoint& ckpt,
                            const detail::OutputFolder& folder) {
  QuantizeReport report;
  report.model_path = o.model_path;
  report.output_dir = folder.out.string();
  report.scheme = o.config ? o.config_source : o.scheme;
  report.format = plan.format;
  for (const detail::PlanGroup& g : plan.groups)
    if (report.observer.find(g.observer) == std::string::npos)
      report.observer += (report.observer.empty() ? "" : ",") + g.observer;
  report.dry_run = o.dry_run;
  report.ignored = plan.targets.ignored;
  report.input_bytes = ckpt.total_bytes();
  report.tensors.resize(plan.modules.size());
  return report;
}

}  // namespace detail

QuantizeReport quantize_checkpoint(const QuantizeOptions& options, const ProgressCallback& progress) {
  QOBS_CHECK(options.threads >= 0, InvalidArgument, "--threads must be at least 1 (or 0 for every core), got ",
             options.threads);
  // 0 (the default) is the machine's budget: QOBS_NUM_THREADS, else every core.
  QuantizeOptions o = options;
  o.threads = kernels::resolve_num_threads(options.threads);
  // One sequence of steps for one process and for several (distributed.h): each step
  // runs on every rank, then the ranks agree on its errors. A single process is a
  // Collective of one; the report names ranks only when a Collective was given.
  detail::OneProcess one_process;
  Collective& c = o.collective ? *o.collective : one_process;
  const bool distributed = o.collective != nullptr;
  const int rank = c.rank();
  const auto t0 = Clock::now();
  const auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };

  // 1. Plan, on every rank alike: options, output folder and checkpoint header; no tensor
  //    is read yet. Only rank 0 checks OUT and removes stale folders: that acts on the
  //    file system, which the ranks share.
  detail::OutputFolder folder;
  std::optional<Checkpoint> ckpt;
  std::optional<detail::QuantizePlan> plan;
  detail::run_step(c, [&] {
    // a device the runtime sees, checked before anything is read or written, on every
    // rank (a rank on a host without one fails the run for all)
    o.device = resolve_device(o.device);
    std::vector<detail::PlanGroup> groups = detail::resolve_groups(o);
    if (rank == 0) folder = detail::prepare_output(o);
    ckpt = Checkpoint::open(o.model_path);
    plan = detail::plan_quantize(*ckpt, o, std::move(groups));
  });
  detail::share_output_folder(c, folder);
  QuantizeReport report = detail::start_report(o, *plan, *ckpt, folder);
  // --device cuda: which jobs run there is known from the plan; rank 0 says so before
  // any tensor is read
  std::optional<detail::Placement> placement;
  std::optional<detail::DeviceRunner> device;
  if (o.device.kind == DeviceSpec::Kind::kCuda) {
    placement = detail::place_jobs(*plan, o.baseline);
    device.emplace(*o.device.index, *placement);
    if (rank == 0 && o.log) {
      // the counts are the whole run's; under several ranks each is on its own device
      o.log("--device " + o.device.str() + (distributed ? " (rank 0)" : "") + ": " +
            cuda::describe_device(*o.device.index) + ": " + std::to_string(placement->device_modules) + " of " +
            std::to_string(placement->device_modules + placement->cpu_modules) +
            " weights are calibrated, quantized and packed on the " + (distributed ? "ranks' GPUs" : "GPU"));
      for (const std::string& line : placement->cpu_notes(*plan)) o.log(line);
    }
  }
  const std::vector<std::size_t> mine =
      detail::assign_jobs(*plan, c.size(), o.baseline)[static_cast<std::size_t>(rank)];
  RankReport me;
  if (distributed) me = detail::this_rank(c, *plan, mine, o.baseline);

  const auto check_cancel = [&] {
    if (o.cancel && o.cancel->load())
      QOBS_THROW(Interrupted, o.dry_run ? o.model_path : folder.out.string(), ": interrupted before completion",
                 o.dry_run ? "" : "; the partial output was removed and the output folder left as it was");
  };
  std::vector<std::unique_ptr<SafetensorsWriter>> writers;  // per shard; none for a dry run
  const auto open_writers = [&](SafetensorsWriter::Mode mode) {
    for (std::size_t s = 0; s < ckpt->shards().size(); ++s)
      writers.push_back(
          std::make_unique<SafetensorsWriter>((folder.tmp / ckpt->shard_names()[s]).string(), plan->shard_specs[s],
                                              std::map<std::string, std::string>{{"format", "pt"}}, mode));
  };
  try {
    // 2. The temporary folder: rank 0 creates it and the shard files with their headers;
    //    after the agreement the other ranks open them, each leaving to the others the
    //    tensors they write. A rank that cannot see them does not share OUT's file
    //    system with rank 0, which several ranks need.
    detail::run_step(c, [&] {
      check_cancel();
      if (!o.dry_run && rank == 0) {
        detail::create_temporary(folder);
        open_writers(SafetensorsWriter::Mode::kCreate);
      }
    });
    if (!o.dry_run) c.guard_temporary(folder.tmp, o.cancel);
    detail::run_step(c, [&] {
      if (o.dry_run) return;
      detail::join_shard_files(c, folder, [&] { open_writers(SafetensorsWriter::Mode::kJoin); });
      detail::skip_other_ranks_tensors(c, *ckpt, *plan, mine, writers);
    });

    // 3. Schedule and calibrate this rank's jobs and write each one's tensors, in job
    //    order; rank 0 also writes the tensors that pass through unchanged, while it
    //    waits for the jobs' results (a copy that would otherwise be a serial tail after
    //    the last job), the rest after the jobs. Rank 0 shows the progress of every rank:
    //    the others post their counts, which it collects between its own jobs and, once
    //    done, until every rank has finished.
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
    detail::run_step(
        c,
        [&] {
          detail::PassthroughCopy passthrough(*ckpt, *plan, o.dry_run || rank != 0 ? nullptr : &writers, check_cancel);
          report.copied_tensors = passthrough.count();
          detail::run_jobs(
              *ckpt, *plan, o, mine, check_cancel,
              [&](std::size_t j, detail::JobResult&& r) {
                const detail::Job& job = plan->jobs[j];
                for (std::size_t k = 0; k < job.members.size(); ++k) {
                  const std::size_t mi = job.members[k];
                  const detail::PlannedModule& m = plan->modules[mi];
                  if (!o.dry_run)
                    for (const auto& [local, t] : r.outputs[k].tensors)
                      writers[m.shard]->write(m.module + "." + local, t);
                  ckpt->shards()[m.shard].release(*m.weight);
                  report.tensors[mi] = std::move(r.reports[k]);
                  if (distributed) report.tensors[mi].rank = rank;
                  ++me.modules;
                  if (rank == 0) {
                    ++done;
                    if (progress)
                      progress(
                          Progress{.done = done, .total = total, .elapsed_s = elapsed(), .last = &report.tensors[mi]});
                  }
                }
                if (rank != 0) c.post_progress(static_cast<int64_t>(job.members.size()));
                if (rank == 0) collect(false);
              },
              [&] { return passthrough.write_next(); }, device ? &*device : nullptr);
          passthrough.write_all();
          for (auto& w : writers) report.output_bytes += w->data_size();
          for (auto& w : writers) w->close();
        },
        [&] {
          me.seconds = std::chrono::duration<double>(Clock::now() - calib_start).count();
          if (rank != 0) c.post_progress(-1);
          while (rank == 0 && finished < c.size()) collect(true);
        });

    // 4. Every rank's report lines and figures, on every rank.
    if (distributed) detail::gather_reports(c, *plan, mine, me, report);

    // 5. Publish (rank 0): the files beside the tensors, the reports, then the rename into
    //    place; then every rank learns whether that worked.
    detail::run_step(c, [&] {
      if (rank != 0) return;
      if (o.dry_run) {
        report.seconds = elapsed();
        if (o.report_dir) detail::write_reports(*o.report_dir, report);
        return;
      }
      if (ckpt->sharded()) detail::write_index(folder.tmp, *ckpt, *plan, report.output_bytes);
      detail::write_config(folder.tmp, *ckpt, *plan);
      detail::copy_other_files(o.model_path, *ckpt, folder.tmp, check_cancel);
      report.seconds = elapsed();
      detail::write_reports(o.report_dir ? fs::path(*o.report_dir) : folder.tmp, report);
      c.publish_guarded([&] {
        check_cancel();  // the last moment at which stopping leaves OUT untouched
        detail::publish(folder);
      });
    });
    if (rank != 0) report.seconds = elapsed();  // rank 0 keeps the figure its report holds
    if (!o.dry_run) c.guard_temporary({}, nullptr);
  } catch (...) {
    writers.clear();
    if (!o.dry_run) {
      if (rank == 0) detail::remove_quietly(folder.tmp);
      c.guard_temporary({}, nullptr);
    }
    detail::rethrow_naming_output(folder);
  }
  return report;
}

// ---- inspect ----------------------------------------------------------------------

std::string inspect_checkpoint(const std::string& path, bool list_tensors) {
  const Checkpoint c = Checkpoint::open(path);
  std::ostringstream os;
  os << "checkpoint: " << c.dir() << (c.sharded() ? " (sharded)" : "") << "\n";
  for (std::size_t s = 0; s < c.shards().size(); ++s)
    os << "  " << c.shard_names()[s] << ": " << c.shards()[s].tensors().size() << " tensors, "
       << c.shards()[s].file_size() << " bytes\n";
  std::map<std::string, std::pair<int64_t, uint64_t>> by_dtype;
  int64_t quantized = 0;
  for (const auto& s : c.shards())
    for (const auto& t : s.tensors()) {
      auto& e = by_dtype[std::string(safetensors_dtype_name(t.dtype))];
      ++e.first;
      e.second += t.nbytes();
      if (std::string_view(t.name).ends_with(".weight_scale")) ++quantized;
    }
  os << "tensors: " << c.num_tensors() << ", " << c.total_bytes() << " bytes\n";
  for (const auto& [dt, e] : by_dtype) os << "  " << dt << ": " << e.first << " tensors, " << e.second << " bytes\n";
  if (!c.config_json().empty()) {
    nlohmann::json cfg;
    try {
      cfg = nlohmann::json::parse(c.config_json());
    } catch (const nlohmann::json::exception& e) {
      QOBS_THROW(IoError, (fs::path(c.dir()) / "config.json").string(), ": not valid JSON: ", e.what());
    }
    if (cfg.is_object() && cfg.contains("architectures"))
      os << "architectures: " << cfg["architectures"].dump() << "\n";
    if (cfg.is_object() && cfg.contains("quantization_config")) {
      // inspect describes whatever the file holds: a field of an unexpected type is
      // shown as its JSON text, never trusted to be a string or number.
      const auto field = [](const nlohmann::json& obj, const char* key) -> std::string {
        if (!obj.is_object() || !obj.contains(key)) return "?";
        const auto& v = obj[key];
        return v.is_string() ? v.get<std::string>() : v.dump();
      };
      const auto& q = cfg["quantization_config"];
      os << "quantization_config: " << field(q, "quant_method") << ", format " << field(q, "format") << ", status "
         << field(q, "quantization_status") << ", version " << field(q, "version") << "\n";
      if (q.is_object() && q.contains("config_groups") && q["config_groups"].is_object())
        for (auto it = q["config_groups"].begin(); it != q["config_groups"].end(); ++it) {
          const auto& g = it.value();
          os << "  " << it.key() << ": targets "
             << (g.is_object() && g.contains("targets") ? g["targets"].dump() : "[]");
          if (g.is_object() && g.contains("weights") && g["weights"].is_object()) {
            const auto& w = g["weights"];
            os << ", weights " << field(w, "type") << field(w, "num_bits") << " " << field(w, "strategy");
            if (w.contains("group_size") && w["group_size"].is_number()) os << " group " << w["group_size"].dump();
            os << (w.contains("symmetric") && w["symmetric"] == false ? " asym" : " sym");
          }
          if (g.is_object() && g.contains("input_activations") && g["input_activations"].is_object())
            os << ", inputs " << field(g["input_activations"], "type") << field(g["input_activations"], "num_bits");
          os << "\n";
        }
      if (q.is_object() && q.contains("ignore") && q["ignore"].is_array())
        os << "  ignore: " << q["ignore"].dump() << "\n";
      os << "  quantized modules (weight_scale tensors): " << quantized << "\n";
    } else {
      os << "quantization_config: none\n";
    }
  }
  if (list_tensors)
    for (std::size_t s = 0; s < c.shards().size(); ++s)
      for (const auto& t : c.shards()[s].tensors())
        os << "  " << t.name << "  " << safetensors_dtype_name(t.dtype) << " " << shape_str(t.shape)
           << (c.sharded() ? "  [" + c.shard_names()[s] + "]" : "") << "\n";
  return os.str();
}

}  // namespace qobs
