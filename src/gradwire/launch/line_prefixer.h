// Splits one rank's output stream into whole lines, each prefixed with "[rank] ".
//
// Internal to the launcher; it has its own header so the splitting rules are unit tested
// without starting processes. Rules:
//  * "\n" and "\r\n" end a line; the record keeps the terminator it came with;
//  * a lone "\r" ends a progress chunk (tqdm and friends redraw one line that way): towards a
//    terminal it becomes "\r\033[K[r] text" with no newline, elsewhere an ordinary line;
//    empty chunks are dropped;
//  * an unterminated line is held until its end arrives, until it reaches kMaxLineBytes, or
//    until finish(), which flushes it as a whole line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace gradwire::launch {

// Carriage return, then clear to the end of the line: how a progress line is redrawn.
inline constexpr std::string_view kEraseLine = "\r\033[K";

struct OutputRecord {
  std::string bytes;         // written with one write() so ranks never interleave mid-line
  bool is_progress = false;  // drawn over the current terminal line, no newline
};

class LinePrefixer {
 public:
  // A line longer than this is cut and written as several lines rather than held forever.
  static constexpr std::size_t kMaxLineBytes = 1 << 20;

  // `terminal`: the destination is a terminal, so progress chunks are drawn in place.
  LinePrefixer(std::string prefix, bool terminal);

  // Appends the records that `bytes` completes; an unfinished line stays buffered.
  void feed(std::string_view bytes, std::vector<OutputRecord>& records);
  // End of the stream: a buffered unterminated line is emitted as a whole line.
  void finish(std::vector<OutputRecord>& records);

 private:
  void emit_line(std::string_view text, std::string_view terminator,
                 std::vector<OutputRecord>& records) const;
  void emit_progress(std::string_view text, std::vector<OutputRecord>& records) const;

  std::string prefix_;
  bool terminal_;
  std::string pending_;  // bytes of the unfinished line; may end with a '\r' not yet decided
};

}  // namespace gradwire::launch
