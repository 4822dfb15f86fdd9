// The DDP peer (bench/peers/ddp_peer.py) runs the same job as `gradwire train`: the same
// shards, the same initial weights, and (plain allreduce against gradwire's `none`) the
// same accuracy at the same steps. Over loopback with `gradwire run`: no root needed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "../common/command_runner.h"
#include "../common/evaluation_rounds.h"
#include "../common/json_lines.h"
#include "gradwire/distributed_sampler.h"

namespace {

using gradwire::testing::run_command;

std::string temp_path(const std::string& name) {
  return gradwire::testing::temp_path("gradwire_ddp_peer_test_", name);
}

std::vector<nlohmann::json> read_events(const std::string& path, const std::string& event) {
  std::vector<nlohmann::json> lines;
  for (auto& j : gradwire::testing::read_json_lines(path)) {
    if (j["event"] == event) lines.push_back(std::move(j));
  }
  return lines;
}

// Runs `gradwire train ...` and the peer, each writing its metrics to its path (appended to
// its command), and reads each one's single summary.
void run_both(const std::string& gradwire_command, const std::string& peer_command,
              const std::string& ours, const std::string& theirs, nlohmann::json& our_summary,
              nlohmann::json& their_summary) {
  auto r = run_command(gradwire_command + ours, 300);
  ASSERT_EQ(r.status, 0) << r.output;
  r = run_command(peer_command + theirs, 300);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto a = read_events(ours, "summary"), b = read_events(theirs, "summary");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  our_summary = a[0];
  their_summary = b[0];
}

// Both runs evaluated at the same steps (at least `at_least` times), `metric` within
// `tolerance` of each other at every one.
void expect_same_evaluations(const std::string& ours, const std::string& theirs,
                             const std::string& metric, double tolerance, size_t at_least) {
  const auto ea = read_events(ours, "eval"), eb = read_events(theirs, "eval");
  ASSERT_EQ(ea.size(), eb.size());
  ASSERT_GE(ea.size(), at_least);
  for (size_t i = 0; i < ea.size(); ++i) {
    EXPECT_EQ(ea[i]["step"], eb[i]["step"]);
    EXPECT_NEAR(ea[i][metric].get<double>(), eb[i][metric].get<double>(), tolerance)
        << metric << " at step " << ea[i]["step"];
  }
}

TEST(DdpPeerTest, ShardsAreDistributedSamplersShards) {
  for (int rank = 0; rank < 4; ++rank) {
    gradwire::DistributedSampler sampler(103, rank, 4, /*seed=*/3);
    sampler.set_epoch(2);
    const auto r = run_command(std::string("/usr/bin/python3 ") + GRADWIRE_DDP_PEER +
                                   " --print-shard 103,4," + std::to_string(rank) + ",3,2",
                               60);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto shard = nlohmann::json::parse(r.output).get<std::vector<size_t>>();
    EXPECT_EQ(shard, sampler.indices()) << "rank " << rank;
  }
}

// gradwire `none` and DDP's allreduce hook on 2 ranks, both given `flags` besides the job:
// same initial weights (bitwise), and the same test accuracy at every evaluation (to 1%:
// the sums may round differently).
void expect_allreduce_follows_none(const std::string& model, const std::string& flags) {
  const std::string limits =
      model == "cnn" ? " --train-limit 1024 --test-limit 500 --eval-every 5"  // 16 steps
                     : " --train-limit 256 --test-limit 200 --eval-every 2";  // 4 steps
  const std::string args = " --model " + model + " --epochs 1 --batch-size 32" + limits + flags +
                           " --progress none --metrics ";
  const std::string ours = temp_path(model + "_gradwire.jsonl");
  const std::string theirs = temp_path(model + "_ddp.jsonl");
  nlohmann::json a, b;
  ASSERT_NO_FATAL_FAILURE(run_both(
      std::string(GRADWIRE_CLI) + " train --workers 2 --threads 1 --compressor none" + args,
      std::string(GRADWIRE_CLI) + " run -n 2 -- /usr/bin/python3 " + GRADWIRE_DDP_PEER +
          " --hook allreduce" + args,
      ours, theirs, a, b));
  EXPECT_EQ(a["initial_checksum"], b["initial_checksum"]) << model;
  EXPECT_EQ(a["steps"], b["steps"]);
  // Both send fp32 gradients by ring allreduce: the same contribution, and on the wire
  // the same but for ceil(B/W) rounding per allreduce (DDP's first bucket is 1 MiB).
  EXPECT_EQ(a["bytes_contributed"], b["bytes_contributed"]) << model;
  const double wire_a = a["bytes_on_wire"].get<double>();
  EXPECT_NEAR(wire_a, b["bytes_on_wire"].get<double>(), 1e-4 * wire_a) << model;
  expect_same_evaluations(ours, theirs, "test_accuracy", 0.01, 2);
  for (const auto& e : read_events(ours, "eval")) {
    EXPECT_LE(e["train_s"].get<double>(), a["elapsed_s"].get<double>());
  }
  std::filesystem::remove(ours);
  std::filesystem::remove(theirs);
}

TEST(DdpPeerTest, PlainAllreduceFollowsGradwireNoneStepForStep) {
  for (const std::string model : {"cnn", "cnn-wide"}) {
    SCOPED_TRACE(model);
    expect_allreduce_follows_none(model, "");
  }
}

// The bench's flush-to-zero mode (bench e2e --flush-denormal) reaches both sides, and both
// still train the same job.
TEST(DdpPeerTest, InFlushToZeroModeAllreduceStillFollowsGradwireNone) {
  expect_allreduce_follows_none("cnn", " --flush-denormal");
}

// gpt with its recipe (AdamW, warm-up and cosine, clipping) and 2 micro-batches per step:
// the peer starts from the weights gradwire wrote (the same checksum), and the validation
// loss follows gradwire's `none` evaluation for evaluation.
TEST(DdpPeerTest, GptWithAccumulationFollowsGradwireNone) {
  // A corpus of its own: 20 KB of lines of words, the last 10% validation.
  const std::string corpus = temp_path("corpus.txt");
  {
    std::ofstream out(corpus);
    const char* words[] = {"and", "the", "light", "was", "good", "in", "beginning", "God"};
    uint32_t state = 7;
    for (int line = 0; line < 400; ++line) {
      for (int w = 0; w < 8; ++w) {
        state = state * 1664525u + 1013904223u;
        out << (w ? " " : "") << words[(state >> 16) % 8];
      }
      out << ".\n";
    }
  }
  const std::string weights = temp_path("gpt.weights");
  auto r = run_command(std::string(GRADWIRE_CLI) + " train --model gpt --seed 3 --corpus " +
                           corpus + " --save-initial-weights " + weights,
                       120);
  ASSERT_EQ(r.status, 0) << r.output;
  // 64 windows, 2 ranks x 2 micro-batches x 4: 4 steps; evaluations at steps 2 and 4.
  const std::string args = " --model gpt --seed 3 --corpus " + corpus +
                           " --epochs 1 --batch-size 4 --accumulate 2 --train-limit 64 "
                           "--test-limit 8 --eval-every 2 --progress none --metrics ";
  const std::string ours = temp_path("gpt_gradwire.jsonl");
  const std::string theirs = temp_path("gpt_ddp.jsonl");
  nlohmann::json a, b;
  ASSERT_NO_FATAL_FAILURE(run_both(
      std::string(GRADWIRE_CLI) + " train --workers 2 --threads 1 --compressor none" + args,
      std::string(GRADWIRE_CLI) + " run -n 2 -- /usr/bin/python3 " + GRADWIRE_DDP_PEER +
          " --hook allreduce --initial-weights " + weights + args,
      ours, theirs, a, b));
  EXPECT_EQ(a["initial_checksum"], b["initial_checksum"]);
  EXPECT_EQ(a["steps"], 4);
  EXPECT_EQ(b["steps"], 4);
  EXPECT_EQ(a["metric"], "val_loss");
  EXPECT_EQ(b["metric"], "val_loss");
  EXPECT_EQ(a["recipe"]["optimizer"], "adamw");
  EXPECT_EQ(b["recipe"]["optimizer"], "adamw");
  EXPECT_EQ(a["bytes_contributed"], b["bytes_contributed"]);  // one exchange a step
  EXPECT_EQ(read_events(ours, "eval").size(), 2u);
  expect_same_evaluations(ours, theirs, "val_loss", 1e-3, 2);
  for (const auto& f : {corpus, weights, ours, theirs}) std::filesystem::remove(f);
}

// The Python module's DiLoCo (the peer's --strategy diloco: gradwire.DiLoCo in a PyTorch
// loop) against `gradwire train --strategy diloco` on the same job, fragments streamed with
// a delay, int8 outer gradients: the same schedule (the same bytes exchanged), the
// synchronized model at every evaluation and the final averaged model within 1% of accuracy (the
// float sums of two programs may round differently), one model on every rank at the end.
TEST(DdpPeerTest, PythonDiLoCoFollowsTheCppStrategy) {
#ifndef GRADWIRE_PYTHON_PATH
  GTEST_SKIP() << "built without the Python module (GRADWIRE_WITH_PYTHON=OFF)";
#else
  const std::string args =
      " --model cnn --epochs 1 --batch-size 32 --train-limit 1024 --test-limit 500"
      " --eval-every 4 --progress none --strategy diloco --inner-steps 4 --fragments 2"
      " --fragment-delay 1 --outer-lr 0.7 --outer-momentum 0.9 --compressor int8 --metrics ";
  const std::string ours = temp_path("diloco_gradwire.jsonl");
  const std::string theirs = temp_path("diloco_python.jsonl");
  nlohmann::json a, b;
  ASSERT_NO_FATAL_FAILURE(
      run_both(std::string(GRADWIRE_CLI) + " train --workers 2 --threads 1" + args,
               "env PYTHONPATH=" GRADWIRE_PYTHON_PATH " " + std::string(GRADWIRE_CLI) +
                   " run -n 2 -- /usr/bin/python3 " + GRADWIRE_DDP_PEER + args,
               ours, theirs, a, b));
  EXPECT_EQ(b["strategy"], "diloco");
  EXPECT_EQ(a["initial_checksum"], b["initial_checksum"]);
  EXPECT_EQ(a["steps"], 16);
  EXPECT_EQ(b["steps"], 16);
  EXPECT_GT(b["bytes_contributed"].get<double>(), 0);
  EXPECT_EQ(a["bytes_contributed"], b["bytes_contributed"]);
  EXPECT_EQ(a["bytes_on_wire"], b["bytes_on_wire"]);
  const auto checksums = b["param_checksums"];
  ASSERT_EQ(checksums.size(), 2u);
  EXPECT_EQ(checksums[0], checksums[1]);  // finish(): one model
  expect_same_evaluations(ours, theirs, "test_accuracy", 0.01, 4);
  EXPECT_NEAR(a["test_accuracy"].get<double>(), b["test_accuracy"].get<double>(), 0.01);
  std::filesystem::remove(ours);
  std::filesystem::remove(theirs);
#endif
}

// DDP's PowerSGD in DDP's own buckets (cnn-wide: two), each bucket's hook run after the one
// before (bucket_order.py) so that every rank hands Gloo its collectives in one order: 4
// ranks train 24 steps without Gloo's abort, end with one model, and contribute exactly the
// bytes of PowerSGD in one bucket (the same tensors compressed alike); the accuracy is
// within 3 points of it (Q's random start is drawn per bucket).
TEST(DdpPeerTest, PowerSgdInDdpsBucketsRunsInOneOrderOnEveryRank) {
  std::map<std::string, nlohmann::json> summaries;
  for (const std::string buckets : {"one", "ddp"}) {
    const std::string metrics = temp_path("powersgd_" + buckets + ".jsonl");
    const auto r = run_command(std::string(GRADWIRE_CLI) + " run -n 4 -- /usr/bin/python3 " +
                                   GRADWIRE_DDP_PEER +
                                   " --hook powersgd --powersgd-rank 4 --powersgd-start-iter 2"
                                   " --powersgd-buckets " +
                                   buckets +
                                   " --model cnn-wide --epochs 1 --batch-size 32"
                                   " --train-limit 3072 --test-limit 500 --progress none"
                                   " --metrics " +
                                   metrics,
                               300);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto s = read_events(metrics, "summary");
    ASSERT_EQ(s.size(), 1u);
    summaries[buckets] = s[0];
    std::filesystem::remove(metrics);
  }
  const auto& one = summaries["one"];
  const auto& ddp = summaries["ddp"];
  EXPECT_EQ(ddp["steps"], 24);
  EXPECT_NE(ddp["codec"].get<std::string>().find("buckets=ddp"), std::string::npos);
  for (int r = 1; r < 4; ++r) EXPECT_EQ(ddp["param_checksums"][r], ddp["param_checksums"][0]);
  EXPECT_EQ(ddp["bytes_contributed"], one["bytes_contributed"]);
  EXPECT_NEAR(ddp["test_accuracy"].get<double>(), one["test_accuracy"].get<double>(), 0.03);
}

// PyTorch's local SGD in the peer (--hook localsgd: post_localSGD_hook, PostLocalSGDOptimizer,
// PeriodicModelAverager), period 12 without warm-up, 32 steps of 2 ranks: the averager
// averages after steps 1, 13 and 25 (its step counter k = 0, 12, 24), so the evaluations
// every 4 steps see the model the ranks last met on: 4, 8 and 12 the same, 16, 20 and 24
// the same, 28 another. The bytes are four fp32 averages of the model (three by the
// averager, one at the end, as step 32 averages none), nothing per step; one model at the
// end.
TEST(DdpPeerTest, LocalSgdEvaluatesTheModelTheRanksLastMetOn) {
  const std::string metrics = temp_path("localsgd.jsonl");
  const auto r =
      run_command(std::string(GRADWIRE_CLI) + " run -n 2 -- /usr/bin/python3 " + GRADWIRE_DDP_PEER +
                      " --hook localsgd --localsgd-period 12 --localsgd-warmup 0"
                      " --model cnn --epochs 1 --batch-size 32 --train-limit 2048"
                      " --test-limit 500 --eval-every 4 --progress none --metrics " +
                      metrics,
                  300);
  ASSERT_EQ(r.status, 0) << r.output;
  gradwire::testing::expect_one_score_per_round(gradwire::testing::evaluations_by_step(metrics),
                                                {{4, 8, 12}, {16, 20, 24}, {28}});
  const auto summaries = read_events(metrics, "summary");
  ASSERT_EQ(summaries.size(), 1u);
  const auto& s = summaries[0];
  EXPECT_EQ(s["codec"], "ddp:localsgd:period=12,warmup=0");
  EXPECT_EQ(s["steps"], 32);
  // bytes_dense is a per-step fp32 exchange of every rank's model: 32 of them.
  EXPECT_EQ(s["bytes_contributed"].get<double>(), 4 * s["bytes_dense"].get<double>() / 32);
  EXPECT_EQ(s["param_checksums"][0], s["param_checksums"][1]);
  std::filesystem::remove(metrics);
}

}  // namespace
