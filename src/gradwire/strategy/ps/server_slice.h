// A parameter server's shard of the model: per slice its weights and codecs, and the
// encoding of what a worker pulls.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradwire/compress/codec.h"
#include "gradwire/strategy/ps/protocol.h"

namespace gradwire::strategy::ps {

struct ServerSlice {
  SliceDescription description;
  std::unique_ptr<compress::Codec> decoder;      // the workers' push codec for this slice
  std::unique_ptr<compress::Codec> pull_codec;   // weights (or deltas) back to workers
  std::unique_ptr<compress::Codec> whole_codec;  // `none`: whole weights on first contact
  std::vector<float> weights;
  std::vector<float> sum;  // BSP: this clock's gradients, summed
};

// One slice per description, weights zero; ConfigError for a codec that cannot be built.
std::vector<ServerSlice> make_server_slices(std::span<const SliceDescription> descriptions,
                                            const std::string& pull_codec);

// What a pull carries per slice.
enum class PullForm {
  kWhole,    // the weights in f32 (`none`): first contact, and the chief's final answer
  kWeights,  // the weights through the pull codec
  kDelta,    // weights - held, through the pull codec
};

// Encodes every slice for one worker. `held`, when not null, is that worker's copy of the
// weights (one vector per slice, resized and zeroed here on first use), and is updated to
// what the worker holds after decoding the answer: kWhole copies the weights, kWeights
// and kDelta apply the decoded payload (a lossy pull codec leaves held != weights, and the
// next delta carries the difference). A delta needs `held`.
std::vector<SlicePayload> encode_pull(std::span<ServerSlice> slices, PullForm form,
                                      std::vector<std::vector<float>>* held);

}  // namespace gradwire::strategy::ps
