// safetensors reading and writing (R8.8) and Hugging Face checkpoint folders.
//
// The reader maps a file read-only and validates every header field before any tensor
// is touched: header length against the file size, the JSON itself, dtype names,
// shape x dtype size against the offsets span, offsets inside the data section, and no
// two tensors overlapping, no key given twice, nothing nested deeper than a header can
// be (the parse is linear in the header size). Only regular files are opened: a FIFO
// or device is refused without blocking. A lying header therefore can neither make the reader
// allocate more than the file holds nor read outside the mapping. Every failure is an
// IoError whose message names the file and, where there is one, the tensor.
//
// The writer lays out the whole file from the tensor list before any data is known
// (names, dtypes and shapes fix every offset), writes the header first and then each
// tensor's bytes at its offset as they become available, in any order. So a converter
// can stream tensor by tensor and hold one result at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qobs/dtype.h"
#include "qobs/tensor.h"

namespace qobs {

/// One entry of a safetensors header. Offsets are relative to the data section.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t nbytes() const { return end - begin; }
};

/// Largest header accepted, as the reference implementation (100 MB): a bigger length
/// field is treated as corrupt rather than trusted with an allocation.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

/// Deepest nesting of objects and arrays accepted in config.json and
/// model.safetensors.index.json (real configs nest fewer than 10 levels). Deeper files
/// are refused when the checkpoint is opened, before they could exhaust the stack of a
/// later step that walks them recursively (writing config.json, `qobs inspect`).
inline constexpr int kMaxJsonDepth = 512;

/// A validated, read-only safetensors file (memory-mapped, or a borrowed buffer).
/// Copies share the mapping. Thread-safe for concurrent reads.
///
/// A mapped file truncated by another process while it is read does not crash the
/// process (SIGBUS): the vanished pages read as zeros, and load(), release() and
/// verify_unchanged() then throw IoError naming the file. A caller reading through
/// bytes() or an in-place view() must call release() or verify_unchanged() after the
/// read and before trusting what it computed from the bytes.
class SafetensorsFile {
 public:
  /// Maps and validates `path`. IoError on any problem.
  static SafetensorsFile open(const std::string& path);
  /// Validates `bytes` as a safetensors file without copying; the buffer must outlive
  /// the object. `name` is used in error messages. (Entry point of the fuzz target.)
  static SafetensorsFile from_buffer(std::span<const uint8_t> bytes, std::string name);

  const std::string& path() const { return path_; }
  /// Tensors in data-offset order.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  /// nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  /// The "__metadata__" string map (empty when absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  /// Bytes of the data section (everything after the header).
  uint64_t data_size() const { return data_size_; }
  uint64_t file_size() const { return file_size_; }

  /// The raw little-endian bytes of a tensor (a view into the mapping).
  std::span<const uint8_t> bytes(const TensorInfo& t) const;
  /// A view of the tensor in place when its bytes are aligned for the dtype, otherwise
  /// `scratch` receives an aligned copy and the view points into it.
  TensorView view(const TensorInfo& t, Tensor& scratch) const;
  /// An owned copy of the tensor. IoError when the name is absent.
  Tensor load(std::string_view name) const;
  /// Tells the kernel that the pages of `t` are not needed any more, so that a streaming
  /// pass over a large file keeps its resident set near one tensor (mapped files only;
  /// later reads fault the pages back in). First calls verify_unchanged(), so a caller
  /// that releases every tensor once done with it notices a truncation.
  void release(const TensorInfo& t) const;
  /// IoError "<file>: the file changed size while being read (was N bytes, now M)"
  /// when the mapped file's size changed since open() or a read found pages gone
  /// (and saw zeros instead). No-op for buffers (from_buffer).
  void verify_unchanged() const;

 private:
  struct Mapping;
  void parse();

  std::string path_;
  std::shared_ptr<Mapping> mapping_;
  const uint8_t* base_ = nullptr;
  uint64_t file_size_ = 0;
  uint64_t data_start_ = 0;
  uint64_t data_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

/// A tensor to be written: the layout needs only name, dtype and shape.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
};

/// Streaming safetensors writer. The constructor fixes the layout (tensors ordered by
/// element size, largest first, then as given, so every tensor starts aligned to its
/// element size as the reference writer arranges it), reserves the file's full size
/// (so a full disk fails before any work is done where the file system supports it) and
/// writes the header. write() may then be called once per tensor, in any order.
/// close() checks that every tensor was written and flushes to disk. A writer destroyed
/// without close() leaves an incomplete file behind; callers write into a temporary
/// folder (see quantize_checkpoint).
class SafetensorsWriter {
 public:
  /// kCreate makes the file with its header; kJoin opens the file another process
  /// created from the same specs (its header must be the planned one) so that several
  /// processes write disjoint tensors of one file, each at its planned offset.
  enum class Mode { kCreate, kJoin };
  SafetensorsWriter(std::string path, std::vector<TensorSpec> specs,
                    std::map<std::string, std::string> metadata = {{"format", "pt"}}, Mode mode = Mode::kCreate);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  /// Writes the bytes of tensor `name`: exactly numel x dtype size bytes (IoError
  /// otherwise, or if the name is unknown or already written).
  void write(std::string_view name, std::span<const uint8_t> bytes);
  /// Writes an owned tensor; its dtype and shape must match the spec.
  void write(std::string_view name, const Tensor& t);
  /// Tensor `name` is written by another process: close() does not expect it here.
  void skip(std::string_view name);
  /// Flushes and closes. IoError naming the file if data is missing or the disk fails.
  void close();
  /// Bytes of tensor data in the file (the sum of all tensors).
  uint64_t data_size() const { return data_size_; }
  const std::string& path() const { return path_; }

 private:
  struct Slot {
    TensorSpec spec;
    uint64_t begin = 0;
    uint64_t nbytes = 0;
    bool written = false;
  };
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  uint64_t data_size_ = 0;
  std::vector<Slot> slots_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

/// Writes a whole file at once (tests, small outputs).
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

/// A Hugging Face checkpoint folder: model.safetensors, or shards listed by
/// model.safetensors.index.json (R8.8.2). A path to a single .safetensors file is a
/// checkpoint of one shard.
class Checkpoint {
 public:
  /// Opens and validates every shard; IoError when the folder has no safetensors
  /// weights, the index names a missing file or tensor, or a tensor name repeats.
  static Checkpoint open(const std::string& path);

  const std::string& dir() const { return dir_; }
  /// Shard file names relative to dir(), in index order (or sorted).
  const std::vector<std::string>& shard_names() const { return shard_names_; }
  const std::vector<SafetensorsFile>& shards() const { return shards_; }
  /// True when the folder had a model.safetensors.index.json.
  bool sharded() const { return sharded_; }
  /// Contents of config.json, or "" when absent.
  const std::string& config_json() const { return config_json_; }
  /// (shard index, tensor) of a name, or nullopt.
  std::optional<std::pair<std::size_t, const TensorInfo*>> find(std::string_view name) const;
  /// Total number of tensors and of their bytes.
  std::size_t num_tensors() const;
  uint64_t total_bytes() const;

 private:
  std::string dir_;
  bool sharded_ = false;
  std::vector<std::string> shard_names_;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, std::pair<std::size_t, std::size_t>, std::less<>> where_;
  std::string config_json_;
};

}  // namespace qobs
