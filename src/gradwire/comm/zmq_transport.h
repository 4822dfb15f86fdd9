// Transport over TCP with ZeroMQ: a parameter server binds one ROUTER socket
// (ZmqServerTransport) and each worker connects one DEALER per server (ZmqClientTransport).
//
// Wire: a worker's DEALER carries the worker's name as its routing id, so the server sees
// every message as [worker name, payload] and replies by that name; the worker sees the
// reply on the DEALER connected to that server and reports the server's name as the peer.
// One payload is one ZeroMQ frame, so messages arrive whole and in order per peer.
//
// Limits that keep a misbehaving peer from hurting the process:
//  * Incoming messages larger than max_message_bytes make ZeroMQ drop the connection of
//    the peer that sent it (ZMQ_MAXMSGSIZE); nothing that size is ever buffered.
//  * Messages that do not have the expected frame count are dropped.
//  * send() waits at most kZmqSendTimeout when the peer's queue is full, then returns false;
//    the server's send() to a worker that is not connected returns false at once
//    (ZMQ_ROUTER_MANDATORY). A worker's send() queues while its server is unreachable
//    (ZeroMQ reconnects in the background), up to the queue limit.
//  * Sockets linger at most kZmqLinger on close (or what set_linger() says), so destroying a
//    transport never hangs for long.
//  * A worker that reconnects under a name already connected takes the name over
//    (ZMQ_ROUTER_HANDOVER), so a restarted worker is not locked out by its stale connection.
//
// Security: servers bind to exactly the address they are given; callers pass 127.0.0.1
// unless told to listen elsewhere. There is no encryption or authentication at this layer:
// any process that can reach the port can send messages, so a layer above authenticates
// each message by a job token and validates every payload (ByteReader) before using it.
//
// Errors from ZeroMQ calls (bind, connect, socket options) are thrown as SystemError with
// zmq_strerror's text. All live transports share one ZeroMQ context; it is terminated
// (waiting at most kZmqLinger for unsent messages) when the last of them is destroyed.
//
// Not bounded here: ZMQ_MAXMSGSIZE limits each frame, and ZeroMQ queues up to its default
// high-water mark (1000 messages) per peer before the reader takes them.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gradwire/comm/transport.h"

namespace gradwire::comm {

namespace detail {

// Owns one ZeroMQ socket (closed on destruction) and keeps its context alive.
class ZmqSocket {
 public:
  ZmqSocket(std::shared_ptr<void> context, int type);
  ~ZmqSocket();
  ZmqSocket(const ZmqSocket&) = delete;
  ZmqSocket& operator=(const ZmqSocket&) = delete;

  void* get() const { return socket_; }
  // How long close waits for messages not yet sent (ZMQ_LINGER).
  void set_linger(std::chrono::milliseconds linger);

 private:
  std::shared_ptr<void> context_;
  void* socket_ = nullptr;
};

}  // namespace detail

inline constexpr std::chrono::milliseconds kZmqLinger{500};
inline constexpr std::chrono::milliseconds kZmqSendTimeout{2000};
inline constexpr int64_t kZmqDefaultMaxMessageBytes = int64_t{1} << 30;

class ZmqServerTransport : public Transport {
 public:
  // Binds a ROUTER socket to tcp://bind_address:port (port 0: an ephemeral port, see
  // endpoint()). An IPv6 address (containing ':') may be given without brackets. Throws
  // ConfigError for an invalid port or limit, SystemError when the bind fails.
  ZmqServerTransport(std::string name, const std::string& bind_address, int port = 0,
                     int64_t max_message_bytes = kZmqDefaultMaxMessageBytes);
  ~ZmqServerTransport() override;

  const std::string& name() const override { return name_; }
  // The address workers connect to, e.g. "tcp://127.0.0.1:41234".
  std::string endpoint() const { return endpoint_; }

  // How long destroying this transport waits for replies still on their way (default
  // kZmqLinger). A parameter server's last answers carry whole models: on a slow link they
  // take seconds, and a server that exits before they are out leaves its workers waiting.
  void set_linger(std::chrono::milliseconds linger) { socket_.set_linger(linger); }

  bool send(const std::string& peer, std::span<const uint8_t> bytes) override;
  std::optional<Received> receive(std::chrono::milliseconds timeout) override;

 private:
  std::string name_;
  detail::ZmqSocket socket_;
  std::string endpoint_;
};

class ZmqClientTransport : public Transport {
 public:
  // Connects one DEALER per (server name, endpoint) pair, each with routing id `name`.
  // Connecting does not wait for the servers: messages queue until the connection is up.
  // Throws ConfigError for an empty or over-long (> 255 bytes) name, a duplicate server
  // name or an invalid limit, SystemError when an endpoint cannot be connected.
  ZmqClientTransport(std::string name, std::vector<std::pair<std::string, std::string>> peers,
                     int64_t max_message_bytes = kZmqDefaultMaxMessageBytes);
  ~ZmqClientTransport() override;

  const std::string& name() const override { return name_; }

  bool send(const std::string& peer, std::span<const uint8_t> bytes) override;
  std::optional<Received> receive(std::chrono::milliseconds timeout) override;

 private:
  struct Peer {
    std::string name;
    std::unique_ptr<detail::ZmqSocket> socket;
  };

  std::string name_;
  std::vector<Peer> peers_;
  size_t next_poll_start_ = 0;  // rotates so that one busy server cannot starve the others
};

// A gossip worker's endpoint: a ROUTER bound like a server's, where every peer's messages
// arrive (named by the sender), and a DEALER per peer for what this worker sends. Every
// message travels DEALER -> ROUTER, whichever side started the exchange, so an answer is
// an ordinary send. The limits and the security note above hold for both halves.
class ZmqPeerTransport : public Transport {
 public:
  ZmqPeerTransport(std::string name, const std::string& bind_address, int port = 0,
                   int64_t max_message_bytes = kZmqDefaultMaxMessageBytes);
  ~ZmqPeerTransport() override;

  const std::string& name() const override { return inbox_.name(); }
  // The address peers connect to, e.g. "tcp://127.0.0.1:41234".
  std::string endpoint() const { return inbox_.endpoint(); }
  // Connects to every other peer (name, endpoint); once, before the first send. Throws
  // like ZmqClientTransport's constructor.
  void connect(std::vector<std::pair<std::string, std::string>> peers);

  // false (dropped) before connect() or for an unknown peer.
  bool send(const std::string& peer, std::span<const uint8_t> bytes) override;
  std::optional<Received> receive(std::chrono::milliseconds timeout) override;

 private:
  int64_t max_message_bytes_;
  ZmqServerTransport inbox_;
  std::unique_ptr<ZmqClientTransport> outbox_;
};

}  // namespace gradwire::comm
