// Checkpoints and restarts of allreduce jobs, as a user runs them: `gradwire train
// --checkpoint-dir D --checkpoint-every N --max-restarts R`. A worker killed mid-run
// (--test-worker-exit of the tests' build, first attempt only) makes the launcher restart
// every rank; the job resumes from its last checkpoint and ends with exactly the
// parameters of a run of the shipped tool that was never interrupted (the computation is
// deterministic: one thread per worker, the same shards, the codec's residuals and
// momentum restored). Bad checkpoints are clear errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../common/command_runner.h"
#include "../common/json_lines.h"

namespace {

using gradwire::testing::read_json_lines;
using gradwire::testing::run_command;

std::string temp_path(const std::string& name) {
  return gradwire::testing::temp_path("gradwire_restart_test_", name);
}

// 2 workers, 2 epochs of 512 samples, batch 32: 8 steps per epoch per worker, 16 in all.
// topk keeps error-feedback residuals and the momentum moved into the codec: state that a
// resume must restore for the parameters to come out the same.
const std::string kJobArgs =
    " train --workers 2 --epochs 2 --train-limit 512 --test-limit 500"
    " --batch-size 32 --compressor topk:density=0.01 --progress lines";
const std::string kJob = std::string(GRADWIRE_CLI) + kJobArgs;

TEST(RestartCliTest, AKilledWorkerCostsOnlyTheStepsSinceTheCheckpoint) {
  const std::string dir = temp_path("ckpt");
  const std::string reference_metrics = temp_path("reference.jsonl");
  const std::string metrics = temp_path("restarted.jsonl");
  std::filesystem::remove_all(dir);

  const auto reference = run_command(kJob + " --metrics " + reference_metrics, 300);
  ASSERT_EQ(reference.status, 0) << reference.output;

  // Checkpoints after steps 3, 6, 9, 12, 15; worker 1 dies before step 10; the job
  // resumes at step 9 (epoch 2, its first step done).
  const auto restarted =
      run_command(std::string(GRADWIRE_FAULT_CLI) + kJobArgs + " --checkpoint-dir " + dir +
                      " --checkpoint-every 3 --max-restarts 1"
                      " --test-worker-exit 1:10 --metrics " +
                      metrics,
                  300);
  ASSERT_EQ(restarted.status, 0) << restarted.output;
  EXPECT_NE(restarted.output.find("exiting abruptly at step 10"), std::string::npos)
      << restarted.output;
  EXPECT_NE(restarted.output.find("restarting every rank (restart 1 of at most 1)"),
            std::string::npos)
      << restarted.output;
  EXPECT_NE(restarted.output.find("resumed from " + dir +
                                  "/allreduce.ckpt: epoch 2, step 1 of 8 (9 steps done)"),
            std::string::npos)
      << restarted.output;

  const auto expected = read_json_lines(reference_metrics).back();
  const auto lines = read_json_lines(metrics);
  ASSERT_FALSE(lines.empty());
  const auto& summary = lines.back();
  ASSERT_EQ(summary["event"], "summary");
  EXPECT_EQ(summary["param_checksums"], expected["param_checksums"]);
  EXPECT_EQ(summary["test_accuracy"], expected["test_accuracy"]);
  EXPECT_EQ(summary["steps"], 16);
  // The traffic counters went on from the checkpoint: the same as uninterrupted.
  EXPECT_EQ(summary["bytes_on_wire"], expected["bytes_on_wire"]);
  bool resumed = false;
  for (const auto& line : lines) resumed = resumed || line["event"] == "resume";
  EXPECT_TRUE(resumed);

  // The checkpoint is kept; a job on it resumes from its last state (step 15).
  const auto again = run_command(kJob + " --checkpoint-dir " + dir + " --metrics " + metrics, 300);
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_NE(again.output.find("resumed from " + dir + "/allreduce.ckpt: epoch 2, step 7 of 8"),
            std::string::npos)
      << again.output;
  EXPECT_EQ(read_json_lines(metrics).back()["param_checksums"], expected["param_checksums"]);

  // Another codec cannot take this checkpoint over: a clear error, the file untouched.
  const auto before = std::filesystem::file_size(dir + "/allreduce.ckpt");
  const auto other = run_command(std::string(GRADWIRE_CLI) +
                                     " train --workers 2 --epochs 2 --train-limit 512 "
                                     "--batch-size 32 --compressor none --progress none "
                                     "--checkpoint-dir " +
                                     dir,
                                 300);
  EXPECT_NE(other.status, 0) << other.output;
  EXPECT_NE(other.output.find("was saved with codec topk"), std::string::npos) << other.output;
  EXPECT_EQ(std::filesystem::file_size(dir + "/allreduce.ckpt"), before);

  // A corrupt checkpoint: refused by its CRC, naming the file.
  {
    std::fstream file(dir + "/allreduce.ckpt", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(100);
    file.put('\x5a');
  }
  const auto corrupt = run_command(kJob + " --checkpoint-dir " + dir, 300);
  EXPECT_NE(corrupt.status, 0) << corrupt.output;
  EXPECT_NE(corrupt.output.find("checkpoint " + dir + "/allreduce.ckpt"), std::string::npos)
      << corrupt.output;
  EXPECT_NE(corrupt.output.find("CRC"), std::string::npos) << corrupt.output;

  std::filesystem::remove_all(dir);
  std::filesystem::remove(reference_metrics);
  std::filesystem::remove(metrics);
}

// DiLoCo (streaming, int4): each rank's own model, optimizer state and the exchange in
// flight are in the checkpoint, so a killed worker costs only the steps since it, and the
// job ends with the parameters of the run that was never interrupted. Worker 1 dies before
// step 10; checkpoints after steps 3, 6, 9 (fragment 0 in flight at 6: sent at 6, merged
// at 7).
TEST(RestartCliTest, ADiLoCoJobResumesExactlyFromItsCheckpoint) {
  const std::string args =
      " train --workers 2 --epochs 2 --train-limit 512 --test-limit 500 --batch-size 32"
      " --strategy diloco --inner-steps 4 --fragments 2 --fragment-delay 1 --compressor int4"
      " --progress lines";
  const std::string dir = temp_path("diloco_ckpt");
  const std::string reference_metrics = temp_path("diloco_reference.jsonl");
  const std::string metrics = temp_path("diloco_restarted.jsonl");
  std::filesystem::remove_all(dir);
  const auto reference =
      run_command(std::string(GRADWIRE_CLI) + args + " --metrics " + reference_metrics, 300);
  ASSERT_EQ(reference.status, 0) << reference.output;
  const auto restarted = run_command(
      std::string(GRADWIRE_FAULT_CLI) + args + " --checkpoint-dir " + dir +
          " --checkpoint-every 3 --max-restarts 1 --test-worker-exit 1:10 --metrics " + metrics,
      300);
  ASSERT_EQ(restarted.status, 0) << restarted.output;
  EXPECT_NE(restarted.output.find("exiting abruptly at step 10"), std::string::npos)
      << restarted.output;
  EXPECT_NE(restarted.output.find("(9 steps done)"), std::string::npos) << restarted.output;
  const auto expected = read_json_lines(reference_metrics).back();
  const auto summary = read_json_lines(metrics).back();
  ASSERT_EQ(summary["event"], "summary");
  EXPECT_EQ(summary["param_checksums"], expected["param_checksums"]);
  EXPECT_EQ(summary["param_checksums"][0], summary["param_checksums"][1]);
  EXPECT_EQ(summary["bytes_on_wire"], expected["bytes_on_wire"]);
  EXPECT_EQ(summary["diloco"], expected["diloco"]);
  EXPECT_EQ(summary["diloco"]["outer_steps"], 4);  // 16 steps, H = 4
  EXPECT_EQ(summary["diloco"]["inner_steps"], 4);
  std::filesystem::remove_all(dir);
  std::filesystem::remove(reference_metrics);
  std::filesystem::remove(metrics);
}

// A full disk while checkpointing (RLIMIT_FSIZE here: the write fails with EFBIG) costs the
// checkpoint only: every rank hears of it, rank 0 says so, training goes on and ends well.
TEST(RestartCliTest, ACheckpointThatCannotBeWrittenIsReportedAndTrainingGoesOn) {
  const std::string dir = temp_path("full");
  std::filesystem::remove_all(dir);
  const auto r = run_command(
      "sh -c 'ulimit -f 64; exec " + kJob + " --checkpoint-dir " + dir + " --checkpoint-every 4'",
      300);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("warning: rank 0 could not write the checkpoint"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("File too large"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("training goes on"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ranks' parameters identical"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir + "/allreduce.ckpt"));
  std::filesystem::remove_all(dir);
}

// A parameter-server job under --max-restarts: a lost worker stops a BSP job, every
// process starts again, the servers resume from their checkpoint and the job trains its
// whole sample budget.
TEST(RestartCliTest, AParameterServerJobResumesFromTheServersCheckpoint) {
  const std::string dir = temp_path("ps");
  std::filesystem::remove_all(dir);
  const std::string metrics = temp_path("ps.jsonl");
  const auto r = run_command(std::string(GRADWIRE_FAULT_CLI) +
                                 " train --strategy ps --servers 1 --workers 2 --epochs 1"
                                 " --train-limit 1024 --test-limit 500 --batch-size 32"
                                 " --progress lines --checkpoint-dir " +
                                 dir +
                                 " --checkpoint-every 8 --max-restarts 1 --test-worker-exit 1:12"
                                 " --worker-timeout 5 --metrics " +
                                 metrics,
                             300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("exiting abruptly at step 12"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("restarting every rank (restart 1 of at most 1)"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("resumed at "), std::string::npos) << r.output;
  const auto lines = read_json_lines(metrics);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back()["event"], "summary");
  EXPECT_GE(lines.back()["samples"].get<int>(), 1024);  // the whole budget was trained
  std::filesystem::remove_all(dir);
  std::filesystem::remove(metrics);
}

}  // namespace
