// Loop shapes GCC 12 vectorizes at -O2 (measured with -fopt-info-vec; see bench/).
#pragma once

#include <cstddef>

namespace gradwire {

// Runs body(i) for i in [0, n) in fixed blocks plus a scalar tail. GCC 12 at -O2 only
// vectorizes loops whose trip count is a known multiple of the vector width, so kernels
// use this with a body that selects with masks or ternaries rather than branches. Kernels
// are [[gnu::noinline]] functions taking __restrict pointers: GCC drops the no-alias facts
// of a restrict parameter once the function is inlined, and then it cannot vectorize.
inline constexpr size_t kVectorBlock = 16;
template <typename Body>
inline void vector_loop(size_t n, Body&& body) {
  size_t i = 0;
  for (; i + kVectorBlock <= n; i += kVectorBlock) {
    for (size_t j = 0; j < kVectorBlock; ++j) body(i + j);
  }
  for (; i < n; ++i) body(i);
}

}  // namespace gradwire
