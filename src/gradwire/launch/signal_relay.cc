#include "gradwire/launch/signal_relay.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "gradwire/core/error.h"
#include "gradwire/launch/posix_fd.h"

namespace gradwire::launch {
namespace {

struct WakePipe {
  int read_fd = -1;
  int write_fd = -1;
};

std::atomic<int> g_wake_write_fd{-1};

void relay_signal(int signal_number) {
  int saved_errno = errno;
  int fd = g_wake_write_fd.load(std::memory_order_relaxed);
  if (fd >= 0) {
    auto byte = static_cast<unsigned char>(signal_number);
    [[maybe_unused]] ssize_t written = ::write(fd, &byte, 1);  // full pipe: a wake is pending
  }
  errno = saved_errno;
}

const WakePipe& wake_pipe() {
  static const WakePipe pipe = [] {
    Pipe created = make_pipe("launcher signals");
    set_nonblocking(created.read.get());
    set_nonblocking(created.write.get());
    // Kept open for the life of the process (see above).
    return WakePipe{created.read.release(), created.write.release()};
  }();
  return pipe;
}

}  // namespace

SignalRelay::SignalRelay() : fd_(wake_pipe().read_fd) {
  take();  // bytes left by an earlier run
  g_wake_write_fd.store(wake_pipe().write_fd);
  struct sigaction action {};
  action.sa_handler = relay_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  for (std::size_t i = 0; i < kRelayedSignals.size(); ++i) {
    if (::sigaction(kRelayedSignals[i], &action, &previous_[i]) != 0) {
      int error = errno;
      restore(i);
      throw SystemError(errno_message("could not install the launcher's signal handlers", error));
    }
  }
}

SignalRelay::~SignalRelay() { restore(kRelayedSignals.size()); }

std::vector<int> SignalRelay::take() const {
  std::vector<int> signals;
  unsigned char buffer[64];
  while (true) {
    ssize_t n = ::read(fd_, buffer, sizeof buffer);
    if (n > 0) {
      signals.insert(signals.end(), buffer, buffer + n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return signals;
    }
  }
}

bool SignalRelay::was_ignored(int signal_number) const {
  for (std::size_t i = 0; i < kRelayedSignals.size(); ++i) {
    if (kRelayedSignals[i] == signal_number) return previous_[i].sa_handler == SIG_IGN;
  }
  return false;
}

void SignalRelay::restore(std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) ::sigaction(kRelayedSignals[i], &previous_[i], nullptr);
  g_wake_write_fd.store(-1);
}

}  // namespace gradwire::launch
