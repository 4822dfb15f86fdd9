// Internal: the dense kernels of a PowerSGD step (powersgd_codec.cc, ALGORITHMS.md 3): its
// three products and the Gram-Schmidt that orthonormalises P and Q.
//
// M is n x m, row-major (a gradient matrix); P is n x r, row-major; Q is m x r, held as its
// transpose Qt (r x m, row-major: Q's columns one after the other), so that every product
// reads rows of length m contiguously:
//
//   multiply_m_q:    P = M Q          P[i][c]  = M[i,:] . Qt[c,:]
//   multiply_mt_p:   Qt = (M^T P)^T   Qt[c,:]  = sum_i P[i][c] M[i,:]
//   add_p_qt:        out += P Q^T     out[i,:] += sum_c P[i][c] Qt[c,:]
//
// Each product costs n m r multiply-adds. They are register-blocked (several rows of M, or several
// of Qt, per pass over a row) so that a multiply-add costs less than one load, instead of
// the two loads (and, for the accumulating ones, a store) of one dot or axpy at a time; the
// products run on the exchange thread beside the model's own compute, so their cost is
// the codec's (`gradwire bench codecs --filter powersgd`). Sums are float, four lanes per
// dot product: the same ranks run the same code, so every rank gets the same bits.
#pragma once

#include <cstddef>
#include <span>

namespace gradwire::compress {

struct LowRankShape {
  size_t rows = 0;  // n
  size_t cols = 0;  // m
  size_t rank = 0;  // r
};

// Gram-Schmidt, two passes, on `count` vectors of `length` floats held one after the other:
// afterwards they are orthonormal, or zero where a vector lies in the span of those before
// it (its norm after projection is 0). Projections and norms accumulate in double.
void orthonormalise_vectors(std::span<float> vectors, size_t count, size_t length);

// p (rows x rank) = m (rows x cols) times qt^T (qt: rank x cols).
void multiply_m_q(LowRankShape shape, std::span<const float> m, std::span<const float> qt,
                  std::span<float> p);

// qt (rank x cols) = p^T (p: rows x rank) times m (rows x cols); qt is overwritten.
void multiply_mt_p(LowRankShape shape, std::span<const float> m, std::span<const float> p,
                   std::span<float> qt);

// out (rows x cols) += p (rows x rank) times qt (rank x cols).
void add_p_qt(LowRankShape shape, std::span<const float> p, std::span<const float> qt,
              std::span<float> out);

}  // namespace gradwire::compress
