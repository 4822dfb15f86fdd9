// What the built-in job trains: a model with its data, its loss and its metric.
//
//   image classifiers (cnn, cnn-wide, mlp) on Fashion-MNIST: a sample is an image, the
//     loss cross-entropy, the metric test accuracy ("test_accuracy", higher is better);
//   gpt on a text corpus (text_corpus.h): a sample is a window of context + 1 bytes of
//     the training text, the loss the mean cross-entropy per predicted byte, the metric the
//     validation loss in nats per character ("val_loss", lower is better).
//
// Every rank holds the training data; rank 0 alone the evaluation data.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "gradwire/train/recipe.h"
#include "gradwire/train/trainer.h"

namespace gradwire::train {

// The quality a job is measured by, as the metrics file names it.
struct Metric {
  std::string name;  // "test_accuracy" or "val_loss"
  bool higher_is_better = true;
  bool better(double a, double b) const { return higher_is_better ? a > b : a < b; }
  bool reached(double value, double target) const {
    return higher_is_better ? value >= target : value <= target;
  }
  // "test_accuracy 91.23%", "val_loss 1.4567": for the progress lines.
  std::string show(double value) const;
};

class Workload {
 public:
  virtual ~Workload() = default;
  virtual torch::nn::Module& model() = 0;
  // Training samples on every rank.
  virtual size_t train_size() const = 0;
  // The mean loss over the training samples `indices` (with autograd: the caller runs
  // backward).
  virtual torch::Tensor loss(std::span<const size_t> indices) = 0;
  // The metric on the evaluation data (rank 0), in eval mode, without gradients. threads >
  // 0: libtorch's intra-op threads meanwhile (restored after).
  virtual double evaluate(int threads = 0) = 0;
  virtual Metric metric() const = 0;
  // Names of weights AdamW does not decay besides the vectors (embeddings).
  virtual std::vector<std::string> no_decay() const { return {}; }
};

// The workload of options.model, its model initialized from libtorch's generator as it
// stands (seed it first), its evaluation data loaded only when `with_evaluation_data`.
// ConfigError for an unknown model or missing data (naming the file).
std::unique_ptr<Workload> make_workload(const TrainOptions& options, bool with_evaluation_data);

std::vector<std::string> model_names();

// Writes the initial weights of options.model for options.seed (what start_job builds) to
// `path`, for another program to start from the same weights (bench/peers/ddp_peer.py
// --initial-weights). The format: the line "gradwire-weights 1", a line of JSON
// [{"name": ..., "shape": [...]}, ...] (unique_named_parameters' order), then each tensor's
// float32 values, little-endian, in that order. Returns parameter_crc32 of the weights.
std::string write_initial_weights(const TrainOptions& options, const std::string& path);

}  // namespace gradwire::train
