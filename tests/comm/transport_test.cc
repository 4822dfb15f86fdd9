#include "gradwire/comm/transport.h"

#include <gtest/gtest.h>
#include <zmq.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "gradwire/comm/inproc_transport.h"
#include "gradwire/comm/zmq_transport.h"
#include "gradwire/core/error.h"

namespace gradwire::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Every wait in these tests is bounded by this (a hang fails the test instead of the job).
constexpr auto kWait = 10s;

Bytes to_bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string to_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

Bytes pattern(size_t size, uint32_t seed) {
  Bytes out(size);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& byte : out) {
    x = x * 1664525u + 1013904223u;
    byte = static_cast<uint8_t>(x >> 24);
  }
  return out;
}

Bytes sequence_message(const std::string& sender, uint32_t seq) {
  Bytes out = to_bytes(sender + ":");
  const size_t at = out.size();
  out.resize(at + sizeof(seq));
  std::memcpy(out.data() + at, &seq, sizeof(seq));
  return out;
}

uint32_t sequence_of(const Bytes& message) {
  uint32_t seq = 0;
  EXPECT_GE(message.size(), sizeof(seq));
  if (message.size() >= sizeof(seq)) {
    std::memcpy(&seq, message.data() + message.size() - sizeof(seq), sizeof(seq));
  }
  return seq;
}

// Receives exactly `n` messages (or fewer, when kWait passes first).
std::vector<Received> receive_n(Transport& t, size_t n) {
  std::vector<Received> out;
  const auto deadline = Clock::now() + kWait;
  while (out.size() < n && Clock::now() < deadline) {
    if (auto m = t.receive(100ms)) out.push_back(std::move(*m));
  }
  return out;
}

// --- the two implementations behind one harness ----------------------------------------

class InprocHarness {
 public:
  std::unique_ptr<Transport> make_server() { return network_->endpoint("server"); }
  std::unique_ptr<Transport> make_client(const std::string& name) {
    return network_->endpoint(name);
  }

 private:
  std::shared_ptr<InprocNetwork> network_ = InprocNetwork::create();
};

class ZmqHarness {
 public:
  std::unique_ptr<Transport> make_server() {
    auto server = std::make_unique<ZmqServerTransport>("server", "127.0.0.1");
    endpoint_ = server->endpoint();
    return server;
  }
  std::unique_ptr<Transport> make_client(const std::string& name) {
    return std::make_unique<ZmqClientTransport>(
        name, std::vector<std::pair<std::string, std::string>>{{"server", endpoint_}});
  }

 private:
  std::string endpoint_;
};

template <typename Harness>
class TransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = harness_.make_server();
    w0_ = harness_.make_client("w0");
    w1_ = harness_.make_client("w1");
  }

  // Each client says hello and the server receives both, so a ZeroMQ server knows (has a
  // connection to) both clients before it sends to them.
  void introduce_clients() {
    ASSERT_TRUE(w0_->send("server", to_bytes("hello from w0")));
    ASSERT_TRUE(w1_->send("server", to_bytes("hello from w1")));
    auto hellos = receive_n(*server_, 2);
    ASSERT_EQ(hellos.size(), 2u);
    std::map<std::string, std::string> by_peer;
    for (auto& m : hellos) by_peer[m.peer] = to_string(m.bytes);
    EXPECT_EQ(by_peer, (std::map<std::string, std::string>{{"w0", "hello from w0"},
                                                           {"w1", "hello from w1"}}));
  }

  Harness harness_;
  std::unique_ptr<Transport> server_;
  std::unique_ptr<Transport> w0_;
  std::unique_ptr<Transport> w1_;
};

struct HarnessNames {
  template <typename T>
  static std::string GetName(int) {
    return std::is_same_v<T, InprocHarness> ? "Inproc" : "Zmq";
  }
};

using Harnesses = ::testing::Types<InprocHarness, ZmqHarness>;
TYPED_TEST_SUITE(TransportTest, Harnesses, HarnessNames);

TYPED_TEST(TransportTest, NamesAreThoseGiven) {
  EXPECT_EQ(this->server_->name(), "server");
  EXPECT_EQ(this->w0_->name(), "w0");
  EXPECT_EQ(this->w1_->name(), "w1");
}

