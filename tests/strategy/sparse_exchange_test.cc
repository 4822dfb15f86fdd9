#include "gradwire/strategy/allreduce/sparse_exchange.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>

#include "gradwire/comm/local_collectives.h"
#include "gradwire/core/error.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"

namespace gradwire::strategy {
namespace {

using namespace std::chrono_literals;
using comm::SparsePath;
using compress::LayerKind;
using compress::TensorInfo;

// Rank r's decoded payloads: about `density` of n non-zeros, half of them on coordinates
// every rank picks (so the union is between k and W k).
std::vector<float> sparse_input(int rank, size_t n, double density) {
  std::mt19937 shared(7), own(100 + rank);
  std::uniform_real_distribution<double> u;
  std::normal_distribution<float> normal;
  std::vector<float> v(n, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    if (u(shared) < density / 2 || u(own) < density / 2) v[i] = normal(own);
  }
  return v;
}

TEST(SparseExchangeTest, SplitSumsInRankOrderAndDenseAgreesOnEveryRank) {
  for (int world : {1, 2, 3, 4, 5}) {
    for (size_t n : {size_t{3}, size_t{1000}, size_t{4099}}) {
      // The reference: the sum in rank order, as the allgather path computes it.
      std::vector<std::vector<float>> inputs;
      for (int r = 0; r < world; ++r) inputs.push_back(sparse_input(r, n, 0.05));
      std::vector<float> reference(n, 0.0f);
      uint64_t pairs = 0;
      std::set<size_t> coordinates;
      for (int r = 0; r < world; ++r) {
        for (size_t i = 0; i < n; ++i) {
          if (inputs[r][i] == 0.0f) continue;
          reference[i] += inputs[r][i];
          ++pairs;
          coordinates.insert(i);
        }
      }
      std::vector<std::vector<float>> dense_sums(world);
      comm::run_local_ranks(world, 10s, [&](comm::Collectives& c) {
        SparseExchange exchange(n);
        EXPECT_FALSE(exchange.totals().known);
        std::vector<float> sum(n, -1.0f);
        exchange.split(c, inputs[c.rank()], 100 + c.rank(), sum);
        EXPECT_EQ(sum, reference) << "split, world " << world << ", n " << n;
        const SparseStepTotals& totals = exchange.totals();
        EXPECT_TRUE(totals.known);
        EXPECT_EQ(totals.payload_bytes, 100u * world + world * (world - 1) / 2);
        EXPECT_EQ(totals.pairs, pairs);
        EXPECT_EQ(totals.union_count, coordinates.size());

        exchange.dense(c, inputs[c.rank()], 100 + c.rank(), sum);
        for (size_t i = 0; i < n; ++i) {
          EXPECT_NEAR(sum[i], reference[i], 1e-5f * (1 + std::abs(reference[i])));
        }
        EXPECT_EQ(exchange.totals().pairs, pairs);
        EXPECT_EQ(exchange.totals().union_count, coordinates.size());
        dense_sums[c.rank()] = sum;
      });
      for (int r = 1; r < world; ++r) EXPECT_EQ(dense_sums[r], dense_sums[0]);
    }
  }
}

// Rewrites what one rank sent in alltoalls, as a corrupt or hostile peer would.
class TamperingCollectives : public comm::LocalCollectives {
 public:
  TamperingCollectives(std::shared_ptr<comm::LocalGroup> group, int rank, int culprit)
      : LocalCollectives(std::move(group), rank), culprit_(culprit) {}
  void alltoall_bytes(std::span<const Bytes> to, std::vector<Bytes>& out) override {
    LocalCollectives::alltoall_bytes(to, out);
    Bytes& message = out[culprit_];
    const uint32_t huge = 1u << 30;  // a pair count past the message's bytes
    std::memcpy(message.data() + sizeof(uint64_t), &huge, sizeof huge);
  }

