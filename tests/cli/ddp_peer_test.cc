// The DDP peer (bench/peers/ddp_peer.py) runs the same job as `gradwire train`: the same
// shards, the same initial weights, and (plain allreduce against gradwire's `none`) the
// same accuracy at the same steps. Over loopback with `gradwire run`: no root needed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../common/command_runner.h"
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

// gradwire `none` and DDP's allreduce hook on 2 ranks: same initial weights (bitwise), and
// the same test accuracy at every evaluation (to 1%: the sums may round differently).
TEST(DdpPeerTest, PlainAllreduceFollowsGradwireNoneStepForStep) {
  for (const std::string model : {"cnn", "cnn-wide"}) {
    const std::string limits =
        model == "cnn" ? " --train-limit 1024 --test-limit 500 --eval-every 5"  // 16 steps
                       : " --train-limit 256 --test-limit 200 --eval-every 2";  // 4 steps
    const std::string args = " --model " + model + " --epochs 1 --batch-size 32" + limits +
                             " --progress none --metrics ";
    const std::string ours = temp_path(model + "_gradwire.jsonl");
    const std::string theirs = temp_path(model + "_ddp.jsonl");
    auto r = run_command(std::string(GRADWIRE_CLI) +
                             " train --workers 2 --threads 1 --compressor none" + args + ours,
                         300);
    ASSERT_EQ(r.status, 0) << r.output;
    r = run_command(std::string(GRADWIRE_CLI) + " run -n 2 -- /usr/bin/python3 " +
                        GRADWIRE_DDP_PEER + " --hook allreduce" + args + theirs,
                    300);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto a = read_events(ours, "summary"), b = read_events(theirs, "summary");
    ASSERT_EQ(a.size(), 1u);
    ASSERT_EQ(b.size(), 1u);
    EXPECT_EQ(a[0]["initial_checksum"], b[0]["initial_checksum"]) << model;
    EXPECT_EQ(a[0]["steps"], b[0]["steps"]);
    // Both send fp32 gradients by ring allreduce: the same contribution, and on the wire
    // the same but for ceil(B/W) rounding per allreduce (DDP's first bucket is 1 MiB).
    EXPECT_EQ(a[0]["bytes_contributed"], b[0]["bytes_contributed"]) << model;
    const double wire_a = a[0]["bytes_on_wire"].get<double>();
    EXPECT_NEAR(wire_a, b[0]["bytes_on_wire"].get<double>(), 1e-4 * wire_a) << model;
    const auto ea = read_events(ours, "eval"), eb = read_events(theirs, "eval");
    ASSERT_EQ(ea.size(), eb.size());
    ASSERT_GE(ea.size(), 2u);
    for (size_t i = 0; i < ea.size(); ++i) {
      EXPECT_EQ(ea[i]["step"], eb[i]["step"]);
      EXPECT_NEAR(ea[i]["test_accuracy"].get<double>(), eb[i]["test_accuracy"].get<double>(), 0.01)
          << model << " at step " << ea[i]["step"];
      EXPECT_LE(ea[i]["train_s"].get<double>(), a[0]["elapsed_s"].get<double>());
    }
    std::filesystem::remove(ours);
    std::filesystem::remove(theirs);
  }
}

}  // namespace
