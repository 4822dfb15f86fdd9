#include "gradwire/core/failure_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace gradwire {
namespace {

std::string fresh_path(const std::string& name) {
  const std::string path =
      "/tmp/gradwire_failure_report_test_" + std::to_string(::getpid()) + "_" + name;
  std::remove(path.c_str());
  return path;
}

TEST(FailureReport, RoundTripsAndTheFirstReportStands) {
  const std::string path = fresh_path("first");
  write_failure_report(path, {{2, 5}, "allreduce #3 failed on rank 0:\nranks 2, 5 did not arrive"});
  write_failure_report(path, {{1}, "a consequence, not the cause"});
  const auto report = read_failure_report(path);
  ASSERT_TRUE(report.has_value());
  EXPECT_EQ(report->blamed, (std::vector<int>{2, 5}));
  // One line: a newline in the message cannot break the format.
  EXPECT_EQ(report->message, "allreduce #3 failed on rank 0: ranks 2, 5 did not arrive");
  std::remove(path.c_str());
}

TEST(FailureReport, NoPathWritesNothingAndOtherFilesAreNotReports) {
  write_failure_report("", {{1}, "nowhere"});  // no path: nothing, no error
  write_failure_report("/nonexistent-dir/report", {{1}, "unwritable"});  // never throws
  EXPECT_FALSE(read_failure_report("/nonexistent-dir/report").has_value());
  const std::string path = fresh_path("other");
  std::ofstream(path) << "gradwire-failure 1\nblame two\nx\n";
  EXPECT_FALSE(read_failure_report(path).has_value());
  std::ofstream(path) << "something else\n";
  EXPECT_FALSE(read_failure_report(path).has_value());
  std::remove(path.c_str());
}

// The victims of a hang blame the rank that hung; it wrote nothing (or blamed nobody), so
// it is the cause. A rank that blames another is a victim even when blamed itself.
TEST(FailureReport, TheRootCauseIsTheBlamedRankThatBlamesNobody) {
  EXPECT_FALSE(root_cause({}).has_value());
  EXPECT_FALSE(root_cause({{0, {{}, "no blame"}}}).has_value());
  const auto hang = root_cause({{0, {{2}, "allreduce #3: rank 2 did not arrive"}},
                                {1, {{2, 1}, "allreduce #3 too"}},
                                {3, {{}, "exited"}}});
  ASSERT_TRUE(hang.has_value());
  EXPECT_EQ(hang->rank, 2);
  EXPECT_EQ(hang->line,
            "rank 2 did not arrive: ranks 0, 1 failed waiting for it (allreduce #3: rank 2 did "
            "not arrive)");
  // 1 blames 0 and 0 blames 1: both victims of each other, neither a cause; 3 is.
  const auto chain = root_cause({{0, {{1}, "a"}}, {1, {{0, 3}, "b"}}});
  ASSERT_TRUE(chain.has_value());
  EXPECT_EQ(chain->rank, 3);
  EXPECT_EQ(chain->line, "rank 3 did not arrive: rank 1 failed waiting for it (b)");
}

}  // namespace
}  // namespace gradwire
