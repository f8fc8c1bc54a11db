// The one byte encoding of values qobs exchanges outside a process: little-endian
// fixed-width integers, IEEE floats and doubles as their bits (so that an infinity or a
// NaN survives), raw byte runs, and strings as a length of a stated width followed by
// their bytes. Statistics::serialize and the messages between the ranks of a distributed
// run are written with ByteWriter and read back with ByteReader.
#pragma once

#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/check.h"

namespace qobs::detail {

/// A value ByteWriter::put / ByteReader::get encodes: an integer (not bool, whose other
/// byte values would be undefined when read back), an enum over one, a float or a double.
template <typename T>
concept ByteScalar = (std::is_integral_v<T> && !std::same_as<T, bool>) || std::is_enum_v<T> || std::same_as<T, float> ||
                     std::same_as<T, double>;

/// The unsigned integer with T's bits.
template <ByteScalar T>
using ByteBits = std::conditional_t<
    sizeof(T) == 1, uint8_t,
    std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;

/// Appends values to a byte buffer.
class ByteWriter {
 public:
  /// `v` as sizeof(T) bytes, least significant first.
  template <ByteScalar T>
  void put(T v) {
    static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8);
    auto bits = std::bit_cast<ByteBits<T>>(v);
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      bytes_.push_back(static_cast<uint8_t>(bits & 0xFF));
      if constexpr (sizeof(T) > 1) bits = static_cast<ByteBits<T>>(bits >> 8);
    }
  }
  /// `n` bytes from `data`, unchanged.
  void put_bytes(const void* data, std::size_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    bytes_.insert(bytes_.end(), p, p + n);
  }
  /// `s` as its length in a `Length` (uint32_t or uint64_t) followed by its bytes;
  /// `what` names the string in the error when it is too long for that width.
  template <std::unsigned_integral Length>
  void put_string(std::string_view s, std::string_view what) {
    QOBS_CHECK(s.size() <= std::numeric_limits<Length>::max(), InvalidArgument, what, " of ", s.size(),
               " bytes is too long to encode (at most ", std::numeric_limits<Length>::max(), ")");
    put(static_cast<Length>(s.size()));
    put_bytes(s.data(), s.size());
  }

  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> take() { return std::move(bytes_); }
  /// The bytes as a std::string (the Collective's message type).
  std::string str() const { return std::string(bytes_.begin(), bytes_.end()); }

 private:
  std::vector<uint8_t> bytes_;
};

/// Reads values back in the order a ByteWriter wrote them, from bytes that outlive the
/// reader (it keeps a view of them). Every read checks that the
/// bytes hold it and otherwise throws IoError naming the data (`source`, e.g. "statistics
/// bytes"), what was being read, the offset and the size.
class ByteReader {
 public:
  ByteReader(std::span<const uint8_t> bytes, std::string source) : bytes_(bytes), source_(std::move(source)) {}
  ByteReader(std::string_view bytes, std::string source)
      : ByteReader(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), std::move(source)) {}
  /// The reader keeps a view of its input: a temporary string would leave it dangling.
  ByteReader(const std::string&& bytes, std::string source) = delete;

  template <ByteScalar T>
  T get(std::string_view what) {
    need(sizeof(T), what);
    ByteBits<T> bits = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
      bits |= static_cast<ByteBits<T>>(ByteBits<T>{bytes_[pos_ + i]} << (8 * i));
    pos_ += sizeof(T);
    return std::bit_cast<T>(bits);
  }
  /// The next `n` bytes, as a view into the input.
  std::span<const uint8_t> get_bytes(std::size_t n, std::string_view what) {
    need(n, what);
    const auto out = bytes_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  /// A string written by ByteWriter::put_string<Length>.
  template <std::unsigned_integral Length>
  std::string get_string(std::string_view what) {
    const Length n = get<Length>(what);
    const auto b = get_bytes(static_cast<std::size_t>(n), what);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }

  std::size_t offset() const { return pos_; }
  std::size_t remaining() const { return bytes_.size() - pos_; }
  const std::string& source() const { return source_; }

 private:
  void need(std::size_t n, std::string_view what) const {
    QOBS_CHECK(n <= remaining(), IoError, source_, " truncated while reading ", what, " at offset ", pos_, " (",
               bytes_.size(), " bytes)");
  }

  std::span<const uint8_t> bytes_;
  std::string source_;
  std::size_t pos_ = 0;
};

}  // namespace qobs::detail
