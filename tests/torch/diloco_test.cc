// Strategy "diloco" through DistributedOptimizer over real Gloo: against a single-process
// reference of the algorithm with libtorch's AdamW as the inner optimizer, .grad left as
// backward made it, buffers following rank 0 when the models meet, finish(), and a job
// stopped mid-flight and resumed from its checkpoint training on bit for bit.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>

#include "../common/command_runner.h"
#include "gradwire/distributed_optimizer.h"
#include "torch_test_util.h"

namespace gradwire {
namespace {

using torch::optim::AdamW;
using torch::optim::AdamWOptions;

constexpr int kWorld = 2;

torch::Tensor batch_x(const Problem& p, int step, int rank) { return rank_batch_x(p, step, rank); }
torch::Tensor batch_y(const Problem& p, int step, int rank) { return rank_batch_y(p, step, rank); }

DistributedOptions diloco(uint64_t h, int fragments = 1, uint64_t delay = 0,
                          const std::string& codec = "none") {
  DistributedOptions o;
  o.strategy = "diloco";
  o.compressor = codec;
  o.diloco.inner_steps = h;
  o.diloco.fragments = fragments;
  o.diloco.delay = delay;
  o.diloco.outer_lr = 0.7;  // the reference's Nesterov step (the defaults average plainly)
  o.diloco.outer_momentum = 0.9;
  return o;
}

// H = 3, fp32, no streaming, for 7 steps: every rank's model is the reference's, in which
// two nets with their own AdamW take the ranks' steps and every third step the outer
// Nesterov step is applied by hand; the synchronized model (with_synchronized_model) is
// the reference's theta_g at every step; after finish() both hold the mean of the two.
TEST(DiLoCoOptimizer, MatchesASingleProcessReferenceWithAdamW) {
  const Problem problem;
  const int steps = 7, h = 3;
  const double lr = 0.7, mu = 0.9;
  std::vector<std::shared_ptr<SmallNet>> ref{problem.fresh_net(), problem.fresh_net()};
  std::vector<std::unique_ptr<AdamW>> ref_opt;
  for (auto& n : ref)
    ref_opt.push_back(std::make_unique<AdamW>(n->parameters(), AdamWOptions(0.01)));
  std::vector<torch::Tensor> global, momentum;
  for (auto& p : ref[0]->parameters()) {
    global.push_back(p.detach().clone());
    momentum.push_back(torch::zeros_like(p));
  }
  std::vector<std::vector<torch::Tensor>> ref_grads(steps), global_at(steps);
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < kWorld; ++r) {
      ref_opt[r]->zero_grad();
      torch::nn::functional::cross_entropy(ref[r]->forward(batch_x(problem, s, r)),
                                           batch_y(problem, s, r))
          .backward();
      if (r == 1) {
        for (auto& p : ref[r]->parameters()) ref_grads[s].push_back(p.grad().clone());
      }
      ref_opt[r]->step();
    }
    if ((s + 1) % h == 0) {
      torch::NoGradGuard no_grad;
      auto p0 = ref[0]->parameters(), p1 = ref[1]->parameters();
      for (size_t i = 0; i < global.size(); ++i) {
        const auto delta = ((global[i] - p0[i]) + (global[i] - p1[i])) / 2;
        momentum[i] = mu * momentum[i] + delta;
        global[i] = global[i] - lr * (delta + mu * momentum[i]);
        p0[i].copy_(global[i]);
        p1[i].copy_(global[i]);
      }
    }
    for (auto& g : global) global_at[s].push_back(g.clone());
  }
  std::vector<torch::Tensor> mean;
  {
    auto p0 = ref[0]->parameters(), p1 = ref[1]->parameters();
    for (size_t i = 0; i < p0.size(); ++i) mean.push_back((p0[i] + p1[i]) / 2);
  }

