#include "gradwire/fashion_mnist.h"

#include <zlib.h>

#include <filesystem>
#include <vector>

#include "gradwire/core/error.h"

namespace gradwire {
namespace {

// Fashion-MNIST's training-set pixel statistics (of x / 255).
constexpr float kMean = 0.2860f;
constexpr float kStd = 0.3530f;

std::vector<uint8_t> read_gzip(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    throw ConfigError("Fashion-MNIST file " + path +
                      " not found: install Debian's dataset-fashion-mnist package "
                      "(apt-get install dataset-fashion-mnist) or pass --data-dir DIR");
  }
  gzFile file = gzopen(path.c_str(), "rb");
  if (!file) throw SystemError(errno_message("cannot open " + path, errno));
  std::vector<uint8_t> data;
  uint8_t chunk[1 << 16];
  int n;
  while ((n = gzread(file, chunk, sizeof(chunk))) > 0) data.insert(data.end(), chunk, chunk + n);
  int err = 0;
  const char* message = gzerror(file, &err);
  const bool failed = n < 0 || (err != Z_OK && err != Z_STREAM_END);
  const std::string why = failed ? message : "";
  gzclose(file);
  if (failed) throw PayloadError(path + " is not a valid gzip file: " + why);
  return data;
}

uint32_t big_endian_u32(const std::vector<uint8_t>& data, size_t offset, const std::string& path) {
  if (offset + 4 > data.size()) throw PayloadError(path + ": truncated idx header");
  return (uint32_t{data[offset]} << 24) | (uint32_t{data[offset + 1]} << 16) |
         (uint32_t{data[offset + 2]} << 8) | uint32_t{data[offset + 3]};
}

}  // namespace

Dataset load_fashion_mnist(const std::string& dir, bool train, size_t limit) {
  const std::string prefix = dir + "/" + (train ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  const auto images = read_gzip(images_path);
  const auto labels = read_gzip(labels_path);

  if (big_endian_u32(images, 0, images_path) != 0x803) {
    throw PayloadError(images_path + ": not an idx3 image file (bad magic number)");
  }
  if (big_endian_u32(labels, 0, labels_path) != 0x801) {
    throw PayloadError(labels_path + ": not an idx1 label file (bad magic number)");
  }
  const size_t n = big_endian_u32(images, 4, images_path);
  const size_t rows = big_endian_u32(images, 8, images_path);
  const size_t cols = big_endian_u32(images, 12, images_path);
  const size_t n_labels = big_endian_u32(labels, 4, labels_path);
  if (rows != 28 || cols != 28) throw PayloadError(images_path + ": images are not 28x28");
  if (n != n_labels) {
    throw PayloadError(images_path + " has " + std::to_string(n) + " images but " + labels_path +
                       " has " + std::to_string(n_labels) + " labels");
  }
  if (images.size() != 16 + n * rows * cols || labels.size() != 8 + n) {
    throw PayloadError(prefix + "-*.gz: file sizes do not match their headers (truncated?)");
  }
  const size_t keep = limit > 0 ? std::min(limit, n) : n;

  Dataset dataset;
  dataset.images = at::from_blob(const_cast<uint8_t*>(images.data()) + 16,
                                 {static_cast<int64_t>(keep), 1, 28, 28}, at::kByte)
                       .to(at::kFloat)
                       .div_(255.0f)
                       .sub_(kMean)
                       .div_(kStd);
  dataset.labels = at::from_blob(const_cast<uint8_t*>(labels.data()) + 8,
                                 {static_cast<int64_t>(keep)}, at::kByte)
                       .to(at::kLong);
  if (dataset.labels.numel() > 0 && dataset.labels.max().item<int64_t>() > 9) {
    throw PayloadError(labels_path + ": label outside 0..9");
  }
  return dataset;
}

}  // namespace gradwire
