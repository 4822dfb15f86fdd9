#include "gradwire/strategy/allreduce/allreduce_strategy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <random>
#include <thread>

#include "../common/forwarding_collectives.h"
#include "gradwire/comm/local_collectives.h"
#include "gradwire/comm/ordered_collectives.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"

namespace gradwire::strategy {
namespace {

using namespace std::chrono_literals;
using compress::LayerKind;
using compress::TensorInfo;

// A toy model: a few tensors of different kinds and sizes.
std::vector<TensorInfo> toy_tensors() {
  return {{"conv.weight", {8, 4, 3, 3}, LayerKind::kConvWeight},
          {"conv.bias", {8}, LayerKind::kBias},
          {"fc.weight", {10, 300}, LayerKind::kFcWeight},
          {"fc.bias", {10}, LayerKind::kBias}};
}

struct ToyModel {
  std::vector<std::vector<float>> params, grads;
  explicit ToyModel(const std::vector<TensorInfo>& tensors, uint64_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    for (const auto& t : tensors) {
      params.emplace_back(t.numel());
      grads.emplace_back(t.numel());
      for (float& v : params.back()) v = normal(rng);
    }
  }
  FloatSpans spans(std::vector<std::vector<float>>& v) {
    FloatSpans out;
    for (auto& x : v) out.emplace_back(x);
    return out;
  }
};

// Runs `steps` SGD steps on every rank with rank-specific random gradients and returns each
// rank's final parameters.
std::vector<std::vector<std::vector<float>>> train_ranks(int world, const std::string& codec,
                                                         int steps, size_t bucket_bytes) {
  const auto tensors = toy_tensors();
  std::vector<std::vector<std::vector<float>>> finals(world);
  comm::run_local_ranks(world, 10s, [&](comm::Collectives& c) {
    ToyModel model(tensors, /*seed=*/100 + c.rank());  // different starts: start() must fix
    AllreduceStrategy strategy(c, {.codec = codec, .bucket_bytes = bucket_bytes});
    strategy.start(tensors, model.spans(model.params));
    std::mt19937 rng(7 * c.rank() + 1);
    std::normal_distribution<float> normal;
    for (int s = 0; s < steps; ++s) {
      for (auto& g : model.grads) {
        for (float& v : g) v = normal(rng);
      }
      strategy.synchronize(model.spans(model.grads));
      for (size_t t = 0; t < tensors.size(); ++t) {
        for (size_t i = 0; i < model.params[t].size(); ++i) {
          model.params[t][i] -= 0.1f * model.grads[t][i];
        }
      }
    }
    finals[c.rank()] = model.params;
  });
  return finals;
}

class EveryCodecTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(EveryCodecTest, RanksEndBitwiseEqual) {
  const auto& [codec, world] = GetParam();
  const auto finals = train_ranks(world, codec, /*steps=*/5, /*bucket_bytes=*/4096);
  for (int r = 1; r < world; ++r) EXPECT_EQ(finals[r], finals[0]) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, EveryCodecTest,
    ::testing::Combine(::testing::Values("none", "fp16", "topk:density=0.05", "powersgd:rank=2",
                                         "hylo", "conv=filter-topk:rate=0.5,fc=2bit,other=none",
                                         "2bit", "topk:density=0.1,ef=0,warmup=0", "fp16:ef=1",
                                         "int8", "conv=int8,other=fp16"),
                       ::testing::Values(2, 4)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param));
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

// What every codec must deliver: the mean of the ranks' gradients. One step of a lossy
// codec is not the mean, but its error is bounded and (with error feedback, or unbiased
// rounding) does not accumulate: each rank feeds the same gradient g_r every step, and the
// average of the aggregates over the steps must approach mean_r g_r, within the codec's
// bound for that many steps (relative L2 error; the bounds are about twice what each codec
// reaches here). A wrong aggregate (zeros, rank 0's gradient everywhere, a scale off by W)
// is off by 0.5 or more.
struct AggregateCase {
  std::string spec;
  double tolerance;  // relative L2 error of the average over kAggregateSteps
};
constexpr int kAggregateSteps = 300;

class EveryCodecAggregateTest : public ::testing::TestWithParam<std::tuple<AggregateCase, int>> {};

TEST_P(EveryCodecAggregateTest, AverageAggregateApproachesTheMeanOfTheInputs) {
  const AggregateCase c = std::get<0>(GetParam());
  const int world = std::get<1>(GetParam());
  const auto tensors = toy_tensors();
  std::vector<std::vector<std::vector<float>>> inputs(world), averages(world);
  comm::run_local_ranks(world, 60s, [&](comm::Collectives& col) {
    const int rank = col.rank();
    ToyModel model(tensors, /*seed=*/1);
    AllreduceStrategy strategy(col, {.codec = c.spec, .bucket_bytes = 4096});
    strategy.start(tensors, model.spans(model.params));
    std::mt19937 rng(1000 + rank);
    std::normal_distribution<float> normal;
    inputs[rank] = model.grads;
    for (auto& g : inputs[rank]) {
      for (float& v : g) v = normal(rng);
    }
    auto& sum = averages[rank];
    for (const auto& g : inputs[rank]) sum.emplace_back(g.size(), 0.0f);
    for (int s = 0; s < kAggregateSteps; ++s) {
      model.grads = inputs[rank];
      strategy.synchronize(model.spans(model.grads));
      for (size_t t = 0; t < sum.size(); ++t) {
        for (size_t i = 0; i < sum[t].size(); ++i) sum[t][i] += model.grads[t][i];
      }
    }
    for (auto& t : sum) {
      for (float& v : t) v /= kAggregateSteps;
    }
  });
  double error2 = 0, norm2 = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    for (size_t i = 0; i < inputs[0][t].size(); ++i) {
      double mean = 0;
      for (int r = 0; r < world; ++r) mean += inputs[r][t][i];
      mean /= world;
      const double d = averages[0][t][i] - mean;
      error2 += d * d;
      norm2 += mean * mean;
    }
  }
  const double relative = std::sqrt(error2 / norm2);
  EXPECT_LE(relative, c.tolerance) << c.spec << " over " << world << " ranks";
  for (int r = 1; r < world; ++r) EXPECT_EQ(averages[r], averages[0]) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, EveryCodecAggregateTest,
    ::testing::Combine(
        ::testing::Values(AggregateCase{"none", 1e-5}, AggregateCase{"fp16", 1e-3},
                          AggregateCase{"bf16", 5e-3}, AggregateCase{"topk:density=0.05", 0.06},
                          AggregateCase{"randomk:density=0.05", 0.15},
                          AggregateCase{"gaussiank:density=0.05", 0.06},
                          AggregateCase{"laplace-topk:density=0.05", 0.06},
                          AggregateCase{"dgc:density=0.05,momentum=0", 0.06},
                          AggregateCase{"2bit", 0.05}, AggregateCase{"qsgd", 0.12},
                          AggregateCase{"terngrad", 0.12}, AggregateCase{"signsgd", 0.08},
                          AggregateCase{"spectral", 0.04}, AggregateCase{"hylo", 0.1},
                          AggregateCase{"conv=filter-topk:rate=0.5,other=none", 0.005},
                          AggregateCase{"powersgd:rank=2", 0.03}, AggregateCase{"int8", 0.01},
                          AggregateCase{"int8:ef=0", 0.05},
                          AggregateCase{"sparseloco:beta=1,chunk=64,density=0.1", 0.03}),
        ::testing::Values(2, 4)),
    [](const auto& info) {
      std::string name =
          std::get<0>(info.param).spec + "_" + std::to_string(std::get<1>(info.param));
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

// Collectives that count the operations handed to them (from any thread) and pass them
// on: how a test sees when a bucket's exchange started.
class RecordingCollectives : public ForwardingCollectives {
 public:
  using ForwardingCollectives::ForwardingCollectives;
  std::unique_ptr<comm::Work> allreduce_sum_async(void* data, size_t count,
                                                  comm::DataType type) override {
    ++operations;
    return ForwardingCollectives::allreduce_sum_async(data, count, type);
  }
  void allreduce_max(float* data, size_t count) override {
    ++operations;
    ForwardingCollectives::allreduce_max(data, count);
  }
  using Collectives::allgather_bytes;
  void allgather_bytes(std::span<const uint8_t> data, std::vector<Bytes>& out) override {
    ++operations;
    ForwardingCollectives::allgather_bytes(data, out);
  }
  void alltoall_bytes(std::span<const Bytes> to, std::vector<Bytes>& out) override {
    ++operations;
    ForwardingCollectives::alltoall_bytes(to, out);
  }
  void broadcast(void* data, size_t bytes, int root) override {
    ++operations;
    ForwardingCollectives::broadcast(data, bytes, root);
  }
  std::atomic<int> operations{0};
};

// Trains 2 ranks on toy_tensors() for `steps` SGD steps, reporting tensor `early` as a hook
// would mid-backward before synchronize(): with overlap, its exchange must start then (a
// collective is issued before synchronize()); without, nothing may. Each rank's parameters.
std::vector<std::vector<std::vector<float>>> train_reporting_early(
    AllreduceOptions options, size_t early, int steps,
    const std::function<void(AllreduceStrategy&)>& check_start = {}) {
  const auto tensors = toy_tensors();
  std::vector<std::vector<std::vector<float>>> finals(2);
  comm::run_local_ranks(2, 10s, [&](comm::Collectives& local) {
    RecordingCollectives c(local);
    ToyModel model(tensors, /*seed=*/100 + c.rank());
    AllreduceStrategy strategy(c, options);
    strategy.start(tensors, model.spans(model.params));
    if (check_start) check_start(strategy);
    std::mt19937 rng(7 * c.rank() + 1);
    std::normal_distribution<float> normal;
    for (int s = 0; s < steps; ++s) {
      for (auto& g : model.grads) {
        for (float& v : g) v = normal(rng);
      }
      auto grads = model.spans(model.grads);
      const int before = c.operations.load();
      strategy.gradient_ready(early, grads[early]);
      if (options.overlap) {
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (c.operations.load() == before && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(1ms);
        }
        EXPECT_GT(c.operations.load(), before) << "tensor " << early << " waited for synchronize()";
      } else {
        EXPECT_EQ(c.operations.load(), before);
      }
      strategy.synchronize(grads);
      for (size_t t = 0; t < tensors.size(); ++t) {
        for (size_t i = 0; i < model.params[t].size(); ++i) {
          model.params[t][i] -= 0.1f * model.grads[t][i];
        }
      }
    }
    finals[c.rank()] = model.params;
  });
  return finals;
}

TEST(AllreduceStrategyTest, OverlapExchangesABucketBeforeSynchronizeAndMatchesTheSerialPath) {
  // One bucket per tensor; backward finishes the last tensor (bucket 0) first.
  const size_t last = toy_tensors().size() - 1;
  const auto run = [&](bool overlap) {
    return train_reporting_early(
        {.codec = "topk:density=0.1", .bucket_bytes = 64, .overlap = overlap}, last, 3);
  };
  const auto overlapped = run(true);
  const auto serial = run(false);
  EXPECT_EQ(overlapped[1], overlapped[0]);
  EXPECT_EQ(overlapped[0], serial[0]);  // bit for bit
}

TEST(AllreduceStrategyTest, ALowRankGroupIsExchangedDuringBackwardAndMatchesTheSerialPath) {
  // fc.weight holds 3,000 of the 3,288 low-rank elements: more than half, it closes the
  // first group. Backward finishes fc.bias, fc.weight, conv.bias, conv.weight: group 0
  // goes first, then the bucket of biases, then group 1.
  const auto run = [&](bool overlap) {
    return train_reporting_early(
        {.codec = "conv=powersgd:rank=2,fc=powersgd:rank=2,other=fp16", .overlap = overlap},
        /*early=fc.weight*/ 2, 4, [](AllreduceStrategy& strategy) {
          EXPECT_EQ(strategy.bucket_layout_summary(),
                    "[fc.bias conv.bias] low-rank [fc.weight] low-rank [conv.weight]");
        });
  };
  const auto overlapped = run(true);
  const auto serial = run(false);
  EXPECT_EQ(overlapped[1], overlapped[0]);
  EXPECT_EQ(overlapped[0], serial[0]);  // bit for bit
}

// PowerSGD of 2 ranks, step by step from the codecs' faces (each rank's own codecs):
// dense tensors (1/2 g0 + 1/2 g1), low-rank ones P = (p0 + p1) / 2, Q = (q0 + q1) / 2;
// the same gradients and SGD steps as train_reporting_early. Rank 0's parameters.
std::vector<std::vector<float>> powersgd_reference(const std::string& codec, int steps) {
  const auto tensors = toy_tensors();
  ToyModel start(tensors, /*seed=*/100);  // start() gives every rank rank 0's parameters
  std::vector<std::vector<float>> params = start.params;
  std::vector<std::vector<std::unique_ptr<compress::Codec>>> codecs(2);
  std::vector<std::mt19937> rng;
  for (int r = 0; r < 2; ++r) {
    for (const auto& t : tensors) codecs[r].push_back(compress::create_codec(codec, t));
    rng.emplace_back(7 * r + 1);
  }
  std::normal_distribution<float> normal;
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<std::vector<float>>> g(2);
    for (int r = 0; r < 2; ++r) {
      for (const auto& t : tensors) {
        g[r].emplace_back(t.numel());
        for (float& v : g[r].back()) v = normal(rng[r]);
      }
    }
    for (size_t k = 0; k < tensors.size(); ++k) {
      auto* face0 = codecs[0][k]->low_rank();
      std::vector<float> mean(tensors[k].numel());
      if (face0 == nullptr) {
        for (size_t i = 0; i < mean.size(); ++i) mean[i] = 0.5f * g[0][k][i] + 0.5f * g[1][k][i];
      } else {
        auto* face1 = codecs[1][k]->low_rank();
        std::vector<float> p0(face0->p_size()), p1(p0.size()), q0(face0->q_size()), q1(q0.size());
        face0->begin(g[0][k], p0);
        face1->begin(g[1][k], p1);
        for (size_t i = 0; i < p0.size(); ++i) p0[i] = (p0[i] + p1[i]) * 0.5f;
        face0->middle(p0, q0);
        face1->middle(p0, q1);
        for (size_t i = 0; i < q0.size(); ++i) q0[i] = (q0[i] + q1[i]) * 0.5f;
        face0->end(q0, mean);
        face1->end(q0, g[1][k]);
      }
      for (size_t i = 0; i < mean.size(); ++i) params[k][i] -= 0.1f * mean[i];
    }
  }
  return params;
}

TEST(AllreduceStrategyTest, ALowRankGroupsQRidesTheNextFp32BucketsAllreduce) {
  // Rank 4 under min_rate 2: fc.weight (10 x 300) low rank, conv.weight (8 x 36: 176 floats
  // for 288) dense. Backward finishes fc.bias, fc.weight, conv.bias, conv.weight: the group
  // [fc.weight], then the fp32 bucket that takes its Q. Two collectives a step (P, then the
  // bucket with Q), not three; the sums those of the serial maths.
  const std::string codec = "powersgd:rank=4,min_rate=2";
  const int steps = 4;
  const auto finals = train_reporting_early(
      {.codec = codec}, /*early=fc.weight*/ 2, steps, [](AllreduceStrategy& strategy) {
        EXPECT_EQ(strategy.bucket_layout_summary(),
                  "[fc.bias conv.bias conv.weight] low-rank [fc.weight] (Q in bucket 0)");
      });
  EXPECT_EQ(finals[1], finals[0]);
  EXPECT_EQ(finals[0], powersgd_reference(codec, steps));  // bit for bit
  comm::run_local_ranks(2, 10s, [&](comm::Collectives& local) {
    RecordingCollectives c(local);
    const auto tensors = toy_tensors();
    ToyModel model(tensors, /*seed=*/1);
    AllreduceStrategy strategy(c, {.codec = codec});
    strategy.start(tensors, model.spans(model.params));
    std::vector<float> status(3, 0.0f);
    ASSERT_TRUE(strategy.carry_status(status));
    for (int s = 0; s < 2; ++s) {
      status[0] = c.rank() == 1 ? 1.0f : 0.0f;
      status[1] = 0.0f;
      status[2] = 1.0f;
      const int before = c.operations.load();
      strategy.synchronize(model.spans(model.grads));
      EXPECT_EQ(c.operations.load() - before, 2);
      EXPECT_EQ(status, (std::vector<float>{1.0f, 0.0f, 1.0f}));  // the OR over the ranks
    }
  });
}

TEST(AllreduceStrategyTest, DestructionWhileABucketIsBlockedReturnsAndPassesItsTurns) {
  // One bucket per tensor. Rank 1 never joins the step: rank 0's first bucket blocks in its
  // allreduce, the second is runnable with its turn reserved, when rank 0's strategy goes.
  const std::vector<TensorInfo> tensors{{"a", {100}, LayerKind::kNorm},
                                        {"b", {100}, LayerKind::kNorm}};
  comm::run_local_ranks(2, 1500ms, [&](comm::Collectives& local) {
    comm::OrderedCollectives c(std::make_unique<RecordingCollectives>(local));
    std::vector<float> a(100), b(100);
    auto strategy = std::make_unique<AllreduceStrategy>(
        c, AllreduceOptions{.codec = "none", .bucket_bytes = 400, .first_bucket_bytes = 400});
    strategy->start(tensors, {a, b});
    ASSERT_EQ(strategy->bucket_layout().size(), 2u);
    if (c.rank() == 1) return;
    strategy->gradient_ready(1, b);  // bucket 0: its allreduce waits for rank 1
    strategy->gradient_ready(0, a);  // bucket 1: runnable, its turn reserved
    std::this_thread::sleep_for(50ms);
    auto begin = std::chrono::steady_clock::now();
    strategy.reset();  // returns: at the latest when bucket 0's allreduce times out
    EXPECT_LT(std::chrono::steady_clock::now() - begin, 5s);
    // Bucket 1's turn was passed: the next call is not kept waiting for it (it fails at
    // once, the group being broken by the timeout; kept waiting it would time out too).
    begin = std::chrono::steady_clock::now();
    float x = 0;
    EXPECT_THROW(c.allreduce_max(&x, 1), Error);
    EXPECT_LT(std::chrono::steady_clock::now() - begin, 700ms);
  });
}

TEST(AllreduceStrategyTest, AGradientReportedTwiceInAStepIsRefused) {
  const std::vector<TensorInfo> tensors{{"w", {4}, LayerKind::kNorm}};
  comm::run_local_ranks(1, 5s, [&](comm::Collectives& c) {
    AllreduceStrategy strategy(c, {});
    std::vector<float> param(4, 0.0f), grad(4, 1.0f);
    strategy.start(tensors, {param});
    strategy.gradient_ready(0, grad);
    EXPECT_THROW(strategy.gradient_ready(0, grad), Error);
    strategy.synchronize({grad});
    EXPECT_EQ(grad, std::vector<float>(4, 1.0f));
  });
}

TEST(AllreduceStrategyTest, NoneAveragesExactly) {
  const std::vector<TensorInfo> tensors{{"w", {6}, LayerKind::kNorm}};
  comm::run_local_ranks(3, 5s, [&](comm::Collectives& c) {
    AllreduceStrategy strategy(c, {});
    std::vector<float> param(6, 0.0f), grad(6);
    strategy.start(tensors, {param});
    for (int i = 0; i < 6; ++i) grad[i] = float(c.rank() * 6 + i);
    strategy.synchronize({grad});
    for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(grad[i], float(6 + i));  // mean of r*6+i
    EXPECT_EQ(strategy.traffic().bytes_contributed, 24u);
    EXPECT_EQ(strategy.traffic().bytes_dense, 24u);
    EXPECT_EQ(strategy.traffic().bytes_on_wire, 2u * 2 * 8);  // ring over 3 ranks
    EXPECT_EQ(strategy.traffic().bytes_dense_on_wire, 2u * 2 * 8);
  });
}

TEST(AllreduceStrategyTest, PredictedExchangeIsTheCostModelsOfItsCollectives) {
  // One bucket of 1,000 elements (a: 600, b: 400) at 3 ranks over a 1 us, 1 GB/s link.
  const std::vector<TensorInfo> tensors{{"a", {600}, LayerKind::kNorm},
                                        {"b", {400}, LayerKind::kNorm}};
  const comm::LinkModel link{1e-6, 1e-9};
  const auto ring = [&](double bytes) { return comm::ring_allreduce_seconds(link, bytes, 3); };
  // fp16 at 3 ranks on the default 1 Gbit/s link takes the reduce-scatter: an alltoall and
  // an allgather of the largest range's payload (334 halves behind an 8-byte header).
  const double fp16_range = 8 + 2 * 334;
  for (const std::string codec : {"none", "fp16+ring", "fp16", "int8", "topk:density=0.1"}) {
    comm::run_local_ranks(3, 5s, [&](comm::Collectives& c) {
      const bool ring_path = codec == "fp16+ring";
      AllreduceStrategy strategy(
          c, {.codec = ring_path ? "fp16" : codec, .quantized_path = ring_path ? "ring" : "auto"});
      std::vector<float> pa(600), pb(400), ga(600), gb(400);
      strategy.start(tensors, {pa, pb});
      const auto before = strategy.predicted_exchange_seconds(link);
      if (codec == "none") {
        EXPECT_DOUBLE_EQ(before.value(), ring(4000));
      } else if (ring_path) {
        EXPECT_DOUBLE_EQ(before.value(), ring(2000));
      } else if (codec == "fp16") {
        EXPECT_DOUBLE_EQ(before.value(), comm::alltoall_seconds(link, fp16_range, 3) +
                                             comm::allgather_seconds(link, fp16_range, 3));
      } else if (codec == "int8") {  // 3 + 2 blocks of 256: the maxima, then the levels
        EXPECT_DOUBLE_EQ(before.value(), ring(5 * 4) + ring(1000));
      } else {
        EXPECT_FALSE(before.has_value());  // a sparse payload's size is known after a step
        for (size_t i = 0; i < 600; ++i) ga[i] = float(i % 7) - 3.0f + 0.01f * c.rank();
        for (size_t i = 0; i < 400; ++i) gb[i] = float(i % 5) - 2.0f;
        strategy.synchronize({ga, gb});
        const auto after = strategy.predicted_exchange_seconds(link);
        ASSERT_TRUE(after.has_value());
        EXPECT_GT(*after, comm::ring_allreduce_seconds(link, 0, 3));
        EXPECT_LT(*after, ring(4000));  // a tenth of the pairs costs less than fp32
      }
    });
  }
}

TEST(AllreduceStrategyTest, PredictedExchangeCountsEachLowRankGroupsPAndQ) {
  // fc (10 x 300) holds more than half of the low-rank elements and closes the first
  // group; conv (8 x 4 x 3 x 3, as 8 x 36) is the second. Rank 2: P is n x 2, Q m x 2.
  const std::vector<TensorInfo> tensors{{"conv.weight", {8, 4, 3, 3}, LayerKind::kConvWeight},
                                        {"fc.weight", {10, 300}, LayerKind::kFcWeight}};
  const comm::LinkModel link{1e-6, 1e-9};
  const auto ring = [&](double floats) {
    return comm::ring_allreduce_seconds(link, floats * sizeof(float), 2);
  };
  comm::run_local_ranks(2, 5s, [&](comm::Collectives& c) {
    AllreduceStrategy strategy(c, {.codec = "powersgd:rank=2"});
    std::vector<float> conv(288), fc(3000);
    strategy.start(tensors, {conv, fc});
    EXPECT_EQ(strategy.bucket_layout_summary(), "low-rank [fc.weight] low-rank [conv.weight]");
    EXPECT_DOUBLE_EQ(strategy.predicted_exchange_seconds(link).value(),
                     ring(10 * 2) + ring(300 * 2) + ring(8 * 2) + ring(36 * 2));
  });
}

TEST(AllreduceStrategyTest, StartBroadcastsRankZerosParameters) {
  const std::vector<TensorInfo> tensors{{"w", {4}, LayerKind::kNorm}};
  comm::run_local_ranks(2, 5s, [&](comm::Collectives& c) {
    AllreduceStrategy strategy(c, {});
    std::vector<float> param(4, float(c.rank() + 1));
    strategy.start(tensors, {param});
    EXPECT_EQ(param, std::vector<float>(4, 1.0f));
  });
}

TEST(AllreduceStrategyTest, BucketsFollowReverseOrderAndCap) {
  const std::vector<TensorInfo> tensors{{"a", {100}, LayerKind::kNorm},
                                        {"b", {100}, LayerKind::kNorm},
                                        {"c", {300}, LayerKind::kNorm},
                                        {"d", {50}, LayerKind::kNorm}};
  comm::run_local_ranks(1, 5s, [&](comm::Collectives& c) {
    AllreduceStrategy strategy(c, {.codec = "none", .bucket_bytes = 800});  // 200 floats
    std::vector<std::vector<float>> p{std::vector<float>(100), std::vector<float>(100),
                                      std::vector<float>(300), std::vector<float>(50)};
    strategy.start(tensors, {p[0], p[1], p[2], p[3]});
    const auto layout = strategy.bucket_layout();
    ASSERT_EQ(layout.size(), 3u);
    EXPECT_EQ(layout[0], (std::vector<size_t>{3}));     // d, then c would overflow
    EXPECT_EQ(layout[1], (std::vector<size_t>{2}));     // c alone (larger than the cap)
    EXPECT_EQ(layout[2], (std::vector<size_t>{1, 0}));  // b + a = 200 floats
  });
}

TEST(AllreduceStrategyTest, ATensorAsLargeAsTheFirstBucketClosesItsBucket) {
  // Registration order conv (50 floats), fc1 (400), fc2 (20); backward finishes fc2, fc1,
  // conv. fc1 is at least the first bucket (100 floats): it goes alone, and conv, final
  // after it, does not hold its exchange back (DDP's rule alone would add it: 450 floats
  // fit the 2500-float cap).
  const std::vector<TensorInfo> tensors{{"conv", {50}, LayerKind::kConvWeight},
                                        {"fc1", {400}, LayerKind::kFcWeight},
                                        {"fc2", {20}, LayerKind::kFcWeight}};
  comm::run_local_ranks(1, 5s, [&](comm::Collectives& c) {
    AllreduceStrategy strategy(c,
                               {.codec = "none", .bucket_bytes = 10000, .first_bucket_bytes = 400});
    std::vector<std::vector<float>> p{std::vector<float>(50), std::vector<float>(400),
                                      std::vector<float>(20)};
    strategy.start(tensors, {p[0], p[1], p[2]});
    const auto layout = strategy.bucket_layout();
    ASSERT_EQ(layout.size(), 3u);
    EXPECT_EQ(layout[0], (std::vector<size_t>{2}));  // fc2 (fc1 would overflow the first)
    EXPECT_EQ(layout[1], (std::vector<size_t>{1}));  // fc1, closed
    EXPECT_EQ(layout[2], (std::vector<size_t>{0}));  // conv
  });
}

TEST(AllreduceStrategyTest, DdpsBucketRuleClosesABucketOnceItReachesItsCap) {
  // Backward finishes fc2 (20 floats), fc1 (400), conv2 (30), conv1 (50); the first bucket
  // holds 100 floats, the rest 120. DDP's rule: fc2 and fc1 together (fc1 takes the first
  // bucket past its cap and closes it: DDP hands both over at once), then conv2 and conv1
  // (80 floats, under the cap).
  const std::vector<TensorInfo> tensors{{"conv1", {50}, LayerKind::kConvWeight},
                                        {"conv2", {30}, LayerKind::kConvWeight},
                                        {"fc1", {400}, LayerKind::kFcWeight},
                                        {"fc2", {20}, LayerKind::kFcWeight}};
  comm::run_local_ranks(1, 5s, [&](comm::Collectives& c) {
    AllreduceStrategy strategy(
        c,
        {.codec = "none", .bucket_bytes = 480, .first_bucket_bytes = 400, .ddp_bucket_rule = true});
    std::vector<std::vector<float>> p{std::vector<float>(50), std::vector<float>(30),
                                      std::vector<float>(400), std::vector<float>(20)};
    strategy.start(tensors, {p[0], p[1], p[2], p[3]});
    const auto layout = strategy.bucket_layout();
    ASSERT_EQ(layout.size(), 2u);
    EXPECT_EQ(layout[0], (std::vector<size_t>{3, 2}));  // fc2, fc1
    EXPECT_EQ(layout[1], (std::vector<size_t>{1, 0}));  // conv2, conv1
  });
}

TEST(AllreduceStrategyTest, CodecMismatchFailsOnEveryRankNamingBoth) {
  const std::vector<TensorInfo> tensors{{"w", {4}, LayerKind::kNorm}};
  std::vector<std::string> errors(2);
  comm::run_local_ranks(2, 5s, [&](comm::Collectives& c) {
    AllreduceStrategy strategy(c, {.codec = c.rank() == 0 ? "topk:density=0.5" : "2bit"});
    std::vector<float> param(4);
    try {
      strategy.start(tensors, {param});
    } catch (const MismatchError& e) {
      errors[c.rank()] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("rank 0 has 'codec topk:density=0.5"), std::string::npos) << e;
    EXPECT_NE(e.find("rank 1 has 'codec 2bit"), std::string::npos) << e;
  }
}

TEST(AllreduceStrategyTest, ShapeMismatchNamesTheTensor) {
  std::vector<std::string> errors(2);
  comm::run_local_ranks(2, 5s, [&](comm::Collectives& c) {
    const std::vector<TensorInfo> tensors{
        {"fc.weight", {4, c.rank() == 0 ? 8 : 9}, LayerKind::kFcWeight}};
    AllreduceStrategy strategy(c, {});
    std::vector<float> param(tensors[0].numel());
    try {
      strategy.start(tensors, {param});
    } catch (const MismatchError& e) {
      errors[c.rank()] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("tensor fc.weight [4, 8]"), std::string::npos) << e;
    EXPECT_NE(e.find("tensor fc.weight [4, 9]"), std::string::npos) << e;
  }
}

TEST(AllreduceStrategyTest, APolicyNamingATensorTheModelLacksFailsOnEveryRank) {
  // "@fc9.weight" for "@fc1.weight": without the check, fc1.weight would silently take
  // its kind's codec.
  const std::vector<TensorInfo> tensors{{"fc1.weight", {4, 8}, LayerKind::kFcWeight}};
  std::vector<std::string> errors(2);
  comm::run_local_ranks(2, 5s, [&](comm::Collectives& c) {
    AllreduceStrategy strategy(c, {.codec = "fc=int8,@fc9.weight=fp16"});
    std::vector<float> param(tensors[0].numel());
    try {
      strategy.start(tensors, {param});
    } catch (const ConfigError& e) {
      errors[c.rank()] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("names the tensor 'fc9.weight', which the model does not have"),
              std::string::npos)
        << e;
  }
}

TEST(AllreduceStrategyTest, SparseCodecSendsLessThanDense) {
  const auto tensors = toy_tensors();
  comm::run_local_ranks(2, 5s, [&](comm::Collectives& c) {
    ToyModel model(tensors, 1);
    AllreduceStrategy strategy(c, {.codec = "topk:density=0.01"});
    strategy.start(tensors, model.spans(model.params));
    for (auto& g : model.grads) std::fill(g.begin(), g.end(), 1.0f);
    strategy.synchronize(model.spans(model.grads));
    const auto t = strategy.traffic();
    EXPECT_EQ(t.bytes_dense, (288u + 8 + 3000 + 10) * 4);
    EXPECT_LT(t.bytes_contributed * 10, t.bytes_dense);
    // An allgather forwards every contribution: on the wire it is at least (W-1) times
    // the contribution, where dense fp32 would cost a ring allreduce.
    EXPECT_GE(t.bytes_on_wire, t.bytes_contributed);
    EXPECT_EQ(t.bytes_dense_on_wire, 2u * 1 * ((288u + 8 + 3000 + 10) * 4 / 2));
    EXPECT_LT(t.bytes_on_wire * 10, t.bytes_dense_on_wire);
  });
}

}  // namespace
}  // namespace gradwire::strategy
