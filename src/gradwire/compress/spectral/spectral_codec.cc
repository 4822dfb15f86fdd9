// `spectral`: frequency-domain sparsification + range-based float (ALGORITHMS.md 5); the
// format and the rules are in spectral_codec.h.
#include "gradwire/compress/spectral/spectral_codec.h"

#include <fftw3.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <mutex>
#include <new>
#include <type_traits>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/spectral/range_float.h"
#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

constexpr CodecId kId = CodecId::kSpectral;
constexpr uint8_t kStateVersion = 1;

// --- FFTW resources ------------------------------------------------------------------------

// FFTW's planner (plan creation and destruction) is not thread-safe; fftwf_execute_* is.
std::mutex& fftw_planner_mutex() {
  static std::mutex mutex;
  return mutex;
}

struct FftwFree {
  void operator()(void* p) const { fftwf_free(p); }
};
template <typename T>
using FftwArray = std::unique_ptr<T[], FftwFree>;

// SIMD-aligned like every other fftwf_malloc array, so any of them can stand in for the
// arrays a plan was made on (FFTW's new-array execute requires the same alignment).
template <typename T>
FftwArray<T> fftw_array(size_t n) {
  void* p = fftwf_malloc(sizeof(T) * std::max<size_t>(n, 1));
  if (p == nullptr) throw std::bad_alloc();
  return FftwArray<T>(static_cast<T*>(p));
}

struct PlanDestroy {
  void operator()(fftwf_plan plan) const {
    const std::lock_guard<std::mutex> lock(fftw_planner_mutex());
    fftwf_destroy_plan(plan);
  }
};
using Plan = std::unique_ptr<std::remove_pointer_t<fftwf_plan>, PlanDestroy>;

// The real FFT pair of one chunk size n: forward r2c (n reals -> n/2+1 complex) and inverse
// c2r (unnormalised). FFTW_ESTIMATE: planning is fast and picks the same plan on every
// rank (FFTW_MEASURE would time candidates and could pick different ones).
struct Transform {
  size_t n = 0;
  size_t m = 0;  // n/2 + 1 coefficients
  Plan forward;
  Plan inverse;
};

Transform make_transform(size_t n) {
  Transform t;
  t.n = n;
  t.m = n / 2 + 1;
  auto real = fftw_array<float>(n);
  auto spectrum = fftw_array<fftwf_complex>(t.m);
  const std::lock_guard<std::mutex> lock(fftw_planner_mutex());
  const unsigned flags = FFTW_ESTIMATE | FFTW_DESTROY_INPUT;
  const int size = static_cast<int>(n);
  t.forward.reset(fftwf_plan_dft_r2c_1d(size, real.get(), spectrum.get(), flags));
  t.inverse.reset(fftwf_plan_dft_c2r_1d(size, spectrum.get(), real.get(), flags));
  if (!t.forward || !t.inverse) {
    throw Error("codec 'spectral': FFTW could not plan a real FFT of " + std::to_string(n) +
                " points");
  }
  return t;
}

// Work arrays for one encode or decode call, sized for the largest chunk.
struct Scratch {
  explicit Scratch(size_t n)
      : real(fftw_array<float>(n)), spectrum(fftw_array<fftwf_complex>(n / 2 + 1)), values(n + 2) {}
  FftwArray<float> real;              // n
  FftwArray<fftwf_complex> spectrum;  // n/2 + 1
  std::vector<float> values;          // 2 (n/2 + 1): kept Re, Im interleaved
};

// --- payload pieces ------------------------------------------------------------------------

size_t bitmap_bytes(size_t m) { return (m + 7) / 8; }
bool uses_bitmap(size_t m, size_t count) { return bitmap_bytes(m) <= 2 * count; }

// One chunk of a payload, validated by read_chunk().
struct ChunkView {
  RangeFloatBlock block;
  uint32_t count = 0;
  bool bitmap = false;
  const uint8_t* positions = nullptr;
  const uint8_t* values = nullptr;
};

[[noreturn]] void corrupt(size_t chunk, const std::string& what) {
  throw PayloadError("corrupt 'spectral' payload: chunk " + std::to_string(chunk) + ": " + what);
}

