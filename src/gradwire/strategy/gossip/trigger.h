// When a gossip worker exchanges its model (ALGORITHMS.md 7).
//
//   every                  after every local step
//   period:K               after every K-th local step
//   adaptive[:calibration=200,kappa=10,t_max=64,ema=0.05]
//     Keeps x_ref, the model right after the last exchange, and exchanges when the model
//     has moved far enough from it:
//         drift = ||x - x_ref|| / (||x_ref|| + eps)  >=  theta,  or after t_max steps.
//     theta comes from calibration: for the first `calibration` steps the worker exchanges
//     after every step and tracks d_bar, an exponential moving average (weight `ema`) of
//     the per-step relative change ||x_t - x_{t-1}|| / (||x_{t-1}|| + eps); then
//     theta = kappa d_bar. A learning-rate change starts a new calibration, since it
//     rescales every step.
// Ho, Wu and Liu (CCGrid'18). As training settles, steps get smaller against the
// calibrated theta, so exchanges get rarer; after a learning-rate drop the recalibrated
// theta makes them frequent again.
#pragma once

#include <cstddef>
#include <string>

namespace gradwire::strategy::gossip {

class Trigger {
 public:
  // Throws ConfigError for unknown triggers or keys and out-of-range values.
  static Trigger parse(const std::string& spec);

  // After a local step. `step_change` is ||x_t - x_{t-1}|| / (||x_{t-1}|| + eps) and
  // `drift` is ||x_t - x_ref|| / (||x_ref|| + eps); triggers other than adaptive ignore
  // both. Returns whether to exchange now; if so, the caller exchanges and calls
  // exchanged() (resetting x_ref), or retries after a later step if the peer was busy.
  bool after_step(double step_change, double drift);
  void exchanged();
  void learning_rate_changed();

  // adaptive: whether the next steps calibrate, and the threshold (0 while calibrating).
  bool calibrating() const { return calibrated_steps_ < calibration_; }
  double theta() const { return calibrating() ? 0.0 : kappa_ * d_bar_; }
  bool adaptive() const { return kind_ == Kind::kAdaptive; }
  // "every", "period:k=4", "adaptive:calibration=200,ema=0.05,kappa=10,t_max=64".
  const std::string& canonical() const { return canonical_; }

 private:
  enum class Kind { kEvery, kPeriod, kAdaptive };
  Kind kind_ = Kind::kEvery;
  size_t period_ = 1;
  size_t calibration_ = 200;
  double kappa_ = 10;
  size_t t_max_ = 64;
  double ema_ = 0.05;
  std::string canonical_;

  size_t since_exchange_ = 0;    // local steps since the last exchange
  size_t calibrated_steps_ = 0;  // steps of the current calibration so far
  double d_bar_ = 0;
  bool have_d_bar_ = false;
};

}  // namespace gradwire::strategy::gossip
