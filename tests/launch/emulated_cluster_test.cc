// The emulated cluster: rates, namespaces made and removed, ranks placed on their hosts,
// and links that carry no more than their rate. Tests that need root and network
// namespaces skip with the reason where they cannot run; every cluster they make is
// removed by its destructor, whatever the test's outcome.
#include "gradwire/launch/emulated_cluster.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <regex>
#include <sstream>

#include "../common/netns.h"
#include "gradwire/core/error.h"
#include "gradwire/launch/launcher.h"
#include "gradwire/launch/tool_command.h"

namespace gradwire::launch {
namespace {

using gradwire::testing::namespaces_with_prefix;

// The output of a launch, captured by redirecting the launcher's stdout into a pipe.
std::string launch_and_capture(LaunchOptions options, LaunchResult& result) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const int saved = ::dup(STDOUT_FILENO);
  ::dup2(fds[1], STDOUT_FILENO);
  ::close(fds[1]);
  result = run_processes(options);
  ::fflush(stdout);
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  std::string output;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) output.append(buffer, n);
  ::close(fds[0]);
  return output;
}

TEST(EmulatedClusterTest, ParsesRatesInTcNotation) {
  EXPECT_EQ(parse_rate("100mbit"), 100'000'000u);
  EXPECT_EQ(parse_rate("1Gbit"), 1'000'000'000u);
  EXPECT_EQ(parse_rate("10gbit"), 10'000'000'000u);
  EXPECT_EQ(parse_rate("2.5mbit"), 2'500'000u);
  EXPECT_EQ(parse_rate("20mbps"), 160'000'000u);  // bytes, as tc
  EXPECT_EQ(parse_rate("unlimited"), 0u);
  for (const char* bad : {"", "100", "mbit", "100 mbit", "-5mbit", "100furlongs", "1bit"}) {
    EXPECT_THROW(parse_rate(bad), ConfigError) << bad;
  }
}

TEST(EmulatedClusterTest, RefusesWithoutRootSayingSo) {
  // In a child that gave up root (when we are root), or here (when we are not).
  const pid_t child = ::fork();
  if (child == 0) {
    if (::geteuid() == 0 && ::setresuid(65534, 65534, 65534) != 0) ::_exit(3);
    try {
      EmulatedCluster cluster(ClusterOptions{});
    } catch (const ConfigError& e) {
      ::_exit(std::string(e.what()).find("needs root") != std::string::npos ? 0 : 1);
    } catch (...) {
      ::_exit(2);
    }
    ::_exit(4);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(EmulatedClusterTest, CreatesHostsAndRemovesEverything) {
  SKIP_WITHOUT_NETNS();
  std::string prefix;
  {
    ClusterOptions options;
    options.hosts = 3;
    options.bandwidth = "100mbit";
    EmulatedCluster cluster(options);
    prefix = cluster.prefix();
    EXPECT_EQ(namespaces_with_prefix(prefix).size(), 4u);  // 3 hosts and the switch
    ASSERT_EQ(cluster.hosts().size(), 3u);
    EXPECT_EQ(cluster.hosts()[2].address, "10.213.0.3");
    const std::string qdisc =
        run_tool_checked({"tc", "-n", cluster.hosts()[0].netns, "qdisc", "show", "dev", "eth0"});
    EXPECT_NE(qdisc.find("tbf"), std::string::npos) << qdisc;
    EXPECT_NE(qdisc.find("100Mbit"), std::string::npos) << qdisc;
  }
  EXPECT_TRUE(namespaces_with_prefix(prefix).empty());
}

TEST(EmulatedClusterTest, DelayNeedsNetemAndIsNeverFaked) {
  SKIP_WITHOUT_NETNS();
  ClusterOptions options;
  options.delay_ms = 5;
  const std::string prefix = "gwc" + std::to_string(::getpid()) + "c";
  try {
    EmulatedCluster cluster(options);
    const std::string qdisc =
        run_tool_checked({"tc", "-n", cluster.hosts()[0].netns, "qdisc", "show", "dev", "eth0"});
    EXPECT_NE(qdisc.find("netem"), std::string::npos) << qdisc;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("netem"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(namespaces_with_prefix(prefix).empty());  // made, failed or not: removed
}

TEST(EmulatedClusterTest, RanksRunInTheirHostsNamespaceWithTorchrunVariables) {
  SKIP_WITHOUT_NETNS();
  ClusterOptions cluster_options;
  cluster_options.hosts = 2;
  EmulatedCluster cluster(cluster_options);
  LaunchOptions options = cluster.launch_options(2, {GRADWIRE_TEST_HELPER, "netns"});
  LaunchResult result;
  const std::string output = launch_and_capture(options, result);
  ASSERT_EQ(result.exit_code, 0) << result.message;
  for (int rank = 0; rank < 4; ++rank) {
    struct stat ns {};
    ASSERT_EQ(::stat(cluster.hosts()[rank / 2].netns_path.c_str(), &ns), 0);
    const std::string expected =
        "[" + std::to_string(rank) + "] netns=" + std::to_string(ns.st_ino);
    EXPECT_NE(output.find(expected), std::string::npos) << expected << "\n" << output;
  }
  options.command = {GRADWIRE_TEST_HELPER, "env"};
  const std::string env = launch_and_capture(options, result);
  EXPECT_NE(env.find("[3] LOCAL_RANK=1"), std::string::npos) << env;
  EXPECT_NE(env.find("[3] GROUP_RANK=1"), std::string::npos) << env;
  EXPECT_NE(env.find("[3] LOCAL_WORLD_SIZE=2"), std::string::npos) << env;
  EXPECT_NE(env.find("[2] MASTER_ADDR=10.213.0.1"), std::string::npos) << env;
  EXPECT_NE(env.find("[2] MASTER_PORT=29500"), std::string::npos) << env;
  EXPECT_NE(env.find("[1] GLOO_SOCKET_IFNAME=eth0"), std::string::npos) << env;
}

// Bytes per second that rank 1 streams to rank 0 over the cluster's links.
double streamed_bits_per_s(const std::string& bandwidth, double seconds, uint64_t& burst_bits) {
  ClusterOptions cluster_options;
  cluster_options.hosts = 2;
  cluster_options.bandwidth = bandwidth;
  EmulatedCluster cluster(cluster_options);
  const LaunchOptions options =
      cluster.launch_options(1, {GRADWIRE_TEST_HELPER, "stream", std::to_string(seconds)});
  LaunchResult result;
  const std::string output = launch_and_capture(options, result);
  EXPECT_EQ(result.exit_code, 0) << result.message << output;
  std::smatch match;
  static const std::regex line(R"(received ([0-9]+) bytes in ([0-9.]+) s)");
  if (!std::regex_search(output, match, line)) {
    ADD_FAILURE() << output;
    return 0;
  }
  burst_bits = std::max<uint64_t>(16 << 10, cluster.rate_bits_per_s() / 500) * 8;
  return std::stod(match[1].str()) * 8 / std::stod(match[2].str());
}

TEST(EmulatedClusterTest, AShapedLinkCarriesNoMoreThanItsRateAndAnUnshapedOneMore) {
  SKIP_WITHOUT_NETNS();
  constexpr double kRate = 20e6;
  constexpr double kSeconds = 2.0;
  uint64_t burst_bits = 0;
  const double shaped = streamed_bits_per_s("20mbit", kSeconds, burst_bits);
  // The bucket may start full: at most one burst above the rate over the measurement.
  EXPECT_LE(shaped, kRate * 1.03 + burst_bits / kSeconds) << shaped;
  EXPECT_GT(shaped, kRate * 0.5) << shaped;  // and it does carry traffic
  const double unshaped = streamed_bits_per_s("unlimited", kSeconds, burst_bits);
  EXPECT_GT(unshaped, 3 * kRate) << unshaped;
}

TEST(EmulatedClusterTest, StaleClustersOfStoppedProgramsAreRemovedOthersKept) {
  SKIP_WITHOUT_NETNS();
  gradwire::testing::StaleClusterLock lock;  // no other test's cleanup takes this one's
  // A child makes a cluster, keeps it and dies without removing it (as under SIGKILL).
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    try {
      EmulatedCluster cluster(ClusterOptions{});
      cluster.keep();
      const std::string prefix = cluster.prefix();
      [[maybe_unused]] ssize_t n = ::write(fds[1], prefix.data(), prefix.size());
    } catch (...) {
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  char buffer[64] = {0};
  const ssize_t n = ::read(fds[0], buffer, sizeof buffer - 1);
  ::close(fds[0]);
  ::waitpid(child, nullptr, 0);
  ASSERT_GT(n, 0);
  const std::string stale_prefix(buffer, static_cast<size_t>(n));
  EmulatedCluster mine(ClusterOptions{});  // this process runs: its cluster must stay
  ASSERT_EQ(namespaces_with_prefix(stale_prefix).size(), 3u);
  const auto removed = remove_stale_clusters();
  EXPECT_TRUE(namespaces_with_prefix(stale_prefix).empty());
  EXPECT_EQ(
      std::count_if(removed.begin(), removed.end(),
                    [&](const std::string& name) { return name.rfind(stale_prefix, 0) == 0; }),
      3);
  EXPECT_EQ(namespaces_with_prefix(mine.prefix()).size(), 3u);
}

}  // namespace
}  // namespace gradwire::launch
