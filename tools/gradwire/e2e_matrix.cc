#include "e2e_matrix.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"
#include "gradwire/diloco_options.h"
#include "gradwire/strategy/gossip/trigger.h"
#include "gradwire/strategy/ps/job.h"
#include "gradwire/strategy/ps/updater.h"
#include "gradwire/strategy/registry.h"
#include "gradwire/text_corpus.h"
#include "gradwire/train/gpt.h"

namespace gradwire::cli::e2e {
namespace {

constexpr size_t kFashionMnistTrain = 60000;

std::string number(double value) {
  std::ostringstream out;
  out.precision(10);
  out << value;
  return out.str();
}

// A file-name-safe rendering of a configuration: "ps:ddc-asgd" -> "ps-ddc-asgd".
std::string slug(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-';
    out += keep ? c : '-';
  }
  return out;
}

double parse_target(const std::string& text, const std::string& option, bool loss) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (loss) {
    if (text.empty() || *end != '\0' || !(value > 0) || !std::isfinite(value)) {
      throw ConfigError(option + ": '" + text + "' is not a loss (a positive number such as 1.6)");
    }
    return value;
  }
  if (text.empty() || *end != '\0' || !(value > 0) || value >= 100) {
    throw ConfigError(option + ": '" + text +
                      "' is not an accuracy (a fraction such as 0.88 or a percentage such as 88)");
  }
  return value > 1 ? value / 100 : value;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace

std::vector<std::string> default_configs() {
  // DDP's PowerSGD as auto's PowerSGD plan runs: rank 8, min_compression_rate 2 (PyTorch's
  // default), and the shortest dense start PyTorch allows with error feedback (2 steps; auto's
  // under Adam's family; under SGD auto has none, a handicap of DDP's hook that a table
  // states), so that the two differ in implementation, not in configuration.
  return {"ddp:allreduce", "ddp:fp16", "ddp:powersgd:rank=8,start=2", "none",
          "fp16",          "int8",     "powersgd:min_rate=2,rank=8",  "auto"};
}

std::string Targets::show(double value) const {
  char text[32];
  if (higher_is_better) {
    std::snprintf(text, sizeof text, "%.2f%%", 100 * value);
  } else {
    std::snprintf(text, sizeof text, "%.4f", value);
  }
  return text;
}

bool measured_by_loss(const std::string& model) { return model == "gpt"; }

size_t train_samples(const std::string& model, size_t limit, const std::string& corpus) {
  size_t n = kFashionMnistTrain;
  if (measured_by_loss(model)) {
    const auto text = load_text_corpus(corpus.empty() ? kBibleCorpusPath : corpus);
    n = static_cast<size_t>((text.train.numel() - 1) / train::GptConfig{}.context);
  }
  return limit > 0 ? std::min(limit, n) : n;
}

std::string initial_weights_path(const Settings& settings, const std::string& model,
                                 uint64_t seed) {
  if (!measured_by_loss(model)) return "";
  return settings.weights_dir + "/" + model + "-seed" + std::to_string(seed) + ".weights";
}

std::map<std::string, double> parse_targets(const std::string& text,
                                            const std::vector<std::string>& models,
                                            const std::string& option, bool loss) {
  std::map<std::string, double> accuracies;
  if (models.empty()) return accuracies;
  if (text.find('=') == std::string::npos) {
    const double all = parse_target(text, option, loss);
    for (const auto& m : models) accuracies[m] = all;
    return accuracies;
  }
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      throw ConfigError(option + ": '" + item + "' is not MODEL=" + (loss ? "LOSS" : "ACCURACY"));
    }
    accuracies[item.substr(0, eq)] = parse_target(item.substr(eq + 1), option, loss);
  }
  for (const auto& m : models) {
    if (!accuracies.count(m)) {
      throw ConfigError(option + " gives no " + (loss ? "loss" : "accuracy") + " for model " + m);
    }
  }
  return accuracies;
}

