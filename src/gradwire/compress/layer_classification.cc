#include "gradwire/compress/layer_classification.h"

namespace gradwire::compress {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

LayerKind classify_parameter(const std::string& name, const std::vector<int64_t>& shape) {
  if (ends_with(name, "bias")) return LayerKind::kBias;
  if (shape.size() >= 3 && shape.size() <= 5) return LayerKind::kConvWeight;
  if (shape.size() == 2) return LayerKind::kFcWeight;
  if (shape.size() == 1) return LayerKind::kNorm;
  return LayerKind::kOther;
}

}  // namespace gradwire::compress
