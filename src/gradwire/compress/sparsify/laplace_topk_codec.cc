// `laplace-topk`: top-k by a Laplace-fitted threshold instead of a sort (ALGORITHMS.md 1.2).
//
//   mu = 0, or the median of a 1% strided sample (center=median)
//   b  = mean |a_i - mu|                                   one pass (with max |a_i - mu|)
//   t0 = b ln(N/k)                 N exp(-t/b) = k: the Laplace tail puts k elements above t0
//   c(t) = #{i : |a_i - mu| > t}                           one pass
//   while c outside [(1-eps)k, (1+eps)k] and fewer than max_rounds counts:
//     t <- t + b ln(c/k) (model step), or the midpoint of the bracket [lo, hi] that holds
//     the target when the model step leaves it, and from the first model step that did not
//     get closer (did not halve |ln(c/k)|) on
//   more than (1+eps)k left: exact top-k among the survivors only
//   fewer than (1-eps)k left after a count with more than (1+eps)k: exact top-k among that
//   count's survivors (our addition: the rounds ran out while the bracket held the answer)
//
// A count at t >= max |a_i - mu| is 0 without a pass. A streaming count also keeps the
// survivors of a slightly lower threshold (about 1.5 c(t) elements when the model fits, and
// below last step's final threshold, which error feedback usually puts under t0), so
// correction rounds and the final collection read those instead of the tensor. The fit pass
// itself keeps the survivors of last step's final threshold less b ln 1.5, so when the
// first count's t0 lies above that (the usual case under error feedback, whose residual
// grows b), the fit and the counts are one streaming pass; otherwise two.
//
// An all-zero tensor sends nothing. NaN or infinity in the tensor (no finite fit), or a
// tensor equal to its median everywhere (b = 0 with center=median), sends the exact top-k by
// |a_i| instead. Body: the top-k body of codecs.h under this codec's id; residual = a with
// the sent positions zeroed.
#include <algorithm>
#include <cmath>
#include <limits>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/error_feedback.h"
#include "gradwire/compress/sparsify/sparse_select.h"
#include "gradwire/compress/sparsify/sparsifiers.h"

namespace gradwire::compress {
namespace {

constexpr SparseBodyNames kNames{
    "laplace-topk",        "laplace-topk k",      "laplace-topk layout",   "laplace-topk indices",
    "laplace-topk bitmap", "laplace-topk values", "'laplace-topk' payload"};

enum class Center { kZero, kMedian };

struct LaplaceOptions {
  DensitySchedule density{0.001, 0};
  Center center = Center::kZero;
  double eps = 0.2;
  int max_rounds = 8;
};

// Survivors kept between counts (see select()): room for 16k.
constexpr size_t kKeepFactor = 16;
constexpr size_t kMinKeep = 4096;
const double kKeepMargin = std::log(1.5);
constexpr double kNoPrior = std::numeric_limits<double>::infinity();
constexpr double kSampleFraction = 0.01;  // center=median: 1% strided sample
constexpr size_t kMinSample = 1024;
constexpr uint8_t kStateVersion = 1;

class LaplaceTopKCodec final : public IndexedSparsifier, public FusedAccumulate {
 public:
  LaplaceTopKCodec(const LaplaceOptions& options, size_t numel)
      : IndexedSparsifier(kLaplaceTopKVersion, kNames), options_(options), numel_(numel) {}

  CodecId id() const override { return CodecId::kLaplaceTopK; }
  std::string spec() const override {
    std::map<std::string, std::string> params{
        {"center", options_.center == Center::kZero ? "zero" : "median"},
        {"eps", format_number(options_.eps)},
        {"max_rounds", std::to_string(options_.max_rounds)}};
    options_.density.describe(params);
    return bare_spec("laplace-topk", std::move(params));
  }

  // Error feedback's a = g + r folded into the fit's pass over r (ErrorFeedback without
  // momentum calls this instead of r += g then encode_residual(r), which it equals bit for
  // bit).
  void add_encode_residual(std::span<const float> g, std::span<float> r, Bytes& out) override {
    checked_count(r.size(), id());
    const size_t k = topk_count(options_.density.next(), r.size());
    const float mu = center_of(r, g);
    select_fitted(r, mu, k, selector_.add_fit_and_keep(g, r, mu, capacity_for(k), last_keep_));
    write_payload(r, out);
    clear_sent(r);
  }

