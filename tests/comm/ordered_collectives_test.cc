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

}  // namespace
}  // namespace gradwire::comm
