// The built-in job on parameter servers (`gradwire train --strategy ps`).
//
// Unlike allreduce, workers do not step together: the job is a budget of epochs x N
// samples that the servers count over all workers, so a fast worker trains more batches
// than a slow one and asynchronous runs finish sooner. Worker 0 (the chief) evaluates the
// model it holds each time the job-wide count crosses an epoch boundary, and at the end
// the servers' final model; it writes the metrics file. No collective runs after start, so
// the job goes on when a worker is lost (SSP, ASP, or BSP with --on-worker-loss continue).
//
// The other workers do not wait while the chief evaluates, so an evaluation during training
// would slow the chief alone. With --eval-every the chief instead keeps a copy of its model
// at every evaluation point and epoch boundary (train_s = wall time since the start, which
// then contains no evaluation) and evaluates the copies after training; the epoch lines are
// printed then. Without it, epochs are evaluated as they end and train_s includes them.
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <sstream>
#include <thread>

#include "gradwire/core/error.h"
#include "gradwire/distributed_optimizer.h"
#include "gradwire/distributed_sampler.h"
#include "gradwire/train/job_output.h"
#include "gradwire/train/job_start.h"

namespace gradwire::train {
namespace {

// Writes an epoch's metrics line and prints it (the metric is worker 0's model's).
void write_epoch_line(MetricsFile& metrics, const Metric& metric, const nlohmann::json& epoch,
                      int epochs, double epoch_s) {
  nlohmann::json line = epoch;
  line["event"] = "epoch";
  metrics.write(line);
  const double sent = epoch["bytes_on_wire"].get<double>();
  const double dense = epoch["bytes_dense_on_wire"].get<double>();
  std::printf(
      "epoch %d/%d: train_loss %.4f %s (worker 0's model) %.1f s pushed %.2f MB (%.4f of dense)\n",
      epoch["epoch"].get<int>(), epochs, epoch["train_loss"].get<double>(),
      metric.show(epoch[metric.name].get<double>()).c_str(), epoch_s, sent / 1e6,
      dense > 0 ? sent / dense : 0.0);
  std::fflush(stdout);
}

}  // namespace

double worker_speed(const std::string& spec, int rank, int workers) {
  if (spec.empty()) return 1.0;
  if (spec.rfind("random:", 0) == 0) {
    const std::string seed_text = spec.substr(7);
    char* end = nullptr;
    const unsigned long long seed = std::strtoull(seed_text.c_str(), &end, 10);
    if (seed_text.empty() || *end != '\0') {
      throw ConfigError("--worker-speed " + spec + ": expected random:SEED");
    }
    std::mt19937_64 random(seed);
    std::uniform_real_distribution<double> speed(0.25, 1.0);
    double mine = 1.0;
    for (int r = 0; r <= rank; ++r) mine = speed(random);
    return mine;
  }
  std::vector<double> speeds;
  std::istringstream in(spec);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(v > 0 && v <= 1)) {
      throw ConfigError("--worker-speed " + spec + ": '" + item + "' is not a speed in (0, 1]");
    }
    speeds.push_back(v);
  }
  if (static_cast<int>(speeds.size()) != workers) {
    throw ConfigError("--worker-speed " + spec + " gives " + std::to_string(speeds.size()) +
                      " speeds for " + std::to_string(workers) + " workers");
  }
  return speeds[rank];
}

