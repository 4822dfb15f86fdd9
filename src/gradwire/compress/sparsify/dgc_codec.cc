// `dgc`: Deep Gradient Compression's sampled threshold (ALGORITHMS.md 1.3, after
// synxlin/deep-gradient-compression).
//
//   sample n_s = max(ceil(sample N), 1024) elements (all when N is smaller), stride N / n_s
//   thr   = the smallest of the sample's top ceil(rho n_s) magnitudes
//   c     = #{i : |a_i| >= thr}                              (DGC compares with >=)
//   c > 1.3k: exact top-k among the survivors; c < 0.8k: thr *= 0.8 and count again;
//   at most 10 counts
//
// So 0 <= selected <= 1.3k (exactly k after the fallback), normally >= 0.8k. The first count
// also keeps the survivors of 0.8 thr, so a lowering round reads those, not the tensor.
// A non-finite threshold (NaN or infinity in the sample) takes the exact top-k instead.
// DGC's momentum correction and momentum factor masking are the generic `momentum=m` key of
// ErrorFeedback (error_feedback.h): `dgc:density=0.001,momentum=0.9`. Body: the top-k body
// of codecs.h under this codec's id; residual = a with the sent positions zeroed.
#include <algorithm>
#include <cmath>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/sparsify/sparse_select.h"
#include "gradwire/compress/sparsify/sparsifiers.h"

namespace gradwire::compress {
namespace {

constexpr SparseBodyNames kNames{"dgc",        "dgc k",      "dgc layout",   "dgc indices",
                                 "dgc bitmap", "dgc values", "'dgc' payload"};

constexpr uint8_t kStateVersion = 1;
constexpr size_t kMinSample = 1024;
constexpr int kMaxCounts = 10;
constexpr double kUpper = 1.3;
constexpr double kLower = 0.8;
constexpr float kLowerStep = 0.8f;
constexpr size_t kKeepFactor = 8;
constexpr size_t kMinKeep = 4096;

// The strict threshold t with (d > t) == (d >= thr) for every non-NaN d >= 0.
float at_least(float thr) { return thr > 0.0f ? std::nextafter(thr, 0.0f) : -1.0f; }

class DgcCodec final : public IndexedSparsifier {
 public:
  DgcCodec(DensitySchedule density, double sample, size_t numel)
      : IndexedSparsifier(kDgcVersion, kNames),
        density_(density),
        sample_fraction_(sample),
        numel_(numel) {}

  CodecId id() const override { return CodecId::kDgc; }
  std::string spec() const override {
    std::map<std::string, std::string> params{{"sample", format_number(sample_fraction_)}};
    density_.describe(params);
    return bare_spec("dgc", std::move(params));
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
    const double density = density_.next();
    const size_t k = topk_count(density, n);
    stats_ = SelectionStats{};
    stats_.target = k;
    if (n == 0) {
      indices_.clear();
      return;
    }
    const size_t samples =
        std::min(n, std::max(kMinSample, static_cast<size_t>(std::ceil(sample_fraction_ * n))));
    const size_t stride = n / samples;
    sample_.resize(samples);
    for (size_t j = 0; j < samples; ++j) sample_[j] = a[j * stride];
    float thr = nth_largest_magnitude(sample_, topk_count(density, samples) - 1, keys_);
    if (!std::isfinite(thr)) {
      exact_.select(a, k, indices_);
      stats_.exact_fallback = true;
      stats_.full_passes = 2;
      stats_.selected = indices_.size();
      return;
    }

    const double target = static_cast<double>(k);
    selector_.reset(a, 0.0f, std::max(kMinKeep, kKeepFactor * k));
    size_t c = selector_.count(at_least(thr), at_least(thr * kLowerStep));
    while (static_cast<double>(c) < kLower * target && selector_.counts() < kMaxCounts &&
           thr > 0.0f) {
      thr *= kLowerStep;
      c = selector_.count(at_least(thr));
    }
    stats_.exact_fallback = selector_.collect(
        at_least(thr), static_cast<size_t>(std::floor(kUpper * target)), k, indices_);
    stats_.counts = selector_.counts();
    stats_.full_passes = selector_.full_passes();
    stats_.threshold = thr;
    stats_.selected = indices_.size();
  }

  DensitySchedule density_;
  double sample_fraction_;
  size_t numel_;
  ThresholdSelector selector_;
  TopKSelector exact_;
  std::vector<float> sample_;
  std::vector<uint32_t> keys_;
};

}  // namespace

std::unique_ptr<Codec> make_dgc_codec(SpecReader& reader, const TensorInfo& tensor) {
  const DensitySchedule density = DensitySchedule::read(reader, "dgc", 0.001);
  const double sample = reader.get_double("sample", 0.01);
  if (!(sample >= 0.01 && sample <= 1.0)) {
    throw ConfigError("codec 'dgc': sample=" + format_number(sample) +
                      " is out of range [0.01, 1]; it is the fraction of elements sampled to "
                      "estimate the threshold (DGC samples at least 1%)");
  }
  return std::make_unique<DgcCodec>(density, sample, tensor.numel());
}

}  // namespace gradwire::compress
