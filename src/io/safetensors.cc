// safetensors reader and writer (R8.8.1). See include/qobs/io.h for the contract.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <mutex>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "io/input.h"
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

// ---- truncation while mapped ---------------------------------------------------------
//
// A mapped file that another process truncates raises SIGBUS on the next read of a page
// past the new end, which would kill the process mid-run. A process-wide handler turns
// such a fault inside one of our mappings into a zero-filled page and a flag on that
// mapping; the reader reports the change as an IoError at its next check
// (verify_unchanged, load, release), before anything derived from the zeros is kept.
// Faults anywhere else go to the handler that was installed before ours.

struct MappingSlot {
  // 0 free, 1 being (un)registered, 2 live: the handler trusts begin/end only when live.
  std::atomic<int> state{0};
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> faulted{false};
};
static_assert(std::atomic<uintptr_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free &&
              std::atomic<bool>::is_always_lock_free);

// Fixed storage: the handler may read it at any moment, so it can never move or grow.
constexpr std::size_t kMaxMappings = 4096;
MappingSlot g_slots[kMaxMappings];
uintptr_t g_page_size = 4096;
struct sigaction g_previous_bus {};

void on_sigbus(int sig, siginfo_t* info, void* ctx) {
  const int saved_errno = errno;
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (MappingSlot& s : g_slots) {
    if (s.state.load(std::memory_order_acquire) != 2) continue;
    if (addr < s.begin.load(std::memory_order_relaxed) || addr >= s.end.load(std::memory_order_relaxed)) continue;
    void* page = reinterpret_cast<void*>(addr & ~(g_page_size - 1));
    // mmap is a plain system call on Linux, safe here although POSIX does not list it.
    if (mmap(page, g_page_size, PROT_READ, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED) break;
    s.faulted.store(true, std::memory_order_release);
    errno = saved_errno;
    return;  // the read is retried and sees zeros
  }
  errno = saved_errno;
  if (g_previous_bus.sa_flags & SA_SIGINFO) {
    if (g_previous_bus.sa_sigaction) g_previous_bus.sa_sigaction(sig, info, ctx);
    return;
  }
  if (g_previous_bus.sa_handler != SIG_DFL && g_previous_bus.sa_handler != SIG_IGN) {
    g_previous_bus.sa_handler(sig);
    return;
  }
  // Default action: restore it; a fault re-executes the access and dies as it would
  // have without us, a signal sent by kill() is raised again.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  if (info->si_code <= 0) raise(sig);
}

void install_sigbus_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    g_page_size = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_previous_bus);
  });
}

// The slot index of a new live mapping [addr, addr + length).
int register_mapping(const std::string& path, const void* addr, std::size_t length) {
  install_sigbus_handler();
  for (std::size_t i = 0; i < kMaxMappings; ++i) {
    int expected = 0;
    if (!g_slots[i].state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) continue;
    g_slots[i].begin.store(reinterpret_cast<uintptr_t>(addr), std::memory_order_relaxed);
    g_slots[i].end.store(reinterpret_cast<uintptr_t>(addr) + length, std::memory_order_relaxed);
    g_slots[i].faulted.store(false, std::memory_order_relaxed);
    g_slots[i].state.store(2, std::memory_order_release);
    return static_cast<int>(i);
  }
  QOBS_THROW(IoError, path, ": more than ", kMaxMappings, " safetensors files are open at once");
}

void unregister_mapping(int slot) {
  g_slots[slot].state.store(1, std::memory_order_release);
  g_slots[slot].begin.store(0, std::memory_order_relaxed);
  g_slots[slot].end.store(0, std::memory_order_relaxed);
  g_slots[slot].state.store(0, std::memory_order_release);
}

}  // namespace

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  std::size_t length = 0;
  int fd = -1;    // kept open to notice a size change (verify_unchanged)
  int slot = -1;  // in g_slots
  ~Mapping() {
    if (slot >= 0) unregister_mapping(slot);
    if (addr && length) munmap(addr, length);
    if (fd >= 0) ::close(fd);
  }
};

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.mapping_ = std::make_shared<Mapping>();
  f.mapping_->fd = detail::open_regular_file(path, &f.file_size_);
  if (f.file_size_ > 0) {
    void* addr = mmap(nullptr, f.file_size_, PROT_READ, MAP_PRIVATE, f.mapping_->fd, 0);
    QOBS_CHECK(addr != MAP_FAILED, IoError, path, ": cannot map ", f.file_size_, " bytes: ", errno_text(errno));
    f.mapping_->addr = addr;
    f.mapping_->length = f.file_size_;
    f.mapping_->slot = register_mapping(path, addr, f.file_size_);
    f.base_ = static_cast<const uint8_t*>(addr);
  }
  f.parse();
  f.verify_unchanged();  // the header itself may have been read as zeros
  return f;
}

