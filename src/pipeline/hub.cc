// Hub ids resolved in the local Hugging Face cache (huggingface_hub's layout:
// <cache>/models--org--name/{refs/<revision>, snapshots/<commit>/, blobs/}). Offline only.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "qobs/pipeline.h"

namespace qobs {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// The cache folder and the rule that chose it, in huggingface_hub's order.
std::pair<fs::path, std::string> hub_cache() {
  if (!env("HF_HUB_CACHE").empty()) return {env("HF_HUB_CACHE"), "$HF_HUB_CACHE"};
  if (!env("HF_HOME").empty()) return {fs::path(env("HF_HOME")) / "hub", "$HF_HOME/hub"};
  if (!env("XDG_CACHE_HOME").empty())
    return {fs::path(env("XDG_CACHE_HOME")) / "huggingface" / "hub", "$XDG_CACHE_HOME/huggingface/hub"};
  return {fs::path(env("HOME")) / ".cache" / "huggingface" / "hub", "~/.cache/huggingface/hub"};
}

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'; }

// `name` or `org/name`, each part of [A-Za-z0-9._-], not starting with '.' or '-'
// (so no "..", no absolute or relative path spelling).
bool looks_like_hub_id(const std::string& s) {
  std::size_t parts = 0;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, '/')) {
    ++parts;
    if (part.empty() || part[0] == '.' || part[0] == '-') return false;
    for (char c : part)
      if (!is_name_char(c)) return false;
  }
  return parts >= 1 && parts <= 2 && !s.ends_with("/");
}

bool is_commit_hash(const std::string& s) {
  return s.size() == 40 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

std::string resolve_model_path(const std::string& model, const std::string& revision) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(model, ec))) return model;
  QOBS_CHECK(looks_like_hub_id(model), IoError, model,
             ": no such file or folder (and not a Hugging Face hub id of the form org/name)");
  const auto [cache, rule] = hub_cache();
  std::string repo_dir = "models--" + model;
  for (std::size_t p = 0; (p = repo_dir.find('/', p)) != std::string::npos;) repo_dir.replace(p, 1, "--");
  const fs::path repo = cache / repo_dir;
  const std::string advice = ". qobs never downloads; fetch the model first with `huggingface-cli download " + model +
                             (revision == "main" ? "" : " --revision " + revision) +
                             "` (or pass a folder), or point HF_HUB_CACHE / HF_HOME at the cache that holds it";
  QOBS_CHECK(fs::is_directory(repo, ec), IoError, model,
             ": no such file or folder, and not in the local Hugging Face cache (", rule, "): ", repo.string(),
             " does not exist", advice);
  std::string commit;
  const fs::path ref = repo / "refs" / revision;
  if (revision.find("..") == std::string::npos && fs::is_regular_file(ref, ec)) {
    std::ifstream in(ref);
    std::getline(in, commit);
    while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back()))) commit.pop_back();
    QOBS_CHECK(is_commit_hash(commit), IoError, ref.string(), ": expected a 40-character commit hash, found '", commit,
               "'");
  } else if (is_commit_hash(revision)) {
    commit = revision;
  } else {
    std::string known;
    for (const auto& e : fs::directory_iterator(repo / "refs", ec))
      known += (known.empty() ? "" : ", ") + e.path().filename().string();
    QOBS_THROW(IoError, model, ": revision '", revision, "' is not cached: no ", ref.string(),
               known.empty() ? std::string() : " (cached refs: " + known + ")",
               " and it is not a 40-character commit hash", advice);
  }
  const fs::path snap = repo / "snapshots" / commit;
  QOBS_CHECK(fs::is_directory(snap, ec), IoError, model, ": revision ", revision, " is commit ", commit,
             " but its snapshot ", snap.string(), " is not in the cache", advice);
  return snap.string();
}

}  // namespace qobs
