// DdpCommHook, the C++ core of gradwire.ddp.hook, driven as DDP drives it (buckets of a
// step, the last one flagged) on ranks that are threads, each hook over a Gloo group of its
// own, as the Python module makes them: averages against the exact mean, equal
// ranks, a refused gradient failing the step on every rank, a state that resumes exactly.
// The Python side (tests/python/test_ddp_hook.py) runs it under DDP itself; this one runs
// in the sanitizer stage too.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <cmath>
#include <thread>

#include "gradwire/comm/gloo_collectives.h"
#include "gradwire/core/error.h"
#include "gradwire/torch/ddp_comm_hook.h"

namespace gradwire {
namespace {

// Runs fn(rank, hook factory) on `world` threads; each hook made has a Gloo group of its own
// over one store.
void run_hook_ranks(
    int world,
    const std::function<
        void(int, const std::function<std::unique_ptr<DdpCommHook>(const std::string&)>&)>& fn) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        int made = 0;
        fn(r, [&](const std::string& codec) {
          comm::GlooOptions o;
          o.timeout = std::chrono::seconds(20);
          o.bind_hostname = "127.0.0.1";
          o.leave_together = false;
          auto prefix = c10::make_intrusive<c10d::PrefixStore>(
              "hook" + std::to_string(made++), c10::intrusive_ptr<c10d::Store>(store));
          CommHookOptions hook_options;
          hook_options.codec = codec;
          return std::make_unique<DdpCommHook>(comm::make_gloo_collectives(prefix, r, world, o),
                                               hook_options);
        });
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Rank r's gradient of step s: two "parameters" [6, 50] and [40], in two DDP buckets.
at::Tensor gradient(int rank, int step, int64_t n) {
  // A generator of its own: the ranks are threads.
  auto generator = at::make_generator<at::CPUGeneratorImpl>(1000 * step + 17 * rank + n);
  return at::randn({n}, generator) * (1.0 + rank);
}

// One step: bucket 0 holds parameter key 11 ([40]), bucket 1 key 22 ([6, 50]) (DDP hands
// the last layers first). Returns the two averaged buffers or rethrows the step's error.
std::pair<at::Tensor, at::Tensor> step(DdpCommHook& hook, int rank, int s, float poison = 0) {
  at::Tensor b0 = gradient(rank, s, 40), b1 = gradient(rank, s, 300);
  if (poison != 0) b1[7] = poison;
  auto f0 = hook.exchange(b0, {11}, {{40}}, {"fc.bias"}, false);
  auto f1 = hook.exchange(b1, {22}, {{6, 50}}, {"fc.weight"}, true);
  EXPECT_TRUE(f0->completed());
  EXPECT_TRUE(f1->completed());
  for (auto& f : {f0, f1}) {
    if (f->hasError()) std::rethrow_exception(f->exception_ptr());
  }
  EXPECT_EQ(f1->value().toTensor().data_ptr(), b1.data_ptr());  // in place
  return {b0, b1};
}

at::Tensor exact_mean(int world, int s, int64_t n) {
  at::Tensor sum = at::zeros({n});
  for (int r = 0; r < world; ++r) sum += gradient(r, s, n);
  return sum / world;
}

TEST(DdpCommHookTest, NoneIsTheExactMeanAndFp16AndInt8StayWithinTheirBounds) {
  constexpr int kWorld = 3;
  std::vector<std::vector<at::Tensor>> results(kWorld);
  run_hook_ranks(kWorld, [&](int rank, const auto& make) {
    for (const char* codec : {"none", "fp16", "int8"}) {
      auto hook = make(codec);
      for (int s = 0; s < 3; ++s) {
        auto [b0, b1] = step(*hook, rank, s);
        results[rank].push_back(at::cat({b0, b1}));
      }
    }
  });
  for (int r = 1; r < kWorld; ++r) {
    for (size_t i = 0; i < results[0].size(); ++i) {
      EXPECT_TRUE(at::equal(results[r][i], results[0][i])) << "rank " << r << " result " << i;
    }
  }
  for (int s = 0; s < 3; ++s) {
    const at::Tensor mean = at::cat({exact_mean(kWorld, s, 40), exact_mean(kWorld, s, 300)});
    const double scale = mean.abs().max().item<double>();
    EXPECT_LE((results[0][s] - mean).abs().max().item<double>(), 1e-6 * scale) << "none";
    EXPECT_LE((results[0][3 + s] - mean).abs().max().item<double>(), 2e-3 * scale) << "fp16";
    // int8, shared scale: each rank rounds to steps of max|a| / floor(127 / W); error
    // feedback's residual adds at most one more step (ALGORITHMS.md, int8).
    double largest = 0;
    for (int r = 0; r < kWorld; ++r) {
      largest = std::max(largest, gradient(r, s, 300).abs().max().item<double>());
    }
    EXPECT_LE((results[0][6 + s] - mean).abs().max().item<double>(), 2.0 * largest / (127 / kWorld))
        << "int8 step " << s;
  }
}

TEST(DdpCommHookTest, ARefusedGradientFailsTheStepOnEveryRankNamingTheRank) {
  constexpr int kWorld = 3;
  std::vector<std::string> messages(kWorld);
  std::vector<at::Tensor> after(kWorld);
  run_hook_ranks(kWorld, [&](int rank, const auto& make) {
    auto hook = make("int8");
    step(*hook, rank, 0);
    try {
      step(*hook, rank, 1, rank == 1 ? NAN : 0.0f);
    } catch (const Error& e) {
      messages[rank] = e.what();
    }
    auto [b0, b1] = step(*hook, rank, 2);  // the next step trains on
    after[rank] = at::cat({b0, b1});
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_NE(messages[r].find("failed on rank 1"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("non-finite"), std::string::npos) << messages[r];
    EXPECT_TRUE(at::equal(after[r], after[0]));
    EXPECT_TRUE(at::isfinite(after[r]).all().item<bool>());
  }
}

TEST(DdpCommHookTest, AStateSavedAndLoadedResumesExactly) {
  constexpr int kWorld = 2;
  std::vector<std::vector<at::Tensor>> straight(kWorld), resumed(kWorld);
  run_hook_ranks(kWorld, [&](int rank, const auto& make) {
    for (const char* codec : {"int8", "powersgd:rank=2,start=1"}) {
      auto hook = make(codec);
      for (int s = 0; s < 4; ++s) step(*hook, rank, s);
      const Bytes saved = hook->save_state();
      for (int s = 4; s < 7; ++s) {
        auto [b0, b1] = step(*hook, rank, s);
        straight[rank].push_back(at::cat({b0, b1}));
      }
      auto again = make(codec);
      again->load_state(saved);  // before its first step: kept until the step shows shapes
      for (int s = 4; s < 7; ++s) {
        auto [b0, b1] = step(*again, rank, s);
        resumed[rank].push_back(at::cat({b0, b1}));
      }
      EXPECT_THROW(make("fp16")->load_state(saved), MismatchError);
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    for (size_t i = 0; i < straight[r].size(); ++i) {
      EXPECT_TRUE(at::equal(straight[r][i], resumed[r][i])) << "rank " << r << " step " << i;
    }
  }
}

TEST(DdpCommHookTest, CodecsThatDifferAcrossRanksFailConstructionOnEveryRank) {
  std::vector<std::string> messages(2);
  run_hook_ranks(2, [&](int rank, const auto& make) {
    try {
      make(rank == 0 ? "int8" : "fp16");
    } catch (const MismatchError& e) {
      messages[rank] = e.what();
    }
  });
  for (const auto& m : messages) {
    EXPECT_NE(m.find("int8"), std::string::npos) << m;
    EXPECT_NE(m.find("fp16"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace gradwire
