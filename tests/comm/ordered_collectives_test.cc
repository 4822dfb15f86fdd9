#include "gradwire/comm/ordered_collectives.h"

#include <gtest/gtest.h>

#include <thread>

#include "gradwire/comm/local_collectives.h"
#include "gradwire/core/error.h"

namespace gradwire::comm {
namespace {

using namespace std::chrono_literals;

// Per rank: a turn reserved on the main thread for work another thread issues later (as
// the gradient hooks reserve a bucket's turn for the exchange thread), then a collective of
// the main thread. On rank 0 the other thread is late, so without the turns rank 0 would
// issue the main thread's collective first and pair it with rank 1's other one.
TEST(OrderedCollectivesTest, CallsFromTwoThreadsReachTheWireInTheReservedOrder) {
  auto group = std::make_shared<LocalGroup>(2, 5s);
  std::vector<std::thread> ranks;
  std::vector<float> first(2), second(2);
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back([&, rank] {
      OrderedCollectives c(std::make_unique<LocalCollectives>(group, rank));
      const uint64_t turn = c.reserve_turn();
      std::thread later([&] {
        if (rank == 0) std::this_thread::sleep_for(100ms);
        c.begin_turn(turn);
        float v = 1;
        c.allreduce_sum(&v, 1, DataType::kFloat32);  // inside the turn: passes through
        c.end_turn(turn);
        first[rank] = v;
      });
      float w = 100;
      c.allreduce_sum(&w, 1, DataType::kFloat32);  // takes the next turn
      second[rank] = w;
      later.join();
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(first, (std::vector<float>{2, 2}));
  EXPECT_EQ(second, (std::vector<float>{200, 200}));
}

TEST(OrderedCollectivesTest, ATurnThatNeverComesTimesOutNamingIt) {
  auto group = std::make_shared<LocalGroup>(1, 200ms);
  OrderedCollectives c(std::make_unique<LocalCollectives>(group, 0));
  c.reserve_turn();  // reserved, never served
  float v = 1;
  try {
    c.allreduce_sum(&v, 1, DataType::kFloat32);
    FAIL() << "expected a timeout";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("waited 0 s for its turn on the communicator (turn 1, "
                                         "serving 0)"),
              std::string::npos)
        << e.what();
  }
}

// A DiLoCo exchange holds one turn for many operations, each within the timeout, longer
// than the timeout in all: a caller waiting behind it waits as long as it makes progress.
TEST(OrderedCollectivesTest, AWaitLastsAsLongAsTheTurnHolderMakesProgress) {
  auto group = std::make_shared<LocalGroup>(1, 300ms);
  OrderedCollectives c(std::make_unique<LocalCollectives>(group, 0));
  const uint64_t turn = c.reserve_turn();
  std::thread holder([&] {
    c.begin_turn(turn);
    for (int i = 0; i < 6; ++i) {  // 6 x 100 ms: twice the timeout
      std::this_thread::sleep_for(100ms);
      float v = 1;
      c.allreduce_sum(&v, 1, DataType::kFloat32);
    }
    c.end_turn(turn);
  });
  std::this_thread::sleep_for(20ms);  // the holder has its turn
  float w = 3;
  EXPECT_NO_THROW(c.allreduce_sum(&w, 1, DataType::kFloat32));
  EXPECT_EQ(w, 3.0f);
  holder.join();
}

// A caller whose wait timed out is skipped once the turns before it end: the communicator
// serves later callers instead of timing out every one of them for good.
TEST(OrderedCollectivesTest, ATimedOutTurnDoesNotWedgeTheCommunicator) {
  auto group = std::make_shared<LocalGroup>(1, 200ms);
  OrderedCollectives c(std::make_unique<LocalCollectives>(group, 0));
  const uint64_t stuck = c.reserve_turn();  // held elsewhere, ends late
  float v = 1;
  EXPECT_THROW(c.allreduce_sum(&v, 1, DataType::kFloat32), TimeoutError);
  c.begin_turn(stuck);
  c.end_turn(stuck);
  const auto begin = std::chrono::steady_clock::now();
  EXPECT_NO_THROW(c.allreduce_sum(&v, 1, DataType::kFloat32));
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 150ms);
  EXPECT_NO_THROW(c.barrier());
}

}  // namespace
}  // namespace gradwire::comm
