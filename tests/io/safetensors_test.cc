// safetensors reader/writer (R8.8): round trips, alignment, and hostile headers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "qobs/error.h"
#include "qobs/io.h"
#include "test_util.h"

namespace qobs {
namespace {
namespace fs = std::filesystem;

using testing::TempDir;

// A file from a literal header and `data_bytes` bytes of data (0, 1, 2, ...).
std::vector<uint8_t> make_file(const std::string& header, std::size_t data_bytes, uint64_t claimed_len = 0) {
  std::string s(8, '\0');
  const uint64_t n = claimed_len ? claimed_len : header.size();
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>(n >> (8 * i));
  s += header;
  for (std::size_t i = 0; i < data_bytes; ++i) s.push_back(static_cast<char>(i));
  return std::vector<uint8_t>(s.begin(), s.end());
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    SafetensorsFile::from_buffer(bytes, "bad.safetensors");
  } catch (const IoError& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, R8_8_1_WriteReadRoundTrip) {
  TempDir dir;
  const std::string path = (dir.path / "t.safetensors").string();
  const Tensor a = Tensor::from_values(DType::kBF16, {2, 3}, {1, -2, 3.5, 0, 1e-3, -7});
  const Tensor b = Tensor::from_values(DType::kU8, {3}, {1, 2, 255});
  const Tensor c = Tensor::from_values(DType::kF32, {2}, {0.1, 3});
  const Tensor d = Tensor::from_values(DType::kF8E4M3, {2}, {448, -0.001953125});
  const Tensor e = Tensor::from_values(DType::kI64, {2}, {384, 1536});
  const Tensor empty(DType::kF16, {0, 4});
  write_safetensors(path, {{"a", a}, {"b", b}, {"c", c}, {"d", d}, {"e", e}, {"empty", empty}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.tensors().size(), 6u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_TRUE(f.load("a").bit_equal(a));
  EXPECT_TRUE(f.load("b").bit_equal(b));
  EXPECT_TRUE(f.load("c").bit_equal(c));
  EXPECT_TRUE(f.load("d").bit_equal(d));
  EXPECT_TRUE(f.load("e").bit_equal(e));
  EXPECT_EQ(f.load("empty").shape(), Shape({0, 4}));
  // Larger elements first, so every tensor is aligned to its element size in the file.
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_EQ(((f.file_size() - f.data_size()) + t.begin) % dtype_size(t.dtype), 0u) << t.name;
    Tensor scratch;
    const TensorView v = f.view(t, scratch);
    EXPECT_EQ(scratch.nbytes(), 0u) << t.name << " was copied although aligned";
    EXPECT_EQ(v.shape, t.shape);
  }
  EXPECT_EQ((f.file_size() - f.data_size()) % 8, 0u);  // header padded to 8
  EXPECT_THROW(f.load("missing"), IoError);
}

TEST(Safetensors, R8_8_1_WriterOutOfOrderAndChecks) {
  TempDir dir;
  const std::string path = (dir.path / "w.safetensors").string();
  {
    SafetensorsWriter w(path, {{"x", DType::kF32, {2}}, {"y", DType::kI8, {3}}});
    const Tensor y = Tensor::from_values(DType::kI8, {3}, {1, -1, 5});
    w.write("y", y);                         // any order
    EXPECT_THROW(w.write("y", y), IoError);  // twice
    EXPECT_THROW(w.write("z", y), IoError);  // unknown
    EXPECT_THROW(w.write("x", y), IoError);  // wrong dtype/shape
    EXPECT_THROW(w.close(), IoError);        // x missing
  }
  SafetensorsWriter w(path, {{"x", DType::kF32, {2}}});
  w.write("x", Tensor::from_values(DType::kF32, {2}, {1, 2}));
  w.close();
  EXPECT_EQ(SafetensorsFile::open(path).load("x").get(1), 2.0);
}

TEST(Safetensors, FullDiskNamesFileAndTensor) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  try {
    SafetensorsWriter w("/dev/full", {{"model.layers.0.mlp.up_proj.weight_packed", DType::kI32, {4, 4}}});
    w.write("model.layers.0.mlp.up_proj.weight_packed", Tensor(DType::kI32, {4, 4}));
    w.close();
    FAIL() << "writing to /dev/full succeeded";
  } catch (const IoError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("/dev/full"), std::string::npos) << m;
    EXPECT_NE(m.find("No space left"), std::string::npos) << m;
    // /dev/full already refuses the header; a tensor write would name the tensor.
    EXPECT_TRUE(m.find("header") != std::string::npos || m.find("up_proj.weight_packed") != std::string::npos) << m;
  }
}

TEST(Safetensors, HostileHeaders) {
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  EXPECT_EQ(error_of(make_file(ok, 16)), "");
  const auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos && msg.find("bad.safetensors") != std::string::npos;
  };
  EXPECT_TRUE(has(error_of({1, 2, 3}), "truncated"));
  EXPECT_TRUE(has(error_of(make_file(ok, 16, 1u << 20)), "exceeds the file size"));
  EXPECT_TRUE(has(error_of(make_file(ok, 16, ~0ull)), "exceeds the file size"));
  EXPECT_TRUE(has(error_of(make_file(ok, 8)), "beyond the data section"));  // truncated data
  EXPECT_TRUE(has(error_of(make_file("{\"w\": [", 0)), "not valid JSON"));
  EXPECT_TRUE(has(error_of(make_file("[1,2]", 0)), "not a JSON object"));
  EXPECT_TRUE(has(error_of(make_file(R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", 1)),
                  "unsupported dtype 'F4'"));
  EXPECT_TRUE(has(error_of(make_file(R"({"w":{"dtype":"F32","shape":[3,2],"data_offsets":[0,16]}})", 16)),
                  "tensor 'w': shape (3, 2) of F32 needs 24 bytes"));
  EXPECT_TRUE(
      has(error_of(make_file(R"({"w":{"dtype":"F32","shape":[-2,2],"data_offsets":[0,16]}})", 16)), "non-negative"));
  EXPECT_TRUE(
      has(error_of(make_file(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]}})", 16)),
          "overflows"));
  EXPECT_TRUE(has(error_of(make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 16)), "reversed"));
  EXPECT_TRUE(has(error_of(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                     16)),
                  "overlap"));
  EXPECT_TRUE(has(error_of(make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                     R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                     16)),
                  "appears twice"));
  EXPECT_TRUE(has(error_of(make_file(std::string(5000, '[') + std::string(5000, ']'), 0)), "nested"));
  EXPECT_TRUE(has(error_of(make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8)),
                  "unknown header field"));
  EXPECT_TRUE(has(error_of(make_file(R"({"__metadata__":{"format":1}})", 0)), "__metadata__"));
  EXPECT_TRUE(has(error_of(make_file(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8)), "data_offsets"));
}

