// A parameter server's checkpoint: what one server holds of the job, in a file framed by
// frame_checkpoint (magic, version, length, CRC).
//
// Layout of the payload (little-endian): u32 layout (1), u64 version, the job's progress
// as WorkerStats, u32 slice count, per slice its name, codec, u32 weight count and the
// weights (f32), then u64 size and the updater's state, u32 size and the staleness
// histogram (u64 counts).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradwire/core/bytes.h"
#include "gradwire/strategy/ps/protocol.h"

namespace gradwire::strategy::ps {

struct ServerCheckpoint {
  struct Slice {
    std::string name;   // the slice's own name (SliceDescription::info.name)
    std::string codec;  // the workers' push codec for it
    std::vector<float> weights;
  };
  uint64_t version = 0;  // updates applied
  WorkerStats progress;  // over all workers
  std::vector<Slice> slices;
  Bytes updater_state;  // Updater::save
  std::vector<uint64_t> staleness_counts;
};

// The whole file, framed.
Bytes encode_server_checkpoint(const ServerCheckpoint& checkpoint);

// The file back; PayloadError for a bad frame, an unknown layout, anything truncated or
// left over. Sizes are checked against the bytes present before anything is allocated.
ServerCheckpoint decode_server_checkpoint(std::span<const uint8_t> file);

// MismatchError, naming `path`, unless the checkpoint holds exactly the job's slices: the
// same count, and per slice the same name, codec and size.
void check_checkpoint_fits(const ServerCheckpoint& checkpoint,
                           std::span<const SliceDescription> job, const std::string& path);

}  // namespace gradwire::strategy::ps
