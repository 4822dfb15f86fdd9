// DiLoCo (Douillard et al. 2023) and Streaming DiLoCo (2025): local SGD with an outer
// optimizer, for links too slow to exchange at every step (docs/ALGORITHMS.md, DiLoCo).
//
// Every rank steps its own optimizer (the inner one: AdamW in the papers) on its own
// gradients; nothing is exchanged per step. Every H inner steps each fragment of the model
// (fragments.h) is synchronized: with theta_g its parameters at its last synchronization
// (equal on every rank) and theta its current ones,
//   outer gradient   Delta = mean over the ranks of (theta_g - theta)   (OuterExchange)
//   outer momentum   m <- mu m + Delta
//   outer step       theta_g <- theta_g - lr_out (Delta + mu m)          (Nesterov; m without)
//                    (lr_out ramped up over the fragment's first outer_warmup steps)
//   merge            theta <- theta_g + (theta - theta_sent)
// where theta_sent is theta when the exchange was sent: with a delay tau > 0 the exchange
// runs on the exchange thread while tau more inner steps go on, and the merge keeps what
// those steps did locally (the next round's outer gradient carries it to the others); with
// tau = 0, theta <- theta_g and every rank holds the same fragment. The papers set lr_out
// 0.7, mu 0.9, Nesterov; the defaults (diloco_options.h) average plainly: lr_out 1, mu 0.
//
// `inner_steps` 0 (auto): the first kProbeSteps steps are timed, the ranks agree on the
// slowest rank's median step time t (one allreduce-max), and with T the predicted time of
// one fragment's exchange over `link` (OuterExchange::predicted_seconds):
//   streaming (F > 1 or delay > 0): tau = ceil(kAutoMargin T / t) (at least 1), H = F tau:
//     the smallest H whose exchanges all hide under the inner steps;
//   blocking (F = 1, delay 0): H = ceil(T / (kAutoBlockingShare t)): the exchange costs at
//     most that share of the round.
//   Either way H >= auto_min_inner_steps(): 10, except for SparseLoCo, whose error-fed
//   sparse outer steps ended level with or above the floor's quality at the smallest H
//   that hides (docs/RESULTS.md, issue 63), where only tau >= 1 bounds it. The choice is a
//   decision (take_decisions()).
//   Known limit: the probe's first steps can run faster than later ones (cnn-wide at 10
//   Mbit: 31 and 69 ms probes on two seeds, about 85 ms later), and H is then longer than
//   the link needs (docs/ALGORITHMS.md 12).
//
// Everything here happens in after_update() on the caller's thread, except the exchanges,
// which run on the exchange thread (InOrderExecutor, in a turn reserved when sent, so that
// collectives the caller issues meanwhile keep one order on every rank).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gradwire/comm/collectives.h"
#include "gradwire/comm/cost_model.h"
#include "gradwire/diloco_options.h"
#include "gradwire/strategy/diloco/fragments.h"
#include "gradwire/strategy/diloco/outer_exchange.h"
#include "gradwire/strategy/in_order_executor.h"
#include "gradwire/strategy/strategy.h"

namespace gradwire::strategy::diloco {

// The program's options (include/gradwire/diloco_options.h) with what the job adds.
struct DiLoCoOptions : gradwire::DiLoCoOptions {
  std::string codec = "none";  // of the outer gradient: one codec spec (no layer policy)
  comm::LinkModel link;        // what auto predicts exchanges with

  // ConfigError naming the first option out of range.
  void check() const;
  // One line per option, for the ranks' agreement.
  std::vector<std::string> lines() const;
};

// The outer learning rate of a fragment's k-th outer step (k = 0, 1, ...): outer_lr, ramped
// up linearly over the first outer_warmup steps.
double outer_lr_at(const gradwire::DiLoCoOptions& options, uint64_t k);

// What the outer loop did (DistributedOptimizer::diloco_summary()).
struct DiLoCoStats {
  uint64_t inner_steps = 0;  // H in force (0 while auto is still probing)
  uint64_t delay = 0;
  int fragments = 1;
  uint64_t steps = 0;      // inner steps taken
  uint64_t exchanges = 0;  // fragment exchanges landed
  uint64_t rounds = 0;     // outer steps of the whole model: exchanges / F
  uint64_t bytes_on_wire = 0;
  uint64_t last_sync_step = 0;  // the inner step at which the last fragment landed
};

class DiLoCoStrategy : public Strategy {
 public:
  static constexpr uint64_t kProbeSteps = 6;
  static constexpr double kAutoMargin = 1.25;
  static constexpr double kAutoBlockingShare = 0.05;
  static constexpr uint64_t kAutoMinInnerSteps = 10;  // for every codec but sparseloco

  DiLoCoStrategy(comm::Collectives& collectives, DiLoCoOptions options);
  ~DiLoCoStrategy() override;