// "SPEC+PATH" -> SPEC, with `path` set to PATH (ring, reduce-scatter, auto); else as it is.
std::string take_quantized_path(const std::string& text, std::string& path) {
  const auto plus = text.rfind('+');
  if (plus == std::string::npos) return text;
  const std::string suffix = text.substr(plus + 1);
  if (suffix != "ring" && suffix != "reduce-scatter" && suffix != "auto") return text;
  path = suffix;
  return text.substr(0, plus);
}

Config parse_config(const std::string& text) {
  if (text.rfind("python:", 0) == 0) {
    // The Python module's DiLoCo (gradwire.DiLoCo) in the peer's PyTorch loop, with the
    // flags of `gradwire train --strategy diloco`: python:diloco:...[/CODEC].
    Config c = parse_config(text.substr(7));
    if (!c.diloco()) {
      throw ConfigError("configuration '" + text + "': the Python configurations are " +
                        "python:diloco:...[/CODEC]");
    }
    c.name = text;
    c.system = "python";
    return c;
  }
  Config c;
  c.name = text;
  if (text.rfind("ddp:gradwire-", 0) == 0) {
    // DDP with gradwire's hook (the Python module): ddp:gradwire-CODEC.
    c.system = "ddp";
    c.hook = "gradwire";
    c.codec = take_quantized_path(text.substr(13), c.quantized_path);
    try {
      strategy::canonical_codec(c.codec);
    } catch (const ConfigError& e) {
      throw ConfigError("configuration '" + text + "': " + e.what());
    }
    return c;
  }
  if (text.rfind("ddp:", 0) == 0) {
    c.system = "ddp";
    const Spec hook = Spec::parse(text.substr(4));
    c.hook = hook.name;
    if (c.hook != "allreduce" && c.hook != "fp16" && c.hook != "bf16" && c.hook != "powersgd" &&
        c.hook != "localsgd") {
      throw ConfigError("configuration '" + text +
                        "': DDP hooks are allreduce, fp16, bf16, powersgd, localsgd and "
                        "gradwire-CODEC");
    }
    SpecReader reader(hook, "DDP hook");
    if (c.hook == "powersgd") {
      c.powersgd_rank = static_cast<int>(reader.get_int_in("rank", 2, 1, 1024));
      c.powersgd_start = reader.get_int_in("start", -1, -1, 1LL << 40);
      c.powersgd_buckets = reader.get_string("buckets", "one");
      if (c.powersgd_buckets != "one" && c.powersgd_buckets != "ddp") {
        throw ConfigError("configuration '" + text + "': buckets is one or ddp");
      }
    }
    if (c.hook == "localsgd") {
      c.localsgd_period = reader.get_int_in("period", 10, 1, 1LL << 40);
      c.localsgd_warmup = reader.get_int_in("warmup", 0, 0, 1LL << 40);
    }
    reader.finish();
    return c;
  }
  c.system = "gradwire";
  if (text.rfind("ps:", 0) == 0) {
    const std::string rest = text.substr(3);
    const auto colon = rest.find(':');
    c.updater = rest.substr(0, colon);
    c.consistency = colon == std::string::npos ? "asp" : rest.substr(colon + 1);
    const auto& updaters = strategy::ps::updater_names();
    if (std::find(updaters.begin(), updaters.end(), c.updater) == updaters.end()) {
      throw ConfigError("configuration '" + text + "': unknown updater '" + c.updater +
                        "'; available: " + join(updaters));
    }
    strategy::ps::Consistency::parse(c.consistency);  // ConfigError naming the choices
    return c;
  }
  if (text.rfind("gossip:", 0) == 0 || text.rfind("gossip-wait:", 0) == 0) {
    c.gossip_wait = text.rfind("gossip-wait:", 0) == 0;
    c.gossip_trigger = text.substr(text.find(':') + 1);
    try {
      strategy::gossip::Trigger::parse(c.gossip_trigger);
    } catch (const ConfigError& e) {
      throw ConfigError("configuration '" + text + "': " + e.what());
    }
    return c;
  }
  if (text.rfind("diloco", 0) == 0) {
    const auto slash = text.find('/');
    // No /CODEC: `gradwire train --strategy diloco`'s default outer codec.
    c.codec = strategy::codec_or_default(slash == std::string::npos ? "" : text.substr(slash + 1),
                                         "diloco");
    try {
      const Spec spec = Spec::parse(text.substr(0, slash));
      if (spec.name != "diloco") throw ConfigError("not a diloco configuration");
      c.diloco_flags = {"--strategy", "diloco"};
      SpecReader reader(spec, "diloco configuration");
      // A key left out keeps `gradwire train`'s default (DiLoCoOptions).
      const DiLoCoOptions defaults;
      const std::string h = reader.get_string(
          "inner_steps", defaults.inner_steps ? std::to_string(defaults.inner_steps) : "auto");
      if (h != "auto" && !(std::strtoll(h.c_str(), nullptr, 10) > 0 &&
                           h.find_first_not_of("0123456789") == std::string::npos)) {
        throw ConfigError("inner_steps must be a positive number or auto, not '" + h + "'");
      }
      c.diloco_flags.insert(c.diloco_flags.end(), {"--inner-steps", h});
      const auto flag = [&](const char* key, const char* name, double fallback) {
        const double v = reader.get_double(key, fallback);
        c.diloco_flags.insert(c.diloco_flags.end(), {name, number(v)});
      };
      flag("fragments", "--fragments", defaults.fragments);
      flag("delay", "--fragment-delay", static_cast<double>(defaults.delay));
      flag("outer_lr", "--outer-lr", defaults.outer_lr);
      flag("outer_momentum", "--outer-momentum", defaults.outer_momentum);
      flag("outer_warmup", "--outer-warmup", static_cast<double>(defaults.outer_warmup));
      c.epochs = static_cast<int>(reader.get_int_in("epochs", 0, 0, 1000));
      c.batch_size = static_cast<int>(reader.get_int_in("batch", 0, 0, 1 << 20));
      if (reader.has("lr")) {
        c.lr = reader.get_double("lr", 0);
        if (!(*c.lr > 0)) throw ConfigError("lr must be positive");
      }
      reader.finish();
      strategy::canonical_codec(c.codec);
    } catch (const ConfigError& e) {
      throw ConfigError("configuration '" + text + "': " + e.what() +
                        " (diloco:inner_steps=H,fragments=F,delay=TAU,outer_lr=LR,"
                        "outer_momentum=M,outer_warmup=W,epochs=E,batch=B,lr=LR/CODEC)");
    }
    return c;
  }
  if (text.empty()) throw ConfigError("an empty configuration in --configs");
  c.codec = take_quantized_path(text, c.quantized_path);
  try {
    strategy::canonical_codec(c.codec);  // a layer policy or an adaptive codec (auto)
  } catch (const ConfigError& e) {
    throw ConfigError("configuration '" + text + "': " + e.what());
  }
  return c;
}