TYPED_TEST(TransportTest, ServerAndTwoClientsExchangeBothWays) {
  this->introduce_clients();
  ASSERT_TRUE(this->server_->send("w0", to_bytes("reply to w0")));
  ASSERT_TRUE(this->server_->send("w1", to_bytes("reply to w1")));
  for (auto* client : {this->w0_.get(), this->w1_.get()}) {
    auto reply = client->receive(kWait);
    ASSERT_TRUE(reply.has_value()) << client->name();
    EXPECT_EQ(reply->peer, "server");
    EXPECT_EQ(to_string(reply->bytes), "reply to " + client->name());
  }
  // Nothing else is waiting anywhere.
  EXPECT_FALSE(this->server_->receive(50ms).has_value());
  EXPECT_FALSE(this->w0_->receive(50ms).has_value());
  EXPECT_FALSE(this->w1_->receive(50ms).has_value());
}

TYPED_TEST(TransportTest, EmptyMessageArrivesEmpty) {
  this->introduce_clients();
  ASSERT_TRUE(this->w0_->send("server", {}));
  auto m = this->server_->receive(kWait);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->peer, "w0");
  EXPECT_TRUE(m->bytes.empty());
  ASSERT_TRUE(this->server_->send("w1", {}));
  auto reply = this->w1_->receive(kWait);
  ASSERT_TRUE(reply.has_value());
  EXPECT_TRUE(reply->bytes.empty());
}

TYPED_TEST(TransportTest, KeepsOrderPerPeer) {
  this->introduce_clients();
  constexpr uint32_t kCount = 500;
  for (uint32_t i = 0; i < kCount; ++i) {
    ASSERT_TRUE(this->w0_->send("server", sequence_message("w0", i)));
    ASSERT_TRUE(this->w1_->send("server", sequence_message("w1", i)));
  }
  auto all = receive_n(*this->server_, 2 * kCount);
  ASSERT_EQ(all.size(), 2 * kCount);
  std::map<std::string, uint32_t> next;
  for (auto& m : all) {
    EXPECT_EQ(sequence_of(m.bytes), next[m.peer]++) << "from " << m.peer;
    EXPECT_EQ(m.bytes, sequence_message(m.peer, sequence_of(m.bytes)));
  }
  EXPECT_EQ(next["w0"], kCount);
  EXPECT_EQ(next["w1"], kCount);

  for (uint32_t i = 0; i < kCount; ++i) {
    ASSERT_TRUE(this->server_->send("w0", sequence_message("server", i)));
  }
  auto replies = receive_n(*this->w0_, kCount);
  ASSERT_EQ(replies.size(), kCount);
  for (uint32_t i = 0; i < kCount; ++i) {
    EXPECT_EQ(replies[i].peer, "server");
    EXPECT_EQ(sequence_of(replies[i].bytes), i);
  }
}

TYPED_TEST(TransportTest, LargeMessageArrivesIntact) {
  this->introduce_clients();
  const Bytes up = pattern(8u << 20, 1);
  const Bytes down = pattern((8u << 20) + 3, 2);
  ASSERT_TRUE(this->w1_->send("server", up));
  auto received = this->server_->receive(kWait);
  ASSERT_TRUE(received.has_value());
  EXPECT_EQ(received->peer, "w1");
  EXPECT_TRUE(received->bytes == up) << "size " << received->bytes.size();

  ASSERT_TRUE(this->server_->send("w1", down));
  auto reply = this->w1_->receive(kWait);
  ASSERT_TRUE(reply.has_value());
  EXPECT_TRUE(reply->bytes == down) << "size " << reply->bytes.size();
}

TYPED_TEST(TransportTest, ReceiveTimesOutWithNothing) {
  for (auto* t : {this->server_.get(), this->w0_.get()}) {
    const auto start = Clock::now();
    EXPECT_FALSE(t->receive(100ms).has_value());
    const auto elapsed = Clock::now() - start;
    EXPECT_GE(elapsed, 90ms) << t->name();
    EXPECT_LT(elapsed, 2s) << t->name();

    const auto start_zero = Clock::now();
    EXPECT_FALSE(t->receive(0ms).has_value());
    EXPECT_LT(Clock::now() - start_zero, 2s) << t->name();
  }
}

TYPED_TEST(TransportTest, SendToUnknownPeerReturnsFalse) {
  this->introduce_clients();
  const auto start = Clock::now();
  EXPECT_FALSE(this->server_->send("nobody", to_bytes("x")));
  EXPECT_FALSE(this->server_->send("", to_bytes("x")));
  EXPECT_FALSE(this->w0_->send("nobody", to_bytes("x")));
  EXPECT_LT(Clock::now() - start, 2s);
  // The known peers still work.
  ASSERT_TRUE(this->server_->send("w0", to_bytes("still here")));
  auto m = this->w0_->receive(kWait);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(to_string(m->bytes), "still here");
}

