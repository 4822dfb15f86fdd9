// DiLoCo's options, as a program sets them (DistributedOptions::diloco) and as the
// strategy runs them (strategy/diloco/diloco_strategy.h adds the outer codec and the link
// model): one definition for both. Torch-free.
#pragma once

#include <cstdint>

namespace gradwire {

// The defaults are what issue 45's tuning seeds chose (docs/RESULTS.md, "Choosing DiLoCo's
// settings"): auto H with two streamed fragments and plain averaging of the models (outer
// rate 1, no momentum), which reached the target sooner and ended higher than the papers'
// Nesterov 0.7/0.9 with a warm-up on cnn-wide at 10 Mbit. `gradwire train`, bench e2e's
// diloco configurations and gradwire.DiLoCo all take them from here.
struct DiLoCoOptions {
  // H. 0: auto, which times the first steps and picks the smallest H whose exchanges hide
  // under the inner steps (fragments > 1 or delay > 0: it then sets the delay too), or,
  // without streaming, whose exchange costs at most 5% of a round; over the link of
  // DistributedOptions::link_bits_per_s; at least 10 (F for the sparseloco codec).
  uint64_t inner_steps = 0;
  // The outer step theta_g <- theta_g - outer_lr (Delta + mu m) (Nesterov) or
  // - outer_lr m (heavy ball), m <- mu m + Delta; rate 1 without momentum sets theta_g to
  // the ranks' mean model. The papers: 0.7, 0.9, Nesterov.
  double outer_lr = 1.0;
  double outer_momentum = 0.0;
  bool nesterov = true;
  // Outer steps over which the outer learning rate ramps up linearly: a fragment's k-th
  // outer step (k = 0, 1, ...) takes outer_lr min(1, (k + 1) / outer_warmup). 0: none.
  uint64_t outer_warmup = 0;
  int fragments = 2;   // F
  uint64_t delay = 0;  // tau: at most inner_steps / fragments (auto sets it when streaming)
};

}  // namespace gradwire
