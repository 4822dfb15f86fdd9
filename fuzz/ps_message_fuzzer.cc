// libFuzzer target for what a parameter server reads from the network: any bytes must
// either parse as a message or raise gradwire::Error (PayloadError, ConfigError); what
// parses must encode back to exactly the same bytes (the format has one spelling), and a
// hello's configuration text must parse or be refused the same way.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gradwire/core/error.h"
#include "gradwire/strategy/ps/job.h"
#include "gradwire/strategy/ps/protocol.h"

namespace {

using namespace gradwire;
using namespace gradwire::strategy::ps;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "ps message fuzz failure: %s\n", what.c_str());
  std::abort();
}

Bytes reencode(const MessageHeader& h, ByteReader& reader) {
  switch (h.type) {
    case MessageType::kHello: {
      const HelloMessage m = parse_hello(reader);
      try {
        JobConfig::from_text(m.config);
      } catch (const Error&) {
      }
      return encode(h, m);
    }
    case MessageType::kPush:
      return encode(h, parse_push(reader));
    case MessageType::kBye:
      return encode(h, parse_bye(reader));
    case MessageType::kWeights:
      return encode(h, parse_weights(reader));
    case MessageType::kFinal:
      return encode(h, parse_final(reader));
    case MessageType::kError:
      return encode_error(h, parse_error(reader));
  }
  fail("unknown type parsed");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  Bytes again;
  try {
    ByteReader reader(bytes);
    const MessageHeader h = MessageHeader::read(reader);
    again = reencode(h, reader);
  } catch (const Error&) {
    return 0;
  }
  if (again.size() != size || !std::equal(again.begin(), again.end(), data)) {
    fail("a parsed message does not encode back to its bytes (" + std::to_string(size) +
         " bytes in, " + std::to_string(again.size()) + " out)");
  }
  return 0;
}
