#include "gradwire/launch/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gradwire/core/error.h"

#ifndef GRADWIRE_TEST_HELPER
#error "GRADWIRE_TEST_HELPER must give the path of the gradwire_test_helper binary"
#endif

namespace gradwire::launch {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kHelper = GRADWIRE_TEST_HELPER;

LaunchOptions helper_options(int num_processes, std::vector<std::string> args) {
  LaunchOptions options;
  options.num_processes = num_processes;
  options.command = {kHelper};
  options.command.insert(options.command.end(), args.begin(), args.end());
  options.grace_period = 2000ms;
  return options;
}

// ---- Running the launcher in a child process ------------------------------------------
//
// run_processes() writes to the process's own stdout/stderr and handles its signals, so each
// test runs it in a forked child whose output is captured. The child dies with the test
// (PR_SET_PDEATHSIG), and the ranks die with the child, whatever happens.

struct Outcome {
  bool returned = false;  // run_processes() returned a result
  std::string exception;  // its what() when it threw instead
  LaunchResult result;
  int launcher_status = 0;  // wait status of the launcher process
  bool timed_out = false;
  std::string out;
  std::string err;
  std::chrono::milliseconds elapsed{0};
};

struct ChildSetup {
  bool stdout_is_terminal = false;
  // Set (or, with nullopt, unset) in the launcher's environment before it runs.
  std::map<std::string, std::optional<std::string>> launcher_env;
  // Called whenever stdout grows, with the launcher's pid; tests send it signals from here.
  std::function<void(pid_t launcher, const std::string& out)> on_output;
  std::chrono::milliseconds timeout = 20s;
};

void write_fully(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

[[noreturn]] void launcher_child(const LaunchOptions& options, const ChildSetup& setup, int out_fd,
                                 int err_fd, int result_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
  for (const auto& [name, value] : setup.launcher_env) {
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
  std::string report;
  try {
    LaunchResult result = run_processes(options);
    report = "R\n" + std::to_string(result.exit_code) + "\n" +
             std::to_string(result.failed_rank.value_or(-1)) + "\n" +
             std::to_string(result.restarted_after.size()) + "\n";
    for (const std::string& message : result.restarted_after) report += message + "\n";
    report += result.message;
  } catch (const std::exception& e) {
    report = std::string("E\n") + e.what();
  }
  write_fully(result_fd, report);
  ::_exit(0);
}

void parse_report(const std::string& report, Outcome& outcome) {
  std::istringstream in(report);
  std::string kind;
  std::getline(in, kind);
  if (kind == "E") {
    outcome.exception = report.substr(2);
  } else if (kind == "R") {
    std::string exit_code, failed_rank, restarts;
    std::getline(in, exit_code);
    std::getline(in, failed_rank);
    std::getline(in, restarts);
    outcome.result.restarted_after.resize(std::stoul(restarts));
    for (std::string& message : outcome.result.restarted_after) std::getline(in, message);
    std::getline(in, outcome.result.message, '\0');
    outcome.result.exit_code = std::stoi(exit_code);
    if (std::stoi(failed_rank) >= 0) outcome.result.failed_rank = std::stoi(failed_rank);
    outcome.returned = true;
  }
}

// A pseudo-terminal in raw mode (no "\n" -> "\r\n"), for tests of terminal output.
struct Terminal {
  int master = -1;
  int slave = -1;
};

Terminal open_terminal() {
  Terminal terminal;
  terminal.master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (terminal.master < 0 || ::grantpt(terminal.master) != 0 || ::unlockpt(terminal.master) != 0) {
    return terminal;
  }
  terminal.slave = ::open(::ptsname(terminal.master), O_RDWR | O_NOCTTY | O_CLOEXEC);
  termios settings{};
  if (terminal.slave >= 0 && ::tcgetattr(terminal.slave, &settings) == 0) {
    ::cfmakeraw(&settings);
    ::tcsetattr(terminal.slave, TCSANOW, &settings);
  }
  return terminal;
}

Outcome launch(const LaunchOptions& options, const ChildSetup& setup = {}) {
  Outcome outcome;
  int out_pipe[2], err_pipe[2], result_pipe[2];
  EXPECT_EQ(::pipe2(out_pipe, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(err_pipe, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(result_pipe, O_CLOEXEC), 0);
  int out_read = out_pipe[0];
  int out_write = out_pipe[1];
  if (setup.stdout_is_terminal) {
    Terminal terminal = open_terminal();
    EXPECT_GE(terminal.slave, 0) << "could not open a pseudo-terminal";
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    out_read = terminal.master;
    out_write = terminal.slave;
  }

  Clock::time_point start = Clock::now();
  pid_t launcher = ::fork();
  if (launcher == 0) launcher_child(options, setup, out_write, err_pipe[1], result_pipe[1]);
  ::close(out_write);
  ::close(err_pipe[1]);
  ::close(result_pipe[1]);
  EXPECT_GT(launcher, 0);

  std::string report;
  struct Source {
    int fd;
    std::string* text;
  };
  std::vector<Source> sources = {
      {out_read, &outcome.out}, {err_pipe[0], &outcome.err}, {result_pipe[0], &report}};
  Clock::time_point deadline = start + setup.timeout;
  while (!sources.empty()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms) {
      outcome.timed_out = true;
      ::kill(launcher, SIGKILL);
      break;
    }
    std::vector<pollfd> fds;
    for (const Source& source : sources) fds.push_back({source.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), static_cast<int>(left.count())) < 0) continue;
    bool out_grew = false;
    for (std::size_t i = fds.size(); i-- > 0;) {
      if (fds[i].revents == 0) continue;
      char buffer[65536];
      ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        sources[i].text->append(buffer, static_cast<std::size_t>(n));
        out_grew = out_grew || sources[i].text == &outcome.out;
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {  // EIO: terminal closed
        ::close(fds[i].fd);
        sources.erase(sources.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    if (out_grew && setup.on_output) setup.on_output(launcher, outcome.out);
  }
  for (const Source& source : sources) ::close(source.fd);
  ::waitpid(launcher, &outcome.launcher_status, 0);
  outcome.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
  parse_report(report, outcome);
  return outcome;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

int count_of(const std::string& text, const std::string& needle) {
  int count = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

// Pids the helper announced with "pid=P" or "grandchild=P".
std::vector<pid_t> announced_pids(const std::string& out) {
  std::vector<pid_t> pids;
  static const std::regex kPid(R"((?:pid|grandchild)=(\d+))");
  for (std::sregex_iterator it(out.begin(), out.end(), kPid), end; it != end; ++it) {
    pids.push_back(static_cast<pid_t>(std::stol((*it)[1].str())));
  }
  return pids;
}

// Gone, or a zombie waiting for whoever adopted it.
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  std::size_t paren = text.rfind(')');
  return text.empty() ||
         (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z');
}

// Expects every announced process to be gone within `within`; kills stragglers so a failing
// test leaves nothing behind.
void expect_all_gone(const Outcome& outcome, std::size_t expected_count,
                     std::chrono::milliseconds within = 3s) {
  std::vector<pid_t> pids = announced_pids(outcome.out);
  EXPECT_EQ(pids.size(), expected_count) << outcome.out;
  Clock::time_point deadline = Clock::now() + within;
  for (pid_t pid : pids) {
    while (!process_gone(pid) && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
    EXPECT_TRUE(process_gone(pid)) << "process " << pid << " outlived the launcher";
    if (!process_gone(pid)) ::kill(pid, SIGKILL);
  }
}

void expect_launcher_returned(const Outcome& outcome) {
  EXPECT_FALSE(outcome.timed_out) << "stdout:\n" << outcome.out << "\nstderr:\n" << outcome.err;
  EXPECT_TRUE(outcome.returned) << "exception: " << outcome.exception << "\nstderr:\n"
                                << outcome.err;
}

// ---- Environment -----------------------------------------------------------------------

std::map<std::string, std::string> variables_of_rank(const std::string& out, int rank) {
  std::map<std::string, std::string> variables;
  const std::string prefix = "[" + std::to_string(rank) + "] ";
  for (const std::string& line : lines_of(out)) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::string entry = line.substr(prefix.size());
    std::size_t equals = entry.find('=');
    if (equals != std::string::npos) variables[entry.substr(0, equals)] = entry.substr(equals + 1);
  }
  return variables;
}

TEST(Launcher, GivesEveryRankTheTorchrunEnvironment) {
  LaunchOptions options = helper_options(3, {"env"});
  options.threads_per_process = 1;
  options.extra_env = {{"GRADWIRE_TEST_EXTRA", "yes"}};
  ChildSetup setup;
  setup.launcher_env = {{"OMP_NUM_THREADS", std::nullopt}};
  Outcome outcome = launch(options, setup);
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 0) << outcome.result.message;

  std::set<std::string> ports;
  for (int rank = 0; rank < 3; ++rank) {
    auto variables = variables_of_rank(outcome.out, rank);
    EXPECT_EQ(variables["RANK"], std::to_string(rank));
    EXPECT_EQ(variables["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(variables["WORLD_SIZE"], "3");
    EXPECT_EQ(variables["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(variables["GROUP_RANK"], "0");
    EXPECT_EQ(variables["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(variables["OMP_NUM_THREADS"], "1");
    EXPECT_EQ(variables["GRADWIRE_TEST_EXTRA"], "yes");
    ports.insert(variables["MASTER_PORT"]);
  }
  ASSERT_EQ(ports.size(), 1u) << "ranks disagree on MASTER_PORT";
  int port = std::stoi(*ports.begin());
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
}

TEST(Launcher, KeepsTheLaunchersOmpNumThreadsAndAnExplicitPort) {
  LaunchOptions options = helper_options(2, {"env"});
  options.threads_per_process = 1;
  options.master_port = 29517;
  ChildSetup setup;
  setup.launcher_env = {{"OMP_NUM_THREADS", "7"}};
  Outcome outcome = launch(options, setup);
  expect_launcher_returned(outcome);
  for (int rank = 0; rank < 2; ++rank) {
    auto variables = variables_of_rank(outcome.out, rank);
    EXPECT_EQ(variables["OMP_NUM_THREADS"], "7");
    EXPECT_EQ(variables["MASTER_PORT"], "29517");
  }
}

// One node of a multi-node job: its ranks are numbered after the nodes before it.
TEST(Launcher, NumbersTheRanksOfOneNodeOfSeveral) {
  LaunchOptions options = helper_options(2, {"env"});
  options.nnodes = 3;
  options.node_rank = 1;
  options.master_port = 29518;
  Outcome outcome = launch(options);
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 0) << outcome.result.message;
  for (int local = 0; local < 2; ++local) {
    const int rank = 2 + local;
    auto variables = variables_of_rank(outcome.out, rank);
    EXPECT_EQ(variables["RANK"], std::to_string(rank));
    EXPECT_EQ(variables["ROLE_RANK"], std::to_string(rank));
    EXPECT_EQ(variables["LOCAL_RANK"], std::to_string(local));
    EXPECT_EQ(variables["WORLD_SIZE"], "6");
    EXPECT_EQ(variables["ROLE_WORLD_SIZE"], "6");
    EXPECT_EQ(variables["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(variables["GROUP_RANK"], "1");
    EXPECT_EQ(variables["GROUP_WORLD_SIZE"], "3");
    EXPECT_EQ(variables["MASTER_PORT"], "29518");
  }
}

TEST(Launcher, RefusesAMultiNodeJobWithoutAPortOrWithABadNodeRank) {
  LaunchOptions options = helper_options(2, {"env"});
  options.nnodes = 2;
  EXPECT_THROW(run_processes(options), ConfigError);  // no master port
  options.master_port = 29519;
  options.node_rank = 2;
  EXPECT_THROW(run_processes(options), ConfigError);
}

TEST(Launcher, LeavesOmpNumThreadsAloneUnlessAsked) {
  ChildSetup setup;
  setup.launcher_env = {{"OMP_NUM_THREADS", std::nullopt}};
  Outcome outcome = launch(helper_options(1, {"env"}), setup);
  expect_launcher_returned(outcome);
  EXPECT_EQ(variables_of_rank(outcome.out, 0)["OMP_NUM_THREADS"], "<unset>");
}

// ---- Output ----------------------------------------------------------------------------

TEST(Launcher, PrefixesLinesAndKeepsStdoutAndStderrApart) {
  Outcome outcome = launch(helper_options(2, {"print", "3"}));
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 0);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> out, err;
    const std::string prefix = "[" + std::to_string(rank) + "] ";
    for (const std::string& line : lines_of(outcome.out)) {
      if (line.rfind(prefix, 0) == 0) out.push_back(line);
    }
    for (const std::string& line : lines_of(outcome.err)) {
      if (line.rfind(prefix, 0) == 0) err.push_back(line);
    }
    const std::string r = std::to_string(rank);
    EXPECT_EQ(out, (std::vector<std::string>{prefix + "out " + r + " 0", prefix + "out " + r + " 1",
                                             prefix + "out " + r + " 2"}));
    EXPECT_EQ(err, (std::vector<std::string>{prefix + "err " + r + " 0", prefix + "err " + r + " 1",
                                             prefix + "err " + r + " 2"}));
  }
  EXPECT_EQ(lines_of(outcome.out).size(), 6u) << outcome.out;
  EXPECT_EQ(lines_of(outcome.err).size(), 6u) << outcome.err;
}

TEST(Launcher, LinesOfManyRanksNeverInterleave) {
  constexpr int kRanks = 4;
  constexpr int kLines = 400;
  Outcome outcome = launch(helper_options(kRanks, {"burst", std::to_string(kLines), "300"}));
  expect_launcher_returned(outcome);
  std::vector<int> next_line(kRanks, 0);
  int bad = 0;
  for (const std::string& line : lines_of(outcome.out)) {
    // "[r] rank r line i " followed by 300 times the rank's letter
    int prefix_rank = -1, rank = -1, index = -1, consumed = 0;
    bool ok = std::sscanf(line.c_str(), "[%d] rank %d line %d %n", &prefix_rank, &rank, &index,
                          &consumed) == 3 &&
              prefix_rank == rank && rank >= 0 && rank < kRanks &&
              line.substr(static_cast<std::size_t>(consumed)) == std::string(300, 'a' + rank);
    if (!ok) {
      if (++bad < 5) ADD_FAILURE() << "mangled line: " << line.substr(0, 80);
      continue;
    }
    EXPECT_EQ(index, next_line[rank]) << "rank " << rank << " lines out of order";
    next_line[rank] = index + 1;
  }
  EXPECT_EQ(bad, 0);
  for (int rank = 0; rank < kRanks; ++rank) EXPECT_EQ(next_line[rank], kLines);
}

TEST(Launcher, FlushesAnUnterminatedLastLine) {
  Outcome outcome = launch(helper_options(2, {"partial"}));
  expect_launcher_returned(outcome);
  EXPECT_EQ(count_of(outcome.out, "[0] no newline\n"), 1) << outcome.out;
  EXPECT_EQ(count_of(outcome.out, "[1] no newline\n"), 1) << outcome.out;
}

TEST(Launcher, PassesBytesThroughWithoutPrefix) {
  LaunchOptions options = helper_options(1, {"partial"});
  options.prefix_output = false;
  Outcome outcome = launch(options);
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.out, "no newline");
}

// True when this machine can open a pseudo-terminal (not so in a chroot without /dev/pts).
bool have_terminal() {
  const Terminal probe = open_terminal();
  if (probe.slave >= 0) ::close(probe.slave);
  if (probe.master >= 0) ::close(probe.master);
  return probe.slave >= 0;
}

TEST(Launcher, DrawsProgressLinesInPlaceOnATerminal) {
  if (!have_terminal()) GTEST_SKIP() << "no pseudo-terminal here (is /dev/pts mounted?)";
  ChildSetup setup;
  setup.stdout_is_terminal = true;
  Outcome outcome = launch(helper_options(1, {"progress"}), setup);
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.out, "\r\033[K[0]  10%\r\033[K[0]  50%\r\033[K[0] 100%\n");
}

TEST(Launcher, WritesProgressAsLinesWhenNotATerminal) {
  Outcome outcome = launch(helper_options(1, {"progress"}));
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.out, "[0]  10%\n[0]  50%\n[0] 100%\n");
}

// ---- Failures --------------------------------------------------------------------------

TEST(Launcher, ReturnsZeroWhenEveryRankSucceeds) {
  Outcome outcome = launch(helper_options(3, {"sleep", "10"}));
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 0);
  EXPECT_FALSE(outcome.result.failed_rank.has_value());
  EXPECT_EQ(outcome.result.message, "");
}

TEST(Launcher, AFailingRankStopsTheOthersAndIsNamed) {
  LaunchOptions options = helper_options(4, {"fail-rank", "2", "3"});
  options.grace_period = 10s;  // long, to tell SIGTERM from the SIGKILL that follows the grace
  Outcome outcome = launch(options);
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 3);
  EXPECT_EQ(outcome.result.failed_rank, 2);
  EXPECT_EQ(outcome.result.message, "rank 2 exited with status 3");
  EXPECT_LT(outcome.elapsed, 8s) << "the others should stop at SIGTERM, before the grace ends";
  expect_all_gone(outcome, 3);
}

TEST(Launcher, NamesTheSignalThatKilledARank) {
  Outcome outcome = launch(helper_options(3, {"signal-rank", "1", std::to_string(SIGKILL)}));
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 128 + SIGKILL);
  EXPECT_EQ(outcome.result.failed_rank, 1);
  EXPECT_EQ(outcome.result.message, "rank 1 was killed by signal 9 (Killed)");
  expect_all_gone(outcome, 2);
}

// A hung rank makes the others fail; the launcher names the hung rank, not the first rank
// that exited because of it.
TEST(Launcher, NamesTheRankTheFailedRanksBlame) {
  Outcome outcome = launch(helper_options(4, {"blame-rank", "2"}));
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 2);
  EXPECT_EQ(outcome.result.failed_rank, 2);
  EXPECT_EQ(outcome.result.message.rfind("rank 2 did not arrive: rank", 0), 0)
      << outcome.result.message;
  // Which victim exits first depends on scheduling; the root cause does not.
  EXPECT_NE(outcome.result.message.find("failed waiting for it (allreduce #7 failed on rank "),
            std::string::npos)
      << outcome.result.message;
  EXPECT_NE(outcome.result.message.find(": rank 2 did not arrive within 1 s); rank "),
            std::string::npos)
      << outcome.result.message;
  EXPECT_NE(outcome.result.message.find(" exited with status 2"), std::string::npos)
      << outcome.result.message;
  expect_all_gone(outcome, 1);  // the hung rank, stopped
}

// torchrun's --max-restarts: a failure stops every rank and starts them all again.
TEST(Launcher, RestartsEveryRankAfterAFailureUpToMaxRestarts) {
  LaunchOptions options = helper_options(3, {"fail-until", "1", "5", "2"});
  options.max_restarts = 2;
  Outcome outcome = launch(options);
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 0) << outcome.result.message << outcome.err;
  ASSERT_EQ(outcome.result.restarted_after.size(), 2u);
  EXPECT_EQ(outcome.result.restarted_after[0], "rank 1 exited with status 5");
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_NE(outcome.out.find("[" + std::to_string(rank) + "] attempt 2 of max 2"),
              std::string::npos)
        << outcome.out;
  }
  EXPECT_NE(outcome.err.find("gradwire run: rank 1 exited with status 5; restarting every rank "
                             "(restart 2 of at most 2)"),
            std::string::npos)
      << outcome.err;

  options.max_restarts = 1;  // one restart is not enough: the second failure stands
  outcome = launch(options);
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 5);
  EXPECT_EQ(outcome.result.failed_rank, 1);
  EXPECT_EQ(outcome.result.restarted_after.size(), 1u);
}

TEST(Launcher, KillsRanksThatIgnoreSigtermAfterTheGracePeriod) {
  LaunchOptions options = helper_options(3, {"fail-rank", "0", "1", "hang"});
  options.grace_period = 400ms;
  Outcome outcome = launch(options);
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 1);
  EXPECT_EQ(outcome.result.failed_rank, 0);
  EXPECT_GE(outcome.elapsed, 550ms);  // 200 ms until rank 0 fails, then the grace period
  EXPECT_LT(outcome.elapsed, 5s);
  expect_all_gone(outcome, 2);
}

TEST(Launcher, ReportsACommandThatCannotBeExecuted) {
  LaunchOptions options;
  options.num_processes = 3;
  options.command = {"gradwire-no-such-program", "--flag"};
  options.grace_period = 500ms;
  Outcome outcome = launch(options);
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 127);
  EXPECT_EQ(outcome.result.failed_rank, 0);
  EXPECT_EQ(outcome.result.message,
            "rank 0 exited with status 127 (could not execute 'gradwire-no-such-program': No such "
            "file or directory)");

