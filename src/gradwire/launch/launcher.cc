#include "gradwire/launch/launcher.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string_view>
#include <utility>

#include "gradwire/core/error.h"
#include "gradwire/core/failure_report.h"
#include "gradwire/launch/child_start.h"
#include "gradwire/launch/line_prefixer.h"
#include "gradwire/launch/output_sink.h"
#include "gradwire/launch/posix_fd.h"
#include "gradwire/launch/signal_relay.h"

namespace gradwire::launch {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kReadChunkBytes = 64 * 1024;
// Poll wakes at least this often, so children are reaped even if SIGCHLD is blocked in
// every thread of the host program.
constexpr std::chrono::milliseconds kMaxPollWait{250};
// Once every rank and its process group are gone, how long output pipes still held by
// processes that left their rank's group (setsid) are read before being abandoned.
constexpr std::chrono::milliseconds kPipeLinger{1000};

// ---- Supervision -------------------------------------------------------------------------

struct RankStream {
  UniqueFd fd;
  OutputSink* sink = nullptr;
  LinePrefixer lines;
};

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;  // also the id of the rank's process group
  bool running = false;
  // Set while processes left behind in the rank's group after it exited are being stopped.
  std::optional<Clock::time_point> leftover_kill_at;
  std::vector<RankStream> streams;  // stdout, stderr
};

class Supervisor {
 public:
  Supervisor(const LaunchOptions& options, int master_port, int restart_count)
      : options_(options),
        master_port_(master_port),
        restart_count_(restart_count),
        stdout_sink_(STDOUT_FILENO, &progress_visible_),
        stderr_sink_(STDERR_FILENO, &progress_visible_) {}

  // Whatever happens (an exception included), no rank outlives the supervisor.
  ~Supervisor() {
    for (RankProcess& process : ranks_) {
      if (!process.running && !process.leftover_kill_at) continue;
      ::killpg(process.pid, SIGKILL);
      if (process.running) wait_blocking(process.pid);
    }
    if (!report_dir_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(report_dir_, ignored);
    }
  }

  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  LaunchResult run() {
    std::fflush(stdout);
    std::fflush(stderr);
    make_report_dir();
    start_ranks();
    supervise();
    stdout_sink_.finish();
    stderr_sink_.finish();
    return result();
  }

