// `sparseloco`: SparseLoCo's compression of DiLoCo's outer gradient (Sarfi et al. 2025,
// arXiv 2508.15706; docs/ALGORITHMS.md, SparseLoCo): an error-feedback accumulator that
// decays, chunk-wise top-k, and the selected values quantized to a few bits.
//
// Per encode of a (DiLoCo: this rank's outer gradient of one fragment), with e this codec's
// accumulator (this rank's, for this tensor; zero at first) and beta its decay:
//   e <- beta e + a
//   s  = Q(the top-k of e in every chunk)
//   e <- e - s                      (what was not sent, and what the quantization lost)
// and the payload carries s. So, over any number of encodes, with s_t and a_t step t's,
//   e_T = sum_t beta^(T-t) (a_t - s_t):
// what was not sent is kept (beta = 1: ErrorFeedback's conservation, sum s + e = sum a) or
// decays (SparseLoCo's beta = 0.95). With ef=0 there is no accumulator: s = Q(top-k of a).
//
// A chunk is `chunk` = 2^B consecutive elements (the last one shorter); each sends
// k_c = topk_count(density, |c|) entries (at least 1), the largest |e| by TopKSelector's
// order (ties to the lower position), so a position costs B bits, not 32.
//
// Q, with b value bits: L = 2^(b-1) magnitude levels a chunk. The chunk's k_c entries in
// order of increasing |e| (ties by position) form L groups of consecutive ranks, group j
// the ranks [floor(j k_c / L), floor((j + 1) k_c / L)); level j is the mean |e| of group j
// (0 when the group is empty), and an entry decodes to its sign times its group's level
// (b = 1: signs and one mean magnitude). The code of an entry is j, plus L when negative.
//
// Body, after the header (little-endian):
//   u8 B | u8 b | u16 reserved (0) | u32 k of a full chunk | u32 k of the last chunk
//   | f32 level[chunks x L] (chunk by chunk) | entries
// The entries, chunk by chunk, B + b bits each: the position within the chunk (B bits,
// strictly increasing within a chunk), then the code (b bits); packed least significant
// bit first into bytes, the last byte zero-padded. At chunk 4096 and 2 bits an entry is 14
// bits: at density 1/64 about 0.7% of fp32's bytes.
#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <numeric>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/sparsify/sparsifiers.h"
#include "gradwire/compress/sparsify/topk_select.h"

namespace gradwire::compress {
namespace {

constexpr uint8_t kStateVersion = 1;
constexpr int kMaxIndexBits = 16;
constexpr int kMaxValueBits = 4;

// Appends fields of up to 32 bits, least significant bit first.
class BitWriter {
 public:
  explicit BitWriter(uint8_t* out) : out_(out) {}
  void put(uint32_t value, int bits) {
    acc_ |= static_cast<uint64_t>(value) << fill_;
    fill_ += bits;
    while (fill_ >= 8) {
      *out_++ = static_cast<uint8_t>(acc_);
      acc_ >>= 8;
      fill_ -= 8;
    }
  }
  void flush() {
    if (fill_ > 0) *out_++ = static_cast<uint8_t>(acc_);
    acc_ = 0;
    fill_ = 0;
  }

