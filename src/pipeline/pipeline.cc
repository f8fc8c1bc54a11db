// quantize_checkpoint: scheme -> observers -> qparams -> compressed tensors -> files.
#include "qobs/pipeline.h"

#include <re2/re2.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "core/check.h"
#include "core/element.h"
#include "pipeline/compress.h"
#include "qobs/formats.h"
#include "qobs/observer.h"
#include "qobs/qparams.h"

namespace qobs {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return o;
}

std::string module_of(std::string_view tensor_name) {
  return std::string(tensor_name.substr(0, tensor_name.size() - std::string_view(".weight").size()));
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string last_component(const std::string& module) {
  const auto p = module.rfind('.');
  return p == std::string::npos ? module : module.substr(p + 1);
}

// RE2 rather than std::regex: std::regex backtracks recursively and overflows the stack
// on long module names (a 50k-character name with `.*lm_head`); RE2 runs in linear time.
std::vector<std::unique_ptr<RE2>> compile(const std::vector<std::string>& patterns, const char* what) {
  RE2::Options opt;
  opt.set_log_errors(false);  // library code never prints; the error goes into the exception
  std::vector<std::unique_ptr<RE2>> out;
  for (const auto& p : patterns) {
    out.push_back(std::make_unique<RE2>(p, opt));
    QOBS_CHECK(out.back()->ok(), InvalidArgument, what, " pattern '", p,
               "' is not a valid RE2 regular expression (no backreferences or lookaround): ", out.back()->error());
  }
  return out;
}

// Searched anywhere in the name, as std::regex_search did.
bool any_match(const std::vector<std::unique_ptr<RE2>>& res, const std::string& s) {
  return std::any_of(res.begin(), res.end(), [&](const auto& r) { return RE2::PartialMatch(s, *r); });
}

struct Metrics {
  double rel_mse;
  double sqnr_db;
};

// Element i of contiguous float data widened to double (the error sums run in f64).
inline double load_double(const unsigned char* base, DType dt, int64_t i) { return detail::load_element(base, dt, i); }

Metrics measure(const TensorView& w, const Tensor& dq) {
  double sig = 0, err = 0;
  const bool fast = w.is_contiguous() && w.dtype != DType::kF8E4M3 && dq.dtype() != DType::kF8E4M3;
  const auto* wb = static_cast<const unsigned char*>(w.data);
  const auto* db = static_cast<const unsigned char*>(dq.data());
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double x = fast ? load_double(wb, w.dtype, i) : w.get(i);
    const double d = x - (fast ? load_double(db, dq.dtype(), i) : dq.get(i));
    sig += x * x;
    err += d * d;
  }
  const double rel = sig > 0 ? err / sig : (err > 0 ? INFINITY : 0.0);
  const double sqnr = err > 0 ? 10.0 * std::log10(sig / err) : INFINITY;
  return {rel, sqnr};
}

// One unit of calibration work: a module, or a fused group of sibling modules that share
// one global scale (R6.10).
struct Job {
  std::vector<std::size_t> members;  // indices into the module list
};

struct ModuleInfo {
  std::string module;
  std::size_t shard;
  const TensorInfo* weight;
  std::vector<detail::PlannedTensor> plan;
};

struct JobResult {
  std::vector<detail::Compressed> outputs;  // per member
  std::vector<TensorReport> reports;
};

void remove_quietly(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
}

// Calibrates the members of a job with one observer name and returns their qparams.
std::vector<QParams> calibrate(const std::vector<TensorView>& views, const std::vector<std::string>& labels,
                               const QuantizationArgs& args, const std::string& observer) {
  std::vector<std::shared_ptr<Observer>> obs;
  for (std::size_t i = 0; i < views.size(); ++i) {
    ObserverOptions opt;
    opt.label = labels[i];
    obs.push_back(load_observer(observer, "weight", args, {}, opt));
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

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream os;
  os.precision(9);
  os << v;
  return os.str();
}

bool is_other_weight_format(const std::string& name) {
  // Weights in formats other than safetensors would hold the unquantized model next to
  // a config that says it is quantized; loaders prefer them in some setups.
  // (.safetensors files that the index does not list, e.g. Mistral's
  // consolidated.safetensors, are another copy of the weights too.)
  return ends_with(name, ".safetensors") || ends_with(name, ".bin") || ends_with(name, ".pt") || ends_with(name, ".pth") || ends_with(name, ".h5") ||
         ends_with(name, ".msgpack") || ends_with(name, ".ckpt") || ends_with(name, ".onnx") ||
         ends_with(name, ".gguf");
}

// One CSV field per RFC 4180: quoted when it holds a comma, quote or line break.
std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  f.flush();
  QOBS_CHECK(f.good(), IoError, p.string(), ": write failed (disk full?)");
}