  // Checkpoints: the warm-up's position and the last step's threshold, which starts the
  // next search; and that threshold less a margin, what the fit pass keeps (it changes how
  // many passes the search takes, never what it selects, and is saved so that a restored
  // codec runs exactly as the saved one).
  void save_state(Bytes& out) const override {
    write_state_header(out, *this, kStateVersion, numel_);
    options_.density.save_state(out);
    ByteWriter writer(out);
    writer.put<double>(previous_);
    writer.put<float>(last_keep_);
  }
  void load_state(ByteReader& in) override {
    read_state_header(in, *this, kStateVersion, numel_);
    DensitySchedule density = options_.density;
    density.load_state(in);
    const double previous = in.get<double>("laplace-topk prior");
    const float last_keep = in.get<float>("laplace-topk kept threshold");
    options_.density = density;
    previous_ = previous;
    last_keep_ = last_keep;
  }

 private:
  // mu of a + add (add empty: of a), from a strided sample.
  float center_of(std::span<const float> a, std::span<const float> add) {
    if (options_.center == Center::kZero || a.empty()) return 0.0f;
    const size_t n = a.size();
    const size_t samples =
        std::min(n, std::max(kMinSample, static_cast<size_t>(std::ceil(kSampleFraction * n))));
    const size_t stride = n / samples;
    sample_.resize(samples);
    for (size_t j = 0; j < samples; ++j) {
      sample_[j] = add.empty() ? a[j * stride] : a[j * stride] + add[j * stride];
    }
    // NaN would break nth_element's ordering; it also makes the fit non-finite below.
    for (const float v : sample_) {
      if (std::isnan(v)) return v;
    }
    const auto mid = sample_.begin() + static_cast<std::ptrdiff_t>(samples / 2);
    std::nth_element(sample_.begin(), mid, sample_.end());
    return *mid;
  }

  // Sets indices_ (increasing) and stats_.
  void select(std::span<const float> a) override {
    const size_t k = topk_count(options_.density.next(), a.size());
    const float mu = center_of(a, {});
    select_fitted(a, mu, k, selector_.fit_and_keep(a, mu, capacity_for(k), last_keep_));
  }

  static size_t capacity_for(size_t k) { return std::max(kMinKeep, kKeepFactor * k); }

