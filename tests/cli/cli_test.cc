// The qobs executable: exit codes, messages and files. The binary is looked up beside
// the test binary (<build>/cli/qobs); the tests skip when the CLI was not built.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "qobs/io.h"

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

Result run(const std::string& args) {
  const std::string cmd = cli_path().string() + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
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
  EXPECT_NE(r.out.find("qobs quantize MODEL_DIR"), std::string::npos);
  r = run("quantize " + p("in") + " -o " + p("out") + " --scheme W4A16 --bogus");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("unknown option --bogus"), std::string::npos);
  EXPECT_EQ(run("quantize " + p("in") + " -o " + p("out")).rc, 2);  // no --scheme
  EXPECT_EQ(run("frobnicate").rc, 2);
  EXPECT_EQ(run("quantize " + p("in") + " -o " + p("out") + " --scheme W4A16 --threads 0").rc, 2);
}

TEST_F(Cli, QuantizeInspectDequantize) {
  Result r = run("quantize " + p("in") + " -o " + p("out") + " --scheme W4A16 --observer memoryless_mse "
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

}  // namespace
}  // namespace qobs