void create_report_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  QOBS_CHECK(!ec, IoError, dir.string(), ": cannot create the report folder: ", ec.message());
}

// Path components without the empty one that a trailing '/' leaves.
std::vector<fs::path> components(const fs::path& p) {
  std::vector<fs::path> c;
  for (const fs::path& part : p.lexically_normal())
    if (!part.empty()) c.push_back(part);
  return c;
}

// Whether `p` is `dir` or lies below it, by name (both absolute).
bool is_within(const fs::path& p, const fs::path& dir) {
  const auto pc = components(p), dc = components(dir);
  return dc.size() <= pc.size() && std::equal(dc.begin(), dc.end(), pc.begin());
}

// Whether `p` is within `dir` by name or after resolving symlinks.
bool is_within_either(const fs::path& p, const fs::path& dir) {
  if (is_within(p, dir)) return true;
  std::error_code e1, e2;
  const fs::path rp = fs::weakly_canonical(p, e1), rd = fs::weakly_canonical(dir, e2);
  return !e1 && !e2 && is_within(rp, rd);
}

// OUT may be neither the input, nor hold it (--overwrite would delete it), nor lie in it
// (the copy of the input's other files would copy the output into itself).
void check_output_relation(const fs::path& in, const fs::path& out) {
  std::error_code ec;
  QOBS_CHECK(!fs::equivalent(in, out, ec) && !(is_within_either(in, out) && is_within_either(out, in)),
             InvalidArgument, "output folder ", out.string(), " is the input checkpoint ", in.string(),
             "; choose another folder");
  QOBS_CHECK(!is_within_either(in, out), InvalidArgument, "output folder ", out.string(),
             " contains the input checkpoint ", in.string(),
             " (replacing it would delete the input); choose a folder outside the input");
  QOBS_CHECK(!is_within_either(out, in), InvalidArgument, "output folder ", out.string(),
             " is inside the input checkpoint ", in.string(), " (it would be copied into itself); choose a folder "
             "outside the input");
}

std::string host_name() {
  char b[256] = {};
  if (gethostname(b, sizeof b - 1) != 0 || b[0] == '\0') return "localhost";
  std::string h(b);
  for (char& c : h)
    if (c == '/' || c == ' ') c = '_';  // keeps the folder name one path component
  return h;
}

bool process_alive(long pid) { return ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH; }

constexpr const char* kTmpMarker = ".qobs-tmp-owner";

std::string marker_text(const std::string& host, long pid) { return detail::concat("qobs-tmp ", host, " ", pid, "\n"); }

std::string read_small_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::string s(256, '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<std::size_t>(f.gcount()));
  return s;
}

