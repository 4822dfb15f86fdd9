// `gradwire bench e2e`: time to accuracy on emulated clusters, gradwire and PyTorch DDP
// side by side. Runs every configuration of the matrix (e2e_matrix.h) back to back, each
// in its own `gradwire cluster`, shows progress, and writes into --out:
//   results.csv           one row per run (e2e_matrix.h's write_csv)
//   runs/<id>.jsonl       each run's metrics; logs/<id>.log its output
//   *.png, results.md     plots and tables (bench/e2e/plot_e2e.py, matplotlib)
//   command.txt           the command that made them
// With --resume, runs whose metrics in DIR are complete are kept and only the others run:
// a matrix of hours survives a reboot or an interrupt (the command must be the same one).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "commands.h"
#include "e2e_matrix.h"
#include "gradwire/core/error.h"
#include "gradwire/launch/emulated_cluster.h"
#include "gradwire/train/trainer.h"
#include "gradwire/train/workload.h"

extern char** environ;

namespace gradwire::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct E2eArgs {
  e2e::Settings settings;
  std::string bandwidths = "100mbit,1gbit,10gbit";
  std::string models = "cnn,cnn-wide";
  std::vector<std::string> configs;
  std::string targets = "cnn=0.88,cnn-wide=0.88";
  std::string steep_targets;  // empty: 0.85 (cnn's), or the plateau accuracy when lower
  std::string loss_targets;   // the models measured by a loss (gpt): required for them
  std::string steep_losses;   // empty: the plateau loss
  std::string out;
  bool no_floor = false;
  bool no_plots = false;
  bool resume = false;
  bool timeline = false;
};

volatile sig_atomic_t g_stop_signal = 0;
void remember_stop(int signal_number) { g_stop_signal = signal_number; }

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> items;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

fs::path self_path() { return fs::read_symlink("/proc/self/exe"); }

std::string duration(double seconds) {
  if (!(seconds >= 0)) return "?";
  const long s = std::lround(seconds);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%ldh%02ldm", s / 3600, s % 3600 / 60);
  } else {
    std::snprintf(text, sizeof text, "%ldm%02lds", s / 60, s % 60);
  }
  return text;
}

std::string describe(const e2e::Run& run) {
  return run.model + " " + (run.floor ? std::string("unshaped (compute floor)") : run.bandwidth) +
         " " + (run.config.runs_peer() ? run.config.name : "gradwire " + run.config.name) +
         (run.repeat > 1 ? " #" + std::to_string(run.repeat) : "");
}

// Checks that the peer can run before hours of runs depend on it.
void check_python(bool needs_torch) {
  const std::string modules = needs_torch ? "torch, matplotlib" : "matplotlib";
  const std::string probe = "/usr/bin/python3 -c 'import " + modules + "' >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0) {
    throw ConfigError("/usr/bin/python3 cannot import " + modules +
                      ": install Debian's python3-torch and python3-matplotlib "
                      "(bash scripts/install_deps.sh does)");
  }
}

pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env,
            const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e; ++e) env_storage.emplace_back(*e);
  env_storage.insert(env_storage.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> envp, args;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int error = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (error != 0) throw SystemError(errno_message("cannot start " + argv[0], error));
  return pid;
}

class E2eBench {
 public:
  E2eBench(const E2eArgs& args, std::vector<e2e::Run> runs)
      : args_(args),
        s_(args.settings),
        runs_(std::move(runs)),
        out_(args.out),
        terminal_(::isatty(STDOUT_FILENO) == 1) {}

