#include "pipeline/run.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <algorithm>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>

#include "kernels/kernels.h"
#include "kernels/parallel/thread_pool.h"
#include "pipeline/device.h"
#include "qobs/observer.h"

namespace qobs::detail {

namespace {

using Clock = std::chrono::steady_clock;

struct Metrics {
  double rel_mse;
  double sqnr_db;
};

Metrics measure(const kernels::ErrorSums& sums) {
  const double sig = sums.signal, err = sums.error;
  const double rel = sig > 0 ? err / sig : (err > 0 ? INFINITY : 0.0);
  const double sqnr = err > 0 ? 10.0 * std::log10(sig / err) : INFINITY;
  return {rel, sqnr};
}

// Calibrates the members of a job with one observer name and returns their qparams.
// `importance` (per member, null for none) becomes the observer's importance statistics
// as attach + accumulate_input would have left them (R6.12.4), before any member
// observes: a fused partner searches when the first member observes (R6.10.3).
std::vector<QParams> calibrate(const std::vector<TensorView>& views, const std::vector<std::string>& labels,
                               const QuantizationArgs& args, const std::string& observer,
                               const std::vector<const ModuleImportance*>& importance) {
  std::vector<std::shared_ptr<Observer>> obs;
  for (std::size_t i = 0; i < views.size(); ++i) {
    ObserverOptions opt;
    opt.label = labels[i];
    obs.push_back(load_observer(observer, "weight", args, {}, opt));
    if (const ModuleImportance* imp = importance.empty() ? nullptr : importance[i]) give_importance(*obs.back(), *imp);
    obs.back()->bind_weight(views[i]);
  }
  if (obs.size() > 1) fuse_observers(obs);
  std::vector<QParams> qp;
  for (std::size_t i = 0; i < views.size(); ++i) {
    obs[i]->observe(views[i]);
    qp.push_back(obs[i]->get_qparams());
  }
  return qp;
}

}  // namespace

JobResult finish_job(const QuantizePlan& plan, std::size_t j, std::vector<Compressed>&& outputs,
                     const std::vector<QParams>& qp, double secs, bool baseline,
                     const std::function<std::vector<kernels::ErrorSums>()>& baseline_errors) {
  const Job& job = plan.jobs[j];
  const PlanGroup& group = plan.group_of(job);
  JobResult r;
  r.outputs = std::move(outputs);
  for (std::size_t k = 0; k < job.members.size(); ++k) {
    const PlannedModule& m = plan.modules[job.members[k]];
    TensorReport t;
    t.module = m.module;
    t.shape = m.weight->shape;
    t.dtype = std::string(dtype_name(m.weight->dtype));
    t.observer = group.observer;
    const Metrics mt = measure(r.outputs[k].error);
    t.rel_mse = mt.rel_mse;
    t.sqnr_db = mt.sqnr_db;
    t.seconds = secs / static_cast<double>(job.members.size());
    if (qp[k].global_scale) t.global_scale = qp[k].global_scale->get(0);
    r.reports.push_back(std::move(t));
  }
  if (!baseline) return r;
  if (group.observer == kBaselineObserver) {
    for (auto& t : r.reports) {
      t.baseline_rel_mse = t.rel_mse;
      t.baseline_sqnr_db = t.sqnr_db;
    }
    return r;
  }
  const std::vector<kernels::ErrorSums> errors = baseline_errors();
  for (std::size_t k = 0; k < job.members.size(); ++k) {
    const Metrics mt = measure(errors[k]);
    r.reports[k].baseline_rel_mse = mt.rel_mse;
    r.reports[k].baseline_sqnr_db = mt.sqnr_db;
  }
  return r;
}

JobResult calibrate_job(const Checkpoint& ckpt, const QuantizePlan& plan, std::size_t j, bool baseline) {
  const Job& job = plan.jobs[j];
  const PlanGroup& group = plan.group_of(job);
  const QuantizationArgs& wargs = group.weight_args();
  std::vector<Tensor> scratch(job.members.size());
  std::vector<TensorView> views;
  std::vector<std::string> labels;
  std::vector<const ModuleImportance*> importance;
  for (std::size_t k = 0; k < job.members.size(); ++k) {
    const PlannedModule& m = plan.modules[job.members[k]];
    views.push_back(ckpt.shards()[m.shard].view(*m.weight, scratch[k]));
    labels.push_back(m.module + ".weight");
    importance.push_back(m.importance ? &*m.importance : nullptr);
  }
  const auto start = Clock::now();
  const std::vector<QParams> qp = calibrate(views, labels, wargs, group.observer, importance);
  std::vector<Compressed> outputs;
  for (std::size_t k = 0; k < job.members.size(); ++k)
    outputs.push_back(compress_weight(views[k], qp[k], wargs, group.format(), labels[k]));
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  return finish_job(plan, j, std::move(outputs), qp, secs, baseline, [&] {
    const std::vector<QParams> bq = calibrate(views, labels, wargs, std::string(kBaselineObserver), {});
    std::vector<kernels::ErrorSums> errors;
    for (std::size_t k = 0; k < job.members.size(); ++k)
      errors.push_back(compress_weight(views[k], bq[k], wargs, group.format(), labels[k]).error);
    return errors;
  });
}

PassthroughCopy::PassthroughCopy(const Checkpoint& ckpt, const QuantizePlan& plan,
                                 std::vector<std::unique_ptr<SafetensorsWriter>>* writers,
                                 std::function<void()> check_cancel)
    : ckpt_(ckpt), writers_(writers), check_cancel_(std::move(check_cancel)) {
  for (std::size_t s = 0; s < ckpt.shards().size(); ++s)
    for (const TensorInfo& t : ckpt.shards()[s].tensors())
      if (!plan.replaced.count(t.name)) todo_.emplace_back(s, &t);
}

bool PassthroughCopy::write_next() {
  if (writers_ == nullptr || next_ == todo_.size()) return false;
  check_cancel_();
  const auto [s, t] = todo_[next_++];
  (*writers_)[s]->write(t->name, ckpt_.shards()[s].bytes(*t));
  ckpt_.shards()[s].release(*t);
  return next_ < todo_.size();
}

double job_cost(const QuantizePlan& plan, std::size_t j, bool baseline) {
  double candidates = 1;
  const PlanGroup& group = plan.group_of(plan.jobs[j]);
  if (group.observer.find("mse") != std::string::npos) {
    // The search evaluates about maxshrink x grid shrink factors (R6.7, R6.8).
    const ObserverKwargs& kw = group.weight_args().observer_kwargs;
    const bool imatrix = group.observer.find("imatrix") != std::string::npos;
    const auto get = [&](const char* name, double dflt) {
      const auto it = kw.find(name);
      return it == kw.end() ? dflt : kwarg_as_double(name, it->second);
    };
    candidates = std::max(1.0, std::ceil(get("maxshrink", imatrix ? 0.95 : 0.20) * get("grid", imatrix ? 20 : 100)));
  }
  double elements = 0;
  for (const std::size_t mi : plan.jobs[j].members)
    elements += static_cast<double>(shape_numel(plan.modules[mi].weight->shape));
  return elements * (candidates + (baseline ? 1 : 0));
}

std::vector<std::vector<std::size_t>> assign_jobs(const QuantizePlan& plan, int ranks, bool baseline) {
  if (ranks == 1) {  // one process takes every job: no cost to weigh
    std::vector<std::size_t> all(plan.jobs.size());
    for (std::size_t j = 0; j < all.size(); ++j) all[j] = j;
    return {std::move(all)};
  }
  std::vector<std::size_t> order(plan.jobs.size());
  std::vector<double> cost(plan.jobs.size());
  for (std::size_t j = 0; j < order.size(); ++j) {
    order[j] = j;
    cost[j] = job_cost(plan, j, baseline);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return cost[a] > cost[b]; });
  std::vector<double> load(static_cast<std::size_t>(ranks), 0.0);
  std::vector<std::vector<std::size_t>> out(static_cast<std::size_t>(ranks));
  for (const std::size_t j : order) {
    const auto least = std::min_element(load.begin(), load.end()) - load.begin();  // first of equals
    load[least] += cost[j];
    out[least].push_back(j);
  }
  for (auto& r : out) std::sort(r.begin(), r.end());
  return out;
}

