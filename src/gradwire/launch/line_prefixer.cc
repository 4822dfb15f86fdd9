#include "gradwire/launch/line_prefixer.h"

#include <utility>

namespace gradwire::launch {

LinePrefixer::LinePrefixer(std::string prefix, bool terminal)
    : prefix_(std::move(prefix)), terminal_(terminal) {}

void LinePrefixer::feed(std::string_view bytes, std::vector<OutputRecord>& records) {
  // pending_ holds no terminator except possibly a final '\r', so only the new bytes (and that
  // '\r') need scanning.
  std::size_t scan = pending_.empty() ? 0 : pending_.size() - 1;
  pending_.append(bytes);
  std::size_t start = 0;
  while (true) {
    std::size_t end = pending_.find_first_of("\r\n", scan);
    if (end == std::string::npos) break;
    std::string_view text(pending_.data() + start, end - start);
    if (pending_[end] == '\n') {
      emit_line(text, "\n", records);
      start = end + 1;
    } else if (end + 1 == pending_.size()) {
      break;  // a '\r' at the end: wait for the next byte to tell "\r\n" from progress
    } else if (pending_[end + 1] == '\n') {
      emit_line(text, "\r\n", records);
      start = end + 2;
    } else {
      emit_progress(text, records);
      start = end + 1;
    }
    scan = start;
  }
  pending_.erase(0, start);
  if (pending_.size() >= kMaxLineBytes) {
    emit_line(pending_, "\n", records);
    pending_.clear();
  }
}

void LinePrefixer::finish(std::vector<OutputRecord>& records) {
  std::string_view text = pending_;
  if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
  if (!text.empty()) emit_line(text, "\n", records);
  pending_.clear();
}

void LinePrefixer::emit_line(std::string_view text, std::string_view terminator,
                             std::vector<OutputRecord>& records) const {
  OutputRecord record;
  record.bytes.reserve(prefix_.size() + text.size() + terminator.size());
  record.bytes.append(prefix_).append(text).append(terminator);
  records.push_back(std::move(record));
}

void LinePrefixer::emit_progress(std::string_view text, std::vector<OutputRecord>& records) const {
  if (text.empty()) return;
  if (!terminal_) {
    emit_line(text, "\n", records);
    return;
  }
  OutputRecord record;
  record.bytes.append(kEraseLine).append(prefix_).append(text);
  record.is_progress = true;
  records.push_back(std::move(record));
}

}  // namespace gradwire::launch
