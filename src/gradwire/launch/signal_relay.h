// SIGINT, SIGTERM and SIGCHLD turned into bytes on a self-pipe that the launcher's poll loop
// watches, so all real work happens outside the handler. Internal to the launch layer.
//
// The pipe lives as long as the process: closing it could race with a handler still running
// in another thread. One SignalRelay at a time per process (the handlers are process-wide);
// it restores the previous handlers when it goes away.
#pragma once

#include <signal.h>

#include <array>
#include <cstddef>
#include <vector>

namespace gradwire::launch {

inline constexpr std::array<int, 3> kRelayedSignals = {SIGINT, SIGTERM, SIGCHLD};

class SignalRelay {
 public:
  SignalRelay();  // SystemError when the handlers cannot be installed
  ~SignalRelay();
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;

  // Readable when a signal arrived.
  int fd() const { return fd_; }

  // Signals received since the last call, SIGCHLD included, in arrival order.
  std::vector<int> take() const;

  // Whether the process ignored `signal_number` before the relay took it over.
  bool was_ignored(int signal_number) const;

 private:
  void restore(std::size_t count);

  int fd_;
  std::array<struct sigaction, kRelayedSignals.size()> previous_{};
};

}  // namespace gradwire::launch
