// libFuzzer target for what a gossip worker reads from its peers: any bytes must either
// parse as one message or raise PayloadError; what parses must encode back to exactly the
// same bytes (the format has one spelling).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gradwire/core/error.h"
#include "gradwire/strategy/gossip/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradwire;
  gradwire::Bytes again;
  try {
    again = strategy::gossip::encode(strategy::gossip::parse(std::span<const uint8_t>(data, size)));
  } catch (const PayloadError&) {
    return 0;
  }
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) {
    std::fprintf(stderr, "gossip message fuzz failure: %zu bytes parsed, %zu encoded back\n", size,
                 again.size());
    std::abort();
  }
  return 0;
}
