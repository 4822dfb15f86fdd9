// `fp16`: IEEE binary16 cast (round to nearest even). Additive (wire type float16), so an
// allreduce can sum halves directly; to_wire() applies the scale before the cast so a sum
// of pre-scaled (e.g. divided by the world size) values does not overflow 65504.
// Body: u16 half[N].
#include "gradwire/compress/codecs.h"
#include "gradwire/core/half.h"

namespace gradwire::compress {
namespace {

// wire = half(scale * a); a <- a - float(wire) / scale.
[[gnu::noinline]] void half_residual_kernel(float* __restrict a, uint8_t* __restrict wire, size_t n,
                                            float scale) {
  vector_loop(n, [=](size_t i) {
    const uint16_t h = float_to_half(scale * a[i]);
    store_u16(wire, i, h);
    a[i] -= half_to_float(h) / scale;
  });
}

// Same with scale 1, without the division.
[[gnu::noinline]] void half_residual_kernel(float* __restrict a, uint8_t* __restrict wire,
                                            size_t n) {
  vector_loop(n, [=](size_t i) {
    const uint16_t h = float_to_half(a[i]);
    store_u16(wire, i, h);
    a[i] -= half_to_float(h);
  });
}

class Fp16Codec final : public Codec {
 public:
  CodecId id() const override { return CodecId::kFp16; }
  std::string spec() const override { return bare_spec("fp16", {}); }
  std::optional<WireType> additive_wire() const override { return WireType::kFloat16; }

  void encode(std::span<const float> input, Bytes& out) override {
    ByteWriter writer(out);
    PayloadHeader{CodecId::kFp16, kFp16Version, checked_count(input.size(), id())}.write(writer);
    float_to_half(input, writer.reserve_tail(2 * input.size()));
  }

  // r <- a - D(C(a)) in the same pass as the cast.
  void encode_residual(std::span<float> a, Bytes& out) override {
    ByteWriter writer(out);
    PayloadHeader{CodecId::kFp16, kFp16Version, checked_count(a.size(), id())}.write(writer);
    half_residual_kernel(a.data(), writer.reserve_tail(2 * a.size()), a.size());
  }

  void decode_add(std::span<const uint8_t> payload, std::span<float> accum) const override {
    ByteReader reader(payload);
    PayloadHeader::read_expected(reader, CodecId::kFp16, kFp16Version, accum.size());
    const auto values = reader.get_bytes(2 * accum.size(), "fp16 values");
    reader.expect_end("'fp16' payload");
    half_to_float_add(values.data(), accum);
  }

  void to_wire(std::span<const float> input, float scale, void* wire) override {
    float_to_half(input, wire, scale);
  }

  void from_wire(const void* wire, std::span<float> out) const override {
    half_to_float(wire, out);
  }

  void to_wire_residual(std::span<float> a, float scale, void* wire) override {
    check_residual_scale(scale, id());
    half_residual_kernel(a.data(), static_cast<uint8_t*>(wire), a.size(), scale);
  }
};

}  // namespace

std::unique_ptr<Codec> make_fp16_codec(SpecReader&, const TensorInfo&) {
  return std::make_unique<Fp16Codec>();
}

}  // namespace gradwire::compress