void SafetensorsFile::verify_unchanged() const {
  if (!mapping_ || mapping_->fd < 0) return;
  struct stat st {};
  const bool stat_ok = fstat(mapping_->fd, &st) == 0;
  const bool faulted = mapping_->slot >= 0 && g_slots[mapping_->slot].faulted.load(std::memory_order_acquire);
  if (stat_ok && !faulted && static_cast<uint64_t>(st.st_size) == file_size_) return;
  QOBS_THROW(IoError, path_, ": the file changed size while being read (was ", file_size_, " bytes, now ",
             stat_ok ? std::to_string(st.st_size) : std::string("unknown"), ")",
             faulted ? "; data past its new end was read as zeros" : "",
             ", so the tensors read from it cannot be trusted");
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
  // nested deeper than 3, and deeper input is refused while parsing (no stack or memory
  // spent on it). A repeated key would silently keep only the last value, so it is
  // refused at every level: a tensor listed twice, or a field given twice in one entry.
  const detail::DuplicateKeyMessage duplicate = [](const std::vector<std::string>& path, const std::string& key) {
    if (path.empty()) return "tensor '" + key + "' appears twice in the header";
    if (path[0] == "__metadata__") return "__metadata__ key '" + key + "' appears twice in the header";
    return "tensor '" + path[0] + "': field '" + key + "' appears twice in its header entry";
  };
  const std::string_view text(reinterpret_cast<const char*>(base_ + 8), n);
  const nlohmann::json header = detail::parse_json_limited(text, p + ": header", 3, duplicate);
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
  // Zero-size tensors occupy no bytes (their offsets were checked against the data
  // section above) and take no part; each non-empty range is compared with the previous
  // non-empty one, so an empty tensor sorted between two overlapping ones cannot hide it.
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : tensors_) {
    if (t.nbytes() == 0) continue;
    if (prev)
      QOBS_CHECK(t.begin >= prev->end, IoError, p, ": tensors '", prev->name, "' [", prev->begin, ", ", prev->end,
                 ") and '", t.name, "' [", t.begin, ", ", t.end, ") overlap");
    prev = &t;
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
  if (reinterpret_cast<std::uintptr_t>(b.data()) % dtype_size(t.dtype) == 0)
    return TensorView(b.data(), t.dtype, t.shape);
  scratch = Tensor::from_bytes(t.dtype, t.shape, b.data(), b.size());
  verify_unchanged();
  return scratch.view();
}

Tensor SafetensorsFile::load(std::string_view name) const {
  const TensorInfo* t = find(name);
  QOBS_CHECK(t != nullptr, IoError, path_, ": no tensor named '", name, "'");
  const std::span<const uint8_t> b = bytes(*t);
  Tensor copy = Tensor::from_bytes(t->dtype, t->shape, b.data(), b.size());
  verify_unchanged();
  return copy;
}

void SafetensorsFile::release(const TensorInfo& t) const {
  verify_unchanged();  // the caller is done with t: whatever it read must have been the file's
  if (!mapping_ || !mapping_->addr || t.nbytes() == 0) return;
  // Only whole pages inside the tensor are dropped, so neighbours keep their pages.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t lo = (data_start_ + t.begin + page - 1) / page * page;
  const uint64_t hi = (data_start_ + t.end) / page * page;
  if (hi > lo) madvise(static_cast<uint8_t*>(mapping_->addr) + lo, hi - lo, MADV_DONTNEED);
}

// ---- writer ------------------------------------------------------------------------

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorSpec> specs,
                                     std::map<std::string, std::string> metadata, Mode mode)
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
    QOBS_CHECK(index_.emplace(s.spec.name, i).second, IoError, path_, ": tensor '", s.spec.name, "' listed twice");
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

  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>((h.size() >> (8 * i)) & 0xFF);
  std::vector<uint8_t> head(len, len + 8);
  head.insert(head.end(), h.begin(), h.end());
  if (mode == Mode::kJoin) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    QOBS_CHECK(fd_ >= 0, IoError, path_, ": cannot open the file another process created: ", errno_text(errno));
    // A different header means the processes planned different files (or do not see
    // the same file): writing at the planned offsets would corrupt it.
    std::vector<uint8_t> seen(head.size());
    const ssize_t r = pread(fd_, seen.data(), seen.size(), 0);
    struct stat st {};
    const bool same = r == static_cast<ssize_t>(seen.size()) && seen == head && fstat(fd_, &st) == 0 &&
                      static_cast<uint64_t>(st.st_size) == data_start_ + data_size_;
    if (!same) {
      ::close(fd_);
      fd_ = -1;
      QOBS_THROW(IoError, path_, ": the file another process created does not have the planned header and size (",
                 data_start_ + data_size_, " bytes)");
    }
    return;
  }
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
    const int e = w < 0 ? errno : EIO;
    // EFAULT: the source bytes vanished, which for a mapped input means it was truncated.
    QOBS_CHECK(w > 0, IoError, path_, ": writing tensor '", name, "': ", errno_text(e),
               e == EFAULT ? " (its source bytes became unreadable: was the input file truncated?)" : "");
    done += static_cast<uint64_t>(w);
  }
  s.written = true;
#ifdef __linux__
  // Start the write-back of this tensor's pages now, so that the disk works while the
  // next tensors are computed and close()'s fsync finds little left to flush. Only a
  // hint: its errors (if any) are fsync's to report.
  (void)sync_file_range(fd_, static_cast<off_t>(at), static_cast<off_t>(s.nbytes), SYNC_FILE_RANGE_WRITE);
#endif
}

void SafetensorsWriter::skip(std::string_view name) {
  const auto it = index_.find(name);
  QOBS_CHECK(it != index_.end(), IoError, path_, ": tensor '", name, "' is not in the planned header");
  QOBS_CHECK(!slots_[it->second].written, IoError, path_, ": tensor '", name, "' written twice");
  slots_[it->second].written = true;
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
  for (const Slot& s : slots_) QOBS_CHECK(s.written, IoError, path_, ": tensor '", s.spec.name, "' was never written");
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
