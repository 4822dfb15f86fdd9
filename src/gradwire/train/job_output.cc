#include "gradwire/train/job_output.h"

#include <cstdio>
#include <thread>

#include "gradwire/core/atomic_file.h"
#include "gradwire/core/error.h"
#include "gradwire/train/recipe.h"

namespace gradwire::train {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// FNV-1a over the raw bytes of every parameter: equal strings mean bitwise-equal models.
std::string parameter_checksum(const torch::nn::Module& model) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (const auto& p : unique_parameters(model)) {
    const auto t = p.contiguous();
    const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
    for (size_t i = 0, n = t.numel() * t.element_size(); i < n; ++i) {
      hash = (hash ^ bytes[i]) * 0x100000001b3ULL;
    }
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

std::string parameter_crc32(const torch::nn::Module& model) {
  std::vector<uint8_t> all;
  for (const auto& p : unique_parameters(model)) {
    const auto t = p.contiguous();
    const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
    all.insert(all.end(), bytes, bytes + t.numel() * t.element_size());
  }
  char text[9];
  std::snprintf(text, sizeof(text), "%08x", static_cast<unsigned>(crc32(all)));
  return text;
}

void TrainingClock::pause() {
  if (!running_) return;
  banked_s_ += seconds_since(started_);
  running_ = false;
}

void TrainingClock::resume() {
  if (running_) return;
  started_ = Clock::now();
  running_ = true;
}

double TrainingClock::seconds() const {
  return banked_s_ + (running_ ? seconds_since(started_) : 0.0);
}

int idle_machine_threads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

MetricsFile::MetricsFile(const std::string& path, bool append) {
  if (path.empty()) return;
  out_.open(path, std::ios::out | (append ? std::ios::app : std::ios::trunc));
  if (!out_) throw SystemError(errno_message("cannot write metrics file " + path, errno));
  path_ = path;
}
void MetricsFile::write(const nlohmann::json& line) {
  if (path_.empty()) return;
  out_ << line.dump() << '\n';
  out_.flush();
  if (!out_) throw SystemError(errno_message("writing metrics file " + path_ + " failed", errno));
}

void print_progress(ProgressStyle style, int epoch, int epochs, size_t step, size_t steps,
                    double loss, double samples_per_s) {
  if (style == ProgressStyle::kNone) return;
  const int percent = static_cast<int>(100 * step / std::max<size_t>(1, steps));
  if (style == ProgressStyle::kTerminal) {
    constexpr int kWidth = 24;
    const int filled = percent * kWidth / 100;
    std::printf("epoch %d/%d [%s%s] %3d%% loss %.4f %.0f samples/s\r", epoch, epochs,
                std::string(filled, '=').c_str(), std::string(kWidth - filled, ' ').c_str(),
                percent, loss, samples_per_s);
  } else {
    std::printf("epoch %d/%d %3d%% loss %.4f %.0f samples/s\n", epoch, epochs, percent, loss,
                samples_per_s);
  }
  std::fflush(stdout);
}

}  // namespace gradwire::train