TrainResult run_ps_training(const TrainOptions& options, std::shared_ptr<Context> context_ptr) {
  Context& context = *context_ptr;
  Job job = start_job(options, context_ptr);
  Workload& workload = *job.workload;
  torch::nn::Module& model = workload.model();
  const Metric metric = workload.metric();
  const uint64_t epoch_samples = workload.train_size();
  DistributedOptimizer& optimizer = *job.optimizer;

  const bool chief = context.is_root();
  JobProgress progress = optimizer.job_progress().value_or(JobProgress{});
  if (chief) {
    std::printf(
        "%d workers, parameter servers (%s, updater %s), %d epochs, %s%s\n", context.world_size(),
        options.exchange.ps.consistency.c_str(), options.exchange.ps.updater.c_str(),
        options.epochs, describe_job(options, job).c_str(),
        progress.samples ? (", resumed at " + std::to_string(progress.samples) + " samples").c_str()
                         : "");
    std::fflush(stdout);
  }
  if (job.speed < 1) {
    std::printf("worker %d runs at speed %.3g\n", context.rank(), job.speed);
    std::fflush(stdout);
  }

  DistributedSampler sampler(workload.train_size(), context.rank(), context.world_size(),
                             options.seed);
  int local_pass = 1;
  sampler.set_epoch(local_pass);
  size_t position = 0;
  const ProgressStyle style = chief ? options.progress : ProgressStyle::kNone;
  MetricsFile metrics(chief ? options.metrics_path : "");

  TrainResult result;
  const auto job_start = Clock::now();
  auto epoch_start = job_start;
  int epoch = static_cast<int>(progress.samples / epoch_samples) + 1;
  uint64_t boundary = static_cast<uint64_t>(epoch) * epoch_samples;
  uint64_t epoch_first_sample = progress.samples;
  double epoch_first_loss = progress.loss_sum;
  uint64_t next_print = progress.samples + epoch_samples / 4;
  nlohmann::json last;
  uint64_t steps = 0;

  // Deferred evaluation (--eval-every): the chief's model at each point, evaluated at the end.
  struct Snapshot {
    nlohmann::json event;  // "eval" line without its accuracy
    std::vector<torch::Tensor> parameters;
    std::optional<nlohmann::json> epoch_line;  // an epoch ended here: its line, accuracy to come
    double epoch_s = 0;
  };
  const bool deferred = options.eval_every > 0;
  const uint64_t eval_samples = static_cast<uint64_t>(options.eval_every) * job.step_samples *
                                static_cast<uint64_t>(context.world_size());
  uint64_t next_eval = deferred ? (progress.samples / eval_samples + 1) * eval_samples : 0;
  std::vector<Snapshot> snapshots;
  const auto snapshot = [&](std::optional<nlohmann::json> epoch_line, double epoch_s) {
    Snapshot taken;
    taken.event = {{"event", "eval"},
                   {"epoch", epoch},
                   {"step", progress.samples /
                                (static_cast<uint64_t>(job.step_samples) * context.world_size())},
                   {"samples", progress.samples},
                   {"train_s", seconds_since(job_start)}};
    taken.parameters = copy_parameters(model);
    taken.epoch_line = std::move(epoch_line);
    taken.epoch_s = epoch_s;
    snapshots.push_back(std::move(taken));
  };

  while (!progress.done) {
    if (options.before_step) options.before_step(steps);
    const auto& all = sampler.indices();
    if (position >= all.size()) {
      sampler.set_epoch(++local_pass);
      position = 0;
    }
    const size_t begin = position;
    const size_t end = std::min(all.size(), begin + job.step_samples);
    position = end;
    take_step(job, std::span<const size_t>(all.data() + begin, end - begin), steps);
    ++steps;
    progress = optimizer.job_progress().value_or(JobProgress{});

    if (chief && progress.samples >= next_print && progress.samples < boundary) {
      const uint64_t in_epoch = progress.samples - (boundary - epoch_samples);
      print_progress(style, epoch, options.epochs, in_epoch, epoch_samples,
                     (progress.loss_sum - epoch_first_loss) /
                         std::max<uint64_t>(1, progress.samples - epoch_first_sample),
                     (progress.samples - epoch_first_sample) / seconds_since(epoch_start));
      next_print = progress.samples + epoch_samples / 4;
    }
    while (chief && deferred && progress.samples >= next_eval && progress.samples < boundary) {
      snapshot(std::nullopt, 0);
      next_eval = (progress.samples / eval_samples + 1) * eval_samples;
    }
    while (chief && progress.samples >= boundary && epoch <= options.epochs) {
      if (style == ProgressStyle::kTerminal) std::printf("\n");
      const uint64_t n = std::max<uint64_t>(1, progress.samples - epoch_first_sample);
      const double mean_loss = (progress.loss_sum - epoch_first_loss) / n;
      last = {{"epoch", epoch},
              {"train_loss", mean_loss},
              {"elapsed_s", seconds_since(job_start)},
              {"train_s", seconds_since(job_start)},
              {"samples_per_s", n / seconds_since(epoch_start)},
              // A push goes to one server: what it contributes is what goes on the wire.
              {"bytes_contributed", progress.bytes_sent},
              {"bytes_on_wire", progress.bytes_sent},
              {"bytes_dense", progress.bytes_dense},
              {"bytes_dense_on_wire", progress.bytes_dense},
              {"bytes_received", progress.bytes_received}};
      if (deferred) {
        snapshot(last, seconds_since(epoch_start));
        next_eval = (progress.samples / eval_samples + 1) * eval_samples;
      } else {
        last[metric.name] = workload.evaluate();
        metrics.write({{"event", "eval"},
                       {"epoch", epoch},
                       {"step", progress.samples / (job.step_samples * context.world_size())},
                       {"samples", progress.samples},
                       {"train_s", seconds_since(job_start)},
                       {metric.name, last[metric.name]}});
        write_epoch_line(metrics, metric, last, options.epochs, seconds_since(epoch_start));
      }
      ++epoch;
      boundary += epoch_samples;
      epoch_first_sample = progress.samples;
      epoch_first_loss = progress.loss_sum;
      epoch_start = Clock::now();
      next_print = progress.samples + epoch_samples / 4;
    }
  }

  const auto summary = optimizer.finish();
  result.elapsed_s = seconds_since(job_start);
  result.train_s = result.elapsed_s;
  if (!chief) return result;

  // The chief now holds the servers' final model.
  result.metric = metric.name;
  result.quality = workload.evaluate(idle_machine_threads());
  if (!snapshots.empty()) {
    const std::vector<torch::Tensor> final_parameters = copy_parameters(model);
    for (auto& taken : snapshots) {
      load_parameters(model, taken.parameters);
      const double quality = workload.evaluate(idle_machine_threads());
      taken.event[metric.name] = quality;
      metrics.write(taken.event);
      if (taken.epoch_line) {
        (*taken.epoch_line)[metric.name] = quality;
        write_epoch_line(metrics, metric, *taken.epoch_line, options.epochs, taken.epoch_s);
        last = *taken.epoch_line;
      }
    }
    load_parameters(model, final_parameters);
  }
  const JobProgress& p = summary->progress;
  result.bytes_contributed = result.bytes_on_wire = p.bytes_sent;
  result.bytes_dense = result.bytes_dense_on_wire = p.bytes_dense;
  result.train_loss = last.value("train_loss", 0.0);
  nlohmann::json checksums = nlohmann::json::array();
  for (const auto& c : summary->checksums) checksums.push_back(c);
  if (options.exchange.ps.consistency == "bsp") {
    for (const auto& c : summary->checksums) {
      if (!c.empty() && c != summary->checksums[0]) result.checksums_equal = false;
    }
  }
  nlohmann::json out = last;
  out["event"] = "summary";
  out[metric.name] = result.quality;
  out["elapsed_s"] = result.elapsed_s;
  out["train_s"] = result.train_s;
  out["bytes_contributed"] = p.bytes_sent;
  out["bytes_on_wire"] = p.bytes_sent;
  out["bytes_dense"] = p.bytes_dense;
  out["bytes_dense_on_wire"] = p.bytes_dense;
  out["bytes_received"] = p.bytes_received;
  out["samples"] = p.samples;
  out["workers"] = context.world_size();
  out["live_workers"] = p.live_workers;
  out["servers"] = static_cast<int>(context.parameter_servers()->endpoints.size());
  out["strategy"] = "ps";
  out["consistency"] = options.exchange.ps.consistency;
  out["updater"] = options.exchange.ps.updater;
  out["pull"] = options.exchange.ps.pull;
  out["worker_speed"] = options.worker_speed;
  out["compressor"] = options.exchange.compressor;
  out["codec"] = optimizer.codec_spec();
  out.update(job_fields(options, job));
  out["version"] = summary->version;
  out["staleness"] = {{"count", summary->staleness_count},
                      {"mean", summary->staleness_mean},
                      {"p50", summary->staleness_p50},
                      {"p99", summary->staleness_p99},
                      {"max", summary->staleness_max}};
  out["param_checksums"] = checksums;
  metrics.write(out);
  std::printf(
      "summary: %d workers, ps %s, updater %s, compressor %s: %s (servers' "
      "final model), %.1f s, %llu updates, staleness mean %.2f p50 %llu p99 %llu max %llu, "
      "pushed/dense %.4f\n",
      context.world_size(), options.exchange.ps.consistency.c_str(),
      options.exchange.ps.updater.c_str(), options.exchange.compressor.c_str(),
      metric.show(result.quality).c_str(), result.elapsed_s,
      static_cast<unsigned long long>(summary->version), summary->staleness_mean,
      static_cast<unsigned long long>(summary->staleness_p50),
      static_cast<unsigned long long>(summary->staleness_p99),
      static_cast<unsigned long long>(summary->staleness_max),
      p.bytes_dense ? double(p.bytes_sent) / p.bytes_dense : 0.0);
  std::fflush(stdout);
  return result;
}

}  // namespace gradwire::train
