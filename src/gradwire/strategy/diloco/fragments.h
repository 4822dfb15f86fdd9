// DiLoCo's fragments and their schedule (Streaming DiLoCo, Douillard et al. 2025).
//
// The model's tensors, in registration order (by layer), are cut into F fragments of
// consecutive tensors holding about numel/F elements each. Each fragment is synchronized
// once every H inner steps, fragment f at the steps t (inner steps done, counted from 1)
// with t = t0 + offset_f (mod H), offset_f = floor((f + 1) H / F), t > t0: F = 1 is plain
// DiLoCo, every fragment at the round's end. Its exchange lands, and is merged, tau inner
// steps after it was sent; tau <= floor(H / F), so a fragment lands before (or as, merge
// first) the next one is sent and at most one exchange is ever in flight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace gradwire::strategy::diloco {

// The tensors of each fragment: F lists of consecutive indices, none empty. ConfigError
// when F is 0 or larger than the number of tensors.
std::vector<std::vector<size_t>> split_fragments(std::span<const size_t> numels, int fragments);

struct Schedule {
  uint64_t inner_steps = 0;  // H
  uint64_t delay = 0;        // tau
  int fragments = 1;         // F
  uint64_t origin = 0;       // t0: the step the first round counts from

  // ConfigError unless H >= F >= 1 and tau <= floor(H / F).
  void check() const;
  uint64_t offset(int fragment) const;
  // The fragment sent after inner step t, if any.
  std::optional<int> sent_at(uint64_t t) const;
};

}  // namespace gradwire::strategy::diloco
