// What every training loop of the built-in job reports: parameter
// checksums, progress lines and the metrics file (JSON Lines, docs/ARCHITECTURE.md).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "gradwire/train/trainer.h"

namespace gradwire::train {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start);

// FNV-1a over the raw bytes of every parameter: equal strings mean bitwise-equal models.
std::string parameter_checksum(const torch::nn::Module& model);

// CRC-32 (zlib's) of the raw bytes of every parameter in registration order, as 8 hex
// digits: what the metrics' "initial_checksum" holds, and what bench/peers/ddp_peer.py
// computes with zlib.crc32, so a test can check both start from the same weights.
std::string parameter_crc32(const torch::nn::Module& model);

// A stopwatch that can be paused: training time without the evaluations.
class TrainingClock {
 public:
  TrainingClock() : started_(Clock::now()) {}
  void pause();
  void resume();
  double seconds() const;
  // Adds training time of an earlier attempt (a resumed job's clock goes on from there).
  void bank(double seconds) { banked_s_ += seconds; }

 private:
  Clock::time_point started_;
  double banked_s_ = 0;
  bool running_ = true;
};

// Every core of the machine: the threads for an evaluation while all other ranks wait.
int idle_machine_threads();

// A JSON Lines file, flushed per line; an empty path writes nothing.
class MetricsFile {
 public:
  // `append`: a resumed job adds to the file its first attempt began.
  explicit MetricsFile(const std::string& path, bool append = false);
  void write(const nlohmann::json& line);

 private:
  std::string path_;
  std::ofstream out_;
};

void print_progress(ProgressStyle style, int epoch, int epochs, size_t step, size_t steps,
                    double loss, double samples_per_s);

}  // namespace gradwire::train
