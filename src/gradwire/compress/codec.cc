#include "gradwire/compress/codec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "gradwire/compress/codecs.h"
#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

bool is_known_codec(uint8_t id) {
  switch (static_cast<CodecId>(id)) {
    case CodecId::kNone:
    case CodecId::kFp16:
    case CodecId::kTopK:
    case CodecId::kTwoBit:
    case CodecId::kLaplaceTopK:
    case CodecId::kGaussianK:
    case CodecId::kRandomK:
    case CodecId::kDgc:
    case CodecId::kQsgd:
    case CodecId::kTernGrad:
    case CodecId::kSignSgd:
    case CodecId::kBf16:
    case CodecId::kSpectral:
    case CodecId::kPowerSgd:
    case CodecId::kFilterTopK:
    case CodecId::kInt8:
    case CodecId::kInt4:
    case CodecId::kSparseLoCo:
      return true;
  }
  return false;
}

[[gnu::noinline]] void subtract_kernel(const float* __restrict d, float* __restrict r, size_t n) {
  vector_loop(n, [=](size_t i) { r[i] -= d[i]; });
}

}  // namespace

size_t wire_type_size(WireType type) {
  switch (type) {
    case WireType::kFloat32:
      return 4;
    case WireType::kFloat16:
      return 2;
  }
  throw Error("unknown wire type " + std::to_string(static_cast<int>(type)));
}

namespace {

struct LayerKindNames {
  LayerKind kind;
  const char* name;
  const char* key;
};
constexpr LayerKindNames kLayerKindNames[] = {
    {LayerKind::kConvWeight, "conv_weight", "conv"},
    {LayerKind::kFcWeight, "fc_weight", "fc"},
    {LayerKind::kBias, "bias", "bias"},
    {LayerKind::kNorm, "norm", "norm"},
    {LayerKind::kOther, "other", "other"},
};

const LayerKindNames* names_of(LayerKind kind) {
  for (const auto& entry : kLayerKindNames) {
    if (entry.kind == kind) return &entry;
  }
  return nullptr;
}

}  // namespace

const char* layer_kind_name(LayerKind kind) {
  const auto* entry = names_of(kind);
  return entry ? entry->name : "unknown";
}

const char* layer_kind_key(LayerKind kind) {
  const auto* entry = names_of(kind);
  return entry ? entry->key : "other";
}

bool sends_sparse(CodecId id) {
  switch (id) {
    case CodecId::kTopK:
    case CodecId::kLaplaceTopK:
    case CodecId::kGaussianK:
    case CodecId::kRandomK:
    case CodecId::kDgc:
    case CodecId::kFilterTopK:
      return true;
    default:
      return false;
  }
}

const char* codec_id_name(CodecId id) {
  switch (id) {
    case CodecId::kNone:
      return "none";
    case CodecId::kFp16:
      return "fp16";
    case CodecId::kTopK:
      return "topk";
    case CodecId::kTwoBit:
      return "2bit";
    case CodecId::kLaplaceTopK:
      return "laplace-topk";
    case CodecId::kGaussianK:
      return "gaussiank";
    case CodecId::kRandomK:
      return "randomk";
    case CodecId::kDgc:
      return "dgc";
    case CodecId::kQsgd:
      return "qsgd";
    case CodecId::kTernGrad:
      return "terngrad";
    case CodecId::kSignSgd:
      return "signsgd";
    case CodecId::kBf16:
      return "bf16";
    case CodecId::kSpectral:
      return "spectral";
    case CodecId::kPowerSgd:
      return "powersgd";
    case CodecId::kFilterTopK:
      return "filter-topk";
    case CodecId::kInt8:
      return "int8";
    case CodecId::kInt4:
      return "int4";
    case CodecId::kSparseLoCo:
      return "sparseloco";
  }
  return "unknown";
}

size_t TensorInfo::numel() const {
  size_t n = 1;
  for (const int64_t dim : shape) {
    if (dim < 0) {
      throw ConfigError("tensor '" + name + "' has a negative dimension (" + std::to_string(dim) +
                        ")");
    }
    const auto d = static_cast<size_t>(dim);
    if (d != 0 && n > std::numeric_limits<size_t>::max() / d) {
      throw ConfigError("tensor '" + name + "' has more elements than size_t can count");
    }
    n *= d;
  }
  return n;
}

void PayloadHeader::write(ByteWriter& writer) const {
  writer.put<uint8_t>(kMagic);
  writer.put<uint8_t>(static_cast<uint8_t>(codec));
  writer.put<uint8_t>(version);
  writer.put<uint8_t>(0);
  writer.put<uint32_t>(count);
}

