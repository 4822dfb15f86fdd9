#include "gradwire/core/bytes.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace gradwire {
namespace {

TEST(ByteWriterReader, RoundTripsScalarsArraysAndStrings) {
  Bytes buffer;
  ByteWriter writer(buffer);
  writer.put<uint8_t>(0xab);
  writer.put<uint32_t>(0x01020304u);
  writer.put<float>(1.5f);
  const std::vector<uint16_t> values = {1, 2, 65535};
  writer.put_array(std::span<const uint16_t>(values));
  writer.put_string("gradwire");
  EXPECT_EQ(writer.size(), 1u + 4 + 4 + 6 + 4 + 8);
  // Little-endian on the wire.
  EXPECT_EQ(buffer[1], 0x04);
  EXPECT_EQ(buffer[4], 0x01);

  ByteReader reader(buffer);
  EXPECT_EQ(reader.get<uint8_t>("a"), 0xab);
  EXPECT_EQ(reader.get<uint32_t>("b"), 0x01020304u);
  EXPECT_EQ(reader.get<float>("c"), 1.5f);
  std::vector<uint16_t> read(3);
  reader.get_array(std::span<uint16_t>(read), "d");
  EXPECT_EQ(read, values);
  EXPECT_EQ(reader.get_string("e"), "gradwire");
  EXPECT_EQ(reader.remaining(), 0u);
  EXPECT_NO_THROW(reader.expect_end("test message"));
}

TEST(ByteWriter, ReserveTailAppends) {
  Bytes buffer = {9};
  ByteWriter writer(buffer);
  uint8_t* tail = writer.reserve_tail(3);
  tail[0] = 1;
  tail[2] = 3;
  EXPECT_EQ(buffer, (Bytes{9, 1, 0, 3}));
}

TEST(ByteReader, TruncatedReadThrowsNamingTheField) {
  const Bytes buffer = {1, 2, 3};
  ByteReader reader(buffer);
  EXPECT_EQ(reader.get<uint8_t>("first"), 1);
  try {
    reader.get<uint32_t>("count");
    FAIL() << "expected PayloadError";
  } catch (const PayloadError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'count' needs 4 bytes at offset 1"), std::string::npos) << message;
    EXPECT_NE(message.find("only 2 remain"), std::string::npos) << message;
  }
  // A failed read consumes nothing.
  EXPECT_EQ(reader.offset(), 1u);
}

TEST(ByteReader, GetBytesAndArraysAreBoundsChecked) {
  const Bytes buffer(10, 0);
  ByteReader reader(buffer);
  EXPECT_THROW(reader.get_bytes(11, "blob"), PayloadError);
  std::vector<float> too_many(3);
  EXPECT_THROW(reader.get_array(std::span<float>(too_many), "floats"), PayloadError);
  EXPECT_EQ(reader.get_bytes(10, "blob").size(), 10u);
  EXPECT_THROW(reader.get<uint8_t>("one more"), PayloadError);
}

TEST(ByteReader, StringLengthIsChecked) {
  Bytes buffer;
  ByteWriter writer(buffer);
  writer.put<uint32_t>(std::numeric_limits<uint32_t>::max());
  writer.put<uint8_t>('x');
  ByteReader reader(buffer);
  EXPECT_THROW(reader.get_string("name"), PayloadError);
}

TEST(ByteReader, ExpectEndRejectsTrailingBytes) {
  const Bytes buffer = {1, 2};
  ByteReader reader(buffer);
  reader.get<uint8_t>("x");
  EXPECT_THROW(reader.expect_end("test message"), PayloadError);
}

TEST(ByteReader, EmptyInput) {
  ByteReader reader(std::span<const uint8_t>{});
  EXPECT_EQ(reader.remaining(), 0u);
  EXPECT_NO_THROW(reader.expect_end("empty"));
  EXPECT_THROW(reader.get<uint8_t>("x"), PayloadError);
  EXPECT_EQ(reader.get_bytes(0, "nothing").size(), 0u);
}

TEST(PrintableIdentity, PrintableNamesAreQuotedBinaryIsHex) {
  EXPECT_EQ(printable_identity("worker3"), "'worker3'");
  // A ZeroMQ-generated routing id: a zero byte and four random ones.
  EXPECT_EQ(printable_identity(std::string("\x00\x80\x00\x41\xff", 5)), "0x00800041ff");
  EXPECT_EQ(printable_identity("a\nb"), "0x610a62");  // control bytes never reach a terminal
  EXPECT_EQ(printable_identity("it's"), "0x69742773");  // nor a quote that would end the quoting
  EXPECT_EQ(printable_identity(""), "0x");
}

}  // namespace
}  // namespace gradwire