size_t steps_per_epoch(const Settings& settings, const std::string& model, int workers) {
  const auto known = settings.train_sizes.find(model);
  const size_t n = known != settings.train_sizes.end()
                       ? known->second
                       : train_samples(model, settings.train_limit, "");
  const size_t shard = (n + workers - 1) / workers;
  const size_t step = static_cast<size_t>(settings.batch_size) * settings.accumulate;
  return (shard + step - 1) / step;
}

int run_batch_size(const Settings& settings, const Run& run) {
  return run.config.batch_size > 0 ? run.config.batch_size : settings.batch_size;
}

int run_epochs(const Settings& settings, const Run& run) {
  return run.config.epochs > 0 ? run.config.epochs : settings.epochs;
}

size_t run_steps_per_epoch(const Settings& settings, const Run& run) {
  Settings at_its_batch = settings;
  at_its_batch.batch_size = run_batch_size(settings, run);
  return steps_per_epoch(at_its_batch, run.model, run.workers);
}

std::vector<Run> build_matrix(const Settings& settings) {
  std::vector<Run> runs;
  const auto add = [&](const Config& config, const std::string& model, const std::string& bw,
                       int repeat, bool floor) {
    Run run;
    run.index = static_cast<int>(runs.size()) + 1;
    run.config = config;
    run.model = model;
    run.bandwidth = bw;
    run.repeat = repeat;
    run.floor = floor;
    run.workers = settings.hosts;
    run.hosts = settings.hosts + (config.ps() ? 1 : 0);
    run.id = model + "-" + (floor ? std::string("floor") : slug(bw)) + "-" + config.system + "-" +
             slug(config.system == "gradwire" ? config.name
                                              : config.name.substr(config.name.find(':') + 1)) +
             "-r" + std::to_string(repeat);
    runs.push_back(run);
  };
  std::vector<Config> configs;
  for (const auto& text : settings.configs) configs.push_back(parse_config(text));
  for (int r = 1; r <= settings.seeds; ++r) {
    if (settings.compute_floor) {
      for (const auto& model : settings.models)
        add(parse_config("none"), model, "unlimited", r, true);
    }
    for (const auto& model : settings.models) {
      for (const auto& bw : settings.bandwidths) {
        for (const auto& config : configs) add(config, model, bw, r, false);
      }
    }
  }
  return runs;
}

