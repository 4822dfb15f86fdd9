// `gaussiank`: Gaussian-k (SIDCo's GaussianK compressor, ALGORITHMS.md 1.3).
//
//   m, s = mean and standard deviation of a                 one pass
//   t    = m + z s with z = Phi^-1(1 - rho/2)               (the reference's upper two-sided
//          threshold, compared with |a_i|, as SIDCo does; for zero-mean gradients it is the
//          tail P(|X| > t) = rho of the fitted normal)
//   c(t) = #{i : |a_i| > t}
//   up to 4 rounds: t *= 0.5 if c < 2k/3, t *= 1.5 if c > 4k/3, else stop
//   outside [2k/3, 4k/3] after the rounds, and some round had more than 4k/3 pass: exact
//   top-k among the survivors of the highest such threshold (SIDCo sends all survivors of
//   the last round; we cap so that the payload is bounded, and the x0.5 / x1.5 steps can
//   also overshoot both ways and end with too few)
//
// So selected <= 4k/3, and >= 2k/3 unless no round got more than 4k/3 to pass. A zero standard
// deviation (constant tensor) or a non-finite one (NaN/infinity in the tensor) takes the exact
// top-k by |a_i| instead. Body: the top-k body of codecs.h under this codec's id; residual = a with
// the sent positions zeroed.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/sparsify/sparse_select.h"
#include "gradwire/compress/sparsify/sparsifiers.h"

namespace gradwire::compress {
namespace {

constexpr SparseBodyNames kNames{"gaussiank",          "gaussiank k",      "gaussiank layout",
                                 "gaussiank indices",  "gaussiank bitmap", "gaussiank values",
                                 "'gaussiank' payload"};

constexpr uint8_t kStateVersion = 1;
constexpr int kMaxRounds = 4;       // adjustments after the first count
constexpr size_t kKeepFactor = 16;  // survivors kept between counts, in units of k
constexpr size_t kMinKeep = 4096;

// Phi^-1(p) for 0 < p <= 0.5 (the lower tail, where p = rho/2 is accurate): Acklam's rational
// approximation (relative error 1.15e-9) and one Halley step on erfc.
double lower_normal_quantile(double p) {
  constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,  -2.759285104469687e+02,
                          1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                          6.680131188771972e+01, -1.328068155288572e+01};
  constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                          -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                          3.754408661907416e+00};
  double x;
  if (p < 0.02425) {
    const double q = std::sqrt(-2.0 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
  } else {
    const double q = p - 0.5;
    const double r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
  }
  const double e = 0.5 * std::erfc(-x / std::numbers::sqrt2) - p;
  const double u = e * std::sqrt(2.0 * std::numbers::pi) * std::exp(0.5 * x * x);
  return x - u / (1.0 + 0.5 * x * u);
}

class GaussianKCodec final : public IndexedSparsifier {
 public:
  GaussianKCodec(DensitySchedule density, size_t numel)
      : IndexedSparsifier(kGaussianKVersion, kNames), density_(density), numel_(numel) {}

  CodecId id() const override { return CodecId::kGaussianK; }
  std::string spec() const override {
    std::map<std::string, std::string> params;
    density_.describe(params);
    return bare_spec("gaussiank", std::move(params));
  }

  // Checkpoints: the warm-up's position (the selection starts afresh at every encode).
  void save_state(Bytes& out) const override {
    write_state_header(out, *this, kStateVersion, numel_);
    density_.save_state(out);
  }
  void load_state(ByteReader& in) override {
    read_state_header(in, *this, kStateVersion, numel_);
    density_.load_state(in);
  }

 private:
  void select(std::span<const float> a) override {
    const size_t n = a.size();
    const size_t k = topk_count(density_.next(), n);
    stats_ = SelectionStats{};
    stats_.target = k;
    if (n == 0) {
      indices_.clear();
      return;
    }
    const MeanStd fit = mean_std(a);
    stats_.full_passes = 1;
    if (!std::isfinite(fit.mean) || !std::isfinite(fit.std) || fit.std == 0.0) {
      exact_.select(a, k, indices_);
      stats_.exact_fallback = true;
      stats_.full_passes += 2;
      stats_.selected = indices_.size();
      return;
    }
    const double rho = static_cast<double>(k) / static_cast<double>(n);
    const double z = -lower_normal_quantile(0.5 * rho);
    float t = static_cast<float>(std::max(0.0, fit.mean + z * fit.std));
    const double lower = 2.0 * static_cast<double>(k) / 3.0;
    const double upper = 4.0 * static_cast<double>(k) / 3.0;

    selector_.reset(a, 0.0f, std::max(kMinKeep, kKeepFactor * k));
    // The highest threshold that more than 4k/3 passed: its survivors hold the exact top-k.
    float t_over = -1.0f;
    size_t c = selector_.count(t);
    for (int round = 0; round < kMaxRounds; ++round) {
      const auto cd = static_cast<double>(c);
      if (cd > upper) t_over = std::max(t_over, t);
      float keep = t;
      if (cd < lower) {
        // A streaming count below the last one: keep what the next round (x1.5) and the
        // fallback (t_over) need, not the survivors of t itself (up to N/10 here).
        t *= 0.5f;
        keep = t_over >= 0.0f ? std::min(1.5f * t, t_over) : 1.5f * t;
      } else if (cd > upper) {
        t *= 1.5f;  // counted on the survivors of the last count
      } else {
        break;
      }
      c = selector_.count(t, keep);
    }
    const auto cd = static_cast<double>(c);
    if (cd > upper) t_over = std::max(t_over, t);
    // Outside the bracket after the rounds: the exact top-k among the survivors of t_over,
    // when some round had too many (the same k elements as among any larger survivor set).
    if ((cd < lower || cd > upper) && t_over >= 0.0f) t = t_over;
    stats_.exact_fallback =
        selector_.collect(t, static_cast<size_t>(std::floor(upper)), k, indices_);
    stats_.counts = selector_.counts();
    stats_.full_passes += selector_.full_passes();
    stats_.threshold = t;
    stats_.selected = indices_.size();
  }

  DensitySchedule density_;
  size_t numel_;
  ThresholdSelector selector_;
  TopKSelector exact_;
};

}  // namespace

std::unique_ptr<Codec> make_gaussian_k_codec(SpecReader& reader, const TensorInfo& tensor) {
  return std::make_unique<GaussianKCodec>(DensitySchedule::read(reader, "gaussiank", 0.001),
                                          tensor.numel());
}

}  // namespace gradwire::compress
