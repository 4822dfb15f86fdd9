// The built-in `gpt` model: a decoder-only transformer over bytes (GPT-2's layout, small).
//
//   x = wte[tokens] + wpe[0..T)                          token and learned positions
//   per block:  x = x + proj(attention(ln1(x)))           pre-norm, causal, `heads` heads
//               x = x + fc2(gelu(fc1(ln2(x))))            MLP of width 4 d
//   logits = lm_head(ln_f(x)),  lm_head.weight = wte.weight  (tied: one tensor)
//
// attention(h): q, k, v = split(qkv(h)) into heads of d / heads; per head
// softmax(q k^T / sqrt(d / heads) + causal mask) v, heads concatenated.
// Parameters in named_parameters() order, the model's own first, then its modules' (the
// tied weight is listed under both names; PyTorch lists it once, as "wte.weight"):
//   wpe [T, d], wte.weight [V, d], blocks.i.{ln1.weight, ln1.bias, qkv.weight, qkv.bias,
//   proj.weight, proj.bias, ln2.weight, ln2.bias, fc1.weight, fc1.bias, fc2.weight,
//   fc2.bias}, ln_f.weight, ln_f.bias, lm_head.weight (= wte.weight).
// bench/peers/ddp_peer.py builds the same model in PyTorch.
//
// Initialization (GPT-2's): every weight matrix and embedding N(0, 0.02), the residual
// projections (proj, fc2) N(0, 0.02 / sqrt(2 layers)), biases 0, norms 1 and 0, drawn
// from libtorch's generator (wte, wpe, then each block's qkv, proj, fc1, fc2). The DDP
// peer reads them from the file write_initial_weights() makes (workload.h), not the
// generator.
#pragma once

#include <torch/torch.h>

namespace gradwire::train {

struct GptConfig {
  int64_t vocabulary = 256;
  int64_t context = 128;
  int64_t width = 128;
  int64_t layers = 4;
  int64_t heads = 4;
};

class Gpt : public torch::nn::Module {
 public:
  explicit Gpt(const GptConfig& config);
  // tokens [B, T] int64 (T <= context) -> logits [B, T, vocabulary]
  torch::Tensor forward(const torch::Tensor& tokens);
  const GptConfig& config() const { return config_; }

 private:
  struct Block;
  GptConfig config_;
  torch::nn::Embedding wte_{nullptr};
  torch::Tensor wpe_;
  std::vector<std::shared_ptr<Block>> blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};
  std::shared_ptr<torch::nn::Module> lm_head_;
  torch::Tensor causal_mask_;  // [context, context], true above the diagonal
};

}  // namespace gradwire::train
