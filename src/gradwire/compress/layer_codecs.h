// Internal: codecs that need a tensor's layer structure (shape), used by layer policies
// (policy.h) and selectable by name like any codec.
#pragma once

#include <memory>

#include "gradwire/compress/codec.h"
#include "gradwire/core/spec.h"

namespace gradwire::compress {

// `filter-topk`: sends the most important output filters of a convolution weight whole
// (ALGORITHMS.md 4.2). See sparsify/filter_topk_codec.cc.
std::unique_ptr<Codec> make_filter_topk_codec(SpecReader& reader, const TensorInfo& tensor);

inline constexpr uint8_t kFilterTopKVersion = 1;

// `powersgd`: rank-r PowerSGD with warm start and its own error feedback (the factory
// reads `ef`; the registry does not wrap it). See lowrank/powersgd_codec.cc.
std::unique_ptr<Codec> make_powersgd_codec(SpecReader& reader, const TensorInfo& tensor);

// Hylo's adaptive filter rate p = clip(p_max (t_size / numel)^gamma, p_min, p_max).
double hylo_filter_rate(size_t numel, double p_max, double p_min, double gamma, double t_size);

}  // namespace gradwire::compress
