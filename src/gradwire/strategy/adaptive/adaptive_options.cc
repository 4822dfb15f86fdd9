#include "gradwire/strategy/adaptive/adaptive_options.h"

#include <algorithm>

#include "gradwire/core/error.h"
#include "gradwire/core/number_text.h"
#include "gradwire/core/spec.h"

namespace gradwire::strategy {
namespace {

// "none/fp16/int8" -> {"none", "fp16", "int8"}.
std::vector<std::string> split_plans(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const auto slash = text.find('/', start);
    out.push_back(
        text.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return out;
}

}  // namespace

bool AdaptiveOptions::matches(const std::string& text) {
  const std::string name = text.substr(0, text.find(':'));
  return name == "auto" || name == "accordion";
}

AdaptiveOptions AdaptiveOptions::parse(const std::string& text) {
  const Spec spec = Spec::parse(text);
  SpecReader reader(spec, "codec");
  AdaptiveOptions o;
  const int default_rank = spec.name == "accordion" ? AdaptiveOptions::kAccordionRank : o.rank;
  o.rank = static_cast<int>(reader.get_int_in("rank", default_rank, 1, 1024));
  o.window = static_cast<size_t>(reader.get_int_in("window", 50, 1, 1'000'000));
  o.eta = reader.get_double_in("eta", o.eta, 1e-6, 1e6);
  Spec canonical{spec.name, {}};
  canonical.params["rank"] = std::to_string(o.rank);
  canonical.params["window"] = std::to_string(o.window);
  canonical.params["eta"] = format_parameter(o.eta);
  if (spec.name == "auto") {
    o.mode = Mode::kAuto;
    const std::string plans = reader.get_string("plans", "none/fp16/int8/powersgd");
    for (const auto& name : split_plans(plans)) {
      for (const auto& plan : o.plans) {
        if (plan.name == name) throw ConfigError("codec auto: plan '" + name + "' listed twice");
      }
      o.plans.push_back(make_codec_plan(name, o.rank));
    }
    const auto rungs = std::count_if(o.plans.begin(), o.plans.end(),
                                     [](const CodecPlan& p) { return p.uniform_exact(); });
    const bool fit = std::any_of(o.plans.begin(), o.plans.end(),
                                 [](const CodecPlan& p) { return p.per_bucket; });
    if (fit && rungs < 2) {
      throw ConfigError(
          "codec auto: plan fit chooses per bucket between the plans none, fp16, "
          "bf16 and int8 listed with it; plans '" +
          plans + "' list fewer than two");
    }
    o.penalty = reader.get_double_in("penalty", o.penalty, 0, 100);
    o.trial = static_cast<size_t>(reader.get_int_in("trial", 5, 1, 10'000));
    o.trial_max = static_cast<size_t>(
        reader.get_int_in("trial_max", static_cast<int64_t>(std::max<size_t>(20, o.trial)),
                          static_cast<int64_t>(o.trial), 100'000));
    o.dense = static_cast<size_t>(
        reader.get_int_in("dense", static_cast<int64_t>(o.dense), 0, 1'000'000'000));
    const std::string regimes = reader.get_string("regimes", "off");
    if (regimes != "off" && regimes != "on") {
      throw ConfigError("codec auto: regimes must be off or on, not '" + regimes + "'");
    }
    o.regimes = regimes == "on";
    o.reprobe = static_cast<size_t>(reader.get_int_in("reprobe", 2000, 0, 1'000'000'000));
    o.prune = reader.get_double_in("prune", o.prune, 0, 1e6);
    canonical.params["plans"] = plans;
    canonical.params["penalty"] = format_parameter(o.penalty);
    canonical.params["trial"] = std::to_string(o.trial);
    canonical.params["trial_max"] = std::to_string(o.trial_max);
    canonical.params["dense"] = std::to_string(o.dense);
    canonical.params["regimes"] = regimes;
    canonical.params["reprobe"] = std::to_string(o.reprobe);
    canonical.params["prune"] = format_parameter(o.prune);
  } else if (spec.name == "accordion") {
    o.mode = Mode::kAccordion;
    const std::string critical = reader.get_string("critical", "fp16");
    const std::string normal = reader.get_string("normal", "powersgd");
    o.plans = {make_codec_plan(critical, o.rank), make_codec_plan(normal, o.rank)};
    if (o.plans[0].per_bucket || o.plans[1].per_bucket) {
      throw ConfigError("codec accordion: plan fit is auto's (it is built from auto's trials)");
    }
    canonical.params["critical"] = critical;
    canonical.params["normal"] = normal;
  } else {
    throw ConfigError("'" + spec.name + "' is not an adaptive codec (auto, accordion)");
  }
  reader.finish();
  o.canonical = canonical.to_string();
  return o;
}

}  // namespace gradwire::strategy
