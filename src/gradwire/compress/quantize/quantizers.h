// Internal: the quantizer family (ALGORITHMS.md 2.2-2.5) and what its members share: the
// factories the registry calls, payload versions, a vectorizable random stream and
// reductions that stay accurate on large tensors. See codecs.h for the factory contract.
//
//   qsgd      stochastic rounding to s levels of the bucket norm, unbiased      (ef off)
//   terngrad  stochastic ternary {-s, 0, s} after clipping, unbiased            (ef off)
//   signsgd   EF-signSGD: mean |a| times the signs                              (ef on)
//   bf16      bfloat16 cast; message face only (Gloo has no bf16 sum)           (ef off)
//   int8      int8 per block of a shared scale; summed by allreduce in int8     (ef on)
//   int4      4-bit levels per block of its own scale; message face only       (ef on)
//
// Randomness: qsgd and terngrad draw one uniform per element from a UniformStream owned by
// the codec instance (one per tensor). A `seed` key (default 0) and the tensor name fix the
// stream, so a run is reproducible; decoders need no randomness. Every rank has the same
// spec and tensor names, so each call also mixes a statistic of its own input (a norm, the
// scale) into the stream's seed: ranks with different gradients then round independently
// instead of all rounding the same coordinates up together, which would turn the variance
// of the sum over P ranks from P into up to P^2 times that of one rank.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradwire/compress/codec.h"
#include "gradwire/core/spec.h"
#include "gradwire/core/vectorize.h"

namespace gradwire::compress {

std::unique_ptr<Codec> make_qsgd_codec(SpecReader& reader, const TensorInfo& tensor);
std::unique_ptr<Codec> make_terngrad_codec(SpecReader& reader, const TensorInfo& tensor);
std::unique_ptr<Codec> make_sign_sgd_codec(SpecReader& reader, const TensorInfo& tensor);
std::unique_ptr<Codec> make_bf16_codec(SpecReader& reader, const TensorInfo& tensor);
std::unique_ptr<Codec> make_int8_codec(SpecReader& reader, const TensorInfo& tensor);
std::unique_ptr<Codec> make_int4_codec(SpecReader& reader, const TensorInfo& tensor);

// Payload format version of each quantizer (bump when a body layout changes).
inline constexpr uint8_t kQsgdVersion = 1;
inline constexpr uint8_t kTernGradVersion = 1;
inline constexpr uint8_t kSignSgdVersion = 1;
inline constexpr uint8_t kBf16Version = 1;
inline constexpr uint8_t kInt8Version = 1;
inline constexpr uint8_t kInt4Version = 1;

// Elements the stochastic quantizers process per block: uniforms and codes for one block
// live in small scratch buffers (L1-resident), and a block is a whole number of code groups
// of every packed layout (at most 128 elements a group).
inline constexpr size_t kQuantBlock = 2048;

// Sixteen xoshiro128+ generators (Blackman & Vigna) stepped in lockstep, one per lane of a
// kVectorBlock loop, so filling a buffer vectorizes. Fully specified integer arithmetic:
// the same seed gives the same uniforms with every compiler and standard library.
class UniformStream {
 public:
  // Restarts every lane; splitmix64 expands `seed` into the 64 state words.
  void reseed(uint64_t seed);
  // out[0, n) = uniforms in [0, 1), multiples of 2^-24 (the top 24 bits of each output).
  // n is rounded up to a multiple of kVectorBlock: `out` must have room for that.
  void fill(float* out, size_t n);

 private:
  uint32_t state_[4][kVectorBlock] = {};
};

// The splitmix64 step (Steele, Lea & Flood 2014): advances `state`, returns a mixed word.
uint64_t splitmix64(uint64_t& state);

// The key of a codec instance's stream: the spec's seed mixed with the tensor name.
uint64_t stream_key(uint64_t seed, const std::string& tensor_name);

// Seed for one encode call: the instance key, the call number and a word of the input.
uint64_t call_seed(uint64_t key, uint64_t call, uint64_t input_word);

// The float kernels under sum_abs and add_sum_abs: kVectorBlock partial sums over all n
// (2bit's threshold uses them directly). add_sum_abs_kernel does r += g, then returns
// exactly what sum_abs_kernel(r, n) would, in one pass.
float sum_abs_kernel(const float* a, size_t n);
float add_sum_abs_kernel(const float* g, float* r, size_t n);

// sum_i |a_i|, summed in float blocks of kVectorBlock partial sums, blocks added in double
// (accurate to ~1e-6 relative on 25M elements). Inf or NaN when some a_i is.
double sum_abs(const float* a, size_t n);

// r_i += g_i, then sum_abs(r, n) (the same value), in one pass over memory.
double add_sum_abs(const float* g, float* r, size_t n);

// sum_i a_i^2 (as sum_abs; blocks that overflow or underflow float are redone in double)
// and max_i |a_i|. sum is non-finite exactly when some a_i is.
struct SquareSum {
  double sum;
  float max_abs;
};
SquareSum sum_squares(const float* a, size_t n);

// Throws gradwire::Error naming `codec`: the input to encode was not finite.
[[noreturn]] void throw_non_finite_input(const char* codec);

// The block quantizers' scales (int8, int4): out[b] = max |a_i| over block b (elements
// [b block, (b + 1) block) of a). Throws throw_non_finite_input(codec) when some a_i is
// not finite (training diverged: there is no scale).
void block_maxima(std::span<const float> a, size_t block, std::span<float> out, const char* codec);
// Reads a payload's u32 block size; MismatchError naming `codec` unless it is `expected`.
void read_block_size(ByteReader& reader, size_t expected, const char* codec);
// Reads `blocks` fp32 block maxima from a payload into `out` (resized), each a finite
// number >= 0; PayloadError naming `codec` otherwise.
void read_block_maxima(ByteReader& reader, size_t blocks, std::vector<float>& out,
                       const char* codec);

}  // namespace gradwire::compress
