// The exchange's failure paths, each injected on one rank of a real 2-rank Gloo job: every
// rank must fail promptly (well within the 30 s collective timeout) with an error that names
// the rank and the cause, and the ranks must go on in step afterwards, as PyTorch DDP's
// users expect. Also the options that decide the sequence of collectives: one flipped on one
// rank fails construction on both, naming it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <map>
#include <mutex>
#include <optional>

#include "gradwire/comm/collectives.h"
#include "gradwire/core/error.h"
#include "gradwire/distributed_optimizer.h"
#include "torch_test_util.h"

namespace gradwire {
namespace {

using Clock = std::chrono::steady_clock;
using torch::optim::SGD;
using torch::optim::SGDOptions;

constexpr int kWorld = 2;
// Far below the harness's 30 s collective timeout: a rank that waited the timeout out fails.
constexpr double kPromptSeconds = 10;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

torch::Tensor slice_x(const Problem& p, int step, int rank) { return rank_batch_x(p, step, rank); }
torch::Tensor slice_y(const Problem& p, int step, int rank) { return rank_batch_y(p, step, rank); }

// One rank's view of a run: the error of each failed step (by step), how long the failing
// call took, and the parameters at the end.
struct RankRun {
  std::map<int, std::string> errors;
  std::map<int, double> error_seconds;
  std::vector<torch::Tensor> params;
};

// SmallNet whose logits' hook throws on demand: backward fails before any parameter's
// gradient is final, so this rank's optimizer sees nothing of that backward.
struct RejectingNet : SmallNet {
  bool reject = false;
  torch::Tensor forward(torch::Tensor x) {
    auto out = SmallNet::forward(x);
    if (out.requires_grad()) {
      out.register_hook([this](torch::Tensor g) {
        if (reject) throw std::runtime_error("a rejected batch");
        return g;
      });
    }
    return out;
  }
};

// The loop as the contract allows it: zero_grad(), forward, backward; a step whose backward
// throws is skipped (the batch dropped) and the loop goes on.
template <typename Net>
void run_loop(Net& net, DistributedOptimizer& opt, const Problem& problem, int rank, int steps,
              const std::function<void(Net&, int step)>& before, RankRun& out,
              const std::function<torch::Tensor(torch::Tensor, int step)>& loss_scale = {}) {
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    before(net, s);
    const auto begin = Clock::now();
    try {
      auto loss = torch::nn::functional::cross_entropy(net.forward(slice_x(problem, s, rank)),
                                                       slice_y(problem, s, rank));
      if (loss_scale) loss = loss_scale(loss, s);
      loss.backward();
    } catch (const std::exception& e) {
      out.errors[s] = e.what();
      out.error_seconds[s] = seconds_since(begin);
      continue;
    }
    opt.step();
  }
  for (auto& p : net.parameters()) out.params.push_back(p.detach().clone());
}

void expect_equal_params(const std::vector<RankRun>& runs) {
  ASSERT_EQ(runs[0].params.size(), runs[1].params.size());
  for (size_t i = 0; i < runs[0].params.size(); ++i) {
    EXPECT_TRUE(torch::equal(runs[0].params[i], runs[1].params[i])) << "tensor " << i;
  }
}

// int8 refuses a non-finite gradient. Before, it threw before its bucket's allreduce-max on
// the failing rank only, and the other rank waited out the whole timeout.
TEST(ExchangeFaultsTest, ACodecThatRefusesOneRanksGradientFailsEveryRankPromptly) {
  const Problem problem;
  constexpr int kSteps = 5, kBad = 2;
  std::vector<RankRun> runs(kWorld);
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto context = context_for(rank, kWorld, c);
    auto net = problem.fresh_net();
    DistributedOptimizer opt(context, SGD(net->parameters(), SGDOptions(0.1)), *net,
                             {.compressor = "int8",
                              .bucket_bytes = 512,
                              .first_bucket_bytes = 64,
                              .measured_buckets = false});
    run_loop<SmallNet>(
        *net, opt, problem, rank, kSteps, [](SmallNet&, int) {}, runs[rank],
        [&](torch::Tensor loss, int s) {
          return s == kBad && rank == 1 ? loss * std::numeric_limits<float>::quiet_NaN() : loss;
        });
  });
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(runs[r].errors.size(), 1u) << "rank " << r;
    ASSERT_EQ(runs[r].errors.count(kBad), 1u) << "rank " << r;
    const std::string& e = runs[r].errors.at(kBad);
    EXPECT_NE(e.find("the gradient exchange failed on rank 1: encoding the gradient of"),
              std::string::npos)
        << "rank " << r << ": " << e;
    EXPECT_NE(e.find("non-finite values"), std::string::npos) << e;
    EXPECT_LT(runs[r].error_seconds.at(kBad), kPromptSeconds) << "rank " << r;
  }
  // Both skipped the same step and went on in step: the same parameters, all finite.
  expect_equal_params(runs);
  for (const auto& p : runs[0].params) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
}

