// DDP parity: the idioms of PyTorch DDP programs give, with DistributedOptimizer (codec
// none), the training of one process on the union of the ranks' batches: parameters equal
// within float tolerance after several steps, on every rank. Each case failed on the code
// before the exchange ended at the end of backward (e99f2e0).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <mutex>

#include "gradwire/core/error.h"
#include "gradwire/distributed_optimizer.h"
#include "torch_test_util.h"

namespace gradwire {
namespace {

constexpr int64_t kIn = 6, kHidden = 16, kClasses = 3;

// Two hidden layers and three heads: `a` always used, `b` on the ranks the loss asks for,
// `c` never (its parameters never get a gradient).
struct HeadsNet : torch::nn::Module {
  HeadsNet() {
    fc1 = register_module("fc1", torch::nn::Linear(kIn, kHidden));
    fc2 = register_module("fc2", torch::nn::Linear(kHidden, kHidden));
    a = register_module("a", torch::nn::Linear(kHidden, kClasses));
    b = register_module("b", torch::nn::Linear(kHidden, kClasses));
    c = register_module("c", torch::nn::Linear(kHidden, kClasses));
  }
  torch::Tensor forward(const torch::Tensor& x, bool use_b) {
    auto h = torch::tanh(fc2(torch::tanh(fc1(x))));
    auto out = a(h);
    return use_b ? out + b(h) : out;
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, a{nullptr}, b{nullptr}, c{nullptr};
};

// Samples of step s, micro-batch k, rank r: rows [((s * K + k) * W + r) * B, ... + B).
struct Data {
  torch::Tensor x, y;
  int world, batch, micro;
  Data(int steps, int world_, int batch_, int micro_ = 1)
      : world(world_), batch(batch_), micro(micro_) {
    torch::manual_seed(7);
    x = torch::randn({steps * micro * world * batch, kIn});
    y = torch::randint(0, kClasses, {steps * micro * world * batch});
  }
  std::pair<torch::Tensor, torch::Tensor> slice(int s, int k, int r) const {
    const int64_t begin = ((s * micro + k) * world + r) * batch;
    return {x.slice(0, begin, begin + batch), y.slice(0, begin, begin + batch)};
  }
};

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  for (const auto& t : tensors) out.push_back(t.detach().clone());
  return out;
}

void copy_into(const std::vector<torch::Tensor>& to, const std::vector<torch::Tensor>& from) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < to.size(); ++i) to[i].copy_(from[i]);
}

std::vector<torch::Tensor> snapshot(torch::nn::Module& net) { return clones(net.parameters()); }
void copy_parameters(torch::nn::Module& to, const std::vector<torch::Tensor>& from) {
  copy_into(to.parameters(), from);
}

void set_grads_to_none(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) p.mutable_grad() = torch::Tensor();
  }
}

void expect_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want,
                  const std::string& what, double atol = 1e-5) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(torch::allclose(got[i], want[i], /*rtol=*/0, atol))
        << what << ", tensor " << i << ": max diff "
        << (got[i] - want[i]).abs().max().item<float>();
  }
}

using Loss =
    std::function<torch::Tensor(HeadsNet&, const torch::Tensor&, const torch::Tensor&, int rank)>;
using MakeOptimizer = std::function<std::shared_ptr<torch::optim::Optimizer>(HeadsNet&)>;

torch::Tensor plain_loss(HeadsNet& net, const torch::Tensor& x, const torch::Tensor& y, int) {
  return torch::nn::functional::cross_entropy(net.forward(x, false), y);
}

struct Case {
  int world = 2, steps = 4, batch = 4, micro = 1;
  MakeOptimizer optimizer;
  Loss loss = plain_loss;
  std::function<void(HeadsNet&)> after_backward = [](HeadsNet&) {};
  bool no_sync = false;  // micro-batches before the last under no_sync()
  // Between backward and step, every rank issues a collective of its own.
  bool collective_before_step = false;
};

// One process on the union batch: every rank's micro-batch loss, divided by W x K.
std::vector<torch::Tensor> reference_run(const Case& c, const Data& data,
                                         const std::vector<torch::Tensor>& init) {
  HeadsNet net;
  copy_parameters(net, init);
  auto optimizer = c.optimizer(net);
  for (int s = 0; s < c.steps; ++s) {
    set_grads_to_none(*optimizer);
    for (int k = 0; k < c.micro; ++k) {
      for (int r = 0; r < c.world; ++r) {
        auto [x, y] = data.slice(s, k, r);
        (c.loss(net, x, y, r) / static_cast<double>(c.world * c.micro)).backward();
      }
    }
    c.after_backward(net);
    optimizer->step();
  }
  return snapshot(net);
}

