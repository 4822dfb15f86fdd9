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
    EXPECT_EQ(c.traffic().contributed, 12u);
    EXPECT_EQ(c.traffic().on_wire, 2u * 3 * 3);  // ring: 2(W-1) chunks of ceil(12/4)
  });
}

TEST(WireBytesTest, BinomialBroadcastSendsOncePerNonRootRankAndLog2WFromTheRoot) {
  for (int world = 1; world <= 9; ++world) {
    for (int root = 0; root < world; ++root) {
      int total = 0;
      for (int rank = 0; rank < world; ++rank) total += tree_broadcast_sends(world, rank, root);
      EXPECT_EQ(total, world - 1) << "world " << world << " root " << root;
      int log2_ceil = 0;
      while ((1 << log2_ceil) < world) ++log2_ceil;
      EXPECT_EQ(tree_broadcast_sends(world, root, root), log2_ceil) << "world " << world;
    }
  }
  EXPECT_EQ(ring_allreduce_wire_bytes(1000, 4), 2u * 3 * 250);
  EXPECT_EQ(ring_allreduce_wire_bytes(1000, 1), 0u);
  EXPECT_EQ(ring_allgather_wire_bytes(100, 4), 300u);
}

TEST(LocalCollectivesTest, AllreduceInt8SumAndFloatMax) {
  run_local_ranks(3, 5s, [](Collectives& c) {
    std::vector<int8_t> q{static_cast<int8_t>(40 * (c.rank() - 1)), -42,
                          static_cast<int8_t>(c.rank())};
    c.allreduce_sum(q.data(), q.size(), DataType::kInt8);
    EXPECT_EQ(q, (std::vector<int8_t>{0, -126, 3}));
    std::vector<float> m{float(c.rank()), -float(c.rank()), 0.5f};
    c.allreduce_max(m.data(), m.size());
    EXPECT_EQ(m, (std::vector<float>{2.0f, 0.0f, 0.5f}));
  });
}

TEST(LocalCollectivesTest, AlltoallDeliversEachPairsMessageAndCountsWhatLeavesTheRank) {
  run_local_ranks(3, 5s, [](Collectives& c) {
    // Rank s sends rank d (d + 1) * s bytes of value 10 s + d; nothing to rank 0 from 0.
    std::vector<Bytes> to(3);
    uint64_t sent = 0;
    for (int d = 0; d < 3; ++d) {
      to[d] = Bytes((d + 1) * c.rank(), static_cast<uint8_t>(10 * c.rank() + d));
      if (d != c.rank()) sent += to[d].size();
    }
    std::vector<Bytes> from;
    c.alltoall_bytes(to, from);
    ASSERT_EQ(from.size(), 3u);
    for (int s = 0; s < 3; ++s) {
      EXPECT_EQ(from[s], Bytes((c.rank() + 1) * s, static_cast<uint8_t>(10 * s + c.rank())))
          << "from rank " << s;
    }
    EXPECT_EQ(c.traffic().contributed, sent);
    EXPECT_EQ(c.traffic().on_wire, 2 * 8 + sent);  // sizes to 2 peers, then the data
    EXPECT_THROW(c.alltoall_bytes(std::vector<Bytes>(2), from), Error);
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