// Runs RejectingNet on kWorld ranks with `codec`; rank 1's batch is rejected at step `bad`
// (its backward throws before any parameter's gradient is final, so no exchange opens on
// rank 1), and rank r runs steps[r] iterations. `everywhere`: every rank drops that batch
// instead, before its backward (the reference).
std::vector<RankRun> run_rejecting(const Problem& problem, const std::string& codec, int bad,
                                   std::vector<int> steps, bool everywhere = false) {
  std::vector<RankRun> runs(kWorld);
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto context = context_for(rank, kWorld, c);
    RejectingNet net;
    {
      torch::NoGradGuard no_grad;
      auto params = net.parameters();
      for (size_t i = 0; i < params.size(); ++i) params[i].copy_(problem.init[i]);
    }
    DistributedOptimizer opt(context, SGD(net.parameters(), SGDOptions(0.1)), net,
                             {.compressor = codec, .measured_buckets = false});
    run_loop<RejectingNet>(
        net, opt, problem, rank, steps[rank],
        [&](RejectingNet& n, int s) { n.reject = (everywhere || rank == 1) && s == bad; },
        runs[rank]);
  });
  return runs;
}

// A hook on the logits rejects rank 1's batch at step 2: no parameter hook runs there, so no
// exchange opens on rank 1. Before, its next backward met rank 0's step-2 exchange: the two
// averaged gradients of different steps (or, since, failed "out of step") and the ranks
// stayed a batch apart, rank 0 hanging at the job's last exchange. Now rank 1's next
// zero_grad() takes part in rank 0's step-2 exchange as a failed contribution: that step
// fails on both, naming rank 1, both run the same loop to its end, and (fp32) they end as a
// job that dropped batch 2 on every rank.
TEST(ExchangeFaultsTest, ABackwardThatThrowsBeforeAnyGradientFailsThatStepOnEveryRankAlone) {
  const Problem problem;
  constexpr int kSteps = 6, kBad = 2;
  for (const std::string codec : {"none", "int8"}) {
    SCOPED_TRACE(codec);
    const auto runs = run_rejecting(problem, codec, kBad, {kSteps, kSteps});
    ASSERT_EQ(runs[1].errors.size(), 1u);
    EXPECT_NE(runs[1].errors.at(kBad).find("a rejected batch"), std::string::npos);
    ASSERT_EQ(runs[0].errors.size(), 1u);
    const std::string& e0 = runs[0].errors.at(kBad);
    EXPECT_NE(e0.find("the gradient exchange failed on rank 1: it skipped a step"),
              std::string::npos)
        << e0;
    EXPECT_LT(runs[0].error_seconds.at(kBad), kPromptSeconds);
    expect_equal_params(runs);
    if (codec == "none") {
      const auto dropped = run_rejecting(problem, codec, kBad, {kSteps, kSteps}, true);
      for (size_t i = 0; i < runs[0].params.size(); ++i) {
        EXPECT_TRUE(torch::equal(runs[0].params[i], dropped[0].params[i])) << "tensor " << i;
      }
    }
  }
}