void check_bitmap(const uint8_t* bits, size_t m, uint32_t count, size_t chunk) {
  const size_t bytes = bitmap_bytes(m);
  size_t set = 0;
  size_t byte = 0;
  for (; byte + 8 <= bytes; byte += 8) {
    uint64_t word;
    std::memcpy(&word, bits + byte, 8);
    set += static_cast<size_t>(std::popcount(word));
  }
  for (; byte < bytes; ++byte) set += static_cast<size_t>(std::popcount(bits[byte]));
  if (m % 8 != 0 && (bits[bytes - 1] >> (m % 8)) != 0) {
    corrupt(chunk, "position bitmap has bits set past coefficient " + std::to_string(m - 1));
  }
  if (set != count) {
    corrupt(chunk, "position bitmap marks " + std::to_string(set) +
                       " coefficients but count = " + std::to_string(count));
  }
}

void check_position_list(const uint8_t* list, size_t m, uint32_t count, size_t chunk) {
  int previous = -1;
  for (size_t i = 0; i < count; ++i) {
    uint16_t j;
    std::memcpy(&j, list + 2 * i, 2);
    if (j >= m || static_cast<int>(j) <= previous) {
      corrupt(chunk, "position #" + std::to_string(i) + " is " + std::to_string(j) +
                         (j >= m ? " but the chunk has " + std::to_string(m) + " coefficients"
                                 : " after " + std::to_string(previous) +
                                       " (positions must be strictly increasing)"));
    }
    previous = j;
  }
}

// Reads and validates chunk `chunk` of m coefficients; throws PayloadError.
ChunkView read_chunk(ByteReader& reader, size_t m, int bits, size_t chunk) {
  ChunkView view;
  view.block.e_max = reader.get<int8_t>("spectral chunk e_max");
  view.block.width = reader.get<uint8_t>("spectral chunk exponent width");
  view.count = reader.get<uint32_t>("spectral chunk count");
  const int max_width = std::min(kRangeFloatMaxWidth, bits - 1);
  if (view.block.width > max_width) {
    corrupt(chunk, "exponent width E = " + std::to_string(view.block.width) + " (at most " +
                       std::to_string(max_width) + " with " + std::to_string(bits) + " bits)");
  }
  if (view.block.width == 0 && view.block.e_max != 0) {
    corrupt(chunk, "E = 0 (all values zero) with e_max = " + std::to_string(view.block.e_max) +
                       " (must be 0)");
  }
  if (view.count > m) {
    corrupt(chunk,
            "count = " + std::to_string(view.count) + " kept coefficients of " + std::to_string(m));
  }
  if (view.count == 0 && view.block.width != 0) corrupt(chunk, "count = 0 needs E = 0");
  view.bitmap = uses_bitmap(m, view.count);
  if (view.bitmap) {
    view.positions = reader.get_bytes(bitmap_bytes(m), "spectral position bitmap").data();
    check_bitmap(view.positions, m, view.count, chunk);
  } else {
    view.positions = reader.get_bytes(2 * size_t{view.count}, "spectral position list").data();
    check_position_list(view.positions, m, view.count, chunk);
  }
  const size_t values = 2 * size_t{view.count};
  const size_t value_bytes = range_float_bytes(values, bits, view.block.width);
  view.values = reader.get_bytes(value_bytes, "spectral values").data();
  if (!range_float_padding_is_zero(view.values, values, bits, view.block.width)) {
    corrupt(chunk, "value bits past the last value are not zero");
  }
  return view;
}

// --- kernels -------------------------------------------------------------------------------

