// `gradwire train --strategy ps` as users run it: servers and workers as real processes
// talking ZeroMQ over loopback. Every command runs under `timeout`; the launcher stops
// every rank it started, whatever happens.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "../common/command_runner.h"
#include "../common/json_lines.h"

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

using Result = gradwire::testing::CommandResult;

Result run(const std::string& command, int timeout_s) {
  return gradwire::testing::run_command(command, timeout_s);
}

std::string temp_path(const std::string& name) {
  return gradwire::testing::temp_path("gradwire_ps_cli_test_", name);
}

const std::string kSmallJob =
    " train --strategy ps --epochs 1 --train-limit 3000 "
    "--test-limit 500 --progress none";

TEST(PsCliTest, BspTrainsAndEveryWorkerEndsWithTheServersModel) {
  const std::string metrics = temp_path("bsp.jsonl");
  const auto r =
      run(std::string(GRADWIRE_CLI) + kSmallJob +
              " --servers 2 --workers 2 --compressor hylo --pull fp16 --metrics " + metrics,
          300);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto s = gradwire::testing::last_json_line(metrics);
  EXPECT_EQ(s["strategy"], "ps");
  EXPECT_EQ(s["servers"], 2);
  EXPECT_EQ(s["consistency"], "bsp");
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.5);
  EXPECT_GE(s["samples"].get<uint64_t>(), 3000u);
  EXPECT_LT(s["bytes_on_wire"].get<double>(), 0.2 * s["bytes_dense_on_wire"].get<double>());
  EXPECT_EQ(s["staleness"]["max"], 0);
  // fp16 pulls: half the bytes of the f32 model per answer, plus one whole f32 model each.
  EXPECT_LT(s["bytes_received"].get<double>(), 0.6 * s["bytes_dense"].get<double>());
  EXPECT_GT(s["bytes_received"].get<double>(), 0.4 * s["bytes_dense"].get<double>());
  ASSERT_EQ(s["param_checksums"].size(), 2u);
  EXPECT_EQ(s["param_checksums"][0], s["param_checksums"][1]);
  std::filesystem::remove(metrics);
}

TEST(PsCliTest, AspWithASlowWorkerRecordsStaleness) {
  const std::string metrics = temp_path("asp.jsonl");
  const auto r = run(std::string(GRADWIRE_CLI) + kSmallJob +
                         " --servers 1 --workers 3 --consistency asp --updater ddc-asgd"
                         " --momentum 0.5 --worker-speed 1,1,0.25 --metrics " +
                         metrics,
                     300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("worker 2 runs at speed 0.25"), std::string::npos) << r.output;
  const auto s = gradwire::testing::last_json_line(metrics);
  EXPECT_GT(s["staleness"]["mean"].get<double>(), 0.5);
  EXPECT_GE(s["staleness"]["max"].get<uint64_t>(), s["staleness"]["p99"].get<uint64_t>());
  // It learned (chance is 0.1). How much, in 3000 asynchronous samples, depends on the
  // interleaving: 0.38 was seen under a parallel test run, 0.4-0.6 alone.
  EXPECT_GT(s["test_accuracy"].get<double>(), 0.25);
  std::filesystem::remove(metrics);
}

TEST(PsCliTest, AsynchronousJobGoesOnWhenAWorkerDies) {
  const std::string metrics = temp_path("lost.jsonl");
  const auto r = run(
      std::string(GRADWIRE_FAULT_CLI) + kSmallJob +
          " --test-worker-exit 2:5 --servers 1 --workers 3 --consistency ssp:1 --worker-timeout 2"
          " --momentum 0.5 --metrics " +
          metrics,
      300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 2 exited with status 9; the job goes on without it"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("worker 2 sent nothing for 2.0 s"), std::string::npos) << r.output;
  const auto s = gradwire::testing::last_json_line(metrics);
  EXPECT_EQ(s["live_workers"], 0);
  EXPECT_EQ(s["param_checksums"][2], "");
  EXPECT_GE(s["samples"].get<uint64_t>(), 3000u);
  std::filesystem::remove(metrics);
}

TEST(PsCliTest, BspFailsNamingTheWorkerThatDied) {
  const auto r = run(std::string(GRADWIRE_FAULT_CLI) + kSmallJob +
                         " --test-worker-exit 1:3 --servers 1 --workers 2",
                     300);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 exited with status 9"), std::string::npos) << r.output;
}

TEST(PsCliTest, BspWithContinueGoesOnWithoutALostWorker) {
  const auto r = run(std::string(GRADWIRE_FAULT_CLI) + kSmallJob +
                         " --test-worker-exit 1:3 --servers 1 --workers 3 --on-worker-loss "
                         "continue --worker-timeout 2",
                     300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("worker 1 sent nothing"), std::string::npos) << r.output;
}

TEST(PsCliTest, ARestartedJobResumesFromTheServersCheckpoint) {
  const std::string dir = temp_path("ckpt");
  std::filesystem::remove_all(dir);
  const std::string job = std::string(GRADWIRE_CLI) +
                          " train --strategy ps --train-limit 2000 --test-limit 500 --progress "
                          "none --servers 2 --workers 2 --checkpoint-every 10 --checkpoint-dir " +
                          dir;
  const auto first = run(job + " --epochs 1", 300);
  ASSERT_EQ(first.status, 0) << first.output;
  ASSERT_TRUE(std::filesystem::exists(dir + "/server-0.ckpt"));
  ASSERT_TRUE(std::filesystem::exists(dir + "/server-1.ckpt"));
  const std::string metrics = temp_path("resumed.jsonl");
  const auto second = run(job + " --epochs 2 --metrics " + metrics, 300);
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_NE(second.output.find("resumed at"), std::string::npos) << second.output;
  const auto s = gradwire::testing::last_json_line(metrics);
  EXPECT_EQ(s["epoch"], 2);  // only the second epoch was trained
  EXPECT_GE(s["samples"].get<uint64_t>(), 4000u);
  EXPECT_LT(s["samples"].get<uint64_t>(), 4200u);
  // A checkpoint of another model is refused, not silently mixed in.
  const auto other = run(job + " --epochs 3 --model mlp", 300);
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.output.find("cannot resume"), std::string::npos) << other.output;
  std::filesystem::remove_all(dir);
  std::filesystem::remove(metrics);
}

// The libtorch example with one changed argument: servers from `gradwire run --servers`.
TEST(PsCliTest, TheExampleProgramTrainsOnParameterServers) {
  const auto r = run(std::string(GRADWIRE_CLI) + " run -n 2 --servers 1 -- " +
                         GRADWIRE_EXAMPLE_DISTRIBUTED + " 1 2000 ps",
                     300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("[0] epoch 1 test accuracy"), std::string::npos) << r.output;
}

TEST(PsCliTest, BadOptionsAreClearErrors) {
  auto r = run(std::string(GRADWIRE_CLI) + kSmallJob + " --workers 2 --consistency sync", 60);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("bsp, ssp:S (S >= 0), asp"), std::string::npos) << r.output;
  r = run(std::string(GRADWIRE_CLI) + kSmallJob + " --workers 2 --worker-speed 1,0.5,1", 60);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("3 speeds for 2 workers"), std::string::npos) << r.output;
  r = run(std::string(GRADWIRE_CLI) + kSmallJob + " --workers 2 --updater adam", 60);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("ddc-asgd"), std::string::npos) << r.output;
}

}  // namespace