TEST(Safetensors, OpenErrorsNameTheFile) {
  TempDir dir;
  const fs::path p = dir.path / "trunc.safetensors";
  {
    std::ofstream out(p, std::ios::binary);
    out << "abc";
  }
  try {
    SafetensorsFile::open(p.string());
    FAIL();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos);
  }
  EXPECT_THROW(SafetensorsFile::open((dir.path / "missing.safetensors").string()), IoError);
}

TEST(Safetensors, R8_8_2_ShardedCheckpoint) {
  TempDir dir;
  write_safetensors((dir.path / "model-00001-of-00002.safetensors").string(),
                    {{"a", Tensor::from_values(DType::kF32, {1}, {1})}});
  write_safetensors((dir.path / "model-00002-of-00002.safetensors").string(),
                    {{"b", Tensor::from_values(DType::kF32, {1}, {2})}});
  {
    std::ofstream idx(dir.path / "model.safetensors.index.json");
    idx << R"({"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors",)"
           R"("b":"model-00002-of-00002.safetensors"}})";
  }
  const Checkpoint c = Checkpoint::open(dir.path.string());
  EXPECT_TRUE(c.sharded());
  EXPECT_EQ(c.num_tensors(), 2u);
  EXPECT_EQ(c.find("b")->first, 1u);
  {
    std::ofstream idx(dir.path / "model.safetensors.index.json");
    idx << R"({"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors"}})";
  }
  EXPECT_THROW(Checkpoint::open(dir.path.string()), IoError);
  {
    std::ofstream idx(dir.path / "model.safetensors.index.json");
    idx << R"({"weight_map":{"a":"../etc/passwd"}})";
  }
  EXPECT_THROW(Checkpoint::open(dir.path.string()), IoError);
}

}  // namespace
}  // namespace qobs
