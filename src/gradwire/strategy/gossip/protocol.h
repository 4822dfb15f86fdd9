// Gossip's wire protocol (ALGORITHMS.md 7). Every message (little-endian):
//   u32 magic "GWGO" | u8 format version | u8 type | u16 reserved (0) | u64 job token |
//   u32 sender rank | u64 exchange id | f64 weight | u32 tensor count |
//   per tensor: u32 payload length | codec payload (compress/codec.h)
//
//   Offer    i -> j   "average with me": x_i as i sent it (pairwise merge)
//   Answer   j -> i   x_j at the moment j merged the offer; the same exchange id
//   Busy     j -> i   j is not taking exchanges now (finishing); i tries another step
//   Push     i -> j   push-sum: half of i's numerator z_i and of its weight w_i
// The weight is push-sum's w (1.0 for pairwise messages). A receiver drops (and counts)
// any message with a wrong token, a sender outside the job or a malformed body; parsing is
// bounds-checked and throws PayloadError, never reads outside the buffer.
#pragma once

#include <cstdint>
#include <vector>

#include "gradwire/core/bytes.h"

namespace gradwire::strategy::gossip {

enum class MessageType : uint8_t { kOffer = 1, kAnswer = 2, kBusy = 3, kPush = 4 };
const char* message_type_name(MessageType type);

struct Message {
  static constexpr uint32_t kMagic = 0x4f474757;  // "GWGO"
  static constexpr uint8_t kVersion = 1;
  MessageType type = MessageType::kOffer;
  uint64_t token = 0;
  uint32_t sender = 0;
  uint64_t exchange = 0;  // the offer's id, chosen by its sender; answers repeat it
  double weight = 1.0;
  std::vector<Bytes> tensors;  // one codec payload per tensor (none for Busy)
};

Bytes encode(const Message& message);
// Throws PayloadError for anything that is not exactly one well-formed message. The token
// and the sender's range are the caller's to check.
Message parse(std::span<const uint8_t> bytes);

}  // namespace gradwire::strategy::gossip
