// quantize_checkpoint on hostile folder layouts and in failure paths: Hugging Face cache
// snapshots (every file a symlink), output folders related to the input, stale temporary
// folders of killed runs, cancellation, very long module names, report files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "qobs/io.h"
#include "qobs/pipeline.h"
#include "qobs/qobs.h"
#include "test_util.h"

namespace qobs {
namespace {
namespace fs = std::filesystem;

using testing::expect_error;
using testing::TempDir;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Every file below `root` (links listed as links, not followed) with its content, by
// relative path; `skip` (a direct child of root) is left out.
std::map<std::string, std::string> tree(const fs::path& root, const std::string& skip = "") {
  std::map<std::string, std::string> t;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const std::string rel = it->path().lexically_relative(root).generic_string();
    if (!skip.empty() && (rel == skip || rel.rfind(skip + "/", 0) == 0)) {
      if (it->is_directory() && !it->is_symlink()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_symlink()) t[rel] = "-> " + fs::read_symlink(it->path()).string();
    else if (it->is_regular_file()) t[rel] = slurp(it->path());
    else t[rel] = "<dir>";
  }
  return t;
}

std::vector<std::pair<std::string, Tensor>> small_model(
    const std::string& linear_module = "model.layers.0.mlp.up_proj") {
  std::vector<double> v(16 * 128);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.01 * static_cast<double>(static_cast<int>(i % 37) - 18);
  return {{linear_module + ".weight", Tensor::from_values(DType::kF32, {16, 128}, v)},
          {"model.norm.weight", Tensor::from_values(DType::kF32, {2}, {1, 1})}};
}

void write_small_model(const fs::path& dir) {
  fs::create_directories(dir);
  write_safetensors((dir / "model.safetensors").string(), small_model());
  std::ofstream(dir / "config.json") << R"({"model_type": "llama"})";
  std::ofstream(dir / "tokenizer.json") << R"({"tok": 1})";
}

QuantizeOptions options(const fs::path& in, const fs::path& out) {
  QuantizeOptions o;
  o.model_path = in.string();
  o.output_dir = out.string();
  o.scheme = "W4A16";
  o.baseline = false;
  return o;
}

// A PID that certainly belongs to no process: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int st = 0;
  waitpid(pid, &st, 0);
  return pid;
}

std::string this_host() {
  char b[256] = {};
  gethostname(b, sizeof b - 1);
  return b;
}

// A Hugging Face hub cache: blobs/<sha> holds the content, snapshots/<hash>/ holds relative
// links to it, including from sub-folders. A copy computed with fs::relative would
// resolve the links and write ../../blobs/<sha> outside the output.
TEST(PipelineSafety, HfCacheSnapshotCopiesLinkedFilesInsideOutput) {
  TempDir dir;
  const fs::path repo = dir.path / "hub" / "models--org--name";
  const fs::path snap = repo / "snapshots" / "0123abcd";
  fs::create_directories(repo / "blobs");
  fs::create_directories(snap / "1_Pooling");
  const auto blob = [&](const std::string& sha, const fs::path& link, const std::string& content) {
    std::ofstream(repo / "blobs" / sha, std::ios::binary) << content;
    const std::string up = link.has_parent_path() ? "../../../blobs/" : "../../blobs/";
    fs::create_symlink(up + sha, snap / link);
  };
  write_safetensors((repo / "blobs" / "aaa1").string(), small_model());
  fs::create_symlink("../../blobs/aaa1", snap / "model.safetensors");
  blob("bbb2", "config.json", R"({"model_type": "llama"})");
  blob("ccc3", "tokenizer.json", R"({"tok": 1})");
  blob("ddd4", "1_Pooling/config.json", R"({"pooling": "mean"})");
  // a linked folder is followed; a link back to an ancestor (a loop) is not
  fs::create_directories(dir.path / "shared_extra");
  std::ofstream(dir.path / "shared_extra" / "notes.txt") << "extra";
  fs::create_directory_symlink(dir.path / "shared_extra", snap / "extra");
  fs::create_directory_symlink("..", snap / "1_Pooling" / "loop");

  const fs::path out = dir.path / "a" / "b" / "out";
  fs::create_directories(out.parent_path());
  const auto before = tree(dir.path, "a");
  quantize_checkpoint(options(snap, out));

  EXPECT_EQ(tree(dir.path, "a"), before);  // nothing written outside OUT (the bug wrote dir/blobs/<sha>)
  EXPECT_EQ(tree(dir.path / "a", "b/out"), (std::map<std::string, std::string>{{"b", "<dir>"}}));
  const std::map<std::string, std::string> expected = {{"tokenizer.json", R"({"tok": 1})"},
                                                       {"1_Pooling/config.json", R"({"pooling": "mean"})"},
                                                       {"extra/notes.txt", "extra"}};
  for (const auto& [rel, content] : expected) {
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(out / rel))) << rel << " is not a regular file";
    EXPECT_EQ(slurp(out / rel), content) << rel;
  }
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(out / "model.safetensors")));
  EXPECT_FALSE(fs::exists(fs::symlink_status(out / "1_Pooling" / "loop")));
  EXPECT_FALSE(fs::exists(out / ".qobs-tmp-owner"));
  for (const auto& [rel, content] : tree(out)) EXPECT_EQ(rel.find("loop"), std::string::npos) << rel;
}

