#include "gradwire/comm/zmq_transport.h"

#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <set>
#include <thread>

#include "gradwire/core/error.h"

namespace gradwire::comm {

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void throw_zmq(const std::string& what) {
  throw SystemError(what + ": " + zmq_strerror(zmq_errno()));
}

// One context for every live transport; a new one is made when all of them are gone, so
// nothing is left to terminate at process exit (zmq_ctx_term would wait for open sockets).
std::shared_ptr<void> shared_context() {
  static std::mutex mutex;
  static std::weak_ptr<void> current;
  std::lock_guard lock(mutex);
  if (auto context = current.lock()) return context;
  void* raw = zmq_ctx_new();
  if (raw == nullptr) throw_zmq("cannot create a ZeroMQ context");
  std::shared_ptr<void> context(raw, [](void* c) {
    // Every socket is closed (with a bounded linger) before the last reference goes, so
    // this waits at most the linger period.
    while (zmq_ctx_term(c) == -1 && zmq_errno() == EINTR) {
    }
  });
  current = context;
  return context;
}

template <typename T>
void set_option(void* socket, int option, const T& value, const char* what) {
  if (zmq_setsockopt(socket, option, &value, sizeof(value)) != 0) {
    throw_zmq(std::string("cannot set ZeroMQ socket option ") + what);
  }
}

void set_common_options(void* socket, int64_t max_message_bytes) {
  set_option(socket, ZMQ_MAXMSGSIZE, max_message_bytes, "ZMQ_MAXMSGSIZE");
  set_option(socket, ZMQ_SNDTIMEO, static_cast<int>(kZmqSendTimeout.count()), "ZMQ_SNDTIMEO");
}

void check_max_message_bytes(int64_t max_message_bytes) {
  if (max_message_bytes < 1) {
    throw ConfigError("max_message_bytes must be at least 1, got " +
                      std::to_string(max_message_bytes));
  }
}

// Milliseconds left until `deadline`, rounded up so that a poll never returns just before
// it (and the caller spins), and never negative.
long remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() > 0 ? static_cast<long>(left.count()) : 0;
}

// RAII for zmq_msg_t.
class Message {
 public:
  Message() { zmq_msg_init(&msg_); }
  ~Message() { zmq_msg_close(&msg_); }
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
  zmq_msg_t* get() { return &msg_; }
  const uint8_t* data() { return static_cast<const uint8_t*>(zmq_msg_data(&msg_)); }
  size_t size() { return zmq_msg_size(&msg_); }

 private:
  zmq_msg_t msg_;
};

// Reads one whole multipart message without blocking. Keeps the first `keep` frames and
// counts (but discards) the rest. Returns false when nothing was waiting.
bool receive_frames(void* socket, size_t keep, std::vector<Bytes>& frames, size_t& count) {
  frames.clear();
  count = 0;
  for (;;) {
    Message message;
    int rc;
    do {
      rc = zmq_msg_recv(message.get(), socket, ZMQ_DONTWAIT);
    } while (rc == -1 && zmq_errno() == EINTR);
    if (rc == -1) {
      // The parts of a multipart message arrive together, so EAGAIN can only mean that
      // the poll reported a message another caller took; nothing was read.
      if (zmq_errno() == EAGAIN && count == 0) return false;
      throw_zmq("cannot receive a ZeroMQ message");
    }
    if (count < keep) frames.emplace_back(message.data(), message.data() + message.size());
    ++count;
    if (!zmq_msg_more(message.get())) return true;
  }
}

// zmq_send that reports "dropped" (false) for the errors a live transport expects: the peer
// is unknown or gone (EHOSTUNREACH), its queue stayed full past the send timeout (EAGAIN),
// or a signal interrupted the wait (EINTR). Anything else is a bug or a dead context.
bool send_frame(void* socket, const void* data, size_t size, int flags) {
  if (zmq_send(socket, data, size, flags) >= 0) return true;
  const int error = zmq_errno();
  if (error == EHOSTUNREACH || error == EAGAIN || error == EINTR) return false;
  throw_zmq("cannot send a ZeroMQ message");
}

}  // namespace

namespace detail {

ZmqSocket::ZmqSocket(std::shared_ptr<void> context, int type) : context_(std::move(context)) {
  socket_ = zmq_socket(context_.get(), type);
  if (socket_ == nullptr) throw_zmq("cannot create a ZeroMQ socket");
  const int linger = static_cast<int>(kZmqLinger.count());
  if (zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof(linger)) != 0) {
    const std::string message = std::string("cannot set ZMQ_LINGER: ") + zmq_strerror(zmq_errno());
    zmq_close(socket_);
    throw SystemError(message);
  }
}

