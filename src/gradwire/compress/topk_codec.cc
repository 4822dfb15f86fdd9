// `topk`: exact top-k sparsification (ALGORITHMS.md 1.1). Sends the k = max(1,
// ceil(density N)) entries of largest magnitude; body layout in codecs.h (TopKLayout).
// Error feedback is on by default: the unsent entries stay in the residual.
#include <bit>
#include <cstring>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/topk_select.h"

namespace gradwire::compress {
namespace {

class TopKCodec final : public Codec {
 public:
  explicit TopKCodec(double density) : density_(density) {}

  CodecId id() const override { return CodecId::kTopK; }
  std::string spec() const override {
    return bare_spec("topk", {{"density", format_number(density_)}});
  }

  void encode(std::span<const float> input, Bytes& out) override {
    const uint32_t n = checked_count(input.size(), id());
    const size_t k = topk_count(density_, n);
    selector_.select(input, k, indices_);

    ByteWriter writer(out);
    PayloadHeader{CodecId::kTopK, kTopKVersion, n}.write(writer);
    writer.put<uint32_t>(static_cast<uint32_t>(k));
    const size_t bitmap_bytes = (size_t{n} + 7) / 8;
    const bool bitmap = bitmap_bytes + 4 * k < 8 * k;
    writer.put<uint8_t>(
        static_cast<uint8_t>(bitmap ? TopKLayout::kBitmap : TopKLayout::kIndexList));
    if (bitmap) {
      uint8_t* bits = writer.reserve_tail(bitmap_bytes);  // zero-filled by resize
      for (const uint32_t i : indices_) bits[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
    } else {
      writer.put_array(std::span<const uint32_t>(indices_));
    }
    uint8_t* values = writer.reserve_tail(4 * k);
    const float* a = input.data();
    for (size_t j = 0; j < k; ++j) store_f32(values, j, a[indices_[j]]);
  }

  // r <- a - D(C(a)): D(C(a)) is a at the sent positions, so zero them; no decode needed.
  void encode_residual(std::span<float> a, Bytes& out) override {
    encode(a, out);
    float* r = a.data();
    for (const uint32_t i : indices_) r[i] = 0.0f;
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kTopK, kTopKVersion, accum.size());
    const size_t n = accum.size();
    const uint32_t k = reader.get<uint32_t>("topk k");
    if (k > n) {
      throw PayloadError("corrupt 'topk' payload: k = " + std::to_string(k) +
                         " entries for a tensor of " + std::to_string(n) + " elements");
    }
    const uint8_t layout = reader.get<uint8_t>("topk layout");
    if (layout == static_cast<uint8_t>(TopKLayout::kIndexList)) {
      const auto indices = reader.get_bytes(4 * size_t{k}, "topk indices");
      const auto values = reader.get_bytes(4 * size_t{k}, "topk values");
      reader.expect_end("'topk' payload");
      check_index_list(indices.data(), k, n);
      float* out = accum.data();
      for (size_t j = 0; j < k; ++j) out[load_u32(indices.data(), j)] += load_f32(values.data(), j);
    } else if (layout == static_cast<uint8_t>(TopKLayout::kBitmap)) {
      const auto bits = reader.get_bytes((n + 7) / 8, "topk bitmap");
      const auto values = reader.get_bytes(4 * size_t{k}, "topk values");
      reader.expect_end("'topk' payload");
      check_bitmap(bits, k, n);
      add_bitmap(bits, values.data(), accum);
    } else {
      throw PayloadError("corrupt 'topk' payload: unknown layout " + std::to_string(layout) +
                         " (expected 0 = index list or 1 = bitmap)");
    }
  }

 private:
  static void check_index_list(const uint8_t* indices, size_t k, size_t n) {
    // Strictly increasing and in range; int64 so that the first index may be 0.
    int64_t previous = -1;
    for (size_t j = 0; j < k; ++j) {
      const uint32_t i = load_u32(indices, j);
      if (i >= n || static_cast<int64_t>(i) <= previous) {
        throw PayloadError("corrupt 'topk' payload: index #" + std::to_string(j) + " is " +
                           std::to_string(i) +
                           (i >= n ? " but the tensor has " + std::to_string(n) + " elements"
                                   : " after " + std::to_string(previous) +
                                         " (indices must be strictly increasing)"));
      }
      previous = i;
    }
  }

  static void check_bitmap(std::span<const uint8_t> bits, size_t k, size_t n) {
    size_t set = 0;
    size_t byte = 0;
    for (; byte + 8 <= bits.size(); byte += 8) {
      uint64_t word;
      std::memcpy(&word, bits.data() + byte, 8);
      set += static_cast<size_t>(std::popcount(word));
    }
    for (; byte < bits.size(); ++byte) set += static_cast<size_t>(std::popcount(bits[byte]));
    if (n % 8 != 0 && (bits.back() >> (n % 8)) != 0) {
      throw PayloadError("corrupt 'topk' payload: bitmap has bits set past element " +
                         std::to_string(n));
    }
    if (set != k) {
      throw PayloadError("corrupt 'topk' payload: bitmap marks " + std::to_string(set) +
                         " elements but k = " + std::to_string(k));
    }
  }

  static void add_bitmap(std::span<const uint8_t> bits, const uint8_t* values,
                         std::span<float> accum) {
    float* out = accum.data();
    size_t j = 0;
    for (size_t byte = 0; byte < bits.size(); ++byte) {
      unsigned b = bits[byte];
      while (b != 0) {
        out[8 * byte + static_cast<size_t>(std::countr_zero(b))] += load_f32(values, j++);
        b &= b - 1;
      }
    }
  }

  double density_;
  TopKSelector selector_;
  std::vector<uint32_t> indices_;  // positions sent by the last encode, increasing
};

}  // namespace

std::unique_ptr<Codec> make_topk_codec(SpecReader& reader, const TensorInfo&) {
  const double density = reader.get_double("density", 0.01);
  if (!(density > 0.0 && density <= 1.0)) {
    throw ConfigError("codec 'topk': density=" + format_number(density) +
                      " is out of range (0, 1]; it is the fraction of elements sent, e.g. "
                      "density=0.01");
  }
  return std::make_unique<TopKCodec>(density);
}

}  // namespace gradwire::compress