// OUT equal to MODEL, holding it (replacing it deleted the input) or inside it (it was
// copied into itself): refused before anything is written, with or without --overwrite.
TEST(PipelineSafety, OutputMayNotBeRelatedToInput) {
  TempDir dir;
  const fs::path in = dir.path / "a" / "b" / "in";
  write_small_model(in);
  fs::create_directories(in / "sub");
  std::ofstream(in / "sub" / "file.txt") << "kept";
  fs::create_directory_symlink(in, dir.path / "link_to_in");
  const auto input_before = tree(in);
  const auto all_before = tree(dir.path);
  struct Case {
    fs::path out;
    const char* why;
  };
  const std::vector<Case> cases = {
      {in, "is the input checkpoint"},
      {dir.path / "a" / "b" / "in" / "", "is the input checkpoint"},
      {dir.path / "a" / "b" / "c" / ".." / "in", "is the input checkpoint"},
      {dir.path / "link_to_in", "is the input checkpoint"},
      {dir.path / "a" / "b", "contains the input checkpoint"},
      {dir.path / "a", "contains the input checkpoint"},
      {in / "sub", "is inside the input checkpoint"},
      {in / "new_out", "is inside the input checkpoint"},
      {dir.path / "link_to_in" / "new_out", "is inside the input checkpoint"},
  };
  for (const bool overwrite : {false, true})
    for (const Case& c : cases) {
      QuantizeOptions o = options(in, c.out);
      o.overwrite = overwrite;
      expect_error<InvalidArgument>([&] { quantize_checkpoint(o); }, {c.why, in.string()});
      EXPECT_EQ(tree(in), input_before) << c.out << (overwrite ? " --overwrite" : "");
      EXPECT_EQ(tree(dir.path), all_before) << c.out << (overwrite ? " --overwrite" : "");
    }
  // the model given as one file: its folder holds it too
  QuantizeOptions o = options(in / "model.safetensors", in);
  o.overwrite = true;
  expect_error<InvalidArgument>([&] { quantize_checkpoint(o); }, {"contains the input checkpoint"});
  EXPECT_EQ(tree(dir.path), all_before);
  // a sibling is fine
  quantize_checkpoint(options(in, dir.path / "a" / "b" / "in_w4"));
  EXPECT_TRUE(fs::exists(dir.path / "a" / "b" / "in_w4" / "sub" / "file.txt"));
  EXPECT_EQ(tree(in), input_before);
}

