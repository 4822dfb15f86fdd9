// A parameter-server job's configuration and the layout of the model over the servers.
//
// The configuration comes from the workers (DistributedOptions / `gradwire train` flags):
// every worker sends it in its hello and a server refuses a worker whose text differs from
// the first one's, so servers need no options of their own beyond where to listen.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradwire/compress/codec.h"
#include "gradwire/compress/policy.h"

namespace gradwire::strategy::ps {

// --consistency bsp | ssp:S | asp.
struct Consistency {
  enum class Mode { kBsp, kSsp, kAsp };
  Mode mode = Mode::kBsp;
  uint32_t bound = 0;  // SSP: a worker starts step c only when every live worker finished c - S

  static Consistency parse(const std::string& text);  // ConfigError naming the choices
  std::string to_string() const;
};

// How weights travel back to a worker:
//   none | fp16 | bf16   the weights themselves, through that codec
//   delta:SPEC           SPEC-encoded w - w_bak(m), where w_bak(m) is what worker m holds;
//                        what the codec drops stays in w - w_bak(m) and goes next time
struct PullCodec {
  bool delta = false;
  std::string codec = "none";  // canonical codec spec

  static PullCodec parse(const std::string& text);
  std::string to_string() const;
};

struct JobConfig {
  int num_workers = 1;
  int num_servers = 1;
  Consistency consistency;
  std::string updater = "sgd";  // UpdaterOptions spec
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 0;
  PullCodec pull;
  bool continue_on_worker_loss = false;  // BSP only; SSP and ASP always go on
  double worker_timeout_s = 60;          // silence after which a worker is presumed lost
  std::string checkpoint_dir;            // empty: no checkpoints
  uint64_t checkpoint_every = 0;         // updates between checkpoints
  uint64_t sample_budget = 0;            // > 0: progress.done once this many samples

  // One "key=value" line per field, in a fixed order: equal texts mean equal configs.
  std::string to_text() const;
  static JobConfig from_text(const std::string& text);  // PayloadError/ConfigError
  void validate() const;                                // ConfigError
};

// One contiguous piece of one tensor, owned by one server.
struct Slice {
  uint32_t id = 0;
  size_t tensor = 0;  // index into the tensors given to plan_slices
  size_t offset = 0;  // first element within the tensor
  size_t numel = 0;
  int server = 0;
  compress::TensorInfo info;  // name "fc1.weight[0:65536]", shape in whole rows when possible
  std::string codec;          // canonical spec, chosen by the policy for the whole tensor
};

// Cuts tensors larger than max(4096, total / (4 S)) elements into near-equal pieces at row
// boundaries, then gives each piece to the least-loaded server, largest first (LPT), so
// the servers' loads differ by at most one piece. Deterministic: every worker computes the
// same layout.
std::vector<Slice> plan_slices(std::span<const compress::TensorInfo> tensors,
                               const compress::CodecPolicy& policy, int num_servers);

}  // namespace gradwire::strategy::ps
