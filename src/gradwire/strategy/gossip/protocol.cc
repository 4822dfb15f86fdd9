#include "gradwire/strategy/gossip/protocol.h"

#include <cmath>

#include "gradwire/core/error.h"

namespace gradwire::strategy::gossip {

const char* message_type_name(MessageType type) {
  switch (type) {
    case MessageType::kOffer:
      return "offer";
    case MessageType::kAnswer:
      return "answer";
    case MessageType::kBusy:
      return "busy";
    case MessageType::kPush:
      return "push";
    case MessageType::kTaken:
      return "taken";
    case MessageType::kReport:
      return "report";
    case MessageType::kDone:
      return "done";
    case MessageType::kConsensus:
      return "consensus";
    case MessageType::kAlive:
      return "alive";
  }
  return "unknown";
}

Bytes encode(const Message& m) {
  Bytes out;
  ByteWriter writer(out);
  writer.put<uint32_t>(Message::kMagic);
  writer.put<uint8_t>(Message::kVersion);
  writer.put<uint8_t>(static_cast<uint8_t>(m.type));
  writer.put<uint16_t>(0);
  writer.put<uint64_t>(m.token);
  writer.put<uint32_t>(m.sender);
  writer.put<uint64_t>(m.exchange);
  writer.put<double>(m.weight);
  writer.put<uint32_t>(static_cast<uint32_t>(m.tensors.size()));
  for (const Bytes& payload : m.tensors) {
    writer.put<uint32_t>(static_cast<uint32_t>(payload.size()));
    writer.put_array<uint8_t>(payload);
  }
  writer.put<uint32_t>(static_cast<uint32_t>(m.attachment.size()));
  writer.put_array<uint8_t>(m.attachment);
  return out;
}

Message parse(std::span<const uint8_t> bytes) {
  ByteReader reader(bytes);
  if (reader.get<uint32_t>("magic") != Message::kMagic) {
    throw PayloadError("not a gradwire gossip message (bad magic)");
  }
  const uint8_t version = reader.get<uint8_t>("format version");
  if (version != Message::kVersion) {
    throw PayloadError("gossip message format " + std::to_string(version) + "; this build speaks " +
                       std::to_string(Message::kVersion));
  }
  Message m;
  const uint8_t type = reader.get<uint8_t>("type");
  if (type < 1 || type > static_cast<uint8_t>(MessageType::kAlive)) {
    throw PayloadError("unknown gossip message type " + std::to_string(type));
  }
  m.type = static_cast<MessageType>(type);
  if (reader.get<uint16_t>("reserved") != 0) throw PayloadError("reserved header bits set");
  m.token = reader.get<uint64_t>("token");
  m.sender = reader.get<uint32_t>("sender");
  m.exchange = reader.get<uint64_t>("exchange id");
  m.weight = reader.get<double>("weight");
  if (!std::isfinite(m.weight) || !(m.weight > 0)) {
    throw PayloadError("gossip message weight " + std::to_string(m.weight) +
                       " is not a positive number");
  }
  const uint32_t count = reader.get<uint32_t>("tensor count");
  // Each tensor takes at least its 4-byte length: a count beyond what is left is corrupt
  // (and must not reserve memory for it).
  if (count > reader.remaining() / sizeof(uint32_t)) {
    throw PayloadError("gossip message claims " + std::to_string(count) + " tensors in " +
                       std::to_string(reader.remaining()) + " bytes");
  }
  const bool bare = m.type == MessageType::kBusy || m.type == MessageType::kTaken ||
                    m.type == MessageType::kAlive;
  if (bare && count != 0) {
    throw PayloadError(std::string("a gossip ") + message_type_name(m.type) +
                       " message carries no tensors");
  }
  m.tensors.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t length = reader.get<uint32_t>("payload length");
    const auto payload = reader.get_bytes(length, "tensor payload");
    m.tensors.emplace_back(payload.begin(), payload.end());
  }
  const uint32_t attached = reader.get<uint32_t>("attachment length");
  const auto attachment = reader.get_bytes(attached, "attachment");
  m.attachment.assign(attachment.begin(), attachment.end());
  const bool reports = m.type == MessageType::kReport || m.type == MessageType::kDone;
  if (!reports && !m.attachment.empty()) {
    throw PayloadError(std::string("a gossip ") + message_type_name(m.type) +
                       " message carries no attachment");
  }
  reader.expect_end("gossip message");
  return m;
}

Bytes encode(const ReportBody& body) {
  Bytes out;
  ByteWriter writer(out);
  const GossipStats& s = body.stats;
  for (uint64_t v : {s.steps, s.offers, s.merges, s.busy, s.dropped_messages, s.bytes_sent,
                     s.bytes_bookkeeping}) {
    writer.put<uint64_t>(v);
  }
  writer.put<uint32_t>(static_cast<uint32_t>(s.steps_between.size()));
  for (uint64_t v : s.steps_between) writer.put<uint64_t>(v);
  writer.put<uint32_t>(static_cast<uint32_t>(s.dropped_peers.size()));
  for (int v : s.dropped_peers) writer.put<int32_t>(v);
  writer.put<uint32_t>(static_cast<uint32_t>(body.note.size()));
  writer.put_array<uint8_t>(body.note);
  return out;
}

ReportBody parse_report_body(std::span<const uint8_t> bytes) {
  ByteReader reader(bytes);
  ReportBody body;
  GossipStats& s = body.stats;
  for (uint64_t* v : {&s.steps, &s.offers, &s.merges, &s.busy, &s.dropped_messages, &s.bytes_sent,
                      &s.bytes_bookkeeping}) {
    *v = reader.get<uint64_t>("counter");
  }
  const uint32_t between = reader.get<uint32_t>("steps-between count");
  if (between > reader.remaining() / sizeof(uint64_t)) {
    throw PayloadError("a gossip report claims " + std::to_string(between) +
                       " exchange intervals in " + std::to_string(reader.remaining()) + " bytes");
  }
  s.steps_between.resize(between);
  for (auto& v : s.steps_between) v = reader.get<uint64_t>("steps between exchanges");
  const uint32_t dropped = reader.get<uint32_t>("dropped-peer count");
  if (dropped > reader.remaining() / sizeof(int32_t)) {
    throw PayloadError("a gossip report claims " + std::to_string(dropped) + " dropped peers in " +
                       std::to_string(reader.remaining()) + " bytes");
  }
  s.dropped_peers.resize(dropped);
  for (auto& v : s.dropped_peers) v = reader.get<int32_t>("dropped peer");
  const uint32_t note = reader.get<uint32_t>("note length");
  const auto text = reader.get_bytes(note, "note");
  body.note.assign(text.begin(), text.end());
  reader.expect_end("gossip report");
  return body;
}

}  // namespace gradwire::strategy::gossip
