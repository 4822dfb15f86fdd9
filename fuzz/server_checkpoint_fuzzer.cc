// libFuzzer target for a parameter server's checkpoint file (what a server reads back on
// restart, after a crash or a full disk may have left anything there). The input is the
// payload; the fuzzer frames it (so the CRC passes and the layout itself is exercised).
// It must decode or raise gradwire::Error, and what decodes must encode back to the same
// file (the layout has one spelling).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gradwire/core/atomic_file.h"
#include "gradwire/core/error.h"
#include "gradwire/strategy/ps/server_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradwire;
  const Bytes file = frame_checkpoint(std::span<const uint8_t>(data, size));
  Bytes again;
  try {
    again = strategy::ps::encode_server_checkpoint(strategy::ps::decode_server_checkpoint(file));
  } catch (const Error&) {
    return 0;
  }
  if (again != file) {
    std::fprintf(stderr, "server checkpoint fuzz failure: %zu bytes decode and encode to %zu\n",
                 file.size(), again.size());
    std::abort();
  }
  return 0;
}
