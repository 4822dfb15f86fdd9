// Exact top-k selection by magnitude, shared by the top-k codec and its benchmark.
//
// Ordering: elements are ranked by the bits of |a_i| (the float with its sign cleared, read
// as an unsigned integer). For numbers that is the order of |a_i|; NaN ranks above
// infinity, so the order is total and a NaN gradient is sent rather than kept forever in a
// residual. Ties at the k-th largest magnitude go to the lowest positions, so the result
// is a deterministic function of the input.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gradwire::compress {

class TopKSelector {
 public:
  // Below this many elements select() uses nth_element; from it on, radix select (whose
  // fixed cost is clearing 384 KiB of histogram). Measured with bench/selection_bench.cc: the
  // crossover lies between 32K and 48K elements; at 4M radix is 10-20x faster.
  static constexpr size_t kRadixMinSize = 40000;

  // Sets `indices` to the positions of the k largest |a_i|, in increasing order.
  // Requires k <= a.size() and a.size() < 2^32.
  void select(std::span<const float> a, size_t k, std::vector<uint32_t>& indices);

  // Reference: copy the magnitude keys, std::nth_element, then one collecting pass.
  void select_nth_element(std::span<const float> a, size_t k, std::vector<uint32_t>& indices);

  // Two-level radix select on the key bits (high 16 bits, then low 15 bits of the bucket
  // that holds the k-th largest), then one collecting pass: three streaming passes, no
  // copy of the input.
  void select_radix(std::span<const float> a, size_t k, std::vector<uint32_t>& indices);

 private:
  std::vector<uint32_t> keys_;
  std::vector<uint32_t> histogram_;
};

}  // namespace gradwire::compress
