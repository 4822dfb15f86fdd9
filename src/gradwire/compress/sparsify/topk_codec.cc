// `topk`: exact top-k sparsification (ALGORITHMS.md 1.1). Sends the k = max(1,
// ceil(density N)) entries of largest magnitude; body layout in codecs.h (TopKLayout).
// Error feedback is on by default: the unsent entries stay in the residual.
#include "gradwire/compress/codecs.h"
#include "gradwire/compress/sparsify/sparse_select.h"
#include "gradwire/compress/sparsify/topk_select.h"

namespace gradwire::compress {
namespace {

constexpr SparseBodyNames kNames{"topk",        "topk k",      "topk layout",   "topk indices",
                                 "topk bitmap", "topk values", "'topk' payload"};
constexpr uint8_t kStateVersion = 1;

class TopKCodec final : public Codec {
 public:
  TopKCodec(DensitySchedule density, size_t numel) : density_(density), numel_(numel) {}

  CodecId id() const override { return CodecId::kTopK; }
  std::string spec() const override {
    std::map<std::string, std::string> params;
    density_.describe(params);
    return bare_spec("topk", std::move(params));
  }

  // Checkpoints: the warm-up's position; the selection itself starts afresh at every encode.
  void save_state(Bytes& out) const override {
    write_state_header(out, *this, kStateVersion, numel_);
    density_.save_state(out);
  }
  void load_state(ByteReader& in) override {
    read_state_header(in, *this, kStateVersion, numel_);
    density_.load_state(in);
  }

  void encode(std::span<const float> input, Bytes& out) override {
    const uint32_t n = checked_count(input.size(), id());
    const size_t k = topk_count(density_.next(), n);
    selector_.select(input, k, indices_);
    ByteWriter writer(out);
    PayloadHeader{CodecId::kTopK, kTopKVersion, n}.write(writer);
    write_sparse_body(writer, n, indices_, input.data());
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
    read_sparse_body_add(reader, kNames, accum);
  }

 private:
  DensitySchedule density_;
  size_t numel_;
  TopKSelector selector_;
  std::vector<uint32_t> indices_;  // positions sent by the last encode, increasing
};

}  // namespace

std::unique_ptr<Codec> make_topk_codec(SpecReader& reader, const TensorInfo& tensor) {
  return std::make_unique<TopKCodec>(DensitySchedule::read(reader, "topk", 0.01), tensor.numel());
}

}  // namespace gradwire::compress
