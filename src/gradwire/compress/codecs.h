// Internal: the built-in codecs' factories and the helpers they share. Users go through
// compress::create_codec() (registry.h); tests and benchmarks may include this header.
//
// A factory reads its own keys from the SpecReader (validating their ranges) and returns a
// bare codec, i.e. one without error feedback. The registry reads the generic `ef` key,
// calls SpecReader::finish() and wraps the codec in ErrorFeedback when ef=1. A bare codec's
// spec() therefore says ef=0; ErrorFeedback::spec() rewrites it to ef=1.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "gradwire/compress/codec.h"
#include "gradwire/core/spec.h"
#include "gradwire/core/vectorize.h"

namespace gradwire::compress {

std::unique_ptr<Codec> make_none_codec(SpecReader& reader, const TensorInfo& tensor);
std::unique_ptr<Codec> make_fp16_codec(SpecReader& reader, const TensorInfo& tensor);
std::unique_ptr<Codec> make_topk_codec(SpecReader& reader, const TensorInfo& tensor);
std::unique_ptr<Codec> make_two_bit_codec(SpecReader& reader, const TensorInfo& tensor);

// Payload format version of each built-in codec (bump when a body layout changes).
inline constexpr uint8_t kNoneVersion = 1;
inline constexpr uint8_t kFp16Version = 1;
inline constexpr uint8_t kTopKVersion = 1;
inline constexpr uint8_t kTwoBitVersion = 1;

// Top-k body, after the header:
//   u32 k | u8 layout |
//   kIndexList: u32 index[k] (strictly increasing) | f32 value[k]
//   kBitmap:    u8 bits[ceil(N/8)] (element i is bit i%8 of byte i/8; popcount k; bits past
//               N are zero) | f32 value[k] (in increasing index order)
// The encoder picks whichever is smaller (the index list on a tie).
enum class TopKLayout : uint8_t { kIndexList = 0, kBitmap = 1 };

// k = max(1, ceil(density * n)) capped at n (0 when n is 0). The ceiling forgives a relative
// 1e-9 so that decimal densities behave as written (0.07 of 100 is 7, not 8).
size_t topk_count(double density, size_t n);

// The density a sparsifier (topk, laplace-topk, gaussiank, dgc, randomk) uses at each
// encode: the target `density`, after DGC's warm-up (ALGORITHMS.md 1.4) when `warmup` > 0.
// During the first `warmup` encodes the density is max(density, 4^-(s+1)) in stage
// s = floor(4 step / warmup): 25%, 6.25%, 1.56%, 0.39%, then the target. Every rank encodes
// each tensor once per step, so ranks agree on the schedule; payloads carry their count, so
// decoders do not need it.
class DensitySchedule {
 public:
  DensitySchedule(double density, uint64_t warmup) : density_(density), warmup_(warmup) {}

  // Reads `density` (in (0, 1], default `default_density`) and `warmup` (encode steps,
  // default 0) for codec `codec`; throws ConfigError naming the codec and the range.
  static DensitySchedule read(SpecReader& reader, const char* codec, double default_density);

  // The density of the coming encode; advances the step.
  double next();
  double density() const { return density_; }
  // Adds density= and warmup= to a spec's parameters.
  void describe(std::map<std::string, std::string>& params) const;

  // Checkpoints (Codec::save_state): the encodes done so far, which place the warm-up.
  // load_state() changes nothing when it throws.
  void save_state(Bytes& out) const { ByteWriter(out).put<uint64_t>(step_); }
  void load_state(ByteReader& in) { step_ = in.get<uint64_t>("density schedule step"); }

 private:
  double density_;
  uint64_t warmup_;
  uint64_t step_ = 0;
};

// Head of every stateful codec's checkpoint state (Codec::save_state), before its fields:
//   u32 tag "GWS1" | u8 codec id | u8 state version | u16 reserved (0) | u64 element count
//   | u32 length + the codec's canonical spec()
// The version is the codec's own (bump it when its state's fields change); the count is
// the tensor's. ErrorFeedback writes one with its own spec (ef=1), then its inner codec's
// state in a section (put_section), which starts with the inner codec's header.
void write_state_header(Bytes& out, const Codec& codec, uint8_t version, uint64_t count);
// Reads a header and checks it against `codec`: the tag, the codec id, the spec, the
// version and, when `count` is set, the element count. Throws PayloadError naming what
// was expected and what was found; returns the header's count. A codec calls it first in
// load_state() and changes nothing before it has read (and checked) every field.
uint64_t read_state_header(ByteReader& in, const Codec& codec, uint8_t version,
                           std::optional<uint64_t> count);

// The element count as the header's u32; throws Error when the tensor is too large.
uint32_t checked_count(size_t n, CodecId codec);

// Shortest decimal text that parses back to exactly `value` ("0.01", "0.5", "1e-05").
std::string format_number(double value);
std::string format_number(float value);

// "name:key=value,...,ef=0", keys sorted: the spec of a bare codec.
std::string bare_spec(const std::string& name, std::map<std::string, std::string> params);

// Throws gradwire::Error: the codec has no additive face.
[[noreturn]] void throw_not_additive(CodecId codec, const char* call);

// Throws gradwire::Error unless `scale` is finite and non-zero (the *_residual calls divide
// by it).
void check_residual_scale(float scale, CodecId codec);

// Unaligned-safe element access for payload bytes (compiles to plain loads and stores).
inline float load_f32(const uint8_t* p, size_t i) {
  float v;
  std::memcpy(&v, p + 4 * i, 4);
  return v;
}
inline void store_f32(uint8_t* p, size_t i, float v) { std::memcpy(p + 4 * i, &v, 4); }
inline uint32_t load_u32(const uint8_t* p, size_t i) {
  uint32_t v;
  std::memcpy(&v, p + 4 * i, 4);
  return v;
}

}  // namespace gradwire::compress
