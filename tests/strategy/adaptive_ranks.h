// The adaptive strategies (auto, accordion) over in-process ranks for the tests: SGD on
// rank-specific Gaussian gradients behind a simulated link, recording each step's plan,
// the decisions and the parameters.
#pragma once

#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "../common/forwarding_collectives.h"
#include "gradwire/comm/local_collectives.h"
#include "gradwire/strategy/adaptive/adaptive_strategy.h"
#include "gradwire/strategy/registry.h"

namespace gradwire::strategy::testing {

using namespace std::chrono_literals;
using compress::LayerKind;
using compress::TensorInfo;

inline std::vector<TensorInfo> fc_tensors(int64_t rows, int64_t cols) {
  return {{"fc.weight", {rows, cols}, LayerKind::kFcWeight}, {"fc.bias", {rows}, LayerKind::kBias}};
}

// Collectives behind a link of `bytes_per_s`: every allreduce and allgather also waits for
// what its bytes on the wire would take on such a link (a simulated bandwidth).
class ThrottledCollectives : public ForwardingCollectives {
 public:
  ThrottledCollectives(comm::Collectives& inner, double bytes_per_s)
      : ForwardingCollectives(inner), bytes_per_s_(bytes_per_s) {}
  // What this link carried (counted here), not the inner communicator's.
  const comm::CollectiveTraffic& traffic() const override { return Collectives::traffic(); }
  std::unique_ptr<comm::Work> allreduce_sum_async(void* data, size_t count,
                                                  comm::DataType type) override {
    inner().allreduce_sum(data, count, type);
    const size_t bytes = count * comm::data_type_size(type);
    count_allreduce(bytes);
    wait_for(comm::ring_allreduce_wire_bytes(bytes, size()));
    return std::make_unique<comm::CompletedWork>();
  }
  void allreduce_max(float* data, size_t count) override {
    inner().allreduce_max(data, count);
    wait_for(comm::ring_allreduce_wire_bytes(count * sizeof(float), size()));
  }
  using Collectives::allgather_bytes;
  void allgather_bytes(std::span<const uint8_t> data, std::vector<Bytes>& out) override {
    inner().allgather_bytes(data, out);
    count_allgather(data.size(), data.size());
    wait_for(comm::ring_allgather_wire_bytes(data.size(), size()));
  }
  void alltoall_bytes(std::span<const Bytes> to, std::vector<Bytes>& out) override {
    inner().alltoall_bytes(to, out);
    count_alltoall(to);
    uint64_t sent = 0;
    for (size_t r = 0; r < to.size(); ++r) sent += static_cast<int>(r) == rank() ? 0 : to[r].size();
    wait_for(comm::pairwise_alltoall_wire_bytes(sent, size()));
  }

