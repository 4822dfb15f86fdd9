// `int8`: int8 values, one fp32 scale per block of `block` elements (default 256).
//
// Message face (allgather, parameter servers): the body is
//   u32 block | f32 max[ceil(N/block)] | i8 q[N],  q = round(a / (max_b / 127)),
// a quarter of fp32 plus a scale per block; D(q) = q * max_b / 127.
// Shared-scale face (allreduce; codec.h): the ranks agree on every block's maximum,
// quantize to floor(127 / W) levels per sign so that W of them sum in int8, and one int8
// allreduce sums them: a quarter of fp32 on the wire (ring allreduce), plus an
// allreduce-max of one float per block. Where floor(127 / W) levels are too few, the
// allreduce strategy sums int8 buckets by a reduce-scatter of message payloads instead
// (strategy/codec_reduce_scatter.h: 127 levels at any W). Rounding is to nearest; error
// feedback (on by default) carries the quantization error to the next step.
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

constexpr long long kDefaultBlock = 256;

size_t block_count(size_t n, size_t block) { return n == 0 ? 0 : (n + block - 1) / block; }

// q = round(a / s) in [-levels, levels], s = max_b / levels; with `residual`, a <- a - q s.
void quantize_blocks(const float* a, float* residual, size_t n, size_t block,
                     std::span<const float> maxima, int levels, int8_t* q) {
  const float l = static_cast<float>(levels);
  for (size_t b = 0; b < maxima.size(); ++b) {
    const size_t begin = b * block, end = std::min(n, begin + block);
    const float m = maxima[b];
    const float inv_step = l / m, step = m / l;
    // A zero block, or one so small that l / m overflows: nothing to send (with error
    // feedback the residual keeps a).
    if (!(m > 0.0f) || levels == 0 || !(inv_step <= std::numeric_limits<float>::max())) {
      std::memset(q + begin, 0, end - begin);
      continue;
    }
    for (size_t i = begin; i < end; ++i) {
      const float v = std::clamp(std::nearbyint(a[i] * inv_step), -l, l);
      q[i] = static_cast<int8_t>(v);
      if (residual) residual[i] = a[i] - v * step;
    }
  }
}

class Int8Codec final : public Codec, public SharedScaleFace {
 public:
  Int8Codec(size_t block, size_t n) : block_(block), blocks_(block_count(n, block)) {}

  CodecId id() const override { return CodecId::kInt8; }
  std::string spec() const override {
    return bare_spec("int8", {{"block", std::to_string(block_)}});
  }
  SharedScaleFace* shared_scale() override { return this; }

  // Message face: scales of this rank alone, 127 levels.
  void encode(std::span<const float> input, Bytes& out) override {
    encode_blocks(input.data(), nullptr, input.size(), out);
  }
  void encode_residual(std::span<float> a, Bytes& out) override {
    encode_blocks(a.data(), a.data(), a.size(), out);
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kInt8, kInt8Version, accum.size());
    read_block_size(reader, block_, "int8");
    std::vector<float> maxima;
    read_block_maxima(reader, blocks_, maxima, "int8");
    const auto values = reader.get_bytes(accum.size(), "int8 values");
    reader.expect_end("'int8' payload");
    for (size_t b = 0; b < blocks_; ++b) {
      const size_t begin = b * block_, end = std::min(accum.size(), begin + block_);
      const float step = maxima[b] / 127.0f;
      for (size_t i = begin; i < end; ++i) {
        accum[i] += static_cast<float>(static_cast<int8_t>(values[i])) * step;
      }
    }
  }

  // Shared-scale face.
  size_t blocks() const override { return blocks_; }
  void local_maxima(std::span<const float> gradient, std::span<float> maxima) override {
    check_sizes(gradient.size(), maxima.size());
    block_maxima(gradient, block_, maxima, "int8");
  }
  void quantize(std::span<const float> gradient, std::span<const float> maxima, int levels,
                int8_t* wire) override {
    check_sizes(gradient.size(), maxima.size());
    quantize_blocks(gradient.data(), nullptr, gradient.size(), block_, maxima, levels, wire);
  }
  void quantize_residual(std::span<float> a, std::span<const float> maxima, int levels,
                         int8_t* wire) override {
    check_sizes(a.size(), maxima.size());
    quantize_blocks(a.data(), a.data(), a.size(), block_, maxima, levels, wire);
  }
  void dequantize(const int8_t* summed, std::span<const float> maxima, int levels, int world,
                  std::span<float> out) const override {
    check_sizes(out.size(), maxima.size());
    for (size_t b = 0; b < blocks_; ++b) {
      const size_t begin = b * block_, end = std::min(out.size(), begin + block_);
      const float step = levels > 0 ? maxima[b] / static_cast<float>(levels) : 0.0f;
      const float scale = step / static_cast<float>(world);
      for (size_t i = begin; i < end; ++i) out[i] = static_cast<float>(summed[i]) * scale;
    }
  }

 private:
  void check_sizes(size_t n, size_t maxima) const {
    if (block_count(n, block_) != blocks_ || maxima != blocks_) {
      throw Error("'int8' codec of " + std::to_string(blocks_) + " blocks was given " +
                  std::to_string(n) + " elements and " + std::to_string(maxima) + " maxima");
    }
  }

  void encode_blocks(const float* a, float* residual, size_t n, Bytes& out) {
    ByteWriter writer(out);
    PayloadHeader{CodecId::kInt8, kInt8Version, checked_count(n, id())}.write(writer);
    writer.put<uint32_t>(static_cast<uint32_t>(block_));
    maxima_.resize(block_count(n, block_));
    block_maxima(std::span<const float>(a, n), block_, maxima_, "int8");
    writer.put_array<float>(maxima_);
    auto* q = reinterpret_cast<int8_t*>(writer.reserve_tail(n));
    quantize_blocks(a, residual, n, block_, maxima_, 127, q);
  }

  size_t block_;
  size_t blocks_;
  std::vector<float> maxima_;  // encode's scratch
};

}  // namespace

std::unique_ptr<Codec> make_int8_codec(SpecReader& reader, const TensorInfo& tensor) {
  const auto block = static_cast<size_t>(reader.get_int_in("block", kDefaultBlock, 1, 1 << 24));
  return std::make_unique<Int8Codec>(block, tensor.numel());
}

}  // namespace gradwire::compress
