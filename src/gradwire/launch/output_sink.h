// One of the launcher's own output streams (stdout or stderr), written in whole records so
// ranks never interleave mid-line. Internal to the launch layer.
//
// Progress chunks leave the terminal cursor mid-line; the next whole line first erases them
// (they are redrawn on their next update). Output that cannot be written (closed pipe, full
// disk) is dropped: the ranks' results matter more than their logs, and the launcher must
// keep supervising them.
#pragma once

#include <string_view>

#include "gradwire/launch/line_prefixer.h"

namespace gradwire::launch {

class OutputSink {
 public:
  // `progress_visible` is shared by the sinks of one terminal (stdout and stderr usually are).
  OutputSink(int fd, bool* progress_visible);

  bool terminal() const { return terminal_; }
  void write_record(const OutputRecord& record);
  // Bytes as they came (prefix_output = false).
  void write_raw(std::string_view bytes) { write_all(bytes); }
  // Ends a progress line left on the terminal, so whatever comes next starts on a new line.
  void finish();

 private:
  void write_all(std::string_view bytes);

  int fd_;
  bool terminal_;
  bool* progress_visible_;
  bool broken_ = false;
};

}  // namespace gradwire::launch
