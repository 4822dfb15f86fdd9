// `gradwire bench exchange`: one rank of the aggregation scaling benchmark (docs/SCALING.md).
// Start it once per rank with torchrun's environment, e.g. on the emulated cluster:
//   gradwire cluster --hosts 8 --bandwidth 100mbit --no-prefix -- gradwire bench exchange
// Rank 0 prints JSON Lines: the plain collectives over a range of sizes (to fit the cost
// model's alpha and beta), then the three paths of a sparse bucket (comm/cost_model.h) on
// synthetic payloads, each with the totals the model predicts from; or, with --quantized,
// each codec's two paths for a dense bucket (AllreduceOptions::quantized_path: its ring or
// allgather, and the reduce-scatter summed in fp32), run by the allreduce strategy itself,
// encoding and decoding included. A time is the median over --steps of the slowest rank's
// time (each step starts at a barrier).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>

#include "commands.h"
#include "gradwire/comm/cost_model.h"
#include "gradwire/comm/rendezvous.h"
#include "gradwire/core/error.h"
#include "gradwire/strategy/allreduce/allreduce_strategy.h"
#include "gradwire/strategy/allreduce/sparse_exchange.h"

namespace gradwire::cli {
namespace {

struct ExchangeArgs {
  size_t elements = 1u << 18;
  double density = 0.01;
  double shared = 0.5;
  int steps = 10;
  bool calibrate = true;
  std::vector<std::string> quantized;  // codecs whose two dense paths to time instead
};

// The slowest rank's time of each step, median over the steps.
double median_of_max(comm::Collectives& c, std::vector<float> seconds) {
  c.allreduce_max(seconds.data(), seconds.size());
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

template <typename Fn>
double time_steps(comm::Collectives& c, int steps, Fn&& fn) {
  fn();  // warm-up: connections, allocations
  std::vector<float> seconds;
  for (int s = 0; s < steps; ++s) {
    c.barrier();
    const auto start = std::chrono::steady_clock::now();
    fn();
    seconds.push_back(
        std::chrono::duration<float>(std::chrono::steady_clock::now() - start).count());
  }
  return median_of_max(c, std::move(seconds));
}

// k = density n coordinates: a `shared` fraction the same on every rank, the rest this
// rank's own; Gaussian values.
std::vector<float> synthetic_input(int rank, const ExchangeArgs& a) {
  std::mt19937_64 common(1), own(1000 + rank);
  std::uniform_real_distribution<double> u;
  std::normal_distribution<float> normal;
  std::vector<float> v(a.elements, 0.0f);
  const double shared = a.density * a.shared, own_density = a.density * (1 - a.shared);
  for (size_t i = 0; i < a.elements; ++i) {
    const bool pick_shared = u(common) < shared;
    const bool pick_own = u(own) < own_density;
    if (pick_shared || pick_own) v[i] = normal(own);
  }
  return v;
}

// The allgather path's payload: u32 count, u32 index[k], f32 value[k] (top-k's layout).
Bytes sparse_payload(std::span<const float> v) {
  std::vector<uint32_t> index;
  std::vector<float> value;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != 0.0f) {
      index.push_back(static_cast<uint32_t>(i));
      value.push_back(v[i]);
    }
  }
  Bytes out;
  ByteWriter writer(out);
  writer.put<uint32_t>(static_cast<uint32_t>(index.size()));
  writer.put_array<uint32_t>(index);
  writer.put_array<float>(value);
  return out;
}

// Each codec's two paths for one dense bucket of `a.elements` Gaussian floats: the
// allreduce strategy with one tensor, one bucket, no overlap and the first layout kept,
// its synchronize() timed (encode, the collectives, decode; error feedback as the codec's
// spec has it).
void time_quantized_paths(comm::Collectives& c, const ExchangeArgs& a,
                          const std::function<void(const std::string&)>& emit) {
  const std::vector<compress::TensorInfo> tensors = {
      {"bucket", {static_cast<int64_t>(a.elements)}, compress::LayerKind::kOther}};
  // The rank's gradient is drawn once; each timed step copies it in (synchronize()
  // overwrites it with the average), a memcpy of the bucket, the same for every path.
  std::mt19937 rng(static_cast<uint32_t>(17 + c.rank()));
  std::normal_distribution<float> normal;
  std::vector<float> drawn(a.elements), grad(a.elements), param(a.elements, 0.0f);
  for (float& v : drawn) v = normal(rng);
  for (const std::string& codec : a.quantized) {
    for (const std::string path : {"ring", "reduce-scatter"}) {
      strategy::AllreduceOptions options;
      options.codec = codec;
      options.overlap = false;
      options.bucket_bytes = options.first_bucket_bytes = 4 * a.elements + 1;
      options.layout_after = 0;  // the first layout, every step
      options.quantized_path = path;
      strategy::AllreduceStrategy s(c, options);
      s.start(tensors, {std::span<float>(param)});
      const double seconds = time_steps(c, a.steps, [&] {
        std::copy(drawn.begin(), drawn.end(), grad.begin());
        s.synchronize({std::span<float>(grad)});
      });
      const auto traffic = s.traffic();
      std::ostringstream line;
      line << "{\"world\":" << c.size() << ",\"op\":\"quantized\",\"codec\":\"" << codec
           << "\",\"path\":\"" << s.bucket_path(0) << "\",\"elements\":" << a.elements
           << ",\"wire_bytes\":" << traffic.bytes_on_wire / std::max<uint64_t>(1, traffic.steps)
           << ",\"seconds\":" << seconds << "}";
      emit(line.str());
    }
  }
}

int run_exchange(const ExchangeArgs& a) {
  const auto world = comm::WorldInfo::from_environment();
  comm::ConnectOptions options;  // as gradwire::init() reads them
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) options.socket_ifname = ifname;
  if (const char* file = std::getenv("GRADWIRE_ERROR_FILE")) options.failure_report_file = file;
  const auto collectives = comm::connect(world, options);
  comm::Collectives& c = *collectives;
  const int w = c.size();
  auto emit = [&](const std::string& line) {
    if (c.rank() == 0) std::cout << line << std::endl;
  };
  if (a.calibrate) {
    for (size_t bytes : {size_t{4} << 10, size_t{64} << 10, size_t{512} << 10, size_t{2} << 20}) {
      std::vector<float> buffer(bytes / sizeof(float), 1.0f);
      const double s = time_steps(c, a.steps, [&] {
        c.allreduce_sum(buffer.data(), buffer.size(), comm::DataType::kFloat32);
      });
      emit("{\"world\":" + std::to_string(w) + ",\"op\":\"allreduce\",\"bytes\":" +
           std::to_string(bytes) + ",\"seconds\":" + std::to_string(s) + "}");
    }
    for (size_t bytes : {size_t{1} << 10, size_t{16} << 10, size_t{128} << 10}) {
      Bytes mine(bytes, 7);
      std::vector<Bytes> all;
      const double s = time_steps(c, a.steps, [&] { c.allgather_bytes(mine, all); });
      emit("{\"world\":" + std::to_string(w) + ",\"op\":\"allgather\",\"bytes\":" +
           std::to_string(bytes) + ",\"seconds\":" + std::to_string(s) + "}");
      std::vector<Bytes> to(w, Bytes(bytes, 3)), from;
      const double t = time_steps(c, a.steps, [&] { c.alltoall_bytes(to, from); });
      emit("{\"world\":" + std::to_string(w) + ",\"op\":\"alltoall\",\"bytes\":" +
           std::to_string(bytes) + ",\"seconds\":" + std::to_string(t) + "}");
    }
  }

