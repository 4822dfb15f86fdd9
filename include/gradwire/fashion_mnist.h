// Fashion-MNIST from Debian's dataset-fashion-mnist package (gzipped idx files), read
// directly with zlib: the data set of `gradwire train` and of the examples, public so that a
// program of one's own can try gradwire on it without a loader of its own.
#pragma once

#include <string>

#include <ATen/ATen.h>

namespace gradwire {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  at::Tensor images;  // [N, 1, 28, 28] float32, normalized with the training mean and std
  at::Tensor labels;  // [N] int64 in [0, 10)
  size_t size() const { return static_cast<size_t>(labels.size(0)); }
};

// Loads the training split (train=true) or the test split. A missing file throws
// ConfigError naming it and the Debian package that provides it; a malformed one throws
// PayloadError. `limit` > 0 keeps only the first `limit` samples.
Dataset load_fashion_mnist(const std::string& dir, bool train, size_t limit = 0);

}  // namespace gradwire
