// The built-in gpt model against a reference written out by hand (loops over heads and
// positions, explicit layer norm, softmax and GELU), its gradient against central finite
// differences in double precision, the tie of the embedding to the output layer, and the
// text corpus loader.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "gradwire/core/error.h"
#include "gradwire/text_corpus.h"
#include "gradwire/train/gpt.h"
#include "gradwire/train/recipe.h"

namespace gradwire::train {
namespace {

using torch::indexing::Slice;

GptConfig tiny() { return {.vocabulary = 11, .context = 5, .width = 8, .layers = 2, .heads = 2}; }

std::map<std::string, torch::Tensor> parameters_by_name(const Gpt& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model.named_parameters()) out[item.key()] = item.value();
  return out;
}

// ln(x) = (x - mean) / sqrt(var + 1e-5) * w + b, over the last dimension, biased variance.
torch::Tensor reference_layer_norm(const torch::Tensor& x, const torch::Tensor& w,
                                   const torch::Tensor& b) {
  auto mean = x.mean(-1, true);
  auto var = (x - mean).pow(2).mean(-1, true);
  return (x - mean) / (var + 1e-5).sqrt() * w + b;
}

torch::Tensor reference_gelu(const torch::Tensor& x) {
  return 0.5 * x * (1 + torch::erf(x / std::sqrt(2.0)));
}

// The model's definition (gpt.h) for one sequence, head by head and position by position.
torch::Tensor reference_logits(const Gpt& model, const std::vector<int64_t>& tokens) {
  const auto c = model.config();
  auto p = parameters_by_name(model);
  const int64_t t = static_cast<int64_t>(tokens.size()), d = c.width, hd = d / c.heads;
  auto x = torch::zeros({t, d}, torch::kDouble);
  for (int64_t i = 0; i < t; ++i) {
    x[i] = p["wte.weight"][tokens[i]].to(torch::kDouble) + p["wpe"][i].to(torch::kDouble);
  }
  const auto w = [&](const std::string& name) { return p.at(name).to(torch::kDouble); };
  for (int64_t l = 0; l < c.layers; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    auto h = reference_layer_norm(x, w(b + "ln1.weight"), w(b + "ln1.bias"));
    auto qkv = torch::matmul(h, w(b + "qkv.weight").t()) + w(b + "qkv.bias");
    auto attended = torch::zeros({t, d}, torch::kDouble);
    for (int64_t head = 0; head < c.heads; ++head) {
      for (int64_t i = 0; i < t; ++i) {
        auto q = qkv.index({i, Slice(head * hd, (head + 1) * hd)});
        std::vector<double> scores;
        double top = -1e300;
        for (int64_t j = 0; j <= i; ++j) {  // causal: positions up to i
          auto k = qkv.index({j, Slice(d + head * hd, d + (head + 1) * hd)});
          scores.push_back((q * k).sum().item<double>() / std::sqrt(double(hd)));
          top = std::max(top, scores.back());
        }
        double total = 0;
        for (double& s : scores) total += (s = std::exp(s - top));
        for (int64_t j = 0; j <= i; ++j) {
          auto v = qkv.index({j, Slice(2 * d + head * hd, 2 * d + (head + 1) * hd)});
          attended.index({i, Slice(head * hd, (head + 1) * hd)}) += scores[j] / total * v;
        }
      }
    }
    x = x + torch::matmul(attended, w(b + "proj.weight").t()) + w(b + "proj.bias");
    h = reference_layer_norm(x, w(b + "ln2.weight"), w(b + "ln2.bias"));
    h = reference_gelu(torch::matmul(h, w(b + "fc1.weight").t()) + w(b + "fc1.bias"));
    x = x + torch::matmul(h, w(b + "fc2.weight").t()) + w(b + "fc2.bias");
  }
  x = reference_layer_norm(x, w("ln_f.weight"), w("ln_f.bias"));
  return torch::matmul(x, w("wte.weight").t());  // the tied output layer
}

TEST(GptTest, ForwardMatchesTheDefinitionWrittenOut) {
  torch::manual_seed(1);
  Gpt model(tiny());
  {  // norms and biases away from 1 and 0, so the reference checks their use
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : unique_named_parameters(model)) p.add_(0.1 * torch::randn_like(p));
  }
  const std::vector<std::vector<int64_t>> sequences = {{3, 1, 4, 1, 5}, {9, 2, 6, 5, 3}};
  auto tokens = torch::tensor({3, 1, 4, 1, 5, 9, 2, 6, 5, 3}, torch::kLong).view({2, 5});
  const auto logits = model.forward(tokens);
  ASSERT_EQ(logits.sizes(), (std::vector<int64_t>{2, 5, 11}));
  for (int b = 0; b < 2; ++b) {
    const auto want = reference_logits(model, sequences[b]);
    EXPECT_TRUE(torch::allclose(logits[b].to(torch::kDouble), want, 1e-4, 1e-5))
        << "sequence " << b << ": max diff " << (logits[b].to(torch::kDouble) - want).abs().max();
  }
  // Causality: a later token changes no earlier position's logits.
  auto changed = tokens.clone();
  changed[0][4] = 0;
  const auto again = model.forward(changed);
  EXPECT_TRUE(torch::equal(again.index({0, Slice(0, 4)}), logits.index({0, Slice(0, 4)})));
  EXPECT_FALSE(torch::equal(again[0][4], logits[0][4]));
  // Shorter sequences use the first positions.
  EXPECT_TRUE(torch::allclose(model.forward(tokens.index({Slice(), Slice(0, 3)})),
                              logits.index({Slice(), Slice(0, 3)}), 1e-5, 1e-6));
  EXPECT_THROW(model.forward(torch::zeros({1, 6}, torch::kLong)), ConfigError);
}

