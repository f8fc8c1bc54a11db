// MPI mode, end to end (built with -DQOBS_MPI=ON; tools/test_mpi.sh): generated sharded
// checkpoints converted by `mpirun -n N qobs quantize` must give the single-process
// output folder byte for byte (the report up to its timings and rank fields); a failing
// or killed rank must leave nothing published. Run with `--mpi-stats` under mpirun, this
// program is the rank side of the statistics-reduction test.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "qobs/cuda.h"
#include "qobs/mpi.h"
#include "qobs/qobs.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

std::string g_self;  // this program, for the mpirun'd statistics check

std::string cli() { return QOBS_CLI_PATH; }
std::string mpirun(int n) {
  return std::string("mpirun --oversubscribe --allow-run-as-root -n ") + std::to_string(n) + " ";
}

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

int run(const std::string& cmd, std::string* output = nullptr) {
  const std::string full = cmd + " > out.log 2>&1";
  const int rc = std::system(("cd " + fs::current_path().string() + " && " + full).c_str());
  if (output) *output = read_file("out.log");
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

// A decoder-like checkpoint: `layers` layers of q/k/v/o and gate/up/down (q/k/v and
// gate/up are the fused groups of NVFP4), norms that pass through, spread over `shards`
// files with an index. `nan_in` names a weight that gets a NaN (a bad tensor).
void make_checkpoint(const fs::path& dir, int layers, int shards, int64_t width, const std::string& nan_in = "") {
  fs::create_directories(dir);
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.f, 0.05f);
  const auto tensor = [&](const std::string& name, qobs::Shape shape) {
    std::vector<float> v(static_cast<std::size_t>(qobs::shape_numel(shape)));
    for (auto& x : v) x = nd(rng);
    if (name == nan_in) v[3] = NAN;
    return std::make_pair(name, qobs::Tensor::from_floats(qobs::DType::kBF16, shape, v));
  };
  nlohmann::json map = nlohmann::json::object();
  uint64_t total = 0;
  for (int s = 0; s < shards; ++s) {
    std::vector<std::pair<std::string, qobs::Tensor>> ts;
    for (int l = s; l < layers; l += shards) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"})
        ts.push_back(tensor(p + m + ".weight", {width, width}));
      ts.push_back(tensor(p + "mlp.gate_proj.weight", {2 * width, width}));
      ts.push_back(tensor(p + "mlp.up_proj.weight", {2 * width, width}));
      ts.push_back(tensor(p + "mlp.down_proj.weight", {width, 2 * width}));
      ts.push_back(tensor(p + "input_layernorm.weight", {width}));
    }
    if (s == 0) ts.push_back(tensor("model.embed_tokens.weight", {64, width}));
    const std::string file =
        "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
    for (const auto& [n, t] : ts) {
      map[n] = file;
      total += t.nbytes();
    }
    qobs::write_safetensors((dir / file).string(), ts);
  }
  std::ofstream(dir / "model.safetensors.index.json")
      << nlohmann::json{{"metadata", {{"total_size", total}}}, {"weight_map", map}}.dump(2);
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})";
  std::ofstream(dir / "tokenizer.json") << "{}";
}

// The report without what differs between any two runs (timings) and what only a run
// over several ranks adds (rank fields).
std::string comparable_report(const std::string& json) {
  auto j = nlohmann::ordered_json::parse(json);
  j.erase("seconds");
  j.erase("ranks");
  for (auto& t : j["tensors"]) {
    t.erase("seconds");
    t.erase("rank");
  }
  return j.dump(1);
}

std::string comparable_csv(const std::string& csv) {
  std::istringstream in(csv);
  std::string line, out;
  while (std::getline(in, line)) {  // the 8th column is the time
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string x; std::getline(ls, x, ',');) f.push_back(x);
    if (f.size() > 7) f.erase(f.begin() + 7);
    for (const auto& x : f) out += x + ",";
    out += "\n";
  }
  return out;
}

// Every file of `a` and `b` equal byte for byte (the reports up to timings and ranks).
void expect_same_folder(const fs::path& a, const fs::path& b) {
  std::set<std::string> names;
  for (const fs::path& d : {a, b})
    for (const auto& e : fs::recursive_directory_iterator(d)) names.insert(fs::relative(e.path(), d).string());
  ASSERT_GT(names.size(), 3u);
  for (const std::string& n : names) {
    ASSERT_TRUE(fs::exists(a / n) && fs::exists(b / n)) << n << " is in only one of the folders";
    if (fs::is_directory(a / n)) continue;
    const std::string x = read_file(a / n), y = read_file(b / n);
    if (n == "qobs-report.json") EXPECT_EQ(comparable_report(x), comparable_report(y)) << n;
    else if (n == "qobs-report.csv") EXPECT_EQ(comparable_csv(x), comparable_csv(y)) << n;
    else EXPECT_TRUE(x == y) << n << " differs (" << x.size() << " vs " << y.size() << " bytes)";
  }
}

