#include "gradwire/strategy/adaptive/fit_plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "gradwire/compress/policy.h"
#include "gradwire/core/error.h"
#include "gradwire/core/number_text.h"

namespace gradwire::strategy {

std::vector<FitBucket> fit_buckets(const FitInput& input, std::span<const size_t> rungs) {
  std::vector<FitBucket> buckets;
  const size_t big = std::min(input.first_bucket_bytes, input.bucket_bytes);
  size_t elements = 0;  // in the last bucket
  bool closed = false;  // by a tensor of at least `big` bytes
  for (size_t t = 0; t < input.tensors.size(); ++t) {
    const size_t n = input.tensors[t].elements;
    const size_t cap = buckets.size() == 1 ? big : input.bucket_bytes;
    if (!buckets.empty() && !closed && buckets.back().rung == rungs[t] &&
        (elements + n) * sizeof(float) <= cap) {
      buckets.back().end = t + 1;
      elements += n;
    } else {
      buckets.push_back({t, t + 1, rungs[t]});
      elements = n;
    }
    closed = n * sizeof(float) >= big;
  }
  return buckets;
}

double fit_exposed_seconds(const FitInput& input, std::span<const size_t> rungs) {
  double end = 0;
  bool first = true;
  for (const FitBucket& bucket : fit_buckets(input, rungs)) {
    double ready = HUGE_VAL, bytes = 0;
    for (size_t t = bucket.first; t < bucket.end; ++t) {
      ready = std::min(ready, input.tensors[t].ready_s);
      bytes += input.tensors[t].bytes[bucket.rung];
    }
    const double x = comm::ring_allreduce_seconds(input.link, bytes, input.world) +
                     (input.collectives[bucket.rung] - 1) *
                         comm::ring_allreduce_seconds(input.link, 0, input.world);
    end = (first ? -ready : std::max(-ready, end)) + x;
    first = false;
  }
  return std::max(0.0, end);
}

std::vector<size_t> fit_rungs(const FitInput& input) {
  const size_t rung_count = input.collectives.size();
  if (rung_count == 0) throw Error("fit_rungs: no rungs");
  for (const FitTensor& t : input.tensors) {
    if (t.bytes.size() != rung_count) {
      throw Error("fit_rungs: a tensor has bytes for " + std::to_string(t.bytes.size()) +
                  " rungs, not " + std::to_string(rung_count));
    }
  }
  std::vector<size_t> rungs(input.tensors.size(), 0);
  double exposed = fit_exposed_seconds(input, rungs);
  while (exposed > 0) {
    size_t best = rungs.size();
    double best_exposed = exposed;
    for (size_t t = 0; t < rungs.size(); ++t) {
      if (rungs[t] + 1 == rung_count) continue;
      ++rungs[t];
      const double e = fit_exposed_seconds(input, rungs);
      --rungs[t];
      if (e < best_exposed) {
        best = t;
        best_exposed = e;
      }
    }
    if (best == rungs.size()) break;  // no move cuts it
    ++rungs[best];
    exposed = best_exposed;
  }
  return rungs;
}

namespace {

// Tensor names go into a layer policy as "@NAME=SPEC" items, and into decisions' JSON.
bool nameable(const std::string& name) {
  return !name.empty() && name.find_first_of(",= \t\"\\") == std::string::npos;
}

}  // namespace

FitProposal propose_fit(std::span<const compress::TensorInfo> tensors,
                        std::span<const double> ready_s, std::span<const FitRung> rungs,
                        FitInput setting, double tie_ms) {
  if (tensors.size() != ready_s.size() || rungs.empty()) {
    throw Error("propose_fit: " + std::to_string(tensors.size()) + " tensors, " +
                std::to_string(ready_s.size()) + " ready times, " + std::to_string(rungs.size()) +
                " rungs");
  }
  FitProposal out;
  if (tensors.empty()) {
    out.why_not = "not built: the model has no tensors";
    return out;
  }
  FitInput& input = setting;
  input.tensors.clear();
  input.collectives.clear();
  std::vector<compress::CodecPolicy> policies;  // parsed once, asked per tensor
  for (const FitRung& rung : rungs) {
    policies.push_back(compress::CodecPolicy::parse(rung.policy));
    input.collectives.push_back(rung.name == "int8" ? 2 : 1);
  }
  // Reverse registration: the order AllreduceStrategy fills its buckets in.
  std::vector<size_t> order;
  for (size_t k = tensors.size(); k-- > 0;) order.push_back(k);
  for (size_t k : order) {
    FitTensor t;
    t.elements = tensors[k].numel();
    t.ready_s = std::max(0.0, ready_s[k]);
    for (size_t r = 0; r < rungs.size(); ++r) {
      auto codec = policies[r].create(tensors[k]);
      if (const auto wire = codec->additive_wire()) {
        t.bytes.push_back(static_cast<double>(t.elements * compress::wire_type_size(*wire)));
      } else if (auto* shared = codec->shared_scale()) {
        t.bytes.push_back(static_cast<double>(t.elements + shared->blocks() * sizeof(float)));
      } else {
        throw Error("plan " + rungs[r].name + " is neither additive nor int8");
      }
    }
    input.tensors.push_back(std::move(t));
  }
  const std::vector<size_t> on = fit_rungs(input);

  // Per rung, the tensors it got: "none: 6 tensors; int8: fc1.weight".
  std::vector<std::vector<std::string>> names(rungs.size());
  out.policy = "other=" + rungs.front().policy;
  bool mixed = false, all_nameable = true;
  for (size_t i = 0; i < order.size(); ++i) {
    const compress::TensorInfo& tensor = tensors[order[i]];
    mixed = mixed || on[i] != on.front();
    names[on[i]].push_back(tensor.name);
    all_nameable = all_nameable && nameable(tensor.name);
    if (on[i] != 0) out.policy += ",@" + tensor.name + "=" + rungs[on[i]].policy;
  }
  for (size_t r = 0; r < names.size(); ++r) {
    if (names[r].empty()) continue;
    std::string list;
    if (names[r].size() <= 3 && all_nameable) {
      for (const auto& n : names[r]) list += (list.empty() ? "" : " ") + n;
    } else {
      list = std::to_string(names[r].size()) + " tensors";
    }
    out.summary += (out.summary.empty() ? "" : "; ") + rungs[r].name + ": " + list;
  }
  // Against the uniform rung of least exposed exchange, by the same model.
  const double exposed_ms = 1e3 * fit_exposed_seconds(input, on);
  double uniform_ms = HUGE_VAL;
  size_t uniform = 0;
  for (size_t r = 0; r < rungs.size(); ++r) {
    const double ms = 1e3 * fit_exposed_seconds(input, std::vector<size_t>(order.size(), r));
    if (ms < uniform_ms) {
      uniform_ms = ms;
      uniform = r;
    }
  }
  out.summary += "; exposed exchange predicted " + format_tenths(exposed_ms) + " ms against " +
                 rungs[uniform].name + "'s " + format_tenths(uniform_ms);
  if (!mixed) {
    out.why_not = "not measured: every tensor on " + rungs[on.front()].name;
  } else if (!all_nameable) {
    out.why_not = "not built: a tensor name cannot go into a policy";
  } else if (exposed_ms > uniform_ms + tie_ms) {
    // At a tie it is measured: it keeps more tensors exact.
    out.why_not = "not measured: predicted slower than " + rungs[uniform].name;
  }
  return out;
}

}  // namespace gradwire::strategy
