// Codec registry: spec string -> codec instance, one instance per tensor.
//
// Every codec accepts the generic key `ef` (error feedback, 0/1); its default is the
// codec's own (on for lossy sparsifiers and quantizers, off for none/fp16). With ef=1 the
// codec is wrapped in compress::ErrorFeedback. The generic key `momentum` (default 0, needs
// ef=1) applies momentum before compression; the optimizer must then have none.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gradwire/compress/codec.h"

namespace gradwire::compress {

// Throws ConfigError for an unknown name (listing the known ones), an unknown key (listing
// the codec's keys) or an out-of-range value.
std::unique_ptr<Codec> create_codec(const std::string& spec, const TensorInfo& tensor);

// The canonical spec (all parameters, defaults filled in) without creating a codec for a
// real tensor; used to compare configurations across ranks.
std::string canonical_spec(const std::string& spec);

// True when `spec` creates codecs with error feedback (ef=1, given or by default).
bool uses_error_feedback(const std::string& spec);

// `spec` with momentum=m set (momentum applied before compression).
std::string with_momentum(const std::string& spec, double momentum);

// Registered codec names, sorted.
std::vector<std::string> codec_names();

}  // namespace gradwire::compress