class MpiQuantize : public ::testing::Test {
 protected:
  void SetUp() override {
    old_ = fs::current_path();
    fs::current_path(dir_.path);
  }
  void TearDown() override { fs::current_path(old_); }

  // The single-process run into ref/, then the MPI run into out/; compared.
  void check_identical(const std::string& scheme, int ranks, int layers, int shards, const std::string& extra = "") {
    make_checkpoint("in", layers, shards, 128);
    const std::string args = " quantize in --scheme " + scheme + " --threads 1 --quiet " + extra;
    std::string log;
    ASSERT_EQ(run(cli() + args + " -o ref", &log), 0) << log;
    ASSERT_EQ(run(mpirun(ranks) + cli() + args + " -o out", &log), 0) << log;
    // The report names OUT: compare both as if written to one path.
    fs::rename("ref/qobs-report.json", "ref.json");
    std::string rj = read_file("ref.json");
    for (std::size_t at; (at = rj.find("/ref\"")) != std::string::npos;) rj.replace(at, 5, "/out\"");
    std::ofstream("ref/qobs-report.json") << rj;
    expect_same_folder("ref", "out");
    const auto rep = nlohmann::json::parse(read_file("out/qobs-report.json"));
    ASSERT_EQ(rep["ranks"].size(), static_cast<std::size_t>(ranks));
    int64_t modules = 0;
    for (const auto& r : rep["ranks"]) modules += r["modules"].get<int64_t>();
    EXPECT_EQ(modules, static_cast<int64_t>(rep["tensors"].size()));
    for (const auto& t : rep["tensors"]) EXPECT_TRUE(t.contains("rank"));
  }

  qobs::testing::TempDir dir_;
  fs::path old_;
};

TEST_F(MpiQuantize, W4A16ThreeRanksIsTheSingleProcessOutput) { check_identical("W4A16", 3, 4, 3); }
TEST_F(MpiQuantize, NVFP4A16FusedGroupsThreeRanks) {
  check_identical("NVFP4A16", 3, 3, 2);
  // A fused group's members share one global scale, so they ran on one rank.
  const auto rep = nlohmann::json::parse(read_file("out/qobs-report.json"));
  std::map<std::string, int> rank;
  for (const auto& t : rep["tensors"]) rank[t["module"]] = t["rank"];
  EXPECT_EQ(rank["model.layers.1.self_attn.q_proj"], rank["model.layers.1.self_attn.v_proj"]);
  EXPECT_EQ(rank["model.layers.1.mlp.gate_proj"], rank["model.layers.1.mlp.up_proj"]);
}
TEST_F(MpiQuantize, FP8BlockThreeRanks) { check_identical("FP8_BLOCK", 3, 3, 3); }
TEST_F(MpiQuantize, OneRank) { check_identical("W4A16", 1, 2, 2); }
// One layer is 5 jobs under NVFP4 (q/k/v, o, gate/up, down, and nothing else): rank 5
// and 6 get none and still take part in every step.
TEST_F(MpiQuantize, MoreRanksThanJobs) { check_identical("NVFP4A16", 7, 1, 1); }

TEST_F(MpiQuantize, ABadTensorOnOneRankFailsAllOnceAndPublishesNothing) {
  make_checkpoint("in", 3, 3, 128, "model.layers.2.mlp.down_proj.weight");
  std::string log;
  const int rc = run(mpirun(3) + cli() + " quantize in --scheme W4A16 --threads 1 --quiet -o out", &log);
  EXPECT_NE(rc, 0) << log;
  EXPECT_FALSE(fs::exists("out")) << log;
  for (const auto& e : fs::directory_iterator("."))
    EXPECT_EQ(e.path().filename().string().find(".out."), std::string::npos) << e.path();
  const std::string needle = "model.layers.2.mlp.down_proj";
  const std::size_t first = log.find(needle);
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("qobs: ", log.find("qobs: ") + 1), std::string::npos) << "reported more than once:\n" << log;
}

// --device cuda under mpirun: with GPUs, each rank on its own (ranks of one host share
// them in turn) gives the single process's folder; without a usable GPU every rank
// fails with the runtime's reason, reported once, and nothing is published.
TEST_F(MpiQuantize, DeviceCudaOnEveryRank) {
  if (qobs::cuda::available()) {
    check_identical("NVFP4A16", 3, 3, 2, "--device cuda");
    return;
  }
  make_checkpoint("in", 2, 1, 128);
  std::string log;
  const int rc = run(mpirun(3) + cli() + " quantize in --scheme W4A16 --threads 1 --quiet --device cuda -o out", &log);
  EXPECT_NE(rc, 0) << log;
  EXPECT_FALSE(fs::exists("out")) << log;
  EXPECT_NE(log.find("--device cuda: " + qobs::cuda::unavailable_reason()), std::string::npos) << log;
  EXPECT_EQ(log.find("qobs: ", log.find("qobs: ") + 1), std::string::npos) << "reported more than once:\n" << log;
}

