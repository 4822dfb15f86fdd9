#include "gradwire/train/gpt.h"

#include <cmath>

#include "gradwire/core/error.h"

namespace gradwire::train {
namespace {

namespace F = torch::nn::functional;

// The output layer whose weight is the token embedding's tensor (registered under its own
// name, so named_parameters() shows the tie).
class TiedHead : public torch::nn::Module {
 public:
  explicit TiedHead(const torch::Tensor& weight) { weight_ = register_parameter("weight", weight); }
  torch::Tensor forward(const torch::Tensor& x) { return F::linear(x, weight_); }

 private:
  torch::Tensor weight_;
};

}  // namespace

struct Gpt::Block : torch::nn::Module {
  Block(const GptConfig& c)
      : heads(c.heads),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})))),
        qkv(register_module("qkv", torch::nn::Linear(c.width, 3 * c.width))),
        proj(register_module("proj", torch::nn::Linear(c.width, c.width))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})))),
        fc1(register_module("fc1", torch::nn::Linear(c.width, 4 * c.width))),
        fc2(register_module("fc2", torch::nn::Linear(4 * c.width, c.width))) {}

  torch::Tensor forward(torch::Tensor x, const torch::Tensor& mask) {
    const int64_t b = x.size(0), t = x.size(1), d = x.size(2), hd = d / heads;
    auto parts = qkv(ln1(x)).split(d, 2);
    const auto heads_of = [&](const torch::Tensor& y) {
      return y.view({b, t, heads, hd}).transpose(1, 2);  // [B, H, T, hd]
    };
    auto q = heads_of(parts[0]), k = heads_of(parts[1]), v = heads_of(parts[2]);
    auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
    scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
    auto attended = torch::matmul(torch::softmax(scores, -1), v);
    x = x + proj(attended.transpose(1, 2).contiguous().view({b, t, d}));
    return x + fc2(torch::gelu(fc1(ln2(x))));
  }

  int64_t heads;
  torch::nn::LayerNorm ln1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm ln2;
  torch::nn::Linear fc1, fc2;
};

Gpt::Gpt(const GptConfig& config) : config_(config) {
  if (config.width % config.heads != 0) {
    throw ConfigError("gpt: width " + std::to_string(config.width) + " is not a multiple of " +
                      std::to_string(config.heads) + " heads");
  }
  wte_ = register_module("wte", torch::nn::Embedding(config.vocabulary, config.width));
  wpe_ = register_parameter("wpe", torch::zeros({config.context, config.width}));
  auto blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.layers; ++i) {
    blocks_.push_back(std::make_shared<Block>(config));
    blocks->push_back(blocks_.back());
  }
  ln_f_ =
      register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.width})));
  lm_head_ = register_module("lm_head", std::make_shared<TiedHead>(wte_->weight));
  causal_mask_ = torch::ones({config.context, config.context}, torch::kBool).triu(1);

  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.layers));
  wte_->weight.normal_(0, 0.02);
  wpe_.normal_(0, 0.02);
  for (auto& block : blocks_) {
    for (auto* linear : {&block->qkv, &block->proj, &block->fc1, &block->fc2}) {
      const bool residual = linear == &block->proj || linear == &block->fc2;
      (*linear)->weight.normal_(0, residual ? residual_std : 0.02);
      (*linear)->bias.zero_();
    }
  }
}

torch::Tensor Gpt::forward(const torch::Tensor& tokens) {
  const int64_t t = tokens.size(1);
  if (t > config_.context) {
    throw ConfigError("gpt: a sequence of " + std::to_string(t) + " tokens is longer than the " +
                      std::to_string(config_.context) + "-token context");
  }
  auto x = wte_(tokens) + wpe_.slice(0, 0, t);
  const auto mask = causal_mask_.slice(0, 0, t).slice(1, 0, t);
  for (auto& block : blocks_) x = block->forward(x, mask);
  return std::static_pointer_cast<TiedHead>(lm_head_)->forward(ln_f_(x));
}

}  // namespace gradwire::train
