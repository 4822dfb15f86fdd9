#include "gradwire/core/bytes.h"

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

}  // namespace gradwire
