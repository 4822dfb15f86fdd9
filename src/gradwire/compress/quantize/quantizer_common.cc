// Pieces shared by the quantizer family (quantizers.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "gradwire/compress/codecs.h"
#include "gradwire/compress/quantize/quantizers.h"
#include "gradwire/core/error.h"

namespace gradwire::compress {
namespace {

constexpr size_t kSumBlock = 4096;  // elements summed in float before adding in double

// xoshiro128+ in each of the kVectorBlock lanes; out = top 24 bits of s0 + s3, scaled.
[[gnu::noinline]] void xoshiro_fill_kernel(uint32_t* __restrict state, float* __restrict out,
                                           size_t blocks) {
  constexpr size_t L = kVectorBlock;
  uint32_t s0[L], s1[L], s2[L], s3[L];
  for (size_t j = 0; j < L; ++j) {
    s0[j] = state[j];
    s1[j] = state[L + j];
    s2[j] = state[2 * L + j];
    s3[j] = state[3 * L + j];
  }
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t j = 0; j < L; ++j) {
      const uint32_t result = s0[j] + s3[j];
      const uint32_t t = s1[j] << 9;
      s2[j] ^= s0[j];
      s3[j] ^= s1[j];
      s1[j] ^= s2[j];
      s0[j] ^= s3[j];
      s2[j] ^= t;
      s3[j] = (s3[j] << 11) | (s3[j] >> 21);
      // result >> 8 < 2^24 fits int32, whose conversion vectorizes (uint32's does not).
      out[L * b + j] = static_cast<float>(static_cast<int32_t>(result >> 8)) * 0x1p-24f;
    }
  }
  for (size_t j = 0; j < L; ++j) {
    state[j] = s0[j];
    state[L + j] = s1[j];
    state[2 * L + j] = s2[j];
    state[3 * L + j] = s3[j];
  }
}

// `#pragma GCC unroll 1` keeps the reductions' 16-lane inner loops rolled (see
// sum_abs_kernel below).
// sum a_i^2 and max |a_i| with kVectorBlock partials each.
[[gnu::noinline]] SquareSum sum_squares_kernel(const float* __restrict a, size_t n) {
  float partial[kVectorBlock] = {};
  float peak[kVectorBlock] = {};
  size_t i = 0;
  for (; i + kVectorBlock <= n; i += kVectorBlock) {
#pragma GCC unroll 1
    for (size_t j = 0; j < kVectorBlock; ++j) {
      const float x = a[i + j];
      const float m = std::fabs(x);
      partial[j] += x * x;
      peak[j] = m > peak[j] ? m : peak[j];
    }
  }
  float sum = 0.0f;
  float max_abs = 0.0f;
  for (; i < n; ++i) {
    sum += a[i] * a[i];
    max_abs = std::fabs(a[i]) > max_abs ? std::fabs(a[i]) : max_abs;
  }
  for (size_t j = 0; j < kVectorBlock; ++j) {
    sum += partial[j];
    max_abs = peak[j] > max_abs ? peak[j] : max_abs;
  }
  return {sum, max_abs};
}

}  // namespace

// `#pragma GCC unroll 1` keeps the reductions' 16-lane inner loops rolled: GCC 12 -O3
// (the Release build) otherwise unrolls them completely and then vectorizes across blocks
// with shuffles, twice as slow; rolled, they vectorize alike at -O2 and -O3.
// sum |a_i| with kVectorBlock partial sums, so the loop vectorizes.
[[gnu::noinline]] float sum_abs_kernel(const float* __restrict a, size_t n) {
  float partial[kVectorBlock] = {};
  size_t i = 0;
  for (; i + kVectorBlock <= n; i += kVectorBlock) {
#pragma GCC unroll 1
    for (size_t j = 0; j < kVectorBlock; ++j) partial[j] += std::fabs(a[i + j]);
  }
  float sum = 0.0f;
  for (; i < n; ++i) sum += std::fabs(a[i]);
  for (const float p : partial) sum += p;
  return sum;
}

