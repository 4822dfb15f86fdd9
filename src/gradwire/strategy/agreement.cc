#include "gradwire/strategy/agreement.h"

#include <algorithm>

#include "gradwire/core/error.h"

namespace gradwire::strategy {
namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

Bytes pack(const std::vector<std::string>& lines) {
  Bytes out;
  ByteWriter writer(out);
  writer.put<uint32_t>(static_cast<uint32_t>(lines.size()));
  for (const auto& line : lines) writer.put_string(line);
  return out;
}

std::vector<std::string> unpack(std::span<const uint8_t> bytes) {
  ByteReader reader(bytes);
  const uint32_t n = reader.get<uint32_t>("line count");
  std::vector<std::string> lines;
  for (uint32_t i = 0; i < n; ++i) lines.push_back(reader.get_string("configuration line"));
  reader.expect_end("configuration message");
  return lines;
}

}  // namespace

std::vector<std::string> configuration_lines(const std::string& strategy,
                                             const compress::CodecPolicy& policy,
                                             std::span<const compress::TensorInfo> tensors) {
  policy.check_tensors(tensors);
  std::vector<std::string> lines{"strategy " + strategy, "codec " + policy.canonical(),
                                 "tensors " + std::to_string(tensors.size())};
  for (const auto& t : tensors) {
    lines.push_back("tensor " + t.name + " " + shape_string(t.shape) + " " + policy.spec_for(t));
  }
  return lines;
}

void check_same_configuration(comm::Collectives& collectives,
                              const std::vector<std::string>& lines) {
  const auto all = collectives.allgather_bytes(pack(lines));
  const auto reference = unpack(all[0]);
  for (int r = 1; r < collectives.size(); ++r) {
    const auto theirs = unpack(all[r]);
    const size_t n = std::max(reference.size(), theirs.size());
    for (size_t i = 0; i < n; ++i) {
      const std::string a = i < reference.size() ? reference[i] : "(nothing)";
      const std::string b = i < theirs.size() ? theirs[i] : "(nothing)";
      if (a != b) {
        throw MismatchError("ranks disagree on their configuration: rank 0 has '" + a +
                            "' but rank " + std::to_string(r) + " has '" + b +
                            "'; every rank must run the same model with the same "
                            "--compressor and strategy");
      }
    }
  }
}

void broadcast_from_rank0(comm::Collectives& collectives, const FloatSpans& spans) {
  for (const auto& span : spans) collectives.broadcast(span.data(), span.size_bytes(), 0);
}

}  // namespace gradwire::strategy