PayloadHeader PayloadHeader::read_expected(ByteReader& reader, CodecId expected_codec,
                                           uint8_t expected_version, size_t expected_count) {
  const auto magic = reader.get<uint8_t>("header magic");
  const auto codec = reader.get<uint8_t>("header codec id");
  const auto version = reader.get<uint8_t>("header version");
  const auto reserved = reader.get<uint8_t>("header reserved byte");
  const auto count = reader.get<uint32_t>("header element count");
  const std::string expected_name = codec_id_name(expected_codec);
  if (magic != kMagic) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "0x%02x (expected 0x%02x)", magic, kMagic);
    throw PayloadError("not a gradwire payload: first byte is " + std::string(buf) +
                       "; the bytes are corrupt or not from a '" + expected_name + "' codec");
  }
  if (codec != static_cast<uint8_t>(expected_codec)) {
    if (!is_known_codec(codec)) {
      throw PayloadError("corrupt payload: unknown codec id " + std::to_string(codec) +
                         " (this rank decodes with '" + expected_name +
                         "'; is another rank running a newer gradwire?)");
    }
    throw MismatchError("payload was encoded by codec '" +
                        std::string(codec_id_name(static_cast<CodecId>(codec))) +
                        "' but this rank decodes with '" + expected_name +
                        "' (ranks must use the same --compressor)");
  }
  if (version != expected_version) {
    throw PayloadError("payload of codec '" + expected_name + "' has format version " +
                       std::to_string(version) + " but this build reads version " +
                       std::to_string(expected_version) +
                       " (all ranks must run the same gradwire build)");
  }
  if (reserved != 0) {
    throw PayloadError("corrupt payload of codec '" + expected_name + "': reserved byte is " +
                       std::to_string(reserved) + " (must be 0)");
  }
  if (count != expected_count) {
    throw PayloadError("payload of codec '" + expected_name + "' holds " + std::to_string(count) +
                       " elements but the receiving tensor has " + std::to_string(expected_count) +
                       " (ranks must register the same tensors in the same order)");
  }
  PayloadHeader header;
  header.codec = expected_codec;
  header.version = version;
  header.count = count;
  return header;
}

// --- Codec defaults ------------------------------------------------------------------------

void Codec::encode_residual(std::span<float> a, Bytes& out) {
  // r <- a - D(C(a)): encode, decode the new payload into a temporary, subtract.
  const size_t start = out.size();
  encode(a, out);
  std::vector<float> decoded(a.size(), 0.0f);
  decode_add(std::span<const uint8_t>(out).subspan(start), decoded);
  subtract_kernel(decoded.data(), a.data(), a.size());
}

void Codec::to_wire(std::span<const float>, float, void*) { throw_not_additive(id(), "to_wire"); }

void Codec::from_wire(const void*, std::span<float>) const {
  throw_not_additive(id(), "from_wire");
}

void Codec::to_wire_residual(std::span<float>, float, void*) {
  throw_not_additive(id(), "to_wire_residual");
}

// --- helpers shared by the built-in codecs (codecs.h) --------------------------------------

size_t topk_count(double density, size_t n) {
  if (n == 0) return 0;
  const double x = density * static_cast<double>(n);
  const double k = std::ceil(x - x * 1e-9);
  if (k <= 1.0) return 1;
  if (k >= static_cast<double>(n)) return n;
  return static_cast<size_t>(k);
}

uint32_t checked_count(size_t n, CodecId codec) {
  if (n > std::numeric_limits<uint32_t>::max()) {
    throw Error("codec '" + std::string(codec_id_name(codec)) + "' cannot encode " +
                std::to_string(n) +
                " elements in one payload (the limit is 2^32-1); split the tensor");
  }
  return static_cast<uint32_t>(n);
}

std::string format_number(double value) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, result.ptr);
}

std::string format_number(float value) {
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), value);
  return std::string(buf, result.ptr);
}

DensitySchedule DensitySchedule::read(SpecReader& reader, const char* codec,
                                      double default_density) {
  const double density = reader.get_double("density", default_density);
  if (!(density > 0.0 && density <= 1.0)) {
    throw ConfigError(std::string("codec '") + codec + "': density=" + format_number(density) +
                      " is out of range (0, 1]; it is the fraction of elements sent, e.g. "
                      "density=" +
                      format_number(default_density));
  }
  const long long warmup = reader.get_int_in("warmup", 0, 0, INT64_MAX);
  return DensitySchedule(density, static_cast<uint64_t>(warmup));
}

