// The built-in job with `--strategy gossip`.
//
// Every worker trains its shard for the given epochs (the same steps as allreduce). At each
// evaluation point (every --eval-every steps and each epoch's end) every worker reports to
// rank 0 (DistributedOptimizer::gossip_report): its model, counters and its loss so far.
// Rank 0 keeps the average model with its training time and goes on; it evaluates the
// kept averages after training (as the parameter server's deferred evaluation), so no
// worker waits for an evaluation and train_s never contains one. It does contain rank 0's
// wait for the others' reports: the average of step s exists once the slowest worker has
// reached s. At the end every worker takes the average model (finish_gossip); the last
// epoch's line evaluates that one model.
//
// No collective runs after the start: a worker that dies is presumed lost after the peer
// timeout, the others finish, and the summary names it (the launcher tolerates the loss
// of any rank but 0, which holds the job's view).
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "gradwire/core/atomic_file.h"
#include "gradwire/core/error.h"
#include "gradwire/core/timeline.h"
#include "gradwire/distributed_optimizer.h"
#include "gradwire/distributed_sampler.h"
#include "gradwire/train/job_output.h"
#include "gradwire/train/job_start.h"
#include "gradwire/train/trainer.h"

namespace gradwire::train {
namespace {

// What a worker tells rank 0 with each report.
std::string make_note(double loss_sum, size_t samples, const TrafficCounters& traffic,
                      const std::string& timeline = "") {
  nlohmann::json note = {{"loss_sum", loss_sum},
                         {"samples", samples},
                         {"bytes_dense_on_wire", traffic.bytes_dense_on_wire}};
  if (!timeline.empty()) note["timeline"] = timeline;
  return note.dump();
}

// The reporters' notes: summed loss and samples, dense bytes, and the timelines by rank.
struct Notes {
  double loss_sum = 0;
  double samples = 0;
  uint64_t bytes_dense = 0;
  std::vector<std::string> timelines;
};

Notes read_notes(const GossipReport& report) {
  Notes out;
  for (const auto& text : report.notes) {
    if (text.empty()) continue;  // a rank that did not report
    const auto note = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (note.is_discarded() || !note.is_object()) {
      throw PayloadError("a gossip report's note is not the built-in job's");
    }
    out.loss_sum += note.value("loss_sum", 0.0);
    out.samples += note.value("samples", 0.0);
    out.bytes_dense += note.value("bytes_dense_on_wire", uint64_t{0});
    if (note.contains("timeline")) out.timelines.push_back(note["timeline"].get<std::string>());
  }
  return out;
}

void add_gossip_fields(nlohmann::json& line, const GossipSummary& s, int workers) {
  line["gossip_offers"] = s.offers;
  line["gossip_offers_per_worker"] = static_cast<double>(s.offers) / workers;
  line["gossip_merges"] = s.merges;
  line["gossip_busy"] = s.busy;
  line["gossip_dropped_messages"] = s.dropped_messages;
  line["gossip_bytes_bookkeeping"] = s.bytes_bookkeeping;
  line["steps_between_exchanges_mean"] = s.steps_between_mean;
  line["steps_between_exchanges_p50"] = s.steps_between_p50;
  line["steps_between_exchanges_max"] = s.steps_between_max;
  line["consensus_distance"] = s.consensus_distance;
  line["dropped_peers"] = s.dropped_peers;
  line["reported_workers"] = s.reported;
  line["lost_workers"] = s.lost;
}

}  // namespace

TrainResult run_gossip_training(const TrainOptions& options, std::shared_ptr<Context> context_ptr) {
  Context& context = *context_ptr;
  const bool chief = context.is_root();
  Job job = start_job(options, context_ptr);
  Workload& workload = *job.workload;
  torch::nn::Module& model = workload.model();
  const Metric metric = workload.metric();
  DistributedOptimizer& optimizer = *job.optimizer;
  if (chief) {
    std::printf("%d workers, gossip (topology %s, trigger %s, merge %s), %s\n",
                context.world_size(), options.exchange.gossip.topology.c_str(),
                options.exchange.gossip.trigger.c_str(), options.exchange.gossip.merge.c_str(),
                describe_job(options, job).c_str());
    std::fflush(stdout);
  }
  if (!options.timeline_path.empty()) {
    Timeline::global().enable(context.rank());
    Timeline::global().name_thread("training");
    Timeline::global().set_origin(Timeline::Clock::now());  // no barrier: rank 0's clock skew
  }

  DistributedSampler sampler(workload.train_size(), context.rank(), context.world_size(),
                             options.seed);
  const size_t steps = steps_per_epoch(sampler, job.step_samples);
  const ProgressStyle progress = chief ? options.progress : ProgressStyle::kNone;
  const size_t progress_every = options.progress == ProgressStyle::kTerminal
                                    ? std::max<size_t>(1, steps / 100)
                                    : std::max<size_t>(1, (steps + 3) / 4);
  MetricsFile metrics(chief ? options.metrics_path : "");

  // Rank 0's kept averages, evaluated after training.
  struct Snapshot {
    nlohmann::json eval;                       // the "eval" line, accuracy to come
    std::optional<nlohmann::json> epoch_line;  // an epoch ended here
    std::vector<torch::Tensor> average;
  };
  std::vector<Snapshot> snapshots;
  const auto job_start = Clock::now();
  size_t global_step = 0;
  double loss_sum = 0;
  size_t samples = 0;
  const auto keep = [&](const GossipReport& report, int epoch, std::optional<nlohmann::json> line) {
    Snapshot s;
    s.eval = {{"event", "eval"},
              {"epoch", epoch},
              {"step", global_step},
              {"train_s", seconds_since(job_start)},
              {"consensus_distance", report.summary.consensus_distance}};
    s.epoch_line = std::move(line);
    s.average = report.average;
    snapshots.push_back(std::move(s));
  };

  TrainResult result;
  std::optional<GossipReport> final_report;
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    const auto epoch_start = Clock::now();
    loss_sum = 0;
    samples = 0;
    for (size_t step = 0; step < steps; ++step) {
      if (options.before_step) options.before_step(global_step);
      const StepDone done = take_step(job, batch_of(sampler, step, job.step_samples), global_step);
      ++global_step;
      loss_sum += done.loss_sum;
      samples += done.samples;
      if ((step + 1) % progress_every == 0 || step + 1 == steps) {
        print_progress(progress, epoch, options.epochs, step + 1, steps, loss_sum / samples,
                       samples * context.world_size() / seconds_since(epoch_start));
      }
      const bool epoch_end = step + 1 == steps;
      const bool eval_point = options.eval_every > 0 && global_step % options.eval_every == 0;
      if (epoch_end && epoch == options.epochs) break;  // the final report is finish's
      if (!epoch_end && !eval_point) continue;
      const auto report =
          optimizer.gossip_report(make_note(loss_sum, samples, optimizer.traffic()));
      if (!report) continue;
      std::optional<nlohmann::json> line;
      if (epoch_end) {
        const Notes notes = read_notes(*report);
        line = {{"epoch", epoch},
                {"train_loss", notes.loss_sum / std::max(1.0, notes.samples)},
                {"train_s", seconds_since(job_start)},
                {"steps", global_step},
                {"samples_per_s", notes.samples / seconds_since(epoch_start)},
                {"bytes_contributed", report->summary.bytes_sent},
                {"bytes_on_wire", report->summary.bytes_sent},
                {"bytes_dense", notes.bytes_dense},
                {"bytes_dense_on_wire", notes.bytes_dense}};
        add_gossip_fields(*line, report->summary, context.world_size());
      }
      keep(*report, epoch, std::move(line));
    }
    if (progress == ProgressStyle::kTerminal) std::printf("\n");
  }

