// `int4`: 4-bit values, one fp32 scale per block of `block` elements (default 128).
//
// Block b of a (the input, plus error feedback's residual) is sent as its largest |a|,
// M_b, and q_i = round(a_i / s_b) in [-7, 7] with s_b = M_b / 7; D(q) = q s_b. Codes are
// q + 8 in [1, 15], two a byte (element 2j in the low nibble of byte j); code 0 never
// occurs and is refused as corruption. Rounding is to nearest, so |a - D(C(a))| <= s_b / 2;
// error feedback (on by default) carries that error to the next call. An eighth of fp32
// plus 32 bits per block: 4.25 bits per element at the default block.
//
// Message face only: 4-bit values cannot be summed in 4 bits, so strategies aggregate the
// payloads by decoding (allgather), or by a reduce-scatter of payloads, a sum in fp32 and
// a second quantization of each range (strategy/codec_reduce_scatter.h: DiLoCo's outer
// exchange, and the allreduce strategy's buckets where the cost model prefers it).
//
// Body: u32 block | f32 max[ceil(N/block)] | u8 codes[ceil(N/2)].
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/quantize/quantizers.h"
#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

constexpr long long kDefaultBlock = 128;
constexpr float kLevels = 7.0f;

size_t block_count(size_t n, size_t block) { return n == 0 ? 0 : (n + block - 1) / block; }

// Codes of block [begin, end) of `a` into the nibbles of `codes` (element i at nibble i);
// with `residual`, a <- a - D(code). `m` is the block's max |a|.
void quantize_block(const float* a, float* residual, size_t begin, size_t end, float m,
                    uint8_t* codes) {
  const float inv_step = kLevels / m, step = m / kLevels;
  // A zero block, or one so small that 7 / m overflows: all zeros (code 8); with error
  // feedback the residual keeps a.
  const bool empty = !(m > 0.0f) || !(inv_step <= std::numeric_limits<float>::max());
  for (size_t i = begin; i < end; ++i) {
    const float q = empty ? 0.0f : std::clamp(std::nearbyint(a[i] * inv_step), -kLevels, kLevels);
    const auto code = static_cast<uint8_t>(static_cast<int>(q) + 8);
    uint8_t& byte = codes[i / 2];
    byte = (i % 2 == 0) ? static_cast<uint8_t>((byte & 0xF0u) | code)
                        : static_cast<uint8_t>((byte & 0x0Fu) | (code << 4));
    if (residual) residual[i] = a[i] - q * step;
  }
}

class Int4Codec final : public Codec {
 public:
  Int4Codec(size_t block, size_t n) : block_(block), blocks_(block_count(n, block)) {}

  CodecId id() const override { return CodecId::kInt4; }
  std::string spec() const override {
    return bare_spec("int4", {{"block", std::to_string(block_)}});
  }

  void encode(std::span<const float> input, Bytes& out) override {
    encode_blocks(input.data(), nullptr, input.size(), out);
  }
  void encode_residual(std::span<float> a, Bytes& out) override {
    encode_blocks(a.data(), a.data(), a.size(), out);
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kInt4, kInt4Version, accum.size());
    read_block_size(reader, block_, "int4");
    const size_t blocks = block_count(accum.size(), block_);
    std::vector<float> maxima;
    read_block_maxima(reader, blocks, maxima, "int4");
    const auto codes = reader.get_bytes((accum.size() + 1) / 2, "int4 codes");
    reader.expect_end("'int4' payload");
    for (size_t i = 0; i < accum.size(); ++i) {
      const unsigned code = (i % 2 == 0) ? (codes[i / 2] & 0x0Fu) : (codes[i / 2] >> 4);
      if (code == 0) {
        throw PayloadError("'int4' payload: element " + std::to_string(i) +
                           " has code 0, which no encoder writes");
      }
    }
    // An odd count leaves the last byte's high nibble unused: the encoder writes 0 there.
    if (accum.size() % 2 == 1 && (codes.back() >> 4) != 0) {
      throw PayloadError("'int4' payload: the padding nibble is not 0");
    }
    for (size_t b = 0; b < blocks; ++b) {
      const size_t begin = b * block_, end = std::min(accum.size(), begin + block_);
      const float step = maxima[b] / kLevels;
      for (size_t i = begin; i < end; ++i) {
        const unsigned code = (i % 2 == 0) ? (codes[i / 2] & 0x0Fu) : (codes[i / 2] >> 4);
        accum[i] += static_cast<float>(static_cast<int>(code) - 8) * step;
      }
    }
  }

 private:
  void encode_blocks(const float* a, float* residual, size_t n, Bytes& out) {
    if (block_count(n, block_) != blocks_) {
      throw Error("'int4' codec of " + std::to_string(blocks_) + " blocks was given " +
                  std::to_string(n) + " elements");
    }
    ByteWriter writer(out);
    PayloadHeader{CodecId::kInt4, kInt4Version, checked_count(n, id())}.write(writer);
    writer.put<uint32_t>(static_cast<uint32_t>(block_));
    maxima_.resize(blocks_);
    block_maxima(std::span<const float>(a, n), block_, maxima_, "int4");
    writer.put_array<float>(maxima_);
    uint8_t* codes = writer.reserve_tail((n + 1) / 2);
    std::memset(codes, 0, (n + 1) / 2);
    for (size_t b = 0; b < blocks_; ++b) {
      const size_t begin = b * block_, end = std::min(n, begin + block_);
      quantize_block(a, residual, begin, end, maxima_[b], codes);
    }
  }

  size_t block_;
  size_t blocks_;
  std::vector<float> maxima_;  // encode's scratch
};

}  // namespace

std::unique_ptr<Codec> make_int4_codec(SpecReader& reader, const TensorInfo& tensor) {
  const auto block = static_cast<size_t>(reader.get_int_in("block", kDefaultBlock, 1, 1 << 24));
  return std::make_unique<Int4Codec>(block, tensor.numel());
}

}  // namespace gradwire::compress
