// Server-side updaters of the parameter server: what the server does with one push (the
// gradient of one worker) to the weights it owns. Torch-free; weights, gradients and state
// are fp32.
//
// The model is cut into slices (the server's unit of storage, one tensor or a part of
// one); an Updater is built for a fixed list of slice sizes and a fixed number of workers.
// A push of worker m, computed from the model version the server had `tau` versions ago
// (its staleness), brings for each slice it covers the gradient g and the backup b = w_bak(m),
// the weights worker m computed g at (the server keeps it; delay-compensated kinds read it).
//
// Per coordinate i, with w the weights before this push, v the momentum buffer of the
// slice (starts at 0), mu the momentum, wd the weight decay and lr the learning rate:
//
//   sgd             d = g + wd w;                           v = mu v + d;  w -= lr v
//                   (torch::optim::SGD, dampening 0, no Nesterov, in fp32 with the same
//                   operations: d_p = g + wd w; buf = mu buf + d_p; w = w - lr buf)
//   asgd-staleness  d = (g + wd w) / max(1, tau);           v = mu v + d;  w -= lr v
//                   (staleness-aware ASGD, Zhang et al. 2016: lr_tau = lr / max(1, tau))
//   dc-asgd         d = g + wd w + lambda g^2 (w - b);      v = mu v + d;  w -= lr v
//                   (DC-ASGD-c, Zheng et al. 2017: first-order Taylor term of g(w) around b
//                   with the diagonal of g g^T approximating the Hessian)
//   dc-asgd-a       MS_m = ms_decay MS_m + (1 - ms_decay) g^2   (per worker m, starts at 0)
//                   lam_i = lambda0 / sqrt(MS_m,i + eps)
//                   d = g + wd w + lam g^2 (w - b);         v = mu v + d;  w -= lr v
//                   (DC-ASGD-a, Zheng et al. 2017)
//   ddc-asgd        dynamic delay compensation. With tau_bar, an EMA of the staleness that
//                   starts at num_workers - 1 (the staleness of round-robin ASGD):
//                     a   = min(1, (tau_bar + 1) / (tau + 1))      damps late gradients
//                     f   = min(1, (2 tau_bar + 1) / max(tau, 1))  damps the compensation
//                     MS_m as dc-asgd-a;  c_i = lambda0 / sqrt(MS_m,i + eps) f g^2 (w - b)
//                     per slice: if ||c||_2 > ||g||_2 then c *= ||g||_2 / ||c||_2
//                     mu_t = 1 - a (1 - mu)                    (a = 1: mu_t = mu)
//                     v = mu_t v + a (g + wd w + c);  w -= lr v
//                   and after all slices of the push:
//                     tau_bar = tau_bar_decay tau_bar + (1 - tau_bar_decay) tau.
//                   With tau <= tau_bar (a = f = 1) and no clipping it is dc-asgd-a.
//
// sgd and dc-asgd ignore the staleness; sgd and asgd-staleness ignore the backup.
// Compensation terms use w as it is before the push. w, v and MS are fp32 and the maths
// per coordinate is in fp32; norms are accumulated in double.
//
// State (state_bytes()), with N the total number of coordinates (sum of slice sizes) and M
// the number of workers: 4 N bytes of momentum buffers, plus 4 N M bytes of MS for
// dc-asgd-a and ddc-asgd (one fp32 per coordinate per worker), plus O(1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradwire/core/bytes.h"

namespace gradwire::strategy::ps {

enum class UpdaterKind { kSgd, kAsgdStaleness, kDcAsgd, kDcAsgdAdaptive, kDdcAsgd };

struct UpdaterOptions {
  UpdaterKind kind = UpdaterKind::kSgd;
  double lr = 0.05;
  double momentum = 0.9;  // mu (ddc-asgd's mu0)
  double weight_decay = 0;
  double lambda = 0.04;         // dc-asgd (constant)
  double lambda0 = 2.0;         // dc-asgd-a, ddc-asgd
  double ms_decay = 0.95;       // MS = d MS + (1-d) g.g
  double eps = 1e-7;            // dc-asgd-a, ddc-asgd: lam = lambda0 / sqrt(MS + eps)
  double tau_bar_decay = 0.99;  // ddc-asgd

