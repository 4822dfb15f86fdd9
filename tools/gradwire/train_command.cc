// `gradwire train`: the built-in job. Without --worker it is a launcher that starts
// --workers copies of itself with --worker (through launch::run_processes); with --worker
// it is one rank and reads its place in the job from torchrun's variables, so
// `gradwire run -n 4 -- gradwire train --worker ...` and torchrun launches work too.
//
// Built with GRADWIRE_FAULT_INJECTION (the tests' build, gradwire_fault_cli, never
// installed) it also takes --test-worker-exit R:S: worker R exits abruptly (status 9, no
// goodbye) before its step S in the job's first attempt, to lose a worker for real.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "commands.h"
#include "gradwire/context.h"
#include "gradwire/core/error.h"
#include "gradwire/fashion_mnist.h"
#include "gradwire/launch/emulated_cluster.h"
#include "gradwire/launch/launcher.h"
#include "gradwire/strategy/ps/updater.h"
#include "gradwire/strategy/registry.h"
#include "gradwire/text_corpus.h"
#include "gradwire/train/recipe.h"
#include "gradwire/train/trainer.h"
#include "gradwire/train/workload.h"

namespace gradwire::cli {
namespace {

struct TrainArgs {
  train::TrainOptions options;
  int workers = 4;
  int servers = 1;  // --strategy ps
  std::string bind = "127.0.0.1";
  std::string on_worker_loss = "fail";
  int threads = 0;
  bool flush_denormal = false;
  int master_port = 0;
  int max_restarts = 0;
  bool worker = false;
  std::string progress = "auto";
  std::string save_initial_weights;
#ifdef GRADWIRE_FAULT_INJECTION
  std::string test_worker_exit;  // "R:S"
#endif
};

#ifdef GRADWIRE_FAULT_INJECTION
// Makes this worker exit before step S when --test-worker-exit names it, in the first
// attempt only (a restarted job gets past it).
void schedule_exit(TrainArgs& a, int rank) {
  if (a.test_worker_exit.empty() || a.options.restart_count != 0) return;
  int exiting = 0;
  unsigned long long step = 0;
  if (std::sscanf(a.test_worker_exit.c_str(), "%d:%llu", &exiting, &step) != 2) {
    throw ConfigError("--test-worker-exit " + a.test_worker_exit + " is not RANK:STEP");
  }
  if (exiting != rank) return;
  a.options.before_step = [rank, step](uint64_t now) {
    if (now != step) return;
    std::fprintf(stderr, "worker %d: exiting abruptly at step %llu (--test-worker-exit)\n", rank,
                 step);
    std::fflush(stderr);
    std::_Exit(9);
  };
}
#endif

std::string self_executable() {
  char path[4096];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) throw SystemError(errno_message("cannot find the gradwire executable", errno));
  return std::string(path, static_cast<size_t>(n));
}

// The command each worker runs: this tool with every option the user gave `train`, then
// --worker and what the launcher resolved (a later option overrides an earlier one), so an
// option reaches the workers without being listed here.
std::vector<std::string> worker_command(const TrainArgs& a, const CLI::App& train) {
  std::vector<std::string> cmd{self_executable(), "train"};
  for (const CLI::Option* option : train.get_options()) {
    if (option->count() == 0 || option->get_name() == "--help") continue;
    const std::string name = option->get_name();
    if (option->get_expected_min() == 0) {  // a flag
      cmd.push_back(name);
      continue;
    }
    for (const auto& value : option->results()) cmd.insert(cmd.end(), {name, value});
  }
  const auto& o = a.options;
  cmd.insert(cmd.end(), {"--worker", "--compressor", o.exchange.compressor, "--threads",
                         std::to_string(a.threads), "--progress", a.progress});
  if (o.momentum) cmd.insert(cmd.end(), {"--momentum", std::to_string(*o.momentum)});
  return cmd;
}

int run_worker(TrainArgs& a) {
  if (a.threads > 0) train::set_compute_threads(a.threads);
  if (a.flush_denormal) train::set_flush_denormal();  // before any thread of the job starts
  a.options.exchange.ps.continue_on_worker_loss = a.on_worker_loss == "continue";
  if (const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT"); attempt && *attempt) {
    a.options.restart_count = std::atoi(attempt);  // set by the launcher (--max-restarts)
  }
  auto context = gradwire::init();
  if (context->is_server()) return 0;  // a parameter server whose job is over
#ifdef GRADWIRE_FAULT_INJECTION
  schedule_exit(a, context->rank());
#endif
  if (a.progress == "tty") {
    a.options.progress = train::ProgressStyle::kTerminal;
  } else if (a.progress == "none") {
    a.options.progress = train::ProgressStyle::kNone;
  } else {
    a.options.progress = train::ProgressStyle::kLines;
  }
  const auto result = train::run_training(a.options, context);
  return result.checksums_equal ? 0 : 4;
}

int launch_workers(TrainArgs& a, const CLI::App& train) {
  if (a.workers < 1) throw ConfigError("--workers must be at least 1");
  train::check_options(a.options);
  a.options.exchange.compressor =
      strategy::codec_or_default(a.options.exchange.compressor, a.options.exchange.strategy);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (a.threads == 0) a.threads = std::max(1, cores / a.workers);  // one thread when N >= cores
  if (a.progress == "auto") a.progress = isatty(STDOUT_FILENO) ? "tty" : "lines";
  launch::LaunchOptions launch;
  launch.num_processes = a.workers;
  if (a.options.exchange.strategy == "ps") {
    if (a.servers < 1) throw ConfigError("--servers must be at least 1");
    // Servers are ranks [workers, workers + servers): mostly waiting on the network, so
    // they do not count against the cores the workers' threads are sized by.
    launch.num_processes = a.workers + a.servers;
    launch.extra_env["GRADWIRE_NUM_SERVERS"] = std::to_string(a.servers);
    launch.extra_env["GRADWIRE_PS_BIND"] = a.bind;
    // Worker 0 serves the rendezvous store and evaluates; any other worker may be lost
    // when the job is meant to go on without it.
    if (a.on_worker_loss == "continue" || a.options.exchange.ps.consistency != "bsp") {
      for (int r = 1; r < a.workers; ++r) launch.may_fail.insert(r);
    }
  } else if (a.options.exchange.strategy == "gossip") {
    launch.extra_env["GRADWIRE_PS_BIND"] = a.bind;  // where the workers listen for peers
    // Worker 0 holds the job's view and evaluates; the others may be lost.
    for (int r = 1; r < a.workers; ++r) launch.may_fail.insert(r);
  }
  if (a.options.exchange.strategy != "ps" && !a.options.worker_speed.empty()) {
    throw ConfigError("--worker-speed applies to --strategy ps");
  }
  if (a.options.exchange.strategy == "ps" && a.options.exchange.ps.consistency != "bsp" &&
      !a.options.momentum) {
    // The recipe's momentum is BSP's; asynchronous workers add their own (updater.h).
    const double synchronous = train::recipe_of(a.options).momentum;
    a.options.momentum = strategy::ps::asynchronous_momentum(synchronous, a.workers);
    std::fprintf(stderr,
                 "gradwire train: momentum %.2f for %d asynchronous workers (%.2f less the "
                 "1 - 1/%d that asynchrony adds, at least 0; --momentum sets it)\n",
                 *a.options.momentum, a.workers, synchronous, a.workers);
  }
  launch.master_port = a.master_port;
  launch.max_restarts = a.max_restarts;
  launch.command = worker_command(a, train);
  launch.threads_per_process = a.threads;
  const auto result = launch::run_processes(launch);
  if (result.exit_code != 0) {
    std::fprintf(stderr, "gradwire train: %s; stopped the other ranks\n", result.message.c_str());
  }
  return result.exit_code;
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<TrainArgs>();
  auto* cmd = app.add_subcommand("train",
                                 "Train a built-in job (Fashion-MNIST classifiers, a byte-level "
                                 "transformer on the King James Bible) on N local workers");
  // A later option overrides an earlier one: the launcher appends what it resolved.
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto& o = args->options;
  cmd->add_option("--workers,-n", args->workers, "Number of worker processes")
      ->capture_default_str();
  cmd->add_option("--model", o.model, "cnn, cnn-wide, mlp (Fashion-MNIST) or gpt (text)")
      ->capture_default_str()
      ->check(CLI::IsMember(train::model_names()));
  cmd->add_option("--strategy", o.exchange.strategy,
                  "Exchange strategy: allreduce, ps, gossip or diloco")
      ->capture_default_str()
      ->check(CLI::IsMember(strategy::strategy_names()));
  cmd->add_option("--servers", args->servers, "Parameter servers (--strategy ps)")
      ->capture_default_str();
  cmd->add_option("--consistency", o.exchange.ps.consistency, "bsp, ssp:S or asp (--strategy ps)")
      ->capture_default_str();
  cmd->add_option("--updater", o.exchange.ps.updater,
                  "Server update rule: sgd, asgd-staleness, dc-asgd, dc-asgd-a, ddc-asgd")
      ->capture_default_str();
  cmd->add_option("--pull", o.exchange.ps.pull,
                  "How weights come back: none, fp16, bf16, delta:SPEC")
      ->capture_default_str();
  cmd->add_option("--worker-speed", o.worker_speed,
                  "Worker speeds to make staleness real: 1,1,1,0.25 or random:SEED");
#ifdef GRADWIRE_FAULT_INJECTION
  cmd->add_option("--test-worker-exit", args->test_worker_exit,
                  "Fault injection: R:S makes worker R exit abruptly before its step S");
#endif
  cmd->add_option("--on-worker-loss", args->on_worker_loss,
                  "BSP: fail, or continue without a lost worker (SSP/ASP always continue)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fail", "continue"}));
  cmd->add_option("--worker-timeout", o.exchange.ps.worker_timeout_s,
                  "Seconds of silence after which a worker is presumed lost")
      ->capture_default_str();
  cmd->add_option("--checkpoint-dir", o.exchange.ps.checkpoint_dir,
                  "Checkpoint here (allreduce: rank 0, the whole job's state; ps: the servers); "
                  "a job started on it resumes");
  cmd->add_option("--checkpoint-every", o.exchange.ps.checkpoint_every,
                  "Steps (allreduce) or server updates (ps) between checkpoints")
      ->capture_default_str();
  cmd->add_option("--bind", args->bind, "Address the servers (gossip: the workers) listen on")
      ->capture_default_str();
  cmd->add_option("--topology", o.exchange.gossip.topology,
                  "Gossip: whom a worker exchanges with (ring, exponential, random[:seed=S])")
      ->capture_default_str();
  cmd->add_option("--gossip-trigger", o.exchange.gossip.trigger,
                  "Gossip: when (every, period:K, adaptive[:calibration=..,kappa=..,t_max=..])")
      ->capture_default_str();
  cmd->add_option("--gossip-merge", o.exchange.gossip.merge, "Gossip: pairwise or push-sum")
      ->capture_default_str();
  cmd->add_flag("--gossip-wait", o.exchange.gossip.wait,
                "Gossip: the offering worker waits for its answer before its step ends");
  cmd->add_option("--peer-timeout", o.exchange.gossip.peer_timeout_s,
                  "Gossip: seconds of silence after which a peer is presumed lost")
      ->capture_default_str();
  cmd->add_option_function<std::string>(
      "--inner-steps",
      [&o](const std::string& v) {
        if (v == "auto") {
          o.exchange.diloco.inner_steps = 0;
          return;
        }
        char* end = nullptr;
        const long long h = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || h < 1) {
          throw ConfigError("--inner-steps: '" + v + "' is not a positive number or auto");
        }
        o.exchange.diloco.inner_steps = static_cast<uint64_t>(h);
      },
      "DiLoCo: inner steps H between outer steps, or auto: the smallest H whose exchanges "
      "hide under the inner steps over --link-bandwidth (with --fragments > 1; it sets "
      "--fragment-delay too), else whose exchange costs at most 5% of a round (default auto)");
  cmd->add_option("--outer-lr", o.exchange.diloco.outer_lr, "DiLoCo: outer learning rate")
      ->capture_default_str();
  cmd->add_option("--outer-momentum", o.exchange.diloco.outer_momentum,
                  "DiLoCo: outer Nesterov momentum (0 with --outer-lr 1: the ranks' mean "
                  "model; the papers: 0.9 with 0.7)")
      ->capture_default_str();
  cmd->add_option("--outer-warmup", o.exchange.diloco.outer_warmup,
                  "DiLoCo: outer steps over which the outer learning rate ramps up linearly "
                  "(per fragment; 0: none)")
      ->capture_default_str();
  cmd->add_option("--fragments", o.exchange.diloco.fragments,
                  "DiLoCo: parts of the model, by layer, synchronized in turn over a round "
                  "(Streaming DiLoCo)")
      ->capture_default_str();
  cmd->add_option("--fragment-delay", o.exchange.diloco.delay,
                  "DiLoCo: inner steps a fragment's exchange overlaps before it is merged (at "
                  "most inner steps / fragments)")
      ->capture_default_str();
  cmd->add_option(
      "--compressor", o.exchange.compressor,
      "Codec spec (none, fp16, int8, topk:density=0.01, powersgd:rank=2, ...), a "
      "layer policy (conv=...,fc=...,other=...), or an adaptive codec: auto "
      "(measures none, fp16, int8 and PowerSGD and picks), accordion "
      "(docs/CODECS.md). Default: auto for allreduce, none for ps and gossip, int4 for "
      "diloco (the outer gradient's codec: none, fp16, bf16, int8, int4 or sparseloco)");
  cmd->add_option_function<double>(
      "--bucket-mb",
      [&o](double mb) {
        if (!(mb > 0)) throw ConfigError("--bucket-mb must be positive");
        o.exchange.bucket_bytes = static_cast<size_t>(mb * (1 << 20));
      },
      "Fusion bucket size in MiB (default 25)");
  cmd->add_option_function<std::string>(
         "--overlap", [&o](const std::string& v) { o.exchange.overlap = v == "on"; },
         "Exchange buckets during backward: on (default) or off")
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option_function<std::string>(
         "--bucket-layout",
         [&o](const std::string& v) { o.exchange.measured_buckets = v == "measured"; },
         "measured (default): after a few steps, buckets laid out anew from when each "
         "gradient was final and how long the exchanges took, kept only if faster than the "
         "first layout, the two taking turns; "
         "fixed: the layout of --bucket-mb, and a run with a fixed codec repeats bit for bit")
      ->check(CLI::IsMember({"measured", "fixed"}));
  cmd->add_option("--sparse-aggregation", o.exchange.sparse_aggregation,
                  "How buckets of sparse codecs are summed: auto (by a cost model), allgather, "
                  "split (sparse reduce-scatter + allgather) or dense (docs/SCALING.md)")
      ->check(CLI::IsMember({"auto", "allgather", "split", "dense"}))
      ->capture_default_str();
  cmd->add_option("--quantized-path", o.exchange.quantized_path,
                  "How buckets of fp16, bf16, int8 and int4 are averaged: ring (fp16's and "
                  "int8's allreduce, bf16's and int4's allgather), reduce-scatter (summed in "
                  "fp32, every level kept at any world size) or auto (per bucket; fp16 from "
                  "3 ranks on a --link-bandwidth of 1gbit or more)")
      ->check(CLI::IsMember({"auto", "ring", "reduce-scatter"}))
      ->capture_default_str();
  cmd->add_option_function<std::string>(
      "--link-bandwidth",
      [&o](const std::string& v) {
        uint64_t bits = 0;
        try {
          bits = launch::parse_rate(v);
        } catch (const ConfigError& e) {
          throw ConfigError(std::string("--link-bandwidth: ") + e.what());
        }
        if (bits == 0) throw ConfigError("--link-bandwidth must be a rate, e.g. 100mbit");
        o.exchange.link_bits_per_s = static_cast<double>(bits);
      },
      "Each rank's link, for the cost model of --sparse-aggregation auto and --compressor "
      "auto: tc's notation, e.g. 100mbit, 10gbit (default 1gbit)");
  cmd->add_option_function<double>(
      "--link-latency-us",
      [&o](double us) {
        if (!(us >= 0)) throw ConfigError("--link-latency-us must be 0 or more");
        o.exchange.link_latency_s = us * 1e-6;
      },
      "One message step's time in the cost model, in microseconds (default 50)");
  cmd->add_option("--epochs", o.epochs)->capture_default_str();
  cmd->add_option("--batch-size", o.batch_size, "Per-worker batch size")->capture_default_str();
  // The recipe (src/gradwire/train/recipe.h): what is not given is the model's.
  const auto optional_number = [&](const std::string& name, std::optional<double>& field,
                                   const std::string& help) {
    cmd->add_option_function<double>(
        name, [&field](double v) { field = v; }, help);
  };
  const auto optional_word = [&](const std::string& name, std::optional<std::string>& field,
                                 const std::string& help, std::vector<std::string> words) {
    cmd->add_option_function<std::string>(
           name, [&field](const std::string& v) { field = v; }, help)
        ->check(CLI::IsMember(std::move(words)));
  };
  optional_word("--optimizer", o.optimizer, "sgd or adamw (default: the model's: sgd, gpt adamw)",
                {"sgd", "adamw"});
  optional_number("--lr", o.lr, "Peak learning rate (default: the model's: 0.05, gpt 0.005)");
  optional_number("--momentum", o.momentum, "SGD momentum (default 0.9)");
  optional_number("--weight-decay", o.weight_decay,
                  "Weight decay: SGD on every parameter, AdamW decoupled on weight matrices "
                  "(default: 0, gpt 0.1)");
  optional_word("--lr-schedule", o.lr_schedule,
                "constant, or cosine (linear warm-up, then cosine decay to 0.1 x lr) "
                "(default: the model's: constant, gpt cosine)",
                {"constant", "cosine"});
  optional_number("--warmup", o.warmup,
                  "Warm-up of the cosine schedule, as a fraction of the run's steps "
                  "(default: gpt 0.05)");
  optional_number("--clip-norm", o.clip_norm,
                  "Clip the exchanged gradient's global norm to this before each step; 0: none "
                  "(default: 0, gpt 1)");
  cmd->add_option("--accumulate", o.accumulate,
                  "Micro-batches of --batch-size per step, all but the last backward inside "
                  "no_sync()")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--corpus", o.corpus, "gpt's text file")->default_str(kBibleCorpusPath);
  cmd->add_option("--save-initial-weights", args->save_initial_weights,
                  "Write the model's initial weights for --seed to FILE and exit (for "
                  "bench/peers/ddp_peer.py --initial-weights)");
  cmd->add_option("--seed", o.seed)->capture_default_str();
  cmd->add_option("--data-dir", o.data_dir, "Fashion-MNIST directory")
      ->default_str(kFashionMnistDir);
  cmd->add_option("--train-limit", o.train_limit,
                  "Use only the first N training samples (gpt: windows of 129 bytes; 0: all)");
  cmd->add_option("--test-limit", o.test_limit,
                  "Evaluate on the first N test samples (gpt: N windows spread over the "
                  "validation text, default 256; 0: all)");
  cmd->add_option("--eval-every", o.eval_every,
                  "Also evaluate every N steps (time to accuracy finer than an epoch)");
  cmd->add_option("--metrics", o.metrics_path, "Write JSON Lines metrics to FILE");
  cmd->add_option("--timeline", o.timeline_path,
                  "Write every rank's timeline (forward, backward, each bucket's encode, "
                  "communicate and decode, waits) to FILE as Chrome trace-event JSON "
                  "(open it in Perfetto)");
  cmd->add_option("--threads", args->threads, "Compute threads per worker (0: cores / workers)");
  cmd->add_flag("--flush-denormal", args->flush_denormal,
                "Flush subnormal floats to zero in every worker (x86's FTZ/DAZ mode, "
                "torch.set_flush_denormal): faster on a CPU whose model meets subnormals, "
                "not the same arithmetic");
  cmd->add_option("--master-port", args->master_port, "Rendezvous port (0: pick a free one)");
  cmd->add_option("--max-restarts", args->max_restarts,
                  "When a rank fails, restart every rank, up to R times; the job resumes from "
                  "--checkpoint-dir")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--progress", args->progress, "auto, tty, lines or none")
      ->check(CLI::IsMember({"auto", "tty", "lines", "none"}));
  cmd->add_flag("--worker", args->worker,
                "Run as one rank of a job started by a launcher (reads RANK, WORLD_SIZE, ...)");
  cmd->callback([args, cmd, &exit_code] {
    if (!args->save_initial_weights.empty()) {
      const std::string crc =
          train::write_initial_weights(args->options, args->save_initial_weights);
      std::printf("wrote %s's initial weights for seed %llu to %s (crc32 %s)\n",
                  args->options.model.c_str(), static_cast<unsigned long long>(args->options.seed),
                  args->save_initial_weights.c_str(), crc.c_str());
      exit_code = 0;
      return;
    }
    exit_code = args->worker ? run_worker(*args) : launch_workers(*args, *cmd);
  });
}

}  // namespace gradwire::cli
