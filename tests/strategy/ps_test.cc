// Parameter server end to end over the in-process transport: servers and workers are
// threads, the "model" is a quadratic whose gradients every worker computes from its
// parameters, so BSP can be compared with allreduce and staleness is real.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <thread>

#include "gradwire/comm/inproc_transport.h"
#include "gradwire/comm/local_collectives.h"
#include "gradwire/core/atomic_file.h"
#include "gradwire/core/error.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"
#include "gradwire/strategy/ps/protocol.h"
#include "gradwire/strategy/ps/ps_strategy.h"
#include "gradwire/strategy/ps/server.h"
#include "gradwire/strategy/ps/server_checkpoint.h"
#include "gradwire/strategy/ps/server_slice.h"

namespace gradwire::strategy::ps {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kToken = 0x1234abcd5678ef90ULL;

// Two tensors (an 8x16 "fc" weight and its bias); f_w(x) = 0.5 sum_i (x_i - t_wi)^2 with a
// per-worker target, so g = x - t_w + a deterministic wobble that depends on the step.
struct Model {
  std::vector<compress::TensorInfo> tensors{{"fc.weight", {8, 16}, compress::LayerKind::kFcWeight},
                                            {"fc.bias", {8}, compress::LayerKind::kBias}};
  std::vector<std::vector<float>> params;
  std::vector<std::vector<float>> grads;

  Model() {
    for (const auto& t : tensors) {
      std::vector<float> p(t.numel());
      for (size_t i = 0; i < p.size(); ++i) p[i] = 0.1f * std::sin(0.7f * i);
      params.push_back(p);
      grads.emplace_back(t.numel(), 0.0f);
    }
  }
  FloatSpans spans(std::vector<std::vector<float>>& v) {
    FloatSpans s;
    for (auto& x : v) s.emplace_back(x);
    return s;
  }
  void compute_gradient(int worker, int step) {
    for (size_t t = 0; t < params.size(); ++t) {
      for (size_t i = 0; i < params[t].size(); ++i) {
        const float target = std::cos(0.3f * i + worker + t);
        grads[t][i] = params[t][i] - target + 0.05f * std::sin(0.1f * i + step);
      }
    }
  }
};

JobConfig base_config(int workers, int servers) {
  JobConfig c;
  c.num_workers = workers;
  c.num_servers = servers;
  c.lr = 0.1;
  c.momentum = 0.9;
  c.worker_timeout_s = 20;
  return c;
}

// Servers on threads; join() rethrows nothing but records what run() threw.
class Servers {
 public:
  Servers(std::shared_ptr<comm::InprocNetwork> net, int count, uint64_t token = kToken) {
    for (int s = 0; s < count; ++s) {
      names_.push_back("server" + std::to_string(s));
      transports_.push_back(net->endpoint(names_.back()));
    }
    errors_.resize(count);
    counters_.resize(count);
    for (int s = 0; s < count; ++s) {
      threads_.emplace_back([this, s, token] {
        ServerOptions o;
        o.index = s;
        o.token = token;
        o.log = [this, s](const std::string& line) {
          std::lock_guard<std::mutex> lock(mutex_);
          log_ += "server " + std::to_string(s) + ": " + line + "\n";
        };
        ParameterServer server(*transports_[s], o);
        try {
          server.run();
        } catch (const std::exception& e) {
          errors_[s] = e.what();
        }
        counters_[s] = server.counters();
      });
    }
  }
  ~Servers() { join(); }
  void join() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<std::string>& errors() const { return errors_; }
  const std::vector<ServerCounters>& counters() const { return counters_; }
  std::string log() {
    std::lock_guard<std::mutex> lock(mutex_);
    return log_;
  }

 private:
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<comm::Transport>> transports_;
  std::vector<std::string> errors_;
  std::vector<ServerCounters> counters_;
  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::string log_;
};

// A worker's endpoint that can be cut: afterwards everything it sends is lost, as when its
// process dies (a destroyed strategy would otherwise say goodbye).
class CuttableTransport : public comm::Transport {
 public:
  CuttableTransport(std::unique_ptr<comm::Transport> inner, std::shared_ptr<std::atomic<bool>> cut)
      : inner_(std::move(inner)), cut_(std::move(cut)) {}
  const std::string& name() const override { return inner_->name(); }
  bool send(const std::string& peer, std::span<const uint8_t> bytes) override {
    return *cut_ || inner_->send(peer, bytes);
  }
  std::optional<comm::Received> receive(std::chrono::milliseconds timeout) override {
    return inner_->receive(timeout);
  }

