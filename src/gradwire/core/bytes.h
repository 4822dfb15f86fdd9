// Little-endian byte writer and bounds-checked reader for wire payloads.
//
// Contract: ByteReader never reads outside the span it was given. Every read checks the
// remaining length first and throws PayloadError naming the field, the offset and the
// sizes, so a truncated or corrupt payload is an error, never undefined behaviour.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gradwire/core/error.h"

namespace gradwire {

static_assert(std::endian::native == std::endian::little,
              "gradwire's wire format is little-endian; big-endian hosts are not supported");

using Bytes = std::vector<uint8_t>;

class ByteWriter {
 public:
  explicit ByteWriter(Bytes& out) : out_(out) {}

  template <typename T>
  void put(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = out_.size();
    out_.resize(at + sizeof(T));
    std::memcpy(out_.data() + at, &value, sizeof(T));
  }

  template <typename T>
  void put_array(std::span<const T> values) {
    static_assert(std::is_trivially_copyable_v<T>);
    const size_t at = out_.size();
    out_.resize(at + values.size_bytes());
    if (!values.empty()) std::memcpy(out_.data() + at, values.data(), values.size_bytes());
  }

  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    put_array<char>(std::span<const char>(s.data(), s.size()));
  }

  // Grows the buffer by `n` bytes and returns a pointer to them (valid until the next put).
  uint8_t* reserve_tail(size_t n) {
    const size_t at = out_.size();
    out_.resize(at + n);
    return out_.data() + at;
  }

  size_t size() const { return out_.size(); }

 private:
  Bytes& out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> data) : data_(data) {}

  template <typename T>
  T get(const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    require(sizeof(T), field);
    T value;
    std::memcpy(&value, data_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }

  // Returns a view of the next `count` elements of T. The bytes may be unaligned for T, so
  // callers copy out with memcpy (or use get_array) rather than dereference.
  std::span<const uint8_t> get_bytes(size_t count, const char* field) {
    require(count, field);
    auto view = data_.subspan(offset_, count);
    offset_ += count;
    return view;
  }

  template <typename T>
  void get_array(std::span<T> out, const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (out.size() > SIZE_MAX / sizeof(T)) fail(SIZE_MAX, field);
    auto bytes = get_bytes(out.size_bytes(), field);
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  }

  std::string get_string(const char* field) {
    const uint32_t n = get<uint32_t>(field);
    auto bytes = get_bytes(n, field);
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }

  size_t offset() const { return offset_; }
  size_t remaining() const { return data_.size() - offset_; }

  // Throws unless every byte was consumed: trailing garbage is corruption too.
  void expect_end(const char* what) const;

 private:
  void require(size_t n, const char* field) const {
    if (n > remaining()) fail(n, field);
  }
  [[noreturn]] void fail(size_t n, const char* field) const;

  std::span<const uint8_t> data_;
  size_t offset_ = 0;
};

// A length-prefixed section (u64 length, then the bytes), for nested states that each
// check their own end: put_section() appends one, get_section() returns a reader over the
// next one (valid while `in`'s bytes are) and moves `in` past it.
inline void put_section(Bytes& out, std::span<const uint8_t> section) {
  ByteWriter writer(out);
  writer.put<uint64_t>(section.size());
  writer.put_array<uint8_t>(section);
}
inline ByteReader get_section(ByteReader& in, const char* field) {
  const auto size = in.get<uint64_t>(field);
  if (size > in.remaining()) {
    throw PayloadError(std::string("truncated ") + field + ": " + std::to_string(size) +
                       " bytes announced, " + std::to_string(in.remaining()) + " remain");
  }
  return ByteReader(in.get_bytes(static_cast<size_t>(size), field));
}

// How a peer identity or other bytes from the network appear in a log line: quoted as they
// are when every byte is printable ASCII ('worker3'), else as hex (0x00a3f1...), so that a
// ZeroMQ routing id or a malformed name never writes control bytes to a terminal.
std::string printable_identity(std::string_view bytes);

}  // namespace gradwire
