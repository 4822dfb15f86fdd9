#include "gradwire/train/trainer.h"

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gradwire/comm/collectives.h"
#include "gradwire/core/atomic_file.h"
#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"
#include "gradwire/distributed_optimizer.h"
#include "gradwire/distributed_sampler.h"
#include "gradwire/strategy/registry.h"
#include "gradwire/train/job_output.h"
#include "gradwire/train/job_start.h"
#include "gradwire/train/recipe.h"
#include "gradwire/train/workload.h"

namespace gradwire::train {
namespace {

// Where an allreduce job stands between two steps: what its checkpoint keeps besides the
// model, the optimizer and the exchange state (DistributedOptimizer's), so that a resumed
// job goes on with the same data, the same epoch statistics and the same clock.
struct Position {
  int epoch = 1;
  size_t step = 0;  // the next step of the epoch
  size_t global_step = 0;
  size_t evaluated_step = 0;
  double quality = 0;  // the metric at the last evaluation
  double train_s = 0;
  double epoch_train_start = 0;  // train_s when the epoch began
  double loss_sum = 0;           // this rank's, over the epoch so far
  size_t samples = 0;

  std::string json() const {
    return nlohmann::json{{"epoch", epoch},
                          {"step", step},
                          {"global_step", global_step},
                          {"evaluated_step", evaluated_step},
                          {"quality", quality},
                          {"train_s", train_s},
                          {"epoch_train_start", epoch_train_start},
                          {"loss_sum", loss_sum},
                          {"samples", samples}}
        .dump();
  }

