// libFuzzer target for what a gossip worker reads from its peers: any bytes must either
// parse as one message or raise PayloadError; what parses must encode back to exactly the
// same bytes (the format has one spelling). The same for a report's attachment.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gradwire/core/error.h"
#include "gradwire/strategy/gossip/protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradwire;
  namespace gossip = strategy::gossip;
  gradwire::Bytes again;
  gossip::Message message;
  try {
    message = gossip::parse(std::span<const uint8_t>(data, size));
    again = gossip::encode(message);
  } catch (const PayloadError&) {
    return 0;
  }
  try {
    const auto& attachment = message.attachment;
    if (!attachment.empty() &&
        gossip::encode(gossip::parse_report_body(attachment)) != attachment) {
      std::fprintf(stderr, "gossip report fuzz failure: %zu bytes do not encode back\n",
                   attachment.size());
      std::abort();
    }
  } catch (const PayloadError&) {
  }
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) {
    std::fprintf(stderr, "gossip message fuzz failure: %zu bytes parsed, %zu encoded back\n", size,
                 again.size());
    std::abort();
  }
  return 0;
}