  // "sgd", "asgd-staleness", "dc-asgd[:lambda=..]",
  // "dc-asgd-a[:lambda0=..,ms_decay=..,eps=..]",
  // "ddc-asgd[:lambda0=..,ms_decay=..,eps=..,tau_bar_decay=..]". Keys left out keep the
  // defaults above; lr, momentum and weight_decay are not spec keys (the caller sets them).
  // Throws ConfigError on an unknown name (listing the names), an unknown key (listing the
  // kind's keys) or a value out of range (see validate()).
  static UpdaterOptions parse(const std::string& spec);
  // Canonical spec: the name and every key of this kind, sorted; parse(spec()).spec() ==
  // spec(), and parse(spec()) has this kind's values exactly.
  std::string spec() const;
  // Throws ConfigError unless lr > 0, 0 <= momentum < 1, weight_decay >= 0, lambda >= 0,
  // lambda0 >= 0, 0 <= ms_decay < 1, eps > 0 and 0 <= tau_bar_decay < 1 (all finite).
  void validate() const;
};

// "sgd", "asgd-staleness", "dc-asgd", "dc-asgd-a", "ddc-asgd", in the order of UpdaterKind.
const std::vector<std::string>& updater_names();
const std::string& updater_name(UpdaterKind kind);
// Whether the kind reads SliceUpdate::backup (the delay-compensated ones).
bool reads_backup(UpdaterKind kind);

// The explicit momentum for W workers pushing asynchronously (SSP, ASP) that trains like
// `synchronous` does under BSP: asynchrony itself acts as momentum of about 1 - 1/W
// (Mitliagkas et al., "Asynchrony begets momentum", 2016), so the explicit part is what is
// left of it: max(0, synchronous - (1 - 1/W)). 0.9 with 4 workers gives 0.15; with 1 it
// stays 0.9. `gradwire train` uses it when --momentum is not given.
double asynchronous_momentum(double synchronous, int workers);

struct SliceUpdate {
  size_t slice;                     // index into the slice sizes given at construction
  std::span<float> weights;         // w, updated in place
  std::span<const float> gradient;  // g (already averaged over workers in BSP)
  // w_bak(m): the weights worker m computed g at, for this slice (same size). May be empty
  // for kinds that do not read it (reads_backup() false).
  std::span<const float> backup;
};

class Updater {
 public:
  // Throws ConfigError on invalid options (validate()) or num_workers < 1.
  Updater(UpdaterOptions options, std::vector<size_t> slice_sizes, int num_workers);

  // Applies one push of worker `worker` (0 <= worker < num_workers) computed `staleness`
  // versions ago. All slices of one push come in one call (per-push constants, and
  // ddc-asgd's tau_bar update, happen once per call); each slice at most once. Throws
  // ConfigError, before changing anything, on a worker or slice index out of range, a slice
  // given twice, or a span whose size is not the slice's.
  void apply(int worker, uint64_t staleness, std::span<const SliceUpdate> slices);

  // ddc-asgd's staleness EMA; starts at num_workers - 1 and only ddc-asgd moves it.
  double tau_bar() const { return tau_bar_; }
  const UpdaterOptions& options() const { return options_; }
  // The learning rate of the following pushes (a worker's LR schedule); ConfigError unless
  // positive and finite.
  void set_lr(double lr);
  const std::vector<size_t>& slice_sizes() const { return slice_sizes_; }
  int num_workers() const { return num_workers_; }

  // Checkpoint of all state: momentum buffers, MS per worker, tau_bar, with the canonical
  // spec, the number of workers and the slice sizes. Appends to `out`.
  void save(Bytes& out) const;
  // Restores what save() wrote. Throws PayloadError, leaving the state unchanged, on
  // truncated or corrupt bytes or a checkpoint of another kind, number of workers or slice
  // sizes. The options (lr, momentum, spec keys) stay this updater's own.
  void load(std::span<const uint8_t> bytes);

  // Bytes of state held: 4 N (momentum) + 4 N M for dc-asgd-a and ddc-asgd (MS).
  size_t state_bytes() const;

 private:
  void check_push(int worker, std::span<const SliceUpdate> slices) const;

  UpdaterOptions options_;
  std::vector<size_t> slice_sizes_;
  std::vector<size_t> offsets_;  // slice s starts at offsets_[s] in velocity_
  size_t total_ = 0;             // N = sum of slice sizes
  int num_workers_;
  std::vector<float> velocity_;     // v, N floats
  std::vector<float> mean_square_;  // MS, worker m's at [m N, (m+1) N); adaptive kinds only
  double tau_bar_;
};

}  // namespace gradwire::strategy::ps
