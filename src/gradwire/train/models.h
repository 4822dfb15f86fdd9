// The built-in job's image classifiers (gpt.h has its language model).
//   cnn: conv(1->32, 5x5) relu maxpool2, conv(32->64, 5x5) relu maxpool2,
//        fc(1024->128) relu, fc(128->10)                       (~0.18 M parameters)
//   cnn-wide: the same with fc(1024->2048) relu, fc(2048->10)  (~2.17 M parameters, 97% of
//        them in fc1: where fully-connected layers dominate the gradient)
//   mlp: fc(784->256) relu, fc(256->128) relu, fc(128->10)      (~0.24 M parameters)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace gradwire::train {

class Classifier : public torch::nn::Module {
 public:
  // x: [N, 1, 28, 28] -> logits [N, 10]
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

// cnn, cnn-wide or mlp (workload.h lists every model); ConfigError for another name.
std::shared_ptr<Classifier> make_classifier(const std::string& name);

}  // namespace gradwire::train