// The pids of `parent`'s children.
std::vector<pid_t> children(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream st(e.path() / "stat");
    std::string line;
    std::getline(st, line);
    const auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    long ppid = 0;
    rest >> state >> ppid;
    if (ppid == parent) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}

TEST_F(MpiQuantize, AKilledRankPublishesNothing) {
  for (const bool kill_rank0 : {false, true}) {
    SCOPED_TRACE(kill_rank0 ? "rank 0 killed" : "rank 1 or 2 killed");
    fs::remove_all("in");
    make_checkpoint("in", 6, 3, 256);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::freopen("kill.log", "w", stdout);
      ::freopen("kill.log", "a", stderr);
      // A search of ~2000 candidates per group keeps the run going for seconds even on an
      // idle machine, so that the kill lands mid-run.
      const std::string cmd =
          mpirun(3) + cli() +
          " quantize in --scheme W4A16 --observer mse --observer-kwarg grid=2000 "
          "--observer-kwarg maxshrink=0.99 --observer-kwarg patience=100000 --threads 1 --quiet -o out";
      execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    // Wait for the temporary folder (the ranks are past planning), then kill one rank.
    std::string tmp;
    for (int i = 0; i < 600 && tmp.empty(); ++i) {
      for (const auto& e : fs::directory_iterator("."))
        if (e.path().filename().string().starts_with(".out.qobs-tmp-")) tmp = e.path().filename().string();
      if (tmp.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_FALSE(tmp.empty()) << read_file("kill.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const pid_t rank0 = static_cast<pid_t>(std::stol(tmp.substr(tmp.rfind('-') + 1)));
    pid_t victim = 0;
    for (const pid_t c : children(pid))
      if ((c == rank0) == kill_rank0) victim = c;
    ASSERT_NE(victim, 0);
    ASSERT_FALSE(fs::exists("out")) << "finished before the kill: make the model bigger";
    ::kill(victim, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file("kill.log");
    // The surviving ranks' cleanup runs when the launcher stops them.
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_FALSE(fs::exists("out")) << read_file("kill.log");
    EXPECT_FALSE(fs::exists(tmp)) << "the temporary folder was left\n" << read_file("kill.log");
  }
}

// Rank side: each rank observes its own slice; the MPI reduction must equal the
// single-process reduce_statistics of every rank's statistics in rank order.
int mpi_stats_main() {
  qobs::mpi::Session session;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  qobs::QuantizationArgs args;
  args.num_bits = 8;
  args.strategy = qobs::Strategy::kChannel;
  const auto slice = [](int r) {
    std::mt19937 rng(100 + static_cast<unsigned>(r));
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> v(8 * 16);
    for (auto& x : v) x = nd(rng) * static_cast<float>(r + 1) / 3.f;
    return qobs::Tensor::from_floats(qobs::DType::kF32, {8, 16}, v);
  };
  std::vector<qobs::Statistics> all;
  for (const char* name : {"minmax", "static_minmax", "mse"}) {
    all.clear();
    for (int r = 0; r < size; ++r) {
      auto o = qobs::load_observer(name, "weight", args.validated());
      o->observe(slice(r).view());
      all.push_back(o->export_statistics());
    }
    const qobs::Statistics expect = qobs::reduce_statistics(all);
    auto mine = qobs::load_observer(name, "weight", args.validated());
    mine->observe(slice(rank).view());
    qobs::mpi::reduce_statistics(*mine, MPI_COMM_WORLD);
    const qobs::Statistics got = mine->export_statistics();
    if (got.serialize() != expect.serialize()) {
      std::fprintf(stderr, "rank %d: %s statistics differ from the single-process reduction\n", rank, name);
      return 1;
    }
  }
  return 0;
}

TEST(MpiStatistics, ReduceOverRanksIsTheSingleProcessReduction) {
  qobs::testing::TempDir d;
  std::string log;
  const int rc = std::system((mpirun(3) + g_self + " --mpi-stats > " + (d.path / "log").string() + " 2>&1").c_str());
  EXPECT_EQ(rc, 0) << read_file(d.path / "log");
}

}  // namespace

int main(int argc, char** argv) {
  g_self = fs::absolute(argv[0]).string();
  if (argc > 1 && std::string(argv[1]) == "--mpi-stats") return mpi_stats_main();
  // The benchmark's input (docs/PERFORMANCE.md "MPI mode"): DIR LAYERS SHARDS WIDTH.
  if (argc == 6 && std::string(argv[1]) == "--make-checkpoint") {
    make_checkpoint(argv[2], std::stoi(argv[3]), std::stoi(argv[4]), std::stoll(argv[5]));
    return 0;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