 private:
  uint8_t* out_;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

// Reads what BitWriter wrote from exactly `bytes` bytes (the caller checked the size).
class BitReader {
 public:
  explicit BitReader(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  uint32_t get(int bits) {
    while (fill_ < bits) {
      acc_ |= static_cast<uint64_t>(bytes_[next_++]) << fill_;
      fill_ += 8;
    }
    const auto value = static_cast<uint32_t>(acc_ & ((uint64_t{1} << bits) - 1));
    acc_ >>= bits;
    fill_ -= bits;
    return value;
  }
  // The bits left in the last byte read (padding) as a value.
  uint64_t rest() const { return acc_; }

 private:
  std::span<const uint8_t> bytes_;
  size_t next_ = 0;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

// The payload's fixed layout for n elements.
struct Layout {
  int index_bits = 0, value_bits = 0;
  size_t chunk = 0, chunks = 0, last = 0;  // chunk size, chunk count, last chunk's size
  size_t k_full = 0, k_last = 0;
  size_t levels() const { return size_t{1} << (value_bits - 1); }
  size_t k_of(size_t c) const { return c + 1 == chunks ? k_last : k_full; }
  size_t size_of(size_t c) const { return c + 1 == chunks ? last : chunk; }
  size_t entries() const { return chunks == 0 ? 0 : (chunks - 1) * k_full + k_last; }
  size_t entry_bytes() const {
    return (entries() * static_cast<size_t>(index_bits + value_bits) + 7) / 8;
  }
};

class SparseLoCoCodec final : public Codec {
 public:
  SparseLoCoCodec(int index_bits, double density, int value_bits, double beta, bool ef,
                  size_t numel)
      : index_bits_(index_bits),
        density_(density),
        value_bits_(value_bits),
        beta_(static_cast<float>(beta)),
        ef_(ef),
        numel_(numel) {}

  CodecId id() const override { return CodecId::kSparseLoCo; }
  std::string spec() const override {
    return bare_spec_ef({{"beta", format_number(beta_)},
                         {"bits", std::to_string(value_bits_)},
                         {"chunk", std::to_string(size_t{1} << index_bits_)},
                         {"density", format_number(density_)}});
  }

  void encode(std::span<const float> input, Bytes& out) override {
    const size_t n = input.size();
    checked_count(n, id());
    check_finite(input);
    std::vector<float>& e = scratch_;
    if (ef_) {
      if (!started_) accumulator_.assign(n, 0.0f);
      if (accumulator_.size() != n) {
        throw Error("codec 'sparseloco' holds an accumulator of " +
                    std::to_string(accumulator_.size()) + " elements but was given " +
                    std::to_string(n) + "; a codec serves exactly one tensor");
      }
      e.resize(n);
      for (size_t i = 0; i < n; ++i) e[i] = beta_ * accumulator_[i] + input[i];
      check_finite(e);  // beta e + a may overflow where neither does
    } else {
      e.assign(input.begin(), input.end());
    }
    encode_chunks(e, out);
    if (ef_) {
      accumulator_.swap(e);  // e - s: encode_chunks() subtracted what it sent
      started_ = true;
    }
  }

  // encode_residual(): the default (encode, then subtract the decoded payload).

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kSparseLoCo, kSparseLoCoVersion, accum.size());
    const Layout layout = read_layout(reader, accum.size());
    std::vector<float> levels(layout.chunks * layout.levels());
    reader.get_array<float>(std::span<float>(levels), "sparseloco levels");
    for (const float level : levels) {
      if (!(std::isfinite(level) && level >= 0.0f)) {
        throw PayloadError("corrupt 'sparseloco' payload: level " + format_number(level) +
                           " is not a finite non-negative number");
      }
    }
    const auto bytes = reader.get_bytes(layout.entry_bytes(), "sparseloco entries");
    reader.expect_end("'sparseloco' payload");
    // Validate every position first, then add: accum is untouched by a corrupt payload.
    for (int pass = 0; pass < 2; ++pass) {
      BitReader bits(bytes);
      for (size_t c = 0; c < layout.chunks; ++c) {
        const size_t size = layout.size_of(c), begin = c * layout.chunk;
        const float* level = levels.data() + c * layout.levels();
        size_t next = 0;  // the least position the next entry may have
        for (size_t j = 0; j < layout.k_of(c); ++j) {
          const uint32_t position = bits.get(layout.index_bits);
          const uint32_t code = bits.get(layout.value_bits);
          if (pass == 0) {
            if (position < next || position >= size) {
              throw PayloadError("corrupt 'sparseloco' payload: chunk " + std::to_string(c) +
                                 " has position " + std::to_string(position) +
                                 (position >= size
                                      ? " past its " + std::to_string(size) + " elements"
                                      : " out of increasing order"));
            }
            next = position + 1;
            continue;
          }
          const uint32_t group = code & static_cast<uint32_t>(layout.levels() - 1);
          const float magnitude = level[group];
          accum[begin + position] += (code >> (layout.value_bits - 1)) ? -magnitude : magnitude;
        }
      }
      if (pass == 0 && bits.rest() != 0) {
        throw PayloadError("corrupt 'sparseloco' payload: padding bits are not zero");
      }
    }
  }

