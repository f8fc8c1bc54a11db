#include "pipeline/publish.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/check.h"

namespace qobs::detail {

namespace fs = std::filesystem;

namespace {

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
  QOBS_CHECK(!fs::equivalent(in, out, ec) && !(is_within_either(in, out) && is_within_either(out, in)), InvalidArgument,
             "output folder ", out.string(), " is the input checkpoint ", in.string(), "; choose another folder");
  QOBS_CHECK(!is_within_either(in, out), InvalidArgument, "output folder ", out.string(),
             " contains the input checkpoint ", in.string(),
             " (replacing it would delete the input); choose a folder outside the input");
  QOBS_CHECK(!is_within_either(out, in), InvalidArgument, "output folder ", out.string(),
             " is inside the input checkpoint ", in.string(),
             " (it would be copied into itself); choose a folder "
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

std::string marker_text(const std::string& host, long pid) { return concat("qobs-tmp ", host, " ", pid, "\n"); }

std::string read_small_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::string s(256, '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<std::size_t>(f.gcount()));
  return s;
}

// `.OUT.<kind>-<host>-<pid>` beside OUT: the temporary folder ("qobs-tmp") or the
// previous OUT moved aside while publishing ("qobs-old").
fs::path sibling(const fs::path& out, const char* kind, const std::string& host, long pid) {
  return out.parent_path() / concat(".", out.filename().string(), ".", kind, "-", host, "-", pid);
}

// A run killed by SIGKILL cannot clean up: its `.OUT.qobs-tmp-<host>-<pid>` stays. Such
// folders of this host whose process is dead are removed (the marker must agree, so a
// user's folder that merely looks alike is kept); a `.OUT.qobs-old-<host>-<pid>` is the
// previous complete OUT moved aside during publishing: put back when OUT is missing
// (the kill fell between the two renames), else removed. Other hosts' folders (shared
// file systems) and live PIDs are never touched.
void remove_stale_siblings(const fs::path& out, const std::string& host) {
  const std::string tmp_prefix = concat(".", out.filename().string(), ".qobs-tmp-", host, "-");
  const std::string old_prefix = concat(".", out.filename().string(), ".qobs-old-", host, "-");
  std::error_code ec;
  std::vector<std::pair<fs::path, bool>> stale;  // path, is_old
  for (auto it = fs::directory_iterator(out.parent_path(), ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
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

bool is_other_weight_format(std::string_view name) {
  // Weights in formats other than safetensors would hold the unquantized model next to
  // a config that says it is quantized; loaders prefer them in some setups.
  // (.safetensors files that the index does not list, e.g. Mistral's
  // consolidated.safetensors, are another copy of the weights too.)
  for (const char* ext : {".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt", ".onnx", ".gguf"})
    if (name.ends_with(ext)) return true;
  return false;
}

}  // namespace

OutputFolder prepare_output(const QuantizeOptions& o) {
  OutputFolder f;
  // A dry run may have no output folder at all.
  if (!o.output_dir.empty()) f.out = fs::absolute(fs::path(o.output_dir)).lexically_normal();
  // "out/" names the folder too; without this its temporary sibling would land inside it.
  if (!f.out.empty() && !f.out.has_filename()) f.out = f.out.parent_path();
  if (o.dry_run) return f;
  QOBS_CHECK(!o.output_dir.empty(), InvalidArgument, "no output folder given (-o OUT_DIR)");
  f.host = host_name();
  check_output_relation(fs::absolute(fs::path(o.model_path)).lexically_normal(), f.out);
  remove_stale_siblings(f.out, f.host);
  std::error_code ec;
  if (fs::exists(f.out, ec))
    QOBS_CHECK(o.overwrite, IoError, f.out.string(), ": output folder already exists (pass --overwrite to replace it)");
  f.tmp = sibling(f.out, "qobs-tmp", f.host, static_cast<long>(getpid()));
  return f;
}

void create_temporary(const OutputFolder& f) {
  remove_quietly(f.tmp);
  std::error_code ec;
  fs::create_directories(f.tmp, ec);
  QOBS_CHECK(!ec, IoError, f.tmp.string(), ": cannot create the temporary output folder: ", ec.message());
  write_text(f.tmp / kTmpMarker, marker_text(f.host, static_cast<long>(getpid())));
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  f.close();  // a failure to flush the last bytes shows only here
  QOBS_CHECK(!f.fail(), IoError, p.string(), ": write failed (disk full?)");
}

void write_reports(const fs::path& dir, const QuantizeReport& report) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  QOBS_CHECK(!ec, IoError, dir.string(), ": cannot create the report folder: ", ec.message());
  write_text(dir / "qobs-report.json", report.to_json());
  write_text(dir / "qobs-report.csv", report.to_csv());
}

void write_index(const fs::path& dir, const Checkpoint& ckpt, const QuantizePlan& plan, uint64_t total_size) {
  nlohmann::ordered_json idx;
  idx["metadata"] = {{"total_size", total_size}};
  nlohmann::json wm = nlohmann::json::object();
  for (std::size_t s = 0; s < plan.shard_specs.size(); ++s)
    for (const TensorSpec& t : plan.shard_specs[s]) wm[t.name] = ckpt.shard_names()[s];
  idx["weight_map"] = wm;
  write_text(dir / "model.safetensors.index.json", idx.dump(2) + "\n");
}

void write_config(const fs::path& dir, const Checkpoint& ckpt, const QuantizePlan& plan) {
  // Keys sorted, 2-space indent (R8.7.3).
  QuantizationConfig qc;
  if (plan.config) {
    // --config: the groups, ignore list and kv_cache_scheme as given, each group with
    // its format, as model_free_ptq writes them.
    qc.kv_cache_scheme = plan.config->kv_cache_scheme;
    qc.ignore = plan.config->ignore;
    for (const PlanGroup& g : plan.groups) qc.config_groups.emplace_back(g.name, g.scheme);
  } else {
    QuantizationScheme group = plan.groups[0].scheme;
    group.targets = {"Linear"};
    for (const PlannedModule& m : plan.modules)
      if (!is_linear_weight(m.module + ".weight", m.weight->shape)) group.targets.push_back(m.module);
    qc.config_groups.emplace_back("group_0", group);
    qc.ignore = plan.targets.ignored;
  }
  qc.format = plan.format;
  qc.quantization_status = QuantizationStatus::kCompressed;
  qc.moe_sparsity_config = plan.moe_sparsity_config;
  // R8.7: compressed-tensors 0.20's ModelCompressor writer: the config's own keys, then
  // an empty sparsity and transform config and the version
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
  write_text(dir / "config.json", config.dump(2) + "\n");
}

// Relative paths are built from the names met while walking (never fs::relative, which
// resolves symlinks: in a Hugging Face cache snapshot every file is a link to
// ../../blobs/<sha>, and resolving it sent the copies outside the output). A link is
// followed for its content: a link to a file becomes a regular file with the link's
// name; a linked folder is walked unless it leads back to a folder being walked (a loop).
void copy_other_files(const std::string& model_path, const Checkpoint& ckpt, const fs::path& dir,
                      const std::function<void()>& check_cancel) {
  std::error_code ec;
  if (!fs::is_directory(model_path, ec)) return;  // a single .safetensors file was given
  std::set<std::string> own(ckpt.shard_names().begin(), ckpt.shard_names().end());
  own.insert("model.safetensors.index.json");
  own.insert("config.json");
  const auto skip = [&](const std::string& rel) { return own.count(rel) > 0 || is_other_weight_format(rel); };
  std::vector<fs::path> walking;  // canonical folders from the model folder down to the current one
  const std::function<void(const fs::path&, const fs::path&)> walk = [&](const fs::path& from, const fs::path& rel) {
    const fs::path real = fs::canonical(from, ec);
    if (ec || std::find(walking.begin(), walking.end(), real) != walking.end()) return;
    walking.push_back(real);
    std::vector<fs::directory_entry> entries;
    for (auto it = fs::directory_iterator(from, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
      entries.push_back(*it);
    QOBS_CHECK(!ec, IoError, from.string(), ": cannot list the folder: ", ec.message());
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
      const fs::path dest = (dir / r).lexically_normal();
      QOBS_CHECK(is_within(dest, dir) && dest != dir.lexically_normal(), IoError, e.path().string(),
                 ": copy destination ", dest.string(), " is outside the output folder");
      fs::create_directories(dest.parent_path(), ec);
      QOBS_CHECK(!ec, IoError, dest.parent_path().string(), ": cannot create the folder: ", ec.message());
      fs::copy_file(e.path(), dest, fs::copy_options::overwrite_existing, ec);
      QOBS_CHECK(!ec, IoError, e.path().string(), ": cannot copy to the output: ", ec.message());
    }
    walking.pop_back();
  };
  walk(fs::path(model_path), fs::path());
}

void publish(const OutputFolder& f) {
  std::error_code ec;
  if (fs::exists(f.out, ec)) {
    const fs::path old = sibling(f.out, "qobs-old", f.host, static_cast<long>(getpid()));
    remove_quietly(old);
    fs::rename(f.out, old, ec);
    QOBS_CHECK(!ec, IoError, f.out.string(), ": cannot move the existing folder aside: ", ec.message());
    fs::rename(f.tmp, f.out, ec);
    QOBS_CHECK(!ec, IoError, f.out.string(), ": cannot rename the finished output into place: ", ec.message());
    remove_quietly(old);
  } else {
    fs::rename(f.tmp, f.out, ec);
    QOBS_CHECK(!ec, IoError, f.out.string(), ": cannot rename the finished output into place: ", ec.message());
  }
  // Only after the rename: until then the marker identifies an abandoned folder. One
  // left in OUT is harmless: only temporary folders are checked for it.
  fs::remove(f.out / kTmpMarker, ec);
}

void remove_quietly(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
}

[[noreturn]] void rethrow_naming_output(const OutputFolder& f) {
  try {
    throw;
  } catch (const IoError& e) {
    std::string m = e.what();
    const std::string t = f.tmp.string();
    if (f.tmp.empty() || m.find(t) == std::string::npos) throw;
    for (auto p = m.find(t); p != std::string::npos; p = m.find(t, p + f.out.string().size()))
      m.replace(p, t.size(), f.out.string());
    throw IoError(concat(m, " (while writing the temporary folder ", t, ")"));
  }
}

}  // namespace qobs::detail
