// `filter-topk`: per-filter top-k for convolution weights (Hylo, ALGORITHMS.md 4.2).
//
// A weight [C_out, C_in, kh, kw] is C_out filters of C_in*kh*kw values. Importance of
// filter j is s_j = ||a_j||2; the n = max(1, ceil(p C_out)) most important filters are sent
// whole, the rest stay in the residual (error feedback is on by default). The rate p is
//   rate=auto (default): p = clip(p_max (t_size/numel)^gamma, p_min, p_max)
//                        with p_max 0.3, p_min 0.02, gamma 0.5, t_size 8000
//   rate=R:              p = R
// Tensors of fewer than two dimensions count each element as a filter.
//
// Body: u32 filters | u32 filter_size | u32 n | u32 index[n] (strictly increasing)
//       | f32 values[n * filter_size] (filter by filter, in index order)
#include <algorithm>
#include <cmath>
#include <numeric>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/layer_codecs.h"

namespace gradwire::compress {
namespace {

[[gnu::noinline]] float sum_squares(const float* __restrict a, size_t n) {
  float partial[kVectorBlock] = {};
  size_t i = 0;
  for (; i + kVectorBlock <= n; i += kVectorBlock) {
    for (size_t j = 0; j < kVectorBlock; ++j) partial[j] += a[i + j] * a[i + j];
  }
  float sum = 0.0f;
  for (; i < n; ++i) sum += a[i] * a[i];
  for (float p : partial) sum += p;
  return sum;
}

class FilterTopKCodec final : public Codec {
 public:
  FilterTopKCodec(size_t filters, size_t filter_size, double rate, std::string spec)
      : filters_(filters),
        filter_size_(filter_size),
        selected_(filters == 0
                      ? 0
                      : std::clamp<size_t>(static_cast<size_t>(std::ceil(
                                               rate * static_cast<double>(filters) - 1e-9)),
                                           1, filters)),
        spec_(std::move(spec)) {}

  CodecId id() const override { return CodecId::kFilterTopK; }
  std::string spec() const override { return spec_; }

  // How many filters each payload carries.
  size_t selected() const { return selected_; }

  void encode(std::span<const float> input, Bytes& out) override {
    select(input);
    write(input, out);
  }

  void encode_residual(std::span<float> a, Bytes& out) override {
    select(a);
    write(a, out);
    for (uint32_t j : chosen_) {
      std::fill_n(a.data() + static_cast<size_t>(j) * filter_size_, filter_size_, 0.0f);
    }
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kFilterTopK, kFilterTopKVersion, accum.size());
    const uint32_t filters = reader.get<uint32_t>("filter count");
    const uint32_t filter_size = reader.get<uint32_t>("filter size");
    const uint32_t n = reader.get<uint32_t>("selected filters");
    if (filters != filters_ || filter_size != filter_size_) {
      throw MismatchError("'filter-topk' payload describes " + std::to_string(filters) +
                          " filters of " + std::to_string(filter_size) +
                          " values, this tensor has " + std::to_string(filters_) + " of " +
                          std::to_string(filter_size_));
    }
    if (n > filters) {
      throw PayloadError("corrupt 'filter-topk' payload: " + std::to_string(n) +
                         " selected filters of " + std::to_string(filters));
    }
    indices_.resize(n);
    reader.get_array<uint32_t>(indices_, "filter indices");
    const auto values = reader.get_bytes(size_t{n} * filter_size * sizeof(float), "filter values");
    reader.expect_end("'filter-topk' payload");
    for (uint32_t i = 0; i < n; ++i) {
      if (indices_[i] >= filters || (i > 0 && indices_[i] <= indices_[i - 1])) {
        throw PayloadError("corrupt 'filter-topk' payload: filter index " +
                           std::to_string(indices_[i]) + " at position " + std::to_string(i) +
                           " is out of range or not increasing");
      }
    }
    for (uint32_t i = 0; i < n; ++i) {
      float* dst = accum.data() + static_cast<size_t>(indices_[i]) * filter_size;
      const uint8_t* src = values.data() + size_t{i} * filter_size * sizeof(float);
      for (size_t k = 0; k < filter_size; ++k) dst[k] += load_f32(src, k);
    }
  }