  // Checkpoints: the accumulator e (empty before the first encode).
  void save_state(Bytes& out) const override {
    write_state_header(out, *this, kStateVersion, numel_);
    ByteWriter writer(out);
    writer.put<uint8_t>(started_ ? 1 : 0);
    writer.put<uint64_t>(accumulator_.size());
    writer.put_array<float>(accumulator_);
  }
  void load_state(ByteReader& in) override {
    read_state_header(in, *this, kStateVersion, numel_);
    const auto flag = in.get<uint8_t>("sparseloco started flag");
    const auto size = in.get<uint64_t>("sparseloco accumulator size");
    const uint64_t expected = flag == 1 ? numel_ : 0;
    if (flag > 1 || size != expected) {
      throw PayloadError("corrupt 'sparseloco' state: started flag " + std::to_string(flag) +
                         " with an accumulator of " + std::to_string(size) + " values (" +
                         std::to_string(expected) + " expected)");
    }
    if (size > in.remaining() / sizeof(float)) {
      throw PayloadError("truncated 'sparseloco' state: an accumulator of " + std::to_string(size) +
                         " values in " + std::to_string(in.remaining()) + " bytes");
    }
    std::vector<float> accumulator(static_cast<size_t>(size));
    in.get_array<float>(std::span<float>(accumulator), "sparseloco accumulator");
    started_ = flag == 1;
    accumulator_ = std::move(accumulator);
  }

 private:
  std::string bare_spec_ef(std::map<std::string, std::string> params) const {
    // The codec keeps its own error feedback (the registry does not wrap it): its spec
    // says ef itself, as PowerSGD's does (bare_spec() would say ef=0).
    params["ef"] = std::string(ef_ ? "1" : "0");  // a std::string: GCC 12 -Wrestrict
    return Spec{"sparseloco", std::move(params)}.to_string();
  }

  static void check_finite(std::span<const float> values) {
    for (const float v : values) {
      if (!std::isfinite(v)) {
        throw Error(
            "codec 'sparseloco': the outer gradient (plus its accumulator) has non-finite "
            "values; training diverged (lower the learning rate)");
      }
    }
  }

  Layout layout_for(size_t n) const {
    Layout l;
    l.index_bits = index_bits_;
    l.value_bits = value_bits_;
    l.chunk = size_t{1} << index_bits_;
    l.chunks = (n + l.chunk - 1) / l.chunk;
    l.last = l.chunks == 0 ? 0 : n - (l.chunks - 1) * l.chunk;
    l.k_full = l.chunks > 1 ? topk_count(density_, l.chunk) : 0;
    l.k_last = l.chunks == 0 ? 0 : topk_count(density_, l.last);
    if (l.chunks == 1) l.k_full = l.k_last;
    return l;
  }

  static Layout read_layout(ByteReader& reader, size_t n) {
    Layout l;
    l.index_bits = reader.get<uint8_t>("sparseloco index bits");
    l.value_bits = reader.get<uint8_t>("sparseloco value bits");
    const auto reserved = reader.get<uint16_t>("sparseloco reserved");
    l.k_full = reader.get<uint32_t>("sparseloco k of a chunk");
    l.k_last = reader.get<uint32_t>("sparseloco k of the last chunk");
    if (l.index_bits < 1 || l.index_bits > kMaxIndexBits || l.value_bits < 1 ||
        l.value_bits > kMaxValueBits || reserved != 0) {
      throw PayloadError("corrupt 'sparseloco' payload: " + std::to_string(l.index_bits) +
                         " index bits, " + std::to_string(l.value_bits) + " value bits, reserved " +
                         std::to_string(reserved));
    }
    l.chunk = size_t{1} << l.index_bits;
    l.chunks = (n + l.chunk - 1) / l.chunk;
    l.last = l.chunks == 0 ? 0 : n - (l.chunks - 1) * l.chunk;
    const bool full_ok = l.chunks > 1 ? l.k_full >= 1 && l.k_full <= l.chunk : l.k_full == l.k_last;
    const bool last_ok = l.chunks == 0 ? l.k_last == 0 : l.k_last >= 1 && l.k_last <= l.last;
    if (!full_ok || !last_ok) {
      throw PayloadError("corrupt 'sparseloco' payload: k " + std::to_string(l.k_full) +
                         " a chunk of " + std::to_string(l.chunk) + ", " +
                         std::to_string(l.k_last) + " in the last of " + std::to_string(l.last));
    }
    return l;
  }

