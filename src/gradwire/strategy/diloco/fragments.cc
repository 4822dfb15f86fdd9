#include "gradwire/strategy/diloco/fragments.h"

#include <string>

#include "gradwire/core/error.h"

namespace gradwire::strategy::diloco {

std::vector<std::vector<size_t>> split_fragments(std::span<const size_t> numels, int fragments) {
  if (fragments < 1 || static_cast<size_t>(fragments) > numels.size()) {
    throw ConfigError("DiLoCo: " + std::to_string(fragments) + " fragments of a model of " +
                      std::to_string(numels.size()) + " tensors; fragments must be 1 to " +
                      std::to_string(numels.size()));
  }
  size_t total = 0;
  for (size_t n : numels) total += n;
  const auto f_count = static_cast<size_t>(fragments);
  std::vector<std::vector<size_t>> out(f_count);
  size_t done = 0;  // elements in the fragments before the current one
  size_t f = 0;
  for (size_t i = 0; i < numels.size(); ++i) {
    // The next fragment starts with this tensor when this one's end is nearer its share
    // without the tensor than with it (fragments 0..f hold (f + 1)/F of the elements), or
    // when each fragment still to come needs one of the tensors left.
    const size_t fragments_after = f_count - f - 1;
    const bool share_done = (2 * done + numels[i]) * f_count >= 2 * total * (f + 1);
    if (!out[f].empty() && fragments_after > 0 &&
        (share_done || numels.size() - i == fragments_after)) {
      ++f;
    }
    out[f].push_back(i);
    done += numels[i];
  }
  return out;
}

void Schedule::check() const {
  if (fragments < 1 || inner_steps < static_cast<uint64_t>(fragments)) {
    throw ConfigError("DiLoCo: " + std::to_string(inner_steps) + " inner steps for " +
                      std::to_string(fragments) +
                      " fragments; each fragment needs a step of its own in a round");
  }
  const uint64_t spacing = inner_steps / static_cast<uint64_t>(fragments);
  if (delay > spacing) {
    throw ConfigError("DiLoCo: a fragment delay of " + std::to_string(delay) +
                      " inner steps exceeds the " + std::to_string(spacing) +
                      " between two fragments' exchanges (H / F); at most one exchange is in "
                      "flight");
  }
}

uint64_t Schedule::offset(int fragment) const {
  return (static_cast<uint64_t>(fragment) + 1) * inner_steps / static_cast<uint64_t>(fragments);
}

std::optional<int> Schedule::sent_at(uint64_t t) const {
  if (t <= origin) return std::nullopt;
  const uint64_t in_round = (t - origin) % inner_steps;
  const uint64_t position = in_round == 0 ? inner_steps : in_round;
  for (int f = 0; f < fragments; ++f) {
    if (offset(f) == position) return f;
  }
  return std::nullopt;
}

}  // namespace gradwire::strategy::diloco
