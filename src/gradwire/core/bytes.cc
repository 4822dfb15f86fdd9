#include "gradwire/core/bytes.h"

#include <algorithm>

namespace gradwire {

void ByteReader::fail(size_t n, const char* field) const {
  throw PayloadError("truncated payload: field '" + std::string(field) + "' needs " +
                     std::to_string(n) + " bytes at offset " + std::to_string(offset_) +
                     " but only " + std::to_string(remaining()) + " remain (payload is " +
                     std::to_string(data_.size()) + " bytes)");
}

void ByteReader::expect_end(const char* what) const {
  if (remaining() != 0) {
    throw PayloadError("corrupt " + std::string(what) + ": " + std::to_string(remaining()) +
                       " unexpected trailing bytes after offset " + std::to_string(offset_));
  }
}

std::string printable_identity(std::string_view bytes) {
  const bool printable = !bytes.empty() && std::all_of(bytes.begin(), bytes.end(), [](char c) {
    return c >= 0x20 && c < 0x7f && c != '\'';
  });
  if (printable) {
    std::string quoted(1, '\'');
    quoted.append(bytes);
    quoted += '\'';
    return quoted;
  }
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex = "0x";
  for (const char c : bytes) {
    const auto byte = static_cast<uint8_t>(c);
    hex += kDigits[byte >> 4];
    hex += kDigits[byte & 0xf];
  }
  return hex;
}

}  // namespace gradwire
