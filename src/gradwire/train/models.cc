#include "gradwire/train/models.h"

#include "gradwire/core/error.h"

namespace gradwire::train {
namespace {

class Cnn : public Classifier {
 public:
  explicit Cnn(int64_t hidden)
      : conv1_(register_module("conv1", torch::nn::Conv2d(1, 32, 5))),
        conv2_(register_module("conv2", torch::nn::Conv2d(32, 64, 5))),
        fc1_(register_module("fc1", torch::nn::Linear(1024, hidden))),
        fc2_(register_module("fc2", torch::nn::Linear(hidden, 10))) {}

  torch::Tensor forward(torch::Tensor x) override {
    x = torch::max_pool2d(torch::relu(conv1_(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2_(x)), 2);
    x = torch::relu(fc1_(x.flatten(1)));
    return fc2_(x);
  }

 private:
  torch::nn::Conv2d conv1_, conv2_;
  torch::nn::Linear fc1_, fc2_;
};

class Mlp : public Classifier {
 public:
  Mlp()
      : fc1_(register_module("fc1", torch::nn::Linear(784, 256))),
        fc2_(register_module("fc2", torch::nn::Linear(256, 128))),
        fc3_(register_module("fc3", torch::nn::Linear(128, 10))) {}

  torch::Tensor forward(torch::Tensor x) override {
    x = torch::relu(fc1_(x.flatten(1)));
    x = torch::relu(fc2_(x));
    return fc3_(x);
  }

 private:
  torch::nn::Linear fc1_, fc2_, fc3_;
};

}  // namespace

std::shared_ptr<Classifier> make_classifier(const std::string& name) {
  if (name == "cnn") return std::make_shared<Cnn>(128);
  if (name == "cnn-wide") return std::make_shared<Cnn>(2048);
  if (name == "mlp") return std::make_shared<Mlp>();
  throw ConfigError("unknown classifier '" + name + "'; available: cnn, cnn-wide, mlp");
}

}  // namespace gradwire::train
