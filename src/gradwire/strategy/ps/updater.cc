#include "gradwire/strategy/ps/updater.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>

#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"

namespace gradwire::strategy::ps {
namespace {

constexpr uint32_t kCheckpointMagic = 0x55505747;  // "GWPU" in little-endian bytes
constexpr uint32_t kCheckpointVersion = 1;

// Shortest decimal text that parses back to exactly `value`.
std::string format_number(double value) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, result.ptr);
}

bool is_adaptive(UpdaterKind kind) {
  return kind == UpdaterKind::kDcAsgdAdaptive || kind == UpdaterKind::kDdcAsgd;
}

size_t kind_index(UpdaterKind kind) {
  const auto i = static_cast<size_t>(kind);
  if (i >= updater_names().size()) {
    throw ConfigError("updater kind " + std::to_string(i) + " does not exist");
  }
  return i;
}

// Throws ConfigError unless lo <= value (< or <=) hi and value is finite.
void check_range(const UpdaterOptions& o, const char* key, double value, double lo, bool lo_open,
                 double hi, bool hi_open) {
  const bool ok = std::isfinite(value) && (lo_open ? value > lo : value >= lo) &&
                  (hi_open ? value < hi : value <= hi);
  if (ok) return;
  const std::string upper = std::isinf(hi) ? "inf)" : format_number(hi) + (hi_open ? ")" : "]");
  throw ConfigError("updater '" + updater_name(o.kind) + "': " + key + "=" + format_number(value) +
                    " is out of range " + (lo_open ? "(" : "[") + format_number(lo) + ", " + upper);
}

// ---- kernels: one slice, per coordinate, fp32 -------------------------------------------

// sgd and asgd-staleness: d = (g + wd w) scale; v = mu v + d; w = w - lr v. With scale = 1
// the multiplication is exact, so sgd is torch's d_p = g + wd w; buf = mu buf + d_p;
// w = w - lr buf operation for operation.
void momentum_step(std::span<float> w, float* v, std::span<const float> g, float lr, float mu,
                   float wd, float scale) {
  for (size_t i = 0; i < w.size(); ++i) {
    const float d = (g[i] + wd * w[i]) * scale;
    v[i] = mu * v[i] + d;
    w[i] = w[i] - lr * v[i];
  }
}

// dc-asgd: d = g + wd w + lambda g g (w - b); v = mu v + d; w = w - lr v.
void constant_dc_step(std::span<float> w, float* v, std::span<const float> g,
                      std::span<const float> b, float lr, float mu, float wd, float lambda) {
  for (size_t i = 0; i < w.size(); ++i) {
    const float wi = w[i];
    const float c = lambda * g[i] * g[i] * (wi - b[i]);
    const float d = g[i] + wd * wi + c;
    v[i] = mu * v[i] + d;
    w[i] = wi - lr * v[i];
  }
}

struct AdaptiveConstants {
  float lr, mu, wd;  // mu: mu_t for ddc-asgd
  float a;           // weight of the new direction (1 but in ddc-asgd)
  float lambda0, f;  // c = lambda0 / sqrt(MS + eps) * f * g^2 * (w - b)
  float eps;
  float ms_keep, ms_new;  // MS = ms_keep MS + ms_new g^2
};

inline float compensation(const AdaptiveConstants& k, float ms, float g, float w, float b) {
  const float lam = k.lambda0 / std::sqrt(ms + k.eps);
  return lam * k.f * g * g * (w - b);
}

// dc-asgd-a (UpdateMs, a = f = clip = 1) and ddc-asgd's second pass (MS already updated):
// c = clip * compensation; v = mu v + a (g + wd w + c); w = w - lr v. With a = f = clip = 1
// the extra multiplications are exact, so ddc-asgd then computes what dc-asgd-a does.
template <bool UpdateMs>
void adaptive_dc_step(std::span<float> w, float* v, float* ms, std::span<const float> g,
                      std::span<const float> b, const AdaptiveConstants& k, float clip) {
  for (size_t i = 0; i < w.size(); ++i) {
    const float gi = g[i];
    if constexpr (UpdateMs) ms[i] = k.ms_keep * ms[i] + k.ms_new * gi * gi;
    const float wi = w[i];
    const float c = compensation(k, ms[i], gi, wi, b[i]) * clip;
    const float d = gi + k.wd * wi + c;
    v[i] = k.mu * v[i] + k.a * d;
    w[i] = wi - k.lr * v[i];
  }
}