  options.command = {"/dev/null"};
  outcome = launch(options);
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 127);
  EXPECT_NE(outcome.result.message.find("Permission denied"), std::string::npos)
      << outcome.result.message;
}

TEST(Launcher, KillsWhatARankLeftInItsProcessGroup) {
  LaunchOptions options = helper_options(1, {"leave-grandchild"});
  options.grace_period = 300ms;
  Outcome outcome = launch(options);
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 0) << outcome.result.message;
  EXPECT_LT(outcome.elapsed, 3s);
  expect_all_gone(outcome, 2);
}

// ---- Signals ---------------------------------------------------------------------------

// Sends `signal_number` to the launcher once every rank has printed "ready".
std::function<void(pid_t, const std::string&)> signal_when_ready(int ranks, int signal_number) {
  auto sent = std::make_shared<bool>(false);
  return [=](pid_t launcher, const std::string& out) {
    if (!*sent && count_of(out, "ready\n") == ranks) {
      *sent = true;
      ::kill(launcher, signal_number);
    }
  };
}

TEST(Launcher, ForwardsSigtermToEveryRank) {
  ChildSetup setup;
  setup.on_output = signal_when_ready(3, SIGTERM);
  Outcome outcome = launch(helper_options(3, {"trap-term"}), setup);
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 128 + SIGTERM);
  EXPECT_FALSE(outcome.result.failed_rank.has_value());
  EXPECT_EQ(outcome.result.message, "interrupted by signal 15 (Terminated)");
  for (int rank = 0; rank < 3; ++rank) {
    const std::string r = std::to_string(rank);
    EXPECT_EQ(count_of(outcome.out, "[" + r + "] rank " + r + " got signal 15\n"), 1)
        << outcome.out;
  }
  expect_all_gone(outcome, 3);
}

