// Accordion's detector of critical regimes (Agarwal et al., "Adaptive Gradient
// Communication via Critical Learning Regime Identification", MLSys'21; ALGORITHMS.md 9).
//
// Some stretches of training are critical: what is lost to compression there is not made
// up later (the start of training, the steps after a learning-rate change). Accordion finds
// them from how fast the gradient's norm changes. With N_i the mean norm of the
// gradient over window i (`window` steps),
//
//     window i+1 is critical  <=>  |N_{i-1} - N_i| / N_{i-1} >= eta      (eta = 0.5)
//
// Windows 0 and 1 are critical (training starts in one, and the first comparison needs two
// windows) unless the detector is made with start_critical false (auto's, which has a dense
// start of its own: adaptive_options.h); restart() (a learning-rate change) makes the
// detector start over, critical. Accordion
// compares epochs; a window of steps lets a library that does not know epochs do the same.
//
// Deterministic: the same trace of norms gives the same regimes on every rank.
#pragma once

#include <cstddef>
#include <optional>

#include "gradwire/core/bytes.h"

namespace gradwire::strategy {

class RegimeDetector {
 public:
  // Throws ConfigError unless window >= 1 and eta > 0.
  RegimeDetector(size_t window, double eta, bool start_critical = true);

  // One step's gradient norm. Returns true when this step ended a window (critical() may
  // have changed).
  bool observe(double norm);
  // Whether the next step is in a critical regime.
  bool critical() const { return critical_; }
  // Critical again, as at the start of training, with no window to compare against.
  void restart();

  // The relative change |N_{i-1} - N_i| / N_{i-1} of the last comparison (nullopt before
  // the first one), for the log.
  std::optional<double> last_change() const { return last_change_; }
  size_t window() const { return window_; }
  double eta() const { return eta_; }

  // Checkpoints: the window in progress and the last comparison (not window and eta,
  // which come from the options).
  void save_state(ByteWriter& out) const;
  void load_state(ByteReader& in);

 private:
  size_t window_;
  double eta_;
  size_t in_window_ = 0;
  double sum_ = 0;
  std::optional<double> previous_;  // mean norm of the last complete window
  std::optional<double> last_change_;
  bool critical_ = true;
};

}  // namespace gradwire::strategy