// ddc-asgd's first pass: updates MS and returns the factor that brings ||c||_2 down to
// ||g||_2 (1 when ||c||_2 <= ||g||_2). Norms in double.
float update_ms_and_clip(std::span<const float> w, float* ms, std::span<const float> g,
                         std::span<const float> b, const AdaptiveConstants& k) {
  double gg = 0.0, cc = 0.0;
  for (size_t i = 0; i < w.size(); ++i) {
    const float gi = g[i];
    ms[i] = k.ms_keep * ms[i] + k.ms_new * gi * gi;
    const double c = compensation(k, ms[i], gi, w[i], b[i]);
    gg += static_cast<double>(gi) * gi;
    cc += c * c;
  }
  if (!(cc > gg)) return 1.0f;  // also when c has a NaN: it propagates, unclipped
  return static_cast<float>(std::sqrt(gg) / std::sqrt(cc));
}

}  // namespace

double asynchronous_momentum(double synchronous, int workers) {
  const double implicit = workers > 1 ? 1.0 - 1.0 / workers : 0.0;
  return std::max(0.0, synchronous - implicit);
}

// ---- options -----------------------------------------------------------------------------

const std::vector<std::string>& updater_names() {
  static const std::vector<std::string> names{"sgd", "asgd-staleness", "dc-asgd", "dc-asgd-a",
                                              "ddc-asgd"};
  return names;
}

const std::string& updater_name(UpdaterKind kind) { return updater_names()[kind_index(kind)]; }

bool reads_backup(UpdaterKind kind) { return kind == UpdaterKind::kDcAsgd || is_adaptive(kind); }

UpdaterOptions UpdaterOptions::parse(const std::string& spec_text) {
  const Spec spec = Spec::parse(spec_text);
  const auto& names = updater_names();
  const auto it = std::find(names.begin(), names.end(), spec.name);
  if (it == names.end()) {
    throw ConfigError("unknown updater '" + spec.name + "'; available: " + join(names));
  }
  UpdaterOptions o;
  o.kind = static_cast<UpdaterKind>(it - names.begin());
  SpecReader reader(spec, "updater");
  switch (o.kind) {
    case UpdaterKind::kSgd:
    case UpdaterKind::kAsgdStaleness:
      break;
    case UpdaterKind::kDcAsgd:
      o.lambda = reader.get_double("lambda", o.lambda);
      break;
    case UpdaterKind::kDdcAsgd:
      o.tau_bar_decay = reader.get_double("tau_bar_decay", o.tau_bar_decay);
      [[fallthrough]];
    case UpdaterKind::kDcAsgdAdaptive:
      o.lambda0 = reader.get_double("lambda0", o.lambda0);
      o.ms_decay = reader.get_double("ms_decay", o.ms_decay);
      o.eps = reader.get_double("eps", o.eps);
      break;
  }
  reader.finish();
  o.validate();
  return o;
}

std::string UpdaterOptions::spec() const {
  Spec s;
  s.name = updater_name(kind);
  switch (kind) {
    case UpdaterKind::kSgd:
    case UpdaterKind::kAsgdStaleness:
      break;
    case UpdaterKind::kDcAsgd:
      s.params["lambda"] = format_number(lambda);
      break;
    case UpdaterKind::kDdcAsgd:
      s.params["tau_bar_decay"] = format_number(tau_bar_decay);
      [[fallthrough]];
    case UpdaterKind::kDcAsgdAdaptive:
      s.params["lambda0"] = format_number(lambda0);
      s.params["ms_decay"] = format_number(ms_decay);
      s.params["eps"] = format_number(eps);
      break;
  }
  return s.to_string();  // keys sorted by std::map
}

void UpdaterOptions::validate() const {
  kind_index(kind);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  check_range(*this, "lr", lr, 0.0, true, kInf, true);
  check_range(*this, "momentum", momentum, 0.0, false, 1.0, true);
  check_range(*this, "weight_decay", weight_decay, 0.0, false, kInf, true);
  check_range(*this, "lambda", lambda, 0.0, false, kInf, true);
  check_range(*this, "lambda0", lambda0, 0.0, false, kInf, true);
  check_range(*this, "ms_decay", ms_decay, 0.0, false, 1.0, true);
  check_range(*this, "eps", eps, 0.0, true, kInf, true);
  check_range(*this, "tau_bar_decay", tau_bar_decay, 0.0, false, 1.0, true);
}

// ---- updater -----------------------------------------------------------------------------

