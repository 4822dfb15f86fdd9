// Helpers shared by the codec tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "gradwire/compress/codec.h"

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

}  // namespace gradwire::compress::testing