// A run killed by SIGKILL cannot clean up: its `.OUT.qobs-tmp-<host>-<pid>` stays. Such
// folders of this host whose process is dead are removed (the marker must agree, so a
// user's folder that merely looks alike is kept); a `.OUT.qobs-old-<host>-<pid>` is the
// previous complete OUT moved aside during publishing: put back when OUT is missing
// (the kill fell between the two renames), else removed. Other hosts' folders (shared
// file systems) and live PIDs are never touched.
void remove_stale_siblings(const fs::path& out) {
  const std::string host = host_name();
  const std::string tmp_prefix = detail::concat(".", out.filename().string(), ".qobs-tmp-", host, "-");
  const std::string old_prefix = detail::concat(".", out.filename().string(), ".qobs-old-", host, "-");
  std::error_code ec;
  std::vector<std::pair<fs::path, bool>> stale;  // path, is_old
  for (auto it = fs::directory_iterator(out.parent_path(), ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    for (const std::string* prefix : {&tmp_prefix, &old_prefix}) {
      if (name.rfind(*prefix, 0) != 0) continue;
      const std::string digits = name.substr(prefix->size());
      if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
      const long pid = std::stol(digits);
      if (pid == static_cast<long>(getpid()) || process_alive(pid)) continue;
      const bool is_old = prefix == &old_prefix;
      if (!is_old && read_small_file(it->path() / kTmpMarker) != marker_text(host, pid)) continue;
      stale.emplace_back(it->path(), is_old);
    }
  }
  for (const auto& [p, is_old] : stale) {
    std::error_code e;
    if (is_old && !fs::exists(out, e)) fs::rename(p, out, e);
    else fs::remove_all(p, e);
  }
}

// Errors raised while writing name files of the temporary folder; the user knows only
// OUT, so the message names the final path (and the temporary one once, for the record).
[[noreturn]] void rethrow_naming_output(const fs::path& tmp, const fs::path& out) {
  try {
    throw;
  } catch (const IoError& e) {
    std::string m = e.what();
    const std::string t = tmp.string();
    if (tmp.empty() || m.find(t) == std::string::npos) throw;
    for (auto p = m.find(t); p != std::string::npos; p = m.find(t, p + out.string().size()))
      m.replace(p, t.size(), out.string());
    throw IoError(detail::concat(m, " (while writing the temporary folder ", t, ")"));
  }
}

// Copies every file of `in` except `skip(rel)` into `tmp`. Relative paths are built
// from the names met while walking (never fs::relative, which resolves symlinks: in a
// Hugging Face cache snapshot every file is a link to ../../blobs/<sha>, and resolving
// it sent the copies outside the output). A link is followed for its content: a link to
// a file becomes a regular file with the link's name; a linked folder is walked unless
// it leads back to a folder being walked (a loop).
void copy_other_files(const fs::path& in, const fs::path& tmp, const std::function<bool(const std::string&)>& skip,
                      const std::function<void()>& check_cancel) {
  std::vector<fs::path> walking;  // canonical folders from `in` down to the current one
  const std::function<void(const fs::path&, const fs::path&)> walk = [&](const fs::path& dir, const fs::path& rel) {
    std::error_code ec;
    const fs::path real = fs::canonical(dir, ec);
    if (ec || std::find(walking.begin(), walking.end(), real) != walking.end()) return;
    walking.push_back(real);
    std::vector<fs::directory_entry> entries;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      entries.push_back(*it);
    QOBS_CHECK(!ec, IoError, dir.string(), ": cannot list the folder: ", ec.message());
    for (const fs::directory_entry& e : entries) {
      check_cancel();
      const fs::path r = rel / e.path().filename();
      const std::string rs = r.generic_string();
      std::error_code se;
      const fs::file_status st = fs::status(e.path(), se);  // follows links
      if (fs::is_directory(st)) {
        if (rs != ".git" && rs != ".cache") walk(e.path(), r);
        continue;
      }
      if (!fs::is_regular_file(st) || skip(rs)) continue;  // dangling links, sockets, ...
      const fs::path dest = (tmp / r).lexically_normal();
      QOBS_CHECK(is_within(dest, tmp) && dest != tmp.lexically_normal(), IoError, e.path().string(),
                 ": copy destination ", dest.string(), " is outside the output folder");
      fs::create_directories(dest.parent_path(), ec);
      fs::copy_file(e.path(), dest, fs::copy_options::overwrite_existing, ec);
      QOBS_CHECK(!ec, IoError, e.path().string(), ": cannot copy to the output: ", ec.message());
    }
    walking.pop_back();
  };
  walk(in, fs::path());
}

}  // namespace

// ---- target selection -------------------------------------------------------------

bool is_linear_weight(std::string_view tensor_name, const Shape& shape) {
  if (shape.size() != 2 || !ends_with(tensor_name, ".weight")) return false;
  const std::string m = lower(module_of(tensor_name));
  // Embedding tables and norms are 2-D or named "*.weight" too; transformers names them
  // with these words (embed_tokens, word_embeddings, wte/wpe, LayerNorm, *_norm, ln_f).
  for (const char* word : {"embed", "norm", "position", "token_type", "rotary"})
    if (m.find(word) != std::string::npos) return false;
  const std::string last = last_component(m);
  if (last == "wte" || last == "wpe" || last.rfind("ln_", 0) == 0 || last == "ln") return false;
  return true;
}