// Folders a SIGKILLed run left: only those of this host with a dead PID are cleaned up.
TEST(PipelineSafety, StaleTempFoldersOfDeadRunsAreRemoved) {
  TempDir dir;
  write_small_model(dir.path / "in");
  const std::string host = this_host();
  const pid_t dead = dead_pid();
  const pid_t live = getppid();  // not this process: its own name is the run's temporary folder
  const auto fake_tmp = [&](const std::string& h, pid_t pid, bool marker) {
    const fs::path p = dir.path / (".out.qobs-tmp-" + h + "-" + std::to_string(pid));
    fs::create_directories(p);
    std::ofstream(p / "model.safetensors") << "partial";
    if (marker) std::ofstream(p / ".qobs-tmp-owner") << "qobs-tmp " << h << " " << pid << "\n";
    return p;
  };
  const fs::path stale = fake_tmp(host, dead, true);
  const fs::path alive = fake_tmp(host, live, true);
  const fs::path other_host = fake_tmp(host + "x", dead, true);
  const fs::path no_marker = fake_tmp(host, dead_pid(), false);  // looks alike but not made by qobs
  const fs::path user_dir = dir.path / (".out.qobs-tmp-" + host + "-" + std::to_string(dead) + "0");
  fs::create_directories(user_dir);  // looks alike, no marker: kept

  QuantizeOptions o = options(dir.path / "in", dir.path / "out");
  o.dry_run = true;  // a dry run writes nothing and cleans nothing
  quantize_checkpoint(o);
  EXPECT_TRUE(fs::exists(stale));
  o.dry_run = false;
  quantize_checkpoint(o);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(alive / "model.safetensors"));
  EXPECT_TRUE(fs::exists(other_host / "model.safetensors"));
  EXPECT_TRUE(fs::exists(no_marker / "model.safetensors"));
  EXPECT_TRUE(fs::exists(user_dir));

  // Killed between "move the old OUT aside" and "rename the new one in": OUT is missing
  // and the old result is the only copy, so it is put back, not deleted.
  const fs::path old = dir.path / (".out.qobs-old-" + host + "-" + std::to_string(dead));
  fs::rename(dir.path / "out", old);
  std::ofstream(old / "mine.txt") << "previous result";
  const fs::path old_live = dir.path / (".out.qobs-old-" + host + "-" + std::to_string(live));
  fs::create_directories(old_live);
  expect_error<IoError>([&] { quantize_checkpoint(o); }, {"already exists"});
  EXPECT_EQ(slurp(dir.path / "out" / "mine.txt"), "previous result");
  EXPECT_FALSE(fs::exists(old));
  EXPECT_TRUE(fs::exists(old_live));
  // with OUT present, a stale old copy is just removed
  fs::create_directories(old);
  o.overwrite = true;
  quantize_checkpoint(o);
  EXPECT_FALSE(fs::exists(old));
  EXPECT_FALSE(fs::exists(dir.path / "out" / "mine.txt"));
}

// The cancellation flag (set by the CLI's signal handler) stops the run between layers
// and removes the temporary folder; an existing OUT stays as it was.
TEST(PipelineSafety, CancelFlagStopsAndRemovesTemp) {
  TempDir dir;
  const fs::path in = dir.path / "in";
  fs::create_directories(in);
  std::vector<std::pair<std::string, Tensor>> t;
  for (int l = 0; l < 6; ++l) t.push_back(small_model("model.layers." + std::to_string(l) + ".mlp.up_proj")[0]);
  write_safetensors((in / "model.safetensors").string(), t);
  fs::create_directories(dir.path / "out");
  std::ofstream(dir.path / "out" / "old.txt") << "old";
  std::atomic<bool> cancel{false};
  QuantizeOptions o = options(in, dir.path / "out");
  o.overwrite = true;
  o.cancel = &cancel;
  int64_t seen = 0;
  bool tmp_existed = false;
  expect_error<Interrupted>(
      [&] {
        quantize_checkpoint(o, [&](const Progress& p) {
          seen = p.done;
          for (const auto& e : fs::directory_iterator(dir.path))
            tmp_existed = tmp_existed || e.path().filename().string().rfind(".out.qobs-tmp-", 0) == 0;
          if (p.done == 2) cancel = true;
        });
      },
      {(dir.path / "out").string(), "interrupted"});
  EXPECT_EQ(seen, 2);
  EXPECT_TRUE(tmp_existed);
  EXPECT_EQ(tree(dir.path, "in"), (std::map<std::string, std::string>{{"out", "<dir>"}, {"out/old.txt", "old"}}));
}