// The same program as a DDP user writes it, on `world` Gloo ranks; per rank its parameters.
std::vector<std::vector<torch::Tensor>> distributed_run(const Case& c, const Data& data,
                                                        const std::vector<torch::Tensor>& init) {
  std::vector<std::shared_ptr<HeadsNet>> nets;
  for (int r = 0; r < c.world; ++r) {
    nets.push_back(std::make_shared<HeadsNet>());
    copy_parameters(*nets.back(), init);
    if (r > 0) {  // other ranks start elsewhere: construction takes rank 0's
      torch::NoGradGuard no_grad;
      for (auto& p : nets.back()->parameters()) p.add_(0.25);
    }
  }
  std::vector<std::vector<torch::Tensor>> results(c.world);
  testing::run_gloo_ranks(c.world, [&](int rank, std::unique_ptr<comm::Collectives>& collectives) {
    auto context = context_for(rank, c.world, collectives);
    HeadsNet& net = *nets[rank];
    DistributedOptimizer opt(context, c.optimizer(net), net, {.compressor = "none"});
    for (int s = 0; s < c.steps; ++s) {
      opt.zero_grad();
      for (int k = 0; k < c.micro; ++k) {
        auto [x, y] = data.slice(s, k, rank);
        auto loss = c.loss(net, x, y, rank) / static_cast<double>(c.micro);
        if (c.no_sync && k + 1 < c.micro) {
          auto guard = opt.no_sync();
          loss.backward();
        } else {
          loss.backward();
        }
      }
      c.after_backward(net);
      if (c.collective_before_step) context->allgather(static_cast<double>(rank));
      opt.step();
    }
    results[rank] = snapshot(net);
  });
  return results;
}

void expect_parity(const Case& c, double atol = 1e-5) {
  const Data data(c.steps, c.world, c.batch, c.micro);
  torch::manual_seed(3);
  HeadsNet init_net;
  const auto init = snapshot(init_net);
  const auto want = reference_run(c, data, init);
  const auto got = distributed_run(c, data, init);
  for (int r = 0; r < c.world; ++r) expect_close(got[r], want, "rank " + std::to_string(r), atol);
}

MakeOptimizer sgd(double lr, double momentum, double weight_decay) {
  return [=](HeadsNet& net) {
    return std::make_shared<torch::optim::SGD>(
        net.parameters(),
        torch::optim::SGDOptions(lr).momentum(momentum).weight_decay(weight_decay));
  };
}

TEST(DdpParityTest, SgdWithMomentumAndWeightDecayOnTwoAndFourRanks) {
  for (const int world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    Case c;
    c.world = world;
    c.optimizer = sgd(0.1, 0.9, 0.01);
    expect_parity(c);
  }
}

TEST(DdpParityTest, AdamAndAdamW) {
  Case adam;
  adam.optimizer = [](HeadsNet& net) {
    return std::make_shared<torch::optim::Adam>(net.parameters(),
                                                torch::optim::AdamOptions(0.01).weight_decay(0.01));
  };
  expect_parity(adam, 1e-4);
  Case adamw;
  adamw.optimizer = [](HeadsNet& net) {
    return std::make_shared<torch::optim::AdamW>(
        net.parameters(), torch::optim::AdamWOptions(0.01).weight_decay(0.05));
  };
  expect_parity(adamw, 1e-4);
}

TEST(DdpParityTest, ClippingAfterBackwardClipsTheAverage) {
  Case c;
  c.optimizer = sgd(0.5, 0.9, 0);
  // A bound the gradients exceed, so the clip changes every step.
  c.after_backward = [](HeadsNet& net) {
    torch::nn::utils::clip_grad_norm_(net.parameters(), 0.05);
  };
  expect_parity(c);
}

TEST(DdpParityTest, GradientAccumulationWithAndWithoutNoSync) {
  for (const bool no_sync : {false, true}) {
    SCOPED_TRACE(no_sync ? "no_sync" : "an exchange per backward");
    Case c;
    c.micro = 3;
    c.no_sync = no_sync;
    c.optimizer = sgd(0.1, 0.9, 0.01);
    expect_parity(c);
  }
}

