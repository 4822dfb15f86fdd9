// Internal: the `spectral` codec, frequency-domain sparsification with range-based floats
// (docs/ALGORITHMS.md 5). Users go through compress::create_codec("spectral:theta=0.9").
//
// Keys: theta (fraction of the Fourier coefficients dropped, in [0, 1); default 0.9),
// theta_end and theta_steps (a schedule: theta moves linearly from theta to theta_end over
// the first theta_steps encodes, then stays; defaults theta and 0, i.e. none; the seed's
// convergence proof uses a diminishing theta), chunk (power of two in [64, 65536]; default
// 65536), bits (B, bits per real and per imaginary part, in [5, 16]; default 8), ef
// (default 1: at theta 0.9 without error feedback the Fashion-MNIST CNN ends 1.8 points
// below fp32, with it 0.1; docs/CODECS.md).
//
// Encoding: the flattened tensor is cut into chunks of n = chunk elements; the last chunk
// (the only one when the tensor is smaller than `chunk`) has the smallest power of two
// n_t >= its length, at least 64, and is zero-padded to it. Each chunk goes through a real
// FFT (n/2+1 complex coefficients X_j); the k = max(1, ceil((1 - theta)(n/2+1))) of largest
// |X_j| are kept (ties to the lower j), their real and imaginary parts in range-based
// floats (range_float.h) with one block per chunk. Decoding scatters them, runs the inverse
// real FFT, scales by 1/n and adds the chunk's real elements into the accumulator. Not
// additive (sums of payloads are not payloads).
//
// Body, after the header (count N):
//   u8 log2(chunk) | u8 B | then for each chunk, in order:
//     i8 e_max | u8 E | u32 count k (<= m = n_c/2 + 1, n_c the chunk's size) |
//     positions: a bitmap of m bits (coefficient j is bit j%8 of byte j/8; popcount k;
//                bits past m zero) when ceil(m/8) <= 2k, else u16 j[k] strictly increasing
//                (whichever is smaller; the bitmap on a tie) |
//     values: range_float_bytes(2k, B, E) bytes: Re X_j, Im X_j for each kept j in
//             increasing j, in one range-float block (e_max, E)
// E = 0 (then e_max = 0) says every kept value is zero; k = 0 needs E = 0.
//
// FFTW: plans (FFTW_ESTIMATE, single precision) are made once per codec at construction,
// under a process-wide mutex because FFTW's planner is not thread-safe, and executed with
// the new-array interface, which is. Decoding is deterministic for a given FFTW build and
// CPU: every rank decodes a payload to the same bits as long as the ranks run the same
// FFTW library on CPUs with the same SIMD extensions (FFTW picks its codelets by them).
#pragma once

#include <memory>

#include "gradwire/compress/codec.h"
#include "gradwire/core/spec.h"

namespace gradwire::compress {

inline constexpr uint8_t kSpectralVersion = 1;

// theta at encode `step` (0-based): start + (end - start) step / steps, then end. Ranks
// encode each tensor once per step, so they agree; each chunk's payload carries its count.
struct ThetaSchedule {
  double start = 0.9;
  double end = 0.9;
  uint64_t steps = 0;
  double at(uint64_t step) const;
};
inline constexpr size_t kSpectralMinChunk = 64;
inline constexpr size_t kSpectralMaxChunk = 65536;  // positions j <= n/2 fit in a u16

std::unique_ptr<Codec> make_spectral_codec(SpecReader& reader, const TensorInfo& tensor);

// Size of the last chunk of a tensor of `numel` elements (see above); `chunk` if numel is
// a multiple of it.
size_t spectral_last_chunk(size_t numel, size_t chunk);

}  // namespace gradwire::compress