TargetPlan plan_targets(const Checkpoint& ckpt, const std::vector<std::string>& targets,
                        const std::vector<std::string>& ignore) {
  const auto t_re = compile(targets, "--targets");
  const auto i_re = compile(ignore, "--ignore");
  TargetPlan plan;
  for (const SafetensorsFile& shard : ckpt.shards())
    for (const TensorInfo& t : shard.tensors()) {
      if (!ends_with(t.name, ".weight") || t.shape.size() != 2) continue;
      const std::string m = module_of(t.name);
      const bool linear = is_linear_weight(t.name, t.shape);
      bool chosen;
      if (!t_re.empty()) chosen = any_match(t_re, m);
      else chosen = linear && last_component(m) != "lm_head";  // lm_head only when targeted
      if (chosen && any_match(i_re, m)) chosen = false;
      if (chosen) plan.quantize.push_back(m);
      else if (linear) plan.ignored.push_back(m);
    }
  return plan;
}

// ---- scheme -----------------------------------------------------------------------

QuantizationScheme resolve_scheme(const QuantizeOptions& o) {
  QuantizationScheme s = preset_scheme(o.scheme, {"Linear"});
  QOBS_CHECK(s.weights.has_value(), InvalidArgument, "scheme ", o.scheme, " quantizes no weights");
  QuantizationArgs w = *s.weights;
  if (o.observer) w.observer = *o.observer;
  for (const auto& [k, v] : o.observer_kwargs) w.observer_kwargs[k] = v;
  s.weights = w.validated();
  s = s.validated();
  const auto needs_data = [&](const std::optional<QuantizationArgs>& a) {
    return a && a->dynamic != Dynamic::kTrue;
  };
  QOBS_CHECK(!needs_data(s.input_activations), InvalidArgument, "scheme ", o.scheme,
             " has static input activations (dynamic ",
             s.input_activations && s.input_activations->dynamic == Dynamic::kLocal ? "\"local\"" : "false",
             "): its input scales need activation statistics from calibration data, which `qobs quantize` does not "
             "run (R1.6.2). Use a weight-only or dynamic-activation scheme (e.g. FP8_DYNAMIC instead of FP8, "
             "NVFP4A16 instead of NVFP4).");
  QOBS_CHECK(!needs_data(s.output_activations), InvalidArgument, "scheme ", o.scheme,
             " quantizes output activations statically, which needs calibration data (R1.6.2)");
  const std::string obs = calibration_observer_name("weight", s.weights->observer.value_or("memoryless_minmax"));
  QOBS_CHECK(obs != "imatrix_mse", InvalidArgument,
             "observer imatrix_mse needs input-activation importance from calibration data (R6.8), which `qobs "
             "quantize` does not run; choose memoryless_mse or memoryless_minmax");
  // Instantiate once so that an unknown name or a bad kwarg fails before any work.
  load_observer(obs, "weight", *s.weights);
  s.format = infer_compression_format(s);
  return s;
}

// ---- report -----------------------------------------------------------------------

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
  const auto num = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); };
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
    ts.push_back(r);
  }
  j["tensors"] = ts;
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
  std::snprintf(line, sizeof line,
                "%zu tensors quantized (%s, %s, observer %s), %lld copied, %zu Linear layers ignored; mean SQNR %.2f dB",
                tensors.size(), scheme.c_str(), format.c_str(), observer.c_str(), static_cast<long long>(copied_tensors),
                ignored.size(), n > 0 ? sum_sqnr / n : 0.0);
  os << line;
  if (n_base > 0) {
    std::snprintf(line, sizeof line, " (%s: %.2f dB)", baseline_observer.c_str(), sum_base / static_cast<double>(n_base));
    os << line;
  }
  std::snprintf(line, sizeof line, "; %.1f MB -> %.1f MB in %.2f s\n", static_cast<double>(input_bytes) / 1e6,
                static_cast<double>(output_bytes) / 1e6, seconds);
  os << line;
  return os.str();
}

// ---- the conversion -----------------------------------------------------------------