 private:
  std::unique_ptr<comm::Transport> inner_;
  std::shared_ptr<std::atomic<bool>> cut_;
};

std::unique_ptr<ParameterServerStrategy> make_worker(
    comm::InprocNetwork& net, const Servers& servers, const JobConfig& config, int worker,
    const std::string& codec = "none", uint64_t token = kToken,
    std::shared_ptr<std::atomic<bool>> cut = std::make_shared<std::atomic<bool>>(false)) {
  WorkerOptions o;
  o.config = config;
  o.codec = codec;
  o.worker = worker;
  o.token = token;
  o.servers = servers.names();
  o.timeout = 20s;
  return std::make_unique<ParameterServerStrategy>(
      std::make_unique<CuttableTransport>(net.endpoint("worker" + std::to_string(worker)), cut), o);
}

struct WorkerResult {
  Model model;
  std::optional<JobSummary> summary;
  std::string error;
};

// Runs `steps` steps on worker `w` (sleeping `delay` after each gradient) and finishes,
// unless it is told to vanish after `vanish_after` steps (its transport cut: no goodbye).
void run_worker(comm::InprocNetwork& net, const Servers& servers, const JobConfig& config, int w,
                int steps, WorkerResult& out, std::chrono::milliseconds delay = 0ms,
                int vanish_after = -1, std::function<void(int, int, bool)> on_step = nullptr,
                const std::string& codec = "none") {
  try {
    auto cut = std::make_shared<std::atomic<bool>>(false);
    auto strategy = make_worker(net, servers, config, w, codec, kToken, cut);
    strategy->start(out.model.tensors, out.model.spans(out.model.params));
    for (int step = 0; step < steps; ++step) {
      if (step == vanish_after) {
        *cut = true;
        return;
      }
      if (on_step) on_step(w, step, /*pushing=*/false);
      out.model.compute_gradient(w, step);
      if (delay > 0ms) std::this_thread::sleep_for(delay);
      strategy->count_samples(10, 1.0);
      if (on_step) on_step(w, step, /*pushing=*/true);
      strategy->synchronize(out.model.spans(out.model.grads));
    }
    out.summary = strategy->finish();
  } catch (const std::exception& e) {
    out.error = e.what();
  }
}

TEST(ParameterServer, BspWithNoneMatchesAllreduceAndMomentumSgd) {
  constexpr int kWorkers = 3, kSteps = 8;
  // Reference: allreduce of the same gradients, then torch's SGD with momentum.
  auto group = std::make_shared<comm::LocalGroup>(kWorkers, 20s);
  std::vector<Model> reference(kWorkers);
  {
    std::vector<std::thread> threads;
    for (int w = 0; w < kWorkers; ++w) {
      threads.emplace_back([&, w] {
        comm::LocalCollectives collectives(group, w);
        AllreduceStrategy strategy(collectives, AllreduceOptions{});
        Model& m = reference[w];
        strategy.start(m.tensors, m.spans(m.params));
        std::vector<std::vector<float>> velocity;
        for (auto& p : m.params) velocity.emplace_back(p.size(), 0.0f);
        for (int step = 0; step < kSteps; ++step) {
          m.compute_gradient(w, step);
          strategy.synchronize(m.spans(m.grads));
          for (size_t t = 0; t < m.params.size(); ++t) {
            for (size_t i = 0; i < m.params[t].size(); ++i) {
              velocity[t][i] = 0.9f * velocity[t][i] + m.grads[t][i];
              m.params[t][i] -= 0.1f * velocity[t][i];
            }
          }
        }
      });
    }
    for (auto& t : threads) t.join();
  }

  auto net = comm::InprocNetwork::create();
  const JobConfig config = base_config(kWorkers, 2);
  Servers servers(net, 2);
  std::vector<WorkerResult> results(kWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] { run_worker(*net, servers, config, w, kSteps, results[w]); });
  }
  for (auto& t : threads) t.join();
  servers.join();
  for (const auto& e : servers.errors()) EXPECT_EQ(e, "");
  for (int w = 0; w < kWorkers; ++w) {
    ASSERT_EQ(results[w].error, "") << "worker " << w;
    for (size_t t = 0; t < 2; ++t) {
      for (size_t i = 0; i < results[w].model.params[t].size(); ++i) {
        ASSERT_NEAR(results[w].model.params[t][i], reference[0].params[t][i], 1e-5)
            << "worker " << w << " tensor " << t << " element " << i;
      }
    }
  }
  // Every worker holds the servers' final model: BSP checksums agree.
  const auto& summary = *results[0].summary;
  ASSERT_EQ(summary.checksums.size(), 3u);
  EXPECT_EQ(summary.checksums[0], summary.checksums[1]);
  EXPECT_EQ(summary.checksums[0], summary.checksums[2]);
  EXPECT_EQ(summary.staleness_max, 0u);  // BSP applies each clock once, on fresh weights
  EXPECT_EQ(summary.staleness_count, 2u * kWorkers * kSteps);  // over both servers
  EXPECT_EQ(summary.version, static_cast<uint64_t>(kSteps));
  EXPECT_EQ(summary.progress.samples, 10u * kWorkers * kSteps);
}

