#include "gradwire/strategy/ps/server_slice.h"

#include <algorithm>

#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"

namespace gradwire::strategy::ps {

std::vector<ServerSlice> make_server_slices(std::span<const SliceDescription> descriptions,
                                            const std::string& pull_codec) {
  std::vector<ServerSlice> slices(descriptions.size());
  for (size_t i = 0; i < descriptions.size(); ++i) {
    auto& s = slices[i];
    s.description = descriptions[i];
    s.decoder = compress::create_codec(s.description.codec, s.description.info);
    s.pull_codec = compress::create_codec(pull_codec, s.description.info);
    s.whole_codec = compress::create_codec("none", s.description.info);
    s.weights.assign(s.description.info.numel(), 0.0f);
  }
  return slices;
}

std::vector<SlicePayload> encode_pull(std::span<ServerSlice> slices, PullForm form,
                                      std::vector<std::vector<float>>* held) {
  if (form == PullForm::kDelta && held == nullptr) {
    throw Error("encode_pull: a delta pull needs the worker's copy of the weights");
  }
  if (held != nullptr) {
    held->resize(slices.size());
    for (size_t i = 0; i < slices.size(); ++i) {
      if ((*held)[i].size() != slices[i].weights.size()) {
        (*held)[i].assign(slices[i].weights.size(), 0.0f);
      }
    }
  }
  std::vector<SlicePayload> out(slices.size());
  std::vector<float> delta;
  for (size_t i = 0; i < slices.size(); ++i) {
    auto& s = slices[i];
    out[i].id = s.description.id;
    switch (form) {
      case PullForm::kWhole:
        s.whole_codec->encode(s.weights, out[i].payload);
        if (held != nullptr) (*held)[i] = s.weights;
        break;
      case PullForm::kWeights:
        s.pull_codec->encode(s.weights, out[i].payload);
        if (held != nullptr) {
          std::fill((*held)[i].begin(), (*held)[i].end(), 0.0f);
          s.pull_codec->decode_add(out[i].payload, (*held)[i]);
        }
        break;
      case PullForm::kDelta: {
        auto& copy = (*held)[i];
        delta.resize(s.weights.size());
        for (size_t j = 0; j < delta.size(); ++j) delta[j] = s.weights[j] - copy[j];
        s.pull_codec->encode(delta, out[i].payload);
        s.pull_codec->decode_add(out[i].payload, copy);
        break;
      }
    }
  }
  return out;
}

}  // namespace gradwire::strategy::ps
