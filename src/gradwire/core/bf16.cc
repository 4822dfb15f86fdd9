#include "gradwire/core/bf16.h"

#include "gradwire/core/vectorize.h"

namespace gradwire {
namespace {

[[gnu::noinline]] void float_to_bf16_kernel(const float* __restrict src, uint8_t* __restrict dst,
                                            size_t n) {
  vector_loop(n, [=](size_t i) { store_u16(dst, i, float_to_bf16(src[i])); });
}

[[gnu::noinline]] void bf16_to_float_kernel(const uint8_t* __restrict src, float* __restrict dst,
                                            size_t n) {
  vector_loop(n, [=](size_t i) { dst[i] = bf16_to_float(load_u16(src, i)); });
}

[[gnu::noinline]] void bf16_to_float_add_kernel(const uint8_t* __restrict src,
                                                float* __restrict dst, size_t n) {
  vector_loop(n, [=](size_t i) { dst[i] += bf16_to_float(load_u16(src, i)); });
}

}  // namespace

void float_to_bf16(std::span<const float> in, void* out) {
  float_to_bf16_kernel(in.data(), static_cast<uint8_t*>(out), in.size());
}

void bf16_to_float(const void* in, std::span<float> out) {
  bf16_to_float_kernel(static_cast<const uint8_t*>(in), out.data(), out.size());
}

void bf16_to_float_add(const void* in, std::span<float> accum) {
  bf16_to_float_add_kernel(static_cast<const uint8_t*>(in), accum.data(), accum.size());
}

}  // namespace gradwire