TEST(ParameterServer, AServerThatOwnsNoSliceStillServes) {
  // Two small tensors over four servers: servers 2 and 3 own nothing, yet take part.
  auto net = comm::InprocNetwork::create();
  const JobConfig config = base_config(2, 4);
  Servers servers(net, 4);
  std::vector<WorkerResult> results(2);
  std::thread a([&] { run_worker(*net, servers, config, 0, 3, results[0]); });
  std::thread b([&] { run_worker(*net, servers, config, 1, 3, results[1]); });
  a.join();
  b.join();
  servers.join();
  EXPECT_EQ(results[0].error, "");
  EXPECT_EQ(results[1].error, "");
  EXPECT_EQ(results[0].model.params, results[1].model.params);
}

TEST(ParameterServer, GivesUpWhenNoWorkerSaysHello) {
  auto net = comm::InprocNetwork::create();
  auto transport = net->endpoint("server0");
  ServerOptions o;
  o.token = kToken;
  o.first_hello_timeout = 200ms;
  ParameterServer server(*transport, o);
  EXPECT_THROW(server.run(), TimeoutError);
}

TEST(ParameterServer, ServersFollowTheWorkersLearningRateSchedule) {
  auto net = comm::InprocNetwork::create();
  JobConfig config = base_config(1, 2);
  Servers servers(net, 2);
  Model model, reference;
  auto strategy = make_worker(*net, servers, config, 0);
  strategy->start(model.tensors, model.spans(model.params));
  std::vector<std::vector<float>> velocity;
  for (auto& p : reference.params) velocity.emplace_back(p.size(), 0.0f);
  for (int step = 0; step < 6; ++step) {
    const float lr = step < 3 ? 0.1f : 0.02f;  // a step schedule
    strategy->set_learning_rate(lr);
    model.compute_gradient(0, step);
    strategy->synchronize(model.spans(model.grads));
    reference.compute_gradient(0, step);
    for (size_t t = 0; t < reference.params.size(); ++t) {
      for (size_t i = 0; i < reference.params[t].size(); ++i) {
        velocity[t][i] = 0.9f * velocity[t][i] + reference.grads[t][i];
        reference.params[t][i] -= lr * velocity[t][i];
      }
    }
  }
  strategy->finish();
  servers.join();
  for (size_t t = 0; t < model.params.size(); ++t) {
    for (size_t i = 0; i < model.params[t].size(); ++i) {
      ASSERT_NEAR(model.params[t][i], reference.params[t][i], 1e-6) << t << " " << i;
    }
  }
  EXPECT_THROW(strategy->set_learning_rate(0), ConfigError);
}

TEST(ParameterServer, AWorkerDestroyedWithoutFinishSaysGoodbye) {
  auto net = comm::InprocNetwork::create();
  JobConfig config = base_config(2, 1);
  config.worker_timeout_s = 60;  // a worker left for lost would hold the test for a minute
  Servers servers(net, 1);
  WorkerResult chief;
  std::thread a([&] { run_worker(*net, servers, config, 0, 3, chief); });
  {
    Model m;
    auto strategy = make_worker(*net, servers, config, 1);
    strategy->start(m.tensors, m.spans(m.params));
    for (int step = 0; step < 3; ++step) {
      m.compute_gradient(1, step);
      strategy->synchronize(m.spans(m.grads));
    }
  }  // no finish()
  a.join();
  servers.join();
  EXPECT_EQ(chief.error, "");
  EXPECT_EQ(servers.counters()[0].lost_workers, 0);
  EXPECT_NE(chief.summary->checksums[1], "");
}

TEST(ParameterServer, SlicesSpreadLargeTensorsEvenlyOverServers) {
  const std::vector<compress::TensorInfo> tensors{
      {"conv.weight", {32, 1, 3, 3}, compress::LayerKind::kConvWeight},
      {"fc1.weight", {128, 1024}, compress::LayerKind::kFcWeight},
      {"fc1.bias", {128}, compress::LayerKind::kBias}};
  const auto slices = plan_slices(tensors, compress::CodecPolicy::parse("hylo"), 3);
  std::vector<size_t> load(3, 0);
  size_t covered = 0;
  for (const auto& s : slices) {
    load[s.server] += s.numel;
    if (s.tensor == 1) {
      covered += s.numel;
      EXPECT_EQ(s.offset % 1024, 0u) << "fc1 slices start at row boundaries";
      EXPECT_EQ(s.info.shape[1], 1024);
      EXPECT_EQ(s.codec, compress::CodecPolicy::parse("hylo").spec_for(tensors[1]));
    }
  }
  EXPECT_EQ(covered, 128u * 1024u);
  const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
  EXPECT_LE(*hi - *lo, 12u * 1024u) << "loads differ by at most one slice";
}