  std::string name() const override { return "diloco"; }
  // `params` are read here only; later calls take the parameters where they are then.
  void start(std::span<const compress::TensorInfo> tensors, const FloatSpans& params) override;
  // The gradients stay this rank's: the inner optimizer steps on them.
  void synchronize(const FloatSpans& grads) override {}
  bool exchanges_gradients() const override { return false; }
  void after_update(const FloatSpans& params) override;
  bool just_synchronized() const override { return just_synchronized_; }
  bool carry_broadcast(std::function<void(Bytes&)> pack,
                       std::function<void(const Bytes&)> unpack) override;
  TrafficStats traffic() const override { return traffic_; }
  std::vector<CodecDecision> take_decisions() override;
  // Lands the exchange in flight, then averages what every fragment did since its last
  // synchronization (an outer step of rate 1 without momentum), so that every rank ends
  // with the same model. Collective.
  std::optional<JobSummary> finish() override;
  void follow_parameters(const FloatSpans& params) override { params_ = params; }
  void save_state(Bytes& out) const override;
  // Also into a running job (a rollback): the exchange in flight, if any, is finished on
  // this rank first (every rank must load at the same step, as every rank sent it) and
  // discarded. After a diverged rank's failure (non-finite outer gradient) this is how the
  // job goes on; after a failed collective it throws that failure.
  void load_state(ByteReader& in) override;

  DiLoCoStats stats() const;
  // theta_g: every fragment's parameters as of its last synchronization (equal on every
  // rank: the model the ranks agree on, to evaluate), written into `out` (shaped as the
  // parameters). Between steps.
  void global_parameters(const FloatSpans& out) const;
  // Waits until the exchange in flight (if any) has finished on this rank; it still lands
  // at its step. For a program that stops its clock (to evaluate, to checkpoint) and must
  // not let the exchange run on in time it does not count. Between steps.
  void wait_for_exchange() const { wait_in_flight(); }
  // For tests: the fragments' tensors.
  std::vector<std::vector<size_t>> fragment_tensors() const;

 private:
  struct Fragment {
    std::vector<size_t> tensors;
    size_t numel = 0;
    std::unique_ptr<OuterExchange> exchange;
    std::vector<float> global;    // theta_g
    std::vector<float> momentum;  // m
    uint64_t synced_at = 0;       // the inner step at which it last landed
  };
  // The exchange sent and not yet merged.
  struct InFlight {
    int fragment = -1;
    uint64_t land_at = 0;
    std::vector<float> delta;  // this rank's outer gradient; the mean once done
    std::vector<float> sent;   // theta when sent (delay > 0)
    // The round's last fragment, when the caller's state is carried (carry_broadcast):
    // this rank's state when sent, rank 0's once the exchange is done.
    bool carries = false;
    Bytes carried;
    uint64_t wire = 0, contributed = 0;  // the exchange's traffic, once done
  };
  using Clock = std::chrono::steady_clock;

  void gather(const Fragment& f, const FloatSpans& params, std::vector<float>& out) const;
  void send(int fragment, const FloatSpans& params);
  // Waits for the exchange in flight; idempotent. An exchange that failed (a collective, or
  // a codec that refused some rank's outer gradient, on every rank alike) is not merged:
  // the strategy keeps its cause in failed_ and throws it, now and at every later call.
  void wait_in_flight() const;
  // Throws failed_, if set.
  void check_not_failed() const;
  void land(const FloatSpans& params);
  // Auto: times the step; once probed, agrees and fixes the schedule.
  void probe();
  void resolve_auto(double step_seconds);
  // The least H auto chooses: kAutoMinInnerSteps, or F for sparseloco.
  uint64_t auto_min_inner_steps() const;

  comm::Collectives& collectives_;
  DiLoCoOptions options_;
  // The model's parameters where they were at the last after_update() (or
  // follow_parameters()): finish() writes them. Never kept from start(): a parameter's
  // storage may change between steps.
  FloatSpans params_;
  Schedule schedule_;
  bool scheduled_ = false;  // H is known (given, or auto resolved)
  std::vector<Fragment> fragments_;
  mutable InFlight in_flight_;
  mutable bool exchange_running_ = false;  // sent to the executor, not yet waited for
  // Why an exchange failed ("" while none has): the ranks' theta_g may then differ, so the
  // job cannot go on (every later call throws it).
  mutable std::string failed_;
  // failed_ came from a failure every rank met alike with its collectives complete (a codec
  // refused some rank's outer gradient, or the mean was non-finite): load_state() may go on.
  mutable bool failed_in_step_ = false;
  mutable bool failed_by_timeout_ = false;  // thrown as the TimeoutError it was
  uint64_t steps_ = 0;
  uint64_t exchanges_ = 0;
  uint64_t last_sync_step_ = 0;
  bool just_synchronized_ = false;
  mutable TrafficStats traffic_;
  size_t numel_ = 0;
  std::vector<double> probe_seconds_;
  Clock::time_point last_update_;
  std::vector<CodecDecision> decisions_;
  std::function<void(Bytes&)> pack_;  // carry_broadcast(); empty: nothing carried
  std::function<void(const Bytes&)> unpack_;
  std::unique_ptr<InOrderExecutor> executor_;  // last: destroyed (joined) first
};

}  // namespace gradwire::strategy::diloco