std::vector<std::string> run_command(const Settings& s, const Run& run, const std::string& self,
                                     const std::string& peer, const std::string& metrics) {
  // Evaluations at the same samples for every run: --eval-every counts steps at the
  // matrix's batch, so a run with a batch of its own evaluates as often in samples.
  const size_t eval_every =
      s.eval_every > 0 ? std::max<size_t>(1, s.eval_every * static_cast<size_t>(s.batch_size) /
                                                 static_cast<size_t>(run_batch_size(s, run)))
                       : std::max<size_t>(1, (run_steps_per_epoch(s, run) + 3) / 4);
  const uint64_t seed = s.seed + run.repeat - 1;
  std::vector<std::string> common = {"--model",      run.model,
                                     "--epochs",     std::to_string(run_epochs(s, run)),
                                     "--batch-size", std::to_string(run_batch_size(s, run)),
                                     "--seed",       std::to_string(seed),
                                     "--threads",    "1",
                                     "--eval-every", std::to_string(eval_every),
                                     "--metrics",    metrics,
                                     "--progress",   "none"};
  // The run's own learning rate (a diloco configuration's lr=LR), else the matrix's.
  if (const auto lr = run.config.lr ? run.config.lr : s.lr) {
    common.insert(common.end(), {"--lr", number(*lr)});
  }
  if (s.accumulate > 1) common.insert(common.end(), {"--accumulate", std::to_string(s.accumulate)});
  // Momentum: SGD's (the recipe's 0.9 unless given); the asynchronous configurations' own.
  const auto momentum = [&](std::vector<std::string>& cmd) {
    if (s.momentum) cmd.insert(cmd.end(), {"--momentum", number(*s.momentum)});
  };
  if (s.train_limit > 0)
    common.insert(common.end(), {"--train-limit", std::to_string(s.train_limit)});
  if (s.test_limit > 0) common.insert(common.end(), {"--test-limit", std::to_string(s.test_limit)});
  if (s.flush_denormal) common.push_back("--flush-denormal");
  std::vector<std::string> cmd;
  const auto add_initial_weights = [&] {
    const std::string weights = initial_weights_path(s, run.model, seed);
    if (!weights.empty()) cmd.insert(cmd.end(), {"--initial-weights", weights});
  };
  if (run.config.system == "python") {
    cmd = {"/usr/bin/python3", peer};
    cmd.insert(cmd.end(), run.config.diloco_flags.begin(), run.config.diloco_flags.end());
    cmd.insert(cmd.end(), {"--compressor", run.config.codec});
    momentum(cmd);
    add_initial_weights();
    if (!run.floor) cmd.insert(cmd.end(), {"--link-bandwidth", run.bandwidth});
  } else if (run.config.system == "ddp") {
    cmd = {"/usr/bin/python3", peer, "--hook", run.config.hook};
    momentum(cmd);
    add_initial_weights();
    if (run.config.hook == "powersgd") {
      cmd.insert(cmd.end(), {"--powersgd-rank", std::to_string(run.config.powersgd_rank),
                             "--powersgd-start-iter", std::to_string(run.config.powersgd_start),
                             "--powersgd-buckets", run.config.powersgd_buckets});
    }
    if (run.config.hook == "localsgd") {
      cmd.insert(cmd.end(), {"--localsgd-period", std::to_string(run.config.localsgd_period),
                             "--localsgd-warmup", std::to_string(run.config.localsgd_warmup)});
    }
    if (run.config.hook == "gradwire") {
      cmd.insert(cmd.end(), {"--gradwire-codec", run.config.codec});
      if (!run.config.quantized_path.empty()) {
        cmd.insert(cmd.end(), {"--gradwire-quantized-path", run.config.quantized_path});
      }
      // The hook's cost model is told the link, as the C++ path's is.
      if (!run.floor) cmd.insert(cmd.end(), {"--link-bandwidth", run.bandwidth});
    }
  } else if (run.config.ps()) {
    cmd = {self,
           "train",
           "--worker",
           "--strategy",
           "ps",
           "--updater",
           run.config.updater,
           "--consistency",
           run.config.consistency,
           "--momentum",
           number(s.async_momentum)};
  } else if (run.config.diloco()) {
    cmd = {self, "train", "--worker", "--compressor", run.config.codec};
    cmd.insert(cmd.end(), run.config.diloco_flags.begin(), run.config.diloco_flags.end());
    momentum(cmd);
    // auto's H is chosen for the link, as a user would tell it.
    if (!run.floor) cmd.insert(cmd.end(), {"--link-bandwidth", run.bandwidth});
  } else if (run.config.gossip()) {
    cmd = {self,
           "train",
           "--worker",
           "--strategy",
           "gossip",
           "--gossip-trigger",
           run.config.gossip_trigger};
    momentum(cmd);
    if (run.config.gossip_wait) cmd.push_back("--gossip-wait");
  } else {
    cmd = {self, "train", "--worker", "--compressor", run.config.codec};
    if (!run.config.quantized_path.empty()) {
      cmd.insert(cmd.end(), {"--quantized-path", run.config.quantized_path});
    }
    momentum(cmd);
    // The cost model of auto and of sparse aggregation is told the link, as a user would.
    if (!run.floor) cmd.insert(cmd.end(), {"--link-bandwidth", run.bandwidth});
  }
  // Every run but the parameter server's and gossip's records where its steps' time goes
  // (the Python peer through gradwire.timeline).
  if (!s.timeline_dir.empty() && !run.config.ps() && !run.config.gossip()) {
    cmd.insert(cmd.end(), {"--timeline", s.timeline_dir + "/" + run.id + ".trace.json"});
  }
  cmd.insert(cmd.end(), common.begin(), common.end());
  return cmd;
}

