#include "gradwire/text_corpus.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "gradwire/core/error.h"

namespace gradwire {
namespace {

at::Tensor tokens(const std::string& text, size_t begin, size_t end) {
  auto out = at::empty({static_cast<int64_t>(end - begin)}, at::kLong);
  auto* p = out.data_ptr<int64_t>();
  for (size_t i = begin; i < end; ++i) p[i - begin] = static_cast<unsigned char>(text[i]);
  return out;
}

}  // namespace

TextCorpus load_text_corpus(const std::string& path, double validation_fraction) {
  if (!(validation_fraction > 0 && validation_fraction < 1)) {
    throw ConfigError("the validation fraction must be in (0, 1)");
  }
  if (!std::filesystem::exists(path)) {
    throw ConfigError("text corpus " + path +
                      " not found: run scripts/install_deps.sh (it installs Debian's bible-kjv "
                      "and writes the corpus with scripts/prepare_corpus.sh), or pass --corpus "
                      "FILE (any text file)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw SystemError(errno_message("cannot open " + path, errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw SystemError(errno_message("reading " + path + " failed", errno));

  // The validation text starts at the first line beginning at or after the split point.
  size_t split = static_cast<size_t>(static_cast<double>(text.size()) * (1 - validation_fraction));
  while (split < text.size() && split > 0 && text[split - 1] != '\n') ++split;
  if (split < 2 || text.size() - split < 2) {
    throw PayloadError("text corpus " + path + " (" + std::to_string(text.size()) +
                       " bytes) is too short to split into training and validation text at a "
                       "line boundary");
  }
  return {tokens(text, 0, split), tokens(text, split, text.size())};
}

std::pair<at::Tensor, at::Tensor> TextWindows::batch(const std::vector<int64_t>& indices) const {
  const int64_t n = static_cast<int64_t>(indices.size());
  auto inputs = at::empty({n, context}, at::kLong);
  auto targets = at::empty({n, context}, at::kLong);
  const auto* t = text.data_ptr<int64_t>();
  auto* x = inputs.data_ptr<int64_t>();
  auto* y = targets.data_ptr<int64_t>();
  for (int64_t b = 0; b < n; ++b) {
    const int64_t start = indices[b] * context;
    std::copy(t + start, t + start + context, x + b * context);
    std::copy(t + start + 1, t + start + context + 1, y + b * context);
  }
  return {inputs, targets};
}

}  // namespace gradwire
