#include "gradwire/compress/lowrank/low_rank_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "gradwire/core/vectorize.h"

namespace gradwire::compress {
namespace {

// Four float lanes (SSE2 on x86-64, NEON on ARM), written out as in sparse_select.cc: the
// auto-vectorizer keeps a blocked kernel's accumulators in memory.
using F4 = float __attribute__((vector_size(16)));

inline F4 load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store4(float* p, F4 v) { std::memcpy(p, &v, sizeof(v)); }
inline float sum4(F4 v) { return (v[0] + v[2]) + (v[1] + v[3]); }

using D2 = double __attribute__((vector_size(16)));
inline D2 widen2(const float* p) { return D2{p[0], p[1]}; }

// sum_i double(u[i]) double(v[i]): four independent accumulators of two lanes (one chain
// of dependent double additions would cost an addition's latency per element).
[[gnu::noinline]] double dot_in_double(const float* u, const float* v, size_t n) {
  D2 acc[4] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
#pragma GCC unroll 4
    for (size_t j = 0; j < 4; ++j) acc[j] += widen2(u + i + 2 * j) * widen2(v + i + 2 * j);
  }
  const D2 pair = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  double sum = pair[0] + pair[1];
  for (; i < n; ++i) sum += double(u[i]) * double(v[i]);
  return sum;
}

// y += alpha x
[[gnu::noinline]] void axpy(float alpha, const float* __restrict x, float* __restrict y, size_t n) {
  vector_loop(n, [=](size_t i) { y[i] += alpha * x[i]; });
}

// v *= scale, rounded through double
[[gnu::noinline]] void scale_in_double(double scale, float* __restrict v, size_t n) {
  vector_loop(n, [=](size_t i) { v[i] = static_cast<float>(double(v[i]) * scale); });
}

// out[i * ld + j] = a[i] . b[j] over n floats, for i < R rows of M and j < C rows of Qt.
// The R x C accumulators stay in registers: at 2 x 4, with the 4 + 1 vectors loaded per
// step, 13 of SSE2's 16; a step does 8 multiply-adds for 6 loads (one dot at a time: 2).
template <size_t R, size_t C>
[[gnu::noinline]] void dot_tile(const float* const* a_rows, const float* const* b_rows, size_t n,
                                float* out, size_t ld) {
  const float* a[R];
  const float* b[C];
  std::copy_n(a_rows, R, a);
  std::copy_n(b_rows, C, b);
  F4 acc[R][C] = {};
  size_t k = 0;
  for (; k + 4 <= n; k += 4) {
    F4 bv[C];
#pragma GCC unroll 4
    for (size_t j = 0; j < C; ++j) bv[j] = load4(b[j] + k);
#pragma GCC unroll 2
    for (size_t i = 0; i < R; ++i) {
      const F4 av = load4(a[i] + k);
#pragma GCC unroll 4
      for (size_t j = 0; j < C; ++j) acc[i][j] += av * bv[j];
    }
  }
  for (size_t i = 0; i < R; ++i) {
    for (size_t j = 0; j < C; ++j) {
      float sum = sum4(acc[i][j]);
      for (size_t t = k; t < n; ++t) sum += a[i][t] * b[j][t];
      out[i * ld + j] = sum;
    }
  }
}

using DotTile = void (*)(const float* const*, const float* const*, size_t, float*, size_t);
constexpr size_t kTileRows = 2, kTileCols = 4;
constexpr DotTile kDotTiles[kTileRows][kTileCols] = {
    {dot_tile<1, 1>, dot_tile<1, 2>, dot_tile<1, 3>, dot_tile<1, 4>},
    {dot_tile<2, 1>, dot_tile<2, 2>, dot_tile<2, 3>, dot_tile<2, 4>}};

// y += w[0] x[0] + ... + w[J-1] x[J-1] over n floats: y is loaded and stored once for J
// multiply-adds (an axpy at a time: once for each). The terms add in the order j = 0, 1, ...
template <size_t J>
[[gnu::noinline]] void add_weighted_rows(const float* const* x_rows, const float* w, float* y,
                                         size_t n) {
  const float* x[J];
  std::copy_n(x_rows, J, x);
  F4 wv[J];
#pragma GCC unroll 8
  for (size_t j = 0; j < J; ++j) wv[j] = F4{w[j], w[j], w[j], w[j]};
  size_t k = 0;
  for (; k + 4 <= n; k += 4) {
    F4 sum = load4(y + k);
#pragma GCC unroll 8
    for (size_t j = 0; j < J; ++j) sum += wv[j] * load4(x[j] + k);
    store4(y + k, sum);
  }
  for (; k < n; ++k) {
    float sum = y[k];
    for (size_t j = 0; j < J; ++j) sum += w[j] * x[j][k];
    y[k] = sum;
  }
}

using WeightedRows = void (*)(const float* const*, const float*, float*, size_t);
constexpr size_t kMaxRows = 8;  // 8 weights + the sum + a load: 10 vector registers
constexpr WeightedRows kWeightedRows[kMaxRows] = {
    add_weighted_rows<1>, add_weighted_rows<2>, add_weighted_rows<3>, add_weighted_rows<4>,
    add_weighted_rows<5>, add_weighted_rows<6>, add_weighted_rows<7>, add_weighted_rows<8>};

}  // namespace