// std::regex backtracked recursively over the whole name and overflowed the stack.
TEST(PipelineSafety, LongModuleNamesMatchInLinearTime) {
  for (const std::size_t len : {std::size_t{50000}, std::size_t{1000000}}) {
    TempDir dir;
    fs::create_directories(dir.path / "in");
    const std::string long_module = "model.layers.0." + std::string(len, 'x') + ".up_proj";
    auto t = small_model();
    t.push_back(small_model(long_module)[0]);
    write_safetensors((dir.path / "in" / "model.safetensors").string(), t);
    QuantizeOptions o = options(dir.path / "in", {});
    o.dry_run = true;
    o.ignore = {"re:.*norm"};  // runs over the whole long name, matches only model.norm
    const auto start = std::chrono::steady_clock::now();
    QuantizeReport r = quantize_checkpoint(o);
    ASSERT_EQ(r.tensors.size(), 2u) << len;
    EXPECT_EQ(r.tensors[1].module.size(), long_module.size());
    o.ignore = {"re:.*x+\\.up_proj$"};
    r = quantize_checkpoint(o);
    ASSERT_EQ(r.tensors.size(), 1u) << len;
    EXPECT_EQ(r.ignored, std::vector<std::string>{long_module});
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 20.0) << len;
  }
}

TEST(PipelineSafety, InvalidPatternNamesOptionAndRe2Error) {
  TempDir dir;
  write_small_model(dir.path / "in");
  QuantizeOptions o = options(dir.path / "in", dir.path / "out");
  o.ignore = {"re:(?=lm_head)"};  // lookahead: Python re has it, RE2 does not
  expect_error<InvalidArgument>([&] { quantize_checkpoint(o); },
                                {"--ignore pattern 're:(?=lm_head)'", "lookaround", "invalid perl operator: (?="});
  o.ignore.clear();
  o.targets = {"re:up_proj("};
  expect_error<InvalidArgument>([&] { quantize_checkpoint(o); }, {"--targets pattern 're:up_proj('", "missing )"});
  EXPECT_FALSE(fs::exists(dir.path / "out"));
}

// Module names are free text in a safetensors header; a comma split the row.
TEST(PipelineSafety, CsvQuotesModuleNames) {
  QuantizeReport r;
  r.scheme = "W4A16";
  for (const char* m : {"a,b", "say \"hi\"", "two\nlines", "plain"}) {
    TensorReport t;
    t.module = m;
    t.shape = {2, 2};
    t.dtype = "float32";
    t.observer = "memoryless_minmax";
    r.tensors.push_back(t);
  }
  const std::string csv = r.to_csv();
  EXPECT_NE(csv.find("\n\"a,b\",2x2,float32,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\n\"say \"\"hi\"\"\",2x2,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\n\"two\nlines\",2x2,"), std::string::npos) << csv;
  EXPECT_NE(csv.find("\nplain,2x2,"), std::string::npos) << csv;
}

// The dry-run branch wrote the report through unchecked std::ofstream: a failure was silent.
TEST(PipelineSafety, DryRunReportWriteErrorsNameTheFile) {
  TempDir dir;
  write_small_model(dir.path / "in");
  fs::create_directories(dir.path / "rep" / "qobs-report.json");  // a folder where the file goes
  QuantizeOptions o = options(dir.path / "in", {});
  o.dry_run = true;
  o.report_dir = (dir.path / "rep").string();
  expect_error<IoError>([&] { quantize_checkpoint(o); }, {(dir.path / "rep" / "qobs-report.json").string()});
  std::ofstream(dir.path / "file") << "x";
  o.report_dir = (dir.path / "file" / "rep").string();
  expect_error<IoError>([&] { quantize_checkpoint(o); }, {*o.report_dir, "cannot create the report folder"});
}

}  // namespace
}  // namespace qobs
