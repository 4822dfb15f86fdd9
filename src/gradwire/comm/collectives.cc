#include "gradwire/comm/collectives.h"

#include <exception>

namespace gradwire::comm {

size_t data_type_size(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return 4;
    case DataType::kFloat16:
      return 2;
    case DataType::kInt8:
      return 1;
  }
  return 0;
}

const char* data_type_name(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat16:
      return "float16";
    case DataType::kInt8:
      return "int8";
  }
  return "?";
}

void CompletedWork::wait() {
  if (error_) std::rethrow_exception(error_);
}

std::string describe_ranks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace gradwire::comm
