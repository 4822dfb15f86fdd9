#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "gradwire/core/error.h"
#include "gradwire/strategy/gossip/protocol.h"
#include "gradwire/strategy/gossip/topology.h"
#include "gradwire/strategy/gossip/trigger.h"

namespace gradwire::strategy::gossip {
namespace {

std::vector<int> peers(Topology& t, int n) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i) out.push_back(t.next_peer().value_or(-1));
  return out;
}

TEST(GossipTopologyTest, RingAlternatesNeighboursAndSkipsDroppedPeers) {
  auto t = Topology::parse("ring", 2, 5);
  EXPECT_EQ(peers(t, 4), (std::vector<int>{3, 1, 3, 1}));
  t.drop(3);
  EXPECT_EQ(peers(t, 2), (std::vector<int>{4, 1}));
  t.drop(1);
  t.drop(4);
  EXPECT_EQ(peers(t, 2), (std::vector<int>{0, 0}));
  EXPECT_EQ(t.dropped(), (std::vector<int>{1, 3, 4}));
  t.drop(0);
  EXPECT_FALSE(t.next_peer().has_value());  // alone
}

TEST(GossipTopologyTest, ExponentialCyclesPowersOfTwo) {
  auto t = Topology::parse("exponential", 1, 8);
  EXPECT_EQ(peers(t, 6), (std::vector<int>{2, 3, 5, 2, 3, 5}));  // +1, +2, +4
  auto two = Topology::parse("exponential", 1, 2);
  EXPECT_EQ(peers(two, 3), (std::vector<int>{0, 0, 0}));
  t.drop(3);
  EXPECT_EQ(peers(t, 3), (std::vector<int>{2, 4, 5}));  // +2 lands on 3: the next live, 4
}

TEST(GossipTopologyTest, RandomIsSeededUniformOverLivePeersAndNeverSelf) {
  auto a = Topology::parse("random:seed=7", 0, 4);
  auto b = Topology::parse("random:seed=7", 0, 4);
  EXPECT_EQ(peers(a, 50), peers(b, 50));
  std::map<int, int> seen;
  for (int p : peers(a, 3000)) ++seen[p];
  EXPECT_EQ(seen.count(0), 0u);
  for (int p : {1, 2, 3}) EXPECT_NEAR(seen[p], 1000, 150) << p;
  a.drop(2);
  for (int p : peers(a, 200)) EXPECT_NE(p, 2);
  EXPECT_EQ(a.canonical(), "random:seed=7");
}

TEST(GossipTopologyTest, BadSpecsAreRefused) {
  EXPECT_THROW(Topology::parse("star", 0, 4), ConfigError);
  EXPECT_THROW(Topology::parse("ring:seed=1", 0, 4), ConfigError);
  EXPECT_THROW(Topology::parse("random:seed=-1", 0, 4), ConfigError);
  EXPECT_THROW(Topology::parse("ring", 4, 4), ConfigError);
}

TEST(GossipTriggerTest, EveryAndPeriod) {
  auto every = Trigger::parse("every");
  for (int s = 0; s < 3; ++s) EXPECT_TRUE(every.after_step(0, 0));
  auto period = Trigger::parse("period:3");
  EXPECT_EQ(period.canonical(), "period:k=3");
  std::vector<bool> fired;
  for (int s = 0; s < 9; ++s) {
    fired.push_back(period.after_step(0, 0));
    if (fired.back()) period.exchanged();
  }
  EXPECT_EQ(fired, (std::vector<bool>{false, false, true, false, false, true, false, false, true}));
  EXPECT_THROW(Trigger::parse("period:0"), ConfigError);
  EXPECT_THROW(Trigger::parse("sometimes"), ConfigError);
}

// Steps of each relative size `change` (the drift grows by it per step); returns how many
// steps each exchange took.
std::vector<size_t> gaps(Trigger& t, double change, int steps) {
  std::vector<size_t> out;
  double drift = 0;
  size_t since = 0;
  for (int s = 0; s < steps; ++s) {
    drift += change;
    ++since;
    if (t.after_step(change, drift)) {
      out.push_back(since);
      t.exchanged();
      drift = 0;
      since = 0;
    }
  }
  return out;
}

