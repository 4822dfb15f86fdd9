// Helpers shared by the codec tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "gradwire/compress/codec.h"
#include "gradwire/core/error.h"

namespace gradwire::compress::testing {

inline std::vector<float> random_vector(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline TensorInfo tensor_of(size_t n) {
  return TensorInfo{"test.weight", {static_cast<int64_t>(n)}, LayerKind::kOther};
}

// D(payload) for a tensor of n elements.
inline std::vector<float> decode(const Codec& codec, std::span<const uint8_t> payload, size_t n) {
  std::vector<float> out(n, 0.0f);
  codec.decode_add(payload, out);
  return out;
}

inline Bytes encode(Codec& codec, std::span<const float> input) {
  Bytes out;
  codec.encode(input, out);
  return out;
}

// Bitwise equality (NaN-safe): "the accumulator is untouched".
inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size_bytes()) == 0);
}

// Decodes `iterations` mutations of `payload` (1-3 bytes flipped, one in eight also
// truncated or extended): each must decode or throw gradwire::Error with the accumulator
// bit-for-bit unchanged (any other exception escapes). Returns how many were rejected.
inline size_t decode_mutations(const Codec& codec, const Bytes& payload, size_t n, uint32_t seed,
                               int iterations) {
  std::mt19937 rng(seed);
  size_t rejected = 0;
  for (int iteration = 0; iteration < iterations; ++iteration) {
    Bytes bad = payload;
    const int flips = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < flips; ++f) {
      bad[rng() % bad.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    }
    if (rng() % 8 == 0) bad.resize(rng() % (bad.size() + 8));
    std::vector<float> accum = random_vector(n, 78);
    const auto before = accum;
    try {
      codec.decode_add(bad, accum);
    } catch (const Error&) {
      ++rejected;
      if (!same_bits(accum, before)) {
        ADD_FAILURE() << "iteration " << iteration
                      << ": a rejected payload modified the accumulator";
        return rejected;
      }
    }
  }
  return rejected;
}

}  // namespace gradwire::compress::testing