// A batch rejected before the first exchange: the ledger does not know the loop's
// zero_grad() calls per step yet, so rank 1's next exchange meets rank 0's step 0. That
// exchange fails on both at once, naming both sequence numbers (instead of averaging
// gradients of different steps); rank 1 runs one iteration more (in a real job the epoch's
// end tells), and both go on in step.
TEST(ExchangeFaultsTest, ASkipBeforeTheFirstExchangeFailsOutOfStepOnEveryRank) {
  const Problem problem;
  constexpr int kSteps = 5;
  const auto runs = run_rejecting(problem, "none", 0, {kSteps, kSteps + 1});
  ASSERT_EQ(runs[1].errors.size(), 2u);
  EXPECT_NE(runs[1].errors.at(0).find("a rejected batch"), std::string::npos);
  ASSERT_EQ(runs[0].errors.size(), 1u);
  for (const std::string* e : {&runs[0].errors.at(0), &runs[1].errors.at(1)}) {
    EXPECT_NE(e->find("the ranks are out of step"), std::string::npos) << *e;
    EXPECT_NE(e->find("rank 0 1, rank 1 2"), std::string::npos) << *e;
  }
  EXPECT_LT(runs[0].error_seconds.at(0), kPromptSeconds);
  EXPECT_LT(runs[1].error_seconds.at(1), kPromptSeconds);
  expect_equal_params(runs);
}

// After a failed exchange .grad holds no aggregate: a backward or step() before zero_grad()
// is refused on every rank (before, any backward cleared the failure and exchanged a
// mixture of the failed step's gradients and the new one's).
TEST(ExchangeFaultsTest, AfterAFailedStepEveryRankRefusesUntilZeroGrad) {
  const Problem problem;
  std::vector<std::vector<std::string>> errors(kWorld);
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto context = context_for(rank, kWorld, c);
    auto net = problem.fresh_net();
    DistributedOptimizer opt(context, SGD(net->parameters(), SGDOptions(0.1)), *net,
                             {.compressor = "int8", .measured_buckets = false});
    const auto backward = [&](int s, bool bad) {
      auto loss = torch::nn::functional::cross_entropy(net->forward(slice_x(problem, s, rank)),
                                                       slice_y(problem, s, rank));
      if (bad) loss = loss * std::numeric_limits<float>::quiet_NaN();
      loss.backward();
    };
    opt.zero_grad();
    errors[rank].push_back(error_of([&] { backward(0, rank == 0); }));
    errors[rank].push_back(error_of([&] { backward(1, false); }));  // no zero_grad()
    errors[rank].push_back(error_of([&] { opt.step(); }));
    opt.zero_grad();
    errors[rank].push_back(error_of([&] {
      backward(2, false);
      opt.step();
    }));
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_NE(errors[r][0].find("failed on rank 0"), std::string::npos) << errors[r][0];
    EXPECT_NE(errors[r][1].find("this backward was refused: call zero_grad() first"),
              std::string::npos)
        << errors[r][1];
    EXPECT_NE(errors[r][2].find("failed on rank 0"), std::string::npos) << errors[r][2];
    EXPECT_EQ(errors[r][3], "") << "rank " << r;
  }
}

// Every option that decides the sequence of collectives, flipped on rank 1 alone, fails
// construction on both ranks naming it, before any collective of the exchange (before,
// `overlap` was not compared: from step 6 the ranks issued different sequences and Gloo
// aborted the process).
TEST(ExchangeFaultsTest, AnOptionThatDecidesTheCollectivesDiffersOnOneRankFailsBoth) {
  struct Flip {
    std::string named;  // what the error names
    std::function<void(DistributedOptions&)> flip;
  };
  const std::vector<Flip> flips = {
      {"overlap off", [](auto& o) { o.overlap = false; }},
      {"bucket bytes 4096", [](auto& o) { o.bucket_bytes = 4096; }},
      {"first bucket bytes 128", [](auto& o) { o.first_bucket_bytes = 128; }},
      {"measured buckets off", [](auto& o) { o.measured_buckets = false; }},
      {"broadcast buffers off", [](auto& o) { o.broadcast_buffers = false; }},
      {"link 100000000 bit/s", [](auto& o) { o.link_bits_per_s = 1e8; }},
      {"link 1000000000 bit/s, 0.001 s", [](auto& o) { o.link_latency_s = 1e-3; }},
      {"momentum correction off", [](auto& o) { o.momentum_correction = false; }},
      {"sparse aggregation split", [](auto& o) { o.sparse_aggregation = "split"; }},
      {"density=0.5", [](auto& o) { o.compressor = "topk:density=0.5"; }},
      {"strategy diloco", [](auto& o) { o.strategy = "diloco"; }},
  };
  const Problem problem;
  for (const Flip& flip : flips) {
    SCOPED_TRACE(flip.named);
    std::vector<std::string> errors(kWorld);
    std::vector<double> took(kWorld);
    testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
      auto context = context_for(rank, kWorld, c);
      auto net = problem.fresh_net();
      DistributedOptions options{.compressor = "topk:density=0.1"};
      if (rank == 1) flip.flip(options);
      const auto begin = Clock::now();
      errors[rank] = error_of([&] {
        DistributedOptimizer opt(context, SGD(net->parameters(), SGDOptions(0.1).momentum(0.9)),
                                 *net, options);
      });
      took[rank] = seconds_since(begin);
    });
    for (int r = 0; r < kWorld; ++r) {
      EXPECT_NE(errors[r].find("rank 1 has"), std::string::npos) << errors[r];
      EXPECT_NE(errors[r].find(flip.named), std::string::npos) << errors[r];
      EXPECT_LT(took[r], kPromptSeconds);
    }
  }
}

