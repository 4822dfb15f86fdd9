// `gradwire bench codecs [--size 1M|25M|cnn_fc1] [--filter REGEX] [--json FILE] [--min-time S]`:
// runs the codec benchmark binary built beside this executable
// (bench/gradwire_bench_codecs), keeping Google Benchmark's console and JSON output.
// `gradwire bench quality`: every codec's compression ratio and reconstruction error
// (bench/gradwire_codec_quality), as a Markdown table.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "gradwire/core/error.h"

extern char** environ;

namespace gradwire::cli {
namespace {

struct BenchArgs {
  std::string size;
  std::string filter = ".*";
  std::string json;
  double min_time = 0;
};

int run(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (int err = posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ); err != 0) {
    throw SystemError(errno_message("cannot start " + args[0], err));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int run_codec_bench(const BenchArgs& a) {
  std::vector<std::string> args{bench_file("gradwire_bench_codecs").string()};
  std::string filter = a.filter;
  if (!a.size.empty()) filter = "(" + filter + ").*/" + a.size + "$";  // name/face/size
  args.push_back("--benchmark_filter=" + filter);
  if (!a.json.empty()) {
    args.push_back("--benchmark_out=" + a.json);
    args.push_back("--benchmark_out_format=json");
  }
  if (a.min_time > 0) args.push_back("--benchmark_min_time=" + std::to_string(a.min_time));
  return run(std::move(args));
}

}  // namespace

std::filesystem::path bench_file(const std::string& name) {
  const std::filesystem::path self_dir =
      std::filesystem::read_symlink("/proc/self/exe").parent_path();
  const std::filesystem::path candidates[] = {self_dir / "bench" / name,
                                              self_dir / ".." / "libexec" / "gradwire" / name};
  for (const auto& candidate : candidates) {
    if (std::filesystem::exists(candidate)) return candidate.lexically_normal();
  }
  throw ConfigError(name + " was found neither in " + candidates[0].parent_path().string() +
                    " (a build tree) nor in " +
                    candidates[1].parent_path().lexically_normal().string() +
                    " (an installed gradwire): build gradwire with its benchmarks "
                    "(-DGRADWIRE_BUILD_BENCH=ON)");
}

void add_bench_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<BenchArgs>();
  auto* bench = app.add_subcommand("bench", "Measure gradwire");
  bench->require_subcommand(1);
  auto* codecs =
      bench->add_subcommand("codecs",
                            "Encode/decode throughput of every codec and the references (memcpy, "
                            "nth_element, torch::topk), Google Benchmark output");
  codecs->add_option("--size", args->size, "Only this input size")
      ->check(CLI::IsMember({"1M", "25M", "cnn_fc1"}));
  codecs->add_option("--filter", args->filter, "Only benchmarks whose name matches (regex)");
  codecs->add_option("--json", args->json, "Also write Google Benchmark JSON to FILE");
  codecs->add_option("--min-time", args->min_time, "Seconds per benchmark (default: Google's)");
  codecs->callback([args, &exit_code] { exit_code = run_codec_bench(*args); });
  auto* quality = bench->add_subcommand(
      "quality", "Compression ratio and relative L2 error of every codec on the same inputs");
  quality->callback(
      [&exit_code] { exit_code = run({bench_file("gradwire_codec_quality").string()}); });
  add_bench_e2e_command(*bench, exit_code);
  add_bench_exchange_command(*bench, exit_code);
}

}  // namespace gradwire::cli
