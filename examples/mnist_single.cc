// A plain single-process libtorch training program. Its distributed twin,
// mnist_distributed.cc, differs only in the lines marked "gradwire" there.
//
// Usage: mnist_single [EPOCHS] [TRAIN_SAMPLES]
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include <gradwire/fashion_mnist.h>  // reads the gzipped files Debian ships

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(784, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x.flatten(1)))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

struct FashionMnist : torch::data::datasets::Dataset<FashionMnist> {
  explicit FashionMnist(gradwire::Dataset data) : data(std::move(data)) {}
  torch::data::Example<> get(size_t i) override { return {data.images[i], data.labels[i]}; }
  torch::optional<size_t> size() const override { return data.size(); }
  gradwire::Dataset data;
};

int main(int argc, char** argv) {
  const int epochs = argc > 1 ? std::stoi(argv[1]) : 1;
  const size_t limit = argc > 2 ? std::stoul(argv[2]) : 0;
  const std::string dir = gradwire::kFashionMnistDir;
  auto train = FashionMnist(gradwire::load_fashion_mnist(dir, true, limit));
  auto test = gradwire::load_fashion_mnist(dir, false, 2000);
  const size_t train_size = *train.size();

  torch::manual_seed(0);
  auto model = std::make_shared<Net>();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::data::samplers::RandomSampler sampler(train_size);
  auto loader = torch::data::make_data_loader(train.map(torch::data::transforms::Stack<>()),
                                              std::move(sampler), 64);

  for (int epoch = 1; epoch <= epochs; ++epoch) {
    for (auto& batch : *loader) {
      optimizer.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(model->forward(batch.data), batch.target);
      loss.backward();
      optimizer.step();
    }
    torch::NoGradGuard no_grad;
    auto accuracy = model->forward(test.images).argmax(1).eq(test.labels).to(torch::kFloat).mean();
    std::printf("epoch %d test accuracy %.4f\n", epoch, accuracy.item<float>());
  }
}
