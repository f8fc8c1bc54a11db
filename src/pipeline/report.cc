// QuantizeReport: the per-tensor figures as JSON, RFC 4180 CSV and a text table.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "qobs/pipeline.h"

namespace qobs {

namespace {

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

// One CSV field per RFC 4180: quoted when it holds a comma, quote or line break.
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace

std::string QuantizeReport::to_json() const {
  nlohmann::ordered_json j;
  j["model"] = model_path;
  j["output"] = dry_run ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(output_dir);
  j["dry_run"] = dry_run;
  j["scheme"] = scheme;
  j["format"] = format;
  j["observer"] = observer;
  j["baseline_observer"] = baseline_observer;
  j["seconds"] = seconds;
  j["input_bytes"] = input_bytes;
  j["output_bytes"] = output_bytes;
  j["copied_tensors"] = copied_tensors;
  j["ignored"] = ignored;
  const auto num = [](double v) {
    return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json ts = nlohmann::ordered_json::array();
  for (const TensorReport& t : tensors) {
    nlohmann::ordered_json r;
    r["module"] = t.module;
    r["shape"] = t.shape;
    r["dtype"] = t.dtype;
    r["scheme"] = scheme;
    r["observer"] = t.observer;
    r["rel_mse"] = num(t.rel_mse);
    r["sqnr_db"] = num(t.sqnr_db);
    r["seconds"] = t.seconds;
    r["baseline_rel_mse"] = t.baseline_rel_mse ? num(*t.baseline_rel_mse) : nlohmann::ordered_json(nullptr);
    r["baseline_sqnr_db"] = t.baseline_sqnr_db ? num(*t.baseline_sqnr_db) : nlohmann::ordered_json(nullptr);
    r["global_scale"] = t.global_scale ? num(*t.global_scale) : nlohmann::ordered_json(nullptr);
    // Only a run with several processes has ranks: a single process's report keeps the
    // fields it always had.
    if (t.rank) r["rank"] = *t.rank;
    ts.push_back(r);
  }
  j["tensors"] = ts;
  if (!ranks.empty()) {
    nlohmann::ordered_json rs = nlohmann::ordered_json::array();
    for (const RankReport& k : ranks)
      rs.push_back({{"rank", k.rank},
                    {"host", k.host},
                    {"jobs", k.jobs},
                    {"modules", k.modules},
                    {"cost", k.cost},
                    {"seconds", k.seconds}});
    j["ranks"] = rs;
  }
  return j.dump(2) + "\n";
}

std::string QuantizeReport::to_csv() const {
  std::ostringstream os;
  os << "module,shape,dtype,scheme,observer,rel_mse,sqnr_db,seconds,baseline_observer,baseline_rel_mse,"
        "baseline_sqnr_db\n";
  for (const TensorReport& t : tensors) {
    std::string shape;
    for (std::size_t i = 0; i < t.shape.size(); ++i) shape += detail::concat(i ? "x" : "", t.shape[i]);
    os << csv_field(t.module) << ',' << shape << ',' << csv_field(t.dtype) << ',' << csv_field(scheme) << ','
       << csv_field(t.observer) << ',' << json_number(t.rel_mse) << ',' << json_number(t.sqnr_db) << ','
       << json_number(t.seconds) << ',' << csv_field(baseline_observer) << ','
       << (t.baseline_rel_mse ? json_number(*t.baseline_rel_mse) : "") << ','
       << (t.baseline_sqnr_db ? json_number(*t.baseline_sqnr_db) : "") << '\n';
  }
  return os.str();
}

std::string QuantizeReport::summary_table() const {
  std::ostringstream os;
  char line[512];
  std::snprintf(line, sizeof line, "%-48s %-11s %-18s %10s %9s %9s %8s\n", "module", "shape", "observer", "rel MSE",
                "SQNR dB", "base dB", "time s");
  os << line;
  double sum_sqnr = 0, sum_base = 0;
  int64_t n_base = 0;
  for (const TensorReport& t : tensors) {
    std::string shape = std::to_string(t.shape[0]) + "x" + std::to_string(t.shape[1]);
    std::string name = t.module.size() > 48 ? "..." + t.module.substr(t.module.size() - 45) : t.module;
    std::snprintf(line, sizeof line, "%-48s %-11s %-18.18s %10.3e %9.2f %9s %8.3f\n", name.c_str(), shape.c_str(),
                  t.observer.c_str(), t.rel_mse, t.sqnr_db,
                  t.baseline_sqnr_db ? (std::to_string(*t.baseline_sqnr_db).substr(0, 6)).c_str() : "-", t.seconds);
    os << line;
    sum_sqnr += t.sqnr_db;
    if (t.baseline_sqnr_db) {
      sum_base += *t.baseline_sqnr_db;
      ++n_base;
    }
  }
  const double n = static_cast<double>(tensors.size());
  std::snprintf(
      line, sizeof line,
      "%zu tensors quantized (%s, %s, observer %s), %lld copied, %zu Linear layers ignored; mean SQNR %.2f dB",
      tensors.size(), scheme.c_str(), format.c_str(), observer.c_str(), static_cast<long long>(copied_tensors),
      ignored.size(), n > 0 ? sum_sqnr / n : 0.0);
  os << line;
  if (n_base > 0) {
    std::snprintf(line, sizeof line, " (%s: %.2f dB)", baseline_observer.c_str(),
                  sum_base / static_cast<double>(n_base));
    os << line;
  }
  std::snprintf(line, sizeof line, "; %.1f MB -> %.1f MB in %.2f s\n", static_cast<double>(input_bytes) / 1e6,
                static_cast<double>(output_bytes) / 1e6, seconds);
  os << line;
  return os.str();
}

}  // namespace qobs
