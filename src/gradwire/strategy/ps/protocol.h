// The parameter server's wire protocol (ALGORITHMS.md 6, docs/PARAMETER_SERVER.md).
//
// Every message starts with a 20-byte header (little-endian):
//   u32 magic "GWPS" | u8 format version | u8 type | u16 reserved (0) | u64 job token |
//   u32 sender (worker index for worker->server, server index for server->worker)
// The token is random per job and handed out through the rendezvous store; a server drops
// (and logs) any message whose token is wrong, so a stray or hostile client cannot write
// into the model. Every parse is bounds-checked: a truncated or corrupt message throws
// PayloadError, never reads outside the buffer.
//
//   worker -> server                         server -> worker
//   Hello   config, slices [, initial w]     Weights  version, progress, slice payloads
//   Push    clock, base version, stats,      Weights  (the reply to a push; held back for
//           per-slice gradient payloads               BSP and SSP, see ParameterServer)
//   Bye     stats, parameter checksum        Final    version, progress, staleness
//                                                     histogram, checksums [, weights]
//                                            Error    text (the worker raises it)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradwire/compress/codec.h"
#include "gradwire/core/bytes.h"

namespace gradwire::strategy::ps {

enum class MessageType : uint8_t {
  kHello = 1,
  kPush = 2,
  kBye = 3,
  kWeights = 4,
  kFinal = 5,
  kError = 6,
};
const char* message_type_name(MessageType type);

struct MessageHeader {
  static constexpr uint32_t kMagic = 0x53505747;  // "GWPS"
  static constexpr uint8_t kVersion = 2;          // 2: Bye carries wants_final
  static constexpr size_t kSize = 20;
  MessageType type = MessageType::kError;
  uint64_t token = 0;
  uint32_t sender = 0;

  void write(ByteWriter& writer) const;
  // Checks magic, version and type; does not check the token (the caller decides).
  static MessageHeader read(ByteReader& reader);
};

// A worker's cumulative counters, sent with every push and with its goodbye.
struct WorkerStats {
  uint64_t samples = 0;
  double loss_sum = 0;  // sum over samples of the training loss
  uint64_t bytes_sent = 0;
  uint64_t bytes_dense = 0;
  uint64_t bytes_received = 0;  // weight payloads pulled back
};

// Job-wide progress as server 0 counts it (other servers send zeros).
struct Progress {
  uint64_t samples = 0;  // over all workers, including a resumed checkpoint's
  double loss_sum = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_dense = 0;
  uint64_t bytes_received = 0;
  uint32_t live_workers = 0;
  bool done = false;  // the job's sample budget is spent: stop after this step
};

// One slice of one tensor, as the server needs to know it to decode pushes.
struct SliceDescription {
  uint32_t id = 0;
  compress::TensorInfo info;  // the slice's own name, shape and the tensor's kind
  std::string codec;          // canonical codec spec the worker encodes with
  bool operator==(const SliceDescription&) const;
};

struct SlicePayload {
  uint32_t id = 0;
  Bytes payload;
};

struct HelloMessage {
  std::string config;  // JobConfig::to_text(); every worker must send the same
  std::vector<SliceDescription> slices;
  // Worker 0 only: each slice's weights. `has_initial` is sent explicitly, so a server
  // that owns no slice is initialized too.
  bool has_initial = false;
  std::vector<std::vector<float>> initial;
};

// Where `hello` differs from the job a server runs (the first hello's configuration text
// and slices): the first differing configuration line or slice, "" if none.
std::string hello_difference(const std::string& job_config,
                             std::span<const SliceDescription> job_slices,
                             const HelloMessage& hello);

struct PushMessage {
  uint64_t clock = 0;         // pushes this worker made before this one
  uint64_t base_version = 0;  // the server version the gradient was computed on
  double lr = 0;              // the worker's learning rate now (its LR schedule)
  WorkerStats stats;
  std::vector<SlicePayload> gradients;
};

struct ByeMessage {
  WorkerStats stats;
  std::string checksum;
  // false: the worker is leaving without waiting (destroyed without finish()), so the
  // server sends it nothing more. A final reply to a worker that is gone would sit in the
  // server's socket, and closing it would wait the whole linger for a peer that never reads.
  bool wants_final = true;
};

// Weights travel either whole (decoded into zeros) or as a delta against what the worker
// holds (decoded into its parameters): see PullCodec.
struct WeightsMessage {
  uint64_t version = 0;
  bool delta = false;
  Progress progress;
  std::vector<SlicePayload> weights;
};

struct FinalMessage {
  WeightsMessage weights;  // only the chief (worker 0) gets slice payloads
  std::vector<uint64_t> staleness_histogram;
  std::vector<std::string> checksums;  // per worker; empty for a worker that was lost
};

// WorkerStats as every message (and a server's checkpoint) spells them.
void put_stats(ByteWriter& writer, const WorkerStats& stats);
WorkerStats get_stats(ByteReader& reader);

Bytes encode(const MessageHeader& header, const HelloMessage& message);
Bytes encode(const MessageHeader& header, const PushMessage& message);
Bytes encode(const MessageHeader& header, const ByeMessage& message);
Bytes encode(const MessageHeader& header, const WeightsMessage& message);
Bytes encode(const MessageHeader& header, const FinalMessage& message);
Bytes encode_error(const MessageHeader& header, const std::string& text);

// Each parses the body after the header and requires every byte to be consumed.
HelloMessage parse_hello(ByteReader& reader);
PushMessage parse_push(ByteReader& reader);
ByeMessage parse_bye(ByteReader& reader);
WeightsMessage parse_weights(ByteReader& reader);
FinalMessage parse_final(ByteReader& reader);
std::string parse_error(ByteReader& reader);

}  // namespace gradwire::strategy::ps
