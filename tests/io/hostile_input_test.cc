// Hostile input files: headers that are slow to parse, FIFOs, hidden overlaps, repeated
// keys, deep nesting and files truncated while mapped. Each must end in a clear IoError
// (or succeed quickly), never in a hang, a crash or a silently wrong reading.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "qobs/error.h"
#include "qobs/io.h"
#include "qobs/pipeline.h"
#include "test_util.h"

namespace qobs {
namespace {
namespace fs = std::filesystem;

using testing::expect_error;
using testing::TempDir;

// A file from a literal header and `data_bytes` bytes of data.
std::vector<uint8_t> make_file(const std::string& header, std::size_t data_bytes) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>(uint64_t{header.size()} >> (8 * i));
  s += header;
  s.resize(s.size() + data_bytes);
  return std::vector<uint8_t>(s.begin(), s.end());
}

void parse(const std::string& header, std::size_t data_bytes) {
  const std::vector<uint8_t> f = make_file(header, data_bytes);
  SafetensorsFile::from_buffer(f, "bad.safetensors");
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

// A folder holding a valid model.safetensors with one small weight.
void write_model(const fs::path& dir) {
  fs::create_directories(dir);
  write_safetensors((dir / "model.safetensors").string(),
                    {{"model.layers.0.mlp.up_proj.weight", Tensor::from_values(DType::kF32, {2, 2}, {1, 2, 3, 4})}});
}

// Runs `open` (expected to throw IoError naming `fifo` as a FIFO) with a deadline. If
// it blocks on the FIFO, a writer end is opened to release it and the test fails,
// instead of the test hanging.
void expect_fifo_refused(const fs::path& fifo, const std::function<void()>& open) {
  auto done = std::async(std::launch::async, [&] {
    expect_error<IoError>(open, {fifo.string(), "not a regular file (a FIFO)"});
  });
  if (done.wait_for(std::chrono::seconds(20)) == std::future_status::ready) return done.get();
  ADD_FAILURE() << "opening " << fifo << " blocked";
  const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
  if (fd >= 0) ::close(fd);  // the reader now sees end of file and returns
  done.wait();
}

// Before the fix the JSON library's callback parser rescanned the header after every
// entry: 20k tensors took ~2 s of CPU, 100k ~11 min, so 200k would take most of an
// hour and exceed ctest's default timeout (1500 s). Linear parsing takes under a second.
TEST(HostileInput, HeaderWith200kTensorsParsesInLinearTime) {
  constexpr int n = 200'000;
  std::string h = "{";
  for (int i = 0; i < n; ++i) {
    if (i) h += ',';
    h += "\"t" + std::to_string(i) + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[" + std::to_string(i) + "," +
         std::to_string(i + 1) + "]}";
  }
  h += '}';
  const std::vector<uint8_t> bytes = make_file(h, n);
  const SafetensorsFile f = SafetensorsFile::from_buffer(bytes, "many.safetensors");
  ASSERT_EQ(f.tensors().size(), static_cast<std::size_t>(n));
  EXPECT_EQ(f.find("t123456")->begin, 123456u);
}

TEST(HostileInput, FifoShardIsRefusedWithoutBlocking) {
  TempDir dir;
  const fs::path fifo = dir.path / "model-00001-of-00001.safetensors";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_fifo_refused(fifo, [&] { SafetensorsFile::open(fifo.string()); });
  // Named by the index of a sharded checkpoint.
  write_text(dir.path / "model.safetensors.index.json", R"({"weight_map":{"w":"model-00001-of-00001.safetensors"}})");
  expect_fifo_refused(fifo, [&] { Checkpoint::open(dir.path.string()); });
}

TEST(HostileInput, FifoConfigJsonIsRefusedWithoutBlocking) {
  TempDir dir;
  write_model(dir.path);
  const fs::path fifo = dir.path / "config.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_fifo_refused(fifo, [&] { Checkpoint::open(dir.path.string()); });
}

TEST(HostileInput, FifoIndexJsonIsRefusedWithoutBlocking) {
  TempDir dir;
  write_model(dir.path);
  const fs::path fifo = dir.path / "model.safetensors.index.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_fifo_refused(fifo, [&] { Checkpoint::open(dir.path.string()); });
}

TEST(HostileInput, ZeroSizeTensorCannotHideAnOverlap) {
  // a [0, 8) and b [4, 12) overlap; z [4, 4) sorts between them.
  expect_error<IoError>(
      [] {
        parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
              16);
      },
      {"bad.safetensors", "tensors 'a' [0, 8) and 'b' [4, 12) overlap"});
  // Several empty tensors in between, at the same offset as the second range.
  expect_error<IoError>(
      [] {
        parse(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
              R"("y":{"dtype":"U8","shape":[0],"data_offsets":[7,7]},)"
              R"("z":{"dtype":"U8","shape":[0,3],"data_offsets":[7,7]},)"
              R"("b":{"dtype":"U8","shape":[2],"data_offsets":[7,9]}})",
              16);
      },
      {"'a' [0, 8) and 'b' [7, 9) overlap"});
  // Empty tensors must still lie inside the data section.
  expect_error<IoError>([] { parse(R"({"z":{"dtype":"F32","shape":[0],"data_offsets":[20,20]}})", 16); },
                        {"tensor 'z'", "beyond the data section"});
  // Adjacent ranges with an empty tensor at the boundary are fine.
  parse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("z":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
        16);
}

TEST(HostileInput, RepeatedKeysAreRefused) {
  expect_error<IoError>([] { parse(R"({"w":{"dtype":"F32","shape":[2],"dtype":"I64","data_offsets":[0,8]}})", 8); },
                        {"bad.safetensors", "tensor 'w': field 'dtype' appears twice"});
  expect_error<IoError>([] { parse(R"({"w":{"dtype":"U8","shape":[8],"shape":[2],"data_offsets":[0,8]}})", 8); },
                        {"tensor 'w': field 'shape' appears twice"});
  expect_error<IoError>(
      [] { parse(R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[0,8],"data_offsets":[0,8]}})", 8); },
      {"tensor 'w': field 'data_offsets' appears twice"});
  expect_error<IoError>(
      [] {
        parse(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
              R"("w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
              8);
      },
      {"tensor 'w' appears twice in the header"});
  expect_error<IoError>([] { parse(R"({"__metadata__":{"format":"pt","format":"np"}})", 0); },
                        {"__metadata__ key 'format' appears twice"});
}

// 100000 levels of nesting, inside an object so that the file looks like a config.
std::string deep_json(int levels) {
  return "{\"model_type\": \"llama\", \"x\": " + std::string(static_cast<std::size_t>(levels), '[') +
         std::string(static_cast<std::size_t>(levels), ']') + "}";
}

TEST(HostileInput, DeeplyNestedConfigJsonIsRefusedAtOpen) {
  TempDir dir;
  write_model(dir.path);
  write_text(dir.path / "config.json", deep_json(100'000));
  const std::string cfg = (dir.path / "config.json").string();
  expect_error<IoError>([&] { Checkpoint::open(dir.path.string()); }, {cfg, "nested deeper than 512 levels"});
  // quantize fails at open, so nothing is quantized and no output appears.
  TempDir elsewhere;  // OUT may not lie inside MODEL
  QuantizeOptions o;
  o.model_path = dir.path.string();
  o.output_dir = (elsewhere.path / "out").string();
  o.scheme = "W4A16";
  o.targets = {"up_proj"};
  expect_error<IoError>([&] { quantize_checkpoint(o); }, {cfg, "512"});
  EXPECT_FALSE(fs::exists(elsewhere.path / "out"));
  expect_error<IoError>([&] { inspect_checkpoint(dir.path.string()); }, {cfg, "512"});
  // The limit itself is accepted: the top-level object and 511 arrays.
  write_text(dir.path / "config.json", deep_json(kMaxJsonDepth - 1));
  EXPECT_NO_THROW(Checkpoint::open(dir.path.string()));
  write_text(dir.path / "config.json", deep_json(kMaxJsonDepth));
  EXPECT_THROW(Checkpoint::open(dir.path.string()), IoError);
  // Not JSON at all: refused at open too, not after quantizing.
  write_text(dir.path / "config.json", "{\"model_type\": ");
  expect_error<IoError>([&] { Checkpoint::open(dir.path.string()); }, {cfg, "not valid JSON"});
}

TEST(HostileInput, DeeplyNestedIndexJsonAndHeaderAreRefused) {
  TempDir dir;
  write_model(dir.path);
  write_text(dir.path / "model.safetensors.index.json",
             "{\"weight_map\": {}, \"metadata\": " + deep_json(100'000) + "}");
  expect_error<IoError>([&] { Checkpoint::open(dir.path.string()); },
                        {(dir.path / "model.safetensors.index.json").string(), "nested deeper than 512 levels"});
  expect_error<IoError>([] { parse(R"({"__metadata__":{"format":{"a":[1]}}})", 0); },
                        {"bad.safetensors", "nested deeper than 3 levels"});
  expect_error<IoError>([] { parse("{\"w\":" + deep_json(100'000) + "}", 0); }, {"nested deeper than 3 levels"});
}

// A weight spanning several pages, written and mapped, then cut short by "another
// process" (here the test itself).
struct TruncatedFile {
  TempDir dir;
  fs::path path = dir.path / "model.safetensors";
  Tensor w = Tensor::from_values(DType::kF32, {256, 64}, std::vector<double>(256 * 64, 1.5));
  TruncatedFile() { write_safetensors(path.string(), {{"model.layers.0.mlp.up_proj.weight", w}}); }
  void truncate_to(uint64_t size) const { ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(size)), 0); }
};

TEST(HostileInput, FileTruncatedWhileMappedIsAnIoError) {
  TruncatedFile t;
  const SafetensorsFile f = SafetensorsFile::open(t.path.string());
  const uint64_t size = f.file_size();
  const TensorInfo& info = f.tensors()[0];
  t.truncate_to(f.file_size() - f.data_size() + 16);
  const std::string changed = "the file changed size while being read (was " + std::to_string(size) + " bytes, now ";
  // load() copies the bytes (the vanished pages read as zeros) and then reports.
  expect_error<IoError>([&] { f.load(info.name); }, {t.path.string(), changed});
  // An in-place view read by the caller: no crash; release() and verify_unchanged() report.
  Tensor scratch;
  const TensorView v = f.view(info, scratch);
  double sum = 0;
  for (int64_t i = 0; i < v.numel(); ++i) sum += v.get(i);
  EXPECT_LT(sum, 1.5 * static_cast<double>(v.numel()));  // the tail read as zeros
  expect_error<IoError>([&] { f.verify_unchanged(); }, {t.path.string(), changed});
  expect_error<IoError>([&] { f.release(info); }, {t.path.string(), changed});
}

TEST(HostileInput, QuantizeOfAFileTruncatedMidRunFailsWithoutOutput) {
  TempDir dir;
  fs::create_directories(dir.path / "in");
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (int i = 0; i < 4; ++i) {
    std::vector<double> vals(256 * 256);
    for (std::size_t k = 0; k < vals.size(); ++k)
      vals[k] = static_cast<double>((k * 7 + static_cast<std::size_t>(i)) % 13) - 6;
    tensors.emplace_back("model.layers." + std::to_string(i) + ".mlp.up_proj.weight",
                         Tensor::from_values(DType::kF32, {256, 256}, vals));
  }
  const fs::path model = dir.path / "in" / "model.safetensors";
  write_safetensors(model.string(), tensors);
  QuantizeOptions o;
  o.model_path = (dir.path / "in").string();
  o.output_dir = (dir.path / "out").string();
  o.scheme = "W4A16";
  o.threads = 1;
  o.baseline = false;
  // After the first layer, the input loses everything past its header: the next layer's
  // pages vanish under the reader.
  const SafetensorsFile probe = SafetensorsFile::open(model.string());
  const uint64_t header_end = probe.file_size() - probe.data_size();
  const auto cut = [&](const Progress& p) {
    if (p.done == 1) ASSERT_EQ(::truncate(model.c_str(), static_cast<off_t>(header_end)), 0);
  };
  expect_error<IoError>([&] { quantize_checkpoint(o, cut); },
                        {model.string(), "the file changed size while being read"});
  EXPECT_FALSE(fs::exists(dir.path / "out"));
}

}  // namespace
}  // namespace qobs