ZmqSocket::~ZmqSocket() { zmq_close(socket_); }

void ZmqSocket::set_linger(std::chrono::milliseconds linger) {
  const int value = static_cast<int>(std::min<int64_t>(linger.count(), INT32_MAX));
  if (zmq_setsockopt(socket_, ZMQ_LINGER, &value, sizeof(value)) != 0) {
    throw SystemError(std::string("cannot set ZMQ_LINGER: ") + zmq_strerror(zmq_errno()));
  }
}

}  // namespace detail

// --- server -------------------------------------------------------------------------------

ZmqServerTransport::ZmqServerTransport(std::string name, const std::string& bind_address, int port,
                                       int64_t max_message_bytes)
    : name_(std::move(name)), socket_(shared_context(), ZMQ_ROUTER) {
  if (name_.empty()) throw ConfigError("a ZeroMQ server transport needs a non-empty name");
  if (port < 0 || port > 65535) {
    throw ConfigError("port must be 0 (ephemeral) to 65535, got " + std::to_string(port));
  }
  if (bind_address.empty()) throw ConfigError("bind address is empty; use e.g. 127.0.0.1");
  check_max_message_bytes(max_message_bytes);

  void* socket = socket_.get();
  set_common_options(socket, max_message_bytes);
  set_option(socket, ZMQ_ROUTER_MANDATORY, 1, "ZMQ_ROUTER_MANDATORY");
  set_option(socket, ZMQ_ROUTER_HANDOVER, 1, "ZMQ_ROUTER_HANDOVER");
  const bool ipv6 = bind_address.find(':') != std::string::npos;
  if (ipv6) set_option(socket, ZMQ_IPV6, 1, "ZMQ_IPV6");

  const std::string host =
      ipv6 && bind_address.front() != '[' ? "[" + bind_address + "]" : bind_address;
  const std::string address =
      "tcp://" + host + ":" + (port == 0 ? std::string("*") : std::to_string(port));
  if (zmq_bind(socket, address.c_str()) != 0) {
    throw_zmq("cannot bind server '" + name_ + "' to " + address +
              " (is the port in use, or the address not on this host?)");
  }
  char buffer[512] = {};
  size_t length = sizeof(buffer);
  if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, buffer, &length) != 0) {
    throw_zmq("cannot read the bound endpoint of server '" + name_ + "'");
  }
  endpoint_ = buffer;
}

ZmqServerTransport::~ZmqServerTransport() = default;

bool ZmqServerTransport::send(const std::string& peer, std::span<const uint8_t> bytes) {
  if (peer.empty()) return false;
  // ROUTER_MANDATORY makes the routing-id frame fail when the peer is not connected; once
  // it is accepted the payload frame goes to the same queue and cannot fail.
  if (!send_frame(socket_.get(), peer.data(), peer.size(), ZMQ_SNDMORE)) return false;
  if (!send_frame(socket_.get(), bytes.data(), bytes.size(), 0)) {
    throw SystemError("ZeroMQ accepted the routing id for '" + peer +
                      "' but not the payload; the socket is in an unknown state");
  }
  return true;
}

std::optional<Received> ZmqServerTransport::receive(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + std::max(timeout, timeout.zero());
  std::vector<Bytes> frames;
  size_t count = 0;
  for (;;) {
    zmq_pollitem_t item{socket_.get(), 0, ZMQ_POLLIN, 0};
    const int ready = zmq_poll(&item, 1, remaining_ms(deadline));
    if (ready < 0 && zmq_errno() != EINTR) throw_zmq("cannot poll server '" + name_ + "'");
    if (ready > 0 && (item.revents & ZMQ_POLLIN)) {
      if (receive_frames(socket_.get(), 2, frames, count) && count == 2) {
        return Received{std::string(frames[0].begin(), frames[0].end()), std::move(frames[1])};
      }
      // Not [routing id, payload]: a peer that does not speak this protocol. Dropped.
    }
    if (Clock::now() >= deadline) return std::nullopt;
  }
}

// --- client -------------------------------------------------------------------------------

