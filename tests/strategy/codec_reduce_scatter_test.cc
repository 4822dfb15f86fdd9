#include "gradwire/strategy/codec_reduce_scatter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "gradwire/comm/local_collectives.h"
#include "gradwire/comm/wire_bytes.h"
#include "gradwire/core/error.h"

namespace gradwire::strategy {
namespace {

using namespace std::chrono_literals;

std::vector<std::vector<float>> normal_inputs(int world, size_t n, uint32_t seed) {
  std::vector<std::vector<float>> inputs(world);
  for (int r = 0; r < world; ++r) {
    std::mt19937 rng(seed + static_cast<uint32_t>(r));
    std::normal_distribution<float> normal;
    for (size_t i = 0; i < n; ++i) inputs[r].push_back(normal(rng));
  }
  return inputs;
}

struct Outcome {
  std::vector<std::vector<float>> outputs;
  std::vector<uint64_t> wire, predicted;
  std::vector<std::vector<int>> refusing;
};

Outcome average(const std::string& codec, const std::vector<std::vector<float>>& inputs) {
  const int world = static_cast<int>(inputs.size());
  Outcome o{std::vector<std::vector<float>>(world), std::vector<uint64_t>(world),
            std::vector<uint64_t>(world), std::vector<std::vector<int>>(world)};
  comm::run_local_ranks(world, 20s, [&](comm::Collectives& c) {
    CodecReduceScatter rs(c, codec, "bucket", inputs[0].size());
    auto v = inputs[c.rank()];
    const auto before = c.traffic().on_wire;
    o.refusing[c.rank()] = rs.average(v);
    o.wire[c.rank()] = c.traffic().on_wire - before;
    o.predicted[c.rank()] = rs.wire_bytes();
    o.outputs[c.rank()] = v;
  });
  return o;
}

// The largest |output - exact mean| over the elements.
double worst_error(const std::vector<std::vector<float>>& inputs, const std::vector<float>& out) {
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    double mean = 0;
    for (const auto& in : inputs) mean += in[i];
    mean /= static_cast<double>(inputs.size());
    worst = std::max(worst, std::fabs(out[i] - mean));
  }
  return worst;
}

// int8 at 16 ranks keeps its 127 levels per sign: the mean within half a step of each of
// its two quantizations (the ranks' values, then the owner's mean), a step being the
// block's largest |value| / 127; the shared-scale allreduce would have floor(127/16) = 7
// levels, a step 18 times as large. Every rank bitwise equal, the bytes as predicted:
// 2(W-1)/W of an int8 payload per rank.
TEST(CodecReduceScatter, Int8At16RanksKeepsItsLevels) {
  const int world = 16;
  const size_t n = 3000;
  const auto inputs = normal_inputs(world, n, 11);
  const auto o = average("int8:ef=0", inputs);
  float largest = 0;
  for (const auto& in : inputs) {
    for (float v : in) largest = std::max(largest, std::fabs(v));
  }
  const double step = largest / 127.0;
  EXPECT_LT(worst_error(inputs, o.outputs[0]), step);  // two half steps at most
  EXPECT_GT(largest / 7.0 / 2.0, 8 * step);            // what shared scale would allow
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(o.outputs[r], o.outputs[0]) << r;
    EXPECT_TRUE(o.refusing[r].empty()) << r;
    EXPECT_EQ(o.wire[r], o.predicted[r]) << r;
    // A quarter of fp32's ring allreduce, plus the scales and the messages' framing.
    EXPECT_LT(o.wire[r] * 3, comm::ring_allreduce_wire_bytes(4 * n, world)) << r;
  }
}

// fp16 summed in fp32: the mean within two fp16 roundings of it (relative 2^-11 each),
// however many ranks; bf16 likewise within two of its roundings (2^-8).
TEST(CodecReduceScatter, HalfPrecisionsSumInFp32) {
  for (const auto& [codec, relative] :
       std::vector<std::pair<std::string, double>>{{"fp16", 1.0 / 2048}, {"bf16", 1.0 / 256}}) {
    for (int world : {2, 5, 16}) {
      const auto inputs = normal_inputs(world, 1001, 5);
      const auto o = average(codec, inputs);
      double worst_relative = 0;
      for (size_t i = 0; i < inputs[0].size(); ++i) {
        double mean = 0, scale = 0;
        for (const auto& in : inputs) {
          mean += in[i];
          scale = std::max(scale, double(std::fabs(in[i])));
        }
        mean /= world;
        // The first rounding is of each rank's value (at most `scale`), the second of the mean.
        worst_relative = std::max(worst_relative, std::fabs(o.outputs[0][i] - mean) / scale);
      }
      EXPECT_LE(worst_relative, 2 * relative) << codec << " at " << world;
      for (int r = 1; r < world; ++r) EXPECT_EQ(o.outputs[r], o.outputs[0]) << codec << r;
    }
  }
}

// A vector shorter than the world (a bias at many ranks): some ranges are empty, and the
// mean still comes out within the codec's bound on every rank alike.
TEST(CodecReduceScatter, AVectorShorterThanTheWorldHasEmptyRanges) {
  for (const std::string codec : {"int8", "int4", "fp16", "bf16"}) {
    const auto inputs = normal_inputs(8, 5, 2);
    const auto o = average(codec, inputs);
    float largest = 0;
    for (const auto& in : inputs) {
      for (float v : in) largest = std::max(largest, std::fabs(v));
    }
    EXPECT_LE(worst_error(inputs, o.outputs[0]), largest / 7.0) << codec;  // int4's bound
    for (size_t r = 1; r < o.outputs.size(); ++r) EXPECT_EQ(o.outputs[r], o.outputs[0]) << codec;
    for (size_t r = 0; r < o.wire.size(); ++r) EXPECT_EQ(o.wire[r], o.predicted[r]) << codec;
  }
}

// A rank whose codec refuses its values (non-finite) sends nothing; every rank learns the
// same list, values are zero everywhere, and the refusing rank says why.
TEST(CodecReduceScatter, ARefusingRankIsNamedOnEveryRank) {
  const int world = 4;
  auto inputs = normal_inputs(world, 400, 3);
  inputs[2][17] = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::string> why(world);
  std::vector<std::vector<int>> refusing(world);
  std::vector<std::vector<float>> outputs(world);
  comm::run_local_ranks(world, 20s, [&](comm::Collectives& c) {
    CodecReduceScatter rs(c, "int8", "bucket", 400);
    auto v = inputs[c.rank()];
    refusing[c.rank()] = rs.average(v);
    why[c.rank()] = rs.refused_here();
    outputs[c.rank()] = v;
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(refusing[r], std::vector<int>{2}) << r;
    EXPECT_EQ(outputs[r], std::vector<float>(400, 0.0f)) << r;
    EXPECT_EQ(why[r].empty(), r != 2) << r << ": " << why[r];
  }
}

}  // namespace
}  // namespace gradwire::strategy
