#include "gradwire/core/error.h"

#include <cstring>

namespace gradwire {

std::string errno_message(const std::string& what, int error_number) {
  return what + ": " + std::strerror(error_number);
}

}  // namespace gradwire