TEST(DdpParityTest, ParametersUnusedOnOneRankGetTheAverageAndOnEveryRankNoGradient) {
  Case c;
  c.world = 2;
  // Head b only on rank 0; head c never. Weight decay and momentum would move a
  // parameter whose gradient were zero instead of undefined.
  c.loss = [](HeadsNet& net, const torch::Tensor& x, const torch::Tensor& y, int rank) {
    return torch::nn::functional::cross_entropy(net.forward(x, rank == 0), y);
  };
  c.optimizer = sgd(0.1, 0.9, 0.05);
  expect_parity(c);
  c.optimizer = [](HeadsNet& net) {
    return std::make_shared<torch::optim::Adam>(net.parameters(),
                                                torch::optim::AdamOptions(0.01).weight_decay(0.01));
  };
  expect_parity(c, 1e-4);
}

TEST(DdpParityTest, AFrozenLayerInTheOptimizerIsTakenFromRankZeroAndNeverMoves) {
  Case c;
  c.optimizer = [](HeadsNet& net) {
    net.fc1->weight.requires_grad_(false);  // before the optimizer, as PyTorch code does
    net.fc1->bias.requires_grad_(false);
    return std::make_shared<torch::optim::SGD>(
        net.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
  };
  expect_parity(c);
}

TEST(DdpParityTest, ACollectiveBetweenBackwardAndStepComesAfterTheExchange) {
  Case c;
  c.steps = 6;
  c.optimizer = sgd(0.1, 0.9, 0);
  c.collective_before_step = true;
  expect_parity(c);
}

// An embedding used as input and, transposed, as output layer: one tensor registered
// under two names, as a language model ties them.
// With `shared_memory`, "output" is instead a second leaf over the embedding's memory
// (embedding.detach(), requiring grad): two parameters, each with its own .grad, whose
// updates both land in one storage. Both must be exchanged (deduplicating by storage would
// leave output's gradient local and part the ranks), as DDP, which tells parameters apart
// by identity, does.
struct TiedNet : torch::nn::Module {
  explicit TiedNet(bool shared_memory = false) {
    embedding = register_parameter("embedding", torch::randn({kHidden, kHidden}) * 0.3);
    output = shared_memory ? register_parameter("output", embedding.detach())
                           : register_parameter("output", embedding);
    mix = register_module("mix", torch::nn::Linear(kHidden, kHidden));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::tanh(mix(torch::tanh(x.matmul(embedding)))).matmul(output.t());
  }
  torch::Tensor embedding, output;
  torch::nn::Linear mix{nullptr};
};

// The distinct tensors of a module, as Python's parameters() lists them.
std::vector<torch::Tensor> distinct_parameters(torch::nn::Module& net) {
  std::vector<torch::Tensor> out;
  for (auto& p : net.parameters()) {
    bool seen = false;
    for (auto& q : out) seen = seen || q.is_same(p);
    if (!seen) out.push_back(p);
  }
  return out;
}

void expect_tied_parity(bool shared_memory) {
  constexpr int kWorld = 2, kSteps = 4, kBatch = 4;
  torch::manual_seed(11);
  const auto x = torch::randn({kSteps * kWorld * kBatch, kHidden});
  const auto y = torch::randint(0, kHidden, {kSteps * kWorld * kBatch});
  TiedNet init_net(shared_memory);
  const auto init = snapshot(init_net);
  auto make_sgd = [](TiedNet& net) {
    return std::make_shared<torch::optim::SGD>(
        distinct_parameters(net), torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
  };
  auto loss_of = [&](TiedNet& net, int s, int r) {
    const int64_t begin = (s * kWorld + r) * kBatch;
    return torch::nn::functional::cross_entropy(net.forward(x.slice(0, begin, begin + kBatch)),
                                                y.slice(0, begin, begin + kBatch));
  };
  TiedNet reference(shared_memory);
  copy_parameters(reference, init);
  auto reference_opt = make_sgd(reference);
  for (int s = 0; s < kSteps; ++s) {
    set_grads_to_none(*reference_opt);
    for (int r = 0; r < kWorld; ++r) (loss_of(reference, s, r) / kWorld).backward();
    reference_opt->step();
  }
  const auto want = snapshot(reference);

  std::vector<std::shared_ptr<TiedNet>> nets;
  for (int r = 0; r < kWorld; ++r) {
    nets.push_back(std::make_shared<TiedNet>(shared_memory));
    copy_parameters(*nets.back(), init);
  }
  std::vector<std::vector<torch::Tensor>> got(kWorld);
  std::vector<uint64_t> dense_bytes(kWorld);
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& collectives) {
    auto context = context_for(rank, kWorld, collectives);
    TiedNet& net = *nets[rank];
    DistributedOptimizer opt(context, make_sgd(net), net, {.compressor = "none"});
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      loss_of(net, s, rank).backward();
      opt.step();
    }
    got[rank] = snapshot(net);
    dense_bytes[rank] = opt.traffic().bytes_dense;
  });
  const uint64_t distinct_floats = (shared_memory ? 3 : 2) * kHidden * kHidden + kHidden;
  for (int r = 0; r < kWorld; ++r) {
    expect_close(got[r], want, "rank " + std::to_string(r));
    EXPECT_EQ(dense_bytes[r], kSteps * distinct_floats * sizeof(float)) << "rank " << r;
  }
}