  // PayloadError for a position this job cannot be at (another data set or batch size).
  static Position parse(const std::string& text, size_t steps_per_epoch) {
    Position p;
    try {
      const auto j = nlohmann::json::parse(text);
      p.epoch = j.at("epoch").get<int>();
      p.step = j.at("step").get<size_t>();
      p.global_step = j.at("global_step").get<size_t>();
      p.evaluated_step = j.at("evaluated_step").get<size_t>();
      p.quality = j.at("quality").get<double>();
      p.train_s = j.at("train_s").get<double>();
      p.epoch_train_start = j.at("epoch_train_start").get<double>();
      p.loss_sum = j.at("loss_sum").get<double>();
      p.samples = j.at("samples").get<size_t>();
    } catch (const nlohmann::json::exception& e) {
      throw PayloadError(std::string("the checkpoint's training position is malformed: ") +
                         e.what());
    }
    if (p.epoch < 1 || p.step > steps_per_epoch ||
        p.global_step != (p.epoch - 1) * steps_per_epoch + p.step) {
      throw PayloadError("the checkpoint was taken at epoch " + std::to_string(p.epoch) +
                         ", step " + std::to_string(p.step) + " (" + std::to_string(p.global_step) +
                         " steps done), which does not fit " + std::to_string(steps_per_epoch) +
                         " steps per epoch: was it saved with other data or batch size?");
    }
    return p;
  }
};

std::string checkpoint_path(const TrainOptions& options) {
  return options.exchange.ps.checkpoint_dir.empty()
             ? ""
             : options.exchange.ps.checkpoint_dir + "/allreduce.ckpt";
}

// A checkpoint that cannot be written (a full disk) costs only itself: the previous one is
// intact, the job goes on, and rank 0 says so.
void save_checkpoint(DistributedOptimizer& optimizer, const std::string& path,
                     const Position& position, bool root) {
  try {
    optimizer.save_checkpoint(path, position.json());
  } catch (const SystemError& e) {
    if (root) {
      std::fprintf(stderr, "warning: %s; training goes on\n", e.what());
      std::fflush(stderr);
    }
  }
}

}  // namespace

void set_compute_threads(int threads) {
  if (threads < 1) throw ConfigError("--threads must be at least 1");
  at::set_num_threads(threads);
  at::set_num_interop_threads(threads);
}

void set_flush_denormal() {
  if (!at::globalContext().setFlushDenormal(true)) {
    throw ConfigError("--flush-denormal: this CPU has no flush-to-zero mode");
  }
}

void check_options(const TrainOptions& options) {
  if (options.epochs < 1) throw ConfigError("--epochs must be at least 1");
  if (options.batch_size < 1) throw ConfigError("--batch-size must be at least 1");
  const Recipe recipe = recipe_of(options);
  check_recipe(recipe);
  if (options.exchange.strategy == "ps" && recipe.optimizer != "sgd") {
    throw ConfigError("--strategy ps: the servers apply SGD; " + options.model + "'s recipe uses " +
                      recipe.optimizer + " (pass --optimizer sgd and an --lr)");
  }
}

TrainResult run_training(const TrainOptions& given, std::shared_ptr<Context> context_ptr) {
  TrainOptions options = given;
  options.exchange.compressor =
      strategy::codec_or_default(given.exchange.compressor, given.exchange.strategy);
  Context& context = *context_ptr;
  check_options(options);
  if (options.exchange.strategy == "ps") {
    if (!options.timeline_path.empty()) {
      throw ConfigError("--timeline records allreduce jobs; parameter-server jobs have none yet");
    }
    return run_ps_training(options, context_ptr);
  }
  if (options.exchange.strategy == "gossip") return run_gossip_training(options, context_ptr);
  if (!options.worker_speed.empty()) {
    throw ConfigError(
        "--worker-speed applies to --strategy ps (allreduce runs at the slowest "
        "worker's speed by construction)");
  }
  Job job = start_job(options, context_ptr);
  Workload& workload = *job.workload;
  DistributedOptimizer& optimizer = *job.optimizer;
  const Metric metric = workload.metric();
  if (context.is_root()) {
    std::printf("%d workers, %s\n", context.world_size(), describe_job(options, job).c_str());
    std::fflush(stdout);
  }

  DistributedSampler sampler(workload.train_size(), context.rank(), context.world_size(),
                             options.seed);
  const size_t steps = steps_per_epoch(sampler, job.step_samples);
  const ProgressStyle progress = context.is_root() ? options.progress : ProgressStyle::kNone;
  const size_t progress_every = options.progress == ProgressStyle::kTerminal
                                    ? std::max<size_t>(1, steps / 100)
                                    : std::max<size_t>(1, (steps + 3) / 4);

  // Where the job stands: at the start, or where its checkpoint says a previous attempt was.
  Position from;
  const std::string checkpoint = checkpoint_path(options);
  if (!checkpoint.empty()) {
    if (context.is_root()) make_directories(options.exchange.ps.checkpoint_dir);
    if (const auto saved = optimizer.load_checkpoint(checkpoint)) {
      from = Position::parse(*saved, steps);
      if (context.is_root()) {
        std::printf("resumed from %s: epoch %d, step %zu of %zu (%zu steps done)\n",
                    checkpoint.c_str(), from.epoch, from.step, steps, from.global_step);
        std::fflush(stdout);
      }
    }
  }
  MetricsFile metrics(context.is_root() ? options.metrics_path : "", from.global_step > 0);
  if (from.global_step > 0) {
    metrics.write({{"event", "resume"},
                   {"epoch", from.epoch},
                   {"step", from.global_step},
                   {"train_s", from.train_s},
                   {"attempt", options.restart_count}});
  }

  // Rank 0 evaluates while the clock is stopped; the others wait at the barrier, so no
  // rank counts the evaluation as training time. What it evaluates is the model the ranks
  // agree on: DiLoCo's as last synchronized, not rank 0's own between rounds (the papers'
  // protocol: a user keeps the synchronized model).
  TrainingClock clock;
  clock.bank(from.train_s);
  size_t global_step = from.global_step, evaluated_step = from.evaluated_step;
  double quality = from.quality;
  const auto evaluate_now = [&](int epoch) {  // with the clock paused
    TimelineSpan span("evaluate", "evaluate");
    if (context.is_root()) {
      optimizer.with_synchronized_model(
          [&] { quality = workload.evaluate(idle_machine_threads()); });
      metrics.write({{"event", "eval"},
                     {"epoch", epoch},
                     {"step", global_step},
                     {"train_s", clock.seconds()},
                     {metric.name, quality}});
    }
    context.barrier();
    evaluated_step = global_step;
  };

  // DiLoCo's exchange in flight runs on while the clock is paused (an evaluation, a
  // checkpoint): a barrier on the clock first lands it (its turn comes before the
  // barrier's), so no exchange time hides in time that is not counted as training.
  const bool exchange_in_flight_possible = optimizer.diloco_summary().has_value();
  const auto settle_exchange = [&] {
    if (exchange_in_flight_possible) context.barrier();
  };

  if (!options.timeline_path.empty()) {
    Timeline::global().enable(context.rank());
    Timeline::global().name_thread("training");
    context.barrier();  // every rank's time 0 is this moment, up to the barrier's skew
    Timeline::global().set_origin(Timeline::Clock::now());
  }

  TrainResult result;
  const auto job_start = Clock::now();
  nlohmann::json last;
  for (int epoch = from.epoch; epoch <= options.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    clock.resume();
    const bool resumed_epoch = epoch == from.epoch && from.step > 0;
    const double epoch_train_start = resumed_epoch ? from.epoch_train_start : clock.seconds();
    double loss_sum = resumed_epoch ? from.loss_sum : 0;
    size_t samples = resumed_epoch ? from.samples : 0;
    for (size_t step = resumed_epoch ? from.step : 0; step < steps; ++step) {
      if (options.before_step) options.before_step(global_step);
      const StepDone done = take_step(job, batch_of(sampler, step, job.step_samples), global_step);
      for (const auto& decision : optimizer.take_codec_decisions()) {
        if (!context.is_root()) continue;
        nlohmann::json line = nlohmann::json::parse(decision.inputs_json);
        line["event"] = "codec";
        line["epoch"] = epoch;
        line["train_s"] = clock.seconds();
        metrics.write(line);
        if (progress != ProgressStyle::kNone) {
          std::printf("%sstep %llu: codec %s (%s)\n",
                      progress == ProgressStyle::kTerminal ? "\n" : "",
                      static_cast<unsigned long long>(decision.step), decision.plan.c_str(),
                      decision.reason.c_str());
          std::fflush(stdout);
        }
      }
      ++global_step;
      loss_sum += done.loss_sum;
      samples += done.samples;
      if ((step + 1) % progress_every == 0 || step + 1 == steps) {
        print_progress(progress, epoch, options.epochs, step + 1, steps, loss_sum / samples,
                       samples * context.world_size() / (clock.seconds() - epoch_train_start));
      }
      if (options.eval_every > 0 && global_step % options.eval_every == 0 && step + 1 < steps) {
        settle_exchange();
        clock.pause();
        evaluate_now(epoch);
        clock.resume();
      }
      if (!checkpoint.empty() && options.exchange.ps.checkpoint_every > 0 &&
          global_step % options.exchange.ps.checkpoint_every == 0) {
        settle_exchange();
        clock.pause();
        Position now{epoch,           step + 1,          global_step, evaluated_step, quality,
                     clock.seconds(), epoch_train_start, loss_sum,    samples};
        save_checkpoint(optimizer, checkpoint, now, context.is_root());
        clock.resume();
      }
    }
    if (progress == ProgressStyle::kTerminal) std::printf("\n");
    // DiLoCo's ranks train apart between rounds: the job ends with one model on every
    // rank (a collective, counted as training), and that model is evaluated.
    if (epoch == options.epochs && optimizer.diloco_summary()) {
      optimizer.finish();
      evaluated_step = static_cast<size_t>(-1);
    }
    settle_exchange();
    // Evaluation and the epoch's bookkeeping are not training time.
    clock.pause();
    const double train_s = clock.seconds() - epoch_train_start;
    if (evaluated_step != global_step) evaluate_now(epoch);

    const auto traffic = optimizer.traffic();
    const auto losses = context.allgather(loss_sum / std::max<size_t>(1, samples));
    const auto sum_over_ranks = [&](uint64_t value) {
      double total = 0;
      for (double v : context.allgather(static_cast<double>(value))) total += v;
      return static_cast<uint64_t>(total);
    };
    result.bytes_contributed = sum_over_ranks(traffic.bytes_contributed);
    result.bytes_on_wire = sum_over_ranks(traffic.bytes_on_wire);
    result.bytes_dense = sum_over_ranks(traffic.bytes_dense);
    result.bytes_dense_on_wire = sum_over_ranks(traffic.bytes_dense_on_wire);
    double mean_loss = 0;
    for (int r = 0; r < context.world_size(); ++r) mean_loss += losses[r] / context.world_size();
    last = {{"epoch", epoch},
            {"train_loss", mean_loss},
            {metric.name, quality},
            {"elapsed_s", seconds_since(job_start)},
            {"train_s", clock.seconds()},
            {"steps", global_step},
            {"samples_per_s", samples * context.world_size() / train_s},
            {"bytes_contributed", result.bytes_contributed},
            {"bytes_on_wire", result.bytes_on_wire},
            {"bytes_dense", result.bytes_dense},
            {"bytes_dense_on_wire", result.bytes_dense_on_wire}};
    nlohmann::json line = last;
    line["event"] = "epoch";
    metrics.write(line);
    if (context.is_root()) {
      std::printf(
          "epoch %d/%d: train_loss %.4f %s %.1f s on the wire %.2f MB (%.4f of dense fp32's)\n",
          epoch, options.epochs, mean_loss, metric.show(quality).c_str(), train_s,
          result.bytes_on_wire / 1e6, result.wire_ratio());
      std::fflush(stdout);
    }
    result.metric = metric.name;
    result.quality = quality;
    result.train_loss = mean_loss;
  }
  result.train_s = clock.seconds();
  result.elapsed_s = seconds_since(job_start);

  if (!options.timeline_path.empty()) {
    const std::string mine = Timeline::global().events_json();
    const auto all = context.collectives().allgather_bytes(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(mine.data()), mine.size()));
    if (context.is_root()) {
      std::vector<std::string> per_rank;
      for (const auto& bytes : all) per_rank.emplace_back(bytes.begin(), bytes.end());
      const std::string trace = Timeline::trace_json(per_rank);
      write_file_atomically(
          options.timeline_path,
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(trace.data()), trace.size()));
    }
  }

  // Checksums travel after the traffic figures were taken, so they are not counted.
  const std::string checksum = parameter_checksum(workload.model());
  const auto all = context.collectives().allgather_bytes(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(checksum.data()), checksum.size()));
  nlohmann::json checksums = nlohmann::json::array();
  for (const auto& bytes : all) {
    checksums.push_back(std::string(bytes.begin(), bytes.end()));
    result.checksums_equal = result.checksums_equal && checksums.back() == checksum;
  }
  nlohmann::json summary = last;
  summary["event"] = "summary";
  summary["elapsed_s"] = result.elapsed_s;
  summary["workers"] = context.world_size();
  summary["strategy"] = options.exchange.strategy;
  summary["compressor"] = options.exchange.compressor;
  summary["codec"] = optimizer.codec_spec();
  summary["bucket_layout"] = optimizer.bucket_layout();
  summary.update(job_fields(options, job));
  if (const auto d = optimizer.diloco_summary()) {
    summary["diloco"] = {
        {"inner_steps", d->inner_steps},
        {"outer_lr", options.exchange.diloco.outer_lr},
        {"outer_momentum", options.exchange.diloco.outer_momentum},
        {"outer_warmup", options.exchange.diloco.outer_warmup},
        {"delay", d->delay},
        {"fragments", d->fragments},
        {"outer_steps", d->outer_steps},
        {"exchanges", d->exchanges},
        {"bytes_on_wire", d->bytes_on_wire},
        {"bytes_per_outer_step",
         d->outer_steps ? static_cast<double>(d->bytes_on_wire) / d->outer_steps : 0.0}};
  }
  summary["param_checksums"] = checksums;
  metrics.write(summary);
  if (context.is_root()) {
    std::printf(
        "summary: %d workers, %s, compressor %s: %s, %.1f s, "
        "bytes_on_wire/bytes_dense_on_wire %.4f, ranks' parameters %s\n",
        context.world_size(), options.model.c_str(), options.exchange.compressor.c_str(),
        metric.show(result.quality).c_str(), result.elapsed_s, result.wire_ratio(),
        result.checksums_equal ? "identical" : "DIFFER");
    std::fflush(stdout);
  }
  return result;
}

}  // namespace gradwire::train
