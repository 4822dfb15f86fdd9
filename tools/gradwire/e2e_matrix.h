// `gradwire bench e2e`: the matrix of runs (systems x configurations x models x bandwidths),
// the command line of each run, and what is read back from its metrics file.
//
// Every run is one `gradwire cluster` invocation (emulated hosts, shaped links) of either
// `gradwire train --worker` or the DDP peer (bench/peers/ddp_peer.py); both write the same
// metrics JSON Lines. A configuration is written
//   ddp:HOOK                  DDP with hook allreduce, fp16, bf16 or powersgd
//   ddp:powersgd:rank=R,start=N[,buckets=ddp]  PowerSGD of rank R (2) after N dense steps
//                             (-1: a tenth of the run, as DDP's documentation advises), in
//                             one bucket, or in DDP's buckets one after the other
//   ddp:localsgd:period=H,warmup=W  PyTorch's local SGD
//   ps:UPDATER[:CONSISTENCY]  gradwire on one parameter server (its own host) with UPDATER
//                             (ddc-asgd, dc-asgd, ...) under CONSISTENCY (default asp)
//   gossip:TRIGGER            gradwire gossip (ring, pairwise) with TRIGGER (every, period:K,
//                             adaptive[:...]); gossip-wait:TRIGGER: with --gossip-wait
//   SPEC                      gradwire allreduce with codec SPEC (none, fp16, hylo, ...)
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace gradwire::cli::e2e {

// The default matrix's configurations: DDP's baselines (PowerSGD configured as gradwire's),
// then gradwire's exact codecs, its PowerSGD and its default (auto).
std::vector<std::string> default_configs();

// The values of its metric a run is timed to: `steep`, in the steep part of the curve where
// methods differ by how fast they learn (cnn: 0.85), and `plateau`, the value a finished run
// holds (cnn: 0.88), which noisy curves cross late and unevenly. The classifiers' metric is
// test accuracy (fractions in (0, 1), higher is better), gpt's the validation loss in nats
// per character (lower is better: the steep target is the higher loss).
struct Targets {
  double steep = 0;
  double plateau = 0;
  std::string metric = "test_accuracy";
  bool higher_is_better = true;
  bool reached(double value, double target) const {
    return higher_is_better ? value >= target : value <= target;
  }
  // "88.00%" or "1.6000"
  std::string show(double value) const;
};

// The metric of a built-in model ("test_accuracy", or "val_loss" for gpt).
bool measured_by_loss(const std::string& model);

// Training samples of a model: Fashion-MNIST's 60000 images, or gpt's windows of the
// corpus's training text (read from `corpus`), at most `limit` when > 0.
size_t train_samples(const std::string& model, size_t limit, const std::string& corpus);

struct Settings {
  int hosts = 4;
  std::vector<std::string> bandwidths;  // tc notation; "unlimited" allowed
  std::vector<std::string> models;
  std::vector<std::string> configs;
  int epochs = 3;
  // Seeds of each configuration, run in rounds: round r runs every configuration (and the
  // compute floor) with seed `seed + r - 1` before round r + 1 starts, so that the machine's
  // drift over hours hits every configuration alike (A B A B, not A A B B).
  int seeds = 1;
  int batch_size = 64;
  int accumulate = 1;  // micro-batches per step (--accumulate of both sides)
  // Given: passed to every run; unset: each model's recipe (train/recipe.h), which the DDP
  // peer reproduces (SGD with momentum 0.9 at 0.05; gpt AdamW at 0.005, warm-up, cosine).
  std::optional<double> lr;
  std::optional<double> momentum;
  // Momentum of the asynchronous (ps) configurations: 0.9 diverges with 4 asynchronous
  // workers (implicit momentum, docs/PARAMETER_SERVER.md); 0.6 is the documented setting.
  double async_momentum = 0.6;
  uint64_t seed = 0;
  size_t eval_every = 0;  // 0: a quarter of an epoch
  size_t train_limit = 0;
  size_t test_limit = 0;
  std::map<std::string, Targets> targets;     // model -> values of its metric to time
  std::map<std::string, size_t> train_sizes;  // model -> training samples (train_samples())
  // Where the initial weights of the models the DDP peer cannot draw itself (gpt) are, one
  // file per model and seed (initial_weights_path); the bench writes them before the runs.
  std::string weights_dir;
  bool compute_floor = true;  // also run `none` unshaped per model and seed
  // Non-empty: every run but the parameter server's and gossip's (the floor's included)
  // records its timeline (`gradwire train --timeline`, the Python peer's --timeline) to
  // timeline_dir/<run id>.trace.json.
  std::string timeline_dir;
  // Every process of every run computes in flush-to-zero mode (`gradwire train
  // --flush-denormal`, the Python peer's torch.set_flush_denormal): CPU timings without
  // the slow path of subnormal floats, for gradwire and PyTorch alike.
  bool flush_denormal = false;
  double run_timeout_s = 7200;
};

// "0.88", "88" or "cnn=0.88,cnn-wide=89": an accuracy for every model of `models`
// (fractions or percent); with `loss`, a loss ("1.6", "gpt=1.6": a positive number).
// `option` names the flag in errors.
std::map<std::string, double> parse_targets(const std::string& text,
                                            const std::vector<std::string>& models,
                                            const std::string& option, bool loss = false);

// The file of a model's initial weights for a seed under settings.weights_dir (empty for the
// models the peer draws from the seed itself).
std::string initial_weights_path(const Settings& settings, const std::string& model, uint64_t seed);

struct Config {
  std::string name;  // as written in --configs
  // "gradwire" (gradwire train), "ddp" (the DDP peer) or "python" (the Python module's
  // DiLoCo in the same peer's plain PyTorch loop: python:diloco:...)
  std::string system;
  std::string hook;               // ddp: allreduce, fp16, bf16, powersgd, localsgd, gradwire
  int powersgd_rank = 2;          // ddp:powersgd: matrix_approximation_rank
  long long powersgd_start = -1;  // ddp:powersgd: start_powerSGD_iter (-1: a tenth)
  // ddp:powersgd:buckets=one (the whole model in one bucket) or ddp (DDP's buckets, each
  // bucket's hook after the one before: the peer's bucket_order.py)
  std::string powersgd_buckets = "one";
  // ddp:localsgd:period=H,warmup=W: PyTorch's local SGD (the peer's local_updates.py),
  // the models averaged every H steps after W steps of gradient allreduce.
  long long localsgd_period = 10, localsgd_warmup = 0;
  std::string codec;  // gradwire allreduce: the --compressor spec;
                      // ddp:gradwire-CODEC: the hook's codec
  // CODEC+PATH (gradwire's allreduce and ddp:gradwire-CODEC+PATH): the quantized path
  // (ring, reduce-scatter or auto), --quantized-path; empty: the default (auto).
  std::string quantized_path;
  std::string updater, consistency;  // ps
  std::string gossip_trigger;        // gossip: every, period:K, adaptive (ring topology)
  bool gossip_wait = false;          // gossip-wait:TRIGGER: --gossip-wait
  // diloco:inner_steps=H,fragments=F,delay=TAU,outer_lr=..,outer_momentum=..,outer_warmup=W,
  // epochs=E,batch=B,lr=LR[/CODEC]: `gradwire train --strategy diloco` with those flags (H
  // may be auto) and CODEC as the outer gradient's --compressor (none when left out).
  // epochs=E trains E epochs instead of the matrix's (its schedule spans them): local steps
  // trade steps for bytes, and time to the target is what is compared. batch=B and lr=LR
  // are the inner optimizer's per-rank batch and learning rate instead of the matrix's (the
  // DiLoCo papers' larger batch: the same epochs are then fewer steps, evaluated as often in
  // samples as the matrix's runs).
  std::vector<std::string> diloco_flags;
  int epochs = 0;            // 0: the matrix's
  int batch_size = 0;        // 0: the matrix's
  std::optional<double> lr;  // unset: the matrix's
  bool ps() const { return !updater.empty(); }
  bool gossip() const { return !gossip_trigger.empty(); }
  bool diloco() const { return !diloco_flags.empty(); }
  // Runs bench/peers/ddp_peer.py (PyTorch), not gradwire train.
  bool runs_peer() const { return system == "ddp" || system == "python"; }
};

// ConfigError for an unknown hook, updater, consistency or codec, before any run starts.
Config parse_config(const std::string& text);

struct Run {
  int index = 0;  // 1-based position in the matrix
  Config config;
  std::string model;
  std::string bandwidth;
  int repeat = 1;      // its round, 1..seeds: it trains with seed settings.seed + repeat - 1
  bool floor = false;  // the model's compute floor (none, unshaped) of its round
  std::string id;      // file-name stem: e.g. "cnn-100mbit-gradwire-hylo-r1"
  int hosts = 0;       // emulated hosts (workers, plus one for a parameter server)
  int workers = 0;
};

// Round by round (seed by seed): each round the floors first (one per model), then model x
// bandwidth x config, in that nesting.
std::vector<Run> build_matrix(const Settings& settings);

// Steps of one worker per epoch (DistributedSampler's shard in batches of batch_size x
// accumulate).
size_t steps_per_epoch(const Settings& settings, const std::string& model, int workers);

// A run's per-rank batch (its configuration's batch=B, else the matrix's) and epochs.
int run_batch_size(const Settings& settings, const Run& run);
int run_epochs(const Settings& settings, const Run& run);
// Steps of one of a run's workers per epoch, at the run's batch.
size_t run_steps_per_epoch(const Settings& settings, const Run& run);

// The program and arguments each rank of `run` executes. `self` is the gradwire
// executable, `peer` bench/peers/ddp_peer.py; the metrics go to `metrics`.
std::vector<std::string> run_command(const Settings& settings, const Run& run,
                                     const std::string& self, const std::string& peer,
                                     const std::string& metrics);
// Environment for the cluster process (parameter-server roles), as NAME=value.
std::vector<std::string> run_environment(const Run& run);

// What a finished run's metrics file says.
struct Outcome {
  bool complete = false;                         // a summary line was found
  std::string codec;                             // the codec in use, as the run printed it
  std::vector<std::pair<double, double>> evals;  // (train_s, the metric)
  std::optional<double> time_to_steep_s;   // when it first reached Targets::steep (crossing_time)
  std::optional<double> time_to_target_s;  // and Targets::plateau
  double final_quality = 0;                // the metric at the end
  double train_s = 0;
  double bytes_per_step = 0;           // contributed per worker per step (codec output)
  double wire_bytes_per_step = 0;      // put on the network per worker per step (0: unknown)
  double bytes_received_per_step = 0;  // pulled per worker per step (parameter server)
  size_t last_step = 0;                // progress so far
};

// When a run's metric first reached `target`, from its evaluations (train_s, the metric)
// in order: interpolated linearly in training time between the evaluation before and the
// first that reached it. Evaluations are a fixed number of steps apart, so one taken at
// the first evaluation that reaches the target would favour the configuration whose steps
// are short (it is evaluated more often in seconds); the crossing puts every configuration
// on one footing. The first evaluation's own time when it already reached it (nothing
// before it to interpolate from); nullopt when none did. results.csv says so in its
// "crossing" column ("interpolated"; earlier CSVs, without it, took the first evaluation).
std::optional<double> crossing_time(const std::vector<std::pair<double, double>>& evals,
                                    const Targets& targets, double target);

// Reads a metrics file (complete or still being written); a missing file is an empty
// outcome.
Outcome read_outcome(const std::string& metrics_path, Targets targets, int workers, int batch_size);

// The compute floor's training seconds by (model, round): each run is compared with the
// floor of its own round (the same seed, measured minutes apart).
using Floors = std::map<std::pair<std::string, int>, double>;

// Writes results.csv: one row per run (run order), the header first.
void write_csv(const std::string& path, const Settings& settings, const std::vector<Run>& runs,
               const std::map<int, Outcome>& outcomes, const std::map<int, std::string>& status,
               const Floors& floors, const std::string& runs_dir);

}  // namespace gradwire::cli::e2e
