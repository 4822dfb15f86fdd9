// DiLoCo's options, as a program sets them (DistributedOptions::diloco) and as the
// strategy runs them (strategy/diloco/diloco_strategy.h adds the outer codec and the link
// model): one definition for both. Torch-free.
#pragma once

#include <cstdint>

namespace gradwire {

struct DiLoCoOptions {
  // H. 0: auto, which times the first steps and picks the smallest H whose exchanges hide
  // under the inner steps (fragments > 1 or delay > 0: it then sets the delay too), or,
  // without streaming, whose exchange costs at most 5% of a round; over the link of
  // DistributedOptions::link_bits_per_s.
  uint64_t inner_steps = 100;
  double outer_lr = 0.7;
  double outer_momentum = 0.9;
  bool nesterov = true;
  // Outer steps over which the outer learning rate ramps up linearly: a fragment's k-th
  // outer step (k = 0, 1, ...) takes outer_lr min(1, (k + 1) / outer_warmup). 0: none.
  uint64_t outer_warmup = 0;
  int fragments = 1;   // F
  uint64_t delay = 0;  // tau: at most inner_steps / fragments (auto sets it when streaming)
};

}  // namespace gradwire
