#include "codec_fuzz_cases.h"

#include <map>
#include <string>

namespace gradwire::fuzz {
namespace {

using compress::LayerKind;
using compress::TensorInfo;

TensorInfo vector_of(int64_t n) { return TensorInfo{"fuzz.weight", {n}, LayerKind::kOther}; }

// Sizes are small (fast iterations) and odd where tails and bitmap padding matter.
const std::map<std::string, std::vector<CodecCase>, std::less<>>& families() {
  static const auto* table = new std::map<std::string, std::vector<CodecCase>, std::less<>>{
      {"float",
       {{"none", vector_of(37)},
        {"fp16", vector_of(37)},
        {"bf16", vector_of(37)},
        {"fp16:ef=1", vector_of(37)}}},
      {"sparse",
       {{"topk:density=0.05", vector_of(203)},
        {"topk:density=0.5", vector_of(203)},  // bitmap layout
        {"laplace-topk:density=0.05", vector_of(500)},
        {"laplace-topk:density=0.02,center=median", vector_of(500)},
        {"gaussiank:density=0.05", vector_of(500)},
        {"dgc:density=0.05,sample=0.5", vector_of(500)},
        {"randomk:density=0.1", vector_of(203)},
        {"filter-topk:rate=0.25", TensorInfo{"fuzz.conv", {8, 3, 3, 3}, LayerKind::kConvWeight}},
        {"topk:density=0.05,momentum=0.9", vector_of(203)}}},
      {"quantizer",
       {{"2bit", vector_of(203)},
        {"2bit:threshold=0.1", vector_of(64)},
        {"qsgd", vector_of(203)},
        {"qsgd:levels=1,bucket=50", vector_of(203)},
        {"qsgd:levels=127,bucket=10", vector_of(37)},
        {"terngrad", vector_of(203)},
        {"signsgd", vector_of(203)},
        {"int8", vector_of(37)},
        {"int8:block=16", vector_of(203)}}},
      {"spectral",
       {{"spectral", vector_of(300)},
        {"spectral:theta=0.5,chunk=64,bits=5", vector_of(200)},
        {"spectral:theta=0.99,chunk=128,bits=16", vector_of(300)}}},
      {"lowrank",
       {{"powersgd:rank=2", TensorInfo{"fuzz.fc", {12, 10}, LayerKind::kFcWeight}},
        {"powersgd:rank=1,ef=0", TensorInfo{"fuzz.conv", {4, 2, 3, 3}, LayerKind::kConvWeight}},
        {"powersgd", vector_of(50)}}},
  };
  return *table;
}

}  // namespace

const std::vector<CodecCase>& codec_family(std::string_view family) {
  static const std::vector<CodecCase> empty;
  const auto it = families().find(family);
  return it == families().end() ? empty : it->second;
}

std::vector<std::string_view> codec_family_names() {
  std::vector<std::string_view> names;
  for (const auto& [name, cases] : families()) names.push_back(name);
  return names;
}

}  // namespace gradwire::fuzz