  // select() once the selector made the fit pass over `a` (keeping the survivors of last
  // step's final threshold less a margin: when the first count's threshold t0 lies above it,
  // as error feedback's growing residual makes usual, the fit and that count are one pass).
  void select_fitted(std::span<const float> a, float mu, size_t k, const AbsStats& fit) {
    const size_t n = a.size();
    stats_ = SelectionStats{};
    stats_.target = k;
    stats_.full_passes = selector_.full_passes();
    if (n == 0) {
      indices_.clear();
      return;
    }
    const double b = fit.sum / static_cast<double>(n);
    if (b == 0.0 && mu == 0.0f) {
      indices_.clear();  // an all-zero tensor: nothing to send
      return;
    }
    if (!std::isfinite(b) || !std::isfinite(mu) || b == 0.0) {
      // NaN or infinity in the tensor, or a constant one around its median: no fit; send the
      // exact top-k by |a_i|.
      exact_.select(a, k, indices_);
      stats_.exact_fallback = true;
      stats_.full_passes += 2;
      stats_.selected = indices_.size();
      return;
    }

    const double target = static_cast<double>(k);
    const double lower = (1.0 - options_.eps) * target;
    const double upper = (1.0 + options_.eps) * target;
    const auto in_bracket = [&](size_t c) {
      return static_cast<double>(c) >= lower && static_cast<double>(c) <= upper;
    };
    // Distance from the target on the model's scale (the count is exponential in t).
    const auto miss = [&](size_t c) {
      return std::fabs(std::log(std::max<double>(static_cast<double>(c), 0.5) / target));
    };

    const size_t capacity = capacity_for(k);
    // Each streaming count also keeps the survivors of a lower threshold for the rounds after
    // it: those of lo once c(lo) is known to fit (every later threshold lies above lo), else
    // those of min(t, last step's final threshold) - b ln 1.5 (about 1.5 c(t) on the model's
    // slope). Only the cost of later rounds depends on this choice, never a count.
    const double margin = b * kKeepMargin;
    const double t0 = b * std::log(static_cast<double>(n) / target);
    const double prior = previous_ * b;
    // The first count: last step's final threshold in units of b when there is one (a
    // gradient's shape changes slowly from step to step, and under error feedback the
    // residual's lighter-than-Laplace tail puts the answer well below t0), else t0.
    double t = std::isfinite(prior) && prior > 0 && prior < fit.max ? prior : t0;
    size_t c =
        selector_.count(static_cast<float>(t), static_cast<float>(std::min(t, prior) - margin));
    // [lo, hi] brackets the threshold we look for: c(hi) = 0 <= upper; lo = 0 counts all.
    double lo = 0.0;
    double hi = fit.max;
    size_t c_lo = n;
    bool lo_counted = false;  // lo is a threshold that was counted (too many passed it)
    bool model_ok = true;
    while (!in_bracket(c) && selector_.counts() < options_.max_rounds) {
      if (static_cast<double>(c) > upper) {
        lo = std::max(lo, t);
        c_lo = c;
        lo_counted = true;
      } else {
        hi = std::min(hi, t);
      }
      double next = 0.5 * (lo + hi);
      bool model_step = false;
      if (model_ok && c > 0) {
        const double m = t + b * std::log(static_cast<double>(c) / target);
        if (m > lo && m < hi) {
          next = m;
          model_step = true;
        }
      }
      if (static_cast<float>(next) == static_cast<float>(t)) break;  // bracket exhausted
      const double keep =
          lo_counted && c_lo <= capacity ? lo : std::max(lo, std::min(next, prior) - margin);
      const size_t c_next = selector_.count(static_cast<float>(next), static_cast<float>(keep));
      // A model step that does not at least halve the distance to k (on the log scale the
      // model works on) has a wrong slope: bisect from here on.
      if (model_step && miss(c_next) > 0.5 * miss(c)) model_ok = false;
      t = next;
      c = c_next;
    }
    // Still too few, but a threshold with too many is known: its survivors hold the top k.
    if (static_cast<double>(c) < lower && lo_counted) t = lo;
    stats_.exact_fallback = selector_.collect(static_cast<float>(t),
                                              static_cast<size_t>(std::floor(upper)), k, indices_);
    stats_.counts = selector_.counts();
    stats_.full_passes = selector_.full_passes();
    stats_.threshold = static_cast<float>(t);
    stats_.selected = indices_.size();
    previous_ = b > 0.0 ? t / b : kNoPrior;
    last_keep_ = static_cast<float>(t - margin);
  }

  LaplaceOptions options_;
  size_t numel_;
  double previous_ = kNoPrior;  // the last step's final threshold in units of its b
  float last_keep_ = std::numeric_limits<float>::infinity();  // and less b ln 1.5, absolute
  ThresholdSelector selector_;
  TopKSelector exact_;
  std::vector<float> sample_;
};

}  // namespace

std::unique_ptr<Codec> make_laplace_topk_codec(SpecReader& reader, const TensorInfo& tensor) {
  LaplaceOptions options;
  options.density = DensitySchedule::read(reader, "laplace-topk", 0.001);
  const std::string center = reader.get_string("center", "zero");
  if (center == "zero") {
    options.center = Center::kZero;
  } else if (center == "median") {
    options.center = Center::kMedian;
  } else {
    throw ConfigError("codec 'laplace-topk': center=" + center +
                      " is not one of zero, median (the Laplace location mu)");
  }
  options.eps = reader.get_double_in("eps", options.eps, 0.0, 1.0);
  options.max_rounds = static_cast<int>(reader.get_int_in("max_rounds", options.max_rounds, 1, 64));
  return std::make_unique<LaplaceTopKCodec>(options, tensor.numel());
}

}  // namespace gradwire::compress
