// Timeline: what each thread of a rank spent its time on, as Chrome trace-event JSON
// (https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU;
// Perfetto and chrome://tracing open it).
//
// One process-wide Timeline, off until enable(rank). Code marks its work with
//   { TimelineSpan span("backward", "compute"); ... }
// which costs two clock reads and one append under a mutex when recording, and one
// relaxed load when not. Events are complete spans ("ph":"X") on the thread that made
// them, named by name_thread(); pid is the rank. Times are microseconds since the
// origin set by set_origin() (the trainer sets it right after a barrier, so ranks on
// different hosts line up to within that barrier's skew).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace gradwire {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  static Timeline& global();

  void enable(int rank);
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void set_origin(Clock::time_point origin);
  // Names the calling thread in the trace ("training", "exchange").
  void name_thread(const std::string& name);

  // A span of work on the calling thread. `args_json` is a JSON object or empty.
  void record(const char* name, const char* category, Clock::time_point start,
              Clock::time_point end, const std::string& args_json = {});

  // The events recorded so far, as comma-separated JSON objects (the body of a
  // "traceEvents" array), thread names included.
  std::string events_json() const;
  size_t event_count() const;
  // Off, and nothing recorded (for tests, which share one process-wide timeline).
  void reset();

  // A whole trace from the events of every rank (events_json() of each).
  static std::string trace_json(const std::vector<std::string>& events_per_rank);

 private:
  struct Event {
    const char* name;
    const char* category;
    int64_t start_us, duration_us;
    uint32_t thread;
    std::string args;
  };
  uint32_t thread_id();  // small per-thread numbers, in order of first use

  std::atomic<bool> enabled_{false};
  int rank_ = 0;
  Clock::time_point origin_ = Clock::now();
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::vector<std::string> thread_names_;  // by thread id
  std::atomic<uint32_t> next_thread_{0};
};

// Records [construction, destruction) on the calling thread when the timeline is on.
class TimelineSpan {
 public:
  TimelineSpan(const char* name, const char* category)
      : name_(name), category_(category), on_(Timeline::global().enabled()) {
    if (on_) start_ = Timeline::Clock::now();
  }
  ~TimelineSpan() {
    if (on_) Timeline::global().record(name_, category_, start_, Timeline::Clock::now(), args_);
  }
  TimelineSpan(const TimelineSpan&) = delete;
  TimelineSpan& operator=(const TimelineSpan&) = delete;
  // Attached to the span when it ends (a JSON object, e.g. {"bucket":3,"bytes":1024}).
  void set_args(std::string args_json) { args_ = std::move(args_json); }
  bool on() const { return on_; }

 private:
  const char* name_;
  const char* category_;
  bool on_;
  Timeline::Clock::time_point start_;
  std::string args_;
};

}  // namespace gradwire
