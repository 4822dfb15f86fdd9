// `gradwire cluster` and `gradwire bench e2e` as a user runs them, as real processes: the
// cluster removes its namespaces when stopped (SIGTERM) and `--cleanup` removes what a
// SIGKILLed one left; the DDP peer trains with every hook inside a cluster; the bench writes
// its CSV and plots. Tests that need root and network namespaces skip where they cannot
// run. Every process is bounded in time (timeout, or a guard that kills it) and every
// namespace a test made is removed when the test ends, whatever happens.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "../common/command_runner.h"
#include "../common/json_lines.h"
#include "../common/netns.h"
#include "gradwire/launch/emulated_cluster.h"
#include "gradwire/launch/tool_command.h"

namespace {

using gradwire::testing::namespaces_with_prefix;
using gradwire::testing::read_json_lines;
using gradwire::testing::run_command;
using Clock = std::chrono::steady_clock;
namespace launch = gradwire::launch;

std::string temp_path(const std::string& name) {
  return gradwire::testing::temp_path("gradwire_cluster_test_", name);
}

// A `gradwire cluster` started in the background with its output in a file. Whatever the
// test does, the process is killed and its namespaces are removed when this goes.
class BackgroundCluster {
 public:
  explicit BackgroundCluster(std::vector<std::string> args) : output_(temp_path("cluster.out")) {
    args.insert(args.begin(), {GRADWIRE_CLI, "cluster"});
    pid_ = ::fork();
    if (pid_ == 0) {
      const int fd = ::open(output_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }
  ~BackgroundCluster() {
    if (running_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    gradwire::testing::remove_namespaces_with_prefix(prefix());
    std::filesystem::remove(output_);
  }

  pid_t pid() const { return pid_; }
  std::string prefix() const { return "gwc" + std::to_string(pid_) + "c"; }
  std::string output() const {
    std::ifstream in(output_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Waits until every rank printed `marker` (bounded).
  bool wait_for(const std::string& marker, int count, std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      const std::string text = output();
      int seen = 0;
      for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + 1)) {
        ++seen;
      }
      if (seen >= count) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  // The exit status (128 + signal when killed), or -1 if it did not end within `limit`.
  int wait_exit(std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    int status = 0;
    while (Clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        running_ = false;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

  // The pids the ranks printed ("pid=P").
  std::vector<pid_t> rank_pids() const {
    std::vector<pid_t> pids;
    const std::string text = output();
    for (size_t at = text.find("pid="); at != std::string::npos; at = text.find("pid=", at + 1)) {
      pids.push_back(static_cast<pid_t>(std::stol(text.substr(at + 4))));
    }
    return pids;
  }

 private:
  std::string output_;
  pid_t pid_ = -1;
  bool running_ = true;
};

bool process_gone(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (Clock::now() < deadline) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(ClusterCliTest, SigtermStopsTheRanksAndRemovesEveryNamespace) {
  SKIP_WITHOUT_NETNS();
  // "hang" ignores SIGTERM: the cluster must SIGKILL it after the grace period, then clean.
  BackgroundCluster cluster({"--hosts", "2", "--bandwidth", "100mbit", "--grace-seconds", "1", "--",
                             GRADWIRE_TEST_HELPER, "hang"});
  ASSERT_TRUE(cluster.wait_for("ready", 2, std::chrono::seconds(30))) << cluster.output();
  EXPECT_EQ(namespaces_with_prefix(cluster.prefix()).size(), 3u);
  const auto ranks = cluster.rank_pids();
  ASSERT_EQ(ranks.size(), 2u) << cluster.output();
  ASSERT_EQ(::kill(cluster.pid(), SIGTERM), 0);
  EXPECT_EQ(cluster.wait_exit(std::chrono::seconds(30)), 128 + SIGTERM) << cluster.output();
  EXPECT_TRUE(namespaces_with_prefix(cluster.prefix()).empty());
  for (pid_t rank : ranks) EXPECT_TRUE(process_gone(rank, std::chrono::seconds(5))) << rank;
}

TEST(ClusterCliTest, CleanupRemovesWhatAKilledClusterLeft) {
  SKIP_WITHOUT_NETNS();
  gradwire::testing::StaleClusterLock lock;  // no other test's cleanup takes this one's
  BackgroundCluster cluster(
      {"--hosts", "2", "--bandwidth", "100mbit", "--", GRADWIRE_TEST_HELPER, "hang"});
  ASSERT_TRUE(cluster.wait_for("ready", 2, std::chrono::seconds(30))) << cluster.output();
  const auto ranks = cluster.rank_pids();
  ASSERT_EQ(::kill(cluster.pid(), SIGKILL), 0);
  EXPECT_EQ(cluster.wait_exit(std::chrono::seconds(10)), 128 + SIGKILL);
  // The ranks die with their launcher; the namespaces stay until --cleanup.
  for (pid_t rank : ranks) EXPECT_TRUE(process_gone(rank, std::chrono::seconds(5))) << rank;
  EXPECT_EQ(namespaces_with_prefix(cluster.prefix()).size(), 3u);
  const auto r = run_command(std::string(GRADWIRE_CLI) + " cluster --cleanup", 60);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("removed " + cluster.prefix()), std::string::npos) << r.output;
  EXPECT_TRUE(namespaces_with_prefix(cluster.prefix()).empty());
}

TEST(ClusterCliTest, DelayIsRefusedClearlyWhereTheKernelHasNoNetem) {
  SKIP_WITHOUT_NETNS();
  const auto r = run_command(std::string(GRADWIRE_CLI) + " cluster --hosts 2 --delay 5 -- " +
                                 GRADWIRE_TEST_HELPER + " sleep 10",
                             60);
  if (r.status == 0) GTEST_SUCCEED() << "this kernel has netem: the delay was applied";
  if (r.status != 0) {
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("netem"), std::string::npos) << r.output;
  }
}

TEST(ClusterCliTest, ABadRateIsAUsageError) {
  const auto r = run_command(
      std::string(GRADWIRE_CLI) + " cluster --hosts 2 --bandwidth 100furlongs -- true", 30);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_TRUE(r.output.find("not a rate") != std::string::npos ||
              r.output.find("needs root") != std::string::npos)
      << r.output;
}

// Every DDP hook trains a few steps between two emulated hosts and writes metrics in
// gradwire train's format, with the bytes each hook should send.
TEST(DdpPeerTest, EveryHookTrainsInAClusterAndWritesMetrics) {
  SKIP_WITHOUT_NETNS();
  const std::map<std::string, std::pair<double, double>> ratio = {{"allreduce", {1.0, 1.0}},
                                                                  {"fp16", {0.5, 0.5}},
                                                                  {"bf16", {0.5, 0.5}},
                                                                  {"powersgd", {0.01, 0.9}}};
  for (const auto& [hook, bounds] : ratio) {
    const std::string metrics = temp_path(hook + ".jsonl");
    const auto r = run_command(std::string(GRADWIRE_CLI) +
                                   " cluster --hosts 2 --bandwidth 200mbit -- /usr/bin/python3 " +
                                   GRADWIRE_DDP_PEER + " --hook " + hook +
                                   " --epochs 1 --train-limit 512 --test-limit 200 --batch-size 32"
                                   " --eval-every 3 --progress none --metrics " +
                                   metrics,
                               180);
    ASSERT_EQ(r.status, 0) << hook << "\n" << r.output;
    const auto lines = read_json_lines(metrics);
    ASSERT_GE(lines.size(), 4u) << hook;
    int evals = 0;
    double last_train_s = 0;
    for (const auto& line : lines) {
      if (line["event"] != "eval") continue;
      ++evals;
      EXPECT_GT(line["train_s"].get<double>(), last_train_s) << line;
      last_train_s = line["train_s"].get<double>();
    }
    EXPECT_EQ(evals, 3) << hook;  // steps 3 and 6, and the epoch's end at step 8
    const auto& summary = lines.back();
    EXPECT_EQ(summary["event"], "summary") << hook;
    EXPECT_EQ(summary["strategy"], "ddp");
    EXPECT_EQ(summary["workers"], 2);
    EXPECT_EQ(summary["steps"], 8);
    ASSERT_EQ(summary["param_checksums"].size(), 2u);
    EXPECT_EQ(summary["param_checksums"][0], summary["param_checksums"][1]) << hook;
    const double sent = summary["bytes_contributed"].get<double>();
    const double dense = summary["bytes_dense"].get<double>();
    EXPECT_GE(sent / dense, bounds.first) << hook;
    EXPECT_LE(sent / dense, bounds.second) << hook;
    EXPECT_LE(summary["train_s"].get<double>(), summary["elapsed_s"].get<double>());
    std::filesystem::remove(metrics);
  }
}

// A configuration the bench cannot run is refused before any run starts, naming it.
TEST(BenchE2eTest, BadConfigurationsAreRefusedUpFront) {
  for (const auto& [config, message] : std::vector<std::pair<std::string, std::string>>{
           {"zip", "unknown codec 'zip'"},
           {"ddp:zip",
            "DDP hooks are allreduce, fp16, bf16, powersgd, localsgd and gradwire-CODEC"},
           {"ddp:localsgd:period=0", "period"},
           {"ddp:gradwire-zip", "unknown codec 'zip'"},
           {"ddp:powersgd:rnk=4", "rnk"},
           {"ddp:fp16:rank=4", "rank"},
           {"ps:fast", "unknown updater 'fast'"}}) {
    const auto r = run_command(std::string(GRADWIRE_CLI) + " bench e2e --configs " + config +
                                   " --out " + temp_path("never"),
                               30);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(temp_path("never")));
  }
}

// A parameter server's last replies are whole models: over a slow link they take longer
// than the socket's default linger, and a server that exits without them left its workers
// waiting forever (found by the e2e bench; the fix: the server's socket waits for them).
TEST(ClusterCliTest, ParameterServerJobEndsOnASlowLink) {
  SKIP_WITHOUT_NETNS();
  const std::string metrics = temp_path("ps.jsonl");
  const auto r = run_command(
      "env GRADWIRE_NUM_SERVERS=1 GRADWIRE_PS_BIND=0.0.0.0 " + std::string(GRADWIRE_CLI) +
          " cluster --hosts 3 --bandwidth 100mbit -- " + GRADWIRE_CLI +
          " train --worker --strategy ps --consistency asp --updater ddc-asgd --momentum 0.6"
          " --model cnn-wide --epochs 1 --batch-size 32 --train-limit 128 --test-limit 200"
          " --eval-every 2 --progress none --metrics " +
          metrics,
      120);
  ASSERT_EQ(r.status, 0) << r.output;
  const auto lines = read_json_lines(metrics);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back()["event"], "summary");
  EXPECT_GE(lines.back()["samples"].get<int>(), 128);  // the whole budget was trained
  std::filesystem::remove(metrics);
}

// What each host's eth0 transmitted, from the "[rank] eth0: ..." lines of /proc/net/dev
// (per network namespace) that each rank printed: the 9th number is bytes transmitted.
double transmitted_bytes(const std::string& output, int ranks) {
  double total = 0;
  for (int r = 0; r < ranks; ++r) {
    const std::string key = std::string(1, '[') + std::to_string(r) + ']';
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);) {
      const size_t eth = line.find("eth0:");
      if (line.rfind(key, 0) != 0 || eth == std::string::npos) continue;
      const char* field = line.c_str() + eth + 5;
      double value = 0;
      for (int i = 0; i < 9; ++i) {
        char* end = nullptr;
        value = std::strtod(field, &end);
        field = end;
      }
      total += value;
    }
  }
  return total;
}

// bytes_on_wire is what the links carry: each host's eth0 counts what it sent, and the
// training's exchange is all but a little of it (the initial broadcast of the model, the
// metrics' allgathers, the store, and TCP/IP headers of a few percent).
TEST(ClusterCliTest, BytesOnTheWireAreWhatTheLinksCarried) {
  SKIP_WITHOUT_NETNS();
  for (const char* codec : {"none", "topk:density=0.01"}) {
    const std::string metrics = temp_path("wire.jsonl");
    const auto r =
        run_command(std::string(GRADWIRE_CLI) +
                        " cluster --hosts 3 --bandwidth unlimited -- /bin/sh -c '" + GRADWIRE_CLI +
                        " train --worker --model cnn --epochs 1 --batch-size 32"
                        " --train-limit 1920 --test-limit 100 --progress none"
                        " --compressor " +
                        codec + " --metrics " + metrics + " && cat /proc/net/dev'",
                    180);
    ASSERT_EQ(r.status, 0) << r.output;
    const auto summary = read_json_lines(metrics).back();
    const double counted = summary["bytes_on_wire"].get<double>();
    const double carried = transmitted_bytes(r.output, 3);
    ASSERT_GT(counted, 0) << r.output;
    EXPECT_GE(carried, counted) << codec << "\n" << r.output;
    // The model's broadcast (0.74 MB from rank 0, forwarded once more in the tree) and
    // headers come on top.
    EXPECT_LE(carried, 1.12 * counted + 2.0e6) << codec << "\n" << r.output;
    std::filesystem::remove(metrics);
  }
}

// `gradwire bench e2e` end to end on a tiny matrix: a compute floor and one configuration.
TEST(BenchE2eTest, TinyMatrixWritesCsvAndPlots) {
  SKIP_WITHOUT_NETNS();
  const std::string out = temp_path("e2e");
  std::filesystem::remove_all(out);
  const std::string bench = std::string(GRADWIRE_CLI) +
                            " bench e2e --hosts 2 --bandwidth 50mbit --models cnn "
                            "--configs fp16 --epochs 1 --train-limit 512 --test-limit 200 "
                            "--batch-size 32 --target-accuracy 0.2 --out " +
                            out;
  const auto r = run_command(bench, 300);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("[2/2] cnn 50mbit gradwire fp16: final"), std::string::npos) << r.output;
  std::ifstream csv(out + "/results.csv");
  std::vector<std::string> rows;
  for (std::string line; std::getline(csv, line);) rows.push_back(line);
  ASSERT_EQ(rows.size(), 3u) << r.output;
  EXPECT_EQ(rows[0].rfind("system,config,codec,model,bandwidth,run,seed,status,", 0), 0u)
      << rows[0];
  EXPECT_NE(rows[1].find("none (floor)"), std::string::npos) << rows[1];
  EXPECT_NE(rows[2].find("gradwire,fp16,fp16:ef=0,cnn,50mbit,1,0,ok,test_accuracy,0.2,"),
            std::string::npos)
      << rows[2];
  for (const char* png : {"accuracy_vs_time.png", "time_to_target.png", "overhead.png"}) {
    std::ifstream in(out + "/" + png, std::ios::binary);
    char magic[4] = {0};
    in.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG") << png;
  }
  EXPECT_TRUE(std::filesystem::exists(out + "/results.md"));

