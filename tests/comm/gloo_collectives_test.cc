#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <thread>

#include "../common/gloo_harness.h"
#include "gradwire/comm/gloo_collectives.h"
#include "gradwire/core/error.h"
#include "gradwire/core/failure_report.h"

namespace gradwire::comm {
namespace {

using namespace std::chrono_literals;
using gradwire::testing::quick_timeouts;
using gradwire::testing::run_gloo_ranks;

// A failure-report path of this test process (the launcher gives each rank one); the
// ranks of these tests are threads and share it: the first report stands.
std::string fresh_report_path(const std::string& name) {
  const std::string path = "/tmp/gradwire_gloo_test_" + std::to_string(::getpid()) + "_" + name;
  std::remove(path.c_str());
  return path;
}

TEST(GlooCollectivesTest, AllreduceFloat32AndFloat16) {
  run_gloo_ranks(3, [](int rank, std::unique_ptr<Collectives>& cp) {
    Collectives& c = *cp;
    std::vector<float> v{1.0f, float(rank), 0.5f};
    c.allreduce_sum(v.data(), v.size(), DataType::kFloat32);
    EXPECT_EQ(v, (std::vector<float>{3.0f, 3.0f, 1.5f}));
    at::Tensor h = at::full({4}, rank + 1.0, at::kHalf);
    c.allreduce_sum(h.data_ptr(), 4, DataType::kFloat16);
    EXPECT_TRUE(h.to(at::kFloat).eq(6.0).all().item<bool>());
    EXPECT_EQ(c.traffic().contributed, 12u + 8u);
    // Ring allreduce over 3 ranks: 2 x 2 chunks of ceil(B/3) bytes.
    EXPECT_EQ(c.traffic().on_wire, 2u * 2 * 4 + 2u * 2 * 3);
  });
}

TEST(GlooCollectivesTest, AllreduceInt8SumAndFloatMax) {
  run_gloo_ranks(3, [](int rank, std::unique_ptr<Collectives>& cp) {
    Collectives& c = *cp;
    std::vector<int8_t> q{static_cast<int8_t>(40 * (rank - 1)), -42, static_cast<int8_t>(rank)};
    c.allreduce_sum(q.data(), q.size(), DataType::kInt8);
    EXPECT_EQ(q, (std::vector<int8_t>{0, -126, 3}));
    std::vector<float> m{float(rank), -float(rank), 0.5f};
    c.allreduce_max(m.data(), m.size());
    EXPECT_EQ(m, (std::vector<float>{2.0f, 0.0f, 0.5f}));
  });
}

TEST(GlooCollectivesTest, AlltoallWithEmptyAndUnequalMessages) {
  run_gloo_ranks(3, [](int rank, std::unique_ptr<Collectives>& cp) {
    Collectives& c = *cp;
    // Rank s sends rank d (d + 1) * s bytes of value 10 s + d: rank 0 sends nothing at all.
    std::vector<Bytes> to(3), from;
    uint64_t sent = 0;
    for (int d = 0; d < 3; ++d) {
      to[d] = Bytes((d + 1) * rank, static_cast<uint8_t>(10 * rank + d));
      if (d != rank) sent += to[d].size();
    }
    for (int round = 0; round < 2; ++round) {  // the second reuses the buffers
      c.alltoall_bytes(to, from);
      ASSERT_EQ(from.size(), 3u);
      for (int s = 0; s < 3; ++s) {
        EXPECT_EQ(from[s], Bytes((rank + 1) * s, static_cast<uint8_t>(10 * s + rank)))
            << "from rank " << s;
      }
    }
    EXPECT_EQ(c.traffic().contributed, 2 * sent);
    EXPECT_EQ(c.traffic().on_wire, 2 * (2 * 8 + sent));
  });
}

TEST(GlooCollectivesTest, AllgatherVariableSizesAndBroadcast) {
  run_gloo_ranks(3, [](int rank, std::unique_ptr<Collectives>& cp) {
    Collectives& c = *cp;
    Bytes mine(2 * rank, static_cast<uint8_t>(10 + rank));  // rank 0 sends nothing
    auto all = c.allgather_bytes(mine);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(all[r], Bytes(2 * r, static_cast<uint8_t>(10 + r)));
    std::vector<float> v(3, float(rank));
    c.broadcast(v.data(), sizeof(float) * 3, 2);
    EXPECT_EQ(v, std::vector<float>(3, 2.0f));
    c.barrier();
    // Allgather: sizes (8 bytes) and data padded to 4 bytes, each forwarded to 2 peers;
    // broadcast from rank 2: a binomial tree in which only the root sends (twice).
    EXPECT_EQ(c.traffic().contributed, 2u * rank + (rank == 2 ? 12u : 0u));
    EXPECT_EQ(c.traffic().on_wire, 2u * 8 + 2u * 4 + (rank == 2 ? 2u * 12 : 0u));
  });
}

// Hang diagnosis costs nothing while collectives are fast: no rank writes its progress
// to the store (a round trip to rank 0 per collective, per bucket, per step, before).
TEST(GlooCollectivesTest, FastCollectivesLeaveTheStoreAlone) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::exception_ptr> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        GlooOptions options;
        options.timeout = 30s;
        options.bind_hostname = "127.0.0.1";
        auto c = make_gloo_collectives(store, r, 2, options);
        std::vector<float> v(16, 1.0f);
        for (int i = 0; i < 20; ++i) c->allreduce_sum(v.data(), v.size(), DataType::kFloat32);
        c->allgather_bytes(Bytes(3, static_cast<uint8_t>(r)));
        EXPECT_EQ(v[0], 1048576.0f);  // 1 doubled 20 times
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  EXPECT_FALSE(store->check({"progress/0"}));
  EXPECT_FALSE(store->check({"progress/1"}));
}

// An alltoall's point-to-point transfers may take longer than the probe that publishes a
// slow collective's progress (a second by default; a DiLoCo fragment on a 10 Mbit link
// does): c10d abandons a send or receive whose timed wait expires, so they must wait out
// the whole timeout. Here the probe is 1 ms and each message 8 MB, so the probe also
// expires as collectives complete (a race that once failed them).
TEST(GlooCollectivesTest, AlltoallTransfersMayOutlastTheSlowProbe) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  constexpr int kWorld = 3;
  constexpr size_t kBytes = size_t{8} << 20;
  std::vector<std::exception_ptr> errors(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      try {
        GlooOptions options;
        options.timeout = 30s;
        options.slow_after = 1ms;
        options.bind_hostname = "127.0.0.1";
        auto c = make_gloo_collectives(store, r, kWorld, options);
        std::vector<Bytes> to(kWorld), from;
        for (int d = 0; d < kWorld; ++d) to[d] = Bytes(kBytes, static_cast<uint8_t>(10 * r + d));
        for (int round = 0; round < 2; ++round) {
          c->alltoall_bytes(to, from);
          for (int s = 0; s < kWorld; ++s) {
            EXPECT_EQ(from[s], Bytes(kBytes, static_cast<uint8_t>(10 * s + r))) << "from " << s;
          }
        }
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < kWorld; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << r << ": " << e.what();
    }
  }
}