 private:
  void start_ranks() {
    const Environment inherited = inherited_environment();
    std::vector<char*> argv;
    for (const std::string& word : options_.command)
      argv.push_back(const_cast<char*>(word.c_str()));
    argv.push_back(nullptr);

    // Ranks run in background process groups: reading a terminal would stop them (SIGTTIN).
    UniqueFd null_stdin;
    if (::isatty(STDIN_FILENO) == 1) {
      null_stdin.reset(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      if (!null_stdin.valid()) throw SystemError(errno_message("could not open /dev/null", errno));
    }

    for (const std::string& path : options_.host_netns) {
      netns_.emplace_back(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      if (!netns_.back().valid()) {
        throw SystemError(errno_message("could not open the network namespace " + path, errno));
      }
    }

    ranks_.reserve(static_cast<std::size_t>(options_.num_processes));
    for (int local = 0; local < options_.num_processes; ++local) {
      if (stopping_) break;  // a rank failed to start, or the launcher was interrupted
      start_rank(local, inherited, argv.data(), null_stdin.get());
      handle_signals();
    }
  }

  // A directory for the ranks' failure reports, removed with the supervisor. Without one
  // (no writable temporary directory) failures are named by exit order alone.
  void make_report_dir() {
    const std::filesystem::path base = std::filesystem::temp_directory_path();
    std::string pattern = (base / "gradwire-run.XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) report_dir_ = pattern;
  }

  std::string report_path(int rank) const {
    return report_dir_.empty() ? "" : report_dir_ + "/rank" + std::to_string(rank);
  }

  // `local`: the index of the rank among this launcher's; its global rank is offset by the
  // ranks of the nodes before this one.
  void start_rank(int local, const Environment& inherited, char* const* argv, int stdin_fd) {
    Environment env = inherited;
    const int rank = options_.node_rank * options_.num_processes + local;
    const int world_size = options_.nnodes * options_.num_processes;
    const int per_host = ranks_per_host();
    const int group_rank = options_.nnodes > 1 ? options_.node_rank : local / per_host;
    const int groups = options_.nnodes > 1 ? options_.nnodes : options_.num_processes / per_host;
    env["RANK"] = std::to_string(rank);
    env["WORLD_SIZE"] = std::to_string(world_size);
    env["ROLE_RANK"] = env["RANK"];
    env["ROLE_WORLD_SIZE"] = env["WORLD_SIZE"];
    env["LOCAL_RANK"] = std::to_string(local % per_host);
    env["LOCAL_WORLD_SIZE"] = std::to_string(per_host);
    env["GROUP_RANK"] = std::to_string(group_rank);
    env["GROUP_WORLD_SIZE"] = std::to_string(groups);
    env["MASTER_ADDR"] = options_.master_addr;
    env["MASTER_PORT"] = std::to_string(master_port_);
    if (options_.threads_per_process && inherited.count("OMP_NUM_THREADS") == 0) {
      env["OMP_NUM_THREADS"] = std::to_string(*options_.threads_per_process);
    }
    for (const auto& [key, value] : options_.extra_env) env[key] = value;
    env["GRADWIRE_ERROR_FILE"] = report_path(rank);
    env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(restart_count_);
    env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(options_.max_restarts);

    ChildPlan plan;
    for (const auto& [key, value] : env) plan.env_storage.push_back(key + "=" + value);
    for (std::string& entry : plan.env_storage) plan.envp.push_back(entry.data());
    plan.envp.push_back(nullptr);
    plan.argv = argv;
    plan.launcher_pid = ::getpid();
    plan.stdin_fd = stdin_fd;
    plan.ignore_sigint = relay_.was_ignored(SIGINT);
    plan.ignore_sigterm = relay_.was_ignored(SIGTERM);
    if (!netns_.empty()) plan.netns_fd = netns_[local / per_host].get();

    const std::string what = "rank " + std::to_string(rank);
    Pipe out = make_pipe(what + " stdout");
    Pipe err = make_pipe(what + " stderr");
    Pipe exec_report = make_pipe(what + " start-up");
    plan.stdout_fd = out.write.get();
    plan.stderr_fd = err.write.get();
    plan.exec_report_fd = exec_report.write.get();

    // Book-keeping first, so nothing between fork() and `running = true` can throw.
    RankProcess& process = ranks_.emplace_back();
    process.rank = rank;
    const std::string prefix = "[" + std::to_string(rank) + "] ";
    process.streams.push_back(
        {std::move(out.read), &stdout_sink_, LinePrefixer(prefix, stdout_sink_.terminal())});
    process.streams.push_back(
        {std::move(err.read), &stderr_sink_, LinePrefixer(prefix, stderr_sink_.terminal())});
    for (RankStream& stream : process.streams) set_nonblocking(stream.fd.get());

    // Blocked across fork() so that no handler of the launcher runs in the child.
    sigset_t all, previous;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, &previous);
    pid_t pid = ::fork();
    if (pid == 0) exec_child(plan);
    int fork_error = errno;
    ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    if (pid < 0) {
      ranks_.pop_back();
      throw SystemError(errno_message(
          "could not start " + what + " of " + std::to_string(options_.num_processes) + " (fork)",
          fork_error));
    }
    // The child does the same; doing it here too means killpg() works from this line on,
    // whichever of the two runs first.
    ::setpgid(pid, pid);
    process.pid = pid;
    process.running = true;
    out.write.reset();
    err.write.reset();
    exec_report.write.reset();

    // The report pipe closes at a successful exec; otherwise it says what failed.
    StartFailure failure{};
    ssize_t n;
    do {
      n = ::read(exec_report.read.get(), &failure, sizeof failure);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof failure)) {
      int status = wait_blocking(pid);
      process.running = false;
      record_failure(process, status,
                     failure.stage == StartFailure::kNetns
                         ? "could not enter the network namespace " +
                               options_.host_netns[local / per_host] + ": " +
                               std::strerror(failure.error)
                         : "could not execute '" + options_.command.front() +
                               "': " + std::strerror(failure.error));
    }
  }

  int ranks_per_host() const {
    return options_.ranks_per_host > 0 ? options_.ranks_per_host : options_.num_processes;
  }

  void supervise() {
    std::optional<Clock::time_point> linger_until;
    while (true) {
      handle_signals();
      reap();
      Clock::time_point now = Clock::now();
      if (stopping_ && !killed_ && now >= kill_at_) kill_everything();
      finish_leftovers(now);

      bool any_running =
          std::any_of(ranks_.begin(), ranks_.end(), [](const RankProcess& p) { return p.running; });
      bool any_leftovers = std::any_of(ranks_.begin(), ranks_.end(), [](const RankProcess& p) {
        return p.leftover_kill_at.has_value();
      });
      bool any_open = any_stream_open();
      if (!any_running && !any_leftovers) {
        if (!any_open) return;
        if (!linger_until) linger_until = now + kPipeLinger;
        if (now >= *linger_until) {
          close_all_streams();
          return;
        }
      }

      std::vector<pollfd> fds;
      std::vector<RankStream*> fd_streams;
      fds.push_back({relay_.fd(), POLLIN, 0});
      for (RankProcess& process : ranks_) {
        for (RankStream& stream : process.streams) {
          if (!stream.fd.valid()) continue;
          fds.push_back({stream.fd.get(), POLLIN, 0});
          fd_streams.push_back(&stream);
        }
      }
      Clock::time_point wake = now + kMaxPollWait;
      if (stopping_ && !killed_) wake = std::min(wake, kill_at_);
      for (const RankProcess& process : ranks_) {
        if (process.leftover_kill_at) wake = std::min(wake, *process.leftover_kill_at);
      }
      if (linger_until) wake = std::min(wake, *linger_until);
      auto wait = std::chrono::ceil<std::chrono::milliseconds>(wake - now);
      int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long>(0, wait.count())));
      if (ready < 0) {
        if (errno == EINTR) continue;
        throw SystemError(errno_message("the launcher could not wait for its ranks (poll)", errno));
      }
      for (std::size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) read_stream(*fd_streams[i - 1]);
      }
    }
  }

  void handle_signals() {
    for (int signal_number : relay_.take()) {
      if (signal_number != SIGINT && signal_number != SIGTERM) continue;  // SIGCHLD: reap()
      if (!first_failure_ && !interrupt_signal_) interrupt_signal_ = signal_number;
      // Forward the signal itself (a rank may handle SIGINT differently from SIGTERM);
      // SIGKILL follows after the grace period.
      begin_stop(signal_number);
    }
  }

  void reap() {
    // First collect every rank that has exited, then judge them: ranks found dead in the
    // same pass may have died in any order (a rank that loses its peer fails a moment
    // after it), so all of them are reported, and none of them can have been stopped by a
    // signal this pass sent, because stopping starts only after the collection.
    struct Exit {
      RankProcess* process;
      int status;
      bool status_lost;
    };
    std::vector<Exit> exits;
    for (RankProcess& process : ranks_) {
      if (!process.running) continue;
      int status = 0;
      pid_t done;
      do {
        done = ::waitpid(process.pid, &status, WNOHANG);
      } while (done < 0 && errno == EINTR);
      if (done == 0) continue;
      process.running = false;
      // done < 0 (ECHILD): another part of the host program reaped it; its status is lost.
      exits.push_back({&process, status, done < 0});
    }
    const bool stopping_before_pass = stopping_;
    for (const Exit& exit : exits) {
      if (stopping_before_pass) break;
      if (exit.status_lost) {
        record_failure_message(*exit.process, 1,
                               "rank " + std::to_string(exit.process->rank) +
                                   " was reaped by another part of the program");
      } else if (!(WIFEXITED(exit.status) && WEXITSTATUS(exit.status) == 0)) {
        if (options_.may_fail.count(exit.process->rank)) {
          tolerated_.push_back(describe_exit(*exit.process, exit.status));
          std::fprintf(stderr, "gradwire run: %s; the job goes on without it\n",
                       tolerated_.back().c_str());
          std::fflush(stderr);
        } else {
          record_failure(*exit.process, exit.status, "");
        }
      }
    }
    for (const Exit& exit : exits) {
      if (!exit.status_lost && !killed_) stop_leftovers(*exit.process);
    }
  }

  // A rank's main process has exited: anything it left in its process group would outlive
  // the launcher, so it gets SIGTERM now and SIGKILL after the grace period.
  void stop_leftovers(RankProcess& process) {
    if (!group_exists(process.pid)) return;
    ::killpg(process.pid, SIGTERM);
    process.leftover_kill_at = Clock::now() + options_.grace_period;
  }

  void finish_leftovers(Clock::time_point now) {
    for (RankProcess& process : ranks_) {
      if (!process.leftover_kill_at) continue;
      if (!group_exists(process.pid)) {
        process.leftover_kill_at.reset();
      } else if (now >= *process.leftover_kill_at) {
        ::killpg(process.pid, SIGKILL);
        process.leftover_kill_at.reset();
      }
    }
  }

  static bool group_exists(pid_t group) { return ::killpg(group, 0) == 0 || errno == EPERM; }

  static std::string describe_exit(const RankProcess& process, int status) {
    std::string message = "rank " + std::to_string(process.rank);
    if (WIFEXITED(status)) {
      return message + " exited with status " + std::to_string(WEXITSTATUS(status));
    }
    const int signal_number = WTERMSIG(status);
    return message + " was killed by signal " + std::to_string(signal_number) + " (" +
           signal_name(signal_number) + (WCOREDUMP(status) ? "; core dumped" : "") + ")";
  }

  void record_failure(const RankProcess& process, int status, const std::string& detail) {
    std::string message = describe_exit(process, status);
    const int exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (!detail.empty()) message += " (" + detail + ")";
    record_failure_message(process, exit_code, message);
  }

  void record_failure_message(const RankProcess& process, int exit_code, std::string message) {
    if (!first_failure_) {
      first_failure_ = Failure{process.rank, exit_code, std::move(message)};
    } else {
      also_failed_.push_back(std::move(message));
    }
    begin_stop(SIGTERM);
  }

  // Sends `signal_number` to every rank still running; the first call starts the grace
  // period, after which everything left is killed.
  void begin_stop(int signal_number) {
    if (!stopping_) {
      stopping_ = true;
      kill_at_ = Clock::now() + options_.grace_period;
    }
    if (killed_) return;
    for (const RankProcess& process : ranks_) {
      if (process.running || process.leftover_kill_at) ::killpg(process.pid, signal_number);
    }
    if (options_.grace_period.count() <= 0) kill_everything();
  }

  void kill_everything() {
    killed_ = true;
    for (RankProcess& process : ranks_) {
      if (process.running || process.leftover_kill_at) ::killpg(process.pid, SIGKILL);
      process.leftover_kill_at.reset();
    }
  }

  bool any_stream_open() const {
    for (const RankProcess& process : ranks_) {
      for (const RankStream& stream : process.streams) {
        if (stream.fd.valid()) return true;
      }
    }
    return false;
  }

  void read_stream(RankStream& stream) {
    char buffer[kReadChunkBytes];
    ssize_t n = ::read(stream.fd.get(), buffer, sizeof buffer);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {
      close_stream(stream);
      return;
    }
    std::string_view bytes(buffer, static_cast<std::size_t>(n));
    if (!options_.prefix_output) {
      stream.sink->write_raw(bytes);
      return;
    }
    records_.clear();
    stream.lines.feed(bytes, records_);
    for (const OutputRecord& record : records_) stream.sink->write_record(record);
  }

  void close_stream(RankStream& stream) {
    if (options_.prefix_output) {
      records_.clear();
      stream.lines.finish(records_);
      for (const OutputRecord& record : records_) stream.sink->write_record(record);
    }
    stream.fd.reset();
  }

  // Reads what is already buffered in every open pipe, then closes them.
  void close_all_streams() {
    for (RankProcess& process : ranks_) {
      for (RankStream& stream : process.streams) {
        for (int chunk = 0; chunk < 64 && stream.fd.valid(); ++chunk) {
          pollfd ready{stream.fd.get(), POLLIN, 0};
          if (::poll(&ready, 1, 0) <= 0 || (ready.revents & POLLIN) == 0) break;
          read_stream(stream);
        }
        if (stream.fd.valid()) close_stream(stream);
      }
    }
  }

  static int wait_blocking(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
  }

  LaunchResult result() const {
    LaunchResult result;
    result.tolerated = tolerated_;
    if (first_failure_) {
      result.exit_code = first_failure_->exit_code != 0 ? first_failure_->exit_code : 1;
      result.failed_rank = first_failure_->rank;
      result.message = first_failure_->message;
      for (const std::string& other : also_failed_) result.message += "; " + other;
      if (auto cause = blamed_root_cause()) {
        result.failed_rank = cause->rank;
        result.message = cause->line + "; " + result.message;
      }
    } else if (interrupt_signal_) {
      result.exit_code = 128 + *interrupt_signal_;
      result.message = "interrupted by signal " + std::to_string(*interrupt_signal_) + " (" +
                       signal_name(*interrupt_signal_) + ")";
    }
    return result;
  }

  // The rank the ranks' failure reports blame, and a line saying so (failure_report.h).
  std::optional<RootCause> blamed_root_cause() const {
    std::map<int, FailureReport> reports;
    for (const RankProcess& process : ranks_) {
      if (auto report = read_failure_report(report_path(process.rank))) {
        reports.emplace(process.rank, std::move(*report));
      }
    }
    return root_cause(reports);
  }

  struct Failure {
    int rank;
    int exit_code;
    std::string message;
  };

  const LaunchOptions& options_;
  const int master_port_;
  const int restart_count_;  // attempts before this one
  SignalRelay relay_;
  bool progress_visible_ = false;  // shared: stdout and stderr usually are one terminal
  OutputSink stdout_sink_;
  OutputSink stderr_sink_;
  std::vector<RankProcess> ranks_;
  std::vector<UniqueFd> netns_;        // one per host, when ranks run in network namespaces
  std::string report_dir_;             // the ranks' failure reports; empty: none
  std::vector<OutputRecord> records_;  // scratch, reused for every read
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point kill_at_;
  std::optional<Failure> first_failure_;
  std::vector<std::string> tolerated_;
  std::vector<std::string> also_failed_;  // failed in the same reap pass as the first
  std::optional<int> interrupt_signal_;
};

}  // namespace

