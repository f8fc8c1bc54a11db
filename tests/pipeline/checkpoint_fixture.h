// Small Llama-like checkpoints for the pipeline tests, folders read back byte for byte,
// and ranks as threads of this process.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "qobs/collective.h"
#include "qobs/io.h"
#include "qobs/pipeline.h"
#include "qobs/tensor.h"

namespace qobs::testing {

namespace fs = std::filesystem;

inline Tensor random_weight(DType dt, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::student_t_distribution<double> t(4.0);
  std::vector<double> v(static_cast<std::size_t>(rows * cols));
  for (auto& x : v) x = 0.02 * t(gen);
  v[static_cast<std::size_t>(seed % v.size())] = 0.9;  // an outlier
  // Q17 material: exact negative zeros and tiny negatives that round to magnitude 0.
  for (std::size_t i = 5; i < v.size(); i += 97) v[i] = -0.0;
  for (std::size_t i = 11; i < v.size(); i += 89) v[i] = -1e-6;
  return Tensor::from_values(dt, {rows, cols}, v);
}

// A Llama-like checkpoint: embeddings, norms, q/k/v/o, gate/up/down, a bias, lm_head.
inline std::map<std::string, Tensor> make_model(DType dt, int64_t hidden = 128, int layers = 2) {
  std::map<std::string, Tensor> m;
  uint32_t seed = 1;
  m["model.embed_tokens.weight"] = random_weight(dt, 64, hidden, seed++);
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    m[p + "self_attn.q_proj.weight"] = random_weight(dt, hidden, hidden, seed++);
    m[p + "self_attn.q_proj.bias"] = random_weight(dt, 1, hidden, seed++).reshaped({hidden});
    m[p + "self_attn.k_proj.weight"] = random_weight(dt, hidden / 2, hidden, seed++);
    m[p + "self_attn.v_proj.weight"] = random_weight(dt, hidden / 2, hidden, seed++);
    m[p + "self_attn.o_proj.weight"] = random_weight(dt, hidden, hidden, seed++);
    m[p + "mlp.gate_proj.weight"] = random_weight(dt, 2 * hidden, hidden, seed++);
    m[p + "mlp.up_proj.weight"] = random_weight(dt, 2 * hidden, hidden, seed++);
    m[p + "mlp.down_proj.weight"] = random_weight(dt, hidden, 2 * hidden, seed++);
    m[p + "input_layernorm.weight"] = random_weight(dt, 1, hidden, seed++).reshaped({hidden});
  }
  m["model.norm.weight"] = random_weight(dt, 1, hidden, seed++).reshaped({hidden});
  m["lm_head.weight"] = random_weight(dt, 96, hidden, seed++);
  return m;
}

inline void write_model(const fs::path& dir, const std::map<std::string, Tensor>& m, int shards = 1) {
  fs::create_directories(dir);
  std::vector<std::vector<std::pair<std::string, Tensor>>> parts(static_cast<std::size_t>(shards));
  nlohmann::json wm;
  std::size_t i = 0;
  for (const auto& [name, t] : m) {
    const std::size_t s = (i++ * static_cast<std::size_t>(shards)) / m.size();
    parts[s].emplace_back(name, t);
    char fname[64];
    std::snprintf(fname, sizeof fname, "model-%05zu-of-%05d.safetensors", s + 1, shards);
    wm[name] = shards == 1 ? "model.safetensors" : fname;
  }
  for (int s = 0; s < shards; ++s) {
    char fname[64];
    std::snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, shards);
    write_safetensors((dir / (shards == 1 ? "model.safetensors" : fname)).string(), parts[static_cast<std::size_t>(s)]);
  }
  if (shards > 1) std::ofstream(dir / "model.safetensors.index.json") << nlohmann::json{{"weight_map", wm}}.dump();
  std::ofstream(dir / "config.json")
      << R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 128})";
  std::ofstream(dir / "tokenizer.json") << R"({"dummy": true})";
  fs::create_directories(dir / "extra");
  std::ofstream(dir / "extra" / "notes.txt") << "copied";
}

// Every file of a folder by relative path, with its bytes.
inline std::map<std::string, std::string> folder_bytes(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream f(e.path(), std::ios::binary);
    files[fs::relative(e.path(), dir).generic_string()] =
        std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  return files;
}

// Ranks as threads of this process: the Collective that the MPI build implements over
// a communicator (src/mpi), here over a shared mailbox, so that the plain build runs the
// several-rank steps of quantize_checkpoint too.
class ThreadRanks {
 public:
  explicit ThreadRanks(int n) : n_(n), slots_(static_cast<std::size_t>(n)) {
    for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<Rank>(*this, r));
  }
  Collective& operator[](int r) { return *ranks_[static_cast<std::size_t>(r)]; }

 private:
  class Rank final : public Collective {
   public:
    Rank(ThreadRanks& all, int r) : all_(all), r_(r) {}
    int rank() const override { return r_; }
    int size() const override { return all_.n_; }
    std::vector<std::string> allgather(const std::string& bytes) override { return all_.allgather(r_, bytes); }
    void post_progress(int64_t modules) override {
      const std::lock_guard<std::mutex> l(all_.mu_);
      all_.posts_.emplace_back(r_, modules);
      all_.cv_.notify_all();
    }
    std::vector<std::pair<int, int64_t>> receive_progress(bool wait) override {
      std::unique_lock<std::mutex> l(all_.mu_);
      if (wait) all_.cv_.wait(l, [&] { return !all_.posts_.empty(); });
      return std::exchange(all_.posts_, {});
    }

   private:
    ThreadRanks& all_;
    int r_;
  };

  // A barrier that hands every rank all the ranks' bytes; the result stays until the
  // last rank has returned, since the next allgather needs every rank again.
  std::vector<std::string> allgather(int r, const std::string& bytes) {
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t generation = generation_;
    slots_[static_cast<std::size_t>(r)] = bytes;
    if (++arrived_ == n_) {
      result_ = slots_;
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(l, [&] { return generation_ != generation; });
    }
    return result_;
  }

  const int n_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> slots_, result_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<std::pair<int, int64_t>> posts_;
};

/// quantize_checkpoint of `o` on `n` thread ranks: each rank's report, or its error.
/// `per_rank`, when given, adjusts each rank's options.
inline std::vector<std::pair<std::optional<QuantizeReport>, std::string>> run_ranks(
    const QuantizeOptions& o, int n, const std::function<void(int rank, QuantizeOptions&)>& per_rank = {}) {
  ThreadRanks ranks(n);
  std::vector<std::pair<std::optional<QuantizeReport>, std::string>> out(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      QuantizeOptions mine = o;
      mine.collective = &ranks[r];
      if (per_rank) per_rank(r, mine);
      try {
        out[static_cast<std::size_t>(r)].first = quantize_checkpoint(mine);
      } catch (const std::exception& e) {
        out[static_cast<std::size_t>(r)].second = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace qobs::testing