TEST(DdpParityTest, ATiedWeightIsExchangedOnceAndTrainsAsInOneProcess) {
  expect_tied_parity(/*shared_memory=*/false);
}

TEST(DdpParityTest, TwoParametersOverOneMemoryAreBothExchangedAndTrainAsInOneProcess) {
  expect_tied_parity(/*shared_memory=*/true);
}

struct BatchNormHeads : torch::nn::Module {
  BatchNormHeads() {
    fc1 = register_module("fc1", torch::nn::Linear(kIn, kHidden));
    bn = register_module("bn", torch::nn::BatchNorm1d(kHidden));
    out = register_module("out", torch::nn::Linear(kHidden, kClasses));
  }
  torch::Tensor forward(const torch::Tensor& x) { return out(torch::relu(bn(fc1(x)))); }
  torch::nn::Linear fc1{nullptr}, out{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

std::vector<torch::Tensor> buffer_snapshot(torch::nn::Module& net) { return clones(net.buffers()); }
void copy_buffers(torch::nn::Module& to, const std::vector<torch::Tensor>& from) {
  copy_into(to.buffers(), from);
}

TEST(DdpParityTest, BatchNormNormalizesPerRankAndKeepsRankZerosStatistics) {
  // DDP's semantics: each rank normalizes over its own batch, gradients are averaged, and
  // rank 0's running statistics reach every rank. The reference does the same in one
  // process: per rank's slice a forward from the common statistics.
  constexpr int kWorld = 2, kSteps = 4, kBatch = 8;
  const Data data(kSteps, kWorld, kBatch);
  torch::manual_seed(5);
  BatchNormHeads init_net;
  const auto init = snapshot(init_net);
  auto make_sgd = [](BatchNormHeads& net) {
    return std::make_shared<torch::optim::SGD>(net.parameters(),
                                               torch::optim::SGDOptions(0.1).momentum(0.9));
  };
  BatchNormHeads reference;
  copy_parameters(reference, init);
  auto reference_opt = make_sgd(reference);
  for (int s = 0; s < kSteps; ++s) {
    set_grads_to_none(*reference_opt);
    const auto common = buffer_snapshot(reference);
    std::vector<torch::Tensor> rank0_after;
    for (int r = 0; r < kWorld; ++r) {
      copy_buffers(reference, common);
      auto [x, y] = data.slice(s, 0, r);
      (torch::nn::functional::cross_entropy(reference.forward(x), y) / kWorld).backward();
      if (r == 0) rank0_after = buffer_snapshot(reference);
    }
    copy_buffers(reference, rank0_after);
    reference_opt->step();
  }
  const auto want = snapshot(reference);
  const auto want_buffers = buffer_snapshot(reference);

  std::vector<std::shared_ptr<BatchNormHeads>> nets;
  for (int r = 0; r < kWorld; ++r) {
    nets.push_back(std::make_shared<BatchNormHeads>());
    copy_parameters(*nets.back(), init);
  }
  std::vector<std::vector<torch::Tensor>> got(kWorld), got_buffers(kWorld);
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& collectives) {
    auto context = context_for(rank, kWorld, collectives);
    BatchNormHeads& net = *nets[rank];
    DistributedOptimizer opt(context, make_sgd(net), net, {.compressor = "none"});
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      auto [x, y] = data.slice(s, 0, rank);
      torch::nn::functional::cross_entropy(net.forward(x), y).backward();
      opt.step();
    }
    got[rank] = snapshot(net);
    got_buffers[rank] = buffer_snapshot(net);
  });
  for (int r = 0; r < kWorld; ++r) {
    expect_close(got[r], want, "rank " + std::to_string(r));
    expect_close(got_buffers[r], want_buffers, "buffers of rank " + std::to_string(r));
  }
}

