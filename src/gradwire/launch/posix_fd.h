// File descriptors for the launcher and the emulated cluster: an owning descriptor, pipes
// that never take 0..2, and small helpers. Internal to the launch layer.
#pragma once

#include <string>
#include <utility>

#include <unistd.h>

namespace gradwire::launch {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

// Both ends are close-on-exec and numbered above 2, so that dup2() onto 0..2 in a child never
// clobbers another pipe even when the launcher runs with a standard stream closed.
Pipe make_pipe(const std::string& what);

void set_nonblocking(int fd);

// strsignal()'s description, e.g. "Terminated".
std::string signal_name(int signal_number);

}  // namespace gradwire::launch