TEST(ParameterServer, SspNeverLetsAWorkerRunMoreThanSAhead) {
  constexpr int kWorkers = 3, kSteps = 12;
  constexpr uint64_t kBound = 2;
  auto net = comm::InprocNetwork::create();
  JobConfig config = base_config(kWorkers, 1);
  config.consistency = Consistency::parse("ssp:2");
  Servers servers(net, 1);
  std::vector<std::atomic<int>> pushed(kWorkers);  // pushes sent
  std::atomic<int> violations{0}, max_lead{0};
  auto on_step = [&](int w, int step, bool pushing) {
    if (pushing) {
      pushed[w] = step + 1;
      return;
    }
    // Starting step `step` (0-based) needs every other worker to have pushed step - S.
    for (int u = 0; u < kWorkers; ++u) {
      if (u == w) continue;
      const int lead = step - pushed[u].load();
      max_lead = std::max(max_lead.load(), lead);
      if (lead > static_cast<int>(kBound)) ++violations;
    }
  };
  std::vector<WorkerResult> results(kWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    const auto delay = w == 2 ? 30ms : 0ms;  // worker 2 is slow
    threads.emplace_back([&, w, delay] {
      run_worker(*net, servers, config, w, kSteps, results[w], delay, -1, on_step);
    });
  }
  for (auto& t : threads) t.join();
  servers.join();
  for (const auto& r : results) ASSERT_EQ(r.error, "");
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(max_lead.load(), static_cast<int>(kBound)) << "fast workers do run ahead, up to S";
  EXPECT_GT(results[0].summary->staleness_max, 0u);
}

TEST(ParameterServer, AspWithAllUpdatersTrainsAndRecordsStaleness) {
  for (const std::string updater : {"sgd", "asgd-staleness", "dc-asgd", "dc-asgd-a", "ddc-asgd"}) {
    SCOPED_TRACE(updater);
    constexpr int kWorkers = 3, kSteps = 60;
    auto net = comm::InprocNetwork::create();
    JobConfig config = base_config(kWorkers, 2);
    config.consistency = Consistency::parse("asp");
    config.updater = updater;
    // Heavy-ball momentum 0.9 plus staleness oscillates for long on this quadratic (the
    // delay adds to the momentum); 0.5 converges within the test's steps.
    config.lr = 0.05;
    config.momentum = 0.5;
    Servers servers(net, 2);
    std::vector<WorkerResult> results(kWorkers);
    std::vector<std::thread> threads;
    for (int w = 0; w < kWorkers; ++w) {
      threads.emplace_back([&, w] {
        run_worker(*net, servers, config, w, kSteps, results[w], std::chrono::milliseconds(w));
      });
    }
    for (auto& t : threads) t.join();
    servers.join();
    for (const auto& r : results) ASSERT_EQ(r.error, "");
    const auto& summary = *results[0].summary;
    EXPECT_EQ(summary.version, static_cast<uint64_t>(kWorkers * kSteps));
    EXPECT_EQ(summary.staleness_count, 2u * kWorkers * kSteps);
    EXPECT_GT(summary.staleness_mean, 0.0) << "three workers on one server see stale pushes";
    EXPECT_LE(summary.staleness_p50, summary.staleness_p99);
    EXPECT_LE(summary.staleness_p99, summary.staleness_max);
    // Workers finish at different times, so the final model (worker 0 received it) mixes
    // the workers' targets in unknown proportions: it must lie between them.
    const Model& m = results[0].model;
    double err = 0;
    for (size_t i = 0; i < m.params[1].size(); ++i) {
      double lo = 1e9, hi = -1e9;
      for (int w = 0; w < kWorkers; ++w) {
        lo = std::min<double>(lo, std::cos(0.3f * i + w + 1));
        hi = std::max<double>(hi, std::cos(0.3f * i + w + 1));
      }
      err = std::max({err, lo - m.params[1][i], m.params[1][i] - hi});
    }
    EXPECT_LT(err, 0.1);
  }
}