std::vector<std::string> run_environment(const Run& run) {
  // Gossip workers listen for their peers on their host's link.
  if (run.config.gossip()) return {"GRADWIRE_PS_BIND=0.0.0.0"};
  if (!run.config.ps()) return {};
  // The server is the last rank, alone on the extra host; it listens on that host's link.
  return {"GRADWIRE_NUM_SERVERS=1", "GRADWIRE_PS_BIND=0.0.0.0"};
}

std::optional<double> crossing_time(const std::vector<std::pair<double, double>>& evals,
                                    const Targets& targets, double target) {
  for (size_t i = 0; i < evals.size(); ++i) {
    const auto [t1, v1] = evals[i];
    if (!targets.reached(v1, target)) continue;
    if (i == 0) return t1;
    const auto [t0, v0] = evals[i - 1];
    // v0 did not reach the target and v1 did, so they differ and the share is in (0, 1].
    const double share = (target - v0) / (v1 - v0);
    return t0 + std::clamp(share, 0.0, 1.0) * (t1 - t0);
  }
  return std::nullopt;
}

Outcome read_outcome(const std::string& metrics_path, Targets targets, int workers,
                     int batch_size) {
  Outcome out;
  std::ifstream in(metrics_path);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      continue;  // a line still being written
    }
    const std::string event = j.value("event", "");
    if (event == "eval") {
      const double t = j.value("train_s", 0.0), value = j.value(targets.metric, 0.0);
      out.evals.emplace_back(t, value);
      out.last_step = std::max<size_t>(out.last_step, j.value("step", size_t{0}));
    } else if (event == "summary") {
      out.complete = true;
      out.codec = j.value("codec", "");
      out.final_quality = j.value(targets.metric, 0.0);
      out.train_s = j.value("train_s", j.value("elapsed_s", 0.0));
      // Metrics of earlier versions have only "bytes_sent" (the contribution).
      const double sent = j.value("bytes_contributed", j.value("bytes_sent", 0.0));
      const double wire = j.value("bytes_on_wire", 0.0);
      const double received = j.value("bytes_received", 0.0);
      // Worker steps: per-rank steps x workers, or (parameter server) samples / batch.
      double steps = j.contains("samples") ? j["samples"].get<double>() / batch_size
                                           : j.value("steps", 0.0) * workers;
      if (steps > 0) {
        out.bytes_per_step = sent / steps;
        out.wire_bytes_per_step = wire / steps;
        out.bytes_received_per_step = received / steps;
      }
    }
  }
  out.time_to_steep_s = crossing_time(out.evals, targets, targets.steep);
  out.time_to_target_s = crossing_time(out.evals, targets, targets.plateau);
  return out;
}