TEST(DdpParityTest, AnLrSchedulerOnTheUsersOptimizerActsOnTheOptimizerThatSteps) {
  constexpr int kWorld = 2, kSteps = 4, kBatch = 4;
  const Data data(kSteps, kWorld, kBatch);
  torch::manual_seed(3);
  HeadsNet init_net;
  const auto init = snapshot(init_net);
  const auto options = torch::optim::SGDOptions(0.4).momentum(0.9);

  HeadsNet reference;
  copy_parameters(reference, init);
  torch::optim::SGD reference_sgd(reference.parameters(), options);
  torch::optim::StepLR reference_schedule(reference_sgd, /*step_size=*/1, /*gamma=*/0.5);
  for (int s = 0; s < kSteps; ++s) {
    set_grads_to_none(reference_sgd);
    for (int r = 0; r < kWorld; ++r) {
      auto [x, y] = data.slice(s, 0, r);
      (plain_loss(reference, x, y, r) / kWorld).backward();
    }
    reference_sgd.step();
    reference_schedule.step();
  }
  const auto want = snapshot(reference);
  const double want_lr = reference_sgd.param_groups()[0].options().get_lr();
  ASSERT_LT(want_lr, 0.4 / 4);  // the schedule acted

  std::vector<std::shared_ptr<HeadsNet>> nets;
  for (int r = 0; r < kWorld; ++r) {
    nets.push_back(std::make_shared<HeadsNet>());
    copy_parameters(*nets.back(), init);
  }
  std::vector<std::vector<torch::Tensor>> got(kWorld);
  std::vector<double> final_lr(kWorld);
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& collectives) {
    auto context = context_for(rank, kWorld, collectives);
    HeadsNet& net = *nets[rank];
    torch::optim::SGD sgd(net.parameters(), options);  // named: the program keeps it
    torch::optim::StepLR schedule(sgd, /*step_size=*/1, /*gamma=*/0.5);
    DistributedOptimizer opt(context, sgd, net, {.compressor = "none"});
    for (int s = 0; s < kSteps; ++s) {
      opt.zero_grad();
      auto [x, y] = data.slice(s, 0, rank);
      plain_loss(net, x, y, rank).backward();
      opt.step();
      schedule.step();
    }
    got[rank] = snapshot(net);
    final_lr[rank] = opt.optimizer().param_groups()[0].options().get_lr();
  });
  for (int r = 0; r < kWorld; ++r) {
    expect_close(got[r], want, "rank " + std::to_string(r));
    EXPECT_DOUBLE_EQ(final_lr[r], want_lr) << "rank " << r;
  }
}

// A second model fed by the first, each with its DistributedOptimizer on the same
// Context (a GAN's generator and discriminator): one backward completes buckets of both,
// whose exchange threads share one communicator.
struct Critic : torch::nn::Module {
  Critic() {
    l1 = register_module("l1", torch::nn::Linear(kClasses, kHidden));
    l2 = register_module("l2", torch::nn::Linear(kHidden, kClasses));
  }
  torch::Tensor forward(const torch::Tensor& x) { return l2(torch::tanh(l1(x))); }
  torch::nn::Linear l1{nullptr}, l2{nullptr};
};