  if (!a.quantized.empty()) {
    time_quantized_paths(c, a, emit);
    return 0;
  }
  const std::vector<float> mine = synthetic_input(c.rank(), a);
  const Bytes payload = sparse_payload(mine);
  std::vector<float> sum(a.elements);
  strategy::SparseExchange exchange(a.elements);
  std::vector<Bytes> all;
  // Totals of the synthetic bucket, as the split path counts them.
  exchange.split(c, mine, payload.size(), sum);
  const strategy::SparseStepTotals totals = exchange.totals();
  for (const auto path :
       {comm::SparsePath::kAllgather, comm::SparsePath::kSplit, comm::SparsePath::kDense}) {
    const double s = time_steps(c, a.steps, [&] {
      switch (path) {
        case comm::SparsePath::kAllgather:
          c.allgather_bytes(payload, all);
          break;
        case comm::SparsePath::kSplit:
          exchange.split(c, mine, payload.size(), sum);
          break;
        case comm::SparsePath::kDense:
          exchange.dense(c, mine, payload.size(), sum);
          break;
      }
    });
    std::ostringstream line;
    line << "{\"world\":" << w << ",\"op\":\"sparse\",\"path\":\"" << comm::sparse_path_name(path)
         << "\",\"elements\":" << a.elements << ",\"density\":" << a.density
         << ",\"shared\":" << a.shared << ",\"payload_bytes\":" << totals.payload_bytes
         << ",\"pairs\":" << totals.pairs << ",\"union\":" << totals.union_count
         << ",\"seconds\":" << s << "}";
    emit(line.str());
  }
  return 0;
}

}  // namespace

void add_bench_exchange_command(CLI::App& bench, int& exit_code) {
  auto args = std::make_shared<ExchangeArgs>();
  auto* cmd = bench.add_subcommand(
      "exchange",
      "One rank of the aggregation scaling benchmark (start it once per rank, e.g. under "
      "`gradwire cluster`): times the collectives and the allgather, split and dense paths "
      "of a sparse bucket (or, with --quantized, each codec's two paths for a dense one); "
      "rank 0 prints JSON Lines");
  cmd->add_option("--elements", args->elements, "the bucket's elements")->capture_default_str();
  cmd->add_option("--density", args->density, "the fraction of them each rank sends")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--shared", args->shared,
                  "the fraction of a rank's coordinates that every rank sends too")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--steps", args->steps, "timed repetitions of each operation")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->add_option("--quantized", args->quantized,
                  "codecs, comma-separated (fp16, bf16, int8, int4), whose two paths to time for a "
                  "dense bucket of --elements floats instead of the sparse bucket: the ring "
                  "(or allgather) and the reduce-scatter summed in fp32")
      ->delimiter(',');
  cmd->add_flag("!--no-calibrate", args->calibrate,
                "skip timing the plain collectives (allreduce, allgather, alltoall)");
  cmd->callback([args, &exit_code] {
    try {
      exit_code = run_exchange(*args);
    } catch (const ConfigError& e) {
      std::cerr << "gradwire bench exchange: " << e.what() << std::endl;
      exit_code = 2;
    } catch (const Error& e) {
      std::cerr << "gradwire bench exchange: " << e.what() << std::endl;
      exit_code = 1;
    }
  });
}

}  // namespace gradwire::cli