ZmqClientTransport::ZmqClientTransport(std::string name,
                                       std::vector<std::pair<std::string, std::string>> peers,
                                       int64_t max_message_bytes)
    : name_(std::move(name)) {
  // ZeroMQ routing ids are 1 to 255 bytes; ids starting with a zero byte are reserved.
  if (name_.empty() || name_.size() > 255 || name_.front() == '\0') {
    throw ConfigError("a ZeroMQ client name must be 1 to 255 bytes, not starting with NUL; got '" +
                      name_ + "'");
  }
  check_max_message_bytes(max_message_bytes);
  std::set<std::string> seen;
  std::shared_ptr<void> context = shared_context();
  for (auto& [peer_name, endpoint] : peers) {
    if (peer_name.empty()) throw ConfigError("a server name is empty");
    if (!seen.insert(peer_name).second) {
      throw ConfigError("server '" + peer_name + "' is listed twice for client '" + name_ + "'");
    }
    auto socket = std::make_unique<detail::ZmqSocket>(context, ZMQ_DEALER);
    void* raw = socket->get();
    set_common_options(raw, max_message_bytes);
    if (zmq_setsockopt(raw, ZMQ_ROUTING_ID, name_.data(), name_.size()) != 0) {
      throw_zmq("cannot set the routing id of client '" + name_ + "'");
    }
    if (endpoint.find('[') != std::string::npos) set_option(raw, ZMQ_IPV6, 1, "ZMQ_IPV6");
    if (zmq_connect(raw, endpoint.c_str()) != 0) {
      throw_zmq("client '" + name_ + "' cannot connect to server '" + peer_name + "' at '" +
                endpoint + "'");
    }
    peers_.push_back(Peer{peer_name, std::move(socket)});
  }
}

ZmqClientTransport::~ZmqClientTransport() = default;

bool ZmqClientTransport::send(const std::string& peer, std::span<const uint8_t> bytes) {
  for (Peer& p : peers_) {
    if (p.name == peer) return send_frame(p.socket->get(), bytes.data(), bytes.size(), 0);
  }
  return false;
}

std::optional<Received> ZmqClientTransport::receive(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + std::max(timeout, timeout.zero());
  if (peers_.empty()) {
    std::this_thread::sleep_until(deadline);
    return std::nullopt;
  }
  std::vector<zmq_pollitem_t> items(peers_.size());
  std::vector<Bytes> frames;
  size_t count = 0;
  for (;;) {
    for (size_t i = 0; i < peers_.size(); ++i) {
      items[i] = zmq_pollitem_t{peers_[i].socket->get(), 0, ZMQ_POLLIN, 0};
    }
    const int ready =
        zmq_poll(items.data(), static_cast<int>(items.size()), remaining_ms(deadline));
    if (ready < 0 && zmq_errno() != EINTR) throw_zmq("cannot poll client '" + name_ + "'");
    if (ready > 0) {
      for (size_t k = 0; k < peers_.size(); ++k) {
        const size_t i = (next_poll_start_ + k) % peers_.size();
        if (!(items[i].revents & ZMQ_POLLIN)) continue;
        if (receive_frames(peers_[i].socket->get(), 1, frames, count) && count == 1) {
          next_poll_start_ = (i + 1) % peers_.size();
          return Received{peers_[i].name, std::move(frames[0])};
        }
        // A DEALER sees only the payload frame; anything else is dropped.
      }
    }
    if (Clock::now() >= deadline) return std::nullopt;
  }
}

ZmqPeerTransport::ZmqPeerTransport(std::string name, const std::string& bind_address, int port,
                                   int64_t max_message_bytes)
    : max_message_bytes_(max_message_bytes),
      inbox_(std::move(name), bind_address, port, max_message_bytes) {}

ZmqPeerTransport::~ZmqPeerTransport() = default;

void ZmqPeerTransport::connect(std::vector<std::pair<std::string, std::string>> peers) {
  if (outbox_) throw Error("ZmqPeerTransport::connect called twice");
  outbox_ =
      std::make_unique<ZmqClientTransport>(inbox_.name(), std::move(peers), max_message_bytes_);
}

bool ZmqPeerTransport::send(const std::string& peer, std::span<const uint8_t> bytes) {
  return outbox_ && outbox_->send(peer, bytes);
}

std::optional<Received> ZmqPeerTransport::receive(std::chrono::milliseconds timeout) {
  return inbox_.receive(timeout);
}

}  // namespace gradwire::comm
