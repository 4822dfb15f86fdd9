// Which kind of layer a parameter belongs to, from its name and shape alone (so the same
// rule serves libtorch modules and any other source of named tensors):
//   "...bias"                      -> kBias
//   weight with 3-5 dims           -> kConvWeight  [C_out, C_in, k...]
//   weight with 2 dims             -> kFcWeight    [out, in] (linear, embedding)
//   1-dim non-bias (norm scales)   -> kNorm
//   anything else                  -> kOther
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gradwire/compress/codec.h"

namespace gradwire::compress {

LayerKind classify_parameter(const std::string& name, const std::vector<int64_t>& shape);

}  // namespace gradwire::compress
