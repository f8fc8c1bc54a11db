// safetensors reader and writer (R8.8.1). See include/qobs/io.h for the contract.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "qobs/io.h"

namespace qobs {

namespace {

std::string errno_text(int e) { return std::strerror(e); }

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// a * b, or nullopt on overflow: a hostile shape must not wrap around to a small size.
std::optional<uint64_t> mul_checked(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return std::nullopt;
  return a * b;
}

}  // namespace

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  std::size_t length = 0;
  ~Mapping() {
    if (addr && length) munmap(addr, length);
  }
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  QOBS_CHECK(fd >= 0, IoError, path, ": cannot open: ", errno_text(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    QOBS_THROW(IoError, path, ": cannot stat: ", errno_text(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    QOBS_THROW(IoError, path, ": not a regular file");
  }
  f.file_size_ = static_cast<uint64_t>(st.st_size);
  f.mapping_ = std::make_shared<Mapping>();
  if (f.file_size_ > 0) {
    void* addr = mmap(nullptr, f.file_size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int e = errno;
    ::close(fd);
    QOBS_CHECK(addr != MAP_FAILED, IoError, path, ": cannot map ", f.file_size_, " bytes: ", errno_text(e));
    f.mapping_->addr = addr;
    f.mapping_->length = f.file_size_;
    f.base_ = static_cast<const uint8_t*>(addr);
  } else {
    ::close(fd);
  }
  f.parse();
  return f;
}

SafetensorsFile SafetensorsFile::from_buffer(std::span<const uint8_t> bytes, std::string name) {
  SafetensorsFile f;
  f.path_ = std::move(name);
  f.base_ = bytes.data();
  f.file_size_ = bytes.size();
  f.parse();
  return f;
}

void SafetensorsFile::parse() {
  const std::string& p = path_;
  QOBS_CHECK(file_size_ >= 8, IoError, p, ": truncated safetensors file (", file_size_,
             " bytes, the 8-byte header length is missing)");
  const uint64_t n = read_le64(base_);
  QOBS_CHECK(n <= file_size_ - 8, IoError, p, ": header length ", n, " exceeds the file size ", file_size_,
             " (truncated or corrupt file)");
  QOBS_CHECK(n <= kMaxSafetensorsHeaderBytes, IoError, p, ": header length ", n, " exceeds the limit of ",
             kMaxSafetensorsHeaderBytes, " bytes");
  QOBS_CHECK(n >= 2, IoError, p, ": header of ", n, " bytes cannot hold a JSON object");
  data_start_ = 8 + n;
  data_size_ = file_size_ - data_start_;

  // A safetensors header is an object of objects holding arrays of numbers: nothing is
  // nested deeper than 3. Rejecting deeper input while parsing keeps a hostile header
  // from exhausting the stack or memory with deep nesting; duplicate keys at the top
  // level are rejected because the JSON library would silently keep only the last.
  std::map<std::string, int> seen;
  std::string dup;
  const auto cb = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& parsed) {
    if (depth > 3) throw IoError(p + ": header JSON nested deeper than a safetensors header can be");
    if (ev == nlohmann::json::parse_event_t::key && depth == 1) {
      const std::string k = parsed.get<std::string>();
      if (++seen[k] > 1) throw IoError(p + ": tensor '" + k + "' appears twice in the header");
    }
    return true;
  };
  nlohmann::json header;
  try {
    const char* h = reinterpret_cast<const char*>(base_ + 8);
    header = nlohmann::json::parse(h, h + n, cb);
  } catch (const nlohmann::json::exception& e) {
    QOBS_THROW(IoError, p, ": header is not valid JSON: ", e.what());
  }
  QOBS_CHECK(header.is_object(), IoError, p, ": header is not a JSON object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& e = it.value();
    if (name == "__metadata__") {
      QOBS_CHECK(e.is_object(), IoError, p, ": __metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        QOBS_CHECK(m.value().is_string(), IoError, p, ": __metadata__ entry '", m.key(), "' is not a string");
        metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = p + ": tensor '" + name + "'";
    QOBS_CHECK(e.is_object(), IoError, where, ": header entry is not an object");
    for (auto k = e.begin(); k != e.end(); ++k)
      QOBS_CHECK(k.key() == "dtype" || k.key() == "shape" || k.key() == "data_offsets", IoError, where,
                 ": unknown header field '", k.key(), "'");
    QOBS_CHECK(e.contains("dtype") && e["dtype"].is_string(), IoError, where, ": missing or non-string dtype");
    const std::string dt_name = e["dtype"].get<std::string>();
    const std::optional<DType> dt = parse_safetensors_dtype(dt_name);
    QOBS_CHECK(dt.has_value(), IoError, where, ": unsupported dtype '", dt_name,
               "' (supported: F64 F32 BF16 F16 F8_E4M3 I64 I32 I16 I8 U8 BOOL)");
    QOBS_CHECK(e.contains("shape") && e["shape"].is_array(), IoError, where, ": missing or non-array shape");
    TensorInfo t;
    t.name = name;
    t.dtype = *dt;
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      QOBS_CHECK(d.is_number_unsigned(), IoError, where, ": shape entries must be non-negative integers");
      const uint64_t dim = d.get<uint64_t>();
      const auto prod = mul_checked(numel, dim);
      QOBS_CHECK(prod && dim <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), IoError, where,
                 ": shape overflows 64 bits");
      numel = *prod;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    QOBS_CHECK(e.contains("data_offsets") && e["data_offsets"].is_array() && e["data_offsets"].size() == 2 &&
                   e["data_offsets"][0].is_number_unsigned() && e["data_offsets"][1].is_number_unsigned(),
               IoError, where, ": data_offsets must be two non-negative integers");
    t.begin = e["data_offsets"][0].get<uint64_t>();
    t.end = e["data_offsets"][1].get<uint64_t>();
    QOBS_CHECK(t.begin <= t.end, IoError, where, ": data_offsets [", t.begin, ", ", t.end, ") are reversed");
    QOBS_CHECK(t.end <= data_size_, IoError, where, ": data_offsets [", t.begin, ", ", t.end,
               ") reach beyond the data section of ", data_size_, " bytes (truncated or corrupt file)");
    const auto nbytes = mul_checked(numel, dtype_size(*dt));
    QOBS_CHECK(nbytes && *nbytes == t.nbytes(), IoError, where, ": shape ", shape_str(t.shape), " of ", dt_name,
               " needs ", nbytes ? std::to_string(*nbytes) : std::string("too many"), " bytes but data_offsets span ",
               t.nbytes());
    tensors_.push_back(std::move(t));
  }
  std::stable_sort(tensors_.begin(), tensors_.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (std::size_t i = 1; i < tensors_.size(); ++i) {
    const TensorInfo& a = tensors_[i - 1];
    const TensorInfo& b = tensors_[i];
    // Zero-size tensors occupy no bytes and cannot overlap anything.
    if (a.nbytes() == 0 || b.nbytes() == 0) continue;
    QOBS_CHECK(b.begin >= a.end, IoError, p, ": tensors '", a.name, "' [", a.begin, ", ", a.end, ") and '", b.name,
               "' [", b.begin, ", ", b.end, ") overlap");
  }
  for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const uint8_t> SafetensorsFile::bytes(const TensorInfo& t) const {
  return {base_ + data_start_ + t.begin, static_cast<std::size_t>(t.nbytes())};
}

TensorView SafetensorsFile::view(const TensorInfo& t, Tensor& scratch) const {
  const std::span<const uint8_t> b = bytes(t);
  if (reinterpret_cast<std::uintptr_t>(b.data()) % dtype_size(t.dtype) == 0) return TensorView(b.data(), t.dtype, t.shape);
  scratch = Tensor::from_bytes(t.dtype, t.shape, b.data(), b.size());
  return scratch.view();
}

Tensor SafetensorsFile::load(std::string_view name) const {
  const TensorInfo* t = find(name);
  QOBS_CHECK(t != nullptr, IoError, path_, ": no tensor named '", name, "'");
  const std::span<const uint8_t> b = bytes(*t);
  return Tensor::from_bytes(t->dtype, t->shape, b.data(), b.size());
}

void SafetensorsFile::release(const TensorInfo& t) const {
  if (!mapping_ || !mapping_->addr || t.nbytes() == 0) return;
  // Only whole pages inside the tensor are dropped, so neighbours keep their pages.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t lo = (data_start_ + t.begin + page - 1) / page * page;
  const uint64_t hi = (data_start_ + t.end) / page * page;
  if (hi > lo) madvise(static_cast<uint8_t*>(mapping_->addr) + lo, hi - lo, MADV_DONTNEED);
}

// ---- writer ------------------------------------------------------------------------

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorSpec> specs,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)) {
  for (auto& s : specs) {
    QOBS_CHECK(s.name != "__metadata__" && !s.name.empty(), IoError, path_, ": invalid tensor name '", s.name, "'");
    Slot slot;
    slot.nbytes = static_cast<uint64_t>(shape_numel(s.shape)) * dtype_size(s.dtype);
    slot.spec = std::move(s);
    slots_.push_back(std::move(slot));
  }
  // Largest element size first keeps every tensor aligned to its element size once the
  // header is padded to a multiple of 8 (the reference writer's rule).
  std::stable_sort(slots_.begin(), slots_.end(),
                   [](const Slot& a, const Slot& b) { return dtype_size(a.spec.dtype) > dtype_size(b.spec.dtype); });
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t off = 0;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    QOBS_CHECK(index_.emplace(s.spec.name, i).second, IoError, path_, ": tensor '", s.spec.name,
               "' listed twice");
    s.begin = off;
    off += s.nbytes;
    header[s.spec.name] = {{"dtype", std::string(safetensors_dtype_name(s.spec.dtype))},
                           {"shape", s.spec.shape},
                           {"data_offsets", {s.begin, off}}};
  }
  data_size_ = off;
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // pad with spaces (valid JSON whitespace)
  data_start_ = 8 + h.size();

  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  QOBS_CHECK(fd_ >= 0, IoError, path_, ": cannot create: ", errno_text(errno));
  // Reserve the whole file so that a full disk fails now, before any tensor is computed.
  // File systems without fallocate support (EOPNOTSUPP) and non-files (EINVAL, ENODEV,
  // ESPIPE) are left to fail on write instead.
  const int fa = posix_fallocate(fd_, 0, static_cast<off_t>(data_start_ + data_size_));
  if (fa == ENOSPC || fa == EFBIG || fa == EDQUOT) {
    ::close(fd_);
    fd_ = -1;
    QOBS_THROW(IoError, path_, ": cannot reserve ", data_start_ + data_size_, " bytes: ", errno_text(fa));
  }
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>((h.size() >> (8 * i)) & 0xFF);
  std::vector<uint8_t> head(len, len + 8);
  head.insert(head.end(), h.begin(), h.end());
  uint64_t done = 0;
  while (done < head.size()) {
    const ssize_t w = pwrite(fd_, head.data() + done, head.size() - done, static_cast<off_t>(done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int e = w < 0 ? errno : EIO;
      ::close(fd_);
      fd_ = -1;
      QOBS_THROW(IoError, path_, ": writing the header: ", errno_text(e));
    }
    done += static_cast<uint64_t>(w);
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void SafetensorsWriter::write(std::string_view name, std::span<const uint8_t> bytes) {
  QOBS_CHECK(fd_ >= 0, IoError, path_, ": write of tensor '", name, "' after close");
  const auto it = index_.find(name);
  QOBS_CHECK(it != index_.end(), IoError, path_, ": tensor '", name, "' is not in the planned header");
  Slot& s = slots_[it->second];
  QOBS_CHECK(!s.written, IoError, path_, ": tensor '", name, "' written twice");
  QOBS_CHECK(bytes.size() == s.nbytes, IoError, path_, ": tensor '", name, "' has ", bytes.size(),
             " bytes, the header planned ", s.nbytes);
  uint64_t done = 0;
  const uint64_t at = data_start_ + s.begin;
  while (done < s.nbytes) {
    const ssize_t w = pwrite(fd_, bytes.data() + done, s.nbytes - done, static_cast<off_t>(at + done));
    if (w < 0 && errno == EINTR) continue;
    QOBS_CHECK(w > 0, IoError, path_, ": writing tensor '", name, "': ", errno_text(w < 0 ? errno : EIO));
    done += static_cast<uint64_t>(w);
  }
  s.written = true;
}

void SafetensorsWriter::write(std::string_view name, const Tensor& t) {
  const auto it = index_.find(name);
  QOBS_CHECK(it != index_.end(), IoError, path_, ": tensor '", name, "' is not in the planned header");
  const TensorSpec& spec = slots_[it->second].spec;
  QOBS_CHECK(t.dtype() == spec.dtype && t.shape() == spec.shape, IoError, path_, ": tensor '", name, "' is ",
             dtype_name(t.dtype()), " ", shape_str(t.shape()), ", the header planned ", dtype_name(spec.dtype), " ",
             shape_str(spec.shape));
  write(name, std::span<const uint8_t>(static_cast<const uint8_t*>(t.data()), t.nbytes()));
}

void SafetensorsWriter::close() {
  QOBS_CHECK(fd_ >= 0, IoError, path_, ": closed twice");
  for (const Slot& s : slots_)
    QOBS_CHECK(s.written, IoError, path_, ": tensor '", s.spec.name, "' was never written");
  const int fd = fd_;
  fd_ = -1;
  // fsync reports write-back failures (ENOSPC, EIO) that pwrite could not see yet.
  if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS) {
    const int e = errno;
    ::close(fd);
    QOBS_THROW(IoError, path_, ": flushing to disk: ", errno_text(e));
  }
  QOBS_CHECK(::close(fd) == 0, IoError, path_, ": closing: ", errno_text(errno));
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.dtype(), t.shape()});
  SafetensorsWriter w(path, std::move(specs), metadata);
  for (const auto& [name, t] : tensors) w.write(name, t);
  w.close();
}

}  // namespace qobs