TEST(Launcher, ForwardsSigintAndKillsRanksThatIgnoreIt) {
  LaunchOptions options = helper_options(2, {"hang"});
  options.grace_period = 300ms;
  ChildSetup setup;
  setup.on_output = signal_when_ready(2, SIGINT);
  Outcome outcome = launch(options, setup);
  expect_launcher_returned(outcome);
  EXPECT_EQ(outcome.result.exit_code, 128 + SIGINT);
  EXPECT_EQ(outcome.result.message, "interrupted by signal 2 (Interrupt)");
  EXPECT_GE(outcome.elapsed, 300ms);
  EXPECT_LT(outcome.elapsed, 5s);
  expect_all_gone(outcome, 2);
}

TEST(Launcher, RanksDieWithAKilledLauncher) {
  ChildSetup setup;
  setup.on_output = signal_when_ready(2, SIGKILL);
  Outcome outcome = launch(helper_options(2, {"hang"}), setup);
  EXPECT_FALSE(outcome.timed_out);
  EXPECT_FALSE(outcome.returned);
  EXPECT_TRUE(WIFSIGNALED(outcome.launcher_status));
  expect_all_gone(outcome, 2);
}

// ---- Validation and ports -------------------------------------------------------------

TEST(Launcher, RejectsInvalidOptions) {
  LaunchOptions options = helper_options(0, {"sleep", "1"});
  EXPECT_THROW(run_processes(options), ConfigError);
  options = helper_options(1, {});
  options.command.clear();
  EXPECT_THROW(run_processes(options), ConfigError);
  options = helper_options(1, {"sleep", "1"});
  options.master_port = 70000;
  EXPECT_THROW(run_processes(options), ConfigError);
  options = helper_options(1, {"sleep", "1"});
  options.extra_env = {{"A=B", "c"}};
  EXPECT_THROW(run_processes(options), ConfigError);
}

TEST(PickFreePort, ReturnsAPortThatCanBeBound) {
  int port = pick_free_port();
  ASSERT_GT(port, 0);
  ASSERT_LT(port, 65536);
  int sock = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(sock, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ::close(sock);
}

TEST(PickFreePort, FailsClearlyOnAnAddressOfAnotherMachine) {
  try {
    pick_free_port("192.0.2.1");  // TEST-NET-1, never local
    FAIL() << "expected SystemError";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find("192.0.2.1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradwire::launch
