// The allreduce strategy's reduce-scatter path (allreduce_reduce_scatter.cc): quantized
// buckets summed in fp32 with every level of the codec, at any world size.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "gradwire/comm/local_collectives.h"
#include "gradwire/core/error.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"

namespace gradwire::strategy {
namespace {

using namespace std::chrono_literals;
using compress::LayerKind;
using compress::TensorInfo;

std::vector<TensorInfo> tensors() {
  return {{"fc1.weight", {40, 60}, LayerKind::kFcWeight},
          {"fc1.bias", {40}, LayerKind::kBias},
          {"fc2.weight", {10, 40}, LayerKind::kFcWeight}};
}

using Grads = std::vector<std::vector<float>>;

Grads normal_grads(int rank, int step) {
  std::mt19937 rng(static_cast<uint32_t>(1000 * step + rank));
  std::normal_distribution<float> normal;
  Grads g;
  for (const auto& t : tensors()) {
    g.emplace_back(t.numel());
    for (float& v : g.back()) v = normal(rng);
  }
  return g;
}

// The model's parameters, zero on every rank.
Grads zero_params() {
  Grads params;
  for (const auto& t : tensors()) params.emplace_back(t.numel(), 0.0f);
  return params;
}

FloatSpans spans(Grads& g) {
  FloatSpans out;
  for (auto& t : g) out.emplace_back(t);
  return out;
}

struct Aggregates {
  std::vector<Grads> inputs, outputs;  // per rank, of the last step
  std::vector<std::string> paths;      // rank 0's, per bucket
};

// `steps` synchronize() calls on `world` ranks, each step every rank's own normal gradients.
Aggregates run(int world, AllreduceOptions options, int steps = 1) {
  Aggregates r{std::vector<Grads>(world), std::vector<Grads>(world), {}};
  comm::run_local_ranks(world, 60s, [&](comm::Collectives& c) {
    Grads params = zero_params();
    AllreduceStrategy s(c, options);
    s.start(tensors(), spans(params));
    for (int step = 0; step < steps; ++step) {
      Grads g = normal_grads(c.rank(), step);
      r.inputs[c.rank()] = g;
      s.synchronize(spans(g));
      r.outputs[c.rank()] = g;
    }
    if (c.rank() == 0) {
      for (size_t b = 0; b < s.bucket_layout().size(); ++b) r.paths.push_back(s.bucket_path(b));
    }
  });
  return r;
}

// The largest |output - exact mean| over every element, and the largest |input|.
std::pair<double, double> worst_error(const Aggregates& r) {
  double worst = 0, largest = 0;
  const size_t world = r.inputs.size();
  for (size_t t = 0; t < r.inputs[0].size(); ++t) {
    for (size_t i = 0; i < r.inputs[0][t].size(); ++i) {
      double mean = 0;
      for (size_t k = 0; k < world; ++k) {
        mean += r.inputs[k][t][i];
        largest = std::max(largest, double(std::fabs(r.inputs[k][t][i])));
      }
      mean /= static_cast<double>(world);
      worst = std::max(worst, std::fabs(r.outputs[0][t][i] - mean));
    }
  }
  return {worst, largest};
}

// At 16 ranks every quantizer's bucket stays within its documented bound of the exact
// mean: two roundings (the rank's values, then the owner's mean), each at most half a
// step of the codec's own levels (int8: the block's largest |value| / 127, int4: / 7; fp16
// and bf16: relative 2^-11 and 2^-8), whatever the world; and every rank gets the same.
TEST(AllreduceReduceScatter, EveryQuantizerKeepsItsBoundAt16Ranks) {
  for (const auto& [codec, step] :
       std::vector<std::pair<std::string, double>>{{"int8:ef=0", 1.0 / 127},
                                                   {"int4:ef=0", 1.0 / 7},
                                                   {"fp16", 1.0 / 2048},
                                                   {"bf16", 1.0 / 256}}) {
    const Aggregates r = run(16, {.codec = codec, .quantized_path = "reduce-scatter"});
    const auto [worst, largest] = worst_error(r);
    EXPECT_LE(worst, step * largest) << codec;  // two half steps
    for (const auto& path : r.paths) EXPECT_EQ(path, "reduce-scatter") << codec;
    for (size_t k = 1; k < r.outputs.size(); ++k) EXPECT_EQ(r.outputs[k], r.outputs[0]) << codec;
  }
}

// "auto" keeps int8's shared-scale ring where its levels suffice (31 per sign at 4 ranks)
// and takes the reduce-scatter beyond (15 at 8); forced onto the ring at 16 ranks, int8
// has 7 levels and an error several times the reduce-scatter's.
TEST(AllreduceReduceScatter, Int8LeavesTheRingWhereItsLevelsRunOut) {
  EXPECT_EQ(run(4, {.codec = "int8:ef=0"}).paths,
            std::vector<std::string>{"shared-scale allreduce"});
  EXPECT_EQ(run(8, {.codec = "int8:ef=0"}).paths, std::vector<std::string>{"reduce-scatter"});
  const auto ring = worst_error(run(16, {.codec = "int8:ef=0", .quantized_path = "ring"}));
  const auto scatter = worst_error(run(16, {.codec = "int8:ef=0"}));
  EXPECT_GT(ring.first, 4 * scatter.first);
  EXPECT_LE(ring.first, ring.second / 7 / 2 * 1.0001);  // the ring's own bound, 7 levels
}

// "auto" sends fp16 by the reduce-scatter from 3 ranks on a link of 1 Gbit/s or faster
// (the default link), where Gloo's software fp16 sum costs more than the reduce-scatter's
// casts; at 2 ranks and on a slower link it keeps Gloo's fp16 allreduce. Either path is
// within two fp16 roundings of the exact mean.
TEST(AllreduceReduceScatter, Fp16TakesTheReduceScatterFrom3RanksOnAFastLink) {
  const auto link = [](double bits_per_s) {
    return comm::LinkModel::from_bandwidth(50e-6, bits_per_s);
  };
  const std::vector<std::string> ring{"allreduce"}, scatter{"reduce-scatter"};
  EXPECT_EQ(run(2, {.codec = "fp16"}).paths, ring);
  EXPECT_EQ(run(3, {.codec = "fp16"}).paths, scatter);
  EXPECT_EQ(run(4, {.codec = "fp16", .link = link(10e9)}).paths, scatter);
  const Aggregates slow = run(4, {.codec = "fp16", .link = link(100e6)});
  EXPECT_EQ(slow.paths, ring);
  for (const Aggregates& r : {run(4, {.codec = "fp16"}), slow}) {
    const auto [worst, largest] = worst_error(r);
    EXPECT_LE(worst, largest / 2048);
  }
}

// With error feedback the reduce-scatter's residuals carry over: a step's aggregates,
// summed over steps of the same gradients, approach the mean much closer than one step.
TEST(AllreduceReduceScatter, ErrorFeedbackCarriesTheResidual) {
  const int world = 6, steps = 40;
  std::vector<Grads> sums(world);
  std::vector<Grads> inputs(world);
  comm::run_local_ranks(world, 60s, [&](comm::Collectives& c) {
    Grads params = zero_params();
    AllreduceStrategy s(c, {.codec = "int4", .quantized_path = "reduce-scatter"});
    s.start(tensors(), spans(params));
    inputs[c.rank()] = normal_grads(c.rank(), 0);
    for (const auto& t : inputs[c.rank()]) sums[c.rank()].emplace_back(t.size(), 0.0f);
    for (int step = 0; step < steps; ++step) {
      Grads g = inputs[c.rank()];
      s.synchronize(spans(g));
      for (size_t t = 0; t < g.size(); ++t) {
        for (size_t i = 0; i < g[t].size(); ++i) sums[c.rank()][t][i] += g[t][i] / steps;
      }
    }
  });
  Aggregates averaged{inputs, sums, {}};
  const auto [worst, largest] = worst_error(averaged);
  EXPECT_LT(worst, largest / 7 / steps * 4);  // a one-step error is up to largest / 7
}

// Saved after some steps and loaded into a fresh strategy, a run with the reduce-scatter's
// residuals continues bit for bit.
TEST(AllreduceReduceScatter, CheckpointResumesExactly) {
  const int world = 6;
  std::vector<Grads> straight(world), resumed(world);
  comm::run_local_ranks(world, 60s, [&](comm::Collectives& c) {
    Grads params = zero_params();
    const AllreduceOptions o{.codec = "int8", .quantized_path = "reduce-scatter"};
    AllreduceStrategy a(c, o);
    a.start(tensors(), spans(params));
    Bytes state;
    for (int step = 0; step < 6; ++step) {
      if (step == 3) a.save_state(state);
      Grads g = normal_grads(c.rank(), step);
      a.synchronize(spans(g));
      straight[c.rank()] = g;
    }
    AllreduceStrategy b(c, o);
    b.start(tensors(), spans(params));
    ByteReader in(state);
    b.load_state(in);
    in.expect_end("state");
    for (int step = 3; step < 6; ++step) {
      Grads g = normal_grads(c.rank(), step);
      b.synchronize(spans(g));
      resumed[c.rank()] = g;
    }
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(resumed[r], straight[r]) << r;
}

// A tensor without a gradient on any rank this step keeps its residual: held before the
// step (which exchanges zeros for it) and restored after, its next aggregate is bitwise
// that of a run that never had the step. The tensor has a bucket of its own here, so that
// no other tensor shares its ranges' blocks.
TEST(AllreduceReduceScatter, AHeldTensorKeepsItsResidual) {
  const int world = 5;
  std::vector<Grads> held(world), reference(world);
  comm::run_local_ranks(world, 60s, [&](comm::Collectives& c) {
    Grads params = zero_params();
    // fc2.weight (1600 B) closes the first bucket, fc1.bias (160 B) cannot join fc1.weight.
    const AllreduceOptions o{.codec = "int8",
                             .bucket_bytes = 1000,
                             .first_bucket_bytes = 1000,
                             .quantized_path = "reduce-scatter"};
    AllreduceStrategy skipped(c, o), with_hold(c, o);
    skipped.start(tensors(), spans(params));
    with_hold.start(tensors(), spans(params));
    ASSERT_EQ(with_hold.bucket_layout().size(), 3u);
    for (int step = 0; step < 4; ++step) {
      Grads g = normal_grads(c.rank(), step), h = g;
      if (step == 2) {
        with_hold.hold_codec_state(1);
        std::fill(h[1].begin(), h[1].end(), 0.0f);
        with_hold.synchronize(spans(h));
        const std::vector<uint8_t> unused_everywhere{0, 1, 0};
        with_hold.restore_codec_states(unused_everywhere);
        continue;
      }
      skipped.synchronize(spans(g));
      with_hold.synchronize(spans(h));
      reference[c.rank()] = g;
      held[c.rank()] = h;
    }
  });
  for (int r = 0; r < world; ++r) EXPECT_EQ(held[r][1], reference[r][1]) << r;
}

// One rank's non-finite gradient on the reduce-scatter: that rank's failure names the
// tensor, the others report none (the step's status tells them), and every rank's bucket
// is zero, equal everywhere: no rank hangs and none sums the bad values.
TEST(AllreduceReduceScatter, ANonFiniteGradientOnOneRankFailsItNamingTheTensor) {
  const int world = 5;
  std::vector<std::string> failures(world);
  std::vector<Grads> outputs(world);
  comm::run_local_ranks(world, 20s, [&](comm::Collectives& c) {
    Grads params = zero_params();
    AllreduceStrategy s(c, {.codec = "int8", .quantized_path = "reduce-scatter"});
    s.start(tensors(), spans(params));
    Grads g = normal_grads(c.rank(), 0);
    if (c.rank() == 3) g[2][7] = std::numeric_limits<float>::infinity();
    s.synchronize(spans(g));
    failures[c.rank()] = s.take_local_failure();
    outputs[c.rank()] = g;
  });
  for (int r = 0; r < world; ++r) {
    if (r == 3) {
      EXPECT_NE(failures[r].find("'fc2.weight'"), std::string::npos) << failures[r];
    } else {
      EXPECT_EQ(failures[r], "") << r;
    }
    EXPECT_EQ(outputs[r], outputs[0]) << r;
    for (const auto& t : outputs[r]) {
      EXPECT_EQ(t, std::vector<float>(t.size(), 0.0f)) << r;
    }
  }
}

}  // namespace
}  // namespace gradwire::strategy