 private:
  void wait_for(uint64_t bytes) {
    std::this_thread::sleep_for(std::chrono::duration<double>(bytes / bytes_per_s_));
  }
  double bytes_per_s_;
};

struct RankRun {
  std::vector<std::pair<uint64_t, std::string>> decisions;  // (step, plan)
  std::vector<std::string> reasons;                         // and why, for failures
  std::vector<std::string> inputs_json;                     // and its figures (JSON)
  std::vector<std::string> plan_per_step;                   // the plan each step used
  std::vector<std::vector<float>> params;
  std::vector<float> first_aggregate;  // fc.bias after step 0's exchange
  std::vector<double> step_ms;         // per step: from the last synchronize()'s return
};

struct RunSettings {
  std::string codec;
  int steps = 0;
  int64_t rows = 16, cols = 32;
  double bytes_per_s = 0;  // 0: no simulated link
  comm::LinkModel link;    // what auto's cost model assumes
  std::chrono::milliseconds compute{0};
  std::function<float(int step)> norm_scale = [](int) { return 1.0f; };
  std::function<double(int rank, int step)> lr = [](int, int) { return 0.1; };
  std::vector<TensorInfo> tensors;  // empty: fc_tensors(rows, cols)
  // Report the gradients through gradient_ready(), last tensor first as backward does,
  // with `backward` of sleep after each but the last (after `compute`).
  bool hooks = false;
  std::chrono::milliseconds backward{0};
  std::string quantized_path = "auto";  // AllreduceOptions::quantized_path of the plans
  std::chrono::seconds timeout{20};     // the whole run's bound (run_local_ranks)
  // As the DDP hook: start() in step 0, after its `compute`, right before its exchange.
  bool start_in_first_step = false;
};

// Every rank: `steps` SGD steps on rank-specific Gaussian gradients scaled by
// norm_scale(step), with `compute` of sleep standing in for forward and backward.
inline std::vector<RankRun> run_ranks(int world, const RunSettings& settings,
                                      std::vector<std::vector<float>>* first_inputs = nullptr) {
  const auto tensors =
      settings.tensors.empty() ? fc_tensors(settings.rows, settings.cols) : settings.tensors;
  std::vector<RankRun> runs(world);
  if (first_inputs) first_inputs->assign(world, {});
  comm::run_local_ranks(world, settings.timeout, [&](comm::Collectives& local) {
    std::unique_ptr<ThrottledCollectives> throttled;
    comm::Collectives* c = &local;
    if (settings.bytes_per_s > 0) {
      throttled = std::make_unique<ThrottledCollectives>(local, settings.bytes_per_s);
      c = throttled.get();
    }
    const int rank = c->rank();
    std::vector<std::vector<float>> params, grads;
    std::mt19937 rng(31 + rank);
    std::normal_distribution<float> normal;
    FloatSpans param_spans, grad_spans;
    for (const auto& t : tensors) {
      params.emplace_back(t.numel(), 0.5f);
      grads.emplace_back(t.numel());
    }
    for (size_t t = 0; t < tensors.size(); ++t) {
      param_spans.emplace_back(params[t]);
      grad_spans.emplace_back(grads[t]);
    }
    auto strategy = create_allreduce_strategy(*c, {.codec = settings.codec,
                                                   .quantized_path = settings.quantized_path,
                                                   .link = settings.link});
    auto* adaptive = dynamic_cast<AdaptiveStrategy*>(strategy.get());
    ASSERT_NE(adaptive, nullptr);
    if (!settings.start_in_first_step) strategy->start(tensors, param_spans);
    RankRun& run = runs[rank];
    auto last_end = std::chrono::steady_clock::now();
    for (int s = 0; s < settings.steps; ++s) {
      for (auto& g : grads) {
        for (float& v : g) v = settings.norm_scale(s) * normal(rng);
      }
      if (s == 0 && first_inputs) (*first_inputs)[rank] = grads[1];
      if (s == 0 && settings.start_in_first_step) {
        std::this_thread::sleep_for(settings.compute);
        strategy->start(tensors, param_spans);
      }
      run.plan_per_step.push_back(adaptive->active_plan().name);
      strategy->set_learning_rate(settings.lr(rank, s));
      if (s > 0 || !settings.start_in_first_step) std::this_thread::sleep_for(settings.compute);
      if (settings.hooks) {
        for (size_t k = tensors.size(); k-- > 0;) {
          strategy->gradient_ready(k, grad_spans[k]);
          if (k > 0) std::this_thread::sleep_for(settings.backward);
        }
      }
      strategy->synchronize(grad_spans);
      const auto now = std::chrono::steady_clock::now();
      run.step_ms.push_back(std::chrono::duration<double, std::milli>(now - last_end).count());
      last_end = now;
      if (s == 0 && grads.size() > 1) run.first_aggregate = grads[1];
      for (size_t t = 0; t < tensors.size(); ++t) {
        for (size_t i = 0; i < params[t].size(); ++i) params[t][i] -= 0.1f * grads[t][i];
      }
      for (const auto& d : strategy->take_decisions()) {
        run.decisions.emplace_back(d.step, d.plan);
        run.reasons.push_back(d.reason);
        run.inputs_json.push_back(d.inputs_json);
      }
    }
    run.params = params;
  });
  return runs;
}

inline std::vector<std::string> plans_by_step(
    std::initializer_list<std::pair<int, std::string>> spans, int steps) {
  std::vector<std::string> out;
  auto it = spans.begin();
  for (int s = 0; s < steps; ++s) {
    if (std::next(it) != spans.end() && s >= std::next(it)->first) ++it;
    out.push_back(it->second);
  }
  return out;
}

}  // namespace gradwire::strategy::testing
