#include "gradwire/strategy/ps/protocol.h"

#include <sstream>

#include "gradwire/core/error.h"

namespace gradwire::strategy::ps {
namespace {

// Refuses a count whose elements cannot fit in what is left (each takes at least
// `min_bytes`), so a corrupt count never makes us allocate gigabytes.
uint32_t get_count(ByteReader& reader, size_t min_bytes, const char* field) {
  const uint32_t n = reader.get<uint32_t>(field);
  if (min_bytes > 0 && n > reader.remaining() / min_bytes) {
    throw PayloadError(std::string("parameter-server message: ") + field + " " + std::to_string(n) +
                       " cannot fit in the " + std::to_string(reader.remaining()) + " bytes left");
  }
  return n;
}

void put_bytes(ByteWriter& writer, std::span<const uint8_t> bytes) {
  writer.put<uint32_t>(static_cast<uint32_t>(bytes.size()));
  writer.put_array<uint8_t>(bytes);
}

Bytes get_bytes(ByteReader& reader, const char* field) {
  const uint32_t n = reader.get<uint32_t>(field);
  auto view = reader.get_bytes(n, field);
  return Bytes(view.begin(), view.end());
}

void put_slices(ByteWriter& writer, const std::vector<SlicePayload>& slices) {
  writer.put<uint32_t>(static_cast<uint32_t>(slices.size()));
  for (const auto& s : slices) {
    writer.put<uint32_t>(s.id);
    put_bytes(writer, s.payload);
  }
}

std::vector<SlicePayload> get_slices(ByteReader& reader) {
  std::vector<SlicePayload> slices(get_count(reader, 8, "slice count"));
  for (auto& s : slices) {
    s.id = reader.get<uint32_t>("slice id");
    s.payload = get_bytes(reader, "slice payload");
  }
  return slices;
}

void put_weights(ByteWriter& writer, const WeightsMessage& m) {
  writer.put<uint64_t>(m.version);
  writer.put<uint8_t>(m.delta ? 1 : 0);
  writer.put<uint64_t>(m.progress.samples);
  writer.put<double>(m.progress.loss_sum);
  writer.put<uint64_t>(m.progress.bytes_sent);
  writer.put<uint64_t>(m.progress.bytes_dense);
  writer.put<uint64_t>(m.progress.bytes_received);
  writer.put<uint32_t>(m.progress.live_workers);
  writer.put<uint8_t>(m.progress.done ? 1 : 0);
  put_slices(writer, m.weights);
}

bool get_flag(ByteReader& reader, const char* field) {
  const uint8_t v = reader.get<uint8_t>(field);
  if (v > 1)
    throw PayloadError(std::string("parameter-server message: ") + field + " is " +
                       std::to_string(v) + ", not 0 or 1");
  return v == 1;
}

WeightsMessage get_weights(ByteReader& reader) {
  WeightsMessage m;
  m.version = reader.get<uint64_t>("version");
  m.delta = get_flag(reader, "delta flag");
  m.progress.samples = reader.get<uint64_t>("progress samples");
  m.progress.loss_sum = reader.get<double>("progress loss");
  m.progress.bytes_sent = reader.get<uint64_t>("progress bytes sent");
  m.progress.bytes_dense = reader.get<uint64_t>("progress bytes dense");
  m.progress.bytes_received = reader.get<uint64_t>("progress bytes received");
  m.progress.live_workers = reader.get<uint32_t>("live workers");
  m.progress.done = get_flag(reader, "done flag");
  m.weights = get_slices(reader);
  return m;
}

Bytes start(const MessageHeader& header, MessageType type) {
  Bytes out;
  ByteWriter writer(out);
  MessageHeader h = header;
  h.type = type;
  h.write(writer);
  return out;
}

}  // namespace

void put_stats(ByteWriter& writer, const WorkerStats& s) {
  writer.put<uint64_t>(s.samples);
  writer.put<double>(s.loss_sum);
  writer.put<uint64_t>(s.bytes_sent);
  writer.put<uint64_t>(s.bytes_dense);
  writer.put<uint64_t>(s.bytes_received);
}

WorkerStats get_stats(ByteReader& reader) {
  WorkerStats s;
  s.samples = reader.get<uint64_t>("samples");
  s.loss_sum = reader.get<double>("loss sum");
  s.bytes_sent = reader.get<uint64_t>("bytes sent");
  s.bytes_dense = reader.get<uint64_t>("bytes dense");
  s.bytes_received = reader.get<uint64_t>("bytes received");
  return s;
}

const char* message_type_name(MessageType type) {
  switch (type) {
    case MessageType::kHello:
      return "hello";
    case MessageType::kPush:
      return "push";
    case MessageType::kBye:
      return "bye";
    case MessageType::kWeights:
      return "weights";
    case MessageType::kFinal:
      return "final";
    case MessageType::kError:
      return "error";
  }
  return "unknown";
}

bool SliceDescription::operator==(const SliceDescription& o) const {
  return id == o.id && info.name == o.info.name && info.shape == o.info.shape &&
         info.kind == o.info.kind && codec == o.codec;
}

void MessageHeader::write(ByteWriter& writer) const {
  writer.put<uint32_t>(kMagic);
  writer.put<uint8_t>(kVersion);
  writer.put<uint8_t>(static_cast<uint8_t>(type));
  writer.put<uint16_t>(0);
  writer.put<uint64_t>(token);
  writer.put<uint32_t>(sender);
}

MessageHeader MessageHeader::read(ByteReader& reader) {
  if (reader.get<uint32_t>("magic") != kMagic) {
    throw PayloadError("not a gradwire parameter-server message (bad magic)");
  }
  const uint8_t version = reader.get<uint8_t>("format version");
  if (version != kVersion) {
    throw PayloadError("parameter-server message format " + std::to_string(version) +
                       "; this build speaks " + std::to_string(kVersion));
  }
  MessageHeader h;
  const uint8_t type = reader.get<uint8_t>("type");
  if (type < 1 || type > 6) throw PayloadError("unknown message type " + std::to_string(type));
  h.type = static_cast<MessageType>(type);
  if (reader.get<uint16_t>("reserved") != 0) throw PayloadError("reserved header bits set");
  h.token = reader.get<uint64_t>("token");
  h.sender = reader.get<uint32_t>("sender");
  return h;
}

Bytes encode(const MessageHeader& header, const HelloMessage& m) {
  Bytes out = start(header, MessageType::kHello);
  ByteWriter writer(out);
  writer.put_string(m.config);
  writer.put<uint32_t>(static_cast<uint32_t>(m.slices.size()));
  for (const auto& s : m.slices) {
    writer.put<uint32_t>(s.id);
    writer.put_string(s.info.name);
    writer.put<uint32_t>(static_cast<uint32_t>(s.info.shape.size()));
    for (int64_t d : s.info.shape) writer.put<int64_t>(d);
    writer.put<uint8_t>(static_cast<uint8_t>(s.info.kind));
    writer.put_string(s.codec);
  }
  writer.put<uint8_t>(m.has_initial ? 1 : 0);
  for (const auto& w : m.initial) {
    writer.put<uint32_t>(static_cast<uint32_t>(w.size()));
    writer.put_array<float>(w);
  }
  return out;
}

HelloMessage parse_hello(ByteReader& reader) {
  HelloMessage m;
  m.config = reader.get_string("config");
  m.slices.resize(get_count(reader, 17, "slice count"));
  for (auto& s : m.slices) {
    s.id = reader.get<uint32_t>("slice id");
    s.info.name = reader.get_string("slice name");
    s.info.shape.resize(get_count(reader, 8, "slice rank"));
    for (auto& d : s.info.shape) {
      d = reader.get<int64_t>("slice dimension");
      if (d < 0) throw PayloadError("slice '" + s.info.name + "' has a negative dimension");
    }
    const uint8_t kind = reader.get<uint8_t>("layer kind");
    if (kind > static_cast<uint8_t>(compress::LayerKind::kOther)) {
      throw PayloadError("slice '" + s.info.name + "': unknown layer kind " + std::to_string(kind));
    }
    s.info.kind = static_cast<compress::LayerKind>(kind);
    s.codec = reader.get_string("slice codec");
  }
  m.has_initial = get_flag(reader, "initial weights flag");
  if (m.has_initial) {
    m.initial.resize(m.slices.size());
    for (size_t i = 0; i < m.slices.size(); ++i) {
      const uint32_t n = get_count(reader, sizeof(float), "initial weight count");
      if (n != m.slices[i].info.numel()) {
        throw PayloadError("initial weights of slice '" + m.slices[i].info.name +
                           "': " + std::to_string(n) + " values for " +
                           std::to_string(m.slices[i].info.numel()) + " elements");
      }
      m.initial[i].resize(n);
      reader.get_array<float>(std::span<float>(m.initial[i]), "initial weights");
    }
  }
  reader.expect_end("hello message");
  return m;
}

Bytes encode(const MessageHeader& header, const PushMessage& m) {
  Bytes out = start(header, MessageType::kPush);
  ByteWriter writer(out);
  writer.put<uint64_t>(m.clock);
  writer.put<uint64_t>(m.base_version);
  writer.put<double>(m.lr);
  put_stats(writer, m.stats);
  put_slices(writer, m.gradients);
  return out;
}

PushMessage parse_push(ByteReader& reader) {
  PushMessage m;
  m.clock = reader.get<uint64_t>("clock");
  m.base_version = reader.get<uint64_t>("base version");
  m.lr = reader.get<double>("learning rate");
  m.stats = get_stats(reader);
  m.gradients = get_slices(reader);
  reader.expect_end("push message");
  return m;
}

Bytes encode(const MessageHeader& header, const ByeMessage& m) {
  Bytes out = start(header, MessageType::kBye);
  ByteWriter writer(out);
  put_stats(writer, m.stats);
  writer.put_string(m.checksum);
  writer.put<uint8_t>(m.wants_final ? 1 : 0);
  return out;
}

ByeMessage parse_bye(ByteReader& reader) {
  ByeMessage m;
  m.stats = get_stats(reader);
  m.checksum = reader.get_string("checksum");
  const uint8_t wants_final = reader.get<uint8_t>("wants-final flag");
  if (wants_final > 1) {
    throw PayloadError("bye message: wants-final flag " + std::to_string(wants_final) +
                       " (0 or 1)");
  }
  m.wants_final = wants_final == 1;
  reader.expect_end("bye message");
  return m;
}

Bytes encode(const MessageHeader& header, const WeightsMessage& m) {
  Bytes out = start(header, MessageType::kWeights);
  ByteWriter writer(out);
  put_weights(writer, m);
  return out;
}

WeightsMessage parse_weights(ByteReader& reader) {
  WeightsMessage m = get_weights(reader);
  reader.expect_end("weights message");
  return m;
}

Bytes encode(const MessageHeader& header, const FinalMessage& m) {
  Bytes out = start(header, MessageType::kFinal);
  ByteWriter writer(out);
  put_weights(writer, m.weights);
  writer.put<uint32_t>(static_cast<uint32_t>(m.staleness_histogram.size()));
  writer.put_array<uint64_t>(m.staleness_histogram);
  writer.put<uint32_t>(static_cast<uint32_t>(m.checksums.size()));
  for (const auto& c : m.checksums) writer.put_string(c);
  return out;
}

FinalMessage parse_final(ByteReader& reader) {
  FinalMessage m;
  m.weights = get_weights(reader);
  m.staleness_histogram.resize(get_count(reader, sizeof(uint64_t), "histogram size"));
  reader.get_array<uint64_t>(std::span<uint64_t>(m.staleness_histogram), "histogram");
  m.checksums.resize(get_count(reader, 4, "checksum count"));
  for (auto& c : m.checksums) c = reader.get_string("checksum");
  reader.expect_end("final message");
  return m;
}

Bytes encode_error(const MessageHeader& header, const std::string& text) {
  Bytes out = start(header, MessageType::kError);
  ByteWriter writer(out);
  writer.put_string(text);
  return out;
}

std::string parse_error(ByteReader& reader) {
  std::string text = reader.get_string("error text");
  reader.expect_end("error message");
  return text;
}

std::string hello_difference(const std::string& job_config,
                             std::span<const SliceDescription> job_slices,
                             const HelloMessage& hello) {
  if (hello.config != job_config) {
    std::istringstream a(job_config), b(hello.config);
    std::string la, lb;
    while (std::getline(a, la) && std::getline(b, lb)) {
      if (la != lb) return "'" + lb + "' where the job has '" + la + "'";
    }
    return "a different configuration";
  }
  if (hello.slices.size() != job_slices.size()) {
    return std::to_string(hello.slices.size()) + " slices where the job has " +
           std::to_string(job_slices.size());
  }
  for (size_t i = 0; i < job_slices.size(); ++i) {
    if (!(hello.slices[i] == job_slices[i])) {
      const auto& d = hello.slices[i];
      return "slice " + std::to_string(d.id) + " '" + d.info.name + "' with codec '" + d.codec +
             "' where the job has '" + job_slices[i].info.name + "' with codec '" +
             job_slices[i].codec + "'";
    }
  }
  return "";
}

}  // namespace gradwire::strategy::ps