TYPED_TEST(TransportTest, SendToDestroyedClientEventuallyReturnsFalse) {
  this->introduce_clients();
  this->w0_.reset();
  // ZeroMQ notices the closed connection asynchronously; until then a send is queued and
  // lost. It must never throw or hang, and must report false once the peer is gone.
  bool refused = false;
  const auto deadline = Clock::now() + kWait;
  while (!refused && Clock::now() < deadline) {
    const auto start = Clock::now();
    refused = !this->server_->send("w0", to_bytes("anyone there?"));
    EXPECT_LT(Clock::now() - start, 5s);
    if (!refused) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(refused);
  // The other client is unaffected.
  ASSERT_TRUE(this->server_->send("w1", to_bytes("hi w1")));
  auto m = this->w1_->receive(kWait);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(to_string(m->bytes), "hi w1");
}

TYPED_TEST(TransportTest, EndpointsWorkFromSeparateThreads) {
  this->introduce_clients();
  constexpr uint32_t kCount = 200;
  // The server echoes every message back to its sender.
  std::thread server([&] {
    for (uint32_t n = 0; n < 2 * kCount; ++n) {
      auto m = this->server_->receive(kWait);
      if (!m) {
        ADD_FAILURE() << "server received only " << n << " messages";
        return;
      }
      EXPECT_TRUE(this->server_->send(m->peer, m->bytes));
    }
  });
  auto client = [&](Transport* t) {
    for (uint32_t i = 0; i < kCount; ++i) {
      EXPECT_TRUE(t->send("server", sequence_message(t->name(), i)));
      auto echo = t->receive(kWait);
      if (!echo) {
        ADD_FAILURE() << t->name() << " got no echo for " << i;
        return;
      }
      EXPECT_EQ(echo->bytes, sequence_message(t->name(), i));
    }
  };
  std::thread c0(client, this->w0_.get());
  std::thread c1(client, this->w1_.get());
  c0.join();
  c1.join();
  server.join();
}

// --- InprocNetwork ----------------------------------------------------------------------

TEST(InprocNetworkTest, DuplicateNameThrowsConfigError) {
  auto network = InprocNetwork::create();
  auto a = network->endpoint("a");
  EXPECT_THROW(network->endpoint("a"), ConfigError);
  EXPECT_THROW(network->endpoint(""), ConfigError);
  // A name is free again once its endpoint is gone, and sends to the old one fail.
  auto b = network->endpoint("b");
  a.reset();
  EXPECT_FALSE(b->send("a", to_bytes("gone")));
  auto again = network->endpoint("a");
  EXPECT_TRUE(b->send("a", to_bytes("back")));
  auto m = again->receive(1s);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->peer, "b");
  EXPECT_EQ(to_string(m->bytes), "back");
}

TEST(InprocNetworkTest, NetworkNotOwnedBySharedPtrThrowsConfigError) {
  InprocNetwork network;
  EXPECT_THROW(network.endpoint("a"), ConfigError);
}

TEST(InprocNetworkTest, EndpointsKeepTheNetworkAlive) {
  std::unique_ptr<Transport> a, b;
  {
    auto network = InprocNetwork::create();
    a = network->endpoint("a");
    b = network->endpoint("b");
  }
  EXPECT_TRUE(a->send("b", to_bytes("x")));
  EXPECT_TRUE(b->receive(1s).has_value());
}

// --- ZeroMQ specifics ---------------------------------------------------------------------

using Peers = std::vector<std::pair<std::string, std::string>>;

int port_of(const std::string& endpoint) {
  const auto colon = endpoint.rfind(':');
  return colon == std::string::npos ? 0 : std::atoi(endpoint.c_str() + colon + 1);
}

// A raw ZeroMQ socket, to play a peer that does not follow the protocol.
class RawSocket {
 public:
  explicit RawSocket(int type) : context_(zmq_ctx_new()), socket_(zmq_socket(context_, type)) {
    const int linger = 0;
    zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof(linger));
  }
  ~RawSocket() {
    zmq_close(socket_);
    zmq_ctx_term(context_);
  }
  void* get() const { return socket_; }

  // Receives one multipart message (all frames) or nothing within `timeout`.
  std::vector<std::string> receive(std::chrono::milliseconds timeout) {
    zmq_pollitem_t item{socket_, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&item, 1, static_cast<long>(timeout.count())) <= 0) return {};
    std::vector<std::string> frames;
    int more = 1;
    while (more) {
      zmq_msg_t msg;
      zmq_msg_init(&msg);
      if (zmq_msg_recv(&msg, socket_, 0) < 0) {
        zmq_msg_close(&msg);
        break;
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&msg)), zmq_msg_size(&msg));
      more = zmq_msg_more(&msg);
      zmq_msg_close(&msg);
    }
    return frames;
  }

  void send(const std::vector<std::string>& frames) {
    for (size_t i = 0; i < frames.size(); ++i) {
      zmq_send(socket_, frames[i].data(), frames[i].size(),
               i + 1 < frames.size() ? ZMQ_SNDMORE : 0);
    }
  }

 private:
  void* context_;
  void* socket_;
};

