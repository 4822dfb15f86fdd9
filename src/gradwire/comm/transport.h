// Transport: point-to-point messages between named endpoints, for the parameter server.
//
// Unlike Collectives (every rank calls the same operation in lockstep), a Transport carries
// independent messages: a server receives requests from whichever worker sends next and
// replies to that worker. Implementations: InprocNetwork endpoints (threads of one
// process, for tests) and ZmqServerTransport / ZmqClientTransport (TCP via ZeroMQ).
//
// Contracts shared by every implementation:
//  * Messages between two endpoints arrive whole and in the order they were sent; nothing
//    is ordered across different peers.
//  * send() never blocks indefinitely, and returns false (dropping the message) when the
//    peer is not known or no longer connected: a server replying to a worker that is gone
//    must not crash. true means "queued", not "delivered".
//  * receive() returns the next message from any peer, or nullopt once the timeout passed.
//  * An endpoint may move between threads, but only one thread uses it at a time.
//  * The transport authenticates nobody; a layer above checks a job token in each message.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "gradwire/core/bytes.h"

namespace gradwire::comm {

struct Received {
  std::string peer;  // the name of the endpoint that sent the message
  Bytes bytes;
};

// A message endpoint named `name()`. Messages between two endpoints arrive whole and in
// order; nothing is ordered across peers.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual const std::string& name() const = 0;
  // Queues `bytes` for `peer`. Returns false (and drops the message) when the peer is not
  // known/connected (a server replying to a worker that is gone must not crash). Never
  // blocks indefinitely.
  virtual bool send(const std::string& peer, std::span<const uint8_t> bytes) = 0;
  // The next message from any peer, or nullopt after `timeout`.
  virtual std::optional<Received> receive(std::chrono::milliseconds timeout) = 0;
};

}  // namespace gradwire::comm