  std::vector<std::vector<torch::Tensor>> before(kWorld), after(kWorld);
  std::vector<std::optional<DiLoCoSummary>> summaries(kWorld);
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto net = problem.fresh_net(rank == 0 ? 0.0f : 0.5f);  // rank 0's weights win
    DistributedOptimizer opt(context_for(rank, kWorld, c),
                             AdamW(net->parameters(), AdamWOptions(0.01)), *net, diloco(h));
    for (int s = 0; s < steps; ++s) {
      opt.zero_grad();
      torch::nn::functional::cross_entropy(net->forward(batch_x(problem, s, rank)),
                                           batch_y(problem, s, rank))
          .backward();
      opt.step();
      // The model to evaluate is the last synchronized one, theta_g (the reference's
      // `global`), on both ranks; the rank's own model is back afterwards.
      std::vector<torch::Tensor> own;
      for (auto& p : net->parameters()) own.push_back(p.detach().clone());
      opt.with_synchronized_model([&] {
        auto params = net->parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          EXPECT_TRUE(torch::allclose(params[i], global_at[s][i], 1e-4, 1e-5))
              << "rank " << rank << " step " << s << " parameter " << i;
        }
      });
      {
        auto params = net->parameters();
        for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i], own[i]));
      }
      if (rank == 1) {  // .grad is this rank's own gradient, untouched by the exchange
        auto params = net->parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          EXPECT_TRUE(torch::allclose(params[i].grad(), ref_grads[s][i], 1e-5, 1e-6))
              << "step " << s << " parameter " << i;
        }
      }
    }
    for (auto& p : net->parameters()) before[rank].push_back(p.detach().clone());
    EXPECT_EQ(opt.finish(), std::nullopt);
    for (auto& p : net->parameters()) after[rank].push_back(p.detach().clone());
    summaries[rank] = opt.diloco_summary();
  });
  for (int r = 0; r < kWorld; ++r) {
    auto want = ref[r]->parameters();
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(torch::allclose(before[r][i], want[i], 1e-4, 1e-5))
          << "rank " << r << " parameter " << i << ": max diff "
          << (before[r][i] - want[i]).abs().max().item<double>();
      EXPECT_TRUE(torch::equal(after[r][i], after[0][i])) << "rank " << r << " after finish()";
      EXPECT_TRUE(torch::allclose(after[r][i], mean[i], 1e-4, 1e-5)) << "parameter " << i;
    }
    ASSERT_TRUE(summaries[r]);
    EXPECT_EQ(summaries[r]->inner_steps, 3u);
    EXPECT_EQ(summaries[r]->outer_steps, 2u);
    EXPECT_EQ(summaries[r]->steps, 7u);
    EXPECT_GT(summaries[r]->bytes_on_wire, 0u);
  }
}

// BatchNorm's statistics: each rank's own within a round, rank 0's once the round's last
// fragment lands, and after finish().
TEST(DiLoCoOptimizer, BuffersFollowRankZeroWhenTheModelsMeet) {
  const Problem problem;
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    torch::manual_seed(1);
    BatchNormNet net;
    auto context = context_for(rank, kWorld, c);
    DistributedOptimizer opt(context, AdamW(net.parameters(), AdamWOptions(0.01)), net,
                             diloco(4, 2, 1));
    const auto mean_of_ranks = [&] {
      return context->allgather(net.bn->running_mean.sum().item<double>());
    };
    for (int s = 0; s < 6; ++s) {
      opt.zero_grad();
      torch::nn::functional::cross_entropy(net.forward(batch_x(problem, s, rank)),
                                           batch_y(problem, s, rank))
          .backward();
      opt.step();
      const auto sums = mean_of_ranks();
      // Fragment 1 is sent at step 4 (the fourth) and lands a step later.
      if (s == 4) {
        EXPECT_EQ(sums[0], sums[1]) << "step " << s;
      } else if (s == 2) {
        EXPECT_NE(sums[0], sums[1]) << "step " << s;
      }
    }
    opt.finish();
    const auto sums = mean_of_ranks();
    EXPECT_EQ(sums[0], sums[1]);
  });
}

// Records the thread of every broadcast once armed.
class BroadcastThreads : public ForwardingCollectives {
 public:
  using ForwardingCollectives::ForwardingCollectives;
  void arm() { armed_ = true; }
  void broadcast(void* data, size_t bytes, int root) override {
    if (armed_) {
      std::lock_guard<std::mutex> lock(mutex_);
      threads_.push_back(std::this_thread::get_id());
    }
    ForwardingCollectives::broadcast(data, bytes, root);
  }
  std::vector<std::thread::id> threads() {
    std::lock_guard<std::mutex> lock(mutex_);
    return threads_;
  }

 private:
  std::atomic<bool> armed_{false};
  std::mutex mutex_;
  std::vector<std::thread::id> threads_;
};