double DensitySchedule::next() {
  const uint64_t step = step_++;
  if (step >= warmup_) return density_;
  // Stage s = floor(4 step / warmup) in 0..3 (in doubles: 4 step may not fit 64 bits).
  const double stage =
      std::min(3.0, std::floor(4.0 * static_cast<double>(step) / static_cast<double>(warmup_)));
  return std::max(density_, std::pow(0.25, stage + 1.0));
}

void DensitySchedule::describe(std::map<std::string, std::string>& params) const {
  params["density"] = format_number(density_);
  params["warmup"] = std::to_string(warmup_);
}

std::string bare_spec(const std::string& name, std::map<std::string, std::string> params) {
  params["ef"] = std::string("0");  // not = "0": GCC 12 -O3 -Wrestrict false positive
  Spec spec{name, std::move(params)};
  return spec.to_string();
}

void throw_not_additive(CodecId codec, const char* call) {
  throw Error(std::string(call) + "() called on codec '" + codec_id_name(codec) +
              "', which is not additive (its payloads cannot be summed by an allreduce); "
              "use encode()/decode_add() with an allgather, or pick 'none' or 'fp16'");
}

void check_residual_scale(float scale, CodecId codec) {
  if (!std::isfinite(scale) || scale == 0.0f) {
    throw Error("to_wire_residual() on codec '" + std::string(codec_id_name(codec)) +
                "' needs a finite, non-zero scale (got " + format_number(scale) + ")");
  }
}

// --- checkpoint states ---------------------------------------------------------------------

namespace {
constexpr uint32_t kStateTag = 0x31535747;  // "GWS1"
}  // namespace

void write_state_header(Bytes& out, const Codec& codec, uint8_t version, uint64_t count) {
  ByteWriter writer(out);
  writer.put<uint32_t>(kStateTag);
  writer.put<uint8_t>(static_cast<uint8_t>(codec.id()));
  writer.put<uint8_t>(version);
  writer.put<uint16_t>(0);
  writer.put<uint64_t>(count);
  writer.put_string(codec.spec());
}

uint64_t read_state_header(ByteReader& in, const Codec& codec, uint8_t version,
                           std::optional<uint64_t> count) {
  const std::string spec = codec.spec();
  if (in.remaining() == 0) {
    throw PayloadError("no checkpoint state for codec '" + spec +
                       "', which carries state from step to step (the checkpoint was saved "
                       "with a codec that has none?)");
  }
  const auto tag = in.get<uint32_t>("codec state tag");
  if (tag != kStateTag) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "tag 0x%08x where a codec state starts with 0x%08x", tag,
                  kStateTag);
    throw PayloadError("not a codec checkpoint state for codec '" + spec + "': " + buf +
                       " (corrupt, or saved by another gradwire build)");
  }
  const auto id = in.get<uint8_t>("codec state codec id");
  if (id != static_cast<uint8_t>(codec.id())) {
    const std::string found =
        is_known_codec(id) ? "codec '" + std::string(codec_id_name(static_cast<CodecId>(id))) + "'"
                           : "unknown codec id " + std::to_string(id);
    throw PayloadError("checkpoint state of " + found + " given to codec '" + spec +
                       "' (resume with the compressor the checkpoint was saved with)");
  }
  const auto saved_version = in.get<uint8_t>("codec state version");
  const auto reserved = in.get<uint16_t>("codec state reserved field");
  const auto saved_count = in.get<uint64_t>("codec state element count");
  const std::string saved_spec = in.get_string("codec state spec");
  if (saved_spec != spec) {
    throw PayloadError("checkpoint state of codec '" + saved_spec + "' given to codec '" + spec +
                       "' (resume with the compressor the checkpoint was saved with)");
  }
  if (saved_version != version) {
    throw PayloadError("checkpoint state of codec '" + spec + "' has version " +
                       std::to_string(saved_version) + " but this build reads version " +
                       std::to_string(version));
  }
  if (reserved != 0) {
    throw PayloadError("corrupt checkpoint state of codec '" + spec + "': reserved field is " +
                       std::to_string(reserved) + " (must be 0)");
  }
  if (count && saved_count != *count) {
    throw PayloadError("checkpoint state of codec '" + spec + "' is for a tensor of " +
                       std::to_string(saved_count) + " elements, this codec's tensor has " +
                       std::to_string(*count) + " (states go to the tensors they were saved from)");
  }
  return saved_count;
}

}  // namespace gradwire::compress
