// Local-update methods evaluate the model the ranks last met on: between two meetings
// every evaluation scores the same, and each meeting changes the score.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace gradwire::testing {

// `by_step` (evaluations_by_step) holds every step of `rounds`; the steps of one round
// scored alike, and each round apart from the one before.
inline void expect_one_score_per_round(std::map<int, double> by_step,
                                       const std::vector<std::vector<int>>& rounds) {
  for (const auto& round : rounds) {
    for (int step : round) ASSERT_TRUE(by_step.count(step)) << "no evaluation at step " << step;
    for (int step : round) EXPECT_EQ(by_step[step], by_step[round.front()]) << "step " << step;
  }
  for (size_t k = 1; k < rounds.size(); ++k) {
    EXPECT_NE(by_step[rounds[k].front()], by_step[rounds[k - 1].front()])
        << "steps " << rounds[k - 1].front() << " and " << rounds[k].front();
  }
}

}  // namespace gradwire::testing
