// Hugging Face checkpoint folders: a single model.safetensors or shards listed in
// model.safetensors.index.json (R8.8.2).
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/input.h"
#include "qobs/io.h"

namespace qobs {
namespace fs = std::filesystem;

namespace {

// A JSON file of the folder, checked in full now: a file that is not JSON or nests
// deeper than kMaxJsonDepth fails at open, before any tensor is quantized, and never
// reaches the recursive writers and printers that run later.
nlohmann::json read_json(const fs::path& p) {
  return detail::parse_json_limited(detail::read_regular_file(p.string()), p.string(), kMaxJsonDepth);
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& path) {
  Checkpoint c;
  std::error_code ec;
  const fs::path p(path);
  QOBS_CHECK(fs::exists(p, ec), IoError, path, ": no such file or folder");
  if (fs::is_regular_file(p, ec)) {
    c.dir_ = p.parent_path().empty() ? std::string(".") : p.parent_path().string();
    c.shard_names_ = {p.filename().string()};
  } else {
    QOBS_CHECK(fs::is_directory(p, ec), IoError, path, ": not a file or folder");
    c.dir_ = path;
    const fs::path index = p / "model.safetensors.index.json";
    if (fs::exists(index, ec)) {
      c.sharded_ = true;
      const nlohmann::json j = read_json(index);
      QOBS_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), IoError, index.string(),
                 ": missing weight_map object (R8.8.2)");
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        QOBS_CHECK(it.value().is_string(), IoError, index.string(), ": weight_map entry '", it.key(),
                   "' is not a file name");
        const std::string f = it.value().get<std::string>();
        // The index may only name files inside the folder.
        QOBS_CHECK(f.find('/') == std::string::npos && f != ".." && !f.empty(), IoError, index.string(),
                   ": weight_map entry '", it.key(), "' names '", f, "', not a file in the folder");
        if (std::find(c.shard_names_.begin(), c.shard_names_.end(), f) == c.shard_names_.end())
          c.shard_names_.push_back(f);
      }
      std::sort(c.shard_names_.begin(), c.shard_names_.end());
      c.shards_.reserve(c.shard_names_.size());
      for (const auto& f : c.shard_names_) c.shards_.push_back(SafetensorsFile::open((p / f).string()));
      for (std::size_t s = 0; s < c.shards_.size(); ++s)
        for (std::size_t t = 0; t < c.shards_[s].tensors().size(); ++t) {
          const std::string& name = c.shards_[s].tensors()[t].name;
          QOBS_CHECK(c.where_.emplace(name, std::make_pair(s, t)).second, IoError, (p / c.shard_names_[s]).string(),
                     ": tensor '", name, "' also appears in another shard");
        }
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        const auto w = c.where_.find(it.key());
        QOBS_CHECK(w != c.where_.end() && c.shard_names_[w->second.first] == it.value().get<std::string>(), IoError,
                   index.string(), ": tensor '", it.key(), "' is not in ", it.value().get<std::string>());
      }
      QOBS_CHECK(c.where_.size() == j["weight_map"].size(), IoError, index.string(),
                 ": the shards hold tensors that the weight_map does not list");
    } else {
      for (const auto& e : fs::directory_iterator(p, ec))
        if (e.is_regular_file() && e.path().extension() == ".safetensors")
          c.shard_names_.push_back(e.path().filename().string());
      QOBS_CHECK(!ec, IoError, path, ": cannot list: ", ec.message());
      std::sort(c.shard_names_.begin(), c.shard_names_.end());
      QOBS_CHECK(!c.shard_names_.empty(), IoError, path,
                 ": no *.safetensors file and no model.safetensors.index.json (only safetensors checkpoints are read)");
    }
    const fs::path cfg = p / "config.json";
    if (fs::exists(cfg, ec)) {
      c.config_json_ = detail::read_regular_file(cfg.string());
      if (!c.config_json_.empty()) detail::parse_json_limited(c.config_json_, cfg.string(), kMaxJsonDepth);
    }
  }
  if (c.shards_.empty()) {
    for (const auto& f : c.shard_names_) c.shards_.push_back(SafetensorsFile::open((fs::path(c.dir_) / f).string()));
    for (std::size_t s = 0; s < c.shards_.size(); ++s)
      for (std::size_t t = 0; t < c.shards_[s].tensors().size(); ++t) {
        const std::string& name = c.shards_[s].tensors()[t].name;
        QOBS_CHECK(c.where_.emplace(name, std::make_pair(s, t)).second, IoError,
                   (fs::path(c.dir_) / c.shard_names_[s]).string(), ": tensor '", name,
                   "' also appears in another file");
      }
  }
  return c;
}

std::optional<std::pair<std::size_t, const TensorInfo*>> Checkpoint::find(std::string_view name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) return std::nullopt;
  return std::make_pair(it->second.first, &shards_[it->second.first].tensors()[it->second.second]);
}

std::size_t Checkpoint::num_tensors() const { return where_.size(); }

uint64_t Checkpoint::total_bytes() const {
  uint64_t b = 0;
  for (const auto& s : shards_)
    for (const auto& t : s.tensors()) b += t.nbytes();
  return b;
}

}  // namespace qobs
