#include "gradwire/launch/posix_fd.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

#include "gradwire/core/error.h"

namespace gradwire::launch {

Pipe make_pipe(const std::string& what) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw SystemError(errno_message("could not create a pipe for " + what, errno));
  }
  Pipe pipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
  for (UniqueFd* end : {&pipe.read, &pipe.write}) {
    if (end->get() > STDERR_FILENO) continue;
    int moved = ::fcntl(end->get(), F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    if (moved < 0) throw SystemError(errno_message("could not move a pipe for " + what, errno));
    end->reset(moved);
  }
  return pipe;
}

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    throw SystemError(errno_message("could not make a launcher pipe non-blocking", errno));
  }
}

std::string signal_name(int signal_number) {
  const char* description = ::strsignal(signal_number);
  return description != nullptr ? description : "unknown signal";
}

}  // namespace gradwire::launch
