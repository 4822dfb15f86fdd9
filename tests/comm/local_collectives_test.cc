#include "gradwire/comm/local_collectives.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "gradwire/core/error.h"

namespace gradwire::comm {
namespace {

using namespace std::chrono_literals;

TEST(LocalCollectivesTest, AllreduceSumsInRankOrder) {
  run_local_ranks(4, 5s, [](Collectives& c) {
    std::vector<float> v{float(c.rank()), 1.0f, -2.0f * c.rank()};
    c.allreduce_sum(v.data(), v.size(), DataType::kFloat32);
    EXPECT_EQ(v, (std::vector<float>{6.0f, 4.0f, -12.0f}));
    EXPECT_EQ(c.bytes_sent(), 12u);
  });
}

TEST(LocalCollectivesTest, AllgatherKeepsEachRanksSize) {
  run_local_ranks(3, 5s, [](Collectives& c) {
    Bytes mine(c.rank() + 1, static_cast<uint8_t>(c.rank()));
    auto all = c.allgather_bytes(mine);
    ASSERT_EQ(all.size(), 3u);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(all[r], Bytes(r + 1, static_cast<uint8_t>(r)));
  });
}

TEST(LocalCollectivesTest, BroadcastCopiesRoot) {
  run_local_ranks(3, 5s, [](Collectives& c) {
    std::vector<float> v(5, float(c.rank()));
    c.broadcast(v.data(), v.size() * sizeof(float), 1);
    EXPECT_EQ(v, std::vector<float>(5, 1.0f));
  });
}

TEST(LocalCollectivesTest, MissingRankTimesOutNamingIt) {
  auto group = std::make_shared<LocalGroup>(3, 300ms);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {  // rank 2 never arrives
    threads.emplace_back([&, r] {
      LocalCollectives c(group, r);
      try {
        c.barrier();
      } catch (const TimeoutError& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    EXPECT_NE(e.find("rank 2 did not arrive"), std::string::npos) << e;
    EXPECT_NE(e.find("2 of 3 arrived"), std::string::npos) << e;
  }
}

}  // namespace
}  // namespace gradwire::comm
