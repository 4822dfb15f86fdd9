#include "gradwire/core/half.h"

#include "gradwire/core/vectorize.h"

namespace gradwire {
namespace {

[[gnu::noinline]] void float_to_half_kernel(const float* __restrict src, uint8_t* __restrict dst,
                                            size_t n, float scale) {
  vector_loop(n, [=](size_t i) { store_u16(dst, i, float_to_half(scale * src[i])); });
}

[[gnu::noinline]] void half_to_float_kernel(const uint8_t* __restrict src, float* __restrict dst,
                                            size_t n) {
  vector_loop(n, [=](size_t i) { dst[i] = half_to_float(load_u16(src, i)); });
}

[[gnu::noinline]] void half_to_float_add_kernel(const uint8_t* __restrict src,
                                                float* __restrict dst, size_t n) {
  vector_loop(n, [=](size_t i) { dst[i] += half_to_float(load_u16(src, i)); });
}

}  // namespace

void float_to_half(std::span<const float> in, void* out, float scale) {
  float_to_half_kernel(in.data(), static_cast<uint8_t*>(out), in.size(), scale);
}

void half_to_float(const void* in, std::span<float> out) {
  half_to_float_kernel(static_cast<const uint8_t*>(in), out.data(), out.size());
}

void half_to_float_add(const void* in, std::span<float> accum) {
  half_to_float_add_kernel(static_cast<const uint8_t*>(in), accum.data(), accum.size());
}

}  // namespace gradwire