void write_csv(const std::string& path, const Settings& settings, const std::vector<Run>& runs,
               const std::map<int, Outcome>& outcomes, const std::map<int, std::string>& status,
               const Floors& floors, const std::string& runs_dir) {
  std::ofstream csv(path, std::ios::trunc);
  if (!csv) throw SystemError(errno_message("cannot write " + path, errno));
  // The targets and the final value in the model's metric (CSVs of earlier versions named
  // these columns steep_accuracy, target_accuracy and final_accuracy, and had no metric).
  csv << "system,config,codec,model,bandwidth,run,seed,status,metric,steep_target,"
         "time_to_steep_s,target,time_to_target_s,final,train_s,compute_floor_s,overhead,"
         "bytes_per_step,wire_bytes_per_step,bytes_received_per_step,metrics,crossing\n";
  const auto seconds = [](const std::optional<double>& t) {
    char text[32] = "";
    if (t) std::snprintf(text, sizeof text, "%.2f", *t);
    return std::string(text);
  };
  for (const Run& run : runs) {
    const auto found = outcomes.find(run.index);
    const auto st = status.find(run.index);
    if (found == outcomes.end() || st == status.end()) continue;
    const Outcome& o = found->second;
    const Targets targets = settings.targets.at(run.model);
    const auto floor = floors.find({run.model, run.repeat});
    const bool have_floor = floor != floors.end() && floor->second > 0 && o.complete;
    char overhead[32] = "";
    if (have_floor) std::snprintf(overhead, sizeof overhead, "%.4f", o.train_s / floor->second - 1);
    csv << run.config.system << "," << csv_field(run.floor ? "none (floor)" : run.config.name)
        << "," << csv_field(o.codec) << "," << run.model << "," << run.bandwidth << ","
        << run.repeat << "," << settings.seed + run.repeat - 1 << "," << st->second << ","
        << targets.metric << "," << targets.steep << "," << seconds(o.time_to_steep_s) << ","
        << targets.plateau << "," << seconds(o.time_to_target_s) << ","
        << (o.complete ? number(o.final_quality) : "") << ","
        << (o.complete ? number(o.train_s) : "") << ","
        << (floor != floors.end() ? number(floor->second) : "") << "," << overhead << ","
        << (o.complete ? number(std::round(o.bytes_per_step)) : "") << ","
        << (o.complete && o.wire_bytes_per_step > 0 ? number(std::round(o.wire_bytes_per_step))
                                                    : "")
        << "," << (o.complete ? number(std::round(o.bytes_received_per_step)) : "") << ","
        << csv_field(runs_dir + "/" + run.id + ".jsonl") << ",interpolated\n";
  }
  if (!csv) throw SystemError(errno_message("writing " + path + " failed", errno));
}

}  // namespace gradwire::cli::e2e
