// The PowerSGD kernels against the plain definitions, summed in double: every shape of tile
// and tail (rows odd, ranks 1 to 17, columns not a multiple of the vector width).
#include "gradwire/compress/lowrank/low_rank_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace gradwire::compress {
namespace {

std::vector<float> normals(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// |got - want| within float rounding of a sum of `terms` products of unit-scale values.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, size_t terms,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  const double bound = 1e-5 * std::sqrt(static_cast<double>(terms)) + 1e-6;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], bound * (1.0 + std::abs(want[i]))) << what << " at " << i;
  }
}

// out[i * cols + j] += sum_k a(i, k) b(k, j) in double, i < rows, j < cols, k < inner: each
// kernel's definition, its operands read through index functions (row-major or transposed).
template <typename A, typename B>
void add_reference_product(size_t rows, size_t inner, size_t cols, A a, B b,
                           std::vector<double>& out) {
  for (size_t i = 0; i < rows; ++i)
    for (size_t j = 0; j < cols; ++j)
      for (size_t k = 0; k < inner; ++k) out[i * cols + j] += double(a(i, k)) * double(b(k, j));
}

const LowRankShape kShapes[] = {{1, 1, 1},  {2, 4, 4},   {3, 5, 1},   {7, 9, 2},    {5, 13, 3},
                                {9, 31, 5}, {16, 64, 8}, {11, 33, 9}, {33, 17, 16}, {6, 130, 17}};

TEST(LowRankKernelsTest, MultiplyMQIsEachRowDotEachColumnOfQ) {
  for (const auto& s : kShapes) {
    const auto m = normals(s.rows * s.cols, 1), qt = normals(s.rank * s.cols, 2);
    std::vector<float> p(s.rows * s.rank, -1.0f);
    multiply_m_q(s, m, qt, p);
    std::vector<double> want(p.size(), 0.0);
    add_reference_product(
        s.rows, s.cols, s.rank, [&](size_t i, size_t k) { return m[i * s.cols + k]; },
        [&](size_t k, size_t c) { return qt[c * s.cols + k]; }, want);
    expect_close(p, want, s.cols,
                 "P = M Q, " + std::to_string(s.rows) + "x" + std::to_string(s.cols) + " rank " +
                     std::to_string(s.rank));
  }
}

TEST(LowRankKernelsTest, MultiplyMtPOverwritesQWithMTransposeP) {
  for (const auto& s : kShapes) {
    const auto m = normals(s.rows * s.cols, 3), p = normals(s.rows * s.rank, 4);
    std::vector<float> qt(s.rank * s.cols, 123.0f);  // overwritten, not added to
    multiply_mt_p(s, m, p, qt);
    std::vector<double> want(qt.size(), 0.0);
    add_reference_product(
        s.rank, s.rows, s.cols, [&](size_t c, size_t i) { return p[i * s.rank + c]; },
        [&](size_t i, size_t k) { return m[i * s.cols + k]; }, want);
    expect_close(qt, want, s.rows, "Q = M^T P, rank " + std::to_string(s.rank));
  }
}

TEST(LowRankKernelsTest, AddPQtAddsTheProductToWhatIsThere) {
  for (const auto& s : kShapes) {
    const auto p = normals(s.rows * s.rank, 5), qt = normals(s.rank * s.cols, 6);
    auto out = normals(s.rows * s.cols, 7);
    std::vector<double> want(out.begin(), out.end());
    add_p_qt(s, p, qt, out);
    add_reference_product(
        s.rows, s.rank, s.cols, [&](size_t i, size_t c) { return p[i * s.rank + c]; },
        [&](size_t c, size_t k) { return qt[c * s.cols + k]; }, want);
    expect_close(out, want, s.rank + 1, "out += P Q^T, rank " + std::to_string(s.rank));
  }
}

// A non-finite value reaches exactly the outputs whose definition reads it: no kernel
// multiplies an element that is not its own by a zero weight.
TEST(LowRankKernelsTest, ANonFiniteValueReachesOnlyTheOutputsThatReadIt) {
  const LowRankShape s{5, 11, 6};
  auto m = normals(s.rows * s.cols, 8);
  const auto qt = normals(s.rank * s.cols, 9), p = normals(s.rows * s.rank, 10);
  m[4 * s.cols + 10] = std::numeric_limits<float>::infinity();  // last row, last column
  std::vector<float> p_out(s.rows * s.rank);
  multiply_m_q(s, m, qt, p_out);
  for (size_t i = 0; i < s.rows; ++i)
    for (size_t c = 0; c < s.rank; ++c) EXPECT_EQ(std::isfinite(p_out[i * s.rank + c]), i != 4);
  std::vector<float> q_out(s.rank * s.cols);
  multiply_mt_p(s, m, p, q_out);
  for (size_t c = 0; c < s.rank; ++c)
    for (size_t k = 0; k < s.cols; ++k) EXPECT_EQ(std::isfinite(q_out[c * s.cols + k]), k != 10);
}

TEST(LowRankKernelsTest, OrthonormaliseLeavesOrthonormalRowsAndAZeroOneZero) {
  const size_t count = 6, length = 37;
  auto v = normals(count * length, 11);
  for (size_t k = 0; k < length; ++k) v[3 * length + k] = 0.0f;
  orthonormalise_vectors(v, count, length);
  for (size_t a = 0; a < count; ++a) {
    for (size_t b = 0; b <= a; ++b) {
      double dot = 0;
      for (size_t k = 0; k < length; ++k) dot += double(v[a * length + k]) * v[b * length + k];
      const double want = (a == b && a != 3) ? 1.0 : 0.0;
      EXPECT_NEAR(dot, want, 1e-5) << a << "." << b;
    }
  }
  for (size_t k = 0; k < length; ++k) EXPECT_EQ(v[3 * length + k], 0.0f) << k;
}

}  // namespace
}  // namespace gradwire::compress