 private:
  int culprit_;
};

TEST(SparseExchangeTest, ACorruptRangeMessageNamesItsSenderAndWritesNothing) {
  constexpr int kWorld = 3;
  auto group = std::make_shared<comm::LocalGroup>(kWorld, 5s);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      TamperingCollectives c(group, r, /*culprit=*/1);
      SparseExchange exchange(64);
      const auto input = sparse_input(r, 64, 0.2);
      std::vector<float> sum(64, 42.0f);
      try {
        exchange.split(c, input, 10, sum);
      } catch (const PayloadError& e) {
        errors[r] = e.what();
      }
      EXPECT_EQ(sum, std::vector<float>(64, 42.0f)) << "rank " << r;
      EXPECT_FALSE(exchange.totals().known);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_NE(errors[r].find("from rank 1"), std::string::npos) << errors[r];
  }
}

// --- the strategy's three paths --------------------------------------------------------

std::vector<TensorInfo> sparse_tensors() {
  return {{"conv.weight", {16, 8, 3, 3}, LayerKind::kConvWeight},
          {"fc.weight", {10, 400}, LayerKind::kFcWeight},
          {"fc.bias", {10}, LayerKind::kBias}};
}

struct PathRun {
  std::vector<std::vector<std::vector<float>>> params;  // per rank
  std::vector<std::vector<SparsePath>> paths;           // per rank, bucket 0's per step
};

// Steps of SGD with gradients that share most of their large coordinates across ranks
// (as data-parallel gradients do), exchanged with `codec` over `aggregation`.
PathRun train(int world, const std::string& codec, const std::string& aggregation,
              comm::LinkModel link = {}) {
  const auto tensors = sparse_tensors();
  PathRun run;
  run.params.resize(world);
  run.paths.resize(world);
  comm::run_local_ranks(world, 20s, [&](comm::Collectives& c) {
    AllreduceStrategy strategy(c, {.codec = codec,
                                   .bucket_bytes = 1 << 20,
                                   .overlap = false,
                                   .sparse_aggregation = aggregation,
                                   .link = link});
    std::vector<std::vector<float>> params, grads;
    FloatSpans param_spans, grad_spans;
    for (const auto& t : tensors) {
      params.emplace_back(t.numel(), 0.5f);
      grads.emplace_back(t.numel());
    }
    for (auto& p : params) param_spans.emplace_back(p);
    for (auto& g : grads) grad_spans.emplace_back(g);
    strategy.start(tensors, param_spans);
    std::mt19937 common(3), own(11 + c.rank());
    std::normal_distribution<float> normal;
    for (int step = 0; step < 6; ++step) {
      for (auto& g : grads) {
        for (float& v : g) v = 3 * normal(common) + 0.3f * normal(own);
      }
      strategy.synchronize(grad_spans);
      run.paths[c.rank()].push_back(strategy.last_sparse_path(0));
      for (size_t t = 0; t < params.size(); ++t) {
        for (size_t i = 0; i < params[t].size(); ++i) params[t][i] -= 0.1f * grads[t][i];
      }
    }
    run.params[c.rank()] = params;
  });
  return run;
}

TEST(SparseAggregationTest, SplitGivesTheAllgatherPathsBitsForEverySparseCodec) {
  for (const std::string codec :
       {"topk:density=0.05", "laplace-topk:density=0.05", "randomk:density=0.05",
        "dgc:density=0.05", "conv=filter-topk,fc=gaussiank:density=0.05,other=topk"}) {
    for (int world : {3, 4}) {
      const PathRun allgather = train(world, codec, "allgather");
      const PathRun split = train(world, codec, "split");
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(split.params[r], allgather.params[0]) << codec << ", world " << world;
        EXPECT_EQ(split.paths[r], std::vector<SparsePath>(6, SparsePath::kSplit));
      }
    }
  }
}

TEST(SparseAggregationTest, DenseMatchesTheAllgatherPathToRoundingAndRanksAgree) {
  const PathRun allgather = train(4, "topk:density=0.05", "allgather");
  const PathRun dense = train(4, "topk:density=0.05", "dense");
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(dense.params[r], dense.params[0]) << "rank " << r;
    for (size_t t = 0; t < dense.params[r].size(); ++t) {
      for (size_t i = 0; i < dense.params[r][t].size(); ++i) {
        EXPECT_NEAR(dense.params[r][t][i], allgather.params[0][t][i], 1e-5f);
      }
    }
  }
}

TEST(SparseAggregationTest, AutoStartsWithAllgatherThenTakesTheCheapestPathOnEveryRank) {
  // Correlated gradients: the ranks pick nearly the same coordinates, so from the second
  // step (when the first step's union is known) split is cheapest on a bandwidth-bound
  // link.
  const comm::LinkModel link = comm::LinkModel::from_bandwidth(0, 1e8);
  const PathRun automatic = train(4, "topk:density=0.05", "auto", link);
  const PathRun allgather = train(4, "topk:density=0.05", "allgather");
  std::vector<SparsePath> expected(6, SparsePath::kSplit);
  expected[0] = SparsePath::kAllgather;
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(automatic.paths[r], expected) << "rank " << r;
    EXPECT_EQ(automatic.params[r], allgather.params[0]) << "rank " << r;
  }
  // A latency-bound link (tiny buckets, slow messages): auto stays with allgather.
  const PathRun latency = train(4, "topk:density=0.05", "auto", {1.0, 1e-12});
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(latency.paths[r], std::vector<SparsePath>(6, SparsePath::kAllgather));
  }
}

TEST(SparseAggregationTest, UnknownAggregationIsRefused) {
  comm::run_local_ranks(1, 5s, [](comm::Collectives& c) {
    EXPECT_THROW(AllreduceStrategy(c, {.sparse_aggregation = "reduce"}), ConfigError);
  });
}

}  // namespace
}  // namespace gradwire::strategy
