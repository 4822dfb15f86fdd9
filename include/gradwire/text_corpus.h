// A text corpus for character-level language models: the built-in `gpt` job's data, public
// (as fashion_mnist.h) so that a program of one's own can train on it.
//
// The default corpus is the King James Bible as Debian's bible-kjv package ships it, turned
// once into plain text by scripts/prepare_corpus.sh (run by scripts/install_deps.sh): one
// verse a line, the verse reference taken off, 4.3 MB of ASCII.
//
// Tokens are bytes (a vocabulary of 256). The split is fixed: the last
// `validation_fraction` of the file, from the first line that starts at or after that
// point, is the validation text (for the Bible, the end of the New Testament); the rest
// is the training text.
#pragma once

#include <string>

#include <ATen/ATen.h>

namespace gradwire {

inline constexpr const char* kBibleCorpusPath = "/var/cache/gradwire/kjv.txt";
inline constexpr int64_t kByteVocabulary = 256;

struct TextCorpus {
  at::Tensor train;       // [N] int64 byte values, the training text
  at::Tensor validation;  // [M] int64, the validation text
};

// Reads `path`. A missing file throws ConfigError naming it and how to make it; a file too
// short to split into two non-empty parts of at least two bytes throws PayloadError.
TextCorpus load_text_corpus(const std::string& path, double validation_fraction = 0.1);

// Sample i of a text cut into windows of `context` + 1 tokens, one after the other: the
// inputs text[i c .. i c + c) and the targets shifted by one.
struct TextWindows {
  at::Tensor text;
  int64_t context = 0;
  int64_t size() const { return text.numel() > 0 ? (text.numel() - 1) / context : 0; }
  // [B, context] inputs and targets for the windows `indices`.
  std::pair<at::Tensor, at::Tensor> batch(const std::vector<int64_t>& indices) const;
};

}  // namespace gradwire
