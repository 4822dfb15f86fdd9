// The one way gradwire reports errors: exceptions derived from gradwire::Error whose
// message says what happened and what to do about it. Library code never aborts; only the
// CLI decides to exit.
#pragma once

#include <stdexcept>
#include <string>

namespace gradwire {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A value given by the user (option, spec string, environment variable) is invalid.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// Bytes received from the network or read from disk do not form a valid message.
class PayloadError : public Error {
 public:
  using Error::Error;
};

// Ranks disagree on something that must be identical (codec, model shapes).
class MismatchError : public Error {
 public:
  using Error::Error;
};

// A peer did not arrive within the allowed time; the message names the missing ranks.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// The operating system refused something (spawn, socket, file).
class SystemError : public Error {
 public:
  using Error::Error;
};

// Formats "what: strerror(errno)" for SystemError messages.
std::string errno_message(const std::string& what, int error_number);

}  // namespace gradwire