TEST(ZmqTransportTest, ServerEndpointIsLoopbackWithEphemeralPort) {
  ZmqServerTransport server("ps0", "127.0.0.1");
  const std::string endpoint = server.endpoint();
  EXPECT_EQ(endpoint.rfind("tcp://127.0.0.1:", 0), 0u) << endpoint;
  const int port = port_of(endpoint);
  EXPECT_GT(port, 0) << endpoint;
  EXPECT_LE(port, 65535) << endpoint;
  EXPECT_EQ(server.name(), "ps0");
}

TEST(ZmqTransportTest, BindingAPortInUseThrowsSystemError) {
  ZmqServerTransport first("a", "127.0.0.1");
  EXPECT_THROW(ZmqServerTransport("b", "127.0.0.1", port_of(first.endpoint())), SystemError);
}

TEST(ZmqTransportTest, InvalidConfigurationThrows) {
  EXPECT_THROW(ZmqServerTransport("s", "127.0.0.1", -1), ConfigError);
  EXPECT_THROW(ZmqServerTransport("s", "127.0.0.1", 70000), ConfigError);
  EXPECT_THROW(ZmqServerTransport("s", "127.0.0.1", 0, 0), ConfigError);
  EXPECT_THROW(ZmqServerTransport("", "127.0.0.1"), ConfigError);
  EXPECT_THROW(ZmqServerTransport("s", "not an address"), SystemError);
  EXPECT_THROW(ZmqClientTransport("", Peers{}), ConfigError);
  EXPECT_THROW(ZmqClientTransport(std::string(256, 'w'), Peers{}), ConfigError);
  EXPECT_THROW(
      ZmqClientTransport("w", Peers{{"s", "tcp://127.0.0.1:1"}, {"s", "tcp://127.0.0.1:2"}}),
      ConfigError);
  EXPECT_THROW(ZmqClientTransport("w", Peers{{"s", "nonsense://x"}}), SystemError);
}

TEST(ZmqTransportTest, OversizeMessageIsDroppedAndServerKeepsWorking) {
  constexpr int64_t kMax = 1024;
  ZmqServerTransport server("server", "127.0.0.1", 0, kMax);
  ZmqClientTransport big("big", Peers{{"server", server.endpoint()}});
  ZmqClientTransport small("small", Peers{{"server", server.endpoint()}});

  // Exactly at the limit is fine.
  ASSERT_TRUE(big.send("server", pattern(kMax, 3)));
  auto at_limit = server.receive(kWait);
  ASSERT_TRUE(at_limit.has_value());
  EXPECT_EQ(at_limit->peer, "big");
  EXPECT_EQ(at_limit->bytes, pattern(kMax, 3));

  // Over it: ZeroMQ drops the message and the connection of the peer that sent it.
  ASSERT_TRUE(big.send("server", pattern(4 * kMax, 4)));
  ASSERT_TRUE(small.send("server", to_bytes("normal")));
  auto normal = server.receive(kWait);
  ASSERT_TRUE(normal.has_value());
  EXPECT_EQ(normal->peer, "small");
  EXPECT_EQ(to_string(normal->bytes), "normal");
  // The oversize message never shows up.
  while (auto extra = server.receive(300ms)) {
    EXPECT_LE(extra->bytes.size(), static_cast<size_t>(kMax)) << "from " << extra->peer;
  }
  // And the server still answers.
  ASSERT_TRUE(server.send("small", to_bytes("ack")));
  auto ack = small.receive(kWait);
  ASSERT_TRUE(ack.has_value());
  EXPECT_EQ(to_string(ack->bytes), "ack");
}

TEST(ZmqTransportTest, ServerDropsMalformedMultipart) {
  ZmqServerTransport server("server", "127.0.0.1");
  RawSocket raw(ZMQ_DEALER);
  const std::string id = "raw";
  zmq_setsockopt(raw.get(), ZMQ_ROUTING_ID, id.data(), id.size());
  ASSERT_EQ(zmq_connect(raw.get(), server.endpoint().c_str()), 0);
  raw.send({"one", "two"});  // the server sees three frames: dropped
  raw.send({"ok"});
  auto m = server.receive(kWait);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->peer, "raw");
  EXPECT_EQ(to_string(m->bytes), "ok");
}

