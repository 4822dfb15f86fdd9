// The built-in job (`gradwire train`): one rank's training loop.
//
// Every rank trains on its DistributedSampler shard of the workload (workload.h: a model,
// its data and its metric); rank 0 evaluates the metric (test accuracy, or gpt's
// validation loss) after each epoch (and every eval_every steps), prints progress and a summary,
// and writes the metrics file (JSON Lines, see docs/ARCHITECTURE.md): an "eval" line per
// evaluation, an "epoch" line per epoch and a final "summary" line with one parameter checksum per
// rank (equal checksums = bitwise-equal models).
//
// Training time (`train_s`) excludes evaluation. Allreduce: the clock stops while rank 0
// evaluates and the others wait at a barrier. Parameter servers (asynchronous workers that
// cannot all be paused without changing the algorithm): with eval_every the chief keeps a
// copy of its model at each evaluation point and evaluates the copies after training.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "gradwire/context.h"
#include "gradwire/distributed_optimizer.h"

namespace gradwire::train {

enum class ProgressStyle { kNone, kLines, kTerminal };

struct TrainOptions {
  std::string model = "cnn";
  // How gradients are exchanged (strategy, codec, buckets, overlap, link model, the
  // parameter servers' and gossip's options), as DistributedOptimizer takes them. The
  // compressor empty: the strategy's default. Strategy "ps" gets its sample budget from
  // the epochs below.
  DistributedOptions exchange;
  int epochs = 3;
  int batch_size = 32;  // per worker (per micro-batch with accumulate > 1)
  // How to optimize: what is not set here is the model's recipe (recipe.h: SGD with
  // momentum 0.9 at 0.05 for the classifiers; AdamW, warm-up and cosine, clipping for gpt).
  std::optional<std::string> optimizer;  // sgd | adamw
  std::optional<double> lr, momentum, weight_decay;
  std::optional<std::string> lr_schedule;  // constant | cosine
  std::optional<double> warmup;            // a fraction of the run's steps
  std::optional<double> clip_norm;         // 0: none
  int accumulate = 1;                      // micro-batches per step (no_sync for all but one)
  uint64_t seed = 0;
  std::string data_dir;  // empty: Debian's Fashion-MNIST location
  std::string corpus;    // gpt's text; empty: text_corpus.h's kBibleCorpusPath
  // > 0: use only the first N training samples (gpt: windows of its context + 1 bytes)
  size_t train_limit = 0;
  // > 0: evaluate on N samples (gpt: N windows spread over the validation text; default
  // 256); 0: the whole test set
  size_t test_limit = 0;
  // > 0: evaluate on the test set every eval_every steps of a worker (for parameter servers:
  // every eval_every x batch_size x workers samples of the job), so time to accuracy has a
  // finer resolution than an epoch. Epoch ends are always evaluated.
  size_t eval_every = 0;
  std::string metrics_path;  // empty: no metrics file
  // Non-empty (strategy allreduce): every rank records a timeline (core/timeline.h) and
  // rank 0 writes them all to this file at the end, as Chrome trace-event JSON.
  std::string timeline_path;
  ProgressStyle progress = ProgressStyle::kLines;
  // Per-worker speed, to make staleness real on one machine: "" (all 1), a list
  // "1,1,1,0.25" (one per worker), or "random:SEED" (uniform in [0.25, 1]). A worker of
  // speed s sleeps (1/s - 1) x its compute time after each step's computation.
  std::string worker_speed;
  // Called on every rank before each of its training steps with the step's number
  // (allreduce and gossip: the job's steps done, a resumed job counting on from its
  // checkpoint; ps: this worker's steps). A seam for fault injection: the tests' build of
  // the command-line tool makes a chosen worker exit abruptly here (tools/gradwire/
  // train_command.cc, GRADWIRE_FAULT_INJECTION); the shipped tool sets nothing.
  std::function<void(uint64_t step)> before_step;
  // Strategy allreduce: with checkpoint_dir (ps.checkpoint_dir, `--checkpoint-dir`), rank 0
  // writes DIR/allreduce.ckpt every checkpoint_every (ps.checkpoint_every) steps, and a
  // job started on a directory that holds one resumes from it (DistributedOptimizer::
  // load_checkpoint: the same model, optimizer, exchange state, epoch and step).
  // Which attempt of a restarted job this is (TORCHELASTIC_RESTART_COUNT, from the CLI).
  int restart_count = 0;
};

struct TrainResult {
  // The workload's metric at the end (workload.h: "test_accuracy" or "val_loss").
  std::string metric;
  double quality = 0;
  double train_loss = 0;
  double elapsed_s = 0;
  double train_s = 0;  // training time, evaluation excluded
  // Over all ranks (TrafficCounters: contributed, on the wire, and both for dense fp32).
  uint64_t bytes_contributed = 0;
  uint64_t bytes_on_wire = 0;
  uint64_t bytes_dense = 0;
  uint64_t bytes_dense_on_wire = 0;
  bool checksums_equal = true;

  // On the wire against dense fp32 on the wire: the traffic figure to compare runs by.
  double wire_ratio() const {
    return bytes_dense_on_wire ? static_cast<double>(bytes_on_wire) / bytes_dense_on_wire : 0.0;
  }
};

struct Recipe;
// The model's recipe with what `options` sets instead (recipe.h).
Recipe recipe_of(const TrainOptions& options);

// ConfigError naming the option when `options` cannot make a job (checked by
// run_training, and by the launcher before it starts any worker).
void check_options(const TrainOptions& options);

// Sets libtorch's intra-op threads (and inter-op threads, which must happen before any
// parallel work starts) for this process.
void set_compute_threads(int threads);

// Puts this thread's floating-point unit in flush-to-zero and denormals-are-zero mode
// (libtorch's set_flush_denormal; x86 with SSE3 only, else ConfigError). Threads started
// afterwards inherit the mode. gradwire never sets it by itself: it changes the caller's
// arithmetic (a subnormal result or operand becomes zero). `gradwire train
// --flush-denormal` asks for it, e.g. to time CPU runs without the slow path a CPU takes
// on subnormal floats (a GPU's float kernels do not take one).
void set_flush_denormal();

// Runs this rank's part of the job. All ranks must call it with the same options.
TrainResult run_training(const TrainOptions& options, std::shared_ptr<Context> context);

// run_training for strategy "ps" (ps_training.cc).
TrainResult run_ps_training(const TrainOptions& options, std::shared_ptr<Context> context);

// run_training for strategy "gossip" (gossip_training.cc).
TrainResult run_gossip_training(const TrainOptions& options, std::shared_ptr<Context> context);

// This worker's speed in (0, 1] from TrainOptions::worker_speed; ConfigError if malformed.
double worker_speed(const std::string& spec, int rank, int workers);

}  // namespace gradwire::train