Updater::Updater(UpdaterOptions options, std::vector<size_t> slice_sizes, int num_workers)
    : options_(options), slice_sizes_(std::move(slice_sizes)), num_workers_(num_workers) {
  options_.validate();
  if (num_workers_ < 1) {
    throw ConfigError("updater '" + updater_name(options_.kind) +
                      "': num_workers=" + std::to_string(num_workers_) + " must be at least 1");
  }
  offsets_.reserve(slice_sizes_.size());
  for (const size_t n : slice_sizes_) {
    offsets_.push_back(total_);
    total_ += n;
  }
  velocity_.assign(total_, 0.0f);
  if (is_adaptive(options_.kind)) {
    mean_square_.assign(total_ * static_cast<size_t>(num_workers_), 0.0f);
  }
  tau_bar_ = static_cast<double>(num_workers_ - 1);
}

void Updater::check_push(int worker, std::span<const SliceUpdate> slices) const {
  const std::string who = "updater '" + updater_name(options_.kind) + "': ";
  if (worker < 0 || worker >= num_workers_) {
    throw ConfigError(who + "worker " + std::to_string(worker) + " is out of range [0, " +
                      std::to_string(num_workers_) + ")");
  }
  const bool backup = reads_backup(options_.kind);
  std::vector<bool> seen(slice_sizes_.size(), false);
  for (const SliceUpdate& s : slices) {
    if (s.slice >= slice_sizes_.size()) {
      throw ConfigError(who + "slice " + std::to_string(s.slice) + " is out of range; there are " +
                        std::to_string(slice_sizes_.size()) + " slices");
    }
    if (seen[s.slice]) {
      throw ConfigError(who + "slice " + std::to_string(s.slice) +
                        " is given twice in one push of worker " + std::to_string(worker));
    }
    seen[s.slice] = true;
    const size_t n = slice_sizes_[s.slice];
    const auto check = [&](const char* what, size_t size) {
      if (size != n) {
        throw ConfigError(who + "slice " + std::to_string(s.slice) + " has " + std::to_string(n) +
                          " elements but its " + what + " span has " + std::to_string(size));
      }
    };
    check("weights", s.weights.size());
    check("gradient", s.gradient.size());
    if (backup || !s.backup.empty()) check("backup", s.backup.size());
  }
}

void Updater::apply(int worker, uint64_t staleness, std::span<const SliceUpdate> slices) {
  check_push(worker, slices);
  const double tau = static_cast<double>(staleness);
  const float lr = static_cast<float>(options_.lr);
  const float mu = static_cast<float>(options_.momentum);
  const float wd = static_cast<float>(options_.weight_decay);

  switch (options_.kind) {
    case UpdaterKind::kSgd:
    case UpdaterKind::kAsgdStaleness: {
      const float scale =
          options_.kind == UpdaterKind::kSgd ? 1.0f : static_cast<float>(1.0 / std::max(1.0, tau));
      for (const SliceUpdate& s : slices) {
        momentum_step(s.weights, velocity_.data() + offsets_[s.slice], s.gradient, lr, mu, wd,
                      scale);
      }
      return;
    }
    case UpdaterKind::kDcAsgd: {
      const float lambda = static_cast<float>(options_.lambda);
      for (const SliceUpdate& s : slices) {
        constant_dc_step(s.weights, velocity_.data() + offsets_[s.slice], s.gradient, s.backup, lr,
                         mu, wd, lambda);
      }
      return;
    }
    case UpdaterKind::kDcAsgdAdaptive:
    case UpdaterKind::kDdcAsgd:
      break;
  }

  AdaptiveConstants k{};
  k.lr = lr;
  k.mu = mu;
  k.wd = wd;
  k.a = 1.0f;
  k.lambda0 = static_cast<float>(options_.lambda0);
  k.f = 1.0f;
  k.eps = static_cast<float>(options_.eps);
  k.ms_keep = static_cast<float>(options_.ms_decay);
  k.ms_new = static_cast<float>(1.0 - options_.ms_decay);
  float* ms_worker = mean_square_.data() + static_cast<size_t>(worker) * total_;

  if (options_.kind == UpdaterKind::kDcAsgdAdaptive) {
    for (const SliceUpdate& s : slices) {
      adaptive_dc_step<true>(s.weights, velocity_.data() + offsets_[s.slice],
                             ms_worker + offsets_[s.slice], s.gradient, s.backup, k, 1.0f);
    }
    return;
  }

  // ddc-asgd. a = 1 exactly when tau <= tau_bar; then mu_t = mu0 (not 1 - (1 - mu0), which
  // may differ from mu0 in its last bit).
  const double a = std::min(1.0, (tau_bar_ + 1.0) / (tau + 1.0));
  const double f = std::min(1.0, (2.0 * tau_bar_ + 1.0) / std::max(tau, 1.0));
  k.a = static_cast<float>(a);
  k.f = static_cast<float>(f);
  k.mu = a >= 1.0 ? mu : static_cast<float>(1.0 - a * (1.0 - options_.momentum));
  for (const SliceUpdate& s : slices) {
    float* v = velocity_.data() + offsets_[s.slice];
    float* ms = ms_worker + offsets_[s.slice];
    const float clip = update_ms_and_clip(s.weights, ms, s.gradient, s.backup, k);
    adaptive_dc_step<false>(s.weights, v, ms, s.gradient, s.backup, k, clip);
  }
  tau_bar_ = options_.tau_bar_decay * tau_bar_ + (1.0 - options_.tau_bar_decay) * tau;
}