DistributedOptions diloco_options(const std::string& codec, uint64_t delay) {
  DistributedOptions o;
  o.strategy = "diloco";
  o.compressor = codec;
  o.diloco.inner_steps = 3;
  o.diloco.fragments = 1;  // one exchange a round, at step 3
  o.diloco.delay = delay;
  return o;
}

// The loop of a DiLoCo job whose rank 1 diverges (its parameters set to NaN after step 1):
// at the round's exchange (step 3) the int8, int4 and sparseloco codecs refuse its outer gradient,
// and fp32 carries the NaN into the mean. Every rank must fail that step, promptly, naming rank 1
// where the codec refused; nothing is merged, and every later step fails the same way
// (before, int4 and int8 threw on rank 1 before their first collective and rank 0 waited out
// the timeout).
TEST(ExchangeFaultsTest, ADiLoCoRankWhoseModelDivergedFailsTheRoundOnEveryRank) {
  const Problem problem;
  for (const std::string codec : {"int4", "int8", "sparseloco", "none"}) {
    SCOPED_TRACE(codec);
    std::vector<std::map<int, std::string>> errors(kWorld);
    std::vector<double> took(kWorld);
    testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
      auto context = context_for(rank, kWorld, c);
      auto net = problem.fresh_net();
      DistributedOptimizer opt(context, SGD(net->parameters(), SGDOptions(0.1)), *net,
                               diloco_options(codec, 0));
      for (int s = 0; s < 4; ++s) {
        opt.zero_grad();
        torch::nn::functional::cross_entropy(net->forward(slice_x(problem, s, rank)),
                                             slice_y(problem, s, rank))
            .backward();
        const auto begin = Clock::now();
        const std::string e = error_of([&] { opt.step(); });
        if (!e.empty()) errors[rank][s] = e;
        if (s == 2) took[rank] = seconds_since(begin);
        if (s == 0 && rank == 1) {
          torch::NoGradGuard no_grad;
          net->fc->weight.fill_(std::numeric_limits<float>::quiet_NaN());
        }
      }
    });
    for (int r = 0; r < kWorld; ++r) {
      ASSERT_EQ(errors[r].size(), 2u) << "rank " << r;  // the round's step, and the next
      const std::string& e = errors[r].at(2);
      if (codec == "none") {
        EXPECT_NE(e.find("has non-finite values: some rank's local model diverged"),
                  std::string::npos)
            << e;
      } else {
        EXPECT_NE(e.find("the codec refused the outer gradient of rank 1"), std::string::npos) << e;
      }
      EXPECT_EQ(errors[r].at(3), e);  // not merged: the strategy stays failed
      EXPECT_LT(took[r], kPromptSeconds) << "rank " << r;
    }
  }
}

// Fails the first allreduce after `arm()` on every rank, as a broken link fails both ends.
class FailingAllreduce : public ForwardingCollectives {
 public:
  using ForwardingCollectives::ForwardingCollectives;
  void arm() { armed_ = true; }
  std::unique_ptr<comm::Work> allreduce_sum_async(void* data, size_t count,
                                                  comm::DataType type) override {
    if (armed_.exchange(false)) throw Error("injected failure of an outer allreduce");
    return ForwardingCollectives::allreduce_sum_async(data, count, type);
  }