TEST(ZmqTransportTest, ClientDropsMalformedMultipart) {
  RawSocket raw(ZMQ_ROUTER);
  ASSERT_EQ(zmq_bind(raw.get(), "tcp://127.0.0.1:*"), 0);
  char endpoint[256] = {};
  size_t length = sizeof(endpoint);
  ASSERT_EQ(zmq_getsockopt(raw.get(), ZMQ_LAST_ENDPOINT, endpoint, &length), 0);

  ZmqClientTransport client("w0", Peers{{"raw-server", endpoint}});
  ASSERT_TRUE(client.send("raw-server", to_bytes("hi")));
  auto hello = raw.receive(kWait);
  ASSERT_EQ(hello, (std::vector<std::string>{"w0", "hi"}));
  raw.send({"w0", "one", "two"});  // the client sees two frames: dropped
  raw.send({"w0", "ok"});
  auto m = client.receive(kWait);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->peer, "raw-server");
  EXPECT_EQ(to_string(m->bytes), "ok");
}

TEST(ZmqTransportTest, ClientWithUnreachableServerNeitherBlocksNorHangs) {
  std::string endpoint;
  {
    ZmqServerTransport gone("gone", "127.0.0.1");
    endpoint = gone.endpoint();
  }
  const auto start = Clock::now();
  {
    ZmqClientTransport client("w0", Peers{{"gone", endpoint}});
    EXPECT_TRUE(client.send("gone", to_bytes("queued")));  // queued until a reconnect
    EXPECT_FALSE(client.receive(100ms).has_value());
  }  // destruction waits at most the linger period
  EXPECT_LT(Clock::now() - start, 5s);
}

TEST(ZmqTransportTest, ClientTalksToTwoServers) {
  ZmqServerTransport ps0("ps0", "127.0.0.1");
  ZmqServerTransport ps1("ps1", "127.0.0.1");
  ZmqClientTransport client("w0", Peers{{"ps0", ps0.endpoint()}, {"ps1", ps1.endpoint()}});
  ASSERT_TRUE(client.send("ps0", to_bytes("to ps0")));
  ASSERT_TRUE(client.send("ps1", to_bytes("to ps1")));
  for (auto* server : {&ps0, &ps1}) {
    auto m = server->receive(kWait);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->peer, "w0");
    EXPECT_EQ(to_string(m->bytes), "to " + server->name());
    ASSERT_TRUE(server->send("w0", to_bytes("from " + server->name())));
  }
  std::set<std::pair<std::string, std::string>> got;
  for (auto& m : receive_n(client, 2)) got.emplace(m.peer, to_string(m.bytes));
  EXPECT_EQ(got, (std::set<std::pair<std::string, std::string>>{{"ps0", "from ps0"},
                                                                {"ps1", "from ps1"}}));
}

TEST(ZmqTransportTest, PeersTalkBothWaysThroughTheirInboxes) {
  ZmqPeerTransport a("worker0", "127.0.0.1");
  ZmqPeerTransport b("worker1", "127.0.0.1");
  ZmqPeerTransport c("worker2", "127.0.0.1");
  EXPECT_FALSE(a.send("worker1", to_bytes("too early")));  // not connected yet
  a.connect(Peers{{"worker1", b.endpoint()}, {"worker2", c.endpoint()}});
  b.connect(Peers{{"worker0", a.endpoint()}, {"worker2", c.endpoint()}});
  c.connect(Peers{{"worker0", a.endpoint()}, {"worker1", b.endpoint()}});
  ASSERT_TRUE(a.send("worker1", to_bytes("offer")));
  auto m = b.receive(kWait);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->peer, "worker0");
  EXPECT_EQ(to_string(m->bytes), "offer");
  ASSERT_TRUE(b.send("worker0", to_bytes("answer")));  // a reply is an ordinary send
  ASSERT_TRUE(c.send("worker0", to_bytes("from c")));
  std::set<std::pair<std::string, std::string>> got;
  for (auto& r : receive_n(a, 2)) got.emplace(r.peer, to_string(r.bytes));
  EXPECT_EQ(got, (std::set<std::pair<std::string, std::string>>{{"worker1", "answer"},
                                                                {"worker2", "from c"}}));
  EXPECT_FALSE(a.send("worker9", to_bytes("nobody")));
  EXPECT_THROW(a.connect(Peers{}), Error);
}

}  // namespace
}  // namespace gradwire::comm
