// core/bytes.h: the one byte encoding of what leaves a process (statistics, the ranks'
// messages). The expected bytes are written out by hand from the format: little-endian
// fixed-width values, floats as their IEEE bits, strings as a length then their bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/bytes.h"
#include "test_util.h"

namespace qobs::detail {
namespace {

using testing::expect_error;

enum class Small : uint8_t { kA = 0, kB = 7 };

TEST(Bytes, WriterIsLittleEndianFixedWidth) {
  ByteWriter w;
  w.put<uint8_t>(0xAB);
  w.put<uint16_t>(0x1234);
  w.put<int32_t>(-2);
  w.put<uint64_t>(0x0102030405060708ull);
  w.put(Small::kB);
  const std::vector<uint8_t> expect = {0xAB,                                            // uint8
                                       0x34, 0x12,                                      // uint16
                                       0xFE, 0xFF, 0xFF, 0xFF,                          // int32 -2
                                       0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  // uint64
                                       0x07};                                           // enum
  EXPECT_EQ(w.bytes(), expect);
}

TEST(Bytes, FloatsTravelAsTheirBits) {
  ByteWriter w;
  w.put(1.0f);                                     // 0x3F800000
  w.put(-0.0f);                                    // 0x80000000
  w.put(1.0);                                      // 0x3FF0000000000000
  w.put(std::numeric_limits<double>::infinity());  // 0x7FF0000000000000
  const std::vector<uint8_t> expect = {0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00,
                                       0x00, 0x00, 0xF0, 0x3F, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF0, 0x7F};
  EXPECT_EQ(w.bytes(), expect);
  ByteReader r(w.bytes(), "test bytes");
  EXPECT_EQ(r.get<float>("a"), 1.0f);
  const float z = r.get<float>("b");
  EXPECT_TRUE(z == 0.0f && std::signbit(z));
  EXPECT_EQ(r.get<double>("c"), 1.0);
  EXPECT_EQ(r.get<double>("d"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(r.remaining(), 0u);
}

TEST(Bytes, StringsCarryALengthOfTheStatedWidth) {
  ByteWriter w;
  w.put_string<uint32_t>("ab", "name");
  w.put_string<uint64_t>("", "empty");
  w.put_string<uint64_t>("xyz", "text");
  const std::vector<uint8_t> expect = {0x02, 0x00, 0x00, 0x00, 'a',  'b',               //
                                       0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  //
                                       0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 'x', 'y', 'z'};
  EXPECT_EQ(w.bytes(), expect);
  const std::string message = w.str();  // the Collective's message type
  ByteReader r(message, "test bytes");
  EXPECT_EQ(r.get_string<uint32_t>("name"), "ab");
  EXPECT_EQ(r.get_string<uint64_t>("empty"), "");
  EXPECT_EQ(r.get_string<uint64_t>("text"), "xyz");
  EXPECT_EQ(r.offset(), expect.size());
}

TEST(Bytes, ReadsFromHandWrittenBytes) {
  const std::vector<uint8_t> b = {0x78, 0x56, 0x34, 0x12, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x07};
  ByteReader r(b, "test bytes");
  EXPECT_EQ(r.get<uint32_t>("u32"), 0x12345678u);
  EXPECT_EQ(r.get<int64_t>("i64"), -1);
  EXPECT_EQ(r.get<Small>("enum"), Small::kB);
}

TEST(Bytes, TruncatedReadsNameWhatWasBeingRead) {
  const std::vector<uint8_t> b = {0x01, 0x02, 0x03};
  ByteReader r(b, "the message from rank 2");
  EXPECT_EQ(r.get<uint16_t>("tag"), 0x0201);
  expect_error<IoError>([&] { r.get<uint32_t>("module count"); },
                        {"the message from rank 2", "module count", "offset 2", "3 bytes"});
  // A string whose declared length runs past the end.
  const std::vector<uint8_t> s = {0x05, 0x00, 0x00, 0x00, 'a', 'b'};
  ByteReader rs(s, "statistics bytes");
  expect_error<IoError>([&] { rs.get_string<uint32_t>("statistic name"); },
                        {"statistics bytes", "statistic name", "offset 4"});
  // Every prefix of a valid encoding fails the same way, never reading past the end.
  ByteWriter w;
  w.put_string<uint64_t>("hello", "text");
  w.put(2.5);
  const std::vector<uint8_t> full = w.bytes();
  for (std::size_t n = 0; n < full.size(); ++n) {
    const std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    ByteReader rc(cut, "cut");
    EXPECT_THROW(
        {
          rc.get_string<uint64_t>("text");
          rc.get<double>("value");
        },
        IoError)
        << n;
  }
}

}  // namespace
}  // namespace qobs::detail