TEST(ParameterServer, CompressedPushesAndDeltaPullsTrain) {
  constexpr int kWorkers = 2, kSteps = 40;
  auto net = comm::InprocNetwork::create();
  JobConfig config = base_config(kWorkers, 2);
  config.momentum = 0.5;
  config.pull = PullCodec::parse("delta:topk:density=0.25");
  Servers servers(net, 2);
  std::vector<WorkerResult> results(kWorkers);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      run_worker(*net, servers, config, w, kSteps, results[w], 0ms, -1, nullptr,
                 "fc=2bit,bias=none");
    });
  }
  for (auto& t : threads) t.join();
  servers.join();
  for (const auto& r : results) ASSERT_EQ(r.error, "");
  const Model& m = results[1].model;  // holds what the deltas built up
  double err = 0;
  for (size_t i = 0; i < m.params[1].size(); ++i) {
    const double target = (std::cos(0.3f * i + 1) + std::cos(0.3f * i + 2)) / 2;
    err = std::max(err, std::abs(m.params[1][i] - target));
  }
  EXPECT_LT(err, 0.2);
}

TEST(ParameterServer, BspStopsNamingALostWorker) {
  auto net = comm::InprocNetwork::create();
  JobConfig config = base_config(2, 1);
  config.worker_timeout_s = 0.5;
  Servers servers(net, 1);
  std::vector<WorkerResult> results(2);
  std::thread a([&] { run_worker(*net, servers, config, 0, 20, results[0]); });
  std::thread b([&] { run_worker(*net, servers, config, 1, 20, results[1], 0ms, 3); });
  a.join();
  b.join();
  servers.join();
  EXPECT_NE(results[0].error.find("worker 1 sent nothing"), std::string::npos) << results[0].error;
  EXPECT_NE(results[0].error.find("--on-worker-loss continue"), std::string::npos);
  EXPECT_NE(servers.errors()[0].find("worker 1"), std::string::npos);
}

TEST(ParameterServer, LostWorkersAreDroppedWhenToldToContinue) {
  for (const std::string consistency : {"bsp", "ssp:1", "asp"}) {
    SCOPED_TRACE(consistency);
    auto net = comm::InprocNetwork::create();
    JobConfig config = base_config(3, 1);
    config.consistency = Consistency::parse(consistency);
    config.continue_on_worker_loss = true;
    config.worker_timeout_s = 0.4;
    Servers servers(net, 1);
    std::vector<WorkerResult> results(3);
    std::vector<std::thread> threads;
    for (int w = 0; w < 3; ++w) {
      threads.emplace_back(
          [&, w] { run_worker(*net, servers, config, w, 15, results[w], 5ms, w == 2 ? 4 : -1); });
    }
    for (auto& t : threads) t.join();
    servers.join();
    EXPECT_EQ(results[0].error, "");
    EXPECT_EQ(results[1].error, "");
    EXPECT_EQ(servers.errors()[0], "");
    EXPECT_EQ(servers.counters()[0].lost_workers, 1) << servers.log();
    ASSERT_TRUE(results[0].summary);
    EXPECT_EQ(results[0].summary->checksums[2], "");
    EXPECT_NE(servers.log().find("worker 2 sent nothing"), std::string::npos);
  }
}

TEST(ParameterServer, RejectsBadTokensAndMalformedMessagesWhileTrainingGoesOn) {
  auto net = comm::InprocNetwork::create();
  const JobConfig config = base_config(2, 1);
  Servers servers(net, 1);
  std::vector<WorkerResult> results(2);
  std::atomic<bool> stop{false};
  std::thread rogue([&] {
    auto endpoint = net->endpoint("rogue");
    MessageHeader h;
    h.token = kToken ^ 1;  // wrong token
    h.sender = 0;
    PushMessage push;
    push.gradients.push_back({0, Bytes(64, 0xff)});
    int sent = 0;
    while (!stop && sent < 50) {
      endpoint->send("server0", encode(h, push));
      endpoint->send("server0", Bytes{1, 2, 3});  // not a message at all
      MessageHeader good = h;
      good.token = kToken;
      Bytes truncated = encode(good, push);
      truncated.resize(truncated.size() - 5);
      endpoint->send("server0", truncated);           // right token, cut short
      endpoint->send("server0", encode(good, push));  // a push from a stranger
      ++sent;
      std::this_thread::sleep_for(2ms);
    }
  });
  std::thread a([&] { run_worker(*net, servers, config, 0, 25, results[0], 1ms); });
  std::thread b([&] { run_worker(*net, servers, config, 1, 25, results[1], 1ms); });
  a.join();
  b.join();
  stop = true;
  rogue.join();
  servers.join();
  EXPECT_EQ(results[0].error, "");
  EXPECT_EQ(results[1].error, "");
  EXPECT_EQ(servers.errors()[0], "");
  EXPECT_GT(servers.counters()[0].rejected_token, 0u);
  EXPECT_GT(servers.counters()[0].malformed, 0u);
  EXPECT_NE(servers.log().find("wrong job token"), std::string::npos);
  EXPECT_EQ(results[0].summary->version, 25u);
}

