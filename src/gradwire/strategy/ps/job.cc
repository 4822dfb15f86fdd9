#include "gradwire/strategy/ps/job.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>

#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"
#include "gradwire/strategy/ps/updater.h"

namespace gradwire::strategy::ps {
namespace {

std::string number(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

}  // namespace

Consistency Consistency::parse(const std::string& text) {
  Consistency c;
  if (text == "bsp") return c;
  if (text == "asp") {
    c.mode = Mode::kAsp;
    return c;
  }
  if (text.rfind("ssp:", 0) == 0) {
    const std::string bound = text.substr(4);
    char* end = nullptr;
    const long v = std::strtol(bound.c_str(), &end, 10);
    if (!bound.empty() && *end == '\0' && v >= 0 && v <= 1000000) {
      c.mode = Mode::kSsp;
      c.bound = static_cast<uint32_t>(v);
      return c;
    }
  }
  throw ConfigError("consistency '" + text + "' is not one of: bsp, ssp:S (S >= 0), asp");
}

std::string Consistency::to_string() const {
  switch (mode) {
    case Mode::kBsp:
      return "bsp";
    case Mode::kSsp:
      return "ssp:" + std::to_string(bound);
    case Mode::kAsp:
      return "asp";
  }
  return "bsp";
}

PullCodec PullCodec::parse(const std::string& text) {
  PullCodec p;
  if (text.rfind("delta:", 0) == 0) {
    p.delta = true;
    // What the codec leaves behind stays in w - w_bak, so the codec's own error feedback
    // would count it twice.
    Spec spec = Spec::parse(text.substr(6));
    spec.params["ef"] = "0";
    p.codec = compress::canonical_spec(spec.to_string());
    return p;
  }
  const std::string name = Spec::parse(text).name;
  if (name != "none" && name != "fp16" && name != "bf16") {
    throw ConfigError("pull codec '" + text + "' is not one of: none, fp16, bf16, delta:SPEC");
  }
  p.codec = compress::canonical_spec(text);
  return p;
}

std::string PullCodec::to_string() const { return delta ? "delta:" + codec : codec; }

std::string JobConfig::to_text() const {
  std::ostringstream out;
  out << "num_workers=" << num_workers << "\n"
      << "num_servers=" << num_servers << "\n"
      << "consistency=" << consistency.to_string() << "\n"
      << "updater=" << updater << "\n"
      << "lr=" << number(lr) << "\n"
      << "momentum=" << number(momentum) << "\n"
      << "weight_decay=" << number(weight_decay) << "\n"
      << "pull=" << pull.to_string() << "\n"
      << "continue_on_worker_loss=" << (continue_on_worker_loss ? 1 : 0) << "\n"
      << "worker_timeout_s=" << number(worker_timeout_s) << "\n"
      << "checkpoint_dir=" << checkpoint_dir << "\n"
      << "checkpoint_every=" << checkpoint_every << "\n"
      << "sample_budget=" << sample_budget << "\n";
  return out.str();
}

JobConfig JobConfig::from_text(const std::string& text) {
  std::map<std::string, std::string> values;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) throw PayloadError("job configuration line without '='");
    values[line.substr(0, eq)] = line.substr(eq + 1);
  }
  auto take = [&](const char* key) {
    auto it = values.find(key);
    if (it == values.end()) throw PayloadError(std::string("job configuration lacks ") + key);
    std::string v = it->second;
    values.erase(it);
    return v;
  };
  auto to_double = [](const std::string& s) {
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0') throw PayloadError("job configuration: bad number '" + s + "'");
    return v;
  };
  auto to_uint = [](const std::string& s) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || s[0] == '-') {
      throw PayloadError("job configuration: bad count '" + s + "'");
    }
    return static_cast<uint64_t>(v);
  };
  JobConfig c;
  c.num_workers = static_cast<int>(std::min<uint64_t>(to_uint(take("num_workers")), 1 << 20));
  c.num_servers = static_cast<int>(std::min<uint64_t>(to_uint(take("num_servers")), 1 << 20));
  c.consistency = Consistency::parse(take("consistency"));
  c.updater = take("updater");
  c.lr = to_double(take("lr"));
  c.momentum = to_double(take("momentum"));
  c.weight_decay = to_double(take("weight_decay"));
  c.pull = PullCodec::parse(take("pull"));
  c.continue_on_worker_loss = to_uint(take("continue_on_worker_loss")) != 0;
  c.worker_timeout_s = to_double(take("worker_timeout_s"));
  c.checkpoint_dir = take("checkpoint_dir");
  c.checkpoint_every = to_uint(take("checkpoint_every"));
  c.sample_budget = to_uint(take("sample_budget"));
  if (!values.empty()) {
    throw PayloadError("job configuration has unknown key '" + values.begin()->first + "'");
  }
  c.validate();
  return c;
}