TEST(GossipTriggerTest, AdaptiveCalibratesThenExchangesLessAsStepsShrinkAndAgainAfterAnLrDrop) {
  auto t = Trigger::parse("adaptive:calibration=10,kappa=10,t_max=64");
  EXPECT_EQ(t.canonical(), "adaptive:calibration=10,ema=0.05,kappa=10,t_max=64");
  EXPECT_EQ(gaps(t, 1.0 / 128, 10), std::vector<size_t>(10, 1));  // calibration: every step
  EXPECT_FALSE(t.calibrating());
  EXPECT_DOUBLE_EQ(t.theta(), 10.0 / 128);  // kappa x d_bar (binary fractions: exact sums)
  // Steps as large as in calibration: every 10 steps (the drift reaches theta).
  EXPECT_EQ(gaps(t, 1.0 / 128, 30), (std::vector<size_t>{10, 10, 10}));
  // Training settles: steps half as large, exchanges half as often.
  EXPECT_EQ(gaps(t, 1.0 / 256, 40), (std::vector<size_t>{20, 20}));
  // Tiny steps: t_max forces an exchange.
  EXPECT_EQ(gaps(t, 1e-6, 128), (std::vector<size_t>{64, 64}));
  // A learning-rate drop rescales the steps; a new calibration makes theta match them.
  t.learning_rate_changed();
  EXPECT_TRUE(t.calibrating());
  EXPECT_EQ(gaps(t, 1.0 / 1024, 10), std::vector<size_t>(10, 1));
  EXPECT_DOUBLE_EQ(t.theta(), 10.0 / 1024);
  EXPECT_EQ(gaps(t, 1.0 / 1024, 20), (std::vector<size_t>{10, 10}));
}

TEST(GossipProtocolTest, RoundTripsAndRefusesCorruptMessages) {
  Message m;
  m.type = MessageType::kAnswer;
  m.token = 0x1234567890abcdefULL;
  m.sender = 3;
  m.exchange = 42;
  m.weight = 0.25;
  m.tensors = {Bytes{1, 2, 3}, Bytes{}, Bytes(100, 7)};
  const Bytes bytes = encode(m);
  const Message back = parse(bytes);
  EXPECT_EQ(back.type, m.type);
  EXPECT_EQ(back.token, m.token);
  EXPECT_EQ(back.sender, m.sender);
  EXPECT_EQ(back.exchange, m.exchange);
  EXPECT_EQ(back.weight, m.weight);
  EXPECT_EQ(back.tensors, m.tensors);
  EXPECT_EQ(encode(back), bytes);
  // Every truncation, and a trailing byte, is refused.
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(parse(std::span<const uint8_t>(bytes.data(), n)), PayloadError) << n;
  }
  Bytes longer = bytes;
  longer.push_back(0);
  EXPECT_THROW(parse(longer), PayloadError);
  // A bad magic, version, type, weight, or a busy message with tensors.
  const auto corrupt = [&](size_t at, uint8_t value) {
    Bytes b = bytes;
    b[at] = value;
    return b;
  };
  EXPECT_THROW(parse(corrupt(0, 0)), PayloadError);
  EXPECT_THROW(parse(corrupt(4, 9)), PayloadError);
  EXPECT_THROW(parse(corrupt(5, 0)), PayloadError);
  EXPECT_THROW(parse(corrupt(5, 10)), PayloadError);
  for (auto bare : {MessageType::kBusy, MessageType::kTaken, MessageType::kAlive}) {
    EXPECT_THROW(parse(corrupt(5, static_cast<uint8_t>(bare))), PayloadError);  // has tensors
  }
  Message attached = m;
  attached.attachment = {1, 2};
  EXPECT_THROW(parse(encode(attached)), PayloadError);  // only reports carry one
  attached.type = MessageType::kReport;
  EXPECT_EQ(parse(encode(attached)).attachment, attached.attachment);
  Message bad_weight = m;
  bad_weight.weight = -1;
  EXPECT_THROW(parse(encode(bad_weight)), PayloadError);
  bad_weight.weight = std::nan("");
  EXPECT_THROW(parse(encode(bad_weight)), PayloadError);
}

TEST(GossipProtocolTest, ReportBodiesRoundTripAndRefuseCorruptOnes) {
  ReportBody body;
  body.stats.steps = 7;
  body.stats.offers = 3;
  body.stats.merges = 5;
  body.stats.busy = 1;
  body.stats.dropped_messages = 2;
  body.stats.bytes_sent = 1000;
  body.stats.bytes_bookkeeping = 99;
  body.stats.steps_between = {1, 2, 4};
  body.stats.dropped_peers = {3};
  body.note = {'h', 'i'};
  const Bytes bytes = encode(body);
  const ReportBody back = parse_report_body(bytes);
  EXPECT_EQ(back.stats.steps, 7u);
  EXPECT_EQ(back.stats.offers, 3u);
  EXPECT_EQ(back.stats.merges, 5u);
  EXPECT_EQ(back.stats.busy, 1u);
  EXPECT_EQ(back.stats.dropped_messages, 2u);
  EXPECT_EQ(back.stats.bytes_sent, 1000u);
  EXPECT_EQ(back.stats.bytes_bookkeeping, 99u);
  EXPECT_EQ(back.stats.steps_between, body.stats.steps_between);
  EXPECT_EQ(back.stats.dropped_peers, body.stats.dropped_peers);
  EXPECT_EQ(back.note, body.note);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(parse_report_body(std::span<const uint8_t>(bytes.data(), n)), PayloadError) << n;
  }
  Bytes huge = bytes;
  huge[7 * 8] = 0xff;  // the interval count: more than the bytes hold
  huge[7 * 8 + 3] = 0x7f;
  EXPECT_THROW(parse_report_body(huge), PayloadError);
}

}  // namespace
}  // namespace gradwire::strategy::gossip