TEST(ParameterServer, CodecMismatchBetweenWorkersIsAClearError) {
  auto net = comm::InprocNetwork::create();
  JobConfig config = base_config(2, 1);
  config.worker_timeout_s = 0.5;
  Servers servers(net, 1);
  std::vector<WorkerResult> results(2);
  std::thread a([&] { run_worker(*net, servers, config, 0, 5, results[0]); });
  std::this_thread::sleep_for(50ms);  // worker 0's configuration is the job's
  std::thread b(
      [&] { run_worker(*net, servers, config, 1, 5, results[1], 0ms, -1, nullptr, "fp16"); });
  a.join();
  b.join();
  servers.join();
  EXPECT_NE(results[1].error.find("every worker must run the same configuration"),
            std::string::npos)
      << results[1].error;
  EXPECT_NE(results[1].error.find("fp16"), std::string::npos) << results[1].error;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("gradwire_ps_ckpt_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

uint64_t checkpoint_version(const std::filesystem::path& file) {
  const auto bytes = read_file_if_exists(file.string());
  return bytes ? decode_server_checkpoint(*bytes).version : 0;
}

// The file round-trips, and every truncation of its payload (framed again, so the CRC
// passes) is a PayloadError, never an allocation of what the sizes claim.
TEST(ServerCheckpointFile, RoundTripsAndRefusesEveryTruncation) {
  ServerCheckpoint c;
  c.version = 42;
  c.progress = {640, 31.5, 5000, 20000, 1200};
  c.slices.push_back({"fc.weight", "2bit", {1.5f, -2.0f, 0.25f}});
  c.slices.push_back({"fc.bias", "none", {}});
  c.updater_state = {9, 8, 7};
  c.staleness_counts = {3, 2, 1};
  const Bytes file = encode_server_checkpoint(c);
  const ServerCheckpoint back = decode_server_checkpoint(file);
  EXPECT_EQ(back.version, 42u);
  EXPECT_EQ(back.progress.samples, 640u);
  EXPECT_EQ(back.progress.loss_sum, 31.5);
  EXPECT_EQ(back.progress.bytes_received, 1200u);
  ASSERT_EQ(back.slices.size(), 2u);
  EXPECT_EQ(back.slices[0].name, "fc.weight");
  EXPECT_EQ(back.slices[0].codec, "2bit");
  EXPECT_EQ(back.slices[0].weights, c.slices[0].weights);
  EXPECT_TRUE(back.slices[1].weights.empty());
  EXPECT_EQ(back.updater_state, c.updater_state);
  EXPECT_EQ(back.staleness_counts, c.staleness_counts);
  EXPECT_EQ(encode_server_checkpoint(back), file);

  const Bytes body = unframe_checkpoint(file);
  for (size_t n = 0; n < body.size(); ++n) {
    EXPECT_THROW(decode_server_checkpoint(frame_checkpoint(std::span(body.data(), n))),
                 PayloadError)
        << n;
  }
  Bytes longer = body;
  longer.push_back(0);
  EXPECT_THROW(decode_server_checkpoint(frame_checkpoint(longer)), PayloadError);
  // A slice claiming 2^32 - 1 weights in a small file.
  Bytes huge = body;
  const size_t count_at = 4 + 8 + 40 + 4 + (4 + 9) + (4 + 4);
  ASSERT_EQ(huge[count_at], 3);
  huge[count_at] = huge[count_at + 1] = huge[count_at + 2] = huge[count_at + 3] = 0xff;
  EXPECT_THROW(decode_server_checkpoint(frame_checkpoint(huge)), PayloadError);
}

// A checkpoint is used only by the job whose slices it holds: count, names, codecs, sizes.
TEST(ServerCheckpointFile, FitsOnlyTheJobWhoseSlicesItHolds) {
  ServerCheckpoint c;
  c.slices.push_back({"fc.weight", "2bit", {1.5f, -2.0f, 0.25f}});
  std::vector<SliceDescription> job(1);
  job[0].info = {"fc.weight", {3}, compress::LayerKind::kOther};
  job[0].codec = "2bit";
  EXPECT_NO_THROW(check_checkpoint_fits(c, job, "server-0.ckpt"));
  auto refused = [&](std::vector<SliceDescription> other) {
    EXPECT_THROW(check_checkpoint_fits(c, other, "server-0.ckpt"), MismatchError);
  };
  auto renamed = job;
  renamed[0].info.name = "fc.bias";
  refused(renamed);
  auto recoded = job;
  recoded[0].codec = "none";
  refused(recoded);
  auto resized = job;
  resized[0].info.shape = {4};
  refused(resized);
  refused({});
}

// What a worker holds after decoding a pull is what the server records for it: after a
// lossy pull the next delta carries what the codec left out, so held tracks the weights.
TEST(ServerSlicePull, DeltasCarryWhatALossyPullLeftOut) {
  std::vector<SliceDescription> descriptions(1);
  descriptions[0].id = 7;
  descriptions[0].info = {"w", {4}, compress::LayerKind::kOther};
  descriptions[0].codec = "none";
  auto slices = make_server_slices(descriptions, "fp16");
  slices[0].weights = {1.0f, -2.0f, 1.0f / 3.0f, 1e-3f};
  std::vector<std::vector<float>> held;
  auto whole = encode_pull(slices, PullForm::kWhole, &held);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].id, 7u);
  EXPECT_EQ(held[0], slices[0].weights);  // f32: exact
  slices[0].weights[2] += 0.1f;
  encode_pull(slices, PullForm::kDelta, &held);
  // fp16 rounds the delta 0.1: held is within fp16's rounding of it, not exact.
  EXPECT_NEAR(held[0][2], slices[0].weights[2], 1e-4);
  EXPECT_EQ(held[0][0], 1.0f);  // a zero delta adds nothing
  // Plain weights through fp16: held is their fp16 rounding, and the delta after it
  // carries the rounding error back (fp16 of a value ~1e-4 is exact to ~1e-7).
  encode_pull(slices, PullForm::kWeights, &held);
  const float rounded = held[0][2];
  EXPECT_NE(rounded, slices[0].weights[2]);
  encode_pull(slices, PullForm::kDelta, &held);
  EXPECT_NEAR(held[0][2], slices[0].weights[2], 1e-7);
  EXPECT_LT(std::abs(held[0][2] - slices[0].weights[2]), std::abs(rounded - slices[0].weights[2]));
  // Without a copy there is nothing to take a delta against.
  EXPECT_THROW(encode_pull(slices, PullForm::kDelta, nullptr), Error);
  EXPECT_EQ(encode_pull(slices, PullForm::kWeights, nullptr).size(), 1u);
}