LaunchResult run_processes(const LaunchOptions& options) {
  validate(options);
  // The signal relay is process-wide, so runs in one process take turns.
  static std::mutex run_mutex;
  std::lock_guard<std::mutex> lock(run_mutex);
  std::vector<std::string> restarted_after;
  for (int attempt = 0;; ++attempt) {
    // A fresh port each time one is picked: the last attempt's may linger in TIME_WAIT.
    const int port =
        options.master_port != 0 ? options.master_port : pick_free_port(options.master_addr);
    Supervisor supervisor(options, port, attempt);
    LaunchResult result = supervisor.run();
    result.restarted_after = restarted_after;
    // Only a failed rank restarts the job; an interrupted launcher stops.
    if (result.exit_code == 0 || !result.failed_rank || attempt >= options.max_restarts) {
      return result;
    }
    restarted_after.push_back(result.message);
    std::fprintf(stderr, "gradwire run: %s; restarting every rank (restart %d of at most %d)\n",
                 result.message.c_str(), attempt + 1, options.max_restarts);
    std::fflush(stderr);
  }
}

int pick_free_port(const std::string& addr) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(addr.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    throw ConfigError("the master address '" + addr + "' is not an IPv4 address of this machine (" +
                      ::gai_strerror(rc) + ")");
  }
  sockaddr_in address{};
  std::memcpy(&address, found->ai_addr, sizeof address);
  ::freeaddrinfo(found);
  address.sin_port = 0;

  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!sock.valid()) throw SystemError(errno_message("could not create a socket", errno));
  if (::bind(sock.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
    throw SystemError(errno_message("could not pick a free port on " + addr, errno) +
                      "; use an address of this machine or give the master port explicitly");
  }
  socklen_t length = sizeof address;
  if (::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw SystemError(errno_message("could not read the port chosen on " + addr, errno));
  }
  return ntohs(address.sin_port);
}

}  // namespace gradwire::launch
