#include "gradwire/strategy/ps/server_checkpoint.h"

#include "gradwire/core/atomic_file.h"
#include "gradwire/core/error.h"

namespace gradwire::strategy::ps {
namespace {

constexpr uint32_t kLayout = 1;

}  // namespace

Bytes encode_server_checkpoint(const ServerCheckpoint& checkpoint) {
  Bytes body;
  ByteWriter writer(body);
  writer.put<uint32_t>(kLayout);
  writer.put<uint64_t>(checkpoint.version);
  put_stats(writer, checkpoint.progress);
  writer.put<uint32_t>(static_cast<uint32_t>(checkpoint.slices.size()));
  for (const auto& s : checkpoint.slices) {
    writer.put_string(s.name);
    writer.put_string(s.codec);
    writer.put<uint32_t>(static_cast<uint32_t>(s.weights.size()));
    writer.put_array<float>(s.weights);
  }
  writer.put<uint64_t>(checkpoint.updater_state.size());
  writer.put_array<uint8_t>(checkpoint.updater_state);
  writer.put<uint32_t>(static_cast<uint32_t>(checkpoint.staleness_counts.size()));
  writer.put_array<uint64_t>(checkpoint.staleness_counts);
  return frame_checkpoint(body);
}

ServerCheckpoint decode_server_checkpoint(std::span<const uint8_t> file) {
  const Bytes body = unframe_checkpoint(file);
  ByteReader reader(body);
  if (reader.get<uint32_t>("checkpoint layout") != kLayout) {
    throw PayloadError("unknown checkpoint layout");
  }
  ServerCheckpoint c;
  c.version = reader.get<uint64_t>("version");
  c.progress = get_stats(reader);
  const uint32_t n = reader.get<uint32_t>("slice count");
  if (n > reader.remaining() / 12) {  // a slice takes at least its three u32 sizes
    throw PayloadError("slice count " + std::to_string(n) + " truncated");
  }
  c.slices.resize(n);
  for (auto& s : c.slices) {
    s.name = reader.get_string("slice name");
    s.codec = reader.get_string("slice codec");
    const uint32_t count = reader.get<uint32_t>("weight count");
    if (count > reader.remaining() / sizeof(float)) {
      throw PayloadError("slice '" + s.name + "': " + std::to_string(count) + " weights truncated");
    }
    s.weights.resize(count);
    reader.get_array<float>(std::span<float>(s.weights), "weights");
  }
  const uint64_t state_size = reader.get<uint64_t>("updater state size");
  if (state_size > reader.remaining()) throw PayloadError("truncated updater state");
  const auto state = reader.get_bytes(static_cast<size_t>(state_size), "updater state");
  c.updater_state.assign(state.begin(), state.end());
  const uint32_t counts = reader.get<uint32_t>("histogram size");
  if (counts > reader.remaining() / sizeof(uint64_t)) throw PayloadError("truncated histogram");
  c.staleness_counts.resize(counts);
  reader.get_array<uint64_t>(std::span<uint64_t>(c.staleness_counts), "histogram");
  reader.expect_end("checkpoint");
  return c;
}

void check_checkpoint_fits(const ServerCheckpoint& checkpoint,
                           std::span<const SliceDescription> job, const std::string& path) {
  if (checkpoint.slices.size() != job.size()) {
    throw MismatchError(path + " holds " + std::to_string(checkpoint.slices.size()) +
                        " slices; this job has " + std::to_string(job.size()));
  }
  for (size_t i = 0; i < job.size(); ++i) {
    const auto& have = checkpoint.slices[i];
    const auto& want = job[i];
    if (have.name != want.info.name || have.codec != want.codec) {
      throw MismatchError(path + ": slice " + std::to_string(i) + " is '" + have.name + "' (" +
                          have.codec + "); this job has '" + want.info.name + "' (" + want.codec +
                          ")");
    }
    if (have.weights.size() != want.info.numel()) {
      throw MismatchError(path + ": slice '" + have.name + "' size differs");
    }
  }
}

}  // namespace gradwire::strategy::ps