  int run() {
    fs::create_directories(out_ / "runs");
    fs::create_directories(out_ / "logs");
    const fs::path self = self_path();
    const fs::path peer = bench_file("ddp_peer.py");
    const auto started = Clock::now();
    int failed = 0;
    if (args_.resume) keep_finished_runs();
    for (const e2e::Run& run : runs_) {
      if (g_stop_signal) break;
      if (status_.count(run.index)) continue;
      const int code = run_one(run, self.string(), peer.string());
      if (code != 0) ++failed;
      write_results();
    }
    write_results();
    std::cout << "gradwire bench e2e: " << status_.size() << " of " << runs_.size() << " runs in "
              << duration(seconds_since(started)) << ", " << failed << " failed; results in "
              << (out_ / "results.csv").string() << std::endl;
    if (g_stop_signal) return 128 + g_stop_signal;
    if (!args_.no_plots) plot();
    return failed ? 1 : 0;
  }

 private:
  static double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }

  // Samples a worker's step takes: the run's batch x the matrix's micro-batches.
  int step_samples(const e2e::Run& run) const {
    return e2e::run_batch_size(s_, run) * s_.accumulate;
  }

  // --resume: a run whose metrics file holds its summary line finished in an earlier
  // invocation; it is kept as it was (a run cut off midway runs again from the start).
  void keep_finished_runs() {
    int kept = 0;
    for (const e2e::Run& run : runs_) {
      const std::string metrics = (out_ / "runs" / (run.id + ".jsonl")).string();
      const e2e::Outcome o =
          e2e::read_outcome(metrics, s_.targets.at(run.model), run.workers, step_samples(run));
      if (!o.complete) continue;
      outcomes_[run.index] = o;
      status_[run.index] = "ok";
      if (run.floor) floors_[{run.model, run.repeat}] = o.train_s;
      ++kept;
    }
    std::cout << "gradwire bench e2e: --resume keeps " << kept << " finished runs of "
              << runs_.size() << "; " << runs_.size() - kept << " to run" << std::endl;
  }

  int run_one(const e2e::Run& run, const std::string& self, const std::string& peer) {
    const std::string metrics = (out_ / "runs" / (run.id + ".jsonl")).string();
    const std::string log = (out_ / "logs" / (run.id + ".log")).string();
    fs::remove(metrics);
    std::vector<std::string> argv = {self,          "cluster",
                                     "--hosts",     std::to_string(run.hosts),
                                     "--bandwidth", run.floor ? "unlimited" : run.bandwidth,
                                     "--"};
    const auto command = e2e::run_command(s_, run, self, peer, metrics);
    argv.insert(argv.end(), command.begin(), command.end());
    const e2e::Targets targets = s_.targets.at(run.model);
    const size_t total_steps =
        e2e::run_steps_per_epoch(s_, run) * static_cast<size_t>(e2e::run_epochs(s_, run));

    std::cout << "[" << run.index << "/" << runs_.size() << "] " << describe(run) << ": started"
              << (eta_text().empty() ? "" : "; " + eta_text() + " left in all") << std::endl;
    const auto start = Clock::now();
    const pid_t pid = spawn(argv, e2e::run_environment(run), log);
    int status = 0;
    bool timed_out = false;
    auto next_line = start + std::chrono::seconds(60);
    while (true) {
      const pid_t done = ::waitpid(pid, &status, WNOHANG);
      if (done == pid) break;
      if (g_stop_signal || seconds_since(start) > s_.run_timeout_s) {
        timed_out = !g_stop_signal;
        stop_child(pid, status);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      const auto now = Clock::now();
      if (terminal_ || now >= next_line) {
        const e2e::Outcome o = e2e::read_outcome(metrics, targets, run.workers, step_samples(run));
        // A parameter-server run evaluates after training (train/trainer.h): no steps yet.
        std::string line =
            run.config.ps()
                ? "  training (a parameter-server run is evaluated after training)"
                : "  step " + std::to_string(o.last_step) + "/" + std::to_string(total_steps) +
                      (o.evals.empty()
                           ? std::string()
                           : ", " + targets.metric + " " + targets.show(o.evals.back().second));
        line += ", " + duration(seconds_since(start)) + " in this run";
        const std::string eta = eta_text(seconds_since(start), run);
        if (!eta.empty()) line += ", " + eta + " left in all";
        if (terminal_) {
          std::cout << "\r\033[K" << line << std::flush;
        } else {
          std::cout << line << std::endl;
        }
        next_line = now + std::chrono::seconds(60);
      }
    }
    if (terminal_) std::cout << "\r\033[K";
    const double wall = seconds_since(start);
    const e2e::Outcome o = e2e::read_outcome(metrics, targets, run.workers, step_samples(run));
    outcomes_[run.index] = o;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::string st = "ok";
    if (timed_out) {
      st = "timed out";
    } else if (g_stop_signal) {
      st = "interrupted";
    } else if (code != 0 || !o.complete) {
      st = "failed (exit " + std::to_string(code) + ", see logs/" + run.id + ".log)";
    }
    status_[run.index] = st;
    if (st == "ok") {
      walls_.push_back({run, wall});
      if (run.floor) floors_[{run.model, run.repeat}] = o.train_s;
    }
    const auto reached = [](const std::optional<double>& t) {
      return t ? duration(*t) : std::string("never");
    };
    char summary[256];
    std::snprintf(summary, sizeof summary,
                  "final %s, %s reached at %s, %s at %s, training %.1f s, wall %s",
                  targets.show(o.final_quality).c_str(), targets.show(targets.steep).c_str(),
                  reached(o.time_to_steep_s).c_str(), targets.show(targets.plateau).c_str(),
                  reached(o.time_to_target_s).c_str(), o.train_s, duration(wall).c_str());
    std::cout << "[" << run.index << "/" << runs_.size() << "] " << describe(run) << ": "
              << (st == "ok" ? std::string(summary) : st) << std::endl;
    return st == "ok" ? 0 : 1;
  }

  // SIGTERM (the cluster removes its namespaces and stops its ranks), SIGKILL after 60 s.
  static void stop_child(pid_t pid, int& status) {
    ::kill(pid, SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (Clock::now() < deadline) {
      if (::waitpid(pid, &status, WNOHANG) == pid) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    std::cerr << "gradwire bench e2e: a cluster had to be killed; run 'gradwire cluster "
                 "--cleanup' to remove what it left"
              << std::endl;
  }

  // Time left in the matrix: each remaining run is estimated by the mean wall time of the
  // finished runs most like it (same model and bandwidth, else same model, else any).
  std::string eta_text(double current_elapsed = 0, const e2e::Run& current = e2e::Run{}) const {
    if (walls_.empty()) return "";
    const auto estimate = [&](const e2e::Run& run) {
      double sum[3] = {0, 0, 0};
      int count[3] = {0, 0, 0};
      for (const auto& [done, wall] : walls_) {
        const bool same_model = done.model == run.model;
        const bool same_link = same_model && done.bandwidth == run.bandwidth;
        sum[0] += wall, ++count[0];
        if (same_model) sum[1] += wall, ++count[1];
        if (same_link) sum[2] += wall, ++count[2];
      }
      for (int level = 2; level >= 0; --level) {
        if (count[level]) return sum[level] / count[level];
      }
      return 0.0;
    };
    double left = 0;
    for (const auto& run : runs_) {
      if (status_.count(run.index)) continue;
      double expected = estimate(run);
      if (run.index == current.index) expected = std::max(0.0, expected - current_elapsed);
      left += expected;
    }
    return "about " + duration(left);
  }

  void write_results() {
    e2e::write_csv((out_ / "results.csv").string(), s_, runs_, outcomes_, status_, floors_, "runs");
  }

  void plot() {
    const fs::path script = bench_file("plot_e2e.py");
    const std::string command =
        "/usr/bin/python3 '" + script.string() + "' '" + out_.string() + "'";
    if (std::system(command.c_str()) != 0) {
      throw SystemError("the plots could not be made (" + command + ")");
    }
  }

  const E2eArgs& args_;
  const e2e::Settings& s_;
  std::vector<e2e::Run> runs_;
  fs::path out_;
  bool terminal_;
  std::map<int, e2e::Outcome> outcomes_;
  std::map<int, std::string> status_;
  e2e::Floors floors_;
  std::vector<std::pair<e2e::Run, double>> walls_;
};

// The part of a command line that decides what the matrix measures: without the options
// that only say how it is run or shown (--resume, --no-plots, --run-timeout).
std::string matrix_identity(const std::string& command) {
  std::string identity;
  size_t start = 0;
  while (start < command.size()) {
    size_t next = command.find(" --", start + 1);
    if (next == std::string::npos) next = command.size();
    const std::string segment = command.substr(start, next - start);
    bool presentation = false;
    for (const char* name : {" --resume", " --no-plots", " --run-timeout"}) {
      const std::string n(name);
      presentation = presentation || segment == n || segment.rfind(n + " ", 0) == 0;
    }
    if (!presentation) identity += segment;
    start = next;
  }
  return identity;
}

int run_e2e(E2eArgs& args, const std::vector<std::string>& raw_args) {
  auto& s = args.settings;
  if (args.out.empty()) throw ConfigError("--out DIR is required");
  if (s.hosts < 1) throw ConfigError("--hosts must be at least 1");
  if (s.epochs < 1 || s.seeds < 1 || s.batch_size < 1) {
    throw ConfigError("--epochs, --seeds and --batch-size must be at least 1");
  }
  s.bandwidths = split(args.bandwidths);
  s.models = split(args.models);
  s.configs = args.configs.empty() ? e2e::default_configs() : args.configs;
  if (s.bandwidths.empty() || s.models.empty()) {
    throw ConfigError("--bandwidth and --models must name at least one each");
  }
  for (const auto& bw : s.bandwidths) launch::parse_rate(bw);  // fails early on a typo
  std::vector<std::string> by_accuracy, by_loss;
  for (const auto& model : s.models) {
    (e2e::measured_by_loss(model) ? by_loss : by_accuracy).push_back(model);
  }
  const auto plateau = e2e::parse_targets(args.targets, by_accuracy, "--target-accuracy");
  const auto steep = e2e::parse_targets(args.steep_targets.empty() ? "0.85" : args.steep_targets,
                                        by_accuracy, "--steep-accuracy");
  for (const auto& model : by_accuracy) {
    if (!args.steep_targets.empty() && steep.at(model) > plateau.at(model)) {
      throw ConfigError("--steep-accuracy of " + model + " is above its --target-accuracy");
    }
    s.targets[model] = {std::min(steep.at(model), plateau.at(model)), plateau.at(model)};
  }
  if (!by_loss.empty() && args.loss_targets.empty()) {
    throw ConfigError("--target-loss is required for " + by_loss.front() +
                      " (its metric is the validation loss): e.g. --target-loss " +
                      by_loss.front() + "=1.6");
  }
  const auto loss = e2e::parse_targets(args.loss_targets, by_loss, "--target-loss", true);
  const auto steep_loss =
      e2e::parse_targets(args.steep_losses.empty() ? args.loss_targets : args.steep_losses, by_loss,
                         "--steep-loss", true);
  for (const auto& model : by_loss) {
    if (steep_loss.at(model) < loss.at(model)) {
      throw ConfigError("--steep-loss of " + model + " is below its --target-loss");
    }
    s.targets[model] = {steep_loss.at(model), loss.at(model), "val_loss", false};
  }
  for (const auto& model : s.models) {
    s.train_sizes[model] = e2e::train_samples(model, s.train_limit, "");
  }
  s.weights_dir = (fs::path(args.out) / "weights").string();
  s.compute_floor = !args.no_floor;
  if (args.timeline) s.timeline_dir = (fs::path(args.out) / "timelines").string();
  auto runs = e2e::build_matrix(s);  // ConfigError for a bad configuration, before anything runs
  if (!launch::running_as_root()) {
    throw ConfigError(
        "gradwire bench e2e runs on emulated clusters, which need root: run it as "
        "root, e.g. with sudo");
  }
  bool needs_torch = false;
  for (const auto& run : runs) needs_torch = needs_torch || run.config.runs_peer();
  check_python(needs_torch || !args.no_plots);
  bench_file("ddp_peer.py");
  if (!args.no_plots) bench_file("plot_e2e.py");

  std::string command = "gradwire bench e2e";
  for (const auto& a : raw_args) command += " " + a;
  const fs::path command_file = fs::path(args.out) / "command.txt";
  // A directory without command.txt holds no matrix: --resume then starts one.
  if (args.resume && fs::exists(command_file)) {
    std::ifstream in(command_file);
    std::string earlier;
    std::getline(in, earlier);
    if (earlier.empty() || matrix_identity(earlier) != matrix_identity(command)) {
      throw ConfigError("--resume continues the matrix of the same command, but " +
                        command_file.string() + " holds " +
                        (earlier.empty() ? std::string("nothing") : "'" + earlier + "'") +
                        " and this is '" + command + "'");
    }
  } else {
    fs::create_directories(args.out);
    std::ofstream out(command_file, std::ios::trunc);
    out << command << "\n";  // closed here: a matrix of hours may be killed before it ends
  }
  // The DDP peer starts from gradwire's initial weights where it cannot draw them itself.
  fs::create_directories(s.weights_dir);
  if (!s.timeline_dir.empty()) fs::create_directories(s.timeline_dir);
  for (const auto& model : s.models) {
    for (int r = 1; r <= s.seeds; ++r) {
      train::TrainOptions options;
      options.model = model;
      options.seed = s.seed + r - 1;
      const std::string path = e2e::initial_weights_path(s, model, options.seed);
      if (!path.empty()) train::write_initial_weights(options, path);
    }
  }
  std::cout << "gradwire bench e2e: " << runs.size() << " runs (" << s.models.size() << " models x "
            << s.bandwidths.size() << " bandwidths x " << s.configs.size() << " configurations x "
            << s.seeds << " seeds"
            << (s.compute_floor ? ", plus a compute floor a model and seed" : "")
            << ", round by round) on " << s.hosts << " emulated hosts, " << s.epochs
            << " epochs each, into " << args.out << std::endl;

  struct sigaction action {
  }, old_int{}, old_term{};
  action.sa_handler = remember_stop;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);
  E2eBench bench(args, std::move(runs));
  const int code = bench.run();
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  return code;
}

}  // namespace