void run_jobs(const Checkpoint& ckpt, const QuantizePlan& plan, const QuantizeOptions& o,
              std::span<const std::size_t> jobs, const std::function<void()>& check_cancel,
              const std::function<void(std::size_t, JobResult&&)>& consume, const std::function<bool()>& idle,
              DeviceRunner* device) {
  bool idle_work = static_cast<bool>(idle);
  const std::size_t n = jobs.size();
  const std::size_t ahead = static_cast<std::size_t>(o.threads);
  struct Slot {
    bool done = false;
    std::optional<JobResult> result;
    std::exception_ptr error;
  };
  std::vector<Slot> slots(n);
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> stop{false};  // a job failed or was consumed with an error: skip the rest
  // Declared last: its destructor waits for the started jobs, which use everything above.
  kernels::ThreadPool pool(o.threads);
  std::size_t submitted = 0;
  const auto submit_until = [&](std::size_t limit) {
    for (; submitted < std::min(limit, n); ++submitted)
      pool.submit([&, i = submitted] {
        const std::size_t j = jobs[i];
        std::optional<JobResult> r;
        std::exception_ptr err;
        if (!stop.load()) {
          try {
            check_cancel();
            r = device && device->runs(j) ? device->calibrate(ckpt, plan, j, o.baseline)
                                          : calibrate_job(ckpt, plan, j, o.baseline);
          } catch (...) {
            err = std::current_exception();  // rethrown on the calling thread: library code never aborts
          }
        }
        {
          std::lock_guard<std::mutex> lk(mu);
          slots[i] = Slot{true, std::move(r), err};
        }
        cv.notify_all();
      });
  };
  try {
    for (std::size_t i = 0; i < n; ++i) {
      submit_until(i + ahead);
      JobResult r;
      {
        std::unique_lock<std::mutex> lk(mu);
        while (idle_work && !slots[i].done) {
          lk.unlock();
          idle_work = idle();
          lk.lock();
        }
        cv.wait(lk, [&] { return slots[i].done; });
        if (slots[i].error) std::rethrow_exception(slots[i].error);
        r = std::move(*slots[i].result);
        slots[i].result.reset();
      }
      consume(jobs[i], std::move(r));
      check_cancel();
    }
  } catch (...) {
    stop = true;
    throw;
  }
}

}  // namespace qobs::detail