  // One model at the end: the exchanges stop and every worker takes the average.
  const std::string timeline =
      options.timeline_path.empty() ? "" : Timeline::global().events_json();
  final_report =
      optimizer.finish_gossip(make_note(loss_sum, samples, optimizer.traffic(), timeline));
  result.elapsed_s = seconds_since(job_start);
  result.train_s = result.elapsed_s;
  if (!chief) return result;

  const GossipSummary& summary = final_report->summary;
  const Notes notes = read_notes(*final_report);
  std::printf(
      "gossip: consensus: every worker's model replaced by the average of the %zu that "
      "reported%s\n",
      summary.reported.size(), summary.lost.empty() ? "" : " (the others were presumed lost)");
  for (int r : summary.lost) {
    std::printf(
        "gossip: worker %d sent nothing for the peer timeout; the job went on without "
        "it\n",
        r);
  }
  std::fflush(stdout);
  nlohmann::json last = {{"epoch", options.epochs},
                         {"train_loss", notes.loss_sum / std::max(1.0, notes.samples)},
                         {"train_s", result.train_s},
                         {"steps", global_step},
                         {"samples_per_s", notes.samples / std::max(1e-9, result.train_s)},
                         {"bytes_contributed", summary.bytes_sent},
                         {"bytes_on_wire", summary.bytes_sent},
                         {"bytes_dense", notes.bytes_dense},
                         {"bytes_dense_on_wire", notes.bytes_dense}};
  add_gossip_fields(last, summary, context.world_size());
  keep(*final_report, options.epochs, last);
  // Evaluates the kept averages (the last one is the model every worker now holds).
  double epoch_s_start = 0;
  for (auto& s : snapshots) {
    load_parameters(model, s.average);
    const double quality = workload.evaluate(idle_machine_threads());
    s.eval[metric.name] = quality;
    metrics.write(s.eval);
    if (!s.epoch_line) continue;
    nlohmann::json line = *s.epoch_line;
    line[metric.name] = quality;
    line["elapsed_s"] = line["train_s"];
    line["event"] = "epoch";
    metrics.write(line);
    const double train_s = line["train_s"].get<double>();
    const double sent = line["bytes_on_wire"].get<double>();
    const double dense = line["bytes_dense_on_wire"].get<double>();
    std::printf(
        "epoch %d/%d: train_loss %.4f %s (average model) %.1f s consensus "
        "distance %.4g on the wire %.2f MB (%.4f of dense fp32's)\n",
        line["epoch"].get<int>(), options.epochs, line["train_loss"].get<double>(),
        metric.show(quality).c_str(), train_s - epoch_s_start,
        line["consensus_distance"].get<double>(), sent / 1e6, dense > 0 ? sent / dense : 0.0);
    std::fflush(stdout);
    epoch_s_start = train_s;
    last = line;
  }
  result.metric = metric.name;
  result.quality = last[metric.name].get<double>();
  result.train_loss = last["train_loss"].get<double>();
  result.bytes_contributed = result.bytes_on_wire = summary.bytes_sent;
  result.bytes_dense = result.bytes_dense_on_wire = notes.bytes_dense;