void orthonormalise_vectors(std::span<float> vectors, size_t count, size_t length) {
  for (size_t c = 0; c < count; ++c) {
    float* v = &vectors[c * length];
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t prev = 0; prev < c; ++prev) {
        const float* u = &vectors[prev * length];
        axpy(static_cast<float>(-dot_in_double(u, v, length)), u, v, length);
      }
    }
    const double norm = std::sqrt(dot_in_double(v, v, length));
    scale_in_double(norm > 0 ? 1.0 / norm : 0.0, v, length);
  }
}

void multiply_m_q(LowRankShape shape, std::span<const float> m, std::span<const float> qt,
                  std::span<float> p) {
  const auto [rows, cols, rank] = shape;
  const float* a[kTileRows];
  const float* b[kTileCols];
  for (size_t i = 0; i < rows; i += kTileRows) {
    const size_t tile_rows = std::min(kTileRows, rows - i);
    for (size_t r = 0; r < tile_rows; ++r) a[r] = &m[(i + r) * cols];
    for (size_t c = 0; c < rank; c += kTileCols) {
      const size_t tile_cols = std::min(kTileCols, rank - c);
      for (size_t j = 0; j < tile_cols; ++j) b[j] = &qt[(c + j) * cols];
      kDotTiles[tile_rows - 1][tile_cols - 1](a, b, cols, &p[i * rank + c], rank);
    }
  }
}

void multiply_mt_p(LowRankShape shape, std::span<const float> m, std::span<const float> p,
                   std::span<float> qt) {
  const auto [rows, cols, rank] = shape;
  std::fill(qt.begin(), qt.end(), 0.0f);
  const float* x[kMaxRows];
  float w[kMaxRows];
  for (size_t i = 0; i < rows; i += kMaxRows) {
    const size_t count = std::min(kMaxRows, rows - i);
    for (size_t j = 0; j < count; ++j) x[j] = &m[(i + j) * cols];
    for (size_t c = 0; c < rank; ++c) {
      for (size_t j = 0; j < count; ++j) w[j] = p[(i + j) * rank + c];
      kWeightedRows[count - 1](x, w, &qt[c * cols], cols);
    }
  }
}

void add_p_qt(LowRankShape shape, std::span<const float> p, std::span<const float> qt,
              std::span<float> out) {
  const auto [rows, cols, rank] = shape;
  // A row of out at a time (it stays in cache across Qt's row blocks), Qt's rows in blocks.
  const float* x[kMaxRows];
  for (size_t i = 0; i < rows; ++i) {
    for (size_t c = 0; c < rank; c += kMaxRows) {
      const size_t count = std::min(kMaxRows, rank - c);
      for (size_t j = 0; j < count; ++j) x[j] = &qt[(c + j) * cols];
      kWeightedRows[count - 1](x, &p[i * rank + c], &out[i * cols], cols);
    }
  }
}

}  // namespace gradwire::compress
