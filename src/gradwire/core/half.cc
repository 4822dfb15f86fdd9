#include "gradwire/core/half.h"

#include "gradwire/core/vectorize.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define GRADWIRE_F16C_PATH 1
#endif

namespace gradwire {
namespace {

// Portable kernels: the branchless scalar conversions, vectorized by the compiler for the
// baseline instruction set.
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

#ifdef GRADWIRE_F16C_PATH
// F16C kernels, chosen at run time on CPUs that have F16C and AVX (not by -march: the
// binary runs everywhere). The hardware conversion rounds to nearest even like the scalar
// code, so finite values and infinities convert to the same bits on either path (NaNs stay
// NaN; their payload bits may differ).
[[gnu::target("avx,f16c")]] void float_to_half_f16c(const float* src, uint8_t* dst, size_t n,
                                                    float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(src + i), s);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) store_u16(dst, i, float_to_half(scale * src[i]));
}

[[gnu::target("avx,f16c")]] void half_to_float_f16c(const uint8_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = half_to_float(load_u16(src, i));
}

[[gnu::target("avx,f16c")]] void half_to_float_add_f16c(const uint8_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_cvtph_ps(h)));
  }
  for (; i < n; ++i) dst[i] += half_to_float(load_u16(src, i));
}

// CPUID leaf 1: ECX bit 27 OSXSAVE, 28 AVX, 29 F16C; and the OS must save the YMM
// registers (XCR0 bits 1 and 2), or AVX instructions fault.
bool cpu_has_avx_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  constexpr unsigned kNeeded = (1u << 27) | (1u << 28) | (1u << 29);
  if ((ecx & kNeeded) != kNeeded) return false;
  uint32_t xcr0_low = 0, xcr0_high = 0;
  __asm__("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  return (xcr0_low & 0x6u) == 0x6u;
}

bool use_f16c() {
  static const bool has = cpu_has_avx_f16c();
  return has;
}
#else
bool use_f16c() { return false; }
#endif

}  // namespace

bool half_conversion_uses_f16c() { return use_f16c(); }

void float_to_half(std::span<const float> in, void* out, float scale) {
#ifdef GRADWIRE_F16C_PATH
  if (use_f16c()) {
    return float_to_half_f16c(in.data(), static_cast<uint8_t*>(out), in.size(), scale);
  }
#endif
  float_to_half_kernel(in.data(), static_cast<uint8_t*>(out), in.size(), scale);
}

void half_to_float(const void* in, std::span<float> out) {
#ifdef GRADWIRE_F16C_PATH
  if (use_f16c()) {
    return half_to_float_f16c(static_cast<const uint8_t*>(in), out.data(), out.size());
  }
#endif
  half_to_float_kernel(static_cast<const uint8_t*>(in), out.data(), out.size());
}

void half_to_float_add(const void* in, std::span<float> accum) {
#ifdef GRADWIRE_F16C_PATH
  if (use_f16c()) {
    return half_to_float_add_f16c(static_cast<const uint8_t*>(in), accum.data(), accum.size());
  }
#endif
  half_to_float_add_kernel(static_cast<const uint8_t*>(in), accum.data(), accum.size());
}

}  // namespace gradwire