TEST(GptTest, GradientMatchesFiniteDifferencesTiedWeightIncluded) {
  torch::manual_seed(2);
  Gpt model(tiny());
  model.to(torch::kDouble);
  auto tokens = torch::tensor({3, 1, 4, 1, 5, 9, 2, 6, 5, 3}, torch::kLong).view({2, 5});
  auto targets = torch::tensor({1, 4, 1, 5, 9, 2, 6, 5, 3, 5}, torch::kLong).view({2, 5});
  const auto loss_of = [&] {
    auto logits = model.forward(tokens);
    return torch::nn::functional::cross_entropy(logits.view({-1, 11}), targets.view({-1}));
  };
  model.zero_grad();
  loss_of().backward();
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : unique_named_parameters(model)) {
    auto flat = p.view({-1});
    const auto grad = p.grad().view({-1});
    for (int64_t i : {int64_t{0}, flat.numel() / 2, flat.numel() - 1}) {
      const double saved = flat[i].item<double>(), h = 1e-6;
      flat[i] = saved + h;
      const double up = loss_of().item<double>();
      flat[i] = saved - h;
      const double down = loss_of().item<double>();
      flat[i] = saved;
      EXPECT_NEAR(grad[i].item<double>(), (up - down) / (2 * h), 1e-6) << name << "[" << i << "]";
    }
  }
}

TEST(GptTest, EmbeddingIsTheOutputLayerOneTensorListedOnce) {
  Gpt model(tiny());
  auto p = parameters_by_name(model);
  ASSERT_TRUE(p.count("lm_head.weight"));
  EXPECT_TRUE(p["lm_head.weight"].is_same(p["wte.weight"]));
  const auto unique = unique_named_parameters(model);
  EXPECT_EQ(unique.size() + 1, model.named_parameters().size());
  // The model's own parameter first, then its modules' (as PyTorch lists them).
  EXPECT_EQ(unique[0].first, "wpe");
  EXPECT_EQ(unique[1].first, "wte.weight");
  EXPECT_EQ(unique.back().first, "ln_f.bias");
  // AdamW: embeddings, norms and biases undecayed; the weight matrices decayed.
  Recipe recipe = model_recipe("gpt");
  auto optimizer = make_optimizer(recipe, model, {"wte.weight", "wpe"});
  ASSERT_EQ(optimizer->param_groups().size(), 2u);
  const auto& decayed = optimizer->param_groups()[0];
  EXPECT_EQ(decayed.params().size(), 4u * 2);  // qkv, proj, fc1, fc2 per layer
  EXPECT_EQ(static_cast<const torch::optim::AdamWOptions&>(decayed.options()).weight_decay(), 0.1);
  EXPECT_EQ(static_cast<const torch::optim::AdamWOptions&>(optimizer->param_groups()[1].options())
                .weight_decay(),
            0.0);
  EXPECT_EQ(decayed.params().size() + optimizer->param_groups()[1].params().size(), unique.size());
}

TEST(RecipeTest, WarmUpThenCosineToATenth) {
  Recipe r = model_recipe("gpt");
  r.lr = 1.0;
  r.warmup = 0.1;
  EXPECT_DOUBLE_EQ(r.lr_at(0, 100), 0.1);
  EXPECT_DOUBLE_EQ(r.lr_at(9, 100), 1.0);
  EXPECT_DOUBLE_EQ(r.lr_at(10, 100), 1.0);
  EXPECT_NEAR(r.lr_at(10 + 89 / 2.0, 100), 0.55, 0.01);
  EXPECT_DOUBLE_EQ(r.lr_at(99, 100), 0.1);
  EXPECT_DOUBLE_EQ(model_recipe("cnn").lr_at(99, 100), 0.05);
}

class TextCorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("gradwire_corpus_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::filesystem::path dir_;
};

std::string text_of(const at::Tensor& tokens) {
  std::string out;
  for (int64_t i = 0; i < tokens.numel(); ++i)
    out.push_back(static_cast<char>(tokens[i].item<int64_t>()));
  return out;
}

TEST_F(TextCorpusTest, SplitsAtTheFirstLineAfterTheFraction) {
  // 10 lines of 10 bytes: 10% validation is the last line.
  std::string text;
  for (char c = 'a'; c < 'a' + 10; ++c) text += std::string(9, c) + "\n";
  const auto corpus = load_text_corpus(write("ten.txt", text), 0.1);
  EXPECT_EQ(text_of(corpus.train), text.substr(0, 90));
  EXPECT_EQ(text_of(corpus.validation), text.substr(90));
  // 15% falls inside line 9: validation starts at the next line.
  EXPECT_EQ(text_of(load_text_corpus(write("ten.txt", text), 0.15).validation), text.substr(90));
}

TEST_F(TextCorpusTest, WindowsAreConsecutiveAndShiftedByOne) {
  const TextWindows windows{torch::arange(0, 23, torch::kLong), 5};
  EXPECT_EQ(windows.size(), 4);  // (23 - 1) / 5
  const auto [x, y] = windows.batch({3, 0});
  EXPECT_TRUE(torch::equal(x, torch::tensor({15, 16, 17, 18, 19, 0, 1, 2, 3, 4}).view({2, 5})));
  EXPECT_TRUE(torch::equal(y, torch::tensor({16, 17, 18, 19, 20, 1, 2, 3, 4, 5}).view({2, 5})));
}

TEST_F(TextCorpusTest, MissingOrTooShortFileIsAClearError) {
  const std::string missing = (dir_ / "absent.txt").string();
  try {
    load_text_corpus(missing);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("install_deps.sh"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_text_corpus(write("one_line.txt", "just one line\n")), PayloadError);
}

}  // namespace
}  // namespace gradwire::train