TEST_F(CheckpointTest, ARestartedJobResumesLosingAtMostNUpdates) {
  constexpr uint64_t kEvery = 4;
  JobConfig config = base_config(1, 2);
  config.consistency = Consistency::parse("asp");
  config.updater = "dc-asgd-a";
  config.checkpoint_dir = dir_.string();
  config.checkpoint_every = kEvery;
  WorkerResult first;
  {
    auto net = comm::InprocNetwork::create();
    Servers servers(net, 2);
    std::atomic<int> worst_loss{0};
    auto on_step = [&](int, int step, bool pushing) {
      // Before step `step` the servers applied `step` updates; the checkpoint on disk
      // misses at most kEvery - 1 of them.
      if (step == 0 || pushing) return;
      const int lost = step - static_cast<int>(checkpoint_version(dir_ / "server-0.ckpt"));
      worst_loss = std::max(worst_loss.load(), lost);
    };
    run_worker(*net, servers, config, 0, 10, first, 0ms, -1, on_step);
    servers.join();
    ASSERT_EQ(first.error, "");
    EXPECT_LT(worst_loss.load(), static_cast<int>(kEvery));
    EXPECT_GE(servers.counters()[0].checkpoints, 2u);
  }
  EXPECT_EQ(checkpoint_version(dir_ / "server-0.ckpt"), 10u);  // written again at the end
  EXPECT_EQ(checkpoint_version(dir_ / "server-1.ckpt"), 10u);

  // A new job on the same directory starts from the saved model, not from its own.
  auto net = comm::InprocNetwork::create();
  Servers servers(net, 2);
  WorkerResult second;
  auto strategy = make_worker(*net, servers, config, 0);
  strategy->start(second.model.tensors, second.model.spans(second.model.params));
  EXPECT_EQ(second.model.params, first.model.params);
  EXPECT_EQ(strategy->job_progress()->samples, 100u);
  second.summary = strategy->finish();
  servers.join();
  EXPECT_TRUE(servers.counters()[0].resumed);
  EXPECT_EQ(second.summary->version, 10u);
}