TEST(GlooCollectivesTest, RankThatNeverJoinsIsNamedWithinTheTimeout) {
  std::mutex mu;
  std::vector<std::string> messages;
  const auto start = std::chrono::steady_clock::now();
  auto options = quick_timeouts(/*join=*/5s);
  options.failure_report_file = fresh_report_path("never_joins");
  try {
    run_gloo_ranks(3, [](int, std::unique_ptr<Collectives>&) { FAIL() << "joined without rank 2"; },
                   options, /*ranks_to_start=*/{0, 1});
  } catch (const TimeoutError& e) {
    messages.push_back(e.what());
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_NE(messages[0].find("rank 2 did not join within 5.0 s; 2 of 3 joined"), std::string::npos)
      << messages[0];
  EXPECT_LT(elapsed, 15.0);
  // The launcher learns whom to blame.
  const auto report = read_failure_report(options.failure_report_file);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->blamed, std::vector<int>{2});
  EXPECT_NE(report->message.find("rank 2 did not join"), std::string::npos) << report->message;
  std::remove(options.failure_report_file.c_str());
}

TEST(GlooCollectivesTest, AMasterAddressThatDoesNotResolveIsNamedAtOnce) {
  // Under Slurm, a node name from `scontrol show hostnames` may not resolve: every rank must
  // say so (a ConfigError, at once) instead of retrying until the join timeout and then
  // blaming the port.
  for (int rank : {0, 1}) {
    comm::WorldInfo world;
    world.rank = rank;
    world.world_size = 2;
    world.master_addr = "no-such-node.invalid";
    world.master_port = 29999;
    comm::ConnectOptions options;
    options.join_timeout = 30s;
    try {
      comm::connect(world, options);
      FAIL() << "connect to an unresolvable MASTER_ADDR returned";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("MASTER_ADDR 'no-such-node.invalid' does not resolve"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(GlooCollectivesTest, AnEmptyMasterAddressIsAnErrorAndAnUnsetOneIsThisHost) {
  // A job script's unset variable (MASTER_ADDR=$NODE outside an allocation) must not turn
  // into this host: across nodes every rank would serve or wait alone.
  struct Restore {
    ~Restore() {
      for (const char* name : {"MASTER_ADDR", "RANK", "WORLD_SIZE"}) ::unsetenv(name);
    }
  } restore;
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("MASTER_ADDR", "", 1);
  try {
    comm::WorldInfo::from_environment();
    FAIL() << "an empty MASTER_ADDR was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR is set but empty"), std::string::npos)
        << e.what();
  }
  ::unsetenv("MASTER_ADDR");
  EXPECT_EQ(comm::WorldInfo::from_environment().master_addr, "127.0.0.1");
  ::setenv("MASTER_ADDR", "10.1.2.3", 1);
  EXPECT_EQ(comm::WorldInfo::from_environment().master_addr, "10.1.2.3");
}

TEST(GlooCollectivesTest, RankThatStopsCallingIsNamedWithinTheTimeout) {
  std::mutex mu;
  std::string message;
  std::atomic<bool> done{false};
  auto options = quick_timeouts(20s, /*op=*/1500ms);
  options.failure_report_file = fresh_report_path("stops_calling");
  try {
    run_gloo_ranks(
        3,
        [&](int rank, std::unique_ptr<Collectives>& cp) {
          Collectives& c = *cp;
          c.barrier();
          if (rank == 1) {  // stays alive but skips the next collective
            while (!done) std::this_thread::sleep_for(10ms);
            return;
          }
          std::vector<float> v(4, 1.0f);
          try {
            c.allreduce_sum(v.data(), v.size(), DataType::kFloat32);
          } catch (const TimeoutError& e) {
            std::lock_guard lock(mu);
            message = e.what();
          }
          done = true;
        },
        options);
  } catch (const std::exception&) {
    // Tearing down a broken group may throw too; the message above is what matters.
  }
  EXPECT_NE(message.find("rank 1 did not arrive"), std::string::npos) << message;
  const auto report = read_failure_report(options.failure_report_file);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->blamed, std::vector<int>{1});
  std::remove(options.failure_report_file.c_str());
}

TEST(GlooCollectivesTest, RankThatThrowsLeavesPromptlyAndPeersFailNamingIt) {
  // Rank 1 fails between collectives while ranks 0 and 2 wait in the next one. Rank 1 must
  // not sit in a farewell barrier for the collective timeout; the others must fail soon
  // after, naming rank 1 (its connections closed: a quick failure, named once the other
  // survivor has failed too).
  std::atomic<double> rank1_exit_s{-1};
  std::mutex mu;
  std::vector<std::pair<double, std::string>> failures;  // ranks 0 and 2: when, and the error
  const auto start = std::chrono::steady_clock::now();
  auto since_start = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  try {
    run_gloo_ranks(
        3,
        [&](int rank, std::unique_ptr<Collectives>& cp) {
          cp->barrier();
          if (rank == 1) {
            struct Timer {
              std::function<void()> on_exit;
              ~Timer() { on_exit(); }
            } timer{[&] { rank1_exit_s = since_start(); }};
            auto collectives = std::move(cp);  // destroyed while the exception unwinds
            throw std::runtime_error("rank 1 fails");
          }
          std::vector<float> v(4, 1.0f);
          try {
            cp->allreduce_sum(v.data(), v.size(), DataType::kFloat32);
          } catch (const Error& e) {
            std::lock_guard lock(mu);
            failures.emplace_back(since_start(), e.what());
          }
        },
        quick_timeouts(20s, /*op=*/20s));
  } catch (const std::runtime_error&) {
  }
  EXPECT_GE(rank1_exit_s.load(), 0.0);
  EXPECT_LT(rank1_exit_s.load(), 10.0);
  ASSERT_EQ(failures.size(), 2u);
  for (const auto& [seconds, message] : failures) {
    EXPECT_LT(seconds, 15.0) << message;
    EXPECT_TRUE(message.find("rank 1 had not reached it") != std::string::npos ||
                message.find("rank 1 did not arrive") != std::string::npos)
        << message;
    EXPECT_EQ(message.find("ranks "), std::string::npos) << message;  // rank 1 alone
  }
}

// Gloo writes with writev: a write to a peer that has closed raises SIGPIPE, which under
// the default disposition killed this test's process (ranks as threads) before the
// survivors could name the peer. The group's threads are made with SIGPIPE blocked (the
// creating thread's mask, inherited), so such a write fails with EPIPE and the collective
// with an error; the process's disposition, and the program's own threads, are left as
// they were (before, making a group set SIGPIPE to ignored for the whole process and, through
// exec, its children).

// This process's threads whose signal mask blocks SIGPIPE (/proc's SigBlk).
int threads_blocking_sigpipe() {
  int count = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream status(task.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("SigBlk:", 0) != 0) continue;
      count += (std::stoull(line.substr(7), nullptr, 16) >> (SIGPIPE - 1)) & 1;
    }
  }
  return count;
}