// Largest magnitude bits of the 2m floats of the spectrum (NaN and infinity compare above
// every finite value, so this is also the finiteness check).
[[gnu::noinline]] uint32_t max_magnitude_bits(const float* __restrict x, size_t n) {
  std::array<uint32_t, kVectorBlock> lanes{};  // fixed-width lanes: GCC vectorizes at -O2
  vector_loop(n, [&](size_t i) {
    uint32_t& lane = lanes[i % kVectorBlock];
    lane = std::max(lane, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
  });
  return *std::max_element(lanes.begin(), lanes.end());
}

// key_j = |X_j|^2 s^2: s is a power of two that brings the largest part into [1, 2), so no
// key overflows and the order of magnitudes is kept, except among coefficients below about
// 2^-63 of the largest, whose keys lose precision or underflow (the range-based float
// flushes such parts to zero anyway).
[[gnu::noinline]] void magnitude_keys(const float* __restrict x, uint32_t* __restrict keys,
                                      size_t m, float s) {
  vector_loop(m, [=](size_t j) {
    const float re = x[2 * j] * s;
    const float im = x[2 * j + 1] * s;
    keys[j] = std::bit_cast<uint32_t>(re * re + im * im);
  });
}

// Exact top-k of the magnitude keys: keys are bit patterns of non-negative floats, so their
// integer order is the order of magnitudes; ties at the k-th key go to the lowest positions,
// so the result is a deterministic function of the keys. Three passes: a histogram of the
// top 12 key bits finds the bucket that holds the k-th largest key, that bucket's keys are
// gathered and std::nth_element pins the exact key, and one pass collects the positions in
// increasing order. Measured at m = 32769 (chunk 65536, theta 0.9, Laplace data): about
// 55 us; std::nth_element over all keys 260-300 us, TopKSelector::select_radix about 70 us.
class SpectrumSelector {
 public:
  explicit SpectrumSelector(size_t max_m = 0) { candidates_.reserve(max_m + 1); }

  void select(const uint32_t* keys, size_t m, size_t k, std::vector<uint32_t>& indices) {
    indices.resize(k);
    uint32_t* out = indices.data();
    if (k >= m) {
      for (size_t j = 0; j < m; ++j) out[j] = static_cast<uint32_t>(j);
      return;
    }
    if (k == 0) return;
    histogram_.fill(0);
    for (size_t j = 0; j < m; ++j) ++histogram_[keys[j] >> kShift];
    size_t above = 0;  // keys in buckets above `bucket`
    uint32_t bucket = kBins - 1;
    while (above + histogram_[bucket] < k) above += histogram_[bucket--];

    // Branch-free gather (one slot of slack for the writes after the last match).
    const size_t count = histogram_[bucket];
    candidates_.resize(count + 1);
    uint32_t* first = candidates_.data();
    uint32_t* last = first + count;
    size_t c = 0;
    for (size_t j = 0; j < m; ++j) {
      first[c] = keys[j];
      c += (keys[j] >> kShift) == bucket;
    }
    // The bucket's `rank` largest keys are kept.
    const size_t rank = k - above;
    uint32_t* nth = last - rank;
    std::nth_element(first, nth, last);
    const uint32_t threshold = *nth;
    const auto greater = static_cast<size_t>(
        std::count_if(nth + 1, last, [&](uint32_t key) { return key > threshold; }));
    const auto equal = static_cast<size_t>(
        std::count_if(first, last, [&](uint32_t key) { return key == threshold; }));
    size_t ties = rank - greater;  // keys equal to the threshold that are kept

    size_t n = 0;
    if (ties == equal) {
      // Every key >= threshold is kept (the usual case): branch-free, one slot of slack.
      indices.resize(k + 1);
      out = indices.data();
      for (size_t j = 0; j < m; ++j) {
        out[n] = static_cast<uint32_t>(j);
        n += keys[j] >= threshold;
      }
      indices.resize(k);
      return;
    }
    for (size_t j = 0; j < m; ++j) {
      const uint32_t key = keys[j];
      if (key > threshold || (key == threshold && ties != 0)) {
        ties -= key == threshold;
        out[n++] = static_cast<uint32_t>(j);
      }
    }
  }

 private:
  static constexpr int kShift = 19;  // keys < 2^31: 12 bits remain
  static constexpr uint32_t kBins = 1u << 12;
  std::array<uint32_t, kBins> histogram_{};
  std::vector<uint32_t> candidates_;
};

// accum[i] += real[i] * inv_n  (inv_n = 1/n, exact).
[[gnu::noinline]] void add_scaled(const float* __restrict real, float* __restrict accum, size_t n,
                                  float inv_n) {
  vector_loop(n, [=](size_t i) { accum[i] += real[i] * inv_n; });
}

[[gnu::noinline]] void subtract_scaled(const float* __restrict real, float* __restrict a, size_t n,
                                       float inv_n) {
  vector_loop(n, [=](size_t i) { a[i] -= real[i] * inv_n; });
}

class SpectralCodec final : public Codec {
 public:
  SpectralCodec(const ThetaSchedule& theta, size_t chunk, int bits, size_t numel)
      : theta_(theta), chunk_(chunk), bits_(bits), numel_(numel) {
    const size_t last = spectral_last_chunk(numel, chunk);
    if (numel >= chunk) full_ = make_transform(chunk);
    if (numel % chunk != 0) last_ = make_transform(last);
    const size_t largest = std::max(full_.n, last_.n);
    if (largest != 0) {
      encode_scratch_ = std::make_unique<Scratch>(largest);
      decode_scratch_ = std::make_unique<Scratch>(largest);
      keys_.resize(largest / 2 + 1);
      indices_.reserve(largest / 2 + 2);
      selector_ = SpectrumSelector(largest / 2 + 1);
    }
  }

  CodecId id() const override { return kId; }
  std::string spec() const override {
    return bare_spec("spectral", {{"bits", std::to_string(bits_)},
                                  {"chunk", std::to_string(chunk_)},
                                  {"theta", format_number(theta_.start)},
                                  {"theta_end", format_number(theta_.end)},
                                  {"theta_steps", std::to_string(theta_.steps)}});
  }

  void encode(std::span<const float> input, Bytes& out) override {
    encode_chunks(input, out, nullptr);
  }

  // r <- a - D(C(a)) chunk by chunk, with the decoder's own steps on the bytes just written
  // (so the result is bitwise a minus what decode_add adds), without a temporary tensor.
  void encode_residual(std::span<float> a, Bytes& out) override { encode_chunks(a, out, a.data()); }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, kId, kSpectralVersion, accum.size());
    check_size(accum.size());
    const int bits = read_body_header(reader);
    // Validate every chunk before touching the accumulator, then decode.
    const size_t body = reader.offset();
    for_each_chunk(
        [&](size_t c, size_t, size_t, const Transform& t) { read_chunk(reader, t.m, bits, c); });
    reader.expect_end("'spectral' payload");

    // decode_add is const and may run on several threads at once: the first one uses the
    // codec's scratch, others (rare) their own.
    std::unique_lock<std::mutex> lock(decode_mutex_, std::try_to_lock);
    std::unique_ptr<Scratch> own;
    Scratch* scratch = decode_scratch_.get();
    if (!lock.owns_lock()) {
      own = std::make_unique<Scratch>(std::max(full_.n, last_.n));
      scratch = own.get();
    }
    ByteReader chunks(payload.subspan(body));
    for_each_chunk([&](size_t c, size_t start, size_t length, const Transform& t) {
      const ChunkView view = read_chunk(chunks, t.m, bits, c);
      inverse(view, bits, t, *scratch);
      add_scaled(scratch->real.get(), accum.data() + start, length, 1.0f / static_cast<float>(t.n));
    });
  }

  // Checkpoints: the encodes so far (the theta schedule's clock).
  void save_state(Bytes& out) const override {
    write_state_header(out, *this, kStateVersion, numel_);
    ByteWriter(out).put<uint64_t>(step_);
  }
  void load_state(ByteReader& in) override {
    read_state_header(in, *this, kStateVersion, numel_);
    step_ = in.get<uint64_t>("spectral step");
  }

 private:
  void check_size(size_t n) const {
    if (n != numel_) {
      throw Error("codec '" + spec() + "' was made for a tensor of " + std::to_string(numel_) +
                  " elements but was given " + std::to_string(n) +
                  "; a codec serves exactly one tensor (create one per tensor)");
    }
  }

  // fn(chunk index, first element, real elements, transform) for each chunk in order.
  template <typename Fn>
  void for_each_chunk(Fn&& fn) const {
    size_t c = 0;
    size_t start = 0;
    for (; start + chunk_ <= numel_; start += chunk_) fn(c++, start, chunk_, full_);
    if (start < numel_) fn(c, start, numel_ - start, last_);
  }

  int read_body_header(ByteReader& reader) const {
    const auto chunk_log2 = reader.get<uint8_t>("spectral chunk size");
    const auto bits = reader.get<uint8_t>("spectral bits");
    const size_t own_log2 = static_cast<size_t>(std::countr_zero(chunk_));
    if (chunk_log2 < std::countr_zero(kSpectralMinChunk) ||
        chunk_log2 > std::countr_zero(kSpectralMaxChunk)) {
      throw PayloadError("corrupt 'spectral' payload: chunk size 2^" + std::to_string(chunk_log2) +
                         " is outside [" + std::to_string(kSpectralMinChunk) + ", " +
                         std::to_string(kSpectralMaxChunk) + "]");
    }
    if (chunk_log2 != own_log2) {
      throw MismatchError(
          "'spectral' payload was encoded with chunk=" + std::to_string(size_t{1} << chunk_log2) +
          " but this rank uses chunk=" + std::to_string(chunk_) +
          " (ranks must use the same --compressor)");
    }
    if (bits < kRangeFloatMinBits || bits > kRangeFloatMaxBits) {
      throw PayloadError("corrupt 'spectral' payload: bits = " + std::to_string(bits) +
                         " is outside [" + std::to_string(kRangeFloatMinBits) + ", " +
                         std::to_string(kRangeFloatMaxBits) + "]");
    }
    return bits;
  }

  // Writes the payload of `input`; with `residual` (== input.data()), also replaces it by
  // input - D(payload).
  void encode_chunks(std::span<const float> input, Bytes& out, float* residual) {
    check_size(input.size());
    ByteWriter writer(out);
    PayloadHeader{kId, kSpectralVersion, checked_count(input.size(), kId)}.write(writer);
    writer.put<uint8_t>(static_cast<uint8_t>(std::countr_zero(chunk_)));
    writer.put<uint8_t>(static_cast<uint8_t>(bits_));
    const double theta = theta_.at(step_++);
    for_each_chunk([&](size_t, size_t start, size_t length, const Transform& t) {
      const size_t at = out.size();
      encode_chunk(input.data() + start, length, t, topk_count(1.0 - theta, t.m), start, writer);
      if (residual == nullptr) return;
      ByteReader reader(std::span<const uint8_t>(out).subspan(at));
      const ChunkView view = read_chunk(reader, t.m, bits_, 0);
      inverse(view, bits_, t, *encode_scratch_);
      subtract_scaled(encode_scratch_->real.get(), residual + start, length,
                      1.0f / static_cast<float>(t.n));
    });
  }

  // Keeps the `keep` largest of the chunk's coefficients.
  void encode_chunk(const float* a, size_t length, const Transform& t, size_t keep, size_t start,
                    ByteWriter& writer) {
    Scratch& s = *encode_scratch_;
    float* real = s.real.get();
    std::memcpy(real, a, length * sizeof(float));
    std::fill(real + length, real + t.n, 0.0f);
    fftwf_execute_dft_r2c(t.forward.get(), real, s.spectrum.get());
    const float* x = reinterpret_cast<const float*>(s.spectrum.get());

    const uint32_t largest = max_magnitude_bits(x, 2 * t.m);
    if (largest >= 0x7f800000u) {
      throw Error("codec 'spectral': elements [" + std::to_string(start) + ", " +
                  std::to_string(start + length) +
                  ") hold a NaN or infinity, or values so large that their Fourier transform "
                  "overflows; the range-based float cannot carry them");
    }
    const int exponent =
        largest == 0 ? 0 : std::clamp(std::ilogb(std::bit_cast<float>(largest)), -126, 126);
    magnitude_keys(x, keys_.data(), t.m, std::ldexp(1.0f, -exponent));
    selector_.select(keys_.data(), t.m, keep, indices_);

    const size_t k = indices_.size();
    float* values = s.values.data();
    for (size_t i = 0; i < k; ++i) {
      values[2 * i] = x[2 * indices_[i]];
      values[2 * i + 1] = x[2 * indices_[i] + 1];
    }
    const std::span<const float> kept(values, 2 * k);
    const RangeFloatBlock block = range_float_block(kept, bits_);

    writer.put<int8_t>(static_cast<int8_t>(block.e_max));
    writer.put<uint8_t>(static_cast<uint8_t>(block.width));
    writer.put<uint32_t>(static_cast<uint32_t>(k));
    if (uses_bitmap(t.m, k)) {
      uint8_t* bits = writer.reserve_tail(bitmap_bytes(t.m));  // zero-filled by resize
      for (const uint32_t j : indices_) bits[j >> 3] |= static_cast<uint8_t>(1u << (j & 7));
    } else {
      uint8_t* list = writer.reserve_tail(2 * k);
      for (size_t i = 0; i < k; ++i) {
        const auto j = static_cast<uint16_t>(indices_[i]);
        std::memcpy(list + 2 * i, &j, 2);
      }
    }
    range_float_encode(kept, block, bits_,
                       writer.reserve_tail(range_float_bytes(2 * k, bits_, block.width)));
  }

  // Scatters a validated chunk's coefficients and runs the inverse FFT into s.real
  // (unnormalised: n times the chunk).
  static void inverse(const ChunkView& view, int bits, const Transform& t, Scratch& s) {
    float* values = s.values.data();
    const size_t count = view.count;
    range_float_decode(view.values, view.block, bits, std::span<float>(values, 2 * count));
    fftwf_complex* spectrum = s.spectrum.get();
    std::memset(spectrum, 0, t.m * sizeof(fftwf_complex));
    if (view.bitmap) {
      size_t i = 0;
      for (size_t byte = 0; byte < bitmap_bytes(t.m); ++byte) {
        unsigned b = view.positions[byte];
        while (b != 0) {
          const size_t j = 8 * byte + static_cast<size_t>(std::countr_zero(b));
          spectrum[j][0] = values[2 * i];
          spectrum[j][1] = values[2 * i + 1];
          ++i;
          b &= b - 1;
        }
      }
    } else {
      for (size_t i = 0; i < count; ++i) {
        uint16_t j;
        std::memcpy(&j, view.positions + 2 * i, 2);
        spectrum[j][0] = values[2 * i];
        spectrum[j][1] = values[2 * i + 1];
      }
    }
    // A real signal's DC and Nyquist coefficients are real; whatever the payload says, the
    // inverse transform sees zero imaginary parts there (so no codelet's view of them
    // matters).
    spectrum[0][1] = 0.0f;
    spectrum[t.m - 1][1] = 0.0f;
    fftwf_execute_dft_c2r(t.inverse.get(), spectrum, s.real.get());
  }

  ThetaSchedule theta_;
  uint64_t step_ = 0;  // encodes so far (the schedule's clock)
  size_t chunk_;
  int bits_;
  size_t numel_;
  Transform full_;  // chunks of chunk_ elements (when numel >= chunk)
  Transform last_;  // the shorter last chunk (when numel % chunk != 0)
  std::unique_ptr<Scratch> encode_scratch_;
  std::vector<uint32_t> keys_;
  std::vector<uint32_t> indices_;
  SpectrumSelector selector_;
  mutable std::mutex decode_mutex_;
  std::unique_ptr<Scratch> decode_scratch_;  // guarded by decode_mutex_
};

}  // namespace