  if (!options.timeline_path.empty()) {
    const std::string trace = Timeline::trace_json(notes.timelines);
    write_file_atomically(
        options.timeline_path,
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(trace.data()), trace.size()));
  }
  // Every worker that reported holds the bytes rank 0 sent it: rank 0's model.
  const std::string checksum = parameter_checksum(model);
  nlohmann::json checksums = nlohmann::json::array();
  for (int r = 0; r < context.world_size(); ++r) {
    const bool took =
        std::find(summary.reported.begin(), summary.reported.end(), r) != summary.reported.end();
    checksums.push_back(took ? checksum : "");
  }
  nlohmann::json out = last;
  out["event"] = "summary";
  out["elapsed_s"] = result.elapsed_s;
  out["workers"] = context.world_size();
  out["strategy"] = "gossip";
  out["topology"] = options.exchange.gossip.topology;
  out["gossip_trigger"] = options.exchange.gossip.trigger;
  out["gossip_merge"] = options.exchange.gossip.merge;
  out["compressor"] = options.exchange.compressor;
  out["codec"] = optimizer.codec_spec();
  out.update(job_fields(options, job));
  out["param_checksums"] = checksums;
  metrics.write(out);
  std::printf(
      "summary: %d workers, %s, gossip %s %s, compressor %s: %s (the "
      "consensus model), %.1f s, %llu exchanges, bytes_on_wire/bytes_dense_on_wire %.4f%s\n",
      context.world_size(), options.model.c_str(), options.exchange.gossip.topology.c_str(),
      options.exchange.gossip.trigger.c_str(), options.exchange.compressor.c_str(),
      metric.show(result.quality).c_str(), result.elapsed_s,
      static_cast<unsigned long long>(summary.offers), result.wire_ratio(),
      summary.lost.empty() ? "" : ", workers lost");
  std::fflush(stdout);
  return result;
}

}  // namespace gradwire::train