bool this_thread_blocks_sigpipe() {
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  return sigismember(&mask, SIGPIPE) == 1;
}

TEST(GlooCollectivesTest, AWriteToAPeerThatClosedIsAnErrorNotADeathBySignal) {
  ::signal(SIGPIPE, SIG_DFL);
  const int before = threads_blocking_sigpipe();
  std::string error;
  int with_groups = 0;
  bool creator_blocks = true;
  try {
    run_gloo_ranks(
        2,
        [&](int rank, std::unique_ptr<Collectives>& cp) {
          cp->barrier();
          if (rank == 0) {
            with_groups = threads_blocking_sigpipe();
            creator_blocks = this_thread_blocks_sigpipe();
          }
          cp->barrier();
          if (rank == 1) {
            auto collectives = std::move(cp);  // closed while the exception unwinds
            throw std::runtime_error("rank 1 leaves");
          }
          std::this_thread::sleep_for(500ms);  // rank 1's connections closed by now
          std::vector<float> v(1 << 18, 1.0f);
          try {
            for (int i = 0; i < 4; ++i) cp->allreduce_sum(v.data(), v.size(), DataType::kFloat32);
          } catch (const Error& e) {
            error = e.what();
          }
        },
        quick_timeouts(20s, /*op=*/10s));
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(error.empty());  // an error, and this process still alive
  EXPECT_GE(with_groups - before, 4) << "each rank's group worker and Gloo event loop";
  EXPECT_FALSE(creator_blocks) << "the creating thread's mask is put back";
  struct sigaction now {};
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

void count_sigpipe(int) {}

TEST(GlooCollectivesTest, AProgramsOwnSigpipeHandlerIsKept) {
  ::signal(SIGPIPE, count_sigpipe);
  run_gloo_ranks(2, [](int, std::unique_ptr<Collectives>& c) { c->barrier(); });
  struct sigaction now {};
  ASSERT_EQ(::sigaction(SIGPIPE, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, &count_sigpipe);
  ::signal(SIGPIPE, SIG_DFL);
}

// A store shared by threads whose server "exits" when `gone` is set: every call then
// throws, as a TCPStore client's does once rank 0's process has ended. A write of a
// progress key waits `publish_delay` first (a rank that reaches its failure later).
class StoreThatCanLeave : public c10d::Store {
 public:
  StoreThatCanLeave(c10::intrusive_ptr<c10d::Store> inner, const std::atomic<bool>& gone,
                    std::chrono::milliseconds publish_delay)
      : inner_(std::move(inner)), gone_(gone), publish_delay_(publish_delay) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    if (key.find("progress") != std::string::npos) std::this_thread::sleep_for(publish_delay_);
    check_here();
    inner_->set(key, value);
  }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    check_here();
    return inner_->compareSet(key, expected, desired);
  }
  std::vector<uint8_t> get(const std::string& key) override {
    check_here();
    return inner_->get(key);
  }
  int64_t add(const std::string& key, int64_t value) override {
    check_here();
    return inner_->add(key, value);
  }
  bool deleteKey(const std::string& key) override {
    check_here();
    return inner_->deleteKey(key);
  }
  bool check(const std::vector<std::string>& keys) override {
    check_here();
    return inner_->check(keys);
  }
  int64_t getNumKeys() override {
    check_here();
    return inner_->getNumKeys();
  }
  void wait(const std::vector<std::string>& keys) override {
    check_here();
    inner_->wait(keys);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    check_here();
    inner_->wait(keys, t);
  }

 private:
  void check_here() const {
    if (gone_) throw std::runtime_error("Connection reset by peer (the store's server exited)");
  }
  c10::intrusive_ptr<c10d::Store> inner_;
  const std::atomic<bool>& gone_;
  std::chrono::milliseconds publish_delay_;
};

TEST(GlooCollectivesTest, SurvivorNamesTheDeadRankAfterTheStoreServerLeft) {
  // Rank 1 exits; rank 0 (which serves the store) fails and leaves, while rank 2, whose
  // failure began 0.7 s later, still polls the store: it must keep the reading it had
  // (rank 1 behind) rather than report the store as unreadable (a race seen in CI).
  auto shared = c10::make_intrusive<c10d::HashStore>();
  std::atomic<bool> server_gone{false};
  std::mutex mu;
  std::map<int, std::string> failures;  // ranks 0 and 2
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      try {
        GlooOptions options;
        options.timeout = 20s;
        options.bind_hostname = "127.0.0.1";
        auto store =
            c10::make_intrusive<StoreThatCanLeave>(shared, server_gone, r == 2 ? 700ms : 0ms);
        auto c = make_gloo_collectives(store, r, 3, options);
        c->barrier();
        if (r == 1) {
          auto leaving = std::move(c);  // its connections close as it unwinds
          throw std::runtime_error("rank 1 fails");
        }
        std::vector<float> v(4, 1.0f);
        try {
          c->allreduce_sum(v.data(), v.size(), DataType::kFloat32);
        } catch (const Error& e) {
          std::lock_guard lock(mu);
          failures[r] = e.what();
        }
        if (r == 0) {
          // Rank 0 leaves once rank 2 has published and read once (bounded: rank 2 may
          // not get there if it failed otherwise; the checks below then say so).
          const auto until = std::chrono::steady_clock::now() + 10s;
          while (!shared->check({"progress/2"}) && std::chrono::steady_clock::now() < until) {
            std::this_thread::sleep_for(10ms);
          }
          std::this_thread::sleep_for(300ms);
          server_gone = true;
        }
      } catch (const std::exception& e) {
        if (r == 1) return;
        std::lock_guard lock(mu);
        failures[r] = std::string("unexpected: ") + e.what();
      }
    });
  }
  for (auto& t : ranks) t.join();
  ASSERT_EQ(failures.size(), 2u);
  for (const auto& [rank, message] : failures) {
    EXPECT_NE(message.find("rank 1 had not reached it"), std::string::npos)
        << rank << ": " << message;
    EXPECT_EQ(message.find("could not read"), std::string::npos) << rank << ": " << message;
  }
}

}  // namespace
}  // namespace gradwire::comm
