// The distributed twin of mnist_single.cc: the lines marked "gradwire" are the whole change.
//
// Usage: gradwire run -n 4 -- mnist_distributed [EPOCHS] [TRAIN_SAMPLES]
//        gradwire run -n 4 --servers 1 -- mnist_distributed [EPOCHS] [TRAIN_SAMPLES] ps
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include <gradwire/gradwire.h>             // gradwire
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
  const std::string strategy = argc > 3 ? argv[3] : "allreduce";  // or "ps" (parameter servers)
  const std::string dir = gradwire::kFashionMnistDir;
  auto train = FashionMnist(gradwire::load_fashion_mnist(dir, true, limit));
  auto test = gradwire::load_fashion_mnist(dir, false, 2000);
  const size_t train_size = *train.size();

  torch::manual_seed(0);
  auto model = std::make_shared<Net>();
  auto dist = gradwire::init();              // gradwire
  if (dist->is_server()) return 0;           // gradwire: parameter servers end here
  gradwire::DistributedOptimizer optimizer(  // gradwire
      dist, torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)),
      *model, {.strategy = strategy});
  gradwire::DistributedSampler sampler(train_size, dist->rank(), dist->world_size());  // gradwire
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
    if (dist->is_root())
      std::printf("epoch %d test accuracy %.4f\n", epoch, accuracy.item<float>());  // gradwire
  }
}
