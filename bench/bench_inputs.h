// The inputs every codec benchmark reads, so all of them time the same data:
//
//   1M, 25M   Laplace(0, b = 1e-3) draws (a gradient's distribution; 25M floats is
//             ResNet-50's gradient), shaped 1000 x N/1000 for the shape-aware codecs
//   cnn_fc1   fc1.weight's gradient (128 x 1024) of the Fashion-MNIST CNN that
//             `gradwire train` runs, captured after 200 SGD steps (batch 32, lr 0.05,
//             momentum 0.9, seed 0) from Debian's dataset-fashion-mnist
//
// Each input is a window of 2n floats: encode benchmarks read a random n-long span of it
// per iteration, so error-feedback residuals see a fresh gradient every step (the CNN's
// window is the gradients of two different batches). Inputs are made on first use; the
// CNN capture takes a few seconds and throws gradwire::ConfigError without the dataset.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "gradwire/compress/codec.h"

namespace gradwire::bench {

struct BenchInput {
  std::string label;  // "1M", "25M", "cnn_fc1": the <size> part of benchmark names
  size_t n;           // elements of one gradient
  compress::TensorInfo tensor;
};

// Every input, in registration order. Cheap: nothing is generated until window().
const std::vector<BenchInput>& bench_inputs();

// The 2n floats of `input`'s window (made on first use, then cached).
std::span<const float> window(const BenchInput& input);

// The window, or nullopt after marking the benchmark skipped with the reason (no dataset
// for the CNN capture): benchmarks start with
//   const auto data = window_or_skip(state, input); if (!data) return;
std::optional<std::span<const float>> window_or_skip(benchmark::State& state,
                                                     const BenchInput& input);

}  // namespace gradwire::bench