  // Writes the payload of e's chunk-wise top-k, quantized, and subtracts what it sends
  // from e (only the sent entries change).
  void encode_chunks(std::span<float> e, Bytes& out) {
    const Layout layout = layout_for(e.size());
    const size_t levels_n = layout.levels();
    ByteWriter writer(out);
    PayloadHeader{CodecId::kSparseLoCo, kSparseLoCoVersion, static_cast<uint32_t>(e.size())}.write(
        writer);
    writer.put<uint8_t>(static_cast<uint8_t>(layout.index_bits));
    writer.put<uint8_t>(static_cast<uint8_t>(layout.value_bits));
    writer.put<uint16_t>(0);
    writer.put<uint32_t>(static_cast<uint32_t>(layout.k_full));
    writer.put<uint32_t>(static_cast<uint32_t>(layout.k_last));
    // Both regions reserved before either is written: out does not move after this.
    const size_t levels_at = out.size();
    writer.reserve_tail(4 * layout.chunks * levels_n);
    const size_t entries_at = out.size();
    writer.reserve_tail(layout.entry_bytes());
    BitWriter bits(out.data() + entries_at);
    for (size_t c = 0; c < layout.chunks; ++c) {
      std::span<float> x = e.subspan(c * layout.chunk, layout.size_of(c));
      const size_t k = layout.k_of(c);
      selector_.select(x, k, positions_);
      // Ranks by increasing |e|, ties by position (positions_ is increasing: a stable sort).
      order_.resize(k);
      std::iota(order_.begin(), order_.end(), uint32_t{0});
      std::stable_sort(order_.begin(), order_.end(), [&](uint32_t p, uint32_t q) {
        return std::fabs(x[positions_[p]]) < std::fabs(x[positions_[q]]);
      });
      group_.resize(k);
      for (size_t j = 0; j < levels_n; ++j) {
        const size_t lo = j * k / levels_n, hi = (j + 1) * k / levels_n;
        double sum = 0.0;  // in double: a mean of floats is a float, their sum may not be
        for (size_t r = lo; r < hi; ++r) {
          sum += std::fabs(x[positions_[order_[r]]]);
          group_[order_[r]] = static_cast<uint32_t>(j);
        }
        const float level = hi > lo ? static_cast<float>(sum / static_cast<double>(hi - lo)) : 0.0f;
        store_f32(out.data() + levels_at, c * levels_n + j, level);
        levels_[j] = level;
      }
      for (size_t p = 0; p < k; ++p) {
        const uint32_t i = positions_[p];
        const bool negative = std::signbit(x[i]);
        const float sent = negative ? -levels_[group_[p]] : levels_[group_[p]];
        bits.put(i, layout.index_bits);
        bits.put(group_[p] | (negative ? static_cast<uint32_t>(levels_n) : 0u), layout.value_bits);
        x[i] -= sent;
      }
    }
    bits.flush();
  }

  int index_bits_;
  double density_;
  int value_bits_;
  float beta_;
  bool ef_;
  size_t numel_;
  bool started_ = false;
  std::vector<float> accumulator_;  // e (ef=1), from the first encode on
  std::vector<float> scratch_;      // beta e + a, until it is accepted
  TopKSelector selector_;
  std::vector<uint32_t> positions_, order_, group_;
  float levels_[1 << (kMaxValueBits - 1)] = {};  // the chunk's levels being written
};

}  // namespace

std::unique_ptr<Codec> make_sparseloco_codec(SpecReader& reader, const TensorInfo& tensor) {
  const long long chunk = reader.get_int_in("chunk", 4096, 2, 1 << kMaxIndexBits);
  if ((chunk & (chunk - 1)) != 0) {
    throw ConfigError("codec 'sparseloco': chunk=" + std::to_string(chunk) +
                      " must be a power of two (a position within it is log2(chunk) bits)");
  }
  const double density = reader.get_double_in("density", 1.0 / 64, 1e-6, 1.0);
  const auto bits = static_cast<int>(reader.get_int_in("bits", 2, 1, kMaxValueBits));
  const double beta = reader.get_double_in("beta", 0.95, 0.0, 1.0);
  const bool ef = reader.get_bool("ef", true);
  return std::make_unique<SparseLoCoCodec>(std::countr_zero(static_cast<uint64_t>(chunk)), density,
                                           bits, beta, ef, tensor.numel());
}

}  // namespace gradwire::compress
