#include "gradwire/launch/output_sink.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace gradwire::launch {
namespace {

// How long one wait for a full output pipe lasts before writing is tried again.
constexpr int kWritePollMs = 250;

}  // namespace

OutputSink::OutputSink(int fd, bool* progress_visible)
    : fd_(fd), terminal_(::isatty(fd) == 1), progress_visible_(progress_visible) {}

void OutputSink::write_record(const OutputRecord& record) {
  if (!terminal_) {
    write_all(record.bytes);
  } else if (record.is_progress) {
    write_all(record.bytes);
    *progress_visible_ = true;
  } else if (*progress_visible_) {
    std::string erased;
    erased.reserve(kEraseLine.size() + record.bytes.size());
    erased.append(kEraseLine).append(record.bytes);
    write_all(erased);
    *progress_visible_ = false;
  } else {
    write_all(record.bytes);
  }
}

void OutputSink::finish() {
  if (terminal_ && *progress_visible_) {
    write_all("\n");
    *progress_visible_ = false;
  }
}

void OutputSink::write_all(std::string_view bytes) {
  while (!bytes.empty() && !broken_) {
    ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd waiting{fd_, POLLOUT, 0};
      ::poll(&waiting, 1, kWritePollMs);
    } else {
      broken_ = true;
    }
  }
}

}  // namespace gradwire::launch