 private:
  std::atomic<bool> armed_{false};
};

// A DiLoCo exchange that fails on the exchange thread (delay 1: landed one step after it was
// sent) is not merged. Before, the failure was thrown once, and the next step merged the
// rank's own, unaveraged outer gradient: the ranks' models parted for good, silently.
TEST(ExchangeFaultsTest, AFailedDiLoCoExchangeIsNeverMerged) {
  const Problem problem;
  std::vector<std::vector<std::string>> errors(kWorld);
  std::vector<std::vector<torch::Tensor>> params(kWorld);
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto failing = std::make_unique<FailingAllreduce>(std::move(c));
    FailingAllreduce* fail = failing.get();
    std::unique_ptr<comm::Collectives> wrapped = std::move(failing);
    auto context = context_for(rank, kWorld, wrapped);
    auto net = problem.fresh_net();
    DistributedOptimizer opt(context, SGD(net->parameters(), SGDOptions(0.1)), *net,
                             diloco_options("none", 1));
    fail->arm();
    for (int s = 0; s < 6; ++s) {
      opt.zero_grad();
      torch::nn::functional::cross_entropy(net->forward(slice_x(problem, s, rank)),
                                           slice_y(problem, s, rank))
          .backward();
      errors[rank].push_back(error_of([&] { opt.step(); }));
    }
    errors[rank].push_back(error_of([&] { opt.finish(); }));
  });
  for (int r = 0; r < kWorld; ++r) {
    // Steps 1-3 run (the exchange is sent at step 3, index 2); it lands at step 4 (index 3).
    for (int s = 0; s < 3; ++s) EXPECT_EQ(errors[r][s], "") << "rank " << r << " step " << s;
    for (size_t s = 3; s < errors[r].size(); ++s) {
      EXPECT_NE(errors[r][s].find("injected failure of an outer allreduce"), std::string::npos)
          << "rank " << r << " call " << s << ": " << errors[r][s];
      EXPECT_NE(errors[r][s].find("it was not merged"), std::string::npos) << errors[r][s];
    }
  }
}

// Under momentum correction (topk with SGD's momentum moved into the codec) a second
// exchange before step() would feed the first's averaged velocity back into the velocity:
// momentum counted twice, silently. It is refused on every rank before any collective,
// naming no_sync(); the same accumulation inside no_sync() trains.
TEST(ExchangeFaultsTest, ASecondExchangeInAStepUnderMomentumCorrectionIsRefusedNamingNoSync) {
  const Problem problem;
  std::vector<std::string> twice(kWorld), with_no_sync(kWorld);
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
    auto context = context_for(rank, kWorld, c);
    auto net = problem.fresh_net();
    DistributedOptimizer opt(context, SGD(net->parameters(), SGDOptions(0.1).momentum(0.9)), *net,
                             {.compressor = "topk:density=0.5", .overlap = false});
    ASSERT_NE(opt.codec_spec().find("momentum=0.9"), std::string::npos);
    const auto backward = [&](int s) {
      torch::nn::functional::cross_entropy(net->forward(slice_x(problem, s, rank)),
                                           slice_y(problem, s, rank))
          .backward();
    };
    opt.zero_grad();
    backward(0);
    twice[rank] = error_of([&] { backward(1); });
    opt.zero_grad();
    with_no_sync[rank] = error_of([&] {
      {
        auto guard = opt.no_sync();
        backward(2);
      }
      backward(3);
      opt.step();
    });
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_NE(twice[r].find("a second gradient exchange before step() under momentum correction"),
              std::string::npos)
        << twice[r];
    EXPECT_NE(twice[r].find("no_sync()"), std::string::npos) << twice[r];
    EXPECT_EQ(with_no_sync[r], "") << "rank " << r;
  }
}

