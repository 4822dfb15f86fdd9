#include "gradwire/compress/policy.h"

#include <algorithm>
#include <regex>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/registry.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"

namespace gradwire::compress {
namespace {

constexpr LayerKind kKinds[] = {LayerKind::kConvWeight, LayerKind::kFcWeight, LayerKind::kBias,
                                LayerKind::kNorm, LayerKind::kOther};

bool is_per_kind(const std::string& text) {
  static const std::regex pattern("^\\s*(conv|fc|bias|norm|other|@[^=,\\s]+)\\s*=");
  return std::regex_search(text, pattern);
}

// Splits "conv=a:x=1,y=2,fc=b,@fc1.weight=c" at the commas that start a new KIND= or
// @NAME= item.
std::map<std::string, std::string> split_per_kind(const std::string& text) {
  static const std::regex item_start(",\\s*(conv|fc|bias|norm|other|@[^=,\\s]+)\\s*=");
  std::vector<size_t> cuts{0};
  for (auto it = std::sregex_iterator(text.begin(), text.end(), item_start);
       it != std::sregex_iterator(); ++it) {
    cuts.push_back(static_cast<size_t>(it->position()) + 1);
  }
  cuts.push_back(text.size() + 1);
  std::map<std::string, std::string> items;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const std::string item = text.substr(cuts[i], cuts[i + 1] - 1 - cuts[i]);
    const auto eq = item.find('=');
    std::string kind = item.substr(0, eq);
    kind.erase(0, kind.find_first_not_of(" \t"));
    kind.erase(kind.find_last_not_of(" \t") + 1);
    const std::string spec = item.substr(eq + 1);
    if (spec.find_first_not_of(" \t") == std::string::npos) {
      throw ConfigError("layer policy '" + text + "': no codec given for " + kind);
    }
    if (!items.emplace(kind, spec).second) {
      throw ConfigError("layer policy '" + text + "' names " + kind + " twice");
    }
  }
  return items;
}

std::string with_ef_momentum(const std::string& spec, double momentum) {
  Spec parsed = Spec::parse(spec);
  parsed.params["ef"] = "1";
  parsed.params["momentum"] = format_number(momentum);
  return canonical_spec(parsed.to_string());
}

}  // namespace

CodecPolicy CodecPolicy::parse(const std::string& text) {
  CodecPolicy policy;
  if (is_per_kind(text)) {
    policy.mode_ = Mode::kPerKind;
    auto items = split_per_kind(text);
    for (auto it = items.begin(); it != items.end();) {
      if (it->first.front() != '@') {
        ++it;
        continue;
      }
      policy.by_name_[it->first.substr(1)] = canonical_spec(it->second);
      it = items.erase(it);
    }
    const std::string other = items.count("other") ? items.at("other") : "none";
    for (LayerKind kind : kKinds) {
      auto it = items.find(layer_kind_key(kind));
      policy.by_kind_[kind] = canonical_spec(it != items.end() ? it->second : other);
      if (it != items.end()) items.erase(it);
    }
    if (!items.empty()) {
      throw ConfigError("layer policy '" + text + "': unknown layer kind '" + items.begin()->first +
                        "'; kinds are conv, fc, bias, norm, other");
    }
    return policy;
  }
  const Spec spec = Spec::parse(text);
  if (spec.name == "hylo") {
    policy.mode_ = Mode::kHylo;
    SpecReader reader(spec, "policy");
    policy.t_size_ = reader.get_double_in("t_size", 8000, 1, 1e12);
    policy.p_max_ = reader.get_double_in("p_max", 0.3, 1e-6, 1);
    policy.p_min_ = reader.get_double_in("p_min", 0.02, 1e-6, 1);
    policy.gamma_ = reader.get_double_in("gamma", 0.5, 0, 10);
    policy.alpha_ = reader.get_double_in("alpha", 1.0, 1e-6, 1e6);
    policy.momentum_ = reader.get_double_in("momentum", 0.0, 0.0, 0.999);
    reader.finish();
    if (policy.p_min_ > policy.p_max_) throw ConfigError("hylo: p_min must not exceed p_max");
    return policy;
  }
  policy.uniform_ = canonical_spec(text);
  return policy;
}

std::string CodecPolicy::spec_for(const TensorInfo& tensor) const {
  switch (mode_) {
    case Mode::kUniform:
      return uniform_;
    case Mode::kPerKind: {
      const auto named = by_name_.find(tensor.name);
      return named != by_name_.end() ? named->second : by_kind_.at(tensor.kind);
    }
    case Mode::kHylo:
      break;
  }
  std::string spec;
  const bool small = static_cast<double>(tensor.numel()) < t_size_;
  if (small || tensor.kind == LayerKind::kBias || tensor.kind == LayerKind::kNorm ||
      tensor.kind == LayerKind::kOther) {
    spec = "none";
  } else if (tensor.kind == LayerKind::kConvWeight) {
    spec = "filter-topk:rate=auto,p_max=" + format_number(p_max_) +
           ",p_min=" + format_number(p_min_) + ",gamma=" + format_number(gamma_) +
           ",t_size=" + format_number(t_size_);
  } else {
    spec = "2bit:threshold=auto,alpha=" + format_number(alpha_);
  }
  return momentum_ > 0 ? with_ef_momentum(spec, momentum_) : canonical_spec(spec);
}

std::unique_ptr<Codec> CodecPolicy::create(const TensorInfo& tensor) const {
  return create_codec(spec_for(tensor), tensor);
}

void CodecPolicy::check_tensors(std::span<const TensorInfo> tensors) const {
  for (const auto& entry : by_name_) {
    const std::string& name = entry.first;  // a named variable: lambdas may capture it
    const bool found = std::any_of(tensors.begin(), tensors.end(),
                                   [&](const TensorInfo& t) { return t.name == name; });
    if (!found) {
      throw ConfigError("layer policy '" + canonical() + "' names the tensor '" + name +
                        "', which the model does not have");
    }
  }
}

std::vector<std::string> CodecPolicy::named_tensors() const {
  std::vector<std::string> names;
  for (const auto& entry : by_name_) names.push_back(entry.first);
  return names;
}

std::string CodecPolicy::canonical() const {
  switch (mode_) {
    case Mode::kUniform:
      return uniform_;
    case Mode::kPerKind: {
      std::string out;
      for (LayerKind kind : kKinds) {
        out +=
            (out.empty() ? "" : ",") + std::string(layer_kind_key(kind)) + "=" + by_kind_.at(kind);
      }
      for (const auto& [name, spec] : by_name_) out += ",@" + name + "=" + spec;
      return out;
    }
    case Mode::kHylo:
      break;
  }
  std::string out = "hylo:alpha=" + format_number(alpha_) + ",gamma=" + format_number(gamma_) +
                    ",p_max=" + format_number(p_max_) + ",p_min=" + format_number(p_min_) +
                    ",t_size=" + format_number(t_size_);
  if (momentum_ > 0) out += ",momentum=" + format_number(momentum_);
  return out;
}

CodecPolicy CodecPolicy::with_momentum(double momentum) const {
  CodecPolicy out = *this;
  switch (mode_) {
    case Mode::kUniform:
      out.uniform_ = with_ef_momentum(uniform_, momentum);
      break;
    case Mode::kPerKind:
      for (auto& [kind, spec] : out.by_kind_) spec = with_ef_momentum(spec, momentum);
      for (auto& [name, spec] : out.by_name_) spec = with_ef_momentum(spec, momentum);
      break;
    case Mode::kHylo:
      out.momentum_ = momentum;
      break;
  }
  return out;
}

}  // namespace gradwire::compress
