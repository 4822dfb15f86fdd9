// `none`: raw float32, the uncompressed reference. Additive (wire type float32).
// Body: f32 value[N].
#include <algorithm>
#include <cstring>

#include "gradwire/compress/codecs.h"

namespace gradwire::compress {
namespace {

[[gnu::noinline]] void add_f32_kernel(const uint8_t* __restrict src, float* __restrict accum,
                                      size_t n) {
  vector_loop(n, [=](size_t i) { accum[i] += load_f32(src, i); });
}

[[gnu::noinline]] void scale_kernel(const float* __restrict src, uint8_t* __restrict wire, size_t n,
                                    float scale) {
  vector_loop(n, [=](size_t i) { store_f32(wire, i, scale * src[i]); });
}

// wire = scale * a; a <- a - wire / scale (rounding error only; zero for powers of two).
[[gnu::noinline]] void scale_residual_kernel(float* __restrict a, uint8_t* __restrict wire,
                                             size_t n, float scale) {
  vector_loop(n, [=](size_t i) {
    const float w = scale * a[i];
    store_f32(wire, i, w);
    a[i] -= w / scale;
  });
}

class NoneCodec final : public Codec {
 public:
  CodecId id() const override { return CodecId::kNone; }
  std::string spec() const override { return bare_spec("none", {}); }
  std::optional<WireType> additive_wire() const override { return WireType::kFloat32; }

  void encode(std::span<const float> input, Bytes& out) override {
    ByteWriter writer(out);
    PayloadHeader{CodecId::kNone, kNoneVersion, checked_count(input.size(), id())}.write(writer);
    writer.put_array(input);
  }

  // r <- a - D(C(a)) = 0: nothing is lost.
  void encode_residual(std::span<float> a, Bytes& out) override {
    encode(a, out);
    std::fill(a.begin(), a.end(), 0.0f);
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kNone, kNoneVersion, accum.size());
    const auto values = reader.get_bytes(4 * accum.size(), "none values");
    reader.expect_end("'none' payload");
    add_f32_kernel(values.data(), accum.data(), accum.size());
  }

  void to_wire(std::span<const float> input, float scale, void* wire) override {
    scale_kernel(input.data(), static_cast<uint8_t*>(wire), input.size(), scale);
  }

  void from_wire(const void* wire, std::span<float> out) const override {
    if (!out.empty()) std::memcpy(out.data(), wire, out.size_bytes());
  }

  void to_wire_residual(std::span<float> a, float scale, void* wire) override {
    check_residual_scale(scale, id());
    scale_residual_kernel(a.data(), static_cast<uint8_t*>(wire), a.size(), scale);
  }
};

}  // namespace

std::unique_ptr<Codec> make_none_codec(SpecReader&, const TensorInfo&) {
  return std::make_unique<NoneCodec>();
}

}  // namespace gradwire::compress