// A step in which no rank has a gradient for a parameter throws its exchange away (.grad
// stays undefined, the optimizer skips it): its codec's state must not move. Here every
// parameter is unused at the extra step (step() with no backward), so the job with that
// step must end bit for bit where the job without it does. Before, top-k with error
// feedback "sent" part of each residual into nothing and momentum correction's velocity
// decayed.
TEST(ExchangeFaultsTest, AnExchangeThrownAwayLeavesTheCodecStatesAsTheyWere) {
  const Problem problem;
  for (const std::string codec : {"topk:density=0.2", "2bit", "int8", "powersgd:rank=1,start=0"}) {
    SCOPED_TRACE(codec);
    std::vector<std::vector<torch::Tensor>> with_empty(kWorld), without(kWorld);
    for (const bool empty_step : {true, false}) {
      testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
        auto context = context_for(rank, kWorld, c);
        auto net = problem.fresh_net();
        DistributedOptimizer opt(context, SGD(net->parameters(), SGDOptions(0.1).momentum(0.9)),
                                 *net, {.compressor = codec, .measured_buckets = false});
        for (int s = 0; s < 4; ++s) {
          opt.zero_grad();
          if (empty_step && s == 2) {
            opt.step();  // no gradient anywhere: nothing to apply
            opt.zero_grad();
          }
          torch::nn::functional::cross_entropy(net->forward(slice_x(problem, s, rank)),
                                               slice_y(problem, s, rank))
              .backward();
          opt.step();
        }
        auto& out = empty_step ? with_empty[rank] : without[rank];
        for (auto& p : net->parameters()) out.push_back(p.detach().clone());
      });
    }
    for (int r = 0; r < kWorld; ++r) {
      for (size_t i = 0; i < without[r].size(); ++i) {
        EXPECT_TRUE(torch::equal(with_empty[r][i], without[r][i]))
            << "rank " << r << " tensor " << i;
      }
    }
  }
}

// A no_sync() guard that outlives its optimizer (a guard kept in a longer scope) is
// harmless: it held a raw pointer into the optimizer before (a use-after-free under ASan).
TEST(ExchangeFaultsTest, ANoSyncGuardMayOutliveItsOptimizer) {
  const Problem problem;
  auto net = problem.fresh_net();
  std::optional<DistributedOptimizer::NoSync> guard;
  {
    DistributedOptimizer opt(solo_context(), SGD(net->parameters(), 0.1), *net,
                             {.compressor = "none"});
    guard.emplace(opt.no_sync());
  }
  guard.reset();  // the optimizer is gone
  DistributedOptimizer again(solo_context(), SGD(net->parameters(), 0.1), *net,
                             {.compressor = "none"});
  torch::nn::functional::cross_entropy(net->forward(problem.x), problem.y).backward();
  EXPECT_EQ(error_of([&] { again.step(); }), "");
}

// DiLoCo writes the model in finish(): it must never write where a parameter was at
// construction once the parameter has other storage (torch::load() replaces it with set_()
// under NoGradGuard). Every step checks the parameters first; finish() did not, and wrote the
// averaged model into the old storage, silently. Now finish() names the parameter, on every
// rank, before any collective, for new storage of the same size and of another size.
TEST(ExchangeFaultsTest, DiLoCoFinishNamesAParameterGivenNewStorage) {
  const Problem problem;
  for (const int64_t size : {5, 7}) {
    SCOPED_TRACE(size);
    std::vector<std::string> errors(kWorld);
    testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& c) {
      auto context = context_for(rank, kWorld, c);
      auto net = problem.fresh_net();
      DistributedOptimizer opt(context, SGD(net->parameters(), SGDOptions(0.1)), *net,
                               diloco_options("none", 0));
      for (int s = 0; s < 2; ++s) {  // within the first round: the models differ
        opt.zero_grad();
        torch::nn::functional::cross_entropy(net->forward(slice_x(problem, s, rank)),
                                             slice_y(problem, s, rank))
            .backward();
        opt.step();
      }
      {
        torch::NoGradGuard no_grad;
        net->fc->bias.set_(torch::zeros({size}));  // as torch::load() loads a parameter
      }
      errors[rank] = error_of([&] { opt.finish(); });
    });
    for (int r = 0; r < kWorld; ++r) {
      const std::string want = size == 5 ? "parameter 'fc.bias' has a new gradient accumulator"
                                         : "parameter 'fc.bias' now has 7 elements, 5 when";
      EXPECT_NE(errors[r].find(want), std::string::npos) << errors[r];
    }
  }
}

}  // namespace
}  // namespace gradwire