 private:
  void select(std::span<const float> a) {
    if (a.size() != filters_ * filter_size_) {
      throw Error("'filter-topk' codec for " + std::to_string(filters_ * filter_size_) +
                  " elements was given " + std::to_string(a.size()));
    }
    norms_.resize(filters_);
    for (size_t j = 0; j < filters_; ++j)
      norms_[j] = sum_squares(a.data() + j * filter_size_, filter_size_);
    chosen_.resize(filters_);
    std::iota(chosen_.begin(), chosen_.end(), 0u);
    // Largest norms first; ties to the lower index so every rank chooses alike.
    auto more_important = [&](uint32_t x, uint32_t y) {
      return norms_[x] > norms_[y] || (norms_[x] == norms_[y] && x < y);
    };
    std::nth_element(chosen_.begin(), chosen_.begin() + selected_, chosen_.end(), more_important);
    chosen_.resize(selected_);
    std::sort(chosen_.begin(), chosen_.end());
  }

  void write(std::span<const float> a, Bytes& out) const {
    ByteWriter writer(out);
    PayloadHeader{CodecId::kFilterTopK, kFilterTopKVersion, checked_count(a.size(), id())}.write(
        writer);
    writer.put<uint32_t>(static_cast<uint32_t>(filters_));
    writer.put<uint32_t>(static_cast<uint32_t>(filter_size_));
    writer.put<uint32_t>(static_cast<uint32_t>(chosen_.size()));
    writer.put_array<uint32_t>(chosen_);
    for (uint32_t j : chosen_) {
      writer.put_array<float>(a.subspan(static_cast<size_t>(j) * filter_size_, filter_size_));
    }
  }

  size_t filters_;
  size_t filter_size_;
  size_t selected_;
  std::string spec_;
  std::vector<float> norms_;
  std::vector<uint32_t> chosen_;
  mutable std::vector<uint32_t> indices_;  // decode scratch
};

}  // namespace

double hylo_filter_rate(size_t numel, double p_max, double p_min, double gamma, double t_size) {
  const double p =
      p_max * std::pow(t_size / static_cast<double>(std::max<size_t>(1, numel)), gamma);
  return std::clamp(p, p_min, p_max);
}

std::unique_ptr<Codec> make_filter_topk_codec(SpecReader& reader, const TensorInfo& tensor) {
  const std::string rate_text = reader.get_string("rate", "auto");
  std::map<std::string, std::string> params;
  double rate;
  if (rate_text == "auto") {
    const double p_max = reader.get_double_in("p_max", 0.3, 1e-6, 1.0);
    const double p_min = reader.get_double_in("p_min", 0.02, 1e-6, 1.0);
    const double gamma = reader.get_double_in("gamma", 0.5, 0.0, 10.0);
    const double t_size = reader.get_double_in("t_size", 8000, 1.0, 1e12);
    if (p_min > p_max) throw ConfigError("codec 'filter-topk': p_min must not exceed p_max");
    rate = hylo_filter_rate(tensor.numel(), p_max, p_min, gamma, t_size);
    params = {{"rate", "auto"},
              {"p_max", format_number(p_max)},
              {"p_min", format_number(p_min)},
              {"gamma", format_number(gamma)},
              {"t_size", format_number(t_size)}};
  } else {
    rate = reader.get_double_in("rate", 0.1, 1e-9, 1.0);
    params = {{"rate", format_number(rate)}};
  }
  const size_t numel = tensor.numel();
  const size_t filters =
      tensor.shape.size() >= 2 ? static_cast<size_t>(std::max<int64_t>(0, tensor.shape[0])) : numel;
  const size_t filter_size = filters == 0 ? 0 : numel / filters;
  return std::make_unique<FilterTopKCodec>(filters, filter_size, rate,
                                           bare_spec("filter-topk", std::move(params)));
}

}  // namespace gradwire::compress