// r += g, then sum |r_i| exactly as sum_abs_kernel would, in the same pass.
[[gnu::noinline]] float add_sum_abs_kernel(const float* __restrict g, float* __restrict r,
                                           size_t n) {
  float partial[kVectorBlock] = {};
  size_t i = 0;
  for (; i + kVectorBlock <= n; i += kVectorBlock) {
#pragma GCC unroll 1
    for (size_t j = 0; j < kVectorBlock; ++j) {
      r[i + j] += g[i + j];
      partial[j] += std::fabs(r[i + j]);
    }
  }
  float sum = 0.0f;
  for (; i < n; ++i) {
    r[i] += g[i];
    sum += std::fabs(r[i]);
  }
  for (const float p : partial) sum += p;
  return sum;
}

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t stream_key(uint64_t seed, const std::string& tensor_name) {
  uint64_t name_hash = 0xcbf29ce484222325ull;  // FNV-1a
  for (const char c : tensor_name) {
    name_hash = (name_hash ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  }
  uint64_t state = seed;
  state = splitmix64(state) ^ name_hash;
  return splitmix64(state);
}

uint64_t call_seed(uint64_t key, uint64_t call, uint64_t input_word) {
  uint64_t state = key ^ (call * 0xd1b54a32d192ed03ull);
  state = splitmix64(state) ^ input_word;
  return splitmix64(state);
}

void UniformStream::reseed(uint64_t seed) {
  uint64_t state = seed;
  for (size_t j = 0; j < kVectorBlock; ++j) {
    const uint64_t a = splitmix64(state);
    const uint64_t b = splitmix64(state);
    state_[0][j] = static_cast<uint32_t>(a);
    state_[1][j] = static_cast<uint32_t>(a >> 32);
    state_[2][j] = static_cast<uint32_t>(b);
    state_[3][j] = static_cast<uint32_t>(b >> 32);
    if ((a | b) == 0) state_[0][j] = 1;  // xoshiro's one forbidden state
  }
}

void UniformStream::fill(float* out, size_t n) {
  xoshiro_fill_kernel(&state_[0][0], out, (n + kVectorBlock - 1) / kVectorBlock);
}

double sum_abs(const float* a, size_t n) {
  double total = 0.0;
  for (size_t i = 0; i < n; i += kSumBlock) {
    const size_t m = std::min(kSumBlock, n - i);
    const float block = sum_abs_kernel(a + i, m);
    if (std::isfinite(block)) {
      total += block;
    } else {  // overflowed float (or a non-finite input, which stays non-finite)
      for (size_t k = 0; k < m; ++k) total += std::fabs(static_cast<double>(a[i + k]));
    }
  }
  return total;
}

double add_sum_abs(const float* g, float* r, size_t n) {
  double total = 0.0;
  for (size_t i = 0; i < n; i += kSumBlock) {
    const size_t m = std::min(kSumBlock, n - i);
    const float block = add_sum_abs_kernel(g + i, r + i, m);
    if (std::isfinite(block)) {
      total += block;
    } else {
      for (size_t k = 0; k < m; ++k) total += std::fabs(static_cast<double>(r[i + k]));
    }
  }
  return total;
}

SquareSum sum_squares(const float* a, size_t n) {
  SquareSum total{0.0, 0.0f};
  for (size_t i = 0; i < n; i += kSumBlock) {
    const size_t m = std::min(kSumBlock, n - i);
    const SquareSum block = sum_squares_kernel(a + i, m);
    // Squares overflow float above ~1.8e19 and lose precision below ~1e-19: redo such
    // blocks in double (a non-finite input stays non-finite there too).
    if (std::isfinite(block.sum) && !(block.sum < 1e-30f && block.max_abs > 0.0f)) {
      total.sum += block.sum;
    } else {
      for (size_t k = 0; k < m; ++k) total.sum += static_cast<double>(a[i + k]) * a[i + k];
    }
    total.max_abs = block.max_abs > total.max_abs ? block.max_abs : total.max_abs;
  }
  return total;
}

void block_maxima(std::span<const float> a, size_t block, std::span<float> out, const char* codec) {
  bool finite = true;
  for (size_t b = 0; b < out.size(); ++b) {
    const size_t begin = b * block, end = std::min(a.size(), begin + block);
    float m = 0.0f;
    for (size_t i = begin; i < end; ++i) {
      const float v = std::fabs(a[i]);
      finite = finite && v <= std::numeric_limits<float>::max();  // false for inf and NaN
      m = std::max(m, v);
    }
    out[b] = m;
  }
  if (!finite) throw_non_finite_input(codec);
}

void read_block_size(ByteReader& reader, size_t expected, const char* codec) {
  const uint32_t block = reader.get<uint32_t>("block size");
  if (block != expected) {
    throw MismatchError("'" + std::string(codec) + "' payload has blocks of " +
                        std::to_string(block) + " elements, this codec " +
                        std::to_string(expected));
  }
}

void read_block_maxima(ByteReader& reader, size_t blocks, std::vector<float>& out,
                       const char* codec) {
  out.resize(blocks);
  const auto bytes = reader.get_bytes(4 * blocks, "block maxima");
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  for (float m : out) {
    if (!(m >= 0.0f) || !std::isfinite(m)) {
      throw PayloadError("'" + std::string(codec) + "' payload: a block maximum is " +
                         format_number(m) + ", not a finite number >= 0");
    }
  }
}

void throw_non_finite_input(const char* codec) {
  throw Error("codec '" + std::string(codec) +
              "': the gradient (plus residual) has non-finite values; training diverged "
              "(lower the learning rate)");
}

}  // namespace gradwire::compress