TEST_F(CheckpointTest, AFailedCheckpointIsReportedAndTheOldOneStays) {
  JobConfig config = base_config(1, 1);
  config.consistency = Consistency::parse("asp");
  config.checkpoint_dir = dir_.string();
  config.checkpoint_every = 2;
  auto net = comm::InprocNetwork::create();
  Servers servers(net, 1);
  WorkerResult result;
  Bytes saved;
  auto on_step = [&](int, int step, bool pushing) {
    if (step == 5 && !pushing) {
      // The disk goes away: replace the directory by a file.
      saved = *read_file_if_exists((dir_ / "server-0.ckpt").string());
      std::filesystem::remove_all(dir_);
      write_file_atomically(dir_.string(), Bytes{1});
    }
  };
  run_worker(*net, servers, config, 0, 9, result, 0ms, -1, on_step);
  servers.join();
  EXPECT_EQ(result.error, "");
  EXPECT_GT(servers.counters()[0].checkpoint_failures, 0u);
  EXPECT_NE(servers.log().find("checkpoint failed, the previous one stays"), std::string::npos);
  EXPECT_EQ(unframe_checkpoint(saved).size() > 0, true);
  std::filesystem::remove(dir_);
}

TEST_F(CheckpointTest, AnUnwritableCheckpointDirectoryIsRefusedAtStart) {
  write_file_atomically(dir_.string(), Bytes{1});  // a file where the directory should be
  JobConfig config = base_config(1, 1);
  config.checkpoint_dir = (dir_ / "sub").string();
  config.checkpoint_every = 2;
  auto net = comm::InprocNetwork::create();
  Servers servers(net, 1);
  WorkerResult result;
  run_worker(*net, servers, config, 0, 3, result);
  EXPECT_NE(result.error.find("sub"), std::string::npos) << result.error;
  std::filesystem::remove(dir_);
  // The server keeps waiting for a worker; this job has none left, so it is not joined.
  // (Its thread ends when the worker timeout declares worker 0 lost.)
}

TEST(ParameterServerProtocol, ParsersRefuseEveryTruncation) {
  MessageHeader h;
  h.token = kToken;
  HelloMessage hello;
  hello.config = base_config(1, 1).to_text();
  hello.slices.push_back({0, {"w", {2, 2}, compress::LayerKind::kFcWeight}, "none"});
  hello.has_initial = true;
  hello.initial.push_back({1, 2, 3, 4});
  const Bytes bytes = encode(h, hello);
  for (size_t n = 0; n < bytes.size(); ++n) {
    ByteReader reader(std::span<const uint8_t>(bytes.data(), n));
    EXPECT_THROW(
        {
          MessageHeader::read(reader);
          parse_hello(reader);
        },
        PayloadError)
        << n;
  }
  ByteReader reader(bytes);
  EXPECT_EQ(MessageHeader::read(reader).token, kToken);
  const auto parsed = parse_hello(reader);
  EXPECT_EQ(parsed.initial[0], hello.initial[0]);
  EXPECT_TRUE(parsed.slices[0] == hello.slices[0]);
}

TEST(ParameterServerProtocol, GoodbyeSaysWhetherTheWorkerWaitsForTheFinalMessage) {
  MessageHeader h;
  h.token = kToken;
  for (const bool wants : {true, false}) {
    ByeMessage bye{{64, 1.0, 8, 32, 0}, "ab"};
    bye.wants_final = wants;
    const Bytes bytes = encode(h, bye);
    ByteReader reader(bytes);
    MessageHeader::read(reader);
    EXPECT_EQ(parse_bye(reader).wants_final, wants);
  }
  Bytes bad = encode(h, ByeMessage{});
  bad.back() = 2;  // the flag is 0 or 1
  ByteReader reader(bad);
  MessageHeader::read(reader);
  EXPECT_THROW(parse_bye(reader), PayloadError);
}

TEST(ParameterServerJob, ConfigRoundTripsAndOptionsAreChecked) {
  JobConfig c = base_config(4, 2);
  c.consistency = Consistency::parse("ssp:3");
  c.updater = "ddc-asgd";
  c.pull = PullCodec::parse("fp16");
  EXPECT_EQ(JobConfig::from_text(c.to_text()).to_text(), c.to_text());
  EXPECT_THROW(Consistency::parse("ssp"), ConfigError);
  EXPECT_THROW(Consistency::parse("sync"), ConfigError);
  EXPECT_THROW(PullCodec::parse("topk"), ConfigError);
  EXPECT_EQ(PullCodec::parse("delta:topk:density=0.1").to_string().rfind("delta:topk:", 0), 0u);
  EXPECT_EQ(PullCodec::parse(PullCodec::parse("fp16").to_string()).to_string(),
            PullCodec::parse("fp16").to_string());
  c.updater = "adam";
  EXPECT_THROW(c.validate(), ConfigError);
}

}  // namespace
}  // namespace gradwire::strategy::ps