void add_bench_e2e_command(CLI::App& bench, int& exit_code) {
  auto args = std::make_shared<E2eArgs>();
  auto& s = args->settings;
  auto* e2e = bench.add_subcommand(
      "e2e",
      "Time to accuracy on emulated clusters (root): gradwire's and PyTorch DDP's "
      "configurations back to back, CSV and plots");
  e2e->add_option("--hosts", s.hosts, "emulated hosts, one worker each")->capture_default_str();
  e2e->add_option("--bandwidth", args->bandwidths, "link rates, comma-separated (tc notation)")
      ->capture_default_str();
  e2e->add_option("--models", args->models, "models, comma-separated")->capture_default_str();
  e2e->add_option(
      "--configs", args->configs,
      "configurations (space-separated): ddp:HOOK (ddp:powersgd:rank=R,start=N[,buckets=ddp]; "
      "ddp:localsgd:period=H,warmup=W: PyTorch's local SGD; "
      "ddp:gradwire-CODEC[+PATH]: DDP with gradwire's hook, the Python module), "
      "ps:UPDATER[:CONSISTENCY], "
      "gossip:TRIGGER (every, period:K, adaptive), gossip-wait:TRIGGER (--gossip-wait), "
      "diloco:KEY=V,.../CODEC (KEY: inner_steps, fragments, delay, outer_lr, outer_momentum, "
      "outer_warmup, and the run's own epochs, batch and lr), "
      "python:diloco:KEY=V,.../CODEC (the Python module's "
      "gradwire.DiLoCo in a PyTorch loop) or a codec spec[+PATH] (PATH: the quantized "
      "path, ring, reduce-scatter or auto); default: "
      "DDP's allreduce, fp16 and PowerSGD (rank 8, 2 dense steps) and gradwire's none, "
      "fp16, int8, PowerSGD (rank 8) and auto");
  e2e->add_option("--epochs", s.epochs)->capture_default_str();
  e2e->add_option("--target-accuracy", args->targets,
                  "the plateau accuracy to time: 0.88, 88, or per model cnn=0.88,cnn-wide=0.89")
      ->capture_default_str();
  e2e->add_option("--steep-accuracy", args->steep_targets,
                  "an accuracy on the steep part of the curve to time too, as --target-accuracy "
                  "(default 0.85, or the target when lower)");
  e2e->add_option("--target-loss", args->loss_targets,
                  "the validation loss to time for the models measured by one (gpt): 1.6 or "
                  "gpt=1.6");
  e2e->add_option("--steep-loss", args->steep_losses,
                  "a higher validation loss to time too, as --target-loss (default: the target)");
  e2e->add_option("--seeds,--runs", s.seeds,
                  "seeds of each configuration, run in rounds: round r runs every configuration "
                  "and the compute floor with seed SEED + r - 1 (A B A B); the tables give the "
                  "mean and range over seeds, and a verdict from 3 seeds on")
      ->capture_default_str();
  e2e->add_option("--out", args->out, "output directory")->required();
  e2e->add_option("--batch-size", s.batch_size, "per worker")->capture_default_str();
  e2e->add_option_function<double>(
      "--lr", [&s](double v) { s.lr = v; }, "learning rate of every run (default: each model's)");
  e2e->add_option_function<double>(
      "--momentum", [&s](double v) { s.momentum = v; },
      "SGD momentum of every synchronous run (default: the recipe's, 0.9)");
  e2e->add_option("--accumulate", s.accumulate, "micro-batches per step, both sides")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  e2e->add_option("--async-momentum", s.async_momentum,
                  "momentum of the asynchronous (ps) configurations")
      ->capture_default_str();
  e2e->add_option("--seed", s.seed)->capture_default_str();
  e2e->add_option("--eval-every", s.eval_every, "steps between evaluations (0: a quarter epoch)")
      ->capture_default_str();
  e2e->add_option("--train-limit", s.train_limit, "use the first N training samples (0: all)");
  e2e->add_option("--test-limit", s.test_limit, "use the first N test samples (0: all)");
  e2e->add_option("--run-timeout", s.run_timeout_s, "seconds before a run is stopped")
      ->capture_default_str();
  e2e->add_flag("--no-floor", args->no_floor, "skip the compute-floor runs (none, unshaped)");
  e2e->add_flag("--no-plots", args->no_plots, "write the CSV only");
  e2e->add_flag("--timeline", args->timeline,
                "every run but ps and gossip records its timeline to OUT/timelines/ID.trace.json "
                "(bench/timeline/step_breakdown.py sums them up)");
  e2e->add_flag("--flush-denormal", s.flush_denormal,
                "every process of every run (gradwire's and PyTorch's alike) flushes subnormal "
                "floats to zero: CPU step times without their slow path; state it beside the "
                "tables");
  e2e->add_flag("--resume", args->resume,
                "keep the runs already finished in --out (by the same command) and run the rest");
  e2e->callback([args, e2e, &exit_code] {
    // The command as given, for command.txt beside the results.
    std::vector<std::string> words;
    for (const auto* option : e2e->get_options()) {
      if (option->count() == 0) continue;
      std::string word = option->get_name();
      if (option->get_expected_min() > 0) {
        for (const auto& r : option->results()) word += " " + r;
      }
      words.push_back(word);
    }
    exit_code = run_e2e(*args, words);
  });
}

}  // namespace gradwire::cli
