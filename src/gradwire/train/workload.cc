#include "gradwire/train/workload.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "gradwire/core/atomic_file.h"
#include "gradwire/core/error.h"
#include "gradwire/core/spec.h"
#include "gradwire/core/timeline.h"
#include "gradwire/fashion_mnist.h"
#include "gradwire/text_corpus.h"
#include "gradwire/train/gpt.h"
#include "gradwire/train/job_output.h"
#include "gradwire/train/models.h"

namespace gradwire::train {
namespace {

namespace F = torch::nn::functional;

// libtorch's intra-op threads set for a scope, restored after.
class ThreadsFor {
 public:
  explicit ThreadsFor(int threads) : saved_(at::get_num_threads()) {
    if (threads > 0) at::set_num_threads(threads);
  }
  ~ThreadsFor() { at::set_num_threads(saved_); }

 private:
  int saved_;
};

torch::Tensor index_tensor(std::span<const size_t> indices) {
  return torch::from_blob(const_cast<size_t*>(indices.data()),
                          {static_cast<int64_t>(indices.size())}, torch::kLong)
      .clone();
}

class ImageWorkload : public Workload {
 public:
  ImageWorkload(const TrainOptions& o, bool with_evaluation_data) {
    const std::string dir = o.data_dir.empty() ? kFashionMnistDir : o.data_dir;
    train_ = load_fashion_mnist(dir, /*train=*/true, o.train_limit);
    if (with_evaluation_data) test_ = load_fashion_mnist(dir, /*train=*/false, o.test_limit);
    model_ = make_classifier(o.model);
  }
  torch::nn::Module& model() override { return *model_; }
  size_t train_size() const override { return train_.size(); }
  Metric metric() const override { return {"test_accuracy", true}; }

  torch::Tensor loss(std::span<const size_t> indices) override {
    const auto index = index_tensor(indices);
    return F::cross_entropy(model_->forward(train_.images.index_select(0, index)),
                            train_.labels.index_select(0, index));
  }

  // Top-1 accuracy in batches of 1000.
  double evaluate(int threads) override {
    ThreadsFor scope(threads);
    torch::NoGradGuard no_grad;
    model_->eval();
    int64_t correct = 0;
    const int64_t n = static_cast<int64_t>(test_.size());
    for (int64_t start = 0; start < n; start += 1000) {
      const int64_t end = std::min(n, start + 1000);
      auto logits = model_->forward(test_.images.slice(0, start, end));
      correct += logits.argmax(1).eq(test_.labels.slice(0, start, end)).sum().item<int64_t>();
    }
    model_->train();
    return n ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
  }

 private:
  Dataset train_, test_;
  std::shared_ptr<Classifier> model_;
};

class TextWorkload : public Workload {
 public:
  // Evaluation windows when --test-limit is not given: 256 x 128 bytes, spread evenly over
  // the validation text (all of it, 3.2k windows of the Bible's, takes ten times longer).
  static constexpr size_t kDefaultEvaluationWindows = 256;

  TextWorkload(const TrainOptions& o, bool with_evaluation_data) {
    GptConfig config;
    const auto corpus = load_text_corpus(o.corpus.empty() ? kBibleCorpusPath : o.corpus);
    train_ = {corpus.train, config.context};
    if (o.train_limit > 0 && o.train_limit < static_cast<size_t>(train_.size())) {
      train_.text =
          train_.text.slice(0, 0, static_cast<int64_t>(o.train_limit) * config.context + 1);
    }
    if (train_.size() < 1) throw PayloadError("the text corpus has no training window");
    if (with_evaluation_data) {
      const TextWindows all{corpus.validation, config.context};
      const size_t limit = o.test_limit > 0 ? o.test_limit : kDefaultEvaluationWindows;
      const int64_t n = std::min<int64_t>(all.size(), static_cast<int64_t>(limit));
      std::vector<int64_t> picked;
      for (int64_t i = 0; i < n; ++i) picked.push_back(i * all.size() / n);
      std::tie(eval_inputs_, eval_targets_) = all.batch(picked);
    }
    model_ = std::make_shared<Gpt>(config);
  }
  torch::nn::Module& model() override { return *model_; }
  size_t train_size() const override { return static_cast<size_t>(train_.size()); }
  Metric metric() const override { return {"val_loss", false}; }
  std::vector<std::string> no_decay() const override { return {"wte.weight", "wpe"}; }

  torch::Tensor loss(std::span<const size_t> indices) override {
    const auto [inputs, targets] =
        train_.batch(std::vector<int64_t>(indices.begin(), indices.end()));
    return cross_entropy(model_->forward(inputs), targets);
  }

  // Mean loss per predicted byte over the evaluation windows, in batches of 32.
  double evaluate(int threads) override {
    ThreadsFor scope(threads);
    torch::NoGradGuard no_grad;
    model_->eval();
    double sum = 0;
    const int64_t n = eval_inputs_.defined() ? eval_inputs_.size(0) : 0;
    for (int64_t start = 0; start < n; start += 32) {
      const int64_t end = std::min(n, start + 32);
      const auto l = cross_entropy(model_->forward(eval_inputs_.slice(0, start, end)),
                                   eval_targets_.slice(0, start, end));
      sum += l.item<double>() * static_cast<double>(end - start);
    }
    model_->train();
    return n ? sum / static_cast<double>(n) : 0.0;
  }

 private:
  static torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
    return F::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
  }

  TextWindows train_;
  torch::Tensor eval_inputs_, eval_targets_;
  std::shared_ptr<Gpt> model_;
};

}  // namespace

std::string Metric::show(double value) const {
  char text[64];
  if (higher_is_better) {
    std::snprintf(text, sizeof text, "%s %.2f%%", name.c_str(), 100 * value);
  } else {
    std::snprintf(text, sizeof text, "%s %.4f", name.c_str(), value);
  }
  return text;
}

std::string write_initial_weights(const TrainOptions& options, const std::string& path) {
  torch::manual_seed(options.seed);
  const auto workload = make_workload(options, /*with_evaluation_data=*/false);
  nlohmann::json header = nlohmann::json::array();
  std::string data;
  for (const auto& [name, p] : unique_named_parameters(workload->model())) {
    header.push_back({{"name", name}, {"shape", p.sizes().vec()}});
    const auto t = p.detach().contiguous();
    data.append(static_cast<const char*>(t.data_ptr()), t.numel() * sizeof(float));
  }
  const std::string text = "gradwire-weights 1\n" + header.dump() + "\n" + data;
  write_file_atomically(
      path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  return parameter_crc32(workload->model());
}

std::vector<std::string> model_names() { return {"cnn", "cnn-wide", "mlp", "gpt"}; }

std::unique_ptr<Workload> make_workload(const TrainOptions& options, bool with_evaluation_data) {
  if (options.model == "gpt") return std::make_unique<TextWorkload>(options, with_evaluation_data);
  const auto names = model_names();
  if (std::find(names.begin(), names.end(), options.model) == names.end()) {
    throw ConfigError("unknown model '" + options.model + "'; available: " + join(names));
  }
  return std::make_unique<ImageWorkload>(options, with_evaluation_data);
}

}  // namespace gradwire::train