double ThetaSchedule::at(uint64_t step) const {
  if (step >= steps) return end;
  return start + (end - start) * (static_cast<double>(step) / static_cast<double>(steps));
}

size_t spectral_last_chunk(size_t numel, size_t chunk) {
  const size_t tail = numel % chunk;
  if (tail == 0) return chunk;
  return std::max(kSpectralMinChunk, std::bit_ceil(tail));
}

namespace {

double read_theta(SpecReader& reader, const char* key, double fallback) {
  const double theta = reader.get_double(key, fallback);
  if (!(theta >= 0.0 && theta < 1.0)) {
    throw ConfigError(std::string("codec 'spectral': ") + key + "=" + format_number(theta) +
                      " is out of range [0, 1); it is the fraction of Fourier coefficients "
                      "dropped, e.g. theta=0.9 keeps 10%");
  }
  return theta;
}

}  // namespace

std::unique_ptr<Codec> make_spectral_codec(SpecReader& reader, const TensorInfo& tensor) {
  ThetaSchedule theta;
  theta.start = read_theta(reader, "theta", 0.9);
  theta.end = read_theta(reader, "theta_end", theta.start);
  theta.steps = static_cast<uint64_t>(reader.get_int_in("theta_steps", 0, 0, INT64_MAX));
  const long long chunk = reader.get_int("chunk", static_cast<long long>(kSpectralMaxChunk));
  if (chunk < static_cast<long long>(kSpectralMinChunk) ||
      chunk > static_cast<long long>(kSpectralMaxChunk) ||
      !std::has_single_bit(static_cast<unsigned long long>(chunk))) {
    throw ConfigError("codec 'spectral': chunk=" + std::to_string(chunk) +
                      " must be a power of two in [" + std::to_string(kSpectralMinChunk) + ", " +
                      std::to_string(kSpectralMaxChunk) + "], e.g. chunk=65536");
  }
  const auto bits =
      static_cast<int>(reader.get_int_in("bits", 8, kRangeFloatMinBits, kRangeFloatMaxBits));
  return std::make_unique<SpectralCodec>(theta, static_cast<size_t>(chunk), bits, tensor.numel());
}

}  // namespace gradwire::compress