void JobConfig::validate() const {
  if (num_workers < 1) throw ConfigError("a parameter-server job needs at least one worker");
  if (num_servers < 1) throw ConfigError("a parameter-server job needs at least one server");
  UpdaterOptions::parse(updater);
  if (!(lr > 0)) throw ConfigError("the servers' learning rate must be positive");
  if (!(momentum >= 0 && momentum < 1)) throw ConfigError("momentum must be in [0, 1)");
  if (!(weight_decay >= 0)) throw ConfigError("weight decay must be >= 0");
  if (!(worker_timeout_s > 0)) throw ConfigError("the worker timeout must be positive");
  if (checkpoint_every > 0 && checkpoint_dir.empty()) {
    throw ConfigError("--checkpoint-every needs --checkpoint-dir");
  }
}

std::vector<Slice> plan_slices(std::span<const compress::TensorInfo> tensors,
                               const compress::CodecPolicy& policy, int num_servers) {
  if (num_servers < 1) throw ConfigError("plan_slices: no servers");
  size_t total = 0;
  for (const auto& t : tensors) total += t.numel();
  const size_t limit = std::max<size_t>(4096, (total + 4 * num_servers - 1) / (4 * num_servers));

  std::vector<Slice> slices;
  for (size_t t = 0; t < tensors.size(); ++t) {
    const auto& tensor = tensors[t];
    const size_t n = tensor.numel();
    const std::string codec = policy.spec_for(tensor);
    // Cut at row boundaries when the tensor has rows (dimension 0), so a slice keeps a
    // meaningful shape for layer-aware codecs (filters, matrix rows).
    const size_t rows = tensor.shape.size() >= 2 ? static_cast<size_t>(tensor.shape[0]) : n;
    const size_t row_size = rows ? n / rows : 1;
    const size_t pieces = std::min(rows, std::max<size_t>(1, (n + limit - 1) / limit));
    for (size_t p = 0; p < pieces; ++p) {
      const size_t row_begin = rows * p / pieces, row_end = rows * (p + 1) / pieces;
      Slice s;
      s.id = static_cast<uint32_t>(slices.size());
      s.tensor = t;
      s.offset = row_begin * row_size;
      s.numel = (row_end - row_begin) * row_size;
      s.codec = codec;
      s.info = tensor;
      if (pieces > 1) {
        s.info.name = tensor.name + "[" + std::to_string(s.offset) + ":" +
                      std::to_string(s.offset + s.numel) + "]";
        if (tensor.shape.size() >= 2) {
          s.info.shape[0] = static_cast<int64_t>(row_end - row_begin);
        } else {
          s.info.shape = {static_cast<int64_t>(s.numel)};
        }
      }
      slices.push_back(std::move(s));
    }
  }
  std::vector<size_t> order(slices.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return slices[a].numel > slices[b].numel; });
  std::vector<size_t> load(num_servers, 0);
  for (size_t i : order) {
    const int server = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    slices[i].server = server;
    load[server] += slices[i].numel;
  }
  return slices;
}

}  // namespace gradwire::strategy::ps