QuantizeReport quantize_checkpoint(const QuantizeOptions& o, const ProgressCallback& progress) {
  const auto t0 = Clock::now();
  const QuantizationScheme scheme = resolve_scheme(o);
  const QuantizationArgs& wargs = *scheme.weights;
  const std::string format = *scheme.format;
  const std::string observer = calibration_observer_name("weight", wargs.observer.value_or("memoryless_minmax"));
  QOBS_CHECK(o.threads >= 1, InvalidArgument, "--threads must be at least 1, got ", o.threads);

  std::error_code ec;
  // A dry run may have no output folder at all.
  fs::path out = o.output_dir.empty() ? fs::path() : fs::absolute(fs::path(o.output_dir)).lexically_normal();
  // "out/" names the folder too; without this its temporary sibling would land inside it.
  if (!out.empty() && !out.has_filename()) out = out.parent_path();
  if (!o.dry_run) {
    QOBS_CHECK(!o.output_dir.empty(), InvalidArgument, "no output folder given (-o OUT_DIR)");
    check_output_relation(fs::absolute(fs::path(o.model_path)).lexically_normal(), out);
    remove_stale_siblings(out);
    if (fs::exists(out, ec))
      QOBS_CHECK(o.overwrite, IoError, out.string(), ": output folder already exists (pass --overwrite to replace it)");
  }

  const Checkpoint ckpt = Checkpoint::open(o.model_path);
  // Quantizing a compressed checkpoint again would treat packed codes as weights.
  QOBS_CHECK(ckpt.config_json().find("\"quantization_config\"") == std::string::npos, InvalidArgument, o.model_path,
             ": config.json already has a quantization_config; qobs quantizes unquantized checkpoints only");
  const TargetPlan targets = plan_targets(ckpt, o.targets, o.ignore);
  QOBS_CHECK(!targets.quantize.empty(), InvalidArgument, o.model_path,
             ": no tensor matches the targets (2-D Linear weights by default; see --targets)");

  // Plan every module before any work, so shape problems surface first (R5.3.1, R8.5.1).
  std::vector<ModuleInfo> modules;
  std::map<std::string, std::size_t> module_index;
  for (const std::string& m : targets.quantize) {
    const auto where = ckpt.find(m + ".weight");
    ModuleInfo mi{m, where->first, where->second, {}};
    mi.plan = detail::plan_compressed(wargs, format, mi.weight->dtype, mi.weight->shape, m + ".weight");
    module_index[m] = modules.size();
    modules.push_back(std::move(mi));
  }

  // Jobs: fused sibling groups for tensor_group weights (R6.10), else one per module.
  std::vector<Job> jobs;
  std::vector<bool> assigned(modules.size(), false);
  if (wargs.get_strategy() == Strategy::kTensorGroup) {
    for (std::size_t i = 0; i < modules.size(); ++i) {
      if (assigned[i]) continue;
      const std::string& m = modules[i].module;
      const auto dot = m.rfind('.');
      const std::string parent = dot == std::string::npos ? "" : m.substr(0, dot + 1);
      const std::string leaf = m.substr(parent.size());
      for (const auto& group : fused_layer_names()) {
        if (std::find(group.begin(), group.end(), leaf) == group.end()) continue;
        // R6.10.2: only groups whose every name exists as a sibling; each must then be
        // quantized (an ignored sibling would have no weight observer).
        bool all_exist = true;
        for (const auto& g : group) all_exist = all_exist && ckpt.find(parent + g + ".weight").has_value();
        if (!all_exist) break;
        Job job;
        for (const auto& g : group) {
          const auto it = module_index.find(parent + g);
          QOBS_CHECK(it != module_index.end(), InvalidArgument, parent + g, " is not quantized but its fused siblings (",
                     parent, group[0], ", ...) are: tensor_group layers of a fused group share one global scale "
                     "(R6.10.2), so quantize or ignore all of them");
          job.members.push_back(it->second);
          assigned[it->second] = true;
        }
        jobs.push_back(std::move(job));
        break;
      }
    }
  }
  for (std::size_t i = 0; i < modules.size(); ++i)
    if (!assigned[i]) jobs.push_back(Job{{i}});
  // Checkpoint order of each job's first member, so progress follows the file.
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
    return *std::min_element(a.members.begin(), a.members.end()) < *std::min_element(b.members.begin(), b.members.end());
  });

  QuantizeReport report;
  report.model_path = o.model_path;
  report.output_dir = out.string();
  report.scheme = o.scheme;
  report.format = format;
  report.observer = observer;
  report.dry_run = o.dry_run;
  report.ignored = targets.ignored;
  report.input_bytes = ckpt.total_bytes();
  report.tensors.resize(modules.size());

  // Output plan per shard: passthrough tensors + each module's compressed tensors.
  std::set<std::string> replaced;
  for (const ModuleInfo& m : modules) replaced.insert(m.module + ".weight");
  std::vector<std::vector<TensorSpec>> specs(ckpt.shards().size());
  for (std::size_t s = 0; s < ckpt.shards().size(); ++s)
    for (const TensorInfo& t : ckpt.shards()[s].tensors())
      if (!replaced.count(t.name)) specs[s].push_back({t.name, t.dtype, t.shape});
  for (const ModuleInfo& m : modules)
    for (const auto& p : m.plan) specs[m.shard].push_back({m.module + "." + p.local, p.dtype, p.shape});

  const std::string host = host_name();
  const fs::path tmp = o.dry_run ? fs::path()
                                 : out.parent_path() / detail::concat(".", out.filename().string(), ".qobs-tmp-",
                                                                      host, "-", getpid());
  const auto check_cancel = [&] {
    if (o.cancel && o.cancel->load())
      QOBS_THROW(Interrupted, o.dry_run ? o.model_path : out.string(), ": interrupted before completion",
                 o.dry_run ? "" : "; the partial output was removed and the output folder left as it was");
  };
  std::vector<std::unique_ptr<SafetensorsWriter>> writers;
  try {
    check_cancel();
    if (!o.dry_run) {
      remove_quietly(tmp);
      fs::create_directories(tmp, ec);
      QOBS_CHECK(!ec, IoError, tmp.string(), ": cannot create the temporary output folder: ", ec.message());
      // Lets a later run tell this folder, if SIGKILL leaves it, from a user's folder.
      write_text(tmp / kTmpMarker, marker_text(host, static_cast<long>(getpid())));
      for (std::size_t s = 0; s < ckpt.shards().size(); ++s)
        writers.push_back(std::make_unique<SafetensorsWriter>((tmp / ckpt.shard_names()[s]).string(), specs[s]));
    }

    // Calibrate jobs on `threads` workers; at most `threads` finished results wait for
    // the writer at any time, which bounds memory to a few tensors per thread.
    const std::size_t nthreads = static_cast<std::size_t>(std::min<int64_t>(o.threads, static_cast<int64_t>(jobs.size())));
    std::vector<std::optional<JobResult>> results(jobs.size());
    std::vector<std::exception_ptr> errors(jobs.size());
    std::mutex mu;
    std::condition_variable cv;
    std::size_t next_job = 0, consumed = 0;
    bool stop = false;

    const auto run_job = [&](std::size_t j) {
      check_cancel();
      const Job& job = jobs[j];
      std::vector<Tensor> scratch(job.members.size());
      std::vector<TensorView> views;
      std::vector<std::string> labels;
      for (std::size_t k = 0; k < job.members.size(); ++k) {
        const ModuleInfo& m = modules[job.members[k]];
        views.push_back(ckpt.shards()[m.shard].view(*m.weight, scratch[k]));
        labels.push_back(m.module + ".weight");
      }
      const auto start = Clock::now();
      const std::vector<QParams> qp = calibrate(views, labels, wargs, observer);
      JobResult r;
      for (std::size_t k = 0; k < job.members.size(); ++k)
        r.outputs.push_back(detail::compress_weight(views[k], qp[k], wargs, format, labels[k]));
      const double secs = std::chrono::duration<double>(Clock::now() - start).count();
      for (std::size_t k = 0; k < job.members.size(); ++k) {
        const ModuleInfo& m = modules[job.members[k]];
        TensorReport t;
        t.module = m.module;
        t.shape = m.weight->shape;
        t.dtype = std::string(dtype_name(m.weight->dtype));
        t.observer = observer;
        const Metrics mt = measure(views[k], r.outputs[k].dequantized);
        t.rel_mse = mt.rel_mse;
        t.sqnr_db = mt.sqnr_db;
        t.seconds = secs / static_cast<double>(job.members.size());
        if (qp[k].global_scale) t.global_scale = qp[k].global_scale->get(0);
        r.reports.push_back(std::move(t));
      }
      if (o.baseline) {
        const std::string base = "memoryless_minmax";
        if (observer == base) {
          for (auto& t : r.reports) {
            t.baseline_rel_mse = t.rel_mse;
            t.baseline_sqnr_db = t.sqnr_db;
          }
        } else {
          const std::vector<QParams> bq = calibrate(views, labels, wargs, base);
          for (std::size_t k = 0; k < job.members.size(); ++k) {
            const detail::Compressed bc = detail::compress_weight(views[k], bq[k], wargs, format, labels[k]);
            const Metrics mt = measure(views[k], bc.dequantized);
            r.reports[k].baseline_rel_mse = mt.rel_mse;
            r.reports[k].baseline_sqnr_db = mt.sqnr_db;
          }
        }
      }
      for (auto& out_c : r.outputs) out_c.dequantized = Tensor();  // only the metrics needed it
      return r;
    };

    const auto worker = [&]() {
      for (;;) {
        std::size_t j;
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [&] { return stop || (next_job < jobs.size() && next_job < consumed + nthreads); });
          if (stop || next_job >= jobs.size()) return;
          j = next_job++;
        }
        std::optional<JobResult> r;
        std::exception_ptr err;
        try {
          r = run_job(j);
        } catch (...) {
          err = std::current_exception();  // rethrown on the calling thread (STYLE habit 4)
        }
        {
          std::lock_guard<std::mutex> lk(mu);
          results[j] = std::move(r);
          errors[j] = err;
        }
        cv.notify_all();
      }
    };
    std::vector<std::thread> pool;
    for (std::size_t t = 0; t < nthreads; ++t) pool.emplace_back(worker);
    const auto join_all = [&] {
      {
        std::lock_guard<std::mutex> lk(mu);
        stop = true;
      }
      cv.notify_all();
      for (auto& th : pool)
        if (th.joinable()) th.join();
    };

    int64_t done = 0;
    try {
      for (std::size_t j = 0; j < jobs.size(); ++j) {
        JobResult r;
        {
          std::unique_lock<std::mutex> lk(mu);
          cv.wait(lk, [&] { return results[j].has_value() || errors[j] != nullptr; });
          if (errors[j]) std::rethrow_exception(errors[j]);
          r = std::move(*results[j]);
          results[j].reset();
        }
        for (std::size_t k = 0; k < jobs[j].members.size(); ++k) {
          const std::size_t mi = jobs[j].members[k];
          const ModuleInfo& m = modules[mi];
          if (!o.dry_run)
            for (const auto& [local, t] : r.outputs[k].tensors) writers[m.shard]->write(m.module + "." + local, t);
          ckpt.shards()[m.shard].release(*m.weight);
          report.tensors[mi] = std::move(r.reports[k]);
          ++done;
          if (progress) {
            Progress p;
            p.done = done;
            p.total = static_cast<int64_t>(modules.size());
            p.elapsed_s = std::chrono::duration<double>(Clock::now() - t0).count();
            p.last = &report.tensors[mi];
            progress(p);
          }
        }
        {
          std::lock_guard<std::mutex> lk(mu);
          ++consumed;
        }
        cv.notify_all();
        check_cancel();
      }
    } catch (...) {
      join_all();
      throw;
    }
    join_all();

    for (std::size_t s = 0; s < ckpt.shards().size(); ++s)
      for (const TensorInfo& t : ckpt.shards()[s].tensors()) {
        if (replaced.count(t.name)) continue;
        ++report.copied_tensors;
        if (o.dry_run) continue;
        check_cancel();
        writers[s]->write(t.name, ckpt.shards()[s].bytes(t));
        ckpt.shards()[s].release(t);
      }
    if (o.dry_run) {
      report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      if (o.report_dir) {
        create_report_dir(*o.report_dir);
        write_text(fs::path(*o.report_dir) / "qobs-report.json", report.to_json());
        write_text(fs::path(*o.report_dir) / "qobs-report.csv", report.to_csv());
      }
      return report;
    }
    for (auto& w : writers) {
      report.output_bytes += w->data_size();
      w->close();
    }

    // Index (sharded like the input, R8.8.2).
    if (ckpt.sharded()) {
      nlohmann::ordered_json idx;
      idx["metadata"] = {{"total_size", report.output_bytes}};
      nlohmann::json wm = nlohmann::json::object();
      for (std::size_t s = 0; s < specs.size(); ++s)
        for (const TensorSpec& t : specs[s]) wm[t.name] = ckpt.shard_names()[s];
      idx["weight_map"] = wm;
      write_text(tmp / "model.safetensors.index.json", idx.dump(2) + "\n");
    }

    // config.json with quantization_config (R8.7), keys sorted, 2-space indent.
    QuantizationConfig qc;
    QuantizationScheme group = scheme;
    group.targets = {"Linear"};
    for (const ModuleInfo& m : modules)
      if (!is_linear_weight(m.module + ".weight", m.weight->shape)) group.targets.push_back(m.module);
    qc.config_groups.emplace_back("group_0", group);
    qc.format = format;
    qc.quantization_status = QuantizationStatus::kCompressed;
    qc.ignore = targets.ignored;
    nlohmann::json qcj = nlohmann::json::parse(qc.to_json());
    qcj["sparsity_config"] = nlohmann::json::object();
    qcj["transform_config"] = nlohmann::json::object();
    qcj["version"] = std::string(kCompressedTensorsFormatVersion);
    nlohmann::json config = nlohmann::json::object();
    if (!ckpt.config_json().empty()) {
      try {
        config = nlohmann::json::parse(ckpt.config_json());
      } catch (const nlohmann::json::exception& e) {
        QOBS_THROW(IoError, (fs::path(ckpt.dir()) / "config.json").string(), ": not valid JSON: ", e.what());
      }
      QOBS_CHECK(config.is_object(), IoError, (fs::path(ckpt.dir()) / "config.json").string(), ": not a JSON object");
    }
    config["quantization_config"] = qcj;
    write_text(tmp / "config.json", config.dump(2) + "\n");

    // Every other file of the folder, copied unchanged.
    if (fs::is_directory(o.model_path, ec)) {
      std::set<std::string> own(ckpt.shard_names().begin(), ckpt.shard_names().end());
      own.insert("model.safetensors.index.json");
      own.insert("config.json");
      copy_other_files(
          fs::path(o.model_path), tmp,
          [&](const std::string& rel) { return own.count(rel) > 0 || is_other_weight_format(rel); }, check_cancel);
    }
    report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const fs::path rdir = o.report_dir ? fs::path(*o.report_dir) : tmp;
    create_report_dir(rdir);
    write_text(rdir / "qobs-report.json", report.to_json());
    write_text(rdir / "qobs-report.csv", report.to_csv());
    check_cancel();  // the last moment at which stopping leaves OUT untouched

    // Publish: the old folder (if any) is moved aside first, so OUT_DIR is always either
    // the old complete result or the new one.
    if (fs::exists(out, ec)) {
      const fs::path old =
          out.parent_path() / detail::concat(".", out.filename().string(), ".qobs-old-", host, "-", getpid());
      remove_quietly(old);
      fs::rename(out, old, ec);
      QOBS_CHECK(!ec, IoError, out.string(), ": cannot move the existing folder aside: ", ec.message());
      fs::rename(tmp, out, ec);
      QOBS_CHECK(!ec, IoError, out.string(), ": cannot rename the finished output into place: ", ec.message());
      remove_quietly(old);
    } else {
      fs::rename(tmp, out, ec);
      QOBS_CHECK(!ec, IoError, out.string(), ": cannot rename the finished output into place: ", ec.message());
    }
    // Only after the rename: until then the marker identifies an abandoned folder.
    fs::remove(out / kTmpMarker, ec);
  } catch (...) {
    writers.clear();
    if (!o.dry_run) remove_quietly(tmp);
    rethrow_naming_output(tmp, out);
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
      if (ends_with(t.name, ".weight_scale")) ++quantized;
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
    if (cfg.is_object() && cfg.contains("architectures")) os << "architectures: " << cfg["architectures"].dump() << "\n";
    if (cfg.is_object() && cfg.contains("quantization_config")) {
      const auto& q = cfg["quantization_config"];
      os << "quantization_config: " << q.value("quant_method", "?") << ", format " << q.value("format", "?")
         << ", status " << q.value("quantization_status", "?") << ", version " << q.value("version", "?") << "\n";
      if (q.contains("config_groups") && q["config_groups"].is_object())
        for (auto it = q["config_groups"].begin(); it != q["config_groups"].end(); ++it) {
          const auto& g = it.value();
          os << "  " << it.key() << ": targets " << g.value("targets", nlohmann::json::array()).dump();
          if (g.contains("weights") && g["weights"].is_object()) {
            const auto& w = g["weights"];
            os << ", weights " << w.value("type", "?") << w.value("num_bits", 0) << " "
               << (w.contains("strategy") && w["strategy"].is_string() ? w["strategy"].get<std::string>() : "?");
            if (w.contains("group_size") && w["group_size"].is_number()) os << " group " << w["group_size"].get<int64_t>();
            os << (w.value("symmetric", true) ? " sym" : " asym");
          }
          if (g.contains("input_activations") && g["input_activations"].is_object())
            os << ", inputs " << g["input_activations"].value("type", "?") << g["input_activations"].value("num_bits", 0);
          os << "\n";
        }
      if (q.contains("ignore") && q["ignore"].is_array()) os << "  ignore: " << q["ignore"].dump() << "\n";
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