// With the delay at its largest (H / F, what --inner-steps auto sets), the round's last
// fragment lands at the step that sends the next round's first: a buffer broadcast issued by
// step() then waited for that whole exchange, one exposed exchange per round for any model
// with buffers. The buffers now travel inside the round's exchange, on the exchange thread:
// the program's thread issues no broadcast while training, and the buffers still follow
// rank 0 (equal on every rank once the round has landed).
TEST(DiLoCoOptimizer, BuffersTravelInTheRoundsExchangeNotInStep) {
  const Problem problem;
  std::vector<std::vector<std::thread::id>> broadcasts(kWorld);
  std::vector<std::thread::id> program(kWorld);
  std::vector<std::vector<double>> after_landing(kWorld);
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto recording = std::make_unique<BroadcastThreads>(std::move(c));
    BroadcastThreads* record = recording.get();
    std::unique_ptr<comm::Collectives> wrapped = std::move(recording);
    torch::manual_seed(1);
    BatchNormNet net;
    auto context = context_for(rank, kWorld, wrapped);
    DistributedOptimizer opt(context, AdamW(net.parameters(), AdamWOptions(0.01)), net,
                             diloco(4, 2, 2));
    record->arm();
    program[rank] = std::this_thread::get_id();
    for (int s = 0; s < 8; ++s) {
      opt.zero_grad();
      torch::nn::functional::cross_entropy(net.forward(batch_x(problem, s, rank)),
                                           batch_y(problem, s, rank))
          .backward();
      opt.step();
      // Fragment 1 is sent at the fourth step and lands at the sixth (s = 5).
      if (s == 5)
        after_landing[rank] = context->allgather(net.bn->running_mean.sum().item<double>());
    }
    broadcasts[rank] = record->threads();
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_FALSE(broadcasts[r].empty()) << "rank " << r;  // the buffers did travel
    for (const auto& id : broadcasts[r]) EXPECT_NE(id, program[r]) << "rank " << r;
    ASSERT_EQ(after_landing[r].size(), 2u);
    EXPECT_EQ(after_landing[r][0], after_landing[r][1]);
  }
}

// A job checkpointed while a fragment's exchange is in flight (int4, its residuals) and
// resumed on fresh objects trains on exactly as the job that never stopped: every rank's
// own parameters, BatchNorm statistics and AdamW state come back.
TEST(DiLoCoOptimizer, ResumesExactlyFromACheckpointTakenMidFlight) {
  const Problem problem;
  const std::string path = testing::temp_path("gw_diloco_", "job.ckpt");
  const auto run = [&](int first, int last, const std::string& save, const std::string& load) {
    std::vector<std::vector<torch::Tensor>> out(kWorld);
    torch::manual_seed(load.empty() ? 1 : 2);
    std::vector<std::shared_ptr<BatchNormNet>> nets;
    for (int r = 0; r < kWorld; ++r) nets.push_back(std::make_shared<BatchNormNet>());
    testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
      BatchNormNet& net = *nets[rank];
      DistributedOptimizer opt(context_for(rank, kWorld, c),
                               AdamW(net.parameters(), AdamWOptions(0.01)), net,
                               diloco(4, 2, 1, "int4"));
      if (!load.empty()) EXPECT_EQ(opt.load_checkpoint(load).value_or(""), "resume");
      for (int s = first; s < last; ++s) {
        opt.zero_grad();
        torch::nn::functional::cross_entropy(net.forward(batch_x(problem, s, rank)),
                                             batch_y(problem, s, rank))
            .backward();
        opt.step();
      }
      if (!save.empty()) {
        opt.save_checkpoint(save, "resume");
        return;
      }
      opt.finish();
      for (auto& p : net.parameters()) out[rank].push_back(p.detach().clone());
      for (auto& b : net.buffers()) out[rank].push_back(b.detach().clone());
    });
    return out;
  };
  std::remove(path.c_str());
  const auto whole = run(0, 11, "", "");
  run(0, 6, path, "");  // fragment 0 was sent at step 6 and lands at 7
  const auto resumed = run(6, 11, "", path);
  std::remove(path.c_str());
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(resumed[r].size(), whole[r].size());
    for (size_t i = 0; i < whole[r].size(); ++i) {
      EXPECT_TRUE(torch::equal(resumed[r][i], whole[r][i])) << "rank " << r << " tensor " << i;
    }
  }
}

TEST(DiLoCoOptimizer, AdaptiveCodecsAndLowRankCodecsAreRefused) {
  const Problem problem;
  testing::run_gloo_ranks(1, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto context = context_for(rank, 1, c);
    auto net = problem.fresh_net();
    EXPECT_NE(error_of([&] {
                DistributedOptimizer(context, AdamW(net->parameters()), *net,
                                     diloco(10, 1, 0, "auto"));
              }).find("fixed codec"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                DistributedOptimizer(context, AdamW(net->parameters()), *net,
                                     diloco(10, 1, 0, "powersgd"));
              }).find("low-rank"),
              std::string::npos);
  });
}

}  // namespace
}  // namespace gradwire
