// Reading untrusted input files: regular files only, depth-limited JSON. See input.h.
#include "io/input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "core/check.h"

namespace qobs::detail {
namespace {

const char* file_kind(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a plain file";
}

using json = nlohmann::json;

// The library's own DOM builder (linear: it never rescans what it built, unlike its
// callback parser, which searched the parent container after every closed value and
// made a header of n tensors cost O(n^2)), with the nesting and key checks in front.
class LimitedDom {
 public:
  LimitedDom(json& root, const std::string& what, int max_depth, const DuplicateKeyMessage& on_duplicate)
      : dom_(root, true), what_(what), max_depth_(max_depth), on_duplicate_(on_duplicate) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return dom_.number_float(v, s); }
  bool string(json::string_t& s) { return dom_.string(s); }
  bool binary(json::binary_t& b) { return dom_.binary(b); }
  bool start_object(std::size_t n) {
    enter(true);
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    Frame& f = frames_.back();
    if (on_duplicate_ && !f.keys.insert(k).second) {
      std::vector<std::string> path;
      for (std::size_t i = 0; i + 1 < frames_.size(); ++i)
        if (frames_[i].object) path.push_back(frames_[i].last_key);
      QOBS_THROW(IoError, what_, ": ", on_duplicate_(path, k));
    }
    f.last_key = k;
    return dom_.key(k);
  }
  bool end_object() {
    frames_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    enter(false);
    return dom_.start_array(n);
  }
  bool end_array() {
    frames_.pop_back();
    return dom_.end_array();
  }
  bool parse_error(std::size_t pos, const std::string& token, const nlohmann::detail::exception& e) {
    return dom_.parse_error(pos, token, e);
  }

 private:
  struct Frame {
    bool object = false;
    std::unordered_set<std::string> keys;
    std::string last_key;
  };
  void enter(bool object) {
    QOBS_CHECK(static_cast<int>(frames_.size()) < max_depth_, IoError, what_,
               ": objects and arrays nested deeper than ", max_depth_,
               " levels (the limit for this file; deeper documents are refused so that no later step can "
               "exhaust the stack on them)");
    frames_.push_back(Frame{object, {}, {}});
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  const std::string& what_;
  int max_depth_;
  const DuplicateKeyMessage& on_duplicate_;
  std::vector<Frame> frames_;
};

}  // namespace

int open_regular_file(const std::string& path, uint64_t* size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever,
  // before the type check below could refuse it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  QOBS_CHECK(fd >= 0, IoError, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    QOBS_THROW(IoError, path, ": cannot stat: ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    QOBS_THROW(IoError, path, ": not a regular file (", file_kind(st.st_mode), ")");
  }
  const int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

std::string read_regular_file(const std::string& path) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, &size);
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t r = ::read(fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int e = errno;
      ::close(fd);
      QOBS_THROW(IoError, path, ": read error: ", std::strerror(e));
    }
    if (r == 0) break;
    text.append(buf, static_cast<std::size_t>(r));
  }
  ::close(fd);
  return text;
}

json parse_json_limited(std::string_view text, const std::string& what, int max_depth,
                        const DuplicateKeyMessage& on_duplicate) {
  json root;
  LimitedDom sax(root, what, max_depth, on_duplicate);
  try {
    const bool ok = json::sax_parse(text.data(), text.data() + text.size(), &sax);
    QOBS_CHECK(ok, IoError, what, ": not valid JSON");
  } catch (const json::exception& e) {
    QOBS_THROW(IoError, what, ": not valid JSON: ", e.what());
  }
  return root;
}

}  // namespace qobs::detail