void Updater::set_lr(double lr) {
  if (!(lr > 0) || !std::isfinite(lr)) {
    throw ConfigError("learning rate " + std::to_string(lr) + " is not positive and finite");
  }
  options_.lr = lr;
}

size_t Updater::state_bytes() const {
  return (velocity_.size() + mean_square_.size()) * sizeof(float);
}

// Checkpoint layout (little-endian):
//   u32 magic "GWPU", u32 version, string canonical spec, u32 num_workers,
//   u64 slice count, u64 size per slice, f64 tau_bar,
//   f32 v[N], then for dc-asgd-a / ddc-asgd f32 MS[M N] (worker-major).
void Updater::save(Bytes& out) const {
  ByteWriter w(out);
  w.put<uint32_t>(kCheckpointMagic);
  w.put<uint32_t>(kCheckpointVersion);
  w.put_string(options_.spec());
  w.put<uint32_t>(static_cast<uint32_t>(num_workers_));
  w.put<uint64_t>(slice_sizes_.size());
  for (const size_t n : slice_sizes_) w.put<uint64_t>(n);
  w.put<double>(tau_bar_);
  w.put_array<float>(velocity_);
  w.put_array<float>(mean_square_);
}

void Updater::load(std::span<const uint8_t> bytes) {
  const std::string what = "updater '" + updater_name(options_.kind) + "' checkpoint: ";
  ByteReader r(bytes);
  if (r.get<uint32_t>("updater checkpoint magic") != kCheckpointMagic) {
    throw PayloadError(what + "bad magic; these bytes are not an updater checkpoint");
  }
  const uint32_t version = r.get<uint32_t>("updater checkpoint version");
  if (version != kCheckpointVersion) {
    throw PayloadError(what + "version " + std::to_string(version) + " is not supported (" +
                       std::to_string(kCheckpointVersion) + " is)");
  }
  const std::string spec_text = r.get_string("updater checkpoint spec");
  std::string name;
  try {
    name = Spec::parse(spec_text).name;
  } catch (const ConfigError& e) {
    throw PayloadError(what + "corrupt spec: " + e.what());
  }
  if (name != updater_name(options_.kind)) {
    throw PayloadError(what + "it was saved by updater '" + spec_text + "'");
  }
  const uint32_t workers = r.get<uint32_t>("updater checkpoint num_workers");
  if (workers != static_cast<uint32_t>(num_workers_)) {
    throw PayloadError(what + "it has " + std::to_string(workers) + " workers, this updater " +
                       std::to_string(num_workers_));
  }
  const uint64_t count = r.get<uint64_t>("updater checkpoint slice count");
  if (count != slice_sizes_.size()) {
    throw PayloadError(what + "it has " + std::to_string(count) + " slices, this updater " +
                       std::to_string(slice_sizes_.size()));
  }
  for (size_t s = 0; s < slice_sizes_.size(); ++s) {
    const uint64_t n = r.get<uint64_t>("updater checkpoint slice size");
    if (n != slice_sizes_[s]) {
      throw PayloadError(what + "its slice " + std::to_string(s) + " has " + std::to_string(n) +
                         " elements, this updater's " + std::to_string(slice_sizes_[s]));
    }
  }
  const double tau_bar = r.get<double>("updater checkpoint tau_bar");
  if (!(std::isfinite(tau_bar) && tau_bar >= 0.0)) {
    throw PayloadError(what + "tau_bar=" + format_number(tau_bar) + " is not a staleness");
  }
  std::vector<float> velocity(velocity_.size());
  r.get_array<float>(velocity, "updater checkpoint momentum buffers");
  std::vector<float> mean_square(mean_square_.size());
  r.get_array<float>(mean_square, "updater checkpoint mean squares");
  for (const float x : mean_square) {
    if (!(x >= 0.0f)) {
      throw PayloadError(what + "a mean square is " + format_number(x) + "; they are >= 0");
    }
  }
  r.expect_end("updater checkpoint");
  velocity_ = std::move(velocity);
  mean_square_ = std::move(mean_square);
  tau_bar_ = tau_bar;
}

}  // namespace gradwire::strategy::ps