  // --resume keeps the finished floor and runs again the run whose metrics are gone.
  std::filesystem::remove(out + "/runs/cnn-50mbit-gradwire-fp16-r1.jsonl");
  const auto resumed = run_command(bench + " --resume --no-plots", 300);
  ASSERT_EQ(resumed.status, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("--resume keeps 1 finished runs of 2"), std::string::npos)
      << resumed.output;
  EXPECT_EQ(resumed.output.find("[1/2]"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("[2/2] cnn 50mbit gradwire fp16: final"), std::string::npos)
      << resumed.output;
  std::ifstream resumed_csv(out + "/results.csv");
  std::vector<std::string> resumed_rows;
  for (std::string line; std::getline(resumed_csv, line);) resumed_rows.push_back(line);
  ASSERT_EQ(resumed_rows.size(), 3u);
  EXPECT_EQ(resumed_rows[1], rows[1]);  // kept as it was
  EXPECT_NE(resumed_rows[2].find("gradwire,fp16,fp16:ef=0,cnn,50mbit,1,0,ok,test_accuracy,0.2,"),
            std::string::npos)
      << resumed_rows[2];
  // Another command does not resume this directory's matrix.
  const auto other = run_command(bench + " --seed 7 --resume --no-plots", 60);
  EXPECT_EQ(other.status, 2) << other.output;
  EXPECT_NE(other.output.find("same command"), std::string::npos) << other.output;
  std::filesystem::remove_all(out);
}

// The accuracy line the example's rank 0 prints ("epoch 1 test accuracy 0.7310").
std::string accuracy_line(const std::string& output) {
  const size_t at = output.find("test accuracy");
  if (at == std::string::npos) return "";
  return output.substr(at, output.find('\n', at) - at);
}

// torchrun's multi-node launch: one `gradwire run --nnodes 2 --node-rank I` per emulated
// host, each starting its host's 2 ranks. The 4 ranks train as one job and end with the
// model one `gradwire run -n 4` on loopback gives (the same program, shards and ring, so
// the same arithmetic), which the accuracy it prints shows to the last digit.
TEST(ClusterCliTest, TwoNodesOfTwoRanksTrainLikeOneLaunchOfFour) {
  SKIP_WITHOUT_NETNS();
  const std::string cli = GRADWIRE_CLI;
  const std::string example = std::string(GRADWIRE_EXAMPLE_DISTRIBUTED) + " 1 1024";
  const auto nodes = run_command(
      cli + " cluster --hosts 2 --bandwidth 1gbit -- /bin/sh -c '" + cli +
          " run --nnodes 2 --node-rank $GROUP_RANK --nproc-per-node 2 --master-addr $MASTER_ADDR"
          " --master-port 29610 -- " +
          example + "'",
      240);
  ASSERT_EQ(nodes.status, 0) << nodes.output;
  const auto single = run_command(cli + " run -n 4 -- " + example, 240);
  ASSERT_EQ(single.status, 0) << single.output;
  const std::string expected = accuracy_line(single.output);
  ASSERT_FALSE(expected.empty()) << single.output;
  EXPECT_EQ(accuracy_line(nodes.output), expected) << nodes.output;
}

}  // namespace
