// Importance files: the statistics imatrix_mse accumulates from calibration inputs
// (R6.8.2, R6.8.3), written by `qobs.collect_importance` on a machine that can run the
// model and read by `qobs quantize --importance`, which runs none (R6.12.4).
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <system_error>

#include "core/check.h"
#include "qobs/observer.h"
#include "pipeline/plan.h"
#include "qobs/pipeline.h"

namespace qobs {
namespace fs = std::filesystem;

namespace {

constexpr std::string_view kSum = ".importance_sum";
constexpr std::string_view kCount = ".importance_count";

// The value checks shared by writing and reading: what imatrix_mse's own validation
// would refuse or silently fall back on (R6.8.4-3, R6.8.4-4) is refused here, before
// any work, naming the module (R6.12.4).
void check_values(const std::string& file, const std::string& module, const ModuleImportance& m) {
  QOBS_CHECK(m.sum.dtype() == DType::kF32 && m.sum.dim() == 1 && m.sum.numel() > 0, InvalidArgument, file, ": ", module,
             kSum, " must be a non-empty 1-D float32 tensor (one value per input feature, R6.8.2), got ",
             dtype_name(m.sum.dtype()), " ", shape_str(m.sum.shape()));
  QOBS_CHECK(m.count > 0, InvalidArgument, file, ": ", module, kCount, " is ", m.count,
             ": no input reached the module, so it has no importance to calibrate with (R6.12.4, R6.12.3)");
  const float* p = m.sum.data_as<float>();
  for (int64_t i = 0; i < m.sum.numel(); ++i) {
    QOBS_CHECK(std::isfinite(p[i]), InvalidArgument, file, ": ", module, kSum, "[", i, "] is ", p[i],
               ", not a finite number (R6.12.4, R6.8.4-4)");
    QOBS_CHECK(p[i] >= 0, InvalidArgument, file, ": ", module, kSum, "[", i, "] is ", p[i],
               ", negative; a sum of squares cannot be (R6.12.4, R6.8.4-4)");
  }
}

}  // namespace

namespace detail {
Statistics importance_statistics(const ModuleImportance& m) {
  Tensor count(DType::kI64, {});
  count.data_as<int64_t>()[0] = m.count;
  return Statistics{"", {{"importance_sum", m.sum, ReduceOp::kSum}, {"importance_count", count, ReduceOp::kSum}}, 1};
}

void give_importance(Observer& observer, const ModuleImportance& m) {
  observer.attach(m.sum.numel());
  observer.import_statistics(importance_statistics(m));
}
}  // namespace detail

void write_importance(const std::string& path, const ImportanceMap& importance) {
  QOBS_CHECK(!importance.empty(), InvalidArgument, path, ": no module has importance to write (R6.12.4)");
  for (const auto& [module, m] : importance) check_values(path, module, m);
  std::vector<TensorSpec> specs;
  for (const auto& [module, m] : importance) {
    specs.push_back({module + std::string(kSum), DType::kF32, m.sum.shape()});
    specs.push_back({module + std::string(kCount), DType::kI64, {}});
  }
  const fs::path out(path);
  const fs::path tmp =
      out.parent_path() / ("." + out.filename().string() + ".qobs-tmp-" + std::to_string(static_cast<long>(getpid())));
  try {
    SafetensorsWriter w(tmp.string(), specs,
                        {{"format", "pt"},
                         {"qobs.format", std::string(kImportanceFormat)},
                         {"qobs.format_version", std::string(kImportanceFormatVersion)}});
    for (const auto& [module, m] : importance) {
      const Statistics st = detail::importance_statistics(m);
      w.write(module + std::string(kSum), *st.find("importance_sum"));
      w.write(module + std::string(kCount), *st.find("importance_count"));
    }
    w.close();
    std::error_code ec;
    fs::rename(tmp, out, ec);
    QOBS_CHECK(!ec, IoError, path, ": cannot rename the finished importance file into place: ", ec.message());
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

ImportanceMap read_importance(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  const auto& md = f.metadata();
  const auto fmt = md.find("qobs.format");
  QOBS_CHECK(fmt != md.end() && fmt->second == kImportanceFormat, IoError, path,
             ": not a qobs importance file (its metadata has no qobs.format \"", kImportanceFormat,
             "\"); write one with qobs.collect_importance (R6.12.4)");
  const auto ver = md.find("qobs.format_version");
  QOBS_CHECK(ver != md.end() && ver->second == kImportanceFormatVersion, IoError, path,
             ": importance file format version ", ver == md.end() ? std::string("(none)") : ver->second,
             ", this qobs reads version ", kImportanceFormatVersion, " (R6.12.4)");
  ImportanceMap out;
  std::set<std::string> with_sum, with_count;
  for (const TensorInfo& t : f.tensors()) {
    const std::string_view name = t.name;
    if (name.ends_with(kSum)) {
      const std::string module(name.substr(0, name.size() - kSum.size()));
      QOBS_CHECK(t.dtype == DType::kF32 && t.shape.size() == 1, IoError, path, ": ", t.name,
                 " must be a 1-D F32 tensor, got ", safetensors_dtype_name(t.dtype), " ", shape_str(t.shape),
                 " (R6.12.4)");
      out[module].sum = f.load(t.name);
      with_sum.insert(module);
    } else if (name.ends_with(kCount)) {
      const std::string module(name.substr(0, name.size() - kCount.size()));
      QOBS_CHECK(t.dtype == DType::kI64 && t.shape.empty(), IoError, path, ": ", t.name,
                 " must be an I64 scalar (shape []), got ", safetensors_dtype_name(t.dtype), " ", shape_str(t.shape),
                 " (R6.12.4)");
      out[module].count = f.load(t.name).data_as<int64_t>()[0];
      with_count.insert(module);
    } else {
      QOBS_THROW(IoError, path, ": unexpected tensor ", t.name, " in an importance file (only <module>", kSum,
                 " and <module>", kCount, ", R6.12.4)");
    }
  }
  f.verify_unchanged();
  QOBS_CHECK(!out.empty(), IoError, path, ": the importance file holds no module (R6.12.4)");
  for (const auto& [module, m] : out) {
    QOBS_CHECK(with_sum.count(module), InvalidArgument, path, ": ", module, " has ", module, kCount, " but no ", module,
               kSum, " (R6.12.4)");
    QOBS_CHECK(with_count.count(module), InvalidArgument, path, ": ", module, " has ", module, kSum, " but no ", module,
               kCount, " (R6.12.4)");
    check_values(path, module, m);
  }
  return out;
}

ImportanceMap merge_importance(const std::vector<std::string>& paths, const std::string& out) {
  QOBS_CHECK(!paths.empty(), InvalidArgument, "merge_importance: no input files given");
  std::vector<ImportanceMap> files;
  for (const std::string& p : paths) files.push_back(read_importance(p));
  const ImportanceMap& first = files[0];
  for (std::size_t i = 1; i < files.size(); ++i) {
    for (const auto& [module, m] : first) {
      const auto it = files[i].find(module);
      QOBS_CHECK(it != files[i].end(), InvalidArgument, paths[i], ": has no importance for ", module, ", which ",
                 paths[0], " has; merged files must cover the same modules (R6.12.4)");
      QOBS_CHECK(it->second.sum.shape() == m.sum.shape(), InvalidArgument, paths[i], ": ", module, kSum, " has ",
                 it->second.sum.numel(), " values, ", paths[0], " has ", m.sum.numel(),
                 "; merged files must come from the same model (R6.12.4)");
    }
    for (const auto& [module, m] : files[i])
      QOBS_CHECK(first.count(module), InvalidArgument, paths[i], ": has importance for ", module, ", which ", paths[0],
                 " has not; merged files must cover the same modules (R6.12.4)");
  }
  ImportanceMap merged;
  for (const auto& [module, m] : first) {
    // The reduction adds the counts in f64, exact below 2^53 tokens.
    int64_t total = 0;
    for (std::size_t i = 0; i < files.size(); ++i) {
      const bool overflow = __builtin_add_overflow(total, files[i].at(module).count, &total);
      QOBS_CHECK(!overflow && total <= (int64_t{1} << 53), InvalidArgument, paths[i], ": ", module, kCount,
                 ": the merged token count exceeds 2^53 (R6.12.4)");
    }
    // The reduce op of each statistic is the observer's own (SUM, imatrix_mse's sync
    // table), applied by the code that merges any observer statistics.
    std::vector<Statistics> ranks;
    for (const ImportanceMap& f : files) ranks.push_back(detail::importance_statistics(f.at(module)));
    const Statistics r = reduce_statistics(ranks);
    merged[module] = ModuleImportance{*r.find("importance_sum"), r.find("importance_count")->data_as<int64_t>()[0]};
  }
  write_importance(out, merged);
  return merged;
}

}  // namespace qobs
