// StepLedger against loops written out call by call: two ranks' words OR-reduced as the
// exchange's status is, the skip it recognizes (and the one it cannot), the loop's
// zero_grad() calls per step learned from the ranks' agreement.
#include <gtest/gtest.h>

#include <vector>

#include "gradwire/strategy/step_ledger.h"

namespace gradwire::strategy {
namespace {

using Words = std::vector<float>;

// Both ranks' words for one exchange, OR-reduced; each ledger learns from them.
struct Exchange {
  Words words;
  uint64_t sequence[2];
};

Exchange exchange(StepLedger& a, StepLedger& b, bool make_up_b = false, bool failed = false) {
  Words wa(StepLedger::kWords), wb(StepLedger::kWords), both(StepLedger::kWords);
  Exchange e;
  e.sequence[0] = a.begin_exchange(wa, false);
  e.sequence[1] = b.begin_exchange(wb, make_up_b);
  for (size_t i = 0; i < both.size(); ++i) both[i] = (wa[i] > 0 || wb[i] > 0) ? 1.0f : 0.0f;
  const bool any_failed = failed || make_up_b || StepLedger::out_of_step(both);
  a.end_exchange(both, any_failed);
  b.end_exchange(both, any_failed);
  e.words = both;
  return e;
}

// The usual loop's step on both ranks: zero_grad(), the exchange, step().
void normal_step(StepLedger& a, StepLedger& b) {
  for (StepLedger* l : {&a, &b}) {
    EXPECT_FALSE(l->skipped_a_step());
    l->count_zero_grad();
  }
  EXPECT_FALSE(StepLedger::out_of_step(exchange(a, b).words));
  a.count_step();
  b.count_step();
}

TEST(StepLedgerTest, ASkippedStepIsRecognizedAtTheNextZeroGradOnceTheLoopIsKnown) {
  StepLedger a, b;
  normal_step(a, b);  // the first exchange: zero_grad() calls before it are not counted...
  normal_step(a, b);  // ...from here on the loop is known: one zero_grad() a step
  // Rank b's backward throws before any gradient: no exchange; its loop goes on.
  a.count_zero_grad();
  b.count_zero_grad();
  EXPECT_TRUE(b.skipped_a_step());  // at b's next zero_grad(), while a is in the exchange
  const Exchange made_up = exchange(a, b, /*make_up_b=*/true);
  EXPECT_FALSE(StepLedger::out_of_step(made_up.words));  // it paired a's step: same numbers
  EXPECT_EQ(made_up.sequence[0], made_up.sequence[1]);
  b.count_zero_grad();
  a.count_zero_grad();  // a, its backward having raised, goes on too
  EXPECT_FALSE(StepLedger::out_of_step(exchange(a, b).words));
  normal_step(a, b);
}

TEST(StepLedgerTest, TwoZeroGradsAStepOnEveryRankAreTheLoopNotASkip) {
  StepLedger a, b;
  for (int step = 0; step < 4; ++step) {
    for (StepLedger* l : {&a, &b}) {
      for (int z = 0; z < 2; ++z) {
        EXPECT_FALSE(l->skipped_a_step()) << "step " << step;
        l->count_zero_grad();
      }
    }
    EXPECT_FALSE(StepLedger::out_of_step(exchange(a, b).words));
    a.count_step();
    b.count_step();
  }
  // A skip in that loop: the third zero_grad() since the exchange tells.
  for (StepLedger* l : {&a, &b}) {
    l->count_zero_grad();
    l->count_zero_grad();
  }
  EXPECT_TRUE(b.skipped_a_step());
}

TEST(StepLedgerTest, ASkipBeforeTheLoopIsKnownShowsAsOutOfStepAndTheRanksCountAnew) {
  StepLedger a, b;
  a.count_zero_grad();
  b.count_zero_grad();
  b.count_zero_grad();               // b skipped the first step
  EXPECT_FALSE(b.skipped_a_step());  // no agreement yet on the calls per step
  const Exchange e = exchange(a, b);
  EXPECT_TRUE(StepLedger::out_of_step(e.words));
  EXPECT_EQ(e.sequence[0], 1u);
  EXPECT_EQ(e.sequence[1], 2u);
  EXPECT_EQ(a.sequence(), 0u);  // both count anew
  EXPECT_EQ(b.sequence(), 0u);
}

}  // namespace
}  // namespace gradwire::strategy