TEST(DdpParityTest, TwoOptimizersOnOneContextInOneBackward) {
  constexpr int kWorld = 2, kSteps = 4, kBatch = 4;
  const Data data(kSteps, kWorld, kBatch);
  torch::manual_seed(9);
  HeadsNet init_a;
  Critic init_b;
  const auto a0 = snapshot(init_a), b0 = snapshot(init_b);
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9);
  auto loss_of = [](HeadsNet& a, Critic& b, const torch::Tensor& x, const torch::Tensor& y) {
    return torch::nn::functional::cross_entropy(b.forward(a.forward(x, true)), y);
  };
  HeadsNet ref_a;
  Critic ref_b;
  copy_parameters(ref_a, a0);
  copy_parameters(ref_b, b0);
  torch::optim::SGD sgd_a(ref_a.parameters(), options), sgd_b(ref_b.parameters(), options);
  for (int s = 0; s < kSteps; ++s) {
    set_grads_to_none(sgd_a);
    set_grads_to_none(sgd_b);
    for (int r = 0; r < kWorld; ++r) {
      auto [x, y] = data.slice(s, 0, r);
      (loss_of(ref_a, ref_b, x, y) / kWorld).backward();
    }
    sgd_a.step();
    sgd_b.step();
  }
  const auto want_a = snapshot(ref_a), want_b = snapshot(ref_b);

  std::vector<std::shared_ptr<HeadsNet>> as;
  std::vector<std::shared_ptr<Critic>> bs;
  for (int r = 0; r < kWorld; ++r) {
    as.push_back(std::make_shared<HeadsNet>());
    bs.push_back(std::make_shared<Critic>());
    copy_parameters(*as.back(), a0);
    copy_parameters(*bs.back(), b0);
  }
  std::vector<std::vector<torch::Tensor>> got_a(kWorld), got_b(kWorld);
  testing::run_gloo_ranks(kWorld, [&](int rank, std::unique_ptr<comm::Collectives>& collectives) {
    auto context = context_for(rank, kWorld, collectives);
    HeadsNet& a = *as[rank];
    Critic& b = *bs[rank];
    // Many small buckets in both, so their exchanges interleave during backward.
    const DistributedOptions small{
        .compressor = "none", .bucket_bytes = 128, .first_bucket_bytes = 64};
    DistributedOptimizer opt_a(context, torch::optim::SGD(a.parameters(), options), a, small);
    DistributedOptimizer opt_b(context, torch::optim::SGD(b.parameters(), options), b, small);
    for (int s = 0; s < kSteps; ++s) {
      opt_a.zero_grad();
      opt_b.zero_grad();
      auto [x, y] = data.slice(s, 0, rank);
      loss_of(a, b, x, y).backward();
      opt_a.step();
      opt_b.step();
    }
    got_a[rank] = snapshot(a);
    got_b[rank] = snapshot(b);
  });
  for (int r = 0; r < kWorld; ++r) {
    expect_close(got_a[r], want_a, "first model, rank " + std::to_string(r));
    expect_close(got_b[r], want_b, "second model, rank " + std::to_string(r));
  }
}

// The ranks agree on which parameters had a gradient with every codec family, whether the
// strategy carries that status on its last collective (additive and int8 buckets, the
// low-rank exchange in and after its dense start, auto's plans) or a sparse codec leaves it
// to a collective of its own.
TEST(DdpParityTest, EveryCodecAgreesWhichParametersHadAGradient) {
  for (const std::string codec : {"none", "fp16", "int8", "powersgd:rank=2",
                                  "powersgd:rank=2,start=10", "topk:density=0.5", "auto"}) {
    SCOPED_TRACE(codec);
    const Data data(1, 2, 4);
    std::vector<std::shared_ptr<HeadsNet>> nets{std::make_shared<HeadsNet>(),
                                                std::make_shared<HeadsNet>()};
    std::vector<std::vector<bool>> defined(2);
    std::vector<torch::Tensor> b_grad(2);
    testing::run_gloo_ranks(2, [&](int rank, std::unique_ptr<comm::Collectives>& collectives) {
      auto context = context_for(rank, 2, collectives);
      HeadsNet& net = *nets[rank];
      DistributedOptimizer opt(context, torch::optim::SGD(net.parameters(), 0.1), net,
                               {.compressor = codec});
      opt.zero_grad();
      auto [x, y] = data.slice(0, 0, rank);
      torch::nn::functional::cross_entropy(net.forward(x, rank == 0), y).backward();
      for (auto* p : {&net.b->weight, &net.c->weight}) defined[rank].push_back(p->grad().defined());
      b_grad[rank] =
          net.b->weight.grad().defined() ? net.b->weight.grad().clone() : torch::Tensor();
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(defined[r], (std::vector<bool>{true, false})) << "rank " << r;
    }
    ASSERT_TRUE(b_grad[0].defined() && b_grad[1].defined());
    EXPECT_TRUE(torch::equal(b_grad[0], b_grad[1]));
  }
}

}  // namespace
}  // namespace gradwire
