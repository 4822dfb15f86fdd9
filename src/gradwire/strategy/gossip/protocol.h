// Gossip's wire protocol (ALGORITHMS.md 7). Every message (little-endian):
//   u32 magic "GWGO" | u8 format version | u8 type | u16 reserved (0) | u64 job token |
//   u32 sender rank | u64 exchange id | f64 weight | u32 tensor count |
//   per tensor: u32 payload length | codec payload (compress/codec.h) |
//   u32 attachment length | attachment
//
// Between workers, while training:
//   Offer     i -> j   "average with me": x_i as i sent it (pairwise merge)
//   Answer    j -> i   x_j at the moment j merged the offer; the same exchange id
//   Busy      j -> i   j does not take this exchange (it is finishing); a declined push goes
//                      back into its sender's model and weight
//   Push      i -> j   push-sum: x_i with half of i's weight w_i
//   Taken     j -> i   push-sum: j merged the push of this exchange id
// With rank 0, which holds the job's view (no collective runs while training):
//   Report    i -> 0   at an evaluation point (exchange id = the step): x_i in fp32, w_i,
//                      and the attachment: i's counters (ReportBody) and the caller's note
//   Done      i -> 0   the same at the end; i then waits for the Consensus
//   Consensus 0 -> i   the average of the models of every Done, fp32
//   Alive     any      a heartbeat (no tensors): non-root workers send one to rank 0 every
//                      peer_timeout/4, and rank 0 to workers waiting for the consensus
// The weight is push-sum's w (1.0 otherwise). A receiver drops (and counts) any message
// with a wrong token, a sender outside the job or a malformed body; parsing is
// bounds-checked and throws PayloadError, never reads outside the buffer.
#pragma once

#include <cstdint>
#include <vector>

#include "gradwire/core/bytes.h"

namespace gradwire::strategy::gossip {

enum class MessageType : uint8_t {
  kOffer = 1,
  kAnswer = 2,
  kBusy = 3,
  kPush = 4,
  kTaken = 5,
  kReport = 6,
  kDone = 7,
  kConsensus = 8,
  kAlive = 9,
};
const char* message_type_name(MessageType type);

struct Message {
  static constexpr uint32_t kMagic = 0x4f474757;  // "GWGO"
  static constexpr uint8_t kVersion = 2;
  MessageType type = MessageType::kOffer;
  uint64_t token = 0;
  uint32_t sender = 0;
  uint64_t exchange = 0;  // the offer's id, chosen by its sender; answers repeat it
  double weight = 1.0;
  std::vector<Bytes> tensors;  // one codec payload per tensor
  Bytes attachment;            // Report and Done: a ReportBody
};

Bytes encode(const Message& message);
// Throws PayloadError for anything that is not exactly one well-formed message. The token
// and the sender's range are the caller's to check.
Message parse(std::span<const uint8_t> bytes);

// What a worker did, for the metrics.
struct GossipStats {
  uint64_t steps = 0;
  uint64_t offers = 0;            // offers (or pushes) sent
  uint64_t merges = 0;            // merges applied: answers received, offers answered, pushes taken
  uint64_t busy = 0;              // exchanges a peer declined
  uint64_t dropped_messages = 0;  // wrong token, unknown sender, malformed, stale
  uint64_t bytes_sent = 0;        // the exchanges' messages (offers, answers, pushes, replies)
  uint64_t bytes_bookkeeping = 0;       // reports, dones, the consensus and heartbeats
  std::vector<uint64_t> steps_between;  // local steps between consecutive offers
  std::vector<int> dropped_peers;       // peers this worker stopped offering to
};

// A Report's or Done's attachment: the sender's counters and an opaque note of its caller
// (the built-in trainer sends its loss sum and, at the end, its timeline).
struct ReportBody {
  GossipStats stats;
  Bytes note;
};
Bytes encode(const ReportBody& body);
ReportBody parse_report_body(std::span<const uint8_t> bytes);  // throws PayloadError

}  // namespace gradwire::strategy::gossip
