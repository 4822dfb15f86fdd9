// Crash-safe file writes for checkpoints, and the checkpoint file framing.
//
// write_file_atomically never leaves a half-written file at `path`: readers see either the
// previous complete file or the new complete one. Errors are SystemError messages that name
// the path and the operating system's reason, so a full disk reads as "No space left on
// device" (or "File too large" under RLIMIT_FSIZE), not as a corrupt checkpoint later.
//
// SIGXFSZ: when a write crosses RLIMIT_FSIZE the kernel sends SIGXFSZ, whose default action
// kills the process. Library code does not change signal dispositions; a program that wants
// the EFBIG SystemError instead (the CLI does) ignores SIGXFSZ once at startup.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "gradwire/core/bytes.h"

namespace gradwire {

// Writes `bytes` to `path` atomically: write to "<path>.tmp.<pid>" in the same directory,
// fsync it, rename over `path`, then fsync the directory. On any failure before the rename
// (ENOSPC/EFBIG full disk, EACCES, ENOTDIR, missing directory, short write) throws SystemError
// whose message names the path and the OS reason, removes the temporary file, and leaves any
// previous file at `path` intact. If only the final directory fsync fails, the new file is
// already in place (but its durability is not guaranteed) and SystemError is thrown too.
// Two threads of one process must not write the same path concurrently (they would share
// the temporary name).
void write_file_atomically(const std::string& path, std::span<const uint8_t> bytes);

// Reads a whole file. std::nullopt if it does not exist (ENOENT); SystemError naming the path
// if it exists but cannot be read (permissions, a directory, an I/O error, a path component
// that is not a directory).
std::optional<Bytes> read_file_if_exists(const std::string& path);

// Creates the directory and its missing parents (like `mkdir -p`); existing directories are
// fine. SystemError with the reason otherwise, e.g. when a path component is a regular file.
void make_directories(const std::string& path);

// --- checkpoint framing --------------------------------------------------------------------

// Format version written by frame_checkpoint and the only one unframe_checkpoint accepts.
inline constexpr uint32_t kCheckpointFormatVersion = 1;
// Bytes of framing around the payload: magic (4) + version (4) + length (8) + CRC (4).
inline constexpr size_t kCheckpointFramingBytes = 20;

// A checkpoint file = magic "GWCK", u32 format version, u64 payload length, payload,
// u32 CRC-32 (IEEE, of the payload); all little-endian.
Bytes frame_checkpoint(std::span<const uint8_t> payload);

// Validates magic, version, length and CRC; PayloadError with a precise message otherwise
// (wrong magic, unsupported version, truncated, trailing bytes, CRC mismatch). Returns the
// payload.
Bytes unframe_checkpoint(std::span<const uint8_t> file);

// Standard CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, as zlib's crc32()).
// crc32("123456789") == 0xCBF43926.
uint32_t crc32(std::span<const uint8_t> bytes);

}  // namespace gradwire
