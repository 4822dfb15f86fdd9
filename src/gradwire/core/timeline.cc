#include "gradwire/core/timeline.h"

#include <cstdio>

namespace gradwire {
namespace {

// Names are code literals and thread names ours, but quote them properly anyway.
std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

Timeline& Timeline::global() {
  static Timeline timeline;
  return timeline;
}

void Timeline::enable(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  rank_ = rank;
  enabled_.store(true, std::memory_order_relaxed);
}

void Timeline::set_origin(Clock::time_point origin) {
  std::lock_guard<std::mutex> lock(mutex_);
  origin_ = origin;
}

uint32_t Timeline::thread_id() {
  thread_local uint32_t id = next_thread_.fetch_add(1);
  return id;
}

void Timeline::name_thread(const std::string& name) {
  const uint32_t id = thread_id();
  std::lock_guard<std::mutex> lock(mutex_);
  if (thread_names_.size() <= id) thread_names_.resize(id + 1);
  thread_names_[id] = name;
}

void Timeline::record(const char* name, const char* category, Clock::time_point start,
                      Clock::time_point end, const std::string& args_json) {
  if (!enabled()) return;
  const uint32_t thread = thread_id();
  std::lock_guard<std::mutex> lock(mutex_);
  const auto us = [&](Clock::time_point t) {
    return std::chrono::duration_cast<std::chrono::microseconds>(t - origin_).count();
  };
  events_.push_back({name, category, us(start), us(end) - us(start), thread, args_json});
}

void Timeline::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  enabled_.store(false, std::memory_order_relaxed);
  events_.clear();
  rank_ = 0;
  origin_ = Clock::now();
}

size_t Timeline::event_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

std::string Timeline::events_json() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  const std::string pid = std::to_string(rank_);
  const auto append = [&](const std::string& event) {
    if (!out.empty()) out += ",\n";
    out += event;
  };
  append("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + pid + ",\"args\":{\"name\":\"rank " +
         pid + "\"}}");
  for (size_t t = 0; t < thread_names_.size(); ++t) {
    if (thread_names_[t].empty()) continue;
    append("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":" +
           std::to_string(t) + ",\"args\":{\"name\":" + json_string(thread_names_[t]) + "}}");
  }
  for (const Event& e : events_) {
    append("{\"ph\":\"X\",\"name\":" + json_string(e.name) + ",\"cat\":" + json_string(e.category) +
           ",\"pid\":" + pid + ",\"tid\":" + std::to_string(e.thread) +
           ",\"ts\":" + std::to_string(e.start_us) + ",\"dur\":" + std::to_string(e.duration_us) +
           (e.args.empty() ? std::string() : ",\"args\":" + e.args) + "}");
  }
  return out;
}

std::string Timeline::trace_json(const std::vector<std::string>& events_per_rank) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  for (const auto& events : events_per_rank) {
    if (events.empty()) continue;
    if (!first) out += ",\n";
    out += events;
    first = false;
  }
  return out + "\n]}\n";
}

}  // namespace gradwire
